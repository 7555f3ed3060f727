/* attribution.c: exact attribution (attribution.h), the CPU reference. */
#include "attribution.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "../core/pool.h"
#include "attention.h"

typedef enum { AT_DELTA, AT_GLA, AT_SCALAR, AT_ATTN } at_kind;

static int kind_of(const mixer_ops *m, at_kind *k, int *kacz, int *decay) {
    *kacz = 0, *decay = 1;
    if (!strcmp(m->name, "gdn"))
        *k = AT_DELTA;
    else if (!strcmp(m->name, "deltanet"))
        *k = AT_DELTA, *decay = 0;
    else if (!strcmp(m->name, "kaczmarz"))
        *k = AT_DELTA, *kacz = 1;
    else if (!strcmp(m->name, "gla"))
        *k = AT_GLA;
    else if (!strcmp(m->name, "mamba2"))
        *k = AT_SCALAR;
    else if (!strcmp(m->name, "softmax") || !strcmp(m->name, "parallax"))
        *k = AT_ATTN;
    else
        return -1;
    return 0;
}

int attribution_supported(const mixer_ops *m) {
    at_kind k;
    int a, b;
    return kind_of(m, &k, &a, &b) == 0;
}

typedef struct at_job {
    at_kind kind;
    int kacz, decay;
    const mixer_cfg *c;
    const mixer_seq *x;
    const float *S0; /* [H, dk, dv] or NULL */
    int T;
    float *M, *Md, *o_init;
    float *w;  /* [T, H] write strengths (beta; 1) */
    float *kh; /* [H, T, dk] the keys head-major: a row's sweep reads them in order */
    double *G; /* [T + 1, H] cumulative log-decay: G[t] = sum_{s < t} g_s (delta / scalar) */
} at_job;

static float dotf(const float *a, const float *b, int n) {
    float s0 = 0, s1 = 0, s2 = 0, s3 = 0;
    int i = 0;
    for (; i + 4 <= n; i += 4)
        s0 += a[i] * b[i], s1 += a[i + 1] * b[i + 1], s2 += a[i + 2] * b[i + 2],
            s3 += a[i + 3] * b[i + 3];
    for (; i < n; i++) s0 += a[i] * b[i];
    return (s0 + s1) + (s2 + s3);
}

/* Rows r in [lo, hi) of the (head, query) grid: r = h * T + i. */
static void at_rows(void *ctx, int lo, int hi) {
    at_job *J = ctx;
    const mixer_cfg *c = J->c;
    int T = J->T, H = c->H, dk = c->dk, dv = c->dv;
    float *u = malloc((size_t)dk * sizeof(float));
    if (!u) return;
    for (int r = lo; r < hi; r++) {
        int h = r / T, i = r % T;
        const float *q = J->x->in[IN_Q] + ((size_t)i * H + h) * dk;
        memcpy(u, q, (size_t)dk * sizeof(float));
        float *Mrow = J->M + ((size_t)h * T + i) * T;
        float *Mdrow = J->Md ? J->Md + ((size_t)h * T + i) * T : NULL;
        for (int j = i + 1; j < T; j++) {
            Mrow[j] = 0;
            if (Mdrow) Mdrow[j] = 0;
        }
        for (int j = i; j >= 0; j--) {
            const float *k = J->kh + ((size_t)h * T + j) * dk;
            float d = dotf(k, u, dk), w = J->w[(size_t)j * H + h];
            Mrow[j] = c->scale * w * d;
            if (Mdrow) {
                if (J->kind == AT_DELTA) {
                    double dec =
                        J->decay
                            ? exp(J->G[(size_t)(i + 1) * H + h] - J->G[(size_t)(j + 1) * H + h])
                            : 1.0;
                    Mdrow[j] = (float)(c->scale * w * dec * dotf(k, q, dk));
                } else {
                    Mdrow[j] = Mrow[j];
                }
            }
            /* u <- A_j u */
            if (J->kind == AT_DELTA) {
                float a = J->decay ? expf(J->x->in[IN_G][(size_t)j * H + h]) : 1.0f, bd = w * d;
                for (int t = 0; t < dk; t++) u[t] = a * (u[t] - bd * k[t]);
            } else if (J->kind == AT_GLA) {
                const float *gk = J->x->in[IN_GK] + ((size_t)j * H + h) * dk;
                for (int t = 0; t < dk; t++) u[t] *= expf(gk[t]);
            } else {
                float a = expf(J->x->in[IN_G][(size_t)j * H + h]);
                for (int t = 0; t < dk; t++) u[t] *= a;
            }
        }
        float *oi = J->o_init + ((size_t)i * H + h) * dv;
        if (!J->S0) {
            memset(oi, 0, (size_t)dv * sizeof(float));
            continue;
        }
        const float *S = J->S0 + (size_t)h * dk * dv;
        for (int v = 0; v < dv; v++) {
            double s = 0;
            for (int t = 0; t < dk; t++) s += (double)u[t] * S[(size_t)t * dv + v];
            oi[v] = (float)(c->scale * s);
        }
    }
    free(u);
}

