/* model_gpu.c: the host side of the GPU-resident stepper (model_gpu.h): which models it takes, and
 * the model described to kernels/gpu_model.cu as plain dimensions and host weight pointers. The
 * probe layout is the CPU's: each core probe is matched by name to the GPU's delta-family probes
 * (kernels/gpu.h's GDP_*, the definitions of mixers/delta_rule.h) or decayed linear-attention
 * probes (kernels/gpu_model.h's LDP_*, mixers/gla.c, mamba2.c, linear_decay.h) and placed at
 * mixer_probe_offset. */
#include "model_gpu.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../kernels/gpu.h"
#include "../kernels/gpu_model.h"
#include "blocks.h"
#include "family.h"
#include "model.h"

/* the kernels read the configs' activations (qk_activation, feature_map) by number */
_Static_assert((int)GM_ACT_NONE == (int)ACT_NONE && (int)GM_ACT_SILU == (int)ACT_SILU &&
                   (int)GM_ACT_RELU == (int)ACT_RELU && (int)GM_ACT_ELU_P1 == (int)ACT_ELU_P1 &&
                   (int)GM_ACT_SIGMOID == (int)ACT_SIGMOID,
               "kernels/gpu_model.h numbers the activations as models/blocks.h");

struct model_gpu {
    gm_model *k;
    int layers, max_batch, pos, vocab, readback, snapshot;
    size_t *sfl; /* [layers] each layer's state floats when made */
    size_t pfloats, fpfloats;
    const float **sup; /* [layers] scratch pointer lists for upload / download */
    float **sdown;
    const float **cup; /* [3 layers] */
    float **cdown;
};

/* The GPU's probe values in GDP_* order (kernels/gpu.h), by the names of mixers/delta_rule.h. */
static const char *const GDP_NAMES[GDP_COUNT] = {
    "beta",        "eta",        "rho",        "k_norm",     "q_norm",         "g",
    "alpha",       "half_life",  "e_norm",     "e_rel",      "r_norm",         "r_check",
    "loss_before", "loss_after", "write_norm", "state_norm", "forget_removed", "erase_removed",
    "o_norm"};

/* The same for gla and mamba2, in LDP_* order. */
static const char *const LDP_NAMES[LDP_COUNT] = {
    "g_min",          "g_mean",         "g_max",         "alpha_min",  "alpha_mean", "alpha_max",
    "half_life_min",  "half_life_mean", "half_life_max", "g",          "alpha",      "half_life",
    "q_norm",         "k_norm",         "v_norm",        "write_norm", "e_norm",     "e_rel",
    "forget_removed", "state_norm",     "o_norm"};

/* GM_CORE_* of a registered core the stepper runs, or -1. */
static int core_of(const mixer_ops *mx) {
    static const char *const names[9] = {"gdn",     "deltanet", "kaczmarz", "gla",   "mamba2",
                                         "softmax", "parallax", "kata",     "kalman"};
    static const int cores[9] = {GM_CORE_GDN,      GM_CORE_DELTANET, GM_CORE_KACZMARZ,
                                 GM_CORE_GLA,      GM_CORE_MAMBA2,   GM_CORE_SOFTMAX,
                                 GM_CORE_PARALLAX, GM_CORE_KATA,     GM_CORE_KALMAN};
    for (int i = 0; i < 9; i++)
        if (mx && !strcmp(mx->name, names[i]) && mixer_find(names[i]) == mx) return cores[i];
    return -1;
}

