// delta.cu: the gated delta rule on the GPU (gdn, deltanet, and kaczmarz through its rescaled
// form, spec delta-family.md §2.4, §2.5, §8.5). Twin of mixers/gdn.c: tests/gpu checks it against
// the CPU reference.
//
// Layout (fla): q, k [B, T, H, dk]; v [B, T, H, dv]; g, beta [B, T, H]; state [B, H, dk, dv] fp32,
// key-major. N = B*H independent heads; head n = b*H + h.
//
// Prefill is the chunked WY/UT form in two kernels:
//   delta_chunk_prepare  (one block per chunk and head, all chunks in parallel):
//       G = chunk-local cumsum of g; M_ij = beta_i (k_i.k_j) exp(G_i - G_j) (i > j);
//       A = (I + M)^-1 by forward substitution; W = A diag(beta*gamma) K; U = A diag(beta) V;
//       P_ij = (q_i.k_j) exp(G_i - G_j) (i >= j)
//   delta_chunk_state    (one block per head and value slice, chunks in order):
//       Sc = S (saved);  Delta = U - W S;  S <- gamma_last S + (diag(exp(G_last - G)) K)^T Delta
//   delta_chunk_output   (every chunk, head and value slice in parallel):
//       O = scale (diag(gamma) Q Sc + P Delta)
// All arithmetic is fp32 (inputs may be bf16).
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <stdlib.h>
#include <string.h>

#include "delta_tc.cuh"
#include "gpu.h"
#include "gpu_common.cuh"
#include <cuda_pipeline.h>

#define PREP_THREADS 256

// ---------------------------------------------------------------- decode step

// One token for each head: grid (ceil(dv / 32), N), block (32, 8). Thread (tx, ty) owns column
// j = 32 blockIdx.x + tx and rows ty, ty + 8, ... of the state, kept in registers between the read
// of k^T S and the update; the two column sums (k^T S and S^T q) are reduced over ty in shared
// memory. Eight row groups give each thread few dependent loads and the GPU many in flight.
#define STEP_RG 8
template <typename T, int MAXR>
__global__ void __launch_bounds__(32 * STEP_RG)
    delta_step_kernel(int dk, int dv, float scale, const T *q, const T *k, const T *v,
                      const float *g, const float *beta, float *state, float *o) {
    __shared__ float sk[MAXR * STEP_RG], sq[MAXR * STEP_RG], red[STEP_RG][33];
    const int n = blockIdx.y, tx = threadIdx.x, ty = threadIdx.y;
    const int j = blockIdx.x * 32 + tx, tid = ty * 32 + tx;
    float *S = state + (size_t)n * dk * dv;
    float col[MAXR];
    // the state's loads go out before the barrier that publishes k and q: one memory latency
    // for both instead of two in a row
#pragma unroll
    for (int r = 0; r < MAXR; r++) {
        const int i = ty + r * STEP_RG;
        col[r] = (i < dk && j < dv) ? S[(size_t)i * dv + j] : 0.0f;
    }
    for (int i = tid; i < dk; i += 32 * STEP_RG) {
        sk[i] = ld(k + (size_t)n * dk + i);
        sq[i] = ld(q + (size_t)n * dk + i);
    }
    // v, g and beta too: nothing below waits on a load of its own
    const float vj = j < dv ? ld(v + (size_t)n * dv + j) : 0.0f;
    const float gn = g ? g[n] : 0.0f, b = beta[n];
    __syncthreads();
    const float alpha = g ? __expf(gn) : 1.0f;
    float part = 0.0f;
#pragma unroll
    for (int r = 0; r < MAXR; r++) {
        const int i = ty + r * STEP_RG;
        col[r] *= alpha;
        part += (i < dk ? sk[i] : 0.0f) * col[r];
    }
    red[ty][tx] = part;
    __syncthreads();
    float ks = 0.0f;
#pragma unroll
    for (int y = 0; y < STEP_RG; y++) ks += red[y][tx];
    const float e = j < dv ? vj - ks : 0.0f;
    __syncthreads(); // red is reused below
    part = 0.0f;
#pragma unroll
    for (int r = 0; r < MAXR; r++) {
        const int i = ty + r * STEP_RG;
        if (i < dk && j < dv) {
            col[r] += b * sk[i] * e;
            S[(size_t)i * dv + j] = col[r];
            part += col[r] * sq[i];
        }
    }
    red[ty][tx] = part;
    __syncthreads();
    if (ty == 0 && j < dv) {
        float acc = 0.0f;
#pragma unroll
        for (int y = 0; y < STEP_RG; y++) acc += red[y][tx];
        o[(size_t)n * dv + j] = scale * acc;
    }
}

