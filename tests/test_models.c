/* test_models.c: the model stack (models/) through its C interface.
 *
 *  - building blocks against their definitions (softplus threshold, L2 norm eps inside the root,
 *    norm-then-gate vs gate-then-norm, the convolution cache, RoPE, fla's MLP width rounding);
 *  - every reference checkpoint of ../shared/refs: logits against fla's, step == prefill;
 *  - the two references that fla computed with TF32 arithmetic in the core (gated_deltanet's chunk
 *    kernel, parallax's naive einsums): a test double that rounds the core's products as TF32 does
 *    closes the gap to float32 rounding, which shows the stack around the core is exact;
 *  - random models for every mixer: deterministic, step == prefill, 4096 tokens without NaN/Inf
 *    and with bounded states, save -> load bit for bit;
 *  - the random init: N(0, sigma^2) within sampling error, the same bits with 1 and several
 *    threads and with or without AVX2, the size limit and out-of-memory refusals;
 *  - loading over all cores: every dtype converted as the sequential reader does, the first
 *    non-finite element named; the weights' SHA-256 computed lazily (model_weights_sha256);
 *  - bad checkpoints: each refused with one line naming the tensor or key;
 *  - swap (gdn <-> kaczmarz on a GDN checkpoint, through the probes), GVA, tied heads, probes in
 *    the trace, byte tokens. */
#include "testutil.h"

#include <fcntl.h>
#include <sys/resource.h>
#include <sys/stat.h>

#include "core/config.h"
#include "core/fileio.h"
#include "core/parallel.h"
#include "core/safetensors.h"
#include "core/sha256.h"
#include "mixers/record.h"
#include "models/blocks.h"
#include "models/model.h"
#include "models/tokenizer.h"
#include "tmodel.h"

/* under AddressSanitizer (make check) a failed malloc is its report, not NULL */
#if defined(__SANITIZE_ADDRESS__)
#define TM_ASAN 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define TM_ASAN 1
#endif
#endif

static const char *const MIXERS[] = {"gdn",     "deltanet", "kaczmarz", "gla", "mamba2",
                                     "softmax", "parallax", "kalman",   "kata"};
#define NMIXERS 9

/* ---- helpers ---- */

static int32_t *some_tokens(int T, int V, uint64_t seed) {
    int32_t *ids = malloc((size_t)T * sizeof *ids);
    assert_non_null(ids);
    trng r = {seed};
    for (int t = 0; t < T; t++) ids[t] = (int32_t)((trng_uniform(&r) + 1.0) * 0.5 * V) % V;
    return ids;
}

/* a reference folder: the model, its ids and fla's logits */
typedef struct ref {
    model *m;
    int32_t *ids;
    float *logits;
    int T, V;
} ref;

static void ref_open(ref *r, const char *name) {
    char dir[512], path[600];
    err e = {{0}};
    ref_path(dir, sizeof dir, name);
    if (model_load(&r->m, dir, &e)) fail_msg("load %s: %s", dir, e.msg);
    snprintf(path, sizeof path, "%s/expected.safetensors", dir);
    if (tok_read_file(path, "input_ids", &r->ids, &r->T, &e)) fail_msg("%s", e.msg);
    st_file *f;
    assert_int_equal(st_open(&f, path, &e), 0);
    int64_t n;
    r->logits = st_get_f32(f, "logits", &n);
    r->V = r->m->c.vocab;
    assert_int_equal(n, (int64_t)r->T * r->V);
    st_close(f);
}

static void ref_close(ref *r) {
    model_free(r->m);
    free(r->ids), free(r->logits);
}

static double rel_rows(const float *a, const float *b, int from, int to, int V) {
    return rel_err(a + (size_t)from * V, b + (size_t)from * V, (size_t)(to - from) * V);
}

static int has(const char *msg, const char *needle) {
    return strstr(msg, needle) != NULL;
}

/* ---- building blocks ---- */

static void test_blocks_scalars(void **st) {
    (void)st;
    assert_true(blk_softplus(25.0f) == 25.0f); /* above PyTorch's threshold 20: x itself */
    assert_true(fabsf(blk_softplus(0.0f) - logf(2.0f)) < 1e-7f);
    assert_true(fabsf(blk_softplus(-30.0f) - expf(-30.0f)) < 1e-15f);
    assert_true(fabsf(blk_logsigmoid(-50.0f) + 50.0f) < 1e-5f);
    assert_true(fabsf(blk_logsigmoid(3.0f) - logf(1.0f / (1.0f + expf(-3.0f)))) < 1e-6f);
    /* L2 norm: eps inside the square root, added to the sum of squares */
    float x[4] = {1e-3f, 0, 0, 0};
    float n = blk_l2norm(x, 4, 1e-6f);
    assert_true(fabsf(n - 1e-3f) < 1e-9f);
    assert_true(fabsf(x[0] - 1e-3f / sqrtf(1e-6f + 1e-6f)) < 1e-6f); /* = 1/sqrt(2), not 1/2 */
    float z[4] = {0};
    blk_l2norm(z, 4, 1e-6f);
    for (int i = 0; i < 4; i++) assert_true(z[i] == 0.0f);
    assert_int_equal(blk_mlp_intermediate(1024, 4), 2816);
    assert_int_equal(blk_mlp_intermediate(2048, 4), 5632);
    assert_int_equal(blk_mlp_intermediate(64, 4), 256);
    assert_int_equal(blk_mlp_intermediate(96, 4), 256);
}

static void test_blocks_norms(void **st) {
    (void)st;
    trng r = {7};
    float x[16], z[16], w[16], a[16], b[16];
    trng_fill(&r, x, 16, 1.0), trng_fill(&r, z, 16, 1.0), trng_fill(&r, w, 16, 1.0);
    /* FusedRMSNormGated: normalise, then gate */
    blk_rmsnorm_gated(a, x, z, w, 16, 1e-6f);
    double ss = 0;
    for (int i = 0; i < 16; i++) ss += (double)x[i] * x[i];
    for (int i = 0; i < 16; i++) {
        double want = x[i] / sqrt(ss / 16 + 1e-6) * w[i] * z[i] / (1 + exp(-z[i]));
        assert_true(fabs(a[i] - want) < 1e-5 * (1 + fabs(want)));
    }
    /* Mamba2's RMSNormGated: gate, then normalise, per group */
    blk_gate_rmsnorm(b, x, z, w, 16, 8, 1e-5f);
    for (int g = 0; g < 2; g++) {
        double s2 = 0, u[8];
        for (int i = 0; i < 8; i++) {
            u[i] = x[g * 8 + i] * z[g * 8 + i] / (1 + exp(-z[g * 8 + i]));
            s2 += u[i] * u[i];
        }
        for (int i = 0; i < 8; i++) {
            double want = u[i] / sqrt(s2 / 8 + 1e-5) * w[g * 8 + i];
            assert_true(fabs(b[g * 8 + i] - want) < 1e-5 * (1 + fabs(want)));
        }
    }
    /* the two orders differ */
    assert_true(rel_err(a, b, 16) > 1e-2);
}

static void test_blocks_conv_cache(void **st) {
    (void)st;
    enum { D = 5, W = 4, T = 11 };
    trng r = {3};
    float xs[T][D], w[D * W], b[D], y[D], cache[D * W] = {0}, cache2[D * W] = {0};
    trng_fill(&r, &xs[0][0], T * D, 1.0), trng_fill(&r, w, D * W, 1.0), trng_fill(&r, b, D, 1.0);
    for (int t = 0; t < T; t++) {
        blk_conv_step(y, cache, xs[t], w, b, D, W, ACT_SILU);
        for (int d = 0; d < D; d++) {
            /* zero-padded causal convolution, w[d, W-1] on the current token */
            double acc = b[d];
            for (int i = 0; i < W; i++) {
                int tt = t - (W - 1) + i;
                if (tt >= 0) acc += (double)w[d * W + i] * xs[tt][d];
            }
            double want = acc / (1 + exp(-acc));
            assert_true(fabs(y[d] - want) < 1e-5);
        }
    }
    /* decode after a prefix equals the full run: the cache is the last W inputs, newest last */
    for (int t = 0; t < T; t++) blk_conv_step(y, cache2, xs[t], w, NULL, D, W, ACT_NONE);
    for (int d = 0; d < D; d++) assert_true(cache2[d * W + W - 1] == xs[T - 1][d]);
}

