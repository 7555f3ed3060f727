/* test_hybrid.c: hybrid models, fla's `attn` config key (models/hybrid.c).
 *
 *  - tests/models/hybrid_{gated_deltanet,gla,delta_net}: fla's float32 logits on 77 byte ids
 *    (tools/hybrid_refs.py, H200, fla bc3b101d, TF32 off, attention in float64): step and prefill
 *    against them, prefill == step, half prefill then steps;
 *  - the config's validation, as fla's: each refusal names the key and the reason;
 *  - `model random MIXER attn=...` for every linear model type (ours included: kaczmarz, kalman,
 *    kata): step == prefill, save -> load bit for bit with the attn key kept;
 *  - a session on a hybrid checkpoint: info, a run with probes whose heads differ per layer,
 *    show, export csv (lane softmax beside gdn), export png recall, swap on an attention layer. */
#include "testutil.h"

#include <unistd.h>

#include "core/fileio.h"
#include "core/safetensors.h"
#include "models/model.h"
#include "models/internal.h"
#include "models/tokenizer.h"
#include "tmodel.h"
#include "tsession.h"

static int setup(void **st) {
    (void)st;
    const char *root = getenv("MIXSCOPE_ROOT");
    return root && *root && chdir(root) != 0 ? -1 : 0;
}

/* step, prefill and half-and-half agree with each other; returns the step logits */
static float *check_paths(model *m, const int32_t *ids, int T, const char *name) {
    size_t n = (size_t)T * m->c.vocab;
    float *ls = step_logits(m, ids, T, NULL), *lp = prefill_logits(m, ids, T);
    double d = rel_err(lp, ls, n);
    err e = {{0}};
    float *lm = malloc(n * sizeof *lm);
    assert_int_equal(model_reset(m, 0, &e), 0);
    int half = T / 2;
    assert_int_equal(model_prefill(m, ids, half, lm, &e), 0);
    for (int t = half; t < T; t++)
        assert_int_equal(model_step(m, ids[t], lm + (size_t)t * m->c.vocab, NULL, &e), 0);
    double dm = rel_err(lm, ls, n);
    print_message("  %-24s prefill vs step %.2e, half and half %.2e\n", name, d, dm);
    assert_true(d < 1e-5 && dm < 1e-5);
    free(lp), free(lm);
    return ls;
}

static void check_ref(const char *name, const char *kinds) {
    char dir[256], path[320];
    snprintf(dir, sizeof dir, "tests/models/%s", name);
    err e = {{0}};
    model *m;
    if (model_load(&m, dir, &e)) fail_msg("load %s: %s", dir, e.msg);
    assert_true(model_is_hybrid(m));
    /* the layers are what fla built: 'a' an attention layer, 'l' the model's own */
    for (int li = 0; li < m->c.layers; li++) {
        const layer *L = &m->layers[li];
        assert_int_equal(kinds[li] == 'a', L->cfg != &m->c);
        assert_string_equal(L->mx->name, kinds[li] == 'a' ? "softmax" : L->mx->name);
    }
    snprintf(path, sizeof path, "%s/expected.safetensors", dir);
    int32_t *ids;
    int T;
    if (tok_read_file(path, "input_ids", &ids, &T, &e)) fail_msg("%s", e.msg);
    st_file *f;
    assert_int_equal(st_open(&f, path, &e), 0);
    int64_t n;
    float *want = st_get_f32(f, "logits", &n);
    st_close(f);
    assert_int_equal(n, (int64_t)T * m->c.vocab);
    float *ls = check_paths(m, ids, T, name);
    double d = rel_err(ls, want, (size_t)n);
    print_message("  %-24s logits vs fla %.2e\n", name, d);
    assert_true(d < 1e-5);
    free(ls), free(want), free(ids);
    model_free(m);
}

/* GDN layers 0 and 2, a GQA attention layer 1 (4 heads, 2 kv heads, qkv bias, rope 5000) */
static void test_ref_gated_deltanet(void **st) {
    (void)st;
    check_ref("hybrid_gated_deltanet", "lal");
}

