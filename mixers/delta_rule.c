/* delta_rule.c: the gated delta rule (spec/delta-family.md §2.4, §2.5, §3, §8), step and chunked
 * WY/UT prefill, shared by gdn, deltanet and kaczmarz. Float32 throughout, as the spec recommends
 * for a reference implementation (§2.5 "Numerics"). */
#include "delta_rule.h"
#include "tf32.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

/* Value columns the step handles at once: its scratch (a few [DELTA_VB] arrays) lives on the
 * stack, so step never allocates, and each pass walks rows of S contiguously. */
#define DELTA_VB 64

static float dot(const float *a, const float *b, int n) {
    float s = 0.0f;
    for (int i = 0; i < n; i++) s += a[i] * b[i];
    return s;
}

/* ---------------------------------------------------------------------------------------------
 * Step (§2.4) */

/* The body of delta_step_head, compiled twice: for the baseline and for AVX2 (8 floats a vector).
 * Every value column keeps its own sums in the same order in both and no FMA is used, so the two
 * give the same bits. */
static inline __attribute__((always_inline)) void
step_head_body(int dk, int dv, float *S, const float *q, const float *k, const float *v,
               float alpha, float beta, float scale, float *o, delta_stats *st) {
    float k2 = dot(k, k, dk), rho = beta * k2;
    /* probe accumulators in double: sums of dk*dv squares */
    double prev2 = 0, state2 = 0, pred2 = 0, e2 = 0, r2 = 0, rc2 = 0, o2 = 0;
    for (int j0 = 0; j0 < dv; j0 += DELTA_VB) {
        int nb = dv - j0 < DELTA_VB ? dv - j0 : DELTA_VB;

        /* Pass 1, read the old state: a = S_{t-1}^T k on this block of value columns. */
        float a[DELTA_VB] = {0}; /* [nb] */
        /* the probes' sums of squares: per column in double over the rows (vectorised across
         * the columns; double: a state of 1e19 still has a finite norm), then over the columns */
        double s2[DELTA_VB] = {0};
        for (int i = 0; i < dk; i++) {
            const float *row = S + (size_t)i * dv + j0; /* S[i, j0:j0+nb] */
            for (int j = 0; j < nb; j++) a[j] += row[j] * k[i];
            if (st)
                for (int j = 0; j < nb; j++) s2[j] += (double)row[j] * row[j];
        }
        if (st)
            for (int j = 0; j < nb; j++) prev2 += s2[j], s2[j] = 0;
        float e[DELTA_VB]; /* [nb] pre-write residual e = v - alpha S_{t-1}^T k */
        for (int j = 0; j < nb; j++) e[j] = v[j0 + j] - alpha * a[j];

        /* Pass 2, write then read: S_t = alpha S_{t-1} + beta k e^T, o = S_t^T (scale q). For the
         * probes also S_t^T k, read back from the written state rather than from the algebra. */
        float ob[DELTA_VB] = {0}, sk[DELTA_VB] = {0}; /* [nb] S_t^T (scale q), S_t^T k */
        for (int i = 0; i < dk; i++) {
            float *row = S + (size_t)i * dv + j0;
            float bk = beta * k[i], sq = scale * q[i];
            for (int j = 0; j < nb; j++) {
                row[j] = alpha * row[j] + bk * e[j];
                ob[j] += row[j] * sq;
            }
            if (st)
                for (int j = 0; j < nb; j++) {
                    sk[j] += row[j] * k[i];
                    s2[j] += (double)row[j] * row[j];
                }
        }
        memcpy(o + j0, ob, (size_t)nb * sizeof *o);
        if (st)
            for (int j = 0; j < nb; j++) state2 += s2[j];

        if (st)
            for (int j = 0; j < nb; j++) {
                double r = (double)sk[j] - v[j0 + j];       /* r = S_t^T k - v */
                double rc = r + (1.0 - (double)rho) * e[j]; /* r - (-(1-rho) e) */
                pred2 += (double)alpha * a[j] * alpha * a[j];
                e2 += (double)e[j] * e[j];
                r2 += r * r;
                rc2 += rc * rc;
                o2 += (double)ob[j] * ob[j];
            }
    }
    if (!st) return;
    st->alpha = alpha, st->beta = beta, st->rho = rho;
    st->k_norm = sqrtf(k2);
    st->q_norm = sqrtf(dot(q, q, dk));
    st->v_norm = sqrtf(dot(v, v, dv));
    st->e_norm = (float)sqrt(e2);
    st->pred_norm = (float)sqrt(pred2);
    st->r_norm = (float)sqrt(r2);
    st->r_check = (float)sqrt(rc2);
    st->prev_norm = (float)sqrt(prev2);
    st->state_norm = (float)sqrt(state2);
    st->o_norm = (float)sqrt(o2);
}

