/* test_mixer_deltanet.c: the DeltaNet core (mixers/deltanet.c, spec/delta-family.md §3, §9).
 *
 * DeltaNet is GDN with g = 0: checked against the gdn mixer, against a float64 brute force written
 * here, prefill against repeated step for every chunk size with a non-zero initial state, the
 * optional beta (absent = 1), and every probe against its definition. */
#include "tests/delta_fixture.h"

extern const mixer_ops mixer_deltanet, mixer_gdn;

/* Unit keys (the layer's L2 norm), beta = sigmoid(normal), g = 0. */
static seqdata data_make(uint64_t seed, int T, int H, int dk, int dv) {
    return delta_data_make(seed, T, H, dk, dv, DELTA_KEYS_UNIT_NO_DECAY);
}

static mixer_cfg cfg_make(const mixer_ops *m, int H, int dk, int dv, int chunk) {
    return delta_cfg_make(m, H, dk, dv, chunk, 0);
}

/* Runs m from d->h0 by steps or by prefill; with_g: pass g (gdn), with_b: pass beta.
 * o [T, H, dv], hT [H, dk, dv], probes NULL or [T, probe floats]. */
static void run(const mixer_ops *m, const mixer_cfg *c, const seqdata *d, int prefill, int with_g,
                int with_b, float *o, float *hT, float *probes) {
    size_t n = m->state_floats(c);
    assert_int_equal(n, (size_t)d->H * d->dk * d->dv);
    float *state = falloc(n);
    m->state_init(c, state);
    memcpy(state, d->h0, n * sizeof *state);
    mixer_seq s = {.T = d->T};
    s.in[IN_Q] = d->q, s.in[IN_K] = d->k, s.in[IN_V] = d->v;
    s.in[IN_G] = with_g ? d->g : NULL;
    s.in[IN_BETA] = with_b ? d->b : NULL;
    if (prefill)
        m->prefill(c, state, &s, 0, o);
    else
        mixer_run_steps(m, c, state, &s, 0, o, probes);
    memcpy(hT, state, n * sizeof *state);
    free(state);
}

/* float64 brute force of the undecayed delta rule. Output by the unrolled form
 *   o_t = s [ sum_{j<=t} beta_j (q_t^T A_t ... A_{j+1} k_j) v_j + h0^T (A_t ... A_0)^T q_t ],
 *   A_j = I - beta_j k_j k_j^T,
 * final state by explicit dk x dk transition matrices. */
static void brute(const seqdata *d, double scale, double *o, double *hT) {
    int T = d->T, H = d->H, dk = d->dk, dv = d->dv;
    double *y = dalloc(dk), *acc = dalloc(dv), *A = dalloc((size_t)dk * dk);
    double *S = dalloc((size_t)dk * dv), *S2 = dalloc((size_t)dk * dv);
    for (int h = 0; h < H; h++) {
        const float *h0 = d->h0 + (size_t)h * dk * dv;
        for (int t = 0; t < T; t++) {
            for (int i = 0; i < dk; i++) y[i] = d->q[((size_t)t * H + h) * dk + i];
            for (int i = 0; i < dv; i++) acc[i] = 0;
            for (int j = t; j >= 0; j--) {
                const float *kj = d->k + ((size_t)j * H + h) * dk;
                const float *vj = d->v + ((size_t)j * H + h) * dv;
                double bj = d->b[(size_t)j * H + h], yk = 0;
                for (int i = 0; i < dk; i++) yk += y[i] * kj[i];
                for (int i = 0; i < dv; i++) acc[i] += bj * yk * vj[i];
                for (int i = 0; i < dk; i++) y[i] -= bj * kj[i] * yk;
            }
            for (int i = 0; i < dk; i++)
                for (int jv = 0; jv < dv; jv++) acc[jv] += h0[(size_t)i * dv + jv] * y[i];
            for (int i = 0; i < dv; i++) o[((size_t)t * H + h) * dv + i] = scale * acc[i];
        }
        for (size_t i = 0; i < (size_t)dk * dv; i++) S[i] = h0[i];
        for (int t = 0; t < T; t++) {
            const float *kt = d->k + ((size_t)t * H + h) * dk;
            const float *vt = d->v + ((size_t)t * H + h) * dv;
            double bt = d->b[(size_t)t * H + h];
            for (int i = 0; i < dk; i++)
                for (int j = 0; j < dk; j++) A[i * dk + j] = (i == j) - bt * (double)kt[i] * kt[j];
            for (int i = 0; i < dk; i++)
                for (int jv = 0; jv < dv; jv++) {
                    double s = bt * kt[i] * vt[jv];
                    for (int m = 0; m < dk; m++) s += A[i * dk + m] * S[(size_t)m * dv + jv];
                    S2[(size_t)i * dv + jv] = s;
                }
            memcpy(S, S2, (size_t)dk * dv * sizeof *S);
        }
        memcpy(hT + (size_t)h * dk * dv, S, (size_t)dk * dv * sizeof *S);
    }
    free(y), free(acc), free(A), free(S), free(S2);
}

