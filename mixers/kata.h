/* kata.h: KATA, linear attention through cone feature maps (spec/kata-parallax.md Part A).
 *
 * The mixer is `mixer_kata` (mixer.h interface). This header adds what tests, views and the GPU
 * backend call besides the interface: the variant names, the feature map of a config, and the three
 * full-sequence forms, each of which equals repeated step:
 *   kata_forward_quadratic  the flash-style O(T^2) form (§A.6), or DeltaKATA's UT closed form
 * (§A.9); kata_forward_chunked    the chunked state form, carrying the state chunk to chunk (§A.7,
 * §A.9); kata_forward_scan       the associative scan over chunk states (§A.8); prefill uses it.
 *
 * State, per head: S [D, dv] (key-major, like fla's [K, V]) and z [D], with D the feature dimension
 * (kata_fmap_dim) and psi packed as svec (kata_features.h). Laid out as S [H, D, dv] then z [H, D].
 */
#ifndef MIXSCOPE_KATA_H
#define MIXSCOPE_KATA_H

#include "kata_features.h"
#include "mixer.h"

#ifdef __cplusplus
extern "C" {
#endif

/* cfg->variant */
enum kata_variant {
    KATA_M1,      /* svec(x x^T), one group: kappa = (q.k)^2 */
    KATA_MG,      /* concat of g groups: sum_m (q_m.k_m)^2 */
    KATA_SIGMA,   /* shared sum state: sum_{m,n} (q_m.k_n)^2 */
    KATA_DELTA,   /* DeltaKATA: the delta write in feature space, unnormalised read (concat, g >= 1)
                   */
    KATA_ORTHANT, /* relu(x) + 1e-6 */
    KATA_LORENTZ, /* (x', |x'| (1 + x_d^2)) */
    KATA_LINEAR,  /* psi(x) = x: no cone, for comparison */
    KATA_NVARIANTS
};

extern const mixer_ops mixer_kata;

/* "m1", "mg", ... ; NULL out of range. */
const char *kata_variant_name(int variant);
/* The index of a variant name, or -1. */
int kata_variant_parse(const char *name);
/* The feature map of a variant (groups, scale folded in); kata_cfg_fmap: of a config. The GPU
 * kernels (kernels/kata.cu) take theirs from kata_variant_fmap too. */
kata_fmap kata_variant_fmap(int variant, int dk, int groups, float scale);
kata_fmap kata_cfg_fmap(const mixer_cfg *c);

/* The flash-style form over x->T tokens, all heads: o [T, H, dv]. state0: NULL (zero) or an initial
 * state in the mixer's layout, read only; the form itself carries no state. Normalised variants:
 * o_t = (psi(q_t)^T S0 + sum_{s<=t} A_ts v_s) / max(psi(q_t)^T z0 + sum_{s<=t} A_ts, eps) with
 * A_ts = kappa(q_t, k_s) from group dot products. Delta: the UT closed form solved by forward
 * substitution. Returns 0, or -1 when scratch cannot be allocated (nothing written then). */
int kata_forward_quadratic(const mixer_cfg *c, const float *state0, const mixer_seq *x, float *o);
/* The chunked state form with chunk c->chunk: o [T, H, dv], state updated. 0, or -1 as above. */
int kata_forward_chunked(const mixer_cfg *c, float *state, const mixer_seq *x, float *o);
/* The scan form: per block of chunks, the chunk states, their exclusive prefix by a work-efficient
 * (up-sweep / down-sweep) tree scan seeded with the carried state, then the outputs. The delta
 * write does not compose by +, so for the delta variant this is kata_forward_chunked. 0, or -1. */
int kata_forward_scan(const mixer_cfg *c, float *state, const mixer_seq *x, float *o);

#ifdef __cplusplus
}
#endif

#endif
