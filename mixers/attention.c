/* attention.c: KV cache, RoPE and the online-softmax (flash) tiles of softmax and parallax; see
 * attention.h for the equations and the state layout.
 *
 * One query row carries the streaming accumulators of spec/kata-parallax.md B.4 (softmax uses
 * the first three): the running maximum m of s1, d1 = sum w, d2 = sum w u, O1 = sum w v and
 * O2 = sum w u v, all relative to exp(-m). A key tile of n <= chunk visible keys is folded in by
 *     m' = max(m, max_j s1_j),   a = exp(m - m')  (a = 0 before the first key),
 *     w_j = exp(s1_j - m'),
 *     d1 = a d1 + sum w,   d2 = a d2 + sum w u,   O1 = a O1 + sum w v,   O2 = a O2 + sum w u v,
 * and the row is finished with
 *     vbar = O1/d1,   ubar = d2/d1,   corr = O2/d1 - ubar vbar,   o = vbar - corr
 * (o = 0 when no key was visible). With merge=welford the same slots hold (W, ubar, vbar, C),
 * C = sum w (u - ubar)(v - vbar), merged tile by tile (B.4's robust variant):
 *     W <- a W,  C <- a C,   C += C_b + W W_b / (W + W_b) (ubar_b - ubar)(vbar_b - vbar),
 *     ubar, vbar move to the merged weighted means,   o = vbar - C / W,
 * which never forms the cancelling difference O2/d1 - ubar vbar. Welford carries the moments of
 * u - c, c = u of the row's first visible key (choice, not from source): Cov_p(u, v) does not see
 * the shift, and a large common offset of the probe scores then costs no digits of the means.
 * A fourth scalar e = sum w (s1 - m) gives the softmax entropy H = log d1 - e/d1 for the probes
 * (B.9.3; kept relative to m so that it does not cancel against m).
 *
 * Key tiles are [J, J + chunk) with J a multiple of chunk in absolute position, intersected with
 * what the row may see. step folds them for its one row; prefill loops query tiles of chunk rows
 * and, inside, the same key tiles, folding each row's visible part with the same function, so the
 * two paths do the same arithmetic. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "attention.h"
#include "tf32.h"

const probe_def attn_probe_defs[ATTN_NPROBES] = {
    {"entropy", W_1, "softmax entropy -sum_j p_j log p_j (nats) of the base weights p"},
    {"entropy_norm", W_1, "entropy / log(n), n the visible keys (t+1 without window); 0 at n = 1"},
    {"max_weight", W_1, "max_j p_j, the largest softmax weight"},
    {"sink_p", W_1, "p_{t,0}: softmax weight on token 0 (attention sink); 0 outside the window"},
    {"o_norm", W_1, "||o_t||, the output"},
    {"sa_norm", W_1, "||o_SA|| = ||vbar||, the softmax (Nadaraya-Watson) output"},
    {"corr_norm", W_1, "||Sigma_KV rho|| = ||sum_j p_j (u_j - ubar) v_j||, the correction"},
    {"cor", W_1, "COR = corr_norm / sa_norm, correction-to-output ratio (B.7)"},
    {"r_norm", W_1, "||rho||, the probe r as used (after RoPE)"},
    {"u_bar", W_1, "ubar = sum_j p_j r.k_j, the softmax mean probe score"},
    {"a_min", W_1, "min_j a_j, effective weight a_j = p_j (1 + ubar - u_j); may be < 0"},
    {"a_max", W_1, "max_j a_j; may be > 1"},
    {"neg_mass", W_1, "N = sum_j max(0, -a_j); ||a||_1 = 1 + 2N"},
    {"sink_a", W_1, "a_{t,0}: effective weight on token 0; 0 outside the window"},
};

int attn_configure(mixer_cfg *c, opts *o, int parallax, err *e) {
    long chunk = c->chunk, rope = c->rope, window = c->window, max_t = c->max_t;
    double scale = c->scale, theta = c->rope_theta;
    const char *merge = "raw";
    if (o && (opts_int(o, "chunk", chunk, &chunk, e) || opts_float(o, "scale", scale, &scale, e) ||
              opts_int(o, "rope", rope, &rope, e) || opts_float(o, "theta", theta, &theta, e) ||
              opts_int(o, "window", window, &window, e) || opts_int(o, "max_t", max_t, &max_t, e)))
        return -1;
    if (o && parallax) merge = opts_str(o, "merge", merge);
    if (arith_configure(c, o, e)) return -1;
    if (chunk != 16 && chunk != 32 && chunk != 64)
        return err_set(e, "chunk=%ld: must be 16, 32 or 64", chunk);
    if (!(scale > 0.0) || scale > 1e30)
        return err_set(e, "scale=%g: must be a positive number", scale);
    if (rope != 0 && rope != 1) return err_set(e, "rope=%ld: must be 0 or 1", rope);
    if (rope && c->dk % 2) return err_set(e, "rope=1 needs an even dk (dk=%d)", c->dk);
    if (!(theta > 0.0) || theta > 1e30)
        return err_set(e, "theta=%g: must be a positive number", theta);
    if (window < 0 || window > (1l << 30))
        return err_set(e, "window=%ld: must be 0 (off) or a token count", window);
    if (max_t < 1 || max_t > (1l << 24)) return err_set(e, "max_t=%ld: must be in 1..2^24", max_t);
    if (c->dk > ATTN_MAX_DIM || c->dv > ATTN_MAX_DIM)
        return err_set(e, "dk=%d dv=%d: attention supports head widths up to %d", c->dk, c->dv,
                       ATTN_MAX_DIM);
    if ((double)max_t * c->H * (c->dk + c->dv) > 4e9)
        return err_set(e, "max_t=%ld: KV cache of %g floats is too large", max_t,
                       (double)max_t * c->H * (c->dk + c->dv));
    if (strcmp(merge, "raw") == 0)
        c->variant = ATTN_MERGE_RAW;
    else if (strcmp(merge, "welford") == 0)
        c->variant = ATTN_MERGE_WELFORD;
    else
        return err_set(e, "merge=%s: must be raw or welford", merge);
    c->chunk = (int)chunk, c->scale = (float)scale, c->rope = (int)rope;
    c->rope_theta = (float)theta, c->window = (int)window, c->max_t = (int)max_t;
    return 0;
}

size_t attn_state_floats(const mixer_cfg *c) {
    return (size_t)c->max_t * (size_t)c->H * (size_t)(c->dk + c->dv);
}

void attn_state_init(const mixer_cfg *c, float *state) {
    memset(state, 0, attn_state_floats(c) * sizeof *state);
}

int attn_state_parts(const mixer_cfg *c, state_part *parts) {
    (void)c, (void)parts;
    return 0;
}

size_t attn_k_offset(const mixer_cfg *c, int pos, int h) {
    return ((size_t)pos * c->H + h) * c->dk;
}

size_t attn_v_offset(const mixer_cfg *c, int pos, int h) {
    return (size_t)c->max_t * c->H * c->dk + ((size_t)pos * c->H + h) * c->dv;
}

int attn_first_key(const mixer_cfg *c, int pos) {
    int j = c->window > 0 ? pos - c->window + 1 : 0;
    return j > 0 ? j : 0;
}

void attn_rope_angles(int dk, float base, int pos, float *cs, float *sn) {
    /* angles in double: pos * theta_i loses nothing for long positions */
    for (int i = 0; i < dk / 2; i++) {
        double ang = (double)pos * pow((double)base, -2.0 * i / dk);
        cs[i] = (float)cos(ang), sn[i] = (float)sin(ang);
    }
}

