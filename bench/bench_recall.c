/* bench_recall.c: the cost of the recall recording (viz/recall.h) per token and layer (make bench).
 *
 * gdn, H = 8, dk = dv = 128, window 256 (full: measured after the first 300 tokens). For each
 * token, the time of
 *   direct double  the former recall_record: per key S^T k in double, O(W dk dv) per head,
 *   float product  recall_record now: K_window [W, dk] x S [dk, dv] in float, blocked,
 *   incremental    the tracker: recall_before_step (the write form) + recall_after_step, which
 *                  advances the readbacks by r <- alpha r + (k . kk) u, O(W (dk + dv)) per head,
 * and of the mixer step itself (every probe on) for scale. Medians in ms per token; nothing is
 * asserted. An argument sets the number of timed tokens (default 24). */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "bench/bench.h"
#include "core/trace.h"
#include "mixers/mixer.h"
#include "viz/recall.h"

#define NH   8
#define ND   128
#define WARM 300

static unsigned long long rs = 12345;
static double urand(void) { /* [0, 1) */
    rs ^= rs << 13, rs ^= rs >> 7, rs ^= rs << 17;
    return (double)(rs >> 11) / 9007199254740992.0;
}

/* The former recall_record's readback loop (before the tracker): per head and key, S^T k and the
 * error in double from the state [H][dk][dv], keys and values read from the trace. */
static void direct_double(trace *tr, int layer, const float *state, int64_t t) {
    int sk = trace_find(tr, "k"), sv = trace_find(tr, "v"), sr = trace_find(tr, "recall");
    for (int h = 0; h < NH; h++) {
        const float *S = state + (size_t)h * ND * ND;
        float *row = trace_at_lh(tr, sr, t, layer, h);
        for (int j = 0; j < RECALL_WINDOW; j++) {
            if (j > t) {
                row[j] = NAN;
                continue;
            }
            const float *ki = trace_at_lh(tr, sk, t - j, layer, h);
            const float *vi = trace_at_lh(tr, sv, t - j, layer, h);
            row[j] = isnan(ki[0]) ? NAN : recall_readback(ND, ND, S, ki, vi);
        }
    }
}

int main(int argc, char **argv) {
    int timed = argc > 1 ? atoi(argv[1]) : 24;
    if (timed < 1) timed = 24;
    const mixer_ops *m = mixer_find("gdn");
    mixer_cfg c;
    opts o = {0};
    err e = {{0}};
    if (!m || mixer_configure(m, &c, NH, ND, ND, &o, &e)) {
        fprintf(stderr, "bench_recall: %s\n", e.msg);
        return 1;
    }
    int T = WARM + timed;
    size_t nk = (size_t)T * NH * ND;
    float *q = malloc(nk * sizeof *q), *k = malloc(nk * sizeof *k), *v = malloc(nk * sizeof *v);
    float *g = malloc((size_t)T * NH * sizeof *g), *b = malloc((size_t)T * NH * sizeof *b);
    float *state = malloc(m->state_floats(&c) * sizeof *state),
          *out = malloc(NH * ND * sizeof *out);
    float *probes = malloc((mixer_probe_floats(m, &c) + 1) * sizeof *probes);
    double *ts = malloc((size_t)timed * 4 * sizeof *ts);
    if (!q || !k || !v || !g || !b || !state || !out || !probes || !ts) {
        fprintf(stderr, "bench_recall: out of memory\n");
        return 1;
    }
    for (size_t i = 0; i < nk; i++)
        q[i] = (float)(urand() - 0.5), k[i] = (float)(urand() - 0.5), v[i] = (float)(urand() - 0.5);
    for (size_t th = 0; th < (size_t)T * NH; th++) { /* unit keys, as the layers give */
        float *kt = k + th * ND;
        double n = 0;
        for (int d = 0; d < ND; d++) n += (double)kt[d] * kt[d];
        for (int d = 0; d < ND; d++) kt[d] = (float)(kt[d] / sqrt(n));
        g[th] = (float)(-0.1 * urand()), b[th] = (float)(0.1 + 0.8 * urand());
    }
    m->state_init(&c, state);
    trace tr;
    trace_init(&tr);
    recall_tracker rt;
    if (recall_tracker_init(&rt, m, &c, &e)) {
        fprintf(stderr, "bench_recall: %s\n", e.msg);
        return 1;
    }
    double *t_step = ts, *t_inc = ts + timed, *t_prod = ts + 2 * timed, *t_dir = ts + 3 * timed;
    for (int t = 0; t < T; t++) {
        mixer_tok x = {{0}};
        x.in[IN_Q] = q + (size_t)t * NH * ND, x.in[IN_K] = k + (size_t)t * NH * ND;
        x.in[IN_V] = v + (size_t)t * NH * ND, x.in[IN_G] = g + (size_t)t * NH;
        x.in[IN_BETA] = b + (size_t)t * NH;
        if (trace_push_token(&tr, &e) < 0) break;
        double t0 = bench_now();
        if (recall_before_step(&rt, state, &x, t, &e)) break;
        double t1 = bench_now();
        m->step(&c, state, &x, t, out, probes);
        double t2 = bench_now();
        if (recall_after_step(&rt, &tr, 1, 0, state, t, &e)) break;
        double t3 = bench_now();
        if (t < WARM) continue;
        int i = t - WARM;
        t_step[i] = t2 - t1, t_inc[i] = (t1 - t0) + (t3 - t2);
        if (recall_record(&tr, 1, 0, NH, ND, ND, x.in[IN_K], x.in[IN_V], state, t, &e)) break;
        t_prod[i] = bench_now() - t3;
        double t4 = bench_now();
        direct_double(&tr, 0, state, t);
        t_dir[i] = bench_now() - t4;
    }
    if (e.msg[0]) {
        fprintf(stderr, "bench_recall: %s\n", e.msg);
        return 1;
    }
    double step = bench_median(t_step, timed), inc = bench_median(t_inc, timed);
    double prod = bench_median(t_prod, timed), dir = bench_median(t_dir, timed);
    printf("recall recording: gdn H=%d dk=dv=%d window %d, median of %d tokens, ms per token and "
           "layer (1 core)\n\n",
           NH, ND, RECALL_WINDOW, timed);
    printf("%-34s %10s %12s\n", "", "ms", "vs step");
    printf("%-34s %10.3f %12s\n", "mixer step (every probe)", step * 1e3, "1");
    printf("%-34s %10.3f %12.2f\n", "direct double (former)", dir * 1e3, dir / step);
    printf("%-34s %10.3f %12.2f\n", "float product (recall_record)", prod * 1e3, prod / step);
    printf("%-34s %10.3f %12.2f\n", "incremental (tracker)", inc * 1e3, inc / step);
    printf("\nincremental tokens %lld, full products %lld; speed-up over the former: %.0fx "
           "(product), %.0fx (incremental)\n",
           (long long)rt.incremental, (long long)rt.full, dir / prod, dir / inc);
    recall_tracker_free(&rt);
    trace_free(&tr);
    free(q), free(k), free(v), free(g), free(b), free(state), free(out), free(probes), free(ts);
    return 0;
}
