/* bench_step.c: `make bench-step`: the engine stepping token by token with probes recorded, as a
 * session does (engine/engine.h), on the CPU. Prints tokens/s and ms/token beside the floor:
 * weight bytes + state bytes a token over the read bandwidth measured here (a sum over 512 MiB
 * with every thread).
 *
 *   raw lanes:  gdn, kaczmarz, kalman, kata, parallax at heads 16, dk = dv = 128, a stream of T
 *               keys (T 2048 for the linear cores; kata and parallax cost more than a step a
 *               token, so fewer: their rate is per token at that length), default and all probes
 *   models:     `model random MIXER layers=4 hidden=1024 heads=8 head_dim=128 vocab=32000` of
 *               every mixer, default probes and none; and the 340M class of gated_deltanet
 *               (24 layers, hidden 1024, 4 heads of head_dim 256, expand_v 2, vocab 32000)
 *
 * Raw rows of 1024 tokens or more are the median of 3 runs of the stream (reset between).
 * Kalman runs 256 tokens (its per-lane probes under `all` are 14 MiB a token in the trace).
 * MIXSCOPE_BENCH_QUICK=1 takes fewer tokens (a smoke run). MIXSCOPE_BENCH_ONLY=raw|model|340m. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "bench/bench.h"
#include "core/opts.h"
#include "core/pool.h"
#include "engine/engine.h"
#include "models/model.h"
#include "scenes/stream.h"

static double g_bw; /* bytes / s */

/* The machine's read bandwidth with every thread of the pool: the rate at which stepping can
 * read weights and states (a sum over 512 MiB of floats, split by rows as blk_linear splits;
 * the best of 5). The floor of a token is its bytes over this. */
typedef struct rd_ctx {
    const float *x;
    size_t per;
    double *part;
} rd_ctx;

static void rd_part(void *ctx, int lo, int hi) {
    rd_ctx *c = ctx;
    for (int p = lo; p < hi; p++) {
        const float *x = c->x + (size_t)p * c->per;
        float s[8] = {0};
        for (size_t i = 0; i + 8 <= c->per; i += 8)
            for (int j = 0; j < 8; j++) s[j] += x[i + j];
        c->part[p] = s[0] + s[1] + s[2] + s[3] + s[4] + s[5] + s[6] + s[7];
    }
}

static double measure_bandwidth(void) {
    size_t n = (size_t)128 << 20; /* floats: 512 MiB */
    int parts = 64;
    float *x = malloc(n * sizeof *x);
    double part[64], sink = 0;
    if (!x) return 1e10;
    for (size_t i = 0; i < n; i++) x[i] = (float)(i & 7);
    rd_ctx c = {x, n / (size_t)parts, part};
    double best = 1e9;
    for (int r = 0; r < 5; r++) {
        double t0 = bench_now();
        pool_for(parts, rd_part, &c);
        double t = bench_now() - t0;
        for (int p = 0; p < parts; p++) sink += part[p];
        if (t < best) best = t;
    }
    free(x);
    if (sink == 42) printf(" ");
    return (double)n * sizeof(float) / best;
}

static int quick(void) {
    const char *q = getenv("MIXSCOPE_BENCH_QUICK");
    return q && *q && strcmp(q, "0");
}

static int only(const char *what) {
    const char *o = getenv("MIXSCOPE_BENCH_ONLY");
    return !o || !*o || !strcmp(o, what);
}

static void row(const char *what, const char *probes, int tokens, double sec, double floor_bytes) {
    double ms = 1e3 * sec / tokens, fl = 1e3 * floor_bytes / g_bw;
    printf("%-44s %-8s %6d %10.1f %10.3f %10.3f %7.1fx\n", what, probes, tokens, tokens / sec, ms,
           fl, fl > 0 ? ms / fl : 0);
    fflush(stdout);
}

static void header(const char *title) {
    printf("\n%s\n%-44s %-8s %6s %10s %10s %10s %8s\n", title, "case", "probes", "tokens",
           "tokens/s", "ms/token", "floor ms", "x floor");
}

static int bench_raw(const char *mixer, const char *probes, int T) {
    engine g;
    err e = {{0}};
    if (engine_init(&g, &e)) return -1;
    char specs[1][64];
    snprintf(specs[0], sizeof specs[0], "%s", mixer);
    raw_stream st;
    int rc = engine_set_probes(&g, probes, &e) ||
             engine_raw_select(&g, specs, 1, "", 16, 128, 128, &e) ||
             stream_keys(&st, T, 16, 128, 128, 0.5, 2.0, 1, &e) || engine_raw_stream(&g, &st, &e);
    /* the median of 3 runs of the stream (reset between): the first also pays for the trace's
     * pages and the pool's threads; one run for the slow cores */
    int reps = T >= 1024 ? 3 : 1;
    double ts[3] = {0};
    for (int r = 0; r < reps && !rc; r++) {
        if (r) rc = engine_reset(&g, &e);
        double t0 = bench_now();
        if (!rc) rc = engine_run(&g, 0, &e);
        ts[r] = bench_now() - t0;
    }
    double sec = bench_median(ts, reps);
    if (rc) {
        printf("%-44s %-8s failed: %s\n", mixer, probes, e.msg);
    } else {
        const raw_lane *L = &g.raw->lane[0];
        double sb = 4.0 * (double)L->m->state_floats(&L->c);
        /* a KV cache is read up to the position: half of it on average */
        if (!strcmp(mixer, "parallax")) sb = 4.0 * 16 * (128 + 128) * (T / 2.0);
        char what[64];
        snprintf(what, sizeof what, "raw %s H16 d128 T%d", mixer, T);
        row(what, probes, T, sec, sb);
    }
    engine_free(&g);
    return rc;
}

