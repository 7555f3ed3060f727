// attention_ws_wgmma.cu: the bf16 forward of causal softmax attention and Parallax at d = 128 on
// sm_90a, warp specialized the way FlashAttention-3 schedules it (Shah et al. 2024, section 3).
// The arithmetic is attention_wgmma.cu's (scores on the tensor cores in fp32, the online softmax
// in base 2, the weights rounded to bf16 for the value products, fp32 accumulators); what changes
// is who waits for what. Spec: kata-parallax.md B.4.
//
// Work item: 128 query rows of one sequence and head. Block: three warpgroups (384 threads, one
// block a multiprocessor), persistent: block x takes items x, x + G, x + 2 G, ... of the list
// ordered longest rows first (G blocks, as many as multiprocessors), so that one item's last
// products, its stores and the next item's first loads overlap instead of a block's start and
// end each waiting on memory.
//   warpgroup 0, the producer: warps 0-1 stream the K tiles, warps 2-3 the V tiles (BN keys a
//     tile) of the block's items one after the other through a ring of ST stages by cp.async; a
//     tile's FULL mbarrier completes when its copies have landed, and a stage is refilled once
//     both consumers have arrived on its EMPTY. K and V have stages and barriers of their own, so
//     K_{j+1} loads while V_j is still read.
//   warpgroups 1 and 2, the consumers: 64 query rows each, Q (and Parallax's R) in shared memory,
//     the next item's copied in as soon as the last score products of this one are done. Softmax
//     (BN = 128): per tile j a consumer issues S_j = Q K_j^T (wgmma m64n128k16, both operands in
//     shared memory) and the previous tile's O += P_{j-1} V_{j-1} (A = the weights in registers,
//     V read N-major), waits for S_j alone, runs its online softmax while P_{j-1} V_{j-1} is on
//     the tensor cores (the intra-warpgroup overlap), then waits for the value products and
//     rescales O. Parallax (BN = 64): S, U, O1 and O2 leave no registers for that overlap
//     (ptxas spilled 208 bytes and serialised the products), so its tiles run one after the
//     other; the two consumers still overlap each other.
// Registers: 384 threads leave 168 a thread; the producer gives its share up (setmaxnreg 48; at 40
// its item loop spills) so that a softmax consumer holds O (64), S (64), the weights (32) and
// addresses in 232. Measured on the H200 and dropped (docs/gpu-results.md): the consumers taking
// turns at issuing (FlashAttention-3's ping-pong, two named barriers) and Q in registers: neither
// changed the time.
//
// attention_wgmma.cu's kernels stay for MIXSCOPE_ATTN_WS=0 and as the comparison in bench-gpu.
#include <cuda_bf16.h>
#include <cuda_runtime.h>
#include <math.h>
#include <stdint.h>
#include <stdlib.h>

#include "attention_rows.cuh"
#include "attention_wgmma.cuh"
#include "gpu_common.cuh"
#include "mma.cuh"
#if defined(__CUDA_ARCH_FEAT_SM90_ALL) || !defined(__CUDA_ARCH__)
#include "wgmma.cuh"
#define AWS_HAVE_WGMMA 1
#endif

#define AWS_D  128 // dk = dv
#define AWS_BM 128 // query rows of a block: two consumers of 64
// keys of a tile: 128 for softmax; 64 for Parallax, whose consumers hold S, U, O1 and O2

// Shared memory: the consumers' Q tiles (sw128, 64 rows each; Parallax's R tiles after them),
// the K ring, the V ring (sw128, BN rows a stage), then the mbarriers FULL_K, FULL_V, EMPTY_K,
// EMPTY_V of each stage.
template <bool PLX, int BN, int ST> struct aws_smem {
    static constexpr int QB = 64 * AWS_D * 2; // 16 KB
    static constexpr int KB = BN * AWS_D * 2; // a K or V tile
    static constexpr int Q = 0, R = 2 * QB, K = (PLX ? 4 : 2) * QB, V = K + ST * KB,
                         BAR = V + ST * KB;
    static constexpr int BYTES = BAR + 4 * ST * 8 + 1024; // + alignment of the sw128 tiles
};
// mbarrier kinds
#define AWS_FULL_K  0
#define AWS_FULL_V  1
#define AWS_EMPTY_K 2
#define AWS_EMPTY_V 3
// named barrier: a consumer's Q is in (1, 2)
#define AWS_QBAR(c) (1 + (c))

