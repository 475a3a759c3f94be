/* tests/test_compression_bytes.c - the compressors' wire formats and bytes on the wire
 * (engine/train/grad_compression.h) against counts made by hand here, and the options' checks.
 *
 * Formats (the bit streams travel as whole 32-bit words): 1bit n sign bits + one fp32 scale per
 * block; qsgd ceil(log2(s + 1)) + 1 bits an element + one fp32 norm per block; topk ceil(f n) (uint32, fp32) pairs; powersgd P and Q, 4 r (rows +
 * cols) bytes, vectors 4 n. Wire (ring algorithms, D ranks): all-reduce 2 (D-1)/D S, reduce-scatter
 * (D-1)/D S, all-gather (D-1) payloads. How the engine's comm layer counts what it really sent is
 * held against these in the compression engine's own tests. */
#include <criterion/criterion.h>
#include <string.h>

#include "engine/core/status.h"
#include "engine/train/grad_compression.h"

static tri_compression with(tri_compression_kind k)
{
    tri_compression c = tri_compression_defaults();
    c.kind = k;
    return c;
}

Test(compression_bytes, payloads_by_hand)
{
    tri_compression c = with(TRI_COMPRESS_1BIT); /* block 256 */
    cr_assert_eq(tri_compression_payload_bytes(&c, 1, 1000), 4 * 32 + 4 * 4, "1000 bits in 32 words");
    cr_assert_eq(tri_compression_payload_bytes(&c, 1, 1025), 4 * 33 + 5 * 4);
    cr_assert_eq(tri_compression_payload_bytes(&c, 1, 256), 32 + 4);
    c = with(TRI_COMPRESS_QSGD); /* 7 levels: 3 bits + sign */
    cr_assert_eq(tri_compression_payload_bytes(&c, 1, 1000), 500 + 16);
    c.qsgd_levels = 8; /* 9 values need 4 bits, + sign */
    cr_assert_eq(tri_compression_payload_bytes(&c, 1, 1000), 4 * 157 + 16, "5000 bits in 157 words");
    c.qsgd_levels = 1; /* 0 or 1, + sign */
    cr_assert_eq(tri_compression_payload_bytes(&c, 1, 1000), 4 * 63 + 16, "2000 bits in 63 words");
    c = with(TRI_COMPRESS_TOPK); /* 1% */
    cr_assert_eq(tri_compression_payload_bytes(&c, 1, 1000), 10 * 8);
    cr_assert_eq(tri_compression_payload_bytes(&c, 1, 1001), 11 * 8);
    c = with(TRI_COMPRESS_POWERSGD); /* rank 4 */
    cr_assert_eq(tri_compression_payload_bytes(&c, 768, 3072), 4 * 4 * (768 + 3072));
    cr_assert_eq(tri_compression_payload_bytes(&c, 1, 768), 4 * 768, "a vector goes uncompressed");
    c = with(TRI_COMPRESS_NONE);
    cr_assert_eq(tri_compression_payload_bytes(&c, 3, 5), 60);
}

Test(compression_bytes, wire_bytes_by_hand)
{
    tri_compression none = with(TRI_COMPRESS_NONE), one = with(TRI_COMPRESS_1BIT),
                    psgd = with(TRI_COMPRESS_POWERSGD), topk = with(TRI_COMPRESS_TOPK);
    cr_assert_eq(tri_compression_sent_bytes(&none, 1, 1000, 4, 0, true), 6000, "all-reduce 2 * 3/4 * 4000");
    cr_assert_eq(tri_compression_sent_bytes(&none, 1, 1000, 4, 1, true), 3000, "reduce-scatter 3/4 * 4000");
    cr_assert_eq(tri_compression_sent_bytes(&one, 1, 1000, 4, 0, true), 3 * 144, "all-gather of 3 payloads");
    cr_assert_eq(tri_compression_sent_bytes(&one, 1, 1000, 4, 0, false), 6000, "uncompressed");
    cr_assert_eq(tri_compression_sent_bytes(&topk, 1, 1000, 8, 1, true), 7 * 80);
    cr_assert_eq(tri_compression_sent_bytes(&psgd, 768, 3072, 4, 0, true), 2 * 3 * 61440 / 4);
    cr_assert_eq(tri_compression_sent_bytes(&psgd, 1, 768, 4, 0, true), 2 * 3 * 3072 / 4);
    cr_assert_eq(tri_compression_sent_bytes(&one, 1, 1000, 1, 0, true), 0, "one rank sends nothing");
    /* the cut 1-bit makes at dp 4 on a large bucket: 6 n / (3 (n/8 + n/64)) = 14.2x */
    int64_t n = 1 << 20;
    double cut = (double)tri_compression_sent_bytes(&none, 1, n, 4, 0, true) /
                 (double)tri_compression_sent_bytes(&one, 1, n, 4, 0, true);
    cr_assert(cut > 14.2 && cut < 14.3, "1bit cut %g", cut);
}

Test(compression_bytes, names_and_checks)
{
    for (int k = 0; k < TRI_COMPRESS_KINDS; k++)
        cr_assert_eq(tri_compression_parse(tri_compression_name((tri_compression_kind)k)), k);
    cr_assert_eq(tri_compression_parse("2bit"), -1);
    tri_compression c = with(TRI_COMPRESS_1BIT);
    cr_assert_eq(tri_compression_check(&c, 1), TRI_OK);
    cr_assert_eq(tri_compression_check(&c, 2), TRI_EINVAL);
    cr_assert(strstr(tri_error_message(), "--zero-stage 2"), "%s", tri_error_message());
    c.block_size = 0;
    cr_assert_eq(tri_compression_check(&c, 0), TRI_EINVAL);
    cr_assert(strstr(tri_error_message(), "--compression-block-size 0"), "%s", tri_error_message());
    c = with(TRI_COMPRESS_TOPK);
    c.topk_fraction = 0.0f;
    cr_assert_eq(tri_compression_check(&c, 0), TRI_EINVAL);
    c.topk_fraction = 1.5f;
    cr_assert_eq(tri_compression_check(&c, 0), TRI_EINVAL);
    c.topk_fraction = 1.0f;
    cr_assert_eq(tri_compression_check(&c, 0), TRI_OK);
    c = with(TRI_COMPRESS_POWERSGD);
    c.powersgd_rank = 0;
    cr_assert_eq(tri_compression_check(&c, 0), TRI_EINVAL);
    cr_assert(strstr(tri_error_message(), "--powersgd-rank 0"), "%s", tri_error_message());
    c = with(TRI_COMPRESS_QSGD);
    c.qsgd_levels = 0;
    cr_assert_eq(tri_compression_check(&c, 0), TRI_EINVAL);
    c = with(TRI_COMPRESS_NONE);
    cr_assert_eq(tri_compression_check(&c, 3), TRI_OK, "no compression takes every stage");
}
