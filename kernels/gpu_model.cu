// gpu_model.cu: the GPU-resident model stepper of the delta-rule layers (gpu_model.h), the twin of
// models/model.c's model_step with models/layer_gdn.c's prep and post and mixers/delta_rule.c's
// step. tests/gpu checks it against the CPU.
//
// One call of n tokens runs the layers one after the other; inside a layer
//   rmsnorm        x -> xn                                   [n, C]
//   in-projection  P = xn W_in^T, W_in = [q; k; v; a; b; g]  [n, Dtot] (one product)
//   conv           short convolution step + activation, token by token per channel -> QKV
//   prep           l2 (or sum) norm of q / k, g, beta, Kaczmarz's beta = eta/(|k|^2+eps)
//   core           the delta rule, token by token: block (column slice, value head) keeps its
//                  [dk, 32] slice of the state in registers over the n tokens
//   probes         the core's per-column sums into the probes (CPU layout), when asked
//   ring, recall   when asked: the keys and values into the window ring (and k / v out); the
//                  recurrence also stores each token's state, then per token and head
//                  R = K_window S_t (cuBLAS SGEMM, batched over the tokens) and the readback
//                  errors |R_i - v_i| / |v_i| in double (gm_outputs.recall)
//   post           per head RMSNorm (gated) -> ON; x += ON W_o^T
//   MLP            rmsnorm, [gate; up] product, SwiGLU, x += H W_down^T
// then the final norm, the head product and a per-token argmax / probability / nll.
// The products are a warp-per-row matrix-vector kernel for n <= skinny tokens and cuBLAS SGEMM
// (pedantic fp32) above. Every launch of a call goes on one stream; from the second call with the
// same (n, outputs asked) the sequence is replayed as a CUDA graph.
#include <cublas_v2.h>
#include <cuda_runtime.h>

#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../mixers/kata.h" // KATA_DELTA
#include "gpu.h"
#include "gpu_common.cuh"
#include "step_kernels.cuh"
#include "delta_steps.cuh"
#include "gpu_model.h"
#include "ld_steps.cuh"

#define GM_WS_BYTES          (32u << 20) // cuBLAS workspace (fixed, so graph capture allocates nothing)
#define GM_ATTN_GRAPH_SPLITS 64 // attention decodes in graphs up to 64 splits of 256 keys a head

// One layer description and what follows from it: the model's, or in a hybrid each attention
// specification's. C3: the convolved channels, read from P at conv_off; Dtot: the in-projection's
// width; off_*: where a, b, g (and gla's low-rank decay input lr, mamba2's dt) lie in it; nfam: the
// family's probes; has_r: attention's in-projection holds r_proj; sf, cf: a layer's state and
// convolution caches (floats).
struct gm_fam {
    gm_model_desc d;
    int C3, Dtot, off_a, off_b, off_g, off_lr, conv_off, nblk, nfam, has_r;
    size_t sf, cf;
};

struct gm_layer_dev {
    const gm_fam *f;    // the layer's description
    size_t soff, coff;  // where its state and convolution caches lie in g->state, g->conv
    int pfloats, ptail; // its probe floats; where its probes after the lane-wide ones begin
    const float *attn_norm, *w_in, *conv_w, *conv_b, *A_log, *dt_bias, *b_bias;
    const float *o_norm, *w_o, *mlp_norm, *w_gu, *w_down;
    const float *gk1, *gk1_b;           // gla: the decay's second product and its bias
    const float *in_b, *D, *out_b;      // mamba2: in_proj's bias, the D skip, out_proj's bias
    const float *qn, *kn, *rn;          // attention: the per-head norms' weights of q, k, r
    int window, core_rope;              // attention: the core's window and own RoPE
    int has_b;                          // kata: b_proj (DeltaKATA's beta; without it beta = 1)
    const float *sens, *ka, *kp, *skip; // kalman: sensor_proj, a, p [M, S], skip [1]
    int prior;
    float core_theta;
    int core;
    float scale, eps;
    gm_probe_map pm;
};

struct gm_model {
    // fam[0]: the model's description (its layers, hidden, vocab, inter, norm_eps serve every
    // layer); fam[1 ..]: a hybrid's attention specifications
    gm_fam fam[GM_MAX_DESCS];
    int nf;
    // KH, Kdk, Kdv: the layout of the k / v outputs (gm_kv_shape); attn: some layer is attention
    // (positions bounded by its KV cache of max_t slots); attn_dpos: its cache write and decode
    // read the position on the device (graphs replay), else they take it as a launch argument
    // (a cache of more than GM_ATTN_GRAPH_SPLITS splits a head: no graphs)
    int L, B, ptot, KH, Kdk, Kdv, attn, max_t, attn_dpos;
    size_t stot, ctot; // every layer's state, convolution caches (floats)
    float *arena;
    gm_layer_dev *lay;
    const float *embed, *norm_f, *lm_head;
    float *state, *conv;
    // per-call device buffers ([B, ...])
    float *x, *xn, *P, *QKV, *G, *Bin, *Beff, *Q2, *K2, *O, *ON, *GU, *Hm, *logits, *topp, *nll;
    float *probes, *fprobes;
    // gla and mamba2: the core's inputs per head [B, H, dk], [B, H, dk], [B, H, dv], the
    // log-decays [B, H, dk] (gla) or [B, H] (mamba2), gla's decay product [B, kd / g]
    float *Qd, *Kd, *Vd, *Gd, *GKr;
    // attention: r per head [B, H, d] (parallax), q and r as the decode reads them, its scratch
    float *Rd, *Qo, *Ro;
    char *ascr;
    int pos;     // the call's first position (gm_step's argument, for the launches)
    char *kscr;  // kata: the step's scratch (DeltaKATA: its feature codes)
    char *kcscr; // DeltaKATA: the chunked form's scratch (calls without probes)
    float *SENS; // kalman: the sensor product [B, 2M + 2S]
    int32_t *tok, *next, *dpos, *top; // dpos: the call's first position (read by the kernels)
    double *part;
    char *ws;
    cudaStream_t st;
    cublasHandle_t blas;
    // pinned staging
    void *pin;
    int32_t *p_tok, *p_next, *p_pos, *p_top;
    float *p_logits, *p_topp, *p_nll, *p_probes, *p_fprobes;
    // graphs [GM_MODES][B + 1]: the mode bits GM_M_* of the call
    cudaGraphExec_t *graphs;
    unsigned char *seen;
    int use_graph, skinny;
    // the readback window (allocated on first use): hist rows [W - 1] per layer and head hold the
    // keys / values of the tokens before the call (oldest first, NaN: none); win rows
    // [W - 1 + B] per head are hist followed by the call's tokens, so token t's window is the W
    // rows from t on
    int kv_ready, held, RB;
    float *khist, *vhist; // [L][H][W-1][dk], [L][Hv][W-1][dv]
    float *kwin, *vwin;   // [H][W-1+B][dk], [Hv][W-1+B][dv]
    float *kout, *vout;   // [B][L][Hv][dk], [B][L][Hv][dv]
    float *rec;           // [B][L][Hv][W]
    float *Sbuf, *R;      // [RB][Hv][dk][dv] each token's state, [RB][Hv][W][dv] readbacks
    void *pin2;
    float *p_k, *p_v, *p_rec;
};

enum { GM_M_PROBES = 1, GM_M_KV = 2, GM_M_RECALL = 4, GM_MODES = 8 };

// ------------------------------------------------------------------------------ device helpers

__device__ __forceinline__ float gm_silu(float x) {
    return x / (1.0f + expf(-x));
}

__device__ __forceinline__ float gm_sigmoid(float x) {
    return 1.0f / (1.0f + expf(-x));
}

__device__ __forceinline__ float gm_softplus(float x) {
    return x > 20.0f ? x : log1pf(expf(x));
}

__device__ __forceinline__ float gm_act(float x, int a) {
    switch (a) {
    case GM_ACT_SILU:
        return gm_silu(x);
    case GM_ACT_RELU:
        return x > 0.0f ? x : 0.0f;
    case GM_ACT_ELU_P1:
        return x > 0.0f ? x + 1.0f : expf(x);
    case GM_ACT_SIGMOID:
        return gm_sigmoid(x);
    default:
        return x;
    }
}

// ------------------------------------------------------------------------------ kernels

// x[t] = embed[tok[t]]
__global__ void gm_embed(int C, const float *__restrict__ embed, const int32_t *__restrict__ tok,
                         float *__restrict__ x) {
    const int t = blockIdx.x;
    const float *src = embed + (size_t)tok[t] * C;
    for (int i = threadIdx.x; i < C; i += blockDim.x) x[(size_t)t * C + i] = src[i];
}

// y[t] = x[t] / sqrt(mean(x[t]^2) + eps) * w, as blk_rmsnorm (sum in double)
__global__ void gm_rmsnorm(int C, float eps, const float *__restrict__ x,
                           const float *__restrict__ w, float *__restrict__ y) {
    __shared__ double sh[32];
    const int t = blockIdx.x;
    const float *xt = x + (size_t)t * C;
    double ss = 0.0;
    for (int i = threadIdx.x; i < C; i += blockDim.x) ss += (double)xt[i] * (double)xt[i];
    ss = block_sum(ss, sh);
    const float rstd = (float)(1.0 / sqrt(ss / C + (double)eps));
    for (int i = threadIdx.x; i < C; i += blockDim.x)
        y[(size_t)t * C + i] = __fmul_rn(xt[i], rstd) * (w ? w[i] : 1.0f);
}

// Y[t, row] (+)= W[row, :] . X[t, :] for NT tokens: one warp per row, W read once (float4 when
// VEC).
template <int NT, bool VEC>
__global__ void __launch_bounds__(256)
    gm_matvec(int out, int in, const float *__restrict__ W, const float *__restrict__ X, int ldx,
              float *__restrict__ Y, int ldy, int acc) {
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
    const int row = blockIdx.x * 8 + warp;
    if (row >= out) return;
    const float *w = W + (size_t)row * in;
    float s[NT];
#pragma unroll
    for (int t = 0; t < NT; t++) s[t] = 0.0f;
    if (VEC) {
        const float4 *w4 = reinterpret_cast<const float4 *>(w);
        const int n4 = in >> 2;
#pragma unroll 4
        for (int i = lane; i < n4; i += 32) {
            const float4 a = __ldg(w4 + i);
#pragma unroll
            for (int t = 0; t < NT; t++) {
                const float4 b = __ldg(reinterpret_cast<const float4 *>(X + (size_t)t * ldx) + i);
                s[t] += a.x * b.x + a.y * b.y + a.z * b.z + a.w * b.w;
            }
        }
    } else {
        for (int i = lane; i < in; i += 32) {
            const float a = __ldg(w + i);
#pragma unroll
            for (int t = 0; t < NT; t++) s[t] += a * __ldg(X + (size_t)t * ldx + i);
        }
    }
#pragma unroll
    for (int t = 0; t < NT; t++) s[t] = warp_sumf(s[t]);
    if (lane == 0)
#pragma unroll
        for (int t = 0; t < NT; t++) {
            float *y = Y + (size_t)t * ldy + row;
            *y = acc ? *y + s[t] : s[t];
        }
}

// The short convolution step of blk_conv_step for every channel c of the convolved streams (the
// delta family's [q | k | v], gla's, mamba2's xBC), token by token: the cache row [W] (newest
// last) rolls, y = act(sum cache * w + b) in double. Without the convolution: y = act(P). act:
// act_lo for c < split, act_hi above.
__global__ void gm_conv(int n, int C3, int W, int ldp, const float *__restrict__ P,
                        const float *__restrict__ cw, const float *__restrict__ cb,
                        float *__restrict__ cache, float *__restrict__ out, int split, int act_lo,
                        int act_hi, int use_conv) {
    const int c = blockIdx.x * blockDim.x + threadIdx.x;
    if (c >= C3) return;
    const int a = c < split ? act_lo : act_hi;
    if (!use_conv) {
        for (int t = 0; t < n; t++) out[(size_t)t * C3 + c] = gm_act(P[(size_t)t * ldp + c], a);
        return;
    }
    float *cc = cache + (size_t)c * W;
    const float *w = cw + (size_t)c * W;
    const double b = cb ? (double)cb[c] : 0.0;
    if (W <= 8) {
        float r[8], wr[8];
#pragma unroll
        for (int i = 0; i < 8; i++) {
            r[i] = i < W ? cc[i] : 0.0f;
            wr[i] = i < W ? w[i] : 0.0f;
        }
        // eight tokens' inputs loaded at once (independent loads in flight), then stepped
        for (int t0 = 0; t0 < n; t0 += 8) {
            float xs[8];
#pragma unroll
            for (int u = 0; u < 8; u++) xs[u] = t0 + u < n ? P[(size_t)(t0 + u) * ldp + c] : 0.0f;
#pragma unroll
            for (int u = 0; u < 8; u++) {
                if (t0 + u >= n) break;
#pragma unroll
                for (int i = 0; i < 7; i++)
                    if (i + 1 < W) r[i] = r[i + 1];
#pragma unroll
                for (int i = 0; i < 8; i++)
                    if (i == W - 1) r[i] = xs[u];
                double acc = b;
#pragma unroll
                for (int i = 0; i < 8; i++)
                    if (i < W) acc += (double)r[i] * (double)wr[i];
                out[(size_t)(t0 + u) * C3 + c] = gm_act((float)acc, a);
            }
        }
#pragma unroll
        for (int i = 0; i < 8; i++)
            if (i < W) cc[i] = r[i];
    } else {
        for (int t = 0; t < n; t++) {
            for (int i = 0; i + 1 < W; i++) cc[i] = cc[i + 1];
            cc[W - 1] = P[(size_t)t * ldp + c];
            double acc = b;
            for (int i = 0; i < W; i++) acc += (double)cc[i] * (double)w[i];
            out[(size_t)t * C3 + c] = gm_act((float)acc, a);
        }
    }
}

struct gm_prep_args {
    int H, Hv, rep, dk, kd, C3, Dtot, off_a, off_b;
    int decay, use_beta, kacz, sum_norm;
    float mul, eps;
    float *QKV;
    const float *P, *A_log, *dt_bias, *b_bias;
    float *G, *Bin, *Beff, *Q2, *K2;
    float *fp; // fprobes of this layer at token 0, or NULL
    int fp_stride;
};

