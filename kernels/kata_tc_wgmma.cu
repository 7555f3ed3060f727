// kata_tc_wgmma.cu: kata_tc.cu's state and read passes on Hopper's warpgroup products (sm_90a
// only; the Makefile builds *_wgmma.cu for compute_90a), dv = 128. The algorithm, the tiles, the
// scratch and the rounding are kata_tc.cu's: only who multiplies changes (z and den are summed
// from the same exact products in another order). A warpgroup's product reads its operands from
// shared memory, once for the whole warpgroup, where mma.sync had each warp load its own
// fragments.
//
// The passes that run (each described above its kernel):
//   kt_state_ov<1>  block (two tiles, head), a warpgroup a tile: S_int [64 features, 128] an
//                   m64n128 accumulator; a step of 64 tokens is four m64n128k16 with A =
//                   psi_tile(K)^T (M-major) and B = V (N-major), run while the warpgroup builds
//                   the next step's psi; z by mma.sync beside.
//   kt_read_ov      block (256 tokens, head), a warpgroup 128 tokens: o and den two m64n136
//                   accumulators; a tile is eight m64n136k16 with A = psi(Q) (K-major) and B = the
//                   Sc tile with z_hi, z_lo as two more columns (N-major), run while the
//                   warpgroup builds the next tile's psi. Chunks of CL % 256 != 0 take
//                   kt_read_wgmma.
//   kt_local_wgmma  kata_tc.cu's local pass, block (64 queries, head), one warpgroup: S =
//                   Q K^T m64n64k16 from shared memory, kappa = (s S)^2 squared in registers, O +=
//                   P V m64n128k16 with P in registers; for m1 pipelined (tile j + 1's scores
//                   run beside tile j's values), other maps the simple form. 1.92-1.95 ms at 128K
//                   against 3.14-3.34 for kata_tc.cu's mma.sync pass (H100, same runs;
//                   MIXSCOPE_KATA_LOCAL=0 keeps that, =1 the simple form for m1 too).
// Tried (commit e935d9e in main's history, branch kata-state-rf): the state pass with psi_tile(K)^T
// built straight into wgmma's A fragments (ldmatrix.x4.trans of the key columns, shuffles, packed
// products; no psi in shared memory) passed 29 of its 30 test_gpu lines and failed m1 at dk = 128,
// T = 2200 (0.13 against 1e-2, H100); the cause was not found before the device time ran out.
//
// Kept as the baselines they were measured against (MIXSCOPE_KATA_STATE=0, MIXSCOPE_KATA_READ=128;
// MIXSCOPE_KATA_STATE=4 times kt_state_ov<2>, four tiles a block, one block a multiprocessor,
// which lost: docs/gpu-results.md):
//   kt_state_wgmma  the state pass with psi built in fp32, z on the CUDA cores, each step's
//                   products waited for before the next psi is built.
//   kt_read_wgmma   block (128 tokens, head), the same in the read.
// Shared tiles are sw128 (wgmma.cuh): 64 rows of 128 bytes a region, 16-byte chunks swizzled.
// On other GPUs kata_tc_wgmma_usable() says no and kata_tc.cu keeps its mma.sync passes.
#include <cuda_bf16.h>
#include <cuda_runtime.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <type_traits>

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

// A warpgroup's S_int accumulator (m64n128: the warp's features fr0 + g, + 8, columns 8 j + 2 tg,
// + 1) for tile t: in from the packed state (0 unless live), out as chunk slot c's bf16 prefix
// (Sc), and back to the packed state at the end.
__device__ __forceinline__ void ktw_acc_in(const kt_args &a, int n, const kt_tile &t, bool live,
                                           int fr0, int g, int tg, float *acc) {
#pragma unroll
    for (int j = 0; j < 16; j++)
#pragma unroll
        for (int e = 0; e < 4; e++)
            acc[4 * j + e] =
                kt_s_in<KTW_DV>(a, n, t, fr0 + g + (e >> 1) * 8, 8 * j + 2 * tg + (e & 1), live);
}
__device__ __forceinline__ void ktw_acc_prefix(const kt_args &a, size_t c, int tile, int fr0, int g,
                                               int tg, const float *acc) {
    bf16_t *Sc = a.Sc + ((c * a.ntile + tile) * KT_F + fr0 + g) * KTW_DV + 2 * tg;
#pragma unroll
    for (int j = 0; j < 16; j++) {
        *reinterpret_cast<uint32_t *>(Sc + 8 * j) = pack_bf16(acc[4 * j], acc[4 * j + 1]);
        *reinterpret_cast<uint32_t *>(Sc + 8 * KTW_DV + 8 * j) =
            pack_bf16(acc[4 * j + 2], acc[4 * j + 3]);
    }
}
__device__ __forceinline__ void ktw_acc_out(const kt_args &a, int n, int tile, int fr0, int g,
                                            int tg, const float *acc) {
    const kt_tile mo = kt_tile_of(tile, a.nb);
#pragma unroll
    for (int j = 0; j < 16; j++)
#pragma unroll
        for (int e = 0; e < 4; e++)
            kt_s_out<KTW_DV>(a, n, mo, fr0 + g + (e >> 1) * 8, 8 * j + 2 * tg + (e & 1),
                             acc[4 * j + e]);
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
        ktw_acc_in(a, n, tl ? ti1 : ti0, mine, fr0, g, tg, acc);
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
            if (mine) ktw_acc_prefix(a, c, tile0 + tl, fr0, g, tg, acc);
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
    if (a.S && mine) ktw_acc_out(a, n, tile0 + tl, fr0, g, tg, acc);
#else
    __trap(); // no wgmma in this image: kata_tc_wgmma_usable() keeps launches away
#endif
}

// ---------------------------------------------------------------- the state pass, overlapped

