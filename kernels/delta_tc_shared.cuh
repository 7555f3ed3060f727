// delta_tc_shared.cuh: what the delta family's tensor-core prefill kernels share across files
// (delta_tc.cu: prepare, the mma.sync state pass, output; delta_state_wgmma.cu: the sm_90a state
// pass): the chunk, the scratch's per-(head, chunk) arrays and the flags between kernels that run
// at the same time.
#pragma once

#include <stdint.h>

#include "mma.cuh"

#define TC_C 64 // chunk

// Segments of time (context parallelism within the card): the sm_90a state pass may cut a head's
// chunks into nseg segments of seglen chunks, each run by its own blocks at the same time. A
// segment j > 0 starts from a zero state TC_CP_WARM chunks or fewer before its first chunk, where
// the chunks between have decayed whatever came before below 2^TC_CP_LOG2TOL of it: lb (log2 of
// a bound on the norm of a chunk's state transition, from prepare) summed over them is at most
// TC_CP_LOG2TOL. Where they have not (no gate, or gates near 1), the segment walks from the first
// chunk instead, and its result is the same as without segments.
#define TC_CP_MAX     16    // segments at most
#define TC_CP_WARM    16    // chunks of warm-up at most
#define TC_CP_LOG2TOL -24.f // log2 of the decay the warm-up must reach

// The per-(head, chunk) arrays of the scratch, in order: W [C][dk], U [C][dv], P [C][C],
// Sc [dv][dk], Dt [dv][C] (bf16), then GK [2C] (fp32: gamma, ks) and lb (fp32, one a chunk).
// The fused form (delta_state_wgmma.cu's, MIXSCOPE_DELTA_FUSED) has no W, U, P, Sc or Dt: prepare
// writes AU = A diag(beta kc) [C][C] (bf16) in W's place and GC [2C] (fp32: G, the chunk's
// cumulative log2 decay, and kc) in U's, and the state block forms the rest itself.
struct tc_scratch {
    bf16_t *W, *U, *P, *Sc, *Dt;
    bf16_t *AU; // fused: = W
    float *GC;  // fused: = (float *)U
    float *GK;
    // lb[n][c]: log2 of a bound on |transition of chunk c| (sum over its tokens of log2 gamma_t
    // and log2 max(1, |1 - beta_t kc_t^2 |k_t|^2|), the norms of I - beta k k^T)
    float *lb;
    // the state at the first chunk, copied for the segments that walk from it (the launch's state
    // is overwritten with the last one by the last segment)
    float *state0;
    int nseg, seglen; // segments of the state pass (1: none) and chunks a segment
    // ready[n][c] = 1 once prep wrote chunk c of head n; done[n][seg][slice] = the chunk of head n
    // up to which (exclusive) segment seg of the state pass has written Sc and Dt (both zeroed by
    // the launch). They let the three kernels overlap: the state pass starts on the chunks prep
    // has finished, the output pass on the chunks the state pass has.
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

// The first chunk segment j of the state pass may need (its warm-up's earliest): prepare hands out
// its chunks segment by segment from there, so that every segment's chunks come at once.
__device__ __host__ __forceinline__ int tc_seg_from(int j, int seglen) {
    return j == 0 ? 0 : (j * seglen - TC_CP_WARM > 0 ? j * seglen - TC_CP_WARM : 0);
}
// Prepare's block y: the chunk it prepares, or -1. Slot p of segment j = y % nseg, p = y / nseg,
// covers chunks from tc_seg_from(j) up to where segment j + 1's begin (each chunk once).
__device__ __forceinline__ int tc_prep_chunk(int y, int nchunks, int nseg, int seglen) {
    if (nseg == 1) return y;
    const int j = y % nseg, c = tc_seg_from(j, seglen) + y / nseg;
    const int end = j + 1 == nseg ? nchunks : tc_seg_from(j + 1, seglen);
    return c < end ? c : -1;
}
// The output pass's block y: the chunk it writes, or -1: slot p of segment j, chunk j seglen + p,
// so that the output follows every segment at once.
__device__ __forceinline__ int tc_out_chunk(int y, int nchunks, int nseg, int seglen) {
    if (nseg == 1) return y;
    const int c = (y % nseg) * seglen + y / nseg;
    return c < nchunks && y / nseg < seglen ? c : -1;
}
