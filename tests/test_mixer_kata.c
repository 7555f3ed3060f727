/* test_mixer_kata.c: KATA (spec/kata-parallax.md Part A, C.2): every form against every other and
 * against a double-precision brute force written here, the cone identities, the probes, and the
 * capacity arithmetic of §A.10. No flash-linear-attention reference exists for KATA. */
#include "testutil.h"

#include "core/opts.h"
#include "mixers/kata.h"

typedef struct vcase {
    const char *variant;
    int groups, dk, dv;
} vcase;

/* m1 at dk = 12 has D = 78 features (more than one step block of 64) and dv = 40 (two value
 * tiles of 32); the delta case at the same size covers the delta step's tiling. */
static const vcase CASES[] = {
    {"m1", 1, 12, 40},     {"mg", 2, 16, 8},      {"mg", 4, 16, 8},     {"sigma", 2, 16, 8},
    {"sigma", 4, 16, 8},   {"delta", 1, 16, 8},   {"delta", 2, 16, 8},  {"delta", 1, 12, 40},
    {"orthant", 1, 16, 8}, {"lorentz", 1, 16, 8}, {"linear", 1, 16, 8},
};
#define NCASES ((int)(sizeof CASES / sizeof CASES[0]))
#define H      2

static void cfg_make(const vcase *vc, int chunk, mixer_cfg *c) {
    char a[3][64];
    char *argv[3] = {a[0], a[1], a[2]};
    snprintf(a[0], sizeof a[0], "variant=%s", vc->variant);
    snprintf(a[1], sizeof a[1], "groups=%d", vc->groups);
    snprintf(a[2], sizeof a[2], "chunk=%d", chunk);
    opts o;
    err e = {{0}};
    assert_int_equal(opts_parse(&o, 3, argv, &e), 0);
    if (mixer_configure(&mixer_kata, c, H, vc->dk, vc->dv, &o, &e))
        fail_msg("configure %s: %s", vc->variant, e.msg);
    assert_int_equal(opts_check_unused(&o, &e), 0);
    opts_free(&o);
}

/* ---------------------------------------------------------------------------------------------
 * Test data: q, k [T, H, dk], v [T, H, dv], beta [T, H]. Linear attention has no cone, so its
 * q and k share a positive mean to keep the normalised readout's denominators away from 0. Delta
 * keys are psi-normalised (|psi(k)| = 1) and beta lies in (0.1, 0.9), as DeltaKATA assumes. */

typedef struct data {
    int T;
    float *q, *k, *v, *beta;
} data;

static void data_make(const mixer_cfg *c, int T, uint64_t seed, data *d) {
    trng r = {seed * 0x9E3779B97F4A7C15ull + 1};
    size_t nq = (size_t)T * H * c->dk, nv = (size_t)T * H * c->dv;
    d->T = T;
    d->q = malloc((nq + 1) * sizeof(float)), d->k = malloc((nq + 1) * sizeof(float));
    d->v = malloc((nv + 1) * sizeof(float)), d->beta = malloc(((size_t)T * H + 1) * sizeof(float));
    assert_true(d->q && d->k && d->v && d->beta);
    trng_fill(&r, d->q, nq, 0.5), trng_fill(&r, d->k, nq, 0.5), trng_fill(&r, d->v, nv, 1.0);
    for (size_t i = 0; i < (size_t)T * H; i++) d->beta[i] = (float)(0.5 + 0.4 * trng_uniform(&r));
    if (c->variant == KATA_LINEAR)
        for (size_t i = 0; i < nq; i++) d->q[i] += 0.5f, d->k[i] += 0.5f;
    if (c->variant == KATA_DELTA)
        for (size_t i = 0; i < (size_t)T * H; i++) {
            kata_psi_normalise(c->dk, c->groups, d->k + i * c->dk);
            kata_psi_normalise(c->dk, c->groups, d->q + i * c->dk);
        }
}

static void data_free(data *d) {
    free(d->q), free(d->k), free(d->v), free(d->beta);
}

static mixer_seq data_seq(const data *d, int t0, int T, const mixer_cfg *c) {
    mixer_seq s = {.T = T};
    s.in[IN_Q] = d->q + (size_t)t0 * H * c->dk;
    s.in[IN_K] = d->k + (size_t)t0 * H * c->dk;
    s.in[IN_V] = d->v + (size_t)t0 * H * c->dv;
    s.in[IN_BETA] = d->beta + (size_t)t0 * H;
    return s;
}

/* ---------------------------------------------------------------------------------------------
 * Independent double-precision reference: kappa from its definition (§A.3, §A.4), then the
 * quadratic form (normalised) or the UT closed form (delta) over all tokens from a zero state. */

static double ref_dot(const float *a, const float *b, int n, double s) {
    double acc = 0.0;
    for (int i = 0; i < n; i++) acc += (double)a[i] * (double)b[i];
    return s * acc;
}

static double ref_kappa(const mixer_cfg *c, const float *q, const float *k) {
    int d = c->dk, M = c->groups, E = d / M;
    double s = c->scale, acc = 0.0;
    switch (c->variant) {
    case KATA_M1:
        return pow(ref_dot(q, k, d, s), 2);
    case KATA_MG:
    case KATA_DELTA:
        for (int m = 0; m < M; m++) acc += pow(ref_dot(q + m * E, k + m * E, E, s), 2);
        return acc;
    case KATA_SIGMA:
        for (int m = 0; m < M; m++)
            for (int n = 0; n < M; n++) acc += pow(ref_dot(q + m * E, k + n * E, E, s), 2);
        return acc;
    case KATA_ORTHANT:
        for (int i = 0; i < d; i++) {
            double a = sqrt(s) * q[i], b = sqrt(s) * k[i];
            acc += (fmax(a, 0.0) + 1e-6) * (fmax(b, 0.0) + 1e-6);
        }
        return acc;
    case KATA_LORENTZ: {
        double qq = ref_dot(q, q, d - 1, s), kk = ref_dot(k, k, d - 1, s);
        double a = s * q[d - 1] * q[d - 1], b = s * k[d - 1] * k[d - 1];
        return ref_dot(q, k, d - 1, s) + sqrt(qq * kk) * (1.0 + a) * (1.0 + b);
    }
    case KATA_LINEAR:
        return ref_dot(q, k, d, s);
    }
    fail_msg("unknown variant");
    return 0.0;
}

