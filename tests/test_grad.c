/* test_grad.c: every backward pass of the trainer (train/ops.h) against central finite
 * differences of its own forward, in double (relative error < 1e-6) and in float (< 1e-3): dense
 * products, RMSNorm, the gated output norm, the short convolution, SiLU, the L2 norm, the GDN
 * decay, the write strength, SwiGLU, the cross-entropy, and the delta-rule core (gdn, deltanet,
 * kaczmarz with tiny, unit and large keys) over T = 11 tokens with checkpoints every 4 (T not a
 * multiple of the chunk), a non-zero initial state and a gradient arriving at the final state;
 * causal softmax attention with RoPE (the rotation's transpose is its backward). */
#include "tests/testutil.h"

#include "train/ops.h"

static uint64_t g_rng = 0x9E3779B97F4A7C15ull;
static double uniform(void) {
    g_rng ^= g_rng >> 12, g_rng ^= g_rng << 25, g_rng ^= g_rng >> 27;
    return (double)((g_rng * 2685821657736338717ull) >> 11) * (1.0 / 9007199254740992.0);
}

#define R      double
#define SFX(n) n##_d
static const char *const type_name_d = "double";
static const double tol_d = 1e-6, h_step_d = 1e-5;
#include "grad_cases.inc"
#undef R
#undef SFX

#define R      float
#define SFX(n) n##_f
static const char *const type_name_f = "float";
static const double tol_f = 1e-3, h_step_f = 1e-3;
#include "grad_cases.inc"
#undef R
#undef SFX

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_linear_d),    cmocka_unit_test(test_norms_d),
        cmocka_unit_test(test_conv_d),      cmocka_unit_test(test_pointwise_d),
        cmocka_unit_test(test_delta_d),     cmocka_unit_test(test_linear_f),
        cmocka_unit_test(test_norms_f),     cmocka_unit_test(test_conv_f),
        cmocka_unit_test(test_pointwise_f), cmocka_unit_test(test_delta_f),
        cmocka_unit_test(test_attention_d), cmocka_unit_test(test_attention_f),
        cmocka_unit_test(test_gla_d),       cmocka_unit_test(test_gla_f),
        cmocka_unit_test(test_parallax_d),  cmocka_unit_test(test_parallax_f),
        cmocka_unit_test(test_kalman_d),    cmocka_unit_test(test_kalman_f),
        cmocka_unit_test(test_kata_d),      cmocka_unit_test(test_kata_f),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
