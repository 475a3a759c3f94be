/* engine/train/grad_compression.h - compressed data-parallel gradient reduction: the options, their
 * wire formats and the bytes each one sends, stated once for the engine (which sends them) and the
 * partitioner (which models them).
 *
 * When the network between data-parallel replicas is the limit, each rank sends a compressed form of
 * its gradient and keeps what the compression dropped as an error-feedback residual that is added to
 * the next step's gradient before compressing (Seide et al. 2014; Karimireddy et al. 2019, EF-SGD):
 *   e_t = g_t + r_{t-1};  c_t = C(e_t);  r_t = e_t - D(c_t);  the replicas average D(c_t).
 * Compressors (per dp-reduction bucket of n elements = one ZeRO unit's gradient):
 *   1bit      Seide et al. 2014: the sign of every element (1 bit, packed LSB first, 1 = negative)
 *             and one fp32 scale per block of `block_size` elements, the block's mean |e|.
 *             The payload travels as 32-bit words (an i32 tensor: the comms carry no bytes), so
 *             the bit stream of 1bit and qsgd is rounded up to whole words; the exact layout is
 *             engine/device/ops/compress_math.h's.
 *   qsgd      Alistarh et al. 2017: per block, the fp32 norm ||e_b||_2 and, per element, its sign
 *             and a level l in 0..s (s = `qsgd_levels`) rounded stochastically so that
 *             E[l / s * ||e_b||] = |e_i|; sign + level packed in ceil(log2(s + 1)) + 1 bits;
 *             decoded scaled by 1 / (1 + w), w the quantizer's variance bound, the contraction that
 *             error feedback needs (Karimireddy et al. 2019; compress_math.h tri_qsgd_shrink). The
 *             rounding uses a counter-based RNG seeded by (seed, iteration, dp rank, element), so a
 *             run repeats bit for bit.
 *   topk      Aji & Heafield 2017 / Stich et al. 2018: the ceil(fraction * n) largest |e_i| of the
 *             bucket as (uint32 index, fp32 value) pairs.
 *   powersgd  Vogels et al. 2019, rank r: each matrix gradient M (rows x cols, a parameter with two
 *             or more dimensions seen as rows = all but the last) becomes P = M Q (rows x r),
 *             all-reduced, orthogonalised (Gram-Schmidt), Q = M^T P (cols x r), all-reduced; the
 *             approximation is P Q^T. Q is warm-started from the previous step. Vectors (biases,
 *             norm weights) are all-reduced uncompressed, and every gradient is reduced
 *             uncompressed for the first `powersgd_start_iter` iterations (PyTorch's
 *             powerSGD_hook, start_powerSGD_iter), error feedback starting after them.
 * Every compressor reduces uncompressed (the plain fp32 reduction, the bits of a run without
 * compression, no residual) for the iterations before tri_compression_start_iter: `start_iter`
 * (--grad-compression-start-iter, default 0), PowerSGD's spelled `powersgd_start_iter`. This is
 * 1-bit Adam's warm-up stage (Tang et al. 2021 §3): with --adam-freeze-step at the same iteration,
 * Adam's variance is frozen when compression starts, so the update is linear in the gradient and
 * error feedback compensates the compressor.
 * Collectives over the data-parallel group of D ranks: 1bit, qsgd and topk all-gather every
 * rank's payload and each rank decodes the D payloads and adds them in rank order (so every rank
 * holds the same sum, and the result does not depend on the comm's reduction order); powersgd
 * all-reduces P and Q (and the vectors). The payloads replace the fp32 reduction's bytes on the
 * wire. The all-gather's bytes grow with D ((D-1) payloads per rank); `reduce` two-phase (1bit,
 * qsgd, topk) keeps them constant in D: the compressed allreduce of 1-bit Adam (Tang et al. 2021
 * §4; DeepSpeed's NcclBackend.compressed_allreduce). The unit is cut into D chunks of whole blocks
 * (tri_compression_chunk); phase 1 sends chunk j's payload to dp rank j (a reduce-scatter of
 * payloads), rank j decodes the D payloads of its chunk in rank order, adds its server residual and
 * re-compresses the sum (server error feedback); phase 2 all-gathers the D re-compressed chunks,
 * which every rank decodes: the same bits everywhere, 2 (D-1) chunk payloads sent per rank.
 *
 * Which ZeRO stages: 0 and 1. The error-feedback residual is a whole gradient per rank, the memory
 * ZeRO 2 exists to remove, and ZeRO 2-3 reduce each bucket as the backward pass completes it; with
 * compression those stages are refused (tri_compression_check). At ZeRO 1 a rank decodes only its
 * owned slice of the sum. Compression applies to the dp group only; tp and pp traffic is unchanged.
 * The reduction itself is engine/train/dp_compress.h's; with --overlap-grad-reduce each unit's
 * starts as the backward pass completes the unit (its first exchange non-blocking, the second once
 * the next unit is done), else at the end of the backward pass. */
