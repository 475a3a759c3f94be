/* models/tokenizer.c - byte-level and GPT-2 BPE tokenizers: encoding, decoding, buffers.
 *
 * The GPT-2 tables (vocabulary bytes, byte ids, merge ranks) are loaded by tokenizer_gpt2.c; this
 * file holds what both kinds share and the encoder itself. GPT-2's algorithm (openai/gpt-2
 * src/encoder.py, Radford et al. 2019): split the text with its regex, turn each pre-token's bytes
 * into byte symbols, then repeatedly pick the adjacent pair with the lowest merge rank and merge
 * every occurrence of it left to right (Sennrich et al. 2016), until no pair has a rank. We work on
 * ids instead of strings: ids and token strings are in bijection, so (id a, id b) has the rank of
 * (string a, string b) and merges into the id of their concatenation. */
#include "models/tokenizer_impl.h"

#include <stdlib.h>
#include <string.h>

#include "engine/core/status.h"

/* Pre-tokens longer than this are encoded but not cached (they are rare and would bloat the cache). */
#define CACHE_MAX_KEY 256
/* The cache is emptied when it holds this many pre-tokens or ids, bounding its memory. */
#define CACHE_MAX_ENTRIES (1u << 18)
#define CACHE_MAX_IDS (1u << 24)

/* ---- growable buffers ---- */

static int grow(void **data, size_t *cap, size_t need, size_t elem, const char *what)
{
    if (need <= *cap)
        return TRI_OK;
    size_t cap2 = *cap ? *cap : 256;
    while (cap2 < need) {
        if (cap2 > SIZE_MAX / 2 / elem)
            return TRI_ERR(TRI_ENOMEM, "%s: %zu elements is too many", what, need);
        cap2 *= 2;
    }
    void *p = realloc(*data, cap2 * elem);
    if (!p)
        return TRI_ERR(TRI_ENOMEM, "%s: cannot grow to %zu elements", what, cap2);
    *data = p;
    *cap = cap2;
    return TRI_OK;
}

static int token_buf_append(tri_token_buf *buf, const int32_t *ids, size_t n)
{
    void *data = buf->ids;
    int rc = grow(&data, &buf->cap, buf->len + n, sizeof(int32_t), "token buffer");
    buf->ids = data;
    if (rc != TRI_OK)
        return rc;
    memcpy(buf->ids + buf->len, ids, n * sizeof(int32_t));
    buf->len += n;
    return TRI_OK;
}

static int byte_buf_append(tri_byte_buf *buf, const char *bytes, size_t n)
{
    void *data = buf->data;
    int rc = grow(&data, &buf->cap, buf->len + n, 1, "byte buffer");
    buf->data = data;
    if (rc != TRI_OK)
        return rc;
    memcpy(buf->data + buf->len, bytes, n);
    buf->len += n;
    return TRI_OK;
}

int tri_token_buf_push(tri_token_buf *buf, int32_t id)
{
    return token_buf_append(buf, &id, 1);
}

void tri_token_buf_free(tri_token_buf *buf)
{
    if (!buf)
        return;
    free(buf->ids);
    memset(buf, 0, sizeof *buf);
}

void tri_byte_buf_free(tri_byte_buf *buf)
{
    if (!buf)
        return;
    free(buf->data);
    memset(buf, 0, sizeof *buf);
}

/* ---- shared object ---- */

int tri_tokenizer_alloc_vocab(tri_tokenizer *tok, int vocab_size, size_t pool_bytes)
{
    tok->vocab_size = vocab_size;
    tok->tok_off = calloc((size_t)vocab_size, sizeof *tok->tok_off);
    tok->tok_len = calloc((size_t)vocab_size, sizeof *tok->tok_len);
    tok->tok_bytes = malloc(pool_bytes ? pool_bytes : 1);
    if (!tok->tok_off || !tok->tok_len || !tok->tok_bytes)
        return TRI_ERR(TRI_ENOMEM, "tokenizer: cannot allocate a vocabulary of %d tokens", vocab_size);
    return TRI_OK;
}

