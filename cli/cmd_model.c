/* cmd_model.c: model mode. load, save, model random, swap, tokens, prompt, step, run, reset,
 * info, and `export logits`.
 *
 * The session holds one model, the token ids to run, the logits of the tokens run so far and the
 * probe trace. Stepping records every layer's probes (mixers/record.h) at each token; `run
 * prefill` uses the mixers' parallel forms instead (same logits, no probes). Anything that changes
 * the model or the tokens sends the position back to 0. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "../core/fileio.h"
#include "../core/opts.h"
#include "../export/sha256.h"
#include "../core/safetensors.h"
#include "../diag/diag.h"
#include "../mixers/record.h"
#include "../mixers/tf32.h"
#include "../models/arith.h"
#include "../models/model.h"
#include "../models/ranks.h"
#include "../models/tokenizer.h"
#include "../viz/recall.h"
#include "command.h"
#include "session.h"

/* Prompt generators live in scenes/ (weak while they land). Contract: returns 1 when argv[1] names
 * no generator (the words are then byte-level text), 0 after setting the tokens with
 * session_set_tokens, -1 with a message. */
extern int prompt_generate(session *s, int argc, char **argv, err *e) __attribute__((weak));

void session_model_free(session *s) {
    model_free(s->model);
    free(s->tokens);
    free(s->logits);
    trace_free(&s->tr);
    s->model = NULL, s->tokens = NULL, s->logits = NULL, s->ntokens = 0, s->tr_ready = 0;
}

/* New probe schema (a new model or a swapped core). */
static void trace_restart(session *s) {
    trace_free(&s->tr);
    trace_init(&s->tr);
    s->tr_ready = 0;
}

/* Position 0 with caches sized for the tokens; the trace forgets its tokens. */
static int rewind_model(session *s, err *e) {
    trace_clear(&s->tr);
    if (!s->model) return 0;
    int cap = s->ntokens > 4096 ? s->ntokens : 4096;
    return model_reset(s->model, cap, e);
}

/* Logits storage for the current tokens and model. */
static int size_logits(session *s, err *e) {
    free(s->logits);
    s->logits = NULL;
    if (!s->model || !s->ntokens) return 0;
    size_t n = (size_t)s->ntokens * (size_t)s->model->c.vocab;
    if (!(s->logits = malloc(n * sizeof(float))))
        return err_set(e, "out of memory for the logits of %d tokens", s->ntokens);
    return 0;
}

static int set_model(session *s, model *m, err *e) {
    if (raw_leave) raw_leave(s); /* a model takes over from raw-mixer mode */
    model_free(s->model);
    s->model = m;
    trace_restart(s);
    if (s->tokens && tok_check(s->tokens, s->ntokens, m->c.vocab, e)) {
        free(s->tokens);
        s->tokens = NULL, s->ntokens = 0;
        fprintf(s->out, "tokens cleared: %s\n", e->msg);
        err_clear(e);
    }
    if (size_logits(s, e)) return -1;
    return rewind_model(s, e);
}

int session_set_tokens(session *s, const int32_t *ids, int n, err *e) {
    if (n < 1) return err_set(e, "no tokens");
    if (s->model && tok_check(ids, n, s->model->c.vocab, e)) return -1;
    int32_t *copy = malloc((size_t)n * sizeof *copy);
    if (!copy) return err_set(e, "out of memory");
    memcpy(copy, ids, (size_t)n * sizeof *copy);
    free(s->tokens);
    s->tokens = copy, s->ntokens = n;
    if (size_logits(s, e)) return -1;
    return rewind_model(s, e);
}

static void print_model_line(session *s, const char *verb) {
    const model *m = s->model;
    fprintf(s->out, "%s %s: %d layers, hidden %d, vocab %d, %s core, %lld parameters\n", verb,
            model_kind_name(m->c.kind), m->c.layers, m->c.hidden, m->c.vocab, m->layers[0].mx->name,
            (long long)model_param_count(m));
}

static int need_model(session *s, err *e) {
    if (!s->model) return err_set(e, "no model (load PATH or model random MIXER first)");
    return 0;
}

/* ---- load / save / model ---- */

/* Provenance for exports (cli/cmd_figure.c): the digest of the weights file that was loaded. */
const char *session_checkpoint_sha256(session *s) {
    return s->model && s->ckpt_sha256[0] ? s->ckpt_sha256 : NULL;
}

