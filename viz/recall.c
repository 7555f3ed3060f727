/* recall.c: readback of earlier keys' values from the current state, recorded into the trace:
 * the stateless float product (recall_record) and the per-layer tracker that advances the
 * readbacks with the mixer's write form (recall.h).
 *
 * The inner loops use GNU C vector types (gcc and clang) of the baseline SSE2 width, so they are
 * vectorised whatever the optimisation level and target; each lane keeps the sum order of the
 * scalar loop, so the results do not depend on the vector width. */
#include "recall.h"

#include "../core/pool.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#define W RECALL_WINDOW

typedef float vf4 __attribute__((vector_size(16)));
typedef float vf2 __attribute__((vector_size(8)));
typedef double vd2 __attribute__((vector_size(16)));

float recall_readback(int dk, int dv, const float *S, const float *k, const float *v) {
    double num = 0, den = 0;
    for (int j = 0; j < dv; j++) {
        double r = 0;
        for (int i = 0; i < dk; i++) r += (double)S[(size_t)i * dv + j] * k[i];
        num += (r - v[j]) * (r - v[j]);
        den += (double)v[j] * v[j];
    }
    return den > 0 ? (float)sqrt(num / den) : NAN;
}

/* ---------------------------------------------------------------------------------------------
 * The float product R = K S */

/* Four rows times eight value columns: eight 4-wide accumulators stay in registers while d runs
 * over the keys, and the column block of S (dk x 8 floats) stays in L1 while every row block
 * passes over it. k[0..4) are the rows (a short block repeats its last row), n of them stored. */
static void rows_block(int dk, int dv, const float *const *k, int n, const float *S, int j0,
                       float *R, size_t ldr) {
    vf4 c0a = {0}, c0b = {0}, c1a = {0}, c1b = {0}, c2a = {0}, c2b = {0}, c3a = {0}, c3b = {0};
    const float *k0 = k[0], *k1 = k[1], *k2 = k[2], *k3 = k[3];
    for (int d = 0; d < dk; d++) {
        vf4 sa, sb;
        memcpy(&sa, S + (size_t)d * dv + j0, sizeof sa);
        memcpy(&sb, S + (size_t)d * dv + j0 + 4, sizeof sb);
        float a0 = k0[d], a1 = k1[d], a2 = k2[d], a3 = k3[d];
        c0a += a0 * sa, c0b += a0 * sb, c1a += a1 * sa, c1b += a1 * sb;
        c2a += a2 * sa, c2b += a2 * sb, c3a += a3 * sa, c3b += a3 * sb;
    }
    vf4 c[8] = {c0a, c0b, c1a, c1b, c2a, c2b, c3a, c3b};
    for (int r = 0; r < n; r++) memcpy(R + r * ldr + j0, &c[2 * r], 2 * sizeof c[0]);
}

void recall_readback_rows(int n, const float *const *K, int dk, int dv, const float *S, float *R,
                          size_t ldr) {
    int jb = dv - dv % 8; /* columns in whole blocks */
    for (int j0 = 0; j0 < jb; j0 += 8)
        for (int i0 = 0; i0 < n; i0 += 4) {
            int nr = n - i0 < 4 ? n - i0 : 4;
            const float *k[4];
            for (int r = 0; r < 4; r++) k[r] = K[i0 + (r < nr ? r : nr - 1)];
            rows_block(dk, dv, k, nr, S, j0, R + (size_t)i0 * ldr, ldr);
        }
    if (jb == dv) return;
    for (int i = 0; i < n; i++) { /* the last dv % 8 columns */
        float *Ri = R + (size_t)i * ldr;
        for (int j = jb; j < dv; j++) Ri[j] = 0.0f;
        for (int d = 0; d < dk; d++) {
            const float *s = S + (size_t)d * dv;
            float a = K[i][d];
            for (int j = jb; j < dv; j++) Ri[j] += a * s[j];
        }
    }
}

/* ---------------------------------------------------------------------------------------------
 * Double helpers of the tracker */

/* sum_d k[d] b[d]: float k, double b. */
static double dot_fd(int n, const float *k, const double *b) {
    vd2 s0 = {0}, s1 = {0};
    int d = 0;
    for (; d + 4 <= n; d += 4) {
        vf2 ka, kb;
        vd2 ba, bb;
        memcpy(&ka, k + d, sizeof ka), memcpy(&kb, k + d + 2, sizeof kb);
        memcpy(&ba, b + d, sizeof ba), memcpy(&bb, b + d + 2, sizeof bb);
        s0 += __builtin_convertvector(ka, vd2) * ba;
        s1 += __builtin_convertvector(kb, vd2) * bb;
    }
    double s = (s0[0] + s1[0]) + (s0[1] + s1[1]);
    for (; d < n; d++) s += (double)k[d] * b[d];
    return s;
}

