/* test_diagnose.c: diag/ (issue 8): the first non-finite value, precision replay, checkpoint
 * series with planted faults, per-layer replay, CPU against GPU without a GPU. */
#include "tests/tsession.h"

#include <sys/stat.h>

#include "cli/command.h"
#include "cli/session.h"
#include "core/fileio.h"
#include "core/safetensors.h"
#include "diag/diag.h"
#include "export/png.h"
#include "kernels/gpu.h"
#include "models/model.h"
#include "tests/tmodel.h"

/* ---- helpers ---- */

static float *slot_data(model *m, const char *name, int64_t *n) {
    wslot *s = model_find_slot(m, name);
    if (!s) fail_msg("no tensor %s", name);
    if (n) {
        *n = 1;
        for (int d = 0; d < s->ndim; d++) *n *= s->shape[d];
    }
    return s->data;
}

static void save(model *m, const char *dir) {
    err e = {{0}};
    if (model_save(m, dir, &e)) fail_msg("save %s: %s", dir, e.msg);
}

static const diag_finding *find_kind(const diag_ckpt *ck, const char *kind) {
    for (int i = 0; i < ck->nfind; i++)
        if (strcmp(ck->find[i].kind, kind) == 0) return &ck->find[i];
    return NULL;
}

/* ---- checkpoint names ---- */

static void test_step_names(void **state) {
    (void)state;
    assert_int_equal(diag_step_of("runs/x/checkpoint-1200"), 1200);
    assert_int_equal(diag_step_of("step_300"), 300);
    assert_int_equal(diag_step_of("/a/b/global_step50/"), 50);
    assert_int_equal(diag_step_of("ckpt-7"), 7);
    assert_int_equal(diag_step_of("run3_iter_90"), 90);
    assert_int_equal(diag_step_of("model-v2-final-88"), 88);
    assert_int_equal(diag_step_of("final"), -1);
}

/* ---- the first non-finite value of one core step ---- */

static void test_scan_core(void **state) {
    (void)state;
    const mixer_ops *m = mixer_find("gdn");
    assert_non_null(m);
    mixer_cfg c;
    opts o = {0};
    err e = {{0}};
    assert_int_equal(mixer_configure(m, &c, 3, 8, 8, &o, &e), 0);
    float q[24], k[24], v[24], g[3] = {-0.1f, -0.1f, -0.1f}, beta[3] = {0.5f, 0.5f, 0.5f};
    trng r = {7};
    trng_fill(&r, q, 24, 0.3), trng_fill(&r, k, 24, 0.3), trng_fill(&r, v, 24, 1.0);
    float *st = calloc(m->state_floats(&c), sizeof(float));
    float o_[24], *pr = malloc(mixer_probe_floats(m, &c) * sizeof(float));
    mixer_tok x = {{0}};
    x.in[IN_Q] = q, x.in[IN_K] = k, x.in[IN_V] = v, x.in[IN_G] = g, x.in[IN_BETA] = beta;
    diag_nf nf;
    diag_nf_clear(&nf);
    m->step(&c, st, &x, 0, o_, pr);
    assert_int_equal(diag_nf_scan_core(&nf, m, &c, &x, st, o_, pr, 0, 0), 0);
    assert_int_equal(nf.found, 0);
    /* an input: beta of head 2 is NaN */
    beta[2] = NAN;
    m->step(&c, st, &x, 1, o_, pr);
    assert_int_equal(diag_nf_scan_core(&nf, m, &c, &x, st, o_, pr, 1, 4), 1);
    assert_int_equal(nf.token, 1);
    assert_int_equal(nf.layer, 4);
    assert_int_equal(nf.head, 2);
    assert_int_equal(nf.nheads, 1);
    assert_string_equal(nf.what, "beta");
    assert_true(isnan(nf.value));
    /* finite inputs, a state near float's end: the write overflows; the derived quantity named
     * comes from the probes (not the inputs), the context gives rho */
    diag_nf_clear(&nf);
    beta[2] = 0.5f;
    for (size_t i = 0; i < m->state_floats(&c); i++) st[i] = 3e38f;
    for (int i = 0; i < 24; i++) k[i] = 1.0f; /* S^T k passes float's largest number */
    m->step(&c, st, &x, 2, o_, pr);
    assert_int_equal(diag_nf_scan_core(&nf, m, &c, &x, st, o_, pr, 2, 0), 1);
    assert_int_equal(nf.head, 0);
    assert_int_equal(nf.nheads, 3);
    assert_true(strcmp(nf.what, "e_norm") == 0 || strcmp(nf.what, "state_norm") == 0 ||
                strcmp(nf.what, "state") == 0 || strcmp(nf.what, "o_norm") == 0);
    assert_non_null(strstr(nf.cause, "rho = "));
    free(st), free(pr);
}

