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

#endif
