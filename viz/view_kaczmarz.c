/* view_kaczmarz.c: the delta rule's write, token by token (spec/delta-family.md §8.4, §9).
 *
 * Six panels over tokens for the selected layer and head:
 *   write strength beta_t (every layer at this head, so a Kaczmarz layer shows beside a GDN
 *   layer run on the same stream; series named "<mixer>.beta" are added too) and eta_t;
 *   |k_t|^2; the residual |e_t| before the write and the post-write error |r_t| after it;
 *   the relaxation rho_t = beta_t |k_t|^2 with the exact-write line rho = 1 and the contraction
 *   limit rho = 2; the state norm |S_t|_F; forgetting (1 - alpha)|S| against erasing. */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "plot.h"
#include "view.h"

/* Adds one line per layer of series s at the selected head (the selected layer thick). */
static int layer_lines(const trace *tr, int s, view_params *p, const char *what, vu_line *L,
                       char (*labels)[48], int max, int style) {
    int n = 0;
    if (s < 0) return 0;
    int layers = tr->series[s].layers;
    for (int l = 0; l < layers && n < max; l++) {
        /* skip layers that recorded nothing in the range (another mixer ran there) */
        int any = 0;
        for (int64_t t = p->shown_from; t < p->shown_to && !any; t++)
            any = isfinite(vu_at(tr, s, t, l, p->head, 0));
        if (!any && l != p->layer) continue;
        char name[48];
        snprintf(labels[n], 48, "%s %s", what, vu_layer_name(tr, p, l, name, sizeof name));
        vu_note_layer(p, tr, l);
        L[n] = (vu_line){s,
                         l,
                         p->head,
                         0,
                         layers > 1 || *what ? labels[n] : NULL,
                         l == p->layer ? palette(0) : palette(1 + l % 6),
                         style,
                         l == p->layer ? 2.0f : 1.2f,
                         0};
        n++;
    }
    return n;
}

static void missing(plot *pl, canvas *c, box b, const char *title, const char *probe) {
    axis ax = {0, 1, 0, 0, "token", 0}, ay = {0, 1, 0, 0, NULL, 0};
    plot_begin(pl, c, b.x, b.y, b.w, b.h, title, ax, ay, 0);
    char msg[96];
    snprintf(msg, sizeof msg, "no '%s' probe in the trace", probe);
    plot_message(pl, msg);
    plot_end(pl);
}

