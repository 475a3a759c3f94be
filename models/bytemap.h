/* models/bytemap.h - a hash map from byte strings to 64-bit values.
 *
 * The tokenizer needs two string-keyed lookups: token bytes -> id while loading GPT-2's vocabulary,
 * and pre-token bytes -> cached encoding while encoding (GPT-2's encoder keeps the same cache).
 * Open addressing with linear probing over a power-of-two table; keys are copied into one pool, so
 * the map owns them and callers may pass transient slices of a larger text. */
#ifndef TRIDENT_MODELS_BYTEMAP_H
#define TRIDENT_MODELS_BYTEMAP_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

typedef struct tri_bytemap_slot {
    uint64_t hash;
    uint64_t value;
    size_t key_off; /* into pool */
    uint32_t key_len;
    bool used;
} tri_bytemap_slot;

typedef struct tri_bytemap {
    tri_bytemap_slot *slots;
    size_t cap;   /* power of two, 0 before the first insert */
    size_t count;
    char *pool;   /* all keys, back to back */
    size_t pool_len, pool_cap;
} tri_bytemap;

/* FNV-1a (64-bit) of len bytes. */
uint64_t tri_bytemap_hash(const char *key, size_t len);

/* Looks up key; on a hit stores its value in *value (if non-NULL) and returns true. */
bool tri_bytemap_get(const tri_bytemap *m, const char *key, size_t len, uint64_t *value);

/* Inserts key -> value, or overwrites the value of an existing key.
 * Keys are at most UINT32_MAX bytes. Returns TRI_OK, TRI_EINVAL (key too long) or TRI_ENOMEM. */
int tri_bytemap_put(tri_bytemap *m, const char *key, size_t len, uint64_t value);

/* Removes every key, keeping the allocations for reuse. */
void tri_bytemap_clear(tri_bytemap *m);

/* Frees everything and zeroes the map (NULL-safe). */
void tri_bytemap_free(tri_bytemap *m);

#endif
