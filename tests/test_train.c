/* test_train.c: the trainer's model pass (train/model_grad.h).
 *   - its logits equal model_prefill's for gdn, deltanet and kaczmarz models (with and without
 *     the short convolution and the output gate, two sequences, T not a multiple of the chunk);
 *   - its gradient of every tensor matches central differences of its loss along a direction
 *     (the gradient plus noise) (the blocks and cores are checked one by one to 1e-6 in
 * test_grad.c; this checks how they are wired together, where a mistake is an error of order one);
 *   - models it cannot differentiate are refused in words. */
#include "tests/tmodel.h"

#include "train/model_grad.h"
#include "train/train.h"
#include "train/ops.h"

static uint64_t g_rng = 88172645463325252ull;
static double uniform(void) {
    g_rng ^= g_rng << 13, g_rng ^= g_rng >> 7, g_rng ^= g_rng << 17;
    return (double)(g_rng >> 11) * (1.0 / 9007199254740992.0);
}

typedef struct tcase {
    const char *mixer;
    const char *kv[10];
    int n;
} tcase;

static const tcase CASES[] = {
    {"gdn", {"layers=2", "hidden=24", "heads=2", "head_dim=6", "vocab=19", "seed=3"}, 6},
    {"deltanet", {"layers=2", "hidden=16", "heads=2", "head_dim=8", "vocab=17", "seed=4"}, 6},
    {"kaczmarz", {"layers=2", "hidden=24", "heads=3", "head_dim=4", "vocab=23", "seed=5"}, 6},
    {"gdn",
     {"layers=1", "hidden=16", "heads=2", "head_dim=4", "vocab=11", "seed=6",
      "use_short_conv=false", "use_gate=false"},
     8},
    {"kaczmarz",
     {"layers=1", "hidden=16", "heads=2", "head_dim=4", "vocab=11", "seed=7", "conv_bias=true",
      "allow_neg_eigval=true"},
     8},
    /* DeltaNet's sum-normalised keys and queries (fla's qk_norm='sum') */
    {"deltanet",
     {"layers=1", "hidden=16", "heads=2", "head_dim=8", "vocab=13", "seed=9", "qk_norm=sum"},
     7},
    /* softmax attention (transformer): RoPE, then with per-head q/k norms and biases */
    {"softmax", {"layers=2", "hidden=16", "heads=2", "head_dim=8", "vocab=17", "seed=10"}, 6},
    {"softmax",
     {"layers=1", "hidden=16", "heads=4", "head_dim=4", "vocab=13", "seed=11", "qk_norm=true",
      "qkv_bias=true"},
     8},
    /* GLA: SiLU convolutions, the low-rank gate, the gated output norm; then without them and
     * with the gate clamped */
    {"gla", {"layers=2", "hidden=16", "heads=2", "head_dim=8", "vocab=17", "seed=12"}, 6},
    {"gla",
     {"layers=1", "hidden=16", "heads=2", "head_dim=4", "vocab=11", "seed=13",
      "use_short_conv=false", "use_output_gate=false", "clamp_min=-0.05"},
     9},
    /* Mamba2: in_proj, the xBC convolution, dt, the scalar-decay core, D, the gated norm; then
     * with biases, a per-channel D and two groups of B and C */
    {"mamba2", {"layers=2", "hidden=16", "heads=2", "head_dim=8", "vocab=17", "seed=14"}, 6},
    {"mamba2",
     {"layers=1", "hidden=16", "heads=4", "head_dim=8", "vocab=13", "seed=15", "use_bias=true",
      "D_has_hdim=true", "n_groups=2"},
     9},
    /* Parallax: r with q's rotation; then with q/k/r norms and biases */
    {"parallax", {"layers=2", "hidden=16", "heads=2", "head_dim=8", "vocab=17", "seed=16"}, 6},
    {"parallax",
     {"layers=1", "hidden=16", "heads=4", "head_dim=4", "vocab=13", "seed=17", "qk_norm=true",
      "qkv_bias=true"},
     8},
    /* Kalman: the static dynamics from delta, lambda_log, process_noise; then without the
     * convolution, the gate and the q/k norms */
    {"kalman", {"layers=2", "hidden=8", "head_dim=3", "vocab=17", "seed=18"}, 5},
    {"kalman",
     {"layers=1", "hidden=8", "head_dim=4", "vocab=13", "seed=19", "use_conv=false",
      "use_gating=false", "qk_norm=false"},
     8},
    /* KATA m1 (L2-normalised q, k); then mg with two groups, SiLU convolutions and RoPE */
    {"kata", {"layers=2", "hidden=16", "heads=2", "head_dim=8", "vocab=17", "seed=20"}, 6},
    {"kata",
     {"layers=1", "hidden=16", "heads=2", "head_dim=8", "vocab=13", "seed=21", "variant=mg",
      "groups=2", "use_short_conv=true", "rope=true"},
     10},
    /* the other normalised KATA variants: sigma (PSD sum over two groups), orthant, lorentz,
     * linear, each through the whole model */
    {"kata",
     {"layers=1", "hidden=16", "heads=2", "head_dim=8", "vocab=13", "seed=22", "variant=sigma",
      "groups=2"},
     8},
    {"kata",
     {"layers=1", "hidden=16", "heads=2", "head_dim=8", "vocab=13", "seed=23", "variant=orthant"},
     7},
    {"kata",
     {"layers=1", "hidden=16", "heads=2", "head_dim=8", "vocab=13", "seed=24", "variant=lorentz"},
     7},
    {"kata",
     {"layers=1", "hidden=16", "heads=2", "head_dim=8", "vocab=13", "seed=25", "variant=linear"},
     7},
    /* DeltaKATA: the delta rule on PSD features with its write strength b_proj, over two layers;
     * then two groups with SiLU convolutions and RoPE */
    {"kata",
     {"layers=2", "hidden=16", "heads=2", "head_dim=6", "vocab=13", "seed=26", "variant=delta"},
     7},
    {"kata",
     {"layers=1", "hidden=16", "heads=2", "head_dim=8", "vocab=13", "seed=27", "variant=delta",
      "groups=2", "use_short_conv=true", "rope=true"},
     10},
    /* GDN's beta on the raw keys Kaczmarz reads (l2norm_keys=false) */
    {"gdn",
     {"layers=1", "hidden=16", "heads=2", "head_dim=4", "vocab=11", "seed=8", "l2norm_keys=false"},
     7},
};
#define NCASES (int)(sizeof CASES / sizeof CASES[0])

