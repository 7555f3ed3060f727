/* test_mixer_gdn.c: the Gated DeltaNet core (mixers/gdn.c, spec/delta-family.md §2.4, §2.5, §9).
 *
 * Checks step and the chunked prefill against fla's naive_recurrent_gated_delta_rule (refs group
 * `gdr.`), against each other for every chunk size and awkward lengths with a non-zero initial
 * state, against a float64 brute force written here (the unrolled transition-product form), and
 * every probe against its definition. */
#include "tests/delta_fixture.h"

extern const mixer_ops mixer_gdn;

/* Unit keys (the layer's L2 norm), g in [-0.52, -0.02], beta = sigmoid(normal). */
static seqdata data_make(uint64_t seed, int T, int H, int dk, int dv) {
    return delta_data_make(seed, T, H, dk, dv, DELTA_KEYS_UNIT);
}

static mixer_cfg cfg_make(int H, int dk, int dv, int chunk) {
    return delta_cfg_make(&mixer_gdn, H, dk, dv, chunk, 0);
}

/* Runs the mixer from d->h0 over the whole sequence, by steps or by prefill.
 * o [T, H, dv], hT [H, dk, dv], probes NULL or [T, probe floats]. */
static void run(const mixer_cfg *c, const seqdata *d, int prefill, float *o, float *hT,
                float *probes) {
    size_t n = mixer_gdn.state_floats(c);
    assert_int_equal(n, (size_t)d->H * d->dk * d->dv);
    float *state = falloc(n);
    mixer_gdn.state_init(c, state);
    memcpy(state, d->h0, n * sizeof *state); /* the caller writes h0 after state_init */
    mixer_seq s = {.T = d->T};
    s.in[IN_Q] = d->q, s.in[IN_K] = d->k, s.in[IN_V] = d->v, s.in[IN_G] = d->g;
    s.in[IN_BETA] = d->b;
    if (prefill)
        mixer_gdn.prefill(c, state, &s, 0, o);
    else
        mixer_run_steps(&mixer_gdn, c, state, &s, 0, o, probes);
    memcpy(hT, state, n * sizeof *state);
    free(state);
}

