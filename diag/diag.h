/* diag.h: diagnosing unstable runs (issue 8).
 *
 *   nonfinite.c    the first NaN / Inf of a run, named by token, layer, head and the quantity of
 *                  the recurrence it appeared in (an input such as the decay g, a derived quantity
 *                  such as the key norm, the state, the output), with the likely cause when the
 *                  layer's weights show it
 *   precision.c    the same tokens with the recurrent state kept in fp32, bf16 and fp16 and with
 *                  bf16 inputs, side by side in lockstep; where they part from fp32
 *   figures.c      per layer and head figures from a probe trace (beta, half-lives, norms, state
 *                  growth, spectral bound, Kalman precision, KATA denominators, COR, gates) and
 *                  the findings they imply, in plain words with the numbers
 *   checkpoints.c  a checkpoint or a run's folder of them, sorted by step; loading that tolerates
 *                  (and reports) non-finite weights so the run can show where they lead
 *   report.c       the text report, the CSV and the one-page PNG summary
 *   device.c       the same input on the CPU and the GPU: the first token they disagree
 *   replay_layers.c  `replay MIXER FILE layer=N|all`: every layer's dump of one file
 *
 * Everything works on the public model struct (models/model.h) through model_step and its
 * layer_hook; nothing here changes how a model computes. */
#ifndef MIXSCOPE_DIAG_H
#define MIXSCOPE_DIAG_H

#include <stdint.h>
#include <stdio.h>

#include "../core/err.h"
#include "../core/opts.h"
#include "../core/trace.h"
#include "../mixers/mixer.h"
#include "../engine/nonfinite.h"

struct model;

/* the first non-finite value: engine/nonfinite.h (diag_nf) */

/* ---- precision replay (precision.c) -------------------------------------------------------- */

enum {
    DIAG_PREC_F32,        /* the reference: fp32 state, fp32 inputs (the normal run) */
    DIAG_PREC_BF16_STATE, /* the recurrent state rounded to bf16 after every step */
    DIAG_PREC_F16_STATE,  /* ... to fp16 */
    DIAG_PREC_BF16_IN,    /* fp32 state; q, k, v, r, beta/eta, lambda_v rounded to bf16 */
    DIAG_PREC_N
};

typedef struct diag_prec_variant {
    const char *name;    /* "fp32", "bf16 state", "fp16 state", "bf16 inputs" */
    const char *series;  /* trace series: "prec_fp32", "prec_bf16_state", ... */
    int64_t first_state; /* first token whose state divergence passes the threshold, or -1 */
    int first_layer, first_head;
    double first_value;
    int64_t first_logits; /* first token whose logits divergence passes it, or -1 */
    double first_logits_value;
    double max_state, max_logits; /* largest divergences (inf when non-finite) */
    int64_t max_state_token;
    double final_state, final_logits; /* at the last token */
    int64_t nonfinite;                /* first token with non-finite logits, or -1 */
    int skipped_layers; /* layers this variant could not change (KV caches, unknown cores) */
} diag_prec_variant;

typedef struct diag_prec {
    int T, layers, H; /* H: the most heads of any layer */
    double threshold;
    diag_prec_variant v[DIAG_PREC_N];
    float *state_div;  /* [DIAG_PREC_N][T][layers][H]: |S - S_fp32|_F / |S_fp32|_F per head */
    float *logits_div; /* [DIAG_PREC_N][T]: |l - l_fp32| / |l_fp32| */
    diag_nf nf;        /* the first non-finite value of the fp32 run (found = 0: none) */
} diag_prec;

/* Runs tokens [0, T) from position 0 in the four variants in lockstep (the model's weights are
 * shared; each variant has its own states). The fp32 run records its probes into tr when tr is
 * not NULL (its series registered by the caller; tokens pushed here) and its logits into
 * logits [T, vocab] when not NULL; the model is left at position T with the fp32 state, as after
 * `run`. */
int diag_precision_run(struct model *m, const int32_t *tokens, int T, double threshold, trace *tr,
                       float *logits, diag_prec *r, err *e);
void diag_precision_free(diag_prec *r);
/* Adds the divergences to a trace that holds T tokens: series prec_<variant> [layers][H][1] (state
 * divergence per layer and head) and prec_logits [1][DIAG_PREC_N][1] (head = variant). */
int diag_precision_record(const diag_prec *r, trace *tr, err *e);
void diag_precision_print(const diag_prec *r, FILE *out);
/* The `precision` view (viz/view_precision.c, in the view table): divergence per variant over
 * tokens, read from the trace series above. */
struct view;
extern const struct view view_precision;

/* ---- figures and findings (figures.c) ------------------------------------------------------ */

