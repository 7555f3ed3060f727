/* test_mixer_softmax.c: causal softmax attention (mixers/softmax.c, mixers/attention.c;
 * spec/delta-family.md §7).
 *
 * The truth is the quadratic form written here in double precision, with its own rotate-half RoPE:
 * o_t = sum_j softmax_j(scale q_t.k_j) v_j over the visible keys. The online-softmax prefill at
 * every tile size and repeated step must match it and each other, also from a pre-filled cache,
 * across a decode offset with RoPE, and with a sliding window; RoPE is a rotation whose scores
 * depend on the position difference only; every probe matches its definition. */
#include "testutil.h"

#include "core/opts.h"
#include "mixers/attention.h"
#include "mixers/mixer.h"

extern const mixer_ops mixer_softmax;

/* A problem: P tokens already in the cache (post-RoPE keys k0 [P, H, dk], values v0 [P, H, dv]),
 * then T new tokens q, k [T, H, dk], v [T, H, dv] from position P. */
typedef struct prob {
    int H, dk, dv, P, T;
    float *k0, *v0;
    float *q, *k, *v;
} prob;

static void pb_make(prob *d, int H, int dk, int dv, int P, int T, uint64_t seed) {
    trng g = {seed};
    d->H = H, d->dk = dk, d->dv = dv, d->P = P, d->T = T;
    size_t n0k = (size_t)(P ? P : 1) * H * dk, n0v = (size_t)(P ? P : 1) * H * dv;
    size_t nk = (size_t)T * H * dk, nv = (size_t)T * H * dv;
    d->k0 = malloc(n0k * sizeof(float)), d->v0 = malloc(n0v * sizeof(float));
    d->q = malloc(nk * sizeof(float)), d->k = malloc(nk * sizeof(float));
    d->v = malloc(nv * sizeof(float));
    assert_true(d->k0 && d->v0 && d->q && d->k && d->v);
    trng_fill(&g, d->k0, n0k, 1.0);
    trng_fill(&g, d->v0, n0v, 1.0);
    trng_fill(&g, d->q, nk, 1.0);
    trng_fill(&g, d->k, nk, 1.0);
    trng_fill(&g, d->v, nv, 1.0);
}

static void pb_free(prob *d) {
    free(d->k0), free(d->v0), free(d->q), free(d->k), free(d->v);
}

static void cfg(mixer_cfg *c, const prob *d, const char *const *args) {
    int n = 0;
    while (args && args[n]) n++;
    opts o;
    err e = {{0}};
    assert_int_equal(opts_parse(&o, n, (char *const *)args, &e), 0);
    if (mixer_configure(&mixer_softmax, c, d->H, d->dk, d->dv, &o, &e)) fail_msg("%s", e.msg);
    assert_int_equal(opts_check_unused(&o, &e), 0);
    opts_free(&o);
    c->max_t = d->P + d->T + 5; /* spare slots must not matter */
}

static mixer_seq seq(const prob *d) {
    mixer_seq s = {.T = d->T};
    s.in[IN_Q] = d->q, s.in[IN_K] = d->k, s.in[IN_V] = d->v;
    return s;
}

/* A fresh state holding the P cached tokens. */
static float *state_new(const mixer_cfg *c, const prob *d) {
    float *s = malloc(mixer_softmax.state_floats(c) * sizeof *s);
    assert_non_null(s);
    mixer_softmax.state_init(c, s);
    for (int t = 0; t < d->P; t++)
        for (int h = 0; h < d->H; h++) {
            memcpy(s + attn_k_offset(c, t, h), d->k0 + ((size_t)t * d->H + h) * d->dk,
                   (size_t)d->dk * sizeof(float));
            memcpy(s + attn_v_offset(c, t, h), d->v0 + ((size_t)t * d->H + h) * d->dv,
                   (size_t)d->dv * sizeof(float));
        }
    return s;
}

