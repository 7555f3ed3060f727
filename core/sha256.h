/* sha256.h: SHA-256 (FIPS 180-4), for the checkpoint digest that exports carry as provenance.
 *
 * On x86 CPUs with the SHA extensions (SHA-NI) the blocks go through those instructions; elsewhere
 * through the portable code. Both give the same digest (tests/test_safetensors.c checks them
 * against each other and against the standard's vectors). */
#ifndef MIXSCOPE_CORE_SHA256_H
#define MIXSCOPE_CORE_SHA256_H

#include <stddef.h>
#include <stdint.h>

#include "err.h"

typedef struct sha256_ctx {
    uint32_t h[8];
    uint64_t len; /* bytes hashed so far */
    unsigned char buf[64];
    size_t nbuf;
} sha256_ctx;

void sha256_init(sha256_ctx *c);
void sha256_update(sha256_ctx *c, const void *data, size_t n);
/* The digest as 64 lowercase hex digits and a NUL. */
void sha256_hex(sha256_ctx *c, char hex[65]);
/* The digest of a whole file (read in blocks of 1 MiB). */
int sha256_file(const char *path, char hex[65], err *e);

/* 1 when this CPU has the SHA extensions (and SSE4.1) that the fast path needs. */
int sha256_cpu_has_ni(void);
/* 1 when sha256_update uses them now: the CPU has them and sha256_set_ni(0) was not called. */
int sha256_uses_ni(void);
/* 0: the portable code from now on (tests and the benchmark compare the two); 1: the SHA
 * extensions again where the CPU has them. */
void sha256_set_ni(int on);

#endif
