/* test_tf32.c: arith=tf32, fla's GPU arithmetic (mixers/tf32.h, mixers/delta_tf32.c, the naive row
 * of mixers/attention.c, models/arith.c, `load PATH arith=tf32`, `set arith`).
 *
 *  - tf32() is the rounding the reference doubles of tests/test_models.c use (low 13 mantissa
 *    bits cleared), checked against an arithmetic definition (11 significant bits, toward zero);
 *  - through the scripting contract: the gated_deltanet and parallax checkpoints, whose logits fla
 *    computed with TF32 products, meet 1e-4 under `load PATH arith=tf32` (or `set arith tf32`)
 *    and `run`; the default is unchanged (exact float32: run == run prefill, the same numbers as
 *    before, arith=fp32 the same bits), and the four checkpoints fla computed exactly are left
 *    alone by arith=tf32;
 *  - the delta-rule core against fla's own Triton chunk kernel outputs (refs ops-seed11/12
 *    gdr.o_chunk_gpu, gdr.hT_chunk_gpu) through `replay gdn ... arith=tf32`;
 *  - the cores directly: steps of the delta family stay exact, the TF32 prefill is the same
 *    function to TF32 accuracy for every chunk size and length, the attention cores equal a naive
 *    TF32 double written here, step == prefill bit for bit, and bad values are refused. */
#include "testutil.h"

#include <float.h>

#include "core/safetensors.h"
#include "mixers/tf32.h"

/* ---- helpers ---- */

/* logits [1, T, V] of `name` in FILE (malloc'd; *n = T V) */
static float *read_logits(const char *path, const char *name, int64_t *n) {
    st_file *f;
    err e = {{0}};
    if (st_open(&f, path, &e)) fail_msg("%s", e.msg);
    float *p = st_get_f32(f, name, n);
    st_close(f);
    return p;
}

/* Runs `load REF ARGS; tokens; RUN; export logits` through the binary; returns the logits. */
static float *model_logits(const char *dir, const char *name, const char *load_args,
                           const char *run, int64_t *n) {
    char ref[512], out[600];
    ref_path(ref, sizeof ref, name);
    snprintf(out, sizeof out, "%s/%s.safetensors", dir, name);
    char *log = NULL;
    int rc = run_mixscope(&log,
                          "-c 'load %s %s; tokens %s/expected.safetensors; %s; "
                          "export logits %s'",
                          ref, load_args, ref, run, out);
    if (rc != 0) fail_msg("mixscope exit %d:\n%s", rc, log);
    free(log);
    return read_logits(out, "logits", n);
}

static float *expected_logits(const char *name, int64_t *n) {
    char path[512];
    ref_path(path, sizeof path, name);
    strncat(path, "/expected.safetensors", sizeof path - strlen(path) - 1);
    return read_logits(path, "logits", n);
}

static int bits_equal(const float *a, const float *b, int64_t n) {
    return memcmp(a, b, (size_t)n * sizeof *a) == 0;
}

/* ---- the rounding ---- */

/* The reference doubles' rounding in tests/test_models.c, copied: the low 13 bits cleared. */
static float tf32_mask(float x) {
    uint32_t u;
    memcpy(&u, &x, 4);
    u &= ~0x1fffu;
    memcpy(&x, &u, 4);
    return x;
}

/* The same by arithmetic, for normal numbers: 11 significant bits, truncated toward zero. */
static double tf32_arith(double x) {
    if (x == 0.0 || !isfinite(x)) return x;
    int ex;
    double m = frexp(fabs(x), &ex); /* [0.5, 1) */
    double t = ldexp(floor(ldexp(m, 11)), ex - 11);
    return x < 0 ? -t : t;
}

