/* engine/comm/comm.c - checked, counted wrappers of the comm interface (see comm.h).
 *
 * Every wrapper checks its buffers, counts the payload bytes per kind, and dispatches. A group of
 * one rank needs no implementation call for collectives: all-reduce and broadcast are identities,
 * and reduce-scatter / all-gather are copies. The non-blocking forms share the checks and run the
 * blocking call at the start when the implementation has no start (or nothing is to be sent). */
#include "engine/comm/comm.h"

#include <stdio.h>
#include <string.h>

#include "engine/core/clock.h"
#include "engine/core/status.h"

/* Every comm carries the four dtypes of engine/core/tensor.h; bf16 (raw bits) counts 2 bytes an element. */
static int check_dtype(const char *op, tri_tensor t)
{
    if (t.dtype != TRI_F32 && t.dtype != TRI_BF16 && t.dtype != TRI_I32 && t.dtype != TRI_I64)
        return TRI_ERR(TRI_EINVAL, "comm %s: dtype %s (%d) not supported (f32, bf16, i32 or i64)", op,
                       tri_dtype_name(t.dtype), (int)t.dtype);
    return TRI_OK;
}

/* The bytes this rank puts on the wire for a call of `bytes` payload bytes, under the ring
 * algorithms (comm.h, "Wire bytes"): all-reduce 2 (D-1)/D of the buffer, reduce-scatter and
 * all-gather (D-1)/D of the full buffer, broadcast the buffer on the root only, p2p what it sends. */
static uint64_t wire_bytes(const tri_comm *c, tri_comm_kind kind, size_t bytes, bool root)
{
    uint64_t b = bytes, d = (uint64_t)c->size;
    switch (kind) {
    case TRI_COMM_ALL_REDUCE:
        return 2 * (d - 1) * b / d;
    case TRI_COMM_REDUCE_SCATTER:
    case TRI_COMM_ALL_GATHER:
        return (d - 1) * b / d;
    case TRI_COMM_BROADCAST:
        return root ? b : 0;
    default:
        return b;
    }
}

/* Counts a call's payload and wire bytes; a group of one rank sends nothing and counts nothing. */
static void count_as(tri_comm *c, tri_comm_kind kind, size_t bytes, bool root)
{
    c->seq++;
    if (c->size == 1)
        return;
    c->bytes[kind] += bytes;
    c->wire[kind] += wire_bytes(c, kind, bytes, root);
    c->calls[kind] += 1;
}

static void count(tri_comm *c, tri_comm_kind kind, size_t bytes)
{
    count_as(c, kind, bytes, false);
}

/* dst = src within this rank: the comm's own copy for device buffers, else memmove. */
static int local_copy(tri_comm *c, void *dst, const void *src, size_t bytes)
{
    if (dst == src)
        return TRI_OK;
    if (c->ops->local_copy)
        return c->ops->local_copy(c, dst, src, bytes);
    memmove(dst, src, bytes);
    return TRI_OK;
}

/* Checks and counts an all-reduce; *skip when there is nothing to send. */
static int prepare_all_reduce(tri_comm *c, tri_tensor x, tri_reduce_op op, bool *skip)
{
    int rc = check_dtype("all_reduce", x);
    if (rc)
        return rc;
    if (op != TRI_REDUCE_SUM && op != TRI_REDUCE_MAX)
        return TRI_ERR(TRI_EINVAL, "comm all_reduce: reduce op %d unknown (sum or max)", (int)op);
    count(c, TRI_COMM_ALL_REDUCE, tri_tensor_bytes(x));
    *skip = c->size == 1 || tri_tensor_numel(x) == 0;
    return TRI_OK;
}

