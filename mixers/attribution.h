/* attribution.h: exact attribution of a core's output to the values it was given.
 *
 * Every core below is linear in its values with scalar weights per (query, key) pair, so its
 * output splits exactly as
 *     o_i = sum_{j <= i} M_ij v_j + o_init_i
 * with o_init_i the part that comes from the initial state. Per head, with the state key-major
 * (S_t = A_t S_{t-1} + w_t k_t v_t^T, o_i = scale S_i^T q_i):
 *     gdn, deltanet, kaczmarz  A_t = alpha_t (I - beta_t k_t k_t^T), w_t = beta_t
 *                              (kaczmarz: beta_t = eta_t / (|k_t|^2 + eps); deltanet: alpha = 1)
 *     gla                      A_t = diag(exp(gk_t)),          w_t = 1
 *     mamba2                   A_t = exp(g_t) I,                w_t = 1
 * so M_ij = scale w_j k_j^T A_{j+1} ... A_i q_i and o_init_i = scale S_0^T A_0 ... A_i q_i (the
 * transitions are symmetric). Each row is one sweep j = i, i-1, ..., 0 of a vector u (O(i dk)),
 * O(T^2 dk) a head. The delta family's key removal is inside A_t: the decay-only part
 *     Md_ij = scale w_j (prod_{t=j+1..i} alpha_t) q_i . k_j
 * is what a linear attention with the same decay and write strengths would weigh, and M - Md what
 * the removal changes. softmax and parallax: M is the attention row (parallax: its effective
 * weights p_ij (1 + ubar_i - u_ij)), o_init = 0.
 *
 * Kalman and KATA normalise by a state-dependent denominator: no such split; refused. */
#ifndef MIXSCOPE_ATTRIBUTION_H
#define MIXSCOPE_ATTRIBUTION_H

#include "mixer.h"

/* 1 when the core has the split above. */
int attribution_supported(const mixer_ops *m);

/* Over x (T tokens from position 0) from the initial state `init` (the mixer's whole flat state,
 * NULL: its prior): M [H, T, T] (row i, column j; 0 for j > i), Md [H, T, T] or NULL (the
 * decay-only part; equal to M for cores without key removal), o_init [T, H, dv]. */
int mixer_attribution(const mixer_ops *m, const mixer_cfg *c, const float *init, const mixer_seq *x,
                      float *M, float *Md, float *o_init, err *e);

#endif
