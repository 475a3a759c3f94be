/* tests/test_ops_fixed.c - the fixed-point ops of deterministic mode against exact integer references.
 *
 * Deterministic mode (engine/train/zero.c, engine/train/train.c) sums gradients as int64 fixed point so that
 * every grouping of the sum (micro-batches, dp ranks, ZeRO shards, CPU threads) gives the same
 * bits. That promise rests on four ops, checked here without tolerance where the math is exact:
 *   - fixed_accumulate: acc += round-half-even(x * 2^bits), written here with floor and an explicit
 *     tie rule rather than llrint; NaN, +-Inf and |x| >= 2^(62 - bits) are skipped and counted;
 *   - add_i64: y += x, exact;
 *   - fixed_sum_squares: the exact 192-bit sum of squares, referenced by accumulating the low and
 *     high 64-bit halves of each square in separate unsigned __int128s and carrying at the end;
 *     the limbs must equal it after normalisation, whatever the split of x over calls or threads;
 *   - fixed_to_float and tri_fixed_limbs_value, which round once (to float, to double) and are
 *     compared to the exact value within half an ulp (plus one rounding of the reading). */
#include <criterion/criterion.h>
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "engine/core/math.h"
#include "engine/device/device.h"
#include "tests/opsutil.h"

TestSuite(ops_fixed, .fini = ot_teardown);

#define BITS 44

/* round-half-even(v) for a double v that is exact (x * 2^bits of a float x). */
static int64_t round_half_even(double v)
{
    double r = floor(v), frac = v - r;
    if (frac > 0.5 || (frac == 0.5 && fmod(r, 2.0) != 0.0))
        r += 1.0;
    return (int64_t)r;
}

/* Whether x * 2^bits is representable (|.| < 2^62, finite). */
static int representable(float x, int bits)
{
    return isfinite(x) && fabs(ldexp((double)x, bits)) < ldexp(1.0, 62);
}

static tri_tensor i64_tensor(tri_device *d, int64_t n, const int64_t *host)
{
    return ot_tensor(d, tri_tensor_1d(NULL, TRI_I64, n), host);
}

static tri_tensor f32_tensor(tri_device *d, int64_t n, const float *host)
{
    return ot_tensor(d, tri_tensor_1d(NULL, TRI_F32, n), host);
}

/* Values of every kind: ordinary, tiny (rounding, including exact ties), huge but representable,
 * and not representable. */
static float *mixed_values(size_t n, int bits, uint64_t seed)
{
    float *x = ot_uniform(n, -3.0f, 3.0f, seed);
    float limit = ldexpf(1.0f, 62 - bits);
    for (size_t i = 0; i < n; i += 7)
        x[i] = ldexpf(x[i], -bits - 1); /* |x 2^bits| < 3: rounding matters */
    x[1] = ldexpf(0.5f, -bits);         /* tie 0.5 -> 0 */
    x[2] = ldexpf(1.5f, -bits);         /* tie 1.5 -> 2 */
    x[3] = -ldexpf(2.5f, -bits);        /* tie -2.5 -> -2 */
    x[4] = NAN;
    x[5] = INFINITY;
    x[6] = -INFINITY;
    x[8] = limit;                            /* just out of range */
    x[9] = -nextafterf(limit, 0.0f);         /* largest representable magnitude */
    x[10] = nextafterf(limit, 0.0f) * 0.75f; /* representable */
    x[11] = 1e30f;
    return x;
}

