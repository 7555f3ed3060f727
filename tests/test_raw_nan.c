/* test_raw_nan.c: raw-mixer mode's `step` and `run` stop at the first NaN / Inf, as model mode
 * does, and name it: token, layer (with the lane), head and the quantity of the recurrence
 * (diag_nf_scan_core, diag/nonfinite.c; the stop is in cli/cmd_stream.c). */
#include "tests/tsession.h"

#include "cli/command.h"
#include "cli/session.h"
#include "core/trace.h"
#include "scenes/raw.h"

/* |k| = 1e6 with GDN's beta = 1: rho = beta |k|^2 = 1e12, so every write multiplies the state
 * along k by |1 - rho| ~ 1e12. The state norm is 1e6, 1.6e17, 6.7e28 after tokens 0..2; the write
 * beta k e^T of token 3 is past float32 (3.4e38). */
#define OVERFLOW "mixer gdn dk=8 dv=8; stream keys 64 norms=1e6..1e6"

/* Through the binary: exit status 1, the message names token 3, the lane, head 0, the write, and
 * the numbers that explain it; run prints no summary. */
static void test_run_stops_binary(void **state) {
    (void)state;
    char *out;
    int rc = run_mixscope(&out, "-c '" OVERFLOW "; run'");
    assert_int_equal(rc, 1);
    assert_non_null(strstr(out, "mixscope: stopped after token 3: first Inf at token 3, layer 0 "
                                "(lane gdn), head 0, in the write beta k e^T (+inf); at this "
                                "token k_norm = 1e+06, beta = 1, rho = 1e+12, alpha = 1\n"));
    assert_null(strstr(out, "ran tokens"));
    free(out);
    /* step prints the tokens up to the stop, and not past it */
    rc = run_mixscope(&out, "-c '" OVERFLOW "; step 8'");
    assert_int_equal(rc, 1);
    assert_non_null(strstr(out, "token 2 write key 2 |k| 1e+06: gdn rho 1e+12 state 6.663e+28"));
    assert_non_null(strstr(out, "token 3 write key 3 |k| 1e+06: gdn rho 1e+12 state inf |o| inf"));
    assert_null(strstr(out, "token 4 "));
    assert_non_null(strstr(out, "stopped after token 3: first Inf at token 3, layer 0 (lane gdn)"));
    free(out);
    /* GDN's beta = 1 with |k| in 1.5..2.5 grows the state by ~1e22 over 200 tokens, but stays
     * finite: run goes through and reports the blow-up, not a stop */
    rc = run_mixscope(&out, "-c 'mixer gdn dk=8 dv=8 beta=1; stream keys 200 norms=1.5..2.5; run'");
    if (rc != 0) fail_msg("finite blow-up: %s", out);
    assert_non_null(strstr(out, "ran tokens 0..199 of 200"));
    assert_non_null(strstr(out, "state norm blew up at token 22"));
    assert_null(strstr(out, "stopped"));
    free(out);
}

/* In a session: the second lane is named, the position and the trace end after the token, a
 * later step stops again at once, and a NaN in an input is named as that input. */
static void test_stop_in_session(void **state) {
    (void)state;
    tsession t;
    err e = {{0}};
    ts_open(&t);
    /* kaczmarz (beta = eta / |k|^2, rho = 1) stays finite beside gdn */
    assert_int_equal(ts_exec(&t, &e, "mixer kaczmarz gdn dk=8 dv=8 heads=2"), 0);
    assert_int_equal(ts_exec(&t, &e, "stream keys 64 norms=1e6..1e6"), 0);
    assert_int_equal(ts_exec(&t, &e, "run"), -1);
    assert_non_null(strstr(e.msg, "stopped after token 3: first Inf at token 3, layer 1 (lane "
                                  "gdn), head 0 (and 1 more heads), in the write beta k e^T"));
    assert_int_equal(t.s.eng.raw->pos, 4); /* after the token */
    assert_int_equal(t.s.eng.tr.T, 4);     /* the token is in the trace */
    int sn = trace_find(&t.s.eng.tr, "state_norm");
    assert_true(sn >= 0);
    assert_true(isinf(*trace_at_lh(&t.s.eng.tr, sn, 3, 1, 0)));
    float kz = *trace_at_lh(&t.s.eng.tr, sn, 3, 0, 0); /* kaczmarz: |S| ~ sqrt(t) / |k| */
    assert_true(kz > 1e-6f && kz < 3e-6f);
    /* the state is infinite now: the next token stops at once */
    assert_int_equal(ts_exec(&t, &e, "step"), -1);
    assert_non_null(strstr(e.msg, "stopped after token 4: first "));
    assert_non_null(strstr(e.msg, "at token 4, layer 1 (lane gdn)"));
    assert_int_equal(t.s.eng.raw->pos, 5);

    /* a NaN in the stream's key at token 5, head 1: named as the input, in the first lane. Raw
     * mode reads with the key that writes (q = k), and the inputs are checked in the core's
     * order, so the query is named */
    assert_int_equal(ts_exec(&t, &e, "mixer gdn kaczmarz dk=8 dv=8 heads=2"), 0);
    assert_int_equal(ts_exec(&t, &e, "stream keys 16 norms=1..1"), 0);
    raw_stream *st = &t.s.eng.raw->st;
    st->k[((size_t)5 * st->H + 1) * st->dk + 2] = NAN;
    assert_int_equal(ts_exec(&t, &e, "step 10"), -1);
    assert_string_equal(e.msg, "stopped after token 5: first NaN at token 5, layer 0 (lane gdn), "
                               "head 1, in the query q (core input) (NaN)");
    assert_int_equal(t.s.eng.raw->pos, 6);
    const char *out = ts_out(&t);
    assert_non_null(strstr(out, "token 5 write key 5"));
    assert_null(strstr(out, "token 6 write key 6"));
    /* reset, and a clean stream runs through */
    st->k[((size_t)5 * st->H + 1) * st->dk + 2] = 0.5f;
    assert_int_equal(ts_exec(&t, &e, "reset"), 0);
    if (ts_exec(&t, &e, "run")) fail_msg("%s", e.msg);
    assert_int_equal(t.s.eng.raw->pos, 16);
    ts_close(&t);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_run_stops_binary),
        cmocka_unit_test(test_stop_in_session),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