/* o [T, H, dv] for all T tokens of the data from a zero state. */
static void ref_forward(const mixer_cfg *c, const data *x, double *o) {
    int T = x->T, dk = c->dk, dv = c->dv;
    double *U = malloc((size_t)T * dv * sizeof *U);    /* [T, dv] */
    double *Akk = malloc((size_t)T * T * sizeof *Akk); /* [T, T] kappa(k_t, k_s) */
    double *Aqk = malloc((size_t)T * T * sizeof *Aqk); /* [T, T] kappa(q_t, k_s) */
    assert_true(U && Akk && Aqk);
    for (int h = 0; h < H; h++) {
#define Q(t) (x->q + ((size_t)(t)*H + h) * dk)
#define K(t) (x->k + ((size_t)(t)*H + h) * dk)
#define V(t) (x->v + ((size_t)(t)*H + h) * dv)
        for (int t = 0; t < T; t++)
            for (int s = 0; s <= t; s++) {
                Akk[t * T + s] = ref_kappa(c, K(t), K(s));
                Aqk[t * T + s] = ref_kappa(c, Q(t), K(s));
            }
        for (int t = 0; t < T; t++)
            for (int j = 0; j < dv; j++) {
                if (c->variant != KATA_DELTA) {
                    U[t * dv + j] = V(t)[j];
                    continue;
                }
                /* (I + diag(beta) tril(Akk, -1)) U = diag(beta) V, row by row */
                double u = V(t)[j];
                for (int s = 0; s < t; s++) u -= Akk[t * T + s] * U[s * dv + j];
                U[t * dv + j] = x->beta[t * H + h] * u;
            }
        for (int t = 0; t < T; t++) {
            double *ot = o + ((size_t)t * H + h) * dv, den = 0.0;
            for (int j = 0; j < dv; j++) ot[j] = 0.0;
            for (int s = 0; s <= t; s++) {
                for (int j = 0; j < dv; j++) ot[j] += Aqk[t * T + s] * U[s * dv + j];
                den += Aqk[t * T + s];
            }
            if (c->variant != KATA_DELTA)
                for (int j = 0; j < dv; j++) ot[j] /= fmax(den, c->eps);
        }
#undef Q
#undef K
#undef V
    }
    free(U), free(Akk), free(Aqk);
}

static float *state_new(const mixer_cfg *c) {
    size_t n = mixer_kata.state_floats(c);
    float *s = malloc(n * sizeof *s);
    assert_non_null(s);
    mixer_kata.state_init(c, s);
    return s;
}

static float *state_dup(const mixer_cfg *c, const float *s) {
    size_t n = mixer_kata.state_floats(c);
    float *d = malloc(n * sizeof *d);
    assert_non_null(d);
    memcpy(d, s, n * sizeof *d);
    return d;
}

/* A non-zero initial state not reachable from tokens: S random, z the features of a few random
 * keys (so that z.psi(q) >= 0 for the cone maps and the normalised readout stays well posed). */
static float *state_random(const mixer_cfg *c, uint64_t seed) {
    float *s = state_new(c);
    kata_fmap f = kata_cfg_fmap(c);
    size_t D = kata_fmap_dim(&f);
    trng r = {seed};
    trng_fill(&r, s, (size_t)H * D * c->dv, 0.3);
    float *psi = malloc(D * sizeof *psi), key[64];
    assert_non_null(psi);
    for (int h = 0; h < H; h++)
        for (int n = 0; n < 5; n++) {
            trng_fill(&r, key, (size_t)c->dk, 0.5);
            if (c->variant == KATA_LINEAR)
                for (int i = 0; i < c->dk; i++) key[i] += 0.5f;
            kata_fmap_apply(&f, key, psi);
            for (size_t i = 0; i < D; i++) s[(size_t)H * D * c->dv + (size_t)h * D + i] += psi[i];
        }
    free(psi);
    return s;
}

/* ---------------------------------------------------------------------------------------------
 * Feature maps and their identities (§A.3, §A.4, C.2) */

static void test_feature_dims(void **st) {
    (void)st;
    static const struct {
        const char *v;
        int g;
        size_t D;
    } want[] = {{"m1", 1, 2080},    {"mg", 2, 1056},  {"mg", 4, 544},     {"sigma", 2, 528},
                {"sigma", 4, 136},  {"sigma", 8, 36}, {"delta", 1, 2080}, {"orthant", 1, 64},
                {"lorentz", 1, 64}, {"linear", 1, 64}};
    for (size_t i = 0; i < sizeof want / sizeof want[0]; i++) {
        vcase vc = {want[i].v, want[i].g, 64, 64};
        mixer_cfg c;
        cfg_make(&vc, 32, &c);
        kata_fmap f = kata_cfg_fmap(&c);
        assert_int_equal(kata_fmap_dim(&f), want[i].D);
        assert_int_equal(mixer_kata.state_floats(&c), (size_t)H * want[i].D * 65);
    }
}

