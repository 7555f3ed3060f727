// kata_delta.cu: DeltaKATA's chunked form on the GPU (spec kata-parallax.md §A.9), the twin of
// mixers/kata.c's kata_forward_chunked for variant delta (delta_block, then write_state). Per chunk
// of C tokens and head, with the carried state S [D, dv] and z [D]:
//   kdc_read   R = Psi_K S, P = Psi_Q S: the old state under the chunk's keys and queries
//   kdc_solve  U = (I + diag(beta) tril(A_kk, -1))^{-1} diag(beta) (V - R) by forward substitution,
//              O = P + tril(A_qk) U, with A_kk[t][s] = kappa(k_t, k_s), A_qk[t][s] = kappa(q_t,
//              k_s) from group dot products (psi never formed)
//   kdc_write  S += Psi_K^T U, z += Psi_K^T 1
// The read and the write are sliced over the D = g E (E + 1) / 2 feature rows and KDC_VS value
// columns (each with its own slices: the write adds no atomics), psi tiles generated in shared
// memory from the feature codes; the read's slices add into R and P with atomics (fp32, so their
// last bits vary from run to run). The solve runs a block for each head and KDC_SC value columns:
// the Gram matrices, then each column of U one thread's walk down the rows (four partial sums
// over the earlier rows: not the CPU's order to the bit). Three launches a chunk instead of three
// a token (gpu_kata_delta_step); the arithmetic is fp32 whatever the inputs. Layout (batch
// 1): q, k [T, H, dk], v [T, H, dv] (fp32 or bf16); beta [T, H] fp32 (NULL: 1); state S [H, D, dv]
// then z [H, D] fp32; o [T, H, dv] fp32.
#include <cuda_bf16.h>
#include <cuda_runtime.h>
#include <stdio.h>
#include <stdlib.h>

#include "gpu.h"
#include "gpu_common.cuh"
#include "kata_feat.cuh"

#define KDC_NT 256 // threads of every block here
#define KDC_VS 32  // value columns of a read or write block
#define KDC_KT 64  // feature rows of a psi tile in the read
#define KDC_WT 128 // in the write: 32 row groups of 4 (KDC_NT / (KDC_VS / 4))
#define KDC_SC 32  // value columns of a solve block

// The read's thread tiles (4 tokens x 4 columns) over a chunk of C tokens, and the G groups of
// threads that split a psi tile's rows (the kernel's layout and the host's shared-memory size).
__host__ __device__ constexpr int kdc_read_tiles(int C) {
    return (C / 4) * (KDC_VS / 4);
}
__host__ __device__ constexpr int kdc_read_groups(int C) {
    return KDC_NT / kdc_read_tiles(C);
}

