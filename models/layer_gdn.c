/* layer_gdn.c: the delta-rule layers: fla's GatedDeltaNet (gated_deltanet) and DeltaNet
 * (delta_net), and the Kaczmarz layer (kaczmarz_deltanet, ours). Spec: delta-family.md §2.1-2.3,
 * §2.6, §3, §8.2.
 *
 * Per token, from the normalised hidden x [C]:
 *   q', k' = SiLU(conv(W_q x)), SiLU(conv(W_k x))   [H, dk]    (DeltaNet: or relu/elu+1/identity)
 *   v      = SiLU(conv(W_v x))                       [Hv, dv]
 *   g      = -exp(A_log) * softplus(W_a x + dt_bias) [Hv]       (gated_deltanet, kaczmarz_deltanet)
 *   s      = sigmoid(W_b x (+ b_b))                  [Hv]       (DeltaNet: 1 when use_beta=false)
 * and the core's inputs depend on which core runs the layer:
 *   gdn, deltanet: q = L2N(q'), k = L2N(k') (DeltaNet: or x/sum x), beta = s (x2 if
 * allow_neg_eigval) kaczmarz:      q = L2N(q'), k = k' raw, eta = s; the core forms beta =
 * eta/(|k|^2 + eps) (§8.2) so `swap all kaczmarz` on a GDN checkpoint is exactly the drop-in
 * comparison of the KLA paper. GVA: value head hv reads q/k head hv / (Hv/H). The core's heads are
 * the value heads. Output: per value head RMSNorm (FusedRMSNormGated with z = W_g x when use_gate),
 * then W_o. */
#include <math.h>
#include <string.h>

#include "blocks.h"
#include "family.h"

static const probe_def PROBES[] = {
    {"q_raw_norm", W_1, "|q'| of the query before its normalisation (spec §9: key/query norms)"},
    {"k_raw_norm", W_1,
     "|k'| of the key before L2N (Kaczmarz reads this key raw: |k| < 1e-2 hazard)"},
    {"o_rstd", W_1, "1/RMS of the core output in the output norm (large: |o| near the norm's eps)"},
    {"gate_mean", W_1, "mean over dv of the output gate z sigmoid(z) (NaN without use_gate)"},
};

static float vnorm(const float *x, int n) {
    double s = 0;
    for (int i = 0; i < n; i++) s += (double)x[i] * x[i];
    return (float)sqrt(s);
}

static int parse(model_config *c, const config *cfg, err *e) {
    int kacz = c->kind == MK_KACZMARZ_DELTANET, dn = c->kind == MK_DELTA_NET;
    if (dn) {
        double ek, ev;
        if (cfg_int_in(cfg, "num_heads", 16, 1, 4096, &c->H, e) ||
            config_float(cfg, "expand_k", 1.0, &ek, e) ||
            config_float(cfg, "expand_v", 1.0, &ev, e))
            return -1;
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
        c->Hv = c->H, c->key_dim = (int)kd, c->value_dim = (int)vd;
        c->dk = c->key_dim / c->H, c->dv = c->value_dim / c->H;
        static const char *const ACT[] = {"silu", "relu", "elu", "identity", NULL};
        static const char *const NORM[] = {"l2", "sum", NULL};
        int act;
        if (config_bool(cfg, "use_beta", 1, &c->use_beta, e) ||
            config_bool(cfg, "use_gate", 0, &c->use_gate, e) ||
            cfg_choice(cfg, "qk_activation", "silu", ACT, &act, e) ||
            cfg_choice(cfg, "qk_norm", "l2", NORM, &c->qk_sum_norm, e))
            return -1;
        static const int ACTS[] = {ACT_SILU, ACT_RELU, ACT_ELU_P1, ACT_NONE};
        c->qk_act = ACTS[act];
    } else {
        double ev;
        if (cfg_int_in(cfg, "num_heads", 6, 1, 4096, &c->H, e) ||
            cfg_int_in(cfg, "head_dim", 256, 1, 1 << 14, &c->dk, e) ||
            config_float(cfg, "expand_v", 2.0, &ev, e) ||
            cfg_int_in(cfg, "num_v_heads", c->H, 1, 4096, &c->Hv, e) ||
            config_bool(cfg, "use_gate", 1, &c->use_gate, e))
            return -1;
        long dv = py_int_mul(c->dk, ev);
        if (dv < 1 || dv > (1 << 14) || fabs((double)c->dk * ev - (double)dv) > 1e-5 * (double)dv)
            return err_set(e,
                           "%s: key 'expand_v': head_dim * expand_v = %g is not a positive "
                           "integer",
                           cfg->path, (double)c->dk * ev);
        if (c->Hv < c->H || c->Hv % c->H)
            return err_set(e, "%s: key 'num_v_heads' (%d) must be a multiple of num_heads (%d)",
                           cfg->path, c->Hv, c->H);
        c->dv = (int)dv, c->key_dim = c->H * c->dk, c->value_dim = c->Hv * c->dv;
        c->has_decay = 1, c->use_beta = 1, c->qk_act = ACT_SILU;
        /* ours, not fla's: the keys as Kaczmarz reads them (raw), with GDN's beta = sigmoid:
         * the comparison the Kaczmarz paper makes (rho = beta |k|^2 is then unbounded) */
        int l2k;
        if (config_bool(cfg, "l2norm_keys", 1, &l2k, e)) return -1;
        c->raw_keys = !l2k;
    }
    if (config_bool(cfg, "use_short_conv", 1, &c->use_conv, e) ||
        cfg_int_in(cfg, "conv_size", 4, 1, 64, &c->conv_size, e) ||
        config_bool(cfg, "conv_bias", 0, &c->conv_bias, e) ||
        config_bool(cfg, "allow_neg_eigval", 0, &c->allow_neg, e))
        return -1;
    if (!c->use_conv) c->conv_size = 1, c->conv_bias = 0;
    if (kacz) {
        double eps;
        if (config_float(cfg, "kaczmarz_eps", 1e-6, &eps, e) ||
            config_bool(cfg, "b_proj_bias", 1, &c->b_bias, e))
            return -1;
        if (!(eps > 0 && eps < 1))
            return err_set(e, "%s: key 'kaczmarz_eps' must lie in (0, 1)", cfg->path);
        c->kacz_eps = (float)eps;
    }
    return 0;
}

