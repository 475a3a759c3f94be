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

const char *tri_attention_backend_name(tri_attention_backend a)
{
    return a == TRI_ATTENTION_UNFUSED ? "unfused" : "flash";
}

const char *tri_cp_comm_type_name(tri_cp_comm_type t)
{
    return t == TRI_CP_COMM_ALL_GATHER ? "all_gather" : "p2p";
}

tri_recompute tri_layout_recomputes(const tri_train_layout *l)
{
    if (l->recompute == TRI_RECOMPUTE_SELECTIVE && l->attention == TRI_ATTENTION_FLASH)
        return TRI_RECOMPUTE_NONE;
    return l->recompute;
}
