/* cmd_figure.c: `view NAME` (live SDL windows) and `export logits|png|csv`.
 *
 * All three read the session's probe trace (or, with demo=1, a demo trace from viz/demo.h, so a
 * figure can be previewed without a model). PNGs carry provenance text chunks and CSVs a '#'
 * header with the same facts: the command, the checkpoint's SHA-256, the mixer(s) whose probes are
 * shown, the view, layer, head, token range and colour range.
 *
 * Windows: in the interactive REPL they stay open while commands are typed; readline's event hook
 * (called while it waits for a key) pumps them, so they redraw as tokens are stepped and answer
 * their keys. That hook takes no argument, hence the one file-scope pointer below. In batch use
 * (scripts, -c, piped input) `view` runs the windows until they are closed, then the script goes
 * on: a demo script can show a view, let the presenter step with space, and continue. */
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <readline/readline.h>

#include "../core/opts.h"
#include "../core/safetensors.h"
#include "../export/csv.h"
#include "../export/png.h"
#include "../export/vector.h"
#include "../models/model.h"
#include "../viz/demo.h"
#include "../viz/view.h"
#include "../viz/window.h"
#include "../train/history.h"
#include "../core/names.h"
#include "../export/dump.h"
#include "../engine/interv.h"
#include "../core/fileio.h"
#include "command.h"
#include "session.h"
#include "version.h"

/* The hex SHA-256 of the loaded checkpoint's weights, provided by the session owner (cli/), or
 * NULL when the model is random or none is loaded. Weak: "none" is reported until it exists. */

#define DEMO_TOKENS 160

static const char *checkpoint_sha(session *s) {
    const char *h = session_checkpoint_sha256(s);
    return h && *h ? h : "none (no checkpoint loaded: random model, raw mixer or demo)";
}

/* The command line for provenance: the REPL's, or rebuilt from the words (batch mode). */
static void command_text(session *s, const char *verb, int argc, char **argv, char *buf, size_t n) {
    if (s->current_command && *s->current_command) {
        snprintf(buf, n, "%s", s->current_command);
        return;
    }
    snprintf(buf, n, "%s", verb);
    for (int i = 0; i < argc; i++) {
        size_t u = strlen(buf);
        snprintf(buf + u, n - u, " %s", argv[i]);
    }
}

static int view_unknown(const char *name, err *e) {
    char names[200] = "";
    for (int i = 0; i < view_count; i++) {
        size_t u = strlen(names);
        snprintf(names + u, sizeof names - u, "%s%s", i ? ", " : "", view_all[i]->name);
    }
    return err_set(e, "unknown view '%.40s' (%s)", name, names);
}

/* Reads the view keys of a command into p; width/height/demo when asked for. */
static int parse_view_opts(opts *o, view_params *p, long *w, long *h, long *demo, err *e) {
    long layer, head, from, to, index, dim, seed;
    if (opts_int_in(o, "layer", 0, 0, INT_MAX, &layer, e) ||
        opts_int_in(o, "head", 0, 0, INT_MAX, &head, e) ||
        opts_int_in(o, "from", 0, 0, INT_MAX, &from, e) ||
        opts_int_in(o, "to", -1, 0, INT_MAX, &to, e) ||
        opts_int_in(o, "index", 0, 0, INT_MAX, &index, e) ||
        opts_int_in(o, "dim", 0, 0, INT_MAX, &dim, e) ||
        opts_int_in(o, "seed", 1, 0, INT_MAX, &seed, e) ||
        opts_int_in(o, "width", 1280, 16, 16384, w, e) ||
        opts_int_in(o, "height", 800, 16, 16384, h, e) ||
        opts_int_in(o, "demo", 0, 0, 1 << 20, demo, e))
        return -1;
    if (layer < 0 || head < 0 || index < 0 || from < 0)
        return err_set(e, "layer, head, index and from must be >= 0");
    if (to >= 0 && to <= from) return err_set(e, "to=%ld must be greater than from=%ld", to, from);
    if (*w < 320 || *w > 8192 || *h < 200 || *h > 8192)
        return err_set(e, "width and height must lie in 320..8192 and 200..8192 (got %ldx%ld)", *w,
                       *h);
    if (dim < 0 || dim > 256) return err_set(e, "dim=%ld: must lie in 0..256", dim);
    if (*demo < 0 || *demo > 100000)
        return err_set(e, "demo=%ld: 0 (off), 1 or a token count", *demo);
    view_params_default(p);
    p->layer = (int)layer, p->head = (int)head, p->index = (int)index;
    p->from = from, p->to = to, p->dim = (int)dim, p->seed = (uint64_t)seed;
    snprintf(p->probe, sizeof p->probe, "%s", opts_str(o, "probe", ""));
    snprintf(p->px, sizeof p->px, "%s", opts_str(o, "x", ""));
    snprintf(p->py, sizeof p->py, "%s", opts_str(o, "y", ""));
    return 0;
}

