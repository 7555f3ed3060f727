/* attention.h: the KV cache, RoPE and the online-softmax tiles shared by causal softmax attention
 * (softmax.c, spec/delta-family.md §7) and Parallax (parallax.c, spec/kata-parallax.md Part B).
 *
 * Per head, query i (absolute position) sees the keys j with j <= i and, when window W > 0,
 * i - j < W. With s1_ij = scale q_i.k_j, w_ij = exp(s1_ij), p_ij = w_ij / sum_j w_ij:
 *     softmax:  o_i = sum_j p_ij v_j
 *     parallax: u_ij = r_i.k_j (no scale), ubar_i = sum_j p_ij u_ij, vbar_i = sum_j p_ij v_j,
 *               o_i = vbar_i - (sum_j p_ij u_ij v_j - ubar_i vbar_i)       (B.2)
 *                   = sum_j a_ij v_j,  a_ij = p_ij (1 + ubar_i - u_ij),  sum_j a_ij = 1.
 * With rope=1, q, k (and r) are rotated at their absolute position before any product (§7).
 *
 * The state is the KV cache: keys [max_t, H, dk] (after RoPE, as decode caches hold them), then
 * values [max_t, H, dv]. step(pos) writes slot pos and attends over the cache; prefill writes T
 * slots from pos0 and runs the streaming (flash) form over key tiles of c->chunk keys aligned to
 * absolute positions, so each query row meets the same tiles in both paths. A pre-filled cache
 * (slots 0..pos0-1 written by the caller) is the "initial state". Positions >= max_t do not fit:
 * their output (and probes) are 0 and the cache is left alone. */
#ifndef MIXSCOPE_ATTENTION_H
#define MIXSCOPE_ATTENTION_H

#include <stddef.h>

#include "mixer.h"

/* dk, dv bound: a row's scratch lives on the stack, so step allocates nothing */
#define ATTN_MAX_DIM  1024
#define ATTN_MAX_TILE 64 /* the largest key tile (chunk=64) */

/* How Parallax folds a tile into its row (c->variant). */
enum attn_merge {
    ATTN_MERGE_RAW = 0,     /* (m, d1, d2, O1, O2) as the official kernels (B.4) */
    ATTN_MERGE_WELFORD = 1, /* (m, W, ubar, vbar, C) centred merge (B.4, robust variant) */
};

/* Probe indices. Every probe is one float per head, so probe i sits at offset i * H. softmax lists
 * the first ATTN_NPROBES_SOFTMAX, parallax all of them. */
enum {
    ATTN_P_ENTROPY,
    ATTN_P_ENTROPY_NORM,
    ATTN_P_MAX_WEIGHT,
    ATTN_P_SINK_P,
    ATTN_P_O_NORM,
    ATTN_P_SA_NORM,
    ATTN_P_CORR_NORM,
    ATTN_P_COR,
    ATTN_P_R_NORM,
    ATTN_P_U_BAR,
    ATTN_P_A_MIN,
    ATTN_P_A_MAX,
    ATTN_P_NEG_MASS,
    ATTN_P_SINK_A,
    ATTN_NPROBES
};
#define ATTN_NPROBES_SOFTMAX (ATTN_P_O_NORM + 1)
extern const probe_def attn_probe_defs[ATTN_NPROBES];

/* Reads chunk=16|32|64, scale=, rope=0|1, theta=, window=, max_t= and, for parallax,
 * merge=raw|welford (into c->variant); validates dk, dv against ATTN_MAX_DIM. o may be NULL. */
int attn_configure(mixer_cfg *c, opts *o, int parallax, err *e);
/* max_t * H * (dk + dv) */
size_t attn_state_floats(const mixer_cfg *c);
/* Zeros. */
void attn_state_init(const mixer_cfg *c, float *state);
/* No exportable parts. */
int attn_state_parts(const mixer_cfg *c, state_part *parts);

/* Offsets (floats) into the state of the cached key [dk] and value [dv] of head h at slot pos. */
size_t attn_k_offset(const mixer_cfg *c, int pos, int h);
size_t attn_v_offset(const mixer_cfg *c, int pos, int h);
/* The first key position visible to the query at pos (window), 0 without a window. */
int attn_first_key(const mixer_cfg *c, int pos);

/* RoPE, rotate-half form (§7): cs, sn [dk/2] for position pos, theta_i = base^(-2i/dk); then
 * x [dk] is rotated in place, with h = dk/2:
 *     x'_i = x_i c_i - x_{i+h} s_i,   x'_{i+h} = x_{i+h} c_i + x_i s_i. */
void attn_rope_angles(int dk, float base, int pos, float *cs, float *sn);
void attn_rope_apply(int dk, const float *cs, const float *sn, float *x);

/* One token at pos for all heads: writes the cache slot, attends, o [H, dv]. use_r: read
 * x->in[IN_R] (parallax); probes: NULL, or [ATTN_NPROBES (parallax) or ATTN_NPROBES_SOFTMAX, H]. */
void attn_step(const mixer_cfg *c, float *state, const mixer_tok *x, int pos, float *o,
               float *probes, int use_r);
/* T tokens from pos0, the streaming tiled form; o [T, H, dv]. Equals T calls of attn_step. */
void attn_prefill(const mixer_cfg *c, float *state, const mixer_seq *x, int pos0, float *o,
                  int use_r);

/* For views: the attention row of the query at pos, head h, against a cache that holds slots
 * 0..pos (i.e. after the step or prefill of pos). q, r: that token's head-h query and probe [dk] as
 * given to the mixer (before RoPE; r NULL = softmax). Writes, for j = 0..pos, p [pos + 1] the
 * softmax weights p_{pos,j} and a [pos + 1] the effective weights a_{pos,j} = p (1 + ubar - u)
 * (a = p when r is NULL); keys outside the window get 0. Either output may be NULL. Sums in double;
 * sum_j a_j = 1 and sum_j a_j v_j = o. Returns -1 (writes nothing) when pos is not in the cache. */
int parallax_effective_weights(const mixer_cfg *c, const float *state, const float *q,
                               const float *r, int pos, int h, float *p, float *a);
/* The same for the keys j0..pos alone: p, a [pos - j0 + 1] (p[0], a[0] for key j0). The sums
 * (ubar, the normaliser) still run over every visible key. */
int parallax_effective_weights_from(const mixer_cfg *c, const float *state, const float *q,
                                    const float *r, int pos, int h, int j0, float *p, float *a);

#endif
