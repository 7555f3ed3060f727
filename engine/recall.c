/* recall.c: the keys and values each layer's core saw and the readback picture of viz/recall.h,
 * recorded as the state changes. */
#include <stdlib.h>
#include <string.h>

#include "../viz/recall.h"
#include "internal.h"

void engine_recall_before(engine *g, int li, const mixer_cfg *c, const mixer_ops *mx,
                          const mixer_tok *in, const float *state, int pos) {
    (void)g, (void)li, (void)c, (void)mx, (void)in, (void)state, (void)pos;
}

/* The [H, dk, dv] key-major part of the state ("hT"), or NULL: the readback reads S^T k. */
static const float *keymajor_part(const mixer_ops *mx, const mixer_cfg *c, const float *state) {
    state_part parts[MIXER_MAX_STATE_PARTS];
    int np = mx->state_parts ? mx->state_parts(c, parts) : 0;
    for (int i = 0; i < np; i++)
        if (!strcmp(parts[i].name, "hT") && parts[i].ndim == 3 && parts[i].shape[1] == c->dk &&
            parts[i].shape[2] == c->dv)
            return state + parts[i].offset;
    return NULL;
}

int engine_record_kv_recall(engine *g, int layers, int li, const mixer_ops *mx, const mixer_cfg *c,
                            const mixer_tok *in, const float *state, int pos, int recall, err *e) {
    const float *S = recall ? keymajor_part(mx, c, state) : NULL;
    if (S)
        return recall_record(&g->tr, layers, li, c->H, c->dk, c->dv, in->in[IN_K], in->in[IN_V], S,
                             pos, e);
    return recall_record_kv(&g->tr, layers, li, c->H, c->dk, c->dv, in->in[IN_K], in->in[IN_V], pos,
                            e);
}

int engine_recall_incremental(const mixer_ops *mx) {
    (void)mx;
    return 0;
}

void engine_recall_reset(engine *g) {
    (void)g;
}

void engine_recall_free(engine *g) {
    free(g->rt);
    g->rt = NULL, g->nrt = 0;
}
