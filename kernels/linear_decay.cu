// linear_decay.cu: the decayed linear-attention cores on the GPU, gla (one log-decay per key
// channel, spec delta-family.md §4) and mamba2 (one per head, §5). Twins of mixers/gla.c and
// mixers/mamba2.c: tests/gpu checks them against the CPU reference.
//
// Per head:  S_t = diag(alpha_t) S_{t-1} + k_t v_t^T,   o_t = scale S_t^T q_t,   alpha = exp(g).
// per_key = 1 (gla): g [B, T, H, dk];  per_key = 0 (mamba2): g [B, T, H], the same decay on every
// row. Layout (fla): q, k [B, T, H, dk]; v [B, T, H, dv]; state [B, H, dk, dv] fp32, key-major.
//
// Prefill is the chunk form in three kernels (as delta.cu):
//   ld_chunk_prepare  (every chunk and head in parallel): with B_i = sum_{s<=i} g_s inside the
//   chunk
//       Qd_i = q_i * e^{B_i},  Kd_j = k_j * e^{B_last - B_j},  gl = e^{B_last},
//       P_ij = sum_d q_i[d] k_j[d] e^{B_i[d] - B_j[d]}  (j <= i)
//   ld_chunk_state    (one block per head and value slice, chunks in order):
//       Sc = S (saved);  S <- diag(gl) S + Kd^T V
//   ld_chunk_output   (every chunk, head and value slice in parallel):
//       O = scale (Qd Sc + P V)
// Every exponent is <= 0 for decays (g <= 0). The running sums B are kept in double, so that
// e^{B_i - B_j} keeps its digits however strong the decay earlier in the chunk (the CPU sums each
// exponent over its own range for the same reason). All other arithmetic is fp32.
#include <cuda_bf16.h>
#include <cuda_runtime.h>
#include <math.h>

#include "gpu.h"
#include "gpu_common.cuh"

#define LD_NT    256 // threads of the prefill kernels
#define LD_BV    32  // value columns per block of the state pass
#define LD_BVO   32  // value columns per block of the output pass
#define LD_STEPY 8   // row groups of the decode step

// ---------------------------------------------------------------- decode step

// One token for each head: grid (ceil(dv / 32), N), block (32, LD_STEPY). Thread (tx, ty) owns
// column j = 32 blockIdx.x + tx and rows ty, ty + LD_STEPY, ...; the readout sums over ty in
// shared memory.
template <typename T>
__global__ void __launch_bounds__(32 * LD_STEPY)
    ld_step_kernel(int dk, int dv, float scale, int per_key, const T *q, const T *k, const T *v,
                   const float *g, float *state, float *o) {
    __shared__ float red[LD_STEPY][33];
    const int n = blockIdx.y, tx = threadIdx.x, ty = threadIdx.y, j = blockIdx.x * 32 + tx;
    const T *qn = q + (size_t)n * dk, *kn = k + (size_t)n * dk;
    const float *gn = per_key ? g + (size_t)n * dk : g + n;
    float *S = state + (size_t)n * dk * dv;
    float part = 0.0f;
    if (j < dv) {
        const float vj = ld(v + (size_t)n * dv + j), a0 = expf(gn[0]);
        for (int i = ty; i < dk; i += LD_STEPY) {
            const float a = per_key ? expf(gn[i]) : a0;
            const float s = a * S[(size_t)i * dv + j] + ld(kn + i) * vj; // the write is not decayed
            S[(size_t)i * dv + j] = s;
            part += s * ld(qn + i);
        }
    }
    red[ty][tx] = part;
    __syncthreads();
    if (ty == 0 && j < dv) {
        float acc = 0.0f;
#pragma unroll
        for (int y = 0; y < LD_STEPY; y++) acc += red[y][tx];
        o[(size_t)n * dv + j] = scale * acc;
    }
}

// ---------------------------------------------------------------- decode step with probes

// The same step in fp32 that also sums what the probes of linear_decay.h need, per head, into
// acc [N][LDA_N + dk] with atomics (several blocks share a head): e^2, |S_t|^2, o^2, and per row d
// of the old state |S_{t-1}[d,:]|^2, which ld_probe_finalize weighs by (1 - alpha_d)^2 as the CPU
// does (the same products, so a row that overflows float overflows on both sides).
enum { LDA_E2, LDA_S2, LDA_O2, LDA_N };

