/* cmd_set.c: `set KEY VALUE` (session settings), `echo`, $NAME expansion of settings in command
 * lines (so scenes can say `export png kaczmarz $outdir/k.png`), and the progress line of long
 * runs. */
#include <ctype.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "../scenes/session_raw.h"
#include "command.h"
#include "session.h"

#define DEFAULT_ROWS   40
#define DEFAULT_BLOWUP 1e3
#define DEFAULT_OUTDIR "mixscope-figures"

int setting_rows(const session *s) {
    return s->set_rows == 0 ? DEFAULT_ROWS : s->set_rows;
}

long setting_seed(const session *s) {
    return s->set_seed;
}

double setting_blowup(const session *s) {
    return s->set_blowup > 0 ? s->set_blowup : DEFAULT_BLOWUP;
}

const char *setting_outdir(const session *s) {
    return s->set_outdir[0] ? s->set_outdir : DEFAULT_OUTDIR;
}

/* mkdir -p */
int session_make_dirs(const char *path, err *e) {
    char buf[512];
    if (snprintf(buf, sizeof buf, "%s", path) >= (int)sizeof buf)
        return err_set(e, "path too long: %.60s...", path);
    for (char *p = buf + 1;; p++) {
        if (*p == '/' || *p == '\0') {
            char c = *p;
            *p = '\0';
            if (mkdir(buf, 0777) != 0 && errno != EEXIST)
                return err_set(e, "cannot create folder '%s': %s", buf, strerror(errno));
            *p = c;
            if (!c) break;
        }
    }
    return 0;
}

/* The current value of a setting as text; NULL for an unknown key. */
static const char *setting_text(const session *s, const char *key, char *buf, size_t n) {
    if (!strcmp(key, "outdir")) return setting_outdir(s);
    if (!strcmp(key, "seed")) return snprintf(buf, n, "%ld", setting_seed(s)), buf;
    if (!strcmp(key, "rows")) {
        if (setting_rows(s) < 0) return "all";
        return snprintf(buf, n, "%d", setting_rows(s)), buf;
    }
    if (!strcmp(key, "chunk")) {
        if (!s->set_chunk) return "default";
        return snprintf(buf, n, "%d", s->set_chunk), buf;
    }
    if (!strcmp(key, "blowup")) return snprintf(buf, n, "%g", setting_blowup(s)), buf;
    if (!strcmp(key, "progress"))
        return s->set_progress > 0 ? "on" : s->set_progress < 0 ? "off" : "auto";
    if (!strcmp(key, "device")) return s->device == DEVICE_GPU ? "gpu" : "cpu";
    if (!strcmp(key, "arith")) return s->set_arith ? "tf32" : "fp32";
    if (!strcmp(key, "lla")) {
        if (!(s->set_lla > 0)) return "off";
        return snprintf(buf, n, "%g", s->set_lla), buf;
    }
    return NULL;
}

static const struct {
    const char *key, *meaning;
} SETTINGS[] = {
    {"outdir", "folder scenes write figures to ($outdir; created when set)"},
    {"seed", "seed of prompt and stream generators when seed= is not given"},
    {"rows", "most token rows show and run print (a number, or all)"},
    {"chunk", "prefill chunk (16, 32, 64) of raw mixers without chunk=, or default"},
    {"blowup", "state norm that run reports as a blow-up"},
    {"progress", "tokens/s line on long runs: auto (on a terminal), on, off"},
    {"device", "cpu or gpu (as the device command)"},
    {"arith", "fp32 (exact) or tf32: fla's GPU arithmetic on loaded models (docs/models.md)"},
    {"lla", "off, on or a ridge: record LLA beside softmax and Parallax layers (lla_eta, lla_cos, "
            "cpa, lla_gap, lla_gap_sa; costly)"},
};
enum { NSETTINGS = sizeof SETTINGS / sizeof SETTINGS[0] };

static int parse_long(const char *v, long lo, long hi, long *out, const char *key, err *e) {
    char *end;
    errno = 0;
    long x = strtol(v, &end, 10);
    if (*end || end == v || errno || x < lo || x > hi)
        return err_set(e, "set %s: expected an integer in %ld..%ld, got '%.40s'", key, lo, hi, v);
    *out = x;
    return 0;
}

