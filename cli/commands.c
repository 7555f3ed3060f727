/* commands.c: the table, word splitting, dispatch and suggestions. */
#include <ctype.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../core/fileio.h"
#include "../core/names.h"
#include "command.h"
#include "session.h"

/* Each cli/cmd_*.c file defines some of these; a missing one is a link error. */
#define CMD(x) extern const command x
CMD(cmd_help);
CMD(cmd_quit);
CMD(cmd_source);
CMD(cmd_echo);
CMD(cmd_pause);
CMD(cmd_set);
CMD(cmd_device);
CMD(cmd_info);
CMD(cmd_replay);
CMD(cmd_load);
CMD(cmd_save);
CMD(cmd_model);
CMD(cmd_swap);
CMD(cmd_tokens);
CMD(cmd_prompt);
CMD(cmd_mixer);
CMD(cmd_stream);
CMD(cmd_step);
CMD(cmd_run);
CMD(cmd_reset);
CMD(cmd_show);
CMD(cmd_compare);
CMD(cmd_view);
CMD(cmd_export);
CMD(cmd_figure);
CMD(cmd_tui);
CMD(cmd_diagnose);
CMD(cmd_train);
CMD(cmd_edit);
CMD(cmd_edits);
CMD(cmd_snapshot);
CMD(cmd_restore);
CMD(cmd_ablate);
CMD(cmd_lens);
CMD(cmd_tokenizer);
CMD(cmd_tokenize);
CMD(cmd_detokenize);

const command *const command_table[] = {
    &cmd_help,    &cmd_quit,     &cmd_source, &cmd_echo,      &cmd_set,      &cmd_device,
    &cmd_info,    &cmd_load,     &cmd_save,   &cmd_model,     &cmd_swap,     &cmd_tokens,
    &cmd_prompt,  &cmd_mixer,    &cmd_stream, &cmd_step,      &cmd_run,      &cmd_reset,
    &cmd_show,    &cmd_compare,  &cmd_replay, &cmd_view,      &cmd_export,   &cmd_figure,
    &cmd_tui,     &cmd_diagnose, &cmd_train,  &cmd_edit,      &cmd_edits,    &cmd_snapshot,
    &cmd_restore, &cmd_ablate,   &cmd_lens,   &cmd_tokenizer, &cmd_tokenize, &cmd_detokenize,
    &cmd_pause,
};
const int command_table_size = (int)(sizeof command_table / sizeof command_table[0]);

const command *command_find(const char *name) {
    for (int i = 0; i < command_table_size; i++)
        if (command_table[i] && strcmp(command_table[i]->name, name) == 0) return command_table[i];
    return NULL;
}

const char *command_suggest(const char *name) {
    const char *names[64];
    int n = 0;
    for (int i = 0; i < command_table_size && n < 64; i++)
        if (command_table[i]) names[n++] = command_table[i]->name;
    return names_closest(name, names, n);
}

int command_usage_error(const command *c, err *e) {
    return err_set(e, "usage: %s%s%s", c->name, c->args && *c->args ? " " : "",
                   c->args ? c->args : "");
}

int command_split(const char *line, char ***argv_out, char **buf_out, err *e) {
    size_t n = strlen(line);
    char *buf = malloc(n + 1);
    char **argv = malloc((n / 2 + 2) * sizeof *argv);
    if (!buf || !argv) {
        free(buf), free(argv);
        return err_set(e, "out of memory");
    }
    int argc = 0;
    size_t o = 0;
    const char *p = line;
    for (;;) {
        while (*p && isspace((unsigned char)*p)) p++;
        if (!*p || *p == '#') break;
        argv[argc++] = buf + o;
        while (*p && !isspace((unsigned char)*p)) {
            if (*p == '\'' || *p == '"') {
                char q = *p++;
                while (*p && *p != q) buf[o++] = *p++;
                if (!*p) {
                    free(buf), free(argv);
                    return err_set(e, "unterminated %c quote", q);
                }
                p++;
            } else {
                buf[o++] = *p++;
            }
        }
        buf[o++] = '\0';
    }
    argv[argc] = NULL;
    *argv_out = argv;
    *buf_out = buf;
    return argc;
}

static int command_exec_line(struct session *s, const char *line, err *e);

int command_exec(struct session *s, const char *line, err *e) {
    char *expanded = NULL;
    if (session_expand(s, line, &expanded, e)) return -1; /* $outdir, ... (settings.c) */
    int rc = command_exec_line(s, expanded ? expanded : line, e);
    free(expanded);
    return rc;
}