// The decode step for many heads: block (TX, RG) over 4 TX columns, thread (tx, ty) owns columns
// 4 tx .. 4 tx + 3 (one float4 a row) of rows ty, ty + RG, ...: a warp moves whole 128-byte row
// segments per load, a quarter of the row-group kernel's load instructions, and the column sums
// are reduced over ty in shared memory as there. Grid (ceil(dv / (4 TX)), N). Every load (state,
// k, q, v, g, beta) is issued before the first barrier.
template <typename T, int MAXR, int RG, int TX>
__global__ void __launch_bounds__(TX *RG)
    delta_decode_rows4(int dk, int dv, float scale, const T *q, const T *k, const T *v,
                       const float *g, const float *beta, float *state, float *o) {
    __shared__ float sk[MAXR * RG], sq[MAXR * RG];
    __shared__ float4 red[2][RG][TX];
    const int n = blockIdx.y, tx = threadIdx.x, ty = threadIdx.y, tid = ty * TX + tx;
    const int j = blockIdx.x * 4 * TX + 4 * tx;
    const bool jin = j < dv;
    float *S = state + (size_t)n * dk * dv;
    float4 col[MAXR];
#pragma unroll
    for (int r = 0; r < MAXR; r++) {
        const int i = ty + r * RG;
        col[r] = (i < dk && jin) ? *reinterpret_cast<const float4 *>(S + (size_t)i * dv + j)
                                 : make_float4(0.0f, 0.0f, 0.0f, 0.0f);
    }
    for (int i = tid; i < dk; i += TX * RG) {
        sk[i] = ld(k + (size_t)n * dk + i);
        sq[i] = ld(q + (size_t)n * dk + i);
    }
    float vv[4] = {0.0f, 0.0f, 0.0f, 0.0f};
    if (jin) ld4(v + (size_t)n * dv + j, vv);
    const float gn = g ? g[n] : 0.0f, b = beta[n];
    __syncthreads();
    const float alpha = g ? __expf(gn) : 1.0f;
    float4 p = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
#pragma unroll
    for (int r = 0; r < MAXR; r++) {
        const int i = ty + r * RG;
        const float ki = i < dk ? sk[i] : 0.0f;
        col[r].x *= alpha, col[r].y *= alpha, col[r].z *= alpha, col[r].w *= alpha;
        p.x += ki * col[r].x, p.y += ki * col[r].y, p.z += ki * col[r].z, p.w += ki * col[r].w;
    }
    red[0][ty][tx] = p;
    __syncthreads();
    float4 a = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
#pragma unroll
    for (int y = 0; y < RG; y++) {
        const float4 t = red[0][y][tx];
        a.x += t.x, a.y += t.y, a.z += t.z, a.w += t.w;
    }
    const float e0 = vv[0] - a.x, e1 = vv[1] - a.y, e2 = vv[2] - a.z, e3 = vv[3] - a.w;
    p = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
#pragma unroll
    for (int r = 0; r < MAXR; r++) {
        const int i = ty + r * RG;
        if (i < dk && jin) {
            const float bk = b * sk[i], qi = sq[i];
            col[r].x += bk * e0, col[r].y += bk * e1, col[r].z += bk * e2, col[r].w += bk * e3;
            *reinterpret_cast<float4 *>(S + (size_t)i * dv + j) = col[r];
            p.x += qi * col[r].x, p.y += qi * col[r].y, p.z += qi * col[r].z, p.w += qi * col[r].w;
        }
    }
    red[1][ty][tx] = p;
    __syncthreads();
    if (ty == 0 && jin) {
        float4 acc = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
#pragma unroll
        for (int y = 0; y < RG; y++) {
            const float4 t = red[1][y][tx];
            acc.x += t.x, acc.y += t.y, acc.z += t.z, acc.w += t.w;
        }
        *reinterpret_cast<float4 *>(o + (size_t)n * dv + j) =
            make_float4(scale * acc.x, scale * acc.y, scale * acc.z, scale * acc.w);
    }
}

// The decode step for few heads, where the row-group kernel leaves most multiprocessors idle:
// a block of 8 warps over 4 TX columns (TX = 2: 8 columns, 256 blocks at 16 heads and dv 128).
// Lane (ry = lane / TX, tx = lane % TX) of warp w owns the float4 at columns 4 tx .. 4 tx + 3 of
// rows w RW + ry + r RB (RW = 32 / TX rows a warp, RB = 8 RW a block, r < MAXR). A column sum
// is a shuffle over the RW lanes of one column group, then the 8 warps' sums in shared memory,
// which every thread adds up itself: one barrier a sum, and a block's share of the state small
// enough that its loads are one round trip.
template <typename T, int TX, int MAXR>
__global__ void __launch_bounds__(256)
    delta_decode_warps(int dk, int dv, float scale, const T *q, const T *k, const T *v,
                       const float *g, const float *beta, float *state, float *o) {
    constexpr int RW = 32 / TX, RB = 8 * RW;
    __shared__ float sk[RB * MAXR], sq[RB * MAXR];
    __shared__ float4 red[2][8][TX];
    const int n = blockIdx.y, tid = threadIdx.x, lane = tid & 31, w = tid >> 5;
    const int tx = lane % TX, ry = lane / TX, j = blockIdx.x * 4 * TX + 4 * tx;
    const bool jin = j < dv;
    float *S = state + (size_t)n * dk * dv;
    float4 col[MAXR];
#pragma unroll
    for (int r = 0; r < MAXR; r++) {
        const int i = w * RW + ry + r * RB;
        col[r] = (i < dk && jin) ? *reinterpret_cast<const float4 *>(S + (size_t)i * dv + j)
                                 : make_float4(0.0f, 0.0f, 0.0f, 0.0f);
    }
    for (int i = tid; i < dk; i += 256) {
        sk[i] = ld(k + (size_t)n * dk + i);
        sq[i] = ld(q + (size_t)n * dk + i);
    }
    float vv[4] = {0.0f, 0.0f, 0.0f, 0.0f};
    if (jin) ld4(v + (size_t)n * dv + j, vv);
    const float gn = g ? g[n] : 0.0f, b = beta[n];
    __syncthreads();
    const float alpha = g ? __expf(gn) : 1.0f;
    float4 p = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
#pragma unroll
    for (int r = 0; r < MAXR; r++) {
        const int i = w * RW + ry + r * RB;
        const float ki = i < dk ? sk[i] : 0.0f;
        col[r].x *= alpha, col[r].y *= alpha, col[r].z *= alpha, col[r].w *= alpha;
        p.x += ki * col[r].x, p.y += ki * col[r].y, p.z += ki * col[r].z, p.w += ki * col[r].w;
    }
    auto warp_sum = [&](float4 x) {
#pragma unroll
        for (int off = TX; off < 32; off <<= 1) {
            x.x += __shfl_xor_sync(0xffffffffu, x.x, off);
            x.y += __shfl_xor_sync(0xffffffffu, x.y, off);
            x.z += __shfl_xor_sync(0xffffffffu, x.z, off);
            x.w += __shfl_xor_sync(0xffffffffu, x.w, off);
        }
        return x;
    };
    p = warp_sum(p);
    if (ry == 0) red[0][w][tx] = p;
    __syncthreads();
    float4 a = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
#pragma unroll
    for (int y = 0; y < 8; y++) {
        const float4 t = red[0][y][tx];
        a.x += t.x, a.y += t.y, a.z += t.z, a.w += t.w;
    }
    const float e0 = vv[0] - a.x, e1 = vv[1] - a.y, e2 = vv[2] - a.z, e3 = vv[3] - a.w;
    p = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
#pragma unroll
    for (int r = 0; r < MAXR; r++) {
        const int i = w * RW + ry + r * RB;
        if (i < dk && jin) {
            const float bk = b * sk[i], qi = sq[i];
            col[r].x += bk * e0, col[r].y += bk * e1, col[r].z += bk * e2, col[r].w += bk * e3;
            *reinterpret_cast<float4 *>(S + (size_t)i * dv + j) = col[r];
            p.x += qi * col[r].x, p.y += qi * col[r].y, p.z += qi * col[r].z, p.w += qi * col[r].w;
        }
    }
    p = warp_sum(p);
    if (ry == 0) red[1][w][tx] = p;
    __syncthreads();
    if (w == 0 && ry == 0 && jin) {
        float4 acc = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
#pragma unroll
        for (int y = 0; y < 8; y++) {
            const float4 t = red[1][y][tx];
            acc.x += t.x, acc.y += t.y, acc.z += t.z, acc.w += t.w;
        }
        *reinterpret_cast<float4 *>(o + (size_t)n * dv + j) =
            make_float4(scale * acc.x, scale * acc.y, scale * acc.z, scale * acc.w);
    }
}

