/* partitioner/search.h - which layouts of a model fit a cluster, fastest first.
 *
 * Enumerates tensor-parallel sizes (divisors of n_head and of the GPU count, at most max_tp),
 * pipeline sizes (the rest's divisors up to n_layer), data-parallel size (what is left),
 * micro-batch sizes (divisors of the per-replica batch up to max_micro_batch), the schedule (1F1B,
 * and interleaved 1F1B with every v that divides the layers, up to max_v), ZeRO stages 0-3 (with
 * dp > 1), recomputation none / selective / full, sequence parallelism (tp > 1) and, for a
 * mixture-of-experts model, the expert-parallel size ep (divisors of the experts and of the stage's
 * tp x cp x dp ranks) with the expert-tensor-parallel size etp (divisors of tp x cp x dp / ep that
 * divide the experts' moe_intermediate_size, tri_transformer.expert_ffn; 1 when not stated), and the
 * context-parallel size cp (divisors of the ranks up to max_cp, cp 1 first, with the base request's
 * --cp-comm-type; a long sequence that does not fit at cp 1 fits at the cp that divides its
 * activations enough). Every candidate
 * passes partitioner/constraints.h's rules. Screening is by formulas (memory_model.h with
 * closed-form in-flight counts, within a 10% margin, and time_model.h's closed-form bubble); the
 * best screened candidates (20 per result asked for, at least 200) are then previewed exactly (partitioner/preview.h: the engine's plan
 * where it applies, the simulated schedule) and ranked by predicted tokens/s. */
#ifndef TRIDENT_PARTITIONER_SEARCH_H
#define TRIDENT_PARTITIONER_SEARCH_H

#include "partitioner/constraints.h"
#include "partitioner/preview.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct tri_search_space {
    tri_layout_request base;   /* num_gpus, global_batch, seq_length, precision, cpu are kept */
    int max_tp;                /* largest tensor-parallel size (usually GPUs per node) */
    int64_t max_micro_batch;
    int max_v;                 /* largest number of model chunks per rank */
    int max_cp;                /* largest context-parallel size (0 or 1: cp 1 only) */
    tri_moe_run moe;           /* the MoE options every candidate keeps (--moe-expert-capacity-factor
                                  bounds the rows an expert-parallel rank receives; zeroed: dropless) */
} tri_search_space;

typedef struct tri_search_entry {
    tri_train_layout layout;
    tri_time_result time;      /* simulated */
    double max_bytes;          /* the fullest pipeline rank */
    bool from_engine_plan;
} tri_search_entry;

typedef struct tri_search_stats {
    long considered;           /* candidate layouts enumerated */
    long valid;                /* passing the layout rules */
    long screened;             /* fitting by the formulas (10% margin) */
    long previewed;            /* previewed exactly */
    long fit;                  /* of those, fitting exactly */
} tri_search_stats;

/* Fills best[0..*n_found) (at most n_best) with the fastest fitting layouts of m on c, fastest
 * first. engine_plan / ctx as for tri_preview_create. TRI_ENOMEM, or an error of the preview. */
int tri_search_layouts(const tri_transformer *m, const tri_cluster *c, const tri_search_space *space,
                       tri_engine_plan_fn engine_plan, void *ctx, tri_search_entry *best, int n_best, int *n_found,
                       tri_search_stats *stats);

#ifdef __cplusplus
}
#endif

#endif
