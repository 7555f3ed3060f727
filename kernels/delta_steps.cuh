// delta_steps.cuh: the delta rule over n tokens in one launch, each block keeping its slice of a
// head's state in registers from the first token to the last, and the delta family's probes from
// its per-column sums (mixers/delta_rule.c's definitions). Shared by the GPU-resident model
// stepper (gpu_model.cu: q, k, v inside the layer's projected row) and the raw lanes
// (gpu_lanes.cu: q, k, v as the user gave them). Implemented in delta_steps.cu.
#ifndef MIXSCOPE_DELTA_STEPS_CUH
#define MIXSCOPE_DELTA_STEPS_CUH

#include <cuda_runtime.h>
#include <stddef.h>

#include <type_traits>

#include "gpu.h"
#include "gpu_model.h" // GM_MAX_PROBES

#define GM_RG   8 // row groups of the core kernel (block 32 x GM_RG)
#define GM_NACC 8 // per-column probe sums
enum { AC_E2, AC_V2, AC_PRED2, AC_R2, AC_RC2, AC_O2, AC_SNEW2, AC_SOLD2 };

// Where the probes go: probe p (GDP index map[p], -1: NaN) of value head hv at token t is written
// to probes[t tok_stride + layer_off + off[p] + hv head_stride] (the model: the CPU layout, heads
// contiguous, head_stride 1; the lanes: GDP layout, [H][GDP_COUNT], head_stride GDP_COUNT).
struct gm_probe_map {
    int n, layer_off, tok_stride, head_stride;
    int map[GM_MAX_PROBES], off[GM_MAX_PROBES];
};

// n tokens of Hv value heads over H key heads (rep = Hv / H). Token t's query and key of key head
// h at Q / K + t ldqk + h dk, its value of head hv at V + t ldv + hv dv; G, Beff [n, Hv] (the log
// decay, decay = 0: none; the effective write strength); K2 [n, H] |k|^2 (read with probes);
// state [Hv, dk, dv] in place; O + t ldo + hv dv the output (times scale). With probes the
// per-column sums go to part [n, Hv, nblk, GM_NACC] (nblk = ceil(dv / 32) column slices); with
// store the state after token t to Sout + t sf.
struct gm_core_args {
    int n, H, Hv, rep, dk, dv, nblk, decay;
    float scale;
    const float *Q, *K, *V;
    size_t ldqk, ldv, ldo;
    const float *G, *Beff, *K2;
    float *state, *O;
    double *part;
    float *Sout;
    size_t sf;
};

// The probes from part: Bin [n, Hv] the write strength as given (eta for Kaczmarz), Q2 [n, H].
struct gm_fin_args {
    int H, Hv, rep, nblk, decay;
    const float *G, *Bin, *Beff, *Q2, *K2;
    const double *part;
    float *probes;
};

// Calls f(MAXR, PROBES, STORE) with std::integral_constant arguments naming the template
// instance of a core kernel that fits dk (8, 16 or 32 rows a thread: dk <= 64, 128, 256) and the
// flags; the delta rule and the decayed linear attention (ld_steps.cu) launch through it.
template <typename F> static inline void gm_core_dispatch(int dk, bool probes, bool store, F &&f) {
    auto flags = [&](auto maxr) {
        if (probes && store)
            f(maxr, std::true_type{}, std::true_type{});
        else if (probes)
            f(maxr, std::true_type{}, std::false_type{});
        else if (store)
            f(maxr, std::false_type{}, std::true_type{});
        else
            f(maxr, std::false_type{}, std::false_type{});
    };
    if (dk <= 8 * GM_RG)
        flags(std::integral_constant<int, 8>{});
    else if (dk <= 16 * GM_RG)
        flags(std::integral_constant<int, 16>{});
    else
        flags(std::integral_constant<int, 32>{});
}

// One launch of the recurrence (dk <= 256).
int gm_core_run(const gm_core_args &a, bool probes, bool store, cudaStream_t st, err *e);
// One launch: every token's probes.
int gm_probe_fin_run(const gm_fin_args &a, const gm_probe_map &pm, int n, cudaStream_t st, err *e);
// The raw lanes' prep, one launch: Q2, K2 [n, H] the squared norms of q and k (rows H dk wide),
// Beff [n, H] = kacz ? beta / (|k|^2 + eps) : beta.
int gm_lane_prep_run(int n, int H, int dk, int kacz, float eps, const float *q, const float *k,
                     const float *beta, float *Q2, float *K2, float *Beff, cudaStream_t st, err *e);

#endif
