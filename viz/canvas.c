/* canvas.c: the canvas on cairo: a raster image surface (and, while exporting, a vector surface
 * drawn with the same calls), text in DejaVu Sans with sub/superscript markup. */
#include "canvas.h"

#include <cairo-ft.h>
#include <cairo.h>
#include <ft2build.h>
#include FT_FREETYPE_H
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define FONT_FILE "/usr/share/fonts/truetype/dejavu/DejaVuSans.ttf"

/* ---- the font ---- */

static const double FONT_SIZE[2] = {12.5, 16.0}; /* units to the em: FONT_SMALL, FONT_LARGE */

static struct {
    int ready;
    cairo_font_face_t *face;
    cairo_font_options_t *opt;
    cairo_t *measure; /* a 1x1 context for widths without a canvas */
    int ascent[2], descent[2];
} g_font;

/* Loads DejaVu Sans once: the file through FreeType (the same glyphs everywhere), else
 * fontconfig's sans. Hinting off, grey anti-aliasing: widths scale linearly with the canvas. */
static void font_init(void) {
    if (g_font.ready) return;
    g_font.ready = 1;
    static FT_Library lib;
    static FT_Face ft;
    if (!FT_Init_FreeType(&lib) && !FT_New_Face(lib, FONT_FILE, 0, &ft))
        g_font.face = cairo_ft_font_face_create_for_ft_face(ft, 0);
    if (!g_font.face || cairo_font_face_status(g_font.face) != CAIRO_STATUS_SUCCESS)
        g_font.face = cairo_toy_font_face_create("DejaVu Sans", CAIRO_FONT_SLANT_NORMAL,
                                                 CAIRO_FONT_WEIGHT_NORMAL);
    g_font.opt = cairo_font_options_create();
    cairo_font_options_set_antialias(g_font.opt, CAIRO_ANTIALIAS_GRAY);
    cairo_font_options_set_hint_style(g_font.opt, CAIRO_HINT_STYLE_NONE);
    cairo_font_options_set_hint_metrics(g_font.opt, CAIRO_HINT_METRICS_OFF);
    cairo_surface_t *one = cairo_image_surface_create(CAIRO_FORMAT_ARGB32, 1, 1);
    g_font.measure = cairo_create(one);
    cairo_surface_destroy(one);
    cairo_set_font_face(g_font.measure, g_font.face);
    cairo_set_font_options(g_font.measure, g_font.opt);
    for (int f = 0; f < 2; f++) {
        cairo_font_extents_t fe;
        cairo_set_font_size(g_font.measure, FONT_SIZE[f]);
        cairo_font_extents(g_font.measure, &fe);
        g_font.ascent[f] = (int)ceil(fe.ascent - 0.25);
        g_font.descent[f] = (int)ceil(fe.descent - 0.25);
    }
}

static void use_font(cairo_t *cr, int font, double size_mul) {
    font_init();
    cairo_set_font_face(cr, g_font.face);
    cairo_set_font_options(cr, g_font.opt);
    cairo_set_font_size(cr, FONT_SIZE[font == FONT_LARGE] * size_mul);
}

/* ---- the surfaces ---- */

int canvas_init(canvas *c, int w, int h, err *e) {
    return canvas_init_scaled(c, w, h, 1.0, e);
}

