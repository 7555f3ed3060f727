/* view_scatter.c: one probe against another, token by token.
 *
 *   view scatter x=key_norm y=rho [layer= head= from= to=]
 *
 * Each token of the range is a point (x_t, y_t) at the selected head, one colour per layer (raw
 * mode: per lane, so gdn and kaczmarz on the same stream sit side by side: rho grows with |k|^2
 * for one and stays at eta for the other). An axis whose values are positive and span more than
 * two decades is logarithmic. Non-finite pairs are left out and counted in the title; y = rho
 * gets the exact-write (1) and contraction-limit (2) lines. Defaults: x = k_norm (else
 * key_norm), y = rho. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "plot.h"
#include "view.h"

static int pick(const trace *tr, const char *want, const char *const *defaults, int n,
                const char **name) {
    if (want && *want) {
        *name = want;
        return vu_series(tr, want);
    }
    for (int i = 0; i < n; i++) {
        int s = vu_series(tr, defaults[i]);
        if (s >= 0) {
            *name = defaults[i];
            return s;
        }
    }
    *name = defaults[0];
    return -1;
}

static int draw(canvas *c, const trace *tr, view_params *p, err *e) {
    static const char *const DX[] = {"k_norm", "key_norm"}, *const DY[] = {"rho"};
    const char *xn, *yn;
    int sx = pick(tr, p->px, DX, 2, &xn), sy = pick(tr, p->py, DY, 1, &yn);
    if (sx < 0 || sy < 0)
        return err_set(e,
                       "view scatter: no probe '%s' in the trace (x= and y= name probes; "
                       "`show` lists them)",
                       sx < 0 ? xn : yn);
    const trace_series *ax_s = &tr->series[sx], *ay_s = &tr->series[sy];
    if (ax_s->width != 1 || ay_s->width != 1)
        return err_set(e, "view scatter: %s is not one value per head", ax_s->width != 1 ? xn : yn);
    vu_select(tr, sy, p);
    int64_t from = p->shown_from, to = p->shown_to;
    int layers = ax_s->layers < ay_s->layers ? ax_s->layers : ay_s->layers;
    int n = (int)(to - from > 0 ? to - from : 0);
    double *X = malloc(((size_t)n * layers + 1) * sizeof *X);
    double *Y = malloc(((size_t)n * layers + 1) * sizeof *Y);
    int *cnt = calloc((size_t)layers + 1, sizeof *cnt);
    if (!X || !Y || !cnt) {
        free(X), free(Y), free(cnt);
        return err_set(e, "view scatter: out of memory");
    }
    range rx, ry;
    range_init(&rx), range_init(&ry);
    long dropped = 0;
    int xpos = 1, ypos = 1;
    for (int l = 0; l < layers; l++)
        for (int64_t t = from; t < to; t++) {
            double x = vu_at(tr, sx, t, l, p->head, 0), y = vu_at(tr, sy, t, l, p->head, 0);
            if (isnan(x) && isnan(y)) continue; /* not recorded at this layer */
            if (!isfinite(x) || !isfinite(y)) {
                dropped++;
                continue;
            }
            size_t k = (size_t)l * n + cnt[l]++;
            X[k] = x, Y[k] = y;
            range_add(&rx, x, 0), range_add(&ry, y, 0);
            xpos &= x > 0, ypos &= y > 0;
        }
    if (!strcmp(yn, "rho")) range_add(&ry, 0, 0), range_add(&ry, 2, 0);
    char title[240];
    snprintf(title, sizeof title, "%s against %s, head %d, tokens %lld–%lld", yn, xn, p->head,
             (long long)from, (long long)to - 1);
    box area = vu_header(c, title, tr, p);
    axis axx = axis_fit(&rx, xpos, 2, xn), axy = axis_fit(&ry, ypos, 2, yn);
    plot pl;
    char sub[200];
    if (dropped)
        snprintf(sub, sizeof sub, "one point per token, one colour per %s; %ld non-finite left out",
                 tr->nlabels ? "lane" : "layer", dropped);
    else
        snprintf(sub, sizeof sub, "one point per token, one colour per %s",
                 tr->nlabels ? "lane" : "layer");
    plot_begin(&pl, c, area.x, area.y, area.w, area.h, sub, axx, axy, 0);
    if (!strcmp(yn, "rho")) {
        plot_hline(&pl, 1, palette(2), STYLE_DASHED, NULL);
        plot_hline(&pl, 2, palette(1), STYLE_DASHED, NULL);
    }
    legend_item items[12];
    char names[12][64];
    int ni = 0;
    for (int l = 0; l < layers; l++) {
        if (!cnt[l]) continue;
        rgba col = palette(l % 8);
        plot_xy(&pl, X + (size_t)l * n, Y + (size_t)l * n, cnt[l], STYLE_MARKERS, 2.5f, col);
        vu_note_layer(p, tr, l);
        if (ni < 12) {
            vu_layer_name(tr, p, l, names[ni], sizeof names[ni]);
            items[ni] = (legend_item){names[ni], col, STYLE_MARKERS};
            ni++;
        }
    }
    if (!strcmp(yn, "rho")) {
        plot_hline_label(&pl, 1, palette(2), "ρ = 1: exact write");
        plot_hline_label(&pl, 2, palette(1), "ρ = 2: contraction limit");
    }
    if (ni) plot_legend(&pl, items, ni, LEGEND_AUTO);
    if (!ni) plot_message(&pl, "no finite pairs in the range");
    plot_end(&pl);
    vu_note_mixer(p, tr, sy);
    free(X), free(Y), free(cnt);
    return 0;
}

const view view_scatter = {
    "scatter", "one probe against another per token: view scatter x=key_norm y=rho",
    "x y",     draw,
    NULL,      0,
};