// Which decode kernel: 0 the row-group kernel; 1 the float4 kernel over 128 columns a block
// (32 x 8 threads); 2 over 64 columns (16 x 8); 3 over 64 columns in 16 row groups (16 x 16);
// 4, 5, 6 the warp-sum kernel over 8, 16, 32 columns. MIXSCOPE_DECODE=rows|rows4|rows4x64|
// rows4x64r16|warps2|warps4|warps8 forces one (benchmarks). By default the 16-column warp-sum
// kernel while its blocks fit two a multiprocessor, the 64-column float4 kernel in 16 row groups
// once there are 256 of its blocks, the row-group kernel between. H200, H 16, d 128, each step a
// graph replay, us at B = 1 / 8 / 64 (docs/gpu-results.md, with every load issued before the first
// barrier): rows 2.82 / 5.60 / 47.6, rows4 4.19 / 6.05 / 37.1, rows4x64 3.92 / 5.86 / 40.7,
// rows4x64r16 3.32 / 5.45 / 36.7; at b7a0b88, two rounds: rows 2.88, 2.84 (the kernel alone
// 2.06, 2.07) / 5.49, 5.55 / 36.8, 36.8 (rows4x64r16 at B = 8 and 64), warps2 3.33, 3.42 /
// 9.52, 9.89 / 59.7, 60.0, warps4 2.84, 2.69 (1.92, 1.91) / 6.54, 6.49 / 42.4, 42.3, warps8
// 2.87, 3.08 / 5.34, 5.51 / 42.6, 42.9. (Before the loads of v, g and beta moved up, rows4 took
// 47.6 us at B = 64: a second memory latency in every block.)
static int decode_kind(int N, int dk, int dv) {
    static int forced = -2;
    if (forced == -2) {
        const char *s = getenv("MIXSCOPE_DECODE");
        forced = !s                          ? -1
                 : !strcmp(s, "rows4")       ? 1
                 : !strcmp(s, "rows4x64")    ? 2
                 : !strcmp(s, "rows4x64r16") ? 3
                 : !strcmp(s, "warps2")      ? 4
                 : !strcmp(s, "warps4")      ? 5
                 : !strcmp(s, "warps8")      ? 6
                                             : 0;
    }
    const int ok = dv % 4 == 0 && dk <= 128;
    if (forced >= 0) return ok ? forced : 0;
    if (ok && N * ((dv + 15) / 16) <= 264) return 5;
    return ok && N * ((dv + 63) / 64) >= 256 ? 3 : 0;
}

template <typename T, int RG, int TX>
static void launch_rows4(int N, int dk, int dv, float scale, const T *q, const T *k, const T *v,
                         const float *g, const float *beta, float *state, float *o,
                         cudaStream_t st) {
    dim3 grid((dv + 4 * TX - 1) / (4 * TX), N), block(TX, RG);
    if (dk <= 64)
        delta_decode_rows4<T, 64 / RG, RG, TX>
            <<<grid, block, 0, st>>>(dk, dv, scale, q, k, v, g, beta, state, o);
    else
        delta_decode_rows4<T, 128 / RG, RG, TX>
            <<<grid, block, 0, st>>>(dk, dv, scale, q, k, v, g, beta, state, o);
}

template <typename T, int TX>
static void launch_warps_tx(int N, int dk, int dv, float scale, const T *q, const T *k, const T *v,
                            const float *g, const float *beta, float *state, float *o,
                            cudaStream_t st) {
    constexpr int RB = 8 * 32 / TX; // rows a block covers a pass
    dim3 grid((dv + 4 * TX - 1) / (4 * TX), N);
    if (dk <= RB)
        delta_decode_warps<T, TX, 1>
            <<<grid, 256, 0, st>>>(dk, dv, scale, q, k, v, g, beta, state, o);
    else
        delta_decode_warps<T, TX, (128 + RB - 1) / RB>
            <<<grid, 256, 0, st>>>(dk, dv, scale, q, k, v, g, beta, state, o);
}

template <typename T>
static void launch_warps(int TX, int N, int dk, int dv, float scale, const T *q, const T *k,
                         const T *v, const float *g, const float *beta, float *state, float *o,
                         cudaStream_t st) {
    if (TX == 2)
        launch_warps_tx<T, 2>(N, dk, dv, scale, q, k, v, g, beta, state, o, st);
    else if (TX == 4)
        launch_warps_tx<T, 4>(N, dk, dv, scale, q, k, v, g, beta, state, o, st);
    else
        launch_warps_tx<T, 8>(N, dk, dv, scale, q, k, v, g, beta, state, o, st);
}

template <typename T>
static int launch_step(int N, int dk, int dv, float scale, const void *q, const void *k,
                       const void *v, const float *g, const float *beta, float *state, float *o,
                       cudaStream_t st, err *e) {
    const T *tq = (const T *)q, *tk = (const T *)k, *tv = (const T *)v;
    const int kind = decode_kind(N, dk, dv);
    if (kind) {
        if (kind >= 4)
            launch_warps<T>(kind == 4   ? 2
                            : kind == 5 ? 4
                                        : 8,
                            N, dk, dv, scale, tq, tk, tv, g, beta, state, o, st);
        else if (kind == 1)
            launch_rows4<T, STEP_RG, 32>(N, dk, dv, scale, tq, tk, tv, g, beta, state, o, st);
        else if (kind == 2)
            launch_rows4<T, STEP_RG, 16>(N, dk, dv, scale, tq, tk, tv, g, beta, state, o, st);
        else
            launch_rows4<T, 16, 16>(N, dk, dv, scale, tq, tk, tv, g, beta, state, o, st);
        CUDA_LAUNCHED("gpu delta step");
        return 0;
    }
    dim3 grid((dv + 31) / 32, N), block(32, STEP_RG);
    if (dk <= 8 * STEP_RG)
        delta_step_kernel<T, 8>
            <<<grid, block, 0, st>>>(dk, dv, scale, tq, tk, tv, g, beta, state, o);
    else if (dk <= 16 * STEP_RG)
        delta_step_kernel<T, 16>
            <<<grid, block, 0, st>>>(dk, dv, scale, tq, tk, tv, g, beta, state, o);
    else if (dk <= 32 * STEP_RG)
        delta_step_kernel<T, 32>
            <<<grid, block, 0, st>>>(dk, dv, scale, tq, tk, tv, g, beta, state, o);
    else
        return err_set(e, "gpu delta step: dk=%d above %d", dk, 32 * STEP_RG);
    CUDA_LAUNCHED("gpu delta step");
    return 0;
}

