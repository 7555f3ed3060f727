/* pool.h: one persistent pool of worker threads for the whole program.
 *
 * Why it exists: stepping a model token by token spends most of its time in dense matrix-vector
 * products (models/blocks.c, blk_linear) that read every weight once per token. One core cannot
 * pull the machine's memory bandwidth on its own, so the products split their rows over the cores.
 * A token makes 50-100 such calls of a few hundred microseconds each: starting threads per call
 * (core/parallel.h's par_for, which suits one-off fills of hundreds of megabytes) would cost more
 * than the work. The pool's threads start once, on first use, and wait between calls (spinning a
 * little, then sleeping on a condition variable), so a call costs a few microseconds.
 *
 * There is one pool for the program, shared by every caller; `set threads N` (cli) calls
 * pool_set_threads. A call made while another thread is using the pool, or from inside a pool
 * call (a nested loop), runs on its own thread, inline: nothing waits on itself.
 *
 * Which range runs where is not fixed: a caller that splits independent outputs (rows) gets the
 * same numbers for any thread count and any schedule; never reduce one output across ranges. */
#ifndef MIXSCOPE_POOL_H
#define MIXSCOPE_POOL_H

#include "err.h"

#define POOL_MAX_THREADS 256

/* The threads pool_for uses, the caller included (>= 1): the pool_set_threads value, else the
 * online cores (at most POOL_MAX_THREADS). */
int pool_threads(void);

/* Uses n threads from the next pool_for on (n = 0: every online core). n < 0 or n > 256 is
 * refused with a message and changes nothing. Returns 0 or -1. Not from inside a pool_for. */
int pool_set_threads(int n, err *e);

/* Cuts [0, n) into contiguous ranges in order (up to 4 per thread, never more than n) and runs
 * fn(ctx, lo, hi) once on each, on whichever thread claims it first (the caller claims too, so a
 * thread the scheduler runs late delays nothing); returns when all are done. Runs fn(ctx, 0, n)
 * inline when one thread is set, n <= 1, the call is nested in another pool_for, or another
 * thread holds the pool. n <= 0 does nothing. */
void pool_for(int n, void (*fn)(void *ctx, int lo, int hi), void *ctx);

/* Joins the worker threads (registered with atexit when they start; safe to call again, and a
 * later pool_for starts them anew). */
void pool_shutdown(void);

#endif
