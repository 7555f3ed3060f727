/* delta_fixture.h: what the delta-family tests (test_mixer_gdn.c, test_mixer_deltanet.c,
 * test_mixer_kaczmarz.c) share: one head-major sequence with an initial state, drawn in the range
 * each layer produces, and a mixer configured from chunk= and eps=. */
#ifndef MIXSCOPE_DELTA_FIXTURE_H
#define MIXSCOPE_DELTA_FIXTURE_H

#include "tests/testutil.h"

#include "mixers/mixer.h"

/* One head-major sequence and an initial state, as the mixer reads them. */
typedef struct seqdata {
    int T, H, dk, dv;
    float *q, *k; /* [T, H, dk] */
    float *v;     /* [T, H, dv] */
    float *g, *b; /* [T, H] log-decay (0 for DeltaNet), beta (Kaczmarz: eta) */
    float *h0;    /* [H, dk, dv] */
} seqdata;

static inline float *falloc(size_t n) {
    float *p = calloc(n ? n : 1, sizeof *p);
    assert_non_null(p);
    return p;
}

static inline double *dalloc(size_t n) {
    double *p = calloc(n ? n : 1, sizeof *p);
    assert_non_null(p);
    return p;
}

/* Key kinds: unit keys (the layer's L2 norm) with g in [-0.52, -0.02] (GDN); the same with g = 0
 * (DeltaNet); raw keys, a random direction times a norm exp(N(0, 1.2)) (about 0.03 .. 30 over a
 * sequence), with GDN's g (Kaczmarz). Always beta = sigmoid(normal) and h0 of moderate size. */
enum { DELTA_KEYS_UNIT, DELTA_KEYS_UNIT_NO_DECAY, DELTA_KEYS_RAW };

static inline seqdata delta_data_make(uint64_t seed, int T, int H, int dk, int dv, int keys) {
    trng r = {seed};
    seqdata d = {T, H, dk, dv, NULL, NULL, NULL, NULL, NULL, NULL};
    size_t th = (size_t)T * H;
    d.q = falloc(th * dk), d.k = falloc(th * dk), d.v = falloc(th * dv);
    d.g = falloc(th), d.b = falloc(th), d.h0 = falloc((size_t)H * dk * dv);
    trng_fill(&r, d.q, th * dk, 1.0);
    trng_fill(&r, d.k, th * dk, 1.0);
    trng_fill(&r, d.v, th * dv, 1.0);
    trng_fill(&r, d.h0, (size_t)H * dk * dv, 0.5);
    for (size_t i = 0; i < th; i++) {
        double n = 0, norm = keys == DELTA_KEYS_RAW ? exp(1.2 * trng_normal(&r)) : 1.0;
        for (int j = 0; j < dk; j++) n += (double)d.k[i * dk + j] * d.k[i * dk + j];
        double scale = keys == DELTA_KEYS_RAW ? norm / sqrt(n) : 1.0 / sqrt(n + 1e-6);
        for (int j = 0; j < dk; j++) d.k[i * dk + j] = (float)(d.k[i * dk + j] * scale);
        if (keys != DELTA_KEYS_UNIT_NO_DECAY)
            d.g[i] = (float)(-0.02 - 0.25 * (trng_uniform(&r) + 1.0));
        d.b[i] = (float)(1.0 / (1.0 + exp(-trng_normal(&r))));
    }
    return d;
}

static inline void data_free(seqdata *d) {
    free(d->q), free(d->k), free(d->v), free(d->g), free(d->b), free(d->h0);
}

/* m configured with chunk= and, when eps > 0, eps=. */
static inline mixer_cfg delta_cfg_make(const mixer_ops *m, int H, int dk, int dv, int chunk,
                                       double eps) {
    char a0[32], a1[48];
    snprintf(a0, sizeof a0, "chunk=%d", chunk);
    snprintf(a1, sizeof a1, "eps=%.17g", eps);
    char *argv[] = {a0, a1};
    opts o;
    err e = {{0}};
    assert_int_equal(opts_parse(&o, eps > 0 ? 2 : 1, argv, &e), 0);
    mixer_cfg c;
    if (mixer_configure(m, &c, H, dk, dv, &o, &e)) fail_msg("%s", e.msg);
    assert_int_equal(opts_check_unused(&o, &e), 0);
    opts_free(&o);
    return c;
}

/* Probe `name` of head h in one token's probe buffer p of mixer m. */
static inline float delta_probe(const mixer_ops *m, const mixer_cfg *c, const float *p,
                                const char *name, int h) {
    int i = mixer_probe_index(m, name);
    if (i < 0) fail_msg("probe '%s' missing", name);
    return p[mixer_probe_offset(m, c, i) + (size_t)h];
}

/* |got - want| <= tol max(1, |want|), or the test fails naming the probe. */
static inline void near(const char *name, double got, double want, double tol) {
    if (!(fabs(got - want) <= tol * fmax(1.0, fabs(want))))
        fail_msg("probe %s: got %.9g want %.9g", name, got, want);
}

#endif
