/* random.c: `model random MIXER [key=value ...]`: a config.json written in fla's style for the
 * mixer's model type, then every declared tensor drawn from one seeded stream, in declaration
 * order, with the initialisation the spec gives (delta-family.md §2.2: normal(0, 0.02) for linear
 * and conv weights and embeddings, ones for norms, A = U(0, 16) and A_log = log A, dt_bias the
 * inverse softplus of a log-uniform dt in [1e-3, 0.1]; Mamba2 draws A from A_init_range (1, 16);
 * Kalman's raw parameters as kalman.md §6.2). The same seed gives the same model, bit for bit. */
#include <cjson/cJSON.h>
#include <errno.h>
#include <limits.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "../core/names.h"
#include "../core/parallel.h"
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

/* ---- the random numbers: counter-based, so any thread can draw any element ----
 *
 * Every element is a function of (seed, tensor name, element index) alone: a key is hashed from
 * the seed and the name (splitmix64's finaliser over FNV-1a), and element i draws from a keyed
 * hash of its own index. The order in which threads fill a tensor cannot change a bit.
 *
 * Normal tensors come in blocks of 16 elements: pair p = 8 b + l (lane l of block b) gives two
 * 32-bit words, each lowbias32 (Wellons' 32-bit mixer) twice with key words xored in between,
 * and Box-Muller turns the words into elements 16 b + l (r cos phi) and 16 b + 8 + l (r sin phi):
 * u1 = odd 31-bit integer / 2^31 in (0, 1], r = sqrt(-2 ln u1), phi = 2 pi u2 with u2 from 26 bits.
 * The logarithm, square root, sine and cosine are polynomial and Newton steps written on GCC/clang
 * vector types (8 lanes), correct to float rounding; so r and phi are those of exact Box-Muller up
 * to ~1e-7 relative, and x = sigma r cos phi is N(0, sigma^2) (|x| < 6.6 sigma; the mass beyond is
 * 4e-11). The same code runs as SSE2 or, where the CPU has it, AVX2 (no FMA in either, so both give
 * the same bits). The other inits draw doubles from splitmix64 of (key, index) with libm. */

