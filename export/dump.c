/* dump.c: export inputs / export state (dump.h). */
#include "dump.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../core/safetensors.h"
#include "../core/tensor.h"
#include "../engine/interv.h"
#include "../mixers/kata.h"
#include "../models/model.h"

/* The metadata object: source, command, and an optional replay line (JSON-escaped). */
static void metadata(char *md, size_t n, const struct engine *g, const char *command,
                     const char *replay) {
    char src[600], cmd[600], rp[300];
    const char *in[3] = {g->model && !engine_raw_active(g) ? g->model->source : "raw mixer lanes",
                         command ? command : "", replay ? replay : ""};
    char *out[3] = {src, cmd, rp};
    size_t cap[3] = {sizeof src, sizeof cmd, sizeof rp};
    for (int k = 0; k < 3; k++) {
        size_t o = 0;
        for (const char *p = in[k]; *p && o + 2 < cap[k]; p++) {
            if (*p == '"' || *p == '\\') out[k][o++] = '\\';
            out[k][o++] = (char)((unsigned char)*p < 32 ? ' ' : *p);
        }
        out[k][o] = '\0';
    }
    if (replay)
        snprintf(md, n,
                 "{\"source\":\"mixscope\",\"model\":\"%s\",\"command\":\"%s\",\"replay\":\"%s\"}",
                 src, cmd, rp);
    else
        snprintf(md, n, "{\"source\":\"mixscope\",\"model\":\"%s\",\"command\":\"%s\"}", src, cmd);
}

/* The options replay needs to run this core as the run did. */
static void replay_opts(const mixer_ops *mx, const mixer_cfg *c, char *buf, size_t n) {
    int o = snprintf(buf, n, "%s scale=%.9g", mx->name, c->scale);
    if (!strcmp(mx->name, "kaczmarz") || !strcmp(mx->name, "kata"))
        o += snprintf(buf + o, n - (size_t)o, " eps=%.9g", c->eps);
    if (!strcmp(mx->name, "kata"))
        o += snprintf(buf + o, n - (size_t)o, " variant=%s groups=%d",
                      kata_variant_name(c->variant), c->groups > 0 ? c->groups : 1);
    if (!strcmp(mx->name, "softmax") || !strcmp(mx->name, "parallax"))
        o += snprintf(buf + o, n - (size_t)o, " rope=%d theta=%.9g window=%d", c->rope,
                      c->rope_theta, c->window);
    (void)o;
}

typedef struct cap {
    const mixer_ops *mx;
    const mixer_cfg *c;
    int from, n;
    tensor *in[IN_COUNT]; /* [1, n, H(, W)] per input the core reads */
    float *h0;            /* the whole state before token from */
    size_t sf;
} cap;

static void on_token(void *ctx, int t, const mixer_tok *x, const float *state) {
    cap *c = ctx;
    if (t == c->from) memcpy(c->h0, state, c->sf * sizeof(float));
    for (int i = 0; i < IN_COUNT; i++) {
        if (!c->in[i] || !x->in[i]) continue;
        size_t w = (size_t)c->c->H * (size_t)mixer_input_floats(c->c, (mixer_input)i);
        memcpy((float *)c->in[i]->data + (size_t)(t - c->from) * w, x->in[i], w * sizeof(float));
    }
}