Test(ops_fixed, accumulate_rounds_half_even_and_counts_unrepresentable)
{
    for (int threads = 1; threads <= 3; threads += 2) {
        tri_device *d = ot_device(threads);
        const size_t n = 301;
        float *x = mixed_values(n, BITS, 11);
        int64_t *acc0 = (int64_t *)ot_ints(2 * n); /* n int64s */
        float *r = ot_uniform(n, -1.0f, 1.0f, 12);
        for (size_t i = 0; i < n; i++)
            acc0[i] = (int64_t)(r[i] * 1e15); /* some earlier contributions */
        tri_tensor acc = i64_tensor(d, (int64_t)n, acc0);
        tri_tensor tx = f32_tensor(d, (int64_t)n, x);
        float one_bad = 2.0f;
        tri_tensor bad = f32_tensor(d, 1, &one_bad);
        cr_assert_eq(tri_op_fixed_accumulate(d, acc, tx, BITS, bad), TRI_OK);
        cr_assert_eq(tri_op_fixed_accumulate(d, acc, tx, BITS, bad), TRI_OK);

        int64_t *got = (int64_t *)ot_ints(2 * n);
        ot_download(d, got, acc);
        float got_bad;
        ot_download(d, &got_bad, bad);
        int64_t nbad = 0;
        for (size_t i = 0; i < n; i++) {
            int64_t want = acc0[i];
            if (representable(x[i], BITS))
                want = tri_fixed_add(want, tri_fixed_add(round_half_even(ldexp((double)x[i], BITS)), round_half_even(ldexp((double)x[i], BITS))));
            else
                nbad++;
            cr_assert_eq(got[i], want, "threads %d element %zu (x = %a): got %lld want %lld",
                         threads, i, (double)x[i], (long long)got[i], (long long)want);
        }
        cr_assert_eq(nbad, 5); /* NaN, +-Inf, 2^(62-bits), 1e30 */
        cr_assert_eq(got_bad, 2.0f + 2.0f * (float)nbad, "bad count %g, want %g", (double)got_bad,
                     2.0 + 2.0 * (double)nbad);
        /* the ties, spelled out */
        cr_assert_eq(got[1] - acc0[1], 0);
        cr_assert_eq(got[2] - acc0[2], 4);
        cr_assert_eq(got[3] - acc0[3], -4);
    }
}

Test(ops_fixed, add_i64_is_exact)
{
    tri_device *d = ot_device(2);
    const size_t n = 129;
    int64_t *y0 = (int64_t *)ot_ints(2 * n), *x0 = (int64_t *)ot_ints(2 * n);
    for (size_t i = 0; i < n; i++) {
        y0[i] = ((int64_t)1 << 61) - (int64_t)(i * 1234567891011ull % 999999937ull);
        x0[i] = -(int64_t)(i * 7919) + ((i % 3 == 0) ? ((int64_t)1 << 60) : 0);
    }
    tri_tensor y = i64_tensor(d, (int64_t)n, y0), x = i64_tensor(d, (int64_t)n, x0);
    cr_assert_eq(tri_op_add_i64(d, y, x), TRI_OK);
    int64_t *got = (int64_t *)ot_ints(2 * n);
    ot_download(d, got, y);
    for (size_t i = 0; i < n; i++)
        cr_assert_eq(got[i], y0[i] + x0[i], "element %zu", i);
}

/* The exact sum of squares of the representable round(x * 2^bits) as three 64-bit words. */
static void exact_sum_squares(const float *x, size_t n, int bits, uint64_t w[3])
{
    unsigned __int128 lo = 0, hi = 0; /* sums of the squares' low and high halves */
    for (size_t i = 0; i < n; i++) {
        if (!representable(x[i], bits))
            continue;
        int64_t a = round_half_even(ldexp((double)x[i], bits));
        unsigned __int128 m = (unsigned __int128)(a < 0 ? -(__int128)a : (__int128)a);
        unsigned __int128 sq = m * m;
        lo += (uint64_t)sq;
        hi += (uint64_t)(sq >> 64);
    }
    hi += lo >> 64;
    w[0] = (uint64_t)lo;
    w[1] = (uint64_t)hi;
    w[2] = (uint64_t)(hi >> 64);
}

/* The limbs after carrying: six 32-bit words of the 192-bit integer. */
static void normalise(const int64_t limbs[6], uint32_t out[6])
{
    int64_t l[6];
    memcpy(l, limbs, sizeof l);
    for (int k = 0; k < 5; k++) {
        cr_assert_geq(l[k], 0, "limb %d negative", k);
        l[k + 1] += l[k] >> 32;
        l[k] &= 0xffffffff;
    }
    cr_assert_lt(l[5], (int64_t)1 << 32, "limb 5 overflows 192 bits");
    for (int k = 0; k < 6; k++)
        out[k] = (uint32_t)l[k];
}

