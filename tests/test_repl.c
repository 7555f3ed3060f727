/* test_repl.c: the commands of raw-mixer mode and the REPL around them, driven through the binary
 * as a user drives it (mixer, stream, step/run/reset, show, set, echo and $NAME, compare, prompt
 * generators, info, figure, help and suggestions, ^C), plus the completion hooks. */
#include "testutil.h"

#include <signal.h>
#include <sys/stat.h>

#include "cli/command.h"
#include "cli/session.h"
#include "core/fileio.h"
#include "tests/tgroupdir.h"

/* Runs `mixscope -c 'CMDS'` (2>&1); returns the exit status. */
static int mx(char **out, const char *cmds) {
    return run_mixscope(out, "-c '%s'", cmds);
}

/* The line of text that starts with prefix (after spaces), or NULL. */
static const char *line_of(const char *text, const char *prefix) {
    size_t pl = strlen(prefix);
    for (const char *p = text; p && *p;) {
        const char *q = p;
        while (*q == ' ') q++;
        if (!strncmp(q, prefix, pl)) return q;
        p = strchr(p, '\n');
        if (p) p++;
    }
    return NULL;
}

/* ---- help, suggestions, usage ---- */

static void test_help_for_every_command(void **state) {
    (void)state;
    const char *mine[] = {"mixer", "stream", "show", "set", "compare", "tui", "echo", "figure"};
    for (size_t i = 0; i < sizeof mine / sizeof mine[0]; i++) {
        const command *c = command_find(mine[i]);
        assert_non_null(c);
        assert_non_null(c->help);
        assert_true(strlen(c->help) > 100);
    }
    char *out;
    for (int i = 0; i < command_table_size; i++) {
        const command *c = command_table[i];
        if (!c) continue;
        assert_true(c->summary && strlen(c->summary) > 10);
        char cmd[64];
        snprintf(cmd, sizeof cmd, "help %s", c->name);
        assert_int_equal(mx(&out, cmd), 0);
        expect_has(out, c->summary);
        free(out);
    }
    assert_int_equal(mx(&out, "help"), 0);
    for (size_t i = 0; i < sizeof mine / sizeof mine[0]; i++) expect_has(out, mine[i]);
    free(out);
}

static void test_suggestions_and_usage(void **state) {
    (void)state;
    char *out;
    assert_int_equal(mx(&out, "shwo rho"), 1);
    expect_has(out, "did you mean 'show'");
    free(out);
    assert_int_equal(mx(&out, "strem keys 4"), 1);
    expect_has(out, "did you mean 'stream'");
    free(out);
    assert_int_equal(mx(&out, "comapre gdn"), 1);
    expect_has(out, "did you mean 'compare'");
    free(out);
    assert_int_equal(mx(&out, "figure kaczmarz"), 1);
    expect_has(out, "usage: figure VIEW FILE.png");
    free(out);
    assert_int_equal(mx(&out, "stream"), 1);
    expect_has(out, "usage: stream keys N");
    free(out);
    assert_int_equal(mx(&out, "tui extra"), 1);
    expect_has(out, "usage: tui");
    free(out);
}

/* ---- set, echo, $NAME ---- */