__global__ void __launch_bounds__(32 * LD_STEPY)
    ld_step_probe_kernel(int dk, int dv, float scale, int per_key, const float *q, const float *k,
                         const float *v, const float *g, float *state, float *o, float *acc) {
    __shared__ float red[LD_STEPY][33], red2[LD_STEPY][33], colsum[LDA_N][32];
    const int n = blockIdx.y, tx = threadIdx.x, ty = threadIdx.y, j = blockIdx.x * 32 + tx;
    const float *qn = q + (size_t)n * dk, *kn = k + (size_t)n * dk;
    const float *gn = per_key ? g + (size_t)n * dk : g + n;
    float *S = state + (size_t)n * dk * dv;
    float part = 0.0f, ks = 0.0f, s2 = 0.0f, vj = 0.0f;
    const int live = j < dv; // every lane walks the rows: the row sums shuffle across the warp
    {
        vj = live ? v[(size_t)n * dv + j] : 0.0f;
        for (int i = ty; i < dk; i += LD_STEPY) {
            const float a = expf(per_key ? gn[i] : gn[0]);
            const float old = live ? S[(size_t)i * dv + j] : 0.0f, dec = a * old;
            float r2 = old * old; // this row's |S_{t-1}[i,:]|^2 over the warp's 32 columns
            for (int off = 16; off > 0; off >>= 1) r2 += __shfl_xor_sync(0xffffffffu, r2, off);
            if (tx == 0) atomicAdd(acc + (size_t)n * (LDA_N + dk) + LDA_N + i, r2);
            ks += kn[i] * dec; // (S~^T k)_j, the decayed state before the write
            const float s = dec + kn[i] * vj;
            if (live) S[(size_t)i * dv + j] = s;
            s2 += s * s;
            part += s * qn[i];
        }
    }
    red[ty][tx] = part, red2[ty][tx] = ks;
    __syncthreads();
    if (ty == 0) {
        float oj = 0.0f, ksj = 0.0f;
#pragma unroll
        for (int y = 0; y < LD_STEPY; y++) oj += red[y][tx], ksj += red2[y][tx];
        oj *= scale;
        const float e = vj - ksj;
        colsum[LDA_E2][tx] = j < dv ? e * e : 0.0f;
        colsum[LDA_O2][tx] = j < dv ? oj * oj : 0.0f;
        if (j < dv) o[(size_t)n * dv + j] = oj;
    }
    __syncthreads(); // red is reused
    red[ty][tx] = s2;
    __syncthreads();
    if (ty == 0) {
        float a = 0.0f;
#pragma unroll
        for (int y = 0; y < LD_STEPY; y++) a += red[y][tx];
        colsum[LDA_S2][tx] = a;
    }
    __syncthreads();
    if (ty == 0 && tx < LDA_N) { // one row of threads adds the block's column sums
        float a = 0.0f;
        for (int x = 0; x < 32; x++) a += colsum[tx][x];
        atomicAdd(acc + (size_t)n * (LDA_N + dk) + tx, a);
    }
}

__device__ static float ld_half_life(float g) {
    return g < 0.0f ? -0.69314718f / g : INFINITY;
}

