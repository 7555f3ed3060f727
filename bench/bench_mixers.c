/* bench_mixers.c: CPU throughput of every mixer (make bench).
 *
 * H = 4, d = 64, T = 4096 random tokens (unit keys, log-decays in [-0.5, 0), write strengths in
 * (0.05, 0.95)); for each mixer the median over 5 runs of the step form (one token at a time, with
 * every probe computed: what the REPL does) and of the prefill form (chunk 64), in tokens/s.
 * Printed as a table; nothing is asserted. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "bench/bench.h"
#include "mixers/mixer.h"

#define NH   4
#define ND   64
#define NT   4096
#define RUNS 5

static unsigned long long rs = 12345;
static double urand(void) {
    rs ^= rs << 13, rs ^= rs >> 7, rs ^= rs << 17;
    return (double)(rs >> 11) / 9007199254740992.0;
}

int main(int argc, char **argv) {
    int tokens = argc > 1 ? atoi(argv[1]) : NT;
    if (tokens < 1) tokens = NT;
    printf("CPU mixers: H=%d d=%d T=%d, median of %d runs, tokens/s (1 core)\n\n", NH, ND, tokens,
           RUNS);
    printf("%-10s %14s %14s %10s\n", "mixer", "step tok/s", "prefill tok/s", "ratio");
    for (int mi = 0; mi < mixer_count; mi++) {
        const mixer_ops *m = mixer_all[mi];
        mixer_cfg c;
        opts o = {0};
        err e = {{0}};
        if (mixer_configure(m, &c, NH, ND, ND, &o, &e)) {
            printf("%-10s %s\n", m->name, e.msg);
            continue;
        }
        c.max_t = tokens;
        if (c.chunk == 16 || c.chunk == 32) c.chunk = 64;
        float *in[IN_COUNT] = {0}, *params[MIXER_MAX_PARAMS] = {0};
        for (int i = 0; i < m->ninputs; i++) {
            mixer_input w = m->inputs[i].which;
            size_t n = (size_t)tokens * NH * mixer_input_floats(&c, w);
            float *p = malloc(n * sizeof *p);
            for (size_t j = 0; j < n; j++) {
                double u = urand();
                p[j] = w == IN_G || w == IN_GK      ? (float)(-0.5 * u)
                       : w == IN_BETA || w == IN_LV ? (float)(0.05 + 0.9 * u)
                                                    : (float)((u * 2 - 1) * 0.2165);
            }
            in[w] = p;
        }
        for (int i = 0; i < m->nparams; i++) {
            size_t n = (size_t)NH * mixer_width_floats(&c, m->params[i].width);
            params[i] = malloc(n * sizeof(float));
            for (size_t j = 0; j < n; j++) params[i][j] = (float)(i == 0 ? 0.9 : 0.05);
            c.params[i] = params[i];
        }
        mixer_seq seq = {.T = tokens};
        for (int i = 0; i < IN_COUNT; i++) seq.in[i] = in[i];
        size_t sf = m->state_floats(&c);
        float *state = malloc(sf * sizeof(float)),
              *out = malloc((size_t)tokens * NH * ND * sizeof(float));
        float *probes = malloc((mixer_probe_floats(m, &c) + 1) * sizeof(float));
        double ts[RUNS], tp[RUNS];
        for (int r = 0; r < RUNS; r++) {
            m->state_init(&c, state);
            double t0 = bench_now();
            for (int t = 0; t < tokens; t++) {
                mixer_tok x = mixer_seq_at(&c, &seq, t);
                m->step(&c, state, &x, t, out + (size_t)t * NH * ND, probes);
            }
            ts[r] = bench_now() - t0;
            m->state_init(&c, state);
            t0 = bench_now();
            m->prefill(&c, state, &seq, 0, out);
            tp[r] = bench_now() - t0;
        }
        double mts = bench_median(ts, RUNS), mtp = bench_median(tp, RUNS);
        printf("%-10s %14.0f %14.0f %9.2fx\n", m->name, tokens / mts, tokens / mtp, mts / mtp);
        fflush(stdout);
        for (int i = 0; i < IN_COUNT; i++) free(in[i]);
        for (int i = 0; i < MIXER_MAX_PARAMS; i++) free(params[i]);
        free(state), free(out), free(probes);
    }
    return 0;
}