/* GM_FAM_* of a model kind the stepper runs, or -1; its layers' cores in *core_lo..core_hi. */
static int family_gm(const model_config *c, int *core_lo, int *core_hi) {
    if (c->family == FAM_GDN && (c->kind == MK_GATED_DELTANET || c->kind == MK_DELTA_NET ||
                                 c->kind == MK_KACZMARZ_DELTANET)) {
        *core_lo = GM_CORE_GDN, *core_hi = GM_CORE_KACZMARZ;
        return GM_FAM_DELTA;
    }
    if (c->family == FAM_GLA) return *core_lo = *core_hi = GM_CORE_GLA, GM_FAM_GLA;
    if (c->family == FAM_MAMBA2) return *core_lo = *core_hi = GM_CORE_MAMBA2, GM_FAM_MAMBA2;
    if (c->family == FAM_KATA) return *core_lo = *core_hi = GM_CORE_KATA, GM_FAM_KATA;
    if (c->family == FAM_KALMAN) return *core_lo = *core_hi = GM_CORE_KALMAN, GM_FAM_KALMAN;
    if (c->family == FAM_ATTN && (c->kind == MK_TRANSFORMER || c->kind == MK_PARALLAX)) {
        *core_lo = GM_CORE_SOFTMAX, *core_hi = GM_CORE_PARALLAX;
        return GM_FAM_ATTN;
    }
    return -1;
}

/* The probes the family's kernels compute: GDP_* for the delta family, LDP_* otherwise. */
static int gm_family_probes(int fam) {
    return fam == GM_FAM_DELTA ? 4 : fam == GM_FAM_GLA ? 2 : fam == GM_FAM_MAMBA2 ? 1 : 0;
}

static int say(char *why, size_t n, const char *fmt, ...) __attribute__((format(printf, 3, 4)));

static int say(char *why, size_t n, const char *fmt, ...) {
    if (why && n) {
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(why, n, fmt, ap);
        va_end(ap);
    }
    return 0;
}

/* Whether a hybrid's attention layer steps on the GPU: 1, or 0 and why. */
static int attn_layer_supported(const model *m, int li, char *why, size_t n) {
    const layer *L = &m->layers[li];
    const model_config *ac = L->cfg;
    int k = (int)(ac - m->attn_cfg), core = core_of(L->mx);
    if (k < 0 || k >= m->nattn || ac->family != FAM_ATTN)
        return say(why, n, "layer %d: a layer of another family", li);
    if (core != GM_CORE_SOFTMAX && core != GM_CORE_PARALLAX)
        return say(why, n, "layer %d: an attention layer with the %s core does not step on the GPU",
                   li, L->mx ? L->mx->name : "(none)");
    if (L->mc.H != ac->H || L->mc.dk != ac->dk || L->mc.dv != ac->dk)
        return say(why, n, "layer %d: the core's heads are not the layer's", li);
    if (ac->dk < 1 || ac->dk > GM_MAX_DK || (ac->rope && ac->dk % 2) || ac->rope > 1)
        return say(why, n,
                   "layer %d: attention heads of width %d (the GPU stepper holds even "
                   "widths up to %d, RoPE rotating halves)",
                   li, ac->dk, GM_MAX_DK);
    for (int lj = 0; lj < li; lj++) { /* the layers of one specification: r_proj in all or none */
        const layer *P = &m->layers[lj];
        if (P->cfg == ac && (P->r_proj != NULL) != (L->r_proj != NULL))
            return say(why, n, "layer %d: r_proj in some layers of its specification only", li);
    }
    return 1;
}