static void test_tf32_rounding(void **st) {
    (void)st;
    trng r = {41};
    for (int i = 0; i < 200000; i++) {
        double mag = pow(2.0, 60.0 * trng_uniform(&r));
        float x = (float)(trng_normal(&r) * mag);
        float t = tf32(x);
        assert_true(t == tf32_mask(x));
        assert_true((double)t == tf32_arith((double)x));
        assert_true(tf32(t) == t); /* idempotent */
        assert_true(fabsf(t) <= fabsf(x));
        assert_true(fabs((double)x - t) < ldexp(fabs((double)x), -10)); /* below 2^-10 */
    }
    /* 1 + 2^-10 is the last bit TF32 keeps; 1 + 2^-11 is dropped, toward zero for both signs */
    assert_true(tf32(1.0f + 0x1p-10f) == 1.0f + 0x1p-10f);
    assert_true(tf32(1.0f + 0x1p-11f) == 1.0f);
    assert_true(tf32(-(1.0f + 0x1p-11f) - 0x1p-12f) == -1.0f);
    assert_true(tf32(0.0f) == 0.0f && signbit(tf32(-0.0f)));
    assert_true(isinf(tf32(INFINITY)) && tf32(-INFINITY) < 0);
    assert_true(tf32(FLT_MAX) < FLT_MAX && isfinite(tf32(FLT_MAX)));
    /* the dot product: TF32 operands, float32 sum in index order */
    float a[5] = {1.0f + 0x1p-12f, -3.0001f, 0.5f, 7.77f, -2e-3f}, b[5] = {1, 2, 3.14159f, -1, 5};
    float want = 0.0f;
    for (int i = 0; i < 5; i++) want += tf32_mask(a[i]) * tf32_mask(b[i]);
    assert_true(tf32_dot(a, b, 5) == want);
}

/* ---- the reference checkpoints through the scripting contract ---- */

static void check_ref_tf32(const char *name, double want_tf32) {
    char *dir = test_tmpdir();
    int64_t n, ne, n0;
    float *ref = expected_logits(name, &ne);
    float *l0 = model_logits(dir, name, "", "run", &n0);
    float *l1 = model_logits(dir, name, "arith=tf32", "run", &n);
    assert_int_equal(n, ne), assert_int_equal(n0, ne);
    double e0 = rel_err(l0, ref, (size_t)n), e1 = rel_err(l1, ref, (size_t)n);
    print_message("  %-15s logits vs fla: exact float32 %.2e, arith=tf32 %.2e\n", name, e0, e1);
    assert_true(e1 < want_tf32);
    assert_true(e1 < 1e-4);   /* the reference tolerance for a whole model (refs/README.md) */
    assert_true(e1 < e0 / 4); /* the TF32 products are what separated the two */
    assert_true(e0 > 2e-4);   /* ... and exact float32 does not reach the tolerance */
    free(ref), free(l0), free(l1);
    test_rmdir(dir);
}

/* fla ran its chunk kernels (77 tokens > 64): measured 7.5e-5 (exact: 4.8e-4) */
static void test_ref_gated_deltanet(void **st) {
    (void)st;
    check_ref_tf32("gated_deltanet", 9e-5);
}

/* fla ran naive_parallax with TF32 einsums: measured 1.0e-5 (exact: 5.4e-4) */
static void test_ref_parallax(void **st) {
    (void)st;
    check_ref_tf32("parallax", 2e-5);
}

/* The default is exact float32 as before: run (steps) and run prefill agree to 1e-5, arith=fp32
 * is the same bits as no option, and `run prefill` under arith=fp32 is unchanged. On the other
 * checkpoints (fla's forward exact there) arith=tf32 changes nothing at all. */