#ifndef TRIDENT_ENGINE_TRAIN_GRAD_COMPRESSION_H
#define TRIDENT_ENGINE_TRAIN_GRAD_COMPRESSION_H

#include <stdbool.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef enum {
    TRI_COMPRESS_NONE = 0,
    TRI_COMPRESS_1BIT,
    TRI_COMPRESS_QSGD,
    TRI_COMPRESS_TOPK,
    TRI_COMPRESS_POWERSGD,
    TRI_COMPRESS_KINDS
} tri_compression_kind;

/* The defaults of engine_train's flags (--compression-block-size, --qsgd-levels, --topk-fraction,
 * --powersgd-rank, --powersgd-start-iter). */
#define TRI_COMPRESS_DEFAULT_BLOCK 256
#define TRI_COMPRESS_DEFAULT_QSGD_LEVELS 7
#define TRI_COMPRESS_DEFAULT_TOPK_FRACTION 0.01f
#define TRI_COMPRESS_DEFAULT_POWERSGD_RANK 4
#define TRI_COMPRESS_DEFAULT_POWERSGD_START 10

/* How the 1bit, qsgd and topk payloads are reduced (--grad-compression-reduce): all-gather every
 * rank's payload (the default), or the two-phase compressed allreduce (above). */
typedef enum {
    TRI_COMPRESS_REDUCE_ALLGATHER = 0,
    TRI_COMPRESS_REDUCE_TWO_PHASE,
    TRI_COMPRESS_REDUCES
} tri_compression_reduce;

typedef struct tri_compression {
    tri_compression_kind kind;
    tri_compression_reduce reduce; /* 1bit, qsgd, topk: allgather or two-phase */
    int block_size;              /* 1bit, qsgd: elements per scale (> 0) */
    int qsgd_levels;             /* qsgd: s >= 1 */
    float topk_fraction;         /* topk: in (0, 1] */
    int powersgd_rank;           /* powersgd: r >= 1 */
    int64_t powersgd_start_iter; /* powersgd: uncompressed iterations first (>= 0) */
    int64_t start_iter;          /* 1bit, qsgd, topk: uncompressed iterations first (>= 0); powersgd
                                    reads powersgd_start_iter (tri_compression_start_iter) */
    uint64_t seed;               /* qsgd's stochastic rounding (the run's seed) */
} tri_compression;

/* The default of every field, kind none. */
tri_compression tri_compression_defaults(void);

/* The first compressed iteration (0-based; iterations before it reduce uncompressed):
 * powersgd_start_iter for powersgd, start_iter for the others. */
int64_t tri_compression_start_iter(const tri_compression *c);

/* "none", "1bit", "qsgd", "topk", "powersgd"; parse returns -1 for another name. */
const char *tri_compression_name(tri_compression_kind k);
int tri_compression_parse(const char *name);
/* "allgather", "two-phase"; parse returns -1 for another name. */
const char *tri_compression_reduce_name(tri_compression_reduce r);
int tri_compression_reduce_parse(const char *name);

/* TRI_EINVAL with a message naming the flag and value for a field out of range, or for a
 * compressor with a ZeRO stage it cannot take (saying why). dp 1 is not an error here (engine_train
 * warns and runs uncompressed). */
int tri_compression_check(const tri_compression *c, int zero_stage);