/* deltanet == gdn with g = 0, both paths, every chunk size; the probes they share agree. */
static void test_deltanet_equals_gdn_g0(void **st) {
    (void)st;
    int H = 2, dk = 16, dv = 24, T = 100;
    seqdata d = data_make(5, T, H, dk, dv);
    size_t no = (size_t)T * H * dv, nh = (size_t)H * dk * dv;
    float *o1 = falloc(no), *h1 = falloc(nh), *o2 = falloc(no), *h2 = falloc(nh);
    int chunks[] = {16, 32, 64};
    double worst = 0;
    for (int ci = 0; ci < 3; ci++) {
        mixer_cfg cd = cfg_make(&mixer_deltanet, H, dk, dv, chunks[ci]);
        mixer_cfg cg = cfg_make(&mixer_gdn, H, dk, dv, chunks[ci]);
        for (int pf = 0; pf < 2; pf++) {
            run(&mixer_deltanet, &cd, &d, pf, 0, 1, o1, h1, NULL);
            run(&mixer_gdn, &cg, &d, pf, 1, 1, o2, h2, NULL);
            double eo = rel_err(o1, o2, no), eh = rel_err(h1, h2, nh);
            assert_true(eo < 1e-6), assert_true(eh < 1e-6);
            worst = fmax(worst, fmax(eo, eh));
        }
    }
    printf("  deltanet vs gdn(g=0): max rel err %.2e\n", worst);

    /* A g passed to deltanet is not read: it has no decay input. */
    for (size_t i = 0; i < (size_t)T * H; i++) d.g[i] = -0.5f;
    mixer_cfg cd = cfg_make(&mixer_deltanet, H, dk, dv, 64);
    run(&mixer_deltanet, &cd, &d, 0, 1, 1, o1, h1, NULL);
    run(&mixer_deltanet, &cd, &d, 1, 1, 1, o2, h2, NULL);
    for (size_t i = 0; i < (size_t)T * H; i++) d.g[i] = 0.0f;
    float *o3 = falloc(no), *h3 = falloc(nh);
    run(&mixer_gdn, &cd, &d, 0, 1, 1, o3, h3, NULL);
    assert_true(rel_err(o1, o3, no) < 1e-6), assert_true(rel_err(o2, o3, no) < 1e-5);

    /* Shared probes agree with gdn's on the same tokens. */
    size_t npd = mixer_probe_floats(&mixer_deltanet, &cd),
           npg = mixer_probe_floats(&mixer_gdn, &cd);
    float *pd = falloc(npd * T), *pg = falloc(npg * T);
    run(&mixer_deltanet, &cd, &d, 0, 0, 1, o1, h1, pd);
    run(&mixer_gdn, &cd, &d, 0, 1, 1, o2, h2, pg);
    for (int i = 0; i < mixer_deltanet.nprobes; i++) {
        int j = mixer_probe_index(&mixer_gdn, mixer_deltanet.probes[i].name);
        assert_true(j >= 0);
        size_t od = mixer_probe_offset(&mixer_deltanet, &cd, i);
        size_t og = mixer_probe_offset(&mixer_gdn, &cd, j);
        for (int t = 0; t < T; t++)
            for (int h = 0; h < H; h++) assert_true(pd[t * npd + od + h] == pg[t * npg + og + h]);
    }
    free(o1), free(h1), free(o2), free(h2), free(o3), free(h3), free(pd), free(pg);
    data_free(&d);
}

/* prefill == repeated step, T in {1, 63, 64, 65, 200}, every chunk size, non-zero h0. */
static void test_deltanet_prefill_equals_step(void **st) {
    (void)st;
    int Ts[] = {1, 63, 64, 65, 200}, chunks[] = {16, 32, 64};
    int H = 2, dk = 20, dv = 72;
    double worst = 0;
    for (int ti = 0; ti < 5; ti++) {
        seqdata d = data_make(200 + ti, Ts[ti], H, dk, dv);
        size_t no = (size_t)d.T * H * dv, nh = (size_t)H * dk * dv;
        float *o1 = falloc(no), *h1 = falloc(nh), *o2 = falloc(no), *h2 = falloc(nh);
        mixer_cfg c0 = cfg_make(&mixer_deltanet, H, dk, dv, 64);
        run(&mixer_deltanet, &c0, &d, 0, 0, 1, o1, h1, NULL);
        for (int ci = 0; ci < 3; ci++) {
            mixer_cfg c = cfg_make(&mixer_deltanet, H, dk, dv, chunks[ci]);
            run(&mixer_deltanet, &c, &d, 1, 0, 1, o2, h2, NULL);
            double eo = rel_err(o2, o1, no), eh = rel_err(h2, h1, nh);
            assert_true(eo < 1e-5), assert_true(eh < 1e-5);
            worst = fmax(worst, fmax(eo, eh));
        }
        free(o1), free(h1), free(o2), free(h2);
        data_free(&d);
    }
    printf("  prefill vs step: max rel err %.2e\n", worst);
}

