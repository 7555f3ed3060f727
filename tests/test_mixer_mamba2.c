/* test_mixer_mamba2.c: the Mamba2 / SSD core (mixers/mamba2.c) against fla's
 * naive_recurrent_simple_gla, against a brute-force double-precision reference, prefill against
 * step, its identities and its probes. */
#include "testutil.h"

#include "mixers/mixer.h"

extern const mixer_ops mixer_mamba2;

/* Largest errors seen, printed at the end. */
static double max_ref, max_pre, max_brute, max_ident, max_probe;

static void track(double *m, double v) {
    if (v > *m) *m = v;
}

/* One test sequence, fla layout: q (C), k (B) [T, H, dk], v (Delta x) [T, H, dv], g (Delta A)
 * [T, H], h0 [H, dk, dv]. */
typedef struct seq {
    int T, H, dk, dv;
    float *q, *k, *v, *g, *h0;
} seq;

/* g = Delta A with Delta = softplus(n), A = -exp(a), n, a standard normal (Mamba2's gate). */
static seq seq_random(int T, int H, int dk, int dv, uint64_t seed) {
    seq s = {T, H, dk, dv, NULL, NULL, NULL, NULL, NULL};
    trng r = {seed * 0x9E3779B97F4A7C15ull + 1};
    size_t nk = (size_t)T * H * dk, nv = (size_t)T * H * dv, ns = (size_t)H * dk * dv;
    s.q = malloc(nk * sizeof(float)), s.k = malloc(nk * sizeof(float));
    s.v = malloc(nv * sizeof(float)), s.g = malloc((size_t)T * H * sizeof(float));
    s.h0 = malloc(ns * sizeof(float));
    assert_true(s.q && s.k && s.g && s.v && s.h0);
    trng_fill(&r, s.q, nk, 1.0);
    trng_fill(&r, s.k, nk, 1.0);
    trng_fill(&r, s.v, nv, 1.0);
    trng_fill(&r, s.h0, ns, 0.5);
    for (int i = 0; i < T * H; i++) {
        double dt = log1p(exp(trng_normal(&r) - 1.0)), A = -exp(0.5 * trng_normal(&r));
        s.g[i] = (float)(dt * A);
    }
    return s;
}

static void seq_free(seq *s) {
    free(s->q), free(s->k), free(s->v), free(s->g), free(s->h0);
}

static mixer_cfg cfg_make(int H, int dk, int dv, int chunk) {
    mixer_cfg c;
    opts o = {0};
    err e = {{0}};
    if (mixer_configure(&mixer_mamba2, &c, H, dk, dv, &o, &e)) fail_msg("configure: %s", e.msg);
    c.chunk = chunk;
    return c;
}

static mixer_seq seq_view(const seq *s) {
    mixer_seq x = {.T = s->T};
    x.in[IN_Q] = s->q, x.in[IN_K] = s->k, x.in[IN_V] = s->v, x.in[IN_G] = s->g;
    return x;
}

/* Runs the sequence through prefill (1) or repeated step (0) from h0. o [T, H, dv], state
 * [H, dk, dv]. */
static void run_form(const mixer_cfg *c, const seq *s, int prefill, float *o, float *state) {
    mixer_mamba2.state_init(c, state);
    memcpy(state, s->h0, (size_t)s->H * s->dk * s->dv * sizeof(float));
    mixer_seq x = seq_view(s);
    if (prefill)
        mixer_mamba2.prefill(c, state, &x, 0, o);
    else
        mixer_run_steps(&mixer_mamba2, c, state, &x, 0, o, NULL);
}

/* The quadratic (attention) form in double: o_t = scale [ e^{P_t} S0^T q_t +
 * sum_{j<=t} e^{P_t - P_j} (q_t . k_j) v_j ], P_t = sum_{s<=t} g_s; and the final state
 * S_T = e^{P_last} S0 + sum_j e^{P_last - P_j} k_j v_j^T. */
