/* report.c: a diagnosis as text, CSV and a one-page PNG.
 *
 * Text: per checkpoint a table of the figures (one row per layer and head, one column per figure
 * that applies to its cores), the RMSNorm scales per layer and the findings; across a series, one
 * small table per figure: the worst head of each layer against the step.
 * CSV: long format, one row per (checkpoint, layer, head, figure); the findings as '#' lines.
 * PNG: the key figures against the step (a series) or over layer x head (one checkpoint), and the
 * findings below. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "../core/fileio.h"
#include "../export/png.h"
#include "../viz/canvas.h"
#include "../viz/plot.h"
#include "diag.h"

static const char *num(char *b, size_t n, double x) {
    if (isnan(x))
        snprintf(b, n, "-");
    else if (isinf(x))
        snprintf(b, n, x > 0 ? "inf" : "-inf");
    else
        snprintf(b, n, "%.3g", x);
    return b;
}

static int fig_has_data(const diag_ckpt *ck, int f) {
    if (!ck->fig) return 0;
    for (int l = 0; l < ck->layers; l++)
        for (int h = 0; h < ck->H; h++)
            if (!isnan(*diag_fig_at(ck, f, l, h))) return 1;
    return 0;
}

/* The figure of layer l over its heads: the worst (max or min) or, for neutral figures, the
 * median. NaN when no head has it. */
static float fig_layer(const diag_ckpt *ck, int f, int l) {
    if (diag_figs[f].per_layer) return *diag_fig_at(ck, f, l, 0);
    float v[4096];
    int n = 0;
    for (int h = 0; h < ck->H && n < 4096; h++) {
        float x = *diag_fig_at(ck, f, l, h);
        if (!isnan(x)) v[n++] = x;
    }
    if (n == 0) return NAN;
    float best = v[0];
    for (int i = 1; i < n; i++) {
        if (diag_figs[f].worst > 0 && v[i] > best) best = v[i];
        if (diag_figs[f].worst < 0 && v[i] < best) best = v[i];
    }
    if (diag_figs[f].worst != 0) return best;
    for (int i = 1; i < n; i++) /* insertion sort for the median */
        for (int j = i; j > 0 && v[j - 1] > v[j]; j--) {
            float t = v[j];
            v[j] = v[j - 1], v[j - 1] = t;
        }
    return v[n / 2];
}

static void print_table(const diag_ckpt *ck, FILE *out) {
    int cols[DF_COUNT], nc = 0;
    for (int f = 0; f < DF_COUNT; f++)
        if (!diag_figs[f].per_layer && fig_has_data(ck, f)) cols[nc++] = f;
    char b[32];
    for (int g = 0; g < nc; g += 9) {
        int ge = g + 9 < nc ? g + 9 : nc;
        fprintf(out, "  %5s %4s", "layer", "head");
        for (int k = g; k < ge; k++) fprintf(out, " %10s", diag_figs[cols[k]].label);
        fprintf(out, "\n");
        for (int l = 0; l < ck->layers; l++)
            for (int h = 0; h < ck->H; h++) {
                int any = 0;
                for (int k = g; k < ge; k++) any |= !isnan(*diag_fig_at(ck, cols[k], l, h));
                if (!any) continue;
                fprintf(out, "  %5d %4d", l, h);
                for (int k = g; k < ge; k++)
                    fprintf(out, " %10s", num(b, sizeof b, *diag_fig_at(ck, cols[k], l, h)));
                fprintf(out, "\n");
            }
    }
    for (int l = 0; l < ck->layers; l++) {
        float lo = *diag_fig_at(ck, DF_NORM_MIN, l, 0), hi = *diag_fig_at(ck, DF_NORM_MAX, l, 0);
        if (isnan(lo)) continue;
        char a[32];
        fprintf(out, "  layer %d (%s core): RMSNorm scales |w| %s..%s\n", l, ck->mixer[l],
                num(a, sizeof a, lo), num(b, sizeof b, hi));
    }
}