int model_gpu_supported(const model *m, char *why, size_t n) {
    if (!gm_compiled()) return say(why, n, "no GPU in this build (built with CUDA=0)");
    if (!m) return say(why, n, "no model");
    const model_config *c = &m->c;
    const int l0 = model_first_own_layer(m);
    if (l0 < 0) return say(why, n, "every layer is a hybrid attention layer");
    if (m->nattn > GM_MAX_DESCS - 1)
        return say(why, n, "%d attention specifications (the GPU stepper holds %d)", m->nattn,
                   GM_MAX_DESCS - 1);
    int lo = 0, hi = 0, fam = family_gm(c, &lo, &hi);
    if (fam < 0)
        return say(why, n, "%s models do not step resident on the GPU", model_kind_name(c->kind));
    if (family_of(c->family)->nprobes != gm_family_probes(fam))
        return say(why, n, "the %s layers' probes are not the GPU stepper's",
                   model_kind_name(c->kind));
    int kw = fam == GM_FAM_MAMBA2 ? c->d_state : c->dk;
    if (kw < 1 || kw > GM_MAX_DK)
        return say(why, n, "key heads of width %d (the GPU stepper holds up to %d)", kw, GM_MAX_DK);
    for (int li = 0; li < c->layers; li++) {
        const layer *L = &m->layers[li];
        int core = core_of(L->mx);
        if (L->mc.arith)
            return say(why, n,
                       "layer %d: the core rounds its products through TF32 (the GPU stepper "
                       "is exact fp32)",
                       li);
        if (L->mx->nprobes > GM_MAX_PROBES)
            return say(why, n, "layer %d: more than %d probes", li, GM_MAX_PROBES);
        if ((core == GM_CORE_SOFTMAX || core == GM_CORE_PARALLAX) && L->mc.rope && L->mc.dk % 2)
            return say(why, n, "layer %d: the core's RoPE on an odd head width", li);
        if (model_layer_hybrid_attn(m, L)) {
            if (!attn_layer_supported(m, li, why, n)) return 0;
            continue;
        }
        if (core < lo || core > hi)
            return say(why, n, "layer %d: a %s layer with the %s core does not step on the GPU", li,
                       model_kind_name(c->kind), L->mx ? L->mx->name : "(none)");
        if (L->mc.H != c->Hv || L->mc.dk != kw || L->mc.dv != c->dv)
            return say(why, n, "layer %d: the core's heads are not the layer's", li);
        const layer *F = &m->layers[l0];
        if (fam == GM_FAM_KATA && (L->mc.variant != F->mc.variant || L->mc.groups != F->mc.groups))
            return say(why, n, "layer %d: a KATA variant or groups unlike layer %d's", li, l0);
        if (fam == GM_FAM_ATTN) {
            if (L->mc.max_t != F->mc.max_t || L->mc.dk != L->mc.dv)
                return say(why, n, "layer %d: its KV cache is not the other layers'", li);
            if ((L->r_proj != NULL) != (F->r_proj != NULL))
                return say(why, n, "layer %d: r_proj in some layers only", li);
        }
    }
    char dev[256];
    if (fam == GM_FAM_DELTA && c->raw_keys)
        return say(why, n, "l2norm_keys=false (the GPU stepper normalises keys)");
    if (fam == GM_FAM_ATTN && c->rope != 0 && c->rope != 1)
        return say(why, n, "interleaved RoPE (the GPU stepper rotates halves)");
    if (!gpu_available(dev, sizeof dev)) return say(why, n, "%s", dev);
    say(why, n, "%s", dev);
    return 1;
}

