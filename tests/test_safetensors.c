/* test_safetensors.c: the strict safetensors reader and the atomic writer.
 *
 * 1. Every reference file in ../shared/refs loads, with the names, shapes and dtypes it holds.
 * 2. Malformed files written by the test itself are rejected with the expected message, which
 *    names the file (st_open) or the label (st_open_memory).
 * 3. write -> read round trips: every dtype byte for byte, f32 <-> f16 / bf16 rounding, zero-size
 *    and scalar tensors, metadata, header padding, atomic writes, sharded checkpoints.
 * 4. SHA-256 (core/sha256.h, the checkpoint digest): the standard's vectors, the SHA extensions
 *    against the portable code on 1 MB in uneven pieces, and sha256_file.
 * Leaks are caught by running this binary under the asan build (LeakSanitizer). */
#include "testutil.h"

#include <dirent.h>
#include <sys/stat.h>

#include "core/fileio.h"
#include "core/sha256.h"
#include "core/tensor.h"
#include "tests/tgroupdir.h"

/* g_dir/name into a malloc'd string. */
static char *tmp_path(const char *name) {
    char *p = path_join(g_dir, name);
    assert_non_null(p);
    return p;
}

static void write_bytes(const char *path, const void *data, size_t n) {
    err e = {{0}};
    if (file_write_atomic(path, data, n, &e)) fail_msg("%s", e.msg);
}

/* Checks one tensor's dtype and shape (pass -1 for unused trailing dims). */
static const tensor *check_tensor(const st_file *f, const char *name, dtype dt, int64_t d0,
                                  int64_t d1, int64_t d2, int64_t d3) {
    const tensor *t = st_find(f, name);
    if (!t) fail_msg("%s: tensor '%s' missing", f->path, name);
    int64_t want[4] = {d0, d1, d2, d3};
    int nd = 0;
    while (nd < 4 && want[nd] >= 0) nd++;
    if (t->dtype != dt) fail_msg("%s: '%s' dtype %s", f->path, name, dtype_name(t->dtype));
    assert_int_equal(t->ndim, nd);
    for (int i = 0; i < nd; i++) assert_int_equal(t->shape[i], want[i]);
    int64_t n = tensor_numel(t);
    assert_int_equal(t->nbytes, (size_t)n * dtype_size(dt));
    return t;
}

/* Reads every tensor through tensor_read_f32 and returns how many values are not finite. */
static int64_t count_nonfinite(const st_file *f) {
    int64_t bad = 0;
    for (int i = 0; i < f->n; i++) {
        int64_t n;
        float *v = st_get_f32(f, f->tensors[i].name, &n);
        for (int64_t j = 0; j < n; j++) bad += !isfinite(v[j]);
        free(v);
    }
    return bad;
}

/* ---- 1. the reference files ---------------------------------------------------------------- */

static void check_ops_file(const char *rel, const char *seed) {
    char path[512];
    err e = {{0}};
    st_file *f;
    if (st_open(&f, ref_path(path, sizeof path, rel), &e)) fail_msg("%s", e.msg);
    assert_int_equal(f->n, 30);
    const int64_t T = 100, H = 2, K = 16, V = 24;
    static const char *const groups[] = {"gdr.", "gla.", "sgla."};
    char n[64];
    for (int g = 0; g < 3; g++) {
        const char *p = groups[g];
        snprintf(n, sizeof n, "%sq", p), check_tensor(f, n, DT_F32, 1, T, H, K);
        snprintf(n, sizeof n, "%sk", p), check_tensor(f, n, DT_F32, 1, T, H, K);
        snprintf(n, sizeof n, "%sv", p), check_tensor(f, n, DT_F32, 1, T, H, V);
        snprintf(n, sizeof n, "%so", p), check_tensor(f, n, DT_F32, 1, T, H, V);
        snprintf(n, sizeof n, "%sh0", p), check_tensor(f, n, DT_F32, 1, H, K, V);
        snprintf(n, sizeof n, "%shT", p), check_tensor(f, n, DT_F32, 1, H, K, V);
    }
    check_tensor(f, "gdr.g", DT_F32, 1, T, H, -1);
    check_tensor(f, "gdr.beta", DT_F32, 1, T, H, -1);
    check_tensor(f, "gdr.o_chunk_gpu", DT_F32, 1, T, H, V);
    check_tensor(f, "gdr.hT_chunk_gpu", DT_F32, 1, H, K, V);
    check_tensor(f, "gla.gk", DT_F32, 1, T, H, K);
    check_tensor(f, "sgla.g", DT_F32, 1, T, H, -1);
    static const char *const plx[] = {"plx.q", "plx.r", "plx.k", "plx.v", "plx.o", "plx.o_gpu"};
    for (int i = 0; i < 6; i++) check_tensor(f, plx[i], DT_F32, 1, T, H, K);
    assert_null(st_find(f, "gdr.nosuch"));
    /* file order is header order: the first tensor is gdr.beta at data offset 0 */
    assert_string_equal(f->tensors[0].name, "gdr.beta");
    assert_string_equal(f->tensors[29].name, "sgla.v");
    assert_non_null(f->metadata);
    char want[32];
    snprintf(want, sizeof want, "\"seed\":\"%s\"", seed);
    expect_has(f->metadata, want);
    assert_int_equal(count_nonfinite(f), 0);
    /* the values are read correctly: README says gdr.k was L2-normalised per token and head */
    int64_t nk;
    float *k = st_get_f32(f, "gdr.k", &nk);
    assert_int_equal(nk, T * H * K);
    for (int64_t r = 0; r < T * H; r++) {
        double s = 0;
        for (int64_t j = 0; j < K; j++) s += (double)k[r * K + j] * k[r * K + j];
        assert_true(fabs(sqrt(s) - 1.0) < 1e-5);
    }
    free(k);
    /* beta is a write strength in (0, 1); g a log-decay, so <= 0 */
    int64_t nb;
    float *beta = st_get_f32(f, "gdr.beta", &nb), *g = st_get_f32(f, "gdr.g", NULL);
    for (int64_t i = 0; i < nb; i++) {
        assert_true(beta[i] > 0 && beta[i] < 1);
        assert_true(g[i] <= 0);
    }
    free(beta), free(g);
    st_close(f);
}

static void test_refs_ops(void **state) {
    (void)state;
    check_ops_file("ops-seed11.safetensors", "11");
    check_ops_file("ops-seed12.safetensors", "12");
}

/* A checkpoint folder: tensor count, the first tensor in file order, a handful of shapes. */
typedef struct want_t {
    const char *name;
    int64_t d[3];
} want_t;

typedef struct model_t {
    const char *folder;
    int ntensors;
    const char *first;
    want_t w[7];
} model_t;

static const model_t MODELS[] = {
    {"gated_deltanet",
     39,
     "lm_head.weight",
     {{"model.embeddings.weight", {256, 64, -1}},
      {"lm_head.weight", {256, 64, -1}},
      {"model.layers.0.attn.A_log", {2, -1, -1}},
      {"model.layers.0.attn.o_proj.weight", {64, 128, -1}},
      {"model.layers.1.attn.v_conv1d.weight", {128, 1, 4}},
      {"model.layers.1.attn.g_proj.weight", {128, 64, -1}},
      {"model.norm.weight", {64, -1, -1}}}},
    {"delta_net",
     31,
     "lm_head.weight",
     {{"model.embeddings.weight", {256, 64, -1}},
      {"model.layers.0.attn.b_proj.weight", {2, 64, -1}},
      {"model.layers.0.attn.q_conv1d.weight", {64, 1, 4}},
      {"model.layers.1.attn.o_norm.weight", {32, -1, -1}},
      {"model.layers.1.mlp.down_proj.weight", {64, 256, -1}},
      {"model.layers.1.mlp.up_proj.weight", {256, 64, -1}},
      {"model.norm.weight", {64, -1, -1}}}},
    {"gla",
     37,
     "lm_head.weight",
     {{"model.embeddings.weight", {256, 96, -1}},
      {"model.layers.0.attn.gk_proj.0.weight", {16, 96, -1}},
      {"model.layers.0.attn.gk_proj.1.bias", {48, -1, -1}},
      {"model.layers.0.attn.gk_proj.1.weight", {48, 16, -1}},
      {"model.layers.1.attn.g_norm_swish_gate.weight", {32, -1, -1}},
      {"model.layers.1.attn.v_conv1d.weight", {96, 1, 4}},
      {"model.norm.weight", {96, -1, -1}}}},
    {"mamba2",
     21,
     "backbone.embeddings.weight",
     {{"backbone.embeddings.weight", {256, 32, -1}},
      {"backbone.layers.0.mixer.in_proj.weight", {146, 32, -1}},
      {"backbone.layers.0.mixer.D", {2, -1, -1}},
      {"backbone.layers.1.mixer.conv1d.bias", {80, -1, -1}},
      {"backbone.layers.1.mixer.out_proj.weight", {32, 64, -1}},
      {"backbone.norm_f.weight", {32, -1, -1}},
      {"lm_head.weight", {256, 32, -1}}}},
    {"parallax",
     23,
     "lm_head.weight",
     {{"model.embeddings.weight", {256, 64, -1}},
      {"model.layers.0.attn.r_proj.weight", {64, 64, -1}},
      {"model.layers.1.attn.q_proj.weight", {64, 64, -1}},
      {"model.layers.1.mlp.gate_proj.weight", {256, 64, -1}},
      {"model.layers.1.mlp.down_proj.weight", {64, 256, -1}},
      {"model.layers.0.attn_norm.weight", {64, -1, -1}},
      {"model.norm.weight", {64, -1, -1}}}},
    {"transformer",
     21,
     "lm_head.weight",
     {{"model.embeddings.weight", {256, 64, -1}},
      {"model.layers.0.attn.q_proj.weight", {64, 64, -1}},
      {"model.layers.0.attn.v_proj.weight", {64, 64, -1}},
      {"model.layers.1.mlp.gate_proj.weight", {256, 64, -1}},
      {"model.layers.1.mlp_norm.weight", {64, -1, -1}},
      {"lm_head.weight", {256, 64, -1}},
      {"model.norm.weight", {64, -1, -1}}}},
};