/* The file whose bytes are the weights: model.safetensors, else the shard index. */
static void weights_digest(const char *path, char hex[65]) {
    char *w = NULL;
    err e = {{0}};
    hex[0] = '\0';
    if (path_is_dir(path)) {
        w = path_join(path, "model.safetensors");
        FILE *f = w ? fopen(w, "rb") : NULL;
        if (f)
            fclose(f);
        else
            free(w), w = path_join(path, "model.safetensors.index.json");
    } else {
        w = strdup(path);
    }
    if (!w || sha256_file(w, hex, &e)) hex[0] = '\0';
    free(w);
}

/* fla's GPU arithmetic (tf32) or exact float32 on the model's cores (models/arith.h). */
static int apply_arith(session *s, int tf32, err *e) {
    model *m = s->model;
    int n = model_set_arith(m, tf32 ? MIXER_ARITH_TF32 : MIXER_ARITH_FP32, e);
    if (n < 0 || rewind_model(s, e)) return -1;
    if (!tf32)
        fprintf(s->out, "arith fp32: exact float32 in every core (position back to 0)\n");
    else if (n == 0)
        fprintf(s->out, "arith tf32: fla's forward of this model has no TF32 products\n");
    else
        fprintf(s->out, "arith tf32: fla's TF32 products in %d of %d layers%s\n", n, m->c.layers,
                model_arith_chunked(m) ? " (run: chunked form for more than 64 tokens, as fla)"
                                       : "");
    return 0;
}

int session_set_arith(session *s, int tf32, err *e) {
    s->set_arith = tf32;
    return s->model ? apply_arith(s, tf32, e) : 0;
}

static int run_load(session *s, int argc, char **argv, const char *rest, err *e) {
    (void)rest;
    /* arith=tf32: fla's GPU arithmetic where fla's forward has TF32 products (models/arith.h);
     * without the option, the session's `set arith` */
    opts o;
    if (opts_parse(&o, argc - 2, argv + 2, e)) return -1;
    const char *a = opts_str(&o, "arith", s->set_arith ? "tf32" : "fp32");
    int tf32 = !strcmp(a, "tf32"), rc = opts_check_unused(&o, e);
    if (!rc && !tf32 && strcmp(a, "fp32"))
        rc = err_set(e, "load: arith=%.20s: must be fp32 or tf32", a);
    opts_free(&o);
    if (rc) return -1;
    model *m;
    if (model_load(&m, argv[1], e)) return -1;
    if (set_model(s, m, e)) return -1;
    weights_digest(argv[1], s->ckpt_sha256);
    print_model_line(s, "loaded");
    return tf32 ? apply_arith(s, 1, e) : 0;
}

const command cmd_load = {
    "load",
    "PATH [arith=fp32|tf32]",
    "load a checkpoint (config.json + model.safetensors, as fla saves them)",
    "PATH is a folder with config.json and model.safetensors (or a sharded\n"
    "model.safetensors.index.json), or a .safetensors file with config.json beside it.\n"
    "Model types: gated_deltanet, delta_net, gla, mamba2, transformer, parallax (fla's) and\n"
    "kaczmarz_deltanet, kalman, kata (docs/models.md). F32, BF16 and F16 weights. A missing,\n"
    "extra or misshapen tensor, NaN/Inf, or a config the weights disagree with is refused with\n"
    "one line naming the tensor or key.\n"
    "arith=tf32 reproduces fla's numbers on a Hopper GPU, where fla's forward computes with TF32\n"
    "products: the delta-rule cores of gated_deltanet and kaczmarz_deltanet layers (unless\n"
    "attn_mode is fused_recurrent) and the cores of parallax layers. `run` then uses the\n"
    "chunked form for more than 64 tokens, as fla's layer does. Default: `set arith` (fp32, exact\n"
    "float32).",
    1,
    2,
    run_load,
    COMPLETE_FILE,
    "arith"};

static int run_save(session *s, int argc, char **argv, const char *rest, err *e) {
    (void)argc, (void)rest;
    if (need_model(s, e) || model_save(s->model, argv[1], e)) return -1;
    fprintf(s->out, "saved %s to %s\n", model_kind_name(s->model->c.kind), argv[1]);
    return 0;
}

