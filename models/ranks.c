#include "ranks.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

/* The top eigenvalue of a matrix with real non-negative spectrum (M^T M, or G_A G_B, similar to
 * the PSD G_A^1/2 G_B G_A^1/2), by power iteration from a fixed start: apply(ctx, x, y) = C x,
 * x and y [n]. Stops when the estimate moves by less than 1e-10 relative (or after 2000 steps:
 * random matrices have close top singular values, so a few hundred steps are common). */
static double top_eig(int n, void (*apply)(void *, const double *, double *), void *ctx) {
    double *x = malloc(2 * (size_t)n * sizeof *x), *y = x ? x + n : NULL;
    if (!x) return NAN;
    for (int i = 0; i < n; i++) x[i] = 1.0 + 0.01 * (i % 7); /* not orthogonal to anything tidy */
    double lam = 0, nx = 0;
    for (int i = 0; i < n; i++) nx += x[i] * x[i];
    nx = sqrt(nx);
    for (int i = 0; i < n; i++) x[i] /= nx;
    for (int it = 0; it < 2000; it++) {
        apply(ctx, x, y);
        double ny = 0;
        for (int i = 0; i < n; i++) ny += y[i] * y[i];
        ny = sqrt(ny);
        if (!(ny > 0)) {
            lam = 0;
            break;
        }
        for (int i = 0; i < n; i++) x[i] = y[i] / ny;
        const double prev = lam;
        lam = ny; /* x had unit norm: |C x| -> the top eigenvalue */
        if (it > 3 && fabs(lam - prev) <= 1e-10 * lam) break;
    }
    free(x);
    return lam;
}

typedef struct dense_ctx {
    const float *M;
    int rows, cols;
    double *tmp; /* [rows] */
} dense_ctx;

static void dense_mtm(void *p, const double *x, double *y) { /* y = M^T M x */
    const dense_ctx *c = p;
    for (int r = 0; r < c->rows; r++) {
        const float *m = c->M + (size_t)r * c->cols;
        double s = 0;
        for (int j = 0; j < c->cols; j++) s += m[j] * x[j];
        c->tmp[r] = s;
    }
    memset(y, 0, (size_t)c->cols * sizeof *y);
    for (int r = 0; r < c->rows; r++) {
        const float *m = c->M + (size_t)r * c->cols;
        const double t = c->tmp[r];
        for (int j = 0; j < c->cols; j++) y[j] += m[j] * t;
    }
}

/* Eigenvalues of the symmetric tridiagonal T (diagonal a [m], off-diagonal b [m - 1]) below x:
 * the Sturm count from the pivots of T - x I = L D L^T. */
static int sturm_below(const double *a, const double *b, int m, double x) {
    int count = 0;
    double d = 1;
    for (int i = 0; i < m; i++) {
        d = a[i] - x - (i ? b[i - 1] * b[i - 1] / d : 0);
        if (d == 0) d = -1e-300;
        if (d < 0) count++;
    }
    return count;
}

/* The largest eigenvalue of T by bisection to double precision. */
static double tridiag_top(const double *a, const double *b, int m) {
    double lo = INFINITY, hi = -INFINITY; /* Gershgorin */
    for (int i = 0; i < m; i++) {
        const double r = (i ? fabs(b[i - 1]) : 0) + (i < m - 1 ? fabs(b[i]) : 0);
        lo = fmin(lo, a[i] - r), hi = fmax(hi, a[i] + r);
    }
    for (int it = 0; it < 200 && hi - lo > 1e-15 * fmax(fabs(hi), fabs(lo)); it++) {
        const double mid = 0.5 * (lo + hi);
        if (sturm_below(a, b, m, mid) == m)
            hi = mid; /* every eigenvalue below mid */
        else
            lo = mid;
    }
    return 0.5 * (lo + hi);
}

/* The top eigenvalue of the symmetric positive semidefinite M^T M [n, n] by Lanczos with full
 * reorthogonalisation: extreme eigenvalues converge in tens of steps where power iteration
 * needs hundreds on the close top singular values of random matrices (a hidden size of 2048
 * would take seconds a matrix). Stops when the top Ritz value moves by less than 1e-13
 * relative, at an invariant subspace, or after min(n, 300) steps. */
