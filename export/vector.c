/* vector.c: SVG and PDF figures through cairo, with provenance (vector.h). */
#include "vector.h"

#include <cairo-pdf.h>
#include <cairo-svg.h>
#include <cairo.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "../core/fileio.h"

int figure_format(const char *name) {
    return !strcmp(name, "png")   ? FIG_PNG
           : !strcmp(name, "svg") ? FIG_SVG
           : !strcmp(name, "pdf") ? FIG_PDF
                                  : -1;
}

int figure_format_of_path(const char *path) {
    const char *dot = strrchr(path, '.'), *slash = strrchr(path, '/');
    if (!dot || (slash && dot < slash)) return -1;
    return !strcasecmp(dot, ".png")   ? FIG_PNG
           : !strcasecmp(dot, ".svg") ? FIG_SVG
           : !strcasecmp(dot, ".pdf") ? FIG_PDF
                                      : -1;
}

const char *figure_format_name(int fmt) {
    return fmt == FIG_SVG ? "svg" : fmt == FIG_PDF ? "pdf" : "png";
}

static cairo_status_t on_write(void *ctx, const unsigned char *data, unsigned int n) {
    vector_out *vo = ctx;
    if (vo->failed) return CAIRO_STATUS_WRITE_ERROR;
    if (vo->n + n > vo->cap) {
        size_t cap = vo->cap ? vo->cap : 1 << 16;
        while (cap < vo->n + n) cap *= 2;
        unsigned char *p = realloc(vo->buf, cap);
        if (!p) {
            vo->failed = 1;
            return CAIRO_STATUS_NO_MEMORY;
        }
        vo->buf = p, vo->cap = cap;
    }
    memcpy(vo->buf + vo->n, data, n);
    vo->n += n;
    return CAIRO_STATUS_SUCCESS;
}

int vector_begin(vector_out *vo, canvas *c, int fmt, err *e) {
    memset(vo, 0, sizeof *vo);
    vo->fmt = fmt;
    if (fmt == FIG_SVG)
        vo->surf = cairo_svg_surface_create_for_stream(on_write, vo, c->w, c->h);
    else if (fmt == FIG_PDF)
        vo->surf = cairo_pdf_surface_create_for_stream(on_write, vo, c->w, c->h);
    else
        return err_set(e, "vector output: format %d is not SVG or PDF", fmt);
    if (cairo_surface_status(vo->surf) != CAIRO_STATUS_SUCCESS) {
        err_set(e, "cairo: %s", cairo_status_to_string(cairo_surface_status(vo->surf)));
        cairo_surface_destroy(vo->surf);
        vo->surf = NULL;
        return -1;
    }
    if (fmt == FIG_SVG) cairo_svg_surface_restrict_to_version(vo->surf, CAIRO_SVG_VERSION_1_1);
    if (canvas_attach(c, vo->surf, e)) {
        vector_abort(vo, c);
        return -1;
    }
    return 0;
}

void vector_abort(vector_out *vo, canvas *c) {
    if (c) canvas_detach(c);
    if (vo->surf) cairo_surface_destroy(vo->surf);
    free(vo->buf);
    memset(vo, 0, sizeof *vo);
}

/* s with &, <, >, " escaped for XML text and attributes (control characters as spaces). */
static void put_xml(FILE *f, const char *s) {
    for (; *s; s++) {
        unsigned char ch = (unsigned char)*s;
        if (ch == '&')
            fputs("&amp;", f);
        else if (ch == '<')
            fputs("&lt;", f);
        else if (ch == '>')
            fputs("&gt;", f);
        else if (ch == '"')
            fputs("&quot;", f);
        else if (ch < 32 && ch != '\n')
            fputc(' ', f);
        else
            fputc(ch, f);
    }
}

static const char *title_of(const canvas *c) {
    for (int i = 0; i < c->nnotes; i++)
        if (!strcmp(c->notes[i].kind, "title")) return c->notes[i].text;
    return "mixscope figure";
}