/* attention layer 0 windowed (8 tokens), GLA layer 1, attention layer 2 with 8 heads, 1 kv head */
static void test_ref_gla(void **st) {
    (void)st;
    check_ref("hybrid_gla", "ala");
}

static void test_ref_delta_net(void **st) {
    (void)st;
    check_ref("hybrid_delta_net", "al");
}

/* fla's validation of `attn`, each refusal in words */
static void test_config_refusals(void **st) {
    (void)st;
    char *base;
    err e = {{0}};
    assert_int_equal(
        file_read_all("tests/models/hybrid_gated_deltanet/config.json", 1 << 20, &base, NULL, &e),
        0);
    static const struct {
        const char *attn, *want;
    } CASES[] = {
        {"{\"layers\": [1, 1], \"num_heads\": 4}", "layer 1 is listed twice"},
        {"{\"layers\": [3], \"num_heads\": 4}", "layer 3 is out of range [0, 3)"},
        {"{\"layers\": [-1], \"num_heads\": 4}", "out of range"},
        {"{\"layers\": [1.5], \"num_heads\": 4}", "integer layer indices"},
        {"{\"layers\": 1, \"num_heads\": 4}", "must be a list"},
        {"{\"layers\": [1]}", "field 'num_heads' is required"},
        {"{\"layers\": [1], \"num_heads\": 0}", "'num_heads' must be a positive integer"},
        {"{\"layers\": [1], \"num_heads\": 5}", "num_heads (5) must divide hidden_size (64)"},
        {"{\"layers\": [1], \"num_heads\": 4, \"num_kv_heads\": 3}",
         "num_kv_heads (3) must divide num_heads (4)"},
        {"{\"layers\": [1], \"num_heads\": 4, \"window_size\": 0}", "'window_size' must be"},
        {"{\"layers\": [1], \"num_heads\": 4, \"rope_theta\": -1}",
         "'rope_theta' must be positive"},
        {"{\"layers\": [1], \"num_heads\": 4, \"qkv_bias\": 1}",
         "'qkv_bias' must be true or false"},
        {"[{\"layers\": [1], \"num_heads\": 4}, {\"layers\": [1], \"num_heads\": 2}]",
         "specification 1: layer 1 is already an attention layer of specification 0"},
        {"[1]", "specification 0 must be an object"},
        {"\"all\"", "key 'attn' must be null, an object or a list"},
    };
    for (size_t i = 0; i < sizeof CASES / sizeof CASES[0]; i++) {
        /* the config with its attn value replaced */
        char *a = strstr(base, "\"attn\": {"), *b = a ? strstr(a, "},") : NULL;
        assert_non_null(b);
        char text[4096];
        snprintf(text, sizeof text, "%.*s\"attn\": %s%s", (int)(a - base), base, CASES[i].attn,
                 b + 1);
        model *m = NULL;
        err_clear(&e);
        assert_int_equal(model_declare(&m, text, "config.json", &e), -1);
        assert_null(m);
        expect_has(e.msg, CASES[i].want);
        assert_null(strchr(e.msg, '\n'));
    }
    free(base);
    /* model types fla builds no hybrid of */
    const char *kv[] = {"attn=1"};
    static const char *const NONE[] = {"mamba2", "softmax", "parallax"};
    for (int i = 0; i < 3; i++) {
        opts o;
        assert_int_equal(opts_parse(&o, 1, (char *const *)kv, &e), 0);
        model *m = NULL;
        assert_int_equal(model_random(&m, NONE[i], &o, &e), -1);
        expect_has(e.msg, "have no hybrid attention layers in fla");
        opts_free(&o);
    }
}

