/* delta_tf32.c: the chunked delta rule as fla's Triton chunk kernels compute it on a Hopper GPU
 * (arith=tf32; see tf32.h). Same function as delta_chunk_forward (spec/delta-family.md §2.5), but
 * with fla's order of operations and TF32 operands in every tl.dot of fp32 inputs:
 *
 *   kkt + solve (gated_delta_rule/chunk_fwd.py, chunk_gated_delta_rule_fwd_kkt_solve_kernel):
 *       K K^T                      tf32 operands
 *       M = (K K^T) .* exp(G_i - G_j), then * beta_i, strictly lower
 *       (I + M)^-1 on 16x16 diagonal blocks by forward substitution in float32, then the blocks
 *       merged with tl.dot in tf32: A_{r,r-1} = -(A_rr M_{r,r-1}) A_{r-1,r-1},
 *       A_rc = -A_rr (sum_{m=c}^{r-1} M_rm A_mc) for r - c >= 2
 *   w, u (gated_delta_rule/wy_fast.py, recompute_w_u_fwd_kernel):
 *       W = A (K beta exp(G))        tf32 operands
 *       U = A (V beta)               allow_tf32=False: exact float32
 *   state (common/chunk_delta_h.py): the state S entering the chunk is kept for the output, then
 *       v_new = U - W S              tf32 operands
 *       S <- exp(G_last) S + K^T (v_new exp(G_last - G))    tf32 operands
 *   output (common/chunk_o.py):
 *       o = scale exp(G_i) (Q S) + scale ((Q K^T) .* exp(G_i - G_j), j <= i) v_new
 *       Q S, Q K^T and the product with v_new with tf32 operands.
 *
 * G is the chunk-local cumulative log-decay (fla subtracts cumulative sums, as done here; the
 * exact path sums the g's between j and i instead). Everything else is float32, summed in index
 * order (the tensor cores' order within a product is not reproduced; it is below TF32's 2^-11). */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "tf32.h"

#define BC 16 /* fla's diagonal block of the triangular solve */

/* Scratch for one chunk of one head (C = c->chunk). */
typedef struct tf32_buf {
    float *G;         /* [C] chunk-local cumulative log-decay */
    float *E;         /* [C] exp(G_last - G_j): token j's decay to the chunk's end */
    float *M;         /* [C, C] strictly lower beta_i (k_i.k_j) exp(G_i - G_j) */
    float *A;         /* [C, C] (I + M)^-1, unit lower */
    float *W;         /* [C, dk] pseudo-keys */
    float *D;         /* [C, dv] U, then v_new = U - W S */
    float *P, *Q, *R; /* [BC, BC] block products of the merge */
} tf32_buf;

/* X[BC, BC] = tf32(Y) tf32(Z) for BC x BC blocks with row strides ys, zs. */
static void block_mm_tf32(float *X, const float *Y, int ys, const float *Z, int zs) {
    for (int i = 0; i < BC; i++)
        for (int j = 0; j < BC; j++) {
            float s = 0.0f;
            for (int m = 0; m < BC; m++) s += tf32(Y[i * ys + m]) * tf32(Z[m * zs + j]);
            X[i * BC + j] = s;
        }
}

/* A = (I + M)^-1 over nb diagonal blocks of BC rows (rows past n are zero and stay harmless). */
static void solve_blocks(int C, int nb, const float *M, float *A, tf32_buf *b) {
    memset(A, 0, (size_t)C * C * sizeof *A);
    /* Diagonal blocks: row i of the inverse from the rows above it, float32, as fla's loop
     * a = -M_i; a += sum_m a_m Ainv_m (with Ainv still without its unit diagonal). */
    for (int r = 0; r < nb; r++) {
        float *Ab = A + (size_t)r * BC * C + r * BC;       /* block (r, r) of A */
        const float *Mb = M + (size_t)r * BC * C + r * BC; /* block (r, r) of M */
        for (int i = 1; i < BC; i++) {
            float a[BC]; /* -M_i restricted to columns < i */
            for (int j = 0; j < BC; j++) a[j] = j < i ? -Mb[i * C + j] : 0.0f;
            for (int j = 0; j < BC; j++) {
                float s = 0.0f;
                for (int m = 0; m < BC; m++) s += a[m] * Ab[m * C + j];
                Ab[i * C + j] = a[j] + s;
            }
        }
        for (int i = 0; i < BC; i++) Ab[i * C + i] = 1.0f;
    }
    /* Off-diagonal blocks, nearest the diagonal first (each reads the ones closer to it). */
    for (int dist = 1; dist < nb; dist++)
        for (int r = dist; r < nb; r++) {
            int c = r - dist;
            const float *Arr = A + (size_t)r * BC * C + r * BC;
            float *Arc = A + (size_t)r * BC * C + c * BC;
            if (dist == 1) {
                /* -(A_rr M_rc) A_cc */
                block_mm_tf32(b->P, Arr, C, M + (size_t)r * BC * C + c * BC, C);
                block_mm_tf32(b->Q, b->P, BC, A + (size_t)c * BC * C + c * BC, C);
            } else {
                /* -A_rr (sum_m M_rm A_mc) */
                memset(b->R, 0, BC * BC * sizeof *b->R);
                for (int m = c; m < r; m++) {
                    block_mm_tf32(b->P, M + (size_t)r * BC * C + m * BC, C,
                                  A + (size_t)m * BC * C + c * BC, C);
                    for (int i = 0; i < BC * BC; i++) b->R[i] += b->P[i];
                }
                block_mm_tf32(b->Q, Arr, C, b->R, BC);
            }
            for (int i = 0; i < BC; i++)
                for (int j = 0; j < BC; j++) Arc[i * C + j] = -b->Q[i * BC + j];
        }
}

