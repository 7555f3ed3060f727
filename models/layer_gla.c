/* layer_gla.c: fla's GatedLinearAttention layer (model type gla). Spec: delta-family.md §4.
 *
 * Per token, from the normalised hidden x [C]:
 *   q = conv(W_q x) [H, dk], k = conv(W_k x), v = conv(W_v x) (SiLU convs when use_short_conv)
 *   gk = logsigmoid(W_2 (W_1 x) + b_2) / gate_logit_normalizer  [H, dk]  (clamped below by
 *        clamp_min when set): the per-key-channel log-decay
 *   q, k through feature_map when set
 * Key/value heads (num_kv_heads) are repeated to the H query heads: head h reads kv head
 * h / (H / Hkv). The core is gla: S = diag(exp(gk)) S + k v^T, o = S^T q / sqrt(dk).
 * Output: per head RMSNorm then swish gate with g = W_g x (FusedRMSNormGated), then W_o. */
#include <math.h>
#include <string.h>

#include "blocks.h"
#include "family.h"

static const probe_def PROBES[] = {
    {"o_rstd", W_1, "1/RMS of the core output in the output norm (large: |o| near the norm's eps)"},
    {"gate_mean", W_1, "mean over dv of the output gate g sigmoid(g) (NaN without it)"},
};

static int parse(model_config *c, const config *cfg, err *e) {
    double ek, ev, norm;
    if (cfg_int_in(cfg, "num_heads", 4, 1, 4096, &c->H, e) ||
        cfg_int_in(cfg, "num_kv_heads", c->H, 1, 4096, &c->Hkv, e) ||
        config_float(cfg, "expand_k", 0.5, &ek, e) || config_float(cfg, "expand_v", 1.0, &ev, e))
        return -1;
    if (c->H % c->Hkv)
        return err_set(e, "%s: key 'num_kv_heads' (%d) must divide num_heads (%d)", cfg->path,
                       c->Hkv, c->H);
    long kd = py_int_mul(c->hidden, ek), vd = py_int_mul(c->hidden, ev);
    if (kd < c->H || kd % c->H || kd > (1l << 20))
        return err_set(e,
                       "%s: key 'expand_k': key_dim %ld is not a positive multiple of "
                       "num_heads %d",
                       cfg->path, kd, c->H);
    if (vd < c->H || vd % c->H || vd > (1l << 20))
        return err_set(e,
                       "%s: key 'expand_v': value_dim %ld is not a positive multiple of "
                       "num_heads %d",
                       cfg->path, vd, c->H);
    c->key_dim = (int)kd, c->value_dim = (int)vd, c->Hv = c->H;
    c->dk = c->key_dim / c->H, c->dv = c->value_dim / c->H;
    int use_gk, use_gv, fuse_norm;
    static const char *const GATE[] = {"swish", "silu", NULL};
    static const char *const FMAP[] = {"none",    "relu",     "silu", "swish",
                                       "sigmoid", "identity", NULL};
    static const int FMAPS[] = {ACT_NONE, ACT_RELU, ACT_SILU, ACT_SILU, ACT_SIGMOID, ACT_NONE};
    int gate_fn, fmap = 0;
    if (config_bool(cfg, "use_short_conv", 0, &c->use_conv, e) ||
        cfg_int_in(cfg, "conv_size", 4, 1, 64, &c->conv_size, e) ||
        config_bool(cfg, "conv_bias", 0, &c->conv_bias, e) ||
        config_bool(cfg, "use_output_gate", 1, &c->use_output_gate, e) ||
        cfg_choice(cfg, "gate_fn", "swish", GATE, &gate_fn, e) ||
        cfg_int_in(cfg, "gate_low_rank_dim", 16, 1, 1 << 14, &c->gk_rank, e) ||
        config_float(cfg, "gate_logit_normalizer", 16, &norm, e) ||
        config_bool(cfg, "fuse_norm", 1, &fuse_norm, e) ||
        config_bool(cfg, "use_gk", 1, &use_gk, e) || config_bool(cfg, "use_gv", 0, &use_gv, e))
        return -1;
    if (config_has(cfg, "feature_map") && cfg_choice(cfg, "feature_map", "none", FMAP, &fmap, e))
        return -1;
    c->feature_map = FMAPS[fmap];
    if (!use_gk || use_gv)
        return err_set(e,
                       "%s: keys 'use_gk'/'use_gv': only use_gk=true, use_gv=false is "
                       "supported",
                       cfg->path);
    if (!(norm > 0))
        return err_set(e, "%s: key 'gate_logit_normalizer' must be positive", cfg->path);
    c->gate_norm = (float)norm;
    if (config_has(cfg, "clamp_min")) {
        double cm;
        if (config_float(cfg, "clamp_min", 0, &cm, e)) return -1;
        c->has_clamp = 1, c->clamp_min = (float)cm;
    }
    /* fla names the norm g_norm_swish_gate when it fuses norm and swish gate, g_norm otherwise */
    c->gate_named_fused = fuse_norm && c->use_output_gate;
    if (!c->use_conv) c->conv_size = 1, c->conv_bias = 0;
    return 0;
}

