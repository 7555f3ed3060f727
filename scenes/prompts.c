/* prompts.c: task prompts (mqar, niah, overwrite, a5) with their scored targets. */
#include "prompts.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "rng.h"

const char *const task_names[] = {"mqar", "niah", "overwrite", "a5", NULL};

void task_free(task_prompt *p) {
    free(p->ids), free(p->target);
    memset(p, 0, sizeof *p);
}

static int task_alloc(task_prompt *p, const char *name, int n, int vocab, err *e) {
    memset(p, 0, sizeof *p);
    if (n < 1 || n > (1 << 24))
        return err_set(e, "%s: %d tokens is out of range (1..16M)", name, n);
    snprintf(p->name, sizeof p->name, "%s", name);
    p->n = n, p->vocab = vocab;
    p->ids = malloc((size_t)n * sizeof *p->ids);
    p->target = malloc((size_t)n * sizeof *p->target);
    if (!p->ids || !p->target) {
        task_free(p);
        return err_set(e, "%s: out of memory", name);
    }
    for (int i = 0; i < n; i++) p->target[i] = -1;
    return 0;
}

/* Fisher-Yates over a[0..n) */
static void shuffle(srng *r, int *a, int n) {
    for (int i = n - 1; i > 0; i--) {
        int j = srng_below(r, i + 1), t = a[i];
        a[i] = a[j], a[j] = t;
    }
}

/* n distinct ids from [lo, hi) (n <= hi - lo) into out, in random order. */
static int distinct(srng *r, int lo, int hi, int n, int *out, err *e) {
    int m = hi - lo;
    int *all = malloc((size_t)m * sizeof *all);
    if (!all) return err_set(e, "out of memory");
    for (int i = 0; i < m; i++) all[i] = lo + i;
    /* partial shuffle: the first n entries */
    for (int i = 0; i < n; i++) {
        int j = i + srng_below(r, m - i), t = all[i];
        all[i] = all[j], all[j] = t;
        out[i] = all[i];
    }
    free(all);
    return 0;
}

int task_mqar(task_prompt *p, int pairs, int queries, int vocab, uint64_t seed, err *e) {
    if (vocab < 4) return err_set(e, "mqar: vocab=%d is too small (at least 4)", vocab);
    int nkeys = vocab / 2 - 1;
    if (pairs < 1 || pairs > nkeys)
        return err_set(e, "mqar: pairs=%d must lie in 1..%d for vocab=%d (distinct keys)", pairs,
                       nkeys, vocab);
    if (queries < 1 || queries > 1 << 20)
        return err_set(e, "mqar: queries=%d must be at least 1", queries);
    if (task_alloc(p, "mqar", 2 * (pairs + queries), vocab, e)) return -1;
    srng r = srng_seed(seed);
    int *key = malloc((size_t)pairs * sizeof *key), *order = malloc((size_t)pairs * sizeof *order);
    if (!key || !order || distinct(&r, 1, 1 + nkeys, pairs, key, e)) {
        free(key), free(order), task_free(p);
        return err_set(e, "mqar: out of memory");
    } /* key[i], value vals[i]; order: the query order */
    int32_t *ids = p->ids;
    int32_t *vals = malloc((size_t)pairs * sizeof *vals);
    if (!vals) {
        free(key), free(order), task_free(p);
        return err_set(e, "mqar: out of memory");
    }
    for (int i = 0; i < pairs; i++) {
        vals[i] = vocab / 2 + srng_below(&r, vocab - vocab / 2);
        ids[2 * i] = key[i], ids[2 * i + 1] = vals[i];
    }
    for (int i = 0; i < pairs; i++) order[i] = i;
    int t = 2 * pairs;
    for (int q = 0; q < queries; q++) {
        if (q % pairs == 0) shuffle(&r, order, pairs); /* each key once per round of queries */
        int i = order[q % pairs];
        ids[t] = key[i], ids[t + 1] = vals[i];
        p->target[t] = vals[i];
        t += 2;
    }
    p->nscored = queries;
    snprintf(p->desc, sizeof p->desc,
             "mqar: %d key-value pairs then %d queries, %d tokens, vocab %d (keys 1..%d, values "
             "%d..%d), seed %llu",
             pairs, queries, p->n, vocab, nkeys, vocab / 2, vocab - 1, (unsigned long long)seed);
    free(key), free(order), free(vals);
    return 0;
}