int canvas_init_scaled(canvas *c, int w, int h, double scale, err *e) {
    memset(c, 0, sizeof *c);
    if (w < 16 || h < 16 || w > 8192 || h > 8192)
        return err_set(e, "canvas size %dx%d out of range (16..8192)", w, h);
    if (!(scale >= 0.25 && scale <= 8))
        return err_set(e, "canvas scale %g out of range (0.25..8)", scale);
    int pw = (int)lround(w * scale), ph = (int)lround(h * scale);
    if (pw > 16384 || ph > 16384 || pw < 4 || ph < 4)
        return err_set(e, "a %dx%d canvas at scale %g is %dx%d pixels (at most 16384 a side)", w, h,
                       scale, pw, ph);
    c->img = cairo_image_surface_create(CAIRO_FORMAT_ARGB32, pw, ph);
    c->px = malloc((size_t)pw * (size_t)ph * 4);
    if (cairo_surface_status(c->img) != CAIRO_STATUS_SUCCESS || !c->px) {
        cairo_surface_destroy(c->img);
        free(c->px);
        memset(c, 0, sizeof *c);
        return err_set(e, "out of memory for a %dx%d canvas", pw, ph);
    }
    c->cr[0] = cairo_create(c->img);
    c->ncr = 1;
    cairo_scale(c->cr[0], scale, scale);
    c->w = w, c->h = h, c->scale = scale, c->pw = pw, c->ph = ph;
    memset(c->px, 0, (size_t)pw * (size_t)ph * 4);
    c->stale = 1;
    canvas_unclip(c);
    return 0;
}

void canvas_free(canvas *c) {
    for (int i = 0; i < c->ncr; i++) cairo_destroy(c->cr[i]);
    if (c->img) cairo_surface_destroy(c->img);
    free(c->px);
    memset(c, 0, sizeof *c);
}

static void apply_clip(canvas *c, cairo_t *cr) {
    cairo_reset_clip(cr);
    cairo_rectangle(cr, c->cx0, c->cy0, c->cx1 - c->cx0, c->cy1 - c->cy0);
    cairo_clip(cr);
}

int canvas_attach(canvas *c, cairo_surface_t *vec, err *e) {
    if (c->ncr > 1) return err_set(e, "the canvas already draws into a vector surface");
    cairo_t *cr = cairo_create(vec);
    if (cairo_status(cr) != CAIRO_STATUS_SUCCESS) {
        cairo_destroy(cr);
        return err_set(e, "cairo: %s", cairo_status_to_string(cairo_surface_status(vec)));
    }
    c->cr[c->ncr++] = cr;
    apply_clip(c, cr);
    return 0;
}

void canvas_detach(canvas *c) {
    if (c->ncr > 1) cairo_destroy(c->cr[--c->ncr]);
}

const uint8_t *canvas_pixels(canvas *c) {
    if (!c->stale) return c->px;
    cairo_surface_flush(c->img);
    const unsigned char *src = cairo_image_surface_get_data(c->img);
    int stride = cairo_image_surface_get_stride(c->img);
    for (int y = 0; y < c->ph; y++) {
        const uint32_t *s = (const uint32_t *)(src + (size_t)y * (size_t)stride);
        uint8_t *d = c->px + (size_t)y * (size_t)c->pw * 4;
        for (int x = 0; x < c->pw; x++, d += 4) {
            /* ARGB32 is premultiplied, native-endian 0xAARRGGBB */
            uint32_t v = s[x], a = v >> 24;
            uint32_t r = (v >> 16) & 255, g = (v >> 8) & 255, b = v & 255;
            if (a && a < 255)
                r = (r * 255 + a / 2) / a, g = (g * 255 + a / 2) / a, b = (b * 255 + a / 2) / a;
            d[0] = (uint8_t)r, d[1] = (uint8_t)g, d[2] = (uint8_t)b, d[3] = (uint8_t)a;
        }
    }
    c->stale = 0;
    return c->px;
}

const uint8_t *canvas_px_at(canvas *c, int x, int y) {
    int px = (int)floor((x + 0.5) * c->scale), py = (int)floor((y + 0.5) * c->scale);
    if (px < 0 || py < 0 || px >= c->pw || py >= c->ph) return NULL;
    return canvas_pixels(c) + ((size_t)py * (size_t)c->pw + (size_t)px) * 4;
}