/* ---- step / run stop at the first NaN / Inf ---- */

static void test_run_stops(void **state) {
    (void)state;
    tsession t;
    err e = {{0}};
    ts_open(&t);
    assert_int_equal(ts_exec(&t, &e, "model random gdn layers=3 seed=3"), 0);
    /* plant: layer 1's A_log[1] makes exp(A_log) overflow float32, so g = -inf */
    float *A = slot_data(t.s.eng.model, "model.layers.1.attn.A_log", NULL);
    A[1] = 100.0f;
    assert_int_equal(ts_exec(&t, &e, "prompt 'the decay overflows here'"), 0);
    assert_int_equal(ts_exec(&t, &e, "run"), -1);
    assert_non_null(strstr(e.msg, "stopped after token 0"));
    assert_non_null(strstr(e.msg, "first Inf at token 0, layer 1, head 1, in the decay g"));
    assert_non_null(strstr(e.msg, "(-inf)"));
    assert_non_null(strstr(e.msg, "exp(A_log[1]) = exp(100)"));
    assert_int_equal(t.s.eng.model->pos, 1); /* stopped after the token */
    /* step names it the same way */
    assert_int_equal(ts_exec(&t, &e, "reset"), 0);
    assert_int_equal(ts_exec(&t, &e, "step 3"), -1);
    assert_non_null(strstr(e.msg, "layer 1, head 1, in the decay g"));
    /* a healthy model runs through */
    A[1] = 1.0f;
    assert_int_equal(ts_exec(&t, &e, "reset"), 0);
    assert_int_equal(ts_exec(&t, &e, "run"), 0);
    /* an unstable model (sum-normalised keys with the delta rule): the state overflows with
     * finite inputs; the message names the quantity inside the recurrence and its rho */
    assert_int_equal(
        ts_exec(&t, &e, "model random deltanet qk_norm=sum qk_activation=identity seed=0"), 0);
    assert_int_equal(ts_exec(&t, &e, "prompt mqar pairs=64"), 0);
    assert_int_equal(ts_exec(&t, &e, "run"), -1);
    int tok = -1;
    const char *p = strstr(e.msg, "first Inf at token ");
    assert_non_null(p);
    assert_int_equal(sscanf(p, "first Inf at token %d", &tok), 1);
    assert_true(tok > 10);
    assert_int_equal(t.s.eng.model->pos, tok + 1);
    assert_non_null(strstr(e.msg, "rho = "));
    ts_close(&t);
}

/* ---- checkpoint series with planted faults ---- */