static void test_set_and_expansion(void **state) {
    (void)state;
    char *out, cmd[1024];
    assert_int_equal(mx(&out, "set"), 0);
    const char *keys[] = {"outdir", "seed", "rows", "chunk", "blowup", "progress", "device"};
    for (int i = 0; i < 7; i++) expect_has(out, keys[i]);
    free(out);
    snprintf(cmd, sizeof cmd,
             "set outdir %s/a/b; set seed 42; set rows all; set blowup 50; set progress off; set "
             "chunk 32; echo [$outdir] [$seed] [${rows}] [$blowup] [$nope] [$progress$chunk]; set "
             "rows",
             g_dir);
    assert_int_equal(mx(&out, cmd), 0);
    char want[600];
    snprintf(want, sizeof want, "[%s/a/b] [42] [all] [50] [$nope] [off32]", g_dir);
    expect_has(out, want);
    expect_has(out, "rows all");
    free(out);
    snprintf(want, sizeof want, "%s/a/b", g_dir);
    struct stat st;
    assert_int_equal(stat(want, &st), 0);
    assert_true(S_ISDIR(st.st_mode));
    /* the seed setting feeds the generators */
    assert_int_equal(mx(&out, "set seed 9; mixer gdn dk=4 dv=4; stream keys 3"), 0);
    expect_has(out, "seed 9");
    free(out);
    assert_int_equal(mx(&out, "set bogus 1"), 1);
    expect_has(out, "unknown key 'bogus' (outdir models seed rows chunk blowup progress device");
    free(out);
    assert_int_equal(mx(&out, "set rows -3"), 1);
    expect_has(out, "set rows: expected an integer");
    free(out);
    assert_int_equal(mx(&out, "set chunk 48"), 1);
    expect_has(out, "expected 16, 32, 64 or default");
    free(out);
    assert_int_equal(mx(&out, "set progress maybe"), 1);
    free(out);
    /* set chunk reaches the raw lanes */
    assert_int_equal(mx(&out, "set chunk 16; mixer gdn dk=4 dv=4; info"), 0);
    expect_has(out, "layer 0 gdn: scale=1 chunk=16");
    free(out);
    /* echo prints the rest of the line as typed; an apostrophe needs double quotes around it */
    char *sc = path_join(g_dir, "echo.scene");
    err e = {{0}};
    const char *text = "echo \"it's quoted\"; echo two words\n";
    if (file_write_atomic(sc, text, strlen(text), &e)) fail_msg("%s", e.msg);
    assert_int_equal(run_mixscope(&out, "%s", sc), 0);
    expect_has(out, "\"it's quoted\"\ntwo words\n");
    free(out);
    free(sc);
}

/* ---- mixer and stream ---- */

static void test_mixer_selection(void **state) {
    (void)state;
    char *out;
    assert_int_equal(mx(&out, "mixer"), 0);
    expect_has(out, "none selected");
    free(out);
    assert_int_equal(mx(&out, "mixer list"), 0);
    const char *names[] = {"gdn",     "deltanet", "kaczmarz", "gla",     "mamba2",
                           "softmax", "kalman",   "kata",     "parallax"};
    for (int i = 0; i < 9; i++) expect_has(out, names[i]);
    expect_has(out, "decay beta eta lambda_v a p rscale");
    free(out);
    assert_int_equal(mx(&out, "mixer gdn kaczmarz:eta=0.5,eps=1e-3 softmax heads=2 dk=8 dv=4 "
                              "decay=0.9; mixer"),
                     0);
    expect_has(out,
               "mixer gdn, kaczmarz:eta=0.5,eps=1e-3, softmax: heads 2, dk 8, dv 4 (lanes = layers "
               "0..2 of the trace)");
    expect_has(out, "layer 1 kaczmarz:eta=0.5,eps=1e-3: eta=0.5 eps=1e-3 decay=0.9 scale=1");
    expect_has(out, "layer 2 softmax: decay=0.9 scale=8 max_t=4096");
    free(out);
    assert_int_equal(mx(&out, "mixer gnd"), 1);
    expect_has(out, "unknown mixer 'gnd' (gdn deltanet kaczmarz");
    free(out);
    assert_int_equal(mx(&out, "mixer gdn chnk=16"), 1);
    expect_has(out, "chnk");
    free(out);
    assert_int_equal(mx(&out, "mixer gdn decay=1.5"), 1);
    expect_has(out, "decay=1.5 must lie in (0, 1]");
    free(out);
    assert_int_equal(mx(&out, "mixer kata:variant=m9"), 1);
    expect_has(out, "variant");
    free(out);
    assert_int_equal(mx(&out, "stream keys 4"), 1);
    expect_has(out, "no mixer (mixer NAME dk= dv= first)");
    free(out);
    assert_int_equal(mx(&out, "mixer gdn; stream bogus"), 1);
    expect_has(out, "expected keys, recall or overwrite");
    free(out);
    assert_int_equal(mx(&out, "mixer gdn; stream keys 4 norms=2..1"), 1);
    expect_has(out, "'norms': expected LO..HI with LO <= HI, got '2..1'");
    free(out);
    assert_int_equal(mx(&out, "mixer gdn; stream keys 4 nrms=1..2"), 1);
    expect_has(out, "nrms");
    free(out);
    /* dimensions on the stream rebuild the lanes */
    assert_int_equal(mx(&out, "mixer gdn dk=4 dv=4; stream recall pairs=3 dk=8; info"), 0);
    expect_has(out, "lanes rebuilt for heads 1, dk 8, dv 4");
    expect_has(out, "raw-mixer mode: 1 lane, heads 1, dk 8, dv 4");
    free(out);
}

