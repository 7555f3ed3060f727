/* cmd_basic.c: help, quit, source, device. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../core/fileio.h"
#include "../kernels/gpu.h"
#include "command.h"
#include "session.h"

/* The command list's lines, cut to `width` columns at spaces (each command's own help text is
 * laid out by hand). Prints text with every line cut to `width` columns at spaces. A continuation
 * line hangs under the line's second column when it has one (text after a run of two or more
 * spaces: the command list's summaries, the options' meanings), else under the line's own
 * indentation; a word longer than the line is left whole. */
static void print_wrapped(FILE *out, const char *text, int width) {
    while (*text) {
        const char *nl = strchr(text, '\n');
        int len = nl ? (int)(nl - text) : (int)strlen(text);
        if (len <= width) {
            fprintf(out, "%.*s\n", len, text);
        } else {
            int lead = 0, hang;
            while (lead < len && text[lead] == ' ') lead++;
            hang = lead;
            for (int i = lead; i + 2 < len && i < width - 20; i++)
                if (text[i] != ' ' && text[i + 1] == ' ' && text[i + 2] == ' ') {
                    int j = i + 1;
                    while (j < len && text[j] == ' ') j++;
                    if (j < width - 20) hang = j;
                    break;
                }
            int pos = 0, col = 0;
            while (pos < len) {
                int room = width - col, end = pos + room;
                if (len - pos <= room) {
                    fprintf(out, "%.*s\n", len - pos, text + pos);
                    break;
                }
                int cut = end;
                while (cut > pos && text[cut] != ' ') cut--;
                if (cut == pos) { /* one long word: up to the next space */
                    cut = end;
                    while (cut < len && text[cut] != ' ') cut++;
                }
                fprintf(out, "%.*s\n", cut - pos, text + pos);
                pos = cut;
                while (pos < len && text[pos] == ' ') pos++;
                if (pos < len) fprintf(out, "%*s", hang, ""), col = hang;
            }
        }
        if (!nl) break;
        text = nl + 1;
    }
}

#define HELP_WIDTH 80

static int run_help(session *s, int argc, char **argv, const char *rest, err *e) {
    (void)rest;
    if (argc == 2) {
        const command *c = command_find(argv[1]);
        if (!c) {
            const char *sug = command_suggest(argv[1]);
            return sug ? err_set(e, "no command '%.60s' (did you mean '%s'?)", argv[1], sug)
                       : err_set(e, "no command '%.60s'", argv[1]);
        }
        fprintf(s->out, "%s %s\n  %s\n", c->name, c->args ? c->args : "", c->summary);
        if (c->help) fprintf(s->out, "\n%s\n", c->help);
        return 0;
    }
    fprintf(s->out, "commands (help CMD for details):\n");
    for (int i = 0; i < command_table_size; i++) {
        const command *c = command_table[i];
        if (!c) continue;
        char head[160], line[512];
        snprintf(head, sizeof head, "%s %s", c->name, c->args ? c->args : "");
        if (strlen(head) > 30) {
            snprintf(line, sizeof line, "  %s", head);
            print_wrapped(s->out, line, HELP_WIDTH);
            snprintf(line, sizeof line, "  %-30s  %s", "", c->summary);
        } else {
            snprintf(line, sizeof line, "  %-30s  %s", head, c->summary);
        }
        print_wrapped(s->out, line, HELP_WIDTH);
    }
    return 0;
}

const command cmd_help = {
    "help",
    "[CMD]",
    "list the commands, or explain one",
    "Without an argument, lists every command with its usage. With one, prints that\n"
    "command's usage and full description.",
    0,
    1,
    run_help,
    COMPLETE_COMMAND,
    NULL};

static int run_quit(session *s, int argc, char **argv, const char *rest, err *e) {
    (void)argc, (void)argv, (void)rest, (void)e;
    s->quit = 1;
    return 0;
}

const command cmd_quit = {"quit", "", "leave mixscope (also ^D)", NULL, 0, 0, run_quit, 0, NULL};

static int run_source(session *s, int argc, char **argv, const char *rest, err *e) {
    (void)argc, (void)rest;
    char *text;
    if (command_read_script(argv[1], &text, e)) return -1;
    int rc = command_exec_script(s, text, argv[1], s->batch, e);
    free(text);
    return rc;
}

const command cmd_source = {
    "source",
    "FILE",
    "run the commands in FILE (a .scene script)",
    "Runs FILE line by line; ';' also separates commands and '#' starts a comment. In\n"
    "batch use the first failing command stops the script; in the REPL each error is\n"
    "printed and the script goes on.",
    1,
    1,
    run_source,
    COMPLETE_FILE,
    NULL};

static int run_device(session *s, int argc, char **argv, const char *rest, err *e) {
    (void)rest;
    char why[256];
    if (argc == 1) {
        int ok = gpu_available(why, sizeof why);
        fprintf(s->out, "device: %s (gpu: %s)\n", s->eng.device == DEVICE_GPU ? "gpu" : "cpu",
                ok ? why : why);
        return 0;
    }
    return session_set_device(s, argv[1], e);
}

const command cmd_device = {
    "device",
    "[cpu|gpu]",
    "choose the backend (gpu falls back to cpu when there is none)",
    "Without an argument, shows the current backend and what GPU is present. `device\n"
    "gpu` on a machine without a usable GPU says why and stays on the cpu; that is\n"
    "not an error. Under `device gpu` a model steps with its weights, states and\n"
    "caches resident on the GPU, 64 tokens a call (every family, hybrids too; `info`\n"
    "says how the model steps); raw lanes keep their state there too.",
    0,
    1,
    run_device,
    0,
    NULL};
