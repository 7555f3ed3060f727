// delta_state_wgmma.cu: the state pass of the chunked delta rule (delta_tc.cu) on Hopper's
// warpgroup products, for dk = 128. Built for sm_90a alone (the Makefile's *_wgmma rule); on other
// GPUs delta_state_wgmma_usable() says no and delta_tc.cu keeps its mma.sync state pass.
//
// Per head n and value slice of 64 rows (one warpgroup, 128 threads; grid (dv / 64, N)), chunks in
// order, with S^T [64 value rows x 128 keys] in the registers as a wgmma m64n128 accumulator:
//   Sc = S^T (bf16, the A fragments of the first product, stored for the output pass)
//   D = S^T W^T                 m64n64k16 x 8: A = Sc from registers, B = W [C][128] K-major
//   Delta^T = U^T - D           stored as Dt (bf16) for the output pass
//   S^T <- gamma_last S^T + (Delta^T diag(ks)) K
//                               m64n128k16 x 4: A = Delta^T diag(ks) from registers, B = K
//                               [C][128] read N-major (imm-trans-b), so K needs no transpose
// the same arithmetic as delta_tc_state (bf16 operands, fp32 accumulators), in two products a
// chunk instead of 64 mma.sync a warp. W, K (sw128 tiles) and U, GK (padded rows) stream through a
// ring of ST cp.async stages; the flags with prepare and output are delta_tc.cu's.
#include <cuda_bf16.h>
#include <cuda_runtime.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "delta_state_wgmma.cuh"
#include "gpu_common.cuh"
#include "mma.cuh"
#if defined(__CUDA_ARCH_FEAT_SM90_ALL) || !defined(__CUDA_ARCH__)
#include "wgmma.cuh"
#define DSW_HAVE_WGMMA 1
#endif

#define DSW_DK 128

// One ring stage: W, K [C][128] bf16 as sw128 tiles (16 KB each), U [C][64 + 8] bf16 (rows padded
// so that ldmatrix rows hit distinct banks), GK [2C] fp32; stages 1024-byte aligned.
// After the ring, each warp's staging of its 16 rows of Sc [16][128 + 8] and Dt [16][64 + 8]
// (bf16; stmatrix in, then 16-byte coalesced copies out: 48 four-byte stores a thread a chunk
// had filled the store queue, ncu's top stall).
template <int ST> struct dsw_smem {
    static constexpr int TILE = TC_C * DSW_DK * 2, LU = DSW_BV + 8, UB = TC_C * LU * 2;
    static constexpr int STAGE = (2 * TILE + UB + 2 * TC_C * 4 + 1023) / 1024 * 1024;
    static constexpr int LS = DSW_DK + 8, LD = TC_C + 8, WSTAGE = 16 * (LS + LD) * 2;
    static constexpr int BYTES = STAGE * ST + 4 * WSTAGE + 1024; // + the first stage's alignment
};

__device__ __forceinline__ float2 lds_f2(uint32_t a) {
    float2 v;
    asm volatile("ld.shared.v2.f32 {%0, %1}, [%2];\n" : "=f"(v.x), "=f"(v.y) : "r"(a));
    return v;
}
__device__ __forceinline__ float lds_f(uint32_t a) {
    float v;
    asm volatile("ld.shared.f32 %0, [%1];\n" : "=f"(v) : "r"(a));
    return v;
}