// layer_gdn.c's prep after the streams, one block per token: the raw norms of q and k (the family
// probes), their normalisation in place (Kaczmarz keeps the raw key), the squared norms the core
// uses, then per value head g, beta (or eta) and the effective beta.
__global__ void __launch_bounds__(256) gm_prep(gm_prep_args a) {
    const int t = blockIdx.x, warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
    const int nw = blockDim.x >> 5;
    float *fp = a.fp ? a.fp + (size_t)t * a.fp_stride : NULL;
    for (int h = warp; h < a.H; h += nw) {
        float *q = a.QKV + (size_t)t * a.C3 + (size_t)h * a.dk, *k = q + a.kd;
        double sq = 0.0, sk = 0.0;
        for (int i = lane; i < a.dk; i += 32) {
            sq += (double)q[i] * (double)q[i];
            sk += (double)k[i] * (double)k[i];
        }
        sq = warp_sum(sq), sk = warp_sum(sk);
        if (fp && lane == 0)
            for (int r = 0; r < a.rep; r++) {
                fp[h * a.rep + r] = (float)sqrt(sq);
                fp[a.Hv + h * a.rep + r] = (float)sqrt(sk);
            }
        if (a.sum_norm) {
            double s1 = 0.0, s2 = 0.0;
            for (int i = lane; i < a.dk; i += 32) s1 += q[i], s2 += k[i];
            s1 = warp_sum(s1), s2 = warp_sum(s2);
            for (int i = lane; i < a.dk; i += 32) {
                q[i] = (float)(q[i] / s1);
                if (!a.kacz) k[i] = (float)(k[i] / s2);
            }
        } else {
            const float rq = (float)(1.0 / sqrt(sq + (double)1e-6f));
            const float rk = (float)(1.0 / sqrt(sk + (double)1e-6f));
            for (int i = lane; i < a.dk; i += 32) {
                q[i] *= rq;
                if (!a.kacz) k[i] *= rk;
            }
        }
        double q2 = 0.0, k2 = 0.0;
        for (int i = lane; i < a.dk; i += 32) {
            q2 += (double)q[i] * (double)q[i];
            k2 += (double)k[i] * (double)k[i];
        }
        q2 = warp_sum(q2), k2 = warp_sum(k2);
        if (lane == 0) {
            a.Q2[(size_t)t * a.H + h] = (float)q2;
            a.K2[(size_t)t * a.H + h] = (float)k2;
        }
    }
    __syncthreads();
    for (int hv = threadIdx.x; hv < a.Hv; hv += blockDim.x) {
        const size_t th = (size_t)t * a.Hv + hv;
        const float *Pt = a.P + (size_t)t * a.Dtot;
        float g = 0.0f, bi = 1.0f;
        if (a.decay) g = -expf(a.A_log[hv]) * gm_softplus(Pt[a.off_a + hv] + a.dt_bias[hv]);
        if (a.use_beta) {
            float b = Pt[a.off_b + hv];
            if (a.b_bias) b = b + a.b_bias[hv];
            bi = a.mul * gm_sigmoid(b);
        }
        a.G[th] = g;
        a.Bin[th] = bi;
        a.Beff[th] = a.kacz ? bi / (a.K2[(size_t)t * a.H + hv / a.rep] + a.eps) : bi;
    }
}

struct gm_ring_args {
    int n, B, W, H, Hv, rep, dk, dv, L, li, KH, Kdk, Kdv; // K*: the layout of kout / vout
    const float *Ks, *Vs; // token t's key of head h at Ks + t ldk + h dk, value at Vs + t ldv
    size_t ldk, ldv;
    float *khist, *vhist; // this layer's
    float *kwin, *vwin;
    float *kout, *vout; // NULL: not asked
};

// Window rows p = 0 .. W - 2 + n of value head hv (and of its key head, once): the history, then
// the call's keys and values from QKV (also into kout / vout). Block (p, hv).
__global__ void __launch_bounds__(128) gm_ring_in(gm_ring_args a) {
    const int p = blockIdx.x, hv = blockIdx.y, h = hv / a.rep, hist = a.W - 1, t = p - hist;
    const float *vs = t < 0 ? a.vhist + ((size_t)hv * hist + p) * a.dv
                            : a.Vs + (size_t)t * a.ldv + (size_t)hv * a.dv;
    float *vd = a.vwin + ((size_t)hv * (hist + a.B) + p) * a.dv;
    float *vo = t >= 0 && a.vout ? a.vout + (((size_t)t * a.L + a.li) * a.KH + hv) * a.Kdv : NULL;
    for (int i = threadIdx.x; i < a.dv; i += blockDim.x) {
        const float x = vs[i];
        vd[i] = x;
        if (vo) vo[i] = x;
    }
    const float *ks = t < 0 ? a.khist + ((size_t)h * hist + p) * a.dk
                            : a.Ks + (size_t)t * a.ldk + (size_t)h * a.dk;
    float *kd = hv % a.rep == 0 ? a.kwin + ((size_t)h * (hist + a.B) + p) * a.dk : NULL;
    float *ko = t >= 0 && a.kout ? a.kout + (((size_t)t * a.L + a.li) * a.KH + hv) * a.Kdk : NULL;
    for (int i = threadIdx.x; i < a.dk; i += blockDim.x) {
        const float x = ks[i];
        if (kd) kd[i] = x;
        if (ko) ko[i] = x;
    }
}

// After gm_ring_in: the history becomes the window's last W - 1 rows (rows n .. n + W - 2).
__global__ void __launch_bounds__(128) gm_ring_out(gm_ring_args a) {
    const int p = blockIdx.x, hv = blockIdx.y, h = hv / a.rep, hist = a.W - 1;
    const float *vs = a.vwin + ((size_t)hv * (hist + a.B) + p + a.n) * a.dv;
    float *vd = a.vhist + ((size_t)hv * hist + p) * a.dv;
    for (int i = threadIdx.x; i < a.dv; i += blockDim.x) vd[i] = vs[i];
    if (hv % a.rep) return;
    const float *ks = a.kwin + ((size_t)h * (hist + a.B) + p + a.n) * a.dk;
    float *kd = a.khist + ((size_t)h * hist + p) * a.dk;
    for (int i = threadIdx.x; i < a.dk; i += blockDim.x) kd[i] = ks[i];
}

struct gm_kvout_args {
    int H, dk, dv, L, li, KH, Kdk, Kdv;
    const float *K, *V; // token t's key of head h at K + (t H + h) dk, value at V + (t H + h) dv
    float *kout, *vout;
};

// A layer that keeps no readback window (a hybrid's attention layer): its keys and values into
// kout / vout. Block (t, h).
__global__ void __launch_bounds__(128) gm_kv_out(gm_kvout_args a) {
    const int t = blockIdx.x, h = blockIdx.y;
    const size_t row = ((size_t)t * a.L + a.li) * a.KH + h, in = (size_t)t * a.H + h;
    for (int i = threadIdx.x; i < a.dk; i += blockDim.x)
        a.kout[row * a.Kdk + i] = a.K[in * a.dk + i];
    for (int i = threadIdx.x; i < a.dv; i += blockDim.x)
        a.vout[row * a.Kdv + i] = a.V[in * a.dv + i];
}

struct gm_rerr_args {
    int t0, W, B, Hv, dv, L, li;
    const float *R, *vwin;
    float *rec;
};

// The readback errors of tokens t0 + b (block (b, hv, group of 32 rows)): a warp per window row
// r, |R_r - v_r|^2 and |v_r|^2 in double (viz/recall.c's entry), into rec[t][li][hv][W - 1 - r].
__global__ void __launch_bounds__(256) gm_recall_err(gm_rerr_args a) {
    const int b = blockIdx.x, hv = blockIdx.y, t = a.t0 + b, hist = a.W - 1;
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, nw = blockDim.x >> 5;
    const int r1 = (int)(blockIdx.z + 1) * 32 < a.W ? (int)(blockIdx.z + 1) * 32 : a.W;
    for (int r = blockIdx.z * 32 + warp; r < r1; r += nw) {
        const float *rr = a.R + (((size_t)b * a.Hv + hv) * a.W + r) * a.dv;
        const float *vv = a.vwin + ((size_t)hv * (hist + a.B) + t + r) * a.dv;
        double e2 = 0.0, v2 = 0.0;
        for (int c = lane; c < a.dv; c += 32) {
            const double x = (double)vv[c], d = (double)rr[c] - x;
            e2 += d * d, v2 += x * x;
        }
        e2 = warp_sum(e2), v2 = warp_sum(v2);
        if (lane == 0)
            a.rec[(((size_t)t * a.L + a.li) * a.Hv + hv) * a.W + (a.W - 1 - r)] =
                v2 > 0.0 ? (float)sqrt(e2 / v2) : NAN;
    }
}

struct gm_post_args {
    int Hv, dv, vd, Dtot, off_g, use_gate;
    int fp_rstd, fp_gate, rstd_double; // the family probes' rows; o_rstd as gla computes it
    float eps;
    const float *O, *P, *w;
    float *ON;
    float *fp; // fprobes of this layer at token 0, or NULL
    int fp_stride;
};

// layer_gdn.c's (and layer_gla.c's) post before o_proj, one block per token and a warp per value
// head: the family probes o_rstd and gate_mean, then RMSNorm (FusedRMSNormGated with the gate).
__global__ void __launch_bounds__(256) gm_post(gm_post_args a) {
    const int t = blockIdx.x, warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
    const int nw = blockDim.x >> 5, dv = a.dv;
    for (int hv = warp; hv < a.Hv; hv += nw) {
        const float *o = a.O + (size_t)t * a.vd + (size_t)hv * dv;
        const float *z = a.use_gate ? a.P + (size_t)t * a.Dtot + a.off_g + (size_t)hv * dv : NULL;
        double ss = 0.0, gs = 0.0;
        for (int i = lane; i < dv; i += 32) {
            ss += (double)o[i] * (double)o[i];
            if (z) gs += (double)gm_silu(z[i]);
        }
        ss = warp_sum(ss), gs = warp_sum(gs);
        if (a.fp && lane == 0) {
            float *fp = a.fp + (size_t)t * a.fp_stride;
            const float r = (float)sqrt(ss) / sqrtf((float)dv);
            fp[a.fp_rstd * a.Hv + hv] = a.rstd_double ? (float)(1.0 / sqrt(ss / dv + (double)a.eps))
                                                      : 1.0f / sqrtf(__fmul_rn(r, r) + a.eps);
            fp[a.fp_gate * a.Hv + hv] = a.use_gate ? (float)(gs / dv) : NAN;
        }
        const float rstd = (float)(1.0 / sqrt(ss / dv + (double)a.eps));
        float *y = a.ON + (size_t)t * a.vd + (size_t)hv * dv;
        for (int i = lane; i < dv; i += 32) {
            float v = __fmul_rn(o[i], rstd) * (a.w ? a.w[i] : 1.0f);
            if (z) v *= gm_silu(z[i]);
            y[i] = v;
        }
    }
}

// ---- gla (layer_gla.c's prep) and mamba2 (layer_mamba2.c's prep and post)

struct gm_gla_args {
    int H, dk, dv, grp, kd, kpg, C3, fmap, has_clamp;
    float norm, clamp_min;
    const float *CV, *GKr, *gk_b; // the convolved [q | k | v] rows, the decay product, its bias
    float *Qd, *Kd, *Vd, *Gd;
};

// One block per token: the kv heads repeated to the H query heads (head h reads kv head
// h / grp), the feature map on q and k, gk = logsigmoid(W_2 W_1 x + b_2) / normaliser (clamped
// below when set), into the per-head rows the core reads.
__global__ void __launch_bounds__(256) gm_gla_prep(gm_gla_args a) {
    const int t = blockIdx.x, dk = a.dk, dv = a.dv;
    const float *cv = a.CV + (size_t)t * a.C3;
    for (int idx = threadIdx.x; idx < a.H * dk; idx += blockDim.x) {
        const int h = idx / dk, i = idx - h * dk, j = (h / a.grp) * dk + i;
        const size_t o = (size_t)t * a.H * dk + idx;
        a.Qd[o] = gm_act(cv[idx], a.fmap);
        a.Kd[o] = gm_act(cv[a.kd + j], a.fmap);
        const float x = a.GKr[(size_t)t * a.kpg + j] + (a.gk_b ? a.gk_b[j] : 0.0f);
        const float l = ((x < 0.0f ? x : 0.0f) - log1pf(expf(-fabsf(x)))) / a.norm;
        a.Gd[o] = a.has_clamp && l < a.clamp_min ? a.clamp_min : l;
    }
    for (int idx = threadIdx.x; idx < a.H * dv; idx += blockDim.x) {
        const int h = idx / dv, i = idx - h * dv;
        a.Vd[(size_t)t * a.H * dv + idx] = cv[a.kd + a.kpg + (h / a.grp) * dv + i];
    }
}

struct gm_m2_args {
    int H, N, P, per, di, cd, Dtot, dt_off;
    float dt_lo, dt_hi;
    const float *CV, *Pm, *A_log, *dt_bias; // the convolved [x | B | C] rows, the projection
    float *DT, *Qd, *Kd, *Vd, *Gd;
    float *fp; // the family probe dt of this layer at token 0, or NULL
    int fp_stride;
};

// One block per token: dt = clamp(softplus(dt_raw + dt_bias)), g = dt A with A = -exp(A_log);
// q = C and k = B of the head's group (h / per), v = dt x.
__global__ void __launch_bounds__(256) gm_m2_prep(gm_m2_args a) {
    const int t = blockIdx.x, N = a.N, P = a.P;
    const float *cv = a.CV + (size_t)t * a.cd;
    for (int h = threadIdx.x; h < a.H; h += blockDim.x) {
        float dt = gm_softplus(a.Pm[(size_t)t * a.Dtot + a.dt_off + h] + a.dt_bias[h]);
        dt = dt < a.dt_lo ? a.dt_lo : dt > a.dt_hi ? a.dt_hi : dt;
        a.DT[(size_t)t * a.H + h] = dt;
        a.Gd[(size_t)t * a.H + h] = dt * -expf(a.A_log[h]);
        if (a.fp) a.fp[(size_t)t * a.fp_stride + h] = dt;
    }
    __syncthreads();                  // DT
    const int gn = (a.cd - a.di) / 2; // G N: B at di, C at di + G N
    for (int idx = threadIdx.x; idx < a.H * N; idx += blockDim.x) {
        const int h = idx / N, i = idx - h * N, g = h / a.per;
        const size_t o = (size_t)t * a.H * N + idx;
        a.Qd[o] = cv[a.di + gn + g * N + i];
        a.Kd[o] = cv[a.di + g * N + i];
    }
    for (int idx = threadIdx.x; idx < a.di; idx += blockDim.x)
        a.Vd[(size_t)t * a.di + idx] = a.DT[(size_t)t * a.H + idx / P] * cv[idx];
}

struct gm_m2_post_args {
    int di, P, group, cd, Dtot, D_has_hdim;
    float eps;
    const float *O, *CV, *Pm, *D, *w; // the core's output, x (CV), z (Pm), D, the norm's weight
    float *ON;
};

// One block per token: y = (o + D x) SiLU(z), then RMSNorm over each group of `group` channels
// (blk_gate_rmsnorm: fla's RMSNormGated with norm_before_gate=False).
__global__ void __launch_bounds__(256) gm_m2_post(gm_m2_post_args a) {
    __shared__ double sh[32];
    const int t = blockIdx.x;
    const float *o = a.O + (size_t)t * a.di, *x = a.CV + (size_t)t * a.cd;
    const float *z = a.Pm + (size_t)t * a.Dtot;
    float *y = a.ON + (size_t)t * a.di;
    for (int g0 = 0; g0 < a.di; g0 += a.group) {
        double ss = 0.0;
        for (int i = g0 + threadIdx.x; i < g0 + a.group; i += blockDim.x) {
            const float d = a.D_has_hdim ? a.D[i] : a.D[i / a.P];
            const float v = __fmul_rn(__fadd_rn(o[i], __fmul_rn(d, x[i])), gm_silu(z[i]));
            y[i] = v;
            ss += (double)v * (double)v;
        }
        ss = block_sum(ss, sh);
        const float rstd = (float)(1.0 / sqrt(ss / a.group + (double)a.eps));
        for (int i = g0 + threadIdx.x; i < g0 + a.group; i += blockDim.x)
            y[i] = __fmul_rn(y[i], rstd) * (a.w ? a.w[i] : 1.0f);
    }
}

// ---- attention (layer_attn.c's prep)

struct gm_attn_args {
    int H, Hkv, d, C, kv, Dtot, qk_norm, rope, has_r, r_zero;
    const int32_t *pos0; // on the device: a captured graph replays with the call's position
    float theta;
    const float *P, *qn, *kn, *rn;
    float *Qd, *Kd, *Vd, *Rd;
};

