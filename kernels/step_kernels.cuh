// step_kernels.cuh: the one-token steps of the cores whose step is not a delta_steps.cuh /
// ld_steps.cuh batch, shared by the raw lanes (gpu_lanes.cu) and the model stepper
// (gpu_model.cu). Device pointers; every launch on `stream`; defined in the kernel's own file.
// C++ side only: a build without CUDA has no use for them (kernels/gpu.h holds the C interface).
#ifndef MIXSCOPE_STEP_KERNELS_CUH
#define MIXSCOPE_STEP_KERNELS_CUH

#include <stddef.h>

#include "../core/err.h"

// ld_steps' one-token twin with every probe (linear_decay.cu): N heads, per_key: gla's decay
extern "C" int gpu_ld_step_probes(int N, int dk, int dv, float scale, int per_key, const float *q,
                                  const float *k, const float *v, const float *g, float *state,
                                  float *o, float *acc, float *probes, void *stream, err *e);
// Kalman (kalman.cu), H heads of M channels and S states: the step in the CPU's arithmetic, and
// the step with every probe (probes: the mixer's layout)
extern "C" int gpu_kalman_step_probes(int H, int M, int S, float scale, int prior, const float *q,
                                      const float *k, const float *v, const float *lv,
                                      const float *a, const float *p, float *state, float *o,
                                      float *probes, void *stream, err *e);
extern "C" int gpu_kalman_step(int H, int M, int S, float scale, int prior, int bf16, const void *q,
                               const void *k, const void *v, const float *lv, const float *a,
                               const float *p, float *state, float *o, void *stream, err *e);
// KATA (kata.cu): one fp32 step with every probe (the mixer's layout; NULL: none); scratch from
// gpu_kata_scratch_bytes(1, 1, ...)
extern "C" int gpu_kata_step_probes(int H, int dk, int dv, int variant, int groups, float scale,
                                    float eps, const float *q, const float *k, const float *v,
                                    float *state, float *o, float *probes, void *scratch,
                                    void *stream, err *e);
// attention (attention.cu): RoPE (when rope) and the cache write of T tokens from pos0; q (and
// r) copied to qo (ro) as the decode reads them
extern "C" int gpu_attn_prep(int T, int H, int dk, int dv, int pos0, int rope, float theta,
                             int max_t, int bf16, const void *q, const void *r, const void *k,
                             const void *v, float *cache, float *qo, float *ro, void *stream,
                             err *e);
// The same at the position *dpos on the device (fp32): a captured graph replays with the call's
extern "C" int gpu_attn_prep_dpos(int T, int H, int dk, int dv, const int *dpos, int rope,
                                  float theta, int max_t, const float *q, const float *r,
                                  const float *k, const float *v, float *cache, float *qo,
                                  float *ro, void *stream, err *e);
// gpu_attn_decode of n tokens at positions *dpos .. *dpos + n - 1 (the caller keeps them inside
// the cache, their keys and values written), in one pair of launches over a grid of
// gpu_attn_decode_splits(max_t, window) splits a head and token, whatever the position (the
// splits a position does not need return at once): q, r [n, H, dk]; token t's o at o + t o_stride,
// its probes (NULL: none) at probes + t p_stride; scratch n times gpu_attn_decode_scratch_bytes
extern "C" int gpu_attn_decode_splits(int max_t, int window);
extern "C" int gpu_attn_decode_dpos(int H, int dk, int dv, int max_t, const int *dpos, int n,
                                    int window, float scale, const float *q, const float *r,
                                    const float *cache, float *o, size_t o_stride, float *probes,
                                    size_t p_stride, void *scratch, void *stream, err *e);

#endif
