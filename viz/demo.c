/* demo.c: demo traces, by running the committed mixers on one seeded random stream. */
#include "demo.h"

#include "../mixers/attribution.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../core/tensor.h"
#include "../mixers/mixer.h"
#include "../mixers/record.h"
#include "recall.h"

#define DEMO_MAX_LAYERS 4

typedef struct drng {
    uint64_t s;
} drng;

static double dr_uniform(drng *r) { /* [0, 1) */
    r->s ^= r->s >> 12, r->s ^= r->s << 25, r->s ^= r->s >> 27;
    return (double)((r->s * 2685821657736338717ull) >> 11) * (1.0 / 9007199254740992.0);
}

static double dr_normal(drng *r) {
    double u = dr_uniform(r), v = dr_uniform(r);
    if (u < 1e-300) u = 1e-300;
    return sqrt(-2.0 * log(u)) * cos(6.283185307179586 * v);
}

static void normal_fill(drng *r, float *x, int n, double scale) {
    for (int i = 0; i < n; i++) x[i] = (float)(dr_normal(r) * scale);
}

/* Each head's d-vector scaled to unit norm. */
static void unit_heads(float *x, int H, int d) {
    for (int h = 0; h < H; h++) {
        double s = 0;
        for (int i = 0; i < d; i++) s += (double)x[h * d + i] * x[h * d + i];
        float inv = s > 0 ? (float)(1.0 / sqrt(s)) : 0;
        for (int i = 0; i < d; i++) x[h * d + i] *= inv;
    }
}

typedef struct dlayer {
    const mixer_ops *m;
    mixer_cfg c;
    float *state, *probes, *o;
    float *params[2];
} dlayer;

enum { KIND_DELTA, KIND_KALMAN, KIND_KATA, KIND_PARALLAX, KIND_PRECISION };

/* ---- the precision demo: diag/precision.c's four variants, on the raw cores ----
 *
 * No model here (viz/ stays below models/ and diag/): each layer's core runs on the demo stream
 * four ways in lockstep, exactly as `diagnose precision` runs a model's cores: fp32; the state
 * rounded to bf16, or to fp16, after every step; q, k, v, beta / eta rounded to bf16 before the
 * step (the log-decay g stays fp32). The series are the ones diag_precision_record writes. The
 * "logits" divergence is that of every layer's output, concatenated: a raw stack has no head. */
#define PREC_N 4
static const char *const PREC_NAME[PREC_N] = {"fp32", "bf16 state", "fp16 state", "bf16 inputs"};
static const char *const PREC_SERIES[PREC_N] = {"prec_fp32", "prec_bf16_state", "prec_fp16_state",
                                                "prec_bf16_inputs"};

typedef struct dprec {
    float *state[DEMO_MAX_LAYERS][PREC_N]; /* [state_floats] each; [l][0] unused (L[l].state) */
    float *o[PREC_N];                      /* [layers][H * dv]: every layer's output per variant */
    int s[PREC_N], sl;                     /* trace series: prec_<variant>, prec_logits */
} dprec;

static float round_bf16(float x) {
    return bf16_to_f32(f32_to_bf16(x));
}

static float round_f16(float x) {
    return f16_to_f32(f32_to_f16(x));
}

/* |a - b| / |b| over n floats, with diag/precision.c's conventions: NaN when the reference
 * broke, inf when only a did. */
static float rel_diff(const float *a, const float *b, size_t n) {
    double num = 0, den = 0;
    for (size_t i = 0; i < n; i++) {
        double d = (double)a[i] - (double)b[i];
        num += d * d, den += (double)b[i] * b[i];
    }
    if (!isfinite(den)) return NAN;
    if (!isfinite(num)) return INFINITY;
    if (den == 0) return num == 0 ? 0.0f : INFINITY;
    return (float)sqrt(num / den);
}

