/* test_config.c: config.json getters (defaults, null as absent, type errors naming the key and the
 * file, invalid JSON) and every reference config.json. */
#include "testutil.h"

#include "core/config.h"
#include "core/fileio.h"

static const char TEXT[] = "{\n"
                           "  \"hidden_size\": 64,\n"
                           "  \"num_v_heads\": null,\n"
                           "  \"expand_v\": 2.0,\n"
                           "  \"half\": 0.5,\n"
                           "  \"neg\": -3,\n"
                           "  \"huge\": 1e16,\n"
                           "  \"norm_eps\": 1e-06,\n"
                           "  \"use_gate\": true,\n"
                           "  \"fuse_norm\": false,\n"
                           "  \"model_type\": \"gated_deltanet\",\n"
                           "  \"name\": \"\",\n"
                           "  \"count\": \"4\",\n"
                           "  \"dims\": [1, 2],\n"
                           "  \"sub\": {\"a\": 1},\n"
                           "  \"Hidden_Size\": 7\n"
                           "}\n";

static void test_getters(void **state) {
    (void)state;
    config c;
    err e = {{0}};
    if (config_parse(&c, TEXT, "cfg.json", &e)) fail_msg("%s", e.msg);
    long l = 0;
    double d = 0;
    int b = -1;
    char buf[64];

    assert_int_equal(config_int(&c, "hidden_size", 1, &l, &e), 0);
    assert_int_equal(l, 64);
    assert_int_equal(config_int(&c, "Hidden_Size", 1, &l, &e), 0); /* keys are case-sensitive */
    assert_int_equal(l, 7);
    assert_int_equal(config_int(&c, "neg", 1, &l, &e), 0);
    assert_int_equal(l, -3);
    assert_int_equal(config_int(&c, "expand_v", 1, &l, &e), 0); /* 2.0 is an integer value */
    assert_int_equal(l, 2);
    /* absent and null keys give the default */
    assert_int_equal(config_int(&c, "missing", 11, &l, &e), 0);
    assert_int_equal(l, 11);
    assert_int_equal(config_int(&c, "num_v_heads", 12, &l, &e), 0);
    assert_int_equal(l, 12);
    assert_int_equal(config_float(&c, "num_v_heads", 0.25, &d, &e), 0);
    assert_true(d == 0.25);
    assert_int_equal(config_bool(&c, "num_v_heads", 1, &b, &e), 0);
    assert_int_equal(b, 1);
    assert_int_equal(config_str(&c, "num_v_heads", "dflt", buf, sizeof buf, &e), 0);
    assert_string_equal(buf, "dflt");
    assert_int_equal(config_str(&c, "missing", NULL, buf, sizeof buf, &e), 0);
    assert_string_equal(buf, "");

    assert_int_equal(config_float(&c, "norm_eps", 0, &d, &e), 0);
    assert_true(d == 1e-6);
    assert_int_equal(config_float(&c, "hidden_size", 0, &d, &e), 0); /* an integer is a number */
    assert_true(d == 64.0);
    assert_int_equal(config_float(&c, "missing", 1.5, &d, &e), 0);
    assert_true(d == 1.5);

    assert_int_equal(config_bool(&c, "use_gate", 0, &b, &e), 0);
    assert_int_equal(b, 1);
    assert_int_equal(config_bool(&c, "fuse_norm", 1, &b, &e), 0);
    assert_int_equal(b, 0);
    assert_int_equal(config_bool(&c, "missing", 0, &b, &e), 0);
    assert_int_equal(b, 0);

    assert_int_equal(config_str(&c, "model_type", "x", buf, sizeof buf, &e), 0);
    assert_string_equal(buf, "gated_deltanet");
    assert_int_equal(config_str(&c, "name", "x", buf, sizeof buf, &e), 0); /* "" is a value */
    assert_string_equal(buf, "");

    assert_int_equal(config_has(&c, "hidden_size"), 1);
    assert_int_equal(config_has(&c, "use_gate"), 1);
    assert_int_equal(config_has(&c, "fuse_norm"), 1); /* false is present */
    assert_int_equal(config_has(&c, "num_v_heads"), 0);
    assert_int_equal(config_has(&c, "missing"), 0);
    assert_int_equal(config_has(&c, "hidden_SIZE"), 0);
    config_free(&c);
}

