/* engine.h: stepping and recording. One path for both modes of a session:
 *
 *   model mode     a loaded or random model (models/) over token ids
 *   raw-mixer mode one stream (scenes/stream.h) through one or more mixer cores side by side,
 *                  each core a "lane" recorded as layer 0, 1, ... of the trace
 *
 * The engine owns what stepping needs: the model or the lanes, the tokens and their logits, the
 * position, the probe trace and what goes into it (the probe selection, `set probes`), the recall
 * readback, the first-NaN check (engine/nonfinite.h), the device (CPU, or the GPU-resident stepper
 * of models/model_gpu.h where it supports the model) and a progress / interrupt callback.
 * cli/ parses commands and prints what the engine recorded; it never steps anything itself.
 *
 * Recording, per token and layer (or lane): the core's probes by name, the "state" snapshot
 * ([H][dk][dv]), the attention rows of softmax / Parallax layers, the keys and values the core
 * saw ("k", "v"), the readback picture ("recall", viz/recall.h), the families' and blocks'
 * probes; in raw mode also three series of the stream itself:
 *   recall_err [lanes][H][1]  |o - v*| / |v*| on query tokens (v* the right answer), NaN on writes
 *   key_norm   [lanes][H][1]  |k| of the token's key (the stream's, the same for every lane)
 *   out_norm   [lanes][H][1]  |o|, the lane's output
 * A step that meets a NaN / Inf stops after that token (it is in the trace) and names it. */
#ifndef MIXSCOPE_ENGINE_H
#define MIXSCOPE_ENGINE_H

#include <stdint.h>

#include "../core/err.h"
#include "../core/trace.h"
#include "../scenes/raw.h"
#include "../scenes/stream.h"

struct model;
struct model_gpu;
struct recall_tracker;

enum { ENGINE_CPU = 0, ENGINE_GPU = 1 };
enum { ENGINE_GM_SYNC = 0, ENGINE_GM_GPU_AHEAD = 1, ENGINE_GM_CPU_AHEAD = 2 };

/* The KV capacity growing cores get at least (softmax, parallax caches), in tokens. */
#define ENGINE_MIN_MAX_T MIXER_DEFAULT_MAX_T
/* The readback picture ("recall") is recorded for the first tokens only. */
#define ENGINE_RECALL_MAX_TOKENS 1024
/* Conditions `set stop-on` takes. */
#define ENGINE_MAX_STOP 8
/* Heads of a raw lane (the stream's per-head series are kept in fixed arrays). */
#define ENGINE_RAW_MAX_HEADS 64

/* Raw-mixer mode: the lanes and their stream. */
typedef struct raw_mode {
    int on;                       /* a mixer is selected: step / run / reset act on the lanes */
    int nl;                       /* lanes */
    raw_lane lane[RAW_MAX_LANES]; /* the cores, layer l of the trace */
    char specs[RAW_MAX_LANES][64];
    char shared[320]; /* option words every lane gets */
    int H, dk, dv;
    raw_stream st;  /* st.T == 0: no stream yet */
    int pos;        /* the next token to run */
    float *scratch; /* [raw_scratch_floats] */
    /* device gpu: each lane's state resident on the GPU (kernels/gpu_lanes.h), made on the first
     * GPU advance; the host copy (lane[l].state) is brought up to date at the end of every
     * advance. gl_valid: 0 when the host state changed since (reset, CPU steps): uploaded first */
    struct gpu_lane *glane[RAW_MAX_LANES];
    int gl_valid;
} raw_mode;

/* What goes into the trace while stepping (`set probes`).
 *   ENGINE_PROBES_DEFAULT  what the views of the loaded mixers draw (engine_probe_default)
 *   ENGINE_PROBES_ALL      every probe, the readback picture and the attention rows included
 *   ENGINE_PROBES_LIST     the names in `names` (comma separated)
 *   ENGINE_PROBES_NONE     nothing but the stream series of raw mode and the logits */