static int prec_setup(dprec *P, trace *tr, dlayer *L, int nl, err *e) {
    const int H = L[0].c.H;
    for (int l = 0; l < nl; l++)
        for (int v = 1; v < PREC_N; v++) {
            size_t n = L[l].m->state_floats(&L[l].c);
            if (!(P->state[l][v] = malloc(n * sizeof(float))))
                return err_set(e, "demo: out of memory");
            memcpy(P->state[l][v], L[l].state, n * sizeof(float));
        }
    for (int v = 0; v < PREC_N; v++)
        if (!(P->o[v] = calloc((size_t)nl * H * L[0].c.dv, sizeof(float))))
            return err_set(e, "demo: out of memory");
    for (int v = 0; v < PREC_N; v++) {
        char meaning[160];
        snprintf(meaning, sizeof meaning,
                 "|S - S_fp32|_F / |S_fp32|_F per head: the state of the %s run against fp32",
                 PREC_NAME[v]);
        if ((P->s[v] = trace_add_series(tr, PREC_SERIES[v], meaning, "precision", nl, H, 1, e)) < 0)
            return -1;
    }
    P->sl = trace_add_series(tr, "prec_logits",
                             "|o - o_fp32| / |o_fp32| over every layer's output (the demo's "
                             "stand-in for the logits); head = variant",
                             "precision", 1, PREC_N, 1, e);
    return P->sl < 0 ? -1 : 0;
}

static void prec_free(dprec *P) {
    for (int l = 0; l < DEMO_MAX_LAYERS; l++)
        for (int v = 0; v < PREC_N; v++) free(P->state[l][v]);
    for (int v = 0; v < PREC_N; v++) free(P->o[v]);
}

/* Layer l's reduced-precision runs of token t, after its fp32 step (L->state, L->o); records the
 * state divergence per head. x: the fp32 run's inputs. */
static void prec_layer(dprec *P, trace *tr, const dlayer *L, int l, const mixer_tok *x, int t) {
    const int H = L->c.H, dk = L->c.dk, dv = L->c.dv;
    const size_t ns = L->m->state_floats(&L->c), block = ns / (size_t)H; /* [H, dk, dv] */
    memcpy(P->o[0] + (size_t)l * H * dv, L->o, (size_t)H * dv * sizeof(float));
    float rq[64], rk[64], rv[64], rb[4]; /* [H][d] <= 64 floats, [H] */
    for (int i = 0; i < H * dk; i++)
        rq[i] = round_bf16(x->in[IN_Q][i]), rk[i] = round_bf16(x->in[IN_K][i]);
    for (int i = 0; i < H * dv; i++) rv[i] = round_bf16(x->in[IN_V][i]);
    for (int h = 0; h < H; h++) rb[h] = round_bf16(x->in[IN_BETA][h]);
    float *o0 = trace_at_lh(tr, P->s[0], t, l, 0);
    for (int h = 0; h < H; h++) o0[h] = 0; /* fp32 against itself */
    for (int v = 1; v < PREC_N; v++) {
        mixer_tok xv = *x;
        if (v == 3) xv.in[IN_Q] = rq, xv.in[IN_K] = rk, xv.in[IN_V] = rv, xv.in[IN_BETA] = rb;
        float *s = P->state[l][v], *o = P->o[v] + (size_t)l * H * dv;
        L->m->step(&L->c, s, &xv, t, o, NULL);
        if (v == 1)
            for (size_t i = 0; i < ns; i++) s[i] = round_bf16(s[i]);
        if (v == 2)
            for (size_t i = 0; i < ns; i++) s[i] = round_f16(s[i]);
        float *d = trace_at_lh(tr, P->s[v], t, l, 0);
        for (int h = 0; h < H; h++)
            d[h] = rel_diff(s + (size_t)h * block, L->state + (size_t)h * block, block);
    }
}

/* The "logits" divergence of token t: every layer's output against fp32's. */
static void prec_token(dprec *P, trace *tr, int nl, int H, int dv, int t) {
    for (int v = 0; v < PREC_N; v++)
        *trace_at_lh(tr, P->sl, t, 0, v) = rel_diff(P->o[v], P->o[0], (size_t)nl * H * dv);
}

static int setup(dlayer *L, const char *mixer, int H, int dk, int dv, const char *opt, err *e) {
    memset(L, 0, sizeof *L);
    L->m = mixer_find(mixer);
    if (!L->m) return err_set(e, "demo: mixer '%s' is not in this build", mixer);
    opts o;
    memset(&o, 0, sizeof o);
    char buf[64];
    char *argv[1] = {buf};
    if (opt) {
        strncpy(buf, opt, sizeof buf - 1), buf[sizeof buf - 1] = 0;
        if (opts_parse(&o, 1, argv, e)) return -1;
    }
    int rc = mixer_configure(L->m, &L->c, H, dk, dv, &o, e);
    opts_free(&o);
    if (rc) return -1;
    size_t ns = L->m->state_floats(&L->c);
    L->state = malloc(ns * sizeof *L->state);
    L->probes = malloc((mixer_probe_floats(L->m, &L->c) + 1) * sizeof *L->probes);
    L->o = malloc((size_t)H * dv * sizeof *L->o);
    if (!L->state || !L->probes || !L->o) return err_set(e, "demo: out of memory");
    L->m->state_init(&L->c, L->state);
    return 0;
}

