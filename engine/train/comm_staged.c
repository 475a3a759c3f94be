/* engine/train/comm_staged.c - device buffers through host memory and a host-buffer comm (see
 * comm_staged.h). */
#include "engine/train/comm_staged.h"

#include <stdlib.h>
#include <string.h>

#include "engine/core/status.h"

typedef struct staged {
    tri_comm *inner;
    tri_device *dev;
    void *buf[2];   /* host staging: input and output halves */
    size_t cap[2];
} staged;

static staged *of(tri_comm *c)
{
    return (staged *)c->impl;
}

/* Host buffer k of at least `bytes` (grown, contents not kept). */
static int host_buf(staged *s, int k, size_t bytes, void **out)
{
    if (bytes > s->cap[k]) {
        void *p = realloc(s->buf[k], bytes);
        if (!p)
            return TRI_ERR(TRI_ENOMEM, "staged comm: out of host memory for a %zu-byte staging buffer", bytes);
        s->buf[k] = p;
        s->cap[k] = bytes;
    }
    *out = s->buf[k];
    return TRI_OK;
}

/* t's shape and dtype over host memory h. */
static tri_tensor on_host(tri_tensor t, void *h)
{
    t.data = h;
    return t;
}

static int down(staged *s, int k, tri_tensor t, tri_tensor *h)
{
    void *p = NULL;
    int rc = host_buf(s, k, tri_tensor_bytes(t), &p);
    if (!rc) rc = tri_device_copy_to_host(s->dev, p, t);
    *h = on_host(t, p);
    return rc;
}

static int staged_all_reduce(tri_comm *c, tri_tensor x, tri_reduce_op op)
{
    staged *s = of(c);
    tri_tensor h;
    int rc = down(s, 0, x, &h);
    if (!rc) rc = tri_comm_all_reduce(s->inner, h, op);
    if (!rc) rc = tri_device_copy_from_host(s->dev, x, h.data);
    return rc;
}

/* reduce_scatter and all_gather: in copied down, the inner comm's `op` from it into a second host
 * buffer, out copied up */
static int staged_in_out(tri_comm *c, tri_tensor out, tri_tensor in,
                         int (*op)(tri_comm *c, tri_tensor out, tri_tensor in))
{
    staged *s = of(c);
    tri_tensor hin, hout;
    void *p = NULL;
    int rc = down(s, 0, in, &hin);
    if (!rc) rc = host_buf(s, 1, tri_tensor_bytes(out), &p);
    hout = on_host(out, p);
    if (!rc) rc = op(s->inner, hout, hin);
    if (!rc) rc = tri_device_copy_from_host(s->dev, out, hout.data);
    return rc;
}

static int staged_reduce_scatter(tri_comm *c, tri_tensor out, tri_tensor in)
{
    return staged_in_out(c, out, in, tri_comm_reduce_scatter);
}

static int staged_all_gather(tri_comm *c, tri_tensor out, tri_tensor in)
{
    return staged_in_out(c, out, in, tri_comm_all_gather);
}

static int staged_broadcast(tri_comm *c, tri_tensor x, int root)
{
    staged *s = of(c);
    tri_tensor h;
    int rc = down(s, 0, x, &h);
    if (!rc) rc = tri_comm_broadcast(s->inner, h, root);
    if (!rc) rc = tri_device_copy_from_host(s->dev, x, h.data);
    return rc;
}

/* The batch's tensors laid out one after another in one host buffer (each at a 16-byte offset):
 * sends copied down first, receives copied up after the inner batch completes. */
