/* inputs.c: `diagnose FILE.safetensors` on a file `export inputs` wrote (its metadata names the
 * core and options: "replay": "gdn scale=0.25"). The core runs over the inputs from the file's
 * initial state twice, token by token (step) and with its parallel form (prefill, chunked or
 * scanned), and the outputs are compared chunk by chunk: the first chunk where they part (by more
 * than tol, or one path non-finite where the other is not) and the first non-finite token of each
 * path are named. A step that goes non-finite on its own inputs has a cause in the inputs or the
 * state; a chunked form that parts from the step on finite values, a cause in the form. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include <cjson/cJSON.h>

#include "../core/safetensors.h"
#include "diag.h"

/* The "replay" line of a file's metadata into buf; 0 when there is none. */
int diag_inputs_replay_line(const char *path, char *buf, size_t n, err *e) {
    st_file *f = NULL;
    if (st_open(&f, path, e)) return -1;
    int found = 0;
    cJSON *md = f->metadata ? cJSON_Parse(f->metadata) : NULL;
    const cJSON *r = md ? cJSON_GetObjectItemCaseSensitive(md, "replay") : NULL;
    if (cJSON_IsString(r) && r->valuestring[0]) {
        snprintf(buf, n, "%s", r->valuestring);
        found = 1;
    }
    cJSON_Delete(md);
    st_close(f);
    return found;
}

/* A tensor of the file as floats with the expected shape (ndim, shape); NULL with e set when it is
 * missing (and required) or mis-shaped. */
static float *read_exact(const st_file *f, const char *name, int ndim, const int64_t *shape,
                         int required, int *missing, err *e) {
    const tensor *t = st_find(f, name);
    *missing = !t;
    if (!t) {
        if (required) err_set(e, "missing tensor '%s'", name);
        return NULL;
    }
    int ok = t->ndim == ndim && dtype_is_float(t->dtype);
    for (int i = 0; ok && i < ndim; i++) ok = t->shape[i] == shape[i];
    if (!ok) {
        char a[128], b[128];
        err_set(e, "tensor '%s': %s %s, expected float %s", name, dtype_name(t->dtype),
                shape_str(t->ndim, t->shape, a, sizeof a), shape_str(ndim, shape, b, sizeof b));
        return NULL;
    }
    float *d = malloc((size_t)tensor_numel(t) * sizeof(float));
    if (!d) {
        err_set(e, "out of memory");
        return NULL;
    }
    if (tensor_read_f32_file(t, d, e)) {
        free(d);
        return NULL;
    }
    return d;
}

static int words(char *line, char **w, int max) {
    int n = 0;
    for (char *save = NULL, *p = strtok_r(line, " ", &save); p && n < max;
         p = strtok_r(NULL, " ", &save))
        w[n++] = p;
    return n;
}

