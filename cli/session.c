#include "session.h"

#include <string.h>

volatile sig_atomic_t session_sigint = 0;

static void on_sigint(int sig) {
    (void)sig;
    session_sigint = 1;
}

void session_install_sigint(void) {
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_sigint;
    sigemptyset(&sa.sa_mask);
    sigaction(SIGINT, &sa, NULL);
}

int session_init(session *s, err *e) {
    (void)e;
    memset(s, 0, sizeof *s);
    s->out = stdout;
    s->device = DEVICE_CPU;
    return 0;
}

void session_free(session *s) {
    if (session_raw_free) session_raw_free(s); /* raw-mixer mode (cli/cmd_stream.c) */
    session_model_free(s);
    memset(s, 0, sizeof *s);
}