static void test_refs_models(void **state) {
    (void)state;
    for (size_t m = 0; m < sizeof MODELS / sizeof MODELS[0]; m++) {
        const model_t *md = &MODELS[m];
        char rel[256], path[512];
        err e = {{0}};
        st_file *f;
        snprintf(rel, sizeof rel, "%s/model.safetensors", md->folder);
        if (st_open(&f, ref_path(path, sizeof path, rel), &e)) fail_msg("%s", e.msg);
        assert_int_equal(f->n, md->ntensors);
        assert_string_equal(f->tensors[0].name, md->first);
        for (int i = 0; i < 7; i++)
            check_tensor(f, md->w[i].name, DT_F32, md->w[i].d[0], md->w[i].d[1], md->w[i].d[2], -1);
        for (int i = 0; i < f->n; i++) assert_int_equal(f->tensors[i].dtype, DT_F32);
        assert_non_null(f->metadata);
        assert_string_equal(f->metadata, "{\"format\":\"pt\"}");
        assert_int_equal(count_nonfinite(f), 0);
        st_close(f);

        snprintf(rel, sizeof rel, "%s/expected.safetensors", md->folder);
        if (st_open(&f, ref_path(path, sizeof path, rel), &e)) fail_msg("%s", e.msg);
        assert_int_equal(f->n, 2);
        const tensor *ids = check_tensor(f, "input_ids", DT_I32, 1, 77, -1, -1);
        check_tensor(f, "logits", DT_F32, 1, 77, 256, -1);
        int64_t v[77];
        tensor_read_i64(ids, v);
        for (int i = 0; i < 77; i++) assert_true(v[i] >= 0 && v[i] < 256);
        char want[128];
        snprintf(want, sizeof want, "flash-linear-attention %s forward", md->folder);
        assert_non_null(f->metadata);
        expect_has(f->metadata, want);
        assert_int_equal(count_nonfinite(f), 0);
        st_close(f);
    }
}

/* st_open and st_open_memory see the same tensors at the same bytes. */
static void test_refs_memory_equals_mmap(void **state) {
    (void)state;
    char path[512];
    err e = {{0}};
    ref_path(path, sizeof path, "gated_deltanet/expected.safetensors");
    char *bytes;
    size_t n;
    if (file_read_all(path, 1u << 24, &bytes, &n, &e)) fail_msg("%s", e.msg);
    st_file *a, *b;
    assert_int_equal(st_open(&a, path, &e), 0);
    assert_int_equal(st_open_memory(&b, bytes, n, "mem", &e), 0);
    free(bytes);
    assert_int_equal(a->n, b->n);
    for (int i = 0; i < a->n; i++) {
        assert_string_equal(a->tensors[i].name, b->tensors[i].name);
        assert_int_equal(a->tensors[i].nbytes, b->tensors[i].nbytes);
        assert_memory_equal(a->tensors[i].data, b->tensors[i].data, a->tensors[i].nbytes);
    }
    assert_string_equal(a->metadata, b->metadata);
    st_close(a);
    st_close(b);
}

/* ---- 2. malformed files ---------------------------------------------------------------------- */

#define HLEN_TEXT UINT64_MAX /* use strlen(hdr) as the header length */

typedef struct bad_t {
    const char *file; /* file name in the temp folder */
    const char *hdr;  /* header text; NULL: `raw` bytes are the whole file */
    uint64_t hlen;    /* header length to write, or HLEN_TEXT */
    size_t ndata;     /* data bytes after the header */
    const char *want; /* substring of the message */
} bad_t;

#define U8_A(off) "{\"a\":{\"dtype\":\"U8\",\"shape\":[4],\"data_offsets\":" off "}}"

