/* gpu_bench.h: device-side helpers for the GPU benchmarks (bench/gpu/). */
#ifndef MIXSCOPE_GPU_BENCH_H
#define MIXSCOPE_GPU_BENCH_H

#include <stddef.h>

#include "../core/err.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef int (*gpu_bench_fn)(void *ctx, err *e);

/* n values uniform in [offset - scale, offset + scale), fp32 or bf16. */
int gpu_fill_uniform(void *dst, size_t n, int bf16, float scale, float offset,
                     unsigned long long seed, err *e);
/* Median over iters launches of fn (after warmup ones), timed with CUDA events, in ms. */
int gpu_time_median(gpu_bench_fn fn, void *ctx, int warmup, int iters, double *ms, err *e);
/* A stream for fn to launch on (gpu_time_graph_median captures it); NULL on failure (e set). */
void *gpu_bench_stream(err *e);
void gpu_bench_stream_free(void *stream);
/* fn's launches on `stream` captured once as a CUDA graph, then per iteration `replays` replays
 * back to back between two events: the median over iters of the time a replay, in ms. This is
 * how the peer's step is timed (torch.cuda.graph replays, bench/gpu/peers.py), so neither side
 * counts a host launch of its own. */
int gpu_time_graph_median(gpu_bench_fn fn, void *ctx, void *stream, int replays, int iters,
                          double *ms, err *e);
/* fn's launches captured `steps` times in one CUDA graph, replayed once per iteration: the median
 * time of one call inside a graph (no replay between calls), in ms. */
int gpu_time_graph_steps_median(gpu_bench_fn fn, void *ctx, void *stream, int steps, int iters,
                                double *ms, err *e);
/* An empty kernel on `stream` (a gpu_bench_fn's body): the floor of a one-kernel graph's replay. */
int gpu_bench_empty(void *stream, err *e);
/* bf16 matrix product rate (8192^3, fp32 accumulation, random data) through cuBLAS, TFLOP/s. */
int gpu_measure_matmul_tflops(double *tflops, err *e);
/* Device-to-device copy bandwidth, counting bytes read plus bytes written, GB/s. */
int gpu_measure_copy_gbps(double *gbps, err *e);

#ifdef __cplusplus
}
#endif

#endif