// One block per token, a warp per head of q, k, v (and r): the per-head RMSNorm of q, k, r (eps
// 1e-5, sum in double: blk_rmsnorm), rotate-half RoPE at the token's position with the angles
// in float as blk_rope takes them, and the kv heads repeated to the query heads.
__global__ void __launch_bounds__(256) gm_attn_prep(gm_attn_args a) {
    const int t = blockIdx.x, warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
    const int nw = blockDim.x >> 5, d = a.d, half = d / 2, grp = a.H / a.Hkv, pos = *a.pos0 + t;
    const int nr = a.has_r || a.r_zero ? a.H : 0, tasks = a.H + 2 * a.Hkv + nr;
    const float *Pt = a.P + (size_t)t * a.Dtot;
    const size_t row = (size_t)t * a.H * d;
    for (int task = warp; task < tasks; task += nw) {
        int kind, h; // 0 q, 1 k, 2 v, 3 r
        if (task < a.H)
            kind = 0, h = task;
        else if (task < a.H + a.Hkv)
            kind = 1, h = task - a.H;
        else if (task < a.H + 2 * a.Hkv)
            kind = 2, h = task - a.H - a.Hkv;
        else
            kind = 3, h = task - a.H - 2 * a.Hkv;
        if (kind == 2) { // v: the kv head copied to its query heads
            const float *src = Pt + a.C + a.kv + (size_t)h * d;
            for (int r = 0; r < grp; r++)
                for (int i = lane; i < d; i += 32)
                    a.Vd[row + (size_t)(h * grp + r) * d + i] = src[i];
            continue;
        }
        if (kind == 3 && a.r_zero) { // a parallax core without r_proj: r = 0 (softmax)
            for (int i = lane; i < d; i += 32) a.Rd[row + (size_t)h * d + i] = 0.0f;
            continue;
        }
        const float *src = Pt + (kind == 0   ? (size_t)h * d
                                 : kind == 1 ? a.C + (size_t)h * d
                                             : a.C + 2 * (size_t)a.kv + (size_t)h * d);
        const float *w = kind == 0 ? a.qn : kind == 1 ? a.kn : a.rn;
        float rstd = 1.0f;
        if (a.qk_norm) {
            double ss = 0.0;
            for (int i = lane; i < d; i += 32) ss += (double)src[i] * (double)src[i];
            ss = warp_sum(ss);
            rstd = (float)(1.0 / sqrt(ss / d + (double)1e-5f));
        }
        auto val = [&](int i) {
            return a.qk_norm ? __fmul_rn(src[i], rstd) * (w ? w[i] : 1.0f) : src[i];
        };
        for (int r = 0; r < (kind == 1 ? grp : 1); r++) {
            float *dst = kind == 0   ? a.Qd + row + (size_t)h * d
                         : kind == 1 ? a.Kd + row + (size_t)(h * grp + r) * d
                                     : a.Rd + row + (size_t)h * d;
            if (a.rope) {
                for (int i = lane; i < half; i += 32) {
                    const float ex = (float)(2 * i) / (float)d;
                    const float inv = 1.0f / powf(a.theta, ex), ang = (float)pos * inv;
                    const float c = cosf(ang), sn = sinf(ang), x0 = val(i), x1 = val(i + half);
                    dst[i] = __fsub_rn(__fmul_rn(x0, c), __fmul_rn(x1, sn));
                    dst[i + half] = __fadd_rn(__fmul_rn(x1, c), __fmul_rn(x0, sn));
                }
                for (int i = 2 * half + lane; i < d; i += 32) dst[i] = val(i);
            } else {
                for (int i = lane; i < d; i += 32) dst[i] = val(i);
            }
        }
    }
}

// ---- kata (layer_kata.c's prep)

struct gm_kata_args {
    int H, d, C3, Dtot, off_b, qk_norm, rope, beta, b_proj;
    const int32_t *pos0; // on the device: a captured graph replays with the call's position
    float theta;
    const float *QKV, *P;
    float *Qd, *Kd, *Vd, *Bin;
};

// One block per token, a warp per head: q and k l2-normalised (x / sqrt(|x|^2 + 1e-6), the sum in
// double: blk_l2norm) and rotated by interleaved RoPE (blk_rope_interleaved: pairs 2i, 2i + 1),
// v copied; DeltaKATA's beta = sigmoid(W_b x) (1 without b_proj).
__global__ void __launch_bounds__(256) gm_kata_prep(gm_kata_args a) {
    const int t = blockIdx.x, warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
    const int nw = blockDim.x >> 5, d = a.d, D = a.H * d, pos = *a.pos0 + t;
    const float *row = a.QKV + (size_t)t * a.C3;
    for (int task = warp; task < 2 * a.H; task += nw) {
        const int h = task % a.H, isk = task >= a.H;
        const float *src = row + (isk ? D : 0) + (size_t)h * d;
        float *dst = (isk ? a.Kd : a.Qd) + (size_t)t * D + (size_t)h * d;
        float r = 1.0f;
        if (a.qk_norm) {
            double ss = 0.0;
            for (int i = lane; i < d; i += 32) ss += (double)src[i] * (double)src[i];
            ss = warp_sum(ss);
            r = (float)(1.0 / sqrt(ss + (double)1e-6f));
        }
        if (a.rope) {
            for (int i = lane; i < d / 2; i += 32) {
                const float ex = (float)(2 * i) / (float)d;
                const float inv = 1.0f / powf(a.theta, ex), ang = (float)pos * inv;
                const float c = cosf(ang), sn = sinf(ang);
                const float x0 = __fmul_rn(src[2 * i], r), x1 = __fmul_rn(src[2 * i + 1], r);
                dst[2 * i] = __fsub_rn(__fmul_rn(x0, c), __fmul_rn(x1, sn));
                dst[2 * i + 1] = __fadd_rn(__fmul_rn(x1, c), __fmul_rn(x0, sn));
            }
        } else {
            for (int i = lane; i < d; i += 32) dst[i] = __fmul_rn(src[i], r);
        }
    }
    for (int i = threadIdx.x; i < D; i += blockDim.x) a.Vd[(size_t)t * D + i] = row[2 * D + i];
    if (a.beta)
        for (int h = threadIdx.x; h < a.H; h += blockDim.x)
            a.Bin[(size_t)t * a.H + h] =
                a.b_proj ? gm_sigmoid(a.P[(size_t)t * a.Dtot + a.off_b + h]) : 1.0f;
}

// ---- kalman (layer_kalman.c's prep and post)

struct gm_kal_args {
    int M, S, qk_norm;
    const float *SENS; // [v | u | k | q] per token
    float *Qd, *Kd, *Vd, *LV;
};

// One block per token: k and q over |x| (floored at 1e-12, the sum in double), lambda_v =
// 1 / (softplus(u) + 1e-4), v copied.
__global__ void __launch_bounds__(256) gm_kal_prep(gm_kal_args a) {
    __shared__ double sh[32];
    const int t = blockIdx.x, M = a.M, S = a.S;
    const float *sn = a.SENS + (size_t)t * (2 * M + 2 * S), *k = sn + 2 * M, *q = k + S;
    double nk = 0.0, nq = 0.0;
    for (int s = threadIdx.x; s < S; s += blockDim.x)
        nk += (double)k[s] * k[s], nq += (double)q[s] * q[s];
    nk = block_sum(nk, sh), nq = block_sum(nq, sh);
    const float rk = a.qk_norm ? (float)(1.0 / fmax(sqrt(nk), 1e-12)) : 1.0f;
    const float rq = a.qk_norm ? (float)(1.0 / fmax(sqrt(nq), 1e-12)) : 1.0f;
    for (int s = threadIdx.x; s < S; s += blockDim.x)
        a.Kd[(size_t)t * S + s] = __fmul_rn(k[s], rk),
                             a.Qd[(size_t)t * S + s] = __fmul_rn(q[s], rq);
    for (int m = threadIdx.x; m < M; m += blockDim.x) {
        a.Vd[(size_t)t * M + m] = sn[m];
        a.LV[(size_t)t * M + m] = 1.0f / (gm_softplus(sn[M + m]) + 1e-4f);
    }
}

// y = (o + skip z) (SiLU(g') with the gate), z the convolved stream, g' the in-projection's
// second half.
__global__ void gm_kal_post(int n, int M, int gating, const float *__restrict__ O,
                            const float *__restrict__ Z, const float *__restrict__ P,
                            const float *__restrict__ skip, float *__restrict__ Y) {
    const size_t idx = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (idx >= (size_t)n * M) return;
    const size_t t = idx / M, m = idx % M;
    float y = __fadd_rn(O[idx], __fmul_rn(skip[0], Z[idx]));
    if (gating) y = __fmul_rn(y, gm_silu(P[t * 2 * M + M + m]));
    Y[idx] = y;
}

// Y[t, i] += b[i] (mamba2's in_proj and out_proj biases).
__global__ void gm_bias(int n, int D, int ldy, const float *__restrict__ b, float *__restrict__ Y) {
    const size_t idx = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (idx >= (size_t)n * D) return;
    const size_t t = idx / D, i = idx % D;
    Y[t * ldy + i] += b[i];
}

// H[t, i] = silu(GU[t, i]) * GU[t, I + i]
__global__ void gm_swiglu(int n, int I, const float *__restrict__ GU, float *__restrict__ Hm) {
    const size_t idx = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (idx >= (size_t)n * I) return;
    const size_t t = idx / I, i = idx % I;
    Hm[idx] = gm_silu(GU[t * 2 * I + i]) * GU[t * 2 * I + I + i];
}

// Per token: the argmax (first of equals), its probability and -log p(next).
__global__ void __launch_bounds__(1024)
    gm_head(int V, const float *__restrict__ logits, const int32_t *__restrict__ next,
            int32_t *__restrict__ top, float *__restrict__ topp, float *__restrict__ nll) {
    __shared__ float bv[32];
    __shared__ int bi[32];
    __shared__ double sh[32];
    const int t = blockIdx.x, lane = threadIdx.x & 31, w = threadIdx.x >> 5;
    const float *l = logits + (size_t)t * V;
    float best = -INFINITY;
    int idx = -1;
    for (int v = threadIdx.x; v < V; v += blockDim.x)
        if (l[v] > best) best = l[v], idx = v;
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) {
        const float ob = __shfl_xor_sync(0xffffffffu, best, o);
        const int oi = __shfl_xor_sync(0xffffffffu, idx, o);
        if (ob > best || (ob == best && oi >= 0 && (idx < 0 || oi < idx))) best = ob, idx = oi;
    }
    if (lane == 0) bv[w] = best, bi[w] = idx;
    __syncthreads();
    best = -INFINITY, idx = -1;
    for (int i = 0; i < (int)(blockDim.x >> 5); i++)
        if (bv[i] > best || (bv[i] == best && bi[i] >= 0 && (idx < 0 || bi[i] < idx)))
            best = bv[i], idx = bi[i];
    double s = 0.0;
    for (int v = threadIdx.x; v < V; v += blockDim.x) s += (double)expf(l[v] - best);
    s = block_sum(s, sh);
    if (threadIdx.x == 0) {
        top[t] = idx < 0 ? 0 : idx;
        topp[t] = (float)(1.0 / s);
        const int nx = next[t];
        nll[t] = nx >= 0 && nx < V ? (float)(log(s) + (double)best - (double)l[nx]) : NAN;
    }
}

// ------------------------------------------------------------------------------ host side

extern "C" int gm_compiled(void) {
    return 1;
}

template <int NT>
static void launch_matvec(int out, int in, const float *W, const float *X, int ldx, float *Y,
                          int ldy, int acc, bool vec, cudaStream_t st) {
    const int blocks = (out + 7) / 8;
    if (vec)
        gm_matvec<NT, true><<<blocks, 256, 0, st>>>(out, in, W, X, ldx, Y, ldy, acc);
    else
        gm_matvec<NT, false><<<blocks, 256, 0, st>>>(out, in, W, X, ldx, Y, ldy, acc);
}

// Y [n, out] (+)= X [n, in] W^T, row-major, W [out, in] as nn.Linear stores it.
static int gm_gemm(gm_model *g, int n, int out, int in, const float *W, const float *X, int ldx,
                   float *Y, int ldy, int acc, err *e) {
    if (n <= g->skinny) {
        const bool vec =
            in % 4 == 0 && ldx % 4 == 0 && ((uintptr_t)W & 15) == 0 && ((uintptr_t)X & 15) == 0;
        switch (n) {
        case 1:
            launch_matvec<1>(out, in, W, X, ldx, Y, ldy, acc, vec, g->st);
            break;
        case 2:
            launch_matvec<2>(out, in, W, X, ldx, Y, ldy, acc, vec, g->st);
            break;
        case 3:
            launch_matvec<3>(out, in, W, X, ldx, Y, ldy, acc, vec, g->st);
            break;
        case 4:
            launch_matvec<4>(out, in, W, X, ldx, Y, ldy, acc, vec, g->st);
            break;
        case 5:
            launch_matvec<5>(out, in, W, X, ldx, Y, ldy, acc, vec, g->st);
            break;
        case 6:
            launch_matvec<6>(out, in, W, X, ldx, Y, ldy, acc, vec, g->st);
            break;
        case 7:
            launch_matvec<7>(out, in, W, X, ldx, Y, ldy, acc, vec, g->st);
            break;
        default:
            launch_matvec<8>(out, in, W, X, ldx, Y, ldy, acc, vec, g->st);
            break;
        }
        CUDA_LAUNCHED("gpu model: matrix-vector product");
        return 0;
    }
    const float one = 1.0f, zero = 0.0f;
    // row-major Y [n, out] = X W^T is column-major Y^T (out x n) = W^T (W column-major in x out)
    // times X^T (in x n)
    cublasStatus_t s = cublasSgemm(g->blas, CUBLAS_OP_T, CUBLAS_OP_N, out, n, in, &one, W, in, X,
                                   ldx, acc ? &one : &zero, Y, ldy);
    if (s != CUBLAS_STATUS_SUCCESS)
        return err_set(e, "gpu model: cuBLAS product failed (%d x %d x %d, status %d)", n, out, in,
                       (int)s);
    return 0;
}

// The decayed linear-attention core's arguments for tokens [t0, t0 + nc) of layer li (gla, mamba2).
static ld_core_args gm_ld_args(const gm_model *g, int li, int t0, int nc) {
    const gm_fam *F = g->lay[li].f;
    const gm_model_desc *d = &F->d;
    const int H = d->Hv, dk = d->dk, dv = d->dv, row = d->family == GM_FAM_GLA;
    ld_core_args la;
    la.n = nc, la.H = H, la.dk = dk, la.dv = dv, la.nblk = F->nblk, la.row_decay = row;
    la.scale = g->lay[li].scale;
    la.ldqk = (size_t)H * dk, la.ldv = (size_t)H * dv, la.ldg = row ? (size_t)H * dk : (size_t)H;
    la.ldo = (size_t)d->value_dim;
    la.Q = g->Qd + (size_t)t0 * la.ldqk, la.K = g->Kd + (size_t)t0 * la.ldqk;
    la.V = g->Vd + (size_t)t0 * la.ldv, la.G = g->Gd + (size_t)t0 * la.ldg;
    la.state = g->state + g->lay[li].soff, la.O = g->O + (size_t)t0 * la.ldo;
    la.part = g->part + (size_t)t0 * H * F->nblk * LD_NACC;
    la.Sout = NULL, la.sf = F->sf;
    return la;
}

