/* cmd_model.c: load, save, model random / info / ranks, swap, tokens, step, run, reset, info.
 *
 * The engine (engine/engine.h) holds the model, the token ids to run, the logits of the tokens
 * run so far and the probe trace, and does the stepping; these commands parse, call it and print.
 * Anything that changes the model or the tokens sends the position back to 0. */
#include <math.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <string.h>

#include "../core/fileio.h"
#include "../core/opts.h"
#include "../core/safetensors.h"
#include "../diag/diag.h"
#include "../mixers/record.h"
#include "../mixers/tf32.h"
#include "../models/arith.h"
#include "../models/model.h"
#include "../models/ranks.h"
#include "../models/tokenizer.h"
#include "../viz/recall.h"
#include "../core/fileio.h"
#include "../tokenizer/hf.h"
#include "command.h"
#include "session.h"

/* The engine takes the model; a note when the tokens no longer fit. */
static int set_model(session *s, model *m, err *e) {
    char note[ERR_MSG_MAX + 32];
    if (engine_set_model(&s->eng, m, note, sizeof note, e)) return -1;
    if (note[0]) fprintf(s->out, "%s\n", note);
    if (s->tok && hf_vocab_size(s->tok) > m->c.vocab) { /* its ids would not fit */
        fprintf(s->out, "tokenizer dropped: %d ids for a vocabulary of %d (text is byte-level)\n",
                hf_vocab_size(s->tok), m->c.vocab);
        session_set_tokenizer(s, NULL, e);
    }
    return 0;
}

static void print_model_line(session *s, const char *verb) {
    const model *m = s->eng.model;
    /* the model's own core (layer 0 may be a hybrid model's attention layer) and those layers */
    const char *core = m->layers[0].mx->name;
    char hyb[200] = "";
    size_t o = 0;
    for (int li = m->c.layers - 1; li >= 0; li--)
        if (m->layers[li].cfg == &m->c) core = m->layers[li].mx->name;
    for (int li = 0; li < m->c.layers && o + 16 < sizeof hyb; li++)
        if (m->layers[li].cfg != &m->c)
            o += (size_t)snprintf(hyb + o, sizeof hyb - o, "%s%d", o ? "," : ", attention layers ",
                                  li);
    fprintf(s->out, "%s %s: %d layers, hidden %d, vocab %d, %s core%s, %lld parameters\n", verb,
            model_kind_name(m->c.kind), m->c.layers, m->c.hidden, m->c.vocab, core, hyb,
            (long long)model_param_count(m));
}

static int need_model(session *s, err *e) {
    if (!s->eng.model) return err_set(e, "no model (load PATH or model random MIXER first)");
    return 0;
}

/* ---- load / save / model ---- */

/* tokenizer.json in the checkpoint's folder (or beside the .safetensors file given) becomes the
 * session's tokenizer; without one, text is byte-level again. A tokenizer that cannot be used is
 * named and left out: the model is loaded either way. */
static void load_tokenizer_beside(session *s, const char *path) {
    char *tj = path_is_dir(path) ? path_join(path, "tokenizer.json")
                                 : path_sibling(path, "tokenizer.json");
    struct stat sb;
    err e = {{0}};
    if (tj && stat(tj, &sb) == 0) {
        hf_tok *t = NULL;
        if (hf_load(&t, tj, &e) || session_set_tokenizer(s, t, &e)) {
            fprintf(s->out, "tokenizer.json not used: %s (text is byte-level)\n", e.msg);
            session_set_tokenizer(s, NULL, &e);
        } else {
            fprintf(s->out, "tokenizer: %s (%d ids)\n", tj, hf_vocab_size(t));
        }
    } else if (s->tok) {
        session_set_tokenizer(s, NULL, &e);
        fprintf(s->out, "no tokenizer.json beside it: text is byte-level\n");
    }
    free(tj);
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
    print_model_line(s, "loaded");
    load_tokenizer_beside(s, argv[1]);
    return tf32 ? session_set_arith(s, 1, e) : 0;
}

const command cmd_load = {
    "load",
    "PATH [arith=fp32|tf32]",
    "load a checkpoint (config.json + model.safetensors, as fla saves them)",
    "PATH is a folder with config.json and model.safetensors (or a sharded\n"
    "model.safetensors.index.json), or a .safetensors file with config.json beside\n"
    "it.\n"
    "Model types: gated_deltanet, delta_net, gla, mamba2, transformer, parallax\n"
    "(fla's) and kaczmarz_deltanet, kalman, kata (docs/models.md). F32, BF16 and F16\n"
    "weights. A missing, extra or misshapen tensor, NaN/Inf, or a config the weights\n"
    "disagree with is refused with one line naming the tensor or key.\n"
    "arith=tf32 approximates fla's numbers on a Hopper GPU (docs/models.md: an\n"
    "approximation, 1e-5 to 4.5e-4 from them), where fla's forward computes with\n"
    "TF32 products: the delta-rule cores of gated_deltanet and\n"
    "kaczmarz_deltanet layers (unless attn_mode is fused_recurrent) and the cores of\n"
    "parallax layers. `run` then uses the chunked form for more than 64 tokens, as\n"
    "fla's layer does. Default: `set arith` (fp32, exact float32).",
    1,
    2,
    run_load,
    COMPLETE_FILE,
    "arith"};

static int run_save(session *s, int argc, char **argv, const char *rest, err *e) {
    (void)argc, (void)rest;
    if (need_model(s, e) || engine_sync_model(&s->eng, e) || model_save(s->eng.model, argv[1], e))
        return -1;
    fprintf(s->out, "saved %s to %s\n", model_kind_name(s->eng.model->c.kind), argv[1]);
    return 0;
}

