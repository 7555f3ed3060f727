/* eig.h: the largest eigenvalue of a symmetric positive semidefinite operator, given only as
 * y = A x (Lanczos with full reorthogonalisation, in double). For spectral norms: ||M||_2^2 is
 * the top eigenvalue of M^T M, applied as two products without forming it (models/ranks.c, the
 * stable ranks; mixers/lla.c, the CPA's ||S_KV||_2). */
#ifndef MIXSCOPE_EIG_H
#define MIXSCOPE_EIG_H

/* apply(ctx, x, y): y = A x for x, y [n]. Extreme eigenvalues converge in tens of steps, where
 * power iteration needs hundreds on close top eigenvalues (random matrices have them). Stops
 * when the top Ritz value moves by less than 1e-13 relative, at an invariant subspace (a rank-k
 * operator: after k + 1 steps), or after min(n, 300) steps. NAN when out of memory. */
double eig_top_sym(int n, void (*apply)(void *ctx, const double *x, double *y), void *ctx);

#endif
