/* test_mixer_gla.c: the GLA core (mixers/gla.c) against fla's naive_recurrent_gla, against a
 * brute-force double-precision reference, prefill against step, its identities and its probes. */
#include "testutil.h"

#include "mixers/mixer.h"

extern const mixer_ops mixer_gla, mixer_mamba2;

/* Largest errors seen, printed at the end. */
static double max_ref, max_pre, max_brute, max_ident, max_probe;

static void track(double *m, double v) {
    if (v > *m) *m = v;
}

/* One test sequence, fla layout: q, k, gk [T, H, dk], v [T, H, dv], h0 [H, dk, dv]. */
typedef struct seq {
    int T, H, dk, dv;
    float *q, *k, *v, *gk, *h0;
} seq;

/* gk = logsigmoid(2 n) / gdiv, n standard normal: fla's gate with a wider spread. */
static seq seq_random(int T, int H, int dk, int dv, uint64_t seed, double gdiv) {
    seq s = {T, H, dk, dv, NULL, NULL, NULL, NULL, NULL};
    trng r = {seed * 0x9E3779B97F4A7C15ull + 1};
    size_t nk = (size_t)T * H * dk, nv = (size_t)T * H * dv, ns = (size_t)H * dk * dv;
    s.q = malloc(nk * sizeof(float)), s.k = malloc(nk * sizeof(float));
    s.gk = malloc(nk * sizeof(float)), s.v = malloc(nv * sizeof(float));
    s.h0 = malloc(ns * sizeof(float));
    assert_true(s.q && s.k && s.gk && s.v && s.h0);
    trng_fill(&r, s.q, nk, 1.0);
    trng_fill(&r, s.k, nk, 1.0);
    trng_fill(&r, s.v, nv, 1.0);
    trng_fill(&r, s.h0, ns, 0.5);
    for (size_t i = 0; i < nk; i++) {
        double x = 2.0 * trng_normal(&r);
        s.gk[i] = (float)(-log1p(exp(-x)) / gdiv);
    }
    return s;
}

static void seq_free(seq *s) {
    free(s->q), free(s->k), free(s->v), free(s->gk), free(s->h0);
}

static mixer_cfg cfg_make(const mixer_ops *m, int H, int dk, int dv, int chunk) {
    mixer_cfg c;
    opts o = {0};
    err e = {{0}};
    if (mixer_configure(m, &c, H, dk, dv, &o, &e)) fail_msg("configure: %s", e.msg);
    c.chunk = chunk;
    return c;
}

/* Runs the sequence through prefill (1) or repeated step (0) from h0. o [T, H, dv], state
 * [H, dk, dv]. */
static void run_form(const mixer_cfg *c, const seq *s, int prefill, float *o, float *state) {
    mixer_gla.state_init(c, state);
    memcpy(state, s->h0, (size_t)s->H * s->dk * s->dv * sizeof(float));
    mixer_seq x = {.T = s->T};
    x.in[IN_Q] = s->q, x.in[IN_K] = s->k, x.in[IN_V] = s->v, x.in[IN_GK] = s->gk;
    if (prefill)
        mixer_gla.prefill(c, state, &x, 0, o);
    else
        mixer_run_steps(&mixer_gla, c, state, &x, 0, o, NULL);
}

/* The quadratic form in double: o_t = scale sum_d q_t[d] [ e^{P_t[d]} S0[d,:] +
 * sum_{j<=t} e^{P_t[d] - P_j[d]} k_j[d] v_j ], P_t = sum_{s<=t} gk_s; and the final state. */
static void brute_force(const seq *s, double scale, double *o, double *S) {
    int T = s->T, H = s->H, dk = s->dk, dv = s->dv;
    double *P = malloc((size_t)T * dk * sizeof *P); /* [T, dk] */
    assert_non_null(P);
    for (int h = 0; h < H; h++) {
        for (int t = 0; t < T; t++)
            for (int d = 0; d < dk; d++)
                P[(size_t)t * dk + d] =
                    (t ? P[(size_t)(t - 1) * dk + d] : 0.0) + s->gk[((size_t)t * H + h) * dk + d];
        for (int t = 0; t <= T; t++) {
            /* t < T: output row t; t == T: the final state (no query). */
            int tt = t < T ? t : T - 1;
            double *Sx = calloc((size_t)dk * dv, sizeof *Sx); /* [dk, dv] S_tt */
            assert_non_null(Sx);
            for (int d = 0; d < dk; d++) {
                double Pt = P[(size_t)tt * dk + d];
                for (int m = 0; m < dv; m++)
                    Sx[(size_t)d * dv + m] = exp(Pt) * s->h0[((size_t)h * dk + d) * dv + m];
                for (int j = 0; j <= tt; j++) {
                    double w = exp(Pt - P[(size_t)j * dk + d]) * s->k[((size_t)j * H + h) * dk + d];
                    for (int m = 0; m < dv; m++)
                        Sx[(size_t)d * dv + m] += w * s->v[((size_t)j * H + h) * dv + m];
                }
            }
            if (t < T) {
                for (int m = 0; m < dv; m++) {
                    double acc = 0;
                    for (int d = 0; d < dk; d++)
                        acc += s->q[((size_t)t * H + h) * dk + d] * Sx[(size_t)d * dv + m];
                    o[((size_t)t * H + h) * dv + m] = scale * acc;
                }
            } else {
                memcpy(S + (size_t)h * dk * dv, Sx, (size_t)dk * dv * sizeof *Sx);
            }
            free(Sx);
        }
    }
    free(P);
}

