/* layers/parallel.c - Megatron's tensor-parallel mappings (see parallel.h). */
#include "layers/parallel.h"

#include "engine/core/status.h"

int tri_tp_gather_input(const tri_tp *tp, tri_tensor *result, tri_tensor x, tri_tensor full)
{
    if (!tp->sp || tri_tp_size(tp) == 1) {
        *result = x;
        return TRI_OK;
    }
    *result = full;
    return tri_comm_all_gather(tp->comm, full, x);
}

int tri_tp_reduce_output(const tri_tp *tp, tri_tensor out, tri_tensor partial)
{
    if (tp->sp && tri_tp_size(tp) > 1)
        return tri_comm_reduce_scatter(tp->comm, out, partial);
    if (out.data != partial.data)
        return TRI_ERR(TRI_EINTERNAL, "tp reduce: without SP the output must be reduced in place");
    return tri_comm_all_reduce(tp->comm, out, TRI_REDUCE_SUM);
}
