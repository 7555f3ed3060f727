/* test_tui.c: the ncurses dashboard and the terminal-only behaviour of the REPL (progress line,
 * ^C), driven headless in tmux: keys go in with send-keys, the screen comes back with
 * capture-pane. Each test starts its own tmux server (-L) and skips with a message when tmux is
 * not installed. */
#include "testutil.h"

#include <sys/stat.h>

#include "core/fileio.h"

static char *g_dir;
static char g_sock[64];
static char g_bin[1200], g_root[1024];

static int have_tmux(void) {
    return system("command -v tmux >/dev/null 2>&1") == 0;
}

static int group_setup(void **state) {
    (void)state;
    const char *root = getenv("MIXSCOPE_ROOT");
    if (root && *root && chdir(root) != 0) return -1;
    if (!getcwd(g_root, sizeof g_root)) return -1;
    const char *b = mixscope_bin();
    snprintf(g_bin, sizeof g_bin, "%s%s%s", b[0] == '/' ? "" : g_root, b[0] == '/' ? "" : "/", b);
    g_dir = test_tmpdir();
    snprintf(g_sock, sizeof g_sock, "mixscope-test-%d", (int)getpid());
    if (!have_tmux()) printf("test_tui: tmux is not installed; the dashboard tests skip\n");
    return 0;
}

static int group_teardown(void **state) {
    (void)state;
    char cmd[256];
    snprintf(cmd, sizeof cmd, "tmux -L %s kill-server >/dev/null 2>&1", g_sock);
    if (system(cmd)) { /* no server left: fine */
    }
    test_rmdir(g_dir);
    return 0;
}

static int tmux(const char *fmt, ...) {
    char args[4096], cmd[4400];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(args, sizeof args, fmt, ap);
    va_end(ap);
    snprintf(cmd, sizeof cmd, "tmux -L %s -f /dev/null %s", g_sock, args);
    return system(cmd);
}

/* The pane's text (escapes: with colour escape sequences). */
static char *capture(int escapes) {
    char cmd[256];
    snprintf(cmd, sizeof cmd, "tmux -L %s capture-pane -p %s -t T", g_sock, escapes ? "-e" : "");
    FILE *p = popen(cmd, "r");
    assert_non_null(p);
    size_t cap = 1 << 16, n = 0, r;
    char *buf = malloc(cap);
    while ((r = fread(buf + n, 1, cap - n - 1, p)) > 0)
        if ((n += r) + 1 >= cap) buf = realloc(buf, cap *= 2);
    buf[n] = '\0';
    pclose(p);
    return buf;
}

/* Polls the pane until it shows `want` (up to ~10 s); returns the capture. */
static char *wait_for(const char *want) {
    for (int i = 0; i < 200; i++) {
        char *c = capture(0);
        if (strstr(c, want)) return c;
        free(c);
        usleep(50000);
    }
    char *c = capture(0);
    fail_msg("the screen never showed '%s'; it shows:\n%s", want, c);
    return c;
}

static void wait_gone(const char *what) {
    for (int i = 0; i < 200; i++) {
        char *c = capture(0);
        int there = strstr(c, what) != NULL;
        free(c);
        if (!there) return;
        usleep(50000);
    }
    fail_msg("'%s' stayed on the screen", what);
}

/* Starts a session T of w x h running `shell` (the exit status goes to g_dir/exit). */
static void start(int w, int h, const char *env, const char *args) {
    char *exitf = path_join(g_dir, "exit");
    unlink(exitf);
    tmux("kill-session -t T >/dev/null 2>&1");
    /* a server still shutting down after the last session was killed refuses the new one
     * ("server exited unexpectedly"): try again after a moment */
    int rc = -1;
    for (int tries = 0; tries < 5 && rc != 0; tries++) {
        if (tries) usleep(200000);
        rc = tmux("new-session -d -s T -x %d -y %d -c '%s' \"env %s XDG_STATE_HOME='%s' '%s' %s; "
                  "echo EXIT=\\$? > '%s'; sleep 60\"",
                  w, h, g_root, env, g_dir, g_bin, args, exitf);
    }
    assert_int_equal(rc, 0);
    free(exitf);
}

