/* gpu_lanes.h: one mixer core stepped on the GPU with its state (or KV cache) resident there: the
 * raw lanes of `device gpu` (engine/raw_run.c). gpu_mixer_run (gpu.h) moves the whole state up
 * and down and allocates its buffers every call; a gpu_lane uploads the state once
 * (gpu_lane_init), allocates every buffer for up to max_batch tokens once, and then each
 * gpu_lane_step moves only the tokens' inputs up (one copy) and their outputs and probes down
 * (one copy), with no allocation. The state comes back only when asked (gpu_lane_download, or
 * gpu_lane_sync: only what changed since the last transfer, e.g. the KV cache slots written).
 *
 * Every mixer gpu_mixer_supported(m, GPU_STEP) accepts: gdn, deltanet, kaczmarz, gla, mamba2,
 * kalman, kata (DeltaKATA: the CPU reference on a host copy, as gpu_mixer_run does), softmax,
 * parallax. The step is the GPU_STEP path of gpu_mixer_run in fp32 (the decode-step kernels token
 * by token; with probes the same probe kernels), so outputs, probes and states are the same.
 * C on both sides; kernels/gpu_none.c answers for builds without CUDA. */
#ifndef MIXSCOPE_GPU_LANES_H
#define MIXSCOPE_GPU_LANES_H

#include <stddef.h>

#include "../core/err.h"
#include "../mixers/mixer.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct gpu_lane gpu_lane;

/* A lane of core m with config c (copied; c->params, e.g. Kalman's a and p, are uploaded now),
 * its state uploaded from state_host (mixer_state_floats), buffers for up to max_batch tokens a
 * step. *out is NULL on failure. */
int gpu_lane_init(gpu_lane **out, const mixer_ops *m, const mixer_cfg *c, const float *state_host,
                  int max_batch, err *e);

/* Steps the x->T = n <= max_batch tokens of x (host, [n, H, width] per input) from position pos0
 * with the state on the device: o_host gets [n, H, dv], probes_host (NULL: no probes computed)
 * [n, mixer_probe_floats]. One copy up, one copy down, no device allocation. */
int gpu_lane_step(gpu_lane *L, const mixer_seq *x, int pos0, float *o_host, float *probes_host,
                  err *e);

/* The whole state into state_host / from state_host. */
int gpu_lane_download(gpu_lane *L, float *state_host, err *e);
int gpu_lane_upload(gpu_lane *L, const float *state_host, err *e);
/* Brings state_host, which held the lane's state at its last download / upload / sync, up to date
 * by copying only what the steps since then changed (a KV cache: the slots written; a recurrent
 * state: all of it). */
int gpu_lane_sync(gpu_lane *L, float *state_host, err *e);

/* Bytes of device memory the lane holds, and bytes copied so far up (to the device) and down
 * (states included). */
size_t gpu_lane_device_bytes(const gpu_lane *L);
void gpu_lane_traffic(const gpu_lane *L, size_t *up, size_t *down);

void gpu_lane_free(gpu_lane *L);

/* The device's free and total memory (cudaMemGetInfo), for tests. */
int gpu_mem_info(size_t *free_bytes, size_t *total_bytes, err *e);

#ifdef __cplusplus
}
#endif

#endif