static void test_series(void **state) {
    (void)state;
    char *dir = test_tmpdir(), path[600];
    static const char *const KV[] = {"layers=3", "seed=2"};
    model *m = random_model("kaczmarz", KV, 2);
    int dk = m->layers[0].mc.dk, hidden = m->c.hidden;
    assert_int_equal(m->layers[0].mc.H, 2);
    /* 100: healthy */
    snprintf(path, sizeof path, "%s/checkpoint-100", dir);
    save(m, path);
    /* 200: layer 2, head 1 has tiny keys: its k_proj rows scaled by 0.05 take |k| from about
     * 0.02 to about 1e-3 = sqrt(eps), where the Kaczmarz write gain |k|/(|k|^2+eps) peaks */
    float *K2 = slot_data(m, "model.layers.2.attn.k_proj.weight", NULL);
    for (int r = dk; r < 2 * dk; r++)
        for (int c = 0; c < hidden; c++) K2[(size_t)r * hidden + c] *= 0.05f;
    snprintf(path, sizeof path, "%s/checkpoint-200", dir);
    save(m, path);
    /* 300: and layer 1's A_log[0] makes the decay overflow */
    float *A = slot_data(m, "model.layers.1.attn.A_log", NULL);
    float a0 = A[0];
    A[0] = 95.0f;
    snprintf(path, sizeof path, "%s/step_300", dir); /* another naming scheme, same run */
    save(m, path);
    A[0] = a0;
    /* 400: and a NaN weight in layer 0's key projection, a row of head 1 */
    float *K0 = slot_data(m, "model.layers.0.attn.k_proj.weight", NULL);
    K0[(size_t)(dk + 3) * hidden + 5] = NAN;
    snprintf(path, sizeof path, "%s/checkpoint-400", dir);
    save(m, path);
    model_free(m);
    /* a folder that is not a checkpoint is ignored */
    snprintf(path, sizeof path, "%s/logs", dir);
    mkdir(path, 0755);

    diag_report r;
    diag_options o = {.len = 192, .seed = 1};
    err e = {{0}};
    if (diag_run_path(&r, dir, &o, NULL, &e)) fail_msg("%s", e.msg);
    assert_int_equal(r.n, 4);
    long steps[4] = {100, 200, 300, 400};
    for (int i = 0; i < 4; i++) {
        assert_int_equal(r.ck[i].step, steps[i]);
        assert_int_equal(r.ck[i].ok, 1);
        assert_int_equal(r.ck[i].T, 192);
    }
    /* 100: nothing wrong */
    const diag_ckpt *c0 = &r.ck[0];
    assert_int_equal(c0->nf.found, 0);
    assert_null(find_kind(c0, "small_keys"));
    assert_null(find_kind(c0, "nonfinite"));
    assert_true(*diag_fig_at(c0, DF_K_SMALL, 2, 1) < 0.01f);
    assert_true(*diag_fig_at(c0, DF_K, 2, 1) > 0.01f);
    /* 200: the small keys of layer 2 head 1, from token 0; the Kaczmarz write gain */
    const diag_ckpt *c1 = &r.ck[1];
    assert_int_equal(c1->nf.found, 0);
    const diag_finding *f = find_kind(c1, "small_keys");
    assert_non_null(f);
    assert_int_equal(f->layer, 2);
    assert_int_equal(f->head, 1);
    assert_int_equal(f->token, 0);
    assert_true(f->value > 0.99);
    assert_non_null(strstr(f->text, "the Kaczmarz write can reach"));
    assert_true(*diag_fig_at(c1, DF_K, 2, 1) < 2e-3f);
    assert_true(*diag_fig_at(c1, DF_K_SMALL, 2, 0) < 0.01f); /* the other head is as before */
    /* the write gain eta |k|/(|k|^2+eps) of the tiny head: near its peak eta/(2 sqrt(eps)) */
    float wg = *diag_fig_at(c1, DF_WRITE_GAIN, 2, 1);
    assert_true(wg > 4 * *diag_fig_at(c0, DF_WRITE_GAIN, 2, 1));
    assert_true(wg > 100 && wg < 500);
    /* 300: the decay of layer 1 head 0 overflows at token 0 */
    const diag_ckpt *c2 = &r.ck[2];
    assert_int_equal(c2->nf.found, 1);
    assert_int_equal(c2->nf.token, 0);
    assert_int_equal(c2->nf.layer, 1);
    assert_int_equal(c2->nf.head, 0);
    assert_string_equal(c2->nf.what, "g");
    assert_true(isinf(c2->nf.value) && c2->nf.value < 0);
    assert_non_null(strstr(c2->nf.cause, "exp(A_log[0]) = exp(95)"));
    f = find_kind(c2, "nonfinite");
    assert_non_null(f);
    assert_int_equal(f->layer, 1);
    assert_int_equal(f->head, 0);
    assert_int_equal(f->token, 0);
    /* 400: the NaN weight is loaded as it is and named; the run finds it in head 1's key */
    const diag_ckpt *c3 = &r.ck[3];
    f = find_kind(c3, "nonfinite_weight");
    assert_non_null(f);
    assert_int_equal(f->layer, 0);
    assert_int_equal(f->head, 1);
    assert_non_null(strstr(f->text, "model.layers.0.attn.k_proj.weight"));
    assert_non_null(strstr(f->text, "holds 1 NaN"));
    assert_int_equal(c3->nf.found, 1);
    assert_int_equal(c3->nf.token, 0);
    assert_int_equal(c3->nf.layer, 0);
    assert_int_equal(c3->nf.head, 1);
    assert_string_equal(c3->nf.what, "k");
    assert_true(isnan(c3->nf.value));
    assert_non_null(strstr(c3->nf.cause, "k_proj.weight"));

    /* text, CSV and PNG through the command */
    tsession t;
    ts_open(&t);
    char csv[700], png[700];
    snprintf(csv, sizeof csv, "%s/d.csv", dir);
    snprintf(png, sizeof png, "%s/d.png", dir);
    if (ts_exec(&t, &e, "diagnose %s len=192 seed=1 csv=%s png=%s", dir, csv, png))
        fail_msg("%s", e.msg);
    const char *out = ts_out(&t);
    assert_non_null(strstr(out, "== checkpoint-100 (step 100): kaczmarz_deltanet, 3 layers"));
    assert_non_null(strstr(out, "== step_300 (step 300)"));
    assert_non_null(strstr(out, "first Inf at token 0, layer 1, head 0, in the decay g"));
    assert_non_null(strstr(out, "first NaN at token 0, layer 0, head 1, in the key k"));
    assert_non_null(strstr(out, "layer 2 head 1: keys with |k| < 1e-2 on 100% of tokens"));
    assert_non_null(strstr(out, "== across the series"));
    assert_non_null(
        strstr(out, "first checkpoint with a NaN or Inf: step_300: first Inf at token 0"));
    char *text = NULL;
    size_t n = 0;
    assert_int_equal(file_read_all(csv, 1 << 24, &text, &n, &e), 0);
    assert_non_null(strstr(text, "checkpoint,step,layer,head,mixer,figure,value\n"));
    assert_non_null(strstr(text, "checkpoint-200,200,2,1,kaczmarz,k_small_fraction,1\n"));
    assert_non_null(strstr(text, "step_300,300,1,0,kaczmarz,first_nonfinite_token,0\n"));
    assert_non_null(strstr(text, "# finding: checkpoint-400: nonfinite_weight: tensor"));
    free(text);
    assert_int_equal(file_read_all(png, 1 << 26, &text, &n, &e), 0);
    char v[64];
    assert_int_equal(png_find_text((unsigned char *)text, n, "Checkpoints", v, sizeof v), 0);
    assert_string_equal(v, "4");
    free(text);
    /* one checkpoint alone */
    snprintf(path, sizeof path, "%s/checkpoint-400", dir);
    assert_int_equal(ts_exec(&t, &e, "diagnose %s len=32", path), 0);
    ts_close(&t);
    diag_report_free(&r);
    test_rmdir(dir);
}

