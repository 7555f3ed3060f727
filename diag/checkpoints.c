/* checkpoints.c: finding a run's checkpoints and loading them as they are.
 *
 * A training run saves folders named checkpoint-1200, step_1200, global_step1200, ...; diagnose
 * takes one of them or the folder holding them and orders them by that number.
 *
 * model_load refuses a tensor with a NaN or Inf (a checkpoint should never hold one). A run that
 * went unstable may well have saved one, and the point of diagnosing it is to see where that
 * value leads, so diag_load loads the checkpoint with the non-finite values zeroed, puts them back
 * into the model's weights afterwards, and reports each such tensor with the layer and head its
 * rows belong to. */
#include <ctype.h>
#include <dirent.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "../core/fileio.h"
#include "../core/safetensors.h"
#include "../models/model.h"
#include "diag.h"

/* ---- steps and listing ---- */

static long digits_at(const char *p) {
    if (!isdigit((unsigned char)*p)) return -1;
    long v = 0;
    for (; isdigit((unsigned char)*p) && v < 1000000000000L; p++) v = v * 10 + (*p - '0');
    return v;
}

long diag_step_of(const char *path) {
    const char *name = strrchr(path, '/');
    name = name && name[1] ? name + 1 : path;
    static const char *const KEYS[] = {"checkpoint-", "checkpoint_", "global_step", "step_",
                                       "step-",       "step",        "ckpt-",       "ckpt_",
                                       "iter_",       "iter-",       "iter"};
    for (size_t i = 0; i < sizeof KEYS / sizeof KEYS[0]; i++) {
        const char *p = strstr(name, KEYS[i]);
        if (p) {
            long v = digits_at(p + strlen(KEYS[i]));
            if (v >= 0) return v;
        }
    }
    long last = -1;
    for (const char *p = name; *p; p++)
        if (isdigit((unsigned char)*p) && (p == name || !isdigit((unsigned char)p[-1])))
            last = digits_at(p);
    return last;
}

static int ends_with(const char *s, const char *suf) {
    size_t n = strlen(s), k = strlen(suf);
    return n >= k && strcmp(s + n - k, suf) == 0;
}

static int is_checkpoint_dir(const char *path) {
    char *c = path_join(path, "config.json");
    FILE *f = c ? fopen(c, "rb") : NULL;
    if (f) fclose(f);
    free(c);
    return f != NULL;
}

typedef struct entry {
    char *path;
    long step;
} entry;

static int cmp_entry(const void *a, const void *b) {
    const entry *x = a, *y = b;
    /* by step; names without one after those with one; ties by name */
    if ((x->step < 0) != (y->step < 0)) return x->step < 0 ? 1 : -1;
    if (x->step != y->step) return x->step < y->step ? -1 : 1;
    return strcmp(x->path, y->path);
}

void diag_free_list(char **paths, int n) {
    for (int i = 0; paths && i < n; i++) free(paths[i]);
    free(paths);
}

int diag_list_checkpoints(const char *path, char ***paths, int *n, err *e) {
    *paths = NULL, *n = 0;
    if (!path_is_dir(path) || is_checkpoint_dir(path)) {
        if (!path_is_dir(path) && !ends_with(path, ".safetensors") &&
            !ends_with(path, ".index.json")) {
            FILE *f = fopen(path, "rb");
            if (!f) return err_set(e, "%s: no such checkpoint or folder", path);
            fclose(f);
            return err_set(e,
                           "%s: expected a checkpoint folder, a .safetensors file or a folder "
                           "of checkpoints",
                           path);
        }
        char **p = malloc(sizeof *p);
        if (!p || !(p[0] = strdup(path))) {
            free(p);
            return err_set(e, "out of memory");
        }
        *paths = p, *n = 1;
        return 0;
    }
    DIR *d = opendir(path);
    if (!d) return err_set(e, "%s: cannot read the folder", path);
    entry *ents = NULL;
    int cnt = 0, cap = 0, rc = 0;
    struct dirent *de;
    while ((de = readdir(d))) {
        if (de->d_name[0] == '.') continue;
        char *sub = path_join(path, de->d_name);
        if (!sub) {
            rc = err_set(e, "out of memory");
            break;
        }
        if (!path_is_dir(sub) || !is_checkpoint_dir(sub)) {
            free(sub);
            continue;
        }
        if (cnt == cap) {
            int nc = cap ? cap * 2 : 16;
            entry *ne = realloc(ents, (size_t)nc * sizeof *ne);
            if (!ne) {
                free(sub);
                rc = err_set(e, "out of memory");
                break;
            }
            ents = ne, cap = nc;
        }
        ents[cnt].path = sub, ents[cnt].step = diag_step_of(sub);
        cnt++;
    }
    closedir(d);
    if (!rc && cnt == 0)
        rc = err_set(e, "%s: no checkpoints in this folder (sub-folders with a config.json)", path);
    char **p = rc ? NULL : malloc((size_t)cnt * sizeof *p);
    if (!rc && !p) rc = err_set(e, "out of memory");
    if (!rc) {
        qsort(ents, (size_t)cnt, sizeof *ents, cmp_entry);
        for (int i = 0; i < cnt; i++) p[i] = ents[i].path;
        *paths = p, *n = cnt;
    } else {
        for (int i = 0; i < cnt; i++) free(ents[i].path);
    }
    free(ents);
    return rc;
}