/* (1) fla's naive_recurrent_gla on both seeds: step and prefill with every chunk size. */
static void test_refs(void **st) {
    (void)st;
    const char *files[] = {"ops-seed11.safetensors", "ops-seed12.safetensors"};
    for (int f = 0; f < 2; f++) {
        char path[1024];
        st_file *sf;
        err e = {{0}};
        if (st_open(&sf, ref_path(path, sizeof path, files[f]), &e)) fail_msg("%s", e.msg);
        const tensor *tq = st_find(sf, "gla.q"), *tv = st_find(sf, "gla.v");
        assert_non_null(tq), assert_non_null(tv);
        int T = (int)tq->shape[1], H = (int)tq->shape[2], dk = (int)tq->shape[3];
        int dv = (int)tv->shape[3];
        assert_int_equal(T, 100), assert_int_equal(H, 2), assert_int_equal(dk, 16);
        assert_int_equal(dv, 24);
        seq s = {T, H, dk, dv, NULL, NULL, NULL, NULL, NULL};
        s.q = st_get_f32(sf, "gla.q", NULL), s.k = st_get_f32(sf, "gla.k", NULL);
        s.v = st_get_f32(sf, "gla.v", NULL), s.gk = st_get_f32(sf, "gla.gk", NULL);
        s.h0 = st_get_f32(sf, "gla.h0", NULL);
        float *oref = st_get_f32(sf, "gla.o", NULL), *href = st_get_f32(sf, "gla.hT", NULL);
        size_t no = (size_t)T * H * dv, ns = (size_t)H * dk * dv;
        float *o = malloc(no * sizeof *o), *S = malloc(ns * sizeof *S);
        assert_true(o && S);
        for (int form = 0; form < 4; form++) {
            int chunk = form == 0 ? 64 : 8 << form; /* step, then prefill with 16, 32, 64 */
            mixer_cfg c = cfg_make(&mixer_gla, H, dk, dv, chunk);
            assert_float_equal(c.scale, 0.25f, 0.0f);
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

/* Compares prefill (every chunk size) and step on s; fails above tol; returns the largest relative
 * error. */
static double prefill_vs_steps(const seq *s, double tol) {
    size_t no = (size_t)s->T * s->H * s->dv, ns = (size_t)s->H * s->dk * s->dv;
    float *o1 = malloc(no * sizeof *o1), *S1 = malloc(ns * sizeof *S1);
    float *o2 = malloc(no * sizeof *o2), *S2 = malloc(ns * sizeof *S2);
    assert_true(o1 && S1 && o2 && S2);
    mixer_cfg c = cfg_make(&mixer_gla, s->H, s->dk, s->dv, 64);
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
        seq s = seq_random(Ts[i], 2, 12, 20, 100 + (uint64_t)i, 4.0);
        track(&max_pre, prefill_vs_steps(&s, 1e-5));
        seq_free(&s);
    }
}

/* Compares step and prefill (every chunk size) against the double reference; fails above tol. */
static double against_brute(const seq *s, double tol) {
    size_t no = (size_t)s->T * s->H * s->dv, ns = (size_t)s->H * s->dk * s->dv;
    double *ob = malloc(no * sizeof *ob), *Sb = malloc(ns * sizeof *Sb);
    float *o = malloc(no * sizeof *o), *S = malloc(ns * sizeof *S);
    assert_true(ob && Sb && o && S);
    mixer_cfg c = cfg_make(&mixer_gla, s->H, s->dk, s->dv, 64);
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

/* (3) the brute-force double reference, typical and weak decays. */
static void test_brute_force(void **st) {
    (void)st;
    seq s = seq_random(150, 2, 16, 12, 7, 4.0);
    track(&max_brute, against_brute(&s, 1e-5));
    seq_free(&s);
    s = seq_random(97, 1, 8, 8, 8, 16.0); /* fla's gate_logit_normalizer: slow decays */
    track(&max_brute, against_brute(&s, 1e-5));
    seq_free(&s);
}

/* (4a) gk = -20 everywhere: a naive chunk form with q e^{B}, k e^{-B} would need e^{1280}. The
 * prefill must stay finite and equal step, and the state keeps only the newest token:
 * o_t = scale (q_t . k_t) v_t up to e^-20 of the rest. */
static void test_strong_decay(void **st) {
    (void)st;
    seq s = seq_random(200, 2, 16, 12, 21, 4.0);
    for (size_t i = 0; i < (size_t)s.T * s.H * s.dk; i++) s.gk[i] = -20.0f;
    track(&max_ident, prefill_vs_steps(&s, 1e-5));
    size_t no = (size_t)s.T * s.H * s.dv, ns = (size_t)s.H * s.dk * s.dv;
    float *o = malloc(no * sizeof *o), *S = malloc(ns * sizeof *S);
    double *want = malloc(no * sizeof *want);
    assert_true(o && S && want);
    mixer_cfg c = cfg_make(&mixer_gla, s.H, s.dk, s.dv, 64);
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
 * must keep its own precision: taking e^{B_i - B_j} as a difference of chunk-cumulative float sums
 * (|B| ~ 1e3 after a few spikes) loses ~1e-5 relative (measured 9e-6 when only the diagonal blocks
 * did so), while summing each exponent over its own range stays at ~2e-7. Hence 1e-6 here. */
static void test_mixed_decay(void **st) {
    (void)st;
    seq s = seq_random(200, 2, 16, 12, 33, 16.0);
    trng r = {99};
    for (int t = 0; t < s.T; t++)
        for (int i = 0; i < s.H * s.dk; i++) {
            double u = trng_uniform(&r);
            float *g = &s.gk[(size_t)t * s.H * s.dk + i];
            if (u > 0.97)
                *g = -300.0f;
            else if (t % 50 < 4)
                *g = -20.0f;
        }
    track(&max_ident, prefill_vs_steps(&s, 1e-6));
    track(&max_ident, against_brute(&s, 1e-6));
    seq_free(&s);
}

/* (4c) gk = 0: plain causal linear attention, o_t = scale (S0^T q_t + sum_{j<=t} (q_t.k_j) v_j). */
static void test_no_decay_is_linear_attention(void **st) {
    (void)st;
    seq s = seq_random(70, 2, 8, 6, 5, 4.0);
    memset(s.gk, 0, (size_t)s.T * s.H * s.dk * sizeof(float));
    size_t no = (size_t)s.T * s.H * s.dv;
    float *o = malloc(no * sizeof *o), *S = malloc((size_t)s.H * s.dk * s.dv * sizeof *S);
    double *want = calloc(no, sizeof *want);
    assert_true(o && S && want);
    mixer_cfg c = cfg_make(&mixer_gla, s.H, s.dk, s.dv, 32);
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

/* (4d) A per-key decay that is equal across dk is Mamba2's scalar decay: gla == mamba2. */
static void test_uniform_gk_is_mamba2(void **st) {
    (void)st;
    seq s = seq_random(130, 3, 8, 10, 41, 4.0);
    float *g = malloc((size_t)s.T * s.H * sizeof *g); /* [T, H] */
    assert_non_null(g);
    for (int i = 0; i < s.T * s.H; i++) {
        g[i] = s.gk[(size_t)i * s.dk];
        for (int d = 0; d < s.dk; d++) s.gk[(size_t)i * s.dk + d] = g[i];
    }
    size_t no = (size_t)s.T * s.H * s.dv, ns = (size_t)s.H * s.dk * s.dv;
    float *o1 = malloc(no * sizeof *o1), *o2 = malloc(no * sizeof *o2);
    float *S1 = malloc(ns * sizeof *S1), *S2 = malloc(ns * sizeof *S2);
    assert_true(o1 && o2 && S1 && S2);
    mixer_cfg cg = cfg_make(&mixer_gla, s.H, s.dk, s.dv, 32);
    mixer_cfg cm = cfg_make(&mixer_mamba2, s.H, s.dk, s.dv, 32);
    assert_float_equal(cg.scale, cm.scale, 0.0f);
    mixer_seq x = {.T = s.T};
    x.in[IN_Q] = s.q, x.in[IN_K] = s.k, x.in[IN_V] = s.v, x.in[IN_G] = g;
    for (int form = 0; form < 2; form++) {
        run_form(&cg, &s, form, o1, S1);
        memcpy(S2, s.h0, ns * sizeof *S2);
        if (form)
            mixer_mamba2.prefill(&cm, S2, &x, 0, o2);
        else
            mixer_run_steps(&mixer_mamba2, &cm, S2, &x, 0, o2, NULL);
        double eo = rel_err(o1, o2, no), es = rel_err(S1, S2, ns);
        track(&max_ident, eo), track(&max_ident, es);
        assert_true(eo < 1e-5 && es < 1e-5);
    }
    free(o1), free(o2), free(S1), free(S2), free(g);
    seq_free(&s);
}

/* (4e) Splitting a prefill carries the state: prefill(0..77) then prefill(77..200) == one. Also a
 * token with k = 0 and gk = 0 leaves the state as it was and reads it: o = scale S^T q. */
static void test_split_and_null_token(void **st) {
    (void)st;
    seq s = seq_random(200, 2, 12, 8, 55, 4.0);
    size_t no = (size_t)s.T * s.H * s.dv, ns = (size_t)s.H * s.dk * s.dv, rv = (size_t)s.H * s.dv;
    float *o1 = malloc(no * sizeof *o1), *o2 = malloc(no * sizeof *o2);
    float *S1 = malloc(ns * sizeof *S1), *S2 = malloc(ns * sizeof *S2);
    assert_true(o1 && o2 && S1 && S2);
    mixer_cfg c = cfg_make(&mixer_gla, s.H, s.dk, s.dv, 32);
    run_form(&c, &s, 1, o1, S1);
    memcpy(S2, s.h0, ns * sizeof *S2);
    mixer_seq a = {.T = 77}, b = {.T = s.T - 77};
    a.in[IN_Q] = s.q, a.in[IN_K] = s.k, a.in[IN_V] = s.v, a.in[IN_GK] = s.gk;
    size_t ok = (size_t)77 * s.H * s.dk, ov = (size_t)77 * rv;
    b.in[IN_Q] = s.q + ok, b.in[IN_K] = s.k + ok, b.in[IN_V] = s.v + ov, b.in[IN_GK] = s.gk + ok;
    mixer_gla.prefill(&c, S2, &a, 0, o2);
    mixer_gla.prefill(&c, S2, &b, 77, o2 + ov);
    double eo = rel_err(o2, o1, no), es = rel_err(S2, S1, ns);
    track(&max_ident, eo), track(&max_ident, es);
    assert_true(eo < 1e-6 && es < 1e-6);

    /* The null token, through step and through a one-token prefill. */
    float *k0 = calloc((size_t)s.H * s.dk, sizeof *k0),
          *g0 = calloc((size_t)s.H * s.dk, sizeof *g0);
    float *ot = malloc(rv * sizeof *ot);
    assert_true(k0 && g0 && ot);
    for (int form = 0; form < 2; form++) {
        memcpy(S2, S1, ns * sizeof *S2);
        mixer_tok tk = {{0}};
        tk.in[IN_Q] = s.q, tk.in[IN_K] = k0, tk.in[IN_V] = s.v, tk.in[IN_GK] = g0;
        mixer_seq one = {.T = 1};
        memcpy(one.in, tk.in, sizeof one.in);
        if (form)
            mixer_gla.prefill(&c, S2, &one, 200, ot);
        else
            mixer_gla.step(&c, S2, &tk, 200, ot, NULL);
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
    const mixer_ops *m = &mixer_gla;
    seq s = seq_random(6, 2, 8, 5, 77, 4.0);
    /* Token 3 of head 1 does not decay at all: its half-lives are infinite. */
    for (int d = 0; d < s.dk; d++) s.gk[((size_t)3 * s.H + 1) * s.dk + d] = 0.0f;
    mixer_cfg c = cfg_make(m, s.H, s.dk, s.dv, 64);
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
    mixer_seq x = {.T = s.T};
    x.in[IN_Q] = s.q, x.in[IN_K] = s.k, x.in[IN_V] = s.v, x.in[IN_GK] = s.gk;
    for (int t = 0; t < s.T; t++) {
        memcpy(prev, S, ns * sizeof *S);
        mixer_tok tk = mixer_seq_at(&c, &x, t);
        for (size_t i = 0; i < np; i++) pr[i] = NAN;
        m->step(&c, S, &tk, t, o, pr);
        for (int h = 0; h < s.H; h++) {
            const float *q = tk.in[IN_Q] + (size_t)h * s.dk, *k = tk.in[IN_K] + (size_t)h * s.dk;
            const float *v = tk.in[IN_V] + (size_t)h * s.dv, *g = tk.in[IN_GK] + (size_t)h * s.dk;
            const float *Sp = prev + (size_t)h * s.dk * s.dv, *Sn = S + (size_t)h * s.dk * s.dv;
            double gmin = 1e300, gmax = -1e300, gsum = 0, asum = 0, amin = 1e300, amax = -1e300;
            double qn = 0, kn = 0, vn = 0, fr = 0, sn = 0, on = 0, en = 0;
            for (int d = 0; d < s.dk; d++) {
                double a = exp((double)g[d]);
                gmin = fmin(gmin, g[d]), gmax = fmax(gmax, g[d]), gsum += g[d];
                amin = fmin(amin, a), amax = fmax(amax, a), asum += a;
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
                    pred += exp((double)g[d]) * Sp[(size_t)d * s.dv + j] * k[d];
                    oj += c.scale * q[d] * Sn[(size_t)d * s.dv + j];
                }
                en += (v[j] - pred) * (v[j] - pred), vn += (double)v[j] * v[j], on += oj * oj;
                assert_float_equal(o[(size_t)h * s.dv + j], oj, 1e-5 * (1 + fabs(oj)));
            }
            double gmean = gsum / s.dk;
            double want[] = {gmin,
                             gmean,
                             gmax,
                             amin,
                             asum / s.dk,
                             amax,
                             gmin < 0 ? -M_LN2 / gmin : INFINITY,
                             gmean < 0 ? -M_LN2 / gmean : INFINITY,
                             gmax < 0 ? -M_LN2 / gmax : INFINITY,
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
            if (t == 3 && h == 1)
                assert_true(isinf(pr[(size_t)mixer_probe_index(m, "half_life_max") * s.H + h]));
        }
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
    char *bad[] = {"chunk=48"}, *good[] = {"chunk=16", "scale=0.5"}, *neg[] = {"scale=-1"};
    assert_int_equal(opts_parse(&o, 1, bad, &e), 0);
    assert_int_equal(mixer_configure(&mixer_gla, &c, 2, 16, 8, &o, &e), -1);
    assert_non_null(strstr(e.msg, "chunk"));
    opts_free(&o);
    assert_int_equal(opts_parse(&o, 1, neg, &e), 0);
    assert_int_equal(mixer_configure(&mixer_gla, &c, 2, 16, 8, &o, &e), -1);
    opts_free(&o);
    assert_int_equal(opts_parse(&o, 2, good, &e), 0);
    assert_int_equal(mixer_configure(&mixer_gla, &c, 2, 16, 8, &o, &e), 0);
    assert_int_equal(opts_check_unused(&o, &e), 0);
    assert_int_equal(c.chunk, 16);
    assert_float_equal(c.scale, 0.5f, 0.0f);
    opts_free(&o);
    c = cfg_make(&mixer_gla, 3, 16, 8, 64);
    assert_float_equal(c.scale, 0.25f, 0.0f);
    assert_int_equal(mixer_gla.state_floats(&c), 3 * 16 * 8);
    state_part p[MIXER_MAX_STATE_PARTS];
    assert_int_equal(mixer_gla.state_parts(&c, p), 1);
    assert_string_equal(p[0].name, "hT"), assert_string_equal(p[0].init_name, "h0");
    assert_int_equal(p[0].ndim, 3);
    assert_int_equal(p[0].shape[0], 3), assert_int_equal(p[0].shape[1], 16);
    assert_int_equal(p[0].shape[2], 8), assert_int_equal(p[0].offset, 0);
    assert_ptr_equal(mixer_find("gla"), &mixer_gla);
    assert_int_equal(mixer_gla.ninputs, 4);
    assert_int_equal(mixer_gla.inputs[3].which, IN_GK);
    assert_string_equal(mixer_gla.inputs[3].name, "gk");
}

static int report(void **st) {
    (void)st;
    printf("gla max rel err: refs %.3g, prefill-vs-step %.3g, brute-force %.3g, identities %.3g, "
           "probes %.3g\n",
           max_ref, max_pre, max_brute, max_ident, max_probe);
    return 0;
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_refs),
        cmocka_unit_test(test_prefill_equals_steps),
        cmocka_unit_test(test_brute_force),
        cmocka_unit_test(test_strong_decay),
        cmocka_unit_test(test_mixed_decay),
        cmocka_unit_test(test_no_decay_is_linear_attention),
        cmocka_unit_test(test_uniform_gk_is_mamba2),
        cmocka_unit_test(test_split_and_null_token),
        cmocka_unit_test(test_probes),
        cmocka_unit_test(test_configure),
    };
    return cmocka_run_group_tests(tests, NULL, report);
}