void diag_report_print(const diag_report *r, FILE *out) {
    if (r->prompt_desc[0]) fprintf(out, "probe prompt: %s\n", r->prompt_desc);
    for (int i = 0; i < r->n; i++) {
        const diag_ckpt *ck = &r->ck[i];
        char st[32] = "";
        if (ck->step >= 0) snprintf(st, sizeof st, " (step %ld)", ck->step);
        if (!ck->ok) {
            fprintf(out, "== %s%s: not diagnosed: %s\n", ck->label, st, ck->error);
            for (int k = 0; k < ck->nfind; k++) fprintf(out, "  - %s\n", ck->find[k].text);
            continue;
        }
        fprintf(out, "== %s%s: %s, %d layers, %d tokens\n", ck->label, st, ck->kind, ck->layers,
                ck->T);
        if (!ck->nf.found) fprintf(out, "  no NaN or Inf in the run\n");
        print_table(ck, out);
        if (ck->nfind == 0) {
            fprintf(out, "  findings: none\n");
        } else {
            fprintf(out, "  findings:\n");
            for (int k = 0; k < ck->nfind; k++) fprintf(out, "  - %s\n", ck->find[k].text);
        }
    }
    /* across the series (of the checkpoints that ran) */
    int layers = 0, ran = 0;
    for (int i = 0; i < r->n; i++) {
        ran += r->ck[i].ok;
        if (r->ck[i].ok && r->ck[i].layers > layers) layers = r->ck[i].layers;
    }
    if (r->n < 2 || ran == 0) return;
    fprintf(out, "== across the series (per layer: the worst head, or the median head for "
                 "neutral figures)\n");
    char b[32];
    for (int f = 0; f < DF_COUNT; f++) {
        int any = 0;
        for (int i = 0; i < r->n; i++) any |= r->ck[i].ok && fig_has_data(&r->ck[i], f);
        if (!any) continue;
        int show = layers <= 8 ? layers : 8;
        fprintf(out, "  %-18s %10s", diag_figs[f].name, "step");
        for (int l = 0; l < show; l++) fprintf(out, " %9s%d", "L", l);
        if (layers > show) fprintf(out, "  (first 8 of %d layers)", layers);
        fprintf(out, "\n");
        for (int i = 0; i < r->n; i++) {
            const diag_ckpt *ck = &r->ck[i];
            fprintf(out, "  %-18s %10s", "",
                    ck->step >= 0 ? (snprintf(b, sizeof b, "%ld", ck->step), b) : ck->label);
            for (int l = 0; l < show; l++)
                fprintf(out, " %10s",
                        ck->ok && l < ck->layers ? num(b, sizeof b, fig_layer(ck, f, l)) : "-");
            fprintf(out, "\n");
        }
    }
    for (int i = 0; i < r->n; i++)
        if (r->ck[i].ok && r->ck[i].nf.found) {
            char m[ERR_MSG_MAX];
            fprintf(out, "first checkpoint with a NaN or Inf: %s: %s\n", r->ck[i].label,
                    diag_nf_message(&r->ck[i].nf, m, sizeof m));
            break;
        }
}

/* ---- CSV ---- */

int diag_report_csv(const diag_report *r, const char *path, const char *command, err *e) {
    atomic_file af;
    if (atomic_open(&af, path, e)) return -1;
    FILE *f = af.fp;
    fprintf(f, "# mixscope diagnose\n# command: %s\n# probe prompt: %s\n", command ? command : "",
            r->prompt_desc);
    for (int i = 0; i < r->n; i++) {
        const diag_ckpt *ck = &r->ck[i];
        if (!ck->ok) fprintf(f, "# %s: not diagnosed: %s\n", ck->label, ck->error);
        for (int k = 0; k < ck->nfind; k++)
            fprintf(f, "# finding: %s: %s: %s\n", ck->label, ck->find[k].kind, ck->find[k].text);
    }
    fprintf(f, "checkpoint,step,layer,head,mixer,figure,value\n");
    for (int i = 0; i < r->n; i++) {
        const diag_ckpt *ck = &r->ck[i];
        if (!ck->ok) continue;
        for (int fi = 0; fi < DF_COUNT; fi++)
            for (int l = 0; l < ck->layers; l++)
                for (int h = 0; h < (diag_figs[fi].per_layer ? 1 : ck->H); h++) {
                    float v = *diag_fig_at(ck, fi, l, h);
                    if (isnan(v)) continue;
                    fprintf(f, "%s,%ld,%d,%d,%s,%s,%.9g\n", ck->label, ck->step, l,
                            diag_figs[fi].per_layer ? -1 : h, ck->mixer[l], diag_figs[fi].name,
                            (double)v);
                }
        if (ck->nf.found)
            fprintf(f, "%s,%ld,%d,%d,%s,first_nonfinite_token,%lld\n", ck->label, ck->step,
                    ck->nf.layer, ck->nf.head,
                    ck->nf.layer >= 0 && ck->nf.layer < ck->layers ? ck->mixer[ck->nf.layer] : "",
                    (long long)ck->nf.token);
    }
    if (ferror(f)) {
        atomic_abort(&af);
        return err_set(e, "%s: write failed", path);
    }
    return atomic_commit(&af, e);
}

/* ---- PNG ---- */

typedef struct rect {
    int x, y, w, h;
} rect;

