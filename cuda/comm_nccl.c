/* cuda/comm_nccl.c - the NCCL comm (see comm_nccl.h): collectives and batched p2p between GPUs.
 *
 * Bootstrapping follows NCCL's documented pattern (NVIDIA NCCL User Guide, "Creating a
 * communicator"; llm.c does the same in llmc/zero.cuh): the unique id travels over MPI. Every
 * communicator is non-blocking (ncclConfig_t.blocking = 0), so no NCCL call can hang the host: a
 * call returning ncclInProgress is settled by polling ncclCommGetAsyncError with a deadline, and a
 * deadline passed aborts the communicator (ncclCommAbort) and reports TRI_ETIMEOUT.
 *
 * Ordering against compute (DESIGN.md: ops on one device run in program order): each operation
 * records an event on the device's compute stream that the communication stream waits for, runs on
 * the communication stream, and records an event there that the compute stream waits for. The host
 * never blocks in a collective; the device sees the comm exactly where the program put it. The
 * non-blocking collectives (tri_comm_*_start) record their own event instead, which the compute
 * stream waits for only at tri_comm_wait: ZeRO's reduce-scatters and all-gathers then run on the
 * communication stream while the compute stream goes on. Batched p2p is ncclSend/ncclRecv inside ncclGroupStart/ncclGroupEnd, which
 * NCCL runs concurrently; messages between two ranks match in posting order. All-to-all with variable
 * counts is the same grouped send/recv, one pair per peer.
 *
 * Every NCCL, CUDA and MPI return code is checked and recorded with the failing call's text. */
#include "cuda/comm_nccl.h"
#include "engine/core/clock.h"

#include <mpi.h>
#include <nccl.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "cuda/cuda_internal.h"
#include "cuda/device_cuda.h"
#include "engine/comm/mpi_check.h"

typedef struct nccl_impl {
    ncclComm_t comm;
    tri_device *dev;
    cudaStream_t compute;     /* the device's stream (not owned) */
    cudaStream_t stream;      /* this comm's communication stream */
    cudaEvent_t ready, done;  /* compute -> comm, comm -> compute */
    int32_t *scratch;         /* one device int for the barrier */
    void *stage;              /* device scratch for host values (tri_comm_host_*), from the device's
                                 own allocator: outside the planned and measured memory */
    size_t stage_bytes;
    const tri_comm *self;     /* the comm this implements (NULL while creating): its timeout_s, which
                                 tri_comm_set_timeout sets, bounds every wait */
    double timeout_s;         /* the bound while self is NULL */
    double pending_since;     /* when the oldest possibly unfinished operation was queued; 0: none */
    bool aborted, watching;
} nccl_impl;

static const tri_comm_ops nccl_ops;

static void pause_us(long us)
{
    struct timespec ts = {0, us * 1000};
    nanosleep(&ts, NULL);
}

static nccl_impl *impl_of(tri_comm *c)
{
    return (nccl_impl *)c->impl;
}

/* Seconds an operation may stay incomplete (0: no limit). */
static double limit(const nccl_impl *n)
{
    return n->self ? n->self->timeout_s : n->timeout_s;
}

static void abort_comm(nccl_impl *n)
{
    if (!n->aborted && n->comm)
        ncclCommAbort(n->comm);
    n->aborted = true;
}

/* Settles an NCCL call on a non-blocking communicator: while it is in progress, polls
 * ncclCommGetAsyncError until done, an error, or the deadline, which aborts `comm` (and only then:
 * the caller aborts or keeps it on other errors) and gives TRI_ETIMEOUT. */
static int settle(nccl_impl *n, ncclComm_t comm, ncclResult_t r, const char *call, const char *file, int line)
{
    double t0 = tri_now_s();
    for (long polls = 0; r == ncclInProgress; polls++) {
        if (limit(n) > 0 && tri_now_s() - t0 > limit(n)) {
            if (comm)
                ncclCommAbort(comm);
            if (comm == n->comm)
                n->aborted = true;
            return tri_error_set(TRI_ETIMEOUT, file, line, "%s: still in progress after %g s (a rank is missing "
                                 "or hung); NCCL communicator aborted", call, limit(n));
        }
        if (polls > 100)
            pause_us(100);
        if (!comm || ncclCommGetAsyncError(comm, &r) != ncclSuccess)
            break;
    }
    if (r == ncclSuccess)
        return TRI_OK;
    const char *last = comm ? ncclGetLastError(comm) : NULL;
    return tri_error_set(TRI_ECOMM, file, line, "%s failed: %s%s%s", call, ncclGetErrorString(r),
                         last && *last ? ": " : "", last ? last : "");
}

