/* cmd_stream.c: raw-mixer mode's two commands.
 *
 *   mixer NAME [NAME ...] dk= dv= [heads=] [options]   select one or more cores ("lanes")
 *   stream keys|recall|overwrite ...                  the tokens to feed them (scenes/stream.h)
 *
 * The engine (engine/engine.h) holds the lanes and steps them; the lanes are layers of the
 * session's probe trace, so `show`, the views and `export csv` work on streams exactly as on
 * models. Selecting a mixer enters raw mode; `mixer off`, `load` or `model random` leave it. */
#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "../core/opts.h"
#include "../diag/diag.h"
#include "../mixers/kata_features.h"
#include "../mixers/record.h"
#include "../models/model.h"
#include "../scenes/prompts.h"
#include "../scenes/raw.h"
#include "../scenes/stream.h"
#include "../viz/recall.h"
#include "command.h"
#include "session.h"

/* A word names a lane when it has no '=' or a ':' comes before its first '='. */
static int is_lane_word(const char *w) {
    const char *eq = strchr(w, '='), *colon = strchr(w, ':');
    return !eq || (colon && colon < eq);
}

static void print_selection(session *s) {
    const raw_mode *r = s->eng.raw;
    fprintf(s->out, "mixer");
    for (int l = 0; l < r->nl; l++) fprintf(s->out, "%s %s", l ? "," : "", r->lane[l].label);
    fprintf(s->out, ": heads %d, dk %d, dv %d", r->H, r->dk, r->dv);
    if (r->nl > 1) fprintf(s->out, " (lanes = layers 0..%d of the trace)", r->nl - 1);
    fputc('\n', s->out);
    for (int l = 0; l < r->nl; l++)
        fprintf(s->out, "  layer %d %s: %s\n", l, r->lane[l].label, r->lane[l].words);
}

static int run_mixer(session *s, int argc, char **argv, const char *rest, err *e) {
    (void)rest;
    if (argc == 1) {
        if (!engine_raw_active(&s->eng)) {
            fprintf(s->out, "mixer: none selected (raw-mixer mode is off)\n");
            return 0;
        }
        print_selection(s);
        return 0;
    }
    if (argc == 2 && !strcmp(argv[1], "list")) {
        for (int i = 0; i < mixer_count; i++)
            if (mixer_all[i])
                fprintf(s->out, "  %-9s %s\n  %-9s options: %s\n", mixer_all[i]->name,
                        mixer_all[i]->summary, "", mixer_all[i]->options);
        fprintf(s->out, "  every lane also takes: %s (mixer help: help mixer)\n", RAW_GATE_KEYS);
        return 0;
    }
    if (argc == 2 && !strcmp(argv[1], "off")) {
        engine_raw_leave(&s->eng);
        fprintf(s->out, "raw-mixer mode off%s\n", s->eng.model ? " (back to the model)" : "");
        return 0;
    }
    char specs[RAW_MAX_LANES][64], shared[320] = "";
    int nl = 0;
    long H = 1, dk = 16, dv = 16;
    for (int i = 1; i < argc; i++) {
        const char *w = argv[i];
        if (is_lane_word(w)) {
            if (nl == RAW_MAX_LANES) return err_set(e, "mixer: at most %d lanes", RAW_MAX_LANES);
            if (strlen(w) >= sizeof specs[0]) return err_set(e, "mixer: '%.40s...' is too long", w);
            snprintf(specs[nl++], sizeof specs[0], "%s", w);
            continue;
        }
        long *dim = !strncmp(w, "heads=", 6) ? &H
                    : !strncmp(w, "dk=", 3)  ? &dk
                    : !strncmp(w, "dv=", 3)  ? &dv
                                             : NULL;
        if (dim) {
            char *end;
            const char *v = strchr(w, '=') + 1;
            *dim = strtol(v, &end, 10);
            if (*end || end == v || *dim < 1 || *dim > 1024)
                return err_set(e, "mixer: %s must be an integer in 1..1024", w);
            continue;
        }
        size_t u = strlen(shared);
        if (u + strlen(w) + 2 > sizeof shared) return err_set(e, "mixer: too many options");
        snprintf(shared + u, sizeof shared - u, "%s%s", u ? " " : "", w);
    }
    if (!nl) return err_set(e, "mixer: name a mixer (mixer list shows them)");
    if (engine_raw_select(&s->eng, specs, nl, shared, (int)H, (int)dk, (int)dv, e))
        return err_prefix(e, "mixer");
    print_selection(s);
    if (s->eng.raw->st.T) fprintf(s->out, "stream kept: %s\n", s->eng.raw->st.desc);
    return 0;
}