static void test_raw_step_run_reset(void **state) {
    (void)state;
    char *out;
    assert_int_equal(mx(&out, "mixer gdn kaczmarz dk=4 dv=4; stream keys 5 norms=0.5..2 seed=1; "
                              "step 2; step; run; reset; step"),
                     0);
    expect_has(out, "token 0 write key 0 |k| ");
    expect_has(out, "token 2 write key 2");
    expect_has(out, "ran tokens 3..4 of 5 (2 writes, 0 queries)");
    expect_has(out, "layer 1 kaczmarz: state_norm final");
    expect_has(out, "position 0");
    /* kaczmarz's rho is eta = 1 on every token */
    const char *l = strstr(out, "| kaczmarz rho ");
    assert_non_null(l);
    double rho;
    assert_int_equal(sscanf(l, "| kaczmarz rho %lf", &rho), 1);
    assert_true(fabs(rho - 1) < 1e-3);
    free(out);
    assert_int_equal(mx(&out, "mixer gdn dk=4 dv=4; stream keys 3; run; run"), 1);
    expect_has(out, "all 3 tokens have run (reset to start again)");
    free(out);
    assert_int_equal(mx(&out, "mixer gdn dk=4 dv=4; step"), 1);
    expect_has(out, "no stream");
    free(out);
    assert_int_equal(mx(&out, "mixer gdn dk=4 dv=4; stream keys 3; run prefill"), 1);
    expect_has(out, "raw-mixer mode steps every token");
    free(out);
    /* recall: per-query table and summary; queries read the right value back */
    assert_int_equal(mx(&out, "mixer kaczmarz softmax dk=16 dv=8; stream recall pairs=1 queries=2; "
                              "run"),
                     0);
    expect_has(out, "ran tokens 0..2 of 3 (1 writes, 2 queries)");
    expect_has(out, "recall over 2 queries");
    expect_has(out, "recalled 2/2");
    free(out);
    /* leaving raw mode */
    assert_int_equal(mx(&out, "mixer gdn dk=4 dv=4; stream keys 3; mixer off; step"), 1);
    expect_has(out, "raw-mixer mode off");
    expect_has(out, "no model");
    free(out);
    assert_int_equal(mx(&out, "mixer gdn dk=4 dv=4; stream keys 3; model random gdn layers=1 "
                              "hidden=16 vocab=32; info"),
                     0);
    expect_lacks(out, "raw-mixer mode:");
    free(out);
}

/* ---- show ---- */

