/* test_engine_gpu.c: the engine's `device gpu` paths against its CPU path, on a GPU machine.
 *
 *   raw lanes    every core with GPU step kernels, stepped in batches on the GPU (engine/raw_run.c)
 *                beside the same lanes on the CPU: every recorded probe, the outputs' norms, the
 *                recall errors and the final state snapshot
 *   models       the GPU-resident stepper (engine/gpu.c over models/model_gpu.h) beside CPU
 *                stepping: logits, top-1, every series (the cores' and families' probes, k, v
 *                and the readback picture "recall"; the GPU path records every series the CPU
 *                path does but the blocks' norms, and no other), the state snapshot; then back
 *                on the CPU (device cpu downloads the state) the next tokens and their series
 *                match too; and CPU steps first, then the GPU (its readback window refilled from
 *                the trace)
 *
 * Plain C with its own pass/fail count (the GPU machine has no cmocka): the last line is
 * "N passed, M failed". */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/opts.h"
#include "engine/engine.h"
#include "engine/interv.h"
#include "kernels/gpu.h"
#include "models/model.h"
#include "scenes/stream.h"

static int g_pass, g_fail;

static void check(int ok, const char *what, double err) {
    printf("%s %s: rel err %.3e\n", ok ? "ok  " : "FAIL", what, err);
    ok ? g_pass++ : g_fail++;
}

/* 1 for the blocks' norms (model_step's alone: the GPU-resident stepper does not compute them) */
static int block_probe(const char *name) {
    int nb;
    const probe_def *bp = model_block_probes(&nb);
    for (int i = 0; i < nb; i++)
        if (!strcmp(bp[i].name, name)) return 1;
    return 0;
}

/* max over series of |a - b| / max(|b|, 1e-3): the relative difference of two traces (a the GPU
 * path's, b the CPU's). Every series of a must be in b; with strict, every series of b in a too,
 * the blocks' norms aside (never compared: skipped). A missing series, another shape, another
 * length or a NaN on one side only give NaN (worst names it). */
static double trace_diff(const trace *a, const trace *b, const char *only, int strict, char *worst,
                         size_t n) {
    double mx = 0;
    worst[0] = '\0';
    if (a->T != b->T) {
        snprintf(worst, n, "%lld tokens against %lld", (long long)a->T, (long long)b->T);
        return NAN;
    }
    for (int s = 0; s < a->nseries; s++)
        if (!block_probe(a->series[s].name) && trace_find(b, a->series[s].name) < 0) {
            snprintf(worst, n, "%s (not on the cpu)", a->series[s].name);
            return NAN;
        }
    for (int s = 0; s < b->nseries; s++) {
        const trace_series *sb = &b->series[s];
        if (only && strcmp(sb->name, only)) continue;
        if (block_probe(sb->name)) continue;
        int k = trace_find(a, sb->name);
        if (k < 0 && !strict) continue;
        if (k < 0) {
            snprintf(worst, n, "%s (not on the gpu)", sb->name);
            return NAN;
        }
        const trace_series *sa = &a->series[k];
        size_t per = (size_t)sb->layers * sb->heads * sb->width;
        if (sa->layers != sb->layers || sa->heads != sb->heads || sa->width != sb->width) {
            snprintf(worst, n, "%s (another shape)", sb->name);
            return NAN;
        }
        for (int64_t t = 0; t < b->T; t++) {
            const float *x = trace_at_lh(a, k, t, 0, 0), *y = trace_at_lh(b, s, t, 0, 0);
            for (size_t i = 0; i < per; i++) {
                if (isnan(y[i]) && isnan(x[i])) continue;
                if (isinf(y[i]) && x[i] == y[i]) continue;
                double d = fabs((double)x[i] - y[i]) / fmax(fabs((double)y[i]), 1e-3);
                if (!(d <= mx)) {
                    mx = d;
                    snprintf(worst, n, "%s", sb->name);
                }
            }
        }
    }
    return mx;
}

