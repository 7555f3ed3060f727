/* parallel.h: a parallel for over the machine's cores (pthreads).
 *
 * par_for splits [0, n) into chunks of `grain` and hands them to worker threads and the caller
 * until none is left. Which thread runs a chunk is not fixed, so a result must depend only on the
 * index range a call is given (that is what makes `model random` and checkpoint loading give the
 * same bytes whatever the thread count). */
#ifndef MIXSCOPE_PARALLEL_H
#define MIXSCOPE_PARALLEL_H

#include <stddef.h>
#include <stdint.h>

/* Threads par_for uses: the par_set_threads value, else the online cores (at most 256). */
int par_threads(void);
/* n > 0: use n threads from now on; 0: back to every online core. */
void par_set_threads(int n);

typedef void (*par_fn)(void *ctx, int64_t lo, int64_t hi);
/* fn(ctx, lo, hi) over chunks [lo, hi) of [0, n) of at most `grain` (> 0) items, in parallel;
 * returns when every chunk is done. Falls back to the calling thread when threads cannot start. */
void par_for(int64_t n, int64_t grain, par_fn fn, void *ctx);

/* The machine's physical memory in bytes (0 when unknown). */
uint64_t par_phys_bytes(void);

#endif