static void test_default_unchanged(void **st) {
    (void)st;
    char *dir = test_tmpdir();
    const char *all[] = {"gated_deltanet", "parallax"};
    for (int i = 0; i < 2; i++) {
        int64_t n, n1, n2, ne;
        float *ls = model_logits(dir, all[i], "", "run", &n);
        float *lp = model_logits(dir, all[i], "", "run prefill", &n1);
        float *lf = model_logits(dir, all[i], "arith=fp32", "run", &n2);
        float *ref = expected_logits(all[i], &ne);
        assert_int_equal(n1, n), assert_int_equal(n2, n), assert_int_equal(ne, n);
        double path = rel_err(lp, ls, (size_t)n), e = rel_err(ls, ref, (size_t)n);
        print_message("  %-15s default: prefill vs step %.2e, vs fla %.2e\n", all[i], path, e);
        assert_true(path < 1e-5);
        assert_true(bits_equal(lf, ls, n));
        /* docs/models.md's exact numbers: 4.8e-4 and 5.4e-4 */
        assert_true(e > 4.0e-4 && e < 6.0e-4);
        free(ls), free(lp), free(lf), free(ref);
    }
    const char *exact[] = {"transformer", "gla", "delta_net", "mamba2"};
    for (int i = 0; i < 4; i++) {
        int64_t n, n1, ne;
        float *l0 = model_logits(dir, exact[i], "", "run", &n);
        float *l1 = model_logits(dir, exact[i], "arith=tf32", "run", &n1);
        float *ref = expected_logits(exact[i], &ne);
        assert_int_equal(n1, n), assert_int_equal(ne, n);
        assert_true(bits_equal(l0, l1, n));
        assert_true(rel_err(l1, ref, (size_t)n) < 1e-5);
        free(l0), free(l1), free(ref);
    }
    test_rmdir(dir);
}

/* `set arith tf32` is the session's setting: the same numbers as `load ... arith=tf32` on a later
 * load, and `set arith fp32` on a loaded model goes back to the exact bits. */
static void test_set_arith(void **st) {
    (void)st;
    char *dir = test_tmpdir();
    int64_t n, n1, n2, n3;
    float *lt = model_logits(dir, "gated_deltanet", "arith=tf32", "run", &n);
    float *l0 = model_logits(dir, "gated_deltanet", "", "run", &n1);
    char ref[512], out[600], *log = NULL;
    ref_path(ref, sizeof ref, "gated_deltanet");
    snprintf(out, sizeof out, "%s/set.safetensors", dir);
    assert_int_equal(run_mixscope(&log,
                                  "-c 'set arith tf32; load %s; tokens %s/expected.safetensors; "
                                  "run; export logits %s'",
                                  ref, ref, out),
                     0);
    assert_non_null(strstr(log, "fla's TF32 products in 2 of 2 layers"));
    free(log);
    float *ls = read_logits(out, "logits", &n2);
    assert_int_equal(run_mixscope(&log,
                                  "-c 'load %s arith=tf32; set arith fp32; tokens "
                                  "%s/expected.safetensors; run; export logits %s'",
                                  ref, ref, out),
                     0);
    free(log);
    float *lf = read_logits(out, "logits", &n3);
    assert_int_equal(n1, n), assert_int_equal(n2, n), assert_int_equal(n3, n);
    assert_true(bits_equal(ls, lt, n));
    assert_true(bits_equal(lf, l0, n));
    assert_false(bits_equal(lt, l0, n));
    assert_int_not_equal(run_mixscope(&log, "-c 'set arith tf64'"), 0);
    assert_non_null(strstr(log, "set arith: expected fp32 or tf32"));
    free(log);
    free(lt), free(l0), free(ls), free(lf);
    test_rmdir(dir);
}

