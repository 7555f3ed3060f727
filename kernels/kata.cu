// kata.cu: KATA on the GPU (spec kata-parallax.md Part A), the normalised variants (m1, mg,
// sigma, orthant, lorentz, linear). Twin of mixers/kata.c: tests/gpu checks it against the CPU.
//
//   S_t = S_{t-1} + psi(k_t) v_t^T,  z_t = z_{t-1} + psi(k_t),
//   o_t = S_t^T psi(q_t) / max(z_t^T psi(q_t), eps) = sum_{s<=t} kappa_ts v_s / sum_{s<=t}
//   kappa_ts.
// Layout: q, k [B, T, H, dk]; v [B, T, H, dv]; state S [B, H, D, dv] then z [B, H, D] (fp32, psi
// packed as svec, kata_features.h); o [B, T, H, dv] fp32.
//
// Two forms:
//   flash (§A.6)    kata_attend over every key s <= t: kappa from group dot products, psi never
//                   formed; a given state is read by kata_state (no update) first.
//   chunked (§A.7, A.8)  kata_state walks the chunks in order, one block per (feature slice,
//                   value slice, head) holding its slice of [S | z] in shared memory: per chunk it
//                   reads psi(Q)^T [S | z] (the carried exclusive prefix of the chunk states,
//                   built directly, never inclusive-minus-own) into o and den with atomics (the
//                   feature slices of one output add up there), then adds psi(K)^T [V | 1] to its
//                   slice. The scan over chunk states is this running sum, parallel over
//                   D x dv x heads. kata_attend then adds the chunk-local kappa terms and divides.
// All arithmetic is fp32 (inputs may be bf16). The chunked form of m1 and mg with bf16 inputs, dk
// and dv in {64, 128}, runs on tensor cores instead (kata_tc.cu; MIXSCOPE_KATA_TC=0 keeps it
// here): m1 at 128K tokens 31.8 ms against 866 (docs/gpu-results.md).
#include <cuda_bf16.h>
#include <cuda_runtime.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>

#include "../mixers/kata.h"
#include "gpu.h"
#include "gpu_common.cuh"
#include "kata_feat.cuh"
#include "kata_tc.cuh"

#define KA_NT 256 // threads of every kata block
#define KA_VS 32  // value columns of a kata_state block
#define KA_KT 64  // features of a psi tile
#define KA_BQ 64  // query rows of a kata_attend block
#define KA_BK 64  // keys of a kata_attend tile

// ---------------------------------------------------------------- the chunked state pass

