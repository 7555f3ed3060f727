/* hf.c: tokenizer.json (hf.h). */
#define PCRE2_CODE_UNIT_WIDTH 8
#include "hf.h"

#include <pcre2.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cjson/cJSON.h>

#include "../core/fileio.h"
#include "../core/json_strict.h"

#define HF_MAX_FILE  (256u << 20)
#define HF_MAX_STEPS 16

/* ---- growable buffers ---- */

typedef struct sbuf {
    char *p;
    size_t n, cap;
} sbuf;

static int sb_put(sbuf *b, const char *s, size_t n) {
    if (b->n + n + 1 > b->cap) {
        size_t cap = b->cap ? b->cap : 64;
        while (cap < b->n + n + 1) cap *= 2;
        char *q = realloc(b->p, cap);
        if (!q) return -1;
        b->p = q, b->cap = cap;
    }
    memcpy(b->p + b->n, s, n);
    b->n += n;
    b->p[b->n] = '\0';
    return 0;
}

/* A list of owned strings (the pieces of a pre-tokenization, the tokens of a decode). */
typedef struct slist {
    char **s;
    size_t *len;
    int *first; /* the piece starts the input (Metaspace's prepend_scheme=first) */
    int n, cap;
} slist;

static int sl_push(slist *l, const char *s, size_t n, int first) {
    if (l->n == l->cap) {
        int cap = l->cap ? 2 * l->cap : 16;
        char **ns = realloc(l->s, (size_t)cap * sizeof *ns);
        if (!ns) return -1;
        l->s = ns;
        size_t *nl = realloc(l->len, (size_t)cap * sizeof *nl);
        if (!nl) return -1;
        l->len = nl;
        int *nf = realloc(l->first, (size_t)cap * sizeof *nf);
        if (!nf) return -1;
        l->first = nf, l->cap = cap;
    }
    char *c = malloc(n + 1);
    if (!c) return -1;
    memcpy(c, s, n);
    c[n] = '\0';
    l->s[l->n] = c, l->len[l->n] = n, l->first[l->n] = first;
    l->n++;
    return 0;
}

static void sl_free(slist *l) {
    for (int i = 0; i < l->n; i++) free(l->s[i]);
    free(l->s), free(l->len), free(l->first);
    memset(l, 0, sizeof *l);
}

/* ---- UTF-8 ---- */

/* Bytes of the UTF-8 sequence starting at s (1 for an invalid lead byte or a short tail). */
static int u8_len(const unsigned char *s, size_t left) {
    int n = s[0] < 0x80         ? 1
            : (s[0] >> 5) == 6  ? 2
            : (s[0] >> 4) == 14 ? 3
            : (s[0] >> 3) == 30 ? 4
                                : 1;
    if ((size_t)n > left) return 1;
    for (int i = 1; i < n; i++)
        if ((s[i] & 0xC0) != 0x80) return 1;
    return n;
}

static int u8_put(char *out, unsigned cp) {
    if (cp < 0x80) return out[0] = (char)cp, 1;
    if (cp < 0x800) return out[0] = (char)(0xC0 | cp >> 6), out[1] = (char)(0x80 | (cp & 63)), 2;
    if (cp < 0x10000)
        return out[0] = (char)(0xE0 | cp >> 12), out[1] = (char)(0x80 | ((cp >> 6) & 63)),
               out[2] = (char)(0x80 | (cp & 63)), 3;
    return out[0] = (char)(0xF0 | cp >> 18), out[1] = (char)(0x80 | ((cp >> 12) & 63)),
           out[2] = (char)(0x80 | ((cp >> 6) & 63)), out[3] = (char)(0x80 | (cp & 63)), 4;
}

static unsigned u8_get(const unsigned char *s, int n) {
    if (n == 1) return s[0];
    if (n == 2) return (unsigned)(s[0] & 31) << 6 | (s[1] & 63);
    if (n == 3) return (unsigned)(s[0] & 15) << 12 | (unsigned)(s[1] & 63) << 6 | (s[2] & 63);
    return (unsigned)(s[0] & 7) << 18 | (unsigned)(s[1] & 63) << 12 | (unsigned)(s[2] & 63) << 6 |
           (s[3] & 63);
}

/* The length of the valid UTF-8 sequence at s (0: invalid here), and of the maximal invalid
 * prefix Rust's from_utf8_lossy replaces by one U+FFFD. */
static size_t u8_valid(const unsigned char *s, size_t left, size_t *bad) {
    unsigned c = s[0];
    size_t need;
    unsigned lo = 0x80, hi = 0xBF;
    if (c < 0x80) return 1;
    if (c >= 0xC2 && c <= 0xDF)
        need = 1;
    else if (c >= 0xE0 && c <= 0xEF) {
        need = 2;
        if (c == 0xE0) lo = 0xA0;
        if (c == 0xED) hi = 0x9F;
    } else if (c >= 0xF0 && c <= 0xF4) {
        need = 3;
        if (c == 0xF0) lo = 0x90;
        if (c == 0xF4) hi = 0x8F;
    } else {
        *bad = 1;
        return 0;
    }
    size_t i = 1;
    for (; i <= need; i++) {
        if (i >= left) break;
        unsigned b = s[i];
        if (b < (i == 1 ? lo : 0x80) || b > (i == 1 ? hi : 0xBF)) break;
    }
    if (i == need + 1) return need + 1;
    *bad = i;
    return 0;
}

static int lossy_append(sbuf *b, const unsigned char *s, size_t n) {
    for (size_t i = 0; i < n;) {
        size_t bad = 0, v = u8_valid(s + i, n - i, &bad);
        if (v) {
            if (sb_put(b, (const char *)s + i, v)) return -1;
            i += v;
        } else {
            if (sb_put(b, "\xEF\xBF\xBD", 3)) return -1;
            i += bad ? bad : 1;
        }
    }
    return 0;
}

/* ---- GPT-2's byte <-> printable character map ---- */

static unsigned g_b2u[256];
static int g_u2b_ready;

static void byte_map_init(void) {
    if (g_u2b_ready) return;
    int n = 0;
    for (int b = 0; b < 256; b++) {
        int keep = (b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE && b <= 0xFF);
        g_b2u[b] = keep ? (unsigned)b : (unsigned)(256 + n++);
    }
    g_u2b_ready = 1;
}

/* The byte a mapped character stands for, or -1. */
static int u2b(unsigned cp) {
    if (cp < 256 && g_b2u[cp] == cp) return (int)cp;
    for (int b = 0; b < 256; b++)
        if (g_b2u[b] == cp) return b;
    return -1;
}

/* ---- hash maps ---- */

static uint64_t fnv(const char *s, size_t n) {
    uint64_t h = 1469598103934665603ull;
    for (size_t i = 0; i < n; i++) h = (h ^ (unsigned char)s[i]) * 1099511628211ull;
    return h;
}

typedef struct merge_ent {
    uint64_t key; /* a << 32 | b, + 1 (0: empty) */
    int rank, id;
} merge_ent;

typedef enum { N_PREPEND, N_REPLACE, N_STRIP } norm_kind;

typedef struct regex {
    pcre2_code *code; /* NULL: a literal */
    char *lit;
    size_t lit_n;
} regex;

typedef struct norm_step {
    norm_kind kind;
    char *text;    /* prepend / replacement content */
    regex pattern; /* replace */
    int left, right;
} norm_step;

