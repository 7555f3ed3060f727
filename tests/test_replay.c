/* test_replay.c: the `replay` command through the scripting contract.
 *
 * Every mixer core with a reference group in ../shared/refs/ops-seed*.safetensors is replayed by
 * the binary and its written `o` (and final state) compared with fla's: relative error < 1e-5.
 * Bad inputs (missing tensor, wrong shape, wrong dtype, unknown mixer, unwritable out=) give a
 * one-line error naming the tensor and exit status 1. */
#include "testutil.h"

static float *read_out(const char *path, const char *name, int64_t *n) {
    st_file *f = NULL;
    err e = {{0}};
    if (st_open(&f, path, &e)) fail_msg("%s", e.msg);
    float *p = st_get_f32(f, name, n);
    st_close(f);
    return p;
}

/* replay MIXER on refs group PREFIX, compare each of `names` with PREFIX<name> in the ref file */
static void check_group(const char *seed, const char *mixer, const char *prefix,
                        const char *const *names, int nn) {
    char ref[512], out[512], *log = NULL;
    ref_path(ref, sizeof ref, seed);
    char *dir = test_tmpdir();
    snprintf(out, sizeof out, "%s/out.safetensors", dir);
    int rc = run_mixscope(&log, "-c 'replay %s %s prefix=%s out=%s'", mixer, ref, prefix, out);
    if (rc != 0) fail_msg("replay %s: exit %d: %s", mixer, rc, log);
    assert_non_null(strstr(log, "prefill vs step"));
    st_file *rf = NULL;
    err e = {{0}};
    if (st_open(&rf, ref, &e)) fail_msg("%s", e.msg);
    for (int i = 0; i < nn; i++) {
        char full[128];
        snprintf(full, sizeof full, "%s%s", prefix, names[i]);
        int64_t n1, n2;
        float *got = read_out(out, names[i], &n1);
        float *want = st_get_f32(rf, full, &n2);
        assert_int_equal(n1, n2);
        double r = rel_err(got, want, (size_t)n1);
        print_message("  %s %s %s: rel err %.2e\n", seed, mixer, names[i], r);
        assert_true(r < 1e-5);
        free(got), free(want);
    }
    st_close(rf);
    free(log);
    test_rmdir(dir);
}

static void test_refs(void **st) {
    (void)st;
    static const char *const o_h[] = {"o", "hT"}, *const o_only[] = {"o"};
    const char *seeds[] = {"ops-seed11.safetensors", "ops-seed12.safetensors"};
    for (int s = 0; s < 2; s++) {
        check_group(seeds[s], "gdn", "gdr.", (const char *const *)o_h, 2);
        check_group(seeds[s], "gla", "gla.", (const char *const *)o_h, 2);
        check_group(seeds[s], "parallax", "plx.", (const char *const *)o_only, 1);
        /* sgla. has g (one log-decay per head): the Mamba2 SSD core in linear-attention form */
        check_group(seeds[s], "mamba2", "sgla.", (const char *const *)o_h, 2);
    }
}

/* the probes come out as probe.<name> [B, T, H] */
static void test_probes_written(void **st) {
    (void)st;
    char ref[512], out[512];
    ref_path(ref, sizeof ref, "ops-seed11.safetensors");
    char *dir = test_tmpdir();
    snprintf(out, sizeof out, "%s/p.safetensors", dir);
    /* kaczmarz reads eta: the gdr. group has beta, so it is named as missing */
    char *log = NULL;
    assert_int_equal(run_mixscope(&log, "-c 'replay kaczmarz %s prefix=gdr. out=%s'", ref, out), 1);
    assert_non_null(strstr(log, "missing tensor 'gdr.eta'"));
    free(log);
    assert_int_equal(run_mixscope(NULL, "-c 'replay gdn %s prefix=gdr. out=%s'", ref, out), 0);
    st_file *f = NULL;
    err e = {{0}};
    assert_int_equal(st_open(&f, out, &e), 0);
    const tensor *b = st_find(f, "probe.beta");
    assert_non_null(b);
    assert_int_equal(b->ndim, 3);
    assert_int_equal(b->shape[1], 100);
    assert_int_equal(b->shape[2], 2);
    /* probe.beta is the input beta itself for gdn */
    st_file *rf = NULL;
    assert_int_equal(st_open(&rf, ref, &e), 0);
    int64_t n1, n2;
    float *got = st_get_f32(f, "probe.beta", &n1), *want = st_get_f32(rf, "gdr.beta", &n2);
    assert_int_equal(n1, n2);
    assert_true(rel_err(got, want, (size_t)n1) < 1e-7);
    free(got), free(want);
    st_close(rf);
    st_close(f);
    test_rmdir(dir);
}