static int declare(model *m, int li, const char *p, err *e) {
    const model_config *c = &m->c;
    layer *L = &m->layers[li];
    int C = c->hidden, W = c->conv_size;
    if (slot2(m, &L->q_proj, INIT_NORMAL, 0.02f, c->key_dim, C, e, p, "q_proj.weight") ||
        slot2(m, &L->k_proj, INIT_NORMAL, 0.02f, c->key_dim, C, e, p, "k_proj.weight") ||
        slot2(m, &L->v_proj, INIT_NORMAL, 0.02f, c->value_dim, C, e, p, "v_proj.weight"))
        return -1;
    if (c->has_decay) {
        if (slot2(m, &L->a_proj, INIT_NORMAL, 0.02f, c->Hv, C, e, p, "a_proj.weight")) return -1;
    }
    if (c->use_beta) {
        if (slot2(m, &L->b_proj, INIT_NORMAL, 0.02f, c->Hv, C, e, p, "b_proj.weight")) return -1;
        if (c->b_bias && slot1(m, &L->b_bias, INIT_ZEROS, 0, c->Hv, e, p, "b_proj.bias")) return -1;
    }
    if (c->has_decay) {
        /* A ~ U(0, 16), A_log = log A; dt_bias = softplus^-1(dt), dt log-uniform in [1e-3, 0.1] */
        int64_t s[1] = {c->Hv};
        if (model_slot(m, &L->A_log, INIT_A_LOG, 0.0f, 16.0f, 1, s, e, "%sA_log", p) ||
            model_slot(m, &L->dt_bias, INIT_DT_BIAS, 1e-3f, 0.1f, 1, s, e, "%sdt_bias", p))
            return -1;
    }
    if (c->use_conv) {
        if (slot3(m, &L->q_conv, INIT_NORMAL, 0.02f, c->key_dim, 1, W, e, p, "q_conv1d.weight") ||
            slot3(m, &L->k_conv, INIT_NORMAL, 0.02f, c->key_dim, 1, W, e, p, "k_conv1d.weight") ||
            slot3(m, &L->v_conv, INIT_NORMAL, 0.02f, c->value_dim, 1, W, e, p, "v_conv1d.weight"))
            return -1;
        if (c->conv_bias &&
            (slot1(m, &L->q_conv_b, INIT_ZEROS, 0, c->key_dim, e, p, "q_conv1d.bias") ||
             slot1(m, &L->k_conv_b, INIT_ZEROS, 0, c->key_dim, e, p, "k_conv1d.bias") ||
             slot1(m, &L->v_conv_b, INIT_ZEROS, 0, c->value_dim, e, p, "v_conv1d.bias")))
            return -1;
    }
    if (c->use_gate &&
        slot2(m, &L->g_proj, INIT_NORMAL, 0.02f, c->value_dim, C, e, p, "g_proj.weight"))
        return -1;
    if (slot1(m, &L->o_norm, INIT_ONES, 0, c->dv, e, p, "o_norm.weight") ||
        slot2(m, &L->o_proj, INIT_NORMAL, 0.02f, C, c->value_dim, e, p, "o_proj.weight"))
        return -1;
    return 0;
}

