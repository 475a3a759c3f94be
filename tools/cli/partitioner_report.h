/* tools/cli/partitioner_report.h - what the partitioner CLI prints: a preview or a search result,
 * as text for people or as one JSON object for scripts (cJSON).
 *
 * Text: the model and cluster; the stage table (stage, layers, ranks, nodes); the memory table of
 * partitioner/memory_table.h with where its figures come from and whether every stage fits; the
 * predicted iteration split into compute, exposed TP / PP / DP communication, bubble and
 * optimizer; tokens/s, model TFLOP/s per GPU, MFU; the FLOPs and the fractions used.
 * JSON: the same figures in SI units (bytes, seconds, FLOPs), keys in snake_case, e.g.
 * iteration_time_s, mfu, stages[i].memory_bytes.total. */
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

void tri_report_text(FILE *f, const tri_preview *p, const tri_report_info *info);

/* TRI_ENOMEM when the JSON cannot be built. */
int tri_report_json(FILE *f, const tri_preview *p, const tri_report_info *info);

void tri_report_search_text(FILE *f, const tri_search_entry *e, int n, const tri_search_stats *st,
                            const tri_cluster *c, const tri_report_info *info);

int tri_report_search_json(FILE *f, const tri_search_entry *e, int n, const tri_search_stats *st,
                           const tri_cluster *c, const tri_report_info *info);

#endif