const command cmd_save = {
    "save",
    "PATH",
    "write the model as fla does (PATH/config.json, PATH/model.safetensors)",
    "Writes float32 weights with fla's tensor names; `load PATH` reads them back bit for bit.\n"
    "A swapped core is not part of the checkpoint (the projections are).",
    1,
    1,
    run_save,
    COMPLETE_FILE,
    NULL};

static void print_rank(FILE *f, double v) {
    if (isfinite(v))
        fprintf(f, " %7.2f", v);
    else
        fprintf(f, " %7s", "-");
}

static void print_circuit(FILE *f, const double *c, int last) {
    char buf[40];
    if (isfinite(c[0]))
        snprintf(buf, sizeof buf, "%.2f [%.2f, %.2f]", c[0], c[1], c[2]);
    else
        snprintf(buf, sizeof buf, "-");
    fprintf(f, last ? "  %s\n" : "  %-21s", buf);
}

/* model ranks [layer=N]: the stable ranks of models/ranks.h, a row per layer (printed as each is
 * done: large layers take a moment) */
static int model_ranks(session *s, int argc, char **argv, err *e) {
    if (need_model(s, e)) return -1;
    opts o;
    if (opts_parse(&o, argc - 2, argv + 2, e)) return -1;
    long only = -1;
    int rc = opts_int(&o, "layer", -1, &only, e) || opts_check_unused(&o, e);
    opts_free(&o);
    if (rc) return -1;
    const model *m = s->model;
    if (only >= m->c.layers)
        return err_set(e, "model ranks: layer %ld out of range (%d layers)", only, m->c.layers);
    fprintf(s->out,
            "stable ranks ||M||_F^2 / ||M||_2^2 (spec B.7); circuits per head: mean [min, max]\n"
            "layer  core       %7s %7s %7s %7s %7s  %-21s  %-21s  %s\n",
            "W_Q", "W_K", "W_V", "W_O", "W_R", "W_QK = W_Q^T W_K", "W_RK = W_R^T W_K",
            "W_OV = W_O W_V");
    for (int li = 0; li < m->c.layers; li++) {
        if (only >= 0 && li != only) continue;
        layer_ranks r;
        if (model_layer_ranks(m, li, &r, e)) return -1;
        fprintf(s->out, "%5d  %-10s", li, m->layers[li].mx->name);
        print_rank(s->out, r.wq), print_rank(s->out, r.wk), print_rank(s->out, r.wv);
        print_rank(s->out, r.wo), print_rank(s->out, r.wr);
        print_circuit(s->out, r.qk, 0), print_circuit(s->out, r.rk, 0);
        print_circuit(s->out, r.ov, 1);
        fflush(s->out);
    }
    return 0;
}

static int run_model(session *s, int argc, char **argv, const char *rest, err *e) {
    (void)rest;
    if (argc == 1 || (argc == 2 && strcmp(argv[1], "info") == 0)) {
        if (need_model(s, e)) return -1;
        model_print_info(s->model, s->out);
        return 0;
    }
    if (strcmp(argv[1], "ranks") == 0) return model_ranks(s, argc, argv, e);
    if (strcmp(argv[1], "random") != 0)
        return err_set(e,
                       "model: expected 'random MIXER [key=value ...]', 'info' or 'ranks', got "
                       "'%.40s'",
                       argv[1]);
    if (argc < 3)
        return err_set(e, "usage: model random MIXER [layers= hidden= heads= head_dim= "
                          "vocab= seed= KEY=VALUE ...]");
    opts o;
    if (opts_parse(&o, argc - 3, argv + 3, e)) return -1;
    model *m;
    int rc = model_random(&m, argv[2], &o, e);
    opts_free(&o);
    if (rc || set_model(s, m, e)) return -1;
    s->ckpt_sha256[0] = '\0';
    print_model_line(s, "random");
    return 0;
}

const command cmd_model = {
    "model",
    "random MIXER [key=value ...] | info | ranks [layer=N]",
    "build a random model, describe it, or list the stable ranks of its projections",
    "  model random MIXER [layers=2 hidden=64 heads= head_dim= vocab=256 seed=0 KEY=VALUE ...]\n"
    "      a model whose layers use MIXER (gdn, deltanet, kaczmarz, gla, mamba2, softmax,\n"
    "      parallax, kalman, kata), initialised as the spec says, deterministic from the seed.\n"
    "      Other KEY=VALUE pairs are config.json keys (e.g. num_v_heads=4 use_gate=false).\n"
    "  model [info]\n"
    "      type, sizes, each layer's core, and which cores a swap can use\n"
    "  model ranks [layer=N]\n"
    "      stable ranks ||M||_F^2 / ||M||_2^2 of each layer's W_Q, W_K, W_V, W_O, W_R and, per\n"
    "      head, of the circuits W_Q^T W_K, W_R^T W_K (Parallax) and W_O W_V (spec B.7: the\n"
    "      paper finds W_R far higher under Muon than AdamW). '-': the layer has no such matrix.",
    0,
    -1,
    run_model,
    COMPLETE_MIXER,
    "layers hidden heads head_dim vocab seed"};

