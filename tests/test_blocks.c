/* test_blocks.c: the dense products of models/blocks.c. blk_linear against a double-precision
 * reference over shapes with every tail (in mod 8, out mod 4), with and without bias; the same bits
 * for every thread count 1..8; blk_linear_batch row by row equal, bit for bit, to blk_linear for
 * token counts around the 3-token tiles and the token blocks; blk_mlp against its definition; a
 * linear backend taking the products (and declining them). */
#include "testutil.h"

#include "core/pool.h"
#include "models/blocks.h"

static unsigned long long rs = 88172645463325252ULL;
static float frand(void) {
    rs ^= rs << 13, rs ^= rs >> 7, rs ^= rs << 17;
    return (float)((double)(rs >> 11) / 9007199254740992.0 * 2.0 - 1.0);
}

static float *rand_vec(size_t n) {
    float *v = malloc((n ? n : 1) * sizeof *v);
    for (size_t i = 0; i < n; i++) v[i] = frand();
    return v;
}

/* largest |y - ref| / (sum |w x| + |b|): the error relative to the terms' magnitude (a dot
 * product's rounding error is bounded by that magnitude times n u) */
static double linear_err(const float *y, const float *x, const float *W, const float *b, int out,
                         int in) {
    double worst = 0;
    for (int o = 0; o < out; o++) {
        double s = b ? b[o] : 0, mag = b ? fabs(b[o]) : 0;
        for (int i = 0; i < in; i++) {
            double p = (double)W[(size_t)o * in + i] * x[i];
            s += p, mag += fabs(p);
        }
        double e = fabs(y[o] - s) / (mag > 0 ? mag : 1);
        if (e > worst) worst = e;
    }
    return worst;
}

static const int SHAPES[][2] = {
    {1, 1},     {1, 7},      {3, 8},     {4, 9},      {5, 15},    {7, 16},
    {8, 17},    {9, 100},    {13, 1023}, {64, 64},    {257, 255}, {300, 520},
    {1000, 70}, {129, 1031}, {2048, 64}, {515, 2816}, {4096, 33}, {1, 70000},
};

static void test_linear_reference(void **st) {
    (void)st;
    for (size_t s = 0; s < sizeof SHAPES / sizeof *SHAPES; s++) {
        int out = SHAPES[s][0], in = SHAPES[s][1];
        float *W = rand_vec((size_t)out * in), *x = rand_vec((size_t)in),
              *b = rand_vec((size_t)out);
        float *y = malloc((size_t)out * sizeof *y);
        for (int wb = 0; wb < 2; wb++) {
            blk_linear(y, x, W, wb ? b : NULL, out, in);
            double e = linear_err(y, x, W, wb ? b : NULL, out, in);
            /* the rounding bound gamma_n = n u of a sum: at most in/8 + 13 operations per output */
            double bound = (in / 8 + 13) * 5.97e-8;
            if (e > bound)
                fail_msg("[%d x %d]%s: relative error %.3g above %.3g", out, in, wb ? " +b" : "", e,
                         bound);
        }
        free(W), free(x), free(b), free(y);
    }
}

/* Large products split over the pool: the bits may not depend on the thread count. */
static void test_linear_threads(void **st) {
    (void)st;
    err e = {{0}};
    static const int big[][2] = {{4096, 1024}, {1027, 333}, {64, 1024}, {70000, 1}, {515, 2816}};
    for (size_t s = 0; s < sizeof big / sizeof *big; s++) {
        int out = big[s][0], in = big[s][1];
        float *W = rand_vec((size_t)out * in), *x = rand_vec((size_t)in),
              *b = rand_vec((size_t)out);
        float *y1 = malloc((size_t)out * sizeof *y1), *yn = malloc((size_t)out * sizeof *yn);
        assert_int_equal(pool_set_threads(1, &e), 0);
        blk_linear(y1, x, W, b, out, in);
        for (int t = 2; t <= 8; t++) {
            assert_int_equal(pool_set_threads(t, &e), 0);
            for (int rep = 0; rep < 3; rep++) {
                memset(yn, 0xff, (size_t)out * sizeof *yn);
                blk_linear(yn, x, W, b, out, in);
                if (memcmp(y1, yn, (size_t)out * sizeof *y1))
                    fail_msg("[%d x %d]: %d threads differ from 1", out, in, t);
            }
        }
        free(W), free(x), free(b), free(y1), free(yn);
    }
    assert_int_equal(pool_set_threads(0, &e), 0);
}

