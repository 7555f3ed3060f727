/* cmd_diagnose.c: `diagnose` (diag/): unstable runs, precision, CPU against GPU.
 *
 *   diagnose PATH [prompt=TEXT] [len=512] [seed=0] [csv=FILE] [png=FILE]
 *       one checkpoint or a run's folder of them, by step: figures per layer and head, findings
 *   diagnose [csv=FILE] [png=FILE]
 *       the session: the probes recorded so far (model or raw mixer)
 *   diagnose precision [threshold=1e-2] [tokens=N] [png=FILE]
 *       the session's model over its tokens with the state in fp32, bf16, fp16 and bf16 inputs
 *   diagnose device [tol=1e-4] [tokens=N] [mode=step|prefill]
 *       the same input on the CPU and the GPU (`compare device` calls this too) */
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "../diag/diag.h"
#include "../export/png.h"
#include "../kernels/gpu.h"
#include "../models/model.h"
#include "../scenes/raw.h"
#include "../viz/view.h"
#include "../core/fileio.h"
#include "../models/tokenizer.h"
#include "../tokenizer/hf.h"
#include "command.h"
#include "session.h"

/* The command line, for provenance in the CSV and PNG. */
static void command_text(session *s, int argc, char **argv, char *buf, size_t n) {
    if (s->current_command && *s->current_command) {
        snprintf(buf, n, "%s", s->current_command);
        return;
    }
    buf[0] = '\0';
    for (int i = 0; i < argc; i++) {
        size_t u = strlen(buf);
        snprintf(buf + u, n - u, "%s%s", i ? " " : "", argv[i]);
    }
}

static int write_outputs(session *s, const diag_report *r, const char *csv, const char *png,
                         const char *cmd, err *e) {
    if (csv) {
        if (diag_report_csv(r, csv, cmd, e)) return -1;
        fprintf(s->out, "wrote %s\n", csv);
    }
    if (png) {
        if (diag_report_png(r, png, cmd, e)) return -1;
        fprintf(s->out, "wrote %s\n", png);
    }
    return 0;
}

/* ---- the session ---- */

static int diagnose_session(session *s, opts *o, const char *cmd, err *e) {
    const char *csv = opts_str(o, "csv", NULL), *png = opts_str(o, "png", NULL);
    if (opts_check_unused(o, e)) return -1;
    int raw = engine_raw_active(&s->eng);
    if (!raw && !s->eng.model)
        return err_set(e, "diagnose: nothing to diagnose (give a checkpoint PATH, or load a model "
                          "or select a mixer and run some tokens)");
    if (s->eng.tr.T == 0)
        return err_set(e, "diagnose: no tokens have run yet (step or run first, or diagnose PATH)");
    int layers = raw ? s->eng.raw->nl : s->eng.model->c.layers, H = 1;
    const mixer_ops **mx = malloc((size_t)layers * sizeof *mx);
    if (!mx) return err_set(e, "out of memory");
    for (int l = 0; l < layers; l++) {
        mx[l] = raw ? s->eng.raw->lane[l].m : s->eng.model->layers[l].mx;
        int h = raw ? s->eng.raw->H : s->eng.model->layers[l].mc.H;
        if (h > H) H = h;
    }
    diag_report r = {0};
    diag_ckpt ck;
    memset(&ck, 0, sizeof ck);
    r.n = 1, r.ck = &ck;
    int rc = diag_ckpt_alloc(&ck, layers, H, e);
    if (!rc) {
        snprintf(ck.label, sizeof ck.label, "%s", raw ? "raw mixer session" : "session model");
        snprintf(ck.kind, sizeof ck.kind, "%s",
                 raw ? "raw mixers" : model_kind_name(s->eng.model->c.kind));
        for (int l = 0; l < layers; l++) {
            if (raw)
                snprintf(ck.mixer[l], sizeof ck.mixer[l], "%s", s->eng.raw->lane[l].label);
            else
                snprintf(ck.mixer[l], sizeof ck.mixer[l], "%s", mx[l]->name);
        }
        ck.step = -1, ck.T = (int)s->eng.tr.T, ck.ok = 1;
        snprintf(r.prompt_desc, sizeof r.prompt_desc, "the %d tokens run in this session",
                 (int)s->eng.tr.T);
        diag_nf_from_trace(&ck.nf, &s->eng.tr, mx);
        diag_figures_from_trace(&ck, &s->eng.tr, mx);
        if (!raw) diag_figures_from_weights(&ck, s->eng.model);
        diag_findings(&ck, &s->eng.tr, mx);
        diag_report_print(&r, s->out);
        rc = write_outputs(s, &r, csv, png, cmd, e);
    }
    diag_ckpt_free(&ck);
    free(mx);
    return rc;
}