extern "C" int gpu_delta_step(int B, int H, int dk, int dv, float scale, int bf16, const void *q,
                              const void *k, const void *v, const float *g, const float *beta,
                              float *state, float *o, void *stream, err *e) {
    cudaStream_t st = (cudaStream_t)stream;
    return bf16
               ? launch_step<__nv_bfloat16>(B * H, dk, dv, scale, q, k, v, g, beta, state, o, st, e)
               : launch_step<float>(B * H, dk, dv, scale, q, k, v, g, beta, state, o, st, e);
}

// ---------------------------------------------------------------- chunked prefill

// Scratch per chunk and head: W [C, dk], U [C, dv], P [C, C], G [C].
struct chunk_scratch {
    float *W, *U, *P, *G;
};

__host__ __device__ static size_t floats_per_chunk(int dk, int dv, int C) {
    return (size_t)C * dk + (size_t)C * dv + (size_t)C * C + C;
}

static size_t state_floats_per_chunk_h(int dk, int dv, int C) {
    return (size_t)dk * dv + (size_t)C * dv;
}

extern "C" size_t gpu_delta_scratch_bytes(int B, int T, int H, int dk, int dv, int chunk) {
    size_t nchunks = (size_t)(T + chunk - 1) / chunk;
    size_t fp32 = nchunks * (size_t)B * H *
                  (floats_per_chunk(dk, dv, chunk) + state_floats_per_chunk_h(dk, dv, chunk)) *
                  sizeof(float);
    size_t tc = delta_tc_scratch_bytes(B, T, H, dk, dv);
    return fp32 > tc ? fp32 : tc;
}

// The tensor-core path (delta_tc.cu) for bf16 inputs it supports, unless MIXSCOPE_DELTA_TC=0
// (benchmarks compare the two).
static int use_tc(int dk, int dv, int chunk, int bf16) {
    const char *s = getenv("MIXSCOPE_DELTA_TC");
    return delta_tc_supported(dk, dv, chunk, bf16) && !(s && !strcmp(s, "0"));
}

