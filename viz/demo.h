/* demo.h: small probe traces from a fixed seed, made by running the committed mixers.
 *
 * The golden-image tests, the view benchmark and `export png VIEW FILE demo=1` (a preview without
 * a model) need traces with real probes. demo_trace runs a mixer (or a small stack of them, one
 * per layer, on one random stream) through mixer_step token by token and records what a model run
 * records: every probe, the "state" snapshot, and for the recall and kata views the keys, values
 * and readback (viz/recall.h). Same name, T and seed: the same trace, bit for bit.
 *
 *   kaczmarz, state, recall, probes: 2 layers on one stream, gdn (normalised keys, beta =
 *                                    sigmoid) then kaczmarz (raw keys of varied norm, eta);
 *   kalman:                          1 layer of the kalman mixer (S = 8 lanes, M = 8 channels),
 *                                    a burst of precise observations in the middle;
 *   kata:                            1 layer of KATA-M1 with its keys and values recorded;
 *   parallax:                        4 layers of parallax whose probe r grows with depth;
 *   precision:                       the kaczmarz demo's 2 layers run four ways in lockstep, as
 *                                    `diagnose precision` runs a model (fp32; bf16 / fp16 state;
 *                                    bf16 inputs), recorded as the prec_* series of
 *                                    diag_precision_record; prec_logits holds the divergence of
 *                                    the layers' outputs (no model, so no logits). */
#ifndef MIXSCOPE_DEMO_H
#define MIXSCOPE_DEMO_H

#include <stdint.h>

#include "../core/err.h"
#include "../core/trace.h"

/* Fills an empty (trace_init'ed) trace for a view's demo. Fails when a mixer it needs is not
 * linked in. */
int demo_trace(trace *tr, const char *view, int T, uint64_t seed, err *e);

#endif