static double top_eig_lanczos(int n, void (*apply)(void *, const double *, double *), void *ctx) {
    const int kmax = n < 300 ? n : 300;
    double *V = malloc(((size_t)kmax + 1) * n * sizeof *V), *w = malloc((size_t)n * sizeof *w);
    double *al = malloc(2 * (size_t)kmax * sizeof *al), *be = al ? al + kmax : NULL;
    double top = NAN;
    if (!V || !w || !al) goto done;
    double nv = 0;
    for (int i = 0; i < n; i++) V[i] = 1.0 + 0.01 * (i % 7), nv += V[i] * V[i];
    nv = sqrt(nv);
    for (int i = 0; i < n; i++) V[i] /= nv;
    double prev = -1;
    for (int j = 0; j < kmax; j++) {
        double *v = V + (size_t)j * n;
        apply(ctx, v, w);
        double a = 0;
        for (int i = 0; i < n; i++) a += v[i] * w[i];
        al[j] = a;
        for (int pass = 0; pass < 2; pass++) /* twice is enough (Kahan) */
            for (int r = 0; r <= j; r++) {
                const double *u = V + (size_t)r * n;
                double c = 0;
                for (int i = 0; i < n; i++) c += u[i] * w[i];
                for (int i = 0; i < n; i++) w[i] -= c * u[i];
            }
        double b = 0;
        for (int i = 0; i < n; i++) b += w[i] * w[i];
        b = sqrt(b);
        top = tridiag_top(al, be, j + 1);
        if ((j >= 4 && fabs(top - prev) <= 1e-13 * top) || !(b > 1e-14 * (top > 0 ? top : 1)))
            break;
        prev = top;
        be[j] = b;
        double *vn = V + (size_t)(j + 1) * n;
        for (int i = 0; i < n; i++) vn[i] = w[i] / b;
    }
done:
    free(V), free(w), free(al);
    return top;
}

double stable_rank_dense(const float *M, int rows, int cols) {
    double fro = 0;
    for (size_t i = 0; i < (size_t)rows * cols; i++) fro += (double)M[i] * M[i];
    if (!(fro > 0)) return NAN;
    dense_ctx c = {M, rows, cols, malloc((size_t)rows * sizeof(double))};
    if (!c.tmp) return NAN;
    const double top = top_eig_lanczos(cols, dense_mtm, &c);
    free(c.tmp);
    return top > 0 ? fro / top : NAN;
}

typedef struct gram_ctx {
    const double *GA, *GB;
    int k;
    double *tmp; /* [k] */
} gram_ctx;

static void gram_apply(void *p, const double *x, double *y) { /* y = G_A G_B x */
    const gram_ctx *c = p;
    for (int r = 0; r < c->k; r++) {
        double s = 0;
        for (int j = 0; j < c->k; j++) s += c->GB[(size_t)r * c->k + j] * x[j];
        c->tmp[r] = s;
    }
    for (int r = 0; r < c->k; r++) {
        double s = 0;
        for (int j = 0; j < c->k; j++) s += c->GA[(size_t)r * c->k + j] * c->tmp[j];
        y[r] = s;
    }
}

/* G [k, k] = X X^T for X [k, n] read as X[r * rs + c * cs] */
static void gram(const float *X, long rs, long cs, int k, int n, double *G) {
    for (int r = 0; r < k; r++)
        for (int s = r; s < k; s++) {
            double acc = 0;
            for (int c = 0; c < n; c++) acc += (double)X[r * rs + c * cs] * X[s * rs + c * cs];
            G[(size_t)r * k + s] = G[(size_t)s * k + r] = acc;
        }
}

double stable_rank_factored(const float *A, long ars, long acs, const float *B, long brs, long bcs,
                            int k, int n) {
    double *GA = malloc(3 * (size_t)k * k * sizeof *GA), *GB = GA ? GA + (size_t)k * k : NULL;
    if (!GA) return NAN;
    gram(A, ars, acs, k, n, GA);
    gram(B, brs, bcs, k, n, GB);
    double fro = 0;
    for (size_t i = 0; i < (size_t)k * k; i++) fro += GA[i] * GB[i];
    gram_ctx c = {GA, GB, k, GB + (size_t)k * k};
    const double top = fro > 0 ? top_eig(k, gram_apply, &c) : 0;
    free(GA);
    return top > 0 ? fro / top : NAN;
}