static void test_svec(void **st) {
    (void)st;
    enum { P = 7 };
    trng r = {11};
    float X[P * P], Y[P * P], sx[P * (P + 1) / 2], sy[P * (P + 1) / 2], back[P * P];
    for (int i = 0; i < P; i++)
        for (int j = 0; j <= i; j++) {
            X[i * P + j] = X[j * P + i] = (float)trng_normal(&r);
            Y[i * P + j] = Y[j * P + i] = (float)trng_normal(&r);
        }
    assert_int_equal(kata_svec_dim(P), P * (P + 1) / 2);
    kata_svec(P, X, sx), kata_svec(P, Y, sy);
    double fro = 0.0, sv = 0.0;
    for (int i = 0; i < P * P; i++) fro += (double)X[i] * Y[i];
    for (int i = 0; i < P * (P + 1) / 2; i++) sv += (double)sx[i] * sy[i];
    assert_true(fabs(sv - fro) <= 1e-5 * fabs(fro));
    /* positions: diagonal first, then the strictly-lower entries row-major, sqrt(2) off-diagonal */
    for (int i = 0; i < P; i++)
        for (int j = 0; j <= i; j++) {
            float want = (i == j ? 1.0f : sqrtf(2.0f)) * X[i * P + j];
            assert_true(fabsf(sx[kata_svec_index(P, i, j)] - want) <= 1e-6f * (1 + fabsf(want)));
            assert_int_equal(kata_svec_index(P, i, j), kata_svec_index(P, j, i));
        }
    assert_int_equal(kata_svec_index(P, 0, 0), 0);
    assert_int_equal(kata_svec_index(P, 1, 0), P);
    assert_int_equal(kata_svec_index(P, P - 1, P - 2), P * (P + 1) / 2 - 1);
    kata_smat(P, sx, back);
    assert_true(rel_err(back, X, P * P) < 1e-6);
}

/* <psi(x), psi(y)> = kappa(x, y) = the definition, for every variant; (q.k)^2 for M1; psi streamed
 * in arbitrary windows equals the whole vector (step relies on it). */
static void test_feature_kernel(void **st) {
    (void)st;
    double worst = 0.0;
    for (int ci = 0; ci < NCASES; ci++) {
        mixer_cfg c;
        cfg_make(&CASES[ci], 32, &c);
        kata_fmap f = kata_cfg_fmap(&c);
        size_t D = kata_fmap_dim(&f);
        float *px = malloc(D * sizeof(float)), *py = malloc(D * sizeof(float));
        float *win = malloc(D * sizeof(float)), x[64], y[64];
        assert_true(px && py && win);
        trng r = {100 + (uint64_t)ci};
        for (int rep = 0; rep < 5; rep++) {
            trng_fill(&r, x, (size_t)c.dk, 1.0), trng_fill(&r, y, (size_t)c.dk, 1.0);
            kata_fmap_apply(&f, x, px), kata_fmap_apply(&f, y, py);
            double ip = 0.0, ref = ref_kappa(&c, x, y), ker = kata_fmap_kernel(&f, x, y);
            for (size_t i = 0; i < D; i++) ip += (double)px[i] * py[i];
            /* errors relative to the Cauchy-Schwarz scale sqrt(kappa(x,x) kappa(y,y)) >= |kappa| */
            double sc = sqrt(ref_kappa(&c, x, x) * ref_kappa(&c, y, y));
            double e1 = fabs(ip - ref) / sc, e2 = fabs(ker - ref) / sc;
            worst = fmax(worst, fmax(e1, e2));
            assert_true(e1 < 1e-5 && e2 < 1e-5);
            if (c.variant == KATA_M1) {
                double qk = ref_dot(x, y, c.dk, 1.0);
                assert_true(fabs(ker - qk * qk) <= 1e-6 * sc);
            }
            /* windows that start mid-group and cross group boundaries */
            for (size_t r0 = 0; r0 < D; r0 += 37) {
                size_t n = D - r0 < 53 ? D - r0 : 53;
                kata_fmap_range(&f, x, r0, n, win);
                for (size_t i = 0; i < n; i++) assert_true(win[i] == px[r0 + i]);
            }
        }
        free(px), free(py), free(win);
    }
    printf("  feature kernel: max rel err %.2e\n", worst);
}

/* |psi(x)| = 1 after psi-normalisation (the unit lifted keys DeltaKATA assumes). */
static void test_psi_normalise(void **st) {
    (void)st;
    for (int g = 1; g <= 4; g *= 2) {
        kata_fmap f = {KATA_FEAT_PSD_CONCAT, 16, g, 1.0f};
        float x[16], psi[136];
        trng r = {(uint64_t)g};
        trng_fill(&r, x, 16, 2.0);
        kata_psi_normalise(16, g, x);
        kata_fmap_apply(&f, x, psi);
        double n2 = 0.0;
        for (size_t i = 0; i < kata_fmap_dim(&f); i++) n2 += (double)psi[i] * psi[i];
        assert_true(fabs(n2 - 1.0) < 1e-5);
        assert_true(fabs(kata_fmap_kernel(&f, x, x) - 1.0) < 1e-5);
    }
}

/* Self-dual cones give nonnegative Grams; the linear map does not (so the check can fail). */
static void test_gram_nonneg(void **st) {
    (void)st;
    enum { N = 40, D = 8 };
    float x[N * D], G[N * N];
    trng r = {5};
    trng_fill(&r, x, N * D, 1.0);
    const kata_feat_kind kinds[] = {KATA_FEAT_LORENTZ, KATA_FEAT_ORTHANT, KATA_FEAT_PSD_CONCAT,
                                    KATA_FEAT_PSD_SUM, KATA_FEAT_LINEAR};
    for (size_t ki = 0; ki < sizeof kinds / sizeof kinds[0]; ki++) {
        int g = kinds[ki] == KATA_FEAT_PSD_SUM ? 2 : 1;
        kata_fmap f = {kinds[ki], D, g, 1.0f};
        kata_gram(&f, N, x, 0, G);
        float mn = G[0];
        for (int i = 0; i < N * N; i++) mn = fminf(mn, G[i]);
        if (kinds[ki] == KATA_FEAT_LINEAR)
            assert_true(mn < -0.5f);
        else
            assert_true(mn >= 0.0f);
        /* the normalised Gram: unit diagonal, and its largest off-diagonal |c| is what
         * kata_max_interference reports */
        kata_gram(&f, N, x, 1, G);
        double mx = 0.0;
        for (int i = 0; i < N; i++) {
            assert_true(G[i * N + i] == 1.0f);
            for (int j = 0; j < N; j++)
                if (i != j) mx = fmax(mx, fabs(G[i * N + j]));
        }
        assert_true(mx <= 1.0 + 1e-6);
        assert_true(fabs(kata_max_interference(&f, N, x) - mx) < 1e-6);
    }
    /* a Lorentz element has cone coordinate >= |rest|: check on features directly */
    kata_fmap f = {KATA_FEAT_LORENTZ, D, 1, 1.0f};
    for (int i = 0; i < N; i++) {
        float psi[D];
        kata_fmap_apply(&f, x + i * D, psi);
        double rest = 0.0;
        for (int j = 0; j < D - 1; j++) rest += (double)psi[j] * psi[j];
        assert_true(psi[D - 1] >= sqrt(rest) * (1 - 1e-6));
    }
}

