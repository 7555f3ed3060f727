/* bench_gpu.c: medians of mixscope's GPU kernels at B = 1, H = 16, d = 128, bf16 inputs, beside
 * their peers timed in the same run by bench/gpu/peers.py (PEER_FILE: flash-linear-attention's
 * chunk_gated_delta_rule, chunk_delta_rule, fused_recurrent_gated_delta_rule and
 * parallel_parallax from the pinned snapshot, and PyTorch SDPA, each replayed as a CUDA graph; no
 * peer figure is typed in here). Each row also states the kernel's floor: the fewest
 * bytes it must move over the measured copy bandwidth; the compute-bound rows (attention, kata,
 * kalman) also give their achieved arithmetic rate. The chunked delta rows add gdn at 4 heads (a
 * 16-head layer split over four GPUs, beside fla at 4 heads), where the state pass runs in
 * segments of time, and gdn with slow gates, where its segments cannot warm up.
 *
 * The step section (MIXSCOPE_BENCH_ONLY=step selects it alone) steps whole random models resident
 * on the GPU (models/model_gpu.h): a 4-layer hidden-1024 model of every family (Gated DeltaNet,
 * DeltaNet, Kaczmarz, GLA, transformer, Parallax, KATA m1, Kalman, Mamba2), the 340M-class Gated
 * DeltaNet and fla's default GatedDeltaNetConfig (the 1.3B class), tokens/s and ms/token per call
 * size, beside the per-token floor (fp32 weights read once + the
 * states read and written, over the measured copy bandwidth) and the old path (model_step with
 * m->gpu = 1); calls that also bring back the keys, values and readback errors of every token
 * (model_gpu_step_ex); and the engine end to end (engine_run under device gpu with the default
 * probes: every probe, k, v, the readback picture and the state snapshot recorded).
 *
 * MIXSCOPE_BENCH_ONLY selects one section: delta, decode, attn, kata (KATA m1 chunked and flash,
 * DeltaKATA's chunked form beside its step), kata-sweep (KATA m1 at 16K over chunk lengths and
 * the fp32 state pass's shared-memory caps, DeltaKATA at 4K over chunk lengths), kalman, step.
 * With MIXSCOPE_KATA_PROFILE / MIXSCOPE_KATA_DELTA_PROFILE the KATA passes print their times;
 * MIXSCOPE_KATA_CL sets the tensor-core path's chunk, MIXSCOPE_KATA_TC=0 and
 * MIXSCOPE_KATA_WGMMA=0 time its fallbacks (fp32 kernels, mma.sync passes), MIXSCOPE_KATA_STATE=0
 * or 4 and MIXSCOPE_KATA_READ=128 the wgmma passes the overlapped ones replaced, and
 * MIXSCOPE_KATA_LOCAL=0 or 1 the local pass on mma.sync or wgmma's simple form instead of the
 * pipelined wgmma form
 * (scripts/gpu-kata-check.sh), MIXSCOPE_DECODE a decode kernel. */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "core/opts.h"
#include "engine/engine.h"
#include "kernels/gpu.h"
#include "kernels/gpu_bench.h"
#include "models/model.h"
#include "models/model_gpu.h"

#define H 16
#define D 128

enum { MODE_GDN, MODE_KACZ, MODE_DELTANET };

typedef struct delta_ctx {
    int B, T, mode;
    int h; /* heads the prefill runs (0: H), over buffers laid out for H */
    void *q, *k, *v, *scratch;
    float *g, *beta, *state, *o;
    void *st; /* the decode rows' stream (graph-captured) */
} delta_ctx;

static int run_prefill(void *p, err *e) {
    delta_ctx *c = p;
    const int h = c->h ? c->h : H;
    if (c->mode == MODE_KACZ)
        return gpu_kaczmarz_prefill(c->B, c->T, h, D, D, 64, 0.0883883f, 1, 1e-6f, c->q, c->k, c->v,
                                    c->g, c->beta, c->state, c->o, c->scratch, NULL, e);
    return gpu_delta_prefill(c->B, c->T, h, D, D, 64, 0.0883883f, 1, c->q, c->k, c->v,
                             c->mode == MODE_DELTANET ? NULL : c->g, c->beta, c->state, c->o,
                             c->scratch, NULL, e);
}

static int run_step(void *p, err *e) {
    delta_ctx *c = p;
    return gpu_delta_step(c->B, H, D, D, 0.0883883f, 1, c->q, c->k, c->v, c->g, c->beta, c->state,
                          c->o, c->st, e);
}

static int run_empty(void *p, err *e) {
    return gpu_bench_empty(p, e);
}

/* The peer's median for (key, param) from PEER_FILE ("KEY PARAM MS" lines of peers.py), or -1. */
static double peer_ms(const char *key, int param) {
    const char *f = getenv("PEER_FILE");
    FILE *fp = f ? fopen(f, "r") : NULL;
    double ms = -1;
    char line[512], k[64];
    int t;
    double v;
    while (fp && fgets(line, sizeof line, fp))
        if (sscanf(line, "%63s %d %lf", k, &t, &v) == 3 && !strcmp(k, key) && t == param) ms = v;
    if (fp) fclose(fp);
    return ms;
}

/* peers.py's '#' lines: what the peers were. */
static void peer_header(void) {
    const char *f = getenv("PEER_FILE");
    FILE *fp = f ? fopen(f, "r") : NULL;
    char line[512];
    int any = 0;
    while (fp && fgets(line, sizeof line, fp))
        if (line[0] == '#') printf("%s", line + 2), any = 1;
    if (fp) fclose(fp);
    if (!any)
        printf("peers: none measured (PEER_FILE unset or empty: run through bench/gpu/run.sh)\n");
}

static void *dalloc(size_t bytes, err *e) {
    void *p = gpu_malloc(bytes, e);
    if (!p) {
        fprintf(stderr, "bench-gpu: %s\n", e->msg);
        exit(1);
    }
    return p;
}

static int setup(delta_ctx *c, int B, int T, int mode, int prefill, err *e) {
    memset(c, 0, sizeof *c);
    c->B = B, c->T = T, c->mode = mode;
    size_t nk = (size_t)B * T * H * D, nh = (size_t)B * T * H;
    c->q = dalloc(nk * 2, e), c->k = dalloc(nk * 2, e), c->v = dalloc(nk * 2, e);
    c->g = dalloc(nh * 4, e), c->beta = dalloc(nh * 4, e);
    c->state = dalloc((size_t)B * H * D * D * 4, e), c->o = dalloc(nk * 4, e);
    if (prefill) c->scratch = dalloc(gpu_kaczmarz_scratch_bytes(B, T, H, D, D, 64), e);
    /* |k| ~ 1 for unit-like keys; g in [-0.5, 0); beta in (0.05, 0.95) */
    return gpu_fill_uniform(c->q, nk, 1, 0.15f, 0, 1, e) ||
           gpu_fill_uniform(c->k, nk, 1, 0.15f, 0, 2, e) ||
           gpu_fill_uniform(c->v, nk, 1, 1.0f, 0, 3, e) ||
           gpu_fill_uniform(c->g, nh, 0, 0.25f, -0.25f, 4, e) ||
           gpu_fill_uniform(c->beta, nh, 0, 0.45f, 0.5f, 5, e) ||
           gpu_fill_uniform(c->state, (size_t)B * H * D * D, 0, 0.0f, 0.0f, 6, e);
}