static void release(dlayer *L, int n) {
    for (int i = 0; i < n; i++) {
        free(L[i].state), free(L[i].probes), free(L[i].o);
        free(L[i].params[0]), free(L[i].params[1]);
    }
}

/* A training history (train/history.h's series): a run that sits at chance, then learns. */
static int demo_train(trace *tr, int T, err *e) {
    static const char *const NAMES[] = {"train_step",     "train_loss",      "train_eval_loss",
                                        "train_accuracy", "train_grad_norm", "train_lr"};
    trace_init(tr);
    for (int i = 0; i < 6; i++)
        if (trace_add_series(tr, NAMES[i], "demo training history", "train", 1, 1, 1, e) < 0)
            return -1;
    for (int t = 0; t < T; t++) {
        if (trace_push_token(tr, e) < 0) return -1;
        double x = (t + 1.0) / T, learned = 1.0 / (1.0 + exp(-14.0 * (x - 0.45)));
        double loss = (4.85 * (1 - learned) + 0.02) * (1 + 0.05 * sin(7.0 * t));
        float v[6] = {
            (float)(10 * (t + 1)),
            (float)loss,
            (float)(loss * 1.01),
            (float)(0.008 + 0.99 * learned),
            (float)(0.3 + 1.2 * learned * (1 - learned)),
            (float)(3e-3 * (x < 0.1 ? x / 0.1 : 0.5 * (1 + cos(M_PI * (x - 0.1) / 0.9))))};
        for (int i = 0; i < 6; i++) *trace_at(tr, i, t) = v[i];
    }
    return 0;
}

/* The attribution view's snapshots (engine_attribution's layout) for one gdn head over T random
 * tokens with unit keys, decays and write strengths in the demo's ranges. */
static int demo_attribution(trace *tr, int T, uint64_t seed, err *e) {
    const int dk = 16, dv = 16;
    const mixer_ops *m = mixer_find("gdn");
    mixer_cfg c;
    opts o = {0};
    if (!m || mixer_configure(m, &c, 1, dk, dv, &o, e)) return -1;
    drng r = {seed * 0x9E3779B97F4A7C15ull + 0xA0761D6478BD642Full};
    float *q = malloc((size_t)T * dk * sizeof(float)), *k = malloc((size_t)T * dk * sizeof(float));
    float *v = malloc((size_t)T * dv * sizeof(float)), *g = malloc((size_t)T * sizeof(float));
    float *b = malloc((size_t)T * sizeof(float)), *oi = malloc((size_t)T * dv * sizeof(float));
    int rc = -1, sm, sd, so, sv, sa;
    if (!q || !k || !v || !g || !b || !oi) {
        err_set(e, "demo: out of memory");
        goto done;
    }
    normal_fill(&r, q, T * dk, 1.0), normal_fill(&r, k, T * dk, 1.0),
        normal_fill(&r, v, T * dv, 1.0);
    unit_heads(q, T, dk), unit_heads(k, T, dk);
    for (int t = 0; t < T; t++) {
        g[t] = (float)(-0.02 - 0.1 * dr_uniform(&r));
        b[t] = (float)(1.0 / (1.0 + exp(-(1.0 + 1.5 * dr_normal(&r)))));
    }
    for (int t = 0; t < T; t++)
        if (trace_push_token(tr, e) < 0) goto done;
    if ((sm = trace_add_snapshot(tr, "attribution", 1, 1, T, T, e)) < 0 ||
        (sd = trace_add_snapshot(tr, "attribution_decay", 1, 1, T, T, e)) < 0 ||
        (so = trace_add_snapshot(tr, "attribution_oinit", 1, 1, T, dv, e)) < 0 ||
        (sv = trace_add_snapshot(tr, "attribution_vnorm", 1, 1, 1, T, e)) < 0 ||
        (sa = trace_add_snapshot(tr, "attribution_at", 1, 1, 1, 6, e)) < 0)
        goto done;
    mixer_seq x = {.T = T};
    x.in[IN_Q] = q, x.in[IN_K] = k, x.in[IN_V] = v, x.in[IN_G] = g, x.in[IN_BETA] = b;
    if (mixer_attribution(m, &c, NULL, &x, trace_snapshot_at(tr, sm, 0, 0),
                          trace_snapshot_at(tr, sd, 0, 0), trace_snapshot_at(tr, so, 0, 0), e))
        goto done;
    float *vn = trace_snapshot_at(tr, sv, 0, 0), *at = trace_snapshot_at(tr, sa, 0, 0);
    for (int t = 0; t < T; t++) {
        double s = 0;
        for (int i = 0; i < dv; i++) s += (double)v[t * dv + i] * v[t * dv + i];
        vn[t] = (float)sqrt(s);
    }
    at[0] = 0, at[1] = 0, at[2] = (float)T, at[3] = 0, at[4] = 1, at[5] = 2; /* as one of 2 heads */
    tr->snaps[sm].t = tr->snaps[sd].t = tr->snaps[so].t = tr->snaps[sv].t = tr->snaps[sa].t = T - 1;
    rc = 0;
done:
    free(q), free(k), free(v), free(g), free(b), free(oi);
    return rc;
}

