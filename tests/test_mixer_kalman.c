/* test_mixer_kalman.c: Kalman linear attention (mixers/kalman.c, spec/kalman.md).
 *
 * The truth is a brute-force per-lane filter written here in double precision (spec §3). Both
 * parallel forms (Mobius two-scan, merged 3x3) and repeated step must match it; prefill must equal
 * step; the gates satisfy forget = a (1 - write) (§5); constant inputs drive lambda to the closed
 * form lambda* (§4.5); every probe matches its definition. */
#include "testutil.h"

#include "core/opts.h"
#include "mixers/mixer.h"

extern const mixer_ops mixer_kalman;

/* One test problem. Shapes: q, k [T, H, S]; v, lv [T, H, M]; a, p, lam0, eta0 [H, M, S]. */
typedef struct kdata {
    int H, M, S, T;
    float *q, *k, *v, *lv;
    float *a, *p;
    float *lam0, *eta0;
} kdata;

static size_t kd_lanes(const kdata *d) {
    return (size_t)d->H * d->M * d->S;
}

/* The spec's test distribution (§9): v ~ N(0,1), lambda_v ~ U(0.5,1.5), k, q ~ 0.3 N(0,1),
 * a ~ U(0.4,0.9), p ~ U(0.01,0.06). nonunit: lambda0 ~ U(0.3,3), eta0 ~ N(0,1) instead of the
 * prior. */
static void kd_make(kdata *d, int H, int M, int S, int T, uint64_t seed, int nonunit) {
    trng r = {seed};
    d->H = H, d->M = M, d->S = S, d->T = T;
    size_t nk = (size_t)T * H * S, nv = (size_t)T * H * M, nl = (size_t)H * M * S;
    d->q = malloc(nk * sizeof(float)), d->k = malloc(nk * sizeof(float));
    d->v = malloc(nv * sizeof(float)), d->lv = malloc(nv * sizeof(float));
    d->a = malloc(nl * sizeof(float)), d->p = malloc(nl * sizeof(float));
    d->lam0 = malloc(nl * sizeof(float)), d->eta0 = malloc(nl * sizeof(float));
    assert_true(d->q && d->k && d->v && d->lv && d->a && d->p && d->lam0 && d->eta0);
    trng_fill(&r, d->q, nk, 0.3);
    trng_fill(&r, d->k, nk, 0.3);
    trng_fill(&r, d->v, nv, 1.0);
    for (size_t i = 0; i < nv; i++) d->lv[i] = (float)(1.0 + 0.5 * trng_uniform(&r));
    for (size_t i = 0; i < nl; i++) {
        d->a[i] = (float)(0.65 + 0.25 * trng_uniform(&r));
        d->p[i] = (float)(0.035 + 0.025 * trng_uniform(&r));
        d->lam0[i] = nonunit ? (float)(1.65 + 1.35 * trng_uniform(&r)) : 1.0f;
        d->eta0[i] = nonunit ? (float)trng_normal(&r) : 0.0f;
    }
}

static void kd_free(kdata *d) {
    free(d->q), free(d->k), free(d->v), free(d->lv), free(d->a), free(d->p);
    free(d->lam0), free(d->eta0);
}

/* The sequential filter of spec §3 in double, with the floors of §7.2. Outputs (any may be NULL):
 * y, yvar [T, H, M]; lam, eta [T + 1, H, M, S] (index 0 = the initial state). */
static void ref_filter(const kdata *d, int prior, double *y, double *yvar, double *lam_h,
                       double *eta_h) {
    const int H = d->H, M = d->M, S = d->S, T = d->T;
    const size_t nl = kd_lanes(d);
    if (y) memset(y, 0, (size_t)T * H * M * sizeof *y);
    if (yvar) memset(yvar, 0, (size_t)T * H * M * sizeof *yvar);
    for (int h = 0; h < H; h++)
        for (int m = 0; m < M; m++)
            for (int s = 0; s < S; s++) {
                size_t i = ((size_t)h * M + m) * S + s;
                double a = d->a[i], a2 = fmax(a * a, 1e-12), p = fmax(d->p[i], 1e-12);
                double lam = d->lam0[i], eta = d->eta0[i];
                if (lam_h) lam_h[i] = lam;
                if (eta_h) eta_h[i] = eta;
                for (int t = 0; t < T; t++) {
                    size_t tk = (size_t)t * H + h;
                    double kk = d->k[tk * S + s], lv = d->lv[tk * M + m], vv = d->v[tk * M + m];
                    double den = fmax(a2 + p * lam, 1e-12);
                    eta = (a / den) * eta + vv * lv * kk;
                    lam = lam / den + lv * kk * kk;
                    double var = 1.0 / fmax(lam, 1e-12), mean = eta * var;
                    if (prior) mean = a * mean, var = a2 * var + p;
                    double qq = d->q[tk * S + s];
                    if (y) y[tk * M + m] += qq * mean;
                    if (yvar) yvar[tk * M + m] += qq * qq * var;
                    if (lam_h) lam_h[(size_t)(t + 1) * nl + i] = lam;
                    if (eta_h) eta_h[(size_t)(t + 1) * nl + i] = eta;
                }
            }
}

