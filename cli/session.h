/* session.h: everything one run of mixscope holds between commands (the model or raw mixer, the
 * tokens, the probe trace, the device, settings). Commands read and change it; nothing else does.
 */
#ifndef MIXSCOPE_SESSION_H
#define MIXSCOPE_SESSION_H

#include <signal.h>
#include <stdio.h>

#include "../core/err.h"
#include "../core/trace.h"

enum { DEVICE_CPU = 0, DEVICE_GPU = 1 };

typedef struct session {
    int quit;                    /* `quit` was run */
    int script_depth;            /* > 0 while a script file (source, a .scene, the tour) runs */
    int batch;                   /* -c or script files: stop at the first error */
    int interactive;             /* stdin and stdout are a terminal: progress lines, colour */
    int device;                  /* DEVICE_CPU or DEVICE_GPU */
    FILE *out;                   /* where command output goes (stdout) */
    const char *current_command; /* the command line being run, for provenance in exports */

    /* model mode (models/, cli/cmd_model.c): a loaded or random model run over token ids */
    struct model *model; /* NULL until load / model random */
    int32_t *tokens;     /* [ntokens]: the ids to run (tokens FILE, prompt TEXT, generators) */
    int ntokens;
    float *logits;        /* [ntokens, vocab]: logits of the tokens run so far (model->pos) */
    trace tr;             /* every layer's probes per token, layer, head (mixers/record.h) */
    int tr_ready;         /* tr holds the current model's probe series */
    char ckpt_sha256[65]; /* hex SHA-256 of the loaded weights file; "" for random models */

    /* raw-mixer mode and generators (scenes/): cli/cmd_stream.c, cmd_set.c, cmd_show.c,
     * cmd_compare.c, cmd_tui.c. Zero (session_init's memset) means "off / the default". */
    struct raw_mode *raw;     /* `mixer NAME ...`: lanes of mixer cores and a stream; NULL = none */
    struct task_prompt *task; /* the last generated prompt with its scored targets, or NULL */
    int set_progress;         /* `set progress`: 0 auto (on a terminal), 1 on, -1 off */
    int set_chunk;            /* `set chunk`: prefill chunk for raw mixers, 0 = the mixer's */
    int set_rows;             /* `set rows`: most token rows `show` prints, 0 = 40, -1 = all */
    long set_seed;            /* `set seed`: the seed generators use when seed= is not given */
    double set_blowup;        /* `set blowup`: state norm that counts as blown up, 0 = 1e3 */
    double set_lla;           /* `set lla`: ridge of the LLA diagnostics (mixers/lla.h), 0 = off */
    char set_outdir[256];     /* `set outdir`: where scenes write figures ($outdir), "" = default */
    int set_arith;            /* `set arith`: 1 tf32, fla's GPU arithmetic on models (arith.h) */
    double progress_t0, progress_last; /* progress lines on long runs (seconds, monotonic) */
} session;

int session_init(session *s, err *e);
void session_free(session *s);

/* model mode (cli/cmd_model.c): frees the model block; sets the ids to run (checked against the
 * model's vocabulary, position back to 0), e.g. from a prompt generator. */
void session_model_free(session *s);
int session_set_tokens(session *s, const int32_t *ids, int n, err *e);
/* `set arith fp32|tf32` (cli/cmd_model.c): the setting, applied to the model now and on load. */
int session_set_arith(session *s, int tf32, err *e);

/* raw-mixer mode (cli/cmd_stream.c, weak where others call it): frees the raw block and the
 * task; raw_active: a mixer is selected, so step / run / reset / info act on it. */
void session_raw_free(session *s) __attribute__((weak));
int raw_active(session *s) __attribute__((weak));
int raw_step(session *s, long n, err *e) __attribute__((weak));
int raw_run(session *s, int argc, char **argv, err *e) __attribute__((weak));
int raw_reset(session *s, err *e) __attribute__((weak));
void raw_info(session *s) __attribute__((weak));
void raw_leave(session *s) __attribute__((weak));
/* A progress line (tokens/s) on stderr once a loop has run a second on a terminal; call with
 * done = 1..total each token (cli/cmd_set.c). */
void session_progress(session *s, long done, long total) __attribute__((weak));

/* ^C: the handler sets a flag that long loops poll; the REPL clears it before each command. */
extern volatile sig_atomic_t session_sigint;
void session_install_sigint(void);
static inline int session_interrupted(const session *s) {
    (void)s;
    return session_sigint != 0;
}

#endif