typedef enum { P_BYTELEVEL, P_SPLIT, P_METASPACE, P_DIGITS, P_WHITESPACE, P_WSSPLIT } pre_kind;

enum { B_ISOLATED, B_REMOVED, B_PREV, B_NEXT, B_CONTIGUOUS };

typedef struct pre_step {
    pre_kind kind;
    regex pattern;
    int behavior, invert;
    int prefix_space, use_regex; /* ByteLevel */
    char repl[8];                /* Metaspace */
    int scheme;                  /* 0 always, 1 first, 2 never */
    int split;                   /* Metaspace */
    int individual;              /* Digits */
} pre_step;

typedef enum { D_BYTELEVEL, D_REPLACE, D_BYTEFALLBACK, D_FUSE, D_STRIP, D_METASPACE } dec_kind;

typedef struct dec_step {
    dec_kind kind;
    char *pat, *content; /* replace */
    char strip[8];
    int start, stop;
    char repl[8];
    int scheme;
} dec_step;

typedef struct added {
    char *content;
    size_t n;
    int id, special, lstrip, rstrip;
} added;

/* one piece of a template: a special token's ids, or the sequence */
typedef struct tpl_item {
    int seq;
    int32_t ids[4];
    int nids;
} tpl_item;

struct hf_tok {
    char path[1024];
    int nvocab; /* ids 0..nvocab-1 */
    char **tok; /* [nvocab] the token strings (NULL: a gap) */
    int *table; /* string hash -> id, open addressing; -1 empty */
    size_t tmask;
    merge_ent *merges;
    size_t mmask;
    int unk, byte_fallback, fuse_unk, ignore_merges;
    int32_t bytetok[256]; /* <0xXX> ids, -1 absent */
    added *add;
    int nadd;
    norm_step norm[HF_MAX_STEPS];
    int nnorm;
    pre_step pre[HF_MAX_STEPS];
    int npre;
    tpl_item tpl[16];
    int ntpl, has_tpl;
    dec_step dec[HF_MAX_STEPS];
    int ndec, dec_none;
};

static int vocab_find(const hf_tok *t, const char *s, size_t n) {
    for (size_t i = fnv(s, n) & t->tmask;; i = (i + 1) & t->tmask) {
        int id = t->table[i];
        if (id < 0) return -1;
        if (strlen(t->tok[id]) == n && !memcmp(t->tok[id], s, n)) return id;
    }
}

static int vocab_insert(hf_tok *t, int id) {
    const char *s = t->tok[id];
    size_t n = strlen(s);
    for (size_t i = fnv(s, n) & t->tmask;; i = (i + 1) & t->tmask) {
        if (t->table[i] < 0) return t->table[i] = id, 0;
        if (!strcmp(t->tok[t->table[i]], s)) return 0; /* a duplicate string: the first id wins */
    }
}

static const merge_ent *merge_find(const hf_tok *t, int a, int b) {
    uint64_t key = ((uint64_t)(uint32_t)a << 32 | (uint32_t)b) + 1;
    for (size_t i = (key * 0x9E3779B97F4A7C15ull >> 20) & t->mmask;; i = (i + 1) & t->mmask) {
        if (!t->merges[i].key) return NULL;
        if (t->merges[i].key == key) return &t->merges[i];
    }
}

/* ---- regular expressions ---- */

static int regex_compile(regex *r, const cJSON *pat, const char *what, err *e) {
    memset(r, 0, sizeof *r);
    const cJSON *s = cJSON_GetObjectItemCaseSensitive(pat, "String");
    const cJSON *x = cJSON_GetObjectItemCaseSensitive(pat, "Regex");
    if (cJSON_IsString(s)) {
        r->lit = strdup(s->valuestring), r->lit_n = strlen(s->valuestring);
        return r->lit ? 0 : err_set(e, "out of memory");
    }
    if (!cJSON_IsString(x)) return err_set(e, "%s: pattern is neither String nor Regex", what);
    int code;
    PCRE2_SIZE off;
    r->code = pcre2_compile((PCRE2_SPTR)x->valuestring, PCRE2_ZERO_TERMINATED,
                            PCRE2_UTF | PCRE2_UCP | PCRE2_NO_UTF_CHECK, &code, &off, NULL);
    if (!r->code) {
        PCRE2_UCHAR msg[160];
        pcre2_get_error_message(code, msg, sizeof msg);
        return err_set(e, "%s: regex at offset %zu: %s", what, (size_t)off, (char *)msg);
    }
    pcre2_jit_compile(r->code, PCRE2_JIT_COMPLETE); /* optional: falls back to the interpreter */
    return 0;
}

static void regex_free(regex *r) {
    if (r->code) pcre2_code_free(r->code);
    free(r->lit);
}

/* The matches of r in s[0..n): starts and ends into *m (pairs), *nm of them. */
static int regex_all(const regex *r, const char *s, size_t n, size_t **m, int *nm) {
    *m = NULL, *nm = 0;
    int cap = 0;
    size_t at = 0;
    pcre2_match_data *md = r->code ? pcre2_match_data_create_from_pattern(r->code, NULL) : NULL;
    if (r->code && !md) return -1;
    while (at <= n) {
        size_t a, b;
        if (r->code) {
            int rc = pcre2_match(r->code, (PCRE2_SPTR)s, n, at, PCRE2_NO_UTF_CHECK, md, NULL);
            if (rc < 0) break;
            PCRE2_SIZE *ov = pcre2_get_ovector_pointer(md);
            a = ov[0], b = ov[1];
        } else {
            if (!r->lit_n) break;
            const char *f = NULL;
            for (size_t i = at; i + r->lit_n <= n; i++)
                if (!memcmp(s + i, r->lit, r->lit_n)) {
                    f = s + i;
                    break;
                }
            if (!f) break;
            a = (size_t)(f - s), b = a + r->lit_n;
        }
        if (b == a) { /* an empty match: step over one character */
            at = a + (a < n ? (size_t)u8_len((const unsigned char *)s + a, n - a) : 1);
            continue;
        }
        if (*nm == cap) {
            cap = cap ? 2 * cap : 16;
            size_t *q = realloc(*m, (size_t)cap * 2 * sizeof *q);
            if (!q) {
                if (md) pcre2_match_data_free(md);
                return -1;
            }
            *m = q;
        }
        (*m)[2 * *nm] = a, (*m)[2 * *nm + 1] = b, (*nm)++;
        at = b;
    }
    if (md) pcre2_match_data_free(md);
    return 0;
}

