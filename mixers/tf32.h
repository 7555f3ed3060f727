/* tf32.h: the opt-in arithmetic of fla's GPU kernels, `arith=fp32|tf32` (mixer_cfg.arith).
 *
 * fla runs its chunked delta-rule kernels (Triton tl.dot) and the einsums of its naive
 * references (cuBLAS with TF32 allowed) on tensor cores. On Hopper a float32 product there reads
 * each operand as TF32: the low 13 of the 23 mantissa bits are dropped (10 bits kept), and the
 * products are summed in float32. arith=tf32 makes a core round the operands of exactly those
 * products the same way, so that its outputs land on fla's GPU numbers rather than on the exact
 * float32 function (docs/models.md, "fla's GPU arithmetic"). arith=fp32, the default, is the
 * exact float32 arithmetic and is what every other path of this lab computes.
 *
 * Which products: mixers/delta_tf32.c (gdn, deltanet, kaczmarz prefill: fla's chunk kernels) and
 * mixers/attention.c (softmax, parallax: naive_parallax's einsums). Steps of the delta family stay
 * exact, as fla's fused_recurrent kernel is plain float32 arithmetic. */
#ifndef MIXSCOPE_TF32_H
#define MIXSCOPE_TF32_H

#include <stdint.h>
#include <string.h>

#include "mixer.h"

enum mixer_arith {
    MIXER_ARITH_FP32 = 0, /* exact float32 (default) */
    MIXER_ARITH_TF32 = 1, /* TF32 operands where fla's GPU path has them */
};

/* x as a tensor core reads it for a TF32 product: the low 13 mantissa bits cleared, i.e.
 * truncation toward zero (round-to-nearest matches fla's outputs 500x worse; docs/models.md).
 * Finite values stay finite. */
static inline float tf32(float x) {
    uint32_t u;
    memcpy(&u, &x, sizeof u);
    u &= 0xffffe000u;
    memcpy(&x, &u, sizeof u);
    return x;
}

/* sum_i tf32(a_i) tf32(b_i), summed in float32 in index order. */
static inline float tf32_dot(const float *a, const float *b, int n) {
    float s = 0.0f;
    for (int i = 0; i < n; i++) s += tf32(a[i]) * tf32(b[i]);
    return s;
}

/* Reads `arith=fp32|tf32` into c->arith (absent: fp32). */
static inline int arith_configure(mixer_cfg *c, opts *o, err *e) {
    const char *a = o ? opts_str(o, "arith", "fp32") : "fp32";
    if (strcmp(a, "fp32") == 0)
        c->arith = MIXER_ARITH_FP32;
    else if (strcmp(a, "tf32") == 0)
        c->arith = MIXER_ARITH_TF32;
    else
        return err_set(e, "arith=%s: must be fp32 or tf32", a);
    return 0;
}

/* The chunked form of the delta rule as fla's Triton chunk kernels compute it with TF32 products
 * (mixers/delta_tf32.c): the same arguments as delta_chunk_forward (mixers/delta_rule.h). Returns
 * 0, or -1 when its scratch could not be allocated (then nothing has been written). */
int delta_chunk_forward_tf32(const mixer_cfg *c, float *state, int T, const float *q,
                             const float *k, const float *v, const float *g, const float *beta,
                             float *o);

#endif
