/* view_kalman.c: Kalman linear attention's filter, token by token (spec/kalman.md §5, §11).
 *
 * The lane probes are [M][S] per head (M channels = dv, S state lanes per channel = dk); `index`
 * picks one lane, m = index / S, s = index % S. Panels:
 *   posterior precision per channel over time: the geometric mean over s of lambda_t [M] (log
 *     colour; the spec's choice of reduction is open, this one keeps decades readable);
 *   the selected lane: lambda_t, the prior lambda^-_t and the steady state lambda*(phi_t) (dashed);
 *   the lane's forget gate f_t and write gate w_t in [0, 1], with the head's mean gates;
 *   the output (posterior) variance sum_s q^2 / lambda per channel (log colour);
 *   the standardised innovation e_t / sqrt(S_t) per channel (diverging, symmetric);
 *   the distance to the steady state, max over lanes |lambda - lambda*| / lambda*. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>

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

/* [M][T] of a per-channel series (width M), or of a lane series reduced over s by the geometric
 * mean. NULL without tokens. */
static float *channels(const trace *tr, const view_params *p, int s, int M, int S, int geo) {
    int64_t T = p->shown_to - p->shown_from;
    if (T <= 0) return NULL;
    float *v = malloc((size_t)M * (size_t)T * sizeof *v);
    for (int m = 0; v && m < M; m++)
        for (int64_t t = 0; t < T; t++) {
            float x;
            if (!geo) {
                x = vu_at(tr, s, p->shown_from + t, p->layer, p->head, m);
            } else {
                double acc = 0;
                int n = 0;
                for (int j = 0; j < S; j++) {
                    float l = vu_at(tr, s, p->shown_from + t, p->layer, p->head, m * S + j);
                    if (l > 0 && isfinite(l)) acc += log(l), n++;
                }
                x = n ? (float)exp(acc / n) : NAN;
            }
            v[(size_t)m * (size_t)T + (size_t)t] = x;
        }
    return v;
}