/* `set title` and `set labels` into a figure's parameters */
static void figure_settings(const session *s, view_params *p) {
    snprintf(p->title, sizeof p->title, "%s", s->set_title);
    snprintf(p->labels, sizeof p->labels, "%s", s->set_labels);
}

/* run=DIR of a history view: that run's log.csv replaces the session's training history */
static int history_run_opt(session *s, const view *v, opts *o, err *e) {
    const char *run = opts_str(o, "run", NULL);
    if (!run) return 0;
    if (!v->history) return err_set(e, "run=: only view train reads a run folder");
    return train_history_load(&s->train_tr, run, e);
}

/* The session's trace, or an explanation of why there is nothing to draw. */
static const trace *session_trace_or_err(session *s, const char *what, err *e) {
    if (s->eng.tr.nseries == 0 || s->eng.tr.T == 0) {
        err_set(e,
                "%s: no probes recorded yet (run tokens through a model or mixer first, or add "
                "demo=1 for a preview on demo data)",
                what);
        return NULL;
    }
    return &s->eng.tr;
}

/* Writes the figure drawn on c (a new 1280 x 800 drawing of nothing when c is NULL) with its
 * provenance: PNG text chunks, or through vo (vector.h) the SVG / PDF metadata. */
static int write_figure(session *s, const char *path, const char *cmd, const view *v,
                        const trace *tr, view_params *p, canvas *given, vector_out *vo, err *e) {
    canvas c;
    canvas *out = given;
    if (!given) {
        if (canvas_init(&c, 1280, 800, e)) return -1;
        out = &c;
    }
    char layer[16], head[16], tokens[80], software[128], seed[64];
    snprintf(seed, sizeof seed, "%ld (set seed: generators without seed=)", s->set_seed);
    snprintf(layer, sizeof layer, "%d", p->layer);
    snprintf(head, sizeof head, "%d", p->head);
    snprintf(tokens, sizeof tokens, "%lld..%lld of %lld", (long long)p->shown_from,
             (long long)p->shown_to - 1, (long long)tr->T);
    snprintf(software, sizeof software, "mixscope %s (commit %s)", MIXSCOPE_VERSION,
             mixscope_commit());
    png_text text[] = {
        {"Software", software},
        {"Command", cmd},
        {"Commands", session_history_text(s)},
        {"Seed", seed},
        {"Checkpoint SHA-256", checkpoint_sha(s)},
        {"Mixer", p->mixer[0] ? p->mixer : "none"},
        {"View", v->name},
        {"Layer", layer},
        {"Head", head},
        {"Tokens", p->shown_to > p->shown_from ? tokens : "none"},
        {"Colour range", p->crange[0] ? p->crange : "none"},
    };
    int n = (int)(sizeof text / sizeof text[0]);
    int rc =
        vo && vo->surf ? vector_end(vo, out, path, text, n, e) : png_write(path, out, text, n, e);
    if (!given) canvas_free(&c);
    return rc;
}

static int write_png(session *s, const char *path, const char *cmd, const view *v, const trace *tr,
                     view_params *p, canvas *given, err *e) {
    return write_figure(s, path, cmd, v, tr, p, given, NULL, e);
}

/* The view asks for what it draws: a note naming what the probe selection leaves out. */
static void note_unrecorded(session *s, const view *v) {
    if (!v->draws || s->eng.probes.mode == ENGINE_PROBES_DEFAULT ||
        s->eng.probes.mode == ENGINE_PROBES_ALL)
        return;
    char buf[512], miss[512] = "";
    snprintf(buf, sizeof buf, "%s", v->draws);
    for (char *w = strtok(buf, ","); w; w = strtok(NULL, ","))
        if (!engine_probe_wanted(&s->eng, w)) {
            size_t u = strlen(miss);
            snprintf(miss + u, sizeof miss - u, "%s%s", u ? ", " : "", w);
        }
    if (miss[0])
        fprintf(s->out,
                "note: view %s draws %s, which set probes %s does not record (set probes default "
                "and step again)\n",
                v->name, miss, engine_probes_text(&s->eng));
}