static const bad_t BAD[] = {
    {"hlen-beyond.st", "{}", 1000, 0, "header length 1000 beyond the file (10 bytes)"},
    {"hlen-huge.st", "{}", 200000000, 0, "header length 200000000 above the 100 MB limit"},
    {"hlen-zero.st", "", HLEN_TEXT, 0, "invalid JSON in header"},
    {"json-invalid.st", "{\"a\": {\"dtype\": \"F32\",", HLEN_TEXT, 0, "invalid JSON in header"},
    {"json-cut.st", "{\"a\":{}}", 3, 0, "invalid JSON in header"},
    {"json-junk.st", "{} x", HLEN_TEXT, 0, "junk after the object at byte 11"},
    {"json-array.st", "[1, 2]", HLEN_TEXT, 0, "header is not a JSON object"},
    {"json-string.st", "\"a\"", HLEN_TEXT, 0, "header is not a JSON object"},
    /* strict JSON: what cJSON took and the reference safetensors library refuses */
    {"name-nul-escape.st",
     "{\"model.norm.weight\\u0000junk\":{\"dtype\":\"U8\",\"shape\":[1],\"data_offsets\":[0,1]}}",
     HLEN_TEXT, 1, "\\u0000 in a string"},
    {"dtype-nul-escape.st",
     "{\"a\":{\"dtype\":\"F32\\u0000x\",\"shape\":[1],\"data_offsets\":[0,4]}}", HLEN_TEXT, 4,
     "\\u0000 in a string"},
    {"name-control.st", "{\"a\tb\":{\"dtype\":\"U8\",\"shape\":[1],\"data_offsets\":[0,1]}}",
     HLEN_TEXT, 1, "a raw control character in a string"},
    {"name-bad-utf8.st", "{\"a\xff\":{\"dtype\":\"U8\",\"shape\":[1],\"data_offsets\":[0,1]}}",
     HLEN_TEXT, 1, "invalid UTF-8"},
    {"leading-zero.st", "{\"a\":{\"dtype\":\"U8\",\"shape\":[01],\"data_offsets\":[0,1]}}",
     HLEN_TEXT, 1, "a number with a leading zero"},
    {"dup-key.st",
     "{\"a\":{\"dtype\":\"U8\",\"shape\":[1],\"data_offsets\":[0,1]},"
     "\"a\":{\"dtype\":\"U8\",\"shape\":[1],\"data_offsets\":[1,2]}}",
     HLEN_TEXT, 2, "duplicate key 'a' in header"},
    {"dup-key-escaped.st",
     "{\"a\":{\"dtype\":\"U8\",\"shape\":[1],\"data_offsets\":[0,1]},"
     "\"\\u0061\":{\"dtype\":\"U8\",\"shape\":[1],\"data_offsets\":[1,2]}}",
     HLEN_TEXT, 2, "duplicate key 'a' in header"},
    {"dtype-unknown.st", "{\"a\":{\"dtype\":\"Q4\",\"shape\":[4],\"data_offsets\":[0,4]}}",
     HLEN_TEXT, 4, "tensor 'a': unknown dtype 'Q4'"},
    {"dtype-lower.st", "{\"a\":{\"dtype\":\"f32\",\"shape\":[1],\"data_offsets\":[0,4]}}",
     HLEN_TEXT, 4, "tensor 'a': unknown dtype 'f32'"},
    {"dtype-missing.st", "{\"a\":{\"shape\":[4],\"data_offsets\":[0,4]}}", HLEN_TEXT, 4,
     "tensor 'a': missing dtype"},
    {"dtype-number.st", "{\"a\":{\"dtype\":4,\"shape\":[4],\"data_offsets\":[0,4]}}", HLEN_TEXT, 4,
     "tensor 'a': missing dtype"},
    {"shape-missing.st", "{\"a\":{\"dtype\":\"U8\",\"data_offsets\":[0,4]}}", HLEN_TEXT, 4,
     "tensor 'a': missing shape"},
    {"offsets-missing.st", "{\"a\":{\"dtype\":\"U8\",\"shape\":[4]}}", HLEN_TEXT, 4,
     "tensor 'a': data_offsets must be [begin, end]"},
    {"offsets-three.st", U8_A("[0,4,4]"), HLEN_TEXT, 4,
     "tensor 'a': data_offsets must be [begin, end]"},
    {"offset-string.st", U8_A("[\"0\",4]"), HLEN_TEXT, 4,
     "tensor 'a': data_offsets must be non-negative integers"},
    {"offset-negative.st", U8_A("[-4,0]"), HLEN_TEXT, 4,
     "tensor 'a': data_offsets must be non-negative integers"},
    {"offset-float.st", U8_A("[0.5,4.5]"), HLEN_TEXT, 5,
     "tensor 'a': data_offsets must be non-negative integers"},
    {"offset-huge.st", U8_A("[0,1e300]"), HLEN_TEXT, 4,
     "tensor 'a': data_offsets must be non-negative integers"},
    {"offset-end-before-begin.st", U8_A("[4,0]"), HLEN_TEXT, 4,
     "tensor 'a': data_offsets end 0 before begin 4"},
    {"size-mismatch.st", "{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,4]}}",
     HLEN_TEXT, 4, "tensor 'a': 4 bytes but shape [2] of F32 needs 8"},
    {"shape-overflow.st",
     "{\"a\":{\"dtype\":\"F32\",\"shape\":[1099511627776,1099511627776],\"data_offsets\":[0,4]}}",
     HLEN_TEXT, 4, "tensor 'a': shape [1099511627776, 1099511627776] overflows"},
    {"shape-negative.st", "{\"a\":{\"dtype\":\"U8\",\"shape\":[-1],\"data_offsets\":[0,0]}}",
     HLEN_TEXT, 0, "tensor 'a': shape entry 0 is not a non-negative integer"},
    {"shape-float.st", "{\"a\":{\"dtype\":\"U8\",\"shape\":[2,1.5],\"data_offsets\":[0,3]}}",
     HLEN_TEXT, 3, "tensor 'a': shape entry 1 is not a non-negative integer"},
    {"shape-9-dims.st",
     "{\"a\":{\"dtype\":\"U8\",\"shape\":[1,1,1,1,1,1,1,1,1],\"data_offsets\":[0,1]}}", HLEN_TEXT,
     1, "tensor 'a': 9 dims, at most 8 supported"},
    {"entry-not-object.st", "{\"a\":[1]}", HLEN_TEXT, 0, "tensor 'a': entry is not an object"},
    {"overlap.st",
     "{\"a\":{\"dtype\":\"U8\",\"shape\":[4],\"data_offsets\":[0,4]},"
     "\"b\":{\"dtype\":\"U8\",\"shape\":[4],\"data_offsets\":[2,6]}}",
     HLEN_TEXT, 6, "tensor 'b': data [2, 6) overlaps the previous tensor"},
    {"same-region.st",
     "{\"a\":{\"dtype\":\"U8\",\"shape\":[4],\"data_offsets\":[0,4]},"
     "\"b\":{\"dtype\":\"U8\",\"shape\":[4],\"data_offsets\":[0,4]}}",
     HLEN_TEXT, 4, "data [0, 4) overlaps the previous tensor"},
    {"gap.st",
     "{\"a\":{\"dtype\":\"U8\",\"shape\":[4],\"data_offsets\":[0,4]},"
     "\"b\":{\"dtype\":\"U8\",\"shape\":[4],\"data_offsets\":[8,12]}}",
     HLEN_TEXT, 12, "tensor 'b': gap of 4 bytes before its data"},
    {"gap-at-start.st", U8_A("[2,6]"), HLEN_TEXT, 6, "tensor 'a': gap of 2 bytes before its data"},
    {"trailing.st", U8_A("[0,4]"), HLEN_TEXT, 5, "1 trailing bytes after the last tensor"},
    {"trailing-no-tensors.st", "{}", HLEN_TEXT, 3, "3 trailing bytes after the last tensor"},
    {"truncated-data.st", U8_A("[0,4]"), HLEN_TEXT, 2, "truncated: tensor 'a' needs data up to"},
    {"meta-not-object.st", "{\"__metadata__\":\"x\"}", HLEN_TEXT, 0,
     "__metadata__ is not an object"},
    {"meta-number.st", "{\"__metadata__\":{\"ok\":\"y\",\"n\":1}}", HLEN_TEXT, 0,
     "__metadata__ value 'n' is not a string"},
    {"meta-null.st", "{\"__metadata__\":{\"n\":null}}", HLEN_TEXT, 0,
     "__metadata__ value 'n' is not a string"},
};

/* The file: 8-byte little-endian header length, the header text, ndata bytes of 0xab. */
static unsigned char *bad_bytes(const bad_t *b, size_t *size) {
    size_t tl = strlen(b->hdr);
    uint64_t hlen = b->hlen == HLEN_TEXT ? tl : b->hlen;
    size_t n = 8 + tl + b->ndata;
    unsigned char *p = malloc(n);
    assert_non_null(p);
    for (int i = 0; i < 8; i++) p[i] = (unsigned char)(hlen >> (8 * i));
    memcpy(p + 8, b->hdr, tl);
    memset(p + 8 + tl, 0xab, b->ndata);
    *size = n;
    return p;
}

/* Writes the bytes to g_dir/file and expects both readers to refuse them with `want`, naming the
 * file (st_open) or the label (st_open_memory). */
static void expect_reject(const char *file, const void *bytes, size_t n, const char *want) {
    char *path = tmp_path(file);
    write_bytes(path, bytes, n);
    err e = {{0}};
    st_file *f = (st_file *)&e; /* must be reset to NULL */
    if (st_open(&f, path, &e) == 0) fail_msg("%s: accepted", file);
    assert_null(f);
    expect_has(e.msg, want);
    char prefix[600];
    snprintf(prefix, sizeof prefix, "%s: ", path);
    if (strncmp(e.msg, prefix, strlen(prefix)) != 0)
        fail_msg("message '%s' does not start with the file name", e.msg);

    err em = {{0}};
    f = (st_file *)&em;
    if (st_open_memory(&f, bytes, n, file, &em) == 0) fail_msg("%s: accepted from memory", file);
    assert_null(f);
    expect_has(em.msg, want);
    snprintf(prefix, sizeof prefix, "%s: ", file);
    assert_int_equal(strncmp(em.msg, prefix, strlen(prefix)), 0);
    free(path);
}

static void test_malformed_headers(void **state) {
    (void)state;
    int n = (int)(sizeof BAD / sizeof BAD[0]);
    assert_true(n >= 30);
    for (int i = 0; i < n; i++) {
        size_t size;
        unsigned char *p = bad_bytes(&BAD[i], &size);
        expect_reject(BAD[i].file, p, size, BAD[i].want);
        free(p);
    }
}

static void test_malformed_short_files(void **state) {
    (void)state;
    const unsigned char five[5] = {1, 0, 0, 0, 0};
    expect_reject("five-bytes.st", five, 5, "truncated: 5 bytes, no header length");
    const unsigned char seven[7] = {0};
    expect_reject("seven-bytes.st", seven, 7, "truncated: 7 bytes, no header length");
    expect_reject("empty.st", "", 0, "truncated: 0 bytes, no header length");
    /* a raw NUL inside a key, and NUL padding after the object (not spaces): refused */
    const char nulkey[] = "{\"__metadata__\":{\"f\0rmat\":\"pt\"}}";
    unsigned char buf[64] = {0};
    size_t hl = sizeof nulkey - 1;
    buf[0] = (unsigned char)hl;
    memcpy(buf + 8, nulkey, hl);
    expect_reject("raw-nul-key.st", buf, 8 + hl, "a NUL byte");
    const char padded[] = "{}\0\0\0\0\0\0";
    memset(buf, 0, sizeof buf);
    buf[0] = 8;
    memcpy(buf + 8, padded, 8);
    expect_reject("nul-padded.st", buf, 16, "junk after the object");
    /* a length-only file: header length 0 beyond nothing is not JSON */
    const unsigned char eight[8] = {0};
    expect_reject("eight-bytes.st", eight, 8, "invalid JSON in header");
}