static void test_blocks_rope(void **st) {
    (void)st;
    enum { H = 2, d = 8 };
    trng r = {5};
    float x[H * d], y[H * d], z[H * d];
    trng_fill(&r, x, H * d, 1.0);
    memcpy(y, x, sizeof x);
    blk_rope(y, H, d, 0, 10000.0f);
    for (int i = 0; i < H * d; i++) assert_true(y[i] == x[i]); /* position 0: identity */
    memcpy(y, x, sizeof x);
    blk_rope(y, H, d, 37, 10000.0f);
    for (int h = 0; h < H; h++)
        for (int i = 0; i < d / 2; i++) {
            double th = 37.0 * pow(10000.0, -2.0 * i / d), c = cos(th), s = sin(th);
            double a = x[h * d + i], b = x[h * d + i + d / 2];
            assert_true(fabs(y[h * d + i] - (a * c - b * s)) < 1e-4);
            assert_true(fabs(y[h * d + i + d / 2] - (b * c + a * s)) < 1e-4);
        }
    /* rotations: norms kept, and q.k depends only on the distance */
    float q[d], k[d], q2[d], k2[d];
    trng_fill(&r, q, d, 1.0), trng_fill(&r, k, d, 1.0);
    memcpy(q2, q, sizeof q), memcpy(k2, k, sizeof k);
    blk_rope(q, 1, d, 9, 10000.0f), blk_rope(k, 1, d, 4, 10000.0f);
    blk_rope(q2, 1, d, 105, 10000.0f), blk_rope(k2, 1, d, 100, 10000.0f);
    double d1 = 0, d2 = 0;
    for (int i = 0; i < d; i++) d1 += (double)q[i] * k[i], d2 += (double)q2[i] * k2[i];
    assert_true(fabs(d1 - d2) < 1e-4);
    memcpy(z, x, sizeof x);
    blk_rope_interleaved(z, H, d, 3, 10000.0f);
    double th = 3.0;
    assert_true(fabs(z[0] - (x[0] * cos(th) - x[1] * sin(th))) < 1e-5);
    assert_true(fabs(z[1] - (x[1] * cos(th) + x[0] * sin(th))) < 1e-5);
}

/* ---- the reference checkpoints ---- */

static void check_ref(const char *name, double tol) {
    ref r;
    ref_open(&r, name);
    float *ls = step_logits(r.m, r.ids, r.T, NULL);
    float *lp = prefill_logits(r.m, r.ids, r.T);
    double e_ref = rel_err(ls, r.logits, (size_t)r.T * r.V),
           e_path = rel_err(lp, ls, (size_t)r.T * r.V);
    print_message("  %-15s logits vs fla %.2e, prefill vs step %.2e\n", name, e_ref, e_path);
    assert_true(e_ref < tol);
    assert_true(e_path < 1e-5);
    /* half prefill, half steps: the caches carry over */
    err e = {{0}};
    float *lm = malloc((size_t)r.T * r.V * sizeof *lm);
    assert_int_equal(model_reset(r.m, 0, &e), 0);
    assert_int_equal(model_prefill(r.m, r.ids, 40, lm, &e), 0);
    for (int t = 40; t < r.T; t++)
        assert_int_equal(model_step(r.m, r.ids[t], lm + (size_t)t * r.V, NULL, &e), 0);
    assert_true(rel_err(lm, ls, (size_t)r.T * r.V) < 1e-5);
    free(ls), free(lp), free(lm);
    ref_close(&r);
}

static void test_ref_transformer(void **st) {
    (void)st;
    check_ref("transformer", 1e-4);
}
static void test_ref_gla(void **st) {
    (void)st;
    check_ref("gla", 1e-4);
}
static void test_ref_delta_net(void **st) {
    (void)st;
    check_ref("delta_net", 1e-4);
}
static void test_ref_mamba2(void **st) {
    (void)st;
    check_ref("mamba2", 1e-4);
}
/* fla computed these two cores with TF32 products (below): exact float32 lands at ~5e-4 */
static void test_ref_gated_deltanet(void **st) {
    (void)st;
    check_ref("gated_deltanet", 1e-3);
}
static void test_ref_parallax(void **st) {
    (void)st;
    check_ref("parallax", 1e-3);
}

/* parallax/exact.safetensors: the same model's logits in float64 with the naive core (fla,
 * use_cache=False): an exact float32 forward lies within 1e-5 of them (refs README), step and
 * prefill alike; expected.safetensors came from fla's cached TF32 Triton forward */
static void test_ref_parallax_exact(void **st) {
    (void)st;
    ref r;
    ref_open(&r, "parallax");
    char dir[512], path[600];
    ref_path(dir, sizeof dir, "parallax");
    snprintf(path, sizeof path, "%s/exact.safetensors", dir);
    err e = {{0}};
    st_file *f;
    assert_int_equal(st_open(&f, path, &e), 0);
    int64_t n;
    float *exact = st_get_f32(f, "logits", &n);
    assert_non_null(exact);
    assert_int_equal(n, (int64_t)r.T * r.V);
    st_close(f);
    float *ls = step_logits(r.m, r.ids, r.T, NULL), *lp = prefill_logits(r.m, r.ids, r.T);
    double es = rel_err(ls, exact, (size_t)n), ep = rel_err(lp, exact, (size_t)n),
           ef = rel_err(r.logits, exact, (size_t)n);
    print_message(
        "  parallax vs float64: step %.2e, prefill %.2e (fla's cached TF32 forward %.2e)\n", es, ep,
        ef);
    assert_true(es < 1e-5 && ep < 1e-5);
    assert_true(ef > 10 * es); /* the reference's own TF32 distance, for scale */
    free(ls), free(lp), free(exact);
    ref_close(&r);
}

/* TF32 as Hopper tensor cores read float32: the low 13 mantissa bits dropped */
static float tf32(float x) {
    uint32_t u;
    memcpy(&u, &x, 4);
    u &= ~0x1fffu;
    memcpy(&x, &u, 4);
    return x;
}

/* A parallax double: fla's naive_parallax with its einsums in TF32 (inputs truncated, float32
 * accumulation), the softmax statistics in float32, as that reference ran. KV cache as state. */
static int plx32_configure(mixer_cfg *c, opts *o, err *e) {
    (void)c, (void)o, (void)e;
    return 0;
}
static size_t plx32_floats(const mixer_cfg *c) {
    return (size_t)c->max_t * c->H * (c->dk + c->dv);
}
static void plx32_init(const mixer_cfg *c, float *s) {
    memset(s, 0, plx32_floats(c) * sizeof *s);
}
static void plx32_step(const mixer_cfg *c, float *st, const mixer_tok *x, int pos, float *o,
                       float *probes) {
    (void)probes;
    int H = c->H, d = c->dk;
    float *K = st, *V = st + (size_t)c->max_t * H * d;
    memcpy(K + (size_t)pos * H * d, x->in[IN_K], (size_t)H * d * sizeof(float));
    memcpy(V + (size_t)pos * H * d, x->in[IN_V], (size_t)H * d * sizeof(float));
    float s1[4096], s2[4096];
    for (int h = 0; h < H; h++) {
        const float *q = x->in[IN_Q] + h * d, *r = x->in[IN_R] + h * d;
        float m = -INFINITY, d1 = 0, d2 = 0;
        for (int j = 0; j <= pos; j++) {
            const float *k = K + ((size_t)j * H + h) * d;
            float a = 0, b = 0;
            for (int i = 0; i < d; i++) a += tf32(q[i]) * tf32(k[i]), b += tf32(r[i]) * tf32(k[i]);
            s1[j] = a * c->scale, s2[j] = b;
            if (s1[j] > m) m = s1[j];
        }
        float o1[256] = {0}, o2[256] = {0};
        for (int j = 0; j <= pos; j++) {
            float p1 = expf(s1[j] - m), p2 = p1 * s2[j];
            d1 += p1, d2 += p2;
            const float *v = V + ((size_t)j * H + h) * d;
            for (int i = 0; i < d; i++)
                o1[i] += tf32(p1) * tf32(v[i]), o2[i] += tf32(p2) * tf32(v[i]);
        }
        float inv = 1.0f / d1, cn = d2 / d1;
        for (int i = 0; i < d; i++) o[h * d + i] = o1[i] * inv * (1.0f + cn) - o2[i] * inv;
    }
}
static void plx32_prefill(const mixer_cfg *c, float *st, const mixer_seq *x, int pos0, float *o) {
    for (int t = 0; t < x->T; t++) {
        mixer_tok tk = mixer_seq_at(c, x, t);
        plx32_step(c, st, &tk, pos0 + t, o + (size_t)t * c->H * c->dv, NULL);
    }
}
static const input_def plx32_inputs[] = {
    {IN_Q, "q", W_DK, 1}, {IN_R, "r", W_DK, 1}, {IN_K, "k", W_DK, 1}, {IN_V, "v", W_DV, 1}};
