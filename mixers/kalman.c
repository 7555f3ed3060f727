/* kalman.c: Kalman linear attention (KLA), spec/kalman.md.
 *
 * Every (head h, channel m, state s) lane is an independent scalar Kalman filter in information
 * form (spec §2.2, §3): the state holds the posterior precision lambda and the information vector
 * eta = lambda * mu. Per token, with phi = lambda_v k_s^2 and r = (v lambda_v) k_s,
 *   d = a^2 + p lambda_{t-1},  lambda^- = lambda_{t-1} / d,  lambda_t = lambda^- + phi,
 *   alpha = a / d,             eta_t = alpha eta_{t-1} + r,
 * and the channel output is y_m = sum_s q_s eta/lambda (posterior mean read by the query).
 *
 * prefill is the parallel form (§4): per lane and per chunk of c tokens, an inclusive
 * Hillis-Steele scan with an associative combine, applied to the carried (lambda, eta):
 *   scan=mobius  two dependent scans: the Mobius 2x2 scan for lambda (§4.1-4.2), then the affine
 *                scan (alpha, r) for eta (§4.3);
 *   scan=merged  one scan of the 3x3 lower block-triangular homogeneous map (§4.4).
 * Every combine divides by the trace of the 2x2 block (§4.2, §7.4).
 *
 * Shapes per token (head-major): q, k [H, S]; v, lambda_v [H, M]; o [H, M]. Static params a, p
 * [H, M, S]. State: lambda [H, M, S] then eta [H, M, S]. Here S = cfg->dk and M = cfg->dv. */
#include <math.h>
#include <stddef.h>
#include <string.h>

#include "mixer.h"

/* Floors of spec §7.2. */
#define KALMAN_FLOOR 1e-12f
/* Used when a caller runs the core without static parameters (cfg->params[i] == NULL). Inside the
 * spec's test distribution (§9: a in [0.4, 0.9], p in [0.01, 0.06]). */
#define KALMAN_DEFAULT_A 0.9f
#define KALMAN_DEFAULT_P 0.05f
/* cfg->variant bits. */
#define KALMAN_MERGED    1 /* scan=merged */
#define KALMAN_PRIOR     2 /* decode_from_prior=1 */
#define KALMAN_MAX_CHUNK 64

static const input_def kalman_inputs[] = {
    {IN_Q, "q", W_DK, 1},
    {IN_K, "k", W_DK, 1},
    {IN_V, "v", W_DV, 1},
    {IN_LV, "lambda_v", W_DV, 0}, /* absent: 1 (unit observation precision) */
};

static const param_def kalman_params[] = {
    {"a", W_LANES}, /* discrete decay a-bar [M, S] per head */
    {"p", W_LANES}, /* discrete process noise p-bar [M, S] per head */
};

/* Probe indices; the order of kalman_probes below. */
enum {
    KP_LAMBDA,
    KP_LAMBDA_PRIOR,
    KP_POST_VAR,
    KP_PHI,
    KP_WRITE,
    KP_FORGET,
    KP_ALPHA,
    KP_KALMAN_GAIN,
    KP_INFO_GAIN,
    KP_MEMORY,
    KP_MU,
    KP_INNOV_LANE,
    KP_INNOV_Z_LANE,
    KP_LAMBDA_STAR,
    KP_YVAR,
    KP_INNOV,
    KP_INNOV_Z,
    KP_LAMBDA_V,
    KP_LAMBDA_MIN,
    KP_LAMBDA_MAX,
    KP_WRITE_MEAN,
    KP_FORGET_MEAN,
    KP_INFO_GAIN_SUM,
    KP_STAR_GAP,
    KP_COUNT
};

