/* canvas.h: the drawing surface every view draws into, on cairo.
 *
 * Views lay out in units: a canvas is w x h units, (0, 0) the top-left corner, x to the right, y
 * down. What the units become is the canvas's business:
 *   - the raster: a cairo image surface of round(w scale) x round(h scale) pixels. The SDL window
 *     shows it and `export png` writes it (canvas_pixels gives its RGBA bytes), so what is seen is
 *     what is exported; scale (export scale= / dpi=) makes a larger figure with text and lines
 *     larger in proportion, not a larger canvas with the same 12 px text;
 *   - a vector surface (SVG, PDF: canvas_attach) receives every primitive as well, from the same
 *     drawing calls, so the three formats show one figure.
 * Text is DejaVu Sans (Debian's fonts-dejavu-core, read by FreeType; fontconfig's sans when the
 * file is missing), anti-aliased in grey with hinting off, so metrics are linear in scale and the
 * same trace renders to the same pixels on machines with the same cairo. Text may carry
 * sub/superscripts: "S_{t-1}", "x^{2}" (braces required; a lone '_' is an underscore).
 *
 * Every primitive honours the clip rectangle (in units). The canvas also keeps notes of what it
 * shows (title, axes, series: canvas_note), which the SVG and PDF exports write as metadata. */
#ifndef MIXSCOPE_CANVAS_H
#define MIXSCOPE_CANVAS_H

#include <stdint.h>

#include "../core/err.h"

typedef struct rgba {
    uint8_t r, g, b, a;
} rgba;

static inline rgba rgb(int r, int g, int b) {
    return (rgba){(uint8_t)r, (uint8_t)g, (uint8_t)b, 255};
}

struct _cairo;
struct _cairo_surface;

/* What a figure shows, noted while drawing (SVG/PDF metadata, structural tests). */
enum { CANVAS_MAX_NOTES = 64 };
typedef struct canvas_note_t {
    char kind[12]; /* "title", "axis", "series", "label" */
    char text[116];
} canvas_note_t;

typedef struct canvas {
    int w, h;     /* the layout size in units: views place everything in these */
    double scale; /* raster pixels per unit */
    int pw, ph;   /* the raster in pixels */
    uint8_t *px;  /* [ph][pw][4] R, G, B, A bytes, top row first: canvas_pixels() fills it */
    int cx0, cy0, cx1, cy1; /* clip rectangle [cx0, cx1) x [cy0, cy1), units */
    struct _cairo_surface *img;
    struct _cairo *cr[2]; /* the raster's context, and an attached vector surface's */
    int ncr;
    int stale; /* drawn since px was filled */
    int nnotes;
    canvas_note_t notes[CANVAS_MAX_NOTES];
} canvas;

/* The two text sizes (DejaVu Sans, 12.5 and 16 units to the em). */
enum { FONT_SMALL = 0, FONT_LARGE = 1 };
/* Horizontal anchor of text at x. */
enum { ALIGN_LEFT = 0, ALIGN_CENTER = 1, ALIGN_RIGHT = 2 };

/* A canvas of w x h units at scale 1 (w x h pixels). */
int canvas_init(canvas *c, int w, int h, err *e);
/* The same, the raster `scale` pixels per unit (0.25..8; at most 16384 pixels a side). */
int canvas_init_scaled(canvas *c, int w, int h, double scale, err *e);
void canvas_free(canvas *c);
/* From now on every primitive also draws into `vec` (an SVG or PDF surface of w x h points), with
 * the clip as it stands. The canvas keeps a reference; canvas_detach drops it (and finishes
 * nothing: the caller finishes the surface). */