int demo_trace(trace *tr, const char *view, int T, uint64_t seed, err *e) {
    if (!strcmp(view, "attribution")) {
        if (T < 1 || T > 4096) return err_set(e, "demo: T=%d out of range (1..4096)", T);
        return demo_attribution(tr, T, seed, e);
    }
    if (!strcmp(view, "train")) {
        if (T < 1 || T > 100000) return err_set(e, "demo: T=%d out of range (1..100000)", T);
        (void)seed;
        return demo_train(tr, T, e);
    }
    int kind = KIND_DELTA;
    if (!strcmp(view, "kalman"))
        kind = KIND_KALMAN;
    else if (!strcmp(view, "kata"))
        kind = KIND_KATA;
    else if (!strcmp(view, "parallax"))
        kind = KIND_PARALLAX;
    else if (!strcmp(view, "precision"))
        kind = KIND_PRECISION;
    if (T < 1 || T > 100000) return err_set(e, "demo: T=%d out of range (1..100000)", T);

    const int H = 2;
    int dk = 16, dv = 16, nl = 2;
    dlayer L[DEMO_MAX_LAYERS];
    memset(L, 0, sizeof L);
    dprec P;
    memset(&P, 0, sizeof P);
    int rc = -1;
    switch (kind) {
    case KIND_DELTA:
    case KIND_PRECISION:
        if (setup(&L[0], "gdn", H, dk, dv, NULL, e) ||
            setup(&L[1], "kaczmarz", H, dk, dv, "eps=1e-6", e))
            goto done;
        break;
    case KIND_KALMAN:
        nl = 1, dk = 8, dv = 8;
        if (setup(&L[0], "kalman", H, dk, dv, NULL, e)) goto done;
        break;
    case KIND_KATA:
        nl = 1;
        if (setup(&L[0], "kata", H, dk, dv, "variant=m1", e)) goto done;
        break;
    case KIND_PARALLAX:
        nl = 4;
        for (int l = 0; l < nl; l++) {
            char opt[32];
            snprintf(opt, sizeof opt, "max_t=%d", T + 1);
            if (setup(&L[l], "parallax", H, dk, dv, opt, e)) goto done;
        }
        break;
    }

    drng r = {seed * 0x9E3779B97F4A7C15ull + 0xD1B54A32D192ED03ull};
    if (kind == KIND_KALMAN) {
        /* per-lane dynamics inside the spec's test ranges: a in [0.6, 0.97], p in [0.01, 0.06] */
        size_t n = (size_t)H * dv * dk;
        L[0].params[0] = malloc(n * sizeof(float)), L[0].params[1] = malloc(n * sizeof(float));
        if (!L[0].params[0] || !L[0].params[1]) {
            err_set(e, "demo: out of memory");
            goto done;
        }
        for (size_t i = 0; i < n; i++) {
            L[0].params[0][i] = (float)(0.6 + 0.37 * dr_uniform(&r));
            L[0].params[1][i] = (float)(0.01 + 0.05 * dr_uniform(&r));
        }
        L[0].c.params[0] = L[0].params[0], L[0].c.params[1] = L[0].params[1];
        L[0].m->state_init(&L[0].c, L[0].state);
    }
    for (int l = 0; l < nl; l++)
        if (trace_set_label(tr, l, L[l].m->name, e) || probe_register(tr, L[l].m, &L[l].c, nl, e) ||
            probe_register_state(tr, L[l].m, &L[l].c, nl, e) ||
            probe_register_attn(tr, L[l].m, &L[l].c, nl, e))
            goto done;
    if (kind == KIND_PRECISION && prec_setup(&P, tr, L, nl, e)) goto done;

    /* the stream: per token, per head */
    float q[64], kr[64], k[64], v[64], rr[64], g[4], b[4], lv[64]; /* [H][d] <= 64 floats */
    for (int t = 0; t < T; t++) {
        if (trace_push_token(tr, e) < 0) goto done;
        normal_fill(&r, q, H * dk, 1.0);
        normal_fill(&r, kr, H * dk, 1.0);
        normal_fill(&r, v, H * dv, 1.0);
        normal_fill(&r, rr, H * dk, 1.0);
        unit_heads(q, H, dk);
        memcpy(k, kr, sizeof(float) * (size_t)(H * dk));
        unit_heads(k, H, dk);
        for (int h = 0; h < H; h++) {
            /* raw key norms spread over two decades, for Kaczmarz's beta = eta / |k|^2 */
            double kn = exp(0.9 * dr_normal(&r)) / sqrt((double)dk);
            for (int i = 0; i < dk; i++) kr[h * dk + i] = (float)(k[h * dk + i] * kn * sqrt(dk));
            g[h] = (float)(-0.02 - 0.1 * dr_uniform(&r));                    /* log-decay */
            b[h] = (float)(1.0 / (1.0 + exp(-(1.0 + 1.5 * dr_normal(&r))))); /* sigmoid */
            for (int m = 0; m < dv; m++) {
                /* a burst of precise observations in the middle third */
                double burst = t >= T / 3 && t < T / 2 ? 30.0 : 1.0;
                lv[h * dv + m] = (float)(burst * exp(0.5 * dr_normal(&r)));
            }
        }
        for (int l = 0; l < nl; l++) {
            mixer_tok x;
            memset(&x, 0, sizeof x);
            x.in[IN_Q] = q, x.in[IN_V] = v;
            float eta[4], rs[64], qs[64];
            switch (kind) {
            case KIND_DELTA:
            case KIND_PRECISION:
                x.in[IN_G] = g;
                if (l == 0) {
                    x.in[IN_K] = k, x.in[IN_BETA] = b;
                } else {
                    for (int h = 0; h < H; h++) eta[h] = 0.5f + 0.6f * b[h];
                    x.in[IN_K] = kr, x.in[IN_BETA] = eta;
                }
                break;
            case KIND_KALMAN:
                x.in[IN_K] = k, x.in[IN_LV] = lv;
                break;
            case KIND_KATA:
                x.in[IN_K] = k;
                break;
            case KIND_PARALLAX:
                /* sharper attention than unit q.k / sqrt(dk) gives, and a probe that grows with
                 * depth, so COR does too */
                for (int i = 0; i < H * dk; i++) {
                    rs[i] = rr[i] * (0.15f + 0.9f * (float)(l * l));
                    qs[i] = q[i] * 12.0f;
                }
                x.in[IN_Q] = qs, x.in[IN_K] = k, x.in[IN_R] = rs;
                break;
            }
            L[l].m->step(&L[l].c, L[l].state, &x, t, L[l].o, L[l].probes);
            probe_record(tr, L[l].m, &L[l].c, L[l].probes, t, l);
            probe_record_state(tr, L[l].m, &L[l].c, L[l].state, t, l);
            probe_record_attn(tr, L[l].m, &L[l].c, L[l].state, &x, t, l);
            if (kind == KIND_DELTA &&
                recall_record(tr, nl, l, H, dk, dv, x.in[IN_K], v, L[l].state, t, e))
                goto done;
            if (kind == KIND_KATA && recall_record_kv(tr, nl, l, H, dk, dv, k, v, t, e)) goto done;
            if (kind == KIND_PRECISION) prec_layer(&P, tr, &L[l], l, &x, t);
        }
        if (kind == KIND_PRECISION) prec_token(&P, tr, nl, H, dv, t);
    }
    rc = 0;
done:
    release(L, DEMO_MAX_LAYERS);
    prec_free(&P);
    return rc;
}
