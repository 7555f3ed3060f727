/* replay_layers.c: `replay MIXER FILE layer=N` / `layers=all`.
 *
 * A dump of a failing run (tools/dump_activations.py) holds every layer's core inputs in one
 * file, named layers.N.q, layers.N.k, layers.N.v, layers.N.g, layers.N.beta, ... in fla's
 * [B, T, H, D] layout. Each layer is one ordinary replay (mixers/replay.c, prefix
 * P + "layers.N."), written to a temporary file; its outputs are read back to find the first
 * non-finite value of the layer (inputs first, then the derived quantities, then the output), and
 * copied into the one output file under layers.N.<name>. The single-layer `replay` contract is
 * untouched: this runs only when layer= or layers= is given. */
#include <ctype.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "../core/safetensors.h"
#include "../mixers/replay.h"
#include "diag.h"

#define MAX_LAYERS 4096

/* The layers that have at least one of the mixer's inputs under P + "layers.N.". */
static int find_layers(const st_file *f, const mixer_ops *m, const char *prefix,
                       unsigned char *has) {
    size_t pl = strlen(prefix);
    int count = 0;
    for (int i = 0; i < f->n; i++) {
        const char *name = f->tensors[i].name;
        if (strncmp(name, prefix, pl) != 0 || strncmp(name + pl, "layers.", 7) != 0) continue;
        const char *p = name + pl + 7;
        if (!isdigit((unsigned char)*p)) continue;
        long n = strtol(p, (char **)&p, 10);
        if (*p != '.' || n < 0 || n >= MAX_LAYERS) continue;
        for (int k = 0; k < m->ninputs; k++)
            if (strcmp(p + 1, m->inputs[k].name) == 0 && !has[n]) has[n] = 1, count++;
    }
    return count;
}

/* A tensor's values as floats, [B, T, per-token]; NULL when absent. */
typedef struct seq {
    const char *name;
    float *v;
    int64_t B, T, per;
} seq;

static int seq_read(seq *s, const st_file *f, const char *full, const char *name) {
    memset(s, 0, sizeof *s);
    s->name = name;
    const tensor *t = st_find(f, full);
    if (!t || t->ndim < 2 || !dtype_is_float(t->dtype)) return 0;
    int64_t n = tensor_numel(t);
    if (!(s->v = malloc((size_t)(n ? n : 1) * sizeof(float)))) return -1;
    err lost = {{0}};
    if (tensor_read_f32_file(t, s->v, &lost)) { /* the file shrank since: as if absent */
        free(s->v);
        s->v = NULL;
        return 0;
    }
    s->B = t->shape[0], s->T = t->shape[1];
    s->per = s->B > 0 && s->T > 0 ? n / (s->B * s->T) : 0;
    return 0;
}

/* Head of the first non-finite value of token (b, t), or -1 when all are finite. */
static int seq_bad(const seq *s, int64_t b, int64_t t, int H, float *val) {
    if (!s->v || b >= s->B || t >= s->T) return -1;
    const float *x = s->v + (size_t)((b * s->T + t) * s->per);
    for (int64_t i = 0; i < s->per; i++)
        if (!isfinite(x[i])) {
            *val = x[i];
            return s->per % H == 0 ? (int)(i / (s->per / H)) : 0;
        }
    return -1;
}

static const char *vstr(float v) {
    return isnan(v) ? "NaN" : (v > 0 ? "+inf" : "-inf");
}

/* The first non-finite value of one layer's replay into msg ("" when none). */
static void first_nonfinite(const st_file *in, const st_file *outf, const mixer_ops *m,
                            const char *lp, int H, char *msg, size_t n) {
    static const char *const DERIVED[] = {
        "k_norm",     "beta",       "eta",    "rho",        "alpha",      "kappa", "den",
        "lambda_min", "lambda_max", "e_norm", "write_norm", "state_norm", "o_norm"};
    enum { ND = sizeof DERIVED / sizeof DERIVED[0] };
    seq ins[IN_COUNT], pr[ND], o;
    int ni = 0;
    char full[320];
    msg[0] = '\0';
    for (int k = 0; k < m->ninputs && ni < IN_COUNT; k++) {
        snprintf(full, sizeof full, "%s%s", lp, m->inputs[k].name);
        if (seq_read(&ins[ni], in, full, m->inputs[k].name) == 0 && ins[ni].v) ni++;
    }
    for (int k = 0; k < ND; k++) {
        snprintf(full, sizeof full, "probe.%s", DERIVED[k]);
        seq_read(&pr[k], outf, full, DERIVED[k]);
    }
    seq_read(&o, outf, "o", "o");
    int64_t B = o.B, T = o.T;
    for (int64_t t = 0; t < T && !msg[0]; t++)
        for (int64_t b = 0; b < B && !msg[0]; b++) {
            float v = 0;
            int h;
            for (int k = 0; k < ni && !msg[0]; k++)
                if ((h = seq_bad(&ins[k], b, t, H, &v)) >= 0)
                    snprintf(msg, n,
                             "first non-finite: batch %lld token %lld head %d, in the input "
                             "%s (%s)",
                             (long long)b, (long long)t, h, ins[k].name, vstr(v));
            if (msg[0]) break;
            float so = 0, ss = 0;
            int ho = seq_bad(&o, b, t, H, &so), hs = -1;
            for (int k = 0; k < ND; k++)
                if (strcmp(DERIVED[k], "state_norm") == 0) hs = seq_bad(&pr[k], b, t, H, &ss);
            if (ho < 0 && hs < 0) continue;
            int head = hs >= 0 ? hs : ho;
            for (int k = 0; k < ND && !msg[0]; k++) {
                float pv = 0;
                if (seq_bad(&pr[k], b, t, H, &pv) == head)
                    snprintf(msg, n,
                             "first non-finite: batch %lld token %lld head %d, in probe.%s "
                             "(%s)",
                             (long long)b, (long long)t, head, pr[k].name, vstr(pv));
            }
            if (!msg[0])
                snprintf(msg, n,
                         "first non-finite: batch %lld token %lld head %d, in the output o "
                         "(%s)",
                         (long long)b, (long long)t, ho, vstr(so));
        }
    for (int k = 0; k < ni; k++) free(ins[k].v);
    for (int k = 0; k < ND; k++) free(pr[k].v);
    free(o.v);
}