// kt_state_ov<TW, NWG>: block (NWG TW tiles, head), a warpgroup TW tiles (TW m64n128
// accumulators; NWG = 2 but for MIXSCOPE_KATA_STATE=3, new and not yet run: three warpgroups of one
// tile, V copied by the first two). A step's products run while the warpgroup builds the next
// step's psi: the step's wgmma are committed, the copies two steps ahead issued, the next psi built
// into the other buffer, and only then the wait. The pass is latency bound (ncu at 128K: a warp
// issues once every ~12 cycles, four warps a scheduler), so what a step costs beside the products
// is kept small; a first form spent ~225 warp instructions a step, ~50 of them on two integer
// modulos by CL and ~60 on 64-bit copy addresses:
//   - psi by packed bf16 products (fma.rn.bf16x2 with -0: the exact product rounded once, the
//     bf16 value the fp32 product gave before), four a row of 8 features;
//   - z_int (psi's column sums, fp32) on the tensor cores as K_I^T K_J over the step's tokens:
//     warp w4 of the warpgroup takes tokens 16 w4 .. + 16, one m16n8k16 a tile (rows 8..15 of A
//     zero) from one ldmatrix.x4.trans of its key columns; bf16 x bf16 products are exact in
//     fp32, so z is summed from the same products as before, in another order;
//   - the ring's stages and the chunk boundaries by counters, the copies' addresses by one wide
//     multiply (zero-filling only in the last step).
// Each warpgroup copies and reads its own key columns (a named barrier between them); V and the
// products' hand-offs take the block's barrier, one a step. TW = 2 reads each V step once for
// four tiles (one block a multiprocessor), TW = 1 for two (two blocks a multiprocessor).
// Shared: V ring [3][64 tokens][128] (sw128, 16 KB a stage), psi [2 buffers][NWG TW tiles]
// [64 tokens][64 features] (sw128, 8 KB a tile), key columns [3][NWG warpgroups][KT_S][KT_LK]
// (tile l's I columns at 16 l, its J columns at 16 l + 8), z's sums [NWG][4][TW][KT_F] (fp32);
// 1 KB of slack for the alignment.
#define KTW_RING 3 // stages of the overlapped passes' copy rings
__device__ __forceinline__ int ktw_ring_next(int st) {
    return st == KTW_RING - 1 ? 0 : st + 1;
}
template <int TW, int NWG = 2> struct kt_state_ov_smem {
    static constexpr int TILES = NWG * TW;
    static constexpr size_t SMEM =
        1024 +
        (KTW_RING * 64 * KTW_DV + 2 * TILES * 64 * KT_F + KTW_RING * NWG * KT_S * KT_LK) * 2 +
        NWG * 4 * TW * KT_F * sizeof(float);
};

// {x, x} . {y0, y1}: each product exact, rounded once to bf16
__device__ __forceinline__ uint32_t kt_bmul2(uint32_t xx, uint32_t y) {
    uint32_t r;
    asm("fma.rn.bf16x2 %0, %1, %2, %3;" : "=r"(r) : "r"(xx), "r"(y), "r"(0x80008000u));
    return r;
}

// z of a warpgroup's TW tiles from its 4 warps' m16n8 fragments (rows g: features 8 g + 2 tg, +1
// in zc[l][0], zc[l][1]): thread t < 64 TW returns feature t % 64 of local tile t / 64. Two named
// barriers: call it from every thread of the warpgroup.
template <int TW>
__device__ __forceinline__ float kt_ov_z_sum(const float (&zc)[TW][4], float *red, int tid) {
    const int wg = tid >> 7, t = tid & 127, lane = tid & 31, w4 = (tid >> 5) & 3;
    float *rw = red + wg * 4 * TW * KT_F;
#pragma unroll
    for (int l = 0; l < TW; l++)
        *reinterpret_cast<float2 *>(rw + (w4 * TW + l) * KT_F + 2 * lane) =
            make_float2(zc[l][0], zc[l][1]);
    bar_sync(1 + wg, 128);
    float z = 0.0f;
    if (t < TW * KT_F)
#pragma unroll
        for (int y = 0; y < 4; y++) z += rw[y * TW * KT_F + t];
    bar_sync(1 + wg, 128); // rw is free again
    return z;
}

