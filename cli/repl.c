#include "repl.h"

#include <errno.h>
#include <stdio.h>
#include <signal.h>
#include <setjmp.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <readline/history.h>
#include <readline/readline.h>

#include "../mixers/mixer.h"
#include "command.h"

#define HISTORY_MAX 1000

/* Names offered by completion (cli/cmd_figure.c, cmd_prompt.c, cmd_show.c): NULL-terminated. */
const char *const *view_names(void);
const char *const *generator_names(const char *command);
const char *const *session_probe_names(session *s);

static session *g_session; /* the session completion reads (readline callbacks take no context) */

/* $XDG_STATE_HOME/mixscope/history, default ~/.local/state/mixscope/history. */
static char *history_path(void) {
    const char *base = getenv("XDG_STATE_HOME");
    char dir[1024];
    if (base && *base)
        snprintf(dir, sizeof dir, "%s/mixscope", base);
    else if (getenv("HOME"))
        snprintf(dir, sizeof dir, "%s/.local/state/mixscope", getenv("HOME"));
    else
        return NULL;
    /* make each missing folder on the way */
    for (char *p = dir + 1; *p; p++)
        if (*p == '/') {
            *p = '\0';
            mkdir(dir, 0700);
            *p = '/';
        }
    if (mkdir(dir, 0700) != 0 && errno != EEXIST) return NULL;
    char *path = malloc(strlen(dir) + 16);
    if (path) sprintf(path, "%s/history", dir);
    return path;
}

/* Completion candidates for the current word: a list of static names filtered by prefix. */
static const char *const *cand_list;
static int cand_n, cand_i;
static const char *cand_extra[256];
static int cand_extra_n;

static char *list_generator(const char *text, int state) {
    if (!state) cand_i = 0;
    size_t len = strlen(text);
    while (cand_i < cand_n + cand_extra_n) {
        const char *name = cand_i < cand_n ? cand_list[cand_i] : cand_extra[cand_i - cand_n];
        cand_i++;
        if (name && strncmp(name, text, len) == 0) return strdup(name);
    }
    return NULL;
}

static void add_names(const char *const *names) {
    for (int i = 0; names && names[i] && cand_extra_n < 255; i++)
        cand_extra[cand_extra_n++] = names[i];
}

static char key_buf[64][32];

static void add_keys(const char *keys) {
    int k = 0;
    while (keys && *keys && k < 64 && cand_extra_n < 255) {
        while (*keys == ' ') keys++;
        const char *end = strchr(keys, ' ');
        size_t n = end ? (size_t)(end - keys) : strlen(keys);
        if (n && n < 30) {
            memcpy(key_buf[k], keys, n);
            key_buf[k][n] = '=';
            key_buf[k][n + 1] = '\0';
            cand_extra[cand_extra_n++] = key_buf[k++];
        }
        keys += n;
    }
}

static char **complete(const char *text, int start, int end) {
    (void)end;
    rl_attempted_completion_over = 1;
    cand_list = NULL, cand_n = 0, cand_extra_n = 0;
    /* the command word is the first word of the current ';'-separated command */
    int cs = start;
    while (cs > 0 && rl_line_buffer[cs - 1] != ';') cs--;
    while (rl_line_buffer[cs] == ' ') cs++;
    if (cs == start) {
        for (int i = 0; i < command_table_size && cand_extra_n < 255; i++)
            if (command_table[i]) cand_extra[cand_extra_n++] = command_table[i]->name;
        return rl_completion_matches(text, list_generator);
    }
    char word[64];
    int wl = 0;
    while (rl_line_buffer[cs + wl] && rl_line_buffer[cs + wl] != ' ' && wl < 63)
        word[wl] = rl_line_buffer[cs + wl], wl++;
    word[wl] = '\0';
    const command *c = command_find(word);
    if (!c) return NULL;
    if (!strcmp(word, "set")) { /* set KEY, then the values a key takes */
        int ws = cs + wl;
        while (rl_line_buffer[ws] == ' ') ws++;
        if (ws >= start) {
            add_names(setting_keys());
        } else {
            static const struct {
                const char *key;
                const char *const values[6];
            } V[] = {{"probes", {"default", "all", "none", NULL}},
                     {"device", {"cpu", "gpu", NULL}},
                     {"arith", {"fp32", "tf32", NULL}},
                     {"progress", {"auto", "on", "off", NULL}},
                     {"lla", {"off", "on", NULL}},
                     {"threads", {"all", NULL}},
                     {"rows", {"all", NULL}},
                     {"chunk", {"16", "32", "64", "default", NULL}},
                     {"stop-on", {"none", "nonfinite", NULL}},
                     {"title", {"none", NULL}},
                     {"labels", {"none", NULL}}};
            for (size_t i = 0; i < sizeof V / sizeof V[0]; i++)
                if (!strncmp(rl_line_buffer + ws, V[i].key, strlen(V[i].key)) &&
                    rl_line_buffer[ws + strlen(V[i].key)] == ' ')
                    add_names(V[i].values);
        }
        return rl_completion_matches(text, list_generator);
    }
    if (c->complete & COMPLETE_COMMAND)
        for (int i = 0; i < command_table_size && cand_extra_n < 255; i++)
            if (command_table[i]) cand_extra[cand_extra_n++] = command_table[i]->name;
    if (c->complete & COMPLETE_MIXER)
        for (int i = 0; i < mixer_count && cand_extra_n < 255; i++)
            if (mixer_all[i]) cand_extra[cand_extra_n++] = mixer_all[i]->name;
    if (c->complete & COMPLETE_VIEW) add_names(view_names());
    if (c->complete & COMPLETE_GENERATOR) add_names(generator_names(c->name));
    if (c->complete & COMPLETE_PROBE) add_names(session_probe_names(g_session));
    add_keys(c->keys);
    char **m = rl_completion_matches(text, list_generator);
    if (!m && (c->complete & COMPLETE_FILE)) {
        rl_attempted_completion_over = 0; /* fall back to readline's file names */
        return NULL;
    }
    if (m && cand_extra_n && m[1] == NULL && strchr(m[0], '='))
        rl_completion_append_character = '\0';
    return m;
}

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