static int draw(canvas *c, const trace *tr, view_params *p, err *e) {
    int s_lam = vu_series(tr, "lambda"), s_pri = vu_series(tr, "lambda_prior"),
        s_star = vu_series(tr, "lambda_star"), s_w = vu_series(tr, "write"),
        s_f = vu_series(tr, "forget"), s_wm = vu_series(tr, "write_mean"),
        s_fm = vu_series(tr, "forget_mean"), s_yv = vu_series(tr, "yvar"),
        s_z = vu_series(tr, "innovation_z"), s_gap = vu_series(tr, "lambda_star_gap"),
        s_lv = vu_series(tr, "lambda_v");
    if (s_lam < 0)
        return err_set(e, "view kalman: the trace has no 'lambda' probe; run the kalman mixer");
    /* channels M from a per-channel probe; lanes per channel S from the lane width */
    int lanes = tr->series[s_lam].width;
    int M = s_yv >= 0 ? tr->series[s_yv].width : (s_lv >= 0 ? tr->series[s_lv].width : 1);
    if (M < 1 || lanes % M) M = 1;
    int S = lanes / M;
    vu_select(tr, s_lam, p);
    if (p->index < 0) p->index = 0;
    if (p->index >= lanes) p->index = lanes - 1;
    int m = p->index / S, sl = p->index % S;
    int sel[] = {s_lam, s_pri, s_star, s_w, s_f, s_yv, s_z, s_gap};
    for (size_t i = 0; i < sizeof sel / sizeof sel[0]; i++) vu_note_mixer(p, tr, sel[i]);

    char title[160];
    snprintf(title, sizeof title,
             "Kalman filter: precision, gates, innovation  (lane m=%d s=%d; "
             "index=%d of %d×%d)",
             m, sl, p->index, M, S);
    box area = vu_header(c, title, tr, p);
    plot pl;
    int L0 = p->layer, H0 = p->head;

    /* 1: precision per channel */
    box b = vu_cell(area, 3, 2, 0, 0);
    float *v = channels(tr, p, s_lam, M, S, 1);
    vu_heatmap_tokens(c, b, "posterior precision λ_{t} per channel (geometric mean over s)",
                      "channel m", p, v, M, VU_LOG, "λ");
    free(v);

    /* 2: the lane: lambda, prior, steady state */
    b = vu_cell(area, 3, 2, 0, 1);
    vu_line L[4];
    int n = 0;
    L[n++] = (vu_line){s_lam, L0, H0, p->index, "λ_{t} posterior", palette(0), STYLE_LINE, 1.8f, 0};
    if (s_pri >= 0)
        L[n++] =
            (vu_line){s_pri, L0, H0, p->index, "λ⁻_{t} prior", palette(5), STYLE_LINE, 1.2f, 0};
    if (s_star >= 0)
        L[n++] = (vu_line){s_star,     L0,           H0,   p->index, "λ* steady state",
                           palette(1), STYLE_DASHED, 1.6f, 0};
    char t2[96];
    snprintf(t2, sizeof t2, "precision of lane (m=%d, s=%d) against its steady state λ*", m, sl);
    vu_lines(&pl, c, b, t2, "λ", tr, p, L, n, NULL, 0, 1, 0);
    plot_end(&pl);

    /* 3: gates */
    b = vu_cell(area, 3, 2, 1, 0);
    n = 0;
    if (s_f >= 0)
        L[n++] = (vu_line){s_f, L0, H0, p->index, "forget f_{t}", palette(0), STYLE_LINE, 1.8f, 0};
    if (s_w >= 0)
        L[n++] = (vu_line){s_w, L0, H0, p->index, "write w_{t}", palette(1), STYLE_LINE, 1.8f, 0};
    if (s_fm >= 0)
        L[n++] = (vu_line){s_fm, L0, H0, 0, "head mean f", palette(0), STYLE_DASHED, 1.0f, 0};
    if (s_wm >= 0)
        L[n++] = (vu_line){s_wm, L0, H0, 0, "head mean w", palette(1), STYLE_DASHED, 1.0f, 0};
    if (n) {
        vu_ref refs[] = {{0, NULL, theme_faint(), STYLE_LINE},
                         {1, NULL, theme_faint(), STYLE_LINE}};
        vu_lines(&pl, c, b, "gates of the lane: forget f = ā λ⁻/λ, write w = φ/λ", "gate", tr, p, L,
                 n, refs, 2, 0, 0);
        plot_end(&pl);
    } else
        missing(c, b, "gates", "forget");

    /* 4: posterior variance per channel */
    b = vu_cell(area, 3, 2, 1, 1);
    if (s_yv >= 0) {
        v = channels(tr, p, s_yv, M, S, 0);
        vu_heatmap_tokens(c, b, "output variance Σ_{s} q²/λ per channel (posterior uncertainty)",
                          "channel m", p, v, M, VU_LOG, "yvar");
        free(v);
    } else
        missing(c, b, "posterior variance", "yvar");

    /* 5: standardised innovation */
    b = vu_cell(area, 3, 2, 2, 0);
    if (s_z >= 0) {
        v = channels(tr, p, s_z, M, S, 0);
        vu_heatmap_tokens(c, b, "standardised innovation e_{t}/√S_{t} per channel (surprise)",
                          "channel m", p, v, M, VU_SIGNED, "e/√S");
        free(v);
    } else
        missing(c, b, "standardised innovation", "innovation_z");

    /* 6: distance to the steady state */
    b = vu_cell(area, 3, 2, 2, 1);
    if (s_gap >= 0) {
        vu_line g = {s_gap, L0, H0, 0, NULL, palette(2), STYLE_LINE, 1.8f, 0};
        vu_lines(&pl, c, b, "distance to steady state: max over lanes |λ − λ*| / λ*", "gap", tr, p,
                 &g, 1, NULL, 0, 1, 0);
        plot_end(&pl);
    } else
        missing(c, b, "distance to steady state", "lambda_star_gap");
    return 0;
}

const view view_kalman = {
    "kalman",
    "Kalman filter per token: precision λ per channel, λ*, forget/write gates, variance, "
    "innovation",
    "index=I (the lane m·S + s)",
    draw,
    "lambda,lambda_prior,lambda_star,write,forget,write_mean,forget_mean,yvar,innovation_z,lambda_"
    "star_gap,lambda_v",
    0,
};
