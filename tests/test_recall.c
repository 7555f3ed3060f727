/* test_recall.c: the readback recorder (viz/recall.h). The tracker's incrementally advanced
 * readbacks S_t^T k_i against the direct double computation from the state, for every mixer with a
 * write form (gdn, deltanet, kaczmarz with tiny and large keys, mamba2), over 600 tokens so keys
 * leave the window; its check catching a write form that does not match the step (a missing
 * alpha); a restart from the trace after a reset; the float product of the fallback (GLA, the
 * stateless recall_record) against double. */
#include "testutil.h"

#include "core/trace.h"
#include "mixers/mixer.h"
#include "viz/recall.h"

#define NH  2
#define NDK 16
#define NDV 8
#define NT  600

/* Largest differences seen, printed at the end. */
static double max_row, max_val, max_prod;

static void track(double *m, double v) {
    if (v > *m) *m = v;
}

/* How the keys are drawn. */
typedef enum { KEYS_UNIT, KEYS_TINY, KEYS_LARGE, KEYS_NORMAL } keys_kind;

/* One random stream: q, k [NT][NH][NDK], v [NT][NH][NDV], g, b [NT][NH] (b: beta, or eta for
 * kaczmarz). */
typedef struct stream {
    float *q, *k, *v, *g, *b;
} stream;

static stream stream_make(keys_kind kind, uint64_t seed) {
    stream s;
    trng r = {seed * 0x9E3779B97F4A7C15ull + 7};
    size_t nk = (size_t)NT * NH * NDK, nv = (size_t)NT * NH * NDV;
    s.q = malloc(nk * sizeof(float)), s.k = malloc(nk * sizeof(float));
    s.v = malloc(nv * sizeof(float)), s.g = malloc((size_t)NT * NH * sizeof(float));
    s.b = malloc((size_t)NT * NH * sizeof(float));
    assert_true(s.q && s.k && s.v && s.g && s.b);
    trng_fill(&r, s.q, nk, 1.0);
    trng_fill(&r, s.k, nk, 1.0);
    trng_fill(&r, s.v, nv, 1.0);
    double norm = kind == KEYS_TINY ? 1e-3 : kind == KEYS_LARGE ? 1e3 : 1.0;
    for (size_t th = 0; kind != KEYS_NORMAL && th < (size_t)NT * NH; th++) {
        float *k = s.k + th * NDK;
        double n2 = 0;
        for (int d = 0; d < NDK; d++) n2 += (double)k[d] * k[d];
        for (int d = 0; d < NDK; d++) k[d] = (float)(k[d] * norm / sqrt(n2));
    }
    for (int i = 0; i < NT * NH; i++) {
        s.g[i] = (float)(-0.05 * (trng_uniform(&r) + 1.0));      /* alpha in [0.90, 1) */
        s.b[i] = (float)(0.2 + 0.35 * (trng_uniform(&r) + 1.0)); /* (0.2, 0.9) */
    }
    return s;
}

static void stream_free(stream *s) {
    free(s->q), free(s->k), free(s->v), free(s->g), free(s->b);
}

static mixer_tok stream_at(const stream *s, int t) {
    mixer_tok x = {{0}};
    x.in[IN_Q] = s->q + (size_t)t * NH * NDK, x.in[IN_K] = s->k + (size_t)t * NH * NDK;
    x.in[IN_V] = s->v + (size_t)t * NH * NDV, x.in[IN_G] = s->g + (size_t)t * NH;
    x.in[IN_BETA] = s->b + (size_t)t * NH;
    return x;
}

/* GLA's per-key log-decay [NT][NH][NDK], from the same draw. */
static float *gk_make(uint64_t seed) {
    trng r = {seed + 99};
    float *gk = malloc((size_t)NT * NH * NDK * sizeof *gk);
    assert_non_null(gk);
    for (size_t i = 0; i < (size_t)NT * NH * NDK; i++)
        gk[i] = (float)(-0.05 * (trng_uniform(&r) + 1.0));
    return gk;
}

