/* tests/test_math.c - the shared per-element arithmetic of engine/core/math.h against libm in double.
 *
 * engine/core/math.h is what every backend runs (the CPU loops and the CUDA kernels), so its functions
 * are checked directly: tri_expf over its whole range (relative error, clamping, NaN), tri_logf over
 * the positive floats (relative error, the ends), GELU and its derivative against the tanh form in
 * double, and bf16 round-to-nearest-even. */
#include <criterion/criterion.h>
#include <float.h>
#include <math.h>
#include <stdint.h>
#include <string.h>

#include "engine/core/math.h"
#include "engine/device/ops/activations_math.h"
#include "engine/device/ops/crossentropy_math.h"
#include "engine/device/ops/norms_math.h"

/* Keeps the largest relative error of got against want (the absolute error where want is 0) and its x. */
static void track_error(double got, double want, double x, double *worst, double *at)
{
    double e = want == 0.0 ? fabs(got) : fabs(got - want) / fabs(want);
    if (e > *worst) {
        *worst = e;
        *at = x;
    }
}

Test(math, expf_relative_error_over_the_range)
{
    double worst = 0.0, at = 0.0;
    for (double x = -87.0; x <= 88.0; x += 1.0 / 4096.0)
        track_error(tri_expf((float)x), exp((double)(float)x), x, &worst, &at);
    cr_log_info("tri_expf: max relative error %.3g at x = %g", worst, at);
    cr_expect_lt(worst, 2.5e-7, "tri_expf relative error %g at %g", worst, at);
}

/* Every 4099th bit pattern of the positive floats, subnormals to the largest (~520,000 values). The
 * bound: the Cephes polynomial's 7.6e-8 (Moshier 1989) plus the final rounding to float, 2^-24
 * (6.0e-8), so 1.4e-7; measured 8.1e-8 over every 7th positive float. */
Test(math, logf_relative_error_over_the_floats)
{
    double worst = 0.0, at = 0.0;
    for (uint32_t u = 1; u < 0x7f800000u; u += 4099) {
        float x;
        memcpy(&x, &u, sizeof x);
        track_error(tri_logf(x), log((double)x), x, &worst, &at);
    }
    cr_log_info("tri_logf: max relative error %.3g at x = %g", worst, at);
    cr_expect_lt(worst, 1.4e-7, "tri_logf relative error %g at %g", worst, at);
}

