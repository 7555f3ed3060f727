/* test_mixer_parallax.c: Parallax (mixers/parallax.c, mixers/attention.c; spec/kata-parallax.md
 * Part B, C.2).
 *
 * The truth is fla's naive_parallax (refs/ops-seed1{1,2}.safetensors, group plx.) and a quadratic
 * form written here in double precision: p = softmax(scale q.k), u = r.k, a = p (1 + ubar - u),
 * o = sum_j a_j v_j, with its own RoPE. Both fast forms (streaming prefill at every tile size and
 * repeated step, raw and Welford merges) must match it; prefill must equal step, also from a
 * pre-filled cache and with RoPE across a decode offset; r = 0 must give softmax; the effective
 * weights sum to 1 and reproduce o; every probe matches its definition. */
#include "tsession.h"

#include "core/opts.h"
#include "mixers/attention.h"
#include "mixers/lla.h"
#include "mixers/mixer.h"
#include "mixers/record.h"

extern const mixer_ops mixer_parallax;
extern const mixer_ops mixer_softmax;

/* A problem: P tokens already in the cache (post-RoPE keys k0 [P, H, dk], values v0 [P, H, dv]),
 * then T new tokens q, r, k [T, H, dk], v [T, H, dv] from position P. */
typedef struct prob {
    int H, dk, dv, P, T;
    float *k0, *v0;
    float *q, *r, *k, *v;
} prob;

static void pb_make(prob *d, int H, int dk, int dv, int P, int T, uint64_t seed, double rscale) {
    trng g = {seed};
    d->H = H, d->dk = dk, d->dv = dv, d->P = P, d->T = T;
    size_t n0k = (size_t)(P ? P : 1) * H * dk, n0v = (size_t)(P ? P : 1) * H * dv;
    size_t nk = (size_t)T * H * dk, nv = (size_t)T * H * dv;
    d->k0 = malloc(n0k * sizeof(float)), d->v0 = malloc(n0v * sizeof(float));
    d->q = malloc(nk * sizeof(float)), d->r = malloc(nk * sizeof(float));
    d->k = malloc(nk * sizeof(float)), d->v = malloc(nv * sizeof(float));
    assert_true(d->k0 && d->v0 && d->q && d->r && d->k && d->v);
    trng_fill(&g, d->k0, n0k, 1.0);
    trng_fill(&g, d->v0, n0v, 1.0);
    trng_fill(&g, d->q, nk, 1.0);
    trng_fill(&g, d->r, nk, rscale);
    trng_fill(&g, d->k, nk, 1.0);
    trng_fill(&g, d->v, nv, 1.0);
}

static void pb_free(prob *d) {
    free(d->k0), free(d->v0), free(d->q), free(d->r), free(d->k), free(d->v);
}

static void cfg(const mixer_ops *m, mixer_cfg *c, const prob *d, const char *const *args) {
    int n = 0;
    while (args && args[n]) n++;
    opts o;
    err e = {{0}};
    assert_int_equal(opts_parse(&o, n, (char *const *)args, &e), 0);
    if (mixer_configure(m, c, d->H, d->dk, d->dv, &o, &e)) fail_msg("%s", e.msg);
    assert_int_equal(opts_check_unused(&o, &e), 0);
    opts_free(&o);
    c->max_t = d->P + d->T + 3; /* a little spare room: unused slots must not matter */
}

static mixer_seq seq(const prob *d) {
    mixer_seq s = {.T = d->T};
    s.in[IN_Q] = d->q, s.in[IN_R] = d->r, s.in[IN_K] = d->k, s.in[IN_V] = d->v;
    return s;
}

/* A fresh state holding the P cached tokens. */
static float *state_new(const mixer_ops *m, const mixer_cfg *c, const prob *d) {
    float *s = malloc(m->state_floats(c) * sizeof *s);
    assert_non_null(s);
    m->state_init(c, s);
    for (int t = 0; t < d->P; t++)
        for (int h = 0; h < d->H; h++) {
            memcpy(s + attn_k_offset(c, t, h), d->k0 + ((size_t)t * d->H + h) * d->dk,
                   (size_t)d->dk * sizeof(float));
            memcpy(s + attn_v_offset(c, t, h), d->v0 + ((size_t)t * d->H + h) * d->dv,
                   (size_t)d->dv * sizeof(float));
        }
    return s;
}

/* o [T, H, dv] by prefill (steps = 0) or by repeated step; probes [T, probe floats] or NULL. */
static void run(const mixer_ops *m, const mixer_cfg *c, const prob *d, int steps, float *o,
                float *probes) {
    float *s = state_new(m, c, d);
    mixer_seq x = seq(d);
    if (steps)
        mixer_run_steps(m, c, s, &x, d->P, o, probes);
    else
        m->prefill(c, s, &x, d->P, o);
    free(s);
}

/* RoPE in double, written from spec/delta-family.md §7: x [dk] at position p, into y. */
static void ref_rope(int dk, double theta, int p, const float *x, double *y) {
    int half = dk / 2;
    for (int i = 0; i < half; i++) {
        double ang = p * pow(theta, -2.0 * i / dk), cs = cos(ang), sn = sin(ang);
        y[i] = x[i] * cs - x[i + half] * sn;
        y[i + half] = x[i + half] * cs + x[i] * sn;
    }
}

/* The keys and values of all P + T positions of head h in double: K [P+T, dk], V [P+T, dv]. */
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

/* One row of the quadratic form: new token t, head h. p, a [P+T] (0 outside the visible range),
 * o [dv]; K, V from ref_kv. use_r = 0: softmax (u = 0). Returns ubar. */
