// attention.cu: causal softmax attention and Parallax on the GPU (spec delta-family.md §7,
// kata-parallax.md Part B). Twins of mixers/softmax.c and mixers/parallax.c (attention.c):
// tests/gpu checks them against the CPU reference.
//
// Per query row at absolute position p and its visible keys j (j <= p, p - j < window when
// window > 0), with s1 = scale q.k_j, u = r.k_j, w = exp(s1 - m):
//   softmax   o = sum w v / sum w
//   parallax  the streaming accumulators of B.4: m, d1 = sum w, d2 = sum w u, O1 = sum w v,
//             O2 = sum w u v;  vbar = O1/d1, ubar = d2/d1, o = vbar - (O2/d1 - ubar vbar).
// Rows with no visible key output 0.
//
// Kernels:
//   attn_prep        RoPE (rotate-half, angles in double as attention.c) on q, r, k; k and v into
//                    the KV cache slots (fp32 [max_t, H, d]), the rotated q, r out.
//   attn_fwd_simt    the flash forward in fp32 FMA (tiles of 32 queries x 64 keys, the running
//                    row state in shared memory): exact enough for the 1e-5 tests.
//   attn_fwd_mma     the flash forward on the tensor cores for bf16 inputs (mma.sync m16n8k16,
//                    fp32 accumulators): four warps of 16 query rows, key tiles double-buffered
//                    with cp.async; Parallax adds U = R K^T to the same K fragments and O2 from
//                    the same V fragments, its weights w u rounded to bf16 like w.
//   attn_decode_*    one query row per head over the cache (a decode step): key splits of 256
//                    in parallel, then a merge of their (m, d1, d2, e, O1, O2) by rescaling, with
//                    every probe of attention.h.
#include <cuda_bf16.h>
#include <cuda_pipeline.h>
#include <cuda_runtime.h>
#include <math.h>
#include <stdint.h>

#include "attention_rows.cuh"
#include "attention_wgmma.cuh"
#include "gpu.h"
#include "gpu_common.cuh"
#include "mma.cuh"
#include "step_kernels.cuh"

// ---------------------------------------------------------------- RoPE and the cache write

// grid (T, H), 128 threads. Token t sits at position pos0 + t (< max_t), plus *dpos when dpos is
// given (a position on the device: a captured graph replays with the call's). q, r, k [T, H, dk];
// v [T, H, dv]; cache K [max_t, H, dk] then V [max_t, H, dv]; qo, ro [T, H, dk] fp32.
template <typename T>
__global__ void attn_prep_kernel(int H, int dk, int dv, int pos0, const int *dpos, int rope,
                                 float theta, int max_t, const T *q, const T *r, const T *k,
                                 const T *v, float *cache, float *qo, float *ro) {
    const int t = blockIdx.x, h = blockIdx.y, pos = (dpos ? *dpos : 0) + pos0 + t;
    const size_t row = (size_t)t * H + h;
    float *kc = cache + ((size_t)pos * H + h) * dk;
    float *vc = cache + (size_t)max_t * H * dk + ((size_t)pos * H + h) * dv;
    const T *qi = q + row * dk, *ki = k + row * dk, *ri = r ? r + row * dk : NULL;
    float *qd = qo + row * dk, *rd = ro ? ro + row * dk : NULL;
    if (rope) {
        const int half = dk / 2;
        for (int i = threadIdx.x; i < half; i += blockDim.x) {
            const double ang = (double)pos * pow((double)theta, -2.0 * i / dk);
            const float cs = (float)cos(ang), sn = (float)sin(ang);
            float a = ld(qi + i), b = ld(qi + i + half);
            qd[i] = a * cs - b * sn, qd[i + half] = b * cs + a * sn;
            a = ld(ki + i), b = ld(ki + i + half);
            kc[i] = a * cs - b * sn, kc[i + half] = b * cs + a * sn;
            if (ri) {
                a = ld(ri + i), b = ld(ri + i + half);
                rd[i] = a * cs - b * sn, rd[i + half] = b * cs + a * sn;
            }
        }
    } else {
        for (int i = threadIdx.x; i < dk; i += blockDim.x) {
            qd[i] = ld(qi + i), kc[i] = ld(ki + i);
            if (ri) rd[i] = ld(ri + i);
        }
    }
    for (int i = threadIdx.x; i < dv; i += blockDim.x) vc[i] = ld(v + row * dv + i);
}

static int attn_prep_launch(int T, int H, int dk, int dv, int pos0, const int *dpos, int rope,
                            float theta, int max_t, int bf16, const void *q, const void *r,
                            const void *k, const void *v, float *cache, float *qo, float *ro,
                            void *stream, err *e) {
    if (T < 1) return 0;
    cudaStream_t st = (cudaStream_t)stream;
    if (bf16)
        attn_prep_kernel<bf16_t><<<dim3(T, H), 128, 0, st>>>(
            H, dk, dv, pos0, dpos, rope, theta, max_t, (const bf16_t *)q, (const bf16_t *)r,
            (const bf16_t *)k, (const bf16_t *)v, cache, qo, ro);
    else
        attn_prep_kernel<float><<<dim3(T, H), 128, 0, st>>>(
            H, dk, dv, pos0, dpos, rope, theta, max_t, (const float *)q, (const float *)r,
            (const float *)k, (const float *)v, cache, qo, ro);
    CUDA_LAUNCHED("gpu attention: rope and cache write");
    return 0;
}