int canvas_peek(canvas *c, int x, int y, rgba *out) {
    int px = (int)floor((x + 0.5) * c->scale), py = (int)floor((y + 0.5) * c->scale);
    if (px < 0 || py < 0 || px >= c->pw || py >= c->ph) return 0;
    if (!c->stale) {
        const uint8_t *q = c->px + ((size_t)py * (size_t)c->pw + (size_t)px) * 4;
        *out = (rgba){q[0], q[1], q[2], q[3]};
        return 1;
    }
    cairo_surface_flush(c->img);
    const unsigned char *d = cairo_image_surface_get_data(c->img);
    uint32_t v =
        ((const uint32_t *)(d + (size_t)py * (size_t)cairo_image_surface_get_stride(c->img)))[px];
    uint32_t a = v >> 24, r = (v >> 16) & 255, g = (v >> 8) & 255, b = v & 255;
    if (a && a < 255)
        r = (r * 255 + a / 2) / a, g = (g * 255 + a / 2) / a, b = (b * 255 + a / 2) / a;
    *out = (rgba){(uint8_t)r, (uint8_t)g, (uint8_t)b, (uint8_t)a};
    return 1;
}

void canvas_note(canvas *c, const char *kind, const char *text) {
    if (!text || !*text || c->nnotes >= CANVAS_MAX_NOTES) return;
    for (int i = 0; i < c->nnotes; i++)
        if (!strcmp(c->notes[i].kind, kind) && !strncmp(c->notes[i].text, text, 115)) return;
    canvas_note_t *n = &c->notes[c->nnotes++];
    snprintf(n->kind, sizeof n->kind, "%s", kind);
    snprintf(n->text, sizeof n->text, "%s", text);
}

static void source(cairo_t *cr, rgba col, double cover) {
    cairo_set_source_rgba(cr, col.r / 255.0, col.g / 255.0, col.b / 255.0, col.a / 255.0 * cover);
}

void canvas_clear(canvas *c, rgba col) {
    for (int i = 0; i < c->ncr; i++) {
        cairo_t *cr = c->cr[i];
        cairo_save(cr);
        cairo_reset_clip(cr);
        cairo_set_operator(cr, CAIRO_OPERATOR_SOURCE);
        source(cr, col, 1);
        cairo_paint(cr);
        cairo_restore(cr);
    }
    c->nnotes = 0;
    c->stale = 1;
}

void canvas_unclip(canvas *c) {
    canvas_clip(c, 0, 0, c->w, c->h);
}

void canvas_clip(canvas *c, int x, int y, int w, int h) {
    c->cx0 = x < 0 ? 0 : x;
    c->cy0 = y < 0 ? 0 : y;
    c->cx1 = x + w > c->w ? c->w : x + w;
    c->cy1 = y + h > c->h ? c->h : y + h;
    if (c->cx1 < c->cx0) c->cx1 = c->cx0;
    if (c->cy1 < c->cy0) c->cy1 = c->cy0;
    for (int i = 0; i < c->ncr; i++) apply_clip(c, c->cr[i]);
}

/* ---- shapes ---- */

void canvas_blend(canvas *c, int x, int y, rgba col, int cover) {
    if (cover <= 0) return;
    for (int i = 0; i < c->ncr; i++) {
        source(c->cr[i], col, cover / 255.0);
        cairo_rectangle(c->cr[i], x, y, 1, 1);
        cairo_fill(c->cr[i]);
    }
    c->stale = 1;
}

void canvas_fill(canvas *c, int x, int y, int w, int h, rgba col) {
    if (w <= 0 || h <= 0) return;
    for (int i = 0; i < c->ncr; i++) {
        source(c->cr[i], col, 1);
        cairo_rectangle(c->cr[i], x, y, w, h);
        cairo_fill(c->cr[i]);
    }
    c->stale = 1;
}

void canvas_hline(canvas *c, int x0, int x1, int y, rgba col) {
    if (x1 < x0) {
        int t = x0;
        x0 = x1, x1 = t;
    }
    canvas_fill(c, x0, y, x1 - x0 + 1, 1, col);
}