static int staged_p2p(tri_comm *c, const tri_p2p *ops, int n)
{
    staged *s = of(c);
    size_t total = 0;
    if (n <= 0) /* the wrapper passes no empty batch; the guard also bounds calloc's size */
        return TRI_OK;
    for (int i = 0; i < n; i++)
        total += (tri_tensor_bytes(ops[i].t) + 15) / 16 * 16;
    void *p = NULL;
    tri_p2p *hops = calloc((size_t)n, sizeof *hops);
    if (!hops)
        return TRI_ERR(TRI_ENOMEM, "staged comm: out of host memory for a batch of %d p2p ops", n);
    int rc = host_buf(s, 0, total, &p);
    size_t at = 0;
    for (int i = 0; i < n && !rc; i++) {
        hops[i] = ops[i];
        hops[i].t = on_host(ops[i].t, (char *)p + at);
        at += (tri_tensor_bytes(ops[i].t) + 15) / 16 * 16;
        if (ops[i].send)
            rc = tri_device_copy_to_host(s->dev, hops[i].t.data, ops[i].t);
    }
    if (!rc) rc = tri_comm_p2p(s->inner, hops, n);
    for (int i = 0; i < n && !rc; i++)
        if (!ops[i].send)
            rc = tri_device_copy_from_host(s->dev, ops[i].t, hops[i].t.data);
    free(hops);
    return rc;
}

/* A p2p batch in flight: its own host buffer (several batches may be in flight), the host ops
 * and the device receives to copy up at the wait. */
typedef struct staged_batch {
    int n;
    void *host;
    tri_p2p *hops;     /* (n): the ops over host memory */
    tri_p2p *ops;      /* (n): the caller's ops over device memory */
    tri_comm_request inner;
} staged_batch;

static void batch_free(staged_batch *b)
{
    free(b->host);
    free(b->hops);
    free(b->ops);
    free(b);
}

/* Sends copied down now, the inner comm's non-blocking p2p on host buffers. */
static int staged_p2p_start(tri_comm *c, const tri_p2p *ops, int n, void **handle)
{
    staged *s = of(c);
    size_t total = 0;
    for (int i = 0; i < n; i++)
        total += (tri_tensor_bytes(ops[i].t) + 15) / 16 * 16;
    staged_batch *b = calloc(1, sizeof *b);
    if (b) {
        b->n = n;
        b->host = malloc(total ? total : 1);
        b->hops = calloc((size_t)n, sizeof *b->hops);
        b->ops = malloc((size_t)n * sizeof *b->ops);
    }
    if (!b || !b->host || !b->hops || !b->ops) {
        if (b)
            batch_free(b);
        return TRI_ERR(TRI_ENOMEM, "staged comm: out of host memory for a batch of %d p2p ops", n);
    }
    memcpy(b->ops, ops, (size_t)n * sizeof *ops);
    int rc = TRI_OK;
    size_t at = 0;
    for (int i = 0; i < n && !rc; i++) {
        b->hops[i] = ops[i];
        b->hops[i].t = on_host(ops[i].t, (char *)b->host + at);
        at += (tri_tensor_bytes(ops[i].t) + 15) / 16 * 16;
        if (ops[i].send)
            rc = tri_device_copy_to_host(s->dev, b->hops[i].t.data, ops[i].t);
    }
    if (!rc) rc = tri_comm_p2p_start(s->inner, b->hops, n, &b->inner);
    if (rc) {
        batch_free(b);
        return rc;
    }
    *handle = b;
    return TRI_OK;
}

/* The staged comm's handles are p2p batches (its collectives start blocking): the inner batch
 * completed, the receives copied up. */
static int staged_wait(tri_comm *c, void *handle)
{
    staged_batch *b = handle;
    int rc = tri_comm_wait(&b->inner);
    for (int i = 0; i < b->n && !rc; i++)
        if (!b->ops[i].send)
            rc = tri_device_copy_from_host(of(c)->dev, b->ops[i].t, b->hops[i].t.data);
    batch_free(b);
    return rc;
}

static int staged_test(tri_comm *c, void *handle, bool *done)
{
    staged_batch *b = handle;
    int rc = tri_comm_test(&b->inner, done);
    if (rc) {
        *done = true;
        batch_free(b);
        return rc;
    }
    return *done ? staged_wait(c, handle) : TRI_OK;
}

/* in copied down whole, the inner comm's all-to-all into a second host buffer, and only the received
 * blocks copied up (the rest of out is left as it was, as the operation promises). */