extern "C" int gpu_attn_prep(int T, int H, int dk, int dv, int pos0, int rope, float theta,
                             int max_t, int bf16, const void *q, const void *r, const void *k,
                             const void *v, float *cache, float *qo, float *ro, void *stream,
                             err *e) {
    return attn_prep_launch(T, H, dk, dv, pos0, NULL, rope, theta, max_t, bf16, q, r, k, v, cache,
                            qo, ro, stream, e);
}

extern "C" int gpu_attn_prep_dpos(int T, int H, int dk, int dv, const int *dpos, int rope,
                                  float theta, int max_t, const float *q, const float *r,
                                  const float *k, const float *v, float *cache, float *qo,
                                  float *ro, void *stream, err *e) {
    return attn_prep_launch(T, H, dk, dv, 0, dpos, rope, theta, max_t, 0, q, r, k, v, cache, qo, ro,
                            stream, e);
}

__global__ void attn_to_bf16_kernel(size_t n, const float *x, bf16_t *y) {
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n;
         i += (size_t)gridDim.x * blockDim.x)
        y[i] = __float2bfloat16(x[i]);
}

extern "C" int gpu_attn_to_bf16(size_t n, const float *x, void *y, void *stream, err *e) {
    if (!n) return 0;
    attn_to_bf16_kernel<<<1024, 256, 0, (cudaStream_t)stream>>>(n, x, (bf16_t *)y);
    CUDA_LAUNCHED("gpu attention: to bf16");
    return 0;
}

// ---------------------------------------------------------------- fp32 flash forward

#define AS_BQ 32
#define AS_BK 64
#define AS_NT 256

// grid (ceil(Tq / AS_BQ), B H). Shared: Q, R [AS_BQ][dk+1], K [AS_BK][dk+1], V [AS_BK][dv],
// S, U [AS_BQ][AS_BK+1] (scores, then weights), O1, O2 [AS_BQ][dv], row state m, d1, d2, a.
template <typename T, bool PLX>
__global__ void __launch_bounds__(AS_NT)
    attn_fwd_simt(int Tq, int Tk, int H, int dk, int dv, int pos0, int window, float scale,
                  const T *q, const T *r, const T *k, const T *v, float *o) {
    extern __shared__ __align__(16) float sm[];
    const int ldx = dk + 1, lds = AS_BK + 1;
    float *sQ = sm, *sR = sQ + AS_BQ * ldx, *sK = sR + (PLX ? AS_BQ * ldx : 0);
    float *sV = sK + AS_BK * ldx, *sS = sV + AS_BK * dv, *sU = sS + AS_BQ * lds;
    float *sO1 = sU + (PLX ? AS_BQ * lds : 0), *sO2 = sO1 + AS_BQ * dv;
    float *sM = sO2 + (PLX ? AS_BQ * dv : 0), *sD1 = sM + AS_BQ, *sD2 = sD1 + AS_BQ,
          *sA = sD2 + AS_BQ;
    const int q0 = blockIdx.x * AS_BQ, n = blockIdx.y, b = n / H, h = n % H, tid = threadIdx.x;
    const int nq = min(AS_BQ, Tq - q0), warp = tid / 32, lane = tid % 32;
    for (int x = tid; x < AS_BQ * dk; x += AS_NT) {
        const int i = x / dk, d = x % dk;
        const size_t g = (((size_t)b * Tq + q0 + i) * H + h) * dk + d;
        sQ[i * ldx + d] = i < nq ? ld(q + g) : 0.0f;
        if constexpr (PLX) sR[i * ldx + d] = i < nq ? ld(r + g) : 0.0f;
    }
    for (int x = tid; x < AS_BQ * dv; x += AS_NT) {
        sO1[x] = 0.0f;
        if constexpr (PLX) sO2[x] = 0.0f;
    }
    for (int i = tid; i < AS_BQ; i += AS_NT) sM[i] = -INFINITY, sD1[i] = 0.0f, sD2[i] = 0.0f;
    const int pfirst = pos0 + q0, plast = min(pos0 + q0 + nq - 1, Tk - 1);
    const int kfirst = attn_first(pfirst, window) / AS_BK * AS_BK;
    for (int k0 = kfirst; k0 <= plast; k0 += AS_BK) {
        __syncthreads(); // the previous tile is done with K, V, S, U
        for (int x = tid; x < AS_BK * dk; x += AS_NT) {
            const int j = x / dk, d = x % dk;
            sK[j * ldx + d] =
                k0 + j < Tk ? ld(k + (((size_t)b * Tk + k0 + j) * H + h) * dk + d) : 0.0f;
        }
        for (int x = tid; x < AS_BK * dv; x += AS_NT) {
            const int j = x / dv, d = x % dv;
            sV[x] = k0 + j < Tk ? ld(v + (((size_t)b * Tk + k0 + j) * H + h) * dv + d) : 0.0f;
        }
        __syncthreads();
        for (int x = tid; x < AS_BQ * AS_BK; x += AS_NT) {
            const int i = x / AS_BK, j = x % AS_BK, p = pos0 + q0 + i, key = k0 + j;
            const int vis = i < nq && attn_visible(key, p, Tk, window);
            float s1 = -INFINITY, u = 0.0f;
            if (vis) {
                float a = 0.0f, c = 0.0f;
                for (int d = 0; d < dk; d++) {
                    a += sQ[i * ldx + d] * sK[j * ldx + d];
                    if constexpr (PLX) c += sR[i * ldx + d] * sK[j * ldx + d];
                }
                s1 = scale * a, u = c;
            }
            sS[i * lds + j] = s1;
            if constexpr (PLX) sU[i * lds + j] = u;
        }
        __syncthreads();
        // the online softmax: one warp per row, two keys per lane
        for (int i = warp; i < AS_BQ; i += AS_NT / 32) {
            const float s0 = sS[i * lds + lane], s1 = sS[i * lds + lane + 32];
            float mt = fmaxf(s0, s1);
            for (int off = 16; off > 0; off >>= 1)
                mt = fmaxf(mt, __shfl_xor_sync(0xffffffffu, mt, off));
            const float mo = sM[i], mn = fmaxf(mo, mt);
            const float w0 = s0 == -INFINITY ? 0.0f : expf(s0 - mn);
            const float w1 = s1 == -INFINITY ? 0.0f : expf(s1 - mn);
            float ws = w0 + w1, wu = 0.0f;
            if constexpr (PLX) {
                const float u0 = sU[i * lds + lane], u1 = sU[i * lds + lane + 32];
                wu = w0 * u0 + w1 * u1;
                sU[i * lds + lane] = w0 * u0, sU[i * lds + lane + 32] = w1 * u1;
            }
            sS[i * lds + lane] = w0, sS[i * lds + lane + 32] = w1;
            for (int off = 16; off > 0; off >>= 1) {
                ws += __shfl_xor_sync(0xffffffffu, ws, off);
                if constexpr (PLX) wu += __shfl_xor_sync(0xffffffffu, wu, off);
            }
            if (lane == 0) {
                const float al = mo == -INFINITY ? 0.0f : expf(mo - mn);
                sA[i] = al, sM[i] = mn;
                sD1[i] = al * sD1[i] + ws;
                if constexpr (PLX) sD2[i] = al * sD2[i] + wu;
            }
        }
        __syncthreads();
        for (int x = tid; x < AS_BQ * dv; x += AS_NT) {
            const int i = x / dv, d = x % dv;
            float a1 = 0.0f, a2 = 0.0f;
            for (int j = 0; j < AS_BK; j++) {
                a1 += sS[i * lds + j] * sV[j * dv + d];
                if constexpr (PLX) a2 += sU[i * lds + j] * sV[j * dv + d];
            }
            sO1[x] = sA[i] * sO1[x] + a1;
            if constexpr (PLX) sO2[x] = sA[i] * sO2[x] + a2;
        }
    }
    __syncthreads();
    for (int x = tid; x < nq * dv; x += AS_NT) {
        const int i = x / dv, d = x % dv;
        float out = 0.0f;
        if (sD1[i] > 0.0f) {
            const float inv = 1.0f / sD1[i], vbar = sO1[x] * inv;
            out = vbar;
            if constexpr (PLX) out = vbar - (sO2[x] * inv - sD2[i] * inv * vbar);
        }
        o[(((size_t)b * Tq + q0 + i) * H + h) * dv + d] = out;
    }
}