/* A valid file, truncated at every length short of its end, is rejected each time. */
static void test_malformed_every_truncation(void **state) {
    (void)state;
    int64_t sh[1] = {3};
    err e = {{0}};
    tensor *t = tensor_new("x", DT_F32, 1, sh, &e);
    assert_non_null(t);
    char *path = tmp_path("full.st");
    assert_int_equal(st_write(path, (const tensor *const *)&t, 1, NULL, &e), 0);
    char *bytes;
    size_t n;
    assert_int_equal(file_read_all(path, 1 << 20, &bytes, &n, &e), 0);
    for (size_t len = 0; len < n; len++) {
        st_file *f;
        err em = {{0}};
        assert_int_equal(st_open_memory(&f, bytes, len, "cut", &em), -1);
        assert_null(f);
        expect_has(em.msg, "cut: ");
    }
    st_file *f;
    assert_int_equal(st_open_memory(&f, bytes, n, "full", &e), 0);
    st_close(f);
    free(bytes);
    free(path);
    tensor_free(t);
}

/* A mapped file truncated by another program after it was opened: reading its tensors is an
 * error naming the tensor (SIGBUS caught), and the process goes on (replay, tokens, diagnose and
 * export-inputs readers go through tensor_read_*_file). */
static void test_truncated_after_open(void **state) {
    (void)state;
    int64_t sh[1] = {1 << 18};
    err e = {{0}};
    tensor *t = tensor_new("layers.0.q", DT_F32, 1, sh, &e);
    tensor *ids = tensor_new("input_ids", DT_I64, 1, sh, &e);
    assert_non_null(t);
    assert_non_null(ids);
    const tensor *both[2] = {t, ids};
    char *path = tmp_path("shrinks.st");
    assert_int_equal(st_write(path, both, 2, NULL, &e), 0);
    st_file *f;
    assert_int_equal(st_open(&f, path, &e), 0);
    float *v = malloc(sizeof(float) << 18);
    int64_t *iv = malloc(sizeof(int64_t) << 18);
    assert_int_equal(tensor_read_f32_file(st_find(f, "layers.0.q"), v, &e), 0);
    assert_int_equal(truncate(path, 8192), 0);
    assert_int_equal(tensor_read_f32_file(st_find(f, "layers.0.q"), v, &e), -1);
    expect_has(e.msg, "tensor 'layers.0.q': the file changed while it was read");
    err_clear(&e);
    assert_int_equal(tensor_read_i64_file(st_find(f, "input_ids"), iv, &e), -1);
    expect_has(e.msg, "tensor 'input_ids'");
    st_close(f);
    /* the same process reads a good file again */
    assert_int_equal(st_write(path, both, 2, NULL, &e), 0);
    assert_int_equal(st_open(&f, path, &e), 0);
    assert_int_equal(tensor_read_i64_file(st_find(f, "input_ids"), iv, &e), 0);
    st_close(f);
    free(v), free(iv), free(path);
    tensor_free(t), tensor_free(ids);
}

static void test_not_a_file(void **state) {
    (void)state;
    err e = {{0}};
    st_file *f = (st_file *)&e;
    assert_int_equal(st_open(&f, g_dir, &e), -1);
    assert_null(f);
    expect_has(e.msg, g_dir);
    expect_has(e.msg, "not a regular file");

    char *path = tmp_path("no-such-file.safetensors");
    f = (st_file *)&e;
    assert_int_equal(st_open(&f, path, &e), -1);
    assert_null(f);
    expect_has(e.msg, path);
    expect_has(e.msg, "No such file or directory");
    free(path);
}

/* ---- 3. round trips ---------------------------------------------------------------------------
 */

static tensor *new_tensor(const char *name, dtype dt, int ndim, int64_t d0, int64_t d1) {
    int64_t sh[2] = {d0, d1};
    err e = {{0}};
    tensor *t = tensor_new(name, dt, ndim, sh, &e);
    if (!t) fail_msg("%s", e.msg);
    return t;
}

/* One file holding every dtype with random bytes; odd element counts put later tensors at
 * unaligned offsets. Every byte comes back, in header order. */
static void test_roundtrip_every_dtype(void **state) {
    (void)state;
    tensor *ts[DT_COUNT];
    trng r = {0x5eed1234};
    for (int d = 0; d < DT_COUNT; d++) {
        char name[32];
        snprintf(name, sizeof name, "t_%s", dtype_name((dtype)d));
        ts[d] = new_tensor(name, (dtype)d, 2, 3, 5);
        unsigned char *p = ts[d]->data;
        for (size_t i = 0; i < ts[d]->nbytes; i++)
            p[i] = (unsigned char)(trng_uniform(&r) * 128 + 128);
        if (d == DT_BOOL)
            for (size_t i = 0; i < ts[d]->nbytes; i++) p[i] &= 1;
    }
    char *path = tmp_path("every-dtype.safetensors");
    err e = {{0}};
    if (st_write(path, (const tensor *const *)ts, DT_COUNT, NULL, &e)) fail_msg("%s", e.msg);
    st_file *f;
    if (st_open(&f, path, &e)) fail_msg("%s", e.msg);
    assert_int_equal(f->n, DT_COUNT);
    assert_null(f->metadata);
    for (int d = 0; d < DT_COUNT; d++) {
        const tensor *t = &f->tensors[d];
        assert_string_equal(t->name, ts[d]->name);
        assert_int_equal(t->dtype, d);
        assert_int_equal(t->ndim, 2);
        assert_int_equal(t->shape[0], 3);
        assert_int_equal(t->shape[1], 5);
        assert_int_equal(t->nbytes, 15 * dtype_size((dtype)d));
        assert_memory_equal(t->data, ts[d]->data, t->nbytes);
        assert_int_equal(t->owns_data, 0);
    }
    st_close(f);
    for (int d = 0; d < DT_COUNT; d++) tensor_free(ts[d]);
    free(path);
}

/* Known values of every dtype read back through tensor_read_f32 / tensor_read_i64. */
static void test_roundtrip_values(void **state) {
    (void)state;
    tensor *ts[10];
    int k = 0;
    {
        int8_t v[5] = {-128, -1, 0, 1, 127};
        ts[k] = new_tensor("i8", DT_I8, 1, 5, 0), memcpy(ts[k++]->data, v, sizeof v);
    }
    {
        uint8_t v[5] = {0, 1, 127, 128, 255};
        ts[k] = new_tensor("u8", DT_U8, 1, 5, 0), memcpy(ts[k++]->data, v, sizeof v);
    }
    {
        int16_t v[5] = {-32768, -300, 0, 300, 32767};
        ts[k] = new_tensor("i16", DT_I16, 1, 5, 0), memcpy(ts[k++]->data, v, sizeof v);
    }
    {
        int32_t v[5] = {INT32_MIN, -70000, 0, 16777216, INT32_MAX};
        ts[k] = new_tensor("i32", DT_I32, 1, 5, 0), memcpy(ts[k++]->data, v, sizeof v);
    }
    {
        int64_t v[5] = {INT64_MIN, -(1ll << 53), 0, (1ll << 53) + 1, INT64_MAX};
        ts[k] = new_tensor("i64", DT_I64, 1, 5, 0), memcpy(ts[k++]->data, v, sizeof v);
    }
    {
        uint8_t v[5] = {0, 1, 1, 0, 1};
        ts[k] = new_tensor("bool", DT_BOOL, 1, 5, 0), memcpy(ts[k++]->data, v, sizeof v);
    }
    {
        double v[5] = {0.1, -0.0, 1e300, -2.5, 3.0};
        ts[k] = new_tensor("f64", DT_F64, 1, 5, 0), memcpy(ts[k++]->data, v, sizeof v);
    }
    {
        uint16_t v[5] = {0x3c00, 0xc000, 0x0001, 0x7bff, 0xfc00}; /* 1 -2 2^-24 65504 -inf */
        ts[k] = new_tensor("f16", DT_F16, 1, 5, 0), memcpy(ts[k++]->data, v, sizeof v);
    }
    {
        uint16_t v[5] = {0x3f80, 0xc040, 0x0001, 0x7f7f, 0x7f80}; /* 1 -3 tiny max inf */
        ts[k] = new_tensor("bf16", DT_BF16, 1, 5, 0), memcpy(ts[k++]->data, v, sizeof v);
    }
    {
        float v[5] = {1.5f, -0.0f, 1e-45f, 3.4e38f, -7.25f};
        ts[k] = new_tensor("f32", DT_F32, 1, 5, 0), memcpy(ts[k++]->data, v, sizeof v);
    }
    assert_int_equal(k, 10);
    char *path = tmp_path("values.safetensors");
    err e = {{0}};
    if (st_write(path, (const tensor *const *)ts, k, NULL, &e)) fail_msg("%s", e.msg);
    st_file *f;
    if (st_open(&f, path, &e)) fail_msg("%s", e.msg);
    float x[5];
    int64_t y[5];
#define F(name) (tensor_read_f32(st_find(f, name), x), x)
#define I(name) (tensor_read_i64(st_find(f, name), y), y)
    {
        float w[5] = {-128, -1, 0, 1, 127};
        assert_memory_equal(F("i8"), w, sizeof w);
    }
    {
        float w[5] = {0, 1, 127, 128, 255};
        assert_memory_equal(F("u8"), w, sizeof w);
    }
    {
        float w[5] = {-32768, -300, 0, 300, 32767};
        assert_memory_equal(F("i16"), w, sizeof w);
    }
    {
        float w[5] = {-2147483648.0f, -70000, 0, 16777216, 2147483648.0f};
        assert_memory_equal(F("i32"), w, sizeof w);
    }
    {
        float w[5] = {0, 1, 1, 0, 1};
        assert_memory_equal(F("bool"), w, sizeof w);
    }
    {
        float w[5] = {0.1f, -0.0f, INFINITY, -2.5f, 3.0f};
        assert_memory_equal(F("f64"), w, sizeof w);
    }
    {
        float w[5] = {1, -2, 5.9604644775390625e-08f, 65504, -INFINITY};
        assert_memory_equal(F("f16"), w, sizeof w);
    }
    {
        float w[5] = {1, -3, 9.183549615799121e-41f, 3.3895313892515355e38f, INFINITY};
        assert_memory_equal(F("bf16"), w, sizeof w);
    }
    {
        float w[5] = {1.5f, -0.0f, 1e-45f, 3.4e38f, -7.25f};
        assert_memory_equal(F("f32"), w, sizeof w);
    }
    {
        int64_t w[5] = {INT64_MIN, -(1ll << 53), 0, (1ll << 53) + 1, INT64_MAX};
        assert_memory_equal(I("i64"), w, sizeof w);
    }
    {
        int64_t w[5] = {INT32_MIN, -70000, 0, 16777216, INT32_MAX};
        assert_memory_equal(I("i32"), w, sizeof w);
    }
    {
        int64_t w[5] = {-128, -1, 0, 1, 127};
        assert_memory_equal(I("i8"), w, sizeof w);
    }
    {
        int64_t w[5] = {0, 1, 1, 0, 1};
        assert_memory_equal(I("bool"), w, sizeof w);
    }
    /* floats to int64 truncate toward zero and saturate */
    {
        int64_t w[5] = {0, 0, INT64_MAX, -2, 3};
        assert_memory_equal(I("f64"), w, sizeof w);
    }
    {
        int64_t w[5] = {1, -2, 0, 65504, INT64_MIN};
        assert_memory_equal(I("f16"), w, sizeof w);
    }
#undef F
#undef I
    st_close(f);
    for (int i = 0; i < k; i++) tensor_free(ts[i]);
    free(path);
}

