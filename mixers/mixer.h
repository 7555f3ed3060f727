/* mixer.h: the one interface every sequence mixer implements.
 *
 * A mixer is a pure function of its config, its state and a stream of per-token inputs. It owns no
 * memory: the caller allocates the state (mixer_state_floats) and the outputs. Every mixer has
 *   - step:    one token -> output [H, dv], the state updated, and every probe for that token;
 *   - prefill: the chunked / scan / tiled form over T tokens, which must equal repeated step;
 *   - a probe schema (name, width, meaning) that views and exports read through the trace.
 * The CUDA backend (kernels/) implements the same contract and is tested against these functions.
 *
 * Layout: fla's, batch 1. Per token the inputs are head-major: q [H, dk], v [H, dv], g [H].
 * A sequence stacks tokens: q [T, H, dk]. The state is a flat float array whose parts the mixer
 * describes with state_parts (e.g. GDN: "hT" [H, dk, dv], key-major as fla's kernels). */
#ifndef MIXSCOPE_MIXER_H
#define MIXSCOPE_MIXER_H

#include <stddef.h>
#include <stdint.h>

#include "../core/err.h"
#include "../core/opts.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Which per-token input a mixer reads. */
typedef enum mixer_input {
    IN_Q,    /* query            [H, dk] */
    IN_K,    /* key              [H, dk] */
    IN_V,    /* value            [H, dv] */
    IN_R,    /* Parallax probe   [H, dk] */
    IN_G,    /* log-decay        [H]     (gdn, mamba2: g <= 0) */
    IN_GK,   /* per-key log-decay [H, dk] (gla) */
    IN_BETA, /* write strength   [H]     (gdn, deltanet, kata delta; kaczmarz reads eta here) */
    IN_LV,   /* value precision  [H, dv] (kalman lambda_v) */
    IN_COUNT
} mixer_input;

/* Widths of a per-head vector, resolved against a config. */
typedef enum mixer_width {
    W_1,     /* one scalar per head */
    W_DK,    /* dk values per head */
    W_DV,    /* dv values per head */
    W_LANES, /* dv * dk values per head (Kalman's per-lane quantities, row-major [dv][dk]) */
} mixer_width;

typedef struct input_def {
    mixer_input which;
    const char *name; /* the tensor name `replay` reads ("q", "eta", "lambda_v", ...) */
    mixer_width width;
    int required; /* 0: optional, filled with the mixer's default when absent */
} input_def;

/* A static (not per-token) parameter, e.g. Kalman's discrete decay a [dv, dk]. */
typedef struct param_def {
    const char *name;
    mixer_width width; /* per head; the tensor is [dv, dk] for W_LANES when H = 1 */
} param_def;

typedef struct probe_def {
    const char *name;    /* "beta", "rho", "e_norm": `replay` writes it as probe.<name> */
    mixer_width width;   /* floats per head per token */
    const char *meaning; /* one line, shown by `help probes` and in docs/probes.md */
} probe_def;

/* A named part of the flat state: offset (floats) and shape. `init_name` is the tensor `replay`
 * reads as the initial state ("h0"), `name` the one it writes ("hT"). */
typedef struct state_part {
    const char *name, *init_name;
    size_t offset;
    int ndim;
    int64_t shape[4];
} state_part;

#define MIXER_MAX_PARAMS      4
#define MIXER_MAX_STATE_PARTS 4

/* The KV capacity a growing core (softmax, parallax) starts with, in tokens: the mixers', the
 * models' and the engine's default (a longer run grows it). */
#define MIXER_DEFAULT_MAX_T 4096

typedef struct mixer_cfg {
    int H;       /* heads */
    int dk;      /* key / query width per head (Kalman: S, the state size per channel) */
    int dv;      /* value width per head (Kalman: M, the channels) */
    float scale; /* query scale; set by configure (default 1/sqrt(dk) unless the mixer says) */
    float eps;   /* kaczmarz: beta = eta / (|k|^2 + eps) */
    int chunk;   /* prefill chunk size (16, 32 or 64) */
    int max_t;   /* capacity of growing state (KV caches): tokens (MIXER_DEFAULT_MAX_T) */
    int variant; /* mixer-specific variant (kata: m1, mg, sigma, delta, orthant, lorentz, linear) */
    int groups;  /* kata g */
    int rope;    /* softmax / parallax: apply RoPE to q, k (and r) inside the core */
    float rope_theta;
    int window; /* softmax / parallax sliding window, 0 = off */
    int arith;  /* 0 exact float32; 1 TF32 products where fla's GPU kernels have them (tf32.h) */
    const float *params[MIXER_MAX_PARAMS]; /* static parameters, borrowed, per param_def */
} mixer_cfg;