/* One chunk of n tokens, one head; strides as delta_chunk_head in delta_rule.c. */
static void chunk_head_tf32(const mixer_cfg *c, int n, float *S, const float *q, const float *k,
                            const float *v, const float *g, const float *beta, float *o,
                            tf32_buf *b) {
    int H = c->H, dk = c->dk, dv = c->dv, C = c->chunk;
    size_t qs = (size_t)H * dk, vs = (size_t)H * dv;
    float *G = b->G, *M = b->M, *A = b->A, *W = b->W, *D = b->D;
#define BETA(i) (beta ? beta[(size_t)(i)*H] : 1.0f)

    for (int i = 0; i < n; i++) G[i] = (i ? G[i - 1] : 0.0f) + (g ? g[(size_t)i * H] : 0.0f);

    /* M: (K K^T) with TF32 operands, then the decay, then beta on the rows; zero-padded to C */
    memset(M, 0, (size_t)C * C * sizeof *M);
    for (int i = 0; i < n; i++)
        for (int j = 0; j < i; j++)
            M[i * C + j] = tf32_dot(k + i * qs, k + j * qs, dk) * expf(G[i] - G[j]) * BETA(i);
    solve_blocks(C, (n + BC - 1) / BC, M, A, b);

    /* W = A (K beta exp(G)) in TF32; U = A (V beta) exact (fla: allow_tf32=False) */
    for (int i = 0; i < n; i++) {
        float *Wi = W + (size_t)i * dk, *Ui = D + (size_t)i * dv;
        memset(Wi, 0, (size_t)dk * sizeof *Wi);
        memset(Ui, 0, (size_t)dv * sizeof *Ui);
        for (int j = 0; j <= i; j++) {
            float a = A[i * C + j], ta = tf32(a), bj = BETA(j), gj = expf(G[j]);
            const float *kj = k + j * qs, *vj = v + j * vs;
            for (int d = 0; d < dk; d++) Wi[d] += ta * tf32(kj[d] * bj * gj);
            for (int d = 0; d < dv; d++) Ui[d] += a * (vj[d] * bj);
        }
    }

    /* v_new = U - W S (TF32), from the state entering the chunk */
    for (int i = 0; i < n; i++) {
        float *Di = D + (size_t)i * dv;
        for (int col = 0; col < dv; col++) {
            float s = 0.0f;
            for (int d = 0; d < dk; d++)
                s += tf32(W[(size_t)i * dk + d]) * tf32(S[(size_t)d * dv + col]);
            Di[col] -= s;
        }
    }

    /* o_i = scale exp(G_i) (q_i S) + scale sum_{j<=i} [(q_i.k_j) exp(G_i - G_j)] v_new_j */
    for (int i = 0; i < n; i++) {
        const float *qi = q + i * qs;
        float *oi = o + i * vs;
        float gi = expf(G[i]);
        for (int col = 0; col < dv; col++) {
            float s = 0.0f;
            for (int d = 0; d < dk; d++) s += tf32(qi[d]) * tf32(S[(size_t)d * dv + col]);
            oi[col] = s * gi;
        }
        float a[64]; /* [n] the masked, decayed Q K^T row; C <= 64 */
        for (int j = 0; j <= i; j++) a[j] = tf32(tf32_dot(qi, k + j * qs, dk) * expf(G[i] - G[j]));
        for (int col = 0; col < dv; col++) {
            float s = 0.0f;
            for (int j = 0; j <= i; j++) s += a[j] * tf32(D[(size_t)j * dv + col]);
            oi[col] = oi[col] * c->scale + s * c->scale;
        }
    }

    /* S <- exp(G_last) S + K^T (v_new exp(G_last - G)), TF32 operands */
    float gl = expf(G[n - 1]), *E = b->E;
    for (int j = 0; j < n; j++) E[j] = expf(G[n - 1] - G[j]);
    for (int d = 0; d < dk; d++) {
        float *Sd = S + (size_t)d * dv;
        for (int col = 0; col < dv; col++) {
            float s = 0.0f;
            for (int j = 0; j < n; j++)
                s += tf32(k[j * qs + d]) * tf32(D[(size_t)j * dv + col] * E[j]);
            Sd[col] = Sd[col] * gl + s;
        }
    }
#undef BETA
}

int delta_chunk_forward_tf32(const mixer_cfg *c, float *state, int T, const float *q,
                             const float *k, const float *v, const float *g, const float *beta,
                             float *o) {
    int H = c->H, dk = c->dk, dv = c->dv, C = c->chunk;
    size_t C2 = (size_t)C * C;
    float *buf = malloc((2 * (size_t)C + 2 * C2 + (size_t)C * dk + (size_t)C * dv + 3 * BC * BC) *
                        sizeof *buf);
    if (!buf) return -1;
    tf32_buf b;
    b.G = buf, b.E = b.G + C, b.M = b.E + C, b.A = b.M + C2, b.W = b.A + C2,
    b.D = b.W + (size_t)C * dk;
    b.P = b.D + (size_t)C * dv, b.Q = b.P + BC * BC, b.R = b.Q + BC * BC;
    for (int h = 0; h < H; h++) {
        float *S = state + (size_t)h * dk * dv; /* [dk, dv] */
        for (int t0 = 0; t0 < T; t0 += C) {
            int n = T - t0 < C ? T - t0 : C;
            size_t tk = ((size_t)t0 * H + h) * dk, tv = ((size_t)t0 * H + h) * dv;
            size_t ts = (size_t)t0 * H + h;
            chunk_head_tf32(c, n, S, q + tk, k + tk, v + tv, g ? g + ts : NULL,
                            beta ? beta + ts : NULL, o + tv, &b);
        }
    }
    free(buf);
    return 0;
}
