// delta_state_wgmma.cuh: delta_tc.cu's way into the sm_90a state pass of delta_state_wgmma.cu.
#pragma once

#include <cuda_runtime.h>

#include "../core/err.h"
#include "delta_tc_shared.cuh"

// value rows of a wgmma state-pass block: its consumer warpgroup's 64 (the output pass waits on
// dv / DSW_BV slices of a head then)
#define DSW_BV 64

// 1 when the wgmma state pass can run here (an sm_90 GPU, a build with the sm_90a image, and
// MIXSCOPE_DELTA_WGMMA not 0); asked once per process.
int delta_state_wgmma_usable(void);
// The state pass of delta_tc.cu for dk = 128 and dv in {64, 128} (st: ring stages, 2, 3 or 4;
// nwg: warpgroups, 3 with the storer or 2): grid (dv / DSW_BV, N, segments); reads W, U, GK of the
// scratch and k, writes Sc, Dt and the done flags, and carries state [N][128][dv] (fp32) from the
// first chunk to past the last.
// The fused form (f not NULL; delta_state_wgmma.cu says what it is): reads AU, GC and GK of the
// scratch and q, k, v, writes o [B][T][H][dv] (fp32) itself; there is no output pass.
typedef struct {
    float scale;
    const bf16_t *q, *v;
    float *o;
} dsw_fused;
int delta_state_wgmma_launch(int T, int H, int N, int dv, int nchunks, int st, int nwg,
                             const bf16_t *k, tc_scratch sc, float *state, const dsw_fused *f,
                             cudaStream_t stream, err *e);
