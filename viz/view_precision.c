/* view_precision.c: the precision replay over time (`diagnose precision`, diag/precision.c).
 *
 * Top: the logits of each reduced-precision run against fp32, |l - l_fp32| / |l_fp32|, per token.
 * Bottom: the state of each run against fp32 at the selected layer and head,
 * |S - S_fp32|_F / |S_fp32|_F. Log scale: rounding sits near 1e-3 (bf16) or 1e-4 (fp16) and a
 * run that parts from fp32 climbs towards 1 (or jumps to inf when fp16 overflows). A divergence
 * of exactly 0 (the state variants' logits at token 0: the state is rounded after the step that
 * made them) leaves a gap instead of forcing a linear axis. One legend, in the top panel: the
 * colours are the same below.
 *
 * The series are the ones diag_precision_record writes (diag/diag.h): prec_<variant>
 * [layers][heads][1] and prec_logits [1][variant][1]. They are read by name, so this file needs
 * nothing from diag/ and the view sits in the table like every other. */
#include <stdio.h>

#include "plot.h"
#include "view.h"

/* The variants in diag/precision.c's order (DIAG_PREC_F32, _BF16_STATE, _F16_STATE, _BF16_IN);
 * prec_logits holds variant v at head v. */
#define PREC_N 4
static const char *const LABEL[PREC_N] = {"fp32", "bf16 state", "fp16 state", "bf16 inputs"};
static const char *const SERIES[PREC_N] = {"prec_fp32", "prec_bf16_state", "prec_fp16_state",
                                           "prec_bf16_inputs"};

static int draw(canvas *c, const trace *tr, view_params *p, err *e) {
    int sl = vu_series(tr, "prec_logits");
    if (sl < 0)
        return err_set(e, "view precision: no precision replay in the trace; run `diagnose "
                          "precision` first (it needs a model with tokens)");
    int s1 = vu_series(tr, SERIES[1]);
    vu_select(tr, s1 >= 0 ? s1 : sl, p);
    vu_note_mixer(p, tr, sl);
    box area = vu_header(c, "precision replay: divergence from fp32", tr, p);
    box top = vu_cell(area, 2, 1, 0, 0), bot = vu_cell(area, 2, 1, 1, 0);
    plot pl;
    vu_line L[PREC_N];
    int n = 0;
    for (int v = 1; v < PREC_N; v++)
        L[n++] = (vu_line){sl, 0, v, 0, LABEL[v], palette(v - 1), STYLE_LINE, 1.6f, 0};
    vu_lines(&pl, c, top, "logits: |l - l_fp32| / |l_fp32|", "rel. difference", tr, p, L, n, NULL,
             0, 3, PLOT_NO_XTICKS);
    plot_end(&pl);
    n = 0;
    for (int v = 1; v < PREC_N; v++) {
        int s = vu_series(tr, SERIES[v]);
        if (s >= 0)
            L[n++] = (vu_line){s, p->layer, p->head, 0, NULL, palette(v - 1), STYLE_LINE, 1.6f, 0};
    }
    char t[120];
    snprintf(t, sizeof t, "state of layer %d, head %d: |S − S_{fp32}|_{F} / |S_{fp32}|_{F}",
             p->layer, p->head);
    vu_lines(&pl, c, bot, t, "rel. difference", tr, p, L, n, NULL, 0, 3, 0);
    plot_end(&pl);
    return 0;
}

const view view_precision = {
    "precision", "precision replay: bf16 / fp16 state and bf16 inputs against fp32 over tokens",
    "",          draw,
    NULL,        0,
};
