/* gla.c: gated linear attention with one log-decay per key channel (spec/delta-family.md §4).
 *
 * Per head, with gk_t [dk] the log-decay as given (<= 0) and alpha_t = exp(gk_t):
 *     S_t = diag(alpha_t) S_{t-1} + k_t v_t^T,     o_t = S_t^T (scale q_t),     scale = 1/sqrt(dk).
 * This is fla's naive_recurrent_gla on raw tensors: no feature map, no norm, no gate inside.
 *
 * prefill is fla's chunk form (§4, §1.4). With B_i = sum_{s<=i} gk_s the chunk-local cumulative
 * log-decay, output row i of a chunk entered with state S is
 *     O_i = scale [ (q_i * e^{B_i})^T S + sum_{j<=i} (sum_d q_i[d] k_j[d] e^{B_i[d]-B_j[d]}) v_j^T
 * ] and the state leaves as diag(e^{B_last}) S + sum_j (k_j * e^{B_last - B_j}) v_j^T. Every factor
 * is e^{B_i - B_j} = exp(sum_{s=j+1..i} gk_s) <= 1 with i >= j. The intra-chunk scores are split on
 * 16-row sub-chunks as fla does: off-diagonal blocks factor through the first row n of the query
 * sub-chunk, q~_i = q_i e^{B_i - B_n} and k~_j = k_j e^{B_n - B_j} (both exponents <= 0, so nothing
 * overflows however strong the decay; a naive q e^{B}, k e^{-B} split overflows once the chunk's
 * decay passes about e^-88) and become a matrix product; diagonal blocks are summed element by
 * element. Each exponent is summed directly over its own token range instead of being taken as a
 * difference of chunk-cumulative sums, so its rounding error scales with the exponent itself, not
 * with the whole chunk's decay (one very strong decay early in a chunk would otherwise cost the
 * weak decays after it their precision). */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "linear_decay.h"
#include "mixer.h"

#define GLA_SUB 16 /* rows of a sub-chunk: they share one reference row */

static const input_def gla_inputs[] = {
    {IN_Q, "q", W_DK, 1},
    {IN_K, "k", W_DK, 1},
    {IN_V, "v", W_DV, 1},
    {IN_GK, "gk", W_DK, 1},
};

/* Probe indices; every probe is one float per head, so probe i sits at offset i * H. The shared
 * probes of linear_decay.h follow the decay probes. */
enum {
    P_G_MIN,
    P_G_MEAN,
    P_G_MAX,
    P_ALPHA_MIN,
    P_ALPHA_MEAN,
    P_ALPHA_MAX,
    P_HALF_LIFE_MIN,
    P_HALF_LIFE_MEAN,
    P_HALF_LIFE_MAX,
    P_SHARED,
    P_COUNT = P_SHARED + LD_NPROBES
};

static const probe_def gla_probes[P_COUNT] = {
    {"g_min", W_1, "min over dk of the log-decay gk (the fastest-forgetting channel)"},
    {"g_mean", W_1, "mean over dk of the log-decay gk"},
    {"g_max", W_1, "max over dk of the log-decay gk (the slowest-forgetting channel)"},
    {"alpha_min", W_1, "min over dk of the decay alpha = exp(gk)"},
    {"alpha_mean", W_1, "mean over dk of the decay alpha = exp(gk)"},
    {"alpha_max", W_1, "max over dk of the decay alpha = exp(gk)"},
    {"half_life_min", W_1, "-ln2 / g_min: tokens to halve, fastest channel"},
    {"half_life_mean", W_1, "-ln2 / g_mean: half-life of the geometric-mean decay (inf at 0)"},
    {"half_life_max", W_1, "-ln2 / g_max: tokens to halve, slowest channel (inf at g = 0)"},
    LD_PROBE_DEFS,
};

static int gla_configure(mixer_cfg *c, opts *o, err *e) {
    return ld_configure(c, o, e);
}

/* -ln2 / g: tokens for the decay exp(g) to halve a state row; +inf where it does not decay. */
static float gla_half_life(float g) {
    return g < 0.0f ? -(float)M_LN2 / g : INFINITY;
}

/* The decay probes of head h: min / mean / max over dk of gk [dk], alpha and the half-life. */
static void gla_probe_decay(int H, int dk, const float *gk, int h, float *probes) {
    float gmin = gk[0], gmax = gk[0], gsum = 0.0f, asum = 0.0f;
    for (int d = 0; d < dk; d++) {
        gmin = fminf(gmin, gk[d]), gmax = fmaxf(gmax, gk[d]);
        gsum += gk[d], asum += expf(gk[d]);
    }
    float gmean = gsum / (float)dk;
    probes[P_G_MIN * H + h] = gmin;
    probes[P_G_MEAN * H + h] = gmean;
    probes[P_G_MAX * H + h] = gmax;
    probes[P_ALPHA_MIN * H + h] = expf(gmin); /* exp is monotone */
    probes[P_ALPHA_MEAN * H + h] = asum / (float)dk;
    probes[P_ALPHA_MAX * H + h] = expf(gmax);
    probes[P_HALF_LIFE_MIN * H + h] = gla_half_life(gmin);
    probes[P_HALF_LIFE_MEAN * H + h] = gla_half_life(gmean);
    probes[P_HALF_LIFE_MAX * H + h] = gla_half_life(gmax);
}