void attn_rope_apply(int dk, const float *cs, const float *sn, float *x) {
    int half = dk / 2;
    for (int i = 0; i < half; i++) {
        float a = x[i], b = x[i + half];
        x[i] = a * cs[i] - b * sn[i];
        x[i + half] = b * cs[i] + a * sn[i];
    }
}

static float attn_dot(const float *a, const float *b, int n) {
    float s = 0.0f;
    for (int i = 0; i < n; i++) s += a[i] * b[i];
    return s;
}

static float attn_norm(const float *a, int n) {
    return sqrtf(attn_dot(a, a, n));
}

/* q.k or r.k as the core's arithmetic computes it (arith=tf32: TF32 operands, tf32.h) */
static float attn_score_dot(const mixer_cfg *c, const float *a, const float *b) {
    return c->arith == MIXER_ARITH_TF32 ? tf32_dot(a, b, c->dk) : attn_dot(a, b, c->dk);
}

/* The streaming accumulators of one query row (see the top of the file). */
typedef struct attn_row {
    float m;   /* running max of s1; -inf before any key */
    float d1;  /* raw: sum w;      welford: W = sum w */
    float d2;  /* raw: sum w u;    welford: ubar - c */
    float c;   /* welford: the shift of u, u of the row's first key (Cov is shift invariant) */
    float e;   /* sum w (s1 - m), for the entropy */
    float *o1; /* [dv] raw: sum w v;    welford: vbar */
    float *o2; /* [dv] raw: sum w u v;  welford: C; unused (may be NULL) without r */
} attn_row;