/* tensor_from_f32 into integer dtypes truncates toward zero, saturates, and maps NaN to 0. */
static void test_from_f32_integers(void **state) {
    (void)state;
    const float src[8] = {2.7f, -2.7f, 300.0f, -300.0f, NAN, INFINITY, -INFINITY, 1e30f};
    int64_t sh[1] = {8};
    err e = {{0}};
    struct {
        dtype dt;
        int64_t want[8];
    } cases[] = {
        {DT_I8, {2, -2, 127, -128, 0, 127, -128, 127}},
        {DT_U8, {2, 0, 255, 0, 0, 255, 0, 255}},
        {DT_I16, {2, -2, 300, -300, 0, 32767, -32768, 32767}},
        {DT_I32, {2, -2, 300, -300, 0, INT32_MAX, INT32_MIN, INT32_MAX}},
        {DT_I64, {2, -2, 300, -300, 0, INT64_MAX, INT64_MIN, INT64_MAX}},
        {DT_BOOL, {1, 1, 1, 1, 1, 1, 1, 1}},
    };
    for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
        tensor *t = tensor_from_f32("x", cases[c].dt, 1, sh, src, &e);
        assert_non_null(t);
        int64_t got[8];
        tensor_read_i64(t, got);
        for (int i = 0; i < 8; i++)
            if (got[i] != cases[c].want[i])
                fail_msg("%s[%d]: got %lld want %lld", dtype_name(cases[c].dt), i,
                         (long long)got[i], (long long)cases[c].want[i]);
        tensor_free(t);
    }
}

static uint32_t f32_bits(float f) {
    uint32_t u;
    memcpy(&u, &f, 4);
    return u;
}

static float bits_f32(uint32_t u) {
    float f;
    memcpy(&f, &u, 4);
    return f;
}

/* Value of a finite f16 code computed independently: sign * man * 2^(exp - 25) etc. */
static double f16_value(uint16_t h) {
    int e = (h >> 10) & 31, m = h & 1023;
    double v = e ? ldexp(1024 + m, e - 25) : ldexp(m, -24);
    return h & 0x8000 ? -v : v;
}

/* Round-to-nearest-even f16 code of |x| found by search over the code order (no bit tricks). */
static uint16_t f16_reference(float x) {
    uint16_t sign = signbit(x) ? 0x8000 : 0;
    if (isnan(x)) return 0x7e00;
    double a = fabs((double)x);
    if (a >= 65520.0) return sign | 0x7c00; /* halfway to 2^16 and beyond: overflow */
    int lo = 0, hi = 0x7bff;                /* largest code with value <= a */
    while (lo < hi) {
        int mid = (lo + hi + 1) / 2;
        if (f16_value((uint16_t)mid) <= a)
            lo = mid;
        else
            hi = mid - 1;
    }
    double below = f16_value((uint16_t)lo);
    double above = lo == 0x7bff ? 65536.0 : f16_value((uint16_t)(lo + 1));
    double db = a - below, da = above - a;
    int up = da < db || (da == db && (lo & 1));
    return sign | (uint16_t)(lo + up);
}

static void test_f16_conversions(void **state) {
    (void)state;
    struct {
        float f;
        uint16_t h;
    } known[] = {
        {1.0f, 0x3c00},
        {-2.0f, 0xc000},
        {0.0f, 0x0000},
        {-0.0f, 0x8000},
        {65504.0f, 0x7bff},
        {65519.99f, 0x7bff},
        {65520.0f, 0x7c00}, /* halfway to 2^16, mantissa odd: rounds up to inf */
        {1e10f, 0x7c00},
        {-1e10f, 0xfc00},
        {INFINITY, 0x7c00},
        {-INFINITY, 0xfc00},
        {1.0f + 0x1p-11f, 0x3c00},            /* tie, even below */
        {1.0f + 3 * 0x1p-11f, 0x3c02},        /* tie, even above */
        {1.0f + 0x1p-11f + 0x1p-20f, 0x3c01}, /* just above the tie */
        {0x1p-14f, 0x0400},                   /* smallest normal */
        {0x1p-24f, 0x0001},                   /* smallest subnormal */
        {0x1p-25f, 0x0000},                   /* tie between 0 and 2^-24: even is 0 */
        {0x1.000002p-25f, 0x0001},            /* just above that tie */
        {3 * 0x1p-25f, 0x0002},               /* tie between 1 and 2 ulps: even is 2 */
        {1023 * 0x1p-24f, 0x03ff},            /* largest subnormal */
        {1023.5f * 0x1p-24f, 0x0400},         /* tie into the smallest normal */
        {-5 * 0x1p-24f, 0x8005},
        {1e-30f, 0x0000},
        {-1e-30f, 0x8000},
        {0.1f, 0x2e66},
    };
    for (size_t i = 0; i < sizeof known / sizeof known[0]; i++)
        if (f32_to_f16(known[i].f) != known[i].h)
            fail_msg("f32_to_f16(%a) = 0x%04x, want 0x%04x", (double)known[i].f,
                     f32_to_f16(known[i].f), known[i].h);
    /* NaN stays NaN (quiet), with its sign, including a signalling NaN with a low payload */
    uint16_t hn = f32_to_f16(NAN);
    assert_int_equal(hn & 0x7c00, 0x7c00);
    assert_true(hn & 0x3ff);
    hn = f32_to_f16(bits_f32(0xff800001u));
    assert_int_equal(hn & 0xfc00, 0xfc00);
    assert_true(hn & 0x3ff);

    /* f16 -> f32 is exact for every code, and comes back to the same code */
    for (uint32_t h = 0; h < 65536; h++) {
        float f = f16_to_f32((uint16_t)h);
        if (((h >> 10) & 31) == 31) {
            if (h & 1023)
                assert_true(isnan(f));
            else
                assert_true(isinf(f) && (signbit(f) != 0) == ((h & 0x8000) != 0));
            continue;
        }
        if ((double)f != f16_value((uint16_t)h))
            fail_msg("f16_to_f32(0x%04x) = %a, want %a", h, (double)f, f16_value((uint16_t)h));
        assert_int_equal(f32_to_f16(f), h);
    }
    /* f32 -> f16 agrees with the search reference on random bit patterns over every exponent,
     * and on every tie and near-tie between neighbouring codes */
    trng r = {42};
    for (int i = 0; i < 200000; i++) {
        uint32_t u = (uint32_t)((trng_uniform(&r) + 1.0) * 2147483648.0);
        float f = bits_f32(u);
        if (isnan(f)) continue;
        if (f32_to_f16(f) != f16_reference(f))
            fail_msg("f32_to_f16(%a) = 0x%04x, reference 0x%04x", (double)f, f32_to_f16(f),
                     f16_reference(f));
    }
    for (uint32_t h = 0; h < 0x7bff; h++) {
        float mid = (float)((f16_value((uint16_t)h) + f16_value((uint16_t)(h + 1))) / 2);
        float near[3] = {mid, nextafterf(mid, 0), nextafterf(mid, INFINITY)};
        for (int j = 0; j < 3; j++) {
            assert_int_equal(f32_to_f16(near[j]), f16_reference(near[j]));
            assert_int_equal(f32_to_f16(-near[j]), f16_reference(-near[j]));
        }
    }
}

