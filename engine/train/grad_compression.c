/* engine/train/grad_compression.c - the compression options, their check and their bytes (see
 * grad_compression.h). */
#include "engine/train/grad_compression.h"

#include <math.h>
#include <string.h>

#include "engine/core/status.h"
#include "engine/device/ops/compress_math.h"

static const char *const names[TRI_COMPRESS_KINDS] = {"none", "1bit", "qsgd", "topk", "powersgd"};

static const char *const reduce_names[TRI_COMPRESS_REDUCES] = {"allgather", "two-phase"};

tri_compression tri_compression_defaults(void)
{
    return (tri_compression){
        .kind = TRI_COMPRESS_NONE,
        .reduce = TRI_COMPRESS_REDUCE_ALLGATHER,
        .block_size = TRI_COMPRESS_DEFAULT_BLOCK,
        .qsgd_levels = TRI_COMPRESS_DEFAULT_QSGD_LEVELS,
        .topk_fraction = TRI_COMPRESS_DEFAULT_TOPK_FRACTION,
        .powersgd_rank = TRI_COMPRESS_DEFAULT_POWERSGD_RANK,
        .powersgd_start_iter = TRI_COMPRESS_DEFAULT_POWERSGD_START,
        .start_iter = 0,
        .seed = 0,
    };
}

int64_t tri_compression_start_iter(const tri_compression *c)
{
    return c->kind == TRI_COMPRESS_POWERSGD ? c->powersgd_start_iter : c->start_iter;
}

const char *tri_compression_name(tri_compression_kind k)
{
    return k >= 0 && k < TRI_COMPRESS_KINDS ? names[k] : "?";
}

int tri_compression_parse(const char *name)
{
    for (int k = 0; k < TRI_COMPRESS_KINDS; k++)
        if (name && strcmp(name, names[k]) == 0)
            return k;
    return -1;
}

const char *tri_compression_reduce_name(tri_compression_reduce r)
{
    return r >= 0 && r < TRI_COMPRESS_REDUCES ? reduce_names[r] : "?";
}

int tri_compression_reduce_parse(const char *name)
{
    for (int r = 0; r < TRI_COMPRESS_REDUCES; r++)
        if (name && strcmp(name, reduce_names[r]) == 0)
            return r;
    return -1;
}

int tri_compression_check(const tri_compression *c, int zero_stage)
{
    if (c->kind < 0 || c->kind >= TRI_COMPRESS_KINDS)
        return TRI_ERR(TRI_EINVAL, "--grad-compression: unknown compressor %d (none|1bit|qsgd|topk|powersgd)",
                       (int)c->kind);
    if (c->reduce < 0 || c->reduce >= TRI_COMPRESS_REDUCES)
        return TRI_ERR(TRI_EINVAL, "--grad-compression-reduce: unknown reduction %d (allgather|two-phase)",
                       (int)c->reduce);
    if (c->reduce == TRI_COMPRESS_REDUCE_TWO_PHASE && c->kind == TRI_COMPRESS_POWERSGD)
        return TRI_ERR(TRI_EINVAL, "--grad-compression-reduce two-phase with --grad-compression powersgd: PowerSGD "
                       "all-reduces its P and Q, whose bytes are already constant in dp; two-phase is for 1bit, "
                       "qsgd and topk, whose all-gathered payloads grow with dp (use --grad-compression-reduce "
                       "allgather)");
    if (c->reduce == TRI_COMPRESS_REDUCE_TWO_PHASE && c->kind == TRI_COMPRESS_NONE)
        return TRI_ERR(TRI_EINVAL, "--grad-compression-reduce two-phase with --grad-compression none: two-phase "
                       "reduces compressed payloads; choose --grad-compression 1bit, qsgd or topk");
    if (c->kind == TRI_COMPRESS_NONE)
        return TRI_OK;
    if ((c->kind == TRI_COMPRESS_1BIT || c->kind == TRI_COMPRESS_QSGD) && c->block_size < 1)
        return TRI_ERR(TRI_EINVAL, "--compression-block-size %d: expected at least 1 element", c->block_size);
    if (c->kind == TRI_COMPRESS_QSGD && c->qsgd_levels < 1)
        return TRI_ERR(TRI_EINVAL, "--qsgd-levels %d: expected at least 1 level", c->qsgd_levels);
    if (c->kind == TRI_COMPRESS_TOPK && !(c->topk_fraction > 0.0f && c->topk_fraction <= 1.0f))
        return TRI_ERR(TRI_EINVAL, "--topk-fraction %g: expected a fraction in (0, 1]", (double)c->topk_fraction);
    if (c->kind == TRI_COMPRESS_POWERSGD && c->powersgd_rank < 1)
        return TRI_ERR(TRI_EINVAL, "--powersgd-rank %d: expected a rank of at least 1", c->powersgd_rank);
    if (c->kind == TRI_COMPRESS_POWERSGD && c->powersgd_start_iter < 0)
        return TRI_ERR(TRI_EINVAL, "--powersgd-start-iter %lld: expected 0 or more",
                       (long long)c->powersgd_start_iter);
    if (c->start_iter < 0)
        return TRI_ERR(TRI_EINVAL, "--grad-compression-start-iter %lld: expected 0 or more",
                       (long long)c->start_iter);
    if (zero_stage >= 2)
        return TRI_ERR(TRI_EINVAL, "--grad-compression %s with --zero-stage %d: compression needs a whole "
                       "gradient and its error-feedback residual on every rank, which ZeRO 2-3 do not keep "
                       "(use --zero-stage 0 or 1)", names[c->kind], zero_stage);
    return TRI_OK;
}

