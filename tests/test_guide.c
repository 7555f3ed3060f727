/* test_guide.c: every example block of docs/guide.md runs, so the guide cannot drift from the
 * program (issue 17: examples that failed as written, sample output from another seed).
 *
 * Each fenced block is preceded by a directive, and a block without one fails the test:
 *
 *   <!-- guide-test: cards [PRELUDE] -->      a reference card: every line that starts with a
 *       command is run after PRELUDE in one session, in order; the command is the text before a
 *       run of three spaces (the rest is the card's explanation), "a / b / c" are three commands.
 *       Every one must succeed. `train` lines run 2 steps (steps= set to 2).
 *   <!-- guide-test: output CMDS -->           a sample: CMDS run, and every line of the block
 *       that is not one of CMDS must appear in what they print (spaces collapsed).
 *   <!-- guide-test: output-fails CMDS -->     the same for a sample of a failing command.
 *   <!-- guide-test: skip REASON -->           not mixscope commands (shell lines).
 *
 * The cards run in a temporary folder holding what they name: ckpt/ (a random gated_deltanet
 * with a vocabulary of 1000, the Llama-style tokenizer.json of tests/tokenizers and an
 * expected.safetensors of input_ids) and story.txt. */
#include "testutil.h"

#include <ctype.h>

#include "core/fileio.h"
#include "core/safetensors.h"
#include "core/tensor.h"

static char g_root[1024], g_bin[1200];
static char *g_dir;

static int setup(void **st) {
    (void)st;
    const char *root = getenv("MIXSCOPE_ROOT");
    if (root && *root && chdir(root) != 0) return -1;
    if (!getcwd(g_root, sizeof g_root)) return -1;
    const char *b = mixscope_bin();
    snprintf(g_bin, sizeof g_bin, "%s%s%s", b[0] == '/' ? "" : g_root, b[0] == '/' ? "" : "/", b);
    g_dir = test_tmpdir();
    return 0;
}

static int teardown(void **st) {
    (void)st;
    test_rmdir(g_dir);
    return 0;
}

/* Runs `mixscope -c 'script'` in g_dir; stdout and stderr into *out. */
static int run_in_dir(const char *script, char **out) {
    char *sp = path_join(g_dir, "script.txt"), *op = path_join(g_dir, "out.txt");
    FILE *f = fopen(sp, "w");
    assert_non_null(f);
    fputs(script, f);
    fclose(f);
    char cmd[4096];
    snprintf(cmd, sizeof cmd, "cd '%s' && '%s' -c \"$(cat '%s')\" > '%s' 2>&1", g_dir, g_bin, sp,
             op);
    int rc = system(cmd);
    err e = {{0}};
    size_t n;
    if (file_read_all(op, 64u << 20, out, &n, &e)) *out = strdup("");
    free(sp), free(op);
    return WIFEXITED(rc) ? WEXITSTATUS(rc) : -1;
}

static void fixtures(void) {
    char *out;
    if (run_in_dir("model random gdn layers=1 hidden=64 heads=1 head_dim=32 vocab=1000 seed=2; "
                   "save ckpt",
                   &out))
        fail_msg("fixture: %s", out);
    free(out);
    char cmd[2400];
    snprintf(cmd, sizeof cmd, "cp '%s/tests/tokenizers/llama.json' '%s/ckpt/tokenizer.json'",
             g_root, g_dir);
    assert_int_equal(system(cmd), 0);
    char *p = path_join(g_dir, "story.txt");
    FILE *f = fopen(p, "w");
    fputs("Once upon a time a delta rule wrote keys into a state.\n", f);
    fclose(f);
    free(p);
    int64_t sh[2] = {1, 8};
    err e = {{0}};
    tensor *t = tensor_new("input_ids", DT_I32, 2, sh, &e);
    for (int i = 0; i < 8; i++) ((int32_t *)t->data)[i] = 10 + 7 * i;
    p = path_join(g_dir, "ckpt/expected.safetensors");
    assert_int_equal(st_write(p, (const tensor *const *)&t, 1, NULL, &e), 0);
    free(p);
    tensor_free(t);
}

/* s with runs of white space as one space, trimmed (malloc'd) */
static char *squeeze(const char *s) {
    char *o = malloc(strlen(s) + 1);
    size_t n = 0;
    int sp = 1;
    for (; *s; s++) {
        if (isspace((unsigned char)*s)) {
            if (!sp) o[n++] = ' ';
            sp = 1;
        } else {
            o[n++] = *s, sp = 0;
        }
    }
    while (n && o[n - 1] == ' ') n--;
    o[n] = 0;
    return o;
}

static int starts_with_command(const char *line) {
    static const char *const CMDS[] = {
        "load",    "model",  "swap",    "save",   "tokens",     "tokenizer", "tokenize", "prompt",
        "step",    "run",    "reset",   "export", "train",      "view",      "diagnose", "mixer",
        "stream",  "show",   "compare", "figure", "set",        "edit",      "edits",    "snapshot",
        "restore", "ablate", "lens",    "replay", "detokenize", "device",    "info",     "echo"};
    for (size_t i = 0; i < sizeof CMDS / sizeof CMDS[0]; i++) {
        size_t n = strlen(CMDS[i]);
        if (!strncmp(line, CMDS[i], n) && (line[n] == ' ' || line[n] == 0)) return 1;
    }
    return 0;
}