static int raw_engine(engine *g, const char *mixer, int device, err *e) {
    char specs[1][64];
    snprintf(specs[0], sizeof specs[0], "%s", mixer);
    raw_stream st;
    if (engine_init(g, e)) return -1;
    if (device == ENGINE_GPU && engine_set_device(g, ENGINE_GPU, e)) return -1;
    return engine_raw_select(g, specs, 1, "decay=0.97", 4, 64, 64, e) ||
           stream_recall(&st, 80, 80, 4, 64, 64, 0.5, 2.0, 7, e) || engine_raw_stream(g, &st, e) ||
           engine_run(g, 0, e);
}

static void test_raw(const char *mixer) {
    engine c, gpu;
    err e = {{0}};
    char what[128], worst[64];
    if (raw_engine(&c, mixer, ENGINE_CPU, &e) || raw_engine(&gpu, mixer, ENGINE_GPU, &e)) {
        snprintf(what, sizeof what, "raw %s: %s", mixer, e.msg);
        check(0, what, NAN);
    } else {
        double d = trace_diff(&gpu.tr, &c.tr, NULL, 0, worst, sizeof worst);
        snprintf(what, sizeof what,
                 "raw %s, 160 tokens on the gpu in batches: every series (worst %s)", mixer, worst);
        check(d < 1e-3 && gpu.tr.T == 160, what, d);
        int ks = trace_find_snapshot(&c.tr, "state"), kg = trace_find_snapshot(&gpu.tr, "state");
        if (ks >= 0 && kg >= 0) {
            const trace_snapshot *a = &gpu.tr.snaps[kg], *b = &c.tr.snaps[ks];
            size_t n = (size_t)b->layers * b->heads * b->rows * b->cols;
            double num = 0, den = 0;
            for (size_t i = 0; i < n; i++)
                num += ((double)a->data[i] - b->data[i]) * ((double)a->data[i] - b->data[i]),
                    den += (double)b->data[i] * b->data[i];
            snprintf(what, sizeof what, "raw %s: the state snapshot after the last token", mixer);
            check(sqrt(num / (den + 1e-30)) < 1e-5, what, sqrt(num / (den + 1e-30)));
        }
    }
    engine_free(&c), engine_free(&gpu);
}

static model *random_model(const char *mixer, const char *args, err *e) {
    char buf[256];
    snprintf(buf, sizeof buf, "%s", args);
    char *argv[16];
    int argc = 0;
    for (char *w = strtok(buf, " "); w && argc < 16; w = strtok(NULL, " ")) argv[argc++] = w;
    opts o;
    model *m = NULL;
    if (opts_parse(&o, argc, argv, e)) return NULL;
    if (model_random(&m, mixer, &o, e)) m = NULL;
    opts_free(&o);
    return m;
}

/* probes: `set probes`'s argument (NULL: the default). */
static int model_engine(engine *g, const char *mixer, const char *args, const char *probes,
                        int device, const int32_t *ids, int T, int first, err *e) {
    if (engine_init(g, e)) return -1;
    model *m = random_model(mixer, args, e);
    if (!m || engine_set_model(g, m, NULL, 0, e) || engine_set_tokens(g, ids, T, e)) return -1;
    if (probes && engine_set_probes(g, probes, e)) return -1;
    if (device == ENGINE_GPU && engine_set_device(g, ENGINE_GPU, e)) return -1;
    return engine_step(g, first, e);
}

