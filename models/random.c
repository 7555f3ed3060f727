/* random.c: `model random MIXER [key=value ...]`: a config.json written in fla's style for the
 * mixer's model type, then every declared tensor drawn from one seeded stream, in declaration
 * order, with the initialisation the spec gives (delta-family.md §2.2: normal(0, 0.02) for linear
 * and conv weights and embeddings, ones for norms, A = U(0, 16) and A_log = log A, dt_bias the
 * inverse softplus of a log-uniform dt in [1e-3, 0.1]; Mamba2 draws A from A_init_range (1, 16);
 * Kalman's raw parameters as kalman.md §6.2). The same seed gives the same model, bit for bit. */
#include <cjson/cJSON.h>
#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "family.h"
#include "internal.h"

/* ---- config helpers (family.h) ---- */

void rc_num(cJSON *cfg, const char *key, double v) {
    cJSON_DeleteItemFromObjectCaseSensitive(cfg, key);
    cJSON_AddNumberToObject(cfg, key, v);
}

void rc_bool(cJSON *cfg, const char *key, int v) {
    cJSON_DeleteItemFromObjectCaseSensitive(cfg, key);
    cJSON_AddBoolToObject(cfg, key, v);
}

void rc_str(cJSON *cfg, const char *key, const char *v) {
    cJSON_DeleteItemFromObjectCaseSensitive(cfg, key);
    cJSON_AddStringToObject(cfg, key, v);
}

double rc_ratio(long want, long hidden) {
    double r = (double)want / (double)hidden;
    for (int i = 0; i < 8 && py_int_mul(hidden, r) < want; i++) r = nextafter(r, INFINITY);
    return r;
}

/* ---- the random stream: splitmix64, normals by Box-Muller ---- */

typedef struct rng {
    uint64_t s;
} rng;