static void test_show(void **state) {
    (void)state;
    char *out, cmd[1024];
    char *csv = path_join(g_dir, "rho.csv");
    snprintf(cmd, sizeof cmd,
             "mixer gdn kaczmarz heads=2 dk=4 dv=4; stream keys 6 norms=0.5..2 seed=3; run; show; "
             "show rho; show rho head=1; show rho layer=1; show state layer=1 "
             "head=1; export csv rho %s layer=0 head=1",
             csv);
    assert_int_equal(mx(&out, cmd), 0);
    expect_has(out, "probe series over 6 tokens");
    expect_has(out, "rho                gdn       [2][2][1]");
    expect_has(out, "recall_err         stream");
    expect_has(out, "state              snapshot  [2][2][4 x 4]");
    /* show rho: both heads of layer 0 */
    expect_has(out, "rho (gdn, layer 0 gdn): beta_t |k_t|^2");
    expect_has(out, "  token          h0          h1");
    /* head=1: the layers side by side, which export csv agrees with */
    expect_has(out, "rho (layers side by side, head 1): beta_t");
    expect_has(out, "  token         gdn    kaczmarz");
    char *text;
    size_t n;
    err e = {{0}};
    if (file_read_all(csv, 1 << 20, &text, &n, &e)) fail_msg("%s", e.msg);
    /* long format: token, layer, head, lane, probe, value */
    assert_true(!strncmp(text, "token,layer,head,lane,probe,value\n", 34));
    const char *c = strstr(text, "\n0,0,1,gdn,rho,");
    assert_non_null(c);
    double from_csv = strtod(c + strlen("\n0,0,1,gdn,rho,"), NULL);
    const char *hdr = strstr(out, "  token         gdn    kaczmarz\n");
    assert_non_null(hdr);
    int tok;
    double g, k;
    assert_int_equal(
        sscanf(hdr + strlen("  token         gdn    kaczmarz\n"), "%d %lf %lf", &tok, &g, &k), 3);
    assert_int_equal(tok, 0);
    assert_true(fabs(g - from_csv) < 1e-4 * fabs(from_csv));
    assert_true(fabs(k - 1) < 1e-3);
    free(text);
    expect_has(out, "rho (gdn, layer 1 kaczmarz)");
    expect_has(out, "state of layer 1 (kaczmarz) head 1 after token 5: 4 x 4");
    free(out);
    assert_int_equal(mx(&out, "mixer gdn dk=4 dv=4; stream keys 6; run; show nope"), 1);
    expect_has(out, "no probe 'nope' (have: beta");
    free(out);
    assert_int_equal(mx(&out, "mixer gdn dk=4 dv=4; stream keys 6; run; show rho head=3"), 1);
    expect_has(out, "has 1 layers and 1 heads");
    free(out);
    assert_int_equal(mx(&out, "show rho"), 1);
    expect_has(out, "nothing recorded yet");
    free(out);
    /* long series: head and tail, or all */
    assert_int_equal(mx(&out, "set rows 4; mixer gdn dk=4 dv=4; stream keys 100; run; show rho"),
                     0);
    expect_has(out, "... (96 rows; set rows all, or from= to=)");
    expect_has(out, "     99 ");
    free(out);
    assert_int_equal(mx(&out, "mixer gdn dk=4 dv=4; stream keys 100; run; show rho from=10 to=13"),
                     0);
    expect_has(out, "     12 ");
    expect_lacks(out, "     13 ");
    free(out);
    /* the Kalman lanes: elements of one head */
    assert_int_equal(mx(&out, "mixer kalman dk=2 dv=2; stream keys 3; run; show lambda index=1"),
                     0);
    expect_has(out, "elements 1..3 of 4");
    expect_has(out, "[1]         [2]         [3]");
    free(out);
    free(csv);
}

/* ---- compare ---- */

static void test_compare_raw(void **state) {
    (void)state;
    char *out;
    assert_int_equal(mx(&out,
                        "mixer gdn dk=16 dv=16; stream recall pairs=8 seed=2; compare softmax "
                        "gdn kaczmarz:eta=0.5 nope; compare gdn kaczmarz probe=rho by=key_norm "
                        "bins=2 tokens=0..3"),
                     0);
    expect_has(out, "compare on stream recall: 8 writes then 8 queries");
    expect_has(out, "nope: unknown mixer 'nope'");
    const char *l = line_of(out, "recalled (< 0.1)");
    assert_non_null(l);
    expect_has(l, "8/8"); /* softmax, sharp scale = dk */
    expect_has(out, "rho mean over writes, by key_norm (quantile bins):");
    expect_has(out, "rho at head 0 per token:");
    expect_has(out, "0 write");
    expect_has(out, "2 write");
    expect_lacks(out, "3 write"); /* A..B is [A, B) */
    free(out);
    /* compare leaves the session's own trace and position alone */
    assert_int_equal(mx(&out, "mixer gdn dk=4 dv=4; stream keys 5; step 2; compare kaczmarz; info"),
                     0);
    expect_has(out, "position 2 of 5");
    free(out);
    assert_int_equal(mx(&out, "compare gdn"), 1);
    expect_has(out, "nothing to compare on");
    free(out);
    assert_int_equal(mx(&out, "mixer gdn dk=4 dv=4; compare gdn"), 1);
    expect_has(out, "no stream");
    free(out);
    assert_int_equal(mx(&out, "mixer gdn dk=4 dv=4; stream keys 3; compare gdn bins=0"), 1);
    expect_has(out, "bins=0");
    free(out);
}

/* compare's summary is the same number as show's over the same lane */
static void test_compare_matches_show(void **state) {
    (void)state;
    char *out;
    assert_int_equal(mx(&out, "mixer gdn dk=8 dv=8; stream keys 40 norms=0.3..2 seed=4; run; set "
                              "rows all; show rho; compare gdn probe=rho"),
                     0);
    double a, b;
    const char *m = line_of(out, "mean ");
    assert_non_null(m);
    assert_int_equal(sscanf(m, "mean %lf", &a), 1);
    const char *c = line_of(out, "rho mean (writes)");
    assert_non_null(c);
    assert_int_equal(sscanf(c, "rho mean (writes) %lf", &b), 1);
    assert_true(fabs(a - b) < 1e-4 * fabs(b));
    free(out);
}