static model *case_model(const tcase *k) {
    model *m = random_model(k->mixer, k->kv, k->n);
    /* random_model initialises biases and norms to constants, and its 0.02-sized projections
     * make keys of norm ~1e-2, where Kaczmarz's beta = eta / (|k|^2 + eps) is ~1e4 and float
     * differences of the loss are mostly rounding: move every weight by up to +-0.25 so that
     * activations are of order one and no gradient is trivially structured */
    for (int i = 0; i < m->nslots; i++) {
        wslot *s = &m->slots[i];
        int64_t n = 1;
        for (int d = 0; d < s->ndim; d++) n *= s->shape[d];
        for (int64_t j = 0; j < n; j++) s->data[j] += (float)(0.5 * (uniform() - 0.5));
    }
    err e = {{0}};
    if (model_refresh(m, &e)) fail_msg("%s", e.msg); /* Kalman's a, p from the moved weights */
    return m;
}

static void test_logits_match_prefill(void **st) {
    (void)st;
    const int B = 2, T = 21, chunk = 8;
    for (int ci = 0; ci < NCASES; ci++) {
        model *m = case_model(&CASES[ci]);
        int V = m->c.vocab;
        int32_t ids[2 * 21], tgt[2 * 21];
        for (int i = 0; i < B * T; i++) ids[i] = (int32_t)(uniform() * V), tgt[i] = -1;
        train_pass *p = NULL;
        err e = {{0}};
        if (train_pass_init(&p, m, B, T, chunk, &e)) fail_msg("%s", e.msg);
        float *lt = malloc((size_t)B * T * V * sizeof(float)),
              *lp = malloc((size_t)T * V * sizeof(float));
        train_model_pass(m, p, ids, tgt, 1.0f, NULL, NULL, lt);
        for (int b = 0; b < B; b++) {
            assert_int_equal(model_reset(m, 0, &e), 0);
            if (model_prefill(m, ids + b * T, T, lp, &e)) fail_msg("%s", e.msg);
            double r = rel_err(lt + (size_t)b * T * V, lp, (size_t)T * V);
            print_message("  %s case %d sequence %d: logits rel err %.2e\n", CASES[ci].mixer, ci, b,
                          r);
            if (!(r < 1e-5))
                fail_msg("%s case %d: trainer logits differ from model_prefill (%g)",
                         CASES[ci].mixer, ci, r);
        }
        free(lt), free(lp);
        train_pass_free(p);
        model_free(m);
    }
}

