// attention_wgmma.cu: the bf16 flash forward of causal softmax attention and Parallax on Hopper's
// warpgroup matrix instructions (wgmma, sm_90a), d = 128. Both go to the warp-specialized kernel
// of attention_ws_wgmma.cu unless MIXSCOPE_ATTN_WS=0 (or, for Parallax, MIXSCOPE_ATTN_WS_PLX=0);
// the kernels here stay for those settings (scripts/gpu-attn-check.sh times them beside). The same
// arithmetic as attn_fwd_mma in attention.cu (which stays the path for every other shape and GPU):
// scores and the probe scores u = r.k on the tensor cores, the online softmax in fp32, the weights
// w (and Parallax's w u) rounded to bf16 for the value products, fp32 accumulators. Spec:
// kata-parallax.md B.4.
//
// Built for compute_90a only (Makefile NVFLAGS_90A): on any other GPU the kernel has no image,
// attn_wgmma_usable() says so and attention.cu keeps the mma.sync kernel.
//
// Block: NWG warpgroups of 64 query rows each (128 threads a warpgroup), sharing the key and
// value tiles, which stream through a ring of ST cp.async stages of 64 keys; several blocks share
// a multiprocessor, so that one block's softmax runs while another's products occupy the tensor
// cores. By default (aw_dispatch, measured on the H200) one warpgroup a block: softmax keeps Q in
// registers, staged through the ring, and runs three blocks a multiprocessor; Parallax (whose
// O1, O2 take 128 of a thread's 255 registers) two. Per tile a warpgroup issues
//   S = Q K^T (and U = R K^T): wgmma m64n64k16, A from registers (Q) or shared memory (sw128,
//   K-major), B = K from shared memory,
//   the online softmax on S (exp2, scale folded with log2 e), O rescaled,
//   O1 += P V (and O2 += (P u) V): wgmma m64n128k16, A = the weights in registers, B = V from
//   shared memory read N-major (imm-trans-b), so V needs no transpose.
// The products run as three groups, S, U, then O1's, so that the softmax of S overlaps U's
// products and U's weights overlap O1's; the tile ends when O2's are done.
#include <cuda_bf16.h>
#include <cuda_runtime.h>
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <type_traits>

#include "attention_rows.cuh"
#include "attention_wgmma.cuh"
#include "gpu_common.cuh"
#include "mma.cuh"
#if defined(__CUDA_ARCH_FEAT_SM90_ALL) || !defined(__CUDA_ARCH__)
#include "wgmma.cuh"
#define AW_HAVE_WGMMA 1
#endif

#define AW_D  128 // dk = dv
#define AW_BQ 64  // query rows of a warpgroup

// QST: Q staged in the ring's second K slot until it moves into registers (three blocks a
// multiprocessor fit the shared memory then).
template <bool PLX, int NWG, int ST, bool QST> struct aw_cfg {
    static constexpr int BN = 64;                   // keys of a tile
    static constexpr int NT = 128 * NWG;            // threads of a block
    static constexpr int QBYTES = AW_BQ * AW_D * 2; // a warpgroup's Q (and R) tile
    static constexpr int KBYTES = BN * AW_D * 2;    // K or V tile
    static constexpr int QREGION = QST ? 0 : NWG * (PLX ? 2 : 1) * QBYTES;
    static constexpr int SMEM = QREGION + ST * 2 * KBYTES + 1024; // + alignment
};