/* writes a small gdn input file; `bad` picks the defect */
static void write_inputs(const char *path, int bad) {
    err e = {{0}};
    int64_t sk[4] = {1, 5, 2, 4}, sv[4] = {1, 5, 2, 3}, sg[3] = {1, 5, 2}, sbad[4] = {1, 5, 3, 4};
    tensor *t[5];
    t[0] = tensor_new("q", DT_F32, 4, sk, &e);
    t[1] = tensor_new("k", DT_F32, 4, bad == 2 ? sbad : sk, &e);
    t[2] = tensor_new("v", bad == 3 ? DT_I32 : DT_F32, 4, sv, &e);
    t[3] = tensor_new("g", DT_F32, 3, sg, &e);
    t[4] = tensor_new("beta", DT_F32, 3, sg, &e);
    if (bad == 4) ((float *)t[0]->data)[3] = NAN; /* bad 4: a NaN query: a NaN output */
    int n = bad == 1 ? 4 : 5;                     /* bad 1: no beta */
    assert_int_equal(st_write(path, (const tensor *const *)t, n, NULL, &e), 0);
    for (int i = 0; i < 5; i++) tensor_free(t[i]);
}

static void expect_error(const char *args, const char *needle) {
    char *log = NULL;
    int rc = run_mixscope(&log, "%s", args);
    if (rc != 1 || !strstr(log, needle) || !strstr(log, "mixscope: "))
        fail_msg("'%s': exit %d, wanted 1 and '%s' in: %s", args, rc, needle, log);
    /* one line */
    char *nl = strchr(log, '\n');
    assert_true(nl == NULL || nl[1] == '\0');
    free(log);
}

