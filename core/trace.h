/* trace.h: the probe trace, the only thing between the mixers and the views.
 *
 * A trace is a set of series. A series is one probe ("beta", "rho", "lambda") recorded per token,
 * with a fixed per-token block [layers][heads][width] of floats. Tokens are appended in order; a
 * value never written stays NaN (a layer whose mixer has no such probe, a token not yet run).
 * Beside the series, the trace keeps snapshots: named matrices that hold only their latest value
 * (the current state of each layer and head, for the live state heatmap), so views never reach
 * into a mixer. Views and exports read a trace; mixers (through the session) write it. */
#ifndef MIXSCOPE_TRACE_H
#define MIXSCOPE_TRACE_H

#include <stddef.h>
#include <stdint.h>

#include "err.h"

typedef struct trace_series {
    char *name;    /* probe name */
    char *meaning; /* one line */
    char *source;  /* what produced it: mixer name, "model", "stream" */
    int layers, heads, width;
    float *data; /* [cap][layers][heads][width] */
} trace_series;

typedef struct trace_snapshot {
    char *name; /* e.g. "state" */
    int layers, heads, rows, cols;
    int64_t t;   /* token the snapshot was taken after, -1 = never */
    float *data; /* [layers][heads][rows][cols] */
} trace_snapshot;

typedef struct trace {
    int nseries;
    trace_series *series;
    int nsnap;
    trace_snapshot *snaps;
    int64_t T;    /* tokens recorded */
    int64_t cap;  /* tokens allocated per series */
    int64_t want; /* trace_reserve's length, for the growth once series exist */
    /* what made layer l of the series: the layer's mixer in model mode ("gdn", "softmax" for a
     * hybrid model's attention layers), the lane's spec in raw mode ("kaczmarz:eta=0.5");
     * labels and CSV name layers by it */
    int nlabels;
    char (*label)[48];
} trace;

void trace_init(trace *tr);
void trace_free(trace *tr);
/* Forgets every token (series and snapshots stay defined). */
void trace_clear(trace *tr);

/* Adds a series (or returns the existing one of that name). Index or -1. A series asked for again
 * with more heads or a wider block (a hybrid model's layers) is widened to hold both: each layer
 * fills its first heads and values, the rest stay NaN. The layer count must agree. */
int trace_add_series(trace *tr, const char *name, const char *meaning, const char *source,
                     int layers, int heads, int width, err *e);
int trace_find(const trace *tr, const char *name);

/* Appends one token to every series (NaN-filled); returns its index or -1 on out of memory. */
int64_t trace_push_token(trace *tr, err *e);
/* Room for T tokens in every series now (and in series added later), within the trace's memory
 * cap: a run that knows its length allocates once instead of doubling as it records. Best effort:
 * out of memory here leaves the growth to trace_push_token. */
void trace_reserve(trace *tr, int64_t T);
/* The block of series s at token t: [layers][heads][width]. */
float *trace_at(const trace *tr, int s, int64_t t);
/* One (layer, head) slice of width floats at token t. */
float *trace_at_lh(const trace *tr, int s, int64_t t, int layer, int head);
/* Stores v [H][w] as heads 0..H-1, values 0..w-1 of layer `layer` at token t; -1 (nothing
 * stored) when the series has fewer heads, a narrower block, or no such layer or token. */
int trace_put_heads(const trace *tr, int s, int64_t t, int layer, const float *v, int H, int w);

/* Sets the label of layer (or lane) l, growing the table; "" where none was set. */
int trace_set_label(trace *tr, int l, const char *label, err *e);
/* Layer l's label, or NULL where none was set. */
const char *trace_label(const trace *tr, int l);

/* Adds (or finds) a snapshot and returns its index. One asked for again with more heads is
 * widened (what it held kept); with other rows or columns it is remade empty. */
int trace_add_snapshot(trace *tr, const char *name, int layers, int heads, int rows, int cols,
                       err *e);
int trace_find_snapshot(const trace *tr, const char *name);
/* [rows][cols] of one layer and head. */
float *trace_snapshot_at(const trace *tr, int k, int layer, int head);

#endif
