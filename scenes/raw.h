/* raw.h: raw-mixer mode. One stream (scenes/stream.h) through one or more mixer cores side by
 * side, no model: each core is a "lane", recorded in the probe trace as layer 0, 1, ... so every
 * view and `show` compare the lanes on the same tokens (e.g. gdn beside kaczmarz).
 *
 * How a token becomes a core's inputs (raw_lane_inputs), per input the mixer declares:
 *   q          the token's key (read with the key that wrote: a memory read S^T k)
 *   k, v       the key and value on writes. On queries the delta-rule family (gdn, deltanet,
 *              kaczmarz) gets the asked key and the right answer with a zero write strength, so
 *              its e_norm / e_rel probes are the recall error; every other core gets k = v = 0,
 *              which writes nothing into a linear state (a KV cache still appends the zero key).
 *   g, gk      log(decay) on writes, 0 on queries (no forgetting while reading)
 *   beta       beta= (gdn, deltanet, kata delta) or eta= (kaczmarz) on writes; 0 on queries
 *   lambda_v   lambda_v= (Kalman observation precision)
 *   r          rscale= times a random unit direction (Parallax's probe)
 * Lane options beyond the mixer's own: decay= beta= eta= lambda_v= a= p= rscale= (see
 * RAW_GATE_KEYS). Unless scale= is given, linear memories read with scale 1 (S^T k, so a stored
 * value reads back exactly) and softmax / parallax with scale dk (unit keys: the match scores dk
 * against cross terms of spread sqrt(dk), a softmax sharp enough to retrieve). */
#ifndef MIXSCOPE_RAW_H
#define MIXSCOPE_RAW_H

#include "../core/err.h"
#include "../mixers/mixer.h"
#include "stream.h"

#define RAW_MAX_LANES        12
#define RAW_MAX_STATE_FLOATS (1 << 26) /* per lane: 256 MiB (KATA M1 at 16 heads of 128 takes 68) */
#define RAW_GATE_KEYS        "decay beta eta lambda_v a p rscale"

typedef struct raw_gates {
    double decay; /* alpha in (0, 1] per write token: g = log(decay) (gdn, kaczmarz, gla, mamba2) */
    double beta;  /* write strength (gdn, deltanet, kata delta) */
    double eta;   /* Kaczmarz relaxation: beta = eta / (|k|^2 + eps) */
    double lambda_v; /* Kalman observation precision */
    double a, p;     /* Kalman per-lane decay and process noise (< 0: the mixer's defaults) */
    double rscale;   /* Parallax probe norm */
} raw_gates;

typedef struct raw_lane {
    char label[64];  /* the lane as typed: "kaczmarz" or "kata:variant=m2" */
    char words[320]; /* its option words (shared then own, space separated) */
    const mixer_ops *m;
    mixer_cfg c;
    raw_gates g;
    int delta;     /* delta-rule family: queries carry the key and answer with beta = 0 */
    int keymajor;  /* the state has an "hT" part [H, dk, dv] (readback can be measured) */
    float *state;  /* [state_floats] */
    float *probes; /* [probe_floats] */
    float *o;      /* [H, dv] the last token's output */
    float *kal[2]; /* Kalman a, p [H, dv, dk] when a= / p= are given, else NULL */
} raw_lane;

/* Builds a lane: `spec` is NAME or NAME:key=value,key=value; `shared` the option words every lane
 * gets (its own win). max_t: KV capacity for growing cores; chunk: default prefill chunk (0: the
 * mixer's). Unknown keys are an error. */
int raw_lane_build(raw_lane *L, const char *spec, const char *shared, int H, int dk, int dv,
                   int max_t, int chunk, err *e);
void raw_lane_free(raw_lane *L);
/* The state before any token. */
void raw_lane_reset(raw_lane *L);

/* Scratch floats raw_lane_inputs needs: IN_COUNT * H * max(dk, dv). */
size_t raw_scratch_floats(int H, int dk, int dv);
/* Token t's inputs for this lane into x (pointers into st or scratch). */
void raw_lane_inputs(const raw_lane *L, const raw_stream *st, int t, float *scratch, mixer_tok *x);
/* Steps token t through the lane (probes computed into L->probes, output into L->o). */
void raw_lane_step(raw_lane *L, const raw_stream *st, int t, float *scratch);
/* For a query token: |o_h - v_h| / |v_h| for head h; NaN for writes. */
float raw_recall_error(const raw_lane *L, const raw_stream *st, int t, int h);

#endif
