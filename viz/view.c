/* view.c: the list of views, and the helpers they share (layout, selection, provenance notes). */
#include "view.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "plot.h"

extern const view view_attribution, view_kaczmarz, view_kalman, view_kata, view_parallax,
    view_state, view_recall, view_probes, view_precision, view_train, view_scatter;

const view *const view_all[] = {
    &view_kaczmarz, &view_kalman,    &view_kata,  &view_parallax,    &view_state,   &view_recall,
    &view_probes,   &view_precision, &view_train, &view_attribution, &view_scatter,
};
const int view_count = (int)(sizeof view_all / sizeof view_all[0]);

const view *view_find(const char *name) {
    for (int i = 0; i < view_count; i++)
        if (strcmp(view_all[i]->name, name) == 0) return view_all[i];
    return NULL;
}

void view_params_default(view_params *p) {
    memset(p, 0, sizeof *p);
    p->to = -1;
    p->seed = 1;
}

box vu_cell(box a, int rows, int cols, int r, int c) {
    const int gap = 14;
    int cw = (a.w - gap * (cols - 1)) / cols, ch = (a.h - gap * (rows - 1)) / rows;
    return (box){a.x + c * (cw + gap), a.y + r * (ch + gap), cw, ch};
}

int vu_series(const trace *tr, const char *name) {
    return trace_find(tr, name);
}

void vu_select(const trace *tr, int s, view_params *p) {
    if (s < 0 && tr->nseries > 0) s = 0;
    if (s >= 0) {
        const trace_series *se = &tr->series[s];
        if (p->layer >= se->layers) p->layer = se->layers - 1;
        if (p->head >= se->heads) p->head = se->heads - 1;
    }
    if (p->layer < 0) p->layer = 0;
    if (p->head < 0) p->head = 0;
    int64_t from = p->from < 0 ? 0 : p->from, to = p->to < 0 || p->to > tr->T ? tr->T : p->to;
    if (from > to) from = to;
    p->shown_from = from, p->shown_to = to;
}

float vu_at(const trace *tr, int s, int64_t t, int layer, int head, int i) {
    if (s < 0 || t < 0 || t >= tr->T) return NAN;
    const trace_series *se = &tr->series[s];
    if (layer < 0 || layer >= se->layers || head < 0 || head >= se->heads || i < 0 ||
        i >= se->width)
        return NAN;
    return trace_at_lh(tr, s, t, layer, head)[i];
}

const float *vu_ptr(const trace *tr, int s, int64_t from, int layer, int head, int i,
                    size_t *stride) {
    const trace_series *se = &tr->series[s];
    *stride = (size_t)se->layers * (size_t)se->heads * (size_t)se->width;
    return trace_at_lh(tr, s, from, layer, head) + i;
}

static void note_word(view_params *p, const char *src) {
    /* already listed as a whole word? */
    size_t n = strlen(src);
    for (const char *q = p->mixer; (q = strstr(q, src)); q += n)
        if ((q == p->mixer || q[-1] == ',') && (q[n] == 0 || q[n] == ',')) return;
    size_t used = strlen(p->mixer);
    snprintf(p->mixer + used, sizeof p->mixer - used, "%s%s", used ? "," : "", src);
}

/* The series' source names the mixer only when a mixer registered it; "input", "stream",
 * "model", "recall", ... are the lab's own recorders: then the selected layer's mixer is meant. */
void vu_note_mixer(view_params *p, const trace *tr, int s) {
    if (s < 0) return;
    const char *src = tr->series[s].source, *lb = trace_label(tr, p->layer);
    if (lb) {
        note_word(p, lb);
        return;
    }
    if (src && *src) note_word(p, src);
}

void vu_note_layer(view_params *p, const trace *tr, int l) {
    const char *lb = trace_label(tr, l);
    if (lb) note_word(p, lb);
}

int vu_lanes(const trace *tr) {
    if (tr->nlabels < 2) return 0;
    for (int a = 0; a < tr->nlabels; a++)
        for (int b = a + 1; b < tr->nlabels; b++)
            if (!strcmp(tr->label[a], tr->label[b])) return 0;
    return 1;
}