int task_niah(task_prompt *p, int len, int vocab, double depth, uint64_t seed, err *e) {
    /* needle ids [1, V/4) must hold two distinct ids */
    if (vocab < 12) return err_set(e, "niah: vocab=%d is too small (at least 12)", vocab);
    if (len < 6) return err_set(e, "niah: len=%d is too short (at least 6)", len);
    srng r = srng_seed(seed);
    if (depth < 0) depth = srng_uniform(&r); /* not given: a random depth */
    if (depth > 1) return err_set(e, "niah: depth=%g must lie in 0..1", depth);
    if (task_alloc(p, "niah", len, vocab, e)) return -1;
    int lo = vocab / 4; /* needle ids [1, lo), filler [lo, vocab) */
    int kv[2];
    if (distinct(&r, 1, lo, 2, kv, e)) {
        task_free(p);
        return -1;
    }
    for (int i = 0; i < len; i++) p->ids[i] = lo + srng_below(&r, vocab - lo);
    int at = (int)lround(depth * (len - 4));
    p->ids[at] = kv[0], p->ids[at + 1] = kv[1];
    p->ids[len - 2] = kv[0], p->ids[len - 1] = kv[1];
    p->target[len - 2] = kv[1];
    p->nscored = 1;
    snprintf(p->desc, sizeof p->desc,
             "niah: %d tokens of filler (ids %d..%d), needle %d -> %d at position %d (depth "
             "%.2f), asked at %d, seed %llu",
             len, lo, vocab - 1, kv[0], kv[1], at, depth, len - 2, (unsigned long long)seed);
    return 0;
}

int task_overwrite(task_prompt *p, int keys, int repeats, int vocab, uint64_t seed, err *e) {
    if (vocab < 4) return err_set(e, "overwrite: vocab=%d is too small (at least 4)", vocab);
    int nkeys = vocab / 2 - 1;
    if (keys < 1 || keys > nkeys)
        return err_set(e, "overwrite: keys=%d must lie in 1..%d for vocab=%d", keys, nkeys, vocab);
    if (repeats < 1 || repeats > 4096)
        return err_set(e, "overwrite: repeats=%d must lie in 1..4096", repeats);
    if ((double)keys * (repeats + 1) * 2 > (double)(1 << 24))
        return err_set(e, "overwrite: keys x repeats is too large");
    if (task_alloc(p, "overwrite", 2 * keys * (repeats + 1), vocab, e)) return -1;
    srng r = srng_seed(seed);
    int *key = malloc((size_t)keys * sizeof *key), *order = malloc((size_t)keys * sizeof *order);
    int32_t *latest = malloc((size_t)keys * sizeof *latest);
    if (!key || !order || !latest || distinct(&r, 1, 1 + nkeys, keys, key, e)) {
        free(key), free(order), free(latest), task_free(p);
        return err_set(e, "overwrite: out of memory");
    }
    for (int i = 0; i < keys; i++) order[i] = i;
    int t = 0;
    for (int rep = 0; rep < repeats; rep++) {
        shuffle(&r, order, keys);
        for (int j = 0; j < keys; j++) {
            int i = order[j];
            int32_t v;
            do v = vocab / 2 + srng_below(&r, vocab - vocab / 2);
            while (rep > 0 && v == latest[i] && vocab - vocab / 2 > 1); /* a new value */
            latest[i] = v;
            p->ids[t] = key[i], p->ids[t + 1] = v;
            t += 2;
        }
    }
    shuffle(&r, order, keys);
    for (int j = 0; j < keys; j++) {
        int i = order[j];
        p->ids[t] = key[i], p->ids[t + 1] = latest[i];
        p->target[t] = latest[i];
        t += 2;
    }
    p->nscored = keys;
    snprintf(p->desc, sizeof p->desc,
             "overwrite: %d keys written %d times each with new values, then each queried for "
             "its latest value; %d tokens, vocab %d, seed %llu",
             keys, repeats, p->n, vocab, (unsigned long long)seed);
    free(key), free(order), free(latest);
    return 0;
}