/* ---- swap ---- */

static int run_swap(session *s, int argc, char **argv, const char *rest, err *e) {
    (void)rest;
    if (need_model(s, e)) return -1;
    int li = -1;
    if (strcmp(argv[1], "all") != 0) {
        char *end;
        long v = strtol(argv[1], &end, 10);
        if (*end || end == argv[1] || v < 0 || v >= s->model->c.layers)
            return err_set(e, "swap: LAYER must be 0..%d or 'all', got '%.40s'",
                           s->model->c.layers - 1, argv[1]);
        li = (int)v;
    }
    opts o;
    if (opts_parse(&o, argc - 3, argv + 3, e)) return -1;
    int rc = model_swap(s->model, li, argv[2], &o, e);
    opts_free(&o);
    if (rc) return -1;
    trace_restart(s);
    if (rewind_model(s, e)) return -1;
    fprintf(s->out, "swapped %s%s to the %s core (position back to 0)\n",
            li < 0 ? "all layers" : "layer ", li < 0 ? "" : argv[1], argv[2]);
    return 0;
}

const command cmd_swap = {
    "swap",
    "LAYER|all MIXER [option=value ...]",
    "rerun a layer with another core on its projections",
    "Replaces the core of one layer (or all) by another that the layer's projections can feed:\n"
    "GDN-like layers (gated_deltanet, delta_net, kaczmarz_deltanet) take gdn, deltanet and\n"
    "kaczmarz; attention layers take softmax and parallax. `swap all kaczmarz` on a Gated\n"
    "DeltaNet checkpoint feeds raw keys and eta = sigmoid(b_proj x), so the core writes with\n"
    "beta = eta / (|k|^2 + eps) (spec §8.2). Options go to the core (eps=, chunk=, ...).\n"
    "The position goes back to 0 and the trace restarts; run again to compare on the same tokens.",
    2,
    -1,
    run_swap,
    COMPLETE_MIXER,
    NULL};

/* ---- tokens / prompt ---- */

static int run_tokens(session *s, int argc, char **argv, const char *rest, err *e) {
    (void)rest;
    opts o;
    if (opts_parse(&o, argc - 2, argv + 2, e)) return -1;
    const char *name = opts_str(&o, "name", "input_ids");
    int32_t *ids = NULL;
    int n = 0;
    int rc = opts_check_unused(&o, e);
    if (!rc) rc = tok_read_file(argv[1], name, &ids, &n, e);
    if (!rc) rc = session_set_tokens(s, ids, n, e);
    opts_free(&o);
    free(ids);
    if (rc) return -1;
    fprintf(s->out, "%d tokens from %s\n", n, argv[1]);
    return 0;
}

const command cmd_tokens = {
    "tokens",
    "FILE.safetensors [name=input_ids]",
    "token ids from an integer tensor [1, T]",
    "Reads the ids to run from an integer tensor of shape [1, T] (or [T]); every id must lie in\n"
    "the model's vocabulary. The position goes back to 0.",
    1,
    2,
    run_tokens,
    COMPLETE_FILE,
    "name"};

static int run_prompt(session *s, int argc, char **argv, const char *rest, err *e) {
    if (prompt_generate) {
        int r = prompt_generate(s, argc, argv, e);
        if (r <= 0) return r;
        err_clear(e);
    }
    /* byte-level text: one word as given (quotes removed), or the raw rest of the line */
    const char *text = argc == 2 ? argv[1] : rest;
    if (s->model && tok_bytes_servable(s->model->c.vocab, e)) return -1;
    size_t n = strlen(text);
    if (n == 0) return err_set(e, "prompt: empty text");
    if (n > (1u << 24)) return err_set(e, "prompt: text longer than 16 MiB");
    int32_t *ids = malloc(n * sizeof *ids);
    if (!ids) return err_set(e, "out of memory");
    int k = tok_bytes_encode(text, ids);
    int rc = session_set_tokens(s, ids, k, e);
    free(ids);
    if (rc) return -1;
    fprintf(s->out, "%d byte tokens\n", k);
    return 0;
}