static int bench_model(const char *label, const char *mixer, const char *args, const char *probes,
                       int T) {
    engine g;
    err e = {{0}};
    if (engine_init(&g, &e)) return -1;
    char buf[256];
    snprintf(buf, sizeof buf, "%s", args);
    char *argv[32];
    int argc = 0;
    for (char *w = strtok(buf, " "); w && argc < 32; w = strtok(NULL, " ")) argv[argc++] = w;
    opts o;
    model *m = NULL;
    double tb = bench_now();
    int rc = opts_parse(&o, argc, argv, &e);
    if (!rc) {
        rc = model_random(&m, mixer, &o, &e);
        opts_free(&o);
    }
    double build = bench_now() - tb;
    int32_t *ids = malloc((size_t)T * sizeof *ids);
    for (int i = 0; ids && i < T; i++) ids[i] = (int32_t)((i * 7919) % 30000 + 1);
    if (!rc)
        rc = engine_set_model(&g, m, NULL, 0, &e);
    else
        model_free(m);
    if (!rc) rc = engine_set_probes(&g, probes, &e) || engine_set_tokens(&g, ids, T, &e);
    double t0 = bench_now();
    if (!rc) rc = engine_run(&g, 0, &e);
    double sec = bench_now() - t0;
    if (rc) {
        printf("%-44s %-8s failed: %s\n", label, probes, e.msg);
    } else {
        const model *mm = g.model;
        double wb = 4.0 * (double)model_param_count(mm);
        /* an untied embedding is read one row a token; a tied one is also the head */
        if (!mm->c.tie) wb -= 4.0 * mm->c.vocab * (double)mm->c.hidden;
        double sb = 0;
        for (int li = 0; li < mm->c.layers; li++) {
            const layer *L = &mm->layers[li];
            sb += L->grows ? 4.0 * L->mc.H * (L->mc.dk + L->mc.dv) * (T / 2.0)
                           : 4.0 * (double)L->mx->state_floats(&L->mc);
        }
        char what[96];
        snprintf(what, sizeof what, "%s (built in %.2f s)", label, build);
        row(what, probes, T, sec, wb + sb);
    }
    free(ids);
    engine_free(&g);
    return rc;
}

int main(void) {
    g_bw = measure_bandwidth();
    int q = quick();
    printf("bench-step: the engine's CPU stepping, %d threads, read bandwidth %.1f GB/s (all "
           "threads; the floor: weight + state bytes a token over it)\n",
           pool_threads(), g_bw / 1e9);
    if (only("raw")) {
        header("raw lanes: heads 16, dk = dv = 128, stream keys T");
        const char *lin[] = {"gdn", "kaczmarz"};
        for (int i = 0; i < 2; i++)
            for (int p = 0; p < 2; p++) bench_raw(lin[i], p ? "all" : "default", q ? 128 : 2048);
        /* Kalman's 14 per-lane probes are 14 MiB a token in the trace under `all`: 256 tokens */
        for (int p = 0; p < 2; p++) bench_raw("kalman", p ? "all" : "default", q ? 32 : 256);
        for (int p = 0; p < 2; p++) bench_raw("kata", p ? "all" : "default", q ? 8 : 32);
        for (int p = 0; p < 2; p++) bench_raw("parallax", p ? "all" : "default", q ? 128 : 2048);
    }
    if (only("model")) {
        header("models: layers 4, hidden 1024, heads 8, head_dim 128, vocab 32000");
        const char *mx[] = {"gdn",     "deltanet", "kaczmarz", "gla", "mamba2",
                            "softmax", "parallax", "kalman",   "kata"};
        for (int i = 0; i < 9; i++) {
            char label[64];
            snprintf(label, sizeof label, "model %s 4x1024", mx[i]);
            int T = q ? 4 : (!strcmp(mx[i], "kata") ? 8 : 64);
            /* Kalman's layer has one head of channels expand * hidden */
            const char *args = !strcmp(mx[i], "kalman")
                                   ? "layers=4 hidden=1024 vocab=32000 seed=1"
                                   : "layers=4 hidden=1024 heads=8 head_dim=128 vocab=32000 seed=1";
            bench_model(label, mx[i], args, "default", T);
            if (!strcmp(mx[i], "gdn"))
                bench_model(label, mx[i],
                            "layers=4 hidden=1024 heads=8 head_dim=128 vocab=32000 seed=1", "none",
                            T);
        }
    }
    if (only("340m")) {
        header("the 340M class: gated_deltanet, 24 layers, hidden 1024, 4 heads x 256, expand_v 2");
        bench_model("model gdn 340M class", "gdn",
                    "layers=24 hidden=1024 heads=4 head_dim=256 expand_v=2 vocab=32000 seed=1",
                    "default", q ? 2 : 16);
    }
    return 0;
}