static void teardown(delta_ctx *c) {
    gpu_free(c->q), gpu_free(c->k), gpu_free(c->v), gpu_free(c->g), gpu_free(c->beta);
    gpu_free(c->state), gpu_free(c->o), gpu_free(c->scratch);
}

/* One row of the chunked prefill: mode's prefill at B sequences, T tokens and `heads` heads (over
 * buffers laid out for H), its gates slow (g in [-0.02, 0)) or as setup makes them, beside the
 * peer's median under peer_key (NULL: none) and, at H heads, SDPA's at T; with the bytes floor
 * (read q, k, v in bf16, g, beta; write o in fp32) over the copy bandwidth bw and the compute
 * floor over the matrix rate mm. -1 when the inputs cannot be set up. */
static int delta_row(const char *name, int B, int T, int mode, int heads, int slow,
                     const char *peer_key, double bw, double mm, err *e) {
    delta_ctx c;
    if (setup(&c, B, T, mode, 1, e)) return -1;
    if (slow && gpu_fill_uniform(c.g, (size_t)B * T * H, 0, 0.01f, -0.01f, 4, e)) {
        teardown(&c);
        return -1;
    }
    c.h = heads;
    double ms;
    if (gpu_time_median(run_prefill, &c, 2, 20, &ms, e)) {
        printf("%s\n", e->msg);
        teardown(&c);
        return 0;
    }
    teardown(&c);
    const double bytes = (double)B * T * heads * (3.0 * D * 2 + 8 + D * 4);
    /* compute floor: per chunk of C = 64 and head, K K^T, Q K^T, W, U and P Delta are C^2 d
     * multiply-adds each, W S, Q S and K^T Delta C d^2 each */
    const double flops = 2.0 * B * T * heads * (5.0 * 64 * D + 3.0 * D * D);
    const double peer = peer_key ? peer_ms(peer_key, T) : -1;
    const double sd = heads == H && B == 1 ? peer_ms("sdpa", T) : -1;
    char ps[32] = "-", xs[32] = "-", ss[32] = "-";
    if (peer > 0)
        snprintf(ps, sizeof ps, "%.3f", peer), snprintf(xs, sizeof xs, "%.2fx", peer / ms);
    if (sd > 0) snprintf(ss, sizeof ss, "%.3f", sd);
    printf("%-28s %10.3f %10s %10s %8s %10.3f   compute floor %.3f ms, %.1fx the bytes floor\n",
           name, ms, ps, ss, xs, bytes / (bw * 1e9) * 1e3, mm > 0 ? flops / (mm * 1e12) * 1e3 : 0.0,
           ms / (bytes / (bw * 1e9) * 1e3));
    return 0;
}

/* ---- softmax / parallax forward, kata, kalman ---------------------------------------------- */

typedef struct other_ctx {
    int T, plx, S, scan, chunk; /* chunk: kata's (0: 32) */
    int B;                      /* sequences (0: 1) */
    void *q, *k, *v, *r, *scratch;
    float *state, *o;
} other_ctx;

static int run_attn(void *p, err *e) {
    other_ctx *c = p;
    return gpu_attn_forward(1, c->T, c->T, H, D, D, 0, 0, 0.0883883f, 1, c->q, c->plx ? c->r : NULL,
                            c->k, c->v, c->o, NULL, e);
}

#define KATA_VARIANT_M1 0 /* mixers/kata.h: KATA_M1 */

static int run_kata_chunked(void *p, err *e) {
    other_ctx *c = p;
    return gpu_kata_chunked(1, c->T, H, D, D, KATA_VARIANT_M1, 1, c->chunk ? c->chunk : 32, 1.0f,
                            1e-6f, 1, c->q, c->k, c->v, c->state, c->o, c->scratch, NULL, e);
}

static int run_kata_flash(void *p, err *e) {
    other_ctx *c = p;
    return gpu_kata_flash(1, c->T, H, D, D, KATA_VARIANT_M1, 1, 1.0f, 1e-6f, 1, c->q, c->k, c->v,
                          NULL, c->o, c->scratch, NULL, e);
}

static int run_kalman(void *p, err *e) {
    other_ctx *c = p;
    return (c->scan ? gpu_kalman_scan : gpu_kalman_walk)(c->B ? c->B : 1, c->T, H, D, c->S, 1.0f, 0,
                                                         1, c->q, c->k, c->v, NULL, NULL, NULL,
                                                         c->state, c->o, NULL, e);
}

static void other_free(other_ctx *c) {
    gpu_free(c->q), gpu_free(c->k), gpu_free(c->v), gpu_free(c->r), gpu_free(c->scratch);
    gpu_free(c->state), gpu_free(c->o);
}

static void row(const char *name, double ms, double peer, double sd, double floor_ms,
                double tflops) {
    char p[32] = "-", s[32] = "-", x[32] = "-";
    if (peer > 0) snprintf(p, sizeof p, "%.2f", peer), snprintf(x, sizeof x, "%.2fx", peer / ms);
    if (sd > 0) snprintf(s, sizeof s, "%.3f", sd);
    printf("%-28s %10.3f %10s %10s %8s %10.3f", name, ms, p, s, x, floor_ms);
    if (tflops > 0) printf("   %.1f TFLOP/s", tflops);
    if (sd > 0) printf("   %.2fx SDPA", ms / sd);
    printf("\n");
}

/* Relative error ||a - b|| / ||b|| of two device arrays of n floats. */
static double dev_rel(const float *a, const float *b, size_t n, err *e) {
    float *ha = malloc(n * 4), *hb = malloc(n * 4);
    double num = 0, den = 0;
    if (ha && hb && !gpu_copy_to_host(ha, a, n * 4, e) && !gpu_copy_to_host(hb, b, n * 4, e))
        for (size_t i = 0; i < n; i++) {
            double d = (double)ha[i] - hb[i];
            num += d * d, den += (double)hb[i] * hb[i];
        }
    else
        num = NAN;
    free(ha), free(hb);
    return den > 0 ? sqrt(num / den) : sqrt(num);
}

