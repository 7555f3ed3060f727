/* parallax.c: Parallax, softmax attention with a covariance correction (spec/kata-parallax.md
 * Part B).
 *
 * Per head, for the query at absolute position i and its visible keys j (causal, sliding window):
 *     s1_ij = scale q_i.k_j,   u_ij = r_i.k_j (no scale),   p_ij = softmax_j(s1_ij),
 *     o_i = E_p[v] - Cov_p(u, v) = vbar_i - (sum_j p_ij u_ij v_j - ubar_i vbar_i)       (B.2)
 * i.e. o_i = sum_j a_ij v_j with the effective weights a_ij = p_ij (1 + ubar_i - u_ij), which sum
 * to 1 and may be negative. r = 0 gives softmax attention exactly. With rope=1, q, r and k are
 * rotated at their positions (B.2: r gets the same rotation as q). Rows with no visible key output
 * 0. step appends k, v to the cache (r is not cached; B.2) and attends over it, as the decode
 * kernel does (B.6); prefill is the streaming form of B.4 over key tiles of chunk keys, carrying
 * (m, d1, d2, O1, O2) per row, or with merge=welford the centred (W, ubar, vbar, C) of B.4's robust
 * variant. The cache, the tiles and the probes (COR, B.7; B.9) are in attention.c. */
#include "attention.h"
#include "mixer.h"

static const input_def parallax_inputs[] = {
    {IN_Q, "q", W_DK, 1},
    {IN_R, "r", W_DK, 1},
    {IN_K, "k", W_DK, 1},
    {IN_V, "v", W_DV, 1},
};

static int parallax_configure(mixer_cfg *c, opts *o, err *e) {
    return attn_configure(c, o, 1, e);
}

static void parallax_step(const mixer_cfg *c, float *state, const mixer_tok *x, int pos, float *o,
                          float *probes) {
    attn_step(c, state, x, pos, o, probes, 1);
}

static void parallax_prefill(const mixer_cfg *c, float *state, const mixer_seq *x, int pos0,
                             float *o) {
    attn_prefill(c, state, x, pos0, o, 1);
}

const mixer_ops mixer_parallax = {
    .name = "parallax",
    .summary = "Parallax: softmax attention minus the covariance correction Cov_p(r.k, v)",
    .options = "chunk=16|32|64 scale=1/sqrt(dk) rope=0|1 theta=10000 window=0 max_t=4096 "
               "merge=raw|welford arith=fp32|tf32",
    .inputs = parallax_inputs,
    .ninputs = 4,
    .params = NULL,
    .nparams = 0,
    .probes = attn_probe_defs,
    .nprobes = ATTN_NPROBES,
    .configure = parallax_configure,
    .state_floats = attn_state_floats,
    .state_init = attn_state_init,
    .state_parts = attn_state_parts,
    .step = parallax_step,
    .prefill = parallax_prefill,
};