/* softmax / parallax: step through the tokens with the cache, reading each row. */
static int at_attention(const mixer_ops *m, const mixer_cfg *c, const float *init,
                        const mixer_seq *x, float *M, float *Md, float *o_init, err *e) {
    int T = x->T, H = c->H, dk = c->dk;
    mixer_cfg cc = *c;
    if (cc.max_t < T) cc.max_t = T;
    size_t sf = m->state_floats(&cc);
    float *state = malloc(sf * sizeof(float)), *o = malloc((size_t)H * c->dv * sizeof(float));
    float *row = malloc((size_t)T * sizeof(float));
    if (!state || !o || !row) {
        free(state), free(o), free(row);
        return err_set(e, "out of memory for attribution (a cache of %d tokens)", T);
    }
    if (init && cc.max_t == c->max_t)
        memcpy(state, init, sf * sizeof(float));
    else
        m->state_init(&cc, state);
    int parallax = !strcmp(m->name, "parallax");
    for (int i = 0; i < T; i++) {
        mixer_tok tok = mixer_seq_at(&cc, x, i);
        m->step(&cc, state, &tok, i, o, NULL);
        for (int h = 0; h < H; h++) {
            const float *q = tok.in[IN_Q] + (size_t)h * dk;
            const float *r = parallax && tok.in[IN_R] ? tok.in[IN_R] + (size_t)h * dk : NULL;
            float *Mrow = M + ((size_t)h * T + i) * T;
            if (parallax_effective_weights(&cc, state, q, r, i, h, NULL, row)) {
                for (int j = 0; j <= i; j++) row[j] = NAN;
            }
            for (int j = 0; j < T; j++) Mrow[j] = j <= i ? row[j] : 0.0f;
            if (Md) memcpy(Md + ((size_t)h * T + i) * T, Mrow, (size_t)T * sizeof(float));
        }
    }
    memset(o_init, 0, (size_t)T * H * c->dv * sizeof(float));
    free(state), free(o), free(row);
    return 0;
}

int mixer_attribution(const mixer_ops *m, const mixer_cfg *c, const float *init, const mixer_seq *x,
                      float *M, float *Md, float *o_init, err *e) {
    at_kind kind;
    int kacz, decay;
    if (kind_of(m, &kind, &kacz, &decay))
        return err_set(e,
                       "attribution: %s normalises by a state-dependent denominator, so its output "
                       "is not a fixed sum of its values (gdn, deltanet, kaczmarz, gla, mamba2, "
                       "softmax, parallax have one)",
                       m->name);
    if (kind == AT_ATTN) return at_attention(m, c, init, x, M, Md, o_init, e);
    int T = x->T, H = c->H, dk = c->dk;
    if (!x->in[IN_Q] || !x->in[IN_K] || (kind == AT_GLA && !x->in[IN_GK]) ||
        (kind == AT_SCALAR && !x->in[IN_G]) || (kind == AT_DELTA && !x->in[IN_BETA]) ||
        (kind == AT_DELTA && decay && !x->in[IN_G]))
        return err_set(e, "attribution: %s is missing an input", m->name);
    at_job J = {.kind = kind,
                .kacz = kacz,
                .decay = decay,
                .c = c,
                .x = x,
                .T = T,
                .M = M,
                .Md = Md,
                .o_init = o_init};
    J.w = malloc((size_t)T * H * sizeof(float));
    J.G = malloc((size_t)(T + 1) * H * sizeof(double));
    J.kh = malloc((size_t)T * H * dk * sizeof(float));
    if (!J.w || !J.G || !J.kh) {
        free(J.w), free(J.G), free(J.kh);
        return err_set(e, "out of memory");
    }
    for (int h = 0; h < H; h++)
        for (int t = 0; t < T; t++)
            memcpy(J.kh + ((size_t)h * T + t) * dk, x->in[IN_K] + ((size_t)t * H + h) * dk,
                   (size_t)dk * sizeof(float));
    for (int h = 0; h < H; h++) J.G[h] = 0;
    for (int t = 0; t < T; t++)
        for (int h = 0; h < H; h++) {
            size_t th = (size_t)t * H + h;
            float w = 1.0f;
            if (kind == AT_DELTA) {
                w = x->in[IN_BETA][th];
                if (kacz) {
                    const float *k = x->in[IN_K] + th * dk;
                    w = x->in[IN_BETA][th] / (dotf(k, k, dk) + c->eps);
                }
            }
            J.w[th] = w;
            double g = (kind == AT_SCALAR || (kind == AT_DELTA && decay)) ? x->in[IN_G][th] : 0.0;
            J.G[(size_t)(t + 1) * H + h] = J.G[th] + g;
        }
    /* the initial state's key-value part */
    state_part parts[MIXER_MAX_STATE_PARTS];
    int np = m->state_parts ? m->state_parts(c, parts) : 0;
    J.S0 = NULL;
    for (int p = 0; init && p < np; p++)
        if (!strcmp(parts[p].name, "hT")) J.S0 = init + parts[p].offset;
    pool_for(H * T, at_rows, &J);
    free(J.w), free(J.G), free(J.kh);
    return 0;
}
