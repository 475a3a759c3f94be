/* models/tokenizer.h - text <-> token ids: a byte-level tokenizer and GPT-2's byte-pair encoding.
 *
 * Two kinds behind one object:
 *  - ByteLevel: ids 0..255 are the bytes themselves, id 256 is the end-of-document token (EOD);
 *    vocab size 257. Any byte string round-trips.
 *  - GPT-2 BPE, equal to GPT-2's own encoder (Radford et al. 2019, "Language Models are
 *    Unsupervised Multitask Learners", §2.2; openai/gpt-2 src/encoder.py): text is split into
 *    pre-tokens by GPT-2's regex, each pre-token's UTF-8 bytes become byte symbols, and adjacent
 *    symbol pairs are merged lowest-rank-first by the merge list of vocab.bpe (byte-pair encoding,
 *    Sennrich et al. 2016, "Neural Machine Translation of Rare Words with Subword Units"). Ids come
 *    from encoder.json; EOD is `<|endoftext|>` = 50256; vocab size 50257.
 *
 * Encoding never produces EOD: `<|endoftext|>` in the text is ordinary text, as in GPT-2's
 * encoder. Callers append EOD between documents (tools/tokenize --append-eod). Decoding EOD gives
 * the bytes "<|endoftext|>" with both kinds, so decoded token files show document boundaries.
 *
 * A tokenizer keeps a cache of encoded pre-tokens and a regex match buffer, so encoding mutates it:
 * use one tokenizer per thread. Decoding does not mutate it. */
#ifndef TRIDENT_MODELS_TOKENIZER_H
#define TRIDENT_MODELS_TOKENIZER_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef enum { TRI_TOKENIZER_BYTE = 0, TRI_TOKENIZER_GPT2 = 1 } tri_tokenizer_kind;

#define TRI_BYTE_VOCAB_SIZE 257
#define TRI_BYTE_EOD 256
#define TRI_EOD_TEXT "<|endoftext|>"

typedef struct tri_tokenizer tri_tokenizer;

/* A growable array of token ids (zero-initialise, append with the tokenizer, free when done). */
typedef struct tri_token_buf {
    int32_t *ids;
    size_t len, cap;
} tri_token_buf;

/* A growable byte string (not NUL-terminated; zero-initialise, free when done). */
typedef struct tri_byte_buf {
    char *data;
    size_t len, cap;
} tri_byte_buf;

/* Appends one id. Returns TRI_OK or TRI_ENOMEM. */
int tri_token_buf_push(tri_token_buf *buf, int32_t id);
/* Frees the ids and zeroes the buffer (NULL-safe). */
void tri_token_buf_free(tri_token_buf *buf);
/* Frees the bytes and zeroes the buffer (NULL-safe). */
void tri_byte_buf_free(tri_byte_buf *buf);

/* Creates the byte-level tokenizer (vocab 257, EOD 256) into *out.
 * Returns TRI_OK or TRI_ENOMEM. */
int tri_tokenizer_create_byte(tri_tokenizer **out);

/* Creates GPT-2's BPE tokenizer into *out from vocab_file (encoder.json: a JSON object mapping
 * each token, written in GPT-2's byte-to-unicode alphabet, to its id 0..V-1) and merge_file
 * (vocab.bpe: a "#version" line, then one merge "A B" per line, highest priority first).
 * Both files are validated: every id used exactly once, every byte and `<|endoftext|>` present,
 * every merge's parts and result in the vocabulary.
 * Returns TRI_OK, TRI_EIO (unreadable file), TRI_ECORRUPT (malformed file; the message names the
 * file, the line or key, and the value), TRI_EINTERNAL (regex compilation) or TRI_ENOMEM. */
int tri_tokenizer_create_gpt2(tri_tokenizer **out, const char *vocab_file, const char *merge_file);

/* Frees a tokenizer (NULL-safe). */
void tri_tokenizer_destroy(tri_tokenizer *tok);

/* Encodes len bytes of text (UTF-8 expected; NULs allowed) and appends the ids to out.
 * GPT-2 kind: bytes that are not valid UTF-8 are encoded byte by byte as their own pre-tokens,
 * so decoding still returns them exactly (GPT-2's Python encoder cannot take such input).
 * Returns TRI_OK, TRI_ENOMEM, or TRI_EINTERNAL (regex match failure); on error out keeps the ids
 * appended so far. */
int tri_tokenizer_encode(tri_tokenizer *tok, const char *text, size_t len, tri_token_buf *out);

/* Decodes n ids and appends their bytes to out. decode(encode(x)) == x for every x.
 * Returns TRI_OK, TRI_EINVAL (an id outside [0, vocab size): the message gives its position and
 * value) or TRI_ENOMEM. */
int tri_tokenizer_decode(const tri_tokenizer *tok, const int32_t *ids, size_t n, tri_byte_buf *out);

/* The bytes of one id, for streaming output: *bytes points into the tokenizer (valid until it is
 * destroyed; not NUL-terminated), *len is their count. A GPT-2 token may hold part of a UTF-8
 * character, so print tokens' bytes consecutively rather than each as text.
 * Returns TRI_OK or TRI_EINVAL (id outside the vocabulary). */
int tri_tokenizer_decode_one(const tri_tokenizer *tok, int32_t id, const char **bytes, size_t *len);

/* Number of ids (257 byte-level, 50257 GPT-2). */
int tri_tokenizer_vocab_size(const tri_tokenizer *tok);

/* The end-of-document id (256 byte-level, 50256 GPT-2). */
int tri_tokenizer_eod(const tri_tokenizer *tok);

tri_tokenizer_kind tri_tokenizer_kind_of(const tri_tokenizer *tok);

/* "ByteLevel" or "GPT2BPETokenizer" (the names tools/tokenize accepts). */
const char *tri_tokenizer_name(const tri_tokenizer *tok);

#ifdef __cplusplus
}
#endif

#endif