static void wait_exit(int want) {
    char *exitf = path_join(g_dir, "exit"), *t = NULL;
    size_t n;
    for (int i = 0; i < 200; i++) {
        err e = {{0}};
        if (!file_read_all(exitf, 1024, &t, &n, &e) && n > 0) break;
        free(t), t = NULL;
        usleep(50000);
    }
    if (!t) fail_msg("mixscope did not exit");
    int st = -1;
    assert_int_equal(sscanf(t, "EXIT=%d", &st), 1);
    assert_int_equal(st, want);
    free(t);
    free(exitf);
}

/* The value after "key" on the status line, e.g. "t=" -> "3/64". */
static void status_field(const char *screen, const char *key, char *out, size_t n) {
    const char *p = strstr(screen, key);
    assert_non_null(p);
    p += strlen(key);
    size_t i = 0;
    while (p[i] && p[i] != ' ' && p[i] != '\n' && i + 1 < n) out[i] = p[i], i++;
    out[i] = '\0';
}

#define SKIP_WITHOUT_TMUX()                                                                        \
    do {                                                                                           \
        if (!have_tmux()) {                                                                        \
            printf("skipped: tmux is not installed\n");                                            \
            skip();                                                                                \
        }                                                                                          \
    } while (0)

static void test_dashboard_keys(void **state) {
    (void)state;
    SKIP_WITHOUT_TMUX();
    start(110, 32, "",
          "-c 'mixer gdn kaczmarz heads=2 dk=8 dv=8; stream keys 64 norms=0.3..2 seed=1; tui'");
    char *s = wait_for("t=0/64");
    /* the status line and the key bar */
    assert_non_null(strstr(s, " mixscope | t=0/64 | "));
    assert_non_null(strstr(s, "| model: none | mixer: gdn,kaczmarz (raw) | device: cpu"));
    assert_non_null(strstr(s, "Space"));
    assert_non_null(strstr(s, "Step"));
    assert_non_null(strstr(s, "Quit"));
    free(s);
    tmux("send-keys -t T Space");
    s = wait_for("t=1/64");
    free(s);
    /* step's line on the message line: drawn after the status line, so wait for it as well (a
     * loaded machine showed the status line first) */
    s = wait_for("token 0 write key 0");
    assert_non_null(strstr(s, "layer 0/1 head 0/1 | probe rho"));
    assert_non_null(strstr(s, ">h0"));
    assert_non_null(strstr(s, "state layer 0 head 0 (8x8) after t=0"));
    free(s);
    tmux("send-keys -t T r");
    s = wait_for("t=64/64");
    free(s);
    s = wait_for("ran to token 63");
    free(s);
    tmux("send-keys -t T n");
    s = wait_for("head 1/1");
    assert_non_null(strstr(s, ">h1"));
    free(s);
    tmux("send-keys -t T l");
    s = wait_for("layer 1/1");
    assert_non_null(strstr(s, "(kaczmarz) layer 1"));
    char p1[64], p2[64];
    status_field(s, "probe ", p1, sizeof p1);
    free(s);
    tmux("send-keys -t T v");
    usleep(200000);
    s = capture(0);
    status_field(s, "probe ", p2, sizeof p2);
    assert_string_not_equal(p1, p2);
    free(s);
    tmux("send-keys -t T '?'");
    s = wait_for("mixscope dashboard");
    assert_non_null(strstr(s, "next / previous head"));
    free(s);
    tmux("send-keys -t T x");
    wait_gone("mixscope dashboard");
    /* resizing: laid out again, key bar on the last line */
    tmux("resize-window -t T -x 60 -y 16");
    s = wait_for("t=64/64");
    {
        char *last = s + strlen(s);
        while (last > s && (last[-1] == '\n' || last[-1] == ' ')) last--;
        while (last > s && last[-1] != '\n') last--;
        assert_non_null(strstr(last, "Step"));
    }
    free(s);
    tmux("resize-window -t T -x 30 -y 6");
    s = wait_for("terminal too small");
    free(s);
    tmux("resize-window -t T -x 100 -y 30");
    s = wait_for("| probe ");
    free(s);
    tmux("send-keys -t T 0");
    s = wait_for("t=0/64");
    free(s);
    tmux("send-keys -t T q");
    wait_exit(0);
}