// grid (ceil(Tq / (64 NWG)), B H), 128 NWG threads. q, r [B, Tq, H, 128], k, v [B, Tk, H, 128]
// bf16; o [B, Tq, H, 128] fp32. Query row i sits at position pos0 + i; scale_l2 = scale log2(e).
template <bool PLX, int NWG, int ST, int MINB, bool PIPE, bool QREG>
__global__ void __launch_bounds__(128 * NWG, MINB)
    attn_fwd_wgmma(int Tq, int Tk, int H, int pos0, int window, float scale_l2, const bf16_t *q,
                   const bf16_t *r, const bf16_t *k, const bf16_t *v, float *o) {
#ifdef AW_HAVE_WGMMA
    // three blocks a multiprocessor: Q in registers, staged in the ring (no Q region)
    constexpr bool QST = QREG && MINB == 3;
    static_assert(!QST || (NWG == 1 && ST == 2 && !PIPE), "Q staged: one warpgroup, two stages");
    using C = aw_cfg<PLX, NWG, ST, QST>;
    constexpr int BN = C::BN, NS = BN / 2; // S accumulators a thread: 64 x BN / 128
    extern __shared__ unsigned char aw_raw[];
    unsigned char *base =
        (unsigned char *)(((uintptr_t)aw_raw + 1023) & ~(uintptr_t)1023); // sw128 tiles
    const int tid = threadIdx.x, wg = tid / 128, wtid = tid % 128;
    const int warp = wtid / 32, lane = tid % 32, gid = lane / 4, tig = lane % 4;
    // this warpgroup's Q (and R) tile; the K/V ring after all of them
    unsigned char *sKV = base + C::QREGION;
    unsigned char *sQ = QST ? sKV + 2 * C::KBYTES : base + wg * C::QBYTES;
    unsigned char *sR = sQ + NWG * C::QBYTES;
    const uint32_t aQ = (uint32_t)__cvta_generic_to_shared(sQ),
                   aR = (uint32_t)__cvta_generic_to_shared(sR),
                   aKV = (uint32_t)__cvta_generic_to_shared(sKV);
    const int bx = gridDim.x - 1 - blockIdx.x; // the longest rows first
    const int q0 = bx * AW_BQ * NWG, n = blockIdx.y, b = n / H, h = n % H;
    const int nq = min(AW_BQ * NWG, Tq - q0);                    // the block's rows
    const int wq0 = q0 + wg * AW_BQ, wnq = min(AW_BQ, Tq - wq0); // the warpgroup's (wnq <= 0: none)
    const size_t qrow = (size_t)H * AW_D; // elements between consecutive tokens

    // Copies of a 64-row tile: thread chunk lc of rows lr + 8 i (i < 8) for the warpgroup's Q,
    // rows kr + 8 NWG i (i < 8 / NWG) for the block's K and V; rows 8 apart share their swizzle,
    // so the shared offsets are constant steps of 1024 bytes.
    const int lc = tid % 16, lr = wtid / 16, kr = tid / 16;
    const uint32_t soff = sw128_chunk(64, lr, lc), koff = sw128_chunk(64, kr, lc);
    static_assert(AW_BQ == 64 && BN == 64, "one copy pattern for the Q and K/V tiles");
    {
        const bf16_t *gq = q + ((size_t)b * Tq + wq0 + lr) * qrow + (size_t)h * AW_D + lc * 8;
        const bf16_t *gr = PLX ? r + (gq - q) : NULL;
#pragma unroll
        for (int i = 0; i < 8; i++) {
            const uint32_t off = soff + 1024 * i;
            if (lr + 8 * i < wnq) {
                cp_async16(sQ + off, gq + 8 * i * qrow);
                if constexpr (PLX) cp_async16(sR + off, gr + 8 * i * qrow);
            } else {
                *reinterpret_cast<uint4 *>(sQ + off) = make_uint4(0, 0, 0, 0);
                if constexpr (PLX) *reinterpret_cast<uint4 *>(sR + off) = make_uint4(0, 0, 0, 0);
            }
        }
    }
    // the block's key tiles, and the warpgroup's share of them (a warpgroup whose rows see none
    // of a tile's keys skips its products)
    const int pfirst = pos0 + q0, plast = min(pos0 + q0 + nq - 1, Tk - 1);
    const int kfirst = attn_first(pfirst, window) / BN * BN;
    const int ntiles = plast >= kfirst ? (plast - kfirst) / BN + 1 : 0;
    const int wpfirst = pos0 + wq0, wplast = min(pos0 + wq0 + wnq - 1, Tk - 1);
    const int wkfirst = attn_first(wpfirst, window);
    // K, V of the tile at key k0 into stage s; rows past Tk zero (their weights are 0, and
    // 0 x garbage could be NaN)
    constexpr int KI = 8 / NWG; // rows a thread copies of a K or V tile
    const size_t kv0 = ((size_t)b * Tk + kr) * qrow + (size_t)h * AW_D + lc * 8;
    auto issue = [&](int k0, int s) {
        unsigned char *dK = sKV + s * 2 * C::KBYTES + koff, *dV = dK + C::KBYTES;
        const bf16_t *gk = k + kv0 + (size_t)k0 * qrow, *gv = v + kv0 + (size_t)k0 * qrow;
        if (k0 + BN <= Tk) {
#pragma unroll
            for (int i = 0; i < KI; i++) {
                cp_async16(dK + 1024 * NWG * i, gk + 8 * NWG * i * qrow);
                cp_async16(dV + 1024 * NWG * i, gv + 8 * NWG * i * qrow);
            }
        } else {
#pragma unroll
            for (int i = 0; i < KI; i++) {
                if (k0 + kr + 8 * NWG * i < Tk) {
                    cp_async16(dK + 1024 * NWG * i, gk + 8 * NWG * i * qrow);
                    cp_async16(dV + 1024 * NWG * i, gv + 8 * NWG * i * qrow);
                } else {
                    *reinterpret_cast<uint4 *>(dK + 1024 * NWG * i) = make_uint4(0, 0, 0, 0);
                    *reinterpret_cast<uint4 *>(dV + 1024 * NWG * i) = make_uint4(0, 0, 0, 0);
                }
            }
        }
    };
    // the first ST - 1 tiles (a group each, empty past the last: the waits count groups)
#pragma unroll
    for (int s = 0; s < ST - 1; s++) {
        if (s < ntiles) issue(kfirst + s * BN, s);
        cp_async_commit();
    }

    // this thread's rows: r_lo, r_lo + 8 (positions p_lo, p_hi)
    const int r_lo = wq0 + warp * 16 + gid, p_lo = pos0 + r_lo, p_hi = p_lo + 8;
    float O1[64], O2[PLX ? 64 : 1];
#pragma unroll
    for (int i = 0; i < 64; i++) {
        O1[i] = 0.0f;
        if constexpr (PLX) O2[i] = 0.0f;
    }
    float mrow[2] = {-INFINITY, -INFINITY}, d1[2] = {0.0f, 0.0f}, d2[2] = {0.0f, 0.0f};
    // descriptors of k step 0 (stage 0); a k step adds its byte offset >> 4 (the address field
    // cannot carry: shared addresses stay below 2^18)
    const uint64_t dQ = wgmma_desc(aQ, 16, 1024), dR = wgmma_desc(aR, 16, 1024);
    const uint64_t dK0 = wgmma_desc(aKV, 16, 1024),
                   dV0 = wgmma_desc(aKV + C::KBYTES, BN * 128, 1024);

    // With QREG the warpgroup's Q tile moves into registers (the A fragments of its 8 k steps)
    // at its first tile, so that S's products read only K from shared memory.
    static_assert(!(QREG && PLX), "Q in registers: softmax only (Parallax has no registers left)");
    uint32_t qf[QREG ? AW_D / 16 : 1][4];
    auto load_q = [&]() {
        if constexpr (QREG) {
#pragma unroll
            for (int ks = 0; ks < AW_D / 16; ks++)
                ldmatrix_x4(qf[ks], (const bf16_t *)(sQ + sw128_chunk(64, warp * 16 + (lane & 15),
                                                                      2 * ks + (lane >> 4))));
        }
    };
    // S (+)= Q K^T or U = R K^T of the tile whose K is at descriptor dK (issued, not committed)
    auto scores = [&](float *acc, uint64_t dA, uint64_t dK) {
#pragma unroll
        for (int ks = 0; ks < AW_D / 16; ks++) {
            const uint32_t step = ((ks >> 2) * 64 * 128 + (ks & 3) * 32) >> 4; // Q and K alike
            if constexpr (QREG)
                wgmma_rs_n64(acc, qf[ks], dK + step, ks > 0);
            else
                wgmma_ss_n64(acc, dA + step, dK + step, ks > 0);
        }
    };
    // The online softmax of the scores S of the tile at key k0 for rows lo (c = 0, 1) and hi
    // (c = 2, 3), in base 2: invisible keys get -inf, so w = 2^(s scale - m) = 0 for them; a row
    // that has seen no key yet keeps m = -inf and uses 0 in its place. The weights w replace S;
    // P gets them in bf16 (n8 blocks 2 kk and 2 kk + 1 are the A fragment of keys 16 kk ..
    // 16 kk + 15); al the factor the accumulators take for the new maximum.
    auto weigh = [&](float *S, int k0, uint32_t(*P)[4], float *al) {
        attn_mask_tile<BN / 8>(S, k0, wpfirst, AW_BQ, tig, p_lo, p_hi, Tk, window);
        static_assert(NS == 32, "attn_row_reduce<8>: 16 values a row half");
        float mt[2] = {attn_row_reduce<8, !PLX>(S, 0, attn_max),
                       attn_row_reduce<8, !PLX>(S, 1, attn_max)},
              ms[2];
        attn_max_step(mt, mrow, scale_l2, al, ms, d1, d2);
#pragma unroll
        for (int t = 0; t < BN / 8; t++) {
#pragma unroll
            for (int c = 0; c < 4; c++)
                S[4 * t + c] = ex2(fmaf(S[4 * t + c], scale_l2, -ms[c >> 1]));
            P[t / 2][(t & 1) * 2 + 0] = pack_bf16(S[4 * t], S[4 * t + 1]);
            P[t / 2][(t & 1) * 2 + 1] = pack_bf16(S[4 * t + 2], S[4 * t + 3]);
        }
        d1[0] += attn_row_reduce<8, !PLX>(S, 0, attn_add),
            d1[1] += attn_row_reduce<8, !PLX>(S, 1, attn_add);
    };
    // once a row's maximum settles, al = 1: the rescale is skipped when the whole warp has it
    auto rescale = [&](const float *al) {
        if (__any_sync(0xffffffffu, al[0] != 1.0f || al[1] != 1.0f)) {
#pragma unroll
            for (int i = 0; i < 64; i++) {
                const float a = al[(i >> 1) & 1];
                O1[i] *= a;
                if constexpr (PLX) O2[i] *= a;
            }
        }
    };
    // the tiles this warpgroup's rows see keys of: ja <= j < jb
    const int ja = (wkfirst - kfirst) / BN;
    const int jb = wnq > 0 && wplast >= kfirst ? (wplast - kfirst) / BN + 1 : 0;
    auto stage_desc = [&](uint64_t d0, int j) {
        return d0 + (uint64_t)((j % ST) * 2 * C::KBYTES >> 4);
    };

    if constexpr (PIPE) {
        // Softmax with the next tile's scores on the tensor cores while this tile's weights are
        // computed: per tile j (tiles j and j + 1 in shared memory, j + 2 on its way)
        //   S' = Q K_{j+1}^T and O1 += P_j V_j issued; S' awaited; its weights P_{j+1}; O1
        //   awaited and rescaled to the new maximum.
        static_assert(!PLX && ST == 3, "the pipelined loop: softmax, three stages");
        float S[NS], al[2];
        uint32_t P[BN / 16][4];
        for (int j = 0; j < ntiles; j++) {
            const int k0 = kfirst + j * BN;
            cp_async_wait<0>();
            fence_proxy_async();
            __syncthreads(); // tiles j, j + 1 in; the stage of tile j - 1 is free
            if (j + 2 < ntiles) issue(k0 + 2 * BN, (j + 2) % ST);
            cp_async_commit();
            if (j < ja || j >= jb) continue;
            if (j == ja) { // the warpgroup's first tile: its scores and weights first
                load_q();
                wgmma_fence();
                scores(S, dQ, stage_desc(dK0, j));
                wgmma_commit();
                wgmma_wait<0>();
                wgmma_fence_regs<NS>(S);
                weigh(S, k0, P, al);
            }
            const bool next = j + 1 < jb;
            const uint64_t dV = stage_desc(dV0, j);
            wgmma_fence();
            if (next) {
                scores(S, dQ, stage_desc(dK0, j + 1));
                wgmma_commit();
            }
#pragma unroll
            for (int kk = 0; kk < BN / 16; kk++) wgmma_rs_n128_tb(O1, P[kk], dV + (kk * 2048 >> 4));
            wgmma_commit();
            uint32_t Pn[BN / 16][4];
            if (next) {
                wgmma_wait<1>();
                wgmma_fence_regs<NS>(S);
                weigh(S, k0 + BN, Pn, al);
            }
            wgmma_wait<0>(); // P and V_j stay untouched until O1's products are done
            wgmma_fence_regs<64>(O1);
            if (next) {
                rescale(al);
#pragma unroll
                for (int kk = 0; kk < BN / 16; kk++)
#pragma unroll
                    for (int x = 0; x < 4; x++) P[kk][x] = Pn[kk][x];
            }
        }
    } else {
        for (int j = 0; j < ntiles; j++) {
            const int k0 = kfirst + j * BN;
            cp_async_wait<ST - 2>();
            fence_proxy_async();
            __syncthreads(); // tile j in its stage for everyone; the stage of tile j - 1 is free
            if (QST && j == 0) { // Q leaves the slot tile 1 goes to
                load_q();
                __syncthreads();
            }
            if (j + ST - 1 < ntiles) issue(k0 + (ST - 1) * BN, (j + ST - 1) % ST);
            cp_async_commit();
            if (j < ja || j >= jb) continue; // no key of the tile for these rows
            const uint64_t dK = stage_desc(dK0, j), dV = stage_desc(dV0, j);

            // Two product groups: S = Q K^T, then U = R K^T. The softmax of S runs while U is on
            // the tensor cores, and U's weights (w u) while O1 += P V is.
            float S[NS], U[PLX ? NS : 1], al[2];
            if (!QST && j == ja) load_q();
            wgmma_fence();
            scores(S, dQ, dK);
            wgmma_commit();
            if constexpr (PLX) {
                scores(U, dR, dK);
                wgmma_commit();
                wgmma_wait<1>();
            } else {
                wgmma_wait<0>();
            }
            wgmma_fence_regs<NS>(S);
            uint32_t P[BN / 16][4];
            weigh(S, k0, P, al);
            rescale(al);
            wgmma_fence();
#pragma unroll
            for (int kk = 0; kk < BN / 16; kk++) wgmma_rs_n128_tb(O1, P[kk], dV + (kk * 2048 >> 4));
            wgmma_commit();
            if constexpr (PLX) {
                wgmma_wait<1>(); // U (committed before O1's products)
                wgmma_fence_regs<NS>(U);
                uint32_t PU[BN / 16][4];
#pragma unroll
                for (int t = 0; t < BN / 8; t++) {
#pragma unroll
                    for (int c = 0; c < 4; c++) U[4 * t + c] *= S[4 * t + c];
                    PU[t / 2][(t & 1) * 2 + 0] = pack_bf16(U[4 * t], U[4 * t + 1]);
                    PU[t / 2][(t & 1) * 2 + 1] = pack_bf16(U[4 * t + 2], U[4 * t + 3]);
                }
                d2[0] += attn_row_reduce<8, false>(U, 0, attn_add),
                    d2[1] += attn_row_reduce<8, false>(U, 1, attn_add);
                wgmma_fence();
#pragma unroll
                for (int kk = 0; kk < BN / 16; kk++)
                    wgmma_rs_n128_tb(O2, PU[kk], dV + (kk * 2048 >> 4));
                wgmma_commit();
            }
            wgmma_wait<0>(); // P, PU and the stage stay untouched until the products are done
            wgmma_fence_regs<64>(O1);
            if constexpr (PLX) wgmma_fence_regs<64>(O2);
        }
    }
    cp_async_wait<0>();

    float *orow[2];
#pragma unroll
    for (int hr = 0; hr < 2; hr++) {
        const int row = r_lo + 8 * hr;
        orow[hr] = row < wq0 + wnq ? o + ((size_t)b * Tq + row) * qrow + (size_t)h * AW_D : NULL;
    }
    attn_store_rows<PLX, 16>(d1, d2, O1, O2, orow, tig);
#else
    __trap(); // no wgmma in this image: attn_wgmma_usable() keeps launches away
#endif
}

