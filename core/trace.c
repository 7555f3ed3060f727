#include "trace.h"

#include "parallel.h"

#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#ifdef __linux__
#include <sys/mman.h>
#endif

/* A series of several MB is first touched a token at a time as it is recorded: with 4 KiB pages
 * that is a page fault every few tokens (a fresh 2048-token run of 16 heads with k, v and the
 * readback recorded took 12000 faults, half its time on the GPU). Asking for transparent huge
 * pages on the block makes it a fault per 2 MiB where the kernel allows them (THP "madvise" or
 * "always"); elsewhere nothing changes. */
static void trace_hint_huge(void *p, size_t bytes) {
#if defined(__linux__) && defined(MADV_HUGEPAGE)
    if (bytes < ((size_t)4 << 20)) return;
    const uintptr_t pg = 4096, a = ((uintptr_t)p + pg - 1) & ~(pg - 1);
    const uintptr_t end = ((uintptr_t)p + bytes) & ~(pg - 1);
    if (end > a) (void)madvise((void *)a, end - a, MADV_HUGEPAGE);
#else
    (void)p, (void)bytes;
#endif
}

void trace_init(trace *tr) {
    memset(tr, 0, sizeof *tr);
}

void trace_free(trace *tr) {
    for (int i = 0; i < tr->nseries; i++) {
        free(tr->series[i].name), free(tr->series[i].meaning), free(tr->series[i].source);
        free(tr->series[i].data);
    }
    for (int i = 0; i < tr->nsnap; i++) free(tr->snaps[i].name), free(tr->snaps[i].data);
    free(tr->series);
    free(tr->snaps);
    free(tr->label);
    memset(tr, 0, sizeof *tr);
}

void trace_clear(trace *tr) {
    tr->T = 0;
    for (int i = 0; i < tr->nsnap; i++) tr->snaps[i].t = -1;
}

int trace_set_label(trace *tr, int l, const char *label, err *e) {
    if (l < 0 || l >= 1 << 20) return err_set(e, "trace label of layer %d", l);
    if (l >= tr->nlabels) {
        char(*nl)[48] = realloc(tr->label, (size_t)(l + 1) * sizeof *nl);
        if (!nl) return err_set(e, "out of memory");
        memset(nl + tr->nlabels, 0, (size_t)(l + 1 - tr->nlabels) * sizeof *nl);
        tr->label = nl, tr->nlabels = l + 1;
    }
    snprintf(tr->label[l], sizeof tr->label[l], "%s", label ? label : "");
    return 0;
}

const char *trace_label(const trace *tr, int l) {
    return l >= 0 && l < tr->nlabels && tr->label[l][0] ? tr->label[l] : NULL;
}

static size_t block(const trace_series *s) {
    return (size_t)s->layers * (size_t)s->heads * (size_t)s->width;
}

int trace_find(const trace *tr, const char *name) {
    for (int i = 0; i < tr->nseries; i++)
        if (strcmp(tr->series[i].name, name) == 0) return i;
    return -1;
}

/* A hybrid model's layers differ in heads and widths (attention layers of their own head count and
 * size): the series takes the largest of each, and a layer with fewer fills the first heads and
 * the first values of each, the rest staying NaN. Re-lays the tokens recorded so far. */
static int series_widen(trace *tr, trace_series *s, int heads, int width, err *e) {
    size_t nb = (size_t)s->layers * (size_t)heads * (size_t)width;
    size_t cap = (size_t)(tr->cap ? tr->cap : 1);
    float *nd = malloc(nb * cap * sizeof *nd);
    if (!nd) return err_set(e, "out of memory");
    for (size_t j = 0; j < nb * cap; j++) nd[j] = NAN;
    for (int64_t t = 0; t < tr->T; t++)
        for (int l = 0; l < s->layers; l++)
            for (int h = 0; h < s->heads; h++)
                memcpy(nd + (size_t)t * nb + ((size_t)l * heads + h) * width,
                       s->data + (((size_t)t * s->layers + l) * s->heads + h) * s->width,
                       (size_t)s->width * sizeof *nd);
    free(s->data);
    s->data = nd, s->heads = heads, s->width = width;
    return 0;
}