/* Configures the mixer from "key=value" strings (NULL-terminated) and attaches d's params. */
static void kcfg(mixer_cfg *c, const kdata *d, const char *const *args) {
    int n = 0;
    while (args && args[n]) n++;
    opts o;
    err e = {{0}};
    assert_int_equal(opts_parse(&o, n, (char *const *)args, &e), 0);
    if (mixer_configure(&mixer_kalman, c, d->H, d->S, d->M, &o, &e)) fail_msg("%s", e.msg);
    assert_int_equal(opts_check_unused(&o, &e), 0);
    opts_free(&o);
    c->params[0] = d->a, c->params[1] = d->p;
}

static mixer_seq kseq(const kdata *d) {
    mixer_seq s = {.T = d->T};
    s.in[IN_Q] = d->q, s.in[IN_K] = d->k, s.in[IN_V] = d->v, s.in[IN_LV] = d->lv;
    return s;
}

/* A fresh state holding d's initial (lambda0, eta0). */
static float *kstate(const mixer_cfg *c, const kdata *d) {
    size_t n = mixer_kalman.state_floats(c), nl = kd_lanes(d);
    assert_int_equal(n, 2 * nl);
    float *st = malloc(n * sizeof *st);
    assert_non_null(st);
    mixer_kalman.state_init(c, st);
    memcpy(st, d->lam0, nl * sizeof *st);
    memcpy(st + nl, d->eta0, nl * sizeof *st);
    return st;
}

/* o [T, H, M] and the final state from prefill (steps = 0) or repeated step (steps = 1). */
static void krun(const mixer_cfg *c, const kdata *d, int steps, float *o, float *state_out) {
    float *st = kstate(c, d);
    mixer_seq s = kseq(d);
    if (steps)
        mixer_run_steps(&mixer_kalman, c, st, &s, 0, o, NULL);
    else
        mixer_kalman.prefill(c, st, &s, 0, o);
    memcpy(state_out, st, mixer_kalman.state_floats(c) * sizeof *st);
    free(st);
}

static const char *const scans[] = {"scan=mobius", "scan=merged"};
static const char *const chunks[] = {"chunk=16", "chunk=32", "chunk=64"};

