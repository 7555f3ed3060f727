#include "replay.h"

#include "attribution.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "../core/safetensors.h"

/* Dimensions read off the input tensors. */
typedef struct dims {
    int B, T, H, dk, dv;
    int flat; /* 3-D form [B, T, D]: one head, no head axis */
} dims;

/* The values a mixer mode refuses are refused here too (raw lanes check the same, scenes/raw.c):
 * Kalman's observation precision lambda_v > 0, its decay a in (0, 1] and process noise p >= 0.
 * The first bad element is named with its flat index. */
static int check_domain(const mixer_ops *m, const char *prefix, const char *name, const float *x,
                        size_t n, err *e) {
    if (strcmp(m->name, "kalman") != 0) return 0;
    int lv = !strcmp(name, "lambda_v"), a = !strcmp(name, "a"), p = !strcmp(name, "p");
    for (size_t i = 0; i < n && (lv || a || p); i++) {
        float v = x[i];
        if (lv && !(v > 0 && isfinite(v)))
            return err_set(e, "tensor '%s%s'[%zu] = %g: lambda_v must be > 0", prefix, name, i,
                           (double)v);
        if (a && !(v > 0 && v <= 1))
            return err_set(e, "tensor '%s%s'[%zu] = %g: a must lie in (0, 1]", prefix, name, i,
                           (double)v);
        if (p && !(v >= 0 && isfinite(v)))
            return err_set(e, "tensor '%s%s'[%zu] = %g: p must be >= 0", prefix, name, i,
                           (double)v);
    }
    return 0;
}

static const tensor *find_input(const st_file *f, const char *prefix, const char *name) {
    char full[256];
    snprintf(full, sizeof full, "%s%s", prefix, name);
    return st_find(f, full);
}

static int check_float(const tensor *t, err *e) {
    if (!dtype_is_float(t->dtype))
        return err_set(e, "tensor '%s': dtype %s, expected a float tensor", t->name,
                       dtype_name(t->dtype));
    return 0;
}

/* Reads B, T, H, dk / dv from the first key-width and value-width inputs. */
static int infer_dims(const mixer_ops *m, const st_file *f, const char *prefix, dims *d, err *e) {
    memset(d, 0, sizeof *d);
    const tensor *tk = NULL, *tv = NULL;
    for (int i = 0; i < m->ninputs; i++) {
        const tensor *t = find_input(f, prefix, m->inputs[i].name);
        if (!t) continue;
        if (m->inputs[i].width == W_DK && !tk) tk = t;
        if (m->inputs[i].width == W_DV && !tv) tv = t;
    }
    if (!tk || !tv) {
        for (int i = 0; i < m->ninputs; i++)
            if (m->inputs[i].required && !find_input(f, prefix, m->inputs[i].name))
                return err_set(e, "missing tensor '%s%s'", prefix, m->inputs[i].name);
        return err_set(e, "no key- and value-shaped inputs found");
    }
    char sb[128];
    if (tk->ndim == 4) {
        d->B = (int)tk->shape[0], d->T = (int)tk->shape[1], d->H = (int)tk->shape[2];
        d->dk = (int)tk->shape[3];
    } else if (tk->ndim == 3) {
        d->flat = 1;
        d->B = (int)tk->shape[0], d->T = (int)tk->shape[1], d->H = 1, d->dk = (int)tk->shape[2];
    } else {
        return err_set(e, "tensor '%s': shape %s, expected [B, T, H, D]", tk->name,
                       shape_str(tk->ndim, tk->shape, sb, sizeof sb));
    }
    if (tv->ndim != (d->flat ? 3 : 4))
        return err_set(e, "tensor '%s': shape %s, expected %s", tv->name,
                       shape_str(tv->ndim, tv->shape, sb, sizeof sb),
                       d->flat ? "[B, T, D]" : "[B, T, H, D]");
    d->dv = (int)tv->shape[tv->ndim - 1];
    if (d->B < 1 || d->T < 1 || d->H < 1 || d->dk < 1 || d->dv < 1)
        return err_set(e, "tensor '%s': empty shape %s", tk->name,
                       shape_str(tk->ndim, tk->shape, sb, sizeof sb));
    if ((int64_t)d->T * d->H * (d->dk > d->dv ? d->dk : d->dv) > (1ll << 31))
        return err_set(e, "tensor '%s': too large for replay", tk->name);
    return 0;
}

