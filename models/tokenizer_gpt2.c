/* models/tokenizer_gpt2.c - building GPT-2's BPE tokenizer from encoder.json and vocab.bpe.
 *
 * GPT-2 writes tokens in an alphabet of 256 printable Unicode characters, one per byte
 * (encoder.py `bytes_to_unicode`: printable Latin-1 bytes stand for themselves, the other 68 bytes
 * map to U+0100.. in byte order), so that vocab.bpe can separate symbols by spaces. We translate
 * every token back to raw bytes at load time; encoding and decoding then work on bytes and ids
 * only. Both files come from outside, so every field is validated and each error names the file,
 * the key or line, and the value. */
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cjson/cJSON.h>

#include "engine/core/file.h"
#include "engine/core/status.h"
#include "models/tokenizer_impl.h"

/* GPT-2's pre-tokenizer (encoder.py): contractions, optionally space-led runs of letters, of
 * digits, of other symbols, then whitespace. GPT-2 runs it with Python's `regex` module, whose \s
 * is Unicode White_Space; PCRE2 10.42's \s (with UCP) leaves out U+0085, so we spell the class
 * out: TAB..CR, U+0085 and the separators \p{Z} are exactly White_Space. (?!\S) becomes (?![^WS]). */
#define WS "\\t\\n\\x{0B}\\f\\r\\x{85}\\p{Z}"
static const char GPT2_PATTERN[] = "'s|'t|'re|'ve|'m|'ll|'d| ?\\p{L}+| ?\\p{N}+| ?[^" WS
                                   "\\p{L}\\p{N}]+|[" WS "]+(?![^" WS "])|[" WS "]+";

/* Longest line or key echoed in an error message. */
#define ECHO_MAX 60

/* A printable excerpt of s for an error message: at most ECHO_MAX bytes of its first line, control
 * bytes shown as '?', "..." when cut. Returns out. */
static const char *excerpt(const char *s, size_t len, char out[ECHO_MAX + 4])
{
    size_t n = 0;
    while (n < len && n < ECHO_MAX && s[n] != '\n') {
        unsigned char c = (unsigned char)s[n];
        out[n++] = c < 0x20 || c == 0x7f ? '?' : (char)c;
    }
    strcpy(out + n, n < len ? "..." : "");
    return out;
}

static int read_file(const char *path, const char *what, char **buf, size_t *len)
{
    int rc = TRI_OK;
    FILE *f = NULL;
    rc = tri_file_fopen_read(path, &f);
    if (rc)
        return tri_error_context(rc, "%s", what);
    if (fseek(f, 0, SEEK_END) != 0 || ftell(f) < 0) {
        rc = TRI_ERR(TRI_EIO, "%s '%s': cannot determine its size", what, path);
        goto out_close;
    }
    size_t size = (size_t)ftell(f);
    rewind(f);
    *buf = malloc(size + 1);
    if (!*buf) {
        rc = TRI_ERR(TRI_ENOMEM, "%s '%s': cannot allocate %zu bytes", what, path, size);
        goto out_close;
    }
    if (fread(*buf, 1, size, f) != size) {
        rc = TRI_ERR(TRI_EIO, "%s '%s': read failed", what, path);
        free(*buf);
        *buf = NULL;
        goto out_close;
    }
    (*buf)[size] = '\0';
    *len = size;
out_close:
    fclose(f);
    return rc;
}

/* GPT-2's bytes_to_unicode, inverted: code point -> byte, or -1 for a character outside the
 * alphabet (all code points of the alphabet are below 512). */
static void unicode_to_byte(int16_t u2b[512])
{
    for (int cp = 0; cp < 512; cp++)
        u2b[cp] = -1;
    int n = 0;
    for (int b = 0; b < 256; b++) {
        bool printable = (b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE);
        u2b[printable ? b : 256 + n++] = (int16_t)b;
    }
}

/* Decodes one UTF-8 character of s[*i..len) into *cp and advances *i. Returns false if the bytes
 * are not a valid 1..3-byte sequence (the alphabet needs no more). */