/* Mobius two-scan == merged 3x3 scan == repeated step == the double filter, for y and the state. */
static void test_scans_match_reference(void **unused) {
    (void)unused;
    kdata d;
    kd_make(&d, 2, 16, 8, 200, 11, 1);
    size_t ny = (size_t)d.T * d.H * d.M, nl = kd_lanes(&d);
    double *y = malloc(ny * sizeof *y), *lam = malloc((d.T + 1) * nl * sizeof *lam);
    double *eta = malloc((d.T + 1) * nl * sizeof *eta), *st_ref = malloc(2 * nl * sizeof *st_ref);
    float *o = malloc(ny * sizeof *o), *o_mob = malloc(ny * sizeof *o), *st = malloc(2 * nl * 4);
    float *st_mob = malloc(2 * nl * 4);
    ref_filter(&d, 0, y, NULL, lam, eta);
    memcpy(st_ref, lam + (size_t)d.T * nl, nl * sizeof *st_ref);
    memcpy(st_ref + nl, eta + (size_t)d.T * nl, nl * sizeof *st_ref);
    double worst_y = 0, worst_s = 0, worst_pair = 0;
    for (int ch = 0; ch < 3; ch++) {
        for (int sc = 0; sc < 2; sc++) {
            const char *args[] = {scans[sc], chunks[ch], NULL};
            mixer_cfg c;
            kcfg(&c, &d, args);
            krun(&c, &d, 0, o, st);
            double ey = rel_err_d(o, y, ny), es = rel_err_d(st, st_ref, 2 * nl);
            assert_true(ey < 1e-5 && es < 1e-5);
            worst_y = fmax(worst_y, ey), worst_s = fmax(worst_s, es);
            if (sc == 0) {
                memcpy(o_mob, o, ny * sizeof *o), memcpy(st_mob, st, 2 * nl * 4);
            } else { /* merged vs Mobius directly */
                double ep = fmax(rel_err(o, o_mob, ny), rel_err(st, st_mob, 2 * nl));
                assert_true(ep < 1e-5);
                worst_pair = fmax(worst_pair, ep);
            }
        }
    }
    mixer_cfg c;
    kcfg(&c, &d, NULL);
    krun(&c, &d, 1, o, st);
    double ey = rel_err_d(o, y, ny), es = rel_err_d(st, st_ref, 2 * nl);
    assert_true(ey < 1e-5 && es < 1e-5);
    printf("  scans vs double filter: y %.2e state %.2e; merged vs mobius %.2e; steps y %.2e "
           "state %.2e\n",
           worst_y, worst_s, worst_pair, ey, es);
    free(y), free(lam), free(eta), free(st_ref), free(o), free(o_mob), free(st), free(st_mob);
    kd_free(&d);
}

/* prefill == repeated step for T in {1, 63, 64, 65, 200}, every chunk, both scans, non-zero
 * initial state; and prefill in two pieces == one. */
static void test_prefill_equals_steps(void **unused) {
    (void)unused;
    const int Ts[] = {1, 63, 64, 65, 200};
    double worst = 0;
    for (int ti = 0; ti < 5; ti++) {
        kdata d;
        kd_make(&d, 2, 6, 8, Ts[ti], 100 + ti, 1);
        size_t ny = (size_t)d.T * d.H * d.M, nl = kd_lanes(&d);
        float *o1 = malloc(ny * 4), *o2 = malloc(ny * 4), *s1 = malloc(2 * nl * 4),
              *s2 = malloc(2 * nl * 4);
        for (int sc = 0; sc < 2; sc++)
            for (int ch = 0; ch < 3; ch++) {
                const char *args[] = {scans[sc], chunks[ch], NULL};
                mixer_cfg c;
                kcfg(&c, &d, args);
                krun(&c, &d, 1, o1, s1);
                krun(&c, &d, 0, o2, s2);
                double e = fmax(rel_err(o2, o1, ny), rel_err(s2, s1, 2 * nl));
                if (e >= 1e-5) fail_msg("T=%d %s %s: rel err %.3e", d.T, scans[sc], chunks[ch], e);
                worst = fmax(worst, e);
                /* two prefills (split after t0 tokens) carry the state exactly like one */
                int t0 = d.T / 3;
                float *st = kstate(&c, &d);
                mixer_seq s = kseq(&d);
                s.T = t0;
                mixer_kalman.prefill(&c, st, &s, 0, o2);
                mixer_seq s2q = kseq(&d);
                s2q.T = d.T - t0;
                for (int i = 0; i < IN_COUNT; i++)
                    if (s2q.in[i])
                        s2q.in[i] += (size_t)t0 * d.H * mixer_input_floats(&c, (mixer_input)i);
                mixer_kalman.prefill(&c, st, &s2q, t0, o2 + (size_t)t0 * d.H * d.M);
                e = fmax(rel_err(o2, o1, ny), rel_err(st, s1, 2 * nl));
                if (e >= 1e-5) fail_msg("T=%d split prefill: rel err %.3e", d.T, e);
                worst = fmax(worst, e);
                free(st);
            }
        free(o1), free(o2), free(s1), free(s2);
        kd_free(&d);
    }
    printf("  prefill vs steps (T 1..200, chunks 16/32/64, both scans): max rel err %.2e\n", worst);
}

/* Constant phi: lambda -> lambda* of spec §4.5 (positive root of p l^2 + (a^2-1-p phi) l - phi
 * a^2 = 0), including phi = 0 lanes (k_s = 0), where lambda* = (1 - a^2) / p. */
