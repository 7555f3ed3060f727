#include "err.h"

#include <stdarg.h>
#include <stdio.h>
#include <string.h>

int err_set(err *e, const char *fmt, ...) {
    if (!e) return -1;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(e->msg, sizeof e->msg, fmt, ap);
    va_end(ap);
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
    return -1;
}

void err_clear(err *e) {
    if (e) e->msg[0] = '\0';
}
