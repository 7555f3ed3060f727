/* kata_features.c: the cone feature maps, their Grams, and the capacity arithmetic of
 * spec/kata-parallax.md §A.3 and §A.10. See kata_features.h for the conventions. */
#include "kata_features.h"

#include <math.h>
#include <string.h>

#define SQRT2 1.41421356237309504880f

size_t kata_svec_dim(int p) {
    return (size_t)p * (size_t)(p + 1) / 2;
}

size_t kata_svec_index(int p, int i, int j) {
    if (i == j) return (size_t)i;
    if (i < j) {
        int t = i;
        i = j, j = t;
    }
    /* strictly lower, row-major: row i (i >= 1) holds i entries starting at i (i - 1) / 2 */
    return (size_t)p + (size_t)i * (size_t)(i - 1) / 2 + (size_t)j;
}

void kata_svec(int p, const float *X, float *out) {
    for (int i = 0; i < p; i++) out[i] = X[(size_t)i * p + i];
    size_t r = (size_t)p;
    for (int i = 1; i < p; i++)
        for (int j = 0; j < i; j++) out[r++] = SQRT2 * X[(size_t)i * p + j];
}

void kata_smat(int p, const float *s, float *X) {
    for (int i = 0; i < p; i++)
        for (int j = 0; j <= i; j++) {
            float x = i == j ? s[i] : s[kata_svec_index(p, i, j)] / SQRT2;
            X[(size_t)i * p + j] = X[(size_t)j * p + i] = x;
        }
}

size_t kata_fmap_dim(const kata_fmap *f) {
    int E = f->d / f->groups;
    switch (f->kind) {
    case KATA_FEAT_PSD_CONCAT:
        return (size_t)f->groups * kata_svec_dim(E);
    case KATA_FEAT_PSD_SUM:
        return kata_svec_dim(E);
    case KATA_FEAT_ORTHANT:
    case KATA_FEAT_LORENTZ:
    case KATA_FEAT_LINEAR:
        return (size_t)f->d;
    }
    return 0;
}

/* The (i, j) entry that svec position l of a p x p matrix holds (i >= j). */
static void svec_entry(int p, size_t l, int *i, int *j) {
    if (l < (size_t)p) {
        *i = *j = (int)l;
        return;
    }
    size_t r = l - (size_t)p;
    /* row a holds r in [a (a-1)/2, a (a+1)/2); the float guess is then corrected exactly */
    size_t a = (size_t)((1.0 + sqrt(1.0 + 8.0 * (double)r)) / 2.0);
    while (a > 1 && a * (a - 1) / 2 > r) a--;
    while (a * (a + 1) / 2 <= r) a++;
    *i = (int)a, *j = (int)(r - a * (a - 1) / 2);
}

/* The svec position after (i, j), in the order above (within one p x p block). */
static void svec_next(int p, int *i, int *j) {
    if (*i == *j) {
        if (*i + 1 < p)
            (*i)++, (*j)++;
        else
            *i = 1, *j = 0;
    } else if (++*j == *i) {
        (*i)++, *j = 0;
    }
}

void kata_fmap_range(const kata_fmap *f, const float *x, size_t r0, size_t n, float *out) {
    int d = f->d, M = f->groups, E = d / M;
    float s = f->scale, rs = sqrtf(f->scale);
    switch (f->kind) {
    case KATA_FEAT_PSD_CONCAT: {
        /* feature r of group m = r / P is s x_m,i x_m,j (times sqrt 2 off the diagonal) */
        size_t P = kata_svec_dim(E);
        int m = (int)(r0 / P), i, j;
        size_t l = r0 % P;
        svec_entry(E, l, &i, &j);
        for (size_t r = 0; r < n; r++) {
            const float *xm = x + (size_t)m * E;
            float c = i == j ? s : s * SQRT2;
            out[r] = c * xm[i] * xm[j];
            if (++l == P)
                m++, l = 0, i = j = 0;
            else
                svec_next(E, &i, &j);
        }
        break;
    }
    case KATA_FEAT_PSD_SUM: {
        int i, j;
        svec_entry(E, r0, &i, &j);
        for (size_t r = 0; r < n; r++) {
            float acc = 0.0f;
            for (int m = 0; m < M; m++) acc += x[(size_t)m * E + i] * x[(size_t)m * E + j];
            out[r] = (i == j ? s : s * SQRT2) * acc;
            svec_next(E, &i, &j);
        }
        break;
    }
    case KATA_FEAT_ORTHANT:
        for (size_t r = 0; r < n; r++) {
            float y = rs * x[r0 + r];
            out[r] = (y > 0.0f ? y : 0.0f) + KATA_ORTHANT_EPS;
        }
        break;
    case KATA_FEAT_LORENTZ:
        for (size_t r = 0; r < n; r++) {
            size_t a = r0 + r;
            if (a + 1 < (size_t)d) {
                out[r] = rs * x[a];
            } else {
                /* the cone coordinate: |x'| (1 + x_d^2) >= |x'|, x' = the first d - 1 entries */
                float nn = 0.0f;
                for (int b = 0; b + 1 < d; b++) nn += x[b] * x[b];
                float xd = rs * x[d - 1];
                out[r] = rs * sqrtf(nn) * (1.0f + xd * xd);
            }
        }
        break;
    case KATA_FEAT_LINEAR:
        for (size_t r = 0; r < n; r++) out[r] = rs * x[r0 + r];
        break;
    }
}

void kata_fmap_apply(const kata_fmap *f, const float *x, float *out) {
    kata_fmap_range(f, x, 0, kata_fmap_dim(f), out);
}

static float dot(const float *a, const float *b, int n) {
    float acc = 0.0f;
    for (int i = 0; i < n; i++) acc += a[i] * b[i];
    return acc;
}