static void test_steady_state(void **unused) {
    (void)unused;
    kdata d;
    kd_make(&d, 1, 5, 4, 600, 21, 1);
    const int H = d.H, M = d.M, S = d.S, T = d.T;
    for (int t = 1; t < T; t++) { /* every token equal to the first */
        memcpy(d.q + (size_t)t * H * S, d.q, (size_t)H * S * 4);
        memcpy(d.k + (size_t)t * H * S, d.k, (size_t)H * S * 4);
        memcpy(d.v + (size_t)t * H * M, d.v, (size_t)H * M * 4);
        memcpy(d.lv + (size_t)t * H * M, d.lv, (size_t)H * M * 4);
    }
    for (int t = 0; t < T; t++) d.k[(size_t)t * H * S] = 0.0f; /* s = 0: no information */
    size_t nl = kd_lanes(&d), ny = (size_t)T * H * M;
    double *star = malloc(nl * sizeof *star);
    for (int m = 0; m < M; m++)
        for (int s = 0; s < S; s++) {
            size_t i = (size_t)m * S + s;
            double a2 = (double)d.a[i] * d.a[i], p = d.p[i];
            double phi = (double)d.lv[m] * d.k[s] * d.k[s];
            double b = a2 - 1 - p * phi;
            star[i] = (-b + sqrt(b * b + 4 * p * phi * a2)) / (2 * p);
            /* it is the fixed point of the precision recursion */
            double next = star[i] / (a2 + p * star[i]) + phi;
            assert_true(fabs(next - star[i]) < 1e-12 * star[i]);
        }
    for (int m = 0; m < M; m++) { /* phi = 0 closed form */
        double a2 = (double)d.a[(size_t)m * S] * d.a[(size_t)m * S];
        assert_true(fabs(star[(size_t)m * S] - (1 - a2) / d.p[(size_t)m * S]) <
                    1e-12 * star[(size_t)m * S]);
    }
    float *o = malloc(ny * 4), *st = malloc(2 * nl * 4);
    double worst = 0;
    for (int sc = 0; sc < 2; sc++) {
        const char *args[] = {scans[sc], NULL};
        mixer_cfg c;
        kcfg(&c, &d, args);
        krun(&c, &d, 0, o, st);
        double e = rel_err_d(st, star, nl);
        assert_true(e < 1e-5);
        worst = fmax(worst, e);
    }
    /* the lambda_star probe and lambda_star_gap at the last token */
    mixer_cfg c;
    kcfg(&c, &d, NULL);
    size_t np = mixer_probe_floats(&mixer_kalman, &c);
    float *pr = malloc((size_t)T * np * 4), *s0 = kstate(&c, &d);
    mixer_seq seq = kseq(&d);
    mixer_run_steps(&mixer_kalman, &c, s0, &seq, 0, o, pr);
    const float *last = pr + (size_t)(T - 1) * np;
    const float *ps = last + mixer_probe_offset(&mixer_kalman, &c,
                                                mixer_probe_index(&mixer_kalman, "lambda_star"));
    double ep = rel_err_d(ps, star, nl);
    assert_true(ep < 1e-6);
    float gap0 = pr[mixer_probe_offset(&mixer_kalman, &c,
                                       mixer_probe_index(&mixer_kalman, "lambda_star_gap"))];
    float gap = last[mixer_probe_offset(&mixer_kalman, &c,
                                        mixer_probe_index(&mixer_kalman, "lambda_star_gap"))];
    assert_true(gap < 1e-5 && gap0 > 1e-2); /* far at the start, converged at the end */
    printf("  steady state: lambda_T vs lambda* %.2e; probe lambda_star %.2e; gap %.2e -> %.2e\n",
           worst, ep, gap0, gap);
    free(star), free(o), free(st), free(pr), free(s0);
    kd_free(&d);
}

/* Probe p of token t, head h: pointer to its [width] floats. */
static const float *kprobe(const mixer_cfg *c, const float *pr, size_t np, int t, const char *name,
                           int h) {
    int i = mixer_probe_index(&mixer_kalman, name);
    if (i < 0) fail_msg("no probe %s", name);
    return pr + (size_t)t * np + mixer_probe_offset(&mixer_kalman, c, i) +
           (size_t)h * mixer_width_floats(c, mixer_kalman.probes[i].width);
}

/* Spec §5: forget = a (1 - write) with the two gates computed from their own definitions;
 * w in [0, 1); alpha in (0, 1/a]; K k = w. */