// grid (nfs, 2 ncs, H). Block (fs, 2 cs + w, h) reads rows [fs FR, fs FR + FR) and columns
// [cs KDC_VS, +KDC_VS) of head h's S under the chunk's queries (w = 0: into P) or keys (w = 1: into
// R). q, k point at the chunk's first token; tokens at or past L count as zero. RP [H][2 C][dv]:
// P rows then R rows. Shared: X [C][dk+1] (the chunk's q or k), an S tile [KDC_KT][KDC_VS], a psi
// tile [KDC_KT][C+4], the groups' partial sums [G][C][KDC_VS], the tile's feature codes [KDC_KT].
template <typename T, int C>
__global__ void __launch_bounds__(KDC_NT)
    kdc_read(kfeat f, int H, int dv, int D, int FR, int L, const int *idx, const T *q, const T *k,
             const float *S, float *RP) {
    extern __shared__ __align__(16) float sm[];
    const int dk = f.d, ldx = dk + 1, ldp = C + 4;
    float *sX = sm, *sS = sX + C * ldx, *sP = sS + KDC_KT * KDC_VS, *sRed = sP + KDC_KT * ldp;
    constexpr int ntile = kdc_read_tiles(C), G = kdc_read_groups(C);
    int *sI = reinterpret_cast<int *>(sRed + G * C * KDC_VS);
    const int fs = blockIdx.x, cs = blockIdx.y >> 1, w = blockIdx.y & 1, h = blockIdx.z;
    const int tid = threadIdx.x, r0 = fs * FR, r1 = min(D, r0 + FR);
    const int j0 = cs * KDC_VS, jw = min(KDC_VS, dv - j0);
    const T *x = (w ? k : q) + (size_t)h * dk;
    const size_t tok = (size_t)H * dk;
    const float *Sh = S + (size_t)h * D * dv;
    for (int i = tid; i < C * dk; i += KDC_NT) {
        const int t = i / dk, d = i % dk;
        sX[t * ldx + d] = t < L ? ld(x + (size_t)t * tok + d) : 0.0f;
    }
    // thread tile: tokens 4 tt .. 4 tt + 3, columns 4 cg .. 4 cg + 3; G groups of threads split a
    // psi tile's rows and meet in shared memory
    const int grp = tid / ntile;
    const int tt = (tid % ntile) / (KDC_VS / 4), cg = tid % (KDC_VS / 4);
    // the next tile's S values and feature codes are loaded into registers while this tile is
    // generated and multiplied (global latency off the critical path)
    constexpr int NS = KDC_KT * KDC_VS / KDC_NT;
    float pre[NS];
    int pcode = 0;
    auto fetch = [&](int kt) {
#pragma unroll
        for (int n = 0; n < NS; n++) {
            const int i = tid + n * KDC_NT, fr = i / KDC_VS, j = i % KDC_VS, r = kt + fr;
            pre[n] = r < r1 && j < jw ? Sh[(size_t)r * dv + j0 + j] : 0.0f;
        }
        if (tid < KDC_KT && kt + tid < r1) pcode = idx[kt + tid];
    };
    fetch(r0);
    float acc[4][4] = {};
    for (int kt = r0; kt < r1; kt += KDC_KT) {
        __syncthreads(); // sX is written; the previous tile is read
#pragma unroll
        for (int n = 0; n < NS; n++) sS[tid + n * KDC_NT] = pre[n];
        if (tid < KDC_KT) sI[tid] = pcode;
        __syncthreads();
        if (kt + KDC_KT < r1) fetch(kt + KDC_KT);
        for (int i = tid; i < KDC_KT * C; i += KDC_NT) {
            const int fr = i / C, t = i % C, r = kt + fr;
            sP[fr * ldp + t] = r < r1 && t < L ? kata_psi_concat(f, sX + t * ldx, sI[fr]) : 0.0f;
        }
        __syncthreads();
#pragma unroll 4
        for (int fr = grp; fr < KDC_KT; fr += G) {
            const float4 a4 = *reinterpret_cast<const float4 *>(sP + fr * ldp + 4 * tt);
            const float4 s4 = *reinterpret_cast<const float4 *>(sS + fr * KDC_VS + 4 * cg);
            kata_outer4(acc, a4, s4);
        }
    }
#pragma unroll
    for (int u = 0; u < 4; u++)
        *reinterpret_cast<float4 *>(sRed + (grp * C + 4 * tt + u) * KDC_VS + 4 * cg) =
            make_float4(acc[u][0], acc[u][1], acc[u][2], acc[u][3]);
    __syncthreads();
    float *out = RP + ((size_t)h * 2 * C + (size_t)w * C) * dv + j0;
    for (int i = tid; i < C * KDC_VS; i += KDC_NT) {
        const int t = i / KDC_VS, j = i % KDC_VS;
        if (t >= L || j >= jw) continue;
        float sum = 0.0f;
        for (int g = 0; g < G; g++) sum += sRed[(g * C + t) * KDC_VS + j];
        atomicAdd(out + (size_t)t * dv + j, sum);
    }
}