/* Splits s by the matches of r with a split behaviour into out. */
static int split_by(const regex *r, int behavior, int invert, const char *s, size_t n, int first,
                    slist *out) {
    size_t *m;
    int nm;
    if (regex_all(r, s, n, &m, &nm)) return -1;
    /* the segments in order, each a match or not */
    int ns = 0;
    size_t *seg = malloc((size_t)(2 * nm + 1) * 3 * sizeof *seg); /* start, end, is_match */
    if (!seg) return free(m), -1;
    size_t at = 0;
    for (int i = 0; i < nm; i++) {
        if (m[2 * i] > at) seg[3 * ns] = at, seg[3 * ns + 1] = m[2 * i], seg[3 * ns + 2] = 0, ns++;
        seg[3 * ns] = m[2 * i], seg[3 * ns + 1] = m[2 * i + 1], seg[3 * ns + 2] = 1, ns++;
        at = m[2 * i + 1];
    }
    if (at < n) seg[3 * ns] = at, seg[3 * ns + 1] = n, seg[3 * ns + 2] = 0, ns++;
    free(m);
    if (invert)
        for (int i = 0; i < ns; i++) seg[3 * i + 2] = !seg[3 * i + 2];
    int rc = 0;
    size_t ps = 0, pe = 0; /* a pending piece [ps, pe) */
    int pending = 0;
#define FLUSH()                                                                                    \
    do {                                                                                           \
        if (pending && pe > ps) rc |= sl_push(out, s + ps, pe - ps, first && ps == 0);             \
        pending = 0;                                                                               \
    } while (0)
    for (int i = 0; i < ns && !rc; i++) {
        size_t a = seg[3 * i], b = seg[3 * i + 1];
        int match = (int)seg[3 * i + 2];
        switch (behavior) {
        case B_REMOVED:
            if (!match) rc |= sl_push(out, s + a, b - a, first && a == 0);
            break;
        case B_PREV:
            if (match && pending) {
                pe = b;
                FLUSH();
            } else {
                FLUSH();
                ps = a, pe = b, pending = 1;
                if (match) FLUSH();
            }
            break;
        case B_NEXT:
            if (match) {
                FLUSH();
                ps = a, pe = b, pending = 1;
            } else if (pending) {
                pe = b;
                FLUSH();
            } else {
                rc |= sl_push(out, s + a, b - a, first && a == 0);
            }
            break;
        case B_CONTIGUOUS:
            if (match && pending) {
                pe = b;
            } else {
                FLUSH();
                ps = a, pe = b, pending = match;
                if (!match) rc |= sl_push(out, s + a, b - a, first && a == 0);
            }
            break;
        default: /* isolated */
            rc |= sl_push(out, s + a, b - a, first && a == 0);
        }
    }
    FLUSH();
#undef FLUSH
    free(seg);
    return rc;
}

/* ---- loading ---- */

static const cJSON *item(const cJSON *o, const char *k) {
    return cJSON_GetObjectItemCaseSensitive(o, k);
}

static const char *type_of(const cJSON *o) {
    const cJSON *t = item(o, "type");
    return cJSON_IsString(t) ? t->valuestring : "";
}

static int flag(const cJSON *o, const char *k, int def) {
    const cJSON *v = item(o, k);
    return cJSON_IsBool(v) ? cJSON_IsTrue(v) : def;
}

static int add_norm(hf_tok *t, const cJSON *n, err *e) {
    if (!n || cJSON_IsNull(n)) return 0;
    const char *ty = type_of(n);
    if (!strcmp(ty, "Sequence")) {
        const cJSON *x;
        cJSON_ArrayForEach(x, item(n, "normalizers")) if (add_norm(t, x, e)) return -1;
        return 0;
    }
    if (t->nnorm == HF_MAX_STEPS) return err_set(e, "normalizer: more than %d steps", HF_MAX_STEPS);
    norm_step *s = &t->norm[t->nnorm];
    memset(s, 0, sizeof *s);
    if (!strcmp(ty, "Prepend")) {
        const cJSON *p = item(n, "prepend");
        if (!cJSON_IsString(p)) return err_set(e, "normalizer Prepend: no prepend string");
        s->kind = N_PREPEND, s->text = strdup(p->valuestring);
    } else if (!strcmp(ty, "Replace")) {
        const cJSON *c = item(n, "content");
        if (!cJSON_IsString(c)) return err_set(e, "normalizer Replace: no content");
        s->kind = N_REPLACE, s->text = strdup(c->valuestring);
        if (regex_compile(&s->pattern, item(n, "pattern"), "normalizer Replace", e)) return -1;
    } else if (!strcmp(ty, "Strip")) {
        s->kind = N_STRIP, s->left = flag(n, "strip_left", 1), s->right = flag(n, "strip_right", 1);
    } else {
        return err_set(e,
                       "normalizer %s is not supported (Sequence, Prepend, Replace and Strip are; "
                       "Unicode normal forms and case folding are not)",
                       ty[0] ? ty : "(no type)");
    }
    t->nnorm++;
    return 0;
}

static const char *GPT2_PATTERN =
    "'s|'t|'re|'ve|'m|'ll|'d| ?\\p{L}+| ?\\p{N}+| ?[^\\s\\p{L}\\p{N}]+|\\s+(?!\\S)|\\s+";

static int behavior_of(const cJSON *o, int *b, err *e) {
    const cJSON *v = item(o, "behavior");
    const char *s = cJSON_IsString(v) ? v->valuestring : "Isolated";
    static const char *const names[] = {"Isolated", "Removed", "MergedWithPrevious",
                                        "MergedWithNext", "Contiguous"};
    for (int i = 0; i < 5; i++)
        if (!strcmp(s, names[i])) return *b = i, 0;
    return err_set(e, "pre-tokenizer Split: behavior '%s' unknown", s);
}

static int add_pre(hf_tok *t, const cJSON *p, err *e) {
    if (!p || cJSON_IsNull(p)) return 0;
    const char *ty = type_of(p);
    if (!strcmp(ty, "Sequence")) {
        const cJSON *x;
        cJSON_ArrayForEach(x, item(p, "pretokenizers")) if (add_pre(t, x, e)) return -1;
        return 0;
    }
    if (t->npre == HF_MAX_STEPS)
        return err_set(e, "pre-tokenizer: more than %d steps", HF_MAX_STEPS);
    pre_step *s = &t->pre[t->npre];
    memset(s, 0, sizeof *s);
    if (!strcmp(ty, "ByteLevel")) {
        s->kind = P_BYTELEVEL, s->prefix_space = flag(p, "add_prefix_space", 1);
        s->use_regex = flag(p, "use_regex", 1);
        if (s->use_regex) {
            cJSON *pat = cJSON_CreateObject();
            cJSON_AddStringToObject(pat, "Regex", GPT2_PATTERN);
            int rc = regex_compile(&s->pattern, pat, "pre-tokenizer ByteLevel", e);
            cJSON_Delete(pat);
            if (rc) return -1;
        }
    } else if (!strcmp(ty, "Split")) {
        s->kind = P_SPLIT, s->invert = flag(p, "invert", 0);
        if (behavior_of(p, &s->behavior, e) ||
            regex_compile(&s->pattern, item(p, "pattern"), "pre-tokenizer Split", e))
            return -1;
    } else if (!strcmp(ty, "Metaspace")) {
        const cJSON *r = item(p, "replacement"), *sc = item(p, "prepend_scheme");
        s->kind = P_METASPACE, s->split = flag(p, "split", 1);
        snprintf(s->repl, sizeof s->repl, "%s",
                 cJSON_IsString(r) ? r->valuestring : "\xE2\x96\x81");
        const char *scheme = cJSON_IsString(sc)               ? sc->valuestring
                             : flag(p, "add_prefix_space", 1) ? "always"
                                                              : "never";
        s->scheme = !strcmp(scheme, "first") ? 1 : !strcmp(scheme, "never") ? 2 : 0;
    } else if (!strcmp(ty, "Digits")) {
        s->kind = P_DIGITS, s->individual = flag(p, "individual_digits", 0);
        cJSON *pat = cJSON_CreateObject();
        cJSON_AddStringToObject(pat, "Regex", "\\p{N}");
        int rc = regex_compile(&s->pattern, pat, "pre-tokenizer Digits", e);
        cJSON_Delete(pat);
        if (rc) return -1;
        s->behavior = s->individual ? B_ISOLATED : B_CONTIGUOUS;
    } else if (!strcmp(ty, "Whitespace") || !strcmp(ty, "WhitespaceSplit")) {
        int ws = !strcmp(ty, "WhitespaceSplit");
        s->kind = ws ? P_WSSPLIT : P_WHITESPACE;
        cJSON *pat = cJSON_CreateObject();
        cJSON_AddStringToObject(pat, "Regex", ws ? "\\s+" : "\\w+|[^\\w\\s]+");
        int rc = regex_compile(&s->pattern, pat, "pre-tokenizer Whitespace", e);
        cJSON_Delete(pat);
        if (rc) return -1;
        s->behavior = B_REMOVED, s->invert = !ws;
    } else {
        return err_set(e,
                       "pre-tokenizer %s is not supported (ByteLevel, Split, Metaspace, Digits, "
                       "Whitespace, WhitespaceSplit and Sequence are)",
                       ty[0] ? ty : "(no type)");
    }
    t->npre++;
    return 0;
}