/* limbs += sum of squares of x[lo, hi) on d; returns the bad count added. */
static float sum_squares_part(tri_device *d, tri_tensor limbs, const float *x, size_t lo, size_t hi)
{
    float zero = 0.0f, got_bad;
    tri_tensor bad = f32_tensor(d, 1, &zero);
    tri_tensor tx = f32_tensor(d, (int64_t)(hi - lo), x + lo);
    cr_assert_eq(tri_op_fixed_sum_squares(d, limbs, tx, BITS, bad), TRI_OK);
    ot_download(d, &got_bad, bad);
    return got_bad;
}

Test(ops_fixed, sum_squares_is_exact_and_independent_of_the_split)
{
    const size_t n = 1000;
    float *x = mixed_values(n, BITS, 21);
    for (size_t i = 20; i < 40; i++) /* squares near 2^122: the sum needs more than 128 bits */
        x[i] = (i % 2 ? 1.0f : -1.0f) * nextafterf(ldexpf(1.0f, 62 - BITS), 0.0f);
    uint64_t w[3];
    exact_sum_squares(x, n, BITS, w);
    cr_assert_neq(w[2], 0, "the reference should exceed 128 bits");
    uint32_t want[6];
    for (int k = 0; k < 6; k++)
        want[k] = (uint32_t)(w[k / 2] >> (32 * (k % 2)));

    /* whole on 1 thread, whole on 3 threads, and in uneven parts on 2 threads */
    const size_t cuts[][4] = {{0, n, n, n}, {0, n, n, n}, {0, 1, 457, n}};
    const int threads[] = {1, 3, 2};
    double first = 0.0;
    for (int v = 0; v < 3; v++) {
        tri_device *d = ot_device(threads[v]);
        int64_t zero6[6] = {0};
        tri_tensor limbs = i64_tensor(d, 6, zero6);
        float nbad = 0.0f;
        for (int p = 0; p < 3; p++)
            if (cuts[v][p + 1] > cuts[v][p])
                nbad += sum_squares_part(d, limbs, x, cuts[v][p], cuts[v][p + 1]);
        cr_assert_eq(nbad, 5.0f, "variant %d: %g unrepresentable, want 5", v, (double)nbad);
        int64_t l[6];
        ot_download(d, l, limbs);
        uint32_t got[6];
        normalise(l, got);
        for (int k = 0; k < 6; k++)
            cr_assert_eq(got[k], want[k], "variant %d word %d: %08x want %08x", v, k, got[k],
                         want[k]);
        double value = tri_fixed_limbs_value(l, 2 * BITS);
        if (v == 0)
            first = value;
        cr_assert_eq(memcmp(&value, &first, sizeof value), 0,
                     "variant %d reads %.17g, variant 0 %.17g", v, value, first);
    }
    /* the reading: sum over representable x of x^2 to double precision (the rounding of x to
     * 2^-44 changes the tiny values' squares by < 2^-88, far below a double ulp of the total) */
    long double exact = 0.0L;
    for (size_t i = 0; i < n; i++)
        if (representable(x[i], BITS)) {
            long double a = (long double)round_half_even(ldexp((double)x[i], BITS));
            exact += a * a;
        }
    exact = ldexpl(exact, -2 * BITS);
    cr_assert_leq(fabsl((long double)first - exact) / exact, 4e-16L, "read %.17g, exact %.17Lg",
                  first, exact);
}

Test(ops_fixed, limbs_value_carries_exactly)
{
    /* the integer 2^64 + 5 spread three ways over the limbs: same words, same reading */
    const int64_t a[6] = {5, 0, 1, 0, 0, 0};
    const int64_t b[6] = {5, (int64_t)1 << 32, 0, 0, 0, 0};
    const int64_t c[6] = {5 + ((int64_t)1 << 40), ((int64_t)1 << 32) - 256, 0, 0, 0, 0};
    const int64_t *all[3] = {a, b, c};
    uint32_t w0[6];
    normalise(a, w0);
    for (int v = 0; v < 3; v++) {
        uint32_t w[6];
        normalise(all[v], w);
        cr_assert_eq(memcmp(w, w0, sizeof w), 0, "split %d normalises differently", v);
        double value = tri_fixed_limbs_value(all[v], 0);
        cr_assert_eq(value, ldexp(1.0, 64), "split %d reads %.17g", v, value); /* 5 < ulp/2 */
    }
    /* exactly representable values read exactly, with the scale applied */
    const int64_t e[6] = {3, 1, 0, 0, 0, 0};
    cr_assert_eq(tri_fixed_limbs_value(e, 0), 4294967299.0);
    cr_assert_eq(tri_fixed_limbs_value(e, 32), 4294967299.0 / 4294967296.0);
    /* 2^96 - 1 (all ones) at scale 96 is 1 - 2^-96, which rounds to 1 */
    const int64_t f[6] = {0xffffffff, 0xffffffff, 0xffffffff, 0, 0, 0};
    cr_assert_eq(tri_fixed_limbs_value(f, 96), 1.0);
    /* limbs above 32 bits (many chunks added) read as their sum */
    const int64_t g[6] = {(int64_t)1 << 40, (int64_t)1 << 40, 0, 0, 0, 0};
    cr_assert_eq(tri_fixed_limbs_value(g, 40), 1.0 + 4294967296.0);
}

