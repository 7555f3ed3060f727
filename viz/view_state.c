/* view_state.c: the recurrent state of one layer and head as a heatmap (any mixer whose state has
 * an [H, rows, cols] part: the trace's "state" snapshot, the latest value).
 *
 * Left: S (rows = key dimension, columns = value dimension for the delta family, GLA and Mamba2;
 * Kalman: its precision lambda [M channels, S lanes]; KATA: the feature-space S [D, dv]) on a
 * diverging map symmetric about 0 (viridis for a state that is never negative), with its colour
 * bar. Right: the state norm over tokens when a mixer records it, and the norms of
 * the rows and columns of S. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>

#include "plot.h"
#include "view.h"

static int draw(canvas *c, const trace *tr, view_params *p, err *e) {
    int k = trace_find_snapshot(tr, "state");
    if (k < 0)
        return err_set(e, "view state: the trace has no state snapshot (the mixer in use keeps no "
                          "[H, rows, cols] state part, or nothing was registered)");
    const trace_snapshot *sn = &tr->snaps[k];
    int s_norm = vu_series(tr, "state_norm");
    vu_select(tr, s_norm, p);
    if (p->layer >= sn->layers) p->layer = sn->layers - 1;
    if (p->head >= sn->heads) p->head = sn->heads - 1;
    vu_note_mixer(p, tr, s_norm);

    char title[160];
    snprintf(title, sizeof title, "state S after token %lld  [%d × %d]", (long long)sn->t, sn->rows,
             sn->cols);
    box area = vu_header(c, title, tr, p);
    box left = {area.x, area.y, area.w * 64 / 100, area.h};
    box right = {area.x + left.w + 16, area.y, area.w - left.w - 16, area.h};
    const float *S = trace_snapshot_at(tr, k, p->layer, p->head); /* [rows][cols] */
    size_t n = (size_t)sn->rows * (size_t)sn->cols;

    /* signed states on the diverging map, symmetric about 0; a state that is never negative
     * (Kalman's precisions) on viridis, log10 when it spans decades */
    double m = 0, lo = INFINITY, hi = -INFINITY;
    for (size_t i = 0; i < n; i++)
        if (isfinite(S[i])) {
            if (fabs(S[i]) > m) m = fabs(S[i]);
            if (S[i] < lo) lo = S[i];
            if (S[i] > hi) hi = S[i];
        }
    if (m == 0) m = 1;
    cmap_kind kind = CMAP_DIVERGING;
    int log = 0;
    double clo = -m, chi = m;
    if (lo >= 0 && hi > 0) {
        kind = CMAP_VIRIDIS, clo = lo, chi = hi > lo ? hi : lo + 1;
        if (lo > 0 && hi / lo > 1e3) log = 1;
    }
    vu_note_crange(p, "S", clo, chi, log);

    plot pl;
    int cbw = 86;
    axis ax = {-0.5, sn->cols - 0.5, 0, 0, "column j (value dim; Kalman: lane s)", 1};
    axis ay = {-0.5, sn->rows - 0.5, 0, 1, "row i (key dim; Kalman: channel m)", 1};
    plot_begin(&pl, c, left.x, left.y, left.w - cbw, left.h,
               kind == CMAP_DIVERGING ? "S_{ij} (blue < 0 < red)" : "S_{ij} (never negative)", ax,
               ay, PLOT_NO_GRID);
    if (sn->t >= 0)
        plot_heatmap(&pl, S, sn->rows, sn->cols, sn->cols, 1, 0, 1, 0, 1, kind, clo, chi, log);
    else
        plot_message(&pl, "no tokens yet");
    plot_end(&pl);
    plot_colorbar(c, left.x + left.w - cbw + 30, pl.y - 8, cbw - 30, pl.h + 16, kind, clo, chi, log,
                  "S_ij");

    /* right: norm over tokens, row norms, column norms */
    box r0 = vu_cell(right, 3, 1, 0, 0), r1 = vu_cell(right, 3, 1, 1, 0),
        r2 = vu_cell(right, 3, 1, 2, 0);
    if (s_norm >= 0) {
        vu_line l = {s_norm, p->layer, p->head, 0, NULL, palette(0), STYLE_LINE, 1.6f, 0};
        vu_lines(&pl, c, r0, "‖S_{t}‖_{F} over tokens", "‖S‖_{F}", tr, p, &l, 1, NULL, 0, 1, 0);
    } else {
        axis a0 = {0, 1, 0, 0, "token", 0}, a1 = {0, 1, 0, 0, NULL, 0};
        plot_begin(&pl, c, r0.x, r0.y, r0.w, r0.h, "‖S_{t}‖_{F} over tokens", a0, a1, 0);
        plot_message(&pl, "no 'state_norm' probe");
    }
    plot_end(&pl);

    float *rn = malloc((size_t)(sn->rows + sn->cols) * sizeof *rn);
    if (!rn) return err_set(e, "out of memory");
    float *cn = rn + sn->rows;
    range rr, rc;
    range_init(&rr), range_init(&rc);
    for (int i = 0; i < sn->rows; i++) {
        double a = 0;
        for (int j = 0; j < sn->cols; j++)
            a += (double)S[(size_t)i * sn->cols + j] * S[(size_t)i * sn->cols + j];
        rn[i] = sn->t >= 0 ? (float)sqrt(a) : NAN;
        range_add(&rr, rn[i], 0);
    }
    for (int j = 0; j < sn->cols; j++) {
        double a = 0;
        for (int i = 0; i < sn->rows; i++)
            a += (double)S[(size_t)i * sn->cols + j] * S[(size_t)i * sn->cols + j];
        cn[j] = sn->t >= 0 ? (float)sqrt(a) : NAN;
        range_add(&rc, cn[j], 0);
    }
    range_add(&rr, 0, 0), range_add(&rc, 0, 0);
    axis xr = {-0.5, sn->rows - 0.5, 0, 0, "row i", 1};
    plot_begin(&pl, c, r1.x, r1.y, r1.w, r1.h, "row norms ‖S_{i},:‖", xr, axis_fit(&rr, 0, 0, NULL),
               0);
    plot_series(&pl, rn, 1, sn->rows, 0, 1, STYLE_STEP, 1.6f, palette(0));
    plot_end(&pl);
    axis xc = {-0.5, sn->cols - 0.5, 0, 0, "column j", 1};
    plot_begin(&pl, c, r2.x, r2.y, r2.w, r2.h, "column norms ‖S_:,j‖", xc,
               axis_fit(&rc, 0, 0, NULL), 0);
    plot_series(&pl, cn, 1, sn->cols, 0, 1, STYLE_STEP, 1.6f, palette(1));
    plot_end(&pl);
    free(rn);
    return 0;
}

const view view_state = {
    "state",
    "the recurrent state S of a layer and head as a live heatmap, with row and column norms",
    "",
    draw,
    "state",
    0,
};