static void attn_row_reset(attn_row *a, int dv) {
    a->m = -INFINITY, a->d1 = 0.0f, a->d2 = 0.0f, a->c = 0.0f, a->e = 0.0f;
    memset(a->o1, 0, (size_t)dv * sizeof *a->o1);
    if (a->o2) memset(a->o2, 0, (size_t)dv * sizeof *a->o2);
}

/* What a finished row reports to the probes. */
typedef struct attn_out {
    float ubar, sa_norm, corr_norm, o_norm;
} attn_out;

/* Folds the keys [j0, j1) of head h (all visible to the row, j1 - j0 <= ATTN_MAX_TILE) into row a.
 * q [dk] is the rotated query, r [dk] the rotated probe or NULL (softmax). */
static void attn_row_fold(const mixer_cfg *c, const float *state, int h, const float *q,
                          const float *r, int j0, int j1, attn_row *a) {
    const int dk = c->dk, dv = c->dv, n = j1 - j0;
    const int welford = r && c->variant == ATTN_MERGE_WELFORD;
    float s1[ATTN_MAX_TILE], u[ATTN_MAX_TILE], w[ATTN_MAX_TILE];
    float mt = -INFINITY;
    for (int j = 0; j < n; j++) {
        const float *k = state + attn_k_offset(c, j0 + j, h); /* [dk] */
        s1[j] = c->scale * attn_dot(q, k, dk);
        u[j] = r ? attn_dot(r, k, dk) : 0.0f;
        mt = fmaxf(mt, s1[j]);
    }
    if (welford && n > 0) {
        /* moments of u - c: a common offset of the probe scores would otherwise cost the means
         * (hence the merge term) their low digits */
        if (a->m == -INFINITY) a->c = u[0];
        for (int j = 0; j < n; j++) u[j] -= a->c;
    }
    float mn = fmaxf(a->m, mt);
    float al = a->m == -INFINITY ? 0.0f : expf(a->m - mn); /* rescale of the old sums */
    float ws = 0.0f, wsum = 0.0f, wu = 0.0f;
    for (int j = 0; j < n; j++) {
        w[j] = expf(s1[j] - mn);
        wsum += w[j], wu += w[j] * u[j], ws += w[j] * (s1[j] - mn);
    }
    /* e moves to the new reference m' first: sum w (s - m') = sum w (s - m) + (m - m') sum w */
    a->e = (a->d1 > 0.0f ? al * (a->e + (a->m - mn) * a->d1) : 0.0f) + ws;
    a->m = mn;
    if (!welford) {
        a->d1 = al * a->d1 + wsum;
        a->d2 = al * a->d2 + wu;
        for (int d = 0; d < dv; d++) a->o1[d] *= al;
        if (r)
            for (int d = 0; d < dv; d++) a->o2[d] *= al;
        for (int j = 0; j < n; j++) {
            const float *v = state + attn_v_offset(c, j0 + j, h); /* [dv] */
            for (int d = 0; d < dv; d++) a->o1[d] += w[j] * v[d];
            if (r) {
                float wuj = w[j] * u[j];
                for (int d = 0; d < dv; d++) a->o2[d] += wuj * v[d];
            }
        }
        return;
    }
    /* Welford: the tile's own (W_b, ubar_b, vbar_b, C_b), then the centred merge. All weights of
     * the tile can underflow to 0 when its scores sit far below the row's max: nothing to add. */
    if (!(wsum > 0.0f)) {
        a->d1 *= al;
        for (int d = 0; d < dv; d++) a->o2[d] *= al;
        return;
    }
    float vb[ATTN_MAX_DIM], cb[ATTN_MAX_DIM]; /* [dv] tile mean and tile co-moment */
    float ub = wu / wsum;
    memset(vb, 0, (size_t)dv * sizeof *vb);
    memset(cb, 0, (size_t)dv * sizeof *cb);
    for (int j = 0; j < n; j++) {
        const float *v = state + attn_v_offset(c, j0 + j, h);
        for (int d = 0; d < dv; d++) vb[d] += w[j] * v[d];
    }
    for (int d = 0; d < dv; d++) vb[d] /= wsum;
    for (int j = 0; j < n; j++) {
        const float *v = state + attn_v_offset(c, j0 + j, h);
        float wdu = w[j] * (u[j] - ub);
        for (int d = 0; d < dv; d++) cb[d] += wdu * (v[d] - vb[d]);
    }
    float W = al * a->d1;
    if (W > 0.0f) {
        float f = wsum / (W + wsum), du = ub - a->d2;
        for (int d = 0; d < dv; d++) {
            float dvd = vb[d] - a->o1[d];
            a->o2[d] = al * a->o2[d] + cb[d] + W * f * du * dvd;
            a->o1[d] += f * dvd;
        }
        a->d2 += f * du;
        a->d1 = W + wsum;
    } else {
        memcpy(a->o1, vb, (size_t)dv * sizeof *vb);
        memcpy(a->o2, cb, (size_t)dv * sizeof *cb);
        a->d2 = ub, a->d1 = wsum;
    }
}