// grid (nchunks, N). Dynamic shared memory: K [C][dk+1], Q-then-V [C][max(dk, dv)+1], A [C][C],
// G [C], beta [C], beta*gamma [C]. Rows are padded by one float so that threads walking down rows
// (different i, same d) hit different banks.
template <typename T>
__global__ void delta_chunk_prepare(int T_, int H, int dk, int dv, int C, const T *q, const T *k,
                                    const T *v, const float *g, const float *beta, float *scratch) {
    extern __shared__ float sm[];
    const int ldk = dk + 1, ldx = (dk > dv ? dk : dv) + 1;
    const int lda = C + 1;
    float *sK = sm, *sX = sK + C * ldk, *sA = sX + C * ldx, *sG = sA + C * lda, *sB = sG + C,
          *sBG = sB + C;
    int c = blockIdx.x, n = blockIdx.y, b = n / H, h = n % H;
    int t0 = c * C, L = min(C, T_ - t0);
    size_t tok_k = (size_t)H * dk, tok_v = (size_t)H * dv;
    const T *kb = k + ((size_t)b * T_ + t0) * tok_k + (size_t)h * dk;
    const T *qb = q + ((size_t)b * T_ + t0) * tok_k + (size_t)h * dk;
    const T *vb = v + ((size_t)b * T_ + t0) * tok_v + (size_t)h * dv;
    size_t gi = ((size_t)b * T_ + t0) * H + h; // index of (b, t0, h) in [B, T, H]
#pragma unroll 4
    for (int x = threadIdx.x; x < C * dk; x += blockDim.x) {
        int i = x / dk, d = x % dk;
        sK[i * ldk + d] = i < L ? ld(kb + (size_t)i * tok_k + d) : 0.0f;
        sX[i * ldx + d] = i < L ? ld(qb + (size_t)i * tok_k + d) : 0.0f;
    }
    for (int i = threadIdx.x; i < C; i += blockDim.x) {
        sB[i] = i < L ? beta[gi + (size_t)i * H] : 0.0f;
        sG[i] = i < L && g ? g[gi + (size_t)i * H] : 0.0f;
    }
    __syncthreads();
    if (threadIdx.x == 0) // chunk-local inclusive cumsum (C <= 64: sequential is cheap)
        for (int i = 1; i < C; i++) sG[i] += sG[i - 1];
    __syncthreads();
    if (threadIdx.x < C) sBG[threadIdx.x] = sB[threadIdx.x] * __expf(sG[threadIdx.x]);
    float *W = scratch + ((size_t)n * gridDim.x + c) * floats_per_chunk(dk, dv, C);
    float *U = W + (size_t)C * dk, *P = U + (size_t)C * dv, *Gout = P + (size_t)C * C;
    // M (strictly lower) into sA, and P = (Q K^T) .* Gamma (lower incl. diagonal) to global.
    // Register tiles of 4 x 4 (i, j) pairs: rows i = ib + r C/4, columns j = jb + q C/4.
    {
        const int CQ = C / 4;
        for (int tile = threadIdx.x; tile < CQ * CQ; tile += blockDim.x) {
            const int ib = tile % CQ, jb = tile / CQ;
            float kk[4][4] = {}, qk[4][4] = {};
            for (int d = 0; d < dk; d++) {
                float ak[4], aq[4], bk[4];
#pragma unroll
                for (int r = 0; r < 4; r++) {
                    ak[r] = sK[(ib + r * CQ) * ldk + d];
                    aq[r] = sX[(ib + r * CQ) * ldx + d];
                    bk[r] = sK[(jb + r * CQ) * ldk + d];
                }
#pragma unroll
                for (int r = 0; r < 4; r++)
#pragma unroll
                    for (int q = 0; q < 4; q++) {
                        kk[r][q] += ak[r] * bk[q];
                        qk[r][q] += aq[r] * bk[q];
                    }
            }
#pragma unroll
            for (int r = 0; r < 4; r++)
#pragma unroll
                for (int q = 0; q < 4; q++) {
                    const int i = ib + r * CQ, j = jb + q * CQ;
                    const float gam = j <= i ? __expf(sG[i] - sG[j]) : 0.0f; // masked before exp
                    sA[i * lda + j] = j < i ? sB[i] * kk[r][q] * gam : 0.0f;
                    P[i * C + j] = qk[r][q] * gam;
                }
        }
    }
    if (threadIdx.x < C) Gout[threadIdx.x] = sG[threadIdx.x];
    __syncthreads();
    // V replaces Q in shared memory
#pragma unroll 4
    for (int x = threadIdx.x; x < C * dv; x += blockDim.x) {
        int i = x / dv, d = x % dv;
        sX[i * ldx + d] = i < L ? ld(vb + (size_t)i * tok_v + d) : 0.0f;
    }
    // A = (I + M)^-1 in place, row by row: A_ij = -sum_{m=j}^{i-1} M_im A_mj
    for (int i = 1; i < C; i++) {
        float val = 0.0f;
        int j = threadIdx.x;
        if (j < i) {
            val = -sA[i * lda + j]; // m = j term, A_jj = 1
            for (int m = j + 1; m < i; m++) val -= sA[i * lda + m] * sA[m * lda + j];
        }
        __syncthreads();
        if (j < i) sA[i * lda + j] = val;
        __syncthreads();
    }
    // W = A diag(beta gamma) K, U = A diag(beta) V  (A has an implicit unit diagonal).
    // Register tiles of 4 rows x 8 columns: rows i = ib + r C/4, columns d = db + q ncols/8.
    {
        const int CQ = C / 4;
        for (int pass = 0; pass < 2; pass++) {
            const int ncol = pass ? dv : dk, ld_in = pass ? ldx : ldk, cb = ncol / 8;
            const float *src = pass ? sX : sK, *coef = pass ? sB : sBG;
            float *dst = pass ? U : W;
            for (int tile = threadIdx.x; tile < CQ * cb; tile += blockDim.x) {
                const int ib = tile % CQ, db = tile / CQ;
                float acc[4][8];
#pragma unroll
                for (int r = 0; r < 4; r++) {
                    const int i = ib + r * CQ;
#pragma unroll
                    for (int q = 0; q < 8; q++) acc[r][q] = coef[i] * src[i * ld_in + db + q * cb];
                }
                const int mmax = ib + 3 * CQ; // the largest row of the tile
                for (int m = 0; m < mmax; m++) {
                    float a[4], bb[8];
                    const float cm = coef[m];
#pragma unroll
                    for (int r = 0; r < 4; r++) {
                        const int i = ib + r * CQ;
                        a[r] = m < i ? sA[i * lda + m] * cm : 0.0f;
                    }
#pragma unroll
                    for (int q = 0; q < 8; q++) bb[q] = src[m * ld_in + db + q * cb];
#pragma unroll
                    for (int r = 0; r < 4; r++)
#pragma unroll
                        for (int q = 0; q < 8; q++) acc[r][q] += a[r] * bb[q];
                }
#pragma unroll
                for (int r = 0; r < 4; r++)
#pragma unroll
                    for (int q = 0; q < 8; q++)
                        dst[(size_t)(ib + r * CQ) * ncol + db + q * cb] = acc[r][q];
            }
            // columns beyond a multiple of 8 (not used by the sizes we run, kept for safety)
            for (int x = threadIdx.x; x < C * (ncol - cb * 8); x += blockDim.x) {
                const int i = x / (ncol - cb * 8), d = cb * 8 + x % (ncol - cb * 8);
                float acc2 = coef[i] * src[i * ld_in + d];
                for (int m = 0; m < i; m++) acc2 += sA[i * lda + m] * coef[m] * src[m * ld_in + d];
                dst[(size_t)i * ncol + d] = acc2;
            }
        }
    }
}

// Scratch of the state pass and the output pass, after the prepare scratch: for each head and
// chunk, the state at the chunk's start Sc [dk, dv] and the corrected values Delta [C, dv].
__host__ __device__ static size_t state_floats_per_chunk(int dk, int dv, int C) {
    return (size_t)dk * dv + (size_t)C * dv;
}

// Register tiles: each thread owns RI rows x RJ columns of an output tile, so every value it loads
// from shared memory feeds several FMAs. Its rows are strided (row = base + r * rows/RI) so that
// neighbouring threads read neighbouring addresses; row-major tiles indexed by row across threads
// are padded by one float so that those reads hit different banks.
#define RI 4
#define RJ 2