/* r <- a r + c u over n values; returns |r - v|^2 of the new r. */
static double advance_row(int n, double *r, double a, double c, const double *u, const float *v) {
    vd2 e2 = {0};
    int j = 0;
    for (; j + 2 <= n; j += 2) {
        vd2 rj, uj;
        vf2 vj;
        memcpy(&rj, r + j, sizeof rj), memcpy(&uj, u + j, sizeof uj), memcpy(&vj, v + j, sizeof vj);
        rj = a * rj + c * uj;
        memcpy(r + j, &rj, sizeof rj);
        vd2 dj = rj - __builtin_convertvector(vj, vd2);
        e2 += dj * dj;
    }
    double s = e2[0] + e2[1];
    for (; j < n; j++) {
        r[j] = a * r[j] + c * u[j];
        s += (r[j] - v[j]) * (r[j] - v[j]);
    }
    return s;
}

/* r [dv] = S^T k in double, S [dk][dv]. */
static void readback_d(int dk, int dv, const float *S, const float *k, double *r) {
    memset(r, 0, (size_t)dv * sizeof *r);
    for (int d = 0; d < dk; d++) {
        const float *s = S + (size_t)d * dv;
        double a = k[d];
        int j = 0;
        for (; j + 2 <= dv; j += 2) {
            vf2 sj;
            vd2 rj;
            memcpy(&sj, s + j, sizeof sj), memcpy(&rj, r + j, sizeof rj);
            rj += a * __builtin_convertvector(sj, vd2);
            memcpy(r + j, &rj, sizeof rj);
        }
        for (; j < dv; j++) r[j] += a * s[j];
    }
}

/* The same three on AVX2 (4 doubles a vector; no FMA, so the elementwise updates are the same
 * bits as above and the two sums differ only in their order of addition), picked at run time
 * for the incremental rows, the tracker's hot loop. */
typedef double vd4 __attribute__((vector_size(32)));
typedef float vf4u __attribute__((vector_size(16), aligned(4)));
typedef double vd4u __attribute__((vector_size(32), aligned(8)));

__attribute__((target("avx2"))) static double dot_fd_avx2(int n, const float *k, const double *b) {
    vd4 s0 = {0}, s1 = {0};
    int d = 0;
    for (; d + 8 <= n; d += 8) {
        vf4u ka = *(const vf4u *)(k + d), kb = *(const vf4u *)(k + d + 4);
        s0 += __builtin_convertvector(ka, vd4) * *(const vd4u *)(b + d);
        s1 += __builtin_convertvector(kb, vd4) * *(const vd4u *)(b + d + 4);
    }
    vd4 s4 = s0 + s1;
    double s = (s4[0] + s4[2]) + (s4[1] + s4[3]);
    for (; d < n; d++) s += (double)k[d] * b[d];
    return s;
}

__attribute__((target("avx2"))) static double advance_row_avx2(int n, double *r, double a, double c,
                                                               const double *u, const float *v) {
    vd4 e2 = {0};
    int j = 0;
    for (; j + 4 <= n; j += 4) {
        vd4 rj = *(vd4u *)(r + j);
        rj = a * rj + c * *(const vd4u *)(u + j);
        *(vd4u *)(r + j) = rj;
        vd4 dj = rj - __builtin_convertvector(*(const vf4u *)(v + j), vd4);
        e2 += dj * dj;
    }
    double s = (e2[0] + e2[2]) + (e2[1] + e2[3]);
    for (; j < n; j++) {
        r[j] = a * r[j] + c * u[j];
        s += (r[j] - v[j]) * (r[j] - v[j]);
    }
    return s;
}

__attribute__((target("avx2"))) static void readback_d_avx2(int dk, int dv, const float *S,
                                                            const float *k, double *r) {
    memset(r, 0, (size_t)dv * sizeof *r);
    for (int d = 0; d < dk; d++) {
        const float *s = S + (size_t)d * dv;
        double a = k[d];
        for (int j = 0; j < dv; j++) r[j] += a * (double)s[j];
    }
}