/* Colour: the state cells are background colours. NO_COLOR: characters (+/- and a ramp). */
static int count_sign_cells(const char *screen) {
    int n = 0;
    for (const char *p = screen; p[0] && p[1]; p++)
        if ((p[0] == '+' || p[0] == '-') && strchr(".:+*#", p[1]) && p[1]) n++;
    return n;
}

static void test_dashboard_colour_and_monochrome(void **state) {
    (void)state;
    SKIP_WITHOUT_TMUX();
    const char *args = "-c 'mixer gdn dk=8 dv=8; stream keys 32 norms=0.5..2; tui'";
    start(100, 30, "NO_COLOR=1", args);
    free(wait_for("t=0/32"));
    tmux("send-keys -t T r");
    char *s = wait_for("t=32/32");
    free(s);
    usleep(200000);
    s = capture(0);
    int mono = count_sign_cells(s);
    free(s);
    assert_true(mono >= 20); /* an 8 x 8 state drawn as +# / -. cells */
    tmux("send-keys -t T q");
    wait_exit(0);

    start(100, 30, "TERM=xterm-256color", args);
    free(wait_for("t=0/32"));
    tmux("send-keys -t T r");
    free(wait_for("t=32/32"));
    usleep(200000);
    s = capture(1);
    assert_non_null(strstr(s, "\x1b[")); /* colour escapes in the pane */
    int bg = 0;
    for (const char *p = s; (p = strstr(p, "\x1b[")); p++)
        if (strstr(p, "48;5;") == p + 2 || (p[2] == '4' && p[3] >= '0' && p[3] <= '7')) bg++;
    free(s);
    assert_true(bg >= 10);
    s = capture(0);
    assert_true(count_sign_cells(s) < 5); /* colour blocks, not characters */
    free(s);
    tmux("send-keys -t T q");
    wait_exit(0);
}

static void test_tui_with_nothing_loaded(void **state) {
    (void)state;
    SKIP_WITHOUT_TMUX();
    start(100, 30, "", "--tui");
    char *s = wait_for("t=0/256");
    assert_non_null(strstr(s, "mixer: gdn,kaczmarz (raw)"));
    assert_non_null(strstr(s, "nothing loaded"));
    free(s);
    tmux("send-keys -t T Space Space Space");
    free(wait_for("t=3/256"));
    tmux("send-keys -t T q");
    wait_exit(0);
}

/* On a terminal a run longer than a second shows tokens/s; ^C stops it and the REPL stays. */
static void test_progress_and_interrupt_on_a_terminal(void **state) {
    (void)state;
    SKIP_WITHOUT_TMUX();
    start(120, 30, "", "--no-tour");
    free(wait_for("mixscope>")); /* capture drops the trailing space */
    tmux("send-keys -t T 'mixer gdn heads=4 dk=128 dv=128' Enter"); /* a few seconds a run */
    tmux("send-keys -t T 'stream keys 20000' Enter");
    free(wait_for("stream keys: 20000"));
    tmux("send-keys -t T 'run' Enter");
    char *s = wait_for("tokens/s (^C stops, the session stays)");
    free(s);
    tmux("send-keys -t T C-c");
    s = wait_for("the session is kept");
    assert_non_null(strstr(s, "interrupted at token"));
    free(s);
    tmux("send-keys -t T 'info' Enter");
    s = wait_for("position ");
    int at = 0, total = 0;
    assert_int_equal(sscanf(strstr(s, "position "), "position %d of %d", &at, &total), 2);
    assert_true(at > 0 && at < total && total == 20000);
    free(s);
    tmux("send-keys -t T 'quit' Enter");
    wait_exit(0);
}

