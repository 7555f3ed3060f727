/* cmd_train.c: `train MIXER [task=...] [key=value ...]` (train/train.h): parses, reports progress,
 * and makes the trained model the session's model. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../core/names.h"
#include "../core/opts.h"
#include "../scenes/prompts.h"
#include "../train/history.h"
#include "../train/train.h"
#include "command.h"
#include "session.h"

/* The options train reads itself; any other key=value is a config.json key of the model. */
static const char *const TRAIN_KEYS[] = {
    "task",  "layers", "hidden", "heads", "head_dim", "vocab", "pairs",     "keys",
    "steps", "batch",  "seq",    "lr",    "warmup",   "wd",    "clip",      "seed",
    "every", "out",    "log",    "eval",  "chunk",    "rows",  "precision", "dump",
};
#define NTRAIN_KEYS (int)(sizeof TRAIN_KEYS / sizeof TRAIN_KEYS[0])

static int parse_cfg(session *s, train_cfg *c, int argc, char **argv, opts *o, opts *rest, err *e) {
    train_cfg_default(c);
    if (snprintf(c->mixer, sizeof c->mixer, "%s", argv[1]) >= (int)sizeof c->mixer ||
        (strcmp(c->mixer, "gdn") && strcmp(c->mixer, "deltanet") && strcmp(c->mixer, "kaczmarz")))
        return err_set(e,
                       "train: MIXER '%.40s': the trainer has backward passes for gdn, deltanet "
                       "and kaczmarz",
                       argv[1]);
    if (opts_parse(o, argc - 2, argv + 2, e)) return -1;
    const char *task = opts_str(o, "task", "mqar");
    int ti = -1;
    for (int i = 0; task_names[i]; i++)
        if (!strcmp(task, task_names[i])) ti = i;
    if (ti < 0) {
        const char *near = names_closest(task, task_names, 4);
        return err_set(e, "train: task '%.40s' is not one of mqar, niah, overwrite, a5%s%s%s", task,
                       near ? " (did you mean '" : "", near ? near : "", near ? "'?)" : "");
    }
    snprintf(c->task, sizeof c->task, "%s", task);
    int a5 = !strcmp(task, "a5");
    long v;
    double d;
#define INT_OPT(key, field, lo, hi)                                                                \
    do {                                                                                           \
        if (opts_int_in(o, key, c->field, lo, hi, &v, e)) return -1;                               \
        c->field = (int)v;                                                                         \
    } while (0)
#define FLOAT_OPT(key, field, lo, hi)                                                              \
    do {                                                                                           \
        if (opts_float(o, key, c->field, &d, e)) return -1;                                        \
        if (!(d >= (lo) && d <= (hi)))                                                             \
            return err_set(e, "train: option '%s': expected a number in [%g, %g], got %g", key,    \
                           (double)(lo), (double)(hi), d);                                         \
        c->field = d;                                                                              \
    } while (0)
    INT_OPT("layers", layers, 1, 64);
    INT_OPT("hidden", hidden, 1, 4096);
    INT_OPT("heads", heads, 1, 256);
    c->head_dim = c->hidden / c->heads > 0 ? c->hidden / c->heads : 1;
    INT_OPT("head_dim", head_dim, 1, 1024);
    if (a5) c->vocab = 60;
    INT_OPT("vocab", vocab, 4, 1 << 16);
    if (a5 && c->vocab < 60) return err_set(e, "train: task a5 needs vocab >= 60");
    INT_OPT("pairs", pairs, 1, 1 << 15);
    INT_OPT("keys", keys, 1, 1 << 15);
    INT_OPT("steps", steps, 1, 10000000);
    INT_OPT("batch", batch, 1, 1 << 16);
    INT_OPT("seq", seq, 8, 1 << 16);
    c->warmup = c->steps / 10;
    INT_OPT("warmup", warmup, 0, 10000000);
    FLOAT_OPT("lr", lr, 0, 10);
    FLOAT_OPT("wd", wd, 0, 10);
    FLOAT_OPT("clip", clip, 0, 1e30);
    if (opts_int_in(o, "seed", 0, 0, 1L << 62, &v, e)) return -1;
    c->seed = (uint64_t)v;
    INT_OPT("every", every, 0, 10000000);
    INT_OPT("log", log_every, 1, 10000000);
    INT_OPT("eval", eval, 0, 1 << 20);
    INT_OPT("chunk", chunk, 1, 4096);
    INT_OPT("rows", rows, 1, 1 << 24);
    INT_OPT("dump", dump, 0, 1);
    const char *prec = opts_str(o, "precision", "fp32");
    if (strcmp(prec, "fp32") && strcmp(prec, "bf16"))
        return err_set(e, "train: precision '%.20s': expected fp32 or bf16", prec);
    c->bf16 = !strcmp(prec, "bf16");
    const char *out = opts_str(o, "out", "");
    if (snprintf(c->out, sizeof c->out, "%s", out) >= (int)sizeof c->out)
        return err_set(e, "train: out=%.60s...: path too long", out);
#undef INT_OPT
#undef FLOAT_OPT
    if (c->dump && !c->out[0]) return err_set(e, "train: dump=1 writes into out=DIR: give it");
    if (c->every && !c->out[0])
        return err_set(e, "train: every=%d writes checkpoints: give out=DIR as well", c->every);
    if (!strcmp(task, "mqar") && (c->seq % 2 || c->seq / 2 - c->pairs < 1))
        return err_set(e,
                       "train: mqar with pairs=%d needs an even seq of more than %d tokens (pairs, "
                       "then queries fill it)",
                       c->pairs, 2 * c->pairs);
    if (!strcmp(task, "overwrite") && c->seq / (2 * c->keys) < 2)
        return err_set(e, "train: overwrite with keys=%d needs seq >= %d", c->keys, 4 * c->keys);
    if (c->warmup > c->steps) c->warmup = c->steps;
    /* the rest are config.json keys; a near miss of a train option is a typo, not a key */
    memset(rest, 0, sizeof *rest);
    for (int i = 0; i < o->n; i++) {
        if (o->used[i]) continue;
        const char *near = names_closest(o->key[i], TRAIN_KEYS, NTRAIN_KEYS);
        if (near)
            return err_set(e, "train: unknown option '%.40s' (did you mean '%s'?)", o->key[i],
                           near);
        rest->key[rest->n] = o->key[i], rest->val[rest->n] = o->val[i];
        rest->n++;
    }
    c->model_opts = rest;
    /* the command line, for the checkpoints' config.json */
    size_t n = 0;
    for (int i = 0; i < argc && n < sizeof c->command - 1; i++)
        n += (size_t)snprintf(c->command + n, sizeof c->command - n, "%s%s", i ? " " : "", argv[i]);
    c->gpu = s->eng.device == ENGINE_GPU;
    return 0;
}

