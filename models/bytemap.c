/* models/bytemap.c - open-addressing hash map from byte strings to uint64 (see bytemap.h). */
#include "models/bytemap.h"

#include <stdlib.h>
#include <string.h>

#include "engine/core/status.h"

#define MIN_CAP 1024

uint64_t tri_bytemap_hash(const char *key, size_t len)
{
    uint64_t h = 0xcbf29ce484222325ull;
    for (size_t i = 0; i < len; i++) {
        h ^= (unsigned char)key[i];
        h *= 0x100000001b3ull;
    }
    return h;
}

static bool slot_matches(const tri_bytemap *m, const tri_bytemap_slot *s, uint64_t h,
                         const char *key, size_t len)
{
    return s->hash == h && s->key_len == len && memcmp(m->pool + s->key_off, key, len) == 0;
}

/* Index of key's slot, or of the empty slot where it would go. cap must be non-zero. */
static size_t probe(const tri_bytemap *m, uint64_t h, const char *key, size_t len)
{
    size_t mask = m->cap - 1, i = (size_t)h & mask;
    while (m->slots[i].used && !slot_matches(m, &m->slots[i], h, key, len))
        i = (i + 1) & mask;
    return i;
}

bool tri_bytemap_get(const tri_bytemap *m, const char *key, size_t len, uint64_t *value)
{
    if (m->cap == 0)
        return false;
    const tri_bytemap_slot *s = &m->slots[probe(m, tri_bytemap_hash(key, len), key, len)];
    if (!s->used)
        return false;
    if (value)
        *value = s->value;
    return true;
}

/* Doubles the table (or creates it) and reinserts every slot by its stored hash. */
static int grow_table(tri_bytemap *m)
{
    size_t new_cap = m->cap ? 2 * m->cap : MIN_CAP;
    tri_bytemap_slot *slots = calloc(new_cap, sizeof *slots);
    if (!slots)
        return TRI_ERR(TRI_ENOMEM, "bytemap: cannot allocate %zu slots", new_cap);
    for (size_t i = 0; i < m->cap; i++) {
        if (!m->slots[i].used)
            continue;
        size_t j = (size_t)m->slots[i].hash & (new_cap - 1);
        while (slots[j].used)
            j = (j + 1) & (new_cap - 1);
        slots[j] = m->slots[i];
    }
    free(m->slots);
    m->slots = slots;
    m->cap = new_cap;
    return TRI_OK;
}

static int pool_append(tri_bytemap *m, const char *key, size_t len)
{
    if (m->pool_len + len > m->pool_cap) {
        size_t cap = m->pool_cap ? m->pool_cap : 4096;
        while (cap < m->pool_len + len)
            cap *= 2;
        char *pool = realloc(m->pool, cap);
        if (!pool)
            return TRI_ERR(TRI_ENOMEM, "bytemap: cannot grow the key pool to %zu bytes", cap);
        m->pool = pool;
        m->pool_cap = cap;
    }
    memcpy(m->pool + m->pool_len, key, len);
    m->pool_len += len;
    return TRI_OK;
}

int tri_bytemap_put(tri_bytemap *m, const char *key, size_t len, uint64_t value)
{
    if (len > UINT32_MAX)
        return TRI_ERR(TRI_EINVAL, "bytemap: key of %zu bytes is too long", len);
    if (2 * (m->count + 1) > m->cap) {
        int rc = grow_table(m);
        if (rc != TRI_OK)
            return rc;
    }
    uint64_t h = tri_bytemap_hash(key, len);
    tri_bytemap_slot *s = &m->slots[probe(m, h, key, len)];
    if (s->used) {
        s->value = value;
        return TRI_OK;
    }
    size_t off = m->pool_len;
    int rc = pool_append(m, key, len);
    if (rc != TRI_OK)
        return rc;
    *s = (tri_bytemap_slot){.hash = h, .value = value, .key_off = off, .key_len = (uint32_t)len,
                            .used = true};
    m->count++;
    return TRI_OK;
}

void tri_bytemap_clear(tri_bytemap *m)
{
    if (m->slots)
        memset(m->slots, 0, m->cap * sizeof *m->slots);
    m->count = 0;
    m->pool_len = 0;
}

void tri_bytemap_free(tri_bytemap *m)
{
    if (!m)
        return;
    free(m->slots);
    free(m->pool);
    memset(m, 0, sizeof *m);
}