static void brute_force(const seq *s, double scale, double *o, double *S) {
    int T = s->T, H = s->H, dk = s->dk, dv = s->dv;
    double *P = malloc((size_t)T * sizeof *P); /* [T] */
    assert_non_null(P);
    for (int h = 0; h < H; h++) {
        for (int t = 0; t < T; t++) P[t] = (t ? P[t - 1] : 0.0) + s->g[(size_t)t * H + h];
        const float *S0 = s->h0 + (size_t)h * dk * dv; /* [dk, dv] */
        for (int t = 0; t < T; t++) {
            const float *q = s->q + ((size_t)t * H + h) * dk;
            double *ot = o + ((size_t)t * H + h) * dv;
            for (int m = 0; m < dv; m++) {
                double acc = 0;
                for (int d = 0; d < dk; d++) acc += (double)q[d] * S0[(size_t)d * dv + m];
                ot[m] = scale * exp(P[t]) * acc;
            }
            for (int j = 0; j <= t; j++) {
                double qk = 0;
                for (int d = 0; d < dk; d++)
                    qk += (double)q[d] * s->k[((size_t)j * H + h) * dk + d];
                double w = scale * exp(P[t] - P[j]) * qk;
                for (int m = 0; m < dv; m++) ot[m] += w * s->v[((size_t)j * H + h) * dv + m];
            }
        }
        double *Sh = S + (size_t)h * dk * dv;
        for (size_t n = 0; n < (size_t)dk * dv; n++) Sh[n] = exp(P[T - 1]) * S0[n];
        for (int j = 0; j < T; j++) {
            double w = exp(P[T - 1] - P[j]);
            for (int d = 0; d < dk; d++)
                for (int m = 0; m < dv; m++)
                    Sh[(size_t)d * dv + m] +=
                        w * s->k[((size_t)j * H + h) * dk + d] * s->v[((size_t)j * H + h) * dv + m];
        }
    }
    free(P);
}

/* (1) fla's naive_recurrent_simple_gla on both seeds: step and prefill with every chunk size. */
static void test_refs(void **st) {
    (void)st;
    const char *files[] = {"ops-seed11.safetensors", "ops-seed12.safetensors"};
    for (int f = 0; f < 2; f++) {
        char path[1024];
        st_file *sf;
        err e = {{0}};
        if (st_open(&sf, ref_path(path, sizeof path, files[f]), &e)) fail_msg("%s", e.msg);
        const tensor *tq = st_find(sf, "sgla.q"), *tv = st_find(sf, "sgla.v");
        const tensor *tg = st_find(sf, "sgla.g");
        assert_non_null(tq), assert_non_null(tv), assert_non_null(tg);
        int T = (int)tq->shape[1], H = (int)tq->shape[2], dk = (int)tq->shape[3];
        int dv = (int)tv->shape[3];
        assert_int_equal(T, 100), assert_int_equal(H, 2), assert_int_equal(dk, 16);
        assert_int_equal(dv, 24), assert_int_equal(tg->ndim, 3);
        seq s = {T, H, dk, dv, NULL, NULL, NULL, NULL, NULL};
        s.q = st_get_f32(sf, "sgla.q", NULL), s.k = st_get_f32(sf, "sgla.k", NULL);
        s.v = st_get_f32(sf, "sgla.v", NULL), s.g = st_get_f32(sf, "sgla.g", NULL);
        s.h0 = st_get_f32(sf, "sgla.h0", NULL);
        float *oref = st_get_f32(sf, "sgla.o", NULL), *href = st_get_f32(sf, "sgla.hT", NULL);
        size_t no = (size_t)T * H * dv, ns = (size_t)H * dk * dv;
        float *o = malloc(no * sizeof *o), *S = malloc(ns * sizeof *S);
        assert_true(o && S);
        for (int form = 0; form < 4; form++) {
            int chunk = form == 0 ? 64 : 8 << form; /* step, then prefill with 16, 32, 64 */
            mixer_cfg c = cfg_make(H, dk, dv, chunk);
            assert_float_equal(c.scale, 0.25f, 0.0f); /* fla's simple-GLA default 1/sqrt(K) */
            run_form(&c, &s, form > 0, o, S);
            double eo = rel_err(o, oref, no), eh = rel_err(S, href, ns);
            track(&max_ref, eo), track(&max_ref, eh);
            if (eo >= 1e-5 || eh >= 1e-5)
                fail_msg("%s %s chunk %d: o %.3g hT %.3g", files[f], form ? "prefill" : "step",
                         chunk, eo, eh);
        }
        free(o), free(S), free(oref), free(href);
        seq_free(&s);
        st_close(sf);
    }
}

