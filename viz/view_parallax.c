/* view_parallax.c: Parallax's covariance correction against its softmax output (spec/
 * kata-parallax.md §B.7, §B.9).
 *
 * Panels:
 *   COR = |Sigma_KV rho| / |o_SA| per token and layer at the selected head (log colour);
 *   COR per token and head at the selected layer (log colour);
 *   the depth profile: per layer, the mean over tokens of COR and the ratio of the means
 *     (mean |Sigma rho| / mean |o_SA|), over the bands the paper reports (< 4 under AdamW,
 *     > 8 in deep layers under Muon);
 *   |Sigma rho| against |o_SA|, log-log, one point per token coloured by position, with the
 *     iso-COR lines 1, 4 and 8;
 *   the softmax entropy normalised by log n (selected head; the other heads grey) and the
 *     largest softmax weight;
 *   the effective weights a_j = p_j (1 + ubar - u_j): min, max and the negative mass, with the
 *     sink weights p_{t,0} and a_{t,0};
 *   the rows a_ij themselves (B.9 item 4): the latest recorded queries (up to RECORD_ATTN_Q) over
 *     the latest keys (up to RECORD_ATTN_K), diverging colours (blue < 0 < red), from the
 *     "attn_a" / "attn_pos" snapshots (mixers/record.h). */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>

#include "../mixers/record.h"
#include "plot.h"
#include "view.h"

static void missing(canvas *c, box b, const char *title, const char *probe) {
    plot pl;
    axis ax = {0, 1, 0, 0, "token", 0}, ay = {0, 1, 0, 0, NULL, 0};
    plot_begin(&pl, c, b.x, b.y, b.w, b.h, title, ax, ay, 0);
    char msg[96];
    snprintf(msg, sizeof msg, "no '%s' probe in the trace", probe);
    plot_message(&pl, msg);
    plot_end(&pl);
}

/* The effective-weight rows of (layer, head) aligned on absolute key positions: D [Q][K], query
 * positions *q0 .. *q0 + Q - 1 (the newest recorded last), keys *k0 .. *k0 + K - 1. Returns the
 * number of rows found (0: nothing recorded). */
static int attn_rows(const trace *tr, int layer, int head, float *D, int *q0, int *k0) {
    const int Q = RECORD_ATTN_Q, K = RECORD_ATTN_K;
    int ka = trace_find_snapshot(tr, "attn_a"), kp = trace_find_snapshot(tr, "attn_pos");
    if (ka < 0 || kp < 0 || tr->snaps[ka].t < 0 || layer >= tr->snaps[ka].layers ||
        head >= tr->snaps[ka].heads || tr->snaps[ka].rows != Q || tr->snaps[ka].cols != K)
        return 0;
    const float *A = trace_snapshot_at(tr, ka, layer, head),
                *P = trace_snapshot_at(tr, kp, layer, head);
    int tq = -1, found = 0;
    for (int i = 0; i < Q; i++)
        if (P[i] > tq) tq = (int)P[i];
    *q0 = tq - (Q - 1), *k0 = tq - (K - 1);
    for (int i = 0; i < Q; i++) {
        const int qp = *q0 + i, ring = qp >= 0 ? qp % Q : 0;
        const int ok = qp >= 0 && (int)P[ring] == qp;
        found += ok;
        for (int jj = 0; jj < K; jj++) {
            const int j = *k0 + jj, col = j - qp + K - 1;
            D[(size_t)i * K + jj] = ok && j <= qp && col >= 0 ? A[(size_t)ring * K + col] : NAN;
        }
    }
    return tq >= 0 ? found : 0;
}

