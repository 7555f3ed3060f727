// kata_tc_shared.cuh: what KATA's tensor-core passes share (kata_tc.cu, mma.sync on sm_90 and
// others; kata_tc_wgmma.cu, Hopper's warpgroup products): the arguments, the 8 x 8 feature blocks
// (tiles) and their packed indices, psi's construction, z's block sums, and the sm_90a entry
// points. kata_tc.cu's header describes the algorithm.
#pragma once

#include <cuda_bf16.h>
#include <cuda_runtime.h>
#include <stdint.h>

#include "../core/err.h"
#include "kata_feat.cuh"
#include "mma.cuh"

#define KT_F  64  // features a tile
#define KT_S  64  // tokens a step of kt_state
#define KT_R  128 // tokens a block of kt_read
#define KT_L  64  // queries a block of kt_local
#define KT_LK 40  // kt_state's key columns a token: 32 and a pad (80-byte rows, no bank conflict)

struct kt_args {
    int B, T, H, dk, M, E, nb, ntile, CL, D; // D: the packed feature count
    float s, eps;
    const bf16_t *q, *k, *v; // [B, T, H, dk], [B, T, H, dv]
    float *S, *z;            // the packed state [B H, D, dv] and [B H, D] (NULL: zero, not kept)
    bf16_t *Sc;              // [nchunks][B H][ntile 64][dv]: S_int at each chunk's start
    float *Zc;               // [nchunks][B H][ntile 64]: z_int at each chunk's start
    float *o, *den;          // [B, T, H, dv], [B, T, H]
};

// Tile -> (group, I, J): tiles run J = 0..I within I, I = 0..nb-1 within a group.
struct kt_tile {
    int m, I, J;
};
__device__ __forceinline__ kt_tile kt_tile_of(int tile, int nb) {
    const int per = nb * (nb + 1) / 2;
    kt_tile t;
    t.m = tile / per;
    int p = tile % per, I = 0;
    while ((I + 1) * (I + 2) / 2 <= p) I++;
    t.I = I, t.J = p - I * (I + 1) / 2;
    return t;
}
__device__ __forceinline__ void kt_tile_next(kt_tile &t, int nb) {
    if (++t.J > t.I) {
        t.J = 0;
        if (++t.I == nb) t.I = 0, t.m++;
    }
}

// Packed index and weight of entry (i, j) of group m (either order).
__device__ __forceinline__ int kt_packed(int m, int i, int j, int E, float s, float *w) {
    const int ii = max(i, j), jj = min(i, j);
    *w = ii == jj ? s : s * KA_SQRT2;
    return m * (E * (E + 1) / 2) + (ii == jj ? ii : E + ii * (ii - 1) / 2 + jj);
}

// psi of 8 products p[b] = w x_i y[b] (y: 16 bytes of bf16) in fp32, and as 8 bf16.
__device__ __forceinline__ uint4 kt_psi8(float xi, uint4 y, float w, float (&p)[8]) {
    const __nv_bfloat162 *yy = reinterpret_cast<const __nv_bfloat162 *>(&y);
    uint4 r;
    uint32_t *o = reinterpret_cast<uint32_t *>(&r);
    const float f = w * xi;
#pragma unroll
    for (int u = 0; u < 4; u++) {
        const float2 t = __bfloat1622float2(yy[u]);
        p[2 * u] = f * t.x, p[2 * u + 1] = f * t.y;
        o[u] = pack_bf16(p[2 * u], p[2 * u + 1]);
    }
    return r;
}

// z's sums over a block, at a chunk's start and at the end: thread tid holds zp[l][b], its
// tokens' share of feature 8 (tid % 8) + b of local tile l. The 32 threads of one tid % 8 add up
// (shuffles over lanes 8 apart, then the 8 warps through red [8][2][64]); thread x < 128 returns
// feature x % 64 of tile x / 64. Two barriers: call it from every thread.
__device__ __forceinline__ float kt_z_sum(const float (&zp)[2][8], float *red, int tid) {
    float r[2][8];
#pragma unroll
    for (int l = 0; l < 2; l++)
#pragma unroll
        for (int b = 0; b < 8; b++) {
            float x = zp[l][b];
            x += __shfl_xor_sync(0xffffffffu, x, 8);
            x += __shfl_xor_sync(0xffffffffu, x, 16);
            r[l][b] = x;
        }
    const int lane = tid & 31, w = tid >> 5;
    if (lane < 8)
#pragma unroll
        for (int l = 0; l < 2; l++)
#pragma unroll
            for (int b = 0; b < 8; b++) red[(w * 2 + l) * KT_F + lane * 8 + b] = r[l][b];
    __syncthreads();
    float z = 0.0f;
    if (tid < 2 * KT_F)
#pragma unroll
        for (int y = 0; y < 8; y++) z += red[y * 2 * KT_F + tid];
    __syncthreads(); // red is free again
    return z;
}