// The BN / 4 values a thread holds of row half hr of a tile of BN keys (x[4 t + 2 hr + e],
// t < BN / 8, e < 2), combined pairwise (a tree: five dependent steps at 128 keys).
template <int BN, typename F>
__device__ __forceinline__ float aws_row_reduce(const float *x, int hr, F op) {
    static_assert(BN == 64 || BN == 128, "tiles of 64 or 128 keys");
    float a[BN / 8];
#pragma unroll
    for (int t = 0; t < BN / 8; t++) a[t] = op(x[4 * t + 2 * hr], x[4 * t + 2 * hr + 1]);
    if constexpr (BN == 128) {
#pragma unroll
        for (int t = 0; t < 8; t++) a[t] = op(a[t], a[t + 8]);
    }
#pragma unroll
    for (int t = 0; t < 4; t++) a[t] = op(a[t], a[t + 4]);
    a[0] = op(a[0], a[2]), a[1] = op(a[1], a[3]);
    return op(a[0], a[1]);
}

// grid G, 384 threads. q, r [B, Tq, H, 128], k, v [B, Tk, H, 128] bf16; o [B, Tq, H, 128] fp32.
// Query row i sits at position pos0 + i; scale_l2 = scale log2(e).
template <bool PLX, int BN, int ST>
__global__ void __launch_bounds__(384, 1)
    attn_fwd_ws(int B, int Tq, int Tk, int H, int pos0, int window, float scale_l2, const bf16_t *q,
                const bf16_t *r, const bf16_t *k, const bf16_t *v, float *o) {
#ifdef AWS_HAVE_WGMMA
    typedef aws_smem<PLX, BN, ST> L;
    constexpr int NS = BN / 2; // S accumulators a thread: 64 x BN / 128
    extern __shared__ unsigned char aws_raw[];
    unsigned char *base =
        (unsigned char *)(((uintptr_t)aws_raw + 1023) & ~(uintptr_t)1023); // sw128 tiles
    const uint32_t abase = (uint32_t)__cvta_generic_to_shared(base);
    auto bar = [&](int kind, int s) { return abase + L::BAR + (kind * ST + s) * 8; };
    const int wg = threadIdx.x / 128, wtid = threadIdx.x % 128;
    const size_t qrow = (size_t)H * AWS_D; // elements between consecutive tokens
    const int nblk = (Tq + AWS_BM - 1) / AWS_BM, nitems = nblk * B * H;
    // item i: rows q0 .. q0 + nq - 1 of sequence b, head h (the longest rows first); its key
    // tiles kfirst + BN j, j < ntiles (both consumers walk all of them)
    struct item {
        int b, h, q0, nq, kfirst, ntiles;
    };
    auto item_at = [&](int i) {
        item it;
        const int n = i % (B * H);
        it.b = n / H, it.h = n % H;
        it.q0 = (nblk - 1 - i / (B * H)) * AWS_BM;
        it.nq = min(AWS_BM, Tq - it.q0);
        const int pfirst = pos0 + it.q0, plast = min(pos0 + it.q0 + it.nq - 1, Tk - 1);
        it.kfirst = attn_first(pfirst, window) / BN * BN;
        it.ntiles = plast >= it.kfirst ? (plast - it.kfirst) / BN + 1 : 0;
        return it;
    };

    if (threadIdx.x == 0) {
        for (int s = 0; s < ST; s++) {
            mbar_init(bar(AWS_FULL_K, s), 64); // the 64 threads of a stream
            mbar_init(bar(AWS_FULL_V, s), 64);
            mbar_init(bar(AWS_EMPTY_K, s), 8); // lane 0 of the consumers' 8 warps
            mbar_init(bar(AWS_EMPTY_V, s), 8);
        }
    }
    __syncthreads();

    if (wg == 0) {
        // The producer: warps 0-1 K, warps 2-3 V. A thread copies 16-byte piece lc of rows
        // r0 + 4 i (i < BN / 4) of each tile; rows past Tk are zero (their weights are 0, and
        // 0 x garbage could be NaN). g counts the tiles through the ring across items.
        setmaxnreg_dec<48>();
        const int kind = wtid / 64, t = wtid % 64, lc = t % 16, r0 = t / 16;
        const uint32_t ring = abase + (kind ? L::V : L::K);
        int g = 0;
        for (int i = blockIdx.x; i < nitems; i += gridDim.x) {
            const item it = item_at(i);
            const bf16_t *src =
                (kind ? v : k) + ((size_t)it.b * Tk + r0) * qrow + (size_t)it.h * AWS_D + lc * 8;
            for (int j = 0; j < it.ntiles; j++, g++) {
                const int s = g % ST, k0 = it.kfirst + j * BN;
                mbar_wait(bar(AWS_EMPTY_K + kind, s), ((g / ST) & 1) ^ 1);
                const uint32_t dst = ring + s * L::KB;
                const bf16_t *gs = src + (size_t)k0 * qrow;
#pragma unroll 4
                for (int x = 0; x < BN / 4; x++) {
                    const int row = r0 + 4 * x;
                    const uint32_t off = sw128_chunk(BN, row, lc);
                    if (k0 + row < Tk)
                        cp_async16_s(dst + off, gs + 4 * x * qrow);
                    else
                        sts_zero16(dst + off);
                }
                cp_async_commit();
                cp_async_wait<0>();
                fence_proxy_async(); // the copies are read next by wgmma (the async proxy)
                mbar_arrive(bar(AWS_FULL_K + kind, s));
            }
        }
        return;
    }

    setmaxnreg_inc<232>();
    const int c = wg - 1; // this consumer
    const int warp = wtid / 32, lane = wtid % 32, gid = lane / 4, tig = lane % 4;
    const uint32_t aQ = abase + L::Q + c * L::QB, aR = abase + L::R + c * L::QB;
    // Q (and R) rows of item i into this consumer's tiles, by cp.async (not waited for): thread
    // piece lc of rows lr + 8 x (rows 8 apart share their swizzle)
    auto load_q = [&](int i) {
        const item it = item_at(i);
        const int wq0 = it.q0 + c * 64, wnq = min(64, Tq - wq0);
        const int lc = wtid % 16, lr = wtid / 16;
        const uint32_t soff = sw128_chunk(64, lr, lc);
        const size_t goff = ((size_t)it.b * Tq + wq0 + lr) * qrow + (size_t)it.h * AWS_D + lc * 8;
#pragma unroll
        for (int x = 0; x < 8; x++) {
            if (lr + 8 * x < wnq) {
                cp_async16_s(aQ + soff + 1024 * x, q + goff + 8 * x * qrow);
                if constexpr (PLX) cp_async16_s(aR + soff + 1024 * x, r + goff + 8 * x * qrow);
            } else {
                sts_zero16(aQ + soff + 1024 * x);
                if constexpr (PLX) sts_zero16(aR + soff + 1024 * x);
            }
        }
        cp_async_commit();
    };
    // descriptors of k step 0 (stage 0); a k step adds its byte offset >> 4
    const uint64_t dQ = wgmma_desc(aQ, 16, 1024), dR = wgmma_desc(aR, 16, 1024);
    const uint64_t dK0 = wgmma_desc(abase + L::K, 16, 1024),
                   dV0 = wgmma_desc(abase + L::V, BN * 128, 1024);
    auto stage = [&](uint64_t d0, int g) { return d0 + (uint64_t)((g % ST) * L::KB >> 4); };
    // S = A K^T (A = Q, or R for Parallax's U) of the tile in stage g % ST (issued, not
    // committed): A's regions are 64 rows apart, K's BN
    auto scores = [&](float *S, uint64_t dA, int g) {
        const uint64_t dK = stage(dK0, g);
        if constexpr (BN == 128)
            wgmma_ss_n128_zero(S, dA, dK);
        else
            wgmma_ss_n64_zero(S, dA, dK);
#pragma unroll
        for (int ks = 1; ks < AWS_D / 16; ks++) {
            const uint64_t a = dA + (((ks >> 2) * 64 * 128 + (ks & 3) * 32) >> 4),
                           bk = dK + (((ks >> 2) * BN * 128 + (ks & 3) * 32) >> 4);
            if constexpr (BN == 128)
                wgmma_ss_n128(S, a, bk, 1);
            else
                wgmma_ss_n64(S, a, bk, 1);
        }
    };
    // O += P V of the tile in stage g % ST (issued, not committed)
    auto values = [&](float *O, const uint32_t(*P)[4], int g) {
        const uint64_t dV = stage(dV0, g);
#pragma unroll
        for (int kk = 0; kk < BN / 16; kk++) wgmma_rs_n128_tb(O, P[kk], dV + (kk * 2048 >> 4));
    };
    // Weights in bf16 as the A fragments of the value products (n8 blocks 2 kk and 2 kk + 1 are
    // those of keys 16 kk .. 16 kk + 15). Only once the last value products are done: packed
    // while those are in flight, ptxas gives P's registers to the new weights and serialises the
    // products (C7513), as FlashAttention-3 found.
    auto pack = [](const float *S, uint32_t(*P)[4]) {
#pragma unroll
        for (int t = 0; t < BN / 8; t++) {
            P[t / 2][(t & 1) * 2 + 0] = pack_bf16(S[4 * t], S[4 * t + 1]);
            P[t / 2][(t & 1) * 2 + 1] = pack_bf16(S[4 * t + 2], S[4 * t + 3]);
        }
    };
    auto pin = [](uint32_t(*P)[4]) {
#pragma unroll
        for (int kk = 0; kk < BN / 16; kk++)
#pragma unroll
            for (int x = 0; x < 4; x++) asm volatile("" : "+r"(P[kk][x])::"memory");
    };
    // a stage's EMPTY: once per warp, after the warpgroup's wait
    auto release = [&](int kind, int g) {
        if (lane == 0) mbar_arrive(bar(kind, g % ST));
    };

    if (blockIdx.x < nitems) load_q(blockIdx.x);
    int g0 = 0; // the ring's count of tiles before this item's
    for (int i = blockIdx.x; i < nitems; i += gridDim.x) {
        const item it = item_at(i);
        const int wq0 = it.q0 + c * 64, wnq = min(64, Tq - wq0); // its rows (wnq <= 0: none)
        const int r_lo = wq0 + warp * 16 + gid, p_lo = pos0 + r_lo, p_hi = p_lo + 8;
        const int wpfirst = pos0 + wq0, nt = it.ntiles;
        const bool next = i + (int)gridDim.x < nitems;
        cp_async_wait<0>(); // this item's Q
        fence_proxy_async();
        bar_sync(AWS_QBAR(c), 128);
        float O1[64], O2[PLX ? 64 : 1];
#pragma unroll
        for (int x = 0; x < 64; x++) {
            O1[x] = 0.0f;
            if constexpr (PLX) O2[x] = 0.0f;
        }
        float mrow[2] = {-INFINITY, -INFINITY}, d1[2] = {0.0f, 0.0f}, d2[2] = {0.0f, 0.0f};
        // The online softmax of the scores S of the tile at key k0 for rows lo (c = 0, 1) and
        // hi (c = 2, 3), in base 2 (attention_wgmma.cu's weigh): invisible keys get -inf, so w = 0
        // for them; a row that has seen no key keeps m = -inf and uses 0 in its place. The weights
        // w replace S (and w u replaces Parallax's U); al the factor O1, O2 take for the new
        // maximum.
        auto weigh = [&](float *S, float *U, int k0, float *al) {
            if (!attn_tile_whole(k0, BN, wpfirst, 64, Tk, window)) {
#pragma unroll
                for (int t = 0; t < BN / 8; t++)
#pragma unroll
                    for (int e = 0; e < 4; e++) {
                        const int key = k0 + t * 8 + 2 * tig + (e & 1), p = e < 2 ? p_lo : p_hi;
                        if (!attn_visible(key, p, Tk, window)) S[4 * t + e] = -INFINITY;
                    }
            }
            const auto mx = [](float x, float y) { return fmaxf(x, y); };
            const auto add = [](float x, float y) { return x + y; };
            float mt[2] = {aws_row_reduce<BN>(S, 0, mx), aws_row_reduce<BN>(S, 1, mx)}, ms[2];
#pragma unroll
            for (int hr = 0; hr < 2; hr++) {
                mt[hr] = fmaxf(mt[hr], __shfl_xor_sync(0xffffffffu, mt[hr], 1));
                mt[hr] = fmaxf(mt[hr], __shfl_xor_sync(0xffffffffu, mt[hr], 2));
                const float mn = fmaxf(mrow[hr], mt[hr] * scale_l2); // scale > 0
                al[hr] = mn == -INFINITY ? 1.0f : ex2(mrow[hr] - mn);
                mrow[hr] = mn;
                ms[hr] = mn == -INFINITY ? 0.0f : mn;
                d1[hr] *= al[hr], d2[hr] *= al[hr];
            }
#pragma unroll
            for (int x = 0; x < NS; x++) {
                S[x] = ex2(fmaf(S[x], scale_l2, -ms[(x >> 1) & 1]));
                if constexpr (PLX) U[x] *= S[x];
            }
            d1[0] += aws_row_reduce<BN>(S, 0, add), d1[1] += aws_row_reduce<BN>(S, 1, add);
            if constexpr (PLX)
                d2[0] += aws_row_reduce<BN>(U, 0, add), d2[1] += aws_row_reduce<BN>(U, 1, add);
        };
        auto rescale = [&](const float *al) {
            if (__any_sync(0xffffffffu, al[0] != 1.0f || al[1] != 1.0f)) {
#pragma unroll
                for (int x = 0; x < 64; x++) {
                    O1[x] *= al[(x >> 1) & 1];
                    if constexpr (PLX) O2[x] *= al[(x >> 1) & 1];
                }
            }
        };
        // the value products' registers, defined before the fence so that they need not wait
        auto settle = [&](uint32_t(*P)[4], uint32_t(*PU)[4]) {
            pin(P);
            wgmma_fence_regs<64>(O1);
            if constexpr (PLX) pin(PU), wgmma_fence_regs<64>(O2);
        };
        // once the item's last score products are done, Q's tiles take the next item's
        auto q_free = [&](int j) {
            if (j == nt - 1 && next) load_q(i + gridDim.x);
        };

        if constexpr (PLX) {
            for (int j = 0; j < nt; j++) {
                const int g = g0 + j;
                float S[NS], U[NS], al[2];
                uint32_t P[BN / 16][4], PU[BN / 16][4];
                mbar_wait(bar(AWS_FULL_K, g % ST), (g / ST) & 1);
                wgmma_fence();
                scores(S, dQ, g);
                scores(U, dR, g);
                wgmma_commit();
                wgmma_wait<0>();
                wgmma_fence_regs<NS>(S);
                wgmma_fence_regs<NS>(U);
                release(AWS_EMPTY_K, g);
                q_free(j);
                weigh(S, U, it.kfirst + j * BN, al);
                rescale(al);
                pack(S, P);
                pack(U, PU);
                mbar_wait(bar(AWS_FULL_V, g % ST), (g / ST) & 1);
                settle(P, PU);
                wgmma_fence();
                values(O1, P, g);
                values(O2, PU, g);
                wgmma_commit();
                wgmma_wait<0>();
                wgmma_fence_regs<64>(O1);
                wgmma_fence_regs<64>(O2);
                release(AWS_EMPTY_V, g);
            }
        } else if (nt > 0) {
            float S[NS], al[2];
            uint32_t P[BN / 16][4];
            mbar_wait(bar(AWS_FULL_K, g0 % ST), (g0 / ST) & 1);
            wgmma_fence();
            scores(S, dQ, g0);
            wgmma_commit();
            wgmma_wait<0>();
            wgmma_fence_regs<NS>(S);
            release(AWS_EMPTY_K, g0);
            q_free(0);
            weigh(S, NULL, it.kfirst, al);
            pack(S, P);
            for (int j = 1; j < nt; j++) {
                const int g = g0 + j;
                mbar_wait(bar(AWS_FULL_K, g % ST), (g / ST) & 1);
                settle(P, NULL);
                wgmma_fence();
                scores(S, dQ, g);
                wgmma_commit();
                mbar_wait(bar(AWS_FULL_V, (g - 1) % ST), ((g - 1) / ST) & 1);
                wgmma_fence(); // (the wait's branch ends the fence's reach: ptxas C7513 without it)
                values(O1, P, g - 1);
                wgmma_commit();
                wgmma_wait<1>(); // S_j
                wgmma_fence_regs<NS>(S);
                release(AWS_EMPTY_K, g);
                q_free(j);
                weigh(S, NULL, it.kfirst + j * BN, al);
                wgmma_wait<0>(); // the value products of tile j - 1: P and its stage stay till then
                wgmma_fence_regs<64>(O1);
                release(AWS_EMPTY_V, g - 1);
                rescale(al);
                pack(S, P);
            }
            const int g = g0 + nt - 1;
            mbar_wait(bar(AWS_FULL_V, g % ST), (g / ST) & 1);
            settle(P, NULL);
            wgmma_fence();
            values(O1, P, g);
            wgmma_commit();
            wgmma_wait<0>();
            wgmma_fence_regs<64>(O1);
            release(AWS_EMPTY_V, g);
        }
        if (nt == 0 && next) load_q(i + gridDim.x); // (Q's tiles were not read)
        g0 += nt;

        float *orow[2];
#pragma unroll
        for (int hr = 0; hr < 2; hr++) {
            const int row = r_lo + 8 * hr;
            orow[hr] = row < wq0 + wnq ? o + ((size_t)it.b * Tq + row) * qrow + (size_t)it.h * AWS_D
                                       : NULL;
        }
        attn_store_rows<PLX, 16>(d1, d2, O1, O2, orow, tig);
    }
#else
    __trap(); // no wgmma in this image: attn_wgmma_usable() keeps launches away
#endif
}

