/* layer_attn.c: fla's softmax Attention (model type transformer) and Parallax (model type
 * parallax). Spec: delta-family.md §7, kata-parallax.md B.2.
 *
 * Per token, from the normalised hidden x [C], with d = C / H:
 *   q = W_q x (+b) [H, d]; k = W_k x, v = W_v x [Hkv, d]; Parallax also r = W_r x (+b) [H, d]
 *   qk_norm: per-head RMSNorm of q, k (and r: r_norm), fla's RMSNorm eps 1e-5
 *   RoPE (rotate-half, rope_theta) on q and k at the token's position, and on Parallax's r with
 *   the same rotation as q (spec B.2). fla's reference logits need it: without RoPE on q, k, r
 *   the parallax checkpoint is off by 7e-2, with it by 5e-4, the TF32 rounding of fla's
 *   naive_parallax einsums (tests/test_models.c proves that part). Some fla versions call the
 *   layer positionless; a config with "rope": false (our key) turns it off.
 *   GQA: query head h reads kv head h / (H / Hkv)
 * The core is softmax (o = softmax(q k^T / sqrt(d)) v, causal, optional window) or parallax
 * (o = E_p[v] - Cov_p(r.k, v)); a transformer layer swapped to parallax feeds r = 0, which is
 * exactly softmax attention (W_R = 0). The cores keep the KV cache (post-RoPE k and v).
 * Output: W_o over the concatenated heads. */
#include <math.h>
#include <string.h>

#include "blocks.h"
#include "family.h"

static int parse(model_config *c, const config *cfg, err *e) {
    double theta;
    long window;
    if (cfg_int_in(cfg, "num_heads", 32, 1, 4096, &c->H, e) ||
        cfg_int_in(cfg, "num_kv_heads", c->H, 1, 4096, &c->Hkv, e) ||
        config_bool(cfg, "qkv_bias", 0, &c->qkv_bias, e) ||
        config_bool(cfg, "qk_norm", 0, &c->qk_norm, e) ||
        config_float(cfg, "rope_theta", 10000.0, &theta, e) ||
        config_int(cfg, "window_size", 0, &window, e))
        return -1;
    if (c->hidden % c->H)
        return err_set(e, "%s: key 'num_heads' (%d) must divide hidden_size (%d)", cfg->path, c->H,
                       c->hidden);
    if (c->H % c->Hkv)
        return err_set(e, "%s: key 'num_kv_heads' (%d) must divide num_heads (%d)", cfg->path,
                       c->Hkv, c->H);
    if (window < 0 || window > (1l << 30))
        return err_set(e, "%s: key 'window_size' must be positive", cfg->path);
    if (!(theta > 0)) return err_set(e, "%s: key 'rope_theta' must be positive", cfg->path);
    c->dk = c->dv = c->hidden / c->H;
    c->Hv = c->H, c->key_dim = c->hidden, c->value_dim = c->Hkv * c->dv;
    c->window = (int)window;
    c->rope_theta = (float)theta;
    if (config_bool(cfg, "rope", 1, &c->rope, e)) return -1;
    return 0;
}

static int declare(model *m, int li, const char *p, err *e) {
    layer *L = &m->layers[li];
    const model_config *c = L->cfg; /* a hybrid model's attention layer: its own heads */
    int C = c->hidden, kv = c->Hkv * c->dk, plx = c->kind == MK_PARALLAX;
    if (slot2(m, &L->q_proj, INIT_NORMAL, 0.02f, C, C, e, p, "q_proj.weight") ||
        slot2(m, &L->k_proj, INIT_NORMAL, 0.02f, kv, C, e, p, "k_proj.weight") ||
        slot2(m, &L->v_proj, INIT_NORMAL, 0.02f, kv, C, e, p, "v_proj.weight") ||
        (plx && slot2(m, &L->r_proj, INIT_NORMAL, 0.02f, C, C, e, p, "r_proj.weight")) ||
        slot2(m, &L->o_proj, INIT_NORMAL, 0.02f, C, C, e, p, "o_proj.weight"))
        return -1;
    if (c->qkv_bias && (slot1(m, &L->q_bias, INIT_ZEROS, 0, C, e, p, "q_proj.bias") ||
                        slot1(m, &L->k_bias, INIT_ZEROS, 0, kv, e, p, "k_proj.bias") ||
                        slot1(m, &L->v_bias, INIT_ZEROS, 0, kv, e, p, "v_proj.bias") ||
                        (plx && slot1(m, &L->r_bias, INIT_ZEROS, 0, C, e, p, "r_proj.bias"))))
        return -1;
    if (c->qk_norm && (slot1(m, &L->q_norm, INIT_ONES, 0, c->dk, e, p, "q_norm.weight") ||
                       slot1(m, &L->k_norm, INIT_ONES, 0, c->dk, e, p, "k_norm.weight") ||
                       (plx && slot1(m, &L->r_norm, INIT_ONES, 0, c->dk, e, p, "r_norm.weight"))))
        return -1;
    return 0;
}