static void describe_layer(const model *m, const layer *L, gm_layer_desc *x) {
    memset(x, 0, sizeof *x);
    x->attn_norm = L->attn_norm;
    x->q_proj = L->q_proj, x->k_proj = L->k_proj, x->v_proj = L->v_proj;
    x->a_proj = L->a_proj, x->b_proj = L->b_proj, x->g_proj = L->g_proj;
    x->b_bias = L->b_bias, x->A_log = L->A_log, x->dt_bias = L->dt_bias;
    if (m->c.use_conv) {
        x->q_conv = L->q_conv, x->k_conv = L->k_conv, x->v_conv = L->v_conv;
        x->q_conv_b = L->q_conv_b, x->k_conv_b = L->k_conv_b, x->v_conv_b = L->v_conv_b;
    }
    x->o_norm = L->o_norm, x->o_proj = L->o_proj;
    x->mlp_norm = L->mlp_norm, x->gate_proj = L->gate_proj, x->up_proj = L->up_proj;
    x->down_proj = L->down_proj;
    x->gk0 = L->gk0, x->gk1 = L->gk1, x->gk1_b = L->gk1_b;
    x->in_proj = L->in_proj, x->in_proj_b = L->in_proj_b;
    x->conv_w = L->conv_w, x->conv_b = L->conv_b;
    x->D = L->D, x->norm_w = L->norm_w, x->out_proj = L->out_proj, x->out_proj_b = L->out_proj_b;
    x->r_proj = L->r_proj, x->q_bias = L->q_bias, x->k_bias = L->k_bias, x->v_bias = L->v_bias;
    x->r_bias = L->r_bias, x->q_norm = L->q_norm, x->k_norm = L->k_norm, x->r_norm = L->r_norm;
    x->window = L->mc.window, x->core_rope = L->mc.rope, x->core_theta = L->mc.rope_theta;
    x->sensor_proj = L->sensor_proj, x->kal_a = L->kal_a, x->kal_p = L->kal_p, x->skip = L->skip;
    x->prior = (L->mc.variant & 2) != 0; /* kalman's prior variants (gpu_lanes.cu's test) */
    x->core = core_of(L->mx);
    x->desc = model_layer_hybrid_attn(m, L) ? (int)(L->cfg - m->attn_cfg) + 1 : 0;
    x->scale = L->mc.scale, x->eps = L->mc.eps;
    x->nprobes = L->mx->nprobes;
    x->probe_floats = (int)mixer_probe_floats(L->mx, &L->mc);
    /* the lane-wide probes (Kalman's) in one run at the head of the block: the rest may come back
     * alone (model_gpu_out.probes_tail) */
    int tail = 0, head_ok = 1;
    for (int p = 0; p < L->mx->nprobes; p++) {
        size_t end = mixer_probe_offset(L->mx, &L->mc, p) +
                     (size_t)L->mc.H * mixer_width_floats(&L->mc, L->mx->probes[p].width);
        if (L->mx->probes[p].width == W_LANES && (int)end > tail) tail = (int)end;
    }
    for (int p = 0; p < L->mx->nprobes && head_ok; p++)
        if (L->mx->probes[p].width != W_LANES && (int)mixer_probe_offset(L->mx, &L->mc, p) < tail)
            head_ok = 0;
    x->probe_tail = head_ok ? tail : 0;
    for (int p = 0; p < L->mx->nprobes && p < GM_MAX_PROBES; p++) {
        x->probe_map[p] = -1;
        x->probe_off[p] = (int)mixer_probe_offset(L->mx, &L->mc, p);
        if (L->mx->probes[p].width != W_1) continue;
        if (x->core >= GM_CORE_SOFTMAX) {
            continue; /* attention's decode writes its probes itself, in the CPU layout */
        } else if (x->core <= GM_CORE_KACZMARZ) {
            for (int k = 0; k < GDP_COUNT; k++)
                if (!strcmp(L->mx->probes[p].name, GDP_NAMES[k])) x->probe_map[p] = k;
        } else {
            for (int k = 0; k < LDP_COUNT; k++)
                if (!strcmp(L->mx->probes[p].name, LDP_NAMES[k])) x->probe_map[p] = k;
        }
    }
}

/* An attention layer's description (transformer and parallax models, a hybrid's attention
 * specifications): H query heads over Hkv kv heads of head_dim d, a KV cache of max_t slots. */
static void describe_attn(const model_config *c, int max_t, gm_model_desc *d) {
    d->family = GM_FAM_ATTN;
    d->H = d->Hv = c->H, d->dk = d->dv = c->dk, d->Hkv = c->Hkv;
    d->key_dim = d->value_dim = c->H * c->dk;
    d->use_conv = 0, d->conv_size = 1, d->use_gate = 0, d->has_decay = 0, d->use_beta = 0;
    d->qkv_bias = c->qkv_bias, d->qk_norm = c->qk_norm, d->rope = c->rope;
    d->rope_theta = c->rope_theta, d->max_t = max_t;
    d->state_floats = (size_t)max_t * d->Hv * (d->dk + d->dv); /* mixers/attention.h */
}

