/* view.h: the views. A view reads the probe trace and draws one figure into a canvas.
 *
 * Views never call a mixer and never keep state between frames: the same trace and parameters give
 * the same pixels, which is what lets the window, `export png` and the golden tests agree. Each
 * view picks the series it needs by probe name (the mixers' probe_def tables), clamps the selection
 * to the trace's shape, and reports what it showed (mixer names, colour ranges) back in the params
 * for provenance. docs/views.md describes every panel. */
#ifndef MIXSCOPE_VIEW_H
#define MIXSCOPE_VIEW_H

#include <stdint.h>

#include "../core/err.h"
#include "../core/trace.h"
#include "canvas.h"

typedef struct view_params {
    int layer, head;     /* selection; clamped into the trace's shape */
    int64_t from, to;    /* token range [from, to); to < 0: through the last token */
    int index;           /* a lane or channel inside wide probes (kalman: lane s); clamped */
    char probe[64];      /* `probes`: the series to show ("": every per-head scalar series) */
    char px[64], py[64]; /* `scatter`: the probes on x and y ("": its defaults) */
    char title[160];     /* `set title`: replaces the view's title ("": its own) */
    char labels[256];    /* `set labels`: legend names of layers / lanes, comma separated */
    int dim;             /* kata: key dimension p of the random-key experiments (0: 16) */
    uint64_t seed;       /* kata: seed of the random keys */
    /* written by draw: what the figure shows, for provenance and the window title */
    int64_t shown_from, shown_to; /* the token range actually drawn, [from, to) */
    char mixer[96];               /* source mixer(s) of the series drawn */
    char crange[256];             /* colour ranges, "name lo..hi (log10); ..." or "" */
} view_params;

typedef struct view {
    const char *name;
    const char *summary; /* one line for `help view` */
    const char *keys;    /* the view's own parameters (beyond layer head from to), for help */
    int (*draw)(canvas *c, const trace *tr, view_params *p, err *e);
    /* The recorded quantities it draws, comma separated (probe names, "state", "recall",
     * "attn"; NULL: whatever it is asked for): the engine's probe selection is checked
     * against them when the view is shown (`set probes`). */
    const char *draws;
    /* 1: draws the session's training history (train/history.h), not the probe trace */
    int history;
} view;

extern const view *const view_all[];
extern const int view_count;
const view *view_find(const char *name);
/* layer 0, head 0, all tokens, index 0, no probe, dim 0, seed 1. */
void view_params_default(view_params *p);

/* ---- helpers shared by the view files (viz/view.c) ---- */

/* A rectangle in canvas pixels. */
typedef struct box {
    int x, y, w, h;
} box;

/* Cell (r, c) of a rows x cols grid laid over `area`, with a gap between cells. */
box vu_cell(box area, int rows, int cols, int r, int c);
/* Clears the canvas, draws the view's title line and the selection ("layer 0/2 · head 1/4 ·
 * tokens 0–199 of 200") and returns the area left below it. */
box vu_header(canvas *c, const char *title, const trace *tr, const view_params *p);
/* Series index by name, or -1. */
int vu_series(const trace *tr, const char *name);
/* Clamps p->layer / p->head to a series' shape (or to the first series when s < 0) and resolves
 * the token range into p->shown_from / shown_to. */
void vu_select(const trace *tr, int s, view_params *p);
/* The value of series s at token t for the selection (layer, head) and element i; NaN when out
 * of range. */
float vu_at(const trace *tr, int s, int64_t t, int layer, int head, int i);
/* A pointer to element i of (layer, head) at token `from`, and the stride between tokens. */
const float *vu_ptr(const trace *tr, int s, int64_t from, int layer, int head, int i,
                    size_t *stride);
/* How a legend names layer l: entry l of `set labels` when given; else its mixer (raw lanes: the
 * lane as typed) when the layers' mixers differ, "layer l (mixer)" when several share one,
 * "layer l" when the trace has no labels. */
const char *vu_layer_name(const trace *tr, const view_params *p, int l, char *buf, size_t n);
/* 1 when the trace's layers are raw-mixer lanes (each labelled by a different spec), so figures
 * say "lane" and name them rather than speak of depth. */
int vu_lanes(const trace *tr);
/* "0 gdn · 1 kaczmarz:eta=0.5" (the names as vu_layer_name gives them), cut to n. */
const char *vu_lane_list(const trace *tr, const view_params *p, char *buf, size_t n);
/* Notes layer l's mixer in p->mixer (provenance): the figure draws that layer. */
void vu_note_layer(view_params *p, const trace *tr, int l);
/* Appends a source mixer name to p->mixer (once) and a colour range to p->crange. */
void vu_note_mixer(view_params *p, const trace *tr, int s);
void vu_note_crange(view_params *p, const char *name, double lo, double hi, int log);
/* The q-quantile of |v| over its finite values (0 when there are none): the bound of a diverging
 * scale that a few outliers should not wash out. */
double vu_abs_quantile(const float *v, size_t n, double q);
/* Draws a full-canvas message (no data, missing series) below the header. */
void vu_message(canvas *c, box area, const char *msg);

/* One line of a token panel: element i of series s at (layer, head), optionally squared. */
typedef struct vu_line {
    int s, layer, head, i;
    const char *label; /* legend text (NULL: no legend entry) */
    rgba col;
    int style;   /* STYLE_* */
    float width; /* pixels */
    int square;  /* plot the value squared (|k|^2 from k_norm) */
} vu_line;

/* A horizontal reference line (included in the y range). */
typedef struct vu_ref {
    double y;
    const char *label;
    rgba col;
    int style;
} vu_ref;

/* A panel of lines over tokens [p->shown_from, p->shown_to), reference lines, and a legend of the
 * labelled lines. log: 0 linear, 1 log when every value is positive and they span more than 1.5
 * decades, 2 log whenever every value is positive, 3 log whenever some value is positive (zeros
 * and negatives leave gaps: for relative differences, where 0 means "identical"). */
struct plot;
void vu_lines(struct plot *pl, canvas *c, box b, const char *title, const char *ylabel,
              const trace *tr, const view_params *p, const vu_line *L, int n, const vu_ref *refs,
              int nrefs, int log, unsigned flags);

/* Colour scaling of vu_heatmap_tokens. */
enum {
    VU_AUTO,   /* signed: diverging symmetric; positive over 3 decades: log viridis; else viridis */
    VU_LOG,    /* viridis on log10 of the positive values */
    VU_SIGNED, /* diverging, symmetric about 0 */
    VU_UNIT,   /* viridis over [0, 1] */
};

/* A heatmap of v [rows][T] over the shown tokens (T = shown_to - shown_from) with its colour bar,
 * the colour range noted in p->crange under `name`. */
void vu_heatmap_tokens(canvas *c, box b, const char *title, const char *ylabel, view_params *p,
                       const float *v, int rows, int mode, const char *name);

#endif