/* o [T, H, dv] by prefill (steps = 0) or repeated step; probes [T, probe floats] or NULL. */
static void run(const mixer_cfg *c, const prob *d, int steps, float *o, float *probes) {
    float *s = state_new(c, d);
    mixer_seq x = seq(d);
    if (steps)
        mixer_run_steps(&mixer_softmax, c, s, &x, d->P, o, probes);
    else
        mixer_softmax.prefill(c, s, &x, d->P, o);
    free(s);
}

/* RoPE in double from spec §7: x [dk] at position p into y. */
static void ref_rope(int dk, double theta, int p, const float *x, double *y) {
    int half = dk / 2;
    for (int i = 0; i < half; i++) {
        double ang = p * pow(theta, -2.0 * i / dk), cs = cos(ang), sn = sin(ang);
        y[i] = x[i] * cs - x[i + half] * sn;
        y[i + half] = x[i + half] * cs + x[i] * sn;
    }
}

/* Keys and values of all P + T positions of head h: K [P+T, dk], V [P+T, dv]. */
static void ref_kv(const mixer_cfg *c, const prob *d, int h, double *K, double *V) {
    int dk = d->dk, dv = d->dv;
    for (int j = 0; j < d->P + d->T; j++) {
        int new = j >= d->P, t = j - d->P;
        const float *k =
            new ? d->k + ((size_t)t * d->H + h) * dk : d->k0 + ((size_t)j * d->H + h) * dk;
        const float *v =
            new ? d->v + ((size_t)t * d->H + h) * dv : d->v0 + ((size_t)j * d->H + h) * dv;
        if (new && c->rope)
            ref_rope(dk, c->rope_theta, j, k, K + (size_t)j * dk);
        else
            for (int i = 0; i < dk; i++) K[(size_t)j * dk + i] = k[i];
        for (int i = 0; i < dv; i++) V[(size_t)j * dv + i] = v[i];
    }
}

/* One row: new token t, head h; p [P+T] (0 outside the visible keys), o [dv]. */
static void ref_row(const mixer_cfg *c, const prob *d, const double *K, const double *V, int t,
                    int h, double *p, double *o) {
    int dk = d->dk, dv = d->dv, i = d->P + t;
    double q[ATTN_MAX_DIM];
    const float *qf = d->q + ((size_t)t * d->H + h) * dk;
    if (c->rope)
        ref_rope(dk, c->rope_theta, i, qf, q);
    else
        for (int x = 0; x < dk; x++) q[x] = qf[x];
    int first = c->window > 0 && i - c->window + 1 > 0 ? i - c->window + 1 : 0;
    double m = -INFINITY, sum = 0;
    for (int j = 0; j <= i; j++) {
        double sq = 0;
        for (int x = 0; x < dk; x++) sq += q[x] * K[(size_t)j * dk + x];
        p[j] = c->scale * sq;
        if (j >= first) m = fmax(m, p[j]);
    }
    for (int j = 0; j <= i; j++) p[j] = j >= first ? exp(p[j] - m) : 0.0, sum += p[j];
    memset(o, 0, (size_t)dv * sizeof *o);
    for (int j = 0; j <= i; j++) {
        p[j] /= sum;
        for (int x = 0; x < dv; x++) o[x] += p[j] * V[(size_t)j * dv + x];
    }
}

static void ref_attend(const mixer_cfg *c, const prob *d, double *o) {
    int n = d->P + d->T;
    double *K = malloc((size_t)n * d->dk * sizeof *K), *V = malloc((size_t)n * d->dv * sizeof *V);
    double *p = malloc((size_t)n * sizeof *p);
    assert_true(K && V && p);
    for (int h = 0; h < d->H; h++) {
        ref_kv(c, d, h, K, V);
        for (int t = 0; t < d->T; t++)
            ref_row(c, d, K, V, t, h, p, o + ((size_t)t * d->H + h) * d->dv);
    }
    free(K), free(V), free(p);
}

static size_t onum(const prob *d) {
    return (size_t)d->T * d->H * d->dv;
}

/* Online softmax (prefill, every tile) == steps == naive double, T in {1, 63, 64, 65, 200}, from a
 * pre-filled cache of 37 tokens, with and without RoPE. */
