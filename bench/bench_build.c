/* bench_build.c: building, saving and loading a model, and the weights' digest (make bench).
 *
 * The model is `model random gdn layers=4 hidden=1024 heads=8 head_dim=128 vocab=32000 seed=1`
 * (134M parameters, 535 MB as float32). Medians of a few runs: model random over every core and
 * on one thread (seconds, ns per parameter), save (config.json + model.safetensors, fsync'd) and
 * load of that folder, model_weights_sha256 of the saved file, and SHA-256 over a buffer in memory
 * with the SHA extensions and with the portable code (MB/s). Target (issue 13): model random under
 * 0.5 s on a 2-core machine. Printed as a table; nothing is asserted. */
#define _GNU_SOURCE
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "bench/bench.h"
#include "core/opts.h"
#include "core/parallel.h"
#include "core/sha256.h"
#include "models/model.h"

#define RUNS 5

static model *build(err *e) {
    static const char *const KV[] = {"layers=4",     "hidden=1024", "heads=8",
                                     "head_dim=128", "vocab=32000", "seed=1"};
    opts o;
    if (opts_parse(&o, 6, (char *const *)KV, e)) return NULL;
    model *m = NULL;
    int rc = model_random(&m, "gdn", &o, e);
    opts_free(&o);
    return rc ? NULL : m;
}

/* median seconds of model random with `threads` (0: every core); params set */
static double time_random(int threads, int runs, int64_t *params, err *e) {
    double t[RUNS];
    par_set_threads(threads);
    for (int r = 0; r < runs; r++) {
        double t0 = bench_now();
        model *m = build(e);
        t[r] = bench_now() - t0;
        if (!m) return -1;
        *params = model_param_count(m);
        model_free(m);
    }
    par_set_threads(0);
    return bench_median(t, runs);
}

static double sha_mbs(int ni, size_t n, const unsigned char *buf) {
    double t[3];
    char hex[65];
    sha256_set_ni(ni);
    for (int r = 0; r < 3; r++) {
        sha256_ctx c;
        double t0 = bench_now();
        sha256_init(&c);
        sha256_update(&c, buf, n);
        sha256_hex(&c, hex);
        t[r] = bench_now() - t0;
    }
    sha256_set_ni(1);
    return n / bench_median(t, 3) / 1e6;
}

int main(void) {
    err e = {{0}};
    int64_t params = 0;
    printf(
        "model random gdn layers=4 hidden=1024 heads=8 head_dim=128 vocab=32000 (%d threads)\n\n",
        par_threads());
    printf("%-34s %10s %12s\n", "what", "seconds", "ns/param");
    double all = time_random(0, RUNS, &params, &e);
    if (all < 0) return fprintf(stderr, "bench_build: %s\n", e.msg), 1;
    printf("%-34s %10.3f %12.2f\n", "model random (every core)", all, all * 1e9 / params);
    double one = time_random(1, 3, &params, &e);
    if (one < 0) return fprintf(stderr, "bench_build: %s\n", e.msg), 1;
    printf("%-34s %10.3f %12.2f\n", "model random (1 thread)", one, one * 1e9 / params);

    char dir[] = "/tmp/mixscope-bench-XXXXXX";
    if (!mkdtemp(dir)) return perror("mkdtemp"), 1;
    char path[64], wpath[96];
    snprintf(path, sizeof path, "%s/m", dir);
    snprintf(wpath, sizeof wpath, "%s/model.safetensors", path);
    double ts[3], tl[3], th[3];
    model *m = build(&e);
    if (!m) return fprintf(stderr, "bench_build: %s\n", e.msg), 1;
    for (int r = 0; r < 3; r++) {
        double t0 = bench_now();
        if (model_save(m, path, &e)) return fprintf(stderr, "bench_build: %s\n", e.msg), 1;
        double t1 = bench_now();
        model *l = NULL;
        if (model_load(&l, path, &e)) return fprintf(stderr, "bench_build: %s\n", e.msg), 1;
        double t2 = bench_now();
        const char *h = model_weights_sha256(l, &e);
        if (!h) return fprintf(stderr, "bench_build: %s\n", e.msg), 1;
        th[r] = bench_now() - t2, ts[r] = t1 - t0, tl[r] = t2 - t1;
        model_free(l);
    }
    model_free(m);
    printf("%-34s %10.3f %12.2f\n", "save (535 MB, fsync'd)", bench_median(ts, 3),
           bench_median(ts, 3) * 1e9 / params);
    printf("%-34s %10.3f %12.2f\n", "load", bench_median(tl, 3),
           bench_median(tl, 3) * 1e9 / params);
    printf("%-34s %10.3f %12.2f\n", "model_weights_sha256 (first call)", bench_median(th, 3),
           bench_median(th, 3) * 1e9 / params);
    unlink(wpath);
    snprintf(wpath, sizeof wpath, "%s/config.json", path);
    unlink(wpath);
    rmdir(path);
    rmdir(dir);

    size_t n = (size_t)128 << 20;
    unsigned char *buf = malloc(n);
    if (!buf) return fprintf(stderr, "bench_build: out of memory\n"), 1;
    for (size_t i = 0; i < n; i++) buf[i] = (unsigned char)(i * 2654435761u >> 13);
    printf("\n%-34s %10s\n", "SHA-256 (128 MB in memory)", "MB/s");
    if (sha256_cpu_has_ni())
        printf("%-34s %10.0f\n", "SHA extensions", sha_mbs(1, n, buf));
    else
        printf("%-34s %10s\n", "SHA extensions", "absent");
    printf("%-34s %10.0f\n", "portable", sha_mbs(0, n / 4, buf));
    free(buf);
    return 0;
}