static mixer_cfg cfg_make(const mixer_ops *m) {
    mixer_cfg c;
    opts o = {0};
    err e = {{0}};
    if (mixer_configure(m, &c, NH, NDK, NDV, &o, &e)) fail_msg("%s: %s", m->name, e.msg);
    return c;
}

/* S^T k [NDV] in double from a state [NDK][NDV]. */
static void direct(const float *S, const float *k, double *r) {
    for (int j = 0; j < NDV; j++) {
        r[j] = 0;
        for (int d = 0; d < NDK; d++) r[j] += (double)S[d * NDV + j] * k[d];
    }
}

static double norm_f(const float *a, int n) {
    double s = 0;
    for (int i = 0; i < n; i++) s += (double)a[i] * a[i];
    return sqrt(s);
}

/* At token t (the state after it): every readback row of the tracker against the direct double
 * computation, |r - S^T k_i| / max(|S^T k_i|, |v_i|), and the trace's recall entries against
 * |S^T k_i - v_i| / |v_i| in double. Returns the largest row difference. */
static double compare(const recall_tracker *rt, const trace *tr, const stream *s, const float *st,
                      int t) {
    int sr = trace_find(tr, "recall");
    assert_true(sr >= 0);
    double worst = 0;
    for (int h = 0; h < NH; h++) {
        const float *S = st + (size_t)h * NDK * NDV;
        const float *row = trace_at_lh(tr, sr, t, 0, h);
        for (int j = 0; j < RECALL_WINDOW; j++) {
            const double *r = recall_tracker_row(rt, h, j);
            if (j > t) {
                assert_null(r);
                assert_true(isnan(row[j]));
                continue;
            }
            assert_non_null(r);
            const float *ki = s->k + ((size_t)(t - j) * NH + h) * NDK;
            const float *vi = s->v + ((size_t)(t - j) * NH + h) * NDV;
            double d[NDV], num = 0, den = 0, e2 = 0;
            direct(S, ki, d);
            for (int m = 0; m < NDV; m++) {
                num += (r[m] - d[m]) * (r[m] - d[m]);
                den += d[m] * d[m];
                e2 += (d[m] - vi[m]) * (d[m] - vi[m]);
            }
            double vn = norm_f(vi, NDV), rel = sqrt(num) / fmax(sqrt(den), vn);
            double want = sqrt(e2) / vn, val = fabs(row[j] - want) / fmax(1.0, want);
            if (rel > worst) worst = rel;
            track(&max_val, val);
            if (!(rel < 1e-5) || !(val < 1e-5))
                fail_msg("token %d head %d j %d: row differs by %.3g, recall by %.3g", t, h, j, rel,
                         val);
        }
    }
    track(&max_row, worst);
    return worst;
}

/* Steps the stream through m with the tracker, comparing at several tokens. reset_at >= 0: the
 * tracker is reset before that token (it then restarts from the trace). Returns the tracker's
 * counters through inc / full / off. */
static void run_tracked(const mixer_ops *m, const stream *s, const float *gk, int reset_at,
                        int64_t *inc, int64_t *full, int *off) {
    mixer_cfg c = cfg_make(m);
    err e = {{0}};
    float *st = malloc(m->state_floats(&c) * sizeof *st), o[NH * NDV];
    assert_non_null(st);
    m->state_init(&c, st);
    trace tr;
    trace_init(&tr);
    recall_tracker rt;
    assert_int_equal(recall_tracker_init(&rt, m, &c, &e), 0);
    assert_true(rt.keymajor);
    for (int t = 0; t < NT; t++) {
        mixer_tok x = stream_at(s, t);
        if (gk) x.in[IN_GK] = gk + (size_t)t * NH * NDK;
        if (t == reset_at) recall_tracker_reset(&rt);
        assert_int_equal(trace_push_token(&tr, &e), t);
        assert_int_equal(recall_before_step(&rt, st, &x, t, &e), 0);
        m->step(&c, st, &x, t, o, NULL);
        if (recall_after_step(&rt, &tr, 1, 0, st, t, &e)) fail_msg("%s", e.msg);
        if (t < 3 || t == 100 || t == 255 || t == 256 || t == 257 || t == 300 || t == 301 ||
            t == 450 || t == NT - 1)
            compare(&rt, &tr, s, st, t);
    }
    *inc = rt.incremental, *full = rt.full, *off = rt.form_off;
    recall_tracker_free(&rt);
    trace_free(&tr);
    free(st);
}