static void test_online_equals_naive(void **st) {
    (void)st;
    const int Ts[] = {1, 63, 64, 65, 200};
    const char *chunks[] = {"chunk=16", "chunk=32", "chunk=64"};
    const char *ropes[] = {"rope=0", "rope=1"};
    double wpath = 0, wref = 0;
    for (int ti = 0; ti < 5; ti++) {
        prob d;
        pb_make(&d, 2, 16, 12, 37, Ts[ti], 200 + ti);
        size_t n = onum(&d);
        float *o1 = malloc(n * sizeof *o1), *o2 = malloc(n * sizeof *o2);
        double *od = malloc(n * sizeof *od);
        for (int ro = 0; ro < 2; ro++) {
            mixer_cfg c;
            const char *a0[] = {ropes[ro], NULL};
            cfg(&c, &d, a0);
            ref_attend(&c, &d, od);
            for (int ch = 0; ch < 3; ch++) {
                const char *args[] = {ropes[ro], chunks[ch], NULL};
                cfg(&c, &d, args);
                run(&c, &d, 0, o1, NULL);
                run(&c, &d, 1, o2, NULL);
                double ep = rel_err(o1, o2, n), e1 = rel_err_d(o1, od, n),
                       e2 = rel_err_d(o2, od, n);
                assert_true(ep < 1e-5 && e1 < 1e-5 && e2 < 1e-5);
                wpath = fmax(wpath, ep), wref = fmax(wref, fmax(e1, e2));
            }
        }
        free(o1), free(o2), free(od);
        pb_free(&d);
    }
    print_message("prefill vs steps: max rel err %.3g; vs double reference %.3g\n", wpath, wref);
}

/* Scores far apart (scale 30): the running max moves by large steps between tiles and the rescale
 * exp(m - m') underflows for some rows; still equal to the naive form. */
static void test_large_scores(void **st) {
    (void)st;
    prob d;
    pb_make(&d, 1, 8, 8, 0, 150, 17);
    size_t n = onum(&d);
    float *o = malloc(n * sizeof *o);
    double *od = malloc(n * sizeof *od);
    const char *args[] = {"scale=30", "chunk=16", NULL};
    mixer_cfg c;
    cfg(&c, &d, args);
    assert_true(c.scale == 30.0f);
    ref_attend(&c, &d, od);
    double worst = 0;
    for (int steps = 0; steps < 2; steps++) {
        run(&c, &d, steps, o, NULL);
        worst = fmax(worst, rel_err_d(o, od, n));
    }
    assert_true(worst < 1e-5);
    print_message("scale=30: max rel err vs double %.3g\n", worst);
    free(o), free(od);
    pb_free(&d);
}

/* A cache written by the caller is attended by prefill and steps from pos0 = P. */
static void test_prefilled_cache(void **st) {
    (void)st;
    prob d;
    pb_make(&d, 3, 8, 10, 50, 20, 8);
    size_t n = onum(&d);
    float *o = malloc(n * sizeof *o), *o0 = malloc(n * sizeof *o0);
    double *od = malloc(n * sizeof *od);
    const char *args[] = {"rope=1", "chunk=32", NULL};
    mixer_cfg c;
    cfg(&c, &d, args);
    ref_attend(&c, &d, od);
    double worst = 0;
    for (int steps = 0; steps < 2; steps++) {
        run(&c, &d, steps, o, NULL);
        worst = fmax(worst, rel_err_d(o, od, n));
    }
    assert_true(worst < 1e-5);
    print_message("pre-filled cache: max rel err vs double %.3g\n", worst);
    float *s = malloc(mixer_softmax.state_floats(&c) * sizeof *s);
    mixer_softmax.state_init(&c, s);
    mixer_seq x = seq(&d);
    mixer_softmax.prefill(&c, s, &x, d.P, o0); /* same positions, empty cache */
    assert_true(rel_err(o0, o, n) > 1e-2);
    free(s), free(o), free(o0), free(od);
    pb_free(&d);
}