// The sequential pass over chunks, one block per head and value slice of BV columns:
//   Sc[c] = S;  Delta = U - W S;  S <- gamma_last S + K^T diag(exp(G_last - G)) Delta
// grid (ceil(dv / BV), N). The next chunk's W and K are copied into the other half of a double
// buffer with cp.async while this chunk computes, so the pass waits on memory only once.
// Shared: S [dk][BV], W [2][C][dk+4], K [2][C][dk + 16/sizeof(T)] (raw inputs),
// Delta [C][BV] and the decayed Delta [C][BV].
template <typename T, int BV, int NT>
__global__ void __launch_bounds__(NT)
    delta_chunk_state(int T_, int H, int dk, int dv, int C, int nchunks, const T *k,
                      const float *prep, float *state, float *states) {
    extern __shared__ __align__(16) float sm[];
    const int ldw = dk + 4, ldkt = dk + 16 / (int)sizeof(T); // rows stay 16-byte aligned
    float *sS = sm, *sWb = sS + dk * BV, *sD = sWb + 2 * C * ldw, *sDd = sD + C * BV;
    T *sKb = reinterpret_cast<T *>(sDd + C * BV);
    const int n = blockIdx.y, b = n / H, h = n % H, j0 = blockIdx.x * BV, tid = threadIdx.x;
    const int jw = min(BV, dv - j0);
    const size_t tok_k = (size_t)H * dk;
    float *S = state + (size_t)n * dk * dv;
    for (int x = tid; x < dk * BV; x += NT) {
        int d = x / BV, j = x % BV;
        sS[x] = j < jw ? S[(size_t)d * dv + j0 + j] : 0.0f;
    }
    // issue the asynchronous copies of chunk c into buffer c & 1
    auto issue = [&](int c) {
        const int t0 = c * C, L = min(C, T_ - t0), buf = c & 1;
        const float *W = prep + ((size_t)n * nchunks + c) * floats_per_chunk(dk, dv, C);
        const T *kb = k + ((size_t)b * T_ + t0) * tok_k + (size_t)h * dk;
        float *sW = sWb + buf * C * ldw;
        T *sK = sKb + buf * C * ldkt;
        const int w16 = dk / 4, k16 = dk * (int)sizeof(T) / 16; // 16-byte pieces per row
        for (int x = tid; x < C * w16; x += NT) {
            const int i = x / w16, p = x % w16;
            __pipeline_memcpy_async(sW + i * ldw + p * 4, W + (size_t)i * dk + p * 4, 16);
        }
        for (int x = tid; x < C * k16; x += NT) {
            const int i = x / k16, p = x % k16, per = 16 / (int)sizeof(T);
            if (i < L)
                __pipeline_memcpy_async(sK + i * ldkt + p * per, kb + (size_t)i * tok_k + p * per,
                                        16);
            else
                for (int u = 0; u < per; u++) sK[i * ldkt + p * per + u] = T(0.0f);
        }
        __pipeline_commit();
    };
    issue(0);
    for (int c = 0; c < nchunks; c++) {
        const int t0 = c * C, L = min(C, T_ - t0), buf = c & 1;
        const float *W = prep + ((size_t)n * nchunks + c) * floats_per_chunk(dk, dv, C);
        const float *U = W + (size_t)C * dk, *G = U + (size_t)C * dv + (size_t)C * C;
        float *Sc = states + ((size_t)n * nchunks + c) * state_floats_per_chunk(dk, dv, C);
        float *Dout = Sc + (size_t)dk * dv;
        const float glast = G[L - 1];
        const float *sW = sWb + buf * C * ldw;
        const T *sK = sKb + buf * C * ldkt;
        __syncthreads(); // the previous chunk is done with the other buffer and with S
        if (c + 1 < nchunks) issue(c + 1);
        for (int x = tid; x < dk * BV; x += NT) {
            int d = x / BV, j = x % BV;
            if (j < jw) Sc[(size_t)d * dv + j0 + j] = sS[x];
        }
        if (c + 1 < nchunks)
            __pipeline_wait_prior(1); // chunk c's copies have landed
        else
            __pipeline_wait_prior(0);
        __syncthreads();
        // Delta = U - W S: C x BV outputs
        const int CR = C / RI;
        for (int tile = tid; tile < CR * (BV / RJ); tile += NT) {
            const int ib = tile % CR, jb = tile / CR;
            float acc[RI][RJ] = {};
            for (int d = 0; d < dk; d++) {
                float a[RI], bb[RJ];
#pragma unroll
                for (int r = 0; r < RI; r++) a[r] = sW[(ib + r * CR) * ldw + d];
#pragma unroll
                for (int q = 0; q < RJ; q++) bb[q] = sS[d * BV + jb * RJ + q];
#pragma unroll
                for (int r = 0; r < RI; r++)
#pragma unroll
                    for (int q = 0; q < RJ; q++) acc[r][q] += a[r] * bb[q];
            }
#pragma unroll
            for (int r = 0; r < RI; r++) {
                const int i = ib + r * CR;
                const float dec = i < L ? __expf(glast - G[i]) : 0.0f;
#pragma unroll
                for (int q = 0; q < RJ; q++) {
                    const int j = jb * RJ + q;
                    const float dl = (j < jw ? U[(size_t)i * dv + j0 + j] : 0.0f) - acc[r][q];
                    sD[i * BV + j] = dl;
                    sDd[i * BV + j] = dec * dl;
                    if (j < jw) Dout[(size_t)i * dv + j0 + j] = dl;
                }
            }
        }
        __syncthreads();
        // S <- gamma_last S + K^T (decayed Delta): dk x BV outputs; each thread reads and writes
        // only its own entries of S, so no barrier is needed between the reads and the writes
        const float gl = __expf(glast);
        const int DR = dk / RI;
        for (int tile = tid; tile < DR * (BV / RJ); tile += NT) {
            const int db = tile % DR, jb = tile / DR;
            float acc[RI][RJ];
#pragma unroll
            for (int r = 0; r < RI; r++)
#pragma unroll
                for (int q = 0; q < RJ; q++) acc[r][q] = gl * sS[(db + r * DR) * BV + jb * RJ + q];
            for (int m = 0; m < L; m++) {
                float a[RI], bb[RJ];
#pragma unroll
                for (int r = 0; r < RI; r++) a[r] = ld(sK + m * ldkt + db + r * DR);
#pragma unroll
                for (int q = 0; q < RJ; q++) bb[q] = sDd[m * BV + jb * RJ + q];
#pragma unroll
                for (int r = 0; r < RI; r++)
#pragma unroll
                    for (int q = 0; q < RJ; q++) acc[r][q] += a[r] * bb[q];
            }
#pragma unroll
            for (int r = 0; r < RI; r++)
#pragma unroll
                for (int q = 0; q < RJ; q++) sS[(db + r * DR) * BV + jb * RJ + q] = acc[r][q];
        }
    }
    __syncthreads();
    for (int x = tid; x < dk * BV; x += NT) {
        int d = x / BV, j = x % BV;
        if (j < jw) S[(size_t)d * dv + j0 + j] = sS[x];
    }
}

