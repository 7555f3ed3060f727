/* blocks.c: dense building blocks (see blocks.h). Norm reductions accumulate in double (cheap: one
 * per vector); matrix products in float with eight partial sums per output (below). The reference
 * (fla in float32 on a GPU) sums in its own order anyway; both keep our rounding far below the
 * 1e-4 logit tolerance. */
#include "blocks.h"

#include <math.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "../core/pool.h"

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

/* ---- dense products ----
 *
 * Every output y[o] (of one token) is one dot product summed in one fixed order, whatever computes
 * it: eight float lanes, lane l summing w[i] x[i] for i = l mod 8 over the first 8 floor(in / 8)
 * terms (a multiply, then an add: never fused), the lanes added in a fixed tree, the remaining
 * in mod 8 terms added in order, then the bias. The kernels below differ only in how many rows
 * and tokens they carry at once (to reuse each load), so blk_linear, blk_linear_batch, any split
 * of the rows over threads and both instruction sets give the same bits. Rows are split over the
 * pool (core/pool.h), never one row's sum.
 *
 * GCC's vector extension writes the lanes: SSE2 (the x86-64 baseline) runs each 8-lane vector
 * as two 4-lane halves; on machines with AVX2 the same code compiled for it (target("avx2"),
 * picked per call by __builtin_cpu_supports) holds one in a 256-bit register. Without FMA neither
 * can contract a multiply and an add, so they agree. (Not target_clones: its load-time resolver
 * runs before ThreadSanitizer's runtime is up, and the binary crashed at start under it.) */
typedef float v8 __attribute__((vector_size(32)));
/* an unaligned load of 8 floats */
typedef float v8u __attribute__((vector_size(32), aligned(4), may_alias));
#define LD8(p) (*(const v8u *)(p))

/* -DBLK_BASELINE_ONLY builds the baseline loops alone (to compare the two builds' bits) */
#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__)) && !defined(BLK_BASELINE_ONLY)
#define BLK_X86 1
#endif
#define BLK_INLINE static inline __attribute__((always_inline))

/* the lanes in a fixed tree, the tail in order, the bias */
BLK_INLINE float dot_finish(const v8 *acc, const float *w, const float *x, int i, int in,
                            const float *b) {
    const v8 a = *acc;
    float s = ((a[0] + a[1]) + (a[2] + a[3])) + ((a[4] + a[5]) + (a[6] + a[7]));
    for (; i < in; i++) s += w[i] * x[i];
    return b ? s + *b : s;
}

/* y[0] = w . x (one row, one token) */
BLK_INLINE void dot_1x1(float *y, const float *x, const float *w, int in, const float *b) {
    v8 a = {0};
    int i = 0;
    for (; i + 8 <= in; i += 8) a += LD8(w + i) * LD8(x + i);
    y[0] = dot_finish(&a, w, x, i, in, b);
}

/* Weights stream from memory in address order: this machine's prefetchers follow one sequential
 * stream well but not four or eight interleaved ones (rows 4 KiB apart ran at a third of the
 * bandwidth). So each kernel walking a block of rows (contiguous: ld == in) also prefetches the
 * next block, pf, two cache lines per step, the whole block over one pass. pf may be the block
 * itself (the last one): prefetching what is cached costs a load slot. */
#define PF_STEP(pf, i)                                                                             \
    (__builtin_prefetch((pf) + 4 * (size_t)(i)), __builtin_prefetch((pf) + 4 * (size_t)(i) + 16))

/* y[r] = W[r] . x for 4 rows of stride ld (one token) */
BLK_INLINE void dot_4x1(float *y, const float *x, const float *W, size_t ld, int in, const float *b,
                        const float *pf) {
    const float *w0 = W, *w1 = W + ld, *w2 = W + 2 * ld, *w3 = W + 3 * ld;
    v8 a0 = {0}, a1 = {0}, a2 = {0}, a3 = {0};
    int i = 0;
    for (; i + 8 <= in; i += 8) {
        PF_STEP(pf, i);
        v8 xv = LD8(x + i);
        a0 += LD8(w0 + i) * xv;
        a1 += LD8(w1 + i) * xv;
        a2 += LD8(w2 + i) * xv;
        a3 += LD8(w3 + i) * xv;
    }
    y[0] = dot_finish(&a0, w0, x, i, in, b ? b + 0 : NULL);
    y[1] = dot_finish(&a1, w1, x, i, in, b ? b + 1 : NULL);
    y[2] = dot_finish(&a2, w2, x, i, in, b ? b + 2 : NULL);
    y[3] = dot_finish(&a3, w3, x, i, in, b ? b + 3 : NULL);
}