enum { ENGINE_PROBES_DEFAULT, ENGINE_PROBES_ALL, ENGINE_PROBES_LIST, ENGINE_PROBES_NONE };
typedef struct engine_probes {
    int mode;
    char names[512];
} engine_probes;

/* Called every token of a long step or run: done = 1..total. Non-zero stops the run there
 * ("interrupted at token N"). */
typedef int (*engine_tick_fn)(void *ctx, long done, long total);

typedef struct engine {
    int device; /* ENGINE_CPU or ENGINE_GPU (engine_set_device) */

    /* model mode */
    struct model *model; /* NULL until engine_set_model */
    int32_t *tokens;     /* [ntokens]: the ids to run */
    int ntokens;
    float *logits; /* [ntokens, vocab]: logits of the tokens run so far */
    int32_t *top;  /* [ntokens]: the argmax next token after each token run */
    float *topp;   /* [ntokens]: its probability */

    /* raw-mixer mode (NULL or off: none) */
    raw_mode *raw;

    /* the trace of whichever mode is active; tr_ready: it holds the current schema */
    trace tr;
    int tr_ready;

    /* settings read while stepping */
    engine_probes probes; /* set probes */
    double lla;           /* set lla: LLA beside attention layers, ridge (0: off) */
    int chunk;            /* set chunk: prefill chunk of raw lanes (0: the mixer's) */

    engine_tick_fn tick;
    void *tick_ctx;

    /* the GPU-resident stepper of the model (device gpu, where supported) and which side holds
     * the newer state (ENGINE_GM_*: the other is brought up to date before it is used) */
    struct model_gpu *gm;
    int gm_where;
    char gm_why[160]; /* why the model steps on the CPU under device gpu, or "" */
    int gm_noted;     /* the cli said so once for this model */

    /* whether a loaded core updates the readback incrementally (probes.c), found once per
     * schema: -1 not yet */
    int recall_cheap;

    /* per layer (or lane): the readback picture, updated as the state changes */
    struct recall_tracker **rt;
    int nrt;

    /* edits, snapshots, restores and ablations (engine/interv.h); NULL: none yet */
    struct engine_ivs *ivs;
    /* changes whenever the run's states change other than by stepping on (reset, new tokens,
     * an edit): what was computed from the run (attribution) is recomputed */
    unsigned long gen;

    /* `set stop-on`: conditions checked after every token (engine_set_stop_on) */
    int nstop;
    struct engine_stop {
        char name[32]; /* a recorded series ("state_norm", "beta", ...); "" for nonfinite */
        char op;       /* '>' or '<'; 'n' nonfinite */
        double x;
    } stop[ENGINE_MAX_STOP];
    char stop_spec[256];
    /* the last stop on a condition: its message ("" none) and where */
    char stopped[ERR_MSG_MAX];
    int stop_token, stop_layer, stop_head;
} engine;

int engine_init(engine *g, err *e);
void engine_free(engine *g);

/* ---- device ---- */
/* ENGINE_GPU needs a usable CUDA device (a one-line reason otherwise; the device stays). */
int engine_set_device(engine *g, int device, err *e);
/* Under device gpu with a model: how it steps, one line into buf ("resident on the gpu, up to
 * 64 tokens a call" or "on the cpu: <why>"); "" otherwise. Makes nothing on the GPU. */
void engine_gpu_status(const engine *g, char *buf, size_t n);

/* ---- model mode ---- */
/* Takes ownership of m (frees the previous model), leaves raw-mixer mode, keeps the tokens when
 * they fit m's vocabulary (otherwise drops them and says so in `note`, "" when nothing to say). */
int engine_set_model(engine *g, struct model *m, char *note, size_t note_n, err *e);
void engine_free_model(engine *g);
/* The ids to run (checked against the model's vocabulary); position back to 0. */
int engine_set_tokens(engine *g, const int32_t *ids, int n, err *e);
/* The model changed under the engine (swap, arith): new schema, position 0. */
int engine_model_changed(engine *g, err *e);

