/* plot.c: panel layout, ticks, line plots, heatmaps, colour bars, legends. */
#include "plot.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

rgba theme_bg(void) {
    return rgb(255, 255, 255);
}
rgba theme_ink(void) {
    return rgb(34, 34, 34);
}
rgba theme_faint(void) {
    return rgb(110, 110, 110);
}
rgba theme_grid(void) {
    return rgb(228, 228, 228);
}

#define TICK_LEN  4
#define MAX_TICKS 64

/* ---- number formatting ---- */

/* Replaces a leading '-' with the typographic minus and strips "+0" and leading exponent zeros:
 * "1.5e-04" -> "1.5e-4". */
static void tidy(char *buf, size_t n) {
    char *e = strchr(buf, 'e');
    if (e) {
        char *m = e; /* strip trailing zeros of the mantissa */
        if (strchr(buf, '.') && strchr(buf, '.') < e) {
            while (m[-1] == '0') m--;
            if (m[-1] == '.') m--;
        }
        char sign = e[1] == '-' ? '-' : 0;
        const char *d = e + 1 + (e[1] == '-' || e[1] == '+');
        while (*d == '0' && d[1]) d++;
        char tmp[32];
        snprintf(tmp, sizeof tmp, "e%s%s", sign ? "-" : "", d);
        memmove(m, tmp, strlen(tmp) + 1);
    }
    if (buf[0] == '-' && strlen(buf) + 3 < n) {
        memmove(buf + 3, buf + 1, strlen(buf)); /* U+2212 is three bytes in UTF-8 */
        memcpy(buf, "\xe2\x88\x92", 3);
    }
}

void plot_format(char *buf, size_t n, double v, double step) {
    if (!isfinite(v)) {
        snprintf(buf, n, "%s", isnan(v) ? "nan" : (v > 0 ? "inf" : "-inf"));
        return;
    }
    step = fabs(step);
    if (!(step > 0)) step = fabs(v) > 0 ? fabs(v) / 1000 : 1;
    if (fabs(v) < step * 1e-6) {
        snprintf(buf, n, "0");
        return;
    }
    double av = fabs(v);
    if (av >= 1e5 || av < 1e-3) {
        int d = (int)floor(log10(av)) - (int)floor(log10(step) + 1e-9);
        if (d < 0) d = 0;
        if (d > 3) d = 3;
        snprintf(buf, n, "%.*e", d, v);
    } else {
        int d = 0;
        for (; d < 6; d++) {
            double s = step * pow(10, d);
            if (fabs(s - round(s)) < 1e-6 * s) break;
        }
        snprintf(buf, n, "%.*f", d, v);
    }
    tidy(buf, n);
}

/* 10 to the power k with a superscript exponent: "10⁻³". */
static void format_decade(char *buf, size_t n, int k) {
    static const char *SUP[10] = {"\xe2\x81\xb0", "\xc2\xb9",     "\xc2\xb2",     "\xc2\xb3",
                                  "\xe2\x81\xb4", "\xe2\x81\xb5", "\xe2\x81\xb6", "\xe2\x81\xb7",
                                  "\xe2\x81\xb8", "\xe2\x81\xb9"};
    if (k == 0) {
        snprintf(buf, n, "1");
        return;
    }
    if (k == 1) {
        snprintf(buf, n, "10");
        return;
    }
    char exp[40] = "";
    if (k < 0) strcat(exp, "\xe2\x81\xbb"); /* superscript minus */
    char digits[12];
    snprintf(digits, sizeof digits, "%d", abs(k));
    for (char *d = digits; *d; d++) strcat(exp, SUP[*d - '0']);
    snprintf(buf, n, "10%s", exp);
}

/* ---- ticks ---- */

typedef struct tick {
    double v;
    int major;
    char label[32];
} tick;

static double nice_step(double span, int target) {
    double raw = span / (target > 1 ? target : 1);
    double mag = pow(10, floor(log10(raw)));
    double f = raw / mag;
    double s = f <= 1 ? 1 : f <= 2 ? 2 : f <= 2.5 ? 2.5 : f <= 5 ? 5 : 10;
    return s * mag;
}