// grid (nfs, ceil(dv / KA_VS), N). Block (fs, cs, n) owns features [fs FR, fs FR + FR) and value
// columns [cs KA_VS, cs KA_VS + KA_VS) of head n, and z's features when cs == 0. Shared:
// S [FR][KA_VS], z [FR], Q and K of the chunk [C][dk+1], their Lorentz norms [C] each,
// V [C][KA_VS], one psi tile [KA_KT][C+4], the read's partial sums [G][C][KA_VS] and [G][C]
// (G C = 128); the write's token-major psi tile [C][2 KA_KT+4] over the read's tile and sums; the
// slice's feature codes [FR] (read once).
// update = 0: read the state for every chunk, never write it (the flash form's initial-state term).
template <typename T, int C>
__global__ void __launch_bounds__(KA_NT)
    kata_state_kernel(kfeat f, int T_, int H, int dv, int D, int FR, int update, const int *idx,
                      const T *q, const T *k, const T *v, float *Sg, float *zg, float *o,
                      float *den) {
    extern __shared__ __align__(16) float sm[];
    const int dk = f.d, ldx = dk + 1, ldq = C + 4;
    float *sS = sm, *sz = sS + (size_t)FR * KA_VS, *sQ = sz + FR, *sK = sQ + C * ldx;
    float *nQ = sK + C * ldx, *nK = nQ + C, *sV = nK + C, *sP = sV + C * KA_VS;
    float *sRed = sP + KA_KT * (C + 4), *sDred = sRed + KA_NT * 16; // the read's partial sums
    int *sI = reinterpret_cast<int *>(sDred + 128);                 // the slice's feature codes
    const int fs = blockIdx.x, cs = blockIdx.y, n = blockIdx.z, b = n / H, h = n % H;
    const int tid = threadIdx.x, r0 = fs * FR, j0 = cs * KA_VS, jw = min(KA_VS, dv - j0);
    const int zb = cs == 0; // this block also carries z
    const size_t tok_k = (size_t)H * dk, tok_v = (size_t)H * dv;
    float *S = Sg + (size_t)n * D * dv, *z = zg + (size_t)n * D;
    for (int x = tid; x < FR * KA_VS; x += KA_NT) {
        const int r = x / KA_VS, j = x % KA_VS;
        sS[x] = r0 + r < D && j < jw ? S[(size_t)(r0 + r) * dv + j0 + j] : 0.0f;
    }
    for (int r = tid; r < FR; r += KA_NT) {
        sz[r] = zb && r0 + r < D ? z[r0 + r] : 0.0f;
        sI[r] = r0 + r < D ? idx[r0 + r] : 0;
    }
    // The read's thread tile: tokens 4 tt .. 4 tt + 3, columns 4 cg .. 4 cg + 3. The C x KA_VS
    // outputs make ntile tiles; the block's threads form G = KA_NT / ntile groups, group grp taking
    // every G-th feature of a psi tile, and the groups' partial sums meet in shared memory.
    const int ntile = (C / 4) * (KA_VS / 4), G = KA_NT / ntile, grp = tid / ntile;
    const int tt = (tid % ntile) / (KA_VS / 4), cg = tid % (KA_VS / 4);
    const int nchunks = (T_ + C - 1) / C;
    for (int c = 0; c < nchunks; c++) {
        const int t0 = c * C, L = min(C, T_ - t0);
        const T *qb = q + ((size_t)b * T_ + t0) * tok_k + (size_t)h * dk;
        const T *kb = k + ((size_t)b * T_ + t0) * tok_k + (size_t)h * dk;
        const T *vb = v + ((size_t)b * T_ + t0) * tok_v + (size_t)h * dv + j0;
        __syncthreads(); // the previous chunk is done with every buffer
        for (int x = tid; x < C * dk; x += KA_NT) {
            const int i = x / dk, d = x % dk;
            sQ[i * ldx + d] = i < L ? ld(qb + (size_t)i * tok_k + d) : 0.0f;
            sK[i * ldx + d] = i < L ? ld(kb + (size_t)i * tok_k + d) : 0.0f;
        }
        for (int x = tid; x < C * KA_VS; x += KA_NT) {
            const int i = x / KA_VS, j = x % KA_VS;
            sV[x] = i < L && j < jw ? ld(vb + (size_t)i * tok_v + j) : 0.0f;
        }
        __syncthreads();
        if (f.kind == KATA_FEAT_LORENTZ)
            for (int i = tid; i < 2 * C; i += KA_NT) {
                const float *x = i < C ? sQ + i * ldx : sK + (i - C) * ldx;
                float nn = 0.0f;
                for (int d = 0; d + 1 < dk; d++) nn += x[d] * x[d];
                (i < C ? nQ[i] : nK[i - C]) = sqrtf(nn);
            }
        // read: o[t] += psi(q_t)^T S[:, cols], den[t] += psi(q_t)^T z over this feature slice
        float acc[4][4] = {}, dacc[4] = {};
        for (int kt = 0; kt < FR; kt += KA_KT) {
            __syncthreads();
            for (int x = tid; x < KA_KT * C; x += KA_NT) {
                const int fr = x / C, t = x % C, r = r0 + kt + fr;
                sP[fr * ldq + t] =
                    r < D && t < L ? kata_psi(f, sQ + t * ldx, nQ[t], sI[kt + fr]) : 0.0f;
            }
            __syncthreads();
#pragma unroll 4
            for (int fr = grp; fr < KA_KT; fr += G) {
                const float4 a4 = *reinterpret_cast<const float4 *>(sP + fr * ldq + 4 * tt);
                const float4 s4 =
                    *reinterpret_cast<const float4 *>(sS + (kt + fr) * KA_VS + 4 * cg);
                const float zz = sz[kt + fr];
                kata_outer4(acc, a4, s4);
                dacc[0] += a4.x * zz, dacc[1] += a4.y * zz, dacc[2] += a4.z * zz;
                dacc[3] += a4.w * zz;
            }
        }
#pragma unroll
        for (int u = 0; u < 4; u++) {
            *reinterpret_cast<float4 *>(sRed + (grp * C + 4 * tt + u) * KA_VS + 4 * cg) =
                make_float4(acc[u][0], acc[u][1], acc[u][2], acc[u][3]);
            if (cg == 0) sDred[grp * C + 4 * tt + u] = dacc[u];
        }
        __syncthreads();
        for (int x = tid; x < C * KA_VS; x += KA_NT) {
            const int t = x / KA_VS, j = x % KA_VS;
            if (t >= L || j >= jw) continue;
            float sum = 0.0f;
            for (int g = 0; g < G; g++) sum += sRed[(g * C + t) * KA_VS + j];
            atomicAdd(o + (((size_t)b * T_ + t0 + t) * H + h) * dv + j0 + j, sum);
        }
        if (zb)
            for (int t = tid; t < L; t += KA_NT) {
                float sum = 0.0f;
                for (int g = 0; g < G; g++) sum += sDred[g * C + t];
                atomicAdd(den + ((size_t)b * T_ + t0 + t) * H + h, sum);
            }
        if (!update) continue;
        // write: S[rows, cols] += psi(K)^T V, z += psi(K)^T 1, in tiles of 2 KA_KT rows with a
        // token-major psi tile [C][2 KA_KT + 4] (over sP and sRed, which the read is done with).
        // Thread (rg, cg): rows 4 rg .. 4 rg + 3, columns 4 cg .. 4 cg + 3; each cell and z summed
        // token by token, as the CPU.
        const int rg = tid / (KA_VS / 4), ldw = 2 * KA_KT + 4;
        for (int kt = 0; kt < FR; kt += 2 * KA_KT) {
            __syncthreads(); // every read of the old S, of sP and of sRed is done
            for (int x = tid; x < 2 * KA_KT * C; x += KA_NT) {
                const int t = x / (2 * KA_KT), ff = x % (2 * KA_KT), r = r0 + kt + ff;
                sP[t * ldw + ff] = kt + ff < FR && r < D && t < L
                                       ? kata_psi(f, sK + t * ldx, nK[t], sI[kt + ff])
                                       : 0.0f;
            }
            __syncthreads();
            const int rr = kt + 4 * rg; // FR is a multiple of 4: a group is in or out whole
            if (rr >= FR) continue;
            float acc[4][4], zz[4];
#pragma unroll
            for (int u = 0; u < 4; u++) {
                const float4 s4 = *reinterpret_cast<const float4 *>(sS + (rr + u) * KA_VS + 4 * cg);
                acc[u][0] = s4.x, acc[u][1] = s4.y, acc[u][2] = s4.z, acc[u][3] = s4.w;
                zz[u] = sz[rr + u];
            }
            kata_write_tokens(acc, zz, sP + 4 * rg, ldw, sV + 4 * cg, KA_VS, L);
#pragma unroll
            for (int u = 0; u < 4; u++) {
                *reinterpret_cast<float4 *>(sS + (rr + u) * KA_VS + 4 * cg) =
                    make_float4(acc[u][0], acc[u][1], acc[u][2], acc[u][3]);
                if (zb && cg == 0) sz[rr + u] = zz[u];
            }
        }
    }
    if (!update) return;
    __syncthreads();
    for (int x = tid; x < FR * KA_VS; x += KA_NT) {
        const int r = x / KA_VS, j = x % KA_VS;
        if (r0 + r < D && j < jw) S[(size_t)(r0 + r) * dv + j0 + j] = sS[x];
    }
    if (zb)
        for (int r = tid; r < FR; r += KA_NT)
            if (r0 + r < D) z[r0 + r] = sz[r];
}

// ---------------------------------------------------------------- the attend pass