static int staged_all_to_all_v(tri_comm *c, tri_tensor out, tri_tensor in, const int64_t *send_counts,
                               const int64_t *send_displs, const int64_t *recv_counts, const int64_t *recv_displs)
{
    staged *s = of(c);
    tri_tensor hin, hout;
    void *p = NULL;
    int rc = down(s, 0, in, &hin);
    if (!rc) rc = host_buf(s, 1, tri_tensor_bytes(out), &p);
    hout = on_host(out, p);
    if (!rc) rc = tri_comm_all_to_all_v(s->inner, hout, hin, c->size, send_counts, send_displs, recv_counts,
                                        recv_displs);
    for (int r = 0; r < c->size && !rc; r++)
        if (recv_counts[r] > 0)
            rc = tri_device_copy_from_host(s->dev, tri_tensor_range(out, recv_displs[r], recv_counts[r]),
                                           tri_tensor_range(hout, recv_displs[r], recv_counts[r]).data);
    return rc;
}

static int staged_split(tri_comm *c, int color, int key, tri_comm **out)
{
    staged *s = of(c);
    tri_comm *inner = NULL;
    *out = NULL;
    int rc = tri_comm_split(s->inner, color, key, &inner);
    if (rc || !inner)
        return rc;
    rc = tri_comm_staged_create(out, inner, s->dev);
    if (rc)
        tri_comm_destroy(inner);
    return rc;
}

static int staged_barrier(tri_comm *c)
{
    return tri_comm_barrier(of(c)->inner);
}

static void staged_abort(tri_comm *c, int code)
{
    tri_comm_abort(of(c)->inner, code);
}

static void staged_destroy(tri_comm *c)
{
    staged *s = of(c);
    tri_comm_destroy(s->inner);
    free(s->buf[0]);
    free(s->buf[1]);
    free(s);
    free(c);
}

static int staged_local_copy(tri_comm *c, void *dst, const void *src, size_t bytes)
{
    /* every comm dtype is 2, 4 or 8 bytes wide: a view of 2-byte elements covers any payload */
    int64_t n = (int64_t)(bytes / 2);
    return tri_op_copy(of(c)->dev, tri_tensor_1d(dst, TRI_BF16, n), tri_tensor_1d((void *)src, TRI_BF16, n));
}

/* host values: the inner comm's buffers are host memory already. Counted on this comm as its own
 * collectives are (comm.h's convention; the NCCL comm's host values go through its own calls). */
static int staged_host_collective(tri_comm *c, tri_comm_kind kind, tri_tensor host, tri_reduce_op op, int root)
{
    tri_comm *inner = of(c)->inner;
    c->seq++;
    if (c->size > 1) {
        c->bytes[kind] += tri_tensor_bytes(host);
        c->calls[kind] += 1;
    }
    return kind == TRI_COMM_ALL_REDUCE ? tri_comm_all_reduce(inner, host, op) : tri_comm_broadcast(inner, host, root);
}

static const tri_comm_ops STAGED_OPS = {
    .all_reduce = staged_all_reduce,
    .reduce_scatter = staged_reduce_scatter,
    .all_gather = staged_all_gather,
    .broadcast = staged_broadcast,
    .p2p = staged_p2p,
    .p2p_start = staged_p2p_start,
    .wait = staged_wait,
    .test = staged_test,
    .all_to_all_v = staged_all_to_all_v,
    .split = staged_split,
    .barrier = staged_barrier,
    .abort = staged_abort,
    .destroy = staged_destroy,
    .local_copy = staged_local_copy,
    .host_collective = staged_host_collective,
};

int tri_comm_staged_create(tri_comm **out, tri_comm *inner, tri_device *d)
{
    *out = NULL;
    if (inner->device_buffers)
        return TRI_ERR(TRI_EINVAL, "staged comm: the inner comm must take host buffers (MPI or thread ranks)");
    tri_comm *c = calloc(1, sizeof *c);
    staged *s = calloc(1, sizeof *s);
    if (!c || !s) {
        free(c);
        free(s);
        return TRI_ERR(TRI_ENOMEM, "staged comm: out of memory");
    }
    s->inner = inner;
    s->dev = d;
    c->ops = &STAGED_OPS;
    c->impl = s;
    c->rank = inner->rank;
    c->size = inner->size;
    c->device_buffers = true;
    c->timeout_s = inner->timeout_s;
    c->watch = inner->watch;
    *out = c;
    return TRI_OK;
}
