/* layer_kata.c: the KATA layer (model type kata, defined here in fla's style from the authors'
 * kata/layer.py as the spec records it, kata-parallax.md A.2, A.4, A.9).
 *
 * Per token, from the normalised hidden x [C], H heads of width d (dv = d):
 *   q = W_q x, k = W_k x, v = W_v x            [H, d]  (bias-free)
 *   optional short convolution with SiLU on q, k, v (use_short_conv)
 *   qk_norm "l2": q, k <- x / sqrt(|x|^2 + 1e-6) per head (parameter free)
 *   optional RoPE, interleaved over the whole head (rope=true; pairs stay inside a group)
 *   DeltaKATA (variant "delta"): beta = sigmoid(W_b x) [H]
 * The core is kata with the configured feature map (variant=, groups=): the normalised readout
 * o = sum_s kappa(q, k_s) v_s / sum_s kappa(q, k_s), or the delta rule in feature space.
 * Output: W_o over the concatenated heads. */
#include <math.h>
#include <string.h>

#include "blocks.h"
#include "family.h"

static int parse(model_config *c, const config *cfg, err *e) {
    static const char *const NORM[] = {"l2", "none", NULL};
    int norm;
    double theta;
    if (cfg_int_in(cfg, "num_heads", 16, 1, 4096, &c->H, e)) return -1;
    if (c->hidden % c->H && !config_has(cfg, "head_dim"))
        return err_set(e, "%s: key 'num_heads' (%d) must divide hidden_size (%d)", cfg->path, c->H,
                       c->hidden);
    if (cfg_int_in(cfg, "head_dim", c->hidden / c->H, 1, 1 << 12, &c->dk, e) ||
        config_str(cfg, "variant", "m1", c->kata_variant, sizeof c->kata_variant, e) ||
        cfg_int_in(cfg, "groups", 0, 0, 64, &c->kata_groups, e) ||
        config_bool(cfg, "use_short_conv", 0, &c->use_conv, e) ||
        cfg_int_in(cfg, "conv_size", 4, 1, 64, &c->conv_size, e) ||
        cfg_choice(cfg, "qk_norm", "l2", NORM, &norm, e) ||
        config_bool(cfg, "rope", 0, &c->rope, e) ||
        config_float(cfg, "rope_theta", 10000.0, &theta, e))
        return -1;
    if (!(theta > 0)) return err_set(e, "%s: key 'rope_theta' must be positive", cfg->path);
    if (c->rope && c->dk % 2)
        return err_set(e, "%s: key 'rope': head_dim %d is odd", cfg->path, c->dk);
    c->qk_norm = norm == 0;
    c->rope = c->rope ? 2 : 0, c->rope_theta = (float)theta;
    c->dv = c->dk, c->Hv = c->Hkv = c->H;
    c->key_dim = c->value_dim = c->H * c->dk;
    c->kata_delta = strcmp(c->kata_variant, "delta") == 0;
    if (!c->use_conv) c->conv_size = 1;
    return 0;
}

static int declare(model *m, int li, const char *p, err *e) {
    const model_config *c = &m->c;
    layer *L = &m->layers[li];
    int C = c->hidden, D = c->key_dim, W = c->conv_size;
    if (slot2(m, &L->q_proj, INIT_NORMAL, 0.02f, D, C, e, p, "q_proj.weight") ||
        slot2(m, &L->k_proj, INIT_NORMAL, 0.02f, D, C, e, p, "k_proj.weight") ||
        slot2(m, &L->v_proj, INIT_NORMAL, 0.02f, D, C, e, p, "v_proj.weight"))
        return -1;
    if (c->use_conv &&
        (slot3(m, &L->q_conv, INIT_NORMAL, 0.02f, D, 1, W, e, p, "q_conv1d.weight") ||
         slot3(m, &L->k_conv, INIT_NORMAL, 0.02f, D, 1, W, e, p, "k_conv1d.weight") ||
         slot3(m, &L->v_conv, INIT_NORMAL, 0.02f, D, 1, W, e, p, "v_conv1d.weight")))
        return -1;
    if (c->kata_delta && slot2(m, &L->b_proj, INIT_NORMAL, 0.02f, c->H, C, e, p, "b_proj.weight"))
        return -1;
    return slot2(m, &L->o_proj, INIT_NORMAL, 0.02f, C, D, e, p, "o_proj.weight");
}