static void test_compare_model(void **state) {
    (void)state;
    char *out;
    assert_int_equal(mx(&out, "model random gdn layers=2 hidden=32 vocab=64 seed=3; prompt mqar "
                              "pairs=4 queries=4 vocab=64 seed=1; compare gdn kaczmarz:eps=1e-3 "
                              "softmax; model"),
                     0);
    expect_has(out, "compare on 16 tokens through gated_deltanet (2 layers)");
    expect_has(out, "task: mqar: 4 key-value pairs then 4 queries");
    expect_has(out, "softmax: layer 0: ");
    const char *l = line_of(out, "loss (nats/token)");
    assert_non_null(l);
    double g, k;
    assert_int_equal(sscanf(l, "loss (nats/token) %lf %lf", &g, &k), 2);
    assert_true(g > 2 && g < 7 && k > 2 && k < 7);
    expect_has(out, "cores restored; position back to 0");
    expect_has(out, "layer 1: gdn core");
    free(out);
}

/* ---- prompt generators ---- */

static void test_prompt_generators(void **state) {
    (void)state;
    char *out;
    assert_int_equal(mx(&out, "prompt mqar pairs=4 queries=6 vocab=32 seed=1; prompt niah len=40; "
                              "prompt overwrite keys=3 repeats=2; prompt a5 len=10; prompt a5 is a "
                              "group; info"),
                     0);
    expect_has(out, "mqar: 4 key-value pairs then 6 queries, 20 tokens, vocab 32");
    expect_has(out, "20 tokens, 6 scored positions");
    expect_has(out, "40 tokens, 1 scored position ");
    expect_has(out, "overwrite: 3 keys written 2 times");
    expect_has(out, "10 tokens, 10 scored positions");
    expect_has(out, "13 byte tokens"); /* "a5 is a group" is text */
    expect_has(out, "(not the current tokens)");
    free(out);
    assert_int_equal(mx(&out, "prompt mqar pairs=4 bogus=1"), 1);
    expect_has(out, "bogus");
    free(out);
    assert_int_equal(mx(&out, "prompt a5 vocab=100"), 1);
    expect_has(out, "a5 has its own vocabulary of 60");
    free(out);
    /* against a model: the vocabulary follows the model's, and the accuracy is reported */
    assert_int_equal(mx(&out, "model random gdn layers=1 hidden=16 vocab=40; prompt mqar pairs=3; "
                              "run; info"),
                     0);
    expect_has(out, "vocab 40 (keys 1..19, values 20..39)");
    expect_has(out, "accuracy so far: ");
    expect_has(out, "at the scored positions run");
    free(out);
    assert_int_equal(mx(&out, "model random gdn layers=1 hidden=16 vocab=40; prompt a5 len=5"), 1);
    expect_has(out, "vocabulary 60 is larger than the model's 40");
    free(out);
}

/* ---- info, figure, views on streams ---- */

static void test_info_and_figures(void **state) {
    (void)state;
    char *out, cmd[1024];
    snprintf(cmd, sizeof cmd,
             "set outdir %s; mixer gdn kaczmarz dk=8 dv=8; stream keys 30 norms=0.3..2; run; info; "
             "figure kaczmarz $outdir/sub/k.png; figure state $outdir/s.png layer=1; export png "
             "recall $outdir/r.png",
             g_dir);
    assert_int_equal(mx(&out, cmd), 0);
    expect_has(out, "raw-mixer mode: 2 lanes, heads 1, dk 8, dv 8 (lane l = layer l)");
    expect_has(out, "stream keys: 30 writes");
    expect_has(out, "position 30 of 30");
    expect_has(out, "memory: model 0.00 MiB");
    char want[512];
    snprintf(want, sizeof want, "wrote %s/sub/k.png (view kaczmarz", g_dir);
    expect_has(out, want);
    snprintf(want, sizeof want, "wrote %s/s.png (view state, 1280x800, layer 1", g_dir);
    expect_has(out, want);
    free(out);
    /* a figure before anything ran says what to do */
    assert_int_equal(mx(&out, "figure kaczmarz /tmp/never.png"), 1);
    expect_has(out, "no probes recorded yet");
    free(out);
}

/* ---- completion hooks ---- */

const char *const *generator_names(const char *command);
const char *const *session_probe_names(session *s);