static const mixer_ops plx32 = {.name = "parallax",
                                .summary = "test double",
                                .inputs = plx32_inputs,
                                .ninputs = 4,
                                .configure = plx32_configure,
                                .state_floats = plx32_floats,
                                .state_init = plx32_init,
                                .step = plx32_step,
                                .prefill = plx32_prefill};

static void test_ref_parallax_tf32(void **st) {
    (void)st;
    ref r;
    err e = {{0}};
    ref_open(&r, "parallax");
    float *l0 = step_logits(r.m, r.ids, r.T, NULL);
    assert_int_equal(model_swap_ops(r.m, -1, &plx32, NULL, &e), 0);
    float *l = step_logits(r.m, r.ids, r.T, NULL);
    double e0 = rel_err(l0, r.logits, (size_t)r.T * r.V),
           er = rel_err(l, r.logits, (size_t)r.T * r.V);
    print_message("  parallax: exact %.2e, with fla's TF32 einsums %.2e\n", e0, er);
    /* what remains is the order of float32 sums (cuBLAS vs ours) */
    assert_true(er < 3e-5);
    assert_true(er < e0 / 20);
    free(l), free(l0);
    ref_close(&r);
}

/* A gdn double for the first token: from a zero state fla's chunk kernel computes
 * o_0 = scale * tf32(q.k) * tf32(beta v) with q, k, beta v read as TF32; later tokens use gdn. */
static const mixer_ops *gdn_real;
static void gdn32_step(const mixer_cfg *c, float *st, const mixer_tok *x, int pos, float *o,
                       float *probes) {
    gdn_real->step(c, st, x, pos, o, probes);
    if (pos != 0) return;
    for (int h = 0; h < c->H; h++) {
        const float *q = x->in[IN_Q] + h * c->dk, *k = x->in[IN_K] + h * c->dk;
        float qk = 0;
        for (int i = 0; i < c->dk; i++) qk += tf32(q[i]) * tf32(k[i]);
        for (int i = 0; i < c->dv; i++)
            o[h * c->dv + i] =
                tf32(qk) * tf32(tf32(x->in[IN_V][h * c->dv + i] * x->in[IN_BETA][h])) * c->scale;
    }
}

static void test_ref_gated_deltanet_tf32(void **st) {
    (void)st;
    ref r;
    err e = {{0}};
    gdn_real = mixer_find("gdn");
    assert_non_null(gdn_real);
    mixer_ops gdn32 = *gdn_real;
    gdn32.step = gdn32_step;
    ref_open(&r, "gated_deltanet");
    float *l0 = step_logits(r.m, r.ids, 1, NULL);
    assert_int_equal(model_swap_ops(r.m, -1, &gdn32, NULL, &e), 0);
    float *l1 = step_logits(r.m, r.ids, 1, NULL);
    double e0 = rel_rows(l0, r.logits, 0, 1, r.V), e1 = rel_rows(l1, r.logits, 0, 1, r.V);
    print_message("  gated_deltanet token 0: exact %.2e, with fla's TF32 reads %.2e\n", e0, e1);
    assert_true(e1 < 1e-5);
    assert_true(e1 < e0 / 20);
    free(l0), free(l1);
    ref_close(&r);
}

/* ---- random models ---- */

static void test_random_deterministic(void **st) {
    (void)st;
    const char *s1[] = {"seed=3"}, *s2[] = {"seed=4"};
    for (int i = 0; i < NMIXERS; i++) {
        model *a = random_model(MIXERS[i], s1, 1), *b = random_model(MIXERS[i], s1, 1);
        model *c = random_model(MIXERS[i], s2, 1);
        assert_int_equal(a->nslots, b->nslots);
        int differ = 0;
        for (int j = 0; j < a->nslots; j++) {
            size_t n = 1;
            for (int d = 0; d < a->slots[j].ndim; d++) n *= (size_t)a->slots[j].shape[d];
            assert_memory_equal(a->slots[j].data, b->slots[j].data, n * sizeof(float));
            differ |= memcmp(a->slots[j].data, c->slots[j].data, n * sizeof(float)) != 0;
        }
        assert_true(differ);
        model_free(a), model_free(b), model_free(c);
    }
}

static void test_random_init_spec(void **st) {
    (void)st;
    model *m = random_model("gdn", NULL, 0);
    wslot *al = model_find_slot(m, "model.layers.0.attn.A_log");
    wslot *dt = model_find_slot(m, "model.layers.1.attn.dt_bias");
    wslot *nw = model_find_slot(m, "model.layers.0.attn.o_norm.weight");
    assert_non_null(al), assert_non_null(dt), assert_non_null(nw);
    for (int h = 0; h < 2; h++) {
        float A = expf(al->data[h]);
        assert_true(A > 0 && A <= 16); /* A ~ U(0, 16) */
        float d = blk_softplus(dt->data[h]);
        assert_true(d >= 1e-4f * 0.999f && d <= 0.1f * 1.001f); /* dt in [1e-3, 0.1], floor 1e-4 */
    }
    for (int i = 0; i < 64; i++) assert_true(nw->data[i] == 1.0f);
    model_free(m);
    model *k = random_model("mamba2", NULL, 0);
    wslot *ka = model_find_slot(k, "backbone.layers.0.mixer.A_log");
    for (int h = 0; h < (int)ka->shape[0]; h++)
        assert_true(expf(ka->data[h]) >= 1.0f - 1e-5f && expf(ka->data[h]) <= 16.0f + 1e-4f);
    model_free(k);
}

/* 1e6 draws of N(0, 1) (the generator of every normal tensor): mean, variance (of the cosine and
 * the sine halves of Box-Muller each), the tails beyond 3 and 4 sigma, the lag-1 correlation and
 * a chi-square over 100 equiprobable bins, each within 5 standard errors */
static void test_random_normal_stats(void **st) {
    (void)st;
    const int n = 1000000;
    float *x = malloc((size_t)n * sizeof *x), *y = malloc((size_t)(n + 3) * sizeof *y);
    assert_non_null(x), assert_non_null(y);
    model_random_normal(x, n, 5, "model.embeddings.weight", 1.0f);
    double sum[2] = {0}, sq[2] = {0}, lag = 0, cross = 0, big = 0;
    long cnt[2] = {0}, t3 = 0, t4 = 0, bins[100] = {0};
    model_random_normal(y, n, 5, "lm_head.weight", 1.0f);
    for (int i = 0; i < n; i++) {
        double v = x[i];
        int half = (i / 8) % 2; /* elements 16b..16b+7: r cos phi; 16b+8..16b+15: r sin phi */
        sum[half] += v, sq[half] += v * v, cnt[half]++;
        if (i + 1 < n) lag += v * x[i + 1];
        cross += v * y[i];
        t3 += fabs(v) > 3, t4 += fabs(v) > 4;
        big = fmax(big, fabs(v));
        int b = (int)(100 * 0.5 * erfc(-v / sqrt(2.0)));
        bins[b < 0 ? 0 : b > 99 ? 99 : b]++;
    }
    double mean = (sum[0] + sum[1]) / n, var = (sq[0] + sq[1]) / n - mean * mean;
    double chi2 = 0;
    for (int b = 0; b < 100; b++)
        chi2 += (bins[b] - n / 100.0) * (bins[b] - n / 100.0) / (n / 100.0);
    print_message("  N(0,1) x 1e6: mean %.5f var %.5f |x|>3 %ld |x|>4 %ld lag1 %.5f chi2(99) %.1f "
                  "max %.2f\n",
                  mean, var, t3, t4, lag / (n - 1), chi2, big);
    assert_true(fabs(mean) < 5 / sqrt(n));
    assert_true(fabs(var - 1) < 5 * sqrt(2.0 / n));
    for (int h = 0; h < 2; h++) {
        double m = sum[h] / cnt[h], v = sq[h] / cnt[h] - m * m;
        assert_true(fabs(m) < 5 / sqrt(cnt[h]));
        assert_true(fabs(v - 1) < 5 * sqrt(2.0 / cnt[h]));
    }
    double p3 = erfc(3 / sqrt(2.0)), p4 = erfc(4 / sqrt(2.0)); /* 2.70e-3, 6.33e-5 */
    assert_true(fabs(t3 - n * p3) < 5 * sqrt(n * p3));
    assert_true(fabs(t4 - n * p4) < 5 * sqrt(n * p4));
    assert_true(fabs(lag / (n - 1)) < 5 / sqrt(n));
    assert_true(fabs(cross / n) < 5 / sqrt(n)); /* another tensor's draws are independent */
    assert_true(chi2 < 99 + 5 * sqrt(2 * 99.0));
    assert_true(big < 6.7);
    /* sigma scales, and a prefix of any length is the prefix (odd lengths end inside a block) */
    model_random_normal(y, n + 3, 5, "model.embeddings.weight", 0.02f);
    for (int i = 0; i < n; i++)
        assert_true(fabsf(y[i] - 0.02f * x[i]) <= 1e-6f * fabsf(0.02f * x[i]) + 1e-12f);
    model_random_normal(y, 777, 5, "model.embeddings.weight", 1.0f);
    assert_memory_equal(y, x, 777 * sizeof(float));
    free(x), free(y);
}