/* The figures a summary page shows first, when they have data. */
static const int KEY_FIGS[] = {DF_GROWTH,   DF_SPECTRAL, DF_K_MIN,   DF_BETA,    DF_HL,
                               DF_ETA,      DF_LAM_MAX,  DF_DEN_MIN, DF_COR_MAX, DF_OGATE,
                               DF_RSTD_MAX, DF_NORM_MAX, DF_Q,       DF_DT};

static int positive_spread(double lo, double hi) {
    return lo > 0 && hi / lo > 30;
}

/* One panel: figure f against the step (series) or over layer x head (one checkpoint). */
static void panel(canvas *c, rect b, const diag_report *r, int f) {
    plot pl;
    range xr, yr;
    range_init(&xr), range_init(&yr);
    int series = r->n > 1, layers = 0, has_inf = 0;
    for (int i = 0; i < r->n; i++)
        if (r->ck[i].ok && r->ck[i].layers > layers) layers = r->ck[i].layers;
    for (int i = 0; i < r->n; i++) {
        const diag_ckpt *ck = &r->ck[i];
        if (!ck->ok) continue;
        for (int l = 0; l < ck->layers; l++)
            for (int h = 0; h < (series || diag_figs[f].per_layer ? 1 : ck->H); h++) {
                float v = series ? fig_layer(ck, f, l) : *diag_fig_at(ck, f, l, h);
                if (isnan(v)) continue;
                range_add(&xr, series ? (ck->step >= 0 ? ck->step : i) : l * ck->H + h, 0);
                if (isinf(v))
                    has_inf = 1;
                else
                    range_add(&yr, v, 0);
            }
    }
    if (!series) range_add(&xr, -0.5, 0), range_add(&xr, layers * r->ck[0].H - 0.5, 0);
    int ylog = positive_spread(yr.lo, yr.hi);
    if (ylog) {
        range_init(&yr);
        for (int i = 0; i < r->n; i++) {
            const diag_ckpt *ck = &r->ck[i];
            for (int l = 0; ck->ok && l < ck->layers; l++)
                for (int h = 0; h < ck->H; h++) {
                    float v = *diag_fig_at(ck, f, l, h);
                    if (v > 0 && isfinite(v)) range_add(&yr, v, 1);
                }
        }
    }
    /* an infinite value is drawn on a line above the finite ones, labelled inf */
    double inf_y = NAN;
    if (has_inf) {
        if (yr.n == 0) ylog = 0, range_add(&yr, 0, 0), range_add(&yr, 0.9, 0);
        inf_y = ylog ? yr.hi * 10 : yr.hi + fmax(0.15 * (yr.hi - yr.lo), 0.3 * fabs(yr.hi)) + 1e-30;
        range_add(&yr, inf_y, ylog);
    }
    axis ax = axis_fit(&xr, 0, 0, series ? "step" : "layer x heads + head");
    ax.integer = 1;
    axis ay = axis_fit(&yr, ylog, 0, NULL);
    char title[96];
    snprintf(title, sizeof title, "%s%s", diag_figs[f].name,
             series ? (diag_figs[f].per_layer ? "" : " (worst head per layer)") : "");
    plot_begin(&pl, c, b.x, b.y, b.w, b.h, title, ax, ay, 0);
    if (has_inf) plot_hline(&pl, inf_y, rgb(170, 30, 30), STYLE_DASHED, "inf");
    if (series) {
        legend_item items[8];
        char lab[8][16];
        int ni = 0;
        for (int l = 0; l < layers; l++) {
            double xs[512], ys[512];
            int n = 0;
            for (int i = 0; i < r->n && n < 512; i++) {
                const diag_ckpt *ck = &r->ck[i];
                if (!ck->ok || l >= ck->layers) continue;
                float v = fig_layer(ck, f, l);
                if (isnan(v)) continue;
                xs[n] = ck->step >= 0 ? ck->step : i;
                ys[n++] = isinf(v) ? inf_y : v;
            }
            plot_xy(&pl, xs, ys, n, STYLE_LINE, 1.6f, palette(l));
            plot_xy(&pl, xs, ys, n, STYLE_MARKERS, 3.0f, palette(l));
            if (ni < 8) {
                snprintf(lab[ni], sizeof lab[ni], "layer %d", l);
                items[ni] = (legend_item){lab[ni], palette(l), STYLE_LINE};
                ni++;
            }
        }
        if (ni > 1) plot_legend(&pl, items, ni, LEGEND_AUTO);
    } else {
        const diag_ckpt *ck = &r->ck[0];
        for (int l = 0; ck->ok && l < ck->layers; l++) {
            double xs[4096], ys[4096];
            int n = 0;
            for (int h = 0; h < (diag_figs[f].per_layer ? 1 : ck->H) && n < 4096; h++) {
                float v = *diag_fig_at(ck, f, l, h);
                if (isnan(v)) continue;
                xs[n] = l * ck->H + h, ys[n++] = isinf(v) ? inf_y : v;
            }
            plot_xy(&pl, xs, ys, n, STYLE_MARKERS, 4.0f, palette(l));
        }
    }
    plot_end(&pl);
}