/* Round-to-nearest-even bf16 of a non-NaN float, computed in double from the two neighbours. */
static uint16_t bf16_reference(float x) {
    uint32_t u = f32_bits(x), lo = u & 0xffff0000u;
    double a = fabs((double)x), below = fabs((double)bits_f32(lo));
    if (isinf(x)) return (uint16_t)(u >> 16);
    /* the code above `below`: the next bf16, or 2^128 in place of infinity */
    uint32_t next = (lo & 0x7fffffffu) + 0x10000u;
    double above = next >= 0x7f800000u ? ldexp(1, 128) : fabs((double)bits_f32(next));
    double db = a - below, da = above - a;
    int up = da < db || (da == db && ((lo >> 16) & 1));
    return (uint16_t)((lo >> 16) + up);
}

static void test_bf16_conversions(void **state) {
    (void)state;
    struct {
        float f;
        uint16_t h;
    } known[] = {
        {1.0f, 0x3f80},
        {-3.0f, 0xc040},
        {-0.0f, 0x8000},
        {INFINITY, 0x7f80},
        {-INFINITY, 0xff80},
        {bits_f32(0x3f808000u), 0x3f80}, /* tie, even below */
        {bits_f32(0x3f818000u), 0x3f82}, /* tie, even above */
        {bits_f32(0x3f808001u), 0x3f81}, /* just above the tie */
        {bits_f32(0x7f7f8000u), 0x7f80}, /* tie above the largest finite: overflows to inf */
        {bits_f32(0x7f7f7fffu), 0x7f7f},
        {bits_f32(0x00000001u), 0x0000}, /* f32 subnormals */
        {bits_f32(0x00008000u), 0x0000}, /* tie, even below */
        {bits_f32(0x00018000u), 0x0002}, /* tie, even above */
        {bits_f32(0x007fffffu), 0x0080}, /* largest subnormal rounds to the smallest normal */
        {bits_f32(0x80010000u), 0x8001},
    };
    for (size_t i = 0; i < sizeof known / sizeof known[0]; i++)
        if (f32_to_bf16(known[i].f) != known[i].h)
            fail_msg("f32_to_bf16(%a) = 0x%04x, want 0x%04x", (double)known[i].f,
                     f32_to_bf16(known[i].f), known[i].h);
    /* NaNs stay NaN: a NaN whose payload is only in the low half must not become inf */
    uint16_t b = f32_to_bf16(bits_f32(0x7f800001u));
    assert_int_equal(b & 0x7f80, 0x7f80);
    assert_true(b & 0x7f);
    b = f32_to_bf16(bits_f32(0xffc00000u));
    assert_int_equal(b & 0xff80, 0xff80);
    assert_true(b & 0x7f);
    for (uint32_t h = 0; h < 65536; h++) {
        float f = bf16_to_f32((uint16_t)h);
        assert_int_equal(f32_bits(f), h << 16);
        if (!isnan(f)) assert_int_equal(f32_to_bf16(f), h);
    }
    trng r = {7};
    for (int i = 0; i < 200000; i++) {
        float f = bits_f32((uint32_t)((trng_uniform(&r) + 1.0) * 2147483648.0));
        if (isnan(f)) continue;
        if (f32_to_bf16(f) != bf16_reference(f))
            fail_msg("f32_to_bf16(%a) = 0x%04x, reference 0x%04x", (double)f, f32_to_bf16(f),
                     bf16_reference(f));
    }
}

/* f32 -> f16 / bf16 tensors written, read back and widened again. */
static void test_roundtrip_half_tensors(void **state) {
    (void)state;
    const float src[8] = {1.0f, 0.1f, -65504.0f, 70000.0f, 0x1p-25f, 3 * 0x1p-25f, NAN, -INFINITY};
    int64_t sh[1] = {8};
    err e = {{0}};
    tensor *h = tensor_from_f32("h", DT_F16, 1, sh, src, &e);
    tensor *b = tensor_from_f32("b", DT_BF16, 1, sh, src, &e);
    assert_non_null(h);
    assert_non_null(b);
    const tensor *ts[2] = {h, b};
    char *path = tmp_path("half.safetensors");
    assert_int_equal(st_write(path, ts, 2, NULL, &e), 0);
    st_file *f;
    assert_int_equal(st_open(&f, path, &e), 0);
    float x[8];
    tensor_read_f32(st_find(f, "h"), x);
    const float wh[6] = {1.0f, 0.0999755859375f, -65504.0f, INFINITY, 0.0f, 2 * 0x1p-24f};
    assert_memory_equal(x, wh, sizeof wh);
    assert_true(isnan(x[6]));
    assert_true(isinf(x[7]) && x[7] < 0);
    tensor_read_f32(st_find(f, "b"), x);
    const float wb[6] = {1.0f, 0.10009765625f, -65536.0f, 70144.0f, 0x1p-25f, 3 * 0x1p-25f};
    assert_memory_equal(x, wb, sizeof wb);
    assert_true(isnan(x[6]));
    assert_true(isinf(x[7]) && x[7] < 0);
    /* tensor_to_f32 agrees with tensor_read_f32 */
    tensor *w = tensor_to_f32(st_find(f, "b"), &e);
    assert_non_null(w);
    assert_int_equal(w->dtype, DT_F32);
    assert_memory_equal(w->data, x, 6 * sizeof(float));
    tensor_free(w);
    st_close(f);
    tensor_free(h);
    tensor_free(b);
    free(path);
}

static void test_roundtrip_zero_size_and_scalar(void **state) {
    (void)state;
    tensor *z = new_tensor("empty", DT_F32, 2, 0, 3);
    tensor *s = new_tensor("scalar", DT_F64, 0, 0, 0);
    tensor *z2 = new_tensor("empty2", DT_I8, 1, 0, 0);
    assert_int_equal(z->nbytes, 0);
    assert_int_equal(s->nbytes, 8);
    double pi = 3.141592653589793;
    memcpy(s->data, &pi, 8);
    const tensor *ts[3] = {z, s, z2};
    char *path = tmp_path("zero.safetensors");
    err e = {{0}};
    assert_int_equal(st_write(path, ts, 3, NULL, &e), 0);
    st_file *f;
    if (st_open(&f, path, &e)) fail_msg("%s", e.msg);
    assert_int_equal(f->n, 3);
    const tensor *t = check_tensor(f, "empty", DT_F32, 0, 3, -1, -1);
    assert_int_equal(t->nbytes, 0);
    assert_int_equal(tensor_numel(t), 0);
    t = st_find(f, "scalar");
    assert_non_null(t);
    assert_int_equal(t->ndim, 0);
    assert_int_equal(tensor_numel(t), 1);
    assert_memory_equal(t->data, &pi, 8);
    check_tensor(f, "empty2", DT_I8, 0, -1, -1, -1);
    st_close(f);

    /* a file with only a zero-size tensor, and a file with no tensors at all */
    assert_int_equal(st_write(path, ts, 1, NULL, &e), 0);
    assert_int_equal(st_open(&f, path, &e), 0);
    assert_int_equal(f->n, 1);
    st_close(f);
    assert_int_equal(st_write(path, NULL, 0, NULL, &e), 0);
    assert_int_equal(st_open(&f, path, &e), 0);
    assert_int_equal(f->n, 0);
    assert_null(f->metadata);
    st_close(f);
    tensor_free(z), tensor_free(s), tensor_free(z2);
    free(path);
}

static void test_roundtrip_metadata(void **state) {
    (void)state;
    tensor *t = new_tensor("w", DT_F32, 1, 2, 0);
    const tensor *ts[1] = {t};
    char *path = tmp_path("meta.safetensors");
    err e = {{0}};
    assert_int_equal(
        st_write(path, ts, 1, "{ \"format\": \"pt\", \"note\": \"a \\\"quoted\\\" word\" }", &e),
        0);
    st_file *f;
    assert_int_equal(st_open(&f, path, &e), 0);
    assert_non_null(f->metadata);
    assert_string_equal(f->metadata, "{\"format\":\"pt\",\"note\":\"a \\\"quoted\\\" word\"}");
    assert_int_equal(f->n, 1);
    st_close(f);
    /* an empty metadata object survives as {} */
    assert_int_equal(st_write(path, ts, 1, "{}", &e), 0);
    assert_int_equal(st_open(&f, path, &e), 0);
    assert_string_equal(f->metadata, "{}");
    st_close(f);
    tensor_free(t);
    free(path);
}

