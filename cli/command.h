/* command.h: the command table. One table feeds dispatch, `help`, `help CMD`, the usage line of a
 * wrong call, "did you mean" suggestions and tab completion. Each command lives in a cli/cmd_*.c
 * file and is listed in cli/commands.c. */
#ifndef MIXSCOPE_COMMAND_H
#define MIXSCOPE_COMMAND_H

#include "../core/err.h"

struct session;

/* What tab completion offers for a command's arguments (bit set). */
enum {
    COMPLETE_FILE = 1,       /* file paths */
    COMPLETE_MIXER = 2,      /* mixer names */
    COMPLETE_VIEW = 4,       /* view names */
    COMPLETE_PROBE = 8,      /* probe names */
    COMPLETE_GENERATOR = 16, /* prompt / stream generator names */
    COMPLETE_COMMAND = 32,   /* command names (help CMD) */
};

typedef struct command {
    const char *name;
    const char *args;       /* usage after the name, e.g. "MIXER FILE.safetensors [prefix=P]" */
    const char *summary;    /* one line for `help` */
    const char *help;       /* the full text for `help CMD` (may be NULL) */
    int min_args, max_args; /* positional + key=value words; max -1 = any */
    /* argv[0] is the command name. `rest` is the raw text after the name (for `prompt TEXT`). */
    int (*run)(struct session *s, int argc, char **argv, const char *rest, err *e);
    int complete;     /* COMPLETE_* bits */
    const char *keys; /* key= names offered by completion, space separated (may be NULL) */
} command;

extern const command *const command_table[];
extern const int command_table_size;

const command *command_find(const char *name);
/* The nearest command name by edit distance, or NULL when nothing is close. */
const char *command_suggest(const char *name);

/* Splits a line into words (whitespace; '...' and "..." group; # starts a comment).
 * Returns the word count, or -1 with a message for an unterminated quote. Words point into a
 * malloc'd buffer stored in *buf (free it). */
int command_split(const char *line, char ***argv, char **buf, err *e);

/* Runs one command line (empty lines and comments succeed). */
int command_exec(struct session *s, const char *line, err *e);

/* Runs a script: commands separated by newlines or ';' (outside quotes). With stop_on_error it
 * stops at the first failure and returns -1 (batch mode); otherwise it prints each error and
 * goes on. `label` names the source in messages ("tour.scene:12"). */
/* How deep `source` may nest (a script sourcing itself stops here with a message). */
#define SCRIPT_MAX_DEPTH 32
/* Reads a script file: a regular file of at most 16 MiB without NUL bytes. */
int command_read_script(const char *path, char **text, err *e);
int command_exec_script(struct session *s, const char *text, const char *label, int stop_on_error,
                        err *e);

/* Prints the usage line of a command into e. Returns -1. */
int command_usage_error(const command *c, err *e);

#endif
