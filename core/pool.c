/* pool.c: the persistent thread pool (see pool.h).
 *
 * One job at a time, guarded by call_mu (a second caller that cannot take it runs inline). A job
 * is [0, n) cut into `chunks` contiguous ranges. The dispatcher writes the job fields, publishes
 * `ticket` = (generation, chunks, next chunk 0) with a release store, then bumps `gen` under
 * wake_mu and broadcasts. Workers spin on `gen` for up to SPIN_NS, then sleep on `wake`; awake,
 * they claim chunks by compare-and-swap on `ticket` (the caller claims too), run them and decrement
 * `pending`. A worker that the scheduler has not run yet simply claims nothing: the caller does
 * the work rather than wait for it. The caller then spins on `pending` and, past SPIN_NS, sleeps
 * on `done`.
 *
 * The job fields are plain variables: written before the release store of `ticket`, read only
 * after a successful claim (acquire) of that very ticket, and not written again before `pending`
 * (acq_rel) reaches zero, which needs every claimed chunk to be finished. */
#include "pool.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdlib.h>
#include <time.h>
#include <unistd.h>

#define SPIN_NS        200000 /* 0.2 ms: longer than the gaps between a token's products */
#define CHUNKS_PER_THR 4      /* chunks per thread: slack for a thread the scheduler runs late */

static pthread_mutex_t call_mu = PTHREAD_MUTEX_INITIALIZER; /* one dispatcher at a time */
static pthread_mutex_t wake_mu = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t wake = PTHREAD_COND_INITIALIZER;
static pthread_mutex_t done_mu = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t done = PTHREAD_COND_INITIALIZER;

static atomic_int want;      /* pool_set_threads value; 0: the online cores */
static atomic_uint gen;      /* bumped for every job (and to stop): wakes the workers */
static atomic_int stop;      /* workers leave at the next generation */
static atomic_int pending;   /* chunks of the current job not finished */
static atomic_ullong ticket; /* generation << 32 | chunks << 16 | next unclaimed chunk */

/* under call_mu */
static int nworkers; /* started, the caller not counted */
static pthread_t tid[POOL_MAX_THREADS];
static unsigned start_gen;
static unsigned job_gen;

/* the job (see the top comment for who may touch it when) */
static void (*job_fn)(void *, int, int);
static void *job_ctx;
static int job_n;

static _Thread_local int inside;        /* a worker, or the caller while it runs chunks */
static _Thread_local int inside_caller; /* the caller while it runs chunks */

static void cpu_relax(void) {
#if defined(__x86_64__) || defined(__i386__)
    __builtin_ia32_pause();
#elif defined(__aarch64__)
    __asm__ __volatile__("yield");
#endif
}