static void test_completion_names(void **state) {
    (void)state;
    const char *const *g = generator_names("prompt");
    int mq = 0, a5 = 0, keys = 0;
    for (int i = 0; g[i]; i++) {
        mq |= !strcmp(g[i], "mqar"), a5 |= !strcmp(g[i], "a5"), keys |= !strcmp(g[i], "keys");
    }
    assert_true(mq && a5 && !keys); /* keys is a stream, not a prompt */
    g = generator_names("stream");
    keys = 0;
    for (int i = 0; g[i]; i++) keys |= !strcmp(g[i], "keys");
    assert_true(keys);
    session s;
    err e = {{0}};
    assert_int_equal(session_init(&s, &e), 0);
    FILE *devnull = fopen("/dev/null", "w");
    s.out = devnull;
    assert_int_equal(command_exec(&s, "mixer gdn dk=4 dv=4", &e), 0);
    assert_int_equal(command_exec(&s, "stream keys 3", &e), 0);
    assert_int_equal(command_exec(&s, "step", &e), 0);
    const char *const *p = session_probe_names(&s);
    int rho = 0, state_ = 0, rec = 0;
    for (int i = 0; p[i]; i++)
        rho |= !strcmp(p[i], "rho"), state_ |= !strcmp(p[i], "state"),
            rec |= !strcmp(p[i], "recall_err");
    assert_true(rho && state_ && rec);
    session_free(&s);
    fclose(devnull);
}

/* ---- ^C stops a long run and keeps the session ---- */

static void test_interrupt_keeps_session(void **state) {
    (void)state;
    char *outp = path_join(g_dir, "int.txt");
    int in[2];
    assert_int_equal(pipe(in), 0);
    pid_t pid = fork();
    assert_true(pid >= 0);
    if (pid == 0) {
        dup2(in[0], 0);
        close(in[1]);
        FILE *f = freopen(outp, "w", stdout);
        (void)f;
        dup2(1, 2);
        execl(mixscope_bin(), mixscope_bin(), "--no-tour", (char *)NULL);
        _exit(127);
    }
    close(in[0]);
    const char *cmds = "mixer gdn dk=128 dv=128\nstream keys 20000\nrun\n";
    assert_int_equal(write(in[1], cmds, strlen(cmds)), (ssize_t)strlen(cmds));
    /* wait until the run is under way, then ^C */
    for (int i = 0; i < 100; i++) {
        usleep(20000);
        char *t;
        size_t n;
        err e = {{0}};
        if (!file_read_all(outp, 1 << 20, &t, &n, &e)) {
            int started = strstr(t, "stream keys: 20000") != NULL;
            free(t);
            if (started) break;
        }
    }
    usleep(200000);
    kill(pid, SIGINT);
    const char *more = "info\n";
    assert_int_equal(write(in[1], more, strlen(more)), (ssize_t)strlen(more));
    close(in[1]);
    int st;
    waitpid(pid, &st, 0);
    assert_true(WIFEXITED(st) && WEXITSTATUS(st) == 0);
    char *t;
    size_t n;
    err e = {{0}};
    if (file_read_all(outp, 1 << 20, &t, &n, &e)) fail_msg("%s", e.msg);
    expect_has(t, "mixscope: interrupted at token ");
    expect_has(t, "the session is kept");
    const char *pos = strstr(t, "position ");
    assert_non_null(pos);
    int at, total;
    assert_int_equal(sscanf(pos, "position %d of %d", &at, &total), 2);
    assert_int_equal(total, 20000);
    assert_true(at > 0 && at < 20000);
    free(t);
    free(outp);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_help_for_every_command),
        cmocka_unit_test(test_suggestions_and_usage),
        cmocka_unit_test(test_set_and_expansion),
        cmocka_unit_test(test_mixer_selection),
        cmocka_unit_test(test_raw_step_run_reset),
        cmocka_unit_test(test_show),
        cmocka_unit_test(test_compare_raw),
        cmocka_unit_test(test_compare_matches_show),
        cmocka_unit_test(test_compare_model),
        cmocka_unit_test(test_prompt_generators),
        cmocka_unit_test(test_info_and_figures),
        cmocka_unit_test(test_completion_names),
        cmocka_unit_test(test_interrupt_keeps_session),
    };
    return cmocka_run_group_tests(tests, group_setup, group_teardown);
}