// grid (H, ceil(dv / KDC_SC)): block (h, y) takes columns [y KDC_SC, +KDC_SC). The chunk's L
// tokens from q, k, v, beta (pointing at its first token): U [H][C][dv] and o, with R and P from
// RP, which it leaves zeroed for the next chunk. Shared: Q, K [C][dk+1], A_kk, A_qk [C][C+1],
// beta [C], the block's columns of v - R (then U) and P [C][KDC_SC]. Every block computes the Gram
// matrices, in 4 x 4 tiles a thread (DeltaKATA's map is PSD concat: kappa(x, y) = sum over groups m
// of (s x_m . y_m)^2); then a column of U is one thread's walk over the rows (in registers: C is a
// template argument), and o's entries are spread over the block; the sums over earlier rows run
// in four partial sums.
template <typename T, int C>
__global__ void __launch_bounds__(KDC_NT)
    kdc_solve(kfeat f, int H, int dv, int L, const T *q, const T *k, const T *v, const float *beta,
              float *RP, float *Ug, float *o) {
    extern __shared__ __align__(16) float sm[];
    const int dk = f.d, ldx = dk + 1, h = blockIdx.x, tid = threadIdx.x;
    constexpr int lda = C + 1, NTL = C / 4; // 4 x 4 tiles: NTL x NTL of them
    float *sQ = sm, *sK = sQ + C * ldx, *Akk = sK + C * ldx, *Aqk = Akk + C * lda;
    float *sb = Aqk + C * lda, *sVR = sb + C, *sPo = sVR + C * KDC_SC; // v - R (then U), P
    const size_t tok = (size_t)H * dk, tokv = (size_t)H * dv;
    for (int i = tid; i < C * dk; i += KDC_NT) {
        const int t = i / dk, d = i % dk;
        const bool ok = t < L;
        sQ[t * ldx + d] = ok ? ld(q + (size_t)t * tok + (size_t)h * dk + d) : 0.0f;
        sK[t * ldx + d] = ok ? ld(k + (size_t)t * tok + (size_t)h * dk + d) : 0.0f;
    }
    for (int t = tid; t < C; t += KDC_NT)
        sb[t] = t < L ? (beta ? beta[(size_t)t * H + h] : 1.0f) : 0.0f;
    __syncthreads();
    if (tid < NTL * NTL) {
        const int t0 = 4 * (tid / NTL), s0 = 4 * (tid % NTL);
        float kk[4][4] = {}, qk[4][4] = {};
        for (int m = 0; m < f.M; m++) {
            float ak[4][4] = {}, aq[4][4] = {};
            for (int i = m * f.E; i < (m + 1) * f.E; i++) {
                float xk[4], xq[4], y[4];
#pragma unroll
                for (int a = 0; a < 4; a++) {
                    xk[a] = sK[(t0 + a) * ldx + i], xq[a] = sQ[(t0 + a) * ldx + i];
                    y[a] = sK[(s0 + a) * ldx + i];
                }
#pragma unroll
                for (int a = 0; a < 4; a++)
#pragma unroll
                    for (int b = 0; b < 4; b++) ak[a][b] += xk[a] * y[b], aq[a][b] += xq[a] * y[b];
            }
#pragma unroll
            for (int a = 0; a < 4; a++)
#pragma unroll
                for (int b = 0; b < 4; b++) {
                    const float ck = ak[a][b] * f.s, cq = aq[a][b] * f.s;
                    kk[a][b] += ck * ck, qk[a][b] += cq * cq;
                }
        }
#pragma unroll
        for (int a = 0; a < 4; a++)
#pragma unroll
            for (int b = 0; b < 4; b++) {
                const int t = t0 + a, s2 = s0 + b;
                Akk[t * lda + s2] = s2 < t && t < L ? kk[a][b] : 0.0f;
                Aqk[t * lda + s2] = s2 <= t && t < L ? qk[a][b] : 0.0f;
            }
    }
    __syncthreads();
    // this block's KDC_SC columns [jb, jb + w) of v - R and P, coalesced, before the walk
    const int jb = blockIdx.y * KDC_SC, w = min(KDC_SC, dv - jb);
    const float *P = RP + (size_t)h * 2 * C * dv, *R = P + (size_t)C * dv;
    for (int i = tid; i < L * w; i += KDC_NT) {
        const int t = i / w, j = jb + i % w;
        sVR[i] = ld(v + (size_t)t * tokv + (size_t)h * dv + j) - R[(size_t)t * dv + j];
        sPo[i] = P[(size_t)t * dv + j];
    }
    __syncthreads();
    // u_t = beta_t (v_t - R_t - sum_{s<t} A_kk[t][s] u_s), a column a thread (column j depends on
    // column j alone), into sU over sVR
    if (tid < w) {
        float u[C];
#pragma unroll
        for (int t = 0; t < C; t++) {
            u[t] = 0.0f;
            if (t < L) {
                float a[4] = {sVR[t * w + tid], 0.0f, 0.0f, 0.0f};
#pragma unroll
                for (int s2 = 0; s2 < t; s2++) a[s2 & 3] -= Akk[t * lda + s2] * u[s2];
                u[t] = ((a[0] + a[1]) + (a[2] + a[3])) * sb[t];
                sVR[t * w + tid] = u[t];
                Ug[((size_t)h * C + t) * dv + jb + tid] = u[t];
            }
        }
    }
    __syncthreads();
    // o_t = P_t + sum_{s<=t} A_qk[t][s] u_s, every (t, j) of the block's columns
    for (int i = tid; i < L * w; i += KDC_NT) {
        const int t = i / w, jj = i % w;
        float a[4] = {sPo[i], 0.0f, 0.0f, 0.0f};
        for (int s2 = 0; s2 <= t; s2++) a[s2 & 3] += Aqk[t * lda + s2] * sVR[s2 * w + jj];
        o[(size_t)t * tokv + (size_t)h * dv + jb + jj] = (a[0] + a[1]) + (a[2] + a[3]);
    }
    __syncthreads(); // every thread has read R and P
    for (int i = tid; i < 2 * C * w; i += KDC_NT)
        RP[(size_t)h * 2 * C * dv + (size_t)(i / w) * dv + jb + i % w] = 0.0f;
}