// ---------------------------------------------------------------- bf16 tensor-core forward

#define AM_BQ 64 // query rows of a block: four warps of 16

// grid (ceil(Tq / AM_BQ), B H), 128 threads. Warp w owns query rows 16 w .. 16 w + 15 of the
// block; thread (gid = lane / 4, tig = lane % 4) holds rows gid and gid + 8 of them, the mma
// fragment layout. Shared (bf16, rows padded by 8 so that fragment loads hit distinct banks):
// Q, R [AM_BQ][DK+8], K [2][BK][DK+8], V [2][BK][DV+8].
template <int DK, int DV, bool PLX>
__global__ void __launch_bounds__(128)
    attn_fwd_mma(int Tq, int Tk, int H, int pos0, int window, float scale, const bf16_t *q,
                 const bf16_t *r, const bf16_t *k, const bf16_t *v, float *o) {
    constexpr int BK = PLX ? 32 : 64, LDK = DK + 8, LDV = DV + 8, NT = BK / 8, NO = DV / 8;
    extern __shared__ __align__(16) unsigned char smraw[];
    bf16_t *sQ = reinterpret_cast<bf16_t *>(smraw), *sR = sQ + AM_BQ * LDK;
    bf16_t *sK = sR + (PLX ? AM_BQ * LDK : 0), *sV = sK + 2 * BK * LDK;
    const int bx = gridDim.x - 1 - blockIdx.x; // the longest rows first
    const int q0 = bx * AM_BQ, n = blockIdx.y, b = n / H, h = n % H, tid = threadIdx.x;
    const int warp = tid / 32, lane = tid % 32, gid = lane / 4, tig = lane % 4;
    const int nq = min(AM_BQ, Tq - q0);
    constexpr int CK = DK / 8, CV = DV / 8; // 16-byte pieces per row
    for (int x = tid; x < AM_BQ * CK; x += 128) {
        const int i = x / CK, c = x % CK;
        const size_t g = (((size_t)b * Tq + q0 + i) * H + h) * DK + c * 8;
        uint4 zq = make_uint4(0, 0, 0, 0), zr = zq;
        if (i < nq) {
            zq = *reinterpret_cast<const uint4 *>(q + g);
            if constexpr (PLX) zr = *reinterpret_cast<const uint4 *>(r + g);
        }
        *reinterpret_cast<uint4 *>(sQ + i * LDK + c * 8) = zq;
        if constexpr (PLX) *reinterpret_cast<uint4 *>(sR + i * LDK + c * 8) = zr;
    }
    const int pfirst = pos0 + q0, plast = min(pos0 + q0 + nq - 1, Tk - 1);
    const int kfirst = attn_first(pfirst, window) / BK * BK;
    auto issue = [&](int k0, int buf) {
        bf16_t *dK = sK + buf * BK * LDK, *dV = sV + buf * BK * LDV;
        for (int x = tid; x < BK * CK; x += 128) {
            const int j = x / CK, c = x % CK;
            if (k0 + j < Tk)
                __pipeline_memcpy_async(dK + j * LDK + c * 8,
                                        k + (((size_t)b * Tk + k0 + j) * H + h) * DK + c * 8, 16);
            else
                *reinterpret_cast<uint4 *>(dK + j * LDK + c * 8) = make_uint4(0, 0, 0, 0);
        }
        for (int x = tid; x < BK * CV; x += 128) {
            const int j = x / CV, c = x % CV;
            if (k0 + j < Tk)
                __pipeline_memcpy_async(dV + j * LDV + c * 8,
                                        v + (((size_t)b * Tk + k0 + j) * H + h) * DV + c * 8, 16);
            else
                *reinterpret_cast<uint4 *>(dV + j * LDV + c * 8) = make_uint4(0, 0, 0, 0);
        }
        __pipeline_commit();
    };
    float O1[NO][4], O2[PLX ? NO : 1][4];
#pragma unroll
    for (int t = 0; t < NO; t++)
#pragma unroll
        for (int c = 0; c < 4; c++) {
            O1[t][c] = 0.0f;
            if constexpr (PLX) O2[t][c] = 0.0f;
        }
    float mrow[2] = {-INFINITY, -INFINITY}, d1[2] = {0.0f, 0.0f}, d2[2] = {0.0f, 0.0f};
    const int row_lo = q0 + warp * 16 + gid; // block-relative rows + q0
    const int p_lo = pos0 + row_lo, p_hi = p_lo + 8;
    if (kfirst <= plast) issue(kfirst, 0);
    for (int k0 = kfirst, it = 0; k0 <= plast; k0 += BK, it++) {
        const int buf = it & 1;
        if (k0 + BK <= plast) {
            issue(k0 + BK, buf ^ 1);
            __pipeline_wait_prior(1);
        } else {
            __pipeline_wait_prior(0);
        }
        __syncthreads();
        const bf16_t *cK = sK + buf * BK * LDK, *cV = sV + buf * BK * LDV;
        // S = Q K^T (and U = R K^T) for this warp's 16 rows and BK keys
        float S[NT][4], U[PLX ? NT : 1][4];
#pragma unroll
        for (int t = 0; t < NT; t++)
#pragma unroll
            for (int c = 0; c < 4; c++) {
                S[t][c] = 0.0f;
                if constexpr (PLX) U[t][c] = 0.0f;
            }
        // fragments by ldmatrix: lane l addresses row l % 8 of 8x8 matrix l / 8
        const int mat = lane >> 3, rr = lane & 7;
#pragma unroll
        for (int ks = 0; ks < DK / 16; ks++) {
            uint32_t a[4], ar[4];
            const int arow = warp * 16 + (mat & 1) * 8 + rr, acol = ks * 16 + (mat >> 1) * 8;
            ldmatrix_x4(a, sQ + arow * LDK + acol);
            if constexpr (PLX) ldmatrix_x4(ar, sR + arow * LDK + acol);
#pragma unroll
            for (int t = 0; t < NT; t += 2) { // key groups t and t + 1: b0, b1 of each
                uint32_t bk[4];
                ldmatrix_x4(bk, cK + ((t + (mat >> 1)) * 8 + rr) * LDK + ks * 16 + (mat & 1) * 8);
                mma_bf16(S[t], a, bk[0], bk[1]);
                mma_bf16(S[t + 1], a, bk[2], bk[3]);
                if constexpr (PLX) {
                    mma_bf16(U[t], ar, bk[0], bk[1]);
                    mma_bf16(U[t + 1], ar, bk[2], bk[3]);
                }
            }
        }
        // mask, scale, the online softmax of rows lo (c = 0, 1) and hi (c = 2, 3)
        float mt[2] = {-INFINITY, -INFINITY};
        // a tile that every row of the block sees whole needs no mask
        const bool whole = attn_tile_whole(k0, BK, pos0 + q0, AM_BQ, Tk, window);
#pragma unroll
        for (int t = 0; t < NT; t++)
#pragma unroll
            for (int c = 0; c < 4; c++) {
                const int key = k0 + t * 8 + 2 * tig + (c & 1), p = c < 2 ? p_lo : p_hi;
                const bool vis = whole || attn_visible(key, p, Tk, window);
                S[t][c] = vis ? S[t][c] * scale : -INFINITY;
                mt[c >> 1] = fmaxf(mt[c >> 1], S[t][c]);
            }
        float al[2];
#pragma unroll
        for (int hr = 0; hr < 2; hr++) {
            mt[hr] = fmaxf(mt[hr], __shfl_xor_sync(0xffffffffu, mt[hr], 1));
            mt[hr] = fmaxf(mt[hr], __shfl_xor_sync(0xffffffffu, mt[hr], 2));
            const float mn = fmaxf(mrow[hr], mt[hr]);
            al[hr] = mrow[hr] == -INFINITY ? 0.0f : __expf(mrow[hr] - mn);
            mrow[hr] = mn;
            d1[hr] *= al[hr], d2[hr] *= al[hr];
        }
#pragma unroll
        for (int t = 0; t < NT; t++)
#pragma unroll
            for (int c = 0; c < 4; c++) {
                const int hr = c >> 1;
                const float w = S[t][c] == -INFINITY ? 0.0f : __expf(S[t][c] - mrow[hr]);
                S[t][c] = w;
                d1[hr] += w;
                if constexpr (PLX) {
                    U[t][c] *= w;
                    d2[hr] += U[t][c];
                }
            }
#pragma unroll
        for (int t = 0; t < NO; t++) {
            O1[t][0] *= al[0], O1[t][1] *= al[0], O1[t][2] *= al[1], O1[t][3] *= al[1];
            if constexpr (PLX)
                O2[t][0] *= al[0], O2[t][1] *= al[0], O2[t][2] *= al[1], O2[t][3] *= al[1];
        }
        // O += P V: the S accumulators of two key groups of 8 are the A fragment of 16 keys
#pragma unroll
        for (int kk = 0; kk < BK / 16; kk++) {
            uint32_t pa[4], pu[4];
            pa[0] = pack_bf16(S[2 * kk][0], S[2 * kk][1]);
            pa[1] = pack_bf16(S[2 * kk][2], S[2 * kk][3]);
            pa[2] = pack_bf16(S[2 * kk + 1][0], S[2 * kk + 1][1]);
            pa[3] = pack_bf16(S[2 * kk + 1][2], S[2 * kk + 1][3]);
            if constexpr (PLX) {
                pu[0] = pack_bf16(U[2 * kk][0], U[2 * kk][1]);
                pu[1] = pack_bf16(U[2 * kk][2], U[2 * kk][3]);
                pu[2] = pack_bf16(U[2 * kk + 1][0], U[2 * kk + 1][1]);
                pu[3] = pack_bf16(U[2 * kk + 1][2], U[2 * kk + 1][3]);
            }
#pragma unroll
            for (int t = 0; t < NO; t += 2) {
                uint32_t bv[4];
                ldmatrix_x4_trans(bv, cV + (kk * 16 + (mat & 1) * 8 + rr) * LDV + t * 8 +
                                          (mat >> 1) * 8);
                mma_bf16(O1[t], pa, bv[0], bv[1]);
                mma_bf16(O1[t + 1], pa, bv[2], bv[3]);
                if constexpr (PLX) {
                    mma_bf16(O2[t], pu, bv[0], bv[1]);
                    mma_bf16(O2[t + 1], pu, bv[2], bv[3]);
                }
            }
        }
        __syncthreads(); // the buffer is free for the copy after next
    }
    float *orow[2];
#pragma unroll
    for (int hr = 0; hr < 2; hr++) {
        const int row = row_lo + 8 * hr;
        orow[hr] = row < q0 + nq ? o + (((size_t)b * Tq + row) * H + h) * DV : NULL;
    }
    attn_store_rows<PLX, NO>(d1, d2, &O1[0][0], &O2[0][0], orow, tig);
}

