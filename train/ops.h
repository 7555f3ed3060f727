/* ops.h: the forward and backward passes of every block the trainer differentiates, in float (for
 * training) and in double (for the gradient checks: tests/test_grad.c compares each backward with
 * central finite differences of its own forward).
 *
 * One source, two types: ops.inc is written once over a type R and a name suffix, and
 * ops_f.c / ops_d.c include it with R = float (names *_f) and R = double (names *_d). The float
 * forwards compute what models/blocks.c and mixers/delta_rule.c compute for a whole sequence
 * (tests/test_train.c checks the trainer's logits against model_prefill), so gradients are those
 * of the model the lab steps, not of a second model.
 *
 * Conventions (shapes in comments, row-major): N rows (tokens), a weight stored as nn.Linear
 * stores it [out, in]. Every backward ACCUMULATES into its gradients (dX += ..., dW += ...): one
 * input feeding several products (the normalised hidden state feeds q, k, v, a, b and g) collects
 * their gradients without a temporary, and the caller zeroes what it owns. Forwards overwrite. */
#ifndef MIXSCOPE_TRAIN_OPS_H
#define MIXSCOPE_TRAIN_OPS_H

#include <stdint.h>

#include "../mixers/kata_features.h" /* KATA_FEAT_*: the kernels of train_kata_fwd */

/* The delta-rule core of one head over T tokens (mixers/delta_rule.h, spec delta-family.md §2.4):
 *   S~_t = alpha_t S_{t-1},  e_t = v_t - S~_t^T k_t,  S_t = S~_t + beta_t k_t e_t^T,
 *   o_t = S_t^T (scale q_t),  alpha_t = exp(g_t) (g NULL: 1, DeltaNet),
 *   kaczmarz (kacz_eps > 0): beta_t = b_t / (|k_t|^2 + kacz_eps) with b_t the input (eta).
 * Backpropagation through time over the step form, with the state checkpointed every `chunk`
 * tokens in the forward and the chunk's states recomputed in the backward: memory T/chunk + chunk
 * states instead of T, one extra forward pass of the recurrence (cheap next to the dense layers).
 * Rows of q and k (and their gradients) are `ldk` apart, rows of v and o `ldv` apart; g and beta
 * one value a token, `ldg` apart. */
#define DELTA_FWD_ARGS(R)                                                                          \
    R *S /* [dk, dv] in: S_0, out: S_T */, const R *q, const R *k, const R *v, const R *g,         \
        const R *beta, int T, int dk, int dv, int ldk, int ldv, int ldg, R scale, R kacz_eps,      \
        R *o /* [T rows of ldv] */, R *ckpt /* [(T + chunk - 1) / chunk, dk, dv] */, int chunk
#define DELTA_BWD_ARGS(R)                                                                          \
    const R *q, const R *k, const R *v, const R *g, const R *beta, int T, int dk, int dv, int ldk, \
        int ldv, int ldg, R scale, R kacz_eps, const R *ckpt, int chunk, const R *dO,              \
        R *dS /* [dk, dv] in: dL/dS_T (or zeros), out: dL/dS_0 */, R *dq, R *dk_, R *dv_,          \
        R *dg /* may be NULL when g is */, R *dbeta, R *work /* train_delta_work floats */

/* Scratch floats kalman_bwd needs: the chunk's states (lam, eta). */
static inline int64_t train_kalman_work(int M, int S, int chunk) {
    return ((int64_t)chunk + 1) * 2 * M * S;
}

/* Scratch floats delta_bwd needs: the chunk's states and a few vectors. */
static inline int64_t train_delta_work(int dk, int dv, int chunk) {
    return ((int64_t)chunk + 2) * dk * dv + 4 * (int64_t)(dk + dv);
}

/* Scratch floats train_kata_delta_fwd (bwd = 0) and _bwd (bwd = 1) need for T tokens of a head of
 * width d in `groups` PSD groups (D = groups E (E + 1) / 2 features, E = d / groups): the features
 * of q and k, the state and its checkpoints (and for the backward o, the features' gradients and
 * the delta rule's work). */