/* One token's inputs, all heads; pointers the mixer does not read may be NULL. */
typedef struct mixer_tok {
    const float *in[IN_COUNT];
} mixer_tok;

/* T tokens: each in[i] has a leading [T] dimension. */
typedef struct mixer_seq {
    int T;
    const float *in[IN_COUNT];
} mixer_seq;

typedef struct mixer_ops {
    const char *name;    /* command name: gdn, deltanet, kaczmarz, gla, mamba2, softmax, ... */
    const char *summary; /* one line for help */
    const char *options; /* "chunk=16|32|64 eps=1e-6 ..." for help and completion */
    const input_def *inputs;
    int ninputs;
    const param_def *params;
    int nparams;
    const probe_def *probes;
    int nprobes;

    /* Reads the mixer's own key=value options into c (H, dk, dv are already set) and validates
     * the whole config. Sets defaults (scale, chunk, eps). */
    int (*configure)(mixer_cfg *c, opts *o, err *e);
    /* Floats of state for this config. */
    size_t (*state_floats)(const mixer_cfg *c);
    /* The state before any token (zeros for most; Kalman's prior lambda = 1). */
    void (*state_init)(const mixer_cfg *c, float *state);
    /* Describes the exportable parts of the state; returns their count. */
    int (*state_parts)(const mixer_cfg *c, state_part *parts);
    /* One token at absolute position pos (0 = first token since state_init). o: [H, dv].
     * probes: NULL, or mixer_probe_floats() floats laid out probe by probe, each [H, width]. */
    void (*step)(const mixer_cfg *c, float *state, const mixer_tok *x, int pos, float *o,
                 float *probes);
    /* T tokens from position pos0 with the parallel form; o: [T, H, dv]. Must equal T steps. */
    void (*prefill)(const mixer_cfg *c, float *state, const mixer_seq *x, int pos0, float *o);

    /* Optional (NULL: none). When the mixer's step changes its key-major state part "hT"
     * [H, dk, dv] by a scalar decay and a rank-one write per head,
     *     S_t = alpha_t S_{t-1} + kk_t u_t^T,
     * fills alpha [H], kk [H, dk] and u [H, dv] for the token x at pos, given the state BEFORE the
     * step (the whole flat state, as step takes it; e.g. the delta rule's u = beta (v - alpha
     * S_{t-1}^T k) reads it), and returns 0; -1 when this token or config has no such form.
     * Computed as step computes them, so they match its write to float rounding. Does not change
     * the state and never allocates. viz/recall.h uses it to update readbacks incrementally; a
     * copy of the ops whose step is replaced (a wrapper) must drop or replace it too. */
    int (*write_form)(const mixer_cfg *c, const float *state, const mixer_tok *x, int pos,
                      float *alpha, float *kk, float *u);
} mixer_ops;

/* Registry (mixers/registry.c). */
extern const mixer_ops *const mixer_all[];
extern const int mixer_count;
const mixer_ops *mixer_find(const char *name);

/* Fills a config: H, dk, dv from the arguments, the rest from the mixer's options. */
int mixer_configure(const mixer_ops *m, mixer_cfg *c, int H, int dk, int dv, opts *o, err *e);

/* Floats per head of a width. */
int mixer_width_floats(const mixer_cfg *c, mixer_width w);
/* Total probe floats per token, and the offset of probe i in that buffer. */
size_t mixer_probe_floats(const mixer_ops *m, const mixer_cfg *c);
size_t mixer_probe_offset(const mixer_ops *m, const mixer_cfg *c, int i);
/* The index of a probe by name, or -1. */
int mixer_probe_index(const mixer_ops *m, const char *name);

/* Token t of a sequence. */
mixer_tok mixer_seq_at(const mixer_cfg *c, const mixer_seq *s, int t);
/* Floats per head of an input. */
int mixer_input_floats(const mixer_cfg *c, mixer_input which);

/* step, with the heads split over threads where the core's heads are independent and its state
 * head-major (mixers/step_par.c): the same result as m->step, bit for bit. */
void mixer_step_par(const mixer_ops *m, const mixer_cfg *c, float *state, const mixer_tok *x,
                    int pos, float *o, float *probes);

/* Runs step over the whole sequence (o: [T, H, dv]; probes: NULL or [T, probe_floats]). */
void mixer_run_steps(const mixer_ops *m, const mixer_cfg *c, float *state, const mixer_seq *s,
                     int pos0, float *o, float *probes);

#ifdef __cplusplus
}
#endif

#endif