/* The incremental path over the whole stream: one full product (token 0), no mismatch. */
static void check_incremental(const char *name, keys_kind kind, uint64_t seed) {
    const mixer_ops *m = mixer_find(name);
    assert_non_null(m);
    assert_non_null(m->write_form);
    stream s = stream_make(kind, seed);
    int64_t inc, full;
    int off;
    run_tracked(m, &s, NULL, -1, &inc, &full, &off);
    print_message("  %-9s keys %-6s incremental %lld, full %lld\n", name,
                  kind == KEYS_TINY    ? "1e-3"
                  : kind == KEYS_LARGE ? "1e3"
                  : kind == KEYS_UNIT  ? "unit"
                                       : "normal",
                  (long long)inc, (long long)full);
    assert_int_equal(off, 0);
    assert_int_equal(full, 1);
    assert_int_equal(inc, NT - 1);
    stream_free(&s);
}

static void test_gdn(void **st) {
    (void)st;
    check_incremental("gdn", KEYS_UNIT, 1);
}

static void test_deltanet(void **st) {
    (void)st;
    check_incremental("deltanet", KEYS_UNIT, 2);
}

static void test_kaczmarz(void **st) {
    (void)st;
    check_incremental("kaczmarz", KEYS_NORMAL, 3);
}

static void test_kaczmarz_tiny_keys(void **st) {
    (void)st;
    check_incremental("kaczmarz", KEYS_TINY, 4);
}

static void test_kaczmarz_large_keys(void **st) {
    (void)st;
    check_incremental("kaczmarz", KEYS_LARGE, 5);
}

static void test_mamba2(void **st) {
    (void)st;
    check_incremental("mamba2", KEYS_NORMAL, 6);
}

/* The write forms against the step itself: alpha S + kk u^T equals the stepped state. */
static void test_write_forms_match_step(void **st) {
    (void)st;
    const char *names[] = {"gdn", "deltanet", "kaczmarz", "mamba2"};
    for (int n = 0; n < 4; n++) {
        const mixer_ops *m = mixer_find(names[n]);
        mixer_cfg c = cfg_make(m);
        stream s = stream_make(KEYS_NORMAL, 10 + n);
        size_t sf = m->state_floats(&c);
        float *S = malloc(sf * sizeof *S), *S0 = malloc(sf * sizeof *S0), o[NH * NDV];
        float alpha[NH], kk[NH * NDK], u[NH * NDV];
        assert_true(S && S0);
        m->state_init(&c, S);
        for (int t = 0; t < 40; t++) {
            mixer_tok x = stream_at(&s, t);
            memcpy(S0, S, sf * sizeof *S);
            assert_int_equal(m->write_form(&c, S, &x, t, alpha, kk, u), 0);
            assert_memory_equal(S0, S, sf * sizeof *S); /* the form leaves the state alone */
            m->step(&c, S, &x, t, o, NULL);
            for (int h = 0; h < NH; h++)
                for (int d = 0; d < NDK; d++)
                    for (int j = 0; j < NDV; j++) {
                        size_t i = ((size_t)h * NDK + d) * NDV + j;
                        /* to float rounding of the two terms */
                        double a = (double)alpha[h] * S0[i];
                        double w = (double)kk[h * NDK + d] * u[h * NDV + j], want = a + w;
                        if (!(fabs(want - S[i]) <= 1e-6 * (fabs(a) + fabs(w)) + 1e-30))
                            fail_msg("%s token %d: S[%zu] %.9g, form gives %.9g", names[n], t, i,
                                     S[i], want);
                    }
        }
        free(S), free(S0);
        stream_free(&s);
    }
    /* the mixers without one keep NULL */
    assert_null(mixer_find("gla")->write_form);
    assert_null(mixer_find("kalman")->write_form);
    assert_null(mixer_find("softmax")->write_form);
}