/* ---- precision replay ---- */

static void test_precision(void **state) {
    (void)state;
    static const char *const KV[] = {"layers=2", "seed=2"};
    model *m = random_model("gdn", KV, 2);
    /* values 1e7 times larger: the state passes fp16's largest number, 65504, within a few tokens
     */
    int64_t n;
    float *Wv = slot_data(m, "model.layers.1.attn.v_proj.weight", &n);
    for (int64_t i = 0; i < n; i++) Wv[i] *= 1e7f;
    const int T = 240;
    int32_t *ids = malloc(T * sizeof *ids);
    for (int t = 0; t < T; t++) ids[t] = (t * 37 + 11) % m->c.vocab;
    trace tr;
    trace_init(&tr);
    err e = {{0}};
    assert_int_equal(model_register_probes(m, &tr, &e), 0);
    float *logits = malloc((size_t)T * m->c.vocab * sizeof(float));
    diag_prec r;
    if (diag_precision_run(m, ids, T, 1e-2, &tr, logits, &r, &e)) fail_msg("%s", e.msg);
    /* fp32 against itself: exactly zero, never past the threshold */
    assert_int_equal(r.v[DIAG_PREC_F32].first_state, -1);
    assert_int_equal(r.v[DIAG_PREC_F32].first_logits, -1);
    assert_true(r.v[DIAG_PREC_F32].max_state == 0 && r.v[DIAG_PREC_F32].max_logits == 0);
    /* fp16: the state overflows in layer 1; bf16 keeps the range and stays close */
    const diag_prec_variant *h = &r.v[DIAG_PREC_F16_STATE];
    assert_true(h->first_state >= 0);
    assert_int_equal(h->first_layer, 1);
    assert_true(isinf(h->max_state));
    assert_true(h->first_logits >= h->first_state);
    const diag_prec_variant *b = &r.v[DIAG_PREC_BF16_STATE];
    fprintf(stderr,
            "precision: fp16 first %lld (layer %d), bf16 state max %.3g, bf16 inputs max "
            "%.3g\n",
            (long long)h->first_state, h->first_layer, b->max_state,
            r.v[DIAG_PREC_BF16_IN].max_state);
    assert_true(b->max_state > 1e-4 && b->max_state < 5e-2);
    assert_true(r.v[DIAG_PREC_BF16_IN].max_state > 0 && r.v[DIAG_PREC_BF16_IN].max_state < 5e-2);
    assert_int_equal(r.nf.found, 0);
    /* the model is where `run` would leave it: position T with the fp32 state and logits */
    assert_int_equal(m->pos, T);
    float *lg = malloc(m->c.vocab * sizeof(float));
    assert_int_equal(model_reset(m, 0, &e), 0);
    for (int t = 0; t < T; t++) assert_int_equal(model_step(m, ids[t], lg, NULL, &e), 0);
    assert_true(rel_err(lg, logits + (size_t)(T - 1) * m->c.vocab, m->c.vocab) == 0);
    /* the divergence as series in the trace */
    assert_int_equal(tr.T, T);
    assert_int_equal(diag_precision_record(&r, &tr, &e), 0);
    int s16 = trace_find(&tr, "prec_fp16_state"), sl = trace_find(&tr, "prec_logits");
    assert_true(s16 >= 0 && sl >= 0);
    assert_true(isinf(*trace_at_lh(&tr, s16, T - 1, 1, 0)));
    assert_true(*trace_at_lh(&tr, sl, 5, 0, DIAG_PREC_F32) == 0.0f);
    assert_true(*trace_at_lh(&tr, trace_find(&tr, "state_norm"), T - 1, 1, 0) > 65504.0f);
    diag_precision_free(&r);
    free(lg), free(logits), free(ids);
    trace_free(&tr);
    model_free(m);

    /* through the command, with the view's PNG */
    tsession t;
    ts_open(&t);
    char *dir = test_tmpdir(), png[600];
    snprintf(png, sizeof png, "%s/p.png", dir);
    assert_int_equal(ts_exec(&t, &e, "model random gdn seed=1"), 0);
    assert_int_equal(ts_exec(&t, &e, "prompt mqar pairs=24"), 0);
    if (ts_exec(&t, &e, "diagnose precision threshold=0.05 png=%s", png)) fail_msg("%s", e.msg);
    const char *out = ts_out(&t);
    assert_non_null(strstr(out, "precision replay over 96 tokens, 2 layers"));
    assert_non_null(strstr(out, "fp16 state"));
    assert_int_equal(t.s.eng.model->pos, 96);
    assert_int_equal(ts_exec(&t, &e, "show prec_bf16_state"), 0);
    struct stat sb;
    assert_int_equal(stat(png, &sb), 0);
    assert_true(sb.st_size > 1000);
    ts_close(&t);
    test_rmdir(dir);
}

