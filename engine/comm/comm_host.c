/* engine/comm/comm_host.c - host values through a collective, on a comm of either buffer kind, and the
 * one agreement on a status every rank reaches (see comm.h). */
#include "engine/comm/comm.h"

#include <string.h>

#include "engine/core/status.h"

int tri_comm_host_all_reduce(tri_comm *c, void *host, tri_dtype dtype, int64_t n, tri_reduce_op op)
{
    tri_tensor t = tri_tensor_1d(host, dtype, n);
    if (c->device_buffers)
        return c->ops->host_collective(c, TRI_COMM_ALL_REDUCE, t, op, 0);
    return tri_comm_all_reduce(c, t, op);
}

int tri_comm_host_broadcast(tri_comm *c, void *host, tri_dtype dtype, int64_t n, int root)
{
    tri_tensor t = tri_tensor_1d(host, dtype, n);
    if (c->device_buffers)
        return c->ops->host_collective(c, TRI_COMM_BROADCAST, t, TRI_REDUCE_SUM, root);
    return tri_comm_broadcast(c, t, root);
}

#define AGREE_MSG 512 /* characters of the failing rank's message passed on */

int tri_comm_agree(tri_comm *c, int rc)
{
    /* the lowest failing rank (the max of size - rank over failing ranks), then its status and
     * message from it to every rank */
    int32_t code = rc ? c->size - c->rank : 0;
    int arc = tri_comm_host_all_reduce(c, &code, TRI_I32, 1, TRI_REDUCE_MAX);
    if (arc)
        return rc ? rc : arc;
    if (code == 0)
        return TRI_OK;
    int first = c->size - code;
    int32_t msg[AGREE_MSG + 1];
    memset(msg, 0, sizeof msg);
    if (first == c->rank) {
        const char *text = tri_error_message();
        msg[0] = rc;
        for (int i = 0; i < AGREE_MSG - 1 && text[i]; i++)
            msg[i + 1] = (unsigned char)text[i];
    }
    arc = tri_comm_host_broadcast(c, msg, TRI_I32, AGREE_MSG + 1, first);
    if (rc)
        return rc;
    if (arc)
        return arc;
    char text[AGREE_MSG];
    for (int i = 0; i < AGREE_MSG; i++)
        text[i] = (char)msg[i + 1];
    text[AGREE_MSG - 1] = '\0';
    return tri_error_set(msg[0] < 0 ? msg[0] : TRI_EIO, __FILE__, __LINE__, "on rank %d: %s", first, text);
}