/* Y[t, r] = W[r] . X[t] for 4 rows and 3 tokens: each weight load serves three tokens, each
 * token load four rows (twelve accumulators: the 16 AVX registers hold them with the loads) */
BLK_INLINE void dot_4x3(float *Y, size_t ldy, const float *X, size_t ldx, const float *W,
                        size_t ldw, int in, const float *b, const float *pf) {
    const float *w0 = W, *w1 = W + ldw, *w2 = W + 2 * ldw, *w3 = W + 3 * ldw;
    const float *x0 = X, *x1 = X + ldx, *x2 = X + 2 * ldx;
    v8 a00 = {0}, a01 = {0}, a02 = {0}, a03 = {0}, a10 = {0}, a11 = {0}, a12 = {0}, a13 = {0},
       a20 = {0}, a21 = {0}, a22 = {0}, a23 = {0};
    int i = 0;
    for (; i + 8 <= in; i += 8) {
        PF_STEP(pf, i);
        v8 v0 = LD8(w0 + i), v1 = LD8(w1 + i), v2 = LD8(w2 + i), v3 = LD8(w3 + i);
        v8 u = LD8(x0 + i);
        a00 += v0 * u, a01 += v1 * u, a02 += v2 * u, a03 += v3 * u;
        u = LD8(x1 + i);
        a10 += v0 * u, a11 += v1 * u, a12 += v2 * u, a13 += v3 * u;
        u = LD8(x2 + i);
        a20 += v0 * u, a21 += v1 * u, a22 += v2 * u, a23 += v3 * u;
    }
    float *y0 = Y, *y1 = Y + ldy, *y2 = Y + 2 * ldy;
    y0[0] = dot_finish(&a00, w0, x0, i, in, b ? b + 0 : NULL);
    y0[1] = dot_finish(&a01, w1, x0, i, in, b ? b + 1 : NULL);
    y0[2] = dot_finish(&a02, w2, x0, i, in, b ? b + 2 : NULL);
    y0[3] = dot_finish(&a03, w3, x0, i, in, b ? b + 3 : NULL);
    y1[0] = dot_finish(&a10, w0, x1, i, in, b ? b + 0 : NULL);
    y1[1] = dot_finish(&a11, w1, x1, i, in, b ? b + 1 : NULL);
    y1[2] = dot_finish(&a12, w2, x1, i, in, b ? b + 2 : NULL);
    y1[3] = dot_finish(&a13, w3, x1, i, in, b ? b + 3 : NULL);
    y2[0] = dot_finish(&a20, w0, x2, i, in, b ? b + 0 : NULL);
    y2[1] = dot_finish(&a21, w1, x2, i, in, b ? b + 1 : NULL);
    y2[2] = dot_finish(&a22, w2, x2, i, in, b ? b + 2 : NULL);
    y2[3] = dot_finish(&a23, w3, x2, i, in, b ? b + 3 : NULL);
}

/* One product's arguments, for the pool. */
typedef struct dense_job {
    float *Y;
    const float *X, *W, *b;
    int T, out, in;
    int avx2; /* run the AVX2 build of the loops */
} dense_job;

#define MV_ROWS 4 /* rows per pool item, one token */
#define MM_ROWS 4 /* rows per pool item, several tokens */

/* one token, rows [lo, hi) */
BLK_INLINE void matvec_rows(const dense_job *j, int lo, int hi) {
    size_t ld = (size_t)j->in;
    int o = lo;
    for (; o + 4 <= hi; o += 4) {
        const float *w = j->W + (size_t)o * ld;
        dot_4x1(j->Y + o, j->X, w, ld, j->in, j->b ? j->b + o : NULL,
                o + 8 <= j->out ? w + 4 * ld : w);
    }
    for (; o < hi; o++)
        dot_1x1(j->Y + o, j->X, j->W + (size_t)o * ld, j->in, j->b ? j->b + o : NULL);
}

/* Tokens per block: the block's inputs stay in the core's L2 (256 KiB) while each group of four
 * weight rows sweeps it, so the weights come from memory once per block. */
static int token_block(int in) {
    int tb = (int)((256 << 10) / ((size_t)in * sizeof(float)));
    tb -= tb % 3;
    return tb < 3 ? 3 : tb;
}

