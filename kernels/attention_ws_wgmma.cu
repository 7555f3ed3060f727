// attention_ws_wgmma.cu: the bf16 forward of causal softmax attention and Parallax at d = 128 on
// sm_90a, warp specialized the way FlashAttention-3 schedules it (Shah et al. 2024, section 3).
// The arithmetic is attention_wgmma.cu's (scores on the tensor cores in fp32, the online softmax
// in base 2, the weights rounded to bf16 for the value products, fp32 accumulators); what changes
// is who waits for what. Spec: kata-parallax.md B.4.
//
// Work item: 128 query rows of one sequence and head. Block: three warpgroups (384 threads, one
// block a multiprocessor), persistent: G blocks, as many as multiprocessors, walk the items
// ordered longest rows first in rounds, block x taking item G n + x in even rounds and
// G n + G - 1 - x in odd ones (in order, block 0 would take the longest of every round: 1.25x the
// mean tiles at 4K). One item's last products and stores then overlap the next item's loads.
// MIXSCOPE_ATTN_WS_PERSIST=0: a block an item.
//   warpgroup 0, the producer: streams the K and V tiles (BN keys a tile) of the block's items
//     one after the other through a ring of ST stages each; a tile's FULL mbarrier completes when
//     it has landed, and a stage is refilled once both consumers have arrived on its EMPTY. K and
//     V have stages and barriers of their own, so K_{j+1} loads while V_j is still read. By the
//     TMA (the default): thread 0 of warp 0 issues the K tiles, thread 0 of warp 2 the V tiles,
//     each as two 4-d boxes. MIXSCOPE_ATTN_TMA=0 (or a driver without cuTensorMapEncodeTiled, or
//     K or V not 16-byte aligned): warps 0-1 copy K and warps 2-3 V by cp.async, 16 bytes at a
//     time, which ncu found spending as many issue slots as the consumers' softmax.
//   warpgroups 1 and 2, the consumers: 64 query rows each, Q (and Parallax's R) in shared memory,
//     the next item's copied in as soon as the last score products of this one are done. Softmax
//     (BN = 128): per tile j a consumer issues S_j = Q K_j^T (wgmma m64n128k16, both operands in
//     shared memory) and the previous tile's O += P_{j-1} V_{j-1} (A = the weights in registers,
//     V read N-major), waits for S_j alone, runs its online softmax while P_{j-1} V_{j-1} is on
//     the tensor cores (the intra-warpgroup overlap), then waits for the value products and
//     rescales O. Parallax (BN = 64): S, U, O1 and O2 leave no registers for that overlap
//     (ptxas spilled 208 bytes and serialised the products), so its tiles run one after the
//     other; the two consumers still overlap each other.
// Registers: 384 threads leave 168 a thread, 504 a producer-consumer-consumer triple, and
// setmaxnreg.inc only takes what the block's decs released: the producer goes to 56 (its item
// loop spills at 40), the consumers to 224, where a softmax consumer holds O (64), S (64), the
// weights (32) and addresses without spills. (48 / 232 / 232 asked for 512 and hung on the H200.)
// Measured on the H200 and dropped (docs/gpu-results.md): the consumers taking turns at issuing
// (FlashAttention-3's ping-pong, two named barriers), Q in registers, and with cp.async a tile's
// FULL signalled once the next one's copies were out: none changed the time.
//
// attention_wgmma.cu's kernels stay for MIXSCOPE_ATTN_WS=0 and as the comparison
// scripts/gpu-attn-check.sh times beside this kernel.
#include <cuda.h>         // CUtensorMap
#include <cudaTypedefs.h> // PFN_cuTensorMapEncodeTiled
#include <cuda_bf16.h>
#include <cuda_runtime.h>
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

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

