#include "lla.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "../core/eig.h"
#include "attention.h"

static double dotd(const double *a, const double *b, int n) {
    double s = 0;
    for (int i = 0; i < n; i++) s += a[i] * b[i];
    return s;
}

/* Solves (A) x = b in place for a symmetric positive definite A [n, n] (overwritten by its
 * Cholesky factor). -1 when A is not positive definite. */
static int cholesky_solve(double *A, int n, double *b) {
    for (int j = 0; j < n; j++) {
        double d = A[(size_t)j * n + j];
        for (int k = 0; k < j; k++) d -= A[(size_t)j * n + k] * A[(size_t)j * n + k];
        if (!(d > 0)) return -1;
        d = sqrt(d);
        A[(size_t)j * n + j] = d;
        for (int i = j + 1; i < n; i++) {
            double s = A[(size_t)i * n + j];
            for (int k = 0; k < j; k++) s -= A[(size_t)i * n + k] * A[(size_t)j * n + k];
            A[(size_t)i * n + j] = s / d;
        }
    }
    for (int i = 0; i < n; i++) { /* L y = b */
        double s = b[i];
        for (int k = 0; k < i; k++) s -= A[(size_t)i * n + k] * b[k];
        b[i] = s / A[(size_t)i * n + i];
    }
    for (int i = n - 1; i >= 0; i--) { /* L^T x = y */
        double s = b[i];
        for (int k = i + 1; k < n; k++) s -= A[(size_t)k * n + i] * b[k];
        b[i] = s / A[(size_t)i * n + i];
    }
    return 0;
}

/* y = S_KV^T S_KV x for x, y [dk] (S_KV [dv, dk]; t [dv] scratch) */
typedef struct skv_ctx {
    const double *S;
    int dv, dk;
    double *t;
} skv_ctx;

static void skv_apply(void *p, const double *x, double *y) {
    const skv_ctx *c = p;
    for (int a = 0; a < c->dv; a++) c->t[a] = dotd(c->S + (size_t)a * c->dk, x, c->dk);
    for (int b = 0; b < c->dk; b++) y[b] = 0;
    for (int a = 0; a < c->dv; a++)
        for (int b = 0; b < c->dk; b++) y[b] += c->S[(size_t)a * c->dk + b] * c->t[a];
}