#define TRI_NCCL(n, call) settle((n), (n)->comm, (call), #call, __FILE__, __LINE__)


/* NCCL's element type for a Trident dtype: bf16 tensors (mixed precision) travel and reduce as
 * ncclBfloat16, the fixed-point sums of deterministic mode as ncclInt64. */
static ncclDataType_t nccl_type(tri_dtype dtype)
{
    switch (dtype) {
    case TRI_I32: return ncclInt32;
    case TRI_I64: return ncclInt64;
    case TRI_BF16: return ncclBfloat16;
    case TRI_F32: break;
    }
    return ncclFloat32;
}

/* ---- watching: asynchronous errors and time-outs, checked while the device waits ---- */

static int watch(void *ctx)
{
    nccl_impl *n = ctx;
    if (n->aborted)
        return TRI_OK;
    ncclResult_t r = ncclSuccess;
    if (ncclCommGetAsyncError(n->comm, &r) == ncclSuccess && r != ncclSuccess && r != ncclInProgress) {
        const char *last = ncclGetLastError(n->comm);
        abort_comm(n);
        return TRI_ERR(TRI_ECOMM, "NCCL reported an asynchronous error: %s%s%s; communicator aborted",
                       ncclGetErrorString(r), last && *last ? ": " : "", last ? last : "");
    }
    if (n->pending_since > 0) {
        if (cudaEventQuery(n->done) == cudaSuccess)
            n->pending_since = 0;
        else if (limit(n) > 0 && tri_now_s() - n->pending_since > limit(n)) {
            abort_comm(n);
            return TRI_ERR(TRI_ETIMEOUT, "an NCCL operation did not complete within %g s (a peer is missing "
                           "or hung); communicator aborted", limit(n));
        }
    }
    return TRI_OK;
}

/* ---- ordering against the compute stream ---- */

static int begin(nccl_impl *n)
{
    if (n->aborted)
        return TRI_ERR(TRI_ECOMM, "the NCCL communicator was aborted by an earlier error");
    int rc = watch(n);
    if (!rc) rc = TRI_CUDA(cudaEventRecord(n->ready, n->compute));
    if (!rc) rc = TRI_CUDA(cudaStreamWaitEvent(n->stream, n->ready, 0));
    return rc;
}

static int end(nccl_impl *n, int rc)
{
    if (rc)
        return rc;
    if (n->pending_since == 0 || cudaEventQuery(n->done) == cudaSuccess)
        n->pending_since = tri_now_s();
    rc = TRI_CUDA(cudaEventRecord(n->done, n->stream));
    if (!rc) rc = TRI_CUDA(cudaStreamWaitEvent(n->compute, n->done, 0));
    return rc;
}

/* ---- operations ---- */

static int nccl_all_reduce(tri_comm *c, tri_tensor x, tri_reduce_op op)
{
    nccl_impl *n = impl_of(c);
    int rc = begin(n);
    if (!rc) rc = TRI_NCCL(n, ncclAllReduce(x.data, x.data, (size_t)tri_tensor_numel(x), nccl_type(x.dtype),
                                            op == TRI_REDUCE_SUM ? ncclSum : ncclMax, n->comm, n->stream));
    return end(n, rc);
}

static bool overlaps(const void *a, size_t an, const void *b, size_t bn)
{
    const char *x = a, *y = b;
    return x < y + bn && y < x + an;
}

