/* kaczmarz.c: Kaczmarz linear attention core on raw tensors (spec/delta-family.md §8).
 *
 *   beta_t = eta_t / (|k_t|^2 + eps)   with the raw (un-normalised) key,
 *   S_t = alpha_t S_{t-1} + beta_t k_t (v_t - alpha_t S_{t-1}^T k_t)^T,  o_t = S_t^T (scale q_t).
 * step runs this recurrence directly (§8.3); prefill runs the chunked GDN form on
 * k/sqrt(|k|^2+eps), v/sqrt(|k|^2+eps) with beta = eta, which is the same function (§8.5). eta is
 * read from IN_BETA under the name "eta". The arithmetic is in delta_rule.c. */
#include "delta_rule.h"

static const input_def kaczmarz_inputs[] = {
    {IN_Q, "q", W_DK, 1}, {IN_K, "k", W_DK, 1},     {IN_V, "v", W_DV, 1},
    {IN_G, "g", W_1, 1},  {IN_BETA, "eta", W_1, 1},
};

/* spec §9: GDN's probes plus eta; beta is the effective eta/(|k|^2+eps) */
#define KACZMARZ_PROBES(X)                                                                         \
    X(BETA)                                                                                        \
    X(ETA)                                                                                         \
    X(RHO)                                                                                         \
    X(K_NORM) X(Q_NORM) X(G) X(ALPHA) X(HALF_LIFE) X(E_NORM) X(E_REL) X(R_NORM) X(R_CHECK)         \
        X(LOSS_BEFORE) X(LOSS_AFTER) X(WRITE_NORM) X(STATE_NORM) X(FORGET_REMOVED)                 \
            X(ERASE_REMOVED) X(O_NORM)

static const probe_def kaczmarz_probes[] = {KACZMARZ_PROBES(DELTA_PROBE_DEF)};
static const delta_probe kaczmarz_probe_kinds[] = {KACZMARZ_PROBES(DELTA_PROBE_KIND)};

static const delta_kind kaczmarz_kind = {
    .decay = 1,
    .kaczmarz = 1,
    .probes = kaczmarz_probe_kinds,
    .nprobes = (int)(sizeof kaczmarz_probe_kinds / sizeof kaczmarz_probe_kinds[0]),
};

static int kaczmarz_configure(mixer_cfg *c, opts *o, err *e) {
    return delta_configure(c, o, 1, e);
}

static void kaczmarz_step(const mixer_cfg *c, float *state, const mixer_tok *x, int pos, float *o,
                          float *probes) {
    (void)pos;
    delta_step(&kaczmarz_kind, c, state, x, o, probes);
}

static void kaczmarz_prefill(const mixer_cfg *c, float *state, const mixer_seq *x, int pos0,
                             float *o) {
    (void)pos0;
    delta_prefill(&kaczmarz_kind, c, state, x, o);
}

static int kaczmarz_write_form(const mixer_cfg *c, const float *state, const mixer_tok *x, int pos,
                               float *alpha, float *kk, float *u) {
    (void)pos;
    return delta_write_form(&kaczmarz_kind, c, state, x, alpha, kk, u);
}

const mixer_ops mixer_kaczmarz = {
    .name = "kaczmarz",
    .summary = "Kaczmarz linear attention core: raw keys, beta = eta/(|k|^2+eps), chunked prefill",
    .options = "chunk=16|32|64 scale=1/sqrt(dk) eps=1e-6 arith=fp32|tf32",
    .inputs = kaczmarz_inputs,
    .ninputs = (int)(sizeof kaczmarz_inputs / sizeof kaczmarz_inputs[0]),
    .probes = kaczmarz_probes,
    .nprobes = (int)(sizeof kaczmarz_probes / sizeof kaczmarz_probes[0]),
    .configure = kaczmarz_configure,
    .state_floats = delta_state_floats,
    .state_init = delta_state_init,
    .state_parts = delta_state_parts,
    .step = kaczmarz_step,
    .prefill = kaczmarz_prefill,
    .write_form = kaczmarz_write_form,
};
