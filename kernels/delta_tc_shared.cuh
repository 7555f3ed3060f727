// delta_tc_shared.cuh: what the delta family's tensor-core prefill kernels share across files
// (delta_tc.cu: prepare, the mma.sync state pass, output; delta_state_wgmma.cu: the sm_90a state
// pass): the chunk, the scratch's per-(head, chunk) arrays and the flags between kernels that run
// at the same time.
#pragma once

#include <stdint.h>

#include "mma.cuh"

#define TC_C 64 // chunk

// The per-(head, chunk) arrays of the scratch, in order: W [C][dk], U [C][dv], P [C][C],
// Sc [dv][dk], Dt [dv][C] (bf16), then GK [2C] (fp32: gamma, ks).
struct tc_scratch {
    bf16_t *W, *U, *P, *Sc, *Dt;
    float *GK;
    // ready[n][c] = 1 once prep wrote chunk c of head n; done[n][slice] = chunks of head n whose Sc
    // and Dt the state pass has written (both zeroed by the launch). They let the three kernels
    // overlap: the state pass starts on the chunks prep has finished, the output pass on the
    // chunks the state pass has.
    int *ready, *done;
    // MIXSCOPE_DELTA_TRACE: [2 pass] the first start and [2 pass + 1] the last end of a block of
    // pass 0 (prepare), 1 (state) and 2 (output), in %globaltimer ns; NULL when off
    unsigned long long *trace;
};

// One block's start (end = 0) or end (end = 1) into trace, by its thread 0.
__device__ __forceinline__ void tc_trace(unsigned long long *trace, int pass, int end) {
    if (!trace) return;
    unsigned long long t;
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
    if (end)
        atomicMax(trace + 2 * pass + 1, t);
    else
        atomicMin(trace + 2 * pass, t);
}

// Flags between kernels that run at the same time. The writer: __syncthreads, then one thread's
// release store (a release is cumulative over the block's writes that the barrier ordered before
// it; the pattern of CUTLASS's semaphore). The reader: an acquire load, or, in the state pass's
// hot loop, relaxed loads (an acquire costs an L1 invalidation each there): its reads of the
// published data are cp.async.cg copies, which go to L2, the point of coherence, and are issued
// only after the flag was seen. A wait that outlasts ~10 s traps (the launch fails with an error)
// rather than hanging.
__device__ __forceinline__ int ld_acquire(const int *p) {
    int v;
    asm volatile("ld.acquire.gpu.global.s32 %0, [%1];" : "=r"(v) : "l"(p) : "memory");
    return v;
}
__device__ __forceinline__ int ld_relaxed(const int *p) {
    int v;
    asm volatile("ld.relaxed.gpu.global.s32 %0, [%1];" : "=r"(v) : "l"(p) : "memory");
    return v;
}
__device__ __forceinline__ void st_release(int *p, int v) {
    asm volatile("st.release.gpu.global.s32 [%0], %1;" ::"l"(p), "r"(v) : "memory");
}
__device__ __forceinline__ void wait_at_least(const int *p, int v) {
    unsigned spins = 0;
    while (ld_acquire(p) < v) {
        __nanosleep(128);
        if (++spins > (1u << 26)) __trap();
    }
}