static int add_dec(hf_tok *t, const cJSON *d, err *e) {
    if (!d || cJSON_IsNull(d)) return 0;
    const char *ty = type_of(d);
    if (!strcmp(ty, "Sequence")) {
        const cJSON *x;
        cJSON_ArrayForEach(x, item(d, "decoders")) if (add_dec(t, x, e)) return -1;
        return 0;
    }
    if (t->ndec == HF_MAX_STEPS) return err_set(e, "decoder: more than %d steps", HF_MAX_STEPS);
    dec_step *s = &t->dec[t->ndec];
    memset(s, 0, sizeof *s);
    if (!strcmp(ty, "ByteLevel")) {
        s->kind = D_BYTELEVEL;
    } else if (!strcmp(ty, "Replace")) {
        const cJSON *pat = item(item(d, "pattern"), "String"), *c = item(d, "content");
        if (!cJSON_IsString(pat) || !cJSON_IsString(c))
            return err_set(e, "decoder Replace: only a String pattern and content are supported");
        s->kind = D_REPLACE, s->pat = strdup(pat->valuestring), s->content = strdup(c->valuestring);
    } else if (!strcmp(ty, "ByteFallback")) {
        s->kind = D_BYTEFALLBACK;
    } else if (!strcmp(ty, "Fuse")) {
        s->kind = D_FUSE;
    } else if (!strcmp(ty, "Strip")) {
        const cJSON *c = item(d, "content"), *a = item(d, "start"), *b = item(d, "stop");
        s->kind = D_STRIP;
        snprintf(s->strip, sizeof s->strip, "%s", cJSON_IsString(c) ? c->valuestring : " ");
        s->start = cJSON_IsNumber(a) ? a->valueint : 0,
        s->stop = cJSON_IsNumber(b) ? b->valueint : 0;
    } else if (!strcmp(ty, "Metaspace")) {
        const cJSON *r = item(d, "replacement"), *sc = item(d, "prepend_scheme");
        s->kind = D_METASPACE;
        snprintf(s->repl, sizeof s->repl, "%s",
                 cJSON_IsString(r) ? r->valuestring : "\xE2\x96\x81");
        const char *scheme = cJSON_IsString(sc)               ? sc->valuestring
                             : flag(d, "add_prefix_space", 1) ? "always"
                                                              : "never";
        s->scheme = !strcmp(scheme, "never") ? 2 : 0;
    } else {
        return err_set(
            e,
            "decoder %s is not supported (ByteLevel, Replace, ByteFallback, Fuse, Strip, "
            "Metaspace and Sequence are)",
            ty[0] ? ty : "(no type)");
    }
    t->ndec++;
    return 0;
}

/* The ids of a special token named in a template ("<s>"), from the processor's map. */
static int tpl_special(hf_tok *t, const cJSON *proc, const char *name, tpl_item *it, err *e) {
    const cJSON *sp = item(item(proc, "special_tokens"), name), *ids = item(sp, "ids"), *x;
    it->seq = 0, it->nids = 0;
    if (cJSON_IsArray(ids)) {
        cJSON_ArrayForEach(x, ids) {
            if (!cJSON_IsNumber(x) || it->nids == 4)
                return err_set(e, "template: bad ids of %s", name);
            it->ids[it->nids++] = (int32_t)x->valuedouble;
        }
        return 0;
    }
    int id = vocab_find(t, name, strlen(name));
    if (id < 0) return err_set(e, "template: special token '%s' has no id", name);
    it->ids[it->nids++] = id;
    return 0;
}

static int add_post(hf_tok *t, const cJSON *p, err *e) {
    if (!p || cJSON_IsNull(p)) return 0;
    const char *ty = type_of(p);
    if (!strcmp(ty, "Sequence")) {
        const cJSON *x;
        cJSON_ArrayForEach(x, item(p, "processors")) if (add_post(t, x, e)) return -1;
        return 0;
    }
    if (!strcmp(ty, "ByteLevel")) return 0; /* offsets only */
    if (t->has_tpl) return err_set(e, "post-processor: more than one template");
    if (!strcmp(ty, "TemplateProcessing")) {
        const cJSON *x;
        cJSON_ArrayForEach(x, item(p, "single")) {
            if (t->ntpl == 16) return err_set(e, "template: more than 16 pieces");
            tpl_item *it = &t->tpl[t->ntpl];
            const cJSON *st = item(x, "SpecialToken"), *sq = item(x, "Sequence");
            if (sq) {
                it->seq = 1;
            } else if (st && cJSON_IsString(item(st, "id"))) {
                if (tpl_special(t, p, item(st, "id")->valuestring, it, e)) return -1;
            } else {
                return err_set(e, "template: a piece that is neither SpecialToken nor Sequence");
            }
            t->ntpl++;
        }
        t->has_tpl = 1;
        return 0;
    }
    if (!strcmp(ty, "RobertaProcessing") || !strcmp(ty, "BertProcessing")) {
        const cJSON *cls = item(p, "cls"), *sep = item(p, "sep");
        if (!cJSON_IsArray(cls) || !cJSON_IsArray(sep) || cJSON_GetArraySize(cls) != 2 ||
            cJSON_GetArraySize(sep) != 2)
            return err_set(e, "post-processor %s: cls and sep must be [token, id]", ty);
        t->tpl[0] = (tpl_item){
            .seq = 0, .ids = {(int32_t)cJSON_GetArrayItem(cls, 1)->valuedouble}, .nids = 1};
        t->tpl[1] = (tpl_item){.seq = 1};
        t->tpl[2] = (tpl_item){
            .seq = 0, .ids = {(int32_t)cJSON_GetArrayItem(sep, 1)->valuedouble}, .nids = 1};
        t->ntpl = 3, t->has_tpl = 1;
        return 0;
    }
    return err_set(e,
                   "post-processor %s is not supported (TemplateProcessing, RobertaProcessing, "
                   "BertProcessing, ByteLevel and Sequence are)",
                   ty[0] ? ty : "(no type)");
}