typedef struct row_ops {
    double (*dot)(int n, const float *k, const double *b);
    double (*advance)(int n, double *r, double a, double c, const double *u, const float *v);
    void (*readback)(int dk, int dv, const float *S, const float *k, double *r);
} row_ops;

static const row_ops *row_ops_pick(void) {
    static const row_ops base = {dot_fd, advance_row, readback_d};
    static const row_ops avx2 = {dot_fd_avx2, advance_row_avx2, readback_d_avx2};
    return __builtin_cpu_supports("avx2") ? &avx2 : &base;
}

static double dist2_d(int n, const double *r, const float *v) {
    double s = 0;
    for (int j = 0; j < n; j++) s += (r[j] - v[j]) * (r[j] - v[j]);
    return s;
}

static double norm2_f(int n, const float *v) {
    double s = 0;
    for (int j = 0; j < n; j++) s += (double)v[j] * v[j];
    return s;
}

/* |r - v|^2 and |v|^2 in double, float r and v. */
static void err2_ff(int n, const float *r, const float *v, double *e2, double *v2) {
    vd2 ea = {0}, va = {0};
    int j = 0;
    for (; j + 2 <= n; j += 2) {
        vf2 rj, vj;
        memcpy(&rj, r + j, sizeof rj), memcpy(&vj, v + j, sizeof vj);
        vd2 vd = __builtin_convertvector(vj, vd2), dj = __builtin_convertvector(rj, vd2) - vd;
        ea += dj * dj, va += vd * vd;
    }
    double se = ea[0] + ea[1], sv = va[0] + va[1];
    for (; j < n; j++) {
        double dj = (double)r[j] - v[j];
        se += dj * dj, sv += (double)v[j] * v[j];
    }
    *e2 = se, *v2 = sv;
}

/* sqrt(e2 / v2), NaN when v = 0 (the recall entry). */
static float entry(double e2, double v2) {
    return v2 > 0 ? (float)sqrt(e2 / v2) : NAN;
}

/* ---------------------------------------------------------------------------------------------
 * Series */

static int add_kv(trace *tr, int layers, int H, int dk, int dv, int *sk, int *sv, err *e) {
    *sk = trace_add_series(tr, "k", "key of the token, as the mixer saw it", "input", layers, H, dk,
                           e);
    *sv = *sk < 0 ? -1
                  : trace_add_series(tr, "v", "value of the token, as the mixer saw it", "input",
                                     layers, H, dv, e);
    return *sv < 0 ? -1 : 0;
}

static int add_recall(trace *tr, int layers, int H, err *e) {
    return trace_add_series(tr, "recall",
                            "|S_t^T k_(t-j) - v_(t-j)| / |v_(t-j)|: readback error of the key j "
                            "tokens back",
                            "recall", layers, H, W, e);
}

int recall_record_kv(trace *tr, int layers, int layer, int H, int dk, int dv, const float *k,
                     const float *v, int64_t t, err *e) {
    if (t < 0 || t >= tr->T) return err_set(e, "recall: token %lld not in the trace", (long long)t);
    int sk, sv;
    if (add_kv(tr, layers, H, dk, dv, &sk, &sv, e)) return -1;
    if (layer < 0 || layer >= layers) return err_set(e, "recall: layer %d out of range", layer);
    if (trace_put_heads(tr, sk, t, layer, k, H, dk) || trace_put_heads(tr, sv, t, layer, v, H, dv))
        return err_set(e, "recall: the keys and values of layer %d do not fit the trace", layer);
    return 0;
}

int recall_record(trace *tr, int layers, int layer, int H, int dk, int dv, const float *k,
                  const float *v, const float *state, int64_t t, err *e) {
    if (recall_record_kv(tr, layers, layer, H, dk, dv, k, v, t, e)) return -1;
    int sk = trace_find(tr, "k"), sv = trace_find(tr, "v");
    int sr = add_recall(tr, layers, H, e);
    if (sr < 0) return -1;
    float *R = malloc((size_t)W * dv * sizeof *R); /* [n][dv] */
    if (!R) return err_set(e, "recall: out of memory");
    for (int h = 0; h < H; h++) {
        const float *S = state + (size_t)h * dk * dv;  /* [dk][dv] */
        float *row = trace_at_lh(tr, sr, t, layer, h); /* [W] */
        const float *K[W] = {0};                       /* the recorded keys of the window */
        int js[W], n = 0;
        for (int j = 0; j < W; j++) {
            row[j] = NAN;
            if (j > t) continue;
            const float *ki = trace_at_lh(tr, sk, t - j, layer, h);
            if (!isnan(ki[0])) K[n] = ki, js[n++] = j;
        }
        recall_readback_rows(n, K, dk, dv, S, R, (size_t)dv);
        for (int i = 0; i < n; i++) {
            double e2, v2;
            err2_ff(dv, R + (size_t)i * dv, trace_at_lh(tr, sv, t - js[i], layer, h), &e2, &v2);
            row[js[i]] = entry(e2, v2);
        }
    }
    free(R);
    return 0;
}