template <int DK, int DV, bool PLX>
static int attn_launch_mma(int B, int Tq, int Tk, int H, int pos0, int window, float scale,
                           const void *q, const void *r, const void *k, const void *v, float *o,
                           cudaStream_t st, err *e) {
    constexpr int BK = PLX ? 32 : 64;
    const size_t smem = ((size_t)(PLX ? 2 : 1) * AM_BQ * (DK + 8) + 2 * (size_t)BK * (DK + 8) +
                         2 * (size_t)BK * (DV + 8)) *
                        sizeof(bf16_t);
    CUDA_TRY(cudaFuncSetAttribute(attn_fwd_mma<DK, DV, PLX>,
                                  cudaFuncAttributeMaxDynamicSharedMemorySize, (int)smem),
             "gpu attention: shared memory (mma)");
    attn_fwd_mma<DK, DV, PLX><<<dim3((Tq + AM_BQ - 1) / AM_BQ, B * H), 128, smem, st>>>(
        Tq, Tk, H, pos0, window, scale, (const bf16_t *)q, (const bf16_t *)r, (const bf16_t *)k,
        (const bf16_t *)v, o);
    CUDA_LAUNCHED("gpu attention: forward (tensor cores)");
    return 0;
}

template <typename T, bool PLX>
static int attn_launch_simt(int B, int Tq, int Tk, int H, int dk, int dv, int pos0, int window,
                            float scale, const void *q, const void *r, const void *k, const void *v,
                            float *o, cudaStream_t st, err *e) {
    const size_t smem = ((size_t)(PLX ? 2 : 1) * AS_BQ * (dk + 1) + (size_t)AS_BK * (dk + 1) +
                         (size_t)AS_BK * dv + (size_t)(PLX ? 2 : 1) * AS_BQ * (AS_BK + 1) +
                         (size_t)(PLX ? 2 : 1) * AS_BQ * dv + 4 * AS_BQ) *
                        sizeof(float);
    if (smem > 227 * 1024) return err_set(e, "gpu attention: dk=%d dv=%d too wide", dk, dv);
    CUDA_TRY(cudaFuncSetAttribute(attn_fwd_simt<T, PLX>,
                                  cudaFuncAttributeMaxDynamicSharedMemorySize, (int)smem),
             "gpu attention: shared memory");
    attn_fwd_simt<T, PLX><<<dim3((Tq + AS_BQ - 1) / AS_BQ, B * H), AS_NT, smem, st>>>(
        Tq, Tk, H, dk, dv, pos0, window, scale, (const T *)q, (const T *)r, (const T *)k,
        (const T *)v, o);
    CUDA_LAUNCHED("gpu attention: forward");
    return 0;
}