// 1 when this build has the sm_90a kernels, the device runs them and MIXSCOPE_ATTN_WGMMA is not
// 0; asked once per process.
extern "C" int attn_wgmma_usable(void) {
    static const int usable = gpu_sm90a_usable(
        "MIXSCOPE_ATTN_WGMMA", (const void *)attn_fwd_wgmma<true, 1, 2, 2, false, false>);
    return usable;
}

template <bool PLX, int NWG, int ST, int MINB, bool PIPE, bool QREG>
static int aw_launch(int B, int Tq, int Tk, int H, int pos0, int window, float scale, const void *q,
                     const void *r, const void *k, const void *v, float *o, cudaStream_t st,
                     err *e) {
    const int smem = aw_cfg < PLX, NWG, ST, QREG && MINB == 3 > ::SMEM;
    auto kernel = attn_fwd_wgmma<PLX, NWG, ST, MINB, PIPE, QREG>;
    CUDA_TRY(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, smem),
             "gpu attention: shared memory (wgmma)");
    kernel<<<dim3((Tq + AW_BQ * NWG - 1) / (AW_BQ * NWG), B * H), 128 * NWG, smem, st>>>(
        Tq, Tk, H, pos0, window, scale * 1.4426950408889634f, (const bf16_t *)q, (const bf16_t *)r,
        (const bf16_t *)k, (const bf16_t *)v, o);
    CUDA_LAUNCHED("gpu attention: forward (wgmma)");
    return 0;
}

