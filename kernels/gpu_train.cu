// gpu_train.cu: the trainer's model pass and AdamW on the GPU (gpu_train.h), line for line the twin
// of train/model_grad.c (forward, backward) and train/ops.inc (each block's derivative). Shapes as
// there: N = B T rows, C hidden, Kd = H dk, Vd = H dv, I the MLP width, V the vocabulary.
//
// Reductions that make one number from many (a row's norm, a column's weight gradient, the loss)
// run in a fixed order (a block's tree, or the host summing per-row values in order), so a run
// gives the same bits every time. Products are cuBLAS SGEMM in pedantic fp32.
#include <cublas_v2.h>
#include <cuda_runtime.h>

#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <vector>

#include "gpu_common.cuh"
#include "gpu_train.h"

#define TB 256 // threads of the row and column kernels

// ---------------------------------------------------------------------------------------------
// block reductions

// the sum of v over the block (blockDim.x a multiple of 32, <= 1024) in float throughout
// (gpu_common.cuh's block_sum shuffles in double); every thread gets it
__device__ float block_sumf(float v, float *red) {
    int lane = threadIdx.x & 31, w = threadIdx.x >> 5, nw = blockDim.x >> 5;
    v = warp_sumf(v);
    __syncthreads();
    if (lane == 0) red[w] = v;
    __syncthreads();
    float s = 0;
    for (int i = 0; i < nw; i++) s += red[i];
    return s;
}

__device__ __forceinline__ float sigm(float x) {
    return 1.0f / (1.0f + expf(-x));
}

// ---------------------------------------------------------------------------------------------
// pointwise and row kernels

__global__ void k_embed(float *x, const float *E, const int32_t *ids, int N, int C) {
    int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= (int64_t)N * C) return;
    int r = (int)(i / C), c = (int)(i % C);
    x[i] = E[(int64_t)ids[r] * C + c];
}

// gE[v] += sum of dx rows whose id is v, in row order: rows listed by id (perm, start [V + 1])
__global__ void k_embed_bwd(float *gE, const float *dx, const int32_t *perm, const int32_t *start,
                            int V, int C) {
    int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= (int64_t)V * C) return;
    int v = (int)(i / C), c = (int)(i % C);
    float s = 0;
    for (int j = start[v]; j < start[v + 1]; j++) s += dx[(int64_t)perm[j] * C + c];
    gE[i] += s;
}

// one block a row: Y = X rstd w, rstd saved
__global__ void k_rmsnorm_fwd(float *Y, float *rstd, const float *X, const float *w, int n,
                              float eps) {
    __shared__ float red[32];
    const float *x = X + (int64_t)blockIdx.x * n;
    float s = 0;
    for (int i = threadIdx.x; i < n; i += blockDim.x) s += x[i] * x[i];
    s = block_sumf(s, red);
    float r = rsqrtf(s / n + eps);
    if (threadIdx.x == 0) rstd[blockIdx.x] = r;
    float *y = Y + (int64_t)blockIdx.x * n;
    for (int i = threadIdx.x; i < n; i += blockDim.x) y[i] = x[i] * r * w[i];
}

// dX += r w dy - r^3 x mean(dy w x)
__global__ void k_rmsnorm_bwd(float *dX, const float *dY, const float *X, const float *rstd,
                              const float *w, int n) {
    __shared__ float red[32];
    int64_t o = (int64_t)blockIdx.x * n;
    float d = 0;
    for (int i = threadIdx.x; i < n; i += blockDim.x) d += dY[o + i] * w[i] * X[o + i];
    d = block_sumf(d, red);
    float r = rstd[blockIdx.x], c = r * r * r * d / n;
    for (int i = threadIdx.x; i < n; i += blockDim.x)
        dX[o + i] += r * w[i] * dY[o + i] - c * X[o + i];
}

// FusedRMSNormGated forward on rows of n: Y = RMSNorm_w(X) * z sigmoid(z) (Z NULL: no gate)
__global__ void k_gnorm_fwd(float *Y, float *rstd, const float *X, const float *Z, const float *w,
                            int n, float eps) {
    __shared__ float red[32];
    int64_t o = (int64_t)blockIdx.x * n;
    float s = 0;
    for (int i = threadIdx.x; i < n; i += blockDim.x) s += X[o + i] * X[o + i];
    s = block_sumf(s, red);
    float r = rsqrtf(s / n + eps);
    if (threadIdx.x == 0) rstd[blockIdx.x] = r;
    for (int i = threadIdx.x; i < n; i += blockDim.x) {
        float y = X[o + i] * r * w[i];
        if (Z) y *= Z[o + i] * sigm(Z[o + i]);
        Y[o + i] = y;
    }
}

// its backward for dX and dZ (dw: k_colsum_gnorm)
__global__ void k_gnorm_bwd(float *dX, float *dZ, const float *dY, const float *X, const float *Z,
                            const float *rstd, const float *w, int n) {
    __shared__ float red[32];
    int64_t o = (int64_t)blockIdx.x * n;
    float r = rstd[blockIdx.x], d = 0;
    for (int i = threadIdx.x; i < n; i += blockDim.x) {
        float du = dY[o + i];
        if (Z) {
            float z = Z[o + i], s = sigm(z), u = X[o + i] * r * w[i];
            dZ[o + i] += dY[o + i] * u * s * (1 + z * (1 - s));
            du *= z * s;
        }
        d += du * w[i] * X[o + i];
    }
    d = block_sumf(d, red);
    float c = r * r * r * d / n;
    for (int i = threadIdx.x; i < n; i += blockDim.x) {
        float du = dY[o + i];
        if (Z) du *= Z[o + i] * sigm(Z[o + i]);
        dX[o + i] += r * w[i] * du - c * X[o + i];
    }
}

// column sums over rows, one block a column, fixed order. mode 0: dw[c] += sum_r dY x rstd[r]
// (RMSNorm), 1: the gated norm's (dY z sigmoid(z) x rstd), 2: plain column sum of dY (biases).
// Rows of n columns; rstd per row (for the gated norm rows are (token, head) pairs).
__global__ void k_colsum(float *out, const float *dY, const float *X, const float *Z,
                         const float *rstd, int N, int n, int mode) {
    __shared__ float red[32];
    int c = blockIdx.x;
    float s = 0;
    for (int r = threadIdx.x; r < N; r += blockDim.x) {
        int64_t i = (int64_t)r * n + c;
        float d = dY[i];
        if (mode == 1 && Z) d *= Z[i] * sigm(Z[i]);
        s += mode == 2 ? d : d * X[i] * rstd[r];
    }
    s = block_sumf(s, red);
    if (threadIdx.x == 0) out[c] += s;
}

__global__ void k_silu_fwd(float *Y, const float *X, int64_t n) {
    int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) Y[i] = X[i] / (1.0f + expf(-X[i]));
}

// dX (= or +=) dY silu'(X)
__global__ void k_silu_bwd(float *dX, const float *dY, const float *X, int64_t n, int acc) {
    int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n) return;
    float s = sigm(X[i]), g = dY[i] * s * (1 + X[i] * (1 - s));
    dX[i] = acc ? dX[i] + g : g;
}

