#include "parallel.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <unistd.h>

#define PAR_MAX_THREADS 256

static atomic_int g_threads; /* 0: the online cores */

void par_set_threads(int n) {
    atomic_store(&g_threads, n > 0 ? (n < PAR_MAX_THREADS ? n : PAR_MAX_THREADS) : 0);
}

int par_threads(void) {
    int n = atomic_load(&g_threads);
    if (n > 0) return n;
    long c = sysconf(_SC_NPROCESSORS_ONLN);
    return c < 1 ? 1 : c > PAR_MAX_THREADS ? PAR_MAX_THREADS : (int)c;
}

typedef struct job {
    par_fn fn;
    void *ctx;
    int64_t n, grain, chunks;
    atomic_llong next; /* the next chunk to hand out */
} job;

static void *work(void *arg) {
    job *j = arg;
    for (;;) {
        int64_t c = atomic_fetch_add(&j->next, 1);
        if (c >= j->chunks) break;
        int64_t lo = c * j->grain, hi = j->n - lo < j->grain ? j->n : lo + j->grain;
        j->fn(j->ctx, lo, hi);
    }
    return NULL;
}

void par_for(int64_t n, int64_t grain, par_fn fn, void *ctx) {
    if (n <= 0) return;
    if (grain < 1) grain = 1;
    int64_t chunks = (n + grain - 1) / grain;
    int nt = par_threads();
    if (nt > chunks) nt = (int)chunks;
    job j = {fn, ctx, n, grain, chunks, 0};
    pthread_t tid[PAR_MAX_THREADS];
    int started = 0;
    for (int i = 1; i < nt; i++) {
        if (pthread_create(&tid[started], NULL, work, &j) != 0) break;
        started++;
    }
    work(&j);
    for (int i = 0; i < started; i++) pthread_join(tid[i], NULL);
}

uint64_t par_phys_bytes(void) {
    long pages = sysconf(_SC_PHYS_PAGES), size = sysconf(_SC_PAGESIZE);
    return pages > 0 && size > 0 ? (uint64_t)pages * (uint64_t)size : 0;
}
