// kata_tc_wgmma.cu: kata_tc.cu's state and read passes on Hopper's warpgroup products (sm_90a
// only; the Makefile builds *_wgmma.cu for compute_90a), dv = 128. The algorithm, the tiles, the
// scratch and the rounding are kata_tc.cu's: only who multiplies changes. A warpgroup's product
// reads both operands from shared memory, once for the whole warpgroup, where mma.sync had each
// warp load its own fragments (the state pass spent 0.39 fragment loads a product, and more
// instructions on addresses than on products).
//
//   kt_state_wgmma  block (two tiles, head), a warpgroup a tile: S_int [64 features, 128] an
//                   m64n128 accumulator; a step of 64 tokens is four m64n128k16 with A =
//                   psi_tile(K)^T (M-major: psi is built token by token) and B = V (N-major).
//   kt_read_wgmma   block (128 tokens, head), a warpgroup 64 tokens: o an m64n128 accumulator; a
//                   tile is four m64n128k16 with A = psi_w(Q) (K-major) and B = the Sc tile
//                   (N-major).
// Shared tiles are sw128 (wgmma.cuh): 64 rows of 128 bytes a region, 16-byte chunks swizzled.
// On other GPUs kata_tc_wgmma_usable() says no and kata_tc.cu keeps its mma.sync passes.
#include <cuda_bf16.h>
#include <cuda_runtime.h>
#include <stdlib.h>
#include <string.h>

#include "gpu.h"
#include "gpu_common.cuh"
#include "kata_tc_shared.cuh"
#if defined(__CUDA_ARCH_FEAT_SM90_ALL) || !defined(__CUDA_ARCH__)
#include "wgmma.cuh"
#define KTW_HAVE_WGMMA 1
#endif

#define KTW_DV 128

// The dynamic shared memory's first 1024-byte boundary (sw128 tiles want it).
__device__ __forceinline__ unsigned char *ktw_align(unsigned char *p) {
    const unsigned a = smem_u32(p);
    return p + ((1024 - (a & 1023)) & 1023);
}

// ---------------------------------------------------------------- the state pass