/* Ticks of an axis for about `target` labelled values. */
static int make_ticks(const axis *a, int target, tick *t, int max) {
    int n = 0;
    double lo = fmin(a->lo, a->hi), hi = fmax(a->lo, a->hi);
    if (a->log) {
        double l0 = log10(lo), l1 = log10(hi);
        int k0 = (int)ceil(l0 - 1e-9), k1 = (int)floor(l1 + 1e-9);
        int decades = k1 - k0 + 1;
        if (decades >= 2) {
            int stride = 1;
            while (decades / stride > target && stride < 100) stride++;
            for (int k = k0; k <= k1 && n < max; k++) {
                if ((k - k0) % stride == 0) {
                    t[n].v = pow(10, k), t[n].major = 1;
                    format_decade(t[n].label, sizeof t[n].label, k);
                    n++;
                }
                if (stride == 1 && decades <= 12)
                    for (int m = 2; m <= 9 && n < max; m++) {
                        double v = m * pow(10, k);
                        if (v <= hi) t[n].v = v, t[n].major = 0, t[n].label[0] = 0, n++;
                    }
            }
            /* minor ticks of the partial decade below the first labelled one */
            if (stride == 1 && decades <= 12)
                for (int m = 2; m <= 9 && n < max; m++) {
                    double v = m * pow(10, k0 - 1);
                    if (v >= lo) t[n].v = v, t[n].major = 0, t[n].label[0] = 0, n++;
                }
            return n;
        }
        /* less than two decades: 1-2-5 values, labelled plainly */
        static const double M[] = {1, 2, 5};
        for (int k = k0 - 1; k <= k1 + 1; k++)
            for (int i = 0; i < 3 && n < max; i++) {
                double v = M[i] * pow(10, k);
                if (v < lo * (1 - 1e-9) || v > hi * (1 + 1e-9)) continue;
                t[n].v = v, t[n].major = 1;
                plot_format(t[n].label, sizeof t[n].label, v, pow(10, k));
                n++;
            }
        if (n >= 2) return n;
        n = 0; /* fall back to linear ticks in a narrow range */
    }
    double step = nice_step(hi - lo, target);
    if (a->integer && step < 1) step = 1;
    double v0 = ceil(lo / step - 1e-9) * step;
    for (int i = 0; n < max; i++) {
        double v = v0 + i * step;
        if (v > hi + step * 1e-9) break;
        if (fabs(v) < step * 1e-9) v = 0;
        t[n].v = v, t[n].major = 1;
        plot_format(t[n].label, sizeof t[n].label, v, step);
        n++;
    }
    return n;
}

/* Ticks that fit in `pixels`, whose labels are at least `gap` apart along the axis. */
static int fit_ticks(const axis *a, int pixels, int horizontal, tick *t, int max) {
    int target = horizontal ? pixels / 70 : pixels / 32;
    if (target < 2) target = 2;
    if (target > 12) target = 12;
    for (;; target--) {
        int n = make_ticks(a, target, t, max);
        if (target <= 2) return n;
        int majors = 0, widest = 0;
        for (int i = 0; i < n; i++)
            if (t[i].major) {
                majors++;
                int w = horizontal ? canvas_text_width(t[i].label, FONT_SMALL)
                                   : canvas_text_height(FONT_SMALL);
                if (w > widest) widest = w;
            }
        if (majors * (widest + (horizontal ? 14 : 6)) <= pixels) return n;
    }
}

/* ---- mapping ---- */

static double axis_t(const axis *a, double v) {
    if (a->log) {
        if (!(v > 0)) return NAN;
        return (log10(v) - log10(a->lo)) / (log10(a->hi) - log10(a->lo));
    }
    return (v - a->lo) / (a->hi - a->lo);
}

static double axis_v(const axis *a, double t) {
    if (a->log) return pow(10, log10(a->lo) + t * (log10(a->hi) - log10(a->lo)));
    return a->lo + t * (a->hi - a->lo);
}

double plot_px(const plot *p, double x) {
    double t = axis_t(&p->ax, x);
    if (p->ax.flip) t = 1 - t;
    return p->x + t * p->w;
}

