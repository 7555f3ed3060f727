/* recall.h: recording how well a state reads back the values of earlier keys (the `recall` view).
 *
 * The trace keeps only the latest state, so the t x i readback picture has to be measured while
 * stepping. Per token t and layer it appends
 *   "k"      [layers][H][dk]  the key of token t (also used by the kata view's Grams),
 *   "v"      [layers][H][dv]  the value of token t,
 *   "recall" [layers][H][RECALL_WINDOW]  entry j: |S_t^T k_{t-j} - v_{t-j}| / |v_{t-j}|, the
 *            relative error of reading key t-j's value back from the state after token t
 *            (NaN for j > t and for keys not recorded),
 * registering the series on first use. The state must be [H][dk][dv], key-major (the delta
 * family, GLA, Mamba2: o = S^T q).
 *
 * Two ways to record it:
 *
 * - The tracker (recall_tracker, one per layer), for a session that steps tokens in order. It
 *   keeps the window's keys, values and readbacks r_i = S_t^T k_i [dv] (in double). For a mixer
 *   with a write form (mixer_ops.write_form: S_t = alpha_t S_{t-1} + kk_t u_t^T per head; gdn,
 *   deltanet, kaczmarz, mamba2) it advances them per token as
 *       r_i <- alpha_t r_i + (k_i . kk_t) u_t,
 *   O(W (dk + dv)) per head instead of O(W dk dv), and reads the newest key's row S_t^T k_t from
 *   the state directly; one further row per token (rotating through the window) is also read
 *   directly and compared, and a mismatch beyond float rounding (a step that does not match its
 *   write form, e.g. a wrapped step) turns the incremental path off until the next reset. Without
 *   a write form (GLA), on the first token and after a gap in the tokens, the rows are the float
 *   product K_window S_t (below). Per token and layer, in this order:
 *       recall_before_step(&rt, state, &x, t, e);      state and inputs before the step
 *       m->step(&c, state, &x, t, o, probes);
 *       recall_after_step(&rt, tr, layers, layer, state, t, e);   state after; t pushed
 *   `state` is the mixer's whole flat state both times; the tracker finds its "hT" part. A mixer
 *   without a key-major "hT" [H, dk, dv] part (Kalman, KATA, attention) records "k" and "v" only.
 *   A token t other than the one after the previous call starts the window again from the trace's
 *   "k" / "v" series (the keys of the last RECALL_WINDOW tokens that it holds).
 *
 * - recall_record, stateless: every row from the state after the token as a float matrix product
 *   K_window [W, dk] x S [dk, dv] (keys read from the trace), blocked and vectorised, O(W dk dv)
 *   per head. Exact to float rounding; the fallback of the tracker. */
#ifndef MIXSCOPE_RECALL_H
#define MIXSCOPE_RECALL_H

#include <stddef.h>
#include <stdint.h>

#include "../core/err.h"
#include "../core/trace.h"
#include "../mixers/mixer.h"

#define RECALL_WINDOW 256

/* Only the "k" and "v" series (for mixers whose state is not [dk, dv], e.g. KATA's feature state):
 * k [H][dk], v [H][dv] of token t. */
int recall_record_kv(trace *tr, int layers, int layer, int H, int dk, int dv, const float *k,
                     const float *v, int64_t t, err *e);

/* k [H][dk], v [H][dv], state [H][dk][dv]; t must be a token already pushed into the trace. */
int recall_record(trace *tr, int layers, int layer, int H, int dk, int dv, const float *k,
                  const float *v, const float *state, int64_t t, err *e);

/* The readback error of one key and value against a state [dk][dv]: |S^T k - v| / |v|, in double.
 */
float recall_readback(int dk, int dv, const float *S, const float *k, const float *v);

/* R [n][dv] (row stride ldr) = K S for n keys K[i] [dk] and S [dk][dv]: float products summed in
 * float over d in order, blocked over rows and value columns. */
void recall_readback_rows(int n, const float *const *K, int dk, int dv, const float *S, float *R,
                          size_t ldr);

/* One layer's tracker. Fields are read-only outside recall.c. */
typedef struct recall_tracker {
    const mixer_ops *m; /* borrowed */
    mixer_cfg c;        /* a copy, taken at init */
    int H, dk, dv;
    int keymajor;          /* the state has "hT" [H, dk, dv]: "recall" is recorded */
    size_t hoff;           /* its offset in the mixer's state */
    int64_t next;          /* R holds the readbacks of the state after token next - 1; -1: none */
    int64_t pending;       /* the token recall_before_step announced; -1: none */
    int form;              /* alpha, kk, u hold the pending token's write */
    int form_off;          /* the write form did not match the step: full products until reset */
    int64_t incremental;   /* tokens whose rows were advanced incrementally (since init) */
    int64_t full;          /* tokens whose rows were computed as the full product (since init) */
    int64_t *tok;          /* [W] token held by each ring slot (slot = token % W); -1: empty */
    float *K;              /* [H][W][dk] keys */
    float *V;              /* [H][W][dv] values */
    double *R;             /* [H][W][dv] S^T k of each slot's key, after token next - 1 */
    float *alpha, *kk, *u; /* [H], [H][dk], [H][dv]: the pending token's write form */
    float *Rf;             /* [W][dv] scratch of the float product */
    float *E;              /* [H][W] the recall entry of each slot's key, after token next - 1 */
    double *vn2;           /* [H][W] |v|^2 of each slot's value */
    double *scr;           /* [2 dv + dk] scratch: a check row, u and kk in double */
} recall_tracker;

/* For the layer's mixer m with config c (copied; init again after a swap or reconfigure).
 * Returns 0, or -1 with e set (out of memory). */
int recall_tracker_init(recall_tracker *rt, const mixer_ops *m, const mixer_cfg *c, err *e);
/* Forgets every key (a new sequence); the incremental path is allowed again. */
void recall_tracker_reset(recall_tracker *rt);
void recall_tracker_free(recall_tracker *rt);

/* Token t's inputs x (IN_K [H][dk], IN_V [H][dv] at least) and the mixer's whole state before the
 * step. Keeps the key and value and, when the mixer has a write form, its alpha, kk, u. */
int recall_before_step(recall_tracker *rt, const float *state, const mixer_tok *x, int64_t t,
                       err *e);
/* After the step: the mixer's whole state after token t (already pushed into tr). Records "k",
 * "v" and (key-major states) "recall" for layer `layer` of `layers`. */
int recall_after_step(recall_tracker *rt, trace *tr, int layers, int layer, const float *state,
                      int64_t t, err *e);

/* The readback S_t^T k_(t-j) [dv] of head h held after the last recall_after_step (t = next - 1),
 * or NULL (no key j tokens back, not key-major, nothing recorded). */
const double *recall_tracker_row(const recall_tracker *rt, int h, int j);

#endif
