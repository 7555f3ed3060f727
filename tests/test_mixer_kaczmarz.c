/* test_mixer_kaczmarz.c: the Kaczmarz linear attention core (mixers/kaczmarz.c,
 * spec/delta-family.md §8, §9).
 *
 * Raw keys of widely different norms. Checks the exact identity with GDN on rescaled inputs (§8.5),
 * a float64 brute force of the raw recurrence (§8.3) written here, prefill (which runs the rescaled
 * chunked form) against repeated step for every chunk size with a non-zero initial state, the
 * post-write identity r = -(1-rho) e, hard Kaczmarz (eta = 1, eps -> 0) meeting the constraint
 * exactly, zero keys, and every probe against its definition. */
#include "tests/delta_fixture.h"

extern const mixer_ops mixer_kaczmarz, mixer_gdn;

/* Raw keys of norm about 0.03 .. 30, q raw, eta = sigmoid(normal), GDN's g. */
static seqdata data_make(uint64_t seed, int T, int H, int dk, int dv) {
    return delta_data_make(seed, T, H, dk, dv, DELTA_KEYS_RAW);
}

/* chunk and eps (eps <= 0: the default) */
static mixer_cfg cfg_make(const mixer_ops *m, int H, int dk, int dv, int chunk, double eps) {
    return delta_cfg_make(m, H, dk, dv, chunk, eps);
}

/* Runs m from d->h0 by steps or by prefill. o [T, H, dv], hT [H, dk, dv], probes NULL or
 * [T, probe floats]. */
static void run(const mixer_ops *m, const mixer_cfg *c, const seqdata *d, int prefill, float *o,
                float *hT, float *probes) {
    size_t n = m->state_floats(c);
    assert_int_equal(n, (size_t)d->H * d->dk * d->dv);
    float *state = falloc(n);
    m->state_init(c, state);
    memcpy(state, d->h0, n * sizeof *state);
    mixer_seq s = {.T = d->T};
    s.in[IN_Q] = d->q, s.in[IN_K] = d->k, s.in[IN_V] = d->v, s.in[IN_G] = d->g;
    s.in[IN_BETA] = d->b;
    if (prefill)
        m->prefill(c, state, &s, 0, o);
    else
        mixer_run_steps(m, c, state, &s, 0, o, probes);
    memcpy(hT, state, n * sizeof *state);
    free(state);
}

/* float64 brute force of the raw recurrence §8.3, beta_j = eta_j / (|k_j|^2 + eps). Output by the
 * unrolled form
 *   o_t = s [ sum_{j<=t} beta_j (q_t^T A_t ... A_{j+1} k_j) v_j + h0^T (A_t ... A_0)^T q_t ],
 *   A_j = alpha_j (I - beta_j k_j k_j^T),
 * final state by explicit dk x dk transition matrices. */
