/* probes.c: what goes into the trace while stepping (`set probes`), and what each costs.
 *
 * Names: every mixer's probes (mixers/), the families' and blocks' probes of a model, and four
 * recordings beside them: "state" (the state snapshot the state view draws), "recall" (the
 * readback picture of viz/recall.h), "attn" (the attention rows of softmax / Parallax layers).
 * The keys and values the cores saw ("k", "v") go with every selection but none.
 *
 * A core computes its probes all together or not at all: naming one of a mixer's probes costs
 * the step of all of them (only the named ones are stored). */
#include <stdio.h>
#include <string.h>

#include "../models/model.h"
#include "internal.h"

static const char *const EXTRAS[] = {"state", "recall", "attn"};
enum { NEXTRAS = sizeof EXTRAS / sizeof EXTRAS[0] };

/* 1 when name is a known probe of some mixer, family or block, or an extra. */
static int known_name(const char *name) {
    for (int i = 0; i < NEXTRAS; i++)
        if (!strcmp(name, EXTRAS[i])) return 1;
    for (int i = 0; i < mixer_count; i++)
        if (mixer_all[i] && mixer_probe_index(mixer_all[i], name) >= 0) return 1;
    return model_probe_name_known(name); /* the blocks' and every family's */
}

/* 1 when any loaded core (model layer or raw lane) updates the readback incrementally. */
static int find_recall_cheap(const engine *g) {
    if (engine_raw_active(g)) {
        for (int l = 0; l < g->raw->nl; l++)
            if (engine_recall_incremental(g->raw->lane[l].m)) return 1;
        return 0;
    }
    for (int li = 0; g->model && li < g->model->c.layers; li++)
        if (engine_recall_incremental(g->model->layers[li].mx)) return 1;
    return 0;
}

/* "the loaded cores record: a, b, ...; also state, recall, attn, all, default, none" */
static void loaded_names(const engine *g, char *buf, size_t n) {
    size_t u = (size_t)snprintf(buf, n, "known: state, recall, attn, all, default, none");
    const mixer_ops *seen[16];
    int ns = 0, L = engine_raw_active(g) ? g->raw->nl : g->model ? g->model->c.layers : 0;
    for (int l = 0; l < L && u < n; l++) {
        const mixer_ops *m = engine_raw_active(g) ? g->raw->lane[l].m : g->model->layers[l].mx;
        int dup = 0;
        for (int i = 0; i < ns; i++) dup |= seen[i] == m;
        if (dup || ns == 16) continue;
        seen[ns++] = m;
        for (int i = 0; i < m->nprobes && u < n; i++)
            u += (size_t)snprintf(buf + u, n - u, ", %s", m->probes[i].name);
    }
    if (!L && u < n) snprintf(buf + u, n - u, "; and every probe of the mixers (mixer list)");
}

static int in_list(const char *list, const char *name) {
    size_t n = strlen(name);
    for (const char *p = list; *p;) {
        const char *c = strchr(p, ',');
        size_t len = c ? (size_t)(c - p) : strlen(p);
        if (len == n && !strncmp(p, name, n)) return 1;
        if (!c) break;
        p = c + 1;
    }
    return 0;
}

int engine_probe_wanted(const engine *g, const char *name) {
    switch (g->probes.mode) {
    case ENGINE_PROBES_NONE:
        return 0;
    case ENGINE_PROBES_ALL:
        return 1;
    case ENGINE_PROBES_LIST:
        return in_list(g->probes.names, name);
    default:
        return 1; /* what the views draw: today every probe (recall_at caps the readback) */
    }
}

int engine_core_probe_wanted(const engine *g, const mixer_cfg *c, const probe_def *p) {
    if (!engine_probe_wanted(g, p->name)) return 0;
    /* by default, per-lane probes (Kalman's [dv][dk] a head) only while they are small: at 16
     * heads of 128 x 128 each is 1 MiB a token, and Kalman has 14 of them */
    if (g->probes.mode == ENGINE_PROBES_DEFAULT && p->width == W_LANES &&
        (size_t)c->H * c->dk * c->dv > ENGINE_DEFAULT_LANES)
        return 0;
    return 1;
}

int engine_recall_at(const engine *g, int pos) {
    if (!engine_probe_wanted(g, "recall")) return 0;
    /* the readback picture beyond the first tokens: asked for by name or by all, or cheap */
    if (pos < ENGINE_RECALL_MAX_TOKENS || g->probes.mode == ENGINE_PROBES_ALL ||
        g->probes.mode == ENGINE_PROBES_LIST)
        return 1;
    /* asked per layer and token: the cores' answer is found once per schema */
    engine *w = (engine *)g;
    if (w->recall_cheap < 0) w->recall_cheap = find_recall_cheap(g);
    return w->recall_cheap;
}

int engine_set_probes(engine *g, const char *spec, err *e) {
    engine_probes p = {0};
    if (!strcmp(spec, "default")) {
        p.mode = ENGINE_PROBES_DEFAULT;
    } else if (!strcmp(spec, "all")) {
        p.mode = ENGINE_PROBES_ALL;
    } else if (!strcmp(spec, "none")) {
        p.mode = ENGINE_PROBES_NONE;
    } else {
        if (strlen(spec) >= sizeof p.names) return err_set(e, "set probes: list too long");
        p.mode = ENGINE_PROBES_LIST;
        snprintf(p.names, sizeof p.names, "%s", spec);
        for (char *w = p.names; *w;) {
            char *c = strchr(w, ',');
            if (c) *c = '\0';
            if (!*w) return err_set(e, "set probes: empty name in '%.60s'", spec);
            if (!known_name(w)) {
                char names[400];
                loaded_names(g, names, sizeof names);
                return err_set(e, "set probes: unknown probe '%.40s' (%s)", w, names);
            }
            if (!c) break;
            *c = ',', w = c + 1;
        }
    }
    g->probes = p;
    /* a new schema from position 0 */
    engine_trace_restart(g);
    if (g->model || engine_raw_active(g)) return engine_reset(g, e);
    return 0;
}

const char *engine_probes_text(const engine *g) {
    switch (g->probes.mode) {
    case ENGINE_PROBES_ALL:
        return "all";
    case ENGINE_PROBES_NONE:
        return "none";
    case ENGINE_PROBES_LIST:
        return g->probes.names;
    default:
        return "default";
    }
}

const char *engine_probe_cost(const char *mixer, const char *name) {
    if (!strcmp(name, "attn")) return "expensive";
    if (!strcmp(name, "state")) return "O(d^2)";
    if (!strcmp(name, "recall")) {
        const mixer_ops *m = mixer ? mixer_find(mixer) : NULL;
        return m && engine_recall_incremental(m) ? "O(d^2)" : "expensive";
    }
    const mixer_ops *m = mixer ? mixer_find(mixer) : NULL;
    if (!m || mixer_probe_index(m, name) < 0) return "cheap"; /* family and block probes */
    if (!strcmp(m->name, "kata") || !strcmp(m->name, "parallax") || !strcmp(m->name, "softmax"))
        return "expensive";
    return "O(d^2)";
}