double plot_py(const plot *p, double y) {
    double t = axis_t(&p->ay, y);
    if (!p->ay.flip) t = 1 - t;
    return p->y + t * p->h;
}

double plot_dx(const plot *p, double px) {
    double t = (px - p->x) / p->w;
    return axis_v(&p->ax, p->ax.flip ? 1 - t : t);
}

double plot_dy(const plot *p, double py) {
    double t = (py - p->y) / p->h;
    return axis_v(&p->ay, p->ay.flip ? t : 1 - t);
}

/* ---- ranges ---- */

void range_init(range *r) {
    r->lo = INFINITY, r->hi = -INFINITY, r->n = 0;
}

void range_add(range *r, double v, int log) {
    if (!isfinite(v) || (log && !(v > 0))) return;
    if (v < r->lo) r->lo = v;
    if (v > r->hi) r->hi = v;
    r->n++;
}

static void axis_sane(axis *a) {
    if (a->log) {
        if (!(a->lo > 0) || !isfinite(a->lo)) a->lo = 1e-3;
        if (!(a->hi > 0) || !isfinite(a->hi)) a->hi = a->lo * 10;
        if (a->hi <= a->lo * 1.0000001) a->lo /= 2, a->hi = a->lo * 4;
    } else {
        if (!isfinite(a->lo)) a->lo = 0;
        if (!isfinite(a->hi)) a->hi = a->lo + 1;
        if (a->hi <= a->lo) {
            double m = fabs(a->lo) > 0 ? fabs(a->lo) * 0.1 : 0.5;
            a->lo -= m, a->hi += m;
        }
        /* a span below float resolution of the values (a constant |k| = 1 +- 1e-7) would print
         * identical tick labels: widen it to a thousandth of the magnitude */
        double mag = fmax(fabs(a->lo), fabs(a->hi)), c = 0.5 * (a->lo + a->hi);
        if (a->hi - a->lo < 1e-3 * mag) a->lo = c - 5e-4 * mag, a->hi = c + 5e-4 * mag;
    }
}

axis axis_fit(const range *r, int want_log, double decades, const char *label) {
    axis a = {0, 1, 0, 0, label, 0};
    if (r->n == 0) return a;
    a.lo = r->lo, a.hi = r->hi;
    if (want_log && r->lo > 0 && log10(r->hi / r->lo) >= decades) {
        a.log = 1;
        double l0 = log10(a.lo), l1 = log10(a.hi), pad = fmax(0.05 * (l1 - l0), 0.05);
        a.lo = pow(10, l0 - pad), a.hi = pow(10, l1 + pad);
    } else {
        double pad = 0.06 * (a.hi - a.lo);
        if (pad == 0) pad = fabs(a.hi) > 0 ? fabs(a.hi) * 0.1 : 0.5;
        /* keep a non-negative quantity's axis from dipping far below zero */
        a.lo = (r->lo >= 0 && r->lo - pad < 0) ? 0 : a.lo - pad;
        a.hi += pad;
        if (a.hi <= a.lo) a.hi = a.lo + 1;
    }
    return a;
}

/* ---- panel ---- */