/* ^C at the prompt discards the line being typed and gives a fresh prompt, as bash, sqlite3 and
 * IPython do: the handler jumps back to the prompt (readline's own signal handling is off, so
 * the line state is freed and the terminal restored here). ^C while a command runs sets
 * session_sigint, which long loops poll; it never reaches the next command. */
static sigjmp_buf g_prompt_jmp;
static volatile sig_atomic_t g_at_prompt;

static void on_sigint_repl(int sig) {
    (void)sig;
    if (g_at_prompt) {
        g_at_prompt = 0;
        siglongjmp(g_prompt_jmp, 1);
    }
    session_sigint = 1;
}

static char *read_prompt(void) {
    if (sigsetjmp(g_prompt_jmp, 1)) { /* ^C while typing */
        rl_free_line_state();
        rl_cleanup_after_signal();
        fputc('\n', stdout);
    }
    g_at_prompt = 1;
    char *line = readline("mixscope> ");
    g_at_prompt = 0;
    return line;
}

int repl_run(session *s) {
    int tty = isatty(STDIN_FILENO) && isatty(STDOUT_FILENO);
    s->interactive = tty;
    char *hist = NULL;
    if (tty) {
        g_session = s;
        rl_readline_name = "mixscope";
        rl_attempted_completion_function = complete;
        rl_catch_signals = 0; /* ^C is ours: read_prompt */
        struct sigaction sa;
        memset(&sa, 0, sizeof sa);
        sa.sa_handler = on_sigint_repl;
        sigemptyset(&sa.sa_mask);
        sigaction(SIGINT, &sa, NULL);
        hist = history_path();
        stifle_history(HISTORY_MAX);
        if (hist) read_history(hist);
        fprintf(s->out, "mixscope: type 'help' for commands, 'quit' or ^D to leave\n");
    }
    while (!s->quit) {
        session_sigint = 0;
        char *line = tty ? read_prompt() : read_plain();
        if (!line) break;
        if (tty && *line) {
            HIST_ENTRY *last =
                history_length ? history_get(history_base + history_length - 1) : NULL;
            if (!last || strcmp(last->line, line) != 0) {
                add_history(line);
                /* appended at once: two REPLs sharing the file keep each other's lines, and a
                 * hangup loses nothing */
                if (hist && append_history(1, hist) != 0) {
                    FILE *f = fopen(hist, "a"); /* the file did not exist yet */
                    if (f) fclose(f), append_history(1, hist);
                }
            }
        }
        err e = {{0}};
        s->current_command = line;
        /* each failing command prints its own line; only an interruption needs saying here */
        if (command_exec_script(s, line, NULL, 0, &e) && session_interrupted(s))
            fprintf(stderr, "mixscope: interrupted; the session is kept\n");
        s->current_command = NULL;
        fflush(s->out);
        free(line);
    }
    if (tty) {
        if (!s->quit) fputc('\n', s->out);
        if (hist) history_truncate_file(hist, HISTORY_MAX); /* the lines are in already */
    }
    free(hist);
    return 0;
}