// The block shape, read once from the environment (benchmarks compare them; the H200's medians
// in docs/gpu-results.md):
//   MIXSCOPE_ATTN_QREG=3  softmax's default: Q in registers (its products read only K from
//                         shared memory), staged through the K/V ring, so that three blocks of
//                         one warpgroup share a multiprocessor (registers capped at 168);
//   MIXSCOPE_ATTN_QREG=1  softmax: Q in registers, two blocks;
//   MIXSCOPE_ATTN_QREG=0  softmax: Q read from shared memory, two blocks (Parallax always: its
//                         O1, O2 take 128 of its registers);
//   MIXSCOPE_ATTN_WG=2    two warpgroups a block sharing the K/V tiles, one block a
//                         multiprocessor;
//   MIXSCOPE_ATTN_PIPE=1  softmax: the pipelined loop (three stages).
// Measured and dropped: three stages without the pipelined loop, and two blocks of two
// warpgroups (128 registers: spills).
struct aw_shape {
    int wg, pipe, qreg;
};
static aw_shape aw_shape_env(void) {
    static aw_shape s = {0, 0, 0};
    if (!s.wg) {
        const char *w = getenv("MIXSCOPE_ATTN_WG"), *p = getenv("MIXSCOPE_ATTN_PIPE"),
                   *q = getenv("MIXSCOPE_ATTN_QREG");
        s.wg = w && atoi(w) == 2 ? 2 : 1;
        s.pipe = p && atoi(p) == 1;
        s.qreg = q ? atoi(q) : 3;
    }
    return s;
}