Test(math, logf_ends_and_nan)
{
    cr_expect_eq(tri_logf(1.0f), 0.0f);
    cr_expect(isinf(tri_logf(0.0f)) && tri_logf(0.0f) < 0.0f, "log(0) is -inf");
    cr_expect(isnan(tri_logf(-1.0f)), "log of a negative number is NaN");
    cr_expect(isnan(tri_logf(NAN)), "NaN must propagate");
    cr_expect(isinf(tri_logf(INFINITY)) && tri_logf(INFINITY) > 0.0f, "log(inf) is inf");
    cr_expect_float_eq(tri_logf(FLT_TRUE_MIN), logf(FLT_TRUE_MIN), 1e-5f, "the smallest subnormal");
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

/* The row order of engine/core/math.h as a warp runs it (cuda/warp.cuh tri_warp_row_sum): lane l
 * holds slots 4l .. 4l+3 in r[0..4) and 128+4l .. 128+4l+3 in r[4..8) (so each of the warp's loads is
 * contiguous); a shuffle xor 1 of the 8 registers makes the groups' first halving step, each lane
 * then ends the steps of its two groups (l/2 and 16 + l/2) and adds them (the lane tree's first
 * step), and __shfl_xor_sync butterflies with offsets 16 .. 2 end the tree, emulated here lane by
 * lane. Every lane must end with the bits of tri_row_slots_combine over the same 256 slot sums,
 * whatever the values (mixed magnitudes and signs make any other order give other bits, which the
 * second check confirms). */
static uint32_t bits_of(float x)
{
    uint32_t u;
    memcpy(&u, &x, sizeof u);
    return u;
}

/* The slot of lane l's register k (cuda/warp.cuh tri_row_first + tri_row_at for a warp). */
static int warp_slot(int l, int k)
{
    return 4 * l + (k < 4 ? k : TRI_ROW_SLOTS / 2 - 4 + k);
}

/* tri_warp_row_sum lane by lane: reg[l][k] the slot sums (overwritten), lane[l] what lane l returns. */
static void warp_row_sum(float reg[TRI_ROW_LANES][TRI_ROW_GROUP], float lane[TRI_ROW_LANES])
{
    float next[TRI_ROW_LANES][TRI_ROW_GROUP];
    for (int l = 0; l < TRI_ROW_LANES; l++)
        for (int k = 0; k < TRI_ROW_GROUP; k++)
            next[l][k] = reg[l][k] + reg[l ^ 1][k]; /* r[k] += __shfl_xor_sync(full, r[k], 1) */
    for (int l = 0; l < TRI_ROW_LANES; l++) {
        float *r = next[l];
        for (int k = 0; k < 2; k++) {
            r[k] += r[k + 2];
            r[4 + k] += r[6 + k];
        }
        lane[l] = (r[0] + r[1]) + (r[4] + r[5]);
    }
    for (int k = TRI_ROW_LANES / 2; k >= 2; k /= 2) {
        float v[TRI_ROW_LANES];
        for (int l = 0; l < TRI_ROW_LANES; l++)
            v[l] = lane[l] + lane[l ^ k]; /* v += __shfl_xor_sync(full, v, k) */
        memcpy(lane, v, sizeof v);
    }
}

Test(math, row_slots_combine_is_the_warp_butterfly)
{
    uint64_t state = 12345;
    int differs_from_sequential = 0;
    for (int trial = 0; trial < 200; trial++) {
        float slots[TRI_ROW_SLOTS], acc[TRI_ROW_SLOTS];
        for (int s = 0; s < TRI_ROW_SLOTS; s++) {
            state = state * 6364136223846793005ull + 1442695040888963407ull;
            float u = (float)((state >> 40) & 0xffffff) / 16777216.0f - 0.5f;
            slots[s] = u * powf(2.0f, (float)((state >> 20) % 24) - 12.0f);
        }
        memcpy(acc, slots, sizeof acc);
        float want = tri_row_slots_combine(acc);
        float lane[TRI_ROW_LANES], reg[TRI_ROW_LANES][TRI_ROW_GROUP];
        for (int l = 0; l < TRI_ROW_LANES; l++)
            for (int k = 0; k < TRI_ROW_GROUP; k++)
                reg[l][k] = slots[warp_slot(l, k)];
        warp_row_sum(reg, lane);
        for (int l = 0; l < TRI_ROW_LANES; l++)
            cr_assert_eq(bits_of(lane[l]), bits_of(want), "trial %d lane %d: %.9g vs %.9g", trial, l, lane[l], want);
        float seq = 0.0f;
        for (int s = 0; s < TRI_ROW_SLOTS; s++)
            seq += slots[s];
        differs_from_sequential += bits_of(seq) != bits_of(want);
    }
    cr_assert_gt(differs_from_sequential, 50, "the tree order should differ from a sequential sum on most trials");
}

/* The cross-entropy's sum of exponentials as cuda/crossentropy/crossentropy.cu's block-per-row kernels compute it
 * (ce_block_row_sumexp): thread t = 32 w + l of TRI_CE_WARPS * 32 loads the 8 values 256 w + warp_slot(l, k)
 * of every 4096 of the row and adds value k into its register k; each warp reduces its lanes as
 * row_slots_combine_is_the_warp_butterfly above; the block halves the warp sums. Emulated here
 * thread by thread, it must give math.h's definition bit for bit at every row length: partial last
 * passes, warps without a span, rows shorter than one warp's span. */
Test(math, ce_row_sumexp_is_the_block_kernels_mapping)
{
    const int64_t lengths[] = {1, 7, 255, 256, 257, 4095, 4096, 4097, 9000, 50257};
    enum { THREADS = TRI_CE_WARPS * TRI_ROW_LANES };
    static float row[50257], reg[THREADS][TRI_ROW_GROUP];
    uint64_t state = 777;
    for (int64_t i = 0; i < 50257; i++) {
        state = state * 6364136223846793005ull + 1442695040888963407ull;
        row[i] = (float)((state >> 40) & 0xffffff) / 16777216.0f * 16.0f - 8.0f;
    }
    int differs_from_warp_order = 0;
    for (size_t z = 0; z < sizeof lengths / sizeof *lengths; z++) {
        int64_t V = lengths[z];
        float mx = 8.0f;
        memset(reg, 0, sizeof reg);
        for (int t = 0; t < THREADS; t++)
            for (int64_t i = TRI_ROW_SLOTS * (int64_t)(t / 32); i < V; i += TRI_CE_SLOTS)
                for (int k = 0; k < 8 && i + warp_slot(t % 32, k) < V; k++)
                    reg[t][k] += tri_expf(row[i + warp_slot(t % 32, k)] - mx);
        float warp_sum[TRI_CE_WARPS];
        for (int w = 0; w < TRI_CE_WARPS; w++) {
            float lane[TRI_ROW_LANES];
            warp_row_sum(reg + w * TRI_ROW_LANES, lane);
            for (int l = 1; l < TRI_ROW_LANES; l++)
                cr_assert_eq(bits_of(lane[l]), bits_of(lane[0]), "V %lld warp %d: lane %d's sum differs", (long long)V,
                             w, l);
            warp_sum[w] = lane[0];
        }
        float got = tri_ce_warps_combine(warp_sum), want = tri_ce_row_sumexp(row, mx, V);
        cr_assert_eq(bits_of(got), bits_of(want), "V %lld: the kernel's mapping gives %.9g, math.h %.9g", (long long)V,
                     got, want);
        /* the one-warp row order (value i in slot i % 256) differs once the row spans several warps */
        float acc[TRI_ROW_SLOTS];
        tri_row_slots_zero(acc);
        for (int64_t j0 = 0; j0 < V; j0 += TRI_ROW_SLOTS)
            for (int64_t k = 0, len = tri_row_slots_span(j0, V); k < len; k++)
                acc[k] += tri_expf(row[j0 + k] - mx);
        differs_from_warp_order += bits_of(tri_row_slots_combine(acc)) != bits_of(want);
    }
    cr_assert_gt(differs_from_warp_order, 0, "no row long enough to tell the block order from the warp order");
}

/* A row sum through the row functions follows the slots: value i in slot i % 256. Checked on the
 * layernorm mean, which is the row sum / C. */
Test(math, layernorm_mean_is_the_slot_sum)
{
    const int64_t C = 1000;
    float x[1000], w[1000], b[1000], out[1000], acc[TRI_ROW_SLOTS] = {0}, mean, rstd;
    for (int64_t i = 0; i < C; i++) {
        x[i] = (float)((i * 7919) % 1013) / 97.0f - 5.0f + (i % 3 ? 1e-4f : 1e3f);
        w[i] = 1.0f, b[i] = 0.0f;
    }
    for (int64_t i = 0; i < C; i++)
        acc[i % TRI_ROW_SLOTS] += x[i];
    float want = tri_row_slots_combine(acc) / (float)C;
    tri_layernorm_row_forward(out, &mean, &rstd, x, w, b, C);
    cr_assert_eq(bits_of(mean), bits_of(want), "mean %.9g vs slot order %.9g", mean, want);
}
