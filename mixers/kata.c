/* kata.c: KATA (spec/kata-parallax.md Part A and C): linear attention whose feature map lands in a
 * self-dual cone, so every weight kappa(q, k) = <psi(q), psi(k)> is >= 0.
 *
 * Normalised variants (m1, mg, sigma, orthant, lorentz, linear), §A.5:
 *   S_t = S_{t-1} + psi(k_t) v_t^T,   z_t = z_{t-1} + psi(k_t),
 *   o_t = S_t^T psi(q_t) / max(z_t^T psi(q_t), eps) = (1 - g_t) o_hat_t + g_t v_t,
 *   g_t = kappa(q_t, k_t) / (z_{t-1}^T psi(q_t) + kappa(q_t, k_t)).
 * DeltaKATA (delta), §A.9:
 *   S_t = S_{t-1} + beta_t psi(k_t) (v_t - S_{t-1}^T psi(k_t))^T,   o_t = S_t^T psi(q_t),
 *   and z_t = z_{t-1} + psi(k_t) is kept as well, for the dilution probe only.
 *
 * The maps see sqrt(scale) * q and sqrt(scale) * k (default scale 1: kappa = (q.k)^2 for M1). The
 * scale cancels in the normalised readout (up to the eps clamp) but not in the delta rule.
 *
 * State: S [H, D, dv] then z [H, D]; psi packed as svec (kata_features.h). */
#include "kata.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#define KATA_FB         64           /* features per stack block in step */
#define KATA_VT         32           /* value columns per stack tile in step */
#define KATA_SCAN_MAX   16           /* chunk states the scan holds at once (a power of two) */
#define KATA_SCAN_BYTES (256u << 20) /* ... fewer when that many would exceed this */

static const char *const variant_names[KATA_NVARIANTS] = {"m1",      "mg",      "sigma", "delta",
                                                          "orthant", "lorentz", "linear"};

const char *kata_variant_name(int variant) {
    return variant >= 0 && variant < KATA_NVARIANTS ? variant_names[variant] : NULL;
}

int kata_variant_parse(const char *name) {
    for (int i = 0; i < KATA_NVARIANTS; i++)
        if (strcmp(name, variant_names[i]) == 0) return i;
    return -1;
}

kata_fmap kata_variant_fmap(int variant, int dk, int groups, float scale) {
    kata_fmap f = {KATA_FEAT_PSD_CONCAT, dk, 1, scale};
    switch (variant) {
    case KATA_MG:
    case KATA_DELTA:
        f.groups = groups;
        break;
    case KATA_SIGMA:
        f.kind = KATA_FEAT_PSD_SUM, f.groups = groups;
        break;
    case KATA_ORTHANT:
        f.kind = KATA_FEAT_ORTHANT;
        break;
    case KATA_LORENTZ:
        f.kind = KATA_FEAT_LORENTZ;
        break;
    case KATA_LINEAR:
        f.kind = KATA_FEAT_LINEAR;
        break;
    default:
        break; /* m1: one PSD group */
    }
    return f;
}

kata_fmap kata_cfg_fmap(const mixer_cfg *c) {
    return kata_variant_fmap(c->variant, c->dk, c->groups, c->scale);
}

static size_t feat_dim(const mixer_cfg *c) {
    kata_fmap f = kata_cfg_fmap(c);
    return kata_fmap_dim(&f);
}

/* ---------------------------------------------------------------------------------------------
 * Interface tables */

static const input_def kata_inputs[] = {
    {IN_Q, "q", W_DK, 1},
    {IN_K, "k", W_DK, 1},
    {IN_V, "v", W_DV, 1},
    /* optional so that one schema serves every variant; only delta reads it, and an absent beta
     * means beta = 1 (a full overwrite along psi(k)). Replay of a delta run should provide it. */
    {IN_BETA, "beta", W_1, 0},
};

enum {
    PR_G,
    PR_O_HAT,
    PR_DEN,
    PR_KAPPA,
    PR_O_NORM,
    PR_STATE_NORM,
    PR_Z_NORM,
    PR_PSI_K_NORM,
    PR_BETA,
    PR_E_NORM,
    PR_E_AFTER,
    PR_COUNT
};

