/* view_attribution.c: exact attribution of one layer and head (engine_attribution: the trace's
 * "attribution*" snapshots, computed by the session before the view is drawn).
 *
 * Top left: M (row i = the output of token i, column j = the value of token j), o_i = sum_j M_ij
 * v_j + o_init_i, on a diverging map. Top right: its decay-only part, what linear attention with
 * the same decays and write strengths would weigh. Bottom left: M minus it, what the delta rule's
 * key removal changes (zero for gla, mamba2 and attention). Bottom right: the row of the last
 * token (or `to - 1`): M and the decay-only part against j, with |M_ij| |v_j| shaded. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>

#include "plot.h"
#include "view.h"

static void heat(canvas *c, box b, const char *title, const float *v, int T, int r0, int r1,
                 double m, view_params *p, const char *name) {
    plot pl;
    axis ax = {-0.5, T - 0.5, 0, 0, "j (the value of token j)", 1};
    axis ay = {r0 - 0.5, r1 - 0.5, 0, 1, "i (the output of token i)", 1};
    int cbw = 80;
    plot_begin(&pl, c, b.x, b.y, b.w - cbw, b.h, title, ax, ay, PLOT_NO_GRID);
    plot_heatmap(&pl, v + (size_t)r0 * T, r1 - r0, T, T, 1, 0, 1, r0, 1, CMAP_DIVERGING, -m, m, 0);
    plot_end(&pl);
    plot_colorbar(c, b.x + b.w - cbw + 26, pl.y - 8, cbw - 26, pl.h + 16, CMAP_DIVERGING, -m, m, 0,
                  name);
    vu_note_crange(p, name, -m, m, 0);
}

static int draw(canvas *c, const trace *tr, view_params *p, err *e) {
    int km = trace_find_snapshot(tr, "attribution"),
        kd = trace_find_snapshot(tr, "attribution_decay");
    int kv = trace_find_snapshot(tr, "attribution_vnorm"),
        ka = trace_find_snapshot(tr, "attribution_at");
    if (km < 0 || kd < 0 || kv < 0 || ka < 0)
        return err_set(e, "view attribution: nothing computed yet (show attribution, or view / "
                          "export png attribution in a session that has run tokens)");
    const trace_snapshot *sm = &tr->snaps[km];
    int T = sm->rows;
    const float *M = trace_snapshot_at(tr, km, 0, 0), *Md = trace_snapshot_at(tr, kd, 0, 0);
    const float *vn = trace_snapshot_at(tr, kv, 0, 0), *at = trace_snapshot_at(tr, ka, 0, 0);
    int nl = tr->snaps[ka].cols >= 6 ? (int)at[4] : 1,
        nh = tr->snaps[ka].cols >= 6 ? (int)at[5] : 1;
    if (p->layer >= nl) p->layer = nl - 1;
    if (p->head >= nh) p->head = nh - 1;
    int r0 = p->from < T ? (int)p->from : 0, r1 = p->to > 0 && p->to <= T ? (int)p->to : T;
    if (r1 <= r0) r0 = 0, r1 = T;
    p->shown_from = r0, p->shown_to = r1;
    snprintf(p->mixer, sizeof p->mixer, "attribution");
    char title[200];
    snprintf(
        title, sizeof title,
        "exact attribution o_{i} = Σ_{j} M_{ij} v_{j} + o_{init,i} · layer %d head %d · %d tokens",
        (int)at[0], (int)at[1], T);
    box area = vu_header(c, title, tr, p);
    if (p->layer != (int)at[0] || p->head != (int)at[1]) {
        char msg[200];
        snprintf(msg, sizeof msg,
                 "computed for layer %d head %d: show attribution layer=%d head=%d computes this "
                 "selection",
                 (int)at[0], (int)at[1], p->layer, p->head);
        vu_message(c, area, msg);
        return 0;
    }
    float *R = malloc((size_t)T * T * sizeof(float));
    if (!R) return err_set(e, "out of memory");
    double m = 0, mr = 0;
    for (int i = r0; i < r1; i++)
        for (int j = 0; j < T; j++) {
            size_t k = (size_t)i * T + j;
            R[k] = M[k] - Md[k];
            if (isfinite(M[k]) && fabs(M[k]) > m) m = fabs(M[k]);
            if (isfinite(Md[k]) && fabs(Md[k]) > m) m = fabs(Md[k]);
            if (isfinite(R[k]) && fabs(R[k]) > mr) mr = fabs(R[k]);
        }
    /* a few huge entries should not wash out the rest */
    double q = vu_abs_quantile(M + (size_t)r0 * T, (size_t)(r1 - r0) * T, 0.995);
    if (q > 0 && q < m) m = q;
    if (m == 0) m = 1;
    if (mr == 0) mr = m;
    heat(c, vu_cell(area, 2, 2, 0, 0), "M (exact: decay and key removal)", M, T, r0, r1, m, p, "M");
    heat(c, vu_cell(area, 2, 2, 0, 1), "decay-only part (linear attention, same gates)", Md, T, r0,
         r1, m, p, "M_decay");
    heat(c, vu_cell(area, 2, 2, 1, 0), "M − decay-only: the key removal's doing", R, T, r0, r1, mr,
         p, "removal");
    /* the last row */
    int i = r1 - 1;
    box b = vu_cell(area, 2, 2, 1, 1);
    range r;
    range_init(&r);
    range_add(&r, 0, 0);
    for (int j = 0; j <= i; j++)
        range_add(&r, M[(size_t)i * T + j], 0), range_add(&r, Md[(size_t)i * T + j], 0);
    axis ax = {-0.5, i + 0.5, 0, 0, "j", 1};
    char rt[96];
    snprintf(rt, sizeof rt, "row of token %d: M_{ij}, decay-only, |M_{ij}| |v_{j}|", i);
    plot pl;
    plot_begin(&pl, c, b.x, b.y, b.w, b.h, rt, ax, axis_fit(&r, 0, 0, NULL), 0);
    float *w = malloc((size_t)(i + 1) * sizeof(float));
    if (w) {
        double mw = 0, mm = 0.95 * r.hi; /* the positive side of the axis */
        for (int j = 0; j <= i; j++)
            w[j] = fabsf(M[(size_t)i * T + j]) * vn[j], mw = fmax(mw, w[j]);
        for (int j = 0; j <= i && mw > 0; j++) w[j] = (float)(w[j] / mw * mm);
        plot_series(&pl, w, 1, i + 1, 0, 1, STYLE_STEP, 1.0f, palette(2));
        free(w);
    }
    plot_series(&pl, Md + (size_t)i * T, 1, i + 1, 0, 1, STYLE_LINE, 1.4f, palette(1));
    plot_series(&pl, M + (size_t)i * T, 1, i + 1, 0, 1, STYLE_LINE, 1.8f, palette(0));
    legend_item li[] = {{"M_ij", palette(0), STYLE_LINE},
                        {"decay-only", palette(1), STYLE_LINE},
                        {"|M_{ij}||v_{j}| (scaled)", palette(2), STYLE_STEP}};
    plot_legend(&pl, li, 3, LEGEND_AUTO);
    plot_end(&pl);
    free(R);
    return 0;
}

const view view_attribution = {
    "attribution",
    "exact attribution of one layer and head: M with its decay-only and key-removal parts",
    "layer head from to (rows)",
    draw,
    NULL,
    0,
};
