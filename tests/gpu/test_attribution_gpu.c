/* test_attribution_gpu.c: the GPU attribution kernel (kernels/attribution.cu) against the CPU
 * reference (mixers/attribution.c) for gdn, deltanet, kaczmarz, gla and mamba2, with an initial
 * state, T not a multiple of 32 and dk of 64 and 128: M, its decay-only part and o_init.
 * Plain C with its own count (the GPU machine has no cmocka): "N passed, M failed". */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/gpu.h"
#include "mixers/attribution.h"

static int g_pass, g_fail;
static unsigned long long rs = 99;

static double urand(void) {
    rs ^= rs << 13, rs ^= rs >> 7, rs ^= rs << 17;
    return (double)(rs >> 11) / 9007199254740992.0;
}

static float nrand(void) {
    return (float)(sqrt(-2.0 * log(urand() + 1e-300)) * cos(6.283185307179586 * urand()));
}

static double rel(const float *a, const float *b, size_t n) {
    double num = 0, den = 0;
    for (size_t i = 0; i < n; i++)
        num += ((double)a[i] - b[i]) * ((double)a[i] - b[i]), den += (double)b[i] * b[i];
    return sqrt(num / (den + 1e-300));
}

static void one(const char *name, int T, int H, int dk, int dv) {
    const mixer_ops *m = mixer_find(name);
    mixer_cfg c;
    opts o = {0};
    err e = {{0}};
    if (!m || mixer_configure(m, &c, H, dk, dv, &o, &e)) {
        printf("FAIL %s: %s\n", name, e.msg), g_fail++;
        return;
    }
    size_t nk = (size_t)T * H * dk, nth = (size_t)T * H, nm = (size_t)H * T * T;
    float *q = malloc(nk * 4), *k = malloc(nk * 4), *v = malloc((size_t)T * H * dv * 4);
    float *g = malloc(nth * 4), *b = malloc(nth * 4), *gk = malloc(nk * 4);
    int raw = !strcmp(name, "kaczmarz");
    for (size_t i = 0; i < nth; i++) {
        double n = 0;
        for (int d = 0; d < dk; d++) {
            q[i * dk + d] = nrand(), k[i * dk + d] = nrand();
            n += (double)k[i * dk + d] * k[i * dk + d];
            gk[i * dk + d] = (float)(-0.02 - 0.3 * urand());
        }
        double s = raw ? exp(1.2 * nrand()) / sqrt(n) : 1.0 / sqrt(n);
        for (int d = 0; d < dk; d++) k[i * dk + d] *= (float)s, q[i * dk + d] /= sqrtf((float)dk);
        g[i] = (float)(-0.02 - 0.25 * urand()), b[i] = (float)(1.0 / (1.0 + exp(-nrand())));
    }
    for (size_t i = 0; i < (size_t)T * H * dv; i++) v[i] = nrand();
    size_t sf = m->state_floats(&c);
    float *init = malloc(sf * 4);
    m->state_init(&c, init);
    for (size_t i = 0; i < (size_t)H * dk * dv; i++) init[i] = 0.5f * nrand(); /* hT first */
    mixer_seq x = {.T = T};
    x.in[IN_Q] = q, x.in[IN_K] = k, x.in[IN_V] = v;
    if (!strcmp(name, "gla"))
        x.in[IN_GK] = gk;
    else if (strcmp(name, "deltanet"))
        x.in[IN_G] = g;
    if (strcmp(name, "gla") && strcmp(name, "mamba2")) x.in[IN_BETA] = b;
    float *M = malloc(nm * 4), *Md = malloc(nm * 4), *oi = malloc((size_t)T * H * dv * 4);
    float *M2 = malloc(nm * 4), *Md2 = malloc(nm * 4), *oi2 = malloc((size_t)T * H * dv * 4);
    int rc = mixer_attribution(m, &c, init, &x, M, Md, oi, &e) ||
             gpu_attribution_host(m, &c, init, &x, M2, Md2, oi2, &e);
    if (rc) {
        printf("FAIL %s: %s\n", name, e.msg), g_fail++;
    } else {
        double a = rel(M2, M, nm), d = rel(Md2, Md, nm), w = rel(oi2, oi, (size_t)T * H * dv);
        int ok = a < 1e-4 && d < 1e-4 && w < 1e-4;
        printf("%s %s T=%d H=%d dk=%d dv=%d: M %.2e, decay-only %.2e, o_init %.2e\n",
               ok ? "ok  " : "FAIL", name, T, H, dk, dv, a, d, w);
        ok ? g_pass++ : g_fail++;
    }
    free(q), free(k), free(v), free(g), free(b), free(gk), free(init);
    free(M), free(Md), free(oi), free(M2), free(Md2), free(oi2);
}

int main(void) {
    char why[256];
    if (!gpu_available(why, sizeof why)) {
        printf("test_attribution_gpu: skipped: %s\n0 passed, 0 failed\n", why);
        return 0;
    }
    const char *names[] = {"gdn", "deltanet", "kaczmarz", "gla", "mamba2"};
    for (int i = 0; i < 5; i++) {
        one(names[i], 203, 2, 64, 48);
        one(names[i], 97, 3, 128, 128);
    }
    printf("%d passed, %d failed\n", g_pass, g_fail);
    return g_fail != 0;
}