const command cmd_mixer = {
    "mixer",
    "NAME[:k=v,...] [NAME ...] [heads=1 dk=16 dv=16] [options] | list | off",
    "raw-mixer mode: select mixer cores to feed raw streams (no model)",
    "  mixer NAME [NAME ...] [heads=1] [dk=16] [dv=16] [option=value ...]\n"
    "      selects one or more cores; each is a lane, recorded as layer 0, 1, ... of\n"
    "      the trace, all fed the same stream. Options after the names go to every\n"
    "      lane; NAME:k=v,k=v gives one lane its own (they win). Besides each mixer's\n"
    "      options (mixer list) a lane takes the stream's gates: decay= (alpha per\n"
    "      write, g = log decay; default 1), beta= (gdn, deltanet, kata delta; 1),\n"
    "      eta= (kaczmarz; 1), lambda_v= (kalman; 1), a= p= (kalman dynamics),\n"
    "      rscale= (parallax probe |r|; 1). Linear memories read with scale=1,\n"
    "      softmax and parallax with scale=dk, unless scale= is given.\n"
    "  mixer          the selection      mixer list     mixers and their options\n"
    "  mixer off      leave raw-mixer mode (load / model random also leave it)\n"
    "Examples:\n"
    "  mixer gdn kaczmarz dk=16 dv=16            the Kaczmarz view's pair on one\n"
    "                                            stream\n"
    "  mixer kata:variant=m1 kata:variant=linear dk=8 dv=8\n"
    "  mixer kalman dk=8 dv=8 a=0.95 p=0.01 lambda_v=4",
    0,
    -1,
    run_mixer,
    COMPLETE_MIXER,
    "heads dk dv decay beta eta lambda_v a p rscale scale chunk eps variant"};

/* ---- stream ---- */