template <int ST>
__global__ void __launch_bounds__(128, 1)
    delta_state_wgmma(int T, int H, int dv, int nchunks, const bf16_t *k, tc_scratch sc,
                      float *state) {
#ifdef DSW_HAVE_WGMMA
    typedef dsw_smem<ST> L;
    extern __shared__ unsigned char dsw_raw[];
    unsigned char *base = (unsigned char *)(((uintptr_t)dsw_raw + 1023) & ~(uintptr_t)1023);
    const uint32_t abase = (uint32_t)__cvta_generic_to_shared(base);
    const int n = blockIdx.y, nsl = gridDim.x, bv0 = blockIdx.x * DSW_BV, b = n / H, hh = n % H;
    const int tid = threadIdx.x, warp = tid >> 5, lane = tid & 31, gid = lane >> 2, tig = lane & 3;
    auto stage_w = [&](int s) { return base + s * L::STAGE; };
    auto stage_u = [&](int s) { return (bf16_t *)(stage_w(s) + 2 * L::TILE); };
    auto stage_g = [&](int s) { return (float *)(stage_w(s) + 2 * L::TILE + L::UB); };

    // Copies: W and K, chunk lc (of 16) of rows lr + 8 i (rows 8 apart share their swizzle, so
    // the shared offsets step by 1024 bytes); U, piece uc of rows ur + 16 j; GK, 32 threads.
    const int lc = tid % 16, lr = tid / 16, ur = tid / 8, uc = (tid % 8) * 8;
    const uint32_t woff = sw128_chunk(TC_C, lr, lc);
    const size_t kstep = (size_t)H * DSW_DK; // one token of k
    const bf16_t *kthr = k + (((size_t)b * T + lr) * H + hh) * DSW_DK + lc * 8;
    int pre[8]; // ready flags of the next group of eight chunks
#pragma unroll
    for (int i = 0; i < 8; i++)
        pre[i] = i < nchunks ? ld_relaxed(sc.ready + (size_t)n * nchunks + i) : 1;
    auto issue = [&](int c, int s) {
        const size_t nc = (size_t)n * nchunks + c;
        // prep has written this chunk: checked eight chunks at a time, on flags loaded a group
        // ahead (pre; the round trip off the critical path), polled again only when one was 0
        if (c % 8 == 0) {
            const int *f = sc.ready + nc;
            const int m = min(8, nchunks - c);
            int all = 1;
#pragma unroll
            for (int i = 0; i < 8; i++) all &= i >= m || pre[i] != 0;
            for (unsigned spins = 0; !all;) {
                __nanosleep(128);
                if (++spins > (1u << 26)) __trap();
                all = 1;
#pragma unroll
                for (int i = 0; i < 8; i++) all &= i >= m || ld_relaxed(f + i) != 0;
            }
#pragma unroll
            for (int i = 0; i < 8; i++) pre[i] = c + 8 + i < nchunks ? ld_relaxed(f + 8 + i) : 1;
        }
        const bf16_t *W = sc.W + nc * TC_C * DSW_DK + lr * DSW_DK + lc * 8;
        const bf16_t *K = kthr + (size_t)c * TC_C * kstep;
        const bf16_t *U = sc.U + nc * TC_C * dv + (size_t)ur * dv + bv0 + uc;
        unsigned char *ws = stage_w(s) + woff, *ks = ws + L::TILE;
        bf16_t *us = stage_u(s) + ur * L::LU + uc;
        const bool whole = (c + 1) * TC_C <= T;
#pragma unroll
        for (int i = 0; i < TC_C / 8; i++) {
            cp_async16(ws + 1024 * i, W + 8 * i * DSW_DK);
            if (whole || c * TC_C + lr + 8 * i < T)
                cp_async16(ks + 1024 * i, K + (size_t)8 * i * kstep);
            else // rows past T: zero (0 x garbage could be NaN)
                *(uint4 *)(ks + 1024 * i) = make_uint4(0, 0, 0, 0);
        }
#pragma unroll
        for (int j = 0; j < TC_C / 16; j++)
            cp_async16(us + 16 * j * L::LU, U + (size_t)16 * j * dv);
        if (tid < 2 * TC_C / 4) cp_async16(stage_g(s) + tid * 4, sc.GK + nc * 2 * TC_C + tid * 4);
    };

    // S^T rows r0 = bv0 + 16 warp + gid and r0 + 8; h[4 j ..] key columns 8 j + 2 tig (+1)
    const int r0 = bv0 + warp * 16 + gid;
    // the warp's staging (stw, dtw) and this lane's stmatrix row in it (sts, dts): lane 8 i + j
    // gives row j of matrix i, i.e. row (i & 1) 8 + j, cols (i >> 1) 8 of a 16 x 16 block
    bf16_t *stw = (bf16_t *)(base + L::STAGE * ST + warp * L::WSTAGE), *dtw = stw + 16 * L::LS;
    const int mr = ((lane >> 3) & 1) * 8 + (lane & 7), mc = (lane >> 4) * 8;
    bf16_t *sts = stw + mr * L::LS + mc, *dts = dtw + mr * L::LD + mc;
    float h[64], d[32];
    const float *S = state + (size_t)n * DSW_DK * dv;
#pragma unroll
    for (int j = 0; j < 16; j++) {
        const int c0 = 8 * j + 2 * tig;
        h[4 * j] = S[(size_t)c0 * dv + r0];
        h[4 * j + 1] = S[(size_t)(c0 + 1) * dv + r0];
        h[4 * j + 2] = S[(size_t)c0 * dv + r0 + 8];
        h[4 * j + 3] = S[(size_t)(c0 + 1) * dv + r0 + 8];
    }
#pragma unroll
    for (int i = 0; i < 32; i++) d[i] = 0.0f;
#pragma unroll
    for (int s = 0; s < ST - 1; s++) {
        if (s < nchunks) issue(s, s);
        cp_async_commit();
    }
    for (int c = 0; c < nchunks; c++) {
        cp_async_wait<ST - 2>();
        fence_proxy_async(); // the stage's cp.async and zero stores, read next by wgmma
        __syncthreads();     // stage c is in; every thread is done with chunk c - 1
        // every 8 chunks (and at the end) publish how far Sc and Dt are written (the barrier
        // above ordered every thread's stores of the chunks before)
        if (tid == 0 && c > 0 && c % 8 == 0) st_release(sc.done + n * nsl + blockIdx.x, c);
        const int s = c % ST;
        const uint32_t aw = abase + s * L::STAGE, ak = aw + L::TILE;
        const uint64_t dW = wgmma_desc(aw, 16, 1024), dK = wgmma_desc(ak, TC_C * 128, 1024);
        const size_t nc = (size_t)n * nchunks + c;

        // S^T as bf16 A fragments: k16 step ks is n8 blocks 2 ks, 2 ks + 1 of the accumulator
        uint32_t ah[DSW_DK / 16][4];
#pragma unroll
        for (int ks = 0; ks < DSW_DK / 16; ks++) {
            ah[ks][0] = pack_bf16(h[8 * ks], h[8 * ks + 1]);
            ah[ks][1] = pack_bf16(h[8 * ks + 2], h[8 * ks + 3]);
            ah[ks][2] = pack_bf16(h[8 * ks + 4], h[8 * ks + 5]);
            ah[ks][3] = pack_bf16(h[8 * ks + 6], h[8 * ks + 7]);
        }
        // D = S^T W^T [64 rows x C tokens]
        wgmma_fence();
#pragma unroll
        for (int ks = 0; ks < DSW_DK / 16; ks++)
            wgmma_rs_n64(d, ah[ks], dW + (((ks >> 2) * TC_C * 128 + (ks & 3) * 32) >> 4), ks > 0);
        wgmma_commit();
        // while the products run: U^T of the warp's rows in the accumulators' layout (ldmatrix
        // .trans of the token-major stage: uf[jj][0..1] are U^T's n8 block 2 jj, uf[jj][2..3]
        // block 2 jj + 1, bf16 pairs with token 2 tig in the low half), ks and gamma_last, the
        // copy of chunk c + ST - 1 into the stage chunk c - 1 used, and Sc out
        const bf16_t *us = stage_u(s);
        uint32_t uf[TC_C / 16][4];
#pragma unroll
        for (int jj = 0; jj < TC_C / 16; jj++)
            ldmatrix_x4_trans(uf[jj], us + (jj * 16 + (lane >> 4) * 8 + (lane & 7)) * L::LU +
                                          warp * 16 + ((lane >> 3) & 1) * 8);
        const uint32_t agk = abase + s * L::STAGE + 2 * L::TILE + L::UB;
        float2 kk[TC_C / 8];
#pragma unroll
        for (int j = 0; j < TC_C / 8; j++) kk[j] = lds_f2(agk + (TC_C + j * 8 + 2 * tig) * 4);
        const float gl = lds_f(agk + (TC_C - 1) * 4);
        if (c + ST - 1 < nchunks) issue(c + ST - 1, (c + ST - 1) % ST);
        cp_async_commit();
        // Sc: the warp's 16 rows through its staging, out as 16-byte pieces (two rows a store)
        bf16_t *Sc = sc.Sc + (nc * dv + bv0 + warp * 16) * DSW_DK;
#pragma unroll
        for (int ks = 0; ks < DSW_DK / 16; ks++) stmatrix_x4(sts + ks * 16, ah[ks]);
        __syncwarp();
#pragma unroll
        for (int i = 0; i < 16 * DSW_DK / 8 / 32; i++) {
            const int p = lane + 32 * i, row = p / (DSW_DK / 8), col = p % (DSW_DK / 8) * 8;
            *(uint4 *)(Sc + row * DSW_DK + col) = *(const uint4 *)(stw + row * L::LS + col);
        }
        wgmma_wait<0>();
        wgmma_fence_regs<32>(d);

        // Delta^T = U^T - D, out through the staging like Sc; scaled by ks, the A fragments of
        // the update
        uint32_t ad[TC_C / 16][4], dq[TC_C / 16][4];
#pragma unroll
        for (int j = 0; j < TC_C / 8; j++) {
            const uint32_t ulo = uf[j >> 1][(j & 1) * 2], uhi = uf[j >> 1][(j & 1) * 2 + 1];
            const float x0 = __uint_as_float(ulo << 16) - d[4 * j];
            const float x1 = __uint_as_float(ulo & 0xffff0000u) - d[4 * j + 1];
            const float x2 = __uint_as_float(uhi << 16) - d[4 * j + 2];
            const float x3 = __uint_as_float(uhi & 0xffff0000u) - d[4 * j + 3];
            dq[j >> 1][(j & 1) * 2] = pack_bf16(x0, x1);
            dq[j >> 1][(j & 1) * 2 + 1] = pack_bf16(x2, x3);
            ad[j >> 1][(j & 1) * 2] = pack_bf16(x0 * kk[j].x, x1 * kk[j].y);
            ad[j >> 1][(j & 1) * 2 + 1] = pack_bf16(x2 * kk[j].x, x3 * kk[j].y);
        }
        // S^T <- gamma_last S^T + (Delta^T diag(ks)) K
#pragma unroll
        for (int i = 0; i < 64; i++) h[i] *= gl;
        wgmma_fence();
#pragma unroll
        for (int q = 0; q < TC_C / 16; q++) wgmma_rs_n128_tb(h, ad[q], dK + (q * 2048 >> 4));
        wgmma_commit();
        // while the update runs: Dt out
        bf16_t *Dt = sc.Dt + (nc * dv + bv0 + warp * 16) * TC_C;
#pragma unroll
        for (int q = 0; q < TC_C / 16; q++) stmatrix_x4(dts + q * 16, dq[q]);
        __syncwarp();
#pragma unroll
        for (int i = 0; i < 16 * TC_C / 8 / 32; i++) {
            const int p = lane + 32 * i, row = p / (TC_C / 8), col = p % (TC_C / 8) * 8;
            *(uint4 *)(Dt + row * TC_C + col) = *(const uint4 *)(dtw + row * L::LD + col);
        }
        wgmma_wait<0>(); // h is read next; ad and the stage stay untouched until then
        wgmma_fence_regs<64>(h);
    }
    cp_async_wait<0>();
    float *So = state + (size_t)n * DSW_DK * dv;
#pragma unroll
    for (int j = 0; j < 16; j++) {
        const int c0 = 8 * j + 2 * tig;
        So[(size_t)c0 * dv + r0] = h[4 * j], So[(size_t)(c0 + 1) * dv + r0] = h[4 * j + 1];
        So[(size_t)c0 * dv + r0 + 8] = h[4 * j + 2];
        So[(size_t)(c0 + 1) * dv + r0 + 8] = h[4 * j + 3];
    }
    __syncthreads();
    if (tid == 0) st_release(sc.done + n * nsl + blockIdx.x, nchunks);
#else
    __trap(); // no wgmma in this image: delta_state_wgmma_usable() keeps launches away
#endif
}