static void test_model(const char *mixer, const char *args, const char *probes, int resident) {
    enum { T = 150, FIRST = 100 };
    const int attn = !strcmp(mixer, "softmax") || !strcmp(mixer, "parallax");
    const int readback = !attn && strcmp(mixer, "kata") && strcmp(mixer, "kalman"); /* hT */
    int32_t ids[T];
    for (int i = 0; i < T; i++) ids[i] = (int32_t)((i * 37 + 11) % 200);
    engine c, gpu;
    err e = {{0}};
    char what[200], worst[64];
    if (model_engine(&c, mixer, args, probes, ENGINE_CPU, ids, T, FIRST, &e) ||
        model_engine(&gpu, mixer, args, probes, ENGINE_GPU, ids, T, FIRST, &e)) {
        snprintf(what, sizeof what, "model %s %s: %s", mixer, args, e.msg);
        check(0, what, NAN);
        engine_free(&c), engine_free(&gpu);
        return;
    }
    snprintf(what, sizeof what, "model %s: %s (%s)", mixer,
             resident ? "resident on the gpu" : "steps on the cpu under device gpu",
             gpu.gm ? "resident" : gpu.gm_why);
    check(resident ? gpu.gm != NULL : gpu.gm == NULL && gpu.gm_why[0], what, 0);
    size_t n = (size_t)FIRST * c.model->c.vocab;
    double num = 0, den = 0;
    int top_same = 0;
    for (size_t i = 0; i < n; i++)
        num += ((double)gpu.logits[i] - c.logits[i]) * ((double)gpu.logits[i] - c.logits[i]),
            den += (double)c.logits[i] * c.logits[i];
    for (int t = 0; t < FIRST; t++) top_same += gpu.top[t] == c.top[t];
    snprintf(what, sizeof what, "model %s %s, %d tokens %s: logits", mixer, args, FIRST,
             resident ? "resident on the gpu" : "under device gpu");
    check(sqrt(num / den) < 1e-4 && top_same == FIRST, what, sqrt(num / den));
    double d = trace_diff(&gpu.tr, &c.tr, NULL, resident, worst, sizeof worst);
    snprintf(what, sizeof what, "model %s: every series the gpu records (worst %s)", mixer, worst);
    check(d < 1e-3, what, d);
    {
        /* the state snapshot: the state after the last token (on the GPU path it comes back with
         * the advance's last batch) */
        int ks = trace_find_snapshot(&c.tr, "state"), kg = trace_find_snapshot(&gpu.tr, "state");
        double sd = NAN;
        if (ks >= 0 && kg >= 0 && gpu.tr.snaps[kg].t == c.tr.snaps[ks].t &&
            c.tr.snaps[ks].t == FIRST - 1) {
            const trace_snapshot *a = &gpu.tr.snaps[kg], *b = &c.tr.snaps[ks];
            size_t ns = (size_t)b->layers * b->heads * b->rows * b->cols;
            double sn = 0, sdn = 0;
            for (size_t i = 0; i < ns; i++)
                sn += ((double)a->data[i] - b->data[i]) * ((double)a->data[i] - b->data[i]),
                    sdn += (double)b->data[i] * b->data[i];
            sd = sqrt(sn / (sdn + 1e-30));
        }
        if (attn) { /* a KV cache: neither path keeps a state snapshot or a readback picture */
            sd = ks < 0 && kg < 0 && trace_find(&gpu.tr, "recall") < 0 &&
                         trace_find(&c.tr, "recall") < 0
                     ? 0
                     : 1;
            snprintf(what, sizeof what, "model %s: no state snapshot, no readback (a KV cache)",
                     mixer);
        } else if (probes && !strstr(probes, "state")) { /* a list without it: neither keeps it */
            sd = ks < 0 && kg < 0 ? 0 : 1;
            snprintf(what, sizeof what, "model %s: no state snapshot on either path (not listed)",
                     mixer);
        } else {
            snprintf(what, sizeof what, "model %s: the state snapshot after token %d", mixer,
                     FIRST - 1);
        }
        check(sd < 1e-5, what, sd);
    }
    if (resident) {
        /* k, v and the readback picture each on their own line; the blocks' norms not registered */
        const char *kvr[] = {"k", "v", "recall"};
        for (int i = 0; i < (readback ? 3 : 2); i++) {
            int in_both = trace_find(&gpu.tr, kvr[i]) >= 0 && trace_find(&c.tr, kvr[i]) >= 0;
            d = in_both ? trace_diff(&gpu.tr, &c.tr, kvr[i], 1, worst, sizeof worst) : NAN;
            snprintf(what, sizeof what, "model %s: %s, %d tokens resident on the gpu", mixer,
                     kvr[i], FIRST);
            check(d < 1e-3, what, d);
        }
        int nb, blocks = 0;
        const probe_def *bp = model_block_probes(&nb);
        for (int i = 0; i < nb; i++) blocks += trace_find(&gpu.tr, bp[i].name) >= 0;
        snprintf(what, sizeof what, "model %s: the blocks' norms are not registered on the gpu",
                 mixer);
        check(blocks == 0, what, blocks);
        /* the CPU first, then the GPU: the GPU's window refilled from the trace's k and v */
        engine mix;
        enum { CPU_FIRST = 40 };
        if (model_engine(&mix, mixer, args, probes, ENGINE_CPU, ids, T, CPU_FIRST, &e) ||
            engine_set_device(&mix, ENGINE_GPU, &e) || engine_step(&mix, FIRST - CPU_FIRST, &e)) {
            snprintf(what, sizeof what, "model %s: cpu, then gpu: %s", mixer, e.msg);
            check(0, what, NAN);
        } else {
            /* the blocks' norms were registered on the CPU and stay NaN on the GPU: skipped */
            d = trace_diff(&mix.tr, &c.tr, NULL, 1, worst, sizeof worst);
            snprintf(what, sizeof what,
                     "model %s: %d tokens on the cpu, %d on the gpu: every series (worst %s)",
                     mixer, CPU_FIRST, FIRST - CPU_FIRST, worst);
            check(d < 1e-3 && mix.gm != NULL, what, d);
        }
        engine_free(&mix);
    }
    /* back on the cpu: the model continues from the GPU's state */
    if (engine_set_device(&gpu, ENGINE_CPU, &e) || engine_step(&gpu, T - FIRST, &e) ||
        engine_step(&c, T - FIRST, &e)) {
        snprintf(what, sizeof what, "model %s: device cpu after the gpu: %s", mixer, e.msg);
        check(0, what, NAN);
    } else {
        num = den = 0;
        for (size_t i = n; i < (size_t)T * c.model->c.vocab; i++)
            num += ((double)gpu.logits[i] - c.logits[i]) * ((double)gpu.logits[i] - c.logits[i]),
                den += (double)c.logits[i] * c.logits[i];
        snprintf(what, sizeof what, "model %s: %d more tokens on the cpu after the gpu: logits",
                 mixer, T - FIRST);
        check(sqrt(num / den) < 1e-4, what, sqrt(num / den));
        /* the CPU's recall tracker picks up the keys the GPU recorded */
        d = trace_diff(&gpu.tr, &c.tr, NULL, resident, worst, sizeof worst);
        snprintf(what, sizeof what,
                 "model %s: %d more tokens on the cpu after the gpu: every series (worst %s)",
                 mixer, T - FIRST, worst);
        check(d < 1e-3, what, d);
    }
    engine_free(&c), engine_free(&gpu);
}

