/* sha256.c: SHA-256 as FIPS 180-4 specifies it: the portable compression function block by block,
 * and on x86 the same compression with the SHA extensions (sha256rnds2, sha256msg1/2), chosen at
 * run time from cpuid. */
#include "sha256.h"

#include <errno.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#if defined(__x86_64__) || defined(__i386__)
#include <cpuid.h>
#include <immintrin.h>
#define SHA256_X86 1
#endif

static const uint32_t K[64] = {
    0x428a2f98, 0x71374491, 0xb5c0fbcf, 0xe9b5dba5, 0x3956c25b, 0x59f111f1, 0x923f82a4, 0xab1c5ed5,
    0xd807aa98, 0x12835b01, 0x243185be, 0x550c7dc3, 0x72be5d74, 0x80deb1fe, 0x9bdc06a7, 0xc19bf174,
    0xe49b69c1, 0xefbe4786, 0x0fc19dc6, 0x240ca1cc, 0x2de92c6f, 0x4a7484aa, 0x5cb0a9dc, 0x76f988da,
    0x983e5152, 0xa831c66d, 0xb00327c8, 0xbf597fc7, 0xc6e00bf3, 0xd5a79147, 0x06ca6351, 0x14292967,
    0x27b70a85, 0x2e1b2138, 0x4d2c6dfc, 0x53380d13, 0x650a7354, 0x766a0abb, 0x81c2c92e, 0x92722c85,
    0xa2bfe8a1, 0xa81a664b, 0xc24b8b70, 0xc76c51a3, 0xd192e819, 0xd6990624, 0xf40e3585, 0x106aa070,
    0x19a4c116, 0x1e376c08, 0x2748774c, 0x34b0bcb5, 0x391c0cb3, 0x4ed8aa4a, 0x5b9cca4f, 0x682e6ff3,
    0x748f82ee, 0x78a5636f, 0x84c87814, 0x8cc70208, 0x90befffa, 0xa4506ceb, 0xbef9a3f7, 0xc67178f2,
};

static uint32_t rotr(uint32_t x, int n) {
    return (x >> n) | (x << (32 - n));
}

static void blocks_portable(uint32_t st[8], const unsigned char *p, size_t nblocks) {
    for (; nblocks; nblocks--, p += 64) {
        uint32_t w[64];
        for (int i = 0; i < 16; i++)
            w[i] = (uint32_t)p[4 * i] << 24 | (uint32_t)p[4 * i + 1] << 16 |
                   (uint32_t)p[4 * i + 2] << 8 | p[4 * i + 3];
        for (int i = 16; i < 64; i++) {
            uint32_t s0 = rotr(w[i - 15], 7) ^ rotr(w[i - 15], 18) ^ (w[i - 15] >> 3);
            uint32_t s1 = rotr(w[i - 2], 17) ^ rotr(w[i - 2], 19) ^ (w[i - 2] >> 10);
            w[i] = w[i - 16] + s0 + w[i - 7] + s1;
        }
        uint32_t a = st[0], b = st[1], c = st[2], d = st[3];
        uint32_t e = st[4], f = st[5], g = st[6], h = st[7];
        for (int i = 0; i < 64; i++) {
            uint32_t t1 =
                h + (rotr(e, 6) ^ rotr(e, 11) ^ rotr(e, 25)) + ((e & f) ^ (~e & g)) + K[i] + w[i];
            uint32_t t2 = (rotr(a, 2) ^ rotr(a, 13) ^ rotr(a, 22)) + ((a & b) ^ (a & c) ^ (b & c));
            h = g, g = f, f = e, e = d + t1, d = c, c = b, b = a, a = t1 + t2;
        }
        st[0] += a, st[1] += b, st[2] += c, st[3] += d;
        st[4] += e, st[5] += f, st[6] += g, st[7] += h;
    }
}

#ifdef SHA256_X86
/* The state lives as ABEF and CDGH in two registers, as sha256rnds2 wants it; each group of four
 * rounds adds K to four message words, and sha256msg1/msg2 extend the schedule. */
