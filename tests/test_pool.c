/* test_pool.c: core/pool (the persistent thread pool): every index of [0, n) visited exactly once
 * for many sizes and thread counts 1..8, ranges contiguous and in order, nested calls inline,
 * calls from two threads at once, thread-count errors, shutdown and restart, a call's overhead. */
#include "testutil.h"

#include <pthread.h>
#include <stdatomic.h>
#include <time.h>

#include "core/pool.h"

typedef struct sum_ctx {
    int n;
    unsigned char *hits; /* [n] */
    atomic_llong sum;
    atomic_int calls;
} sum_ctx;

static void sum_fn(void *p, int lo, int hi) {
    sum_ctx *c = p;
    long long s = 0;
    for (int i = lo; i < hi; i++) {
        c->hits[i]++;
        s += i;
    }
    atomic_fetch_add(&c->sum, s);
    atomic_fetch_add(&c->calls, 1);
}

static void check_sums(int threads) {
    err e = {{0}};
    assert_int_equal(pool_set_threads(threads, &e), 0);
    assert_int_equal(pool_threads(), threads);
    static const int sizes[] = {1, 2, 3, 5, 7, 8, 9, 16, 31, 64, 100, 257, 1000, 4096, 100003};
    for (size_t k = 0; k < sizeof sizes / sizeof *sizes; k++) {
        int n = sizes[k];
        sum_ctx c = {.n = n, .hits = calloc((size_t)n, 1)};
        for (int rep = 0; rep < 3; rep++) {
            memset(c.hits, 0, (size_t)n);
            atomic_store(&c.sum, 0);
            atomic_store(&c.calls, 0);
            pool_for(n, sum_fn, &c);
            for (int i = 0; i < n; i++)
                if (c.hits[i] != 1)
                    fail_msg("threads %d n %d: index %d hit %d times", threads, n, i, c.hits[i]);
            assert_true(atomic_load(&c.sum) == (long long)n * (n - 1) / 2);
            assert_true(atomic_load(&c.calls) >= 1 && atomic_load(&c.calls) <= 4 * threads);
        }
        free(c.hits);
    }
}

static void test_sums(void **st) {
    (void)st;
    for (int t = 1; t <= 8; t++) check_sums(t);
    err e = {{0}};
    assert_int_equal(pool_set_threads(0, &e), 0);
}

/* Records each range; the ranges must tile [0, n) in order and not depend on anything but n and
 * the thread count. */
typedef struct range_ctx {
    atomic_int los[POOL_MAX_THREADS], his[POOL_MAX_THREADS];
    atomic_int next;
} range_ctx;

static void range_fn(void *p, int lo, int hi) {
    range_ctx *c = p;
    int k = atomic_fetch_add(&c->next, 1);
    atomic_store(&c->los[k], lo);
    atomic_store(&c->his[k], hi);
}

static int cmp_int(const void *a, const void *b) {
    return *(const int *)a - *(const int *)b;
}

static void test_ranges(void **st) {
    (void)st;
    err e = {{0}};
    for (int t = 1; t <= 8; t++) {
        assert_int_equal(pool_set_threads(t, &e), 0);
        for (int n = 1; n <= 40; n++) {
            static range_ctx c;
            memset(&c, 0, sizeof c);
            pool_for(n, range_fn, &c);
            int k = atomic_load(&c.next), lo[POOL_MAX_THREADS], hi[POOL_MAX_THREADS];
            for (int i = 0; i < k; i++)
                lo[i] = atomic_load(&c.los[i]), hi[i] = atomic_load(&c.his[i]);
            qsort(lo, (size_t)k, sizeof *lo, cmp_int);
            qsort(hi, (size_t)k, sizeof *hi, cmp_int);
            assert_int_equal(lo[0], 0);
            assert_int_equal(hi[k - 1], n);
            for (int i = 1; i < k; i++) assert_int_equal(lo[i], hi[i - 1]);
            for (int i = 0; i < k; i++) assert_true(lo[i] < hi[i]);
            /* near-equal parts: no range longer than ceil(n / t) */
            for (int i = 0; i < k; i++) assert_true(hi[i] - lo[i] <= (n + t - 1) / t);
        }
    }
    assert_int_equal(pool_set_threads(0, &e), 0);
}

/* A pool_for inside a pool_for runs inline, on the thread that made it. */
typedef struct nest_ctx {
    atomic_int inner_calls, inner_items;
    atomic_int wrong_thread;
} nest_ctx;

typedef struct inner_arg {
    nest_ctx *c;
    pthread_t self;
} inner_arg;

static void inner_fn(void *p, int lo, int hi) {
    inner_arg *a = p;
    if (!pthread_equal(a->self, pthread_self())) atomic_store(&a->c->wrong_thread, 1);
    atomic_fetch_add(&a->c->inner_calls, 1);
    atomic_fetch_add(&a->c->inner_items, hi - lo);
}

