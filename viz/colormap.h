/* colormap.h: colour maps for heatmaps and the line palette.
 *
 * viridis (perceptually uniform, for magnitudes) and a symmetric diverging map (ColorBrewer RdBu,
 * blue for negative, white at zero, red for positive) for signed values; a value outside the map's
 * range saturates at the end colour and NaN is drawn grey. The palette gives distinguishable line
 * colours (Okabe-Ito, safe for colour-blind readers). */
#ifndef MIXSCOPE_COLORMAP_H
#define MIXSCOPE_COLORMAP_H

#include "canvas.h"

typedef enum cmap_kind {
    CMAP_VIRIDIS,   /* lo..hi, dark purple to yellow */
    CMAP_DIVERGING, /* -m..m symmetric around zero */
} cmap_kind;

/* The colour of t in [0, 1] (clamped; NaN gives the missing-value grey). */
rgba cmap_at(cmap_kind k, double t);

/* Maps a value to t in [0, 1] for a range: linear, or log10 when log is set (values <= 0 give
 * NaN). For the diverging map pass lo = -m, hi = m. */
double cmap_t(double v, double lo, double hi, int log);

rgba cmap_value(cmap_kind k, double v, double lo, double hi, int log);

/* Line colour i of the palette (cycles). */
rgba palette(int i);

/* The grey of missing values. */
rgba cmap_nan(void);

#endif
