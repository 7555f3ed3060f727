#include "eig.h"

#include <math.h>
#include <stdlib.h>

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

double eig_top_sym(int n, void (*apply)(void *, const double *, double *), void *ctx) {
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