const char *vu_lane_list(const trace *tr, const view_params *p, char *buf, size_t n) {
    size_t o = 0;
    buf[0] = 0;
    /* "parallax:rscale=0.5", "parallax:rscale=2": the shared "parallax:" says nothing */
    size_t skip = 0;
    const char *colon = tr->nlabels ? strchr(tr->label[0], ':') : NULL;
    if (colon && !p->labels[0]) {
        skip = (size_t)(colon - tr->label[0]) + 1;
        for (int l = 1; l < tr->nlabels; l++)
            if (strncmp(tr->label[l], tr->label[0], skip)) skip = 0;
    }
    for (int l = 0; l < tr->nlabels && o + 1 < n; l++) {
        char nm[64];
        const char *name = vu_layer_name(tr, p, l, nm, sizeof nm);
        int w = snprintf(buf + o, n - o, "%s%d %s", l ? " · " : "", l,
                         strlen(name) > skip ? name + skip : name);
        if (w < 0) break;
        o += (size_t)w < n - o ? (size_t)w : n - o - 1;
    }
    return buf;
}

const char *vu_layer_name(const trace *tr, const view_params *p, int l, char *buf, size_t n) {
    /* entry l of the user's labels */
    const char *q = p ? p->labels : "";
    for (int k = 0; *q && k < l; k++) {
        q = strchr(q, ',');
        q = q ? q + 1 : "";
    }
    if (*q && *q != ',') {
        snprintf(buf, n, "%.*s", (int)strcspn(q, ","), q);
        return buf;
    }
    const char *lb = trace_label(tr, l);
    int shared = 0;
    for (int k = 0; lb && k < tr->nlabels; k++)
        if (k != l && !strcmp(tr->label[k], lb)) shared = 1;
    if (!lb)
        snprintf(buf, n, "layer %d", l);
    else if (shared)
        snprintf(buf, n, "layer %d (%s)", l, lb);
    else
        snprintf(buf, n, "%s", lb);
    return buf;
}

void vu_note_crange(view_params *p, const char *name, double lo, double hi, int log) {
    size_t used = strlen(p->crange);
    snprintf(p->crange + used, sizeof p->crange - used, "%s%s %.6g..%.6g%s", used ? "; " : "", name,
             lo, hi, log ? " (log10)" : "");
}

box vu_header(canvas *c, const char *title, const trace *tr, const view_params *p) {
    canvas_unclip(c);
    canvas_clear(c, theme_bg());
    if (p->title[0]) title = p->title; /* set title */
    canvas_note(c, "title", title);
    int layers = 0, heads = 0;
    if (tr->nseries > 0) layers = tr->series[0].layers, heads = tr->series[0].heads;
    char sel[200];
    if (tr->nseries > 0 && tr->series[0].source && !strcmp(tr->series[0].source, "train") &&
        tr->T > 0) /* a training history (train/history.h): reports, not tokens */
        snprintf(sel, sizeof sel, "%lld reports · steps %.0f–%.0f", (long long)tr->T,
                 (double)*trace_at(tr, 0, 0), (double)*trace_at(tr, 0, tr->T - 1));
    else if (p->shown_to > p->shown_from)
        snprintf(sel, sizeof sel, "layer %d/%d · head %d/%d · tokens %lld–%lld of %lld", p->layer,
                 layers, p->head, heads, (long long)p->shown_from, (long long)p->shown_to - 1,
                 (long long)tr->T);
    else
        snprintf(sel, sizeof sel, "layer %d/%d · head %d/%d · no tokens yet", p->layer, layers,
                 p->head, heads);
    int lh = canvas_text_height(FONT_LARGE), sh = canvas_text_height(FONT_SMALL);
    int tw = canvas_text_fit(c, 14, 8, title, FONT_LARGE, ALIGN_LEFT, theme_ink(), c->w - 28);
    int sw = canvas_text_width(sel, FONT_SMALL), line = 8 + lh + 5;
    if (14 + tw + 16 + sw <= c->w - 14) {
        canvas_text(c, 14 + tw + 16, 8 + lh - sh - 1, sel, FONT_SMALL, ALIGN_LEFT, theme_faint());
    } else { /* no room beside the title: a second line */
        canvas_text_fit(c, 14, 8 + lh + 2, sel, FONT_SMALL, ALIGN_LEFT, theme_faint(), c->w - 28);
        line += sh + 2;
    }
    canvas_hline(c, 14, c->w - 15, line, theme_grid());
    int top = line + 7;
    return (box){10, top, c->w - 20, c->h - top - 8};
}