/* ---- checkpoints ---- */

/* tokens= of diagnose PATH: a .safetensors file of ids, a text file, or the text itself; text goes
 * through the session's tokenizer, else the tokenizer.json beside the checkpoint, else bytes. */
static int tokens_from(session *s, const char *v, const char *path, int32_t **ids, int *n, err *e) {
    size_t vl = strlen(v);
    if (vl > 12 && !strcmp(v + vl - 12, ".safetensors"))
        return tok_read_file(v, "input_ids", ids, n, e);
    char *text = NULL;
    size_t tn = vl;
    struct stat sb;
    if (stat(v, &sb) == 0 && S_ISREG(sb.st_mode)) {
        if (file_read_all(v, 64u << 20, &text, &tn, e)) return -1;
    }
    const char *src = text ? text : v;
    int rc;
    if (s->tok) {
        rc = hf_encode(s->tok, src, tn, 1, ids, n, e);
    } else {
        hf_tok *t = NULL;
        char *tj = path_is_dir(path) ? path_join(path, "tokenizer.json")
                                     : path_sibling(path, "tokenizer.json");
        err ignore = {{0}};
        if (tj && stat(tj, &sb) == 0 && hf_load(&t, tj, &ignore) == 0) {
            rc = hf_encode(t, src, tn, 1, ids, n, e);
            hf_free(t);
        } else {
            int32_t *b = malloc((tn ? tn : 1) * sizeof *b);
            rc = b ? 0 : err_set(e, "out of memory");
            for (size_t i = 0; b && i < tn; i++) b[i] = (unsigned char)src[i];
            *ids = b, *n = (int)tn;
        }
        free(tj);
    }
    free(text);
    if (!rc && *n == 0) rc = err_set(e, "no tokens");
    return rc;
}

static int diagnose_path(session *s, const char *path, opts *o, const char *cmd, err *e) {
    size_t pl = strlen(path);
    if (pl > 12 && !strcmp(path + pl - 12, ".safetensors")) {
        char line[16];
        int has = diag_inputs_replay_line(path, line, sizeof line, e);
        if (has < 0) return -1;
        if (has) { /* a core's inputs from export inputs: step against the parallel form */
            double tol;
            if (opts_float(o, "tol", 1e-4, &tol, e) || opts_check_unused(o, e)) return -1;
            if (!(tol > 0)) return err_set(e, "diagnose: tol must be > 0");
            return diag_inputs(s->out, path, tol, e);
        }
    }
    long len, seed;
    diag_options dopt = {0};
    if (opts_int(o, "len", 512, &len, e) || opts_int(o, "seed", 0, &seed, e)) return -1;
    if (len < 1 || len > (1 << 20)) return err_set(e, "diagnose: len=%ld must lie in 1..2^20", len);
    dopt.len = (int)len, dopt.seed = (uint64_t)seed, dopt.prompt = opts_str(o, "prompt", NULL);
    if (dopt.prompt && !*dopt.prompt) return err_set(e, "diagnose: prompt= is empty");
    const char *tv = opts_str(o, "tokens", NULL);
    int32_t *tids = NULL;
    if (tv) { /* a file (safetensors ids, or text) or the text itself, through the tokenizer */
        if (!*tv) return err_set(e, "diagnose: tokens= is empty");
        if (dopt.prompt) return err_set(e, "diagnose: tokens= or prompt=, not both");
        if (tokens_from(s, tv, path, &tids, &dopt.nids, e))
            return err_prefix(e, "diagnose: tokens=");
        dopt.ids = tids;
    }
    const char *csv = opts_str(o, "csv", NULL), *png = opts_str(o, "png", NULL);
    if (opts_check_unused(o, e)) return -1;
    diag_report r;
    int run = diag_run_path(&r, path, &dopt, s->interactive ? stderr : NULL, e);
    free(tids);
    if (run) return -1;
    diag_report_print(&r, s->out);
    int rc = write_outputs(s, &r, csv, png, cmd, e), ok = 0;
    for (int i = 0; i < r.n; i++) ok += r.ck[i].ok;
    if (!rc && ok == 0)
        rc = err_set(e, "diagnose: none of the %d checkpoint%s under %s could be run", r.n,
                     r.n == 1 ? "" : "s", path);
    diag_report_free(&r);
    return rc;
}

