/* test_ranks.c: the stable ranks of models/ranks.h (spec kata-parallax.md §B.7): matrices with
 * known singular values, the factored circuits against their explicit products (rows and column
 * slices), a model's layers, and the `model ranks` command's table and errors. */
#include "tests/tsession.h"

#include "core/opts.h"
#include "models/model.h"
#include "models/ranks.h"
#include "tests/tmodel.h"

/* M [n, n] = A^T B for A, B read as in stable_rank_factored */
static void product(const float *A, long ars, long acs, const float *B, long brs, long bcs, int k,
                    int n, float *M) {
    for (int i = 0; i < n; i++)
        for (int j = 0; j < n; j++) {
            double s = 0;
            for (int r = 0; r < k; r++) s += (double)A[r * ars + i * acs] * B[r * brs + j * bcs];
            M[(size_t)i * n + j] = (float)s;
        }
}

static void test_known_spectra(void **st) {
    (void)st;
    enum { N = 12 };
    float I[N * N] = {0}, R1[N * N], D[5 * 7] = {0};
    for (int i = 0; i < N; i++) I[i * N + i] = 1.0f;
    assert_true(fabs(stable_rank_dense(I, N, N) - N) < 1e-9);
    /* rank one: u v^T */
    for (int i = 0; i < N; i++)
        for (int j = 0; j < N; j++) R1[i * N + j] = (float)((i + 1) * (j % 3 - 1.5));
    assert_true(fabs(stable_rank_dense(R1, N, N) - 1.0) < 1e-9);
    /* singular values 3, 2, 1, 0.5, 0 on a 5 x 7 matrix (scaled, permuted unit rows) */
    const float sv[5] = {3, 2, 1, 0.5f, 0};
    const int col[5] = {4, 0, 6, 2, 5};
    for (int i = 0; i < 5; i++) D[i * 7 + col[i]] = (i % 2 ? -1 : 1) * sv[i];
    const double want = (9 + 4 + 1 + 0.25) / 9.0;
    assert_true(fabs(stable_rank_dense(D, 5, 7) - want) < 1e-9);
    assert_true(isnan(stable_rank_dense((float[6]){0}, 2, 3)));
    /* close top singular values (1, 0.999, 0.998, ...), the case power iteration crawls on:
     * M = H1 D H2 [60, 40] with Householder reflections H = I - 2 u u^T / |u|^2 */
    {
        enum { R = 60, C = 40 };
        static float M[R * C];
        double u1[R], u2[C], n1 = 0, n2 = 0, want2 = 0;
        for (int i = 0; i < R; i++) u1[i] = sin(1.3 * i + 0.2), n1 += u1[i] * u1[i];
        for (int j = 0; j < C; j++) u2[j] = cos(0.7 * j + 0.1), n2 += u2[j] * u2[j];
        /* (H1 D H2)_ij = sum_k H1_ik D_kk H2_kj */
        for (int i = 0; i < R; i++)
            for (int j = 0; j < C; j++) {
                double acc = 0;
                for (int k = 0; k < C; k++) {
                    const double h1 = (i == k) - 2 * u1[i] * u1[k] / n1;
                    const double h2 = (k == j) - 2 * u2[k] * u2[j] / n2;
                    acc += h1 * (1.0 - 0.001 * k) * h2;
                }
                M[i * C + j] = (float)acc;
            }
        for (int k = 0; k < C; k++) want2 += (1.0 - 0.001 * k) * (1.0 - 0.001 * k);
        const double got = stable_rank_dense(M, R, C);
        assert_true(fabs(got - want2) < 1e-5 * want2);
        print_message("clustered spectrum: %.9f (want %.9f)\n", got, want2);
    }
    print_message("identity %.6f, rank one %.6f, diag %.6f (want %.6f)\n",
                  stable_rank_dense(I, N, N), stable_rank_dense(R1, N, N),
                  stable_rank_dense(D, 5, 7), want);
}

static void test_factored_equals_product(void **st) {
    (void)st;
    enum { K = 6, N = 20 };
    trng g = {17};
    float A[K * N], Bbig[N * 3 * K], M[N * N];
    trng_fill(&g, A, K * N, 1.0);
    trng_fill(&g, Bbig, N * 3 * K, 1.0);
    /* rows of A; B = columns K .. 2K-1 of Bbig [N, 3K] read down its rows (as W_O's head i) */
    const float *B = Bbig + K;
    product(A, N, 1, B, 1, 3 * K, K, N, M);
    const double f = stable_rank_factored(A, N, 1, B, 1, 3 * K, K, N),
                 d = stable_rank_dense(M, N, N);
    assert_true(fabs(f - d) < 1e-5 * d);
    assert_true(f >= 1.0 && f <= K + 1e-9); /* rank <= K */
    /* the same product from a transposed layout of A (columns) */
    float At[N * K];
    for (int r = 0; r < K; r++)
        for (int c = 0; c < N; c++) At[c * K + r] = A[r * N + c];
    const double ft = stable_rank_factored(At, 1, K, B, 1, 3 * K, K, N);
    assert_true(fabs(ft - f) < 1e-9 * f);
    print_message("factored %.6f, explicit %.6f\n", f, d);
}