// One thread per head: probes [np][N] of one token in the mixer's order (gla: nine decay probes
// then the shared nine; mamba2: g, alpha, half_life then the shared nine).
__global__ void ld_probe_finalize(int N, int dk, int dv, int per_key, const float *q,
                                  const float *k, const float *v, const float *g, const float *acc,
                                  float *probes) {
    const int n = blockIdx.x * blockDim.x + threadIdx.x;
    if (n >= N) return;
    float q2 = 0.0f, k2 = 0.0f, v2 = 0.0f;
    for (int i = 0; i < dk; i++) {
        q2 += q[(size_t)n * dk + i] * q[(size_t)n * dk + i];
        k2 += k[(size_t)n * dk + i] * k[(size_t)n * dk + i];
    }
    for (int j = 0; j < dv; j++) v2 += v[(size_t)n * dv + j] * v[(size_t)n * dv + j];
    int p = 0;
    if (per_key) {
        const float *gn = g + (size_t)n * dk;
        float gmin = gn[0], gmax = gn[0], gsum = 0.0f, asum = 0.0f;
        for (int d = 0; d < dk; d++) {
            gmin = fminf(gmin, gn[d]), gmax = fmaxf(gmax, gn[d]);
            gsum += gn[d], asum += expf(gn[d]);
        }
        const float gmean = gsum / (float)dk;
        const float vals[9] = {gmin,
                               gmean,
                               gmax,
                               expf(gmin),
                               asum / (float)dk,
                               expf(gmax),
                               ld_half_life(gmin),
                               ld_half_life(gmean),
                               ld_half_life(gmax)};
        for (int i = 0; i < 9; i++) probes[(size_t)(p++) * N + n] = vals[i];
    } else {
        const float gg = g[n];
        probes[(size_t)(p++) * N + n] = gg;
        probes[(size_t)(p++) * N + n] = expf(gg);
        probes[(size_t)(p++) * N + n] = ld_half_life(gg);
    }
    const float *a = acc + (size_t)n * (LDA_N + dk);
    float forget2 = 0.0f; // sum_d (1 - alpha_d)^2 |S_{t-1}[d,:]|^2 in the CPU's order
    for (int d = 0; d < dk; d++) {
        const float f = -expm1f(per_key ? g[(size_t)n * dk + d] : g[n]);
        forget2 = __fadd_rn(forget2, __fmul_rn(__fmul_rn(f, f), a[LDA_N + d]));
    }
    const float qn = sqrtf(q2), kn = sqrtf(k2), vn = sqrtf(v2), en = sqrtf(a[LDA_E2]);
    const float shared[9] = {qn,
                             kn,
                             vn,
                             kn * vn,
                             en,
                             vn > 0.0f ? en / vn : 0.0f,
                             sqrtf(forget2),
                             sqrtf(a[LDA_S2]),
                             sqrtf(a[LDA_O2])};
    for (int i = 0; i < 9; i++) probes[(size_t)(p++) * N + n] = shared[i];
}

extern "C" int gpu_ld_step_probes(int N, int dk, int dv, float scale, int per_key, const float *q,
                                  const float *k, const float *v, const float *g, float *state,
                                  float *o, float *acc, float *probes, void *stream, err *e) {
    cudaStream_t st = (cudaStream_t)stream;
    CUDA_TRY(cudaMemsetAsync(acc, 0, (size_t)N * (LDA_N + dk) * sizeof(float), st),
             "gpu ld probes");
    ld_step_probe_kernel<<<dim3((dv + 31) / 32, N), dim3(32, LD_STEPY), 0, st>>>(
        dk, dv, scale, per_key, q, k, v, g, state, o, acc);
    CUDA_LAUNCHED("gpu ld step with probes");
    ld_probe_finalize<<<(N + 63) / 64, 64, 0, st>>>(N, dk, dv, per_key, q, k, v, g, acc, probes);
    CUDA_LAUNCHED("gpu ld probes");
    return 0;
}

extern "C" int gpu_ld_step(int B, int H, int dk, int dv, float scale, int bf16, int per_key,
                           const void *q, const void *k, const void *v, const float *g,
                           float *state, float *o, void *stream, err *e) {
    cudaStream_t st = (cudaStream_t)stream;
    dim3 grid((dv + 31) / 32, B * H), block(32, LD_STEPY);
    if (bf16)
        ld_step_kernel<__nv_bfloat16><<<grid, block, 0, st>>>(
            dk, dv, scale, per_key, (const __nv_bfloat16 *)q, (const __nv_bfloat16 *)k,
            (const __nv_bfloat16 *)v, g, state, o);
    else
        ld_step_kernel<float><<<grid, block, 0, st>>>(dk, dv, scale, per_key, (const float *)q,
                                                      (const float *)k, (const float *)v, g, state,
                                                      o);
    CUDA_LAUNCHED("gpu ld step");
    return 0;
}

// ---------------------------------------------------------------- chunked prefill

// Prepare scratch per chunk and head: Qd [C, dk], Kd [C, dk], P [C, C], gl [dk].
__host__ __device__ static size_t ld_prep_floats(int dk, int C) {
    return 2 * (size_t)C * dk + (size_t)C * C + dk;
}

extern "C" size_t gpu_ld_scratch_bytes(int B, int T, int H, int dk, int dv, int chunk) {
    size_t nchunks = (size_t)(T + chunk - 1) / chunk;
    return nchunks * (size_t)B * H * (ld_prep_floats(dk, chunk) + (size_t)dk * dv) * sizeof(float);
}