int model_gpu_init(model_gpu **out, const model *m, int max_batch, err *e) {
    *out = NULL;
    char why[300];
    if (!model_gpu_supported(m, why, sizeof why)) return err_set(e, "%s", why);
    if (max_batch < 1 || max_batch > (1 << 16))
        return err_set(e, "max_batch=%d: must lie in 1..%d", max_batch, 1 << 16);
    const model_config *c = &m->c;
    int nl = c->layers;
    model_gpu *g = calloc(1, sizeof *g);
    gm_layer_desc *ld = calloc((size_t)(nl ? nl : 1), sizeof *ld);
    if (g) {
        g->sup = calloc((size_t)nl + 1, sizeof *g->sup);
        g->sdown = calloc((size_t)nl + 1, sizeof *g->sdown);
        g->cup = calloc(3 * (size_t)nl + 1, sizeof *g->cup);
        g->cdown = calloc(3 * (size_t)nl + 1, sizeof *g->cdown);
        g->sfl = calloc((size_t)nl + 1, sizeof *g->sfl);
    }
    if (!g || !ld || !g->sup || !g->sdown || !g->cup || !g->cdown || !g->sfl) {
        free(ld);
        model_gpu_free(g);
        return err_set(e, "out of memory");
    }
    g->vocab = c->vocab, g->layers = nl;
    for (int li = 0; li < nl; li++) {
        const layer *L = &m->layers[li];
        describe_layer(m, L, &ld[li]);
        g->pfloats += (size_t)ld[li].probe_floats;
        g->sfl[li] = L->mx->state_floats(&L->mc);
    }
    /* a token's probes are kept for the whole batch on the device and pinned on the host: Kalman's
     * lane probes (14 [M, S] arrays a layer) are megabytes a token, so its batches are shorter */
    while (max_batch > 1 && (size_t)max_batch * g->pfloats * sizeof(float) > MODEL_GPU_PROBE_BYTES)
        max_batch--;
    g->max_batch = max_batch;
    int lo, hi, fam = family_gm(c, &lo, &hi), nfam = gm_family_probes(fam);
    const int l0 = model_first_own_layer(m); /* model_gpu_supported: there is one */
    g->readback = fam != GM_FAM_ATTN && fam != GM_FAM_KATA && fam != GM_FAM_KALMAN;
    g->snapshot = fam != GM_FAM_ATTN;
    g->fpfloats = (size_t)nl * (size_t)nfam * (size_t)c->Hv;
    gm_model_desc d = {
        .family = fam,
        .family_probes = nfam,
        .layers = nl,
        .hidden = c->hidden,
        .vocab = c->vocab,
        .inter = c->inter > 0 ? c->inter : 0,
        .H = c->H,
        .Hv = c->Hv,
        .dk = c->dk,
        .dv = c->dv,
        .key_dim = c->key_dim,
        .value_dim = c->value_dim,
        .use_conv = c->use_conv,
        .conv_size = c->use_conv ? c->conv_size : 1,
        .use_gate = c->use_gate,
        .has_decay = c->has_decay,
        .use_beta = c->use_beta,
        .allow_neg = c->allow_neg,
        .qk_act = c->qk_act,
        .qk_sum_norm = c->qk_sum_norm,
        .norm_eps = c->norm_eps,
        .embed = m->embed,
        .norm_f = m->norm_f,
        .lm_head = m->lm_head,
        .layer = ld,
    };
    if (fam == GM_FAM_DELTA) {
        d.conv_dims[0] = d.conv_dims[1] = c->key_dim, d.conv_dims[2] = c->value_dim;
    } else if (fam == GM_FAM_GLA) {
        int grp = c->H / c->Hkv;
        d.use_gate = c->use_output_gate, d.has_decay = 1, d.use_beta = 0;
        d.Hkv = c->Hkv, d.gk_rank = c->gk_rank, d.feature_map = c->feature_map;
        d.has_clamp = c->has_clamp, d.gate_norm = c->gate_norm, d.clamp_min = c->clamp_min;
        d.conv_dims[0] = c->key_dim, d.conv_dims[1] = c->key_dim / grp;
        d.conv_dims[2] = c->value_dim / grp;
    } else if (fam == GM_FAM_ATTN) {
        describe_attn(c, m->layers[l0].mc.max_t, &d);
    } else if (fam == GM_FAM_KATA) { /* H heads of head_dim d; q, k l2-normalised, RoPE 2 */
        d.H = d.Hv = c->H, d.dk = d.dv = c->dk, d.key_dim = d.value_dim = c->key_dim;
        d.use_gate = 0, d.has_decay = 0, d.use_beta = 0;
        d.qk_norm = c->qk_norm, d.rope = c->rope, d.rope_theta = c->rope_theta;
        d.kata_variant = m->layers[l0].mc.variant;
        d.kata_groups = m->layers[l0].mc.groups;
        d.conv_dims[0] = d.conv_dims[1] = d.conv_dims[2] = c->key_dim;
    } else if (fam == GM_FAM_KALMAN) { /* one head: S = state_size keys, M = expand C values */
        d.H = d.Hv = 1, d.dk = c->d_state, d.dv = c->d_inner;
        d.key_dim = c->d_state, d.value_dim = c->d_inner;
        d.use_gate = 0, d.has_decay = 0, d.use_beta = 0;
        d.qk_norm = c->qk_norm, d.use_gating = c->use_gating;
        d.conv_dims[0] = c->d_inner;
    } else { /* mamba2: H heads of state_size keys and head_dim values, d_inner = H head_dim */
        d.H = d.Hv = c->H, d.dk = c->d_state, d.dv = c->dv;
        d.key_dim = c->H * c->d_state, d.value_dim = c->d_inner;
        d.use_conv = 1, d.use_gate = 0, d.has_decay = 1, d.use_beta = 0;
        d.n_groups = c->n_groups, d.D_has_hdim = c->D_has_hdim, d.use_bias = c->use_bias;
        d.norm_group = c->norm_group, d.dt_lo = c->dt_lo, d.dt_hi = c->dt_hi;
        d.conv_dims[0] = c->d_inner + 2 * c->n_groups * c->d_state;
    }
    d.state_floats = g->sfl[l0];
    /* a hybrid: each attention specification a description of its own */
    gm_model_desc sub[GM_MAX_DESCS - 1];
    d.nsub = m->nattn, d.sub = sub;
    for (int k = 0; k < m->nattn && k < GM_MAX_DESCS - 1; k++) {
        sub[k] = (gm_model_desc){.layers = nl,
                                 .hidden = c->hidden,
                                 .vocab = c->vocab,
                                 .inter = d.inter,
                                 .norm_eps = c->norm_eps};
        describe_attn(&m->attn_cfg[k], m->max_t, &sub[k]);
    }
    for (int li = 0; li < nl; li++) {
        const gm_model_desc *ld_d = ld[li].desc ? &sub[ld[li].desc - 1] : &d;
        if (g->sfl[li] != ld_d->state_floats) {
            free(ld);
            model_gpu_free(g);
            return err_set(e,
                           "model on the gpu: layer %d's state (%zu floats) is not its "
                           "description's (%zu)",
                           li, g->sfl[li], ld_d->state_floats);
        }
    }
    int rc = gm_create(&g->k, &d, max_batch, e);
    free(ld);
    if (rc || model_gpu_upload(g, m, e)) {
        model_gpu_free(g);
        return err_prefix(e, "model on the gpu");
    }
    *out = g;
    return 0;
}