void canvas_vline(canvas *c, int x, int y0, int y1, rgba col) {
    if (y1 < y0) {
        int t = y0;
        y0 = y1, y1 = t;
    }
    canvas_fill(c, x, y0, 1, y1 - y0 + 1, col);
}

void canvas_frame(canvas *c, int x, int y, int w, int h, rgba col) {
    if (w <= 0 || h <= 0) return;
    canvas_hline(c, x, x + w - 1, y, col);
    canvas_hline(c, x, x + w - 1, y + h - 1, col);
    if (h > 2) {
        canvas_vline(c, x, y + 1, y + h - 2, col);
        canvas_vline(c, x + w - 1, y + 1, y + h - 2, col);
    }
}

static int finite4(float a, float b, float c, float d) {
    return isfinite(a) && isfinite(b) && isfinite(c) && isfinite(d);
}

/* Coordinates far outside the canvas (a value that overflowed the axis) are pulled in so cairo's
 * fixed-point arithmetic keeps the line's direction. */
static double tame(double v) {
    return v > 1e6 ? 1e6 : (v < -1e6 ? -1e6 : v);
}

static void stroke_style(cairo_t *cr, float width, rgba col) {
    source(cr, col, 1);
    cairo_set_line_width(cr, width);
    cairo_set_line_cap(cr, CAIRO_LINE_CAP_ROUND);
    cairo_set_line_join(cr, CAIRO_LINE_JOIN_ROUND);
}

void canvas_line(canvas *c, float x0, float y0, float x1, float y1, float width, rgba col) {
    if (!finite4(x0, y0, x1, y1)) return;
    for (int i = 0; i < c->ncr; i++) {
        cairo_t *cr = c->cr[i];
        stroke_style(cr, width, col);
        cairo_move_to(cr, tame(x0), tame(y0));
        cairo_line_to(cr, tame(x1), tame(y1));
        cairo_stroke(cr);
    }
    c->stale = 1;
}

void canvas_dashed(canvas *c, float x0, float y0, float x1, float y1, float width, float on,
                   float off, rgba col) {
    if (!finite4(x0, y0, x1, y1)) return;
    if (on <= 0) return canvas_line(c, x0, y0, x1, y1, width, col);
    double d[2] = {on, off};
    for (int i = 0; i < c->ncr; i++) {
        cairo_t *cr = c->cr[i];
        stroke_style(cr, width, col);
        cairo_set_line_cap(cr, CAIRO_LINE_CAP_BUTT);
        cairo_set_dash(cr, d, 2, 0);
        cairo_move_to(cr, tame(x0), tame(y0));
        cairo_line_to(cr, tame(x1), tame(y1));
        cairo_stroke(cr);
        cairo_set_dash(cr, NULL, 0, 0);
    }
    c->stale = 1;
}

/* One path for the whole line, so the joints of many short segments do not darken it. Series
 * of hundreds of points are rasterised with cairo's fast anti-aliasing (4x4 samples a pixel):
 * the default's exact coverage took 3 ms for 512 points, a frame's budget over five series. */
void canvas_polyline(canvas *c, const float *xy, int n, float width, rgba col) {
    for (int i = 0; i < c->ncr; i++) {
        cairo_t *cr = c->cr[i];
        stroke_style(cr, width, col);
        cairo_set_antialias(cr, CAIRO_ANTIALIAS_FAST);
        cairo_set_tolerance(cr, 0.25);
        int run = 0, drawn = 0;
        for (int k = 0; k < n; k++) {
            float x = xy[2 * k], y = xy[2 * k + 1];
            if (!isfinite(x) || !isfinite(y)) {
                run = 0;
                continue;
            }
            if (run++ == 0)
                cairo_move_to(cr, tame(x), tame(y));
            else
                cairo_line_to(cr, tame(x), tame(y)), drawn = 1;
        }
        if (drawn) cairo_stroke(cr);
        cairo_new_path(cr);
        cairo_set_antialias(cr, CAIRO_ANTIALIAS_DEFAULT);
        cairo_set_tolerance(cr, 0.1);
    }
    /* a single point: a dot */
    if (n == 1 && isfinite(xy[0]) && isfinite(xy[1])) canvas_disc(c, xy[0], xy[1], width / 2, col);
    c->stale = 1;
}