static const probe_def kalman_probes[] = {
    {"lambda", W_LANES, "posterior precision lambda_t per lane [M][S]"},
    {"lambda_prior", W_LANES,
     "predicted precision lambda^-_t = lambda_{t-1} / (a^2 + p lambda_{t-1})"},
    {"post_var", W_LANES, "posterior variance P_t = 1 / lambda_t"},
    {"phi", W_LANES, "token information phi_t = lambda_v k^2"},
    {"write", W_LANES, "write gate w_t = phi_t / lambda_t in [0, 1)"},
    {"forget", W_LANES, "forget gate f_t = a lambda^-_t / lambda_t (= a (1 - w_t))"},
    {"alpha", W_LANES, "information-vector gain alpha_t = a / (a^2 + p lambda_{t-1}), up to 1/a"},
    {"kalman_gain", W_LANES, "Kalman gain K_t = k lambda_v / lambda_t (K k = w)"},
    {"info_gain", W_LANES, "information gain 0.5 ln(lambda_t / lambda^-_t) in nats"},
    {"memory", W_LANES, "effective memory 1 / (1 - f_t) in tokens"},
    {"mu", W_LANES, "posterior mean mu_t = eta_t / lambda_t"},
    {"innovation_lane", W_LANES, "innovation e_t = v - k a mu_{t-1} per lane"},
    {"innovation_z_lane", W_LANES,
     "standardised innovation e_t / sqrt(k^2 / lambda^-_t + 1 / lambda_v) per lane"},
    {"lambda_star", W_LANES, "steady-state precision lambda*(phi_t) for a constant phi_t (§4.5)"},
    {"yvar", W_DV, "output variance sum_s q^2 / lambda_t (prior decode: sum_s q^2 (a^2/lambda+p))"},
    {"innovation", W_DV, "channel innovation: innovation_lane averaged over s with weights q^2"},
    {"innovation_z", W_DV, "channel standardised innovation: innovation_z_lane, q^2-weighted mean"},
    {"lambda_v", W_DV, "observation precision lambda_v (the input)"},
    {"lambda_min", W_1, "smallest posterior precision over the head's lanes"},
    {"lambda_max", W_1, "largest posterior precision over the head's lanes"},
    {"write_mean", W_1, "mean write gate over the head's lanes"},
    {"forget_mean", W_1, "mean forget gate over the head's lanes"},
    {"info_gain_sum", W_1, "information gained by the head this token, nats (sum of info_gain)"},
    {"lambda_star_gap", W_1, "max over lanes of |lambda_t - lambda*| / lambda* (0 = steady state)"},
};

_Static_assert(sizeof kalman_probes / sizeof kalman_probes[0] == KP_COUNT, "probe table");

static int kalman_configure(mixer_cfg *c, opts *o, err *e) {
    const char *scan = opts_str(o, "scan", "mobius");
    long chunk, prior;
    double scale;
    if (strcmp(scan, "mobius") == 0)
        c->variant = 0;
    else if (strcmp(scan, "merged") == 0)
        c->variant = KALMAN_MERGED;
    else
        return err_set(e, "option 'scan': expected mobius or merged, got '%.60s'", scan);
    if (opts_int(o, "chunk", 64, &chunk, e)) return -1;
    if (chunk != 16 && chunk != 32 && chunk != 64)
        return err_set(e, "option 'chunk': expected 16, 32 or 64, got %ld", chunk);
    c->chunk = (int)chunk;
    if (opts_int(o, "decode_from_prior", 0, &prior, e)) return -1;
    if (prior != 0 && prior != 1)
        return err_set(e, "option 'decode_from_prior': expected 0 or 1, got %ld", prior);
    if (prior) c->variant |= KALMAN_PRIOR;
    /* The KLA readout has no query scale (spec §2.4; the layer QK-normalises instead). */
    if (opts_float(o, "scale", 1.0, &scale, e)) return -1;
    c->scale = (float)scale;
    return 0;
}

static size_t kalman_state_floats(const mixer_cfg *c) {
    return 2 * (size_t)c->H * (size_t)c->dv * (size_t)c->dk;
}

/* The standard-normal prior of spec §2.3: lambda = 1, eta = 0 on every lane. */
static void kalman_state_init(const mixer_cfg *c, float *state) {
    size_t n = (size_t)c->H * (size_t)c->dv * (size_t)c->dk;
    for (size_t i = 0; i < n; i++) state[i] = 1.0f;
    memset(state + n, 0, n * sizeof(float));
}