/* Checks and counts a reduce-scatter; *skip when nothing is sent (a one-rank group copies). */
static int prepare_reduce_scatter(tri_comm *c, tri_tensor out, tri_tensor in, bool *skip)
{
    int rc = check_dtype("reduce_scatter", in);
    if (rc)
        return rc;
    if (out.dtype != in.dtype || tri_tensor_numel(in) != tri_tensor_numel(out) * c->size)
        return TRI_ERR(TRI_EINVAL, "comm reduce_scatter: in has %lld elements, out %lld, group size %d",
                       (long long)tri_tensor_numel(in), (long long)tri_tensor_numel(out), c->size);
    count(c, TRI_COMM_REDUCE_SCATTER, tri_tensor_bytes(in));
    *skip = tri_tensor_numel(out) == 0 || c->size == 1;
    if (tri_tensor_numel(out) > 0 && c->size == 1)
        return local_copy(c, out.data, in.data, tri_tensor_bytes(out));
    return TRI_OK;
}

/* Checks and counts an all-gather; *skip when nothing is sent (a one-rank group copies). */
static int prepare_all_gather(tri_comm *c, tri_tensor out, tri_tensor in, bool *skip)
{
    int rc = check_dtype("all_gather", in);
    if (rc)
        return rc;
    if (out.dtype != in.dtype || tri_tensor_numel(out) != tri_tensor_numel(in) * c->size)
        return TRI_ERR(TRI_EINVAL, "comm all_gather: in has %lld elements, out %lld, group size %d",
                       (long long)tri_tensor_numel(in), (long long)tri_tensor_numel(out), c->size);
    count(c, TRI_COMM_ALL_GATHER, tri_tensor_bytes(out));
    *skip = tri_tensor_numel(in) == 0 || c->size == 1;
    if (tri_tensor_numel(in) > 0 && c->size == 1)
        return local_copy(c, out.data, in.data, tri_tensor_bytes(in));
    return TRI_OK;
}

/* Adds the seconds since t0 to kind's wall-time account; returns rc. */
static int timed(tri_comm *c, tri_comm_kind kind, double t0, int rc)
{
    c->seconds[kind] += tri_now_s() - t0;
    return rc;
}

int tri_comm_all_reduce(tri_comm *c, tri_tensor x, tri_reduce_op op)
{
    bool skip = false;
    int rc = prepare_all_reduce(c, x, op, &skip);
    if (rc || skip)
        return rc;
    double t0 = tri_now_s();
    return timed(c, TRI_COMM_ALL_REDUCE, t0, c->ops->all_reduce(c, x, op));
}

int tri_comm_reduce_scatter(tri_comm *c, tri_tensor out, tri_tensor in)
{
    bool skip = false;
    int rc = prepare_reduce_scatter(c, out, in, &skip);
    if (rc || skip)
        return rc;
    double t0 = tri_now_s();
    return timed(c, TRI_COMM_REDUCE_SCATTER, t0, c->ops->reduce_scatter(c, out, in));
}

int tri_comm_all_gather(tri_comm *c, tri_tensor out, tri_tensor in)
{
    bool skip = false;
    int rc = prepare_all_gather(c, out, in, &skip);
    if (rc || skip)
        return rc;
    double t0 = tri_now_s();
    return timed(c, TRI_COMM_ALL_GATHER, t0, c->ops->all_gather(c, out, in));
}

/* ---- non-blocking ---- */

/* Starts a checked collective: through the implementation's start, or blocking when it has none. */
static int start(tri_comm *c, tri_comm_kind kind, tri_tensor out, tri_tensor in, tri_reduce_op op,
                 tri_comm_request *req)
{
    double t0 = tri_now_s();
    if (!c->ops->start) {
        switch (kind) {
        case TRI_COMM_ALL_REDUCE: return timed(c, kind, t0, c->ops->all_reduce(c, out, op));
        case TRI_COMM_REDUCE_SCATTER: return timed(c, kind, t0, c->ops->reduce_scatter(c, out, in));
        default: return timed(c, kind, t0, c->ops->all_gather(c, out, in));
        }
    }
    int rc = c->ops->start(c, kind, out, in, op, &req->handle);
    if (!rc && req->handle) {
        req->c = c;
        req->seq = c->seq;
        req->kind = kind;
    }
    return timed(c, kind, t0, rc);
}