// grid (nfs, ncs, H): S[rows, cols] += Psi_K^T U and, when cs == 0, z[rows] += Psi_K^T 1, each
// cell summed token by token as write_state. Shared: K [C][dk+1], U [C][KDC_VS], a psi tile
// [C][KDC_WT+4] (token-major), the tile's feature codes [KDC_WT]. Thread (rg, cg): rows 4 rg .. 4
// rg + 3 of a tile of KDC_WT, columns 4 cg .. 4 cg + 3; every thread sums z for its rows, the cs ==
// 0, cg == 0 ones store it.
template <typename T, int C>
__global__ void __launch_bounds__(KDC_NT)
    kdc_write(kfeat f, int H, int dv, int D, int FR, int L, const int *idx, const T *k,
              const float *Ug, float *S, float *z) {
    extern __shared__ __align__(16) float sm[];
    const int dk = f.d, ldx = dk + 1, ldp = KDC_WT + 4;
    float *sK = sm, *sU = sK + C * ldx, *sP = sU + C * KDC_VS;
    int *sI = reinterpret_cast<int *>(sP + C * ldp);
    const int fs = blockIdx.x, cs = blockIdx.y, h = blockIdx.z, tid = threadIdx.x;
    const int r0 = fs * FR, r1 = min(D, r0 + FR), j0 = cs * KDC_VS, jw = min(KDC_VS, dv - j0);
    const size_t tok = (size_t)H * dk;
    for (int i = tid; i < C * dk; i += KDC_NT) {
        const int t = i / dk, d = i % dk;
        sK[t * ldx + d] = t < L ? ld(k + (size_t)t * tok + (size_t)h * dk + d) : 0.0f;
    }
    for (int i = tid; i < C * KDC_VS; i += KDC_NT) {
        const int t = i / KDC_VS, j = i % KDC_VS;
        sU[i] = t < L && j < jw ? Ug[((size_t)h * C + t) * dv + j0 + j] : 0.0f;
    }
    float *Sh = S + (size_t)h * D * dv, *zh = z + (size_t)h * D;
    const int rg = tid / (KDC_VS / 4), cg = tid % (KDC_VS / 4);
    const bool zw = cs == 0 && cg == 0;
    // the next tile's cells, z and feature codes come into registers while this tile is computed
    float nxt[4][4], nz[4];
    int pcode = 0;
    auto fetch = [&](int kt) {
#pragma unroll
        for (int a = 0; a < 4; a++) {
            const int r = kt + 4 * rg + a;
#pragma unroll
            for (int c = 0; c < 4; c++)
                nxt[a][c] = r < r1 && 4 * cg + c < jw ? Sh[(size_t)r * dv + j0 + 4 * cg + c] : 0.0f;
            nz[a] = zw && r < r1 ? zh[r] : 0.0f;
        }
        if (tid < KDC_WT && kt + tid < r1) pcode = idx[kt + tid];
    };
    fetch(r0);
    for (int kt = r0; kt < r1; kt += KDC_WT) {
        __syncthreads(); // sK, sU written; the previous psi tile read
        if (tid < KDC_WT) sI[tid] = pcode;
        __syncthreads();
        for (int i = tid; i < KDC_WT * C; i += KDC_NT) {
            const int t = i / KDC_WT, ff = i % KDC_WT, r = kt + ff;
            sP[t * ldp + ff] = r < r1 && t < L ? kata_psi_concat(f, sK + t * ldx, sI[ff]) : 0.0f;
        }
        float acc[4][4], zz[4];
#pragma unroll
        for (int a = 0; a < 4; a++) {
            zz[a] = nz[a];
#pragma unroll
            for (int c = 0; c < 4; c++) acc[a][c] = nxt[a][c];
        }
        if (kt + KDC_WT < r1) fetch(kt + KDC_WT);
        __syncthreads();
        kata_write_tokens(acc, zz, sP + 4 * rg, ldp, sU + 4 * cg, KDC_VS, L);
#pragma unroll
        for (int a = 0; a < 4; a++) {
            const int r = kt + 4 * rg + a;
            if (r >= r1) continue;
#pragma unroll
            for (int c = 0; c < 4; c++)
                if (4 * cg + c < jw) Sh[(size_t)r * dv + j0 + 4 * cg + c] = acc[a][c];
            if (zw) zh[r] = zz[a];
        }
    }
}