static int mixer_dims(const model_config *c, const char *mixer, int *H, int *dk, int *dv) {
    if (strcmp(mixer, "gdn") && strcmp(mixer, "deltanet") && strcmp(mixer, "kaczmarz")) return 0;
    *H = c->Hv, *dk = c->dk, *dv = c->dv;
    return 1;
}

static void tune(const model *m, layer *L, const opts *user) {
    /* the Kaczmarz layer's epsilon lives in its config; a user's eps= wins */
    if (m->c.kind == MK_KACZMARZ_DELTANET && strcmp(L->mx->name, "kaczmarz") == 0 &&
        !opts_given(user, "eps"))
        L->mc.eps = m->c.kacz_eps;
}

static int conv_streams(const model_config *c, int *dims) {
    if (!c->use_conv) return 0;
    dims[0] = c->key_dim, dims[1] = c->key_dim, dims[2] = c->value_dim;
    return 3;
}

static size_t aux_floats(const model_config *c) {
    return c->use_gate ? (size_t)c->value_dim : 0;
}

static size_t scratch_floats(const model_config *c) {
    return 3 * (size_t)c->key_dim + 3 * (size_t)c->value_dim + 2 * (size_t)c->Hv + 16;
}

static void prep(const model *m, layer *L, const float *x, int pos, float *const in[IN_COUNT],
                 float *aux, float *tmp) {
    (void)pos;
    const model_config *c = &m->c;
    int kacz = strcmp(L->mx->name, "kaczmarz") == 0;
    int H = c->H, Hv = c->Hv, dk = c->dk, rep = c->Hv / c->H;
    float *q = tmp, *k = q + c->key_dim, *v = k + c->key_dim, *t2 = v + c->value_dim;
    float *ab = t2 + (c->key_dim > c->value_dim ? c->key_dim : c->value_dim);
    /* DeltaNet with a non-SiLU feature map: the convolution has no activation, the map follows */
    blk_act conv_act = c->qk_act == ACT_SILU ? ACT_SILU : ACT_NONE;
    family_stream(m, L, 0, x, L->q_proj, L->q_conv, L->q_conv_b, c->key_dim, conv_act, conv_act, q,
                  t2);
    family_stream(m, L, 1, x, L->k_proj, L->k_conv, L->k_conv_b, c->key_dim, conv_act, conv_act, k,
                  t2);
    family_stream(m, L, 2, x, L->v_proj, L->v_conv, L->v_conv_b, c->value_dim, ACT_SILU, ACT_SILU,
                  v, t2);
    if (c->qk_act != ACT_SILU) {
        blk_act_apply(q, c->key_dim, (blk_act)c->qk_act);
        blk_act_apply(k, c->key_dim, (blk_act)c->qk_act);
    }
    if (m->fprobe_on)
        for (int hv = 0; hv < Hv; hv++) {
            m->fprobe[hv] = vnorm(q + (size_t)(hv / rep) * dk, dk);
            m->fprobe[Hv + hv] = vnorm(k + (size_t)(hv / rep) * dk, dk);
        }
    for (int h = 0; h < H; h++) {
        float *qh = q + (size_t)h * dk, *kh = k + (size_t)h * dk;
        if (c->qk_sum_norm) {
            blk_sumnorm(qh, dk);
            if (!kacz) blk_sumnorm(kh, dk);
        } else {
            blk_l2norm(qh, dk, 1e-6f);
            /* Kaczmarz keeps the raw key (§8.2); so does l2norm_keys=false */
            if (!kacz && !c->raw_keys) blk_l2norm(kh, dk, 1e-6f);
        }
    }
    for (int hv = 0; hv < Hv; hv++) {
        memcpy(in[IN_Q] + (size_t)hv * dk, q + (size_t)(hv / rep) * dk, (size_t)dk * sizeof(float));
        memcpy(in[IN_K] + (size_t)hv * dk, k + (size_t)(hv / rep) * dk, (size_t)dk * sizeof(float));
    }
    memcpy(in[IN_V], v, (size_t)c->value_dim * sizeof(float));
    if (mixer_reads(L->mx, IN_G)) {
        if (c->has_decay) {
            blk_linear(ab, x, L->a_proj, NULL, Hv, c->hidden);
            for (int h = 0; h < Hv; h++)
                in[IN_G][h] = -expf(L->A_log[h]) * blk_softplus(ab[h] + L->dt_bias[h]);
        } else {
            for (int h = 0; h < Hv; h++) in[IN_G][h] = 0.0f; /* DeltaNet: no decay */
        }
    }
    if (mixer_reads(L->mx, IN_BETA)) {
        if (c->use_beta) {
            blk_linear(ab, x, L->b_proj, L->b_bias, Hv, c->hidden);
            float mul = !kacz && c->allow_neg ? 2.0f : 1.0f;
            for (int h = 0; h < Hv; h++) in[IN_BETA][h] = mul * blk_sigmoid(ab[h]);
        } else {
            for (int h = 0; h < Hv; h++) in[IN_BETA][h] = 1.0f;
        }
    }
    if (c->use_gate) blk_linear(aux, x, L->g_proj, NULL, c->value_dim, c->hidden);
}