void canvas_polygon(canvas *c, const float *xy, int n, rgba col) {
    for (int i = 0; i < c->ncr; i++) {
        cairo_t *cr = c->cr[i];
        int k = 0;
        for (int j = 0; j < n; j++) {
            if (!isfinite(xy[2 * j]) || !isfinite(xy[2 * j + 1])) continue;
            if (k++ == 0)
                cairo_move_to(cr, tame(xy[2 * j]), tame(xy[2 * j + 1]));
            else
                cairo_line_to(cr, tame(xy[2 * j]), tame(xy[2 * j + 1]));
        }
        if (k >= 3) {
            cairo_close_path(cr);
            source(cr, col, 1);
            cairo_fill(cr);
        }
        cairo_new_path(cr);
    }
    c->stale = 1;
}

void canvas_disc(canvas *c, float cx, float cy, float r, rgba col) {
    if (!isfinite(cx) || !isfinite(cy) || !(r > 0)) return;
    for (int i = 0; i < c->ncr; i++) {
        source(c->cr[i], col, 1);
        cairo_arc(c->cr[i], tame(cx), tame(cy), r, 0, 2 * M_PI);
        cairo_fill(c->cr[i]);
    }
    c->stale = 1;
}

void canvas_image(canvas *c, double x, double y, double w, double h, const rgba *cells, int cols,
                  int rows) {
    if (cols <= 0 || rows <= 0 || !(w > 0) || !(h > 0)) return;
    cairo_surface_t *im = cairo_image_surface_create(CAIRO_FORMAT_RGB24, cols, rows);
    if (cairo_surface_status(im) != CAIRO_STATUS_SUCCESS) {
        cairo_surface_destroy(im);
        return;
    }
    unsigned char *d = cairo_image_surface_get_data(im);
    int stride = cairo_image_surface_get_stride(im);
    for (int r = 0; r < rows; r++) {
        uint32_t *row = (uint32_t *)(d + (size_t)r * (size_t)stride);
        for (int k = 0; k < cols; k++) {
            rgba p = cells[(size_t)r * (size_t)cols + (size_t)k];
            row[k] = (uint32_t)p.r << 16 | (uint32_t)p.g << 8 | p.b;
        }
    }
    cairo_surface_mark_dirty(im);
    for (int i = 0; i < c->ncr; i++) {
        cairo_t *cr = c->cr[i];
        cairo_save(cr);
        cairo_rectangle(cr, x, y, w, h);
        cairo_clip(cr);
        cairo_translate(cr, x, y);
        cairo_scale(cr, w / cols, h / rows);
        cairo_set_source_surface(cr, im, 0, 0);
        cairo_pattern_set_filter(cairo_get_source(cr), CAIRO_FILTER_NEAREST);
        cairo_pattern_set_extend(cairo_get_source(cr), CAIRO_EXTEND_PAD);
        cairo_paint(cr);
        cairo_restore(cr);
    }
    cairo_surface_destroy(im);
    c->stale = 1;
}

/* ---- text ---- */

/* Advances past one UTF-8 character (malformed bytes one at a time). */
static void next_char(const char **ps) {
    const unsigned char *s = (const unsigned char *)*ps;
    int n = 1;
    if ((s[0] & 0xE0) == 0xC0 && (s[1] & 0xC0) == 0x80)
        n = 2;
    else if ((s[0] & 0xF0) == 0xE0 && (s[1] & 0xC0) == 0x80 && (s[2] & 0xC0) == 0x80)
        n = 3;
    else if ((s[0] & 0xF8) == 0xF0 && (s[1] & 0xC0) == 0x80 && (s[2] & 0xC0) == 0x80 &&
             (s[3] & 0xC0) == 0x80)
        n = 4;
    *ps += n;
}

