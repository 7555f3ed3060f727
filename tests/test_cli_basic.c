/* test_cli_basic.c: the batch front end, driven as a user drives it (run_mixscope: exit status and
 * output), and the word splitting, lookup and suggestion functions behind every command line. */
#include "testutil.h"

#include <sys/stat.h>

#include "cli/command.h"
#include "cli/session.h"
#include "cli/version.h"
#include "core/fileio.h"
#include "core/opts.h"
#include "tests/tgroupdir.h"

static int count_of(const char *text, const char *s) {
    int n = 0;
    for (const char *p = text; (p = strstr(p, s)); p += strlen(s)) n++;
    return n;
}

/* g_dir/name holding text; returns the malloc'd path. */
static char *script(const char *name, const char *text) {
    char *p = path_join(g_dir, name);
    assert_non_null(p);
    err e = {{0}};
    if (file_write_atomic(p, text, strlen(text), &e)) fail_msg("%s", e.msg);
    return p;
}

/* Like run_mixscope, but stdout and stderr captured apart (stderr through a file). */
static int run_split(char **out, char **errout, const char *args) {
    char *errpath = path_join(g_dir, "stderr.txt");
    char wrapped[4096];
    snprintf(wrapped, sizeof wrapped, "%s 2>'%s'", args, errpath);
    char cmd[8192];
    snprintf(cmd, sizeof cmd, "%s %s </dev/null", mixscope_bin(), wrapped);
    FILE *p = popen(cmd, "r");
    assert_non_null(p);
    size_t cap = 1 << 16, n = 0, r;
    char *buf = malloc(cap);
    assert_non_null(buf);
    while ((r = fread(buf + n, 1, cap - n - 1, p)) > 0) {
        n += r;
        if (n + 1 >= cap) buf = realloc(buf, cap *= 2), assert_non_null(buf);
    }
    buf[n] = '\0';
    int st = pclose(p);
    err e = {{0}};
    size_t en;
    if (file_read_all(errpath, 1 << 20, errout, &en, &e)) fail_msg("%s", e.msg);
    free(errpath);
    *out = buf;
    return WIFEXITED(st) ? WEXITSTATUS(st) : -1;
}

/* ---- the binary ------------------------------------------------------------------------------ */

static void test_version(void **state) {
    (void)state;
    char *out;
    assert_int_equal(run_mixscope(&out, "--version"), 0);
    assert_string_equal(out, "mixscope " MIXSCOPE_VERSION "\n");
    free(out);
    assert_int_equal(run_mixscope(&out, "-V"), 0);
    assert_string_equal(out, "mixscope " MIXSCOPE_VERSION "\n");
    free(out);
}

static void test_help_page(void **state) {
    (void)state;
    char *out, *err;
    assert_int_equal(run_split(&out, &err, "--help"), 0);
    static const char *const sections[] = {"NAME\n",      "SYNOPSIS\n",    "DESCRIPTION\n",
                                           "BATCH USE\n", "EXIT STATUS\n", "EXAMPLES\n"};
    for (int i = 0; i < 6; i++) expect_has(out, sections[i]);
    assert_true(strncmp(out, "NAME\n", 5) == 0);
    assert_true(strstr(out, "NAME\n") < strstr(out, "SYNOPSIS\n"));
    expect_has(out, "mixscope -c 'CMD; CMD; ...'");
    assert_string_equal(err, ""); /* the page goes to stdout */
    char *h;
    assert_int_equal(run_mixscope(&h, "-h"), 0);
    assert_string_equal(h, out);
    /* a manual page within 80 columns */
    for (const char *l = out; *l;) {
        const char *nl = strchr(l, '\n');
        size_t n = nl ? (size_t)(nl - l) : strlen(l), cols = 0;
        for (size_t i = 0; i < n; i++) cols += ((unsigned char)l[i] & 0xC0) != 0x80;
        if (cols > 80) fail_msg("--help line over 80 columns: %.*s", (int)n, l);
        l = nl ? nl + 1 : l + n;
    }
    free(h), free(out), free(err);
}

/* Every command's usage line, summary and help text fits 80 columns (UTF-8 characters). */
static int columns(const char *s, size_t n) {
    int c = 0;
    for (size_t i = 0; i < n; i++) c += ((unsigned char)s[i] & 0xC0) != 0x80;
    return c;
}

static void test_help_within_80_columns(void **state) {
    (void)state;
    int bad = 0;
    for (int i = 0; i < command_table_size; i++) {
        const command *c = command_table[i];
        char usage[600];
        snprintf(usage, sizeof usage, "%s %s", c->name, c->args ? c->args : "");
        if (columns(usage, strlen(usage)) > 80) printf("usage of %s: %s\n", c->name, usage), bad++;
        if (c->summary && columns(c->summary, strlen(c->summary)) > 78)
            printf("summary of %s: %s\n", c->name, c->summary), bad++;
        for (const char *h = c->help; h && *h;) {
            const char *nl = strchr(h, '\n');
            size_t n = nl ? (size_t)(nl - h) : strlen(h);
            if (columns(h, n) > 80) printf("help of %s: %.*s\n", c->name, (int)n, h), bad++;
            h = nl ? nl + 1 : h + n;
        }
    }
    assert_int_equal(bad, 0);
}

