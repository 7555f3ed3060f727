/* test_step_par.c: mixer_step_par (the heads of a core split over threads) gives the same bits as
 * the core's own step: output, state and every probe, over many tokens, for every core it splits
 * (one state part and several) and with 1, 2, 3 and 4 threads; and the cores it does not split
 * still step. */
#include "tests/testutil.h"

#include "core/pool.h"
#include "mixers/mixer.h"

static uint64_t g_rng = 12345;
static float frand(void) {
    g_rng = g_rng * 6364136223846793005ull + 1442695040888963407ull;
    return (float)((g_rng >> 40) * (1.0 / 16777216.0)) * 2.0f - 1.0f;
}

static void check_mixer(const char *name, const char *optline, int threads) {
    const mixer_ops *m = mixer_find(name);
    assert_non_null(m);
    const int H = 5, dk = 96, dv = 96, T = 12; /* 5 x 96 x 96 >= the split threshold */
    mixer_cfg c;
    err e = {{0}};
    opts o;
    char buf[128];
    snprintf(buf, sizeof buf, "%s", optline);
    char *argv[8];
    int argc = 0;
    for (char *w = strtok(buf, " "); w && argc < 8; w = strtok(NULL, " ")) argv[argc++] = w;
    assert_int_equal(opts_parse(&o, argc, argv, &e), 0);
    c.max_t = 64;
    if (mixer_configure(m, &c, H, dk, dv, &o, &e)) fail_msg("%s: %s", name, e.msg);
    opts_free(&o);
    size_t sf = m->state_floats(&c), pf = mixer_probe_floats(m, &c);
    float *s1 = malloc(sf * 4), *s2 = malloc(sf * 4), *p1 = malloc((pf + 1) * 4),
          *p2 = malloc((pf + 1) * 4), *o1 = malloc((size_t)H * dv * 4),
          *o2 = malloc((size_t)H * dv * 4);
    m->state_init(&c, s1);
    m->state_init(&c, s2);
    float *in[IN_COUNT];
    mixer_tok x = {{0}};
    for (int i = 0; i < IN_COUNT; i++) {
        int n = mixer_input_floats(&c, (mixer_input)i) * H;
        in[i] = malloc((size_t)n * 4 + 4);
    }
    for (int i = 0; i < m->ninputs; i++) x.in[m->inputs[i].which] = in[m->inputs[i].which];
    assert_int_equal(pool_set_threads(threads, &e), 0);
    for (int t = 0; t < T; t++) {
        for (int i = 0; i < IN_COUNT; i++) {
            int n = mixer_input_floats(&c, (mixer_input)i) * H;
            for (int j = 0; j < n; j++) in[i][j] = frand();
            if (i == IN_G || i == IN_GK)
                for (int j = 0; j < n; j++) in[i][j] = -0.1f * fabsf(in[i][j]);
            if (i == IN_BETA || i == IN_LV)
                for (int j = 0; j < n; j++) in[i][j] = 0.5f + 0.5f * fabsf(in[i][j]);
        }
        m->step(&c, s1, &x, t, o1, p1);
        mixer_step_par(m, &c, s2, &x, t, o2, p2);
        if (memcmp(o1, o2, (size_t)H * dv * 4) || memcmp(s1, s2, sf * 4) || memcmp(p1, p2, pf * 4))
            fail_msg("%s (%d threads): token %d differs from one call", name, threads, t);
    }
    assert_int_equal(pool_set_threads(0, &e), 0);
    for (int i = 0; i < IN_COUNT; i++) free(in[i]);
    free(s1), free(s2), free(p1), free(p2), free(o1), free(o2);
}

static void test_same_bits(void **state) {
    (void)state;
    static const char *const M[][2] = {
        {"gdn", ""},     {"deltanet", ""}, {"kaczmarz", ""},       {"gla", ""},
        {"mamba2", ""},  {"kalman", ""},   {"kata", "variant=m1"}, {"kata", "variant=delta"},
        {"softmax", ""}, {"parallax", ""},
    };
    for (int th = 1; th <= 4; th++)
        for (size_t i = 0; i < sizeof M / sizeof M[0]; i++) check_mixer(M[i][0], M[i][1], th);
}

int main(void) {
    const struct CMUnitTest tests[] = {cmocka_unit_test(test_same_bits)};
    return cmocka_run_group_tests(tests, NULL, NULL);
}
