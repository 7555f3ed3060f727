// delta_tc.cuh: the tensor-core chunked prefill of the delta family (delta_tc.cu), as delta.cu's
// gpu_delta_prefill and gpu_kaczmarz_prefill call it for bf16 inputs.
#pragma once

#include <stddef.h>

#include "../core/err.h"

extern "C" {
// 1 when the tensor-core path takes these shapes: bf16, chunk 64, dk and dv in {64, 128}.
int delta_tc_supported(int dk, int dv, int chunk, int bf16);
size_t delta_tc_scratch_bytes(int B, int T, int H, int dk, int dv);
// As gpu_delta_prefill (bf16 q, k, v); kacz != 0: k, v are raw and beta is eta (spec §8.5).
int delta_tc_prefill(int B, int T, int H, int dk, int dv, float scale, int kacz, float eps,
                     const void *q, const void *k, const void *v, const float *g, const float *beta,
                     float *state, float *o, void *scratch, void *stream, err *e);
}