static const probe_def kata_probes[PR_COUNT] = {
    [PR_G] =
        {"g", W_1,
         "gain: o = o_hat + g e; normalised g = kappa(q,k)/max(z_t.psi(q),eps) in [0,1] (convex "
         "gate), delta g = beta kappa(q,k)"},
    [PR_O_HAT] = {"o_hat", W_DV,
                  "readout of the previous state under q_t: S_{t-1}^T psi(q) / max(z_{t-1}.psi(q), "
                  "eps) (delta: unnormalised S_{t-1}^T psi(q))"},
    [PR_DEN] = {"den", W_1, "z_{t-1}.psi(q_t): the previous denominator (dilution, ~ t/p for M1)"},
    [PR_KAPPA] = {"kappa", W_1, "kappa(q_t, k_t) = <psi(q_t), psi(k_t)>"},
    [PR_O_NORM] = {"o_norm", W_1, "|o_t|"},
    [PR_STATE_NORM] = {"state_norm", W_1, "|S_t|_F"},
    [PR_Z_NORM] = {"z_norm", W_1, "|z_t|, z_t = sum_{s<=t} psi(k_s)"},
    [PR_PSI_K_NORM] = {"psi_k_norm", W_1, "|psi(k_t)| (DeltaKATA assumes 1)"},
    [PR_BETA] = {"beta", W_1, "delta: write strength beta_t (1 when not given); NaN otherwise"},
    [PR_E_NORM] = {"e_norm", W_1,
                   "|e|, the innovation: normalised v_t - o_hat_t, delta v_t - S_{t-1}^T psi(k_t)"},
    [PR_E_AFTER] = {"e_after", W_1, "delta: |v_t - S_t^T psi(k_t)| after the write; NaN otherwise"},
};

/* ---------------------------------------------------------------------------------------------
 * Configuration and state */

static int kata_configure(mixer_cfg *c, opts *o, err *e) {
    const char *vs = opts_str(o, "variant", "m1");
    /* the scripting contract's spellings: m2, m4 = mg with 2 or 4 groups; sigma2, sigma4 = sigma */
    const char *asked = vs;
    long alias_groups = 0;
    if (!strcmp(vs, "m2") || !strcmp(vs, "m4"))
        alias_groups = vs[1] - '0', vs = "mg";
    else if (!strcmp(vs, "sigma2") || !strcmp(vs, "sigma4"))
        alias_groups = vs[5] - '0', vs = "sigma";
    int v = kata_variant_parse(vs);
    if (v < 0)
        return err_set(e,
                       "option 'variant': expected m1|mg|sigma|delta|orthant|lorentz|linear, "
                       "got '%.40s'",
                       vs);
    long groups, chunk;
    double scale, eps;
    long gdef = alias_groups ? alias_groups : v == KATA_MG || v == KATA_SIGMA ? 2 : 1;
    if (opts_int(o, "groups", gdef, &groups, e) ||
        opts_int(o, "chunk", v == KATA_DELTA ? 64 : 32, &chunk, e) ||
        opts_float(o, "scale", 1.0, &scale, e) || opts_float(o, "eps", 1e-6, &eps, e))
        return -1;
    if (alias_groups && groups != alias_groups)
        return err_set(e, "option 'groups': variant=%s has %ld groups, got %ld", asked,
                       alias_groups, groups);
    if (chunk != 16 && chunk != 32 && chunk != 64)
        return err_set(e, "option 'chunk': expected 16, 32 or 64, got %ld", chunk);
    if (v == KATA_MG || v == KATA_SIGMA || v == KATA_DELTA) {
        if (groups != 1 && groups != 2 && groups != 4 && groups != 8)
            return err_set(e, "option 'groups': expected 1, 2, 4 or 8, got %ld", groups);
        if (c->dk % groups)
            return err_set(e, "option 'groups': %ld groups do not divide dk=%d", groups, c->dk);
    } else if (groups != 1) {
        return err_set(e, "option 'groups': variant=%s has one group, got %ld", vs, groups);
    }
    if (!(scale > 0.0) || !(eps > 0.0))
        return err_set(e, "options 'scale' and 'eps' must be > 0 (got %g, %g)", scale, eps);
    if (v == KATA_LORENTZ && c->dk < 2) return err_set(e, "variant=lorentz needs dk >= 2");
    c->variant = v, c->groups = (int)groups, c->chunk = (int)chunk;
    c->scale = (float)scale, c->eps = (float)eps;
    /* the state is H * D * (dv + 1) floats; D is quadratic in dk for the PSD maps */
    if ((double)feat_dim(c) * (double)(c->dv + 1) * (double)c->H > (double)(1u << 31))
        return err_set(e, "state of %zu features x %d values x %d heads is too large", feat_dim(c),
                       c->dv, c->H);
    return 0;
}

