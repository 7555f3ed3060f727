#include "json_strict.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct scan {
    const unsigned char *s;
    size_t n, i;
    const char *why;
    int depth;
} scan;

static int fail(scan *c, const char *why) {
    if (!c->why) c->why = why;
    return -1;
}

static void ws(scan *c) {
    while (c->i < c->n &&
           (c->s[c->i] == ' ' || c->s[c->i] == '\t' || c->s[c->i] == '\n' || c->s[c->i] == '\r'))
        c->i++;
}

static int hex4(scan *c, unsigned *v) {
    if (c->i + 4 > c->n) return fail(c, "a short \\u escape");
    *v = 0;
    for (int k = 0; k < 4; k++) {
        unsigned char h = c->s[c->i++];
        unsigned d = h >= '0' && h <= '9'   ? (unsigned)(h - '0')
                     : h >= 'a' && h <= 'f' ? (unsigned)(h - 'a' + 10)
                     : h >= 'A' && h <= 'F' ? (unsigned)(h - 'A' + 10)
                                            : 99;
        if (d == 99) return fail(c, "a bad \\u escape");
        *v = *v * 16 + d;
    }
    return 0;
}

/* One UTF-8 sequence starting at c->i (a byte >= 0x80). */
static int utf8(scan *c) {
    const unsigned char *s = c->s;
    unsigned char b = s[c->i];
    int len;
    unsigned cp;
    if (b >= 0xc2 && b <= 0xdf)
        len = 2, cp = b & 0x1f;
    else if (b >= 0xe0 && b <= 0xef)
        len = 3, cp = b & 0x0f;
    else if (b >= 0xf0 && b <= 0xf4)
        len = 4, cp = b & 0x07;
    else
        return fail(c, "invalid UTF-8");
    if (c->i + (size_t)len > c->n) return fail(c, "invalid UTF-8 (cut short)");
    for (int k = 1; k < len; k++) {
        unsigned char t = s[c->i + (size_t)k];
        if ((t & 0xc0) != 0x80) return fail(c, "invalid UTF-8");
        cp = cp << 6 | (t & 0x3f);
    }
    if ((len == 3 && cp < 0x800) || (len == 4 && cp < 0x10000) || cp > 0x10ffff ||
        (cp >= 0xd800 && cp <= 0xdfff))
        return fail(c, "invalid UTF-8 (overlong or a surrogate)");
    c->i += (size_t)len;
    return 0;
}

static int string(scan *c) {
    c->i++; /* the opening quote */
    while (c->i < c->n) {
        unsigned char b = c->s[c->i];
        if (b == '"') {
            c->i++;
            return 0;
        }
        if (b < 0x20) return fail(c, b ? "a raw control character in a string" : "a NUL byte");
        if (b == '\\') {
            size_t esc = c->i; /* a fault inside the escape is reported at its backslash */
            if (++c->i >= c->n) break;
            unsigned char x = c->s[c->i++];
            if (x == 'u') {
                unsigned v;
                if (hex4(c, &v)) return -1;
                if (v == 0) return c->i = esc, fail(c, "\\u0000 in a string");
                if (v >= 0xdc00 && v <= 0xdfff) return c->i = esc, fail(c, "an unpaired surrogate");
                if (v >= 0xd800 && v <= 0xdbff) {
                    unsigned w;
                    if (c->i + 2 > c->n || c->s[c->i] != '\\' || c->s[c->i + 1] != 'u')
                        return c->i = esc, fail(c, "an unpaired surrogate");
                    c->i += 2;
                    if (hex4(c, &w)) return -1;
                    if (w < 0xdc00 || w > 0xdfff)
                        return c->i = esc, fail(c, "an unpaired surrogate");
                }
            } else if (!strchr("\"\\/bfnrt", x) || !x) {
                return fail(c, "a bad escape");
            }
            continue;
        }
        if (b >= 0x80) {
            if (utf8(c)) return -1;
            continue;
        }
        c->i++;
    }
    return fail(c, "an unterminated string");
}

static int number(scan *c) {
    size_t i = c->i;
    const unsigned char *s = c->s;
    if (i < c->n && s[i] == '-') i++;
    if (i >= c->n) return fail(c, "a bad number");
    if (s[i] == '0') {
        i++;
        if (i < c->n && s[i] >= '0' && s[i] <= '9') return fail(c, "a number with a leading zero");
    } else if (s[i] >= '1' && s[i] <= '9') {
        while (i < c->n && s[i] >= '0' && s[i] <= '9') i++;
    } else {
        return fail(c, "a bad number");
    }
    if (i < c->n && s[i] == '.') {
        i++;
        if (i >= c->n || s[i] < '0' || s[i] > '9') return fail(c, "a bad number");
        while (i < c->n && s[i] >= '0' && s[i] <= '9') i++;
    }
    if (i < c->n && (s[i] == 'e' || s[i] == 'E')) {
        i++;
        if (i < c->n && (s[i] == '+' || s[i] == '-')) i++;
        if (i >= c->n || s[i] < '0' || s[i] > '9') return fail(c, "a bad number");
        while (i < c->n && s[i] >= '0' && s[i] <= '9') i++;
    }
    c->i = i;
    return 0;
}