static int load_model(hf_tok *t, const cJSON *m, const cJSON *added_tokens, err *e) {
    if (!cJSON_IsObject(m)) return err_set(e, "no model object");
    if (strcmp(type_of(m), "BPE") && !(item(m, "merges") && !item(m, "type")))
        return err_set(e, "model type '%s' is not supported (BPE is)", type_of(m));
    const cJSON *csp = item(m, "continuing_subword_prefix"), *eow = item(m, "end_of_word_suffix");
    if ((cJSON_IsString(csp) && csp->valuestring[0]) ||
        (cJSON_IsString(eow) && eow->valuestring[0]))
        return err_set(e,
                       "BPE with continuing_subword_prefix or end_of_word_suffix is not supported");
    const cJSON *dr = item(m, "dropout");
    if (cJSON_IsNumber(dr) && dr->valuedouble > 0)
        return err_set(e, "BPE dropout (%g) is for training; not supported", dr->valuedouble);
    const cJSON *vocab = item(m, "vocab"), *x;
    if (!cJSON_IsObject(vocab)) return err_set(e, "model: no vocab object");
    int maxid = -1;
    cJSON_ArrayForEach(x, vocab) {
        if (!cJSON_IsNumber(x) || x->valuedouble < 0 || x->valuedouble > 16777215 ||
            x->valuedouble != (int)x->valuedouble)
            return err_set(e, "vocab: token '%.40s' has no id in 0..2^24", x->string);
        if ((int)x->valuedouble > maxid) maxid = (int)x->valuedouble;
    }
    cJSON_ArrayForEach(x, added_tokens) {
        const cJSON *id = item(x, "id");
        if (!cJSON_IsNumber(id) || id->valuedouble < 0 || id->valuedouble > 16777215)
            return err_set(e, "added_tokens: an entry without an id in 0..2^24");
        if ((int)id->valuedouble > maxid) maxid = (int)id->valuedouble;
    }
    t->nvocab = maxid + 1;
    t->tok = calloc((size_t)(t->nvocab > 0 ? t->nvocab : 1), sizeof *t->tok);
    size_t ts = 16;
    while (ts < (size_t)t->nvocab * 2 + 16) ts *= 2;
    t->table = malloc(ts * sizeof *t->table), t->tmask = ts - 1;
    if (!t->tok || !t->table) return err_set(e, "out of memory");
    for (size_t i = 0; i < ts; i++) t->table[i] = -1;
    cJSON_ArrayForEach(x, vocab) {
        int id = (int)x->valuedouble;
        if (t->tok[id]) continue;
        if (!(t->tok[id] = strdup(x->string))) return err_set(e, "out of memory");
        vocab_insert(t, id);
    }
    const cJSON *unk = item(m, "unk_token");
    t->unk = cJSON_IsString(unk) ? vocab_find(t, unk->valuestring, strlen(unk->valuestring)) : -1;
    t->byte_fallback = flag(m, "byte_fallback", 0), t->fuse_unk = flag(m, "fuse_unk", 0);
    t->ignore_merges = flag(m, "ignore_merges", 0);
    for (int b = 0; b < 256; b++) {
        char name[8];
        snprintf(name, sizeof name, "<0x%02X>", b);
        t->bytetok[b] = vocab_find(t, name, 6);
    }
    /* merges: "a b" strings or [a, b] pairs, in rank order */
    const cJSON *merges = item(m, "merges");
    int nm = cJSON_GetArraySize(merges);
    size_t ms = 16;
    while (ms < (size_t)nm * 2 + 16) ms *= 2;
    t->merges = calloc(ms, sizeof *t->merges), t->mmask = ms - 1;
    if (!t->merges) return err_set(e, "out of memory");
    int rank = 0;
    sbuf cat = {0};
    cJSON_ArrayForEach(x, merges) {
        const char *a, *b;
        size_t an, bn;
        if (cJSON_IsString(x)) {
            const char *sp = strchr(x->valuestring, ' ');
            if (!sp)
                return free(cat.p),
                       err_set(e, "merges[%d]: '%.40s' is not 'a b'", rank, x->valuestring);
            a = x->valuestring, an = (size_t)(sp - a), b = sp + 1, bn = strlen(b);
        } else if (cJSON_IsArray(x) && cJSON_GetArraySize(x) == 2 &&
                   cJSON_IsString(cJSON_GetArrayItem(x, 0)) &&
                   cJSON_IsString(cJSON_GetArrayItem(x, 1))) {
            a = cJSON_GetArrayItem(x, 0)->valuestring, an = strlen(a);
            b = cJSON_GetArrayItem(x, 1)->valuestring, bn = strlen(b);
        } else {
            return free(cat.p), err_set(e, "merges[%d]: neither 'a b' nor [a, b]", rank);
        }
        int ia = vocab_find(t, a, an), ib = vocab_find(t, b, bn);
        cat.n = 0;
        if (sb_put(&cat, a, an) || sb_put(&cat, b, bn))
            return free(cat.p), err_set(e, "out of memory");
        int im = vocab_find(t, cat.p, cat.n);
        if (ia < 0 || ib < 0 || im < 0)
            return free(cat.p), err_set(e, "merges[%d]: a token of '%.*s %.*s' is not in the vocab",
                                        rank, (int)an, a, (int)bn, b);
        uint64_t key = ((uint64_t)(uint32_t)ia << 32 | (uint32_t)ib) + 1;
        for (size_t i = (key * 0x9E3779B97F4A7C15ull >> 20) & t->mmask;; i = (i + 1) & t->mmask) {
            if (!t->merges[i].key) {
                t->merges[i] = (merge_ent){key, rank, im};
                break;
            }
            if (t->merges[i].key == key) break; /* a repeated pair keeps its first rank */
        }
        rank++;
    }
    free(cat.p);
    return 0;
}

int hf_load_text(hf_tok **out, const char *text, size_t size, const char *label, err *e) {
    *out = NULL;
    byte_map_init();
    char why[200];
    size_t at;
    if (json_strict_check(text, size, &at, why, sizeof why))
        return err_set(e, "%s: not valid JSON at byte %zu: %s", label, at, why);
    cJSON *j = cJSON_ParseWithLength(text, size);
    hf_tok *t = calloc(1, sizeof *t);
    int rc = -1;
    if (!j || !t) {
        err_set(e, "%s: %s", label, j ? "out of memory" : "unreadable JSON");
        goto done;
    }
    if (!cJSON_IsObject(j)) {
        err_set(e, "not a JSON object");
        goto done;
    }
    snprintf(t->path, sizeof t->path, "%s", label);
    const cJSON *addl = item(j, "added_tokens");
    if (addl && !cJSON_IsArray(addl)) {
        err_set(e, "added_tokens is not an array");
        goto done;
    }
    if (load_model(t, item(j, "model"), addl, e) || add_norm(t, item(j, "normalizer"), e) ||
        add_pre(t, item(j, "pre_tokenizer"), e) || add_post(t, item(j, "post_processor"), e) ||
        add_dec(t, item(j, "decoder"), e))
        goto done;
    t->dec_none = !item(j, "decoder") || cJSON_IsNull(item(j, "decoder"));
    int na = cJSON_GetArraySize(addl);
    t->add = calloc((size_t)(na > 0 ? na : 1), sizeof *t->add);
    if (!t->add) {
        err_set(e, "out of memory");
        goto done;
    }
    const cJSON *x;
    cJSON_ArrayForEach(x, addl) {
        const cJSON *c = item(x, "content"), *id = item(x, "id");
        if (!cJSON_IsString(c) || !c->valuestring[0] || !cJSON_IsNumber(id)) continue;
        added *a = &t->add[t->nadd++];
        a->content = strdup(c->valuestring), a->n = strlen(c->valuestring);
        a->id = (int)id->valuedouble, a->special = flag(x, "special", 0);
        a->lstrip = flag(x, "lstrip", 0), a->rstrip = flag(x, "rstrip", 0);
        if (!a->content) {
            err_set(e, "out of memory");
            goto done;
        }
        if (!t->tok[a->id]) { /* an added token outside the model's vocab */
            t->tok[a->id] = strdup(a->content);
            if (!t->tok[a->id]) goto done;
            vocab_insert(t, a->id);
        }
    }
    rc = 0;
done:
    cJSON_Delete(j);
    if (rc) {
        err_prefix(e, "%s", label);
        hf_free(t);
    } else {
        *out = t;
    }
    return rc;
}