static void test_gates(void **unused) {
    (void)unused;
    kdata d;
    kd_make(&d, 2, 6, 5, 60, 31, 1);
    mixer_cfg c;
    kcfg(&c, &d, NULL);
    size_t np = mixer_probe_floats(&mixer_kalman, &c), ny = (size_t)d.T * d.H * d.M;
    float *pr = malloc((size_t)d.T * np * 4), *o = malloc(ny * 4), *st = kstate(&c, &d);
    mixer_seq s = kseq(&d);
    mixer_run_steps(&mixer_kalman, &c, st, &s, 0, o, pr);
    double worst = 0, worst_k = 0;
    for (int t = 0; t < d.T; t++)
        for (int h = 0; h < d.H; h++) {
            const float *w = kprobe(&c, pr, np, t, "write", h);
            const float *f = kprobe(&c, pr, np, t, "forget", h);
            const float *al = kprobe(&c, pr, np, t, "alpha", h);
            const float *kg = kprobe(&c, pr, np, t, "kalman_gain", h);
            for (int m = 0; m < d.M; m++)
                for (int sI = 0; sI < d.S; sI++) {
                    int j = m * d.S + sI;
                    float a = d.a[((size_t)h * d.M + m) * d.S + sI];
                    float kk = d.k[((size_t)t * d.H + h) * d.S + sI];
                    assert_true(w[j] >= 0 && w[j] < 1);
                    assert_true(al[j] > 0 && al[j] <= 1.0f / a * (1 + 1e-6f));
                    worst = fmax(worst, fabs(f[j] - a * (1 - w[j])));
                    worst_k = fmax(worst_k, fabs(kg[j] * kk - w[j]));
                }
        }
    assert_true(worst < 1e-6 && worst_k < 1e-6);
    printf("  gates: max |f - a(1-w)| %.2e, max |K k - w| %.2e\n", worst, worst_k);
    free(pr), free(o), free(st);
    kd_free(&d);
}