/* ---- per-layer replay ---- */

static void put(tensor **ts, int *n, const char *name, int nd, const int64_t *shape, trng *r,
                double scale, err *e) {
    tensor *t = tensor_new(name, DT_F32, nd, shape, e);
    assert_non_null(t);
    trng_fill(r, t->data, (size_t)tensor_numel(t), scale);
    ts[(*n)++] = t;
}

static void test_replay_layers(void **state) {
    (void)state;
    char *dir = test_tmpdir(), in[600], out[600];
    snprintf(in, sizeof in, "%s/dump.safetensors", dir);
    snprintf(out, sizeof out, "%s/out.safetensors", dir);
    const int B = 1, T = 20, H = 2, D = 8;
    int64_t s4[4] = {B, T, H, D}, s3[3] = {B, T, H};
    tensor *ts[16];
    int n = 0;
    trng r = {11};
    err e = {{0}};
    for (int l = 0; l < 2; l++) {
        char name[64];
        static const char *const QKV[] = {"q", "k", "v"};
        for (int i = 0; i < 3; i++) {
            snprintf(name, sizeof name, "layers.%d.%s", l, QKV[i]);
            put(ts, &n, name, 4, s4, &r, 0.3, &e);
        }
        snprintf(name, sizeof name, "layers.%d.g", l);
        put(ts, &n, name, 3, s3, &r, 0.0, &e);
        float *g = ts[n - 1]->data;
        for (int i = 0; i < T * H; i++) g[i] = -0.05f;
        snprintf(name, sizeof name, "layers.%d.beta", l);
        put(ts, &n, name, 3, s3, &r, 0.0, &e);
        float *b = ts[n - 1]->data;
        for (int i = 0; i < T * H; i++) b[i] = 0.5f;
    }
    /* layer 1: the decay of head 1 is -inf from token 5 */
    float *g1 = ts[8]->data;
    assert_string_equal(ts[8]->name, "layers.1.g");
    g1[5 * H + 1] = -INFINITY;
    assert_int_equal(st_write(in, (const tensor *const *)ts, n, NULL, &e), 0);
    for (int i = 0; i < n; i++) tensor_free(ts[i]);

    tsession t;
    ts_open(&t);
    if (ts_exec(&t, &e, "replay gdn %s layers=all out=%s", in, out)) fail_msg("%s", e.msg);
    const char *o = ts_out(&t);
    assert_non_null(strstr(o, "layer 0: gdn B=1 T=20 H=2 dk=8 dv=8"));
    assert_non_null(strstr(o, "layer 1: gdn B=1 T=20 H=2 dk=8 dv=8"));
    assert_non_null(strstr(o, "first non-finite: batch 0 token 5 head 1, in the input g (-inf)"));
    /* layer 0 is clean: its line names nothing */
    const char *l0 = strstr(o, "layer 0:"), *nl = strchr(l0, '\n');
    assert_true(nl &&
                (strstr(l0, "first non-finite") == NULL || strstr(l0, "first non-finite") > nl));
    /* the merged file holds every layer's outputs; layer 0's equal a plain prefix replay */
    st_file *f;
    assert_int_equal(st_open(&f, out, &e), 0);
    assert_non_null(st_find(f, "layers.0.o"));
    assert_non_null(st_find(f, "layers.1.hT"));
    assert_non_null(st_find(f, "layers.1.probe.state_norm"));
    int64_t no;
    float *o0 = st_get_f32(f, "layers.0.o", &no);
    st_close(f);
    char single[600];
    snprintf(single, sizeof single, "%s/single.safetensors", dir);
    assert_int_equal(ts_exec(&t, &e, "replay gdn %s prefix=layers.0. out=%s", in, single), 0);
    assert_int_equal(st_open(&f, single, &e), 0);
    float *s0 = st_get_f32(f, "o", NULL);
    assert_true(rel_err(o0, s0, (size_t)no) == 0);
    st_close(f);
    free(o0), free(s0);
    /* one layer; a layer that is not there */
    assert_int_equal(ts_exec(&t, &e, "replay gdn %s layer=1", in), 0);
    assert_int_equal(ts_exec(&t, &e, "replay gdn %s layer=7", in), -1);
    assert_non_null(strstr(e.msg, "layer=7: no such layer"));
    assert_non_null(strstr(e.msg, "layers: 0, 1"));
    assert_int_equal(ts_exec(&t, &e, "replay kalman %s layers=all", in), -1);
    ts_close(&t);
    test_rmdir(dir);
}