int hf_load(hf_tok **out, const char *path, err *e) {
    *out = NULL;
    char *file = NULL;
    if (path_is_dir(path)) {
        file = path_join(path, "tokenizer.json");
        if (!file) return err_set(e, "out of memory");
    }
    const char *fp = file ? file : path;
    char *text = NULL;
    size_t size = 0;
    int rc = file_read_all(fp, HF_MAX_FILE, &text, &size, e);
    if (!rc) rc = hf_load_text(out, text, size, fp, e);
    free(text), free(file);
    return rc;
}

void hf_free(hf_tok *t) {
    if (!t) return;
    for (int i = 0; i < t->nvocab; i++) free(t->tok[i]);
    free(t->tok), free(t->table), free(t->merges);
    for (int i = 0; i < t->nadd; i++) free(t->add[i].content);
    free(t->add);
    for (int i = 0; i < t->nnorm; i++) free(t->norm[i].text), regex_free(&t->norm[i].pattern);
    for (int i = 0; i < t->npre; i++) regex_free(&t->pre[i].pattern);
    for (int i = 0; i < t->ndec; i++) free(t->dec[i].pat), free(t->dec[i].content);
    free(t);
}

int hf_vocab_size(const hf_tok *t) {
    return t->nvocab;
}

const char *hf_path(const hf_tok *t) {
    return t->path;
}

const char *hf_token(const hf_tok *t, int32_t id) {
    return id >= 0 && id < t->nvocab ? t->tok[id] : NULL;
}

/* ---- encoding ---- */

static int normalize(const hf_tok *t, const char *s, size_t n, sbuf *out) {
    sbuf cur = {0}, nxt = {0};
    if (sb_put(&cur, s, n)) return -1;
    int rc = 0;
    for (int i = 0; i < t->nnorm && !rc; i++) {
        const norm_step *st = &t->norm[i];
        nxt.n = 0;
        if (st->kind == N_PREPEND) {
            if (cur.n)
                rc = sb_put(&nxt, st->text, strlen(st->text)) || sb_put(&nxt, cur.p, cur.n);
            else
                rc = sb_put(&nxt, "", 0);
        } else if (st->kind == N_REPLACE) {
            size_t *m;
            int nm;
            if (regex_all(&st->pattern, cur.p ? cur.p : "", cur.n, &m, &nm)) return -1;
            size_t at = 0;
            for (int k = 0; k < nm && !rc; k++) {
                rc = sb_put(&nxt, cur.p + at, m[2 * k] - at) ||
                     sb_put(&nxt, st->text, strlen(st->text));
                at = m[2 * k + 1];
            }
            if (!rc) rc = sb_put(&nxt, cur.p ? cur.p + at : "", cur.n - at);
            free(m);
        } else { /* strip */
            size_t a = 0, b = cur.n;
            while (st->left && a < b && strchr(" \t\n\r\f\v", cur.p[a])) a++;
            while (st->right && b > a && strchr(" \t\n\r\f\v", cur.p[b - 1])) b--;
            rc = sb_put(&nxt, cur.p + a, b - a);
        }
        sbuf tmp = cur;
        cur = nxt, nxt = tmp;
    }
    free(nxt.p);
    if (rc) return free(cur.p), -1;
    *out = cur;
    if (!out->p && sb_put(out, "", 0)) return -1;
    return 0;
}

/* A piece's bytes as GPT-2's printable characters. */
static int bytes_to_chars(const char *s, size_t n, sbuf *out) {
    char u[4];
    for (size_t i = 0; i < n; i++)
        if (sb_put(out, u, (size_t)u8_put(u, g_b2u[(unsigned char)s[i]]))) return -1;
    return 0;
}

static int pretokenize(const hf_tok *t, const char *s, size_t n, int first, slist *out) {
    slist cur = {0};
    if (sl_push(&cur, s, n, first)) return -1;
    for (int i = 0; i < t->npre; i++) {
        const pre_step *st = &t->pre[i];
        slist nxt = {0};
        int rc = 0;
        for (int k = 0; k < cur.n && !rc; k++) {
            const char *p = cur.s[k];
            size_t pn = cur.len[k];
            int f = cur.first[k];
            if (st->kind == P_BYTELEVEL) {
                sbuf pre = {0};
                if (st->prefix_space && (pn == 0 || p[0] != ' ')) rc = sb_put(&pre, " ", 1);
                rc = rc || sb_put(&pre, p, pn);
                slist parts = {0};
                if (!rc && st->use_regex)
                    rc = split_by(&st->pattern, B_ISOLATED, 0, pre.p, pre.n, f, &parts);
                else if (!rc)
                    rc = sl_push(&parts, pre.p, pre.n, f);
                for (int q = 0; q < parts.n && !rc; q++) {
                    sbuf ch = {0};
                    rc = bytes_to_chars(parts.s[q], parts.len[q], &ch) ||
                         sl_push(&nxt, ch.p ? ch.p : "", ch.n, parts.first[q]);
                    free(ch.p);
                }
                sl_free(&parts), free(pre.p);
            } else if (st->kind == P_METASPACE) {
                sbuf m = {0};
                size_t rl = strlen(st->repl);
                int prepend = st->scheme == 0 || (st->scheme == 1 && f);
                if (prepend && !(pn >= rl && !memcmp(p, st->repl, rl)))
                    rc = sb_put(&m, st->repl, rl);
                for (size_t q = 0; q < pn && !rc; q++)
                    rc = p[q] == ' ' ? sb_put(&m, st->repl, rl) : sb_put(&m, p + q, 1);
                if (!rc && st->split) {
                    regex r = {.lit = (char *)st->repl, .lit_n = rl};
                    rc = split_by(&r, B_NEXT, 0, m.p ? m.p : "", m.n, f, &nxt);
                } else if (!rc) {
                    rc = sl_push(&nxt, m.p ? m.p : "", m.n, f);
                }
                free(m.p);
            } else {
                rc = split_by(&st->pattern, st->behavior, st->invert, p, pn, f, &nxt);
            }
        }
        sl_free(&cur);
        if (rc) return sl_free(&nxt), -1;
        cur = nxt;
    }
    *out = cur;
    return 0;
}

typedef struct sym {
    int id, prev, next, alive;
} sym;

typedef struct hent {
    int rank, pos, a, b, id;
} hent;

static int hless(const hent *x, const hent *y) {
    return x->rank < y->rank || (x->rank == y->rank && x->pos < y->pos);
}

static void hpush(hent *h, int *n, hent v) {
    int i = (*n)++;
    h[i] = v;
    while (i > 0 && hless(&h[i], &h[(i - 1) / 2])) {
        hent tmp = h[i];
        h[i] = h[(i - 1) / 2], h[(i - 1) / 2] = tmp;
        i = (i - 1) / 2;
    }
}

