/* tests/test_compression_bytes.c - the compressors' wire formats and bytes on the wire
 * (engine/train/grad_compression.h) against counts made by hand here, and the options' checks.
 *
 * Formats (the bit streams travel as whole 32-bit words): 1bit n sign bits + one fp32 scale per
 * block; qsgd ceil(log2(s + 1)) + 1 bits an element + one fp32 norm per block; topk ceil(f n)
 * (uint32, fp32) pairs; powersgd P and Q, 4 r (rows + cols) bytes, vectors 4 n. Wire (ring
 * algorithms, D ranks): all-reduce 2 (D-1)/D S, reduce-scatter (D-1)/D S, all-gather (D-1) payloads;
 * two-phase 2 (D-1) payloads of one chunk (whole blocks, ceil(blocks / D) of them; ZeRO 1: D-1 and
 * one to each rank whose slice the chunk overlaps). The comm layer's counted wire bytes are held
 * against these in the compression engine's own tests (test_grad_compression.c; two-phase:
 * test_two_phase.c at D = 2..5, and here below on thread ranks). */
#include <criterion/criterion.h>
#include <math.h>
#include <string.h>

#include "engine/core/status.h"
#include "engine/device/arena.h"
#include "engine/device/device.h"
#include "engine/train/dp_compress.h"
#include "engine/train/grad_compression.h"
#include "tests/harness.h"

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
    /* only where the factors hold less than half the matrix (PyTorch's min_compression_rate 2): GPT-2's
     * stacked q, k, v bias (3 x 768) has fewer rows than the rank and goes whole; 16 x 16 at rank 4
     * (factors 128 of 256 elements) is the first size that does not compress, 17 x 17 (136 of 289) does */
    cr_assert_eq(tri_compression_payload_bytes(&c, 3, 768), 4 * 3 * 768, "a 3 x 768 bias goes uncompressed");
    cr_assert_not(tri_powersgd_compresses(&c, 3, 768));
    cr_assert_eq(tri_compression_payload_bytes(&c, 16, 16), 4 * 256);
    cr_assert_eq(tri_compression_payload_bytes(&c, 17, 17), 4 * 4 * 34);
    cr_assert(tri_powersgd_compresses(&c, 17, 17) && !tri_powersgd_compresses(&c, 16, 16));
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