static void test_bad_inputs(void **st) {
    (void)st;
    char *dir = test_tmpdir();
    char p[512], cmd[1200];
    const char *cases[][2] = {
        {"1", "missing tensor 'beta'"},
        {"2", "tensor 'k': shape [1, 5, 3, 4], expected [1, 5, 2, 4]"},
        {"3", "tensor 'v': dtype I32, expected a float tensor"},
    };
    for (int i = 0; i < 3; i++) {
        snprintf(p, sizeof p, "%s/in%d.safetensors", dir, i);
        write_inputs(p, atoi(cases[i][0]));
        snprintf(cmd, sizeof cmd, "-c 'replay gdn %s'", p);
        expect_error(cmd, cases[i][1]);
    }
    /* a non-finite output fails as step and run do (the file is written for inspection) */
    snprintf(p, sizeof p, "%s/nan.safetensors", dir);
    write_inputs(p, 4);
    snprintf(cmd, sizeof cmd, "-c 'replay gdn %s out=%s/nan-out.safetensors'", p, dir);
    char *log = NULL;
    assert_int_equal(run_mixscope(&log, "%s", cmd), 1);
    expect_has(log, "non-finite values in the output (written for inspection)");
    free(log);
    /* Kalman's a, p and lambda_v: what mixer mode refuses, replay refuses */
    {
        err e = {{0}};
        int64_t sq[3] = {1, 3, 3}, sv[3] = {1, 3, 2}, sp[2] = {2, 3};
        tensor *k[6] = {
            tensor_new("q", DT_F32, 3, sq, &e), tensor_new("k", DT_F32, 3, sq, &e),
            tensor_new("v", DT_F32, 3, sv, &e), tensor_new("a", DT_F32, 2, sp, &e),
            tensor_new("p", DT_F32, 2, sp, &e), tensor_new("lambda_v", DT_F32, 3, sv, &e)};
        for (int i = 0; i < 6; i++) assert_non_null(k[i]);
        for (int i = 0; i < 6; i++) ((float *)k[3]->data)[i] = 0.9f;
        for (int i = 0; i < 6; i++) ((float *)k[5]->data)[i] = 1.0f;
        ((float *)k[3]->data)[4] = -5.0f;
        snprintf(p, sizeof p, "%s/kal-a.safetensors", dir);
        assert_int_equal(st_write(p, (const tensor *const *)k, 6, NULL, &e), 0);
        snprintf(cmd, sizeof cmd, "-c 'replay kalman %s'", p);
        expect_error(cmd, "tensor 'a'[4] = -5: a must lie in (0, 1]");
        ((float *)k[3]->data)[4] = 0.9f;
        ((float *)k[5]->data)[2] = -1.0f;
        snprintf(p, sizeof p, "%s/kal-lv.safetensors", dir);
        assert_int_equal(st_write(p, (const tensor *const *)k, 6, NULL, &e), 0);
        snprintf(cmd, sizeof cmd, "-c 'replay kalman %s'", p);
        expect_error(cmd, "tensor 'lambda_v'[2] = -1: lambda_v must be > 0");
        for (int i = 0; i < 6; i++) tensor_free(k[i]);
    }
    snprintf(p, sizeof p, "%s/ok.safetensors", dir);
    write_inputs(p, 0);
    snprintf(cmd, sizeof cmd, "-c 'replay nosuch %s'", p);
    expect_error(cmd, "unknown mixer 'nosuch'");
    snprintf(cmd, sizeof cmd, "-c 'replay gdn %s out=/nonexistent/dir/o.safetensors'", p);
    expect_error(cmd, "/nonexistent/dir/o.safetensors");
    snprintf(cmd, sizeof cmd, "-c 'replay gdn %s chnk=16'", p);
    expect_error(cmd, "unknown option 'chnk'");
    snprintf(cmd, sizeof cmd, "-c 'replay gdn %s/missing.safetensors'", dir);
    expect_error(cmd, "missing.safetensors");
    snprintf(cmd, sizeof cmd, "-c 'replay gdn'");
    expect_error(cmd, "usage: replay");
    snprintf(cmd, sizeof cmd, "-c 'replay gdn %s out=%s/o.safetensors'", p, dir);
    assert_int_equal(run_mixscope(NULL, "%s", cmd), 0);
    test_rmdir(dir);
}

/* The delta rule's baseline and AVX2 builds (MIXSCOPE_NO_AVX2) give the same bits: output,
 * state and every probe of a replay. */
static void test_avx2_same_bits(void **st) {
    (void)st;
    char ref[512], a[512], b[512];
    ref_path(ref, sizeof ref, "ops-seed12.safetensors");
    char *dir = test_tmpdir();
    snprintf(a, sizeof a, "%s/a.safetensors", dir), snprintf(b, sizeof b, "%s/b.safetensors", dir);
    assert_int_equal(run_mixscope(NULL, "-c 'replay gdn %s prefix=gdr. out=%s'", ref, a), 0);
    setenv("MIXSCOPE_NO_AVX2", "1", 1);
    assert_int_equal(run_mixscope(NULL, "-c 'replay gdn %s prefix=gdr. out=%s'", ref, b), 0);
    unsetenv("MIXSCOPE_NO_AVX2");
    FILE *fa = fopen(a, "rb"), *fb = fopen(b, "rb");
    assert_non_null(fa), assert_non_null(fb);
    int ca, cb;
    long n = 0;
    do {
        ca = fgetc(fa), cb = fgetc(fb), n++;
        if (ca != cb) fail_msg("the two builds differ at byte %ld", n);
    } while (ca != EOF);
    assert_true(n > 1000);
    fclose(fa), fclose(fb);
    test_rmdir(dir);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_refs),
        cmocka_unit_test(test_probes_written),
        cmocka_unit_test(test_bad_inputs),
        cmocka_unit_test(test_avx2_same_bits),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
