#include "ranks.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "../core/eig.h"

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

double stable_rank_dense(const float *M, int rows, int cols) {
    double fro = 0;
    for (size_t i = 0; i < (size_t)rows * cols; i++) fro += (double)M[i] * M[i];
    if (!(fro > 0)) return NAN;
    dense_ctx c = {M, rows, cols, malloc((size_t)rows * sizeof(double))};
    if (!c.tmp) return NAN;
    const double top = eig_top_sym(cols, dense_mtm, &c);
    free(c.tmp);
    return top > 0 ? fro / top : NAN;
}

/* y = B^T G_A B x for x, y [n]: (A^T B)^T (A^T B) through the factors (B [k, n] by strides) */
typedef struct circuit_ctx {
    const double *GA;
    const float *B;
    long brs, bcs;
    int k, n;
    double *t, *u; /* [k] */
} circuit_ctx;

static void circuit_apply(void *p, const double *x, double *y) {
    const circuit_ctx *c = p;
    for (int r = 0; r < c->k; r++) {
        double s = 0;
        for (int j = 0; j < c->n; j++) s += c->B[r * c->brs + j * c->bcs] * x[j];
        c->t[r] = s;
    }
    for (int r = 0; r < c->k; r++) {
        double s = 0;
        for (int j = 0; j < c->k; j++) s += c->GA[(size_t)r * c->k + j] * c->t[j];
        c->u[r] = s;
    }
    for (int j = 0; j < c->n; j++) {
        double s = 0;
        for (int r = 0; r < c->k; r++) s += c->B[r * c->brs + j * c->bcs] * c->u[r];
        y[j] = s;
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
    double *GA = malloc((2 * (size_t)k * k + 2 * (size_t)k) * sizeof *GA),
           *GB = GA ? GA + (size_t)k * k : NULL;
    if (!GA) return NAN;
    gram(A, ars, acs, k, n, GA);
    gram(B, brs, bcs, k, n, GB);
    double fro = 0;
    for (size_t i = 0; i < (size_t)k * k; i++) fro += GA[i] * GB[i];
    circuit_ctx c = {GA, B, brs, bcs, k, n, GB + (size_t)k * k, GB + (size_t)k * k + k};
    const double top = fro > 0 ? eig_top_sym(n, circuit_apply, &c) : 0;
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
