/* fuzz_command.c: libFuzzer target for command-line handling.
 *
 * The input is one command line. It goes through command_split; the first word through
 * command_find and command_suggest (edit distances); the rest through opts_parse and every typed
 * getter, as a command's key=value arguments would. Lines naming `help` or no command at all are
 * also run with command_exec on a fresh session writing to /dev/null: those paths have no side
 * effects (other commands read or write files, so they are left out).
 *
 *   make fuzz && build/fuzz/fuzz_command fuzz/seeds/fuzz_command */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli/command.h"
#include "cli/session.h"
#include "core/opts.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static void exercise_opts(int argc, char **argv) {
    opts o;
    err e = {{0}};
    if (opts_parse(&o, argc, argv, &e)) {
        if (e.msg[0] == '\0') abort();
        return;
    }
    for (int i = 0; i < o.n; i++) {
        long l;
        double d, lo, hi;
        const char *k = o.key[i];
        if (opts_int(&o, k, 0, &l, &e) == 0 && opts_float(&o, k, 0, &d, &e) != 0) abort();
        opts_range(&o, k, 0, 1, &lo, &hi, &e);
        if (!opts_has(&o, k) || opts_str(&o, k, NULL) != o.val[i]) abort();
    }
    if (opts_check_unused(&o, &e)) abort(); /* every key was asked for */
    opts_free(&o);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    char *line = malloc(size + 1);
    if (!line) return 0;
    memcpy(line, data, size);
    line[size] = '\0'; /* a NUL inside the input ends the line, as in C strings */

    char **argv, *buf;
    err e = {{0}};
    int argc = command_split(line, &argv, &buf, &e);
    if (argc < 0) {
        if (e.msg[0] == '\0') abort();
        free(line);
        return 0;
    }
    if (argv[argc] != NULL) abort();
    int safe = 1;
    if (argc > 0) {
        const command *c = command_find(argv[0]);
        const char *sug = command_suggest(argv[0]);
        if (sug && !command_find(sug)) abort();
        safe = !c || strcmp(c->name, "help") == 0;
        exercise_opts(argc - 1, argv + 1);
    }
    free(argv);
    free(buf);

    if (safe) {
        session s;
        if (session_init(&s, &e) == 0) {
            s.out = fopen("/dev/null", "w");
            if (s.out) {
                command_exec(&s, line, &e);
                fclose(s.out);
            }
            session_free(&s);
        }
    }
    free(line);
    return 0;
}