// The state's way in and out of a state pass (kata_tc.cu's and kata_tc_wgmma.cu's alike).
// S_int's entry for feature fr (0..63) of tile t, value column col: the packed entry over its
// weight ((a, b) and (b, a) of a diagonal block read the same one); 0 without a state or for a
// tile past the last (live false).
template <int DV>
__device__ __forceinline__ float kt_s_in(const kt_args &a, int n, const kt_tile &t, int fr, int col,
                                         bool live) {
    float wgt;
    const int r = kt_packed(t.m, 8 * t.I + fr / 8, 8 * t.J + fr % 8, a.E, a.s, &wgt);
    return a.S && live ? a.S[((size_t)n * a.D + r) * DV + col] / wgt : 0.0f;
}
// The packed entry back from S_int's v (one of (a, b), (b, a) of a diagonal block writes).
template <int DV>
__device__ __forceinline__ void kt_s_out(const kt_args &a, int n, const kt_tile &t, int fr, int col,
                                         float v) {
    const int ai = fr / 8, bi = fr % 8;
    if (t.I == t.J && ai < bi) return;
    float wgt;
    const int r = kt_packed(t.m, 8 * t.I + ai, 8 * t.J + bi, a.E, a.s, &wgt);
    a.S[((size_t)n * a.D + r) * DV + col] = v * wgt;
}
// z's shares in (kt_z_sum's layout): threads 0..7 carry the packed z of features 8 tid + b of
// tiles t0 and t1 (t1 only when valid1), every other share starts at 0.
__device__ __forceinline__ void kt_z_in(const kt_args &a, int n, const kt_tile &t0,
                                        const kt_tile &t1, bool valid1, int tid,
                                        float (&zp)[2][8]) {
#pragma unroll
    for (int l = 0; l < 2; l++)
#pragma unroll
        for (int b = 0; b < 8; b++) {
            const kt_tile t = l ? t1 : t0;
            float wgt;
            const int r = kt_packed(t.m, 8 * t.I + (tid & 7), 8 * t.J + b, a.E, a.s, &wgt);
            zp[l][b] = a.S && tid < 8 && (l == 0 || valid1) ? a.z[(size_t)n * a.D + r] / wgt : 0.0f;
        }
}
// kt_z_sum's result z (thread tid < 128: feature tid % 64 of tile tile0 + tid / 64) out: into Zc
// as the exclusive prefix of chunk slot c (chunk B H + head), or into the packed z at the end.
__device__ __forceinline__ void kt_z_prefix(const kt_args &a, size_t c, int tile0, bool valid1,
                                            int tid, float z) {
    if (tid < 2 * KT_F && (tid < KT_F || valid1)) a.Zc[(c * a.ntile + tile0) * KT_F + tid] = z;
}
__device__ __forceinline__ void kt_z_out(const kt_args &a, int n, int tile0, bool valid1, int tid,
                                         float z) {
    if (!a.S || tid >= 2 * KT_F || (tid >= KT_F && !valid1)) return;
    const kt_tile t = kt_tile_of(tile0 + tid / KT_F, a.nb);
    const int ai = (tid % KT_F) / 8, bi = tid % 8;
    if (t.I == t.J && ai < bi) return;
    float wgt;
    const int r = kt_packed(t.m, 8 * t.I + ai, 8 * t.J + bi, a.E, a.s, &wgt);
    a.z[(size_t)n * a.D + r] = z * wgt;
}

// kt_state's key chunk of this thread (token tid / 4 of a step; tile 0's I, tile 0's J, tile 1's
// I, J by tid % 4): kt_key_off its offset from the row of token 0 of sequence b, head h (the
// kernel's arguments live in constant memory), kt_key_issue its copy of the step from token t0
// into stage st of sK [2][KT_S][KT_LK] (tokens past T: zeros).
__device__ __forceinline__ size_t kt_key_off(const kt_args &a, int b, int h, int tid,
                                             const kt_tile &t0, const kt_tile &t1) {
    const kt_tile kc = (tid & 2) ? t1 : t0;
    return ((size_t)b * a.T * a.H + h) * a.dk + kc.m * a.E + 8 * ((tid & 1) ? kc.J : kc.I);
}
__device__ __forceinline__ void kt_key_issue(const kt_args &a, bf16_t *sK, size_t koff, int tid,
                                             int t0, int st) {
    const int tok = tid >> 2, t = t0 + tok;
    const bool ok = t < a.T;
    cp_async16_zfill(sK + (st * KT_S + tok) * KT_LK + (tid & 3) * 8,
                     a.k + koff + (size_t)(ok ? t : 0) * a.H * a.dk, ok);
}