// grid (nchunks, N), LD_NT threads. Shared: Q [C][dk+1], K [C][dk+1] (fp32), then the log-decays
// and their running sums Bs [C][dg+1] in double (dg = dk, or 1 for a scalar decay).
template <typename T>
__global__ void __launch_bounds__(LD_NT)
    ld_chunk_prepare(int T_, int H, int dk, int C, int per_key, const T *q, const T *k,
                     const float *g, float *prep) {
    extern __shared__ __align__(16) unsigned char smraw[];
    double *sB = reinterpret_cast<double *>(smraw);
    const int dg = per_key ? dk : 1, ldb = dg + 1, ldk = dk + 1;
    float *sQ = reinterpret_cast<float *>(sB + (size_t)C * ldb), *sK = sQ + C * ldk;
    const int c = blockIdx.x, n = blockIdx.y, b = n / H, h = n % H, tid = threadIdx.x;
    const int t0 = c * C, L = min(C, T_ - t0);
    const size_t tok_k = (size_t)H * dk, tok_g = (size_t)H * dg;
    const T *qb = q + ((size_t)b * T_ + t0) * tok_k + (size_t)h * dk;
    const T *kb = k + ((size_t)b * T_ + t0) * tok_k + (size_t)h * dk;
    const float *gb = g + ((size_t)b * T_ + t0) * tok_g + (size_t)h * dg;
    for (int x = tid; x < C * dk; x += LD_NT) {
        const int i = x / dk, d = x % dk;
        sQ[i * ldk + d] = i < L ? ld(qb + (size_t)i * tok_k + d) : 0.0f;
        sK[i * ldk + d] = i < L ? ld(kb + (size_t)i * tok_k + d) : 0.0f;
    }
    for (int x = tid; x < C * dg; x += LD_NT) {
        const int i = x / dg, d = x % dg;
        sB[i * ldb + d] = i < L ? (double)gb[(size_t)i * tok_g + d] : 0.0;
    }
    __syncthreads();
    float *Qd = prep + ((size_t)n * gridDim.x + c) * ld_prep_floats(dk, C);
    float *Kd = Qd + (size_t)C * dk, *P = Kd + (size_t)C * dk, *gl = P + (size_t)C * C;
    // Per decay column d: Kd from the suffix sums (read the raw g first), then Qd from the prefix
    // sums, which replace g in place. Each exponent is its own running sum, never a difference.
    for (int d = tid; d < dk; d += LD_NT) {
        const int dc = per_key ? d : 0;
        double acc = 0.0;
        for (int j = C - 1; j >= 0; j--) {
            Kd[(size_t)j * dk + d] = j < L ? sK[j * ldk + d] * expf((float)acc) : 0.0f;
            if (j < L) acc += sB[j * ldb + dc];
        }
        gl[d] = expf((float)acc);
    }
    __syncthreads(); // every thread has read the raw g before the prefix sums overwrite it
    for (int d = tid; d < dg; d += LD_NT) {
        double acc = 0.0;
        for (int i = 0; i < C; i++) {
            acc += sB[i * ldb + d];
            sB[i * ldb + d] = acc;
        }
    }
    __syncthreads();
    for (int x = tid; x < C * dk; x += LD_NT) {
        const int i = x / dk, d = x % dk;
        Qd[x] = i < L ? sQ[i * ldk + d] * expf((float)sB[i * ldb + (per_key ? d : 0)]) : 0.0f;
    }
    // P (lower triangle with the diagonal, zero elsewhere)
    for (int x = tid; x < C * C; x += LD_NT) {
        const int i = x / C, j = x % C;
        float acc = 0.0f;
        if (j <= i && i < L) {
            if (per_key) {
                for (int d = 0; d < dk; d++)
                    acc += sQ[i * ldk + d] * sK[j * ldk + d] *
                           expf((float)(sB[i * ldb + d] - sB[j * ldb + d]));
            } else {
                for (int d = 0; d < dk; d++) acc += sQ[i * ldk + d] * sK[j * ldk + d];
                acc *= expf((float)(sB[i * ldb] - sB[j * ldb]));
            }
        }
        P[x] = acc;
    }
}