extern "C" int gpu_attn_forward(int B, int Tq, int Tk, int H, int dk, int dv, int pos0, int window,
                                float scale, int bf16, const void *q, const void *r, const void *k,
                                const void *v, float *o, void *stream, err *e) {
    if (Tq < 1) return 0;
    cudaStream_t st = (cudaStream_t)stream;
    const bool plx = r != NULL;
    if (bf16 && dk == dv && dk == 128 && attn_wgmma_usable())
        return attn_wgmma_forward(B, Tq, Tk, H, pos0, window, scale, q, r, k, v, o, stream, e);
    if (bf16 && dk == dv && (dk == 64 || dk == 128)) {
        if (dk == 64)
            return plx ? attn_launch_mma<64, 64, true>(B, Tq, Tk, H, pos0, window, scale, q, r, k,
                                                       v, o, st, e)
                       : attn_launch_mma<64, 64, false>(B, Tq, Tk, H, pos0, window, scale, q, r, k,
                                                        v, o, st, e);
        return plx ? attn_launch_mma<128, 128, true>(B, Tq, Tk, H, pos0, window, scale, q, r, k, v,
                                                     o, st, e)
                   : attn_launch_mma<128, 128, false>(B, Tq, Tk, H, pos0, window, scale, q, r, k, v,
                                                      o, st, e);
    }
    if (bf16)
        return plx ? attn_launch_simt<bf16_t, true>(B, Tq, Tk, H, dk, dv, pos0, window, scale, q, r,
                                                    k, v, o, st, e)
                   : attn_launch_simt<bf16_t, false>(B, Tq, Tk, H, dk, dv, pos0, window, scale, q,
                                                     r, k, v, o, st, e);
    return plx ? attn_launch_simt<float, true>(B, Tq, Tk, H, dk, dv, pos0, window, scale, q, r, k,
                                               v, o, st, e)
               : attn_launch_simt<float, false>(B, Tq, Tk, H, dk, dv, pos0, window, scale, q, r, k,
                                                v, o, st, e);
}