/* ---- precision ---- */

static int diagnose_precision(session *s, opts *o, err *e) {
    double thr;
    long ntok;
    if (opts_float(o, "threshold", 1e-2, &thr, e) || opts_int(o, "tokens", 0, &ntok, e)) return -1;
    const char *png = opts_str(o, "png", NULL);
    if (opts_check_unused(o, e)) return -1;
    if (!(thr > 0)) return err_set(e, "diagnose precision: threshold must be > 0");
    if (!s->eng.model)
        return err_set(e, "diagnose precision: no model (load PATH or model random)");
    if (!s->eng.tokens) return err_set(e, "diagnose precision: no tokens (prompt or tokens first)");
    int T = ntok > 0 && ntok < s->eng.ntokens ? (int)ntok : s->eng.ntokens;
    model *m = s->eng.model;
    if (T > m->max_t && model_reset(m, T, e)) return -1;
    if (!s->eng.tr_ready) {
        if (model_register_probes(m, &s->eng.tr, e)) return -1;
        s->eng.tr_ready = 1;
    }
    diag_prec r;
    if (diag_precision_run(m, s->eng.tokens, T, thr, &s->eng.tr, s->eng.logits, &r, e)) return -1;
    int rc = diag_precision_record(&r, &s->eng.tr, e);
    if (!rc) {
        diag_precision_print(&r, s->out);
        fprintf(s->out,
                "(recorded as series prec_bf16_state, prec_fp16_state, prec_bf16_inputs "
                "and prec_logits; the model is at token %d)\n",
                m->pos);
    }
    if (!rc && png) {
        canvas c;
        view_params p;
        view_params_default(&p);
        rc = canvas_init(&c, 1280, 800, e);
        if (!rc) {
            rc = view_precision.draw(&c, &s->eng.tr, &p, e);
            char cmd[512];
            snprintf(cmd, sizeof cmd, "%s", s->current_command ? s->current_command : "");
            png_text text[] = {{"Software", "mixscope diagnose precision"},
                               {"Command", cmd},
                               {"View", "precision"}};
            if (!rc) rc = png_write(png, &c, text, 3, e);
            canvas_free(&c);
            if (!rc) fprintf(s->out, "wrote %s\n", png);
        }
    }
    diag_precision_free(&r);
    return rc;
}

/* ---- CPU against GPU ---- */

static void print_device(session *s, const diag_device *r, const char *what) {
    fprintf(s->out, "compare device (%s, %d tokens, tolerance %g): ", what, r->T, r->tol);
    if (r->first < 0) {
        fprintf(s->out,
                "CPU and GPU agree on every token (max relative difference %.3g at token "
                "%lld)\n",
                r->max_err, (long long)r->max_token);
        return;
    }
    fprintf(s->out, "first disagreement at token %lld: relative difference %.3g",
            (long long)r->first, r->first_err);
    if (r->first_layer >= 0)
        fprintf(s->out, " (first seen in layer %d, head %d)", r->first_layer, r->first_head);
    else if (r->first_head >= 0)
        fprintf(s->out, " (head %d)", r->first_head);
    fprintf(s->out, "; max %.3g at token %lld\n", r->max_err, (long long)r->max_token);
}