void plot_begin(plot *p, canvas *c, int x, int y, int w, int h, const char *title, axis ax, axis ay,
                unsigned flags) {
    canvas_note(c, "panel", title);
    canvas_note(c, "axis", ax.label);
    canvas_note(c, "axis", ay.label);
    axis_sane(&ax);
    axis_sane(&ay);
    p->c = c, p->ax = ax, p->ay = ay;
    int th = canvas_text_height(FONT_SMALL);
    int top = title && *title ? th + 6 : 6;
    int left = 6 + (ay.label && *ay.label ? th + 4 : 0);
    int bottom =
        4 + (flags & PLOT_NO_XTICKS ? 0 : th + TICK_LEN + 2) + (ax.label && *ax.label ? th + 2 : 0);
    int right = 10;

    /* y ticks first: their label width sets the left margin */
    tick yt[MAX_TICKS], xt[MAX_TICKS];
    int fh = h - top - bottom;
    int ny = fit_ticks(&ay, fh > 20 ? fh : 20, 0, yt, MAX_TICKS);
    int ylw = 0;
    if (!(flags & PLOT_NO_YTICKS))
        for (int i = 0; i < ny; i++) {
            int tw = canvas_text_width(yt[i].label, FONT_SMALL);
            if (tw > ylw) ylw = tw;
        }
    left += (flags & PLOT_NO_YTICKS ? 0 : ylw + TICK_LEN + 4);
    p->x = x + left, p->y = y + top, p->w = w - left - right, p->h = fh;
    if (p->w < 8) p->w = 8;
    if (p->h < 8) p->h = 8;
    int nx = fit_ticks(&ax, p->w, 1, xt, MAX_TICKS);

    canvas_unclip(c);
    canvas_fill(c, p->x, p->y, p->w, p->h, theme_bg());
    rgba ink = theme_ink(), faint = theme_faint();
    if (title && *title)
        canvas_text_fit(c, p->x, y + 2, title, FONT_SMALL, ALIGN_LEFT, ink, x + w - p->x);

    /* grid and ticks */
    for (int i = 0; i < ny; i++) {
        double py = plot_py(p, yt[i].v);
        if (!(py >= p->y - 0.5 && py <= p->y + p->h + 0.5)) continue;
        int iy = (int)floor(py);
        if (iy >= p->y + p->h) iy = p->y + p->h - 1;
        if (yt[i].major && !(flags & PLOT_NO_GRID))
            canvas_hline(c, p->x + 1, p->x + p->w - 2, iy, theme_grid());
        int len = yt[i].major ? TICK_LEN : TICK_LEN / 2;
        canvas_hline(c, p->x - len, p->x - 1, iy, ink);
        if (yt[i].major && !(flags & PLOT_NO_YTICKS))
            canvas_text(c, p->x - TICK_LEN - 3, iy - th / 2, yt[i].label, FONT_SMALL, ALIGN_RIGHT,
                        ink);
    }
    for (int i = 0; i < nx; i++) {
        double px = plot_px(p, xt[i].v);
        if (!(px >= p->x - 0.5 && px <= p->x + p->w + 0.5)) continue;
        int ix = (int)floor(px);
        if (ix >= p->x + p->w) ix = p->x + p->w - 1;
        if (xt[i].major && !(flags & PLOT_NO_GRID))
            canvas_vline(c, ix, p->y + 1, p->y + p->h - 2, theme_grid());
        int len = xt[i].major ? TICK_LEN : TICK_LEN / 2;
        canvas_vline(c, ix, p->y + p->h, p->y + p->h + len - 1, ink);
        if (xt[i].major && !(flags & PLOT_NO_XTICKS)) {
            /* keep the first and last labels inside the panel */
            int tw = canvas_text_width(xt[i].label, FONT_SMALL);
            int lx = ix - tw / 2;
            if (lx < x) lx = x;
            if (lx + tw > x + w) lx = x + w - tw;
            canvas_text(c, lx, p->y + p->h + TICK_LEN + 1, xt[i].label, FONT_SMALL, ALIGN_LEFT,
                        ink);
        }
    }
    if (ax.label && *ax.label)
        canvas_text(c, p->x + p->w / 2, y + h - th - 2, ax.label, FONT_SMALL, ALIGN_CENTER, faint);
    if (ay.label && *ay.label)
        canvas_text_up(c, x + 4, p->y + p->h / 2, ay.label, FONT_SMALL, faint);
    canvas_frame(c, p->x - 1, p->y - 1, p->w + 2, p->h + 2, ink);
    canvas_clip(c, p->x, p->y, p->w, p->h);
}

void plot_end(plot *p) {
    canvas_unclip(p->c);
    canvas_frame(p->c, p->x - 1, p->y - 1, p->w + 2, p->h + 2, theme_ink());
}

/* ---- data ---- */