/* ---------------------------------------------------------------------------------------------
 * Forms: parallel (quadratic) == recurrent (step) == chunked == scan == brute force. The state
 * entering the measured tokens comes from NH warm-up tokens run by step, and the brute force
 * covers warm-up + tokens from zero, so the initial state is non-zero and checked too. */

static void test_forms_agree(void **st) {
    (void)st;
    enum { NH = 5, T = 200 };
    double worst[5] = {0};
    const char *names[5] = {"step", "quadratic", "chunked", "scan", "final state (chunked, scan)"};
    for (int ci = 0; ci < NCASES; ci++) {
        mixer_cfg c;
        cfg_make(&CASES[ci], 16, &c);
        data d;
        data_make(&c, NH + T, 1000 + (uint64_t)ci, &d);
        size_t no = (size_t)T * H * c.dv, ntot = (size_t)(NH + T) * H * c.dv;
        size_t ns = mixer_kata.state_floats(&c);
        double *ref = malloc(ntot * sizeof *ref);
        float *o[4], *warm = malloc(ntot * sizeof(float));
        assert_true(ref && warm);
        for (int i = 0; i < 4; i++) assert_non_null(o[i] = malloc(no * sizeof(float)));
        ref_forward(&c, &d, ref);
        const double *ref_t = ref + (size_t)NH * H * c.dv;

        float *s0 = state_new(&c);
        mixer_seq hist = data_seq(&d, 0, NH, &c), seq = data_seq(&d, NH, T, &c);
        mixer_run_steps(&mixer_kata, &c, s0, &hist, 0, warm, NULL);
        float *s_step = state_dup(&c, s0);
        mixer_run_steps(&mixer_kata, &c, s_step, &seq, NH, o[0], NULL);
        assert_int_equal(kata_forward_quadratic(&c, s0, &seq, o[1]), 0);
        for (int chunk = 16; chunk <= 64; chunk *= 2) {
            c.chunk = chunk;
            float *s_chunk = state_dup(&c, s0), *s_scan = state_dup(&c, s0);
            assert_int_equal(kata_forward_chunked(&c, s_chunk, &seq, o[2]), 0);
            assert_int_equal(kata_forward_scan(&c, s_scan, &seq, o[3]), 0);
            for (int i = 0; i < 4; i++) {
                double e = rel_err_d(o[i], ref_t, no);
                worst[i] = fmax(worst[i], e);
                if (e >= 1e-5)
                    fail_msg("%s g=%d chunk=%d: %s vs brute force %.2e", CASES[ci].variant,
                             CASES[ci].groups, chunk, names[i], e);
            }
            double e1 = rel_err(s_chunk, s_step, ns), e2 = rel_err(s_scan, s_step, ns);
            worst[4] = fmax(worst[4], fmax(e1, e2));
            assert_true(e1 < 1e-5 && e2 < 1e-5);
            free(s_chunk), free(s_scan);
        }
        free(s0), free(s_step), free(ref), free(warm);
        for (int i = 0; i < 4; i++) free(o[i]);
        data_free(&d);
    }
    for (int i = 0; i < 4; i++)
        printf("  %s vs brute force (double): max rel err %.2e\n", names[i], worst[i]);
    printf("  %s vs step: max rel err %.2e\n", names[4], worst[4]);
}

/* prefill == repeated step, T in {1, 63, 64, 65, 200} and 300 (more chunks than one scan block
 * holds at chunk 16), every chunk size, from a random non-zero state; outputs and final state. */
static void test_prefill_equals_steps(void **st) {
    (void)st;
    static const int Ts[] = {1, 63, 64, 65, 200, 300};
    double worst_o = 0.0, worst_s = 0.0;
    for (int ci = 0; ci < NCASES; ci++)
        for (int chunk = 16; chunk <= 64; chunk *= 2)
            for (size_t ti = 0; ti < sizeof Ts / sizeof Ts[0]; ti++) {
                int T = Ts[ti];
                if (T == 300 && chunk != 16) continue;
                mixer_cfg c;
                cfg_make(&CASES[ci], chunk, &c);
                data d;
                data_make(&c, T, 77 + (uint64_t)ci * 31 + (uint64_t)T, &d);
                mixer_seq s = data_seq(&d, 0, T, &c);
                float *a = state_random(&c, 9 + (uint64_t)ci), *b = state_dup(&c, a);
                size_t no = (size_t)T * H * c.dv, ns = mixer_kata.state_floats(&c);
                float *oa = malloc(no * sizeof(float)), *ob = malloc(no * sizeof(float));
                assert_true(oa && ob);
                mixer_run_steps(&mixer_kata, &c, a, &s, 0, oa, NULL);
                mixer_kata.prefill(&c, b, &s, 0, ob);
                double eo = rel_err(ob, oa, no), es = rel_err(b, a, ns);
                worst_o = fmax(worst_o, eo), worst_s = fmax(worst_s, es);
                if (eo >= 1e-5 || es >= 1e-5)
                    fail_msg("%s g=%d chunk=%d T=%d: out %.2e state %.2e", CASES[ci].variant,
                             CASES[ci].groups, chunk, T, eo, es);
                free(a), free(b), free(oa), free(ob);
                data_free(&d);
            }
    printf("  prefill vs steps: max rel err out %.2e, state %.2e\n", worst_o, worst_s);
}

/* The quadratic form, run from zero, is the brute force for T = 1 too; and the sequence forms do
 * nothing for T = 0. */
