/* settings.c: the `set` keys in one table (key, meaning, show, set), their values as text, and
 * $NAME expansion of command lines (so scenes can say `export png kaczmarz $outdir/k.png`). */
#include <ctype.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "session.h"

#define DEFAULT_ROWS   40
#define DEFAULT_BLOWUP 1e3
#define DEFAULT_OUTDIR "mixscope-figures"

int setting_rows(const session *s) {
    return s->set_rows == 0 ? DEFAULT_ROWS : s->set_rows;
}

long setting_seed(const session *s) {
    return s->set_seed;
}

double setting_blowup(const session *s) {
    return s->set_blowup > 0 ? s->set_blowup : DEFAULT_BLOWUP;
}

const char *setting_outdir(const session *s) {
    return s->set_outdir[0] ? s->set_outdir : DEFAULT_OUTDIR;
}

static int parse_long(const char *v, long lo, long hi, long *out, const char *key, err *e) {
    char *end;
    errno = 0;
    long x = strtol(v, &end, 10);
    if (*end || end == v || errno || x < lo || x > hi)
        return err_set(e, "set %s: expected an integer in %ld..%ld, got '%.40s'", key, lo, hi, v);
    *out = x;
    return 0;
}

/* ---- each key: show and set ---- */

static const char *show_outdir(const session *s, char *b, size_t n) {
    (void)b, (void)n;
    return setting_outdir(s);
}
static int set_outdir(session *s, const char *v, err *e) {
    if (strlen(v) >= sizeof s->set_outdir) return err_set(e, "set outdir: path too long");
    if (!*v) return err_set(e, "set outdir: empty path");
    if (session_make_dirs(v, e)) return err_prefix(e, "set outdir");
    snprintf(s->set_outdir, sizeof s->set_outdir, "%s", v);
    return 0;
}

static const char *show_seed(const session *s, char *b, size_t n) {
    return snprintf(b, n, "%ld", setting_seed(s)), b;
}
static int set_seed(session *s, const char *v, err *e) {
    long x;
    if (parse_long(v, 0, 2147483647L, &x, "seed", e)) return -1;
    s->set_seed = x;
    return 0;
}

static const char *show_rows(const session *s, char *b, size_t n) {
    if (setting_rows(s) < 0) return "all";
    return snprintf(b, n, "%d", setting_rows(s)), b;
}
static int set_rows(session *s, const char *v, err *e) {
    long x;
    if (!strcmp(v, "all")) return s->set_rows = -1, 0;
    if (parse_long(v, 1, 1000000, &x, "rows", e)) return -1;
    s->set_rows = (int)x;
    return 0;
}

static const char *show_chunk(const session *s, char *b, size_t n) {
    if (!s->eng.chunk) return "default";
    return snprintf(b, n, "%d", s->eng.chunk), b;
}
static int set_chunk(session *s, const char *v, err *e) {
    long x;
    if (!strcmp(v, "default")) return s->eng.chunk = 0, 0;
    if (parse_long(v, 16, 64, &x, "chunk", e) || (x != 16 && x != 32 && x != 64))
        return err_set(e, "set chunk: expected 16, 32, 64 or default, got '%.40s'", v);
    s->eng.chunk = (int)x;
    return 0;
}

static const char *show_blowup(const session *s, char *b, size_t n) {
    return snprintf(b, n, "%g", setting_blowup(s)), b;
}
static int set_blowup(session *s, const char *v, err *e) {
    char *end;
    double d = strtod(v, &end);
    if (*end || end == v || !(d > 0) || d > 1e300)
        return err_set(e, "set blowup: expected a positive number, got '%.40s'", v);
    s->set_blowup = d;
    return 0;
}

static const char *show_progress(const session *s, char *b, size_t n) {
    (void)b, (void)n;
    return s->set_progress > 0 ? "on" : s->set_progress < 0 ? "off" : "auto";
}
static int set_progress(session *s, const char *v, err *e) {
    if (!strcmp(v, "auto")) return s->set_progress = 0, 0;
    if (!strcmp(v, "on")) return s->set_progress = 1, 0;
    if (!strcmp(v, "off")) return s->set_progress = -1, 0;
    return err_set(e, "set progress: expected auto, on or off, got '%.40s'", v);
}

static const char *show_device(const session *s, char *b, size_t n) {
    (void)b, (void)n;
    return s->eng.device == ENGINE_GPU ? "gpu" : "cpu";
}
static int set_device(session *s, const char *v, err *e) {
    return session_set_device(s, v, e);
}

static const char *show_arith(const session *s, char *b, size_t n) {
    (void)b, (void)n;
    return s->set_arith ? "tf32" : "fp32";
}
static int set_arith(session *s, const char *v, err *e) {
    if (strcmp(v, "fp32") && strcmp(v, "tf32"))
        return err_set(e, "set arith: expected fp32 or tf32, got '%.40s'", v);
    return session_set_arith(s, !strcmp(v, "tf32"), e);
}