int tri_tokenizer_create_byte(tri_tokenizer **out)
{
    *out = NULL;
    tri_tokenizer *tok = calloc(1, sizeof *tok);
    if (!tok)
        return TRI_ERR(TRI_ENOMEM, "tokenizer: out of memory");
    const size_t eod_len = strlen(TRI_EOD_TEXT);
    int rc = tri_tokenizer_alloc_vocab(tok, TRI_BYTE_VOCAB_SIZE, 256 + eod_len);
    if (rc != TRI_OK)
        goto out_free;
    tok->kind = TRI_TOKENIZER_BYTE;
    tok->eod = TRI_BYTE_EOD;
    for (int b = 0; b < 256; b++) {
        tok->tok_bytes[b] = (char)b;
        tok->tok_off[b] = (uint32_t)b;
        tok->tok_len[b] = 1;
        tok->byte_id[b] = b;
    }
    memcpy(tok->tok_bytes + 256, TRI_EOD_TEXT, eod_len);
    tok->tok_off[TRI_BYTE_EOD] = 256;
    tok->tok_len[TRI_BYTE_EOD] = (uint32_t)eod_len;
    *out = tok;
    return TRI_OK;
out_free:
    tri_tokenizer_destroy(tok);
    return rc;
}

void tri_tokenizer_destroy(tri_tokenizer *tok)
{
    if (!tok)
        return;
    free(tok->tok_bytes);
    free(tok->tok_off);
    free(tok->tok_len);
    free(tok->pairs);
    if (tok->match_data)
        pcre2_match_data_free(tok->match_data);
    if (tok->regex)
        pcre2_code_free(tok->regex);
    tri_bytemap_free(&tok->cache);
    free(tok->cache_ids);
    free(tok->word);
    free(tok);
}

int tri_tokenizer_vocab_size(const tri_tokenizer *tok)
{
    return tok->vocab_size;
}

int tri_tokenizer_eod(const tri_tokenizer *tok)
{
    return tok->eod;
}

tri_tokenizer_kind tri_tokenizer_kind_of(const tri_tokenizer *tok)
{
    return tok->kind;
}

const char *tri_tokenizer_name(const tri_tokenizer *tok)
{
    return tok->kind == TRI_TOKENIZER_BYTE ? "ByteLevel" : "GPT2BPETokenizer";
}

/* ---- decoding ---- */

int tri_tokenizer_decode_one(const tri_tokenizer *tok, int32_t id, const char **bytes, size_t *len)
{
    if (id < 0 || id >= tok->vocab_size)
        return TRI_ERR(TRI_EINVAL, "%s: token id %d is outside the vocabulary [0, %d)",
                       tri_tokenizer_name(tok), (int)id, tok->vocab_size);
    *bytes = tok->tok_bytes + tok->tok_off[id];
    *len = tok->tok_len[id];
    return TRI_OK;
}

int tri_tokenizer_decode(const tri_tokenizer *tok, const int32_t *ids, size_t n, tri_byte_buf *out)
{
    for (size_t i = 0; i < n; i++) {
        const char *bytes = NULL;
        size_t len = 0;
        int rc = tri_tokenizer_decode_one(tok, ids[i], &bytes, &len);
        if (rc != TRI_OK)
            return tri_error_context(rc, "decoding position %zu", i);
        rc = byte_buf_append(out, bytes, len);
        if (rc != TRI_OK)
            return rc;
    }
    return TRI_OK;
}

/* ---- BPE ---- */

/* The merge of pair (a, b): its rank and merged id, or rank -1 when the pair has none. */
static tri_merge lookup_pair(const tri_tokenizer *tok, int32_t a, int32_t b)
{
    uint64_t key = tri_pair_key(a, b);
    size_t mask = tok->pairs_cap - 1, i = (size_t)tri_pair_hash(key) & mask;
    while (tok->pairs[i].rank >= 0) {
        if (tok->pairs[i].key == key)
            return tok->pairs[i];
        i = (i + 1) & mask;
    }
    return (tri_merge){.key = key, .rank = -1, .merged = -1};
}

/* Applies the merges to the symbols w[0..*n) in place (GPT-2's encoder.py `bpe`): find the pair
 * with the lowest rank, replace each of its occurrences, scanning left to right without overlap,
 * by the merged symbol, and repeat until no adjacent pair has a rank. */
static void bpe_word(const tri_tokenizer *tok, int32_t *w, size_t *n)
{
    while (*n > 1) {
        tri_merge best = {.rank = -1};
        for (size_t i = 0; i + 1 < *n; i++) {
            tri_merge m = lookup_pair(tok, w[i], w[i + 1]);
            if (m.rank >= 0 && (best.rank < 0 || m.rank < best.rank))
                best = m;
        }
        if (best.rank < 0)
            return;
        int32_t a = (int32_t)(best.key >> 32), b = (int32_t)(best.key & 0xffffffffu);
        size_t out = 0;
        for (size_t i = 0; i < *n; out++) {
            if (i + 1 < *n && w[i] == a && w[i + 1] == b) {
                w[out] = best.merged;
                i += 2;
            } else {
                w[out] = w[i++];
            }
        }
        *n = out;
    }
}