static void draw_points(plot *p, float *xy, int n, int style, float width, rgba col) {
    if (style == STYLE_MARKERS) {
        for (int i = 0; i < n; i++) canvas_disc(p->c, xy[2 * i], xy[2 * i + 1], width, col);
        return;
    }
    /* split at NaN into polylines */
    int s = 0;
    for (int i = 0; i <= n; i++) {
        if (i < n && isfinite(xy[2 * i]) && isfinite(xy[2 * i + 1])) continue;
        if (i - s >= 1) {
            if (style == STYLE_DASHED)
                for (int j = s; j + 1 < i; j++)
                    canvas_dashed(p->c, xy[2 * j], xy[2 * j + 1], xy[2 * j + 2], xy[2 * j + 3],
                                  width, 6, 4, col);
            else
                canvas_polyline(p->c, xy + 2 * s, i - s, width, col);
        }
        s = i + 1;
    }
}

void plot_series(plot *p, const float *y, size_t stride, int64_t n, double x0, double dx, int style,
                 float width, rgba col) {
    if (n <= 0) return;
    /* a step plot needs two points per value */
    size_t m = style == STYLE_STEP ? (size_t)n * 2 : (size_t)n;
    float *xy = malloc(m * 2 * sizeof *xy);
    if (!xy) return;
    size_t k = 0;
    for (int64_t i = 0; i < n; i++) {
        double v = y[(size_t)i * stride];
        float py = (float)plot_py(p, v);
        if (style == STYLE_STEP) {
            xy[2 * k] = (float)plot_px(p, x0 + (i - 0.5) * dx), xy[2 * k + 1] = py, k++;
            xy[2 * k] = (float)plot_px(p, x0 + (i + 0.5) * dx), xy[2 * k + 1] = py, k++;
        } else {
            xy[2 * k] = (float)plot_px(p, x0 + i * dx), xy[2 * k + 1] = py, k++;
        }
    }
    draw_points(p, xy, (int)k, style, width, col);
    free(xy);
    /* infinities are marked where they happened (a triangle at the edge they went past), not
     * left as a gap that reads like "not recorded" */
    for (int64_t i = 0; i < n; i++) {
        float v = y[(size_t)i * stride];
        if (!isinf(v)) continue;
        float px = (float)plot_px(p, x0 + i * dx), edge = v > 0 ? p->y + 4.0f : p->y + p->h - 4.0f;
        float dir = v > 0 ? -1.0f : 1.0f;
        canvas_line(p->c, px - 3, edge - 2 * dir, px, edge + 2 * dir, 1.4f, rgb(200, 30, 30));
        canvas_line(p->c, px + 3, edge - 2 * dir, px, edge + 2 * dir, 1.4f, rgb(200, 30, 30));
    }
}

void plot_xy(plot *p, const double *x, const double *y, int n, int style, float width, rgba col) {
    if (n <= 0) return;
    float *xy = malloc((size_t)n * 2 * sizeof *xy);
    if (!xy) return;
    for (int i = 0; i < n; i++)
        xy[2 * i] = (float)plot_px(p, x[i]), xy[2 * i + 1] = (float)plot_py(p, y[i]);
    draw_points(p, xy, n, style, width, col);
    free(xy);
}

void plot_hline(plot *p, double y, rgba col, int style, const char *label) {
    double py = plot_py(p, y);
    if (!isfinite(py)) return;
    float fy = (float)floor(py) + 0.5f;
    if (style == STYLE_DASHED)
        canvas_dashed(p->c, (float)p->x, fy, (float)(p->x + p->w), fy, 1.2f, 6, 4, col);
    else
        canvas_line(p->c, (float)p->x, fy, (float)(p->x + p->w), fy, 1.2f, col);
    plot_hline_label(p, y, col, label);
}

void plot_hline_label(plot *p, double y, rgba col, const char *label) {
    double py = plot_py(p, y);
    if (!isfinite(py) || !label || !*label) return;
    float fy = (float)floor(py) + 0.5f;
    int th = canvas_text_height(FONT_SMALL), tw = canvas_text_width(label, FONT_SMALL);
    int ly = (int)fy - th - 1;
    if (ly < p->y + 1) ly = (int)fy + 2;
    /* on a plate of the background, so the data drawn since does not run through the words */
    rgba plate = theme_bg();
    plate.a = 215;
    canvas_fill(p->c, p->x + p->w - 6 - tw, ly, tw + 4, th, plate);
    canvas_text(p->c, p->x + p->w - 4, ly, label, FONT_SMALL, ALIGN_RIGHT, col);
}