/* Every probe against its definition, evaluated in double from the reference filter's states. */
static void test_probes(void **unused) {
    (void)unused;
    kdata d;
    kd_make(&d, 2, 4, 3, 6, 41, 1);
    const int H = d.H, M = d.M, S = d.S, T = d.T, L = M * S;
    const char *args[] = {"decode_from_prior=1", NULL}; /* yvar then uses the prior form */
    mixer_cfg c;
    kcfg(&c, &d, args);
    size_t np = mixer_probe_floats(&mixer_kalman, &c), nl = kd_lanes(&d), ny = (size_t)T * H * M;
    float *pr = malloc((size_t)T * np * 4), *o = malloc(ny * 4), *st = kstate(&c, &d);
    mixer_seq sq = kseq(&d);
    mixer_run_steps(&mixer_kalman, &c, st, &sq, 0, o, pr);
    double *lam = malloc((T + 1) * nl * 8), *eta = malloc((T + 1) * nl * 8);
    double *yvar = malloc(ny * 8), *y = malloc(ny * 8);
    ref_filter(&d, 1, y, yvar, lam, eta);
    /* expected values, laid out like the probe buffer: [T][np] */
    double *ex = calloc((size_t)T * np, 8);
    for (int t = 0; t < T; t++)
        for (int h = 0; h < H; h++) {
#define EX(name) (ex + (kprobe(&c, pr, np, t, name, h) - pr))
            double lmin = INFINITY, lmax = -INFINITY, wsum = 0, fsum = 0, gsum = 0, gap = 0;
            for (int m = 0; m < M; m++) {
                size_t tv = ((size_t)t * H + h) * M + m;
                double lv = d.lv[tv], v = d.v[tv], q2 = 0, esum = 0, zsum = 0;
                for (int s = 0; s < S; s++) {
                    size_t i = ((size_t)h * M + m) * S + s, j = (size_t)m * S + s;
                    double kk = d.k[((size_t)t * H + h) * S + s],
                           qq = d.q[((size_t)t * H + h) * S + s];
                    double a = d.a[i], a2 = a * a, p = d.p[i];
                    double l0 = lam[(size_t)t * nl + i], l1 = lam[(size_t)(t + 1) * nl + i];
                    double e0 = eta[(size_t)t * nl + i], e1 = eta[(size_t)(t + 1) * nl + i];
                    double lm = l0 / (a2 + p * l0), phi = lv * kk * kk;
                    double w = phi / l1, f = a * lm / l1;
                    double e = v - kk * a * e0 / l0;
                    double z = e / sqrt(kk * kk / lm + 1 / lv);
                    double bq = a2 - 1 - p * phi;
                    double star = (-bq + sqrt(bq * bq + 4 * p * phi * a2)) / (2 * p);
                    EX("lambda")[j] = l1;
                    EX("lambda_prior")[j] = lm;
                    EX("post_var")[j] = 1 / l1;
                    EX("phi")[j] = phi;
                    EX("write")[j] = w;
                    EX("forget")[j] = f;
                    EX("alpha")[j] = a / (a2 + p * l0);
                    EX("kalman_gain")[j] = kk * lv / l1;
                    EX("info_gain")[j] = 0.5 * log(l1 / lm);
                    EX("memory")[j] = 1 / (1 - f);
                    EX("mu")[j] = e1 / l1;
                    EX("innovation_lane")[j] = e;
                    EX("innovation_z_lane")[j] = z;
                    EX("lambda_star")[j] = star;
                    q2 += qq * qq, esum += qq * qq * e, zsum += qq * qq * z;
                    lmin = fmin(lmin, l1), lmax = fmax(lmax, l1);
                    wsum += w, fsum += f, gsum += 0.5 * log(l1 / lm);
                    gap = fmax(gap, fabs(l1 - star) / star);
                }
                EX("yvar")[m] = yvar[tv];
                EX("innovation")[m] = esum / q2;
                EX("innovation_z")[m] = zsum / q2;
                EX("lambda_v")[m] = lv;
            }
            *EX("lambda_min") = lmin, *EX("lambda_max") = lmax;
            *EX("write_mean") = wsum / L, *EX("forget_mean") = fsum / L;
            *EX("info_gain_sum") = gsum, *EX("lambda_star_gap") = gap;
#undef EX
        }
    /* compare probe by probe over all tokens and heads */
    double worst = 0;
    const char *worst_name = "";
    for (int i = 0; i < mixer_kalman.nprobes; i++) {
        size_t off = mixer_probe_offset(&mixer_kalman, &c, i);
        size_t w = (size_t)H * mixer_width_floats(&c, mixer_kalman.probes[i].width);
        double num = 0, den = 0;
        for (int t = 0; t < T; t++)
            for (size_t j = 0; j < w; j++) {
                double g = pr[(size_t)t * np + off + j], x = ex[(size_t)t * np + off + j];
                num += (g - x) * (g - x), den += x * x;
            }
        double e = sqrt(num / den);
        if (!(e < 1e-5)) fail_msg("probe %s: rel err %.3e", mixer_kalman.probes[i].name, e);
        if (e > worst) worst = e, worst_name = mixer_kalman.probes[i].name;
    }
    /* the prior-decode output itself */
    double ey = rel_err_d(o, y, ny);
    assert_true(ey < 1e-5);
    printf("  probes vs definitions: worst %.2e (%s); prior-decode y %.2e\n", worst, worst_name,
           ey);
    free(pr), free(o), free(st), free(lam), free(eta), free(yvar), free(y), free(ex);
    kd_free(&d);
}

/* decode_from_prior: prefill == steps == the double filter's prior readout. */
static void test_decode_from_prior(void **unused) {
    (void)unused;
    kdata d;
    kd_make(&d, 2, 5, 6, 130, 51, 1);
    size_t ny = (size_t)d.T * d.H * d.M, nl = kd_lanes(&d);
    double *y = malloc(ny * 8);
    ref_filter(&d, 1, y, NULL, NULL, NULL);
    float *o1 = malloc(ny * 4), *o2 = malloc(ny * 4), *s1 = malloc(2 * nl * 4),
          *s2 = malloc(2 * nl * 4);
    double worst = 0;
    for (int sc = 0; sc < 2; sc++) {
        const char *args[] = {scans[sc], "decode_from_prior=1", "chunk=32", NULL};
        mixer_cfg c;
        kcfg(&c, &d, args);
        krun(&c, &d, 1, o1, s1);
        krun(&c, &d, 0, o2, s2);
        double e = fmax(rel_err_d(o2, y, ny), rel_err(o2, o1, ny));
        assert_true(e < 1e-5);
        worst = fmax(worst, e);
    }
    /* and it differs from the posterior readout */
    double *yp = malloc(ny * 8);
    ref_filter(&d, 0, yp, NULL, NULL, NULL);
    assert_true(rel_err_d(o2, yp, ny) > 1e-2);
    printf("  decode_from_prior: max rel err %.2e\n", worst);
    free(y), free(yp), free(o1), free(o2), free(s1), free(s2);
    kd_free(&d);
}