/* RoPE across a decode offset: prefill of T0 tokens then steps == prefill of all == double. */
static void test_rope_decode_offset(void **st) {
    (void)st;
    prob d;
    pb_make(&d, 2, 16, 8, 0, 120, 22);
    size_t n = onum(&d), ht = (size_t)d.H * d.dv;
    float *oa = malloc(n * sizeof *oa), *ob = malloc(n * sizeof *ob);
    double *od = malloc(n * sizeof *od);
    const char *args[] = {"rope=1", "chunk=16", NULL};
    mixer_cfg c;
    cfg(&c, &d, args);
    ref_attend(&c, &d, od);
    run(&c, &d, 0, oa, NULL);
    const int T0 = 77;
    float *s = state_new(&c, &d);
    mixer_seq x = seq(&d), x0 = x;
    x0.T = T0;
    mixer_softmax.prefill(&c, s, &x0, 0, ob);
    for (int t = T0; t < d.T; t++) {
        mixer_tok xt = mixer_seq_at(&c, &x, t);
        mixer_softmax.step(&c, s, &xt, t, ob + t * ht, NULL);
    }
    double e1 = rel_err(ob, oa, n), e2 = rel_err_d(oa, od, n);
    assert_true(e1 < 1e-5 && e2 < 1e-5);
    print_message("rope decode offset: prefill+steps vs prefill %.3g, vs double %.3g\n", e1, e2);
    free(s), free(oa), free(ob), free(od);
    pb_free(&d);
}

/* RoPE is a rotation: norms kept, identity at position 0, and rope(q, i).rope(k, j) depends on
 * i - j only (what makes a cache of rotated keys valid for every later query). */
static void test_rope_relative(void **st) {
    (void)st;
    const int dk = 32;
    float q[32], k[32], q0[32], k0[32], cs[16], sn[16];
    trng g = {5};
    trng_fill(&g, q0, dk, 1.0), trng_fill(&g, k0, dk, 1.0);
    double dots[3];
    const int shifts[] = {0, 1000, 4090};
    for (int s = 0; s < 3; s++) {
        memcpy(q, q0, sizeof q), memcpy(k, k0, sizeof k);
        attn_rope_angles(dk, 10000.0f, 17 + shifts[s], cs, sn);
        attn_rope_apply(dk, cs, sn, q);
        attn_rope_angles(dk, 10000.0f, 5 + shifts[s], cs, sn);
        attn_rope_apply(dk, cs, sn, k);
        double dq = 0, d0 = 0, dd = 0;
        for (int i = 0; i < dk; i++)
            dq += (double)q[i] * q[i], d0 += (double)q0[i] * q0[i], dd += (double)q[i] * k[i];
        assert_true(fabs(sqrt(dq) - sqrt(d0)) < 1e-5 * sqrt(d0));
        dots[s] = dd;
    }
    assert_true(fabs(dots[1] - dots[0]) < 1e-4 && fabs(dots[2] - dots[0]) < 1e-4);
    /* and it does rotate: the unrotated dot differs */
    double raw = 0;
    for (int i = 0; i < dk; i++) raw += (double)q0[i] * k0[i];
    assert_true(fabs(raw - dots[0]) > 1e-2);
    attn_rope_angles(dk, 10000.0f, 0, cs, sn);
    memcpy(q, q0, sizeof q);
    attn_rope_apply(dk, cs, sn, q);
    assert_memory_equal(q, q0, sizeof q);
}

/* Sliding window: both forms == double for windows below, at and above the tile size; window=1
 * returns v itself. */
static void test_window(void **st) {
    (void)st;
    prob d;
    pb_make(&d, 2, 8, 8, 20, 140, 34);
    size_t n = onum(&d);
    float *o = malloc(n * sizeof *o);
    double *od = malloc(n * sizeof *od);
    const char *wins[] = {"window=1", "window=9", "window=32", "window=70"};
    double worst = 0;
    const char *chunks[] = {"chunk=16", "chunk=32", "chunk=64"};
    for (int w = 0; w < 4; w++)
        for (int ch = 0; ch < 3; ch++) {
            const char *args[] = {wins[w], chunks[ch], "rope=1", NULL};
            mixer_cfg c;
            cfg(&c, &d, args);
            ref_attend(&c, &d, od);
            for (int steps = 0; steps < 2; steps++) {
                run(&c, &d, steps, o, NULL);
                worst = fmax(worst, rel_err_d(o, od, n));
            }
        }
    assert_true(worst < 1e-5);
    print_message("windows: max rel err vs double %.3g\n", worst);
    const char *one[] = {"window=1", NULL};
    mixer_cfg c;
    cfg(&c, &d, one);
    run(&c, &d, 0, o, NULL);
    assert_true(rel_err(o, d.v, n) < 1e-6);
    free(o), free(od);
    pb_free(&d);
}