void plot_vline(plot *p, double x, rgba col, int style, const char *label) {
    double px = plot_px(p, x);
    if (!isfinite(px)) return;
    float fx = (float)floor(px) + 0.5f;
    if (style == STYLE_DASHED)
        canvas_dashed(p->c, fx, (float)p->y, fx, (float)(p->y + p->h), 1.2f, 6, 4, col);
    else
        canvas_line(p->c, fx, (float)p->y, fx, (float)(p->y + p->h), 1.2f, col);
    if (label && *label) {
        int tw = canvas_text_width(label, FONT_SMALL);
        int lx = (int)fx + 3;
        if (lx + tw > p->x + p->w) lx = (int)fx - 3 - tw;
        canvas_text(p->c, lx, p->y + 3, label, FONT_SMALL, ALIGN_LEFT, col);
    }
}

void plot_fill_between(plot *p, const double *x, const double *lo, const double *hi, int n,
                       rgba col) {
    if (n < 2) return;
    float *xy = malloc((size_t)n * 4 * sizeof *xy);
    if (!xy) return;
    int k = 0;
    for (int i = 0; i < n; i++) /* along the top, then back along the bottom */
        if (isfinite(lo[i]) && isfinite(hi[i]))
            xy[2 * k] = (float)plot_px(p, x[i]), xy[2 * k + 1] = (float)plot_py(p, hi[i]), k++;
    for (int i = n - 1; i >= 0; i--)
        if (isfinite(lo[i]) && isfinite(hi[i]))
            xy[2 * k] = (float)plot_px(p, x[i]), xy[2 * k + 1] = (float)plot_py(p, lo[i]), k++;
    canvas_polygon(p->c, xy, k, col);
    free(xy);
}

void plot_band(plot *p, double y0, double y1, rgba col) {
    double a = plot_py(p, y0), b = plot_py(p, y1);
    if (!isfinite(a) || !isfinite(b)) return;
    if (a > b) {
        double t = a;
        a = b, b = t;
    }
    canvas_fill(p->c, p->x, (int)floor(a), p->w, (int)ceil(b) - (int)floor(a), col);
}

void plot_heatmap(plot *p, const float *v, int rows, int cols, ptrdiff_t rstride, ptrdiff_t cstride,
                  double x0, double dx, double y0, double dy, cmap_kind k, double lo, double hi,
                  int log) {
    if (rows <= 0 || cols <= 0 || !(dx != 0) || !(dy != 0)) return;
    canvas *c = p->c;
    int fx0 = c->cx0 > p->x ? c->cx0 : p->x, fx1 = c->cx1 < p->x + p->w ? c->cx1 : p->x + p->w;
    int fy0 = c->cy0 > p->y ? c->cy0 : p->y, fy1 = c->cy1 < p->y + p->h ? c->cy1 : p->y + p->h;
    if (fx1 <= fx0 || fy1 <= fy0) return;
    /* the cells the visible area shows: their index range along each axis */
    double ja = floor((plot_dx(p, fx0) - (x0 - dx / 2)) / dx);
    double jb = floor((plot_dx(p, fx1) - (x0 - dx / 2)) / dx);
    double ia = floor((plot_dy(p, fy0) - (y0 - dy / 2)) / dy);
    double ib = floor((plot_dy(p, fy1) - (y0 - dy / 2)) / dy);
    int j0 = (int)fmax(0, fmin(ja, jb)), j1 = (int)fmin(cols - 1, fmax(ja, jb));
    int i0 = (int)fmax(0, fmin(ia, ib)), i1 = (int)fmin(rows - 1, fmax(ia, ib));
    if (j1 < j0 || i1 < i0) return;
    int nc = j1 - j0 + 1, nr = i1 - i0 + 1;
    /* where those cells lie on the canvas, and whether rows (columns) run up or down */
    double xa = plot_px(p, x0 - dx / 2 + j0 * dx), xb = plot_px(p, x0 - dx / 2 + (j1 + 1) * dx);
    double ya = plot_py(p, y0 - dy / 2 + i0 * dy), yb = plot_py(p, y0 - dy / 2 + (i1 + 1) * dy);
    int flip_x = xb < xa, flip_y = yb < ya;
    /* more cells than raster pixels: one cell per pixel (the one under its centre), as nearest
     * neighbour would show anyway; a vector export keeps every cell */
    int mc = nc, mr = nr;
    if (c->ncr == 1) {
        int wpx = (int)ceil(fabs(xb - xa) * c->scale), hpx = (int)ceil(fabs(yb - ya) * c->scale);
        if (wpx >= 1 && wpx < mc) mc = wpx;
        if (hpx >= 1 && hpx < mr) mr = hpx;
    }
    rgba *img = malloc((size_t)mc * (size_t)mr * sizeof *img);
    if (!img) return;
    for (int r = 0; r < mr; r++) {
        int rr = mr == nr ? r : (int)((r + 0.5) * nr / mr);
        int i = flip_y ? i1 - rr : i0 + rr;
        for (int q = 0; q < mc; q++) {
            int qq = mc == nc ? q : (int)((q + 0.5) * nc / mc);
            int j = flip_x ? j1 - qq : j0 + qq;
            img[(size_t)r * mc + q] =
                cmap_value(k, v[(ptrdiff_t)i * rstride + (ptrdiff_t)j * cstride], lo, hi, log);
        }
    }
    nc = mc, nr = mr;
    /* drawn inside the plot area only */
    int sx0 = c->cx0, sy0 = c->cy0, sx1 = c->cx1, sy1 = c->cy1;
    canvas_clip(c, fx0, fy0, fx1 - fx0, fy1 - fy0);
    canvas_image(c, fmin(xa, xb), fmin(ya, yb), fabs(xb - xa), fabs(yb - ya), img, nc, nr);
    canvas_clip(c, sx0, sy0, sx1 - sx0, sy1 - sy0);
    free(img);
}