/* Both fast forms against the float64 brute force; beta absent means beta = 1. */
static void test_deltanet_brute_force(void **st) {
    (void)st;
    int H = 2, dk = 12, dv = 70, T = 150;
    seqdata d = data_make(9, T, H, dk, dv);
    size_t no = (size_t)T * H * dv, nh = (size_t)H * dk * dv;
    double *ob = dalloc(no), *hb = dalloc(nh);
    float *o = falloc(no), *hT = falloc(nh);
    mixer_cfg c = cfg_make(&mixer_deltanet, H, dk, dv, 32);
    brute(&d, c.scale, ob, hb);
    double worst = 0;
    for (int pf = 0; pf < 2; pf++) {
        run(&mixer_deltanet, &c, &d, pf, 0, 1, o, hT, NULL);
        double eo = rel_err_d(o, ob, no), eh = rel_err_d(hT, hb, nh);
        assert_true(eo < 1e-5), assert_true(eh < 1e-5);
        worst = fmax(worst, fmax(eo, eh));
    }
    for (size_t i = 0; i < (size_t)T * H; i++) d.b[i] = 1.0f;
    brute(&d, c.scale, ob, hb);
    for (int pf = 0; pf < 2; pf++) {
        run(&mixer_deltanet, &c, &d, pf, 0, 0, o, hT, NULL); /* no beta tensor */
        double eo = rel_err_d(o, ob, no), eh = rel_err_d(hT, hb, nh);
        assert_true(eo < 1e-5), assert_true(eh < 1e-5);
        worst = fmax(worst, fmax(eo, eh));
    }
    printf("  vs float64 brute force: max rel err %.2e\n", worst);
    free(ob), free(hb), free(o), free(hT);
    data_free(&d);
}

static float probe_at(const mixer_cfg *c, const float *p, const char *name, int h) {
    return delta_probe(&mixer_deltanet, c, p, name, h);
}