/* every linear model type takes attention layers: random, step == prefill, save -> load */
static void test_random_every_type(void **st) {
    (void)st;
    static const char *const TYPES[] = {"gdn", "deltanet", "kaczmarz", "gla", "kalman", "kata"};
    char *dir = test_tmpdir();
    for (int i = 0; i < 6; i++) {
        const char *kv[] = {"layers=3",        "hidden=64",     "attn=0,2", "attn_heads=8",
                            "attn_kv_heads=2", "attn_window=5", "seed=4"};
        model *m = random_model(TYPES[i], kv, 7);
        assert_true(model_is_hybrid(m));
        assert_true(m->layers[0].cfg != &m->c && m->layers[1].cfg == &m->c);
        assert_int_equal(m->layers[2].mc.H, 8);
        assert_int_equal(m->layers[2].mc.dk, 8);
        assert_int_equal(m->layers[2].mc.window, 5);
        int32_t ids[40];
        for (int t = 0; t < 40; t++) ids[t] = (int32_t)((t * 37 + 11) % 256);
        float *ls = check_paths(m, ids, 40, TYPES[i]);
        char path[600];
        err e = {{0}};
        snprintf(path, sizeof path, "%s/%s", dir, TYPES[i]);
        if (model_save(m, path, &e)) fail_msg("save: %s", e.msg);
        model *r;
        if (model_load(&r, path, &e)) fail_msg("load: %s", e.msg);
        assert_true(model_is_hybrid(r));
        float *lr = step_logits(r, ids, 40, NULL);
        assert_memory_equal(lr, ls, sizeof(float) * 40 * (size_t)m->c.vocab);
        free(ls), free(lr);
        model_free(r), model_free(m);
    }
    test_rmdir(dir);
}

static void exec_ok(tsession *t, const char *line) {
    err e = {{0}};
    if (ts_exec(t, &e, "%s", line)) fail_msg("%s: %s", line, e.msg);
}

/* a session on the hybrid GDN checkpoint: the layers' heads differ (2 GDN heads of 16 x 32, 4
 * attention heads of 16): probes, show, CSV, the recall figure, swap */
static void test_session(void **st) {
    (void)st;
    tsession t;
    ts_open(&t);
    char *dir = test_tmpdir(), line[1200];
    exec_ok(&t, "load tests/models/hybrid_gated_deltanet");
    exec_ok(&t, "info");
    expect_has(ts_out(&t), "layer 1: softmax core, 4 heads, dk 16, dv 16 (KV cache), hybrid");
    exec_ok(&t, "set probes all");
    exec_ok(&t, "prompt 'a rose is a rose is a rose'");
    exec_ok(&t, "run");
    exec_ok(&t, "show");
    exec_ok(&t, "show beta layer=0");
    exec_ok(&t, "show beta layer=1");
    snprintf(line, sizeof line, "export csv o_norm %s/o.csv", dir);
    exec_ok(&t, line);
    snprintf(line, sizeof line, "export png recall %s/r.png layer=2", dir);
    exec_ok(&t, line);
    snprintf(line, sizeof line, "export png parallax %s/a.png layer=1", dir);
    exec_ok(&t, line);
    char *text;
    err e = {{0}};
    snprintf(line, sizeof line, "%s/o.csv", dir);
    assert_int_equal(file_read_all(line, 1 << 20, &text, NULL, &e), 0);
    /* the lanes say which layer is which; layer 1 has 4 heads, the others 2 (heads 2, 3: nan) */
    expect_has(text, "\n0,1,3,softmax,");
    expect_has(text, "\n0,0,1,gdn,");
    expect_has(text, "\n0,0,3,gdn,o_norm,nan\n");
    free(text);
    /* the attention layer's core: softmax or parallax (W_R = 0), not a delta rule */
    exec_ok(&t, "swap 1 parallax");
    assert_int_equal(ts_exec(&t, &e, "swap 1 gdn"), -1);
    expect_has(e.msg, "an attention (hybrid) layer cannot feed the gdn mixer (it can feed: ");
    assert_int_equal(ts_exec(&t, &e, "swap 0 softmax"), -1);
    exec_ok(&t, "swap 0 kaczmarz");
    exec_ok(&t, "run");
    ts_close(&t);
    test_rmdir(dir);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_ref_gated_deltanet), cmocka_unit_test(test_ref_gla),
        cmocka_unit_test(test_ref_delta_net),      cmocka_unit_test(test_config_refusals),
        cmocka_unit_test(test_random_every_type),  cmocka_unit_test(test_session),
    };
    return cmocka_run_group_tests(tests, setup, NULL);
}
