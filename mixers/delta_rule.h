/* delta_rule.h: the gated delta rule shared by gdn, deltanet and kaczmarz.
 *
 * Spec: /work/shared/spec/delta-family.md. Per head, with the state S [dk, dv] key-major (§2.4):
 *   S~_t = alpha_t S_{t-1},  e_t = v_t - S~_t^T k_t,  S_t = S~_t + beta_t k_t e_t^T,
 *   o_t  = S_t^T (scale q_t)                                      (read after write)
 * DeltaNet is alpha = 1 (§3). Kaczmarz uses the raw key and beta_t = eta_t / (|k_t|^2 + eps)
 * (§8.3); its chunked form runs GDN on k/sqrt(|k|^2+eps), v/sqrt(|k|^2+eps) with beta = eta (§8.5).
 *
 * The three mixer files only declare their options, inputs and probe lists; the arithmetic lives
 * in delta_rule.c. Tensors are taken as given: no L2 norm and no gate computation in here. */
#ifndef MIXSCOPE_DELTA_RULE_H
#define MIXSCOPE_DELTA_RULE_H

#include "mixer.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Every probe the family can compute (spec §9). A mixer lists the ones meaningful for it. */
typedef enum delta_probe {
    DP_BETA,           /* effective write strength beta_t */
    DP_ETA,            /* Kaczmarz relaxation eta_t */
    DP_RHO,            /* beta_t |k_t|^2 */
    DP_K_NORM,         /* |k_t| as used */
    DP_Q_NORM,         /* |q_t| before the scale */
    DP_G,              /* log-decay g_t */
    DP_ALPHA,          /* exp(g_t) */
    DP_HALF_LIFE,      /* -ln 2 / g_t */
    DP_E_NORM,         /* |e_t| */
    DP_E_REL,          /* |e_t| / |v_t| */
    DP_R_NORM,         /* |S_t^T k_t - v_t|, from the written state */
    DP_R_CHECK,        /* |r_t + (1 - rho_t) e_t| */
    DP_LOSS_BEFORE,    /* 1/2 |e_t|^2 */
    DP_LOSS_AFTER,     /* 1/2 |r_t|^2 */
    DP_WRITE_NORM,     /* beta_t |k_t| |e_t| */
    DP_STATE_NORM,     /* |S_t|_F */
    DP_FORGET_REMOVED, /* (1 - alpha_t) |S_{t-1}|_F */
    DP_ERASE_REMOVED,  /* beta_t |k_t| |S~_t^T k_t| */
    DP_O_NORM,         /* |o_t| */
    DP_COUNT
} delta_probe;

/* probe_def initialisers, one per delta_probe, so the three mixers share names and meanings. Use
 * DELTA_PROBE_DEF(X) and DELTA_PROBE_KIND(X) over one list, which keeps the two arrays in step. */
#define DELTA_DEF_BETA                                                                             \
    { "beta", W_1, "effective write strength beta_t (kaczmarz: eta/(|k|^2+eps))" }
#define DELTA_DEF_ETA                                                                              \
    { "eta", W_1, "Kaczmarz relaxation eta_t as given" }
#define DELTA_DEF_RHO                                                                              \
    { "rho", W_1, "beta_t |k_t|^2: fraction of the residual removed along k" }
#define DELTA_DEF_K_NORM                                                                           \
    { "k_norm", W_1, "|k_t| of the key the recurrence uses (kaczmarz: the raw key)" }
#define DELTA_DEF_Q_NORM                                                                           \
    { "q_norm", W_1, "|q_t| before the query scale" }
#define DELTA_DEF_G                                                                                \
    { "g", W_1, "log-decay g_t as given (<= 0)" }
#define DELTA_DEF_ALPHA                                                                            \
    { "alpha", W_1, "decay alpha_t = exp(g_t)" }
#define DELTA_DEF_HALF_LIFE                                                                        \
    { "half_life", W_1, "decay half-life -ln2/g_t in tokens (+inf at g=0)" }
#define DELTA_DEF_E_NORM                                                                           \
    { "e_norm", W_1, "|e_t|, pre-write residual e_t = v_t - alpha_t S_{t-1}^T k_t (surprise)" }
#define DELTA_DEF_E_REL                                                                            \
    { "e_rel", W_1, "|e_t| / |v_t|" }
#define DELTA_DEF_R_NORM                                                                           \
    { "r_norm", W_1, "|r_t|, post-write error r_t = S_t^T k_t - v_t read from the new state" }
#define DELTA_DEF_R_CHECK                                                                          \
    { "r_check", W_1, "|r_t - (-(1-rho_t) e_t)|: the identity checked on the state (~0)" }
#define DELTA_DEF_LOSS_BEFORE                                                                      \
    { "loss_before", W_1, "1/2 |e_t|^2, regression loss before the write" }
#define DELTA_DEF_LOSS_AFTER                                                                       \
    { "loss_after", W_1, "1/2 |r_t|^2, loss after the write (= 1/2 (1-rho)^2 |e|^2)" }