static size_t kata_state_floats(const mixer_cfg *c) {
    return (size_t)c->H * feat_dim(c) * (size_t)(c->dv + 1);
}

static void kata_state_init(const mixer_cfg *c, float *state) {
    memset(state, 0, kata_state_floats(c) * sizeof *state);
}

static int kata_state_parts(const mixer_cfg *c, state_part *parts) {
    size_t D = feat_dim(c);
    parts[0] = (state_part){"S", "S0", 0, 3, {c->H, (int64_t)D, c->dv, 0}};
    parts[1] =
        (state_part){"z", "z0", (size_t)c->H * D * (size_t)c->dv, 2, {c->H, (int64_t)D, 0, 0}};
    return 2;
}

/* ---------------------------------------------------------------------------------------------
 * Recurrent form: one token. psi is streamed in blocks of KATA_FB features and S in tiles of
 * KATA_VT value columns, so step needs only stack memory; psi is recomputed once per tile. */

static void kata_step(const mixer_cfg *c, float *state, const mixer_tok *x, int pos, float *o,
                      float *probes) {
    (void)pos;
    const kata_fmap f = kata_cfg_fmap(c);
    const size_t D = kata_fmap_dim(&f);
    const int H = c->H, dk = c->dk, dv = c->dv, delta = c->variant == KATA_DELTA;
    const float eps = c->eps;
    float pq[KATA_FB], pk[KATA_FB]; /* psi(q), psi(k) on one block of features */
    size_t poff[PR_COUNT];
    for (int i = 0; i < PR_COUNT; i++) poff[i] = mixer_probe_offset(&mixer_kata, c, i);

    for (int h = 0; h < H; h++) {
        const float *q = x->in[IN_Q] + (size_t)h * dk;                          /* [dk] */
        const float *k = x->in[IN_K] + (size_t)h * dk;                          /* [dk] */
        const float *v = x->in[IN_V] + (size_t)h * dv;                          /* [dv] */
        float beta = x->in[IN_BETA] ? x->in[IN_BETA][h] : 1.0f;                 /* delta only */
        float *S = state + (size_t)h * D * dv;                                  /* [D, dv] */
        float *z = state + (size_t)H * D * dv + (size_t)h * D;                  /* [D] */
        float *oh = o + (size_t)h * dv;                                         /* [dv] */
        float *ohat = probes ? probes + poff[PR_O_HAT] + (size_t)h * dv : NULL; /* [dv] */

        /* Pass over the features: the previous denominator z_{t-1}.psi(q), then z += psi(k). */
        float den_prev = 0.0f;
        double pk2 = 0.0, z2 = 0.0; /* the probes' sums of squares in double, as delta_rule.c's */
        for (size_t r0 = 0; r0 < D; r0 += KATA_FB) {
            size_t n = D - r0 < KATA_FB ? D - r0 : KATA_FB;
            kata_fmap_range(&f, q, r0, n, pq);
            kata_fmap_range(&f, k, r0, n, pk);
            for (size_t r = 0; r < n; r++) {
                den_prev += pq[r] * z[r0 + r];
                z[r0 + r] += pk[r];
                z2 += (double)z[r0 + r] * z[r0 + r];
                pk2 += (double)pk[r] * pk[r];
            }
        }
        const float kqk = kata_fmap_kernel(&f, q, k);
        const float den = fmaxf(den_prev + kqk, eps);
        /* the gain on the innovation e: normalised o = o_hat + g (v - o_hat), delta o = o_hat + g e
         */
        const float g = delta ? beta * kqk : kqk / den;

        double s2 = 0.0, e2 = 0.0, ea2 = 0.0, o2 = 0.0;
        for (int j0 = 0; j0 < dv; j0 += KATA_VT) {
            int nv = dv - j0 < KATA_VT ? dv - j0 : KATA_VT;
            float rq[KATA_VT] = {0}, rk[KATA_VT] = {0}; /* S_{t-1}^T psi(q), S_{t-1}^T psi(k) */
            /* Read the old rows; the normalised write does not depend on the read, so it follows
             * each row's read at once. */
            for (size_t r0 = 0; r0 < D; r0 += KATA_FB) {
                size_t n = D - r0 < KATA_FB ? D - r0 : KATA_FB;
                kata_fmap_range(&f, q, r0, n, pq);
                kata_fmap_range(&f, k, r0, n, pk);
                for (size_t r = 0; r < n; r++) {
                    float *row = S + (r0 + r) * dv + j0; /* [nv] */
                    for (int j = 0; j < nv; j++) rq[j] += pq[r] * row[j];
                    if (delta) {
                        for (int j = 0; j < nv; j++) rk[j] += pk[r] * row[j];
                    } else {
                        for (int j = 0; j < nv; j++) {
                            row[j] += pk[r] * v[j0 + j];
                            s2 += (double)row[j] * row[j];
                        }
                    }
                }
            }
            if (delta) {
                /* The delta write needs the whole residual e = v - S_{t-1}^T psi(k) first. */
                float e[KATA_VT], after[KATA_VT] = {0}; /* e, then S_t^T psi(k) */
                for (int j = 0; j < nv; j++) e[j] = v[j0 + j] - rk[j];
                for (size_t r0 = 0; r0 < D; r0 += KATA_FB) {
                    size_t n = D - r0 < KATA_FB ? D - r0 : KATA_FB;
                    kata_fmap_range(&f, k, r0, n, pk);
                    for (size_t r = 0; r < n; r++) {
                        float *row = S + (r0 + r) * dv + j0, w = beta * pk[r];
                        for (int j = 0; j < nv; j++) {
                            row[j] += w * e[j];
                            s2 += (double)row[j] * row[j];
                            after[j] += pk[r] * row[j];
                        }
                    }
                }
                for (int j = 0; j < nv; j++) {
                    /* S_t^T psi(q) = S_{t-1}^T psi(q) + beta <psi(k), psi(q)> e */
                    oh[j0 + j] = rq[j] + g * e[j];
                    if (ohat) ohat[j0 + j] = rq[j];
                    float a = v[j0 + j] - after[j];
                    e2 += (double)e[j] * e[j], ea2 += (double)a * a;
                }
            } else {
                for (int j = 0; j < nv; j++) {
                    /* S_t^T psi(q) = S_{t-1}^T psi(q) + kappa(q, k) v */
                    oh[j0 + j] = (rq[j] + kqk * v[j0 + j]) / den;
                    float oo = rq[j] / fmaxf(den_prev, eps), ee = v[j0 + j] - oo;
                    if (ohat) ohat[j0 + j] = oo;
                    e2 += (double)ee * ee;
                }
            }
            for (int j = 0; j < nv; j++) o2 += (double)oh[j0 + j] * oh[j0 + j];
        }

        if (!probes) continue;
        probes[poff[PR_G] + h] = g;
        probes[poff[PR_DEN] + h] = den_prev;
        probes[poff[PR_KAPPA] + h] = kqk;
        probes[poff[PR_O_NORM] + h] = (float)sqrt(o2);
        probes[poff[PR_STATE_NORM] + h] = (float)sqrt(s2);
        probes[poff[PR_Z_NORM] + h] = (float)sqrt(z2);
        probes[poff[PR_PSI_K_NORM] + h] = (float)sqrt(pk2);
        probes[poff[PR_BETA] + h] = delta ? beta : NAN;
        probes[poff[PR_E_NORM] + h] = (float)sqrt(e2);
        probes[poff[PR_E_AFTER] + h] = delta ? (float)sqrt(ea2) : NAN;
    }
}