/* Identical keys give uniform weights: o_t is the running mean of v. */
static void test_uniform_keys(void **st) {
    (void)st;
    prob d;
    pb_make(&d, 1, 8, 4, 0, 40, 3);
    for (int t = 1; t < d.T; t++) memcpy(d.k + t * d.dk, d.k, (size_t)d.dk * sizeof(float));
    size_t n = onum(&d);
    float *o = malloc(n * sizeof *o), *mean = malloc(n * sizeof *mean);
    double acc[4] = {0};
    for (int t = 0; t < d.T; t++)
        for (int i = 0; i < d.dv; i++) {
            acc[i] += d.v[t * d.dv + i];
            mean[t * d.dv + i] = (float)(acc[i] / (t + 1));
        }
    mixer_cfg c;
    cfg(&c, &d, NULL);
    run(&c, &d, 0, o, NULL);
    assert_true(rel_err(o, mean, n) < 1e-6);
    free(o), free(mean);
    pb_free(&d);
}

/* The probes against their definitions from the double form; the softmax row of
 * parallax_effective_weights sums to 1 and reproduces o. */
static void test_probes(void **st) {
    (void)st;
    prob d;
    pb_make(&d, 2, 8, 6, 0, 70, 42);
    size_t N = (size_t)d.T, ht = (size_t)d.H * d.dv;
    const char *wa[] = {"rope=1", NULL}, *wb[] = {"rope=1", "window=20", NULL};
    const char *const *argsets[] = {wa, wb};
    double worst = 0;
    for (int as = 0; as < 2; as++) {
        mixer_cfg c;
        cfg(&c, &d, argsets[as]);
        size_t np = mixer_probe_floats(&mixer_softmax, &c);
        assert_int_equal(np, (size_t)ATTN_NPROBES_SOFTMAX * d.H);
        float *o = malloc(N * ht * sizeof *o), *pb = malloc(N * np * sizeof *pb);
        float *pw = malloc(N * sizeof *pw);
        float *s = state_new(&c, &d);
        mixer_seq x = seq(&d);
        mixer_run_steps(&mixer_softmax, &c, s, &x, 0, o, pb);
        double *K = malloc(N * d.dk * sizeof *K), *V = malloc(N * d.dv * sizeof *V);
        double *p = malloc(N * sizeof *p), or_[6];
        const int ts[] = {0, 1, 19, 20, 69};
        for (int h = 0; h < d.H; h++) {
            ref_kv(&c, &d, h, K, V);
            for (int k = 0; k < 5; k++) {
                int t = ts[k], first = attn_first_key(&c, t), nk = t - first + 1;
                ref_row(&c, &d, K, V, t, h, p, or_);
                double ent = 0, pmax = 0, on = 0;
                for (int j = first; j <= t; j++)
                    ent -= p[j] > 0 ? p[j] * log(p[j]) : 0, pmax = fmax(pmax, p[j]);
                for (int i = 0; i < d.dv; i++) on += or_[i] * or_[i];
                double want[ATTN_NPROBES_SOFTMAX] = {
                    [ATTN_P_ENTROPY] = ent,     [ATTN_P_ENTROPY_NORM] = nk > 1 ? ent / log(nk) : 0,
                    [ATTN_P_MAX_WEIGHT] = pmax, [ATTN_P_SINK_P] = p[0],
                    [ATTN_P_O_NORM] = sqrt(on),
                };
                for (int i = 0; i < ATTN_NPROBES_SOFTMAX; i++) {
                    double got = pb[(size_t)t * np + (size_t)i * d.H + h];
                    if (!(fabs(got - want[i]) <= 2e-5 * (1 + fabs(want[i]))))
                        fail_msg("t=%d h=%d probe %s: %g, want %g", t, h,
                                 mixer_softmax.probes[i].name, got, want[i]);
                    worst = fmax(worst, fabs(got - want[i]) / (1 + fabs(want[i])));
                }
                /* the weights row for views */
                const float *q = d.q + ((size_t)t * d.H + h) * d.dk;
                assert_int_equal(parallax_effective_weights(&c, s, q, NULL, t, h, pw, NULL), 0);
                double sum = 0, ov[6] = {0};
                for (int j = 0; j <= t; j++) {
                    sum += pw[j];
                    for (int i = 0; i < d.dv; i++) ov[i] += pw[j] * s[attn_v_offset(&c, j, h) + i];
                }
                assert_true(fabs(sum - 1) < 1e-5);
                assert_true(rel_err_d(pw, p, t + 1) < 1e-5);
                float ovf[6];
                for (int i = 0; i < d.dv; i++) ovf[i] = (float)ov[i];
                assert_true(rel_err(ovf, o + (size_t)t * ht + (size_t)h * d.dv, d.dv) < 1e-5);
            }
        }
        /* t = 0 sees one key: all weight on it */
        assert_true(pb[ATTN_P_MAX_WEIGHT * d.H] == 1.0f && pb[ATTN_P_ENTROPY * d.H] == 0.0f);
        if (as == 1) assert_true(pb[69 * np + ATTN_P_SINK_P * d.H] == 0.0f);
        free(s), free(o), free(pb), free(pw), free(K), free(V), free(p);
    }
    print_message("probes: max error %.3g relative to 1 + |value|\n", worst);
    pb_free(&d);
}