/* gdn with a broken write form: the decay left out (alpha = 1). */
static const mixer_ops *gdn_real;
static int no_alpha_form(const mixer_cfg *c, const float *state, const mixer_tok *x, int pos,
                         float *alpha, float *kk, float *u) {
    int r = gdn_real->write_form(c, state, x, pos, alpha, kk, u);
    for (int h = 0; h < c->H; h++) alpha[h] = 1.0f;
    return r;
}

/* The tracker catches a write form that does not match the step (a missing alpha) within a token
 * and carries on with full products, so every row stays exact. */
static void test_missing_alpha_caught(void **st) {
    (void)st;
    gdn_real = mixer_find("gdn");
    mixer_ops broken = *gdn_real;
    broken.write_form = no_alpha_form;
    stream s = stream_make(KEYS_UNIT, 7);
    int64_t inc, full;
    int off;
    run_tracked(&broken, &s, NULL, -1, &inc, &full, &off);
    print_message("  gdn without alpha: incremental %lld, full %lld\n", (long long)inc,
                  (long long)full);
    assert_int_equal(off, 1);
    assert_true(inc <= 1); /* token 1 checks the row of token 0: caught at once */
    assert_int_equal(inc + full, NT);
    stream_free(&s);
}

/* A reset in the middle: the next token restarts from the trace's keys (full product), then the
 * incremental path resumes. */
static void test_reset_restarts_from_trace(void **st) {
    (void)st;
    stream s = stream_make(KEYS_UNIT, 8);
    int64_t inc, full;
    int off;
    run_tracked(mixer_find("gdn"), &s, NULL, 300, &inc, &full, &off);
    assert_int_equal(off, 0);
    assert_int_equal(full, 2);
    assert_int_equal(inc, NT - 2);
    stream_free(&s);
}

/* GLA has no write form: every token is the float product, exact to float rounding. */
static void test_gla_float_product(void **st) {
    (void)st;
    const mixer_ops *m = mixer_find("gla");
    assert_null(m->write_form);
    stream s = stream_make(KEYS_NORMAL, 9);
    float *gk = gk_make(9);
    int64_t inc, full;
    int off;
    run_tracked(m, &s, gk, -1, &inc, &full, &off);
    assert_int_equal(inc, 0);
    assert_int_equal(full, NT);
    free(gk);
    stream_free(&s);
}

