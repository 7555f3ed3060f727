/* model_gpu.h: a model stepped token by token with everything resident on the GPU: weights (fp32),
 * every layer's state (or KV cache) and convolution caches, and the buffers of up to max_batch
 * tokens per call. Every model family of one kind of layer:
 *   - the delta rule: gated_deltanet, delta_net, kaczmarz_deltanet (cores gdn, deltanet or
 *     kaczmarz, a swapped core too; kernels/delta_steps.cu, one launch for a call's tokens);
 *   - decayed linear attention: gla and mamba2 with their cores (kernels/ld_steps.cu, likewise);
 *   - attention: transformer and parallax, cores softmax or parallax (the KV cache stays on the
 *     GPU; the cache write and decode read the position on the device, so a call replays as a
 *     graph, up to 16384 cache slots without a window: longer caches take it as a launch
 *     argument, without graphs);
 *   - kata (every variant) and kalman: the raw lanes' step kernels, a launch or three a token
 *     (Kalman's lane probes are megabytes a token, so its calls may be shorter:
 *     model_gpu_max_batch).
 * Key heads (gla: head_dim, mamba2 and kalman: state_size) up to 256 wide. Hybrids (fla's attn
 * key: softmax / parallax attention layers among another family's) too, each attention
 * specification with its own heads, window and RoPE.
 *
 * model_gpu_step computes what n calls of model_step compute (the same fp32 arithmetic, no TF32),
 * with the core's and the family's probes, but copies results to the host once per call. It runs
 * the n tokens layer by layer (the dense products of all n tokens at once, the recurrence token by
 * token inside one kernel per layer), so a call of 64 tokens reads the weights once. The GPU copy
 * of the state is the current one between model_gpu_upload and model_gpu_download: stepping the
 * model on the CPU in between, or model_reset / model_swap, needs an upload (after a swap or a
 * reload: a new model_gpu_init). Hooks (m->layer_hook, layer_pre_hook) are not called; what the
 * recall tracker records through them (viz/recall.h's "k", "v", "recall") model_gpu_step_ex
 * computes on the GPU.
 *
 * Implemented by models/model_gpu.c (host) and kernels/gpu_model.cu (device); a build without CUDA
 * answers model_gpu_supported with "no GPU in this build". */
#ifndef MIXSCOPE_MODEL_GPU_H
#define MIXSCOPE_MODEL_GPU_H

#include <stddef.h>
#include <stdint.h>

#include "../core/err.h"

struct model;
typedef struct model_gpu model_gpu;

/* 1 when model m can step resident on the GPU; otherwise 0 and a one-line reason. */
int model_gpu_supported(const struct model *m, char *why, size_t n);
/* Uploads the weights (fp32), allocates states, conv caches and per-token buffers for up to
 * max_batch tokens per call (fewer when that many tokens' probes would pass
 * MODEL_GPU_PROBE_BYTES: model_gpu_max_batch says how many); starts at the model's current state
 * (uploads m's states, caches, pos). */
#define MODEL_GPU_PROBE_BYTES ((size_t)256 << 20)
int model_gpu_init(model_gpu **out, const struct model *m, int max_batch, err *e);
/* The most tokens one call takes. */
int model_gpu_max_batch(const model_gpu *g);
void model_gpu_free(model_gpu *g);
/* Uploads m's current states / conv caches / pos (after a reset or CPU stepping). */
int model_gpu_upload(model_gpu *g, const struct model *m, err *e);
/* Downloads the GPU's states / conv caches / pos into m (before CPU stepping or a view of the
 * state). */
int model_gpu_download(model_gpu *g, struct model *m, err *e);
/* Steps n <= max_batch tokens from the current position, one token at a time with the cores' step
 * (exact fp32, the same arithmetic as the CPU reference, no TF32). Outputs (each may be NULL):
 *   logits  host [n, vocab]   (NULL: logits stay on the GPU)
 *   top     host [n] argmax id and topp host [n] its probability
 *   nll     host [n] -log p(next) given next-token ids next[n] (next may be NULL: NaN; so does an
 *           id < 0)
 *   probes  host [n, layers, mixer_probe_floats(core)]: the core's probes in the CPU layout (when
 *           the layers' cores differ, token t's block is every layer's probes one after the
 *           other: model_gpu_probe_floats)
 *   fprobes host [n, layers, family nprobes, H]: the family probes (family.h), if any (a
 *           hybrid's attention layers: not written)
 *   state   host: the state of every layer after the last token (layer by layer,
 *           mixer_state_floats each; an attention layer's is its KV cache)
 * The host copies happen once per call (asynchronously where possible), not per token. Token ids
 * are checked first (nothing runs when one is outside the vocabulary); after any other error the
 * GPU copy of the state is undefined (upload again). */
int model_gpu_step(model_gpu *g, const int32_t *tokens, int n, const int32_t *next, float *logits,
                   int32_t *top, float *topp, float *nll, float *probes, float *fprobes,
                   float *state, err *e);