/* ---- loading with non-finite weights ---- */

/* The layer in a tensor name ("model.layers.3.attn.k_proj.weight" -> 3), or -1. */
static int layer_of(const char *name) {
    const char *p = strstr(name, ".layers.");
    return p ? (int)digits_at(p + 8) : -1;
}

/* The core head element i of a tensor belongs to, or -1: rows of the input projections (and
 * per-head vectors, convolutions) split evenly over the heads; columns of the output projection.
 * Packed projections (Mamba2's in_proj) and the MLP and norms have no head. */
static int head_of(const model *m, const char *name, int ndim, const int64_t *shape, int64_t i) {
    int l = layer_of(name);
    if (l < 0 || l >= m->c.layers || ndim < 1) return -1;
    int64_t H = m->layers[l].mc.H;
    if (strstr(name, "mlp.") || strstr(name, "norm") || strstr(name, "in_proj")) return -1;
    int64_t inner = 1;
    for (int d = 1; d < ndim; d++) inner *= shape[d];
    if (strstr(name, "o_proj") || strstr(name, "out_proj")) {
        if (ndim != 2 || shape[1] % H) return -1;
        return (int)((i % shape[1]) / (shape[1] / H));
    }
    if (shape[0] % H) return -1;
    return (int)((i / inner) / (shape[0] / H));
}

/* Config and weights paths of a checkpoint, as model_load finds them. */
static int resolve(const char *path, char **cfg, char **w, err *e) {
    *cfg = *w = NULL;
    if (path_is_dir(path)) {
        *cfg = path_join(path, "config.json");
        *w = path_join(path, "model.safetensors");
        if (!*cfg || !*w) return err_set(e, "out of memory");
        FILE *f = fopen(*w, "rb");
        if (f) {
            fclose(f);
            return 0;
        }
        free(*w);
        if (!(*w = path_join(path, "model.safetensors.index.json"))) return err_set(e, "oom");
        if (!(f = fopen(*w, "rb")))
            return err_set(e, "%s: no model.safetensors or model.safetensors.index.json", path);
        fclose(f);
        return 0;
    }
    if (!ends_with(path, ".safetensors") && !ends_with(path, ".index.json"))
        return err_set(e, "%s: expected a checkpoint folder or a .safetensors file", path);
    *cfg = path_sibling(path, "config.json");
    *w = strdup(path);
    return *cfg && *w ? 0 : err_set(e, "out of memory");
}

/* Reports one tensor's non-finite values as a finding. */
static void report_tensor(diag_ckpt *ck, const model *m, const tensor *t, const float *v,
                          int64_t n) {
    int64_t nan = 0, inf = 0, first = -1;
    int heads[8], nh = 0, more = 0;
    for (int64_t i = 0; i < n; i++) {
        if (isfinite(v[i])) continue;
        nan += isnan(v[i]), inf += isinf(v[i]);
        if (first < 0) first = i;
        int h = head_of(m, t->name, t->ndim, t->shape, i), seen = 0;
        for (int k = 0; k < nh; k++) seen |= heads[k] == h;
        if (!seen && h >= 0) {
            if (nh < 8)
                heads[nh++] = h;
            else
                more = 1;
        }
    }
    int l = layer_of(t->name);
    char where[160] = "", hs[96] = "";
    for (int k = 0; k < nh; k++) {
        size_t u = strlen(hs);
        snprintf(hs + u, sizeof hs - u, "%s%d", k ? ", " : "", heads[k]);
    }
    if (l >= 0 && nh > 0)
        snprintf(where, sizeof where, ": layer %d, head%s %s%s", l, nh > 1 ? "s" : "", hs,
                 more ? ", ..." : "");
    else if (l >= 0)
        snprintf(where, sizeof where, ": layer %d", l);
    char idx[64] = "";
    if (t->ndim == 2)
        snprintf(idx, sizeof idx, "[%lld, %lld]", (long long)(first / t->shape[1]),
                 (long long)(first % t->shape[1]));
    else
        snprintf(idx, sizeof idx, "%lld", (long long)first);
    diag_add_finding(ck, "nonfinite_weight", l, nh > 0 ? heads[0] : -1, -1, (double)(nan + inf),
                     "tensor '%s' holds %lld NaN and %lld Inf values (first at element %s%s)",
                     t->name, (long long)nan, (long long)inf, idx, where);
}