static void test_help_command(void **state) {
    (void)state;
    char *out, *err;
    assert_int_equal(run_split(&out, &err, "-c help"), 0);
    expect_has(out, "commands (help CMD for details):");
    expect_has(out, "help [CMD]");
    expect_has(out, "quit");
    assert_string_equal(err, "");
    free(out), free(err);
    assert_int_equal(run_split(&out, &err, "-c 'help help'"), 0);
    expect_has(out, "help [CMD]\n  list the commands, or explain one");
    expect_has(out, "Without an argument");
    free(out), free(err);
}

static void test_unknown_command(void **state) {
    (void)state;
    char *out, *err;
    assert_int_equal(run_split(&out, &err, "-c nosuch"), 1);
    assert_string_equal(out, "");
    assert_string_equal(err, "mixscope: unknown command 'nosuch' (type 'help' for the list)\n");
    free(out), free(err);
    assert_int_equal(run_split(&out, &err, "-c hlep"), 1);
    assert_string_equal(err, "mixscope: unknown command 'hlep' (did you mean 'help'?)\n");
    free(out), free(err);
    assert_int_equal(run_mixscope(&out, "-c 'help hlep'"), 1);
    expect_has(out, "mixscope: no command 'hlep' (did you mean 'help'?)");
    free(out);
    assert_int_equal(run_mixscope(&out, "-c qiut"), 1);
    expect_has(out, "did you mean 'quit'?");
    free(out);
}

/* The first failure stops the run: the second help never prints. */
static void test_stops_at_failure(void **state) {
    (void)state;
    char *out;
    assert_int_equal(run_mixscope(&out, "-c 'help; nosuch; help'"), 1);
    assert_int_equal(count_of(out, "commands (help CMD for details):"), 1);
    expect_has(out, "mixscope: unknown command 'nosuch'");
    free(out);
    assert_int_equal(run_mixscope(&out, "-c 'help; help'"), 0);
    assert_int_equal(count_of(out, "commands (help CMD for details):"), 2);
    free(out);
    /* quit ends the run successfully before a later bad command */
    assert_int_equal(run_mixscope(&out, "-c 'quit; nosuch'"), 0);
    assert_string_equal(out, "");
    free(out);
    /* ';' inside quotes does not split */
    assert_int_equal(run_mixscope(&out, "-c \"help 'a;b'\""), 1);
    expect_has(out, "mixscope: no command 'a;b'");
    free(out);
    /* empty runs, separators only and comments succeed quietly */
    assert_int_equal(run_mixscope(&out, "-c ''"), 0);
    assert_string_equal(out, "");
    free(out);
    assert_int_equal(run_mixscope(&out, "-c ' ; ;; '"), 0);
    assert_string_equal(out, "");
    free(out);
    assert_int_equal(run_mixscope(&out, "-c '# help'"), 0);
    assert_string_equal(out, "");
    free(out);
    assert_int_equal(run_mixscope(&out, "-c 'help device # trailing comment; nosuch'"), 0);
    expect_has(out, "device [cpu|gpu]");
    free(out);
}

static void test_usage_errors(void **state) {
    (void)state;
    char *out;
    assert_int_equal(run_mixscope(&out, "-c 'help a b'"), 1);
    assert_string_equal(out, "mixscope: usage: help [CMD]\n");
    free(out);
    assert_int_equal(run_mixscope(&out, "-c 'quit now'"), 1);
    assert_string_equal(out, "mixscope: usage: quit\n");
    free(out);
    assert_int_equal(run_mixscope(&out, "-c source"), 1);
    assert_string_equal(out, "mixscope: usage: source FILE\n");
    free(out);
}

static void test_unterminated_quote(void **state) {
    (void)state;
    char *out;
    assert_int_equal(run_mixscope(&out, "-c \"help 'abc\""), 1);
    assert_string_equal(out, "mixscope: unterminated ' quote\n");
    free(out);
    assert_int_equal(run_mixscope(&out, "-c 'help \"x'"), 1);
    assert_string_equal(out, "mixscope: unterminated \" quote\n");
    free(out);
    assert_int_equal(run_mixscope(&out, "-c \"'\""), 1);
    expect_has(out, "unterminated ' quote");
    free(out);
}