/* Interventions under device gpu: the resident stepper is synced before an edit, snapshot or
 * restore and takes the edited state up after, so a run with edits, a snapshot restored and the
 * list replayed after reset gives the CPU run's logits; an ablation steps on the CPU. */
static void test_interventions(void) {
    enum { T = 120 };
    int32_t ids[T];
    for (int i = 0; i < T; i++) ids[i] = (int32_t)((i * 53 + 7) % 200);
    const char *args = "layers=2 hidden=128 heads=2 head_dim=32 vocab=256 seed=8";
    engine c, gpu;
    err e = {{0}};
    char what[200];
    engine *gs[2] = {&c, &gpu};
    int bad = 0;
    for (int k = 0; k < 2 && !bad; k++) {
        engine *g = gs[k];
        bad = model_engine(g, "gdn", args, NULL, k ? ENGINE_GPU : ENGINE_CPU, ids, T, 40, &e) ||
              engine_edit(g, 1, 1, 12, -1, NULL, &e) || engine_step(g, 20, &e) ||
              engine_snapshot(g, "s60", &e) || engine_edit(g, 0, 0, 30, 45, NULL, &e) ||
              engine_step(g, 20, &e) || engine_reset(g, &e) || engine_step(g, 60, &e) ||
              engine_restore(g, "s60", -1, -1, &e) || engine_run(g, 0, &e);
    }
    if (bad) {
        snprintf(what, sizeof what, "interventions on the gpu: %s", e.msg);
        check(0, what, NAN);
    } else {
        size_t n = (size_t)T * c.model->c.vocab;
        double num = 0, den = 0;
        for (size_t i = 0; i < n; i++)
            num += ((double)gpu.logits[i] - c.logits[i]) * ((double)gpu.logits[i] - c.logits[i]),
                den += (double)c.logits[i] * c.logits[i];
        check(gpu.gm != NULL && sqrt(num / den) < 1e-4,
              "model gdn resident: edits, snapshot, restore and the replayed list as on the cpu",
              sqrt(num / den));
    }
    engine_free(&c), engine_free(&gpu);
}