typedef struct progress_ctx {
    session *s;
} progress_ctx;

static void print_progress(void *ctx, const train_status *st) {
    session *s = ((progress_ctx *)ctx)->s;
    err e = {{0}};
    if (train_history_push(&s->train_tr, st, &e))
        fprintf(s->out, "note: the training history for view train: %s\n", e.msg);
    if (isfinite(st->acc) || isfinite(st->tok_s)) {
        fprintf(s->out, "step %*d/%d  loss %.4f", st->steps >= 10000 ? 6 : 4, st->step, st->steps,
                st->loss);
        if (isfinite(st->acc))
            fprintf(s->out, "  held-out %5.1f%% (loss %.4f)", 100 * st->acc, st->eval_loss);
        fprintf(s->out, "  grad %.3g  lr %.2e", st->grad_norm, st->lr);
        if (isfinite(st->tok_s)) fprintf(s->out, "  %.1fk tok/s", st->tok_s / 1000);
        fprintf(s->out, "  %.0f s\n", st->elapsed_s);
    }
    if (st->note) fprintf(s->out, "  %s\n", st->note);
    fflush(s->out);
}

static int stop_requested(void *ctx) {
    return session_interrupted(((progress_ctx *)ctx)->s);
}

static int run_train(session *s, int argc, char **argv, const char *rest_text, err *e) {
    (void)rest_text;
    train_cfg c;
    opts o, rest;
    memset(&o, 0, sizeof o);
    if (parse_cfg(s, &c, argc, argv, &o, &rest, e)) {
        opts_free(&o);
        return -1;
    }
    if (c.out[0] && session_make_dirs(c.out, e)) {
        opts_free(&o);
        return err_prefix(e, "train: out=");
    }
    fprintf(s->out,
            "training %s on %s: %d layers, hidden %d, %d heads of %d; %d steps of %d x %d "
            "tokens, lr %g%s%s\n",
            c.mixer, c.task, c.layers, c.hidden, c.heads, c.head_dim, c.steps, c.batch, c.seq, c.lr,
            c.out[0] ? ", checkpoints in " : "", c.out);
    fflush(s->out);
    if (train_history_init(&s->train_tr, e)) {
        opts_free(&o);
        return -1;
    }
    progress_ctx pc = {s};
    train_hooks hooks = {print_progress, stop_requested, &pc};
    model *m = NULL;
    train_end how;
    int rc = train_run(&c, &hooks, &m, &how, e);
    opts_free(&o);
    if (rc) return -1;
    if (how == TRAIN_DIVERGED) {
        model_free(m);
        return err_set(e, "train: the run diverged%s%s", c.out[0] ? "; diagnose " : "",
                       c.out[0] ? c.out : " (give out=DIR to keep its checkpoints)");
    }
    char note[ERR_MSG_MAX + 32];
    if (engine_set_model(&s->eng, m, note, sizeof note, e)) {
        model_free(m);
        return -1;
    }
    if (note[0]) fprintf(s->out, "%s\n", note);
    fprintf(s->out, "%s: the trained model is the session's model (%lld parameters)\n",
            how == TRAIN_STOPPED ? "stopped" : "done", (long long)model_param_count(m));
    return 0;
}

