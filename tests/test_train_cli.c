/* test_train_cli.c: the train command through the binary.
 *   - a short run: progress lines, the run folder (log.csv with its header and one row per report,
 *     step-000000 and the last checkpoint with the command in config.json), the trained model
 *     loads and is the session's model; the same command again gives the same weights (bytes);
 *   - ^C during a run stops it after the step with a checkpoint, and the session goes on;
 *   - a diverging run (DeltaNet with sum-normalised keys) fails with its step named, or reports
 *     it with diverge=ok; target= stops early;
 *   - bad options: a near miss of an option, an unknown task, every= without out=, a model type
 *     without a backward pass, precision=bf16 (not implemented) are refused in words. */
#include "tests/testutil.h"

#include <signal.h>
#include <sys/stat.h>

static char *g_dir;

static long fsize(const char *path) {
    struct stat sb;
    return stat(path, &sb) == 0 ? (long)sb.st_size : -1;
}

static char *slurp(const char *path) {
    FILE *f = fopen(path, "rb");
    if (!f) return NULL;
    fseek(f, 0, SEEK_END);
    long n = ftell(f);
    fseek(f, 0, SEEK_SET);
    char *b = malloc((size_t)n + 1);
    size_t r = fread(b, 1, (size_t)n, f);
    b[r] = '\0';
    fclose(f);
    return b;
}

#define SMALL "layers=1 hidden=32 heads=1 head_dim=32 pairs=8 seq=64 batch=8 eval=16"

static void test_short_run(void **st) {
    (void)st;
    char *out = NULL;
    int rc = run_mixscope(&out,
                          "-c 'train gdn " SMALL " steps=6 log=3 every=4 out=%s/run; "
                          "prompt mqar pairs=8 queries=24 seed=3; run'",
                          g_dir);
    if (rc) fail_msg("exit %d: %s", rc, out);
    expect_has(out, "training gdn on mqar (cpu)");
    expect_has(out, "step    3/6  loss ");
    expect_has(out, "step    6/6  loss ");
    expect_has(out, "held-out ");
    expect_has(out, "checkpoint ");
    expect_has(out, "done: the trained model is the session's model");
    expect_has(out, "mqar accuracy: ");
    free(out);
    /* precision=bf16 on the same run: another loss at step 3 (the products round), same shape */
    rc = run_mixscope(&out, "-c 'train gdn " SMALL " steps=6 log=3 precision=bf16'");
    if (rc) fail_msg("exit %d: %s", rc, out);
    expect_has(out, "step    3/6  loss ");
    char p[1024];
    snprintf(p, sizeof p, "%s/run/log.csv", g_dir);
    char *log = slurp(p);
    assert_non_null(log);
    expect_has(log, "step,loss,eval_loss,accuracy,grad_norm,lr,tokens_per_s,elapsed_s\n3,");
    expect_has(log, "\n6,");
    free(log);
    const char *ck[] = {"step-000000", "step-000004", "step-000006"};
    for (int i = 0; i < 3; i++) {
        snprintf(p, sizeof p, "%s/run/%s/model.safetensors", g_dir, ck[i]);
        assert_true(fsize(p) > 10000);
    }
    snprintf(p, sizeof p, "%s/run/step-000006/config.json", g_dir);
    char *cfg = slurp(p);
    assert_non_null(cfg);
    expect_has(cfg, "\"mixscope_train\"");
    expect_has(cfg, "train gdn " SMALL " steps=6");
    free(cfg);
    free(out);
    /* the checkpoint loads, and the same command gives the same bytes */
    rc = run_mixscope(&out,
                      "-c 'load %s/run/step-000006; train gdn " SMALL " steps=6 log=3 every=4 "
                      "out=%s/again'",
                      g_dir, g_dir);
    if (rc) fail_msg("exit %d: %s", rc, out);
    expect_has(out, "loaded gated_deltanet: 1 layers, hidden 32");
    free(out);
    char a[1024], b[1024];
    snprintf(a, sizeof a, "%s/run/step-000006/model.safetensors", g_dir);
    snprintf(b, sizeof b, "%s/again/step-000006/model.safetensors", g_dir);
    char *wa = slurp(a), *wb = slurp(b);
    assert_non_null(wa), assert_non_null(wb);
    assert_int_equal(fsize(a), fsize(b));
    assert_memory_equal(wa, wb, (size_t)fsize(a));
    free(wa), free(wb);
}