// grid (ceil(T / KA_BQ), N). Query row t sees the keys s in [first(t), t], first(t) = 0 (flash,
// local = 0) or the start of t's chunk of `local` tokens (the chunk-local part of the chunked
// form). Adds sum kappa_ts v_s to o[t] and sum kappa_ts to den[t] (which hold the state read, or
// 0), then o[t] /= max(den, eps). Shared: Q [KA_BQ][dk+1], K [KA_BK][dk+1], V [KA_BK][dv],
// A [KA_BQ][KA_BK+1], num [KA_BQ][dv], den [KA_BQ].
template <typename T>
__global__ void __launch_bounds__(KA_NT)
    kata_attend_kernel(kfeat f, int T_, int H, int dv, int local, float eps, const T *q, const T *k,
                       const T *v, float *o, const float *den) {
    extern __shared__ __align__(16) float sm[];
    const int dk = f.d, ldx = dk + 1, lda = KA_BK + 1;
    float *sQ = sm, *sK = sQ + KA_BQ * ldx, *sV = sK + KA_BK * ldx, *sA = sV + KA_BK * dv;
    float *sN = sA + KA_BQ * lda, *sD = sN + KA_BQ * dv;
    const int q0 = blockIdx.x * KA_BQ, n = blockIdx.y, b = n / H, h = n % H, tid = threadIdx.x;
    const int nq = min(KA_BQ, T_ - q0);
    for (int x = tid; x < KA_BQ * dk; x += KA_NT) {
        const int i = x / dk, d = x % dk;
        sQ[i * ldx + d] = i < nq ? ld(q + (((size_t)b * T_ + q0 + i) * H + h) * dk + d) : 0.0f;
    }
    for (int x = tid; x < KA_BQ * dv; x += KA_NT) sN[x] = 0.0f;
    for (int i = tid; i < KA_BQ; i += KA_NT) sD[i] = 0.0f;
    const int kfirst = local ? q0 / local * local : 0, klast = q0 + nq - 1;
    for (int k0 = kfirst; k0 <= klast; k0 += KA_BK) {
        const int nk = min(KA_BK, klast + 1 - k0);
        __syncthreads(); // the previous tile is done with sK, sV, sA
        for (int x = tid; x < KA_BK * dk; x += KA_NT) {
            const int j = x / dk, d = x % dk;
            sK[j * ldx + d] = j < nk ? ld(k + (((size_t)b * T_ + k0 + j) * H + h) * dk + d) : 0.0f;
        }
        for (int x = tid; x < KA_BK * dv; x += KA_NT) {
            const int j = x / dv, d = x % dv;
            sV[x] = j < nk ? ld(v + (((size_t)b * T_ + k0 + j) * H + h) * dv + d) : 0.0f;
        }
        __syncthreads();
        for (int x = tid; x < KA_BQ * KA_BK; x += KA_NT) {
            const int i = x / KA_BK, j = x % KA_BK, t = q0 + i, s = k0 + j;
            const int first = local ? t / local * local : 0;
            sA[i * lda + j] = i < nq && j < nk && s <= t && s >= first
                                  ? kata_kappa(f, sQ + i * ldx, sK + j * ldx)
                                  : 0.0f;
        }
        __syncthreads();
        for (int x = tid; x < KA_BQ * dv; x += KA_NT) {
            const int i = x / dv, d = x % dv;
            float acc = 0.0f;
            for (int j = 0; j < nk; j++) acc += sA[i * lda + j] * sV[j * dv + d];
            sN[x] += acc;
        }
        for (int i = tid; i < KA_BQ; i += KA_NT) {
            float acc = 0.0f;
            for (int j = 0; j < nk; j++) acc += sA[i * lda + j];
            sD[i] += acc;
        }
    }
    __syncthreads();
    for (int x = tid; x < nq * dv; x += KA_NT) {
        const int i = x / dv, d = x % dv;
        const size_t row = ((size_t)b * T_ + q0 + i) * H + h;
        const float dn = fmaxf(den[row] + sD[i], eps);
        o[row * dv + d] = (o[row * dv + d] + sN[x]) / dn;
    }
}

// ---------------------------------------------------------------- one exact step

// psi(x)_r rounded as kata_features.c rounds it (no fused multiply-add): the probes' step matches
// the CPU's state bit for bit, which the probes that divide by a small denominator need.
__device__ __forceinline__ float kata_psi_exact(const kfeat &f, const float *x, float xn,
                                                int code) {
    switch (f.kind) {
    case KATA_FEAT_PSD_CONCAT: {
        const int m = code >> 20, i = (code >> 10) & 1023, j = code & 1023;
        const float *xm = x + m * f.E, c = i == j ? f.s : f.s * KA_SQRT2;
        return __fmul_rn(__fmul_rn(c, xm[i]), xm[j]);
    }
    case KATA_FEAT_PSD_SUM: {
        const int i = (code >> 10) & 1023, j = code & 1023;
        float acc = 0.0f;
        for (int m = 0; m < f.M; m++)
            acc = __fadd_rn(acc, __fmul_rn(x[m * f.E + i], x[m * f.E + j]));
        return __fmul_rn(i == j ? f.s : f.s * KA_SQRT2, acc);
    }
    case KATA_FEAT_ORTHANT: {
        const float y = __fmul_rn(f.rs, x[code]);
        return __fadd_rn(y > 0.0f ? y : 0.0f, KATA_ORTHANT_EPS);
    }
    case KATA_FEAT_LORENTZ: {
        if (code + 1 < f.d) return __fmul_rn(f.rs, x[code]);
        const float xd = __fmul_rn(f.rs, x[f.d - 1]);
        return __fmul_rn(__fmul_rn(f.rs, xn), __fadd_rn(1.0f, __fmul_rn(xd, xd)));
    }
    default:
        return __fmul_rn(f.rs, x[code]);
    }
}

// One token for H heads (batch 1) in the CPU's order and rounding: o [H, dv] = S_{t-1}^T psi(q),
// den [H] = z_{t-1}.psi(q), then z += psi(k), S += psi(k) v^T. grid (H), KA_NT threads; shared
// q, k [dk], v [dv].
__global__ void __launch_bounds__(KA_NT)
    kata_step_exact(kfeat f, int dv, int D, const int *idx, const float *q, const float *k,
                    const float *v, float *S, float *z, float *o, float *den) {
    extern __shared__ float sm[];
    __shared__ float nrm[2];
    const int h = blockIdx.x, tid = threadIdx.x, dk = f.d;
    float *sq = sm, *sk = sq + dk, *sv = sk + dk;
    for (int d = tid; d < dk; d += KA_NT)
        sq[d] = q[(size_t)h * dk + d], sk[d] = k[(size_t)h * dk + d];
    for (int j = tid; j < dv; j += KA_NT) sv[j] = v[(size_t)h * dv + j];
    __syncthreads();
    if (tid < 2) {
        const float *x = tid ? sk : sq;
        float nn = 0.0f;
        for (int d = 0; d + 1 < dk; d++) nn = __fadd_rn(nn, __fmul_rn(x[d], x[d]));
        nrm[tid] = sqrtf(nn);
    }
    __syncthreads();
    float *Sh = S + (size_t)h * D * dv, *zh = z + (size_t)h * D;
    for (int j = tid; j <= dv; j += KA_NT) {
        float acc = 0.0f;
        if (j < dv) {
            for (int r = 0; r < D; r++)
                acc = __fadd_rn(
                    acc, __fmul_rn(kata_psi_exact(f, sq, nrm[0], idx[r]), Sh[(size_t)r * dv + j]));
            o[(size_t)h * dv + j] = acc;
        } else {
            for (int r = 0; r < D; r++) {
                acc = __fadd_rn(acc, __fmul_rn(kata_psi_exact(f, sq, nrm[0], idx[r]), zh[r]));
                zh[r] = __fadd_rn(zh[r], kata_psi_exact(f, sk, nrm[1], idx[r]));
            }
            den[h] = acc;
        }
    }
    __syncthreads(); // every read of the old S is done
    for (size_t x = tid; x < (size_t)D * dv; x += KA_NT) {
        const int r = (int)(x / dv), j = (int)(x % dv);
        Sh[x] = __fadd_rn(Sh[x], __fmul_rn(kata_psi_exact(f, sk, nrm[1], idx[r]), sv[j]));
    }
}