/* What `load ... arith=tf32` says, and what it refuses. */
static void test_cli_messages(void **st) {
    (void)st;
    char ref[512], *out = NULL;
    ref_path(ref, sizeof ref, "gated_deltanet");
    assert_int_equal(run_mixscope(&out,
                                  "-c 'load %s arith=tf32; tokens %s/expected.safetensors; run'",
                                  ref, ref),
                     0);
    assert_non_null(strstr(out, "fla's TF32 products in 2 of 2 layers"));
    assert_non_null(strstr(out, "prefill as fla's chunk mode"));
    free(out);
    /* 64 tokens or fewer: fla's exact recurrent kernel, so run steps (and records probes) */
    assert_int_equal(run_mixscope(&out, "-c 'load %s arith=tf32; prompt hello; run'", ref), 0);
    assert_non_null(strstr(out, "(step)"));
    free(out);
    /* a gated_deltanet config with attn_mode fused_recurrent: fla's forward is exact */
    char *dir = test_tmpdir(), cmd[1600];
    snprintf(cmd, sizeof cmd,
             "cp %s/model.safetensors %s/ && sed 's/\"attn_mode\": \"chunk\"/\"attn_mode\": "
             "\"fused_recurrent\"/' %s/config.json > %s/config.json && grep -q fused_recurrent "
             "%s/config.json",
             ref, dir, ref, dir, dir);
    assert_int_equal(system(cmd), 0);
    assert_int_equal(run_mixscope(&out, "-c 'load %s arith=tf32'", dir), 0);
    assert_non_null(strstr(out, "no TF32 products"));
    free(out);
    test_rmdir(dir);
    ref_path(ref, sizeof ref, "delta_net"); /* fla's float32 DeltaNet: the recurrent kernel */
    assert_int_equal(run_mixscope(&out, "-c 'load %s arith=tf32'", ref), 0);
    assert_non_null(strstr(out, "no TF32 products"));
    free(out);
    assert_int_not_equal(run_mixscope(&out, "-c 'load %s arith=bf16'", ref), 0);
    assert_non_null(strstr(out, "arith=bf16: must be fp32 or tf32"));
    free(out);
    assert_int_not_equal(run_mixscope(&out, "-c 'load %s; swap all gdn arith=fp16'", ref), 0);
    assert_non_null(strstr(out, "arith=fp16"));
    free(out);
}

/* ---- the delta-rule core against fla's Triton chunk kernel ---- */

static void replay_gdn(const char *dir, const char *file, const char *arith, double *e_exact,
                       double *e_gpu, double *e_hgpu) {
    char in[512], out[600], *log = NULL;
    ref_path(in, sizeof in, file);
    snprintf(out, sizeof out, "%s/replay-%s.safetensors", dir, arith);
    int rc = run_mixscope(&log, "-c 'replay gdn %s prefix=gdr. out=%s arith=%s'", in, out, arith);
    if (rc) fail_msg("replay: %s", log);
    free(log);
    st_file *fr, *fo;
    err e = {{0}};
    if (st_open(&fr, in, &e) || st_open(&fo, out, &e)) fail_msg("%s", e.msg);
    int64_t n, m, nh, mh;
    float *o = st_get_f32(fo, "o", &n), *hT = st_get_f32(fo, "hT", &nh);
    float *want = st_get_f32(fr, "gdr.o", &m), *gpu = st_get_f32(fr, "gdr.o_chunk_gpu", &m);
    float *hgpu = st_get_f32(fr, "gdr.hT_chunk_gpu", &mh);
    assert_int_equal(n, m), assert_int_equal(nh, mh);
    *e_exact = rel_err(o, want, (size_t)n);
    *e_gpu = rel_err(o, gpu, (size_t)n);
    *e_hgpu = rel_err(hT, hgpu, (size_t)nh);
    free(o), free(hT), free(want), free(gpu), free(hgpu);
    st_close(fr), st_close(fo);
}

static void test_gdn_core_vs_fla_chunk_kernel(void **st) {
    (void)st;
    char *dir = test_tmpdir();
    const char *files[] = {"ops-seed11.safetensors", "ops-seed12.safetensors"};
    for (int i = 0; i < 2; i++) {
        double x0, g0, h0, x1, g1, h1;
        replay_gdn(dir, files[i], "fp32", &x0, &g0, &h0);
        replay_gdn(dir, files[i], "tf32", &x1, &g1, &h1);
        print_message("  %s gdn prefill vs fla's chunk kernel (o, hT): fp32 %.1e %.1e, "
                      "tf32 %.1e %.1e\n",
                      files[i], g0, h0, g1, h1);
        assert_true(x0 < 1e-5);              /* fp32: the exact recurrence */
        assert_true(g0 > 1e-3 && h0 > 3e-4); /* ... 1.5e-3 from fla's GPU kernel */
        assert_true(g1 < 1e-5 && h1 < 1e-6); /* tf32: fla's GPU kernel (3e-6, 1e-7) */
        assert_true(x1 > 1e-3);              /* ... and so 1.5e-3 from the exact one */
    }
    test_rmdir(dir);
}