static int64_t now_ns(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

/* sysconf reads /sys on every call (microseconds): ask once */
static int online_cores(void) {
    static atomic_int cached;
    int n = atomic_load_explicit(&cached, memory_order_relaxed);
    if (n > 0) return n;
    long c = sysconf(_SC_NPROCESSORS_ONLN);
    n = c < 1 ? 1 : c > POOL_MAX_THREADS ? POOL_MAX_THREADS : (int)c;
    atomic_store_explicit(&cached, n, memory_order_relaxed);
    return n;
}

int pool_threads(void) {
    int n = atomic_load(&want);
    return n > 0 ? n : online_cores();
}

int pool_set_threads(int n, err *e) {
    if (n < 0 || n > POOL_MAX_THREADS)
        return err_set(e, "threads %d: give 1 to %d, or 0 for every online core (%d)", n,
                       POOL_MAX_THREADS, online_cores());
    if (inside) return err_set(e, "threads: cannot change the thread count inside a parallel loop");
    atomic_store(&want, n);
    return 0;
}

/* Claims and runs chunks of the published job until none is left. */
static void run_chunks(void) {
    unsigned long long t = atomic_load_explicit(&ticket, memory_order_acquire);
    for (;;) {
        unsigned chunks = (unsigned)(t >> 16) & 0xffff, c = (unsigned)t & 0xffff;
        if (c >= chunks) return;
        if (!atomic_compare_exchange_weak_explicit(&ticket, &t, t + 1, memory_order_acq_rel,
                                                   memory_order_acquire))
            continue;
        int64_t n = job_n;
        int lo = (int)(n * c / chunks), hi = (int)(n * (c + 1) / chunks);
        if (lo < hi) job_fn(job_ctx, lo, hi);
        if (atomic_fetch_sub_explicit(&pending, 1, memory_order_acq_rel) == 1 && !inside_caller) {
            pthread_mutex_lock(&done_mu);
            pthread_cond_signal(&done);
            pthread_mutex_unlock(&done_mu);
        }
        t = atomic_load_explicit(&ticket, memory_order_acquire);
    }
}

/* Waits until gen differs from seen; returns the new value. */
static unsigned wait_gen(unsigned seen) {
    unsigned g;
    int64_t t0 = 0;
    for (int i = 0;; i++) {
        if ((g = atomic_load_explicit(&gen, memory_order_acquire)) != seen) return g;
        if ((i & 255) == 255) {
            int64_t t = now_ns();
            if (!t0)
                t0 = t;
            else if (t - t0 > SPIN_NS)
                break;
        }
        cpu_relax();
    }
    pthread_mutex_lock(&wake_mu);
    while ((g = atomic_load_explicit(&gen, memory_order_acquire)) == seen)
        pthread_cond_wait(&wake, &wake_mu);
    pthread_mutex_unlock(&wake_mu);
    return g;
}

static void *worker(void *arg) {
    (void)arg;
    unsigned seen = start_gen; /* written before pthread_create */
    inside = 1;
    for (;;) {
        seen = wait_gen(seen);
        if (atomic_load_explicit(&stop, memory_order_acquire)) break;
        run_chunks();
    }
    return NULL;
}

static void bump_gen(void) {
    pthread_mutex_lock(&wake_mu);
    atomic_fetch_add_explicit(&gen, 1, memory_order_release);
    pthread_cond_broadcast(&wake);
    pthread_mutex_unlock(&wake_mu);
}

/* under call_mu */
static void stop_workers(void) {
    if (!nworkers) return;
    atomic_store_explicit(&stop, 1, memory_order_release);
    bump_gen();
    for (int i = 0; i < nworkers; i++) pthread_join(tid[i], NULL);
    nworkers = 0;
    atomic_store(&stop, 0);
}

static void at_exit(void) {
    /* exit() from inside a pool_for callback (call_mu held): leave the threads to the exit */
    if (pthread_mutex_trylock(&call_mu) != 0) return;
    stop_workers();
    pthread_mutex_unlock(&call_mu);
}

/* A forked child has only the forking thread: forget the workers and the locks' state. */
static void at_fork_child(void) {
    pthread_mutex_t m = PTHREAD_MUTEX_INITIALIZER;
    pthread_cond_t c = PTHREAD_COND_INITIALIZER;
    call_mu = m, wake_mu = m, done_mu = m;
    wake = c, done = c;
    nworkers = 0;
    atomic_store(&stop, 0);
    atomic_store(&pending, 0);
    atomic_store(&ticket, 0);
}

static pthread_once_t hooks_once = PTHREAD_ONCE_INIT;
static void install_hooks(void) {
    atexit(at_exit);
    pthread_atfork(NULL, NULL, at_fork_child);
}

/* under call_mu: nw workers running (fewer when pthread_create fails) */
static void start_workers(int nw) {
    if (nworkers == nw) return;
    stop_workers();
    pthread_once(&hooks_once, install_hooks);
    start_gen = atomic_load(&gen);
    for (int i = 0; i < nw; i++) {
        if (pthread_create(&tid[i], NULL, worker, NULL) != 0) break;
        nworkers++;
    }
}

void pool_for(int n, void (*fn)(void *ctx, int lo, int hi), void *ctx) {
    if (n <= 0) return;
    int p = pool_threads();
    if (p <= 1 || n <= 1 || inside || pthread_mutex_trylock(&call_mu) != 0) {
        fn(ctx, 0, n);
        return;
    }
    start_workers(p - 1);
    if (!nworkers) {
        pthread_mutex_unlock(&call_mu);
        fn(ctx, 0, n);
        return;
    }
    int chunks = (nworkers + 1) * CHUNKS_PER_THR;
    if (chunks > n) chunks = n;
    job_fn = fn, job_ctx = ctx, job_n = n;
    atomic_store_explicit(&pending, chunks, memory_order_relaxed);
    job_gen++;
    atomic_store_explicit(&ticket, (unsigned long long)job_gen << 32 | (unsigned)chunks << 16,
                          memory_order_release);
    bump_gen();
    inside = inside_caller = 1;
    run_chunks();
    inside = inside_caller = 0;
    int64_t t0 = 0;
    for (int i = 0; atomic_load_explicit(&pending, memory_order_acquire) != 0; i++) {
        if ((i & 255) == 255) {
            int64_t t = now_ns();
            if (!t0)
                t0 = t;
            else if (t - t0 > SPIN_NS) {
                pthread_mutex_lock(&done_mu);
                while (atomic_load_explicit(&pending, memory_order_acquire) != 0)
                    pthread_cond_wait(&done, &done_mu);
                pthread_mutex_unlock(&done_mu);
                break;
            }
        }
        cpu_relax();
    }
    pthread_mutex_unlock(&call_mu);
}

void pool_shutdown(void) {
    if (inside) return;
    pthread_mutex_lock(&call_mu);
    stop_workers();
    pthread_mutex_unlock(&call_mu);
}