static void expect_same_weights(const model *a, const model *b) {
    assert_int_equal(a->nslots, b->nslots);
    for (int j = 0; j < a->nslots; j++) {
        size_t n = 1;
        for (int d = 0; d < a->slots[j].ndim; d++) n *= (size_t)a->slots[j].shape[d];
        if (memcmp(a->slots[j].data, b->slots[j].data, n * sizeof(float)))
            fail_msg("tensor '%s' differs", a->slots[j].name);
    }
}

/* the same seed gives the same bits with 1 thread, with 3, with every core, and with the SSE2
 * code instead of AVX2; the embedding is model_random_normal's draws */
static void test_random_threads(void **st) {
    (void)st;
    const char *kv[] = {"seed=11", "vocab=4099", "layers=1"};
    par_set_threads(1);
    model *a = random_model("gdn", kv, 3);
    par_set_threads(3);
    model *b = random_model("gdn", kv, 3);
    par_set_threads(0);
    setenv("MIXSCOPE_NO_AVX2", "1", 1);
    model *c = random_model("gdn", kv, 3);
    unsetenv("MIXSCOPE_NO_AVX2");
    expect_same_weights(a, b);
    expect_same_weights(a, c);
    wslot *emb = model_find_slot(a, "model.embeddings.weight");
    int64_t n = emb->shape[0] * emb->shape[1];
    float *x = malloc((size_t)n * sizeof *x);
    model_random_normal(x, n, 11, emb->name, 0.02f);
    assert_memory_equal(x, emb->data, (size_t)n * sizeof *x);
    free(x);
    model_free(a), model_free(b), model_free(c);
    /* the non-normal inits keep their ranges under any thread count */
    par_set_threads(2);
    const char *km[] = {"seed=4", "hidden=256"};
    model *k = random_model("mamba2", km, 2);
    par_set_threads(0);
    wslot *ka = model_find_slot(k, "backbone.layers.1.mixer.A_log");
    for (int h = 0; h < (int)ka->shape[0]; h++)
        assert_true(expf(ka->data[h]) >= 1.0f - 1e-5f && expf(ka->data[h]) <= 16.0f + 1e-4f);
    model_free(k);
}

/* a model that cannot fit in memory is refused in one line naming its size; a failed allocation
 * (an address-space limit in a child process) is an error, not a crash */
static void test_random_size_limit(void **st) {
    (void)st;
    opts o;
    err e = {{0}};
    const char *huge[] = {"layers=1024", "hidden=16384", "vocab=1048576"};
    assert_int_equal(opts_parse(&o, 3, (char *const *)huge, &e), 0);
    model *m = NULL;
    assert_int_equal(model_random(&m, "gdn", &o, &e), -1);
    opts_free(&o);
    assert_null(m);
    print_message("  refused: %s\n", e.msg);
    expect_has(e.msg, "parameters"), expect_has(e.msg, "GB"), expect_has(e.msg, "memory");
    assert_null(strchr(e.msg, '\n'));
#ifdef TM_ASAN
    return; /* AddressSanitizer reports a failed malloc itself rather than returning NULL */
#endif
    fflush(NULL);
    pid_t pid = fork();
    assert_true(pid >= 0);
    if (pid == 0) {
        long pages = 0;
        FILE *f = fopen("/proc/self/statm", "r");
        if (!f || fscanf(f, "%ld", &pages) != 1) _exit(3);
        fclose(f);
        struct rlimit rl;
        rl.rlim_cur = rl.rlim_max = (rlim_t)pages * (rlim_t)sysconf(_SC_PAGESIZE) + (200u << 20);
        if (setrlimit(RLIMIT_AS, &rl)) _exit(3);
        const char *kv[] = {"layers=4", "hidden=1024", "heads=8", "head_dim=128", "vocab=32000"};
        opts oc;
        err ec = {{0}};
        model *mc = NULL;
        if (opts_parse(&oc, 5, (char *const *)kv, &ec)) _exit(3);
        int rc = model_random(&mc, "gdn", &oc, &ec);
        fprintf(stderr, "  child: %s\n", rc ? ec.msg : "built");
        _exit(rc == -1 && strstr(ec.msg, "out of memory") && !mc ? 0 : 1);
    }
    int status = 0;
    assert_int_equal(waitpid(pid, &status, 0), pid);
    assert_true(WIFEXITED(status));
    assert_int_equal(WEXITSTATUS(status), 0);
}

/* step == prefill, and a 4096-token run stays finite with bounded recurrent states */
static void test_random_step_prefill(void **st) {
    (void)st;
    for (int i = 0; i < NMIXERS; i++) {
        model *m = random_model(MIXERS[i], NULL, 0);
        int T = 70, V = m->c.vocab; /* past one 64-token chunk */
        int32_t *ids = some_tokens(T, V, 11 + (uint64_t)i);
        float *ls = step_logits(m, ids, T, NULL), *lp = prefill_logits(m, ids, T);
        double e = rel_err(lp, ls, (size_t)T * V);
        print_message("  random %-9s prefill vs step %.2e\n", MIXERS[i], e);
        assert_true(e < 1e-5);
        free(ls), free(lp), free(ids);
        model_free(m);
    }
}

static void test_random_long_stable(void **st) {
    (void)st;
    /* Small widths keep 9 x 4096 tokens affordable under the sanitizers; the attention cores run
     * with a 256-token window (their outputs are convex / affine mixtures of the cached values,
     * so the window bounds the cost, not what is tested). */
    for (int i = 0; i < NMIXERS; i++) {
        const char *kv[8] = {"hidden=16", "layers=1", "vocab=32", "intermediate_size=16"};
        int n = 4;
        const char *mx = MIXERS[i];
        if (strcmp(mx, "kalman") && strcmp(mx, "mamba2"))
            kv[n++] = "heads=2", kv[n++] = "head_dim=8";
        if (!strcmp(mx, "mamba2")) n = 3, kv[n++] = "head_dim=8"; /* no MLP; 4 heads of 8 */
        if (!strcmp(mx, "kalman")) kv[n++] = "expand=1";
        if (!strcmp(mx, "softmax") || !strcmp(mx, "parallax")) kv[n++] = "window_size=256";
        model *m = random_model(mx, kv, n);
        int T = 4096, V = m->c.vocab;
        int32_t *ids = some_tokens(T, V, 5);
        float *L = prefill_logits(m, ids, T);
        for (size_t j = 0; j < (size_t)T * V; j++)
            if (!isfinite(L[j])) fail_msg("%s: logit %zu is %g", mx, j, (double)L[j]);
        layer *ly = &m->layers[0];
        if (!ly->grows) {
            size_t sf = ly->mx->state_floats(&ly->mc);
            double big = 0;
            for (size_t j = 0; j < sf; j++) {
                assert_true(isfinite(ly->state[j]));
                big = fmax(big, fabs(ly->state[j]));
            }
            print_message("  %-9s 4096 tokens: max |state| %.3g\n", mx, big);
            assert_true(big < 1e4);
        }
        free(L), free(ids);
        model_free(m);
    }
}