static inline int64_t train_kata_delta_work(int T, int d, int groups, int ld, int chunk, int bwd) {
    int64_t E = d / groups, D = groups * E * (E + 1) / 2, nck = (T + chunk - 1) / chunk;
    int64_t n = 2 * (int64_t)T * D + (1 + nck) * D * d;
    if (bwd) n += (int64_t)T * ld + 2 * (int64_t)T * D + D * d + train_delta_work((int)D, d, chunk);
    return n;
}

#define TRAIN_OPS_DECLARE(R, S)                                                                    \
    /* Y[N, out] = X[N, in] W^T (+ b) */                                                           \
    void train_linear_fwd##S(R *Y, const R *X, const R *W, const R *b, int N, int out, int in);    \
    /* dX += dY W, dW += dY^T X, db += column sums of dY (dX, dW, db may each be NULL) */          \
    void train_linear_bwd##S(R *dX, R *dW, R *db, const R *dY, const R *X, const R *W, int N,      \
                             int out, int in);                                                     \
    /* RMSNorm over rows of n: Y = X rstd w, rstd[N] = 1/sqrt(mean(x^2) + eps) (saved) */          \
    void train_rmsnorm_fwd##S(R *Y, R *rstd, const R *X, const R *w, int N, int n, R eps);         \
    void train_rmsnorm_bwd##S(R *dX, R *dw, const R *dY, const R *X, const R *rstd, const R *w,    \
                              int N, int n);                                                       \
    /* FusedRMSNormGated on rows of n: Y = RMSNorm_w(X) * Z sigmoid(Z); Z NULL: no gate */         \
    void train_gnorm_fwd##S(R *Y, R *rstd, const R *X, const R *Z, const R *w, int N, int n,       \
                            R eps);                                                                \
    void train_gnorm_bwd##S(R *dX, R *dZ, R *dw, const R *dY, const R *X, const R *Z,              \
                            const R *rstd, const R *w, int N, int n);                              \
    /* causal depthwise convolution over T tokens of D channels, width W (fla ShortConvolution     \
     * without its activation): Y[t, d] = sum_i w[d, i] U[t - W + 1 + i, d] + b[d] */              \
    void train_conv_fwd##S(R *Y, const R *U, const R *w, const R *b, int T, int D, int W);         \
    void train_conv_bwd##S(R *dU, R *dw, R *db, const R *dY, const R *U, const R *w, int T, int D, \
                           int W);                                                                 \
    /* SiLU: Y = X sigmoid(X); bwd: dX += dY silu'(X) */                                           \
    void train_silu_fwd##S(R *Y, const R *X, int64_t n);                                           \
    void train_silu_bwd##S(R *dX, const R *dY, const R *X, int64_t n);                             \
    /* L2 normalisation of rows of n (eps inside the root, fla l2norm): Y = X inv, inv[N] saved */ \
    void train_l2norm_fwd##S(R *Y, R *inv, const R *X, int N, int n, R eps);                       \
    void train_l2norm_bwd##S(R *dX, const R *dY, const R *Y, const R *inv, int N, int n);          \
    /* DeltaNet's sum normalisation of rows of n: Y = X / sum(X), the sums saved in sum[N] */      \
    void train_sumnorm_fwd##S(R *Y, R *sum, const R *X, int N, int n);                             \
    void train_sumnorm_bwd##S(R *dX, const R *dY, const R *Y, const R *sum, int N, int n);         \
    /* GDN decay: G[t, h] = -exp(A_log[h]) softplus(Xa[t, h] + dt_bias[h]) */                      \
    void train_decay_fwd##S(R *G, const R *Xa, const R *A_log, const R *dt_bias, int N, int H);    \
    void train_decay_bwd##S(R *dXa, R *dA_log, R *ddt_bias, const R *dG, const R *G, const R *Xa,  \
                            const R *A_log, const R *dt_bias, int N, int H);                       \
    /* write strength: B = mul sigmoid(Xb) */                                                      \
    void train_sigmoid_fwd##S(R *B, const R *Xb, int64_t n, R mul);                                \
    void train_sigmoid_bwd##S(R *dXb, const R *dB, const R *B, int64_t n, R mul);                  \
    /* SwiGLU: A = silu(H1) H2 */                                                                  \
    void train_swiglu_fwd##S(R *A, const R *H1, const R *H2, int64_t n);                           \
    void train_swiglu_bwd##S(R *dH1, R *dH2, const R *dA, const R *H1, const R *H2, int64_t n);    \
    /* cross-entropy of rows of V logits against target[t] (-1: not scored), each scored row       \
     * weighted by wgt: returns the weighted sum of -log p(target); dLogits (may be NULL) = wgt    \
     * (softmax - onehot) on scored rows, 0 elsewhere; correct counts argmax hits (may be NULL) */ \
    double train_xent##S(R *dLogits, const R *logits, const int32_t *target, int N, int V, R wgt,  \
                         int *correct);                                                            \
    /* RoPE, rotate-half (models/blocks.h blk_rope), on T rows of H heads of width d at positions  \
     * pos0.. pos0 + T - 1, in place; inverse rotates back (the backward: the transpose) */        \
    void train_rope##S(R *X, int T, int H, int d, int ld, int pos0, float base, int inverse);      \
    /* causal softmax attention of one head over T tokens: o_t = sum_{j<=t} p_tj v_j,              \
     * p_t = softmax_j(scale q_t . k_j); rows ld apart; P [T, T] keeps the probabilities */        \
    void train_attn_fwd##S(const R *q, const R *k, const R *v, int T, int d, int ld, R scale,      \
                           R *P, R *o);                                                            \
    /* dq, dk, dv += ; work [T] */                                                                 \
    void train_attn_bwd##S(const R *q, const R *k, const R *v, int T, int d, int ld, R scale,      \
                           const R *P, const R *dO, R *dq, R *dk, R *dv, R *work);                 \
    /* Parallax (mixers/parallax.c) of one head: o_t = sum_j a_tj v_j, a_tj = p_tj (1 + ubar_t     \
     * - u_tj), u_tj = r_t . k_j, ubar_t = sum_j p_tj u_tj, p as train_attn; P and U [T, T] kept   \
     */                                                                                            \
    void train_plx_fwd##S(const R *q, const R *r, const R *k, const R *v, int T, int d, int ld,    \
                          R scale, R *P, R *U, R *o);                                              \
    /* dq, dr, dk, dv += ; work [2 T] */                                                           \
    void train_plx_bwd##S(const R *q, const R *r, const R *k, const R *v, int T, int d, int ld,    \
                          R scale, const R *P, const R *U, const R *dO, R *dq, R *dr, R *dk,       \
                          R *dv, R *work);                                                         \
    /* the Kalman core (mixers/kalman.c, one head) on the M x S lanes over T tokens: lam, eta      \
     * [M S] in: the prior, out: after the last token; q, k [T rows of ldk], v, lv, o [T rows of   \
     * ldv]; a [M S] the decay (a^2 and p floored at 1e-12 as the core does) */                    \
    void train_kalman_fwd##S(R *lam, R *eta, const R *q, const R *k, const R *v, const R *lv,      \
                             const R *a, const R *p, int T, int M, int Sn, int ldk, int ldv,       \
                             R scale, R *o, R *ckpt /* [(T + chunk - 1) / chunk, 2 M S] */,        \
                             int chunk);                                                           \
    /* dq, dk, dv, dlv, da, dp += ; dlam, deta [M S] in: the gradient at the end (or zeros), out:  \
     * at the prior; work train_kalman_work floats */                                              \
    void train_kalman_bwd##S(const R *q, const R *k, const R *v, const R *lv, const R *a,          \
                             const R *p, int T, int M, int Sn, int ldk, int ldv, R scale,          \
                             const R *ckpt, int chunk, const R *dO, R *dlam, R *deta, R *dq,       \
                             R *dk, R *dv, R *dlv, R *da, R *dp, R *work);                         \
    /* RoPE interleaved (pairs 2i, 2i+1; blk_rope_interleaved), in place; inverse: the transpose   \
     */                                                                                            \
    void train_rope_il##S(R *X, int T, int H, int d, int ld, int pos0, float base, int inverse);   \
    /* KATA's normalised readout (mixers/kata.c, every variant but delta) of one head: o_t =       \
     * sum_{j<=t} kappa_tj v_j / max(sum_{j<=t} kappa_tj, eps), kappa the variant's kernel         \
     * (kind: KATA_FEAT_*; PSD_CONCAT sum_g (scale q_tg . k_jg)^2 over `groups` groups of          \
     * d / groups, PSD_SUM, ORTHANT, LORENTZ, LINEAR); K [T, T] keeps kappa */                     \
    void train_kata_fwd##S(const R *q, const R *k, const R *v, int T, int d, int kind, int groups, \
                           int ld, R scale, R eps, R *K, R *o);                                    \
    /* dq, dk, dv += ; work [T] */                                                                 \
    void train_kata_bwd##S(const R *q, const R *k, const R *v, int T, int d, int kind, int groups, \
                           int ld, R scale, R eps, const R *K, const R *o, const R *dO, R *dq,     \
                           R *dk, R *dv, R *work);                                                 \
    /* DeltaKATA (mixers/kata.c, variant delta) of one head from S_0 = 0: the delta rule on the    \
     * PSD concat features, S_t = S_{t-1} + beta_t psi(k_t) (v_t - S_{t-1}^T psi(k_t))^T,          \
     * o_t = S_t^T psi(q_t), psi of sqrt(scale) x in `groups` groups; beta one value a token,      \
     * ldb apart; work train_kata_delta_work(.., 0) floats. BPTT as train_delta's, in feature      \
     * space (D features a head), then psi's Jacobian back to q and k */                           \
    void train_kata_delta_fwd##S(const R *q, const R *k, const R *v, const R *beta, int T, int d,  \
                                 int groups, int ld, int ldb, R scale, R *o, R *work, int chunk);  \
    /* dq, dk, dv, dbeta += ; recomputes the forward; work train_kata_delta_work(.., 1) floats */  \
    void train_kata_delta_bwd##S(const R *q, const R *k, const R *v, const R *beta, int T, int d,  \
                                 int groups, int ld, int ldb, R scale, const R *dO, R *dq, R *dk,  \
                                 R *dv, R *dbeta, R *work, int chunk);                             \
    /* GLA's gate: G = max(logsigmoid(X) / norm, clamp) (has_clamp 0: no clamp) */                 \
    void train_gla_gate_fwd##S(R *G, const R *X, int64_t n, R norm, int has_clamp, R clamp);       \
    void train_gla_gate_bwd##S(R *dX, const R *dG, const R *X, int64_t n, R norm, int has_clamp,   \
                               R clamp);                                                           \
    /* the GLA core of one head (mixers/gla.c): S_t = diag(exp(gk_t)) S_{t-1} + k_t v_t^T,         \
     * o_t = S_t^T (scale q_t); q, k, gk rows ldk apart, v, o ldv; BPTT as the delta rule's */     \
    void train_gla_fwd##S(R *S, const R *q, const R *k, const R *v, const R *gk, int T, int dk,    \
                          int dv, int ldk, int ldv, R scale, R *o, R *ckpt, int chunk);            \
    void train_gla_bwd##S(const R *q, const R *k, const R *v, const R *gk, int T, int dk, int dv,  \
                          int ldk, int ldv, R scale, const R *ckpt, int chunk, const R *dO, R *dS, \
                          R *dq, R *dk_, R *dv_, R *dgk, R *work);                                 \
    void train_delta_fwd##S(DELTA_FWD_ARGS(R));                                                    \
    void train_delta_bwd##S(DELTA_BWD_ARGS(R));

TRAIN_OPS_DECLARE(float, _f)

/* precision=bf16 for the float products (ops_f.c says what is rounded); off by default */
void train_set_bf16(int on);
TRAIN_OPS_DECLARE(double, _d)

#endif