// The sequential pass: grid (ceil(dv / LD_BV), N). Shared: S [dk][LD_BV], Kd [C][dk],
// V [C][LD_BV], gl [dk].
template <typename T>
__global__ void __launch_bounds__(LD_NT)
    ld_chunk_state(int T_, int H, int dk, int dv, int C, int nchunks, const T *v, const float *prep,
                   float *state, float *states) {
    extern __shared__ __align__(16) float sm[];
    float *sS = sm, *sKd = sS + dk * LD_BV, *sV = sKd + C * dk, *sgl = sV + C * LD_BV;
    const int n = blockIdx.y, b = n / H, h = n % H, j0 = blockIdx.x * LD_BV, tid = threadIdx.x;
    const int jw = min(LD_BV, dv - j0);
    const size_t tok_v = (size_t)H * dv;
    float *S = state + (size_t)n * dk * dv;
    for (int x = tid; x < dk * LD_BV; x += LD_NT) {
        const int d = x / LD_BV, j = x % LD_BV;
        sS[x] = j < jw ? S[(size_t)d * dv + j0 + j] : 0.0f;
    }
    for (int c = 0; c < nchunks; c++) {
        const int t0 = c * C, L = min(C, T_ - t0);
        const float *Kd = prep + ((size_t)n * nchunks + c) * ld_prep_floats(dk, C) + (size_t)C * dk;
        const float *gl = Kd + (size_t)C * dk + (size_t)C * C;
        float *Sc = states + ((size_t)n * nchunks + c) * dk * dv;
        const T *vb = v + ((size_t)b * T_ + t0) * tok_v + (size_t)h * dv + j0;
        __syncthreads(); // the previous chunk's update is done
        for (int x = tid; x < dk * LD_BV; x += LD_NT) {
            const int d = x / LD_BV, j = x % LD_BV;
            if (j < jw) Sc[(size_t)d * dv + j0 + j] = sS[x];
        }
        for (int x = tid; x < C * dk; x += LD_NT) sKd[x] = Kd[x];
        for (int x = tid; x < C * LD_BV; x += LD_NT) {
            const int i = x / LD_BV, j = x % LD_BV;
            sV[x] = i < L && j < jw ? ld(vb + (size_t)i * tok_v + j) : 0.0f;
        }
        for (int d = tid; d < dk; d += LD_NT) sgl[d] = gl[d];
        __syncthreads();
        for (int x = tid; x < dk * LD_BV; x += LD_NT) {
            const int d = x / LD_BV, j = x % LD_BV;
            float acc = sgl[d] * sS[x];
            for (int i = 0; i < L; i++) acc += sKd[i * dk + d] * sV[i * LD_BV + j];
            sS[x] = acc;
        }
    }
    __syncthreads();
    for (int x = tid; x < dk * LD_BV; x += LD_NT) {
        const int d = x / LD_BV, j = x % LD_BV;
        if (j < jw) S[(size_t)d * dv + j0 + j] = sS[x];
    }
}

// The output pass: grid (nchunks, N, ceil(dv / LD_BVO)). Shared: Qd [C][dk+1], Sc [dk][LD_BVO],
// P [C][C+1], V [C][LD_BVO].
template <typename T>
__global__ void __launch_bounds__(LD_NT)
    ld_chunk_output(int T_, int H, int dk, int dv, int C, int nchunks, float scale, const T *v,
                    const float *prep, const float *states, float *o) {
    extern __shared__ __align__(16) float sm[];
    const int ldk = dk + 1, ldc = C + 1;
    float *sQ = sm, *sS = sQ + C * ldk, *sP = sS + dk * LD_BVO, *sV = sP + C * ldc;
    const int c = blockIdx.x, n = blockIdx.y, b = n / H, h = n % H, j0 = blockIdx.z * LD_BVO;
    const int tid = threadIdx.x, jw = min(LD_BVO, dv - j0), t0 = c * C, L = min(C, T_ - t0);
    const size_t tok_v = (size_t)H * dv;
    const float *Qd = prep + ((size_t)n * nchunks + c) * ld_prep_floats(dk, C);
    const float *P = Qd + 2 * (size_t)C * dk;
    const float *Sc = states + ((size_t)n * nchunks + c) * dk * dv;
    const T *vb = v + ((size_t)b * T_ + t0) * tok_v + (size_t)h * dv + j0;
    for (int x = tid; x < C * dk; x += LD_NT) sQ[(x / dk) * ldk + x % dk] = Qd[x];
    for (int x = tid; x < dk * LD_BVO; x += LD_NT) {
        const int d = x / LD_BVO, j = x % LD_BVO;
        sS[x] = j < jw ? Sc[(size_t)d * dv + j0 + j] : 0.0f;
    }
    for (int x = tid; x < C * C; x += LD_NT) sP[(x / C) * ldc + x % C] = P[x];
    for (int x = tid; x < C * LD_BVO; x += LD_NT) {
        const int i = x / LD_BVO, j = x % LD_BVO;
        sV[x] = i < L && j < jw ? ld(vb + (size_t)i * tok_v + j) : 0.0f;
    }
    __syncthreads();
    for (int x = tid; x < C * LD_BVO; x += LD_NT) {
        const int i = x / LD_BVO, j = x % LD_BVO;
        if (i >= L || j >= jw) continue;
        float acc = 0.0f;
        for (int d = 0; d < dk; d++) acc += sQ[i * ldk + d] * sS[d * LD_BVO + j];
        for (int m = 0; m <= i; m++) acc += sP[i * ldc + m] * sV[m * LD_BVO + j];
        o[((size_t)b * T_ + t0 + i) * tok_v + (size_t)h * dv + j0 + j] = scale * acc;
    }
}