/* Remembers the encoding of one pre-token; emptied when full, so memory stays bounded. */
static int cache_put(tri_tokenizer *tok, const char *piece, size_t len, const int32_t *ids, size_t n)
{
    if (tok->cache.count >= CACHE_MAX_ENTRIES || tok->cache_ids_len + n > CACHE_MAX_IDS) {
        tri_bytemap_clear(&tok->cache);
        tok->cache_ids_len = 0;
    }
    void *data = tok->cache_ids;
    int rc = grow(&data, &tok->cache_ids_cap, tok->cache_ids_len + n, sizeof(int32_t), "BPE cache");
    tok->cache_ids = data;
    if (rc != TRI_OK)
        return rc;
    memcpy(tok->cache_ids + tok->cache_ids_len, ids, n * sizeof(int32_t));
    uint64_t value = ((uint64_t)tok->cache_ids_len << 24) | (uint64_t)n;
    tok->cache_ids_len += n;
    return tri_bytemap_put(&tok->cache, piece, len, value);
}

/* Encodes one pre-token (GPT-2) and appends its ids. */
static int encode_piece(tri_tokenizer *tok, const char *piece, size_t len, tri_token_buf *out)
{
    uint64_t hit;
    if (len <= CACHE_MAX_KEY && tri_bytemap_get(&tok->cache, piece, len, &hit))
        return token_buf_append(out, tok->cache_ids + (hit >> 24), (size_t)(hit & 0xffffffu));
    void *data = tok->word;
    int rc = grow(&data, &tok->word_cap, len, sizeof(int32_t), "BPE word");
    tok->word = data;
    if (rc != TRI_OK)
        return rc;
    for (size_t i = 0; i < len; i++)
        tok->word[i] = tok->byte_id[(unsigned char)piece[i]];
    size_t n = len;
    bpe_word(tok, tok->word, &n);
    if (len <= CACHE_MAX_KEY) {
        rc = cache_put(tok, piece, len, tok->word, n);
        if (rc != TRI_OK)
            return rc;
    }
    return token_buf_append(out, tok->word, n);
}

/* GPT-2: splits text by the pre-tokenizer regex and encodes each match. Bytes no match covers can
 * only be invalid UTF-8 (the regex's alternatives cover every character); they form their own
 * pre-tokens, so nothing is dropped. */
static int encode_gpt2(tri_tokenizer *tok, const char *text, size_t len, tri_token_buf *out)
{
    size_t off = 0;
    while (off < len) {
        int m = pcre2_match(tok->regex, (PCRE2_SPTR)text, len, off, 0, tok->match_data, NULL);
        if (m == PCRE2_ERROR_NOMATCH)
            return encode_piece(tok, text + off, len - off, out);
        if (m < 0) {
            PCRE2_UCHAR why[256];
            pcre2_get_error_message(m, why, sizeof why);
            return TRI_ERR(TRI_EINTERNAL, "GPT-2 pre-tokenizer: regex match at byte %zu failed: %s",
                           off, (const char *)why);
        }
        const PCRE2_SIZE *ov = pcre2_get_ovector_pointer(tok->match_data);
        int rc = TRI_OK;
        if (ov[0] > off)
            rc = encode_piece(tok, text + off, ov[0] - off, out);
        if (rc == TRI_OK)
            rc = encode_piece(tok, text + ov[0], ov[1] - ov[0], out);
        if (rc != TRI_OK)
            return rc;
        off = ov[1];
    }
    return TRI_OK;
}

int tri_tokenizer_encode(tri_tokenizer *tok, const char *text, size_t len, tri_token_buf *out)
{
    if (tok->kind == TRI_TOKENIZER_GPT2)
        return encode_gpt2(tok, text, len, out);
    void *data = out->ids;
    int rc = grow(&data, &out->cap, out->len + len, sizeof(int32_t), "token buffer");
    out->ids = data;
    if (rc != TRI_OK)
        return rc;
    for (size_t i = 0; i < len; i++)
        out->ids[out->len++] = (unsigned char)text[i];
    return TRI_OK;
}
