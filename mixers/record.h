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

#endif
