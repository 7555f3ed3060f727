/* sha256.h: SHA-256 (FIPS 180-4), for the checkpoint digest that exports carry as provenance. */
#ifndef MIXSCOPE_SHA256_H
#define MIXSCOPE_SHA256_H

#include <stddef.h>
#include <stdint.h>

#include "../core/err.h"

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
/* The digest of a whole file (read in blocks). */
int sha256_file(const char *path, char hex[65], err *e);

#endif
