/* tests/test_math.c - the shared per-element arithmetic of engine/core/math.h against libm in double.
 *
 * engine/core/math.h is what every backend runs (the CPU loops and the CUDA kernels), so its functions
 * are checked directly: tri_expf over its whole range (relative error, clamping, NaN), GELU and its
 * derivative against the tanh form in double, and bf16 round-to-nearest-even. */
#include <criterion/criterion.h>
#include <float.h>
#include <math.h>

#include "engine/core/math.h"

Test(math, expf_relative_error_over_the_range)
{
    double worst = 0.0, at = 0.0;
    for (double x = -87.0; x <= 88.0; x += 1.0 / 4096.0) {
        double want = exp((double)(float)x);
        double got = tri_expf((float)x);
        double e = fabs(got - want) / want;
        if (e > worst) {
            worst = e;
            at = x;
        }
    }
    cr_log_info("tri_expf: max relative error %.3g at x = %g", worst, at);
    cr_expect_lt(worst, 2.5e-7, "tri_expf relative error %g at %g", worst, at);
}

Test(math, expf_ends_and_nan)
{
    cr_expect_eq(tri_expf(0.0f), 1.0f);
    cr_expect(isnan(tri_expf(NAN)), "NaN must propagate");
    float lo = tri_expf(-1000.0f), hi = tri_expf(1000.0f);
    cr_expect(lo >= 0.0f && lo < 2e-38f, "exp(-1000) clamps to ~1e-38, got %g", (double)lo);
    cr_expect(isfinite(hi) && hi > 1e38f, "exp(1000) clamps to a finite ~2e38, got %g", (double)hi);
    cr_expect(tri_expf(-INFINITY) < 2e-38f);
}

static double gelu_ref(double x)
{
    return 0.5 * x * (1.0 + tanh(sqrt(2.0 / 3.14159265358979323846) * (x + 0.044715 * x * x * x)));
}

Test(math, gelu_and_derivative_match_the_tanh_form)
{
    /* error relative to max(|value|, 1): gelu and gelu' are O(1) around their zero crossings, where
     * a relative measure would only show fp32's absolute rounding */
    double worst = 0.0, worst_d = 0.0;
    for (double x = -12.0; x <= 12.0; x += 1.0 / 512.0) {
        double want = gelu_ref(x);
        double h = 1e-6, dwant = (gelu_ref(x + h) - gelu_ref(x - h)) / (2 * h);
        worst = fmax(worst, fabs(tri_gelu((float)x) - want) / fmax(fabs(want), 1.0));
        worst_d = fmax(worst_d, fabs(tri_gelu_grad((float)x) - dwant) / fmax(fabs(dwant), 1.0));
    }
    cr_log_info("gelu: max error %.3g, derivative %.3g (relative to max(|value|, 1))", worst, worst_d);
    cr_expect_lt(worst, 5e-7);
    cr_expect_lt(worst_d, 5e-7);
    cr_expect(fabsf(tri_gelu(-100.0f)) < 1e-30f && tri_gelu(100.0f) == 100.0f, "saturated ends");
}

Test(math, bf16_rounds_to_nearest_even)
{
    cr_expect_eq(tri_float_to_bf16(1.0f), 0x3f80);
    /* 1 + 2^-8 is halfway between two bf16 values: ties go to the even one (1.0) */
    cr_expect_eq(tri_float_to_bf16(1.0f + 0x1p-8f), 0x3f80);
    /* 1 + 3 * 2^-8 is halfway, rounds up to the even 1 + 2^-6 */
    cr_expect_eq(tri_float_to_bf16(1.0f + 3 * 0x1p-8f), 0x3f82);
    cr_expect_eq(tri_bf16_to_float(tri_float_to_bf16(-2.5f)), -2.5f);
    cr_expect(isnan(tri_bf16_to_float(tri_float_to_bf16(NAN))));
    cr_expect(isinf(tri_bf16_to_float(tri_float_to_bf16(INFINITY))));
    cr_expect(isinf(tri_bf16_to_float(tri_float_to_bf16(FLT_MAX))), "FLT_MAX rounds up to inf");
}
