/* cfg.c: the options of `train` (train_cfg_parse, train.h), shared by the command and the
 * benchmark. */
#include <stdio.h>
#include <string.h>

#include "../core/names.h"
#include "../scenes/prompts.h"
#include "train.h"

/* The options train reads itself; any other key=value is a config.json key of the model. */
static const char *const TRAIN_KEYS[] = {
    "task",  "layers", "hidden", "heads",  "head_dim",  "vocab", "pairs",   "keys",   "steps",
    "batch", "seq",    "lr",     "warmup", "wd",        "clip",  "seed",    "every",  "out",
    "log",   "eval",   "chunk",  "rows",   "precision", "dump",  "diverge", "target",
};
#define NTRAIN_KEYS (int)(sizeof TRAIN_KEYS / sizeof TRAIN_KEYS[0])

int train_cfg_parse(train_cfg *c, const char *mixer, opts *o, opts *rest, err *e) {
    train_cfg_default(c);
    if (snprintf(c->mixer, sizeof c->mixer, "%s", mixer) >= (int)sizeof c->mixer ||
        (strcmp(c->mixer, "gdn") && strcmp(c->mixer, "deltanet") && strcmp(c->mixer, "kaczmarz") &&
         strcmp(c->mixer, "softmax") && strcmp(c->mixer, "gla") && strcmp(c->mixer, "mamba2") &&
         strcmp(c->mixer, "parallax") && strcmp(c->mixer, "kalman") && strcmp(c->mixer, "kata")))
        return err_set(e,
                       "train: MIXER '%.40s': the trainer has backward passes for gdn, deltanet, "
                       "kaczmarz, gla, mamba2, softmax, parallax, kalman and kata",
                       mixer);
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
    if (!strcmp(c->mixer, "kalman")) c->heads = 1, c->head_dim = 16; /* one head; 16 states */
    INT_OPT("heads", heads, 1, 256);
    if (strcmp(c->mixer, "kalman"))
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
    FLOAT_OPT("target", target, 0, 1);
    const char *dv = opts_str(o, "diverge", "fail");
    if (strcmp(dv, "fail") && strcmp(dv, "ok"))
        return err_set(e, "train: diverge='%.20s': expected fail or ok", dv);
    c->diverge_ok = !strcmp(dv, "ok");
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
    return 0;
}

int train_cfg_gpu_capable(const train_cfg *c, char *why, size_t n) {
    const char *qk = NULL;
    if (c->model_opts)
        for (int i = 0; i < c->model_opts->n; i++)
            if (!strcmp(c->model_opts->key[i], "qk_norm")) qk = c->model_opts->val[i];
    if (strcmp(c->mixer, "gdn") && strcmp(c->mixer, "deltanet") && strcmp(c->mixer, "kaczmarz"))
        snprintf(why, n, "%s has no GPU trainer yet (gdn, deltanet and kaczmarz have)", c->mixer);
    else if (c->bf16)
        snprintf(why, n, "precision=bf16 trains on the CPU only");
    else if (qk && !strcmp(qk, "sum"))
        snprintf(why, n, "qk_norm=sum trains on the CPU only");
    else
        return 1;
    return 0;
}
