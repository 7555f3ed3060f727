/* load.c: config.json + model.safetensors -> model.
 *
 * The config decides every tensor the model must have (the slot list, model.c). A checkpoint is
 * accepted only when it holds exactly those tensors, each with the implied shape, a float dtype
 * (F32, BF16, F16, F64: converted to float32) and finite values. Every refusal is one line that
 * names the file and the tensor or config key. */
#include <errno.h>
#include <limits.h>
#include <math.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "../core/busguard.h"
#include "../core/config.h"
#include "../core/fileio.h"
#include "../core/parallel.h"
#include "../core/safetensors.h"
#include "../core/sha256.h"
#include "blocks.h"
#include "family.h"
#include "hybrid.h"
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
    if (hybrid_parse(m, &cfg, e)) goto done;
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

/* ---- conversion to float32, over all cores ----
 *
 * Every tensor is cut into chunks of CONV_GRAIN elements; each chunk is converted (F32 copied,
 * BF16 and F16 widened exactly, F64 rounded) and scanned for NaN / Inf, and the first bad index
 * of each tensor is kept, so the refusal names the same element as a sequential pass would. */

#define CONV_GRAIN ((int64_t)1 << 16)

static float g_f16[65536];
static pthread_once_t g_f16_once = PTHREAD_ONCE_INIT;

static void f16_table(void) {
    for (uint32_t h = 0; h < 65536; h++) g_f16[h] = f16_to_f32((uint16_t)h);
}

/* Bit 31 set when some exponent field e (bits 23..30 of float32 bits) is all ones (NaN / Inf):
 * (e << 23) + (1 << 23) carries into bit 31 only then. Fixed-length inner loops vectorise. */
#define NONFINITE_BITS(u) (((u)&0x7f800000u) + 0x00800000u)

/* dst[0, hi - lo) = elements [lo, hi) of t as float32; the first non-finite index, or -1. */
static int64_t convert_range(const tensor *t, float *dst, int64_t lo, int64_t hi) {
    const unsigned char *p = t->data;
    int64_t n = hi - lo, i = 0;
    uint32_t bad = 0, *u = (uint32_t *)dst;
    switch (t->dtype) {
    case DT_F32:
        memcpy(dst, p + (size_t)lo * 4, (size_t)n * 4);
        for (; i + 64 <= n; i += 64)
            for (int k = 0; k < 64; k++) bad |= NONFINITE_BITS(u[i + k]);
        for (; i < n; i++) bad |= NONFINITE_BITS(u[i]);
        break;
    case DT_BF16: {
        const unsigned char *q = p + (size_t)lo * 2;
        for (; i + 64 <= n; i += 64) {
            uint16_t h[64];
            memcpy(h, q + 2 * i, sizeof h);
            for (int k = 0; k < 64; k++) {
                u[i + k] = (uint32_t)h[k] << 16;
                bad |= NONFINITE_BITS((uint32_t)h[k] << 16);
            }
        }
        for (; i < n; i++) {
            uint16_t h;
            memcpy(&h, q + 2 * i, 2);
            u[i] = (uint32_t)h << 16;
            bad |= NONFINITE_BITS(u[i]);
        }
        break;
    }
    case DT_F16: {
        const unsigned char *q = p + (size_t)lo * 2;
        pthread_once(&g_f16_once, f16_table);
        for (; i < n; i++) {
            uint16_t h;
            memcpy(&h, q + 2 * i, 2);
            dst[i] = g_f16[h];
            bad |= NONFINITE_BITS(u[i]);
        }
        break;
    }
    default: { /* F64 and anything else tensor_read_f32 knows: through a view of the range */
        tensor v = *t;
        size_t es = dtype_size(t->dtype);
        v.ndim = 1, v.shape[0] = n;
        v.data = (unsigned char *)t->data + (size_t)lo * es;
        v.nbytes = (size_t)n * es;
        tensor_read_f32(&v, dst);
        for (; i < n; i++) bad |= NONFINITE_BITS(u[i]);
        break;
    }
    }
    if (!(bad & 0x80000000u)) return -1;
    for (i = 0; i < n; i++)
        if (!isfinite(dst[i])) return lo + i;
    return -1;
}