static void step_head_base(int dk, int dv, float *S, const float *q, const float *k, const float *v,
                           float alpha, float beta, float scale, float *o, delta_stats *st) {
    step_head_body(dk, dv, S, q, k, v, alpha, beta, scale, o, st);
}

__attribute__((target("avx2"))) static void step_head_avx2(int dk, int dv, float *S, const float *q,
                                                           const float *k, const float *v,
                                                           float alpha, float beta, float scale,
                                                           float *o, delta_stats *st) {
    step_head_body(dk, dv, S, q, k, v, alpha, beta, scale, o, st);
}

/* 1 when the AVX2 build runs: the CPU has it and MIXSCOPE_NO_AVX2 is not set (a check that the
 * two builds agree). */
static int use_avx2(void) {
    static int v = -1;
    if (v < 0) {
        const char *no = getenv("MIXSCOPE_NO_AVX2");
        v = __builtin_cpu_supports("avx2") && !(no && *no && strcmp(no, "0"));
    }
    return v;
}

void delta_step_head(int dk, int dv, float *S, const float *q, const float *k, const float *v,
                     float alpha, float beta, float scale, float *o, delta_stats *st) {
    if (use_avx2())
        step_head_avx2(dk, dv, S, q, k, v, alpha, beta, scale, o, st);
    else
        step_head_base(dk, dv, S, q, k, v, alpha, beta, scale, o, st);
}

/* Head h's probes from its measurements; probe p of the mixer is kd->probes[p], laid out [p][H]. */
static void delta_probes_write(const delta_kind *kd, const delta_stats *s, float g, float eta,
                               int H, int h, float *probes) {
    float val[DP_COUNT];
    val[DP_BETA] = s->beta;
    val[DP_ETA] = eta;
    val[DP_RHO] = s->rho;
    val[DP_K_NORM] = s->k_norm;
    val[DP_Q_NORM] = s->q_norm;
    val[DP_G] = g;
    val[DP_ALPHA] = s->alpha;
    /* g = 0 never decays: an infinite half-life (NaN would read as "not recorded" in the trace) */
    val[DP_HALF_LIFE] = g < 0.0f ? -logf(2.0f) / g : INFINITY;
    val[DP_E_NORM] = s->e_norm;
    val[DP_E_REL] = s->v_norm > 0.0f ? s->e_norm / s->v_norm : (s->e_norm > 0.0f ? INFINITY : 0);
    val[DP_R_NORM] = s->r_norm;
    val[DP_R_CHECK] = s->r_check;
    val[DP_LOSS_BEFORE] = 0.5f * s->e_norm * s->e_norm;
    val[DP_LOSS_AFTER] = 0.5f * s->r_norm * s->r_norm;
    val[DP_WRITE_NORM] = s->beta * s->k_norm * s->e_norm;
    val[DP_STATE_NORM] = s->state_norm;
    val[DP_FORGET_REMOVED] = (1.0f - s->alpha) * s->prev_norm;
    val[DP_ERASE_REMOVED] = s->beta * s->k_norm * s->pred_norm;
    val[DP_O_NORM] = s->o_norm;
    for (int p = 0; p < kd->nprobes; p++) probes[(size_t)p * H + h] = val[kd->probes[p]];
}

void delta_step(const delta_kind *kd, const mixer_cfg *c, float *state, const mixer_tok *x,
                float *o, float *probes) {
    int H = c->H, dk = c->dk, dv = c->dv;
    const float *g = kd->decay ? x->in[IN_G] : NULL; /* [H] */
    const float *b = x->in[IN_BETA];                 /* [H]: beta, or eta for Kaczmarz */
    for (int h = 0; h < H; h++) {
        const float *q = x->in[IN_Q] + (size_t)h * dk; /* [dk] */
        const float *k = x->in[IN_K] + (size_t)h * dk; /* [dk] */
        const float *v = x->in[IN_V] + (size_t)h * dv; /* [dv] */
        float gh = g ? g[h] : 0.0f, bh = b ? b[h] : 1.0f;
        /* Kaczmarz (§8.3): the raw key, beta = eta / (|k|^2 + eps) */
        float beta = kd->kaczmarz ? bh / (dot(k, k, dk) + c->eps) : bh;
        delta_stats st;
        delta_step_head(dk, dv, state + (size_t)h * dk * dv, q, k, v, expf(gh), beta, c->scale,
                        o + (size_t)h * dv, probes ? &st : NULL);
        if (probes) delta_probes_write(kd, &st, gh, bh, H, h, probes);
    }
}