/* ---- the cores directly ---- */

typedef struct seq {
    int T, H, dk, dv;
    float *q, *r, *k, *v, *g, *b, *h0;
} seq;

static seq seq_make(uint64_t seed, int T, int H, int dk, int dv) {
    seq s = {T, H, dk, dv, 0, 0, 0, 0, 0, 0, 0};
    trng r = {seed};
    size_t nk = (size_t)T * H * dk, nv = (size_t)T * H * dv, nh = (size_t)T * H;
    s.q = malloc(nk * sizeof(float)), s.r = malloc(nk * sizeof(float));
    s.k = malloc(nk * sizeof(float)), s.v = malloc(nv * sizeof(float));
    s.g = malloc(nh * sizeof(float)), s.b = malloc(nh * sizeof(float));
    s.h0 = malloc((size_t)H * dk * dv * sizeof(float));
    assert_true(s.q && s.r && s.k && s.v && s.g && s.b && s.h0);
    trng_fill(&r, s.q, nk, 1.0), trng_fill(&r, s.r, nk, 0.3), trng_fill(&r, s.v, nv, 1.0);
    trng_fill(&r, s.k, nk, 1.0);
    for (size_t t = 0; t < nh; t++) { /* unit keys as the GDN layer feeds them */
        double n2 = 0;
        for (int d = 0; d < dk; d++) n2 += (double)s.k[t * dk + d] * s.k[t * dk + d];
        for (int d = 0; d < dk; d++) s.k[t * dk + d] = (float)(s.k[t * dk + d] / sqrt(n2));
        s.g[t] = (float)(-0.2 * (trng_uniform(&r) + 1.0));
        s.b[t] = (float)(0.5 * (trng_uniform(&r) + 1.0));
    }
    trng_fill(&r, s.h0, (size_t)H * dk * dv, 0.1);
    return s;
}

static void seq_free(seq *s) {
    free(s->q), free(s->r), free(s->k), free(s->v), free(s->g), free(s->b), free(s->h0);
}

static mixer_cfg cfg_of(const char *mixer, const seq *s, const char *opt1, const char *opt2) {
    char a[64], b[64];
    char *argv[2] = {a, b};
    snprintf(a, sizeof a, "%s", opt1), snprintf(b, sizeof b, "%s", opt2);
    opts o;
    err e = {{0}};
    mixer_cfg c;
    assert_int_equal(opts_parse(&o, 2, argv, &e), 0);
    if (mixer_configure(mixer_find(mixer), &c, s->H, s->dk, s->dv, &o, &e)) fail_msg("%s", e.msg);
    assert_int_equal(opts_check_unused(&o, &e), 0);
    opts_free(&o);
    return c;
}

/* o [T, H, dv] and the state after T tokens (malloc'd). */
static float *run_core(const char *mixer, const mixer_cfg *c, const seq *s, int prefill,
                       float **state_out) {
    const mixer_ops *m = mixer_find(mixer);
    size_t sf = m->state_floats(c);
    float *state = malloc(sf * sizeof *state), *o = malloc((size_t)s->T * s->H * s->dv * 4);
    assert_true(state && o);
    m->state_init(c, state);
    int delta = strcmp(mixer, "parallax") && strcmp(mixer, "softmax");
    if (delta) memcpy(state, s->h0, (size_t)s->H * s->dk * s->dv * sizeof *state);
    mixer_seq x = {.T = s->T};
    x.in[IN_Q] = s->q, x.in[IN_K] = s->k, x.in[IN_V] = s->v;
    if (delta) x.in[IN_G] = s->g, x.in[IN_BETA] = s->b;
    if (!strcmp(mixer, "parallax")) x.in[IN_R] = s->r;
    if (!strcmp(mixer, "deltanet")) x.in[IN_G] = NULL;
    if (prefill)
        m->prefill(c, state, &x, 0, o);
    else
        mixer_run_steps(m, c, state, &x, 0, o, NULL);
    if (state_out)
        *state_out = state;
    else
        free(state);
    return o;
}

