/* plot.h: axes, line / step / marker plots, heatmaps, colour bars and legends on a canvas.
 *
 * A panel is laid out by plot_begin inside a rectangle: the title above, tick labels and the axis
 * labels left and below, and the data frame in what remains. Ticks are "nice" numbers (1, 2, 5
 * times a power of ten) on linear axes and decades (with 2..9 minor ticks) on log axes; the
 * frame is clipped so data never spills onto the labels. Data coordinates are doubles; pixel
 * mapping is plot_px / plot_py. */
#ifndef MIXSCOPE_PLOT_H
#define MIXSCOPE_PLOT_H

#include <stddef.h>
#include <stdint.h>

#include "canvas.h"
#include "colormap.h"

typedef struct axis {
    double lo, hi;
    int log;           /* log10 scale; lo and hi must be > 0 */
    int flip;          /* y: lo at the top (matrix rows); x: lo at the right */
    const char *label; /* may be NULL */
    int integer;       /* ticks on integers only (layers, heads, indices) */
} axis;

typedef struct plot {
    canvas *c;
    int x, y, w, h; /* the data frame in canvas pixels */
    axis ax, ay;
} plot;

/* plot_begin flags */
enum {
    PLOT_NO_GRID = 1,
    PLOT_NO_XTICKS = 2, /* no x tick labels (panels stacked over a shared x axis) */
    PLOT_NO_YTICKS = 4,
};

/* Line styles */
enum { STYLE_LINE = 0, STYLE_STEP = 1, STYLE_MARKERS = 2, STYLE_DASHED = 3, STYLE_BOX = 4 };

/* Theme colours shared by the views. */
rgba theme_bg(void);    /* the figure background */
rgba theme_ink(void);   /* text and frames */
rgba theme_faint(void); /* secondary text */
rgba theme_grid(void);  /* grid lines */

/* Lays out and draws an empty panel (background, grid, ticks, labels, title) in the rectangle and
 * clips the canvas to its data frame. Degenerate ranges are widened so the axis is drawable. */
void plot_begin(plot *p, canvas *c, int x, int y, int w, int h, const char *title, axis ax, axis ay,
                unsigned flags);
/* Lifts the clip and redraws the frame line over the data. */
void plot_end(plot *p);

/* Data to pixel (NaN for a value a log axis cannot show) and back. */
double plot_px(const plot *p, double x);
double plot_py(const plot *p, double y);
double plot_dx(const plot *p, double px);
double plot_dy(const plot *p, double py);

/* y values y[i * stride] for i < n at x = x0 + i dx; NaN (and, on a log axis, y <= 0) breaks
 * the line. */
void plot_series(plot *p, const float *y, size_t stride, int64_t n, double x0, double dx, int style,
                 float width, rgba col);
/* Points (x[i], y[i]). */
void plot_xy(plot *p, const double *x, const double *y, int n, int style, float width, rgba col);
/* Reference lines across the frame, with an optional label at the end. */
void plot_hline(plot *p, double y, rgba col, int style, const char *label);
/* The label of a horizontal reference line alone, on a plate of the background (drawn after the
 * data so the data does not run through it). */
void plot_hline_label(plot *p, double y, rgba col, const char *label);
void plot_vline(plot *p, double x, rgba col, int style, const char *label);
/* A translucent horizontal band between two y values. */
void plot_band(plot *p, double y0, double y1, rgba col);
/* The area between lo[i] and hi[i] over x[i] (n points; non-finite ones break nothing, they are
 * left out): a spread over seeds behind its mean line. */
void plot_fill_between(plot *p, const double *x, const double *lo, const double *hi, int n,
                       rgba col);

/* A heatmap: cell (i, j) = v[i * rstride + j * cstride] for i < rows, j < cols, centred on
 * x = x0 + j dx, y = y0 + i dy. NaN cells are grey. */
void plot_heatmap(plot *p, const float *v, int rows, int cols, ptrdiff_t rstride, ptrdiff_t cstride,
                  double x0, double dx, double y0, double dy, cmap_kind k, double lo, double hi,
                  int log);

/* A vertical colour bar in (x, y, w, h) (the bar itself is about 16 px wide; labels use the rest)
 * with the limits printed at its ends and nice ticks between. */
void plot_colorbar(canvas *c, int x, int y, int w, int h, cmap_kind k, double lo, double hi,
                   int log, const char *label);

typedef struct legend_item {
    const char *label;
    rgba col;
    int style; /* STYLE_* */
} legend_item;

/* corner: 0 top-right, 1 top-left, 2 bottom-right, 3 bottom-left (inside the frame), or
 * LEGEND_AUTO: the corner where the box covers the fewest drawn pixels. */
#define LEGEND_AUTO (-1)
void plot_legend(plot *p, const legend_item *items, int n, int corner);
/* A centred note inside the frame ("no data yet"). */
void plot_message(plot *p, const char *msg);

/* A running range over finite values (and only positive ones for a log axis). */
typedef struct range {
    double lo, hi;
    int n;
} range;
void range_init(range *r);
void range_add(range *r, double v, int log);
/* An axis over the range with padding; `want_log` gives a log axis when every value was positive
 * and they span more than `decades` (0: always when positive). An empty range gives 0..1. */
axis axis_fit(const range *r, int want_log, double decades, const char *label);

/* Formats v for a tick at spacing `step` (compact: 0.25, 1e-4, 3.2e5; "−" for minus). */
void plot_format(char *buf, size_t n, double v, double step);

#endif