int diag_replay_layers(FILE *out, const mixer_ops *m, const char *in_path, const char *prefix,
                       const char *spec, const char *out_path, opts *o, err *e) {
    st_file *f = NULL;
    if (st_open(&f, in_path, e)) return err_prefix(e, "replay");
    unsigned char *has = calloc(MAX_LAYERS, 1);
    tensor **outs = NULL;
    int nouts = 0, cap = 0, rc = -1;
    char tmp[4200] = "";
    if (!has) {
        err_set(e, "out of memory");
        goto done;
    }
    int found = find_layers(f, m, prefix, has);
    if (found == 0) {
        err_set(e, "replay: %s holds no tensors named %slayers.N.<input> for the %s mixer", in_path,
                prefix, m->name);
        goto done;
    }
    int only = -1;
    if (strcmp(spec, "all") != 0) {
        char *end;
        long v = strtol(spec, &end, 10);
        if (*end || end == spec || v < 0 || v >= MAX_LAYERS || !has[v]) {
            char list[200] = "";
            for (int l = 0, k = 0; l < MAX_LAYERS && strlen(list) < 180; l++)
                if (has[l])
                    snprintf(list + strlen(list), sizeof list - strlen(list), "%s%d",
                             k++ ? ", " : "", l);
            err_set(e, "replay: layer=%.40s: no such layer in %s (layers: %s; or layers=all)", spec,
                    in_path, list);
            goto done;
        }
        only = (int)v;
    }
    /* a temporary output per layer, beside the final one or in /tmp */
    if (out_path)
        snprintf(tmp, sizeof tmp, "%s.layer.tmp", out_path);
    else {
        snprintf(tmp, sizeof tmp, "/tmp/mixscope-replay-XXXXXX");
        int fd = mkstemp(tmp);
        if (fd < 0) {
            err_set(e, "replay: cannot create a temporary file");
            goto done;
        }
        close(fd);
    }
    for (int l = 0; l < MAX_LAYERS; l++) {
        if (!has[l] || (only >= 0 && l != only)) continue;
        char lp[300];
        snprintf(lp, sizeof lp, "%slayers.%d.", prefix, l);
        replay_result r;
        if (replay_run(m, in_path, lp, tmp, o, &r, e)) {
            err_prefix(e, "replay layer %d", l);
            goto done;
        }
        st_file *g = NULL;
        if (st_open(&g, tmp, e)) goto done;
        char nf[300];
        first_nonfinite(f, g, m, lp, r.H, nf, sizeof nf);
        fprintf(
            out, "layer %d: %s B=%d T=%d H=%d dk=%d dv=%d  |o|=%.6g  prefill vs step: %.2e%s%s\n",
            l, m->name, r.B, r.T, r.H, r.dk, r.dv, r.o_norm, r.path_rel_err, nf[0] ? "  " : "", nf);
        for (int i = 0; out_path && i < g->n; i++) {
            const tensor *t = &g->tensors[i];
            char name[400];
            snprintf(name, sizeof name, "layers.%d.%s", l, t->name);
            if (nouts == cap) {
                int nc = cap ? cap * 2 : 64;
                tensor **no = realloc(outs, (size_t)nc * sizeof *no);
                if (!no) {
                    st_close(g);
                    err_set(e, "out of memory");
                    goto done;
                }
                outs = no, cap = nc;
            }
            tensor *c = tensor_new(name, t->dtype, t->ndim, t->shape, e);
            if (!c) {
                st_close(g);
                goto done;
            }
            memcpy(c->data, t->data, t->nbytes);
            outs[nouts++] = c;
        }
        st_close(g);
    }
    if (out_path) {
        char md[512];
        snprintf(md, sizeof md,
                 "{\"producer\":\"mixscope replay\",\"mixer\":\"%s\",\"layers\":\"%s\"}", m->name,
                 only >= 0 ? spec : "all");
        if (st_write(out_path, (const tensor *const *)outs, nouts, md, e)) goto done;
        fprintf(out, "wrote %d tensors to %s\n", nouts, out_path);
    }
    rc = 0;
done:
    if (tmp[0]) unlink(tmp);
    for (int i = 0; i < nouts; i++) tensor_free(outs[i]);
    free(outs), free(has);
    st_close(f);
    return rc;
}
