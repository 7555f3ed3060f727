/* cores.c: the session's tokens through other cores on the same projections (`compare` in model
 * mode): every layer's core swapped for one spec, the tokens stepped from position 0 into a trace
 * of their own, the original cores put back. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../models/model.h"
#include "internal.h"

int engine_try_cores(engine *g, const char *spec, trace *tr, float *logits, char *why, size_t n,
                     err *e) {
    model *m = g->model;
    why[0] = '\0';
    if (!m || !g->tokens) return err_set(e, "no model and tokens");
    if (engine_sync_model(g, e)) return -1;
    const int NL = m->c.layers, T = g->ntokens, V = m->c.vocab;
    int cap = T > ENGINE_MIN_MAX_T ? T : ENGINE_MIN_MAX_T;
    char(*orig)[32] = calloc((size_t)NL, sizeof *orig);
    if (!orig) return err_set(e, "out of memory");
    for (int l = 0; l < NL; l++) snprintf(orig[l], 32, "%s", m->layers[l].mx->name);
    /* NAME[:k=v,...] */
    char name[32], *words[OPTS_MAX], buf[256];
    int nw = 0;
    snprintf(buf, sizeof buf, "%s", spec);
    char *colon = strchr(buf, ':');
    if (colon) {
        *colon = '\0';
        for (char *p = strtok(colon + 1, ","); p && nw < OPTS_MAX; p = strtok(NULL, ","))
            words[nw++] = p;
    }
    snprintf(name, sizeof name, "%s", buf);
    opts mo;
    err le = {{0}};
    int rc = 0;
    if (opts_parse(&mo, nw, words, &le)) {
        snprintf(why, n, "%s", le.msg);
        free(orig);
        return 1;
    }
    unsigned skip = m->rec_skip;
    if (model_swap(m, -1, name, &mo, &le) || model_reset(m, cap, &le) ||
        model_register_probes(m, tr, &le)) {
        snprintf(why, n, "%s", le.msg);
        rc = 1;
    }
    opts_free(&mo);
    m->gpu = g->device == ENGINE_GPU;
    m->rec_skip = 0; /* the comparison reads state_norm, mix_out_norm, resid_norm */
    for (int t = 0; t < T && !rc; t++) {
        if (engine_tick(g, t, T))
            rc = err_set(e, "interrupted at token %d", t);
        else if (trace_push_token(tr, e) < 0 ||
                 model_step(m, g->tokens[t], logits + (size_t)t * V, tr, e))
            rc = -1;
    }
    if (!rc) engine_tick(g, T, T);
    m->rec_skip = skip;
    /* the original cores back, layer by layer, and position 0 */
    err re = {{0}};
    for (int l = 0; l < NL; l++)
        if (strcmp(m->layers[l].mx->name, orig[l])) model_swap(m, l, orig[l], NULL, &re);
    free(orig);
    if (engine_model_changed(g, &re) && !rc) rc = err_set(e, "%s", re.msg);
    return rc;
}