/* ---------------------------------------------------------------------------------------------
 * Sequence forms. Everything runs head by head; tokens are addressed in the [T, H, .] layout. */

static const float *tok_in(const mixer_cfg *c, const mixer_seq *x, mixer_input in, int t, int h) {
    return x->in[in] + ((size_t)t * c->H + h) * (size_t)mixer_input_floats(c, in);
}

static float tok_beta(const mixer_cfg *c, const mixer_seq *x, int t, int h) {
    return x->in[IN_BETA] ? x->in[IN_BETA][(size_t)t * c->H + h] : 1.0f;
}

static float *tok_out(const mixer_cfg *c, float *o, int t, int h) {
    return o + ((size_t)t * c->H + h) * (size_t)c->dv;
}

/* acc [dv] += S^T p and *den += z.p for p [D] (S [D, dv], z [D]; z may be NULL). */
static void read_state(const float *p, const float *S, const float *z, size_t D, int dv, float *acc,
                       float *den) {
    for (size_t r = 0; r < D; r++) {
        const float *row = S + r * dv;
        for (int j = 0; j < dv; j++) acc[j] += p[r] * row[j];
        if (z) *den += p[r] * z[r];
    }
}

/* acc [dv] += sum_{s in [s0, s1]} kappa(q_t, k_s) u_s, *den += the weights; u_s is v_s, or the row
 * s - s0 of U [., dv] when U is given. This is the flash form's inner loop: psi never appears. */