/* Compares prefill (every chunk size) and step on s with config c (its chunk is overwritten);
 * fails above tol; returns the largest relative error. */
static double prefill_vs_steps(const seq *s, mixer_cfg c, double tol) {
    size_t no = (size_t)s->T * s->H * s->dv, ns = (size_t)s->H * s->dk * s->dv;
    float *o1 = malloc(no * sizeof *o1), *S1 = malloc(ns * sizeof *S1);
    float *o2 = malloc(no * sizeof *o2), *S2 = malloc(ns * sizeof *S2);
    assert_true(o1 && S1 && o2 && S2);
    run_form(&c, s, 0, o1, S1);
    double worst = 0;
    for (int chunk = 16; chunk <= 64; chunk *= 2) {
        c.chunk = chunk;
        run_form(&c, s, 1, o2, S2);
        for (size_t i = 0; i < no; i++) assert_true(isfinite(o2[i]));
        for (size_t i = 0; i < ns; i++) assert_true(isfinite(S2[i]));
        double eo = rel_err(o2, o1, no), es = rel_err(S2, S1, ns);
        if (eo >= tol || es >= tol)
            fail_msg("T=%d chunk %d: o %.3g state %.3g", s->T, chunk, eo, es);
        track(&worst, eo), track(&worst, es);
    }
    free(o1), free(S1), free(o2), free(S2);
    return worst;
}

/* (2) prefill == repeated step from a non-zero state, T across chunk boundaries. */
static void test_prefill_equals_steps(void **st) {
    (void)st;
    const int Ts[] = {1, 63, 64, 65, 200};
    for (int i = 0; i < 5; i++) {
        seq s = seq_random(Ts[i], 2, 12, 20, 100 + (uint64_t)i);
        track(&max_pre, prefill_vs_steps(&s, cfg_make(s.H, s.dk, s.dv, 64), 1e-5));
        seq_free(&s);
    }
}

/* Compares step and prefill (every chunk size) with config c against the double reference; fails
 * above tol. */
static double against_brute(const seq *s, mixer_cfg c, double tol) {
    size_t no = (size_t)s->T * s->H * s->dv, ns = (size_t)s->H * s->dk * s->dv;
    double *ob = malloc(no * sizeof *ob), *Sb = malloc(ns * sizeof *Sb);
    float *o = malloc(no * sizeof *o), *S = malloc(ns * sizeof *S);
    assert_true(ob && Sb && o && S);
    brute_force(s, c.scale, ob, Sb);
    double worst = 0;
    for (int form = 0; form < 4; form++) {
        c.chunk = form == 0 ? 64 : 8 << form;
        run_form(&c, s, form > 0, o, S);
        double eo = rel_err_d(o, ob, no), es = rel_err_d(S, Sb, ns);
        if (eo >= tol || es >= tol)
            fail_msg("T=%d %s chunk %d: o %.3g state %.3g", s->T, form ? "prefill" : "step",
                     c.chunk, eo, es);
        track(&worst, eo), track(&worst, es);
    }
    free(ob), free(Sb), free(o), free(S);
    return worst;
}

/* (3) the brute-force double reference, with the default scale and with Mamba2's own scale 1. */
static void test_brute_force(void **st) {
    (void)st;
    seq s = seq_random(150, 2, 16, 12, 7);
    track(&max_brute, against_brute(&s, cfg_make(s.H, s.dk, s.dv, 64), 1e-5));
    mixer_cfg c = cfg_make(s.H, s.dk, s.dv, 64);
    c.scale = 1.0f;
    track(&max_brute, against_brute(&s, c, 1e-5));
    seq_free(&s);
}

/* (4a) g = -20 everywhere: a naive chunk form with q e^{A}, k e^{-A} would need e^{1280}. The
 * prefill must stay finite and equal step, and the state keeps only the newest token:
 * o_t = scale (q_t . k_t) v_t up to e^-20 of the rest. */