/* Finishes row a into o [dv]: o = vbar - corr (0 when no key was visible). */
static attn_out attn_row_finish(const mixer_cfg *c, const attn_row *a, int use_r, float *o) {
    const int dv = c->dv, welford = use_r && c->variant == ATTN_MERGE_WELFORD;
    attn_out s = {0};
    if (!(a->d1 > 0.0f)) {
        memset(o, 0, (size_t)dv * sizeof *o);
        return s;
    }
    float inv = 1.0f / a->d1;
    double sa = 0, cr = 0, on = 0;
    if (c->arith == MIXER_ARITH_TF32) {
        /* attn_row_naive's sums, finished as naive_parallax does:
         * o = O1/d1 (1 + d2/d1) - O2/d1 (softmax: O1/d1) */
        s.ubar = use_r ? a->d2 / a->d1 : 0.0f;
        for (int d = 0; d < dv; d++) {
            float vbar = a->o1[d] * inv;
            o[d] = use_r ? vbar * (1.0f + s.ubar) - a->o2[d] * inv : vbar;
            float corr = vbar - o[d];
            sa += (double)vbar * vbar, cr += (double)corr * corr, on += (double)o[d] * o[d];
        }
        s.sa_norm = (float)sqrt(sa), s.corr_norm = (float)sqrt(cr), s.o_norm = (float)sqrt(on);
        return s;
    }
    s.ubar = !use_r ? 0.0f : welford ? a->c + a->d2 : a->d2 * inv;
    for (int d = 0; d < dv; d++) {
        float vbar = welford ? a->o1[d] : a->o1[d] * inv;
        float corr = !use_r ? 0.0f : welford ? a->o2[d] * inv : a->o2[d] * inv - s.ubar * vbar;
        o[d] = vbar - corr;
        sa += (double)vbar * vbar, cr += (double)corr * corr, on += (double)o[d] * o[d];
    }
    s.sa_norm = (float)sqrt(sa), s.corr_norm = (float)sqrt(cr), s.o_norm = (float)sqrt(on);
    return s;
}