/* ---------------------------------------------------------------------------------------------
 * Tracker */

int recall_tracker_init(recall_tracker *rt, const mixer_ops *m, const mixer_cfg *c, err *e) {
    memset(rt, 0, sizeof *rt);
    rt->m = m, rt->c = *c;
    int H = c->H, dk = c->dk, dv = c->dv;
    rt->H = H, rt->dk = dk, rt->dv = dv;
    if (H < 1 || dk < 1 || dv < 1) return err_set(e, "recall: H=%d dk=%d dv=%d", H, dk, dv);
    state_part parts[MIXER_MAX_STATE_PARTS];
    int np = m->state_parts ? m->state_parts(c, parts) : 0;
    for (int i = 0; i < np; i++)
        if (!strcmp(parts[i].name, "hT") && parts[i].ndim == 3 && parts[i].shape[0] == H &&
            parts[i].shape[1] == dk && parts[i].shape[2] == dv)
            rt->keymajor = 1, rt->hoff = parts[i].offset;
    size_t hw = (size_t)H * W;
    rt->tok = malloc(W * sizeof *rt->tok);
    rt->K = malloc(hw * dk * sizeof *rt->K);
    rt->V = malloc(hw * dv * sizeof *rt->V);
    int ok = rt->tok && rt->K && rt->V;
    if (ok && rt->keymajor) {
        rt->R = malloc(hw * dv * sizeof *rt->R);
        rt->Rf = malloc((size_t)W * dv * sizeof *rt->Rf);
        rt->E = malloc(hw * sizeof *rt->E);
        rt->vn2 = malloc(hw * sizeof *rt->vn2);
        rt->scr = malloc((2 * (size_t)dv + dk) * sizeof *rt->scr);
        ok = rt->R && rt->Rf && rt->E && rt->vn2 && rt->scr;
        if (ok && m->write_form) {
            rt->alpha = malloc((size_t)H * sizeof *rt->alpha);
            rt->kk = malloc((size_t)H * dk * sizeof *rt->kk);
            rt->u = malloc((size_t)H * dv * sizeof *rt->u);
            ok = rt->alpha && rt->kk && rt->u;
        }
    }
    if (!ok) {
        recall_tracker_free(rt);
        return err_set(e, "recall: out of memory for the tracker");
    }
    recall_tracker_reset(rt);
    return 0;
}

void recall_tracker_reset(recall_tracker *rt) {
    rt->next = rt->pending = -1;
    rt->form = rt->form_off = 0;
    if (rt->tok)
        for (int s = 0; s < W; s++) rt->tok[s] = -1;
}

void recall_tracker_free(recall_tracker *rt) {
    free(rt->tok), free(rt->K), free(rt->V), free(rt->R), free(rt->Rf);
    free(rt->E), free(rt->vn2), free(rt->scr);
    free(rt->alpha), free(rt->kk), free(rt->u);
    memset(rt, 0, sizeof *rt);
}

/* Head h's key and value of token i into ring slot s. */
static void ring_put(recall_tracker *rt, int h, int s, const float *k, const float *v) {
    size_t hs = (size_t)h * W + s;
    memcpy(rt->K + hs * rt->dk, k, (size_t)rt->dk * sizeof *k);
    memcpy(rt->V + hs * rt->dv, v, (size_t)rt->dv * sizeof *v);
    if (rt->vn2) rt->vn2[hs] = norm2_f(rt->dv, v);
}

