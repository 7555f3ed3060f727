/* layer_mamba2.c: fla's Mamba2 mixer (model type mamba2). Spec: delta-family.md §5.
 *
 * Per token, from the normalised hidden u [C] (d_inner = expand * C, H heads of P channels,
 * G groups of N state channels):
 *   [z, xBC, dt_raw] = W_in u (+ b)            z [d_inner], xBC [d_inner + 2GN], dt_raw [H]
 *   xBC = SiLU(conv(xBC) + b_conv); x [H, P], B [G, N], C [G, N]
 *   dt  = clamp(softplus(dt_raw + dt_bias), dt_limit);  A = -exp(A_log)
 * The core is mamba2's SSD in linear-attention form (scale 1, no normalisation):
 *   q = C_g(h), k = B_g(h), v = dt * x, g = dt * A     with g(h) = h / (H / G)
 * Output: y = o + D x; y = RMSNorm_w(y * SiLU(z)) over the whole d_inner (fla's RMSNormGated with
 * norm_before_gate=False and no group size); then W_out (+ b).
 * The block has no MLP: backbone.layers.N.{norm, mixer}. */
#include <cjson/cJSON.h>
#include <math.h>
#include <string.h>

#include "blocks.h"
#include "family.h"

/* dt_limit as fla writes it: [lo, hi] with Infinity spelled {"__float__": "Infinity"} */
static int limit_value(const cJSON *j, double *v) {
    if (cJSON_IsNumber(j)) return *v = j->valuedouble, 0;
    const cJSON *f = cJSON_IsObject(j) ? cJSON_GetObjectItemCaseSensitive(j, "__float__") : NULL;
    if (!cJSON_IsString(f)) return -1;
    if (!strcmp(f->valuestring, "Infinity") || !strcmp(f->valuestring, "inf"))
        return *v = INFINITY, 0;
    if (!strcmp(f->valuestring, "-Infinity") || !strcmp(f->valuestring, "-inf"))
        return *v = -INFINITY, 0;
    return -1;
}

static const probe_def PROBES[] = {
    {"dt", W_1, "Delta = clamp(softplus(dt_raw + dt_bias)): the step size (g = Delta A)"},
};

static int parse(model_config *c, const config *cfg, err *e) {
    int expand, rmsnorm, nbg;
    if (cfg_int_in(cfg, "head_dim", 64, 1, 1 << 14, &c->dv, e) ||
        cfg_int_in(cfg, "state_size", 128, 1, 1 << 14, &c->d_state, e) ||
        cfg_int_in(cfg, "expand", 2, 1, 64, &expand, e) ||
        cfg_int_in(cfg, "n_groups", 1, 1, 4096, &c->n_groups, e) ||
        cfg_int_in(cfg, "conv_kernel", 4, 1, 64, &c->conv_size, e) ||
        config_bool(cfg, "use_conv_bias", 1, &c->conv_bias, e) ||
        config_bool(cfg, "use_bias", 0, &c->use_bias, e) ||
        config_bool(cfg, "D_has_hdim", 0, &c->D_has_hdim, e) ||
        config_bool(cfg, "rmsnorm", 1, &rmsnorm, e) ||
        config_bool(cfg, "norm_before_gate", 0, &nbg, e))
        return -1;
    static const char *const ACT[] = {"silu", "swish", NULL};
    int act;
    if (cfg_choice(cfg, "hidden_act", "silu", ACT, &act, e)) return -1;
    if (!rmsnorm || nbg)
        return err_set(e,
                       "%s: keys 'rmsnorm'/'norm_before_gate': only rmsnorm=true, "
                       "norm_before_gate=false are supported",
                       cfg->path);
    c->d_inner = expand * c->hidden;
    if (c->d_inner % c->dv)
        return err_set(e, "%s: key 'head_dim' (%d) must divide expand * hidden_size (%d)",
                       cfg->path, c->dv, c->d_inner);
    int H = c->d_inner / c->dv;
    if (cfg_int_in(cfg, "num_heads", H, 1, 1 << 16, &c->H, e)) return -1;
    if (c->H != H)
        return err_set(e, "%s: key 'num_heads' is %d, but expand * hidden_size / head_dim = %d",
                       cfg->path, c->H, H);
    if (c->H % c->n_groups)
        return err_set(e, "%s: key 'n_groups' (%d) must divide num_heads (%d)", cfg->path,
                       c->n_groups, c->H);
    c->Hv = c->H, c->dk = c->d_state;
    c->use_conv = 1;
    c->norm_group = c->d_inner;
    c->dt_lo = 0.0f, c->dt_hi = INFINITY;
    const cJSON *lim = cJSON_GetObjectItemCaseSensitive(cfg->root, "dt_limit");
    if (lim && !cJSON_IsNull(lim)) {
        double lo, hi;
        if (!cJSON_IsArray(lim) || cJSON_GetArraySize(lim) != 2 ||
            limit_value(cJSON_GetArrayItem(lim, 0), &lo) ||
            limit_value(cJSON_GetArrayItem(lim, 1), &hi) || !(lo <= hi) || isnan(lo))
            return err_set(e, "%s: key 'dt_limit' must be [lo, hi]", cfg->path);
        c->dt_lo = (float)lo, c->dt_hi = (float)hi;
    }
    return 0;
}

