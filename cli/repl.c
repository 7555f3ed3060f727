#include "repl.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <readline/history.h>
#include <readline/readline.h>

#include "command.h"

static char *read_plain(void) {
    size_t cap = 0;
    char *line = NULL;
    ssize_t n = getline(&line, &cap, stdin);
    if (n < 0) {
        free(line);
        return NULL;
    }
    if (n && line[n - 1] == '\n') line[n - 1] = '\0';
    return line;
}

int repl_run(session *s) {
    int tty = isatty(STDIN_FILENO) && isatty(STDOUT_FILENO);
    s->interactive = tty;
    if (tty) fprintf(s->out, "mixscope: type 'help' for commands, 'quit' or ^D to leave\n");
    while (!s->quit) {
        session_sigint = 0;
        char *line = tty ? readline("mixscope> ") : read_plain();
        if (!line) break;
        if (tty && *line) add_history(line);
        err e = {{0}};
        s->current_command = line;
        if (command_exec(s, line, &e)) fprintf(stderr, "mixscope: %s\n", e.msg);
        s->current_command = NULL;
        fflush(s->out);
        free(line);
    }
    if (tty && !s->quit) fputc('\n', s->out);
    return 0;
}