void vu_message(canvas *c, box a, const char *msg) {
    canvas_unclip(c);
    canvas_text(c, a.x + a.w / 2, a.y + a.h / 2 - 10, msg, FONT_LARGE, ALIGN_CENTER, theme_faint());
}

void vu_lines(plot *pl, canvas *c, box b, const char *title, const char *ylabel, const trace *tr,
              const view_params *p, const vu_line *L, int n, const vu_ref *refs, int nrefs, int log,
              unsigned flags) {
    int64_t from = p->shown_from, to = p->shown_to;
    range r;
    range_init(&r);
    int all_pos = 1;
    for (int k = 0; k < n; k++) {
        if (L[k].s < 0) continue;
        for (int64_t t = from; t < to; t++) {
            float v = vu_at(tr, L[k].s, t, L[k].layer, L[k].head, L[k].i);
            if (L[k].square) v *= v;
            if (isfinite(v) && v <= 0) all_pos = 0;
            range_add(&r, v, log == 3); /* 3: the positive values set the range */
        }
    }
    int data_n = r.n;
    for (int k = 0; k < nrefs; k++) {
        if (refs[k].y <= 0 && log) continue; /* a log axis leaves out references at or below 0 */
        range_add(&r, refs[k].y, 0);
    }
    int want_log = log == 3 ? data_n > 0 : log && all_pos && data_n && r.lo > 0;
    axis ay = axis_fit(&r, want_log, log >= 2 ? 0 : 1.5, ylabel);
    axis ax = {(double)from - 0.5,
               (double)(to > from ? to : from + 1) - 0.5,
               0,
               0,
               flags & PLOT_NO_XTICKS ? NULL : "token",
               0};
    plot_begin(pl, c, b.x, b.y, b.w, b.h, title, ax, ay, flags);
    for (int k = 0; k < nrefs; k++) plot_hline(pl, refs[k].y, refs[k].col, refs[k].style, NULL);
    legend_item items[12];
    int ni = 0;
    for (int k = 0; k < n; k++) {
        if (L[k].s < 0) continue;
        if (to > from && !L[k].square) {
            size_t stride;
            const float *y = vu_ptr(tr, L[k].s, from, L[k].layer, L[k].head, L[k].i, &stride);
            plot_series(pl, y, stride, to - from, (double)from, 1, L[k].style, L[k].width,
                        L[k].col);
        }
        /* squared values go through a buffer, in chunks that share their end points */
        for (int64_t t0 = from; L[k].square && t0 + 1 < to + (to - from == 1); t0 += 511) {
            float buf[512];
            int64_t m = to - t0 < 512 ? to - t0 : 512;
            for (int64_t j = 0; j < m; j++) {
                float v = vu_at(tr, L[k].s, t0 + j, L[k].layer, L[k].head, L[k].i);
                buf[j] = v * v;
            }
            plot_series(pl, buf, 1, m, (double)t0, 1, L[k].style, L[k].width, L[k].col);
        }
        if (L[k].label && ni < 12) items[ni++] = (legend_item){L[k].label, L[k].col, L[k].style};
    }
    for (int k = 0; k < nrefs; k++) plot_hline_label(pl, refs[k].y, refs[k].col, refs[k].label);
    if (ni) plot_legend(pl, items, ni, LEGEND_AUTO);
    if (to <= from) plot_message(pl, "no tokens yet");
}

/* The k-th smallest of a[0..n) (a reordered): Hoare's selection, expected O(n). The same element
 * a full sort would put at k (T^2 attribution weights sorted took half a frame). */