static int run_stream(session *s, int argc, char **argv, const char *rest, err *e) {
    (void)rest;
    if (!engine_raw_active(&s->eng))
        return err_set(e, "stream: no mixer (mixer NAME dk= dv= first)");
    const raw_mode *r = s->eng.raw;
    const char *kind = argv[1];
    int first_opt = 2;
    long n = 0;
    if (!strcmp(kind, "keys")) {
        if (argc < 3 || strchr(argv[2], '='))
            return err_set(e, "usage: stream keys N [norms=LO..HI] [seed=] [dk= dv= heads=]");
        char *end;
        n = strtol(argv[2], &end, 10);
        if (*end || n < 1) return err_set(e, "stream keys: N must be a positive integer");
        first_opt = 3;
    } else if (strcmp(kind, "recall") && strcmp(kind, "overwrite")) {
        return err_set(e, "stream: expected keys, recall or overwrite, got '%.40s'", kind);
    }
    opts o;
    if (opts_parse(&o, argc - first_opt, argv + first_opt, e))
        return err_prefix(e, "stream %s", kind);
    long H, dk, dv, seed, a = 0, b = 0;
    double lo, hi;
    int rc = opts_int_in(&o, "heads", r->H, 1, ENGINE_RAW_MAX_HEADS, &H, e) ||
             opts_int_in(&o, "dk", r->dk, 1, 1024, &dk, e) ||
             opts_int_in(&o, "dv", r->dv, 1, 1024, &dv, e) ||
             opts_int_in(&o, "seed", setting_seed(s), 0, LONG_MAX, &seed, e) ||
             opts_range(&o, "norms", 1.0, 1.0, &lo, &hi, e);
    if (!rc && !strcmp(kind, "recall"))
        rc = opts_int_in(&o, "pairs", 16, 1, 1 << 22, &a, e) ||
             opts_int_in(&o, "queries", a, 0, 1 << 22, &b, e);
    if (!rc && !strcmp(kind, "overwrite"))
        rc = opts_int_in(&o, "keys", 8, 1, 1 << 22, &a, e) ||
             opts_int_in(&o, "repeats", 2, 1, 1 << 16, &b, e);
    if (!rc) rc = opts_check_unused(&o, e);
    opts_free(&o);
    if (rc) return err_prefix(e, "stream %s", kind);
    if (H < 1 || H > ENGINE_RAW_MAX_HEADS || dk < 1 || dk > 1024 || dv < 1 || dv > 1024)
        return err_set(e, "stream %s: heads, dk, dv out of range (1..%d, 1..1024, 1..1024)", kind,
                       ENGINE_RAW_MAX_HEADS);
    if (a > 1 << 22 || b > 1 << 22 || n > 1 << 22)
        return err_set(e, "stream %s: at most %d tokens", kind, 1 << 22);
    raw_stream st;
    if (!strcmp(kind, "keys"))
        rc = stream_keys(&st, (int)n, (int)H, (int)dk, (int)dv, lo, hi, (uint64_t)seed, e);
    else if (!strcmp(kind, "recall"))
        rc =
            stream_recall(&st, (int)a, (int)b, (int)H, (int)dk, (int)dv, lo, hi, (uint64_t)seed, e);
    else
        rc = stream_overwrite(&st, (int)a, (int)b, (int)H, (int)dk, (int)dv, lo, hi, (uint64_t)seed,
                              e);
    if (rc) return -1;
    int redim = H != r->H || dk != r->dk || dv != r->dv;
    if (engine_raw_stream(&s->eng, &st, e)) return err_prefix(e, "stream %s", kind);
    fprintf(s->out, "stream %s\n", r->st.desc);
    if (r->st.nqueries || !strcmp(kind, "recall")) {
        double ma, ms, mean;
        stream_key_geometry(&r->st, 0, &ma, &ms, &mean);
        int N = r->st.nkeys;
        fprintf(s->out,
                "  keys (head 0): %d in R^%ld: max |cos| %.4f (Welch floor %.4f), max cos^2 %.4f "
                "(PSD floor %.4f), mean cos^2 %.4f (1/dk = %.4f)\n",
                N, dk, ma, kata_welch(N, (double)dk), ms, kata_psd_floor(N, (double)dk), mean,
                1.0 / (double)dk);
    }
    if (redim) fprintf(s->out, "  (lanes rebuilt for heads %ld, dk %ld, dv %ld)\n", H, dk, dv);
    return 0;
}

const command cmd_stream = {
    "stream",
    "keys N | recall | overwrite [key=value ...]",
    "a raw write/query stream for the selected mixer(s)",
    "  stream keys N [norms=LO..HI] [seed=S]\n"
    "      N writes of new random keys, |k| log-uniform in [LO, HI] (default 1..1),\n"
    "      unit values: the spread of key norms GDN's beta|k|^2 over- or\n"
    "      under-corrects and Kaczmarz does not.\n"
    "  stream recall [pairs=16] [queries=pairs] [norms=] [seed=]\n"
    "      writes the pairs, then queries stored keys (each once per round); run\n"
    "      reports the recall error |o - v*|/|v*| per query and per lane, and the\n"
    "      keys' interference against the Welch floor.\n"
    "  stream overwrite [keys=8] [repeats=2] [norms=] [seed=]\n"
    "      the same keys written `repeats` times with new values, then each queried:\n"
    "      the right answer is the latest value.\n"
    "Every form takes heads= dk= dv= (default: the mixer's; other values rebuild the\n"
    "lanes) and seed= (default: set seed). The position goes back to 0. Then step,\n"
    "run, show, view.",
    1,
    -1,
    run_stream,
    COMPLETE_GENERATOR,
    "norms seed pairs queries keys repeats heads dk dv"};
