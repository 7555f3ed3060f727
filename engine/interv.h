/* interv.h: interventions on a run's memory, kept in a list that replays.
 *
 *   edit erase  S <- (I - k k^T / |k|^2) S          afterwards k^T S = 0
 *   edit write  S <- S + k (v - S^T k)^T / |k|^2    afterwards S^T k = v
 *       on one head's key-major state part "hT" [dk, dv] (fla's [K, V] layout; the cores gdn,
 *       deltanet, kaczmarz, gla, mamba2), k the key token J gave that core (the trace's "k"), v
 *       the value token I gave it ("v"). Both are exact projections on the matrix memory whatever
 *       the core: in the delta family the erase is the rule's own key removal with beta = 1/|k|^2
 *       and the write its overwrite; in GLA and Mamba2 the edited row then decays as every other.
 *   restore     a snapshot's state (all of it, one layer's or one head's part) put back
 *   ablate      a head's output as it enters the output projection zeroed, or replaced by its
 *               mean over the tokens before, for a range of tokens (model mode)
 *
 * Every intervention is kept with the position it was made at: the state at position p is the
 * state after token p - 1 with every edit and restore made at p applied, in the order they were
 * made. reset applies those at 0; stepping applies those at p as it reaches p (and stops there to
 * do it, whatever the device), so `reset` then `run` gives the same numbers bit for bit. The edits
 * keep copies of their k and v, so they replay without the trace.
 *
 * Snapshots (`snapshot NAME`) copy the complete state of the run at the current position: every
 * layer's (or lane's) recurrent state and KV cache, the short-convolution buffers, the position.
 * They are kept in the session until replaced or the model or lanes change. */
#ifndef MIXSCOPE_INTERV_H
#define MIXSCOPE_INTERV_H

#include <stddef.h>

#include "engine.h"

#define ENGINE_SNAP_NAME 32

typedef enum engine_iv_kind { IV_ERASE, IV_WRITE, IV_RESTORE, IV_ABLATE } engine_iv_kind;

struct engine_snap;

typedef struct engine_iv {
    engine_iv_kind kind;
    int pos;         /* made at this position (applied when the run reaches it) */
    int layer, head; /* head -1: every head (restore, ablate); layer -1: every layer (restore) */
    int key, value;  /* edits: tokens J and I */
    float *k, *v;    /* edits: [dk], [dv], copies */
    struct engine_snap *snap; /* restore: shared with the snapshot list (reference counted) */
    int from, to;             /* ablate: tokens from..to (inclusive) */
    int mean;                 /* ablate: 1 mean, 0 zero */
    int done;                 /* applied in the current run */
} engine_iv;

/* What an edit did to the readbacks of one head. */
typedef struct engine_edit_report {
    double rb_before, rb_after; /* |S^T k| of the edited key */
    double err_before,
        err_after;   /* |S^T k - target| / |target|; target v_J (erase: 0 after) or v_I */
    double coll_max; /* largest |delta S^T k_i| over the other stored keys */
    double coll_rel; /* the same relative to that key's |S^T k_i| before */
    int coll_key;    /* which (-1: none) */
    int nkeys;       /* keys compared */
} engine_edit_report;

/* The list, in order. */
int engine_iv_count(const engine *g);
const engine_iv *engine_iv_at(const engine *g, int i);
/* Drops every intervention (the current state keeps what was applied). */
void engine_iv_clear(engine *g);
/* One line describing an intervention ("erase layer 0 head 1 key 5 at 12"). */
const char *engine_iv_text(const engine_iv *iv, char *buf, size_t n);

/* edit erase (value = -1) or write at the current position, on layer (lane) `layer`, head `head`,
 * with the key of token `key` and the value of token `value` (both already run). */
int engine_edit(engine *g, int layer, int head, int key, int value, engine_edit_report *rep,
                err *e);

/* snapshot NAME: the complete state now (replaces one of the same name). */
int engine_snapshot(engine *g, const char *name, err *e);
/* restore NAME [layer= head=] (-1: all) at the current position, which must be the snapshot's. */
int engine_restore(engine *g, const char *name, int layer, int head, err *e);
/* The snapshots: count, name and position of the i-th. */
int engine_snap_count(const engine *g);
const char *engine_snap_info(const engine *g, int i, int *pos);

/* ablate layer= [head=] [from=] [to=] [mode=]: from -1 the current position, to -1 the last. */
int engine_ablate(engine *g, int layer, int head, int from, int to, int mean, err *e);
/* 1 when an ablation is in the list (model_step on the CPU applies them). */
int engine_iv_ablating(const engine *g);

/* lens: the readback S^T k_J of layer li's memory now, head h (-1: every head), for the key of
 * token `key`, taken through the output path, the final norm and the LM head (model_lens):
 * logits [vocab]. */
int engine_lens(engine *g, int li, int h, int key, float *logits, err *e);
/* The same for the queries of the tokens at positions at[0..n) (ascending, all run): the core's
 * output there, scale S_t^T q_t with the state after token t, as the run had it (recomputed by
 * engine_capture): logits [n, vocab]. */
int engine_lens_queries(engine *g, int li, int h, const int *at, int n, float *logits, err *e);

/* Exact attribution (mixers/attribution.h) of layer (lane) li's core, head h, over the tokens run
 * so far: into the trace's snapshots (one layer, one head each)
 *   attribution        [T, T]  M: o_i = sum_j M_ij v_j + o_init_i (row i, column j)
 *   attribution_decay  [T, T]  its decay-only part (M - it: the key removal's doing)
 *   attribution_oinit  [T, dv] o_init
 *   attribution_vnorm  [1, T]  |v_j|
 *   attribution_at     [1, 6]  layer, head, T, the run's generation, layers, heads
 * Kept while the run does not change. Refused for kalman and kata, and when an edit or restore
 * inside the run changes that layer's state. */
int engine_attribution(engine *g, int li, int h, err *e);

/* The core of layer (lane) li: its ops, configuration and (state may be NULL) its state. */
int engine_core_at(engine *g, int li, const mixer_ops **mx, const mixer_cfg **mc, float **state,
                   err *e);

/* Runs the tokens of the run so far again on the CPU from position 0 (with the interventions at
 * their positions) and calls fn before layer (lane) li's core at every token t in [from, to],
 * with the core's inputs and its state before the token; then puts the run back exactly as it
 * was. For `export inputs`: what a core saw, for replay outside. */
typedef void (*engine_capture_fn)(void *ctx, int t, const mixer_tok *in, const float *state);
int engine_capture(engine *g, int li, int from, int to, engine_capture_fn fn, void *ctx, err *e);

#endif
