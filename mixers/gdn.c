/* gdn.c: Gated DeltaNet core on raw tensors (spec/delta-family.md §2.4, §2.5).
 *
 *   S_t = alpha_t S_{t-1} + beta_t k_t (v_t - alpha_t S_{t-1}^T k_t)^T,  alpha_t = exp(g_t),
 *   o_t = S_t^T (scale q_t).
 * q, k, g and beta are used as given: the layer's L2 norm and gate math happen before the core.
 * The arithmetic is in delta_rule.c; this file declares the mixer. */
#include "delta_rule.h"

static const input_def gdn_inputs[] = {
    {IN_Q, "q", W_DK, 1}, {IN_K, "k", W_DK, 1},      {IN_V, "v", W_DV, 1},
    {IN_G, "g", W_1, 1},  {IN_BETA, "beta", W_1, 1},
};

/* spec §9, every probe meaningful for a per-token raw core */
#define GDN_PROBES(X)                                                                              \
    X(BETA)                                                                                        \
    X(RHO)                                                                                         \
    X(K_NORM)                                                                                      \
    X(Q_NORM) X(G) X(ALPHA) X(HALF_LIFE) X(E_NORM) X(E_REL) X(R_NORM) X(R_CHECK) X(LOSS_BEFORE)    \
        X(LOSS_AFTER) X(WRITE_NORM) X(STATE_NORM) X(FORGET_REMOVED) X(ERASE_REMOVED) X(O_NORM)

static const probe_def gdn_probes[] = {GDN_PROBES(DELTA_PROBE_DEF)};
static const delta_probe gdn_probe_kinds[] = {GDN_PROBES(DELTA_PROBE_KIND)};

static const delta_kind gdn_kind = {
    .decay = 1,
    .kaczmarz = 0,
    .probes = gdn_probe_kinds,
    .nprobes = (int)(sizeof gdn_probe_kinds / sizeof gdn_probe_kinds[0]),
};

static int gdn_configure(mixer_cfg *c, opts *o, err *e) {
    return delta_configure(c, o, 0, e);
}

static void gdn_step(const mixer_cfg *c, float *state, const mixer_tok *x, int pos, float *o,
                     float *probes) {
    (void)pos; /* position-free */
    delta_step(&gdn_kind, c, state, x, o, probes);
}

static void gdn_prefill(const mixer_cfg *c, float *state, const mixer_seq *x, int pos0, float *o) {
    (void)pos0;
    delta_prefill(&gdn_kind, c, state, x, o);
}

static int gdn_write_form(const mixer_cfg *c, const float *state, const mixer_tok *x, int pos,
                          float *alpha, float *kk, float *u) {
    (void)pos;
    return delta_write_form(&gdn_kind, c, state, x, alpha, kk, u);
}

const mixer_ops mixer_gdn = {
    .name = "gdn",
    .summary = "Gated DeltaNet core: decayed delta rule, chunked WY/UT prefill",
    .options = "chunk=16|32|64 scale=1/sqrt(dk) arith=fp32|tf32",
    .inputs = gdn_inputs,
    .ninputs = (int)(sizeof gdn_inputs / sizeof gdn_inputs[0]),
    .probes = gdn_probes,
    .nprobes = (int)(sizeof gdn_probes / sizeof gdn_probes[0]),
    .configure = gdn_configure,
    .state_floats = delta_state_floats,
    .state_init = delta_state_init,
    .state_parts = delta_state_parts,
    .step = gdn_step,
    .prefill = gdn_prefill,
    .write_form = gdn_write_form,
};