/* ^C at the prompt discards the typed line (as bash does) and does not cancel the next command. */
static void test_ctrl_c_at_the_prompt(void **state) {
    (void)state;
    SKIP_WITHOUT_TMUX();
    start(120, 30, "", "--no-tour");
    free(wait_for("mixscope>"));
    tmux("send-keys -t T 'show rh'");
    free(wait_for("mixscope> show rh"));
    tmux("send-keys -t T C-c");
    usleep(200000);
    tmux("send-keys -t T 'echo after-the-interrupt' Enter");
    char *s = wait_for("\nafter-the-interrupt");
    assert_null(strstr(s, "rhecho")); /* the typed words were dropped */
    assert_null(strstr(s, "interrupted"));
    free(s);
    /* ^C at an empty prompt, then a command: it runs */
    tmux("send-keys -t T C-c");
    usleep(200000);
    tmux("send-keys -t T 'echo second' Enter");
    free(wait_for("\nsecond"));
    tmux("send-keys -t T 'quit' Enter");
    wait_exit(0);
}

/* pause in a script at a terminal: Enter goes on, q leaves the script, the session stays */
static void test_pause_at_a_terminal(void **state) {
    (void)state;
    SKIP_WITHOUT_TMUX();
    char *scene = path_join(g_dir, "paced.scene");
    FILE *f = fopen(scene, "w");
    assert_non_null(f);
    fputs("echo stop-one\npause\necho stop-two\npause\necho stop-three\n", f);
    fclose(f);
    start(120, 30, "", "--no-tour");
    free(wait_for("mixscope>"));
    tmux("send-keys -t T 'source %s' Enter", scene);
    char *c = wait_for("-- Enter: go on, q: leave --");
    assert_null(strstr(c, "stop-two")); /* it waits */
    free(c);
    tmux("send-keys -t T Enter");
    free(wait_for("stop-two"));
    tmux("send-keys -t T q Enter");
    c = wait_for("(left the script; the session is kept)");
    assert_null(strstr(c, "stop-three"));
    free(c);
    tmux("send-keys -t T 'echo still-here' Enter");
    free(wait_for("\nstill-here"));
    tmux("send-keys -t T 'quit' Enter");
    wait_exit(0);
    free(scene);
}

/* tui started from the REPL (readline's SIGWINCH handler in place) follows resizes as --tui does */
static void test_tui_from_the_repl_resizes(void **state) {
    (void)state;
    SKIP_WITHOUT_TMUX();
    start(110, 32, "", "--no-tour");
    free(wait_for("mixscope>"));
    tmux("send-keys -t T 'mixer gdn heads=2 dk=8 dv=8; stream keys 16 seed=1; tui' Enter");
    free(wait_for("t=0/16"));
    tmux("resize-window -t T -x 60 -y 16");
    for (int i = 0;; i++) { /* laid out again: the key bar on the new last line */
        char *s = capture(0), *last = s + strlen(s);
        while (last > s && (last[-1] == '\n' || last[-1] == ' ')) last--;
        while (last > s && last[-1] != '\n') last--;
        int ok = strstr(last, "Step") != NULL;
        free(s);
        if (ok) break;
        if (i == 100) fail_msg("the dashboard did not follow the resize");
        usleep(50000);
    }
    tmux("send-keys -t T q");
    free(wait_for("mixscope>"));
    tmux("send-keys -t T 'quit' Enter");
    wait_exit(0);
}

/* < scrolls the sparklines back in tokens, > forward again */
static void test_dashboard_scrolls_back(void **state) {
    (void)state;
    SKIP_WITHOUT_TMUX();
    start(100, 30, "",
          "-c 'mixer gdn heads=2 dk=8 dv=8; stream keys 400 norms=0.3..2 seed=1; run; tui'");
    free(wait_for("t=400/400"));
    free(wait_for("..399, "));
    tmux("send-keys -t T '<'");
    char *s = wait_for("..374, "); /* a quarter of the 100 columns back */
    free(s);
    tmux("send-keys -t T '>'");
    free(wait_for("..399, "));
    tmux("send-keys -t T q");
    wait_exit(0);
}

