/* train.c: the training loop (train.h): data, AdamW, schedule, clipping, held-out accuracy,
 * checkpoints and log.csv. The arithmetic of the model is in model_grad.c. */
#include "train.h"

#include <cjson/cJSON.h>
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "../core/fileio.h"
#include "../core/safetensors.h"
#include "../scenes/prompts.h"
#include "model_grad.h"
#include "ops.h"
#include "train_gpu.h"

void train_cfg_default(train_cfg *c) {
    memset(c, 0, sizeof *c);
    snprintf(c->mixer, sizeof c->mixer, "gdn");
    snprintf(c->task, sizeof c->task, "mqar");
    c->layers = 2, c->hidden = 128, c->heads = 2, c->head_dim = 64;
    c->vocab = 256, c->pairs = 32, c->keys = 16;
    c->steps = 300, c->batch = 64, c->seq = 256, c->warmup = 30;
    c->lr = 3e-3, c->wd = 0.1, c->clip = 1.0;
    c->log_every = 25, c->eval = 256, c->chunk = 64, c->rows = 16384;
}

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

void train_status_print(FILE *out, const train_status *st) {
    if (isfinite(st->acc) || isfinite(st->tok_s)) {
        fprintf(out, "step %*d/%d  loss %.4f", st->steps >= 10000 ? 6 : 4, st->step, st->steps,
                st->loss);
        if (isfinite(st->acc))
            fprintf(out, "  held-out %5.1f%% (loss %.4f)", 100 * st->acc, st->eval_loss);
        fprintf(out, "  grad %.3g  lr %.2e", st->grad_norm, st->lr);
        if (isfinite(st->tok_s)) fprintf(out, "  %.1fk tok/s", st->tok_s / 1000);
        fprintf(out, "  %.0f s\n", st->elapsed_s);
    }
    if (st->note) fprintf(out, "  %s\n", st->note);
    fflush(out);
}

/* ---- data ---- */