#define DELTA_DEF_WRITE_NORM                                                                       \
    { "write_norm", W_1, "|beta_t k_t e_t^T|_F = beta_t |k_t| |e_t|" }
#define DELTA_DEF_STATE_NORM                                                                       \
    { "state_norm", W_1, "|S_t|_F after the token" }
#define DELTA_DEF_FORGET_REMOVED                                                                   \
    { "forget_removed", W_1, "(1 - alpha_t) |S_{t-1}|_F: removal by decay (forgetting)" }
#define DELTA_DEF_ERASE_REMOVED                                                                    \
    { "erase_removed", W_1, "beta_t |k_t| |alpha_t S_{t-1}^T k_t|: removal by the delta (erasing)" }
#define DELTA_DEF_O_NORM                                                                           \
    { "o_norm", W_1, "|o_t|, readout norm" }

#define DELTA_PROBE_DEF(X)  DELTA_DEF_##X,
#define DELTA_PROBE_KIND(X) DP_##X,

/* What one head's step measured, when probes were asked for. Norms are Euclidean / Frobenius. */
typedef struct delta_stats {
    float alpha, beta, rho;
    float k_norm, q_norm, v_norm;
    float e_norm;     /* |e_t| */
    float pred_norm;  /* |S~_t^T k_t| = |alpha_t S_{t-1}^T k_t| */
    float r_norm;     /* |S_t^T k_t - v_t| from the written state */
    float r_check;    /* |r_t + (1 - rho_t) e_t| */
    float prev_norm;  /* |S_{t-1}|_F */
    float state_norm; /* |S_t|_F */
    float o_norm;     /* |o_t| */
} delta_stats;

/* How a mixer feeds the shared core. */
typedef struct delta_kind {
    int decay;                 /* 1: reads IN_G (gdn, kaczmarz); 0: alpha = 1 (deltanet) */
    int kaczmarz;              /* 1: raw key, beta = eta/(|k|^2+eps), IN_BETA holds eta */
    const delta_probe *probes; /* the mixer's probes, in its probe_def order; all W_1 */
    int nprobes;
} delta_kind;

/* One head, one token of §2.4. S [dk, dv] updated in place; q, k [dk]; v, o [dv]. st: NULL, or
 * filled with the measurements the probes are built from. No allocation. */
void delta_step_head(int dk, int dv, float *S, const float *q, const float *k, const float *v,
                     float alpha, float beta, float scale, float *o, delta_stats *st);

/* One token, all heads. Reads IN_Q, IN_K, IN_V, IN_G [H] when kd->decay (NULL: no decay) and
 * IN_BETA [H] (beta, or eta for Kaczmarz; NULL: 1). probes: NULL, or [nprobes, H]. */
void delta_step(const delta_kind *kd, const mixer_cfg *c, float *state, const mixer_tok *x,
                float *o, float *probes);

/* The step's write as a decay and a rank-one update (mixer_ops.write_form): per head
 * alpha = exp(g) (1 without decay), kk = k as the recurrence uses it (Kaczmarz: the raw key) and
 * u = beta (v - alpha S_{t-1}^T k) with beta as the step takes it (Kaczmarz: eta / (|k|^2 + eps)),
 * so S_t = alpha S_{t-1} + kk u^T. state [H, dk, dv] is the state before the step; the residual is
 * summed in the step's order. alpha [H], kk [H, dk], u [H, dv]. Returns 0. */
int delta_write_form(const delta_kind *kd, const mixer_cfg *c, const float *state,
                     const mixer_tok *x, float *alpha, float *kk, float *u);

/* The chunked WY/UT form of §2.5 for all heads, chunk size c->chunk, float32 throughout.
 * q, k [T, H, dk]; v [T, H, dv]; g [T, H] or NULL (no decay); beta [T, H] or NULL (1);
 * state [H, dk, dv] in/out; o [T, H, dv]. Returns 0, or -1 when its scratch could not be allocated
 * (then nothing has been written). */
int delta_chunk_forward(const mixer_cfg *c, float *state, int T, const float *q, const float *k,
                        const float *v, const float *g, const float *beta, float *o);

/* The mixer's prefill: Kaczmarz rescales k and v first (§8.5); on allocation failure it falls back
 * to repeated delta_step. */
void delta_prefill(const delta_kind *kd, const mixer_cfg *c, float *state, const mixer_seq *x,
                   float *o);

/* Options shared by the family: chunk=16|32|64 (default 64), scale= (default 1/sqrt(dk)); with
 * kaczmarz also eps= (default 1e-6, > 0). */
int delta_configure(mixer_cfg *c, opts *o, int kaczmarz, err *e);
size_t delta_state_floats(const mixer_cfg *c);
void delta_state_init(const mixer_cfg *c, float *state);
/* One part: "hT" (initial "h0"), [H, dk, dv]. */
int delta_state_parts(const mixer_cfg *c, state_part *parts);

#ifdef __cplusplus
}
#endif

#endif