float kata_fmap_kernel(const kata_fmap *f, const float *x, const float *y) {
    int d = f->d, M = f->groups, E = d / M;
    float s = f->scale;
    switch (f->kind) {
    case KATA_FEAT_PSD_CONCAT: {
        float acc = 0.0f;
        for (int m = 0; m < M; m++) {
            float c = s * dot(x + (size_t)m * E, y + (size_t)m * E, E);
            acc += c * c;
        }
        return acc;
    }
    case KATA_FEAT_PSD_SUM: {
        float acc = 0.0f;
        for (int m = 0; m < M; m++)
            for (int n = 0; n < M; n++) {
                float c = s * dot(x + (size_t)m * E, y + (size_t)n * E, E);
                acc += c * c;
            }
        return acc;
    }
    case KATA_FEAT_ORTHANT: {
        float rs = sqrtf(s), acc = 0.0f;
        for (int i = 0; i < d; i++) {
            float a = rs * x[i], b = rs * y[i];
            acc += ((a > 0.0f ? a : 0.0f) + KATA_ORTHANT_EPS) *
                   ((b > 0.0f ? b : 0.0f) + KATA_ORTHANT_EPS);
        }
        return acc;
    }
    case KATA_FEAT_LORENTZ: {
        float xy = dot(x, y, d - 1), xx = dot(x, x, d - 1), yy = dot(y, y, d - 1);
        float a = x[d - 1], b = y[d - 1];
        return s * xy + s * sqrtf(xx) * sqrtf(yy) * (1.0f + s * a * a) * (1.0f + s * b * b);
    }
    case KATA_FEAT_LINEAR:
        return s * dot(x, y, d);
    }
    return 0.0f;
}

void kata_psi_normalise(int d, int groups, float *x) {
    int E = d / groups;
    double acc = 0.0;
    for (int m = 0; m < groups; m++) {
        double n2 = 0.0;
        for (int i = 0; i < E; i++) n2 += (double)x[m * E + i] * x[m * E + i];
        acc += n2 * n2;
    }
    if (acc <= 0.0) return;
    float c = (float)pow(acc, -0.25);
    for (int i = 0; i < d; i++) x[i] *= c;
}

void kata_gram(const kata_fmap *f, int n, const float *x, int normalise, float *G) {
    for (int i = 0; i < n; i++)
        for (int j = 0; j <= i; j++)
            G[(size_t)i * n + j] = G[(size_t)j * n + i] =
                kata_fmap_kernel(f, x + (size_t)i * f->d, x + (size_t)j * f->d);
    if (!normalise) return;
    /* the diagonal is read while the rest is rescaled, so rescale off-diagonal entries first */
    for (int i = 0; i < n; i++)
        for (int j = 0; j < n; j++) {
            if (i == j) continue;
            double dd = (double)G[(size_t)i * n + i] * (double)G[(size_t)j * n + j];
            G[(size_t)i * n + j] = dd > 0.0 ? (float)(G[(size_t)i * n + j] / sqrt(dd)) : 0.0f;
        }
    for (int i = 0; i < n; i++) G[(size_t)i * n + i] = G[(size_t)i * n + i] > 0.0f ? 1.0f : 0.0f;
}

/* |kappa(x, y)| / sqrt(kappa(x, x) kappa(y, y)), 0 when either self-weight is 0. */
static double interference(const kata_fmap *f, const float *x, const float *y) {
    double xx = kata_fmap_kernel(f, x, x), yy = kata_fmap_kernel(f, y, y);
    if (xx <= 0.0 || yy <= 0.0) return 0.0;
    return fabs((double)kata_fmap_kernel(f, x, y)) / sqrt(xx * yy);
}

double kata_max_interference(const kata_fmap *f, int n, const float *x) {
    double mx = 0.0;
    for (int i = 0; i < n; i++)
        for (int j = 0; j < i; j++) {
            double c = interference(f, x + (size_t)i * f->d, x + (size_t)j * f->d);
            if (c > mx) mx = c;
        }
    return mx;
}

int kata_greedy_pack(const kata_fmap *f, int n, const float *x, double eps, int *keep) {
    int count = 0;
    for (int i = 0; i < n; i++) {
        const float *xi = x + (size_t)i * f->d;
        int ok = kata_fmap_kernel(f, xi, xi) > 0.0f; /* a zero feature has no direction */
        for (int j = 0; j < i && ok; j++)
            if (keep[j] && interference(f, xi, x + (size_t)j * f->d) > eps) ok = 0;
        keep[i] = ok;
        count += ok;
    }
    return count;
}

double kata_welch(double N, double p) {
    if (N <= p || p <= 0.0) return 0.0;
    return sqrt((N - p) / (p * (N - 1.0)));
}

double kata_welch_lifted(double N, double p) {
    return kata_welch(N, p * (p + 1.0) / 2.0);
}

double kata_psd_floor(double N, double p) {
    double a = kata_welch(N, p), b = kata_welch_lifted(N, p);
    return a * a > b ? a * a : b;
}

double kata_capacity_bound(double p, double eps) {
    return 0.5 * pow(1.0 - eps, -(p - 1.0) / 2.0);
}

double kata_lorentz_wall(double p, double eps) {
    if (eps < 0.5) return 1.0 + 1.0 / (1.0 - 2.0 * eps);
    if (eps == 0.5) return 2.0 * (p - 1.0);
    return INFINITY;
}

double kata_interference_power_linear(double N, double p) {
    return (N - 1.0) / p;
}

double kata_interference_power_psd(double N, double p) {
    return 3.0 * (N - 1.0) / (p * (p + 2.0));
}