Test(ops_fixed, to_float_rounds_once)
{
    tri_device *d = ot_device(2);
    const size_t n = 257;
    int64_t *a = (int64_t *)ot_ints(2 * n);
    float *r = ot_uniform(n, -1.0f, 1.0f, 31);
    for (size_t i = 0; i < n; i++)
        a[i] = (int64_t)(((uint64_t)(int64_t)((double)r[i] * ldexp(1.0, 20 + (int)(i % 40))) * 2654435761u) % ((uint64_t)1 << 61)) - ((int64_t)1 << 60);
    a[0] = 0;
    a[1] = 1;
    a[2] = -1;
    a[3] = ((int64_t)1 << 62) - 1;
    tri_tensor acc = i64_tensor(d, (int64_t)n, a);
    tri_tensor out = f32_tensor(d, (int64_t)n, NULL);
    cr_assert_eq(tri_op_fixed_to_float(d, out, acc, BITS), TRI_OK);
    float *got = ot_read(d, out);
    for (size_t i = 0; i < n; i++) {
        long double exact = ldexpl((long double)a[i], -BITS); /* exact in x87 extended */
        long double ulp = exact == 0 ? 0 : ldexpl(1.0L, ilogbl(exact) - 23);
        /* correctly rounded is within ulp/2; the int64 -> double -> float path may round twice,
         * which adds at most 2^-53 relative */
        cr_assert_leq(fabsl((long double)got[i] - exact), ulp / 2 + fabsl(exact) * 0x1p-52L,
                      "element %zu: acc %lld -> %a, exact %La", i, (long long)a[i],
                      (double)got[i], exact);
    }
    cr_assert_eq(got[1], ldexpf(1.0f, -BITS));
    cr_assert_eq(got[2], -ldexpf(1.0f, -BITS));
}

Test(ops_fixed, refuses_wrong_dtypes_sizes_and_bits)
{
    tri_device *d = ot_device(1);
    tri_tensor acc = i64_tensor(d, 4, NULL), x = f32_tensor(d, 4, NULL), bad = f32_tensor(d, 1, NULL);
    tri_tensor x3 = f32_tensor(d, 3, NULL), accf = f32_tensor(d, 4, NULL);
    tri_tensor limbs = i64_tensor(d, 6, NULL);
    cr_assert_eq(tri_op_fixed_accumulate(d, accf, x, BITS, bad), TRI_EINVAL);
    cr_assert_eq(tri_op_fixed_accumulate(d, acc, x3, BITS, bad), TRI_EINVAL);
    cr_assert_eq(tri_op_fixed_accumulate(d, acc, x, 61, bad), TRI_EINVAL);
    cr_assert_eq(tri_op_fixed_accumulate(d, acc, x, BITS, x), TRI_EINVAL);
    cr_assert_eq(tri_op_fixed_to_float(d, x3, acc, BITS), TRI_EINVAL);
    cr_assert_eq(tri_op_add_i64(d, acc, x), TRI_EINVAL);
    cr_assert_eq(tri_op_fixed_sum_squares(d, acc, x, BITS, bad), TRI_EINVAL);
    cr_assert_eq(tri_op_fixed_sum_squares(d, limbs, x, -1, bad), TRI_EINVAL);
    cr_assert_eq(tri_op_fixed_sum_squares(d, limbs, x, BITS, bad), TRI_OK);
}
