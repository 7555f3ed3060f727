/* ranks.h: stable ranks of a layer's projections and of its per-head circuits (spec
 * kata-parallax.md §B.7, §B.9 item 8): sr(M) = ||M||_F^2 / ||M||_2^2, between 1 (rank one) and
 * the rank. The paper compares them between optimisers (Muon against AdamW: W_R 134 against 9.3)
 * and between Parallax and softmax (W_V, W_O, W_OV higher under Parallax).
 *
 * Matrices, as the layer stores them ([out, in], in = hidden C):
 *   W_Q, W_K, W_V, W_R the whole projections, W_O the output projection [C, value_dim];
 *   per head h, with its key head g (GQA: consecutive query heads share one):
 *     W_QK,h = W_Q,h^T W_K,g   [C, C]  the bilinear form x^T W_QK y = q.k (scale left out)
 *     W_RK,h = W_R,h^T W_K,g   [C, C]  the probe's circuit (Parallax)
 *     W_OV,i = W_O,i W_V,i     [C, C]  per value head i.
 * ||M||_2^2 is the top eigenvalue of M^T M by Lanczos (core/eig.h) in double, applied through the
 * factors for the circuits (the products are never formed). */
#ifndef MIXSCOPE_RANKS_H
#define MIXSCOPE_RANKS_H

#include "../core/err.h"
#include "model.h"

/* NAN where the layer has no such matrix (a family without r_proj, a core without q/k/v/o
 * projections). Circuits: mean, min and max over heads. */
typedef struct layer_ranks {
    double wq, wk, wv, wo, wr;
    double qk[3], rk[3], ov[3]; /* mean, min, max */
} layer_ranks;

/* Stable rank of a dense row-major matrix [rows, cols]; NAN for a zero matrix. */
double stable_rank_dense(const float *M, int rows, int cols);
/* Stable rank of A^T B for A, B [k, n] read as A[r * ars + c * acs], B[r * brs + c * bcs] (a
 * slice of rows, or of columns, of a stored matrix); NAN for a zero product. With the k x k Gram
 * matrices G_A = A A^T, G_B = B B^T: ||A^T B||_F^2 = sum G_A .* G_B, and ||A^T B||_2^2 is the top
 * eigenvalue of B^T G_A B, applied as x -> B^T (G_A (B x)). */
double stable_rank_factored(const float *A, long ars, long acs, const float *B, long brs, long bcs,
                            int k, int n);
/* Every stable rank of layer li. */
int model_layer_ranks(const model *m, int li, layer_ranks *r, err *e);

#endif