Test(compression_bytes, two_phase_by_hand_and_constant_in_dp)
{
    tri_compression one = with(TRI_COMPRESS_1BIT), q = with(TRI_COMPRESS_QSGD), topk = with(TRI_COMPRESS_TOPK);
    one.reduce = q.reduce = topk.reduce = TRI_COMPRESS_REDUCE_TWO_PHASE;
    /* 1000 elements, block 256: 4 blocks; D 4: one block a chunk (the last of 232 elements), each
     * chunk payload one scale + 8 words of signs = 36 bytes, sent twice by 3 of 4 */
    cr_assert_eq(tri_compression_chunk(&one, 1000, 4), 256);
    cr_assert_eq(tri_compression_sent_bytes(&one, 1, 1000, 4, 0, true), 2 * 3 * 36);
    /* ZeRO 1: each rank decodes only its slice (250 from 250 k), so chunk j (256 from 256 j) goes
     * to rank j + 1 alone, whose slice it overlaps, and the last chunk to nobody; the busiest rank
     * sends phase 1's 3 payloads and one */
    for (int j = 0; j < 4; j++)
        for (int k = 0; k < 4; k++) {
            cr_expect_eq(tri_compression_chunk_read_by(&one, 1000, 4, 1, j, k), k == j + 1, "ZeRO 1 chunk %d rank %d",
                         j, k);
            cr_expect_eq(tri_compression_chunk_read_by(&one, 1000, 4, 0, j, k), k != j, "ZeRO 0 chunk %d rank %d", j,
                         k);
        }
    cr_assert_eq(tri_compression_sent_bytes(&one, 1, 1000, 4, 1, true), (3 + 1) * 36);
    cr_assert_eq(tri_compression_second_bytes(&one, 1, 1000, 4, 1, true), 36);
    /* top-k's single-element chunks of 250 are the slices: at ZeRO 1 phase 2 sends nothing */
    cr_assert_eq(tri_compression_sent_bytes(&topk, 1, 1000, 4, 1, true),
                 3 * tri_compression_payload_bytes(&topk, 1, 250));
    cr_assert_eq(tri_compression_second_bytes(&topk, 1, 1000, 4, 1, true), 0);
    /* D 3: two blocks a chunk: 512, 488 and an empty third; a chunk payload 2 scales + 16 words */
    cr_assert_eq(tri_compression_chunk(&one, 1000, 3), 512);
    cr_assert_eq(tri_compression_sent_bytes(&one, 1, 1000, 3, 0, true), 2 * 2 * (2 * 4 + 16 * 4));
    cr_assert_eq(tri_compression_sent_bytes(&one, 1, 1000, 1, 0, true), 0);
    /* topk: single-element chunks of ceil(n / D), ceil(f chunk) pairs */
    cr_assert_eq(tri_compression_chunk(&topk, 1000, 3), 334);
    cr_assert_eq(tri_compression_sent_bytes(&topk, 1, 1000, 3, 0, true), 2 * 2 * 8 * 4);
    /* qsgd 4 bits: 2^20 elements at D 8: 512 blocks a chunk, 131072 elements: 512 norms + 16384 words */
    cr_assert_eq(tri_compression_sent_bytes(&q, 1, 1 << 20, 8, 0, true), 2 * 7 * 4 * (512 + 16384));
    /* constant in D: sent x D / (D - 1) stays 2 payloads of the whole bucket (up to a block per
     * chunk), while the all-gather's grows as D - 1 payloads */
    int64_t n = 1 << 22;
    double two = 2.0 * (double)tri_compression_payload_bytes(&one, 1, n);
    for (int D = 2; D <= 64; D *= 2) {
        double sent = (double)tri_compression_sent_bytes(&one, 1, n, D, 0, true);
        cr_expect(fabs(sent * D / (D - 1) - two) <= 2.0 * D * 36, "D %d: %g vs %g", D, sent * D / (D - 1), two);
        tri_compression ag = one;
        ag.reduce = TRI_COMPRESS_REDUCE_ALLGATHER;
        cr_expect_eq(tri_compression_sent_bytes(&ag, 1, n, D, 0, true), (D - 1) * (int64_t)(two / 2));
    }
}

/* ---- the comm layer's counted bytes of the engine's two-phase reduction, D = 2..5 ----
 * One unit of 1000 elements at ZeRO 0, blocks of 96 (11, the last of 40): chunks of 576 + 424
 * (D 2), 384 + 384 + 232 (D 3), 3 x 288 + 136 (D 4), 3 x 288 + 136 + an empty one (D 5); top-k's
 * single-element chunks are uneven at D 3. */
typedef struct bytes_job {
    tri_compression c;
    int stage;           /* ZeRO stage */
    int64_t rows;        /* 0: a vector of 1000; else a rows x (1000 / rows) matrix */
    uint64_t wire[5];    /* counted over the whole reduction */
    uint64_t second[5];  /* of which after the first exchange (tri_dp_compress_advance on) */
    float out[5][1000];  /* each rank's reduced unit (ZeRO 1: its slice) */
} bytes_job;

static int bytes_rank(int rank, int size, tri_comm *comm, void *arg)
{
    bytes_job *j = arg;
    enum { LEN = 1000 };
    tri_param p = {.numel = LEN};
    snprintf(p.spec.name, sizeof p.spec.name, "w");
    p.spec.ndim = j->rows > 0 ? 2 : 1;
    p.spec.shape[0] = p.local_shape[0] = j->rows > 0 ? j->rows : LEN;
    p.spec.shape[1] = p.local_shape[1] = j->rows > 0 ? LEN / j->rows : 0;
    tri_param_unit u = {.first = 0, .count = 1, .start = 0, .len = LEN};
    tri_param_layout L = {.n = 1, .params = &p, .n_units = 1, .units = &u, .numel = LEN, .padded_numel = LEN,
                          .dp = size, .dp_rank = rank, .shard_numel = LEN / size};
    tri_device *d = NULL;
    tri_dp_compress x;
    memset(&x, 0, sizeof x);
    tri_arena a;
    tri_arena_plan(&a);
    float g[LEN];
    for (int i = 0; i < LEN; i++)
        g[i] = (float)((i * 7 + rank * 3) % 11) - 5.0f;
    int rc = tri_device_cpu_create(&d, 1);
    if (!rc) rc = tri_dp_compress_take(&x, &a, &L, &j->c, j->stage, false);
    if (!rc) rc = tri_arena_commit(&a, d);
    if (!rc) rc = tri_dp_compress_take(&x, &a, &L, &j->c, j->stage, false);
    uint64_t before = tri_comm_wire_bytes(comm, TRI_COMM_KINDS), first = before;
    tri_tensor t = tri_tensor_1d(g, TRI_F32, LEN);
    if (!rc) rc = tri_dp_compress_start(&x, d, comm, t, 0, 0, false);
    first = tri_comm_wire_bytes(comm, TRI_COMM_KINDS);
    if (!rc) rc = tri_dp_compress_advance(&x, d, comm, 0, false);
    if (!rc) rc = tri_dp_compress_finish(&x, d, comm, t, 0);
    j->wire[rank] = tri_comm_wire_bytes(comm, TRI_COMM_KINDS) - before;
    j->second[rank] = tri_comm_wire_bytes(comm, TRI_COMM_KINDS) - first;
    memcpy(j->out[rank], g, sizeof g);
    tri_arena_release(&a);
    tri_dp_compress_free(&x);
    tri_device_destroy(d);
    return rc;
}