// The output pass, every chunk in parallel: O = scale (diag(gamma) Q Sc + P Delta).
// grid (nchunks, N, ceil(dv / BVO)). Shared: Q [C][dk+1], Sc [dk][BVO], P [C][C+1], Delta [C][BVO].
#define BVO         32
#define OUT_THREADS 256
template <typename T>
__global__ void __launch_bounds__(OUT_THREADS)
    delta_chunk_output(int T_, int H, int dk, int dv, int C, int nchunks, float scale, const T *q,
                       const float *prep, const float *states, float *o) {
    extern __shared__ float sm[];
    const int ldk = dk + 1, ldc = C + 1;
    float *sQ = sm, *sS = sQ + C * ldk, *sP = sS + dk * BVO, *sD = sP + C * ldc;
    const int c = blockIdx.x, n = blockIdx.y, b = n / H, h = n % H, j0 = blockIdx.z * BVO;
    const int tid = threadIdx.x, jw = min(BVO, dv - j0), t0 = c * C, L = min(C, T_ - t0);
    const size_t tok_k = (size_t)H * dk, tok_v = (size_t)H * dv;
    const float *W = prep + ((size_t)n * nchunks + c) * floats_per_chunk(dk, dv, C);
    const float *P = W + (size_t)C * dk + (size_t)C * dv, *G = P + (size_t)C * C;
    const float *Sc = states + ((size_t)n * nchunks + c) * state_floats_per_chunk(dk, dv, C);
    const float *D = Sc + (size_t)dk * dv;
    const T *qb = q + ((size_t)b * T_ + t0) * tok_k + (size_t)h * dk;
    for (int x = tid; x < C * dk; x += OUT_THREADS) {
        int i = x / dk, d = x % dk;
        sQ[i * ldk + d] = i < L ? __expf(G[i]) * ld(qb + (size_t)i * tok_k + d) : 0.0f;
    }
    for (int x = tid; x < dk * BVO; x += OUT_THREADS) {
        int d = x / BVO, j = x % BVO;
        sS[x] = j < jw ? Sc[(size_t)d * dv + j0 + j] : 0.0f;
    }
    for (int x = tid; x < C * C; x += OUT_THREADS) sP[(x / C) * ldc + x % C] = P[x];
    for (int x = tid; x < C * BVO; x += OUT_THREADS) {
        int i = x / BVO, j = x % BVO;
        sD[x] = j < jw ? D[(size_t)i * dv + j0 + j] : 0.0f;
    }
    __syncthreads();
    const int CR = C / RI;
    for (int tile = tid; tile < CR * (BVO / RJ); tile += OUT_THREADS) {
        const int ib = tile % CR, jb = tile / CR;
        float acc[RI][RJ] = {};
        for (int d = 0; d < dk; d++) {
            float a[RI], bb[RJ];
#pragma unroll
            for (int r = 0; r < RI; r++) a[r] = sQ[(ib + r * CR) * ldk + d];
#pragma unroll
            for (int qq = 0; qq < RJ; qq++) bb[qq] = sS[d * BVO + jb * RJ + qq];
#pragma unroll
            for (int r = 0; r < RI; r++)
#pragma unroll
                for (int qq = 0; qq < RJ; qq++) acc[r][qq] += a[r] * bb[qq];
        }
        for (int m = 0; m < C; m++) {
            float a[RI], bb[RJ];
#pragma unroll
            for (int r = 0; r < RI; r++)
                a[r] = sP[(ib + r * CR) * ldc + m]; // zero above the diagonal
#pragma unroll
            for (int qq = 0; qq < RJ; qq++) bb[qq] = sD[m * BVO + jb * RJ + qq];
#pragma unroll
            for (int r = 0; r < RI; r++)
#pragma unroll
                for (int qq = 0; qq < RJ; qq++) acc[r][qq] += a[r] * bb[qq];
        }
#pragma unroll
        for (int r = 0; r < RI; r++)
#pragma unroll
            for (int qq = 0; qq < RJ; qq++) {
                const int i = ib + r * CR, j = jb * RJ + qq;
                if (i < L && j < jw)
                    o[((size_t)b * T_ + t0 + i) * tok_v + (size_t)h * dv + j0 + j] =
                        scale * acc[r][qq];
            }
    }
}

template <typename T, int BV, int NT>
static int launch_state(int T_, int H, int N, int dk, int dv, int C, int nchunks, const void *k,
                        const float *prep, float *state, float *states, cudaStream_t st, err *e) {
    size_t smem =
        ((size_t)dk * BV + 2 * (size_t)C * (dk + 4) + 2 * (size_t)C * BV) * sizeof(float) +
        2 * (size_t)C * (dk + 16 / sizeof(T)) * sizeof(T);
    CUDA_TRY(cudaFuncSetAttribute(delta_chunk_state<T, BV, NT>,
                                  cudaFuncAttributeMaxDynamicSharedMemorySize, (int)smem),
             "gpu delta prefill: shared memory for the state pass");
    delta_chunk_state<T, BV, NT><<<dim3((dv + BV - 1) / BV, N), NT, smem, st>>>(
        T_, H, dk, dv, C, nchunks, (const T *)k, prep, state, states);
    CUDA_LAUNCHED("gpu delta prefill: state pass");
    return 0;
}

template <typename T>
static int launch_prefill(int B, int T_, int H, int dk, int dv, int C, float scale, const void *q,
                          const void *k, const void *v, const float *g, const float *beta,
                          float *state, float *o, void *scratch, cudaStream_t st, err *e) {
    int nchunks = (T_ + C - 1) / C, N = B * H;
    float *prep = (float *)scratch;
    float *states = prep + (size_t)N * nchunks * floats_per_chunk(dk, dv, C);
    size_t prep_smem = ((size_t)C * (dk + 1) + (size_t)C * ((dk > dv ? dk : dv) + 1) +
                        (size_t)C * (C + 1) + 3 * (size_t)C) *
                       sizeof(float);
    CUDA_TRY(cudaFuncSetAttribute(delta_chunk_prepare<T>,
                                  cudaFuncAttributeMaxDynamicSharedMemorySize, (int)prep_smem),
             "gpu delta prefill: shared memory for the prepare kernel");
    delta_chunk_prepare<T><<<dim3(nchunks, N), PREP_THREADS, prep_smem, st>>>(
        T_, H, dk, dv, C, (const T *)q, (const T *)k, (const T *)v, g, beta, prep);
    CUDA_LAUNCHED("gpu delta prefill: prepare");
    // fewer columns per block when there are few heads, so that the sequential pass still spreads
    // over the multiprocessors
    int rc =
        N * ((dv + 31) / 32) >= 132
            ? launch_state<T, 32, 256>(T_, H, N, dk, dv, C, nchunks, k, prep, state, states, st, e)
            : launch_state<T, 16, 128>(T_, H, N, dk, dv, C, nchunks, k, prep, state, states, st, e);
    if (rc) return -1;
    size_t out_smem =
        ((size_t)C * (dk + 1) + (size_t)dk * BVO + (size_t)C * (C + 1) + (size_t)C * BVO) *
        sizeof(float);
    CUDA_TRY(cudaFuncSetAttribute(delta_chunk_output<T>,
                                  cudaFuncAttributeMaxDynamicSharedMemorySize, (int)out_smem),
             "gpu delta prefill: shared memory for the output pass");
    delta_chunk_output<T><<<dim3(nchunks, N, (dv + BVO - 1) / BVO), OUT_THREADS, out_smem, st>>>(
        T_, H, dk, dv, C, nchunks, scale, (const T *)q, prep, states, o);
    CUDA_LAUNCHED("gpu delta prefill: output pass");
    return 0;
}