void model_gpu_free(model_gpu *g) {
    if (!g) return;
    gm_destroy(g->k);
    free(g->sup), free(g->sdown), free(g->cup), free(g->cdown), free(g->sfl);
    free(g);
}

int model_gpu_upload(model_gpu *g, const model *m, err *e) {
    if (!model_gpu_matches(g, m))
        return err_set(e, "model on the gpu: not the model it was made from (or its KV cache was "
                          "resized)");
    for (int li = 0; li < g->layers; li++) {
        const layer *L = &m->layers[li];
        g->sup[li] = L->state;
        for (int s = 0; s < 3; s++) g->cup[3 * li + s] = m->c.use_conv ? L->conv_cache[s] : NULL;
    }
    if (gm_upload(g->k, g->sup, g->cup, e)) return -1;
    g->pos = m->pos;
    return 0;
}

int model_gpu_download(model_gpu *g, model *m, err *e) {
    if (!model_gpu_matches(g, m))
        return err_set(e, "model on the gpu: not the model it was made from (or its KV cache was "
                          "resized)");
    for (int li = 0; li < g->layers; li++) {
        layer *L = &m->layers[li];
        g->sdown[li] = L->state;
        for (int s = 0; s < 3; s++) g->cdown[3 * li + s] = m->c.use_conv ? L->conv_cache[s] : NULL;
    }
    if (gm_download(g->k, g->sdown, g->cdown, e)) return -1;
    m->pos = g->pos;
    return 0;
}