static hent hpop(hent *h, int *n) {
    hent top = h[0];
    h[0] = h[--(*n)];
    for (int i = 0;;) {
        int l = 2 * i + 1, r = l + 1, m = i;
        if (l < *n && hless(&h[l], &h[m])) m = l;
        if (r < *n && hless(&h[r], &h[m])) m = r;
        if (m == i) break;
        hent tmp = h[i];
        h[i] = h[m], h[m] = tmp;
        i = m;
    }
    return top;
}

typedef struct ivec {
    int32_t *v;
    int n, cap;
} ivec;

static int iv_push(ivec *v, int32_t x) {
    if (v->n == v->cap) {
        int cap = v->cap ? 2 * v->cap : 64;
        int32_t *q = realloc(v->v, (size_t)cap * sizeof *q);
        if (!q) return -1;
        v->v = q, v->cap = cap;
    }
    v->v[v->n++] = x;
    return 0;
}

/* One pre-token through BPE. */
static int bpe(const hf_tok *t, const char *s, size_t n, ivec *out) {
    if (!n) return 0;
    if (t->ignore_merges) {
        int id = vocab_find(t, s, n);
        if (id >= 0) return iv_push(out, id);
    }
    sym *y = malloc((n + 1) * sizeof *y);
    hent *h = malloc((2 * n + 4) * sizeof *h);
    if (!y || !h) return free(y), free(h), -1;
    int ns = 0;
    for (size_t i = 0; i < n;) {
        int l = u8_len((const unsigned char *)s + i, n - i);
        int id = vocab_find(t, s + i, (size_t)l);
        if (id >= 0) {
            y[ns++].id = id;
        } else if (t->byte_fallback) {
            int ok = 1;
            for (int b = 0; b < l; b++) ok &= t->bytetok[(unsigned char)s[i + b]] >= 0;
            if (ok)
                for (int b = 0; b < l; b++) y[ns++].id = t->bytetok[(unsigned char)s[i + b]];
            else if (t->unk >= 0 && !(t->fuse_unk && ns && y[ns - 1].id == t->unk))
                y[ns++].id = t->unk;
        } else if (t->unk >= 0 && !(t->fuse_unk && ns && y[ns - 1].id == t->unk)) {
            y[ns++].id = t->unk;
        }
        i += (size_t)l;
    }
    for (int i = 0; i < ns; i++)
        y[i].prev = i - 1, y[i].next = i + 1 < ns ? i + 1 : -1, y[i].alive = 1;
    int nh = 0;
    for (int i = 0; i + 1 < ns; i++) {
        const merge_ent *m = merge_find(t, y[i].id, y[i + 1].id);
        if (m) hpush(h, &nh, (hent){m->rank, i, y[i].id, y[i + 1].id, m->id});
    }
    while (nh) {
        hent top = hpop(h, &nh);
        sym *L = &y[top.pos];
        if (!L->alive || L->id != top.a || L->next < 0 || y[L->next].id != top.b) continue;
        sym *R = &y[L->next];
        L->id = top.id;
        R->alive = 0;
        L->next = R->next;
        if (R->next >= 0) y[R->next].prev = top.pos;
        if (L->prev >= 0) {
            const merge_ent *m = merge_find(t, y[L->prev].id, L->id);
            if (m) hpush(h, &nh, (hent){m->rank, L->prev, y[L->prev].id, L->id, m->id});
        }
        if (L->next >= 0) {
            const merge_ent *m = merge_find(t, L->id, y[L->next].id);
            if (m) hpush(h, &nh, (hent){m->rank, top.pos, L->id, y[L->next].id, m->id});
        }
    }
    int rc = 0;
    for (int i = 0; i >= 0 && i < ns && !rc; i = y[i].next) rc = iv_push(out, y[i].id);
    free(y), free(h);
    return rc;
}

/* The added token matching at s (longest), or -1. */
static int added_at(const hf_tok *t, const char *s, size_t left) {
    int best = -1;
    for (int i = 0; i < t->nadd; i++)
        if (t->add[i].n <= left && !memcmp(s, t->add[i].content, t->add[i].n) &&
            (best < 0 || t->add[i].n > t->add[best].n))
            best = i;
    return best;
}

static int is_ws(char c) {
    return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\f' || c == '\v';
}

static int encode_piece(const hf_tok *t, const char *s, size_t n, int first, ivec *out) {
    if (!n) return 0;
    sbuf norm = {0};
    if (normalize(t, s, n, &norm)) return -1;
    slist pre = {0};
    int rc = pretokenize(t, norm.p, norm.n, first, &pre);
    for (int i = 0; i < pre.n && !rc; i++) rc = bpe(t, pre.s[i], pre.len[i], out);
    sl_free(&pre), free(norm.p);
    return rc;
}

/* 1 when s[0..n) is valid UTF-8 throughout. */
static int u8_all_valid(const char *s, size_t n) {
    for (size_t i = 0, bad, v; i < n; i += v)
        if (!(v = u8_valid((const unsigned char *)s + i, n - i, &bad))) return 0;
    return 1;
}

static int encode_valid(const hf_tok *t, const char *text, size_t n, int special, int32_t **ids,
                        int *nids, err *e);

/* A text that is not valid UTF-8 is encoded as Rust's String::from_utf8_lossy would give it to
 * the tokenizers library (whose input is a str): each maximal invalid sequence one U+FFFD. The
 * pre-tokenizers' regexes match with PCRE2_NO_UTF_CHECK, which wants valid UTF-8 (a fuzzed text
 * of 0xFF bytes crashed PCRE2's JIT before). */
int hf_encode(const hf_tok *t, const char *text, size_t n, int special, int32_t **ids, int *nids,
              err *e) {
    if (u8_all_valid(text, n)) return encode_valid(t, text, n, special, ids, nids, e);
    sbuf fixed = {0};
    if (lossy_append(&fixed, (const unsigned char *)text, n) || !fixed.p) {
        free(fixed.p);
        return err_set(e, "tokenize: out of memory");
    }
    const int rc = encode_valid(t, fixed.p, fixed.n, special, ids, nids, e);
    free(fixed.p);
    return rc;
}

static int encode_valid(const hf_tok *t, const char *text, size_t n, int special, int32_t **ids,
                        int *nids, err *e) {
    ivec body = {0}, all = {0};
    int rc = 0;
    size_t start = 0, i = 0;
    while (i < n && !rc) {
        int a = added_at(t, text + i, n - i);
        if (a < 0) {
            i++;
            continue;
        }
        size_t end = i, after = i + t->add[a].n;
        if (t->add[a].lstrip)
            while (end > start && is_ws(text[end - 1])) end--;
        rc = encode_piece(t, text + start, end - start, start == 0, &body) ||
             iv_push(&body, t->add[a].id);
        if (t->add[a].rstrip)
            while (after < n && is_ws(text[after])) after++;
        start = i = after;
    }
    if (!rc) rc = encode_piece(t, text + start, n - start, start == 0, &body);
    for (int k = 0; k < (special && t->has_tpl ? t->ntpl : 1) && !rc; k++) {
        if (!special || !t->has_tpl || t->tpl[k].seq) {
            for (int q = 0; q < body.n && !rc; q++) rc = iv_push(&all, body.v[q]);
        } else {
            for (int q = 0; q < t->tpl[k].nids && !rc; q++) rc = iv_push(&all, t->tpl[k].ids[q]);
        }
    }
    free(body.v);
    if (rc) {
        free(all.v);
        return err_set(e, "tokenize: out of memory");
    }
    *ids = all.v ? all.v : malloc(sizeof(int32_t));
    *nids = all.n;
    return *ids ? 0 : err_set(e, "out of memory");
}

