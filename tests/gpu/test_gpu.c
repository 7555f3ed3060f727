/* test_gpu.c: every GPU kernel against the CPU reference (make test-gpu).
 *
 * For each mixer with GPU kernels, the same random inputs run through the CPU reference (prefill,
 * float32) and through the GPU step and prefill kernels, with fp32 inputs (tolerance 1e-5
 * relative, tf32 off: the kernels use plain fp32 FMA) and bf16 inputs (tolerance 1e-2: the inputs
 * are rounded to bf16 before the fp32 arithmetic). Prints one line per case and ends with
 * "gpu: N passed, M failed". Exits 0 without running anything when there is no GPU. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/gpu.h"
#include "mixers/mixer.h"

static unsigned long long rng_state = 88172645463325252ull;

static double urand(void) { /* [0, 1) */
    rng_state ^= rng_state << 13, rng_state ^= rng_state >> 7, rng_state ^= rng_state << 17;
    return (double)(rng_state >> 11) / 9007199254740992.0;
}

static double nrand(void) {
    double u = urand() + 1e-12, v = urand();
    return sqrt(-2 * log(u)) * cos(6.283185307179586 * v);
}

static double rel(const float *a, const float *b, size_t n) {
    double num = 0, den = 0;
    for (size_t i = 0; i < n; i++) {
        double d = (double)a[i] - b[i];
        num += d * d, den += (double)b[i] * b[i];
    }
    return den > 0 ? sqrt(num / den) : sqrt(num);
}

static int passed, failed;

static void report(const char *what, double err, double tol) {
    int ok = err < tol && isfinite(err);
    printf("%-44s rel err %.3e  (< %.0e)  %s\n", what, err, tol, ok ? "ok" : "FAIL");
    ok ? passed++ : failed++;
}

/* Inputs in the ranges each mixer meets in a model: unit keys for gdn/deltanet, raw keys with
 * norms spread over two decades for kaczmarz, log-decays in [-1, 0), write strengths in (0, 1). */
static void make_inputs(const mixer_ops *m, const mixer_cfg *c, int T, float **in) {
    int H = c->H;
    for (int i = 0; i < IN_COUNT; i++) in[i] = NULL;
    for (int i = 0; i < m->ninputs; i++) {
        int w = mixer_input_floats(c, m->inputs[i].which);
        size_t n = (size_t)T * H * w;
        float *p = malloc(n * sizeof *p);
        for (size_t j = 0; j < n; j++) p[j] = (float)nrand();
        in[m->inputs[i].which] = p;
    }
    int raw = !strcmp(m->name, "kaczmarz");
    for (int t = 0; t < T; t++)
        for (int h = 0; h < H; h++) {
            size_t th = (size_t)t * H + h;
            if (in[IN_K]) {
                float *k = in[IN_K] + th * c->dk;
                double s = 0;
                for (int d = 0; d < c->dk; d++) s += (double)k[d] * k[d];
                double target = raw ? pow(10.0, -1.0 + 2.0 * urand()) : 1.0;
                for (int d = 0; d < c->dk; d++) k[d] = (float)(k[d] / sqrt(s) * target);
            }
            if (in[IN_G]) in[IN_G][th] = (float)(-urand() * 0.5);
            if (in[IN_BETA]) in[IN_BETA][th] = (float)(0.05 + 0.9 * urand());
        }
}

