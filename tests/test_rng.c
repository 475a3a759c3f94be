/* tests/test_rng.c - the initial weights in bulk are the scalar draws' floats, bit for bit.
 *
 * tri_rng_normal_floats (engine/core/rng.c) takes glibc's vector log and cos where they
 * settle the float and the scalar Box-Muller elsewhere; tri_param_init_host draws a shard's runs
 * along its last dimension with it. Both are compared here against the element-by-element
 * definition, (float)(tri_rng_normal(seed, stream, index) * std), over millions of draws, scales
 * that put the floats in every binade down to the subnormals, every count modulo the vector width,
 * and shards of 1-d to 3-d parameters split along any dimension with vocabulary padding. Random draws
 * almost never land where the two paths' last bits matter (within a few double ulps of a float
 * rounding boundary: ~2^-28 of them), so a test puts 20,000 draws there by their scale. Mutations
 * checked by hand fail it: the fallback disabled (the vector path's float kept: 5,402 of the 80,000
 * floats differ by one unit), and the margin 2^-52 instead of 2^-40 (437 differ). */
#include <criterion/criterion.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine/core/rng.h"
#include "engine/train/param.h"

/* How many of the n draws from `first` differ from the scalar definition (bit patterns). */
static int64_t mismatches(uint64_t seed, uint64_t stream, uint64_t first, int64_t n, double scale)
{
    float *got = malloc((size_t)(n > 0 ? n : 1) * sizeof *got);
    cr_assert(got);
    tri_rng_normal_floats(seed, stream, first, n, scale, got);
    int64_t bad = 0;
    for (int64_t i = 0; i < n; i++) {
        float want = (float)(tri_rng_normal(seed, stream, first + (uint64_t)i) * scale);
        bad += memcmp(&got[i], &want, sizeof want) != 0;
    }
    free(got);
    return bad;
}

Test(rng, bulk_normal_floats_are_the_scalar_draws)
{
    cr_expect_eq(mismatches(1234, tri_rng_hash_str("h.0.attn.c_attn.weight"), 0, 4000000, 0.02f), 0);
    /* scales from 1 to the subnormal floats (0.02 * 2^-130 puts most draws there) */
    const double scales[] = {1.0, 0.02, 0.0625, 1e-3 / 3.0, 0x1p-100, 0.02 * 0x1p-130};
    for (size_t k = 0; k < sizeof scales / sizeof scales[0]; k++)
        cr_expect_eq(mismatches(7 + k, 99, 1000, 300000, scales[k]), 0, "scale %g", scales[k]);
    /* every count modulo the vector width, and starts near the top of the index range */
    for (int64_t n = 0; n <= 9; n++) {
        cr_expect_eq(mismatches(3, 5, 17, n, 0.02), 0, "n %lld", (long long)n);
        cr_expect_eq(mismatches(3, 5, UINT64_MAX - 20, n, 0.02), 0, "n %lld near 2^64", (long long)n);
    }
}

/* Draws whose scaled value sits on a float rounding boundary: for each index a scale that puts the
 * scalar draw within a few double ulps of the midpoint between two floats, where the vector path's
 * value (which differs from the scalar one in the last bits in over half of the draws here) may
 * round the other way, so only the fallback gives the scalar float. */
Test(rng, bulk_normal_floats_on_rounding_boundaries)
{
    int64_t tested = 0;
    for (uint64_t i = 0; i < 20000; i++) {
        double r = tri_rng_normal(5, 9, i);
        float f = (float)r, g = nextafterf(f, r >= (double)f ? INFINITY : -INFINITY);
        double mid = ((double)f + (double)g) / 2, scale = mid / r;
        if (!(scale > 0.5 && scale < 2.0) || fabs(r * scale - mid) > 4 * (nextafter(mid, INFINITY) - mid))
            continue; /* not near a boundary after all (r tiny or large): nothing to test */
        float got[4];
        tri_rng_normal_floats(5, 9, i, 4, scale, got);
        for (int k = 0; k < 4; k++) {
            float want = (float)(tri_rng_normal(5, 9, i + (uint64_t)k) * scale);
            cr_expect_eq(memcmp(&got[k], &want, sizeof want), 0, "index %llu, scale %.17g: %.9g, want %.9g",
                         (unsigned long long)(i + (uint64_t)k), scale, got[k], want);
        }
        tested++;
    }
    cr_expect_gt(tested, 15000, "only %lld draws near a boundary", (long long)tested);
}

