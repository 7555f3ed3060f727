/* session.c: the session's lifetime and what several commands share: the tokens, the arithmetic
 * and device settings that act on the engine, provenance, lane labels, progress and ^C. */
#include "../core/fileio.h"
#include "session.h"

#include "../models/tokenizer.h"
#include "../tokenizer/hf.h"

#include <errno.h>
#include <limits.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>

#include "../kernels/gpu.h"
#include "../mixers/tf32.h"
#include "../models/arith.h"
#include "../models/model.h"
#include "../scenes/prompts.h"

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
    memset(s, 0, sizeof *s);
    s->out = stdout;
    if (engine_init(&s->eng, e)) return -1;
    trace_init(&s->train_tr);
    s->eng.tick = session_tick, s->eng.tick_ctx = s;
    return 0;
}

void session_free(session *s) {
    free(s->recipe);
    engine_free(&s->eng);
    hf_free(s->tok);
    trace_free(&s->train_tr);
    if (s->task) {
        task_free(s->task);
        free(s->task);
    }
    memset(s, 0, sizeof *s);
}

/* Commands whose run changes nothing a figure shows. */
static int reads_only(const char *name) {
    static const char *const RO[] = {"help",     "show",       "info",    "view", "export",
                                     "figure",   "echo",       "lens",    "quit", "diagnose",
                                     "tokenize", "detokenize", "history", "tui",  "compare",
                                     "edits",    "source",     "model"};
    for (size_t i = 0; i < sizeof RO / sizeof RO[0]; i++)
        if (!strcmp(name, RO[i])) return 1;
    return 0;
}

void session_recipe_add(session *s, const char *name, int argc, char **argv, const char *line) {
    enum { RECIPE_MAX = 16384 };
    int fresh = !strcmp(name, "load") || !strcmp(name, "mixer") || !strcmp(name, "train") ||
                (!strcmp(name, "model") && argc > 1 && !strcmp(argv[1], "random"));
    if (!fresh && reads_only(name)) return;
    if (fresh) s->recipe_len = 0;
    while (*line == ' ' || *line == '\t') line++;
    size_t n = strlen(line);
    while (n && (line[n - 1] == ' ' || line[n - 1] == '\n')) n--;
    if (s->recipe_len + n + 3 > RECIPE_MAX) return; /* the first 16 KB of a very long session */
    char *r = realloc(s->recipe, s->recipe_len + n + 3);
    if (!r) return;
    s->recipe = r;
    if (s->recipe_len) memcpy(r + s->recipe_len, "; ", 2), s->recipe_len += 2;
    memcpy(r + s->recipe_len, line, n);
    s->recipe_len += n;
    r[s->recipe_len] = 0;
}

const char *session_history_text(const session *s) {
    return s->recipe && s->recipe_len ? s->recipe : "none";
}

int session_set_tokens(session *s, const int32_t *ids, int n, err *e) {
    return engine_set_tokens(&s->eng, ids, n, e);
}

int session_set_arith(session *s, int tf32, err *e) {
    s->set_arith = tf32;
    model *m = s->eng.model;
    if (!m) return 0;
    int n = model_set_arith(m, tf32 ? MIXER_ARITH_TF32 : MIXER_ARITH_FP32, e);
    if (n < 0 || engine_model_changed(&s->eng, e)) return -1;
    if (!tf32)
        fprintf(s->out, "arith fp32: exact float32 in every core (position back to 0)\n");
    else if (n == 0)
        fprintf(s->out, "arith tf32: fla's forward of this model has no TF32 products\n");
    else
        fprintf(s->out, "arith tf32: fla's TF32 products in %d of %d layers%s\n", n, m->c.layers,
                model_arith_chunked(m) ? " (run: chunked form for more than 64 tokens, as fla)"
                                       : "");
    return 0;
}

