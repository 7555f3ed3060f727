// attention_wgmma.cu: the bf16 flash forward of causal softmax attention and Parallax on Hopper's
// warpgroup matrix instructions (wgmma, sm_90a), d = 128. The same arithmetic as attn_fwd_mma in
// attention.cu (which stays the path for every other shape and GPU): scores and the probe scores
// u = r.k on the tensor cores, the online softmax in fp32, the weights w (and Parallax's w u)
// rounded to bf16 for the value products, fp32 accumulators. Spec: kata-parallax.md B.4.
//
// Built for compute_90a only (Makefile NVFLAGS_90A): on any other GPU the kernel has no image,
// attn_wgmma_usable() says so and attention.cu keeps the mma.sync kernel.
//
// Block: 64 query rows, one warpgroup (128 threads); two blocks share a multiprocessor (the
// Parallax accumulators O1, O2 take 128 of a thread's 255 registers), so one block's softmax runs
// while the other's products occupy the tensor cores. Key tiles of 64 stream through a
// two-stage cp.async ring; per tile the warpgroup issues
//   S = Q K^T (and U = R K^T): wgmma m64n64k16, A and B from shared memory (sw128, K-major),
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

#include "attention_rows.cuh"
#include "attention_wgmma.cuh"
#include "gpu_common.cuh"
#include "mma.cuh"
#if defined(__CUDA_ARCH_FEAT_SM90_ALL) || !defined(__CUDA_ARCH__)
#include "wgmma.cuh"
#define AW_HAVE_WGMMA 1
#endif

#define AW_D  128 // dk = dv
#define AW_BQ 64  // query rows of a block: one warpgroup
#define AW_NT 128

template <bool PLX> struct aw_cfg {
    static constexpr int BN = 64;                                               // keys of a tile
    static constexpr int QBYTES = AW_BQ * AW_D * 2;                             // Q (and R) tile
    static constexpr int KBYTES = BN * AW_D * 2;                                // K or V tile
    static constexpr int SMEM = (PLX ? 2 : 1) * QBYTES + 2 * 2 * KBYTES + 1024; // + alignment
};

// 2^x on the special-function unit (flushes denormal results to 0; ex2(-inf) = 0)
__device__ __forceinline__ float ex2(float x) {
    float y;
    asm("ex2.approx.ftz.f32 %0, %1;\n" : "=f"(y) : "f"(x));
    return y;
}