Test(compression_bytes, two_phase_counted_equals_formula)
{
    for (int kind = TRI_COMPRESS_1BIT; kind <= TRI_COMPRESS_TOPK; kind++)
        for (int D = 2; D <= 5; D++) {
            bytes_job j = {.c = with((tri_compression_kind)kind)};
            j.c.reduce = TRI_COMPRESS_REDUCE_TWO_PHASE;
            j.c.block_size = 96;
            j.c.topk_fraction = 0.05f;
            cr_assert_eq(tri_run_thread_ranks(D, bytes_rank, &j), TRI_OK, "%s", tri_error_message());
            uint64_t want = (uint64_t)tri_compression_sent_bytes(&j.c, 1, 1000, D, 0, true);
            uint64_t second = (uint64_t)tri_compression_second_bytes(&j.c, 1, 1000, D, 0, true);
            for (int r = 0; r < D; r++) {
                cr_expect_eq(j.wire[r], want, "%s D %d rank %d: counted %llu, formula %llu",
                             tri_compression_name((tri_compression_kind)kind), D, r, (unsigned long long)j.wire[r],
                             (unsigned long long)want);
                cr_expect_eq(j.second[r], second, "%s D %d rank %d: phase 2 counted %llu, formula %llu",
                             tri_compression_name((tri_compression_kind)kind), D, r, (unsigned long long)j.second[r],
                             (unsigned long long)second);
            }
        }
}

/* At ZeRO 1 (D 2, 4, 5, which divide the 1000 elements into slices) phase 2 sends each chunk to the
 * ranks whose slice it overlaps, by hand: blocks of 96, slices of 1000 / D.
 *   D 2: chunks 576 + 424, slices of 500: chunk 0 to rank 1; chunk 1 lies in slice 1.
 *   D 4: chunks of 288 from 0, 288, 576, 864; slices from 0, 250, 500, 750: chunk j to rank j + 1,
 *        the last to nobody.
 *   D 5: the same chunks and an empty fifth; slices from 0, 200, ..., 800: chunk 0 to 1, chunk 1
 *        (288-576) to 2, chunk 2 (576-864) to 3 and 4, chunk 3 (864-1000) to 4.
 * Top-k's chunks are the slices (500, 250, 200 elements): no phase 2. The formula is the busiest
 * rank's; each rank's slice has ZeRO 0's bits. */