bool tri_powersgd_compresses(const tri_compression *c, int64_t rows, int64_t cols)
{
    return rows > 1 && cols > 1 && 2 * (int64_t)c->powersgd_rank * (rows + cols) < rows * cols;
}

int64_t tri_compression_payload_bytes(const tri_compression *c, int64_t rows, int64_t cols)
{
    int64_t n = rows * cols;
    switch (c->kind) {
    case TRI_COMPRESS_1BIT: /* the payload travels as 32-bit words (compress_math.h) */
        return c->block_size > 0 ? 4 * tri_compress_words(n, c->block_size, 0) : 0;
    case TRI_COMPRESS_QSGD:
        return c->block_size > 0 ? 4 * tri_compress_words(n, c->block_size, c->qsgd_levels) : 0;
    case TRI_COMPRESS_TOPK:
        return 8 * (int64_t)ceil((double)c->topk_fraction * (double)n);
    case TRI_COMPRESS_POWERSGD:
        return tri_powersgd_compresses(c, rows, cols) ? 4 * (int64_t)c->powersgd_rank * (rows + cols) : 4 * n;
    default:
        return 4 * n;
    }
}

int64_t tri_compression_chunk(const tri_compression *c, int64_t n, int dp)
{
    int64_t b = c->kind == TRI_COMPRESS_1BIT || c->kind == TRI_COMPRESS_QSGD ? c->block_size : 1;
    if (dp <= 1 || b < 1)
        return n;
    int64_t blocks = (n + b - 1) / b;
    return (blocks + dp - 1) / dp * b;
}

bool tri_compression_chunk_read_by(const tri_compression *c, int64_t n, int dp, int zero_stage, int j, int k)
{
    int64_t chunk = tri_compression_chunk(c, n, dp), lo = (int64_t)j * chunk;
    int64_t hi = lo + chunk < n ? lo + chunk : n, slice = n / dp, first = (int64_t)k * slice;
    if (dp <= 1 || k == j || lo >= hi)
        return false;
    return zero_stage == 0 || (first < hi && lo < first + slice);
}

/* Two-phase's phase-2 receivers of the busiest rank (above). */
static int most_readers(const tri_compression *c, int64_t n, int dp, int zero_stage)
{
    if (zero_stage == 0)
        return dp - 1;
    int64_t chunk = tri_compression_chunk(c, n, dp), slice = n / dp;
    int most = 0;
    for (int j = 0; j < dp && slice > 0; j++) {
        /* only the slices from chunk j's first element's to its last's can overlap it */
        int64_t lo = (int64_t)j * chunk, hi = lo + chunk < n ? lo + chunk : n;
        int readers = 0;
        for (int64_t k = lo / slice; k < dp && k <= (hi - 1) / slice; k++)
            readers += tri_compression_chunk_read_by(c, n, dp, zero_stage, j, (int)k);
        most = readers > most ? readers : most;
    }
    return most;
}

int64_t tri_compression_second_bytes(const tri_compression *c, int64_t rows, int64_t cols, int dp, int zero_stage,
                                     bool compressed)
{
    if (dp <= 1 || !compressed)
        return 0;
    if (c->kind == TRI_COMPRESS_POWERSGD)
        return tri_powersgd_compresses(c, rows, cols) ? 2 * (dp - 1) * 4 * (int64_t)c->powersgd_rank * cols / dp : 0;
    if (c->kind != TRI_COMPRESS_NONE && c->reduce == TRI_COMPRESS_REDUCE_TWO_PHASE)
        return (int64_t)most_readers(c, rows * cols, dp, zero_stage) *
               tri_compression_payload_bytes(c, 1, tri_compression_chunk(c, rows * cols, dp));
    return 0;
}

int64_t tri_compression_sent_bytes(const tri_compression *c, int64_t rows, int64_t cols, int dp,
                                   int zero_stage, bool compressed)
{
    if (dp <= 1)
        return 0;
    int64_t n = rows * cols;
    if (!compressed || c->kind == TRI_COMPRESS_NONE)
        return zero_stage == 0 ? 2 * (dp - 1) * 4 * n / dp : (dp - 1) * 4 * n / dp;
    int64_t payload = tri_compression_payload_bytes(c, rows, cols);
    if (c->kind == TRI_COMPRESS_POWERSGD)
        return 2 * (dp - 1) * payload / dp;
    if (c->reduce == TRI_COMPRESS_REDUCE_TWO_PHASE)
        return (int64_t)(dp - 1) * tri_compression_payload_bytes(c, 1, tri_compression_chunk(c, n, dp)) +
               tri_compression_second_bytes(c, rows, cols, dp, zero_stage, true);
    return (int64_t)(dp - 1) * payload;
}