// grid (ceil(Tq / 64), B H), 128 threads. q, r [B, Tq, H, 128], k, v [B, Tk, H, 128] bf16;
// o [B, Tq, H, 128] fp32. Query row i sits at position pos0 + i; scale_l2 = scale log2(e).
template <bool PLX>
__global__ void __launch_bounds__(AW_NT, 2)
    attn_fwd_wgmma(int Tq, int Tk, int H, int pos0, int window, float scale_l2, const bf16_t *q,
                   const bf16_t *r, const bf16_t *k, const bf16_t *v, float *o) {
#ifdef AW_HAVE_WGMMA
    using C = aw_cfg<PLX>;
    constexpr int BN = C::BN, NS = BN / 2; // S accumulators a thread: 64 x BN / 128
    extern __shared__ unsigned char aw_raw[];
    unsigned char *base =
        (unsigned char *)(((uintptr_t)aw_raw + 1023) & ~(uintptr_t)1023); // sw128 tiles
    unsigned char *sQ = base, *sR = sQ + C::QBYTES, *sKV = sR + (PLX ? C::QBYTES : 0);
    const uint32_t aQ = (uint32_t)__cvta_generic_to_shared(sQ),
                   aR = (uint32_t)__cvta_generic_to_shared(sR),
                   aKV = (uint32_t)__cvta_generic_to_shared(sKV);
    const int tid = threadIdx.x, warp = tid / 32, lane = tid % 32, gid = lane / 4, tig = lane % 4;
    const int bx = gridDim.x - 1 - blockIdx.x; // the longest rows first
    const int q0 = bx * AW_BQ, n = blockIdx.y, b = n / H, h = n % H;
    const int nq = min(AW_BQ, Tq - q0);
    const size_t qrow = (size_t)H * AW_D; // elements between consecutive tokens

    // Copies: thread tid moves chunk lc of rows lr + 8 i (i < 8) of a 64-row tile; rows 8 apart
    // share their swizzle, so the shared offsets are soff + 1024 i.
    const int lc = tid % 16, lr = tid / 16;
    const uint32_t soff = sw128_chunk(64, lr, lc);
    static_assert(AW_BQ == 64 && BN == 64, "one copy pattern for the Q and K/V tiles");
    {
        const bf16_t *gq = q + ((size_t)b * Tq + q0 + lr) * qrow + (size_t)h * AW_D + lc * 8;
        const bf16_t *gr = PLX ? r + (gq - q) : NULL;
#pragma unroll
        for (int i = 0; i < 8; i++) {
            const uint32_t off = soff + 1024 * i;
            if (lr + 8 * i < nq) {
                cp_async16(sQ + off, gq + 8 * i * qrow);
                if constexpr (PLX) cp_async16(sR + off, gr + 8 * i * qrow);
            } else {
                *reinterpret_cast<uint4 *>(sQ + off) = make_uint4(0, 0, 0, 0);
                if constexpr (PLX) *reinterpret_cast<uint4 *>(sR + off) = make_uint4(0, 0, 0, 0);
            }
        }
    }
    const int pfirst = pos0 + q0, plast = min(pos0 + q0 + nq - 1, Tk - 1);
    const int kfirst = attn_first(pfirst, window) / BN * BN;
    const int ntiles = plast >= kfirst ? (plast - kfirst) / BN + 1 : 0;
    // K, V of the tile at key k0 into stage s; rows past Tk zero (their weights are 0, and
    // 0 x garbage could be NaN)
    const size_t kv0 = ((size_t)b * Tk + lr) * qrow + (size_t)h * AW_D + lc * 8;
    auto issue = [&](int k0, int s) {
        unsigned char *dK = sKV + s * 2 * C::KBYTES + soff, *dV = dK + C::KBYTES;
        const bf16_t *gk = k + kv0 + (size_t)k0 * qrow, *gv = v + kv0 + (size_t)k0 * qrow;
        if (k0 + BN <= Tk) {
#pragma unroll
            for (int i = 0; i < 8; i++) {
                cp_async16(dK + 1024 * i, gk + 8 * i * qrow);
                cp_async16(dV + 1024 * i, gv + 8 * i * qrow);
            }
        } else {
#pragma unroll
            for (int i = 0; i < 8; i++) {
                if (k0 + lr + 8 * i < Tk) {
                    cp_async16(dK + 1024 * i, gk + 8 * i * qrow);
                    cp_async16(dV + 1024 * i, gv + 8 * i * qrow);
                } else {
                    *reinterpret_cast<uint4 *>(dK + 1024 * i) = make_uint4(0, 0, 0, 0);
                    *reinterpret_cast<uint4 *>(dV + 1024 * i) = make_uint4(0, 0, 0, 0);
                }
            }
        }
    };
    if (ntiles > 0) issue(kfirst, 0);
    cp_async_commit();

    // this thread's rows: r_lo, r_lo + 8 (positions p_lo, p_hi)
    const int r_lo = q0 + warp * 16 + gid, p_lo = pos0 + r_lo, p_hi = p_lo + 8;
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

    for (int j = 0; j < ntiles; j++) {
        const int k0 = kfirst + j * BN, s = j & 1;
        cp_async_wait<0>();
        fence_proxy_async();
        __syncthreads(); // tile j in stage s for everyone; stage s ^ 1 is free (tile j - 1 done)
        if (j + 1 < ntiles) issue(k0 + BN, s ^ 1);
        cp_async_commit();
        const uint64_t dK = dK0 + (uint64_t)(s * 2 * C::KBYTES >> 4),
                       dV = dV0 + (uint64_t)(s * 2 * C::KBYTES >> 4);

        // Two product groups: S = Q K^T, then U = R K^T. The softmax of S runs while U is on the
        // tensor cores, and U's weights (w u) while O1 += P V is.
        float S[NS], U[PLX ? NS : 1];
        wgmma_fence();
#pragma unroll
        for (int ks = 0; ks < AW_D / 16; ks++) {
            const uint32_t step = ((ks >> 2) * 64 * 128 + (ks & 3) * 32) >> 4; // Q and K alike
            wgmma_ss_n64(S, dQ + step, dK + step, ks > 0);
        }
        wgmma_commit();
        if constexpr (PLX) {
#pragma unroll
            for (int ks = 0; ks < AW_D / 16; ks++) {
                const uint32_t step = ((ks >> 2) * 64 * 128 + (ks & 3) * 32) >> 4;
                wgmma_ss_n64(U, dR + step, dK + step, ks > 0);
            }
            wgmma_commit();
            wgmma_wait<1>();
        } else {
            wgmma_wait<0>();
        }
        wgmma_fence_regs<NS>(S);

        // The online softmax of rows lo (c = 0, 1) and hi (c = 2, 3), in base 2: invisible keys
        // get -inf, so w = 2^(s scale - m) = 0 for them; a row that has seen no key yet keeps
        // m = -inf and uses 0 in its place.
        const bool whole = attn_tile_whole(k0, BN, pfirst, AW_BQ, Tk, window);
        if (!whole) {
#pragma unroll
            for (int t = 0; t < BN / 8; t++)
#pragma unroll
                for (int c = 0; c < 4; c++) {
                    const int key = k0 + t * 8 + 2 * tig + (c & 1), p = c < 2 ? p_lo : p_hi;
                    if (!attn_visible(key, p, Tk, window)) S[4 * t + c] = -INFINITY;
                }
        }
        float mt[2] = {-INFINITY, -INFINITY}, ms[2], al[2];
#pragma unroll
        for (int i = 0; i < NS; i++) mt[(i >> 1) & 1] = fmaxf(mt[(i >> 1) & 1], S[i]);
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
        // the weights w replace S; n8 blocks 2 kk and 2 kk + 1 are the A fragment of keys
        // 16 kk .. 16 kk + 15
        uint32_t P[BN / 16][4];
#pragma unroll
        for (int t = 0; t < BN / 8; t++) {
#pragma unroll
            for (int c = 0; c < 4; c++) {
                S[4 * t + c] = ex2(fmaf(S[4 * t + c], scale_l2, -ms[c >> 1]));
                d1[c >> 1] += S[4 * t + c];
            }
            P[t / 2][(t & 1) * 2 + 0] = pack_bf16(S[4 * t], S[4 * t + 1]);
            P[t / 2][(t & 1) * 2 + 1] = pack_bf16(S[4 * t + 2], S[4 * t + 3]);
        }
        // once a row's maximum settles, al = 1: skip the rescale when the whole warp has it
        if (__any_sync(0xffffffffu, al[0] != 1.0f || al[1] != 1.0f)) {
#pragma unroll
            for (int i = 0; i < 64; i++) {
                const float a = al[(i >> 1) & 1];
                O1[i] *= a;
                if constexpr (PLX) O2[i] *= a;
            }
        }
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
                for (int c = 0; c < 4; c++) {
                    U[4 * t + c] *= S[4 * t + c];
                    d2[c >> 1] += U[4 * t + c];
                }
                PU[t / 2][(t & 1) * 2 + 0] = pack_bf16(U[4 * t], U[4 * t + 1]);
                PU[t / 2][(t & 1) * 2 + 1] = pack_bf16(U[4 * t + 2], U[4 * t + 3]);
            }
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
    cp_async_wait<0>();

    float *orow[2];
#pragma unroll
    for (int hr = 0; hr < 2; hr++) {
        const int row = r_lo + 8 * hr;
        orow[hr] = row < q0 + nq ? o + ((size_t)b * Tq + row) * qrow + (size_t)h * AW_D : NULL;
    }
    attn_store_rows<PLX, 16>(d1, d2, O1, O2, orow, tig);
#else
    __trap(); // no wgmma in this image: attn_wgmma_usable() keeps launches away
#endif
}