// ---------------------------------------------------------------- decode step

#define AD_KS 256 // keys of a split
#define AD_NT 256

enum { AD_M, AD_D1, AD_D2, AD_E, AD_NS };

// The decode's position (pos0, plus *dpos when given: on the device only), its first visible key
// and its splits.
__host__ __device__ __forceinline__ void ad_span(int pos0, const int *dpos, int window, int *pos,
                                                 int *first, int *ns) {
    *pos = (dpos ? *dpos : 0) + pos0;
    *first = window > 0 && *pos - window + 1 > 0 ? *pos - window + 1 : 0;
    *ns = (*pos - *first + 1 + AD_KS - 1) / AD_KS;
}

extern "C" size_t gpu_attn_decode_scratch_bytes(int H, int dv, int max_t) {
    const size_t ns = (size_t)(max_t + AD_KS - 1) / AD_KS;
    return (ns * H * (AD_NS + 2 * (size_t)dv) + 2 * (size_t)H * max_t) * sizeof(float);
}

// Where token t of a decode of several tokens finds its own (in floats): q and r (q), o (o), its
// probes (p) and its scratch (sc) lie these strides after token 0's; token t sits at the first
// token's position + t. One token: every stride 0.
struct ad_tok {
    size_t q, o, p, sc;
};

// grid (at least ns, H, tokens). Split s folds the keys [first + s AD_KS, ...) of head h: its (m,
// d1, d2, e) into part [H][ns][AD_NS], O1, O2 into po1, po2 [H][ns][dv]; the scores s1, u of every
// key into ks1, ku [H][max_t] (the probes' second pass reads them). Splits past ns do nothing (a
// grid for a position on the device covers the most splits the position can need).
__global__ void __launch_bounds__(AD_NT)
    attn_decode_partial(int H, int dk, int dv, int max_t, int pos0, const int *dpos, int window,
                        float scale, const float *q, const float *r, const float *cache,
                        float *part, float *po1, float *po2, float *ks1, float *ku, ad_tok ts) {
    __shared__ float sq[1024], sr[1024], s1[AD_KS], su[AD_KS], sw[AD_KS], red[3][AD_NT / 32];
    const int s = blockIdx.x, h = blockIdx.y, tid = threadIdx.x, warp = tid / 32, lane = tid % 32;
    const size_t t = blockIdx.z;
    q += t * ts.q, r = r ? r + t * ts.q : NULL;
    part += t * ts.sc, po1 += t * ts.sc, po2 += t * ts.sc, ks1 += t * ts.sc, ku += t * ts.sc;
    int pos, first, ns;
    ad_span(pos0 + (int)t, dpos, window, &pos, &first, &ns);
    if (s >= ns) return;
    const int j0 = first + s * AD_KS, nk = min(AD_KS, pos + 1 - j0);
    const float *K = cache, *V = cache + (size_t)max_t * H * dk;
    for (int d = tid; d < dk; d += AD_NT) {
        sq[d] = q[(size_t)h * dk + d];
        sr[d] = r ? r[(size_t)h * dk + d] : 0.0f;
    }
    __syncthreads();
    for (int jj = warp; jj < nk; jj += AD_NT / 32) {
        const float *kr = K + ((size_t)(j0 + jj) * H + h) * dk;
        float a = 0.0f, c = 0.0f;
        for (int d = lane; d < dk; d += 32) {
            const float kv = kr[d];
            a += sq[d] * kv;
            if (r) c += sr[d] * kv;
        }
        for (int off = 16; off > 0; off >>= 1) {
            a += __shfl_xor_sync(0xffffffffu, a, off);
            c += __shfl_xor_sync(0xffffffffu, c, off);
        }
        if (lane == 0) {
            s1[jj] = scale * a, su[jj] = c;
            ks1[(size_t)h * max_t + j0 + jj] = scale * a;
            ku[(size_t)h * max_t + j0 + jj] = c;
        }
    }
    __syncthreads();
    float mx = -INFINITY;
    for (int jj = tid; jj < nk; jj += AD_NT) mx = fmaxf(mx, s1[jj]);
    for (int off = 16; off > 0; off >>= 1) mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, off));
    if (lane == 0) red[0][warp] = mx;
    __syncthreads();
    mx = red[0][0];
    for (int w = 1; w < AD_NT / 32; w++) mx = fmaxf(mx, red[0][w]);
    __syncthreads(); // red is reused
    float a1 = 0.0f, a2 = 0.0f, ae = 0.0f;
    for (int jj = tid; jj < nk; jj += AD_NT) {
        const float w = expf(s1[jj] - mx);
        sw[jj] = w;
        a1 += w, a2 += w * su[jj], ae += w * (s1[jj] - mx);
    }
    for (int off = 16; off > 0; off >>= 1) {
        a1 += __shfl_xor_sync(0xffffffffu, a1, off);
        a2 += __shfl_xor_sync(0xffffffffu, a2, off);
        ae += __shfl_xor_sync(0xffffffffu, ae, off);
    }
    if (lane == 0) red[0][warp] = a1, red[1][warp] = a2, red[2][warp] = ae;
    __syncthreads();
    float *pp = part + ((size_t)h * ns + s) * AD_NS;
    if (tid == 0) {
        float t1 = 0.0f, t2 = 0.0f, te = 0.0f;
        for (int w = 0; w < AD_NT / 32; w++) t1 += red[0][w], t2 += red[1][w], te += red[2][w];
        pp[AD_M] = mx, pp[AD_D1] = t1, pp[AD_D2] = t2, pp[AD_E] = te;
    }
    for (int d = tid; d < dv; d += AD_NT) {
        float o1 = 0.0f, o2 = 0.0f;
        for (int jj = 0; jj < nk; jj++) {
            const float x = V[((size_t)(j0 + jj) * H + h) * dv + d];
            o1 += sw[jj] * x;
            if (r) o2 += sw[jj] * su[jj] * x;
        }
        po1[((size_t)h * ns + s) * dv + d] = o1;
        po2[((size_t)h * ns + s) * dv + d] = o2;
    }
}

