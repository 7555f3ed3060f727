/* recall.h: recording how well a state reads back the values of earlier keys (the `recall` view).
 *
 * The trace keeps only the latest state, so the t x i readback picture has to be measured while
 * stepping: after token t of a layer, call recall_record with the key and value that layer's mixer
 * saw and its state. It appends
 *   "k"      [layers][H][dk]  the key of token t (also used by the kata view's Grams),
 *   "v"      [layers][H][dv]  the value of token t,
 *   "recall" [layers][H][RECALL_WINDOW]  entry j: |S_t^T k_{t-j} - v_{t-j}| / |v_{t-j}|, the
 *            relative error of reading key t-j's value back from the state after token t
 *            (NaN for j > t),
 * registering the series on first use. The state must be [H][dk][dv], key-major (the delta
 * family, GLA, Mamba2: o = S^T q). Cost per head O(RECALL_WINDOW dk dv). */
#ifndef MIXSCOPE_RECALL_H
#define MIXSCOPE_RECALL_H

#include <stdint.h>

#include "../core/err.h"
#include "../core/trace.h"

#define RECALL_WINDOW 256

/* Only the "k" and "v" series (for mixers whose state is not [dk, dv], e.g. KATA's feature state):
 * k [H][dk], v [H][dv] of token t. */
int recall_record_kv(trace *tr, int layers, int layer, int H, int dk, int dv, const float *k,
                     const float *v, int64_t t, err *e);

/* k [H][dk], v [H][dv], state [H][dk][dv]; t must be a token already pushed into the trace. */
int recall_record(trace *tr, int layers, int layer, int H, int dk, int dv, const float *k,
                  const float *v, const float *state, int64_t t, err *e);

/* The readback error of one key and value against a state [dk][dv]: |S^T k - v| / |v|. */
float recall_readback(int dk, int dv, const float *S, const float *k, const float *v);

#endif