static void gla_step(const mixer_cfg *c, float *state, const mixer_tok *x, int pos, float *o,
                     float *probes) {
    (void)pos; /* no positional term */
    int H = c->H, dk = c->dk, dv = c->dv;
    for (int h = 0; h < H; h++) {
        const float *gk = x->in[IN_GK] + (size_t)h * dk; /* [dk] */
        ld_probes p;
        ld_step_head(dk, dv, state + (size_t)h * dk * dv, x->in[IN_Q] + (size_t)h * dk,
                     x->in[IN_K] + (size_t)h * dk, x->in[IN_V] + (size_t)h * dv, gk, 1, c->scale,
                     o + (size_t)h * dv, probes ? &p : NULL);
        if (probes) {
            gla_probe_decay(H, dk, gk, h, probes);
            ld_probes_store(&p, P_SHARED, H, h, probes);
        }
    }
}

/* Scratch of one chunk of one head (C = c->chunk rows at most). */
typedef struct gla_work {
    float *Q, *K, *G; /* [C, dk] the chunk's q, k, gk */
    float *V;         /* [C, dv] */
    float *A;         /* [C, C] intra-chunk scores, lower triangle with the diagonal */
    float *Qt;        /* [GLA_SUB, dk] q~ of one query sub-chunk */
    float *Kt;        /* [C, dk] k~ against one reference row */
    float *acc;       /* [dk] a running log-decay sum */
    float *x;         /* [dk] one decayed query row */
} gla_work;

/* One chunk of L rows of one head: O [L] rows of stride ostride (each [dv]) are written, S [dk, dv]
 * advances over the chunk. */
static void gla_chunk_head(int dk, int dv, float scale, int L, float *S, float *O, size_t ostride,
                           gla_work *w) {
    const float *Q = w->Q, *K = w->K, *G = w->G, *V = w->V;
    float *A = w->A, *acc = w->acc;

    /* Inter-chunk: O_i = scale (q_i * e^{B_i})^T S with the incoming S; acc ends as B_last. */
    memset(acc, 0, (size_t)dk * sizeof *acc);
    for (int i = 0; i < L; i++) {
        float *oi = O + (size_t)i * ostride; /* [dv] */
        for (int d = 0; d < dk; d++) {
            acc[d] += G[(size_t)i * dk + d];
            w->x[d] = Q[(size_t)i * dk + d] * expf(acc[d]);
        }
        memset(oi, 0, (size_t)dv * sizeof *oi);
        ld_readout_add(dk, dv, S, w->x, scale, oi);
    }

    /* The state leaves decayed by the whole chunk: S = diag(e^{B_last}) S. Later writes are added
     * below, after the decay, from the same running sums taken backwards. */
    for (int d = 0; d < dk; d++) {
        float a = expf(acc[d]);
        float *row = S + (size_t)d * dv; /* [dv] */
        for (int j = 0; j < dv; j++) row[j] *= a;
    }

    /* Intra-chunk scores A_ij = sum_d q_i[d] k_j[d] e^{B_i[d] - B_j[d]}, j <= i, sub-chunk by
     * sub-chunk of query rows [b0, b1). */
    for (int b0 = 0; b0 < L; b0 += GLA_SUB) {
        int b1 = b0 + GLA_SUB < L ? b0 + GLA_SUB : L;
        /* Diagonal block, element by element: acc = sum_{s=j+1..i} gk_s as i walks down. */
        for (int j = b0; j < b1; j++) {
            const float *kj = K + (size_t)j * dk; /* [dk] */
            memset(acc, 0, (size_t)dk * sizeof *acc);
            for (int i = j; i < b1; i++) {
                const float *qi = Q + (size_t)i * dk, *gi = G + (size_t)i * dk; /* [dk] */
                float s = 0.0f;
                for (int d = 0; d < dk; d++) {
                    if (i > j) acc[d] += gi[d];
                    s += qi[d] * kj[d] * expf(acc[d]);
                }
                A[(size_t)i * L + j] = s;
            }
        }
        if (b0 == 0) continue;
        /* Off-diagonal block [b0, b1) x [0, b0) through the reference row n = b0:
         * q~_i = q_i e^{sum_{s=n+1..i} gk_s}, k~_j = k_j e^{sum_{s=j+1..n} gk_s}. */
        memset(acc, 0, (size_t)dk * sizeof *acc);
        for (int i = b0; i < b1; i++)
            for (int d = 0; d < dk; d++) {
                if (i > b0) acc[d] += G[(size_t)i * dk + d];
                w->Qt[(size_t)(i - b0) * dk + d] = Q[(size_t)i * dk + d] * expf(acc[d]);
            }
        memset(acc, 0, (size_t)dk * sizeof *acc);
        for (int j = b0 - 1; j >= 0; j--)
            for (int d = 0; d < dk; d++) {
                acc[d] += G[(size_t)(j + 1) * dk + d];
                w->Kt[(size_t)j * dk + d] = K[(size_t)j * dk + d] * expf(acc[d]);
            }
        for (int i = b0; i < b1; i++)
            for (int j = 0; j < b0; j++)
                A[(size_t)i * L + j] =
                    ld_dot(w->Qt + (size_t)(i - b0) * dk, w->Kt + (size_t)j * dk, dk);
    }

    /* O_i += scale sum_{j<=i} A_ij v_j. */
    for (int i = 0; i < L; i++) {
        float *oi = O + (size_t)i * ostride; /* [dv] */
        for (int j = 0; j <= i; j++) {
            float a = scale * A[(size_t)i * L + j];
            const float *vj = V + (size_t)j * dv; /* [dv] */
            for (int m = 0; m < dv; m++) oi[m] += a * vj[m];
        }
    }

    /* S += sum_j (k_j * e^{B_last - B_j}) v_j^T, acc = sum_{s=j+1..last} gk_s walking backwards. */
    memset(acc, 0, (size_t)dk * sizeof *acc);
    for (int j = L - 1; j >= 0; j--) {
        const float *kj = K + (size_t)j * dk, *vj = V + (size_t)j * dv;
        for (int d = 0; d < dk; d++) {
            if (j < L - 1) acc[d] += G[(size_t)(j + 1) * dk + d];
            float kd = kj[d] * expf(acc[d]);
            float *row = S + (size_t)d * dv; /* [dv] */
            for (int m = 0; m < dv; m++) row[m] += kd * vj[m];
        }
    }
}

