/* gpu.h: the GPU backend as the rest of the program sees it. C on both sides: the CUDA sources in
 * kernels/ implement these with `extern "C"`; kernels/gpu_none.c answers for builds without CUDA.
 *
 * Two levels:
 *   - gpu_mixer_run: host arrays in, host arrays out (copies both ways). What the session, the
 *     tests and `compare device` use: the same contract as the CPU mixer's step / prefill.
 *   - gpu_delta_*, gpu_ld_*, gpu_kalman_*, gpu_kata_*, gpu_attn_* with device pointers: what the
 *     benchmarks time.
 * Every CUDA call is checked; a failure becomes an err message, never an exit. */
#ifndef MIXSCOPE_GPU_H
#define MIXSCOPE_GPU_H

#include <stddef.h>
#include <stdio.h>

#include "../core/err.h"
#include "../mixers/mixer.h"

#ifdef __cplusplus
extern "C" {
#endif

/* 1 when a CUDA device can be used; otherwise 0 and a one-line reason in why. */
int gpu_available(char *why, size_t n);

enum { GPU_STEP = 0, GPU_PREFILL = 1 };
enum { GPU_F32 = 0, GPU_BF16 = 1 }; /* precision of the q/k/v inputs (state is always fp32) */

/* 1 if mixer m has GPU kernels for this mode. */
int gpu_mixer_supported(const mixer_ops *m, int mode);

/* Runs the T tokens of x from position pos0 on the GPU: mode GPU_STEP launches the decode-step
 * kernel once per token (and fills probes [T, probe_floats] when probes != NULL), GPU_PREFILL the
 * chunked / scan / tiled kernel. state (host, mixer_state_floats) is read and updated; o (host)
 * receives [T, H, dv]. With GPU_BF16 the q/k/v inputs are rounded to bf16 on the device. */
int gpu_mixer_run(const mixer_ops *m, const mixer_cfg *c, float *state, const mixer_seq *x,
                  int pos0, float *o, float *probes, int mode, int precision, err *e);

/* ---- device-pointer entry points (benchmarks) ------------------------------------------- */

/* Gated delta rule over N = B*H independent heads, fla layout: q, k [B, T, H, dk], v [B, T, H, dv],
 * g, beta [B, T, H] (g may be NULL: DeltaNet), state [B, H, dk, dv] fp32 in/out, o [B, T, H, dv]
 * fp32. bf16 != 0: q, k, v are __nv_bfloat16. chunk: 16, 32 or 64. scratch: from
 * gpu_delta_scratch_bytes. bf16 inputs with chunk 64 and dk, dv in {64, 128} run on the tensor
 * cores (kernels/delta_tc.cu: bf16 products, fp32 state, as fla); the rest in fp32 FMA. */
size_t gpu_delta_scratch_bytes(int B, int T, int H, int dk, int dv, int chunk);
int gpu_delta_prefill(int B, int T, int H, int dk, int dv, int chunk, float scale, int bf16,
                      const void *q, const void *k, const void *v, const float *g,
                      const float *beta, float *state, float *o, void *scratch, void *stream,
                      err *e);
/* Kaczmarz (spec §8.5): the same on raw k, v with beta = eta, writing with
 * beta = eta / (|k|^2 + eps). scratch: from gpu_kaczmarz_scratch_bytes. */
size_t gpu_kaczmarz_scratch_bytes(int B, int T, int H, int dk, int dv, int chunk);
int gpu_kaczmarz_prefill(int B, int T, int H, int dk, int dv, int chunk, float scale, int bf16,
                         float eps, const void *q, const void *k, const void *v, const float *g,
                         const float *eta, float *state, float *o, void *scratch, void *stream,
                         err *e);
/* One decode step for B sequences: q, k [B, H, dk], v [B, H, dv], g, beta [B, H]. */
int gpu_delta_step(int B, int H, int dk, int dv, float scale, int bf16, const void *q,
                   const void *k, const void *v, const float *g, const float *beta, float *state,
                   float *o, void *stream, err *e);

/* gla (per_key = 1: g [B, T, H, dk]) and mamba2 (per_key = 0: g [B, T, H]), decayed linear
 * attention S = diag(exp(g)) S + k v^T, o = scale S^T q (kernels/linear_decay.cu): q, k
 * [B, T, H, dk], v [B, T, H, dv], state [B, H, dk, dv] fp32 in/out, o [B, T, H, dv] fp32; bf16:
 * q, k, v are __nv_bfloat16. chunk 16, 32 or 64; scratch from gpu_ld_scratch_bytes. */
size_t gpu_ld_scratch_bytes(int B, int T, int H, int dk, int dv, int chunk);
int gpu_ld_prefill(int B, int T, int H, int dk, int dv, int chunk, float scale, int bf16,
                   int per_key, const void *q, const void *k, const void *v, const float *g,
                   float *state, float *o, void *scratch, void *stream, err *e);
/* One decode step for B sequences: q, k [B, H, dk], v [B, H, dv], g [B, H, dk] or [B, H]. */
int gpu_ld_step(int B, int H, int dk, int dv, float scale, int bf16, int per_key, const void *q,
                const void *k, const void *v, const float *g, float *state, float *o, void *stream,
                err *e);

/* Kalman linear attention (kernels/kalman.cu), S states per channel and M channels (the mixer's dk
 * and dv): q, k [B, T, H, S], v [B, T, H, M] (bf16 when bf16), lambda_v [B, T, H, M] fp32 or NULL
 * (1), a, p [H, M, S] fp32 or NULL (0.9, 0.05), state lambda [B, H, M, S] then eta [B, H, M, S],
 * o [B, T, H, M] fp32. prior: decode_from_prior. walk: one thread per lane walks the tokens;
 * scan: the division-free homogeneous walk, split into time chunks composed as merged 3x3 maps
 * when the lanes alone do not fill the device (S in {8, 16, 32, 64, 128}; other S: the Mobius +
 * affine block scan). */
int gpu_kalman_walk(int B, int T, int H, int M, int S, float scale, int prior, int bf16,
                    const void *q, const void *k, const void *v, const float *lv, const float *a,
                    const float *p, float *state, float *o, void *stream, err *e);
int gpu_kalman_scan(int B, int T, int H, int M, int S, float scale, int prior, int bf16,
                    const void *q, const void *k, const void *v, const float *lv, const float *a,
                    const float *p, float *state, float *o, void *stream, err *e);

/* KATA, normalised variants (variant: mixers/kata.h; delta: gpu_kata_delta_step) (kernels/kata.cu):
 * q, k [B, T, H, dk], v [B, T, H, dv], state S [B, H, D, dv] then z [B, H, D], o [B, T, H, dv]
 * fp32. chunked: the chunked state form, state updated (bf16 m1 and mg on tensor cores,
 * kernels/kata_tc.cu). flash: the quadratic form, state0 NULL or read only. scratch from
 * gpu_kata_scratch_bytes with the calls' bf16 (bf16 chunked calls of T >= 64 need the tensor-core
 * path's chunk prefixes too; no call may then pass more tokens than the scratch was sized for). */
size_t gpu_kata_scratch_bytes(int B, int T, int H, int dk, int dv, int variant, int groups,
                              int bf16);
int gpu_kata_chunked(int B, int T, int H, int dk, int dv, int variant, int groups, int chunk,
                     float scale, float eps, int bf16, const void *q, const void *k, const void *v,
                     float *state, float *o, void *scratch, void *stream, err *e);
int gpu_kata_flash(int B, int T, int H, int dk, int dv, int variant, int groups, float scale,
                   float eps, int bf16, const void *q, const void *k, const void *v,
                   const float *state0, float *o, void *scratch, void *stream, err *e);

/* DeltaKATA (variant delta), one fp32 step for H heads (batch 1): q, k [H, dk], v [H, dv], beta
 * [H] (NULL: 1), state S [H, D, dv] then z [H, D] (PSD concat features of `groups` groups),
 * o [H, dv]; probes NULL or the mixer's layout. scratch: gpu_kata_delta_scratch_bytes, made ready
 * once by gpu_kata_delta_prepare (the feature codes; the per-head sums, which every step leaves
 * zeroed for the next). dv <= 128. */
size_t gpu_kata_delta_scratch_bytes(int H, int dk, int dv, int groups);
int gpu_kata_delta_prepare(int H, int dk, int dv, int groups, void *scratch, void *stream, err *e);
int gpu_kata_delta_step(int H, int dk, int dv, int groups, float scale, const float *q,
                        const float *k, const float *v, const float *beta, float *state, float *o,
                        float *probes, void *scratch, void *stream, err *e);

/* DeltaKATA's chunked form (kernels/kata_delta.cu), batch 1: q, k [T, H, dk], v [T, H, dv] (fp32,
 * or bf16 when bf16), beta [T, H] fp32 (NULL: 1), state and o as gpu_kata_delta_step's; chunk 16,
 * 32 or 64 tokens. fits: whether its blocks' shared memory holds dk and the chunk (any dv; else
 * the step). scratch: gpu_kata_delta_chunked_scratch_bytes (nothing to prepare). No probes. */
int gpu_kata_delta_chunked_fits(int dk, int chunk);
/* The chunk a call of n tokens without probes takes (n rounded up to 16, 32 or 64), 0: the step. */
int gpu_kata_delta_call_chunk(int n, int dk);
size_t gpu_kata_delta_chunked_scratch_bytes(int H, int dk, int dv, int groups, int chunk);
int gpu_kata_delta_chunked(int T, int H, int dk, int dv, int groups, int chunk, float scale,
                           int bf16, const void *q, const void *k, const void *v, const float *beta,
                           float *state, float *o, void *scratch, void *stream, err *e);

/* Causal softmax attention (r NULL) or Parallax (r given), flash forward (kernels/attention.cu):
 * q, r [B, Tq, H, dk], k [B, Tk, H, dk], v [B, Tk, H, dv]; query i sits at position pos0 + i and
 * sees the keys j <= pos0 + i (and pos0 + i - j < window when window > 0); o [B, Tq, H, dv] fp32.
 * bf16: all inputs bf16, on the tensor cores when dk = dv = 64 or 128. */
int gpu_attn_forward(int B, int Tq, int Tk, int H, int dk, int dv, int pos0, int window,
                     float scale, int bf16, const void *q, const void *r, const void *k,
                     const void *v, float *o, void *stream, err *e);
/* One decode step (batch 1) at position pos over a KV cache: q, r [H, dk] fp32 (r NULL: softmax),
 * cache K [max_t, H, dk] then V [max_t, H, dv] fp32 holding slots 0..pos, o [H, dv]. probes: NULL
 * or attention.h's probes [5 or 14][H]. scratch from gpu_attn_decode_scratch_bytes. */
size_t gpu_attn_decode_scratch_bytes(int H, int dv, int max_t);
int gpu_attn_decode(int H, int dk, int dv, int max_t, int pos, int window, float scale,
                    const float *q, const float *r, const float *cache, float *o, float *probes,
                    void *scratch, void *stream, err *e);

/* Y [T, out] = X [T, in] W^T (+ b), W as nn.Linear stores it ([out, in]), host arrays; weights are
 * kept on the device after their first use (keyed by host address). fp32, no TF32. */
int gpu_linear(float *y, const float *x, const float *W, const float *b, int T, int out, int in,
               err *e);
/* Frees every cached weight (call when a model is freed or replaced). */
void gpu_release_weights(void);

/* The delta family's probes as the GPU computes them (same definitions as mixers/delta_rule.h),
 * in the order kernels/delta_steps.cu's gm_probe_fin writes them when asked for this layout. */
enum {
    GDP_BETA,
    GDP_ETA,
    GDP_RHO,
    GDP_K_NORM,
    GDP_Q_NORM,
    GDP_G,
    GDP_ALPHA,
    GDP_HALF_LIFE,
    GDP_E_NORM,
    GDP_E_REL,
    GDP_R_NORM,
    GDP_R_CHECK,
    GDP_LOSS_BEFORE,
    GDP_LOSS_AFTER,
    GDP_WRITE_NORM,
    GDP_STATE_NORM,
    GDP_FORGET_REMOVED,
    GDP_ERASE_REMOVED,
    GDP_O_NORM,
    GDP_COUNT
};

/* Device memory helpers for benchmarks and tests. */
/* Exact attribution (mixers/attribution.h, kernels/attribution.cu) with device pointers: kind 0
 * delta family (g NULL: DeltaNet; kacz: beta holds eta and the write is eta / (|k|^2 + eps)),
 * 1 GLA (gk [T, H, dk]), 2 scalar decay (Mamba2: g). q, k [T, H, dk], g / beta [T, H], S0
 * [H, dk, dv] or NULL; M, Md (or NULL) [H, T, T], o_init [T, H, dv]; scratch from
 * gpu_attribution_scratch_bytes. dk <= 256. */
size_t gpu_attribution_scratch_bytes(int T, int H);
int gpu_attribution(int kind, int T, int H, int dk, int dv, float scale, int kacz, float eps,
                    const float *q, const float *k, const float *g, const float *gk,
                    const float *beta, const float *S0, float *M, float *Md, float *o_init,
                    void *scratch, void *stream, err *e);
/* The same with host arrays, as mixer_attribution takes them (gdn, deltanet, kaczmarz, gla,
 * mamba2). */
int gpu_attribution_host(const mixer_ops *m, const mixer_cfg *c, const float *init,
                         const mixer_seq *x, float *M, float *Md, float *o_init, err *e);

void *gpu_malloc(size_t bytes, err *e);
void gpu_free(void *p);
int gpu_copy_to_device(void *dst, const void *src, size_t bytes, err *e);
int gpu_copy_to_host(void *dst, const void *src, size_t bytes, err *e);
int gpu_sync(err *e);

#ifdef __cplusplus
}
#endif

#endif
