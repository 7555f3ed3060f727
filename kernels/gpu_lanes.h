/* gpu_lanes.h: one mixer core stepped on the GPU with its state (or KV cache) resident there: the
 * raw lanes of `device gpu` (engine/raw_run.c). gpu_mixer_run (gpu.h) moves the whole state up
 * and down and allocates its buffers every call; a gpu_lane uploads the state once
 * (gpu_lane_init), allocates every buffer for up to max_batch tokens once, and then each
 * gpu_lane_step moves only the tokens' inputs up (one copy) and their outputs and probes down
 * (one copy), with no allocation. The state comes back only when asked (gpu_lane_download, or
 * gpu_lane_sync: only what changed since the last transfer, e.g. the KV cache slots written).
 *
 * Every mixer gpu_mixer_supported(m, GPU_STEP) accepts: gdn, deltanet, kaczmarz, gla, mamba2,
 * kalman, kata (every variant; DeltaKATA through gpu_kata_delta_step), softmax, parallax. The
 * step is the GPU_STEP path of gpu_mixer_run in fp32 (the decode-step kernels token by token;
 * with probes the same probe kernels; the delta family a batch in one launch of the recurrence),
 * so outputs, probes and states agree to float rounding.
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
 * [n, mixer_probe_floats]. One copy up (an input passed twice, e.g. q = k, goes up once), one
 * copy down, no device allocation once the batch's graph exists. */
int gpu_lane_step(gpu_lane *L, const mixer_seq *x, int pos0, float *o_host, float *probes_host,
                  err *e);

/* gpu_lane_step in two halves, so that the host can work while the device steps: gpu_lane_begin
 * packs and copies the inputs up, launches the steps and the copy of outputs (and probes, when
 * `probes`) down, and returns without waiting; gpu_lane_end waits for them and writes o_host
 * [n, H, dv] and probes_host [n, mixer_probe_floats] (NULL when begun without probes). One step
 * may be begun at a time. gpu_lane_step is begin then end.
 *
 * The steps of a batch of n tokens run as one CUDA graph, captured the first time a batch of n
 * tokens with those inputs comes (per n, with and without probes) and replayed after; the same
 * kernels with the same arguments in the same order as launching them one by one, which is what
 * the attention lanes (softmax, parallax: their kernels take the position) and a lane whose
 * capture fails do. MIXSCOPE_LANES_GRAPH=0 (read at gpu_lane_init) launches one by one.
 */
int gpu_lane_begin(gpu_lane *L, const mixer_seq *x, int pos0, int probes, err *e);
int gpu_lane_end(gpu_lane *L, float *o_host, float *probes_host, err *e);
/* What the lane took so far: steps, graphs captured and replayed, the device's time from each
 * step's copy up to the end of its copy down (CUDA events), the host's time waiting for it in
 * gpu_lane_end, gpu_lane_init's time and the time spent capturing graphs. NULL-safe (zeros). */
typedef struct gpu_lane_stats {
    long steps, captured, replayed;
    double device_ms, wait_ms, init_ms, capture_ms;
} gpu_lane_stats;
void gpu_lane_get_stats(const gpu_lane *L, gpu_lane_stats *s);

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
