/* replay.h: one mixer core over raw tensors in fla's [B, T, H, D] layout (the `replay` command).
 *
 * Reads the mixer's inputs by name (with an optional prefix: prefix=gdr. reads gdr.q, gdr.k, ...),
 * its static parameters and an optional initial state; runs the parallel form (prefill) for the
 * output and final state, and the step form for every per-token probe; writes
 *   o [B, T, H, dv], the final state parts (hT [B, H, dk, dv], ...), probe.<name> [B, T, H(, w)]
 * and reports how far prefill and step disagree (they must agree to rounding).
 * Single-head mixers given 3-D tensors ([B, T, D], Kalman's layout) get 3-D outputs back. */
#ifndef MIXSCOPE_REPLAY_H
#define MIXSCOPE_REPLAY_H

#include <stdio.h>

#include "../core/opts.h"
#include "mixer.h"

typedef struct replay_result {
    int B, T, H, dk, dv;
    double path_rel_err; /* ||o_prefill - o_step|| / ||o_step|| */
    double o_norm;
    int nonfinite; /* count of non-finite values in o */
    /* attribution=1 (mixers/attribution.h): attn [B, H, T, T], attn_decay, o_init [B, T, H, dv]
     * written beside o, and |sum_j M_ij v_j + o_init_i - o_i| / |o| against the step's output */
    int attributed;
    double attr_rel_err;
} replay_result;

/* Runs `mixer` over the tensors of `in_path`. `o` holds the mixer options plus prefix=; out_path
 * may be NULL (nothing written). */
int replay_run(const mixer_ops *m, const char *in_path, const char *prefix, const char *out_path,
               opts *o, replay_result *res, err *e);

#endif