static double ref_row(const mixer_cfg *c, const prob *d, const double *K, const double *V, int t,
                      int h, int use_r, double *p, double *a, double *o) {
    int dk = d->dk, dv = d->dv, i = d->P + t;
    double q[ATTN_MAX_DIM], r[ATTN_MAX_DIM];
    const float *qf = d->q + ((size_t)t * d->H + h) * dk, *rf = d->r + ((size_t)t * d->H + h) * dk;
    if (c->rope) {
        ref_rope(dk, c->rope_theta, i, qf, q);
        ref_rope(dk, c->rope_theta, i, rf, r);
    } else {
        for (int x = 0; x < dk; x++) q[x] = qf[x], r[x] = rf[x];
    }
    int first = c->window > 0 && i - c->window + 1 > 0 ? i - c->window + 1 : 0;
    double m = -INFINITY, sum = 0, ubar = 0;
    double *s = calloc((size_t)i + 1, sizeof *s), *u = calloc((size_t)i + 1, sizeof *u);
    assert_true(s && u);
    for (int j = first; j <= i; j++) {
        double sq = 0, su = 0;
        for (int x = 0; x < dk; x++)
            sq += q[x] * K[(size_t)j * dk + x], su += r[x] * K[(size_t)j * dk + x];
        s[j] = c->scale * sq, u[j] = use_r ? su : 0.0;
        m = fmax(m, s[j]);
    }
    for (int j = first; j <= i; j++) sum += exp(s[j] - m);
    for (int j = 0; j <= i; j++) p[j] = j >= first ? exp(s[j] - m) / sum : 0.0;
    for (int j = first; j <= i; j++) ubar += p[j] * u[j];
    memset(o, 0, (size_t)dv * sizeof *o);
    for (int j = 0; j <= i; j++) {
        a[j] = p[j] * (1.0 + ubar - u[j]);
        for (int x = 0; x < dv; x++) o[x] += a[j] * V[(size_t)j * dv + x];
    }
    free(s), free(u);
    return ubar;
}

/* The whole output [T, H, dv] of the quadratic form. */
static void ref_attend(const mixer_cfg *c, const prob *d, int use_r, double *o) {
    int n = d->P + d->T;
    double *K = malloc((size_t)n * d->dk * sizeof *K), *V = malloc((size_t)n * d->dv * sizeof *V);
    double *p = malloc((size_t)n * sizeof *p), *a = malloc((size_t)n * sizeof *a);
    assert_true(K && V && p && a);
    for (int h = 0; h < d->H; h++) {
        ref_kv(c, d, h, K, V);
        for (int t = 0; t < d->T; t++)
            ref_row(c, d, K, V, t, h, use_r, p, a, o + ((size_t)t * d->H + h) * d->dv);
    }
    free(K), free(V), free(p), free(a);
}

static size_t onum(const prob *d) {
    return (size_t)d->T * d->H * d->dv;
}

/* plx. group of the fla references: q r k v -> o, relative error < 1e-5 for prefill at every
 * chunk size and for steps, raw and Welford. */
static void test_refs(void **st) {
    (void)st;
    const char *files[] = {"ops-seed11.safetensors", "ops-seed12.safetensors"};
    const char *merges[] = {"merge=raw", "merge=welford"};
    const char *chunks[] = {"chunk=16", "chunk=32", "chunk=64"};
    double worst = 0, gpu = 0;
    for (int f = 0; f < 2; f++) {
        char path[512];
        st_file *sf = NULL;
        err e = {{0}};
        if (st_open(&sf, ref_path(path, sizeof path, files[f]), &e)) fail_msg("%s", e.msg);
        const tensor *tq = st_find(sf, "plx.q"), *tv = st_find(sf, "plx.v");
        assert_non_null(tq), assert_non_null(tv);
        prob d = {.H = (int)tq->shape[2],
                  .dk = (int)tq->shape[3],
                  .dv = (int)tv->shape[3],
                  .P = 0,
                  .T = (int)tq->shape[1]};
        int64_t n;
        d.q = st_get_f32(sf, "plx.q", NULL), d.r = st_get_f32(sf, "plx.r", NULL);
        d.k = st_get_f32(sf, "plx.k", NULL), d.v = st_get_f32(sf, "plx.v", NULL);
        float *ref = st_get_f32(sf, "plx.o", &n), *og = st_get_f32(sf, "plx.o_gpu", NULL);
        assert_int_equal(n, (int64_t)onum(&d));
        float *o = malloc((size_t)n * sizeof *o);
        for (int mg = 0; mg < 2; mg++)
            for (int ch = 0; ch < 3; ch++) {
                const char *args[] = {merges[mg], chunks[ch], NULL};
                mixer_cfg c;
                cfg(&mixer_parallax, &c, &d, args);
                for (int steps = 0; steps < 2; steps++) {
                    run(&mixer_parallax, &c, &d, steps, o, NULL);
                    double er = rel_err(o, ref, (size_t)n);
                    assert_true(er < 1e-5);
                    worst = fmax(worst, er);
                }
            }
        /* the quadratic form in double agrees with fla's float32 naive form too */
        mixer_cfg c;
        cfg(&mixer_parallax, &c, &d, NULL);
        double *od = malloc((size_t)n * sizeof *od);
        ref_attend(&c, &d, 1, od);
        for (int i = 0; i < n; i++) o[i] = (float)od[i];
        assert_true(rel_err(o, ref, (size_t)n) < 1e-5);
        gpu = fmax(gpu, rel_err(og, ref, (size_t)n));
        free(od), free(o), free(ref), free(og);
        d.k0 = d.v0 = NULL;
        pb_free(&d);
        st_close(sf);
    }
    /* the Triton output is the bf16/tf32 drift the README quotes, far above ours */
    assert_true(gpu > 1e-4);
    print_message("plx refs: max rel err %.3g (fla gpu kernel %.3g)\n", worst, gpu);
}

/* prefill == steps == double reference, T in {1, 63, 64, 65, 200}, every chunk, with a pre-filled
 * cache of 37 tokens (the non-zero initial state), raw and Welford, with and without RoPE. */