static int nccl_reduce_scatter(tri_comm *c, tri_tensor out, tri_tensor in)
{
    nccl_impl *n = impl_of(c);
    size_t count = (size_t)tri_tensor_numel(out), bytes = tri_tensor_bytes(out);
    void *dst = out.data, *tmp = NULL;
    bool in_place = (char *)out.data == (char *)in.data + (size_t)c->rank * bytes;
    int rc = TRI_OK;
    /* NCCL allows overlap only in place (out = in's own slice): otherwise go through a buffer */
    if (!in_place && overlaps(out.data, bytes, in.data, tri_tensor_bytes(in))) {
        rc = tri_device_alloc(n->dev, &tmp, bytes);
        dst = tmp;
    }
    if (!rc) rc = begin(n);
    if (!rc) rc = TRI_NCCL(n, ncclReduceScatter(in.data, dst, count, nccl_type(in.dtype), ncclSum, n->comm,
                                                n->stream));
    if (!rc && tmp)
        rc = TRI_CUDA(cudaMemcpyAsync(out.data, tmp, bytes, cudaMemcpyDeviceToDevice, n->stream));
    rc = end(n, rc);
    if (tmp)
        tri_device_free(n->dev, tmp); /* cudaFree waits for the device */
    return rc;
}

static int nccl_all_gather(tri_comm *c, tri_tensor out, tri_tensor in)
{
    nccl_impl *n = impl_of(c);
    size_t count = (size_t)tri_tensor_numel(in), part = tri_tensor_bytes(in);
    char *mine = (char *)out.data + (size_t)c->rank * part;
    const void *src = in.data;
    int rc = TRI_OK;
    /* overlap is allowed only in place (in = out's own slice): move in there first */
    if ((char *)in.data != mine && overlaps(out.data, tri_tensor_bytes(out), in.data, part)) {
        rc = n->dev->ops->copy(n->dev, mine, in.data, part); /* memmove semantics, compute stream */
        src = mine;
    }
    if (!rc) rc = begin(n);
    if (!rc) rc = TRI_NCCL(n, ncclAllGather(src, out.data, count, nccl_type(in.dtype), n->comm, n->stream));
    return end(n, rc);
}

static int nccl_broadcast(tri_comm *c, tri_tensor x, int root)
{
    nccl_impl *n = impl_of(c);
    int rc = begin(n);
    if (!rc) rc = TRI_NCCL(n, ncclBroadcast(x.data, x.data, (size_t)tri_tensor_numel(x), nccl_type(x.dtype), root,
                                            n->comm, n->stream));
    return end(n, rc);
}

/* ops as one NCCL group of ncclSend/ncclRecv on the communication stream (the body of the blocking
 * and the in-flight batched p2p); the group is closed even after an error, so NCCL's group state
 * stays balanced. */
static int grouped_p2p(nccl_impl *n, const tri_p2p *ops, int count)
{
    int rc = TRI_NCCL(n, ncclGroupStart());
    for (int i = 0; i < count && !rc; i++) {
        const tri_p2p *o = &ops[i];
        size_t k = (size_t)tri_tensor_numel(o->t);
        rc = o->send ? TRI_NCCL(n, ncclSend(o->t.data, k, nccl_type(o->t.dtype), o->peer, n->comm, n->stream))
                     : TRI_NCCL(n, ncclRecv(o->t.data, k, nccl_type(o->t.dtype), o->peer, n->comm, n->stream));
    }
    int rc_end = TRI_NCCL(n, ncclGroupEnd());
    return rc ? rc : rc_end;
}

static int nccl_p2p(tri_comm *c, const tri_p2p *ops, int count)
{
    nccl_impl *n = impl_of(c);
    int rc = begin(n);
    if (rc)
        return rc;
    return end(n, grouped_p2p(n, ops, count));
}

/* All-to-all with variable counts as NCCL documents it ("Point-to-point communication", all-to-allv):
 * one ncclSend and one ncclRecv per peer with a non-empty block inside ncclGroupStart/ncclGroupEnd,
 * which NCCL runs concurrently; the block a rank keeps is a device copy on the communication stream. */