static int declare(model *m, int li, const char *p, err *e) {
    const model_config *c = &m->c;
    layer *L = &m->layers[li];
    int C = c->hidden, W = c->conv_size, g = c->H / c->Hkv;
    int kpg = c->key_dim / g, vpg = c->value_dim / g; /* per kv group */
    if (slot2(m, &L->q_proj, INIT_NORMAL, 0.02f, c->key_dim, C, e, p, "q_proj.weight") ||
        slot2(m, &L->k_proj, INIT_NORMAL, 0.02f, kpg, C, e, p, "k_proj.weight") ||
        slot2(m, &L->v_proj, INIT_NORMAL, 0.02f, vpg, C, e, p, "v_proj.weight"))
        return -1;
    if (c->use_output_gate &&
        slot2(m, &L->g_proj, INIT_NORMAL, 0.02f, c->value_dim, C, e, p, "g_proj.weight"))
        return -1;
    if (c->use_conv) {
        if (slot3(m, &L->q_conv, INIT_NORMAL, 0.02f, c->key_dim, 1, W, e, p, "q_conv1d.weight") ||
            slot3(m, &L->k_conv, INIT_NORMAL, 0.02f, kpg, 1, W, e, p, "k_conv1d.weight") ||
            slot3(m, &L->v_conv, INIT_NORMAL, 0.02f, vpg, 1, W, e, p, "v_conv1d.weight"))
            return -1;
        if (c->conv_bias &&
            (slot1(m, &L->q_conv_b, INIT_ZEROS, 0, c->key_dim, e, p, "q_conv1d.bias") ||
             slot1(m, &L->k_conv_b, INIT_ZEROS, 0, kpg, e, p, "k_conv1d.bias") ||
             slot1(m, &L->v_conv_b, INIT_ZEROS, 0, vpg, e, p, "v_conv1d.bias")))
            return -1;
    }
    if (slot2(m, &L->gk0, INIT_NORMAL, 0.02f, c->gk_rank, C, e, p, "gk_proj.0.weight") ||
        slot2(m, &L->gk1, INIT_NORMAL, 0.02f, kpg, c->gk_rank, e, p, "gk_proj.1.weight") ||
        slot1(m, &L->gk1_b, INIT_ZEROS, 0, kpg, e, p, "gk_proj.1.bias") ||
        slot1(m, &L->o_norm, INIT_ONES, 0, c->dv, e, p,
              c->gate_named_fused ? "g_norm_swish_gate.weight" : "g_norm.weight") ||
        slot2(m, &L->o_proj, INIT_NORMAL, 0.02f, C, c->value_dim, e, p, "o_proj.weight"))
        return -1;
    return 0;
}

static int mixer_dims(const model_config *c, const char *mixer, int *H, int *dk, int *dv) {
    if (strcmp(mixer, "gla")) return 0;
    *H = c->H, *dk = c->dk, *dv = c->dv;
    return 1;
}

static void tune(const model *m, layer *L, const opts *user) {
    (void)m, (void)L, (void)user;
}

static int conv_streams(const model_config *c, int *dims) {
    if (!c->use_conv) return 0;
    int g = c->H / c->Hkv;
    dims[0] = c->key_dim, dims[1] = c->key_dim / g, dims[2] = c->value_dim / g;
    return 3;
}

static size_t aux_floats(const model_config *c) {
    return c->use_output_gate ? (size_t)c->value_dim : 0;
}

static size_t scratch_floats(const model_config *c) {
    return 4 * (size_t)c->key_dim + 3 * (size_t)c->value_dim + (size_t)c->gk_rank + 16;
}

