/* nonfinite.h: the first NaN / Inf of a run, named by token, layer, head and quantity (the
 * engine scans every step with it; diag/ reads the result). engine/nonfinite.c says how. */
#ifndef MIXSCOPE_NONFINITE_H
#define MIXSCOPE_NONFINITE_H

#include <stddef.h>
#include <stdint.h>

#include "../mixers/mixer.h"

struct model;

/* ---- the first non-finite value ---------------------------------------------- */

typedef struct diag_nf {
    int found;
    int64_t token;   /* position of the token */
    int layer;       /* layer index; the model's layer count for the final norm / head */
    int head;        /* core head, or -1 for a quantity that is not per head (residual, logits) */
    int nheads;      /* heads of that layer where the same quantity is non-finite */
    char what[32];   /* short name: an input ("g", "k", "beta"), a probe ("k_norm"), "state", "o",
                        "residual", "logits" */
    char desc[160];  /* the quantity in words */
    float value;     /* the first non-finite value met: NaN, +inf or -inf */
    char cause[320]; /* the likely cause when the weights show it, else "" */
} diag_nf;

void diag_nf_clear(diag_nf *r);
/* One core step of a mixer: its inputs, state after the step, output [H, dv] and probes (may be
 * NULL). Fills r (when nothing was found before) with the first non-finite quantity in the order
 * the recurrence computes them: inputs, derived quantities (probes), state, output. */
int diag_nf_scan_core(diag_nf *r, const mixer_ops *mx, const mixer_cfg *c, const mixer_tok *in,
                      const float *state, const float *o, const float *probes, int64_t token,
                      int layer);
/* The model's layer `li` right after its core step (call it from model->layer_hook): the
 * residual entering the layer, then diag_nf_scan_core on the layer's core, then the likely cause
 * from the layer's weights (exp(A_log) overflow, non-finite tensors). */
int diag_nf_scan_layer(diag_nf *r, const struct model *m, int li, const mixer_tok *in,
                       const float *state);
/* After model_step: the residual after the last layer and the logits [vocab]. m->pos has already
 * advanced past the token. */
int diag_nf_scan_end(diag_nf *r, const struct model *m, const float *logits);
/* 1 when probe `name` of core mx is finite in a healthy run, so a NaN / Inf in it means the step
 * went wrong (the quantities the scan above names: norms, gates, decays; not a half-life, which is
 * infinite at g = 0, nor a probe NaN by definition, e.g. KATA's beta outside the delta variant). */
int diag_nf_probe_checked(const mixer_ops *mx, const mixer_cfg *c, const char *name);
/* "first non-finite value at token 811, layer 5, head 1, in the decay g (...): -inf; <cause>". */
const char *diag_nf_message(const diag_nf *r, char *buf, size_t n);

/* A layer_hook context that only scans (for callers without one of their own). */
typedef struct diag_nf_hook {
    diag_nf nf;
} diag_nf_hook;
void diag_nf_hook_fn(void *ctx, const struct model *m, int layer, const mixer_tok *in,
                     const float *state);

/* The state parts that hold one slice per head (leading dimension H), into parts; their count.
 * KV caches (states that grow with max_t) have none. */
int diag_head_parts(const mixer_ops *mx, const mixer_cfg *c, state_part *parts);
/* Floats of one head's slice of a per-head part. */
size_t diag_part_head_floats(const state_part *p);
/* 1 when the core's state grows with the tokens (a KV cache). */
int diag_state_grows(const mixer_ops *mx, const mixer_cfg *c);

#endif