/* The stateless recall_record on GLA: its trace rows against recall_readback in double. */
static void test_recall_record_gla(void **st) {
    (void)st;
    const mixer_ops *m = mixer_find("gla");
    mixer_cfg c = cfg_make(m);
    err e = {{0}};
    stream s = stream_make(KEYS_NORMAL, 11);
    float *gk = gk_make(11);
    float *S = malloc(m->state_floats(&c) * sizeof *S), o[NH * NDV];
    assert_non_null(S);
    m->state_init(&c, S);
    trace tr;
    trace_init(&tr);
    double worst = 0;
    for (int t = 0; t < 300; t++) {
        mixer_tok x = stream_at(&s, t);
        x.in[IN_GK] = gk + (size_t)t * NH * NDK;
        assert_int_equal(trace_push_token(&tr, &e), t);
        m->step(&c, S, &x, t, o, NULL);
        assert_int_equal(recall_record(&tr, 2, 1, NH, NDK, NDV, x.in[IN_K], x.in[IN_V], S, t, &e),
                         0);
        if (t % 37 && t != 299) continue;
        const float *row = trace_at_lh(&tr, trace_find(&tr, "recall"), t, 1, NH - 1);
        for (int j = 0; j < RECALL_WINDOW; j++) {
            if (j > t) {
                assert_true(isnan(row[j]));
                continue;
            }
            size_t i = (size_t)(t - j) * NH + NH - 1;
            float want = recall_readback(NDK, NDV, S + (size_t)(NH - 1) * NDK * NDV, s.k + i * NDK,
                                         s.v + i * NDV);
            double d = fabs((double)row[j] - want) / fmax(1.0, want);
            worst = d > worst ? d : worst;
            if (!(d < 1e-5)) fail_msg("token %d j %d: %.9g vs %.9g", t, j, row[j], want);
        }
    }
    track(&max_val, worst);
    trace_free(&tr);
    free(S), free(gk);
    stream_free(&s);
}

/* recall_readback_rows at ragged sizes (rows not a multiple of the row block, columns not of the
 * column block) against double: |R - R*| / |R*| per row. */
static void test_product_shapes(void **st) {
    (void)st;
    const int shapes[][3] = {{1, 1, 1}, {7, 13, 11}, {256, 16, 8}, {5, 64, 64}, {33, 128, 20}};
    trng r = {5};
    for (size_t n = 0; n < sizeof shapes / sizeof shapes[0]; n++) {
        int rows = shapes[n][0], dk = shapes[n][1], dv = shapes[n][2];
        float *K = malloc((size_t)rows * dk * sizeof *K), *S = malloc((size_t)dk * dv * sizeof *S);
        float *R = malloc((size_t)rows * (dv + 3) * sizeof *R);
        const float **Kp = malloc((size_t)rows * sizeof *Kp);
        assert_true(K && S && R && Kp);
        trng_fill(&r, K, (size_t)rows * dk, 1.0);
        trng_fill(&r, S, (size_t)dk * dv, 1.0);
        for (int i = 0; i < rows; i++) Kp[rows - 1 - i] = K + (size_t)i * dk; /* any order */
        recall_readback_rows(rows, Kp, dk, dv, S, R, (size_t)dv + 3);
        for (int i = 0; i < rows; i++) {
            double num = 0, den = 0;
            for (int j = 0; j < dv; j++) {
                double want = 0;
                for (int d = 0; d < dk; d++) want += (double)Kp[i][d] * S[(size_t)d * dv + j];
                double diff = R[(size_t)i * (dv + 3) + j] - want;
                num += diff * diff, den += want * want;
            }
            double rel = sqrt(num / (den > 0 ? den : 1));
            track(&max_prod, rel);
            if (!(rel < 1e-5)) fail_msg("%dx%dx%d row %d: %.3g", rows, dk, dv, i, rel);
        }
        free(K), free(S), free(R), free(Kp);
    }
}

static int report(void **st) {
    (void)st;
    print_message("recall: largest row difference %.3g, recall value %.3g, product %.3g\n", max_row,
                  max_val, max_prod);
    return 0;
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_gdn),
        cmocka_unit_test(test_deltanet),
        cmocka_unit_test(test_kaczmarz),
        cmocka_unit_test(test_kaczmarz_tiny_keys),
        cmocka_unit_test(test_kaczmarz_large_keys),
        cmocka_unit_test(test_mamba2),
        cmocka_unit_test(test_write_forms_match_step),
        cmocka_unit_test(test_missing_alpha_caught),
        cmocka_unit_test(test_reset_restarts_from_trace),
        cmocka_unit_test(test_gla_float_product),
        cmocka_unit_test(test_recall_record_gla),
        cmocka_unit_test(test_product_shapes),
    };
    return cmocka_run_group_tests(tests, NULL, report);
}