/* Tab completes set's keys and then their values */
static void test_set_completion(void **state) {
    (void)state;
    SKIP_WITHOUT_TMUX();
    start(100, 20, "", "--no-tour");
    free(wait_for("mixscope>"));
    tmux("send-keys -t T 'set prob' Tab");
    free(wait_for("mixscope> set probes"));
    tmux("send-keys -t T 'al' Tab"); /* the key's completion added the space */
    free(wait_for("mixscope> set probes all"));
    tmux("send-keys -t T Enter");
    free(wait_for("\nprobes all"));
    tmux("send-keys -t T 'quit' Enter");
    wait_exit(0);
}

/* Two REPLs sharing the history file keep each other's lines, and a hangup loses none. */
static void test_history_shared_and_kept(void **state) {
    (void)state;
    SKIP_WITHOUT_TMUX();
    char *hist = path_join(g_dir, "mixscope/history");
    unlink(hist);
    start(120, 30, "", "--no-tour");
    free(wait_for("mixscope>"));
    /* a second REPL beside it, same history file */
    assert_int_equal(tmux("new-session -d -s U -x 120 -y 30 -c '%s' \"env XDG_STATE_HOME='%s' "
                          "'%s' --no-tour\"",
                          g_root, g_dir, g_bin),
                     0);
    usleep(500000);
    tmux("send-keys -t T 'echo from-the-first' Enter");
    free(wait_for("\nfrom-the-first"));
    tmux("send-keys -t U 'echo from-the-second' Enter");
    usleep(500000);
    tmux("send-keys -t T 'quit' Enter");
    wait_exit(0);
    tmux("kill-session -t U"); /* a hangup: the second REPL never quits */
    usleep(300000);
    char *t = NULL;
    size_t n;
    err e = {{0}};
    if (file_read_all(hist, 1 << 20, &t, &n, &e)) fail_msg("%s", e.msg);
    expect_has(t, "echo from-the-first");
    expect_has(t, "echo from-the-second");
    free(t), free(hist);
}

/* tui on a terminal ncurses does not know, or a dumb one, is refused in words; the REPL goes on. */
static void test_tui_unknown_terminal(void **state) {
    (void)state;
    SKIP_WITHOUT_TMUX();
    const char *terms[][2] = {{"TERM=nosuch-terminal", "unknown terminal type 'nosuch-terminal'"},
                              {"TERM=dumb", "TERM=dumb cannot draw the dashboard"}};
    for (int i = 0; i < 2; i++) {
        start(120, 30, terms[i][0], "--no-tour");
        free(wait_for("mixscope>"));
        tmux("send-keys -t T 'tui' Enter");
        free(wait_for(terms[i][1]));
        tmux("send-keys -t T 'echo still-here' Enter");
        free(wait_for("\nstill-here"));
        tmux("send-keys -t T 'quit' Enter");
        wait_exit(0);
    }
}

static void test_tui_needs_a_terminal(void **state) {
    (void)state;
    char *out;
    assert_int_equal(run_mixscope(&out, "-c tui"), 1);
    assert_non_null(strstr(out, "tui: needs a terminal"));
    free(out);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_dashboard_keys),
        cmocka_unit_test(test_dashboard_colour_and_monochrome),
        cmocka_unit_test(test_tui_with_nothing_loaded),
        cmocka_unit_test(test_progress_and_interrupt_on_a_terminal),
        cmocka_unit_test(test_ctrl_c_at_the_prompt),
        cmocka_unit_test(test_pause_at_a_terminal),
        cmocka_unit_test(test_tui_from_the_repl_resizes),
        cmocka_unit_test(test_set_completion),
        cmocka_unit_test(test_dashboard_scrolls_back),
        cmocka_unit_test(test_history_shared_and_kept),
        cmocka_unit_test(test_tui_unknown_terminal),
        cmocka_unit_test(test_tui_needs_a_terminal),
    };
    return cmocka_run_group_tests(tests, group_setup, group_teardown);
}