// ---------------------------------------------------------------- one step with probes

// After kata_step_exact of one token (batch 1): o [H, dv] holds S_{t-1}^T psi(q),
// den [H] holds z_{t-1}.psi(q), S and z are S_t and z_t. grid (H), KA_NT threads: finishes o and
// writes every probe of mixers/kata.c in its layout: g [H], o_hat [H, dv], den, kappa, o_norm,
// state_norm, z_norm, psi_k_norm, beta (NaN), e_norm, e_after (NaN), [H] each.
__global__ void __launch_bounds__(KA_NT)
    kata_probe_kernel(kfeat f, int H, int dv, int D, float eps, const int *idx, const float *q,
                      const float *k, const float *v, const float *S, const float *z, float *o,
                      const float *den, float *probes) {
    const int h = blockIdx.x, tid = threadIdx.x, dk = f.d;
    const float *qh = q + (size_t)h * dk, *kh = k + (size_t)h * dk, *vh = v + (size_t)h * dv;
    const float kqk = kata_kappa(f, qh, kh), dprev = den[h], dn = fmaxf(dprev + kqk, eps);
    float *ohat = probes + H + (size_t)h * dv, *oh = o + (size_t)h * dv;
    for (int j = tid; j < dv; j += KA_NT) {
        const float rq = oh[j];
        oh[j] = (rq + kqk * vh[j]) / dn;
        ohat[j] = rq / fmaxf(dprev, eps);
    }
    __syncthreads();
    // The norms: the step above matches the CPU's state bit for bit; their sums of squares (a
    // million entries for the state) are reduced over the block in double, not walked by one
    // thread in the CPU's float order (the raw lane spent 44 ms a token with that walk); they agree
    // with mixers/kata.c, which sums them in double too.
    __shared__ double dsh[KA_NT / 32];
    const float *Sh = S + (size_t)h * D * dv, *zh = z + (size_t)h * D;
    double s2 = 0.0, z2 = 0.0, pk2 = 0.0, o2 = 0.0, e2 = 0.0;
    for (size_t x = tid; x < (size_t)D * dv; x += KA_NT) s2 += (double)Sh[x] * Sh[x];
    float nn = 0.0f;
    for (int d = 0; d + 1 < dk; d++) nn = __fadd_rn(nn, __fmul_rn(kh[d], kh[d]));
    const float kn = sqrtf(nn);
    for (int r = tid; r < D; r += KA_NT) {
        const float pk = kata_psi_exact(f, kh, kn, idx[r]);
        z2 += (double)zh[r] * zh[r], pk2 += (double)pk * pk;
    }
    for (int j = tid; j < dv; j += KA_NT) {
        const float ee = __fsub_rn(vh[j], ohat[j]);
        e2 += (double)ee * ee, o2 += (double)oh[j] * oh[j];
    }
    s2 = block_sum(s2, dsh), z2 = block_sum(z2, dsh), pk2 = block_sum(pk2, dsh);
    o2 = block_sum(o2, dsh), e2 = block_sum(e2, dsh);
    if (tid != 0) return;
    float *P = probes + h, *Q = probes + H + (size_t)H * dv + h; // after g and o_hat
    P[0] = kqk / dn;                                             // g
    Q[0 * H] = dprev;                                            // den
    Q[1 * H] = kqk;                                              // kappa
    Q[2 * H] = (float)sqrt(o2);                                  // o_norm
    Q[3 * H] = (float)sqrt(s2);                                  // state_norm
    Q[4 * H] = (float)sqrt(z2);                                  // z_norm
    Q[5 * H] = (float)sqrt(pk2);                                 // psi_k_norm
    Q[6 * H] = NAN;                                              // beta (delta only)
    Q[7 * H] = (float)sqrt(e2);                                  // e_norm
    Q[8 * H] = NAN;                                              // e_after (delta only)
}

// ---------------------------------------------------------------- DeltaKATA, one step

// The delta rule in feature space (mixers/kata.c, variant delta), one token for H heads in three
// launches; psi is generated row by row from the feature codes, never stored:
//   kdelta_read    grid (feature slices, H): rk = S^T psi(k), rq = S^T psi(q) over the slice's
//                  rows, den = z.psi(q), then z += psi(k) (and |psi(k)|^2, |z|^2)
//   kdelta_write   grid (feature slices, H): e = v - rk, S += beta psi(k) e^T (and |S_t|^2,
//                  S_t^T psi(k) for e_after)
//   kdelta_finish  grid (H): o = rq + beta kappa(q, k) e, the probes, and the sums zeroed for the
//                  next token.
// Per head the sums live in acc [3 dv + 4]: rk, rq, after [dv], then den, |psi(k)|^2, |z|^2,
// |S|^2; the slices add into them with atomics (fp32, so the last bits vary from run to run).
#define KD_NACC(dv) (3 * (dv) + 4)