/* blk_linear_batch: row t equals blk_linear of X[t], bit for bit, for any thread count. */
static void test_batch_equals_linear(void **st) {
    (void)st;
    err e = {{0}};
    static const int shapes[][2] = {{1, 5},      {4, 8},     {7, 33},    {64, 64},
                                    {130, 1024}, {37, 2816}, {256, 300}, {9, 70000}};
    static const int Ts[] = {1, 2, 3, 4, 5, 6, 7, 11, 64, 65, 97, 200};
    for (size_t s = 0; s < sizeof shapes / sizeof *shapes; s++) {
        int out = shapes[s][0], in = shapes[s][1];
        float *W = rand_vec((size_t)out * in), *b = rand_vec((size_t)out);
        for (size_t k = 0; k < sizeof Ts / sizeof *Ts; k++) {
            int T = Ts[k];
            if ((int64_t)T * in > 4000000) continue;
            float *X = rand_vec((size_t)T * in), *Y = malloc((size_t)T * out * sizeof *Y),
                  *R = malloc((size_t)T * out * sizeof *R);
            for (int wb = 0; wb < 2; wb++) {
                assert_int_equal(pool_set_threads(1, &e), 0);
                for (int t = 0; t < T; t++)
                    blk_linear(R + (size_t)t * out, X + (size_t)t * in, W, wb ? b : NULL, out, in);
                for (int th = 1; th <= 4; th++) {
                    assert_int_equal(pool_set_threads(th, &e), 0);
                    memset(Y, 0xff, (size_t)T * out * sizeof *Y);
                    blk_linear_batch(Y, X, W, wb ? b : NULL, T, out, in);
                    if (memcmp(Y, R, (size_t)T * out * sizeof *Y))
                        fail_msg("[%d x %d] T %d%s threads %d: batch differs from blk_linear", out,
                                 in, T, wb ? " +b" : "", th);
                }
            }
            free(X), free(Y), free(R);
        }
        free(W), free(b);
    }
    assert_int_equal(pool_set_threads(0, &e), 0);
}

static void test_mlp(void **st) {
    (void)st;
    int C = 72, I = 200;
    float *x = rand_vec(C), *Wg = rand_vec((size_t)I * C), *Wu = rand_vec((size_t)I * C),
          *Wd = rand_vec((size_t)C * I), *h1 = malloc(I * sizeof(float)),
          *h2 = malloc(I * sizeof(float)), *y = malloc(C * sizeof(float));
    blk_mlp(y, x, Wg, Wu, Wd, C, I, h1, h2);
    double *h = malloc(I * sizeof(double)), worst = 0;
    for (int i = 0; i < I; i++) {
        double g = 0, u = 0;
        for (int c = 0; c < C; c++)
            g += (double)Wg[i * C + c] * x[c], u += (double)Wu[i * C + c] * x[c];
        h[i] = g / (1 + exp(-g)) * u;
    }
    for (int c = 0; c < C; c++) {
        double s = 0, mag = 0;
        for (int i = 0; i < I; i++) s += Wd[c * I + i] * h[i], mag += fabs(Wd[c * I + i] * h[i]);
        double e = fabs(y[c] - s) / mag;
        if (e > worst) worst = e;
    }
    print_message("  blk_mlp: relative error %.2e\n", worst);
    assert_true(worst < 1e-5);
    free(x), free(Wg), free(Wu), free(Wd), free(h1), free(h2), free(y), free(h);
}

/* A backend: counts calls, computes when `take` (y = 7), declines otherwise. */
static int backend_calls, backend_take;
static int fake_backend(float *y, const float *x, const float *W, const float *b, int out, int in) {
    (void)x, (void)W, (void)b, (void)in;
    backend_calls++;
    if (!backend_take) return 1;
    for (int o = 0; o < out; o++) y[o] = 7.0f;
    return 0;
}

static void test_backend(void **st) {
    (void)st;
    int out = 40, in = 24, T = 5;
    float *W = rand_vec((size_t)out * in), *X = rand_vec((size_t)T * in),
          *Y = malloc((size_t)T * out * sizeof *Y), *R = malloc((size_t)T * out * sizeof *R);
    blk_linear_batch(R, X, W, NULL, T, out, in);
    blk_set_linear_backend(fake_backend);
    backend_take = 0, backend_calls = 0;
    blk_linear_batch(Y, X, W, NULL, T, out, in);
    assert_int_equal(backend_calls, T); /* one token at a time, then the CPU */
    assert_memory_equal(Y, R, (size_t)T * out * sizeof *Y);
    backend_take = 1, backend_calls = 0;
    blk_linear_batch(Y, X, W, NULL, T, out, in);
    assert_int_equal(backend_calls, T);
    for (int i = 0; i < T * out; i++) assert_true(Y[i] == 7.0f);
    blk_set_linear_backend(NULL);
    free(W), free(X), free(Y), free(R);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_linear_reference),
        cmocka_unit_test(test_linear_threads),
        cmocka_unit_test(test_batch_equals_linear),
        cmocka_unit_test(test_mlp),
        cmocka_unit_test(test_backend),
    };
    int rc = cmocka_run_group_tests(tests, NULL, NULL);
    pool_shutdown();
    return rc;
}