static void gla_prefill(const mixer_cfg *c, float *state, const mixer_seq *x, int pos0, float *o) {
    int H = c->H, dk = c->dk, dv = c->dv, C = c->chunk, T = x->T;
    size_t fk = (size_t)C * dk, fv = (size_t)C * dv;
    float *buf = malloc((3 * fk + fv + (size_t)C * C + (size_t)GLA_SUB * dk + fk + 2 * (size_t)dk) *
                        sizeof *buf);
    if (!buf) { /* no scratch: the recurrence computes the same function */
        for (int t = 0; t < T; t++) {
            mixer_tok tok = mixer_seq_at(c, x, t);
            gla_step(c, state, &tok, pos0 + t, o + (size_t)t * H * dv, NULL);
        }
        return;
    }
    gla_work w = {.Q = buf};
    w.K = w.Q + fk, w.G = w.K + fk, w.V = w.G + fk, w.A = w.V + fv;
    w.Qt = w.A + (size_t)C * C, w.Kt = w.Qt + (size_t)GLA_SUB * dk, w.acc = w.Kt + fk;
    w.x = w.acc + dk;
    for (int t0 = 0; t0 < T; t0 += C) {
        int L = T - t0 < C ? T - t0 : C; /* the last chunk may be short: no padding needed */
        for (int h = 0; h < H; h++) {
            ld_gather_head(w.Q, x->in[IN_Q], t0, L, H, dk, h);
            ld_gather_head(w.K, x->in[IN_K], t0, L, H, dk, h);
            ld_gather_head(w.G, x->in[IN_GK], t0, L, H, dk, h);
            ld_gather_head(w.V, x->in[IN_V], t0, L, H, dv, h);
            gla_chunk_head(dk, dv, c->scale, L, state + (size_t)h * dk * dv,
                           o + ((size_t)t0 * H + h) * dv, (size_t)H * dv, &w);
        }
    }
    free(buf);
}

const mixer_ops mixer_gla = {
    .name = "gla",
    .summary = "gated linear attention: per-key-channel decay exp(gk), S = diag(a) S + k v^T",
    .options = "chunk=16|32|64 scale=S (default 1/sqrt(dk))",
    .inputs = gla_inputs,
    .ninputs = (int)(sizeof gla_inputs / sizeof gla_inputs[0]),
    .params = NULL,
    .nparams = 0,
    .probes = gla_probes,
    .nprobes = P_COUNT,
    .configure = gla_configure,
    .state_floats = ld_state_floats,
    .state_init = ld_state_init,
    .state_parts = ld_state_parts,
    .step = gla_step,
    .prefill = gla_prefill,
};