/* ---- A5 ---- */

/* The 60 even permutations of {0..4} in lexicographic order, built once per call (cheap). */
static int parity(const int *a) {
    int inv = 0;
    for (int i = 0; i < 5; i++)
        for (int j = i + 1; j < 5; j++) inv += a[i] > a[j];
    return inv & 1;
}

/* Walks the 120 permutations of {0..4} in lexicographic order; fills the even ones. */
static void a5_table(int perm[A5_ORDER][5]) {
    int n = 0;
    for (int code = 0; code < 120; code++) {
        /* the code-th permutation in lexicographic order (factorial number system) */
        int pool[5] = {0, 1, 2, 3, 4}, a[5], c = code, f[5] = {24, 6, 2, 1, 1}, m = 5;
        for (int i = 0; i < 5; i++) {
            int d = c / f[i];
            c %= f[i];
            a[i] = pool[d];
            for (int j = d; j < m - 1; j++) pool[j] = pool[j + 1];
            m--;
        }
        if (!parity(a)) memcpy(perm[n++], a, sizeof a);
    }
}

static int a5_id(int perm[A5_ORDER][5], const int *a) {
    for (int i = 0; i < A5_ORDER; i++)
        if (!memcmp(perm[i], a, 5 * sizeof(int))) return i;
    return -1;
}

void a5_perm(int id, int out[5]) {
    int perm[A5_ORDER][5];
    a5_table(perm);
    memcpy(out, perm[id], 5 * sizeof(int));
}

int a5_compose(int a, int b) {
    int perm[A5_ORDER][5], c[5];
    a5_table(perm);
    for (int i = 0; i < 5; i++) c[i] = perm[b][perm[a][i]]; /* a first, then b */
    return a5_id(perm, c);
}

int a5_identity(void) {
    return 0; /* (0 1 2 3 4) is the lexicographically first permutation, and it is even */
}

int task_a5(task_prompt *p, int len, uint64_t seed, err *e) {
    if (len < 1) return err_set(e, "a5: len=%d must be at least 1", len);
    if (task_alloc(p, "a5", len, A5_ORDER, e)) return -1;
    int perm[A5_ORDER][5];
    a5_table(perm);
    /* the product table once: 3600 entries */
    static const int n = A5_ORDER;
    int *mul = malloc((size_t)n * n * sizeof *mul);
    if (!mul) {
        task_free(p);
        return err_set(e, "a5: out of memory");
    }
    for (int a = 0; a < n; a++)
        for (int b = 0; b < n; b++) {
            int c[5];
            for (int i = 0; i < 5; i++) c[i] = perm[b][perm[a][i]];
            mul[a * n + b] = a5_id(perm, c);
        }
    srng r = srng_seed(seed);
    int acc = a5_identity();
    for (int t = 0; t < len; t++) {
        int g = srng_below(&r, n);
        acc = mul[acc * n + g];
        p->ids[t] = g, p->target[t] = acc;
    }
    free(mul);
    p->nscored = len;
    snprintf(p->desc, sizeof p->desc,
             "a5: %d random elements of A5 (ids 0..59); the target at t is the product g_1..g_t; "
             "seed %llu",
             len, (unsigned long long)seed);
    return 0;
}

double task_accuracy(const task_prompt *p, const float *logits, int V, int upto, int *correct,
                     int *scored) {
    int c = 0, s = 0;
    for (int t = 0; t < upto && t < p->n; t++) {
        if (p->target[t] < 0) continue;
        const float *l = logits + (size_t)t * V;
        int best = 0;
        for (int i = 1; i < V; i++)
            if (l[i] > l[best]) best = i;
        s++, c += best == p->target[t];
    }
    if (correct) *correct = c;
    if (scored) *scored = s;
    return s ? (double)c / s : NAN;
}
