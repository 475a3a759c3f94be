/* partitioner/memory_table.h - the per-stage memory table both tools print.
 *
 * engine_train prints it at start from the engine's plan, the partitioner CLI from its preview (the
 * same plan for fp32 layouts), so the two always show the same figures in the same form: one row
 * per pipeline stage, bytes per memory category (engine/device/arena.h), the activations with the
 * micro-batches kept in flight, the total and whether it fits the usable device memory. */
#ifndef TRIDENT_PARTITIONER_MEMORY_TABLE_H
#define TRIDENT_PARTITIONER_MEMORY_TABLE_H

#include <stdio.h>

#include "engine/device/arena.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Prints the table for pp stages: bytes[r][kind]; in_flight[r] (NULL: not shown); usable bytes per
 * device (<= 0: no fit column); `source` names where the figures come from. */
void tri_memory_table_print(FILE *f, int pp, const double (*bytes)[TRI_MEM_KINDS], const int *in_flight,
                            double usable, const char *source);

/* Formats bytes as "12.3 MiB" / "4.56 GiB" into buf. Returns buf. */
const char *tri_format_bytes(double bytes, char *buf, int cap);

#ifdef __cplusplus
}
#endif

#endif