static void attend(const mixer_cfg *c, const kata_fmap *f, const mixer_seq *x, int h, int t, int s0,
                   int s1, const float *U, float *acc, float *den) {
    const float *q = tok_in(c, x, IN_Q, t, h);
    for (int s = s0; s <= s1; s++) {
        float a = kata_fmap_kernel(f, q, tok_in(c, x, IN_K, s, h));
        const float *u = U ? U + (size_t)(s - s0) * c->dv : tok_in(c, x, IN_V, s, h);
        for (int j = 0; j < c->dv; j++) acc[j] += a * u[j];
        *den += a;
    }
}

/* Delta, one block of n tokens from t0 against the carried S [D, dv] (may be NULL = 0):
 * U [n, dv] = (I + diag(beta) tril(Akk, -1))^{-1} diag(beta) (V - Psi_K S) by forward substitution
 * (the unit lower triangular system row by row; the GPU may use Neumann doubling instead), and
 * o_t = psi(q_t)^T S + sum_{s<=t} kappa(q_t, k_s) u_s. psi: scratch [D]. */
static void delta_block(const mixer_cfg *c, const kata_fmap *f, const mixer_seq *x, int h, int t0,
                        int n, const float *S, float *U, float *psi, float *o) {
    const size_t D = kata_fmap_dim(f);
    const int dv = c->dv;
    float dummy = 0.0f;
    for (int i = 0; i < n; i++) {
        const float *k = tok_in(c, x, IN_K, t0 + i, h), *v = tok_in(c, x, IN_V, t0 + i, h);
        float *u = U + (size_t)i * dv, beta = tok_beta(c, x, t0 + i, h);
        /* v' = v - S^T psi(k): what the carried state already predicts is not written again */
        for (int j = 0; j < dv; j++) u[j] = 0.0f;
        if (S) {
            kata_fmap_apply(f, k, psi);
            read_state(psi, S, NULL, D, dv, u, &dummy);
        }
        for (int j = 0; j < dv; j++) u[j] = v[j] - u[j];
        for (int s = 0; s < i; s++) {
            float a = kata_fmap_kernel(f, k, tok_in(c, x, IN_K, t0 + s, h));
            const float *us = U + (size_t)s * dv;
            for (int j = 0; j < dv; j++) u[j] -= a * us[j];
        }
        for (int j = 0; j < dv; j++) u[j] *= beta;
    }
    for (int i = 0; i < n; i++) {
        float *ot = tok_out(c, o, t0 + i, h);
        for (int j = 0; j < dv; j++) ot[j] = 0.0f;
        if (S) {
            kata_fmap_apply(f, tok_in(c, x, IN_Q, t0 + i, h), psi);
            read_state(psi, S, NULL, D, dv, ot, &dummy);
        }
        attend(c, f, x, h, t0 + i, t0, t0 + i, U, ot, &dummy);
    }
}

