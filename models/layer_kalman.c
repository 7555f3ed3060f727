/* layer_kalman.c: the Kalman linear attention layer (model type kalman, defined here in fla's
 * style from the authors' KLALayer, spec/kalman.md §6.1-6.2, the "plain" block).
 *
 * Per token, from the normalised hidden x [C], with M = expand * C channels and S states:
 *   [z', g'] = W_in x                                  [M], [M]
 *   z = SiLU(conv(z') + b_conv)                        [M]   (also the skip input)
 *   [v, u, k, q] = W_sensor z                          [M], [M], [S], [S]
 *   k <- k / max(|k|, 1e-12), q likewise               (qk_norm)
 *   lambda_v = 1 / (softplus(u) + 1e-4)                value precision [M]
 * Static dynamics per lane [M, S], from the raw parameters delta, lambda_log, process_noise:
 *   Delta = softplus(delta) + 1e-7, a_c = -exp(lambda_log), p_c = max(process_noise, 1e-7)
 *   a = exp(a_c Delta),  p = p_c / (2|a_c|) (1 - exp(-2 |a_c| Delta))        (OU, §2.1)
 * The core is kalman (one head: dk = S, dv = M) with static parameters a and p.
 * Output: y = o + skip * z; y *= SiLU(g') (use_gating); W_out y. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "blocks.h"
#include "family.h"

static int parse(model_config *c, const config *cfg, err *e) {
    double expand;
    if (config_float(cfg, "expand", 2.0, &expand, e) ||
        cfg_int_in(cfg, "state_size", 16, 1, 1 << 12, &c->d_state, e) ||
        config_bool(cfg, "use_conv", 1, &c->use_conv, e) ||
        cfg_int_in(cfg, "conv_size", 4, 1, 64, &c->conv_size, e) ||
        config_bool(cfg, "use_gating", 1, &c->use_gating, e) ||
        config_bool(cfg, "qk_norm", 1, &c->qk_norm, e))
        return -1;
    long M = py_int_mul(c->hidden, expand);
    if (M < 1 || M > (1 << 20))
        return err_set(e, "%s: key 'expand': expand * hidden_size = %ld channels", cfg->path, M);
    c->d_inner = (int)M;
    c->H = c->Hv = 1, c->dk = c->d_state, c->dv = c->d_inner;
    c->conv_bias = c->use_conv;
    if (!c->use_conv) c->conv_size = 1;
    return 0;
}

static int declare(model *m, int li, const char *p, err *e) {
    const model_config *c = &m->c;
    layer *L = &m->layers[li];
    int C = c->hidden, M = c->d_inner, S = c->d_state;
    if (slot2(m, &L->in_proj, INIT_NORMAL, 0.02f, 2 * M, C, e, p, "in_proj.weight")) return -1;
    if (c->use_conv) {
        /* PyTorch's Conv1d default (Kaiming-uniform, a = sqrt(5)): U(+-1/sqrt(fan_in)) */
        float bound = 1.0f / sqrtf((float)c->conv_size);
        int64_t s3[3] = {M, 1, c->conv_size};
        if (model_slot(m, &L->conv_w, INIT_UNIFORM, -bound, bound, 3, s3, e, "%sconv1d.weight",
                       p) ||
            slot1(m, &L->conv_b, INIT_ZEROS, 0, M, e, p, "conv1d.bias"))
            return -1;
    }
    int64_t ms[2] = {M, S}, one[1] = {1};
    if (slot2(m, &L->sensor_proj, INIT_NORMAL, 0.02f, 2 * M + 2 * S, M, e, p,
              "sensor_proj.weight") ||
        model_slot(m, &L->delta, INIT_DT_BIAS, 1e-3f, 0.1f, 2, ms, e, "%sdelta", p) ||
        model_slot(m, &L->lambda_log, INIT_ZEROS, 0, 0, 2, ms, e, "%slambda_log", p) ||
        model_slot(m, &L->process_noise, INIT_CONST, 0.01f, 0, 2, ms, e, "%sprocess_noise", p) ||
        model_slot(m, &L->skip, INIT_CONST, -1.0f, 0, 1, one, e, "%sskip", p) ||
        slot2(m, &L->out_proj, INIT_NORMAL, 0.02f, C, M, e, p, "out_proj.weight"))
        return -1;
    return 0;
}

static int mixer_dims(const model_config *c, const char *mixer, int *H, int *dk, int *dv) {
    if (strcmp(mixer, "kalman")) return 0;
    *H = 1, *dk = c->d_state, *dv = c->d_inner;
    return 1;
}

