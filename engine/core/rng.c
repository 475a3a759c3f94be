/* engine/core/rng.c - splitmix64-based counter RNG (see rng.h). */
#include "engine/core/rng.h"

#include <math.h>

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

static uint64_t mix(uint64_t seed, uint64_t stream, uint64_t index)
{
    return tri_rng_hash64(tri_rng_hash64(tri_rng_hash64(seed) ^ stream) ^ index);
}

static double to_unit(uint64_t x)
{
    return (double)(x >> 11) * (1.0 / 9007199254740992.0); /* 53 bits */
}

double tri_rng_uniform(uint64_t seed, uint64_t stream, uint64_t index)
{
    return to_unit(mix(seed, stream, index));
}

double tri_rng_normal(uint64_t seed, uint64_t stream, uint64_t index)
{
    uint64_t x = mix(seed, stream, index);
    double u1 = to_unit(x), u2 = to_unit(tri_rng_hash64(x));
    if (u1 < 1e-300)
        u1 = 1e-300;
    return sqrt(-2.0 * log(u1)) * cos(6.283185307179586 * u2);
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