template <typename T>
static int ld_launch_prefill(int B, int T_, int H, int dk, int dv, int C, float scale, int per_key,
                             const void *q, const void *k, const void *v, const float *g,
                             float *state, float *o, void *scratch, cudaStream_t st, err *e) {
    const int nchunks = (T_ + C - 1) / C, N = B * H, dg = per_key ? dk : 1;
    float *prep = (float *)scratch;
    float *states = prep + (size_t)N * nchunks * ld_prep_floats(dk, C);
    size_t s1 = (size_t)C * (dg + 1) * sizeof(double) + 2 * (size_t)C * (dk + 1) * sizeof(float);
    size_t s2 = ((size_t)dk * LD_BV + (size_t)C * dk + (size_t)C * LD_BV + dk) * sizeof(float);
    size_t s3 =
        ((size_t)C * (dk + 1) + (size_t)dk * LD_BVO + (size_t)C * (C + 1) + (size_t)C * LD_BVO) *
        sizeof(float);
    if (s1 > 227 * 1024 || s2 > 227 * 1024 || s3 > 227 * 1024)
        return err_set(e, "gpu ld prefill: dk=%d with chunk %d needs too much shared memory", dk,
                       C);
    CUDA_TRY(cudaFuncSetAttribute(ld_chunk_prepare<T>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                  (int)s1),
             "gpu ld prefill: shared memory (prepare)");
    ld_chunk_prepare<T><<<dim3(nchunks, N), LD_NT, s1, st>>>(T_, H, dk, C, per_key, (const T *)q,
                                                             (const T *)k, g, prep);
    CUDA_LAUNCHED("gpu ld prefill: prepare");
    CUDA_TRY(cudaFuncSetAttribute(ld_chunk_state<T>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                  (int)s2),
             "gpu ld prefill: shared memory (state)");
    ld_chunk_state<T><<<dim3((dv + LD_BV - 1) / LD_BV, N), LD_NT, s2, st>>>(
        T_, H, dk, dv, C, nchunks, (const T *)v, prep, state, states);
    CUDA_LAUNCHED("gpu ld prefill: state pass");
    CUDA_TRY(cudaFuncSetAttribute(ld_chunk_output<T>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                  (int)s3),
             "gpu ld prefill: shared memory (output)");
    ld_chunk_output<T><<<dim3(nchunks, N, (dv + LD_BVO - 1) / LD_BVO), LD_NT, s3, st>>>(
        T_, H, dk, dv, C, nchunks, scale, (const T *)v, prep, states, o);
    CUDA_LAUNCHED("gpu ld prefill: output pass");
    return 0;
}

extern "C" int gpu_ld_prefill(int B, int T, int H, int dk, int dv, int chunk, float scale, int bf16,
                              int per_key, const void *q, const void *k, const void *v,
                              const float *g, float *state, float *o, void *scratch, void *stream,
                              err *e) {
    if (chunk != 16 && chunk != 32 && chunk != 64)
        return err_set(e, "gpu ld prefill: chunk %d (16, 32 or 64)", chunk);
    if (T < 1) return 0;
    cudaStream_t st = (cudaStream_t)stream;
    return bf16 ? ld_launch_prefill<__nv_bfloat16>(B, T, H, dk, dv, chunk, scale, per_key, q, k, v,
                                                   g, state, o, scratch, st, e)
                : ld_launch_prefill<float>(B, T, H, dk, dv, chunk, scale, per_key, q, k, v, g,
                                           state, o, scratch, st, e);
}