// ---------------------------------------------------------------- host side

static size_t kdc_read_smem(int dk, int C) {
    return ((size_t)C * (dk + 1) + KDC_KT * KDC_VS + (size_t)KDC_KT * (C + 4) +
            (size_t)kdc_read_groups(C) * C * KDC_VS + KDC_KT) *
           sizeof(float);
}
static size_t kdc_solve_smem(int dk, int C) {
    return (2 * (size_t)C * (dk + 1) + 2 * (size_t)C * (C + 1) + C + 2 * (size_t)C * KDC_SC) *
           sizeof(float);
}
static size_t kdc_write_smem(int dk, int C) {
    return ((size_t)C * (dk + 1) + (size_t)C * KDC_VS + (size_t)C * (KDC_WT + 4) + KDC_WT) *
           sizeof(float);
}

static size_t kdc_align(size_t n) {
    return (n + 255) / 256 * 256;
}

extern "C" int gpu_kata_delta_chunked_fits(int dk, int chunk) {
    const size_t lim = 227 * 1024;
    return (chunk == 16 || chunk == 32 || chunk == 64) && dk <= 1023 &&
           kdc_read_smem(dk, chunk) <= lim && kdc_solve_smem(dk, chunk) <= lim &&
           kdc_write_smem(dk, chunk) <= lim;
}