__attribute__((target("sha,sse4.1"))) static void blocks_ni(uint32_t st[8], const unsigned char *p,
                                                            size_t nblocks) {
    const __m128i bswap = _mm_set_epi64x(0x0c0d0e0f08090a0bll, 0x0405060700010203ll);
    __m128i t = _mm_shuffle_epi32(_mm_loadu_si128((const __m128i *)&st[0]), 0xB1);  /* CDAB */
    __m128i s1 = _mm_shuffle_epi32(_mm_loadu_si128((const __m128i *)&st[4]), 0x1B); /* EFGH */
    __m128i s0 = _mm_alignr_epi8(t, s1, 8);                                         /* ABEF */
    s1 = _mm_blend_epi16(s1, t, 0xF0);                                              /* CDGH */
    for (; nblocks; nblocks--, p += 64) {
        __m128i abef = s0, cdgh = s1, w[4];
#pragma GCC unroll 16
        for (int i = 0; i < 16; i++) {
            __m128i x;
            if (i < 4) {
                x = _mm_shuffle_epi8(_mm_loadu_si128((const __m128i *)(p + 16 * i)), bswap);
            } else {
                __m128i a = w[i & 3], b = w[(i + 1) & 3], c = w[(i + 2) & 3], d = w[(i + 3) & 3];
                x = _mm_add_epi32(_mm_sha256msg1_epu32(a, b), _mm_alignr_epi8(d, c, 4));
                x = _mm_sha256msg2_epu32(x, d);
            }
            w[i & 3] = x;
            __m128i m = _mm_add_epi32(x, _mm_loadu_si128((const __m128i *)&K[4 * i]));
            s1 = _mm_sha256rnds2_epu32(s1, s0, m);
            s0 = _mm_sha256rnds2_epu32(s0, s1, _mm_shuffle_epi32(m, 0x0E));
        }
        s0 = _mm_add_epi32(s0, abef);
        s1 = _mm_add_epi32(s1, cdgh);
    }
    t = _mm_shuffle_epi32(s0, 0x1B);                                   /* FEBA */
    s1 = _mm_shuffle_epi32(s1, 0xB1);                                  /* DCHG */
    _mm_storeu_si128((__m128i *)&st[0], _mm_blend_epi16(t, s1, 0xF0)); /* DCBA */
    _mm_storeu_si128((__m128i *)&st[4], _mm_alignr_epi8(s1, t, 8));    /* HGFE */
}
#endif

int sha256_cpu_has_ni(void) {
#ifdef SHA256_X86
    static atomic_int known = -1;
    int k = atomic_load(&known);
    if (k < 0) {
        unsigned a, b, c, d;
        int sse = __get_cpuid(1, &a, &b, &c, &d) && (c & (1u << 19)) && (c & (1u << 9));
        int sha = __get_cpuid_count(7, 0, &a, &b, &c, &d) && (b & (1u << 29));
        atomic_store(&known, k = sse && sha);
    }
    return k;
#else
    return 0;
#endif
}

static atomic_int g_ni_off;

void sha256_set_ni(int on) {
    atomic_store(&g_ni_off, !on);
}

int sha256_uses_ni(void) {
    return !atomic_load(&g_ni_off) && sha256_cpu_has_ni();
}

static void blocks(uint32_t st[8], const unsigned char *p, size_t nblocks) {
#ifdef SHA256_X86
    if (sha256_uses_ni()) {
        blocks_ni(st, p, nblocks);
        return;
    }
#endif
    blocks_portable(st, p, nblocks);
}

void sha256_init(sha256_ctx *c) {
    static const uint32_t H0[8] = {0x6a09e667, 0xbb67ae85, 0x3c6ef372, 0xa54ff53a,
                                   0x510e527f, 0x9b05688c, 0x1f83d9ab, 0x5be0cd19};
    memcpy(c->h, H0, sizeof H0);
    c->len = 0, c->nbuf = 0;
}

void sha256_update(sha256_ctx *c, const void *data, size_t n) {
    const unsigned char *p = data;
    c->len += n;
    if (c->nbuf) {
        size_t k = 64 - c->nbuf < n ? 64 - c->nbuf : n;
        memcpy(c->buf + c->nbuf, p, k);
        c->nbuf += k, p += k, n -= k;
        if (c->nbuf < 64) return;
        blocks(c->h, c->buf, 1), c->nbuf = 0;
    }
    if (n >= 64) blocks(c->h, p, n / 64), p += n / 64 * 64, n %= 64;
    memcpy(c->buf, p, n);
    c->nbuf = n;
}

void sha256_hex(sha256_ctx *c, char hex[65]) {
    uint64_t bits = c->len * 8;
    unsigned char pad[72] = {0x80};
    size_t npad = (c->nbuf < 56 ? 56 : 120) - c->nbuf;
    for (int i = 0; i < 8; i++) pad[npad + (size_t)i] = (unsigned char)(bits >> (56 - 8 * i));
    sha256_update(c, pad, npad + 8);
    for (int i = 0; i < 8; i++) snprintf(hex + 8 * i, 9, "%08x", c->h[i]);
}

int sha256_file(const char *path, char hex[65], err *e) {
    FILE *f = fopen(path, "rb");
    if (!f) return err_set(e, "%s: %s", path, strerror(errno));
    size_t cap = (size_t)1 << 20;
    unsigned char *buf = malloc(cap);
    if (!buf) {
        fclose(f);
        return err_set(e, "%s: out of memory", path);
    }
    sha256_ctx c;
    sha256_init(&c);
    size_t n;
    while ((n = fread(buf, 1, cap, f)) > 0) sha256_update(&c, buf, n);
    int bad = ferror(f);
    fclose(f);
    free(buf);
    if (bad) return err_set(e, "%s: read error", path);
    sha256_hex(&c, hex);
    return 0;
}