/* The shape a per-token input of width w must have. */
static int want_shape(const dims *d, int w, int scalar, int64_t *shape) {
    int n = 0;
    shape[n++] = d->B, shape[n++] = d->T;
    if (!d->flat) shape[n++] = d->H;
    if (!scalar) shape[n++] = w;
    return n;
}

static int check_shape(const tensor *t, int n, const int64_t *shape, err *e) {
    int ok = t->ndim == n;
    for (int i = 0; ok && i < n; i++) ok = t->shape[i] == shape[i];
    if (ok) return 0;
    char a[128], b[128];
    return err_set(e, "tensor '%s': shape %s, expected %s", t->name,
                   shape_str(t->ndim, t->shape, a, sizeof a), shape_str(n, shape, b, sizeof b));
}

static double norm2(const float *x, size_t n) {
    double s = 0;
    for (size_t i = 0; i < n; i++) s += (double)x[i] * x[i];
    return s;
}

int replay_run(const mixer_ops *m, const char *in_path, const char *prefix, const char *out_path,
               opts *o, replay_result *res, err *e) {
    memset(res, 0, sizeof *res);
    st_file *f = NULL;
    if (st_open(&f, in_path, e)) return -1;
    int rc = -1;
    dims d;
    mixer_cfg c;
    float *in[IN_COUNT] = {0}, *params[MIXER_MAX_PARAMS] = {0};
    float *init = NULL, *state = NULL, *o_pre = NULL, *o_step = NULL, *probes = NULL;
    tensor *out_t[64] = {0};
    int nout = 0;
    state_part parts[MIXER_MAX_STATE_PARTS];
    int nparts = 0;
    double attr_num = 0, attr_den = 0;

    long attribution = 0;
    if (opts_int(o, "attribution", 0, &attribution, e)) goto done;
    if (attribution && !attribution_supported(m)) {
        err_set(e,
                "attribution=1: %s has no exact attribution (its output is not a fixed sum of "
                "its values)",
                m->name);
        goto done;
    }
    if (infer_dims(m, f, prefix, &d, e)) goto done;
    if (attribution && (size_t)d.B * d.H * d.T * d.T > ((size_t)1 << 30)) {
        err_set(e, "attribution=1: [B, H, T, T] = [%d, %d, %d, %d] is more than 2^30 floats", d.B,
                d.H, d.T, d.T);
        goto done;
    }
    if (mixer_configure(m, &c, d.H, d.dk, d.dv, o, e)) goto done;
    if (opts_check_unused(o, e)) goto done;
    c.max_t = d.T;
    size_t TH = (size_t)d.T * d.H;

    /* per-token inputs, all batches: [B, T, H, w] as float32 */
    for (int i = 0; i < m->ninputs; i++) {
        const input_def *id = &m->inputs[i];
        int w = mixer_input_floats(&c, id->which);
        const tensor *t = find_input(f, prefix, id->name);
        size_t n = (size_t)d.B * TH * (size_t)w;
        if (!t && id->required) {
            err_set(e, "missing tensor '%s%s'", prefix, id->name);
            goto done;
        }
        if (!t) continue; /* optional and absent: the mixer's default */
        int64_t shape[5];
        int nd = want_shape(&d, w, id->width == W_1, shape);
        if (check_float(t, e) || check_shape(t, nd, shape, e)) goto done;
        if (!(in[id->which] = malloc(n * sizeof(float)))) goto oom;
        if (tensor_read_f32_file(t, in[id->which], e)) goto done;
        if (check_domain(m, prefix, id->name, in[id->which], n, e)) goto done;
    }
    /* static parameters: [dv, dk] per head */
    for (int i = 0; i < m->nparams; i++) {
        const tensor *t = find_input(f, prefix, m->params[i].name);
        if (!t) {
            err_set(e, "missing tensor '%s%s'", prefix, m->params[i].name);
            goto done;
        }
        int64_t shape[4];
        int nd = 0;
        if (!d.flat) shape[nd++] = d.H;
        if (m->params[i].width == W_LANES)
            shape[nd++] = d.dv, shape[nd++] = d.dk;
        else
            shape[nd++] = mixer_width_floats(&c, m->params[i].width);
        if (check_float(t, e) || check_shape(t, nd, shape, e)) goto done;
        if (!(params[i] = malloc((size_t)tensor_numel(t) * sizeof(float)))) goto oom;
        if (tensor_read_f32_file(t, params[i], e)) goto done;
        if (check_domain(m, prefix, m->params[i].name, params[i], (size_t)tensor_numel(t), e))
            goto done;
        c.params[i] = params[i];
    }
    size_t sf = m->state_floats(&c), np = mixer_probe_floats(m, &c);
    size_t on = (size_t)d.B * TH * (size_t)d.dv;
    nparts = m->state_parts ? m->state_parts(&c, parts) : 0;
    if (!(init = malloc(sf * sizeof(float))) || !(state = malloc(sf * sizeof(float))) ||
        !(o_pre = malloc(on * sizeof(float))) || !(o_step = malloc(on * sizeof(float))) ||
        !(probes = malloc((size_t)d.B * (size_t)d.T * (np ? np : 1) * sizeof(float))))
        goto oom;
    /* outputs: o, final state parts, probes */
    {
        int64_t shape[5];
        int nd = want_shape(&d, d.dv, 0, shape);
        if (!(out_t[nout++] = tensor_new("o", DT_F32, nd, shape, e))) goto done;
        for (int p = 0; p < nparts; p++) {
            int64_t ps[5];
            int k = 0;
            ps[k++] = d.B;
            for (int j = d.flat ? 1 : 0; j < parts[p].ndim; j++) ps[k++] = parts[p].shape[j];
            if (!(out_t[nout++] = tensor_new(parts[p].name, DT_F32, k, ps, e))) goto done;
        }
        if (attribution) {
            int64_t as[4] = {d.B, d.H, d.T, d.T};
            if (!(out_t[nout++] = tensor_new("attn", DT_F32, 4, as, e))) goto done;
            if (!(out_t[nout++] = tensor_new("attn_decay", DT_F32, 4, as, e))) goto done;
            int nd2 = want_shape(&d, d.dv, 0, shape);
            if (!(out_t[nout++] = tensor_new("o_init", DT_F32, nd2, shape, e))) goto done;
        }
        for (int p = 0; p < m->nprobes && nout < 64; p++) {
            char name[96];
            snprintf(name, sizeof name, "probe.%s", m->probes[p].name);
            int w = mixer_width_floats(&c, m->probes[p].width);
            nd = want_shape(&d, w, m->probes[p].width == W_1, shape);
            if (!(out_t[nout++] = tensor_new(name, DT_F32, nd, shape, e))) goto done;
        }
    }
    for (int b = 0; b < d.B; b++) {
        mixer_seq seq = {.T = d.T};
        for (int i = 0; i < IN_COUNT; i++)
            if (in[i]) seq.in[i] = in[i] + (size_t)b * TH * mixer_input_floats(&c, (mixer_input)i);
        /* initial state: the mixer's prior, then any given init parts */
        m->state_init(&c, init);
        for (int p = 0; p < nparts; p++) {
            const tensor *t = find_input(f, prefix, parts[p].init_name);
            if (!t) continue;
            int64_t ps[5];
            int k = 0;
            ps[k++] = d.B;
            for (int j = d.flat ? 1 : 0; j < parts[p].ndim; j++) ps[k++] = parts[p].shape[j];
            if (check_float(t, e) || check_shape(t, k, ps, e)) goto done;
            size_t n = (size_t)(tensor_numel(t) / d.B);
            float *tmp = malloc(n * d.B * sizeof(float));
            if (!tmp) goto oom;
            if (tensor_read_f32_file(t, tmp, e)) {
                free(tmp);
                goto done;
            }
            memcpy(init + parts[p].offset, tmp + (size_t)b * n, n * sizeof(float));
            free(tmp);
        }
        float *ob = o_pre + (size_t)b * TH * d.dv;
        memcpy(state, init, sf * sizeof(float));
        m->prefill(&c, state, &seq, 0, ob);
        for (int p = 0; p < nparts; p++) {
            size_t n = (size_t)(tensor_numel(out_t[1 + p]) / d.B);
            memcpy((float *)out_t[1 + p]->data + (size_t)b * n, state + parts[p].offset,
                   n * sizeof(float));
        }
        memcpy(state, init, sf * sizeof(float));
        mixer_run_steps(m, &c, state, &seq, 0, o_step + (size_t)b * TH * d.dv,
                        probes + (size_t)b * d.T * np);
        if (attribution) {
            /* attn, attn_decay, o_init follow o and the state parts */
            size_t tt = (size_t)d.H * d.T * d.T;
            float *M = (float *)out_t[1 + nparts]->data + (size_t)b * tt;
            float *Md = (float *)out_t[2 + nparts]->data + (size_t)b * tt;
            float *oi = (float *)out_t[3 + nparts]->data + (size_t)b * TH * d.dv;
            if (mixer_attribution(m, &c, init, &seq, M, Md, oi, e)) goto done;
            /* the split reproduces the step's output: sum_j M_ij v_j + o_init_i */
            const float *ob = o_step + (size_t)b * TH * d.dv, *vb = seq.in[IN_V];
            for (int i = 0; i < d.T; i++)
                for (int h = 0; h < d.H; h++) {
                    const float *Mr = M + ((size_t)h * d.T + i) * d.T;
                    for (int v = 0; v < d.dv; v++) {
                        double acc = oi[((size_t)i * d.H + h) * d.dv + v];
                        for (int j = 0; j <= i; j++)
                            acc += (double)Mr[j] * vb[((size_t)j * d.H + h) * d.dv + v];
                        double ref = ob[((size_t)i * d.H + h) * d.dv + v];
                        attr_num += (acc - ref) * (acc - ref), attr_den += ref * ref;
                    }
                }
        }
    }
    if (attribution) {
        res->attributed = 1;
        res->attr_rel_err = attr_den > 0 ? sqrt(attr_num / attr_den) : sqrt(attr_num);
    }
    memcpy(out_t[0]->data, o_pre, on * sizeof(float));
    /* probes: [B][T][probe floats] -> per-probe tensors [B, T, H(, w)] */
    int pfirst = 1 + nparts + (attribution ? 3 : 0);
    for (int p = 0; p < m->nprobes && pfirst + p < nout; p++) {
        size_t off = mixer_probe_offset(m, &c, p);
        size_t w = (size_t)d.H * (size_t)mixer_width_floats(&c, m->probes[p].width);
        float *dst = out_t[pfirst + p]->data;
        for (size_t bt = 0; bt < (size_t)d.B * d.T; bt++)
            memcpy(dst + bt * w, probes + bt * np + off, w * sizeof(float));
    }
    {
        double num = 0, den = norm2(o_step, on);
        for (size_t i = 0; i < on; i++) {
            double df = (double)o_pre[i] - o_step[i];
            num += df * df;
            if (!isfinite(o_pre[i])) res->nonfinite++;
        }
        res->path_rel_err = den > 0 ? sqrt(num / den) : sqrt(num);
        res->o_norm = sqrt(norm2(o_pre, on));
    }
    res->B = d.B, res->T = d.T, res->H = d.H, res->dk = d.dk, res->dv = d.dv;
    if (out_path) {
        char md[512];
        snprintf(md, sizeof md,
                 "{\"producer\":\"mixscope replay\",\"mixer\":\"%s\",\"input\":\"%.300s\"}",
                 m->name, in_path);
        /* the input path could hold a quote or backslash: fall back to no input name then */
        if (strpbrk(in_path, "\"\\"))
            snprintf(md, sizeof md, "{\"producer\":\"mixscope replay\",\"mixer\":\"%s\"}", m->name);
        if (st_write(out_path, (const tensor *const *)out_t, nout, md, e)) goto done;
    }
    rc = 0;
    goto done;
oom:
    err_set(e, "out of memory");
done:
    if (rc) err_prefix(e, "%s", in_path);
    for (int i = 0; i < IN_COUNT; i++) free(in[i]);
    for (int i = 0; i < MIXER_MAX_PARAMS; i++) free(params[i]);
    for (int i = 0; i < nout; i++) tensor_free(out_t[i]);
    free(init), free(state), free(o_pre), free(o_step), free(probes);
    st_close(f);
    return rc;
}
