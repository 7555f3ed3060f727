/* deltanet.c: DeltaNet core on raw tensors (spec/delta-family.md §3): GDN with alpha = 1.
 *
 *   S_t = S_{t-1} + beta_t k_t (v_t - S_{t-1}^T k_t)^T,  o_t = S_t^T (scale q_t).
 * beta is optional: absent means 1, DeltaNet's use_beta=false. The arithmetic is in delta_rule.c.
 */
#include "delta_rule.h"

static const input_def deltanet_inputs[] = {
    {IN_Q, "q", W_DK, 1},
    {IN_K, "k", W_DK, 1},
    {IN_V, "v", W_DV, 1},
    {IN_BETA, "beta", W_1, 0},
};

/* spec §9 without the decay probes (g, alpha, half-life and forgetting are constant here) */
#define DELTANET_PROBES(X)                                                                         \
    X(BETA)                                                                                        \
    X(RHO)                                                                                         \
    X(K_NORM)                                                                                      \
    X(Q_NORM) X(E_NORM) X(E_REL) X(R_NORM) X(R_CHECK) X(LOSS_BEFORE) X(LOSS_AFTER) X(WRITE_NORM)   \
        X(STATE_NORM) X(ERASE_REMOVED) X(O_NORM)

static const probe_def deltanet_probes[] = {DELTANET_PROBES(DELTA_PROBE_DEF)};
static const delta_probe deltanet_probe_kinds[] = {DELTANET_PROBES(DELTA_PROBE_KIND)};

static const delta_kind deltanet_kind = {
    .decay = 0,
    .kaczmarz = 0,
    .probes = deltanet_probe_kinds,
    .nprobes = (int)(sizeof deltanet_probe_kinds / sizeof deltanet_probe_kinds[0]),
};

static int deltanet_configure(mixer_cfg *c, opts *o, err *e) {
    return delta_configure(c, o, 0, e);
}

static void deltanet_step(const mixer_cfg *c, float *state, const mixer_tok *x, int pos, float *o,
                          float *probes) {
    (void)pos;
    delta_step(&deltanet_kind, c, state, x, o, probes);
}

static void deltanet_prefill(const mixer_cfg *c, float *state, const mixer_seq *x, int pos0,
                             float *o) {
    (void)pos0;
    delta_prefill(&deltanet_kind, c, state, x, o);
}

static int deltanet_write_form(const mixer_cfg *c, const float *state, const mixer_tok *x, int pos,
                               float *alpha, float *kk, float *u) {
    (void)pos;
    return delta_write_form(&deltanet_kind, c, state, x, alpha, kk, u);
}

const mixer_ops mixer_deltanet = {
    .name = "deltanet",
    .summary = "DeltaNet core: delta rule without decay, chunked WY/UT prefill",
    .options = "chunk=16|32|64 scale=1/sqrt(dk) arith=fp32|tf32",
    .inputs = deltanet_inputs,
    .ninputs = (int)(sizeof deltanet_inputs / sizeof deltanet_inputs[0]),
    .probes = deltanet_probes,
    .nprobes = (int)(sizeof deltanet_probes / sizeof deltanet_probes[0]),
    .configure = deltanet_configure,
    .state_floats = delta_state_floats,
    .state_init = delta_state_init,
    .state_parts = delta_state_parts,
    .step = deltanet_step,
    .prefill = deltanet_prefill,
    .write_form = deltanet_write_form,
};
