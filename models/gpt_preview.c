/* models/gpt_preview.c - the engine's memory plan for the partitioner (see gpt_preview.h). */
#include "models/gpt_preview.h"

#include <stdlib.h>
#include <string.h>

#include "engine/status.h"
#include "partitioner/memory_table.h"

tri_gpt_run_options tri_gpt_run_options_of(const tri_gpt_config *cfg, const tri_train_layout *l)
{
    tri_gpt_run_options o = {.B = l->B, .T = l->T, .n_micro = l->n_micro, .eval_micro = 0,
                             .sequence_parallel = l->sequence_parallel, .schedule = l->schedule,
                             .layers_per_virtual_stage = l->v > 1 ? cfg->n_layer / (l->pp * l->v) : 0,
                             .first_stage_layers = l->first_layers, .last_stage_layers = l->last_layers,
                             .zero_stage = l->zero_stage, .recompute = l->recompute,
                             .deterministic = l->deterministic, .overlap_grad_reduce = l->overlap_grad_reduce,
                             .overlap_param_gather = l->overlap_param_gather,
                             .bf16 = l->precision == TRI_PRECISION_BF16, .seed = 0};
    return o;
}

int tri_gpt_preview_plan(void *ctx, const tri_train_layout *l, int pp_rank, size_t bytes[TRI_MEM_KINDS])
{
    const tri_gpt_config *cfg = ctx;
    tri_gpt_run_options o = tri_gpt_run_options_of(cfg, l);
    return tri_gpt_rank_plan(cfg, l->tp, l->pp, l->dp, &o, 0, pp_rank, 0, bytes);
}

int tri_gpt_print_stage_memory(FILE *f, const tri_gpt_config *cfg, int tp, int pp, int dp,
                               const tri_gpt_run_options *o)
{
    double (*bytes)[TRI_MEM_KINDS] = calloc((size_t)pp, sizeof *bytes);
    if (!bytes)
        return TRI_ERR(TRI_ENOMEM, "out of memory");
    int rc = TRI_OK;
    for (int r = 0; r < pp && !rc; r++) {
        size_t b[TRI_MEM_KINDS];
        rc = tri_gpt_rank_plan(cfg, tp, pp, dp, o, 0, r, 0, b);
        for (int k = 0; k < TRI_MEM_KINDS && !rc; k++)
            bytes[r][k] = (double)b[k];
    }
    if (!rc)
        tri_memory_table_print(f, pp, (const double (*)[TRI_MEM_KINDS])bytes, NULL, 0.0,
                               "the engine's plan, tri_gpt_rank_plan; TP rank 0, DP rank 0 of each stage");
    free(bytes);
    return rc;
}
