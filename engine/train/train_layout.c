/* engine/train/train_layout.c - names of the layout's choices (see train_layout.h). */
#include "engine/train/train_layout.h"

const char *tri_recompute_name(tri_recompute r)
{
    return r == TRI_RECOMPUTE_FULL ? "full" : r == TRI_RECOMPUTE_SELECTIVE ? "selective" : "none";
}

const char *tri_precision_name(tri_precision p)
{
    return p == TRI_PRECISION_BF16 ? "bf16" : "fp32";
}