static void test_strong_decay(void **st) {
    (void)st;
    seq s = seq_random(200, 2, 16, 12, 21);
    for (int i = 0; i < s.T * s.H; i++) s.g[i] = -20.0f;
    mixer_cfg c = cfg_make(s.H, s.dk, s.dv, 64);
    track(&max_ident, prefill_vs_steps(&s, c, 1e-5));
    size_t no = (size_t)s.T * s.H * s.dv, ns = (size_t)s.H * s.dk * s.dv;
    float *o = malloc(no * sizeof *o), *S = malloc(ns * sizeof *S);
    double *want = malloc(no * sizeof *want);
    assert_true(o && S && want);
    run_form(&c, &s, 1, o, S);
    for (int t = 0; t < s.T; t++)
        for (int h = 0; h < s.H; h++) {
            double qk = 0;
            for (int d = 0; d < s.dk; d++)
                qk += (double)s.q[((size_t)t * s.H + h) * s.dk + d] *
                      s.k[((size_t)t * s.H + h) * s.dk + d];
            for (int m = 0; m < s.dv; m++)
                want[((size_t)t * s.H + h) * s.dv + m] =
                    c.scale * qk * s.v[((size_t)t * s.H + h) * s.dv + m];
        }
    double e = rel_err_d(o, want, no);
    track(&max_ident, e);
    assert_true(e < 1e-6);
    free(o), free(S), free(want);
    seq_free(&s);
}

/* (4b) Mixed extremes: weak decays with isolated spikes of -300 and stretches of -20. Each factor
 * e^{A_i - A_j} is summed over its own token range, so it keeps its own precision; a difference of
 * chunk-cumulative float sums (|A| ~ 1e3) would lose ~1e-5. Hence 1e-6 here. */
static void test_mixed_decay(void **st) {
    (void)st;
    seq s = seq_random(200, 2, 16, 12, 33);
    trng r = {99};
    for (int t = 0; t < s.T; t++)
        for (int h = 0; h < s.H; h++) {
            float *g = &s.g[(size_t)t * s.H + h];
            *g *= 0.05f;
            if (trng_uniform(&r) > 0.9)
                *g = -300.0f;
            else if (t % 50 < 4)
                *g = -20.0f;
        }
    mixer_cfg c = cfg_make(s.H, s.dk, s.dv, 64);
    track(&max_ident, prefill_vs_steps(&s, c, 1e-6));
    track(&max_ident, against_brute(&s, c, 1e-6));
    seq_free(&s);
}

/* (4c) g = 0: plain causal linear attention, o_t = scale (S0^T q_t + sum_{j<=t} (q_t.k_j) v_j),
 * written out without any decay. */
static void test_no_decay_is_linear_attention(void **st) {
    (void)st;
    seq s = seq_random(70, 2, 8, 6, 5);
    memset(s.g, 0, (size_t)s.T * s.H * sizeof(float));
    size_t no = (size_t)s.T * s.H * s.dv;
    float *o = malloc(no * sizeof *o), *S = malloc((size_t)s.H * s.dk * s.dv * sizeof *S);
    double *want = calloc(no, sizeof *want);
    assert_true(o && S && want);
    mixer_cfg c = cfg_make(s.H, s.dk, s.dv, 32);
    for (int t = 0; t < s.T; t++)
        for (int h = 0; h < s.H; h++) {
            const float *q = s.q + ((size_t)t * s.H + h) * s.dk;
            double *w = want + ((size_t)t * s.H + h) * s.dv;
            for (int d = 0; d < s.dk; d++)
                for (int m = 0; m < s.dv; m++)
                    w[m] += c.scale * q[d] * s.h0[((size_t)h * s.dk + d) * s.dv + m];
            for (int j = 0; j <= t; j++) {
                double qk = 0;
                for (int d = 0; d < s.dk; d++) qk += q[d] * s.k[((size_t)j * s.H + h) * s.dk + d];
                for (int m = 0; m < s.dv; m++)
                    w[m] += c.scale * qk * s.v[((size_t)j * s.H + h) * s.dv + m];
            }
        }
    for (int form = 0; form < 2; form++) {
        run_form(&c, &s, form, o, S);
        double e = rel_err_d(o, want, no);
        track(&max_ident, e);
        assert_true(e < 1e-5);
    }
    free(o), free(S), free(want);
    seq_free(&s);
}