/* The header length is a multiple of 8, the padding is spaces, the data starts right after. */
static void test_header_padding(void **state) {
    (void)state;
    char *path = tmp_path("pad.safetensors");
    for (int len = 1; len <= 16; len++) {
        char name[32];
        memset(name, 'n', (size_t)len);
        name[len] = '\0';
        tensor *t = new_tensor(name, DT_U8, 1, 3, 0);
        memcpy(t->data, "xyz", 3);
        err e = {{0}};
        assert_int_equal(st_write(path, (const tensor *const *)&t, 1, NULL, &e), 0);
        char *b;
        size_t n;
        assert_int_equal(file_read_all(path, 1 << 20, &b, &n, &e), 0);
        uint64_t hlen = 0;
        for (int i = 7; i >= 0; i--) hlen = (hlen << 8) | (unsigned char)b[i];
        assert_int_equal(hlen % 8, 0);
        assert_int_equal(n, 8 + hlen + 3);
        assert_memory_equal(b + 8 + hlen, "xyz", 3);
        size_t last = 8 + (size_t)hlen - 1;
        while (b[last] == ' ') last--;
        assert_int_equal(b[last], '}');
        assert_true(8 + hlen - 1 - last < 8); /* fewer than 8 spaces */
        assert_int_equal(b[8], '{');
        free(b);
        tensor_free(t);
    }
    free(path);
}

/* No temporary files are left beside the destination. */
static int count_tmp_files(const char *dir) {
    DIR *d = opendir(dir);
    assert_non_null(d);
    int n = 0;
    for (struct dirent *de; (de = readdir(d));) n += strstr(de->d_name, ".tmp.") != NULL;
    closedir(d);
    return n;
}

static void test_atomic_write(void **state) {
    (void)state;
    char *sub = tmp_path("atomic");
    assert_int_equal(mkdir(sub, 0755), 0);
    char *path = path_join(sub, "x.safetensors");
    tensor *a = new_tensor("a", DT_F32, 1, 4, 0);
    tensor *b = new_tensor("b", DT_I32, 1, 2, 0);
    ((float *)a->data)[0] = 1.0f;
    err e = {{0}};
    assert_int_equal(st_write(path, (const tensor *const *)&a, 1, NULL, &e), 0);
    assert_int_equal(count_tmp_files(sub), 0);
    /* overwriting replaces the whole file */
    assert_int_equal(st_write(path, (const tensor *const *)&b, 1, NULL, &e), 0);
    assert_int_equal(count_tmp_files(sub), 0);
    st_file *f;
    assert_int_equal(st_open(&f, path, &e), 0);
    assert_int_equal(f->n, 1);
    check_tensor(f, "b", DT_I32, 2, -1, -1, -1);
    st_close(f);

    /* refused writes leave the old file as it was and no temporary file */
    const tensor *twice[2] = {a, a};
    assert_int_equal(st_write(path, twice, 2, NULL, &e), -1);
    expect_has(e.msg, "tensor 'a' given twice");
    assert_int_equal(st_write(path, (const tensor *const *)&a, 1, "[1]", &e), -1);
    expect_has(e.msg, "metadata is not a JSON object");
    assert_int_equal(st_write(path, (const tensor *const *)&a, 1, "{\"n\":1}", &e), -1);
    expect_has(e.msg, "metadata value 'n' is not a string");
    tensor *m = new_tensor("__metadata__", DT_U8, 1, 1, 0);
    assert_int_equal(st_write(path, (const tensor *const *)&m, 1, NULL, &e), -1);
    expect_has(e.msg, "tensor '__metadata__'");
    tensor_free(m);
    a->nbytes = 12; /* disagrees with the shape [4] of F32 */
    assert_int_equal(st_write(path, (const tensor *const *)&a, 1, NULL, &e), -1);
    expect_has(e.msg, "tensor 'a': bad name, dtype, shape or byte size");
    a->nbytes = 16;
    assert_int_equal(count_tmp_files(sub), 0);
    assert_int_equal(st_open(&f, path, &e), 0);
    check_tensor(f, "b", DT_I32, 2, -1, -1, -1);
    st_close(f);

    /* unwritable destinations are clean errors naming the path */
    assert_int_equal(st_write("/nonexistent/x.safetensors", (const tensor *const *)&a, 1, NULL, &e),
                     -1);
    expect_has(e.msg, "/nonexistent/x.safetensors: cannot write: No such file or directory");
    assert_int_equal(st_write(sub, (const tensor *const *)&a, 1, NULL, &e), -1);
    expect_has(e.msg, "a folder, not replaced");
    char *under_file = path_join(path, "y.safetensors"); /* parent is a regular file */
    assert_int_equal(st_write(under_file, (const tensor *const *)&a, 1, NULL, &e), -1);
    expect_has(e.msg, under_file);
    expect_has(e.msg, "Not a directory");
    free(under_file);
    if (geteuid() != 0) { /* root writes into read-only folders anyway */
        assert_int_equal(chmod(sub, 0555), 0);
        char *p2 = path_join(sub, "z.safetensors");
        assert_int_equal(st_write(p2, (const tensor *const *)&a, 1, NULL, &e), -1);
        expect_has(e.msg, "Permission denied");
        free(p2);
        assert_int_equal(chmod(sub, 0755), 0);
    }
    assert_int_equal(count_tmp_files(sub), 0);
    tensor_free(a), tensor_free(b);
    free(path);
    free(sub);
}

/* ---- sharded checkpoints ------------------------------------------------------------------------
 */

static void write_text(const char *path, const char *text) {
    write_bytes(path, text, strlen(text));
}

/* A large index naming a distinct shard per tensor (as a hostile or broken index does) is checked
 * in n log n: the first missing shard, in mention order, is named. */
static void test_large_index(void **state) {
    (void)state;
    char *dir = test_tmpdir(), path[600];
    snprintf(path, sizeof path, "%s/model.safetensors.index.json", dir);
    FILE *f = fopen(path, "w");
    assert_non_null(f);
    fputs("{\"weight_map\": {", f);
    for (int i = 0; i < 50000; i++)
        fprintf(f, "%s\"t%d\": \"shard-%05d.safetensors\"", i ? ", " : "", i, 49999 - i);
    fputs("}}", f);
    fclose(f);
    st_file *sf = NULL;
    err e = {{0}};
    assert_int_equal(st_open_index(&sf, path, &e), -1);
    expect_has(e.msg, "shard-49999.safetensors");
    test_rmdir(dir);
}