static int conv_dim(const model_config *c) {
    return c->d_inner + 2 * c->n_groups * c->d_state;
}

static int declare(model *m, int li, const char *p, err *e) {
    const model_config *c = &m->c;
    layer *L = &m->layers[li];
    int C = c->hidden, cd = conv_dim(c);
    int proj = 2 * c->d_inner + 2 * c->n_groups * c->d_state + c->H;
    int64_t hs[1] = {c->H};
    if (slot1(m, &L->A_log, INIT_A_LOG, 0, c->H, e, p, "A_log")) return -1;
    m->slots[m->nslots - 1].ia = 1.0f, m->slots[m->nslots - 1].ib = 16.0f; /* A_init_range */
    if (slot1(m, &L->D, INIT_ONES, 0, c->D_has_hdim ? c->d_inner : c->H, e, p, "D")) return -1;
    if (c->conv_bias && slot1(m, &L->conv_b, INIT_ZEROS, 0, cd, e, p, "conv1d.bias")) return -1;
    if (slot3(m, &L->conv_w, INIT_NORMAL, 0.02f, cd, 1, c->conv_size, e, p, "conv1d.weight") ||
        model_slot(m, &L->dt_bias, INIT_DT_BIAS, 1e-3f, 0.1f, 1, hs, e, "%sdt_bias", p) ||
        slot2(m, &L->in_proj, INIT_NORMAL, 0.02f, proj, C, e, p, "in_proj.weight"))
        return -1;
    if (c->use_bias && slot1(m, &L->in_proj_b, INIT_ZEROS, 0, proj, e, p, "in_proj.bias"))
        return -1;
    if (slot1(m, &L->norm_w, INIT_ONES, 0, c->d_inner, e, p, "norm.weight") ||
        slot2(m, &L->out_proj, INIT_NORMAL, 0.02f, C, c->d_inner, e, p, "out_proj.weight"))
        return -1;
    if (c->use_bias && slot1(m, &L->out_proj_b, INIT_ZEROS, 0, C, e, p, "out_proj.bias")) return -1;
    return 0;
}

static int mixer_dims(const model_config *c, const char *mixer, int *H, int *dk, int *dv) {
    if (strcmp(mixer, "mamba2")) return 0;
    *H = c->H, *dk = c->d_state, *dv = c->dv;
    return 1;
}

static void tune(const model *m, layer *L, const opts *user) {
    (void)m;
    if (!opts_given(user, "scale")) L->mc.scale = 1.0f; /* the Mamba2 layer reads C·h unscaled */
}

static int conv_streams(const model_config *c, int *dims) {
    dims[0] = conv_dim(c);
    return 1;
}

static size_t aux_floats(const model_config *c) {
    return 2 * (size_t)c->d_inner; /* z, x */
}

static size_t scratch_floats(const model_config *c) {
    return 2 * (2 * (size_t)c->d_inner + 2 * (size_t)c->n_groups * c->d_state + c->H) +
           (size_t)c->d_inner + 16;
}

