/* test_engine.c: the stepping engine (engine/engine.h) on its own, without the command line:
 * the probe selection decides what is recorded and never what is computed, step in pieces equals
 * one run, the thread count changes no bit, the recall readback is recorded where it is wanted,
 * a swapped comparison leaves the model as it was, and bad selections are refused. */
#include "tests/testutil.h"

#include "core/pool.h"
#include "engine/engine.h"
#include "scenes/stream.h"
#include "tests/tmodel.h"

static const char *const KV[] = {"layers=2",    "hidden=64", "heads=4",
                                 "head_dim=32", "vocab=97",  "seed=5"};
/* attention: hidden = heads * head_dim */
static const char *const KV_ATTN[] = {"layers=2",    "hidden=64", "heads=2",
                                      "head_dim=32", "vocab=97",  "seed=5"};
enum { T = 40 };

static void model_engine(engine *g, const char *mixer, const char *probes) {
    err e = {{0}};
    assert_int_equal(engine_init(g, &e), 0);
    int attn = !strcmp(mixer, "softmax") || !strcmp(mixer, "parallax");
    model *m = random_model(mixer, attn ? KV_ATTN : KV, 6);
    assert_int_equal(engine_set_model(g, m, NULL, 0, &e), 0);
    int32_t ids[T];
    for (int i = 0; i < T; i++) ids[i] = (int32_t)((i * 31 + 7) % 97);
    assert_int_equal(engine_set_tokens(g, ids, T, &e), 0);
    if (engine_set_probes(g, probes, &e)) fail_msg("set probes %s: %s", probes, e.msg);
}

/* The selection changes what the trace holds, not the numbers. */
static void test_selection_records_not_computes(void **state) {
    (void)state;
    const char *mixers[] = {"gdn", "kaczmarz", "gla", "mamba2", "softmax", "parallax"};
    for (size_t i = 0; i < sizeof mixers / sizeof mixers[0]; i++) {
        engine a, b, c;
        err e = {{0}};
        model_engine(&a, mixers[i], "default");
        model_engine(&b, mixers[i], "none");
        model_engine(&c, mixers[i], "state,resid_norm");
        assert_int_equal(engine_run(&a, 0, &e), 0);
        assert_int_equal(engine_run(&b, 0, &e), 0);
        assert_int_equal(engine_run(&c, 0, &e), 0);
        size_t n = (size_t)T * a.model->c.vocab * sizeof(float);
        assert_memory_equal(a.logits, b.logits, n);
        assert_memory_equal(a.logits, c.logits, n);
        assert_true(a.tr.nseries > 3);
        assert_int_equal(b.tr.nseries, 0); /* none: not even k and v */
        assert_int_equal(b.tr.nsnap, 0);
        assert_true(trace_find(&c.tr, "resid_norm") >= 0);
        assert_true(trace_find(&c.tr, "k") >= 0);
        assert_int_equal(trace_find(&c.tr, "o_norm"), -1);
        if (strcmp(mixers[i], "softmax") && strcmp(mixers[i], "parallax"))
            assert_true(trace_find_snapshot(&c.tr, "state") >= 0);
        engine_free(&a), engine_free(&b), engine_free(&c);
    }
}

/* step in pieces == one run; threads 1 == threads 2 (bit for bit). */
static void test_pieces_and_threads(void **state) {
    (void)state;
    engine a, b;
    err e = {{0}};
    assert_int_equal(engine_set_threads(1, &e), 0);
    model_engine(&a, "gdn", "default");
    assert_int_equal(engine_run(&a, 0, &e), 0);
    assert_int_equal(engine_set_threads(2, &e), 0);
    model_engine(&b, "gdn", "default");
    assert_int_equal(engine_step(&b, 7, &e), 0);
    assert_int_equal(engine_pos(&b), 7);
    assert_int_equal(engine_step(&b, 100, &e), 0); /* clamped to what is left */
    assert_int_equal(engine_pos(&b), T);
    assert_int_equal(engine_step(&b, 1, &e), -1);
    expect_has(e.msg, "all 40 tokens have run");
    assert_memory_equal(a.logits, b.logits, (size_t)T * a.model->c.vocab * sizeof(float));
    assert_memory_equal(a.top, b.top, T * sizeof *a.top);
    int ka = trace_find(&a.tr, "rho"), kb = trace_find(&b.tr, "rho");
    assert_true(ka >= 0 && kb >= 0);
    assert_memory_equal(trace_at(&a.tr, ka, T - 1), trace_at(&b.tr, kb, T - 1),
                        2 * 4 * sizeof(float)); /* layers x heads */
    /* reset: the same tokens again give the same numbers */
    float last = a.logits[(size_t)(T - 1) * a.model->c.vocab];
    assert_int_equal(engine_reset(&a, &e), 0);
    assert_int_equal(engine_pos(&a), 0);
    assert_int_equal(a.tr.T, 0);
    assert_int_equal(engine_run(&a, 0, &e), 0);
    assert_true(a.logits[(size_t)(T - 1) * a.model->c.vocab] == last);
    assert_int_equal(engine_set_threads(0, &e), 0);
    engine_free(&a), engine_free(&b);
}

