/* cmd_export.c: `export logits|png|csv|...`: one command word, a sub-command per kind of file.
 * Each kind is implemented beside the feature it exports; this file only dispatches. */
#include <string.h>

#include "command.h"
#include "session.h"

/* Implemented in cli/cmd_model.c (logits) and cli/cmd_figure.c (png, csv); weak while those
 * land. Each takes argv from the kind word on: argv[0] = "logits". */
typedef int export_fn(session *s, int argc, char **argv, err *e);
extern export_fn export_logits __attribute__((weak));
extern export_fn export_png __attribute__((weak));
extern export_fn export_csv __attribute__((weak));
extern export_fn export_state __attribute__((weak));

static const struct {
    const char *kind;
    export_fn *fn;
    const char *usage;
} KINDS[] = {
    {"logits", export_logits, "export logits FILE.safetensors"},
    {"png", export_png, "export png VIEW FILE.png [width= height= layer= head= from= to=]"},
    {"csv", export_csv, "export csv PROBE FILE.csv [layer= head=]"},
    {"state", export_state, "export state FILE.safetensors"},
};

static int run_export(session *s, int argc, char **argv, const char *rest, err *e) {
    (void)rest;
    for (size_t i = 0; i < sizeof KINDS / sizeof KINDS[0]; i++) {
        if (strcmp(argv[1], KINDS[i].kind) != 0) continue;
        if (!KINDS[i].fn) return err_set(e, "export %s: not available in this build", argv[1]);
        return KINDS[i].fn(s, argc - 1, argv + 1, e);
    }
    return err_set(e, "export: unknown kind '%.40s' (logits, png, csv, state)", argv[1]);
}

const command cmd_export = {
    "export",
    "logits|png|csv|state ...",
    "write logits, a view as PNG, a probe as CSV, the state",
    "  export logits FILE.safetensors\n"
    "      float32 tensor 'logits' [1, T, V] of the tokens run so far\n"
    "  export png VIEW FILE.png [width= height= layer= head= from= to=]\n"
    "      render a view without a display; the PNG carries provenance text chunks\n"
    "  export csv PROBE FILE.csv [layer= head=]\n"
    "      one row per token, with a provenance header\n"
    "  export state FILE.safetensors\n"
    "      the current recurrent state of every layer\n"
    "Files are written to a temporary file and renamed: whole or not at all.",
    2,
    -1,
    run_export,
    COMPLETE_FILE | COMPLETE_VIEW | COMPLETE_PROBE,
    "width height layer head from to"};