/* export png|svg|pdf VIEW FILE [scale= dpi= width= height= ...]: one drawing, three formats */
static int export_figure(session *s, int fmt, int argc, char **argv, err *e) {
    const char *kind = figure_format_name(fmt);
    if (argc < 3)
        return err_set(e,
                       "usage: export %s VIEW FILE.%s [scale= dpi= width= height= layer= head= "
                       "from= to= index= probe= dim= seed= demo=]",
                       kind, kind);
    const view *v = view_find(argv[1]);
    if (!v) return view_unknown(argv[1], e);
    int named = figure_format_of_path(argv[2]);
    if (named >= 0 && named != fmt)
        return err_set(e, "export %s: %s names a %s file; use export %s, or a .%s name", kind,
                       argv[2], figure_format_name(named), figure_format_name(named), kind);
    opts o;
    if (opts_parse(&o, argc - 3, argv + 3, e)) return -1;
    view_params p;
    long w, h, demo;
    double scale = 1, dpi = 0;
    int rc = opts_float(&o, "scale", 1.0, &scale, e) || opts_float(&o, "dpi", 0, &dpi, e) ||
                     history_run_opt(s, v, &o, e) || parse_view_opts(&o, &p, &w, &h, &demo, e) ||
                     opts_check_unused(&o, e)
                 ? -1
                 : 0;
    int both = opts_has(&o, "scale") && opts_has(&o, "dpi");
    opts_free(&o);
    if (!rc && both) rc = err_set(e, "scale= and dpi= say the same thing: give one");
    /* dpi: the figure's 1280 units are 1280 / 96 inches (CSS pixels), as SVG and browsers read
     * them; dpi=300 makes a PNG 3.125 times as many pixels a side */
    if (!rc && dpi != 0) scale = dpi / 96.0;
    if (!rc && !(scale >= 0.25 && scale <= 8))
        rc = err_set(e, "scale=%g (dpi=%g) must lie in 0.25..8 (dpi 24..768)", scale, scale * 96);
    if (rc) return err_prefix(e, "export %s", kind);
    figure_settings(s, &p);
    if (!demo) note_unrecorded(s, v);

    trace dt;
    trace_init(&dt);
    const trace *tr = NULL;
    if (demo) {
        if (demo_trace(&dt, v->name, demo > 1 ? (int)demo : DEMO_TOKENS, p.seed, e)) {
            trace_free(&dt);
            return err_prefix(e, "export %s", kind);
        }
        tr = &dt;
    } else if (v->history) {
        tr = &s->train_tr;
    } else if (!(tr = session_trace_or_err(s, "export", e))) {
        return -1;
    } else if (!strcmp(v->name, "attribution") && engine_attribution(&s->eng, p.layer, p.head, e)) {
        return err_prefix(e, "export %s", kind);
    }
    canvas c;
    char cmd[1024];
    command_text(s, "export", argc, argv, cmd, sizeof cmd);
    if (canvas_init_scaled(&c, (int)w, (int)h, fmt == FIG_PNG ? scale : 1.0, e)) {
        trace_free(&dt);
        return err_prefix(e, "export %s", kind);
    }
    vector_out vo = {0};
    rc = fmt != FIG_PNG ? vector_begin(&vo, &c, fmt, e) : 0;
    if (!rc) rc = v->draw(&c, tr, &p, e);
    if (!rc) rc = write_figure(s, argv[2], cmd, v, tr, &p, &c, &vo, e);
    if (vo.surf) vector_abort(&vo, &c);
    char whole[4096], size[64];
    if (fmt == FIG_PNG)
        snprintf(size, sizeof size, "%dx%d", c.pw, c.ph);
    else
        snprintf(size, sizeof size, "%ldx%ld pt", w, h);
    if (!rc && v->history)
        fprintf(s->out, "wrote %s (view %s, %s, %lld reports)\n",
                session_whole_path(argv[2], whole, sizeof whole), v->name, size, (long long)tr->T);
    else if (!rc)
        fprintf(s->out, "wrote %s (view %s, %s, layer %d head %d, tokens %lld..%lld)\n",
                session_whole_path(argv[2], whole, sizeof whole), v->name, size, p.layer, p.head,
                (long long)p.shown_from, (long long)p.shown_to - 1);
    canvas_free(&c);
    trace_free(&dt);
    return rc ? err_prefix(e, "export %s", kind) : 0;
}