/* Spec §9.4 edge cases: k = 0, lambda_v = 1e4, a = 1e-3, a = 0.9999, and a long sequence (the
 * merged scan overflows there without trace normalisation). Each against the double filter. */
static void test_edge_cases(void **unused) {
    (void)unused;
    double worst = 0;
    for (int cse = 0; cse < 5; cse++) {
        kdata d;
        kd_make(&d, 1, 3, 4, cse == 4 ? 8192 : 150, 61 + cse, 1);
        size_t nk = (size_t)d.T * d.H * d.S, nv = (size_t)d.T * d.H * d.M, nl = kd_lanes(&d);
        if (cse == 0) memset(d.k, 0, nk * 4);
        if (cse == 1)
            for (size_t i = 0; i < nv; i++) d.lv[i] = 1e4f;
        for (size_t i = 0; i < nl; i++) {
            if (cse == 2) d.a[i] = 1e-3f;
            if (cse == 3) d.a[i] = 0.9999f;
            if (cse == 4) d.a[i] = 0.5f;
        }
        double *y = malloc(nv * 8), *lam = malloc((d.T + 1) * nl * 8),
               *eta = malloc((d.T + 1) * nl * 8), *sref = malloc(2 * nl * 8);
        ref_filter(&d, 0, y, NULL, lam, eta);
        memcpy(sref, lam + (size_t)d.T * nl, nl * 8);
        memcpy(sref + nl, eta + (size_t)d.T * nl, nl * 8);
        float *o = malloc(nv * 4), *st = malloc(2 * nl * 4);
        for (int sc = 0; sc < 2; sc++)
            for (int stp = 0; stp < 2; stp++) {
                const char *args[] = {scans[sc], "chunk=16", NULL};
                mixer_cfg c;
                kcfg(&c, &d, args);
                krun(&c, &d, stp, o, st);
                for (size_t i = 0; i < nv; i++) assert_true(isfinite(o[i]));
                double e = fmax(rel_err_d(o, y, nv), rel_err_d(st, sref, 2 * nl));
                if (!(e < 1e-5)) fail_msg("edge case %d %s steps=%d: %.3e", cse, scans[sc], stp, e);
                worst = fmax(worst, e);
            }
        free(y), free(lam), free(eta), free(sref), free(o), free(st);
        kd_free(&d);
    }
    printf("  edge cases (k=0, lambda_v=1e4, a=1e-3, a=0.9999, T=8192): max rel err %.2e\n", worst);
}

/* Spec §4.5: p -> 0 and a = 1 make the filter a precision-weighted least-squares estimate,
 * mu_t = (eta0 + sum lambda_v k v) / (lambda0 + sum lambda_v k^2): normalised linear attention. */
static void test_least_squares_limit(void **unused) {
    (void)unused;
    kdata d;
    kd_make(&d, 1, 4, 3, 100, 71, 1);
    size_t nl = kd_lanes(&d), ny = (size_t)d.T * d.H * d.M;
    for (size_t i = 0; i < nl; i++) d.a[i] = 1.0f, d.p[i] = 0.0f; /* p floored at 1e-12 */
    double *y = calloc(ny, 8), *num = malloc(nl * 8), *den = malloc(nl * 8);
    for (size_t i = 0; i < nl; i++) num[i] = d.eta0[i], den[i] = d.lam0[i];
    for (int t = 0; t < d.T; t++)
        for (int m = 0; m < d.M; m++)
            for (int s = 0; s < d.S; s++) {
                size_t i = (size_t)m * d.S + s, tv = (size_t)t * d.M + m;
                double kk = d.k[(size_t)t * d.S + s];
                num[i] += (double)d.lv[tv] * kk * d.v[tv];
                den[i] += (double)d.lv[tv] * kk * kk;
                y[tv] += d.q[(size_t)t * d.S + s] * num[i] / den[i];
            }
    float *o = malloc(ny * 4), *st = malloc(2 * nl * 4);
    double worst = 0;
    for (int sc = 0; sc < 2; sc++) {
        const char *args[] = {scans[sc], NULL};
        mixer_cfg c;
        kcfg(&c, &d, args);
        krun(&c, &d, 0, o, st);
        double e = rel_err_d(o, y, ny);
        assert_true(e < 1e-5);
        worst = fmax(worst, e);
    }
    printf("  a=1, p=0 least-squares limit: rel err %.2e\n", worst);
    free(y), free(num), free(den), free(o), free(st);
    kd_free(&d);
}

