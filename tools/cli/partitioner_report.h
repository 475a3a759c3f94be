/* tools/cli/partitioner_report.h - what the partitioner CLI prints: a preview or a search result,
 * as text for people or as one JSON object for scripts (cJSON).
 *
 * Text: the model and cluster; the stage table (stage, layers, ranks, nodes); the memory table of
 * partitioner/memory_table.h with where its figures come from and whether every stage fits; the
 * predicted iteration split into compute, exposed TP / PP / DP communication, bubble and
 * optimizer; tokens/s, model TFLOP/s per GPU, MFU; the FLOPs and the fractions used.
 * JSON: the same figures in SI units (bytes, seconds, FLOPs), keys in snake_case, e.g.
 * iteration_time_s, mfu, stages[i].memory_bytes.total.
 * Data parallelism: the DP line says whether its exposure was simulated (--overlap-grad-reduce /
 * --overlap-param-gather, partitioner/dp_overlap.h) or a share; with a compressor, local SGD, an
 * overlap flag or --inter-node-bandwidth a "DP method" line (JSON: "data_parallel") adds the bytes a
 * rank sends per step, the compression ratio, all dp communication before overlap, the codec and
 * stall times. JSON without those flags is the same as before them. A sweep (--dp-bandwidth-sweep)
 * adds a table of the predicted step per method and inter-node bandwidth (JSON: "dp_bandwidth_sweep"). */
#ifndef TRIDENT_TOOLS_CLI_PARTITIONER_REPORT_H
#define TRIDENT_TOOLS_CLI_PARTITIONER_REPORT_H

#include <stdio.h>

#include "partitioner/preview.h"
#include "partitioner/search.h"

typedef struct tri_report_info {
    const char *model_name;     /* the config's name */
    double n_params;            /* the model's parameters (unpadded) */
    const char *gemm_source;    /* where the gemm fraction comes from */
} tri_report_info;

#define TRI_SWEEP_BANDWIDTHS 4

/* The predicted step of one layout under each data-parallel method at each inter-node bandwidth:
 * rows 0..TRI_COMPRESS_KINDS-1 the compressors (none first), then local SGD (uncompressed) when
 * local_sgd_steps > 1. 1bit, qsgd and topk reduce with `reduce` (allgather or two-phase). */
typedef struct tri_dp_sweep_cell {
    tri_time_result time;
    bool refused;               /* the layout's ZeRO stage refuses the method (tri_time_dp_method_check) */
} tri_dp_sweep_cell;

typedef struct tri_dp_sweep {
    int rows, local_sgd_steps;
    tri_compression_reduce reduce; /* of the 1bit, qsgd and topk rows (--grad-compression-reduce) */
    double gbps[TRI_SWEEP_BANDWIDTHS];
    tri_dp_sweep_cell cell[TRI_SWEEP_BANDWIDTHS][TRI_COMPRESS_KINDS + 1];
} tri_dp_sweep;

/* sweep may be NULL. */
void tri_report_text(FILE *f, const tri_preview *p, const tri_report_info *info, const tri_dp_sweep *sweep);

/* TRI_ENOMEM when the JSON cannot be built. sweep may be NULL. */
int tri_report_json(FILE *f, const tri_preview *p, const tri_report_info *info, const tri_dp_sweep *sweep);

void tri_report_search_text(FILE *f, const tri_search_entry *e, int n, const tri_search_stats *st,
                            const tri_cluster *c, const tri_report_info *info);

int tri_report_search_json(FILE *f, const tri_search_entry *e, int n, const tri_search_stats *st,
                           const tri_cluster *c, const tri_report_info *info);

#endif