/* The tokens from position 0 with every layer's core replaced by spec (NAME[:k=v,...]) into tr
 * (every probe registered) and logits [ntokens, vocab]; the original cores back after, position
 * 0. Returns 0, 1 when the spec cannot feed this model (why says so), -1 on an error. */
int engine_try_cores(engine *g, const char *spec, trace *tr, float *logits, char *why, size_t n,
                     err *e);

/* ---- raw-mixer mode ---- */
int engine_raw_active(const engine *g);
/* Selects lanes (specs: NAME or NAME:k=v,..., shared option words) of H heads; keeps a stream
 * of the same dimensions. */
int engine_raw_select(engine *g, char specs[][64], int nl, const char *shared, int H, int dk,
                      int dv, err *e);
/* Feeds the lanes a new stream (takes ownership of *st; the lanes are rebuilt for its dims). */
int engine_raw_stream(engine *g, raw_stream *st, err *e);
/* Leaves raw-mixer mode (the lanes are kept for `mixer` to show; a model takes over). */
void engine_raw_leave(engine *g);
void engine_raw_free(engine *g);
/* Runs the whole stream from the prior state through lanes into an empty trace (compare). */
int engine_raw_run_all(engine *g, trace *tr, raw_lane *lanes, int nl, const raw_stream *st, err *e);

/* ---- stepping, in whichever mode is active ---- */
/* The next position and the tokens there are (model: ntokens; raw: the stream's T). */
int engine_pos(const engine *g);
int engine_len(const engine *g);
/* Advances n tokens (clamped to what is left) recording the selected probes. */
int engine_step(engine *g, int n, err *e);
/* Every remaining token; prefill: the cores' parallel forms (model mode; no probes). */
int engine_run(engine *g, int prefill, err *e);
/* Back to position 0 (states and caches cleared, the trace emptied). */
int engine_reset(engine *g, err *e);

/* The model's own buffers (states, caches, position) brought up to date after GPU-resident
 * stepping: call before reading them directly (diagnose, snapshots, save). */
int engine_sync_model(engine *g, err *e);

/* Mean negative log-likelihood of the next token over positions [0, pos - 1) (model mode). */
double engine_mean_nll(const engine *g, int pos);

/* `set stop-on`: none | nonfinite | NAME>X | NAME<X, comma separated (NAME a recorded per-token
 * series: a core's probe such as state_norm, beta, rho, or a family's). Stepping then goes a
 * token at a time (on whichever device) and stops after the first token where a layer's (lane's)
 * head meets a condition: engine_step / engine_run return 0 with g->stopped saying which token,
 * layer, head and value, and stop_token / stop_layer / stop_head set. With nonfinite listed the
 * first NaN / Inf is such a stop too (without it, as always, an error). */
int engine_set_stop_on(engine *g, const char *spec, err *e);

/* ---- threads ---- */
/* CPU threads for dense products, the cores' heads and the recall rows (core/pool.h) and for
 * model building and loading (core/parallel.h): n = 0 every online core. */
int engine_threads(void);
int engine_set_threads(int n, err *e);

/* ---- probe selection ---- */
/* `set probes` value: all | default | none | NAME,NAME,... (unknown names refused, with the
 * known ones listed). Takes effect from the next token (a new schema at position 0). */
int engine_set_probes(engine *g, const char *spec, err *e);
/* The selection as text ("default", "all", "none" or the list). */
const char *engine_probes_text(const engine *g);
/* 1 when `name` (a probe, "state", "recall", "attn", a family or block probe) is recorded under
 * the current selection for the loaded mixers. */
int engine_probe_wanted(const engine *g, const char *name);
/* The cost class of a recorded quantity: "cheap" (O(d) a head and token), "O(d^2)" (about the
 * step's own cost), "expensive" (more than the step: O(n d) over a cache, O(d^3), ...). */
const char *engine_probe_cost(const char *mixer, const char *name);

#endif
