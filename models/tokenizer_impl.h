/* models/tokenizer_impl.h - the tokenizer's insides, shared by tokenizer.c (encode/decode) and
 * tokenizer_gpt2.c (loading GPT-2's files). Not for other modules: use models/tokenizer.h. */
#ifndef TRIDENT_MODELS_TOKENIZER_IMPL_H
#define TRIDENT_MODELS_TOKENIZER_IMPL_H

#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>

#include "models/bytemap.h"
#include "models/tokenizer.h"

/* One merge rule: the pair (a, b) packed as a << 32 | b, its rank (priority, 0 first; -1 marks an
 * empty slot of the pair table) and the id of the merged token. */
typedef struct tri_merge {
    uint64_t key;
    int32_t rank;
    int32_t merged;
} tri_merge;

struct tri_tokenizer {
    tri_tokenizer_kind kind;
    int vocab_size;
    int eod;
    char *tok_bytes;      /* every token's bytes, back to back */
    uint32_t *tok_off;    /* (vocab_size) offset of each token's bytes in tok_bytes */
    uint32_t *tok_len;    /* (vocab_size) length of each token's bytes */
    int32_t byte_id[256]; /* id of the one-byte token of each byte */

    /* GPT-2 only */
    tri_merge *pairs;     /* open-addressing table of merges, pairs_cap slots (power of two) */
    size_t pairs_cap;
    pcre2_code *regex;    /* the pre-tokenizer */
    pcre2_match_data *match_data;
    tri_bytemap cache;    /* pre-token bytes -> (offset in cache_ids << 24 | count) */
    int32_t *cache_ids;
    size_t cache_ids_len, cache_ids_cap;
    int32_t *word;        /* scratch symbols of the pre-token being merged */
    size_t word_cap;
};

static inline uint64_t tri_pair_key(int32_t a, int32_t b)
{
    return ((uint64_t)(uint32_t)a << 32) | (uint32_t)b;
}

static inline uint64_t tri_pair_hash(uint64_t key)
{
    key ^= key >> 33;
    key *= 0xff51afd7ed558ccdull;
    key ^= key >> 33;
    return key;
}

/* Allocates tok_off, tok_len (vocab_size each) and tok_bytes (pool_bytes) and sets vocab_size.
 * Returns TRI_OK or TRI_ENOMEM. */
int tri_tokenizer_alloc_vocab(tri_tokenizer *tok, int vocab_size, size_t pool_bytes);

#endif