// The chunk for a call of n tokens without probes (the model stepper's and the lanes' calls): n
// rounded up to 16, 32 or 64 (the read and the write cost a whole chunk whatever the tokens in
// it); 0 when the token step serves better (one token) or the blocks do not fit.
extern "C" int gpu_kata_delta_call_chunk(int n, int dk) {
    const int C = n <= 16 ? 16 : n <= 32 ? 32 : 64;
    return n > 1 && gpu_kata_delta_chunked_fits(dk, C) ? C : 0;
}

// [idx (D codes) | RP [H][2 C][dv] | U [H][C][dv]]
extern "C" size_t gpu_kata_delta_chunked_scratch_bytes(int H, int dk, int dv, int groups,
                                                       int chunk) {
    if (groups < 1 || dk % groups) return 0;
    const kfeat f = kfeat_of(KATA_DELTA, dk, groups, 1.0f);
    return kdc_align(kfeat_dim(f) * sizeof(int)) + kdc_align((size_t)H * 2 * chunk * dv * 4) +
           (size_t)H * chunk * dv * 4;
}

template <typename T, int C>
static int kdc_run(const kfeat &f, int T_, int H, int dv, const T *q, const T *k, const T *v,
                   const float *beta, float *state, float *o, void *scratch, cudaStream_t st,
                   err *e) {
    const int D = (int)kfeat_dim(f), dk = f.d, ncs = (dv + KDC_VS - 1) / KDC_VS;
    int *idx = (int *)scratch;
    float *RP = (float *)((char *)scratch + kdc_align((size_t)D * sizeof(int)));
    float *U = (float *)((char *)RP + kdc_align((size_t)H * 2 * C * dv * 4));
    float *S = state, *z = state + (size_t)H * D * dv;
    // feature slices: enough blocks for two waves of the read on 132 multiprocessors, each slice
    // a whole number of psi tiles (each slice adds its share of R and P by an atomic)
    int nfs = (264 + 2 * ncs * H - 1) / (2 * ncs * H);
    const int ntiles = (D + KDC_KT - 1) / KDC_KT;
    if (nfs > ntiles) nfs = ntiles;
    const int FR = (ntiles + nfs - 1) / nfs * KDC_KT;
    nfs = (D + FR - 1) / FR;
    // the write adds no atomics: its slices are as many as fill the device once (three blocks a
    // multiprocessor by shared memory; 192 blocks took 52 ms of DeltaKATA's 137 at 16K)
    int nfw = (396 + ncs * H / 2) / (ncs * H);
    const int wtiles = (D + KDC_WT - 1) / KDC_WT;
    nfw = nfw < 1 ? 1 : nfw > wtiles ? wtiles : nfw;
    const int FW = (wtiles + nfw - 1) / nfw * KDC_WT;
    nfw = (D + FW - 1) / FW;
    const size_t sr = kdc_read_smem(dk, C), ss = kdc_solve_smem(dk, C), sw = kdc_write_smem(dk, C);
    CUDA_TRY(
        cudaFuncSetAttribute(kdc_read<T, C>, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)sr),
        "gpu kata delta: shared memory (read)");
    void (*solve)(kfeat, int, int, int, const T *, const T *, const T *, const float *, float *,
                  float *, float *) = kdc_solve<T, C>;
    CUDA_TRY(cudaFuncSetAttribute(solve, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)ss),
             "gpu kata delta: shared memory (solve)");
    CUDA_TRY(
        cudaFuncSetAttribute(kdc_write<T, C>, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)sw),
        "gpu kata delta: shared memory (write)");
    kata_index_kernel<<<(D + 255) / 256, 256, 0, st>>>(f, D, idx);
    CUDA_LAUNCHED("gpu kata delta: feature index");
    CUDA_TRY(cudaMemsetAsync(RP, 0, (size_t)H * 2 * C * dv * 4, st), "gpu kata delta");
    const size_t tk = (size_t)H * dk, tv = (size_t)H * dv;
    // MIXSCOPE_KATA_DELTA_PROFILE (a benchmark knob): each pass timed by events, printed at the end
    static const int profile = getenv("MIXSCOPE_KATA_DELTA_PROFILE") != NULL;
    gpu_pass_timer<3> timer(profile, st);
    float pass_ms[3] = {0, 0, 0};
    for (int t0 = 0; t0 < T_; t0 += C) {
        const int L = T_ - t0 < C ? T_ - t0 : C;
        const T *qc = q + t0 * tk, *kc = k + t0 * tk, *vc = v + t0 * tv;
        const float *bc = beta ? beta + (size_t)t0 * H : NULL;
        timer.mark(0);
        kdc_read<T, C>
            <<<dim3(nfs, 2 * ncs, H), KDC_NT, sr, st>>>(f, H, dv, D, FR, L, idx, qc, kc, S, RP);
        CUDA_LAUNCHED("gpu kata delta: read");
        timer.mark(1);
        solve<<<dim3(H, (dv + KDC_SC - 1) / KDC_SC), KDC_NT, ss, st>>>(f, H, dv, L, qc, kc, vc, bc,
                                                                       RP, U, o + t0 * tv);
        CUDA_LAUNCHED("gpu kata delta: solve");
        timer.mark(2);
        kdc_write<T, C>
            <<<dim3(nfw, ncs, H), KDC_NT, sw, st>>>(f, H, dv, D, FW, L, idx, kc, U, S, z);
        CUDA_LAUNCHED("gpu kata delta: write");
        timer.mark(3);
        timer.add(pass_ms);
    }
    if (profile) {
        fprintf(
            stderr,
            "kata delta chunked T=%d C=%d (%d feature slices of %d, %d of %d): read %.3f ms, solve "
            "%.3f ms, write %.3f ms\n",
            T_, C, nfs, FR, nfw, FW, pass_ms[0], pass_ms[1], pass_ms[2]);
    }
    return 0;
}