// rows of n (one warp a row): Y = X / sqrt(|X|^2 + eps), inv saved
__global__ void k_l2norm_fwd(float *Y, float *inv, const float *X, int rows, int n, float eps) {
    int r = blockIdx.x * (blockDim.x >> 5) + (threadIdx.x >> 5), lane = threadIdx.x & 31;
    if (r >= rows) return;
    const float *x = X + (int64_t)r * n;
    float s = 0;
    for (int i = lane; i < n; i += 32) s += x[i] * x[i];
    s = warp_sumf(s);
    float v = rsqrtf(s + eps);
    if (lane == 0) inv[r] = v;
    for (int i = lane; i < n; i += 32) Y[(int64_t)r * n + i] = x[i] * v;
}

// dX = inv (dY - Y (Y . dY))
__global__ void k_l2norm_bwd(float *dX, const float *dY, const float *Y, const float *inv, int rows,
                             int n) {
    int r = blockIdx.x * (blockDim.x >> 5) + (threadIdx.x >> 5), lane = threadIdx.x & 31;
    if (r >= rows) return;
    int64_t o = (int64_t)r * n;
    float d = 0;
    for (int i = lane; i < n; i += 32) d += Y[o + i] * dY[o + i];
    d = warp_sumf(d);
    for (int i = lane; i < n; i += 32) dX[o + i] = inv[r] * (dY[o + i] - Y[o + i] * d);
}

// causal depthwise conv over B sequences of T: Y[t, d] = sum_i w[d, i] U[t - W + 1 + i, d] + b
__global__ void k_conv_fwd(float *Y, const float *U, const float *w, const float *b, int N, int T,
                           int D, int W) {
    int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= (int64_t)N * D) return;
    int r = (int)(i / D), d = (int)(i % D), t = r % T;
    float s = 0;
    for (int j = 0; j < W; j++) {
        int tt = t - W + 1 + j;
        if (tt >= 0) s += U[(int64_t)(r - t + tt) * D + d] * w[d * W + j];
    }
    Y[i] = b ? s + b[d] : s;
}

// dU[t, d] = sum_j dY[t + W - 1 - j, d] w[d, j] (within the sequence)
__global__ void k_conv_bwd_u(float *dU, const float *dY, const float *w, int N, int T, int D,
                             int W) {
    int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= (int64_t)N * D) return;
    int r = (int)(i / D), d = (int)(i % D), t = r % T;
    float s = 0;
    for (int j = 0; j < W; j++) {
        int tt = t + W - 1 - j;
        if (tt < T) s += dY[(int64_t)(r - t + tt) * D + d] * w[d * W + j];
    }
    dU[i] = s;
}

// dw[d, j] += sum over rows of dY[t, d] U[t - W + 1 + j, d]; one block per (d, j)
__global__ void k_conv_bwd_w(float *dw, const float *dY, const float *U, int N, int T, int D,
                             int W) {
    __shared__ float red[32];
    int d = blockIdx.x / W, j = blockIdx.x % W;
    float s = 0;
    for (int r = threadIdx.x; r < N; r += blockDim.x) {
        int t = r % T, tt = t - W + 1 + j;
        if (tt >= 0) s += dY[(int64_t)r * D + d] * U[(int64_t)(r - t + tt) * D + d];
    }
    s = block_sumf(s, red);
    if (threadIdx.x == 0) dw[blockIdx.x] += s;
}

__global__ void k_decay_fwd(float *G, const float *Xa, const float *A_log, const float *dt_bias,
                            int64_t n, int H) {
    int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n) return;
    int h = (int)(i % H);
    float x = Xa[i] + dt_bias[h];
    G[i] = -expf(A_log[h]) * (x > 20.0f ? x : log1pf(expf(x)));
}

// dXa = -dG exp(A) sigmoid(a + dt) (dA_log, ddt_bias: k_decay_params)
__global__ void k_decay_bwd(float *dXa, const float *dG, const float *Xa, const float *A_log,
                            const float *dt_bias, int64_t n, int H) {
    int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n) return;
    int h = (int)(i % H);
    float x = Xa[i] + dt_bias[h];
    dXa[i] = -dG[i] * expf(A_log[h]) * (x > 20.0f ? 1.0f : sigm(x));
}

// one block a head: dA_log[h] += sum dG G, ddt_bias[h] += sum dXa
__global__ void k_decay_params(float *dA, float *ddt, const float *dG, const float *G,
                               const float *dXa, int N, int H) {
    __shared__ float red[32];
    int h = blockIdx.x;
    float a = 0, b = 0;
    for (int r = threadIdx.x; r < N; r += blockDim.x) {
        int64_t i = (int64_t)r * H + h;
        a += dG[i] * G[i], b += dXa[i];
    }
    a = block_sumf(a, red);
    b = block_sumf(b, red);
    if (threadIdx.x == 0) dA[h] += a, ddt[h] += b;
}

__global__ void k_sigmoid_fwd(float *B, const float *X, int64_t n, float mul) {
    int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) B[i] = mul * sigm(X[i]);
}

__global__ void k_sigmoid_bwd(float *dX, const float *dB, const float *B, int64_t n, float mul) {
    int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n) return;
    float s = B[i] / mul;
    dX[i] = dB[i] * mul * s * (1 - s);
}

__global__ void k_fill(float *x, int64_t n, float v) {
    int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) x[i] = v;
}

__global__ void k_add(float *y, const float *x, int64_t n) {
    int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) y[i] += x[i];
}

__global__ void k_swiglu_fwd(float *A, const float *H1, const float *H2, int64_t n) {
    int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) A[i] = H1[i] / (1.0f + expf(-H1[i])) * H2[i];
}

__global__ void k_swiglu_bwd(float *dH1, float *dH2, const float *dA, const float *H1,
                             const float *H2, int64_t n) {
    int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n) return;
    float s = sigm(H1[i]);
    dH2[i] = dA[i] * H1[i] * s;
    dH1[i] = dA[i] * H2[i] * s * (1 + H1[i] * (1 - s));
}

// one block a row: loss (wgt (lse - l[target])) and hit into per-row buffers; dL = wgt (p - onehot)
__global__ void k_xent(float *dL, float *rowloss, int32_t *hit, const float *L,
                       const int32_t *target, int V, float wgt) {
    __shared__ float red[32];
    __shared__ float smax;
    __shared__ int sarg;
    int r = blockIdx.x;
    const float *l = L + (int64_t)r * V;
    int tg = target[r];
    if (tg < 0) {
        if (dL)
            for (int i = threadIdx.x; i < V; i += blockDim.x) dL[(int64_t)r * V + i] = 0;
        if (threadIdx.x == 0) rowloss[r] = 0, hit[r] = 0;
        return;
    }
    // the argmax as the CPU finds it, the first largest: each thread's first largest, then the
    // largest value with the smallest index over the threads
    __shared__ float bv[1024];
    __shared__ int bi[1024];
    float mv = -INFINITY;
    int mi = V;
    for (int i = threadIdx.x; i < V; i += blockDim.x)
        if (l[i] > mv || mi == V) mv = l[i], mi = i;
    bv[threadIdx.x] = mv, bi[threadIdx.x] = mi;
    __syncthreads();
    for (int w = blockDim.x / 2; w > 0; w >>= 1) {
        if (threadIdx.x < w) {
            float ov = bv[threadIdx.x + w];
            int oi = bi[threadIdx.x + w];
            if (ov > bv[threadIdx.x] || (ov == bv[threadIdx.x] && oi < bi[threadIdx.x]))
                bv[threadIdx.x] = ov, bi[threadIdx.x] = oi;
        }
        __syncthreads();
    }
    if (threadIdx.x == 0) smax = bv[0], sarg = bi[0];
    __syncthreads();
    float m = smax, s = 0;
    for (int i = threadIdx.x; i < V; i += blockDim.x) s += expf(l[i] - m);
    s = block_sumf(s, red);
    float lse = m + logf(s);
    if (threadIdx.x == 0) rowloss[r] = wgt * (lse - l[tg]), hit[r] = sarg == tg;
    if (dL)
        for (int i = threadIdx.x; i < V; i += blockDim.x)
            dL[(int64_t)r * V + i] = wgt * expf(l[i] - lse) - (i == tg ? wgt : 0.0f);
}

