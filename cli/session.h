/* session.h: everything one run of mixscope holds between commands (the model or raw mixer, the
 * tokens, the probe trace, the device, settings). Commands read and change it; nothing else does. */
#ifndef MIXSCOPE_SESSION_H
#define MIXSCOPE_SESSION_H

#include <signal.h>
#include <stdio.h>

#include "../core/err.h"
#include "../core/trace.h"

enum { DEVICE_CPU = 0, DEVICE_GPU = 1 };

typedef struct session {
    int quit;        /* `quit` was run */
    int batch;       /* -c or script files: stop at the first error */
    int interactive; /* stdin and stdout are a terminal: progress lines, colour */
    int device;      /* DEVICE_CPU or DEVICE_GPU */
    FILE *out;       /* where command output goes (stdout) */
    const char *current_command; /* the command line being run, for provenance in exports */

    /* model mode (models/, cli/cmd_model.c): a loaded or random model run over token ids */
    struct model *model; /* NULL until load / model random */
    int32_t *tokens;     /* [ntokens]: the ids to run (tokens FILE, prompt TEXT, generators) */
    int ntokens;
    float *logits;       /* [ntokens, vocab]: logits of the tokens run so far (model->pos) */
    trace tr;            /* every layer's probes per token, layer, head (mixers/record.h) */
    int tr_ready;        /* tr holds the current model's probe series */
    char ckpt_sha256[65]; /* hex SHA-256 of the loaded weights file; "" for random models */
} session;

int session_init(session *s, err *e);
void session_free(session *s);

/* model mode (cli/cmd_model.c): frees the model block; sets the ids to run (checked against the
 * model's vocabulary, position back to 0), e.g. from a prompt generator. */
void session_model_free(session *s);
int session_set_tokens(session *s, const int32_t *ids, int n, err *e);

/* ^C: the handler sets a flag that long loops poll; the REPL clears it before each command. */
extern volatile sig_atomic_t session_sigint;
void session_install_sigint(void);
static inline int session_interrupted(const session *s) {
    (void)s;
    return session_sigint != 0;
}

#endif