static void test_mixer(const mixer_ops *m, int T, int H, int dk, int dv, int chunk) {
    opts o = {0};
    mixer_cfg c;
    err e = {{0}};
    if (mixer_configure(m, &c, H, dk, dv, &o, &e)) {
        printf("%s: %s\n", m->name, e.msg);
        failed++;
        return;
    }
    c.chunk = chunk;
    c.max_t = T;
    float *in[IN_COUNT];
    make_inputs(m, &c, T, in);
    mixer_seq seq = {.T = T};
    for (int i = 0; i < IN_COUNT; i++) seq.in[i] = in[i];
    size_t sf = m->state_floats(&c), on = (size_t)T * H * dv;
    float *s0 = malloc(sf * 4), *s_cpu = malloc(sf * 4), *s_gpu = malloc(sf * 4);
    float *o_cpu = malloc(on * 4), *o_gpu = malloc(on * 4);
    m->state_init(&c, s0);
    for (size_t i = 0; i < sf; i++) s0[i] += (float)(0.1 * nrand()); /* a non-zero initial state */
    memcpy(s_cpu, s0, sf * 4);
    m->prefill(&c, s_cpu, &seq, 0, o_cpu);
    const char *mode_name[2] = {"step", "prefill"}, *prec_name[2] = {"fp32", "bf16"};
    for (int mode = GPU_STEP; mode <= GPU_PREFILL; mode++)
        for (int prec = GPU_F32; prec <= GPU_BF16; prec++) {
            char what[128];
            snprintf(what, sizeof what, "%s %s %s T=%d H=%d dk=%d dv=%d C=%d", m->name,
                     mode_name[mode], prec_name[prec], T, H, dk, dv, chunk);
            memcpy(s_gpu, s0, sf * 4);
            if (gpu_mixer_run(m, &c, s_gpu, &seq, 0, o_gpu, NULL, mode, prec, &e)) {
                printf("%-44s %s  FAIL\n", what, e.msg);
                failed++;
                continue;
            }
            double tol = prec == GPU_F32 ? 1e-5 : 1e-2;
            double eo = rel(o_gpu, o_cpu, on), es = rel(s_gpu, s_cpu, sf);
            report(what, eo > es ? eo : es, tol);
        }
    for (int i = 0; i < IN_COUNT; i++) free(in[i]);
    free(s0), free(s_cpu), free(s_gpu), free(o_cpu), free(o_gpu);
}

/* cuBLAS dense layer against a double-precision product. */
static void test_linear(int T, int out, int in) {
    float *x = malloc((size_t)T * in * 4), *W = malloc((size_t)out * in * 4), *b = malloc(out * 4);
    float *y = malloc((size_t)T * out * 4), *ref = malloc((size_t)T * out * 4);
    for (int i = 0; i < T * in; i++) x[i] = (float)nrand();
    for (int i = 0; i < out * in; i++) W[i] = (float)(nrand() * 0.05);
    for (int i = 0; i < out; i++) b[i] = (float)nrand();
    for (int t = 0; t < T; t++)
        for (int o = 0; o < out; o++) {
            double acc = b[o];
            for (int i = 0; i < in; i++) acc += (double)x[(size_t)t * in + i] * W[(size_t)o * in + i];
            ref[(size_t)t * out + o] = (float)acc;
        }
    err e = {{0}};
    char what[96];
    snprintf(what, sizeof what, "cuBLAS linear T=%d out=%d in=%d fp32", T, out, in);
    if (gpu_linear(y, x, W, b, T, out, in, &e)) {
        printf("%-44s %s  FAIL\n", what, e.msg);
        failed++;
    } else {
        report(what, rel(y, ref, (size_t)T * out), 1e-5);
    }
    free(x), free(W), free(b), free(y), free(ref);
}

int main(void) {
    char why[256];
    if (!gpu_available(why, sizeof why)) {
        printf("gpu: skipped: %s\n", why);
        return 0;
    }
    printf("gpu: %s\n", why);
    test_linear(1, 256, 64);
    test_linear(77, 1024, 256);
    test_linear(300, 64, 4096);
    for (int i = 0; i < mixer_count; i++) {
        const mixer_ops *m = mixer_all[i];
        if (!m || !gpu_mixer_supported(m, GPU_PREFILL)) {
            if (m) printf("%-44s no GPU kernels yet\n", m->name);
            continue;
        }
        test_mixer(m, 200, 2, 16, 24, 64);
        test_mixer(m, 65, 2, 16, 24, 16);
        test_mixer(m, 300, 4, 64, 64, 32);
        test_mixer(m, 257, 2, 128, 128, 64);
    }
    printf("gpu: %d passed, %d failed\n", passed, failed);
    return failed ? 1 : 0;
}