const command cmd_prompt = {
    "prompt",
    "TEXT | GENERATOR [key=value ...]",
    "byte-level text, or a generated task prompt",
    "`prompt TEXT` runs the bytes of TEXT (UTF-8) as tokens: it needs a model whose vocabulary is\n"
    "the 256 bytes. `prompt GENERATOR ...` asks the task generators of scenes/ (when built in)\n"
    "for a prompt with their own vocabulary. The position goes back to 0.",
    1,
    -1,
    run_prompt,
    COMPLETE_GENERATOR,
    NULL};

/* ---- step / run / reset ---- */

static int need_tokens(session *s, err *e) {
    if (need_model(s, e)) return -1;
    if (!s->tokens) return err_set(e, "no tokens (tokens FILE or prompt TEXT first)");
    return 0;
}

/* argmax and its probability */
static int top1(const float *l, int V, float *p) {
    int b = 0;
    double mx = l[0], z = 0;
    for (int i = 1; i < V; i++)
        if (l[i] > mx) mx = l[i], b = i;
    for (int i = 0; i < V; i++) z += exp((double)l[i] - mx);
    *p = (float)(1.0 / z);
    return b;
}

/* What the recall and KATA views need beyond the probes: each layer's key and value as its core
 * saw them ("k", "v") and, for states read as S^T q ([H, dk, dv] key-major: the delta family,
 * GLA, Mamba2), how well the state after the token reads back the last RECALL_WINDOW keys'
 * values ("recall"). The readback costs RECALL_WINDOW dk dv per head and token, more than the
 * model itself, so it is taken for the first RECALL_MAX_TOKENS tokens only. */
#define RECALL_MAX_TOKENS 1024

typedef struct recall_ctx {
    session *s;
    err e;
    int failed;
    diag_nf nf; /* the first NaN / Inf (diag/nonfinite.c): step and run stop there */
} recall_ctx;

static void record_layer(void *ctx, const model *m, int li, const mixer_tok *in,
                         const float *state) {
    recall_ctx *rc = ctx;
    const layer *L = &m->layers[li];
    diag_nf_scan_layer(&rc->nf, m, li, in, state);
    if (rc->s->set_lla > 0)
        probe_record_lla(&rc->s->tr, L->mx, &L->mc, state, in, m->pos, li, rc->s->set_lla);
    if (rc->failed || !in->in[IN_K] || !in->in[IN_V]) return;
    state_part parts[MIXER_MAX_STATE_PARTS];
    int np = L->mx->state_parts ? L->mx->state_parts(&L->mc, parts) : 0, keymajor = 0;
    for (int i = 0; i < np; i++)
        if (!strcmp(parts[i].name, "hT") && parts[i].ndim == 3 && parts[i].shape[1] == L->mc.dk &&
            parts[i].shape[2] == L->mc.dv)
            keymajor = 1, state += parts[i].offset;
    if (m->pos >= RECALL_MAX_TOKENS) keymajor = 0;
    int r = keymajor ? recall_record(&rc->s->tr, m->c.layers, li, L->mc.H, L->mc.dk, L->mc.dv,
                                     in->in[IN_K], in->in[IN_V], state, m->pos, &rc->e)
                     : recall_record_kv(&rc->s->tr, m->c.layers, li, L->mc.H, L->mc.dk, L->mc.dv,
                                        in->in[IN_K], in->in[IN_V], m->pos, &rc->e);
    if (r) rc->failed = 1;
}

