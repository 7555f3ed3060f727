// ld_steps.cuh: the decayed linear-attention recurrence (mixers/linear_decay.h: gla, one log-decay
// per key channel; mamba2, one per head) over n tokens in one launch, each block keeping its slice
// of a head's state in registers from the first token to the last, and the cores' probes from its
// per-column sums. The twin of delta_steps.cuh for the GPU-resident model stepper (gpu_model.cu).
// Implemented in ld_steps.cu.
#ifndef MIXSCOPE_LD_STEPS_CUH
#define MIXSCOPE_LD_STEPS_CUH

#include <cuda_runtime.h>
#include <stddef.h>

#include "delta_steps.cuh" // gm_probe_map, GM_RG
#include "gpu_model.h"     // LDP_*

#define LD_NACC 5 // per-column probe sums
enum { LA_E2, LA_V2, LA_O2, LA_SNEW2, LA_FORGET2 };

// n tokens of H heads. Token t's query and key of head h at Q / K + t ldqk + h dk, its value at
// V + t ldv + h dv, its log-decay at G + t ldg + h dk + i (row_decay: one per key channel i) or
// G + t ldg + h (one per head); state [H, dk, dv] in place; O + t ldo + h dv the output
// S_t^T (scale q). With probes the per-column sums go to part [n, H, nblk, LD_NACC]; with store
// the state after token t to Sout + t sf.
struct ld_core_args {
    int n, H, dk, dv, nblk, row_decay;
    float scale;
    const float *Q, *K, *V, *G;
    size_t ldqk, ldv, ldg, ldo;
    float *state, *O;
    double *part;
    float *Sout;
    size_t sf;
};

// One launch of the recurrence (dk <= 256).
int ld_core_run(const ld_core_args &a, bool probes, bool store, cudaStream_t st, err *e);
// One launch: every token's probes from part and the inputs (a.Q, a.K, a.G as in the core's
// arguments), into probes in pm's layout.
int ld_probe_fin_run(const ld_core_args &a, const gm_probe_map &pm, float *probes, cudaStream_t st,
                     err *e);

#endif
