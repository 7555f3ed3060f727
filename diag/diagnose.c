/* diagnose.c: running a checkpoint (or a series of them) over a probe prompt and reading it.
 *
 * Per checkpoint: load it as it is (diag_load: non-finite weights are kept and reported), run the
 * probe prompt token by token with model_step, recording every probe into a trace of its own and
 * scanning every layer after its core step for the first non-finite value (diag_nf_scan_layer),
 * then read the figures off the trace and the weights and turn them into findings. The run does
 * not stop at a non-finite value: the figures of the other layers and heads still mean something,
 * and the first one is what the report names. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "../models/model.h"
#include "../scenes/prompts.h"
#include "diag.h"

/* Byte text for the first half of the default prompt: ordinary prose with digits and
 * punctuation, so the byte-level embedding sees a spread of ids. */
static const char PROSE[] =
    "The lab runs the same tokens through every layer and watches the memory fill. A stable "
    "layer forgets at a steady rate, writes a little of each new key, and reads back what it "
    "stored; an unstable one lets its state grow by a factor each token until the numbers leave "
    "the range of float32. In 2024 a run at step 12000 lost its loss to NaN within 40 steps: the "
    "keys of one head had shrunk to |k| = 0.003, and the write strength divided by |k|^2 sent "
    "the state to 1e38. Look at beta, the decay half-life, the key norms and the state norm; "
    "then at the gates around the core. ";

int diag_probe_prompt(const diag_options *o, int vocab, int32_t **ids, int *n, char *desc,
                      size_t dn, err *e) {
    int len = o->len > 0 ? o->len : 512;
    if (len > (1 << 20)) return err_set(e, "diagnose: len=%d is more than 2^20 tokens", len);
    if (o->ids) { /* tokens= as given: every id must lie in the vocabulary */
        for (int i = 0; i < o->nids; i++)
            if (o->ids[i] < 0 || o->ids[i] >= vocab)
                return err_set(e,
                               "diagnose: tokens=: id %d at position %d is outside the "
                               "vocabulary (%d)",
                               (int)o->ids[i], i, vocab);
        int32_t *v = malloc((size_t)(o->nids > 0 ? o->nids : 1) * sizeof *v);
        if (!v) return err_set(e, "out of memory");
        memcpy(v, o->ids, (size_t)o->nids * sizeof *v);
        snprintf(desc, dn, "%d tokens given with tokens=", o->nids);
        *ids = v, *n = o->nids;
        return 0;
    }
    int32_t *v = malloc((size_t)len * sizeof *v);
    if (!v) return err_set(e, "out of memory");
    if (o->prompt) {
        size_t L = strlen(o->prompt);
        if (L == 0) {
            free(v);
            return err_set(e, "diagnose: empty prompt=");
        }
        for (int i = 0; i < len; i++) v[i] = (int32_t)((unsigned char)o->prompt[i % L] % vocab);
        snprintf(desc, dn, "%d tokens: the bytes of the given prompt%s%s", len,
                 (size_t)len > L ? ", repeated" : "", vocab < 256 ? " (mod the vocabulary)" : "");
        *ids = v, *n = len;
        return 0;
    }
    /* first half byte text, then MQAR: key-value pairs and queries of them */
    int half = len / 2, t = 0;
    for (; t < half; t++) v[t] = (int32_t)((unsigned char)PROSE[t % (sizeof PROSE - 1)] % vocab);
    int pairs = (len - half) / 4, maxp = vocab / 2 - 1, blocks = 0;
    if (pairs > maxp) pairs = maxp;
    uint64_t seed = o->seed;
    while (t < len && pairs >= 1) {
        task_prompt p;
        err pe = {{0}};
        int q = pairs;
        if (task_mqar(&p, pairs, q, vocab, seed++, &pe)) break;
        for (int i = 0; i < p.n && t < len; i++) v[t++] = p.ids[i];
        task_free(&p);
        blocks++;
    }
    for (; t < len; t++) v[t] = (int32_t)((t * 2654435761u) % (uint32_t)vocab); /* tiny vocab */
    snprintf(desc, dn,
             "%d tokens: %d of byte text%s, then %d MQAR block%s of %d key-value pairs and %d "
             "queries (seed %llu)",
             len, half, vocab < 256 ? " (mod the vocabulary)" : "", blocks, blocks == 1 ? "" : "s",
             pairs, pairs, (unsigned long long)o->seed);
    *ids = v, *n = len;
    return 0;
}