/* arith=tf32: the row as fla's naive_parallax computes it with TF32 einsums (tf32.h), in place of
 * the tiles: s1 = scale tf32(q).tf32(k), s2 = tf32(r).tf32(k), the maximum m over every visible
 * key first, p1 = exp(s1 - m), p2 = p1 s2, then d1 = sum p1, d2 = sum p2 and, with TF32 operands,
 * O1 = sum p1 v, O2 = sum p2 v. Two passes over the keys (scores recomputed), no scratch. Leaves
 * the raw sums in a for attn_row_finish. */
static void attn_row_naive(const mixer_cfg *c, const float *state, int h, const float *q,
                           const float *r, int pos, attn_row *a) {
    const int dv = c->dv, first = attn_first_key(c, pos);
    float m = -INFINITY;
    for (int j = first; j <= pos; j++)
        m = fmaxf(m, attn_score_dot(c, q, state + attn_k_offset(c, j, h)) * c->scale);
    for (int j = first; j <= pos; j++) {
        const float *k = state + attn_k_offset(c, j, h), *v = state + attn_v_offset(c, j, h);
        float s1 = attn_score_dot(c, q, k) * c->scale, p1 = expf(s1 - m);
        float p2 = r ? p1 * attn_score_dot(c, r, k) : 0.0f;
        a->d1 += p1, a->d2 += p2, a->e += p1 * (s1 - m);
        float t1 = tf32(p1), t2 = tf32(p2);
        for (int d = 0; d < dv; d++) a->o1[d] += t1 * tf32(v[d]);
        if (r)
            for (int d = 0; d < dv; d++) a->o2[d] += t2 * tf32(v[d]);
    }
    a->m = m;
}

/* Folds every key tile visible to the query at pos into row a. */
static void attn_row_all_tiles(const mixer_cfg *c, const float *state, int h, const float *q,
                               const float *r, int pos, attn_row *a) {
    int first = attn_first_key(c, pos), C = c->chunk;
    for (int J = first / C * C; J <= pos; J += C) {
        int j0 = J > first ? J : first, j1 = J + C < pos + 1 ? J + C : pos + 1;
        attn_row_fold(c, state, h, q, r, j0, j1, a);
    }
}

/* Writes one token's keys k [H, dk] (rotated by cs, sn when rope) and values v [H, dv] into
 * cache slot pos. */
static void attn_cache_write(const mixer_cfg *c, float *state, const float *k, const float *v,
                             int pos, const float *cs, const float *sn) {
    for (int h = 0; h < c->H; h++) {
        float *kc = state + attn_k_offset(c, pos, h);
        memcpy(kc, k + (size_t)h * c->dk, (size_t)c->dk * sizeof *kc);
        if (c->rope) attn_rope_apply(c->dk, cs, sn, kc);
        memcpy(state + attn_v_offset(c, pos, h), v + (size_t)h * c->dv,
               (size_t)c->dv * sizeof(float));
    }
}

/* The probes of head h for the row a just finished at pos (q, r rotated). The parallax ones need
 * a second pass over the keys, because a_j = p_j (1 + ubar - u_j) needs the final ubar. */