static void test_save_load_bitwise(void **st) {
    (void)st;
    char *dir = test_tmpdir();
    for (int i = 0; i < NMIXERS; i++) {
        const char *kv[] = {"seed=9"};
        model *a = random_model(MIXERS[i], kv, 1), *b = NULL;
        char path[512];
        err e = {{0}};
        snprintf(path, sizeof path, "%s/%s", dir, MIXERS[i]);
        if (model_save(a, path, &e)) fail_msg("save: %s", e.msg);
        if (model_load(&b, path, &e)) fail_msg("load %s: %s", MIXERS[i], e.msg);
        assert_int_equal(a->nslots, b->nslots);
        for (int j = 0; j < a->nslots; j++) {
            wslot *sb = model_find_slot(b, a->slots[j].name);
            assert_non_null(sb);
            size_t n = 1;
            for (int d = 0; d < a->slots[j].ndim; d++) n *= (size_t)a->slots[j].shape[d];
            assert_memory_equal(a->slots[j].data, sb->data, n * sizeof(float));
        }
        int32_t *ids = some_tokens(20, a->c.vocab, 1);
        float *la = step_logits(a, ids, 20, NULL), *lb = step_logits(b, ids, 20, NULL);
        assert_memory_equal(la, lb, (size_t)20 * a->c.vocab * sizeof(float));
        free(la), free(lb), free(ids);
        model_free(a), model_free(b);
    }
    test_rmdir(dir);
}

/* config variants of every family: step == prefill, save -> load bit for bit */
static void test_config_variants(void **st) {
    (void)st;
    static const char *const VAR[][6] = {
        {"gdn", "use_gate=false", "use_short_conv=false"},
        {"gdn", "heads=2", "num_v_heads=4", "allow_neg_eigval=true", "conv_bias=true"},
        {"deltanet", "qk_norm=sum", "qk_activation=relu"},
        {"deltanet", "qk_activation=elu", "use_gate=true", "use_beta=false"},
        {"kaczmarz", "b_proj_bias=false", "kaczmarz_eps=1e-3"},
        {"gla", "num_kv_heads=1", "heads=4"},
        {"gla", "use_short_conv=false", "feature_map=relu", "clamp_min=-0.05",
         "use_output_gate=false"},
        {"mamba2", "n_groups=2", "head_dim=16", "use_bias=true", "D_has_hdim=true"},
        {"softmax", "num_kv_heads=2", "qk_norm=true", "qkv_bias=true", "window_size=16"},
        {"parallax", "num_kv_heads=1", "qk_norm=true", "qkv_bias=true"},
        {"kalman", "use_conv=false", "use_gating=false", "qk_norm=false"},
        {"kata", "variant=sigma", "groups=2", "rope=true", "use_short_conv=true"},
        {"kata", "variant=delta"},
    };
    char *dir = test_tmpdir();
    for (size_t i = 0; i < sizeof VAR / sizeof VAR[0]; i++) {
        int n = 0;
        while (n < 5 && VAR[i][n + 1]) n++;
        const char *kv[8] = {"layers=1", "hidden=32", "vocab=64"};
        for (int j = 0; j < n; j++) kv[3 + j] = VAR[i][1 + j];
        model *m = random_model(VAR[i][0], kv, 3 + n), *b = NULL;
        int T = 66, V = m->c.vocab;
        int32_t *ids = some_tokens(T, V, 21 + i);
        float *ls = step_logits(m, ids, T, NULL), *lp = prefill_logits(m, ids, T);
        double d = rel_err(lp, ls, (size_t)T * V);
        char path[512];
        err e = {{0}};
        snprintf(path, sizeof path, "%s/v%zu", dir, i);
        if (model_save(m, path, &e) || model_load(&b, path, &e)) fail_msg("%s", e.msg);
        float *lb = step_logits(b, ids, T, NULL);
        print_message("  %-9s %-18s prefill vs step %.2e\n", VAR[i][0], VAR[i][1], d);
        assert_true(d < 1e-5);
        assert_memory_equal(ls, lb, (size_t)T * V * sizeof(float));
        free(ls), free(lp), free(lb), free(ids);
        model_free(m), model_free(b);
    }
    test_rmdir(dir);
}

/* ---- bad checkpoints ---- */

typedef struct edit {
    const char *drop;    /* leave this tensor out */
    const char *extra;   /* add a [2] tensor of this name */
    const char *reshape; /* store this tensor flattened to 1-d */
    const char *poison;  /* put NaN (or Inf) at element 1 */
    float poison_value;
    const char *int_dtype;         /* store this tensor as I32 */
    dtype all;                     /* store every float tensor in this dtype */
    const char *cfg_from, *cfg_to; /* replace text in config.json */
} edit;

/* Writes dir/config.json and dir/model.safetensors from the saved model in src with one edit. */
static void write_variant(const char *src, const char *dir, const edit *ed) {
    err e = {{0}};
    char p[600], *text;
    mkdir(dir, 0777);
    snprintf(p, sizeof p, "%s/config.json", src);
    assert_int_equal(file_read_all(p, 1 << 20, &text, NULL, &e), 0);
    if (ed->cfg_from) {
        char *at = strstr(text, ed->cfg_from);
        assert_non_null(at);
        size_t n = strlen(text) + strlen(ed->cfg_to) + 1;
        char *nt = malloc(n);
        snprintf(nt, n, "%.*s%s%s", (int)(at - text), text, ed->cfg_to, at + strlen(ed->cfg_from));
        free(text);
        text = nt;
    }
    snprintf(p, sizeof p, "%s/config.json", dir);
    assert_int_equal(file_write_atomic(p, text, strlen(text), &e), 0);
    free(text);
    st_file *f;
    snprintf(p, sizeof p, "%s/model.safetensors", src);
    assert_int_equal(st_open(&f, p, &e), 0);
    tensor *out[512];
    int n = 0;
    for (int i = 0; i < f->n; i++) {
        const tensor *t = &f->tensors[i];
        if (ed->drop && !strcmp(t->name, ed->drop)) continue;
        float *v = malloc((size_t)tensor_numel(t) * sizeof *v);
        tensor_read_f32(t, v);
        int64_t shape[8], flat = tensor_numel(t);
        memcpy(shape, t->shape, sizeof shape);
        int nd = t->ndim;
        if (ed->reshape && !strcmp(t->name, ed->reshape)) nd = 1, shape[0] = flat;
        if (ed->poison && !strcmp(t->name, ed->poison)) v[1] = ed->poison_value;
        dtype dt = ed->int_dtype && !strcmp(t->name, ed->int_dtype) ? DT_I32 : ed->all;
        out[n] = tensor_from_f32(t->name, dt, nd, shape, v, &e);
        assert_non_null(out[n++]);
        free(v);
    }
    if (ed->extra) {
        float v[2] = {1, 2};
        int64_t s[1] = {2};
        out[n++] = tensor_from_f32(ed->extra, DT_F32, 1, s, v, &e);
    }
    st_close(f);
    snprintf(p, sizeof p, "%s/model.safetensors", dir);
    assert_int_equal(st_write(p, (const tensor *const *)out, n, NULL, &e), 0);
    for (int i = 0; i < n; i++) tensor_free(out[i]);
}

/* Loads a variant: must fail with one line containing `want`. */
static void expect_refusal(const char *src, const char *dir, const edit *ed, const char *want) {
    write_variant(src, dir, ed);
    model *m = NULL;
    err e = {{0}};
    int rc = model_load(&m, dir, &e);
    if (rc == 0) {
        model_free(m);
        fail_msg("loaded although it should not (expected '%s')", want);
    }
    if (!has(e.msg, want)) fail_msg("error '%s' does not name '%s'", e.msg, want);
    assert_null(strchr(e.msg, '\n'));
    print_message("  refused: %s\n", e.msg);
}