/* A Parallax layer's head 0 circuits against explicit products; W_R only where there is one. */
static void test_model_layers(void **st) {
    (void)st;
    const char *kv[] = {"layers=2", "hidden=32", "heads=2", "seed=5"};
    model *m = random_model("parallax", kv, 4);
    err e = {{0}};
    layer_ranks r;
    assert_int_equal(model_layer_ranks(m, 1, &r, &e), 0);
    const layer *L = &m->layers[1];
    const int C = m->c.hidden, dk = L->mc.dk, dv = L->mc.dv;
    assert_true(isfinite(r.wq) && isfinite(r.wk) && isfinite(r.wv) && isfinite(r.wo) &&
                isfinite(r.wr));
    assert_true(fabs(r.wq - stable_rank_dense(L->q_proj, C, C)) < 1e-12);
    float *M = malloc((size_t)C * C * sizeof *M);
    double lo = INFINITY, hi = -INFINITY, mean = 0;
    for (int h = 0; h < C / dk; h++) {
        product(L->q_proj + (size_t)h * dk * C, C, 1, L->k_proj + (size_t)h * dk * C, C, 1, dk, C,
                M);
        const double v = stable_rank_dense(M, C, C);
        lo = fmin(lo, v), hi = fmax(hi, v), mean += v / (C / dk);
    }
    assert_true(fabs(r.qk[0] - mean) < 1e-5 * mean);
    assert_true(fabs(r.qk[1] - lo) < 1e-5 * lo && fabs(r.qk[2] - hi) < 1e-5 * hi);
    /* W_OV of value head 1: W_O[:, dv..2dv) W_V[dv..2dv, :] */
    for (int i = 0; i < C; i++)
        for (int j = 0; j < C; j++) {
            double s = 0;
            for (int c = 0; c < dv; c++)
                s +=
                    (double)L->o_proj[(size_t)i * C + dv + c] * L->v_proj[(size_t)(dv + c) * C + j];
            M[(size_t)i * C + j] = (float)s;
        }
    const double ov1 = stable_rank_dense(M, C, C);
    assert_true(ov1 >= r.ov[1] - 1e-5 * ov1 && ov1 <= r.ov[2] + 1e-5 * ov1);
    assert_true(isfinite(r.rk[0]));
    assert_int_equal(model_layer_ranks(m, 2, &r, &e), -1);
    print_message("parallax layer 1: W_Q %.3f W_R %.3f W_QK %.3f [%.3f, %.3f] W_OV %.3f\n", r.wq,
                  r.wr, r.qk[0], r.qk[1], r.qk[2], r.ov[0]);
    free(M);
    model_free(m);
    /* softmax: no W_R; mamba2: none of these projections */
    m = random_model("softmax", kv, 4);
    assert_int_equal(model_layer_ranks(m, 0, &r, &e), 0);
    assert_true(isnan(r.wr) && isnan(r.rk[0]) && isfinite(r.qk[0]));
    model_free(m);
    m = random_model("mamba2", kv, 4);
    assert_int_equal(model_layer_ranks(m, 0, &r, &e), 0);
    assert_true(isnan(r.wq) && isnan(r.qk[0]) && isnan(r.ov[0]));
    model_free(m);
}

static void test_command(void **st) {
    (void)st;
    tsession t;
    ts_open(&t);
    err e = {{0}};
    assert_int_equal(ts_exec(&t, &e, "model ranks"), -1); /* no model yet */
    assert_non_null(strstr(e.msg, "no model"));
    assert_int_equal(ts_exec(&t, &e, "model random parallax layers=2 hidden=32 heads=2"), 0);
    assert_int_equal(ts_exec(&t, &e, "model ranks"), 0);
    const char *out = ts_out(&t);
    assert_non_null(strstr(out, "W_RK = W_R^T W_K"));
    assert_non_null(strstr(out, "    0  parallax"));
    assert_non_null(strstr(out, "    1  parallax"));
    assert_int_equal(ts_exec(&t, &e, "model ranks layer=2"), -1);
    assert_non_null(strstr(e.msg, "out of range"));
    assert_int_equal(ts_exec(&t, &e, "model ranks layr=1"), -1);
    assert_int_equal(ts_exec(&t, &e, "model ranks layer=x"), -1);
    ts_close(&t);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_known_spectra),
        cmocka_unit_test(test_factored_equals_product),
        cmocka_unit_test(test_model_layers),
        cmocka_unit_test(test_command),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