static int kalman_state_parts(const mixer_cfg *c, state_part *parts) {
    size_t n = (size_t)c->H * (size_t)c->dv * (size_t)c->dk;
    parts[0] = (state_part){"lambdaT", "lambda0", 0, 3, {c->H, c->dv, c->dk}};
    parts[1] = (state_part){"etaT", "eta0", n, 3, {c->H, c->dv, c->dk}};
    return 2;
}

/* The static dynamics of lane i (index into [H, M, S]), floored as spec §7.2. */
static void kalman_lane_params(const mixer_cfg *c, size_t i, float *a, float *a2, float *p) {
    *a = c->params[0] ? c->params[0][i] : KALMAN_DEFAULT_A;
    *a2 = fmaxf(*a * *a, KALMAN_FLOOR);
    *p = fmaxf(c->params[1] ? c->params[1][i] : KALMAN_DEFAULT_P, KALMAN_FLOOR);
}

/* Steady state of the precision under a constant phi (spec §4.5): the positive root of
 * p l^2 + (a^2 - 1 - p phi) l - phi a^2 = 0, in the form without cancellation for either sign of
 * the linear coefficient. */
static double kalman_lambda_star(double a2, double p, double phi) {
    double b = a2 - 1.0 - p * phi, sq = sqrt(b * b + 4.0 * p * phi * a2);
    if (b <= 0) return (-b + sq) / (2.0 * p);
    return b + sq > 0 ? 2.0 * phi * a2 / (b + sq) : 0.0;
}

/* Pointers to head h's slot of every probe: probes are laid out probe by probe, each [H, width]. */
static void kalman_probe_ptrs(const mixer_cfg *c, float *probes, int h, float **pp) {
    size_t off = 0;
    for (int i = 0; i < KP_COUNT; i++) {
        size_t w = (size_t)mixer_width_floats(c, kalman_probes[i].width);
        pp[i] = probes + off + (size_t)h * w;
        off += (size_t)c->H * w;
    }
}