static int nccl_all_to_all_v(tri_comm *c, tri_tensor out, tri_tensor in, const int64_t *send_counts,
                             const int64_t *send_displs, const int64_t *recv_counts, const int64_t *recv_displs)
{
    nccl_impl *n = impl_of(c);
    size_t esize = tri_dtype_size(in.dtype);
    ncclDataType_t type = nccl_type(in.dtype);
    int me = c->rank;
    int rc = begin(n);
    if (rc)
        return rc;
    if (recv_counts[me] > 0)
        rc = TRI_CUDA(cudaMemcpyAsync((char *)out.data + (size_t)recv_displs[me] * esize,
                                      (const char *)in.data + (size_t)send_displs[me] * esize,
                                      (size_t)recv_counts[me] * esize, cudaMemcpyDeviceToDevice, n->stream));
    if (!rc) rc = TRI_NCCL(n, ncclGroupStart());
    if (rc)
        return end(n, rc);
    for (int r = 0; r < c->size && !rc; r++) {
        if (r == me)
            continue;
        if (send_counts[r] > 0)
            rc = TRI_NCCL(n, ncclSend((const char *)in.data + (size_t)send_displs[r] * esize, (size_t)send_counts[r],
                                      type, r, n->comm, n->stream));
        if (!rc && recv_counts[r] > 0)
            rc = TRI_NCCL(n, ncclRecv((char *)out.data + (size_t)recv_displs[r] * esize, (size_t)recv_counts[r], type,
                                      r, n->comm, n->stream));
    }
    /* the group is closed even after an error, so NCCL's group state stays balanced */
    int rc_end = TRI_NCCL(n, ncclGroupEnd());
    return end(n, rc ? rc : rc_end);
}

/* ---- non-blocking collectives: the compute stream waits for the operation's own event only at
 * tri_comm_wait, so the device computes while NCCL communicates ---- */

typedef struct nccl_request {
    cudaEvent_t done;
} nccl_request;

/* Enqueues a checked collective on the communication stream (after begin). */
static int enqueue(tri_comm *c, tri_comm_kind kind, tri_tensor out, tri_tensor in, tri_reduce_op op)
{
    nccl_impl *n = impl_of(c);
    if (kind == TRI_COMM_ALL_REDUCE)
        return TRI_NCCL(n, ncclAllReduce(out.data, out.data, (size_t)tri_tensor_numel(out), nccl_type(out.dtype),
                                         op == TRI_REDUCE_SUM ? ncclSum : ncclMax, n->comm, n->stream));
    if (kind == TRI_COMM_REDUCE_SCATTER)
        return TRI_NCCL(n, ncclReduceScatter(in.data, out.data, (size_t)tri_tensor_numel(out), nccl_type(in.dtype),
                                             ncclSum, n->comm, n->stream));
    return TRI_NCCL(n, ncclAllGather(in.data, out.data, (size_t)tri_tensor_numel(in), nccl_type(in.dtype), n->comm,
                                     n->stream));
}

/* The end of a non-blocking start whose work (status rc) is enqueued on the communication stream:
 * records r's event after it and hands r out as *handle, or frees r and returns the error. n->done marks
 * the comm stream's last operation, so the watch's time-out covers this one too (the compute stream
 * does not wait for it: only tri_comm_wait orders it before later ops). */
static int in_flight(nccl_impl *n, nccl_request *r, int rc, void **handle)
{
    if (!rc) rc = TRI_CUDA(cudaEventRecord(r->done, n->stream));
    if (!rc && (n->pending_since == 0 || cudaEventQuery(n->done) == cudaSuccess))
        n->pending_since = tri_now_s();
    if (!rc) rc = TRI_CUDA(cudaEventRecord(n->done, n->stream));
    if (rc) {
        if (r->done)
            cudaEventDestroy(r->done);
        free(r);
        return rc;
    }
    *handle = r;
    return TRI_OK;
}