int tri_comm_all_reduce_start(tri_comm *c, tri_tensor x, tri_reduce_op op, tri_comm_request *req)
{
    bool skip = false;
    *req = (tri_comm_request){0};
    int rc = prepare_all_reduce(c, x, op, &skip);
    return rc || skip ? rc : start(c, TRI_COMM_ALL_REDUCE, x, x, op, req);
}

int tri_comm_reduce_scatter_start(tri_comm *c, tri_tensor out, tri_tensor in, tri_comm_request *req)
{
    bool skip = false;
    *req = (tri_comm_request){0};
    int rc = prepare_reduce_scatter(c, out, in, &skip);
    return rc || skip ? rc : start(c, TRI_COMM_REDUCE_SCATTER, out, in, TRI_REDUCE_SUM, req);
}

int tri_comm_all_gather_start(tri_comm *c, tri_tensor out, tri_tensor in, tri_comm_request *req)
{
    bool skip = false;
    *req = (tri_comm_request){0};
    int rc = prepare_all_gather(c, out, in, &skip);
    return rc || skip ? rc : start(c, TRI_COMM_ALL_GATHER, out, in, TRI_REDUCE_SUM, req);
}

int tri_comm_wait(tri_comm_request *req)
{
    if (!req->c)
        return TRI_OK;
    tri_comm *c = req->c;
    void *handle = req->handle;
    tri_comm_kind kind = req->kind;
    *req = (tri_comm_request){0};
    double t0 = tri_now_s();
    return timed(c, kind, t0, c->ops->wait(c, handle));
}

int tri_comm_test(tri_comm_request *req, bool *done)
{
    *done = true;
    if (!req->c)
        return TRI_OK;
    int rc = req->c->ops->test(req->c, req->handle, done);
    if (rc || *done) /* a failed test has already freed the handle */
        *req = (tri_comm_request){0};
    return rc;
}

bool tri_comm_pending(const tri_comm_request *req)
{
    return req->c != NULL;
}

int tri_comm_broadcast(tri_comm *c, tri_tensor x, int root)
{
    int rc = check_dtype("broadcast", x);
    if (rc)
        return rc;
    if (root < 0 || root >= c->size)
        return TRI_ERR(TRI_EINVAL, "comm broadcast: root %d outside group of %d", root, c->size);
    count_as(c, TRI_COMM_BROADCAST, tri_tensor_bytes(x), c->rank == root);
    if (c->size == 1 || tri_tensor_numel(x) == 0)
        return TRI_OK;
    double t0 = tri_now_s();
    return timed(c, TRI_COMM_BROADCAST, t0, c->ops->broadcast(c, x, root));
}

/* Checks a p2p batch and counts what this rank sends; *skip for an empty batch. */
static int prepare_p2p(tri_comm *c, const tri_p2p *ops, int n, bool *skip)
{
    size_t sent = 0;
    *skip = false;
    if (n < 0 || (n > 0 && !ops))
        return TRI_ERR(TRI_EINVAL, "comm p2p: a batch of %d ops%s", n, n > 0 ? " without the ops" : "");
    for (int i = 0; i < n; i++) {
        int rc = check_dtype("p2p", ops[i].t);
        if (rc)
            return rc;
        if (ops[i].peer < 0 || ops[i].peer >= c->size || ops[i].peer == c->rank)
            return TRI_ERR(TRI_EINVAL, "comm p2p: peer %d invalid for rank %d of %d", ops[i].peer,
                           c->rank, c->size);
        if (ops[i].tag < 0 || ops[i].tag > 1023)
            return TRI_ERR(TRI_EINVAL, "comm p2p: tag %d outside [0, 1023]", ops[i].tag);
        if (ops[i].send)
            sent += tri_tensor_bytes(ops[i].t);
    }
    if (n == 0) {
        *skip = true;
        return TRI_OK;
    }
    count(c, TRI_COMM_P2P, sent);
    return TRI_OK;
}