/* One token: the sequential filter of spec §3, lane by lane, and the readout of §2.4. */
static void kalman_step(const mixer_cfg *c, float *state, const mixer_tok *x, int pos, float *o,
                        float *probes) {
    (void)pos; /* the dynamics are time-invariant */
    const int H = c->H, M = c->dv, S = c->dk;
    const size_t lanes = (size_t)H * M * S;
    const int prior = (c->variant & KALMAN_PRIOR) != 0;
    float *lam_st = state, *eta_st = state + lanes; /* [H, M, S] each */
    for (int h = 0; h < H; h++) {
        const float *q = x->in[IN_Q] + (size_t)h * S;                         /* [S] */
        const float *k = x->in[IN_K] + (size_t)h * S;                         /* [S] */
        const float *v = x->in[IN_V] + (size_t)h * M;                         /* [M] */
        const float *lv = x->in[IN_LV] ? x->in[IN_LV] + (size_t)h * M : NULL; /* [M] */
        /* the head's sums over its M S lanes in double (the GPU reduces them in any order) */
        float lmin = INFINITY, lmax = -INFINITY, gap = 0;
        double wsum = 0, fsum = 0, gsum = 0;
        float *pp[KP_COUNT]; /* this head's slot of each probe */
        if (probes) kalman_probe_ptrs(c, probes, h, pp);
        for (int m = 0; m < M; m++) {
            const float lvm = lv ? lv[m] : 1.0f, r0 = v[m] * lvm; /* natural parameter v lambda_v */
            float y = 0, yvar = 0, q2sum = 0, esum = 0, zsum = 0;
            for (int s = 0; s < S; s++) {
                const size_t i = ((size_t)h * M + m) * S + s;
                float a, a2, p;
                kalman_lane_params(c, i, &a, &a2, &p);
                const float lam0 = lam_st[i], eta0 = eta_st[i];
                const float phi = lvm * k[s] * k[s], r = r0 * k[s];
                const float den = fmaxf(a2 + p * lam0, KALMAN_FLOOR);
                const float lamm = lam0 / den, alpha = a / den;
                const float eta = alpha * eta0 + r; /* uses lambda_{t-1}, through alpha */
                const float lam = lamm + phi;
                lam_st[i] = lam, eta_st[i] = eta;
                float var = 1.0f / fmaxf(lam, KALMAN_FLOOR), mean = eta * var;
                if (prior) mean = a * mean, var = a2 * var + p;
                const float qs = c->scale * q[s];
                y += qs * mean;
                yvar += qs * qs * var;
                if (!probes) continue;
                /* probes: posterior quantities, whatever the readout */
                const float lamc = fmaxf(lam, KALMAN_FLOOR), lammc = fmaxf(lamm, KALMAN_FLOOR);
                const float w = phi / lamc, f = a * lamm / lamc;
                const float e = v[m] - k[s] * a * (eta0 / fmaxf(lam0, KALMAN_FLOOR));
                const float z = lvm > 0 ? e / sqrtf(k[s] * k[s] / lammc + 1.0f / lvm) : 0.0f;
                /* ln(lambda / lambda^-) = ln(1 + phi / lambda^-): log1p keeps small gains exact */
                const float gain = 0.5f * log1pf(phi / lammc);
                const double star = kalman_lambda_star(a2, p, phi);
                const size_t j = (size_t)m * S + s;
                pp[KP_LAMBDA][j] = lam;
                pp[KP_LAMBDA_PRIOR][j] = lamm;
                pp[KP_POST_VAR][j] = 1.0f / lamc;
                pp[KP_PHI][j] = phi;
                pp[KP_WRITE][j] = w;
                pp[KP_FORGET][j] = f;
                pp[KP_ALPHA][j] = alpha;
                pp[KP_KALMAN_GAIN][j] = k[s] * lvm / lamc;
                pp[KP_INFO_GAIN][j] = gain;
                pp[KP_MEMORY][j] = 1.0f / fmaxf(1.0f - f, KALMAN_FLOOR);
                pp[KP_MU][j] = eta / lamc;
                pp[KP_INNOV_LANE][j] = e;
                pp[KP_INNOV_Z_LANE][j] = z;
                pp[KP_LAMBDA_STAR][j] = (float)star;
                q2sum += qs * qs, esum += qs * qs * e, zsum += qs * qs * z;
                lmin = fminf(lmin, lam), lmax = fmaxf(lmax, lam);
                wsum += w, fsum += f, gsum += gain;
                gap = fmaxf(gap, (float)(fabs(lam - star) / fmax(star, KALMAN_FLOOR)));
            }
            o[(size_t)h * M + m] = y;
            if (!probes) continue;
            pp[KP_YVAR][m] = yvar;
            pp[KP_INNOV][m] = q2sum > 0 ? esum / q2sum : 0.0f;
            pp[KP_INNOV_Z][m] = q2sum > 0 ? zsum / q2sum : 0.0f;
            pp[KP_LAMBDA_V][m] = lvm;
        }
        if (!probes) continue;
        const double n = (double)M * (double)S;
        *pp[KP_LAMBDA_MIN] = lmin;
        *pp[KP_LAMBDA_MAX] = lmax;
        *pp[KP_WRITE_MEAN] = (float)(wsum / n);
        *pp[KP_FORGET_MEAN] = (float)(fsum / n);
        *pp[KP_INFO_GAIN_SUM] = (float)gsum;
        *pp[KP_STAR_GAP] = gap;
    }
}

/* ---- the associative operators (spec §4) ---- */

/* Mobius leaf of one token (§4.1), scaled by a^2 so that no entry divides (the map is defined up
 * to scale): lambda -> ((1 + p phi) lambda + phi a^2) / (p lambda + a^2). m = [A, B, C, D]. */
static void kalman_leaf_mobius(float a2, float p, float phi, float *m) {
    m[0] = 1.0f + p * phi, m[1] = phi * a2, m[2] = p, m[3] = a2;
}

/* l (earlier) then r (later): r * l / tr(r * l) (§4.2). Safe to call with o == l or o == r. */
static void kalman_combine_mobius(const float *l, const float *r, float *o) {
    const float A = r[0] * l[0] + r[1] * l[2], B = r[0] * l[1] + r[1] * l[3];
    const float C = r[2] * l[0] + r[3] * l[2], D = r[2] * l[1] + r[3] * l[3];
    const float inv = 1.0f / fmaxf(A + D, KALMAN_FLOOR);
    o[0] = A * inv, o[1] = B * inv, o[2] = C * inv, o[3] = D * inv;
}