static float select_kth(float *a, size_t n, size_t k) {
    size_t lo = 0, hi = n - 1;
    while (lo < hi) {
        float pivot = a[lo + (hi - lo) / 2];
        size_t i = lo, j = hi;
        while (i <= j) {
            while (a[i] < pivot) i++;
            while (a[j] > pivot) j--;
            if (i <= j) {
                float t = a[i];
                a[i] = a[j], a[j] = t;
                i++;
                if (j == 0) break;
                j--;
            }
        }
        if (k <= j)
            hi = j;
        else if (k >= i)
            lo = i;
        else
            break;
    }
    return a[k];
}

double vu_abs_quantile(const float *v, size_t n, double q) {
    float *a = v ? malloc((n ? n : 1) * sizeof *a) : NULL;
    size_t m = 0;
    for (size_t i = 0; a && i < n; i++)
        if (isfinite(v[i])) a[m++] = fabsf(v[i]);
    if (!a || m == 0) {
        free(a);
        return 0;
    }
    double r = select_kth(a, m, (size_t)(q * (double)(m - 1) + 0.5));
    free(a);
    return r;
}

void vu_heatmap_tokens(canvas *c, box b, const char *title, const char *ylabel, view_params *p,
                       const float *v, int rows, int mode, const char *name) {
    int64_t from = p->shown_from, to = p->shown_to, T = to - from;
    range r;
    range_init(&r);
    int neg = 0, pos_only = 1;
    for (size_t i = 0; v && i < (size_t)rows * (size_t)T; i++) {
        if (!isfinite(v[i])) continue;
        range_add(&r, v[i], 0);
        if (v[i] < 0) neg = 1;
        if (v[i] <= 0) pos_only = 0;
    }
    double lo = r.n ? r.lo : 0, hi = r.n ? r.hi : 1;
    int log = 0;
    cmap_kind k = CMAP_VIRIDIS;
    if (mode == VU_SIGNED || (mode == VU_AUTO && neg)) {
        /* symmetric about 0 at the 99th percentile of |v|, so a few outliers do not wash the
         * rest out to white; beyond it the colours saturate */
        double m = vu_abs_quantile(v, (size_t)rows * (size_t)T, 0.99);
        lo = -(m > 0 ? m : 1), hi = m > 0 ? m : 1, k = CMAP_DIVERGING;
    } else if (mode == VU_UNIT) {
        lo = 0, hi = 1;
    } else if ((mode == VU_LOG || (mode == VU_AUTO && hi / lo > 1e3)) && pos_only && r.n) {
        log = 1;
        if (!(hi > lo)) lo /= 2, hi *= 2;
    } else if (mode == VU_LOG) {
        /* zeros or negatives cannot go on a log scale: only the positive values do */
        range rp;
        range_init(&rp);
        for (size_t i = 0; v && i < (size_t)rows * (size_t)T; i++) range_add(&rp, v[i], 1);
        if (rp.n) lo = rp.lo, hi = rp.hi > rp.lo ? rp.hi : rp.lo * 10, log = 1;
    }
    if (!(hi > lo)) hi = lo + 1;
    int cbw = 92;
    plot pl;
    axis ax = {(double)from - 0.5, (double)(T > 0 ? to : from + 1) - 0.5, 0, 0, "token", 0};
    axis ay = {-0.5, rows - 0.5, 0, 1, ylabel, 1};
    plot_begin(&pl, c, b.x, b.y, b.w - cbw, b.h, title, ax, ay, PLOT_NO_GRID);
    if (v && T > 0)
        plot_heatmap(&pl, v, rows, (int)T, T, 1, (double)from, 1, 0, 1, k, lo, hi, log);
    else
        plot_message(&pl, "no tokens yet");
    plot_end(&pl);
    plot_colorbar(c, b.x + b.w - cbw + 34, pl.y - 8, cbw - 34, pl.h + 16, k, lo, hi, log, name);
    vu_note_crange(p, name, lo, hi, log);
}
