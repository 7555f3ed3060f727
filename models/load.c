/* load.c: config.json + model.safetensors -> model.
 *
 * The config decides every tensor the model must have (the slot list, model.c). A checkpoint is
 * accepted only when it holds exactly those tensors, each with the implied shape, a float dtype
 * (F32, BF16, F16, F64: converted to float32) and finite values. Every refusal is one line that
 * names the file and the tensor or config key. */
#include <limits.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "../core/config.h"
#include "../core/fileio.h"
#include "../core/safetensors.h"
#include "blocks.h"
#include "family.h"
#include "internal.h"

/* ---- config helpers (family.h) ---- */

int cfg_int_in(const config *cfg, const char *key, long def, long lo, long hi, int *out, err *e) {
    long v;
    if (def == LONG_MIN && !config_has(cfg, key))
        return err_set(e, "%s: key '%s' missing", cfg->path, key);
    if (config_int(cfg, key, def, &v, e)) return -1;
    if (v < lo || v > hi)
        return err_set(e, "%s: key '%s' is %ld, expected %ld..%ld", cfg->path, key, v, lo, hi);
    *out = (int)v;
    return 0;
}

int cfg_choice(const config *cfg, const char *key, const char *def, const char *const *names,
               int *out, err *e) {
    char buf[64];
    if (config_str(cfg, key, def, buf, sizeof buf, e)) return -1;
    for (int i = 0; names[i]; i++)
        if (strcmp(buf, names[i]) == 0) return *out = i, 0;
    char list[256];
    size_t o = 0;
    list[0] = '\0';
    for (int i = 0; names[i] && o < sizeof list; i++)
        o += (size_t)snprintf(list + o, sizeof list - o, "%s%s", i ? ", " : "", names[i]);
    return err_set(e, "%s: key '%s' is '%s', supported: %s", cfg->path, key, buf, list);
}

int cfg_require_null(const config *cfg, const char *key, err *e) {
    if (config_has(cfg, key))
        return err_set(e, "%s: key '%s' is set; this lab supports only null there", cfg->path, key);
    return 0;
}

long py_int_mul(long a, double b) {
    double p = (double)a * b;
    if (!(p > -1e15 && p < 1e15)) return -1;
    return (long)p; /* truncation toward zero, as Python's int() */
}

/* ---- parsing the common keys ---- */

static int parse_common(model_config *c, const config *cfg, err *e) {
    char type[64];
    if (!config_has(cfg, "model_type"))
        return err_set(e, "%s: key 'model_type' missing", cfg->path);
    if (config_str(cfg, "model_type", "", type, sizeof type, e)) return -1;
    if (model_kind_parse(type, &c->kind)) {
        char list[256];
        size_t o = 0;
        for (int k = 0; k < MK_COUNT; k++)
            o += (size_t)snprintf(list + o, sizeof list - o, "%s%s", k ? ", " : "",
                                  model_kind_name((model_kind)k));
        return err_set(e, "%s: unknown model_type '%s' (known: %s)", cfg->path, type, list);
    }
    static const layer_family FAM[MK_COUNT] = {FAM_GDN,  FAM_GDN,  FAM_GDN,    FAM_GLA, FAM_MAMBA2,
                                               FAM_ATTN, FAM_ATTN, FAM_KALMAN, FAM_KATA};
    c->family = FAM[c->kind];
    int mamba = c->kind == MK_MAMBA2, kalman = c->kind == MK_KALMAN;
    if (cfg_int_in(cfg, "vocab_size", LONG_MIN, 1, 1 << 24, &c->vocab, e) ||
        cfg_int_in(cfg, "hidden_size", LONG_MIN, 1, 1 << 16, &c->hidden, e) ||
        cfg_int_in(cfg, "num_hidden_layers", LONG_MIN, 1, 1024, &c->layers, e) ||
        config_bool(cfg, "tie_word_embeddings", 0, &c->tie, e))
        return -1;
    double eps;
    if (config_float(cfg, "norm_eps", mamba || kalman ? 1e-5 : 1e-6, &eps, e)) return -1;
    if (!(eps >= 0 && eps < 1))
        return err_set(e, "%s: key 'norm_eps' must lie in [0, 1)", cfg->path);
    c->norm_eps = (float)eps;
    if (cfg_require_null(cfg, "attnres_block_size", e)) return -1;
    if (!mamba) {
        static const char *const ACTS[] = {"swish", "silu", NULL};
        int act;
        if (cfg_choice(cfg, "hidden_act", "swish", ACTS, &act, e)) return -1;
        if (config_has(cfg, "intermediate_size")) {
            if (cfg_int_in(cfg, "intermediate_size", 0, 1, 1 << 20, &c->inter, e)) return -1;
        } else {
            double ratio;
            if (config_float(cfg, "hidden_ratio", 4, &ratio, e)) return -1;
            if (!(ratio > 0 && ratio <= 64))
                return err_set(e, "%s: key 'hidden_ratio' must lie in (0, 64]", cfg->path);
            c->inter = (int)blk_mlp_intermediate(c->hidden, ratio);
        }
    }
    return 0;
}