/* Affine pair (g, b): eta -> g eta + b (§4.3). l earlier, r later. */
static void kalman_combine_affine(const float *l, const float *r, float *o) {
    const float g = r[0] * l[0], b = r[0] * l[1] + r[1];
    o[0] = g, o[1] = b;
}

/* Merged 3x3 leaf (§4.4) scaled by a^2 like the Mobius leaf: rows (A, B, 0), (C, D, 0),
 * (r C, r D, a) acting on (u, w0, w) with lambda = u / w0, eta = w / w0. x = [A, B, C, D, qa, qb,
 * s]. The (3,3) entry a = a^2 * (a / a^2): the eta gain a / d survives the a^2 floor. */
static void kalman_leaf_merged(float a, float a2, float p, float phi, float r, float *x) {
    kalman_leaf_mobius(a2, p, phi, x);
    x[4] = r * p, x[5] = r * a2, x[6] = a;
}

/* P = Pr Pl, q = qr Pl + sr ql, s = sr sl, all divided by tr P (mandatory here: s ~ a^-t). */
static void kalman_combine_merged(const float *l, const float *r, float *o) {
    const float A = r[0] * l[0] + r[1] * l[2], B = r[0] * l[1] + r[1] * l[3];
    const float C = r[2] * l[0] + r[3] * l[2], D = r[2] * l[1] + r[3] * l[3];
    const float qa = r[4] * l[0] + r[5] * l[2] + r[6] * l[4];
    const float qb = r[4] * l[1] + r[5] * l[3] + r[6] * l[5];
    const float s = r[6] * l[6];
    const float inv = 1.0f / fmaxf(A + D, KALMAN_FLOOR);
    o[0] = A * inv, o[1] = B * inv, o[2] = C * inv, o[3] = D * inv;
    o[4] = qa * inv, o[5] = qb * inv, o[6] = s * inv;
}

/* Inclusive Hillis-Steele scan of n elements of `width` floats: log2(n) rounds, each round
 * combining element t with element t - off (all t of a round are independent; walking t downwards
 * lets the round run in place). */
static void kalman_scan(float *x, int n, int width,
                        void (*combine)(const float *, const float *, float *)) {
    for (int off = 1; off < n; off <<= 1)
        for (int t = n - 1; t >= off; t--)
            combine(x + (size_t)(t - off) * width, x + (size_t)t * width, x + (size_t)t * width);
}

/* One lane over T tokens, chunk by chunk; (lam, eta) carried across chunks. Adds the lane's
 * readout terms q_s mean into o [T, H, M]. */
