/* kata_features.h: KATA's cone feature maps and the geometry around them, as pure functions.
 *
 * The mixer (kata.c) reads its weights through these, and the KATA view calls them directly for
 * the key Grams, the interference curves and the capacity demo (spec/kata-parallax.md §A.3, §A.10,
 * §A.12). Nothing here allocates or keeps state.
 *
 * Scale: every map is applied to sqrt(scale) * x, so the PSD weight is (scale * q.k)^2 per group
 * pair (the flash kernel's convention: scale multiplies each dot product before squaring) and the
 * linear weight is scale * q.k. Views that want the bare maps pass scale = 1.
 *
 * PSD packing (svec): per group, the p diagonal entries x_i^2 first, then the strictly-lower
 * entries sqrt(2) x_i x_j in row-major order ((1,0), (2,0), (2,1), (3,0), ...), so that
 * <svec X, svec Y> = <X, Y>_F (spec §A.3). Concat features stack the groups' svecs; the sum map
 * packs sum_m x_m x_m^T into one svec. */
#ifndef MIXSCOPE_KATA_FEATURES_H
#define MIXSCOPE_KATA_FEATURES_H

#include <stddef.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef enum kata_feat_kind {
    KATA_FEAT_PSD_CONCAT, /* (+)_m svec(x_m x_m^T): kappa = sum_m (q_m.k_m)^2 (M1, Mg, delta) */
    KATA_FEAT_PSD_SUM,    /* svec(sum_m x_m x_m^T): kappa = sum_{m,n} (q_m.k_n)^2 (Sigma g) */
    KATA_FEAT_ORTHANT,    /* relu(x) + 1e-6 */
    KATA_FEAT_LORENTZ,    /* (x_{1:d-1}, |x_{1:d-1}| (1 + x_d^2)) */
    KATA_FEAT_LINEAR,     /* x (no cone: weights can be negative) */
} kata_feat_kind;

#define KATA_ORTHANT_EPS 1e-6f

typedef struct kata_fmap {
    kata_feat_kind kind;
    int d;       /* input width (the head's dk) */
    int groups;  /* M: PSD maps split x into M groups of width E = d / M; 1 for the others */
    float scale; /* maps see sqrt(scale) * x */
} kata_fmap;

/* Packed svec length of a p x p symmetric matrix: p (p + 1) / 2. */
size_t kata_svec_dim(int p);
/* Position of entry (i, j) (either order) in svec. */
size_t kata_svec_index(int p, int i, int j);
/* svec of a symmetric X [p, p] (only the lower triangle is read) into out [p (p+1)/2]. */
void kata_svec(int p, const float *X, float *out);
/* The inverse: the full symmetric matrix X [p, p] from out of kata_svec. */
void kata_smat(int p, const float *s, float *X);

/* Feature dimension D of a map (M1 at d = 64: 2080; M2 1056; M4 544; Sigma2 528; Sigma4 136). */
size_t kata_fmap_dim(const kata_fmap *f);
/* Features r0 .. r0 + n - 1 of psi(x): out [n]. x: [d]. Lets callers stream psi in stack-sized
 * blocks instead of holding all D values. */
void kata_fmap_range(const kata_fmap *f, const float *x, size_t r0, size_t n, float *out);
/* The whole feature vector psi(x): out [D]. */
void kata_fmap_apply(const kata_fmap *f, const float *x, float *out);
/* kappa(x, y) = <psi(x), psi(y)> computed from group dot products, never forming psi. */
float kata_fmap_kernel(const kata_fmap *f, const float *x, const float *y);
/* Rescales x [d] in place so that |psi(x)| = 1 for the PSD concat map at scale 1:
 * x <- x (sum_m |x_m|^4)^(-1/4) (spec §A.2 step 6, "psi-normalisation"). Zero x is left alone. */
void kata_psi_normalise(int d, int groups, float *x);

/* Gram of the feature map over n inputs x [n, d]: G [n, n], G_ij = kappa(x_i, x_j). With
 * normalise != 0, G_ij / sqrt(G_ii G_jj) (the interference c of §A.10; 0 where a diagonal is 0). */
void kata_gram(const kata_fmap *f, int n, const float *x, int normalise, float *G);
/* max_{i != j} |c_ij| over the normalised Gram of x [n, d] (0 for n < 2). */
double kata_max_interference(const kata_fmap *f, int n, const float *x);
/* Greedy packing (the capacity demo, §A.10 / §A.12.6): walks the candidates x [n, d] in order and
 * keeps each one whose normalised interference |c| with every kept one is <= eps. keep: [n], set to
 * 1 for the kept ones. Returns the count kept. O(n * kept * cost(kappa)). */
int kata_greedy_pack(const kata_fmap *f, int n, const float *x, double eps, int *keep);

/* Welch floor mu_W(N, p) = sqrt((N - p) / (p (N - 1))) for N > p, else 0 (§A.10). */
double kata_welch(double N, double p);
/* The lifted bound: Welch applied to the PSD features in dimension D = p (p+1)/2, mu_W(N, D),
 * a floor on max (u_i.u_j)^2. */
double kata_welch_lifted(double N, double p);
/* F_PSD(N, p) = max(mu_W(N, p)^2, mu_W(N, D)): the floor on squared interference. */
double kata_psd_floor(double N, double p);
/* Capacity lower bound above the floor: (1/2) (1 - eps)^(-(p - 1)/2) keys with (u_i.u_j)^2 <= eps
 * (p = 64: eps 0.1 -> 13.8, eps 0.2 -> 564). */
double kata_capacity_bound(double p, double eps);
/* Lorentz (Rankin) wall: at most 1 + 1/(1 - 2 eps) unit cone elements with pairwise interference
 * <= eps < 1/2; 2 (p - 1) at eps = 1/2; INFINITY above (no wall from this argument). */
double kata_lorentz_wall(double p, double eps);
/* Interference power P = E sum_{i != *} c_i^2 for N isotropic unit keys in R^p (pSNR = 1/P):
 * first-order (N - 1)/p, rank-one PSD 3 (N - 1)/(p (p + 2)). */
double kata_interference_power_linear(double N, double p);
double kata_interference_power_psd(double N, double p);

#ifdef __cplusplus
}
#endif

#endif