// LIN: the linear (normalised) variants' step instead (S += psi(k) v^T, no erase; kata_lin_step):
// psi and the write in the CPU's rounding (kata_psi_exact, no fused multiply-add), so the state
// stays the CPU's bit for bit, and no S^T psi(k) is summed.
template <bool WRITE, bool LIN>
__global__ void __launch_bounds__(KA_NT)
    kdelta_rows(kfeat f, int dv, int D, int FR, const int *idx, const float *q, const float *k,
                const float *v, const float *beta, float *S, float *z, float *acc) {
    extern __shared__ float sm[];
    __shared__ float nrm[2];
    const int h = blockIdx.y, tid = threadIdx.x, dk = f.d;
    const int r0 = blockIdx.x * FR, r1 = min(D, r0 + FR);
    const int rg = KA_NT / dv, j = tid % dv, g = tid / dv;        // row group g, column j
    float *sq = sm, *sk = sq + dk, *se = sk + dk, *red = se + dv; // red [2 rg dv + 3 rg]
    for (int d = tid; d < dk; d += KA_NT)
        sq[d] = q[(size_t)h * dk + d], sk[d] = k[(size_t)h * dk + d];
    float *A = acc + (size_t)h * KD_NACC(dv);
    if (WRITE)
        for (int x = tid; x < dv; x += KA_NT)
            se[x] = LIN ? v[(size_t)h * dv + x] : v[(size_t)h * dv + x] - A[x];
    __syncthreads();
    if (LIN && f.kind == KATA_FEAT_LORENTZ && tid < 2) { // |x_(0 .. d-2)| as kata_step_exact
        const float *x = tid ? sk : sq;
        float nn = 0.0f;
        for (int d = 0; d + 1 < dk; d++) nn = __fadd_rn(nn, __fmul_rn(x[d], x[d]));
        nrm[tid] = sqrtf(nn);
    }
    if (LIN) __syncthreads();
    const float nq = LIN && f.kind == KATA_FEAT_LORENTZ ? nrm[0] : 0.0f;
    const float nk = LIN && f.kind == KATA_FEAT_LORENTZ ? nrm[1] : 0.0f;
    const float b = beta ? beta[h] : 1.0f;
    float *Sh = S + (size_t)h * D * dv, *zh = z + (size_t)h * D;
    float a0 = 0.0f, a1 = 0.0f, s0 = 0.0f, s1 = 0.0f, s2 = 0.0f; // per thread over its rows
    if (g < rg)
        for (int r = r0 + g; r < r1; r += rg) {
            const int code = idx[r];
            const float pk = LIN ? kata_psi_exact(f, sk, nk, code) : kata_psi(f, sk, 0.0f, code);
            float *cell = Sh + (size_t)r * dv + j;
            if (!WRITE) {
                const float pq =
                    LIN ? kata_psi_exact(f, sq, nq, code) : kata_psi(f, sq, 0.0f, code);
                const float sv = *cell;
                if (!LIN) a0 += pk * sv;
                a1 += pq * sv;
                if (j == 0) {
                    const float zo = zh[r], zn = __fadd_rn(zo, pk);
                    s0 += pq * zo, s1 += pk * pk, s2 += zn * zn;
                    zh[r] = zn;
                }
            } else if (LIN) {
                const float sn = __fadd_rn(*cell, __fmul_rn(pk, se[j]));
                *cell = sn;
                s0 += sn * sn;
            } else {
                const float sn = *cell + b * pk * se[j];
                *cell = sn;
                a0 += pk * sn, s0 += sn * sn;
            }
        }
    // over the row groups: red [2][rg][dv] the column sums (read: rk, rq; write: S_t^T psi(k),
    // |S_t|^2 by column), r2 [3][rg] the read's scalars
    float *r2 = red + 2 * rg * dv;
    if (g < rg) red[g * dv + j] = a0, red[(rg + g) * dv + j] = WRITE ? s0 : a1;
    if (!WRITE && j == 0 && g < rg) r2[g] = s0, r2[rg + g] = s1, r2[2 * rg + g] = s2;
    __syncthreads();
    float c1 = 0.0f;
    if (g == 0) {
        float c0 = 0.0f;
        for (int y = 0; y < rg; y++) c0 += red[y * dv + j], c1 += red[(rg + y) * dv + j];
        if (!LIN) atomicAdd(A + (WRITE ? 2 * dv : 0) + j, c0); // rk, or S_t^T psi(k)
        if (!WRITE) atomicAdd(A + dv + j, c1);                 // rq
    }
    if (!WRITE) {
        if (tid == 0) {
            float d0 = 0.0f, d1 = 0.0f, d2 = 0.0f;
            for (int y = 0; y < rg; y++) d0 += r2[y], d1 += r2[rg + y], d2 += r2[2 * rg + y];
            atomicAdd(A + 3 * dv, d0);     // den = z_{t-1}.psi(q)
            atomicAdd(A + 3 * dv + 1, d1); // |psi(k)|^2
            atomicAdd(A + 3 * dv + 2, d2); // |z_t|^2
        }
        return;
    }
    __syncthreads(); // red is read above; its first row takes the columns' |S_t|^2
    if (g == 0) red[j] = c1;
    __syncthreads();
    if (tid == 0) {
        float t = 0.0f;
        for (int x = 0; x < dv; x++) t += red[x];
        atomicAdd(A + 3 * dv + 3, t); // |S_t|^2
    }
}

// grid (H), block KA_NT. probes: NULL or the mixer's layout (kata_probe_kernel's).
__global__ void __launch_bounds__(KA_NT)
    kdelta_finish(kfeat f, int H, int dv, const float *q, const float *k, const float *v,
                  const float *beta, float *acc, float *o, float *probes) {
    __shared__ float sh[KA_NT / 32];
    const int h = blockIdx.x, tid = threadIdx.x, dk = f.d;
    float *A = acc + (size_t)h * KD_NACC(dv);
    const float b = beta ? beta[h] : 1.0f;
    const float kqk = kata_kappa(f, q + (size_t)h * dk, k + (size_t)h * dk), g = b * kqk;
    float o2 = 0.0f, e2 = 0.0f, ea2 = 0.0f;
    for (int j = tid; j < dv; j += KA_NT) {
        const float vj = v[(size_t)h * dv + j], e = vj - A[j], rq = A[dv + j];
        const float oj = rq + g * e, ea = vj - A[2 * dv + j];
        o[(size_t)h * dv + j] = oj;
        o2 += oj * oj, e2 += e * e, ea2 += ea * ea;
        if (probes) probes[H + (size_t)h * dv + j] = rq; // o_hat
    }
    o2 = block_sum(o2, sh), e2 = block_sum(e2, sh), ea2 = block_sum(ea2, sh);
    if (probes && tid == 0) {
        float *Q = probes + H + (size_t)H * dv + h;
        probes[h] = g;                   // g
        Q[0 * H] = A[3 * dv];            // den
        Q[1 * H] = kqk;                  // kappa
        Q[2 * H] = (float)sqrt(o2);      // o_norm
        Q[3 * H] = sqrtf(A[3 * dv + 3]); // state_norm
        Q[4 * H] = sqrtf(A[3 * dv + 2]); // z_norm
        Q[5 * H] = sqrtf(A[3 * dv + 1]); // psi_k_norm
        Q[6 * H] = b;                    // beta
        Q[7 * H] = sqrtf(e2);            // e_norm
        Q[8 * H] = sqrtf(ea2);           // e_after
    }
    __syncthreads(); // every thread has read A
    for (int x = tid; x < KD_NACC(dv); x += KA_NT) A[x] = 0.0f;
}