static int export_png(session *s, int argc, char **argv, err *e) {
    return export_figure(s, FIG_PNG, argc, argv, e);
}
static int export_svg(session *s, int argc, char **argv, err *e) {
    return export_figure(s, FIG_SVG, argc, argv, e);
}
static int export_pdf(session *s, int argc, char **argv, err *e) {
    return export_figure(s, FIG_PDF, argc, argv, e);
}

/* export csv attribution FILE [layer= head=]: M as a matrix, one row per output token i. */
static int export_csv_attribution(session *s, int argc, char **argv, err *e) {
    opts o;
    if (opts_parse(&o, argc - 3, argv + 3, e)) return err_prefix(e, "export csv attribution");
    long layer, head;
    int rc = opts_int_in(&o, "layer", 0, 0, INT_MAX, &layer, e) ||
             opts_int_in(&o, "head", 0, 0, INT_MAX, &head, e) || opts_check_unused(&o, e);
    opts_free(&o);
    if (rc) return err_prefix(e, "export csv attribution");
    if (engine_attribution(&s->eng, (int)layer, (int)head, e)) return err_prefix(e, "export csv");
    const trace *tr = &s->eng.tr;
    int km = trace_find_snapshot(tr, "attribution"),
        kd = trace_find_snapshot(tr, "attribution_decay");
    int T = tr->snaps[km].rows;
    const float *M = trace_snapshot_at(tr, km, 0, 0), *Md = trace_snapshot_at(tr, kd, 0, 0);
    atomic_file af;
    if (atomic_open(&af, argv[2], e)) return err_prefix(e, "export csv");
    char cmd[1024];
    command_text(s, "export", argc, argv, cmd, sizeof cmd);
    fprintf(af.fp,
            "# mixscope exact attribution: o_i = sum_j M_ij v_j + o_init_i (decay and key removal "
            "included)\n# command: %s\n# layer %ld head %ld, %d tokens; columns: i, j, M_ij, "
            "decay_only, key_removal (rows with j <= i)\n",
            cmd, layer, head, T);
    fprintf(af.fp, "i,j,M,decay_only,key_removal\n");
    for (int i = 0; i < T; i++)
        for (int j = 0; j <= i; j++) {
            size_t k = (size_t)i * T + j;
            fprintf(af.fp, "%d,%d,%.9g,%.9g,%.9g\n", i, j, M[k], Md[k], M[k] - Md[k]);
        }
    if (atomic_commit(&af, e)) return err_prefix(e, "export csv");
    char whole[4096];
    fprintf(s->out, "wrote %s (attribution, layer %ld head %ld, %d tokens, %lld rows)\n",
            session_whole_path(argv[2], whole, sizeof whole), layer, head, T,
            (long long)T * (T + 1) / 2);
    return 0;
}