/* ---- decoding ---- */

static int byte_token(const char *s) {
    unsigned v;
    if (strlen(s) == 6 && !strncmp(s, "<0x", 3) && s[5] == '>' && sscanf(s + 3, "%2X", &v) == 1)
        return (int)v;
    return -1;
}

static int replace_all(const char *s, const char *pat, const char *with, sbuf *out) {
    size_t pn = strlen(pat);
    for (const char *p = s; *p;) {
        const char *f = pn ? strstr(p, pat) : NULL;
        if (!f) return sb_put(out, p, strlen(p));
        if (sb_put(out, p, (size_t)(f - p)) || sb_put(out, with, strlen(with))) return -1;
        p = f + pn;
    }
    return sb_put(out, "", 0);
}

static int decode_step(const dec_step *st, slist *in, slist *out) {
    int rc = 0;
    if (st->kind == D_FUSE || st->kind == D_BYTELEVEL) {
        sbuf all = {0};
        for (int i = 0; i < in->n && !rc; i++) rc = sb_put(&all, in->s[i], in->len[i]);
        if (st->kind == D_BYTELEVEL && !rc) { /* the characters back to bytes, lossy UTF-8 */
            sbuf bytes = {0};
            for (size_t i = 0; i < all.n && !rc;) {
                int l = u8_len((const unsigned char *)all.p + i, all.n - i);
                int b = u2b(u8_get((const unsigned char *)all.p + i, l));
                if (b >= 0) {
                    char c = (char)b;
                    rc = sb_put(&bytes, &c, 1);
                } else {
                    rc = sb_put(&bytes, all.p + i, (size_t)l);
                }
                i += (size_t)l;
            }
            all.n = 0;
            if (!rc)
                rc = lossy_append(&all, (const unsigned char *)(bytes.p ? bytes.p : ""), bytes.n);
            free(bytes.p);
        }
        if (!rc) rc = sl_push(out, all.p ? all.p : "", all.n, 0);
        free(all.p);
        return rc;
    }
    if (st->kind == D_BYTEFALLBACK) {
        sbuf run = {0};
        int nrun = 0;
        for (int i = 0; i <= in->n && !rc; i++) {
            int b = i < in->n ? byte_token(in->s[i]) : -1;
            if (b >= 0) {
                char c = (char)b;
                rc = sb_put(&run, &c, 1), nrun++;
                continue;
            }
            if (nrun) {
                size_t at = 0, bad = 0;
                int valid = 1;
                while (at < run.n) {
                    size_t v = u8_valid((const unsigned char *)run.p + at, run.n - at, &bad);
                    if (!v) {
                        valid = 0;
                        break;
                    }
                    at += v;
                }
                if (valid)
                    rc = sl_push(out, run.p, run.n, 0);
                else
                    for (int k = 0; k < nrun && !rc; k++) rc = sl_push(out, "\xEF\xBF\xBD", 3, 0);
                run.n = 0, nrun = 0;
            }
            if (i < in->n && !rc) rc = sl_push(out, in->s[i], in->len[i], 0);
        }
        free(run.p);
        return rc;
    }
    for (int i = 0; i < in->n && !rc; i++) {
        sbuf b = {0};
        if (st->kind == D_REPLACE) {
            rc = replace_all(in->s[i], st->pat, st->content, &b);
        } else if (st->kind == D_STRIP) {
            size_t cl = strlen(st->strip), a = 0, z = in->len[i];
            for (int k = 0; k < st->start && z - a >= cl && !memcmp(in->s[i] + a, st->strip, cl);
                 k++)
                a += cl;
            for (int k = 0;
                 k < st->stop && z - a >= cl && !memcmp(in->s[i] + z - cl, st->strip, cl); k++)
                z -= cl;
            rc = sb_put(&b, in->s[i] + a, z - a);
        } else { /* metaspace */
            rc = replace_all(in->s[i], st->repl, " ", &b);
            if (!rc && i == 0 && st->scheme != 2 && b.n && b.p[0] == ' ') {
                memmove(b.p, b.p + 1, b.n);
                b.n--;
            }
        }
        if (!rc) rc = sl_push(out, b.p ? b.p : "", b.n, 0);
        free(b.p);
    }
    return rc;
}

char *hf_decode(const hf_tok *t, const int32_t *ids, int n, err *e) {
    slist cur = {0};
    int rc = 0;
    for (int i = 0; i < n && !rc; i++) {
        const char *s = hf_token(t, ids[i]);
        if (!s) {
            sl_free(&cur);
            err_set(e, "detokenize: id %d is outside the vocabulary (0..%d)", (int)ids[i],
                    t->nvocab - 1);
            return NULL;
        }
        rc = sl_push(&cur, s, strlen(s), 0);
    }
    for (int k = 0; k < t->ndec && !rc; k++) {
        slist nxt = {0};
        rc = decode_step(&t->dec[k], &cur, &nxt);
        sl_free(&cur);
        cur = nxt;
    }
    sbuf out = {0};
    for (int i = 0; i < cur.n && !rc; i++) {
        if (t->dec_none && i && sb_put(&out, " ", 1)) rc = -1; /* no decoder: joined by spaces */
        if (!rc) rc = sb_put(&out, cur.s[i], cur.len[i]);
    }
    if (!rc && !out.p) rc = sb_put(&out, "", 0);
    sl_free(&cur);
    if (rc) {
        free(out.p);
        err_set(e, "detokenize: out of memory");
        return NULL;
    }
    return out.p;
}

const char *hf_show(const hf_tok *t, int32_t id, char *buf, size_t n) {
    const char *s = hf_token(t, id);
    if (!s) return snprintf(buf, n, "<%d>", (int)id), buf;
    /* the token as text: byte-level characters back to bytes, the metaspace as a space */
    int bytelevel = 0;
    for (int i = 0; i < t->ndec; i++) bytelevel |= t->dec[i].kind == D_BYTELEVEL;
    for (int i = 0; i < t->npre; i++) bytelevel |= t->pre[i].kind == P_BYTELEVEL;
    size_t o = 0;
    if (n < 8) return buf[0] = '\0', buf;
    buf[o++] = '\'';
    size_t sl = strlen(s);
    for (size_t i = 0; i < sl && o + 6 < n;) {
        int l = u8_len((const unsigned char *)s + i, sl - i);
        unsigned cp = u8_get((const unsigned char *)s + i, l);
        int b = bytelevel ? u2b(cp) : -1;
        if (b >= 0 && (b < 0x20 || b >= 0x7F)) {
            o += (size_t)snprintf(buf + o, n - o,
                                  b == '\n'   ? "\\n"
                                  : b == '\t' ? "\\t"
                                              : "\\x%02x",
                                  b);
        } else if (b >= 0) {
            buf[o++] = (char)b;
        } else if (l == 3 && !memcmp(s + i, "\xE2\x96\x81", 3)) {
            buf[o++] = ' ';
        } else if (cp < 0x20) {
            o += (size_t)snprintf(buf + o, n - o,
                                  cp == '\n'   ? "\\n"
                                  : cp == '\t' ? "\\t"
                                               : "\\x%02x",
                                  cp);
        } else {
            memcpy(buf + o, s + i, (size_t)l), o += (size_t)l;
        }
        i += (size_t)l;
    }
    if (o + 2 > n) o = n - 2;
    buf[o++] = '\'';
    buf[o] = '\0';
    return buf;
}