static void test_bad_options(void **state) {
    (void)state;
    char *out;
    assert_int_equal(run_mixscope(&out, "--bogus"), 2);
    assert_string_equal(out, "mixscope: unknown option '--bogus' (see mixscope --help)\n");
    free(out);
    assert_int_equal(run_mixscope(&out, "-x"), 2);
    expect_has(out, "unknown option '-x'");
    free(out);
    assert_int_equal(run_mixscope(&out, "-c"), 2);
    expect_has(out, "mixscope: -c takes one argument");
    free(out);
    assert_int_equal(run_mixscope(&out, "-c help help"), 2);
    expect_has(out, "mixscope: -c takes one argument");
    free(out);
}

static void test_script_files(void **state) {
    (void)state;
    char *ok = script("ok.scene", "# a comment line\n"
                                  "help   # list them\n"
                                  "\n"
                                  "help device; device cpu\n");
    char *bad = script("bad.scene", "help\nnosuch\nhelp\n");
    char *quote = script("quote.scene", "help\nhelp 'x\nhelp\n");
    char *quits = script("quits.scene", "quit\nnosuch\n");
    char *out;

    assert_int_equal(run_mixscope(&out, "%s", ok), 0);
    expect_has(out, "commands (help CMD for details):");
    expect_has(out, "device: cpu");
    free(out);

    /* the failing line is named as FILE:LINE and nothing after it runs */
    assert_int_equal(run_mixscope(&out, "%s", bad), 1);
    char want[600];
    snprintf(want, sizeof want, "mixscope: %s:2: unknown command 'nosuch'", bad);
    expect_has(out, want);
    assert_int_equal(count_of(out, "commands (help CMD for details):"), 1);
    free(out);

    assert_int_equal(run_mixscope(&out, "%s", quote), 1);
    snprintf(want, sizeof want, "mixscope: %s:2: unterminated ' quote", quote);
    expect_has(out, want);
    assert_int_equal(count_of(out, "commands (help CMD for details):"), 1);
    free(out);

    /* several files run in order; the first failure stops; quit ends the run with 0 */
    assert_int_equal(run_mixscope(&out, "%s %s", ok, bad), 1);
    assert_int_equal(count_of(out, "commands (help CMD for details):"), 2);
    free(out);
    assert_int_equal(run_mixscope(&out, "%s %s", bad, ok), 1);
    expect_lacks(out, "device: cpu");
    free(out);
    assert_int_equal(run_mixscope(&out, "%s %s", quits, bad), 0);
    assert_string_equal(out, "");
    free(out);

    /* `source` from -c stops at the sourced script's failure */
    char cmd[700];
    snprintf(cmd, sizeof cmd, "-c 'source %s; help'", bad);
    assert_int_equal(run_mixscope(&out, "%s", cmd), 1);
    snprintf(want, sizeof want, "%s:2: unknown command 'nosuch'", bad);
    expect_has(out, want);
    assert_int_equal(count_of(out, "commands (help CMD for details):"), 1);
    free(out);

    /* a missing script is an error naming it */
    char *none = path_join(g_dir, "none.scene");
    assert_int_equal(run_mixscope(&out, "%s", none), 1);
    snprintf(want, sizeof want, "mixscope: %s: No such file or directory", none);
    expect_has(out, want);
    free(out);
    free(ok), free(bad), free(quote), free(quits), free(none);
}

/* ---- command_split, find, suggest, exec ------------------------------------------------------ */

/* Splits `line` and compares with the NULL-terminated list of words. */
static void split_is(const char *line, const char *const *want) {
    char **argv, *buf;
    err e = {{0}};
    int n = command_split(line, &argv, &buf, &e);
    if (n < 0) fail_msg("'%s': %s", line, e.msg);
    int wn = 0;
    while (want[wn]) wn++;
    if (n != wn) fail_msg("'%s': %d words, want %d", line, n, wn);
    for (int i = 0; i < n; i++)
        if (strcmp(argv[i], want[i]) != 0)
            fail_msg("'%s': word %d is '%s', want '%s'", line, i, argv[i], want[i]);
    assert_null(argv[n]);
    free(argv), free(buf);
}

#define W(...) ((const char *const[]){__VA_ARGS__, NULL})

/* Scripts that would crash, hang or stop silently: a script sourcing itself (or two sourcing
 * each other) stops at a depth limit with one line; a NUL byte is refused with its line, not an
 * early end; a FIFO or a folder where a script should be is refused without waiting. */
