/* vector.h: a figure as SVG or PDF, drawn by the same calls as its PNG.
 *
 * vector_begin attaches a cairo SVG or PDF surface of the canvas's size (1 unit = 1 pt) to the
 * canvas; the view then draws as usual (the raster beside it answers the views' pixel questions,
 * such as where a legend hides the least); vector_end finishes the surface and writes the file
 * atomically with the provenance:
 *   SVG: <title> (the figure's title), <desc> (the provenance as "key: value" lines) and a
 *        <metadata> element holding <mixscope:entry key="..."> for each provenance entry and
 *        <mixscope:shows kind="title|axis|series|label"> for what the canvas noted it draws,
 *        all right after the opening <svg> tag;
 *   PDF: the document information dictionary: Title (the figure's title), Subject (the view and
 *        the command), Keywords (every "key: value", "; "-separated), Creator (the software).
 * Text is drawn as glyph outlines (cairo embeds the glyphs), so the file looks the same
 * everywhere; the metadata is where a program finds the words. */
#ifndef MIXSCOPE_VECTOR_H
#define MIXSCOPE_VECTOR_H

#include "../core/err.h"
#include "../viz/canvas.h"
#include "png.h"

enum { FIG_PNG = 0, FIG_SVG = 1, FIG_PDF = 2 };

typedef struct vector_out {
    int fmt;
    struct _cairo_surface *surf;
    unsigned char *buf;
    size_t n, cap;
    int failed;
} vector_out;

/* "png", "svg", "pdf" -> FIG_*; -1 for anything else. */
int figure_format(const char *name);
/* The format a file name's extension names (.png, .svg, .pdf, any case), or -1. */
int figure_format_of_path(const char *path);
const char *figure_format_name(int fmt);

int vector_begin(vector_out *vo, canvas *c, int fmt, err *e);
/* Detaches, finishes and writes the file (meta: provenance, NULL values left out). On error,
 * nothing is written. vector_abort releases a vector_out whose drawing failed. */
int vector_end(vector_out *vo, canvas *c, const char *path, const png_text *meta, int nmeta,
               err *e);
void vector_abort(vector_out *vo, canvas *c);

#endif