// 1 when this build has the sm_90a kernels, the device runs them and MIXSCOPE_ATTN_WGMMA is not
// 0; asked once per process.
extern "C" int attn_wgmma_usable(void) {
    static int usable = -1;
    if (usable >= 0) return usable;
    const char *env = getenv("MIXSCOPE_ATTN_WGMMA");
    cudaFuncAttributes fa;
    int dev = 0, major = 0, minor = 0;
    usable =
        !(env && !strcmp(env, "0")) && cudaGetDevice(&dev) == cudaSuccess &&
        cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, dev) == cudaSuccess &&
        cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, dev) == cudaSuccess &&
        major == 9 && minor == 0 && cudaFuncGetAttributes(&fa, attn_fwd_wgmma<true>) == cudaSuccess;
    cudaGetLastError(); // a missing image is an answer, not an error to carry
    return usable;
}

template <bool PLX>
static int aw_launch(int B, int Tq, int Tk, int H, int pos0, int window, float scale, const void *q,
                     const void *r, const void *k, const void *v, float *o, cudaStream_t st,
                     err *e) {
    const int smem = aw_cfg<PLX>::SMEM;
    CUDA_TRY(cudaFuncSetAttribute(attn_fwd_wgmma<PLX>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                  smem),
             "gpu attention: shared memory (wgmma)");
    attn_fwd_wgmma<PLX><<<dim3((Tq + AW_BQ - 1) / AW_BQ, B * H), AW_NT, smem, st>>>(
        Tq, Tk, H, pos0, window, scale * 1.4426950408889634f, (const bf16_t *)q, (const bf16_t *)r,
        (const bf16_t *)k, (const bf16_t *)v, o);
    CUDA_LAUNCHED("gpu attention: forward (wgmma)");
    return 0;
}

extern "C" int attn_wgmma_forward(int B, int Tq, int Tk, int H, int pos0, int window, float scale,
                                  const void *q, const void *r, const void *k, const void *v,
                                  float *o, void *stream, err *e) {
    cudaStream_t st = (cudaStream_t)stream;
    return r ? aw_launch<true>(B, Tq, Tk, H, pos0, window, scale, q, r, k, v, o, st, e)
             : aw_launch<false>(B, Tq, Tk, H, pos0, window, scale, q, r, k, v, o, st, e);
}