template <int TW, int NWG = 2>
__global__ void __launch_bounds__(128 * NWG, NWG == 2 ? 2 / TW : 1) kt_state_ov(kt_args a) {
#ifdef KTW_HAVE_WGMMA
    constexpr int TILES = NWG * TW;
    constexpr bool VALL = NWG == 2; // every thread copies V (else the first 256)
    extern __shared__ __align__(16) unsigned char ktw_sm[];
    unsigned char *base = ktw_align(ktw_sm);
    bf16_t *sV = (bf16_t *)base;              // [3][64][128] sw128
    bf16_t *sP = sV + KTW_RING * 64 * KTW_DV; // [2][TILES][64][64] sw128
    bf16_t *sK = sP + 2 * TILES * 64 * KT_F;  // [3][NWG][KT_S][KT_LK]
    float *sRed = (float *)(sK + KTW_RING * NWG * KT_S * KT_LK);
    const int tid = threadIdx.x, lane = tid & 31, g = lane >> 2, tg = lane & 3;
    const int wg = tid >> 7, t = tid & 127, w4 = (tid >> 5) & 3, fr0 = w4 * 16;
    const int n = blockIdx.y, b = n / a.H, h = n % a.H, N = a.B * a.H;
    const int tile0 = TILES * blockIdx.x + TW * wg; // this warpgroup's tiles: tile0 .. + TW
    bool valid[TW];
    kt_tile ti[TW];
#pragma unroll
    for (int l = 0; l < TW; l++) {
        // a tile past the last multiplies a valid tile's psi into an accumulator never stored
        valid[l] = tile0 + l < a.ntile;
        ti[l] = kt_tile_of(valid[l] ? tile0 + l : a.ntile - 1, a.nb);
    }
    float acc[TW][64], zc[TW][4];
#pragma unroll
    for (int l = 0; l < TW; l++) {
        ktw_acc_in(a, n, ti[l], valid[l], fr0, g, tg, acc[l]);
        // the state's z rides in warp 0's fragments: features 8 g + 2 tg, + 1
#pragma unroll
        for (int e = 0; e < 4; e++) {
            float wgt;
            const int r =
                kt_packed(ti[l].m, 8 * ti[l].I + g, 8 * ti[l].J + 2 * tg + (e & 1), a.E, a.s, &wgt);
            zc[l][e] = a.S && valid[l] && w4 == 0 && e < 2 ? a.z[(size_t)n * a.D + r] / wgt : 0.0f;
        }
    }
    // copies: key chunk kc = t % KC of tokens t / KC + KR u, the I (kc even) or J columns of
    // local tile kc / 2; V chunk tid % 16 of tokens tid / 16 + 16 u
    constexpr int KC = 2 * TW, KR = 128 / KC; // key chunks a token row (two a tile), rows a pass
    const int kc = t % KC, kl = kc >> 1;
    const kt_tile kt = kl == 0 ? ti[0] : ti[TW - 1]; // constant indices: no local memory
    const bf16_t *kg = a.k + ((size_t)b * a.T * a.H + h) * a.dk + kt.m * a.E +
                       8 * ((kc & 1) ? kt.J : kt.I) + (size_t)(t / KC) * a.H * a.dk;
    const bf16_t *vg = a.v + ((size_t)b * a.T * a.H + h) * KTW_DV + (tid & 15) * 8 +
                       (size_t)(tid >> 4) * a.H * KTW_DV;
    const unsigned kstride = (unsigned)(a.H * a.dk), vstride = (unsigned)(a.H * KTW_DV);
    // this thread's pieces' places in a stage
    uint32_t kdst[KT_S / KR], vdst[4];
#pragma unroll
    for (int u = 0; u < KT_S / KR; u++)
        kdst[u] = ((wg * KT_S + t / KC + KR * u) * KT_LK + kc * 8) * 2;
#pragma unroll
    for (int u = 0; u < 4; u++) vdst[u] = sw128_chunk(64, (tid >> 4) + 16 * u, tid & 15);
    const uint32_t sKa = smem_u32(sK), sVa = smem_u32(sV);
    auto issue = [&](int step, int st) {
        const int t0 = step * KT_S;
        const uint32_t kb = sKa + st * NWG * KT_S * KT_LK * 2, vb = sVa + st * 64 * KTW_DV * 2;
        if (t0 + KT_S <= a.T) { // every token of the step exists
            const bf16_t *kp = kg + (size_t)(unsigned)t0 * kstride;
            const bf16_t *vp = vg + (size_t)(unsigned)t0 * vstride;
#pragma unroll
            for (int u = 0; u < KT_S / KR; u++)
                cp_async16_s(kb + kdst[u], kp + (size_t)(KR * u) * kstride);
            if (VALL || tid < 256)
#pragma unroll
                for (int u = 0; u < 4; u++)
                    cp_async16_s(vb + vdst[u], vp + (size_t)(16 * u) * vstride);
        } else { // the last step: tokens past T read as zeros
#pragma unroll
            for (int u = 0; u < KT_S / KR; u++) {
                const int tt = t0 + t / KC + KR * u;
                const bool ok = tt < a.T;
                cp_async16_zfill(sK + (kdst[u] + st * NWG * KT_S * KT_LK * 2) / 2,
                                 ok ? kg + (size_t)(unsigned)(t0 + KR * u) * kstride : a.k, ok);
            }
            if (VALL || tid < 256)
#pragma unroll
                for (int u = 0; u < 4; u++) {
                    const int tt = t0 + (tid >> 4) + 16 * u;
                    const bool ok = tt < a.T;
                    cp_async16_zfill(base + st * 64 * KTW_DV * 2 + vdst[u],
                                     ok ? vg + (size_t)(unsigned)(t0 + 16 * u) * vstride : a.v, ok);
                }
        }
        cp_async_commit();
    };
    // psi_tile(K) of a step into buffer pb (items: local tile l, token t / 8 + 16 j, a = t % 8:
    // chunk a of row token of the tile's M-major sw128 tile), and z's share: warp w4's tokens
    // 16 w4 .. + 16, matrices (tokens 0-7, I), (8-15, I), (0-7, J), (8-15, J) by lanes 8 apart
    const unsigned zaddr = smem_u32(
        sK + (wg * KT_S + 16 * w4 + ((lane >> 3) & 1) * 8 + (lane & 7)) * KT_LK + (lane >> 4) * 8);
    auto build = [&](int st, int pb) {
        const bf16_t *ks = sK + (st * NWG + wg) * KT_S * KT_LK + (t >> 3) * KT_LK + (t & 7);
        unsigned char *pp = (unsigned char *)(sP + (pb * TILES + TW * wg) * 64 * KT_F);
#pragma unroll
        for (int l = 0; l < TW; l++) {
#pragma unroll
            for (int j = 0; j < 4; j++) {
                const int tok = (t >> 3) + 16 * j;
                const bf16_t *row = ks + 16 * j * KT_LK + 16 * l;
                const uint4 y = *reinterpret_cast<const uint4 *>(row + 8 - (t & 7));
                const uint32_t x = *reinterpret_cast<const unsigned short *>(row);
                const uint32_t xx = x | (x << 16);
                uint4 r;
                r.x = kt_bmul2(xx, y.x), r.y = kt_bmul2(xx, y.y);
                r.z = kt_bmul2(xx, y.z), r.w = kt_bmul2(xx, y.w);
                *reinterpret_cast<uint4 *>(pp + l * 64 * KT_F * 2 + sw128_chunk(64, tok, t & 7)) =
                    r;
            }
            uint32_t f[4];
            ldsm_x4_trans(f, zaddr + (st * NWG * KT_S * KT_LK + 16 * l) * 2);
            const uint32_t af[4] = {f[0], 0u, f[1], 0u};
            mma_bf16(zc[l], af, f[2], f[3]);
        }
    };
    // z's exclusive prefix of the chunk starting at step (zc holds the steps before it)
    auto z_prefix = [&](int chunk) {
        const size_t c = (size_t)chunk * N + n;
        const float z = kt_ov_z_sum<TW>(zc, sRed, tid);
        if (t < TW * KT_F && (t < KT_F ? valid[0] : valid[TW - 1]))
            a.Zc[(c * a.ntile + tile0) * KT_F + t] = z;
    };
    const int nsteps = (a.T + KT_S - 1) / KT_S;
    const uint64_t dA = wgmma_desc(smem_u32(sP + TW * wg * 64 * KT_F), 64 * 128, 1024);
    const uint64_t dV = wgmma_desc(smem_u32(sV), 64 * 128, 1024);
    const int spc = a.CL / KT_S; // steps a chunk
    issue(0, 0);
    if (nsteps > 1)
        issue(1, 1);
    else
        cp_async_commit();
    cp_async_wait<1>();
    bar_sync(1 + wg, 128); // this warpgroup's key columns of step 0 landed
    z_prefix(0);
    build(0, 0);
    fence_proxy_async();
    __syncthreads(); // step 0's psi and V visible to the products
    // st: the ring stage of this step (st1, st2 the next two); cs: the step's place in its chunk
    for (int step = 0, st = 0, cs = 0, chunk = 0; step < nsteps; step++) {
        const int pb = step & 1, st1 = ktw_ring_next(st), st2 = ktw_ring_next(st1);
        if (cs == 0) { // S_int's exclusive prefix of chunk `chunk`
            const size_t c = (size_t)chunk * N + n;
#pragma unroll
            for (int l = 0; l < TW; l++)
                if (valid[l]) ktw_acc_prefix(a, c, tile0 + l, fr0, g, tg, acc[l]);
        }
        wgmma_fence();
        const uint64_t dB = dV + ((st * 64 * KTW_DV * 2) >> 4);
        const uint64_t dP = dA + ((pb * TILES * 64 * KT_F * 2) >> 4);
#pragma unroll
        for (int l = 0; l < TW; l++)
#pragma unroll
            for (int kk = 0; kk < KT_S / 16; kk++)
                wgmma_ss_n128_t<1, 1>(acc[l], dP + ((l * 64 * KT_F * 2 + kk * 2048) >> 4),
                                      dB + ((kk * 2048) >> 4));
        wgmma_commit();
        // the stage of step + 2 is step - 1's, whose products every warpgroup waited for
        if (step + 2 < nsteps)
            issue(step + 2, st2);
        else
            cp_async_commit();
        cs = cs + 1 == spc ? 0 : cs + 1;
        chunk += cs == 0;
        if (step + 1 < nsteps) {
            cp_async_wait<1>();
            bar_sync(1 + wg, 128); // this warpgroup's key columns of step + 1 landed
            if (cs == 0) z_prefix(chunk);
            build(st1, pb ^ 1);
        }
        wgmma_wait<0>();
#pragma unroll
        for (int l = 0; l < TW; l++) wgmma_fence_regs<64>(acc[l]);
        fence_proxy_async();
        __syncthreads(); // the next psi and V visible; this step's psi and stage free
        st = st1;
    }
    const float z = kt_ov_z_sum<TW>(zc, sRed, tid);
    if (t < TW * KT_F && (t < KT_F ? valid[0] : valid[TW - 1]))
        kt_z_out(a, n, tile0, TW == 2, t, z);
    if (!a.S) return;
#pragma unroll
    for (int l = 0; l < TW; l++)
        if (valid[l]) ktw_acc_out(a, n, tile0 + l, fr0, g, tg, acc[l]);
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

// ---------------------------------------------------------------- the read pass, overlapped

// kt_read_ov: block (256 tokens, head), a warpgroup 128 tokens (two m64n136 accumulators), so that
// each Sc tile copied from L2 feeds 256 tokens; as in kt_state_ov the products of a tile run while
// the warpgroup builds the next tile's psi(Q) into the other buffer, with what a tile costs beside
// the products kept small (the pass is latency bound: ncu at 128K of a first form, den by
// mma.sync beside, counted ~300 warp instructions a tile, a warp issuing every 6.3 cycles at two
// warps a scheduler, against 1024 cycles of products):
//   - psi unweighted but for a block below the diagonal's 2 (exact in bf16), by packed bf16
//     products; s^2 multiplies o and den at the end (in fp32);
//   - den in the same products: the Sc tile's B gains columns 128 and 129, z_hi and z_lo (Zc's
//     fp32 split into two bf16: 16 bits of it kept; columns 130..135 zero), so den = acc's column
//     128 + column 129. The 16 threads that copy a tile's Zc convert it into the stage once their
//     own copies have landed (no barrier of its own);
//   - the ring's stages by counters, and one wide multiply a copy address.
// Sc and the hand-offs take the block's barrier, one a tile.
// Shared: Sc ring [3][64 features][192] (sw128, N-major B: regions of columns 0-63, 64-127, and
// 128-191 of which only 128..135 are read), psi(Q) [2 buffers][2 warpgroups][2 halves][64 tokens]
// [64 features] (sw128, K-major A), Q [256][DK + 8], Zc [3][KT_F] (fp32); 1 KB of slack for the
// alignment.
#define KT2_R     256
#define KT2_STAGE (3 * 64 * 128) // bytes of a ring stage: three sw128 regions of 64 rows
template <int DK> struct kt_read_ov_smem {
    static constexpr size_t SMEM = 1024 + KTW_RING * KT2_STAGE +
                                   (2 * 2 * 2 * 64 * KT_F + KT2_R * (DK + 8)) * 2 +
                                   KTW_RING * KT_F * sizeof(float);
};

template <int DK> __global__ void __launch_bounds__(256, 1) kt_read_ov(kt_args a) {
#ifdef KTW_HAVE_WGMMA
    constexpr int ldq = DK + 8;
    extern __shared__ __align__(16) unsigned char ktw_sm[];
    unsigned char *base = ktw_align(ktw_sm);
    unsigned char *sS = base;                             // [3] stages, KT2_STAGE each
    bf16_t *sP = (bf16_t *)(base + KTW_RING * KT2_STAGE); // [2][2][2][64][64] sw128
    bf16_t *sQ = sP + 2 * 2 * 2 * 64 * KT_F;              // [KT2_R][ldq]
    float *sZ = (float *)(sQ + KT2_R * ldq);              // [3][KT_F]
    const int tid = threadIdx.x, lane = tid & 31, g = lane >> 2, tg = lane & 3;
    const int wg = tid >> 7, t = tid & 127, r0 = ((tid >> 5) & 3) * 16;
    const int n = blockIdx.y, b = n / a.H, h = n % a.H, N = a.B * a.H, t0 = blockIdx.x * KT2_R;
    const size_t cn = (size_t)(t0 / a.CL) * N + n;
    const bf16_t *Sc = a.Sc + cn * a.ntile * KT_F * KTW_DV + (size_t)(tid >> 4) * KTW_DV +
                       (tid & 15) * 8; // this thread's first piece of tile 0
    const float *Zc = a.Zc + cn * a.ntile * KT_F + 4 * tid;
    kt_load_q<DK, KT2_R>(a, sQ, b, h, t0, tid);
    // columns 128..135 of every stage's third region: zero but for z's two (written per tile)
    if (tid < KTW_RING * 64)
        *reinterpret_cast<uint4 *>(sS + tid / 64 * KT2_STAGE + sw128_chunk(64, tid % 64, 16)) =
            make_uint4(0u, 0u, 0u, 0u);
    // this thread's pieces of a stage: Sc rows tid / 16 + 16 u, chunk tid % 16; Zc's floats
    // 4 tid .. + 4 (tid < 16)
    uint32_t sdst[4];
#pragma unroll
    for (int u = 0; u < 4; u++) sdst[u] = sw128_chunk(64, (tid >> 4) + 16 * u, tid & 15);
    auto issue = [&](int tile, int st) {
        const bf16_t *src = Sc + (size_t)tile * KT_F * KTW_DV;
#pragma unroll
        for (int u = 0; u < 4; u++)
            cp_async16(sS + st * KT2_STAGE + sdst[u], src + (size_t)16 * u * KTW_DV);
        if (tid < KT_F / 4) cp_async16(sZ + st * KT_F + 4 * tid, Zc + (size_t)tile * KT_F);
        cp_async_commit();
    };
    // z's two columns of stage st from this thread's own (landed) copy of Zc
    auto z_cols = [&](int st) {
        if (tid >= KT_F / 4) return;
        const float4 z = *reinterpret_cast<const float4 *>(sZ + st * KT_F + 4 * tid);
        const float zz[4] = {z.x, z.y, z.z, z.w};
#pragma unroll
        for (int i = 0; i < 4; i++) {
            const bf16_t hi = __float2bfloat16_rn(zz[i]);
            const bf16_t lo = __float2bfloat16_rn(zz[i] - __bfloat162float(hi));
            __nv_bfloat162 p;
            p.x = hi, p.y = lo;
            *reinterpret_cast<__nv_bfloat162 *>(sS + st * KT2_STAGE +
                                                sw128_chunk(64, 4 * tid + i, 16)) = p;
        }
    };
    float acc0[68], acc1[68];
#pragma unroll
    for (int i = 0; i < 68; i++) acc0[i] = acc1[i] = 0.0f;
    kt_tile tb = kt_tile_of(0, a.nb); // the tile the next build is of
    // items (half u / 4, row t / 8 + 16 (u % 4) of it, chunk a = t % 8)
    const bf16_t *qp = sQ + (128 * wg + (t >> 3)) * ldq;
    const unsigned pbase = smem_u32(sP + wg * 2 * 64 * KT_F);
    uint32_t pdst[4];
#pragma unroll
    for (int u = 0; u < 4; u++) pdst[u] = sw128_chunk(64, (t >> 3) + 16 * u, t & 7);
    auto build = [&](int pb) {
        const int ci = tb.m * a.E + 8 * tb.I + (t & 7), cj = tb.m * a.E + 8 * tb.J;
        const uint32_t two = tb.I == tb.J ? 0x3f803f80u : 0x40004000u; // {1, 1} or {2, 2}
        const unsigned pp = pbase + pb * 2 * 2 * 64 * KT_F * 2;
#pragma unroll
        for (int u = 0; u < 8; u++) {
            const bf16_t *row = qp + 16 * u * ldq;
            const uint4 y = *reinterpret_cast<const uint4 *>(row + cj);
            const uint32_t x = *reinterpret_cast<const unsigned short *>(row + ci);
            const uint32_t xx = kt_bmul2(x | (x << 16), two);
            asm volatile("st.shared.v4.b32 [%0], {%1, %2, %3, %4};" ::"r"(
                             pp + (u >> 2) * 64 * KT_F * 2 + pdst[u & 3]),
                         "r"(kt_bmul2(xx, y.x)), "r"(kt_bmul2(xx, y.y)), "r"(kt_bmul2(xx, y.z)),
                         "r"(kt_bmul2(xx, y.w))
                         : "memory");
        }
        kt_tile_next(tb, a.nb);
    };
    const uint64_t dA = wgmma_desc(pbase, 16, 1024);
    const uint64_t dS = wgmma_desc(smem_u32(sS), 64 * 128, 1024);
    issue(0, 0); // with Q
    if (a.ntile > 1)
        issue(1, 1);
    else
        cp_async_commit();
    cp_async_wait<1>();
    z_cols(0);
    __syncthreads(); // Q landed, every thread's copies
    build(0);
    fence_proxy_async();
    __syncthreads(); // tile 0's psi, Sc and z visible to the products
    int st = 0;      // the stage of this tile; st1, st2 those of the next two
    for (int tile = 0; tile < a.ntile; tile++) {
        const int pb = tile & 1, st1 = ktw_ring_next(st), st2 = ktw_ring_next(st1);
        wgmma_fence();
        const uint64_t dB = dS + ((st * KT2_STAGE) >> 4);
        const uint64_t dP = dA + ((pb * 2 * 2 * 64 * KT_F * 2) >> 4);
#pragma unroll
        for (int kk = 0; kk < KT_F / 16; kk++)
            wgmma_ss_n136_t<0, 1>(acc0, dP + ((kk * 32) >> 4), dB + ((kk * 2048) >> 4));
#pragma unroll
        for (int kk = 0; kk < KT_F / 16; kk++)
            wgmma_ss_n136_t<0, 1>(acc1, dP + ((64 * KT_F * 2 + kk * 32) >> 4),
                                  dB + ((kk * 2048) >> 4));
        wgmma_commit();
        if (tile + 2 < a.ntile) // into tile - 1's stage, whose products every warpgroup waited for
            issue(tile + 2, st2);
        else
            cp_async_commit();
        if (tile + 1 < a.ntile) {
            cp_async_wait<1>(); // this thread's copies of tile + 1 landed
            z_cols(st1);
            build(pb ^ 1);
        }
        wgmma_wait<0>();
        wgmma_fence_regs<68>(acc0);
        wgmma_fence_regs<68>(acc1);
        fence_proxy_async();
        __syncthreads(); // the next psi, Sc and z visible; this tile's psi and stage free
        st = st1;
    }
    const float s2 = a.s * a.s;
#pragma unroll
    for (int hf = 0; hf < 2; hf++)
#pragma unroll
        for (int half = 0; half < 2; half++) {
            const int tt = t0 + 128 * wg + 64 * hf + r0 + g + 8 * half;
            if (tt >= a.T) continue;
            const size_t row = ((size_t)b * a.T + tt) * a.H + h;
            const float *acc = hf ? acc1 : acc0;
            if (tg == 0) a.den[row] = s2 * (acc[64 + 2 * half] + acc[65 + 2 * half]);
            float *o = a.o + row * KTW_DV + 2 * tg;
#pragma unroll
            for (int j = 0; j < 16; j++)
                *reinterpret_cast<float2 *>(o + 8 * j) =
                    make_float2(s2 * acc[4 * j + 2 * half], s2 * acc[4 * j + 2 * half + 1]);
        }
#else
    __trap(); // no wgmma in this image: kata_tc_wgmma_usable() keeps launches away
#endif
}

// ---------------------------------------------------------------- the local pass

// kt_local_wgmma<DK, KPG, PIPE>: kt_local_kernel's pass (kata_tc.cu) on warpgroup products. Block
// (64 queries, head), one warpgroup (warp w: queries 16 w .. + 16); the keys of the block's chunk
// from its first token to the block's last, 64 a tile, through a ring of LST cp.async stages (K
// sw128 K-major, V sw128 N-major), Q sw128 K-major for the whole pass. Per tile
//   S_m = Q_m K_m^T   wgmma m64n64k16 over group m's KPG = E / 16 k steps (both from shared
//                     memory),
//   kappa = sum_m (s S_m)^2 in fp32 (keys after the query zero on the diagonal tile), its row sums
//                     into den, P = kappa rounded to bf16 (the A fragments: wgmma.cuh's layout),
//   O += P V          wgmma m64n128k16, A = P in registers, B = V (N-major).
// PIPE (one group, m1): tile j + 1's scores run on the tensor cores beside tile j's O += P V, and
// its kappa is formed while O's products run (attention_wgmma.cu's pipelined loop without the
// maximum); the ring holds tiles j, j + 1 and j + 2's copy. The last tile is peeled off the loop
// so that no wgmma sits on a branch (ptxas serializes the products then). Without PIPE each
// tile's products are waited for in turn (two blocks a multiprocessor overlap each other). The
// mma.sync pass spent ~3.2 ms at 128K on 0.57 TFLOP (178 TFLOP/s).
// Shared: Q [64][DK] (sw128), then LST stages of K [64][DK] and V [64][128] (sw128); 1 KB of
// slack for the alignment.
template <int DK, int LST> struct kt_local_smem {
    static constexpr int QB = 64 * DK * 2, KB = 64 * DK * 2, VB = 64 * KTW_DV * 2;
    static constexpr int STAGE = KB + VB;
    static constexpr size_t SMEM = 1024 + QB + (size_t)LST * STAGE;
};

template <int DK, int KPG, bool PIPE>
__global__ void __launch_bounds__(128, 2) kt_local_wgmma(kt_args a) {
#ifdef KTW_HAVE_WGMMA
    static_assert(!PIPE || KPG == DK / 16, "the pipelined loop: one group");
    constexpr int LST = PIPE ? 3 : 2;
    constexpr int CPR = DK / 8, RPP = 128 / CPR; // Q and K: 16-byte chunks a row, rows a pass
    using SM = kt_local_smem<DK, LST>;
    extern __shared__ __align__(16) unsigned char ktw_sm[];
    unsigned char *sQ = ktw_align(ktw_sm), *sKV = sQ + SM::QB;
    const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5, g = lane >> 2, tg = lane & 3;
    const int n = blockIdx.y, b = n / a.H, h = n % a.H;
    const int q0 = (gridDim.x - 1 - blockIdx.x) * KT_L; // the chunks' longest rows first
    const size_t tokk = (size_t)a.H * DK, tokv = (size_t)a.H * KTW_DV;
    const bf16_t *qb = a.q + (size_t)b * a.T * tokk + (size_t)h * DK;
    const bf16_t *kb = a.k + (size_t)b * a.T * tokk + (size_t)h * DK;
    const bf16_t *vb = a.v + (size_t)b * a.T * tokv + (size_t)h * KTW_DV;
    // copies: Q and K chunk tid % CPR of rows tid / CPR + RPP i, V chunk tid % 16 of rows
    // tid / 16 + 8 i; rows past T zero (row q0 or k0, which exists, is the address read)
    const int qc = tid % CPR, qr = tid / CPR, vc = tid & 15, vr = tid >> 4;
#pragma unroll
    for (int i = 0; i < 64 / RPP; i++) {
        const int r = qr + RPP * i, t = q0 + r;
        const bool ok = t < a.T;
        cp_async16_zfill(sQ + sw128_chunk(64, r, qc), qb + (size_t)(ok ? t : q0) * tokk + qc * 8,
                         ok);
    }
    auto issue = [&](int k0, int s) {
        unsigned char *dK = sKV + s * SM::STAGE, *dV = dK + SM::KB;
#pragma unroll
        for (int i = 0; i < 64 / RPP; i++) {
            const int r = qr + RPP * i, t = k0 + r;
            const bool ok = t < a.T;
            cp_async16_zfill(dK + sw128_chunk(64, r, qc),
                             kb + (size_t)(ok ? t : k0) * tokk + qc * 8, ok);
        }
#pragma unroll
        for (int i = 0; i < 8; i++) {
            const int r = vr + 8 * i, t = k0 + r;
            const bool ok = t < a.T;
            cp_async16_zfill(dV + sw128_chunk(64, r, vc),
                             vb + (size_t)(ok ? t : k0) * tokv + vc * 8, ok);
        }
    };
    const int kfirst = q0 / a.CL * a.CL, ntiles = (q0 - kfirst) / 64 + 1;
    // the first LST - 1 tiles (Q rides in tile 0's group; a group each, empty past the last)
#pragma unroll
    for (int s = 0; s < LST - 1; s++) {
        if (s < ntiles) issue(kfirst + 64 * s, s);
        cp_async_commit();
    }
    // tile j's stage (and tiles up to j + LST - 2) landed for everyone, the stage of tile j - 1
    // free: tile j + LST - 1's copy goes to it
    auto arrive = [&](int j) {
        cp_async_wait<0>();
        fence_proxy_async();
        __syncthreads();
        if (j + LST - 1 < ntiles) issue(kfirst + 64 * (j + LST - 1), (j + LST - 1) % LST);
        cp_async_commit();
    };
    const uint32_t aQ = smem_u32(sQ), aKV = smem_u32(sKV);
    const uint64_t dQ = wgmma_desc(aQ, 16, 1024), dK0 = wgmma_desc(aKV, 16, 1024),
                   dV0 = wgmma_desc(aKV + SM::KB, 64 * 128, 1024);
    auto stage_desc = [&](uint64_t d0, int j) {
        return d0 + (uint64_t)((j % LST) * SM::STAGE >> 4);
    };
    // S = Q_m K_m^T of group m for the tile whose K is at descriptor dK (issued, not committed)
    auto scores = [&](float *S, uint64_t dK, int m) {
#pragma unroll
        for (int u = 0; u < KPG; u++) {
            const int ks = m * KPG + u;
            const uint32_t step = ((ks >> 2) * 64 * 128 + (ks & 3) * 32) >> 4; // Q and K alike
            wgmma_ss_n64(S, dQ + step, dK + step, u > 0);
        }
    };
    auto square = [&](const float *S, float *kap, int m) {
#pragma unroll
        for (int i = 0; i < 32; i++) {
            const float c = a.s * S[i];
            kap[i] = m ? fmaf(c, c, kap[i]) : c * c;
        }
    };
    float O[64], ds[2] = {0.0f, 0.0f};
#pragma unroll
    for (int i = 0; i < 64; i++) O[i] = 0.0f;
    // kappa of the tile at key k0: the diagonal tile's keys after the query zeroed, the row sums
    // into ds; pack: the weights into P (n8 blocks 2 kk and 2 kk + 1: the A fragment of keys
    // 16 kk .. + 15)
    auto weigh = [&](float *kap, int k0) {
        if (k0 == q0)
#pragma unroll
            for (int i = 0; i < 32; i++)
                if (8 * (i >> 2) + 2 * tg + (i & 1) > warp * 16 + g + ((i >> 1) & 1) * 8)
                    kap[i] = 0.0f;
#pragma unroll
        for (int t = 0; t < 8; t++) {
            ds[0] += kap[4 * t] + kap[4 * t + 1];
            ds[1] += kap[4 * t + 2] + kap[4 * t + 3];
        }
    };
    uint32_t P[4][4];
    auto pack = [&](const float *kap) {
#pragma unroll
        for (int t = 0; t < 8; t++) {
            P[t / 2][(t & 1) * 2 + 0] = pack_bf16(kap[4 * t], kap[4 * t + 1]);
            P[t / 2][(t & 1) * 2 + 1] = pack_bf16(kap[4 * t + 2], kap[4 * t + 3]);
        }
    };
    // tile j's kappa, group by group, each group's products waited for; its weights into P
    auto kappa = [&](int j) {
        float S[32], kap[32];
        for (int m = 0; m < a.M; m++) {
            wgmma_fence();
            scores(S, stage_desc(dK0, j), m);
            wgmma_commit();
            wgmma_wait<0>();
            wgmma_fence_regs<32>(S);
            square(S, kap, m);
        }
        weigh(kap, kfirst + 64 * j);
        pack(kap);
    };
    // O += P V of tile j; with NEXT tile j + 1's scores beside, squared while O's products run
    // and packed into P once they are done (P stays untouched while a product reads it)
    auto values = [&](int j, auto next) {
        constexpr bool NEXT = decltype(next)::value;
        const uint64_t dV = stage_desc(dV0, j);
        float S[32];
        wgmma_fence();
        if constexpr (NEXT) {
            scores(S, stage_desc(dK0, j + 1), 0);
            wgmma_commit();
        }
#pragma unroll
        for (int kk = 0; kk < 4; kk++) wgmma_rs_n128_tb(O, P[kk], dV + (kk * 2048 >> 4));
        wgmma_commit();
        if constexpr (NEXT) {
            float kap[32];
            wgmma_wait<1>();
            wgmma_fence_regs<32>(S);
            square(S, kap, 0);
            weigh(kap, kfirst + 64 * (j + 1));
            wgmma_wait<0>(); // the tile's stage and P are free
            wgmma_fence_regs<64>(O);
            pack(kap);
        } else {
            wgmma_wait<0>();
            wgmma_fence_regs<64>(O);
        }
    };
    using yes = std::integral_constant<bool, true>;
    using no = std::integral_constant<bool, false>;
    if constexpr (PIPE) {
        arrive(0);
        kappa(0);
        for (int j = 0; j < ntiles - 1; j++) {
            if (j > 0) arrive(j);
            values(j, yes());
        }
        if (ntiles > 1) arrive(ntiles - 1);
        values(ntiles - 1, no());
    } else {
        for (int j = 0; j < ntiles; j++) {
            arrive(j);
            kappa(j);
            values(j, no());
        }
    }
    // o = (o + O) / max(den + row sums, eps): the read pass's terms and these
    kt_local_out<KTW_DV>(a, b, h, q0 + warp * 16 + g, tg, ds, O);
#else
    __trap(); // no wgmma in this image: kata_tc_wgmma_usable() keeps launches away
#endif
}

// ---------------------------------------------------------------- host side

// MIXSCOPE_KATA_PROFILE: the blocks a multiprocessor holds of each pass launched (what its shared
// memory and registers let fit), once a kernel and process.
static void ktw_report(const void *kernel, const char *name, int threads, size_t smem) {
    static const bool on = getenv("MIXSCOPE_KATA_PROFILE") != NULL;
    static const void *seen[32];
    static int nseen = 0;
    if (!on || nseen == 32) return;
    for (int i = 0; i < nseen; i++)
        if (seen[i] == kernel) return;
    seen[nseen++] = kernel;
    int nb = 0;
    if (cudaOccupancyMaxActiveBlocksPerMultiprocessor(&nb, kernel, threads, smem) != cudaSuccess) {
        cudaGetLastError();
        return;
    }
    fprintf(stderr,
            "kata tc (wgmma): %s: %d blocks a multiprocessor (%d threads, %zu bytes shared)\n",
            name, nb, threads, smem);
}

int kata_tc_wgmma_usable(void) {
    static const int usable = gpu_sm90a_usable("MIXSCOPE_KATA_WGMMA", (const void *)kt_state_wgmma);
    return usable;
}

// MIXSCOPE_KATA_STATE (a benchmark knob): 0 the two-tile pass without the overlap
// (kt_state_wgmma), 4 kt_state_ov's four tiles a block, 3 three warpgroups of a tile (one block
// a multiprocessor: at B H = 16, d = 128 the 2176 tile-sequences fill 5.5 waves of 396 warpgroups
// against 4.1 of 528 at two, whose fifth runs 32 blocks); default 2 (two tiles a block).
// Read at each call (a getenv beside a pass of tens of microseconds at least), so that test_gpu can
// run the new forms beside the default in one process.
static int ktw_state_form(void) {
    const char *s = getenv("MIXSCOPE_KATA_STATE");
    return s && (!strcmp(s, "0") || !strcmp(s, "3") || !strcmp(s, "4")) ? atoi(s) : 2;
}

template <int TW, int NWG = 2> static int ktw_state_ov(const kt_args &a, cudaStream_t st, err *e) {
    constexpr int TILES = NWG * TW;
    constexpr size_t SMEM = kt_state_ov_smem<TW, NWG>::SMEM;
    CUDA_TRY(cudaFuncSetAttribute(kt_state_ov<TW, NWG>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                  (int)SMEM),
             "gpu kata tc (wgmma): shared memory");
    static_assert(SMEM <= 227 * 1024, "a block's shared memory");
    kt_state_ov<TW, NWG>
        <<<dim3((a.ntile + TILES - 1) / TILES, a.B * a.H), 128 * NWG, SMEM, st>>>(a);
    CUDA_LAUNCHED("gpu kata tc (wgmma): state pass");
    ktw_report((const void *)kt_state_ov<TW, NWG>,
               NWG == 3  ? "state, 3 warpgroups"
               : TW == 2 ? "state, 4 tiles"
                         : "state",
               128 * NWG, SMEM);
    return 0;
}

// MIXSCOPE_KATA_READ=128 keeps the 128-token read pass (a benchmark knob); 256 otherwise.
static int ktw_read_tokens(void) {
    static int tokens = 0;
    if (!tokens) {
        const char *s = getenv("MIXSCOPE_KATA_READ");
        tokens = s && !strcmp(s, "128") ? KT_R : KT2_R;
    }
    return tokens;
}

int kata_tc_wgmma_state(const kt_args &a, cudaStream_t st, err *e) {
    if (ktw_state_form() == 4) return ktw_state_ov<2>(a, st, e);
    if (ktw_state_form() == 3) return ktw_state_ov<1, 3>(a, st, e);
    if (ktw_state_form() == 2) return ktw_state_ov<1>(a, st, e);
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
    if (ktw_read_tokens() == KT2_R && a.CL % KT2_R == 0) { // a block inside one chunk
        CUDA_TRY(cudaFuncSetAttribute(kt_read_ov<DK>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                      (int)kt_read_ov_smem<DK>::SMEM),
                 "gpu kata tc (wgmma): shared memory");
        kt_read_ov<DK>
            <<<dim3((a.T + KT2_R - 1) / KT2_R, a.B * a.H), 256, kt_read_ov_smem<DK>::SMEM, st>>>(a);
        CUDA_LAUNCHED("gpu kata tc (wgmma): read pass");
        ktw_report((const void *)kt_read_ov<DK>, "read", 256, kt_read_ov_smem<DK>::SMEM);
        return 0;
    }
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

// MIXSCOPE_KATA_LOCAL (a benchmark knob): 0 kata_tc.cu's mma.sync pass (the baseline), 1
// kt_local_wgmma's simple form; 2 or unset its pipelined form (m1 only; other maps take 1).
// Read at each call, as MIXSCOPE_KATA_STATE.
int kata_tc_wgmma_local_form(void) {
    const char *s = getenv("MIXSCOPE_KATA_LOCAL");
    return s && (!strcmp(s, "0") || !strcmp(s, "1")) ? atoi(s) : 2;
}

template <int DK, int KPG, bool PIPE>
static int ktw_local(const kt_args &a, cudaStream_t st, err *e) {
    constexpr size_t SMEM = kt_local_smem < DK, PIPE ? 3 : 2 > ::SMEM;
    CUDA_TRY(cudaFuncSetAttribute(kt_local_wgmma<DK, KPG, PIPE>,
                                  cudaFuncAttributeMaxDynamicSharedMemorySize, (int)SMEM),
             "gpu kata tc (wgmma): shared memory");
    static_assert(SMEM <= 227 * 1024, "a block's shared memory");
    kt_local_wgmma<DK, KPG, PIPE><<<dim3((a.T + KT_L - 1) / KT_L, a.B * a.H), 128, SMEM, st>>>(a);
    CUDA_LAUNCHED("gpu kata tc (wgmma): local pass");
    ktw_report((const void *)kt_local_wgmma<DK, KPG, PIPE>, PIPE ? "local, pipelined" : "local",
               128, SMEM);
    return 0;
}

// The group width E (a multiple of 16, kata_tc_supported) picks the k steps a group.
template <int DK> static int ktw_local_dk(const kt_args &a, cudaStream_t st, err *e) {
    if (a.M == 1)
        return kata_tc_wgmma_local_form() == 2 ? ktw_local<DK, DK / 16, true>(a, st, e)
                                               : ktw_local<DK, DK / 16, false>(a, st, e);
    switch (a.E / 16) { // M > 1: E <= dk / 2
    case 1:
        return ktw_local<DK, 1, false>(a, st, e);
    case 2:
        return ktw_local<DK, 2, false>(a, st, e);
    case 4:
        return ktw_local<DK, 4, false>(a, st, e);
    default:
        return err_set(e, "gpu kata tc (wgmma): local pass: groups of %d", a.E);
    }
}

int kata_tc_wgmma_local(const kt_args &a, cudaStream_t st, err *e) {
    return a.dk == 64 ? ktw_local_dk<64>(a, st, e) : ktw_local_dk<128>(a, st, e);
}