static bool utf8_next(const char *s, size_t len, size_t *i, uint32_t *cp)
{
    const unsigned char *u = (const unsigned char *)s + *i;
    size_t left = len - *i;
    if (u[0] < 0x80) {
        *cp = u[0];
        *i += 1;
    } else if ((u[0] & 0xE0) == 0xC0 && left >= 2 && (u[1] & 0xC0) == 0x80) {
        *cp = ((uint32_t)(u[0] & 0x1F) << 6) | (u[1] & 0x3F);
        *i += 2;
    } else if ((u[0] & 0xF0) == 0xE0 && left >= 3 && (u[1] & 0xC0) == 0x80 && (u[2] & 0xC0) == 0x80) {
        *cp = ((uint32_t)(u[0] & 0x0F) << 12) | ((uint32_t)(u[1] & 0x3F) << 6) | (u[2] & 0x3F);
        *i += 3;
    } else {
        return false;
    }
    return true;
}

/* Translates a token written in GPT-2's alphabet (s, len bytes of UTF-8) to raw bytes in out
 * (room for len bytes: every character takes at least one UTF-8 byte). On a character outside the
 * alphabet returns false with its code point in *bad (0xFFFFFFFF for invalid UTF-8). */
static bool unmap_token(const int16_t u2b[512], const char *s, size_t len, char *out,
                        size_t *out_len, uint32_t *bad)
{
    size_t i = 0, n = 0;
    while (i < len) {
        uint32_t cp;
        if (!utf8_next(s, len, &i, &cp)) {
            *bad = 0xFFFFFFFFu;
            return false;
        }
        if (cp >= 512 || u2b[cp] < 0) {
            *bad = cp;
            return false;
        }
        out[n++] = (char)u2b[cp];
    }
    *out_len = n;
    return true;
}

/* Checks one encoder.json entry (key -> id) and records the token's bytes for that id. */
static int add_vocab_entry(tri_tokenizer *tok, const int16_t u2b[512], const char *path,
                           const cJSON *item, size_t *pool_len, tri_bytemap *ids)
{
    const char *key = item->string;
    char ex[ECHO_MAX + 4];
    double v = cJSON_IsNumber(item) ? item->valuedouble : -1.0;
    if (!cJSON_IsNumber(item) || v != floor(v) || v < 0 || v >= tok->vocab_size)
        return TRI_ERR(TRI_ECORRUPT, "vocab file '%s': key \"%s\": id must be an integer in [0, %d)",
                       path, excerpt(key, strlen(key), ex), tok->vocab_size);
    int id = (int)v;
    if (tok->tok_len[id] != 0)
        return TRI_ERR(TRI_ECORRUPT, "vocab file '%s': key \"%s\": id %d is used twice", path,
                       excerpt(key, strlen(key), ex), id);
    size_t n = 0;
    uint32_t bad = 0;
    char *dst = tok->tok_bytes + *pool_len;
    if (!unmap_token(u2b, key, strlen(key), dst, &n, &bad) || n == 0)
        return TRI_ERR(TRI_ECORRUPT, "vocab file '%s': key \"%s\": character U+%04X is not in "
                       "GPT-2's byte alphabet (or the key is empty)", path, excerpt(key, strlen(key), ex),
                       (unsigned)bad);
    if (tri_bytemap_get(ids, dst, n, NULL))
        return TRI_ERR(TRI_ECORRUPT, "vocab file '%s': key \"%s\": token appears twice", path,
                       excerpt(key, strlen(key), ex));
    tok->tok_off[id] = (uint32_t)*pool_len;
    tok->tok_len[id] = (uint32_t)n;
    *pool_len += n;
    return tri_bytemap_put(ids, dst, n, (uint64_t)id);
}

/* Parses encoder.json into the vocabulary and fills ids (token bytes -> id). */
static int load_vocab(tri_tokenizer *tok, const char *path, tri_bytemap *ids)
{
    char *text = NULL;
    size_t len = 0;
    int rc = read_file(path, "vocab file", &text, &len);
    if (rc != TRI_OK)
        return rc;
    cJSON *root = cJSON_ParseWithLength(text, len);
    if (!root) {
        const char *at = cJSON_GetErrorPtr();
        rc = TRI_ERR(TRI_ECORRUPT, "vocab file '%s': not valid JSON (near byte %td)", path,
                     at ? at - text : (ptrdiff_t)-1);
        goto out_free_text;
    }
    int count = cJSON_GetArraySize(root);
    if (!cJSON_IsObject(root) || count < 257) {
        rc = TRI_ERR(TRI_ECORRUPT, "vocab file '%s': expected a JSON object mapping at least 257 "
                     "tokens to ids, got %s with %d entries", path,
                     cJSON_IsObject(root) ? "an object" : "another JSON value", count);
        goto out_free_json;
    }
    size_t pool_bytes = 0;
    for (const cJSON *it = root->child; it; it = it->next)
        pool_bytes += it->string ? strlen(it->string) : 0;
    rc = tri_tokenizer_alloc_vocab(tok, count, pool_bytes);
    size_t pool_len = 0;
    int16_t u2b[512];
    unicode_to_byte(u2b);
    for (const cJSON *it = root->child; it && rc == TRI_OK; it = it->next)
        rc = add_vocab_entry(tok, u2b, path, it, &pool_len, ids);
out_free_json:
    cJSON_Delete(root);
out_free_text:
    free(text);
    return rc;
}