static void kalman_prefill_lane(const mixer_cfg *c, const mixer_seq *x, int h, int m, int s,
                                float *lam_io, float *eta_io, float *o) {
    const int H = c->H, M = c->dv, S = c->dk, T = x->T, cs = c->chunk;
    const int prior = (c->variant & KALMAN_PRIOR) != 0, merged = (c->variant & KALMAN_MERGED) != 0;
    float a, a2, p;
    kalman_lane_params(c, ((size_t)h * M + m) * S + s, &a, &a2, &p);
    float mer[KALMAN_MAX_CHUNK][7]; /* merged prefixes [A, B, C, D, qa, qb, s], scan=merged */
    float mob[KALMAN_MAX_CHUNK][4]; /* Mobius prefixes [A, B, C, D], scan=mobius */
    float aff[KALMAN_MAX_CHUNK][2]; /* affine prefixes (g, b), scan=mobius */
    float eta_t[KALMAN_MAX_CHUNK];  /* eta_t inside the chunk */
    float lam_t[KALMAN_MAX_CHUNK];  /* lambda_t inside the chunk */
    float rr[KALMAN_MAX_CHUNK];     /* r_t inside the chunk */
    float lam = *lam_io, eta = *eta_io;
    for (int t0 = 0; t0 < T; t0 += cs) {
        const int n = T - t0 < cs ? T - t0 : cs;
        /* leaves */
        for (int j = 0; j < n; j++) {
            const size_t tk = (size_t)(t0 + j) * H + h;
            const float kk = x->in[IN_K][tk * S + s];
            const float lvm = x->in[IN_LV] ? x->in[IN_LV][tk * M + m] : 1.0f;
            const float phi = lvm * kk * kk;
            rr[j] = (x->in[IN_V][tk * M + m] * lvm) * kk;
            if (merged)
                kalman_leaf_merged(a, a2, p, phi, rr[j], mer[j]);
            else
                kalman_leaf_mobius(a2, p, phi, mob[j]);
        }
        if (merged) {
            kalman_scan(&mer[0][0], n, 7, kalman_combine_merged);
            for (int j = 0; j < n; j++) {
                const float *P = mer[j];
                const float den = fmaxf(P[2] * lam + P[3], KALMAN_FLOOR);
                lam_t[j] = (P[0] * lam + P[1]) / den;
                eta_t[j] = (P[4] * lam + P[5] + P[6] * eta) / den;
            }
        } else {
            kalman_scan(&mob[0][0], n, 4, kalman_combine_mobius);
            for (int j = 0; j < n; j++) {
                const float *P = mob[j];
                lam_t[j] = (P[0] * lam + P[1]) / fmaxf(P[2] * lam + P[3], KALMAN_FLOOR);
            }
            /* affine leaves need lambda_{t-1}: the carried lambda for the chunk's first token */
            for (int j = 0; j < n; j++) {
                const float prev = j ? lam_t[j - 1] : lam;
                aff[j][0] = a / fmaxf(a2 + p * prev, KALMAN_FLOOR);
                aff[j][1] = rr[j];
            }
            kalman_scan(&aff[0][0], n, 2, kalman_combine_affine);
            for (int j = 0; j < n; j++) eta_t[j] = aff[j][0] * eta + aff[j][1];
        }
        /* readout: this lane's term of y_{t,m} */
        for (int j = 0; j < n; j++) {
            const size_t tk = (size_t)(t0 + j) * H + h;
            float var = 1.0f / fmaxf(lam_t[j], KALMAN_FLOOR), mean = eta_t[j] * var;
            if (prior) mean = a * mean;
            o[tk * M + m] += c->scale * x->in[IN_Q][tk * S + s] * mean;
        }
        lam = lam_t[n - 1], eta = eta_t[n - 1];
    }
    *lam_io = lam, *eta_io = eta;
}

/* T tokens with the parallel form. Lanes are independent; s runs innermost so each y_{t,m} sums
 * its lanes in the same order as step. */
static void kalman_prefill(const mixer_cfg *c, float *state, const mixer_seq *x, int pos0,
                           float *o) {
    (void)pos0;
    const int H = c->H, M = c->dv, S = c->dk;
    const size_t lanes = (size_t)H * M * S;
    memset(o, 0, (size_t)x->T * H * M * sizeof(float));
    for (int h = 0; h < H; h++)
        for (int m = 0; m < M; m++)
            for (int s = 0; s < S; s++) {
                const size_t i = ((size_t)h * M + m) * S + s;
                kalman_prefill_lane(c, x, h, m, s, state + i, state + lanes + i, o);
            }
}

const mixer_ops mixer_kalman = {
    .name = "kalman",
    .summary = "Kalman linear attention: per-lane information-form filter, Mobius scan",
    .options = "scan=mobius|merged chunk=16|32|64 decode_from_prior=0|1 scale=1",
    .inputs = kalman_inputs,
    .ninputs = (int)(sizeof kalman_inputs / sizeof kalman_inputs[0]),
    .params = kalman_params,
    .nparams = (int)(sizeof kalman_params / sizeof kalman_params[0]),
    .probes = kalman_probes,
    .nprobes = KP_COUNT,
    .configure = kalman_configure,
    .state_floats = kalman_state_floats,
    .state_init = kalman_state_init,
    .state_parts = kalman_state_parts,
    .step = kalman_step,
    .prefill = kalman_prefill,
};