// Shared: V of two stages [2][64 tokens][128] (16 KB each, two sw128 regions), psi_tile(K) of the
// two tiles [2][64 tokens][64 features] (8 KB each), the key columns of two stages
// [2][KT_S][KT_LK], z's sums [8][2][KT_F] (fp32); 1 KB of slack for the alignment.
__global__ void __launch_bounds__(256, 2) kt_state_wgmma(kt_args a) {
#ifdef KTW_HAVE_WGMMA
    extern __shared__ __align__(16) unsigned char ktw_sm[];
    unsigned char *base = ktw_align(ktw_sm);
    bf16_t *sV = (bf16_t *)base;       // [2][64][128] sw128
    bf16_t *sP = sV + 2 * 64 * KTW_DV; // [2][64][64] sw128
    bf16_t *sK = sP + 2 * 64 * KT_F;   // [2][KT_S][KT_LK]
    float *sRed = (float *)(sK + 2 * KT_S * KT_LK);
    const int tid = threadIdx.x, lane = tid & 31, g = lane >> 2, tg = lane & 3;
    const int tl = tid >> 7, fr0 = ((tid >> 5) & 3) * 16; // the warpgroup's tile, the warp's rows
    const int n = blockIdx.y, b = n / a.H, h = n % a.H, N = a.B * a.H;
    const int tile0 = 2 * blockIdx.x;
    const bool valid1 = tile0 + 1 < a.ntile, mine = tl == 0 || valid1;
    const kt_tile ti0 = kt_tile_of(tile0, a.nb), ti1 = kt_tile_of(valid1 ? tile0 + 1 : tile0, a.nb);
    float acc[64], zp[2][8];
    {
        const kt_tile my = tl ? ti1 : ti0;
#pragma unroll
        for (int j = 0; j < 16; j++)
#pragma unroll
            for (int e = 0; e < 4; e++)
                acc[4 * j + e] = kt_s_in<KTW_DV>(a, n, my, fr0 + g + (e >> 1) * 8,
                                                 8 * j + 2 * tg + (e & 1), mine);
        kt_z_in(a, n, ti0, ti1, valid1, tid, zp);
    }
    const size_t koff = kt_key_off(a, b, h, tid, ti0, ti1);
    const size_t voff = ((size_t)b * a.T * a.H + h) * KTW_DV + (tid & 15) * 8;
    auto issue = [&](int step, int st) {
        const int t0 = step * KT_S;
        kt_key_issue(a, sK, koff, tid, t0, st);
#pragma unroll
        for (int u = 0; u < 4; u++) { // token tid / 16 + 16 u, chunk tid % 16
            const int tok = (tid >> 4) + 16 * u, t = t0 + tok;
            const bool ok = t < a.T;
            cp_async16_zfill(base + st * 64 * KTW_DV * 2 + sw128_chunk(64, tok, tid & 15),
                             a.v + voff + (size_t)(ok ? t : 0) * a.H * KTW_DV, ok);
        }
        cp_async_commit();
    };
    const bf16_t *kp = sK + (tid >> 3) * KT_LK + (tid & 7);
    const int nsteps = (a.T + KT_S - 1) / KT_S;
    const uint64_t dA = wgmma_desc(smem_u32(sP + tl * 64 * KT_F), 64 * 128, 1024);
    const uint64_t dV = wgmma_desc(smem_u32(sV), 64 * 128, 1024);
    issue(0, 0);
    for (int step = 0; step < nsteps; step++) {
        const int st = step & 1, t0 = step * KT_S;
        cp_async_wait<0>();
        fence_proxy_async();
        __syncthreads(); // stage st landed and visible to the products
        if (step + 1 < nsteps) issue(step + 1, st ^ 1);
        if (t0 % a.CL == 0) { // the exclusive prefix of chunk t0 / CL (every thread: kt_z_sum)
            const size_t c = (size_t)(t0 / a.CL) * N + n;
            kt_z_prefix(a, c, tile0, valid1, tid, kt_z_sum(zp, sRed, tid));
            if (mine) {
                bf16_t *Sc = a.Sc + ((c * a.ntile + tile0 + tl) * KT_F + fr0 + g) * KTW_DV + 2 * tg;
#pragma unroll
                for (int j = 0; j < 16; j++) {
                    *reinterpret_cast<uint32_t *>(Sc + 8 * j) =
                        pack_bf16(acc[4 * j], acc[4 * j + 1]);
                    *reinterpret_cast<uint32_t *>(Sc + 8 * KTW_DV + 8 * j) =
                        pack_bf16(acc[4 * j + 2], acc[4 * j + 3]);
                }
            }
        }
        // psi_tile(K): items (local tile u / 2, token tid / 8 + 32 (u % 2), a = tid % 8), chunk a
        // of row token of the tile's M-major sw128 tile
        const bf16_t *sKs = kp + st * KT_S * KT_LK;
#pragma unroll
        for (int u = 0; u < 4; u++) {
            const int tok = (tid >> 3) + 32 * (u & 1);
            const bf16_t *row = sKs + (u & 1) * 32 * KT_LK + (u >> 1) * 16;
            const uint4 y = *reinterpret_cast<const uint4 *>(row + 8 - (tid & 7));
            float p[8];
            *reinterpret_cast<uint4 *>((unsigned char *)sP + (u >> 1) * 64 * KT_F * 2 +
                                       sw128_chunk(64, tok, tid & 7)) =
                kt_psi8(__bfloat162float(row[0]), y, 1.0f, p);
#pragma unroll
            for (int bb = 0; bb < 8; bb++) zp[u >> 1][bb] += p[bb];
        }
        fence_proxy_async();
        __syncthreads(); // psi written, visible to the products
        wgmma_fence();
        const uint64_t dB = dV + ((st * 64 * KTW_DV * 2) >> 4);
#pragma unroll
        for (int kk = 0; kk < KT_S / 16; kk++)
            wgmma_ss_n128_t<1, 1>(acc, dA + ((kk * 2048) >> 4), dB + ((kk * 2048) >> 4));
        wgmma_commit();
        wgmma_wait<0>(); // acc final; sP and stage st free for the next step (the other block
        wgmma_fence_regs<64>(acc); // of the multiprocessor runs meanwhile)
    }
    kt_z_out(a, n, tile0, valid1, tid, kt_z_sum(zp, sRed, tid));
    if (!a.S || !mine) return;
    const kt_tile mo = kt_tile_of(tile0 + tl, a.nb);
#pragma unroll
    for (int j = 0; j < 16; j++)
#pragma unroll
        for (int e = 0; e < 4; e++)
            kt_s_out<KTW_DV>(a, n, mo, fr0 + g + (e >> 1) * 8, 8 * j + 2 * tg + (e & 1),
                             acc[4 * j + e]);
#else
    __trap(); // no wgmma in this image: kata_tc_wgmma_usable() keeps launches away
#endif
}