static void test_interrupt(void **st) {
    (void)st;
    /* SIGINT one second into a long run: it stops after the step with a checkpoint and the model
     * installed; in batch use the script ends there (exit 1), as after any interrupted command */
    char cmd[2048];
    snprintf(cmd, sizeof cmd,
             "%s -c 'train gdn " SMALL
             " steps=100000 log=1000 out=%s/int; echo after' > %s/int.txt "
             "2>&1 & pid=$!; sleep 1.5; kill -INT $pid; wait $pid; echo rc=$? >> %s/int.txt",
             mixscope_bin(), g_dir, g_dir, g_dir);
    assert_int_equal(system(cmd), 0);
    char p[1024];
    snprintf(p, sizeof p, "%s/int.txt", g_dir);
    char *out = slurp(p);
    assert_non_null(out);
    expect_has(out, "stopped: the trained model is the session's model");
    expect_lacks(out, "\nafter");
    const char *c = strstr(out, "checkpoint ");
    assert_non_null(c);
    free(out);
}

static void test_divergence(void **st) {
    (void)st;
    char *out = NULL;
    int rc = run_mixscope(&out,
                          "-c 'train deltanet qk_norm=sum layers=1 hidden=64 heads=1 head_dim=64 "
                          "pairs=16 seq=128 batch=32 steps=50 log=1 eval=16 out=%s/div'",
                          g_dir);
    assert_int_equal(rc, 1);
    expect_has(out, ": the loss is not finite: the run diverged");
    expect_has(out, "train: the run diverged; diagnose ");
    free(out);
    rc = run_mixscope(&out, "-c 'train deltanet qk_norm=sum layers=1 hidden=64 heads=1 head_dim=64 "
                            "pairs=16 seq=128 batch=32 steps=50 log=1 eval=16 diverge=ok; info'");
    if (rc) fail_msg("exit %d: %s", rc, out);
    expect_has(out, "diverged (diverge=ok)");
    free(out);
    /* a small vocabulary (keys 1..7, values 8..15): learned in tens of steps */
    rc = run_mixscope(&out, "-c 'train gdn layers=1 hidden=32 heads=1 head_dim=32 vocab=16 pairs=4 "
                            "seq=32 batch=16 steps=2000 lr=1e-2 log=10 eval=32 target=0.5'");
    if (rc) fail_msg("exit %d: %s", rc, out);
    expect_has(out, "reached target=0.5 at step ");
    expect_lacks(out, "step 2000/2000");
    free(out);
}

static void test_refusals(void **st) {
    (void)st;
    struct {
        const char *cmd, *want;
    } cases[] = {
        {"train gdn step=5", "unknown option 'step' (did you mean 'steps'?)"},
        {"train gdn task=mqr", "task 'mqr' is not one of mqar, niah, overwrite, a5"},
        {"train gdn every=5", "every=5 writes checkpoints: give out=DIR as well"},
        {"train rwkv", "the trainer has backward passes for gdn, deltanet, kaczmarz, gla, mamba2, "
                       "softmax, parallax, kalman and kata"},
        {"train gdn precision=fp16", "precision 'fp16': expected fp32 or bf16"},
        {"train gdn steps=0", "option 'steps'"},
        {"train gdn pairs=200", "mqar with pairs=200 needs an even seq"},
        {"train gdn diverge=maybe", "diverge='maybe': expected fail or ok"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        char *out = NULL;
        int rc = run_mixscope(&out, "-c '%s'", cases[i].cmd);
        if (rc != 1) fail_msg("%s: exit %d: %s", cases[i].cmd, rc, out);
        expect_has(out, cases[i].want);
        free(out);
    }
}

static int setup(void **st) {
    (void)st;
    g_dir = test_tmpdir();
    return 0;
}

static int teardown(void **st) {
    (void)st;
    test_rmdir(g_dir);
    return 0;
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_short_run),
        cmocka_unit_test(test_interrupt),
        cmocka_unit_test(test_divergence),
        cmocka_unit_test(test_refusals),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