/* A colour bar's end value at (x, y), kept inside the canvas: fewer digits when 4 do not fit
 * (0.01271 -> 0.0127 -> 0.013), then moved left against the edge. */
static void end_label(canvas *c, int x, int y, double v) {
    char buf[40];
    int room = c->w - 2 - x, tw = 0;
    for (int digits = 4; digits >= 2; digits--) {
        snprintf(buf, sizeof buf, "%.*g", digits, v), tidy(buf, sizeof buf);
        if ((tw = canvas_text_width(buf, FONT_SMALL)) <= room) break;
    }
    if (tw > room) x = c->w - 2 - tw;
    canvas_text(c, x, y, buf, FONT_SMALL, ALIGN_LEFT, theme_ink());
}

void plot_colorbar(canvas *c, int x, int y, int w, int h, cmap_kind k, double lo, double hi,
                   int log, const char *label) {
    (void)w;
    int th = canvas_text_height(FONT_SMALL), bw = 14;
    int top = y + th / 2 + 2, bh = h - th - 4;
    if (bh < 10) return;
    for (int j = 0; j < bh; j++) {
        double t = 1.0 - (j + 0.5) / bh;
        canvas_fill(c, x, top + j, bw, 1, cmap_at(k, t));
    }
    canvas_frame(c, x - 1, top - 1, bw + 2, bh + 2, theme_ink());
    axis a = {lo, hi, log && lo > 0 && hi > lo, 0, NULL, 0};
    if (!(a.hi > a.lo)) a.hi = a.lo + 1;
    /* the exact limits at the ends, nice ticks between when they do not crowd the ends */
    end_label(c, x + bw + 5, top - th / 2, hi);
    end_label(c, x + bw + 5, top + bh - th / 2, lo);
    int labw = 0;
    tick t[MAX_TICKS];
    int n = fit_ticks(&a, bh, 0, t, MAX_TICKS);
    for (int i = 0; i < n; i++) {
        double tt = axis_t(&a, t[i].v);
        if (!(tt >= 0 && tt <= 1)) continue;
        int py = top + (int)floor((1 - tt) * (bh - 1) + 0.5);
        canvas_hline(c, x + bw, x + bw + (t[i].major ? 3 : 1), py, theme_ink());
        if (!t[i].major) continue;
        if (py - top < th + 2 || top + bh - py < th + 2) continue;
        int tw = canvas_text(c, x + bw + 5, py - th / 2, t[i].label, FONT_SMALL, ALIGN_LEFT,
                             theme_ink());
        if (tw > labw) labw = tw;
    }
    if (label && *label) {
        int lw = canvas_text_width(label, FONT_SMALL);
        if (lw < bh) canvas_text_up(c, x - th - 6, top + bh / 2, label, FONT_SMALL, theme_faint());
    }
}