static const char *show_lla(const session *s, char *b, size_t n) {
    if (!(s->eng.lla > 0)) return "off";
    return snprintf(b, n, "%g", s->eng.lla), b;
}
static int set_lla(session *s, const char *v, err *e) {
    char *end;
    double d = strtod(v, &end);
    if (!strcmp(v, "off"))
        d = 0;
    else if (!strcmp(v, "on"))
        d = 0.01;
    else if (*end || end == v || !(d > 0) || d > 1e30)
        return err_set(e, "set lla: expected off, on or a positive ridge, got '%.40s'", v);
    s->eng.lla = d;
    s->eng.tr_ready = 0; /* registered again on the next step */
    return 0;
}

static const char *show_probes(const session *s, char *b, size_t n) {
    (void)b, (void)n;
    return engine_probes_text(&s->eng);
}
static int set_probes(session *s, const char *v, err *e) {
    return engine_set_probes(&s->eng, v, e);
}

static const char *show_threads(const session *s, char *b, size_t n) {
    (void)s;
    return snprintf(b, n, "%d", engine_threads()), b;
}
static int set_threads(session *s, const char *v, err *e) {
    (void)s;
    long x;
    if (!strcmp(v, "all"))
        x = 0;
    else if (parse_long(v, 1, 256, &x, "threads", e))
        return err_set(e, "set threads: expected all or an integer in 1..256, got '%.40s'", v);
    return engine_set_threads((int)x, e);
}

/* The checkpoints the repo ships (scenes/models: models `train` made, with the command in their
 * config.json). The tour and the scenes load them from $models: MIXSCOPE_MODELS when set, else
 * the source tree the binary was built from (MIXSCOPE_SOURCE_DIR, set by the Makefile), else
 * scenes/models under the working folder. */
static const char *show_models(const session *s, char *b, size_t n) {
    if (s->set_models[0]) return s->set_models;
    const char *env = getenv("MIXSCOPE_MODELS");
    if (env && *env) return env;
#ifdef MIXSCOPE_SOURCE_DIR
    snprintf(b, n, "%s/scenes/models", MIXSCOPE_SOURCE_DIR);
    return b;
#else
    (void)b, (void)n;
    return "scenes/models";
#endif
}
static int set_models(session *s, const char *v, err *e) {
    if (strlen(v) >= sizeof s->set_models) return err_set(e, "set models: path too long");
    if (!*v) return err_set(e, "set models: empty path");
    snprintf(s->set_models, sizeof s->set_models, "%s", v);
    return 0;
}

static const char *show_stop_on(const session *s, char *b, size_t n) {
    (void)b, (void)n;
    return s->eng.stop_spec[0] ? s->eng.stop_spec : "none";
}
static int set_stop_on(session *s, const char *v, err *e) {
    return engine_set_stop_on(&s->eng, v, e);
}

static const char *show_title(const session *s, char *b, size_t n) {
    (void)b, (void)n;
    return s->set_title[0] ? s->set_title : "none";
}
static int set_title(session *s, const char *v, err *e) {
    if (strlen(v) >= sizeof s->set_title)
        return err_set(e, "set title: at most %zu bytes", sizeof s->set_title - 1);
    snprintf(s->set_title, sizeof s->set_title, "%s", strcmp(v, "none") ? v : "");
    return 0;
}
static const char *show_labels(const session *s, char *b, size_t n) {
    (void)b, (void)n;
    return s->set_labels[0] ? s->set_labels : "none";
}
static int set_labels(session *s, const char *v, err *e) {
    if (strlen(v) >= sizeof s->set_labels)
        return err_set(e, "set labels: at most %zu bytes", sizeof s->set_labels - 1);
    snprintf(s->set_labels, sizeof s->set_labels, "%s", strcmp(v, "none") ? v : "");
    return 0;
}

typedef struct setting {
    const char *key, *meaning;
    const char *(*show)(const session *s, char *buf, size_t n);
    int (*set)(session *s, const char *value, err *e);
} setting;