static void bench_attention(double bw, err *e) {
    const int Ts[2] = {4096, 16384};
    for (int plx = 0; plx <= 1; plx++)
        for (int i = 0; i < 2; i++) {
            other_ctx c = {.T = Ts[i], .plx = plx};
            size_t n = (size_t)Ts[i] * H * D;
            c.q = dalloc(n * 2, e), c.k = dalloc(n * 2, e), c.v = dalloc(n * 2, e);
            c.r = dalloc(n * 2, e), c.o = dalloc(n * 4, e);
            double ms;
            if (gpu_fill_uniform(c.q, n, 1, 1.0f, 0, 11, e) ||
                gpu_fill_uniform(c.k, n, 1, 1.0f, 0, 12, e) ||
                gpu_fill_uniform(c.v, n, 1, 1.0f, 0, 13, e) ||
                gpu_fill_uniform(c.r, n, 1, 0.1f, 0, 14, e) ||
                gpu_time_median(run_attn, &c, 2, 20, &ms, e)) {
                printf("%s\n", e->msg);
                other_free(&c);
                continue;
            }
            /* floor: read q, k, v (and r), write o (fp32); FLOPs of the causal half: 4 d (softmax)
             * or 8 d (parallax) per query-key pair */
            double bytes = (double)n * ((plx ? 4 : 3) * 2 + 4);
            double flops = (plx ? 8.0 : 4.0) * D * H * (double)Ts[i] * (Ts[i] + 1) / 2;
            char name[64];
            snprintf(name, sizeof name, "%s forward T=%dK", plx ? "parallax" : "softmax",
                     Ts[i] / 1024);
            row(name, ms, plx ? peer_ms("fla_parallax", Ts[i]) : -1, peer_ms("sdpa", Ts[i]),
                bytes / (bw * 1e9) * 1e3, flops / (ms * 1e-3) / 1e12);
            other_free(&c);
        }
}

/* kata m1's inputs for T tokens (bf16 q, k of |x| about 1, v), its state [S | z], output and
 * scratch; the state is left for each run to zero. */
static int kata_m1_setup(other_ctx *c, int T, err *e) {
    const size_t n = (size_t)T * H * D, ns = (size_t)H * (D * (D + 1) / 2) * (D + 1);
    memset(c, 0, sizeof *c);
    c->T = T;
    c->q = dalloc(n * 2, e), c->k = dalloc(n * 2, e), c->v = dalloc(n * 2, e);
    c->o = dalloc(n * 4, e), c->state = dalloc(ns * 4, e);
    c->scratch = dalloc(gpu_kata_scratch_bytes(1, T, H, D, D, KATA_VARIANT_M1, 1, 1), e);
    return gpu_fill_uniform(c->q, n, 1, 0.15f, 0, 21, e) ||
           gpu_fill_uniform(c->k, n, 1, 0.15f, 0, 22, e) ||
           gpu_fill_uniform(c->v, n, 1, 1.0f, 0, 23, e);
}

/* MIXSCOPE_BENCH_ONLY=kata-sweep: kata m1 chunked at 16K for each chunk length and shared-memory
 * cap of the fp32 kernels' state pass (what its time depends on; MIXSCOPE_KATA_TC=0 while it
 * runs: bf16 inputs would take the tensor-core path, which has neither knob) */
static void bench_kata_sweep(err *e) {
    const size_t ns = (size_t)H * (D * (D + 1) / 2) * (D + 1);
    other_ctx c;
    if (kata_m1_setup(&c, 16384, e)) {
        printf("%s\n", e->msg);
        other_free(&c);
        return;
    }
    static const char *const caps[4] = {"50", "100", "150", "220"};
    setenv("MIXSCOPE_KATA_TC", "0", 1);
    for (int ci = 0; ci < 3; ci++)
        for (int k = 0; k < 4; k++) {
            double ms;
            c.chunk = 16 << ci;
            setenv("MIXSCOPE_KATA_SMEM_KB", caps[k], 1);
            if (gpu_fill_uniform(c.state, ns, 0, 0.0f, 0.0f, 24, e) ||
                gpu_time_median(run_kata_chunked, &c, 1, 3, &ms, e))
                printf("chunk %d cap %s KB: %s\n", c.chunk, caps[k], e->msg);
            else
                printf("kata m1 chunked T=16K chunk %2d smem cap %3s KB: %8.3f ms\n", c.chunk,
                       caps[k], ms);
        }
    unsetenv("MIXSCOPE_KATA_SMEM_KB");
    unsetenv("MIXSCOPE_KATA_TC");
    other_free(&c);
}

static void bench_others(double bw, err *e) {
    /* kata m1 (D = d (d+1)/2 = 8256 features), chunk 32: the chunked state form at 128K; the
     * flash form at 4K, checked against the chunked form from a zero state */
    {
        const int D_feat = D * (D + 1) / 2;
        const int Tk[2] = {4096, 131072};
        for (int i = 0; i < 2; i++) {
            other_ctx c;
            size_t n = (size_t)Tk[i] * H * D, ns = (size_t)H * D_feat * (D + 1);
            double ms;
            if (kata_m1_setup(&c, Tk[i], e) ||
                gpu_fill_uniform(c.state, ns, 0, 0.0f, 0.0f, 24, e) ||
                gpu_time_median(run_kata_chunked, &c, 1, i ? 3 : 10, &ms, e)) {
                printf("%s\n", e->msg);
                other_free(&c);
                continue;
            }
            /* floor: q, k, v (bf16) in, o (fp32) out, the state in and out once; FLOPs: the
             * state read psi(Q) S and write psi(K)^T V, 2 D dv each per token and head */
            double bytes = (double)n * (3 * 2 + 4) + 2.0 * ns * 4;
            double flops = 4.0 * D_feat * D * H * (double)Tk[i];
            char name[64];
            snprintf(name, sizeof name, "kata m1 chunked T=%dK", Tk[i] / 1024);
            row(name, ms, -1, -1, bytes / (bw * 1e9) * 1e3, flops / (ms * 1e-3) / 1e12);
            if (i == 0) {
                float *chunked = c.o;
                c.o = dalloc(n * 4, e);
                if (gpu_fill_uniform(c.state, ns, 0, 0.0f, 0.0f, 24, e) ||
                    run_kata_chunked(&c, e) || gpu_sync(e)) {
                    printf("%s\n", e->msg);
                } else {
                    float *tmp = c.o;
                    c.o = chunked, chunked = tmp; /* c.o: chunked from a zero state */
                    if (gpu_time_median(run_kata_flash, &c, 1, 5, &ms, e) || gpu_sync(e)) {
                        printf("%s\n", e->msg);
                    } else {
                        double fl = 2.0 * (2.0 * D + D) * H * (double)Tk[i] * (Tk[i] + 1) / 2;
                        row("kata m1 flash T=4K", ms, -1, -1, bytes / (bw * 1e9) * 1e3,
                            fl / (ms * 1e-3) / 1e12);
                        printf("  kata m1 flash vs chunked at T=4K: rel err %.2e\n",
                               dev_rel(c.o, chunked, n, e));
                    }
                }
                gpu_free(chunked);
            }
            other_free(&c);
        }
    }
}