// ---------------------------------------------------------------------------------------------
// the delta-rule core: one block per (sequence, head), state [dk, dv] in shared memory

struct core_args {
    const float *q, *k, *v, *g, *beta; // rows ldk (q, k), ldv (v), ldg (g, beta)
    float *o, *ckpt, *scratch;
    const float *dO;
    float *dq, *dk, *dv, *dg, *dbeta;
    int T, H, dk_, dv_, ldk, ldv, ldg, chunk, nck, kacz;
    float scale, eps;
};

__global__ void k_delta_fwd(core_args a) {
    extern __shared__ float sm[];
    int b = blockIdx.x / a.H, h = blockIdx.x % a.H, dk = a.dk_, dv = a.dv_;
    float *S = sm, *kq = S + dk * dv; // kq: k [dk], q [dk]
    int64_t r0 = (int64_t)b * a.T;
    const float *q = a.q + r0 * a.ldk + h * dk, *k = a.k + r0 * a.ldk + h * dk;
    const float *v = a.v + r0 * a.ldv + h * dv;
    float *o = a.o + r0 * a.ldv + h * dv;
    float *ck = a.ckpt + (int64_t)blockIdx.x * a.nck * dk * dv;
    for (int i = threadIdx.x; i < dk * dv; i += blockDim.x) S[i] = 0;
    for (int t = 0; t < a.T; t++) {
        __syncthreads();
        if (t % a.chunk == 0)
            for (int i = threadIdx.x; i < dk * dv; i += blockDim.x)
                ck[(int64_t)(t / a.chunk) * dk * dv + i] = S[i];
        for (int i = threadIdx.x; i < dk; i += blockDim.x)
            kq[i] = k[(int64_t)t * a.ldk + i], kq[dk + i] = q[(int64_t)t * a.ldk + i];
        __syncthreads();
        float alpha = a.g ? expf(a.g[(r0 + t) * a.ldg + h]) : 1.0f;
        float beta = a.beta[(r0 + t) * a.ldg + h];
        if (a.kacz) {
            float n2 = 0;
            for (int i = 0; i < dk; i++) n2 += kq[i] * kq[i];
            beta = beta / (n2 + a.eps);
        }
        for (int j = threadIdx.x; j < dv; j += blockDim.x) {
            float u = 0;
            for (int i = 0; i < dk; i++) u += S[i * dv + j] * kq[i];
            float e = v[(int64_t)t * a.ldv + j] - alpha * u, oj = 0;
            for (int i = 0; i < dk; i++) {
                float sij = alpha * S[i * dv + j] + beta * kq[i] * e;
                S[i * dv + j] = sij;
                oj += sij * (a.scale * kq[dk + i]);
            }
            o[(int64_t)t * a.ldv + j] = oj;
        }
    }
}

// shared: dS, Sp, Sn [dk][dv + 1] (padded: row sums by thread per row are conflict-free), and
// vectors k, q [dk], do, e, de [dv], Se, sd [dk], a reduction area [dv + 32]
__global__ void k_delta_bwd(core_args a) {
    extern __shared__ float sm[];
    int b = blockIdx.x / a.H, h = blockIdx.x % a.H, dk = a.dk_, dv = a.dv_, P = dv + 1;
    float *dS = sm, *Sp = dS + dk * P, *Sn = Sp + dk * P, *kk = Sn + dk * P, *qq = kk + dk;
    float *dov = qq + dk, *ev = dov + dv, *dev = ev + dv, *Se = dev + dv, *sd = Se + dk;
    float *red = sd + dk, *cred = red + 32;
    __shared__ float sh_db;
    int64_t r0 = (int64_t)b * a.T;
    const float *q = a.q + r0 * a.ldk + h * dk, *k = a.k + r0 * a.ldk + h * dk;
    const float *v = a.v + r0 * a.ldv + h * dv, *dO = a.dO + r0 * a.ldv + h * dv;
    float *dq = a.dq + r0 * a.ldk + h * dk, *dkg = a.dk + r0 * a.ldk + h * dk;
    float *dvg = a.dv + r0 * a.ldv + h * dv;
    const float *ck = a.ckpt + (int64_t)blockIdx.x * a.nck * dk * dv;
    float *st = a.scratch + (int64_t)blockIdx.x * (a.chunk + 1) * dk * dv; // [chunk + 1][dk][dv]
    int64_t ss = (int64_t)dk * dv;
    for (int i = threadIdx.x; i < dk * P; i += blockDim.x) dS[i] = 0;
    for (int c = a.nck - 1; c >= 0; c--) {
        int t0 = c * a.chunk, len = a.T - t0 < a.chunk ? a.T - t0 : a.chunk;
        // recompute the chunk's states into st[0..len] (Sp as the working state)
        __syncthreads();
        for (int i = threadIdx.x; i < dk * dv; i += blockDim.x) {
            float x = ck[(int64_t)c * ss + i];
            Sp[(i / dv) * P + i % dv] = x, st[i] = x;
        }
        for (int j = 0; j < len; j++) {
            int t = t0 + j;
            __syncthreads();
            for (int i = threadIdx.x; i < dk; i += blockDim.x) kk[i] = k[(int64_t)t * a.ldk + i];
            __syncthreads();
            float alpha = a.g ? expf(a.g[(r0 + t) * a.ldg + h]) : 1.0f;
            float beta = a.beta[(r0 + t) * a.ldg + h];
            if (a.kacz) {
                float n2 = 0;
                for (int i = 0; i < dk; i++) n2 += kk[i] * kk[i];
                beta = beta / (n2 + a.eps);
            }
            for (int jj = threadIdx.x; jj < dv; jj += blockDim.x) {
                float u = 0;
                for (int i = 0; i < dk; i++) u += Sp[i * P + jj] * kk[i];
                float e = v[(int64_t)t * a.ldv + jj] - alpha * u;
                for (int i = 0; i < dk; i++) {
                    float x = alpha * Sp[i * P + jj] + beta * kk[i] * e;
                    Sp[i * P + jj] = x;
                    st[(int64_t)(j + 1) * ss + i * dv + jj] = x;
                }
            }
        }
        // walk the chunk backwards
        for (int j = len - 1; j >= 0; j--) {
            int t = t0 + j;
            __syncthreads();
            for (int i = threadIdx.x; i < dk * dv; i += blockDim.x) {
                int ri = i / dv, cj = i % dv;
                Sn[ri * P + cj] = st[(int64_t)(j + 1) * ss + i];
                Sp[ri * P + cj] = st[(int64_t)j * ss + i];
            }
            for (int i = threadIdx.x; i < dk; i += blockDim.x)
                kk[i] = k[(int64_t)t * a.ldk + i], qq[i] = q[(int64_t)t * a.ldk + i];
            for (int i = threadIdx.x; i < dv; i += blockDim.x) dov[i] = dO[(int64_t)t * a.ldv + i];
            __syncthreads();
            float alpha = a.g ? expf(a.g[(r0 + t) * a.ldg + h]) : 1.0f;
            float b_in = a.beta[(r0 + t) * a.ldg + h], n2 = 0, beta = b_in;
            if (a.kacz) {
                for (int i = 0; i < dk; i++) n2 += kk[i] * kk[i];
                beta = b_in / (n2 + a.eps);
            }
            // columns: dS += scale q do^T; e = v - alpha Sp^T k; dSk = dS^T k; de = beta dSk
            for (int jj = threadIdx.x; jj < dv; jj += blockDim.x) {
                float e = 0, dsk = 0, dj = dov[jj];
                for (int i = 0; i < dk; i++) {
                    float x = dS[i * P + jj] + a.scale * qq[i] * dj;
                    dS[i * P + jj] = x;
                    dsk += kk[i] * x;
                    e += Sp[i * P + jj] * kk[i];
                }
                ev[jj] = v[(int64_t)t * a.ldv + jj] - alpha * e;
                dev[jj] = beta * dsk;
                dvg[(int64_t)t * a.ldv + jj] += beta * dsk;
            }
            __syncthreads();
            // rows: dq = scale Sn do; Se = dS e; sd = Sp de
            for (int i = threadIdx.x; i < dk; i += blockDim.x) {
                float s1 = 0, s2 = 0, s3 = 0;
                for (int jj = 0; jj < dv; jj++) {
                    s1 += Sn[i * P + jj] * dov[jj];
                    s2 += dS[i * P + jj] * ev[jj];
                    s3 += Sp[i * P + jj] * dev[jj];
                }
                dq[(int64_t)t * a.ldk + i] += a.scale * s1;
                Se[i] = s2, sd[i] = s3;
            }
            __syncthreads();
            if (threadIdx.x == 0) {
                float db = 0;
                for (int i = 0; i < dk; i++) db += kk[i] * Se[i];
                sh_db = db;
            }
            // columns: dS~ = dS - k de^T; dalpha parts; dS = alpha dS~
            for (int jj = threadIdx.x; jj < dv; jj += blockDim.x) {
                float da = 0, dj = dev[jj];
                for (int i = 0; i < dk; i++) {
                    float x = dS[i * P + jj] - kk[i] * dj;
                    da += Sp[i * P + jj] * x;
                    dS[i * P + jj] = alpha * x;
                }
                cred[jj] = da;
            }
            __syncthreads();
            float db = sh_db, c2 = 0;
            if (a.kacz) c2 = 2.0f * db * b_in / ((n2 + a.eps) * (n2 + a.eps));
            for (int i = threadIdx.x; i < dk; i += blockDim.x)
                dkg[(int64_t)t * a.ldk + i] += beta * Se[i] - alpha * sd[i] - c2 * kk[i];
            if (threadIdx.x == 0) {
                float dalpha = 0;
                for (int jj = 0; jj < dv; jj++) dalpha += cred[jj];
                if (a.dg) a.dg[(r0 + t) * a.ldg + h] += dalpha * alpha;
                a.dbeta[(r0 + t) * a.ldg + h] += a.kacz ? db / (n2 + a.eps) : db;
            }
        }
    }
    (void)red;
}