static double loss_at(const model *m, train_pass *p, const int32_t *ids, const int32_t *tgt,
                      float wgt) {
    return train_model_pass(m, p, ids, tgt, wgt, NULL, NULL, NULL);
}

static void test_gradient_directions(void **st) {
    (void)st;
    const int B = 2, T = 13, chunk = 4;
    for (int ci = 0; ci < NCASES; ci++) {
        model *m = case_model(&CASES[ci]);
        int V = m->c.vocab;
        int32_t ids[2 * 13], tgt[2 * 13];
        for (int i = 0; i < B * T; i++) {
            ids[i] = (int32_t)(uniform() * V);
            tgt[i] = i % 3 == 0 ? -1 : (int32_t)(uniform() * V);
        }
        train_pass *p = NULL;
        err e = {{0}};
        train_grads g;
        if (train_pass_init(&p, m, B, T, chunk, &e) || train_grads_init(&g, m, &e))
            fail_msg("%s", e.msg);
        float wgt = 1.0f / 17;
        train_grads_zero(&g);
        train_model_pass(m, p, ids, tgt, wgt, &g, NULL, NULL);
        double worst = 0;
        const char *worst_name = "";
        for (int i = 0; i < m->nslots; i++) {
            wslot *s = &m->slots[i];
            int64_t n = 1;
            for (int d = 0; d < s->ndim; d++) n *= s->shape[d];
            float *dir = malloc((size_t)n * sizeof *dir), *keep = malloc((size_t)n * sizeof *keep);
            double an = 0, dn = 0;
            /* along the gradient plus a random part: the largest signal over the loss's
             * rounding, and a direction no sign error can hide in */
            double gn = 0;
            for (int64_t j = 0; j < n; j++) gn += (double)g.of[i][j] * g.of[i][j];
            gn = sqrt(gn / n) + 1e-30;
            for (int64_t j = 0; j < n; j++) {
                dir[j] = (float)(g.of[i][j] / gn + 0.5 * (uniform() - 0.5));
                an += (double)dir[j] * g.of[i][j];
                dn += (double)dir[j] * dir[j];
            }
            memcpy(keep, s->data, (size_t)n * sizeof *keep);
            double wn = 0;
            for (int64_t j = 0; j < n; j++) wn += (double)keep[j] * keep[j];
            /* Three step sizes, 1e-2, 1e-3 and 1e-4 of the tensor's own size, each with
             * Richardson's (4 D(h/2) - D(h)) / 3, which cancels the h^2 term of central
             * differences: the larger steps lose to the curvature of L2 norms of near-zero queries,
             * the smaller to the float loss's rounding on small tensors (biases); a wrong gradient
             * fails them all. */
            double err = INFINITY, fd = 0;
            for (int si = 0; si < 3; si++) {
                double h = (si == 0   ? 1e-2
                            : si == 1 ? 1e-3
                                      : 1e-4) *
                           sqrt(wn / n) / sqrt(dn / n),
                       d2[2];
                for (int k = 0; k < 2; k++) {
                    double hk = k ? h / 2 : h;
                    for (int64_t j = 0; j < n; j++) s->data[j] = keep[j] + (float)(hk * dir[j]);
                    double lp = loss_at(m, p, ids, tgt, wgt);
                    for (int64_t j = 0; j < n; j++) s->data[j] = keep[j] - (float)(hk * dir[j]);
                    double lm = loss_at(m, p, ids, tgt, wgt);
                    d2[k] = (lp - lm) / (2 * hk);
                }
                double f = (4 * d2[1] - d2[0]) / 3;
                double r = fabs(f - an) / (fabs(f) + fabs(an) + 1e-4);
                if (r < err) err = r, fd = f;
            }
            memcpy(s->data, keep, (size_t)n * sizeof *keep);
            if (err > worst) worst = err, worst_name = s->name;
            if (getenv("TRAIN_TEST_VERBOSE"))
                print_message("    %s %.3e fd %.6g an %.6g\n", s->name, err, fd, an);
            if (!(err < 5e-2) && !getenv("TRAIN_TEST_VERBOSE"))
                fail_msg("%s case %d, %s: directional derivative %.6g, gradient says %.6g",
                         CASES[ci].mixer, ci, s->name, fd, an);
            free(dir), free(keep);
        }
        print_message("  %s case %d: %d tensors, worst relative difference %.2e (%s)\n",
                      CASES[ci].mixer, ci, m->nslots, worst, worst_name);
        train_grads_free(&g);
        train_pass_free(p);
        model_free(m);
    }
}

