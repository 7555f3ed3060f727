/* demo.c: demo traces, by running the committed mixers on one seeded random stream. */
#include "demo.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

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

enum { KIND_DELTA, KIND_KALMAN, KIND_KATA, KIND_PARALLAX };

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

int demo_trace(trace *tr, const char *view, int T, uint64_t seed, err *e) {
    int kind = KIND_DELTA;
    if (!strcmp(view, "kalman"))
        kind = KIND_KALMAN;
    else if (!strcmp(view, "kata"))
        kind = KIND_KATA;
    else if (!strcmp(view, "parallax"))
        kind = KIND_PARALLAX;
    if (T < 1 || T > 100000) return err_set(e, "demo: T=%d out of range (1..100000)", T);

    const int H = 2;
    int dk = 16, dv = 16, nl = 2;
    dlayer L[DEMO_MAX_LAYERS];
    memset(L, 0, sizeof L);
    int rc = -1;
    switch (kind) {
    case KIND_DELTA:
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
        if (probe_register(tr, L[l].m, &L[l].c, nl, e) ||
            probe_register_state(tr, L[l].m, &L[l].c, nl, e))
            goto done;

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
            if (kind == KIND_DELTA &&
                recall_record(tr, nl, l, H, dk, dv, x.in[IN_K], v, L[l].state, t, e))
                goto done;
            if (kind == KIND_KATA && recall_record_kv(tr, nl, l, H, dk, dv, k, v, t, e)) goto done;
        }
    }
    rc = 0;
done:
    release(L, DEMO_MAX_LAYERS);
    return rc;
}
