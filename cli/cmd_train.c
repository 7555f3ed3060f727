/* cmd_train.c: `train MIXER [task=...] [key=value ...]` (train/train.h): parses, reports progress,
 * and makes the trained model the session's model. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../core/opts.h"
#include "../train/history.h"
#include "../train/train.h"
#include "command.h"
#include "session.h"

static int parse_cfg(session *s, train_cfg *c, int argc, char **argv, opts *o, opts *rest, err *e) {
    if (opts_parse(o, argc - 2, argv + 2, e)) return -1;
    if (train_cfg_parse(c, argv[1], o, rest, e)) return -1;
    /* the command line, for the checkpoints' config.json */
    size_t n = 0;
    for (int i = 0; i < argc && n < sizeof c->command - 1; i++)
        n += (size_t)snprintf(c->command + n, sizeof c->command - n, "%s%s", i ? " " : "", argv[i]);
    c->gpu = s->eng.device == ENGINE_GPU;
    char why[160];
    if (c->gpu && !train_cfg_gpu_capable(c, why, sizeof why)) {
        fprintf(s->out, "note: %s; training on the CPU\n", why);
        c->gpu = 0;
    }
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
    train_status_print(s->out, st);
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
            "training %s on %s (%s): %d layers, hidden %d, %d heads of %d; %d steps of %d x %d "
            "tokens, lr %g%s%s\n",
            c.mixer, c.task, c.gpu ? "gpu" : "cpu", c.layers, c.hidden, c.heads, c.head_dim,
            c.steps, c.batch, c.seq, c.lr, c.out[0] ? ", checkpoints in " : "", c.out);
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
    if (how == TRAIN_DIVERGED && !c.diverge_ok) {
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
    if (how == TRAIN_DIVERGED)
        fprintf(s->out,
                "diverged (diverge=ok): the weights that made the non-finite step are the "
                "session's model (%lld parameters)\n",
                (long long)model_param_count(m));
    else
        fprintf(s->out, "%s: the trained model is the session's model (%lld parameters)\n",
                how == TRAIN_STOPPED ? "stopped" : "done", (long long)model_param_count(m));
    return 0;
}

const command cmd_train = {
    "train",
    "MIXER [task=mqar|niah|overwrite|a5] [key=value ...]",
    "train a small model on a task's prompts (AdamW, checkpoints, log.csv)",
    "  train MIXER [task=mqar] [layers=2 hidden=128 heads=2 head_dim=64]\n"
    "        [steps=300 batch=64 seq=256 lr=3e-3 warmup=steps/10 wd=0.1 clip=1\n"
    "        seed=0 precision=fp32|bf16] [every=N out=DIR] [log=25 eval=256]\n"
    "        [pairs=32 keys=16 vocab=256] [target=A diverge=ok dump=1] [KEY=VALUE]\n"
    "      Trains a fresh model whose layers use MIXER (gdn, deltanet, kaczmarz: on\n"
    "      the CPU or under device gpu; gla, mamba2, softmax, parallax, kalman and\n"
    "      kata with any variant: on the CPU, under device gpu too, after a note;\n"
    "      kalman has one head of head_dim states, 16 by default) on fresh prompts of\n"
    "      the task every step (mqar: `pairs` pairs, then queries up to seq; niah;\n"
    "      overwrite: `keys` keys; a5: vocabulary 60), the loss taken at the scored\n"
    "      positions only. AdamW (0.9, 0.95, eps 1e-8, weight decay on matrices), a\n"
    "      linear warmup, then a cosine to 0; the gradient norm clipped to `clip` (0:\n"
    "      off). Every `log` steps a line gives the batch loss, the accuracy and loss\n"
    "      on `eval` held-out prompts, the gradient norm before clipping, the rate\n"
    "      and tokens/s. With out=DIR: DIR/log.csv, and a checkpoint DIR/step-NNNNNN/\n"
    "      at step 0, every `every` steps and at the end (load and diagnose DIR read\n"
    "      them); dump=1 adds DIR/batches.safetensors (every step's ids and targets)\n"
    "      and DIR/grads-000000.safetensors (step 0's gradient) for\n"
    "      tools/train_peer.py. target=A stops at the first report whose held-out\n"
    "      accuracy reaches A (0..1). precision=bf16 (CPU): the products round their\n"
    "      operands and outputs to bf16, as bf16 autocast does; norms, recurrences\n"
    "      and weights stay fp32. ^C stops after the current step and keeps a\n"
    "      checkpoint. A non-finite loss or gradient stops the run with a checkpoint\n"
    "      of the weights that made it, and the command fails; with diverge=ok it\n"
    "      does not, and those weights become the session's model. Other KEY=VALUE\n"
    "      pairs are config.json keys (use_gate=false; qk_norm=sum for deltanet;\n"
    "      l2norm_keys=false for gdn: GDN's beta on raw keys; variant=delta groups=2\n"
    "      for kata). The trained model becomes the session's model.",
    1,
    -1,
    run_train,
    COMPLETE_MIXER,
    "task layers hidden heads head_dim steps batch seq lr warmup wd clip seed precision every "
    "out log eval pairs keys vocab dump diverge target"};
