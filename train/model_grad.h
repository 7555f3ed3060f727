/* model_grad.h: the loss of a model on a batch of token sequences and its gradient with respect to
 * every tensor of the model's slot list, for the trainer (train.h).
 *
 * The model is the lab's own (models/model.h): the same slot list, the same weights, the same
 * cores; this file runs the model stack over whole sequences with the float ops of ops.h and then
 * backwards through them. Its logits equal model_prefill's (tests/test_train.c). Families
 * differentiated so far: the delta-rule layers (gated_deltanet, delta_net, kaczmarz_deltanet with
 * the gdn, deltanet or kaczmarz core); train_model_check names what is missing for others.
 *
 * A pass works on B sequences of T tokens (N = B T rows) and keeps every activation the backward
 * needs (about 30 floats per row and hidden unit per layer); the recurrences keep only their
 * states every `chunk` tokens (ops.h). */
#ifndef MIXSCOPE_TRAIN_MODEL_GRAD_H
#define MIXSCOPE_TRAIN_MODEL_GRAD_H

#include <stdint.h>

#include "../core/err.h"
#include "../models/model.h"

/* The gradient of every slot of a model: one buffer in slot order, and layer structs whose
 * weight fields point into it exactly where the model's point at the weights (so the backward
 * reads L->q_proj and G->q_proj side by side). Tied heads share the embedding's gradient. */
typedef struct train_grads {
    int64_t n;  /* floats */
    float *buf; /* [n] */
    float **of; /* [nslots]: slot i's gradient, into buf */
    layer *L;   /* [layers] */
    float *embed, *norm_f, *lm_head;
} train_grads;

int train_grads_init(train_grads *g, const model *m, err *e);
void train_grads_zero(train_grads *g);
void train_grads_free(train_grads *g);

/* 0 when the trainer can differentiate every layer of m; else -1 and what it cannot. */
int train_model_check(const model *m, err *e);

typedef struct train_pass train_pass; /* activations and scratch of one B x T pass */

int train_pass_init(train_pass **p, const model *m, int B, int T, int chunk, err *e);
void train_pass_free(train_pass *p);

/* Runs the model over ids [B, T] from a reset state; scores the rows whose target [B, T] is not
 * -1 with the cross-entropy, each weighted by wgt. With g, adds the gradient of that weighted
 * loss to g. Returns the weighted loss sum; *correct (may be NULL) gains the argmax hits. logits
 * (may be NULL) receives [B, T, vocab]. */
double train_model_pass(const model *m, train_pass *p, const int32_t *ids, const int32_t *target,
                        float wgt, train_grads *g, int *correct, float *logits);

#endif