/* Finds the ids of the 256 one-byte tokens and of <|endoftext|>. */
static int find_special_ids(tri_tokenizer *tok, const char *path, const tri_bytemap *ids)
{
    for (int b = 0; b < 256; b++) {
        char c = (char)b;
        uint64_t id;
        if (!tri_bytemap_get(ids, &c, 1, &id))
            return TRI_ERR(TRI_ECORRUPT, "vocab file '%s': no token for the single byte 0x%02X", path, b);
        tok->byte_id[b] = (int32_t)id;
    }
    uint64_t eod;
    if (!tri_bytemap_get(ids, TRI_EOD_TEXT, strlen(TRI_EOD_TEXT), &eod))
        return TRI_ERR(TRI_ECORRUPT, "vocab file '%s': no \"%s\" token", path, TRI_EOD_TEXT);
    tok->eod = (int)eod;
    return TRI_OK;
}

/* Id of a merge part written in GPT-2's alphabet, or -1 (with *bad set) when it is not a token. */
static int32_t part_id(const int16_t u2b[512], const tri_bytemap *ids, const char *s, size_t len,
                       char *scratch, uint32_t *bad)
{
    size_t n;
    uint64_t id;
    *bad = 0;
    if (!unmap_token(u2b, s, len, scratch, &n, bad) || !tri_bytemap_get(ids, scratch, n, &id))
        return -1;
    return (int32_t)id;
}

/* Parses one merge line "A B" into the pair table with the given rank. scratch holds len bytes. */
static int add_merge(tri_tokenizer *tok, const int16_t u2b[512], const tri_bytemap *ids,
                     const char *path, size_t lineno, const char *line, size_t len, int32_t rank,
                     char *scratch)
{
    char ex[ECHO_MAX + 4];
    const char *sp = memchr(line, ' ', len);
    if (!sp || sp == line || sp == line + len - 1 || memchr(sp + 1, ' ', len - (size_t)(sp - line) - 1))
        return TRI_ERR(TRI_ECORRUPT, "merge file '%s' line %zu: expected two symbols separated by "
                       "one space, got \"%s\"", path, lineno, excerpt(line, len, ex));
    size_t la = (size_t)(sp - line), lb = len - la - 1;
    uint32_t bad;
    int32_t a = part_id(u2b, ids, line, la, scratch, &bad);
    int32_t b = a < 0 ? -1 : part_id(u2b, ids, sp + 1, lb, scratch, &bad);
    uint64_t merged = 0;
    bool have_merged = false;
    if (b >= 0) {
        size_t na = tok->tok_len[a], nb = tok->tok_len[b];
        memcpy(scratch, tok->tok_bytes + tok->tok_off[a], na);
        memcpy(scratch + na, tok->tok_bytes + tok->tok_off[b], nb);
        have_merged = tri_bytemap_get(ids, scratch, na + nb, &merged);
    }
    if (!have_merged)
        return TRI_ERR(TRI_ECORRUPT, "merge file '%s' line %zu: \"%s\": %s is not in the "
                       "vocabulary", path, lineno, excerpt(line, len, ex),
                       a < 0 ? "the first symbol" : b < 0 ? "the second symbol" : "the merged token");
    uint64_t key = tri_pair_key(a, b);
    size_t mask = tok->pairs_cap - 1, i = (size_t)tri_pair_hash(key) & mask;
    while (tok->pairs[i].rank >= 0) {
        if (tok->pairs[i].key == key)
            return TRI_ERR(TRI_ECORRUPT, "merge file '%s' line %zu: \"%s\" repeats an earlier merge",
                           path, lineno, excerpt(line, len, ex));
        i = (i + 1) & mask;
    }
    tok->pairs[i] = (tri_merge){.key = key, .rank = rank, .merged = (int32_t)merged};
    return TRI_OK;
}

