/* main.c: mixscope's entry point: the REPL, -c commands, or .scene scripts (the scripting contract
 * of docs/guide.md). Batch use exits 0 when every command succeeded; the first failing command
 * prints "mixscope: <what went wrong>" on stderr and the exit status is 1. */
#include <stdio.h>
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "../core/fileio.h"
#include "command.h"
#include "repl.h"
#include "session.h"
#include "version.h"

static const char USAGE[] =
    "NAME\n"
    "    mixscope - an interactive lab for linear-attention sequence mixers\n"
    "\n"
    "SYNOPSIS\n"
    "    mixscope                      the guided tour (scenes/tour.scene), then the\n"
    "                                  REPL\n"
    "    mixscope --no-tour            the REPL alone (windows open when a display is\n"
    "                                  present)\n"
    "    mixscope FILE.scene ...       run the scripts, then exit\n"
    "    mixscope -c 'CMD; CMD; ...'   run the commands, then exit\n"
    "    mixscope --tui                the ncurses dashboard\n"
    "    mixscope --help | --version\n"
    "\n"
    "DESCRIPTION\n"
    "    mixscope steps tokens through sequence mixers - Gated DeltaNet, DeltaNet,\n"
    "    Kaczmarz, GLA, Mamba2, softmax attention, Kalman, KATA and Parallax - on the\n"
    "    CPU or a GPU, records every probe of their recurrences, and shows them as\n"
    "    live views, tables, PNG and CSV.\n"
    "    It loads checkpoints as flash-linear-attention saves them, builds random\n"
    "    models, and replays raw tensors through one mixer core.\n"
    "\n"
    "    Commands are the same in every mode; type 'help' in the REPL, or run\n"
    "    mixscope -c help, for the list, and 'help CMD' for one.\n"
    "\n"
    "BATCH USE\n"
    "    With -c or script files, commands run in order and the first failure stops\n"
    "    the run: it prints 'mixscope: <what went wrong>' on standard error and the\n"
    "    exit status is 1.\n"
    "    Commands are separated by newlines or ';'; '#' starts a comment.\n"
    "\n"
    "SPEED\n"
    "    Stepping records what 'set probes' selects (default: what the views draw;\n"
    "    none is fastest) on every core ('set threads'); under 'device gpu' models\n"
    "    of every family (hybrids too) and raw lanes step resident on the GPU\n"
    "    (docs/step-results.md).\n"
    "\n"
    "EXIT STATUS\n"
    "    0  every command succeeded\n"
    "    1  a command failed, or the output could not be written\n"
    "    2  bad command-line arguments\n"
    "\n"
    "EXAMPLES\n"
    "    mixscope -c 'replay gdn in.safetensors prefix=gdr. out=o.safetensors'\n"
    "    mixscope -c 'load ckpt/; tokens ckpt/expected.safetensors; run; export\n"
    "    logits l.safetensors' mixscope scenes/kaczmarz-vs-gdn.scene\n"
    "\n"
    "ENVIRONMENT\n"
    "    XDG_STATE_HOME  the REPL history goes to $XDG_STATE_HOME/mixscope/history\n"
    "    NO_COLOR        monochrome dashboard\n"
    "    DISPLAY         windows open only when set\n"
    "    MIXSCOPE_NO_TOUR  set: no tour before the REPL\n"
    "    MIXSCOPE_TRACE_MAX_MB  the probe trace's cap in MiB (default: half the\n"
    "                           memory)\n"
    "    MIXSCOPE_NO_AVX2  set: the baseline CPU kernels (the same results, slower)\n"
    "    MIXSCOPE_REFS     the reference data of the tests (default ../shared/refs)\n";

/* The guided tour: scenes/tour.scene embedded by scenes/tour.c. */
extern const char *scene_tour(void);

/* Runs the tour as the REPL would run typed commands (errors printed, the tour goes on; figures
 * open as windows on a display, otherwise they are written and their paths printed). */
static void tour_run(session *s) {
    err e = {{0}};
    s->interactive = isatty(STDIN_FILENO) && isatty(STDOUT_FILENO);
    if (command_exec_script(s, scene_tour(), "tour.scene", 0, &e) && session_interrupted(s))
        fprintf(stderr, "mixscope: the tour was interrupted; the session is kept\n");
    session_sigint = 0;
    fflush(s->out);
}

int main(int argc, char **argv) {
    session s;
    err e = {{0}};
    if (session_init(&s, &e)) {
        fprintf(stderr, "mixscope: %s\n", e.msg);
        return 1;
    }
    session_install_sigint();
    int rc = 0;
    if (argc >= 2 && (!strcmp(argv[1], "--help") || !strcmp(argv[1], "-h"))) {
        fputs(USAGE, stdout);
    } else if (argc >= 2 && (!strcmp(argv[1], "--version") || !strcmp(argv[1], "-V"))) {
        printf("mixscope %s\n", MIXSCOPE_VERSION);
    } else if (argc >= 2 && !strcmp(argv[1], "-c")) {
        if (argc != 3) {
            fprintf(stderr, "mixscope: -c takes one argument: 'CMD; CMD; ...'\n");
            rc = 2;
        } else {
            s.batch = 1;
            if (command_exec_script(&s, argv[2], NULL, 1, &e)) {
                fprintf(stderr, "mixscope: %s\n", e.msg);
                rc = 1;
            }
        }
    } else if (argc >= 2 && !strcmp(argv[1], "--tui")) {
        rc = command_exec(&s, "tui", &e) ? (fprintf(stderr, "mixscope: %s\n", e.msg), 1) : 0;
    } else if (argc == 2 && !strcmp(argv[1], "--no-tour")) {
        rc = repl_run(&s);
    } else if (argc >= 2 && argv[1][0] == '-') {
        fprintf(stderr, "mixscope: unknown option '%s' (see mixscope --help)\n", argv[1]);
        rc = 2;
    } else if (argc >= 2) {
        s.batch = 1;
        for (int i = 1; i < argc && !rc && !s.quit; i++) {
            char *text;
            if (command_read_script(argv[i], &text, &e)) {
                fprintf(stderr, "mixscope: %s\n", e.msg);
                rc = 1;
                break;
            }
            if (command_exec_script(&s, text, argv[i], 1, &e)) {
                fprintf(stderr, "mixscope: %s\n", e.msg);
                rc = 1;
            }
            free(text);
        }
    } else {
        if (!getenv("MIXSCOPE_NO_TOUR")) tour_run(&s);
        rc = s.quit ? 0 : repl_run(&s);
    }
    session_free(&s);
    /* output lost (a full disk, a closed pipe, /dev/full) is a failure, not a success */
    if ((fflush(stdout) != 0 || ferror(stdout)) && rc == 0) {
        fprintf(stderr, "mixscope: writing the output: %s\n", strerror(errno ? errno : EIO));
        rc = 1;
    }
    return rc;
}