static int export_csv(session *s, int argc, char **argv, err *e) {
    if (argc < 3)
        return err_set(
            e, "usage: export csv PROBE FILE.csv [layer= head= from= to= format=long|wide]");
    if (!strcmp(argv[1], "attribution")) return export_csv_attribution(s, argc, argv, e);
    opts o;
    if (opts_parse(&o, argc - 3, argv + 3, e)) return -1;
    long layer, head, from, to, demo;
    const char *fmt = opts_str(&o, "format", NULL);
    int wide = fmt && !strcmp(fmt, "wide");
    if (fmt && !wide && strcmp(fmt, "long")) {
        err_set(e, "export csv: format=%.40s (long or wide)", fmt);
        opts_free(&o);
        return -1;
    }
    int rc = opts_int_in(&o, "layer", -1, 0, INT_MAX, &layer, e) ||
                     opts_int_in(&o, "head", -1, 0, INT_MAX, &head, e) ||
                     opts_int_in(&o, "from", 0, 0, INT_MAX, &from, e) ||
                     opts_int_in(&o, "to", -1, 0, INT_MAX, &to, e) ||
                     opts_int_in(&o, "demo", 0, 0, 1 << 20, &demo, e) || opts_check_unused(&o, e)
                 ? -1
                 : 0;
    opts_free(&o);
    if (rc) return err_prefix(e, "export csv");
    trace dt;
    trace_init(&dt);
    const trace *tr;
    if (demo) {
        /* the demo with this probe: the delta stack has most of them */
        const char *demos[] = {"kaczmarz", "kalman", "kata", "parallax"};
        for (int i = 0; i < 4; i++) {
            trace_free(&dt);
            trace_init(&dt);
            if (demo_trace(&dt, demos[i], demo > 1 ? (int)demo : DEMO_TOKENS, 1, e)) {
                trace_free(&dt);
                return err_prefix(e, "export csv");
            }
            if (trace_find(&dt, argv[1]) >= 0) break;
        }
        tr = &dt;
    } else if (!(tr = session_trace_or_err(s, "export csv", e))) {
        return -1;
    }
    int si = trace_find(tr, argv[1]);
    if (si < 0) {
        const char *cand[256];
        int nc = 0;
        for (int i = 0; i < tr->nseries && nc < 256; i++) cand[nc++] = tr->series[i].name;
        const char *near = names_closest(argv[1], cand, nc);
        if (near) {
            trace_free(&dt);
            return err_set(e, "export csv: no probe '%.60s' (did you mean %s?)", argv[1], near);
        }
        char names[400] = "";
        for (int i = 0; i < tr->nseries && strlen(names) < 320; i++) {
            size_t u = strlen(names);
            snprintf(names + u, sizeof names - u, "%s%s", i ? " " : "", tr->series[i].name);
        }
        trace_free(&dt);
        return err_set(e, "export csv: no probe '%.60s' in the trace (have: %s)", argv[1], names);
    }
    const trace_series *se = &tr->series[si];
    if (layer >= se->layers || head >= se->heads) {
        int L = se->layers, H = se->heads;
        trace_free(&dt);
        return err_set(e, "export csv: probe '%s' has %d layers and %d heads", argv[1], L, H);
    }
    int64_t f = from < 0 ? 0 : from, t = to < 0 || to > tr->T ? tr->T : to;
    if (f > t) f = t;
    char cmd[1024], software[128], shape[96], sel[64], tokens[80], meaning[300];
    command_text(s, "export", argc, argv, cmd, sizeof cmd);
    snprintf(software, sizeof software, "mixscope %s (commit %s)", MIXSCOPE_VERSION,
             mixscope_commit());
    snprintf(shape, sizeof shape, "%d layers x %d heads x %d values", se->layers, se->heads,
             se->width);
    char lb[16] = "all", hb[16] = "all";
    if (layer >= 0) snprintf(lb, sizeof lb, "%ld", layer);
    if (head >= 0) snprintf(hb, sizeof hb, "%ld", head);
    snprintf(sel, sizeof sel, "layer %s, head %s", lb, hb);
    snprintf(tokens, sizeof tokens, "%lld..%lld of %lld", (long long)f, (long long)t - 1,
             (long long)tr->T);
    snprintf(meaning, sizeof meaning, "%s: %s", se->name, se->meaning);
    /* the mixer of the layers shown: the lane's label (the probe's source names only the first
     * mixer that registered it) */
    const char *mixer = NULL;
    int l_lo = layer >= 0 ? (int)layer : 0, l_hi = layer >= 0 ? (int)layer + 1 : se->layers;
    for (int l = l_lo; l < l_hi; l++) {
        const char *lb = trace_label(tr, l);
        if (lb && mixer && strcmp(mixer, lb)) mixer = "several (see lanes)";
        if (lb && !mixer) mixer = lb;
    }
    if (!mixer) mixer = se->source;
    csv_meta meta[] = {
        {"software", software},
        {"command", cmd},
        {"checkpoint_sha256", checkpoint_sha(s)},
        {"mixer", mixer},
        {"probe", meaning},
        {"shape", shape},
        {"selection", sel},
        {"tokens", t > f ? tokens : "none"},
    };
    rc = csv_write_series(argv[2], tr, si, (int)layer, (int)head, f, t, wide ? CSV_WIDE : CSV_LONG,
                          e) ||
         csv_write_sidecar(argv[2], tr, meta, (int)(sizeof meta / sizeof meta[0]), e);
    char whole[4096];
    if (!rc) {
        long long nl = layer >= 0 ? 1 : se->layers, nh = head >= 0 ? 1 : se->heads;
        long long rows = wide ? (long long)(t - f) : (long long)(t - f) * nl * nh * se->width;
        fprintf(s->out, "wrote %s and %s.json (probe %s, %s, %lld rows)\n",
                session_whole_path(argv[2], whole, sizeof whole), whole, se->name,
                wide ? "wide" : "long", rows);
    }
    trace_free(&dt);
    return rc ? err_prefix(e, "export csv") : 0;
}

