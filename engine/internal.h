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
/* Layer li's state changed outside a step (an edit, a restore): its readbacks are read again. */
void engine_recall_invalidate(engine *g, int li);
void engine_recall_free(engine *g);

/* ---- interv.c: the interventions (interv.h) ---- */
struct model;
/* The model's out_hook: ablations of layer li's head outputs z [width] at token m->pos. */
void engine_iv_out(engine *g, const struct model *m, int li, float *z, int width);
/* The first position after pos with an edit or restore not yet applied (INT_MAX: none). */
int engine_iv_next_pos(const engine *g, int pos);
/* Applies the edits and restores made at pos, in order (those not yet applied in this run). */
int engine_iv_apply_at(engine *g, int pos, err *e);
/* A new run from position 0: nothing is applied yet. */
void engine_iv_rewind(engine *g);
/* The list into the trace's "interventions" snapshot, for the views. */
void engine_iv_publish(engine *g);
/* Drops the list and the snapshots (a new model or new lanes). */
void engine_iv_free(engine *g);

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