int delta_write_form(const delta_kind *kd, const mixer_cfg *c, const float *state,
                     const mixer_tok *x, float *alpha, float *kk, float *u) {
    int H = c->H, dk = c->dk, dv = c->dv;
    const float *g = kd->decay ? x->in[IN_G] : NULL; /* [H] */
    const float *b = x->in[IN_BETA];                 /* [H]: beta, or eta for Kaczmarz */
    for (int h = 0; h < H; h++) {
        const float *S = state + (size_t)h * dk * dv;  /* [dk, dv] before the step */
        const float *k = x->in[IN_K] + (size_t)h * dk; /* [dk] */
        const float *v = x->in[IN_V] + (size_t)h * dv; /* [dv] */
        float gh = g ? g[h] : 0.0f, bh = b ? b[h] : 1.0f;
        float beta = kd->kaczmarz ? bh / (dot(k, k, dk) + c->eps) : bh, a = expf(gh);
        float *uh = u + (size_t)h * dv; /* [dv] */
        /* e = v - alpha S_{t-1}^T k, summed over the key rows in delta_step_head's order */
        for (int j0 = 0; j0 < dv; j0 += DELTA_VB) {
            int nb = dv - j0 < DELTA_VB ? dv - j0 : DELTA_VB;
            float sk[DELTA_VB] = {0}; /* [nb] */
            for (int i = 0; i < dk; i++) {
                const float *row = S + (size_t)i * dv + j0;
                for (int j = 0; j < nb; j++) sk[j] += row[j] * k[i];
            }
            for (int j = 0; j < nb; j++) uh[j0 + j] = beta * (v[j0 + j] - a * sk[j]);
        }
        alpha[h] = a;
        memcpy(kk + (size_t)h * dk, k, (size_t)dk * sizeof *kk);
    }
    return 0;
}

/* ---------------------------------------------------------------------------------------------
 * Chunked WY/UT form (§2.5) */

/* Scratch for one chunk of one head. */
typedef struct delta_chunk_buf {
    float *G; /* [C] chunk-local inclusive cumulative log-decay */
    float *L; /* [C, C] lower: L_ij = exp(G_i - G_j) = exp(g_{j+1} + ... + g_i), i >= j */
    float *M; /* [C, C] strictly lower: M_ij = beta_i (k_i . k_j) L_ij */
    float *A; /* [C, C] (I + M)^{-1}, unit lower triangular */
    float *W; /* [C, dk] pseudo-keys A diag(beta exp(G)) K */
    float *D; /* [C, dv] U = A diag(beta) V, then the corrected values Delta = U - W S */
} delta_chunk_buf;

/* One chunk of n tokens for one head. Token i of the chunk reads q[i*qs], k[i*qs], v[i*vs],
 * g[i*H], beta[i*H] and writes o[i*vs] (strides over the [T, H, .] layout). S [dk, dv] in/out. */