/* Steps stay exact under arith=tf32 (fla's fused_recurrent kernel has no TF32 product); the TF32
 * prefill is the same function to TF32 accuracy for every chunk size and length, from a non-zero
 * state, and differs from the exact one (the products really are TF32). */
static void test_delta_cores(void **st) {
    (void)st;
    const char *mixers[] = {"gdn", "deltanet", "kaczmarz"};
    const int Ts[] = {1, 15, 63, 64, 65, 200};
    const char *chunks[] = {"chunk=16", "chunk=32", "chunk=64"};
    double hi = 0;
    for (int mi = 0; mi < 3; mi++)
        for (int ti = 0; ti < 6; ti++) {
            seq s = seq_make(100 + ti, Ts[ti], 2, 16, 24);
            size_t no = (size_t)s.T * s.H * s.dv, ns = (size_t)s.H * s.dk * s.dv;
            mixer_cfg ce = cfg_of(mixers[mi], &s, "arith=fp32", "chunk=64");
            float *se, *ste;
            float *oe = run_core(mixers[mi], &ce, &s, 0, &se);
            mixer_cfg ct = cfg_of(mixers[mi], &s, "arith=tf32", "chunk=64");
            assert_int_equal(ct.arith, MIXER_ARITH_TF32);
            float *ot = run_core(mixers[mi], &ct, &s, 0, &ste);
            assert_true(bits_equal(oe, ot, (int64_t)no)); /* step: exact either way */
            assert_true(bits_equal(se, ste, (int64_t)ns));
            double worst = 0;
            for (int ci = 0; ci < 3; ci++) {
                mixer_cfg cp = cfg_of(mixers[mi], &s, "arith=tf32", chunks[ci]);
                float *sp, *op = run_core(mixers[mi], &cp, &s, 1, &sp);
                double eo = rel_err(op, oe, no), es = rel_err(sp, se, ns);
                for (size_t i = 0; i < no; i++) assert_true(isfinite(op[i]));
                assert_true(eo < 5e-3 && es < 5e-3);
                if (eo > worst) worst = eo;
                if (es > hi) hi = es;
                if (eo > hi) hi = eo;
                free(op), free(sp);
            }
            if (Ts[ti] >= 15) assert_true(worst > 1e-5); /* TF32, not float32 */
            free(oe), free(ot), free(se), free(ste);
            seq_free(&s);
        }
    print_message("  gdn/deltanet/kaczmarz: step bitwise exact under tf32; tf32 prefill vs exact "
                  "at most %.1e\n",
                  hi);
}

/* naive_parallax with TF32 einsums, written out here in double where fla is float32 except for
 * the TF32 operands: s1 = scale tf32(q).tf32(k), s2 = tf32(r).tf32(k), p1 = exp(s1 - max),
 * p2 = p1 s2, O1 = tf32(p1).tf32(v), O2 = tf32(p2).tf32(v), o = O1/d1 (1 + d2/d1) - O2/d1. */
static void naive_tf32(const seq *s, float scale, int use_r, double *o) {
    int H = s->H, d = s->dk, dv = s->dv;
    for (int t = 0; t < s->T; t++)
        for (int h = 0; h < H; h++) {
            const float *q = s->q + ((size_t)t * H + h) * d, *r = s->r + ((size_t)t * H + h) * d;
            double m = -INFINITY, s1[256], s2[256], d1 = 0, d2 = 0;
            for (int j = 0; j <= t; j++) {
                const float *k = s->k + ((size_t)j * H + h) * d;
                float a = 0, b = 0;
                for (int i = 0; i < d; i++) a += tf32_mask(q[i]) * tf32_mask(k[i]);
                for (int i = 0; i < d; i++) b += tf32_mask(r[i]) * tf32_mask(k[i]);
                s1[j] = (double)(a * scale), s2[j] = use_r ? b : 0.0;
                m = fmax(m, s1[j]);
            }
            double *oo = o + ((size_t)t * H + h) * dv;
            for (int i = 0; i < dv; i++) oo[i] = 0;
            double o2[256] = {0};
            for (int j = 0; j <= t; j++) {
                float p1 = expf((float)(s1[j] - m)), p2 = p1 * (float)s2[j];
                d1 += p1, d2 += p2;
                const float *v = s->v + ((size_t)j * H + h) * dv;
                for (int i = 0; i < dv; i++) {
                    oo[i] += (double)tf32_mask(p1) * tf32_mask(v[i]);
                    o2[i] += (double)tf32_mask(p2) * tf32_mask(v[i]);
                }
            }
            for (int i = 0; i < dv; i++) oo[i] = oo[i] / d1 * (1.0 + d2 / d1) - o2[i] / d1;
        }
}