/* The readback picture: recorded by default (delta family), not under a list without it. */
static void test_recall_selection(void **state) {
    (void)state;
    engine a, b;
    err e = {{0}};
    model_engine(&a, "kaczmarz", "default");
    model_engine(&b, "kaczmarz", "rho");
    assert_int_equal(engine_run(&a, 0, &e), 0);
    assert_int_equal(engine_run(&b, 0, &e), 0);
    int k = trace_find(&a.tr, "recall");
    assert_true(k >= 0);
    assert_false(isnan(*trace_at_lh(&a.tr, k, T - 1, 1, 0))); /* the newest key, layer 1 */
    assert_int_equal(trace_find(&b.tr, "recall"), -1);
    engine_free(&a), engine_free(&b);
}

/* Raw lanes: the stream series always, the core probes as selected. */
static void test_raw_selection(void **state) {
    (void)state;
    engine g;
    err e = {{0}};
    char specs[2][64] = {"gdn", "kaczmarz"};
    raw_stream st;
    assert_int_equal(engine_init(&g, &e), 0);
    assert_int_equal(engine_raw_select(&g, specs, 2, "", 2, 8, 8, &e), 0);
    assert_int_equal(stream_recall(&st, 10, 10, 2, 8, 8, 1.0, 1.0, 3, &e), 0);
    assert_int_equal(engine_raw_stream(&g, &st, &e), 0);
    assert_int_equal(engine_set_probes(&g, "rho", &e), 0);
    assert_int_equal(engine_run(&g, 0, &e), 0);
    assert_true(trace_find(&g.tr, "rho") >= 0);
    assert_true(trace_find(&g.tr, "recall_err") >= 0);
    assert_int_equal(trace_find(&g.tr, "beta"), -1);
    assert_int_equal(trace_find_snapshot(&g.tr, "state"), -1);
    /* a query's recall error is there whatever the selection */
    int k = trace_find(&g.tr, "recall_err");
    assert_false(isnan(*trace_at_lh(&g.tr, k, 15, 1, 0)));
    /* too many heads for raw mode: refused, not cut */
    assert_int_equal(engine_raw_select(&g, specs, 1, "", ENGINE_RAW_MAX_HEADS + 1, 8, 8, &e), -1);
    expect_has(e.msg, "at most 64");
    engine_free(&g);
}

static void test_bad_selection(void **state) {
    (void)state;
    engine g;
    err e = {{0}};
    assert_int_equal(engine_init(&g, &e), 0);
    assert_int_equal(engine_set_probes(&g, "rho,nonsense", &e), -1);
    expect_has(e.msg, "unknown probe 'nonsense'");
    assert_int_equal(engine_set_probes(&g, "rho,,beta", &e), -1);
    expect_has(e.msg, "empty name");
    assert_string_equal(engine_probes_text(&g), "default"); /* unchanged */
    assert_int_equal(engine_set_probes(&g, "beta,state,recall,attn,dt", &e), 0);
    assert_string_equal(engine_probes_text(&g), "beta,state,recall,attn,dt");
    assert_string_equal(engine_probe_cost("gdn", "rho"), "O(d^2)");
    assert_string_equal(engine_probe_cost("parallax", "cor"), "expensive");
    assert_string_equal(engine_probe_cost("gla", "recall"), "expensive");
    assert_string_equal(engine_probe_cost("gdn", "recall"), "O(d^2)");
    assert_string_equal(engine_probe_cost(NULL, "resid_norm"), "cheap");
    engine_free(&g);
}

/* try_cores: another core's numbers, then the model exactly as before. */
static void test_try_cores(void **state) {
    (void)state;
    engine g;
    err e = {{0}};
    model_engine(&g, "gdn", "default");
    assert_int_equal(engine_run(&g, 0, &e), 0);
    size_t n = (size_t)T * g.model->c.vocab;
    float *before = malloc(n * sizeof *before), *other = malloc(n * sizeof *other);
    memcpy(before, g.logits, n * sizeof *before);
    trace tr;
    trace_init(&tr);
    char why[200];
    assert_int_equal(engine_try_cores(&g, "kaczmarz:eps=1e-6", &tr, other, why, sizeof why, &e), 0);
    assert_true(memcmp(before, other, n * sizeof *other) != 0);
    assert_int_equal(engine_pos(&g), 0);
    assert_string_equal(g.model->layers[0].mx->name, "gdn");
    assert_int_equal(engine_run(&g, 0, &e), 0);
    assert_memory_equal(before, g.logits, n * sizeof *before);
    trace_free(&tr);
    trace_init(&tr);
    assert_int_equal(engine_try_cores(&g, "softmax", &tr, other, why, sizeof why, &e), 1);
    assert_true(strlen(why) > 0);
    trace_free(&tr);
    free(before), free(other);
    engine_free(&g);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_selection_records_not_computes),
        cmocka_unit_test(test_pieces_and_threads),
        cmocka_unit_test(test_recall_selection),
        cmocka_unit_test(test_raw_selection),
        cmocka_unit_test(test_bad_selection),
        cmocka_unit_test(test_try_cores),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