int model_declare(model **out, const char *config_text, const char *label, err *e) {
    *out = NULL;
    config cfg;
    if (config_parse(&cfg, config_text, label, e)) return -1;
    model *m = calloc(1, sizeof *m);
    if (!m) {
        config_free(&cfg);
        return err_set(e, "out of memory");
    }
    int rc = -1;
    if (parse_common(&m->c, &cfg, e)) goto done;
    if (family_of(m->c.family)->parse(&m->c, &cfg, e)) goto done;
    if (!(m->layers = calloc((size_t)m->c.layers, sizeof *m->layers))) {
        err_set(e, "out of memory");
        goto done;
    }
    if (!(m->config_json = strdup(config_text))) {
        err_set(e, "out of memory");
        goto done;
    }
    if (model_declare_all(m, e)) goto done;
    rc = 0;
done:
    config_free(&cfg);
    if (rc)
        model_free(m);
    else
        *out = m;
    return rc;
}

/* ---- the checkpoint ---- */

static int shape_equal(const tensor *t, const wslot *s) {
    if (t->ndim != s->ndim) return 0;
    for (int i = 0; i < s->ndim; i++)
        if (t->shape[i] != s->shape[i]) return 0;
    return 1;
}

/* Converts and checks one tensor into a new float32 array. */
static float *read_checked(const tensor *t, const char *file, err *e) {
    int64_t n = tensor_numel(t);
    float *d = malloc((size_t)(n > 0 ? n : 1) * sizeof *d);
    if (!d) {
        err_set(e, "%s: tensor '%s': out of memory", file, t->name);
        return NULL;
    }
    tensor_read_f32(t, d);
    for (int64_t i = 0; i < n; i++)
        if (!isfinite(d[i])) {
            err_set(e, "%s: tensor '%s': %s at element %lld", file, t->name,
                    isnan(d[i]) ? "NaN" : "Inf", (long long)i);
            free(d);
            return NULL;
        }
    return d;
}