template <typename T>
static int kdc_dispatch(const kfeat &f, int T_, int H, int dv, int C, const T *q, const T *k,
                        const T *v, const float *beta, float *state, float *o, void *scratch,
                        cudaStream_t st, err *e) {
    if (C == 16) return kdc_run<T, 16>(f, T_, H, dv, q, k, v, beta, state, o, scratch, st, e);
    if (C == 32) return kdc_run<T, 32>(f, T_, H, dv, q, k, v, beta, state, o, scratch, st, e);
    return kdc_run<T, 64>(f, T_, H, dv, q, k, v, beta, state, o, scratch, st, e);
}

extern "C" int gpu_kata_delta_chunked(int T, int H, int dk, int dv, int groups, int chunk,
                                      float scale, int bf16, const void *q, const void *k,
                                      const void *v, const float *beta, float *state, float *o,
                                      void *scratch, void *stream, err *e) {
    if (groups < 1 || dk % groups)
        return err_set(e, "gpu kata delta: %d groups do not divide dk=%d", groups, dk);
    if (!gpu_kata_delta_chunked_fits(dk, chunk))
        return err_set(e, "gpu kata delta: no chunked form for dk=%d dv=%d chunk %d", dk, dv,
                       chunk);
    if (T < 1) return 0;
    cudaStream_t st = (cudaStream_t)stream;
    const kfeat f = kfeat_of(KATA_DELTA, dk, groups, scale);
    typedef __nv_bfloat16 bf;
    return bf16 ? kdc_dispatch<bf>(f, T, H, dv, chunk, (const bf *)q, (const bf *)k, (const bf *)v,
                                   beta, state, o, scratch, st, e)
                : kdc_dispatch<float>(f, T, H, dv, chunk, (const float *)q, (const float *)k,
                                      (const float *)v, beta, state, o, scratch, st, e);
}