/* Valid UTF-8 of s (malformed bytes as '?'), for cairo, which draws nothing of invalid text. */
static void clean_utf8(const char *s, size_t len, char *out, size_t n) {
    size_t o = 0;
    const char *end = s + len;
    while (s < end && *s && o + 5 < n) {
        const char *q = s;
        next_char(&q);
        if (q > end) q = end;
        size_t k = (size_t)(q - s);
        if (k == 1 && (unsigned char)*s >= 0x80)
            out[o++] = '?';
        else
            memcpy(out + o, s, k), o += k;
        s = q;
    }
    out[o] = 0;
}

/* Text in runs: plain, subscript ("_{...}") and superscript ("^{...}"). The callback gets each
 * run's bytes and its kind (0 plain, 1 sub, 2 super). */
typedef void run_fn(void *ctx, const char *s, size_t n, int kind);

static void text_runs(const char *s, run_fn *fn, void *ctx) {
    const char *p = s, *plain = s;
    while (*p) {
        if ((p[0] == '_' || p[0] == '^') && p[1] == '{') {
            const char *close = strchr(p + 2, '}');
            if (close) {
                if (p > plain) fn(ctx, plain, (size_t)(p - plain), 0);
                fn(ctx, p + 2, (size_t)(close - p - 2), p[0] == '_' ? 1 : 2);
                p = plain = close + 1;
                continue;
            }
        }
        p++;
    }
    if (p > plain) fn(ctx, plain, (size_t)(p - plain), 0);
}

static const double SCRIPT_SIZE = 0.72;

typedef struct text_pass {
    cairo_t *cr; /* NULL: measure only */
    int font;
    double x, base, w;
} text_pass;

static void run_one(void *ctx, const char *s, size_t n, int kind) {
    text_pass *t = ctx;
    char buf[1024];
    clean_utf8(s, n, buf, sizeof buf);
    cairo_t *cr = t->cr ? t->cr : g_font.measure;
    use_font(cr, t->font, kind ? SCRIPT_SIZE : 1.0);
    cairo_text_extents_t te;
    cairo_text_extents(cr, buf, &te);
    if (t->cr) {
        double size = FONT_SIZE[t->font == FONT_LARGE];
        double dy = kind == 1 ? 0.22 * size : (kind == 2 ? -0.38 * size : 0);
        cairo_move_to(cr, t->x + t->w, t->base + dy);
        cairo_show_text(cr, buf);
    }
    t->w += te.x_advance;
}

static double text_width_d(const char *s, int font) {
    font_init();
    text_pass t = {NULL, font, 0, 0, 0};
    text_runs(s, run_one, &t);
    return t.w;
}

int canvas_text_width(const char *s, int font) {
    return (int)ceil(text_width_d(s, font) - 1e-6);
}

int canvas_text_height(int font) {
    font_init();
    return g_font.ascent[font == FONT_LARGE] + g_font.descent[font == FONT_LARGE];
}

int canvas_text(canvas *c, int x, int y, const char *s, int font, int align, rgba col) {
    font_init();
    double w = text_width_d(s, font);
    double x0 = align == ALIGN_CENTER ? x - w / 2 : (align == ALIGN_RIGHT ? x - w : x);
    for (int i = 0; i < c->ncr; i++) {
        source(c->cr[i], col, 1);
        text_pass t = {c->cr[i], font, x0, y + g_font.ascent[font == FONT_LARGE], 0};
        text_runs(s, run_one, &t);
        cairo_new_path(c->cr[i]);
    }
    c->stale = 1;
    return (int)ceil(w - 1e-6);
}

