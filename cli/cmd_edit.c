/* cmd_edit.c: interventions on the memory (engine/interv.h): edit, edits, snapshot, restore,
 * ablate. The engine applies and replays them; these commands parse and print. */
#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "../engine/interv.h"
#include "command.h"
#include "session.h"

/* key=value words from argv[from] on, with the keys given; unknown keys refused. */
static int parse(opts *o, int argc, char **argv, int from, const char *what, err *e) {
    if (opts_parse(o, argc - from, argv + from, e)) return err_prefix(e, "%s", what);
    return 0;
}

static void print_edit(session *s, const char *kind, int layer, int head, int key, int value,
                       const engine_edit_report *r) {
    FILE *f = s->out;
    if (value < 0)
        fprintf(f, "erased key %d at layer %d head %d: readback |S^T k| %.4g -> %.3g", key, layer,
                head, r->rb_before, r->rb_after);
    else
        fprintf(f, "wrote value %d under key %d at layer %d head %d: readback |S^T k| %.4g -> %.4g",
                value, key, layer, head, r->rb_before, r->rb_after);
    if (!isnan(r->err_before))
        fprintf(f, "; error against %s %d %.4g -> ", value < 0 ? "its value" : "value",
                value < 0 ? key : value, r->err_before);
    if (!isnan(r->err_before)) {
        if (isnan(r->err_after))
            fprintf(f, "erased");
        else
            fprintf(f, "%.3g", r->err_after);
    }
    fputc('\n', f);
    if (r->coll_key >= 0)
        fprintf(f,
                "collateral over %d other stored keys: largest readback change %.4g (%.3g of its "
                "readback) at key %d\n",
                r->nkeys, r->coll_max, r->coll_rel, r->coll_key);
    else
        fprintf(f, "collateral: no other stored keys\n");
    (void)kind;
}

static int run_edit(session *s, int argc, char **argv, const char *rest, err *e) {
    (void)rest;
    const char *kind = argv[1];
    int erase = !strcmp(kind, "erase");
    if (!erase && strcmp(kind, "write"))
        return err_set(e, "edit: erase or write, not '%s' (help edit)", kind);
    opts o;
    if (parse(&o, argc, argv, 2, "edit", e)) return -1;
    long layer, head, key, value;
    int rc = opts_int_in(&o, "layer", 0, 0, INT_MAX, &layer, e) ||
             opts_int_in(&o, "head", -1, 0, INT_MAX, &head, e) ||
             opts_int_in(&o, "key", -1, 0, INT_MAX, &key, e) ||
             opts_int_in(&o, "value", -1, 0, INT_MAX, &value, e) || opts_check_unused(&o, e);
    opts_free(&o);
    if (rc) return err_prefix(e, "edit %s", kind);
    if (head < 0) return err_set(e, "edit %s: head= is required", kind);
    if (key < 0) return err_set(e, "edit %s: key=J (a token already run) is required", kind);
    if (erase && value >= 0) return err_set(e, "edit erase: takes no value= (edit write does)");
    if (!erase && value < 0)
        return err_set(e, "edit write: value=I (a token already run) is required");
    engine_edit_report r;
    if (engine_edit(&s->eng, (int)layer, (int)head, (int)key, erase ? -1 : (int)value, &r, e))
        return -1;
    print_edit(s, kind, (int)layer, (int)head, (int)key, erase ? -1 : (int)value, &r);
    return 0;
}

const command cmd_edit = {
    "edit",
    "erase|write [layer=L] head=H key=J [value=I]",
    "erase or overwrite one key in a layer's state",
    "edit erase [layer=L] head=H key=J\n"
    "    S <- (I - k k^T / |k|^2) S: afterwards the key of token J reads back 0.\n"
    "edit write [layer=L] head=H key=J value=I\n"
    "    S <- S + k (v - S^T k)^T / |k|^2: afterwards the key of token J reads back\n"
    "    the value of token I.\n"
    "S is head H's key-value matrix of layer (or lane) L, default 0, in fla's [K, V]\n"
    "layout; k and v are what that core saw at tokens J and I (recorded under the\n"
    "default probes). Cores: gdn, deltanet, kaczmarz (the delta rule's own removal\n"
    "and overwrite), gla and mamba2 (the same projection; the edited row then decays\n"
    "like the rest). Prints the readback of the edited key before and after and the\n"
    "largest change in the readback of every other stored key (collateral). The edit\n"
    "acts at the current position: the next step starts from the edited state, and\n"
    "`reset` + `run` applies it again there (edits).",
    1,
    5,
    run_edit,
    0,
    "layer= head= key= value="};

static int run_edits(session *s, int argc, char **argv, const char *rest, err *e) {
    (void)rest, (void)e;
    if (argc > 1) {
        if (strcmp(argv[1], "clear"))
            return err_set(e, "edits: clear or nothing, not '%s'", argv[1]);
        int n = engine_iv_count(&s->eng);
        engine_iv_clear(&s->eng);
        fprintf(s->out,
                "dropped %d intervention%s (the current state keeps them; reset to run "
                "without)\n",
                n, n == 1 ? "" : "s");
        return 0;
    }
    int n = engine_iv_count(&s->eng);
    if (!n) fprintf(s->out, "no interventions\n");
    char b[200];
    for (int i = 0; i < n; i++)
        fprintf(s->out, "%d  %s\n", i + 1, engine_iv_text(engine_iv_at(&s->eng, i), b, sizeof b));
    int ns = engine_snap_count(&s->eng);
    for (int i = 0; i < ns; i++) {
        int pos;
        const char *name = engine_snap_info(&s->eng, i, &pos);
        fprintf(s->out, "snapshot %s at position %d\n", name, pos);
    }
    return 0;
}