int trace_put_heads(const trace *tr, int s, int64_t t, int layer, const float *v, int H, int w) {
    const trace_series *se = &tr->series[s];
    if (layer < 0 || layer >= se->layers || H > se->heads || w > se->width || t < 0 || t >= tr->T)
        return -1;
    if (H == se->heads && w == se->width) {
        memcpy(trace_at_lh(tr, s, t, layer, 0), v, (size_t)H * (size_t)w * sizeof *v);
        return 0;
    }
    for (int h = 0; h < H; h++)
        memcpy(trace_at_lh(tr, s, t, layer, h), v + (size_t)h * w, (size_t)w * sizeof *v);
    return 0;
}

/* The most bytes the trace may hold: MIXSCOPE_TRACE_MAX_MB, else half the machine's memory
 * (a 4096-head model records 51 MB a token: 60 tokens made a 3 GB trace, then the machine
 * swapped). */
static double trace_limit_bytes(void) {
    const char *v = getenv("MIXSCOPE_TRACE_MAX_MB");
    if (v && *v) {
        double mb = strtod(v, NULL);
        if (mb > 0) return mb * 1048576.0;
    }
    double phys = (double)par_phys_bytes();
    return phys > 0 ? phys / 2 : 64.0 * 1073741824.0;
}

static double trace_token_bytes(const trace *tr) {
    double per = 0;
    for (int i = 0; i < tr->nseries; i++) per += (double)block(&tr->series[i]) * sizeof(float);
    return per;
}

int trace_add_series(trace *tr, const char *name, const char *meaning, const char *source,
                     int layers, int heads, int width, err *e) {
    int i = trace_find(tr, name);
    if (i >= 0) {
        trace_series *s = &tr->series[i];
        if (s->layers == layers && s->heads >= heads && s->width >= width) return i;
        if (s->layers != layers || heads < 1 || width < 1)
            return err_set(e, "probe '%s' recorded with two shapes", name);
        return series_widen(tr, s, heads > s->heads ? heads : s->heads,
                            width > s->width ? width : s->width, e)
                   ? -1
                   : i;
    }
    if (layers < 1 || heads < 1 || width < 1) return err_set(e, "probe '%s': empty shape", name);
    trace_series *ns = realloc(tr->series, ((size_t)tr->nseries + 1) * sizeof *ns);
    if (!ns) return err_set(e, "out of memory");
    tr->series = ns;
    trace_series *s = &tr->series[tr->nseries];
    memset(s, 0, sizeof *s);
    s->name = strdup(name);
    s->meaning = strdup(meaning ? meaning : "");
    s->source = strdup(source ? source : "");
    s->layers = layers, s->heads = heads, s->width = width;
    size_t n = block(s) * (size_t)(tr->cap ? tr->cap : 1);
    s->data = malloc(n * sizeof *s->data);
    if (s->data) trace_hint_huge(s->data, n * sizeof *s->data); /* before the NaN fill below */
    if (!s->name || !s->meaning || !s->source || !s->data) {
        free(s->name), free(s->meaning), free(s->source), free(s->data);
        return err_set(e, "out of memory");
    }
    /* the tokens recorded before this series existed read NaN; rows from tr->T on are filled
     * as trace_push_token adds them (so a reserved capacity is not touched here) */
    for (size_t j = 0; j < block(s) * (size_t)tr->T; j++) s->data[j] = NAN;
    int idx = tr->nseries++;
    /* a capacity reserved before this series existed may now pass the memory cap: give the
     * surplus back (the next push then grows within the cap, or says it is full) */
    double per = trace_token_bytes(tr), limit = trace_limit_bytes();
    if ((double)tr->cap * per > limit && tr->cap > tr->T) {
        int64_t nc = (int64_t)(limit / per);
        if (nc < tr->T) nc = tr->T;
        if (nc < 1) nc = 1;
        for (int i = 0; i < tr->nseries; i++) {
            float *nd = realloc(tr->series[i].data, block(&tr->series[i]) * (size_t)nc * 4);
            if (nd) tr->series[i].data = nd;
        }
        tr->cap = nc;
    }
    return idx;
}

/* Grows every series to room for nc tokens (the caller checked the limit). */
static int trace_grow(trace *tr, int64_t nc, double per, err *e) {
    for (int i = 0; i < tr->nseries; i++) {
        trace_series *s = &tr->series[i];
        float *nd = realloc(s->data, block(s) * (size_t)nc * sizeof *nd);
        if (!nd)
            return err_set(e, "out of memory for the probe trace: %lld tokens of %.2f MiB",
                           (long long)nc, per / 1048576.0);
        s->data = nd;
        trace_hint_huge(nd, block(s) * (size_t)nc * sizeof *nd);
    }
    tr->cap = nc;
    return 0;
}