int canvas_attach(canvas *c, struct _cairo_surface *vec, err *e);
void canvas_detach(canvas *c);
/* The raster's RGBA bytes, brought up to date ([ph][pw][4]). */
const uint8_t *canvas_pixels(canvas *c);
/* The raster pixel under unit (x, y) (for tests and pickers): its RGBA bytes, NULL outside. */
const uint8_t *canvas_px_at(canvas *c, int x, int y);
/* The colour drawn at unit (x, y), read from the surface without converting the whole raster
 * (legend placement asks for a few hundred pixels, several times a frame); 0 outside. */
int canvas_peek(canvas *c, int x, int y, rgba *out);
/* Notes what the figure shows (kind "title", "axis", "series", "label"). */
void canvas_note(canvas *c, const char *kind, const char *text);
void canvas_clear(canvas *c, rgba col);

/* Restricts drawing to a rectangle (intersected with the canvas); canvas_unclip lifts it. */
void canvas_clip(canvas *c, int x, int y, int w, int h);
void canvas_unclip(canvas *c);

/* One pixel blended with coverage 0..255 (times the colour's own alpha). */
void canvas_blend(canvas *c, int x, int y, rgba col, int cover);
void canvas_fill(canvas *c, int x, int y, int w, int h, rgba col);
/* A one-pixel outline just inside the rectangle. */
void canvas_frame(canvas *c, int x, int y, int w, int h, rgba col);
void canvas_hline(canvas *c, int x0, int x1, int y, rgba col);
void canvas_vline(canvas *c, int x, int y0, int y1, rgba col);

/* An anti-aliased segment of the given width (pixels), round-capped. */
void canvas_line(canvas *c, float x0, float y0, float x1, float y1, float width, rgba col);
/* The same, drawn as dashes of `on` pixels separated by `off` pixels. */
void canvas_dashed(canvas *c, float x0, float y0, float x1, float y1, float width, float on,
                   float off, rgba col);
/* n points xy[2n]; a NaN coordinate breaks the line. */
void canvas_polyline(canvas *c, const float *xy, int n, float width, rgba col);
/* A filled polygon of n points xy[2n] (points with a NaN coordinate are skipped). */
void canvas_polygon(canvas *c, const float *xy, int n, rgba col);
/* A filled anti-aliased disc. */
void canvas_disc(canvas *c, float x, float y, float r, rgba col);
/* An image of rows x cols cells (cells[row * cols + col], row 0 at the top) stretched over the
 * rectangle (x, y, w, h) in units, each cell a flat rectangle (nearest neighbour, no smoothing):
 * heatmaps. Vector surfaces get it as an embedded image. */
void canvas_image(canvas *c, double x, double y, double w, double h, const rgba *cells, int cols,
                  int rows);

/* Text (UTF-8; unknown characters show as '?'). y is the top of the line box; returns the width
 * in pixels. canvas_text_up draws it rotated a quarter turn counter-clockwise (reading upwards),
 * centred on (x, y) along the text and with the line box starting at x. */
int canvas_text(canvas *c, int x, int y, const char *s, int font, int align, rgba col);
int canvas_text_up(canvas *c, int x, int y, const char *s, int font, rgba col);
int canvas_text_width(const char *s, int font);
/* canvas_text cut to at most maxw pixels, ending in "…" when it had to be cut. */
int canvas_text_fit(canvas *c, int x, int y, const char *s, int font, int align, rgba col,
                    int maxw);
/* Word wrapping: splits s at spaces into lines of at most maxw pixels (a single word wider than
 * maxw gets a line of its own), writes the byte offset where each line starts into starts[] (at
 * most n) and returns the number of lines (0 for an empty string). */
int canvas_text_breaks(const char *s, int font, int maxw, int *starts, int n);
/* Draws s wrapped to maxw, line boxes 2 pixels apart downwards from y, at most max_lines lines (the
 * last one cut with "…" if the text goes on); returns the lines drawn. */
int canvas_text_wrap(canvas *c, int x, int y, const char *s, int font, rgba col, int maxw,
                     int max_lines);
/* Height of a line box (ascent + descent). */
int canvas_text_height(int font);

#endif