static void outer_fn(void *p, int lo, int hi) {
    for (int i = lo; i < hi; i++) {
        inner_arg a = {p, pthread_self()};
        pool_for(50, inner_fn, &a);
    }
}

static void test_nested(void **st) {
    (void)st;
    err e = {{0}};
    assert_int_equal(pool_set_threads(4, &e), 0);
    nest_ctx c = {0};
    pool_for(8, outer_fn, &c);
    assert_int_equal(atomic_load(&c.inner_calls), 8); /* one inline call per outer item */
    assert_int_equal(atomic_load(&c.inner_items), 8 * 50);
    assert_int_equal(atomic_load(&c.wrong_thread), 0);
    assert_int_equal(pool_set_threads(0, &e), 0);
}

/* Two threads calling at once: one may run inline, both get every index. */
static void *caller_thread(void *p) {
    sum_ctx *c = p;
    for (int rep = 0; rep < 200; rep++) {
        memset(c->hits, 0, (size_t)c->n);
        pool_for(c->n, sum_fn, c);
        for (int i = 0; i < c->n; i++)
            if (c->hits[i] != 1) return (void *)1;
    }
    return NULL;
}

static void test_two_callers(void **st) {
    (void)st;
    err e = {{0}};
    assert_int_equal(pool_set_threads(3, &e), 0);
    sum_ctx a = {.n = 5000, .hits = calloc(5000, 1)}, b = {.n = 777, .hits = calloc(777, 1)};
    pthread_t ta, tb;
    assert_int_equal(pthread_create(&ta, NULL, caller_thread, &a), 0);
    assert_int_equal(pthread_create(&tb, NULL, caller_thread, &b), 0);
    void *ra, *rb;
    pthread_join(ta, &ra);
    pthread_join(tb, &rb);
    assert_null(ra);
    assert_null(rb);
    free(a.hits), free(b.hits);
    assert_int_equal(pool_set_threads(0, &e), 0);
}

static void test_set_threads_errors(void **st) {
    (void)st;
    err e = {{0}};
    assert_int_equal(pool_set_threads(2, &e), 0);
    assert_int_equal(pool_set_threads(-1, &e), -1);
    expect_has(e.msg, "threads -1");
    expect_has(e.msg, "1 to 256");
    assert_int_equal(pool_threads(), 2); /* unchanged */
    assert_int_equal(pool_set_threads(257, &e), -1);
    expect_has(e.msg, "threads 257");
    assert_int_equal(pool_set_threads(256, &e), 0);
    assert_int_equal(pool_threads(), 256);
    assert_int_equal(pool_set_threads(0, &e), 0);
    long online = sysconf(_SC_NPROCESSORS_ONLN);
    assert_int_equal(pool_threads(), online < 1 ? 1 : online > 256 ? 256 : online);
    assert_int_equal(pool_set_threads(1, &e), 0);
    assert_int_equal(pool_threads(), 1);
    assert_int_equal(pool_set_threads(0, &e), 0);
}

/* Shutdown joins; the next call starts the threads again; many threads on few cores work. */
static void test_shutdown_restart(void **st) {
    (void)st;
    err e = {{0}};
    assert_int_equal(pool_set_threads(4, &e), 0);
    sum_ctx c = {.n = 1000, .hits = calloc(1000, 1)};
    pool_for(c.n, sum_fn, &c);
    pool_shutdown();
    pool_shutdown();
    memset(c.hits, 0, 1000);
    atomic_store(&c.sum, 0);
    pool_for(c.n, sum_fn, &c);
    assert_true(atomic_load(&c.sum) == 999LL * 1000 / 2);
    assert_int_equal(pool_set_threads(16, &e), 0);
    memset(c.hits, 0, 1000);
    atomic_store(&c.sum, 0);
    pool_for(c.n, sum_fn, &c);
    assert_true(atomic_load(&c.sum) == 999LL * 1000 / 2);
    free(c.hits);
    assert_int_equal(pool_set_threads(0, &e), 0);
    pool_shutdown();
}

static void nop_fn(void *p, int lo, int hi) {
    (void)p, (void)lo, (void)hi;
}

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

/* The overhead of a call with every thread (printed; asserted only loosely: the machine is shared
 * and may run under sanitizers). */
static void test_overhead(void **st) {
    (void)st;
    err e = {{0}};
    assert_int_equal(pool_set_threads(0, &e), 0);
    pool_for(1000, nop_fn, NULL);
    int reps = 20000;
    double t = now_s();
    for (int i = 0; i < reps; i++) pool_for(1000, nop_fn, NULL);
    double us = (now_s() - t) / reps * 1e6;
    print_message("  pool_for with %d threads: %.2f us a call\n", pool_threads(), us);
    assert_true(us < 1000.0);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_sums),
        cmocka_unit_test(test_ranges),
        cmocka_unit_test(test_nested),
        cmocka_unit_test(test_two_callers),
        cmocka_unit_test(test_set_threads_errors),
        cmocka_unit_test(test_shutdown_restart),
        cmocka_unit_test(test_overhead),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
