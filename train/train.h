/* train.h: training a model of the lab's own stack on a task generator's prompts (`train`).
 *
 *   model random MIXER (layers, hidden, heads, head_dim, the task's vocabulary, seed)
 *   per step:  `batch` fresh prompts of `seq` tokens (scenes/prompts.h: mqar, niah, overwrite,
 *              a5), the mean cross-entropy over their scored positions, its gradient
 *              (train/model_grad.h), the global gradient norm clipped to `clip`, AdamW
 *              (beta1 0.9, beta2 0.95, eps 1e-8; weight decay on matrices only), the learning
 *              rate warmed up linearly over `warmup` steps then cosine-decayed to 0 at `steps`.
 *   every `log` steps and at the end: the accuracy and loss on `eval` held-out prompts (fixed,
 *              drawn from a seed stream the training batches never use), one progress line and
 *              one row of OUT/log.csv.
 *   at the start (step-000000, the initial weights), every `every` steps, at the end, on ^C and
 *              when the loss goes non-finite: a checkpoint
 *              OUT/step-NNNNNN/ (config.json + model.safetensors, fla's layout) whose config.json
 *              keeps the command and the step under "mixscope_train".
 *
 * Deterministic: the same options give the same weights, bit for bit, for any thread count. */
#ifndef MIXSCOPE_TRAIN_H
#define MIXSCOPE_TRAIN_H

#include <stdint.h>
#include <stdio.h>

#include "../core/err.h"
#include "../core/opts.h"
#include "../models/model.h"

typedef struct train_cfg {
    char mixer[32];                      /* gdn, deltanet, kaczmarz */
    char task[16];                       /* mqar, niah, overwrite, a5 */
    int layers, hidden, heads, head_dim; /* model shape */
    int vocab;                           /* the task's vocabulary (a5: 60) */
    int pairs, keys;                     /* mqar pairs, overwrite keys */
    int steps, batch, seq, warmup;
    double lr, wd, clip;
    uint64_t seed;
    int bf16;       /* precision=bf16: dense products on bf16-rounded inputs, fp32 accumulation */
    int gpu;        /* device gpu: the passes and the optimiser on the GPU (kernels/gpu_train.h) */
    int every;      /* checkpoint interval in steps (0: at the end only) */
    int log_every;  /* progress and held-out accuracy interval */
    int eval;       /* held-out prompts */
    int diverge_ok; /* diverge=ok: a run that diverges is a finding, not a failed command */
    double target;  /* target=A: stop at the first report whose held-out accuracy reaches A */
    int chunk;      /* BPTT: states kept every `chunk` tokens */
    int rows;       /* tokens per forward/backward pass (a batch is cut into passes) */
    char out[1024]; /* checkpoint folder; "" writes nothing */
    int dump;       /* also OUT/batches.safetensors (every step's ids and targets) and
                     * OUT/grads-000000.safetensors (step 0's gradient): for tools/train_peer.py */
    char command[1024]; /* the command line, for config.json */
    opts *model_opts;   /* further config.json keys for model random (may be NULL) */
} train_cfg;

/* Defaults: 2 layers, hidden 128, 2 heads of 64, mqar with 32 pairs, 300 steps of 64 prompts of
 * 256 tokens, lr 3e-3, warmup 30, wd 0.1, clip 1, seed 0, fp32, log every 25, 256 held-out. */
void train_cfg_default(train_cfg *c);

/* Reads train's options (task= layers= ... precision= every= out= ...; the command's help lists
 * them) from o on top of the defaults. Keys it does not know are config.json keys for model
 * random: they go to *rest (pointing into o) and c->model_opts = rest, unless one is a near miss
 * of an option ("step=" for steps=), which is refused. c->command and c->gpu are the caller's. */
int train_cfg_parse(train_cfg *c, const char *mixer, opts *o, opts *rest, err *e);

/* 1 when a run of c trains on the GPU under device gpu (gdn, deltanet, kaczmarz in fp32, without
 * DeltaNet's qk_norm=sum); otherwise 0 and why, one line ("gla has no GPU trainer yet"): the
 * caller trains on the CPU instead (train's command says so). */
int train_cfg_gpu_capable(const train_cfg *c, char *why, size_t n);

/* One progress report. */
typedef struct train_status {
    int step, steps;         /* steps done, of */
    double loss;             /* the last step's batch loss */
    double eval_loss, acc;   /* held-out (NaN when not evaluated at this report) */
    double grad_norm, lr;    /* before clipping; the rate of the last step */
    double tok_s, elapsed_s; /* training tokens a second over the last interval; wall time */
    int final;               /* the last report of the run */
    const char *note;        /* a line to print (a checkpoint written, divergence), or NULL */
} train_status;

/* The progress line of a report ("step 25/300  loss 4.8123  held-out 1.2% ...") and its note. */
void train_status_print(FILE *out, const train_status *st);

typedef struct train_hooks {
    void (*progress)(void *ctx, const train_status *st);
    int (*stop)(void *ctx); /* non-zero: stop after this step (^C) */
    void *ctx;
} train_hooks;

/* How a run ended. */
typedef enum train_end { TRAIN_DONE, TRAIN_STOPPED, TRAIN_DIVERGED } train_end;

/* Trains a fresh model as cfg says; *out receives it (the caller frees) whenever training
 * started, whatever the ending. Returns -1 with e set when it could not start or a checkpoint
 * could not be written. */
int train_run(const train_cfg *cfg, const train_hooks *hooks, model **out, train_end *how, err *e);

#endif