/* (4d) The output is linear in the query scale: scale=1 (the Mamba2 layer's) gives sqrt(dk) times
 * the default output, and the same final state. */
static void test_scale_option(void **st) {
    (void)st;
    seq s = seq_random(90, 2, 16, 8, 61);
    size_t no = (size_t)s.T * s.H * s.dv, ns = (size_t)s.H * s.dk * s.dv;
    float *o1 = malloc(no * sizeof *o1), *o2 = malloc(no * sizeof *o2);
    float *S1 = malloc(ns * sizeof *S1), *S2 = malloc(ns * sizeof *S2);
    assert_true(o1 && o2 && S1 && S2);
    mixer_cfg c;
    err e = {{0}};
    opts op = {0};
    char *one[] = {"scale=1"};
    assert_int_equal(opts_parse(&op, 1, one, &e), 0);
    assert_int_equal(mixer_configure(&mixer_mamba2, &c, s.H, s.dk, s.dv, &op, &e), 0);
    opts_free(&op);
    assert_float_equal(c.scale, 1.0f, 0.0f);
    mixer_cfg cd = cfg_make(s.H, s.dk, s.dv, 64);
    for (int form = 0; form < 2; form++) {
        run_form(&c, &s, form, o1, S1);
        run_form(&cd, &s, form, o2, S2);
        for (size_t i = 0; i < no; i++) o2[i] *= 4.0f; /* sqrt(16), exact in float */
        double eo = rel_err(o1, o2, no);
        track(&max_ident, eo);
        assert_true(eo < 1e-6);
        assert_memory_equal(S1, S2, ns * sizeof *S1);
    }
    free(o1), free(o2), free(S1), free(S2);
    seq_free(&s);
}

/* (4e) Splitting a prefill carries the state: prefill(0..77) then prefill(77..200) == one. Also a
 * token with k = 0 and g = 0 leaves the state as it was and reads it: o = scale S^T q. */
static void test_split_and_null_token(void **st) {
    (void)st;
    seq s = seq_random(200, 2, 12, 8, 55);
    size_t no = (size_t)s.T * s.H * s.dv, ns = (size_t)s.H * s.dk * s.dv, rv = (size_t)s.H * s.dv;
    float *o1 = malloc(no * sizeof *o1), *o2 = malloc(no * sizeof *o2);
    float *S1 = malloc(ns * sizeof *S1), *S2 = malloc(ns * sizeof *S2);
    assert_true(o1 && o2 && S1 && S2);
    mixer_cfg c = cfg_make(s.H, s.dk, s.dv, 32);
    run_form(&c, &s, 1, o1, S1);
    memcpy(S2, s.h0, ns * sizeof *S2);
    mixer_seq a = seq_view(&s), b = seq_view(&s);
    a.T = 77, b.T = s.T - 77;
    size_t ok = (size_t)77 * s.H * s.dk, ov = (size_t)77 * rv;
    b.in[IN_Q] += ok, b.in[IN_K] += ok, b.in[IN_V] += ov, b.in[IN_G] += (size_t)77 * s.H;
    mixer_mamba2.prefill(&c, S2, &a, 0, o2);
    mixer_mamba2.prefill(&c, S2, &b, 77, o2 + ov);
    double eo = rel_err(o2, o1, no), es = rel_err(S2, S1, ns);
    track(&max_ident, eo), track(&max_ident, es);
    assert_true(eo < 1e-6 && es < 1e-6);

    /* The null token, through step and through a one-token prefill. */
    float *k0 = calloc((size_t)s.H * s.dk, sizeof *k0), *g0 = calloc((size_t)s.H, sizeof *g0);
    float *ot = malloc(rv * sizeof *ot);
    assert_true(k0 && g0 && ot);
    for (int form = 0; form < 2; form++) {
        memcpy(S2, S1, ns * sizeof *S2);
        mixer_tok tk = {{0}};
        tk.in[IN_Q] = s.q, tk.in[IN_K] = k0, tk.in[IN_V] = s.v, tk.in[IN_G] = g0;
        mixer_seq one = {.T = 1};
        memcpy(one.in, tk.in, sizeof one.in);
        if (form)
            mixer_mamba2.prefill(&c, S2, &one, 200, ot);
        else
            mixer_mamba2.step(&c, S2, &tk, 200, ot, NULL);
        assert_memory_equal(S2, S1, ns * sizeof *S1);
        for (int h = 0; h < s.H; h++)
            for (int m = 0; m < s.dv; m++) {
                double want = 0;
                for (int d = 0; d < s.dk; d++)
                    want +=
                        c.scale * s.q[(size_t)h * s.dk + d] * S1[((size_t)h * s.dk + d) * s.dv + m];
                assert_float_equal(ot[(size_t)h * s.dv + m], want, 1e-5 * (1 + fabs(want)));
            }
    }
    free(o1), free(o2), free(S1), free(S2), free(k0), free(g0), free(ot);
    seq_free(&s);
}