/* precision=bf16: the products' operands and outputs are bf16 values (low 16 bits zero), near the
 * fp32 product; off again, the product is fp32's */
static void test_bf16_products(void **st) {
    (void)st;
    const int N = 7, out = 9, in = 33;
    float X[7 * 33], W[9 * 33], Y[7 * 9], Yf[7 * 9];
    for (int i = 0; i < N * in; i++) X[i] = (float)(uniform() - 0.5);
    for (int i = 0; i < out * in; i++) W[i] = (float)(uniform() - 0.5);
    train_linear_fwd_f(Yf, X, W, NULL, N, out, in);
    train_set_bf16(1);
    train_linear_fwd_f(Y, X, W, NULL, N, out, in);
    train_set_bf16(0);
    for (int i = 0; i < N * out; i++) {
        uint32_t u;
        memcpy(&u, &Y[i], 4);
        assert_int_equal(u & 0xffffu, 0);
    }
    double r = rel_err(Y, Yf, (size_t)N * out);
    print_message("  bf16 product against fp32: rel err %.2e\n", r);
    assert_true(r > 1e-5 && r < 2e-2);
    train_linear_fwd_f(Y, X, W, NULL, N, out, in);
    assert_memory_equal(Y, Yf, sizeof Y);
}

static void test_refusals(void **st) {
    (void)st;
    err e = {{0}};
    const char *kv2[] = {"layers=1",   "hidden=16", "heads=2",
                         "head_dim=8", "vocab=11",  "num_v_heads=4"};
    model *m = random_model("gdn", kv2, 6);
    assert_int_not_equal(train_model_check(m, &e), 0);
    expect_has(e.msg, "num_v_heads");
    model_free(m);
}

/* which runs train on the GPU under device gpu, and the reason the others give */
static void test_gpu_capable(void **st) {
    (void)st;
    struct {
        const char *mixer, *kv[2];
        int n, want;
        const char *why;
    } cases[] = {
        {"gdn", {NULL}, 0, 1, NULL},
        {"kaczmarz", {"seq=128"}, 1, 1, NULL},
        {"gla", {NULL}, 0, 0, "gla has no GPU trainer yet"},
        {"kata", {"variant=delta"}, 1, 0, "kata has no GPU trainer yet"},
        {"gdn", {"precision=bf16"}, 1, 0, "precision=bf16 trains on the CPU only"},
        {"deltanet", {"qk_norm=sum"}, 1, 0, "qk_norm=sum trains on the CPU only"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        opts o, rest;
        err e = {{0}};
        train_cfg c;
        assert_int_equal(opts_parse(&o, cases[i].n, (char **)cases[i].kv, &e), 0);
        if (train_cfg_parse(&c, cases[i].mixer, &o, &rest, &e)) fail_msg("%s", e.msg);
        char why[160] = "";
        assert_int_equal(train_cfg_gpu_capable(&c, why, sizeof why), cases[i].want);
        if (cases[i].why) expect_has(why, cases[i].why);
        opts_free(&o);
    }
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_logits_match_prefill), cmocka_unit_test(test_gradient_directions),
        cmocka_unit_test(test_bf16_products),        cmocka_unit_test(test_refusals),
        cmocka_unit_test(test_gpu_capable),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