// ---------------------------------------------------------------------------------------------
// the optimiser and the gradient norm

__global__ void k_adamw(float *p, float *m, float *v, const float *g, int64_t n, float gscale,
                        float b1, float b2, float c1, float c2, float lr, float decay, float eps) {
    int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n) return;
    float gi = g[i] * gscale;
    float mi = b1 * m[i] + (1 - b1) * gi, vi = b2 * v[i] + (1 - b2) * gi * gi;
    m[i] = mi, v[i] = vi;
    p[i] = p[i] * decay - lr * ((mi / c1) / (sqrtf(vi / c2) + eps));
}

// partial sums of squares, one per block (added on the host in order)
__global__ void k_sumsq(double *part, const float *g, int64_t n) {
    __shared__ float red[32];
    float s = 0;
    for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < n;
         i += (int64_t)gridDim.x * blockDim.x)
        s += g[i] * g[i];
    s = block_sumf(s, red);
    if (threadIdx.x == 0) part[blockIdx.x] = s;
}

// ---------------------------------------------------------------------------------------------
// the trainer

struct lbuf { // a layer's activations (device)
    float *x_in, *xn, *rs1, *qp, *kp, *vp, *qc, *kc, *vc, *qs, *ks, *v, *q, *k, *qinv, *kinv;
    float *ga, *g, *bb, *beta, *z, *o, *rso, *on, *ckpt, *x_mid, *xn2, *rs2, *h1, *h2, *act;
};

struct gpu_train {
    gpu_train_desc d;
    std::vector<gpu_train_layer> lay;
    std::vector<int64_t> soff, sn;
    std::vector<int> sdecay;
    std::vector<float *> sdata;
    int B, T, N, chunk, nck;
    float *W, *G, *M, *Vm; // weights, gradients, moments [n]
    std::vector<lbuf> la;
    float *x_out, *xf, *rsf, *logits, *dx, *dxn, *dlog, *s[6], *dh1, *dh2, *dact, *dg, *dbeta, *dga;
    float *rowloss, *scratch;
    int32_t *ids, *tgt, *hit, *perm, *start;
    double *part;
    std::vector<void *> allocs;
    cudaStream_t st;
    cublasHandle_t blas;
    size_t smem_fwd, smem_bwd;
};

static int dalloc(gpu_train *g, float **p, int64_t n, err *e) {
    void *q = NULL;
    CUDA_TRY(cudaMalloc(&q, (size_t)(n > 0 ? n : 1) * sizeof(float)), "gpu train: cudaMalloc");
    g->allocs.push_back(q);
    *p = (float *)q;
    return 0;
}

static inline unsigned nblk(int64_t n) {
    return (unsigned)((n + TB - 1) / TB);
}

static float *W_(gpu_train *g, int64_t off) {
    return off < 0 ? NULL : g->W + off;
}
static float *G_(gpu_train *g, int64_t off) {
    return off < 0 ? NULL : g->G + off;
}

extern "C" void gpu_train_free(gpu_train *g) {
    if (!g) return;
    for (void *p : g->allocs) cudaFree(p);
    if (g->blas) cublasDestroy(g->blas);
    if (g->st) cudaStreamDestroy(g->st);
    delete g;
}

