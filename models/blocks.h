/* blocks.h: the dense building blocks of a model, exactly as flash-linear-attention computes them
 * (spec/delta-family.md §1, §7). Every function works on one token: plain float32 arrays, no
 * allocation, the caller owns every buffer. Shapes are given in the comments; a weight stored as
 * nn.Linear stores it is [out, in], row-major. */
#ifndef MIXSCOPE_BLOCKS_H
#define MIXSCOPE_BLOCKS_H

/* Scalar nonlinearities, float32. softplus follows PyTorch (threshold 20: x itself above it). */
float blk_sigmoid(float x);
float blk_silu(float x);
float blk_softplus(float x);
float blk_logsigmoid(float x);

/* Feature maps by name (fla's ACT2FN subset used by the layers). */
typedef enum blk_act {
    ACT_NONE,    /* identity */
    ACT_SILU,    /* x * sigmoid(x) (fla: "silu", "swish") */
    ACT_RELU,    /* max(x, 0) */
    ACT_ELU_P1,  /* elu(x) + 1 (DeltaNet's "elu") */
    ACT_SIGMOID, /* sigmoid(x) */
} blk_act;
void blk_act_apply(float *x, int n, blk_act a);

/* y[out] = W[out, in] x[in] (+ b[out] when b != NULL). y and x must not overlap. Large products
 * (64K multiply-adds and more) split their rows over the thread pool (core/pool.h); the result is
 * the same for any thread count (each output is one dot product in one fixed order). */
void blk_linear(float *y, const float *x, const float *W, const float *b, int out, int in);

/* The same product for T tokens: Y[T, out] = X[T, in] W^T (+ b). Blocked so each weight row is
 * read once per block of tokens, rows split over the pool. Row t of Y equals, bit for bit,
 * blk_linear of row t of X. Y and X must not overlap. Under a backend (below) it calls blk_linear
 * token by token. */
void blk_linear_batch(float *Y, const float *X, const float *W, const float *b, int T, int out,
                      int in);

/* Where blk_linear computes: NULL (the CPU loop) or a backend that returns 0 when it computed y
 * and non-zero to fall back to the CPU. A model running under `device gpu` sets cuBLAS here for
 * the length of one step or prefill (model.c) and clears it after. */
typedef int (*blk_linear_backend)(float *y, const float *x, const float *W, const float *b, int out,
                                  int in);
void blk_set_linear_backend(blk_linear_backend fn);

/* RMSNorm: y = x / sqrt(mean(x^2) + eps) * w over n channels (w may be NULL: no affine).
 * Returns the reciprocal RMS (a probe). y may equal x. */
float blk_rmsnorm(float *y, const float *x, const float *w, int n, float eps);

/* FusedRMSNormGated, fla's output norm with a swish gate (normalise, then gate, §1.2):
 * y = RMSNorm_w(x) * z * sigmoid(z), over n channels. y may equal x. */
void blk_rmsnorm_gated(float *y, const float *x, const float *z, const float *w, int n, float eps);

/* Mamba2's RMSNormGated with norm_before_gate=False (gate, then normalise, §1.2):
 * u = x * silu(z); y = u / sqrt(mean(u^2 over each group) + eps) * w. n channels split into
 * groups of group_size. y may equal x. */
void blk_gate_rmsnorm(float *y, const float *x, const float *z, const float *w, int n,
                      int group_size, float eps);

/* L2 normalisation with eps inside the square root (fla l2norm, eps 1e-6):
 * x <- x / sqrt(sum x^2 + eps). Returns the norm before normalising, sqrt(sum x^2). */
float blk_l2norm(float *x, int n, float eps);

/* DeltaNet's sum normalisation: x <- x / sum(x). */
void blk_sumnorm(float *x, int n);

/* ShortConvolution decode step (§1.1): cache [D, W] holds the last W pre-activation inputs,
 * newest at W-1. Rolls the cache left, writes x at W-1, then
 * y[d] = act(sum_i cache[d, i] * w[d, i] + b[d]). w: [D, 1, W] as fla stores it; b may be NULL.
 * Running it from a zero cache over a sequence equals the padded causal convolution. */
void blk_conv_step(float *y, float *cache, const float *x, const float *w, const float *b, int D,
                   int W, blk_act act);

/* RoPE, non-interleaved rotate-half form of fla's RotaryEmbedding (§7), on H heads of width d
 * (x: [H, d]) at position pos: theta_i = base^(-2i/d), pairs (i, i + d/2). The angle is
 * computed in float32 as fla does (positions and inverse frequencies in float32). */
void blk_rope(float *x, int H, int d, int pos, float base);
/* The interleaved form: pairs (2i, 2i+1) share theta_i (KATA's option, spec A.2). */
void blk_rope_interleaved(float *x, int H, int d, int pos, float base);

/* SwiGLU MLP (fla GatedMLP, §1.3): y = W_down (silu(W_gate x) * (W_up x)).
 * x, y: [C]; W_gate, W_up: [I, C]; W_down: [C, I]; h1, h2: scratch [I]. */
void blk_mlp(float *y, const float *x, const float *W_gate, const float *W_up, const float *W_down,
             int C, int I, float *h1, float *h2);

/* fla's intermediate size for GatedMLP when `intermediate_size` is null:
 * int(hidden * hidden_ratio * 2 / 3) rounded up to a multiple of 256. */
long blk_mlp_intermediate(long hidden, double hidden_ratio);

#endif