/* DeltaKATA (M1 features, D = 8256): the chunked form (chunk 64) on 4K and 16K tokens, bf16 and
 * fp32 inputs, beside the step it replaced as the prefill (gpu_kata_delta_step token by token, 256
 * tokens), tokens/s; the chunked form's output on the step's 256 tokens against the step's. */
typedef struct kdelta_ctx {
    int T, C, f32; /* C: chunk (0: 64); f32: the fp32 inputs qf, kf, vf (else bf16 q, k, v) */
    void *q, *k, *v, *qf, *kf, *vf;
    float *beta, *state, *o;
    void *scratch, *step_scratch;
} kdelta_ctx;

static int run_kdelta_chunked(void *p, err *e) {
    kdelta_ctx *c = p;
    return gpu_kata_delta_chunked(
        c->T, H, D, D, 1, c->C ? c->C : 64, 1.0f, !c->f32, c->f32 ? c->qf : c->q,
        c->f32 ? c->kf : c->k, c->f32 ? c->vf : c->v, c->beta, c->state, c->o, c->scratch, NULL, e);
}

static int run_kdelta_steps(void *p, err *e) {
    kdelta_ctx *c = p;
    const float *q = c->qf, *k = c->kf, *v = c->vf;
    for (int t = 0; t < c->T; t++)
        if (gpu_kata_delta_step(H, D, D, 1, 1.0f, q + (size_t)t * H * D, k + (size_t)t * H * D,
                                v + (size_t)t * H * D, c->beta + (size_t)t * H, c->state,
                                c->o + (size_t)t * H * D, NULL, c->step_scratch, NULL, e))
            return -1;
    return 0;
}

static void bench_kata_delta(double bw, err *e) {
    const int Tmax = 16384, Dfeat = D * (D + 1) / 2, Tstep = 256;
    kdelta_ctx c = {.T = Tmax};
    const size_t n = (size_t)Tmax * H * D, ns = (size_t)H * Dfeat * (D + 1);
    c.q = dalloc(n * 2, e), c.k = dalloc(n * 2, e), c.v = dalloc(n * 2, e);
    c.qf = dalloc(n * 4, e), c.kf = dalloc(n * 4, e), c.vf = dalloc(n * 4, e);
    c.beta = dalloc((size_t)Tmax * H * 4, e), c.o = dalloc(n * 4, e), c.state = dalloc(ns * 4, e);
    c.scratch = dalloc(gpu_kata_delta_chunked_scratch_bytes(H, D, D, 1, 64), e);
    c.step_scratch = dalloc(gpu_kata_delta_scratch_bytes(H, D, D, 1), e);
    float *o_step = dalloc((size_t)Tstep * H * D * 4, e);
    /* |k| about 1 (the lifted keys near unit norm, as DeltaKATA's L2 qk-norm makes them) */
    if (!o_step || !c.step_scratch || gpu_fill_uniform(c.q, n, 1, 0.15f, 0, 41, e) ||
        gpu_fill_uniform(c.k, n, 1, 0.15f, 0, 42, e) ||
        gpu_fill_uniform(c.v, n, 1, 1.0f, 0, 43, e) ||
        gpu_fill_uniform(c.qf, n, 0, 0.15f, 0, 41, e) ||
        gpu_fill_uniform(c.kf, n, 0, 0.15f, 0, 42, e) ||
        gpu_fill_uniform(c.vf, n, 0, 1.0f, 0, 43, e) ||
        gpu_fill_uniform(c.beta, (size_t)Tmax * H, 0, 0.45f, 0.5f, 44, e) ||
        gpu_kata_delta_prepare(H, D, D, 1, c.step_scratch, NULL, e)) {
        printf("%s\n", e->msg);
        goto done;
    }
    if (getenv("MIXSCOPE_KATA_DELTA_SWEEP"))
        for (int C = 16; C <= 64; C *= 2) {
            double ms;
            c.T = 4096, c.C = C;
            if (gpu_fill_uniform(c.state, ns, 0, 0.0f, 0.0f, 45, e) ||
                gpu_time_median(run_kdelta_chunked, &c, 1, 3, &ms, e))
                printf("%s\n", e->msg);
            else
                printf("kata delta chunked T=4K chunk %d: %.3f ms\n", C, ms);
            c.C = 0;
        }
    /* floor: FLOPs of R = Psi_K S, P = Psi_Q S and S += Psi_K^T U, 2 D dv each a token and head */
    for (int pass = 0; pass < 3; pass++) {
        static const int Ts[3] = {4096, 16384, 16384};
        double ms;
        c.T = Ts[pass], c.f32 = pass == 2;
        if (gpu_fill_uniform(c.state, ns, 0, 0.0f, 0.0f, 45, e) ||
            gpu_time_median(run_kdelta_chunked, &c, 1, 3, &ms, e)) {
            printf("%s\n", e->msg);
            goto done;
        }
        const double flops = 6.0 * Dfeat * D * H * (double)c.T;
        const double bytes = (double)c.T * H * D * (3 * (pass == 2 ? 4 : 2) + 4) + 2.0 * ns * 4;
        char name[64];
        snprintf(name, sizeof name, "kata delta chunked%s T=%dK", pass == 2 ? " fp32" : "",
                 c.T / 1024);
        row(name, ms, -1, -1, bytes / (bw * 1e9) * 1e3, flops / (ms * 1e-3) / 1e12);
        printf("  %.0f tokens/s\n", c.T / (ms * 1e-3));
    }
    /* the step token by token on Tstep tokens from a zero state (timed once: its output is the
     * reference), then the chunked form's from the same state against it, then its timing */
    c.T = Tstep, c.f32 = 1;
    float *o_chunk = c.o;
    double ms_step, ms_chunk;
    c.o = o_step;
    int rc = gpu_fill_uniform(c.state, ns, 0, 0.0f, 0.0f, 45, e) ||
             gpu_time_median(run_kdelta_steps, &c, 0, 1, &ms_step, e);
    c.o = o_chunk;
    if (rc || gpu_fill_uniform(c.state, ns, 0, 0.0f, 0.0f, 45, e) || run_kdelta_chunked(&c, e) ||
        gpu_sync(e)) {
        printf("%s\n", e->msg);
        goto done;
    }
    const double rel_err = dev_rel(c.o, o_step, (size_t)Tstep * H * D, e);
    if (gpu_time_median(run_kdelta_chunked, &c, 1, 5, &ms_chunk, e)) {
        printf("%s\n", e->msg);
        goto done;
    }
    printf("kata delta, %d tokens: the step token by token %.1f ms (%.0f tokens/s); chunked fp32 "
           "%.3f ms (%.0f tokens/s, %.0fx)\n",
           Tstep, ms_step, Tstep / (ms_step * 1e-3), ms_chunk, Tstep / (ms_chunk * 1e-3),
           ms_step / ms_chunk);
    printf("  chunked vs step, %d tokens fp32 from a zero state: rel err %.2e\n", Tstep, rel_err);
done:
    gpu_free(c.q), gpu_free(c.k), gpu_free(c.v), gpu_free(c.qf), gpu_free(c.kf), gpu_free(c.vf);
    gpu_free(c.beta), gpu_free(c.o), gpu_free(c.state), gpu_free(c.scratch);
    gpu_free(c.step_scratch), gpu_free(o_step);
}

