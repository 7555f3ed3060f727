/* test_attribution.c: exact attribution (mixers/attribution.h) against each core's own step.
 *   - for gdn, deltanet, kaczmarz (unit, tiny and huge raw keys), gla, mamba2, softmax and
 *     parallax on random inputs with a non-zero initial state and T not a multiple of the chunk:
 *     sum_j M_ij v_j + o_init_i equals the step's o_i (relative < 1e-5), M_ij = 0 for j > i;
 *   - M does not depend on v: a second draw of the values with the same M reproduces its outputs;
 *   - the decay-only part equals M where there is no key removal (gla, mamba2, attention) and,
 *     for the delta family, the brute-force scale beta_j exp(G_i - G_j) q_i . k_j;
 *   - with h0 = 0, o_init is zero; kalman and kata are refused in words. */
#include "tests/delta_fixture.h"

#include "mixers/attribution.h"

extern const mixer_ops mixer_gdn, mixer_deltanet, mixer_kaczmarz, mixer_gla, mixer_mamba2,
    mixer_softmax, mixer_parallax, mixer_kalman, mixer_kata;

typedef struct run {
    int T, H, dk, dv;
    float *in[IN_COUNT];
    float *h0; /* the whole flat state */
} run;

/* o [T, H, dv] by steps from h0 */
static void steps(const mixer_ops *m, const mixer_cfg *c, const run *r, float *o) {
    size_t sf = m->state_floats(c);
    float *s = falloc(sf);
    memcpy(s, r->h0, sf * sizeof(float));
    mixer_seq x = {.T = r->T};
    for (int i = 0; i < IN_COUNT; i++) x.in[i] = r->in[i];
    mixer_run_steps(m, c, s, &x, 0, o, NULL);
    free(s);
}

/* max over i of |sum_j M v + o_init - o| relative to |o| */
static double recon_err(const run *r, const float *M, const float *oi, const float *v,
                        const float *o) {
    double num = 0, den = 0;
    int T = r->T, H = r->H, dv = r->dv;
    for (int i = 0; i < T; i++)
        for (int h = 0; h < H; h++) {
            const float *Mr = M + ((size_t)h * T + i) * T;
            for (int j = i + 1; j < T; j++) assert_true(Mr[j] == 0.0f);
            for (int c = 0; c < dv; c++) {
                double a = oi[((size_t)i * H + h) * dv + c];
                for (int j = 0; j <= i; j++) a += (double)Mr[j] * v[((size_t)j * H + h) * dv + c];
                double ref = o[((size_t)i * H + h) * dv + c];
                num += (a - ref) * (a - ref), den += ref * ref;
            }
        }
    return sqrt(num / den);
}

static void check(const mixer_ops *m, const mixer_cfg *c, run *r, const char *what) {
    int T = r->T, H = r->H;
    size_t nv = (size_t)T * H * r->dv, tt = (size_t)H * T * T;
    float *o = falloc(nv), *M = falloc(tt), *Md = falloc(tt), *oi = falloc(nv);
    mixer_seq x = {.T = T};
    for (int i = 0; i < IN_COUNT; i++) x.in[i] = r->in[i];
    err e = {{0}};
    if (mixer_attribution(m, c, r->h0, &x, M, Md, oi, &e)) fail_msg("%s: %s", what, e.msg);
    steps(m, c, r, o);
    double err1 = recon_err(r, M, oi, r->in[IN_V], o);
    if (!(err1 < 1e-5)) fail_msg("%s: reconstruction off by %g", what, err1);
    /* new values, the same M and o_init */
    trng g = {99};
    trng_fill(&g, r->in[IN_V], nv, 1.0);
    steps(m, c, r, o);
    double err2 = recon_err(r, M, oi, r->in[IN_V], o);
    if (!(err2 < 1e-5)) fail_msg("%s: with other values off by %g", what, err2);
    int removal =
        !strcmp(m->name, "gdn") || !strcmp(m->name, "deltanet") || !strcmp(m->name, "kaczmarz");
    if (!removal) {
        assert_memory_equal(M, Md, tt * sizeof(float));
    } else { /* brute force: scale w_j exp(G_i - G_j) q_i . k_j */
        double worst = 0, big = 0;
        for (int h = 0; h < H; h++)
            for (int i = 0; i < T; i++)
                for (int j = 0; j <= i; j++) {
                    size_t th = (size_t)j * H + h;
                    const float *k = r->in[IN_K] + th * r->dk;
                    const float *q = r->in[IN_Q] + ((size_t)i * H + h) * r->dk;
                    double qk = 0, kk = 0, G = 0;
                    for (int d = 0; d < r->dk; d++)
                        qk += (double)q[d] * k[d], kk += (double)k[d] * k[d];
                    for (int t = j + 1; t <= i && r->in[IN_G]; t++)
                        G += r->in[IN_G][(size_t)t * H + h];
                    double w = r->in[IN_BETA][th];
                    if (!strcmp(m->name, "kaczmarz")) w /= kk + c->eps;
                    double ref = c->scale * w * exp(G) * qk;
                    double d = fabs(ref - Md[((size_t)h * T + i) * T + j]);
                    worst = d > worst ? d : worst, big = fabs(ref) > big ? fabs(ref) : big;
                }
        if (!(worst <= 1e-5 * big))
            fail_msg("%s: decay-only part off by %g of %g", what, worst, big);
        /* the removal changes something (else the test shows nothing) */
        double diff = 0;
        for (size_t i = 0; i < tt; i++) diff = fmax(diff, fabs((double)M[i] - Md[i]));
        assert_true(diff > 1e-3 * big);
    }
    printf("  %-28s reconstruction %.2e, other values %.2e\n", what, err1, err2);
    free(o), free(M), free(Md), free(oi);
}