// The delta rule's arguments for tokens [t0, t0 + nc) of layer li.
static gm_core_args gm_delta_args(const gm_model *g, int li, int t0, int nc) {
    const gm_fam *F = g->lay[li].f;
    const gm_model_desc *d = &F->d;
    const gm_layer_dev *Ld = &g->lay[li];
    const int Hv = d->Hv, kd = d->key_dim;
    gm_core_args ca;
    ca.n = nc, ca.H = d->H, ca.Hv = Hv, ca.rep = Hv / d->H, ca.dk = d->dk, ca.dv = d->dv;
    ca.nblk = F->nblk, ca.decay = Ld->core != GM_CORE_DELTANET && d->has_decay;
    ca.scale = Ld->scale;
    ca.ldqk = ca.ldv = (size_t)F->C3, ca.ldo = (size_t)d->value_dim;
    const float *base = g->QKV + (size_t)t0 * F->C3;
    ca.Q = base, ca.K = base + kd, ca.V = base + 2 * (size_t)kd;
    ca.G = g->G + (size_t)t0 * Hv, ca.Beff = g->Beff + (size_t)t0 * Hv;
    ca.K2 = g->K2 + (size_t)t0 * d->H;
    ca.state = g->state + g->lay[li].soff, ca.O = g->O + (size_t)t0 * ca.ldo;
    ca.part = g->part + (size_t)t0 * Hv * F->nblk * GM_NACC;
    ca.Sout = NULL, ca.sf = F->sf;
    return ca;
}

// The recurrence of layer li over tokens [t0, t0 + nc), storing each token's state into Sout
// when given.
static int gm_core_chunk(gm_model *g, int li, int t0, int nc, bool pon, float *Sout, err *e) {
    if (g->lay[li].f->d.family == GM_FAM_DELTA) {
        gm_core_args ca = gm_delta_args(g, li, t0, nc);
        ca.Sout = Sout;
        return gm_core_run(ca, pon, Sout != NULL, g->st, e);
    }
    ld_core_args la = gm_ld_args(g, li, t0, nc);
    la.Sout = Sout;
    return ld_core_run(la, pon, Sout != NULL, g->st, e);
}

// Layer li's readback errors for the call's n tokens: the recurrence in chunks of RB tokens, each
// storing its tokens' states; per chunk and value head one batched product
// R [b][hv] (W x dv) = K_window(t0 + b) (W x dk) S_(t0+b) (dk x dv), then the errors.
static int gm_core_recall(gm_model *g, int li, int n, bool pon, err *e) {
    const gm_fam *F = g->lay[li].f;
    const gm_model_desc *d = &F->d;
    const int W = GM_RECALL_W, hist = W - 1, Hv = d->Hv, rep = Hv / d->H, dk = d->dk, dv = d->dv;
    const float one = 1.0f, zero = 0.0f;
    for (int t0 = 0; t0 < n; t0 += g->RB) {
        const int nc = n - t0 < g->RB ? n - t0 : g->RB;
        if (gm_core_chunk(g, li, t0, nc, pon, g->Sbuf, e)) return -1;
        for (int hv = 0; hv < Hv; hv++) {
            // column-major: R^T (dv x W) = S^T (dv x dk; S row-major [dk][dv]) K^T (dk x W)
            const float *A = g->Sbuf + (size_t)hv * dk * dv;
            const float *Bk = g->kwin + ((size_t)(hv / rep) * (hist + g->B) + t0) * dk;
            float *C = g->R + (size_t)hv * W * dv;
            cublasStatus_t s = cublasSgemmStridedBatched(
                g->blas, CUBLAS_OP_N, CUBLAS_OP_N, dv, W, dk, &one, A, dv, (long long)F->sf, Bk, dk,
                (long long)dk, &zero, C, dv, (long long)Hv * W * dv, nc);
            if (s != CUBLAS_STATUS_SUCCESS)
                return err_set(e, "gpu model: cuBLAS readback product failed (status %d)", (int)s);
        }
        gm_rerr_args ra;
        ra.t0 = t0, ra.W = W, ra.B = g->B, ra.Hv = Hv, ra.dv = dv, ra.L = g->L, ra.li = li;
        ra.R = g->R, ra.vwin = g->vwin, ra.rec = g->rec;
        gm_recall_err<<<dim3(nc, Hv, (W + 31) / 32), 256, 0, g->st>>>(ra);
        CUDA_LAUNCHED("gpu model: readback errors");
    }
    return 0;
}

// Layer li's MLP (when the model has one): x += W_down (SiLU(W_gate xn) * W_up xn).
static int gm_mlp(gm_model *g, int li, int n, err *e) {
    const gm_model_desc *d = &g->fam[0].d; // the model's: every layer's block is
    const gm_layer_dev *Ld = &g->lay[li];
    const int C = d->hidden, I = d->inter;
    if (I <= 0) return 0;
    gm_rmsnorm<<<n, 256, 0, g->st>>>(C, d->norm_eps, g->x, Ld->mlp_norm, g->xn);
    CUDA_LAUNCHED("gpu model: rmsnorm");
    if (gm_gemm(g, n, 2 * I, C, Ld->w_gu, g->xn, C, g->GU, 2 * I, 0, e)) return -1;
    gm_swiglu<<<(unsigned)(((size_t)n * I + 255) / 256), 256, 0, g->st>>>(n, I, g->GU, g->Hm);
    CUDA_LAUNCHED("gpu model: swiglu");
    return gm_gemm(g, n, C, I, Ld->w_down, g->Hm, I, g->x, C, 1, e);
}

// Every family's first steps: P [n, Dtot] = xn W_in^T (+ the in-projection's bias), then, when
// the family convolves, the short convolution of P's C3 channels from conv_off into QKV (act_lo
// below split, act_hi above; without the convolution, the activation alone).
static int gm_in_project(gm_model *g, int li, int n, int conv, int split, int act_lo, int act_hi,
                         err *e) {
    const gm_fam *F = g->lay[li].f;
    const gm_model_desc *d = &F->d;
    const gm_layer_dev *Ld = &g->lay[li];
    if (gm_gemm(g, n, F->Dtot, d->hidden, Ld->w_in, g->xn, d->hidden, g->P, F->Dtot, 0, e))
        return -1;
    if (Ld->in_b) {
        gm_bias<<<(unsigned)(((size_t)n * F->Dtot + 255) / 256), 256, 0, g->st>>>(
            n, F->Dtot, F->Dtot, Ld->in_b, g->P);
        CUDA_LAUNCHED("gpu model: bias");
    }
    if (!conv || F->C3 < 1) return 0;
    gm_conv<<<(F->C3 + 127) / 128, 128, 0, g->st>>>(
        n, F->C3, d->conv_size, F->Dtot, g->P + F->conv_off, Ld->conv_w, Ld->conv_b,
        g->conv + g->lay[li].coff, g->QKV, split, act_lo, act_hi, d->use_conv);
    CUDA_LAUNCHED("gpu model: convolution");
    return 0;
}

// The delta family's layer up to the core's inputs: in-projection, convolution, gates and norms.
static int gm_delta_inputs(gm_model *g, int li, int n, float *fp, int fp_stride, err *e) {
    const gm_fam *F = g->lay[li].f;
    const gm_model_desc *d = &F->d;
    const gm_layer_dev *Ld = &g->lay[li];
    const int Hv = d->Hv, kd = d->key_dim, kacz = Ld->core == GM_CORE_KACZMARZ;
    if (gm_in_project(g, li, n, 1, 2 * kd, d->qk_act, GM_ACT_SILU, e)) return -1;
    gm_prep_args pa;
    pa.H = d->H, pa.Hv = Hv, pa.rep = Hv / d->H, pa.dk = d->dk, pa.kd = kd, pa.C3 = F->C3;
    pa.Dtot = F->Dtot, pa.off_a = F->off_a, pa.off_b = F->off_b;
    pa.decay = Ld->core != GM_CORE_DELTANET && d->has_decay, pa.use_beta = d->use_beta;
    pa.kacz = kacz, pa.sum_norm = d->qk_sum_norm;
    pa.mul = !kacz && d->allow_neg ? 2.0f : 1.0f, pa.eps = Ld->eps;
    pa.QKV = g->QKV, pa.P = g->P, pa.A_log = Ld->A_log, pa.dt_bias = Ld->dt_bias;
    pa.b_bias = Ld->b_bias;
    pa.G = g->G, pa.Bin = g->Bin, pa.Beff = g->Beff, pa.Q2 = g->Q2, pa.K2 = g->K2;
    pa.fp = fp, pa.fp_stride = fp_stride;
    gm_prep<<<n, 256, 0, g->st>>>(pa);
    CUDA_LAUNCHED("gpu model: gates");
    return 0;
}

// gla's layer up to the core's inputs: [q | k | v | g | lr] in one product, the decay's second
// product, the convolutions, then the per-head rows (gm_gla_prep).
static int gm_gla_inputs(gm_model *g, int li, int n, err *e) {
    const gm_fam *F = g->lay[li].f;
    const gm_model_desc *d = &F->d;
    const gm_layer_dev *Ld = &g->lay[li];
    const int grp = d->H / d->Hkv, kpg = d->key_dim / grp;
    const int act = d->use_conv ? GM_ACT_SILU : GM_ACT_NONE;
    if (gm_in_project(g, li, n, 1, F->C3, act, act, e) ||
        gm_gemm(g, n, kpg, d->gk_rank, Ld->gk1, g->P + F->off_lr, F->Dtot, g->GKr, kpg, 0, e))
        return -1;
    gm_gla_args ga;
    ga.H = d->H, ga.dk = d->dk, ga.dv = d->dv, ga.grp = grp, ga.kd = d->key_dim, ga.kpg = kpg;
    ga.C3 = F->C3, ga.fmap = d->feature_map, ga.has_clamp = d->has_clamp;
    ga.norm = d->gate_norm, ga.clamp_min = d->clamp_min;
    ga.CV = g->QKV, ga.GKr = g->GKr, ga.gk_b = Ld->gk1_b;
    ga.Qd = g->Qd, ga.Kd = g->Kd, ga.Vd = g->Vd, ga.Gd = g->Gd;
    gm_gla_prep<<<n, 256, 0, g->st>>>(ga);
    CUDA_LAUNCHED("gpu model: gla inputs");
    return 0;
}

// mamba2's layer up to the core's inputs: in_proj (+ bias), the convolution of xBC, then dt and
// the per-head rows (gm_m2_prep).
static int gm_m2_inputs(gm_model *g, int li, int n, float *fp, int fp_stride, err *e) {
    const gm_fam *F = g->lay[li].f;
    const gm_model_desc *d = &F->d;
    const gm_layer_dev *Ld = &g->lay[li];
    if (gm_in_project(g, li, n, 1, F->C3, GM_ACT_SILU, GM_ACT_SILU, e)) return -1;
    gm_m2_args ma;
    ma.H = d->Hv, ma.N = d->dk, ma.P = d->dv, ma.per = d->Hv / d->n_groups;
    ma.di = d->value_dim, ma.cd = F->C3, ma.Dtot = F->Dtot, ma.dt_off = F->off_lr;
    ma.dt_lo = d->dt_lo, ma.dt_hi = d->dt_hi;
    ma.CV = g->QKV, ma.Pm = g->P, ma.A_log = Ld->A_log, ma.dt_bias = Ld->dt_bias;
    ma.DT = g->Bin, ma.Qd = g->Qd, ma.Kd = g->Kd, ma.Vd = g->Vd, ma.Gd = g->Gd;
    ma.fp = fp, ma.fp_stride = fp_stride;
    gm_m2_prep<<<n, 256, 0, g->st>>>(ma);
    CUDA_LAUNCHED("gpu model: mamba2 inputs");
    return 0;
}

// An attention layer up to the core's inputs: [q | k | v | r] in one product (+ biases), then the
// per-head rows (gm_attn_prep).
static int gm_attn_inputs(gm_model *g, int li, int n, err *e) {
    const gm_fam *F = g->lay[li].f;
    const gm_model_desc *d = &F->d;
    const gm_layer_dev *Ld = &g->lay[li];
    if (gm_in_project(g, li, n, 0, 0, 0, 0, e)) return -1;
    gm_attn_args aa;
    aa.H = d->Hv, aa.Hkv = d->Hkv, aa.d = d->dk, aa.C = d->key_dim, aa.kv = d->Hkv * d->dk;
    aa.Dtot = F->Dtot, aa.qk_norm = d->qk_norm, aa.rope = d->rope, aa.theta = d->rope_theta;
    aa.has_r = Ld->core == GM_CORE_PARALLAX && F->has_r;
    aa.r_zero = Ld->core == GM_CORE_PARALLAX && !F->has_r, aa.pos0 = g->dpos;
    aa.P = g->P, aa.qn = Ld->qn, aa.kn = Ld->kn, aa.rn = Ld->rn;
    aa.Qd = g->Qd, aa.Kd = g->Kd, aa.Vd = g->Vd, aa.Rd = g->Rd;
    gm_attn_prep<<<n, 256, 0, g->st>>>(aa);
    CUDA_LAUNCHED("gpu model: attention inputs");
    return 0;
}

// An attention layer's core: the n tokens' keys and values into the cache (slots pos .. pos + n -
// 1, with the core's own RoPE when it has one), then one decode a token (kernels/attention.cu,
// the lanes' step), its probes straight into the CPU layout ([probe][H] at the layer's offset).
// With attn_dpos both read the position from the device and the decode takes the call's tokens in
// one pair of launches whose grid covers the most splits any position needs (those it does not
// need return at once), so a graph replays them; otherwise one decode a token.
static int gm_attn_core(gm_model *g, int li, int n, bool pon, err *e) {
    const gm_fam *F = g->lay[li].f;
    const gm_model_desc *d = &F->d;
    const gm_layer_dev *Ld = &g->lay[li];
    const int H = d->Hv, dh = d->dk, plx = Ld->core == GM_CORE_PARALLAX;
    const size_t row = (size_t)H * dh;
    float *cache = g->state + g->lay[li].soff;
    float *rd = plx ? g->Rd : NULL, *ro = plx ? g->Ro : NULL;
    if (g->attn_dpos
            ? gpu_attn_prep_dpos(n, H, dh, dh, g->dpos, Ld->core_rope, Ld->core_theta, d->max_t,
                                 g->Qd, rd, g->Kd, g->Vd, cache, g->Qo, ro, g->st, e)
            : gpu_attn_prep(n, H, dh, dh, g->pos, Ld->core_rope, Ld->core_theta, d->max_t, 0, g->Qd,
                            rd, g->Kd, g->Vd, cache, g->Qo, ro, g->st, e))
        return -1;
    float *p = pon ? g->probes + Ld->pm.layer_off : NULL;
    if (g->attn_dpos) // the call's n tokens in one decode
        return gpu_attn_decode_dpos(H, dh, dh, d->max_t, g->dpos, n, Ld->window, Ld->scale, g->Qo,
                                    ro, cache, g->O, (size_t)d->value_dim, p, (size_t)g->ptot,
                                    g->ascr, g->st, e);
    for (int t = 0; t < n; t++)
        if (gpu_attn_decode(H, dh, dh, d->max_t, g->pos + t, Ld->window, Ld->scale, g->Qo + t * row,
                            ro ? ro + t * row : NULL, cache, g->O + (size_t)t * d->value_dim,
                            p ? p + (size_t)t * g->ptot : NULL, g->ascr, g->st, e))
            return -1;
    return 0;
}