/* ---- windows ---- */

/* readline's event hook has no argument: the open windows live here (their hooks carry the
 * session). */
static window_set *g_windows;

static const trace *hook_trace(void *ctx, const view *v) {
    session *s = ctx;
    return v->history ? &s->train_tr : &s->eng.tr;
}

static int hook_step(void *ctx, err *e) {
    return command_exec((session *)ctx, "step", e);
}

static int hook_save(void *ctx, canvas *c, const view *v, const view_params *p, char *path,
                     size_t n, err *e) {
    session *s = ctx;
    for (int i = 1; i < 10000; i++) {
        snprintf(path, n, "mixscope-%s-%d.png", v->name, i);
        FILE *f = fopen(path, "rb");
        if (!f) break;
        fclose(f);
    }
    char cmd[160];
    snprintf(cmd, sizeof cmd, "view %s (saved from the window with s)", v->name);
    view_params q = *p;
    /* redraw into a scratch canvas to learn what the frame showed (mixer, colour range) */
    canvas tmp;
    if (canvas_init(&tmp, c->w, c->h, e)) return -1;
    err ignore = {{0}};
    v->draw(&tmp, &s->eng.tr, &q, &ignore);
    canvas_free(&tmp);
    return write_png(s, path, cmd, v, &s->eng.tr, &q, c, e);
}

static void windows_done(void) {
    window_set_free(g_windows);
    g_windows = NULL;
    rl_event_hook = NULL;
}

static int pump_hook(void) {
    if (g_windows && window_pump(g_windows, 0) == 0) windows_done();
    return 0;
}

static int run_view(session *s, int argc, char **argv, const char *rest, err *e) {
    (void)rest;
    if (!strcmp(argv[1], "list")) {
        for (int i = 0; i < view_count; i++)
            fprintf(s->out, "  %-9s %s\n", view_all[i]->name, view_all[i]->summary);
        return 0;
    }
    if (!strcmp(argv[1], "close")) {
        if (g_windows) windows_done();
        return 0;
    }
    const view *v = view_find(argv[1]);
    if (!v) return view_unknown(argv[1], e);
    opts o;
    if (opts_parse(&o, argc - 2, argv + 2, e)) return -1;
    view_params p;
    long w, h, demo;
    int rc = history_run_opt(s, v, &o, e) || parse_view_opts(&o, &p, &w, &h, &demo, e) ||
                     opts_check_unused(&o, e)
                 ? -1
                 : 0;
    opts_free(&o);
    if (rc) return err_prefix(e, "view");
    figure_settings(s, &p);
    if (demo)
        return err_set(e, "view: demo= is for export png; a window shows the session's trace");
    if (!strcmp(v->name, "attribution") && engine_attribution(&s->eng, p.layer, p.head, e))
        return err_prefix(e, "view");
    note_unrecorded(s, v);
    char why[256];
    if (!g_windows && !window_display_ok(why, sizeof why)) {
        fprintf(s->out,
                "view: %s; render it to a file instead:\n  export png %s %s.png [layer= head= "
                "from= to=]\n",
                why, v->name, v->name);
        return 0;
    }
    window_hooks hooks = {s, hook_trace, hook_step, hook_save};
    if (!g_windows && !(g_windows = window_set_new(&hooks, e))) return err_prefix(e, "view");
    if (window_open(g_windows, v, &p, (int)w, (int)h, e)) {
        if (!window_count(g_windows)) windows_done();
        return err_prefix(e, "view");
    }
    if (s->interactive && !s->batch) {
        /* the REPL goes on; readline pumps the windows while it waits for keys */
        rl_event_hook = pump_hook;
        rl_set_keyboard_input_timeout(20000);
        return 0;
    }
    /* scripts: the windows run until closed, then the script continues */
    fprintf(s->out, "view %s: close the window (q) to continue\n", v->name);
    fflush(s->out);
    while (window_pump(g_windows, 30) > 0 && !session_interrupted(s)) {
    }
    windows_done();
    return 0;
}