enum diag_fig {
    DF_BETA,       /* median beta (kaczmarz: the effective beta) */
    DF_BETA_SAT,   /* fraction of tokens with the write gate (beta, or eta) saturated */
    DF_ETA,        /* median eta (kaczmarz) */
    DF_RHO_MAX,    /* max rho = beta |k|^2 */
    DF_HL,         /* median decay half-life, tokens */
    DF_HL_MIN,     /* shortest half-life */
    DF_K,          /* median |k| */
    DF_K_MIN,      /* smallest |k| */
    DF_K_SMALL,    /* fraction of tokens with |k| < 1e-2 */
    DF_Q,          /* median |q| */
    DF_GROWTH,     /* state norm at the end / at the first token it was positive */
    DF_STATE_MAX,  /* largest state norm */
    DF_SPECTRAL,   /* max over tokens of alpha max(1, |1 - rho|): the transition's spectral norm */
    DF_WRITE_GAIN, /* max beta |k| (write norm per unit residual; kaczmarz: eta |k|/(|k|^2+eps)) */
    DF_LAM_MIN,    /* Kalman: smallest precision lambda */
    DF_LAM_MAX,    /* Kalman: largest precision lambda */
    DF_WGATE,      /* Kalman: mean write gate */
    DF_GATE_SAT,   /* Kalman: fraction of tokens with the write gate > 0.99 or forget < 0.01 */
    DF_DEN_MIN,    /* KATA: smallest denominator z^T psi(q) after the first token */
    DF_COR,        /* Parallax: median COR */
    DF_COR_MAX,    /* Parallax: max COR */
    DF_OGATE,      /* mean output gate (family probe gate_mean) */
    DF_RSTD_MAX,   /* max 1/RMS of the core output in the output norm */
    DF_DT,         /* Mamba2: median step size dt */
    DF_KRAW_MIN,   /* smallest key norm before the layer's normalisation */
    DF_NORM_MIN,   /* per layer: smallest |w| of its RMSNorm scales (stored at head 0) */
    DF_NORM_MAX,   /* per layer: largest |w| of its RMSNorm scales (stored at head 0) */
    DF_COUNT
};

typedef struct diag_fig_def {
    const char *name;  /* CSV name: "beta", "state_growth", ... */
    const char *label; /* column heading */
    int worst;         /* +1: large is bad (series tables show the max over heads), -1: small */
    int per_layer;     /* one value per layer (head 0) */
} diag_fig_def;
extern const diag_fig_def diag_figs[DF_COUNT];

typedef struct diag_finding {
    char kind[24];   /* "nonfinite", "nonfinite_weight", "state_growth", "small_keys",
                        "expanding", "decay_fast", "beta_saturated", "kalman_range", "gate_saturated",
                        "kata_denominator", "parallax_cor", "output_gate", "output_rstd", "norm_scale"
                      */
    int layer, head; /* -1 when not about one */
    int64_t token;   /* -1 when not about one token */
    double value;    /* the number the finding is about */
    char text[400];
} diag_finding;

#define DIAG_MAX_FINDINGS 64

/* One checkpoint (or the session) diagnosed. */
typedef struct diag_ckpt {
    char path[1024];
    char label[256]; /* folder name */
    long step;       /* from the name (checkpoint-1200, step_1200, ...), -1 when none */
    int ok;          /* ran; else error says why */
    char error[ERR_MSG_MAX];
    char kind[32];     /* model type, or "raw" */
    int layers, H, T;  /* layers, most heads of a layer, tokens run */
    char (*mixer)[16]; /* [layers]: each layer's core */
    float *fig;        /* [DF_COUNT][layers][H], NaN where a figure does not apply */
    diag_nf nf;
    int nfind;
    diag_finding find[DIAG_MAX_FINDINGS];
} diag_ckpt;

/* Index of figure f for (layer, head) in ck->fig. */
static inline float *diag_fig_at(const diag_ckpt *ck, int f, int layer, int head) {
    return ck->fig + ((size_t)f * (size_t)ck->layers + (size_t)layer) * (size_t)ck->H + head;
}

/* Sets up ck for `layers` layers of up to H heads (figures NaN). */
int diag_ckpt_alloc(diag_ckpt *ck, int layers, int H, err *e);
void diag_ckpt_free(diag_ckpt *ck);
/* Every per-head figure from the probe series of a trace of ck->T tokens. mx[l]: layer l's core
 * (a series counts for a layer only when that core has the probe, or when it is a model /
 * stream series). */
void diag_figures_from_trace(diag_ckpt *ck, const trace *tr, const mixer_ops *const *mx);
/* The RMSNorm scale figures of a model's layers. */
void diag_figures_from_weights(diag_ckpt *ck, const struct model *m);
/* The first non-finite value recorded in a trace (probe level: for traces run elsewhere). */
void diag_nf_from_trace(diag_nf *r, const trace *tr, const mixer_ops *const *mx);
/* Appends a finding (dropped past DIAG_MAX_FINDINGS). */
void diag_add_finding(diag_ckpt *ck, const char *kind, int layer, int head, int64_t token,
                      double value, const char *fmt, ...) __attribute__((format(printf, 7, 8)));
/* The findings the figures (and ck->nf) imply, appended to ck->find. */
void diag_findings(diag_ckpt *ck, const trace *tr, const mixer_ops *const *mx);

/* ---- checkpoints (checkpoints.c) ----------------------------------------------------------- */