/* The definition tri_param_init_host keeps: element by element over the local shard. */
static void init_reference(const tri_param *p, uint64_t seed, float *host)
{
    const tri_param_spec *s = &p->spec;
    uint64_t stream = tri_rng_hash_str(s->name);
    int64_t idx[TRI_MAX_DIMS] = {0};
    for (int64_t i = 0; i < p->numel; i++) {
        int64_t g = 0;
        for (int d = 0; d < s->ndim; d++)
            g = g * s->shape[d] + p->global_offset[d] + idx[d];
        bool live = p->global_offset[0] + idx[0] < s->init_rows;
        float v = 0.0f;
        if (live && s->init == TRI_INIT_ONES)
            v = 1.0f;
        else if (live && s->init == TRI_INIT_NORMAL)
            v = (float)(tri_rng_normal(seed, stream, (uint64_t)g) * s->init_std);
        host[i] = v;
        for (int d = s->ndim - 1; d >= 0; d--) {
            if (++idx[d] < p->local_shape[d])
                break;
            idx[d] = 0;
        }
    }
}

/* A shard of a parameter of global `shape` (ndim dims): `parts` pieces along dim `split`, piece `k`. */
static tri_param shard(const char *name, int ndim, const int64_t *shape, int64_t init_rows, tri_init_kind init,
                       int split, int parts, int k)
{
    tri_param p;
    memset(&p, 0, sizeof p);
    snprintf(p.spec.name, sizeof p.spec.name, "%s", name);
    p.spec.ndim = ndim;
    p.spec.init = init;
    p.spec.init_std = 0.02f;
    p.spec.init_rows = init_rows;
    p.numel = 1;
    for (int d = 0; d < ndim; d++) {
        p.spec.shape[d] = shape[d];
        p.local_shape[d] = d == split ? shape[d] / parts : shape[d];
        p.global_offset[d] = d == split ? k * p.local_shape[d] : 0;
        p.numel *= p.local_shape[d];
    }
    return p;
}

Test(rng, parameter_shards_start_from_the_element_by_element_values)
{
    const int64_t wte[] = {304, 48}, bias[] = {101}, qkv[] = {3, 36, 20}, vocab[] = {67};
    struct {
        const char *name;
        int ndim;
        const int64_t *shape;
        int64_t init_rows;
        tri_init_kind init;
    } params[] = {
        {"wte.weight", 2, wte, 257, TRI_INIT_NORMAL},   /* vocabulary padding rows */
        {"h.0.attn.bias", 1, bias, 101, TRI_INIT_NORMAL},
        {"h.0.qkv.weight", 3, qkv, 3, TRI_INIT_NORMAL},
        {"lm_head.bias", 1, vocab, 61, TRI_INIT_NORMAL}, /* 1-d with padding */
        {"ln_f.weight", 1, vocab, 61, TRI_INIT_ONES},
        {"ln_f.bias", 2, wte, 257, TRI_INIT_ZEROS},
    };
    for (size_t i = 0; i < sizeof params / sizeof params[0]; i++)
        for (int split = -1; split < params[i].ndim; split++)
            for (int parts = 1; parts <= (split < 0 ? 1 : 4); parts *= 2)
                for (int k = 0; k < parts; k++) {
                    if (split >= 0 && params[i].shape[split] % parts != 0)
                        continue;
                    tri_param p = shard(params[i].name, params[i].ndim, params[i].shape, params[i].init_rows,
                                        params[i].init, split, parts, k);
                    float *got = calloc((size_t)p.numel, sizeof *got), *want = calloc((size_t)p.numel, sizeof *want);
                    cr_assert(got && want);
                    memset(got, 0x7f, (size_t)p.numel * sizeof *got); /* every element must be written */
                    tri_param_init_host(&p, 1337, got);
                    init_reference(&p, 1337, want);
                    cr_expect_eq(memcmp(got, want, (size_t)p.numel * sizeof *got), 0,
                                 "%s split along %d into %d, piece %d", p.spec.name, split, parts, k);
                    free(got);
                    free(want);
                }
}
