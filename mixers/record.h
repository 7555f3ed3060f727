/* record.h: moving a mixer's per-token probe buffer into the probe trace.
 *
 * A model (or a raw stream) registers each mixer's probe schema once with probe_register, then
 * after every step hands the probe buffer to probe_record for (token, layer). The state snapshot
 * ("state", [H][dk][dv] per layer) is copied with probe_record_state for the live heatmap. */
#ifndef MIXSCOPE_RECORD_H
#define MIXSCOPE_RECORD_H

#include "../core/trace.h"
#include "mixer.h"

/* Registers every probe of m for a stack of `layers` layers. Series are named by probe name;
 * layers run by other mixers leave them NaN. Returns 0 or -1. */
int probe_register(trace *tr, const mixer_ops *m, const mixer_cfg *c, int layers, err *e);
/* Copies one token's probe buffer (mixer_probe_floats) of one layer into token t. */
void probe_record(trace *tr, const mixer_ops *m, const mixer_cfg *c, const float *probes, int64_t t,
                  int layer);
/* Registers the "state" snapshot for a stack of layers ([H][dk][dv] for mixers whose state has a
 * part of that shape; others get none). */
int probe_register_state(trace *tr, const mixer_ops *m, const mixer_cfg *c, int layers, err *e);
/* Copies the first [H,dk,dv]-shaped state part of `state` into the "state" snapshot. */
void probe_record_state(trace *tr, const mixer_ops *m, const mixer_cfg *c, const float *state,
                        int64_t t, int layer);

/* Attention rows for the views (softmax and Parallax layers; nothing for other mixers). Two
 * snapshots per layer and head, a ring of the last RECORD_ATTN_Q query tokens:
 *   "attn_a"   [RECORD_ATTN_Q][RECORD_ATTN_K]: ring row i holds the effective weights
 *              a_{q, q - K + 1 .. q} (attention.h; a = p for softmax) of its query position q,
 *              so the row ends on the diagonal; keys the query cannot see (before 0, outside the
 *              window) are NaN;
 *   "attn_pos" [RECORD_ATTN_Q][1]: the query position of ring row i, -1 when empty.
 * Query q goes to ring row q % RECORD_ATTN_Q; position 0 empties the ring first (a new
 * sequence), so rows of an earlier run never mix with the current one. */
#define RECORD_ATTN_Q 64
#define RECORD_ATTN_K 128
int probe_register_attn(trace *tr, const mixer_ops *m, const mixer_cfg *c, int layers, err *e);
/* After the step of position pos (state: the KV cache that now holds pos; x: that token's inputs
 * as given to the mixer). */
void probe_record_attn(trace *tr, const mixer_ops *m, const mixer_cfg *c, const float *state,
                       const mixer_tok *x, int pos, int layer);

/* LLA beside the attention layers (mixers/lla.h), per token and head, when asked for (`set lla`:
 * it costs O(n dk (dk + dv)) a head and token, more than the layer itself): series "lla_eta",
 * "lla_cos", "cpa", "lla_gap", "lla_gap_sa" (source "lla"). register adds them for softmax and
 * Parallax layers; record fills token pos of a layer when they are registered (lambda: the
 * ridge on the normalised weights). */
int probe_register_lla(trace *tr, const mixer_ops *m, const mixer_cfg *c, int layers, err *e);
void probe_record_lla(trace *tr, const mixer_ops *m, const mixer_cfg *c, const float *state,
                      const mixer_tok *x, int pos, int layer, double lambda);

#endif