const command cmd_save = {
    "save",
    "PATH",
    "write the model as fla does (PATH/config.json, PATH/model.safetensors)",
    "Writes float32 weights with fla's tensor names; `load PATH` reads them back bit\n"
    "for bit.\n"
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
    const model *m = s->eng.model;
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
        model_print_info(s->eng.model, s->out);
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
    print_model_line(s, "random");
    return 0;
}

const command cmd_model = {
    "model",
    "random MIXER [key=value ...] | info | ranks [layer=N]",
    "build a random model, describe it, or list the stable ranks of its projections",
    "  model random MIXER [layers=2 hidden=64 heads= head_dim= vocab=256 seed=0\n"
    "      KEY=VALUE ...] a model whose layers use MIXER (gdn, deltanet, kaczmarz,\n"
    "      gla, mamba2, softmax, parallax, kalman, kata), initialised as the spec\n"
    "      says, deterministic from the seed.\n"
    "      Other KEY=VALUE pairs are config.json keys (e.g. num_v_heads=4\n"
    "      use_gate=false).\n"
    "      attn=1,3 makes layers 1 and 3 softmax attention layers (a hybrid model,\n"
    "      fla's attn key), with attn_heads=4 attn_kv_heads= attn_window=\n"
    "      attn_rope_theta=10000\n"
    "  model [info]\n"
    "      type, sizes, each layer's core, and which cores a swap can use\n"
    "  model ranks [layer=N]\n"
    "      stable ranks ||M||_F^2 / ||M||_2^2 of each layer's W_Q, W_K, W_V, W_O, W_R\n"
    "      and, per head, of the circuits W_Q^T W_K, W_R^T W_K (Parallax) and W_O W_V\n"
    "      (spec B.7: the paper finds W_R far higher under Muon than AdamW). '-': the\n"
    "      layer has no such matrix.",
    0,
    -1,
    run_model,
    COMPLETE_MIXER,
    "layers hidden heads head_dim vocab seed attn attn_heads attn_kv_heads attn_window "
    "attn_rope_theta"};

/* ---- swap ---- */

static int run_swap(session *s, int argc, char **argv, const char *rest, err *e) {
    (void)rest;
    if (need_model(s, e)) return -1;
    int li = -1;
    if (strcmp(argv[1], "all") != 0) {
        char *end;
        long v = strtol(argv[1], &end, 10);
        if (*end || end == argv[1] || v < 0 || v >= s->eng.model->c.layers)
            return err_set(e, "swap: LAYER must be 0..%d or 'all', got '%.40s'",
                           s->eng.model->c.layers - 1, argv[1]);
        li = (int)v;
    }
    opts o;
    if (opts_parse(&o, argc - 3, argv + 3, e)) return -1;
    int rc = model_swap(s->eng.model, li, argv[2], &o, e);
    opts_free(&o);
    if (rc) return -1;
    if (engine_model_changed(&s->eng, e)) return -1;
    fprintf(s->out, "swapped %s%s to the %s core (position back to 0)\n",
            li < 0 ? "all layers" : "layer ", li < 0 ? "" : argv[1], argv[2]);
    return 0;
}

const command cmd_swap = {
    "swap",
    "LAYER|all MIXER [option=value ...]",
    "rerun a layer with another core on its projections",
    "Replaces the core of one layer (or all) by another that the layer's projections\n"
    "can feed: GDN-like layers (gated_deltanet, delta_net, kaczmarz_deltanet) take\n"
    "gdn, deltanet and kaczmarz; attention layers take softmax and parallax. `swap\n"
    "all kaczmarz` on a Gated DeltaNet checkpoint feeds raw keys and eta =\n"
    "sigmoid(b_proj x), so the core writes with beta = eta / (|k|^2 + eps) (spec\n"
    "§8.2). Options go to the core (eps=, chunk=, ...).\n"
    "The position goes back to 0 and the trace restarts; run again to compare on the\n"
    "same tokens.",
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
    size_t pl = strlen(argv[1]);
    int st = pl >= 12 && !strcmp(argv[1] + pl - 12, ".safetensors");
    if (!rc && st) {
        rc = tok_read_file(argv[1], name, &ids, &n, e);
    } else if (!rc) { /* a text file: through the tokenizer, or its bytes */
        char *text = NULL;
        size_t tn = 0;
        rc = file_read_all(argv[1], 64u << 20, &text, &tn, e);
        if (!rc) rc = session_encode(s, text, tn, 1, &ids, &n, e);
        if (!rc && n == 0) rc = err_set(e, "%s: no tokens (an empty file)", argv[1]);
        free(text);
    }
    if (!rc) rc = session_set_tokens(s, ids, n, e);
    opts_free(&o);
    free(ids);
    if (rc) return -1;
    fprintf(s->out, "%d tokens from %s%s\n", n, argv[1],
            st       ? ""
            : s->tok ? " (text, through the tokenizer)"
                     : " (text, byte-level)");
    return 0;
}

const command cmd_tokens = {
    "tokens",
    "FILE.safetensors [name=input_ids] | FILE.txt",
    "token ids from an integer tensor [1, T], or a text file",
    "Reads the ids to run from an integer tensor of shape [1, T] (or [T]); every id\n"
    "must lie in the model's vocabulary. Any other file is text: encoded by the\n"
    "session's tokenizer (with its special tokens), or as bytes without one. The\n"
    "position goes back to 0.",
    1,
    2,
    run_tokens,
    COMPLETE_FILE,
    "name"};