static void prep(const model *m, layer *L, const float *x, int pos, float *const in[IN_COUNT],
                 float *aux, float *tmp) {
    (void)pos;
    const model_config *c = &m->c;
    int g = c->H / c->Hkv, dk = c->dk, dv = c->dv;
    int kpg = c->key_dim / g, vpg = c->value_dim / g;
    float *k = tmp, *v = k + kpg, *gk = v + vpg, *lr = gk + kpg, *t2 = lr + c->gk_rank;
    family_stream(m, L, 0, x, L->q_proj, L->q_conv, L->q_conv_b, c->key_dim, ACT_SILU, ACT_NONE,
                  in[IN_Q], t2);
    family_stream(m, L, 1, x, L->k_proj, L->k_conv, L->k_conv_b, kpg, ACT_SILU, ACT_NONE, k, t2);
    family_stream(m, L, 2, x, L->v_proj, L->v_conv, L->v_conv_b, vpg, ACT_SILU, ACT_NONE, v, t2);
    blk_linear(lr, x, L->gk0, NULL, c->gk_rank, c->hidden);
    blk_linear(gk, lr, L->gk1, L->gk1_b, kpg, c->gk_rank);
    for (int i = 0; i < kpg; i++) {
        float l = blk_logsigmoid(gk[i]) / c->gate_norm;
        gk[i] = c->has_clamp && l < c->clamp_min ? c->clamp_min : l;
    }
    for (int h = 0; h < c->H; h++) {
        int j = h / g; /* kv head */
        memcpy(in[IN_K] + (size_t)h * dk, k + (size_t)j * dk, (size_t)dk * sizeof(float));
        memcpy(in[IN_GK] + (size_t)h * dk, gk + (size_t)j * dk, (size_t)dk * sizeof(float));
        memcpy(in[IN_V] + (size_t)h * dv, v + (size_t)j * dv, (size_t)dv * sizeof(float));
    }
    blk_act_apply(in[IN_Q], c->key_dim, (blk_act)c->feature_map);
    blk_act_apply(in[IN_K], c->key_dim, (blk_act)c->feature_map);
    if (c->use_output_gate) blk_linear(aux, x, L->g_proj, NULL, c->value_dim, c->hidden);
}

static void post(const model *m, const layer *L, const float *o, const float *aux, float *y,
                 float *tmp) {
    const model_config *c = &m->c;
    int dv = c->dv;
    for (int h = 0; h < c->H; h++) {
        size_t off = (size_t)h * dv;
        if (m->fprobe_on) {
            double ss = 0, g = 0;
            for (int i = 0; i < dv; i++) ss += (double)o[off + i] * o[off + i];
            for (int i = 0; i < dv && c->use_output_gate; i++) g += blk_silu(aux[off + i]);
            m->fprobe[h] = (float)(1.0 / sqrt(ss / dv + c->norm_eps));
            m->fprobe[c->H + h] = c->use_output_gate ? (float)(g / dv) : NAN;
        }
        if (c->use_output_gate)
            blk_rmsnorm_gated(tmp + off, o + off, aux + off, L->o_norm, dv, c->norm_eps);
        else
            blk_rmsnorm(tmp + off, o + off, L->o_norm, dv, c->norm_eps);
    }
    family_out_hook(m, L, tmp, c->value_dim);
    blk_linear(y, tmp, L->o_proj, NULL, c->hidden, c->value_dim);
}

static int random_config(cJSON *cfg, model_kind k, int hidden, int heads, int head_dim, err *e) {
    (void)k;
    if (hidden <= 0) return err_set(e, "hidden must be positive");
    if (!heads) heads = 2;
    rc_num(cfg, "num_heads", heads);
    cJSON_AddNullToObject(cfg, "num_kv_heads");
    rc_num(cfg, "expand_k", head_dim ? rc_ratio((long)heads * head_dim, hidden) : 0.5);
    rc_num(cfg, "expand_v", 1.0);
    rc_bool(cfg, "use_short_conv", 1);
    rc_num(cfg, "conv_size", 4);
    rc_bool(cfg, "use_output_gate", 1);
    rc_str(cfg, "gate_fn", "swish");
    rc_num(cfg, "gate_low_rank_dim", 16);
    rc_num(cfg, "gate_logit_normalizer", 16);
    cJSON_AddNullToObject(cfg, "clamp_min");
    cJSON_AddNullToObject(cfg, "feature_map");
    rc_bool(cfg, "fuse_norm", 1);
    rc_bool(cfg, "use_gk", 1);
    rc_bool(cfg, "use_gv", 0);
    cJSON_AddNullToObject(cfg, "attn");
    return 0;
}

const family_ops family_gla = {
    .fam = FAM_GLA,
    .probes = PROBES,
    .nprobes = 2,
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
