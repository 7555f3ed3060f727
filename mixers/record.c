#include "record.h"

#include <math.h>
#include <string.h>

#include "attention.h"
#include "lla.h"

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
        if (s < 0) continue;
        int w = mixer_width_floats(c, m->probes[i].width);
        trace_put_heads(tr, s, t, layer, probes + mixer_probe_offset(m, c, i), c->H, w);
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
    if (layer >= s->layers || c->H > s->heads || s->rows != parts[i].shape[1] ||
        s->cols != parts[i].shape[2])
        return;
    memcpy(trace_snapshot_at(tr, k, layer, 0), state + parts[i].offset,
           (size_t)c->H * s->rows * s->cols * sizeof(float));
    s->t = t;
}

static int is_attention(const mixer_ops *m) {
    return !strcmp(m->name, "softmax") || !strcmp(m->name, "parallax");
}

/* Head h's query and (Parallax only) probe of an attention token, as given to the mixer. */
static void head_qr(const mixer_ops *m, const mixer_cfg *c, const mixer_tok *x, int h,
                    const float **q, const float **r) {
    *q = x->in[IN_Q] + (size_t)h * c->dk;
    *r = !strcmp(m->name, "parallax") && x->in[IN_R] ? x->in[IN_R] + (size_t)h * c->dk : NULL;
}

int probe_register_attn(trace *tr, const mixer_ops *m, const mixer_cfg *c, int layers, err *e) {
    if (!is_attention(m)) return 0;
    int ka = trace_add_snapshot(tr, "attn_a", layers, c->H, RECORD_ATTN_Q, RECORD_ATTN_K, e);
    int kp = ka < 0 ? -1 : trace_add_snapshot(tr, "attn_pos", layers, c->H, RECORD_ATTN_Q, 1, e);
    if (kp < 0) return -1;
    /* a new snapshot starts empty (a found one keeps its rows) */
    trace_snapshot *sp = &tr->snaps[kp];
    if (sp->t < 0)
        for (size_t i = 0; i < (size_t)sp->layers * sp->heads * RECORD_ATTN_Q; i++)
            sp->data[i] = -1.0f;
    return 0;
}

void probe_record_attn(trace *tr, const mixer_ops *m, const mixer_cfg *c, const float *state,
                       const mixer_tok *x, int pos, int layer) {
    int ka = trace_find_snapshot(tr, "attn_a"), kp = trace_find_snapshot(tr, "attn_pos");
    if (!is_attention(m) || ka < 0 || kp < 0 || !x->in[IN_Q]) return;
    trace_snapshot *sa = &tr->snaps[ka], *sp = &tr->snaps[kp];
    if (layer >= sa->layers || c->H > sa->heads || layer >= sp->layers || c->H > sp->heads ||
        pos < 0 || pos >= c->max_t)
        return;
    const int j0 = pos - (RECORD_ATTN_K - 1) > 0 ? pos - (RECORD_ATTN_K - 1) : 0;
    const int first = attn_first_key(c, pos), row = pos % RECORD_ATTN_Q;
    for (int h = 0; h < c->H; h++) {
        float *ps = trace_snapshot_at(tr, kp, layer, h); /* [Q] */
        if (pos == 0)
            for (int i = 0; i < RECORD_ATTN_Q; i++) ps[i] = -1.0f;
        float *a = trace_snapshot_at(tr, ka, layer, h) + (size_t)row * RECORD_ATTN_K;
        /* the row ends on the diagonal: column K - 1 is key pos */
        const int lead = RECORD_ATTN_K - 1 - (pos - j0);
        for (int i = 0; i < lead; i++) a[i] = NAN;
        const float *q, *r;
        head_qr(m, c, x, h, &q, &r);
        if (parallax_effective_weights_from(c, state, q, r, pos, h, j0, NULL, a + lead)) {
            ps[row] = -1.0f;
            continue;
        }
        for (int j = j0; j < first; j++) a[lead + j - j0] = NAN;
        ps[row] = (float)pos;
    }
    sa->t = sp->t = pos;
}

static const struct {
    const char *name, *meaning;
} LLA_SERIES[5] = {
    {"lla_eta", "LLA boundary amplification eta = (kbar - q)^T (S_KK + lambda I)^-1 (kbar - q)"},
    {"lla_cos", "cos(rho, rho_c): Parallax's probe against the LLA probe (S_KK + lambda I)^-1 "
                "(kbar - q)"},
    {"cpa", "covariance-probe alignment |S_KV rho| / (|S_KV|_2 |rho|), in [0, 1]"},
    {"lla_gap", "|o_LLA - o_PLX| / |o_PLX|, local linear against Parallax"},
    {"lla_gap_sa", "|o_LLA - o_SA| / |o_SA|, local linear against softmax"},
};

int probe_register_lla(trace *tr, const mixer_ops *m, const mixer_cfg *c, int layers, err *e) {
    if (!is_attention(m)) return 0;
    for (int i = 0; i < 5; i++)
        if (trace_add_series(tr, LLA_SERIES[i].name, LLA_SERIES[i].meaning, "lla", layers, c->H, 1,
                             e) < 0)
            return -1;
    return 0;
}

void probe_record_lla(trace *tr, const mixer_ops *m, const mixer_cfg *c, const float *state,
                      const mixer_tok *x, int pos, int layer, double lambda) {
    int s[5];
    for (int i = 0; i < 5; i++) {
        s[i] = trace_find(tr, LLA_SERIES[i].name);
        if (s[i] < 0 || layer >= tr->series[s[i]].layers || c->H > tr->series[s[i]].heads) return;
    }
    if (!is_attention(m) || !x->in[IN_Q] || pos < 0 || pos >= tr->T) return;
    for (int h = 0; h < c->H; h++) {
        attn_lla st;
        const float *q, *r;
        head_qr(m, c, x, h, &q, &r);
        if (attn_lla_stats(c, state, q, r, pos, h, lambda, &st, NULL)) continue;
        const double v[5] = {st.eta, st.cos, st.cpa, st.gap, st.gap_sa};
        for (int i = 0; i < 5; i++) *trace_at_lh(tr, s[i], pos, layer, h) = (float)v[i];
    }
}