int dump_inputs(struct engine *g, const char *path, int li, int from, int to, const char *command,
                char *replay_line, size_t rn, err *e) {
    const mixer_ops *mx;
    const mixer_cfg *c;
    float *state;
    if (engine_core_at(g, li, &mx, &c, &state, e)) return -1;
    int pos = engine_pos(g);
    if (pos < 1) return err_set(e, "no tokens have run yet");
    if (from < 0) from = 0;
    if (to < 0) to = pos - 1;
    if (to >= pos || from > to)
        return err_set(e, "tokens %d..%d: the tokens run are 0..%d", from, to, pos - 1);
    state_part parts[MIXER_MAX_STATE_PARTS];
    int np = mx->state_parts ? mx->state_parts(c, parts) : 0;
    for (int p = 0; p < np && from > 0; p++)
        if (!parts[p].init_name)
            return err_set(e,
                           "from=%d: replay cannot start %s from a state (its %s has no initial "
                           "form); from=0 only",
                           from, mx->name, parts[p].name);
    if (from > 0 && (!strcmp(mx->name, "softmax") || !strcmp(mx->name, "parallax")))
        return err_set(e, "from=%d: replay runs %s from position 0; from=0 only", from, mx->name);
    cap cp = {.mx = mx, .c = c, .from = from, .n = to - from + 1, .sf = mx->state_floats(c)};
    tensor *ts[IN_COUNT + MIXER_MAX_PARAMS + MIXER_MAX_STATE_PARTS];
    int nt = 0, rc = -1;
    if (!(cp.h0 = malloc(cp.sf * sizeof(float)))) return err_set(e, "out of memory");
    for (int i = 0; i < mx->ninputs; i++) {
        const input_def *d = &mx->inputs[i];
        int64_t shape[4] = {1, cp.n, c->H, mixer_width_floats(c, d->width)};
        tensor *t = tensor_new(d->name, DT_F32, d->width == W_1 ? 3 : 4, shape, e);
        if (!t) goto done;
        memset(t->data, 0, t->nbytes);
        cp.in[d->which] = t;
    }
    if (engine_capture(g, li, from, to, on_token, &cp, e)) goto done;
    for (int i = 0; i < mx->ninputs; i++) ts[nt++] = cp.in[mx->inputs[i].which];
    for (int i = 0; i < mx->nparams; i++) {
        int64_t shape[3] = {c->H, 0, 0};
        int nd = 1;
        if (mx->params[i].width == W_LANES)
            shape[nd++] = c->dv, shape[nd++] = c->dk;
        else
            shape[nd++] = mixer_width_floats(c, mx->params[i].width);
        tensor *t = c->params[i] ? tensor_new(mx->params[i].name, DT_F32, nd, shape, e) : NULL;
        if (!c->params[i]) continue;
        if (!t) goto done;
        memcpy(t->data, c->params[i], t->nbytes);
        ts[nt++] = t;
    }
    for (int p = 0; p < np; p++) {
        if (!parts[p].init_name) continue;
        int64_t shape[5] = {1};
        for (int d = 0; d < parts[p].ndim; d++) shape[d + 1] = parts[p].shape[d];
        tensor *t = tensor_new(parts[p].init_name, DT_F32, parts[p].ndim + 1, shape, e);
        if (!t) goto done;
        memcpy(t->data, cp.h0 + parts[p].offset, t->nbytes);
        ts[nt++] = t;
    }
    char line[256], md[2048];
    replay_opts(mx, c, line, sizeof line);
    metadata(md, sizeof md, g, command, line);
    if (replay_line) snprintf(replay_line, rn, "%s", line);
    rc = st_write(path, (const tensor *const *)ts, nt, md, e);
done:
    /* the inputs are in ts only once captured: free them once, either way */
    for (int i = 0; i < IN_COUNT; i++) tensor_free(cp.in[i]);
    for (int i = 0; i < nt; i++) {
        int is_input = 0;
        for (int j = 0; j < IN_COUNT; j++) is_input |= ts[i] == cp.in[j];
        if (!is_input) tensor_free(ts[i]);
    }
    free(cp.h0);
    return rc;
}

int dump_state(struct engine *g, const char *path, int layer, const char *command, int *ntensors,
               err *e) {
    int raw = engine_raw_active(g);
    if (!raw && !g->model)
        return err_set(e, "no model or mixer (load PATH, model random or mixer first)");
    if (!raw && engine_sync_model(g, e)) return -1;
    int nl = raw ? g->raw->nl : g->model->c.layers;
    int l0 = layer >= 0 ? layer : 0, l1 = layer >= 0 ? layer + 1 : raw ? 1 : nl;
    if (layer >= nl) return err_set(e, "layer %d: the run has layers 0..%d", layer, nl - 1);
    tensor *ts[256];
    int nt = 0, rc = -1;
    for (int l = l0; l < l1; l++) {
        const mixer_ops *mx;
        const mixer_cfg *c;
        float *state;
        if (engine_core_at(g, l, &mx, &c, &state, e)) goto done;
        state_part parts[MIXER_MAX_STATE_PARTS];
        int np = mx->state_parts ? mx->state_parts(c, parts) : 0;
        for (int p = 0; p < np && nt < 256; p++) {
            char name[96];
            const char *base = !strcmp(parts[p].name, "hT") ? "h" : parts[p].name;
            if (raw)
                snprintf(name, sizeof name, "%s", base);
            else
                snprintf(name, sizeof name, "layers.%d.%s", l, base);
            int64_t shape[5] = {1};
            for (int d = 0; d < parts[p].ndim; d++) shape[d + 1] = parts[p].shape[d];
            tensor *t = tensor_new(name, DT_F32, parts[p].ndim + 1, shape, e);
            if (!t) goto done;
            memcpy(t->data, state + parts[p].offset, t->nbytes);
            ts[nt++] = t;
        }
    }
    if (!nt) {
        err_set(e, "the core keeps no state to export");
        goto done;
    }
    char md[2048];
    metadata(md, sizeof md, g, command, NULL);
    rc = st_write(path, (const tensor *const *)ts, nt, md, e);
    if (!rc && ntensors) *ntensors = nt;
done:
    for (int i = 0; i < nt; i++) tensor_free(ts[i]);
    return rc;
}