static int literal(scan *c, const char *w) {
    size_t l = strlen(w);
    if (c->i + l > c->n || memcmp(c->s + c->i, w, l) != 0) return fail(c, "an unexpected token");
    c->i += l;
    return 0;
}

typedef struct span {
    size_t at, len;
} span;

static const unsigned char *g_base; /* for the key comparison (qsort has no context) */

static int cmp_span(const void *a, const void *b) {
    const span *x = a, *y = b;
    size_t m = x->len < y->len ? x->len : y->len;
    int r = memcmp(g_base + x->at, g_base + y->at, m);
    return r ? r : (x->len > y->len) - (x->len < y->len);
}

static int value(scan *c);

static int object(scan *c) {
    c->i++;
    span *keys = NULL;
    size_t nk = 0, cap = 0;
    ws(c);
    if (c->i < c->n && c->s[c->i] == '}') {
        c->i++;
        return 0;
    }
    int rc = -1;
    for (;;) {
        ws(c);
        if (c->i >= c->n || c->s[c->i] != '"') {
            fail(c, "an object key that is not a string");
            break;
        }
        size_t k0 = c->i;
        if (string(c)) break;
        if (nk == cap) {
            size_t nc = cap ? cap * 2 : 16;
            span *nkeys = realloc(keys, nc * sizeof *keys);
            if (!nkeys) {
                fail(c, "out of memory");
                break;
            }
            keys = nkeys, cap = nc;
        }
        keys[nk++] = (span){k0, c->i - k0};
        ws(c);
        if (c->i >= c->n || c->s[c->i] != ':') {
            fail(c, "a missing ':'");
            break;
        }
        c->i++;
        if (value(c)) break;
        ws(c);
        if (c->i < c->n && c->s[c->i] == ',') {
            c->i++;
            continue;
        }
        if (c->i < c->n && c->s[c->i] == '}') {
            c->i++;
            rc = 0;
            break;
        }
        fail(c, "a missing ',' or '}'");
        break;
    }
    if (!rc && nk > 1) { /* a key twice: the last would win in Python, the first in cJSON */
        g_base = c->s;
        qsort(keys, nk, sizeof *keys, cmp_span);
        for (size_t i = 1; i < nk; i++)
            if (!cmp_span(&keys[i], &keys[i - 1])) {
                c->i = keys[i].at;
                rc = fail(c, "a key twice in one object");
                break;
            }
    }
    free(keys);
    return rc;
}

static int array(scan *c) {
    c->i++;
    ws(c);
    if (c->i < c->n && c->s[c->i] == ']') {
        c->i++;
        return 0;
    }
    for (;;) {
        if (value(c)) return -1;
        ws(c);
        if (c->i < c->n && c->s[c->i] == ',') {
            c->i++;
            continue;
        }
        if (c->i < c->n && c->s[c->i] == ']') {
            c->i++;
            return 0;
        }
        return fail(c, "a missing ',' or ']'");
    }
}

static int value(scan *c) {
    ws(c);
    if (c->i >= c->n) return fail(c, "a missing value");
    if (++c->depth > 512) return fail(c, "nesting deeper than 512");
    int rc;
    switch (c->s[c->i]) {
    case '{':
        rc = object(c);
        break;
    case '[':
        rc = array(c);
        break;
    case '"':
        rc = string(c);
        break;
    case 't':
        rc = literal(c, "true");
        break;
    case 'f':
        rc = literal(c, "false");
        break;
    case 'n':
        rc = literal(c, "null");
        break;
    default:
        rc = number(c);
    }
    c->depth--;
    return rc;
}

int json_strict_check(const char *text, size_t n, size_t *at, char *why, size_t why_n) {
    scan c = {(const unsigned char *)text, n, 0, NULL, 0};
    int rc = 0;
    if (n >= 3 && !memcmp(text, "\xef\xbb\xbf", 3))
        rc = fail(&c, "a byte-order mark");
    else if (value(&c))
        rc = -1;
    else {
        ws(&c);
        if (c.i < n) rc = fail(&c, c.s[c.i] ? "something after the value" : "a NUL byte");
    }
    if (rc) {
        if (at) *at = c.i;
        if (why && why_n) snprintf(why, why_n, "%s", c.why ? c.why : "invalid JSON");
    }
    return rc;
}