static void draw_rows(canvas *c, box b, const trace *tr, view_params *p) {
    const int Q = RECORD_ATTN_Q, K = RECORD_ATTN_K;
    float *D = malloc(sizeof(float) * Q * K);
    int q0 = 0, k0 = 0, n = D ? attn_rows(tr, p->layer, p->head, D, &q0, &k0) : 0;
    /* symmetric about 0 at the 99th percentile of |a|: the diagonal's few large weights would
     * wash the rest out to white */
    double hi = n ? vu_abs_quantile(D, (size_t)Q * K, 0.99) : 0;
    if (!(hi > 0)) hi = 1;
    char title[96];
    if (n)
        snprintf(title, sizeof title, "rows a_{ij}, layer %d head %d", p->layer, p->head);
    else
        snprintf(title, sizeof title, "effective weight rows a_{ij}");
    const int cbw = 88;
    int kfirst = k0 < 0 ? 0 : k0, qfirst = q0 < 0 ? 0 : q0;
    axis ax = {kfirst - 0.5, k0 + K - 0.5, 0, 0, "key position j", 1};
    axis ay = {qfirst - 0.5, q0 + Q - 0.5, 0, 1, "query i", 1};
    plot pl;
    plot_begin(&pl, c, b.x, b.y, b.w - cbw, b.h, title, ax, ay, PLOT_NO_GRID);
    if (n) {
        /* rows and columns before position 0 are left out */
        const int r0 = qfirst - q0, c0 = kfirst - k0;
        plot_heatmap(&pl, D + (size_t)r0 * K + c0, Q - r0, K - c0, K, 1, kfirst, 1, qfirst, 1,
                     CMAP_DIVERGING, -hi, hi, 0);
    } else {
        plot_message(&pl, "no attention rows (run a softmax or parallax layer)");
    }
    plot_end(&pl);
    plot_colorbar(c, b.x + b.w - cbw + 22, pl.y - 8, cbw - 22, pl.h + 16, CMAP_DIVERGING, -hi, hi,
                  0, "a_ij");
    vu_note_crange(p, "a_ij", -hi, hi, 0);
    free(D);
}