int delta_state_wgmma_usable(void) {
    static int usable = -1;
    if (usable >= 0) return usable;
    const char *env = getenv("MIXSCOPE_DELTA_WGMMA");
    cudaFuncAttributes fa;
    int dev = 0, major = 0, minor = 0;
    usable =
        !(env && !strcmp(env, "0")) && cudaGetDevice(&dev) == cudaSuccess &&
        cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, dev) == cudaSuccess &&
        cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, dev) == cudaSuccess &&
        major == 9 && minor == 0 && cudaFuncGetAttributes(&fa, delta_state_wgmma<4>) == cudaSuccess;
    cudaGetLastError(); // a missing image is an answer, not an error to carry
    return usable;
}

template <int ST>
static int dsw_launch(int T, int H, int N, int dv, int nchunks, const bf16_t *k, tc_scratch sc,
                      float *state, cudaStream_t stream, err *e) {
    const int bytes = dsw_smem<ST>::BYTES;
    CUDA_TRY(cudaFuncSetAttribute(delta_state_wgmma<ST>,
                                  cudaFuncAttributeMaxDynamicSharedMemorySize, bytes),
             "gpu delta prefill: shared memory (wgmma state pass)");
    delta_state_wgmma<ST>
        <<<dim3(dv / DSW_BV, N), 128, bytes, stream>>>(T, H, dv, nchunks, k, sc, state);
    CUDA_LAUNCHED("gpu delta prefill: state pass (wgmma)");
    return 0;
}

int delta_state_wgmma_launch(int T, int H, int N, int dv, int nchunks, int st, const bf16_t *k,
                             tc_scratch sc, float *state, cudaStream_t stream, err *e) {
    if (dv % DSW_BV != 0)
        return err_set(e, "gpu delta prefill (wgmma state pass): dv=%d not a multiple of %d", dv,
                       DSW_BV);
    return st == 3 ? dsw_launch<3>(T, H, N, dv, nchunks, k, sc, state, stream, e)
                   : dsw_launch<4>(T, H, N, dv, nchunks, k, sc, state, stream, e);
}