/* configure, state layout, the prior, and defaults. */
static void test_config_and_state(void **unused) {
    (void)unused;
    kdata d;
    kd_make(&d, 2, 3, 4, 1, 81, 0);
    const char *bad[][2] = {{"scan=blelloch", NULL},
                            {"chunk=48", NULL},
                            {"decode_from_prior=2", NULL},
                            {"scale=x", NULL}};
    for (int i = 0; i < 4; i++) {
        opts o;
        err e = {{0}};
        mixer_cfg c;
        assert_int_equal(opts_parse(&o, 1, (char *const *)bad[i], &e), 0);
        assert_int_equal(mixer_configure(&mixer_kalman, &c, 2, 4, 3, &o, &e), -1);
        assert_true(strlen(e.msg) > 0);
        opts_free(&o);
    }
    mixer_cfg c;
    kcfg(&c, &d, NULL);
    assert_int_equal(c.chunk, 64);
    assert_true(c.scale == 1.0f); /* the KLA readout has no query scale */
    state_part parts[MIXER_MAX_STATE_PARTS];
    assert_int_equal(mixer_kalman.state_parts(&c, parts), 2);
    assert_string_equal(parts[0].name, "lambdaT");
    assert_string_equal(parts[0].init_name, "lambda0");
    assert_string_equal(parts[1].name, "etaT");
    assert_string_equal(parts[1].init_name, "eta0");
    assert_int_equal(parts[1].offset, 24);
    assert_int_equal(parts[0].shape[0], 2);
    assert_int_equal(parts[0].shape[1], 3);
    assert_int_equal(parts[0].shape[2], 4);
    float st[48];
    mixer_kalman.state_init(&c, st);
    for (int i = 0; i < 24; i++) assert_true(st[i] == 1.0f && st[24 + i] == 0.0f);
    /* probe widths add up */
    assert_int_equal(mixer_probe_floats(&mixer_kalman, &c), 2 * (14 * 12 + 4 * 3 + 6));
    /* without lambda_v the core uses 1: same as passing ones */
    for (size_t i = 0; i < (size_t)d.T * d.H * d.M; i++) d.lv[i] = 1.0f;
    float o1[6], o2[6], s1[48], s2[48];
    krun(&c, &d, 1, o1, s1);
    mixer_tok x = {{0}};
    x.in[IN_Q] = d.q, x.in[IN_K] = d.k, x.in[IN_V] = d.v;
    float *s0 = kstate(&c, &d);
    mixer_kalman.step(&c, s0, &x, 0, o2, NULL);
    memcpy(s2, s0, sizeof s2);
    assert_true(rel_err(o2, o1, 6) == 0 && rel_err(s2, s1, 48) == 0);
    free(s0);
    /* scale=0.5 multiplies the query: half the output, same state */
    const char *half[] = {"scale=0.5", NULL};
    mixer_cfg ch;
    kcfg(&ch, &d, half);
    krun(&ch, &d, 1, o2, s2);
    for (int i = 0; i < 6; i++) o2[i] *= 2.0f;
    assert_true(rel_err(o2, o1, 6) == 0 && rel_err(s2, s1, 48) == 0);
    kd_free(&d);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_scans_match_reference),
        cmocka_unit_test(test_prefill_equals_steps),
        cmocka_unit_test(test_steady_state),
        cmocka_unit_test(test_gates),
        cmocka_unit_test(test_probes),
        cmocka_unit_test(test_decode_from_prior),
        cmocka_unit_test(test_edge_cases),
        cmocka_unit_test(test_least_squares_limit),
        cmocka_unit_test(test_config_and_state),
    };
    return cmocka_run_group_tests_name("mixer_kalman", tests, NULL, NULL);
}
