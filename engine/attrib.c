/* attrib.c: exact attribution of the run so far, one layer and head (interv.h,
 * engine_attribution): the core's inputs captured again (engine_capture), then
 * mixers/attribution.c on that head alone. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "../mixers/attribution.h"
#include "../models/model.h"
#include "internal.h"
#include "interv.h"

typedef struct grab {
    const mixer_cfg *c; /* the layer's config (all heads) */
    int h, T;
    float *in[IN_COUNT]; /* [T, 1, w] head h's inputs */
    float *init;         /* the whole state before token 0 */
    size_t sf;
} grab;

static void on_token(void *ctx, int t, const mixer_tok *x, const float *state) {
    grab *g = ctx;
    if (t == 0) memcpy(g->init, state, g->sf * sizeof(float));
    for (int i = 0; i < IN_COUNT; i++) {
        if (!g->in[i] || !x->in[i]) continue;
        int w = mixer_input_floats(g->c, (mixer_input)i);
        memcpy(g->in[i] + (size_t)t * w, x->in[i] + (size_t)g->h * w, (size_t)w * sizeof(float));
    }
}

int engine_core_at(engine *g, int li, const mixer_ops **mx, const mixer_cfg **mc, float **state,
                   err *e) {
    if (engine_raw_active(g)) {
        if (li < 0 || li >= g->raw->nl)
            return err_set(e, "layer %d: the lanes are 0..%d", li, g->raw->nl - 1);
        *mx = g->raw->lane[li].m, *mc = &g->raw->lane[li].c;
        if (state) *state = g->raw->lane[li].state;
        return 0;
    }
    if (!g->model) return err_set(e, "no model or mixer (load PATH, model random or mixer first)");
    if (li < 0 || li >= g->model->c.layers)
        return err_set(e, "layer %d: the model has layers 0..%d", li, g->model->c.layers - 1);
    *mx = g->model->layers[li].mx, *mc = &g->model->layers[li].mc;
    if (state) *state = g->model->layers[li].state;
    return 0;
}