/* The readback window of model_gpu_step_ex: viz/recall.h's RECALL_WINDOW. */
#define MODEL_GPU_RECALL_WINDOW 256

/* What model_gpu_step_ex copies back; each NULL: not copied. The first seven are model_gpu_step's
 * outputs. With KH, Kdk, Kdv the most heads and widest keys and values of any layer's core
 * (model_gpu_kv_shape; the config's Hv, dk, dv but in a hybrid), and H the heads of the model's
 * own layers (the config's Hv):
 *   k       host [n, layers, KH, Kdk]: the key each head's core saw (gdn and deltanet: after the
 *           family's l2 / sum normalisation; kaczmarz: the raw key; a key head repeated for its
 *           value heads; attention: after RoPE), viz/recall.h's "k"; a layer of fewer heads or
 *           narrower keys leaves the rest NaN (as the trace holds it)
 *   v       host [n, layers, KH, Kdv]: the value the core saw, viz/recall.h's "v"
 *   recall  host [n, layers, H, MODEL_GPU_RECALL_WINDOW] (a hybrid's attention layers NaN):
 *           entry j of token t is
 *           |S_t^T k_(t-j) - v_(t-j)| / |v_(t-j)|, the relative error of reading key t-j's value
 *           back from the state after token t (viz/recall.h's "recall"); NaN where the window
 *           holds no key t-j (j > t, or before an upload / a gap, below). */
typedef struct model_gpu_out {
    float *logits;
    int32_t *top;
    float *topp, *nll, *probes, *fprobes, *state;
    float *k, *v, *recall;
    /* 1: probes without the lane-wide ones (Kalman's [M, S] probes, megabytes a token): each
     * layer's block comes back from its first probe after them (the lane-wide probes lie in one
     * run at the head of Kalman's block); their floats are left as the buffer had them */
    int probes_tail;
} model_gpu_out;

/* model_gpu_step with the keys, values and readback errors too. The window's keys reach back
 * across calls: the GPU keeps a ring of the last MODEL_GPU_RECALL_WINDOW - 1 keys and values of
 * every layer and head, advanced by each call that asks for k, v or recall. A call that asks for
 * none of them, model_gpu_upload and model_gpu_init empty it (the keys before are NaN, as the CPU
 * tracker has them after a gap); model_gpu_recall_fill puts recorded keys back.
 *
 * recall is computed, not tracked: the recurrence kernel also stores each token's state, and per
 * token and head one fp32 product K_window [256, dk] x S_t [dk, dv] (cuBLAS SGEMM, pedantic, no
 * TF32; batched over the call's tokens, in chunks of MIXSCOPE_GM_RECALL_CHUNK = 64 tokens) gives
 * every readback; the errors are summed in double. Exact to float rounding against
 * recall_readback. The buffers (about 2 x 64 states and readbacks of a layer, the rings) are
 * allocated on the first call that asks. */
int model_gpu_step_ex(model_gpu *g, const int32_t *tokens, int n, const int32_t *next,
                      const model_gpu_out *out, err *e);

/* Refills the window after an upload at a position p > 0: k [n, layers, KH, Kdk] and
 * v [n, layers, KH, Kdv] of the n tokens before the current position, oldest first (NaN rows: keys
 * not recorded; the layout of model_gpu_step_ex's k and v, and of the trace's "k" and "v"). The
 * last MODEL_GPU_RECALL_WINDOW - 1 are kept. */
int model_gpu_recall_fill(model_gpu *g, const float *k, const float *v, int n, err *e);
/* How many tokens before the current position the window holds (0 after init, an upload or a
 * call without k / v / recall; at most MODEL_GPU_RECALL_WINDOW - 1). */
int model_gpu_recall_held(const model_gpu *g);

/* The layout of model_gpu_step_ex's k and v: heads, key and value widths. */
void model_gpu_kv_shape(const model_gpu *g, int *heads, int *dk, int *dv);
/* Floats per token of model_gpu_step's probes (the sum over layers of the cores' probe floats)
 * and of its fprobes (layers x family probes x heads). */
size_t model_gpu_probe_floats(const model_gpu *g);
size_t model_gpu_fprobe_floats(const model_gpu *g);
/* The position the GPU copy stands at. */
int model_gpu_pos(const model_gpu *g);
/* 1 when g was made from m and m's states still have the sizes they had then (model_reset with
 * another KV capacity changes an attention layer's); otherwise upload and download refuse. */
int model_gpu_matches(const model_gpu *g, const struct model *m);
/* 1 when the model's own layers' states are [H, dk, dv] matrices: the readback picture
 * (model_gpu_step_ex's recall) exists; 0 for attention (a KV cache), KATA (a feature-space state)
 * and Kalman. */
int model_gpu_has_readback(const model_gpu *g);
/* 1 when the state snapshot of the trace has something to show (every family but attention). */
int model_gpu_has_snapshot(const model_gpu *g);

#endif