/* ---- CPU against GPU ---- */

static void test_compare_device(void **state) {
    (void)state;
    tsession t;
    err e = {{0}};
    ts_open(&t);
    assert_int_equal(ts_exec(&t, &e, "model random gdn seed=4"), 0);
    assert_int_equal(ts_exec(&t, &e, "prompt 'cpu and gpu'"), 0);
    char why[256];
    if (!gpu_available(why, sizeof why)) {
        assert_int_equal(ts_exec(&t, &e, "compare device"), -1);
        assert_non_null(strstr(e.msg, "compare device: no GPU here"));
        assert_int_equal(ts_exec(&t, &e, "diagnose device tol=1e-3"), -1);
        assert_non_null(strstr(e.msg, "nothing was compared"));
    } else {
        assert_int_equal(ts_exec(&t, &e, "compare device"), 0);
        assert_non_null(strstr(ts_out(&t), "compare device (model logits, 11 tokens"));
    }
    assert_int_equal(ts_exec(&t, &e, "compare device tol=-1"), -1);
    ts_close(&t);
}

/* ---- the session: a raw mixer with keys GDN's beta over-corrects ---- */

static void test_session_raw(void **state) {
    (void)state;
    tsession t;
    err e = {{0}};
    ts_open(&t);
    assert_int_equal(ts_exec(&t, &e, "diagnose"), -1);
    assert_int_equal(ts_exec(&t, &e, "mixer gdn dk=16 dv=16"), 0);
    assert_int_equal(ts_exec(&t, &e, "stream keys 120 norms=2..3"), 0);
    assert_int_equal(ts_exec(&t, &e, "run"), 0);
    assert_int_equal(ts_exec(&t, &e, "diagnose"), 0);
    const char *o = ts_out(&t);
    assert_non_null(strstr(o, "layer 0 head 0: the transition expands: alpha*|1 - rho| reaches"));
    assert_non_null(strstr(o, "layer 0 head 0: state norm grows x"));
    ts_close(&t);
}