static int nccl_start(tri_comm *c, tri_comm_kind kind, tri_tensor out, tri_tensor in, tri_reduce_op op,
                      void **handle)
{
    nccl_impl *n = impl_of(c);
    size_t part = tri_tensor_bytes(kind == TRI_COMM_ALL_GATHER ? in : out);
    char *mine = (char *)(kind == TRI_COMM_ALL_GATHER ? out.data : in.data) + (size_t)c->rank * part;
    void *own = kind == TRI_COMM_ALL_GATHER ? in.data : out.data;
    bool awkward = kind != TRI_COMM_ALL_REDUCE && (char *)own != mine &&
                   overlaps(out.data, tri_tensor_bytes(out), in.data, tri_tensor_bytes(in));
    if (awkward) /* overlapping but not in place: the blocking path's staging, completed now */
        return kind == TRI_COMM_REDUCE_SCATTER ? nccl_reduce_scatter(c, out, in) : nccl_all_gather(c, out, in);
    nccl_request *r = calloc(1, sizeof *r);
    if (!r)
        return TRI_ERR(TRI_ENOMEM, "nccl %s: out of memory", tri_comm_kind_name(kind));
    int rc = TRI_CUDA(cudaEventCreateWithFlags(&r->done, cudaEventDisableTiming));
    if (!rc) rc = begin(n);
    if (!rc) rc = enqueue(c, kind, out, in, op);
    return in_flight(n, r, rc, handle);
}

/* Batched p2p left in flight: ncclSend/ncclRecv grouped on the communication stream after the
 * compute stream's work so far, with the request's own event, which the compute stream waits for
 * only at tri_comm_wait: the ring's next block travels while the device computes. */
static int nccl_p2p_start(tri_comm *c, const tri_p2p *ops, int count, void **handle)
{
    nccl_impl *n = impl_of(c);
    nccl_request *r = calloc(1, sizeof *r);
    if (!r)
        return TRI_ERR(TRI_ENOMEM, "nccl p2p: out of memory");
    int rc = TRI_CUDA(cudaEventCreateWithFlags(&r->done, cudaEventDisableTiming));
    if (!rc) rc = begin(n);
    if (!rc) rc = grouped_p2p(n, ops, count);
    return in_flight(n, r, rc, handle);
}

static int nccl_wait(tri_comm *c, void *handle)
{
    nccl_request *r = handle;
    int rc = TRI_CUDA(cudaStreamWaitEvent(impl_of(c)->compute, r->done, 0));
    cudaEventDestroy(r->done); /* released once the recorded work completes */
    free(r);
    return rc;
}

static int nccl_test(tri_comm *c, void *handle, bool *done)
{
    nccl_request *r = handle;
    cudaError_t e = cudaEventQuery(r->done);
    *done = e != cudaErrorNotReady;
    if (e != cudaSuccess && e != cudaErrorNotReady) {
        int rc = tri_cuda_check(e, "cudaEventQuery (NCCL operation)", __FILE__, __LINE__);
        nccl_wait(c, handle);
        return rc;
    }
    return *done ? nccl_wait(c, handle) : watch(impl_of(c));
}

/* Host values through the comm's device scratch: copied in, reduced or broadcast, copied back. */
static int nccl_host_collective(tri_comm *c, tri_comm_kind kind, tri_tensor host, tri_reduce_op op, int root)
{
    nccl_impl *n = impl_of(c);
    size_t bytes = tri_tensor_bytes(host);
    int rc = TRI_OK;
    if (bytes > n->stage_bytes) {
        if (n->stage)
            n->dev->ops->free(n->dev, n->stage);
        n->stage = NULL;
        n->stage_bytes = 0;
        rc = n->dev->ops->alloc(n->dev, &n->stage, bytes);
        if (!rc)
            n->stage_bytes = bytes;
    }
    tri_tensor staged = host;
    staged.data = n->stage;
    if (!rc) rc = n->dev->ops->copy_from_host(n->dev, n->stage, host.data, bytes);
    if (!rc) rc = kind == TRI_COMM_BROADCAST ? tri_comm_broadcast(c, staged, root) : tri_comm_all_reduce(c, staged, op);
    if (!rc) rc = n->dev->ops->copy_to_host(n->dev, host.data, n->stage, bytes);
    return rc;
}

static int nccl_local_copy(tri_comm *c, void *dst, const void *src, size_t bytes)
{
    nccl_impl *n = impl_of(c);
    return n->dev->ops->copy(n->dev, dst, src, bytes);
}