static void test_forms_edge(void **st) {
    (void)st;
    mixer_cfg c;
    cfg_make(&CASES[1], 16, &c);
    data d;
    data_make(&c, 1, 3, &d);
    mixer_seq s = data_seq(&d, 0, 1, &c);
    float o[H * 8];
    assert_int_equal(kata_forward_quadratic(&c, NULL, &s, o), 0);
    /* one token from zero: o = v exactly (the gate is 1) */
    assert_true(rel_err(o, d.v, H * 8) < 1e-6);
    float *st0 = state_new(&c);
    s.T = 0;
    assert_int_equal(kata_forward_scan(&c, st0, &s, o), 0);
    for (size_t i = 0; i < mixer_kata.state_floats(&c); i++) assert_true(st0[i] == 0.0f);
    free(st0);
    data_free(&d);
}

/* ---------------------------------------------------------------------------------------------
 * The convex gate (§A.5): o = (1 - g) o_hat + g v with g in [0, 1] for the cone maps; g = 1 and
 * o = v on the first token; the dilution z_{t-1}.psi(q) ~ (t - 1)/p for isotropic unit keys. */

static void test_gate_identity(void **st) {
    (void)st;
    enum { T = 120 };
    double worst = 0.0;
    for (int ci = 0; ci < NCASES; ci++) {
        mixer_cfg c;
        cfg_make(&CASES[ci], 32, &c);
        data d;
        data_make(&c, T, 500 + (uint64_t)ci, &d);
        mixer_seq s = data_seq(&d, 0, T, &c);
        size_t np = mixer_probe_floats(&mixer_kata, &c), dv = (size_t)c.dv;
        float *pr = malloc((size_t)T * np * sizeof(float)), *o = malloc(T * H * dv * sizeof(float));
        float *st0 = state_new(&c);
        assert_true(pr && o);
        mixer_run_steps(&mixer_kata, &c, st0, &s, 0, o, pr);
        size_t og = mixer_probe_offset(&mixer_kata, &c, mixer_probe_index(&mixer_kata, "g"));
        size_t oh = mixer_probe_offset(&mixer_kata, &c, mixer_probe_index(&mixer_kata, "o_hat"));
        size_t oe = mixer_probe_offset(&mixer_kata, &c, mixer_probe_index(&mixer_kata, "e_norm"));
        int cone = c.variant != KATA_LINEAR && c.variant != KATA_DELTA;
        double num = 0.0, den = 0.0;
        for (int t = 0; t < T; t++)
            for (int h = 0; h < H; h++) {
                const float *p = pr + (size_t)t * np, *ot = o + ((size_t)t * H + h) * dv;
                const float *v = d.v + ((size_t)t * H + h) * dv, *ohat = p + oh + h * dv;
                float g = p[og + h];
                if (c.variant == KATA_DELTA) {
                    /* o = o_hat + g e, so |o - o_hat| = |g| |e| */
                    double a = 0.0;
                    for (size_t j = 0; j < dv; j++) a += pow(ot[j] - ohat[j], 2);
                    double b = fabs(g) * p[oe + h], on = 0.0;
                    for (size_t j = 0; j < dv; j++) on += (double)ot[j] * ot[j];
                    /* the difference cancels, so its rounding scales with |o| */
                    if (fabs(sqrt(a) - b) > 1e-5 * (b + sqrt(on)))
                        fail_msg("delta t=%d: |o - o_hat| %.9g, |g| |e| %.9g, |o| %.3g", t, sqrt(a),
                                 b, sqrt(on));
                    continue;
                }
                if (cone) assert_true(g >= 0.0f && g <= 1.0f);
                if (t == 0) {
                    assert_true(fabsf(g - 1.0f) < 1e-6f);
                    assert_true(rel_err(ot, v, dv) < 1e-6);
                }
                for (size_t j = 0; j < dv; j++) {
                    double want = (1.0 - g) * ohat[j] + g * v[j];
                    num += pow(ot[j] - want, 2), den += want * want;
                }
            }
        if (den > 0) {
            worst = fmax(worst, sqrt(num / den));
            assert_true(sqrt(num / den) < 1e-5);
        }
        free(pr), free(o), free(st0);
        data_free(&d);
    }
    printf("  convex gate identity: max rel err %.2e\n", worst);
}

static void test_gate_dilution(void **st) {
    (void)st;
    enum { T = 400, P = 16 };
    vcase vc = {"m1", 1, P, 4};
    mixer_cfg c;
    cfg_make(&vc, 32, &c);
    data d;
    data_make(&c, T, 4242, &d);
    for (int i = 0; i < T * H; i++) { /* isotropic unit q and k */
        kata_psi_normalise(P, 1, d.q + i * P);
        kata_psi_normalise(P, 1, d.k + i * P);
    }
    mixer_seq s = data_seq(&d, 0, T, &c);
    size_t np = mixer_probe_floats(&mixer_kata, &c);
    float *pr = malloc((size_t)T * np * sizeof(float)), *o = malloc((size_t)T * H * 4 * 4);
    float *st0 = state_new(&c);
    assert_true(pr && o);
    mixer_run_steps(&mixer_kata, &c, st0, &s, 0, o, pr);
    size_t od = mixer_probe_offset(&mixer_kata, &c, mixer_probe_index(&mixer_kata, "den"));
    double acc = 0.0, n = 0.0;
    for (int t = 100; t < T; t++)
        for (int h = 0; h < H; h++) acc += pr[(size_t)t * np + od + h] / ((double)t / P), n += 1;
    printf("  dilution: mean z_{t-1}.psi(q) / ((t-1)/p) = %.3f (expected 1)\n", acc / n);
    assert_true(fabs(acc / n - 1.0) < 0.1);
    free(pr), free(o), free(st0);
    data_free(&d);
}

/* ---------------------------------------------------------------------------------------------
 * DeltaKATA (§A.9): the UT closed form == the recurrence, against an explicit-feature recurrence in
 * double written here (svec built from its definition), from zero and from a non-zero state. */