static void attn_probes_head(const mixer_cfg *c, const float *state, int h, const float *q,
                             const float *r, int pos, const attn_row *a, const attn_out *s,
                             float *probes) {
    const int H = c->H, first = attn_first_key(c, pos), n = pos - first + 1;
    float *P = probes + h;       /* probe i at P[i * H] */
    if (!(a->d1 > 0.0f)) return; /* cannot happen: the row sees its own key */
    float inv = 1.0f / a->d1;
    float ent = logf(a->d1) - a->e * inv;
    P[ATTN_P_ENTROPY * H] = ent;
    P[ATTN_P_ENTROPY_NORM * H] = n > 1 ? ent / logf((float)n) : 0.0f;
    P[ATTN_P_MAX_WEIGHT * H] = inv; /* the maximal key has w = exp(m - m) = 1 */
    float p0 = 0.0f;
    if (first == 0)
        p0 = expf(c->scale * attn_score_dot(c, q, state + attn_k_offset(c, 0, h)) - a->m) * inv;
    P[ATTN_P_SINK_P * H] = p0;
    P[ATTN_P_O_NORM * H] = s->o_norm;
    if (!r) return;
    P[ATTN_P_SA_NORM * H] = s->sa_norm;
    P[ATTN_P_CORR_NORM * H] = s->corr_norm;
    P[ATTN_P_COR * H] = s->sa_norm > 0.0f     ? s->corr_norm / s->sa_norm
                        : s->corr_norm > 0.0f ? INFINITY
                                              : 0.0f;
    P[ATTN_P_R_NORM * H] = attn_norm(r, c->dk);
    P[ATTN_P_U_BAR * H] = s->ubar;
    float amin = INFINITY, amax = -INFINITY, neg = 0.0f, a0 = 0.0f;
    for (int j = first; j <= pos; j++) {
        const float *k = state + attn_k_offset(c, j, h);
        float p = expf(c->scale * attn_score_dot(c, q, k) - a->m) * inv;
        float aj = p * (1.0f + s->ubar - attn_score_dot(c, r, k));
        amin = fminf(amin, aj), amax = fmaxf(amax, aj);
        if (aj < 0.0f) neg -= aj;
        if (j == 0) a0 = aj;
    }
    P[ATTN_P_A_MIN * H] = amin;
    P[ATTN_P_A_MAX * H] = amax;
    P[ATTN_P_NEG_MASS * H] = neg;
    P[ATTN_P_SINK_A * H] = a0;
}

void attn_step(const mixer_cfg *c, float *state, const mixer_tok *x, int pos, float *o,
               float *probes, int use_r) {
    const int H = c->H, dk = c->dk, dv = c->dv;
    if (probes)
        memset(probes, 0,
               (size_t)(use_r ? ATTN_NPROBES : ATTN_NPROBES_SOFTMAX) * H * sizeof *probes);
    if (pos < 0 || pos >= c->max_t) { /* not in the cache: a caller error, answered with zeros */
        memset(o, 0, (size_t)H * dv * sizeof *o);
        return;
    }
    float cs[ATTN_MAX_DIM / 2], sn[ATTN_MAX_DIM / 2]; /* [dk/2] RoPE at pos */
    if (c->rope) attn_rope_angles(dk, c->rope_theta, pos, cs, sn);
    attn_cache_write(c, state, x->in[IN_K], x->in[IN_V], pos, cs, sn);
    float q[ATTN_MAX_DIM], r[ATTN_MAX_DIM];   /* [dk] rotated query and probe */
    float o1[ATTN_MAX_DIM], o2[ATTN_MAX_DIM]; /* [dv] row accumulators */
    for (int h = 0; h < H; h++) {
        memcpy(q, x->in[IN_Q] + (size_t)h * dk, (size_t)dk * sizeof *q);
        if (c->rope) attn_rope_apply(dk, cs, sn, q);
        if (use_r) {
            memcpy(r, x->in[IN_R] + (size_t)h * dk, (size_t)dk * sizeof *r);
            if (c->rope) attn_rope_apply(dk, cs, sn, r);
        }
        attn_row a = {.o1 = o1, .o2 = use_r ? o2 : NULL};
        attn_row_reset(&a, dv);
        if (c->arith == MIXER_ARITH_TF32)
            attn_row_naive(c, state, h, q, use_r ? r : NULL, pos, &a);
        else
            attn_row_all_tiles(c, state, h, q, use_r ? r : NULL, pos, &a);
        attn_out s = attn_row_finish(c, &a, use_r, o + (size_t)h * dv);
        if (probes) attn_probes_head(c, state, h, q, use_r ? r : NULL, pos, &a, &s, probes);
    }
}