/* Relative closeness of a probe to its definition (inf must match inf). */
static void probe_check(const char *name, float got, double want) {
    if (isinf(want)) {
        if (!isinf(got) || got < 0) fail_msg("probe %s: %g, want inf", name, got);
        return;
    }
    double e = fabs(got - want) / (fabs(want) + 1e-6);
    track(&max_probe, e);
    if (e > 1e-5) fail_msg("probe %s: %.9g, want %.9g", name, got, want);
}

/* (5) Every probe against its definition, recomputed in double from the state around each step. */
static void test_probes(void **st) {
    (void)st;
    const mixer_ops *m = &mixer_mamba2;
    seq s = seq_random(6, 2, 8, 5, 77);
    s.g[3 * s.H + 1] = 0.0f;   /* token 3 of head 1 does not decay: infinite half-life */
    s.g[4 * s.H + 0] = -1e-4f; /* a weak decay: 1 - alpha must not lose its digits */
    mixer_cfg c = cfg_make(s.H, s.dk, s.dv, 64);
    size_t np = mixer_probe_floats(m, &c), ns = (size_t)s.H * s.dk * s.dv;
    assert_int_equal(np, (size_t)m->nprobes * s.H);
    for (int i = 0; i < m->nprobes; i++) {
        assert_int_equal(mixer_probe_offset(m, &c, i), (size_t)i * s.H);
        assert_int_equal(mixer_probe_index(m, m->probes[i].name), i);
        assert_true(strlen(m->probes[i].meaning) > 0);
    }
    float *pr = malloc(np * sizeof *pr), *S = malloc(ns * sizeof *S);
    float *prev = malloc(ns * sizeof *prev), *o = malloc((size_t)s.H * s.dv * sizeof *o);
    assert_true(pr && S && prev && o);
    m->state_init(&c, S);
    memcpy(S, s.h0, ns * sizeof *S);
    mixer_seq x = seq_view(&s);
    for (int t = 0; t < s.T; t++) {
        memcpy(prev, S, ns * sizeof *S);
        mixer_tok tk = mixer_seq_at(&c, &x, t);
        for (size_t i = 0; i < np; i++) pr[i] = NAN;
        m->step(&c, S, &tk, t, o, pr);
        for (int h = 0; h < s.H; h++) {
            const float *q = tk.in[IN_Q] + (size_t)h * s.dk, *k = tk.in[IN_K] + (size_t)h * s.dk;
            const float *v = tk.in[IN_V] + (size_t)h * s.dv;
            const float *Sp = prev + (size_t)h * s.dk * s.dv, *Sn = S + (size_t)h * s.dk * s.dv;
            double g = tk.in[IN_G][h], a = exp(g);
            double qn = 0, kn = 0, vn = 0, fr = 0, sn = 0, on = 0, en = 0;
            for (int d = 0; d < s.dk; d++) {
                qn += (double)q[d] * q[d], kn += (double)k[d] * k[d];
                for (int j = 0; j < s.dv; j++) {
                    double sp = Sp[(size_t)d * s.dv + j], sn1 = Sn[(size_t)d * s.dv + j];
                    fr += (sp - a * sp) * (sp - a * sp);
                    sn += sn1 * sn1;
                }
            }
            for (int j = 0; j < s.dv; j++) {
                double pred = 0, oj = 0;
                for (int d = 0; d < s.dk; d++) {
                    pred += a * Sp[(size_t)d * s.dv + j] * k[d];
                    oj += c.scale * q[d] * Sn[(size_t)d * s.dv + j];
                }
                en += (v[j] - pred) * (v[j] - pred), vn += (double)v[j] * v[j], on += oj * oj;
                assert_float_equal(o[(size_t)h * s.dv + j], oj, 1e-5 * (1 + fabs(oj)));
            }
            double want[] = {g,
                             a,
                             g < 0 ? -M_LN2 / g : INFINITY,
                             sqrt(qn),
                             sqrt(kn),
                             sqrt(vn),
                             sqrt(kn * vn),
                             sqrt(en),
                             sqrt(en / vn),
                             sqrt(fr),
                             sqrt(sn),
                             sqrt(on)};
            assert_int_equal(sizeof want / sizeof want[0], m->nprobes);
            for (int i = 0; i < m->nprobes; i++)
                probe_check(m->probes[i].name, pr[(size_t)i * s.H + h], want[i]);
        }
        if (t == 3) assert_true(isinf(pr[(size_t)mixer_probe_index(m, "half_life") * s.H + 1]));
    }
    free(pr), free(S), free(prev), free(o);
    seq_free(&s);
}