/* Steps n tokens recording probes. quiet: no per-token lines. */
static int step_tokens(session *s, int n, int quiet, err *e) {
    model *m = s->model;
    int V = m->c.vocab;
    if (!s->tr_ready) {
        if (model_register_probes(m, &s->tr, e)) return -1;
        s->tr_ready = 1;
    }
    for (int li = 0; s->set_lla > 0 && li < m->c.layers; li++)
        if (probe_register_lla(&s->tr, m->layers[li].mx, &m->layers[li].mc, m->c.layers, e))
            return -1;
    for (int i = 0; i < n; i++) {
        if (session_interrupted(s)) return err_set(e, "interrupted at token %d", m->pos);
        int pos = m->pos;
        if (s->tr.T != pos) trace_clear(&s->tr); /* keep the trace aligned with the model */
        while (s->tr.T < pos)
            if (trace_push_token(&s->tr, e) < 0) return -1;
        if (trace_push_token(&s->tr, e) < 0) return -1;
        float *lg = s->logits + (size_t)pos * V;
        m->gpu = s->device == DEVICE_GPU;
        recall_ctx rc = {.s = s};
        diag_nf_clear(&rc.nf);
        m->layer_hook = record_layer, m->layer_hook_ctx = &rc;
        int r = model_step(m, s->tokens[pos], lg, &s->tr, e);
        m->layer_hook = NULL, m->layer_hook_ctx = NULL;
        if (r) return -1;
        if (rc.failed) return err_set(e, "%s", rc.e.msg);
        if (diag_nf_scan_end(&rc.nf, m, lg)) {
            char b[ERR_MSG_MAX];
            return err_set(e, "stopped after token %d: %s", pos,
                           diag_nf_message(&rc.nf, b, sizeof b));
        }
        if (session_progress) session_progress(s, i + 1, n);
        if (!quiet) {
            float p;
            char a[16], b[16];
            int t = top1(lg, V, &p);
            fprintf(s->out, "token %d %s -> %s p=%.3f\n", pos,
                    tok_show(s->tokens[pos], a, sizeof a), tok_show(t, b, sizeof b), p);
        }
    }
    return 0;
}

/* Mean negative log-likelihood of the next token over positions [0, pos - 1). */
static double mean_nll(const session *s, int pos) {
    int V = s->model->c.vocab;
    double sum = 0;
    for (int t = 0; t + 1 < pos; t++) {
        const float *l = s->logits + (size_t)t * V;
        double mx = l[0], z = 0;
        for (int i = 1; i < V; i++) mx = l[i] > mx ? l[i] : mx;
        for (int i = 0; i < V; i++) z += exp((double)l[i] - mx);
        sum += mx + log(z) - l[s->tokens[t + 1]];
    }
    return pos > 1 ? sum / (pos - 1) : NAN;
}

/* step's optional N (default 1), in model and raw mode alike */
static int step_count(int argc, char **argv, long *n, err *e) {
    *n = 1;
    if (argc == 2) {
        char *end;
        *n = strtol(argv[1], &end, 10);
        if (*end || end == argv[1] || *n < 1)
            return err_set(e, "step: N must be a positive integer");
    }
    return 0;
}

static int run_step(session *s, int argc, char **argv, const char *rest, err *e) {
    (void)rest;
    long n;
    if (raw_active && raw_active(s)) /* cli/cmd_stream.c */
        return step_count(argc, argv, &n, e) ? -1 : raw_step(s, n, e);
    if (need_tokens(s, e) || step_count(argc, argv, &n, e)) return -1;
    int left = s->ntokens - s->model->pos;
    if (left <= 0) return err_set(e, "all %d tokens have run (reset to start again)", s->ntokens);
    if (n > left) n = left;
    return step_tokens(s, (int)n, 0, e);
}

const command cmd_step = {
    "step",
    "[N]",
    "advance N tokens (default 1), recording every probe",
    "Runs the next N tokens through the model one at a time with each core's step, recording\n"
    "every layer's probes; prints the top next-token prediction of each.",
    0,
    1,
    run_step,
    0,
    NULL};

static int run_run(session *s, int argc, char **argv, const char *rest, err *e) {
    (void)rest;
    if (raw_active && raw_active(s)) return raw_run(s, argc, argv, e);
    if (need_tokens(s, e)) return -1;
    int prefill = argc == 2 && strcmp(argv[1], "prefill") == 0;
    if (argc == 2 && !prefill) return err_set(e, "run: expected nothing or 'prefill'");
    model *m = s->model;
    int from = m->pos, left = s->ntokens - from;
    if (left <= 0) return err_set(e, "all %d tokens have run (reset to start again)", s->ntokens);
    m->gpu = s->device == DEVICE_GPU;
    /* a delta-rule core with arith=tf32 (load ... arith=tf32): fla's layer runs its chunk kernels
     * for more than 64 tokens and its exact recurrent kernel otherwise; run follows it */
    int chunked = argc == 1 && left > 64 && model_arith_chunked(m);
    if (prefill || chunked) {
        if (model_prefill(m, s->tokens + from, left, s->logits + (size_t)from * m->c.vocab, e))
            return -1;
    } else if (step_tokens(s, left, 1, e)) {
        return -1;
    }
    fprintf(s->out, "ran tokens %d..%d (%s), next-token loss %.4f nats\n", from, m->pos - 1,
            prefill   ? "prefill, no probes"
            : chunked ? "prefill as fla's chunk mode under arith=tf32, no probes"
                      : "step",
            mean_nll(s, m->pos));
    return 0;
}