int recall_before_step(recall_tracker *rt, const float *state, const mixer_tok *x, int64_t t,
                       err *e) {
    if (t < 0) return err_set(e, "recall: token %lld", (long long)t);
    if (!x->in[IN_K] || !x->in[IN_V]) return err_set(e, "recall: the token has no key or value");
    int H = rt->H, dk = rt->dk, dv = rt->dv, slot = (int)(t % W);
    if (t != rt->next) { /* a gap or a new sequence: the ring and readbacks are stale */
        for (int s = 0; s < W; s++) rt->tok[s] = -1;
        rt->next = -1;
    }
    for (int h = 0; h < H; h++)
        ring_put(rt, h, slot, x->in[IN_K] + (size_t)h * dk, x->in[IN_V] + (size_t)h * dv);
    rt->tok[slot] = -1; /* token t - W leaves; t is in the ring once recorded */
    rt->pending = t;
    rt->form = rt->keymajor && rt->alpha && !rt->form_off && rt->next == t &&
               rt->m->write_form(&rt->c, state, x, (int)t, rt->alpha, rt->kk, rt->u) == 0;
    return 0;
}

/* Keys of the window not in the ring, from the trace's "k" / "v" of this layer (after a gap). */
static void ring_load(recall_tracker *rt, const trace *tr, int sk, int sv, int layer, int64_t t) {
    for (int j = 1; j < W && j <= t; j++) {
        int64_t i = t - j;
        int slot = (int)(i % W);
        if (rt->tok[slot] == i || i >= tr->T || isnan(trace_at_lh(tr, sk, i, layer, 0)[0]))
            continue;
        for (int h = 0; h < rt->H; h++)
            ring_put(rt, h, slot, trace_at_lh(tr, sk, i, layer, h),
                     trace_at_lh(tr, sv, i, layer, h));
        rt->tok[slot] = i;
    }
}

/* Every row of the window from the state after the token: the float product. */
static void rows_full(recall_tracker *rt, const float *state) {
    int H = rt->H, dk = rt->dk, dv = rt->dv;
    const float *K[W] = {0}; /* (gcc 13 cannot see that only the n set are read) */
    int slots[W], n = 0;
    for (int s = 0; s < W; s++)
        if (rt->tok[s] >= 0) slots[n++] = s;
    for (int h = 0; h < H; h++) {
        for (int i = 0; i < n; i++) K[i] = rt->K + ((size_t)h * W + slots[i]) * dk;
        recall_readback_rows(n, K, dk, dv, state + (size_t)h * dk * dv, rt->Rf, (size_t)dv);
        for (int i = 0; i < n; i++) {
            size_t hs = (size_t)h * W + slots[i];
            double *r = rt->R + hs * dv;
            const float *rf = rt->Rf + (size_t)i * dv;
            for (int j = 0; j < dv; j++) r[j] = rf[j];
            rt->E[hs] = entry(dist2_d(dv, r, rt->V + hs * dv), rt->vn2[hs]);
        }
    }
    rt->full++;
}

/* Advances every row but token t's by the write form, r <- alpha r + (k_i . kk) u, with its
 * recall entry; token t's row and one check row (j = 1 .. min(t, W - 1) in turn) are read from
 * the state directly. Returns 0, or -1 when the check row disagrees beyond float rounding: the
 * recall entries would differ by more than 1e-4 (then the caller recomputes everything). */
typedef struct inc_ctx {
    recall_tracker *rt;
    const float *state;
    int slot, cslot;
    double *scr;     /* [H][2 dv + dk] each head's check row, u and kk in double */
    _Atomic int bad; /* a head whose check row disagreed */
    const row_ops *ops;
} inc_ctx;

/* Heads [lo, hi) of rows_incremental: independent of one another, so split over threads. */
static void inc_heads(void *ctx, int lo, int hi) {
    inc_ctx *c = ctx;
    recall_tracker *rt = c->rt;
    int dk = rt->dk, dv = rt->dv, slot = c->slot, cslot = c->cslot;
    const row_ops *ops = c->ops;
    for (int h = lo; h < hi; h++) {
        double *chk = c->scr + (size_t)h * (2 * dv + dk), *ud = chk + dv, *kd = chk + 2 * dv;
        const float *S = c->state + (size_t)h * dk * dv;
        for (int d = 0; d < dk; d++) kd[d] = rt->kk[(size_t)h * dk + d];
        for (int j = 0; j < dv; j++) ud[j] = rt->u[(size_t)h * dv + j];
        double a = rt->alpha[h];
        for (int s = 0; s < W; s++) {
            if (rt->tok[s] < 0 || s == slot) continue;
            size_t hs = (size_t)h * W + s;
            double cf = ops->dot(dk, rt->K + hs * dk, kd);
            double e2 = ops->advance(dv, rt->R + hs * dv, a, cf, ud, rt->V + hs * dv);
            rt->E[hs] = entry(e2, rt->vn2[hs]);
        }
        size_t hn = (size_t)h * W + slot;
        ops->readback(dk, dv, S, rt->K + hn * dk, rt->R + hn * dv);
        rt->E[hn] = entry(dist2_d(dv, rt->R + hn * dv, rt->V + hn * dv), rt->vn2[hn]);
        if (cslot < 0) continue;
        size_t hc = (size_t)h * W + cslot;
        const double *r = rt->R + hc * dv;
        ops->readback(dk, dv, S, rt->K + hc * dk, chk);
        double diff = 0, c2 = 0;
        for (int j = 0; j < dv; j++)
            diff += (r[j] - chk[j]) * (r[j] - chk[j]), c2 += chk[j] * chk[j];
        if (!(diff <= 1e-8 * fmax(rt->vn2[hc], c2))) c->bad = 1;
    }
}