/* Options, state parts and the interface fields. */
static void test_configure(void **st) {
    (void)st;
    mixer_cfg c;
    err e = {{0}};
    opts o = {0};
    char *bad[] = {"chunk=128"}, *good[] = {"chunk=32"}, *neg[] = {"scale=0"};
    assert_int_equal(opts_parse(&o, 1, bad, &e), 0);
    assert_int_equal(mixer_configure(&mixer_mamba2, &c, 2, 16, 8, &o, &e), -1);
    assert_non_null(strstr(e.msg, "chunk"));
    opts_free(&o);
    assert_int_equal(opts_parse(&o, 1, neg, &e), 0);
    assert_int_equal(mixer_configure(&mixer_mamba2, &c, 2, 16, 8, &o, &e), -1);
    assert_non_null(strstr(e.msg, "scale"));
    opts_free(&o);
    assert_int_equal(opts_parse(&o, 1, good, &e), 0);
    assert_int_equal(mixer_configure(&mixer_mamba2, &c, 2, 64, 8, &o, &e), 0);
    assert_int_equal(opts_check_unused(&o, &e), 0);
    assert_int_equal(c.chunk, 32);
    assert_float_equal(c.scale, 0.125f, 0.0f);
    opts_free(&o);
    assert_int_equal(mixer_mamba2.state_floats(&c), 2 * 64 * 8);
    state_part p[MIXER_MAX_STATE_PARTS];
    assert_int_equal(mixer_mamba2.state_parts(&c, p), 1);
    assert_string_equal(p[0].name, "hT"), assert_string_equal(p[0].init_name, "h0");
    assert_int_equal(p[0].ndim, 3);
    assert_int_equal(p[0].shape[0], 2), assert_int_equal(p[0].shape[1], 64);
    assert_int_equal(p[0].shape[2], 8), assert_int_equal(p[0].offset, 0);
    assert_ptr_equal(mixer_find("mamba2"), &mixer_mamba2);
    assert_int_equal(mixer_mamba2.ninputs, 4);
    assert_int_equal(mixer_mamba2.inputs[3].which, IN_G);
    assert_string_equal(mixer_mamba2.inputs[3].name, "g");
    assert_int_equal(mixer_mamba2.inputs[3].width, W_1);
}

static int report(void **st) {
    (void)st;
    printf("mamba2 max rel err: refs %.3g, prefill-vs-step %.3g, brute-force %.3g, identities "
           "%.3g, probes %.3g\n",
           max_ref, max_pre, max_brute, max_ident, max_probe);
    return 0;
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_refs),         cmocka_unit_test(test_prefill_equals_steps),
        cmocka_unit_test(test_brute_force),  cmocka_unit_test(test_strong_decay),
        cmocka_unit_test(test_mixed_decay),  cmocka_unit_test(test_no_decay_is_linear_attention),
        cmocka_unit_test(test_scale_option), cmocka_unit_test(test_split_and_null_token),
        cmocka_unit_test(test_probes),       cmocka_unit_test(test_configure),
    };
    return cmocka_run_group_tests(tests, NULL, report);
}
