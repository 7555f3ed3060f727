/* canvas.c: pixels, clipping, anti-aliased lines and discs, and text from the built-in font. */
#include "canvas.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

typedef struct font_glyph {
    uint32_t cp;
    int x0, y0; /* bitmap offset from the pen on the baseline */
    int w, h;
    int adv64; /* advance, 1/64 pixel */
    unsigned off;
} font_glyph;

typedef struct font_face {
    int px, ascent, descent, n;
    const font_glyph *glyphs;
    const unsigned char *alpha;
} font_face;

#include "font_data.h"

int canvas_init(canvas *c, int w, int h, err *e) {
    memset(c, 0, sizeof *c);
    if (w < 16 || h < 16 || w > 8192 || h > 8192)
        return err_set(e, "canvas size %dx%d out of range (16..8192)", w, h);
    c->px = malloc((size_t)w * (size_t)h * 4);
    if (!c->px) return err_set(e, "out of memory for a %dx%d canvas", w, h);
    c->w = w, c->h = h;
    canvas_unclip(c);
    return 0;
}

void canvas_free(canvas *c) {
    free(c->px);
    memset(c, 0, sizeof *c);
}

void canvas_clear(canvas *c, rgba col) {
    uint8_t *p = c->px;
    size_t n = (size_t)c->w * (size_t)c->h;
    for (size_t i = 0; i < n; i++, p += 4) p[0] = col.r, p[1] = col.g, p[2] = col.b, p[3] = col.a;
}

void canvas_unclip(canvas *c) {
    c->cx0 = 0, c->cy0 = 0, c->cx1 = c->w, c->cy1 = c->h;
}

void canvas_clip(canvas *c, int x, int y, int w, int h) {
    c->cx0 = x < 0 ? 0 : x;
    c->cy0 = y < 0 ? 0 : y;
    c->cx1 = x + w > c->w ? c->w : x + w;
    c->cy1 = y + h > c->h ? c->h : y + h;
    if (c->cx1 < c->cx0) c->cx1 = c->cx0;
    if (c->cy1 < c->cy0) c->cy1 = c->cy0;
}

/* dst = dst + (src - dst) * a / 255, rounded; the canvas stays opaque where it was. */
static inline void blend_px(uint8_t *p, rgba col, int a) {
    if (a >= 255) {
        p[0] = col.r, p[1] = col.g, p[2] = col.b, p[3] = 255;
        return;
    }
    p[0] = (uint8_t)(p[0] + ((col.r - p[0]) * a + (col.r >= p[0] ? 127 : -127)) / 255);
    p[1] = (uint8_t)(p[1] + ((col.g - p[1]) * a + (col.g >= p[1] ? 127 : -127)) / 255);
    p[2] = (uint8_t)(p[2] + ((col.b - p[2]) * a + (col.b >= p[2] ? 127 : -127)) / 255);
    p[3] = (uint8_t)(p[3] + ((255 - p[3]) * a + 127) / 255);
}

void canvas_blend(canvas *c, int x, int y, rgba col, int cover) {
    if (x < c->cx0 || x >= c->cx1 || y < c->cy0 || y >= c->cy1 || cover <= 0) return;
    int a = cover * col.a / 255;
    if (a > 0) blend_px(c->px + ((size_t)y * (size_t)c->w + (size_t)x) * 4, col, a);
}

