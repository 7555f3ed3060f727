/* stream.c: raw write/query streams with keys of chosen norms. */
#include "stream.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "rng.h"

const char *const stream_names[] = {"keys", "recall", "overwrite", NULL};

void stream_free(raw_stream *s) {
    free(s->k), free(s->v), free(s->r), free(s->knorm), free(s->query), free(s->key_id);
    memset(s, 0, sizeof *s);
}

static int stream_alloc(raw_stream *s, const char *kind, int T, int H, int dk, int dv, double lo,
                        double hi, err *e) {
    memset(s, 0, sizeof *s);
    if (T < 1 || T > (1 << 22)) return err_set(e, "stream %s: %d tokens is out of range", kind, T);
    if (H < 1 || dk < 1 || dv < 1 || H > 64 || dk > 1024 || dv > 1024)
        return err_set(e, "stream %s: heads=%d dk=%d dv=%d out of range (64, 1024, 1024)", kind, H,
                       dk, dv);
    if ((double)T * H * (2.0 * dk + dv) > (double)(1 << 26)) /* 256 MiB */
        return err_set(e, "stream %s: %d tokens x %d heads is too large", kind, T, H);
    if (!(lo > 0) || !(hi >= lo) || hi > 1e6)
        return err_set(e, "stream %s: norms=%g..%g must satisfy 0 < LO <= HI <= 1e6", kind, lo, hi);
    snprintf(s->kind, sizeof s->kind, "%s", kind);
    s->T = T, s->H = H, s->dk = dk, s->dv = dv, s->lo = lo, s->hi = hi;
    size_t nk = (size_t)T * H * dk, nv = (size_t)T * H * dv;
    s->k = calloc(nk, sizeof *s->k);
    s->r = calloc(nk, sizeof *s->r);
    s->v = calloc(nv, sizeof *s->v);
    s->knorm = calloc((size_t)T * H, sizeof *s->knorm);
    s->query = calloc((size_t)T, 1);
    s->key_id = calloc((size_t)T, sizeof *s->key_id);
    if (!s->k || !s->r || !s->v || !s->knorm || !s->query || !s->key_id) {
        stream_free(s);
        return err_set(e, "stream %s: out of memory", kind);
    }
    return 0;
}

/* A unit direction in R^d (a normalised Gaussian: uniform on the sphere). */
static void unit_dir(srng *r, float *x, int d) {
    double n2 = 0;
    do {
        n2 = 0;
        for (int i = 0; i < d; i++) {
            x[i] = (float)srng_normal(r);
            n2 += (double)x[i] * x[i];
        }
    } while (n2 < 1e-20);
    float inv = (float)(1.0 / sqrt(n2));
    for (int i = 0; i < d; i++) x[i] *= inv;
}

/* A norm log-uniform in [lo, hi]. */
static double draw_norm(srng *r, double lo, double hi) {
    return lo == hi ? lo : exp(log(lo) + (log(hi) - log(lo)) * srng_uniform(r));
}

/* Draws `nkeys` keys per head ([nkeys, H, dk], with norms [nkeys, H]) and writes the r rows. */
static int draw_keys(raw_stream *s, srng *r, int nkeys, float **keys, float **norms, err *e) {
    const int H = s->H, dk = s->dk;
    *keys = malloc((size_t)nkeys * H * dk * sizeof **keys);
    *norms = malloc((size_t)nkeys * H * sizeof **norms);
    if (!*keys || !*norms) {
        free(*keys), free(*norms);
        return err_set(e, "stream %s: out of memory", s->kind);
    }
    for (int i = 0; i < nkeys; i++)
        for (int h = 0; h < H; h++) {
            float *k = *keys + ((size_t)i * H + h) * dk;
            unit_dir(r, k, dk);
            double n = draw_norm(r, s->lo, s->hi);
            for (int j = 0; j < dk; j++) k[j] = (float)(k[j] * n);
            (*norms)[(size_t)i * H + h] = (float)n;
        }
    return 0;
}

/* Token t: write (or ask) key i with value val [H, dv] (NULL: a fresh unit value per head). */
static void put(raw_stream *s, srng *r, int t, int i, const float *keys, const float *norms,
                int query, float *val) {
    const int H = s->H, dk = s->dk, dv = s->dv;
    memcpy(s->k + (size_t)t * H * dk, keys + (size_t)i * H * dk, (size_t)H * dk * sizeof(float));
    memcpy(s->knorm + (size_t)t * H, norms + (size_t)i * H, (size_t)H * sizeof(float));
    float *v = s->v + (size_t)t * H * dv;
    if (val)
        memcpy(v, val, (size_t)H * dv * sizeof(float));
    else
        for (int h = 0; h < H; h++) unit_dir(r, v + (size_t)h * dv, dv);
    for (int h = 0; h < H; h++) unit_dir(r, s->r + ((size_t)t * H + h) * dk, dk);
    s->query[t] = (uint8_t)query;
    s->key_id[t] = i;
    s->nqueries += query;
}

static void shuffle(srng *r, int *a, int n) {
    for (int i = n - 1; i > 0; i--) {
        int j = srng_below(r, i + 1), t = a[i];
        a[i] = a[j], a[j] = t;
    }
}

int stream_keys(raw_stream *s, int n, int H, int dk, int dv, double lo, double hi, uint64_t seed,
                err *e) {
    if (stream_alloc(s, "keys", n, H, dk, dv, lo, hi, e)) return -1;
    srng r = srng_seed(seed);
    float *keys, *norms;
    if (draw_keys(s, &r, n, &keys, &norms, e)) {
        stream_free(s);
        return -1;
    }
    for (int t = 0; t < n; t++) put(s, &r, t, t, keys, norms, 0, NULL);
    s->nkeys = n;
    snprintf(s->desc, sizeof s->desc,
             "keys: %d writes of new keys, |k| log-uniform in [%g, %g], unit values, %d head%s, "
             "dk %d, dv %d, seed %llu",
             n, lo, hi, H, H > 1 ? "s" : "", dk, dv, (unsigned long long)seed);
    free(keys), free(norms);
    return 0;
}

