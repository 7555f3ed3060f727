/* tsession.h: a session run inside the test process (no binary), its output going to a temporary
 * file that ts_out reads back. For tests that look at the session itself after a command
 * (tests/test_diagnose.c, tests/test_raw_nan.c). */
#ifndef MIXSCOPE_TSESSION_H
#define MIXSCOPE_TSESSION_H

#include <stdarg.h>

#include "tests/testutil.h"

#include "cli/command.h"
#include "cli/session.h"

typedef struct tsession {
    session s;
    FILE *f;
    char *buf;
} tsession;

static inline void ts_open(tsession *t) {
    err e = {{0}};
    memset(t, 0, sizeof *t);
    assert_int_equal(session_init(&t->s, &e), 0);
    t->f = tmpfile();
    assert_non_null(t->f);
    t->s.out = t->f;
    t->s.batch = 1;
}

/* Everything the session has printed so far (owned by t, valid until the next call). */
static inline const char *ts_out(tsession *t) {
    fflush(t->f);
    long n = ftell(t->f);
    free(t->buf);
    t->buf = malloc((size_t)n + 1);
    assert_non_null(t->buf);
    rewind(t->f);
    size_t r = fread(t->buf, 1, (size_t)n, t->f);
    t->buf[r] = '\0';
    fseek(t->f, 0, SEEK_END);
    return t->buf;
}

static inline void ts_close(tsession *t) {
    session_free(&t->s);
    fclose(t->f);
    free(t->buf);
}

/* One command line (printf-style), as the REPL would run it; 0 or -1 with e set. */
static inline int ts_exec(tsession *t, err *e, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
static inline int ts_exec(tsession *t, err *e, const char *fmt, ...) {
    char line[2048];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(line, sizeof line, fmt, ap);
    va_end(ap);
    err_clear(e);
    return command_exec(&t->s, line, e);
}

#endif