static void ref_svec(int E, int M, const float *x, double *out) {
    size_t r = 0;
    for (int m = 0; m < M; m++) {
        const float *xm = x + m * E;
        for (int i = 0; i < E; i++) out[r++] = (double)xm[i] * xm[i];
        for (int i = 1; i < E; i++)
            for (int j = 0; j < i; j++) out[r++] = sqrt(2.0) * xm[i] * xm[j];
    }
}

static void test_delta_ut(void **st) {
    (void)st;
    enum { T = 70 };
    for (int g = 1; g <= 2; g++) {
        vcase vc = {"delta", g, 8, 5};
        mixer_cfg c;
        cfg_make(&vc, 16, &c);
        kata_fmap f = kata_cfg_fmap(&c);
        size_t D = kata_fmap_dim(&f);
        int dv = c.dv, E = c.dk / g;
        data d;
        data_make(&c, T, 31 + (uint64_t)g, &d);
        mixer_seq s = data_seq(&d, 0, T, &c);
        for (int nz = 0; nz <= 1; nz++) {
            float *s0 = nz ? state_random(&c, 8) : state_new(&c), *s1 = state_dup(&c, s0);
            float *oq = malloc((size_t)T * H * dv * 4), *os = malloc((size_t)T * H * dv * 4);
            double *Sd = malloc(D * dv * sizeof(double)), *pk = malloc(D * sizeof(double));
            double *pq = malloc(D * sizeof(double)), *ref = malloc((size_t)T * H * dv * 8);
            assert_true(oq && os && Sd && pk && pq && ref);
            assert_int_equal(kata_forward_quadratic(&c, s0, &s, oq), 0);
            mixer_run_steps(&mixer_kata, &c, s1, &s, 0, os, NULL);
            for (int h = 0; h < H; h++) {
                for (size_t i = 0; i < D * dv; i++) Sd[i] = s0[(size_t)h * D * dv + i];
                for (int t = 0; t < T; t++) {
                    size_t th = (size_t)t * H + h;
                    ref_svec(E, g, d.k + th * c.dk, pk), ref_svec(E, g, d.q + th * c.dk, pq);
                    double beta = d.beta[th];
                    for (int j = 0; j < dv; j++) {
                        double e = d.v[th * dv + j];
                        for (size_t r = 0; r < D; r++) e -= Sd[r * dv + j] * pk[r];
                        for (size_t r = 0; r < D; r++) Sd[r * dv + j] += beta * pk[r] * e;
                        double oo = 0.0;
                        for (size_t r = 0; r < D; r++) oo += Sd[r * dv + j] * pq[r];
                        ref[th * dv + j] = oo;
                    }
                }
            }
            double eq = rel_err_d(oq, ref, (size_t)T * H * dv);
            double es = rel_err_d(os, ref, (size_t)T * H * dv);
            printf("  delta g=%d %s state: UT closed form %.2e, recurrence %.2e vs double\n", g,
                   nz ? "non-zero" : "zero", eq, es);
            assert_true(eq < 1e-5 && es < 1e-5);
            free(s0), free(s1), free(oq), free(os), free(Sd), free(pk), free(pq), free(ref);
        }
        data_free(&d);
    }
}

/* ---------------------------------------------------------------------------------------------
 * Probes against their definitions, token by token, from the state before and after each step. */

static void check_close(const char *what, double got, double want) {
    if (!(fabs(got - want) <= 1e-5 * fabs(want) + 1e-6))
        fail_msg("probe %s: got %.9g, want %.9g", what, got, want);
}

static void test_probes(void **st) {
    (void)st;
    enum { T = 6 };
    static const int which[] = {0, 3, 5, 7, 8, 9, 10}; /* m1 big, sigma, delta, delta big, ... */
    for (size_t wi = 0; wi < sizeof which / sizeof which[0]; wi++) {
        mixer_cfg c;
        cfg_make(&CASES[which[wi]], 32, &c);
        kata_fmap f = kata_cfg_fmap(&c);
        size_t D = kata_fmap_dim(&f), dv = (size_t)c.dv, np = mixer_probe_floats(&mixer_kata, &c);
        int delta = c.variant == KATA_DELTA;
        data d;
        data_make(&c, T, 900 + wi, &d);
        float *state = state_random(&c, 70 + wi), *prev = state_dup(&c, state);
        float *pq = malloc(D * 4), *pk = malloc(D * 4), *pr = malloc(np * 4),
              *o = malloc(H * dv * 4);
        assert_true(pq && pk && pr && o);
#define PROBE(name, h)                                                                             \
    pr[mixer_probe_offset(&mixer_kata, &c, mixer_probe_index(&mixer_kata, name)) + (h)]
        for (int t = 0; t < T; t++) {
            memcpy(prev, state, mixer_kata.state_floats(&c) * sizeof(float));
            mixer_seq s = data_seq(&d, t, 1, &c);
            mixer_tok x = mixer_seq_at(&c, &s, 0);
            mixer_kata.step(&c, state, &x, t, o, pr);
            for (int h = 0; h < H; h++) {
                const float *q = x.in[IN_Q] + h * c.dk, *k = x.in[IN_K] + h * c.dk;
                const float *v = x.in[IN_V] + h * dv, *oh = o + h * dv;
                const float *Sp = prev + h * D * dv, *S = state + h * D * dv;
                const float *zp = prev + H * D * dv + h * D, *z = state + H * D * dv + h * D;
                kata_fmap_apply(&f, q, pq), kata_fmap_apply(&f, k, pk);
                double den = 0, zq = 0, kap = 0, z2 = 0, s2 = 0, pk2 = 0, o2 = 0, e2 = 0, ea2 = 0;
                for (size_t r = 0; r < D; r++) {
                    den += (double)zp[r] * pq[r], zq += (double)z[r] * pq[r];
                    kap += (double)pq[r] * pk[r], z2 += (double)z[r] * z[r];
                    pk2 += (double)pk[r] * pk[r];
                }
                for (size_t i = 0; i < D * dv; i++) s2 += (double)S[i] * S[i];
                double beta = delta ? d.beta[t * H + h] : 1.0;
                double g = delta ? beta * kap : kap / fmax(zq, c.eps), ohat[64];
                for (size_t j = 0; j < dv; j++) {
                    double rq = 0, rk = 0, ak = 0;
                    for (size_t r = 0; r < D; r++) {
                        rq += (double)Sp[r * dv + j] * pq[r], rk += (double)Sp[r * dv + j] * pk[r];
                        ak += (double)S[r * dv + j] * pk[r];
                    }
                    ohat[j] = delta ? rq : rq / fmax(den, c.eps);
                    double e = delta ? v[j] - rk : v[j] - ohat[j];
                    e2 += e * e, ea2 += pow(v[j] - ak, 2), o2 += (double)oh[j] * oh[j];
                }
                double eo = rel_err_d(&PROBE("o_hat", h * dv), ohat, dv);
                if (eo >= 1e-5) fail_msg("probe o_hat: rel err %.2e", eo);
                check_close("g", PROBE("g", h), g);
                check_close("den", PROBE("den", h), den);
                check_close("kappa", PROBE("kappa", h), kap);
                check_close("o_norm", PROBE("o_norm", h), sqrt(o2));
                check_close("state_norm", PROBE("state_norm", h), sqrt(s2));
                check_close("z_norm", PROBE("z_norm", h), sqrt(z2));
                check_close("psi_k_norm", PROBE("psi_k_norm", h), sqrt(pk2));
                check_close("e_norm", PROBE("e_norm", h), sqrt(e2));
                if (delta) {
                    check_close("beta", PROBE("beta", h), beta);
                    check_close("e_after", PROBE("e_after", h), sqrt(ea2));
                    /* the delta write shrinks the residual by (1 - beta |psi(k)|^2) */
                    check_close("e_after/e", PROBE("e_after", h),
                                fabs(1.0 - beta * pk2) * PROBE("e_norm", h));
                } else {
                    assert_true(isnan(PROBE("beta", h)) && isnan(PROBE("e_after", h)));
                }
            }
        }
#undef PROBE
        free(state), free(prev), free(pq), free(pk), free(pr), free(o);
        data_free(&d);
    }
}