int session_set_device(session *s, const char *name, err *e) {
    char why[256];
    if (strcmp(name, "cpu") == 0) {
        if (engine_set_device(&s->eng, ENGINE_CPU, e)) return -1;
        fprintf(s->out, "device: cpu\n");
        return 0;
    }
    if (strcmp(name, "gpu") != 0)
        return err_set(e, "device: expected cpu or gpu, got '%.40s'", name);
    if (!gpu_available(why, sizeof why)) {
        if (engine_set_device(&s->eng, ENGINE_CPU, e)) return -1;
        fprintf(s->out, "device: staying on the cpu: %s\n", why);
        return 0;
    }
    if (engine_set_device(&s->eng, ENGINE_GPU, e)) return -1;
    fprintf(s->out, "device: gpu, %s\n", why);
    return 0;
}

const char *session_checkpoint_sha256(session *s) {
    /* hashed on first use (provenance of an export), not at load: 1.2 s a 2 GB checkpoint */
    err e = {{0}};
    return s->eng.model ? model_weights_sha256(s->eng.model, &e) : NULL;
}

const char *session_layer_label(session *s, int l, char *buf, size_t n) {
    if (engine_raw_active(&s->eng) && l >= 0 && l < s->eng.raw->nl)
        snprintf(buf, n, "%s", s->eng.raw->lane[l].label);
    else
        snprintf(buf, n, "l%d", l);
    return buf;
}

const char *session_whole_path(const char *path, char *buf, size_t n) {
    char *r = realpath(path, NULL); /* the file exists: it was just written */
    snprintf(buf, n, "%s", r ? r : path);
    free(r);
    return buf;
}

double session_now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

int session_tick(void *ctx, long done, long total) {
    session *s = ctx;
    if (session_interrupted(s)) return 1;
    int on = s->set_progress > 0 || (s->set_progress == 0 && s->interactive);
    if (!on) return 0;
    double now = session_now();
    if (done <= 1) s->progress_t0 = now, s->progress_last = 0;
    if (done >= total) {
        if (s->progress_last > 0) fprintf(stderr, "\r%60s\r", "");
        s->progress_last = 0;
        return 0;
    }
    double el = now - s->progress_t0;
    if (el < 1.0 || now - s->progress_last < 0.25) return 0;
    s->progress_last = now;
    fprintf(stderr, "\r  %ld/%ld tokens, %.0f tokens/s (^C stops, the session stays) ", done, total,
            (double)done / el);
    fflush(stderr);
    return 0;
}

int session_make_dirs(const char *path, err *e) {
    return path_make_dirs(path, e);
}

/* ---- text ---- */

const char *session_tok(const session *s, int32_t id, char *buf, size_t n) {
    return s->tok ? hf_show(s->tok, id, buf, n) : tok_show(id, buf, n);
}

int session_encode(session *s, const char *text, size_t n, int special, int32_t **ids, int *nids,
                   err *e) {
    *ids = NULL, *nids = 0;
    if (n > (1u << 26)) return err_set(e, "text longer than 64 MiB");
    if (s->tok) return hf_encode(s->tok, text, n, special, ids, nids, e);
    if (s->eng.model && tok_bytes_servable(s->eng.model->c.vocab, e)) return -1;
    int32_t *v = malloc((n ? n : 1) * sizeof *v);
    if (!v) return err_set(e, "out of memory");
    for (size_t i = 0; i < n; i++) v[i] = (unsigned char)text[i];
    *ids = v, *nids = (int)n;
    return 0;
}

int session_set_tokenizer(session *s, struct hf_tok *t, err *e) {
    if (t && s->eng.model && hf_vocab_size(t) > s->eng.model->c.vocab) {
        int tv = hf_vocab_size(t);
        hf_free(t);
        return err_set(e,
                       "tokenizer has %d ids but the model's vocabulary is %d: its ids would "
                       "index past the embedding (refused)",
                       tv, s->eng.model->c.vocab);
    }
    hf_free(s->tok);
    s->tok = t;
    return 0;
}
