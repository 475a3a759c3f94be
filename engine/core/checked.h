/* engine/core/checked.h - integer arithmetic that reports overflow instead of wrapping.
 *
 * Sizes that come from outside (config files, flags) are multiplied before anything is allocated:
 * tokens per batch, parameter counts, bytes per buffer. These helpers return false (and leave *out
 * unchanged) when the exact result does not fit, so a caller can name the values that overflowed
 * instead of allocating a wrapped size. GCC and Clang's __builtin_*_overflow do the work. */
#ifndef TRIDENT_ENGINE_CORE_CHECKED_H
#define TRIDENT_ENGINE_CORE_CHECKED_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* *out = a * b when it fits in int64_t; false otherwise. */
static inline bool tri_mul_i64(int64_t a, int64_t b, int64_t *out)
{
    int64_t r;
    if (__builtin_mul_overflow(a, b, &r))
        return false;
    *out = r;
    return true;
}

/* *out = a + b when it fits in int64_t; false otherwise. */
static inline bool tri_add_i64(int64_t a, int64_t b, int64_t *out)
{
    int64_t r;
    if (__builtin_add_overflow(a, b, &r))
        return false;
    *out = r;
    return true;
}

/* *out = a * b when it fits in size_t; false otherwise. */
static inline bool tri_mul_size(size_t a, size_t b, size_t *out)
{
    size_t r;
    if (__builtin_mul_overflow(a, b, &r))
        return false;
    *out = r;
    return true;
}

/* *out = a + b when it fits in size_t; false otherwise. */
static inline bool tri_add_size(size_t a, size_t b, size_t *out)
{
    size_t r;
    if (__builtin_add_overflow(a, b, &r))
        return false;
    *out = r;
    return true;
}

#endif