extern "C" int gpu_delta_prefill(int B, int T, int H, int dk, int dv, int chunk, float scale,
                                 int bf16, const void *q, const void *k, const void *v,
                                 const float *g, const float *beta, float *state, float *o,
                                 void *scratch, void *stream, err *e) {
    if (chunk != 16 && chunk != 32 && chunk != 64)
        return err_set(e, "gpu delta prefill: chunk %d (16, 32 or 64)", chunk);
    if (dk > 256 || dv > 1024 || dk % RI)
        return err_set(e,
                       "gpu delta prefill: dk=%d dv=%d not supported (dk <= 256, a multiple of %d)",
                       dk, dv, RI);
    if (T < 1) return 0;
    if (use_tc(dk, dv, chunk, bf16))
        return delta_tc_prefill(B, T, H, dk, dv, scale, 0, 0.0f, q, k, v, g, beta, state, o,
                                scratch, stream, e);
    cudaStream_t st = (cudaStream_t)stream;
    return bf16 ? launch_prefill<__nv_bfloat16>(B, T, H, dk, dv, chunk, scale, q, k, v, g, beta,
                                                state, o, scratch, st, e)
                : launch_prefill<float>(B, T, H, dk, dv, chunk, scale, q, k, v, g, beta, state, o,
                                        scratch, st, e);
}

// ---------------------------------------------------------------- kaczmarz rescale

// k' = c k, v' = c v with c = (|k|^2 + eps)^-1/2 per token and head (spec §8.5): the Kaczmarz
// write with beta = eta on (k', v') is exactly the GDN write on raw keys with
// beta = eta / (|k|^2 + eps). One block per token and head.
template <typename T>
__global__ void kaczmarz_rescale_kernel(int dk, int dv, float eps, const T *k, const T *v, T *k_out,
                                        T *v_out) {
    __shared__ float red[32];
    size_t n = blockIdx.x; // (b, t, h) flattened
    const T *kr = k + n * dk;
    float s = 0.0f;
    for (int d = threadIdx.x; d < dk; d += blockDim.x) {
        float x = ld(kr + d);
        s += x * x;
    }
    for (int off = 16; off; off >>= 1) s += __shfl_xor_sync(0xffffffffu, s, off);
    if ((threadIdx.x & 31) == 0) red[threadIdx.x >> 5] = s;
    __syncthreads();
    if (threadIdx.x == 0) {
        float tot = 0.0f;
        for (int w = 0; w < (int)(blockDim.x + 31) / 32; w++) tot += red[w];
        red[0] = rsqrtf(tot + eps);
    }
    __syncthreads();
    float c = red[0];
    for (int d = threadIdx.x; d < dk; d += blockDim.x) k_out[n * dk + d] = (T)(c * ld(kr + d));
    for (int d = threadIdx.x; d < dv; d += blockDim.x)
        v_out[n * dv + d] = (T)(c * ld(v + n * dv + d));
}

extern "C" int gpu_kaczmarz_rescale(size_t tokens_heads, int dk, int dv, float eps, int bf16,
                                    const void *k, const void *v, void *k_out, void *v_out,
                                    void *stream, err *e) {
    cudaStream_t st = (cudaStream_t)stream;
    if (!tokens_heads) return 0;
    if (bf16)
        kaczmarz_rescale_kernel<__nv_bfloat16><<<(unsigned)tokens_heads, 128, 0, st>>>(
            dk, dv, eps, (const __nv_bfloat16 *)k, (const __nv_bfloat16 *)v, (__nv_bfloat16 *)k_out,
            (__nv_bfloat16 *)v_out);
    else
        kaczmarz_rescale_kernel<float><<<(unsigned)tokens_heads, 128, 0, st>>>(
            dk, dv, eps, (const float *)k, (const float *)v, (float *)k_out, (float *)v_out);
    CUDA_LAUNCHED("gpu kaczmarz rescale");
    return 0;
}

// Kaczmarz prefill on raw keys (beta = eta): the tensor-core path folds the rescale into its
// prepare kernel; otherwise k, v are rescaled into the scratch's tail and run as GDN.
extern "C" size_t gpu_kaczmarz_scratch_bytes(int B, int T, int H, int dk, int dv, int chunk) {
    return gpu_delta_scratch_bytes(B, T, H, dk, dv, chunk) + 256 +
           (size_t)B * T * H * (dk + dv) * sizeof(float);
}

extern "C" int gpu_kaczmarz_prefill(int B, int T, int H, int dk, int dv, int chunk, float scale,
                                    int bf16, float eps, const void *q, const void *k,
                                    const void *v, const float *g, const float *eta, float *state,
                                    float *o, void *scratch, void *stream, err *e) {
    if (T < 1) return 0;
    if (use_tc(dk, dv, chunk, bf16))
        return delta_tc_prefill(B, T, H, dk, dv, scale, 1, eps, q, k, v, g, eta, state, o, scratch,
                                stream, e);
    const size_t es = bf16 ? 2 : 4, nk = (size_t)B * T * H * dk;
    char *tail =
        (char *)scratch + ((gpu_delta_scratch_bytes(B, T, H, dk, dv, chunk) + 255) & ~(size_t)255);
    void *k2 = tail, *v2 = tail + nk * es;
    if (gpu_kaczmarz_rescale((size_t)B * T * H, dk, dv, eps, bf16, k, v, k2, v2, stream, e))
        return -1;
    return gpu_delta_prefill(B, T, H, dk, dv, chunk, scale, bf16, q, k2, v2, g, eta, state, o,
                             scratch, stream, e);
}