/* A wrong type is an error naming the file and the key; the output is left alone. */
enum { G_INT, G_FLOAT, G_BOOL, G_STR };

static void test_type_errors(void **state) {
    (void)state;
    config c;
    err e = {{0}};
    assert_int_equal(config_parse(&c, TEXT, "cfg.json", &e), 0);
    static const struct {
        int getter;
        const char *key, *want;
    } cases[] = {
        {G_INT, "half", "cfg.json: key 'half' must be an integer"},
        {G_INT, "count", "cfg.json: key 'count' must be an integer"},
        {G_INT, "use_gate", "cfg.json: key 'use_gate' must be an integer"},
        {G_INT, "huge", "cfg.json: key 'huge' must be an integer"},
        {G_INT, "dims", "cfg.json: key 'dims' must be an integer"},
        {G_INT, "sub", "cfg.json: key 'sub' must be an integer"},
        {G_INT, "model_type", "cfg.json: key 'model_type' must be an integer"},
        {G_FLOAT, "model_type", "cfg.json: key 'model_type' must be a number"},
        {G_FLOAT, "fuse_norm", "cfg.json: key 'fuse_norm' must be a number"},
        {G_FLOAT, "dims", "cfg.json: key 'dims' must be a number"},
        {G_BOOL, "hidden_size", "cfg.json: key 'hidden_size' must be true or false"},
        {G_BOOL, "model_type", "cfg.json: key 'model_type' must be true or false"},
        {G_STR, "hidden_size", "cfg.json: key 'hidden_size' must be a string"},
        {G_STR, "use_gate", "cfg.json: key 'use_gate' must be a string"},
        {G_STR, "sub", "cfg.json: key 'sub' must be a string"},
        {G_STR, "model_type", "cfg.json: key 'model_type' is too long"}, /* 14 chars, buf 8 */
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        long l = 99;
        double d = 99;
        int b = 99;
        char buf[8] = "keep";
        err ei = {{0}};
        int rc;
        switch (cases[i].getter) {
        case G_INT:
            rc = config_int(&c, cases[i].key, 0, &l, &ei);
            break;
        case G_FLOAT:
            rc = config_float(&c, cases[i].key, 0, &d, &ei);
            break;
        case G_BOOL:
            rc = config_bool(&c, cases[i].key, 0, &b, &ei);
            break;
        default:
            rc = config_str(&c, cases[i].key, "", buf, sizeof buf, &ei);
            break;
        }
        assert_int_equal(rc, -1);
        assert_string_equal(ei.msg, cases[i].want);
        assert_int_equal(l, 99);
        assert_true(d == 99);
        assert_int_equal(b, 99);
        assert_string_equal(buf, "keep");
    }
    /* a default longer than the buffer is an error too; exactly fitting is not */
    char buf[8];
    assert_int_equal(config_str(&c, "missing", "much too long", buf, sizeof buf, &e), -1);
    assert_string_equal(e.msg, "cfg.json: key 'missing' is too long");
    assert_int_equal(config_str(&c, "missing", "1234567", buf, sizeof buf, &e), 0);
    assert_string_equal(buf, "1234567");
    config_free(&c);
}