/* Waits (host) until this comm's last operation is complete, watching for errors and time-outs. */
static int wait_done(nccl_impl *n)
{
    for (long polls = 0;; polls++) {
        cudaError_t e = cudaEventQuery(n->done);
        if (e == cudaSuccess) {
            n->pending_since = 0;
            return TRI_OK;
        }
        if (e != cudaErrorNotReady)
            return tri_cuda_check(e, "cudaEventQuery (NCCL operation)", __FILE__, __LINE__);
        int rc = watch(n);
        if (rc)
            return rc;
        if (n->aborted)
            return TRI_ERR(TRI_ECOMM, "the NCCL communicator was aborted");
        if (polls > 1000)
            pause_us(50);
    }
}

static int nccl_barrier(tri_comm *c)
{
    nccl_impl *n = impl_of(c);
    int rc = begin(n);
    if (!rc) rc = TRI_NCCL(n, ncclAllReduce(n->scratch, n->scratch, 1, ncclInt32, ncclSum, n->comm, n->stream));
    rc = end(n, rc);
    return rc ? rc : wait_done(n);
}

static void nccl_abort(tri_comm *c, int code)
{
    abort_comm(impl_of(c));
    MPI_Abort(MPI_COMM_WORLD, code ? code : 1);
}

static void release(nccl_impl *n)
{
    if (n->watching)
        tri_cuda_watch_remove(n->dev, n);
    if (n->comm && !n->aborted) {
        if (settle(n, n->comm, ncclCommFinalize(n->comm), "ncclCommFinalize", __FILE__, __LINE__) == TRI_OK)
            ncclCommDestroy(n->comm);
        else
            ncclCommAbort(n->comm);
    }
    if (n->scratch)
        tri_device_free(n->dev, n->scratch);
    if (n->stage)
        n->dev->ops->free(n->dev, n->stage);
    if (n->ready)
        cudaEventDestroy(n->ready);
    if (n->done)
        cudaEventDestroy(n->done);
    if (n->stream)
        cudaStreamDestroy(n->stream);
    free(n);
}

static void nccl_destroy(tri_comm *c)
{
    release(impl_of(c));
    free(c);
}

/* A tri_comm around an initialised communicator (owned from here on, also on failure). */
static int wrap(tri_comm **out, ncclComm_t comm, tri_device *dev, double timeout_s)
{
    tri_comm *c = calloc(1, sizeof *c);
    nccl_impl *n = calloc(1, sizeof *n);
    if (!c || !n) {
        free(c);
        free(n);
        ncclCommAbort(comm);
        return TRI_ERR(TRI_ENOMEM, "nccl comm: out of memory");
    }
    n->comm = comm;
    n->dev = dev;
    n->compute = tri_cuda_of(dev)->stream;
    n->timeout_s = timeout_s;
    n->self = c;
    c->timeout_s = timeout_s;
    int rc = TRI_NCCL(n, ncclCommUserRank(comm, &c->rank));
    if (!rc) rc = TRI_NCCL(n, ncclCommCount(comm, &c->size));
    if (!rc) rc = TRI_CUDA(cudaStreamCreateWithFlags(&n->stream, cudaStreamNonBlocking));
    if (!rc) rc = TRI_CUDA(cudaEventCreateWithFlags(&n->ready, cudaEventDisableTiming));
    if (!rc) rc = TRI_CUDA(cudaEventCreateWithFlags(&n->done, cudaEventDisableTiming));
    if (!rc) rc = tri_device_alloc(dev, (void **)&n->scratch, sizeof(int32_t));
    if (!rc) rc = TRI_CUDA(cudaMemsetAsync(n->scratch, 0, sizeof(int32_t), n->compute));
    if (!rc) rc = tri_cuda_watch_add(dev, watch, n);
    n->watching = rc == TRI_OK;
    if (rc) {
        release(n);
        free(c);
        return rc;
    }
    c->ops = &nccl_ops;
    c->impl = n;
    c->device_buffers = true;
    *out = c;
    return TRI_OK;
}