/* The step in a checkpoint's name: the number after "checkpoint-", "step_", "step", "ckpt-",
 * "global_step", "iter_" or, failing those, the last number in the name; -1 when none. */
long diag_step_of(const char *name);
/* PATH is a checkpoint (folder with config.json, or a .safetensors file) or a folder of them.
 * Fills *paths (malloc'd array of malloc'd strings, sorted by step, then by name). */
int diag_list_checkpoints(const char *path, char ***paths, int *n, err *e);
void diag_free_list(char **paths, int n);
/* model_load, except that non-finite weights are loaded as they are (model_load refuses them):
 * each non-finite tensor becomes a "nonfinite_weight" finding in ck (with the layer and head its
 * rows belong to). */
int diag_load(struct model **out, const char *path, diag_ckpt *ck, err *e);

/* ---- the diagnosis (diagnose.c) ------------------------------------------------------------ */

typedef struct diag_options {
    int len;            /* probe prompt tokens (default 512) */
    const char *prompt; /* text instead of the default mix, or NULL */
    const int32_t *ids; /* token ids instead of either (tokens=), or NULL */
    int nids;
    uint64_t seed; /* MQAR part of the default prompt */
} diag_options;

typedef struct diag_report {
    int n;
    diag_ckpt *ck; /* [n], sorted by step */
    char prompt_desc[256];
} diag_report;

/* The default probe prompt for a vocabulary: byte text, then an MQAR pattern (ids folded into
 * the vocabulary when it is smaller than 256). *ids is malloc'd. */
int diag_probe_prompt(const diag_options *o, int vocab, int32_t **ids, int *n, char *desc,
                      size_t dn, err *e);
/* Runs the prompt through a model from position 0, recording probes into a fresh trace and
 * scanning every layer for the first non-finite value; fills ck's figures and findings. The
 * model is left at position T. */
int diag_run_model(diag_ckpt *ck, struct model *m, const int32_t *ids, int T, err *e);
/* Every checkpoint under PATH. A checkpoint that does not load is reported (ok = 0), not fatal. */
int diag_run_path(diag_report *r, const char *path, const diag_options *o, FILE *progress, err *e);
void diag_report_free(diag_report *r);

/* ---- output (report.c) --------------------------------------------------------------------- */

void diag_report_print(const diag_report *r, FILE *out);
/* Long format: checkpoint,step,layer,head,figure,value; findings as "# finding:" lines. */
int diag_report_csv(const diag_report *r, const char *path, const char *command, err *e);
/* One page: the key figures against the step (or per layer and head for one checkpoint), and
 * the findings. */
int diag_report_png(const diag_report *r, const char *path, const char *command, err *e);

/* ---- CPU against GPU (device.c) ------------------------------------------------------------ */

typedef struct diag_device {
    int gpu; /* a GPU was used; 0: why says why not */
    char why[256];
    int T;
    double tol;
    int64_t first;               /* first token beyond tol, or -1 */
    int first_layer, first_head; /* where (raw mixers: head; models: -1) */
    double first_err;
    double max_err;
    int64_t max_token;
    float *err_t; /* [T] relative difference per token */
} diag_device;

/* One mixer core over a sequence, step by step: CPU step against gpu_mixer_run (mode GPU_STEP
 * or GPU_PREFILL) from the same initial state. */
int diag_device_mixer(const mixer_ops *mx, const mixer_cfg *c, const mixer_seq *x, int mode,
                      double tol, diag_device *r, err *e);
/* A model over tokens: model_step with m->gpu = 0 against m->gpu = 1, logits per token. The
 * model is left at position 0. */
int diag_device_model(struct model *m, const int32_t *tokens, int T, double tol, diag_device *r,
                      err *e);
void diag_device_free(diag_device *r);

/* ---- per-layer replay (replay_layers.c) ---------------------------------------------------- */

/* `replay MIXER FILE layer=N|all`: runs replay_run on the tensors P + "layers.N." of one file
 * for one layer or every layer found, prints a line per layer (with the first non-finite value
 * of the inputs, probes and output), and when out_path is given writes every layer's outputs
 * into it as layers.N.o, layers.N.hT, layers.N.probe.<name>. `o` holds the mixer options (and
 * the already-read prefix, out, layer/layers keys). */
int diag_replay_layers(FILE *out, const mixer_ops *m, const char *in_path, const char *prefix,
                       const char *layer_spec, const char *out_path, opts *o, err *e);

/* ---- a core's inputs (inputs.c) ------------------------------------------------------------ */

/* The "replay" entry of a safetensors file's metadata (what `export inputs` writes): 1 and the
 * line in buf, 0 when there is none, -1 when the file cannot be read. */
int diag_inputs_replay_line(const char *path, char *buf, size_t n, err *e);
/* `diagnose FILE` on such a file: the core over its inputs from its initial state token by token
 * and with the parallel form side by side; prints the first chunk where they part by more than
 * tol and the first non-finite token of each. */
int diag_inputs(FILE *out, const char *path, double tol, err *e);

#endif