/* The attention cores under arith=tf32 are the naive TF32 row: equal to the double above, step ==
 * prefill bit for bit for every chunk size (no tiles), and 1e-4 or more away from exact. */
static void test_attention_cores(void **st) {
    (void)st;
    const char *mixers[] = {"parallax", "softmax"};
    for (int mi = 0; mi < 2; mi++) {
        seq s = seq_make(7 + mi, 150, 2, 16, 16);
        size_t no = (size_t)s.T * s.H * s.dv;
        double *want = malloc(no * sizeof *want);
        assert_non_null(want);
        mixer_cfg c = cfg_of(mixers[mi], &s, "arith=tf32", "chunk=16");
        naive_tf32(&s, c.scale, mi == 0, want);
        float *os = run_core(mixers[mi], &c, &s, 0, NULL);
        double e = rel_err_d(os, want, no);
        mixer_cfg ce = cfg_of(mixers[mi], &s, "arith=fp32", "chunk=16");
        float *oe = run_core(mixers[mi], &ce, &s, 0, NULL);
        double ex = rel_err(oe, os, no);
        print_message("  %-8s tf32 vs naive TF32 double %.1e, vs exact %.1e\n", mixers[mi], e, ex);
        assert_true(e < 2e-6);
        assert_true(ex > 1e-4);
        const char *chunks[] = {"chunk=16", "chunk=32", "chunk=64"};
        for (int ci = 0; ci < 3; ci++) {
            mixer_cfg cp = cfg_of(mixers[mi], &s, "arith=tf32", chunks[ci]);
            float *op = run_core(mixers[mi], &cp, &s, 1, NULL);
            assert_true(bits_equal(op, os, (int64_t)no));
            free(op);
        }
        free(want), free(os), free(oe);
        seq_free(&s);
    }
}

/* The option: fp32 by default, both spellings accepted, anything else refused by name. */
static void test_option(void **st) {
    (void)st;
    const char *mixers[] = {"gdn", "deltanet", "kaczmarz", "softmax", "parallax"};
    for (int i = 0; i < 5; i++) {
        const mixer_ops *m = mixer_find(mixers[i]);
        assert_non_null(m);
        assert_non_null(strstr(m->options, "arith=fp32|tf32"));
        mixer_cfg c;
        err e = {{0}};
        assert_int_equal(mixer_configure(m, &c, 2, 8, 8, NULL, &e), 0);
        assert_int_equal(c.arith, MIXER_ARITH_FP32);
        char kv[] = "arith=tf64", *argv[1] = {kv};
        opts o;
        assert_int_equal(opts_parse(&o, 1, argv, &e), 0);
        assert_int_not_equal(mixer_configure(m, &c, 2, 8, 8, &o, &e), 0);
        assert_non_null(strstr(e.msg, "arith=tf64: must be fp32 or tf32"));
        opts_free(&o);
    }
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_tf32_rounding),
        cmocka_unit_test(test_ref_gated_deltanet),
        cmocka_unit_test(test_ref_parallax),
        cmocka_unit_test(test_default_unchanged),
        cmocka_unit_test(test_set_arith),
        cmocka_unit_test(test_cli_messages),
        cmocka_unit_test(test_gdn_core_vs_fla_chunk_kernel),
        cmocka_unit_test(test_delta_cores),
        cmocka_unit_test(test_attention_cores),
        cmocka_unit_test(test_option),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