/* Options and state size. */
static void test_config(void **st) {
    (void)st;
    mixer_cfg c;
    err e = {{0}};
    opts o;
    const char *bad[][1] = {
        {"chunk=48"}, {"merge=welford"}, {"window=-3"}, {"scale=-1"}, {"rope=1"}};
    for (int i = 0; i < 5; i++) {
        assert_int_equal(opts_parse(&o, 1, (char *const *)bad[i], &e), 0);
        int rc = mixer_configure(&mixer_softmax, &c, 2, 5, 4, &o, &e);
        if (rc == 0) rc = opts_check_unused(&o, &e); /* merge= is not a softmax option */
        assert_int_equal(rc, -1);
        opts_free(&o);
    }
    const char *good[] = {"rope=1", "theta=500000", "window=128", "max_t=300", "chunk=32"};
    assert_int_equal(opts_parse(&o, 5, (char *const *)good, &e), 0);
    assert_int_equal(mixer_configure(&mixer_softmax, &c, 2, 6, 4, &o, &e), 0);
    assert_int_equal(opts_check_unused(&o, &e), 0);
    opts_free(&o);
    assert_true(c.rope == 1 && c.rope_theta == 500000.0f && c.window == 128 && c.max_t == 300 &&
                c.chunk == 32 && fabsf(c.scale - 1.0f / sqrtf(6.0f)) < 1e-7f);
    assert_int_equal(mixer_softmax.state_floats(&c), (size_t)300 * 2 * (6 + 4));
    assert_int_equal(attn_v_offset(&c, 0, 0), (size_t)300 * 2 * 6);
    assert_int_equal(attn_k_offset(&c, 3, 1), (size_t)(3 * 2 + 1) * 6);
    assert_int_equal(attn_first_key(&c, 500), 500 - 127);
    assert_int_equal(attn_first_key(&c, 100), 0);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_online_equals_naive),
        cmocka_unit_test(test_large_scores),
        cmocka_unit_test(test_prefilled_cache),
        cmocka_unit_test(test_rope_decode_offset),
        cmocka_unit_test(test_rope_relative),
        cmocka_unit_test(test_window),
        cmocka_unit_test(test_uniform_keys),
        cmocka_unit_test(test_probes),
        cmocka_unit_test(test_config),
    };
    return cmocka_run_group_tests_name("mixer_softmax", tests, NULL, NULL);
}