// A KATA layer up to the core's inputs: [q | k | v | b] in one product, the convolutions, then
// the per-head rows (gm_kata_prep).
static int gm_kata_inputs(gm_model *g, int li, int n, err *e) {
    const gm_fam *F = g->lay[li].f;
    const gm_model_desc *d = &F->d;
    const gm_layer_dev *Ld = &g->lay[li];
    const int act = d->use_conv ? GM_ACT_SILU : GM_ACT_NONE;
    if (gm_in_project(g, li, n, 1, F->C3, act, act, e)) return -1;
    gm_kata_args ka;
    ka.H = d->Hv, ka.d = d->dk, ka.C3 = F->C3, ka.Dtot = F->Dtot, ka.off_b = F->off_b;
    ka.qk_norm = d->qk_norm, ka.rope = d->rope != 0, ka.theta = d->rope_theta, ka.pos0 = g->dpos;
    ka.beta = d->kata_variant == KATA_DELTA, ka.b_proj = Ld->has_b;
    ka.QKV = g->QKV, ka.P = g->P, ka.Qd = g->Qd, ka.Kd = g->Kd, ka.Vd = g->Vd, ka.Bin = g->Bin;
    gm_kata_prep<<<n, 256, 0, g->st>>>(ka);
    CUDA_LAUNCHED("gpu model: kata inputs");
    return 0;
}

// A KATA layer's core: one step a token (kernels/kata.cu, the lanes' step), its probes straight
// into the CPU layout at the layer's offset; DeltaKATA's calls of several tokens without probes in
// its chunked form (kernels/kata_delta.cu, gpu_kata_delta_call_chunk).
static int gm_kata_core(gm_model *g, int li, int n, bool pon, err *e) {
    const gm_fam *F = g->lay[li].f;
    const gm_model_desc *d = &F->d;
    const gm_layer_dev *Ld = &g->lay[li];
    const int H = d->Hv, dh = d->dk, var = d->kata_variant, grp = d->kata_groups;
    const size_t row = (size_t)H * dh;
    float *S = g->state + g->lay[li].soff;
    const int C = !pon && var == KATA_DELTA && g->kcscr ? gpu_kata_delta_call_chunk(n, dh) : 0;
    if (C)
        return gpu_kata_delta_chunked(n, H, dh, dh, grp, C, Ld->scale, 0, g->Qd, g->Kd, g->Vd,
                                      g->Bin, S, g->O, g->kcscr, g->st, e);
    for (int t = 0; t < n; t++) {
        const float *q = g->Qd + t * row, *k = g->Kd + t * row, *v = g->Vd + t * row;
        float *o = g->O + t * row;
        float *p = pon ? g->probes + (size_t)t * g->ptot + Ld->pm.layer_off : NULL;
        int rc = var == KATA_DELTA
                     ? gpu_kata_delta_step(H, dh, dh, grp, Ld->scale, q, k, v,
                                           g->Bin + (size_t)t * H, S, o, p, g->kscr, g->st, e)
                     : gpu_kata_step_probes(H, dh, dh, var, grp, Ld->scale, Ld->eps, q, k, v, S, o,
                                            p, g->kscr, g->st, e);
        if (rc) return -1;
    }
    return 0;
}

// A Kalman layer up to the core's inputs: in_proj, the convolution of z' (SiLU), the sensor
// product of z, then the per-token rows (gm_kal_prep).
static int gm_kal_inputs(gm_model *g, int li, int n, err *e) {
    const gm_fam *F = g->lay[li].f;
    const gm_model_desc *d = &F->d;
    const gm_layer_dev *Ld = &g->lay[li];
    const int M = d->dv, S = d->dk;
    if (gm_in_project(g, li, n, 1, M, GM_ACT_SILU, GM_ACT_SILU, e)) return -1;
    if (gm_gemm(g, n, 2 * M + 2 * S, M, Ld->sens, g->QKV, M, g->SENS, 2 * M + 2 * S, 0, e))
        return -1;
    gm_kal_args ka;
    ka.M = M, ka.S = S, ka.qk_norm = d->qk_norm, ka.SENS = g->SENS;
    ka.Qd = g->Qd, ka.Kd = g->Kd, ka.Vd = g->Vd, ka.LV = g->Gd;
    gm_kal_prep<<<n, 256, 0, g->st>>>(ka);
    CUDA_LAUNCHED("gpu model: kalman inputs");
    return 0;
}

// A Kalman layer's core (one step a token, the lanes' kernels; its probes straight into the CPU
// layout) and post, up to the out-projection's input ON.
static int gm_kal_core(gm_model *g, int li, int n, bool pon, err *e) {
    const gm_fam *F = g->lay[li].f;
    const gm_model_desc *d = &F->d;
    const gm_layer_dev *Ld = &g->lay[li];
    const int M = d->dv, S = d->dk;
    float *st = g->state + g->lay[li].soff;
    for (int t = 0; t < n; t++) {
        const float *q = g->Qd + (size_t)t * S, *k = g->Kd + (size_t)t * S;
        const float *v = g->Vd + (size_t)t * M, *lv = g->Gd + (size_t)t * M;
        float *o = g->O + (size_t)t * M;
        int rc = pon ? gpu_kalman_step_probes(
                           1, M, S, Ld->scale, Ld->prior, q, k, v, lv, Ld->ka, Ld->kp, st, o,
                           g->probes + (size_t)t * g->ptot + Ld->pm.layer_off, g->st, e)
                     : gpu_kalman_step(1, M, S, Ld->scale, Ld->prior, 0, q, k, v, lv, Ld->ka,
                                       Ld->kp, st, o, g->st, e);
        if (rc) return -1;
    }
    gm_kal_post<<<(unsigned)(((size_t)n * M + 255) / 256), 256, 0, g->st>>>(
        n, M, d->use_gating, g->O, g->QKV, g->P, Ld->skip, g->ON);
    CUDA_LAUNCHED("gpu model: kalman output");
    return 0;
}

// Layer li's keys and values of the call's n tokens (into the window, kout / vout): the ring
// (gm_ring_in / out) for the model's layers, gm_kv_out for a hybrid's attention layers.
static int gm_layer_kv(gm_model *g, int li, int n, err *e) {
    const gm_fam *F = g->lay[li].f;
    const gm_model_desc *d = &F->d;
    const int Hv = d->Hv, kd = d->key_dim, vd = d->value_dim, delta = d->family == GM_FAM_DELTA;
    if (F != &g->fam[0]) {
        gm_kvout_args ka;
        ka.H = Hv, ka.dk = d->dk, ka.dv = d->dv, ka.L = g->L, ka.li = li;
        ka.KH = g->KH, ka.Kdk = g->Kdk, ka.Kdv = g->Kdv;
        ka.K = g->Kd, ka.V = g->Vd, ka.kout = g->kout, ka.vout = g->vout;
        gm_kv_out<<<dim3(n, Hv), 128, 0, g->st>>>(ka);
        CUDA_LAUNCHED("gpu model: keys and values out");
        return 0;
    }
    const int hist = GM_RECALL_W - 1;
    gm_ring_args ra;
    ra.n = n, ra.B = g->B, ra.W = GM_RECALL_W, ra.H = d->H, ra.Hv = Hv;
    ra.rep = Hv / d->H, ra.dk = d->dk, ra.dv = d->dv, ra.L = g->L, ra.li = li;
    ra.KH = g->KH, ra.Kdk = g->Kdk, ra.Kdv = g->Kdv;
    ra.Ks = delta ? g->QKV + kd : g->Kd, ra.ldk = delta ? (size_t)F->C3 : (size_t)kd;
    ra.Vs = delta ? g->QKV + 2 * (size_t)kd : g->Vd;
    ra.ldv = delta ? (size_t)F->C3 : (size_t)vd;
    ra.khist = g->khist + (size_t)li * d->H * hist * d->dk;
    ra.vhist = g->vhist + (size_t)li * Hv * hist * d->dv;
    ra.kwin = g->kwin, ra.vwin = g->vwin, ra.kout = g->kout, ra.vout = g->vout;
    gm_ring_in<<<dim3(hist + n, Hv), 128, 0, g->st>>>(ra);
    CUDA_LAUNCHED("gpu model: window in");
    gm_ring_out<<<dim3(hist, Hv), 128, 0, g->st>>>(ra);
    CUDA_LAUNCHED("gpu model: window out");
    return 0;
}

// Every launch of one call of n tokens, in order, on g->st; mode: GM_M_* bits. Each layer follows
// its own description (a hybrid's attention layers their specification's).
static int gm_record(gm_model *g, int n, int mode, err *e) {
    const int pon = (mode & GM_M_PROBES) != 0, kvm = (mode & GM_M_KV) != 0;
    const int rec = (mode & GM_M_RECALL) != 0;
    const gm_model_desc *md = &g->fam[0].d;
    const int C = md->hidden, L = g->L;
    const int fp_stride = L * g->fam[0].nfam * md->Hv;
    cudaStream_t st = g->st;
    gm_embed<<<n, 256, 0, st>>>(C, g->embed, g->tok, g->x);
    CUDA_LAUNCHED("gpu model: embedding");
    for (int li = 0; li < L; li++) {
        const gm_layer_dev *Ld = &g->lay[li];
        const gm_fam *F = Ld->f;
        const gm_model_desc *d = &F->d;
        const int Hv = d->Hv, vd = d->value_dim, delta = d->family == GM_FAM_DELTA;
        // the family probes: the model's layers' (a hybrid's attention layers have none)
        float *fp = pon && F == &g->fam[0] ? g->fprobes + (size_t)li * F->nfam * Hv : NULL;
        gm_rmsnorm<<<n, 256, 0, st>>>(C, md->norm_eps, g->x, Ld->attn_norm, g->xn);
        CUDA_LAUNCHED("gpu model: rmsnorm");
        int rc = d->family == GM_FAM_DELTA    ? gm_delta_inputs(g, li, n, fp, fp_stride, e)
                 : d->family == GM_FAM_GLA    ? gm_gla_inputs(g, li, n, e)
                 : d->family == GM_FAM_ATTN   ? gm_attn_inputs(g, li, n, e)
                 : d->family == GM_FAM_KATA   ? gm_kata_inputs(g, li, n, e)
                 : d->family == GM_FAM_KALMAN ? gm_kal_inputs(g, li, n, e)
                                              : gm_m2_inputs(g, li, n, fp, fp_stride, e);
        if (rc || (kvm && gm_layer_kv(g, li, n, e))) return -1;
        if (d->family == GM_FAM_KALMAN) {
            if (gm_kal_core(g, li, n, pon, e) ||
                gm_gemm(g, n, C, vd, Ld->w_o, g->ON, vd, g->x, C, 1, e) || gm_mlp(g, li, n, e))
                return -1;
            continue;
        }
        if (d->family == GM_FAM_ATTN || d->family == GM_FAM_KATA) {
            if ((d->family == GM_FAM_ATTN ? gm_attn_core(g, li, n, pon, e)
                                          : gm_kata_core(g, li, n, pon, e)) ||
                gm_gemm(g, n, C, vd, Ld->w_o, g->O, vd, g->x, C, 1, e))
                return -1;
            if (gm_mlp(g, li, n, e)) return -1;
            continue;
        }
        if (rec ? gm_core_recall(g, li, n, pon, e) : gm_core_chunk(g, li, 0, n, pon, NULL, e))
            return -1;
        if (pon && delta) {
            const gm_core_args ca = gm_delta_args(g, li, 0, n);
            gm_fin_args fa;
            fa.H = d->H, fa.Hv = Hv, fa.rep = Hv / d->H, fa.nblk = F->nblk, fa.decay = ca.decay;
            fa.G = g->G, fa.Bin = g->Bin, fa.Beff = g->Beff, fa.Q2 = g->Q2, fa.K2 = g->K2;
            fa.part = g->part, fa.probes = g->probes;
            if (gm_probe_fin_run(fa, Ld->pm, n, st, e)) return -1;
        } else if (pon && ld_probe_fin_run(gm_ld_args(g, li, 0, n), Ld->pm, g->probes, st, e)) {
            return -1;
        }
        if (d->family == GM_FAM_MAMBA2) {
            gm_m2_post_args mp;
            mp.di = vd, mp.P = d->dv, mp.group = d->norm_group, mp.cd = F->C3, mp.Dtot = F->Dtot;
            mp.D_has_hdim = d->D_has_hdim, mp.eps = d->norm_eps;
            mp.O = g->O, mp.CV = g->QKV, mp.Pm = g->P, mp.D = Ld->D, mp.w = Ld->o_norm;
            mp.ON = g->ON;
            gm_m2_post<<<n, 256, 0, st>>>(mp);
            CUDA_LAUNCHED("gpu model: mamba2 output norm");
        } else {
            gm_post_args po;
            po.Hv = Hv, po.dv = d->dv, po.vd = vd, po.Dtot = F->Dtot, po.off_g = F->off_g;
            po.use_gate = d->use_gate, po.eps = d->norm_eps, po.O = g->O, po.P = g->P;
            po.fp_rstd = delta ? 2 : 0, po.fp_gate = delta ? 3 : 1, po.rstd_double = !delta;
            po.w = Ld->o_norm, po.ON = g->ON;
            po.fp = fp, po.fp_stride = fp_stride;
            gm_post<<<n, 256, 0, st>>>(po);
            CUDA_LAUNCHED("gpu model: output norm");
        }
        if (gm_gemm(g, n, C, vd, Ld->w_o, g->ON, vd, g->x, C, 1, e)) return -1;
        if (Ld->out_b) {
            gm_bias<<<(unsigned)(((size_t)n * C + 255) / 256), 256, 0, st>>>(n, C, C, Ld->out_b,
                                                                             g->x);
            CUDA_LAUNCHED("gpu model: bias");
        }
        if (gm_mlp(g, li, n, e)) return -1;
    }
    gm_rmsnorm<<<n, 256, 0, st>>>(C, md->norm_eps, g->x, g->norm_f, g->xn);
    CUDA_LAUNCHED("gpu model: final norm");
    if (gm_gemm(g, n, md->vocab, C, g->lm_head, g->xn, C, g->logits, md->vocab, 0, e)) return -1;
    gm_head<<<n, 1024, 0, st>>>(md->vocab, g->logits, g->next, g->top, g->topp, g->nll);
    CUDA_LAUNCHED("gpu model: head");
    return 0;
}

static size_t al64(size_t n) {
    return (n + 63) & ~(size_t)63;
}

#define GM_ALLOC(ptr, count)                                                                       \
    do {                                                                                           \
        if (!((ptr) = (decltype(ptr))gpu_malloc((size_t)(count) * sizeof(*(ptr)), e))) goto fail;  \
    } while (0)

static int up(float *dst, const float *src, size_t floats, err *e) {
    if (!src) return 0;
    CUDA_TRY(cudaMemcpy(dst, src, floats * sizeof(float), cudaMemcpyHostToDevice),
             "gpu model: weight upload");
    return 0;
}

extern "C" void gm_destroy(gm_model *g) {
    if (!g) return;
    if (g->st) cudaStreamSynchronize(g->st);
    if (g->graphs)
        for (int i = 0; i < GM_MODES * (g->B + 1); i++)
            if (g->graphs[i]) cudaGraphExecDestroy(g->graphs[i]);
    free(g->graphs), free(g->seen);
    if (g->blas) cublasDestroy(g->blas);
    if (g->st) cudaStreamDestroy(g->st);
    void *dev[] = {g->arena,  g->state,  g->conv,    g->x,    g->xn,   g->P,    g->QKV,  g->G,
                   g->Bin,    g->Beff,   g->Q2,      g->K2,   g->O,    g->ON,   g->GU,   g->Hm,
                   g->logits, g->probes, g->fprobes, g->tok,  g->top,  g->part, g->ws,   g->khist,
                   g->vhist,  g->kwin,   g->vwin,    g->kout, g->vout, g->rec,  g->Sbuf, g->R,
                   g->Qd,     g->Kd,     g->Vd,      g->Gd,   g->GKr,  g->Rd,   g->Qo,   g->Ro,
                   g->ascr,   g->kscr,   g->kcscr,   g->SENS};
    for (size_t i = 0; i < sizeof dev / sizeof dev[0]; i++) gpu_free(dev[i]);
    if (g->pin) cudaFreeHost(g->pin);
    if (g->pin2) cudaFreeHost(g->pin2);
    free(g->lay);
    free(g);
}

