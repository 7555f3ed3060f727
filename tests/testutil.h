/* testutil.h: shared helpers for the cmocka tests (header-only; each test is one binary).
 *
 * Reference data is read from $MIXSCOPE_REFS, default ../shared/refs (the CI checkout has shared/
 * beside the project root). The binary under test is $MIXSCOPE_BIN (set by `make test`). */
#ifndef MIXSCOPE_TESTUTIL_H
#define MIXSCOPE_TESTUTIL_H

#define _GNU_SOURCE
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cmocka.h>

#include "core/safetensors.h"

static inline const char *refs_dir(void) {
    const char *d = getenv("MIXSCOPE_REFS");
    return d && *d ? d : "../shared/refs";
}

static inline const char *mixscope_bin(void) {
    const char *b = getenv("MIXSCOPE_BIN");
    return b && *b ? b : "./mixscope";
}

/* refs_dir()/rel into buf. */
static inline const char *ref_path(char *buf, size_t n, const char *rel) {
    snprintf(buf, n, "%s/%s", refs_dir(), rel);
    return buf;
}

/* Fails the test unless `text` (an error message or a command's output) contains `want`. */
static inline void expect_has(const char *text, const char *want) {
    if (!strstr(text, want)) fail_msg("'%s' lacks '%s'", text, want);
}

/* Fails the test if `text` contains `bad`. */
static inline void expect_lacks(const char *text, const char *bad) {
    if (strstr(text, bad)) fail_msg("'%s' has '%s'", text, bad);
}

/* ||a - b|| / ||b|| in double. */
static inline double rel_err(const float *a, const float *b, size_t n) {
    double num = 0, den = 0;
    for (size_t i = 0; i < n; i++) {
        double d = (double)a[i] - (double)b[i];
        num += d * d;
        den += (double)b[i] * (double)b[i];
    }
    return den > 0 ? sqrt(num / den) : sqrt(num);
}

static inline double rel_err_d(const float *a, const double *b, size_t n) {
    double num = 0, den = 0;
    for (size_t i = 0; i < n; i++) {
        double d = (double)a[i] - b[i];
        num += d * d;
        den += b[i] * b[i];
    }
    return den > 0 ? sqrt(num / den) : sqrt(num);
}

/* A fresh float32 copy of tensor `name` from an open file; fails the test if missing. */
static inline float *st_get_f32(const st_file *f, const char *name, int64_t *numel) {
    const tensor *t = st_find(f, name);
    if (!t) fail_msg("%s: tensor '%s' missing", f->path, name);
    int64_t n = tensor_numel(t);
    float *p = malloc((size_t)(n ? n : 1) * sizeof *p);
    assert_non_null(p);
    tensor_read_f32(t, p);
    if (numel) *numel = n;
    return p;
}

/* A temporary folder for this test binary (removed by the caller with test_rmdir). */
static inline char *test_tmpdir(void) {
    char *d = strdup("/tmp/mixscope-test-XXXXXX");
    assert_non_null(mkdtemp(d));
    return d;
}

static inline void test_rmdir(char *d) {
    char cmd[512];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", d);
    if (system(cmd) != 0) fprintf(stderr, "could not remove %s\n", d);
    free(d);
}

/* Runs `mixscope ARGS...` (args shell-quoted by the caller), capturing stdout+stderr into *out
 * (malloc'd). Returns the exit status, or -1 if it did not exit normally (a crash). */
static inline int run_mixscope(char **out, const char *fmt, ...) {
    char args[4096], cmd[4608];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(args, sizeof args, fmt, ap);
    va_end(ap);
    snprintf(cmd, sizeof cmd, "%s %s 2>&1 </dev/null", mixscope_bin(), args);
    FILE *p = popen(cmd, "r");
    assert_non_null(p);
    size_t cap = 1 << 16, n = 0;
    char *buf = malloc(cap);
    assert_non_null(buf);
    size_t r;
    while ((r = fread(buf + n, 1, cap - n - 1, p)) > 0) {
        n += r;
        if (n + 1 >= cap) {
            cap *= 2;
            buf = realloc(buf, cap);
            assert_non_null(buf);
        }
    }
    buf[n] = '\0';
    int st = pclose(p);
    if (out)
        *out = buf;
    else
        free(buf);
    return WIFEXITED(st) ? WEXITSTATUS(st) : -1;
}

/* Deterministic test data: xorshift64* uniform in [-1, 1) and standard normal. */
typedef struct trng {
    uint64_t s;
} trng;

static inline double trng_uniform(trng *r) {
    r->s ^= r->s >> 12, r->s ^= r->s << 25, r->s ^= r->s >> 27;
    uint64_t x = r->s * 2685821657736338717ull;
    return (double)(x >> 11) * (1.0 / 9007199254740992.0) * 2.0 - 1.0;
}

static inline double trng_normal(trng *r) {
    double u = (trng_uniform(r) + 1.0) * 0.5, v = (trng_uniform(r) + 1.0) * 0.5;
    if (u < 1e-300) u = 1e-300;
    return sqrt(-2.0 * log(u)) * cos(6.283185307179586 * v);
}

static inline void trng_fill(trng *r, float *x, size_t n, double scale) {
    for (size_t i = 0; i < n; i++) x[i] = (float)(trng_normal(r) * scale);
}

#endif
