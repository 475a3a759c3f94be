/* engine/comm/comm_a2a.c - all-to-all with variable counts: the checked, counted wrapper over every
 * comm, the exchange of the counts that precedes it, and packed displacements (see comm.h).
 *
 * Expert parallelism (GShard, Lepikhin et al. 2020; Switch Transformer, Fedus et al. 2021) sends each
 * token to the rank that holds its expert and its output back, with per-pair counts known only at run
 * time: MPI_Alltoallv's semantics (MPI 3.1 §5.8). Megatron-Core's MoEAlltoAllTokenDispatcher first
 * exchanges the per-rank token counts, then the tokens; tri_comm_all_to_all_counts and
 * tri_comm_all_to_all_v are those two steps. The wrapper checks every argument before anything is
 * sent (so a refused call sends and counts nothing on that rank), moves the block a rank keeps itself
 * on a group of one, and counts the bytes sent to the other ranks under TRI_COMM_ALL_TO_ALL. */
#include "engine/comm/comm.h"

#include <stdlib.h>
#include <string.h>

#include "engine/core/clock.h"
#include "engine/core/status.h"

/* One block of a buffer: its start and length in elements (for the overlap check). */
typedef struct block {
    int64_t at, n;
    int rank;
} block;

static int by_start(const void *a, const void *b)
{
    const block *x = a, *y = b;
    return x->at < y->at ? -1 : x->at > y->at;
}

/* Every count and displacement of one side (`side`: "send" or "recv") is >= 0 and its block lies
 * within the buffer of `numel` elements. */
static int check_blocks(const tri_comm *c, const char *side, const int64_t *counts, const int64_t *displs,
                        int64_t numel)
{
    if (!counts || !displs)
        return TRI_ERR(TRI_EINVAL, "comm all_to_all_v: %s_counts or %s_displs is NULL (want %d entries each)",
                       side, side, c->size);
    for (int r = 0; r < c->size; r++) {
        if (counts[r] < 0)
            return TRI_ERR(TRI_EINVAL, "comm all_to_all_v: %s_counts[%d] = %lld on rank %d (want >= 0)", side, r,
                           (long long)counts[r], c->rank);
        if (displs[r] < 0)
            return TRI_ERR(TRI_EINVAL, "comm all_to_all_v: %s_displs[%d] = %lld on rank %d (want >= 0)", side, r,
                           (long long)displs[r], c->rank);
        if (counts[r] > numel - displs[r])
            return TRI_ERR(TRI_EINVAL, "comm all_to_all_v: %s block %d (%s_displs %lld + %s_counts %lld) runs past "
                           "the %s buffer's %lld elements on rank %d", side, r, side, (long long)displs[r], side,
                           (long long)counts[r], side[0] == 's' ? "in" : "out", (long long)numel, c->rank);
    }
    return TRI_OK;
}

/* The non-empty receive blocks are pairwise disjoint (MPI forbids overlapping receive buffers, and
 * the result would depend on the order the comm writes them in). */
static int check_disjoint(const tri_comm *c, const int64_t *counts, const int64_t *displs)
{
    block *b = malloc((size_t)c->size * sizeof *b);
    if (!b)
        return TRI_ERR(TRI_ENOMEM, "comm all_to_all_v: out of memory checking %d blocks", c->size);
    int n = 0;
    for (int r = 0; r < c->size; r++)
        if (counts[r] > 0)
            b[n++] = (block){displs[r], counts[r], r};
    qsort(b, (size_t)n, sizeof *b, by_start);
    int rc = TRI_OK;
    for (int i = 1; i < n && !rc; i++)
        if (b[i - 1].at + b[i - 1].n > b[i].at)
            rc = TRI_ERR(TRI_EINVAL, "comm all_to_all_v: on rank %d the receive blocks from ranks %d ([%lld, %lld)) "
                         "and %d ([%lld, %lld)) of out overlap", c->rank, b[i - 1].rank, (long long)b[i - 1].at,
                         (long long)(b[i - 1].at + b[i - 1].n), b[i].rank, (long long)b[i].at,
                         (long long)(b[i].at + b[i].n));
    free(b);
    return rc;
}

static bool overlaps(tri_tensor a, tri_tensor b)
{
    const char *x = a.data, *y = b.data;
    size_t an = tri_tensor_bytes(a), bn = tri_tensor_bytes(b);
    return an > 0 && bn > 0 && x < y + bn && y < x + an;
}

