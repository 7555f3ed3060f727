/* opts.h: `key=value` arguments of a command (`chunk=32 eps=1e-6 seed=7`).
 *
 * Parse once, take values by key with typed getters (each names the key in its error), then call
 * opts_check_unused() so a misspelt key is an error ("unknown option 'chnk'") instead of being
 * silently ignored. */
#ifndef MIXSCOPE_OPTS_H
#define MIXSCOPE_OPTS_H

#include "err.h"

#define OPTS_MAX 32

#ifdef __cplusplus
extern "C" {
#endif

typedef struct opts {
    int n;
    char *key[OPTS_MAX];
    char *val[OPTS_MAX];
    int used[OPTS_MAX];
} opts;

/* Takes argv entries of the form key=value (copies them). Entries without '=' are an error. */
int opts_parse(opts *o, int argc, char *const *argv, err *e);
void opts_free(opts *o);
/* 1 if the key is present (marks it used). */
int opts_has(opts *o, const char *key);
int opts_int(opts *o, const char *key, long def, long *out, err *e);
/* opts_int for a value that must lie in [lo, hi] when given (def is returned as is when the key is
 * absent, so a default outside the range can mean "not given"): "option 'len': expected an
 * integer in 1..16777216, got '4294967302'". No value wraps: strtol's overflow is refused too. */
int opts_int_in(opts *o, const char *key, long def, long lo, long hi, long *out, err *e);
int opts_float(opts *o, const char *key, double def, double *out, err *e);
/* Borrowed pointer to the value, or def. */
const char *opts_str(opts *o, const char *key, const char *def);
/* Parses "LO..HI" into two doubles. */
int opts_range(opts *o, const char *key, double def_lo, double def_hi, double *lo, double *hi,
               err *e);
/* Errors on the first key no getter asked for. */
int opts_check_unused(const opts *o, err *e);

#ifdef __cplusplus
}
#endif

#endif
