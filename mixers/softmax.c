/* softmax.c: causal softmax attention over a KV cache (spec/delta-family.md §7).
 *
 * Per head, for the query at absolute position t and the visible keys j (j <= t, and t - j < window
 * when window > 0):
 *     o_t = sum_j softmax_j(scale q_t.k_j) v_j,      scale = 1/sqrt(dk) unless scale= is given,
 * with q and k rotated by RoPE (rotate-half, base theta) at their positions when rope=1. step
 * appends k, v to the cache at slot pos and attends over it; prefill is the online-softmax (flash)
 * form over key tiles of chunk keys (§7: running max m, normaliser l, accumulator a; o = a / l).
 * The cache, the tiles and the probes are shared with parallax in attention.c. */
#include "attention.h"
#include "mixer.h"

static const input_def softmax_inputs[] = {
    {IN_Q, "q", W_DK, 1},
    {IN_K, "k", W_DK, 1},
    {IN_V, "v", W_DV, 1},
};

static int softmax_configure(mixer_cfg *c, opts *o, err *e) {
    return attn_configure(c, o, 0, e);
}

static void softmax_step(const mixer_cfg *c, float *state, const mixer_tok *x, int pos, float *o,
                         float *probes) {
    attn_step(c, state, x, pos, o, probes, 0);
}

static void softmax_prefill(const mixer_cfg *c, float *state, const mixer_seq *x, int pos0,
                            float *o) {
    attn_prefill(c, state, x, pos0, o, 0);
}

const mixer_ops mixer_softmax = {
    .name = "softmax",
    .summary = "causal softmax attention over a KV cache (RoPE, sliding window, flash prefill)",
    .options = "chunk=16|32|64 scale=1/sqrt(dk) rope=0|1 theta=10000 window=0 max_t=4096 "
               "arith=fp32|tf32",
    .inputs = softmax_inputs,
    .ninputs = 3,
    .params = NULL,
    .nparams = 0,
    .probes = attn_probe_defs,
    .nprobes = ATTN_NPROBES_SOFTMAX,
    .configure = softmax_configure,
    .state_floats = attn_state_floats,
    .state_init = attn_state_init,
    .state_parts = attn_state_parts,
    .step = softmax_step,
    .prefill = softmax_prefill,
};