// grid G, 384 threads. q, r [B, Tq, H, 128], k, v [B, Tk, H, 128] bf16; o [B, Tq, H, 128] fp32.
// Query row i sits at position pos0 + i; scale_l2 = scale log2(e).
template <bool PLX, int BN, int ST>
__global__ void __launch_bounds__(384, 1)
    attn_fwd_ws(int B, int Tq, int Tk, int H, int pos0, int window, float scale_l2, const bf16_t *q,
                const bf16_t *r, const bf16_t *k, const bf16_t *v, float *o,
                const __grid_constant__ CUtensorMap tmk, const __grid_constant__ CUtensorMap tmv,
                int tma) {
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
    // this block's item of round n: the rounds go back and forth over the blocks (x, then
    // G - 1 - x), so that with rows longest first each block's total comes out about even (in
    // order, block 0 would take the longest of every round: 1.25x the mean at 4K); nitems or more
    // once there is none (and for every later round)
    auto round_item = [&](int n) {
        const long i = (long)n * gridDim.x + (n & 1 ? gridDim.x - 1 - blockIdx.x : blockIdx.x);
        return i < nitems ? (int)i : nitems;
    };

    if (threadIdx.x == 0) {
        for (int s = 0; s < ST; s++) {
            // its TMA thread (whose boxes complete_tx), or the 64 copying threads of a stream
            mbar_init(bar(AWS_FULL_K, s), tma ? 1 : 64);
            mbar_init(bar(AWS_FULL_V, s), tma ? 1 : 64);
            mbar_init(bar(AWS_EMPTY_K, s), 8); // lane 0 of the consumers' 8 warps
            mbar_init(bar(AWS_EMPTY_V, s), 8);
        }
        fence_proxy_async(); // the barriers as the TMA (the async proxy) will see them
    }
    __syncthreads();

    if (wg == 0) {
        // The producer.
        setmaxnreg_dec<56>();
        const int kind = wtid / 64, t = wtid % 64; // K or V, thread of the stream
        const uint32_t ring = abase + (kind ? L::V : L::K);
        // every tile of the block's items in ring order (g counts them across items), once its
        // stage is free: fill(it, k0, s) loads the tile at key k0 into stage s
        auto each_tile = [&](auto fill) {
            int g = 0;
            for (int n = 0, i; (i = round_item(n)) < nitems; n++) {
                const item it = item_at(i);
                for (int j = 0; j < it.ntiles; j++, g++) {
                    const int s = g % ST;
                    mbar_wait(bar(AWS_EMPTY_K + kind, s), ((g / ST) & 1) ^ 1);
                    fill(it, it.kfirst + j * BN, s);
                }
            }
        };
        if (tma) {
            // a tile as two boxes of 64 columns x BN rows (the two sw128 regions), rows past Tk
            // arriving as zeros
            if (t == 0) {
                const CUtensorMap *map = kind ? &tmv : &tmk;
                each_tile([&](const item &it, int k0, int s) {
                    const uint32_t full = bar(AWS_FULL_K + kind, s);
                    mbar_arrive_expect_tx(full, L::KB);
                    tma_load_4d(ring + s * L::KB, map, 0, it.h, k0, it.b, full);
                    tma_load_4d(ring + s * L::KB + BN * 128, map, 64, it.h, k0, it.b, full);
                });
            }
            return;
        }
        // by cp.async: a thread copies 16-byte piece lc of rows r0 + 4 x (x < BN / 4) of each
        // tile; rows past Tk are zero (their weights are 0, and 0 x garbage could be NaN)
        const int lc = t % 16, r0 = t / 16;
        each_tile([&](const item &it, int k0, int s) {
            const bf16_t *gs = (kind ? v : k) + ((size_t)it.b * Tk + r0) * qrow +
                               (size_t)it.h * AWS_D + lc * 8 + (size_t)k0 * qrow;
            const uint32_t dst = ring + s * L::KB;
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
        });
        return;
    }

    setmaxnreg_inc<224>();
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

    if (round_item(0) < nitems) load_q(round_item(0));
    int g0 = 0; // the ring's count of tiles before this item's
    for (int n = 0, i; (i = round_item(n)) < nitems; n++) {
        const item it = item_at(i);
        const int wq0 = it.q0 + c * 64, wnq = min(64, Tq - wq0); // its rows (wnq <= 0: none)
        const int r_lo = wq0 + warp * 16 + gid, p_lo = pos0 + r_lo, p_hi = p_lo + 8;
        const int wpfirst = pos0 + wq0, nt = it.ntiles;
        const int inext = round_item(n + 1);
        const bool next = inext < nitems;
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
            attn_mask_tile<BN / 8>(S, k0, wpfirst, 64, tig, p_lo, p_hi, Tk, window);
            float mt[2] = {attn_row_reduce<BN / 8, true>(S, 0, attn_max),
                           attn_row_reduce<BN / 8, true>(S, 1, attn_max)},
                  ms[2];
            attn_max_step(mt, mrow, scale_l2, al, ms, d1, d2);
#pragma unroll
            for (int x = 0; x < NS; x++) {
                S[x] = ex2(fmaf(S[x], scale_l2, -ms[(x >> 1) & 1]));
                if constexpr (PLX) U[x] *= S[x];
            }
            d1[0] += attn_row_reduce<BN / 8, true>(S, 0, attn_add),
                d1[1] += attn_row_reduce<BN / 8, true>(S, 1, attn_add);
            if constexpr (PLX)
                d2[0] += attn_row_reduce<BN / 8, true>(U, 0, attn_add),
                    d2[1] += attn_row_reduce<BN / 8, true>(U, 1, attn_add);
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
            if (j == nt - 1 && next) load_q(inext);
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
        if (nt == 0 && next) load_q(inext); // (Q's tiles were not read)
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

// The tensor map of K or V, x [B, Tk, H, 128] bf16, for the producer's TMA: 4-d (128, H, Tk,
// B), boxes of 64 columns x 1 head x bn rows x 1 sequence, 128-byte swizzle (sw128_chunk's
// layout, a box a region). 0 (a zeroed map) where the TMA cannot serve: MIXSCOPE_ATTN_TMA=0 (the
// copying producer, timed beside it), no cuTensorMapEncodeTiled in the driver, x not 16-byte
// aligned, or the encoding refused; the kernel then copies by cp.async.
static int aws_tma_maps(CUtensorMap *m, const void *x, int B, int Tk, int H, int bn) {
    static int on = -1;
    static PFN_cuTensorMapEncodeTiled_v12000 encode;
    memset(m, 0, sizeof *m);
    if (on < 0) {
        const char *s = getenv("MIXSCOPE_ATTN_TMA");
        cudaDriverEntryPointQueryResult got;
        on = !(s && atoi(s) == 0) &&
             cudaGetDriverEntryPointByVersion("cuTensorMapEncodeTiled", (void **)&encode, 12000,
                                              cudaEnableDefault, &got) == cudaSuccess &&
             got == cudaDriverEntryPointSuccess && encode;
        if (!on) cudaGetLastError(); // (a failed lookup leaves no error behind)
    }
    if (!on || ((uintptr_t)x & 15)) return 0;
    const cuuint64_t dim[4] = {AWS_D, (cuuint64_t)H, (cuuint64_t)Tk, (cuuint64_t)B};
    const cuuint64_t stride[3] = {AWS_D * 2, (cuuint64_t)H * AWS_D * 2,
                                  (cuuint64_t)Tk * H * AWS_D * 2}; // bytes, dims 1..3
    const cuuint32_t box[4] = {64, 1, (cuuint32_t)bn, 1}, estride[4] = {1, 1, 1, 1};
    if (encode(m, CU_TENSOR_MAP_DATA_TYPE_BFLOAT16, 4, (void *)x, dim, stride, box, estride,
               CU_TENSOR_MAP_INTERLEAVE_NONE, CU_TENSOR_MAP_SWIZZLE_128B,
               CU_TENSOR_MAP_L2_PROMOTION_L2_256B,
               CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE) != CUDA_SUCCESS) {
        memset(m, 0, sizeof *m);
        return 0;
    }
    return 1;
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
    CUtensorMap tmk, tmv;
    const int tma = aws_tma_maps(&tmk, k, B, Tk, H, BN) && aws_tma_maps(&tmv, v, B, Tk, H, BN);
    kernel<<<aws_blocks((int)nitems), 384, smem, st>>>(
        B, Tq, Tk, H, pos0, window, scale * 1.4426950408889634f, (const bf16_t *)q,
        (const bf16_t *)r, (const bf16_t *)k, (const bf16_t *)v, o, tmk, tmv, tma);
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
