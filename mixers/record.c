#include "record.h"

#include <string.h>

int probe_register(trace *tr, const mixer_ops *m, const mixer_cfg *c, int layers, err *e) {
    for (int i = 0; i < m->nprobes; i++)
        if (trace_add_series(tr, m->probes[i].name, m->probes[i].meaning, m->name, layers, c->H,
                             mixer_width_floats(c, m->probes[i].width), e) < 0)
            return -1;
    return 0;
}

void probe_record(trace *tr, const mixer_ops *m, const mixer_cfg *c, const float *probes, int64_t t,
                  int layer) {
    for (int i = 0; i < m->nprobes; i++) {
        int s = trace_find(tr, m->probes[i].name);
        if (s < 0 || layer >= tr->series[s].layers || c->H != tr->series[s].heads) continue;
        int w = mixer_width_floats(c, m->probes[i].width);
        if (w != tr->series[s].width) continue;
        memcpy(trace_at_lh(tr, s, t, layer, 0), probes + mixer_probe_offset(m, c, i),
               (size_t)c->H * (size_t)w * sizeof(float));
    }
}

/* The first state part that is a [H, rows, cols] matrix per head, or -1. */
static int matrix_part(const mixer_ops *m, const mixer_cfg *c, state_part *parts) {
    int n = m->state_parts ? m->state_parts(c, parts) : 0;
    for (int i = 0; i < n; i++)
        if (parts[i].ndim == 3 && parts[i].shape[0] == c->H) return i;
    return -1;
}

int probe_register_state(trace *tr, const mixer_ops *m, const mixer_cfg *c, int layers, err *e) {
    state_part parts[MIXER_MAX_STATE_PARTS];
    int i = matrix_part(m, c, parts);
    if (i < 0) return 0;
    return trace_add_snapshot(tr, "state", layers, c->H, (int)parts[i].shape[1],
                              (int)parts[i].shape[2], e) < 0
               ? -1
               : 0;
}

void probe_record_state(trace *tr, const mixer_ops *m, const mixer_cfg *c, const float *state,
                        int64_t t, int layer) {
    state_part parts[MIXER_MAX_STATE_PARTS];
    int i = matrix_part(m, c, parts), k = trace_find_snapshot(tr, "state");
    if (i < 0 || k < 0) return;
    trace_snapshot *s = &tr->snaps[k];
    if (layer >= s->layers || s->heads != c->H || s->rows != parts[i].shape[1] ||
        s->cols != parts[i].shape[2])
        return;
    memcpy(trace_snapshot_at(tr, k, layer, 0), state + parts[i].offset,
           (size_t)c->H * s->rows * s->cols * sizeof(float));
    s->t = t;
}