static void delta_chunk_head(const mixer_cfg *c, int n, float *S, const float *q, const float *k,
                             const float *v, const float *g, const float *beta, float *o,
                             const delta_chunk_buf *b) {
    int H = c->H, dk = c->dk, dv = c->dv, C = c->chunk;
    size_t qs = (size_t)H * dk, vs = (size_t)H * dv;
    float *G = b->G, *L = b->L, *M = b->M, *A = b->A, *W = b->W, *D = b->D;
#define BETA(i) (beta ? beta[(size_t)(i)*H] : 1.0f)

    /* §1.4: G_i = sum_{s <= i} g_s, restarting at the chunk. */
    for (int i = 0; i < n; i++) G[i] = (i ? G[i - 1] : 0.0f) + (g ? g[(size_t)i * H] : 0.0f);
    /* Gamma_ij = exp(G_i - G_j) for i >= j only (i < j can overflow). The exponent is summed over
     * its own tokens j+1..i rather than taken as a difference of two cumulative sums: after a
     * strong decay |G| is large and G_i - G_j would lose ulp(|G|) (measured with g = -300 spikes:
     * prefill vs step 9e-5 relative at chunk 64 as a difference, 3e-7 this way). A choice, not
     * from fla, which subtracts; the function is the same. */
    for (int i = 0; i < n; i++) {
        float acc = 0.0f;
        L[i * C + i] = 1.0f;
        for (int j = i - 1; j >= 0; j--) {
            acc += g ? g[(size_t)(j + 1) * H] : 0.0f;
            L[i * C + j] = expf(acc);
        }
    }

    /* Step 1: M_ij = beta_i (k_i . k_j) Gamma_ij for i > j. */
    for (int i = 0; i < n; i++)
        for (int j = 0; j < i; j++)
            M[i * C + j] = BETA(i) * dot(k + i * qs, k + j * qs, dk) * L[i * C + j];

    /* Step 2: A = (I + M)^{-1} by forward substitution, A_ij = -sum_{m=j}^{i-1} M_im A_mj. */
    for (int i = 0; i < n; i++) {
        for (int j = 0; j < i; j++) {
            float s = 0.0f;
            for (int m = j; m < i; m++) s += M[i * C + m] * A[m * C + j];
            A[i * C + j] = -s;
        }
        A[i * C + i] = 1.0f;
    }

    /* Step 3: W = A diag(beta exp(G)) K, U = A diag(beta) V (U goes into D). */
    for (int i = 0; i < n; i++) {
        float *Wi = W + (size_t)i * dk, *Ui = D + (size_t)i * dv;
        memset(Wi, 0, (size_t)dk * sizeof *Wi);
        memset(Ui, 0, (size_t)dv * sizeof *Ui);
        for (int j = 0; j <= i; j++) {
            float ab = A[i * C + j] * BETA(j), abg = ab * expf(G[j]);
            const float *kj = k + j * qs, *vj = v + j * vs;
            for (int d = 0; d < dk; d++) Wi[d] += abg * kj[d];
            for (int d = 0; d < dv; d++) Ui[d] += ab * vj[d];
        }
    }

    /* Step 4: Delta = U - W S. Row i is beta_i e_i, the scaled residual of the step. */
    for (int i = 0; i < n; i++) {
        float *Di = D + (size_t)i * dv;
        for (int d = 0; d < dk; d++) {
            const float *Sd = S + (size_t)d * dv;
            float w = W[(size_t)i * dk + d];
            for (int col = 0; col < dv; col++) Di[col] -= w * Sd[col];
        }
    }

    /* Step 5: O_i = scale [exp(G_i) q_i^T S + sum_{j <= i} (q_i . k_j) exp(G_i - G_j) Delta_j],
     * from the state entering the chunk. */
    for (int i = 0; i < n; i++) {
        const float *qi = q + i * qs;
        float *oi = o + i * vs;
        memset(oi, 0, (size_t)dv * sizeof *oi);
        float gi = expf(G[i]);
        for (int d = 0; d < dk; d++) {
            const float *Sd = S + (size_t)d * dv;
            float w = gi * qi[d];
            for (int col = 0; col < dv; col++) oi[col] += w * Sd[col];
        }
        for (int j = 0; j <= i; j++) {
            float w = dot(qi, k + j * qs, dk) * L[i * C + j];
            const float *Dj = D + (size_t)j * dv;
            for (int col = 0; col < dv; col++) oi[col] += w * Dj[col];
        }
        for (int col = 0; col < dv; col++) oi[col] *= c->scale;
    }

    /* Step 6: S <- exp(G_{n-1}) S + (diag(exp(G_{n-1} - G)) K)^T Delta. */
    float gl = expf(G[n - 1]);
    for (int d = 0; d < dk; d++) {
        float *Sd = S + (size_t)d * dv;
        for (int col = 0; col < dv; col++) Sd[col] *= gl;
        for (int j = 0; j < n; j++) {
            float w = L[(n - 1) * C + j] * k[j * qs + d];
            const float *Dj = D + (size_t)j * dv;
            for (int col = 0; col < dv; col++) Sd[col] += w * Dj[col];
        }
    }
#undef BETA
}

int delta_chunk_forward(const mixer_cfg *c, float *state, int T, const float *q, const float *k,
                        const float *v, const float *g, const float *beta, float *o) {
    int H = c->H, dk = c->dk, dv = c->dv, C = c->chunk;
    size_t C2 = (size_t)C * C;
    float *buf = malloc(((size_t)C + 3 * C2 + (size_t)C * dk + (size_t)C * dv) * sizeof *buf);
    if (!buf) return -1;
    delta_chunk_buf b;
    b.G = buf, b.L = b.G + C, b.M = b.L + C2, b.A = b.M + C2, b.W = b.A + C2;
    b.D = b.W + (size_t)C * dk;
    /* Heads are independent; within a head the chunks run in order, carrying S. */
    for (int h = 0; h < H; h++) {
        float *S = state + (size_t)h * dk * dv; /* [dk, dv] */
        for (int t0 = 0; t0 < T; t0 += C) {
            int n = T - t0 < C ? T - t0 : C; /* the last chunk may be short: no padding needed */
            size_t tk = ((size_t)t0 * H + h) * dk, tv = ((size_t)t0 * H + h) * dv;
            size_t ts = (size_t)t0 * H + h;
            delta_chunk_head(c, n, S, q + tk, k + tk, v + tv, g ? g + ts : NULL,
                             beta ? beta + ts : NULL, o + tv, &b);
        }
    }
    free(buf);
    return 0;
}