// Stages of softmax's K and V rings: MIXSCOPE_ATTN_WS=3 (the default: 224 KB of the 227; 1-2%
// faster than 2 on the H200, docs/gpu-results.md) or 2; 0 keeps attention_wgmma.cu's kernels;
// read once.
extern "C" int attn_ws_stages(void) {
    static int st = -1;
    if (st < 0) {
        const char *s = getenv("MIXSCOPE_ATTN_WS");
        st = s ? atoi(s) : 3;
        if (st != 0 && st != 2) st = 3;
    }
    return st;
}
// Blocks of the persistent launch: one a multiprocessor, or with MIXSCOPE_ATTN_WS_PERSIST=0 one
// an item (each block one item, as an ordinary launch); read once.
static int aws_blocks(int nitems) {
    static int sms = -1;
    if (sms < 0) {
        const char *s = getenv("MIXSCOPE_ATTN_WS_PERSIST");
        sms = s && atoi(s) == 0 ? 0 : gpu_sm_count();
    }
    return sms > 0 && sms < nitems ? sms : nitems;
}

template <bool PLX, int BN, int ST>
static int aws_launch(int B, int Tq, int Tk, int H, int pos0, int window, float scale,
                      const void *q, const void *r, const void *k, const void *v, float *o,
                      cudaStream_t st, err *e) {
    const int smem = aws_smem<PLX, BN, ST>::BYTES;
    const long nitems = (long)((Tq + AWS_BM - 1) / AWS_BM) * B * H;
    if (nitems > 0x7fffffff)
        return err_set(e, "gpu attention: %ld blocks of rows too many for one launch", nitems);
    if (nitems == 0) return 0;
    auto kernel = attn_fwd_ws<PLX, BN, ST>;
    CUDA_TRY(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, smem),
             "gpu attention: shared memory (warp specialized)");
    kernel<<<aws_blocks((int)nitems), 384, smem, st>>>(
        B, Tq, Tk, H, pos0, window, scale * 1.4426950408889634f, (const bf16_t *)q,
        (const bf16_t *)r, (const bf16_t *)k, (const bf16_t *)v, o);
    CUDA_LAUNCHED("gpu attention: forward (warp specialized)");
    return 0;
}

extern "C" int attn_ws_forward(int B, int Tq, int Tk, int H, int pos0, int window, float scale,
                               const void *q, const void *r, const void *k, const void *v, float *o,
                               void *stream, err *e) {
    cudaStream_t st = (cudaStream_t)stream;
    if (r) return aws_launch<true, 64, 3>(B, Tq, Tk, H, pos0, window, scale, q, r, k, v, o, st, e);
    return attn_ws_stages() == 2
               ? aws_launch<false, 128, 2>(B, Tq, Tk, H, pos0, window, scale, q, r, k, v, o, st, e)
               : aws_launch<false, 128, 3>(B, Tq, Tk, H, pos0, window, scale, q, r, k, v, o, st, e);
}