// The linear variants' finish (kata_lin_step), grid (H), block KA_NT: with rq = S_{t-1}^T psi(q)
// and den = z_{t-1}.psi(q) from the read, o = (rq + kappa v) / max(den + kappa, eps), o_hat =
// rq / max(den, eps), every probe of kata_probe_kernel (its layout and definitions), and the sums
// zeroed for the next token.
__global__ void __launch_bounds__(KA_NT)
    klin_finish(kfeat f, int H, int dv, float eps, const float *q, const float *k, const float *v,
                float *acc, float *o, float *probes) {
    __shared__ double dsh[KA_NT / 32];
    const int h = blockIdx.x, tid = threadIdx.x, dk = f.d;
    float *A = acc + (size_t)h * KD_NACC(dv);
    const float kqk = kata_kappa(f, q + (size_t)h * dk, k + (size_t)h * dk), dprev = A[3 * dv];
    const float dn = fmaxf(dprev + kqk, eps);
    double o2 = 0.0, e2 = 0.0;
    for (int j = tid; j < dv; j += KA_NT) {
        const float vj = v[(size_t)h * dv + j], rq = A[dv + j];
        const float oj = (rq + kqk * vj) / dn, oh = rq / fmaxf(dprev, eps), ee = __fsub_rn(vj, oh);
        o[(size_t)h * dv + j] = oj;
        if (probes) probes[H + (size_t)h * dv + j] = oh; // o_hat
        o2 += (double)oj * oj, e2 += (double)ee * ee;
    }
    if (probes) o2 = block_sum(o2, dsh), e2 = block_sum(e2, dsh);
    if (probes && tid == 0) {
        float *P = probes + h, *Q = probes + H + (size_t)H * dv + h; // after g and o_hat
        P[0] = kqk / dn;                                             // g
        Q[0 * H] = dprev;                                            // den
        Q[1 * H] = kqk;                                              // kappa
        Q[2 * H] = (float)sqrt(o2);                                  // o_norm
        Q[3 * H] = sqrtf(A[3 * dv + 3]);                             // state_norm
        Q[4 * H] = sqrtf(A[3 * dv + 2]);                             // z_norm
        Q[5 * H] = sqrtf(A[3 * dv + 1]);                             // psi_k_norm
        Q[6 * H] = NAN;                                              // beta (delta only)
        Q[7 * H] = (float)sqrt(e2);                                  // e_norm
        Q[8 * H] = NAN;                                              // e_after (delta only)
    }
    __syncthreads(); // every thread has read A
    for (int x = tid; x < KD_NACC(dv); x += KA_NT) A[x] = 0.0f;
}

static int kdelta_slices(int H, int D, int *FR) {
    int nfs = (264 + H - 1) / H;
    if (nfs > D) nfs = D;
    *FR = (D + nfs - 1) / nfs;
    return (D + *FR - 1) / *FR;
}

// The read and write passes of a sliced step (kdelta_rows) over state [S | z] of H heads.
template <bool LIN>
static int kslice_rows(const kfeat &f, int H, int dv, int D, const int *idx, const float *q,
                       const float *k, const float *v, const float *beta, float *state, float *acc,
                       cudaStream_t st, err *e) {
    int FR;
    const int nfs = kdelta_slices(H, D, &FR), rg = KA_NT / dv, dk = f.d;
    const size_t smem = (2 * (size_t)dk + dv + 2 * (size_t)rg * dv + 3 * (size_t)rg) * 4;
    float *S = state, *z = state + (size_t)H * D * dv;
    kdelta_rows<false, LIN>
        <<<dim3(nfs, H), KA_NT, smem, st>>>(f, dv, D, FR, idx, q, k, v, beta, S, z, acc);
    CUDA_LAUNCHED("gpu kata: sliced read");
    kdelta_rows<true, LIN>
        <<<dim3(nfs, H), KA_NT, smem, st>>>(f, dv, D, FR, idx, q, k, v, beta, S, z, acc);
    CUDA_LAUNCHED("gpu kata: sliced write");
    return 0;
}

extern "C" size_t gpu_kata_delta_scratch_bytes(int H, int dk, int dv, int groups) {
    const kfeat f = kfeat_of(KATA_DELTA, dk, groups, 1.0f);
    return ((kfeat_dim(f) * sizeof(int) + 255) / 256 * 256) +
           (size_t)H * KD_NACC(dv) * sizeof(float);
}

extern "C" int gpu_kata_delta_prepare(int H, int dk, int dv, int groups, void *scratch,
                                      void *stream, err *e) {
    if (groups < 1 || dk % groups || dk > 1023)
        return err_set(e, "gpu kata delta: %d groups of dk=%d", groups, dk);
    if (dv > KA_NT / 2) return err_set(e, "gpu kata delta: dv=%d above %d", dv, KA_NT / 2);
    cudaStream_t st = (cudaStream_t)stream;
    const kfeat f = kfeat_of(KATA_DELTA, dk, groups, 1.0f);
    const int D = (int)kfeat_dim(f);
    const size_t io = ((size_t)D * sizeof(int) + 255) / 256 * 256;
    kata_index_kernel<<<(D + 255) / 256, 256, 0, st>>>(f, D, (int *)scratch);
    CUDA_LAUNCHED("gpu kata delta: feature index");
    CUDA_TRY(cudaMemsetAsync((char *)scratch + io, 0, (size_t)H * KD_NACC(dv) * sizeof(float), st),
             "gpu kata delta");
    return 0;
}

extern "C" int gpu_kata_delta_step(int H, int dk, int dv, int groups, float scale, const float *q,
                                   const float *k, const float *v, const float *beta, float *state,
                                   float *o, float *probes, void *scratch, void *stream, err *e) {
    cudaStream_t st = (cudaStream_t)stream;
    const kfeat f = kfeat_of(KATA_DELTA, dk, groups, scale);
    const int D = (int)kfeat_dim(f);
    const int *idx = (const int *)scratch;
    float *acc = (float *)((char *)scratch + ((size_t)D * sizeof(int) + 255) / 256 * 256);
    if (kslice_rows<false>(f, H, dv, D, idx, q, k, v, beta, state, acc, st, e)) return -1;
    kdelta_finish<<<H, KA_NT, 0, st>>>(f, H, dv, q, k, v, beta, acc, o, probes);
    CUDA_LAUNCHED("gpu kata delta: finish");
    return 0;
}