/* Every probe against its definition, recomputed in float64 from the state before the token. */
static void test_deltanet_probes(void **st) {
    (void)st;
    int H = 2, dk = 8, dv = 70, T = 6;
    seqdata d = data_make(31, T, H, dk, dv);
    /* keys of norm 0.8, so that |k| and rho differ from 1 and beta */
    for (size_t i = 0; i < (size_t)T * H * dk; i++) d.k[i] *= 0.8f;
    d.b[2] = 1.5625f; /* rho = 1.5625 * 0.64 = 1 on head 0 at t = 1: the write meets v */
    mixer_cfg c = cfg_make(&mixer_deltanet, H, dk, dv, 64);
    const char *absent[] = {"g", "alpha", "half_life", "forget_removed", "eta"};
    for (int i = 0; i < 5; i++) assert_int_equal(mixer_probe_index(&mixer_deltanet, absent[i]), -1);
    size_t np = mixer_probe_floats(&mixer_deltanet, &c), ns = mixer_deltanet.state_floats(&c);
    assert_int_equal(np, (size_t)mixer_deltanet.nprobes * H);
    float *state = falloc(ns), *p = falloc(np), *o = falloc((size_t)H * dv), *before = falloc(ns);
    double *S = dalloc((size_t)dk * dv), *e = dalloc(dv), *pred = dalloc(dv);
    memcpy(state, d.h0, ns * sizeof *state);
    mixer_seq s = {.T = T};
    s.in[IN_Q] = d.q, s.in[IN_K] = d.k, s.in[IN_V] = d.v, s.in[IN_BETA] = d.b;
    for (int t = 0; t < T; t++) {
        memcpy(before, state, ns * sizeof *state);
        mixer_tok x = mixer_seq_at(&c, &s, t);
        mixer_deltanet.step(&c, state, &x, t, o, p);
        for (int h = 0; h < H; h++) {
            const float *q = x.in[IN_Q] + h * dk, *k = x.in[IN_K] + h * dk;
            const float *v = x.in[IN_V] + h * dv;
            double beta = x.in[IN_BETA][h];
            double k2 = 0, q2 = 0, v2 = 0, e2 = 0, p2 = 0, r2 = 0, s2 = 0, o2n = 0;
            for (int i = 0; i < dk; i++) k2 += (double)k[i] * k[i], q2 += (double)q[i] * q[i];
            for (size_t i = 0; i < (size_t)dk * dv; i++) S[i] = before[h * dk * dv + i];
            for (int j = 0; j < dv; j++) {
                double a = 0;
                for (int i = 0; i < dk; i++) a += S[(size_t)i * dv + j] * k[i];
                pred[j] = a, e[j] = v[j] - a;
                v2 += (double)v[j] * v[j], e2 += e[j] * e[j], p2 += a * a;
            }
            for (int i = 0; i < dk; i++)
                for (int j = 0; j < dv; j++) {
                    double *sij = &S[(size_t)i * dv + j];
                    *sij += beta * k[i] * e[j];
                    s2 += *sij * *sij;
                }
            for (int j = 0; j < dv; j++) {
                double sk = 0, sq = 0;
                for (int i = 0; i < dk; i++)
                    sk += S[(size_t)i * dv + j] * k[i], sq += S[(size_t)i * dv + j] * q[i];
                r2 += (sk - v[j]) * (sk - v[j]);
                o2n += c.scale * sq * c.scale * sq;
                near("o", o[h * dv + j], c.scale * sq, 1e-5);
            }
            near("beta", probe_at(&c, p, "beta", h), beta, 1e-6);
            near("rho", probe_at(&c, p, "rho", h), beta * k2, 1e-5);
            near("k_norm", probe_at(&c, p, "k_norm", h), sqrt(k2), 1e-5);
            near("q_norm", probe_at(&c, p, "q_norm", h), sqrt(q2), 1e-5);
            near("e_norm", probe_at(&c, p, "e_norm", h), sqrt(e2), 1e-5);
            near("e_rel", probe_at(&c, p, "e_rel", h), sqrt(e2 / v2), 1e-5);
            near("r_norm", probe_at(&c, p, "r_norm", h), sqrt(r2), 1e-5);
            assert_true(probe_at(&c, p, "r_check", h) < 1e-5 * fmax(1.0, sqrt(e2)));
            near("loss_before", probe_at(&c, p, "loss_before", h), 0.5 * e2, 1e-5);
            near("loss_after", probe_at(&c, p, "loss_after", h), 0.5 * r2, 1e-5);
            near("write_norm", probe_at(&c, p, "write_norm", h), beta * sqrt(k2 * e2), 1e-5);
            near("state_norm", probe_at(&c, p, "state_norm", h), sqrt(s2), 1e-5);
            near("erase_removed", probe_at(&c, p, "erase_removed", h), beta * sqrt(k2 * p2), 1e-5);
            near("o_norm", probe_at(&c, p, "o_norm", h), sqrt(o2n), 1e-5);
            if (t == 1 && h == 0)
                assert_true(probe_at(&c, p, "r_norm", 0) < 1e-5 * probe_at(&c, p, "e_norm", 0));
        }
    }
    free(state), free(p), free(o), free(before), free(S), free(e), free(pred);
    data_free(&d);
}

static void test_deltanet_config(void **st) {
    (void)st;
    mixer_cfg c;
    err e = {{0}};
    opts o;
    assert_int_equal(mixer_configure(&mixer_deltanet, &c, 2, 64, 24, NULL, &e), 0);
    assert_int_equal(c.chunk, 64);
    assert_true(fabsf(c.scale - 0.125f) < 1e-7f);
    const char *bad[][1] = {{"chunk=8"}, {"scale=0"}};
    for (int i = 0; i < 2; i++) {
        assert_int_equal(opts_parse(&o, 1, (char *const *)bad[i], &e), 0);
        assert_int_equal(mixer_configure(&mixer_deltanet, &c, 2, 16, 24, &o, &e), -1);
        opts_free(&o);
    }
    state_part parts[MIXER_MAX_STATE_PARTS];
    mixer_cfg c2 = cfg_make(&mixer_deltanet, 3, 5, 7, 32);
    assert_int_equal(c2.chunk, 32);
    assert_int_equal(mixer_deltanet.state_parts(&c2, parts), 1);
    assert_string_equal(parts[0].name, "hT"), assert_string_equal(parts[0].init_name, "h0");
    assert_int_equal(parts[0].shape[0], 3), assert_int_equal(parts[0].shape[1], 5);
    assert_int_equal(parts[0].shape[2], 7);
    /* beta is the one optional input */
    for (int i = 0; i < mixer_deltanet.ninputs; i++)
        assert_int_equal(mixer_deltanet.inputs[i].required,
                         mixer_deltanet.inputs[i].which != IN_BETA);
    assert_ptr_equal(mixer_find("deltanet"), &mixer_deltanet);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_deltanet_equals_gdn_g0),
        cmocka_unit_test(test_deltanet_prefill_equals_step),
        cmocka_unit_test(test_deltanet_brute_force),
        cmocka_unit_test(test_deltanet_probes),
        cmocka_unit_test(test_deltanet_config),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