/* The slot that holds `data`, for its shape. */
static const wslot *slot_of(const model *m, const float *data) {
    for (int i = 0; data && i < m->nslots; i++)
        if (m->slots[i].data == data && m->slots[i].ndim == 2) return &m->slots[i];
    return NULL;
}

static void circuit_add(double *acc, int *n, double v) {
    if (!isfinite(v)) return;
    acc[0] += v;
    if (*n == 0 || v < acc[1]) acc[1] = v;
    if (*n == 0 || v > acc[2]) acc[2] = v;
    (*n)++;
}

static void circuit_end(double *acc, int n) {
    if (n)
        acc[0] /= n;
    else
        acc[0] = acc[1] = acc[2] = NAN;
}

int model_layer_ranks(const model *m, int li, layer_ranks *r, err *e) {
    if (li < 0 || li >= m->c.layers)
        return err_set(e, "ranks: layer %d out of range (%d layers)", li, m->c.layers);
    const layer *L = &m->layers[li];
    const wslot *q = slot_of(m, L->q_proj), *k = slot_of(m, L->k_proj), *v = slot_of(m, L->v_proj),
                *o = slot_of(m, L->o_proj), *rp = slot_of(m, L->r_proj);
    const wslot *all[5] = {q, k, v, o, rp};
    double *dst[5] = {&r->wq, &r->wk, &r->wv, &r->wo, &r->wr};
    for (int i = 0; i < 5; i++)
        *dst[i] =
            all[i] ? stable_rank_dense(all[i]->data, (int)all[i]->shape[0], (int)all[i]->shape[1])
                   : NAN;
    const int dk = L->mc.dk, dv = L->mc.dv;
    int nqk = 0, nrk = 0, nov = 0;
    memset(r->qk, 0, sizeof r->qk), memset(r->rk, 0, sizeof r->rk), memset(r->ov, 0, sizeof r->ov);
    /* per head: q and k rows come in heads of dk, v rows and o columns in heads of dv; a head
     * layout the shapes do not divide into is left out */
    if (q && k && dk > 0 && q->shape[0] % dk == 0 && k->shape[0] % dk == 0 &&
        q->shape[1] == k->shape[1]) {
        const int Hq = (int)(q->shape[0] / dk), Hk = (int)(k->shape[0] / dk), C = (int)q->shape[1];
        for (int h = 0; h < Hq && Hk > 0 && Hq % Hk == 0; h++) {
            const float *kh = k->data + (size_t)(h / (Hq / Hk)) * dk * C;
            circuit_add(r->qk, &nqk,
                        stable_rank_factored(q->data + (size_t)h * dk * C, C, 1, kh, C, 1, dk, C));
            if (rp && rp->shape[0] == q->shape[0] && rp->shape[1] == C)
                circuit_add(
                    r->rk, &nrk,
                    stable_rank_factored(rp->data + (size_t)h * dk * C, C, 1, kh, C, 1, dk, C));
        }
    }
    if (v && o && dv > 0 && v->shape[0] % dv == 0 && o->shape[1] == v->shape[0]) {
        const int Hv = (int)(v->shape[0] / dv), C = (int)v->shape[1], vd = (int)o->shape[1];
        /* sr(W_O,i W_V,i) = sr(W_V,i^T W_O,i^T): A = W_V,i [dv, C], B = W_O,i^T [dv, C] (column
         * i dv + r of o_proj, read down its rows) */
        for (int i = 0; i < Hv && o->shape[0] == C; i++)
            circuit_add(r->ov, &nov,
                        stable_rank_factored(v->data + (size_t)i * dv * C, C, 1,
                                             o->data + (size_t)i * dv, 1, vd, dv, C));
    }
    circuit_end(r->qk, nqk), circuit_end(r->rk, nrk), circuit_end(r->ov, nov);
    return 0;
}