int kata_forward_quadratic(const mixer_cfg *c, const float *state0, const mixer_seq *x, float *o) {
    const kata_fmap f = kata_cfg_fmap(c);
    const size_t D = kata_fmap_dim(&f);
    const int H = c->H, dv = c->dv, T = x->T;
    if (T <= 0) return 0;
    float *psi = malloc(D * sizeof *psi);          /* [D] */
    float *U = malloc((size_t)T * dv * sizeof *U); /* [T, dv] */
    if (!psi || !U) {
        free(psi), free(U);
        return -1;
    }
    for (int h = 0; h < H; h++) {
        const float *S0 = state0 ? state0 + (size_t)h * D * dv : NULL;                 /* [D, dv] */
        const float *z0 = state0 ? state0 + (size_t)H * D * dv + (size_t)h * D : NULL; /* [D] */
        if (c->variant == KATA_DELTA) {
            delta_block(c, &f, x, h, 0, T, S0, U, psi, o);
            continue;
        }
        for (int t = 0; t < T; t++) {
            float *ot = tok_out(c, o, t, h), den = 0.0f;
            for (int j = 0; j < dv; j++) ot[j] = 0.0f;
            if (state0) {
                kata_fmap_apply(&f, tok_in(c, x, IN_Q, t, h), psi);
                read_state(psi, S0, z0, D, dv, ot, &den);
            }
            attend(c, &f, x, h, t, 0, t, NULL, ot, &den);
            den = fmaxf(den, c->eps);
            for (int j = 0; j < dv; j++) ot[j] /= den;
        }
    }
    free(psi), free(U);
    return 0;
}

/* S [D, dv] += Psi^T V and z [D] += Psi^T 1 over tokens t0 .. t0+n-1, with Psi [n, D] the key
 * features and V the values (or rows of U [n, dv] when given). */
static void write_state(const mixer_cfg *c, const mixer_seq *x, int h, int t0, int n,
                        const float *Psi, const float *U, size_t D, float *S, float *z) {
    const int dv = c->dv;
    for (int i = 0; i < n; i++) {
        const float *p = Psi + (size_t)i * D;
        const float *u = U ? U + (size_t)i * dv : tok_in(c, x, IN_V, t0 + i, h);
        for (size_t r = 0; r < D; r++) {
            float *row = S + r * dv;
            for (int j = 0; j < dv; j++) row[j] += p[r] * u[j];
            z[r] += p[r];
        }
    }
}

