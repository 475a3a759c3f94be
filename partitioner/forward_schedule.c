/* partitioner/forward_schedule.c - the forward-only pipeline schedule (see forward_schedule.h). */
#include "partitioner/forward_schedule.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine/core/status.h"

int tri_schedule_forward_only(tri_schedule *out, int pp, int v, int m)
{
    memset(out, 0, sizeof *out);
    if (pp < 1 || v < 1 || m < 1)
        return TRI_ERR(TRI_EINVAL, "forward-only schedule: pp %d, v %d, m %d must be >= 1", pp, v, m);
    snprintf(out->name, sizeof out->name, "forward-only");
    out->pp = pp;
    out->v = v;
    out->m = m;
    out->n_ops = calloc((size_t)pp, sizeof *out->n_ops);
    out->ops = calloc((size_t)pp, sizeof *out->ops);
    if (!out->n_ops || !out->ops) {
        tri_schedule_free(out);
        return TRI_ERR(TRI_ENOMEM, "forward-only schedule: out of memory");
    }
    int chunks = pp * v;
    for (int r = 0; r < pp; r++) {
        out->ops[r] = malloc((size_t)(3 * v * m) * sizeof **out->ops);
        if (!out->ops[r]) {
            tri_schedule_free(out);
            return TRI_ERR(TRI_ENOMEM, "forward-only schedule: out of memory");
        }
        int n = 0;
        for (int mb = 0; mb < m; mb++)
            for (int c = 0; c < v; c++) {
                int gc = c * pp + r;
                if (gc > 0)
                    out->ops[r][n++] = (tri_sched_op){.kind = TRI_SCHED_RECV_ACT, .chunk = (int8_t)c, .mb = mb};
                out->ops[r][n++] = (tri_sched_op){.kind = TRI_SCHED_FWD, .chunk = (int8_t)c, .mb = mb};
                if (gc < chunks - 1)
                    out->ops[r][n++] = (tri_sched_op){.kind = TRI_SCHED_SEND_ACT, .chunk = (int8_t)c, .mb = mb};
            }
        out->n_ops[r] = n;
    }
    return TRI_OK;
}
