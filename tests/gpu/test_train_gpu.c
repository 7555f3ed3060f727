/* test_train_gpu.c: the GPU trainer (kernels/gpu_train.h) against the CPU trainer
 * (train/model_grad.h), on a GPU machine.
 *
 *   pass    gdn, deltanet and kaczmarz models (with and without the short convolution and the
 *           output gate, a conv bias, allow_neg_eigval), B = 3 sequences of T = 37 tokens with
 *           checkpoints every 16 (T not a multiple): the loss, the logits and the gradient of every
 *           tensor
 *   train   `train` itself (train_run: prompts, two passes a step, clipping, AdamW) on the CPU and
 *           on the GPU for 12 steps: the loss of every step
 *
 * Plain C with its own pass/fail count: the last line is "N passed, M failed". */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/opts.h"
#include "kernels/gpu.h"
#include "kernels/gpu_train.h"
#include "models/model.h"
#include "train/model_grad.h"
#include "train/train.h"
#include "train/train_gpu.h"

static int g_pass, g_fail;

static void check(int ok, const char *what, double err) {
    printf("%s %s: %.3e\n", ok ? "ok  " : "FAIL", what, err);
    ok ? g_pass++ : g_fail++;
}

static double rel(const float *a, const float *b, size_t n) {
    double num = 0, den = 0;
    for (size_t i = 0; i < n; i++) {
        double d = (double)a[i] - b[i];
        num += d * d, den += (double)b[i] * b[i];
    }
    return den > 0 ? sqrt(num / den) : sqrt(num);
}

static uint64_t g_rng = 0x12345678ull;
static double uniform(void) {
    g_rng ^= g_rng << 13, g_rng ^= g_rng >> 7, g_rng ^= g_rng << 17;
    return (double)(g_rng >> 11) * (1.0 / 9007199254740992.0);
}

static model *make_model(const char *mixer, const char *line) {
    char buf[256];
    snprintf(buf, sizeof buf, "%s", line);
    char *argv[16];
    int argc = 0;
    for (char *w = strtok(buf, " "); w && argc < 16; w = strtok(NULL, " ")) argv[argc++] = w;
    opts o;
    err e = {{0}};
    model *m = NULL;
    if (opts_parse(&o, argc, argv, &e) || model_random(&m, mixer, &o, &e)) {
        printf("FAIL model random %s %s: %s\n", mixer, line, e.msg);
        g_fail++;
        return NULL;
    }
    opts_free(&o);
    /* weights off their constant initial values, activations of order one */
    for (int i = 0; i < m->nslots; i++) {
        wslot *s = &m->slots[i];
        int64_t n = 1;
        for (int d = 0; d < s->ndim; d++) n *= s->shape[d];
        for (int64_t j = 0; j < n; j++) s->data[j] += (float)(0.3 * (uniform() - 0.5));
    }
    return m;
}

static void test_pass(const char *mixer, const char *line) {
    model *m = make_model(mixer, line);
    if (!m) return;
    const int B = 3, T = 37, chunk = 16;
    int V = m->c.vocab, N = B * T;
    int32_t *ids = malloc((size_t)N * 4), *tgt = malloc((size_t)N * 4);
    for (int i = 0; i < N; i++) {
        ids[i] = (int32_t)(uniform() * V);
        tgt[i] = i % 4 == 0 ? -1 : (int32_t)(uniform() * V);
    }
    err e = {{0}};
    train_pass *p = NULL;
    train_grads g;
    train_gpu_desc td;
    gpu_train *gt = NULL;
    if (train_pass_init(&p, m, B, T, chunk, &e) || train_grads_init(&g, m, &e) ||
        train_gpu_desc_init(&td, m, &e) || gpu_train_init(&gt, &td.d, B, T, chunk, &e)) {
        printf("FAIL %s %s: %s\n", mixer, line, e.msg);
        g_fail++;
        return;
    }
    float *lc = malloc((size_t)N * V * 4), *lg = malloc((size_t)N * V * 4);
    float *gg = malloc((size_t)g.n * 4);
    int cc = 0, cg = 0;
    train_grads_zero(&g);
    double loss_c = train_model_pass(m, p, ids, tgt, 0.1f, &g, &cc, lc), loss_g = 0;
    if (gpu_train_zero_grads(gt, &e) ||
        gpu_train_pass(gt, ids, tgt, 0.1f, 1, &loss_g, &cg, lg, &e) ||
        gpu_train_download_grads(gt, gg, &e)) {
        printf("FAIL %s %s: %s\n", mixer, line, e.msg);
        g_fail++;
    } else {
        char what[300];
        snprintf(what, sizeof what, "%s %s: loss %.6f (hits %d / %d), rel diff", mixer, line,
                 loss_c, cc, cg);
        double dl = fabs(loss_g - loss_c) / fabs(loss_c);
        check(dl < 1e-5 && cc == cg, what, dl);
        snprintf(what, sizeof what, "%s %s: logits", mixer, line);
        double r = rel(lg, lc, (size_t)N * V);
        check(r < 1e-5, what, r);
        double worst = 0;
        const char *wn = "";
        for (int i = 0; i < m->nslots; i++) {
            int64_t off = g.of[i] - g.buf, n = td.slot_n[i];
            double ri = rel(gg + off, g.of[i], (size_t)n);
            if (ri > worst) worst = ri, wn = m->slots[i].name;
        }
        snprintf(what, sizeof what, "%s %s: every gradient (worst %s)", mixer, line, wn);
        check(worst < 1e-4, what, worst);
    }
    free(lc), free(lg), free(gg), free(ids), free(tgt);
    gpu_train_free(gt);
    train_gpu_desc_free(&td);
    train_grads_free(&g);
    train_pass_free(p);
    model_free(m);
}