// grid (H, tokens), AD_NT threads: merges the splits, writes o [H, dv] and, when probes != NULL,
// every probe of the head (probe i at probes[i H + h]; softmax 5, parallax 14).
__global__ void __launch_bounds__(AD_NT)
    attn_decode_merge(int H, int dk, int dv, int max_t, int pos0, const int *dpos, int window,
                      int plx, const float *r, const float *part, const float *po1,
                      const float *po2, const float *ks1, const float *ku, float *o, float *probes,
                      ad_tok ts) {
    __shared__ double dred[3][AD_NT];
    __shared__ float fred[4][AD_NT];
    __shared__ float st[4];
    const int h = blockIdx.x, tid = threadIdx.x;
    const size_t t = blockIdx.y;
    r = r ? r + t * ts.q : NULL, o += t * ts.o, probes = probes ? probes + t * ts.p : NULL;
    part += t * ts.sc, po1 += t * ts.sc, po2 += t * ts.sc, ks1 += t * ts.sc, ku += t * ts.sc;
    int pos, first, ns;
    ad_span(pos0 + (int)t, dpos, window, &pos, &first, &ns);
    const float *pp = part + (size_t)h * ns * AD_NS;
    if (tid == 0) {
        float M = -INFINITY;
        for (int s = 0; s < ns; s++) M = fmaxf(M, pp[s * AD_NS + AD_M]);
        float d1 = 0.0f, d2 = 0.0f, ee = 0.0f;
        for (int s = 0; s < ns; s++) {
            const float ms = pp[s * AD_NS + AD_M], a = expf(ms - M);
            d1 += a * pp[s * AD_NS + AD_D1], d2 += a * pp[s * AD_NS + AD_D2];
            ee += a * (pp[s * AD_NS + AD_E] + (ms - M) * pp[s * AD_NS + AD_D1]);
        }
        st[0] = M, st[1] = d1, st[2] = d2, st[3] = ee;
    }
    __syncthreads();
    const float M = st[0], d1 = st[1], inv = 1.0f / d1, ub = plx ? st[2] * inv : 0.0f;
    double sa = 0.0, cr = 0.0, on = 0.0;
    for (int d = tid; d < dv; d += AD_NT) {
        float o1 = 0.0f, o2 = 0.0f;
        for (int s = 0; s < ns; s++) {
            const float a = expf(pp[s * AD_NS + AD_M] - M);
            o1 += a * po1[((size_t)h * ns + s) * dv + d];
            o2 += a * po2[((size_t)h * ns + s) * dv + d];
        }
        const float vbar = o1 * inv, corr = plx ? o2 * inv - ub * vbar : 0.0f;
        const float out = vbar - corr;
        o[(size_t)h * dv + d] = out;
        sa += (double)vbar * vbar, cr += (double)corr * corr, on += (double)out * out;
    }
    if (!probes) return;
    dred[0][tid] = sa, dred[1][tid] = cr, dred[2][tid] = on;
    // the effective weights a_j = p_j (1 + ubar - u_j) (parallax)
    float amin = INFINITY, amax = -INFINITY, neg = 0.0f;
    if (plx)
        for (int j = first + tid; j <= pos; j += AD_NT) {
            const float p = expf(ks1[(size_t)h * max_t + j] - M) * inv;
            const float aj = p * (1.0f + ub - ku[(size_t)h * max_t + j]);
            amin = fminf(amin, aj), amax = fmaxf(amax, aj);
            if (aj < 0.0f) neg -= aj;
        }
    fred[0][tid] = amin, fred[1][tid] = amax, fred[2][tid] = neg;
    float r2 = 0.0f;
    if (plx)
        for (int d = tid; d < dk; d += AD_NT) r2 += r[(size_t)h * dk + d] * r[(size_t)h * dk + d];
    fred[3][tid] = r2;
    __syncthreads();
    for (int off = AD_NT / 2; off > 0; off >>= 1) {
        if (tid < off) {
            for (int i = 0; i < 3; i++) dred[i][tid] += dred[i][tid + off];
            fred[0][tid] = fminf(fred[0][tid], fred[0][tid + off]);
            fred[1][tid] = fmaxf(fred[1][tid], fred[1][tid + off]);
            fred[2][tid] += fred[2][tid + off], fred[3][tid] += fred[3][tid + off];
        }
        __syncthreads();
    }
    if (tid != 0) return;
    const int nvis = pos - first + 1;
    const float ent = logf(d1) - st[3] * inv;
    float *P = probes + h;
    P[0 * H] = ent;
    P[1 * H] = nvis > 1 ? ent / logf((float)nvis) : 0.0f;
    P[2 * H] = inv;
    const float p0 = first == 0 ? expf(ks1[(size_t)h * max_t] - M) * inv : 0.0f;
    P[3 * H] = p0;
    P[4 * H] = (float)sqrt(dred[2][0]);
    if (!plx) return;
    const float san = (float)sqrt(dred[0][0]), crn = (float)sqrt(dred[1][0]);
    P[5 * H] = san;
    P[6 * H] = crn;
    P[7 * H] = san > 0.0f ? crn / san : crn > 0.0f ? INFINITY : 0.0f;
    P[8 * H] = sqrtf(fred[3][0]);
    P[9 * H] = ub;
    P[10 * H] = fred[0][0];
    P[11 * H] = fred[1][0];
    P[12 * H] = fred[2][0];
    P[13 * H] = first == 0 ? p0 * (1.0f + ub - ku[(size_t)h * max_t]) : 0.0f;
}