static void brute(const seqdata *d, double scale, double eps, double *o, double *hT) {
    int T = d->T, H = d->H, dk = d->dk, dv = d->dv;
    double *y = dalloc(dk), *acc = dalloc(dv), *A = dalloc((size_t)dk * dk);
    double *S = dalloc((size_t)dk * dv), *S2 = dalloc((size_t)dk * dv);
    double *beta = dalloc((size_t)T * H);
    for (size_t th = 0; th < (size_t)T * H; th++) {
        double k2 = 0;
        for (int i = 0; i < dk; i++) k2 += (double)d->k[th * dk + i] * d->k[th * dk + i];
        beta[th] = d->b[th] / (k2 + eps);
    }
    for (int h = 0; h < H; h++) {
        const float *h0 = d->h0 + (size_t)h * dk * dv;
        for (int t = 0; t < T; t++) {
            for (int i = 0; i < dk; i++) y[i] = d->q[((size_t)t * H + h) * dk + i];
            for (int i = 0; i < dv; i++) acc[i] = 0;
            for (int j = t; j >= 0; j--) {
                const float *kj = d->k + ((size_t)j * H + h) * dk;
                const float *vj = d->v + ((size_t)j * H + h) * dv;
                double bj = beta[(size_t)j * H + h], aj = exp((double)d->g[(size_t)j * H + h]);
                double yk = 0;
                for (int i = 0; i < dk; i++) yk += y[i] * kj[i];
                for (int i = 0; i < dv; i++) acc[i] += bj * yk * vj[i];
                for (int i = 0; i < dk; i++) y[i] = aj * (y[i] - bj * kj[i] * yk);
            }
            for (int i = 0; i < dk; i++)
                for (int jv = 0; jv < dv; jv++) acc[jv] += h0[(size_t)i * dv + jv] * y[i];
            for (int i = 0; i < dv; i++) o[((size_t)t * H + h) * dv + i] = scale * acc[i];
        }
        for (size_t i = 0; i < (size_t)dk * dv; i++) S[i] = h0[i];
        for (int t = 0; t < T; t++) {
            const float *kt = d->k + ((size_t)t * H + h) * dk;
            const float *vt = d->v + ((size_t)t * H + h) * dv;
            double bt = beta[(size_t)t * H + h], at = exp((double)d->g[(size_t)t * H + h]);
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
    free(y), free(acc), free(A), free(S), free(S2), free(beta);
}

/* §8.5: kaczmarz(q, k, v, eta, g) == gdn(q, k c, v c, beta = eta, g), c = (|k|^2+eps)^{-1/2},
 * for both paths of both mixers and every chunk size. */
static void test_kaczmarz_equals_gdn_rescaled(void **st) {
    (void)st;
    int H = 2, dk = 16, dv = 40, T = 130;
    seqdata d = data_make(41, T, H, dk, dv), r = data_make(41, T, H, dk, dv);
    double eps = 1e-6;
    for (size_t th = 0; th < (size_t)T * H; th++) {
        double k2 = 0;
        for (int i = 0; i < dk; i++) k2 += (double)d.k[th * dk + i] * d.k[th * dk + i];
        double c = 1.0 / sqrt(k2 + eps);
        for (int i = 0; i < dk; i++) r.k[th * dk + i] = (float)(c * d.k[th * dk + i]);
        for (int i = 0; i < dv; i++) r.v[th * dv + i] = (float)(c * d.v[th * dv + i]);
    }
    size_t no = (size_t)T * H * dv, nh = (size_t)H * dk * dv;
    float *o1 = falloc(no), *h1 = falloc(nh), *o2 = falloc(no), *h2 = falloc(nh);
    int chunks[] = {16, 32, 64};
    double worst = 0;
    for (int ci = 0; ci < 3; ci++) {
        mixer_cfg ck = cfg_make(&mixer_kaczmarz, H, dk, dv, chunks[ci], -1);
        mixer_cfg cg = cfg_make(&mixer_gdn, H, dk, dv, chunks[ci], -1);
        assert_true(ck.eps == 1e-6f);
        for (int pk = 0; pk < 2; pk++)
            for (int pg = 0; pg < 2; pg++) {
                run(&mixer_kaczmarz, &ck, &d, pk, o1, h1, NULL);
                run(&mixer_gdn, &cg, &r, pg, o2, h2, NULL);
                double eo = rel_err(o1, o2, no), eh = rel_err(h1, h2, nh);
                assert_true(eo < 1e-5), assert_true(eh < 1e-5);
                worst = fmax(worst, fmax(eo, eh));
            }
    }
    printf("  kaczmarz vs gdn(rescaled): max rel err %.2e\n", worst);
    free(o1), free(h1), free(o2), free(h2);
    data_free(&d), data_free(&r);
}

/* prefill == repeated step, T in {1, 63, 64, 65, 200}, every chunk size, non-zero h0. */
static void test_kaczmarz_prefill_equals_step(void **st) {
    (void)st;
    int Ts[] = {1, 63, 64, 65, 200}, chunks[] = {16, 32, 64};
    int H = 2, dk = 20, dv = 72;
    double worst = 0;
    for (int ti = 0; ti < 5; ti++) {
        seqdata d = data_make(300 + ti, Ts[ti], H, dk, dv);
        size_t no = (size_t)d.T * H * dv, nh = (size_t)H * dk * dv;
        float *o1 = falloc(no), *h1 = falloc(nh), *o2 = falloc(no), *h2 = falloc(nh);
        mixer_cfg c0 = cfg_make(&mixer_kaczmarz, H, dk, dv, 64, -1);
        run(&mixer_kaczmarz, &c0, &d, 0, o1, h1, NULL);
        for (int ci = 0; ci < 3; ci++) {
            mixer_cfg c = cfg_make(&mixer_kaczmarz, H, dk, dv, chunks[ci], -1);
            run(&mixer_kaczmarz, &c, &d, 1, o2, h2, NULL);
            double eo = rel_err(o2, o1, no), eh = rel_err(h2, h1, nh);
            assert_true(eo < 1e-5), assert_true(eh < 1e-5);
            worst = fmax(worst, fmax(eo, eh));
        }
        free(o1), free(h1), free(o2), free(h2);
        data_free(&d);
    }
    printf("  prefill vs step: max rel err %.2e\n", worst);
}

/* Both fast forms against the float64 brute force of the raw recurrence, two eps. */
static void test_kaczmarz_brute_force(void **st) {
    (void)st;
    int H = 2, dk = 12, dv = 70, T = 150;
    seqdata d = data_make(43, T, H, dk, dv);
    size_t no = (size_t)T * H * dv, nh = (size_t)H * dk * dv;
    double *ob = dalloc(no), *hb = dalloc(nh);
    float *o = falloc(no), *hT = falloc(nh);
    double epss[] = {1e-6, 0.5}, worst = 0;
    for (int ei = 0; ei < 2; ei++) {
        mixer_cfg c = cfg_make(&mixer_kaczmarz, H, dk, dv, 32, epss[ei]);
        brute(&d, c.scale, (double)c.eps, ob, hb);
        for (int pf = 0; pf < 2; pf++) {
            run(&mixer_kaczmarz, &c, &d, pf, o, hT, NULL);
            double eo = rel_err_d(o, ob, no), eh = rel_err_d(hT, hb, nh);
            assert_true(eo < 1e-5), assert_true(eh < 1e-5);
            worst = fmax(worst, fmax(eo, eh));
        }
    }
    printf("  vs float64 brute force: max rel err %.2e\n", worst);
    free(ob), free(hb), free(o), free(hT);
    data_free(&d);
}

static float probe_at(const mixer_cfg *c, const float *p, const char *name, int h) {
    return delta_probe(&mixer_kaczmarz, c, p, name, h);
}

/* Every probe against its definition, recomputed in float64 from the state before the token,
 * with the raw key. */
static void test_kaczmarz_probes(void **st) {
    (void)st;
    int H = 2, dk = 8, dv = 70, T = 8;
    seqdata d = data_make(51, T, H, dk, dv);
    d.g[0] = 0.0f; /* no decay on head 0 at t = 0 */
    mixer_cfg c = cfg_make(&mixer_kaczmarz, H, dk, dv, 64, -1);
    size_t np = mixer_probe_floats(&mixer_kaczmarz, &c), ns = mixer_kaczmarz.state_floats(&c);
    assert_int_equal(np, (size_t)mixer_kaczmarz.nprobes * H);
    float *state = falloc(ns), *p = falloc(np), *o = falloc((size_t)H * dv), *before = falloc(ns);
    double *S = dalloc((size_t)dk * dv), *e = dalloc(dv), *pred = dalloc(dv);
    memcpy(state, d.h0, ns * sizeof *state);
    mixer_seq s = {.T = T};
    s.in[IN_Q] = d.q, s.in[IN_K] = d.k, s.in[IN_V] = d.v, s.in[IN_G] = d.g, s.in[IN_BETA] = d.b;
    for (int t = 0; t < T; t++) {
        memcpy(before, state, ns * sizeof *state);
        mixer_tok x = mixer_seq_at(&c, &s, t);
        mixer_kaczmarz.step(&c, state, &x, t, o, p);
        for (int h = 0; h < H; h++) {
            const float *q = x.in[IN_Q] + h * dk, *k = x.in[IN_K] + h * dk;
            const float *v = x.in[IN_V] + h * dv;
            double g = x.in[IN_G][h], eta = x.in[IN_BETA][h], alpha = exp(g);
            double k2 = 0, q2 = 0, v2 = 0, e2 = 0, p2 = 0, r2 = 0, s2 = 0, o2n = 0, prev2 = 0;
            for (int i = 0; i < dk; i++) k2 += (double)k[i] * k[i], q2 += (double)q[i] * q[i];
            double beta = eta / (k2 + c.eps), rho = beta * k2;
            for (size_t i = 0; i < (size_t)dk * dv; i++)
                S[i] = before[h * dk * dv + i], prev2 += S[i] * S[i];
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
                r2 += (sk - v[j]) * (sk - v[j]);
                o2n += c.scale * sq * c.scale * sq;
                near("o", o[h * dv + j], c.scale * sq, 1e-5);
            }
            near("beta", probe_at(&c, p, "beta", h), beta, 1e-5);
            near("eta", probe_at(&c, p, "eta", h), eta, 1e-7);
            near("rho", probe_at(&c, p, "rho", h), rho, 1e-5);
            assert_true(rho < eta); /* rho = eta |k|^2/(|k|^2+eps) */
            near("k_norm", probe_at(&c, p, "k_norm", h), sqrt(k2), 1e-5);
            near("q_norm", probe_at(&c, p, "q_norm", h), sqrt(q2), 1e-5);
            near("g", probe_at(&c, p, "g", h), g, 1e-7);
            near("alpha", probe_at(&c, p, "alpha", h), alpha, 1e-6);
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
            near("forget_removed", probe_at(&c, p, "forget_removed", h), (1 - alpha) * sqrt(prev2),
                 1e-5);
            near("erase_removed", probe_at(&c, p, "erase_removed", h), beta * sqrt(k2 * p2), 1e-5);
            near("o_norm", probe_at(&c, p, "o_norm", h), sqrt(o2n), 1e-5);
        }
    }
    free(state), free(p), free(o), free(before), free(S), free(e), free(pred);
    data_free(&d);
}

/* r_t = -(1 - rho_t) e_t on every token (read back from the state, per head), and hard Kaczmarz,
 * eta = 1 with eps -> 0 on keys of norm ~1, leaves |r_t| ~ 0: the write solves S^T k = v. */
static void test_kaczmarz_post_write_identity(void **st) {
    (void)st;
    int H = 2, dk = 16, dv = 24, T = 60;
    seqdata d = data_make(61, T, H, dk, dv);
    int ir = mixer_probe_index(&mixer_kaczmarz, "r_norm");
    int ie = mixer_probe_index(&mixer_kaczmarz, "e_norm");
    int ip = mixer_probe_index(&mixer_kaczmarz, "rho");
    int ic = mixer_probe_index(&mixer_kaczmarz, "r_check");
    assert_true(ir >= 0 && ie >= 0 && ip >= 0 && ic >= 0);
    size_t no = (size_t)T * H * dv, nh = (size_t)H * dk * dv;
    float *o = falloc(no), *hT = falloc(nh);
    for (int hard = 0; hard < 2; hard++) {
        if (hard) /* eta = 1, keys of norm in [0.5, 2] */
            for (size_t th = 0; th < (size_t)T * H; th++) {
                double n = 0, want = 0.5 + 0.75 * (d.b[th] * 2.0);
                for (int i = 0; i < dk; i++) n += (double)d.k[th * dk + i] * d.k[th * dk + i];
                for (int i = 0; i < dk; i++)
                    d.k[th * dk + i] = (float)(d.k[th * dk + i] * want / sqrt(n));
                d.b[th] = 1.0f;
            }
        mixer_cfg c = cfg_make(&mixer_kaczmarz, H, dk, dv, 64, hard ? 1e-12 : -1);
        size_t np = mixer_probe_floats(&mixer_kaczmarz, &c);
        float *p = falloc(np * T);
        run(&mixer_kaczmarz, &c, &d, 0, o, hT, p);
        double worst_id = 0, worst_r = 0;
        for (int t = 0; t < T; t++)
            for (int h = 0; h < H; h++) {
                const float *pt = p + t * np;
                double r = pt[mixer_probe_offset(&mixer_kaczmarz, &c, ir) + h];
                double en = pt[mixer_probe_offset(&mixer_kaczmarz, &c, ie) + h];
                double rho = pt[mixer_probe_offset(&mixer_kaczmarz, &c, ip) + h];
                double rc = pt[mixer_probe_offset(&mixer_kaczmarz, &c, ic) + h];
                assert_true(en > 1e-3); /* the check below is not vacuous */
                worst_id = fmax(worst_id, fmax(fabs(r - fabs(1.0 - rho) * en), rc) / en);
                worst_r = fmax(worst_r, r / en);
                if (hard) assert_true(fabs(rho - 1.0) < 1e-6);
            }
        printf("  %s: max |r - (1-rho)e|/|e| %.2e, max |r|/|e| %.2e\n",
               hard ? "hard (eta=1, eps=1e-12)" : "relaxed", worst_id, worst_r);
        assert_true(worst_id < 1e-5);
        if (hard)
            assert_true(worst_r < 1e-5);
        else
            assert_true(worst_r > 1e-2); /* relaxed: eta < 1 leaves a residual */
        free(p);
    }
    free(o), free(hT);
    data_free(&d);
}

/* A zero key: beta = eta/eps is large but the write beta k e^T is zero; nothing is NaN, the state
 * only decays, and prefill still equals step. */
static void test_kaczmarz_zero_key(void **st) {
    (void)st;
    int H = 2, dk = 16, dv = 24, T = 70;
    seqdata d = data_make(71, T, H, dk, dv);
    for (int i = 0; i < dk; i++) d.k[(size_t)(5 * H + 1) * dk + i] = 0.0f; /* t = 5, head 1 */
    for (int i = 0; i < dk; i++) d.k[(size_t)(0 * H + 0) * dk + i] = 0.0f; /* t = 0, head 0 */
    mixer_cfg c = cfg_make(&mixer_kaczmarz, H, dk, dv, 16, -1);
    size_t no = (size_t)T * H * dv, nh = (size_t)H * dk * dv;
    size_t np = mixer_probe_floats(&mixer_kaczmarz, &c);
    float *o1 = falloc(no), *h1 = falloc(nh), *o2 = falloc(no), *h2 = falloc(nh);
    float *p = falloc(np * T);
    run(&mixer_kaczmarz, &c, &d, 0, o1, h1, p);
    run(&mixer_kaczmarz, &c, &d, 1, o2, h2, NULL);
    for (size_t i = 0; i < no; i++) assert_true(isfinite(o1[i]) && isfinite(o2[i]));
    for (size_t i = 0; i < np * T; i++) assert_true(!isnan(p[i]));
    assert_true(rel_err(o2, o1, no) < 1e-5), assert_true(rel_err(h2, h1, nh) < 1e-5);
    int iw = mixer_probe_index(&mixer_kaczmarz, "write_norm");
    int ib = mixer_probe_index(&mixer_kaczmarz, "beta");
    float w = p[5 * np + mixer_probe_offset(&mixer_kaczmarz, &c, iw) + 1];
    float b = p[5 * np + mixer_probe_offset(&mixer_kaczmarz, &c, ib) + 1];
    assert_true(w == 0.0f);
    assert_true(fabs(b - d.b[5 * H + 1] / 1e-6) < 1e-3 * b);
    /* t = 0 head 0 wrote nothing: its state is exactly h0 decayed */
    mixer_seq s = {.T = 1};
    s.in[IN_Q] = d.q, s.in[IN_K] = d.k, s.in[IN_V] = d.v, s.in[IN_G] = d.g, s.in[IN_BETA] = d.b;
    float *state = falloc(mixer_kaczmarz.state_floats(&c));
    memcpy(state, d.h0, nh * sizeof *state);
    mixer_run_steps(&mixer_kaczmarz, &c, state, &s, 0, o1, NULL);
    float a = expf(d.g[0]);
    for (size_t i = 0; i < (size_t)dk * dv; i++) assert_true(state[i] == a * d.h0[i]);
    free(state), free(o1), free(h1), free(o2), free(h2), free(p);
    data_free(&d);
}

static void test_kaczmarz_config(void **st) {
    (void)st;
    mixer_cfg c;
    err e = {{0}};
    opts o;
    assert_int_equal(mixer_configure(&mixer_kaczmarz, &c, 2, 16, 24, NULL, &e), 0);
    assert_true(c.eps == 1e-6f), assert_int_equal(c.chunk, 64);
    assert_true(fabsf(c.scale - 0.25f) < 1e-7f);
    const char *bad[][1] = {{"eps=0"}, {"eps=-1e-6"}, {"eps=1e-60"}, {"eps=abc"}, {"chunk=128"}};
    for (int i = 0; i < 5; i++) {
        assert_int_equal(opts_parse(&o, 1, (char *const *)bad[i], &e), 0);
        assert_int_equal(mixer_configure(&mixer_kaczmarz, &c, 2, 16, 24, &o, &e), -1);
        assert_non_null(strstr(e.msg, "kaczmarz"));
        opts_free(&o);
    }
    mixer_cfg c2 = cfg_make(&mixer_kaczmarz, 2, 16, 24, 16, 0.25);
    assert_true(c2.eps == 0.25f), assert_int_equal(c2.chunk, 16);
    /* gdn has no eps option */
    char *arg[] = {"eps=0.1"};
    assert_int_equal(opts_parse(&o, 1, arg, &e), 0);
    assert_int_equal(mixer_configure(&mixer_gdn, &c, 2, 16, 24, &o, &e), 0);
    assert_int_equal(opts_check_unused(&o, &e), -1);
    opts_free(&o);
    /* eta is read from IN_BETA under its own name */
    int found = 0;
    for (int i = 0; i < mixer_kaczmarz.ninputs; i++)
        if (mixer_kaczmarz.inputs[i].which == IN_BETA)
            found = 1, assert_string_equal(mixer_kaczmarz.inputs[i].name, "eta");
    assert_true(found);
    state_part parts[MIXER_MAX_STATE_PARTS];
    assert_int_equal(mixer_kaczmarz.state_parts(&c2, parts), 1);
    assert_string_equal(parts[0].name, "hT"), assert_string_equal(parts[0].init_name, "h0");
    assert_int_equal(parts[0].shape[1], 16), assert_int_equal(parts[0].shape[2], 24);
    assert_ptr_equal(mixer_find("kaczmarz"), &mixer_kaczmarz);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_kaczmarz_equals_gdn_rescaled),
        cmocka_unit_test(test_kaczmarz_prefill_equals_step),
        cmocka_unit_test(test_kaczmarz_brute_force),
        cmocka_unit_test(test_kaczmarz_probes),
        cmocka_unit_test(test_kaczmarz_post_write_identity),
        cmocka_unit_test(test_kaczmarz_zero_key),
        cmocka_unit_test(test_kaczmarz_config),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
