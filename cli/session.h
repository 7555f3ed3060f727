/* session.h: everything one run of mixscope holds between commands (the model or raw mixer, the
 * tokens, the probe trace, the device, settings). Commands read and change it; nothing else does.
 */
#ifndef MIXSCOPE_SESSION_H
#define MIXSCOPE_SESSION_H

#include <signal.h>
#include <stdio.h>

#include "../core/err.h"
#include "../core/trace.h"
#include "../engine/engine.h"

enum { DEVICE_CPU = ENGINE_CPU, DEVICE_GPU = ENGINE_GPU };

typedef struct session {
    int quit;                    /* `quit` was run */
    int script_depth;            /* > 0 while a script file (source, a .scene, the tour) runs */
    int script_err_placed;       /* a failing script named its file and line already */
    int leave_script;            /* `pause` got q: the running scripts end quietly */
    int parse_only;              /* fuzz/fuzz_script: commands are split, found and checked for
                                  * their argument count, not run */
    int batch;                   /* -c or script files: stop at the first error */
    int interactive;             /* stdin and stdout are a terminal: progress lines, colour */
    FILE *out;                   /* where command output goes (stdout) */
    const char *current_command; /* the command line being run, for provenance in exports */

    /* stepping and recording (engine/engine.h): the model or raw lanes, the tokens, their
     * logits, the probe trace, the device, the probe selection */
    engine eng;
    /* the text tokenizer (tokenizer/hf.h): tokenizer.json beside a loaded model, or `tokenizer
     * PATH`; NULL: byte-level text */
    struct hf_tok *tok;
    /* the last `train`'s reports, or a run folder's log.csv (`view train run=DIR`) */
    trace train_tr;

    /* generators (scenes/) and settings. Zero (session_init's memset) means "the default". */
    struct task_prompt *task; /* the last generated prompt with its scored targets, or NULL */
    int set_progress;         /* `set progress`: 0 auto (on a terminal), 1 on, -1 off */
    int set_rows;             /* `set rows`: most token rows `show` prints, 0 = 40, -1 = all */
    long set_seed;            /* `set seed`: the seed generators use when seed= is not given */
    double set_blowup;        /* `set blowup`: state norm that counts as blown up, 0 = 1e3 */
    char set_outdir[256];     /* `set outdir`: where scenes write figures ($outdir), "" = default */
    char set_models[1024];    /* `set models`: the shipped checkpoints ($models), "" = default */
    int set_arith;            /* `set arith`: 1 tf32, fla's GPU arithmetic on models (arith.h) */
    char set_title[160];      /* `set title`: the figures' title, "" = each view's own */
    char set_labels[256];     /* `set labels`: legend names of layers / lanes, comma separated */
    double progress_t0, progress_last; /* progress lines on long runs (seconds, monotonic) */
    /* the commands that made what is in the session: from the last load, model random, mixer
     * or train on, read-only commands (show, export, view, ...) left out; figures carry it */
    char *recipe;
    size_t recipe_len;
} session;

/* session.c: the session's lifetime and what several commands share. */
int session_init(session *s, err *e);
void session_free(session *s);
/* The model's ids to run (checked against its vocabulary, position back to 0). */
int session_set_tokens(session *s, const int32_t *ids, int n, err *e);
/* `set arith fp32|tf32`: the setting, applied to the model now and on load. */
int session_set_arith(session *s, int tf32, err *e);
/* `device cpu|gpu` and `set device`: prints what happened. */
int session_set_device(session *s, const char *name, err *e);
/* Notes a command that ran without error (commands.c): the recipe restarts at a command that
 * makes a new model or lanes and skips those that only read. */
void session_recipe_add(session *s, const char *name, int argc, char **argv, const char *line);
/* The recipe: command lines separated by "; ", or "none". */
const char *session_history_text(const session *s);
/* Provenance for exports: the digest of the weights file that was loaded, or NULL. */
const char *session_checkpoint_sha256(session *s);
/* A token as short printable text: the tokenizer's piece, or the byte ('a', '\n', '\xff'). */
const char *session_tok(const session *s, int32_t id, char *buf, size_t n);
/* Text to ids with the session's tokenizer (special: its template's tokens), or UTF-8 bytes;
 * checked against the model's vocabulary. *ids malloc'd. */
int session_encode(session *s, const char *text, size_t n, int special, int32_t **ids, int *nids,
                   err *e);
/* Uses tokenizer t (NULL: byte-level) for the session's text, after checking it against the
 * model's vocabulary; takes ownership. note gets a line for the user ("" when nothing to say). */
int session_set_tokenizer(session *s, struct hf_tok *t, err *e);
/* The display name of layer l of the session's trace: the raw lane's label, or "l<l>". */
const char *session_layer_label(session *s, int l, char *buf, size_t n);
/* The engine's tick (engine_tick_fn): a progress line (tokens/s) on stderr once a loop has run a
 * second on a terminal, and ^C. Call with done = 0..total. */
int session_tick(void *s, long done, long total);
/* The whole (absolute) path of a file just written, for "wrote ..." lines. */
const char *session_whole_path(const char *path, char *buf, size_t n);
/* Monotonic seconds. */
double session_now(void);
/* mkdir -p */
int session_make_dirs(const char *path, err *e);

/* settings.c: `set` keys, their values as text, and $NAME expansion of command lines. */
int setting_rows(const session *s); /* -1: all */
long setting_seed(const session *s);
double setting_blowup(const session *s);
const char *setting_outdir(const session *s);
/* The current value of a setting as text; NULL for an unknown key. */
const char *setting_text(const session *s, const char *key, char *buf, size_t n);
/* Changes a setting from its text (the `set` command); prints nothing. */
int setting_set(session *s, const char *key, const char *value, err *e);
/* Every key with its meaning, for `set` and completion: NULL-terminated. */
const char *const *setting_keys(void);
const char *setting_meaning(const char *key);
/* $NAME and ${NAME} of settings in a line: *out is NULL when nothing was expanded. */
int session_expand(session *s, const char *line, char **out, err *e);

/* ^C: the handler sets a flag that long loops poll; the REPL clears it before each command. */
extern volatile sig_atomic_t session_sigint;
void session_install_sigint(void);
static inline int session_interrupted(const session *s) {
    (void)s;
    return session_sigint != 0;
}

#endif