const command cmd_edits = {
    "edits",
    "[clear]",
    "list the interventions (edits, restores, ablations), or drop them",
    "Lists every intervention with the position it was made at, in order, and the\n"
    "snapshots. `reset` followed by `run` (or `step`) applies each again when the run\n"
    "reaches its position, with the same numbers bit for bit. `edits clear` drops the\n"
    "list; the current state keeps what was applied until the next reset.",
    0,
    1,
    run_edits,
    0,
    NULL};

static int run_snapshot(session *s, int argc, char **argv, const char *rest, err *e) {
    (void)rest;
    if (argc < 2) {
        int n = engine_snap_count(&s->eng);
        if (!n) fprintf(s->out, "no snapshots\n");
        for (int i = 0; i < n; i++) {
            int pos;
            const char *name = engine_snap_info(&s->eng, i, &pos);
            fprintf(s->out, "%s at position %d\n", name, pos);
        }
        return 0;
    }
    if (engine_snapshot(&s->eng, argv[1], e)) return -1;
    fprintf(s->out, "snapshot %s at position %d\n", argv[1], engine_pos(&s->eng));
    return 0;
}

const command cmd_snapshot = {
    "snapshot",
    "[NAME]",
    "keep the run's complete state at this position",
    "snapshot NAME copies the complete state of the run at the current position:\n"
    "every layer's (or lane's) recurrent state and KV cache, the short-convolution\n"
    "buffers, the position. It replaces a snapshot of the same name; `snapshot` alone\n"
    "lists them. They last until the model or the lanes change. See restore.",
    0,
    1,
    run_snapshot,
    0,
    NULL};

static int run_restore(session *s, int argc, char **argv, const char *rest, err *e) {
    (void)rest;
    opts o;
    if (parse(&o, argc, argv, 2, "restore", e)) return -1;
    long layer, head;
    int rc = opts_int_in(&o, "layer", -1, 0, INT_MAX, &layer, e) ||
             opts_int_in(&o, "head", -1, 0, INT_MAX, &head, e) || opts_check_unused(&o, e);
    opts_free(&o);
    if (rc) return err_prefix(e, "restore");
    if (engine_restore(&s->eng, argv[1], (int)layer, (int)head, e)) return -1;
    if (layer < 0)
        fprintf(s->out, "restored %s at position %d\n", argv[1], engine_pos(&s->eng));
    else if (head < 0)
        fprintf(s->out, "restored layer %ld of %s at position %d\n", layer, argv[1],
                engine_pos(&s->eng));
    else
        fprintf(s->out, "restored layer %ld head %ld of %s at position %d\n", layer, head, argv[1],
                engine_pos(&s->eng));
    return 0;
}

const command cmd_restore = {
    "restore",
    "NAME [layer=L] [head=H]",
    "put a snapshot's state (or one layer's or head's part) into the run",
    "Puts snapshot NAME into the current run at the same position: all of it, or with\n"
    "layer= that layer's state and convolution buffers, or with layer= head= that\n"
    "head's part of the layer's recurrent state. Restoring run A's snapshot at\n"
    "position t into run B, whose tokens from t on are A's, gives B exactly A's\n"
    "logits from t on (activation patching:\n"
    "restore one layer or head to see what it carries). Kept in the intervention\n"
    "list.",
    1,
    3,
    run_restore,
    0,
    "layer= head="};

static int run_ablate(session *s, int argc, char **argv, const char *rest, err *e) {
    (void)rest;
    opts o;
    if (parse(&o, argc, argv, 1, "ablate", e)) return -1;
    long layer, head, from, to;
    const char *mode = opts_str(&o, "mode", "zero");
    int rc = opts_int_in(&o, "layer", -1, 0, INT_MAX, &layer, e) ||
             opts_int_in(&o, "head", -1, 0, INT_MAX, &head, e) ||
             opts_int_in(&o, "from", -1, 0, INT_MAX, &from, e) ||
             opts_int_in(&o, "to", -1, 0, INT_MAX, &to, e) || opts_check_unused(&o, e);
    int mean = !strcmp(mode, "mean");
    if (!rc && !mean && strcmp(mode, "zero"))
        rc = err_set(e, "option 'mode': zero or mean, not '%s'", mode);
    opts_free(&o);
    if (rc) return err_prefix(e, "ablate");
    if (layer < 0) return err_set(e, "ablate: layer= is required");
    if (engine_ablate(&s->eng, (int)layer, (int)head, (int)from, (int)to, mean, e)) return -1;
    char b[200];
    const engine_iv *iv = engine_iv_at(&s->eng, engine_iv_count(&s->eng) - 1);
    fprintf(s->out, "%s\n", engine_iv_text(iv, b, sizeof b));
    if (iv->from < engine_pos(&s->eng))
        fprintf(s->out, "tokens before %d have run: reset and run to see them ablated\n",
                engine_pos(&s->eng));
    return 0;
}

const command cmd_ablate = {
    "ablate",
    "layer=L [head=H] [from=T] [to=T] [mode=zero|mean]",
    "zero (or mean-replace) a head's output as it enters the output projection",
    "For tokens from..to (default: the current position to the last token), the\n"
    "output of head H of layer L (every head without head=) as it enters the output\n"
    "projection, after the output norm and gate, is set to zero, or with mode=mean to\n"
    "its mean over the tokens of the run before (zero at the first token). Zeroing\n"
    "equals a checkpoint whose output projection columns for that head are zero.\n"
    "Model mode; steps on the CPU while an ablation is listed (`run prefill`\n"
    "refuses). `edits clear` drops it.",
    1,
    5,
    run_ablate,
    0,
    "layer= head= from= to= mode="};