// ---------------------------------------------------------------- the read pass

// Shared: Sc tiles of two stages [2][64 features][128] (sw128, N-major B), psi_w(Q) of the two
// warpgroups [2][64 tokens][64 features] (sw128, K-major A), Q [KT_R][DK + 8], Zc tiles [2][KT_F]
// (fp32); 1 KB of slack for the alignment.
template <int DK> __global__ void __launch_bounds__(256, 2) kt_read_wgmma(kt_args a) {
#ifdef KTW_HAVE_WGMMA
    constexpr int ldq = DK + 8;
    extern __shared__ __align__(16) unsigned char ktw_sm[];
    unsigned char *base = ktw_align(ktw_sm);
    bf16_t *sS = (bf16_t *)base;       // [2][64][128] sw128
    bf16_t *sP = sS + 2 * 64 * KTW_DV; // [2][64][64] sw128
    bf16_t *sQ = sP + 2 * 64 * KT_F;   // [KT_R][ldq]
    float *sZ = (float *)(sQ + KT_R * ldq);
    const int tid = threadIdx.x, lane = tid & 31, g = lane >> 2, tg = lane & 3;
    const int wg = tid >> 7, r0 = ((tid >> 5) & 3) * 16; // the warpgroup's 64 tokens, the warp's
    const int n = blockIdx.y, b = n / a.H, h = n % a.H, N = a.B * a.H, t0 = blockIdx.x * KT_R;
    const size_t cn = (size_t)(t0 / a.CL) * N + n;
    const bf16_t *Sc = a.Sc + cn * a.ntile * KT_F * KTW_DV;
    const float *Zc = a.Zc + cn * a.ntile * KT_F;
    kt_load_q<DK>(a, sQ, b, h, t0, tid);
    auto issue = [&](int tile, int st) {
        const bf16_t *src = Sc + (size_t)tile * KT_F * KTW_DV + (tid & 15) * 8;
#pragma unroll
        for (int u = 0; u < 4; u++) { // feature row tid / 16 + 16 u, chunk tid % 16
            const int row = (tid >> 4) + 16 * u;
            cp_async16(base + st * 64 * KTW_DV * 2 + sw128_chunk(64, row, tid & 15),
                       src + (size_t)row * KTW_DV);
        }
        if (tid < KT_F / 4)
            cp_async16(sZ + st * KT_F + 4 * tid, Zc + (size_t)tile * KT_F + 4 * tid);
        cp_async_commit();
    };
    issue(0, 0);
    float acc[64], dp[4] = {0.0f, 0.0f, 0.0f, 0.0f};
#pragma unroll
    for (int i = 0; i < 64; i++) acc[i] = 0.0f;
    kt_tile ti = kt_tile_of(0, a.nb);
    const float s2 = a.s * a.s;
    const bf16_t *qp = sQ + (tid >> 3) * ldq;
    const uint64_t dA = wgmma_desc(smem_u32(sP + wg * 64 * KT_F), 16, 1024);
    const uint64_t dS = wgmma_desc(smem_u32(sS), 64 * 128, 1024);
    for (int tile = 0; tile < a.ntile; tile++, kt_tile_next(ti, a.nb)) {
        const int st = tile & 1;
        cp_async_wait<0>();
        fence_proxy_async();
        __syncthreads(); // Sc tile (and Q) landed and visible to the products
        if (tile + 1 < a.ntile) issue(tile + 1, st ^ 1);
        const float wgt = ti.I == ti.J ? s2 : 2.0f * s2;
        const int ci = ti.m * a.E + 8 * ti.I + (tid & 7), cj = ti.m * a.E + 8 * ti.J;
        const float4 z0 = *reinterpret_cast<const float4 *>(sZ + st * KT_F + (tid & 7) * 8);
        const float4 z1 = *reinterpret_cast<const float4 *>(sZ + st * KT_F + (tid & 7) * 8 + 4);
        const float zz[8] = {z0.x, z0.y, z0.z, z0.w, z1.x, z1.y, z1.z, z1.w};
#pragma unroll
        for (int u = 0; u < 4; u++) { // token tid / 8 + 32 u: warpgroup u / 2, row of it
            const int tok = (tid >> 3) + 32 * u;
            const bf16_t *row = qp + u * 32 * ldq;
            const uint4 y = *reinterpret_cast<const uint4 *>(row + cj);
            float p[8];
            *reinterpret_cast<uint4 *>((unsigned char *)sP + (tok >> 6) * 64 * KT_F * 2 +
                                       sw128_chunk(64, tok & 63, tid & 7)) =
                kt_psi8(__bfloat162float(row[ci]), y, wgt, p);
#pragma unroll
            for (int bb = 0; bb < 8; bb++) dp[u] += p[bb] * zz[bb];
        }
        fence_proxy_async();
        __syncthreads(); // psi written, visible to the products
        wgmma_fence();
        const uint64_t dB = dS + ((st * 64 * KTW_DV * 2) >> 4);
#pragma unroll
        for (int kk = 0; kk < KT_F / 16; kk++)
            wgmma_ss_n128_t<0, 1>(acc, dA + ((kk * 32) >> 4), dB + ((kk * 2048) >> 4));
        wgmma_commit();
        wgmma_wait<0>(); // sP and stage st free for the next tile
        wgmma_fence_regs<64>(acc);
    }
    kt_den_out(a, dp, b, h, t0, tid);
#pragma unroll
    for (int half = 0; half < 2; half++) {
        const int t = t0 + wg * 64 + r0 + g + 8 * half;
        if (t >= a.T) continue;
        float *o = a.o + (((size_t)b * a.T + t) * a.H + h) * KTW_DV + 2 * tg;
#pragma unroll
        for (int j = 0; j < 16; j++)
            *reinterpret_cast<float2 *>(o + 8 * j) =
                make_float2(acc[4 * j + 2 * half], acc[4 * j + 2 * half + 1]);
    }
#else
    __trap(); // no wgmma in this image: kata_tc_wgmma_usable() keeps launches away
#endif
}