// ---------------------------------------------------------------- host side

// [idx (D codes) | den [B T H] | the sliced step's sums [H][KD_NACC(dv)] (gpu_kata_step_probes) |
// the tensor-core path's chunk prefixes (kata_tc_scratch_bytes)]
static size_t kata_scratch_fp32(int B, int T, int H, int dk, int dv, int variant, int groups) {
    const kfeat f = kfeat_of(variant, dk, groups, 1.0f);
    return kfeat_dim(f) * sizeof(int) + 256 + (size_t)B * T * H * sizeof(float) +
           (size_t)H * KD_NACC(dv) * sizeof(float);
}

// den [B T H] in the scratch: after the D feature codes, at the next 256-byte boundary.
static float *kata_scratch_den(void *scratch, size_t D) {
    return (float *)((char *)scratch + (D * sizeof(int) + 255) / 256 * 256);
}

extern "C" size_t gpu_kata_scratch_bytes(int B, int T, int H, int dk, int dv, int variant,
                                         int groups, int bf16) {
    const size_t base = kata_scratch_fp32(B, T, H, dk, dv, variant, groups);
    const size_t tc = bf16 ? kata_tc_scratch_bytes(B, T, H, dk, dv, variant, groups) : 0;
    return tc ? (base + 255) / 256 * 256 + tc : base;
}

static int kata_check(int variant, int dk, int groups, err *e) {
    if (variant == KATA_DELTA) return err_set(e, "gpu kata: variant delta has no GPU kernels");
    if (variant < 0 || variant >= KATA_NVARIANTS)
        return err_set(e, "gpu kata: unknown variant %d", variant);
    if ((variant == KATA_MG || variant == KATA_SIGMA) && (groups < 1 || dk % groups))
        return err_set(e, "gpu kata: %d groups do not divide dk=%d", groups, dk);
    if (dk > 1023) return err_set(e, "gpu kata: dk=%d above 1023", dk);
    return 0;
}

static size_t kata_state_smem(int FR, int dk, int C) {
    return ((size_t)FR * KA_VS + FR + 2 * (size_t)C * (dk + 1) + 2 * (size_t)C + (size_t)C * KA_VS +
            (size_t)KA_KT * (C + 4) + KA_NT * 16 + 128 + FR) *
           sizeof(float);
}

// The state pass: reads into o (zeroed here) and den (zeroed here); update = 0 leaves S, z alone.
template <typename T>
static int kata_launch_state(const kfeat &f, int B, int T_, int H, int dv, int C, int update,
                             const int *idx, const void *q, const void *k, const void *v,
                             float *state, float *o, float *den, cudaStream_t st, err *e) {
    const int N = B * H, D = (int)kfeat_dim(f), ncs = (dv + KA_VS - 1) / KA_VS;
    // feature slices: small enough for two blocks per multiprocessor and enough blocks to fill
    // the GPU, but as few as possible (each slice adds its share of every output by an atomic)
    // (MIXSCOPE_KATA_SMEM_KB, a benchmark knob: another cap than 100 KB a block)
    const char *cap_env = getenv("MIXSCOPE_KATA_SMEM_KB");
    const size_t cap = (cap_env && atoi(cap_env) > 0 ? (size_t)atoi(cap_env) : 100) * 1024;
    int nfs = 1, FR = (D + KA_KT - 1) / KA_KT * KA_KT;
    while (FR > KA_KT && (kata_state_smem(FR, f.d, C) > cap || (size_t)nfs * ncs * N < 264)) {
        nfs++;
        FR = ((D + nfs - 1) / nfs + KA_KT - 1) / KA_KT * KA_KT;
    }
    nfs = (D + FR - 1) / FR;
    const size_t smem = kata_state_smem(FR, f.d, C);
    if (smem > 227 * 1024)
        return err_set(e, "gpu kata: dk=%d with chunk %d needs too much shared memory", f.d, C);
    CUDA_TRY(cudaMemsetAsync(o, 0, (size_t)B * T_ * H * dv * sizeof(float), st), "gpu kata");
    CUDA_TRY(cudaMemsetAsync(den, 0, (size_t)B * T_ * H * sizeof(float), st), "gpu kata");
    if (!state) return 0;
    // the chunk a template argument: the tiles' index arithmetic by shifts
    void (*kern)(kfeat, int, int, int, int, int, int, const int *, const T *, const T *, const T *,
                 float *, float *, float *, float *) = C == 16   ? kata_state_kernel<T, 16>
                                                       : C == 32 ? kata_state_kernel<T, 32>
                                                                 : kata_state_kernel<T, 64>;
    CUDA_TRY(cudaFuncSetAttribute(kern, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)smem),
             "gpu kata: shared memory (state pass)");
    kern<<<dim3(nfs, ncs, N), KA_NT, smem, st>>>(f, T_, H, dv, D, FR, update, idx, (const T *)q,
                                                 (const T *)k, (const T *)v, state,
                                                 state + (size_t)N * D * dv, o, den);
    CUDA_LAUNCHED("gpu kata: state pass");
    return 0;
}

template <typename T>
static int kata_launch_attend(const kfeat &f, int B, int T_, int H, int dv, int local, float eps,
                              const void *q, const void *k, const void *v, float *o,
                              const float *den, cudaStream_t st, err *e) {
    const size_t smem =
        ((size_t)KA_BQ * (f.d + 1) + (size_t)KA_BK * (f.d + 1) + (size_t)KA_BK * dv +
         (size_t)KA_BQ * (KA_BK + 1) + (size_t)KA_BQ * dv + KA_BQ) *
        sizeof(float);
    if (smem > 227 * 1024) return err_set(e, "gpu kata: dk=%d dv=%d too wide", f.d, dv);
    CUDA_TRY(cudaFuncSetAttribute(kata_attend_kernel<T>,
                                  cudaFuncAttributeMaxDynamicSharedMemorySize, (int)smem),
             "gpu kata: shared memory (attend)");
    kata_attend_kernel<T><<<dim3((T_ + KA_BQ - 1) / KA_BQ, B * H), KA_NT, smem, st>>>(
        f, T_, H, dv, local, eps, (const T *)q, (const T *)k, (const T *)v, o, den);
    CUDA_LAUNCHED("gpu kata: attend");
    return 0;
}

