/* engine/core/rng.h - counter-based random numbers.
 *
 * A value is a pure function of (seed, stream, index): splitmix64 (Steele et al. 2014) applied to
 * a mix of the three. Initialising element i of a parameter from (seed, hash(name), global index i)
 * gives every tensor-parallel layout the same global weights with no communication, and no rank
 * needs to generate another rank's shard. tri_rng is a small sequential generator for sampling. */
#ifndef TRIDENT_ENGINE_CORE_RNG_H
#define TRIDENT_ENGINE_CORE_RNG_H

#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

uint64_t tri_rng_hash64(uint64_t x);
/* 64-bit FNV-1a of a string (stream ids from parameter names). */
uint64_t tri_rng_hash_str(const char *s);
/* Uniform in [0, 1) from (seed, stream, index). */
double tri_rng_uniform(uint64_t seed, uint64_t stream, uint64_t index);
/* Standard normal from (seed, stream, index) by Box-Muller. */
double tri_rng_normal(uint64_t seed, uint64_t stream, uint64_t index);
/* out[i] = (float)(tri_rng_normal(seed, stream, first + i) * scale) for i < n, bit for bit, about 3x
 * faster on AVX2 machines (glibc's vector log and cos where they settle the float:
 * engine/core/rng.c). */
void tri_rng_normal_floats(uint64_t seed, uint64_t stream, uint64_t first, int64_t n, double scale, float *out);

/* Sequential generator: state advances by one per draw. */
typedef struct tri_rng {
    uint64_t seed, stream, counter;
} tri_rng;

void tri_rng_init(tri_rng *r, uint64_t seed, uint64_t stream);
uint64_t tri_rng_next_u64(tri_rng *r);
double tri_rng_next_uniform(tri_rng *r);

#ifdef __cplusplus
}
#endif

#endif