static int env_int(const char *name, int def) {
    const char *s = getenv(name);
    return s && *s ? atoi(s) : def;
}

// The weight arena: `slot` hands out the next al64(count) floats (NULL in a dry run, which only
// counts them); `take` also uploads src there and points dst at it (NULL when src is: a tensor
// the config does not have).
struct gm_arena {
    float *base;
    size_t used;
};

static float *slot(gm_arena *a, size_t count) {
    float *p = a->base ? a->base + a->used : NULL;
    a->used += al64(count);
    return p;
}

static int take(gm_arena *a, const float **dst, size_t count, const float *src, err *e) {
    float *p = slot(a, count);
    *dst = src ? p : NULL;
    return p ? up(p, src, count, e) : 0;
}

// Layer li's weights: arena layout, upload, and the device pointers (a dry run counts).
static int gm_layer_weights(const gm_fam *F, const gm_layer_desc *l, gm_layer_dev *Ld, gm_arena *ar,
                            err *e) {
    const gm_model_desc *d = &F->d;
    const size_t C = d->hidden, kd = d->key_dim, vd = d->value_dim, Hv = d->Hv, I = d->inter;
    const size_t W = d->use_conv ? d->conv_size : 1;
    memset(Ld, 0, sizeof *Ld);
    Ld->f = F;
    float *w_in = slot(ar, (size_t)F->Dtot * C); // every part of the in-projection: [Dtot, C]
    float *cw = slot(ar, F->cf), *cb = slot(ar, F->C3); // the convolution streams one after another
    float *w_gu = slot(ar, 2 * I * C);                  // [gate; up]
    Ld->w_in = w_in, Ld->conv_w = cw, Ld->w_gu = w_gu;
    if (take(ar, &Ld->attn_norm, C, l->attn_norm, e) ||
        take(ar, &Ld->w_o, C * vd, l->out_proj ? l->out_proj : l->o_proj, e) ||
        take(ar, &Ld->mlp_norm, C, l->mlp_norm, e) || take(ar, &Ld->w_down, C * I, l->down_proj, e))
        return -1;
    if (w_gu && I > 0 &&
        (up(w_gu, l->gate_proj, I * C, e) || up(w_gu + I * C, l->up_proj, I * C, e)))
        return -1;
    // pieces of w_in: (source, rows) in order
    const float *part[6] = {0};
    size_t rows[6] = {0};
    int np = 0;
    const float *cpart[3] = {0}, *cbias[3] = {0};
    switch (d->family) {
    case GM_FAM_DELTA:
        part[0] = l->q_proj, rows[0] = kd, part[1] = l->k_proj, rows[1] = kd;
        part[2] = l->v_proj, rows[2] = vd, np = 3;
        if (d->has_decay) part[np] = l->a_proj, rows[np++] = Hv;
        if (d->use_beta) part[np] = l->b_proj, rows[np++] = Hv;
        if (d->use_gate) part[np] = l->g_proj, rows[np++] = vd;
        cpart[0] = l->q_conv, cpart[1] = l->k_conv, cpart[2] = l->v_conv;
        cbias[0] = l->q_conv_b, cbias[1] = l->k_conv_b, cbias[2] = l->v_conv_b;
        if (take(ar, &Ld->A_log, Hv, l->A_log, e) || take(ar, &Ld->dt_bias, Hv, l->dt_bias, e) ||
            take(ar, &Ld->b_bias, Hv, l->b_bias, e) || take(ar, &Ld->o_norm, d->dv, l->o_norm, e))
            return -1;
        break;
    case GM_FAM_GLA: {
        const size_t grp = d->H / d->Hkv, kpg = kd / grp, vpg = vd / grp;
        part[0] = l->q_proj, rows[0] = kd, part[1] = l->k_proj, rows[1] = kpg;
        part[2] = l->v_proj, rows[2] = vpg, np = 3;
        if (d->use_gate) part[np] = l->g_proj, rows[np++] = vd;
        part[np] = l->gk0, rows[np++] = d->gk_rank;
        cpart[0] = l->q_conv, cpart[1] = l->k_conv, cpart[2] = l->v_conv;
        cbias[0] = l->q_conv_b, cbias[1] = l->k_conv_b, cbias[2] = l->v_conv_b;
        if (take(ar, &Ld->gk1, kpg * d->gk_rank, l->gk1, e) ||
            take(ar, &Ld->gk1_b, kpg, l->gk1_b, e) || take(ar, &Ld->o_norm, d->dv, l->o_norm, e))
            return -1;
        break;
    }
    case GM_FAM_ATTN: {
        const size_t kv = (size_t)d->Hkv * d->dk;
        part[0] = l->q_proj, rows[0] = kd, part[1] = l->k_proj, rows[1] = kv;
        part[2] = l->v_proj, rows[2] = kv, np = 3;
        if (F->has_r) part[np] = l->r_proj, rows[np++] = kd;
        float *bias = d->qkv_bias ? slot(ar, F->Dtot) : NULL;
        Ld->in_b = bias;
        if (bias && (up(bias, l->q_bias, kd, e) || up(bias + kd, l->k_bias, kv, e) ||
                     up(bias + kd + kv, l->v_bias, kv, e) ||
                     (F->has_r && up(bias + kd + 2 * kv, l->r_bias, kd, e))))
            return -1;
        if (take(ar, &Ld->qn, d->dk, l->q_norm, e) || take(ar, &Ld->kn, d->dk, l->k_norm, e) ||
            take(ar, &Ld->rn, d->dk, l->r_norm, e))
            return -1;
        Ld->window = l->window, Ld->core_rope = l->core_rope, Ld->core_theta = l->core_theta;
        break;
    }
    case GM_FAM_KATA:
        part[0] = l->q_proj, rows[0] = kd, part[1] = l->k_proj, rows[1] = kd;
        part[2] = l->v_proj, rows[2] = vd, np = 3;
        if (d->kata_variant == KATA_DELTA) part[np] = l->b_proj, rows[np++] = Hv;
        cpart[0] = l->q_conv, cpart[1] = l->k_conv, cpart[2] = l->v_conv;
        Ld->has_b = l->b_proj != NULL;
        break;
    case GM_FAM_KALMAN: {
        const size_t M = d->dv, S = d->dk;
        part[0] = l->in_proj, rows[0] = 2 * M, np = 1;
        cpart[0] = l->conv_w, cbias[0] = l->conv_b;
        if (take(ar, &Ld->sens, (2 * M + 2 * S) * M, l->sensor_proj, e) ||
            take(ar, &Ld->ka, M * S, l->kal_a, e) || take(ar, &Ld->kp, M * S, l->kal_p, e) ||
            take(ar, &Ld->skip, 1, l->skip, e))
            return -1;
        Ld->prior = l->prior;
        break;
    }
    default: // GM_FAM_MAMBA2
        part[0] = l->in_proj, rows[0] = F->Dtot, np = 1;
        cpart[0] = l->conv_w, cbias[0] = l->conv_b;
        if (take(ar, &Ld->in_b, F->Dtot, l->in_proj_b, e) ||
            take(ar, &Ld->A_log, Hv, l->A_log, e) || take(ar, &Ld->dt_bias, Hv, l->dt_bias, e) ||
            take(ar, &Ld->D, d->D_has_hdim ? vd : Hv, l->D, e) ||
            take(ar, &Ld->o_norm, vd, l->norm_w, e) || take(ar, &Ld->out_b, C, l->out_proj_b, e))
            return -1;
        break;
    }
    if (!ar->base) return 0;
    size_t r0 = 0;
    for (int i = 0; i < np; i++) {
        if (up(w_in + r0 * C, part[i], rows[i] * C, e)) return -1;
        r0 += rows[i];
    }
    // the convolution streams: weights [dims, W] and biases (all streams' or none)
    int nb = 0, ns = 0;
    for (int s = 0; s < 3; s++)
        if (d->conv_dims[s] > 0) ns++, nb += cbias[s] != NULL;
    size_t c0 = 0;
    for (int s = 0; d->use_conv && s < 3; s++) {
        if (d->conv_dims[s] <= 0) continue;
        if (up(cw + c0 * W, cpart[s], (size_t)d->conv_dims[s] * W, e) ||
            (nb == ns && up(cb + c0, cbias[s], (size_t)d->conv_dims[s], e)))
            return -1;
        c0 += d->conv_dims[s];
    }
    Ld->conv_b = d->use_conv && nb == ns ? cb : NULL;
    Ld->core = l->core, Ld->scale = l->scale, Ld->eps = l->eps;
    return 0;
}

// One description's dimensions and flags (md: the model's, for a hybrid's attention
// specifications).
static int gm_check_desc(const gm_model_desc *d, const gm_model_desc *md, err *e) {
    if (d->dk < 1 || d->dk > GM_MAX_DK)
        return err_set(e, "gpu model: key head width %d outside 1..%d", d->dk, GM_MAX_DK);
    if (d->H < 1 || d->Hv < d->H || d->Hv % d->H || d->key_dim != d->H * d->dk ||
        d->value_dim != d->Hv * d->dv || d->family < GM_FAM_DELTA || d->family > GM_FAM_KALMAN ||
        (d->family != GM_FAM_DELTA && d->H != d->Hv) || d->family_probes < 0 ||
        d->family_probes > GM_FAMILY_PROBES)
        return err_set(e, "gpu model: inconsistent heads (H %d, Hv %d, dk %d, dv %d)", d->H, d->Hv,
                       d->dk, d->dv);
    if (d != md &&
        (d->family != GM_FAM_ATTN || d->layers != md->layers || d->hidden != md->hidden ||
         d->vocab != md->vocab || d->inter != md->inter || d->family_probes != 0))
        return err_set(e, "gpu model: a hybrid's other layers must be attention layers of the "
                          "model's sizes");
    if (d->family == GM_FAM_GLA &&
        (d->Hkv < 1 || d->H % d->Hkv || d->gk_rank < 1 || !(d->gate_norm > 0.0f)))
        return err_set(e, "gpu model: inconsistent gla layer (kv heads %d, rank %d)", d->Hkv,
                       d->gk_rank);
    if (d->family == GM_FAM_MAMBA2 && (d->n_groups < 1 || d->H % d->n_groups || d->norm_group < 1 ||
                                       d->value_dim % d->norm_group || !d->use_conv ||
                                       d->conv_dims[0] != d->value_dim + 2 * d->n_groups * d->dk))
        return err_set(e, "gpu model: inconsistent mamba2 layer (groups %d)", d->n_groups);
    if (d->family == GM_FAM_ATTN &&
        (d->dk != d->dv || d->Hkv < 1 || d->H % d->Hkv || d->max_t < 1 || (d->rope && d->dk % 2)))
        return err_set(e, "gpu model: inconsistent attention layer (kv heads %d, KV cache %d)",
                       d->Hkv, d->max_t);
    if (d->family == GM_FAM_KATA && d->dk != d->dv)
        return err_set(e, "gpu model: kata heads of %d keys and %d values", d->dk, d->dv);
    const size_t want = d->family == GM_FAM_ATTN ? (size_t)d->max_t * d->Hv * (d->dk + d->dv)
                                                 : (size_t)d->Hv * d->dk * d->dv; // [Hv, dk, dv]
    if (d->family != GM_FAM_KATA && d->family != GM_FAM_KALMAN && d->state_floats != want)
        return err_set(e, "gpu model: a layer's state of %zu floats, not %zu", d->state_floats,
                       want);
    if (d->state_floats < 1) return err_set(e, "gpu model: no state");
    return 0;
}

// The tensors layer l's description implies are there.
static int gm_check_layer(const gm_model_desc *d, const gm_layer_desc *l, const gm_layer_desc *l0,
                          int li, err *e) {
    int bad = l->nprobes > GM_MAX_PROBES || l->nprobes < 0 ||
              (d->inter > 0 && (!l->gate_proj || !l->up_proj || !l->down_proj));
    switch (d->family) {
    case GM_FAM_DELTA:
        bad |= !l->q_proj || !l->k_proj || !l->v_proj || !l->o_proj ||
               (d->has_decay && (!l->a_proj || !l->A_log || !l->dt_bias)) ||
               (d->use_beta && !l->b_proj) || (d->use_gate && !l->g_proj) ||
               (d->use_conv && (!l->q_conv || !l->k_conv || !l->v_conv)) || l->core < 0 ||
               l->core > GM_CORE_KACZMARZ;
        break;
    case GM_FAM_GLA:
        bad |= !l->q_proj || !l->k_proj || !l->v_proj || !l->o_proj || !l->gk0 || !l->gk1 ||
               (d->use_gate && !l->g_proj) ||
               (d->use_conv && (!l->q_conv || !l->k_conv || !l->v_conv)) || l->core != GM_CORE_GLA;
        break;
    case GM_FAM_KALMAN:
        bad |= !l->in_proj || !l->sensor_proj || !l->kal_a || !l->kal_p || !l->skip ||
               !l->out_proj || (d->use_conv && !l->conv_w) || l->core != GM_CORE_KALMAN;
        break;
    case GM_FAM_KATA:
        bad |= !l->q_proj || !l->k_proj || !l->v_proj || !l->o_proj ||
               (d->use_conv && (!l->q_conv || !l->k_conv || !l->v_conv)) || l->core != GM_CORE_KATA;
        break;
    case GM_FAM_ATTN: // l0: the first layer of this description (r_proj in all or none)
        bad |= !l->q_proj || !l->k_proj || !l->v_proj || !l->o_proj ||
               (d->qkv_bias && (!l->q_bias || !l->k_bias || !l->v_bias)) ||
               (d->qk_norm && (!l->q_norm || !l->k_norm)) || (!l->r_proj) != (!l0->r_proj) ||
               (l->core != GM_CORE_SOFTMAX && l->core != GM_CORE_PARALLAX);
        break;
    default:
        bad |= !l->in_proj || !l->conv_w || !l->A_log || !l->dt_bias || !l->D || !l->out_proj ||
               (d->use_bias && (!l->in_proj_b || !l->out_proj_b)) || l->core != GM_CORE_MAMBA2;
        break;
    }
    return bad ? err_set(e, "gpu model: layer %d lacks a tensor its config implies", li) : 0;
}

// What follows from description d: the in-projection's layout, the state's and caches' sizes.
// l0: its first layer (NULL: none).
static void gm_fam_init(gm_fam *F, const gm_model_desc *d, const gm_layer_desc *l0) {
    memset(F, 0, sizeof *F);
    F->d = *d;
    F->d.layer = NULL, F->d.sub = NULL, F->d.nsub = 0;
    const int kd = d->key_dim, vd = d->value_dim, Hv = d->Hv;
    F->nfam = d->family_probes;
    F->C3 = d->conv_dims[0] + d->conv_dims[1] + d->conv_dims[2];
    switch (d->family) {
    case GM_FAM_DELTA:
        F->off_a = F->C3;
        F->off_b = F->off_a + (d->has_decay ? Hv : 0);
        F->off_g = F->off_b + (d->use_beta ? Hv : 0);
        F->Dtot = F->off_g + (d->use_gate ? vd : 0);
        break;
    case GM_FAM_GLA:
        F->off_g = F->C3;
        F->off_lr = F->off_g + (d->use_gate ? vd : 0);
        F->Dtot = F->off_lr + d->gk_rank;
        break;
    case GM_FAM_KALMAN: // [z' | g']: the convolution reads z'
        F->Dtot = 2 * vd;
        break;
    case GM_FAM_KATA: // [q | k | v | b]
        F->off_b = F->C3;
        F->Dtot = F->C3 + (d->kata_variant == KATA_DELTA ? Hv : 0);
        break;
    case GM_FAM_ATTN: // [q | k | v | r]
        F->has_r = l0 && l0->r_proj != NULL;
        F->Dtot = kd + 2 * d->Hkv * d->dk + (F->has_r ? kd : 0);
        break;
    default: // [z | xBC | dt]: the convolution reads xBC, dt lies at off_lr
        F->conv_off = vd;
        F->off_lr = vd + F->C3;
        F->Dtot = F->off_lr + Hv;
        break;
    }
    F->nblk = (d->dv + 31) / 32;
    F->sf = d->state_floats;
    F->cf = (size_t)F->C3 * (d->use_conv ? d->conv_size : 1);
}

