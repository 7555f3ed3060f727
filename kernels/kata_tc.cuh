// kata_tc.cuh: KATA's chunked form on tensor cores (kata_tc.cu), called by kata.cu's
// gpu_kata_chunked for bf16 inputs.
#pragma once

#include <stddef.h>

#include "../core/err.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Whether the tensor-core path takes T tokens of this shape: the PSD concat maps (m1, mg) with
 * dk in {64, 128}, groups of a multiple of 16 entries, dv in {64, 128}, scale > 0, T >= 64; and
 * MIXSCOPE_KATA_TC is not "0". */
int kata_tc_supported(int T, int dk, int dv, int variant, int groups, float scale);
/* Its scratch (the chunks' exclusive prefixes in bf16), 0 when it does not take the shape. */
size_t kata_tc_scratch_bytes(int B, int T, int H, int dk, int dv, int variant, int groups);
/* o [B, T, H, dv] (fp32) over bf16 q, k [B, T, H, dk] and v; the state (kata.h's layout; NULL:
 * zero, not kept) carried; den [B, T, H] and sc (kata_tc_scratch_bytes) are scratch. */
int kata_tc_chunked(int B, int T, int H, int dk, int dv, int variant, int groups, float scale,
                    float eps, const void *q, const void *k, const void *v, float *state, float *o,
                    float *den, void *sc, void *stream, err *e);

#ifdef __cplusplus
}
#endif
