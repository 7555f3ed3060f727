/* busguard.c: see busguard.h. */
#define _GNU_SOURCE
#include "busguard.h"

#include <pthread.h>
#include <setjmp.h>
#include <signal.h>
#include <stddef.h>
#include <string.h>

static _Thread_local sigjmp_buf *t_jump;
static pthread_once_t g_once = PTHREAD_ONCE_INIT;

static void on_sigbus(int sig, siginfo_t *si, void *uc) {
    (void)si, (void)uc;
    if (t_jump) siglongjmp(*t_jump, 1);
    /* not ours: the default action, as if no handler were there */
    signal(sig, SIG_DFL);
    raise(sig);
}

static void install(void) {
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_sigaction = on_sigbus;
    sa.sa_flags = SA_SIGINFO;
    sigemptyset(&sa.sa_mask);
    sigaction(SIGBUS, &sa, NULL);
}

int busguard_run(void (*fn)(void *ctx), void *ctx) {
    pthread_once(&g_once, install);
    sigjmp_buf jb, *volatile prev = t_jump;
    if (sigsetjmp(jb, 1)) { /* the mask is restored: SIGBUS is deliverable again */
        t_jump = prev;
        return -1;
    }
    t_jump = &jb;
    fn(ctx);
    t_jump = prev;
    return 0;
}
