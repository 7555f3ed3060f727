/* session_raw.h: raw-mixer mode's part of the session (struct session's "raw-mixer mode and
 * generators" block points here), shared by cli/cmd_stream.c (mixer, stream, prompt generators,
 * step / run / reset in raw mode), cmd_show.c, cmd_compare.c, cmd_set.c and cmd_tui.c.
 *
 * Recording: lane l of the raw mode is layer l of the probe trace. Per token the trace gets every
 * probe of every lane (by probe name, as models record them), the "state" snapshot, the keys,
 * values and readback of viz/recall.h, and three series of the stream itself:
 *   recall_err [lanes][H][1]  |o - v*| / |v*| on query tokens (v* the right answer), NaN on writes
 *   key_norm   [lanes][H][1]  |k| of the token's key (the stream's, the same for every lane)
 *   out_norm   [lanes][H][1]  |o|, the lane's output */
#ifndef MIXSCOPE_SESSION_RAW_H
#define MIXSCOPE_SESSION_RAW_H

#include "../core/err.h"
#include "../core/trace.h"
#include "raw.h"
#include "stream.h"

struct session;

typedef struct raw_mode {
    int on;                       /* a mixer is selected: step / run / reset act on the lanes */
    int nl;                       /* lanes */
    raw_lane lane[RAW_MAX_LANES]; /* the cores, layer l of the trace */
    char specs[RAW_MAX_LANES][64];
    char shared[320]; /* option words every lane gets */
    int H, dk, dv;
    raw_stream st;  /* st.T == 0: no stream yet */
    int pos;        /* the next token to run */
    float *scratch; /* [raw_scratch_floats] */
} raw_mode;

/* Registers the series a run of these lanes records (see above) in tr. Probes whose name another
 * lane already registered with another width are skipped for that lane (their values stay NaN). */
int raw_register(trace *tr, raw_lane *lanes, int nl, const raw_stream *st, err *e);
/* Steps token t (already pushed into tr) through every lane and records it. */
int raw_record_token(trace *tr, raw_lane *lanes, int nl, const raw_stream *st, int t,
                     float *scratch, err *e);
/* Runs the whole stream from the prior state through lanes into an empty trace (compare). */
int raw_run_all(struct session *s, trace *tr, raw_lane *lanes, int nl, const raw_stream *st,
                err *e);
/* Advances the session's raw mode by n tokens (clamped to the stream); verbose prints one line
 * per token. Used by step, run and the dashboard. */
int raw_advance(struct session *s, int n, int verbose, err *e);

/* Settings with their defaults applied (cli/cmd_set.c). */
int setting_rows(const struct session *s); /* -1: all */
long setting_seed(const struct session *s);
double setting_blowup(const struct session *s);
const char *setting_outdir(const struct session *s);

/* mkdir -p (cli/cmd_set.c). */
int session_make_dirs(const char *path, err *e);

/* Monotonic seconds. */
double raw_now(void);

/* The display name of layer l of the session's trace: the raw lane's label, or "l<l>". */
const char *raw_layer_label(struct session *s, int l, char *buf, size_t n);

#endif