const command cmd_view = {
    "view",
    "NAME|list|close [layer= head= from= to= index= probe= width= height=]",
    "show a view live in a window (needs a display)",
    "  view NAME [layer=L head=H from=A to=B index=I probe=P dim=D seed=S width=W\n"
    "      height=H] open a window showing view NAME over the session's probe trace;\n"
    "      it redraws as tokens are stepped. Several windows can be open at once.\n"
    "  view list     the views and what they show\n"
    "  view close    close every window\n"
    "Keys in a window: space steps one token, Left/Right change the head, Up/Down the\n"
    "layer, [ and ] the index (Kalman lane, element of a wide probe), s saves a PNG\n"
    "with provenance, q or Escape closes it. In scripts (-c, .scene files) the script\n"
    "waits until the windows are closed. Without a display, view says so: use 'export\n"
    "png NAME FILE.png' instead.\n"
    "Views: kaczmarz kalman kata parallax state recall probes precision\n"
    "(docs/views.md).",
    1,
    -1,
    run_view,
    COMPLETE_VIEW,
    "layer head from to index probe dim seed width height x y"};

/* Tab completion's list of view names (cli/repl.c asks for it). */
const char *const *view_names(void) {
    static const char *names[64];
    int n = 0;
    for (int i = 0; i < view_count && n < 63; i++) names[n++] = view_all[i]->name;
    names[n] = NULL;
    return names;
}

/* ---- export: one command word, a sub-command per kind of file ---- */

/* ---- export logits ---- */