int tri_comm_p2p(tri_comm *c, const tri_p2p *ops, int n)
{
    bool skip = false;
    int rc = prepare_p2p(c, ops, n, &skip);
    if (rc || skip)
        return rc;
    double t0 = tri_now_s();
    return timed(c, TRI_COMM_P2P, t0, c->ops->p2p(c, ops, n));
}

int tri_comm_p2p_start(tri_comm *c, const tri_p2p *ops, int n, tri_comm_request *req)
{
    bool skip = false;
    *req = (tri_comm_request){0};
    int rc = prepare_p2p(c, ops, n, &skip);
    if (rc || skip)
        return rc;
    double t0 = tri_now_s();
    if (!c->ops->p2p_start)
        return timed(c, TRI_COMM_P2P, t0, c->ops->p2p(c, ops, n));
    rc = c->ops->p2p_start(c, ops, n, &req->handle);
    if (!rc && req->handle) {
        req->c = c;
        req->seq = c->seq;
        req->kind = TRI_COMM_P2P;
    }
    return timed(c, TRI_COMM_P2P, t0, rc);
}

static tri_comm_watch *watch_of(tri_comm *c)
{
    if (!c->watch)
        c->watch = &c->own_watch;
    return c->watch;
}

int tri_comm_split(tri_comm *c, int color, int key, tri_comm **out)
{
    *out = NULL;
    c->seq++; /* a split is a collective over c too */
    int rc = c->ops->split(c, color, key, out);
    if (!rc && *out) {
        (*out)->timeout_s = c->timeout_s;
        (*out)->watch = watch_of(c);
    }
    return rc;
}

void tri_comm_set_phase(tri_comm *c, const char *phase, int64_t iteration)
{
    tri_comm_watch *w = watch_of(c);
    snprintf(w->phase, sizeof w->phase, "%s", phase ? phase : "");
    w->iteration = iteration;
}

void tri_comm_set_alert(tri_comm *c, const volatile sig_atomic_t *alert)
{
    watch_of(c)->alert = alert;
}

const tri_comm_watch *tri_comm_phase(tri_comm *c)
{
    return watch_of(c);
}

int tri_comm_barrier(tri_comm *c)
{
    c->seq++;
    return c->size == 1 ? TRI_OK : c->ops->barrier(c);
}

void tri_comm_abort(tri_comm *c, int code)
{
    c->ops->abort(c, code);
}

void tri_comm_destroy(tri_comm *c)
{
    if (c)
        c->ops->destroy(c);
}

void tri_comm_set_timeout(tri_comm *c, double seconds)
{
    c->timeout_s = seconds > 0 ? seconds : 0;
}

uint64_t tri_comm_bytes(const tri_comm *c, tri_comm_kind kind)
{
    return c->bytes[kind];
}

uint64_t tri_comm_wire_bytes(const tri_comm *c, tri_comm_kind kind)
{
    if (!c)
        return 0;
    if (kind < TRI_COMM_KINDS)
        return c->wire[kind];
    uint64_t b = 0;
    for (int k = 0; k < TRI_COMM_KINDS; k++)
        b += c->wire[k];
    return b;
}

void tri_comm_reset_counters(tri_comm *c)
{
    memset(c->bytes, 0, sizeof c->bytes);
    memset(c->wire, 0, sizeof c->wire);
    memset(c->calls, 0, sizeof c->calls);
    memset(c->seconds, 0, sizeof c->seconds);
}

double tri_comm_seconds(const tri_comm *c, tri_comm_kind kind)
{
    if (!c)
        return 0.0;
    if (kind < TRI_COMM_KINDS)
        return c->seconds[kind];
    double s = 0.0;
    for (int k = 0; k < TRI_COMM_KINDS; k++)
        s += c->seconds[k];
    return s;
}

const char *tri_comm_kind_name(tri_comm_kind kind)
{
    static const char *names[TRI_COMM_KINDS] = {"all_reduce", "reduce_scatter", "all_gather",
                                                "broadcast", "p2p", "all_to_all"};
    return kind < TRI_COMM_KINDS ? names[kind] : "?";
}
