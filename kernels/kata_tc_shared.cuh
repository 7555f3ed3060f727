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

// The sm_90a passes (kata_tc_wgmma.cu) for dv = 128: 1 when they can run here (an sm_90 GPU, a
// build with their image, MIXSCOPE_KATA_WGMMA not 0), asked once per process; the launches take
// kt_state_kernel's and kt_read_kernel's grids and arguments.
int kata_tc_wgmma_usable(void);
int kata_tc_wgmma_state(const kt_args &a, cudaStream_t st, err *e);
int kata_tc_wgmma_read(const kt_args &a, cudaStream_t st, err *e);