void delta_prefill(const delta_kind *kd, const mixer_cfg *c, float *state, const mixer_seq *x,
                   float *o) {
    int T = x->T, H = c->H, dk = c->dk, dv = c->dv;
    if (T <= 0) return;
    const float *k = x->in[IN_K], *v = x->in[IN_V];  /* [T, H, dk], [T, H, dv] */
    const float *g = kd->decay ? x->in[IN_G] : NULL; /* [T, H] */
    float *kv = NULL;                                /* Kaczmarz: rescaled k [T,H,dk], v [T,H,dv] */
    int ok = 1;
    if (kd->kaczmarz) {
        /* §8.5: KLA(q, k, v, eta, g) = GDN(q, k c_t, v c_t, beta = eta, g) with
         * c_t = (|k_t|^2 + eps)^{-1/2}. The rescaled keys have norm < 1, so |M_ij| <= eta_i and
         * the WY solve stays well conditioned whatever the raw key norms (§8.5 b). */
        size_t nk = (size_t)T * H * dk, nv = (size_t)T * H * dv;
        kv = malloc((nk + nv) * sizeof *kv);
        ok = kv != NULL;
        if (ok) {
            for (size_t th = 0; th < (size_t)T * H; th++) {
                const float *kt = k + th * dk, *vt = v + th * dv;
                float ct = 1.0f / sqrtf(dot(kt, kt, dk) + c->eps);
                for (int d = 0; d < dk; d++) kv[th * dk + d] = ct * kt[d];
                for (int d = 0; d < dv; d++) kv[nk + th * dv + d] = ct * vt[d];
            }
            k = kv, v = kv + nk;
        }
    }
    if (ok) /* arith=tf32: fla's chunk kernels with their TF32 products (delta_tf32.c) */
        ok = (c->arith == MIXER_ARITH_TF32 ? delta_chunk_forward_tf32 : delta_chunk_forward)(
                 c, state, T, x->in[IN_Q], k, v, g, x->in[IN_BETA], o) == 0;
    free(kv);
    if (ok) return;
    /* Out of memory for the scratch: the recurrence gives the same function. */
    for (int t = 0; t < T; t++) {
        mixer_tok xt = mixer_seq_at(c, x, t);
        delta_step(kd, c, state, &xt, o + (size_t)t * H * dv, NULL);
    }
}

/* ---------------------------------------------------------------------------------------------
 * Config and state */

int delta_configure(mixer_cfg *c, opts *o, int kaczmarz, err *e) {
    opts none = {0};
    if (!o) o = &none;
    long chunk;
    double scale, eps;
    if (opts_int(o, "chunk", 64, &chunk, e)) return -1;
    if (chunk != 16 && chunk != 32 && chunk != 64)
        return err_set(e, "chunk=%ld: must be 16, 32 or 64", chunk);
    if (opts_float(o, "scale", c->scale, &scale, e)) return -1;
    if (!(scale > 0.0) || !isfinite((float)scale))
        return err_set(e, "scale=%g: must be a positive float", scale);
    c->chunk = (int)chunk;
    c->scale = (float)scale;
    if (arith_configure(c, o, e)) return -1;
    if (kaczmarz) {
        if (opts_float(o, "eps", 1e-6, &eps, e)) return -1;
        /* eps = 0 would divide by zero on a zero key; hard Kaczmarz is eps -> 0, e.g. 1e-12 */
        if (!(eps > 0.0) || !((float)eps > 0.0f) || !isfinite((float)eps))
            return err_set(e, "eps=%g: must be > 0 and representable as a float", eps);
        c->eps = (float)eps;
    }
    return 0;
}

size_t delta_state_floats(const mixer_cfg *c) {
    return (size_t)c->H * c->dk * c->dv;
}

void delta_state_init(const mixer_cfg *c, float *state) {
    memset(state, 0, delta_state_floats(c) * sizeof *state);
}

int delta_state_parts(const mixer_cfg *c, state_part *parts) {
    parts[0] = (state_part){
        .name = "hT", .init_name = "h0", .offset = 0, .ndim = 3, .shape = {c->H, c->dk, c->dv}};
    return 1;
}
