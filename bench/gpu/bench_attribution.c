/* bench_attribution.c: exact attribution of one 16-head layer, d = 128, on the GPU against the
 * CPU reference on the same machine (make bench-attribution; the target: T = 4096 within
 * 50 ms on the H200).
 *
 * gdn inputs (unit keys, decays, write strengths) resident on the device; timed: the kernel
 * (kernels/attribution.cu) writing M [H, T, T] and o_init, with and without the decay-only part,
 * median of 5 after a warm-up, and the copy of M back to the host. The floor beside it: the bytes
 * of M (and Md) at the HBM bandwidth (4.8 TB/s) and the flops (about 6 dk per (i, j) pair, 8 with
 * the decay-only part) at fp32 FMA rate (67 TFLOP/s). The CPU column: mixers/attribution.c on
 * every core (one run; at T = 4096 it takes seconds). Nothing is asserted. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>

#include "bench/bench.h"
#include "core/pool.h"
#include "kernels/gpu.h"
#include "mixers/attribution.h"

static unsigned long long rs = 5;
static float nrand(void) {
    rs ^= rs << 13, rs ^= rs >> 7, rs ^= rs << 17;
    double u = (double)(rs >> 11) / 9007199254740992.0;
    rs ^= rs << 13, rs ^= rs >> 7, rs ^= rs << 17;
    double v = (double)(rs >> 11) / 9007199254740992.0;
    return (float)(sqrt(-2.0 * log(u + 1e-300)) * cos(6.283185307179586 * v));
}

int main(int argc, char **argv) {
    char why[256];
    if (!gpu_available(why, sizeof why)) return printf("bench_attribution: skipped: %s\n", why), 0;
    const int H = 16, D = 128;
    int Ts[] = {1024, 4096}, nT = 2;
    if (argc > 1) Ts[0] = atoi(argv[1]), nT = 1;
    printf("exact attribution, gdn layer H=%d dk=dv=%d (median ms of 5)\n", H, D);
    printf("  %6s %10s %10s %10s %10s %10s %10s\n", "T", "M+o_init", "+decay", "copy M", "floor",
           "cpu", "cpu/gpu");
    for (int ti = 0; ti < nT; ti++) {
        int T = Ts[ti];
        size_t nk = (size_t)T * H * D, nth = (size_t)T * H, nm = (size_t)H * T * T;
        float *q = malloc(nk * 4), *k = malloc(nk * 4), *g = malloc(nth * 4), *b = malloc(nth * 4);
        for (size_t i = 0; i < nth; i++) {
            double n = 0;
            for (int d = 0; d < D; d++)
                q[i * D + d] = nrand(), k[i * D + d] = nrand(),
                          n += (double)k[i * D + d] * k[i * D + d];
            for (int d = 0; d < D; d++) k[i * D + d] /= (float)sqrt(n);
            g[i] = -0.05f, b[i] = 0.5f;
        }
        err e = {{0}};
        float *dq = gpu_malloc(nk * 4, &e), *dk = gpu_malloc(nk * 4, &e),
              *dg = gpu_malloc(nth * 4, &e);
        float *db = gpu_malloc(nth * 4, &e), *dM = gpu_malloc(nm * 4, &e),
              *dMd = gpu_malloc(nm * 4, &e);
        float *dO = gpu_malloc(nk * 4, &e);
        void *scr = gpu_malloc(gpu_attribution_scratch_bytes(T, H), &e);
        if (!dq || !dk || !dg || !db || !dM || !dMd || !dO || !scr)
            return printf("out of device memory: %s\n", e.msg), 1;
        gpu_copy_to_device(dq, q, nk * 4, &e), gpu_copy_to_device(dk, k, nk * 4, &e);
        gpu_copy_to_device(dg, g, nth * 4, &e), gpu_copy_to_device(db, b, nth * 4, &e);
        double t1[5], t2[5], tc[5];
        float *hM = malloc(nm * 4);
        for (int r = -1; r < 5; r++) {
            double t0 = bench_now();
            if (gpu_attribution(0, T, H, D, D, 0.0883883f, 0, 1e-6f, dq, dk, dg, NULL, db, NULL, dM,
                                NULL, dO, scr, NULL, &e) ||
                gpu_sync(&e))
                return printf("gpu: %s\n", e.msg), 1;
            double t_a = bench_now();
            if (gpu_attribution(0, T, H, D, D, 0.0883883f, 0, 1e-6f, dq, dk, dg, NULL, db, NULL, dM,
                                dMd, dO, scr, NULL, &e) ||
                gpu_sync(&e))
                return printf("gpu: %s\n", e.msg), 1;
            double t_b = bench_now();
            if (gpu_copy_to_host(hM, dM, nm * 4, &e)) return printf("gpu: %s\n", e.msg), 1;
            double t_c = bench_now();
            if (r >= 0) t1[r] = t_a - t0, t2[r] = t_b - t_a, tc[r] = t_c - t_b;
        }
        double pairs = (double)H * T * (T + 1) / 2;
        double floor_ms = fmax(nm * 4.0 / 4.8e12, pairs * 6 * D / 67e12) * 1e3;
        /* the CPU reference on every core */
        mixer_cfg c;
        opts o = {0};
        mixer_configure(mixer_find("gdn"), &c, H, D, D, &o, &e);
        mixer_seq x = {.T = T};
        x.in[IN_Q] = q, x.in[IN_K] = k, x.in[IN_G] = g, x.in[IN_BETA] = b;
        float *oi = malloc(nk * 4);
        double c0 = bench_now();
        mixer_attribution(mixer_find("gdn"), &c, NULL, &x, hM, NULL, oi, &e);
        double cpu = bench_now() - c0;
        double m1 = bench_median(t1, 5) * 1e3, m2 = bench_median(t2, 5) * 1e3,
               mc = bench_median(tc, 5) * 1e3;
        printf("  %6d %10.3f %10.3f %10.3f %10.3f %10.1f %10.0fx\n", T, m1, m2, mc, floor_ms,
               cpu * 1e3, cpu * 1e3 / m1);
        gpu_free(dq), gpu_free(dk), gpu_free(dg), gpu_free(db), gpu_free(dM), gpu_free(dMd);
        gpu_free(dO), gpu_free(scr);
        free(q), free(k), free(g), free(b), free(hM), free(oi);
    }
    printf(
        "  (cpu: mixers/attribution.c on %d threads; M+o_init: the kernel alone, device-resident; "
        "+decay: with the decay-only part; copy M: [H, T, T] to the host)\n",
        pool_threads());
    return 0;
}
