#include "opts.h"

#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

int opts_parse(opts *o, int argc, char *const *argv, err *e) {
    memset(o, 0, sizeof *o);
    for (int i = 0; i < argc; i++) {
        const char *eq = strchr(argv[i], '=');
        if (!eq || eq == argv[i]) {
            opts_free(o);
            return err_set(e, "expected key=value, got '%.100s'", argv[i]);
        }
        if (o->n == OPTS_MAX) {
            opts_free(o);
            return err_set(e, "too many options (at most %d)", OPTS_MAX);
        }
        for (int j = 0; j < o->n; j++)
            if (strncmp(o->key[j], argv[i], (size_t)(eq - argv[i])) == 0 &&
                o->key[j][eq - argv[i]] == '\0') {
                opts_free(o);
                return err_set(e, "option '%.*s' given twice", (int)(eq - argv[i]), argv[i]);
            }
        o->key[o->n] = strndup(argv[i], (size_t)(eq - argv[i]));
        o->val[o->n] = strdup(eq + 1);
        o->n++;
    }
    return 0;
}

void opts_free(opts *o) {
    for (int i = 0; i < o->n; i++) free(o->key[i]), free(o->val[i]);
    memset(o, 0, sizeof *o);
}

static int find(opts *o, const char *key) {
    for (int i = 0; i < o->n; i++)
        if (strcmp(o->key[i], key) == 0) {
            o->used[i] = 1;
            return i;
        }
    return -1;
}

int opts_has(opts *o, const char *key) {
    return find(o, key) >= 0;
}

int opts_int(opts *o, const char *key, long def, long *out, err *e) {
    int i = find(o, key);
    if (i < 0) {
        *out = def;
        return 0;
    }
    char *end;
    errno = 0;
    long v = strtol(o->val[i], &end, 10);
    if (errno || end == o->val[i] || *end)
        return err_set(e, "option '%s': expected an integer, got '%.60s'", key, o->val[i]);
    *out = v;
    return 0;
}

int opts_int_in(opts *o, const char *key, long def, long lo, long hi, long *out, err *e) {
    int i = find(o, key);
    if (i < 0) {
        *out = def;
        return 0;
    }
    char *end;
    errno = 0;
    long v = strtol(o->val[i], &end, 10);
    if (errno || end == o->val[i] || *end || v < lo || v > hi)
        return err_set(e, "option '%s': expected an integer in %ld..%ld, got '%.60s'", key, lo, hi,
                       o->val[i]);
    *out = v;
    return 0;
}

int opts_float(opts *o, const char *key, double def, double *out, err *e) {
    int i = find(o, key);
    if (i < 0) {
        *out = def;
        return 0;
    }
    char *end;
    errno = 0;
    double v = strtod(o->val[i], &end);
    if (errno || end == o->val[i] || *end || !isfinite(v))
        return err_set(e, "option '%s': expected a number, got '%.60s'", key, o->val[i]);
    *out = v;
    return 0;
}

const char *opts_str(opts *o, const char *key, const char *def) {
    int i = find(o, key);
    return i < 0 ? def : o->val[i];
}

int opts_range(opts *o, const char *key, double def_lo, double def_hi, double *lo, double *hi,
               err *e) {
    int i = find(o, key);
    if (i < 0) {
        *lo = def_lo, *hi = def_hi;
        return 0;
    }
    const char *s = o->val[i], *dots = strstr(s, "..");
    char *end;
    if (!dots) {
        double v = strtod(s, &end);
        if (end == s || *end || !isfinite(v))
            return err_set(e, "option '%s': expected LO..HI, got '%.60s'", key, s);
        *lo = *hi = v;
        return 0;
    }
    /* LO is parsed on its own: strtod would read "0..1" as "0." and stop inside the dots */
    char lo_text[64];
    size_t ll = (size_t)(dots - s);
    if (ll == 0 || ll >= sizeof lo_text)
        return err_set(e, "option '%s': expected LO..HI, got '%.60s'", key, s);
    memcpy(lo_text, s, ll);
    lo_text[ll] = '\0';
    double a = strtod(lo_text, &end);
    if (end == lo_text || *end)
        return err_set(e, "option '%s': expected LO..HI, got '%.60s'", key, s);
    double b = strtod(dots + 2, &end);
    if (end == dots + 2 || *end || !isfinite(a) || !isfinite(b) || a > b)
        return err_set(e, "option '%s': expected LO..HI with LO <= HI, got '%.60s'", key, s);
    *lo = a, *hi = b;
    return 0;
}

int opts_check_unused(const opts *o, err *e) {
    for (int i = 0; i < o->n; i++)
        if (!o->used[i]) return err_set(e, "unknown option '%.60s'", o->key[i]);
    return 0;
}
