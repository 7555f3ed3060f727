/* busguard.h: reading a mapped file that may shrink under us.
 *
 * A checkpoint is mapped (core/safetensors.c) and read after its checks; if another program
 * truncates the file in between, touching the lost pages raises SIGBUS, which would end the whole
 * session. busguard_run runs fn(ctx) on the calling thread with a SIGBUS handler that jumps back
 * out of it: it returns 0 when fn returned, -1 when a SIGBUS cut it short (fn's work is then
 * partial and must be thrown away). Any thread may use it (the jump target is per thread); a
 * SIGBUS outside a guarded call keeps its default action. */
#ifndef MIXSCOPE_BUSGUARD_H
#define MIXSCOPE_BUSGUARD_H

int busguard_run(void (*fn)(void *ctx), void *ctx);

#endif