static void test_prefill_equals_steps(void **st) {
    (void)st;
    const int Ts[] = {1, 63, 64, 65, 200};
    const char *chunks[] = {"chunk=16", "chunk=32", "chunk=64"};
    const char *merges[] = {"merge=raw", "merge=welford"};
    const char *ropes[] = {"rope=0", "rope=1"};
    double wpath = 0, wref = 0;
    for (int ti = 0; ti < 5; ti++) {
        prob d;
        pb_make(&d, 2, 16, 12, 37, Ts[ti], 100 + ti, 0.3);
        size_t n = onum(&d);
        float *o1 = malloc(n * sizeof *o1), *o2 = malloc(n * sizeof *o2);
        double *od = malloc(n * sizeof *od);
        for (int ro = 0; ro < 2; ro++) {
            mixer_cfg c;
            const char *a0[] = {ropes[ro], NULL};
            cfg(&mixer_parallax, &c, &d, a0);
            ref_attend(&c, &d, 1, od);
            for (int mg = 0; mg < 2; mg++)
                for (int ch = 0; ch < 3; ch++) {
                    const char *args[] = {ropes[ro], merges[mg], chunks[ch], NULL};
                    cfg(&mixer_parallax, &c, &d, args);
                    run(&mixer_parallax, &c, &d, 0, o1, NULL);
                    run(&mixer_parallax, &c, &d, 1, o2, NULL);
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

/* A cache written directly (not by step) is attended by prefill and step from pos0 = P. Without
 * the cached tokens the output must differ, so the test sees that they are read. */
static void test_prefilled_cache(void **st) {
    (void)st;
    prob d;
    pb_make(&d, 3, 8, 10, 50, 20, 7, 0.5);
    size_t n = onum(&d);
    float *o = malloc(n * sizeof *o), *o0 = malloc(n * sizeof *o0);
    double *od = malloc(n * sizeof *od);
    const char *args[] = {"rope=1", "chunk=16", NULL};
    mixer_cfg c;
    cfg(&mixer_parallax, &c, &d, args);
    ref_attend(&c, &d, 1, od);
    double worst = 0;
    for (int steps = 0; steps < 2; steps++) {
        run(&mixer_parallax, &c, &d, steps, o, NULL);
        worst = fmax(worst, rel_err_d(o, od, n));
    }
    assert_true(worst < 1e-5);
    print_message("pre-filled cache: max rel err vs double %.3g\n", worst);
    /* the same tokens from an empty cache at the same positions: other numbers */
    float *s = malloc(mixer_parallax.state_floats(&c) * sizeof *s);
    mixer_parallax.state_init(&c, s);
    mixer_seq x = seq(&d);
    mixer_parallax.prefill(&c, s, &x, d.P, o0);
    assert_true(rel_err(o0, o, n) > 1e-2);
    free(s), free(o), free(o0), free(od);
    pb_free(&d);
}

/* RoPE across a decode offset: prefill of the first T0 tokens then steps == one prefill of all ==
 * double reference (positions continue from P). */
static void test_rope_decode_offset(void **st) {
    (void)st;
    prob d;
    pb_make(&d, 2, 16, 8, 5, 90, 21, 0.3);
    size_t n = onum(&d), ht = (size_t)d.H * d.dv;
    float *oa = malloc(n * sizeof *oa), *ob = malloc(n * sizeof *ob);
    double *od = malloc(n * sizeof *od);
    const char *args[] = {"rope=1", "theta=500", "chunk=32", NULL};
    mixer_cfg c;
    cfg(&mixer_parallax, &c, &d, args);
    ref_attend(&c, &d, 1, od);
    run(&mixer_parallax, &c, &d, 0, oa, NULL);
    const int T0 = 41;
    float *s = state_new(&mixer_parallax, &c, &d);
    mixer_seq x = seq(&d), x0 = x;
    x0.T = T0;
    mixer_parallax.prefill(&c, s, &x0, d.P, ob);
    for (int t = T0; t < d.T; t++) {
        mixer_tok xt = mixer_seq_at(&c, &x, t);
        mixer_parallax.step(&c, s, &xt, d.P + t, ob + t * ht, NULL);
    }
    double e1 = rel_err(ob, oa, n), e2 = rel_err_d(oa, od, n);
    assert_true(e1 < 1e-5 && e2 < 1e-5);
    /* the positions matter: without RoPE the outputs are different */
    const char *norope[] = {"chunk=32", NULL};
    cfg(&mixer_parallax, &c, &d, norope);
    run(&mixer_parallax, &c, &d, 0, ob, NULL);
    assert_true(rel_err(ob, oa, n) > 1e-2);
    print_message("rope decode offset: prefill+steps vs prefill %.3g, vs double %.3g\n", e1, e2);
    free(s), free(oa), free(ob), free(od);
    pb_free(&d);
}

/* Sliding window: both forms == double reference for windows below, at and above the tiles. */
static void test_window(void **st) {
    (void)st;
    prob d;
    pb_make(&d, 2, 8, 8, 30, 130, 33, 0.4);
    size_t n = onum(&d);
    float *o = malloc(n * sizeof *o), *of = malloc(n * sizeof *of);
    double *od = malloc(n * sizeof *od);
    const char *wins[] = {"window=1", "window=7", "window=16", "window=45", "window=1000"};
    double worst = 0;
    const char *chunks[] = {"chunk=16", "chunk=64"};
    mixer_cfg c;
    cfg(&mixer_parallax, &c, &d, NULL);
    run(&mixer_parallax, &c, &d, 0, of, NULL);
    for (int w = 0; w < 5; w++)
        for (int ch = 0; ch < 2; ch++) {
            const char *args[] = {wins[w], chunks[ch], "rope=1", NULL};
            cfg(&mixer_parallax, &c, &d, args);
            ref_attend(&c, &d, 1, od);
            for (int steps = 0; steps < 2; steps++) {
                run(&mixer_parallax, &c, &d, steps, o, NULL);
                worst = fmax(worst, rel_err_d(o, od, n));
            }
        }
    assert_true(worst < 1e-5);
    print_message("windows: max rel err vs double %.3g\n", worst);
    /* window=1: each token sees only itself, p = a = 1, o_t = v_t */
    const char *one[] = {"window=1", NULL};
    cfg(&mixer_parallax, &c, &d, one);
    run(&mixer_parallax, &c, &d, 0, o, NULL);
    assert_true(rel_err(o, d.v, n) < 1e-6);
    /* a window longer than the sequence is no window */
    const char *big[] = {"window=1000", NULL};
    cfg(&mixer_parallax, &c, &d, big);
    run(&mixer_parallax, &c, &d, 0, o, NULL);
    assert_true(rel_err(o, of, n) == 0);
    free(o), free(of), free(od);
    pb_free(&d);
}

/* W_R = 0 (r = 0) gives softmax attention: exactly with the raw merge, to rounding with Welford. */
static void test_r_zero_is_softmax(void **st) {
    (void)st;
    prob d;
    pb_make(&d, 2, 16, 16, 10, 75, 5, 0.0);
    size_t n = onum(&d);
    for (size_t i = 0; i < (size_t)d.T * d.H * d.dk; i++) assert_true(d.r[i] == 0.0f);
    float *op = malloc(n * sizeof *op), *os = malloc(n * sizeof *os);
    for (int steps = 0; steps < 2; steps++) {
        const char *args[] = {"rope=1", "chunk=16", NULL};
        const char *wargs[] = {"rope=1", "chunk=16", "merge=welford", NULL};
        mixer_cfg cp, cs, cw;
        cfg(&mixer_parallax, &cp, &d, args);
        cfg(&mixer_softmax, &cs, &d, args);
        cfg(&mixer_parallax, &cw, &d, wargs);
        run(&mixer_parallax, &cp, &d, steps, op, NULL);
        run(&mixer_softmax, &cs, &d, steps, os, NULL);
        assert_true(rel_err(op, os, n) == 0);
        run(&mixer_parallax, &cw, &d, steps, op, NULL);
        double ew = rel_err(op, os, n);
        assert_true(ew < 1e-6);
        print_message("r = 0: raw == softmax exactly; welford vs softmax %.3g\n", ew);
    }
    /* and a non-zero r changes the output */
    trng g = {9};
    trng_fill(&g, d.r, (size_t)d.T * d.H * d.dk, 0.3);
    mixer_cfg cp;
    cfg(&mixer_parallax, &cp, &d, NULL);
    run(&mixer_parallax, &cp, &d, 0, op, NULL);
    assert_true(rel_err(op, os, n) > 1e-2);
    free(op), free(os);
    pb_free(&d);
}

/* The centred merge equals the raw form, and is the accurate one when the probe scores share a
 * large offset (u_j = 300 + O(1)): the raw form's O2/d1 - ubar vbar then cancels (measured: raw
 * about 2e-5, Welford about 2e-7). */
static void test_welford_merge(void **st) {
    (void)st;
    prob d;
    pb_make(&d, 1, 16, 8, 0, 150, 77, 0.3);
    size_t n = onum(&d);
    float *or_ = malloc(n * sizeof *or_), *ow = malloc(n * sizeof *ow);
    double *od = malloc(n * sizeof *od);
    const char *raw[] = {"merge=raw", "chunk=32", NULL},
               *wel[] = {"merge=welford", "chunk=32", NULL};
    mixer_cfg cr, cw;
    cfg(&mixer_parallax, &cr, &d, raw);
    cfg(&mixer_parallax, &cw, &d, wel);
    run(&mixer_parallax, &cr, &d, 0, or_, NULL);
    run(&mixer_parallax, &cw, &d, 0, ow, NULL);
    double eq = rel_err(ow, or_, n);
    assert_true(eq < 1e-5);
    /* probe r = 300 e0 and keys with k[0] = 1 + m/1024 (m a small integer), so every u_j =
     * 300 + 300 m/1024 is exact in float and only the merge can lose digits */
    trng g = {78};
    for (int t = 0; t < d.T; t++) {
        float *kt = d.k + (size_t)t * d.dk, *rt = d.r + (size_t)t * d.dk;
        kt[0] = 1.0f + (float)(int)(16.0 * trng_uniform(&g)) / 1024.0f;
        memset(rt, 0, (size_t)d.dk * sizeof *rt);
        rt[0] = 300.0f;
    }
    cfg(&mixer_parallax, &cr, &d, raw);
    ref_attend(&cr, &d, 1, od);
    run(&mixer_parallax, &cr, &d, 0, or_, NULL);
    run(&mixer_parallax, &cw, &d, 0, ow, NULL);
    double er = rel_err_d(or_, od, n), ew = rel_err_d(ow, od, n);
    assert_true(ew < 1e-6);
    assert_true(er > 10 * ew);
    print_message("welford == raw: %.3g; offset probe scores: raw %.3g, welford %.3g\n", eq, er,
                  ew);
    free(or_), free(ow), free(od);
    pb_free(&d);
}

/* The effective weights: sum to 1, reproduce o from the cache's values, match the double form;
 * with r = NULL they are the softmax weights. */
static void test_effective_weights(void **st) {
    (void)st;
    prob d;
    pb_make(&d, 2, 16, 6, 12, 60, 15, 0.5);
    const char *args[] = {"rope=1", "window=40", NULL};
    mixer_cfg c;
    cfg(&mixer_parallax, &c, &d, args);
    size_t n = onum(&d), N = (size_t)d.P + d.T;
    float *o = malloc(n * sizeof *o), *p = malloc(N * sizeof *p), *a = malloc(N * sizeof *a);
    double *K = malloc(N * d.dk * sizeof *K), *V = malloc(N * d.dv * sizeof *V);
    double *pr = malloc(N * sizeof *pr), *ar = malloc(N * sizeof *ar), or_[16];
    float *s = state_new(&mixer_parallax, &c, &d);
    mixer_seq x = seq(&d);
    mixer_run_steps(&mixer_parallax, &c, s, &x, d.P, o, NULL);
    const int ts[] = {0, 1, 27, 45, 59};
    double neg = 0, wsum = 0, wo = 0, wa = 0;
    for (int h = 0; h < d.H; h++) {
        ref_kv(&c, &d, h, K, V);
        for (int k = 0; k < 5; k++) {
            int t = ts[k], pos = d.P + t;
            const float *q = d.q + ((size_t)t * d.H + h) * d.dk,
                        *r = d.r + ((size_t)t * d.H + h) * d.dk;
            assert_int_equal(parallax_effective_weights(&c, s, q, r, pos, h, p, a), 0);
            ref_row(&c, &d, K, V, t, h, 1, pr, ar, or_);
            double sa = 0, sp = 0, ov[16] = {0};
            for (int j = 0; j <= pos; j++) {
                sa += a[j], sp += p[j];
                neg += a[j] < 0 ? -a[j] : 0;
                const float *v = s + attn_v_offset(&c, j, h);
                for (int i = 0; i < d.dv; i++) ov[i] += a[j] * v[i];
                if (j < attn_first_key(&c, pos)) assert_true(a[j] == 0 && p[j] == 0);
            }
            assert_true(fabs(sa - 1) < 1e-5 && fabs(sp - 1) < 1e-5);
            float ovf[16];
            for (int i = 0; i < d.dv; i++) ovf[i] = (float)ov[i];
            double eo = rel_err(ovf, o + ((size_t)t * d.H + h) * d.dv, d.dv);
            double ea = rel_err_d(a, ar, pos + 1);
            assert_true(eo < 1e-5 && ea < 1e-5 && rel_err_d(p, pr, pos + 1) < 1e-5);
            wsum = fmax(wsum, fabs(sa - 1)), wo = fmax(wo, eo), wa = fmax(wa, ea);
            /* r = NULL: the softmax row, a = p */
            assert_int_equal(parallax_effective_weights(&c, s, q, NULL, pos, h, NULL, a), 0);
            assert_true(rel_err(a, p, pos + 1) == 0);
        }
    }
    assert_true(neg > 0); /* this data has negative weights: the test sees them */
    print_message("effective weights: |sum a - 1| %.3g, sum a v vs o %.3g, a vs double %.3g\n",
                  wsum, wo, wa);
    assert_int_equal(parallax_effective_weights(&c, s, d.q, d.r, c.max_t, 0, p, a), -1);
    free(s), free(o), free(p), free(a), free(K), free(V), free(pr), free(ar);
    pb_free(&d);
}

/* The attention-row snapshots of mixers/record.h: after T steps the ring holds the last
 * RECORD_ATTN_Q rows, each the effective weights of its query over RECORD_ATTN_K keys ending on
 * the diagonal, NaN where the query sees nothing (before 0, outside the window); a run that starts
 * again at position 0 empties the ring first; other mixers record nothing. */
static void test_record_attn(void **st) {
    (void)st;
    const int Q = RECORD_ATTN_Q, K = RECORD_ATTN_K;
    prob d;
    pb_make(&d, 2, 8, 6, 0, 200, 77, 0.5);
    const char *args[] = {"rope=1", "window=100", NULL};
    mixer_cfg c;
    cfg(&mixer_parallax, &c, &d, args);
    trace tr;
    trace_init(&tr);
    err e = {{0}};
    assert_int_equal(probe_register_attn(&tr, &mixer_parallax, &c, 1, &e), 0);
    const int ka = trace_find_snapshot(&tr, "attn_a"), kp = trace_find_snapshot(&tr, "attn_pos");
    assert_true(ka >= 0 && kp >= 0);
    float *s = state_new(&mixer_parallax, &c, &d), o[2 * 6], full[256];
    for (int pass = 0; pass < 2; pass++) {
        const int T = pass == 0 ? d.T : 10; /* the second run: 10 tokens from position 0 again */
        mixer_parallax.state_init(&c, s);
        for (int t = 0; t < T; t++) {
            mixer_tok x = {{0}};
            x.in[IN_Q] = d.q + (size_t)t * d.H * d.dk, x.in[IN_R] = d.r + (size_t)t * d.H * d.dk;
            x.in[IN_K] = d.k + (size_t)t * d.H * d.dk, x.in[IN_V] = d.v + (size_t)t * d.H * d.dv;
            mixer_parallax.step(&c, s, &x, t, o, NULL);
            probe_record_attn(&tr, &mixer_parallax, &c, s, &x, t, 0);
        }
        assert_int_equal(tr.snaps[ka].t, T - 1);
        double worst = 0;
        int nan_window = 0;
        for (int h = 0; h < d.H; h++) {
            const float *A = trace_snapshot_at(&tr, ka, 0, h),
                        *P = trace_snapshot_at(&tr, kp, 0, h);
            for (int i = 0; i < Q; i++) {
                const int want = pass == 0 ? T - Q + (i - (T - Q) % Q + Q) % Q : (i < T ? i : -1);
                assert_int_equal((int)P[i], want);
            }
            for (int qp = T > Q ? T - Q : 0; qp < T; qp++) {
                const float *row = A + (size_t)(qp % Q) * K;
                const float *q = d.q + ((size_t)qp * d.H + h) * d.dk,
                            *r = d.r + ((size_t)qp * d.H + h) * d.dk;
                assert_int_equal(parallax_effective_weights(&c, s, q, r, qp, h, NULL, full), 0);
                const int first = attn_first_key(&c, qp);
                double sum = 0;
                for (int col = 0; col < K; col++) {
                    const int j = qp - (K - 1) + col;
                    if (j < 0 || j < first) {
                        assert_true(isnan(row[col]));
                        nan_window += j >= 0;
                    } else {
                        assert_true(row[col] == full[j]);
                        sum += row[col];
                    }
                }
                worst = fmax(worst, fabs(sum - 1)); /* the window (100) fits in K: whole rows */
            }
        }
        assert_true(worst < 1e-5);
        if (pass == 0) assert_true(nan_window > 0);
        print_message("attention rows, run %d: |sum a - 1| %.3g, %d keys outside the window\n",
                      pass, worst, nan_window);
    }
    /* no snapshots for a mixer that is not attention */
    trace t2;
    trace_init(&t2);
    mixer_cfg cg;
    const mixer_ops *gdn = mixer_find("gdn");
    assert_non_null(gdn);
    opts none = {0};
    assert_int_equal(mixer_configure(gdn, &cg, 2, 8, 6, &none, &e), 0);
    assert_int_equal(probe_register_attn(&t2, gdn, &cg, 1, &e), 0);
    assert_int_equal(trace_find_snapshot(&t2, "attn_a"), -1);
    trace_free(&t2), trace_free(&tr);
    free(s);
    pb_free(&d);
}

/* LLA beside Parallax (mixers/lla.h) against the spec's other route (B.1): rho* = A^-1 delta with
 * A = sum p z z^T + lambda I, z = k - q, the weights l_j = p_j (1 - z_j.rho*) / (1 - delta.rho*),
 * o_LLA = sum l_j v_j and eta = delta.rho* / (1 - delta.rho*); Parallax's output from its effective
 * weights; a huge ridge gives softmax back. */
static void lla_reference(const mixer_cfg *c, const float *s, const float *q, int pos, int h,
                          double lambda, double *o, double *eta) {
    const int dk = c->dk, dv = c->dv, first = attn_first_key(c, pos), n = pos - first + 1;
    double p[256], A[16 * 16] = {0}, delta[16] = {0}, x[16], m = -INFINITY, sum = 0;
    assert_true(n <= 256 && dk <= 16);
    for (int j = 0; j < n; j++) {
        const float *k = s + attn_k_offset(c, first + j, h);
        double d = 0;
        for (int i = 0; i < dk; i++) d += (double)q[i] * k[i];
        p[j] = c->scale * d, m = fmax(m, p[j]);
    }
    for (int j = 0; j < n; j++) p[j] = exp(p[j] - m), sum += p[j];
    for (int j = 0; j < n; j++) {
        const float *k = s + attn_k_offset(c, first + j, h);
        p[j] /= sum;
        for (int a = 0; a < dk; a++) {
            delta[a] += p[j] * ((double)k[a] - q[a]);
            for (int b = 0; b < dk; b++)
                A[a * dk + b] += p[j] * ((double)k[a] - q[a]) * ((double)k[b] - q[b]);
        }
    }
    for (int a = 0; a < dk; a++) A[a * dk + a] += lambda, x[a] = delta[a];
    /* Gaussian elimination with partial pivoting (a different solver from the module's) */
    for (int col = 0; col < dk; col++) {
        int piv = col;
        for (int i = col + 1; i < dk; i++)
            if (fabs(A[i * dk + col]) > fabs(A[piv * dk + col])) piv = i;
        for (int b = 0; b < dk; b++) {
            double tmp = A[col * dk + b];
            A[col * dk + b] = A[piv * dk + b], A[piv * dk + b] = tmp;
        }
        double tmp = x[col];
        x[col] = x[piv], x[piv] = tmp;
        for (int i = col + 1; i < dk; i++) {
            const double f = A[i * dk + col] / A[col * dk + col];
            for (int b = col; b < dk; b++) A[i * dk + b] -= f * A[col * dk + b];
            x[i] -= f * x[col];
        }
    }
    for (int i = dk - 1; i >= 0; i--) {
        double t = x[i];
        for (int b = i + 1; b < dk; b++) t -= A[i * dk + b] * x[b];
        x[i] = t / A[i * dk + i];
    }
    double dr = 0;
    for (int a = 0; a < dk; a++) dr += delta[a] * x[a];
    *eta = dr / (1 - dr);
    for (int i = 0; i < dv; i++) o[i] = 0;
    for (int j = 0; j < n; j++) {
        const float *k = s + attn_k_offset(c, first + j, h),
                    *v = s + attn_v_offset(c, first + j, h);
        double zr = 0;
        for (int a = 0; a < dk; a++) zr += ((double)k[a] - q[a]) * x[a];
        const double l = p[j] * (1 - zr) / (1 - dr);
        for (int i = 0; i < dv; i++) o[i] += l * v[i];
    }
}

static void test_lla(void **st) {
    (void)st;
    prob d;
    pb_make(&d, 2, 8, 6, 0, 90, 23, 0.7);
    const char *args[] = {"rope=0", "window=50", NULL};
    mixer_cfg c;
    cfg(&mixer_parallax, &c, &d, args);
    float *s = state_new(&mixer_parallax, &c, &d), o[2 * 6], a[128];
    mixer_seq x = seq(&d);
    float *out = malloc((size_t)d.T * d.H * d.dv * sizeof *out);
    mixer_run_steps(&mixer_parallax, &c, s, &x, 0, out, NULL);
    (void)o;
    const int ts[] = {0, 3, 40, 89};
    const double lambdas[] = {1e-2, 0.3};
    double worst_o = 0, worst_eta = 0, worst_gap = 0;
    for (int li = 0; li < 2; li++)
        for (int h = 0; h < d.H; h++)
            for (int k = 0; k < 4; k++) {
                const int pos = ts[k];
                const float *q = d.q + ((size_t)pos * d.H + h) * d.dk,
                            *r = d.r + ((size_t)pos * d.H + h) * d.dk;
                attn_lla st_;
                double ol[6], ref[6], eta;
                assert_int_equal(attn_lla_stats(&c, s, q, r, pos, h, lambdas[li], &st_, ol), 0);
                lla_reference(&c, s, q, pos, h, lambdas[li], ref, &eta);
                double num = 0, den = 0;
                for (int i = 0; i < d.dv; i++) num += (ol[i] - ref[i]) * (ol[i] - ref[i]);
                for (int i = 0; i < d.dv; i++) den += ref[i] * ref[i];
                worst_o = fmax(worst_o, sqrt(num / den));
                worst_eta = fmax(worst_eta, fabs(st_.eta - eta) / fmax(eta, 1e-12));
                /* one visible key (position 0): no covariance, CPA undefined */
                assert_true(st_.eta >= 0);
                if (pos == 0)
                    assert_true(isnan(st_.cpa));
                else
                    assert_true(st_.cpa >= 0 && st_.cpa <= 1 + 1e-9);
                assert_true(fabs(st_.cos) <= 1 + 1e-12);
                /* Parallax's output from its effective weights: the gap to LLA */
                assert_int_equal(parallax_effective_weights(&c, s, q, r, pos, h, NULL, a), 0);
                double op[6] = {0}, g = 0, n2 = 0;
                for (int j = 0; j <= pos; j++)
                    for (int i = 0; i < d.dv; i++) op[i] += a[j] * s[attn_v_offset(&c, j, h) + i];
                for (int i = 0; i < d.dv; i++) g += (ol[i] - op[i]) * (ol[i] - op[i]);
                for (int i = 0; i < d.dv; i++) n2 += op[i] * op[i];
                worst_gap = fmax(worst_gap, fabs(st_.gap - sqrt(g / n2)) / sqrt(g / n2));
                /* no probe: the Parallax quantities are NaN, the rest as before */
                attn_lla sn;
                assert_int_equal(attn_lla_stats(&c, s, q, NULL, pos, h, lambdas[li], &sn, NULL), 0);
                assert_true(isnan(sn.cos) && isnan(sn.cpa) && isnan(sn.gap));
                assert_true(sn.eta == st_.eta && sn.gap_sa == st_.gap_sa);
            }
    assert_true(worst_o < 1e-9 && worst_eta < 1e-9 && worst_gap < 1e-5);
    /* a huge ridge: rho_c -> 0, eta -> 0, o_LLA -> o_SA */
    attn_lla big;
    assert_int_equal(attn_lla_stats(&c, s, d.q, d.r, 0, 0, 1e12, &big, NULL), 0);
    assert_true(big.eta < 1e-9 && big.gap_sa < 1e-9);
    attn_lla bad;
    assert_int_equal(attn_lla_stats(&c, s, d.q, d.r, c.max_t, 0, 0.1, &bad, NULL), -1);
    assert_int_equal(attn_lla_stats(&c, s, d.q, d.r, 5, 0, 0, &bad, NULL), -1);
    print_message("LLA: two routes to o_LLA %.3g, eta %.3g; gap to Parallax vs its weights %.3g\n",
                  worst_o, worst_eta, worst_gap);
    free(s), free(out);
    pb_free(&d);
}

/* `set lla` in a session: the five series appear and fill for every token and head of a Parallax
 * model; off (the default) records none; a bad ridge is refused. */
static void test_lla_session(void **st) {
    (void)st;
    err e = {{0}};
    for (int on = 0; on <= 1; on++) {
        tsession t;
        ts_open(&t);
        assert_int_equal(ts_exec(&t, &e, "model random parallax layers=2 hidden=32 heads=2"), 0);
        if (on) assert_int_equal(ts_exec(&t, &e, "set lla 0.05"), 0);
        assert_int_equal(ts_exec(&t, &e, "prompt 'local linear attention'"), 0);
        assert_int_equal(ts_exec(&t, &e, "run"), 0);
        const char *names[] = {"lla_eta", "lla_cos", "cpa", "lla_gap", "lla_gap_sa"};
        for (int i = 0; i < 5; i++) {
            int k = trace_find(&t.s.eng.tr, names[i]);
            if (!on) {
                assert_int_equal(k, -1);
                continue;
            }
            assert_true(k >= 0);
            for (int64_t tok = 1; tok < t.s.eng.tr.T; tok++)
                for (int l = 0; l < 2; l++)
                    for (int h = 0; h < 2; h++)
                        assert_true(isfinite(*trace_at_lh(&t.s.eng.tr, k, tok, l, h)));
        }
        if (on) {
            assert_int_equal(ts_exec(&t, &e, "set lla -1"), -1);
            assert_int_equal(ts_exec(&t, &e, "set lla off"), 0);
        }
        ts_close(&t);
    }
}

/* Every probe against its definition, from the double quadratic form, on a few tokens. */
static void test_probes(void **st) {
    (void)st;
    prob d;
    pb_make(&d, 2, 8, 6, 0, 70, 41, 0.6);
    size_t N = (size_t)d.T, ht = (size_t)d.H * d.dv;
    const char *wa[] = {"rope=1", NULL}, *wb[] = {"rope=1", "window=20", "merge=welford", NULL};
    const char *const *argsets[] = {wa, wb};
    double worst = 0;
    for (int as = 0; as < 2; as++) {
        mixer_cfg c;
        cfg(&mixer_parallax, &c, &d, argsets[as]);
        size_t np = mixer_probe_floats(&mixer_parallax, &c);
        assert_int_equal(np, (size_t)ATTN_NPROBES * d.H);
        float *o = malloc(N * ht * sizeof *o), *pb = malloc(N * np * sizeof *pb);
        run(&mixer_parallax, &c, &d, 1, o, pb);
        double *K = malloc(N * d.dk * sizeof *K), *V = malloc(N * d.dv * sizeof *V);
        double *p = malloc(N * sizeof *p), *a = malloc(N * sizeof *a), or_[6];
        const int ts[] = {0, 1, 19, 20, 69};
        for (int h = 0; h < d.H; h++) {
            ref_kv(&c, &d, h, K, V);
            for (int k = 0; k < 5; k++) {
                int t = ts[k], first = attn_first_key(&c, t), nk = t - first + 1;
                double ubar = ref_row(&c, &d, K, V, t, h, 1, p, a, or_);
                double ent = 0, pmax = 0, amin = INFINITY, amax = -INFINITY, neg = 0;
                double vb[6] = {0}, cr[6] = {0}, sa = 0, cn = 0, on = 0, rn = 0;
                for (int j = first; j <= t; j++) {
                    ent -= p[j] > 0 ? p[j] * log(p[j]) : 0;
                    pmax = fmax(pmax, p[j]);
                    amin = fmin(amin, a[j]), amax = fmax(amax, a[j]);
                    neg += a[j] < 0 ? -a[j] : 0;
                    for (int i = 0; i < d.dv; i++) vb[i] += p[j] * V[(size_t)j * d.dv + i];
                }
                for (int j = first; j <= t; j++)
                    for (int i = 0; i < d.dv; i++)
                        cr[i] += (p[j] - a[j]) * V[(size_t)j * d.dv + i]; /* p (u - ubar) v */
                for (int i = 0; i < d.dv; i++)
                    sa += vb[i] * vb[i], cn += cr[i] * cr[i], on += or_[i] * or_[i];
                const float *r = d.r + ((size_t)t * d.H + h) * d.dk;
                for (int i = 0; i < d.dk; i++) rn += (double)r[i] * r[i];
                double want[ATTN_NPROBES] = {
                    [ATTN_P_ENTROPY] = ent,
                    [ATTN_P_ENTROPY_NORM] = nk > 1 ? ent / log(nk) : 0,
                    [ATTN_P_MAX_WEIGHT] = pmax,
                    [ATTN_P_SINK_P] = p[0],
                    [ATTN_P_O_NORM] = sqrt(on),
                    [ATTN_P_SA_NORM] = sqrt(sa),
                    [ATTN_P_CORR_NORM] = sqrt(cn),
                    [ATTN_P_COR] = sqrt(cn) / sqrt(sa),
                    [ATTN_P_R_NORM] = sqrt(rn),
                    [ATTN_P_U_BAR] = ubar,
                    [ATTN_P_A_MIN] = amin,
                    [ATTN_P_A_MAX] = amax,
                    [ATTN_P_NEG_MASS] = neg,
                    [ATTN_P_SINK_A] = a[0],
                };
                for (int i = 0; i < ATTN_NPROBES; i++) {
                    double got = pb[(size_t)t * np + (size_t)i * d.H + h];
                    double tol = 2e-5 * (1 + fabs(want[i]));
                    if (!(fabs(got - want[i]) <= tol))
                        fail_msg("t=%d h=%d probe %s: %g, want %g", t, h,
                                 mixer_parallax.probes[i].name, got, want[i]);
                    worst = fmax(worst, fabs(got - want[i]) / (1 + fabs(want[i])));
                }
            }
        }
        /* window=20 at t=69: token 0 is out of sight */
        if (as == 1) assert_true(pb[69 * np + ATTN_P_SINK_A * d.H] == 0.0f);
        free(o), free(pb), free(K), free(V), free(p), free(a);
    }
    print_message("probes: max error %.3g relative to 1 + |value|\n", worst);
    pb_free(&d);
}

/* Options, state size and the out-of-cache guard. */
static void test_config_and_state(void **st) {
    (void)st;
    prob d = {.H = 2, .dk = 7, .dv = 5, .P = 0, .T = 1};
    mixer_cfg c;
    err e = {{0}};
    opts o;
    const char *bad[][1] = {{"chunk=8"}, {"rope=1"},  {"merge=fancy"}, {"window=-1"},
                            {"scale=0"}, {"max_t=0"}, {"theta=-1"},    {"rope=2"}};
    for (int i = 0; i < 8; i++) {
        assert_int_equal(opts_parse(&o, 1, (char *const *)bad[i], &e), 0);
        assert_int_equal(mixer_configure(&mixer_parallax, &c, d.H, d.dk, d.dv, &o, &e), -1);
        opts_free(&o);
    }
    const char *mt[] = {"max_t=9", NULL};
    cfg(&mixer_parallax, &c, &d, NULL);
    assert_true(fabsf(c.scale - 1.0f / sqrtf(7.0f)) < 1e-7f && c.variant == ATTN_MERGE_RAW);
    assert_int_equal(mixer_configure(&mixer_parallax, &c, 2, 700, 5, NULL, &e), 0);
    assert_int_equal(mixer_configure(&mixer_parallax, &c, 2, 2000, 5, NULL, &e), -1);
    assert_int_equal(opts_parse(&o, 1, (char *const *)mt, &e), 0);
    assert_int_equal(mixer_configure(&mixer_parallax, &c, 2, 7, 5, &o, &e), 0);
    opts_free(&o);
    assert_int_equal(c.max_t, 9);
    assert_int_equal(mixer_parallax.state_floats(&c), (size_t)9 * 2 * (7 + 5));
    state_part parts[MIXER_MAX_STATE_PARTS];
    assert_int_equal(mixer_parallax.state_parts(&c, parts), 0);
    /* a position past the cache answers zeros and leaves the cache alone */
    float s[9 * 2 * 12], s0[9 * 2 * 12], q[14], k[14], v[10], o1[10];
    trng g = {3};
    trng_fill(&g, s, 9 * 2 * 12, 1.0);
    trng_fill(&g, q, 14, 1.0), trng_fill(&g, k, 14, 1.0), trng_fill(&g, v, 10, 1.0);
    memcpy(s0, s, sizeof s);
    mixer_tok x = {{0}};
    x.in[IN_Q] = q, x.in[IN_R] = q, x.in[IN_K] = k, x.in[IN_V] = v;
    for (int i = 0; i < 10; i++) o1[i] = 1.0f;
    mixer_parallax.step(&c, s, &x, 9, o1, NULL);
    for (int i = 0; i < 10; i++) assert_true(o1[i] == 0.0f);
    assert_memory_equal(s, s0, sizeof s);
    /* and a prefill that runs past it fills what fits: the slot written at pos 8 holds k */
    mixer_seq xs = {.T = 2};
    float q2[28], k2[28], v2[20], o2[20];
    trng_fill(&g, q2, 28, 1.0), trng_fill(&g, k2, 28, 1.0), trng_fill(&g, v2, 20, 1.0);
    xs.in[IN_Q] = q2, xs.in[IN_R] = q2, xs.in[IN_K] = k2, xs.in[IN_V] = v2;
    mixer_parallax.prefill(&c, s, &xs, 8, o2);
    assert_memory_equal(s + attn_k_offset(&c, 8, 1), k2 + 7, 7 * sizeof(float));
    for (int i = 10; i < 20; i++) assert_true(o2[i] == 0.0f);
    assert_true(o2[0] != 0.0f);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_refs),
        cmocka_unit_test(test_prefill_equals_steps),
        cmocka_unit_test(test_prefilled_cache),
        cmocka_unit_test(test_rope_decode_offset),
        cmocka_unit_test(test_window),
        cmocka_unit_test(test_r_zero_is_softmax),
        cmocka_unit_test(test_welford_merge),
        cmocka_unit_test(test_effective_weights),
        cmocka_unit_test(test_record_attn),
        cmocka_unit_test(test_lla),
        cmocka_unit_test(test_lla_session),
        cmocka_unit_test(test_probes),
        cmocka_unit_test(test_config_and_state),
    };
    return cmocka_run_group_tests_name("mixer_parallax", tests, NULL, NULL);
}
