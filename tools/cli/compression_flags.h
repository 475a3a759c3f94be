/* tools/cli/compression_flags.h - engine_train's flags of the compressed data-parallel gradient
 * reduction (engine/train/grad_compression.h, engine/train/dp_compress.h; those that set its bytes
 * are the partitioner's too: one table, one set of defaults): --grad-compression
 * none|1bit|qsgd|topk|powersgd, --compression-block-size, --qsgd-levels, --topk-fraction,
 * --powersgd-rank, --powersgd-start-iter, --grad-compression-reduce allgather|two-phase, and
 * --reset-compression-state (resume a checkpoint saved with another compressor, reduction or dp,
 * starting the error-feedback residuals from zero and PowerSGD's Q afresh instead of loading them
 * from the checkpoint, which holds both). */
#ifndef TRIDENT_TOOLS_CLI_COMPRESSION_FLAGS_H
#define TRIDENT_TOOLS_CLI_COMPRESSION_FLAGS_H

#include <stdbool.h>
#include <stdint.h>

#include "engine/train/grad_compression.h"
#include "tools/cli/flags.h"

typedef struct tri_cli_compression {
    const char *kind;
    const char *reduce; /* --grad-compression-reduce */
    int block_size, qsgd_levels, powersgd_rank;
    float topk_fraction;
    int64_t powersgd_start_iter;
    int64_t start_iter;         /* --grad-compression-start-iter */
    bool reset_state;
    /* whether --grad-compression-start-iter and --powersgd-start-iter were given (the flag table's
     * seen, set by the tool before resolving): powersgd takes the generic one when only it is given */
    bool start_iter_given, powersgd_start_iter_given;
} tri_cli_compression;

/* grad_compression.h's defaults, kind none. */
void tri_cli_compression_defaults(tri_cli_compression *f);
/* Appends the flags that set what crosses the wire (--grad-compression, --grad-compression-reduce,
 * --compression-block-size, --qsgd-levels, --topk-fraction, --powersgd-rank), which the partitioner
 * takes too, to table t at n; returns the new count. */
int tri_cli_compression_wire_flags(tri_cli_compression *f, tri_flag *t, int n);
/* Appends all of engine_train's flags (the wire flags, then the start iterations and
 * --reset-compression-state) to table t at n; returns the new count. */
int tri_cli_compression_flags(tri_cli_compression *f, tri_flag *t, int n);
/* The wire flags' fields into c (the names parsed; TRI_EINVAL naming an unknown one); the rest of c is
 * left as it is. No check against the layout: tri_compression_check. */
int tri_cli_compression_fields(const tri_cli_compression *f, tri_compression *c);
/* The compression the flags ask for, checked against the ZeRO stage (TRI_EINVAL naming the flag and
 * value). --grad-compression-start-iter N applies to every compressor; for powersgd it is another
 * spelling of --powersgd-start-iter (given alone it sets it; both given with different values:
 * TRI_EINVAL naming both). With dp 1 a compressor warns on rank 0 and gives none: there is nothing to reduce. The
 * run's seed drives qsgd's rounding and PowerSGD's initial Q. */
int tri_cli_compression_resolve(const tri_cli_compression *f, int dp, int zero_stage, uint64_t seed,
                                tri_compression *out);

#endif