static void test_invalid_json(void **state) {
    (void)state;
    struct {
        const char *text, *want;
    } cases[] = {
        {"", "bad.json: invalid JSON"},
        {"{", "bad.json: invalid JSON"},
        {"{\"a\": }", "bad.json: invalid JSON"},
        {"{\"a\": 1,}", "bad.json: invalid JSON"},
        {"{'a': 1}", "bad.json: invalid JSON"},
        {"[1, 2]", "bad.json: not a JSON object"},
        {"3", "bad.json: not a JSON object"},
        {"null", "bad.json: not a JSON object"},
        {"\"text\"", "bad.json: not a JSON object"},
        /* what cJSON took and RFC 8259 (and Python, and Hugging Face) do not */
        {"{\"a\": 1, \"a\": 2}", "bad.json: invalid JSON at byte 9: a key twice in one object"},
        {"{\"a\": 01}", "bad.json: invalid JSON at byte 6: a number with a leading zero"},
        {"{\"a\": \"x\ty\"}", "bad.json: invalid JSON at byte 8: a raw control character"},
        {"{\"a\": \"\xff\"}", "bad.json: invalid JSON at byte 7: invalid UTF-8"},
        {"{\"a\": \"\xc0\xaf\"}", "bad.json: invalid JSON at byte 7: invalid UTF-8"},
        {"\xef\xbb\xbf{\"a\": 1}", "bad.json: invalid JSON at byte 0: a byte-order mark"},
        {"{\"a\": \"x\\u0000y\"}", "bad.json: invalid JSON at byte 8: \\u0000 in a string"},
        {"{\"a\": \"\\ud800\"}", "bad.json: invalid JSON at byte 7: an unpaired surrogate"},
        {"{\"a\": 1} x", "bad.json: invalid JSON at byte 9: something after the value"},
        {"{\"a\": +1}", "bad.json: invalid JSON at byte 6: a bad number"},
        {"{\"a\": 1.}", "bad.json: invalid JSON at byte 6: a bad number"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        config c;
        err e = {{0}};
        assert_int_equal(config_parse(&c, cases[i].text, "bad.json", &e), -1);
        if (strncmp(e.msg, cases[i].want, strlen(cases[i].want)) != 0)
            fail_msg("'%s': got '%s', want '%s...'", cases[i].text, e.msg, cases[i].want);
        assert_null(c.root);
        /* getters on a failed config give defaults; freeing it is harmless */
        long l;
        assert_int_equal(config_int(&c, "x", 5, &l, &e), 0);
        assert_int_equal(l, 5);
        assert_int_equal(config_has(&c, "x"), 0);
        config_free(&c);
    }
}

static void test_load_files(void **state) {
    (void)state;
    char *dir = test_tmpdir();
    char *good = path_join(dir, "config.json"), *bad = path_join(dir, "broken.json");
    char *none = path_join(dir, "none.json");
    err e = {{0}};
    assert_int_equal(file_write_atomic(good, TEXT, strlen(TEXT), &e), 0);
    assert_int_equal(file_write_atomic(bad, "{\"a\": [1, 2}", 12, &e), 0);
    config c;
    assert_int_equal(config_load(&c, good, &e), 0);
    assert_string_equal(c.path, good);
    long l;
    assert_int_equal(config_int(&c, "hidden_size", 0, &l, &e), 0);
    assert_int_equal(l, 64);
    assert_int_equal(config_int(&c, "half", 0, &l, &e), -1);
    char want[600];
    snprintf(want, sizeof want, "%s: key 'half' must be an integer", good);
    assert_string_equal(e.msg, want);
    config_free(&c);
    config_free(&c); /* twice is harmless */

    /* a NUL after the object would have ended the text there: the rest is not ignored */
    {
        char *nulp = path_join(dir, "nul.json");
        FILE *f = fopen(nulp, "wb");
        assert_non_null(f);
        fwrite("{\"a\": 1}\0 garbage", 1, 18, f);
        fclose(f);
        assert_int_equal(config_load(&c, nulp, &e), -1);
        expect_has(e.msg, "a NUL byte at byte 8");
        free(nulp);
    }
    assert_int_equal(config_load(&c, bad, &e), -1);
    snprintf(want, sizeof want, "%s: invalid JSON", bad);
    assert_int_equal(strncmp(e.msg, want, strlen(want)), 0);
    config_free(&c);
    assert_int_equal(config_load(&c, none, &e), -1);
    expect_has(e.msg, none);
    expect_has(e.msg, "No such file or directory");
    config_free(&c);
    assert_int_equal(config_load(&c, dir, &e), -1); /* a folder */
    expect_has(e.msg, dir);
    config_free(&c);
    free(good), free(bad), free(none);
    test_rmdir(dir);
}

/* Every reference config.json loads, with the values refs/README.md describes. */
static void test_refs_configs(void **state) {
    (void)state;
    static const struct {
        const char *folder, *model_type;
        long hidden, heads;
    } R[] = {
        {"gated_deltanet", "gated_deltanet", 64, 2}, {"parallax", "parallax", 64, 4},
        {"transformer", "transformer", 64, 4},       {"gla", "gla", 96, 3},
        {"delta_net", "delta_net", 64, 2},           {"mamba2", "mamba2", 32, 2},
    };
    for (size_t i = 0; i < sizeof R / sizeof R[0]; i++) {
        char rel[256], path[512], buf[64];
        snprintf(rel, sizeof rel, "%s/config.json", R[i].folder);
        config c;
        err e = {{0}};
        if (config_load(&c, ref_path(path, sizeof path, rel), &e)) fail_msg("%s", e.msg);
        long l;
        assert_int_equal(config_str(&c, "model_type", "", buf, sizeof buf, &e), 0);
        assert_string_equal(buf, R[i].model_type);
        assert_int_equal(config_int(&c, "hidden_size", 0, &l, &e), 0);
        assert_int_equal(l, R[i].hidden);
        assert_int_equal(config_int(&c, "num_heads", 0, &l, &e), 0);
        assert_int_equal(l, R[i].heads);
        assert_int_equal(config_int(&c, "num_hidden_layers", 0, &l, &e), 0);
        assert_int_equal(l, 2);
        assert_int_equal(config_int(&c, "vocab_size", 0, &l, &e), 0);
        assert_int_equal(l, 256);
        int tie = -1;
        assert_int_equal(config_bool(&c, "tie_word_embeddings", 1, &tie, &e), 0);
        assert_int_equal(tie, 0);
        double eps;
        assert_int_equal(config_float(&c, "norm_eps", 0, &eps, &e), 0);
        assert_true(eps == (strcmp(R[i].folder, "mamba2") == 0 ? 1e-5 : 1e-6));
        config_free(&c);
    }
    /* gated_deltanet: nulls fla writes mean "absent"; expand_v is the float 2.0 */
    char path[512];
    config c;
    err e = {{0}};
    assert_int_equal(config_load(&c, ref_path(path, sizeof path, "gated_deltanet/config.json"), &e),
                     0);
    long l;
    double d;
    int b;
    assert_int_equal(config_has(&c, "num_v_heads"), 0);
    assert_int_equal(config_int(&c, "num_v_heads", 2, &l, &e), 0);
    assert_int_equal(l, 2);
    assert_int_equal(config_has(&c, "intermediate_size"), 0);
    assert_int_equal(config_float(&c, "expand_v", 0, &d, &e), 0);
    assert_true(d == 2.0);
    assert_int_equal(config_int(&c, "head_dim", 0, &l, &e), 0);
    assert_int_equal(l, 32);
    assert_int_equal(config_bool(&c, "use_gate", 0, &b, &e), 0);
    assert_int_equal(b, 1);
    assert_int_equal(config_bool(&c, "use_short_conv", 0, &b, &e), 0);
    assert_int_equal(b, 1);
    /* "architectures" is a list: asking for a string is an error naming the key */
    char buf[64];
    assert_int_equal(config_str(&c, "architectures", "", buf, sizeof buf, &e), -1);
    expect_has(e.msg, "gated_deltanet/config.json: key 'architectures' must be a string");
    config_free(&c);
    /* mamba2: dt_limit holds an object; a number getter refuses it */
    assert_int_equal(config_load(&c, ref_path(path, sizeof path, "mamba2/config.json"), &e), 0);
    assert_int_equal(config_float(&c, "dt_limit", 0, &d, &e), -1);
    expect_has(e.msg, "key 'dt_limit' must be a number");
    assert_int_equal(config_int(&c, "state_size", 0, &l, &e), 0);
    assert_int_equal(l, 8);
    config_free(&c);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_getters),      cmocka_unit_test(test_type_errors),
        cmocka_unit_test(test_invalid_json), cmocka_unit_test(test_load_files),
        cmocka_unit_test(test_refs_configs),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
