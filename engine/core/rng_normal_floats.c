/* engine/core/rng_normal_floats.c - many initial weights at once, each the scalar draw's float bit for
 * bit (see rng.h, tri_rng_normal_floats).
 *
 * A model's initialisation draws one normal per weight (tri_rng_normal: Box-Muller, glibc's scalar log
 * and cos), ~35 ns each here: 4.5 s a rank for GPT-2 124M, and ~5% of the test suite's CPU time. glibc's
 * vector libm (libmvec: _ZGVdN4v_log, _ZGVdN4v_cos, four doubles an AVX2 call) computes the same
 * functions within a few units in the last place (glibc's libm-test-ulps lists at most 2-3 for these)
 * but not always the scalar functions' bits. The weight kept is a float, though, 29 bits coarser than
 * the double: where the vector path's value v and everything within 2^-40 |v| of it round to the same
 * float (so does the scalar path's, which lies within ~2^-49 |v| of v), that float is the scalar
 * path's; elsewhere (about one weight in 40,000) the scalar path computes it. The margin is ~500 times
 * the error the documented bounds allow. Without AVX2 or libmvec every weight takes the scalar path. */
#include "engine/core/rng.h"

#include <math.h>

#if defined(TRIDENT_HAVE_LIBMVEC) && defined(__x86_64__) && defined(__GNUC__)
#include <immintrin.h>

/* glibc's libmvec, x86_64 vector ABI: 'd' (AVX2), 4 lanes, one vector argument. */
__m256d _ZGVdN4v_log(__m256d x);
__m256d _ZGVdN4v_cos(__m256d x);

static double to_unit(uint64_t x)
{
    return (double)(x >> 11) * (1.0 / 9007199254740992.0); /* as rng.c's */
}

/* Four weights first + i .. first + i + 3 into out[i..i+3]. */
__attribute__((target("avx2"))) static void four(uint64_t seed, uint64_t stream, uint64_t base, uint64_t first,
                                                 double scale, float *out)
{
    double u1[4], u2[4];
    for (int k = 0; k < 4; k++) { /* tri_rng_normal's draws: mix(seed, stream, index) is hash64(base ^ index) */
        uint64_t x = tri_rng_hash64(base ^ (first + (uint64_t)k));
        u1[k] = to_unit(x);
        u2[k] = to_unit(tri_rng_hash64(x));
        if (u1[k] < 1e-300)
            u1[k] = 1e-300;
    }
    __m256d l = _ZGVdN4v_log(_mm256_loadu_pd(u1));
    __m256d c = _ZGVdN4v_cos(_mm256_mul_pd(_mm256_set1_pd(6.283185307179586), _mm256_loadu_pd(u2)));
    __m256d r = _mm256_mul_pd(_mm256_sqrt_pd(_mm256_mul_pd(_mm256_set1_pd(-2.0), l)), c);
    __m256d v = _mm256_mul_pd(r, _mm256_set1_pd(scale));
    __m256d margin = _mm256_mul_pd(_mm256_andnot_pd(_mm256_set1_pd(-0.0), v), _mm256_set1_pd(0x1p-40));
    __m128 f = _mm256_cvtpd_ps(v); /* round to nearest even, as the scalar (float) conversion */
    __m128 lo = _mm256_cvtpd_ps(_mm256_sub_pd(v, margin)), hi = _mm256_cvtpd_ps(_mm256_add_pd(v, margin));
    int settled = _mm_movemask_ps(_mm_and_ps(_mm_cmpeq_ps(f, lo), _mm_cmpeq_ps(f, hi)));
    _mm_storeu_ps(out, f);
    for (int k = 0; k < 4; k++)
        if (!(settled >> k & 1))
            out[k] = (float)(tri_rng_normal(seed, stream, first + (uint64_t)k) * scale);
}

static int vector_path(void)
{
    static int have = -1; /* a benign race: every thread computes the same answer */
    if (have < 0)
        have = __builtin_cpu_supports("avx2") ? 1 : 0;
    return have;
}
#endif

void tri_rng_normal_floats(uint64_t seed, uint64_t stream, uint64_t first, int64_t n, double scale, float *out)
{
    int64_t i = 0;
#if defined(TRIDENT_HAVE_LIBMVEC) && defined(__x86_64__) && defined(__GNUC__)
    if (vector_path()) {
        uint64_t base = tri_rng_hash64(tri_rng_hash64(seed) ^ stream);
        for (; i + 4 <= n; i += 4)
            four(seed, stream, base, first + (uint64_t)i, scale, out + i);
    }
#endif
    for (; i < n; i++)
        out[i] = (float)(tri_rng_normal(seed, stream, first + (uint64_t)i) * scale);
}