static int draw(canvas *c, const trace *tr, view_params *p, err *e) {
    int s_beta = vu_series(tr, "beta"), s_eta = vu_series(tr, "eta"), s_rho = vu_series(tr, "rho");
    int s_k = vu_series(tr, "k_norm"), s_e = vu_series(tr, "e_norm"), s_r = vu_series(tr, "r_norm");
    int s_sn = vu_series(tr, "state_norm"), s_fr = vu_series(tr, "forget_removed"),
        s_er = vu_series(tr, "erase_removed");
    if (s_beta < 0 && s_rho < 0 && s_e < 0)
        return err_set(e, "view kaczmarz: the trace has no delta-rule probes (beta, rho, "
                          "e_norm); run gdn, deltanet or kaczmarz first");
    vu_select(tr, s_rho >= 0 ? s_rho : (s_beta >= 0 ? s_beta : s_e), p);
    int sel[] = {s_beta, s_eta, s_rho, s_k, s_e, s_r, s_sn, s_fr, s_er};
    for (size_t i = 0; i < sizeof sel / sizeof sel[0]; i++) vu_note_mixer(p, tr, sel[i]);

    box area = vu_header(c, "Kaczmarz / delta rule: write strength, residuals, relaxation", tr, p);
    plot pl;
    int L0 = p->layer, H0 = p->head;

    /* 1: beta for every layer at this head, prefixed "<mixer>.beta" series, and eta */
    box b = vu_cell(area, 3, 2, 0, 0);
    vu_line L[16];
    char labels[16][48];
    int n = layer_lines(tr, s_beta, p, "β", L, labels, 8, STYLE_LINE);
    for (int i = 0; i < tr->nseries && n < 14; i++) {
        const char *nm = tr->series[i].name, *dot = strrchr(nm, '.');
        if (!dot || strcmp(dot, ".beta") != 0) continue;
        snprintf(labels[n], 48, "β %.*s", (int)(dot - nm > 30 ? 30 : dot - nm), nm);
        L[n] = (vu_line){i,          L0 < tr->series[i].layers ? L0 : 0,
                         H0,         0,
                         labels[n],  palette(3 + n % 4),
                         STYLE_LINE, 1.4f,
                         0};
        vu_note_mixer(p, tr, i);
        n++;
    }
    if (s_eta >= 0) L[n++] = (vu_line){s_eta, L0, H0, 0, "η", palette(2), STYLE_DASHED, 1.4f, 0};
    if (n) {
        vu_lines(&pl, c, b, "write strength β_{t} (Kaczmarz: η/(‖k‖²+ε))", "β", tr, p, L, n, NULL,
                 0, 1, PLOT_NO_XTICKS);
        plot_end(&pl);
    } else
        missing(&pl, c, b, "write strength β_{t}", "beta");

    /* 2: |k|^2 */
    b = vu_cell(area, 3, 2, 0, 1);
    if (s_k >= 0) {
        vu_line k = {s_k, L0, H0, 0, NULL, palette(0), STYLE_LINE, 1.6f, 1};
        vu_lines(&pl, c, b, "key norm ‖k_{t}‖²", "‖k‖²", tr, p, &k, 1, NULL, 0, 1, PLOT_NO_XTICKS);
        plot_end(&pl);
    } else
        missing(&pl, c, b, "key norm ‖k_{t}‖²", "k_norm");

    /* 3: residual before, error after: every lane that recorded them, ‖e‖ solid, ‖r‖ dashed */
    b = vu_cell(area, 3, 2, 1, 0);
    n = layer_lines(tr, s_e, p, "‖e‖", L, labels, 6, STYLE_LINE);
    n += layer_lines(tr, s_r, p, "‖r‖", L + n, labels + n, 6, STYLE_DASHED);
    if (n) {
        vu_lines(&pl, c, b,
                 "residual e_{t} = v_{t} − αS_{t−1}ᵀk_{t} before the write (solid), r_{t} = "
                 "S_{t}ᵀk_{t} − v_{t} "
                 "after (dashed)",
                 "norm", tr, p, L, n, NULL, 0, 1, PLOT_NO_XTICKS);
        plot_end(&pl);
    } else
        missing(&pl, c, b, "residual and post-write error", "e_norm");

    /* 4: relaxation, every lane */
    b = vu_cell(area, 3, 2, 1, 1);
    n = layer_lines(tr, s_rho, p, "ρ", L, labels, 8, STYLE_LINE);
    if (n) {
        vu_ref refs[] = {{0, NULL, theme_faint(), STYLE_LINE},
                         {1, "ρ = 1: exact write", palette(2), STYLE_DASHED},
                         {2, "ρ = 2: contraction limit", palette(1), STYLE_DASHED}};
        vu_lines(&pl, c, b, "relaxation ρ_{t} = β_{t}‖k_{t}‖²", "ρ", tr, p, L, n, refs, 3, 0,
                 PLOT_NO_XTICKS);
        plot_end(&pl);
    } else
        missing(&pl, c, b, "relaxation ρ_{t}", "rho");

    /* 5: state norm */
    b = vu_cell(area, 3, 2, 2, 0);
    if (s_sn >= 0) {
        vu_line sn = {s_sn, L0, H0, 0, NULL, palette(0), STYLE_LINE, 1.6f, 0};
        vu_lines(&pl, c, b, "state norm ‖S_{t}‖_{F}", "‖S‖_{F}", tr, p, &sn, 1, NULL, 0, 1, 0);
        plot_end(&pl);
    } else
        missing(&pl, c, b, "state norm", "state_norm");

    /* 6: forgetting against erasing */
    b = vu_cell(area, 3, 2, 2, 1);
    n = 0;
    if (s_fr >= 0)
        L[n++] = (vu_line){s_fr, L0, H0, 0, "forgetting (1−α)‖S‖", palette(4), STYLE_LINE, 1.6f, 0};
    if (s_er >= 0)
        L[n++] = (vu_line){s_er, L0, H0, 0, "erasing β‖k‖‖αSᵀk‖", palette(5), STYLE_LINE, 1.6f, 0};
    if (n) {
        vu_lines(&pl, c, b, "removal: decay against the delta", "removed", tr, p, L, n, NULL, 0, 1,
                 0);
        plot_end(&pl);
    } else
        missing(&pl, c, b, "removal: decay against the delta", "erase_removed");
    return 0;
}

const view view_kaczmarz = {
    "kaczmarz", "delta-rule writes per token: β (Kaczmarz beside GDN), ‖k‖², ‖e‖, ‖r‖, ρ, ‖S‖", "",
    draw,       "beta,eta,rho,k_norm,e_norm,r_norm,state_norm,forget_removed,erase_removed",    0,
};
