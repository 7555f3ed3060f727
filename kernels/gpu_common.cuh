// gpu_common.cuh: what every CUDA file shares: error checking that turns a CUDA failure into an err
// message (never an exit), and loads that read fp32 or bf16 inputs alike.
#pragma once

#include <cuda_bf16.h>
#include <cuda_runtime.h>
#include <stdlib.h>
#include <string.h>

#include "../core/err.h"

// Evaluates a CUDA call; on failure writes "what: cuda error text" into e and returns -1.
#define CUDA_TRY(call, what)                                                                       \
    do {                                                                                           \
        cudaError_t rc_ = (call);                                                                  \
        if (rc_ != cudaSuccess) return err_set(e, "%s: %s", (what), cudaGetErrorString(rc_));      \
    } while (0)

// After a launch: a bad configuration shows up in cudaGetLastError.
#define CUDA_LAUNCHED(what) CUDA_TRY(cudaGetLastError(), (what))

// 1 when an sm_90a kernel can run here: the environment variable env is not "0", the GPU is
// compute 9.0 and this build holds kernel's sm_90a image (the *_wgmma.cu files; a missing image is
// an answer, not an error to carry). Callers ask once per process.
static inline int gpu_sm90a_usable(const char *env, const void *kernel) {
    const char *v = getenv(env);
    cudaFuncAttributes fa;
    int dev = 0, major = 0, minor = 0;
    const int usable =
        !(v && !strcmp(v, "0")) && cudaGetDevice(&dev) == cudaSuccess &&
        cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, dev) == cudaSuccess &&
        cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, dev) == cudaSuccess &&
        major == 9 && minor == 0 && cudaFuncGetAttributes(&fa, kernel) == cudaSuccess;
    cudaGetLastError();
    return usable;
}

// Multiprocessors of the current GPU, or 0 when it cannot say (the error is cleared).
static inline int gpu_sm_count(void) {
    int dev = 0, sms = 0;
    if (cudaGetDevice(&dev) != cudaSuccess ||
        cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, dev) != cudaSuccess)
        cudaGetLastError(), sms = 0;
    return sms > 0 ? sms : 0;
}

// 2^x on the special-function unit (flushes denormal results to 0; ex2(-inf) = 0): what __expf
// runs after its multiply by log2 e, without its range fix-up
__device__ __forceinline__ float ex2(float x) {
    float y;
    asm("ex2.approx.ftz.f32 %0, %1;\n" : "=f"(y) : "f"(x));
    return y;
}

__device__ __forceinline__ float ld(const float *p) {
    return *p;
}
__device__ __forceinline__ float ld(const __nv_bfloat16 *p) {
    return __bfloat162float(*p);
}

// Four consecutive values (p 8-byte aligned for bf16, 16-byte aligned for fp32).
__device__ __forceinline__ void ld4(const float *p, float *out) {
    const float4 v = *reinterpret_cast<const float4 *>(p);
    out[0] = v.x, out[1] = v.y, out[2] = v.z, out[3] = v.w;
}
__device__ __forceinline__ void ld4(const __nv_bfloat16 *p, float *out) {
    const uint2 raw = *reinterpret_cast<const uint2 *>(p);
    const __nv_bfloat162 a = *reinterpret_cast<const __nv_bfloat162 *>(&raw.x);
    const __nv_bfloat162 b = *reinterpret_cast<const __nv_bfloat162 *>(&raw.y);
    const float2 fa = __bfloat1622float2(a), fb = __bfloat1622float2(b);
    out[0] = fa.x, out[1] = fa.y, out[2] = fb.x, out[3] = fb.y;
}

// The sum over a warp, every lane gets it (double: the probes' column sums).
__device__ __forceinline__ double warp_sum(double v) {
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
    return v;
}

// The same in float (a float's shuffles, as the fp32 kernels' products want).
__device__ __forceinline__ float warp_sumf(float v) {
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
    return v;
}

// The sum of v over the block (blockDim.x a multiple of 32, at most 1024); every thread gets it.
// sh holds a value a warp; R is float or double, the warps' shuffles run in double either way.
template <typename R> __device__ __forceinline__ R block_sum(R v, R *sh) {
    v = (R)warp_sum((double)v);
    const int w = threadIdx.x >> 5, nw = blockDim.x >> 5;
    __syncthreads(); // sh may still be read by a previous call
    if ((threadIdx.x & 31) == 0) sh[w] = v;
    __syncthreads();
    R t = 0;
    for (int i = 0; i < nw; i++) t += sh[i];
    return t;
}

// The benchmark knobs' pass timing (MIXSCOPE_DELTA_PROFILE, MIXSCOPE_KATA_PROFILE, ...): events 0
// .. N on the stream st; mark(i) records event i, add(ms) waits for event N and adds the N
// intervals between consecutive events to ms[0 .. N) (a pass over several launches sums). Off, it
// creates and records nothing; the events go with the object, an early return included.
template <int N> struct gpu_pass_timer {
    bool on;
    cudaStream_t st;
    cudaEvent_t ev[N + 1] = {};
    gpu_pass_timer(bool on_, cudaStream_t st_) : on(on_), st(st_) {
        for (int i = 0; on && i <= N; i++) cudaEventCreate(&ev[i]);
    }
    ~gpu_pass_timer() {
        for (int i = 0; on && i <= N; i++) cudaEventDestroy(ev[i]);
    }
    gpu_pass_timer(const gpu_pass_timer &) = delete;
    gpu_pass_timer &operator=(const gpu_pass_timer &) = delete;
    void mark(int i) {
        if (on) cudaEventRecord(ev[i], st);
    }
    void add(float *ms) {
        if (!on) return;
        cudaEventSynchronize(ev[N]);
        for (int i = 0; i < N; i++) {
            float t;
            if (cudaEventElapsedTime(&t, ev[i], ev[i + 1]) == cudaSuccess) ms[i] += t;
        }
    }
};