static void bench_kalman(double bw, err *e) {
    /* kalman at 64K: H = 16 heads of M = 128 channels, S = 16 (the KLA default d_state) and
     * S = 128 states per channel; then the scan over 4 sequences of 16K at S = 16 (the same
     * lane-steps, four times the lanes: a batched prefill); lambda_v = 1, default a, p */
    const int Ss[3] = {16, 128, 16}, Bs[3] = {1, 1, 4};
    for (int i = 0; i < 3; i++)
        for (int scan = Bs[i] > 1; scan <= 1; scan++) {
            const int B = Bs[i], T = 65536 / B, S = Ss[i];
            other_ctx c = {.T = T, .S = S, .scan = scan, .B = B};
            size_t nk = (size_t)B * T * H * S, nv = (size_t)B * T * H * D;
            size_t lanes = (size_t)B * H * D * S;
            c.q = dalloc(nk * 2, e), c.k = dalloc(nk * 2, e), c.v = dalloc(nv * 2, e);
            c.o = dalloc(nv * 4, e), c.state = dalloc(2 * lanes * 4, e);
            double ms;
            if (gpu_fill_uniform(c.q, nk, 1, 0.3f, 0, 31, e) ||
                gpu_fill_uniform(c.k, nk, 1, 0.3f, 0, 32, e) ||
                gpu_fill_uniform(c.v, nv, 1, 1.0f, 0, 33, e) ||
                gpu_fill_uniform(c.state, lanes, 0, 0.0f, 1.0f, 34, e) ||
                gpu_fill_uniform(c.state + lanes, lanes, 0, 0.0f, 0.0f, 35, e) ||
                gpu_time_median(run_kalman, &c, 1, 5, &ms, e)) {
                printf("%s\n", e->msg);
                other_free(&c);
                continue;
            }
            /* floor: q, k (bf16 [T, H, S]), v (bf16 [T, H, M]) in, o (fp32) out, state in and out;
             * about 30 FLOPs per lane and token (the filter, the readout; the scan composes too) */
            double bytes = (double)nk * 4 + (double)nv * (2 + 4) + 4.0 * lanes * 4;
            char name[64];
            if (B > 1)
                snprintf(name, sizeof name, "kalman %s B=%d T=%dK S=%d", scan ? "scan" : "walk", B,
                         T / 1024, S);
            else
                snprintf(name, sizeof name, "kalman %s T=64K S=%d", scan ? "scan" : "walk", S);
            row(name, ms, -1, -1, bytes / (bw * 1e9) * 1e3, 0);
            printf("  %.0f%% of copy bandwidth; %.2f G lane-steps/s\n",
                   100.0 * bytes / (ms * 1e-3) / (bw * 1e9), (double)lanes * T / (ms * 1e-3) / 1e9);
            /* compute floor: a lane-step needs at least 8 fp32 instructions (the division-free
             * step and the readout of kernels/kalman.cu) and one reciprocal; H200 (132 SMs at
             * 1.98 GHz): 128 fp32 lanes per SM = 33.5 T instructions/s, 16 reciprocals per SM and
             * clock = 4.18 T/s. The copy-bandwidth target (50%) sits below this floor at S = 16. */
            const double steps = (double)lanes * T;
            const double cfloor = fmax(steps * 8 / 33.5e12, steps / 4.18e12) * 1e3;
            printf("  compute floor %.2f ms (8 fp32 instructions + 1 reciprocal per lane-step): "
                   "%.0f%% of it\n",
                   cfloor, 100.0 * cfloor / ms);
            other_free(&c);
        }
}

/* ---- whole models stepped resident on the GPU (models/model_gpu.h) -------------------------- */

static double now_ms(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec * 1e3 + ts.tv_nsec * 1e-6;
}

