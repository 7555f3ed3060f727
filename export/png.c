/* png.c: PNG encoding through stb_image_write, plus provenance text chunks. */
#include "png.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <stb_image_write.h>

#include "../core/fileio.h"

/* A growing byte buffer for stb's write callback. */
typedef struct membuf {
    unsigned char *p;
    size_t n, cap;
    int failed;
} membuf;

static int buf_put(membuf *b, const void *data, size_t n) {
    if (b->failed) return -1;
    if (b->n + n > b->cap) {
        size_t cap = b->cap ? b->cap : 1 << 16;
        while (cap < b->n + n) cap *= 2;
        unsigned char *np = realloc(b->p, cap);
        if (!np) {
            b->failed = 1;
            return -1;
        }
        b->p = np, b->cap = cap;
    }
    memcpy(b->p + b->n, data, n);
    b->n += n;
    return 0;
}

static void on_write(void *ctx, void *data, int size) {
    buf_put(ctx, data, (size_t)size);
}

/* CRC-32 as PNG defines it (ISO 3309), bit by bit: chunks of text are small. */
static uint32_t crc_update(uint32_t crc, const unsigned char *p, size_t n) {
    for (size_t i = 0; i < n; i++) {
        crc ^= p[i];
        for (int k = 0; k < 8; k++) crc = (crc >> 1) ^ (0xEDB88320u & (0u - (crc & 1u)));
    }
    return crc;
}

static void be32(unsigned char *p, uint32_t v) {
    p[0] = (unsigned char)(v >> 24), p[1] = (unsigned char)(v >> 16);
    p[2] = (unsigned char)(v >> 8), p[3] = (unsigned char)v;
}

static uint32_t rd32(const unsigned char *p) {
    return (uint32_t)p[0] << 24 | (uint32_t)p[1] << 16 | (uint32_t)p[2] << 8 | p[3];
}

static int is_ascii(const char *s) {
    for (; *s; s++)
        if ((unsigned char)*s >= 0x80) return 0;
    return 1;
}

/* One tEXt chunk (key NUL value) or, for non-ASCII values, an iTXt chunk (key NUL 0 0 "" NUL ""
 * NUL value) that carries UTF-8. */
static int put_text(membuf *b, const char *key, const char *value) {
    size_t kl = strlen(key), vl = strlen(value);
    int itxt = !is_ascii(value);
    size_t len = kl + 1 + (itxt ? 4 : 0) + vl;
    unsigned char *chunk = malloc(len + 12);
    if (!chunk) return -1;
    be32(chunk, (uint32_t)len);
    memcpy(chunk + 4, itxt ? "iTXt" : "tEXt", 4);
    unsigned char *d = chunk + 8;
    memcpy(d, key, kl), d += kl, *d++ = 0;
    if (itxt) *d++ = 0, *d++ = 0, *d++ = 0, *d++ = 0; /* uncompressed, no language tag */
    memcpy(d, value, vl), d += vl;
    be32(d, crc_update(0xFFFFFFFFu, chunk + 4, len + 4) ^ 0xFFFFFFFFu);
    int rc = buf_put(b, chunk, len + 12);
    free(chunk);
    return rc;
}

static int key_ok(const char *k) {
    size_t n = strlen(k);
    if (n < 1 || n > 79 || k[0] == ' ' || k[n - 1] == ' ') return 0;
    for (; *k; k++)
        if ((unsigned char)*k < 32 || (unsigned char)*k > 126) return 0;
    return 1;
}

int png_encode(canvas *c, const png_text *text, int ntext, unsigned char **out, size_t *size,
               err *e) {
    membuf raw = {0};
    const uint8_t *px = canvas_pixels(c);
    if (!stbi_write_png_to_func(on_write, &raw, c->pw, c->ph, 4, px, c->pw * 4) || raw.failed) {
        free(raw.p);
        return err_set(e, "PNG encoding failed (out of memory?)");
    }
    /* signature (8) + IHDR (4 length + 4 type + 13 data + 4 crc) */
    const size_t ihdr_end = 8 + 25;
    if (raw.n < ihdr_end || memcmp(raw.p + 12, "IHDR", 4) != 0) {
        free(raw.p);
        return err_set(e, "PNG encoder produced an unexpected stream");
    }
    membuf b = {0};
    buf_put(&b, raw.p, ihdr_end);
    for (int i = 0; i < ntext; i++) {
        if (!text[i].key || !text[i].value) continue;
        if (!key_ok(text[i].key)) {
            free(raw.p), free(b.p);
            return err_set(e, "PNG text key '%.80s' is not 1-79 printable characters", text[i].key);
        }
        if (put_text(&b, text[i].key, text[i].value)) b.failed = 1;
    }
    buf_put(&b, raw.p + ihdr_end, raw.n - ihdr_end);
    free(raw.p);
    if (b.failed) {
        free(b.p);
        return err_set(e, "out of memory encoding PNG");
    }
    *out = b.p, *size = b.n;
    return 0;
}

int png_write(const char *path, canvas *c, const png_text *text, int ntext, err *e) {
    unsigned char *png;
    size_t n;
    if (png_encode(c, text, ntext, &png, &n, e)) return -1;
    int rc = file_write_atomic(path, png, n, e);
    free(png);
    return rc;
}

int png_find_text(const unsigned char *png, size_t size, const char *key, char *val, size_t n) {
    size_t kl = strlen(key);
    for (size_t o = 8; o + 12 <= size;) {
        uint32_t len = rd32(png + o);
        if (len > size - o - 12) return -1;
        const unsigned char *type = png + o + 4, *d = png + o + 8;
        int txt = !memcmp(type, "tEXt", 4), itx = !memcmp(type, "iTXt", 4);
        if ((txt || itx) && len > kl && !memcmp(d, key, kl) && d[kl] == 0) {
            size_t skip = kl + 1;
            if (itx) { /* flag, method, language NUL, translated keyword NUL */
                skip += 2;
                while (skip < len && d[skip]) skip++;
                skip++;
                while (skip < len && d[skip]) skip++;
                skip++;
            }
            size_t vl = skip <= len ? len - skip : 0;
            if (vl >= n) vl = n - 1;
            memcpy(val, d + skip, vl);
            val[vl] = 0;
            return 0;
        }
        if (!memcmp(type, "IEND", 4)) break;
        o += 12 + (size_t)len;
    }
    return -1;
}
