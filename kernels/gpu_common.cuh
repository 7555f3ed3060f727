// gpu_common.cuh: what every CUDA file shares: error checking that turns a CUDA failure into an err
// message (never an exit), and loads that read fp32 or bf16 inputs alike.
#pragma once

#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include "../core/err.h"

// Evaluates a CUDA call; on failure writes "what: cuda error text" into e and returns -1.
#define CUDA_TRY(call, what)                                                                      \
    do {                                                                                          \
        cudaError_t rc_ = (call);                                                                 \
        if (rc_ != cudaSuccess) return err_set(e, "%s: %s", (what), cudaGetErrorString(rc_));     \
    } while (0)

// After a launch: a bad configuration shows up in cudaGetLastError.
#define CUDA_LAUNCHED(what) CUDA_TRY(cudaGetLastError(), (what))

__device__ __forceinline__ float ld(const float *p) {
    return *p;
}
__device__ __forceinline__ float ld(const __nv_bfloat16 *p) {
    return __bfloat162float(*p);
}