int diag_compare_device(session *s, int argc, char **argv, err *e) {
    opts o;
    if (opts_parse(&o, argc, argv, e)) return -1;
    double tol;
    long ntok;
    int rc = opts_float(&o, "tol", 1e-4, &tol, e) || opts_int(&o, "tokens", 0, &ntok, e) ? -1 : 0;
    const char *mode = opts_str(&o, "mode", "step");
    if (!rc) rc = opts_check_unused(&o, e);
    if (!rc && strcmp(mode, "step") && strcmp(mode, "prefill"))
        rc = err_set(e, "compare device: mode=%.20s: step or prefill", mode);
    int gmode = strcmp(mode, "prefill") == 0 ? GPU_PREFILL : GPU_STEP;
    opts_free(&o);
    if (rc) return -1;
    if (!(tol > 0)) return err_set(e, "compare device: tol must be > 0");
    char why[256];
    if (!gpu_available(why, sizeof why))
        return err_set(e, "compare device: no GPU here (%s); nothing was compared", why);
    diag_device r = {0};
    if (engine_raw_active(&s->eng)) {
        raw_mode *rm = s->eng.raw;
        if (rm->st.T == 0) return err_set(e, "compare device: no stream (stream ... first)");
        int T = ntok > 0 && ntok < rm->st.T ? (int)ntok : rm->st.T;
        size_t scr = raw_scratch_floats(rm->H, rm->dk, rm->dv);
        float *scratch = malloc(scr * sizeof(float));
        if (!scratch) return err_set(e, "out of memory");
        for (int l = 0; l < rm->nl && !rc; l++) {
            raw_lane *L = &rm->lane[l];
            mixer_seq seq = {.T = T};
            float *buf[IN_COUNT] = {0};
            for (int i = 0; i < IN_COUNT && !rc; i++) {
                size_t w = (size_t)L->c.H * (size_t)mixer_input_floats(&L->c, (mixer_input)i);
                if (!(buf[i] = malloc((size_t)T * w * sizeof(float))))
                    rc = err_set(e, "out of memory");
            }
            int have[IN_COUNT] = {0};
            for (int t = 0; t < T && !rc; t++) {
                mixer_tok x;
                raw_lane_inputs(L, &rm->st, t, scratch, &x);
                for (int i = 0; i < IN_COUNT; i++) {
                    if (!x.in[i]) continue;
                    size_t w = (size_t)L->c.H * (size_t)mixer_input_floats(&L->c, (mixer_input)i);
                    memcpy(buf[i] + (size_t)t * w, x.in[i], w * sizeof(float));
                    have[i] = 1;
                }
            }
            for (int i = 0; i < IN_COUNT; i++) seq.in[i] = have[i] ? buf[i] : NULL;
            if (!rc) rc = diag_device_mixer(L->m, &L->c, &seq, gmode, tol, &r, e);
            if (!rc) {
                char what[96];
                snprintf(what, sizeof what, "lane %d, %s %s", l, L->label, mode);
                if (r.gpu)
                    print_device(s, &r, what);
                else
                    fprintf(s->out, "compare device (%s): not compared: %s\n", what, r.why);
            }
            diag_device_free(&r);
            for (int i = 0; i < IN_COUNT; i++) free(buf[i]);
        }
        free(scratch);
        return rc;
    }
    if (!s->eng.model || !s->eng.tokens)
        return err_set(e,
                       "compare device: needs a model with tokens, or a raw mixer with a stream");
    int T = ntok > 0 && ntok < s->eng.ntokens ? (int)ntok : s->eng.ntokens;
    if (diag_device_model(s->eng.model, s->eng.tokens, T, tol, &r, e)) return -1;
    trace_clear(&s->eng.tr); /* the model went back to position 0 */
    print_device(s, &r, "model logits");
    diag_device_free(&r);
    return 0;
}