/* The discrete a, p [M, S] of §2.1 from the raw parameters (double, then float32). */
static int finish(model *m, layer *L, err *e) {
    size_t n = (size_t)m->c.d_inner * (size_t)m->c.d_state;
    free(L->kal_a), free(L->kal_p);
    L->kal_a = malloc(n * sizeof(float)), L->kal_p = malloc(n * sizeof(float));
    if (!L->kal_a || !L->kal_p) return err_set(e, "out of memory");
    for (size_t i = 0; i < n; i++) {
        double d = L->delta[i];
        double dt = (d > 20 ? d : log1p(exp(d))) + 1e-7;
        double ac = exp((double)L->lambda_log[i]);
        if (ac < 1e-8) ac = 1e-8;
        double pc = L->process_noise[i] > 1e-7f ? (double)L->process_noise[i] : 1e-7;
        L->kal_a[i] = (float)exp(-ac * dt);
        L->kal_p[i] = (float)(pc / (2 * ac) * -expm1(-2 * ac * dt));
    }
    return 0;
}

static void tune(const model *m, layer *L, const opts *user) {
    (void)m, (void)user;
    for (int i = 0; i < L->mx->nparams && i < MIXER_MAX_PARAMS; i++) {
        const char *n = L->mx->params[i].name;
        if (!strcmp(n, "a"))
            L->mc.params[i] = L->kal_a;
        else if (!strcmp(n, "p"))
            L->mc.params[i] = L->kal_p;
    }
}

static int conv_streams(const model_config *c, int *dims) {
    if (!c->use_conv) return 0;
    dims[0] = c->d_inner;
    return 1;
}

static size_t aux_floats(const model_config *c) {
    return 2 * (size_t)c->d_inner; /* z, g' */
}

static size_t scratch_floats(const model_config *c) {
    return 4 * (size_t)c->d_inner + 2 * (size_t)c->d_state + 16;
}

static void prep(const model *m, layer *L, const float *x, int pos, float *const in[IN_COUNT],
                 float *aux, float *tmp) {
    (void)pos;
    const model_config *c = &m->c;
    int M = c->d_inner, S = c->d_state;
    float *h = tmp, *sens = tmp + 2 * M;
    float *z = aux, *gp = aux + M;
    blk_linear(h, x, L->in_proj, NULL, 2 * M, c->hidden);
    if (c->use_conv) {
        blk_conv_step(z, L->conv_cache[0], h, L->conv_w, L->conv_b, M, c->conv_size, ACT_SILU);
    } else {
        for (int i = 0; i < M; i++) z[i] = blk_silu(h[i]);
    }
    memcpy(gp, h + M, (size_t)M * sizeof(float));
    blk_linear(sens, z, L->sensor_proj, NULL, 2 * M + 2 * S, M);
    float *v = sens, *u = sens + M, *k = sens + 2 * M, *q = k + S;
    if (c->qk_norm) {
        double nk = 0, nq = 0;
        for (int s = 0; s < S; s++) nk += (double)k[s] * k[s], nq += (double)q[s] * q[s];
        float rk = (float)(1.0 / fmax(sqrt(nk), 1e-12)), rq = (float)(1.0 / fmax(sqrt(nq), 1e-12));
        for (int s = 0; s < S; s++) k[s] *= rk, q[s] *= rq;
    }
    memcpy(in[IN_V], v, (size_t)M * sizeof(float));
    for (int i = 0; i < M; i++) in[IN_LV][i] = 1.0f / (blk_softplus(u[i]) + 1e-4f);
    memcpy(in[IN_K], k, (size_t)S * sizeof(float));
    memcpy(in[IN_Q], q, (size_t)S * sizeof(float));
}

static void post(const model *m, const layer *L, const float *o, const float *aux, float *y,
                 float *tmp) {
    const model_config *c = &m->c;
    int M = c->d_inner;
    const float *z = aux, *gp = aux + M;
    for (int i = 0; i < M; i++) {
        tmp[i] = o[i] + L->skip[0] * z[i];
        if (c->use_gating) tmp[i] *= blk_silu(gp[i]);
    }
    family_out_hook(m, L, tmp, M);
    blk_linear(y, tmp, L->out_proj, NULL, c->hidden, M);
}

static int random_config(cJSON *cfg, model_kind k, int hidden, int heads, int head_dim, err *e) {
    (void)k, (void)hidden;
    if (heads > 1)
        return err_set(e,
                       "kalman: the layer has one head (channels = expand * hidden); "
                       "heads=%d is not possible",
                       heads);
    rc_num(cfg, "expand", 2);
    rc_num(cfg, "state_size", head_dim ? head_dim : 16);
    rc_bool(cfg, "use_conv", 1);
    rc_num(cfg, "conv_size", 4);
    rc_bool(cfg, "use_gating", 1);
    rc_bool(cfg, "qk_norm", 1);
    return 0;
}

const family_ops family_kalman = {
    .fam = FAM_KALMAN,
    .parse = parse,
    .declare = declare,
    .mixer_dims = mixer_dims,
    .default_opts = NULL,
    .tune = tune,
    .finish = finish,
    .conv_streams = conv_streams,
    .aux_floats = aux_floats,
    .scratch_floats = scratch_floats,
    .prep = prep,
    .post = post,
    .random_config = random_config,
};
