/* linear_decay.h: the pieces shared by the decayed linear-attention cores (gla, mamba2).
 *
 * Both cores keep one key-major state S [dk, dv] per head and, per token, decay it row by row, add
 * the rank-1 write k v^T and read after the write (spec/delta-family.md §4, §5):
 *     S_t = diag(alpha_t) S_{t-1} + k_t v_t^T,     o_t = scale * S_t^T q_t.
 * GLA has one decay per key channel (alpha_t [dk]); Mamba2 / SimpleGLA one per head, which is the
 * same step with the log-decay broadcast over the rows (stride 0). The chunked forms differ (GLA
 * needs sub-chunk reference rows, the scalar decay does not), so each mixer keeps its own prefill.
 */
#ifndef MIXSCOPE_LINEAR_DECAY_H
#define MIXSCOPE_LINEAR_DECAY_H

#include <stddef.h>

#include "mixer.h"

#ifdef __cplusplus
extern "C" {
#ifdef __cplusplus
}
#endif

#endif

/* The probes every decayed linear-attention core shares, for one head and one token. */
typedef struct ld_probes {
    float q_norm;         /* ||q|| as given (before the scale) */
    float k_norm;         /* ||k|| */
    float v_norm;         /* ||v|| */
    float write_norm;     /* ||k v^T||_F = ||k|| ||v|| */
    float e_norm;         /* ||v - S~^T k||, S~ the decayed state before the write */
    float e_rel;          /* e_norm / ||v|| (0 when v = 0) */
    float forget_removed; /* ||S_{t-1} - S~||_F = sqrt(sum_d (1 - alpha_d)^2 ||S_{t-1}[d,:]||^2) */
    float state_norm;     /* ||S_t||_F after the write */
    float o_norm;         /* ||o_t|| */
} ld_probes;

/* Reads chunk=16|32|64 and scale= (default: what mixer_configure set, 1/sqrt(dk)) into c. */
int ld_configure(mixer_cfg *c, opts *o, err *e);

/* Floats of state: one [dk, dv] per head. */
size_t ld_state_floats(const mixer_cfg *c);
/* Zeros. */
void ld_state_init(const mixer_cfg *c, float *state);
/* One part: "hT" (initial state "h0"), [H, dk, dv] key-major as fla. */
int ld_state_parts(const mixer_cfg *c, state_part *parts);

/* The shared probes' schema, in ld_probes order; a mixer lists its own probes first, then these. */
#define LD_NPROBES 9
#define LD_PROBE_DEFS                                                                              \
    {"q_norm", W_1, "||q|| as given, before the query scale"}, {"k_norm", W_1, "||k||"},           \
        {"v_norm", W_1, "||v||"},                                                                  \
        {"write_norm", W_1, "||k v^T||_F = ||k|| ||v||, the size of the write"},                   \
        {"e_norm", W_1,                                                                            \
         "||v - S~^T k||: what the decayed state mis-retrieves for k before the write"},           \
        {"e_rel", W_1, "e_norm / ||v|| (0 when v = 0)"},                                           \
        {"forget_removed", W_1, "||S_{t-1} - S~||_F: what the decay removes"},                     \
        {"state_norm", W_1, "||S_t||_F after the write"}, {                                        \
        "o_norm", W_1, "||o_t||, the readout"                                                      \
    }

/* Writes p into probes [nprobes, H] as probes first .. first + LD_NPROBES - 1 of head h. */
void ld_probes_store(const ld_probes *p, int first, int H, int h, float *probes);

float ld_dot(const float *a, const float *b, int n);
float ld_norm(const float *a, int n);

/* One head, one token. S [dk, dv] is updated in place with alpha = exp(g); the log-decay g [dk] is
 * read with stride gstride (0: one scalar for all rows); q, k [dk]; v, o [dv]. p: NULL, or filled
 * with the shared probes. */
void ld_step_head(int dk, int dv, float *S, const float *q, const float *k, const float *v,
                  const float *g, int gstride, float scale, float *o, ld_probes *p);

/* Copies head h of rows [t0, t0 + L) of a head-major sequence src [T, H, w] into dst [L, w]. */
void ld_gather_head(float *dst, const float *src, int t0, int L, int H, int w, int h);

/* o [dv] += scale * S^T x, with S [dk, dv] and x [dk]. */
void ld_readout_add(int dk, int dv, const float *S, const float *x, float scale, float *o);

#ifdef __cplusplus
}
#endif

#endif