void trace_reserve(trace *tr, int64_t T) {
    tr->want = T;
    if (T <= tr->cap || !tr->nseries) return; /* no series yet: the first growth takes it */
    double per = trace_token_bytes(tr), limit = trace_limit_bytes();
    if ((double)T * per > limit) T = (int64_t)(limit / per);
    err e = {{0}};
    if (T > tr->cap) (void)trace_grow(tr, T, per, &e); /* a failure leaves it to the pushes */
}

int64_t trace_push_token(trace *tr, err *e) {
    if (tr->T == tr->cap) {
        double per = trace_token_bytes(tr); /* bytes a token */
        double limit = trace_limit_bytes();
        int64_t nc = tr->cap ? tr->cap * 2 : 256;
        if (tr->want > nc && per > 0) nc = tr->want; /* the run's length (trace_reserve) */
        if (per > 0 && (double)nc * per > limit) nc = (int64_t)(limit / per);
        if (nc <= tr->T)
            return err_set(e,
                           "the probe trace is full: %lld tokens of %.3f MiB make %.1f MiB, its "
                           "cap (half this machine's memory, or MIXSCOPE_TRACE_MAX_MB); record "
                           "fewer probes (set probes) or fewer tokens",
                           (long long)tr->T, per / 1048576.0, (double)tr->T * per / 1048576.0);
        if (trace_grow(tr, nc, per, e)) return -1;
    }
    for (int i = 0; i < tr->nseries; i++) {
        trace_series *s = &tr->series[i];
        float *row = s->data + block(s) * (size_t)tr->T;
        for (size_t j = 0; j < block(s); j++) row[j] = NAN;
    }
    return tr->T++;
}

float *trace_at(const trace *tr, int s, int64_t t) {
    const trace_series *se = &tr->series[s];
    return se->data + block(se) * (size_t)t;
}

float *trace_at_lh(const trace *tr, int s, int64_t t, int layer, int head) {
    const trace_series *se = &tr->series[s];
    return trace_at(tr, s, t) +
           ((size_t)layer * (size_t)se->heads + (size_t)head) * (size_t)se->width;
}

int trace_find_snapshot(const trace *tr, const char *name) {
    for (int i = 0; i < tr->nsnap; i++)
        if (strcmp(tr->snaps[i].name, name) == 0) return i;
    return -1;
}

int trace_add_snapshot(trace *tr, const char *name, int layers, int heads, int rows, int cols,
                       err *e) {
    int i = trace_find_snapshot(tr, name);
    if (i >= 0) {
        trace_snapshot *s = &tr->snaps[i];
        if (s->layers == layers && s->heads >= heads && s->rows == rows && s->cols == cols)
            return i;
        if (s->layers == layers && s->rows == rows && s->cols == cols) {
            /* more heads (a hybrid model's layers): widen, keeping what was recorded */
            size_t mat = (size_t)rows * cols;
            float *nd = calloc((size_t)layers * heads * mat, sizeof *nd);
            if (!nd) return err_set(e, "out of memory");
            for (int l = 0; l < layers; l++)
                memcpy(nd + (size_t)l * heads * mat, s->data + (size_t)l * s->heads * mat,
                       (size_t)s->heads * mat * sizeof *nd);
            free(s->data);
            s->data = nd, s->heads = heads;
            return i;
        }
        free(s->data);
        s->layers = layers, s->heads = heads, s->rows = rows, s->cols = cols, s->t = -1;
        s->data = calloc((size_t)layers * heads * rows * cols, sizeof *s->data);
        return s->data ? i : err_set(e, "out of memory");
    }
    trace_snapshot *ns = realloc(tr->snaps, ((size_t)tr->nsnap + 1) * sizeof *ns);
    if (!ns) return err_set(e, "out of memory");
    tr->snaps = ns;
    trace_snapshot *s = &tr->snaps[tr->nsnap];
    s->name = strdup(name);
    s->layers = layers, s->heads = heads, s->rows = rows, s->cols = cols, s->t = -1;
    s->data = calloc((size_t)layers * heads * rows * cols, sizeof *s->data);
    if (!s->name || !s->data) {
        free(s->name), free(s->data);
        return err_set(e, "out of memory");
    }
    return tr->nsnap++;
}

float *trace_snapshot_at(const trace *tr, int k, int layer, int head) {
    const trace_snapshot *s = &tr->snaps[k];
    return s->data + ((size_t)layer * s->heads + head) * (size_t)s->rows * s->cols;
}
