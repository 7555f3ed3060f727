/* ops_f.c: ops.inc in float, the type the trainer trains in. The forward product is the model
 * stack's own blk_linear_batch (models/blocks.h), so the trainer's dense layers compute what
 * stepping computes, bit for bit per row. */
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "../core/pool.h"
#include "../models/blocks.h"
#include "ops.h"

#define R                       float
#define SFX(n)                  n##_f
#define TRAIN_LINEAR_FWD_NATIVE 1

/* precision=bf16 (train_set_bf16): the dense products read bf16-rounded inputs and weights and
 * round their outputs to bf16, as PyTorch's bf16 autocast does for nn.Linear (the products
 * themselves accumulate in fp32); the backward's products likewise on bf16-rounded gradients.
 * Everything else (norms, recurrences, the loss, the optimiser's fp32 master weights) stays fp32.
 * One setting for the process: the trainer runs one model at a time and sets it for its run. */
static int g_bf16;

void train_set_bf16(int on) {
    g_bf16 = on;
}

/* round to nearest even on the upper 16 bits; NaN stays NaN */
static float bf16_round(float x) {
    uint32_t u;
    memcpy(&u, &x, 4);
    if ((u & 0x7f800000u) == 0x7f800000u && (u & 0x007fffffu)) return x;
    u += 0x7fffu + ((u >> 16) & 1u);
    u &= 0xffff0000u;
    memcpy(&x, &u, 4);
    return x;
}

static float *bf16_copy(const float *x, size_t n) {
    float *y = malloc((n ? n : 1) * sizeof *y);
    if (!y) abort(); /* a few MB: the operands of one product */
    for (size_t i = 0; i < n; i++) y[i] = bf16_round(x[i]);
    return y;
}

void train_linear_fwd_f(float *Y, const float *X, const float *W, const float *b, int N, int out,
                        int in) {
    if (!g_bf16) {
        blk_linear_batch(Y, X, W, b, N, out, in);
        return;
    }
    float *x = bf16_copy(X, (size_t)N * in), *w = bf16_copy(W, (size_t)out * in);
    blk_linear_batch(Y, x, w, b, N, out, in);
    for (size_t i = 0; i < (size_t)N * out; i++) Y[i] = bf16_round(Y[i]);
    free(x), free(w);
}

static void linear_bwd_plain(float *dX, float *dW, float *db, const float *dY, const float *X,
                             const float *W, int N, int out, int in);

/* the backward's products on bf16-rounded operands (1: done here) */
static int linear_bwd_bf16(float *dX, float *dW, float *db, const float *dY, const float *X,
                           const float *W, int N, int out, int in) {
    if (!g_bf16) return 0;
    float *dy = bf16_copy(dY, (size_t)N * out), *x = bf16_copy(X, (size_t)N * in),
          *w = bf16_copy(W, (size_t)out * in);
    linear_bwd_plain(dX, dW, db, dy, x, w, N, out, in);
    free(dy), free(x), free(w);
    return 1;
}
#define TRAIN_LINEAR_BWD_HOOK linear_bwd_bf16

#include "ops.inc"

static void linear_bwd_plain(float *dX, float *dW, float *db, const float *dY, const float *X,
                             const float *W, int N, int out, int in) {
    int keep = g_bf16;
    g_bf16 = 0;
    train_linear_bwd_f(dX, dW, db, dY, X, W, N, out, in);
    g_bf16 = keep;
}