/* The corner whose legend box would hide the fewest pixels already drawn (anything other than
 * the background and grid colours); ties keep the order top-right, top-left, bottom-right,
 * bottom-left. */
static int quiet_corner(const plot *p, int bw, int bh) {
    canvas *c = p->c;
    int best = 0;
    long fewest = -1;
    for (int k = 0; k < 4; k++) {
        int bx = (k & 1) ? p->x + 6 : p->x + p->w - bw - 6;
        int by = (k & 2) ? p->y + p->h - bh - 6 : p->y + 6;
        long n = 0;
        for (int y = by; y < by + bh; y += 2)
            for (int x = bx; x < bx + bw; x += 2) {
                rgba q;
                if (!canvas_peek(c, x, y, &q)) continue;
                /* ink: lines, markers and text, saturated or dark; not the background, the grid
                 * or a light tint (a band behind the data may cover a whole plot) */
                int mx = q.r > q.g ? (q.r > q.b ? q.r : q.b) : (q.g > q.b ? q.g : q.b);
                int mn = q.r < q.g ? (q.r < q.b ? q.r : q.b) : (q.g < q.b ? q.g : q.b);
                int lum = (q.r * 3 + q.g * 6 + q.b) / 10;
                n += mx - mn > 80 || lum < 150;
            }
        if (fewest < 0 || n < fewest) fewest = n, best = k;
    }
    return best;
}

void plot_legend(plot *p, const legend_item *items, int n, int corner) {
    if (n <= 0) return;
    for (int i = 0; i < n; i++) canvas_note(p->c, "series", items[i].label);
    int th = canvas_text_height(FONT_SMALL), sw = 22, pad = 5;
    int lw = 0;
    for (int i = 0; i < n; i++) {
        int w = canvas_text_width(items[i].label, FONT_SMALL);
        if (w > lw) lw = w;
    }
    int bw = pad * 3 + sw + lw, bh = pad * 2 + n * (th + 2);
    if (corner < 0) corner = quiet_corner(p, bw, bh);
    int bx = (corner & 1) ? p->x + 6 : p->x + p->w - bw - 6;
    int by = (corner & 2) ? p->y + p->h - bh - 6 : p->y + 6;
    rgba box = theme_bg();
    box.a = 225;
    canvas_fill(p->c, bx, by, bw, bh, box);
    canvas_frame(p->c, bx, by, bw, bh, theme_grid());
    for (int i = 0; i < n; i++) {
        int ly = by + pad + i * (th + 2);
        float cy = (float)ly + th / 2.0f;
        float x0 = (float)(bx + pad), x1 = (float)(bx + pad + sw);
        switch (items[i].style) {
        case STYLE_MARKERS:
            canvas_disc(p->c, (x0 + x1) / 2, cy, 3, items[i].col);
            break;
        case STYLE_DASHED:
            canvas_dashed(p->c, x0, cy, x1, cy, 1.6f, 5, 3, items[i].col);
            break;
        case STYLE_BOX:
            canvas_fill(p->c, (int)x0, ly + 2, sw, th - 4, items[i].col);
            break;
        default:
            canvas_line(p->c, x0, cy, x1, cy, 2.0f, items[i].col);
        }
        canvas_text(p->c, bx + pad * 2 + sw, ly, items[i].label, FONT_SMALL, ALIGN_LEFT,
                    theme_ink());
    }
}

void plot_message(plot *p, const char *msg) {
    int th = canvas_text_height(FONT_SMALL);
    canvas_text(p->c, p->x + p->w / 2, p->y + p->h / 2 - th / 2, msg, FONT_SMALL, ALIGN_CENTER,
                theme_faint());
}