extern "C" int gpu_train_init(gpu_train **out, const gpu_train_desc *d, int B, int T, int chunk,
                              err *e) {
    *out = NULL;
    if (d->dk > 1024 || d->dv > 1024)
        return err_set(e, "gpu train: head widths above 1024 are not supported");
    gpu_train *g = new gpu_train();
    g->d = *d;
    g->lay.assign(d->lay, d->lay + d->layers);
    g->soff.assign(d->slot_off, d->slot_off + d->nslots);
    g->sn.assign(d->slot_n, d->slot_n + d->nslots);
    g->sdecay.assign(d->slot_decay, d->slot_decay + d->nslots);
    g->sdata.assign(d->slot_data, d->slot_data + d->nslots);
    g->d.lay = NULL, g->d.slot_off = NULL, g->d.slot_n = NULL, g->d.slot_decay = NULL;
    g->d.slot_data = NULL;
    g->B = B, g->T = T, g->N = B * T, g->chunk = chunk, g->nck = (T + chunk - 1) / chunk;
    int rc = 0;
#define ALLOC(p, n) (rc = rc ? rc : dalloc(g, &(p), (n), e))
    int64_t N = g->N, C = d->C, Kd = d->Kd, Vd = d->Vd, H = d->H, I = d->I, V = d->V;
    int64_t KV = Kd > Vd ? Kd : Vd;
    ALLOC(g->W, d->n), ALLOC(g->G, d->n), ALLOC(g->M, d->n), ALLOC(g->Vm, d->n);
    g->la.resize(d->layers);
    for (int l = 0; l < d->layers; l++) {
        lbuf &a = g->la[l];
        ALLOC(a.x_in, N * C), ALLOC(a.xn, N * C), ALLOC(a.rs1, N);
        ALLOC(a.qp, N * Kd), ALLOC(a.kp, N * Kd), ALLOC(a.vp, N * Vd);
        if (d->conv) {
            ALLOC(a.qc, N * Kd), ALLOC(a.kc, N * Kd), ALLOC(a.vc, N * Vd);
        } else {
            a.qc = a.qp, a.kc = a.kp, a.vc = a.vp;
        }
        ALLOC(a.qs, N * Kd), ALLOC(a.ks, N * Kd), ALLOC(a.v, N * Vd);
        ALLOC(a.q, N * Kd), ALLOC(a.k, N * Kd), ALLOC(a.qinv, N * H), ALLOC(a.kinv, N * H);
        ALLOC(a.ga, N * H), ALLOC(a.g, N * H), ALLOC(a.bb, N * H), ALLOC(a.beta, N * H);
        a.z = NULL;
        if (d->use_gate) ALLOC(a.z, N * Vd);
        ALLOC(a.o, N * Vd), ALLOC(a.rso, N * H), ALLOC(a.on, N * Vd);
        ALLOC(a.ckpt, (int64_t)B * H * g->nck * d->dk * d->dv);
        ALLOC(a.x_mid, N * C), ALLOC(a.xn2, N * C), ALLOC(a.rs2, N);
        if (I) (void)(ALLOC(a.h1, N * I), ALLOC(a.h2, N * I), ALLOC(a.act, N * I));
    }
    ALLOC(g->x_out, N * C), ALLOC(g->xf, N * C), ALLOC(g->rsf, N), ALLOC(g->logits, N * V);
    ALLOC(g->dx, N * C), ALLOC(g->dxn, N * C), ALLOC(g->dlog, N * V);
    for (int i = 0; i < 6; i++) ALLOC(g->s[i], N * KV);
    if (I) (void)(ALLOC(g->dh1, N * I), ALLOC(g->dh2, N * I), ALLOC(g->dact, N * I));
    ALLOC(g->dg, N * H), ALLOC(g->dbeta, N * H), ALLOC(g->dga, N * H), ALLOC(g->rowloss, N);
    ALLOC(g->scratch, (int64_t)B * H * (chunk + 1) * d->dk * d->dv);
    float *ip;
    ALLOC(ip, N), g->ids = (int32_t *)ip;
    ALLOC(ip, N), g->tgt = (int32_t *)ip;
    ALLOC(ip, N), g->hit = (int32_t *)ip;
    ALLOC(ip, N), g->perm = (int32_t *)ip;
    ALLOC(ip, V + 1), g->start = (int32_t *)ip;
    ALLOC(ip, 2048), g->part = (double *)ip;
#undef ALLOC
    if (rc) {
        gpu_train_free(g);
        return -1;
    }
    if (cudaStreamCreate(&g->st) != cudaSuccess || cublasCreate(&g->blas) != CUBLAS_STATUS_SUCCESS ||
        cublasSetMathMode(g->blas, CUBLAS_PEDANTIC_MATH) != CUBLAS_STATUS_SUCCESS ||
        cublasSetStream(g->blas, g->st) != CUBLAS_STATUS_SUCCESS) {
        gpu_train_free(g);
        return err_set(e, "gpu train: cannot start a stream and cuBLAS");
    }
    int dk = d->dk, dv = d->dv;
    g->smem_fwd = (size_t)(dk * dv + 2 * dk) * sizeof(float);
    g->smem_bwd = (size_t)(3 * dk * (dv + 1) + 4 * dk + 4 * dv + 32) * sizeof(float);
    if (g->smem_bwd > 227 * 1024) {
        gpu_train_free(g);
        return err_set(e, "gpu train: a head of %d x %d needs %zu KB of shared memory (227 at most)",
                       dk, dv, g->smem_bwd >> 10);
    }
    cudaFuncSetAttribute(k_delta_fwd, cudaFuncAttributeMaxDynamicSharedMemorySize,
                         (int)g->smem_fwd);
    cudaFuncSetAttribute(k_delta_bwd, cudaFuncAttributeMaxDynamicSharedMemorySize,
                         (int)g->smem_bwd);
    for (int i = 0; i < d->nslots; i++)
        if (cudaMemcpy(g->W + g->soff[i], g->sdata[i], (size_t)g->sn[i] * sizeof(float),
                       cudaMemcpyHostToDevice) != cudaSuccess) {
            gpu_train_free(g);
            return err_set(e, "gpu train: uploading the weights failed");
        }
    cudaMemset(g->G, 0, (size_t)d->n * sizeof(float));
    cudaMemset(g->M, 0, (size_t)d->n * sizeof(float));
    cudaMemset(g->Vm, 0, (size_t)d->n * sizeof(float));
    if (cudaDeviceSynchronize() != cudaSuccess) {
        gpu_train_free(g);
        return err_set(e, "gpu train: %s", cudaGetErrorString(cudaGetLastError()));
    }
    *out = g;
    return 0;
}

// ---- products (row-major, as train_linear_fwd / _bwd) ----

static int gemm(gpu_train *g, cublasOperation_t ta, cublasOperation_t tb, int m, int n, int k,
                const float *A, int lda, const float *B, int ldb, float beta, float *Cm, int ldc,
                err *e) {
    const float one = 1.0f;
    cublasStatus_t s =
        cublasSgemm(g->blas, ta, tb, m, n, k, &one, A, lda, B, ldb, &beta, Cm, ldc);
    if (s != CUBLAS_STATUS_SUCCESS)
        return err_set(e, "gpu train: cuBLAS product failed (%d x %d x %d, status %d)", m, n, k,
                       (int)s);
    return 0;
}

// Y[N, out] = X[N, in] W^T (a bias: k_add_bias after it)
static int lin_fwd(gpu_train *g, float *Y, const float *X, const float *W, int N, int out, int in,
                   err *e) {
    return gemm(g, CUBLAS_OP_T, CUBLAS_OP_N, out, N, in, W, in, X, in, 0.0f, Y, out, e);
}

__global__ void k_add_bias(float *Y, const float *b, int64_t n, int out) {
    int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) Y[i] += b[i % out];
}