/* Whether PowerSGD replaces a rows x cols gradient by its rank-r factors: only when they hold less
 * than half its elements, 2 r (rows + cols) < rows cols (PyTorch's powerSGD_hook, _should_compress
 * with its default min_compression_rate 2). So a vector (rows 1) and a matrix with fewer rows or
 * columns than r (GPT-2's stacked q, k, v bias, 3 x C) are reduced whole, and a compressed matrix
 * has r <= min(rows, cols): r orthonormal columns of P exist. */
bool tri_powersgd_compresses(const tri_compression *c, int64_t rows, int64_t cols);

/* Bytes of one rank's payload for a bucket of n elements (1bit, qsgd, topk), or for one matrix
 * gradient of rows x cols (powersgd: P and Q, fp32, counted together, where tri_powersgd_compresses;
 * otherwise, a vector (rows == 1) among them, its 4 * rows * cols bytes). kind none: 4 * n (fp32). */
int64_t tri_compression_payload_bytes(const tri_compression *c, int64_t rows, int64_t cols);

/* Two-phase: the elements of each of the D chunks of a unit of n elements, whole blocks of
 * block_size (1bit, qsgd; topk: single elements): chunk j is [j * chunk, min(n, (j + 1) * chunk)),
 * so the last chunk may be shorter and, for n < D blocks, the last ones empty. n when D is 1. */
int64_t tri_compression_chunk(const tri_compression *c, int64_t n, int dp);

/* Two-phase, phase 2: whether dp rank k (not j) decodes chunk j of a unit of n elements, so
 * whether server j sends k its re-compressed sum. ZeRO 0: every other rank does (an all-gather).
 * ZeRO 1: the ranks whose owned slice of the unit (n / D elements from k n / D, engine/train/zero.c)
 * overlaps the chunk, the only ones that read it; chunks are whole blocks, a little longer than the
 * slices, so usually rank j + 1 alone (none for the last chunk; more where a block is long against
 * n / D). False for k == j, an empty chunk or D 1. */
bool tri_compression_chunk_read_by(const tri_compression *c, int64_t n, int dp, int zero_stage, int j, int k);

/* Bytes one rank sends on the wire to reduce that bucket over D data-parallel ranks, with the
 * ring algorithms' volumes (NCCL's and Open MPI's for large buffers):
 *   none      all-reduce 2 (D-1)/D * 4n (ZeRO 0); reduce-scatter (D-1)/D * 4n (ZeRO 1-3)
 *   1bit, qsgd, topk   all-gather (D-1) * payload
 *             two-phase: (D-1 + R) * payload(chunk): phase 1 sends D-1 chunk payloads, phase 2
 *             the rank's re-compressed chunk to its R readers (tri_compression_chunk_read_by;
 *             every chunk travels at the longest chunk's payload size). ZeRO 0: R = D-1, 2 (D-1)
 *             payloads, about 2 (D-1)/D * payload(n), constant in D; ZeRO 1: R is rank j's count,
 *             and this formula takes the busiest rank's (the largest R; usually 1): about
 *             payload(n) (D-1+1)/D, half ZeRO 0's at large D.
 *   powersgd  all-reduce of P and Q: 2 (D-1)/D * payload (vectors: 2 (D-1)/D * 4n)
 * `compressed` false gives the uncompressed reduction (powersgd's first iterations). 0 when D is 1. */
int64_t tri_compression_sent_bytes(const tri_compression *c, int64_t rows, int64_t cols, int dp,
                                   int zero_stage, bool compressed);
/* Of those bytes, the reduction's second exchange's, which starts once the first is complete
 * (engine/train/dp_compress.h tri_dp_compress_advance; with --overlap-grad-reduce when the next
 * unit's gradient is): two-phase's phase 2, R * payload(chunk) (above: R = D-1 at ZeRO 0, the
 * busiest rank's readers at ZeRO 1); PowerSGD's Q all-reduce, 2 (D-1)/D * 4 r cols of a
 * compressed matrix. 0 for the one-exchange reductions (none, the all-gathered payloads, the
 * uncompressed iterations), a vector, or D 1. */
int64_t tri_compression_second_bytes(const tri_compression *c, int64_t rows, int64_t cols, int dp, int zero_stage,
                                     bool compressed);

#ifdef __cplusplus
}
#endif

#endif