static void test_bad_checkpoints(void **st) {
    (void)st;
    char *dir = test_tmpdir(), src[512], bad[512];
    err e = {{0}};
    model *m = random_model("gdn", NULL, 0);
    snprintf(src, sizeof src, "%s/ok", dir);
    assert_int_equal(model_save(m, src, &e), 0);
    model_free(m);
    snprintf(bad, sizeof bad, "%s/bad", dir);
    const char *q = "model.layers.1.attn.q_proj.weight";
    edit ed;
    memset(&ed, 0, sizeof ed), ed.drop = q;
    expect_refusal(src, bad, &ed, q);
    memset(&ed, 0, sizeof ed), ed.extra = "model.layers.0.attn.surprise";
    expect_refusal(src, bad, &ed, "model.layers.0.attn.surprise");
    memset(&ed, 0, sizeof ed), ed.reshape = "model.layers.0.attn.A_log";
    ed.reshape = "model.layers.0.attn.k_conv1d.weight";
    expect_refusal(src, bad, &ed, "model.layers.0.attn.k_conv1d.weight");
    memset(&ed, 0, sizeof ed), ed.poison = "model.layers.0.mlp.up_proj.weight";
    ed.poison_value = NAN;
    expect_refusal(src, bad, &ed, "model.layers.0.mlp.up_proj.weight");
    ed.poison = "model.norm.weight", ed.poison_value = INFINITY;
    expect_refusal(src, bad, &ed, "model.norm.weight");
    memset(&ed, 0, sizeof ed), ed.int_dtype = "model.embeddings.weight";
    expect_refusal(src, bad, &ed, "model.embeddings.weight");
    /* config.json against the weights, and the config itself */
    memset(&ed, 0, sizeof ed), ed.cfg_from = "\"num_heads\": 2", ed.cfg_to = "\"num_heads\": 4";
    expect_refusal(src, bad, &ed, "q_proj.weight");
    ed.cfg_from = "\"num_hidden_layers\": 2", ed.cfg_to = "\"num_hidden_layers\": 3";
    expect_refusal(src, bad, &ed, "model.layers.2.");
    ed.cfg_from = "\"num_hidden_layers\": 2", ed.cfg_to = "\"num_hidden_layers\": 1";
    expect_refusal(src, bad, &ed, "model.layers.1.");
    ed.cfg_from = "\"gated_deltanet\"", ed.cfg_to = "\"gated_deltanet_v9\"";
    expect_refusal(src, bad, &ed, "gated_deltanet_v9");
    ed.cfg_from = "\"hidden_size\": 64", ed.cfg_to = "\"hidden_size\": \"wide\"";
    expect_refusal(src, bad, &ed, "hidden_size");
    ed.cfg_from = "\"expand_v\": 2", ed.cfg_to = "\"expand_v\": 0.3";
    expect_refusal(src, bad, &ed, "expand_v");
    ed.cfg_from = "\"attn\": null", ed.cfg_to = "\"attn\": {\"layers\": [1]}";
    expect_refusal(src, bad, &ed, "'attn'");
    ed.cfg_from = "{", ed.cfg_to = "[";
    expect_refusal(src, bad, &ed, "config.json");
    /* tied head: a stored copy must equal the embedding */
    ed.cfg_from = "\"tie_word_embeddings\": false", ed.cfg_to = "\"tie_word_embeddings\": true";
    expect_refusal(src, bad, &ed, "lm_head.weight");
    /* BF16 and F16 weights are read (widened to float32) */
    memset(&ed, 0, sizeof ed), ed.all = DT_BF16;
    write_variant(src, bad, &ed);
    assert_int_equal(model_load(&m, bad, &e), 0);
    model_free(m);
    ed.all = DT_F16;
    write_variant(src, bad, &ed);
    assert_int_equal(model_load(&m, bad, &e), 0);
    model_free(m);
    /* not a checkpoint at all */
    assert_int_equal(model_load(&m, "/nonexistent/folder", &e), -1);
    assert_null(strchr(e.msg, '\n'));
    test_rmdir(dir);
}

/* a sharded checkpoint (index + two shards) and a bare .safetensors path load the same model */
static void test_sharded_and_file_paths(void **st) {
    (void)st;
    char *dir = test_tmpdir(), src[512], sh[512], p[700];
    err e = {{0}};
    model *m = random_model("mamba2", NULL, 0), *a = NULL, *b = NULL;
    snprintf(src, sizeof src, "%s/one", dir), snprintf(sh, sizeof sh, "%s/sharded", dir);
    assert_int_equal(model_save(m, src, &e), 0);
    mkdir(sh, 0777);
    st_file *f;
    snprintf(p, sizeof p, "%s/model.safetensors", src);
    assert_int_equal(st_open(&f, p, &e), 0);
    const tensor *part[2][256];
    int np[2] = {0, 0};
    char index[65536];
    size_t o = (size_t)snprintf(index, sizeof index, "{\"metadata\": {}, \"weight_map\": {");
    for (int i = 0; i < f->n; i++) {
        int k = i % 2;
        part[k][np[k]++] = &f->tensors[i];
        o += (size_t)snprintf(index + o, sizeof index - o,
                              "%s\"%s\": \"model-0000%d-of-00002.safetensors\"", i ? ", " : "",
                              f->tensors[i].name, k + 1);
    }
    snprintf(index + o, sizeof index - o, "}}");
    for (int k = 0; k < 2; k++) {
        snprintf(p, sizeof p, "%s/model-0000%d-of-00002.safetensors", sh, k + 1);
        assert_int_equal(st_write(p, part[k], np[k], NULL, &e), 0);
    }
    st_close(f);
    snprintf(p, sizeof p, "%s/model.safetensors.index.json", sh);
    assert_int_equal(file_write_atomic(p, index, strlen(index), &e), 0);
    snprintf(p, sizeof p, "%s/config.json", src);
    char *cfg;
    assert_int_equal(file_read_all(p, 1 << 20, &cfg, NULL, &e), 0);
    snprintf(p, sizeof p, "%s/config.json", sh);
    assert_int_equal(file_write_atomic(p, cfg, strlen(cfg), &e), 0);
    free(cfg);
    if (model_load(&a, sh, &e)) fail_msg("sharded: %s", e.msg);
    snprintf(p, sizeof p, "%s/model.safetensors.index.json", sh);
    char hex[65];
    assert_int_equal(sha256_file(p, hex, &e), 0);
    assert_string_equal(model_weights_sha256(a, &e), hex); /* the index is the weights file */
    snprintf(p, sizeof p, "%s/model.safetensors", src);
    if (model_load(&b, p, &e)) fail_msg("file path: %s", e.msg);
    assert_int_equal(sha256_file(p, hex, &e), 0);
    assert_string_equal(model_weights_sha256(b, &e), hex);
    for (int i = 0; i < m->nslots; i++) {
        size_t n = 1;
        for (int d = 0; d < m->slots[i].ndim; d++) n *= (size_t)m->slots[i].shape[d];
        assert_memory_equal(m->slots[i].data, model_find_slot(a, m->slots[i].name)->data, n * 4);
        assert_memory_equal(m->slots[i].data, model_find_slot(b, m->slots[i].name)->data, n * 4);
    }
    model_free(m), model_free(a), model_free(b);
    test_rmdir(dir);
}

/* ---- loading over all cores, and the weights' digest ---- */

/* dir/config.json and dir/model.safetensors from the saved model in src: every tensor in dtype
 * dt, with val[k] at element idx[k] of tensor `name` */
static void write_poisoned(const char *src, const char *dir, dtype dt, const char *name,
                           const int64_t *idx, const float *val, int n) {
    err e = {{0}};
    char p[600], *text;
    mkdir(dir, 0777);
    snprintf(p, sizeof p, "%s/config.json", src);
    assert_int_equal(file_read_all(p, 1 << 20, &text, NULL, &e), 0);
    snprintf(p, sizeof p, "%s/config.json", dir);
    assert_int_equal(file_write_atomic(p, text, strlen(text), &e), 0);
    free(text);
    st_file *f;
    snprintf(p, sizeof p, "%s/model.safetensors", src);
    assert_int_equal(st_open(&f, p, &e), 0);
    tensor **out = calloc((size_t)f->n, sizeof *out);
    for (int i = 0; i < f->n; i++) {
        const tensor *t = &f->tensors[i];
        float *v = malloc((size_t)tensor_numel(t) * sizeof *v);
        tensor_read_f32(t, v);
        for (int k = 0; name && k < n && !strcmp(t->name, name); k++) v[idx[k]] = val[k];
        out[i] = tensor_from_f32(t->name, dt, t->ndim, t->shape, v, &e);
        assert_non_null(out[i]);
        free(v);
    }
    snprintf(p, sizeof p, "%s/model.safetensors", dir);
    assert_int_equal(st_write(p, (const tensor *const *)out, f->n, NULL, &e), 0);
    for (int i = 0; i < f->n; i++) tensor_free(out[i]);
    free(out);
    st_close(f);
}