/* train_run on both devices: the same loss at every step */
typedef struct losses {
    double v[64];
    int n;
} losses;

static void record(void *ctx, const train_status *st) {
    losses *l = ctx;
    if (l->n < 64 && isfinite(st->loss)) l->v[l->n++] = st->loss;
}

static void test_train(const char *mixer) {
    losses lc = {{0}, 0}, lg = {{0}, 0};
    for (int dev = 0; dev < 2; dev++) {
        train_cfg c;
        train_cfg_default(&c);
        snprintf(c.mixer, sizeof c.mixer, "%s", mixer);
        c.hidden = 32, c.heads = 2, c.head_dim = 16, c.steps = 12, c.batch = 8, c.seq = 64;
        c.pairs = 8, c.log_every = 1, c.eval = 8, c.warmup = 3, c.lr = 1e-2, c.gpu = dev;
        c.rows = 256; /* two passes a step */
        train_hooks h = {record, NULL, dev ? (void *)&lg : (void *)&lc};
        model *m = NULL;
        train_end how;
        err e = {{0}};
        if (train_run(&c, &h, &m, &how, &e)) {
            printf("FAIL train %s on the %s: %s\n", mixer, dev ? "gpu" : "cpu", e.msg);
            g_fail++;
            return;
        }
        model_free(m);
    }
    double worst = 0;
    for (int i = 0; i < lc.n && i < lg.n; i++) {
        double d = fabs(lc.v[i] - lg.v[i]) / fabs(lc.v[i]);
        if (d > worst) worst = d;
    }
    char what[200];
    snprintf(what, sizeof what,
             "train %s, 12 steps on the cpu and the gpu: losses %.5f -> %.5f, "
             "largest rel diff",
             mixer, lc.n ? lc.v[0] : NAN, lc.n ? lc.v[lc.n - 1] : NAN);
    check(lc.n == 12 && lg.n == 12 && worst < 1e-3, what, worst);
}

int main(void) {
    char why[200];
    if (!gpu_available(why, sizeof why)) {
        printf("test_train_gpu: skipped: %s\n0 passed, 0 failed\n", why);
        return 0;
    }
    test_pass("gdn", "layers=2 hidden=48 heads=2 head_dim=16 vocab=37 seed=1");
    test_pass("deltanet", "layers=2 hidden=32 heads=2 head_dim=16 vocab=29 seed=2");
    test_pass("kaczmarz", "layers=2 hidden=48 heads=3 head_dim=16 vocab=41 seed=3");
    test_pass("gdn", "layers=1 hidden=32 heads=2 head_dim=16 vocab=19 seed=4 use_short_conv=false "
                     "use_gate=false");
    test_pass("kaczmarz", "layers=1 hidden=32 heads=1 head_dim=32 vocab=23 seed=5 conv_bias=true "
                          "allow_neg_eigval=true");
    test_pass("gdn", "layers=2 hidden=128 heads=2 head_dim=64 vocab=256 seed=6");
    test_train("gdn");
    test_train("kaczmarz");
    printf("%d passed, %d failed\n", g_pass, g_fail);
    return g_fail ? 1 : 0;
}