// The per-call buffers' widths: the largest any description needs.
struct gm_widths {
    size_t Dtot, C3, H, kd, vd, gd, gkr, akd, ascr, part;
    size_t Kdk, Kdv, linear; // linear: some family beside the delta rule (Qd, Kd, Vd, Gd)
};

static void gm_widen(size_t *field, size_t v) {
    if (v > *field) *field = v;
}

static gm_widths gm_buffer_widths(const gm_model *g) {
    gm_widths w;
    memset(&w, 0, sizeof w);
    w.gkr = 1;
    for (int k = 0; k < g->nf; k++) {
        const gm_fam *F = &g->fam[k];
        const gm_model_desc *d = &F->d;
        gm_widen(&w.Dtot, F->Dtot), gm_widen(&w.C3, F->C3), gm_widen(&w.H, d->Hv);
        gm_widen(&w.kd, d->key_dim), gm_widen(&w.vd, d->value_dim);
        gm_widen(&w.part, (size_t)d->Hv * F->nblk);
        gm_widen(&w.Kdk, d->dk), gm_widen(&w.Kdv, d->dv);
        w.linear |= d->family != GM_FAM_DELTA;
        // gla: log-decays [kd] and the decay product [kd / g]; mamba2: [H]; kalman: lambda_v [M]
        gm_widen(&w.gd, d->family == GM_FAM_GLA      ? d->key_dim
                        : d->family == GM_FAM_KALMAN ? d->value_dim
                                                     : d->Hv);
        if (d->family == GM_FAM_GLA) gm_widen(&w.gkr, d->key_dim / (d->H / d->Hkv));
        if (d->family == GM_FAM_ATTN) {
            gm_widen(&w.akd, d->key_dim);
            gm_widen(&w.ascr, gpu_attn_decode_scratch_bytes(d->Hv, d->dv, d->max_t));
        }
    }
    return w;
}

extern "C" int gm_create(gm_model **out, const gm_model_desc *md, int max_batch, err *e) {
    *out = NULL;
    if (max_batch < 1) return err_set(e, "gpu model: max_batch must be at least 1");
    if (md->nsub < 0 || md->nsub > GM_MAX_DESCS - 1 || (md->nsub && !md->sub))
        return err_set(e, "gpu model: %d attention specifications (at most %d)", md->nsub,
                       GM_MAX_DESCS - 1);
    if (gm_check_desc(md, md, e)) return -1;
    for (int k = 0; k < md->nsub; k++)
        if (gm_check_desc(&md->sub[k], md, e)) return -1;
    if (!md->embed || !md->lm_head) return err_set(e, "gpu model: no embedding or head");
    const gm_layer_desc *first[GM_MAX_DESCS] = {0}; // each description's first layer
    for (int li = 0; li < md->layers; li++) {
        const gm_layer_desc *l = &md->layer[li];
        if (l->desc < 0 || l->desc > md->nsub)
            return err_set(e, "gpu model: layer %d: description %d of %d", li, l->desc,
                           md->nsub + 1);
        if (!first[l->desc]) first[l->desc] = l;
        if (gm_check_layer(l->desc ? &md->sub[l->desc - 1] : md, l, first[l->desc], li, e))
            return -1;
    }
    gm_model *g = (gm_model *)calloc(1, sizeof *g);
    if (!g) return err_set(e, "out of memory");
    g->nf = 1 + md->nsub;
    for (int k = 0; k < g->nf; k++) gm_fam_init(&g->fam[k], k ? &md->sub[k - 1] : md, first[k]);
    const gm_model_desc *d = &g->fam[0].d; // the model's
    const int L = md->layers, C = d->hidden, Hv = d->Hv, I = d->inter, V = d->vocab;
    const int B = max_batch;
    g->L = L, g->B = B;
    const gm_widths w = gm_buffer_widths(g);
    g->KH = (int)w.H, g->Kdk = (int)w.Kdk, g->Kdv = (int)w.Kdv;
    for (int k = 0; k < g->nf; k++)
        if (g->fam[k].d.family == GM_FAM_ATTN) {
            if (g->attn && g->fam[k].d.max_t != g->max_t) {
                err_set(e, "gpu model: attention layers of KV caches of %d and %d slots", g->max_t,
                        g->fam[k].d.max_t);
                goto fail;
            }
            g->attn = 1, g->max_t = g->fam[k].d.max_t;
        }
    // attention's decode reads the position on the device over a grid of its most splits; past
    // GM_ATTN_GRAPH_SPLITS of them (a long cache without a window) the idle splits would cost more
    // than the launches a graph saves: the position as a launch argument then, and no graphs
    g->attn_dpos = 1;
    for (int li = 0; li < L; li++) {
        const gm_fam *F = &g->fam[md->layer[li].desc];
        if (F->d.family == GM_FAM_ATTN &&
            gpu_attn_decode_splits(F->d.max_t, md->layer[li].window) > GM_ATTN_GRAPH_SPLITS)
            g->attn_dpos = 0;
    }
    g->use_graph = env_int("MIXSCOPE_GM_GRAPH", 1) != 0 && (!g->attn || g->attn_dpos);
    g->skinny = env_int("MIXSCOPE_GM_SKINNY", 8);
    if (g->skinny > 8) g->skinny = 8;
    g->RB = env_int("MIXSCOPE_GM_RECALL_CHUNK", 64);
    if (g->RB < 1 || g->RB > B) g->RB = B < 64 ? B : 64;
    g->ptot = 0;
    for (int li = 0; li < L; li++) g->ptot += md->layer[li].probe_floats;
    {
        const int tied = md->lm_head == md->embed;
        g->lay = (gm_layer_dev *)calloc((size_t)(L ? L : 1), sizeof *g->lay);
        if (!g->lay) {
            err_set(e, "out of memory");
            goto fail;
        }
        gm_arena ar = {NULL, al64((size_t)V * C) * (tied ? 1 : 2) + al64(C)};
        for (int li = 0; li < L; li++)
            if (gm_layer_weights(&g->fam[md->layer[li].desc], &md->layer[li], &g->lay[li], &ar, e))
                goto fail;
        GM_ALLOC(g->arena, ar.used);
        float *p = g->arena;
        float *embed = p;
        p += al64((size_t)V * C);
        float *head = embed;
        if (!tied) head = p, p += al64((size_t)V * C);
        float *norm_f = p;
        p += al64(C);
        if (up(embed, md->embed, (size_t)V * C, e) ||
            (!tied && up(head, md->lm_head, (size_t)V * C, e)) || up(norm_f, md->norm_f, C, e))
            goto fail;
        g->embed = embed, g->lm_head = head, g->norm_f = md->norm_f ? norm_f : NULL;
        ar.base = g->arena, ar.used = (size_t)(p - g->arena);
        size_t soff = 0, coff = 0, poff = 0;
        for (int li = 0; li < L; li++) {
            const gm_layer_desc *l = &md->layer[li];
            gm_layer_dev *Ld = &g->lay[li];
            if (gm_layer_weights(&g->fam[l->desc], l, Ld, &ar, e)) goto fail;
            Ld->soff = soff, Ld->coff = coff;
            soff += Ld->f->sf, coff += Ld->f->cf;
            Ld->pm.n = l->nprobes;
            Ld->pm.tok_stride = g->ptot;
            Ld->pm.layer_off = (int)poff, Ld->pm.head_stride = 1;
            Ld->ptail = l->probe_tail > 0 && l->probe_tail <= l->probe_floats ? l->probe_tail : 0;
            Ld->pfloats = l->probe_floats;
            poff += l->probe_floats;
            for (int k = 0; k < l->nprobes; k++)
                Ld->pm.map[k] = l->probe_map[k], Ld->pm.off[k] = l->probe_off[k];
        }
        g->stot = soff, g->ctot = coff;
    }
    GM_ALLOC(g->state, g->stot + 1);
    GM_ALLOC(g->conv, g->ctot + 1);
    if (cudaMemset(g->state, 0, (g->stot + 1) * sizeof(float)) != cudaSuccess ||
        cudaMemset(g->conv, 0, (g->ctot + 1) * sizeof(float)) != cudaSuccess) {
        err_set(e, "gpu model: cannot clear the state");
        goto fail;
    }
    {
        // the per-call buffers, each as large as the widest description needs
        GM_ALLOC(g->x, (size_t)B * C);
        GM_ALLOC(g->xn, (size_t)B * C);
        GM_ALLOC(g->P, (size_t)B * w.Dtot);
        GM_ALLOC(g->QKV, (size_t)B * w.C3 + 1);
        GM_ALLOC(g->G, (size_t)B * w.H);
        GM_ALLOC(g->Bin, (size_t)B * w.H);
        GM_ALLOC(g->Beff, (size_t)B * w.H);
        GM_ALLOC(g->Q2, (size_t)B * w.H);
        GM_ALLOC(g->K2, (size_t)B * w.H);
        GM_ALLOC(g->O, (size_t)B * w.vd);
        GM_ALLOC(g->ON, (size_t)B * w.vd);
        GM_ALLOC(g->GU, (size_t)B * 2 * (I > 0 ? I : 1));
        GM_ALLOC(g->Hm, (size_t)B * (I > 0 ? I : 1));
        GM_ALLOC(g->logits, (size_t)B * V);
        GM_ALLOC(g->probes, (size_t)B * g->ptot + 1);
        GM_ALLOC(g->fprobes, (size_t)B * L * g->fam[0].nfam * Hv + 1);
        if (w.linear) {
            GM_ALLOC(g->Qd, (size_t)B * w.kd);
            GM_ALLOC(g->Kd, (size_t)B * w.kd);
            GM_ALLOC(g->Vd, (size_t)B * w.vd);
            GM_ALLOC(g->Gd, (size_t)B * w.gd);
            GM_ALLOC(g->GKr, (size_t)B * w.gkr);
        }
        if (d->family == GM_FAM_KALMAN) GM_ALLOC(g->SENS, (size_t)B * (2 * w.vd + 2 * w.kd));
        if (d->family == GM_FAM_KATA) {
            const int delta = d->kata_variant == KATA_DELTA;
            const size_t kb = delta ? gpu_kata_delta_scratch_bytes(Hv, d->dk, d->dv, d->kata_groups)
                                    : gpu_kata_scratch_bytes(1, 1, Hv, d->dk, d->dv,
                                                             d->kata_variant, d->kata_groups, 0);
            GM_ALLOC(g->kscr, kb);
            if (delta)
                GM_ALLOC(g->kcscr, gpu_kata_delta_chunked_scratch_bytes(Hv, d->dk, d->dv,
                                                                        d->kata_groups, 64));
        }
        if (g->attn) {
            GM_ALLOC(g->Rd, (size_t)B * w.akd);
            GM_ALLOC(g->Qo, (size_t)B * w.akd);
            GM_ALLOC(g->Ro, (size_t)B * w.akd);
            GM_ALLOC(g->ascr, w.ascr * (g->attn_dpos ? B : 1)); // a token's, or the call's
        }
        GM_ALLOC(g->part, (size_t)B * w.part * GM_NACC);
    }
    GM_ALLOC(g->tok, 2 * (size_t)B + 1);
    g->next = g->tok + B, g->dpos = g->tok + 2 * B;
    GM_ALLOC(g->top, 3 * (size_t)B); // top, then topp and nll: one copy back
    g->topp = (float *)(g->top + B), g->nll = g->topp + B;
    GM_ALLOC(g->ws, GM_WS_BYTES);
    {
        size_t pin = (3 * (size_t)B + 1) * 4 +
                     ((size_t)B * V + 2 * (size_t)B + (size_t)B * g->ptot +
                      (size_t)B * L * g->fam[0].nfam * Hv) *
                         4 +
                     256;
        cudaError_t rc = cudaMallocHost(&g->pin, pin);
        if (rc != cudaSuccess) {
            g->pin = NULL;
            err_set(e, "gpu model: cannot pin %zu bytes: %s", pin, cudaGetErrorString(rc));
            goto fail;
        }
        int32_t *ip = (int32_t *)g->pin;
        g->p_tok = ip, g->p_next = ip + B, g->p_pos = ip + 2 * B, g->p_top = ip + 2 * B + 1;
        float *fp = (float *)(ip + 3 * B + 1); // topp and nll right after top, as on the device
        g->p_topp = fp, fp += B;
        g->p_nll = fp, fp += B;
        g->p_logits = fp, fp += (size_t)B * V;
        g->p_probes = fp, fp += (size_t)B * g->ptot;
        g->p_fprobes = fp;
    }
    if (cudaStreamCreateWithFlags(&g->st, cudaStreamNonBlocking) != cudaSuccess) {
        g->st = NULL;
        err_set(e, "gpu model: cannot create a stream");
        goto fail;
    }
    if (cublasCreate(&g->blas) != CUBLAS_STATUS_SUCCESS) {
        g->blas = NULL;
        err_set(e, "gpu model: cannot start cuBLAS");
        goto fail;
    }
    if (cublasSetMathMode(g->blas, CUBLAS_PEDANTIC_MATH) != CUBLAS_STATUS_SUCCESS ||
        cublasSetStream(g->blas, g->st) != CUBLAS_STATUS_SUCCESS ||
        cublasSetWorkspace(g->blas, g->ws, GM_WS_BYTES) != CUBLAS_STATUS_SUCCESS) {
        err_set(e, "gpu model: cannot configure cuBLAS");
        goto fail;
    }
    if (d->family == GM_FAM_KATA && d->kata_variant == KATA_DELTA &&
        gpu_kata_delta_prepare(Hv, d->dk, d->dv, d->kata_groups, g->kscr, g->st, e))
        goto fail;
    g->graphs = (cudaGraphExec_t *)calloc(GM_MODES * (size_t)(B + 1), sizeof *g->graphs);
    g->seen = (unsigned char *)calloc(GM_MODES * (size_t)(B + 1), 1);
    if (!g->graphs || !g->seen) {
        err_set(e, "out of memory");
        goto fail;
    }
    *out = g;
    return 0;
fail:
    gm_destroy(g);
    return -1;
}

// The window's history emptied (every row NaN: bytes 0xff).
static int gm_ring_clear(gm_model *g, err *e) {
    g->held = 0;
    if (!g->kv_ready) return 0;
    const size_t hist = GM_RECALL_W - 1;
    const gm_model_desc *d = &g->fam[0].d;
    CUDA_TRY(
        cudaMemsetAsync(g->khist, 0xff, (size_t)g->L * d->H * hist * d->dk * sizeof(float), g->st),
        "gpu model: window reset");
    CUDA_TRY(
        cudaMemsetAsync(g->vhist, 0xff, (size_t)g->L * d->Hv * hist * d->dv * sizeof(float), g->st),
        "gpu model: window reset");
    return 0;
}