int canvas_text_up(canvas *c, int x, int y, const char *s, int font, rgba col) {
    font_init();
    double w = text_width_d(s, font);
    for (int i = 0; i < c->ncr; i++) {
        cairo_t *cr = c->cr[i];
        cairo_save(cr);
        /* the pen runs upwards from y + w/2; the baseline is a vertical line at x + ascent */
        cairo_translate(cr, x + g_font.ascent[font == FONT_LARGE], y + w / 2);
        cairo_rotate(cr, -M_PI / 2);
        source(cr, col, 1);
        text_pass t = {cr, font, 0, 0, 0};
        text_runs(s, run_one, &t);
        cairo_new_path(cr);
        cairo_restore(cr);
    }
    c->stale = 1;
    return (int)ceil(w - 1e-6);
}

int canvas_text_fit(canvas *c, int x, int y, const char *s, int font, int align, rgba col,
                    int maxw) {
    if (canvas_text_width(s, font) <= maxw) return canvas_text(c, x, y, s, font, align, col);
    /* the longest prefix of whole characters that fits with the ellipsis */
    char buf[512];
    const char *ell = "\xe2\x80\xa6";
    int ew = canvas_text_width(ell, font);
    size_t keep = 0;
    const char *q = s;
    while (*q) {
        const char *next = q;
        next_char(&next);
        size_t len = (size_t)(next - s);
        if (len + 4 > sizeof buf) break;
        memcpy(buf, s, len);
        buf[len] = 0;
        if (canvas_text_width(buf, font) + ew > maxw) break;
        keep = len, q = next;
    }
    memcpy(buf, s, keep);
    memcpy(buf + keep, ell, 4);
    return canvas_text(c, x, y, buf, font, align, col);
}

/* width of the bytes s[0 .. len) */
static int width_of(const char *s, size_t len, int font) {
    char buf[1024];
    if (len >= sizeof buf) len = sizeof buf - 1;
    memcpy(buf, s, len);
    buf[len] = 0;
    return canvas_text_width(buf, font);
}

int canvas_text_breaks(const char *s, int font, int maxw, int *starts, int n) {
    int lines = 0;
    size_t pos = 0, total = strlen(s);
    while (pos < total) {
        while (s[pos] == ' ') pos++; /* a line never starts with a space */
        if (pos >= total) break;
        if (lines < n) starts[lines] = (int)pos;
        lines++;
        /* the longest run of whole words from pos that fits; at least one word */
        size_t end = pos, scan = pos;
        while (scan < total) {
            size_t word_end = scan;
            while (word_end < total && s[word_end] == ' ') word_end++;
            while (word_end < total && s[word_end] != ' ') word_end++;
            if (end > pos && width_of(s + pos, word_end - pos, font) > maxw) break;
            end = scan = word_end;
        }
        pos = end;
    }
    return lines;
}

int canvas_text_wrap(canvas *c, int x, int y, const char *s, int font, rgba col, int maxw,
                     int max_lines) {
    int starts[64];
    int n = canvas_text_breaks(s, font, maxw, starts, 64);
    if (n > 64) n = 64;
    int shown = n < max_lines ? n : max_lines, lh = canvas_text_height(font) + 2;
    char buf[1024];
    for (int i = 0; i < shown; i++) {
        /* the last line shown takes the rest of the text when lines are left out */
        size_t from = (size_t)starts[i];
        size_t to = (i + 1 < n && i + 1 < shown) ? (size_t)starts[i + 1] : strlen(s);
        size_t len = to - from < sizeof buf - 1 ? to - from : sizeof buf - 1;
        memcpy(buf, s + from, len);
        while (len > 0 && buf[len - 1] == ' ') len--;
        buf[len] = 0;
        canvas_text_fit(c, x, y + i * lh, buf, font, ALIGN_LEFT, col, maxw);
    }
    return shown;
}