static uint64_t mix64(uint64_t z) {
    z += 0x9E3779B97F4A7C15ull;
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

/* Prompt `index` of stream `which` (0 training, 1 held-out) into ids/tgt [seq]: the generator's
 * tokens, padded with token 0 (unscored) when it makes fewer than seq. */
static int make_prompt(const train_cfg *c, int which, uint64_t index, int32_t *ids, int32_t *tgt,
                       err *e) {
    uint64_t seed = mix64(mix64(c->seed) ^ mix64(((uint64_t)which << 56) ^ index));
    task_prompt p;
    int rc;
    if (!strcmp(c->task, "mqar")) {
        rc = task_mqar(&p, c->pairs, c->seq / 2 - c->pairs, c->vocab, seed, e);
    } else if (!strcmp(c->task, "niah")) {
        double depth = (double)(mix64(seed ^ 1) >> 11) * (1.0 / 9007199254740992.0);
        rc = task_niah(&p, c->seq, c->vocab, depth, seed, e);
    } else if (!strcmp(c->task, "overwrite")) {
        rc = task_overwrite(&p, c->keys, c->seq / (2 * c->keys) - 1, c->vocab, seed, e);
    } else {
        rc = task_a5(&p, c->seq, seed, e);
    }
    if (rc) return -1;
    if (p.n > c->seq) {
        task_free(&p);
        return err_set(e, "train: the %s prompt has %d tokens, more than seq=%d", c->task, p.n,
                       c->seq);
    }
    for (int t = 0; t < c->seq; t++) {
        ids[t] = t < p.n ? p.ids[t] : 0;
        tgt[t] = t < p.n ? p.target[t] : -1;
    }
    task_free(&p);
    return 0;
}

/* ---- the optimiser ---- */

static double lr_at(const train_cfg *c, int step) {
    if (step < c->warmup) return c->lr * (step + 1) / c->warmup;
    double span = c->steps - c->warmup;
    double t = span > 0 ? (step - c->warmup) / span : 1.0;
    return c->lr * 0.5 * (1.0 + cos(M_PI * t));
}

typedef struct adamw {
    float *m, *v;
    int t;
} adamw;

/* PyTorch's AdamW: p -= lr wd p; m, v moments; p -= lr m^ / (sqrt(v^) + eps). Decay only on
 * matrices (2-d and more): norms, biases, A_log and dt_bias keep their scale. */
static void adamw_step(adamw *o, model *m, const train_grads *g, double lr, double wd,
                       float gscale) {
    const double b1 = 0.9, b2 = 0.95, eps = 1e-8;
    o->t++;
    double c1 = 1.0 - pow(b1, o->t), c2 = 1.0 - pow(b2, o->t);
    int64_t off = 0;
    for (int i = 0; i < m->nslots; i++) {
        wslot *s = &m->slots[i];
        int64_t n = 1;
        for (int d = 0; d < s->ndim; d++) n *= s->shape[d];
        float decay = s->ndim >= 2 ? (float)(1.0 - lr * wd) : 1.0f;
        float *p = s->data, *mm = o->m + off, *vv = o->v + off;
        const float *gr = g->of[i];
        for (int64_t j = 0; j < n; j++) {
            float gj = gr[j] * gscale;
            mm[j] = (float)(b1 * mm[j] + (1 - b1) * gj);
            vv[j] = (float)(b2 * vv[j] + (1 - b2) * (double)gj * gj);
            double upd = (mm[j] / c1) / (sqrt(vv[j] / c2) + eps);
            p[j] = (float)(p[j] * decay - lr * upd);
        }
        off += n;
    }
}

/* ---- checkpoints and the log ---- */

/* config.json gains "mixscope_train": {command, step, loss, accuracy} */
static int set_provenance(model *m, const train_cfg *c, int step, double loss, double acc, err *e) {
    cJSON *root = cJSON_Parse(m->config_json);
    if (!root) return err_set(e, "train: cannot re-read the model's config.json");
    cJSON_DeleteItemFromObjectCaseSensitive(root, "mixscope_train");
    cJSON *t = cJSON_AddObjectToObject(root, "mixscope_train");
    cJSON_AddStringToObject(t, "command", c->command);
    cJSON_AddNumberToObject(t, "step", step);
    if (isfinite(loss)) cJSON_AddNumberToObject(t, "loss", loss);
    if (isfinite(acc)) cJSON_AddNumberToObject(t, "accuracy", acc);
    char *text = cJSON_Print(root);
    cJSON_Delete(root);
    if (!text) return err_set(e, "train: out of memory");
    char *copy = strdup(text);
    cJSON_free(text);
    if (!copy) return err_set(e, "train: out of memory");
    free(m->config_json);
    m->config_json = copy;
    return 0;
}

static int save_step(model *m, const train_cfg *c, int step, double loss, double acc, char *where,
                     size_t wn, err *e) {
    if (!c->out[0]) return 0;
    snprintf(where, wn, "%s/step-%06d", c->out, step);
    if (set_provenance(m, c, step, loss, acc, e)) return -1;
    if (model_save(m, where, e)) return err_prefix(e, "train: checkpoint");
    snprintf(m->source, sizeof m->source, "%s", where);
    return 0;
}

/* OUT/NAME.safetensors from float or int32 arrays */
static int write_tensors(const train_cfg *c, const char *name, tensor *ts, int n, err *e) {
    char path[1100];
    snprintf(path, sizeof path, "%s/%s.safetensors", c->out, name);
    const tensor **ptr = malloc((size_t)n * sizeof *ptr);
    if (!ptr) return err_set(e, "train: out of memory");
    for (int i = 0; i < n; i++) ptr[i] = &ts[i];
    int rc = st_write(path, ptr, n, NULL, e);
    free(ptr);
    return rc;
}

/* step 0's gradient, one tensor a slot, by the checkpoint's names */
static int dump_grads(const model *m, const train_cfg *c, const train_grads *g, err *e) {
    tensor *ts = calloc((size_t)m->nslots, sizeof *ts);
    if (!ts) return err_set(e, "train: out of memory");
    for (int i = 0; i < m->nslots; i++) {
        const wslot *s = &m->slots[i];
        size_t numel = 1;
        ts[i].name = (char *)s->name;
        ts[i].dtype = DT_F32;
        ts[i].ndim = s->ndim;
        for (int d = 0; d < s->ndim; d++)
            ts[i].shape[d] = s->shape[d], numel *= (size_t)s->shape[d];
        ts[i].data = g->of[i];
        ts[i].nbytes = numel * sizeof(float);
    }
    int rc = write_tensors(c, "grads-000000", ts, m->nslots, e);
    free(ts);
    return rc;
}

/* ---- the run ---- */

typedef struct run_state {
    const train_cfg *c;
    model *m;
    train_pass *pass;
    train_grads g;
    adamw opt;
    int mb;                       /* prompts per pass */
    int32_t *ids, *tgt;           /* [mb, seq] */
    int32_t *eval_ids, *eval_tgt; /* [eval, seq] */
    int32_t *dump_ids, *dump_tgt; /* [steps, batch, seq] when cfg->dump */
    FILE *log;
    /* device gpu: the weights, gradients and moments live on the GPU (kernels/gpu_train.h);
     * the model's slots are brought up to date before a checkpoint */
    gpu_train *gpu;
    train_gpu_desc gdesc;
} run_state;

/* ---- the pass, the gradients and the optimiser, on the CPU or the GPU ---- */

static int run_pass(run_state *r, float wgt, int backward, double *loss, int *correct, err *e) {
    if (r->gpu)
        return gpu_train_pass(r->gpu, r->ids, r->tgt, wgt, backward, loss, correct, NULL, e);
    *loss = train_model_pass(r->m, r->pass, r->ids, r->tgt, wgt, backward ? &r->g : NULL, correct,
                             NULL);
    return 0;
}

static int run_zero_grads(run_state *r, err *e) {
    if (r->gpu) return gpu_train_zero_grads(r->gpu, e);
    train_grads_zero(&r->g);
    return 0;
}

static int run_grad_norm(run_state *r, double *gn, err *e) {
    if (r->gpu) return gpu_train_grad_norm(r->gpu, gn, e);
    double s = 0;
    for (int64_t j = 0; j < r->g.n; j++) s += (double)r->g.buf[j] * r->g.buf[j];
    *gn = sqrt(s);
    return 0;
}

/* the model's slots (and, for dump=1, r->g) as the device has them */
static int run_sync_host(run_state *r, int grads, err *e) {
    if (!r->gpu) return 0;
    if (grads) return gpu_train_download_grads(r->gpu, r->g.buf, e);
    return gpu_train_download(r->gpu, e);
}

static void run_free(run_state *r) {
    gpu_train_free(r->gpu);
    train_gpu_desc_free(&r->gdesc);
    train_pass_free(r->pass);
    train_grads_free(&r->g);
    free(r->opt.m), free(r->opt.v), free(r->ids), free(r->tgt), free(r->eval_ids),
        free(r->eval_tgt), free(r->dump_ids), free(r->dump_tgt);
    if (r->log) fclose(r->log);
}

static int dump_batches(const run_state *r, int steps, err *e) {
    const train_cfg *c = r->c;
    tensor ts[2];
    memset(ts, 0, sizeof ts);
    const char *names[2] = {"ids", "targets"};
    int32_t *data[2] = {r->dump_ids, r->dump_tgt};
    for (int i = 0; i < 2; i++) {
        ts[i].name = (char *)names[i];
        ts[i].dtype = DT_I32;
        ts[i].ndim = 3;
        ts[i].shape[0] = steps, ts[i].shape[1] = c->batch, ts[i].shape[2] = c->seq;
        ts[i].data = data[i];
        ts[i].nbytes = (size_t)steps * c->batch * c->seq * sizeof(int32_t);
    }
    return write_tensors(c, "batches", ts, 2, e);
}

/* held-out loss and accuracy, forward only */
static int evaluate(run_state *r, double *loss, double *acc, err *e) {
    const train_cfg *c = r->c;
    int correct = 0, scored = 0;
    double l = 0;
    for (int i0 = 0; i0 < c->eval; i0 += r->mb) {
        int n = c->eval - i0 < r->mb ? c->eval - i0 : r->mb;
        /* a short last group reuses the pass: pad with unscored copies of the first prompt */
        for (int b = 0; b < r->mb; b++) {
            int src = b < n ? i0 + b : i0;
            memcpy(r->ids + (size_t)b * c->seq, r->eval_ids + (size_t)src * c->seq,
                   (size_t)c->seq * sizeof(int32_t));
            for (int t = 0; t < c->seq; t++)
                r->tgt[(size_t)b * c->seq + t] = b < n ? r->eval_tgt[(size_t)src * c->seq + t] : -1;
        }
        for (int j = 0; j < r->mb * c->seq; j++) scored += r->tgt[j] >= 0;
        double pl;
        if (run_pass(r, 1.0f, 0, &pl, &correct, e)) return -1;
        l += pl;
    }
    *loss = scored ? l / scored : NAN;
    *acc = scored ? (double)correct / scored : NAN;
    return 0;
}

/* a final report that is a note (divergence, a target reached): no held-out figures */
static void report_note(const train_hooks *h, const train_cfg *c, int step, double loss, double gn,
                        double lr, double elapsed, const char *note) {
    if (!h || !h->progress) return;
    train_status st = {.step = step,
                       .steps = c->steps,
                       .loss = loss,
                       .eval_loss = NAN,
                       .acc = NAN,
                       .grad_norm = gn,
                       .lr = lr,
                       .tok_s = NAN,
                       .elapsed_s = elapsed,
                       .final = 1,
                       .note = note};
    h->progress(h->ctx, &st);
}

int train_run(const train_cfg *c, const train_hooks *hooks, model **out, train_end *how, err *e) {
    *out = NULL;
    *how = TRAIN_DONE;
    if (c->bf16 && c->gpu)
        return err_set(e, "train: precision=bf16 trains on the CPU only for now (device cpu)");
    run_state r;
    memset(&r, 0, sizeof r);
    r.c = c;
    /* the model: model random with the shape options and any further config keys */
    char kv[8][48];
    char *argv[8 + OPTS_MAX];
    int argc = 0;
    snprintf(kv[0], sizeof kv[0], "layers=%d", c->layers);
    snprintf(kv[1], sizeof kv[1], "hidden=%d", c->hidden);
    snprintf(kv[2], sizeof kv[2], "heads=%d", c->heads);
    snprintf(kv[3], sizeof kv[3], "head_dim=%d", c->head_dim);
    snprintf(kv[4], sizeof kv[4], "vocab=%d", c->vocab);
    snprintf(kv[5], sizeof kv[5], "seed=%llu", (unsigned long long)c->seed);
    for (int i = 0; i < 6; i++) argv[argc++] = kv[i];
    char extra[OPTS_MAX][160];
    if (c->model_opts)
        for (int i = 0; i < c->model_opts->n; i++) {
            snprintf(extra[i], sizeof extra[i], "%s=%s", c->model_opts->key[i],
                     c->model_opts->val[i]);
            argv[argc++] = extra[i];
        }
    opts mo;
    if (opts_parse(&mo, argc, argv, e)) return -1;
    model *m = NULL;
    int rc = model_random(&m, c->mixer, &mo, e);
    opts_free(&mo);
    if (rc) return err_prefix(e, "train");
    r.m = m;
    if (train_model_check(m, e)) goto fail;
    r.mb = c->rows / c->seq;
    if (r.mb < 1) r.mb = 1;
    if (r.mb > c->batch) r.mb = c->batch;
    if (train_grads_init(&r.g, m, e)) goto fail;
    if (c->gpu && (m->c.qk_sum_norm || m->c.family != FAM_GDN)) {
        err_set(e, "train: %s trains on the CPU only for now (device cpu)",
                m->c.qk_sum_norm ? "qk_norm=sum" : model_kind_name(m->c.kind));
        goto fail;
    }
    if (c->gpu) {
        if (train_gpu_desc_init(&r.gdesc, m, e) ||
            gpu_train_init(&r.gpu, &r.gdesc.d, r.mb, c->seq, c->chunk, e))
            goto fail;
    } else if (train_pass_init(&r.pass, m, r.mb, c->seq, c->chunk, e)) {
        goto fail;
    }
    r.opt.m = calloc((size_t)r.g.n, sizeof(float));
    r.opt.v = calloc((size_t)r.g.n, sizeof(float));
    size_t rows = (size_t)r.mb * c->seq, erows = (size_t)c->eval * c->seq;
    r.ids = malloc(rows * sizeof(int32_t)), r.tgt = malloc(rows * sizeof(int32_t));
    r.eval_ids = malloc((erows ? erows : 1) * sizeof(int32_t));
    r.eval_tgt = malloc((erows ? erows : 1) * sizeof(int32_t));
    if (!r.opt.m || !r.opt.v || !r.ids || !r.tgt || !r.eval_ids || !r.eval_tgt) {
        err_set(e, "train: out of memory");
        goto fail;
    }
    for (int i = 0; i < c->eval; i++)
        if (make_prompt(c, 1, (uint64_t)i, r.eval_ids + (size_t)i * c->seq,
                        r.eval_tgt + (size_t)i * c->seq, e))
            goto fail;
    if (c->out[0] && path_make_dirs(c->out, e)) goto fail;
    if (c->out[0]) {
        char lp[1100];
        snprintf(lp, sizeof lp, "%s/log.csv", c->out);
        r.log = fopen(lp, "w");
        if (!r.log) {
            err_set(e, "train: %s: %s", lp, strerror(errno));
            goto fail;
        }
        fprintf(r.log, "step,loss,eval_loss,accuracy,grad_norm,lr,tokens_per_s,elapsed_s\n");
        fflush(r.log);
    }
    if (c->dump && c->out[0]) {
        size_t n = (size_t)c->steps * c->batch * c->seq;
        r.dump_ids = malloc(n * sizeof(int32_t)), r.dump_tgt = malloc(n * sizeof(int32_t));
        if (!r.dump_ids || !r.dump_tgt) {
            err_set(e, "train: out of memory for dump=1 (%zu tokens)", n);
            goto fail;
        }
    }
    char where[1100], note[1300];
    if (save_step(m, c, 0, NAN, NAN, where, sizeof where, e)) goto fail;
    snprintf(m->source, sizeof m->source, "train %s task=%s", c->mixer, c->task);
    train_set_bf16(c->bf16);

    double t0 = now_s(), t_int = t0, loss = NAN;
    int tok_int = 0, step = 0;
    for (step = 0; step < c->steps; step++) {
        double lr = lr_at(c, step);
        if (run_zero_grads(&r, e)) goto fail;
        /* the batch's scored positions weigh 1/count each: the gradient of the batch mean */
        int scored = 0;
        int32_t *bids = malloc((size_t)c->batch * c->seq * sizeof(int32_t)),
                *btgt = malloc((size_t)c->batch * c->seq * sizeof(int32_t));
        if (!bids || !btgt) {
            free(bids), free(btgt);
            err_set(e, "train: out of memory");
            goto fail;
        }
        for (int b = 0; b < c->batch; b++)
            if (make_prompt(c, 0, (uint64_t)step * (uint64_t)c->batch + (uint64_t)b,
                            bids + (size_t)b * c->seq, btgt + (size_t)b * c->seq, e)) {
                free(bids), free(btgt);
                goto fail;
            }
        for (size_t j = 0; j < (size_t)c->batch * c->seq; j++) scored += btgt[j] >= 0;
        if (r.dump_ids) {
            size_t bn = (size_t)c->batch * c->seq, at = (size_t)step * bn;
            memcpy(r.dump_ids + at, bids, bn * sizeof(int32_t));
            memcpy(r.dump_tgt + at, btgt, bn * sizeof(int32_t));
        }
        float wgt = scored ? 1.0f / (float)scored : 0.0f;
        double l = 0;
        for (int b0 = 0; b0 < c->batch; b0 += r.mb) {
            int n = c->batch - b0 < r.mb ? c->batch - b0 : r.mb;
            for (int b = 0; b < r.mb; b++) {
                int src = b < n ? b0 + b : b0;
                memcpy(r.ids + (size_t)b * c->seq, bids + (size_t)src * c->seq,
                       (size_t)c->seq * sizeof(int32_t));
                for (int t = 0; t < c->seq; t++)
                    r.tgt[(size_t)b * c->seq + t] = b < n ? btgt[(size_t)src * c->seq + t] : -1;
            }
            double pl;
            if (run_pass(&r, wgt, 1, &pl, NULL, e)) {
                free(bids), free(btgt);
                goto fail;
            }
            l += pl;
        }
        free(bids), free(btgt);
        loss = l;
        double gn;
        if (run_grad_norm(&r, &gn, e)) goto fail;
        tok_int += c->batch * c->seq;
        if (step == 0 && r.dump_ids && (run_sync_host(&r, 1, e) || dump_grads(m, c, &r.g, e)))
            goto fail;
        if (!isfinite(loss) || !isfinite(gn)) {
            /* the weights that made it: a checkpoint for diagnose, then stop */
            *how = TRAIN_DIVERGED;
            if (run_sync_host(&r, 0, e) || save_step(m, c, step, loss, NAN, where, sizeof where, e))
                goto fail;
            snprintf(note, sizeof note,
                     "step %d: the %s is not finite: the run diverged%s%s; diagnose reads the "
                     "checkpoints",
                     step, isfinite(loss) ? "gradient" : "loss", c->out[0] ? ", weights in " : "",
                     c->out[0] ? where : "");
            double el = now_s() - t0;
            if (r.log)
                fprintf(r.log, "%d,%.9g,,,%.9g,%.9g,,%.3f\n", step, loss, gn, lr, el),
                    fflush(r.log);
            report_note(hooks, c, step, loss, gn, lr, el, note);
            break;
        }
        float gscale = c->clip > 0 && gn > c->clip ? (float)(c->clip / (gn + 1e-6)) : 1.0f;
        if (r.gpu) {
            if (gpu_train_adamw(r.gpu, lr, c->wd, gscale, step + 1, e)) goto fail;
        } else {
            adamw_step(&r.opt, m, &r.g, lr, c->wd, gscale);
        }
        int done = step + 1;
        int stop = hooks && hooks->stop && hooks->stop(hooks->ctx);
        int last = done == c->steps || stop;
        int ckpt = c->out[0] && ((c->every > 0 && done % c->every == 0) || last);
        int report = done % c->log_every == 0 || last;
        double el = NAN, ea = NAN;
        if ((ckpt || report) && evaluate(&r, &el, &ea, e)) goto fail;
        if (ckpt &&
            (run_sync_host(&r, 0, e) || save_step(m, c, done, loss, ea, where, sizeof where, e)))
            goto fail;
        if (ckpt || report) {
            double t = now_s();
            train_status st = {.step = done,
                               .steps = c->steps,
                               .loss = loss,
                               .eval_loss = el,
                               .acc = ea,
                               .grad_norm = gn,
                               .lr = lr,
                               .tok_s = report ? tok_int / (t - t_int) : NAN,
                               .elapsed_s = t - t0,
                               .final = last,
                               .note = NULL};
            if (ckpt) {
                snprintf(note, sizeof note, "checkpoint %s", where);
                st.note = note;
            }
            if (report && r.log) {
                fprintf(r.log, "%d,%.9g,%.9g,%.9g,%.9g,%.9g,%.1f,%.3f\n", done, loss, el, ea, gn,
                        lr, st.tok_s, st.elapsed_s);
                fflush(r.log);
            }
            if (hooks && hooks->progress) hooks->progress(hooks->ctx, &st);
            if (report) t_int = now_s(), tok_int = 0;
        }
        if (stop) {
            *how = TRAIN_STOPPED;
            break;
        }
        if (c->target > 0 && report && ea >= c->target && done < c->steps) {
            /* target=: the held-out accuracy is there; the last state is kept as it is */
            if (c->out[0] && !ckpt &&
                (run_sync_host(&r, 0, e) ||
                 save_step(m, c, done, loss, ea, where, sizeof where, e)))
                goto fail;
            snprintf(note, sizeof note, "held-out accuracy %.1f%% reached target=%g at step %d",
                     100 * ea, c->target, done);
            report_note(hooks, c, done, loss, gn, lr, now_s() - t0, note);
            step++;
            break;
        }
    }
    train_set_bf16(0);
    if (r.dump_ids && dump_batches(&r, step < c->steps ? step + 1 : c->steps, e)) goto fail;
    if (*how != TRAIN_DIVERGED && run_sync_host(&r, 0, e)) goto fail;
    if (model_refresh(m, e)) goto fail; /* Kalman's a, p from the trained weights */
    run_free(&r);
    if (set_provenance(m, c, step, loss, NAN, e)) {
        model_free(m);
        return -1;
    }
    *out = m;
    return 0;
fail:
    train_set_bf16(0);
    run_free(&r);
    model_free(m);
    return -1;
}