static int export_logits(session *s, int argc, char **argv, err *e) {
    if (argc != 2) return err_set(e, "usage: export logits FILE.safetensors");
    if (!s->eng.model) return err_set(e, "no model (load PATH or model random MIXER first)");
    int T = s->eng.model->pos, V = s->eng.model->c.vocab;
    if (T == 0 || !s->eng.logits) return err_set(e, "export logits: no tokens have run yet");
    int64_t ls[3] = {1, T, V}, is[2] = {1, T};
    tensor lt = {.name = "logits",
                 .dtype = DT_F32,
                 .ndim = 3,
                 .data = s->eng.logits,
                 .nbytes = (size_t)T * V * sizeof(float)};
    tensor it = {.name = "input_ids",
                 .dtype = DT_I32,
                 .ndim = 2,
                 .data = s->eng.tokens,
                 .nbytes = (size_t)T * sizeof(int32_t)};
    memcpy(lt.shape, ls, sizeof ls), memcpy(it.shape, is, sizeof is);
    const tensor *ts[2] = {&lt, &it};
    /* provenance: where the model came from and the command that wrote the file */
    char md[1400], src[600], cmd[600];
    size_t o = 0;
    for (const char *p = s->eng.model->source; *p && o + 2 < sizeof src; p++) {
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

/* ---- export inputs / state (export/dump.h) ---- */

static int export_inputs(session *s, int argc, char **argv, err *e) {
    if (argc < 2) return err_set(e, "usage: export inputs FILE.safetensors [layer= from= to=]");
    opts o;
    if (opts_parse(&o, argc - 2, argv + 2, e)) return err_prefix(e, "export inputs");
    long layer, from, to;
    int rc = opts_int_in(&o, "layer", 0, 0, INT_MAX, &layer, e) ||
             opts_int_in(&o, "from", -1, 0, INT_MAX, &from, e) ||
             opts_int_in(&o, "to", -1, 0, INT_MAX, &to, e) || opts_check_unused(&o, e);
    opts_free(&o);
    if (rc) return err_prefix(e, "export inputs");
    char line[256];
    if (dump_inputs(&s->eng, argv[1], (int)layer, (int)from, (int)to, s->current_command, line,
                    sizeof line, e))
        return err_prefix(e, "export inputs");
    int f = from < 0 ? 0 : (int)from, t = to < 0 ? engine_pos(&s->eng) - 1 : (int)to;
    char *sp = strchr(line, ' ');
    fprintf(s->out, "wrote the inputs of layer %ld for tokens %d..%d to %s\n", layer, f, t,
            argv[1]);
    fprintf(s->out, "replay them with: replay %.*s %s%s\n",
            sp ? (int)(sp - line) : (int)strlen(line), line, argv[1], sp ? sp : "");
    return 0;
}

static int export_state(session *s, int argc, char **argv, err *e) {
    if (argc < 2) return err_set(e, "usage: export state FILE.safetensors [layer=]");
    opts o;
    if (opts_parse(&o, argc - 2, argv + 2, e)) return err_prefix(e, "export state");
    long layer;
    int rc = opts_int_in(&o, "layer", -1, 0, INT_MAX, &layer, e) || opts_check_unused(&o, e);
    opts_free(&o);
    if (rc) return err_prefix(e, "export state");
    int n = 0;
    if (dump_state(&s->eng, argv[1], (int)layer, s->current_command, &n, e))
        return err_prefix(e, "export state");
    fprintf(s->out, "wrote the state at position %d (%d tensor%s) to %s\n", engine_pos(&s->eng), n,
            n == 1 ? "" : "s", argv[1]);
    return 0;
}

typedef int export_fn(session *s, int argc, char **argv, err *e);

static const struct {
    const char *kind;
    export_fn *fn;
    const char *usage;
} KINDS[] = {
    {"logits", export_logits, "export logits FILE.safetensors"},
    {"png", export_png, "export png VIEW FILE.png [scale= dpi= width= height= layer= head=]"},
    {"svg", export_svg, "export svg VIEW FILE.svg [width= height= layer= head= from= to=]"},
    {"pdf", export_pdf, "export pdf VIEW FILE.pdf [width= height= layer= head= from= to=]"},
    {"csv", export_csv, "export csv PROBE FILE.csv [layer= head= from= to= format=long|wide]"},
    {"inputs", export_inputs, "export inputs FILE.safetensors [layer= from= to=]"},
    {"state", export_state, "export state FILE.safetensors [layer=]"},
};

static int run_export(session *s, int argc, char **argv, const char *rest, err *e) {
    (void)rest;
    for (size_t i = 0; i < sizeof KINDS / sizeof KINDS[0]; i++) {
        if (strcmp(argv[1], KINDS[i].kind) != 0) continue;
        return KINDS[i].fn(s, argc - 1, argv + 1, e);
    }
    return err_set(e, "export: unknown kind '%.40s' (logits, png, svg, pdf, csv, inputs, state)",
                   argv[1]);
}

const command cmd_export = {
    "export",
    "logits|png|svg|pdf|csv|inputs|state ...",
    "write logits, a view (PNG, SVG, PDF), a probe (CSV), a core's inputs or state",
    "  export logits FILE.safetensors\n"
    "      float32 tensor 'logits' [1, T, V] of the tokens run so far\n"
    "  export png VIEW FILE.png [scale= dpi= width= height= layer= head= from= to=]\n"
    "      render a view without a display; the PNG carries provenance text chunks.\n"
    "      width x height (1280 x 800) is the layout; scale=2 (or dpi=192) doubles\n"
    "      the pixels, text and lines with them\n"
    "  export svg|pdf VIEW FILE [width= height= layer= head= from= to=]\n"
    "      the same drawing as vectors; provenance in the SVG's <metadata> or the\n"
    "      PDF's document information. A FILE ending in another format's extension is\n"
    "      refused\n"
    "  export csv PROBE FILE.csv [layer= head= from= to= format=long|wide]\n"
    "      long (default): token,layer,head,lane,probe,value, one row per value;\n"
    "      wide: token,l0h0,l0h1,..., one row per token; provenance in FILE.csv.json\n"
    "  export csv attribution FILE.csv [layer= head=]\n"
    "      the exact attribution M (show attribution): i, j, M_ij, decay-only, key\n"
    "      removal\n"
    "  export inputs FILE.safetensors [layer=L from=T to=T]\n"
    "      what layer (lane) L's core saw at tokens from..to, in replay's layout (q k\n"
    "      v [1, T, H, D], g, beta or eta [1, T, H], ...) with its state before token\n"
    "      from (h0 [1, H, K, V]); prints the replay line that reproduces the core's\n"
    "      output\n"
    "  export state FILE.safetensors [layer=L]\n"
    "      the state now: h [1, H, K, V] of lane L (raw mode), layers.N.h of every\n"
    "      layer (model mode), other state parts under their own names\n"
    "Files are written to a temporary file and renamed: whole or not at all.",
    2,
    -1,
    run_export,
    COMPLETE_FILE | COMPLETE_VIEW | COMPLETE_PROBE,
    "width height layer head from to format scale dpi x y index probe dim seed demo"};