static uint64_t mix64(uint64_t z) {
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

static uint64_t slot_key(uint64_t seed, const char *name) {
    uint64_t h = 0xcbf29ce484222325ull; /* FNV-1a */
    for (const unsigned char *c = (const unsigned char *)name; *c; c++)
        h = (h ^ *c) * 0x100000001b3ull;
    return mix64(mix64(seed * 0x2545F4914F6CDD1Dull + 0x1234567ull) ^ h);
}

/* uniform in (0, 1] for element i: never 0, so logs stay finite */
static double unit_at(uint64_t key, int64_t i) {
    uint64_t z = mix64(key + ((uint64_t)i + 1) * 0x9E3779B97F4A7C15ull);
    return (double)((z >> 11) + 1) * (1.0 / 9007199254740992.0);
}

typedef uint32_t v8u __attribute__((vector_size(32)));
typedef int32_t v8i __attribute__((vector_size(32)));
typedef float v8f __attribute__((vector_size(32)));

#define NB 16 /* elements per block */

/* lowbias32 in place on a v8u */
#define LOWBIAS32(x)                                                                               \
    ((x) ^= (x) >> 16, (x) *= 0x21f0aaadu, (x) ^= (x) >> 15, (x) *= 0x735a2d97u, (x) ^= (x) >> 15)

/* Block b of a normal tensor with keys k[4] (for b's 2^32-pair span), times sigma, into out[16]. */
static inline __attribute__((always_inline)) void normal_block(float *out, int64_t b,
                                                               const uint32_t k[4], float sigma) {
    const v8u lane = {0, 1, 2, 3, 4, 5, 6, 7};
    v8u c = lane + (uint32_t)((uint64_t)b * 8);
    v8u h1 = c ^ k[0], h2 = c ^ k[2];
    LOWBIAS32(h1), LOWBIAS32(h2);
    h1 ^= k[1], h2 ^= k[3];
    LOWBIAS32(h1), LOWBIAS32(h2);
    /* r = sqrt(-2 ln u1) */
    v8f u1 = __builtin_convertvector((v8i)((h1 >> 1) | 1u), v8f) * (1.0f / 2147483648.0f);
    v8i bits = (v8i)u1;
    v8i ex = (bits >> 23) - 127;
    v8f m = (v8f)((bits & 0x7fffff) | 0x3f800000); /* [1, 2) */
    v8i big = m > 1.41421356f;                     /* -1 where m > sqrt 2: halve m */
    m = (v8f)((v8i)m - (big & 0x00800000));
    ex -= big;
    v8f s = (m - 1.0f) / (m + 1.0f), s2 = s * s; /* ln m = 2 atanh s, |s| < 0.172 */
    v8f lnm =
        2.0f * s * (1.0f + s2 * (1.0f / 3 + s2 * (1.0f / 5 + s2 * (1.0f / 7 + s2 * (1.0f / 9)))));
    v8f t = -2.0f * (__builtin_convertvector(ex, v8f) * 0.69314718f + lnm);
    v8i tb = (v8i)t;
    t = (v8f)(tb & ~(tb >> 31)); /* -0 and below: 0 */
    t += 1e-30f;                 /* keeps the Newton steps finite at t = 0 */
    v8f y = (v8f)(0x5f3759df - ((v8i)t >> 1));
    for (int it = 0; it < 2; it++) y = y * (1.5f - 0.5f * t * y * y); /* 3e-3 -> 5e-10 */
    v8f r = t * y * sigma;
    /* phi = (q + f) pi / 2: quadrant q from the top two bits, f in [0, 1) from the next 24 */
    v8u q = h2 >> 30;
    v8f th = __builtin_convertvector((v8i)((h2 >> 6) & 0xffffffu), v8f) *
             (1.57079632679489662f / 16777216.0f);
    v8f t2 = th * th;
    v8f sn =
        th *
        (1.0f + t2 * (-1.0f / 6 +
                      t2 * (1.0f / 120 +
                            t2 * (-1.0f / 5040 + t2 * (1.0f / 362880 + t2 * (-1.0f / 39916800))))));
    v8f cs =
        1.0f +
        t2 * (-0.5f +
              t2 * (1.0f / 24 +
                    t2 * (-1.0f / 720 +
                          t2 * (1.0f / 40320 + t2 * (-1.0f / 3628800 + t2 * (1.0f / 479001600))))));
    /* rotate by q quarter turns: cos phi = c, -s, -c, s; sin phi = s, c, -s, -c */
    v8i odd = -(v8i)(q & 1u);
    v8i ci = ((v8i)cs & ~odd) | ((v8i)sn & odd), si = ((v8i)sn & ~odd) | ((v8i)cs & odd);
    ci ^= (v8i)(((q ^ (q >> 1)) & 1u) << 31);
    si ^= (v8i)((q >> 1) << 31);
    v8f z0 = r * (v8f)ci, z1 = r * (v8f)si;
    memcpy(out, &z0, sizeof z0);
    memcpy(out + 8, &z1, sizeof z1);
}

/* The key words of pairs [2^32 hi, 2^32 (hi + 1)) of a tensor. */
static void block_keys(uint64_t key, uint64_t hi, uint32_t k[4]) {
    uint64_t a = mix64(key + hi * 0x9E3779B97F4A7C15ull), b = mix64(a ^ 0xD1B54A32D192ED03ull);
    k[0] = (uint32_t)a, k[1] = (uint32_t)(a >> 32), k[2] = (uint32_t)b, k[3] = (uint32_t)(b >> 32);
}

/* Elements [lo, hi) of a normal tensor into dst[lo, hi). */
static inline __attribute__((always_inline)) void
normal_range_body(float *dst, int64_t lo, int64_t hi, uint64_t key, float sigma) {
    uint32_t k[4];
    uint64_t span = UINT64_MAX;
    for (int64_t b = lo / NB; b * NB < hi; b++) {
        if ((uint64_t)b >> 29 != span) block_keys(key, span = (uint64_t)b >> 29, k);
        int64_t a = b * NB, z = a + NB;
        if (a >= lo && z <= hi) {
            normal_block(dst + a, b, k, sigma);
        } else {
            float tmp[NB];
            normal_block(tmp, b, k, sigma);
            for (int64_t i = a > lo ? a : lo; i < (z < hi ? z : hi); i++) dst[i] = tmp[i - a];
        }
    }
}

static void normal_range_generic(float *dst, int64_t lo, int64_t hi, uint64_t key, float sigma) {
    normal_range_body(dst, lo, hi, key, sigma);
}

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
__attribute__((target("avx2"))) static void normal_range_avx2(float *dst, int64_t lo, int64_t hi,
                                                              uint64_t key, float sigma) {
    normal_range_body(dst, lo, hi, key, sigma);
}
#define HAVE_AVX2_PATH 1
#endif

static void normal_range(float *dst, int64_t lo, int64_t hi, uint64_t key, float sigma) {
#ifdef HAVE_AVX2_PATH
    if (__builtin_cpu_supports("avx2") && !getenv("MIXSCOPE_NO_AVX2")) {
        normal_range_avx2(dst, lo, hi, key, sigma);
        return;
    }
#endif
    normal_range_generic(dst, lo, hi, key, sigma);
}

typedef struct normal_job {
    float *dst;
    uint64_t key;
    float sigma;
} normal_job;

static void normal_chunk(void *ctx, int64_t lo, int64_t hi) {
    const normal_job *j = ctx;
    normal_range(j->dst, lo, hi, j->key, j->sigma);
}

void model_random_normal(float *dst, int64_t n, uint64_t seed, const char *name, float sigma) {
    normal_job j = {dst, slot_key(seed, name), sigma};
    par_for(n, 1 << 16, normal_chunk, &j);
}

/* Elements [lo, hi) of slot s (key: its seed and name). */
static void init_range(wslot *s, uint64_t key, int64_t lo, int64_t hi) {
    if (s->init == INIT_NORMAL) {
        normal_range(s->data, lo, hi, key, s->ia);
        return;
    }
    for (int64_t i = lo; i < hi; i++) {
        double x = 0;
        switch (s->init) {
        case INIT_NORMAL:
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
            x = s->ia + (s->ib - s->ia) * unit_at(key, i);
            break;
        case INIT_A_LOG:
            x = log(s->ia + (s->ib - s->ia) * unit_at(key, i));
            break;
        case INIT_DT_BIAS: {
            double lo_ = log(s->ia), hi_ = log(s->ib);
            double dt = exp(lo_ + (hi_ - lo_) * unit_at(key, i));
            if (dt < 1e-4) dt = 1e-4;
            x = dt + log(-expm1(-dt)); /* softplus^-1 */
            break;
        }
        }
        s->data[i] = (float)x;
    }
}

/* Every slot in chunks of FILL_GRAIN elements, over all cores. */
#define FILL_GRAIN ((int64_t)1 << 16)

typedef struct fill_job {
    model *m;
    uint64_t *keys; /* [nslots] */
    int64_t *first; /* [nslots + 1]: chunk index of each slot's first chunk */
} fill_job;

static void fill_chunks(void *ctx, int64_t lo, int64_t hi) {
    fill_job *j = ctx;
    for (int64_t c = lo; c < hi; c++) {
        int a = 0, z = j->m->nslots; /* the slot with first[a] <= c < first[a + 1] */
        while (z - a > 1) {
            int mid = (a + z) / 2;
            if (j->first[mid] <= c)
                a = mid;
            else
                z = mid;
        }
        wslot *s = &j->m->slots[a];
        int64_t e0 = (c - j->first[a]) * FILL_GRAIN, n = wslot_numel(s);
        init_range(s, j->keys[a], e0, n - e0 < FILL_GRAIN ? n : e0 + FILL_GRAIN);
    }
}

/* Allocates and fills every slot; one line on failure. */
static int fill_slots(model *m, uint64_t seed, const char *mixer, err *e) {
    int64_t params = model_param_count(m);
    uint64_t bytes = (uint64_t)params * sizeof(float), phys = par_phys_bytes();
    if (phys && bytes > phys)
        return err_set(e,
                       "model random %s: %lld parameters need %.2f GB as float32, more than this "
                       "machine's %.2f GB of memory",
                       mixer, (long long)params, bytes / 1e9, phys / 1e9);
    uint64_t *keys = malloc(((size_t)m->nslots + 1) * sizeof *keys);
    int64_t *first = malloc(((size_t)m->nslots + 1) * sizeof *first);
    if (!keys || !first) {
        free(keys), free(first);
        return err_set(e, "out of memory");
    }
    first[0] = 0;
    for (int i = 0; i < m->nslots; i++) {
        wslot *s = &m->slots[i];
        int64_t n = wslot_numel(s);
        keys[i] = slot_key(seed, s->name);
        first[i + 1] = first[i] + (n + FILL_GRAIN - 1) / FILL_GRAIN;
        if (!(s->data = malloc((size_t)(n > 0 ? n : 1) * sizeof(float)))) {
            free(keys), free(first);
            return err_set(e,
                           "model random %s: out of memory for %lld parameters (%.2f GB as "
                           "float32)",
                           mixer, (long long)params, bytes / 1e9);
        }
    }
    fill_job j = {m, keys, first};
    par_for(first[m->nslots], 1, fill_chunks, &j);
    free(keys), free(first);
    return 0;
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

/* A hybrid model's attention layers (fla's "attn" key, models/hybrid.c): attn=1,3 with
 * attn_heads= (default 4, or 1 when 4 does not divide hidden), attn_kv_heads=, attn_window=,
 * attn_rope_theta=; or attn= a JSON object or list as config.json holds it. */
static int random_attn(cJSON *cfg, opts *o, int hidden, err *e) {
    const char *av = opts_str(o, "attn", NULL);
    long heads, kvh, window;
    double theta;
    if (opts_int_in(o, "attn_heads", hidden % 4 ? 1 : 4, 1, 4096, &heads, e) ||
        opts_int_in(o, "attn_kv_heads", 0, 1, 4096, &kvh, e) ||
        opts_int_in(o, "attn_window", 0, 1, 1 << 30, &window, e) ||
        opts_float(o, "attn_rope_theta", 10000.0, &theta, e))
        return -1;
    if (!av || !strcmp(av, "null")) {
        if (opts_has(o, "attn_heads") || opts_has(o, "attn_kv_heads") ||
            opts_has(o, "attn_window") || opts_has(o, "attn_rope_theta"))
            return err_set(e, "attn_heads=, attn_kv_heads=, attn_window= and attn_rope_theta= "
                              "need attn=LAYERS (e.g. attn=1,3)");
        return 0;
    }
    cJSON *spec;
    if (av[0] == '{' || av[0] == '[') {
        if (!(spec = cJSON_Parse(av))) return err_set(e, "attn=%.60s is not JSON", av);
    } else {
        spec = cJSON_CreateObject();
        cJSON *ls = spec ? cJSON_AddArrayToObject(spec, "layers") : NULL;
        if (!ls) {
            cJSON_Delete(spec);
            return err_set(e, "out of memory");
        }
        for (const char *p = av; *p;) {
            char *end;
            errno = 0;
            long li = strtol(p, &end, 10);
            if (end == p || errno || (*end && *end != ',')) {
                cJSON_Delete(spec);
                return err_set(e, "attn=%.60s: expected layer indices such as attn=1,3", av);
            }
            cJSON_AddItemToArray(ls, cJSON_CreateNumber((double)li));
            p = *end ? end + 1 : end;
        }
        cJSON_AddNumberToObject(spec, "num_heads", (double)heads);
        if (kvh) cJSON_AddNumberToObject(spec, "num_kv_heads", (double)kvh);
        cJSON_AddBoolToObject(spec, "qkv_bias", 0);
        if (window)
            cJSON_AddNumberToObject(spec, "window_size", (double)window);
        else
            cJSON_AddNullToObject(spec, "window_size");
        cJSON_AddNumberToObject(spec, "rope_theta", theta);
    }
    cJSON_DeleteItemFromObjectCaseSensitive(cfg, "attn");
    cJSON_AddItemToObject(cfg, "attn", spec);
    return 0;
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
        const char *cand[MK_COUNT];
        for (int i = 0; i < MK_COUNT; i++) cand[i] = model_kind_mixer((model_kind)i);
        const char *near = names_closest(mixer, cand, MK_COUNT);
        if (near) return err_set(e, "unknown mixer '%.40s' (did you mean %s?)", mixer, near);
        return err_set(e, "unknown mixer '%.40s' (known: %s)", mixer, list);
    }
    long layers, hidden, heads, head_dim, vocab, seed;
    /* 0 means "not given" for hidden, heads and head_dim: a given 0 is refused, not a default */
    if (opts_int_in(o, "layers", 2, 1, 1024, &layers, e) ||
        opts_int_in(o, "hidden", 0, 1, 16384, &hidden, e) ||
        opts_int_in(o, "heads", 0, 1, 4096, &heads, e) ||
        opts_int_in(o, "head_dim", 0, 1, 4096, &head_dim, e) ||
        opts_int_in(o, "vocab", 256, 1, 1 << 20, &vocab, e) ||
        opts_int_in(o, "seed", 0, 0, LONG_MAX, &seed, e))
        return -1;
    /* the model type comes from MIXER; a near miss of an option above is a typo, not a config
     * key (config.json keys are passed on as given) */
    static const char *const OWN[] = {"layers", "hidden", "heads", "head_dim", "vocab", "seed"};
    for (int i = 0; i < o->n; i++) {
        if (o->used[i]) continue;
        if (!strcmp(o->key[i], "model_type"))
            return err_set(e,
                           "model random %s: the model type comes from the mixer (no "
                           "model_type=)",
                           mixer);
        for (size_t j = 0; j < sizeof OWN / sizeof OWN[0]; j++) {
            size_t a = strlen(o->key[i]), b = strlen(OWN[j]);
            if ((a + 1 == b && !strncmp(o->key[i], OWN[j], a)) || /* layer -> layers */
                (a == b + 1 && !strncmp(o->key[i], OWN[j], b)))   /* seeds -> seed */
                return err_set(e, "model random: unknown option '%.40s' (did you mean %s=?)",
                               o->key[i], OWN[j]);
        }
    }
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
    if (random_attn(cfg, o, (int)hidden, e)) {
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
    if (fill_slots(m, (uint64_t)seed, mixer, e)) {
        model_free(m);
        return -1;
    }
    if (model_finish(m, e)) {
        model_free(m);
        return -1;
    }
    snprintf(m->source, sizeof m->source, "model random %s seed=%ld", mixer, seed);
    *out = m;
    return 0;
}
