#include "err.h"

#include <stdarg.h>
#include <stdio.h>
#include <string.h>

/* Control characters (a tensor name, key or path from a file may hold terminal escapes) are
 * written as \xNN: a message is one line and never drives the terminal. */
static void escape_controls(char *msg, size_t cap) {
    char out[ERR_MSG_MAX];
    size_t o = 0;
    for (const unsigned char *p = (const unsigned char *)msg; *p && o + 5 < sizeof out; p++) {
        if (*p < 0x20 || *p == 0x7f)
            o += (size_t)snprintf(out + o, sizeof out - o, "\\x%02x", *p);
        else
            out[o++] = (char)*p;
    }
    out[o] = '\0';
    snprintf(msg, cap, "%s", out);
}

int err_set(err *e, const char *fmt, ...) {
    if (!e) return -1;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(e->msg, sizeof e->msg, fmt, ap);
    va_end(ap);
    escape_controls(e->msg, sizeof e->msg);
    return -1;
}

int err_prefix(err *e, const char *fmt, ...) {
    if (!e) return -1;
    char ctx[ERR_MSG_MAX], old[ERR_MSG_MAX];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(ctx, sizeof ctx, fmt, ap);
    va_end(ap);
    memcpy(old, e->msg, sizeof old);
    snprintf(e->msg, sizeof e->msg, "%s: %s", ctx, old);
    escape_controls(e->msg, sizeof e->msg);
    return -1;
}

void err_clear(err *e) {
    if (e) e->msg[0] = '\0';
}
