/* canvas.h: an RGBA pixel buffer that every view draws into.
 *
 * The SDL window uploads these pixels as they are and `export png` writes them, so what is seen is
 * what is exported, and tests compare pixels without a display. Drawing is deterministic integer
 * and float arithmetic (no fonts from the system: glyphs come from viz/font_data.h), so the same
 * trace renders to the same bytes on every machine.
 *
 * Coordinates are pixels, x to the right, y down, (0, 0) the top-left corner. Every primitive
 * honours the clip rectangle; lines and discs are anti-aliased by coverage. */
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

typedef struct canvas {
    int w, h;
    uint8_t *px;            /* [h][w][4] R, G, B, A bytes, top row first (PNG and SDL RGBA32) */
    int cx0, cy0, cx1, cy1; /* clip rectangle [cx0, cx1) x [cy0, cy1) */
} canvas;

/* Built-in fonts (DejaVu Sans at two sizes). */
enum { FONT_SMALL = 0, FONT_LARGE = 1 };
/* Horizontal anchor of text at x. */
enum { ALIGN_LEFT = 0, ALIGN_CENTER = 1, ALIGN_RIGHT = 2 };

int canvas_init(canvas *c, int w, int h, err *e);
void canvas_free(canvas *c);
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
/* A filled anti-aliased disc. */
void canvas_disc(canvas *c, float x, float y, float r, rgba col);

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
