/* mamba2.c: the Mamba2 / SSD core in linear-attention form, one scalar log-decay per head
 * (spec/delta-family.md §5; fla's naive_recurrent_simple_gla / chunk_simple_gla, §4 "SimpleGLA").
 *
 * Per head, with g_t the log-decay as given (<= 0; Mamba2's Delta_t * A) and alpha_t = exp(g_t):
 *     S_t = alpha_t S_{t-1} + k_t v_t^T,     o_t = S_t^T (scale q_t).
 * Mamba2 names: q = C_t, k = B_t, v = Delta_t x_t, S = H^T (H [P, N] per head). The D x skip, the
 * gate and the norm belong to the layer, not to this core. The query scale defaults to fla's
 * simple-GLA core, 1/sqrt(dk); the Mamba2 layer itself has no query scale, so a Mamba2 model runs
 * this core with scale=1.
 *
 * prefill is the SSD chunk form. With A_i = sum_{s<=i} g_s the chunk-local cumulative log-decay
 * and L_ij = e^{A_i - A_j} (i >= j; `segment_sum`), a chunk entered with state S gives
 *     O_i = scale [ e^{A_i} S^T q_i + sum_{j<=i} (q_i . k_j) L_ij v_j ],
 *     S  <- e^{A_last} S + sum_j L_last,j k_j v_j^T.
 * Every exponent is <= 0 and is summed directly over its own token range (never a difference of
 * chunk-cumulative sums), so no factor overflows and each keeps its own precision however strong
 * the decays around it. A scalar decay needs no sub-chunk reference rows: L is one [C, C] matrix
 * that multiplies the score matrix element-wise. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "linear_decay.h"
#include "mixer.h"

static const input_def mamba2_inputs[] = {
    {IN_Q, "q", W_DK, 1}, /* C */
    {IN_K, "k", W_DK, 1}, /* B */
    {IN_V, "v", W_DV, 1}, /* Delta x */
    {IN_G, "g", W_1, 1},  /* Delta A */
};

/* Probe indices; every probe is one float per head, so probe i sits at offset i * H. The shared
 * probes of linear_decay.h follow the decay probes. */
enum { P_G, P_ALPHA, P_HALF_LIFE, P_SHARED, P_COUNT = P_SHARED + LD_NPROBES };

static const probe_def mamba2_probes[P_COUNT] = {
    {"g", W_1, "log-decay g = Delta A as given"},
    {"alpha", W_1, "decay alpha = exp(g)"},
    {"half_life", W_1, "-ln2 / g: tokens for the state to halve (inf at g = 0)"},
    LD_PROBE_DEFS,
};

static int mamba2_configure(mixer_cfg *c, opts *o, err *e) {
    return ld_configure(c, o, e);
}

static void mamba2_step(const mixer_cfg *c, float *state, const mixer_tok *x, int pos, float *o,
                        float *probes) {
    (void)pos; /* no positional term */
    int H = c->H, dk = c->dk, dv = c->dv;
    for (int h = 0; h < H; h++) {
        const float *g = x->in[IN_G] + h; /* [1] */
        ld_probes p;
        ld_step_head(dk, dv, state + (size_t)h * dk * dv, x->in[IN_Q] + (size_t)h * dk,
                     x->in[IN_K] + (size_t)h * dk, x->in[IN_V] + (size_t)h * dv, g, 0, c->scale,
                     o + (size_t)h * dv, probes ? &p : NULL);
        if (probes) {
            probes[P_G * H + h] = *g;
            probes[P_ALPHA * H + h] = expf(*g);
            probes[P_HALF_LIFE * H + h] = *g < 0.0f ? -(float)M_LN2 / *g : INFINITY;
            ld_probes_store(&p, P_SHARED, H, h, probes);
        }
    }
}

/* Scratch of one chunk of one head (C = c->chunk rows at most). */
typedef struct mamba2_work {
    float *Q, *K; /* [C, dk] the chunk's q (C), k (B) */
    float *V;     /* [C, dv] */
    float *g;     /* [C] */
    float *A;     /* [C, C] scores (q_i . k_j) L_ij, lower triangle with the diagonal */
    float *wlast; /* [C] L_last,j: the decay from token j to the end of the chunk */
} mamba2_work;

/* One chunk of L rows of one head: O [L] rows of stride ostride (each [dv]) are written, S [dk, dv]
 * advances over the chunk. */