// The two launches of a decode of n tokens over grid (nsg, H, n) splits; ts: the tokens' strides.
static int attn_decode_launch(int H, int dk, int dv, int max_t, int pos0, const int *dpos, int n,
                              int window, int nsg, float scale, const float *q, const float *r,
                              const float *cache, float *o, float *probes, ad_tok ts, void *scratch,
                              cudaStream_t st, err *e) {
    if (dk > 1024) return err_set(e, "gpu attention decode: dk=%d above 1024", dk);
    if (n < 1) return 0;
    const int nsmax = (max_t + AD_KS - 1) / AD_KS;
    float *part = (float *)scratch, *po1 = part + (size_t)nsmax * H * AD_NS;
    float *po2 = po1 + (size_t)nsmax * H * dv, *ks1 = po2 + (size_t)nsmax * H * dv;
    float *ku = ks1 + (size_t)H * max_t;
    attn_decode_partial<<<dim3(nsg, H, n), AD_NT, 0, st>>>(
        H, dk, dv, max_t, pos0, dpos, window, scale, q, r, cache, part, po1, po2, ks1, ku, ts);
    CUDA_LAUNCHED("gpu attention decode: splits");
    attn_decode_merge<<<dim3(H, n), AD_NT, 0, st>>>(H, dk, dv, max_t, pos0, dpos, window, r != NULL,
                                                    r, part, po1, po2, ks1, ku, o, probes, ts);
    CUDA_LAUNCHED("gpu attention decode: merge");
    return 0;
}

extern "C" int gpu_attn_decode(int H, int dk, int dv, int max_t, int pos, int window, float scale,
                               const float *q, const float *r, const float *cache, float *o,
                               float *probes, void *scratch, void *stream, err *e) {
    if (pos < 0 || pos >= max_t)
        return err_set(e, "gpu attention decode: pos %d outside the cache", pos);
    int at, first, ns;
    ad_span(pos, NULL, window, &at, &first, &ns);
    const ad_tok one = {0, 0, 0, 0};
    return attn_decode_launch(H, dk, dv, max_t, pos, NULL, 1, window, ns, scale, q, r, cache, o,
                              probes, one, scratch, (cudaStream_t)stream, e);
}

extern "C" int gpu_attn_decode_splits(int max_t, int window) {
    const int nsmax = (max_t + AD_KS - 1) / AD_KS;
    if (window <= 0) return nsmax;
    const int nw = (window + AD_KS - 1) / AD_KS + 1; // a window straddles one split more
    return nw < nsmax ? nw : nsmax;
}

extern "C" int gpu_attn_decode_dpos(int H, int dk, int dv, int max_t, const int *dpos, int n,
                                    int window, float scale, const float *q, const float *r,
                                    const float *cache, float *o, size_t o_stride, float *probes,
                                    size_t p_stride, void *scratch, void *stream, err *e) {
    const ad_tok ts = {(size_t)H * dk, o_stride, p_stride,
                       gpu_attn_decode_scratch_bytes(H, dv, max_t) / sizeof(float)};
    return attn_decode_launch(H, dk, dv, max_t, 0, dpos, n, window,
                              gpu_attn_decode_splits(max_t, window), scale, q, r, cache, o, probes,
                              ts, scratch, (cudaStream_t)stream, e);
}