template <bool PLX>
static int aw_dispatch(int B, int Tq, int Tk, int H, int pos0, int window, float scale,
                       const void *q, const void *r, const void *k, const void *v, float *o,
                       cudaStream_t st, err *e) {
    const aw_shape s = aw_shape_env();
    // go(NWG, PIPE, QREG, MINB): the instance (three stages with the pipelined loop)
    auto go = [&](auto nwg, auto pipe, auto qreg, auto minb) {
        constexpr int NWG = decltype(nwg)::value, MINB = decltype(minb)::value;
        constexpr bool PIPE = decltype(pipe)::value, QREG = decltype(qreg)::value;
        return aw_launch < PLX, NWG, PIPE ? 3 : 2, MINB, PIPE,
               QREG > (B, Tq, Tk, H, pos0, window, scale, q, r, k, v, o, st, e);
    };
    const std::integral_constant<int, 1> one;
    const std::integral_constant<int, 2> two;
    const std::integral_constant<int, 3> three;
    const std::true_type yes;
    const std::false_type no;
    if constexpr (!PLX) {
        if (s.qreg == 3 && s.wg == 1 && !s.pipe) return go(one, no, yes, three);
        // (QREG=3 with two warpgroups or the pipelined loop: Q in registers, as QREG=1)
        if (s.qreg) {
            if (s.pipe) return s.wg == 2 ? go(two, yes, yes, one) : go(one, yes, yes, two);
            return s.wg == 2 ? go(two, no, yes, one) : go(one, no, yes, two);
        }
        if (s.pipe) return s.wg == 2 ? go(two, yes, no, one) : go(one, yes, no, two);
    }
    return s.wg == 2 ? go(two, no, no, one) : go(one, no, no, two);
}

extern "C" int attn_wgmma_forward(int B, int Tq, int Tk, int H, int pos0, int window, float scale,
                                  const void *q, const void *r, const void *k, const void *v,
                                  float *o, void *stream, err *e) {
    cudaStream_t st = (cudaStream_t)stream;
    static const int ws_plx =
        !(getenv("MIXSCOPE_ATTN_WS_PLX") && atoi(getenv("MIXSCOPE_ATTN_WS_PLX")) == 0);
    if (attn_ws_stages() && (!r || ws_plx))
        return attn_ws_forward(B, Tq, Tk, H, pos0, window, scale, q, r, k, v, o, stream, e);
    return r ? aw_dispatch<true>(B, Tq, Tk, H, pos0, window, scale, q, r, k, v, o, st, e)
             : aw_dispatch<false>(B, Tq, Tk, H, pos0, window, scale, q, r, k, v, o, st, e);
}