static int run_set(session *s, int argc, char **argv, const char *rest, err *e) {
    (void)rest;
    char buf[64];
    if (argc == 1) {
        for (int i = 0; i < NSETTINGS; i++)
            fprintf(s->out, "  %-9s %-18s %s\n", SETTINGS[i].key,
                    setting_text(s, SETTINGS[i].key, buf, sizeof buf), SETTINGS[i].meaning);
        return 0;
    }
    const char *key = argv[1];
    if (!setting_text(s, key, buf, sizeof buf)) {
        char keys[200] = "";
        for (int i = 0; i < NSETTINGS; i++) {
            size_t u = strlen(keys);
            snprintf(keys + u, sizeof keys - u, "%s%s", i ? " " : "", SETTINGS[i].key);
        }
        return err_set(e, "set: unknown key '%.40s' (%s)", key, keys);
    }
    if (argc == 2) {
        fprintf(s->out, "%s %s\n", key, setting_text(s, key, buf, sizeof buf));
        return 0;
    }
    const char *v = argv[2];
    long x;
    if (!strcmp(key, "outdir")) {
        if (strlen(v) >= sizeof s->set_outdir) return err_set(e, "set outdir: path too long");
        if (!*v) return err_set(e, "set outdir: empty path");
        if (session_make_dirs(v, e)) return err_prefix(e, "set outdir");
        snprintf(s->set_outdir, sizeof s->set_outdir, "%s", v);
    } else if (!strcmp(key, "seed")) {
        if (parse_long(v, 0, 2147483647L, &x, key, e)) return -1;
        s->set_seed = x;
    } else if (!strcmp(key, "rows")) {
        if (!strcmp(v, "all"))
            s->set_rows = -1;
        else if (parse_long(v, 1, 1000000, &x, key, e))
            return -1;
        else
            s->set_rows = (int)x;
    } else if (!strcmp(key, "chunk")) {
        if (!strcmp(v, "default") || !strcmp(v, "0"))
            s->set_chunk = 0;
        else if (parse_long(v, 16, 64, &x, key, e) || (x != 16 && x != 32 && x != 64))
            return err_set(e, "set chunk: expected 16, 32, 64 or default, got '%.40s'", v);
        else
            s->set_chunk = (int)x;
    } else if (!strcmp(key, "blowup")) {
        char *end;
        double d = strtod(v, &end);
        if (*end || end == v || !(d > 0) || d > 1e300)
            return err_set(e, "set blowup: expected a positive number, got '%.40s'", v);
        s->set_blowup = d;
    } else if (!strcmp(key, "progress")) {
        if (!strcmp(v, "auto"))
            s->set_progress = 0;
        else if (!strcmp(v, "on"))
            s->set_progress = 1;
        else if (!strcmp(v, "off"))
            s->set_progress = -1;
        else
            return err_set(e, "set progress: expected auto, on or off, got '%.40s'", v);
    } else if (!strcmp(key, "device")) {
        char cmd[64];
        snprintf(cmd, sizeof cmd, "device %.40s", v);
        return command_exec(s, cmd, e);
    } else if (!strcmp(key, "lla")) { /* read by step (cmd_model.c) */
        char *end;
        double d = strtod(v, &end);
        if (!strcmp(v, "off"))
            s->set_lla = 0;
        else if (!strcmp(v, "on"))
            s->set_lla = 0.01;
        else if (*end || end == v || !(d > 0) || d > 1e30)
            return err_set(e, "set lla: expected off, on or a positive ridge, got '%.40s'", v);
        else
            s->set_lla = d;
    } else if (!strcmp(key, "arith")) { /* the model now and every later load (cmd_model.c) */
        if (strcmp(v, "fp32") && strcmp(v, "tf32"))
            return err_set(e, "set arith: expected fp32 or tf32, got '%.40s'", v);
        if (session_set_arith(s, !strcmp(v, "tf32"), e)) return -1;
    }
    if (!s->script_depth) /* scripts set quietly */
        fprintf(s->out, "%s %s\n", key, setting_text(s, key, buf, sizeof buf));
    return 0;
}

