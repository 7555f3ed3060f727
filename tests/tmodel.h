/* tmodel.h: a random model for a test (model_random with key=value options), failing the test
 * when it cannot be built. For the tests that build models in process (tests/test_models.c,
 * tests/test_diagnose.c, tests/test_ranks.c). */
#ifndef MIXSCOPE_TMODEL_H
#define MIXSCOPE_TMODEL_H

#include "tests/testutil.h"

#include "core/opts.h"
#include "models/model.h"

static inline model *random_model(const char *mixer, const char *const *kv, int n) {
    opts o;
    err e = {{0}};
    assert_int_equal(opts_parse(&o, n, (char *const *)kv, &e), 0);
    model *m = NULL;
    if (model_random(&m, mixer, &o, &e)) fail_msg("model random %s: %s", mixer, e.msg);
    opts_free(&o);
    return m;
}

/* logits of T tokens stepped from position 0 ([T, V], malloc'd) */
static inline float *step_logits(model *m, const int32_t *ids, int T, trace *tr) {
    err e = {{0}};
    float *L = malloc((size_t)T * m->c.vocab * sizeof *L);
    assert_non_null(L);
    assert_int_equal(model_reset(m, 0, &e), 0);
    for (int t = 0; t < T; t++) {
        if (tr) assert_true(trace_push_token(tr, &e) == t);
        if (model_step(m, ids[t], L + (size_t)t * m->c.vocab, tr, &e)) fail_msg("%s", e.msg);
    }
    return L;
}

static inline float *prefill_logits(model *m, const int32_t *ids, int T) {
    err e = {{0}};
    float *L = malloc((size_t)T * m->c.vocab * sizeof *L);
    assert_non_null(L);
    assert_int_equal(model_reset(m, 0, &e), 0);
    if (model_prefill(m, ids, T, L, &e)) fail_msg("%s", e.msg);
    return L;
}

#endif
