/* bench_train.c: `train` timed, with the arithmetic floor beside it (make bench-train).
 *
 *   bench_train [--gpu] MIXER [key=value ...]      the train command's options
 *   bench_train -c '[device gpu;] train MIXER ...'  the same, as tools/train_peer.py calls mixscope
 *
 * Prints the progress lines, then one table row: steps, wall seconds (process start to the end of
 * the last step, model building included), training tokens a second, the held-out accuracy, and
 * the floor: the FLOPs a step needs (dense products 6 per weight a token, the recurrence about
 * 28 dk dv a head, layer and token for its forward, recomputation and backward) over the
 * machine's rate (the H200's 67 TFLOP/s of fp32 CUDA cores on the GPU; on the CPU the achieved
 * GFLOP/s is printed instead, there being no portable peak). Links no SDL, ncurses or readline,
 * so it builds on the GPU machine. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "core/opts.h"
#include "models/model.h"
#include "train/train.h"

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

typedef struct last {
    train_status st;   /* the last report */
    train_status eval; /* the last report with a held-out evaluation */
} last;

static void progress(void *ctx, const train_status *st) {
    ((last *)ctx)->st = *st;
    if (isfinite(st->acc)) ((last *)ctx)->eval = *st;
    train_status_print(stdout, st);
}

int main(int argc, char **argv) {
    double t0 = now_s();
    char *words[64];
    int n = 0, gpu = 0;
    char *line = NULL;
    if (argc >= 3 && !strcmp(argv[1], "-c")) {
        line = strdup(argv[2]);
        for (char *w = strtok(line, " \t;"); w && n < 64; w = strtok(NULL, " \t;")) {
            if (!strcmp(w, "device") || !strcmp(w, "train")) continue;
            if (!strcmp(w, "gpu")) {
                gpu = 1;
                continue;
            }
            if (!strcmp(w, "cpu")) continue;
            words[n++] = w;
        }
    } else {
        for (int i = 1; i < argc && n < 64; i++) {
            if (!strcmp(argv[i], "--gpu"))
                gpu = 1;
            else
                words[n++] = argv[i];
        }
    }
    if (n < 1) {
        fprintf(stderr, "usage: bench_train [--gpu] MIXER [key=value ...]\n");
        return 2;
    }
    opts o, rest;
    err e = {{0}};
    train_cfg c;
    if (opts_parse(&o, n - 1, words + 1, &e) || train_cfg_parse(&c, words[0], &o, &rest, &e)) {
        fprintf(stderr, "bench_train: %s\n", e.msg);
        return 1;
    }
    c.gpu = gpu;
    snprintf(c.command, sizeof c.command, "train");
    for (int i = 0; i < n; i++) {
        size_t u = strlen(c.command);
        snprintf(c.command + u, sizeof c.command - u, " %s", words[i]);
    }
    printf("training %s on %s (%s): %d layers, hidden %d, %d heads of %d; %d steps of %d x %d\n",
           c.mixer, c.task, gpu ? "gpu" : "cpu", c.layers, c.hidden, c.heads, c.head_dim, c.steps,
           c.batch, c.seq);
    last l;
    memset(&l, 0, sizeof l);
    train_hooks h = {progress, NULL, &l};
    model *m = NULL;
    train_end how;
    double ts = now_s();
    if (train_run(&c, &h, &m, &how, &e)) {
        fprintf(stderr, "bench_train: %s\n", e.msg);
        return 1;
    }
    double wall = now_s() - t0, train_s = now_s() - ts;
    /* the floor */
    const model_config *mc = &m->c;
    double dense = 0;
    for (int i = 0; i < m->nslots; i++)
        if (m->slots[i].ndim >= 2 && m->slots[i].data != m->embed) {
            double k = 1;
            for (int d = 0; d < m->slots[i].ndim; d++) k *= (double)m->slots[i].shape[d];
            dense += k;
        }
    if (mc->tie) dense += (double)mc->vocab * mc->hidden; /* the head reads the embedding */
    double per_tok = 6 * dense + 2.0 * 28 * mc->layers * mc->Hv * (double)mc->dk * mc->dv;
    double tokens = (double)l.st.step * c.batch * c.seq, flops = per_tok * tokens;
    printf("\n%-10s %-6s %6s %9s %12s %9s %14s\n", "mixer", "device", "steps", "wall s", "tokens/s",
           "held-out", gpu ? "floor s" : "GFLOP/s");
    printf("%-10s %-6s %6d %9.1f %12.0f %8.1f%% %14.3g\n", c.mixer, gpu ? "gpu" : "cpu", l.st.step,
           wall, tokens / train_s, 100 * l.eval.acc, gpu ? flops / 67e12 : flops / train_s / 1e9);
    printf("(%.3g FLOPs a token, %.3g in all; %s)\n", per_tok, flops,
           how == TRAIN_DIVERGED ? "the run diverged" : "held-out accuracy at the last report");
    model_free(m);
    opts_free(&o);
    free(line);
    return how == TRAIN_DIVERGED;
}