static int rows_incremental(recall_tracker *rt, const float *state, int64_t t) {
    int H = rt->H, dk = rt->dk, dv = rt->dv, slot = (int)(t % W);
    int64_t m = t < W - 1 ? t : W - 1, ic = m > 0 ? t - 1 - rt->incremental % m : -1;
    int cslot = ic >= 0 && rt->tok[ic % W] == ic ? (int)(ic % W) : -1;
    inc_ctx c = {.rt = rt, .state = state, .slot = slot, .cslot = cslot, .ops = row_ops_pick()};
    c.scr = malloc((size_t)H * (2 * dv + dk) * sizeof *c.scr);
    if (!c.scr) return -1; /* the full product then */
    /* a head's work is W (dk + dv): worth threads from heads of 64 */
    if ((int64_t)W * (dk + dv) >= 16384)
        pool_for(H, inc_heads, &c);
    else
        inc_heads(&c, 0, H);
    free(c.scr);
    if (c.bad) return -1;
    rt->incremental++;
    return 0;
}

int recall_after_step(recall_tracker *rt, trace *tr, int layers, int layer, const float *state,
                      int64_t t, err *e) {
    if (t != rt->pending)
        return err_set(e, "recall: token %lld stepped without recall_before_step", (long long)t);
    if (t >= tr->T) return err_set(e, "recall: token %lld not in the trace", (long long)t);
    if (layer < 0 || layer >= layers) return err_set(e, "recall: layer %d out of range", layer);
    int H = rt->H, dk = rt->dk, dv = rt->dv, slot = (int)(t % W), sk, sv;
    rt->pending = -1;
    if (add_kv(tr, layers, H, dk, dv, &sk, &sv, e)) return -1;
    for (int h = 0; h < H; h++) {
        memcpy(trace_at_lh(tr, sk, t, layer, h), rt->K + ((size_t)h * W + slot) * dk,
               (size_t)dk * sizeof(float));
        memcpy(trace_at_lh(tr, sv, t, layer, h), rt->V + ((size_t)h * W + slot) * dv,
               (size_t)dv * sizeof(float));
    }
    rt->tok[slot] = t;
    if (!rt->keymajor) {
        rt->next = t + 1;
        return 0;
    }
    int sr = add_recall(tr, layers, H, e);
    if (sr < 0) return -1;
    const float *S = state + rt->hoff;
    if (rt->next != t) ring_load(rt, tr, sk, sv, layer, t);
    int inc = rt->form && rt->next == t;
    if (inc && rows_incremental(rt, S, t)) rt->form_off = 1, inc = 0;
    if (!inc) rows_full(rt, S);
    rt->form = 0;
    rt->next = t + 1;
    for (int h = 0; h < H; h++) {
        float *row = trace_at_lh(tr, sr, t, layer, h); /* [W] */
        for (int j = 0; j < W; j++) {
            int64_t i = t - j;
            int s = (int)(i % W);
            row[j] = i >= 0 && rt->tok[s] == i ? rt->E[(size_t)h * W + s] : NAN;
        }
    }
    return 0;
}

const double *recall_tracker_row(const recall_tracker *rt, int h, int j) {
    int64_t t = rt->next - 1, i = t - j;
    if (!rt->keymajor || t < 0 || h < 0 || h >= rt->H || j < 0 || j >= W || i < 0) return NULL;
    int s = (int)(i % W);
    return rt->tok[s] == i ? rt->R + ((size_t)h * W + s) * rt->dv : NULL;
}