static void test_hostile_scripts(void **state) {
    (void)state;
    char *self = path_join(g_dir, "self.scene");
    char text[600];
    snprintf(text, sizeof text, "source %s\n", self);
    free(script("self.scene", text));
    char *out;
    assert_int_equal(run_mixscope(&out, "%s", self), 1);
    expect_has(out, "scripts nested 32 deep");
    free(out);
    char *a = path_join(g_dir, "a.scene"), *b = path_join(g_dir, "b.scene");
    snprintf(text, sizeof text, "source %s\n", b);
    free(script("a.scene", text));
    snprintf(text, sizeof text, "source %s\n", a);
    free(script("b.scene", text));
    char cmd[1200];
    snprintf(cmd, sizeof cmd, "-c 'source %s'", a);
    assert_int_equal(run_mixscope(&out, "%s", cmd), 1);
    expect_has(out, "scripts nested 32 deep");
    free(out);
    /* a NUL byte on line 2: refused, the later lines never run and neither do the earlier */
    char *nul = path_join(g_dir, "nul.scene");
    FILE *f = fopen(nul, "wb");
    assert_non_null(f);
    fwrite("echo one\necho two\0echo three\n", 1, 29, f);
    fclose(f);
    assert_int_equal(run_mixscope(&out, "%s", nul), 1);
    expect_has(out, ":2: a NUL byte");
    expect_lacks(out, "one");
    free(out);
    /* a FIFO (no writer: opening it to read would block) and a folder */
    char *fifo = path_join(g_dir, "fifo.scene");
    assert_int_equal(mkfifo(fifo, 0600), 0);
    assert_int_equal(run_mixscope(&out, "%s", fifo), 1);
    expect_has(out, "not a regular file (a FIFO)");
    free(out);
    snprintf(cmd, sizeof cmd, "-c 'source %s'", g_dir);
    assert_int_equal(run_mixscope(&out, "%s", cmd), 1);
    expect_has(out, "not a regular file (a folder)");
    free(out);
    unlink(fifo);
    free(self), free(a), free(b), free(nul), free(fifo);
}

/* Output that cannot be written (a full device) fails the run, with the reason on stderr. */
static void test_lost_output(void **state) {
    (void)state;
    if (access("/dev/full", W_OK) != 0) skip();
    char *out, *errout;
    assert_int_equal(run_split(&out, &errout, "-c help >/dev/full"), 1);
    expect_has(errout, "mixscope: writing the output: No space left on device");
    free(out), free(errout);
}

/* Numbers are range-checked into the type they are stored in, a given 0 or negative is not read
 * as "the default", and model random's typos and model_type= are refused. */
static void test_numbers_refused(void **state) {
    (void)state;
    static const char *const CASES[][2] = {
        {"prompt niah len=4294967302", "option 'len': expected an integer in 1..16777216"},
        {"prompt niah len=1e12", "option 'len': expected an integer in 1..16777216, got '1e12'"},
        {"prompt mqar pairs=0", "option 'pairs': expected an integer in 1..4194304"},
        {"prompt niah depth=-1", "option 'depth': expected a fraction in 0..1 or random"},
        {"model random gdn hidden=0", "option 'hidden': expected an integer in 1..16384"},
        {"model random gdn heads=0", "option 'heads': expected an integer in 1..4096"},
        {"model random gdn head_dim=-4", "option 'head_dim': expected an integer in 1..4096"},
        {"model random gdn layer=4", "unknown option 'layer' (did you mean layers=?)"},
        {"model random gdn model_type=gla", "the model type comes from the mixer"},
        {"mixer gdn; stream keys 8 heads=65", "option 'heads': expected an integer in 1..64"},
        {"mixer gdn; stream keys 8; run; show rho layer=-1", "option 'layer': expected an integer"},
        {"mixer gdn; stream keys 8; run; export csv rho x.csv head=-1",
         "option 'head': expected an integer"},
        {"set chunk 0", "set chunk: expected 16, 32, 64 or default"},
        /* compare that compared nothing, or asked for no probe at all, fails */
        {"mixer gdn; stream keys 8; compare bogus1 bogus2", "compare: no lane could run"},
        {"mixer gdn; stream keys 8; compare gdn probe=bogus", "probe=bogus: no such probe"},
        {"model random gdn; prompt hello; compare softmax", "compare: no core could run"},
        /* "did you mean" for probes and mixers as for commands */
        {"mixer gdn; stream keys 8; run; show rhoo", "no probe 'rhoo' (did you mean rho?)"},
        {"mixer gdn; stream keys 8; run; export csv stat_norm x.csv",
         "no probe 'stat_norm' (did you mean state_norm?)"},
        {"mixer kacmarz", "unknown mixer 'kacmarz' (did you mean kaczmarz?)"},
        {"model random kacmarz", "unknown mixer 'kacmarz' (did you mean kaczmarz?)"},
        {"prompt keys", "prompt: 'keys' is a stream for raw mixers"},
    };
    for (size_t i = 0; i < sizeof CASES / sizeof CASES[0]; i++) {
        char *out;
        char cmd[512];
        snprintf(cmd, sizeof cmd, "-c '%s'", CASES[i][0]);
        int rc = run_mixscope(&out, "%s", cmd);
        if (rc != 1) fail_msg("'%s' exited %d, want 1:\n%s", CASES[i][0], rc, out);
        expect_has(out, CASES[i][1]);
        free(out);
    }
    /* a terminal escape in a name reaches the terminal as text, never as an escape */
    {
        char *o2;
        assert_int_equal(run_mixscope(&o2, "-c 'load /tmp/\033[31mred'"), 1);
        expect_has(o2, "/tmp/\\x1b[31mred");
        assert_null(strchr(o2, '\033'));
        free(o2);
    }
    /* the default stays the default, and `random` is a depth */
    char *out;
    assert_int_equal(run_mixscope(&out, "-c 'prompt niah len=64 depth=random'"), 0);
    free(out);
}