static int nccl_split(tri_comm *c, int color, int key, tri_comm **out)
{
    nccl_impl *n = impl_of(c);
    if (n->aborted)
        return TRI_ERR(TRI_ECOMM, "the NCCL communicator was aborted by an earlier error");
    ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
    config.blocking = 0;
    ncclComm_t nc = NULL;
    ncclResult_t r = ncclCommSplit(n->comm, color < 0 ? NCCL_SPLIT_NOCOLOR : color, key, &nc, &config);
    /* in progress: the new communicator's own state says when it is ready */
    int rc = settle(n, r == ncclInProgress && nc ? nc : n->comm, r, "ncclCommSplit", __FILE__, __LINE__);
    /* a non-blocking split leaves the parent in progress as well as the child (seen on the H200:
     * the next split of the parent was refused, "Attempt to use communicator before the previous
     * operation returned ncclSuccess"): wait until the parent is usable again too */
    ncclResult_t parent = ncclInProgress;
    if (!rc && ncclCommGetAsyncError(n->comm, &parent) != ncclSuccess)
        parent = ncclInternalError;
    if (!rc) rc = settle(n, n->comm, parent, "ncclCommSplit (parent)", __FILE__, __LINE__);
    if (rc || !nc)
        return rc;
    return wrap(out, nc, n->dev, limit(n));
}

static const tri_comm_ops nccl_ops = {
    .name = "nccl",
    .all_reduce = nccl_all_reduce,
    .reduce_scatter = nccl_reduce_scatter,
    .all_gather = nccl_all_gather,
    .broadcast = nccl_broadcast,
    .p2p = nccl_p2p,
    .all_to_all_v = nccl_all_to_all_v,
    .split = nccl_split,
    .barrier = nccl_barrier,
    .abort = nccl_abort,
    .destroy = nccl_destroy,
    .local_copy = nccl_local_copy,
    .host_collective = nccl_host_collective,
    .start = nccl_start,
    .p2p_start = nccl_p2p_start,
    .wait = nccl_wait,
    .test = nccl_test,
};

int tri_comm_nccl_create(tri_comm **out, const void *mpi_comm, tri_device *dev, double timeout_s)
{
    *out = NULL;
    if (!tri_device_is_cuda(dev))
        return TRI_ERR(TRI_EINVAL, "the NCCL comm needs a CUDA device (got %s)", dev ? dev->ops->name : "none");
    MPI_Comm mc = *(const MPI_Comm *)mpi_comm;
    int rank = 0, size = 0;
    int rc = TRI_MPI(MPI_Comm_rank(mc, &rank));
    if (!rc) rc = TRI_MPI(MPI_Comm_size(mc, &size));
    if (rc)
        return rc;
    /* rank 0's id, or its failure, reaches every rank, so no rank waits for a peer that gave up */
    struct {
        int ok;
        ncclUniqueId id;
    } msg;
    memset(&msg, 0, sizeof msg);
    ncclResult_t r = ncclSuccess;
    if (rank == 0) {
        r = ncclGetUniqueId(&msg.id);
        msg.ok = r == ncclSuccess;
    }
    rc = TRI_MPI(MPI_Bcast(&msg, (int)sizeof msg, MPI_BYTE, 0, mc));
    if (rc)
        return rc;
    if (!msg.ok)
        return rank == 0 ? TRI_ERR(TRI_ECOMM, "ncclGetUniqueId failed: %s", ncclGetErrorString(r))
                         : TRI_ERR(TRI_ECOMM, "rank 0 could not make an NCCL unique id");
    rc = TRI_CUDA(cudaSetDevice(dev->ordinal));
    if (rc)
        return rc;
    ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
    config.blocking = 0;
    ncclComm_t comm = NULL;
    nccl_impl probe = {.timeout_s = timeout_s};
    r = ncclCommInitRankConfig(&comm, size, msg.id, rank, &config);
    rc = settle(&probe, comm, r, "ncclCommInitRankConfig", __FILE__, __LINE__);
    if (rc) {
        if (comm && rc != TRI_ETIMEOUT) /* settle aborted it on a time-out */
            ncclCommAbort(comm);
        return tri_error_context(rc, "NCCL communicator of %d ranks (rank %d, GPU %d)", size, rank, dev->ordinal);
    }
    return wrap(out, comm, dev, timeout_s);
}