typedef struct conv_job {
    const tensor *const *src; /* [n] */
    float **dst;              /* [n] */
    int64_t *first;           /* [n + 1]: the first chunk of each tensor */
    _Atomic int64_t *bad;     /* [n]: the first non-finite index, INT64_MAX when none */
    int n;
    _Atomic int lost; /* a SIGBUS cut a range short: the file shrank while it was read */
} conv_job;

typedef struct conv_range {
    conv_job *j;
    int64_t lo, hi;
} conv_range;

static void convert_range_chunks(void *ctx);

/* the mapped file may shrink under us (another program truncating it): each worker's range is
 * read under core/busguard.h, and a SIGBUS marks the load lost instead of ending the session */
static void convert_chunks(void *ctx, int64_t lo, int64_t hi) {
    conv_range r = {ctx, lo, hi};
    if (busguard_run(convert_range_chunks, &r)) atomic_store(&((conv_job *)ctx)->lost, 1);
}

static void convert_range_chunks(void *ctx) {
    const conv_range *r = ctx;
    conv_job *j = r->j;
    for (int64_t c = r->lo; c < r->hi; c++) {
        int a = 0, z = j->n; /* the tensor with first[a] <= c < first[a + 1] */
        while (z - a > 1) {
            int mid = (a + z) / 2;
            if (j->first[mid] <= c)
                a = mid;
            else
                z = mid;
        }
        int64_t e0 = (c - j->first[a]) * CONV_GRAIN, n = tensor_numel(j->src[a]);
        int64_t e1 = n - e0 < CONV_GRAIN ? n : e0 + CONV_GRAIN;
        int64_t b = convert_range(j->src[a], j->dst[a] + e0, e0, e1);
        if (b < 0) continue;
        int64_t cur = atomic_load(&j->bad[a]);
        while (b < cur && !atomic_compare_exchange_weak(&j->bad[a], &cur, b)) {
        }
    }
}

/* Converts and checks n tensors into new float32 arrays dst[i] (all or nothing: on failure every
 * dst[i] is NULL). One line naming the file, the tensor and the element on refusal. */
static int read_all_checked(const tensor *const *src, float **dst, int n, const char *file,
                            err *e) {
    int64_t *first = malloc(((size_t)n + 1) * sizeof *first);
    _Atomic int64_t *bad = malloc(((size_t)n + 1) * sizeof *bad);
    int rc = -1;
    for (int i = 0; i < n; i++) dst[i] = NULL;
    if (!first || !bad) {
        err_set(e, "%s: out of memory", file);
        goto done;
    }
    first[0] = 0;
    for (int i = 0; i < n; i++) {
        int64_t k = tensor_numel(src[i]);
        first[i + 1] = first[i] + (k + CONV_GRAIN - 1) / CONV_GRAIN;
        atomic_init(&bad[i], INT64_MAX);
        if (!(dst[i] = malloc((size_t)(k > 0 ? k : 1) * sizeof(float)))) {
            err_set(e, "%s: tensor '%s': out of memory", file, src[i]->name);
            goto done;
        }
    }
    conv_job j = {src, dst, first, bad, n, 0};
    par_for(first[n], 1, convert_chunks, &j);
    if (atomic_load(&j.lost)) {
        err_set(e, "%s: the file changed while it was read (truncated?); nothing was loaded", file);
        goto done;
    }
    for (int i = 0; i < n; i++) {
        int64_t b = atomic_load(&bad[i]);
        if (b == INT64_MAX) continue;
        err_set(e, "%s: tensor '%s': %s at element %lld", file, src[i]->name,
                isnan(dst[i][b]) ? "NaN" : "Inf", (long long)b);
        goto done;
    }
    rc = 0;
done:
    if (rc)
        for (int i = 0; i < n; i++) free(dst[i]), dst[i] = NULL;
    free(first);
    free(bad);
    return rc;
}