/* every float dtype over several chunks: the same floats with 1 and 3 threads, equal to the
 * sequential tensor_read_f32 of the file; the first non-finite element is the one named */
static void test_load_parallel(void **st) {
    (void)st;
    char *dir = test_tmpdir(), src[512], var[512], p[700];
    err e = {{0}};
    const char *kv[] = {"seed=2", "vocab=4099", "layers=1"};
    model *m = random_model("gdn", kv, 3);
    snprintf(src, sizeof src, "%s/ok", dir), snprintf(var, sizeof var, "%s/var", dir);
    assert_int_equal(model_save(m, src, &e), 0);
    model_free(m);
    const dtype DT[] = {DT_F32, DT_BF16, DT_F16, DT_F64};
    const char *emb = "model.embeddings.weight";
    for (int d = 0; d < 4; d++) {
        write_poisoned(src, var, DT[d], NULL, NULL, NULL, 0);
        model *x = NULL, *y = NULL;
        par_set_threads(1);
        if (model_load(&x, var, &e)) fail_msg("%s: %s", dtype_name(DT[d]), e.msg);
        par_set_threads(3);
        if (model_load(&y, var, &e)) fail_msg("%s: %s", dtype_name(DT[d]), e.msg);
        par_set_threads(0);
        expect_same_weights(x, y);
        st_file *f;
        snprintf(p, sizeof p, "%s/model.safetensors", var);
        assert_int_equal(st_open(&f, p, &e), 0);
        for (int i = 0; i < f->n; i++) {
            const tensor *t = &f->tensors[i];
            float *v = malloc((size_t)tensor_numel(t) * sizeof *v);
            tensor_read_f32(t, v);
            assert_memory_equal(v, model_find_slot(x, t->name)->data,
                                (size_t)tensor_numel(t) * sizeof *v);
            free(v);
        }
        st_close(f);
        model_free(x), model_free(y);
        /* NaN at 150003 and Inf at 200001 of the embedding (chunks 2 and 3), NaN in the head */
        int64_t idx[] = {200001, 150003};
        float val[] = {INFINITY, NAN};
        write_poisoned(src, var, DT[d], emb, idx, val, 2);
        for (int nt = 1; nt <= 3; nt += 2) {
            par_set_threads(nt);
            assert_int_equal(model_load(&x, var, &e), -1);
            par_set_threads(0);
            expect_has(e.msg, "tensor 'model.embeddings.weight': NaN at element 150003");
        }
        val[1] = -INFINITY;
        write_poisoned(src, var, DT[d], emb, idx, val, 2);
        assert_int_equal(model_load(&x, var, &e), -1);
        expect_has(e.msg, "tensor 'model.embeddings.weight': Inf at element 150003");
    }
    test_rmdir(dir);
}

/* model_weights_sha256: NULL for a random model; the digest of model.safetensors (or of the file
 * given) on the first call, the same pointer after; refused once the file has changed */
static void test_weights_sha256(void **st) {
    (void)st;
    char *dir = test_tmpdir(), src[512], w[700], hex[65];
    err e = {{0}};
    model *r = random_model("gla", NULL, 0), *a = NULL, *b = NULL;
    assert_null(model_weights_sha256(r, &e));
    assert_string_equal(e.msg, "");
    snprintf(src, sizeof src, "%s/m", dir);
    assert_int_equal(model_save(r, src, &e), 0);
    snprintf(w, sizeof w, "%s/model.safetensors", src);
    assert_int_equal(sha256_file(w, hex, &e), 0);
    assert_int_equal(model_load(&a, src, &e), 0);
    assert_int_equal(model_load(&b, w, &e), 0);
    assert_true(a->weights_path[0] == '/');
    assert_string_equal(a->sha256, ""); /* not computed by the load */
    const char *h = model_weights_sha256(a, &e);
    assert_non_null(h);
    assert_string_equal(h, hex);
    assert_ptr_equal(model_weights_sha256(a, &e), h);
    assert_string_equal(model_weights_sha256(b, &e), hex);
    model_free(a);
    /* a file that changed after the load has no digest of the loaded weights */
    assert_int_equal(model_load(&a, src, &e), 0);
    struct stat sb;
    assert_int_equal(stat(w, &sb), 0);
    struct timespec ts[2] = {sb.st_atim, sb.st_mtim};
    ts[1].tv_sec -= 10;
    assert_int_equal(utimensat(AT_FDCWD, w, ts, 0), 0);
    assert_null(model_weights_sha256(a, &e));
    expect_has(e.msg, "changed since the model was loaded");
    model_free(a), model_free(b), model_free(r);
    test_rmdir(dir);
}

/* BF16 weights load to exactly the values a float32 checkpoint of the same numbers gives */
static void test_bf16_exact(void **st) {
    (void)st;
    char *dir = test_tmpdir(), a[512], b[512];
    err e = {{0}};
    model *m = random_model("gla", NULL, 0);
    for (int i = 0; i < m->nslots; i++) {
        size_t n = 1;
        for (int d = 0; d < m->slots[i].ndim; d++) n *= (size_t)m->slots[i].shape[d];
        for (size_t j = 0; j < n; j++)
            m->slots[i].data[j] = bf16_to_f32(f32_to_bf16(m->slots[i].data[j]));
    }
    snprintf(a, sizeof a, "%s/f32", dir), snprintf(b, sizeof b, "%s/bf16", dir);
    assert_int_equal(model_save(m, a, &e), 0);
    edit ed = {0};
    ed.all = DT_BF16;
    write_variant(a, b, &ed);
    model *x, *y;
    assert_int_equal(model_load(&x, a, &e), 0);
    assert_int_equal(model_load(&y, b, &e), 0);
    for (int i = 0; i < x->nslots; i++) {
        size_t n = 1;
        for (int d = 0; d < x->slots[i].ndim; d++) n *= (size_t)x->slots[i].shape[d];
        assert_memory_equal(x->slots[i].data, model_find_slot(y, x->slots[i].name)->data,
                            n * sizeof(float));
    }
    model_free(m), model_free(x), model_free(y);
    test_rmdir(dir);
}

/* ---- swap, probes, heads, tokens ---- */

static const float *probe_at(const trace *tr, const char *name, int t, int layer, int head) {
    int s = trace_find(tr, name);
    if (s < 0) fail_msg("no probe '%s'", name);
    return trace_at_lh(tr, s, t, layer, head);
}