static const setting SETTINGS[] = {
    {"outdir", "folder scenes write figures to ($outdir; created when set)", show_outdir,
     set_outdir},
    {"models", "folder of the trained checkpoints the repo ships ($models; scenes/models)",
     show_models, set_models},
    {"seed", "seed of prompt and stream generators when seed= is not given", show_seed, set_seed},
    {"rows", "most token rows show and run print (a number, or all)", show_rows, set_rows},
    {"chunk", "prefill chunk (16, 32, 64) of raw mixers without chunk=, or default", show_chunk,
     set_chunk},
    {"blowup", "state norm that run reports as a blow-up", show_blowup, set_blowup},
    {"progress", "tokens/s line on long runs: auto (on a terminal), on, off", show_progress,
     set_progress},
    {"device", "cpu or gpu (as the device command)", show_device, set_device},
    {"arith", "fp32 (exact) or tf32: fla's GPU arithmetic on loaded models (docs/models.md)",
     show_arith, set_arith},
    {"lla",
     "off, on or a ridge: record LLA beside softmax and Parallax layers (lla_eta, lla_cos, cpa, "
     "lla_gap, lla_gap_sa; costly)",
     show_lla, set_lla},
    {"probes", "what stepping records: default, all, none or NAME,NAME,... (help set)", show_probes,
     set_probes},
    {"threads", "CPU threads for the dense products and the cores (all: every core)", show_threads,
     set_threads},
    {"title", "the figures' title (none: each view's own); quote words: set title 'GDN vs ours'",
     show_title, set_title},
    {"labels",
     "legend names of the layers or lanes, comma separated (none: their mixers): set labels "
     "GDN,Kaczmarz",
     show_labels, set_labels},
    {"stop-on",
     "none, or nonfinite,NAME>X,NAME<X: stepping stops after the first token, layer and head "
     "that meets one (a token at a time)",
     show_stop_on, set_stop_on},
};
enum { NSETTINGS = sizeof SETTINGS / sizeof SETTINGS[0] };

static const setting *find(const char *key) {
    for (int i = 0; i < NSETTINGS; i++)
        if (!strcmp(SETTINGS[i].key, key)) return &SETTINGS[i];
    return NULL;
}

const char *setting_text(const session *s, const char *key, char *buf, size_t n) {
    const setting *st = find(key);
    return st ? st->show(s, buf, n) : NULL;
}

const char *setting_meaning(const char *key) {
    const setting *st = find(key);
    return st ? st->meaning : NULL;
}

const char *const *setting_keys(void) {
    static const char *keys[NSETTINGS + 1];
    for (int i = 0; i < NSETTINGS; i++) keys[i] = SETTINGS[i].key;
    keys[NSETTINGS] = NULL;
    return keys;
}

int setting_set(session *s, const char *key, const char *value, err *e) {
    const setting *st = find(key);
    if (!st) {
        char keys[256] = "";
        for (int i = 0; i < NSETTINGS; i++) {
            size_t u = strlen(keys);
            snprintf(keys + u, sizeof keys - u, "%s%s", i ? " " : "", SETTINGS[i].key);
        }
        return err_set(e, "set: unknown key '%.40s' (%s)", key, keys);
    }
    return st->set(s, value, e);
}

/* $NAME and ${NAME} for the settings above; anything else is left as typed. */
int session_expand(session *s, const char *line, char **out, err *e) {
    *out = NULL;
    if (!strchr(line, '$')) return 0;
    size_t cap = strlen(line) + 256, o = 0;
    char *buf = malloc(cap);
    if (!buf) return err_set(e, "out of memory");
    int changed = 0;
    char quote = 0; /* the quote the line is inside at p ('\'' or '"'), or 0 */
    char vq[600];   /* a value quoted for the word splitter */
    for (const char *p = line; *p;) {
        const char *v = NULL, *next = p + 1;
        char vb[64];
        if (*p == '\'' || *p == '"') quote = quote == *p ? 0 : (quote ? quote : *p);
        if (*p == '$') {
            int brace = p[1] == '{';
            const char *nm = p + 1 + brace, *end = nm;
            while (isalnum((unsigned char)*end) || *end == '_') end++;
            char key[32];
            size_t n = (size_t)(end - nm);
            if (n && n < sizeof key && (!brace || *end == '}')) {
                memcpy(key, nm, n), key[n] = '\0';
                if ((v = setting_text(s, key, vb, sizeof vb))) next = end + brace, changed = 1;
            }
        }
        /* a value with a space or a quote stays one word: quoted outside quotes, as is inside
         * (unless it holds the quote it sits in) */
        if (v && (strpbrk(v, " \t'\"") != NULL)) {
            if (quote && strchr(v, quote)) {
                free(buf);
                return err_set(e, "$%.*s holds a %c quote inside %c quotes", (int)(next - p - 1),
                               p + 1, quote, quote);
            }
            if (!quote) {
                char q = strchr(v, '"') ? '\'' : '"';
                if (strchr(v, q)) {
                    free(buf);
                    return err_set(e, "$%.*s holds both kinds of quote", (int)(next - p - 1),
                                   p + 1);
                }
                snprintf(vq, sizeof vq, "%c%s%c", q, v, q);
                v = vq;
            }
        }
        size_t add = v ? strlen(v) : 1;
        if (o + add + 1 > cap) { /* grow: the value may be longer than the name */
            size_t nc = (o + add + 1) * 2;
            char *nb = nc > ((size_t)1 << 26) ? NULL : realloc(buf, nc);
            if (!nb) {
                free(buf);
                return err_set(e, "line too long after expanding settings");
            }
            buf = nb, cap = nc;
        }
        if (v)
            memcpy(buf + o, v, add);
        else
            buf[o] = *p;
        o += add;
        p = next;
    }
    buf[o] = '\0';
    if (!changed) {
        free(buf);
        return 0;
    }
    *out = buf;
    return 0;
}