/* ---------------------------------------------------------------------------------------------
 * Capacity arithmetic (§A.10, C.3) */

static void test_capacity_numbers(void **st) {
    (void)st;
    assert_true(fabs(kata_welch(128, 64) - 0.0887) < 5e-5);
    assert_true(fabs(kata_welch(4096, 64) - 0.124) < 5e-4);
    assert_true(fabs(kata_welch(1e12, 64) - 0.125) < 1e-6);
    assert_true(kata_welch(64, 64) == 0.0 && kata_welch(10, 64) == 0.0);
    assert_true(fabs(kata_capacity_bound(64, 0.1) - 13.8) < 0.05);
    assert_true(fabs(kata_capacity_bound(64, 0.2) - 564) < 1.0);
    assert_true(fabs(kata_capacity_bound(128, 0.1) - 402) < 1.0);
    assert_true(fabs(kata_capacity_bound(32, 0.1) - 2.56) < 0.01);
    /* lifted floor: Welch in D = p(p+1)/2 -> sqrt(1/D) ~ sqrt(2)/p, above mu_W^2 -> 1/p */
    assert_true(fabs(kata_welch_lifted(1e12, 64) - sqrt(1.0 / 2080)) < 1e-6);
    assert_true(kata_psd_floor(1e12, 64) == kata_welch_lifted(1e12, 64));
    assert_true(kata_psd_floor(1e12, 64) > 1.0 / 64);
    /* below N = D the lifted bound is 0 and the squared Welch floor is the floor */
    assert_true(fabs(kata_psd_floor(100, 64) - 36.0 / (64.0 * 99.0)) < 1e-12);
    assert_true(fabs(kata_lorentz_wall(64, 0.25) - 3.0) < 1e-12);
    assert_true(kata_lorentz_wall(64, 0.5) == 126.0 && isinf(kata_lorentz_wall(64, 0.6)));
    assert_true(fabs(kata_interference_power_linear(101, 10) - 10.0) < 1e-12);
    assert_true(fabs(kata_interference_power_psd(101, 10) - 2.5) < 1e-12);
}

static void test_greedy_pack(void **st) {
    (void)st;
    enum { N = 1500, P = 16 };
    float *x = malloc((size_t)N * P * sizeof(float));
    int *keep = malloc(N * sizeof(int));
    assert_true(x && keep);
    trng r = {77};
    trng_fill(&r, x, (size_t)N * P, 1.0);
    /* PSD: every kept pair has (u.w)^2 <= eps, every rejected candidate conflicts with a kept
     * earlier one, and the count clears the existence bound (1/2)(1 - eps)^(-(p-1)/2) */
    kata_fmap f = {KATA_FEAT_PSD_CONCAT, P, 1, 1.0f};
    double eps = 0.3;
    int n = kata_greedy_pack(&f, N, x, eps, keep), cnt = 0;
    for (int i = 0; i < N; i++) {
        cnt += keep[i];
        int conflict = 0;
        for (int j = 0; j < i; j++) {
            if (!keep[j]) continue;
            double uw = ref_dot(x + i * P, x + j * P, P, 1.0);
            double c2 =
                uw * uw /
                (ref_dot(x + i * P, x + i * P, P, 1.0) * ref_dot(x + j * P, x + j * P, P, 1.0));
            if (c2 > eps) conflict = 1;
            if (keep[i]) assert_true(c2 <= eps + 1e-6);
        }
        if (!keep[i]) assert_true(conflict);
    }
    assert_int_equal(n, cnt);
    printf("  greedy PSD p=%d eps=%.1f: %d keys (bound %.1f)\n", P, eps, n,
           kata_capacity_bound(P, eps));
    assert_true(n >= kata_capacity_bound(P, eps));
    /* Lorentz: the Rankin wall 1 + 1/(1 - 2 eps) holds whatever the candidates. Boundary
     * elements (x_d = 0) in a plane (p = 3) have interference (1 + cos)/2, so at eps = 1/4 the
     * greedy code is 2 or 3 directions about 120 degrees apart, never more. */
    kata_fmap fl = {KATA_FEAT_LORENTZ, 3, 1, 1.0f};
    for (int i = 0; i < N; i++)
        x[i * 3 + 0] = x[i * P], x[i * 3 + 1] = x[i * P + 1], x[i * 3 + 2] = 0;
    int nl = kata_greedy_pack(&fl, N, x, 0.25, keep);
    printf("  greedy Lorentz eps=0.25: %d keys (wall %.0f)\n", nl, kata_lorentz_wall(3, 0.25));
    assert_true(nl >= 2 && nl <= kata_lorentz_wall(3, 0.25));
    free(x), free(keep);
}