int diag_report_png(const diag_report *r, const char *path, const char *command, err *e) {
    canvas c;
    const int W = 1600, Hc = 1100;
    if (canvas_init(&c, W, Hc, e)) return -1;
    canvas_clear(&c, theme_bg());
    char line[512];
    int y = 10;
    if (r->n > 1)
        snprintf(line, sizeof line, "diagnose: %d checkpoints, %s .. %s", r->n, r->ck[0].label,
                 r->ck[r->n - 1].label);
    else
        snprintf(line, sizeof line, "diagnose: %s", r->n ? r->ck[0].label : "nothing");
    canvas_text_fit(&c, 14, y, line, FONT_LARGE, ALIGN_LEFT, theme_ink(), W - 28);
    y += canvas_text_height(FONT_LARGE) + 2;
    canvas_text_fit(&c, 14, y, r->prompt_desc, FONT_SMALL, ALIGN_LEFT, theme_faint(), W - 28);
    y += canvas_text_height(FONT_SMALL) + 6;
    /* up to 8 key figures that have data */
    int figs[8], nf = 0;
    for (size_t k = 0; k < sizeof KEY_FIGS / sizeof KEY_FIGS[0] && nf < 8; k++) {
        int any = 0;
        for (int i = 0; i < r->n; i++) any |= r->ck[i].ok && fig_has_data(&r->ck[i], KEY_FIGS[k]);
        if (any) figs[nf++] = KEY_FIGS[k];
    }
    int text_h = 300;
    rect area = {10, y, W - 20, Hc - y - text_h};
    int cols = nf <= 2 ? nf : (nf <= 6 ? 3 : 4), rows = cols ? (nf + cols - 1) / cols : 0;
    for (int k = 0; k < nf; k++) {
        rect b = {area.x + (k % cols) * (area.w / cols), area.y + (k / cols) * (area.h / rows),
                  area.w / cols - 12, area.h / rows - 10};
        panel(&c, b, r, figs[k]);
    }
    if (nf == 0) {
        canvas_text(&c, W / 2, area.y + area.h / 2, "no checkpoint could be run", FONT_LARGE,
                    ALIGN_CENTER, theme_faint());
    }
    /* findings */
    canvas_unclip(&c);
    y = Hc - text_h + 4;
    canvas_hline(&c, 14, W - 15, y - 4, theme_grid());
    int lh = canvas_text_height(FONT_SMALL) + 2, shown = 0, total = 0;
    for (int i = 0; i < r->n; i++) total += r->ck[i].ok ? r->ck[i].nfind : 1;
    for (int i = 0; i < r->n && y + lh < Hc - 4; i++) {
        const diag_ckpt *ck = &r->ck[i];
        if (!ck->ok) {
            snprintf(line, sizeof line, "%s: not diagnosed: %s", ck->label, ck->error);
            canvas_text_fit(&c, 14, y, line, FONT_SMALL, ALIGN_LEFT, rgb(170, 30, 30), W - 28);
            y += lh, shown++;
            continue;
        }
        for (int k = 0; k < ck->nfind && y + 2 * lh < Hc - 4; k++) {
            snprintf(line, sizeof line, "%s: %s", ck->label, ck->find[k].text);
            int bad = strncmp(ck->find[k].kind, "nonfinite", 9) == 0;
            /* long findings wrap (at most three lines), keeping room for the "more" line */
            int room = (Hc - 4 - lh - y) / lh;
            int used =
                canvas_text_wrap(&c, 14, y, line, FONT_SMALL, bad ? rgb(170, 30, 30) : theme_ink(),
                                 W - 28, room < 3 ? room : 3);
            y += used * lh, shown++;
        }
    }
    if (total == 0)
        canvas_text(&c, 14, y, "no findings", FONT_SMALL, ALIGN_LEFT, theme_faint());
    else if (shown < total) {
        snprintf(line, sizeof line, "... %d more findings (text report, csv=)", total - shown);
        canvas_text(&c, 14, Hc - lh - 2, line, FONT_SMALL, ALIGN_LEFT, theme_faint());
    }
    char cps[32];
    snprintf(cps, sizeof cps, "%d", r->n);
    png_text text[] = {
        {"Software", "mixscope diagnose"},
        {"Command", command ? command : ""},
        {"Checkpoints", cps},
        {"Prompt", r->prompt_desc},
    };
    int rc = png_write(path, &c, text, 4, e);
    canvas_free(&c);
    return rc;
}