/* Exports replace regular files only, follow symlinks, keep the existing file's mode, and take
 * long names. */
static void test_export_destinations(void **state) {
    (void)state;
    char *fifo = path_join(g_dir, "dest.fifo"), *target = path_join(g_dir, "target.csv"),
         *link = path_join(g_dir, "link.csv");
    unlink(fifo), unlink(target), unlink(link);
    assert_int_equal(mkfifo(fifo, 0600), 0);
    char cmd[1600], *out;
    snprintf(cmd, sizeof cmd, "-c 'mixer gdn; stream keys 8; run; export csv rho %s'", fifo);
    assert_int_equal(run_mixscope(&out, "%s", cmd), 1);
    expect_has(out, "a FIFO, not replaced");
    free(out);
    struct stat sb;
    assert_int_equal(stat(fifo, &sb), 0);
    assert_true(S_ISFIFO(sb.st_mode)); /* still the FIFO */
    free(script("target.csv", "old\n"));
    assert_int_equal(chmod(target, 0600), 0);
    assert_int_equal(symlink("target.csv", link), 0);
    snprintf(cmd, sizeof cmd, "-c 'mixer gdn; stream keys 8; run; export csv rho %s'", link);
    assert_int_equal(run_mixscope(&out, "%s", cmd), 0);
    free(out);
    assert_int_equal(lstat(link, &sb), 0);
    assert_true(S_ISLNK(sb.st_mode)); /* the link is kept and followed */
    assert_int_equal(stat(target, &sb), 0);
    assert_int_equal(sb.st_mode & 0777, 0600); /* the mode is kept */
    assert_true(sb.st_size > 100);
    /* a 250-character name: the temporary file's name is short */
    char name[300];
    memset(name, 'n', 250), name[250] = '\0';
    char *longp = path_join(g_dir, name);
    snprintf(cmd, sizeof cmd, "-c 'mixer gdn; stream keys 8; run; export csv rho %s'", longp);
    assert_int_equal(run_mixscope(&out, "%s", cmd), 0);
    free(out);
    assert_int_equal(stat(longp, &sb), 0);
    unlink(longp), unlink(fifo), unlink(link), unlink(target);
    free(longp), free(fifo), free(target), free(link);
}

/* save over a checkpoint that fails half way (here: a file size limit, as a full disk would)
 * leaves the old checkpoint loadable and no temporary file behind; save onto a file says so. */
static void test_save_fails_whole(void **state) {
    (void)state;
    char *dir = path_join(g_dir, "ckpt"), cmd[2400], *out;
    snprintf(cmd, sizeof cmd, "-c 'model random gdn seed=1; save %s'", dir);
    assert_int_equal(run_mixscope(&out, "%s", cmd), 0);
    free(out);
    /* the bigger model's weights (~3 MB) cannot be written under a 1 MB limit */
    snprintf(cmd, sizeof cmd,
             "sh -c \"trap '' XFSZ; ulimit -f 1024; exec '%s' -c 'model random gdn hidden=256 "
             "seed=2; save %s'\" >/dev/null 2>&1",
             mixscope_bin(), dir);
    int st = system(cmd);
    assert_true(WIFEXITED(st) && WEXITSTATUS(st) == 1);
    snprintf(cmd, sizeof cmd, "-c 'load %s'", dir);
    assert_int_equal(run_mixscope(&out, "%s", cmd), 0);
    expect_has(out, "hidden 64"); /* the old one, whole */
    free(out);
    snprintf(cmd, sizeof cmd, "ls -a '%s' | grep -c tmp", dir);
    FILE *p = popen(cmd, "r");
    int ntmp = -1;
    assert_int_equal(fscanf(p, "%d", &ntmp), 1);
    pclose(p);
    assert_int_equal(ntmp, 0);
    char *file = path_join(g_dir, "afile");
    free(script("afile", "x"));
    snprintf(cmd, sizeof cmd, "-c 'model random gdn; save %s'", file);
    assert_int_equal(run_mixscope(&out, "%s", cmd), 1);
    expect_has(out, "a file is there; save writes a folder");
    free(out), free(file), free(dir);
}