static int draw(canvas *c, const trace *tr, view_params *p, err *e) {
    int s_cor = vu_series(tr, "cor"), s_cn = vu_series(tr, "corr_norm"),
        s_sa = vu_series(tr, "sa_norm"), s_en = vu_series(tr, "entropy_norm"),
        s_mw = vu_series(tr, "max_weight"), s_amin = vu_series(tr, "a_min"),
        s_amax = vu_series(tr, "a_max"), s_neg = vu_series(tr, "neg_mass"),
        s_sp = vu_series(tr, "sink_p"), s_sa0 = vu_series(tr, "sink_a");
    if (s_cor < 0 && s_en < 0)
        return err_set(e, "view parallax: the trace has no 'cor' or 'entropy_norm' probe; run the "
                          "parallax (or softmax) mixer");
    vu_select(tr, s_cor >= 0 ? s_cor : s_en, p);
    int sel[] = {s_cor, s_cn, s_sa, s_en, s_mw, s_amin, s_amax, s_neg, s_sp, s_sa0};
    for (size_t i = 0; i < sizeof sel / sizeof sel[0]; i++) vu_note_mixer(p, tr, sel[i]);
    box area =
        vu_header(c, "Parallax: correction-to-output ratio, entropy, effective weights", tr, p);
    int64_t from = p->shown_from, to = p->shown_to, T = to - from;
    int L0 = p->layer, H0 = p->head;
    plot pl;

    /* 1, 2: COR heatmaps */
    box b1 = vu_cell(area, 3, 2, 0, 0), b2 = vu_cell(area, 3, 2, 0, 1);
    if (s_cor >= 0) {
        const trace_series *se = &tr->series[s_cor];
        int layers = se->layers, heads = se->heads;
        float *v = T > 0 ? malloc((size_t)(layers + heads) * (size_t)T * sizeof *v) : NULL;
        float *vh = v ? v + (size_t)layers * (size_t)T : NULL;
        for (int64_t t = 0; v && t < T; t++) {
            for (int l = 0; l < layers; l++)
                v[(size_t)l * T + t] = vu_at(tr, s_cor, from + t, l, H0, 0);
            for (int h = 0; h < heads; h++)
                vh[(size_t)h * T + t] = vu_at(tr, s_cor, from + t, L0, h, 0);
        }
        char t1[300], lanes[200];
        if (vu_lanes(tr))
            snprintf(t1, sizeof t1, "COR ‖Σρ‖/‖o_{SA}‖ per token × lane (head %d): %s", H0,
                     vu_lane_list(tr, p, lanes, sizeof lanes));
        else
            snprintf(t1, sizeof t1, "COR ‖Σρ‖/‖o_{SA}‖ per token × layer (head %d)", H0);
        vu_heatmap_tokens(c, b1, t1, vu_lanes(tr) ? "lane" : "layer", p, v, layers, VU_LOG, "COR");
        snprintf(t1, sizeof t1, "COR per token × head (%s %d)", vu_lanes(tr) ? "lane" : "layer",
                 L0);
        vu_heatmap_tokens(c, b2, t1, "head", p, vh, heads, VU_LOG, "COR");
        free(v);
    } else {
        missing(c, b1, "COR per token × layer", "cor");
        missing(c, b2, "COR per token × head", "cor");
    }

    /* 3: depth profile */
    box b3 = vu_cell(area, 3, 2, 1, 0);
    if (s_cor >= 0 && s_cn >= 0 && s_sa >= 0) {
        int layers = tr->series[s_cor].layers;
        double *lx = malloc((size_t)layers * 3 * sizeof *lx), *mcor = lx + layers,
               *rom = lx + 2 * layers;
        range r;
        range_init(&r);
        for (int l = 0; lx && l < layers; l++) {
            double sc = 0, sn = 0, ss = 0;
            int n = 0;
            for (int64_t t = from; t < to; t++) {
                float a = vu_at(tr, s_cor, t, l, H0, 0), b = vu_at(tr, s_cn, t, l, H0, 0),
                      d = vu_at(tr, s_sa, t, l, H0, 0);
                if (!isfinite(a) || !isfinite(b) || !isfinite(d)) continue;
                sc += a, sn += b, ss += d, n++;
            }
            lx[l] = l;
            mcor[l] = n ? sc / n : NAN;
            rom[l] = n && ss > 0 ? sn / ss : NAN;
            range_add(&r, mcor[l], 1), range_add(&r, rom[l], 1);
        }
        /* raw lanes are not depth: no paper bands, which are about the layers of trained models */
        int lanes = vu_lanes(tr);
        if (!lanes) range_add(&r, 4, 1), range_add(&r, 8, 1);
        axis ax = {-0.5, layers - 0.5, 0, 0, lanes ? "lane" : "layer", 1};
        plot_begin(&pl, c, b3.x, b3.y, b3.w, b3.h,
                   lanes ? "COR by lane (head mean over tokens)"
                         : "depth profile of COR (head mean over tokens)",
                   ax, axis_fit(&r, 1, 0, "COR"), 0);
        rgba low = palette(2), high = palette(1);
        low.a = 40, high.a = 40;
        if (!lanes) {
            plot_band(&pl, pl.ay.lo, 4, low);
            plot_band(&pl, 8, pl.ay.hi, high);
            plot_hline(&pl, 4, palette(2), STYLE_DASHED, NULL);
            plot_hline(&pl, 8, palette(1), STYLE_DASHED, NULL);
        }
        if (lx) {
            plot_xy(&pl, lx, mcor, layers, STYLE_LINE, 1.8f, palette(0));
            plot_xy(&pl, lx, mcor, layers, STYLE_MARKERS, 3.0f, palette(0));
            plot_xy(&pl, lx, rom, layers, STYLE_DASHED, 1.6f, palette(3));
            plot_xy(&pl, lx, rom, layers, STYLE_MARKERS, 2.5f, palette(3));
        }
        legend_item li[] = {{"mean of COR", palette(0), STYLE_LINE},
                            {"ratio of means", palette(3), STYLE_DASHED},
                            {"< 4: AdamW (paper)", low, STYLE_BOX},
                            {"> 8: Muon, deep layers", high, STYLE_BOX}};
        li[2].col.a = 110, li[3].col.a = 110;
        plot_legend(&pl, li, lanes ? 2 : 4, LEGEND_AUTO);
        plot_end(&pl);
        free(lx);
    } else
        missing(c, b3, "depth profile of COR", "corr_norm");

    /* 4: scatter of the correction against the softmax output */
    box b4 = vu_cell(area, 3, 2, 1, 1);
    if (s_cn >= 0 && s_sa >= 0) {
        range rx, ry;
        range_init(&rx), range_init(&ry);
        for (int64_t t = from; t < to; t++) {
            range_add(&rx, vu_at(tr, s_sa, t, L0, H0, 0), 1);
            range_add(&ry, vu_at(tr, s_cn, t, L0, H0, 0), 1);
        }
        /* one shared log range so the iso-COR lines are diagonals */
        range rb = rx;
        if (ry.n) range_add(&rb, ry.lo, 1), range_add(&rb, ry.hi, 1);
        axis ax = axis_fit(&rb, 2, 0, "‖o_{SA}‖"), ay = axis_fit(&rb, 2, 0, "‖Σρ‖");
        if (!ax.log) ax.log = ay.log = 1, ax.lo = ay.lo = 1e-3, ax.hi = ay.hi = 10;
        char t4[96];
        snprintf(t4, sizeof t4, "‖Σρ‖ against ‖o_{SA}‖, layer %d head %d (dashed: COR 1, 4, 8)", L0,
                 H0);
        plot_begin(&pl, c, b4.x, b4.y, b4.w - 64, b4.h, t4, ax, ay, 0);
        static const double ISO[3] = {1, 4, 8};
        for (int k = 0; k < 3; k++) {
            double xs[2] = {ax.lo, ax.hi}, ys[2] = {ax.lo * ISO[k], ax.hi * ISO[k]};
            plot_xy(&pl, xs, ys, 2, STYLE_DASHED, 1.0f, theme_faint());
            /* label where the line leaves the frame at the top (or the right) */
            char lab[24];
            snprintf(lab, sizeof lab, "%g", ISO[k]);
            double xe = ay.hi / ISO[k];
            if (xe > ax.hi) xe = ax.hi;
            if (xe > ax.lo)
                canvas_text(c, (int)plot_px(&pl, xe) - 4, (int)plot_py(&pl, xe * ISO[k]) + 2, lab,
                            FONT_SMALL, ALIGN_RIGHT, theme_faint());
        }
        for (int64_t t = from; t < to; t++) {
            double x = vu_at(tr, s_sa, t, L0, H0, 0), y = vu_at(tr, s_cn, t, L0, H0, 0);
            rgba col = cmap_at(CMAP_VIRIDIS, T > 1 ? (double)(t - from) / (T - 1) : 0.5);
            canvas_disc(c, (float)plot_px(&pl, x), (float)plot_py(&pl, y), 2.6f, col);
        }
        plot_end(&pl);
        plot_colorbar(c, b4.x + b4.w - 50, pl.y - 8, 50, pl.h + 16, CMAP_VIRIDIS, (double)from,
                      (double)(to > from ? to - 1 : from), 0, NULL);
    } else
        missing(c, b4, "‖Σρ‖ against ‖o_{SA}‖", "corr_norm");

    /* the bottom row in thirds: 5 entropy, 6 the weights' extremes, 7 the rows a_ij */
    box bottom = vu_cell(area, 3, 1, 2, 0);
    box b5 = vu_cell(bottom, 1, 3, 0, 0);
    if (s_en >= 0) {
        vu_line L[66];
        int n = 0;
        int heads = tr->series[s_en].heads;
        for (int h = 0; h < heads && n < 63; h++)
            if (h != H0)
                L[n++] = (vu_line){s_en, L0, h, 0, NULL, rgb(205, 205, 205), STYLE_LINE, 1.0f, 0};
        L[n++] = (vu_line){s_en, L0, H0, 0, "H / log n", palette(0), STYLE_LINE, 1.8f, 0};
        if (s_mw >= 0)
            L[n++] = (vu_line){s_mw, L0, H0, 0, "max weight p", palette(1), STYLE_LINE, 1.4f, 0};
        vu_ref refs[] = {{0, NULL, theme_faint(), STYLE_LINE},
                         {1, NULL, theme_faint(), STYLE_LINE}};
        vu_lines(&pl, c, b5, "entropy H / log n (other heads grey)", NULL, tr, p, L, n, refs, 2, 0,
                 0);
        plot_end(&pl);
    } else
        missing(c, b5, "softmax entropy", "entropy_norm");

    /* 6: effective weights */
    box b6 = vu_cell(bottom, 1, 3, 0, 1);
    vu_line L[6];
    int n = 0;
    if (s_amin >= 0)
        L[n++] = (vu_line){s_amin, L0, H0, 0, "min a_{j}", palette(0), STYLE_LINE, 1.6f, 0};
    if (s_amax >= 0)
        L[n++] = (vu_line){s_amax, L0, H0, 0, "max a_{j}", palette(1), STYLE_LINE, 1.6f, 0};
    if (s_neg >= 0)
        L[n++] = (vu_line){s_neg, L0, H0, 0, "negative mass N", palette(3), STYLE_LINE, 1.6f, 0};
    if (s_sp >= 0)
        L[n++] = (vu_line){s_sp, L0, H0, 0, "sink p_{t,0}", palette(4), STYLE_DASHED, 1.3f, 0};
    if (s_sa0 >= 0)
        L[n++] = (vu_line){s_sa0, L0, H0, 0, "sink a_{t,0}", palette(5), STYLE_DASHED, 1.3f, 0};
    if (n) {
        vu_ref refs[] = {{0, NULL, theme_faint(), STYLE_LINE}};
        vu_lines(&pl, c, b6, "a_{j} = p_{j}(1 + ū − u_{j}): extremes, sink", NULL, tr, p, L, n,
                 refs, 1, 0, 0);
        plot_end(&pl);
    } else
        missing(c, b6, "effective weights", "a_min");

    /* 7: the rows */
    draw_rows(c, vu_cell(bottom, 1, 3, 0, 2), tr, p);
    return 0;
}

const view view_parallax = {
    "parallax",
    "Parallax COR ‖Σρ‖/‖o_SA‖ per token × layer and head, depth profile, entropy, weights and "
    "their rows a_ij",
    "",
    draw,
    "attn,cor,corr_norm,sa_norm,entropy_norm,max_weight,a_min,a_max,neg_mass,sink_p,sink_a",
    0,
};