// ---------------------------------------------------------------- host side

int kata_tc_wgmma_usable(void) {
    static const int usable = gpu_sm90a_usable("MIXSCOPE_KATA_WGMMA", (const void *)kt_state_wgmma);
    return usable;
}

int kata_tc_wgmma_state(const kt_args &a, cudaStream_t st, err *e) {
    const size_t sm = 1024 + (2 * 64 * KTW_DV + 2 * 64 * KT_F + 2 * KT_S * KT_LK) * 2 +
                      8 * 2 * KT_F * sizeof(float);
    CUDA_TRY(
        cudaFuncSetAttribute(kt_state_wgmma, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)sm),
        "gpu kata tc (wgmma): shared memory");
    kt_state_wgmma<<<dim3((a.ntile + 1) / 2, a.B * a.H), 256, sm, st>>>(a);
    CUDA_LAUNCHED("gpu kata tc (wgmma): state pass");
    return 0;
}

template <int DK> static int ktw_read(const kt_args &a, cudaStream_t st, err *e) {
    const size_t sm =
        1024 + (2 * 64 * KTW_DV + 2 * 64 * KT_F + KT_R * (DK + 8)) * 2 + 2 * KT_F * sizeof(float);
    CUDA_TRY(cudaFuncSetAttribute(kt_read_wgmma<DK>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                  (int)sm),
             "gpu kata tc (wgmma): shared memory");
    kt_read_wgmma<DK><<<dim3((a.T + KT_R - 1) / KT_R, a.B * a.H), 256, sm, st>>>(a);
    CUDA_LAUNCHED("gpu kata tc (wgmma): read pass");
    return 0;
}

int kata_tc_wgmma_read(const kt_args &a, cudaStream_t st, err *e) {
    return a.dk == 64 ? ktw_read<64>(a, st, e) : ktw_read<128>(a, st, e);
}