/* A card line's commands: the text before three spaces, split at " / " (into buf, ';'-joined). */
static void card_commands(const char *line, char *buf, size_t n) {
    const char *end = strstr(line, "   ");
    size_t len = end ? (size_t)(end - line) : strlen(line);
    char one[512];
    snprintf(one, sizeof one, "%.*s", (int)len, line);
    buf[0] = 0;
    for (char *p = one, *q; p; p = q) {
        q = strstr(p, " / ");
        if (q) *q = 0, q += 3;
        char cmd[600];
        snprintf(cmd, sizeof cmd, "%s", p);
        if (!strncmp(cmd, "train ", 6)) { /* 2 steps, whatever the card says */
            char *st = strstr(cmd, "steps=");
            if (st) {
                char *e = st + 6;
                while (isdigit((unsigned char)*e)) e++;
                memmove(st + 7, e, strlen(e) + 1);
                st[6] = '2';
            } else {
                strncat(cmd, " steps=2", sizeof cmd - strlen(cmd) - 1);
            }
        }
        size_t u = strlen(buf);
        snprintf(buf + u, n - u, "%s%s", u ? "\n" : "", cmd);
    }
}

static void test_guide_examples(void **st) {
    (void)st;
    fixtures();
    char *text;
    size_t n;
    err e = {{0}};
    assert_int_equal(file_read_all("docs/guide.md", 4u << 20, &text, &n, &e), 0);
    int blocks = 0, failed = 0, lineno = 0;
    char directive[1024] = "";
    for (char *line = text, *next; line && *line; line = next) {
        next = strchr(line, '\n');
        if (next) *next++ = 0;
        lineno++;
        if (!strncmp(line, "<!-- guide-test:", 16)) {
            snprintf(directive, sizeof directive, "%s", line + 16);
            char *endc = strstr(directive, "-->");
            if (endc) *endc = 0;
            continue;
        }
        if (strncmp(line, "```", 3)) {
            if (*line) directive[0] = 0; /* a directive sits right above its block */
            continue;
        }
        /* a block: gather its lines */
        int start = lineno;
        char *body = calloc(1, n + 1);
        for (line = next; line && strncmp(line, "```", 3); line = next) {
            next = strchr(line, '\n');
            if (next) *next++ = 0;
            lineno++;
            strcat(body, line), strcat(body, "\n");
        }
        if (line) { /* the closing fence */
            next = strchr(line, '\n');
            if (next) *next++ = 0;
            lineno++;
        }
        blocks++;
        char *d = squeeze(directive);
        char kind[32] = "";
        sscanf(d, "%31s", kind);
        const char *arg = d + strlen(kind);
        while (*arg == ' ') arg++;
        if (!kind[0]) {
            printf("docs/guide.md:%d: a block without a guide-test directive\n", start);
            failed++;
        } else if (!strcmp(kind, "cards")) {
            const char *prelude = strncmp(arg, "(", 1) ? arg : "";
            size_t cap = strlen(body) * 2 + strlen(prelude) + 64;
            char *script = malloc(cap);
            snprintf(script, cap, "%s\n", prelude);
            for (char *l = body, *nl; l && *l; l = nl) {
                nl = strchr(l, '\n');
                if (nl) *nl++ = 0;
                if (!starts_with_command(l)) continue;
                char cmds[1200];
                card_commands(l, cmds, sizeof cmds);
                strncat(script, cmds, cap - strlen(script) - 2);
                strcat(script, "\n");
            }
            char *out;
            int rc = run_in_dir(script, &out);
            if (rc) {
                printf("docs/guide.md:%d: the card fails (exit %d):\n%s\n--\n%s\n", start, rc,
                       script, out);
                failed++;
            }
            free(out), free(script);
        } else if (!strcmp(kind, "output") || !strcmp(kind, "output-fails")) {
            char *out;
            char *script = strdup(arg);
            int rc = run_in_dir(script, &out);
            int want_fail = !strcmp(kind, "output-fails");
            if ((rc != 0) != want_fail) {
                printf("docs/guide.md:%d: '%s' exits %d\n%s\n", start, arg, rc, out);
                failed++;
            }
            char *so = squeeze(out);
            for (char *l = body, *nl; l && *l; l = nl) {
                nl = strchr(l, '\n');
                if (nl) *nl++ = 0;
                char *sl = squeeze(l);
                /* the command line itself, as the sample shows it, is not output */
                if (*sl && !strstr(arg, sl) && !strstr(so, sl)) {
                    printf("docs/guide.md:%d: the sample line\n  %s\nis not in what '%s' "
                           "prints:\n%s\n",
                           start, sl, arg, out);
                    failed++;
                }
                free(sl);
            }
            free(so), free(out), free(script);
        } else if (strcmp(kind, "skip")) {
            printf("docs/guide.md:%d: unknown guide-test kind '%s'\n", start, kind);
            failed++;
        }
        free(d), free(body);
        directive[0] = 0;
    }
    printf("guide: %d example blocks\n", blocks);
    assert_true(blocks >= 13);
    assert_int_equal(failed, 0);
    free(text);
}

int main(void) {
    const struct CMUnitTest tests[] = {cmocka_unit_test(test_guide_examples)};
    return cmocka_run_group_tests(tests, setup, teardown);
}
