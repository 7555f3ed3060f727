/* lla.h: local linear attention (LLA) beside Parallax and softmax on the same KV cache (spec
 * kata-parallax.md §B.1, §B.7, §B.9 items 6-7). Not a mixer: diagnostics computed from a
 * softmax or Parallax layer's cache for one query, in double.
 *
 * With the softmax weights p_j of the query q over its visible keys (after RoPE, as the cache holds
 * them), kbar = sum p k, vbar = sum p v and the centred moments
 *     S_KK = sum_j p_j (k_j - kbar)(k_j - kbar)^T            [dk, dk]
 *     S_KV = sum_j p_j (v_j - vbar)(k_j - kbar)^T            [dv, dk]
 * the LLA probe and output, with a fixed ridge lambda on the normalised weights (choice, not from
 * source, as the spec says):
 *     rho_c = (S_KK + lambda I)^-1 (kbar - q),   eta = (kbar - q)^T rho_c  >= 0
 *     o_LLA = vbar - S_KV rho_c
 * and for Parallax's probe rho (r after RoPE), o_PLX = vbar - S_KV rho (B.2):
 *     cos    = cos(rho, rho_c)
 *     cpa    = |S_KV rho| / (|S_KV|_2 |rho|)            in [0, 1]    (B.7, lab definition)
 *     gap    = |o_LLA - o_PLX| / |o_PLX|                 (family comparison, B.9 item 7)
 *     gap_sa = |o_LLA - o_SA| / |o_SA|,  o_SA = vbar.
 * eta is the boundary amplification factor: the regularised squared Mahalanobis distance from the
 * query to the weighted key centre. Costs O(n dk (dk + dv) + dk^3) for n visible keys. */
#ifndef MIXSCOPE_LLA_H
#define MIXSCOPE_LLA_H

#include "mixer.h"

typedef struct attn_lla {
    double eta, cos, cpa, gap, gap_sa; /* cos, cpa, gap: NAN without rho */
} attn_lla;

/* The query at pos, head h, against a softmax / Parallax cache holding slots 0..pos: q, r [dk]
 * as given to the mixer (before RoPE; r NULL: no Parallax probe). o_lla [dv] (may be NULL).
 * Returns -1 (out untouched) when pos is not in the cache, lambda is not positive, or the sizes
 * exceed ATTN_MAX_DIM. */
int attn_lla_stats(const mixer_cfg *c, const float *state, const float *q, const float *r, int pos,
                   int h, double lambda, attn_lla *out, double *o_lla);

#endif