void attn_prefill(const mixer_cfg *c, float *state, const mixer_seq *x, int pos0, float *o,
                  int use_r) {
    const int H = c->H, dk = c->dk, dv = c->dv, C = c->chunk;
    /* tokens that fit in the cache; the rest answer zeros, as step does */
    int T = x->T, Tv = pos0 < 0 ? 0 : c->max_t - pos0 < T ? c->max_t - pos0 : T;
    if (Tv < 0) Tv = 0;
    if (Tv < T) memset(o + (size_t)Tv * H * dv, 0, (size_t)(T - Tv) * H * dv * sizeof *o);
    if (Tv == 0) return;

    float *Q = malloc((size_t)C * dk * sizeof *Q);   /* [C, dk] rotated queries of a tile */
    float *R = malloc((size_t)C * dk * sizeof *R);   /* [C, dk] rotated probes */
    float *O1 = malloc((size_t)C * dv * sizeof *O1); /* [C, dv] row accumulators */
    float *O2 = malloc((size_t)C * dv * sizeof *O2); /* [C, dv] */
    float *CS = malloc((size_t)C * (dk / 2 + 1) * 2 * sizeof *CS); /* [C, 2, dk/2] RoPE tables */
    if (!Q || !R || !O1 || !O2 || !CS) {
        /* out of memory: the same numbers one token at a time */
        free(Q), free(R), free(O1), free(O2), free(CS);
        mixer_seq xs = *x;
        xs.T = Tv;
        for (int t = 0; t < Tv; t++) {
            mixer_tok xt = mixer_seq_at(c, &xs, t);
            attn_step(c, state, &xt, pos0 + t, o + (size_t)t * H * dv, NULL, use_r);
        }
        return;
    }
    attn_row rows[ATTN_MAX_TILE];
    const size_t half = (size_t)dk / 2 + 1; /* table stride (dk may be odd without rope) */

    for (int t0 = 0; t0 < Tv; t0 += C) {
        int nq = Tv - t0 < C ? Tv - t0 : C;
        /* the tile's cache slots first: its rows see each other's keys */
        for (int i = 0; i < nq; i++) {
            float *cs = CS + (size_t)i * 2 * half, *sn = cs + half;
            if (c->rope) attn_rope_angles(dk, c->rope_theta, pos0 + t0 + i, cs, sn);
            mixer_tok xt = mixer_seq_at(c, x, t0 + i);
            attn_cache_write(c, state, xt.in[IN_K], xt.in[IN_V], pos0 + t0 + i, cs, sn);
        }
        for (int h = 0; h < H; h++) {
            for (int i = 0; i < nq; i++) {
                const float *cs = CS + (size_t)i * 2 * half, *sn = cs + half;
                mixer_tok xt = mixer_seq_at(c, x, t0 + i);
                float *qi = Q + (size_t)i * dk, *ri = R + (size_t)i * dk;
                memcpy(qi, xt.in[IN_Q] + (size_t)h * dk, (size_t)dk * sizeof *qi);
                if (c->rope) attn_rope_apply(dk, cs, sn, qi);
                if (use_r) {
                    memcpy(ri, xt.in[IN_R] + (size_t)h * dk, (size_t)dk * sizeof *ri);
                    if (c->rope) attn_rope_apply(dk, cs, sn, ri);
                }
                rows[i] =
                    (attn_row){.o1 = O1 + (size_t)i * dv, .o2 = use_r ? O2 + (size_t)i * dv : NULL};
                attn_row_reset(&rows[i], dv);
            }
            /* key tiles from the first key the tile's first row sees to the last row's own key;
             * each row folds its visible part of each tile (causal mask and window) */
            int pfirst = pos0 + t0, plast = pos0 + t0 + nq - 1;
            if (c->arith == MIXER_ARITH_TF32) /* the naive row, as step computes it */
                for (int i = 0; i < nq; i++)
                    attn_row_naive(c, state, h, Q + (size_t)i * dk,
                                   use_r ? R + (size_t)i * dk : NULL, pfirst + i, &rows[i]);
            else
                for (int J = attn_first_key(c, pfirst) / C * C; J <= plast; J += C) {
                    for (int i = 0; i < nq; i++) {
                        int p = pfirst + i, f = attn_first_key(c, p);
                        int j0 = J > f ? J : f, j1 = J + C < p + 1 ? J + C : p + 1;
                        if (j0 < j1)
                            attn_row_fold(c, state, h, Q + (size_t)i * dk,
                                          use_r ? R + (size_t)i * dk : NULL, j0, j1, &rows[i]);
                    }
                }
            for (int i = 0; i < nq; i++)
                attn_row_finish(c, &rows[i], use_r, o + ((size_t)(t0 + i) * H + h) * dv);
        }
    }
    free(Q), free(R), free(O1), free(O2), free(CS);
}

