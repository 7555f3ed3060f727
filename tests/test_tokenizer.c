/* test_tokenizer.c: tokenizer.json against the reference library (tokenizer/hf.h).
 *
 * tests/tokenizers/ holds three tokenizers trained with huggingface/tokenizers and the ids it gives
 * 313 strings (Unicode, whitespace runs, digits, emoji, special-token text, random mixes), with
 * and without the post-processor's special tokens, and its decodings (tools/tokenizer_refs.py).
 * Every string must give exactly the same ids and decode to exactly the same text. Then bad
 * files are refused in words. */
#include "tests/testutil.h"

#include <cjson/cJSON.h>

#include "core/fileio.h"
#include "tokenizer/hf.h"

static cJSON *g_exp;

static int setup(void **st) {
    (void)st;
    const char *root = getenv("MIXSCOPE_ROOT");
    if (root && *root && chdir(root) != 0) return -1;
    char *text = NULL;
    size_t n = 0;
    err e = {{0}};
    if (file_read_all("tests/tokenizers/expected.json", 64u << 20, &text, &n, &e)) return -1;
    g_exp = cJSON_ParseWithLength(text, n);
    free(text);
    return g_exp ? 0 : -1;
}

static int teardown(void **st) {
    (void)st;
    cJSON_Delete(g_exp);
    return 0;
}

static void check_one(const char *name) {
    char path[256];
    snprintf(path, sizeof path, "tests/tokenizers/%s.json", name);
    hf_tok *t = NULL;
    err e = {{0}};
    if (hf_load(&t, path, &e)) fail_msg("%s", e.msg);
    const cJSON *S = cJSON_GetObjectItem(g_exp, "strings"), *X = cJSON_GetObjectItem(g_exp, name);
    const cJSON *ids = cJSON_GetObjectItem(X, "ids"),
                *ids0 = cJSON_GetObjectItem(X, "ids_nospecial");
    const cJSON *dec = cJSON_GetObjectItem(X, "decoded");
    int n = cJSON_GetArraySize(S), bad = 0;
    for (int i = 0; i < n; i++) {
        const char *s = cJSON_GetArrayItem(S, i)->valuestring;
        for (int sp = 1; sp >= 0; sp--) {
            const cJSON *want = cJSON_GetArrayItem(sp ? ids : ids0, i);
            int32_t *got;
            int ng;
            if (hf_encode(t, s, strlen(s), sp, &got, &ng, &e)) fail_msg("%s", e.msg);
            int same = ng == cJSON_GetArraySize(want);
            for (int k = 0; same && k < ng; k++)
                same = got[k] == (int32_t)cJSON_GetArrayItem(want, k)->valuedouble;
            if (!same && bad++ < 5) {
                char *w = cJSON_PrintUnformatted(want);
                printf("%s string %d \"%s\" special=%d: want %s, got", name, i, s, sp, w);
                for (int k = 0; k < ng; k++) printf(" %d", got[k]);
                printf("\n");
                free(w);
            }
            if (sp && same) { /* decoding the library's ids gives the library's text */
                char *d = hf_decode(t, got, ng, &e);
                const char *wd = cJSON_GetArrayItem(dec, i)->valuestring;
                if (!d) fail_msg("%s", e.msg);
                if (strcmp(d, wd) && bad++ < 5)
                    printf("%s string %d: decoded \"%s\", want \"%s\"\n", name, i, d, wd);
                free(d);
            }
            free(got);
        }
    }
    printf("%s: %d strings, %d mismatches (vocab %d)\n", name, n, bad, hf_vocab_size(t));
    assert_int_equal(bad, 0);
    hf_free(t);
}

static void test_llama(void **st) {
    (void)st;
    check_one("llama");
}

static void test_gpt2(void **st) {
    (void)st;
    check_one("gpt2");
}

static void test_llama3(void **st) {
    (void)st;
    check_one("llama3");
}

static void refused(const char *json, const char *want) {
    char *d = test_tmpdir(), p[512];
    snprintf(p, sizeof p, "%s/tokenizer.json", d);
    FILE *f = fopen(p, "w");
    fputs(json, f);
    fclose(f);
    hf_tok *t = NULL;
    err e = {{0}};
    assert_int_equal(hf_load(&t, d, &e), -1);
    expect_has(e.msg, want);
    test_rmdir(d);
}

static void test_refusals(void **st) {
    (void)st;
    refused("{", "not valid JSON");
    refused("{\"model\": {\"type\": \"WordPiece\", \"vocab\": {}}}", "model type 'WordPiece'");
    refused("{\"model\": {\"type\": \"BPE\", \"vocab\": {\"a\": 0}, \"merges\": [\"a b\"]}}",
            "merges[0]");
    refused("{\"normalizer\": {\"type\": \"NFKC\"}, \"model\": {\"type\": \"BPE\", \"vocab\": "
            "{\"a\": 0}, \"merges\": []}}",
            "normalizer NFKC is not supported");
    refused("{\"pre_tokenizer\": {\"type\": \"Split\", \"pattern\": {\"Regex\": \"(\"}, "
            "\"behavior\": \"Isolated\"}, \"model\": {\"type\": \"BPE\", \"vocab\": {\"a\": 0}, "
            "\"merges\": []}}",
            "regex at offset");
    refused("{\"model\": {\"type\": \"BPE\", \"vocab\": {\"a\": -3}, \"merges\": []}}", "no id");
    hf_tok *t = NULL;
    err e = {{0}};
    assert_int_equal(hf_load(&t, "/nonexistent/tokenizer.json", &e), -1);
    /* an id outside the vocabulary on decode */
    assert_int_equal(hf_load(&t, "tests/tokenizers/gpt2.json", &e), 0);
    int32_t ids[2] = {5, 99999};
    assert_null(hf_decode(t, ids, 2, &e));
    expect_has(e.msg, "id 99999 is outside the vocabulary");
    hf_free(t);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_llama),
        cmocka_unit_test(test_gpt2),
        cmocka_unit_test(test_llama3),
        cmocka_unit_test(test_refusals),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
