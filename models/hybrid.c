/* hybrid.c: fla's `attn` config key: softmax attention layers inside a linear model.
 *
 * fla (fla/models/hybrid.py, bc3b101d) reads `attn` as null, one specification or a list of them:
 *
 *   {"layers": [1, 5], "num_heads": 16, "num_kv_heads": 4, "qkv_bias": false,
 *    "window_size": null, "rope_theta": 10000.0}
 *
 * and builds fla.layers.attn.Attention at each listed layer instead of the model's own layer:
 * q, k, v projections (bias with qkv_bias), head_dim = hidden / num_heads, no qk norm, rotate-half
 * RoPE with rope_theta, causal attention over the last window_size tokens (all when null), GQA with
 * num_kv_heads, o_proj; its tensors sit under model.layers.N.attn. as the linear layer's would.
 * The block around it (norms, MLP) is the model's. Validation follows fla's: layers a list of
 * distinct in-range integers, no layer in two specifications, num_heads required and positive,
 * num_kv_heads positive (default num_heads), qkv_bias a boolean, window_size null or positive,
 * rope_theta positive and finite. Keys fla ignores are ignored here too.
 *
 * Each specification becomes a model_config of family FAM_ATTN (m->attn_cfg[k]) and each listed
 * layer points at it (layer.cfg); every other layer points at m->c. */
#include <cjson/cJSON.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "family.h"
#include "hybrid.h"

static int spec_int(const cJSON *spec, const char *key, const char *where, int def, int *out,
                    err *e) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(spec, key);
    if (!v || cJSON_IsNull(v)) {
        if (def < 0) return err_set(e, "%s: field '%s' is required", where, key);
        *out = def;
        return 0;
    }
    double d = cJSON_IsNumber(v) ? v->valuedouble : -1;
    if (!cJSON_IsNumber(v) || d != floor(d) || d < 1 || d > (1 << 30))
        return err_set(e, "%s: field '%s' must be a positive integer", where, key);
    *out = (int)d;
    return 0;
}

static int parse_spec(model *m, const cJSON *spec, int k, const char *where, int *owner, err *e) {
    model_config *a = &m->attn_cfg[k];
    const model_config *c = &m->c;
    if (!cJSON_IsObject(spec)) return err_set(e, "%s must be an object", where);
    const cJSON *layers = cJSON_GetObjectItemCaseSensitive(spec, "layers");
    if (!cJSON_IsArray(layers))
        return err_set(e, "%s: field 'layers' must be a list of layer indices", where);
    const cJSON *it;
    cJSON_ArrayForEach(it, layers) {
        double d = cJSON_IsNumber(it) ? it->valuedouble : -1;
        if (!cJSON_IsNumber(it) || d != floor(d))
            return err_set(e, "%s: field 'layers' must hold integer layer indices", where);
        if (d < 0 || d >= c->layers)
            return err_set(e, "%s: layer %g is out of range [0, %d)", where, d, c->layers);
        int li = (int)d;
        if (owner[li] == k + 1) return err_set(e, "%s: layer %d is listed twice", where, li);
        if (owner[li])
            return err_set(e, "%s: layer %d is already an attention layer of specification %d",
                           where, li, owner[li] - 1);
        owner[li] = k + 1;
    }
    *a = *c;
    a->kind = MK_TRANSFORMER, a->family = FAM_ATTN;
    if (spec_int(spec, "num_heads", where, -1, &a->H, e) ||
        spec_int(spec, "num_kv_heads", where, a->H, &a->Hkv, e))
        return -1;
    if (c->hidden % a->H)
        return err_set(e, "%s: num_heads (%d) must divide hidden_size (%d)", where, a->H,
                       c->hidden);
    if (a->H % a->Hkv)
        return err_set(e, "%s: num_kv_heads (%d) must divide num_heads (%d)", where, a->Hkv, a->H);
    const cJSON *bias = cJSON_GetObjectItemCaseSensitive(spec, "qkv_bias");
    if (bias && !cJSON_IsNull(bias) && !cJSON_IsBool(bias))
        return err_set(e, "%s: field 'qkv_bias' must be true or false", where);
    a->qkv_bias = cJSON_IsTrue(bias);
    if (spec_int(spec, "window_size", where, 0, &a->window, e)) return -1;
    const cJSON *th = cJSON_GetObjectItemCaseSensitive(spec, "rope_theta");
    double theta = 10000.0;
    if (th && !cJSON_IsNull(th)) {
        if (!cJSON_IsNumber(th) || !(th->valuedouble > 0) || !isfinite(th->valuedouble))
            return err_set(e, "%s: field 'rope_theta' must be positive and finite", where);
        theta = th->valuedouble;
    }
    a->rope_theta = (float)theta, a->rope = 1, a->qk_norm = 0;
    a->dk = a->dv = c->hidden / a->H;
    a->Hv = a->H, a->key_dim = c->hidden, a->value_dim = a->Hkv * a->dv;
    a->use_conv = 0;
    return 0;
}

int hybrid_parse(model *m, const config *cfg, err *e) {
    m->nattn = 0;
    for (int li = 0; li < m->c.layers; li++) m->layers[li].cfg = &m->c;
    const cJSON *attn = cJSON_GetObjectItemCaseSensitive(cfg->root, "attn");
    if (!attn || cJSON_IsNull(attn)) return 0;
    if (m->c.family == FAM_ATTN || m->c.kind == MK_MAMBA2)
        return err_set(e,
                       "%s: key 'attn' is set; %s models have no hybrid attention layers in fla "
                       "(gated_deltanet, delta_net, kaczmarz_deltanet, gla, kalman and kata do)",
                       cfg->path, model_kind_name(m->c.kind));
    int single = cJSON_IsObject(attn);
    if (!single && !cJSON_IsArray(attn))
        return err_set(e, "%s: key 'attn' must be null, an object or a list of objects", cfg->path);
    int n = single ? 1 : cJSON_GetArraySize(attn);
    if (n > MODEL_MAX_ATTN_SPECS)
        return err_set(e, "%s: key 'attn' has %d specifications (this lab reads up to %d)",
                       cfg->path, n, MODEL_MAX_ATTN_SPECS);
    int *owner = calloc((size_t)m->c.layers, sizeof *owner);
    if (!owner) return err_set(e, "out of memory");
    int rc = 0;
    for (int k = 0; k < n && !rc; k++) {
        char where[320];
        if (single)
            snprintf(where, sizeof where, "%s: key 'attn'", cfg->path);
        else
            snprintf(where, sizeof where, "%s: key 'attn', specification %d", cfg->path, k);
        rc = parse_spec(m, single ? attn : cJSON_GetArrayItem(attn, k), k, where, owner, e);
    }
    if (!rc) {
        m->nattn = n;
        for (int li = 0; li < m->c.layers; li++)
            if (owner[li]) m->layers[li].cfg = &m->attn_cfg[owner[li] - 1];
    }
    free(owner);
    return rc;
}

int model_is_hybrid(const model *m) {
    return m->nattn > 0;
}