const command cmd_train = {
    "train",
    "MIXER [task=mqar|niah|overwrite|a5] [key=value ...]",
    "train a small model on a task's prompts (AdamW, checkpoints, log.csv)",
    "  train MIXER [task=mqar] [layers=2 hidden=128 heads=2 head_dim=64] [steps=300 batch=64\n"
    "        seq=256 lr=3e-3 warmup=steps/10 wd=0.1 clip=1 seed=0 precision=fp32]\n"
    "        [every=N out=DIR] [log=25 eval=256] [pairs=32 keys=16 vocab=256] [KEY=VALUE ...]\n"
    "      Trains a fresh model whose layers use MIXER (gdn, deltanet, kaczmarz) on fresh\n"
    "      prompts of the task every step (mqar: `pairs` pairs then queries up to seq; niah;\n"
    "      overwrite: `keys` keys; a5: vocabulary 60), loss on the scored positions only.\n"
    "      AdamW (0.9, 0.95, eps 1e-8, weight decay on matrices), linear warmup then cosine\n"
    "      to 0, gradient norm clipped to `clip` (0: off). Every `log` steps it prints the\n"
    "      batch loss, the accuracy and loss on `eval` held-out prompts, the gradient norm\n"
    "      before clipping, the rate and tokens/s. With out=DIR: DIR/log.csv, and a checkpoint\n"
    "      DIR/step-NNNNNN/ at step 0, every `every` steps and at the end (load and\n"
    "      diagnose DIR read them); dump=1 adds DIR/batches.safetensors (every step's ids\n"
    "      and targets) and DIR/grads-000000.safetensors (step 0's gradient) for\n"
    "      tools/train_peer.py.\n"
    "      ^C stops after the current step and keeps a checkpoint. A non-finite loss or\n"
    "      gradient stops the run with a checkpoint of the weights that made it (the command\n"
    "      fails). Other KEY=VALUE pairs are config.json keys (use_gate=false ...). The trained\n"
    "      model becomes the session's model.",
    1,
    -1,
    run_train,
    COMPLETE_MIXER,
    "task layers hidden heads head_dim steps batch seq lr warmup wd clip seed precision every "
    "out log eval pairs keys vocab dump"};