/* ---- the command ---- */

static int run_diagnose(session *s, int argc, char **argv, const char *rest, err *e) {
    (void)rest;
    char cmd[1024];
    command_text(s, argc, argv, cmd, sizeof cmd);
    if (engine_sync_model(&s->eng, e)) return -1; /* the model's buffers after GPU stepping */
    if (argc >= 2 && strcmp(argv[1], "device") == 0)
        return diag_compare_device(s, argc - 2, argv + 2, e);
    int first_opt = argc >= 2 && !strchr(argv[1], '=') ? 2 : 1;
    opts o;
    if (opts_parse(&o, argc - first_opt, argv + first_opt, e)) return err_prefix(e, "diagnose");
    int rc;
    if (first_opt == 1)
        rc = diagnose_session(s, &o, cmd, e);
    else if (strcmp(argv[1], "precision") == 0)
        rc = diagnose_precision(s, &o, e);
    else
        rc = diagnose_path(s, argv[1], &o, cmd, e);
    opts_free(&o);
    return rc;
}

const command cmd_diagnose = {
    "diagnose",
    "[PATH | precision | device] [key=value ...]",
    "find why a run went unstable: checkpoints, NaN hunting, precision, CPU vs GPU",
    "  diagnose PATH [prompt=TEXT | tokens=FILE|TEXT] [len=512] [seed=0] [csv=FILE]\n"
    "      [png=FILE] PATH: a checkpoint, or a run's folder of them (checkpoint-1200,\n"
    "      step_1200, ...: sorted by step). Each runs a probe prompt (byte text, then\n"
    "      MQAR; prompt= gives text) and is reported per layer and head: beta, eta,\n"
    "      rho, decay half-lives, key and query norms, state-norm growth, the\n"
    "      transition's spectral bound alpha max(1, |1-rho|), Kalman precision and\n"
    "      gates, KATA denominators, Parallax COR, output gates, RMSNorm scales; then\n"
    "      findings in words with the numbers, and the first NaN / Inf (token, layer,\n"
    "      head, quantity). Non-finite weights are loaded as they are and named.\n"
    "      Across a series each figure is shown against the step. csv= writes every\n"
    "      figure (long format), png= a one-page summary. tokens= runs given tokens\n"
    "      instead: a .safetensors file of ids, a text file or the text itself,\n"
    "      through the session's tokenizer or the tokenizer.json beside PATH (else\n"
    "      bytes).\n"
    "  diagnose FILE.safetensors [tol=1e-4]\n"
    "      a file `export inputs` wrote (a core's inputs and initial state): the core\n"
    "      over it token by token and with its chunked form side by side; the first\n"
    "      chunk where they part and the first non-finite token of each.\n"
    "  diagnose [csv=FILE] [png=FILE]\n"
    "      the same figures from what this session has run (a model or raw mixers).\n"
    "  diagnose precision [threshold=1e-2] [tokens=N] [png=FILE]\n"
    "      the session's tokens with the recurrent state kept in fp32, bf16, fp16 and\n"
    "      with bf16 inputs, in lockstep: when and where each parts from fp32 (state\n"
    "      per layer and head, logits); recorded as series prec_* for `view\n"
    "      precision` / `view probes`.\n"
    "  diagnose device [tol=1e-4] [tokens=N] [mode=step|prefill]\n"
    "      the same input on the CPU and the GPU (the model's logits, or each raw\n"
    "      lane's output): the first token where they differ beyond tol. Says so when\n"
    "      there is no GPU.\n"
    "`step` and `run` stop at the first NaN / Inf and name it the same way; `set\n"
    "stop-on` stops them on a threshold too. docs/diagnose.md.",
    0,
    -1,
    run_diagnose,
    COMPLETE_FILE,
    "prompt len seed csv png threshold tokens tol mode"};