int model_gpu_step(model_gpu *g, const int32_t *tokens, int n, const int32_t *next, float *logits,
                   int32_t *top, float *topp, float *nll, float *probes, float *fprobes,
                   float *state, err *e) {
    model_gpu_out o = {logits, top, topp, nll, probes, fprobes, state, NULL, NULL, NULL, 0};
    return model_gpu_step_ex(g, tokens, n, next, &o, e);
}

_Static_assert(MODEL_GPU_RECALL_WINDOW == GM_RECALL_W, "one readback window");

int model_gpu_step_ex(model_gpu *g, const int32_t *tokens, int n, const int32_t *next,
                      const model_gpu_out *out, err *e) {
    if (n < 1 || n > g->max_batch)
        return err_set(e, "%d tokens in one gpu step (1..%d)", n, g->max_batch);
    for (int t = 0; t < n; t++) {
        if (tokens[t] < 0 || tokens[t] >= g->vocab)
            return err_set(e, "token id %d outside the vocabulary [0, %d)", (int)tokens[t],
                           g->vocab);
        if (next && next[t] >= g->vocab)
            return err_set(e, "next token id %d outside the vocabulary [0, %d)", (int)next[t],
                           g->vocab);
    }
    gm_outputs o = {out->logits, out->top, out->topp, out->nll,    out->probes,     out->fprobes,
                    out->state,  out->k,   out->v,    out->recall, out->probes_tail};
    if (gm_step(g->k, tokens, n, g->pos, next, &o, e)) return -1;
    g->pos += n;
    return 0;
}

int model_gpu_recall_fill(model_gpu *g, const float *k, const float *v, int n, err *e) {
    if (n < 0) return err_set(e, "model on the gpu: %d window tokens", n);
    return gm_recall_fill(g->k, k, v, n, e);
}

int model_gpu_recall_held(const model_gpu *g) {
    return gm_recall_held(g->k);
}

void model_gpu_kv_shape(const model_gpu *g, int *heads, int *dk, int *dv) {
    gm_kv_shape(g->k, heads, dk, dv);
}

size_t model_gpu_probe_floats(const model_gpu *g) {
    return g->pfloats;
}

size_t model_gpu_fprobe_floats(const model_gpu *g) {
    return g->fpfloats;
}

int model_gpu_matches(const model_gpu *g, const model *m) {
    if (!g || !m || m->c.layers != g->layers || m->c.vocab != g->vocab) return 0;
    for (int li = 0; li < g->layers; li++) {
        const layer *L = &m->layers[li];
        if (L->mx->state_floats(&L->mc) != g->sfl[li]) return 0;
    }
    return 1;
}

int model_gpu_max_batch(const model_gpu *g) {
    return g->max_batch;
}

int model_gpu_has_readback(const model_gpu *g) {
    return g->readback;
}

int model_gpu_has_snapshot(const model_gpu *g) {
    return g->snapshot;
}

int model_gpu_pos(const model_gpu *g) {
    return g->pos;
}