static int mixer_dims(const model_config *c, const char *mixer, int *H, int *dk, int *dv) {
    if (strcmp(mixer, "kata")) return 0;
    *H = c->H, *dk = c->dk, *dv = c->dv;
    return 1;
}

static int default_opts(const model_config *c, const char *mixer, char kv[4][64]) {
    if (strcmp(mixer, "kata")) return 0;
    int n = 0;
    snprintf(kv[n++], 64, "variant=%s", c->kata_variant);
    if (c->kata_groups) snprintf(kv[n++], 64, "groups=%d", c->kata_groups);
    return n;
}

static void tune(const model *m, layer *L, const opts *user) {
    (void)m, (void)L, (void)user;
}

static int conv_streams(const model_config *c, int *dims) {
    if (!c->use_conv) return 0;
    dims[0] = dims[1] = dims[2] = c->key_dim;
    return 3;
}

static size_t aux_floats(const model_config *c) {
    (void)c;
    return 0;
}

static size_t scratch_floats(const model_config *c) {
    return (size_t)c->key_dim + (size_t)c->H + 16;
}

static void prep(const model *m, layer *L, const float *x, int pos, float *const in[IN_COUNT],
                 float *aux, float *tmp) {
    (void)aux;
    const model_config *c = &m->c;
    int H = c->H, d = c->dk;
    family_stream(m, L, 0, x, L->q_proj, L->q_conv, NULL, c->key_dim, ACT_SILU, ACT_NONE, in[IN_Q],
                  tmp);
    family_stream(m, L, 1, x, L->k_proj, L->k_conv, NULL, c->key_dim, ACT_SILU, ACT_NONE, in[IN_K],
                  tmp);
    family_stream(m, L, 2, x, L->v_proj, L->v_conv, NULL, c->key_dim, ACT_SILU, ACT_NONE, in[IN_V],
                  tmp);
    if (c->qk_norm)
        for (int h = 0; h < H; h++) {
            blk_l2norm(in[IN_Q] + (size_t)h * d, d, 1e-6f);
            blk_l2norm(in[IN_K] + (size_t)h * d, d, 1e-6f);
        }
    if (c->rope) {
        blk_rope_interleaved(in[IN_Q], H, d, pos, c->rope_theta);
        blk_rope_interleaved(in[IN_K], H, d, pos, c->rope_theta);
    }
    if (mixer_reads(L->mx, IN_BETA)) {
        if (L->b_proj) {
            blk_linear(tmp, x, L->b_proj, NULL, H, c->hidden);
            for (int h = 0; h < H; h++) in[IN_BETA][h] = blk_sigmoid(tmp[h]);
        } else {
            for (int h = 0; h < H; h++) in[IN_BETA][h] = 1.0f;
        }
    }
}

static void post(const model *m, const layer *L, const float *o, const float *aux, float *y,
                 float *tmp) {
    (void)aux, (void)tmp;
    family_out_hook(m, L, (float *)o, m->c.key_dim); /* o is the model's m->o */
    blk_linear(y, o, L->o_proj, NULL, m->c.hidden, m->c.key_dim);
}

static int random_config(cJSON *cfg, model_kind k, int hidden, int heads, int head_dim, err *e) {
    (void)k;
    if (!heads) heads = 2;
    if (!head_dim) {
        if (hidden % heads) return err_set(e, "heads (%d) must divide hidden (%d)", heads, hidden);
        head_dim = hidden / heads;
    }
    rc_num(cfg, "num_heads", heads);
    rc_num(cfg, "head_dim", head_dim);
    rc_str(cfg, "variant", "m1");
    rc_bool(cfg, "use_short_conv", 0);
    rc_num(cfg, "conv_size", 4);
    rc_str(cfg, "qk_norm", "l2");
    rc_bool(cfg, "rope", 0);
    rc_num(cfg, "rope_theta", 10000.0);
    return 0;
}

const family_ops family_kata = {
    .fam = FAM_KATA,
    .parse = parse,
    .declare = declare,
    .mixer_dims = mixer_dims,
    .default_opts = default_opts,
    .tune = tune,
    .finish = NULL,
    .conv_streams = conv_streams,
    .aux_floats = aux_floats,
    .scratch_floats = scratch_floats,
    .prep = prep,
    .post = post,
    .random_config = random_config,
};
