/* blocks.c: dense building blocks (see blocks.h). Norm reductions accumulate in double (cheap: one
 * per vector); matrix-vector products in float with eight partial sums. The reference (fla in
 * float32 on a GPU) sums in its own order anyway; both keep our rounding far below the 1e-4 logit
 * tolerance. */
#include "blocks.h"

#include <math.h>
#include <stddef.h>

float blk_sigmoid(float x) {
    return 1.0f / (1.0f + expf(-x));
}

float blk_silu(float x) {
    return x / (1.0f + expf(-x));
}

float blk_softplus(float x) {
    /* PyTorch softplus(beta=1, threshold=20): x above the threshold */
    return x > 20.0f ? x : log1pf(expf(x));
}

float blk_logsigmoid(float x) {
    /* log(sigmoid(x)) = min(x, 0) - log1p(exp(-|x|)), stable on both sides */
    return (x < 0.0f ? x : 0.0f) - log1pf(expf(-fabsf(x)));
}

void blk_act_apply(float *x, int n, blk_act a) {
    switch (a) {
    case ACT_NONE:
        return;
    case ACT_SILU:
        for (int i = 0; i < n; i++) x[i] = blk_silu(x[i]);
        return;
    case ACT_RELU:
        for (int i = 0; i < n; i++) x[i] = x[i] > 0.0f ? x[i] : 0.0f;
        return;
    case ACT_ELU_P1:
        for (int i = 0; i < n; i++) x[i] = x[i] > 0.0f ? x[i] + 1.0f : expf(x[i]);
        return;
    case ACT_SIGMOID:
        for (int i = 0; i < n; i++) x[i] = blk_sigmoid(x[i]);
        return;
    }
}

/* One process-wide setting: the REPL runs one model at a time, and model.c scopes it to a call. */
static blk_linear_backend linear_backend;

void blk_set_linear_backend(blk_linear_backend fn) {
    linear_backend = fn;
}

void blk_linear(float *y, const float *x, const float *W, const float *b, int out, int in) {
    if (linear_backend && linear_backend(y, x, W, b, out, in) == 0) return;
    /* eight float partial sums per row: the compiler vectorises the lanes, and summing 8 short
     * runs keeps the rounding of a dot product of a few hundred terms near 1e-7 relative */
    for (int o = 0; o < out; o++) {
        const float *w = W + (size_t)o * (size_t)in;
        float acc[8] = {0};
        int i = 0;
        for (; i + 8 <= in; i += 8)
            for (int l = 0; l < 8; l++) acc[l] += w[i + l] * x[i + l];
        for (; i < in; i++) acc[i & 7] += w[i] * x[i];
        float s = ((acc[0] + acc[1]) + (acc[2] + acc[3])) + ((acc[4] + acc[5]) + (acc[6] + acc[7]));
        y[o] = b ? s + b[o] : s;
    }
}

float blk_rmsnorm(float *y, const float *x, const float *w, int n, float eps) {
    double ss = 0.0;
    for (int i = 0; i < n; i++) ss += (double)x[i] * (double)x[i];
    float rstd = (float)(1.0 / sqrt(ss / n + (double)eps));
    for (int i = 0; i < n; i++) y[i] = x[i] * rstd * (w ? w[i] : 1.0f);
    return rstd;
}

void blk_rmsnorm_gated(float *y, const float *x, const float *z, const float *w, int n, float eps) {
    blk_rmsnorm(y, x, w, n, eps);
    for (int i = 0; i < n; i++) y[i] *= blk_silu(z[i]);
}

void blk_gate_rmsnorm(float *y, const float *x, const float *z, const float *w, int n,
                      int group_size, float eps) {
    for (int i = 0; i < n; i++) y[i] = x[i] * blk_silu(z[i]);
    for (int g0 = 0; g0 < n; g0 += group_size) blk_rmsnorm(y + g0, y + g0, w + g0, group_size, eps);
}

float blk_l2norm(float *x, int n, float eps) {
    double ss = 0.0;
    for (int i = 0; i < n; i++) ss += (double)x[i] * (double)x[i];
    float r = (float)(1.0 / sqrt(ss + (double)eps));
    for (int i = 0; i < n; i++) x[i] *= r;
    return (float)sqrt(ss);
}

void blk_sumnorm(float *x, int n) {
    double s = 0.0;
    for (int i = 0; i < n; i++) s += x[i];
    for (int i = 0; i < n; i++) x[i] = (float)(x[i] / s);
}

void blk_conv_step(float *y, float *cache, const float *x, const float *w, const float *b, int D,
                   int W, blk_act act) {
    for (int d = 0; d < D; d++) {
        float *c = cache + (size_t)d * (size_t)W;
        const float *wd = w + (size_t)d * (size_t)W;
        for (int i = 0; i + 1 < W; i++) c[i] = c[i + 1];
        c[W - 1] = x[d];
        double acc = b ? (double)b[d] : 0.0;
        for (int i = 0; i < W; i++) acc += (double)c[i] * (double)wd[i];
        y[d] = (float)acc;
    }
    blk_act_apply(y, D, act);
}

/* inv_freq_i = 1 / base^(2i/d) and the angle pos * inv_freq_i, both in float32 as torch does */
static void rope_angle(int i, int d, int pos, float base, float *c, float *s) {
    float ex = (float)(2 * i) / (float)d;
    float inv = 1.0f / powf(base, ex);
    float ang = (float)pos * inv;
    *c = cosf(ang), *s = sinf(ang);
}

void blk_rope(float *x, int H, int d, int pos, float base) {
    int half = d / 2;
    for (int i = 0; i < half; i++) {
        float c, s;
        rope_angle(i, d, pos, base, &c, &s);
        for (int h = 0; h < H; h++) {
            float *xh = x + (size_t)h * (size_t)d;
            float a = xh[i], b = xh[i + half];
            xh[i] = a * c - b * s;
            xh[i + half] = b * c + a * s;
        }
    }
}

void blk_rope_interleaved(float *x, int H, int d, int pos, float base) {
    for (int i = 0; i < d / 2; i++) {
        float c, s;
        rope_angle(i, d, pos, base, &c, &s);
        for (int h = 0; h < H; h++) {
            float *xh = x + (size_t)h * (size_t)d;
            float a = xh[2 * i], b = xh[2 * i + 1];
            xh[2 * i] = a * c - b * s;
            xh[2 * i + 1] = b * c + a * s;
        }
    }
}

void blk_mlp(float *y, const float *x, const float *W_gate, const float *W_up, const float *W_down,
             int C, int I, float *h1, float *h2) {
    blk_linear(h1, x, W_gate, NULL, I, C);
    blk_linear(h2, x, W_up, NULL, I, C);
    for (int i = 0; i < I; i++) h1[i] = blk_silu(h1[i]) * h2[i];
    blk_linear(y, h1, W_down, NULL, C, I);
}

long blk_mlp_intermediate(long hidden, double hidden_ratio) {
    long i = (long)((double)hidden * hidden_ratio * 2.0 / 3.0);
    return 256 * ((i + 255) / 256);
}