/* view in batch use with a stale DISPLAY (no server there): no display, said at once. */
static void test_view_stale_display(void **state) {
    (void)state;
    char cmd[1200];
    snprintf(cmd, sizeof cmd,
             "env DISPLAY=:77 WAYLAND_DISPLAY=wayland-77 timeout 30 '%s' -c 'mixer gdn; stream "
             "keys 8; run; view kaczmarz' 2>/dev/null",
             mixscope_bin());
    FILE *p = popen(cmd, "r");
    assert_non_null(p);
    static char out[1 << 16];
    size_t n = fread(out, 1, sizeof out - 1, p);
    out[n] = '\0';
    int st = pclose(p);
    assert_true(WIFEXITED(st) && WEXITSTATUS(st) == 0); /* 124: it waited for the timeout */
    expect_has(out, "view: no display");
    expect_has(out, "export png kaczmarz");
}

/* The trace has a cap: past it, stepping stops with what and how much. */
static void test_trace_cap(void **state) {
    (void)state;
    char *out;
    setenv("MIXSCOPE_TRACE_MAX_MB", "2", 1);
    int rc = run_mixscope(&out, "-c 'mixer gdn heads=4 dk=64 dv=64; stream keys 2000; run'");
    unsetenv("MIXSCOPE_TRACE_MAX_MB");
    assert_int_equal(rc, 1);
    expect_has(out, "the probe trace is full: ");
    expect_has(out, "MiB, its cap");
    free(out);
}

/* $outdir with a space or a quote stays one word in a command line. */
static void test_outdir_with_space(void **state) {
    (void)state;
    const char *names[] = {"my dir", "it's here"};
    for (int i = 0; i < 2; i++) {
        char *dir = path_join(g_dir, names[i]), text[1600], *out;
        char q = strchr(names[i], '\'') ? '"' : '\'';
        snprintf(text, sizeof text,
                 "set outdir %c%s%c\nmixer gdn\nstream keys 8\nrun\nexport csv rho $outdir/x.csv\n",
                 q, dir, q);
        char *sc = script("outdir.scene", text);
        int rc = run_mixscope(&out, "'%s'", sc);
        if (rc != 0) fail_msg("%s: exit %d:\n%s", names[i], rc, out);
        free(out), free(sc);
        char *f = path_join(dir, "x.csv");
        struct stat sb;
        assert_int_equal(stat(f, &sb), 0);
        free(f), free(dir);
    }
}

static void test_split(void **state) {
    (void)state;
    split_is("", W(NULL));
    split_is("   \t ", W(NULL));
    split_is("help", W("help"));
    split_is("  a  b\tc \n", W("a", "b", "c"));
    split_is("replay gdn in.safetensors prefix=gdr. out=o.safetensors",
             W("replay", "gdn", "in.safetensors", "prefix=gdr.", "out=o.safetensors"));
    split_is("'a b' \"c d\"", W("a b", "c d"));
    split_is("x'y z'w", W("xy zw"));
    split_is("prompt \"it's\" 'say \"hi\"'", W("prompt", "it's", "say \"hi\""));
    split_is("'' \"\"", W("", ""));
    split_is("a # comment 'unterminated", W("a"));
    split_is("# only a comment", W(NULL));
    split_is("a#b c", W("a#b", "c"));
    split_is("'#not a comment'", W("#not a comment"));
    split_is("a;b", W("a;b")); /* ';' separates commands in scripts, not words */
    split_is("key='a b'", W("key=a b"));
}