static int command_exec_line(struct session *s, const char *line, err *e) {
    char **argv, *buf;
    int argc = command_split(line, &argv, &buf, e);
    if (argc < 0) return -1;
    if (argc == 0) {
        free(argv), free(buf);
        return 0;
    }
    int rc = -1;
    const command *c = command_find(argv[0]);
    if (!c) {
        const char *sug = command_suggest(argv[0]);
        if (sug)
            err_set(e, "unknown command '%.60s' (did you mean '%s'?)", argv[0], sug);
        else
            err_set(e, "unknown command '%.60s' (type 'help' for the list)", argv[0]);
        goto done;
    }
    int nargs = argc - 1;
    if (nargs < c->min_args || (c->max_args >= 0 && nargs > c->max_args)) {
        command_usage_error(c, e);
        goto done;
    }
    /* rest: raw text after the command word (skipped with the same quoting rules) */
    const char *rest = line;
    while (*rest && isspace((unsigned char)*rest)) rest++;
    while (*rest && !isspace((unsigned char)*rest)) {
        if (*rest == '\'' || *rest == '"') {
            const char *close = strchr(rest + 1, *rest);
            rest = close ? close + 1 : rest + strlen(rest);
        } else {
            rest++;
        }
    }
    while (*rest && isspace((unsigned char)*rest)) rest++;
    if (s->parse_only) { /* fuzzing the script reader: everything up to running */
        rc = 0;
        goto done;
    }
    rc = c->run(s, argc, argv, rest, e);
    if (rc == 0) session_recipe_add(s, c->name, argc, argv, line);
done:
    free(argv), free(buf);
    return rc;
}

/* Splits text into commands at newlines and at ';' outside quotes. */
int command_read_script(const char *path, char **text, err *e) {
    size_t n = 0;
    if (file_read_all(path, 16u << 20, text, &n, e)) return -1;
    const char *nul = memchr(*text, '\0', n);
    if (nul) { /* a NUL would end the script there, silently */
        int line = 1;
        for (const char *p = *text; p < nul; p++) line += *p == '\n';
        free(*text);
        *text = NULL;
        return err_set(e, "%s:%d: a NUL byte (not a text script)", path, line);
    }
    return 0;
}

int command_exec_script(struct session *s, const char *text, const char *label, int stop_on_error,
                        err *e) {
    if (s->script_depth == 0) s->script_err_placed = 0;
    if (label && s->script_depth >= SCRIPT_MAX_DEPTH)
        return err_set(e, "%s: scripts nested %d deep (does a script source itself?)", label,
                       SCRIPT_MAX_DEPTH);
    size_t n = strlen(text);
    char *cmd = malloc(n + 1);
    if (!cmd) return err_set(e, "out of memory");
    int line = 1, cmd_line = 1, failures = 0;
    if (label) s->script_depth++;
    size_t o = 0;
    char quote = 0;
    int in_comment = 0;
    for (size_t i = 0; i <= n && !session_interrupted(s) && !s->leave_script; i++) {
        char c = text[i];
        int end = c == '\0' || c == '\n' || (c == ';' && !quote && !in_comment);
        if (!end) {
            if (!quote && c == '#' && (o == 0 || isspace((unsigned char)cmd[o - 1])))
                in_comment = 1;
            if (!in_comment && (c == '\'' || c == '"'))
                quote = quote == c ? 0 : (quote ? quote : c);
            cmd[o++] = c;
            continue;
        }
        cmd[o] = '\0';
        err le = {{0}};
        if (command_exec(s, cmd, &le)) {
            failures++;
            if (stop_on_error) {
                /* the innermost script names where; the scripts that sourced it pass that on */
                if (label && !s->script_err_placed)
                    err_set(e, "%s:%d: %s", label, cmd_line, le.msg), s->script_err_placed = 1;
                else
                    err_set(e, "%s", le.msg);
                free(cmd);
                if (label) s->script_depth--;
                return -1;
            }
            if (label)
                fprintf(stderr, "mixscope: %s:%d: %s\n", label, cmd_line, le.msg);
            else
                fprintf(stderr, "mixscope: %s\n", le.msg);
        }
        if (s->quit) break;
        o = 0;
        if (c == '\n') line++, in_comment = 0, quote = 0;
        cmd_line = line;
    }
    free(cmd);
    if (label) s->script_depth--;
    if (s->script_depth == 0) s->leave_script = 0; /* the outermost script has ended */
    if (session_interrupted(s)) return err_set(e, "interrupted");
    return failures ? err_set(e, "%d command%s failed", failures, failures > 1 ? "s" : "") : 0;
}