// The window's buffers on first use (k / v / recall asked): the rings (the model's layers'
// heads and widths), k / v / recall out and their pinned staging; with rec also the per-token
// states and readbacks. Whatever is allocated stays (a retry after a failure allocates the
// rest); pointers never change afterwards, so the captured graphs stay valid. k / v / recall out
// start NaN: what no layer writes (a hybrid's narrower heads, its attention layers' readback
// errors) stays NaN.
static int gm_recall_alloc(gm_model *g, int rec, err *e) {
    const gm_model_desc *d = &g->fam[0].d;
    const size_t W = GM_RECALL_W, hist = W - 1, B = g->B, L = g->L, H = d->H, Hv = d->Hv;
    const size_t dk = d->dk, dv = d->dv, KH = g->KH, Kdk = g->Kdk, Kdv = g->Kdv;
    if (!g->kv_ready) {
        struct {
            float **p;
            size_t n;
            int nan;
        } bufs[] = {{&g->khist, L * H * hist * dk, 0},  {&g->vhist, L * Hv * hist * dv, 0},
                    {&g->kwin, H * (hist + B) * dk, 0}, {&g->vwin, Hv * (hist + B) * dv, 0},
                    {&g->kout, B * L * KH * Kdk, 1},    {&g->vout, B * L * KH * Kdv, 1},
                    {&g->rec, B * L * Hv * W, 1}};
        for (size_t i = 0; i < sizeof bufs / sizeof bufs[0]; i++) {
            if (*bufs[i].p) continue;
            if (!(*bufs[i].p = (float *)gpu_malloc(bufs[i].n * sizeof(float), e)))
                return err_prefix(e, "gpu model: the readback window");
            if (bufs[i].nan)
                CUDA_TRY(cudaMemsetAsync(*bufs[i].p, 0xff, bufs[i].n * sizeof(float), g->st),
                         "gpu model: the readback window");
        }
        if (!g->pin2) {
            const size_t n = B * L * (KH * (Kdk + Kdv) + Hv * W);
            cudaError_t rc = cudaMallocHost(&g->pin2, n * sizeof(float));
            if (rc != cudaSuccess) {
                g->pin2 = NULL;
                return err_set(e, "gpu model: cannot pin %zu bytes: %s", n * sizeof(float),
                               cudaGetErrorString(rc));
            }
            g->p_k = (float *)g->pin2;
            g->p_v = g->p_k + B * L * KH * Kdk;
            g->p_rec = g->p_v + B * L * KH * Kdv;
        }
        g->kv_ready = 1;
        if (gm_ring_clear(g, e)) return -1;
    }
    if (rec) {
        const size_t RB = g->RB;
        if (!g->Sbuf && !(g->Sbuf = (float *)gpu_malloc(RB * g->fam[0].sf * sizeof(float), e)))
            return err_prefix(e, "gpu model: the readback window");
        if (!g->R && !(g->R = (float *)gpu_malloc(RB * Hv * W * dv * sizeof(float), e)))
            return err_prefix(e, "gpu model: the readback window");
    }
    return 0;
}

extern "C" int gm_recall_held(const gm_model *g) {
    return g->held;
}

extern "C" int gm_recall_fill(gm_model *g, const float *k, const float *v, int n, err *e) {
    if (n < 0) return err_set(e, "gpu model: %d window tokens", n);
    if (gm_recall_alloc(g, 0, e)) return -1;
    const gm_model_desc *d = &g->fam[0].d; // the window holds the model's layers
    const size_t hist = GM_RECALL_W - 1, L = g->L, H = d->H, Hv = d->Hv, rep = Hv / H;
    const size_t dk = d->dk, dv = d->dv, m = (size_t)n < hist ? (size_t)n : hist;
    const size_t KH = g->KH, Kdk = g->Kdk, Kdv = g->Kdv;
    const size_t nk = L * H * hist * dk, nv = L * Hv * hist * dv;
    float *hk = (float *)malloc(nk * sizeof(float)), *hvv = (float *)malloc(nv * sizeof(float));
    if (!hk || !hvv) {
        free(hk), free(hvv);
        return err_set(e, "out of memory");
    }
    for (size_t i = 0; i < nk; i++) hk[i] = NAN;
    for (size_t i = 0; i < nv; i++) hvv[i] = NAN;
    for (size_t q = 0; q < m; q++) {
        const size_t s = (size_t)n - m + q, p = hist - m + q; // input token, history row
        for (size_t li = 0; li < L; li++)
            for (size_t hv = 0; hv < Hv && g->lay[li].f == &g->fam[0]; hv++) {
                const size_t src = (s * L + li) * KH + hv;
                if (v) memcpy(hvv + ((li * Hv + hv) * hist + p) * dv, v + src * Kdv, dv * 4);
                if (k && hv % rep == 0)
                    memcpy(hk + ((li * H + hv / rep) * hist + p) * dk, k + src * Kdk, dk * 4);
            }
    }
    cudaError_t rc = cudaStreamSynchronize(g->st);
    if (rc == cudaSuccess)
        rc = cudaMemcpyAsync(g->khist, hk, nk * sizeof(float), cudaMemcpyHostToDevice, g->st);
    if (rc == cudaSuccess)
        rc = cudaMemcpyAsync(g->vhist, hvv, nv * sizeof(float), cudaMemcpyHostToDevice, g->st);
    if (rc == cudaSuccess) rc = cudaStreamSynchronize(g->st);
    free(hk), free(hvv);
    if (rc != cudaSuccess)
        return err_set(e, "gpu model: window upload: %s", cudaGetErrorString(rc));
    g->held = (int)m;
    return 0;
}

// Where each convolution stream's cache lies in a layer's of description d (floats) and how
// long it is.
static void gm_conv_streams(const gm_model_desc *d, size_t off[3], size_t len[3]) {
    const size_t W = d->use_conv ? d->conv_size : 1;
    size_t o = 0;
    for (int s = 0; s < 3; s++) {
        off[s] = o, len[s] = (size_t)d->conv_dims[s] * W;
        o += len[s];
    }
}

extern "C" int gm_upload(gm_model *g, const float *const *state, const float *const *conv, err *e) {
    if (gm_ring_clear(g, e)) return -1; // a new position: the window's keys are not the state's
    CUDA_TRY(cudaStreamSynchronize(g->st), "gpu model");
    for (int li = 0; li < g->L; li++) {
        const gm_layer_dev *Ld = &g->lay[li];
        const gm_model_desc *d = &Ld->f->d;
        size_t soff[3], sn[3];
        gm_conv_streams(d, soff, sn);
        if (state && state[li])
            CUDA_TRY(cudaMemcpy(g->state + Ld->soff, state[li], Ld->f->sf * sizeof(float),
                                cudaMemcpyHostToDevice),
                     "gpu model: state upload");
        for (int s = 0; d->use_conv && conv && s < 3; s++)
            if (conv[3 * li + s] && sn[s])
                CUDA_TRY(cudaMemcpy(g->conv + Ld->coff + soff[s], conv[3 * li + s],
                                    sn[s] * sizeof(float), cudaMemcpyHostToDevice),
                         "gpu model: cache upload");
    }
    return 0;
}

extern "C" int gm_download(gm_model *g, float *const *state, float *const *conv, err *e) {
    CUDA_TRY(cudaStreamSynchronize(g->st), "gpu model");
    for (int li = 0; li < g->L; li++) {
        const gm_layer_dev *Ld = &g->lay[li];
        const gm_model_desc *d = &Ld->f->d;
        size_t soff[3], sn[3];
        gm_conv_streams(d, soff, sn);
        if (state && state[li])
            CUDA_TRY(cudaMemcpy(state[li], g->state + Ld->soff, Ld->f->sf * sizeof(float),
                                cudaMemcpyDeviceToHost),
                     "gpu model: state download");
        for (int s = 0; d->use_conv && conv && s < 3; s++)
            if (conv[3 * li + s] && sn[s])
                CUDA_TRY(cudaMemcpy(conv[3 * li + s], g->conv + Ld->coff + soff[s],
                                    sn[s] * sizeof(float), cudaMemcpyDeviceToHost),
                         "gpu model: cache download");
    }
    return 0;
}

// Runs one call's launches: eagerly the first time a shape is met, as a captured graph after.
static int gm_launch(gm_model *g, int n, int mode, err *e) {
    const int key = mode * (g->B + 1) + n;
    if (!g->use_graph || !g->seen[key]) {
        g->seen[key] = 1;
        return gm_record(g, n, mode, e);
    }
    if (!g->graphs[key]) {
        cudaGraph_t graph = NULL;
        CUDA_TRY(cudaStreamBeginCapture(g->st, cudaStreamCaptureModeThreadLocal),
                 "gpu model: graph capture");
        int rc = gm_record(g, n, mode, e);
        cudaError_t ce = cudaStreamEndCapture(g->st, &graph);
        if (rc || ce != cudaSuccess) {
            // nothing captured ran: the launches one by one from now on (as the lanes do)
            if (graph) cudaGraphDestroy(graph);
            cudaGetLastError();
            g->use_graph = 0;
            return gm_record(g, n, mode, e);
        }
        cudaError_t ie = cudaGraphInstantiateWithFlags(&g->graphs[key], graph, 0);
        cudaGraphDestroy(graph);
        if (ie != cudaSuccess) {
            g->graphs[key] = NULL;
            return err_set(e, "gpu model: graph instantiate: %s", cudaGetErrorString(ie));
        }
    }
    CUDA_TRY(cudaGraphLaunch(g->graphs[key], g->st), "gpu model: graph launch");
    return 0;
}

extern "C" int gm_step(gm_model *g, const int32_t *tokens, int n, int pos, const int32_t *next,
                       const gm_outputs *out, err *e) {
    if (n < 1 || n > g->B) return err_set(e, "gpu model: %d tokens in one call (1..%d)", n, g->B);
    g->pos = pos;
    const gm_model_desc *md = &g->fam[0].d;
    if (md->family == GM_FAM_ATTN && out->recall)
        return err_set(e, "gpu model: attention layers have no readback picture");
    if (g->attn && (g->pos < 0 || g->pos + n > g->max_t))
        return err_set(e, "gpu model: tokens %d..%d past the KV cache (%d slots)", g->pos,
                       g->pos + n - 1, g->max_t);
    const int V = md->vocab, pon = out->probes || out->fprobes;
    const int kvm = out->k || out->v || out->recall, rec = out->recall != NULL;
    const int mode = (pon ? GM_M_PROBES : 0) | (kvm ? GM_M_KV : 0) | (rec ? GM_M_RECALL : 0);
    const size_t nfp = (size_t)g->L * g->fam[0].nfam * md->Hv;
    const size_t nk = (size_t)g->L * g->KH * g->Kdk, nv = (size_t)g->L * g->KH * g->Kdv;
    const size_t nr = (size_t)g->L * md->Hv * GM_RECALL_W;
    if (kvm && gm_recall_alloc(g, rec, e)) return -1;
    // a call that keeps no window leaves a gap: the keys before it are gone
    if (!kvm && g->held > 0 && gm_ring_clear(g, e)) return -1;
    memcpy(g->p_tok, tokens, (size_t)n * sizeof(int32_t));
    for (int t = 0; t < n; t++) g->p_next[t] = next ? next[t] : -1;
    cudaStream_t st = g->st;
    // tok and next lie one after the other on both sides: one copy
    *g->p_pos = g->pos;
    CUDA_TRY(
        cudaMemcpyAsync(g->tok, g->p_tok, (2 * (size_t)g->B + 1) * 4, cudaMemcpyHostToDevice, st),
        "gpu model: tokens");
    if (gm_launch(g, n, mode, e)) return -1;
    if (out->logits)
        CUDA_TRY(
            cudaMemcpyAsync(g->p_logits, g->logits, (size_t)n * V * 4, cudaMemcpyDeviceToHost, st),
            "gpu model: logits");
    if (out->top || out->topp || out->nll) // top, topp, nll: one region
        CUDA_TRY(
            cudaMemcpyAsync(g->p_top, g->top, 3 * (size_t)g->B * 4, cudaMemcpyDeviceToHost, st),
            "gpu model: head");
    if (out->probes && !out->probes_tail)
        CUDA_TRY(cudaMemcpyAsync(g->p_probes, g->probes, (size_t)n * g->ptot * 4,
                                 cudaMemcpyDeviceToHost, st),
                 "gpu model: probes");
    for (int li = 0; out->probes && out->probes_tail && li < g->L; li++) {
        // each layer's tail, n rows of ptot floats apart
        const gm_layer_dev *Ld = &g->lay[li];
        const size_t off = (size_t)Ld->pm.layer_off + Ld->ptail, w = Ld->pfloats - Ld->ptail;
        if (w)
            CUDA_TRY(cudaMemcpy2DAsync(g->p_probes + off, (size_t)g->ptot * 4, g->probes + off,
                                       (size_t)g->ptot * 4, w * 4, n, cudaMemcpyDeviceToHost, st),
                     "gpu model: probes");
    }
    if (out->fprobes)
        CUDA_TRY(cudaMemcpyAsync(g->p_fprobes, g->fprobes, (size_t)n * nfp * 4,
                                 cudaMemcpyDeviceToHost, st),
                 "gpu model: probes");
    if (out->state)
        CUDA_TRY(cudaMemcpyAsync(out->state, g->state, g->stot * 4, cudaMemcpyDeviceToHost, st),
                 "gpu model: state");
    if (out->k)
        CUDA_TRY(cudaMemcpyAsync(g->p_k, g->kout, (size_t)n * nk * 4, cudaMemcpyDeviceToHost, st),
                 "gpu model: keys");
    if (out->v)
        CUDA_TRY(cudaMemcpyAsync(g->p_v, g->vout, (size_t)n * nv * 4, cudaMemcpyDeviceToHost, st),
                 "gpu model: values");
    if (out->recall)
        CUDA_TRY(cudaMemcpyAsync(g->p_rec, g->rec, (size_t)n * nr * 4, cudaMemcpyDeviceToHost, st),
                 "gpu model: readback");
    CUDA_TRY(cudaStreamSynchronize(st), "gpu model: step");
    if (kvm) g->held = g->held + n < GM_RECALL_W - 1 ? g->held + n : GM_RECALL_W - 1;
    if (out->k) memcpy(out->k, g->p_k, (size_t)n * nk * 4);
    if (out->v) memcpy(out->v, g->p_v, (size_t)n * nv * 4);
    if (out->recall) memcpy(out->recall, g->p_rec, (size_t)n * nr * 4);
    if (out->logits) memcpy(out->logits, g->p_logits, (size_t)n * V * 4);
    if (out->top) memcpy(out->top, g->p_top, (size_t)n * 4);
    if (out->topp) memcpy(out->topp, g->p_topp, (size_t)n * 4);
    if (out->nll) memcpy(out->nll, g->p_nll, (size_t)n * 4);
    if (out->probes && !out->probes_tail) memcpy(out->probes, g->p_probes, (size_t)n * g->ptot * 4);
    for (int li = 0; out->probes && out->probes_tail && li < g->L; li++) {
        const gm_layer_dev *Ld = &g->lay[li];
        const size_t off = (size_t)Ld->pm.layer_off + Ld->ptail, w = Ld->pfloats - Ld->ptail;
        for (int t = 0; t < n && w; t++)
            memcpy(out->probes + (size_t)t * g->ptot + off, g->p_probes + (size_t)t * g->ptot + off,
                   w * 4);
    }
    if (out->fprobes) memcpy(out->fprobes, g->p_fprobes, (size_t)n * nfp * 4);
    return 0;
}

extern "C" void gm_kv_shape(const gm_model *g, int *heads, int *dk, int *dv) {
    *heads = g->KH, *dk = g->Kdk, *dv = g->Kdv;
}