int kata_forward_chunked(const mixer_cfg *c, float *state, const mixer_seq *x, float *o) {
    const kata_fmap f = kata_cfg_fmap(c);
    const size_t D = kata_fmap_dim(&f);
    const int H = c->H, dv = c->dv, T = x->T, C = c->chunk;
    if (T <= 0) return 0;
    float *Psi = malloc((size_t)C * D * sizeof *Psi); /* [C, D] key features of one chunk */
    float *psi = malloc(D * sizeof *psi);             /* [D] one query's features */
    float *U = malloc((size_t)C * dv * sizeof *U);    /* [C, dv] delta: the chunk's writes */
    if (!Psi || !psi || !U) {
        free(Psi), free(psi), free(U);
        return -1;
    }
    for (int h = 0; h < H; h++) {
        float *S = state + (size_t)h * D * dv;                 /* [D, dv] */
        float *z = state + (size_t)H * D * dv + (size_t)h * D; /* [D] */
        for (int t0 = 0; t0 < T; t0 += C) {
            int n = T - t0 < C ? T - t0 : C;
            if (c->variant == KATA_DELTA) {
                /* V' = V - Psi_K S, U = T diag(beta) V', O = Psi_Q S + tril(A_qk) U */
                delta_block(c, &f, x, h, t0, n, S, U, psi, o);
            } else {
                for (int i = 0; i < n; i++) {
                    float *ot = tok_out(c, o, t0 + i, h), den = 0.0f;
                    for (int j = 0; j < dv; j++) ot[j] = 0.0f;
                    /* the carried state (tokens before the chunk) under psi(q), then the chunk */
                    kata_fmap_apply(&f, tok_in(c, x, IN_Q, t0 + i, h), psi);
                    read_state(psi, S, z, D, dv, ot, &den);
                    attend(c, &f, x, h, t0 + i, t0, t0 + i, NULL, ot, &den);
                    den = fmaxf(den, c->eps);
                    for (int j = 0; j < dv; j++) ot[j] /= den;
                }
            }
            for (int i = 0; i < n; i++)
                kata_fmap_apply(&f, tok_in(c, x, IN_K, t0 + i, h), Psi + (size_t)i * D);
            write_state(c, x, h, t0, n, Psi, c->variant == KATA_DELTA ? U : NULL, D, S, z);
        }
    }
    free(Psi), free(psi), free(U);
    return 0;
}