/* Remembers the file f was mapped from (not a checkpoint parsed from memory) for the digest. */
static void note_weights_file(model *m, const st_file *f) {
    struct stat st;
    m->weights_path[0] = '\0', m->sha256[0] = '\0';
    if (!f->path || f->nmaps < 1 || !f->maps[0].is_mmap || stat(f->path, &st) != 0) return;
    char *abs = realpath(f->path, NULL);
    const char *p = abs ? abs : f->path;
    if (strlen(p) < sizeof m->weights_path) {
        memcpy(m->weights_path, p, strlen(p) + 1);
        m->weights_size = (int64_t)st.st_size;
        m->weights_mtime_ns = (int64_t)st.st_mtim.tv_sec * 1000000000 + st.st_mtim.tv_nsec;
    }
    free(abs);
}

const char *model_weights_sha256(model *m, err *e) {
    if (!m->weights_path[0]) return NULL;
    if (m->sha256[0]) return m->sha256;
    struct stat st;
    if (stat(m->weights_path, &st) != 0) {
        err_set(e, "%s: %s", m->weights_path, strerror(errno));
        return NULL;
    }
    if ((int64_t)st.st_size != m->weights_size ||
        (int64_t)st.st_mtim.tv_sec * 1000000000 + st.st_mtim.tv_nsec != m->weights_mtime_ns) {
        err_set(e, "%s: changed since the model was loaded; no digest", m->weights_path);
        return NULL;
    }
    char hex[65];
    if (sha256_file(m->weights_path, hex, e)) return NULL;
    memcpy(m->sha256, hex, sizeof hex);
    return m->sha256;
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
    {
        const tensor **src = malloc((size_t)m->nslots * sizeof *src);
        float **dst = malloc((size_t)m->nslots * sizeof *dst);
        int bad = !src || !dst;
        if (bad) {
            err_set(e, "%s: out of memory", file);
        } else {
            for (int i = 0; i < m->nslots; i++) src[i] = st_find(f, m->slots[i].name);
            bad = read_all_checked(src, dst, m->nslots, file, e) != 0;
            for (int i = 0; i < m->nslots && !bad; i++) m->slots[i].data = dst[i];
        }
        free(src), free(dst);
        if (bad) goto fail;
    }
    if (tied_head) {
        const wslot *emb = &m->slots[0];
        if (!shape_equal(tied_head, emb) || !dtype_is_float(tied_head->dtype)) {
            err_set(e, "%s: tensor 'lm_head.weight': shape %s, but tie_word_embeddings implies %s",
                    file, shape_str(tied_head->ndim, tied_head->shape, a, sizeof a),
                    shape_str(emb->ndim, emb->shape, b, sizeof b));
            goto fail;
        }
        float *h;
        if (read_all_checked(&tied_head, &h, 1, file, e)) goto fail;
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
    note_weights_file(m, f);
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
        /* stat, not open: a FIFO there must not block (the reader refuses it in words); a file
         * that is there but cannot be reached is named with the reason, not as missing */
        struct stat sb;
        if (stat(w_path, &sb) != 0) {
            if (errno != ENOENT) {
                err_set(e, "%s: %s", w_path, strerror(errno));
                goto done;
            }
            free(w_path);
            if (!(w_path = path_join(path, "model.safetensors.index.json"))) goto oom;
            if (stat(w_path, &sb) != 0) {
                if (errno != ENOENT)
                    err_set(e, "%s: %s", w_path, strerror(errno));
                else
                    err_set(e, "%s: no model.safetensors or model.safetensors.index.json", path);
                goto done;
            }
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
    size_t tn;
    if (file_read_all(cfg_path, 16u << 20, &text, &tn, e)) goto done;
    if (strlen(text) != tn) { /* a NUL would end the text there, and the rest go unread */
        err_set(e, "%s: a NUL byte at byte %zu", cfg_path, strlen(text));
        goto done;
    }
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