/* ---- the scene, through the binary ---- */

static void test_scene_unstable_run(void **state) {
    (void)state;
    char *dir = test_tmpdir(), *out = NULL;
    int rc = run_mixscope(&out, "-c 'set outdir %s; source scenes/unstable-run.scene'", dir);
    if (rc != 0) fail_msg("scene failed (%d): %s", rc, out);
    /* raw keys with beta = 1: the expansion and the growth, with the numbers */
    const char *p = strstr(out, "layer 0 head 0: the transition expands: alpha*|1 - rho| reaches ");
    assert_non_null(p);
    double sp = 0;
    assert_int_equal(
        sscanf(p, "layer 0 head 0: the transition expands: alpha*|1 - rho| reaches %lf", &sp), 1);
    assert_true(sp > 4 && sp < 6); /* |k| <= 2.5: rho - 1 <= 5.25 */
    assert_non_null(strstr(out, "layer 0 head 0: state norm grows x1e+"));
    /* a real run that diverges (train ... every=1 diverge=ok): the non-finite step is named,
     * and across its checkpoints diagnose finds the first with an Inf, with its quantity and rho */
    assert_non_null(strstr(out, ": the loss is not finite: the run diverged"));
    assert_non_null(strstr(out, "diverged (diverge=ok)"));
    assert_non_null(strstr(out, "== step-000000 (step 0): delta_net, 1 layers, 256 tokens\n"
                                "  no NaN or Inf in the run"));
    assert_non_null(strstr(out, "first checkpoint with a NaN or Inf: step-0000"));
    assert_non_null(strstr(out, ": first Inf at token "));
    assert_non_null(strstr(out, "rho = "));
    assert_non_null(strstr(out, "fp16 state"));
    char path[600];
    struct stat sb;
    snprintf(path, sizeof path, "%s/unstable-run/diagnose.png", dir);
    assert_int_equal(stat(path, &sb), 0);
    snprintf(path, sizeof path, "%s/unstable-run/precision.png", dir);
    assert_int_equal(stat(path, &sb), 0);
    snprintf(path, sizeof path, "%s/unstable-run/diagnose.csv", dir);
    assert_int_equal(stat(path, &sb), 0);
    free(out);
    test_rmdir(dir);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_step_names),         cmocka_unit_test(test_scan_core),
        cmocka_unit_test(test_run_stops),          cmocka_unit_test(test_series),
        cmocka_unit_test(test_precision),          cmocka_unit_test(test_replay_layers),
        cmocka_unit_test(test_compare_device),     cmocka_unit_test(test_session_raw),
        cmocka_unit_test(test_scene_unstable_run),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