int parallax_effective_weights(const mixer_cfg *c, const float *state, const float *q,
                               const float *r, int pos, int h, float *p, float *a) {
    return parallax_effective_weights_from(c, state, q, r, pos, h, 0, p, a);
}

int parallax_effective_weights_from(const mixer_cfg *c, const float *state, const float *q,
                                    const float *r, int pos, int h, int j0, float *p, float *a) {
    const int dk = c->dk;
    if (pos < 0 || pos >= c->max_t || h < 0 || h >= c->H || j0 < 0 || j0 > pos) return -1;
    float cs[ATTN_MAX_DIM / 2], sn[ATTN_MAX_DIM / 2];
    float qr[ATTN_MAX_DIM], rr[ATTN_MAX_DIM]; /* [dk] rotated query and probe */
    memcpy(qr, q, (size_t)dk * sizeof *qr);
    if (r) memcpy(rr, r, (size_t)dk * sizeof *rr);
    if (c->rope) {
        attn_rope_angles(dk, c->rope_theta, pos, cs, sn);
        attn_rope_apply(dk, cs, sn, qr);
        if (r) attn_rope_apply(dk, cs, sn, rr);
    }
    /* the normaliser and ubar in one streaming pass over the visible keys (each product once:
     * the views call this for every token), then the weights of keys j0..pos */
    int first = attn_first_key(c, pos);
    double m = -INFINITY, d1 = 0.0, d2 = 0.0;
    for (int j = first; j <= pos; j++) {
        const float *k = state + attn_k_offset(c, j, h);
        const double sj = (double)c->scale * attn_dot(qr, k, dk);
        if (sj > m) {
            const double a = exp(m - sj); /* 0 at the first key */
            d1 *= a, d2 *= a, m = sj;
        }
        const double w = exp(sj - m);
        d1 += w;
        if (r) d2 += w * attn_dot(rr, k, dk);
    }
    double ubar = d2 / d1;
    for (int j = j0; j <= pos; j++) {
        double pj = 0.0, aj = 0.0;
        if (j >= first) {
            const float *k = state + attn_k_offset(c, j, h);
            pj = exp((double)c->scale * attn_dot(qr, k, dk) - m) / d1;
            aj = r ? pj * (1.0 + ubar - attn_dot(rr, k, dk)) : pj;
        }
        if (p) p[j - j0] = (float)pj;
        if (a) a[j - j0] = (float)aj;
    }
    return 0;
}