void canvas_fill(canvas *c, int x, int y, int w, int h, rgba col) {
    int x0 = x < c->cx0 ? c->cx0 : x, y0 = y < c->cy0 ? c->cy0 : y;
    int x1 = x + w > c->cx1 ? c->cx1 : x + w, y1 = y + h > c->cy1 ? c->cy1 : y + h;
    for (int j = y0; j < y1; j++) {
        uint8_t *p = c->px + ((size_t)j * (size_t)c->w + (size_t)x0) * 4;
        for (int i = x0; i < x1; i++, p += 4) blend_px(p, col, col.a);
    }
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

/* Coverage (0..1) of the pixel centred at (px, py) by a segment of half-width hw. */
static inline float seg_cover(float px, float py, float x0, float y0, float dx, float dy,
                              float len2, float hw) {
    float t = len2 > 0 ? ((px - x0) * dx + (py - y0) * dy) / len2 : 0;
    if (t < 0) t = 0;
    if (t > 1) t = 1;
    float ex = px - (x0 + t * dx), ey = py - (y0 + t * dy);
    float d = sqrtf(ex * ex + ey * ey);
    float a = hw + 0.5f - d;
    return a <= 0 ? 0 : (a >= 1 ? 1 : a);
}

/* The clipped pixel box of a segment, or 0 when nothing of it is visible. */
static int seg_box(const canvas *c, float x0, float y0, float x1, float y1, float hw, int *bx0,
                   int *by0, int *bx1, int *by1) {
    if (!isfinite(x0) || !isfinite(y0) || !isfinite(x1) || !isfinite(y1)) return 0;
    float m = hw + 1.0f;
    float lx = fminf(x0, x1) - m, hx = fmaxf(x0, x1) + m;
    float ly = fminf(y0, y1) - m, hy = fmaxf(y0, y1) + m;
    if (hx < c->cx0 || lx >= c->cx1 || hy < c->cy0 || ly >= c->cy1) return 0;
    *bx0 = lx < c->cx0 ? c->cx0 : (int)floorf(lx);
    *by0 = ly < c->cy0 ? c->cy0 : (int)floorf(ly);
    *bx1 = hx >= c->cx1 ? c->cx1 - 1 : (int)ceilf(hx);
    *by1 = hy >= c->cy1 ? c->cy1 - 1 : (int)ceilf(hy);
    return 1;
}

void canvas_line(canvas *c, float x0, float y0, float x1, float y1, float width, rgba col) {
    float hw = width * 0.5f;
    int bx0, by0, bx1, by1;
    if (!seg_box(c, x0, y0, x1, y1, hw, &bx0, &by0, &bx1, &by1)) return;
    float dx = x1 - x0, dy = y1 - y0, len2 = dx * dx + dy * dy;
    for (int y = by0; y <= by1; y++)
        for (int x = bx0; x <= bx1; x++) {
            float a = seg_cover((float)x + 0.5f, (float)y + 0.5f, x0, y0, dx, dy, len2, hw);
            if (a > 0) canvas_blend(c, x, y, col, (int)(a * 255.0f + 0.5f));
        }
}

void canvas_dashed(canvas *c, float x0, float y0, float x1, float y1, float width, float on,
                   float off, rgba col) {
    float dx = x1 - x0, dy = y1 - y0, len = sqrtf(dx * dx + dy * dy);
    if (!(len > 0) || on <= 0) return canvas_line(c, x0, y0, x1, y1, width, col);
    float ux = dx / len, uy = dy / len;
    for (float s = 0; s < len; s += on + off) {
        float e = s + on > len ? len : s + on;
        canvas_line(c, x0 + ux * s, y0 + uy * s, x0 + ux * e, y0 + uy * e, width, col);
    }
}

/* Polylines accumulate the maximum coverage of their segments in a scratch mask and blend once,
 * so the joints of many short segments do not darken the line. */
void canvas_polyline(canvas *c, const float *xy, int n, float width, rgba col) {
    float hw = width * 0.5f;
    int gx0 = c->cx1, gy0 = c->cy1, gx1 = -1, gy1 = -1;
    for (int i = 0; i + 1 < n; i++) {
        int bx0, by0, bx1, by1;
        if (!seg_box(c, xy[2 * i], xy[2 * i + 1], xy[2 * i + 2], xy[2 * i + 3], hw, &bx0, &by0,
                     &bx1, &by1))
            continue;
        if (bx0 < gx0) gx0 = bx0;
        if (by0 < gy0) gy0 = by0;
        if (bx1 > gx1) gx1 = bx1;
        if (by1 > gy1) gy1 = by1;
    }
    if (gx1 < gx0 || gy1 < gy0) {
        /* a single point: a dot */
        if (n == 1 && isfinite(xy[0]) && isfinite(xy[1])) canvas_disc(c, xy[0], xy[1], hw, col);
        return;
    }
    int mw = gx1 - gx0 + 1, mh = gy1 - gy0 + 1;
    uint8_t *mask = calloc((size_t)mw * (size_t)mh, 1);
    if (!mask) {
        for (int i = 0; i + 1 < n; i++)
            canvas_line(c, xy[2 * i], xy[2 * i + 1], xy[2 * i + 2], xy[2 * i + 3], width, col);
        return;
    }
    for (int i = 0; i + 1 < n; i++) {
        float x0 = xy[2 * i], y0 = xy[2 * i + 1], x1 = xy[2 * i + 2], y1 = xy[2 * i + 3];
        int bx0, by0, bx1, by1;
        if (!seg_box(c, x0, y0, x1, y1, hw, &bx0, &by0, &bx1, &by1)) continue;
        float dx = x1 - x0, dy = y1 - y0, len2 = dx * dx + dy * dy;
        for (int y = by0; y <= by1; y++) {
            uint8_t *m = mask + (size_t)(y - gy0) * (size_t)mw;
            for (int x = bx0; x <= bx1; x++) {
                float a = seg_cover((float)x + 0.5f, (float)y + 0.5f, x0, y0, dx, dy, len2, hw);
                int v = (int)(a * 255.0f + 0.5f);
                if (v > m[x - gx0]) m[x - gx0] = (uint8_t)v;
            }
        }
    }
    for (int y = 0; y < mh; y++)
        for (int x = 0; x < mw; x++) {
            int v = mask[(size_t)y * (size_t)mw + (size_t)x];
            if (v) canvas_blend(c, gx0 + x, gy0 + y, col, v);
        }
    free(mask);
}

void canvas_disc(canvas *c, float cx, float cy, float r, rgba col) {
    if (!isfinite(cx) || !isfinite(cy)) return;
    int x0 = (int)floorf(cx - r - 1), x1 = (int)ceilf(cx + r + 1);
    int y0 = (int)floorf(cy - r - 1), y1 = (int)ceilf(cy + r + 1);
    for (int y = y0; y <= y1; y++)
        for (int x = x0; x <= x1; x++) {
            float dx = (float)x + 0.5f - cx, dy = (float)y + 0.5f - cy;
            float a = r + 0.5f - sqrtf(dx * dx + dy * dy);
            if (a > 0) canvas_blend(c, x, y, col, a >= 1 ? 255 : (int)(a * 255.0f + 0.5f));
        }
}

/* ---- text ---- */

static const font_face *face(int font) {
    return font == FONT_LARGE ? &FACE_LARGE : &FACE_SMALL;
}

/* Decodes one UTF-8 character; malformed bytes decode as '?' and advance by one. */
static uint32_t utf8_next(const char **ps) {
    const unsigned char *s = (const unsigned char *)*ps;
    uint32_t cp = '?';
    int n = 1;
    if (s[0] < 0x80)
        cp = s[0];
    else if ((s[0] & 0xE0) == 0xC0 && (s[1] & 0xC0) == 0x80)
        cp = ((uint32_t)(s[0] & 0x1F) << 6) | (s[1] & 0x3F), n = 2;
    else if ((s[0] & 0xF0) == 0xE0 && (s[1] & 0xC0) == 0x80 && (s[2] & 0xC0) == 0x80)
        cp = ((uint32_t)(s[0] & 0x0F) << 12) | ((uint32_t)(s[1] & 0x3F) << 6) | (s[2] & 0x3F),
        n = 3;
    else if ((s[0] & 0xF8) == 0xF0 && (s[1] & 0xC0) == 0x80 && (s[2] & 0xC0) == 0x80 &&
             (s[3] & 0xC0) == 0x80)
        cp = 0xFFFD, n = 4; /* outside the font anyway */
    *ps += n;
    return cp;
}

static const font_glyph *glyph(const font_face *f, uint32_t cp) {
    /* ASCII comes first, then Latin-1 from U+00A1, both in order */
    if (cp >= 32 && cp < 127) return &f->glyphs[cp - 32];
    if (cp >= 0xA1 && cp <= 0xFF) return &f->glyphs[95 + cp - 0xA1];
    for (int i = 95 + 95; i < f->n; i++)
        if (f->glyphs[i].cp == cp) return &f->glyphs[i];
    return &f->glyphs['?' - 32];
}

int canvas_text_width(const char *s, int font) {
    const font_face *f = face(font);
    int pen64 = 0;
    while (*s) pen64 += glyph(f, utf8_next(&s))->adv64;
    return (pen64 + 63) / 64;
}

int canvas_text_height(int font) {
    const font_face *f = face(font);
    return f->ascent + f->descent;
}

/* Draws glyph g with its pen at (px, baseline) either upright or rotated upwards. */
static void draw_glyph(canvas *c, const font_face *f, const font_glyph *g, int px, int base, int up,
                       rgba col) {
    const unsigned char *a = f->alpha + g->off;
    for (int j = 0; j < g->h; j++)
        for (int i = 0; i < g->w; i++) {
            int v = a[j * g->w + i];
            if (!v) continue;
            if (!up) canvas_blend(c, px + g->x0 + i, base + g->y0 + j, col, v);
            /* rotated a quarter turn counter-clockwise: glyph x runs up, glyph y runs right */
            else
                canvas_blend(c, base + g->y0 + j, px - g->x0 - i, col, v);
        }
}

int canvas_text(canvas *c, int x, int y, const char *s, int font, int align, rgba col) {
    const font_face *f = face(font);
    int w = canvas_text_width(s, font);
    if (align == ALIGN_CENTER)
        x -= w / 2;
    else if (align == ALIGN_RIGHT)
        x -= w;
    int pen64 = x * 64, base = y + f->ascent;
    while (*s) {
        const font_glyph *g = glyph(f, utf8_next(&s));
        draw_glyph(c, f, g, (pen64 + 32) >> 6, base, 0, col);
        pen64 += g->adv64;
    }
    return w;
}

int canvas_text_up(canvas *c, int x, int y, const char *s, int font, rgba col) {
    const font_face *f = face(font);
    int w = canvas_text_width(s, font);
    /* the pen runs upwards from y + w/2; the baseline is a vertical line at x + ascent */
    int pen64 = (y + w / 2) * 64, base = x + f->ascent;
    while (*s) {
        const font_glyph *g = glyph(f, utf8_next(&s));
        draw_glyph(c, f, g, (pen64 + 32) >> 6, base, 1, col);
        pen64 -= g->adv64;
    }
    return w;
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
        utf8_next(&next);
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