int kata_forward_scan(const mixer_cfg *c, float *state, const mixer_seq *x, float *o) {
    if (c->variant == KATA_DELTA) return kata_forward_chunked(c, state, x, o);
    const kata_fmap f = kata_cfg_fmap(c);
    const size_t D = kata_fmap_dim(&f), W = D * (size_t)c->dv + D; /* one chunk state: [S | z] */
    const int H = c->H, dv = c->dv, T = x->T, C = c->chunk;
    if (T <= 0) return 0;
    int NB = KATA_SCAN_MAX; /* chunk states per scan block */
    while (NB > 1 && (size_t)NB * W * sizeof(float) > KATA_SCAN_BYTES) NB /= 2;
    float *hs = malloc((size_t)NB * W * sizeof *hs);     /* [NB, W] chunk states, then prefixes */
    float *carry = malloc(W * sizeof *carry);            /* [W] state before the block */
    float *Psi = malloc((size_t)C * D * sizeof *Psi);    /* [C, D] */
    float *dint = malloc((size_t)NB * C * sizeof *dint); /* [NB, C] within-chunk denominators */
    if (!hs || !carry || !Psi || !dint) {
        free(hs), free(carry), free(Psi), free(dint);
        return -1;
    }
    const int nchunks = (T + C - 1) / C;
    for (int h = 0; h < H; h++) {
        float *S = state + (size_t)h * D * dv;                 /* [D, dv] */
        float *z = state + (size_t)H * D * dv + (size_t)h * D; /* [D] */
        memcpy(carry, S, D * dv * sizeof *carry);
        memcpy(carry + D * dv, z, D * sizeof *carry);
        for (int b0 = 0; b0 < nchunks; b0 += NB) {
            int nb = nchunks - b0 < NB ? nchunks - b0 : NB, P2 = 1;
            while (P2 < nb) P2 *= 2;

            /* Phase 1, independent per chunk: h_c = Psi_K^T V, zeta_c = Psi_K^T 1, and the
             * within-chunk numerators (into o) and denominators. Padding chunks are zero. */
            memset(hs, 0, (size_t)P2 * W * sizeof *hs);
            for (int i = 0; i < nb; i++) {
                int t0 = (b0 + i) * C, n = T - t0 < C ? T - t0 : C;
                float *el = hs + (size_t)i * W;
                for (int u = 0; u < n; u++)
                    kata_fmap_apply(&f, tok_in(c, x, IN_K, t0 + u, h), Psi + (size_t)u * D);
                write_state(c, x, h, t0, n, Psi, NULL, D, el, el + D * dv);
                for (int u = 0; u < n; u++) {
                    float *ot = tok_out(c, o, t0 + u, h), den = 0.0f;
                    for (int j = 0; j < dv; j++) ot[j] = 0.0f;
                    attend(c, &f, x, h, t0 + u, t0, t0 + u, NULL, ot, &den);
                    dint[i * C + u] = den;
                }
            }

            /* Phase 2: exclusive prefix over the block, built directly (never "inclusive minus
             * own", which leaks a chunk into its own carry through rounding). Up-sweep of
             * partial sums; the root takes the carry instead of zero, so the down-sweep hands
             * each chunk carry + sum of the chunks before it; the carry moves past the block. */
            for (int st = 1; st < P2; st *= 2)
                for (int i = 2 * st - 1; i < P2; i += 2 * st) {
                    float *R = hs + (size_t)i * W, *L = hs + (size_t)(i - st) * W;
                    for (size_t w = 0; w < W; w++) R[w] += L[w];
                }
            float *root = hs + (size_t)(P2 - 1) * W;
            for (size_t w = 0; w < W; w++) {
                float total = root[w];
                root[w] = carry[w];
                carry[w] += total;
            }
            for (int st = P2 / 2; st >= 1; st /= 2)
                for (int i = 2 * st - 1; i < P2; i += 2 * st) {
                    float *R = hs + (size_t)i * W, *L = hs + (size_t)(i - st) * W;
                    for (size_t w = 0; w < W; w++) {
                        float a = L[w];
                        L[w] = R[w];
                        R[w] += a;
                    }
                }

            /* Phase 3, independent per chunk: o = (psi(q)^T H_c + n_intra) / (psi(q).Z_c + d). */
            for (int i = 0; i < nb; i++) {
                int t0 = (b0 + i) * C, n = T - t0 < C ? T - t0 : C;
                const float *Hc = hs + (size_t)i * W;
                for (int u = 0; u < n; u++) {
                    float *ot = tok_out(c, o, t0 + u, h), den = dint[i * C + u];
                    float *psi = Psi; /* one row of the scratch suffices here */
                    kata_fmap_apply(&f, tok_in(c, x, IN_Q, t0 + u, h), psi);
                    read_state(psi, Hc, Hc + D * dv, D, dv, ot, &den);
                    den = fmaxf(den, c->eps);
                    for (int j = 0; j < dv; j++) ot[j] /= den;
                }
            }
        }
        memcpy(S, carry, D * dv * sizeof *carry);
        memcpy(z, carry + D * dv, D * sizeof *carry);
    }
    free(hs), free(carry), free(Psi), free(dint);
    return 0;
}

/* The scan form (the chunked UT form for delta); out of memory, the token loop needs none. */
static void kata_prefill(const mixer_cfg *c, float *state, const mixer_seq *x, int pos0, float *o) {
    if (kata_forward_scan(c, state, x, o) == 0) return;
    mixer_run_steps(&mixer_kata, c, state, x, pos0, o, NULL);
}

const mixer_ops mixer_kata = {
    .name = "kata",
    .summary =
        "KATA: cone feature maps (PSD rank-one, orthant, Lorentz), normalised readout with a "
        "convex gate; DeltaKATA",
    .options = "variant=m1|m2|m4|mg|sigma2|sigma4|sigma|delta|orthant|lorentz|linear "
               "groups=1|2|4|8 chunk=16|32|64 "
               "scale=1 eps=1e-6",
    .inputs = kata_inputs,
    .ninputs = (int)(sizeof kata_inputs / sizeof kata_inputs[0]),
    .params = NULL,
    .nparams = 0,
    .probes = kata_probes,
    .nprobes = PR_COUNT,
    .configure = kata_configure,
    .state_floats = kata_state_floats,
    .state_init = kata_state_init,
    .state_parts = kata_state_parts,
    .step = kata_step,
    .prefill = kata_prefill,
};
