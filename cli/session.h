/* session.h: everything one run of mixscope holds between commands (the model or raw mixer, the
 * tokens, the probe trace, the device, settings). Commands read and change it; nothing else does. */
#ifndef MIXSCOPE_SESSION_H
#define MIXSCOPE_SESSION_H

#include <signal.h>
#include <stdio.h>

#include "../core/err.h"

enum { DEVICE_CPU = 0, DEVICE_GPU = 1 };

typedef struct session {
    int quit;        /* `quit` was run */
    int batch;       /* -c or script files: stop at the first error */
    int interactive; /* stdin and stdout are a terminal: progress lines, colour */
    int device;      /* DEVICE_CPU or DEVICE_GPU */
    FILE *out;       /* where command output goes (stdout) */
    const char *current_command; /* the command line being run, for provenance in exports */
} session;

int session_init(session *s, err *e);
void session_free(session *s);

/* ^C: the handler sets a flag that long loops poll; the REPL clears it before each command. */
extern volatile sig_atomic_t session_sigint;
void session_install_sigint(void);
static inline int session_interrupted(const session *s) {
    (void)s;
    return session_sigint != 0;
}

#endif