int tri_comm_all_to_all_v(tri_comm *c, tri_tensor out, tri_tensor in, int n, const int64_t *send_counts,
                          const int64_t *send_displs, const int64_t *recv_counts, const int64_t *recv_displs)
{
    if (in.dtype != TRI_F32 && in.dtype != TRI_BF16 && in.dtype != TRI_I32 && in.dtype != TRI_I64)
        return TRI_ERR(TRI_EINVAL, "comm all_to_all_v: dtype %s (%d) not supported (f32, bf16, i32 or i64)",
                       tri_dtype_name(in.dtype), (int)in.dtype);
    if (out.dtype != in.dtype)
        return TRI_ERR(TRI_EINVAL, "comm all_to_all_v: out is %s, in is %s (want the same dtype)",
                       tri_dtype_name(out.dtype), tri_dtype_name(in.dtype));
    if (n != c->size)
        return TRI_ERR(TRI_EINVAL, "comm all_to_all_v: %d counts and displacements per side for a group of %d "
                       "ranks (want one per rank)", n, c->size);
    int rc = check_blocks(c, "send", send_counts, send_displs, tri_tensor_numel(in));
    if (!rc) rc = check_blocks(c, "recv", recv_counts, recv_displs, tri_tensor_numel(out));
    if (!rc) rc = check_disjoint(c, recv_counts, recv_displs);
    if (rc)
        return rc;
    if (send_counts[c->rank] != recv_counts[c->rank])
        return TRI_ERR(TRI_EINVAL, "comm all_to_all_v: rank %d keeps send_counts[%d] = %lld elements but "
                       "recv_counts[%d] = %lld (want equal)", c->rank, c->rank, (long long)send_counts[c->rank],
                       c->rank, (long long)recv_counts[c->rank]);
    if (overlaps(in, out))
        return TRI_ERR(TRI_EINVAL, "comm all_to_all_v: in and out overlap on rank %d (want separate buffers)",
                       c->rank);
    size_t esize = tri_dtype_size(in.dtype);
    uint64_t sent = 0;
    for (int r = 0; r < c->size; r++)
        sent += r == c->rank ? 0 : (uint64_t)send_counts[r] * esize;
    c->seq++;
    if (c->size == 1) { /* the block the rank keeps: no implementation call (comm.c's one-rank rule) */
        size_t bytes = (size_t)send_counts[0] * esize;
        void *dst = (char *)out.data + (size_t)recv_displs[0] * esize;
        const void *src = (const char *)in.data + (size_t)send_displs[0] * esize;
        if (bytes == 0)
            return TRI_OK;
        if (c->ops->local_copy)
            return c->ops->local_copy(c, dst, src, bytes);
        memcpy(dst, src, bytes);
        return TRI_OK;
    }
    c->bytes[TRI_COMM_ALL_TO_ALL] += sent;
    c->wire[TRI_COMM_ALL_TO_ALL] += sent;
    c->calls[TRI_COMM_ALL_TO_ALL] += 1;
    double t0 = tri_now_s();
    rc = c->ops->all_to_all_v(c, out, in, send_counts, send_displs, recv_counts, recv_displs);
    c->seconds[TRI_COMM_ALL_TO_ALL] += tri_now_s() - t0;
    return rc;
}

int tri_comm_all_to_all_counts(tri_comm *c, int n, const int64_t *send_counts, int64_t *recv_counts)
{
    if (n != c->size)
        return TRI_ERR(TRI_EINVAL, "comm all_to_all_counts: %d counts for a group of %d ranks (want one per rank)",
                       n, c->size);
    for (int r = 0; r < n; r++)
        if (send_counts[r] < 0)
            return TRI_ERR(TRI_EINVAL, "comm all_to_all_counts: send_counts[%d] = %lld on rank %d (want >= 0)", r,
                           (long long)send_counts[r], c->rank);
    /* matrix[src * n + dst]: row src is rank src's send_counts, every other row 0 before the sum */
    int64_t *matrix = calloc((size_t)n * (size_t)n, sizeof *matrix);
    if (!matrix)
        return TRI_ERR(TRI_ENOMEM, "comm all_to_all_counts: out of memory for a %d x %d count matrix", n, n);
    memcpy(matrix + (size_t)c->rank * (size_t)n, send_counts, (size_t)n * sizeof *matrix);
    int rc = tri_comm_host_all_reduce(c, matrix, TRI_I64, (int64_t)n * n, TRI_REDUCE_SUM);
    if (!rc)
        for (int src = 0; src < n; src++)
            recv_counts[src] = matrix[(size_t)src * (size_t)n + (size_t)c->rank];
    free(matrix);
    return rc;
}

int64_t tri_comm_displs(int n, const int64_t *counts, int64_t *displs)
{
    int64_t at = 0;
    for (int r = 0; r < n; r++) {
        displs[r] = at;
        at += counts[r];
    }
    return at;
}
