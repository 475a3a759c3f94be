/* models/preview.c - the engine's memory plan for the partitioner (see preview.h). */
#include "models/preview.h"

#include <stdlib.h>
#include <string.h>

#include "engine/core/status.h"
#include "partitioner/memory_table.h"

int tri_model_preview_plan(void *ctx, const tri_train_layout *l, int pp_rank, size_t bytes[TRI_MEM_KINDS])
{
    const tri_model *m = ctx;
    tri_model_run o = {.layout = *l}; /* seed 0: the plan does not depend on it */
    return tri_model_rank_plan(m, &o, 0, pp_rank, 0, bytes);
}

int tri_model_print_stage_memory(FILE *f, const tri_model *m, const tri_train_layout *l)
{
    double (*bytes)[TRI_MEM_KINDS] = calloc((size_t)l->pp, sizeof *bytes);
    if (!bytes)
        return TRI_ERR(TRI_ENOMEM, "out of memory");
    int rc = TRI_OK;
    tri_model_run o = {.layout = *l};
    for (int r = 0; r < l->pp && !rc; r++) {
        size_t b[TRI_MEM_KINDS];
        rc = tri_model_rank_plan(m, &o, 0, r, 0, b);
        for (int k = 0; k < TRI_MEM_KINDS && !rc; k++)
            bytes[r][k] = (double)b[k];
    }
    if (!rc)
        tri_memory_table_print(f, l->pp, (const double (*)[TRI_MEM_KINDS])bytes, NULL, 0.0,
                               "the engine's plan, tri_model_rank_plan; TP rank 0, DP rank 0 of each stage");
    free(bytes);
    return rc;
}