/* cairo's SVG with our elements after the opening <svg ...> tag. */
static int write_svg(vector_out *vo, const canvas *c, const char *path, const png_text *meta,
                     int nmeta, err *e) {
    const char *svg = NULL;
    for (size_t i = 0; i + 4 <= vo->n && !svg; i++)
        if (!memcmp(vo->buf + i, "<svg", 4)) svg = (const char *)vo->buf + i;
    const char *open_end = svg ? memchr(svg, '>', vo->n - (size_t)(svg - (char *)vo->buf)) : NULL;
    if (!open_end) return err_set(e, "cairo wrote no <svg> element");
    size_t head = (size_t)(open_end + 1 - (char *)vo->buf);
    atomic_file af;
    if (atomic_open(&af, path, e)) return -1;
    FILE *f = af.fp;
    /* the namespace of our metadata goes on the root element */
    size_t tag = (size_t)(open_end - (char *)vo->buf);
    fwrite(vo->buf, 1, tag, f);
    fputs(" xmlns:mixscope=\"https://github.com/mixscope/mixscope\">\n<title>", f);
    put_xml(f, title_of(c));
    fputs("</title>\n<desc>", f);
    for (int i = 0; i < nmeta; i++)
        if (meta[i].value) {
            put_xml(f, meta[i].key);
            fputs(": ", f);
            put_xml(f, meta[i].value);
            fputs("\n", f);
        }
    fputs("</desc>\n<metadata>\n", f);
    for (int i = 0; i < nmeta; i++)
        if (meta[i].value) {
            fputs("<mixscope:entry key=\"", f);
            put_xml(f, meta[i].key);
            fputs("\">", f);
            put_xml(f, meta[i].value);
            fputs("</mixscope:entry>\n", f);
        }
    for (int i = 0; i < c->nnotes; i++) {
        fputs("<mixscope:shows kind=\"", f);
        put_xml(f, c->notes[i].kind);
        fputs("\">", f);
        put_xml(f, c->notes[i].text);
        fputs("</mixscope:shows>\n", f);
    }
    fputs("</metadata>\n", f);
    fwrite(vo->buf + head, 1, vo->n - head, f);
    return atomic_commit(&af, e);
}

int vector_end(vector_out *vo, canvas *c, const char *path, const png_text *meta, int nmeta,
               err *e) {
    canvas_detach(c);
    if (vo->fmt == FIG_PDF) {
        char subject[1200] = "", keywords[4096] = "", creator[128] = "mixscope";
        size_t k = 0;
        const char *view = NULL, *cmd = NULL;
        for (int i = 0; i < nmeta; i++) {
            if (!meta[i].value) continue;
            if (!strcmp(meta[i].key, "View")) view = meta[i].value;
            if (!strcmp(meta[i].key, "Command")) cmd = meta[i].value;
            if (!strcmp(meta[i].key, "Software"))
                snprintf(creator, sizeof creator, "%s", meta[i].value);
            int w = snprintf(keywords + k, sizeof keywords - k, "%s%s: %s", k ? "; " : "",
                             meta[i].key, meta[i].value);
            if (w > 0 && (size_t)w < sizeof keywords - k) k += (size_t)w;
        }
        snprintf(subject, sizeof subject, "mixscope view %s: %s", view ? view : "?",
                 cmd ? cmd : "?");
        cairo_pdf_surface_set_metadata(vo->surf, CAIRO_PDF_METADATA_TITLE, title_of(c));
        cairo_pdf_surface_set_metadata(vo->surf, CAIRO_PDF_METADATA_SUBJECT, subject);
        cairo_pdf_surface_set_metadata(vo->surf, CAIRO_PDF_METADATA_KEYWORDS, keywords);
        cairo_pdf_surface_set_metadata(vo->surf, CAIRO_PDF_METADATA_CREATOR, creator);
    }
    cairo_surface_finish(vo->surf);
    cairo_status_t st = cairo_surface_status(vo->surf);
    int rc = 0;
    if (st != CAIRO_STATUS_SUCCESS || vo->failed)
        rc = err_set(e, "cairo: %s", vo->failed ? "out of memory" : cairo_status_to_string(st));
    else if (vo->fmt == FIG_SVG)
        rc = write_svg(vo, c, path, meta, nmeta, e);
    else
        rc = file_write_atomic(path, vo->buf, vo->n, e);
    cairo_surface_destroy(vo->surf);
    free(vo->buf);
    memset(vo, 0, sizeof *vo);
    return rc;
}