template <typename T>
static int kata_run(int flash, int B, int T_, int H, int dk, int dv, int variant, int groups,
                    int chunk, float scale, float eps, const void *q, const void *k, const void *v,
                    float *state, float *o, void *scratch, cudaStream_t st, err *e) {
    const kfeat f = kfeat_of(variant, dk, groups, scale);
    const int D = (int)kfeat_dim(f);
    int *idx = (int *)scratch;
    float *den = kata_scratch_den(scratch, (size_t)D);
    kata_index_kernel<<<(D + 255) / 256, 256, 0, st>>>(f, D, idx);
    CUDA_LAUNCHED("gpu kata: feature index");
    // MIXSCOPE_KATA_PROFILE (a benchmark knob): the two passes timed by events
    static const int profile = getenv("MIXSCOPE_KATA_PROFILE") != NULL;
    gpu_pass_timer<2> timer(profile, st);
    timer.mark(0);
    if (kata_launch_state<T>(f, B, T_, H, dv, chunk, !flash, idx, q, k, v, state, o, den, st, e))
        return -1;
    timer.mark(1);
    if (kata_launch_attend<T>(f, B, T_, H, dv, flash ? 0 : chunk, eps, q, k, v, o, den, st, e))
        return -1;
    if (profile) {
        float ms[2] = {0, 0};
        timer.mark(2);
        timer.add(ms);
        fprintf(stderr, "kata T=%d chunk %d: state pass %.3f ms, attend %.3f ms\n", T_, chunk,
                ms[0], ms[1]);
    }
    return 0;
}

extern "C" int gpu_kata_chunked(int B, int T, int H, int dk, int dv, int variant, int groups,
                                int chunk, float scale, float eps, int bf16, const void *q,
                                const void *k, const void *v, float *state, float *o, void *scratch,
                                void *stream, err *e) {
    if (kata_check(variant, dk, groups, e)) return -1;
    if (chunk != 16 && chunk != 32 && chunk != 64)
        return err_set(e, "gpu kata: chunk %d (16, 32 or 64)", chunk);
    if (T < 1) return 0;
    cudaStream_t st = (cudaStream_t)stream;
    if (bf16 && kata_tc_supported(T, dk, dv, variant, groups, scale)) {
        const size_t D = kfeat_dim(kfeat_of(variant, dk, groups, scale));
        void *sc = (char *)scratch +
                   (kata_scratch_fp32(B, T, H, dk, dv, variant, groups) + 255) / 256 * 256;
        return kata_tc_chunked(B, T, H, dk, dv, variant, groups, scale, eps, q, k, v, state, o,
                               kata_scratch_den(scratch, D), sc, stream, e);
    }
    return bf16 ? kata_run<__nv_bfloat16>(0, B, T, H, dk, dv, variant, groups, chunk, scale, eps, q,
                                          k, v, state, o, scratch, st, e)
                : kata_run<float>(0, B, T, H, dk, dv, variant, groups, chunk, scale, eps, q, k, v,
                                  state, o, scratch, st, e);
}

extern "C" int gpu_kata_flash(int B, int T, int H, int dk, int dv, int variant, int groups,
                              float scale, float eps, int bf16, const void *q, const void *k,
                              const void *v, const float *state0, float *o, void *scratch,
                              void *stream, err *e) {
    if (kata_check(variant, dk, groups, e)) return -1;
    if (T < 1) return 0;
    cudaStream_t st = (cudaStream_t)stream;
    float *s0 = (float *)state0; // read only: the state pass runs with update = 0
    return bf16 ? kata_run<__nv_bfloat16>(1, B, T, H, dk, dv, variant, groups, 64, scale, eps, q, k,
                                          v, s0, o, scratch, st, e)
                : kata_run<float>(1, B, T, H, dk, dv, variant, groups, 64, scale, eps, q, k, v, s0,
                                  o, scratch, st, e);
}

// One fp32 decode step for H heads (batch 1) with every probe (probes: the mixer's layout, see
// kata_probe_kernel; NULL: none). scratch: gpu_kata_scratch_bytes(1, 1, ...). Without probes and
// dv > KA_NT / 2 it is a one-token gpu_kata_chunked call. For dv <= KA_NT / 2 the step
// is sliced over the feature rows as DeltaKATA's (kdelta_rows<., true>: a read of rq, den and z,
// a write of S, klin_finish; about 264 blocks instead of one a head): the state is the CPU's bit
// for bit, o and the probes sum in another order (float atomics over the slices). Wider values:
// kata_step_exact and kata_probe_kernel, a block a head in the CPU's order.
extern "C" int gpu_kata_step_probes(int H, int dk, int dv, int variant, int groups, float scale,
                                    float eps, const float *q, const float *k, const float *v,
                                    float *state, float *o, float *probes, void *scratch,
                                    void *stream, err *e) {
    if (kata_check(variant, dk, groups, e)) return -1;
    if (!probes && dv > KA_NT / 2) // wider values without probes: a one-token chunked call
        return gpu_kata_chunked(1, 1, H, dk, dv, variant, groups, 16, scale, eps, 0, q, k, v, state,
                                o, scratch, stream, e);
    cudaStream_t st = (cudaStream_t)stream;
    const kfeat f = kfeat_of(variant, dk, groups, scale);
    const int D = (int)kfeat_dim(f);
    int *idx = (int *)scratch;
    float *den = kata_scratch_den(scratch, (size_t)D);
    kata_index_kernel<<<(D + 255) / 256, 256, 0, st>>>(f, D, idx);
    CUDA_LAUNCHED("gpu kata: feature index");
    if (dv <= KA_NT / 2) {
        float *acc = den + H; // gpu_kata_scratch_bytes: after den [1 x 1 x H]
        CUDA_TRY(cudaMemsetAsync(acc, 0, (size_t)H * KD_NACC(dv) * sizeof(float), st),
                 "gpu kata: step");
        if (kslice_rows<true>(f, H, dv, D, idx, q, k, v, NULL, state, acc, st, e)) return -1;
        klin_finish<<<H, KA_NT, 0, st>>>(f, H, dv, eps, q, k, v, acc, o, probes);
        CUDA_LAUNCHED("gpu kata: finish");
        return 0;
    }
    kata_step_exact<<<H, KA_NT, (2 * (size_t)dk + dv) * sizeof(float), st>>>(
        f, dv, D, idx, q, k, v, state, state + (size_t)H * D * dv, o, den);
    CUDA_LAUNCHED("gpu kata: exact step");
    kata_probe_kernel<<<H, KA_NT, 0, st>>>(f, H, dv, D, eps, idx, q, k, v, state,
                                           state + (size_t)H * D * dv, o, den, probes);
    CUDA_LAUNCHED("gpu kata: probes");
    return 0;
}
