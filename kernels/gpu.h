/* gpu.h: the GPU backend as the rest of the program sees it. C on both sides: the CUDA sources in
 * kernels/ implement these with `extern "C"`; kernels/gpu_none.c answers for builds without CUDA. */
#ifndef MIXSCOPE_GPU_H
#define MIXSCOPE_GPU_H

#include <stddef.h>
#include <stdio.h>

#ifdef __cplusplus
extern "C" {
#endif

/* 1 when a CUDA device can be used; otherwise 0 and a one-line reason in why. */
int gpu_available(char *why, size_t n);

#ifdef __cplusplus
}
#endif

#endif