/* float64 brute force. Output by the unrolled form
 *   o_t = s [ sum_{j<=t} beta_j (q_t^T A_t ... A_{j+1} k_j) v_j + h0^T (A_t ... A_0)^T q_t ],
 *   A_j = alpha_j (I - beta_j k_j k_j^T),
 * which never forms a state; final state by explicit dk x dk transition matrices. */
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
                double bj = d->b[(size_t)j * H + h], aj = exp((double)d->g[(size_t)j * H + h]);
                double yk = 0;
                for (int i = 0; i < dk; i++) yk += y[i] * kj[i];
                for (int i = 0; i < dv; i++) acc[i] += bj * yk * vj[i];
                for (int i = 0; i < dk; i++) y[i] = aj * (y[i] - bj * kj[i] * yk);
            }
            for (int i = 0; i < dk; i++)
                for (int jv = 0; jv < dv; jv++) acc[jv] += h0[(size_t)i * dv + jv] * y[i];
            for (int i = 0; i < dv; i++) o[((size_t)t * H + h) * dv + i] = scale * acc[i];
        }
        /* S_t = A_t S_{t-1} + beta_t k_t v_t^T */
        for (size_t i = 0; i < (size_t)dk * dv; i++) S[i] = h0[i];
        for (int t = 0; t < T; t++) {
            const float *kt = d->k + ((size_t)t * H + h) * dk;
            const float *vt = d->v + ((size_t)t * H + h) * dv;
            double bt = d->b[(size_t)t * H + h], at = exp((double)d->g[(size_t)t * H + h]);
            for (int i = 0; i < dk; i++)
                for (int j = 0; j < dk; j++)
                    A[i * dk + j] = at * ((i == j) - bt * (double)kt[i] * kt[j]);
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

/* fla's exact recurrence on its own random data, two seeds; both paths, every chunk size. */
static void test_gdn_refs(void **st) {
    (void)st;
    const char *files[] = {"ops-seed11.safetensors", "ops-seed12.safetensors"};
    double worst = 0;
    for (int f = 0; f < 2; f++) {
        char path[1024];
        st_file *sf = NULL;
        err e = {{0}};
        if (st_open(&sf, ref_path(path, sizeof path, files[f]), &e)) fail_msg("%s", e.msg);
        int64_t nq, nv, nh, no;
        seqdata d = {0};
        d.q = st_get_f32(sf, "gdr.q", &nq), d.k = st_get_f32(sf, "gdr.k", NULL);
        d.v = st_get_f32(sf, "gdr.v", &nv), d.g = st_get_f32(sf, "gdr.g", NULL);
        d.b = st_get_f32(sf, "gdr.beta", NULL), d.h0 = st_get_f32(sf, "gdr.h0", &nh);
        float *oref = st_get_f32(sf, "gdr.o", &no), *href = st_get_f32(sf, "gdr.hT", NULL);
        const tensor *tq = st_find(sf, "gdr.q"), *tv = st_find(sf, "gdr.v");
        assert_int_equal(tq->ndim, 4);
        d.T = (int)tq->shape[1], d.H = (int)tq->shape[2], d.dk = (int)tq->shape[3];
        d.dv = (int)tv->shape[3];
        assert_int_equal(d.T, 100), assert_int_equal(d.H, 2);
        assert_int_equal(d.dk, 16), assert_int_equal(d.dv, 24);
        assert_int_equal(nh, (int64_t)d.H * d.dk * d.dv);
        float *o = falloc((size_t)no), *hT = falloc((size_t)nh);
        int chunks[] = {16, 32, 64};
        for (int ci = 0; ci < 3; ci++) {
            mixer_cfg c = cfg_make(d.H, d.dk, d.dv, chunks[ci]);
            for (int pf = 0; pf < 2; pf++) {
                if (!pf && ci) continue; /* the step does not depend on the chunk size */
                run(&c, &d, pf, o, hT, NULL);
                double eo = rel_err(o, oref, (size_t)no), eh = rel_err(hT, href, (size_t)nh);
                printf("  %s %s chunk %d: o %.2e hT %.2e\n", files[f], pf ? "prefill" : "step",
                       chunks[ci], eo, eh);
                assert_true(eo < 1e-5), assert_true(eh < 1e-5);
                worst = fmax(worst, fmax(eo, eh));
            }
        }
        free(o), free(hT), free(oref), free(href);
        data_free(&d);
        st_close(sf);
    }
    printf("  refs: max rel err %.2e\n", worst);
}

/* prefill == repeated step, T in {1, 63, 64, 65, 200}, every chunk size, non-zero h0. dv = 72
 * crosses the step's 64-column block. */
static void test_gdn_prefill_equals_step(void **st) {
    (void)st;
    int Ts[] = {1, 63, 64, 65, 200}, chunks[] = {16, 32, 64};
    int H = 2, dk = 20, dv = 72;
    double worst = 0;
    for (int ti = 0; ti < 5; ti++) {
        seqdata d = data_make(100 + ti, Ts[ti], H, dk, dv);
        size_t no = (size_t)d.T * H * dv, nh = (size_t)H * dk * dv;
        float *o1 = falloc(no), *h1 = falloc(nh), *o2 = falloc(no), *h2 = falloc(nh);
        mixer_cfg c0 = cfg_make(H, dk, dv, 64);
        run(&c0, &d, 0, o1, h1, NULL);
        for (int ci = 0; ci < 3; ci++) {
            mixer_cfg c = cfg_make(H, dk, dv, chunks[ci]);
            run(&c, &d, 1, o2, h2, NULL);
            double eo = rel_err(o2, o1, no), eh = rel_err(h2, h1, nh);
            assert_true(eo < 1e-5), assert_true(eh < 1e-5);
            worst = fmax(worst, fmax(eo, eh));
        }
        free(o1), free(h1), free(o2), free(h2);
        data_free(&d);
    }
    printf("  prefill vs step: max rel err %.2e\n", worst);
}

/* Strong decay spikes (g = -300 at two tokens of every 64, -0.05 elsewhere): the chunk form's
 * decay factors exp(G_i - G_j) must keep their precision after |G| has grown large. */
static void test_gdn_strong_decay(void **st) {
    (void)st;
    int H = 2, dk = 16, dv = 24, T = 200, chunks[] = {16, 32, 64};
    seqdata d = data_make(17, T, H, dk, dv);
    for (int t = 0; t < T; t++)
        for (int h = 0; h < H; h++)
            d.g[t * H + h] = (t % 64 == 1 + h || t % 64 == 7) ? -300.0f : -0.05f;
    size_t no = (size_t)T * H * dv, nh = (size_t)H * dk * dv;
    float *o1 = falloc(no), *h1 = falloc(nh), *o2 = falloc(no), *h2 = falloc(nh);
    double *ob = dalloc(no), *hb = dalloc(nh), worst = 0;
    mixer_cfg c0 = cfg_make(H, dk, dv, 64);
    run(&c0, &d, 0, o1, h1, NULL);
    brute(&d, c0.scale, ob, hb);
    assert_true(rel_err_d(o1, ob, no) < 1e-5), assert_true(rel_err_d(h1, hb, nh) < 1e-5);
    for (int ci = 0; ci < 3; ci++) {
        mixer_cfg c = cfg_make(H, dk, dv, chunks[ci]);
        run(&c, &d, 1, o2, h2, NULL);
        for (size_t i = 0; i < no; i++) assert_true(isfinite(o2[i]));
        double eo = rel_err(o2, o1, no), eh = rel_err(h2, h1, nh);
        assert_true(eo < 1e-5), assert_true(eh < 1e-5);
        worst = fmax(worst, fmax(eo, eh));
    }
    printf("  strong decay, prefill vs step: max rel err %.2e\n", worst);
    free(o1), free(h1), free(o2), free(h2), free(ob), free(hb);
    data_free(&d);
}

/* Both fast forms against the float64 brute force. */
static void test_gdn_brute_force(void **st) {
    (void)st;
    int H = 2, dk = 12, dv = 70, T = 150;
    seqdata d = data_make(7, T, H, dk, dv);
    size_t no = (size_t)T * H * dv, nh = (size_t)H * dk * dv;
    double *ob = dalloc(no), *hb = dalloc(nh);
    float *o = falloc(no), *hT = falloc(nh);
    mixer_cfg c = cfg_make(H, dk, dv, 32);
    brute(&d, c.scale, ob, hb);
    double worst = 0;
    for (int pf = 0; pf < 2; pf++) {
        run(&c, &d, pf, o, hT, NULL);
        double eo = rel_err_d(o, ob, no), eh = rel_err_d(hT, hb, nh);
        assert_true(eo < 1e-5), assert_true(eh < 1e-5);
        worst = fmax(worst, fmax(eo, eh));
    }
    printf("  vs float64 brute force: max rel err %.2e\n", worst);
    free(ob), free(hb), free(o), free(hT);
    data_free(&d);
}

static float probe_at(const mixer_cfg *c, const float *p, const char *name, int h) {
    return delta_probe(&mixer_gdn, c, p, name, h);
}

/* Every probe against its definition, recomputed in float64 from the state before the token. */
static void test_gdn_probes(void **st) {
    (void)st;
    int H = 2, dk = 8, dv = 70, T = 6;
    seqdata d = data_make(21, T, H, dk, dv);
    /* keys of norm 0.8, so that |k| and rho differ from 1 and beta */
    for (size_t i = 0; i < (size_t)T * H * dk; i++) d.k[i] *= 0.8f;
    d.g[0] = 0.0f;    /* no decay on head 0 at t = 0: infinite half-life, nothing forgotten */
    d.b[3] = 1.5625f; /* rho = 1.5625 * 0.64 = 1 on head 1 at t = 1: the write meets v */
    mixer_cfg c = cfg_make(H, dk, dv, 64);
    size_t np = mixer_probe_floats(&mixer_gdn, &c), ns = mixer_gdn.state_floats(&c);
    assert_int_equal(np, (size_t)mixer_gdn.nprobes * H);
    float *state = falloc(ns), *p = falloc(np), *o = falloc((size_t)H * dv);
    float *state2 = falloc(ns), *o2 = falloc((size_t)H * dv);
    double *S = dalloc((size_t)dk * dv), *e = dalloc(dv), *pred = dalloc(dv), *r = dalloc(dv);
    memcpy(state, d.h0, ns * sizeof *state);
    memcpy(state2, d.h0, ns * sizeof *state);
    mixer_seq s = {.T = T};
    s.in[IN_Q] = d.q, s.in[IN_K] = d.k, s.in[IN_V] = d.v, s.in[IN_G] = d.g, s.in[IN_BETA] = d.b;
    for (int t = 0; t < T; t++) {
        double prev[2];
        for (int h = 0; h < H; h++) {
            double n2 = 0;
            for (size_t i = 0; i < (size_t)dk * dv; i++)
                n2 += (double)state[h * dk * dv + i] * state[h * dk * dv + i];
            prev[h] = sqrt(n2);
        }
        float *before = falloc(ns);
        memcpy(before, state, ns * sizeof *state);
        mixer_tok x = mixer_seq_at(&c, &s, t);
        mixer_gdn.step(&c, state, &x, t, o, p);
        mixer_gdn.step(&c, state2, &x, t, o2, NULL); /* probes must not change the arithmetic */
        assert_memory_equal(state, state2, ns * sizeof *state);
        assert_memory_equal(o, o2, (size_t)H * dv * sizeof *o);
        for (int h = 0; h < H; h++) {
            const float *q = x.in[IN_Q] + h * dk, *k = x.in[IN_K] + h * dk;
            const float *v = x.in[IN_V] + h * dv;
            double g = x.in[IN_G][h], beta = x.in[IN_BETA][h], alpha = exp(g);
            double k2 = 0, q2 = 0, v2 = 0, e2 = 0, p2 = 0, r2 = 0, s2 = 0, o2n = 0;
            for (int i = 0; i < dk; i++) k2 += (double)k[i] * k[i], q2 += (double)q[i] * q[i];
            for (size_t i = 0; i < (size_t)dk * dv; i++) S[i] = before[h * dk * dv + i];
            for (int j = 0; j < dv; j++) {
                double a = 0;
                for (int i = 0; i < dk; i++) a += S[(size_t)i * dv + j] * k[i];
                pred[j] = alpha * a, e[j] = v[j] - pred[j];
                v2 += (double)v[j] * v[j], e2 += e[j] * e[j], p2 += pred[j] * pred[j];
            }
            for (int i = 0; i < dk; i++)
                for (int j = 0; j < dv; j++) {
                    double *sij = &S[(size_t)i * dv + j];
                    *sij = alpha * *sij + beta * k[i] * e[j];
                    s2 += *sij * *sij;
                }
            for (int j = 0; j < dv; j++) {
                double sk = 0, sq = 0;
                for (int i = 0; i < dk; i++)
                    sk += S[(size_t)i * dv + j] * k[i], sq += S[(size_t)i * dv + j] * q[i];
                r[j] = sk - v[j], r2 += r[j] * r[j];
                o2n += c.scale * sq * c.scale * sq;
                near("o", o[h * dv + j], c.scale * sq, 1e-5);
            }
            double rho = beta * k2;
            near("beta", probe_at(&c, p, "beta", h), beta, 1e-6);
            near("rho", probe_at(&c, p, "rho", h), rho, 1e-5);
            near("k_norm", probe_at(&c, p, "k_norm", h), sqrt(k2), 1e-5);
            near("q_norm", probe_at(&c, p, "q_norm", h), sqrt(q2), 1e-5);
            near("g", probe_at(&c, p, "g", h), g, 1e-6);
            near("alpha", probe_at(&c, p, "alpha", h), alpha, 1e-5);
            if (g < 0)
                near("half_life", probe_at(&c, p, "half_life", h), -log(2.0) / g, 1e-5);
            else
                assert_true(isinf(probe_at(&c, p, "half_life", h)));
            near("e_norm", probe_at(&c, p, "e_norm", h), sqrt(e2), 1e-5);
            near("e_rel", probe_at(&c, p, "e_rel", h), sqrt(e2 / v2), 1e-5);
            near("r_norm", probe_at(&c, p, "r_norm", h), sqrt(r2), 1e-5);
            assert_true(probe_at(&c, p, "r_check", h) < 1e-5 * fmax(1.0, sqrt(e2)));
            near("loss_before", probe_at(&c, p, "loss_before", h), 0.5 * e2, 1e-5);
            near("loss_after", probe_at(&c, p, "loss_after", h), 0.5 * r2, 1e-5);
            near("write_norm", probe_at(&c, p, "write_norm", h), beta * sqrt(k2 * e2), 1e-5);
            near("state_norm", probe_at(&c, p, "state_norm", h), sqrt(s2), 1e-5);
            near("forget_removed", probe_at(&c, p, "forget_removed", h), (1 - alpha) * prev[h],
                 1e-5);
            near("erase_removed", probe_at(&c, p, "erase_removed", h), beta * sqrt(k2 * p2), 1e-5);
            near("o_norm", probe_at(&c, p, "o_norm", h), sqrt(o2n), 1e-5);
        }
        free(before);
    }
    /* the special tokens did what they were set up to do */
    mixer_tok x0 = mixer_seq_at(&c, &s, 0);
    memcpy(state, d.h0, ns * sizeof *state);
    mixer_gdn.step(&c, state, &x0, 0, o, p);
    assert_true(probe_at(&c, p, "forget_removed", 0) == 0.0f);
    assert_true(probe_at(&c, p, "forget_removed", 1) > 0.0f);
    mixer_tok x1 = mixer_seq_at(&c, &s, 1);
    mixer_gdn.step(&c, state, &x1, 1, o, p);
    assert_true(probe_at(&c, p, "r_norm", 1) < 1e-5 * probe_at(&c, p, "e_norm", 1));
    free(state), free(state2), free(p), free(o), free(o2), free(S), free(e), free(pred), free(r);
    data_free(&d);
}

/* Options, validation, state layout, and the query scale. */
static void test_gdn_config(void **st) {
    (void)st;
    mixer_cfg c;
    err e = {{0}};
    opts o;
    assert_int_equal(mixer_configure(&mixer_gdn, &c, 2, 16, 24, NULL, &e), 0);
    assert_int_equal(c.chunk, 64);
    assert_true(fabsf(c.scale - 0.25f) < 1e-7f);
    const char *bad[][1] = {{"chunk=48"}, {"chunk=x"}, {"scale=0"}, {"scale=-1"}};
    for (int i = 0; i < 4; i++) {
        assert_int_equal(opts_parse(&o, 1, (char *const *)bad[i], &e), 0);
        assert_int_equal(mixer_configure(&mixer_gdn, &c, 2, 16, 24, &o, &e), -1);
        assert_non_null(strstr(e.msg, "gdn"));
        opts_free(&o);
    }
    state_part parts[MIXER_MAX_STATE_PARTS];
    mixer_cfg c2 = cfg_make(3, 5, 7, 16);
    assert_int_equal(mixer_gdn.state_parts(&c2, parts), 1);
    assert_string_equal(parts[0].name, "hT"), assert_string_equal(parts[0].init_name, "h0");
    assert_int_equal(parts[0].ndim, 3), assert_int_equal(parts[0].offset, 0);
    assert_int_equal(parts[0].shape[0], 3), assert_int_equal(parts[0].shape[1], 5);
    assert_int_equal(parts[0].shape[2], 7);
    assert_int_equal(mixer_gdn.state_floats(&c2), 3 * 5 * 7);
    float z[3 * 5 * 7];
    for (int i = 0; i < 105; i++) z[i] = 1.0f;
    mixer_gdn.state_init(&c2, z);
    for (int i = 0; i < 105; i++) assert_true(z[i] == 0.0f);

    /* The output is linear in the scale: scale=0.5 doubles the default 1/sqrt(16) = 0.25. */
    char *arg[] = {"scale=0.5"};
    assert_int_equal(opts_parse(&o, 1, arg, &e), 0);
    mixer_cfg c3;
    assert_int_equal(mixer_configure(&mixer_gdn, &c3, 2, 16, 24, &o, &e), 0);
    opts_free(&o);
    assert_true(c3.scale == 0.5f);
    seqdata d = data_make(3, 40, 2, 16, 24);
    float *o1 = falloc(40 * 2 * 24), *o2 = falloc(40 * 2 * 24), *h = falloc(2 * 16 * 24);
    float *o3 = falloc(40 * 2 * 24);
    run(&c, &d, 1, o1, h, NULL);
    run(&c3, &d, 1, o2, h, NULL);
    run(&c3, &d, 0, o3, h, NULL);
    for (int i = 0; i < 40 * 2 * 24; i++) o1[i] *= 2.0f;
    assert_true(rel_err(o2, o1, 40 * 2 * 24) < 1e-6);
    assert_true(rel_err(o3, o1, 40 * 2 * 24) < 1e-5);
    free(o1), free(o2), free(o3), free(h);
    data_free(&d);
    assert_ptr_equal(mixer_find("gdn"), &mixer_gdn);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_gdn_refs),         cmocka_unit_test(test_gdn_prefill_equals_step),
        cmocka_unit_test(test_gdn_strong_decay), cmocka_unit_test(test_gdn_brute_force),
        cmocka_unit_test(test_gdn_probes),       cmocka_unit_test(test_gdn_config),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