static void prep(const model *m, layer *L, const float *x, int pos, float *const in[IN_COUNT],
                 float *aux, float *tmp) {
    (void)pos;
    const model_config *c = &m->c;
    int di = c->d_inner, GN = c->n_groups * c->d_state, N = c->d_state, P = c->dv;
    int cd = conv_dim(c), per = c->H / c->n_groups;
    float *zxbcdt = tmp, *xbc = zxbcdt + 2 * di + 2 * GN + c->H;
    blk_linear(zxbcdt, x, L->in_proj, L->in_proj_b, 2 * di + 2 * GN + c->H, c->hidden);
    blk_conv_step(xbc, L->conv_cache[0], zxbcdt + di, L->conv_w, L->conv_b, cd, c->conv_size,
                  ACT_SILU);
    const float *xs = xbc, *B = xbc + di, *Cm = xbc + di + GN, *dtr = zxbcdt + di + cd;
    memcpy(aux, zxbcdt, (size_t)di * sizeof(float));  /* z */
    memcpy(aux + di, xs, (size_t)di * sizeof(float)); /* x, for the D skip */
    for (int h = 0; h < c->H; h++) {
        float dt = blk_softplus(dtr[h] + L->dt_bias[h]);
        dt = dt < c->dt_lo ? c->dt_lo : dt > c->dt_hi ? c->dt_hi : dt;
        float A = -expf(L->A_log[h]);
        if (m->fprobe_on) m->fprobe[h] = dt;
        int g = h / per;
        memcpy(in[IN_Q] + (size_t)h * N, Cm + (size_t)g * N, (size_t)N * sizeof(float));
        memcpy(in[IN_K] + (size_t)h * N, B + (size_t)g * N, (size_t)N * sizeof(float));
        for (int p = 0; p < P; p++) in[IN_V][(size_t)h * P + p] = dt * xs[(size_t)h * P + p];
        in[IN_G][h] = dt * A;
    }
}

static void post(const model *m, const layer *L, const float *o, const float *aux, float *y,
                 float *tmp) {
    const model_config *c = &m->c;
    int di = c->d_inner, P = c->dv;
    const float *z = aux, *xs = aux + di;
    for (int i = 0; i < di; i++) tmp[i] = o[i] + (c->D_has_hdim ? L->D[i] : L->D[i / P]) * xs[i];
    blk_gate_rmsnorm(tmp, tmp, z, L->norm_w, di, c->norm_group, c->norm_eps);
    family_out_hook(m, L, tmp, di);
    blk_linear(y, tmp, L->out_proj, L->out_proj_b, c->hidden, di);
}

static int random_config(cJSON *cfg, model_kind k, int hidden, int heads, int head_dim, err *e) {
    (void)k;
    if (!head_dim) head_dim = 64;
    if (!heads) heads = 2 * hidden / head_dim;
    if (heads < 1 || ((long)heads * head_dim) % hidden)
        return err_set(e, "mamba2: heads * head_dim (%d * %d) must be a multiple of hidden (%d)",
                       heads, head_dim, hidden);
    rc_num(cfg, "num_heads", heads);
    rc_num(cfg, "head_dim", head_dim);
    rc_num(cfg, "expand", (long)heads * head_dim / hidden);
    rc_num(cfg, "state_size", 16);
    rc_num(cfg, "n_groups", 1);
    rc_num(cfg, "conv_kernel", 4);
    rc_bool(cfg, "use_conv_bias", 1);
    rc_bool(cfg, "use_bias", 0);
    rc_bool(cfg, "D_has_hdim", 0);
    rc_bool(cfg, "rmsnorm", 1);
    rc_bool(cfg, "norm_before_gate", 0);
    rc_str(cfg, "hidden_act", "silu");
    rc_num(cfg, "chunk_size", 256);
    rc_bool(cfg, "residual_in_fp32", 1);
    cJSON *ar = cJSON_CreateArray();
    cJSON_AddItemToArray(ar, cJSON_CreateNumber(1));
    cJSON_AddItemToArray(ar, cJSON_CreateNumber(16));
    cJSON_AddItemToObject(cfg, "A_init_range", ar);
    rc_num(cfg, "dt_min", 0.001);
    rc_num(cfg, "dt_max", 0.1);
    rc_num(cfg, "dt_init_floor", 1e-4);
    cJSON *lim = cJSON_CreateArray(), *inf = cJSON_CreateObject();
    cJSON_AddStringToObject(inf, "__float__", "Infinity");
    cJSON_AddItemToArray(lim, cJSON_CreateNumber(0.0));
    cJSON_AddItemToArray(lim, inf);
    cJSON_AddItemToObject(cfg, "dt_limit", lim);
    return 0;
}

const family_ops family_mamba2 = {
    .fam = FAM_MAMBA2,
    .probes = PROBES,
    .nprobes = 1,
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
