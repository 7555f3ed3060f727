/* recall.c: the keys and values each layer's (or lane's) core saw and the readback picture of
 * viz/recall.h, recorded as the state changes: one recall_tracker per layer, updated
 * incrementally where the core has a write form (gdn, deltanet, kaczmarz, mamba2), as a float
 * product otherwise. */
#include <stdlib.h>
#include <string.h>

#include "../viz/recall.h"
#include "internal.h"

int engine_recall_incremental(const mixer_ops *mx) {
    return mx && mx->write_form != NULL;
}

/* Tracker li for this core, made (or remade for another core) on first use; NULL: no memory. */
static recall_tracker *tracker(engine *g, int li, const mixer_ops *mx, const mixer_cfg *c) {
    if (li >= g->nrt) {
        int n = li + 1;
        struct recall_tracker **nt = realloc(g->rt, (size_t)n * sizeof *nt);
        if (!nt) return NULL;
        for (int i = g->nrt; i < n; i++) nt[i] = NULL;
        g->rt = nt, g->nrt = n;
    }
    recall_tracker *rt = g->rt[li];
    if (rt && (rt->m != mx || rt->c.H != c->H || rt->c.dk != c->dk || rt->c.dv != c->dv)) {
        recall_tracker_free(rt);
        free(rt);
        g->rt[li] = rt = NULL;
    }
    if (!rt) {
        err e = {{0}};
        rt = calloc(1, sizeof *rt);
        if (!rt || recall_tracker_init(rt, mx, c, &e)) {
            free(rt);
            return NULL;
        }
        g->rt[li] = rt;
    }
    return rt;
}

void engine_recall_before(engine *g, int li, const mixer_cfg *c, const mixer_ops *mx,
                          const mixer_tok *in, const float *state, int pos) {
    recall_tracker *rt = tracker(g, li, mx, c);
    err e = {{0}};
    if (rt) recall_before_step(rt, state, in, pos, &e);
}

int engine_record_kv_recall(engine *g, int layers, int li, const mixer_ops *mx, const mixer_cfg *c,
                            const mixer_tok *in, const float *state, int pos, int recall, err *e) {
    recall_tracker *rt = recall && li < g->nrt ? g->rt[li] : NULL;
    if (rt && rt->m == mx && rt->pending == pos)
        return recall_after_step(rt, &g->tr, layers, li, state, pos, e);
    return recall_record_kv(&g->tr, layers, li, c->H, c->dk, c->dv, in->in[IN_K], in->in[IN_V], pos,
                            e);
}

void engine_recall_reset(engine *g) {
    for (int i = 0; i < g->nrt; i++)
        if (g->rt[i]) recall_tracker_reset(g->rt[i]);
}

void engine_recall_invalidate(engine *g, int li) {
    if (li >= 0 && li < g->nrt && g->rt[li]) g->rt[li]->next = -1; /* as after a gap */
}

void engine_recall_free(engine *g) {
    for (int i = 0; i < g->nrt; i++)
        if (g->rt[i]) {
            recall_tracker_free(g->rt[i]);
            free(g->rt[i]);
        }
    free(g->rt);
    g->rt = NULL, g->nrt = 0;
}