// dX += dY W, dW += dY^T X, db += column sums of dY
static int lin_bwd(gpu_train *g, float *dX, float *dW, float *db, const float *dY, const float *X,
                   const float *W, int N, int out, int in, err *e) {
    if (dX && gemm(g, CUBLAS_OP_N, CUBLAS_OP_N, in, N, out, W, in, dY, out, 1.0f, dX, in, e))
        return -1;
    if (dW && gemm(g, CUBLAS_OP_N, CUBLAS_OP_T, in, out, N, X, in, dY, out, 1.0f, dW, in, e))
        return -1;
    if (db) k_colsum<<<out, TB, 0, g->st>>>(db, dY, NULL, NULL, NULL, N, out, 2);
    return 0;
}

#define LAUNCH(what) CUDA_LAUNCHED("gpu train: " what)

static int stream_fwd(gpu_train *g, const float *xn, const float *W, const float *cw,
                      const float *cb, int D, float *P, float *Cv, float *Y, err *e) {
    const gpu_train_desc *d = &g->d;
    int64_t n = (int64_t)g->N * D;
    if (lin_fwd(g, P, xn, W, g->N, D, d->C, e)) return -1;
    if (d->conv) k_conv_fwd<<<nblk(n), TB, 0, g->st>>>(Cv, P, cw, cb, g->N, g->T, D, d->W);
    k_silu_fwd<<<nblk(n), TB, 0, g->st>>>(Y, Cv, n);
    LAUNCH("stream forward");
    return 0;
}

// dY (after SiLU) -> dxn and the projection's / conv's gradients; d1, d2 scratch [N, D]
static int stream_bwd(gpu_train *g, const float *xn, const float *W, const float *cw, float *gW,
                      float *gcw, float *gcb, int D, const float *P, const float *Cv,
                      const float *dY, float *dxn, float *d1, float *d2, err *e) {
    const gpu_train_desc *d = &g->d;
    int64_t n = (int64_t)g->N * D;
    k_silu_bwd<<<nblk(n), TB, 0, g->st>>>(d1, dY, Cv, n, 0);
    float *dP = d1;
    if (d->conv) {
        k_conv_bwd_u<<<nblk(n), TB, 0, g->st>>>(d2, d1, cw, g->N, g->T, D, d->W);
        k_conv_bwd_w<<<D * d->W, TB, 0, g->st>>>(gcw, d1, P, g->N, g->T, D, d->W);
        if (gcb) k_colsum<<<D, TB, 0, g->st>>>(gcb, d1, NULL, NULL, NULL, g->N, D, 2);
        dP = d2;
    }
    LAUNCH("stream backward");
    return lin_bwd(g, dxn, gW, NULL, dP, xn, W, g->N, D, d->C, e);
}