int diag_load(model **out, const char *path, diag_ckpt *ck, err *e) {
    *out = NULL;
    char *cfg = NULL, *w = NULL, *text = NULL;
    st_file *f = NULL;
    tensor *patched = NULL; /* the file's tensor list with non-finite tensors replaced */
    float **orig = NULL;    /* [f->n]: float32 values of the replaced tensors, else NULL */
    int rc = -1, nbad = 0;
    if (resolve(path, &cfg, &w, e)) goto done;
    size_t tn;
    if (file_read_all(cfg, 16u << 20, &text, &tn, e)) goto done;
    if (strlen(text) != tn) {
        err_set(e, "%s: a NUL byte at byte %zu", cfg, strlen(text));
        goto done;
    }
    if (ends_with(w, ".index.json") ? st_open_index(&f, w, e) : st_open(&f, w, e)) goto done;
    orig = calloc((size_t)(f->n ? f->n : 1), sizeof *orig);
    patched = malloc((size_t)(f->n ? f->n : 1) * sizeof *patched);
    if (!orig || !patched) {
        err_set(e, "out of memory");
        goto done;
    }
    for (int i = 0; i < f->n; i++) {
        const tensor *t = &f->tensors[i];
        patched[i] = *t;
        if (!dtype_is_float(t->dtype)) continue; /* model_from_checkpoint names it */
        int64_t n = tensor_numel(t);
        float *v = malloc((size_t)(n > 0 ? n : 1) * sizeof *v);
        if (!v) {
            err_set(e, "out of memory");
            goto done;
        }
        if (tensor_read_f32_file(t, v, e)) {
            free(v);
            goto done;
        }
        int64_t j = 0;
        while (j < n && isfinite(v[j])) j++;
        if (j == n) {
            free(v);
            continue;
        }
        /* a float32 copy with zeros where the file has NaN / Inf, for the loader */
        tensor *z = tensor_new(t->name, DT_F32, t->ndim, t->shape, e);
        if (!z) {
            free(v);
            goto done;
        }
        float *zd = z->data;
        for (int64_t k = 0; k < n; k++) zd[k] = isfinite(v[k]) ? v[k] : 0.0f;
        patched[i].dtype = DT_F32, patched[i].data = z->data, patched[i].nbytes = z->nbytes;
        z->data = NULL, z->owns_data = 0;
        tensor_free(z);
        patched[i].owns_data = 1; /* freed below */
        orig[i] = v;
        nbad++;
    }
    {
        st_file pf = *f;
        pf.tensors = patched;
        if (model_from_checkpoint(out, text, &pf, cfg, e)) goto done;
    }
    snprintf((*out)->source, sizeof(*out)->source, "%s", path);
    /* the non-finite values back into the model's weights, and a finding for each tensor */
    for (int i = 0; i < f->n && nbad; i++) {
        if (!orig[i]) continue;
        const tensor *t = &f->tensors[i];
        int64_t n = tensor_numel(t);
        wslot *s = model_find_slot(*out, t->name);
        if (s && s->data)
            for (int64_t k = 0; k < n; k++)
                if (!isfinite(orig[i][k])) s->data[k] = orig[i][k];
        if (ck) report_tensor(ck, *out, t, orig[i], n);
    }
    rc = 0;
done:
    if (orig)
        for (int i = 0; f && i < f->n; i++) {
            if (orig[i]) free(patched[i].data);
            free(orig[i]);
        }
    free(orig), free(patched);
    st_close(f);
    free(cfg), free(w), free(text);
    return rc;
}
