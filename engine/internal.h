/* internal.h: what the files of engine/ share (not part of its interface). */
#ifndef MIXSCOPE_ENGINE_INTERNAL_H
#define MIXSCOPE_ENGINE_INTERNAL_H

#include "../mixers/mixer.h"
#include "engine.h"

/* A fresh trace for a new schema (new model, lanes, stream or selection). */
void engine_trace_restart(engine *g);
/* The progress / interrupt callback; non-zero: stop. */
int engine_tick(engine *g, long done, long total);

/* A core's probe under the selection (probes.c): engine_probe_wanted, less the per-lane probes
 * of more than ENGINE_DEFAULT_LANES lanes a layer under the default. */
#define ENGINE_DEFAULT_LANES 65536
int engine_core_probe_wanted(const engine *g, const mixer_cfg *c, const probe_def *p);

/* ---- recall.c: the keys, values and readback picture of each layer or lane ---- */
/* Before layer li's core step at position pos, with the state before it. */
void engine_recall_before(engine *g, int li, const mixer_cfg *c, const mixer_ops *mx,
                          const mixer_tok *in, const float *state, int pos);
/* After it: records "k", "v" and, when recall, the readback row of token pos. */
int engine_record_kv_recall(engine *g, int layers, int li, const mixer_ops *mx, const mixer_cfg *c,
                            const mixer_tok *in, const float *state, int pos, int recall, err *e);
/* 1 when the mixer's readback picture is updated incrementally (about a step's cost). */
int engine_recall_incremental(const mixer_ops *mx);
/* 1 when the readback picture is recorded at position pos under the selection: by default for
 * the first ENGINE_RECALL_MAX_TOKENS tokens unless it is incremental, with `all` or by name
 * always. */
int engine_recall_at(const engine *g, int pos);
/* Forget the readback history (position 0), or drop the trackers (new schema). */
void engine_recall_reset(engine *g);
void engine_recall_free(engine *g);

/* ---- raw_run.c ---- */
int engine_raw_advance(engine *g, int n, err *e);
int engine_raw_reset(engine *g, err *e);

/* ---- gpu.c: the GPU-resident model stepper ---- */
/* 1 when the model steps resident on the GPU (built on first use; g->gm_why says why not). */
int engine_gpu_usable(engine *g);
/* n tokens on the GPU from the model's position, recording the selection. */
int engine_gpu_advance(engine *g, int n, err *e);
void engine_gpu_drop(engine *g);

#endif