const command cmd_set = {
    "set",
    "[KEY [VALUE]]",
    "show or change session settings (outdir seed rows chunk blowup progress device arith lla)",
    "  set                 every setting with its value\n"
    "  set KEY             one value\n"
    "  set KEY VALUE       change it\n"
    "Keys:\n"
    "  outdir DIR      where scenes write figures (default mixscope-figures); created on set.\n"
    "                  Command lines expand $outdir (and $seed, $rows, ...) to the value.\n"
    "  seed N          seed of prompt/stream generators when seed= is not given (default 0)\n"
    "  rows N|all      most token rows show and run print (default 40)\n"
    "  chunk 16|32|64|default   prefill chunk of raw mixers without chunk= (next mixer/stream)\n"
    "  blowup X        state norm above which run reports a blow-up (default 1000)\n"
    "  progress auto|on|off     the tokens/s line of runs longer than a second (auto: on a\n"
    "                  terminal)\n"
    "  device cpu|gpu  the backend (same as the device command)\n"
    "  arith fp32|tf32 tf32: fla's GPU arithmetic (TF32 products) on the loaded model and later\n"
    "                  loads, where fla's forward has them; fp32 (default): exact float32\n"
    "  lla off|on|X    record local linear attention beside softmax and Parallax layers as the\n"
    "                  model steps, with ridge X (on: 0.01); off by default: it costs more than\n"
    "                  the layer (series lla_eta lla_cos cpa lla_gap lla_gap_sa)\n"
    "Example: set outdir /tmp/figs; export png kaczmarz $outdir/k.png",
    0,
    2,
    run_set,
    0,
    NULL};

static int run_echo(session *s, int argc, char **argv, const char *rest, err *e) {
    (void)argc, (void)argv, (void)e;
    fprintf(s->out, "%s\n", rest);
    return 0;
}

const command cmd_echo = {
    "echo",
    "[TEXT]",
    "print TEXT (scenes narrate with it; $outdir and other settings expand)",
    "Prints the rest of the line as typed (after $NAME expansion of settings). Scenes use it to\n"
    "explain each stop: echo Kaczmarz: beta = eta / |k|^2 removes the same fraction for every key.",
    0,
    -1,
    run_echo,
    0,
    NULL};

/* $NAME and ${NAME} for the settings above; anything else is left as typed. */
int session_expand(session *s, const char *line, char **out, err *e) {
    *out = NULL;
    if (!strchr(line, '$')) return 0;
    size_t cap = strlen(line) + 256, o = 0;
    char *buf = malloc(cap);
    if (!buf) return err_set(e, "out of memory");
    int changed = 0;
    for (const char *p = line; *p;) {
        const char *v = NULL, *next = p + 1;
        char vb[64];
        if (*p == '$') {
            int brace = p[1] == '{';
            const char *nm = p + 1 + brace, *end = nm;
            while (isalnum((unsigned char)*end) || *end == '_') end++;
            char key[32];
            size_t n = (size_t)(end - nm);
            if (n && n < sizeof key && (!brace || *end == '}')) {
                memcpy(key, nm, n), key[n] = '\0';
                if ((v = setting_text(s, key, vb, sizeof vb))) next = end + brace, changed = 1;
            }
        }
        size_t add = v ? strlen(v) : 1;
        if (o + add + 1 > cap) { /* grow: the value may be longer than the name */
            size_t nc = (o + add + 1) * 2;
            char *nb = nc > ((size_t)1 << 26) ? NULL : realloc(buf, nc);
            if (!nb) {
                free(buf);
                return err_set(e, "line too long after expanding settings");
            }
            buf = nb, cap = nc;
        }
        if (v)
            memcpy(buf + o, v, add);
        else
            buf[o] = *p;
        o += add;
        p = next;
    }
    buf[o] = '\0';
    if (!changed) {
        free(buf);
        return 0;
    }
    *out = buf;
    return 0;
}

void session_progress(session *s, long done, long total) {
    int on = s->set_progress > 0 || (s->set_progress == 0 && s->interactive);
    if (!on) return;
    double now = raw_now();
    if (done <= 1) s->progress_t0 = now, s->progress_last = 0;
    if (done >= total) {
        if (s->progress_last > 0) fprintf(stderr, "\r%60s\r", "");
        s->progress_last = 0;
        return;
    }
    double el = now - s->progress_t0;
    if (el < 1.0 || now - s->progress_last < 0.25) return;
    s->progress_last = now;
    fprintf(stderr, "\r  %ld/%ld tokens, %.0f tokens/s (^C stops, the session stays) ", done, total,
            (double)done / el);
    fflush(stderr);
}