/* Parses vocab.bpe: a "#version" line, then one merge per line in rank order (blank lines are
 * skipped, as the file ends with one). */
static int load_merges(tri_tokenizer *tok, const char *path, const tri_bytemap *ids)
{
    char *text = NULL, *scratch = NULL, ex[ECHO_MAX + 4];
    size_t len = 0, lines = 1;
    int rc = read_file(path, "merge file", &text, &len);
    if (rc != TRI_OK)
        return rc;
    if (strncmp(text, "#version", 8) != 0) {
        rc = TRI_ERR(TRI_ECORRUPT, "merge file '%s' line 1: expected a \"#version\" header, got "
                     "\"%s\"", path, excerpt(text, len, ex));
        goto out_free;
    }
    for (size_t i = 0; i < len; i++)
        lines += text[i] == '\n';
    tok->pairs_cap = 1024;
    while (tok->pairs_cap < 2 * lines)
        tok->pairs_cap *= 2;
    tok->pairs = malloc(tok->pairs_cap * sizeof *tok->pairs);
    scratch = malloc(len + 1);
    if (!tok->pairs || !scratch) {
        rc = TRI_ERR(TRI_ENOMEM, "merge file '%s': out of memory for %zu merges", path, lines);
        goto out_free;
    }
    for (size_t i = 0; i < tok->pairs_cap; i++)
        tok->pairs[i].rank = -1;
    int16_t u2b[512];
    unicode_to_byte(u2b);
    const char *line = memchr(text, '\n', len);
    size_t lineno = 1;
    int32_t rank = 0;
    while (line && rc == TRI_OK) {
        line++;
        lineno++;
        const char *end = memchr(line, '\n', len - (size_t)(line - text));
        size_t n = (size_t)((end ? end : text + len) - line);
        if (n > 0 && line[n - 1] == '\r')
            n--;
        if (n > 0)
            rc = add_merge(tok, u2b, ids, path, lineno, line, n, rank++, scratch);
        line = end;
    }
out_free:
    free(scratch);
    free(text);
    return rc;
}

static int compile_regex(tri_tokenizer *tok)
{
    int err;
    PCRE2_SIZE at;
    tok->regex = pcre2_compile((PCRE2_SPTR)GPT2_PATTERN, PCRE2_ZERO_TERMINATED,
                               PCRE2_UTF | PCRE2_UCP | PCRE2_MATCH_INVALID_UTF, &err, &at, NULL);
    if (!tok->regex) {
        PCRE2_UCHAR why[256];
        pcre2_get_error_message(err, why, sizeof why);
        return TRI_ERR(TRI_EINTERNAL, "GPT-2 pre-tokenizer regex does not compile at offset %zu: %s",
                       (size_t)at, (const char *)why);
    }
    /* JIT is a speed-up only; without it (unsupported CPU) pcre2_match interprets the pattern. */
    (void)pcre2_jit_compile(tok->regex, PCRE2_JIT_COMPLETE);
    tok->match_data = pcre2_match_data_create_from_pattern(tok->regex, NULL);
    if (!tok->match_data)
        return TRI_ERR(TRI_ENOMEM, "GPT-2 pre-tokenizer: cannot allocate match data");
    return TRI_OK;
}

int tri_tokenizer_create_gpt2(tri_tokenizer **out, const char *vocab_file, const char *merge_file)
{
    *out = NULL;
    tri_bytemap ids = {0};
    tri_tokenizer *tok = calloc(1, sizeof *tok);
    if (!tok)
        return TRI_ERR(TRI_ENOMEM, "tokenizer: out of memory");
    tok->kind = TRI_TOKENIZER_GPT2;
    int rc = load_vocab(tok, vocab_file, &ids);
    if (rc != TRI_OK)
        goto out_fail;
    rc = find_special_ids(tok, vocab_file, &ids);
    if (rc != TRI_OK)
        goto out_fail;
    rc = load_merges(tok, merge_file, &ids);
    if (rc != TRI_OK)
        goto out_fail;
    rc = compile_regex(tok);
    if (rc != TRI_OK)
        goto out_fail;
    tri_bytemap_free(&ids);
    *out = tok;
    return TRI_OK;
out_fail:
    tri_bytemap_free(&ids);
    tri_tokenizer_destroy(tok);
    return rc;
}