static void post(const model *m, const layer *L, const float *o, const float *aux, float *y,
                 float *tmp) {
    const model_config *c = &m->c;
    int dv = c->dv;
    for (int h = 0; h < c->Hv; h++) {
        size_t off = (size_t)h * dv;
        if (m->fprobe_on) {
            float r = vnorm(o + off, dv) / sqrtf((float)dv);
            double g = 0;
            for (int i = 0; i < dv && c->use_gate; i++) g += blk_silu(aux[off + i]);
            m->fprobe[2 * c->Hv + h] = 1.0f / sqrtf(r * r + c->norm_eps);
            m->fprobe[3 * c->Hv + h] = c->use_gate ? (float)(g / dv) : NAN;
        }
        if (c->use_gate)
            blk_rmsnorm_gated(tmp + off, o + off, aux + off, L->o_norm, dv, c->norm_eps);
        else
            blk_rmsnorm(tmp + off, o + off, L->o_norm, dv, c->norm_eps);
    }
    family_out_hook(m, L, tmp, c->value_dim);
    blk_linear(y, tmp, L->o_proj, NULL, c->hidden, c->value_dim);
}

static int random_config(cJSON *cfg, model_kind k, int hidden, int heads, int head_dim, err *e) {
    if (!heads) heads = 2;
    if (!head_dim) head_dim = 32;
    rc_num(cfg, "num_heads", heads);
    rc_num(cfg, "conv_size", 4);
    rc_bool(cfg, "use_short_conv", 1);
    rc_bool(cfg, "allow_neg_eigval", 0);
    if (k == MK_DELTA_NET) {
        if (hidden <= 0) return err_set(e, "hidden must be positive");
        double r = rc_ratio((long)heads * head_dim, hidden);
        rc_num(cfg, "expand_k", r);
        rc_num(cfg, "expand_v", r);
        rc_bool(cfg, "use_beta", 1);
        rc_bool(cfg, "use_gate", 0);
        rc_str(cfg, "qk_activation", "silu");
        rc_str(cfg, "qk_norm", "l2");
        rc_str(cfg, "attn_mode", "fused_recurrent");
    } else {
        rc_num(cfg, "head_dim", head_dim);
        rc_num(cfg, "expand_v", 2.0);
        cJSON_AddNullToObject(cfg, "num_v_heads");
        rc_bool(cfg, "use_gate", 1);
        rc_str(cfg, "attn_mode", "chunk");
        if (k == MK_KACZMARZ_DELTANET) {
            rc_num(cfg, "kaczmarz_eps", 1e-6);
            rc_bool(cfg, "b_proj_bias", 1);
        }
    }
    cJSON_AddNullToObject(cfg, "attn");
    return 0;
}

const family_ops family_gdn = {
    .fam = FAM_GDN,
    .probes = PROBES,
    .nprobes = 4,
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