Test(compression_bytes, two_phase_zero1_counted_by_hand)
{
    static const int D_of[3] = {2, 4, 5}, readers[3][5] = {{1, 0}, {1, 1, 1, 0}, {1, 1, 2, 1, 0}};
    for (int kind = TRI_COMPRESS_1BIT; kind <= TRI_COMPRESS_TOPK; kind++)
        for (int i = 0; i < 3; i++) {
            int D = D_of[i], busiest = 0;
            static bytes_job j, j0;
            j = (bytes_job){.c = with((tri_compression_kind)kind), .stage = 1};
            j.c.reduce = TRI_COMPRESS_REDUCE_TWO_PHASE;
            j.c.block_size = 96;
            j.c.topk_fraction = 0.05f;
            j0 = j;
            j0.stage = 0;
            cr_assert_eq(tri_run_thread_ranks(D, bytes_rank, &j), TRI_OK, "%s", tri_error_message());
            cr_assert_eq(tri_run_thread_ranks(D, bytes_rank, &j0), TRI_OK, "%s", tri_error_message());
            for (int r = 0; r < D; r++) { /* each rank's slice decoded from the chunks it received: ZeRO 0's bits */
                int64_t at = (int64_t)r * (1000 / D);
                cr_expect_eq(memcmp(&j.out[r][at], &j0.out[r][at], sizeof(float) * (1000 / D)), 0,
                             "%s D %d rank %d: the ZeRO 1 slice differs from ZeRO 0's",
                             tri_compression_name((tri_compression_kind)kind), D, r);
            }
            uint64_t chunk = (uint64_t)tri_compression_payload_bytes(&j.c, 1, tri_compression_chunk(&j.c, 1000, D));
            for (int r = 0; r < D; r++) {
                int R = kind == TRI_COMPRESS_TOPK ? 0 : readers[i][r];
                busiest = R > busiest ? R : busiest;
                cr_expect_eq(j.wire[r], (uint64_t)(D - 1 + R) * chunk, "%s D %d rank %d: counted %llu, by hand %llu",
                             tri_compression_name((tri_compression_kind)kind), D, r, (unsigned long long)j.wire[r],
                             (unsigned long long)((D - 1 + R) * chunk));
                cr_expect_eq(j.second[r], (uint64_t)R * chunk, "%s D %d rank %d: phase 2 counted %llu",
                             tri_compression_name((tri_compression_kind)kind), D, r, (unsigned long long)j.second[r]);
            }
            cr_expect_eq(tri_compression_sent_bytes(&j.c, 1, 1000, D, 1, true), (int64_t)((D - 1 + busiest) * chunk));
            cr_expect_eq(tri_compression_second_bytes(&j.c, 1, 1000, D, 1, true), (int64_t)(busiest * chunk));
        }
}

/* The exchanges' split that the partitioner's overlap simulation takes (tri_compression_second_bytes)
 * is what the engine sends after the first: PowerSGD's Q of a 40 x 25 matrix (rank 2) and nothing
 * for its vectors; the all-gathered 1bit payloads in one exchange. D 2 and 4: the all-reduces' ring
 * volumes are whole bytes. */
Test(compression_bytes, second_exchange_counted_equals_formula)
{
    for (int D = 2; D <= 4; D += 2) {
        bytes_job j = {.c = with(TRI_COMPRESS_POWERSGD), .rows = 40};
        j.c.powersgd_rank = 2;
        j.c.powersgd_start_iter = 0;
        cr_assert_eq(tri_run_thread_ranks(D, bytes_rank, &j), TRI_OK, "%s", tri_error_message());
        uint64_t second = (uint64_t)tri_compression_second_bytes(&j.c, 40, 25, D, 0, true);
        cr_expect_eq(second, (uint64_t)(2 * (D - 1) * 4 * 2 * 25 / D));
        for (int r = 0; r < D; r++) {
            cr_expect_eq(j.wire[r], (uint64_t)tri_compression_sent_bytes(&j.c, 40, 25, D, 0, true), "D %d", D);
            cr_expect_eq(j.second[r], second, "PowerSGD D %d rank %d: Q counted %llu, formula %llu", D, r,
                         (unsigned long long)j.second[r], (unsigned long long)second);
        }
        bytes_job v = {.c = with(TRI_COMPRESS_1BIT)};
        cr_assert_eq(tri_run_thread_ranks(D, bytes_rank, &v), TRI_OK, "%s", tri_error_message());
        cr_expect_eq(tri_compression_second_bytes(&v.c, 1, 1000, D, 0, true), 0);
        for (int r = 0; r < D; r++)
            cr_expect_eq(v.second[r], 0, "1bit D %d rank %d: %llu after the all-gather", D, r,
                         (unsigned long long)v.second[r]);
    }
    tri_compression c = with(TRI_COMPRESS_POWERSGD);
    cr_expect_eq(tri_compression_second_bytes(&c, 1, 1000, 4, 0, true), 0);   /* a vector */
    cr_expect_eq(tri_compression_second_bytes(&c, 40, 25, 4, 0, false), 0);  /* the plain iterations */
    cr_expect_eq(tri_compression_second_bytes(&c, 40, 25, 1, 0, true), 0);
}