/* Dense ReLU features share a common-mode interference -> 1/pi (§A.10). */
static void test_orthant_common_mode(void **st) {
    (void)st;
    enum { N = 30, P = 1024 };
    float *x = malloc((size_t)N * P * sizeof(float)), *G = malloc(N * N * sizeof(float));
    assert_true(x && G);
    trng r = {3};
    trng_fill(&r, x, (size_t)N * P, 1.0);
    kata_fmap f = {KATA_FEAT_ORTHANT, P, 1, 1.0f};
    kata_gram(&f, N, x, 1, G);
    double acc = 0.0;
    for (int i = 0; i < N; i++)
        for (int j = 0; j < N; j++)
            if (i != j) acc += G[i * N + j];
    acc /= N * (N - 1);
    printf("  orthant mean interference %.4f (1/pi = %.4f)\n", acc, 1.0 / M_PI);
    assert_true(fabs(acc - 1.0 / M_PI) < 0.02);
    free(x), free(G);
}

/* ---------------------------------------------------------------------------------------------
 * Configuration */

static int try_cfg(const char *a0, const char *a1, int dk) {
    char b0[64], b1[64];
    snprintf(b0, sizeof b0, "%s", a0), snprintf(b1, sizeof b1, "%s", a1);
    char *argv[2] = {b0, b1};
    opts o;
    err e = {{0}};
    mixer_cfg c;
    assert_int_equal(opts_parse(&o, a1[0] ? 2 : 1, argv, &e), 0);
    int rc = mixer_configure(&mixer_kata, &c, 2, dk, 8, &o, &e);
    opts_free(&o);
    if (rc) assert_true(strlen(e.msg) > 0);
    return rc;
}

static void test_configure(void **st) {
    (void)st;
    assert_ptr_equal(mixer_find("kata"), &mixer_kata);
    assert_int_equal(try_cfg("variant=m1", "", 16), 0);
    assert_int_equal(try_cfg("variant=sigma", "groups=4", 16), 0);
    assert_int_equal(try_cfg("variant=bogus", "", 16), -1);
    assert_int_equal(try_cfg("variant=m1", "groups=2", 16), -1);
    assert_int_equal(try_cfg("variant=mg", "groups=3", 16), -1);
    assert_int_equal(try_cfg("variant=mg", "groups=4", 18), -1); /* 4 does not divide 18 */
    assert_int_equal(try_cfg("variant=m1", "chunk=48", 16), -1);
    assert_int_equal(try_cfg("variant=m1", "scale=0", 16), -1);
    assert_int_equal(try_cfg("variant=m1", "eps=-1", 16), -1);
    assert_int_equal(try_cfg("variant=m1", "", 20000), -1); /* state far too large */

    vcase vc = {"mg", 2, 16, 8};
    mixer_cfg c;
    cfg_make(&vc, 32, &c);
    assert_int_equal(c.variant, KATA_MG);
    assert_int_equal(c.groups, 2);
    assert_true(c.scale == 1.0f && c.eps == 1e-6f);
    /* defaults when only the variant is given */
    char v[] = "variant=sigma", *argv[1] = {v};
    opts o;
    err e = {{0}};
    assert_int_equal(opts_parse(&o, 1, argv, &e), 0);
    assert_int_equal(mixer_configure(&mixer_kata, &c, 2, 16, 8, &o, &e), 0);
    opts_free(&o);
    assert_int_equal(c.groups, 2);
    assert_int_equal(c.chunk, 32);
    char dv_[] = "variant=delta", *argv2[1] = {dv_};
    assert_int_equal(opts_parse(&o, 1, argv2, &e), 0);
    assert_int_equal(mixer_configure(&mixer_kata, &c, 2, 16, 8, &o, &e), 0);
    opts_free(&o);
    assert_int_equal(c.groups, 1);
    assert_int_equal(c.chunk, 64);

    state_part parts[MIXER_MAX_STATE_PARTS];
    assert_int_equal(mixer_kata.state_parts(&c, parts), 2);
    assert_string_equal(parts[0].name, "S");
    assert_int_equal(parts[0].shape[1], 136);
    assert_int_equal(parts[0].shape[2], 8);
    assert_int_equal(parts[1].offset, (size_t)2 * 136 * 8);
    assert_int_equal(parts[1].shape[1], 136);
    assert_string_equal(kata_variant_name(KATA_LORENTZ), "lorentz");
    assert_null(kata_variant_name(KATA_NVARIANTS));
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_configure),     cmocka_unit_test(test_feature_dims),
        cmocka_unit_test(test_svec),          cmocka_unit_test(test_feature_kernel),
        cmocka_unit_test(test_psi_normalise), cmocka_unit_test(test_gram_nonneg),
        cmocka_unit_test(test_forms_agree),   cmocka_unit_test(test_prefill_equals_steps),
        cmocka_unit_test(test_forms_edge),    cmocka_unit_test(test_gate_identity),
        cmocka_unit_test(test_gate_dilution), cmocka_unit_test(test_delta_ut),
        cmocka_unit_test(test_probes),        cmocka_unit_test(test_capacity_numbers),
        cmocka_unit_test(test_greedy_pack),   cmocka_unit_test(test_orthant_common_mode),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