int main(void) {
    char why[256];
    if (!gpu_available(why, sizeof why)) {
        printf("test_engine_gpu: skipped: %s\n0 passed, 0 failed\n", why);
        return 0;
    }
    const char *raw[] = {"gdn", "deltanet", "kaczmarz", "gla", "mamba2", "kalman"};
    for (size_t i = 0; i < sizeof raw / sizeof raw[0]; i++) test_raw(raw[i]);
    test_model("gdn", "layers=2 hidden=128 heads=2 head_dim=32 vocab=256 seed=3", NULL, 1);
    test_model("kaczmarz", "layers=2 hidden=128 heads=2 head_dim=32 vocab=256 seed=4", NULL, 1);
    test_model("deltanet", "layers=2 hidden=128 heads=2 head_dim=32 vocab=256 seed=5", NULL, 1);
    test_model("gla", "layers=2 hidden=128 heads=2 head_dim=32 vocab=256 seed=6", NULL, 1);
    test_model("mamba2", "layers=2 hidden=64 heads=4 head_dim=32 vocab=256 seed=8", NULL, 1);
    test_model("softmax", "layers=2 hidden=128 heads=4 vocab=256 seed=10", NULL, 1);
    test_model("parallax", "layers=2 hidden=128 heads=2 vocab=256 seed=11", NULL, 1);
    test_model("kata", "layers=2 hidden=64 heads=2 vocab=256 seed=12", NULL, 1);
    test_model("kata", "layers=2 hidden=64 heads=2 variant=delta vocab=256 seed=13", NULL, 1);
    test_model("kalman", "layers=2 hidden=64 vocab=256 seed=9", NULL, 1);
    /* a list without the lane-wide probes: they stay on the GPU (model_gpu_out.probes_tail) */
    test_model("kalman", "layers=2 hidden=64 vocab=256 seed=9",
               "lambda_min,lambda_max,write_mean,info_gain_sum,yvar,innovation", 1);
    /* hybrids (fla's attn key): attention layers of other heads among the model's, resident;
     * the trace's series as wide as the widest layer, as on the cpu */
    test_model("gdn",
               "layers=3 hidden=128 heads=2 head_dim=32 vocab=256 seed=7 attn=1 attn_heads=4 "
               "attn_kv_heads=2 attn_window=64",
               NULL, 1);
    test_model("gla",
               "layers=3 hidden=128 heads=2 vocab=256 seed=14 "
               "attn=[{\"layers\":[0],\"num_heads\":8,\"num_kv_heads\":1},"
               "{\"layers\":[2],\"num_heads\":1}]",
               NULL, 1);
    /* a model the resident stepper does not take (attention heads of 512) steps on the cpu under
     * device gpu, the cores on the gpu where they can */
    test_model("gdn",
               "layers=2 hidden=1024 heads=2 head_dim=32 vocab=256 seed=7 attn=1 attn_heads=2",
               NULL, 0);
    test_interventions();
    printf("%d passed, %d failed\n", g_pass, g_fail);
    return g_fail != 0;
}