int attn_lla_stats(const mixer_cfg *c, const float *state, const float *q, const float *r, int pos,
                   int h, double lambda, attn_lla *out, double *o_lla) {
    const int dk = c->dk, dv = c->dv;
    if (pos < 0 || pos >= c->max_t || h < 0 || h >= c->H || !(lambda > 0) || dk > ATTN_MAX_DIM ||
        dv > ATTN_MAX_DIM)
        return -1;
    const int first = attn_first_key(c, pos), n = pos - first + 1;
    /* scratch: q, r, kbar, delta, rho_c, y [dk]; vbar, vt [dv]; p [n]; S_KK [dk, dk];
     * S_KV [dv, dk] */
    const size_t need =
        6 * (size_t)dk + 2 * (size_t)dv + (size_t)n + (size_t)dk * dk + (size_t)dv * dk;
    double *buf = calloc(need, sizeof *buf);
    float *rot = malloc(2 * (size_t)dk * sizeof *rot);
    if (!buf || !rot) {
        free(buf), free(rot);
        return -1;
    }
    double *qd = buf, *rd = qd + dk, *kbar = rd + dk, *delta = kbar + dk, *rc = delta + dk;
    double *y = rc + dk, *vbar = y + dk, *vt = vbar + dv, *p = vt + dv;
    double *SKK = p + n, *SKV = SKK + (size_t)dk * dk;
    float *qr = rot, *rr = rot + dk;
    memcpy(qr, q, (size_t)dk * sizeof *qr);
    if (r) memcpy(rr, r, (size_t)dk * sizeof *rr);
    if (c->rope) {
        float cs[ATTN_MAX_DIM / 2], sn[ATTN_MAX_DIM / 2];
        attn_rope_angles(dk, c->rope_theta, pos, cs, sn);
        attn_rope_apply(dk, cs, sn, qr);
        if (r) attn_rope_apply(dk, cs, sn, rr);
    }
    for (int i = 0; i < dk; i++) qd[i] = qr[i], rd[i] = r ? rr[i] : 0.0;
    /* softmax weights */
    double m = -INFINITY, sum = 0;
    for (int j = first; j <= pos; j++) {
        const float *k = state + attn_k_offset(c, j, h);
        double s = 0;
        for (int i = 0; i < dk; i++) s += qd[i] * k[i];
        p[j - first] = c->scale * s;
        m = fmax(m, p[j - first]);
    }
    for (int j = 0; j < n; j++) p[j] = exp(p[j] - m), sum += p[j];
    for (int j = 0; j < n; j++) p[j] /= sum;
    /* means, then centred moments */
    for (int j = first; j <= pos; j++) {
        const float *k = state + attn_k_offset(c, j, h), *v = state + attn_v_offset(c, j, h);
        const double pj = p[j - first];
        for (int i = 0; i < dk; i++) kbar[i] += pj * k[i];
        for (int i = 0; i < dv; i++) vbar[i] += pj * v[i];
    }
    for (int j = first; j <= pos; j++) {
        const float *k = state + attn_k_offset(c, j, h), *v = state + attn_v_offset(c, j, h);
        const double pj = p[j - first];
        for (int a = 0; a < dk; a++) y[a] = k[a] - kbar[a];
        for (int a = 0; a < dk; a++) {
            const double ya = pj * y[a];
            for (int b = a; b < dk; b++) SKK[(size_t)a * dk + b] += ya * y[b];
        }
        for (int a = 0; a < dv; a++) {
            const double va = pj * (v[a] - vbar[a]);
            for (int b = 0; b < dk; b++) SKV[(size_t)a * dk + b] += va * y[b];
        }
    }
    for (int a = 0; a < dk; a++)
        for (int b = 0; b < a; b++) SKK[(size_t)a * dk + b] = SKK[(size_t)b * dk + a];
    /* rho_c = (S_KK + lambda I)^-1 (kbar - q) */
    for (int i = 0; i < dk; i++) SKK[(size_t)i * dk + i] += lambda;
    for (int i = 0; i < dk; i++) delta[i] = kbar[i] - qd[i], rc[i] = delta[i];
    int rc_ok = cholesky_solve(SKK, dk, rc) == 0;
    attn_lla o = {NAN, NAN, NAN, NAN, NAN};
    if (rc_ok) {
        o.eta = dotd(delta, rc, dk);
        /* o_LLA = vbar - S_KV rho_c; o_PLX = vbar - S_KV rho */
        double dl = 0, dsa = 0, na = 0, np = 0, sr = 0;
        for (int a = 0; a < dv; a++) {
            const double cr = dotd(SKV + (size_t)a * dk, rc, dk);
            const double cp = dotd(SKV + (size_t)a * dk, rd, dk);
            const double ol = vbar[a] - cr, opx = vbar[a] - cp;
            if (o_lla) o_lla[a] = ol;
            dsa += cr * cr, na += vbar[a] * vbar[a];
            dl += (ol - opx) * (ol - opx), np += opx * opx, sr += cp * cp;
        }
        o.gap_sa = na > 0 ? sqrt(dsa / na) : NAN;
        if (r) {
            const double nr = sqrt(dotd(rd, rd, dk)), nc = sqrt(dotd(rc, rc, dk));
            o.cos = nr > 0 && nc > 0 ? dotd(rd, rc, dk) / (nr * nc) : NAN;
            o.gap = np > 0 ? sqrt(dl / np) : NAN;
            /* |S_KV|_2 = sqrt of the top eigenvalue of S_KV^T S_KV */
            skv_ctx sc = {SKV, dv, dk, vt};
            const double top = eig_top_sym(dk, skv_apply, &sc);
            o.cpa = top > 0 && nr > 0 ? sqrt(sr) / (sqrt(top) * nr) : NAN;
        }
    }
    free(buf), free(rot);
    if (!rc_ok) return -1;
    *out = o;
    return 0;
}