static void test_sharded(void **state) {
    (void)state;
    char *dir = tmp_path("sharded");
    assert_int_equal(mkdir(dir, 0755), 0);
    tensor *a = new_tensor("model.a", DT_F32, 2, 2, 3);
    tensor *b = new_tensor("model.b", DT_I64, 1, 2, 0);
    tensor *c = new_tensor("lm_head.weight", DT_BF16, 1, 5, 0);
    for (int i = 0; i < 6; i++) ((float *)a->data)[i] = (float)i + 0.5f;
    ((int64_t *)b->data)[1] = -7;
    ((uint16_t *)c->data)[4] = 0x3f80;
    char *s1 = path_join(dir, "model-00001-of-00002.safetensors");
    char *s2 = path_join(dir, "model-00002-of-00002.safetensors");
    char *idx = path_join(dir, "model.safetensors.index.json");
    err e = {{0}};
    const tensor *first[2] = {a, b};
    assert_int_equal(st_write(s1, first, 2, "{\"format\":\"pt\"}", &e), 0);
    assert_int_equal(st_write(s2, (const tensor *const *)&c, 1, "{\"format\":\"pt\"}", &e), 0);
    write_text(idx, "{\"metadata\": {\"total_size\": 74},\n \"weight_map\": {\n"
                    "  \"lm_head.weight\": \"model-00002-of-00002.safetensors\",\n"
                    "  \"model.a\": \"model-00001-of-00002.safetensors\",\n"
                    "  \"model.b\": \"model-00001-of-00002.safetensors\"}}\n");
    st_file *f;
    if (st_open_index(&f, idx, &e)) fail_msg("%s", e.msg);
    assert_string_equal(f->path, idx);
    assert_int_equal(f->n, 3);
    assert_int_equal(f->nmaps, 2);
    const tensor *t = check_tensor(f, "model.a", DT_F32, 2, 3, -1, -1);
    assert_memory_equal(t->data, a->data, a->nbytes);
    t = check_tensor(f, "model.b", DT_I64, 2, -1, -1, -1);
    int64_t bv[2];
    tensor_read_i64(t, bv);
    assert_int_equal(bv[1], -7);
    t = check_tensor(f, "lm_head.weight", DT_BF16, 5, -1, -1, -1);
    float cv[5];
    tensor_read_f32(t, cv);
    assert_true(cv[4] == 1.0f && cv[0] == 0.0f);
    assert_string_equal(f->metadata, "{\"format\":\"pt\"}");
    st_close(f);

    struct {
        const char *text, *want;
    } bad[] = {
        /* a tensor the index names but no shard has */
        {"{\"weight_map\": {\"model.a\": \"model-00001-of-00002.safetensors\","
         " \"model.z\": \"model-00001-of-00002.safetensors\"}}",
         "tensor 'model.z' is listed but not in shard model-00001-of-00002.safetensors"},
        /* a tensor that is in a shard, but not the one the index names */
        {"{\"weight_map\": {\"model.a\": \"model-00001-of-00002.safetensors\","
         " \"model.b\": \"model-00002-of-00002.safetensors\","
         " \"lm_head.weight\": \"model-00002-of-00002.safetensors\"}}",
         "tensor 'model.b' is listed but not in shard model-00002-of-00002.safetensors"},
        /* a missing shard file */
        {"{\"weight_map\": {\"model.a\": \"model-00003-of-00003.safetensors\"}}",
         "model-00003-of-00003.safetensors: No such file or directory"},
        {"{\"weight_map\": {\"model.a\": \"../x.safetensors\"}}", "must be a plain file name"},
        {"{\"weight_map\": {\"model.a\": \"..\"}}", "must be a plain file name"},
        {"{\"weight_map\": {\"model.a\": 3}}", "weight_map entry 'model.a' is not a file name"},
        {"{\"metadata\": {}}", "no \"weight_map\" object"},
        {"{\"weight_map\": [1]}", "no \"weight_map\" object"},
        {"{\"weight_map\": {", "invalid JSON"},
        {"{\"weight_map\": {}} junk", "invalid JSON"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        write_text(idx, bad[i].text);
        f = (st_file *)&e;
        if (st_open_index(&f, idx, &e) == 0) fail_msg("index %zu accepted", i);
        assert_null(f);
        expect_has(e.msg, bad[i].want);
        expect_has(e.msg, "sharded/");
    }

    /* the same tensor in two shards */
    char *s3 = path_join(dir, "dup.safetensors");
    assert_int_equal(st_write(s3, (const tensor *const *)&a, 1, NULL, &e), 0);
    write_text(idx, "{\"weight_map\": {\"model.a\": \"model-00001-of-00002.safetensors\","
                    " \"x\": \"dup.safetensors\"}}");
    assert_int_equal(st_open_index(&f, idx, &e), -1);
    expect_has(e.msg, "tensor 'model.a' appears in two shards");
    expect_has(e.msg, "dup.safetensors");
    /* a malformed shard: the message names the shard */
    write_text(s3, "junk that is not a safetensors file");
    write_text(idx, "{\"weight_map\": {\"x\": \"dup.safetensors\"}}");
    assert_int_equal(st_open_index(&f, idx, &e), -1);
    expect_has(e.msg, "dup.safetensors: header length");
    /* a missing index */
    char *none = path_join(dir, "none.index.json");
    assert_int_equal(st_open_index(&f, none, &e), -1);
    expect_has(e.msg, "none.index.json: No such file or directory");

    tensor_free(a), tensor_free(b), tensor_free(c);
    free(s1), free(s2), free(s3), free(idx), free(none), free(dir);
}

/* ---- SHA-256 ---- */

static void sha_of(const void *p, size_t n, char hex[65]) {
    sha256_ctx c;
    sha256_init(&c);
    sha256_update(&c, p, n);
    sha256_hex(&c, hex);
}

/* FIPS 180-4 examples and the NIST long messages, with whichever path the CPU takes and with the
 * portable code forced */
static void test_sha256_vectors(void **state) {
    (void)state;
    static const char *const V[][2] = {
        {"", "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855"},
        {"abc", "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad"},
        {"abcdbcdecdefdefgefghfghighijhijkijkljklmklmnlmnomnopnopq",
         "248d6a61d20638b8e5c026930c3e6039a33ce45964ff2167f6ecedd419db06c1"},
        {"abcdefghbcdefghicdefghijdefghijkefghijklfghijklmghijklmnhijklmnoijklmnopjklmnopqklmnopqr"
         "lmnopqrsmnopqrstnopqrstu",
         "cf5b16a778af8380036ce59e7b0492370b249b11e8f07a51afac45037afee9d1"},
    };
    char hex[65];
    for (int ni = 1; ni >= 0; ni--) {
        sha256_set_ni(ni);
        for (size_t i = 0; i < sizeof V / sizeof V[0]; i++) {
            sha_of(V[i][0], strlen(V[i][0]), hex);
            assert_string_equal(hex, V[i][1]);
        }
        /* one million 'a', fed 1000 at a time */
        char a[1000];
        memset(a, 'a', sizeof a);
        sha256_ctx c;
        sha256_init(&c);
        for (int k = 0; k < 1000; k++) sha256_update(&c, a, sizeof a);
        sha256_hex(&c, hex);
        assert_string_equal(hex,
                            "cdc76e5c9914fb9281a1c7e284d73e67f1809a48a497200e046d39ccc7112cd0");
    }
    sha256_set_ni(1);
    print_message("  SHA extensions: %s\n", sha256_uses_ni() ? "used" : "not on this CPU");
}

/* 1 MB of bytes: the SHA extensions equal the portable code, whole and in uneven pieces (every
 * length 0..130 around the 64-byte blocks), and every length up to 300 bytes */
static void test_sha256_ni_vs_portable(void **state) {
    (void)state;
    size_t n = 1u << 20;
    unsigned char *b = malloc(n);
    assert_non_null(b);
    uint64_t x = 88172645463325252ull;
    for (size_t i = 0; i < n; i++) x ^= x << 13, x ^= x >> 7, x ^= x << 17, b[i] = (unsigned char)x;
    char want[65], got[65];
    sha256_set_ni(0);
    assert_int_equal(sha256_uses_ni(), 0);
    sha_of(b, n, want);
    char small[301][65];
    for (size_t k = 0; k <= 300; k++) sha_of(b + k, k, small[k]);
    sha256_set_ni(1);
    assert_int_equal(sha256_uses_ni(), sha256_cpu_has_ni());
    sha_of(b, n, got);
    assert_string_equal(got, want);
    sha256_ctx c;
    sha256_init(&c);
    size_t off = 0;
    for (size_t k = 0; off < n; k = (k + 1) % 131) {
        size_t m = k < n - off ? k : n - off;
        sha256_update(&c, b + off, m);
        off += m;
    }
    sha256_hex(&c, got);
    assert_string_equal(got, want);
    for (size_t k = 0; k <= 300; k++) {
        sha_of(b + k, k, got);
        assert_string_equal(got, small[k]);
    }
    /* the same bytes through a file */
    char *p = tmp_path("sha.bin");
    write_bytes(p, b, n);
    err e = {{0}};
    assert_int_equal(sha256_file(p, got, &e), 0);
    assert_string_equal(got, want);
    unlink(p);
    assert_int_equal(sha256_file(p, got, &e), -1);
    expect_has(e.msg, "sha.bin");
    free(p);
    free(b);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_refs_ops),
        cmocka_unit_test(test_refs_models),
        cmocka_unit_test(test_refs_memory_equals_mmap),
        cmocka_unit_test(test_malformed_headers),
        cmocka_unit_test(test_malformed_short_files),
        cmocka_unit_test(test_malformed_every_truncation),
        cmocka_unit_test(test_not_a_file),
        cmocka_unit_test(test_truncated_after_open),
        cmocka_unit_test(test_roundtrip_every_dtype),
        cmocka_unit_test(test_roundtrip_values),
        cmocka_unit_test(test_from_f32_integers),
        cmocka_unit_test(test_f16_conversions),
        cmocka_unit_test(test_bf16_conversions),
        cmocka_unit_test(test_roundtrip_half_tensors),
        cmocka_unit_test(test_roundtrip_zero_size_and_scalar),
        cmocka_unit_test(test_roundtrip_metadata),
        cmocka_unit_test(test_header_padding),
        cmocka_unit_test(test_atomic_write),
        cmocka_unit_test(test_sharded),
        cmocka_unit_test(test_large_index),
        cmocka_unit_test(test_sha256_vectors),
        cmocka_unit_test(test_sha256_ni_vs_portable),
    };
    return cmocka_run_group_tests(tests, group_setup, group_teardown);
}