static void test_swap_kaczmarz_on_gdn(void **st) {
    (void)st;
    ref r;
    err e = {{0}};
    ref_open(&r, "gated_deltanet");
    int T = 20, H = r.m->layers[0].mc.H;
    trace tg, tk;
    trace_init(&tg), trace_init(&tk);
    assert_int_equal(model_register_probes(r.m, &tg, &e), 0);
    float *lg = step_logits(r.m, r.ids, T, &tg);
    /* a GLA core cannot run on GDN projections: refused, model untouched */
    assert_int_equal(model_swap(r.m, -1, "gla", NULL, &e), -1);
    assert_true(has(e.msg, "gla") && has(e.msg, "kaczmarz"));
    assert_int_equal(model_swap(r.m, -1, "kaczmarz", NULL, &e), 0);
    assert_string_equal(r.m->layers[1].mx->name, "kaczmarz");
    assert_int_equal(model_register_probes(r.m, &tk, &e), 0);
    float *lk = step_logits(r.m, r.ids, T, &tk);
    double d = rel_err(lk, lg, (size_t)T * r.V);
    print_message("  gdn vs kaczmarz on the same tokens: logits differ by %.3f\n", d);
    assert_true(d > 1e-3);
    for (int h = 0; h < H; h++) {
        /* layer 0, token 0 sees the same hidden state under both cores */
        float beta_g = *probe_at(&tg, "beta", 0, 0, h), eta = *probe_at(&tk, "eta", 0, 0, h);
        assert_true(fabsf(beta_g - eta) < 1e-6f); /* eta = sigmoid(b_proj x), GDN's beta */
        float kn = *probe_at(&tk, "k_norm", 0, 0, h), beta_k = *probe_at(&tk, "beta", 0, 0, h);
        assert_true(fabsf(beta_k - eta / (kn * kn + 1e-6f)) < 1e-4f * beta_k); /* §8.2 */
        for (int t = 0; t < T; t++) {
            /* GDN reads L2-normalised keys, Kaczmarz the raw ones */
            float kg = *probe_at(&tg, "k_norm", t, 1, h), kk = *probe_at(&tk, "k_norm", t, 1, h);
            assert_true(kg > 0.9f && kg <= 1.0f);
            assert_true(kk < 0.5f);
            /* the layer's own probe of the raw key is what the Kaczmarz core used */
            float raw = *probe_at(&tk, "k_raw_norm", t, 1, h);
            assert_true(fabsf(raw - kk) <= 1e-5f * kk);
            float rg = *probe_at(&tg, "k_raw_norm", t, 1, h);
            assert_true(fabsf(kg - rg / sqrtf(rg * rg + 1e-6f)) < 1e-5f);
            assert_true(isfinite(*probe_at(&tg, "o_rstd", t, 0, h)));
            assert_true(*probe_at(&tg, "gate_mean", t, 0, h) > -0.3f);
        }
        assert_true(isfinite(*probe_at(&tg, "mix_out_norm", 3, 1, 0)));
        assert_true(*probe_at(&tg, "resid_norm", 3, 1, 0) > 0);
    }
    /* back to gdn: the same logits as before, bit for bit */
    assert_int_equal(model_swap(r.m, -1, "gdn", NULL, &e), 0);
    float *lg2 = step_logits(r.m, r.ids, T, NULL);
    assert_memory_equal(lg, lg2, (size_t)T * r.V * sizeof(float));
    /* one layer only */
    assert_int_equal(model_swap(r.m, 1, "kaczmarz", NULL, &e), 0);
    assert_string_equal(r.m->layers[0].mx->name, "gdn");
    assert_string_equal(r.m->layers[1].mx->name, "kaczmarz");
    assert_int_equal(model_swap(r.m, 5, "kaczmarz", NULL, &e), -1);
    free(lg), free(lk), free(lg2);
    trace_free(&tg), trace_free(&tk);
    ref_close(&r);
}

static void test_probes_recorded(void **st) {
    (void)st;
    for (int i = 0; i < NMIXERS; i++) {
        model *m = random_model(MIXERS[i], NULL, 0);
        trace tr;
        err e = {{0}};
        trace_init(&tr);
        assert_int_equal(model_register_probes(m, &tr, &e), 0);
        int32_t *ids = some_tokens(6, m->c.vocab, 2);
        free(step_logits(m, ids, 6, &tr));
        assert_int_equal(tr.T, 6);
        const mixer_ops *mx = m->layers[0].mx;
        assert_true(mx->nprobes > 0);
        int s = trace_find(&tr, mx->probes[0].name);
        assert_true(s >= 0);
        assert_int_equal(tr.series[s].layers, m->c.layers);
        assert_int_equal(tr.series[s].heads, m->layers[0].mc.H);
        /* the first probe of every layer and head holds a number at every token */
        int finite = 0, all = 0;
        for (int t = 0; t < 6; t++)
            for (int l = 0; l < m->c.layers; l++)
                for (int h = 0; h < tr.series[s].heads; h++)
                    for (int w = 0; w < tr.series[s].width; w++, all++)
                        finite += isfinite(trace_at_lh(&tr, s, t, l, h)[w]) != 0;
        print_message("  %-9s probe '%s': %d of %d values finite\n", MIXERS[i], mx->probes[0].name,
                      finite, all);
        assert_true(finite == all);
        trace_free(&tr);
        free(ids);
        model_free(m);
    }
}

static void test_gva_and_kinds(void **st) {
    (void)st;
    const char *kv[] = {"heads=2", "num_v_heads=4", "expand_v=1"};
    model *m = random_model("gdn", kv, 3);
    assert_int_equal(m->layers[0].mc.H, 4);
    assert_int_equal(m->layers[0].mc.dv, 32);
    int32_t *ids = some_tokens(70, m->c.vocab, 4);
    float *a = step_logits(m, ids, 70, NULL), *b = prefill_logits(m, ids, 70);
    assert_true(rel_err(b, a, (size_t)70 * m->c.vocab) < 1e-5);
    free(a), free(b), free(ids);
    model_free(m);
    /* the Kaczmarz model type: eta with a bias; swappable to gdn */
    model *k = random_model("kaczmarz", NULL, 0);
    assert_non_null(model_find_slot(k, "model.layers.0.attn.b_proj.bias"));
    err e = {{0}};
    assert_int_equal(model_swap(k, -1, "gdn", NULL, &e), 0);
    assert_int_equal(model_swap(k, -1, "kaczmarz", (opts[]){{0}}, &e), 0);
    model_free(k);
    /* tied head: no lm_head tensor, the embedding serves */
    const char *tie[] = {"tie_word_embeddings=true"};
    model *t = random_model("softmax", tie, 1);
    assert_null(model_find_slot(t, "lm_head.weight"));
    assert_ptr_equal(t->lm_head, t->embed);
    model_free(t);
    /* bad options */
    opts o;
    const char *bad[] = {"heads=3"};
    opts_parse(&o, 1, (char *const *)bad, &e);
    model *x = NULL;
    assert_int_equal(model_random(&x, "softmax", &o, &e), -1);
    opts_free(&o);
    assert_int_equal(model_random(&x, "nosuchmixer", (opts[]){{0}}, &e), -1);
    assert_true(has(e.msg, "nosuchmixer"));
}

static void test_tokens(void **st) {
    (void)st;
    int32_t ids[8];
    err e = {{0}};
    assert_int_equal(tok_bytes_encode("hé", ids), 3); /* UTF-8 bytes */
    assert_int_equal(ids[0], 'h');
    assert_int_equal(ids[1], 0xc3);
    assert_int_equal(tok_bytes_servable(256, &e), 0);
    assert_int_equal(tok_bytes_servable(32000, &e), -1);
    assert_true(has(e.msg, "32000"));
    assert_int_equal(tok_check(ids, 3, 150, &e), -1);
    assert_true(has(e.msg, "195"));
    char buf[16];
    assert_string_equal(tok_show('a', buf, sizeof buf), "'a'");
    assert_string_equal(tok_show('\n', buf, sizeof buf), "'\\n'");
    /* token ids outside the vocabulary are refused by the model too */
    model *m = random_model("gla", NULL, 0);
    float l[256];
    assert_int_equal(model_step(m, 300, l, NULL, &e), -1);
    assert_true(has(e.msg, "300"));
    model_free(m);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_blocks_scalars),
        cmocka_unit_test(test_blocks_norms),
        cmocka_unit_test(test_blocks_conv_cache),
        cmocka_unit_test(test_blocks_rope),
        cmocka_unit_test(test_ref_transformer),
        cmocka_unit_test(test_ref_gla),
        cmocka_unit_test(test_ref_delta_net),
        cmocka_unit_test(test_ref_mamba2),
        cmocka_unit_test(test_ref_gated_deltanet),
        cmocka_unit_test(test_ref_parallax),
        cmocka_unit_test(test_ref_parallax_tf32),
        cmocka_unit_test(test_ref_gated_deltanet_tf32),
        cmocka_unit_test(test_random_deterministic),
        cmocka_unit_test(test_random_init_spec),
        cmocka_unit_test(test_random_normal_stats),
        cmocka_unit_test(test_random_threads),
        cmocka_unit_test(test_random_size_limit),
        cmocka_unit_test(test_random_step_prefill),
        cmocka_unit_test(test_random_long_stable),
        cmocka_unit_test(test_save_load_bitwise),
        cmocka_unit_test(test_config_variants),
        cmocka_unit_test(test_bad_checkpoints),
        cmocka_unit_test(test_bf16_exact),
        cmocka_unit_test(test_ref_parallax_exact),
        cmocka_unit_test(test_load_parallel),
        cmocka_unit_test(test_weights_sha256),
        cmocka_unit_test(test_sharded_and_file_paths),
        cmocka_unit_test(test_swap_kaczmarz_on_gdn),
        cmocka_unit_test(test_probes_recorded),
        cmocka_unit_test(test_gva_and_kinds),
        cmocka_unit_test(test_tokens),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