int diag_inputs(FILE *out, const char *path, double tol, err *e) {
    char line[512];
    int has = diag_inputs_replay_line(path, line, sizeof line, e);
    if (has < 0) return -1;
    if (!has)
        return err_set(e, "%s: no \"replay\" entry in its metadata (not written by export inputs)",
                       path);
    char *w[32];
    int nw = words(line, w, 32);
    const mixer_ops *m = nw ? mixer_find(w[0]) : NULL;
    if (!m) return err_set(e, "%s: metadata names an unknown core '%s'", path, nw ? w[0] : "");
    st_file *f = NULL;
    if (st_open(&f, path, e)) return -1;
    int rc = -1, missing;
    float *in[IN_COUNT] = {0}, *params[MIXER_MAX_PARAMS] = {0};
    float *init = NULL, *s1 = NULL, *s2 = NULL, *o_step = NULL, *o_pre = NULL;
    opts o = {0};
    mixer_cfg c;
    /* dimensions from k and v */
    const tensor *tk = st_find(f, "k"), *tv = st_find(f, "v");
    if (!tk || !tv || tk->ndim != 4 || tv->ndim != 4) {
        err_set(e, "%s: expected k and v [1, T, H, D]", path);
        goto done;
    }
    int T = (int)tk->shape[1], H = (int)tk->shape[2], dk = (int)tk->shape[3],
        dv = (int)tv->shape[3];
    if (opts_parse(&o, nw - 1, w + 1, e) || mixer_configure(m, &c, H, dk, dv, &o, e) ||
        opts_check_unused(&o, e))
        goto done;
    if (c.max_t < T) c.max_t = T;
    for (int i = 0; i < m->ninputs; i++) {
        const input_def *d = &m->inputs[i];
        int64_t shape[4] = {1, T, H, mixer_width_floats(&c, d->width)};
        in[d->which] =
            read_exact(f, d->name, d->width == W_1 ? 3 : 4, shape, d->required, &missing, e);
        if (!in[d->which] && !missing) goto done;
        if (!in[d->which] && d->required) goto done;
    }
    for (int i = 0; i < m->nparams; i++) {
        int64_t shape[3] = {H, 0, 0};
        int nd = 1;
        if (m->params[i].width == W_LANES)
            shape[nd++] = dv, shape[nd++] = dk;
        else
            shape[nd++] = mixer_width_floats(&c, m->params[i].width);
        if (!(params[i] = read_exact(f, m->params[i].name, nd, shape, 1, &missing, e))) goto done;
        c.params[i] = params[i];
    }
    size_t sf = m->state_floats(&c), on = (size_t)T * H * dv;
    init = malloc(sf * sizeof(float)), s1 = malloc(sf * sizeof(float));
    s2 = malloc(sf * sizeof(float));
    o_step = malloc(on * sizeof(float)), o_pre = malloc(on * sizeof(float));
    if (!init || !s1 || !s2 || !o_step || !o_pre) {
        err_set(e, "out of memory");
        goto done;
    }
    m->state_init(&c, init);
    state_part parts[MIXER_MAX_STATE_PARTS];
    int np = m->state_parts ? m->state_parts(&c, parts) : 0, given = 0;
    for (int p = 0; p < np; p++) {
        if (!parts[p].init_name) continue;
        int64_t shape[5] = {1};
        for (int d = 0; d < parts[p].ndim; d++) shape[d + 1] = parts[p].shape[d];
        float *h0 = read_exact(f, parts[p].init_name, parts[p].ndim + 1, shape, 0, &missing, e);
        if (!h0 && !missing) goto done;
        if (!h0) continue;
        size_t n = 1;
        for (int d = 0; d < parts[p].ndim; d++) n *= (size_t)parts[p].shape[d];
        memcpy(init + parts[p].offset, h0, n * sizeof(float));
        free(h0);
        given++;
    }
    mixer_seq seq = {.T = T};
    for (int i = 0; i < IN_COUNT; i++) seq.in[i] = in[i];
    memcpy(s1, init, sf * sizeof(float)), memcpy(s2, init, sf * sizeof(float));
    mixer_run_steps(m, &c, s1, &seq, 0, o_step, NULL);
    m->prefill(&c, s2, &seq, 0, o_pre);

    int chunk = c.chunk > 0 ? c.chunk : 64, first_part = -1, nf_step = -1, nf_pre = -1;
    double worst = 0, part_rel = 0;
    size_t tok = (size_t)H * dv;
    for (int t = 0; t < T; t++)
        for (size_t i = 0; i < tok; i++) {
            if (nf_step < 0 && !isfinite(o_step[t * tok + i])) nf_step = t;
            if (nf_pre < 0 && !isfinite(o_pre[t * tok + i])) nf_pre = t;
        }
    for (int c0 = 0; c0 < T; c0 += chunk) {
        int c1 = c0 + chunk < T ? c0 + chunk : T;
        double num = 0, den = 0;
        int mism = 0;
        for (size_t i = (size_t)c0 * tok; i < (size_t)c1 * tok; i++) {
            double a = o_step[i], b = o_pre[i];
            if (isfinite(a) != isfinite(b)) mism = 1;
            if (!isfinite(a) || !isfinite(b)) continue;
            num += (a - b) * (a - b), den += a * a;
        }
        double rel = den > 0 ? sqrt(num / den) : sqrt(num);
        if (rel > worst) worst = rel;
        if (first_part < 0 && (mism || rel > tol))
            first_part = c0 / chunk, part_rel = mism ? NAN : rel;
    }
    fprintf(out, "diagnose %s: %s over %d tokens, %d head%s, dk %d, dv %d, from %s (chunk %d)\n",
            path, line, T, H, H == 1 ? "" : "s", dk, dv,
            given ? "the file's initial state" : "the prior", chunk);
    if (first_part < 0)
        fprintf(out,
                "  step and %s agree in every chunk: largest relative difference %.3g (tol %g)\n",
                "the parallel form", worst, tol);
    else if (isnan(part_rel))
        fprintf(out,
                "  step and the parallel form part in chunk %d (tokens %d..%d): one is non-finite "
                "where the other is not\n",
                first_part, first_part * chunk,
                (first_part + 1) * chunk < T ? (first_part + 1) * chunk - 1 : T - 1);
    else
        fprintf(
            out,
            "  step and the parallel form part in chunk %d (tokens %d..%d): relative difference "
            "%.3g > %g\n",
            first_part, first_part * chunk,
            (first_part + 1) * chunk < T ? (first_part + 1) * chunk - 1 : T - 1, part_rel, tol);
    if (nf_step >= 0 || nf_pre >= 0)
        fprintf(out, "  first non-finite output: step %s%d, parallel form %s%d\n",
                nf_step >= 0 ? "token " : "none", nf_step >= 0 ? nf_step : 0,
                nf_pre >= 0 ? "token " : "none", nf_pre >= 0 ? nf_pre : 0);
    if (nf_step >= 0)
        fprintf(out, "  the step form goes non-finite on these inputs itself: the cause is in the "
                     "inputs or the initial state, not in the chunked form\n");
    rc = 0;
done:
    opts_free(&o);
    for (int i = 0; i < IN_COUNT; i++) free(in[i]);
    for (int i = 0; i < MIXER_MAX_PARAMS; i++) free(params[i]);
    free(init), free(s1), free(s2), free(o_step), free(o_pre);
    st_close(f);
    return rc;
}