static void test_split_errors(void **state) {
    (void)state;
    static const struct {
        const char *line, *want;
    } bad[] = {
        {"'", "unterminated ' quote"},         {"\"", "unterminated \" quote"},
        {"help 'abc", "unterminated ' quote"}, {"a \"b 'c' d", "unterminated \" quote"},
        {"x='a b", "unterminated ' quote"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        char **argv = (char **)&argv, *buf = (char *)&buf;
        err e = {{0}};
        assert_int_equal(command_split(bad[i].line, &argv, &buf, &e), -1);
        assert_string_equal(e.msg, bad[i].want);
    }
}

/* Many one-letter words fill the word array to capacity. */
static void test_split_many_words(void **state) {
    (void)state;
    for (int len = 0; len < 200; len++) {
        char line[512];
        int k = 0;
        for (int i = 0; i < len; i++)
            k += snprintf(line + k, sizeof line - (size_t)k, i ? " a" : "a");
        line[k] = '\0';
        char **argv, *buf;
        err e = {{0}};
        assert_int_equal(command_split(line, &argv, &buf, &e), len);
        for (int i = 0; i < len; i++) assert_string_equal(argv[i], "a");
        assert_null(argv[len]);
        free(argv), free(buf);
    }
    /* and empty quoted words, the densest form */
    char line[400];
    int k = 0;
    for (int i = 0; i < 100; i++) k += snprintf(line + k, sizeof line - (size_t)k, "'' ");
    char **argv, *buf;
    err e = {{0}};
    assert_int_equal(command_split(line, &argv, &buf, &e), 100);
    assert_string_equal(argv[99], "");
    free(argv), free(buf);
}

static void test_find_and_suggest(void **state) {
    (void)state;
    const command *c = command_find("help");
    assert_non_null(c);
    assert_string_equal(c->name, "help");
    assert_non_null(c->run);
    assert_non_null(command_find("quit"));
    assert_non_null(command_find("source"));
    assert_null(command_find("nosuch"));
    assert_null(command_find("HELP")); /* names are exact */
    assert_null(command_find(""));
    assert_string_equal(command_suggest("hlep"), "help");
    assert_string_equal(command_suggest("hepl"), "help");
    assert_string_equal(command_suggest("HELP"), "help"); /* case does not count as a typo */
    assert_string_equal(command_suggest("hel"), "help");  /* a prefix */
    assert_string_equal(command_suggest("qit"), "quit");
    assert_string_equal(command_suggest("sorce"), "source");
    assert_null(command_suggest("xyzzy"));
    assert_null(command_suggest("nosuch"));
    assert_null(command_suggest(""));
    char longname[300];
    memset(longname, 'h', sizeof longname - 1);
    longname[sizeof longname - 1] = '\0';
    assert_null(command_suggest(longname));
    /* every table entry is well formed: a name, a summary, a run function, sane arg counts */
    int n = 0;
    for (int i = 0; i < command_table_size; i++) {
        const command *t = command_table[i];
        if (!t) continue;
        n++;
        assert_non_null(t->name);
        assert_non_null(t->summary);
        assert_non_null(t->run);
        assert_true(t->min_args >= 0);
        assert_true(t->max_args < 0 || t->max_args >= t->min_args);
        assert_ptr_equal(command_find(t->name), t);
    }
    assert_true(n >= 3);
}

/* command_exec / command_exec_script on a session whose output goes to a temporary file. */
static void test_exec(void **state) {
    (void)state;
    session s;
    err e = {{0}};
    assert_int_equal(session_init(&s, &e), 0);
    s.out = tmpfile();
    assert_non_null(s.out);
    assert_int_equal(command_exec(&s, "", &e), 0);
    assert_int_equal(command_exec(&s, "   # nothing", &e), 0);
    assert_int_equal(command_exec(&s, "help", &e), 0);
    assert_int_equal(command_exec(&s, "'help' help", &e), 0);
    assert_int_equal(command_exec(&s, "nosuch", &e), -1);
    assert_string_equal(e.msg, "unknown command 'nosuch' (type 'help' for the list)");
    assert_int_equal(command_exec(&s, "hlep", &e), -1);
    assert_string_equal(e.msg, "unknown command 'hlep' (did you mean 'help'?)");
    assert_int_equal(command_exec(&s, "help 'x", &e), -1);
    assert_string_equal(e.msg, "unterminated ' quote");
    assert_int_equal(command_exec(&s, "help a b", &e), -1);
    assert_string_equal(e.msg, "usage: help [CMD]");
    assert_int_equal(s.quit, 0);
    assert_int_equal(command_exec(&s, "quit", &e), 0);
    assert_int_equal(s.quit, 1);
    s.quit = 0;

    /* scripts: stop at the first failure with FILE:LINE, or count failures and go on */
    assert_int_equal(command_exec_script(&s, "help\n\nnosuch; help\n", "t.scene", 1, &e), -1);
    assert_string_equal(e.msg, "t.scene:3: unknown command 'nosuch' (type 'help' for the list)");
    assert_int_equal(command_exec_script(&s, "nosuch;hlep\nhelp", NULL, 1, &e), -1);
    assert_string_equal(e.msg, "unknown command 'nosuch' (type 'help' for the list)");
    assert_int_equal(command_exec_script(&s, "help; 'a;b'; \"c;d\" # e;f\nhelp", "t", 0, &e), -1);
    assert_string_equal(e.msg, "2 commands failed");
    assert_int_equal(command_exec_script(&s, "help\n# x; nosuch\nhelp 'help'", "t", 1, &e), 0);
    assert_int_equal(command_exec_script(&s, "", "t", 1, &e), 0);
    assert_int_equal(command_exec_script(&s, "quit; nosuch", "t", 1, &e), 0);
    assert_int_equal(s.quit, 1);

    /* help printed the table into s.out */
    fflush(s.out);
    long size = ftell(s.out);
    assert_true(size > 100);
    rewind(s.out);
    char *text = calloc(1, (size_t)size + 1);
    assert_non_null(text);
    assert_int_equal(fread(text, 1, (size_t)size, s.out), (size_t)size);
    expect_has(text, "commands (help CMD for details):");
    free(text);
    fclose(s.out);
    session_free(&s);
}

/* key=value arguments, as commands take them after command_split. */
static void test_opts(void **state) {
    (void)state;
    char **argv, *buf;
    err e = {{0}};
    int argc = command_split(
        "chunk=32 eps=1e-6 range=0..1 neg=-2..-1 one=3 name='a b' empty=", &argv, &buf, &e);
    assert_int_equal(argc, 7);
    opts o;
    assert_int_equal(opts_parse(&o, argc, argv, &e), 0);
    long l;
    double d, lo, hi;
    assert_int_equal(opts_int(&o, "chunk", 64, &l, &e), 0);
    assert_int_equal(l, 32);
    assert_int_equal(opts_int(&o, "absent", 64, &l, &e), 0);
    assert_int_equal(l, 64);
    assert_int_equal(opts_float(&o, "eps", 0, &d, &e), 0);
    assert_true(d == 1e-6);
    assert_int_equal(opts_range(&o, "range", 5, 6, &lo, &hi, &e), 0); /* integer bounds */
    assert_true(lo == 0 && hi == 1);
    assert_int_equal(opts_range(&o, "neg", 0, 0, &lo, &hi, &e), 0);
    assert_true(lo == -2 && hi == -1);
    assert_int_equal(opts_range(&o, "one", 0, 0, &lo, &hi, &e), 0); /* one number: LO = HI */
    assert_true(lo == 3 && hi == 3);
    assert_int_equal(opts_range(&o, "absent", 5, 6, &lo, &hi, &e), 0);
    assert_true(lo == 5 && hi == 6);
    assert_string_equal(opts_str(&o, "name", NULL), "a b");
    assert_int_equal(opts_check_unused(&o, &e), -1);
    assert_string_equal(e.msg, "unknown option 'empty'");
    assert_string_equal(opts_str(&o, "empty", "x"), "");
    assert_int_equal(opts_check_unused(&o, &e), 0);
    /* wrong values are errors naming the key */
    assert_int_equal(opts_int(&o, "eps", 0, &l, &e), -1);
    assert_string_equal(e.msg, "option 'eps': expected an integer, got '1e-6'");
    assert_int_equal(opts_float(&o, "name", 0, &d, &e), -1);
    assert_string_equal(e.msg, "option 'name': expected a number, got 'a b'");
    assert_int_equal(opts_float(&o, "empty", 0, &d, &e), -1);
    opts_free(&o);
    free(argv), free(buf);

    static const char *const bad_ranges[] = {"r=..5",   "r=1..",    "r=3..1",   "r=a..b", "r=1..2x",
                                             "r=1x..2", "r=nan..1", "r=1..inf", "r=.."};
    for (size_t i = 0; i < sizeof bad_ranges / sizeof bad_ranges[0]; i++) {
        char *one[1] = {(char *)bad_ranges[i]};
        assert_int_equal(opts_parse(&o, 1, one, &e), 0);
        if (opts_range(&o, "r", 0, 1, &lo, &hi, &e) == 0)
            fail_msg("'%s' accepted as [%g, %g]", bad_ranges[i], lo, hi);
        expect_has(e.msg, "option 'r': expected LO..HI");
        opts_free(&o);
    }
    static const struct {
        const char *words, *want;
    } bad[] = {
        {"chunk", "expected key=value, got 'chunk'"},
        {"=3", "expected key=value, got '=3'"},
        {"a=1 b=2 a=3", "option 'a' given twice"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        argc = command_split(bad[i].words, &argv, &buf, &e);
        assert_true(argc > 0);
        assert_int_equal(opts_parse(&o, argc, argv, &e), -1);
        assert_string_equal(e.msg, bad[i].want);
        assert_int_equal(o.n, 0);
        free(argv), free(buf);
    }
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_version),
        cmocka_unit_test(test_help_page),
        cmocka_unit_test(test_help_command),
        cmocka_unit_test(test_help_within_80_columns),
        cmocka_unit_test(test_unknown_command),
        cmocka_unit_test(test_stops_at_failure),
        cmocka_unit_test(test_usage_errors),
        cmocka_unit_test(test_unterminated_quote),
        cmocka_unit_test(test_bad_options),
        cmocka_unit_test(test_script_files),
        cmocka_unit_test(test_hostile_scripts),
        cmocka_unit_test(test_lost_output),
        cmocka_unit_test(test_numbers_refused),
        cmocka_unit_test(test_export_destinations),
        cmocka_unit_test(test_save_fails_whole),
        cmocka_unit_test(test_view_stale_display),
        cmocka_unit_test(test_trace_cap),
        cmocka_unit_test(test_outdir_with_space),
        cmocka_unit_test(test_split),
        cmocka_unit_test(test_split_errors),
        cmocka_unit_test(test_split_many_words),
        cmocka_unit_test(test_find_and_suggest),
        cmocka_unit_test(test_exec),
        cmocka_unit_test(test_opts),
    };
    return cmocka_run_group_tests(tests, group_setup, group_teardown);
}