static int cmp_double(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

static model *step_model(const char *mixer, const char *spec, err *e) {
    char buf[512], *argv[OPTS_MAX];
    int argc = 0;
    snprintf(buf, sizeof buf, "%s", spec);
    for (char *t = strtok(buf, " "); t && argc < OPTS_MAX; t = strtok(NULL, " ")) argv[argc++] = t;
    opts o;
    model *m = NULL;
    if (opts_parse(&o, argc, argv, e)) return NULL;
    if (model_random(&m, mixer, &o, e)) m = NULL;
    opts_free(&o);
    return m;
}

typedef struct step_bufs {
    int32_t *tok, *top;
    float *topp, *nll, *probes, *fprobes, *state, *logits, *k, *v, *recall;
} step_bufs;

/* Median ms per call of `calls` calls of n tokens (after warm-up calls of the same n: the first
 * runs eagerly, the second captures the graph), with the outputs `what` selects: 0 the head's
 * top / p / nll only, 1 also probes and family probes, 2 also the state, 3 also the logits; 4
 * probes and family probes with k, v and recall (model_gpu_step_ex). */
static double time_calls(model_gpu *g, const step_bufs *b, int n, int calls, int what, int vocab,
                         err *e) {
    double *ms = malloc((size_t)calls * sizeof *ms), med = -1;
    int ok = 1;
    for (int c = -3; ok && c < calls; c++) {
        const int32_t *tok = b->tok + (size_t)((c + 3) % 8) * 64;
        model_gpu_out o = {.logits = what == 3 ? b->logits : NULL,
                           .top = b->top,
                           .topp = b->topp,
                           .nll = b->nll,
                           .probes = what >= 1 ? b->probes : NULL,
                           .fprobes = what >= 1 ? b->fprobes : NULL,
                           .state = what == 2 || what == 3 ? b->state : NULL,
                           .k = what == 4 ? b->k : NULL,
                           .v = what == 4 ? b->v : NULL,
                           .recall = what == 4 ? b->recall : NULL};
        double t0 = now_ms();
        ok = model_gpu_step_ex(g, tok, n, tok + 1, &o, e) == 0;
        if (c >= 0) ms[c] = now_ms() - t0;
    }
    (void)vocab;
    if (ok) {
        qsort(ms, (size_t)calls, sizeof *ms, cmp_double);
        med = ms[calls / 2];
    }
    free(ms);
    return med;
}

static void step_row(const char *name, double ms_call, int n, double floor_ms) {
    double per = ms_call / n;
    printf("%-44s %9.0f %10.4f %10.4f %8.2fx\n", name, 1e3 / per, per, floor_ms, per / floor_ms);
}

/* The engine end to end (the number issue 13 asks for): engine_run over T tokens under device
 * gpu with the default probes (the cores' and families' probes, k, v, the readback picture and
 * the state snapshot per batch recorded into the trace, the logits kept), wall clock. The first
 * run builds the resident stepper (upload, graph capture); the row is the second, after
 * engine_reset. Takes m (the engine frees it). */
static void bench_engine(model *m, int T, double floor_ms, err *e) {
    engine g;
    int32_t *ids = malloc((size_t)T * sizeof *ids);
    unsigned long long r = 0x2545F4914F6CDD1Dull;
    for (int i = 0; i < T; i++) {
        r ^= r << 13, r ^= r >> 7, r ^= r << 17;
        ids[i] = (int32_t)(r % (unsigned long long)m->c.vocab);
    }
    int ok = engine_init(&g, e) == 0;
    if (!ok) model_free(m);
    ok = ok && engine_set_model(&g, m, NULL, 0, e) == 0 && engine_set_tokens(&g, ids, T, e) == 0 &&
         engine_set_device(&g, ENGINE_GPU, e) == 0;
    double t0 = now_ms();
    ok = ok && engine_run(&g, 0, e) == 0;
    double cold = now_ms() - t0;
    ok = ok && engine_reset(&g, e) == 0;
    t0 = now_ms();
    ok = ok && engine_run(&g, 0, e) == 0;
    double warm = now_ms() - t0;
    char name[96];
    snprintf(name, sizeof name, "engine_run, %d tokens, default probes", T);
    if (!ok) {
        printf("%-44s %s\n", name, e->msg);
    } else {
        step_row(name, warm, T, floor_ms);
        int sr = trace_find(&g.tr, "recall"), finite = 0;
        if (sr >= 0)
            for (int j = 0; j < MODEL_GPU_RECALL_WINDOW; j++)
                finite += isfinite(trace_at_lh(&g.tr, sr, T - 1, 0, 0)[j]);
        printf("  resident on the gpu: %s; %d series recorded (k %s, v %s, recall %s: %d of %d "
               "entries of the last token's first head finite); the first run (upload, graph "
               "capture) %.0f ms\n",
               g.gm ? "yes" : g.gm_why, g.tr.nseries, trace_find(&g.tr, "k") >= 0 ? "yes" : "no",
               trace_find(&g.tr, "v") >= 0 ? "yes" : "no", sr >= 0 ? "yes" : "no", finite,
               MODEL_GPU_RECALL_WINDOW, cold);
    }
    engine_free(&g);
    free(ids);
}

static void bench_step_model(const char *label, const char *mixer, const char *spec, int variants,
                             int engine_tokens, double bw, err *e) {
    double t0 = now_ms();
    model *m = step_model(mixer, spec, e);
    if (!m) {
        printf("%s: %s\n", label, e->msg);
        return;
    }
    double t_rand = now_ms() - t0;
    const model_config *c = &m->c;
    size_t sfl = 0;
    for (int li = 0; li < c->layers; li++) sfl += m->layers[li].mx->state_floats(&m->layers[li].mc);
    /* per token: every weight once but the embedding table (one row), the states read and
     * written (bw counts bytes read plus bytes written) */
    double wbytes = 4.0 * ((double)model_param_count(m) -
                           (c->tie ? 0.0 : (double)c->vocab * c->hidden - c->hidden));
    double floor_ms = (wbytes + 2.0 * 4.0 * (double)sfl) / (bw * 1e9) * 1e3;
    printf("\n%s: %s\n  %lld parameters (%.0f MB fp32 read per token), state %.1f MB; model "
           "random %.1f s\n",
           label, spec, (long long)model_param_count(m), wbytes / 1e6, 4.0 * sfl / 1e6,
           t_rand / 1e3);
    char why[300];
    if (!model_gpu_supported(m, why, sizeof why)) {
        printf("  not supported: %s\n", why);
        model_free(m);
        return;
    }
    model_gpu *g = NULL;
    t0 = now_ms();
    if (model_gpu_init(&g, m, 64, e)) {
        printf("  %s\n", e->msg);
        model_free(m);
        return;
    }
    printf("  model_gpu_init (upload) %.0f ms\n", now_ms() - t0);
    size_t pf = model_gpu_probe_floats(g), ff = model_gpu_fprobe_floats(g);
    step_bufs b;
    b.tok = malloc(8 * 64 * 4 + 4), b.top = malloc(64 * 4);
    b.topp = malloc(64 * 4), b.nll = malloc(64 * 4);
    b.probes = malloc(64 * pf * 4 + 4), b.fprobes = malloc(64 * ff * 4 + 4);
    b.state = malloc(sfl * 4 + 4), b.logits = malloc((size_t)64 * c->vocab * 4);
    int kh, kdk, kdv; /* k / v: the most heads and widest keys and values of any layer (hybrids) */
    model_gpu_kv_shape(g, &kh, &kdk, &kdv);
    const size_t lh = (size_t)c->layers * c->Hv, lk = (size_t)c->layers * kh;
    b.k = malloc(64 * lk * kdk * 4), b.v = malloc(64 * lk * kdv * 4);
    b.recall = malloc(64 * lh * MODEL_GPU_RECALL_WINDOW * 4);
    unsigned long long r = 0x9E3779B97F4A7C15ull;
    for (int i = 0; i < 8 * 64 + 1; i++) {
        r ^= r << 13, r ^= r >> 7, r ^= r << 17;
        b.tok[i] = (int32_t)(r % (unsigned long long)c->vocab);
    }
    printf("%-44s %9s %10s %10s %9s\n", "call", "tokens/s", "ms/token", "floor ms", "/ floor");
    struct {
        int n, what;
        const char *name;
    } rows[] = {
        {64, 2, "64 tokens a call, probes + state back"},
        {64, 1, "64 tokens a call, probes back"},
        {64, 3, "64 tokens a call, probes + state + logits"},
        {64, 0, "64 tokens a call, head only (top, p, nll)"},
        {64, 4, "64 tokens a call, probes + k, v, recall back"},
        {8, 1, "8 tokens a call, probes back"},
        {1, 1, "1 token a call, probes back"},
        {1, 2, "1 token a call, probes + state back"},
        {1, 0, "1 token a call, head only"},
    };
    const int rb = model_gpu_has_readback(g); /* attention, kata, kalman: no readback picture */
    for (size_t i = 0; i < sizeof rows / sizeof rows[0]; i++) {
        int calls = rows[i].n == 64 ? 15 : 64;
        if (!rb && rows[i].what == 4) continue;
        /* back to position 0 for each row (an attention layer's KV cache would fill) */
        if (model_gpu_upload(g, m, e)) {
            printf("%-44s %s\n", rows[i].name, e->msg);
            continue;
        }
        /* Kalman's lane probes are megabytes a token: its calls may be shorter */
        const int mb = model_gpu_max_batch(g), n = rows[i].n < mb ? rows[i].n : mb;
        char name[96];
        snprintf(name, sizeof name, n < rows[i].n ? "%.30s (%d a call)" : "%s", rows[i].name, n);
        double ms = time_calls(g, &b, n, calls, rows[i].what, c->vocab, e);
        if (ms < 0) {
            printf("%-44s %s\n", name, e->msg);
            continue;
        }
        step_row(name, ms, n, floor_ms);
    }
    model_gpu_free(g);
    /* the readback products in chunks of 16 tokens instead of 64 (not for attention) */
    setenv("MIXSCOPE_GM_RECALL_CHUNK", "16", 1);
    g = NULL;
    if (!rb) {
        /* no readback picture */
    } else if (model_gpu_init(&g, m, 64, e)) {
        printf("  %s\n", e->msg);
    } else {
        double ms = time_calls(g, &b, 64, 15, 4, c->vocab, e);
        const char *name = "64 tokens, k, v, recall, MIXSCOPE_GM_RECALL_CHUNK=16";
        if (ms < 0)
            printf("%-44s %s\n", name, e->msg);
        else
            step_row(name, ms, 64, floor_ms);
    }
    model_gpu_free(g);
    unsetenv("MIXSCOPE_GM_RECALL_CHUNK");
    /* the knobs, on the smaller model: no graphs; cuBLAS for single tokens too */
    for (int v = 0; variants && v < 2; v++) {
        setenv(v == 0 ? "MIXSCOPE_GM_GRAPH" : "MIXSCOPE_GM_SKINNY", "0", 1);
        g = NULL;
        if (model_gpu_init(&g, m, 64, e)) {
            printf("  %s\n", e->msg);
        } else {
            char name[96];
            for (int n = 1; n <= 64; n += 63) {
                double ms = time_calls(g, &b, n, n == 64 ? 15 : 64, 1, c->vocab, e);
                snprintf(name, sizeof name, "%d token%s a call, probes, %s", n, n > 1 ? "s" : "",
                         v == 0 ? "MIXSCOPE_GM_GRAPH=0" : "MIXSCOPE_GM_SKINNY=0");
                if (ms < 0)
                    printf("%-44s %s\n", name, e->msg);
                else
                    step_row(name, ms, n, floor_ms);
            }
        }
        model_gpu_free(g);
        unsetenv(v == 0 ? "MIXSCOPE_GM_GRAPH" : "MIXSCOPE_GM_SKINNY");
    }
    /* the old path: model_step with each core and dense layer on the GPU, and the CPU */
    if (variants) {
        float *logits = malloc((size_t)c->vocab * 4);
        for (int gpu = 1; gpu >= 0; gpu--) {
            m->gpu = gpu;
            int ok = model_step(m, b.tok[0], logits, NULL, e) == 0, n = gpu ? 4 : 2;
            double t1 = now_ms();
            for (int t = 0; ok && t < n; t++)
                ok = model_step(m, b.tok[t + 1], logits, NULL, e) == 0;
            double ms = (now_ms() - t1) / n;
            if (!ok)
                printf("  model_step: %s\n", e->msg);
            else
                step_row(gpu ? "model_step, m->gpu = 1 (the old path)" : "model_step on the CPU",
                         ms, 1, floor_ms);
        }
        m->gpu = 0;
        free(logits);
    }
    free(b.tok), free(b.top), free(b.topp), free(b.nll), free(b.probes), free(b.fprobes);
    free(b.state), free(b.logits), free(b.k), free(b.v), free(b.recall);
    bench_engine(m, engine_tokens, floor_ms, e); /* takes m */
}

static void bench_step(double bw, err *e) {
    printf(
        "\nwhole models stepped on the GPU (models/model_gpu.h): fp32, every probe computed when "
        "asked;\nfloor = fp32 weights read once (not the embedding table) + states read and "
        "written, per token,\nover the measured copy bandwidth; medians of 15 (64-token) or 64 "
        "calls, wall clock\n");
    bench_step_model("gated_deltanet 4 x 1024", "gdn",
                     "layers=4 hidden=1024 heads=8 head_dim=128 vocab=32000", 1, 1024, bw, e);
    bench_step_model("gated_deltanet 340M class", "gdn",
                     "layers=24 hidden=1024 heads=4 head_dim=256 expand_v=2 vocab=32000", 0, 512,
                     bw, e);
    bench_step_model("fla's default gated_deltanet (the 1.3B class)", "gdn",
                     "layers=21 hidden=2048 heads=6 head_dim=256 expand_v=2 vocab=32000", 0, 512,
                     bw, e);
    bench_step_model("delta_net 4 x 1024", "deltanet",
                     "layers=4 hidden=1024 heads=8 head_dim=128 vocab=32000", 0, 1024, bw, e);
    bench_step_model("kaczmarz_deltanet 4 x 1024", "kaczmarz",
                     "layers=4 hidden=1024 heads=8 head_dim=128 vocab=32000", 0, 1024, bw, e);
    bench_step_model("gla 4 x 1024", "gla", "layers=4 hidden=1024 heads=8 head_dim=128 vocab=32000",
                     0, 1024, bw, e);
    bench_step_model("transformer 4 x 1024", "softmax", "layers=4 hidden=1024 heads=8 vocab=32000",
                     0, 1024, bw, e);
    bench_step_model("parallax 4 x 1024", "parallax", "layers=4 hidden=1024 heads=8 vocab=32000", 0,
                     1024, bw, e);
    bench_step_model("hybrid gated_deltanet 4 x 1024, layer 1 attention", "gdn",
                     "layers=4 hidden=1024 heads=8 head_dim=128 vocab=32000 attn=1 attn_heads=16 "
                     "attn_kv_heads=4",
                     0, 1024, bw, e);
    bench_step_model("kata m1 4 x 1024", "kata",
                     "layers=4 hidden=1024 heads=8 head_dim=128 vocab=32000", 0, 256, bw, e);
    bench_step_model("kalman 4 x 1024", "kalman", "layers=4 hidden=1024 vocab=32000", 0, 256, bw,
                     e);
    bench_step_model("mamba2 4 x 1024", "mamba2",
                     "layers=4 hidden=1024 heads=32 head_dim=64 state_size=128 vocab=32000", 0,
                     1024, bw, e);
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
    double mm = 0;
    if (gpu_measure_matmul_tflops(&mm, &e)) fprintf(stderr, "bench-gpu: %s\n", e.msg);
    printf("device: %s; measured copy bandwidth %.0f GB/s (read + write), bf16 matrix rate %.0f "
           "TFLOP/s\n",
           why, bw, mm);
    printf("B=1 H=%d d=%d bf16 inputs, fp32 state and output; medians of 20 runs\n\n", H, D);
    printf("%-28s %10s %10s %10s %8s %10s\n", "kernel", "ms", "peer ms", "SDPA ms", "vs peer",
           "floor ms");
    const char *only_rows = getenv("MIXSCOPE_BENCH_ONLY");
    if (only_rows && !strcmp(only_rows, "step")) {
        bench_step(bw, &e);
        return 0;
    }
    if (only_rows && !strcmp(only_rows, "kalman")) {
        bench_kalman(bw, &e);
        return 0;
    }
    if (only_rows && !strcmp(only_rows, "attn")) {
        bench_attention(bw, &e);
        return 0;
    }
    if (only_rows && !strcmp(only_rows, "kata-sweep")) {
        bench_kata_sweep(&e);
        setenv("MIXSCOPE_KATA_DELTA_SWEEP", "1", 1);
        bench_kata_delta(bw, &e);
        return 0;
    }
    if (only_rows && !strcmp(only_rows, "kata")) {
        bench_others(bw, &e);
        bench_kata_delta(bw, &e);
        return 0;
    }
    peer_header();
    /* the chunked prefill beside fla's chunk_gated_delta_rule (gdn; kaczmarz, whose rescaled form
     * is a gated delta rule, has no fla kernel of its own) and chunk_delta_rule (deltanet) */
    const int Ts[5] = {4096, 16384, 32768, 65536, 131072};
    static const char *const mode_name[3] = {"gdn", "kaczmarz", "deltanet"};
    const char *only = getenv("MIXSCOPE_BENCH_ONLY"); /* delta, decode, attn, kata, kalman, step */
    const int decode_only = only && !strcmp(only, "decode");
    for (int mode = MODE_GDN; mode <= MODE_DELTANET && !decode_only; mode++)
        for (int i = 0; i < 5; i++) {
            char name[64];
            snprintf(name, sizeof name, "%s chunked T=%dK", mode_name[mode], Ts[i] / 1024);
            if (delta_row(name, 1, Ts[i], mode, H, 0,
                          mode == MODE_DELTANET ? "fla_delta_chunk" : "fla_gdn_chunk", bw, mm, &e))
                break;
        }
    /* gdn with 4 heads (a 16-head layer split over 4 GPUs), where the state pass's few blocks
     * leave most multiprocessors to the rest and its segments of time pay; and with slow gates,
     * g in [-0.02, 0): over 16 chunks (the most a segment of the state pass warms up from) they
     * decay a state by about 2^-15 only, so every segment walks from the first chunk
     * (delta_tc_shared.cuh); the rows above (g in [-0.5, 0)) decay 2^-23 a chunk. Then batches
     * of 32K tokens in all: 2 sequences of 16K (the fused form in 2 segments, 128 blocks) and 8
     * of 4K (one segment, 256 blocks: two waves) */
    static const int rows[7][4] = {{2, 4, 0, 1}, {4, 4, 0, 1}, {2, 4, 1, 1}, {2, H, 1, 1},
                                   {4, H, 1, 1}, {1, H, 0, 2}, {0, H, 0, 8}};
    for (int r = 0; r < 7 && !decode_only; r++) {
        const int i = rows[r][0], heads = rows[r][1], slow = rows[r][2], B = rows[r][3];
        char name[64], bs[16] = "";
        if (B > 1) snprintf(bs, sizeof bs, " B=%d", B);
        snprintf(name, sizeof name, "gdn chunked T=%dK H=%d%s%s", Ts[i] / 1024, heads, bs,
                 slow ? " slow g" : "");
        if (delta_row(name, B, Ts[i], MODE_GDN, heads, slow,
                      heads == 4 && !slow ? "fla_gdn_chunk_h4" : NULL, bw, mm, &e))
            break;
    }
    if (only && !strcmp(only, "delta")) return 0;
    /* the decode step: one step captured as a CUDA graph and replayed 100 times back to back, as
     * peers.py replays fla's fused_recurrent_gated_delta_rule (ms a step; printed in us) */
    void *st = gpu_bench_stream(&e);
    const int Bs[3] = {1, 8, 64};
    for (int i = 0; i < 3 && st; i++) {
        delta_ctx c;
        if (setup(&c, Bs[i], 1, MODE_GDN, 0, &e)) break;
        c.st = st;
        double ms;
        if (gpu_time_graph_median(run_step, &c, st, 100, 20, &ms, &e)) {
            printf("%s\n", e.msg);
            teardown(&c);
            continue;
        }
        double bytes = (double)Bs[i] * H * (2.0 * D * D * 4 + 3 * D * 2 + D * 4);
        double peer = peer_ms("fla_gdn_decode", Bs[i]);
        char name[64], ps[32] = "-", xs[32] = "-";
        snprintf(name, sizeof name, "gdn decode step B=%d (us)", Bs[i]);
        if (peer > 0)
            snprintf(ps, sizeof ps, "%.2f", peer * 1e3),
                snprintf(xs, sizeof xs, "%.2fx", peer / ms);
        printf("%-28s %10.2f %10s %10s %8s %10.2f\n", name, ms * 1e3, ps, "-", xs,
               bytes / (bw * 1e9) * 1e6);
        /* what bounds it: the kernel alone (100 steps in one graph: no replay between them) */
        double kms;
        if (gpu_time_graph_steps_median(run_step, &c, st, 100, 20, &kms, &e) == 0)
            printf("  the kernel alone (100 steps in one graph) %.2f us\n", kms * 1e3);
        teardown(&c);
    }
    {
        /* the floor of any one-kernel step counted as a replay: an empty kernel's graph */
        double ems;
        if (st && gpu_time_graph_median(run_empty, st, st, 100, 20, &ems, &e) == 0)
            printf("  an empty kernel's graph, replayed the same way: %.2f us\n", ems * 1e3);
    }
    gpu_bench_stream_free(st);
    if (decode_only) return 0;
    bench_attention(bw, &e);
    bench_others(bw, &e);
    bench_kata_delta(bw, &e);
    bench_kalman(bw, &e);
    bench_step(bw, &e);
    printf(
        "\nfloor = fewest bytes the kernel must move / measured copy bandwidth; compute floor =\n"
        "the kernel's FLOPs / measured bf16 matrix rate\n");
    return 0;
}
