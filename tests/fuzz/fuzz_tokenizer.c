/* tests/fuzz/fuzz_tokenizer.c - libFuzzer harness: GPT-2 BPE encoding of arbitrary bytes
 * (models/tokenizer_gpt2.c), and the byte-level tokenizer.
 *
 * The GPT-2 files come from TRIDENT_FUZZ_BPE_DIR (encoder.json, vocab.bpe; default data/gpt2).
 * Every input must encode; every id must be in the vocabulary; and decoding must give the input
 * back byte for byte (GPT-2's byte-level BPE is lossless). */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine/core/status.h"
#include "models/tokenizer.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static tri_tokenizer *gpt2, *byte_tok;

static void setup(void)
{
    const char *dir = getenv("TRIDENT_FUZZ_BPE_DIR");
    char vocab[4096], merges[4096];
    snprintf(vocab, sizeof vocab, "%s/encoder.json", dir ? dir : "data/gpt2");
    snprintf(merges, sizeof merges, "%s/vocab.bpe", dir ? dir : "data/gpt2");
    if (tri_tokenizer_create_gpt2(&gpt2, vocab, merges) != 0 || tri_tokenizer_create_byte(&byte_tok) != 0) {
        fprintf(stderr, "fuzz_tokenizer: %s (set TRIDENT_FUZZ_BPE_DIR)\n", tri_error_message());
        exit(2);
    }
}

static void roundtrip(tri_tokenizer *tok, const uint8_t *data, size_t size)
{
    tri_token_buf ids = {0};
    tri_byte_buf back = {0};
    if (tri_tokenizer_encode(tok, (const char *)data, size, &ids) != 0)
        abort();
    for (size_t i = 0; i < ids.len; i++)
        if (ids.ids[i] < 0 || ids.ids[i] >= tri_tokenizer_vocab_size(tok))
            abort();
    if (tri_tokenizer_decode(tok, ids.ids, ids.len, &back) != 0 || back.len != size ||
        (size && memcmp(back.data, data, size) != 0))
        abort();
    tri_token_buf_free(&ids);
    tri_byte_buf_free(&back);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (!gpt2)
        setup();
    roundtrip(gpt2, data, size);
    roundtrip(byte_tok, data, size);
    return 0;
}