extern "C" int gpu_train_pass(gpu_train *g, const int32_t *ids, const int32_t *target, float wgt,
                              int backward, double *loss, int *correct, float *logits, err *e) {
    const gpu_train_desc *d = &g->d;
    int N = g->N, C = d->C, H = d->H, dk = d->dk, dv = d->dv, Kd = d->Kd, Vd = d->Vd, I = d->I,
        V = d->V;
    float eps = d->norm_eps;
    int64_t NC = (int64_t)N * C;
    cudaStream_t st = g->st;
    CUDA_TRY(cudaMemcpyAsync(g->ids, ids, (size_t)N * 4, cudaMemcpyHostToDevice, st),
             "gpu train: ids up");
    CUDA_TRY(cudaMemcpyAsync(g->tgt, target, (size_t)N * 4, cudaMemcpyHostToDevice, st),
             "gpu train: targets up");
    // ---- forward ----
    k_embed<<<nblk(NC), TB, 0, st>>>(g->la[0].x_in, W_(g, d->embed), g->ids, N, C);
    for (int l = 0; l < d->layers; l++) {
        const gpu_train_layer &L = g->lay[l];
        lbuf &a = g->la[l];
        float *x_out = l + 1 < d->layers ? g->la[l + 1].x_in : g->x_out;
        k_rmsnorm_fwd<<<N, 128, 0, st>>>(a.xn, a.rs1, a.x_in, W_(g, L.attn_norm), C, eps);
        if (stream_fwd(g, a.xn, W_(g, L.q_proj), W_(g, L.q_conv), W_(g, L.q_conv_b), Kd, a.qp,
                       a.qc, a.qs, e) ||
            stream_fwd(g, a.xn, W_(g, L.k_proj), W_(g, L.k_conv), W_(g, L.k_conv_b), Kd, a.kp,
                       a.kc, a.ks, e) ||
            stream_fwd(g, a.xn, W_(g, L.v_proj), W_(g, L.v_conv), W_(g, L.v_conv_b), Vd, a.vp,
                       a.vc, a.v, e))
            return -1;
        unsigned wr = (unsigned)((N * H + 7) / 8);
        k_l2norm_fwd<<<wr, 256, 0, st>>>(a.q, a.qinv, a.qs, N * H, dk, 1e-6f);
        if (L.raw_k)
            CUDA_TRY(cudaMemcpyAsync(a.k, a.ks, (size_t)N * Kd * 4, cudaMemcpyDeviceToDevice, st),
                     "gpu train: copy");
        else
            k_l2norm_fwd<<<wr, 256, 0, st>>>(a.k, a.kinv, a.ks, N * H, dk, 1e-6f);
        int64_t NH = (int64_t)N * H;
        int decay = L.core != 1 && d->has_decay;
        if (decay) {
            if (lin_fwd(g, a.ga, a.xn, W_(g, L.a_proj), N, H, C, e)) return -1;
            k_decay_fwd<<<nblk(NH), TB, 0, st>>>(a.g, a.ga, W_(g, L.A_log), W_(g, L.dt_bias), NH,
                                                 H);
        }
        float mul = L.core != 2 && d->allow_neg ? 2.0f : 1.0f;
        if (d->use_beta) {
            if (lin_fwd(g, a.bb, a.xn, W_(g, L.b_proj), N, H, C, e)) return -1;
            if (L.b_bias >= 0) k_add_bias<<<nblk(NH), TB, 0, st>>>(a.bb, W_(g, L.b_bias), NH, H);
            k_sigmoid_fwd<<<nblk(NH), TB, 0, st>>>(a.beta, a.bb, NH, mul);
        } else {
            k_fill<<<nblk(NH), TB, 0, st>>>(a.beta, NH, 1.0f);
        }
        if (d->use_gate && lin_fwd(g, a.z, a.xn, W_(g, L.g_proj), N, Vd, C, e)) return -1;
        core_args ca = {};
        ca.q = a.q, ca.k = a.k, ca.v = a.v, ca.g = decay ? a.g : NULL, ca.beta = a.beta;
        ca.o = a.o, ca.ckpt = a.ckpt, ca.scratch = g->scratch;
        ca.T = g->T, ca.H = H, ca.dk_ = dk, ca.dv_ = dv, ca.ldk = Kd, ca.ldv = Vd, ca.ldg = H;
        ca.chunk = g->chunk, ca.nck = g->nck, ca.kacz = L.core == 2, ca.scale = L.scale;
        ca.eps = L.kacz_eps;
        int nt = dv >= 128 ? 128 : (dv + 31) / 32 * 32;
        k_delta_fwd<<<g->B * H, nt, g->smem_fwd, st>>>(ca);
        LAUNCH("delta forward");
        k_gnorm_fwd<<<N * H, 64, 0, st>>>(a.on, a.rso, a.o, d->use_gate ? a.z : NULL,
                                          W_(g, L.o_norm), dv, eps);
        if (lin_fwd(g, a.x_mid, a.on, W_(g, L.o_proj), N, C, Vd, e)) return -1;
        k_add<<<nblk(NC), TB, 0, st>>>(a.x_mid, a.x_in, NC);
        if (I) {
            int64_t NI = (int64_t)N * I;
            k_rmsnorm_fwd<<<N, 128, 0, st>>>(a.xn2, a.rs2, a.x_mid, W_(g, L.mlp_norm), C, eps);
            if (lin_fwd(g, a.h1, a.xn2, W_(g, L.gate_proj), N, I, C, e) ||
                lin_fwd(g, a.h2, a.xn2, W_(g, L.up_proj), N, I, C, e))
                return -1;
            k_swiglu_fwd<<<nblk(NI), TB, 0, st>>>(a.act, a.h1, a.h2, NI);
            if (lin_fwd(g, x_out, a.act, W_(g, L.down_proj), N, C, I, e)) return -1;
            k_add<<<nblk(NC), TB, 0, st>>>(x_out, a.x_mid, NC);
        } else {
            CUDA_TRY(cudaMemcpyAsync(x_out, a.x_mid, (size_t)NC * 4, cudaMemcpyDeviceToDevice, st),
                     "gpu train: copy");
        }
        LAUNCH("layer forward");
    }
    k_rmsnorm_fwd<<<N, 128, 0, st>>>(g->xf, g->rsf, g->x_out, W_(g, d->norm_f), C, eps);
    if (lin_fwd(g, g->logits, g->xf, W_(g, d->lm_head), N, V, C, e)) return -1;
    k_xent<<<N, 128, 0, st>>>(backward ? g->dlog : NULL, g->rowloss, g->hit, g->logits, g->tgt, V,
                              wgt);
    LAUNCH("cross-entropy");
    if (backward) {
        // ---- backward ----
        float *dx = g->dx, *dxn = g->dxn;
        cudaMemsetAsync(dxn, 0, (size_t)NC * 4, st);
        if (lin_bwd(g, dxn, G_(g, d->lm_head), NULL, g->dlog, g->xf, W_(g, d->lm_head), N, V, C,
                    e))
            return -1;
        cudaMemsetAsync(dx, 0, (size_t)NC * 4, st);
        k_rmsnorm_bwd<<<N, 128, 0, st>>>(dx, dxn, g->x_out, g->rsf, W_(g, d->norm_f), C);
        k_colsum<<<C, TB, 0, st>>>(G_(g, d->norm_f), dxn, g->x_out, NULL, g->rsf, N, C, 0);
        for (int l = d->layers - 1; l >= 0; l--) {
            const gpu_train_layer &L = g->lay[l];
            lbuf &a = g->la[l];
            int64_t NH = (int64_t)N * H, nv = (int64_t)N * Vd, nk = (int64_t)N * Kd;
            if (I) {
                int64_t NI = (int64_t)N * I;
                cudaMemsetAsync(g->dact, 0, (size_t)NI * 4, st);
                if (lin_bwd(g, g->dact, G_(g, L.down_proj), NULL, dx, a.act, W_(g, L.down_proj), N,
                            C, I, e))
                    return -1;
                k_swiglu_bwd<<<nblk(NI), TB, 0, st>>>(g->dh1, g->dh2, g->dact, a.h1, a.h2, NI);
                cudaMemsetAsync(dxn, 0, (size_t)NC * 4, st);
                if (lin_bwd(g, dxn, G_(g, L.gate_proj), NULL, g->dh1, a.xn2, W_(g, L.gate_proj),
                            N, I, C, e) ||
                    lin_bwd(g, dxn, G_(g, L.up_proj), NULL, g->dh2, a.xn2, W_(g, L.up_proj), N, I,
                            C, e))
                    return -1;
                k_rmsnorm_bwd<<<N, 128, 0, st>>>(dx, dxn, a.x_mid, a.rs2, W_(g, L.mlp_norm), C);
                k_colsum<<<C, TB, 0, st>>>(G_(g, L.mlp_norm), dxn, a.x_mid, NULL, a.rs2, N, C, 0);
            }
            float *d_on = g->s[4], *d_o = g->s[3], *dz = g->s[5];
            cudaMemsetAsync(d_on, 0, (size_t)nv * 4, st);
            if (lin_bwd(g, d_on, G_(g, L.o_proj), NULL, dx, a.on, W_(g, L.o_proj), N, C, Vd, e))
                return -1;
            cudaMemsetAsync(d_o, 0, (size_t)nv * 4, st);
            if (d->use_gate) cudaMemsetAsync(dz, 0, (size_t)nv * 4, st);
            k_gnorm_bwd<<<N * H, 64, 0, st>>>(d_o, dz, d_on, a.o, d->use_gate ? a.z : NULL, a.rso,
                                              W_(g, L.o_norm), dv);
            k_colsum<<<dv, TB, 0, st>>>(G_(g, L.o_norm), d_on, a.o, d->use_gate ? a.z : NULL,
                                        a.rso, N * H, dv, 1);
            cudaMemsetAsync(dxn, 0, (size_t)NC * 4, st);
            if (d->use_gate &&
                lin_bwd(g, dxn, G_(g, L.g_proj), NULL, dz, a.xn, W_(g, L.g_proj), N, Vd, C, e))
                return -1;
            cudaMemsetAsync(g->s[0], 0, (size_t)nk * 4, st);
            cudaMemsetAsync(g->s[1], 0, (size_t)nk * 4, st);
            cudaMemsetAsync(g->s[2], 0, (size_t)nv * 4, st);
            cudaMemsetAsync(g->dg, 0, (size_t)NH * 4, st);
            cudaMemsetAsync(g->dbeta, 0, (size_t)NH * 4, st);
            int decay = L.core != 1 && d->has_decay;
            core_args ca = {};
            ca.q = a.q, ca.k = a.k, ca.v = a.v, ca.g = decay ? a.g : NULL, ca.beta = a.beta;
            ca.ckpt = a.ckpt, ca.scratch = g->scratch, ca.dO = d_o;
            ca.dq = g->s[0], ca.dk = g->s[1], ca.dv = g->s[2], ca.dg = decay ? g->dg : NULL;
            ca.dbeta = g->dbeta;
            ca.T = g->T, ca.H = H, ca.dk_ = dk, ca.dv_ = dv, ca.ldk = Kd, ca.ldv = Vd, ca.ldg = H;
            ca.chunk = g->chunk, ca.nck = g->nck, ca.kacz = L.core == 2, ca.scale = L.scale;
            ca.eps = L.kacz_eps;
            int nt = (dv > dk ? dv : dk) >= 128 ? 128 : ((dv > dk ? dv : dk) + 31) / 32 * 32;
            k_delta_bwd<<<g->B * H, nt, g->smem_bwd, st>>>(ca);
            LAUNCH("delta backward");
            float mul = L.core != 2 && d->allow_neg ? 2.0f : 1.0f;
            if (d->use_beta) {
                k_sigmoid_bwd<<<nblk(NH), TB, 0, st>>>(g->dga, g->dbeta, a.beta, NH, mul);
                if (L.b_bias >= 0)
                    k_colsum<<<H, TB, 0, st>>>(G_(g, L.b_bias), g->dga, NULL, NULL, NULL, N, H, 2);
                if (lin_bwd(g, dxn, G_(g, L.b_proj), NULL, g->dga, a.xn, W_(g, L.b_proj), N, H, C,
                            e))
                    return -1;
            }
            if (decay) {
                k_decay_bwd<<<nblk(NH), TB, 0, st>>>(g->dga, g->dg, a.ga, W_(g, L.A_log),
                                                     W_(g, L.dt_bias), NH, H);
                k_decay_params<<<H, TB, 0, st>>>(G_(g, L.A_log), G_(g, L.dt_bias), g->dg, a.g,
                                                 g->dga, N, H);
                if (lin_bwd(g, dxn, G_(g, L.a_proj), NULL, g->dga, a.xn, W_(g, L.a_proj), N, H, C,
                            e))
                    return -1;
            }
            if (stream_bwd(g, a.xn, W_(g, L.v_proj), W_(g, L.v_conv), G_(g, L.v_proj),
                           G_(g, L.v_conv), G_(g, L.v_conv_b), Vd, a.vp, a.vc, g->s[2], dxn,
                           g->s[3], g->s[4], e))
                return -1;
            unsigned wr = (unsigned)((N * H + 7) / 8);
            k_l2norm_bwd<<<wr, 256, 0, st>>>(g->s[5], g->s[0], a.q, a.qinv, N * H, dk);
            if (stream_bwd(g, a.xn, W_(g, L.q_proj), W_(g, L.q_conv), G_(g, L.q_proj),
                           G_(g, L.q_conv), G_(g, L.q_conv_b), Kd, a.qp, a.qc, g->s[5], dxn,
                           g->s[3], g->s[4], e))
                return -1;
            const float *dks = g->s[1];
            if (!L.raw_k) {
                k_l2norm_bwd<<<wr, 256, 0, st>>>(g->s[5], g->s[1], a.k, a.kinv, N * H, dk);
                dks = g->s[5];
            }
            if (stream_bwd(g, a.xn, W_(g, L.k_proj), W_(g, L.k_conv), G_(g, L.k_proj),
                           G_(g, L.k_conv), G_(g, L.k_conv_b), Kd, a.kp, a.kc, dks, dxn, g->s[3],
                           g->s[4], e))
                return -1;
            k_rmsnorm_bwd<<<N, 128, 0, st>>>(dx, dxn, a.x_in, a.rs1, W_(g, L.attn_norm), C);
            k_colsum<<<C, TB, 0, st>>>(G_(g, L.attn_norm), dxn, a.x_in, NULL, a.rs1, N, C, 0);
            LAUNCH("layer backward");
        }
        // the embedding: rows grouped by id on the host (a counting sort), summed in row order
        std::vector<int32_t> cnt(V + 1, 0), perm(N);
        for (int r = 0; r < N; r++) cnt[ids[r] + 1]++;
        for (int v = 0; v < V; v++) cnt[v + 1] += cnt[v];
        std::vector<int32_t> pos(cnt.begin(), cnt.end() - 1);
        for (int r = 0; r < N; r++) perm[pos[ids[r]]++] = r;
        CUDA_TRY(cudaMemcpyAsync(g->perm, perm.data(), (size_t)N * 4, cudaMemcpyHostToDevice, st),
                 "gpu train: rows up");
        CUDA_TRY(cudaMemcpyAsync(g->start, cnt.data(), (size_t)(V + 1) * 4, cudaMemcpyHostToDevice,
                                 st),
                 "gpu train: rows up");
        k_embed_bwd<<<nblk((int64_t)V * C), TB, 0, st>>>(G_(g, d->embed), dx, g->perm, g->start, V,
                                                         C);
        LAUNCH("embedding backward");
        CUDA_TRY(cudaStreamSynchronize(st), "gpu train: backward");
    }
    // the loss and hits, summed on the host in row order
    std::vector<float> rl(N);
    std::vector<int32_t> hit(N);
    CUDA_TRY(cudaMemcpyAsync(rl.data(), g->rowloss, (size_t)N * 4, cudaMemcpyDeviceToHost, st),
             "gpu train: loss down");
    CUDA_TRY(cudaMemcpyAsync(hit.data(), g->hit, (size_t)N * 4, cudaMemcpyDeviceToHost, st),
             "gpu train: loss down");
    if (logits)
        CUDA_TRY(cudaMemcpyAsync(logits, g->logits, (size_t)N * V * 4, cudaMemcpyDeviceToHost, st),
                 "gpu train: logits down");
    CUDA_TRY(cudaStreamSynchronize(st), "gpu train: pass");
    double l = 0;
    int c = 0;
    for (int r = 0; r < N; r++) l += rl[r], c += hit[r];
    *loss = l;
    if (correct) *correct += c;
    return 0;
}