int engine_attribution(engine *g, int li, int h, err *e) {
    const mixer_ops *mx = NULL;
    const mixer_cfg *mc = NULL;
    if (engine_core_at(g, li, &mx, &mc, NULL, e)) return err_prefix(e, "attribution");
    if (!attribution_supported(mx))
        return err_set(e,
                       "attribution: layer %d's core %s normalises by a state-dependent "
                       "denominator; its output is not a fixed sum of its values",
                       li, mx->name);
    if (h < 0 || h >= mc->H)
        return err_set(e, "attribution: head %d: layer %d has heads 0..%d", h, li, mc->H - 1);
    int T = engine_pos(g);
    if (T < 1) return err_set(e, "attribution: no tokens have run yet");
    for (int i = 0; i < engine_iv_count(g); i++) {
        const engine_iv *iv = engine_iv_at(g, i);
        if (iv->kind != IV_ABLATE && iv->pos > 0 && iv->pos < T &&
            (iv->layer == li || iv->layer < 0))
            return err_set(e,
                           "attribution: an intervention at position %d changes layer %d's state "
                           "inside the run, so its output is no fixed sum of its values (edits "
                           "clear, reset and run)",
                           iv->pos, li);
    }
    /* cached: the same layer, head, position and run */
    int ka = trace_find_snapshot(&g->tr, "attribution_at");
    if (ka >= 0) {
        const float *at = trace_snapshot_at(&g->tr, ka, 0, 0);
        if (at[0] == li && at[1] == h && at[2] == T && at[3] == (float)(g->gen & 0xffffff))
            return 0;
    }
    if ((size_t)T * T > ((size_t)1 << 28))
        return err_set(e, "attribution: %d tokens make a %d x %d matrix (more than 2^28 floats)", T,
                       T, T);
    mixer_cfg c1 = *mc;
    c1.H = 1;
    if (c1.max_t < T) c1.max_t = T;
    grab gb = {.c = mc, .h = h, .T = T, .sf = mx->state_floats(mc)};
    int rc = 0;
    gb.init = malloc(gb.sf * sizeof(float));
    rc |= !gb.init;
    for (int i = 0; i < mx->ninputs && !rc; i++) {
        mixer_input w = mx->inputs[i].which;
        gb.in[w] = calloc((size_t)T * mixer_input_floats(mc, w), sizeof(float));
        rc |= !gb.in[w];
    }
    size_t n1 = mx->state_floats(&c1);
    float *init1 = malloc(n1 * sizeof(float)), *oi = malloc((size_t)T * mc->dv * sizeof(float));
    rc |= !init1 || !oi;
    int sm = -1, sd = -1, so = -1, sv = -1;
    if (rc) {
        rc = err_set(e, "attribution: out of memory");
    } else if (engine_capture(g, li, 0, T - 1, on_token, &gb, e)) {
        rc = -1;
    } else if ((sm = trace_add_snapshot(&g->tr, "attribution", 1, 1, T, T, e)) < 0 ||
               (sd = trace_add_snapshot(&g->tr, "attribution_decay", 1, 1, T, T, e)) < 0 ||
               (so = trace_add_snapshot(&g->tr, "attribution_oinit", 1, 1, T, mc->dv, e)) < 0 ||
               (sv = trace_add_snapshot(&g->tr, "attribution_vnorm", 1, 1, 1, T, e)) < 0 ||
               (ka = trace_add_snapshot(&g->tr, "attribution_at", 1, 1, 1, 6, e)) < 0) {
        rc = -1;
    } else {
        /* head h's part of the initial state, as a one-head state */
        mx->state_init(&c1, init1);
        state_part pa[MIXER_MAX_STATE_PARTS], p1[MIXER_MAX_STATE_PARTS];
        int np = mx->state_parts ? mx->state_parts(mc, pa) : 0;
        mx->state_parts ? mx->state_parts(&c1, p1) : 0;
        for (int p = 0; p < np; p++) {
            if (strcmp(pa[p].name, "hT")) continue;
            size_t per = (size_t)mc->dk * mc->dv;
            memcpy(init1 + p1[p].offset, gb.init + pa[p].offset + (size_t)h * per,
                   per * sizeof(float));
        }
        mixer_seq x = {.T = T};
        for (int i = 0; i < IN_COUNT; i++) x.in[i] = gb.in[i];
        float *M = trace_snapshot_at(&g->tr, sm, 0, 0), *Md = trace_snapshot_at(&g->tr, sd, 0, 0);
        if (mixer_attribution(mx, &c1, init1, &x, M, Md, oi, e)) {
            rc = err_prefix(e, "attribution");
        } else {
            memcpy(trace_snapshot_at(&g->tr, so, 0, 0), oi, (size_t)T * mc->dv * sizeof(float));
            float *vn = trace_snapshot_at(&g->tr, sv, 0, 0);
            for (int t = 0; t < T; t++) {
                double s = 0;
                for (int c = 0; c < mc->dv; c++) {
                    double v = gb.in[IN_V][(size_t)t * mc->dv + c];
                    s += v * v;
                }
                vn[t] = (float)sqrt(s);
            }
            float *at = trace_snapshot_at(&g->tr, ka, 0, 0);
            at[0] = (float)li, at[1] = (float)h, at[2] = (float)T;
            at[3] = (float)(g->gen & 0xffffff);
            at[4] = (float)(engine_raw_active(g) ? g->raw->nl : g->model->c.layers);
            at[5] = (float)mc->H;
            g->tr.snaps[sm].t = g->tr.snaps[sd].t = g->tr.snaps[so].t = g->tr.snaps[sv].t =
                g->tr.snaps[ka].t = T - 1;
        }
    }
    for (int i = 0; i < IN_COUNT; i++) free(gb.in[i]);
    free(gb.init), free(init1), free(oi);
    return rc ? -1 : 0;
}