const command cmd_run = {
    "run",
    "[prefill]",
    "run every remaining token",
    "Steps every remaining token, recording probes. `run prefill` uses the cores' parallel forms\n"
    "instead: the same logits (to rounding), no probes. After `load PATH arith=tf32` on a\n"
    "delta-rule model, more than 64 remaining tokens run as prefill (fla's chunk mode).",
    0,
    1,
    run_run,
    0,
    NULL};

static int run_reset(session *s, int argc, char **argv, const char *rest, err *e) {
    (void)argc, (void)argv, (void)rest;
    if (raw_active && raw_active(s)) return raw_reset(s, e);
    if (need_model(s, e) || rewind_model(s, e)) return -1;
    fprintf(s->out, "position 0\n");
    return 0;
}

const command cmd_reset = {"reset",   "", "back to the first token (states and caches cleared)",
                           NULL,      0,  0,
                           run_reset, 0,  NULL};

static int run_info(session *s, int argc, char **argv, const char *rest, err *e) {
    (void)argc, (void)argv, (void)rest, (void)e;
    fprintf(s->out, "device: %s\n", s->device == DEVICE_GPU ? "gpu" : "cpu");
    if (s->model)
        model_print_info(s->model, s->out);
    else
        fprintf(s->out, "model: none\n");
    fprintf(s->out, "tokens: %d\n", s->ntokens);
    fprintf(s->out, "trace: %lld tokens, %d probe series\n", (long long)s->tr.T, s->tr.nseries);
    if (raw_info) raw_info(s); /* raw-mixer mode, task, memory (cli/cmd_stream.c) */
    return 0;
}

const command cmd_info = {"info", "",  "what is loaded: model, tokens, trace", NULL, 0, 0, run_info,
                          0,      NULL};

/* ---- export logits ---- */

int export_logits(session *s, int argc, char **argv, err *e) {
    if (argc != 2) return err_set(e, "usage: export logits FILE.safetensors");
    if (need_model(s, e)) return -1;
    int T = s->model->pos, V = s->model->c.vocab;
    if (T == 0 || !s->logits) return err_set(e, "export logits: no tokens have run yet");
    int64_t ls[3] = {1, T, V}, is[2] = {1, T};
    tensor lt = {.name = "logits",
                 .dtype = DT_F32,
                 .ndim = 3,
                 .data = s->logits,
                 .nbytes = (size_t)T * V * sizeof(float)};
    tensor it = {.name = "input_ids",
                 .dtype = DT_I32,
                 .ndim = 2,
                 .data = s->tokens,
                 .nbytes = (size_t)T * sizeof(int32_t)};
    memcpy(lt.shape, ls, sizeof ls), memcpy(it.shape, is, sizeof is);
    const tensor *ts[2] = {&lt, &it};
    /* provenance: where the model came from and the command that wrote the file */
    char md[1400], src[600], cmd[600];
    size_t o = 0;
    for (const char *p = s->model->source; *p && o + 2 < sizeof src; p++) {
        if (*p == '"' || *p == '\\') src[o++] = '\\';
        src[o++] = (char)((unsigned char)*p < 32 ? ' ' : *p);
    }
    src[o] = '\0', o = 0;
    for (const char *p = s->current_command ? s->current_command : ""; *p && o + 2 < sizeof cmd;
         p++) {
        if (*p == '"' || *p == '\\') cmd[o++] = '\\';
        cmd[o++] = (char)((unsigned char)*p < 32 ? ' ' : *p);
    }
    cmd[o] = '\0';
    snprintf(md, sizeof md, "{\"source\":\"mixscope\",\"model\":\"%s\",\"command\":\"%s\"}", src,
             cmd);
    if (st_write(argv[1], ts, 2, md, e)) return -1;
    fprintf(s->out, "wrote logits [1, %d, %d] to %s\n", T, V, argv[1]);
    return 0;
}
