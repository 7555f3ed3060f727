/* bench_attribution.c: exact attribution (mixers/attribution.h) of one layer on the CPU (make
 * bench).
 *
 * gdn, H = 16 heads, dk = dv = 128, T = 1024 (an argument sets T): M [H, T, T], its decay-only
 * part and o_init, every head and row over the pool's threads. Each row is a backward sweep of a
 * vector through the transitions, 4 dk flops per (i, j) pair: H T (T + 1) / 2 * 4 dk in all, plus
 * the decay-only part's 2 dk per pair. Printed: the median of 3 runs, the GFLOP/s it reaches and
 * the target (2 s at T = 1024 on the 2-core machine). Nothing is asserted. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>

#include "bench/bench.h"
#include "core/pool.h"
#include "mixers/attribution.h"

extern const mixer_ops mixer_gdn;

static unsigned long long rs = 777;
static float nrand(void) {
    rs ^= rs << 13, rs ^= rs >> 7, rs ^= rs << 17;
    double u = (double)(rs >> 11) / 9007199254740992.0;
    rs ^= rs << 13, rs ^= rs >> 7, rs ^= rs << 17;
    double v = (double)(rs >> 11) / 9007199254740992.0;
    return (float)(sqrt(-2.0 * log(u + 1e-300)) * cos(6.283185307179586 * v));
}

int main(int argc, char **argv) {
    int T = argc > 1 ? atoi(argv[1]) : 1024, H = 16, D = 128;
    if (T < 1 || T > 16384) return fprintf(stderr, "T in 1..16384\n"), 1;
    size_t th = (size_t)T * H;
    float *q = malloc(th * D * sizeof(float)), *k = malloc(th * D * sizeof(float));
    float *v = malloc(th * D * sizeof(float)), *g = malloc(th * sizeof(float));
    float *b = malloc(th * sizeof(float));
    float *M = malloc((size_t)H * T * T * sizeof(float)),
          *Md = malloc((size_t)H * T * T * sizeof(float));
    float *oi = malloc(th * D * sizeof(float));
    if (!q || !k || !v || !g || !b || !M || !Md || !oi)
        return fprintf(stderr, "out of memory\n"), 1;
    for (size_t i = 0; i < th; i++) {
        double n = 0;
        for (int d = 0; d < D; d++) {
            q[i * D + d] = nrand(), k[i * D + d] = nrand(), v[i * D + d] = nrand();
            n += (double)k[i * D + d] * k[i * D + d];
        }
        for (int d = 0; d < D; d++) k[i * D + d] /= (float)sqrt(n);
        g[i] = -0.05f, b[i] = 0.5f;
    }
    mixer_cfg c;
    opts o = {0};
    err e = {{0}};
    if (mixer_configure(&mixer_gdn, &c, H, D, D, &o, &e)) return fprintf(stderr, "%s\n", e.msg), 1;
    mixer_seq x = {.T = T};
    x.in[IN_Q] = q, x.in[IN_K] = k, x.in[IN_V] = v, x.in[IN_G] = g, x.in[IN_BETA] = b;
    double t[3];
    for (int r = 0; r < 3; r++) {
        double t0 = bench_now();
        if (mixer_attribution(&mixer_gdn, &c, NULL, &x, M, Md, oi, &e))
            return fprintf(stderr, "%s\n", e.msg), 1;
        t[r] = bench_now() - t0;
    }
    double med = bench_median(t, 3);
    double flops = (double)H * T * (T + 1) / 2 * 6.0 * D;
    printf("attribution, gdn layer H=%d dk=dv=%d T=%d, %d threads (CPU)\n", H, D, T,
           pool_threads());
    printf("  %-32s %10s %10s %12s\n", "", "median s", "GFLOP/s", "target s");
    printf("  %-32s %10.3f %10.2f %12s\n", "M, decay-only part, o_init", med, flops / med * 1e-9,
           T == 1024 ? "2.0" : "-");
    free(q), free(k), free(v), free(g), free(b), free(M), free(Md), free(oi);
    return 0;
}