// A read block's queries: R tokens of sequence b, head h from t0 into shared rows of DK + 8
// (zero past T), by cp.async from 256 threads (committed with the caller's next group).
template <int DK, int R = KT_R>
__device__ __forceinline__ void kt_load_q(const kt_args &a, bf16_t *sQ, int b, int h, int t0,
                                          int tid) {
    const size_t tokq = (size_t)a.H * DK;
    const bf16_t *qb = a.q + (size_t)b * a.T * tokq + (size_t)h * DK;
    for (int x = tid; x < R * (DK / 8); x += 256) {
        const int tok = x / (DK / 8), c8 = x % (DK / 8), t = t0 + tok;
        const bool ok = t < a.T;
        cp_async16_zfill(sQ + tok * (DK + 8) + c8 * 8, qb + (size_t)(ok ? t : t0) * tokq + c8 * 8,
                         ok);
    }
}

// A read block's denominators out: thread tid's shares dp[u] of token t0 + tid / 8 + 32 u, summed
// over the 8 threads of a token (8 consecutive lanes).
__device__ __forceinline__ void kt_den_out(const kt_args &a, const float (&dp)[4], int b, int h,
                                           int t0, int tid) {
#pragma unroll
    for (int u = 0; u < 4; u++) {
        float d = dp[u];
        d += __shfl_xor_sync(0xffffffffu, d, 1);
        d += __shfl_xor_sync(0xffffffffu, d, 2);
        d += __shfl_xor_sync(0xffffffffu, d, 4);
        const int t = t0 + (tid >> 3) + 32 * u;
        if ((tid & 7) == 0 && t < a.T) a.den[((size_t)b * a.T + t) * a.H + h] = d;
    }
}

// A local pass's rows out (kt_local_kernel's and kt_local_wgmma's): the thread's rows r0 and r0 + 8
// of the block at q0, their row sums ds (over the quad's 4 lanes) and accumulators acc[4 j + 2 half
// + e] (row r0 + 8 half, value column 8 j + 2 tg + e: the m16n8 C layout, j < DV / 8) added to the
// read pass's o and den: o = (o + acc) / max(den + row sums, eps).
template <int DV>
__device__ __forceinline__ void kt_local_out(const kt_args &a, int b, int h, int r0, int tg,
                                             const float (&ds)[2], const float *acc) {
#pragma unroll
    for (int half = 0; half < 2; half++) {
        float d = ds[half];
        d += __shfl_xor_sync(0xffffffffu, d, 1);
        d += __shfl_xor_sync(0xffffffffu, d, 2);
        const int t = r0 + 8 * half;
        if (t >= a.T) continue;
        const size_t row = ((size_t)b * a.T + t) * a.H + h;
        const float inv = 1.0f / fmaxf(a.den[row] + d, a.eps);
#pragma unroll
        for (int j = 0; j < DV / 8; j++) {
            float2 *p = reinterpret_cast<float2 *>(a.o + row * DV + j * 8 + 2 * tg);
            const float2 x = *p;
            *p = make_float2((x.x + acc[4 * j + 2 * half]) * inv,
                             (x.y + acc[4 * j + 2 * half + 1]) * inv);
        }
    }
}

// The sm_90a passes (kata_tc_wgmma.cu) for dv = 128: 1 when they can run here (an sm_90 GPU, a
// build with their image, MIXSCOPE_KATA_WGMMA not 0), asked once per process; the launches take
// kt_state_kernel's and kt_read_kernel's grids and arguments.
int kata_tc_wgmma_usable(void);
int kata_tc_wgmma_state(const kt_args &a, cudaStream_t st, err *e);
int kata_tc_wgmma_read(const kt_args &a, cudaStream_t st, err *e);
// The wgmma local pass (same grid and arguments as kt_local_kernel), taken when
// kata_tc_wgmma_local_form() is not 0 (MIXSCOPE_KATA_LOCAL=1 or 2, while it is new).
int kata_tc_wgmma_local_form(void);
int kata_tc_wgmma_local(const kt_args &a, cudaStream_t st, err *e);