static run delta_run(int keys, uint64_t seed) {
    seqdata d = delta_data_make(seed, 37, 2, 8, 6, keys);
    run r = {37, 2, 8, 6, {0}, d.h0};
    r.in[IN_Q] = d.q, r.in[IN_K] = d.k, r.in[IN_V] = d.v, r.in[IN_BETA] = d.b;
    r.in[IN_G] = keys == DELTA_KEYS_UNIT_NO_DECAY ? (free(d.g), NULL) : d.g;
    return r;
}

static void run_free(run *r) {
    for (int i = 0; i < IN_COUNT; i++) free(r->in[i]);
    free(r->h0);
}

static void test_delta(void **st) {
    (void)st;
    run r = delta_run(DELTA_KEYS_UNIT, 1);
    mixer_cfg c = delta_cfg_make(&mixer_gdn, 2, 8, 6, 16, 0);
    check(&mixer_gdn, &c, &r, "gdn");
    run_free(&r);
    r = delta_run(DELTA_KEYS_UNIT_NO_DECAY, 2);
    c = delta_cfg_make(&mixer_deltanet, 2, 8, 6, 16, 0);
    check(&mixer_deltanet, &c, &r, "deltanet");
    run_free(&r);
    /* raw keys of norm 0.03..30: Kaczmarz's beta = eta / (|k|^2 + eps) over four decades */
    r = delta_run(DELTA_KEYS_RAW, 3);
    c = delta_cfg_make(&mixer_kaczmarz, 2, 8, 6, 16, 1e-6);
    check(&mixer_kaczmarz, &c, &r, "kaczmarz raw keys");
    for (size_t i = 0; i < (size_t)37 * 2 * 8; i++) r.in[IN_K][i] *= 1e-3f; /* tiny keys */
    check(&mixer_kaczmarz, &c, &r, "kaczmarz tiny keys");
    run_free(&r);
}

static run plain_run(const mixer_ops *m, const mixer_cfg *c, int gk, uint64_t seed) {
    int T = 37, H = 2, dk = 8, dv = 6;
    trng g = {seed};
    run r = {T, H, dk, dv, {0}, NULL};
    size_t nk = (size_t)T * H * dk;
    r.in[IN_Q] = falloc(nk), r.in[IN_K] = falloc(nk), r.in[IN_V] = falloc((size_t)T * H * dv);
    trng_fill(&g, r.in[IN_Q], nk, 1.0), trng_fill(&g, r.in[IN_K], nk, 1.0);
    trng_fill(&g, r.in[IN_V], (size_t)T * H * dv, 1.0);
    if (m->inputs[1].which == IN_R || !strcmp(m->name, "parallax")) {
        r.in[IN_R] = falloc(nk);
        trng_fill(&g, r.in[IN_R], nk, 0.3);
    }
    size_t ng = gk ? nk : (size_t)T * H;
    if (!strcmp(m->name, "gla") || !strcmp(m->name, "mamba2")) {
        float *gg = falloc(ng);
        for (size_t i = 0; i < ng; i++) gg[i] = (float)(-0.02 - 0.3 * (trng_uniform(&g) + 1.0));
        r.in[gk ? IN_GK : IN_G] = gg;
    }
    size_t sf = m->state_floats(c);
    r.h0 = falloc(sf);
    m->state_init(c, r.h0);
    state_part parts[MIXER_MAX_STATE_PARTS];
    int np = m->state_parts(c, parts);
    for (int p = 0; p < np; p++)
        if (!strcmp(parts[p].name, "hT"))
            trng_fill(&g, r.h0 + parts[p].offset, (size_t)H * dk * dv, 0.5);
    return r;
}

static mixer_cfg plain_cfg(const mixer_ops *m, int T) {
    opts o = {0};
    err e = {{0}};
    mixer_cfg c;
    if (mixer_configure(m, &c, 2, 8, 6, &o, &e)) fail_msg("%s", e.msg);
    if (c.max_t < T) c.max_t = T;
    return c;
}

static void test_gla_mamba2_attention(void **st) {
    (void)st;
    const mixer_ops *ms[] = {&mixer_gla, &mixer_mamba2, &mixer_softmax, &mixer_parallax};
    for (int i = 0; i < 4; i++) {
        mixer_cfg c = plain_cfg(ms[i], 37);
        run r = plain_run(ms[i], &c, ms[i] == &mixer_gla, 10 + i);
        check(ms[i], &c, &r, ms[i]->name);
        run_free(&r);
    }
}

static void test_zero_init_and_refusals(void **st) {
    (void)st;
    run r = delta_run(DELTA_KEYS_UNIT, 5);
    mixer_cfg c = delta_cfg_make(&mixer_gdn, 2, 8, 6, 16, 0);
    size_t nv = (size_t)37 * 2 * 6, tt = (size_t)2 * 37 * 37;
    float *M = falloc(tt), *oi = falloc(nv);
    mixer_seq x = {.T = 37};
    for (int i = 0; i < IN_COUNT; i++) x.in[i] = r.in[i];
    err e = {{0}};
    assert_int_equal(mixer_attribution(&mixer_gdn, &c, NULL, &x, M, NULL, oi, &e), 0);
    for (size_t i = 0; i < nv; i++) assert_true(oi[i] == 0.0f);
    assert_false(attribution_supported(&mixer_kalman));
    assert_false(attribution_supported(&mixer_kata));
    assert_int_equal(mixer_attribution(&mixer_kata, &c, NULL, &x, M, NULL, oi, &e), -1);
    expect_has(e.msg, "state-dependent denominator");
    free(M), free(oi);
    run_free(&r);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_delta),
        cmocka_unit_test(test_gla_mamba2_attention),
        cmocka_unit_test(test_zero_init_and_refusals),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