extern "C" int gpu_train_zero_grads(gpu_train *g, err *e) {
    CUDA_TRY(cudaMemsetAsync(g->G, 0, (size_t)g->d.n * 4, g->st), "gpu train: zero");
    return 0;
}

extern "C" int gpu_train_grad_norm(gpu_train *g, double *norm, err *e) {
    k_sumsq<<<1024, TB, 0, g->st>>>(g->part, g->G, g->d.n);
    double part[1024];
    CUDA_TRY(cudaMemcpyAsync(part, g->part, sizeof part, cudaMemcpyDeviceToHost, g->st),
             "gpu train: norm down");
    CUDA_TRY(cudaStreamSynchronize(g->st), "gpu train: norm");
    double s = 0;
    for (int i = 0; i < 1024; i++) s += part[i];
    *norm = sqrt(s);
    return 0;
}

extern "C" int gpu_train_adamw(gpu_train *g, double lr, double wd, float gscale, int t, err *e) {
    const double b1 = 0.9, b2 = 0.95;
    float c1 = (float)(1.0 - pow(b1, t)), c2 = (float)(1.0 - pow(b2, t));
    for (size_t i = 0; i < g->soff.size(); i++) {
        int64_t off = g->soff[i], n = g->sn[i];
        float decay = g->sdecay[i] ? (float)(1.0 - lr * wd) : 1.0f;
        k_adamw<<<nblk(n), TB, 0, g->st>>>(g->W + off, g->M + off, g->Vm + off, g->G + off, n,
                                           gscale, (float)b1, (float)b2, c1, c2, (float)lr, decay,
                                           1e-8f);
    }
    CUDA_LAUNCHED("gpu train: adamw");
    return 0;
}

extern "C" int gpu_train_download(gpu_train *g, err *e) {
    for (size_t i = 0; i < g->soff.size(); i++)
        CUDA_TRY(cudaMemcpyAsync(g->sdata[i], g->W + g->soff[i], (size_t)g->sn[i] * 4,
                                 cudaMemcpyDeviceToHost, g->st),
                 "gpu train: weights down");
    CUDA_TRY(cudaStreamSynchronize(g->st), "gpu train: weights down");
    return 0;
}

extern "C" int gpu_train_download_grads(gpu_train *g, float *buf, err *e) {
    CUDA_TRY(cudaMemcpyAsync(buf, g->G, (size_t)g->d.n * 4, cudaMemcpyDeviceToHost, g->st),
             "gpu train: gradients down");
    CUDA_TRY(cudaStreamSynchronize(g->st), "gpu train: gradients down");
    return 0;
}