int diag_run_model(diag_ckpt *ck, model *m, const int32_t *ids, int T, err *e) {
    int nl = m->c.layers, H = 1;
    for (int l = 0; l < nl; l++)
        if (m->layers[l].mc.H > H) H = m->layers[l].mc.H;
    if (!ck->fig && diag_ckpt_alloc(ck, nl, H, e)) return -1;
    snprintf(ck->kind, sizeof ck->kind, "%s", model_kind_name(m->c.kind));
    const mixer_ops **mx = malloc((size_t)nl * sizeof *mx);
    float *logits = malloc((size_t)m->c.vocab * sizeof *logits);
    trace tr;
    trace_init(&tr);
    int rc = -1, gpu = m->gpu;
    if (!mx || !logits) {
        err_set(e, "out of memory");
        goto done;
    }
    for (int l = 0; l < nl; l++) {
        mx[l] = m->layers[l].mx;
        snprintf(ck->mixer[l], sizeof ck->mixer[l], "%s", mx[l]->name);
    }
    if (model_register_probes(m, &tr, e)) goto done;
    if (model_reset(m, T > m->max_t ? T : 0, e)) goto done;
    m->gpu = 0;
    diag_nf_hook hk;
    diag_nf_clear(&hk.nf);
    for (int t = 0; t < T; t++) {
        if (trace_push_token(&tr, e) < 0) goto done;
        m->layer_hook = diag_nf_hook_fn, m->layer_hook_ctx = &hk;
        int s = model_step(m, ids[t], logits, &tr, e);
        m->layer_hook = NULL, m->layer_hook_ctx = NULL;
        if (s) {
            err_prefix(e, "token %d", t);
            goto done;
        }
        diag_nf_scan_end(&hk.nf, m, logits);
    }
    ck->T = T;
    ck->nf = hk.nf;
    diag_figures_from_trace(ck, &tr, mx);
    diag_figures_from_weights(ck, m);
    diag_findings(ck, &tr, mx);
    ck->ok = 1;
    rc = 0;
done:
    m->gpu = gpu;
    trace_free(&tr);
    free(mx), free(logits);
    return rc;
}

/* The folder (or file) name of a checkpoint path, for the report. */
static void label_of(const char *path, char *buf, size_t n) {
    size_t len = strlen(path);
    while (len > 1 && path[len - 1] == '/') len--;
    size_t s = len;
    while (s > 0 && path[s - 1] != '/') s--;
    snprintf(buf, n, "%.*s", (int)(len - s), path + s);
}

int diag_run_path(diag_report *r, const char *path, const diag_options *o, FILE *progress, err *e) {
    memset(r, 0, sizeof *r);
    char **paths;
    int n;
    if (diag_list_checkpoints(path, &paths, &n, e)) return -1;
    r->ck = calloc((size_t)n, sizeof *r->ck);
    if (!r->ck) {
        diag_free_list(paths, n);
        return err_set(e, "out of memory");
    }
    r->n = n;
    for (int i = 0; i < n; i++) {
        diag_ckpt *ck = &r->ck[i];
        snprintf(ck->path, sizeof ck->path, "%s", paths[i]);
        label_of(paths[i], ck->label, sizeof ck->label);
        ck->step = diag_step_of(paths[i]);
        if (progress) fprintf(progress, "diagnose: %s (%d of %d)\n", ck->label, i + 1, n);
        model *m = NULL;
        err le = {{0}};
        int32_t *ids = NULL;
        int T = 0;
        char desc[256];
        /* findings from loading (non-finite weights) are kept: diag_load runs before the
         * figures are allocated, so collect them in a scratch and copy */
        diag_ckpt pre;
        memset(&pre, 0, sizeof pre);
        if (diag_load(&m, paths[i], &pre, &le) ||
            diag_probe_prompt(o, m->c.vocab, &ids, &T, desc, sizeof desc, &le) ||
            diag_run_model(ck, m, ids, T, &le)) {
            snprintf(ck->error, sizeof ck->error, "%s", le.msg);
            ck->ok = 0;
        } else if (!r->prompt_desc[0]) {
            snprintf(r->prompt_desc, sizeof r->prompt_desc, "%s", desc);
        }
        /* weight findings first: they are the cause of what the run shows */
        if (pre.nfind > 0) {
            diag_finding keep[DIAG_MAX_FINDINGS];
            int nk = ck->nfind;
            memcpy(keep, ck->find, (size_t)nk * sizeof *keep);
            ck->nfind = 0;
            for (int k = 0; k < pre.nfind && ck->nfind < DIAG_MAX_FINDINGS; k++)
                ck->find[ck->nfind++] = pre.find[k];
            for (int k = 0; k < nk && ck->nfind < DIAG_MAX_FINDINGS; k++)
                ck->find[ck->nfind++] = keep[k];
        }
        free(ids);
        model_free(m);
    }
    diag_free_list(paths, n);
    return 0;
}

void diag_report_free(diag_report *r) {
    for (int i = 0; i < r->n; i++) diag_ckpt_free(&r->ck[i]);
    free(r->ck);
    memset(r, 0, sizeof *r);
}
