/* engine/core/rng.c - splitmix64-based counter RNG (see rng.h), and many normal draws at once.
 *
 * tri_rng_normal_floats: a model's initialisation draws one normal per weight (Box-Muller, glibc's
 * scalar log and cos), ~35 ns each here: over 4 s a rank for GPT-2 124M, and ~4.5% of the Release
 * suite's CPU time. glibc's vector libm (libmvec: _ZGVdN4v_log, _ZGVdN4v_cos, four doubles an AVX2
 * call) computes the same functions within a few units in the last place (glibc's libm-test-ulps
 * lists at most 2-3 for these) but not always the scalar functions' bits. The weight kept is a float,
 * though, 29 bits coarser than the double: where the vector path's value v and everything within
 * 2^-40 |v| of it round to the same float (so does the scalar path's, which lies within ~2^-49 |v| of
 * v), that float is the scalar path's; elsewhere (about one weight in 40,000) the scalar path computes
 * it. The margin is ~500 times the error the documented bounds allow. Without AVX2 or libmvec every
 * weight takes the scalar path. Both paths draw their uniforms with the same functions below. */
#include "engine/core/rng.h"

#include <math.h>

#if defined(TRIDENT_HAVE_LIBMVEC) && defined(__x86_64__) && defined(__GNUC__)
#define TRI_RNG_VECTOR 1
#include <immintrin.h>

/* glibc's libmvec, x86_64 vector ABI: 'd' (AVX2), 4 lanes, one vector argument. */
__m256d _ZGVdN4v_log(__m256d x);
__m256d _ZGVdN4v_cos(__m256d x);
#else
#define TRI_RNG_VECTOR 0
#endif

uint64_t tri_rng_hash64(uint64_t x)
{
    x += 0x9e3779b97f4a7c15ull;
    x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
    x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
    return x ^ (x >> 31);
}

uint64_t tri_rng_hash_str(const char *s)
{
    uint64_t h = 0xcbf29ce484222325ull;
    for (; *s; s++) {
        h ^= (unsigned char)*s;
        h *= 0x100000001b3ull;
    }
    return h;
}

#define TWO_PI 6.283185307179586

/* What (seed, stream) contribute to every draw of the stream. */
static uint64_t stream_base(uint64_t seed, uint64_t stream)
{
    return tri_rng_hash64(tri_rng_hash64(seed) ^ stream);
}

static uint64_t mix(uint64_t seed, uint64_t stream, uint64_t index)
{
    return tri_rng_hash64(stream_base(seed, stream) ^ index);
}

static double to_unit(uint64_t x)
{
    return (double)(x >> 11) * (1.0 / 9007199254740992.0); /* 53 bits */
}

double tri_rng_uniform(uint64_t seed, uint64_t stream, uint64_t index)
{
    return to_unit(mix(seed, stream, index));
}

/* Box-Muller's two uniforms for draw `index` of the stream with base `base` (u1 kept from 0). */
static void normal_uniforms(uint64_t base, uint64_t index, double *u1, double *u2)
{
    uint64_t x = tri_rng_hash64(base ^ index);
    *u1 = to_unit(x);
    *u2 = to_unit(tri_rng_hash64(x));
    if (*u1 < 1e-300)
        *u1 = 1e-300;
}

double tri_rng_normal(uint64_t seed, uint64_t stream, uint64_t index)
{
    double u1, u2;
    normal_uniforms(stream_base(seed, stream), index, &u1, &u2);
    return sqrt(-2.0 * log(u1)) * cos(TWO_PI * u2);
}

#if TRI_RNG_VECTOR
/* Draws first .. first + 3 of the stream, scaled, as floats into out[0..3] (see the top). */
__attribute__((target("avx2"))) static void four_floats(uint64_t seed, uint64_t stream, uint64_t base,
                                                        uint64_t first, double scale, float *out)
{
    double u1[4], u2[4];
    for (int k = 0; k < 4; k++)
        normal_uniforms(base, first + (uint64_t)k, &u1[k], &u2[k]);
    __m256d l = _ZGVdN4v_log(_mm256_loadu_pd(u1));
    __m256d c = _ZGVdN4v_cos(_mm256_mul_pd(_mm256_set1_pd(TWO_PI), _mm256_loadu_pd(u2)));
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
#endif

void tri_rng_normal_floats(uint64_t seed, uint64_t stream, uint64_t first, int64_t n, double scale, float *out)
{
    int64_t i = 0;
#if TRI_RNG_VECTOR
    if (__builtin_cpu_supports("avx2")) {
        uint64_t base = stream_base(seed, stream);
        for (; i + 4 <= n; i += 4)
            four_floats(seed, stream, base, first + (uint64_t)i, scale, out + i);
    }
#endif
    for (; i < n; i++)
        out[i] = (float)(tri_rng_normal(seed, stream, first + (uint64_t)i) * scale);
}

void tri_rng_init(tri_rng *r, uint64_t seed, uint64_t stream)
{
    r->seed = seed;
    r->stream = stream;
    r->counter = 0;
}

uint64_t tri_rng_next_u64(tri_rng *r)
{
    return mix(r->seed, r->stream, r->counter++);
}

double tri_rng_next_uniform(tri_rng *r)
{
    return to_unit(tri_rng_next_u64(r));
}