static int mixer_dims(const model_config *c, const char *mixer, int *H, int *dk, int *dv) {
    if (strcmp(mixer, "softmax") && strcmp(mixer, "parallax")) return 0;
    *H = c->H, *dk = c->dk, *dv = c->dv;
    return 1;
}

static void tune(const model *m, layer *L, const opts *user) {
    /* positions are applied here (fla's rotary on q, k); the core must not rotate again */
    if (!opts_given(user, "rope")) L->mc.rope = 0;
    (void)m;
    if (!opts_given(user, "window")) L->mc.window = L->cfg->window;
}

static int conv_streams(const model_config *c, int *dims) {
    (void)c, (void)dims;
    return 0;
}

static size_t aux_floats(const model_config *c) {
    (void)c;
    return 0;
}

static size_t scratch_floats(const model_config *c) {
    return 2 * (size_t)c->Hkv * c->dk + 16;
}

static void head_norm(float *x, const float *w, int H, int d) {
    for (int h = 0; h < H; h++) blk_rmsnorm(x + (size_t)h * d, x + (size_t)h * d, w, d, 1e-5f);
}

static void prep(const model *m, layer *L, const float *x, int pos, float *const in[IN_COUNT],
                 float *aux, float *tmp) {
    (void)aux, (void)m;
    const model_config *c = L->cfg;
    int H = c->H, d = c->dk, g = c->H / c->Hkv, kv = c->Hkv * d, C = c->hidden;
    float *k = tmp, *v = tmp + kv;
    blk_linear(in[IN_Q], x, L->q_proj, L->q_bias, C, C);
    blk_linear(k, x, L->k_proj, L->k_bias, kv, C);
    blk_linear(v, x, L->v_proj, L->v_bias, kv, C);
    if (c->qk_norm) head_norm(in[IN_Q], L->q_norm, H, d), head_norm(k, L->k_norm, c->Hkv, d);
    if (c->rope)
        blk_rope(in[IN_Q], H, d, pos, c->rope_theta), blk_rope(k, c->Hkv, d, pos, c->rope_theta);
    for (int h = 0; h < H; h++) {
        memcpy(in[IN_K] + (size_t)h * d, k + (size_t)(h / g) * d, (size_t)d * sizeof(float));
        memcpy(in[IN_V] + (size_t)h * d, v + (size_t)(h / g) * d, (size_t)d * sizeof(float));
    }
    if (mixer_reads(L->mx, IN_R)) {
        if (L->r_proj) {
            blk_linear(in[IN_R], x, L->r_proj, L->r_bias, C, C);
            if (c->qk_norm) head_norm(in[IN_R], L->r_norm, H, d);
            if (c->rope) blk_rope(in[IN_R], H, d, pos, c->rope_theta);
        } else {
            memset(in[IN_R], 0, (size_t)C * sizeof(float)); /* W_R = 0: softmax attention */
        }
    }
}

static void post(const model *m, const layer *L, const float *o, const float *aux, float *y,
                 float *tmp) {
    (void)aux, (void)tmp;
    family_out_hook(m, L, (float *)o, m->c.hidden); /* o is the model's m->o */
    blk_linear(y, o, L->o_proj, NULL, m->c.hidden, m->c.hidden);
}

static int random_config(cJSON *cfg, model_kind k, int hidden, int heads, int head_dim, err *e) {
    (void)k, (void)head_dim;
    if (!heads) heads = 4;
    if (hidden % heads)
        return err_set(e,
                       "heads (%d) must divide hidden (%d): attention heads are hidden / heads "
                       "wide",
                       heads, hidden);
    rc_num(cfg, "num_heads", heads);
    cJSON_AddNullToObject(cfg, "num_kv_heads");
    rc_bool(cfg, "qkv_bias", 0);
    rc_bool(cfg, "qk_norm", 0);
    cJSON_AddNullToObject(cfg, "window_size");
    rc_num(cfg, "rope_theta", 10000.0);
    rc_num(cfg, "max_position_embeddings", 2048);
    return 0;
}

const family_ops family_attn = {
    .fam = FAM_ATTN,
    .parse = parse,
    .declare = declare,
    .mixer_dims = mixer_dims,
    .tune = tune,
    .finish = NULL,
    .conv_streams = conv_streams,
    .aux_floats = aux_floats,
    .scratch_floats = scratch_floats,
    .prep = prep,
    .post = post,
    .random_config = random_config,
};