int model_from_checkpoint(model **out, const char *config_text, const st_file *f, const char *label,
                          err *e) {
    *out = NULL;
    model *m;
    if (model_declare(&m, config_text, label, e)) return -1;
    const char *file = f->path ? f->path : "model.safetensors";
    char a[96], b[96];
    /* every declared tensor present, float, with the implied shape */
    for (int i = 0; i < m->nslots; i++) {
        const wslot *s = &m->slots[i];
        const tensor *t = st_find(f, s->name);
        if (!t) {
            err_set(e, "%s: missing tensor '%s' (a %s model with this config.json needs it)", file,
                    s->name, model_kind_name(m->c.kind));
            goto fail;
        }
        if (!dtype_is_float(t->dtype)) {
            err_set(e, "%s: tensor '%s': dtype %s, expected a float dtype (F32, BF16, F16)", file,
                    s->name, dtype_name(t->dtype));
            goto fail;
        }
        if (!shape_equal(t, s)) {
            err_set(e, "%s: tensor '%s': shape %s, but config.json implies %s", file, s->name,
                    shape_str(t->ndim, t->shape, a, sizeof a),
                    shape_str(s->ndim, s->shape, b, sizeof b));
            goto fail;
        }
    }
    /* nothing else (a tied head may be stored: it must equal the embedding) */
    const tensor *tied_head = NULL;
    for (int i = 0; i < f->n; i++) {
        const tensor *t = &f->tensors[i];
        if (model_find_slot(m, t->name)) continue;
        if (m->c.tie && strcmp(t->name, "lm_head.weight") == 0) {
            tied_head = t;
            continue;
        }
        err_set(e, "%s: unexpected tensor '%s' (not part of a %s model with this config.json)",
                file, t->name, model_kind_name(m->c.kind));
        goto fail;
    }
    for (int i = 0; i < m->nslots; i++) {
        wslot *s = &m->slots[i];
        if (!(s->data = read_checked(st_find(f, s->name), file, e))) goto fail;
    }
    if (tied_head) {
        const wslot *emb = &m->slots[0];
        if (!shape_equal(tied_head, emb) || !dtype_is_float(tied_head->dtype)) {
            err_set(e, "%s: tensor 'lm_head.weight': shape %s, but tie_word_embeddings implies %s",
                    file, shape_str(tied_head->ndim, tied_head->shape, a, sizeof a),
                    shape_str(emb->ndim, emb->shape, b, sizeof b));
            goto fail;
        }
        float *h = read_checked(tied_head, file, e);
        if (!h) goto fail;
        int same = memcmp(h, emb->data, (size_t)wslot_numel(emb) * sizeof(float)) == 0;
        free(h);
        if (!same) {
            err_set(e,
                    "%s: tensor 'lm_head.weight' differs from the embedding, but config.json "
                    "says tie_word_embeddings",
                    file);
            goto fail;
        }
    }
    if (model_finish(m, e)) goto fail;
    snprintf(m->source, sizeof m->source, "%s", label);
    *out = m;
    return 0;
fail:
    model_free(m);
    return -1;
}

static int ends_with(const char *s, const char *suf) {
    size_t n = strlen(s), k = strlen(suf);
    return n >= k && strcmp(s + n - k, suf) == 0;
}

int model_load(model **out, const char *path, err *e) {
    *out = NULL;
    char *cfg_path = NULL, *w_path = NULL, *text = NULL;
    st_file *f = NULL;
    int rc = -1;
    if (path_is_dir(path)) {
        cfg_path = path_join(path, "config.json");
        w_path = path_join(path, "model.safetensors");
        if (!cfg_path || !w_path) goto oom;
        FILE *probe = fopen(w_path, "rb");
        if (probe) {
            fclose(probe);
        } else {
            free(w_path);
            if (!(w_path = path_join(path, "model.safetensors.index.json"))) goto oom;
            if (!(probe = fopen(w_path, "rb"))) {
                err_set(e, "%s: no model.safetensors or model.safetensors.index.json", path);
                goto done;
            }
            fclose(probe);
        }
    } else if (ends_with(path, ".safetensors") || ends_with(path, ".index.json")) {
        if (!(cfg_path = path_sibling(path, "config.json")) || !(w_path = strdup(path))) goto oom;
    } else {
        if (access(path, F_OK) != 0)
            err_set(e, "%s: no such file or folder", path);
        else
            err_set(e, "%s: expected a checkpoint folder or a .safetensors file", path);
        goto done;
    }
    if (file_read_all(cfg_path, 16u << 20, &text, NULL, e)) goto done;
    if (ends_with(w_path, ".index.json") ? st_open_index(&f, w_path, e) : st_open(&f, w_path, e))
        goto done;
    rc = model_from_checkpoint(out, text, f, cfg_path, e);
    if (!rc) snprintf((*out)->source, sizeof(*out)->source, "%s", path);
    goto done;
oom:
    err_set(e, "out of memory");
done:
    st_close(f);
    free(cfg_path), free(w_path), free(text);
    return rc;
}