/* all tokens, rows [lo, hi) */
BLK_INLINE void matmul_rows(const dense_job *j, int lo, int hi) {
    size_t ld = (size_t)j->in, ldy = (size_t)j->out;
    int tb = token_block(j->in);
    for (int t0 = 0; t0 < j->T; t0 += tb) {
        int t1 = j->T - t0 < tb ? j->T : t0 + tb;
        int o = lo;
        for (; o + 4 <= hi; o += 4) {
            const float *w = j->W + (size_t)o * ld, *b = j->b ? j->b + o : NULL;
            const float *pf = o + 8 <= j->out ? w + 4 * ld : w;
            int t = t0;
            for (; t + 3 <= t1; t += 3)
                dot_4x3(j->Y + (size_t)t * ldy + o, ldy, j->X + (size_t)t * ld, ld, w, ld, j->in, b,
                        pf);
            for (; t < t1; t++)
                for (int r = 0; r < 4; r++)
                    dot_1x1(j->Y + (size_t)t * ldy + o + r, j->X + (size_t)t * ld, w + r * ld,
                            j->in, b ? b + r : NULL);
        }
        for (; o < hi; o++)
            for (int t = t0; t < t1; t++)
                dot_1x1(j->Y + (size_t)t * ldy + o, j->X + (size_t)t * ld, j->W + (size_t)o * ld,
                        j->in, j->b ? j->b + o : NULL);
    }
}

/* the row loops compiled twice: for the baseline and for AVX2 */
static void matvec_base(const dense_job *j, int lo, int hi) {
    matvec_rows(j, lo, hi);
}
static void matmul_base(const dense_job *j, int lo, int hi) {
    matmul_rows(j, lo, hi);
}
#ifdef BLK_X86
__attribute__((target("avx2"))) static void matvec_avx2(const dense_job *j, int lo, int hi) {
    matvec_rows(j, lo, hi);
}
__attribute__((target("avx2"))) static void matmul_avx2(const dense_job *j, int lo, int hi) {
    matmul_rows(j, lo, hi);
}
#endif

static int have_avx2(void) {
#ifdef BLK_X86
    __builtin_cpu_init(); /* idempotent; needed when called before constructors ran */
    return __builtin_cpu_supports("avx2");
#else
    return 0;
#endif
}

static void run_rows(const dense_job *j, int lo, int hi) {
#ifdef BLK_X86
    if (j->avx2) {
        (j->T == 1 ? matvec_avx2 : matmul_avx2)(j, lo, hi);
        return;
    }
#endif
    (j->T == 1 ? matvec_base : matmul_base)(j, lo, hi);
}

/* pool items are blocks of rows: MV_ROWS for one token, MM_ROWS for several */
static void rows_part(void *ctx, int lo, int hi) {
    const dense_job *j = ctx;
    int per = j->T == 1 ? MV_ROWS : MM_ROWS;
    run_rows(j, lo * per, (int64_t)hi * per < j->out ? hi * per : j->out);
}

/* Below this many multiply-adds a product stays on the calling thread (a pool call costs
 * microseconds; 64K multiply-adds read 256 KiB of weights, some 10 microseconds). */
#define PARALLEL_MACS 65536

void blk_linear(float *y, const float *x, const float *W, const float *b, int out, int in) {
    if (linear_backend && linear_backend(y, x, W, b, out, in) == 0) return;
    if (out <= 0) return;
    dense_job j = {y, x, W, b, 1, out, in, have_avx2()};
    if ((int64_t)out * in < PARALLEL_MACS)
        run_rows(&j, 0, out);
    else
        pool_for((out + MV_ROWS - 1) / MV_ROWS, rows_part, &j);
}

void blk_linear_batch(float *Y, const float *X, const float *W, const float *b, int T, int out,
                      int in) {
    if (T <= 0 || out <= 0) return;
    if (linear_backend || T == 1) {
        /* the backend takes one token at a time (it may decline some) */
        for (int t = 0; t < T; t++)
            blk_linear(Y + (size_t)t * (size_t)out, X + (size_t)t * (size_t)in, W, b, out, in);
        return;
    }
    dense_job j = {Y, X, W, b, T, out, in, have_avx2()};
    if ((int64_t)out * in * T < PARALLEL_MACS)
        run_rows(&j, 0, out);
    else
        pool_for((out + MM_ROWS - 1) / MM_ROWS, rows_part, &j);
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