static void mamba2_chunk_head(int dk, int dv, float scale, int L, float *S, float *O,
                              size_t ostride, mamba2_work *w) {
    const float *Q = w->Q, *K = w->K, *V = w->V, *g = w->g;
    float *A = w->A;

    /* Inter-chunk: O_i = scale e^{A_i} S^T q_i with the incoming S. */
    float acc = 0.0f;
    for (int i = 0; i < L; i++) {
        float *oi = O + (size_t)i * ostride; /* [dv] */
        acc += g[i];
        memset(oi, 0, (size_t)dv * sizeof *oi);
        ld_readout_add(dk, dv, S, Q + (size_t)i * dk, scale * expf(acc), oi);
    }
    /* The state leaves decayed by the whole chunk (acc = A_last); the writes are added below. */
    float a = expf(acc);
    for (size_t n = 0; n < (size_t)dk * dv; n++) S[n] *= a;

    /* Scores A_ij = (q_i . k_j) L_ij with L_ij = exp(sum_{s=j+1..i} g_s), summed as i walks down.
     */
    for (int j = 0; j < L; j++) {
        const float *kj = K + (size_t)j * dk; /* [dk] */
        float lg = 0.0f;
        for (int i = j; i < L; i++) {
            if (i > j) lg += g[i];
            float Lij = expf(lg);
            A[(size_t)i * L + j] = Lij * ld_dot(Q + (size_t)i * dk, kj, dk);
            if (i == L - 1) w->wlast[j] = Lij;
        }
    }

    /* O_i += scale sum_{j<=i} A_ij v_j. */
    for (int i = 0; i < L; i++) {
        float *oi = O + (size_t)i * ostride; /* [dv] */
        for (int j = 0; j <= i; j++) {
            float s = scale * A[(size_t)i * L + j];
            const float *vj = V + (size_t)j * dv; /* [dv] */
            for (int m = 0; m < dv; m++) oi[m] += s * vj[m];
        }
    }

    /* S += sum_j L_last,j k_j v_j^T. */
    for (int j = 0; j < L; j++) {
        const float *kj = K + (size_t)j * dk, *vj = V + (size_t)j * dv;
        for (int d = 0; d < dk; d++) {
            float kd = w->wlast[j] * kj[d];
            float *row = S + (size_t)d * dv; /* [dv] */
            for (int m = 0; m < dv; m++) row[m] += kd * vj[m];
        }
    }
}

static void mamba2_prefill(const mixer_cfg *c, float *state, const mixer_seq *x, int pos0,
                           float *o) {
    int H = c->H, dk = c->dk, dv = c->dv, C = c->chunk, T = x->T;
    size_t fk = (size_t)C * dk, fv = (size_t)C * dv;
    float *buf = malloc((2 * fk + fv + 2 * (size_t)C + (size_t)C * C) * sizeof *buf);
    if (!buf) { /* no scratch: the recurrence computes the same function */
        for (int t = 0; t < T; t++) {
            mixer_tok tok = mixer_seq_at(c, x, t);
            mamba2_step(c, state, &tok, pos0 + t, o + (size_t)t * H * dv, NULL);
        }
        return;
    }
    mamba2_work w = {.Q = buf};
    w.K = w.Q + fk, w.V = w.K + fk, w.g = w.V + fv, w.wlast = w.g + C, w.A = w.wlast + C;
    for (int t0 = 0; t0 < T; t0 += C) {
        int L = T - t0 < C ? T - t0 : C; /* the last chunk may be short: no padding needed */
        for (int h = 0; h < H; h++) {
            ld_gather_head(w.Q, x->in[IN_Q], t0, L, H, dk, h);
            ld_gather_head(w.K, x->in[IN_K], t0, L, H, dk, h);
            ld_gather_head(w.V, x->in[IN_V], t0, L, H, dv, h);
            ld_gather_head(w.g, x->in[IN_G], t0, L, H, 1, h);
            mamba2_chunk_head(dk, dv, c->scale, L, state + (size_t)h * dk * dv,
                              o + ((size_t)t0 * H + h) * dv, (size_t)H * dv, &w);
        }
    }
    free(buf);
}

/* S_t = alpha_t S_{t-1} + k_t v_t^T: alpha = exp(g) as ld_step_head takes it, kk = k, u = v. */
static int mamba2_write_form(const mixer_cfg *c, const float *state, const mixer_tok *x, int pos,
                             float *alpha, float *kk, float *u) {
    (void)state, (void)pos;
    int H = c->H;
    for (int h = 0; h < H; h++) alpha[h] = expf(x->in[IN_G][h]);
    memcpy(kk, x->in[IN_K], (size_t)H * c->dk * sizeof *kk);
    memcpy(u, x->in[IN_V], (size_t)H * c->dv * sizeof *u);
    return 0;
}

const mixer_ops mixer_mamba2 = {
    .name = "mamba2",
    .summary =
        "Mamba2 / SSD core: scalar decay per head exp(g), S = a S + k v^T (q=C, k=B, v=dt x)",
    .options = "chunk=16|32|64 scale=S (default 1/sqrt(dk) as fla's simple GLA; Mamba2 uses 1)",
    .inputs = mamba2_inputs,
    .ninputs = (int)(sizeof mamba2_inputs / sizeof mamba2_inputs[0]),
    .params = NULL,
    .nparams = 0,
    .probes = mamba2_probes,
    .nprobes = P_COUNT,
    .configure = mamba2_configure,
    .state_floats = ld_state_floats,
    .state_init = ld_state_init,
    .state_parts = ld_state_parts,
    .step = mamba2_step,
    .prefill = mamba2_prefill,
    .write_form = mamba2_write_form,
};