int stream_recall(raw_stream *s, int pairs, int queries, int H, int dk, int dv, double lo,
                  double hi, uint64_t seed, err *e) {
    if (pairs < 1 || queries < 0)
        return err_set(e, "stream recall: pairs=%d must be >= 1 and queries=%d >= 0", pairs,
                       queries);
    if ((double)pairs + queries > (double)(1 << 22))
        return err_set(e, "stream recall: too many tokens");
    if (stream_alloc(s, "recall", pairs + queries, H, dk, dv, lo, hi, e)) return -1;
    srng r = srng_seed(seed);
    float *keys, *norms;
    int *order = malloc((size_t)pairs * sizeof *order);
    if (!order || draw_keys(s, &r, pairs, &keys, &norms, e)) {
        free(order), stream_free(s);
        return err_set(e, "stream recall: out of memory");
    }
    for (int t = 0; t < pairs; t++) put(s, &r, t, t, keys, norms, 0, NULL);
    for (int i = 0; i < pairs; i++) order[i] = i;
    for (int q = 0; q < queries; q++) {
        if (q % pairs == 0) shuffle(&r, order, pairs);
        int i = order[q % pairs];
        put(s, &r, pairs + q, i, keys, norms, 1, s->v + (size_t)i * H * dv);
    }
    s->nkeys = pairs;
    snprintf(s->desc, sizeof s->desc,
             "recall: %d writes then %d queries of stored keys, |k| in [%g, %g], unit values, %d "
             "head%s, dk %d, dv %d, seed %llu",
             pairs, queries, lo, hi, H, H > 1 ? "s" : "", dk, dv, (unsigned long long)seed);
    free(keys), free(norms), free(order);
    return 0;
}

int stream_overwrite(raw_stream *s, int keys, int repeats, int H, int dk, int dv, double lo,
                     double hi, uint64_t seed, err *e) {
    if (keys < 1 || repeats < 1 || repeats > 4096)
        return err_set(e, "stream overwrite: keys=%d must be >= 1 and repeats=%d in 1..4096", keys,
                       repeats);
    if ((double)keys * (repeats + 1) > (double)(1 << 22))
        return err_set(e, "stream overwrite: too many tokens");
    if (stream_alloc(s, "overwrite", keys * (repeats + 1), H, dk, dv, lo, hi, e)) return -1;
    srng r = srng_seed(seed);
    float *kk, *norms;
    int *order = malloc((size_t)keys * sizeof *order);
    int *latest = malloc((size_t)keys * sizeof *latest); /* token of each key's latest write */
    if (!order || !latest || draw_keys(s, &r, keys, &kk, &norms, e)) {
        free(order), free(latest), stream_free(s);
        return err_set(e, "stream overwrite: out of memory");
    }
    for (int i = 0; i < keys; i++) order[i] = i;
    int t = 0;
    for (int rep = 0; rep < repeats; rep++) {
        shuffle(&r, order, keys);
        for (int j = 0; j < keys; j++, t++) {
            put(s, &r, t, order[j], kk, norms, 0, NULL);
            latest[order[j]] = t;
        }
    }
    shuffle(&r, order, keys);
    for (int j = 0; j < keys; j++, t++)
        put(s, &r, t, order[j], kk, norms, 1, s->v + (size_t)latest[order[j]] * H * dv);
    s->nkeys = keys;
    snprintf(s->desc, sizeof s->desc,
             "overwrite: %d keys written %d times with new values, then each queried for the "
             "latest, |k| in [%g, %g], %d head%s, dk %d, dv %d, seed %llu",
             keys, repeats, lo, hi, H, H > 1 ? "s" : "", dk, dv, (unsigned long long)seed);
    free(kk), free(norms), free(order), free(latest);
    return 0;
}

void stream_key_geometry(const raw_stream *s, int h, double *max_abs, double *max_sq,
                         double *mean_sq) {
    *max_abs = *max_sq = *mean_sq = 0;
    /* the first token of each distinct key */
    int n = s->nkeys;
    int *first = malloc((size_t)(n > 0 ? n : 1) * sizeof *first);
    if (!first) return;
    for (int i = 0; i < n; i++) first[i] = -1;
    for (int t = 0; t < s->T; t++)
        if (!s->query[t] && s->key_id[t] < n && first[s->key_id[t]] < 0) first[s->key_id[t]] = t;
    double sum = 0;
    long pairs = 0;
    for (int i = 0; i < n; i++)
        for (int j = i + 1; j < n; j++) {
            if (first[i] < 0 || first[j] < 0) continue;
            const float *a = s->k + ((size_t)first[i] * s->H + h) * s->dk;
            const float *b = s->k + ((size_t)first[j] * s->H + h) * s->dk;
            double d = 0, na = 0, nb = 0;
            for (int x = 0; x < s->dk; x++)
                d += (double)a[x] * b[x], na += (double)a[x] * a[x], nb += (double)b[x] * b[x];
            double c = d / sqrt(na * nb);
            if (fabs(c) > *max_abs) *max_abs = fabs(c);
            if (c * c > *max_sq) *max_sq = c * c;
            sum += c * c, pairs++;
        }
    if (pairs) *mean_sq = sum / pairs;
    free(first);
}