static uint64_t rng_next(rng *r) {
    uint64_t z = (r->s += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

/* uniform in (0, 1]: never 0, so logs stay finite */
static double rng_unit(rng *r) {
    return (double)((rng_next(r) >> 11) + 1) * (1.0 / 9007199254740992.0);
}

static double rng_normal(rng *r) {
    double u = rng_unit(r), v = rng_unit(r);
    return sqrt(-2.0 * log(u)) * cos(6.283185307179586 * v);
}

static void init_slot(wslot *s, rng *r) {
    int64_t n = wslot_numel(s);
    for (int64_t i = 0; i < n; i++) {
        double x = 0;
        switch (s->init) {
        case INIT_NORMAL:
            x = rng_normal(r) * s->ia;
            break;
        case INIT_ONES:
            x = 1;
            break;
        case INIT_ZEROS:
            x = 0;
            break;
        case INIT_CONST:
            x = s->ia;
            break;
        case INIT_UNIFORM:
            x = s->ia + (s->ib - s->ia) * rng_unit(r);
            break;
        case INIT_A_LOG:
            x = log(s->ia + (s->ib - s->ia) * rng_unit(r));
            break;
        case INIT_DT_BIAS: {
            double lo = log(s->ia), hi = log(s->ib);
            double dt = exp(lo + (hi - lo) * rng_unit(r));
            if (dt < 1e-4) dt = 1e-4;
            x = dt + log(-expm1(-dt)); /* softplus^-1 */
            break;
        }
        }
        s->data[i] = (float)x;
    }
}

/* ---- config.json text as Hugging Face writes it (2-space indent, sorted keys) ---- */

typedef struct sbuf {
    char *p;
    size_t n, cap;
    int oom;
} sbuf;

static void sb_put(sbuf *b, const char *s, size_t n) {
    if (b->oom) return;
    if (b->n + n + 1 > b->cap) {
        size_t nc = (b->cap ? b->cap * 2 : 1024) + n;
        char *np = realloc(b->p, nc);
        if (!np) {
            b->oom = 1;
            return;
        }
        b->p = np, b->cap = nc;
    }
    memcpy(b->p + b->n, s, n);
    b->n += n;
    b->p[b->n] = '\0';
}

static void sb_str(sbuf *b, const char *s) {
    sb_put(b, s, strlen(s));
}

static void sb_quoted(sbuf *b, const char *s) {
    sb_put(b, "\"", 1);
    for (; *s; s++) {
        char esc[8];
        if (*s == '"' || *s == '\\')
            esc[0] = '\\', esc[1] = *s, sb_put(b, esc, 2);
        else if ((unsigned char)*s < 32)
            snprintf(esc, sizeof esc, "\\u%04x", *s), sb_str(b, esc);
        else
            sb_put(b, s, 1);
    }
    sb_put(b, "\"", 1);
}

/* the shortest %g that reads back as the same double */
static void sb_number(sbuf *b, double v) {
    char buf[40];
    if (v == floor(v) && fabs(v) < 1e15) {
        snprintf(buf, sizeof buf, "%.0f", v);
    } else {
        for (int prec = 15; prec <= 17; prec++) {
            snprintf(buf, sizeof buf, "%.*g", prec, v);
            if (strtod(buf, NULL) == v) break;
        }
    }
    sb_str(b, buf);
}

static int key_cmp(const void *a, const void *b) {
    return strcmp((*(const cJSON *const *)a)->string, (*(const cJSON *const *)b)->string);
}

static void sb_json(sbuf *b, const cJSON *j, int depth) {
    char ind[130];
    int n = 2 * (depth + 1) < 128 ? 2 * (depth + 1) : 128;
    memset(ind, ' ', (size_t)n), ind[n] = '\0';
    if (cJSON_IsObject(j) || cJSON_IsArray(j)) {
        int obj = cJSON_IsObject(j), cnt = cJSON_GetArraySize(j);
        if (cnt == 0) {
            sb_str(b, obj ? "{}" : "[]");
            return;
        }
        const cJSON **items = malloc((size_t)cnt * sizeof *items);
        if (!items) {
            b->oom = 1;
            return;
        }
        int k = 0;
        for (const cJSON *c = j->child; c; c = c->next) items[k++] = c;
        if (obj) qsort(items, (size_t)cnt, sizeof *items, key_cmp);
        sb_str(b, obj ? "{\n" : "[\n");
        for (int i = 0; i < cnt; i++) {
            sb_str(b, ind);
            if (obj) sb_quoted(b, items[i]->string), sb_str(b, ": ");
            sb_json(b, items[i], depth + 1);
            sb_str(b, i + 1 < cnt ? ",\n" : "\n");
        }
        free(items);
        sb_put(b, ind, (size_t)n - 2);
        sb_str(b, obj ? "}" : "]");
    } else if (cJSON_IsString(j)) {
        sb_quoted(b, j->valuestring);
    } else if (cJSON_IsNumber(j)) {
        sb_number(b, j->valuedouble);
    } else if (cJSON_IsBool(j)) {
        sb_str(b, cJSON_IsTrue(j) ? "true" : "false");
    } else {
        sb_str(b, "null");
    }
}

static char *json_pretty(const cJSON *j) {
    sbuf b = {0};
    sb_json(&b, j, 0);
    sb_str(&b, "\n");
    if (b.oom) {
        free(b.p);
        return NULL;
    }
    return b.p;
}

/* key=value from the user as a JSON value: true/false/null, a number, else a string */
static void put_value(cJSON *cfg, const char *key, const char *val) {
    cJSON_DeleteItemFromObjectCaseSensitive(cfg, key);
    if (!strcmp(val, "true") || !strcmp(val, "false")) {
        cJSON_AddBoolToObject(cfg, key, val[0] == 't');
        return;
    }
    if (!strcmp(val, "null")) {
        cJSON_AddNullToObject(cfg, key);
        return;
    }
    char *end;
    errno = 0;
    double d = strtod(val, &end);
    if (*val && !*end && !errno && isfinite(d))
        cJSON_AddNumberToObject(cfg, key, d);
    else
        cJSON_AddStringToObject(cfg, key, val);
}

int model_random(model **out, const char *mixer, opts *o, err *e) {
    *out = NULL;
    model_kind k;
    if (model_kind_of_mixer(mixer, &k)) {
        char list[200];
        size_t n = 0;
        for (int i = 0; i < MK_COUNT; i++)
            n += (size_t)snprintf(list + n, sizeof list - n, "%s%s", i ? ", " : "",
                                  model_kind_mixer((model_kind)i));
        return err_set(e, "unknown mixer '%.40s' (known: %s)", mixer, list);
    }
    long layers, hidden, heads, head_dim, vocab, seed;
    if (opts_int(o, "layers", 2, &layers, e) || opts_int(o, "hidden", 0, &hidden, e) ||
        opts_int(o, "heads", 0, &heads, e) || opts_int(o, "head_dim", 0, &head_dim, e) ||
        opts_int(o, "vocab", 256, &vocab, e) || opts_int(o, "seed", 0, &seed, e))
        return -1;
    int attn = k == MK_TRANSFORMER || k == MK_PARALLAX;
    if (attn && head_dim) {
        long h = heads ? heads : 4;
        if (hidden && hidden != h * head_dim)
            return err_set(e, "hidden (%ld) must equal heads * head_dim (%ld * %ld) for attention",
                           hidden, h, head_dim);
        hidden = h * head_dim;
    }
    if (!hidden) hidden = 64;
    if (layers < 1 || layers > 1024) return err_set(e, "option 'layers': expected 1..1024");
    if (hidden < 1 || hidden > 16384) return err_set(e, "option 'hidden': expected 1..16384");
    if (heads < 0 || heads > 4096) return err_set(e, "option 'heads': expected 1..4096");
    if (head_dim < 0 || head_dim > 4096) return err_set(e, "option 'head_dim': expected 1..4096");
    if (vocab < 1 || vocab > (1 << 20)) return err_set(e, "option 'vocab': expected 1..1048576");

    cJSON *cfg = cJSON_CreateObject();
    if (!cfg) return err_set(e, "out of memory");
    rc_str(cfg, "model_type", model_kind_name(k));
    rc_num(cfg, "vocab_size", (double)vocab);
    rc_num(cfg, "hidden_size", (double)hidden);
    rc_num(cfg, "num_hidden_layers", (double)layers);
    rc_num(cfg, "norm_eps", k == MK_MAMBA2 || k == MK_KALMAN ? 1e-5 : 1e-6);
    rc_bool(cfg, "tie_word_embeddings", 0);
    if (k != MK_MAMBA2) {
        rc_num(cfg, "hidden_ratio", 4);
        cJSON_AddNullToObject(cfg, "intermediate_size");
        rc_str(cfg, "hidden_act", "swish");
    }
    rc_num(cfg, "initializer_range", 0.02);
    rc_num(cfg, "mixscope_seed", (double)seed);
    static const layer_family FAM[MK_COUNT] = {FAM_GDN,  FAM_GDN,  FAM_GDN,    FAM_GLA, FAM_MAMBA2,
                                               FAM_ATTN, FAM_ATTN, FAM_KALMAN, FAM_KATA};
    if (family_of(FAM[k])->random_config(cfg, k, (int)hidden, (int)heads, (int)head_dim, e)) {
        cJSON_Delete(cfg);
        return err_prefix(e, "model random %s", mixer);
    }
    /* every other key=value is a config.json key */
    for (int i = 0; i < o->n; i++)
        if (!o->used[i]) put_value(cfg, o->key[i], o->val[i]), o->used[i] = 1;
    char *text = json_pretty(cfg);
    cJSON_Delete(cfg);
    if (!text) return err_set(e, "out of memory");
    model *m;
    char label[160];
    snprintf(label, sizeof label, "model random %s", mixer);
    int rc = model_declare(&m, text, label, e);
    free(text);
    if (rc) return -1;
    if (model_param_count(m) > (1ll << 28)) {
        err_set(e, "model random %s: %lld parameters is too many for this lab (at most 2^28)",
                mixer, (long long)model_param_count(m));
        model_free(m);
        return -1;
    }
    rng r = {(uint64_t)seed * 0x2545F4914F6CDD1Dull + 0x1234567ull};
    for (int i = 0; i < m->nslots; i++) {
        wslot *s = &m->slots[i];
        if (!(s->data = malloc((size_t)wslot_numel(s) * sizeof(float)))) {
            err_set(e, "out of memory for %lld parameters", (long long)model_param_count(m));
            model_free(m);
            return -1;
        }
        init_slot(s, &r);
    }
    if (model_finish(m, e)) {
        model_free(m);
        return -1;
    }
    snprintf(m->source, sizeof m->source, "model random %s seed=%ld", mixer, seed);
    *out = m;
    return 0;
}
