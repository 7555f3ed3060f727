/* bench_gpu.c: medians of mixscope's GPU kernels at B = 1, H = 16, d = 128, bf16 inputs, beside
 * the peer (flash-linear-attention 0.5.2 on an H200, numbers from the issue) and PyTorch SDPA
 * timed in the same run (bench/gpu/sdpa.py). Each row also states the kernel's floor: the fewest
 * bytes it must move over the measured copy bandwidth. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/gpu.h"
#include "kernels/gpu_bench.h"

#define H 16
#define D 128

typedef struct delta_ctx {
    int B, T, kacz;
    void *q, *k, *v, *k2, *v2, *scratch;
    float *g, *beta, *state, *o;
} delta_ctx;

int gpu_kaczmarz_rescale(size_t tokens_heads, int dk, int dv, float eps, int bf16, const void *k,
                         const void *v, void *k_out, void *v_out, void *stream, err *e);

static int run_prefill(void *p, err *e) {
    delta_ctx *c = p;
    const void *k = c->k, *v = c->v;
    if (c->kacz) {
        if (gpu_kaczmarz_rescale((size_t)c->B * c->T * H, D, D, 1e-6f, 1, c->k, c->v, c->k2, c->v2,
                                 NULL, e))
            return -1;
        k = c->k2, v = c->v2;
    }
    return gpu_delta_prefill(c->B, c->T, H, D, D, 64, 0.0883883f, 1, c->q, k, v, c->g, c->beta,
                             c->state, c->o, c->scratch, NULL, e);
}

static int run_step(void *p, err *e) {
    delta_ctx *c = p;
    return gpu_delta_step(c->B, H, D, D, 0.0883883f, 1, c->q, c->k, c->v, c->g, c->beta, c->state,
                          c->o, NULL, e);
}

static double sdpa_ms(int T) {
    const char *f = getenv("SDPA_FILE");
    FILE *fp = f ? fopen(f, "r") : NULL;
    double ms = -1;
    int t;
    double v;
    while (fp && fscanf(fp, "sdpa %d %lf\n", &t, &v) == 2)
        if (t == T) ms = v;
    if (fp) fclose(fp);
    return ms;
}

static void *dalloc(size_t bytes, err *e) {
    void *p = gpu_malloc(bytes, e);
    if (!p) {
        fprintf(stderr, "bench-gpu: %s\n", e->msg);
        exit(1);
    }
    return p;
}

static int setup(delta_ctx *c, int B, int T, int kacz, int prefill, err *e) {
    memset(c, 0, sizeof *c);
    c->B = B, c->T = T, c->kacz = kacz;
    size_t nk = (size_t)B * T * H * D, nh = (size_t)B * T * H;
    c->q = dalloc(nk * 2, e), c->k = dalloc(nk * 2, e), c->v = dalloc(nk * 2, e);
    c->g = dalloc(nh * 4, e), c->beta = dalloc(nh * 4, e);
    c->state = dalloc((size_t)B * H * D * D * 4, e), c->o = dalloc(nk * 4, e);
    if (kacz) c->k2 = dalloc(nk * 2, e), c->v2 = dalloc(nk * 2, e);
    if (prefill) c->scratch = dalloc(gpu_delta_scratch_bytes(B, T, H, D, D, 64), e);
    /* |k| ~ 1 for unit-like keys; g in [-0.5, 0); beta in (0.05, 0.95) */
    return gpu_fill_uniform(c->q, nk, 1, 0.15f, 0, 1, e) || gpu_fill_uniform(c->k, nk, 1, 0.15f, 0, 2, e) ||
           gpu_fill_uniform(c->v, nk, 1, 1.0f, 0, 3, e) || gpu_fill_uniform(c->g, nh, 0, 0.25f, -0.25f, 4, e) ||
           gpu_fill_uniform(c->beta, nh, 0, 0.45f, 0.5f, 5, e) ||
           gpu_fill_uniform(c->state, (size_t)B * H * D * D, 0, 0.0f, 0.0f, 6, e);
}

static void teardown(delta_ctx *c) {
    gpu_free(c->q), gpu_free(c->k), gpu_free(c->v), gpu_free(c->g), gpu_free(c->beta);
    gpu_free(c->state), gpu_free(c->o), gpu_free(c->k2), gpu_free(c->v2), gpu_free(c->scratch);
}

int main(void) {
    char why[256];
    err e = {{0}};
    if (!gpu_available(why, sizeof why)) {
        printf("bench-gpu: skipped: %s\n", why);
        return 0;
    }
    double bw;
    if (gpu_measure_copy_gbps(&bw, &e)) {
        fprintf(stderr, "bench-gpu: %s\n", e.msg);
        return 1;
    }
    printf("device: %s; measured copy bandwidth %.0f GB/s (read + write)\n", why, bw);
    printf("B=1 H=%d d=%d bf16 inputs, fp32 state and output; medians of 20 runs\n\n", H, D);
    printf("%-28s %10s %10s %10s %8s %10s\n", "kernel", "ms", "peer ms", "SDPA ms", "vs peer",
           "floor ms");
    const int Ts[4] = {4096, 16384, 65536, 131072};
    const double peer_chunk[4] = {0.86, 1.17, 2.53, 4.96};
    for (int kacz = 0; kacz <= 1; kacz++)
        for (int i = 0; i < 4; i++) {
            delta_ctx c;
            if (setup(&c, 1, Ts[i], kacz, 1, &e)) break;
            double ms;
            if (gpu_time_median(run_prefill, &c, 2, 20, &ms, &e)) {
                printf("%s\n", e.msg);
                teardown(&c);
                continue;
            }
            /* floor: read q, k, v (bf16), g, beta; write o (fp32) */
            double bytes = (double)Ts[i] * H * (3.0 * D * 2 + 8 + D * 4);
            char name[64];
            snprintf(name, sizeof name, "%s chunked T=%dK", kacz ? "kaczmarz" : "gdn", Ts[i] / 1024);
            double sd = Ts[i] <= 16384 ? sdpa_ms(Ts[i]) : -1;
            printf("%-28s %10.3f %10.2f %10s %7.2fx %10.3f\n", name, ms, peer_chunk[i],
                   sd > 0 ? (snprintf(why, sizeof why, "%.3f", sd), why) : "-", peer_chunk[i] / ms,
                   bytes / (bw * 1e9) * 1e3);
            teardown(&c);
        }
    const int Bs[3] = {1, 8, 64};
    for (int i = 0; i < 3; i++) {
        delta_ctx c;
        if (setup(&c, Bs[i], 1, 0, 0, &e)) break;
        double ms;
        if (gpu_time_median(run_step, &c, 5, 50, &ms, &e)) {
            printf("%s\n", e.msg);
            teardown(&c);
            continue;
        }
        double bytes = (double)Bs[i] * H * (2.0 * D * D * 4 + 3 * D * 2 + D * 4);
        char name[64];
        snprintf(name, sizeof name, "gdn decode step B=%d", Bs[i]);
        printf("%-28s %10.4f %10.2f %10s %7.2fx %10.4f\n", name, ms, 0.13, "-", 0.13 / ms,
               bytes / (bw * 1e9) * 1e3);
        teardown(&c);
    }
    printf("\nfloor = fewest bytes the kernel must move / measured copy bandwidth\n");
    return 0;
}
