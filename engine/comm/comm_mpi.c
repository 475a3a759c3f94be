/* engine/comm/comm_mpi.c - the MPI comm over host buffers (Open MPI launches the ranks).
 *
 * Each tri_comm owns a duplicate of its MPI communicator with MPI_ERRORS_RETURN, so a failing
 * call comes back as a status with MPI's own error string instead of killing the job. Batched p2p
 * is a set of MPI_Isend / MPI_Irecv completed by one MPI_Waitall; MPI's non-overtaking rule
 * matches messages between two ranks in the order they were posted. A receive must get exactly the
 * size it posted (MPI itself only refuses a message larger than the buffer). MPI counts are int:
 * larger tensors are refused, not wrapped. All-to-all with variable counts is MPI_Ialltoallv (its int
 * counts and displacements checked the same way).
 *
 * bf16 tensors travel as a committed datatype of one MPI_UINT16_T (raw bits; endianness converted
 * like any integer) and reduce with user-defined, commutative MPI ops: the sum widens both operands
 * exactly, adds in fp32 and rounds to bf16 (nearest even), the max keeps the larger value's bits.
 * MPI combines two buffers at a time, so a bf16 sum rounds at each combine and may differ in the last
 * bit from the thread comm's rank-order fp32 sum (engine/comm/comm.h). The type and ops belong to each
 * comm (its impl, made in wrap and freed by destroy): no process-wide state, nothing shared between
 * comms to count references of.
 *
 * Every operation is started non-blocking (MPI 3.1 §5.12) and completed by polling with a growing
 * sleep: a rank waiting for its peers gives its core to ranks that compute (Open MPI's blocking
 * waits spin, which slows the computing ranks down whenever ranks outnumber cores), and a wait that
 * outlasts the comm's timeout fails with TRI_ETIMEOUT naming the operation instead of hanging.
 * Reduce-scatter, all-gather and all-reduce can also be left in flight (tri_comm_*_start) and
 * completed later by the same polling wait. */
#include "engine/comm/comm.h"
#include "engine/core/clock.h"

#include <limits.h>
#include <stdio.h>
#include <mpi.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "engine/comm/comm_mpi_health.h"
#include "engine/comm/mpi_check.h"
#include "engine/core/log.h"
#include "engine/core/math.h"
#include "engine/core/status.h"

typedef struct mpi_comm {
    MPI_Comm comm;
    tri_mpi_health *health;    /* shared by the world comm and its splits; NULL: no probes */
    bool owns_health;          /* the world comm (tri_comm_mpi_create) frees it */
    MPI_Datatype bf16;         /* one bf16 element (MPI_DATATYPE_NULL until made) */
    MPI_Op bf16_sum, bf16_max; /* its reductions (MPI_OP_NULL until made) */
} mpi_comm;

static const tri_comm_ops mpi_ops;

int tri_mpi_check(int err, const char *call, const char *file, int line)
{
    if (err == MPI_SUCCESS)
        return TRI_OK;
    char text[MPI_MAX_ERROR_STRING];
    int len = 0;
    MPI_Error_string(err, text, &len);
    return tri_error_set(TRI_ECOMM, file, line, "%s failed: %s", call, text);
}

static MPI_Comm comm_of(tri_comm *c)
{
    return ((mpi_comm *)c->impl)->comm;
}

/* ---- dtypes and reductions ---- */

/* MPI's element type for a Trident dtype (comm.c has refused any other). */
static MPI_Datatype mpi_type(tri_comm *c, tri_dtype dtype)
{
    switch (dtype) {
    case TRI_BF16: return ((mpi_comm *)c->impl)->bf16;
    case TRI_I32: return MPI_INT32_T;
    case TRI_I64: return MPI_INT64_T;
    case TRI_F32: break;
    }
    return MPI_FLOAT;
}

/* The MPI op reducing `dtype` by `op`: MPI's own, or this comm's bf16 ops. */
static MPI_Op mpi_op(tri_comm *c, tri_dtype dtype, tri_reduce_op op)
{
    if (dtype == TRI_BF16) {
        mpi_comm *mc = c->impl;
        return op == TRI_REDUCE_SUM ? mc->bf16_sum : mc->bf16_max;
    }
    return op == TRI_REDUCE_SUM ? MPI_SUM : MPI_MAX;
}

/* inout[i] = bf16(float(in[i]) + float(inout[i])): widened exactly, added in fp32, rounded to
 * nearest even. *len counts elements of the comm's bf16 type (one uint16 each). */
static void bf16_sum_op(void *in, void *inout, int *len, MPI_Datatype *type)
{
    (void)type;
    const uint16_t *a = in;
    uint16_t *b = inout;
    for (int i = 0; i < *len; i++)
        b[i] = tri_float_to_bf16(tri_bf16_to_float(a[i]) + tri_bf16_to_float(b[i]));
}

/* inout[i] = the larger of in[i] and inout[i], its bits unchanged (exact). */
static void bf16_max_op(void *in, void *inout, int *len, MPI_Datatype *type)
{
    (void)type;
    const uint16_t *a = in;
    uint16_t *b = inout;
    for (int i = 0; i < *len; i++)
        if (tri_bf16_to_float(a[i]) > tri_bf16_to_float(b[i]))
            b[i] = a[i];
}

/* Makes this comm's bf16 datatype (committed) and its sum and max ops; free_bf16 frees what was
 * made, also after a failure here. */
static int make_bf16(mpi_comm *mc)
{
    int rc = TRI_MPI(MPI_Type_contiguous(1, MPI_UINT16_T, &mc->bf16));
    if (!rc) rc = TRI_MPI(MPI_Type_commit(&mc->bf16));
    if (!rc) rc = TRI_MPI(MPI_Type_set_name(mc->bf16, "trident_bf16"));
    if (!rc) rc = TRI_MPI(MPI_Op_create(bf16_sum_op, 1, &mc->bf16_sum));
    if (!rc) rc = TRI_MPI(MPI_Op_create(bf16_max_op, 1, &mc->bf16_max));
    return rc ? tri_error_context(rc, "mpi comm: making the bf16 datatype and reductions") : TRI_OK;
}

/* Frees this comm's bf16 datatype and ops (MPI must not be finalized). Operations still in flight
 * that use them (an abandoned wait) keep them alive inside MPI until they complete. */
static void free_bf16(mpi_comm *mc)
{
    if (mc->bf16_max != MPI_OP_NULL)
        MPI_Op_free(&mc->bf16_max);
    if (mc->bf16_sum != MPI_OP_NULL)
        MPI_Op_free(&mc->bf16_sum);
    if (mc->bf16 != MPI_DATATYPE_NULL)
        MPI_Type_free(&mc->bf16);
}

/* t's element count as an MPI count; TRI_EINVAL above INT_MAX, which a cast would wrap
 * (2^32 + 3 elements would move 3). */
static int count_of(tri_tensor t, const char *op, int *count)
{
    int64_t n = tri_tensor_numel(t);
    if (n > INT_MAX)
        return TRI_ERR(TRI_EINVAL, "mpi %s: %lld elements exceed MPI's int count limit %d", op, (long long)n,
                       INT_MAX);
    *count = (int)n;
    return TRI_OK;
}

#define POLL_SPINS 4096          /* tests before the first sleep: short waits stay fast */
#define POLL_MAX_SLEEP_NS 10000L
#define PROBE_GRACE_S 1.0        /* how long a timed-out wait waits for the peers' liveness answers */
#define ALERT_AFTER_S 0.05       /* a wait this long after a stop signal probes once ... */
#define ALERT_GRACE_S 0.4        /* ... for this long (mpirun kills 1 s after its SIGTERM) */
#define VERDICT_LINGER_S 1         /* before aborting, for the ranks a verdict reached to report it */

/* "phase step, iteration 12" from the comm's watch (or "" when no phase was set). */
static void where(tri_comm *c, char *buf, size_t n)
{
    const tri_comm_watch *w = tri_comm_phase(c);
    if (!w->phase[0])
        snprintf(buf, n, "phase unknown");
    else if (w->iteration > 0)
        snprintf(buf, n, "phase %s, iteration %lld", w->phase, (long long)w->iteration);
    else
        snprintf(buf, n, "phase %s", w->phase);
}

/* The failure of a wait for operation `seq` that outlasted the timeout: probes the world for the
 * ranks that do not answer, tells the others, and returns TRI_ETIMEOUT naming the silent ranks,
 * the operation, its sequence number, its group and the phase. */
static int timed_out(tri_comm *c, const char *op, uint64_t seq)
{
    tri_mpi_health *h = ((mpi_comm *)c->impl)->health;
    char at[96], members[160] = "", failed[256] = "", text[768];
    where(c, at, sizeof at);
    if (!h)
        return TRI_ERR(TRI_ETIMEOUT, "mpi %s (collective #%llu on a group of %d ranks, rank %d) did not complete "
                       "within %.0f s in %s: a peer has died or stalled", op, (unsigned long long)seq, c->size,
                       c->rank, c->timeout_s, at);
    tri_mpi_health_members(h, ((mpi_comm *)c->impl)->comm, members, sizeof members);
    int missing = tri_mpi_health_probe(h, PROBE_GRACE_S);
    size_t used = 0;
    for (int r = 0; r < h->size && used < sizeof failed; r++)
        if (!h->alive[r]) {
            int w = snprintf(failed + used, sizeof failed - used, "%s%d", used ? ", " : "", r);
            used += w > 0 ? (size_t)w : 0;
        }
    if (missing > 0)
        snprintf(text, sizeof text, "rank%s %s did not answer a liveness probe within %.1f s (dead or stalled): "
                 "mpi %s, collective #%llu on the group of world ranks %s, did not complete within %.0f s in %s "
                 "(detected by rank %d)", missing > 1 ? "s" : "", failed, PROBE_GRACE_S, op,
                 (unsigned long long)seq, members, c->timeout_s, at, h->rank);
    else
        snprintf(text, sizeof text, "mpi %s, collective #%llu on the group of world ranks %s, did not complete "
                 "within %.0f s in %s although every rank answered a liveness probe (a slow rank or ranks "
                 "calling collectives in different orders; detected by rank %d)", op, (unsigned long long)seq,
                 members, c->timeout_s, at, h->rank);
    tri_mpi_health_notify(h, text);
    return TRI_ERR(TRI_ETIMEOUT, "%s", text);
}

/* A stop signal arrived while this wait lasts: the launcher may be about to kill the job because a
 * rank died, so the ranks that do not answer a short probe are logged now (the wait goes on). */
static void alert_probe(tri_comm *c, const char *op, uint64_t seq)
{
    tri_mpi_health *h = ((mpi_comm *)c->impl)->health;
    char at[96], members[160] = "", failed[256] = "";
    int missing = tri_mpi_health_probe(h, ALERT_GRACE_S);
    if (missing == 0)
        return;
    size_t used = 0;
    for (int r = 0; r < h->size && used < sizeof failed; r++)
        if (!h->alive[r]) {
            int w = snprintf(failed + used, sizeof failed - used, "%s%d", used ? ", " : "", r);
            used += w > 0 ? (size_t)w : 0;
        }
    where(c, at, sizeof at);
    tri_mpi_health_members(h, ((mpi_comm *)c->impl)->comm, members, sizeof members);
    tri_log("engine: stop signal during a wait: rank%s %s did not answer a liveness probe within %.1f s (dead, "
            "stalled or computing); rank %d waits in mpi %s, collective #%llu on the group of world ranks %s, in %s",
            missing > 1 ? "s" : "", failed, ALERT_GRACE_S, h->rank, op, (unsigned long long)seq, members, at);
}

/* A verdict another rank sent while this one waited for operation `seq`. */
static int noticed(tri_comm *c, const char *op, uint64_t seq)
{
    tri_mpi_health *h = ((mpi_comm *)c->impl)->health;
    char at[96], members[160] = "";
    where(c, at, sizeof at);
    tri_mpi_health_members(h, ((mpi_comm *)c->impl)->comm, members, sizeof members);
    return TRI_ERR(TRI_ETIMEOUT, "%s; rank %d stopped waiting in mpi %s, collective #%llu on the group of world "
                   "ranks %s, in %s", h->notice, h->rank, op, (unsigned long long)seq, members, at);
}

/* Completes n requests by MPI_Testall: 4096 tests, then sleeps growing from 1 us to 10 us
 * (measured: tp 2 x pp 2 on 2 cores, 30 iterations in 12.0 s against 12.5 s with MPI_Wait*). *mpi_err receives
 * MPI's code (MPI_ERR_IN_STATUS when a request failed: see st). TRI_ETIMEOUT after c->timeout_s,
 * naming operation number `seq`. */
static int wait_all(tri_comm *c, int n, MPI_Request *req, MPI_Status *st, const char *op, uint64_t seq,
                    int *mpi_err)
{
    double start = tri_now_s();
    long sleep_ns = 1000;
    tri_mpi_health *h = ((mpi_comm *)c->impl)->health;
    const tri_comm_watch *watch = tri_comm_phase(c);
    double alert_since = 0.0;
    for (long k = 0;; k++) {
        int done = 0;
        *mpi_err = MPI_Testall(n, req, &done, st ? st : MPI_STATUSES_IGNORE);
        if (done || *mpi_err != MPI_SUCCESS)
            return TRI_OK;
        if (h && (k & 255) == 0) {
            tri_mpi_health_service(h); /* answer probes; a peer's verdict ends this wait too */
            if (h->notice[0])
                return noticed(c, op, seq);
            if (watch->alert && *watch->alert && alert_since >= 0) {
                double now = tri_now_s();
                if (alert_since == 0.0)
                    alert_since = now;
                else if (now - alert_since > ALERT_AFTER_S && !h->alerted) {
                    h->alerted = true; /* once per run: the probe costs ALERT_GRACE_S when a rank is gone */
                    alert_probe(c, op, seq);
                    alert_since = -1.0;
                }
            }
        }
        if (c->timeout_s > 0 && (k & 255) == 0 && tri_now_s() - start > c->timeout_s)
            return timed_out(c, op, seq);
        if (k < POLL_SPINS)
            continue;
        struct timespec ts = {0, sleep_ns};
        nanosleep(&ts, NULL);
        sleep_ns = sleep_ns * 2 < POLL_MAX_SLEEP_NS ? sleep_ns * 2 : POLL_MAX_SLEEP_NS;
    }
}

static bool overlaps(const void *a, size_t an, const void *b, size_t bn)
{
    const char *x = a, *y = b;
    return x < y + bn && y < x + an;
}

/* ---- collectives: started non-blocking, completed by polling (blocking = start + wait) ---- */

/* A collective in flight. A reduce-scatter whose output overlaps its input runs in place in the
 * input (MPI_IN_PLACE leaves the rank's result at the start of the buffer) and moves its result to
 * the output on completion. */
typedef struct mpi_request {
    MPI_Request req;
    /* a p2p batch (tri_comm_p2p_start): its n requests, statuses, ops and element counts */
    int n;
    MPI_Request *reqs;
    MPI_Status *st;
    tri_p2p *ops;
    int *counts;
    const char *call, *op;
    uint64_t seq;
    void *move_dst;
    const void *move_src;
    size_t move_bytes;
} mpi_request;

/* The verdict of a completed request (MPI's code err); moves the result and frees the request. */
static int complete(mpi_request *r, int err)
{
    int rc = tri_mpi_check(err, r->call, __FILE__, __LINE__);
    if (!rc && r->move_bytes)
        memmove(r->move_dst, r->move_src, r->move_bytes);
    free(r);
    return rc;
}

static int mpi_start(tri_comm *c, tri_comm_kind kind, tri_tensor out, tri_tensor in, tri_reduce_op op,
                     void **handle)
{
    int n = 0, started = MPI_SUCCESS;
    const char *name = tri_comm_kind_name(kind);
    int rc = count_of(kind == TRI_COMM_ALL_GATHER ? in : out, name, &n);
    mpi_request *r = rc ? NULL : calloc(1, sizeof *r);
    if (!rc && !r)
        rc = TRI_ERR(TRI_ENOMEM, "mpi %s: out of memory", name);
    if (rc)
        return rc;
    r->op = name;
    r->seq = c->seq;
    MPI_Datatype type = mpi_type(c, in.dtype);
    MPI_Op reduce = mpi_op(c, in.dtype, kind == TRI_COMM_ALL_REDUCE ? op : TRI_REDUCE_SUM);
    if (kind == TRI_COMM_ALL_REDUCE) {
        r->call = "MPI_Iallreduce";
        started = MPI_Iallreduce(MPI_IN_PLACE, out.data, n, type, reduce, comm_of(c), &r->req);
    } else if (kind == TRI_COMM_REDUCE_SCATTER) {
        r->call = "MPI_Ireduce_scatter_block";
        if (overlaps(out.data, tri_tensor_bytes(out), in.data, tri_tensor_bytes(in))) {
            r->move_dst = out.data;
            r->move_src = in.data;
            r->move_bytes = tri_tensor_bytes(out);
            started = MPI_Ireduce_scatter_block(MPI_IN_PLACE, in.data, n, type, reduce, comm_of(c), &r->req);
        } else {
            started = MPI_Ireduce_scatter_block(in.data, out.data, n, type, reduce, comm_of(c), &r->req);
        }
    } else {
        r->call = "MPI_Iallgather";
        size_t part = tri_tensor_bytes(in);
        char *mine = (char *)out.data + (size_t)c->rank * part;
        bool overlap = overlaps(out.data, tri_tensor_bytes(out), in.data, part);
        if ((char *)in.data != mine && overlap)
            memmove(mine, in.data, part);
        if ((char *)in.data == mine || overlap)
            started = MPI_Iallgather(MPI_IN_PLACE, 0, MPI_DATATYPE_NULL, out.data, n, type, comm_of(c), &r->req);
        else
            started = MPI_Iallgather(in.data, n, type, out.data, n, type, comm_of(c), &r->req);
    }
    if (started != MPI_SUCCESS) {
        rc = tri_mpi_check(started, r->call, __FILE__, __LINE__);
        free(r);
        return rc;
    }
    *handle = r;
    return TRI_OK;
}

static int mpi_p2p_wait(tri_comm *c, mpi_request *r);
static int mpi_p2p_test(tri_comm *c, mpi_request *r, bool *done);

static int mpi_wait(tri_comm *c, void *handle)
{
    mpi_request *r = handle;
    if (r->reqs)
        return mpi_p2p_wait(c, r);
    int err = MPI_SUCCESS, rc = wait_all(c, 1, &r->req, NULL, r->op, r->seq, &err);
    if (rc) {
        free(r); /* the job is being torn down: the MPI request is abandoned */
        return rc;
    }
    return complete(r, err);
}

static int mpi_test(tri_comm *c, void *handle, bool *done)
{
    mpi_request *r = handle;
    if (r->reqs)
        return mpi_p2p_test(c, r, done);
    int flag = 0, err = MPI_Test(&r->req, &flag, MPI_STATUS_IGNORE);
    *done = flag || err != MPI_SUCCESS;
    return *done ? complete(r, err) : TRI_OK;
}

static int blocking(tri_comm *c, tri_comm_kind kind, tri_tensor out, tri_tensor in, tri_reduce_op op)
{
    void *handle = NULL;
    int rc = mpi_start(c, kind, out, in, op, &handle);
    return rc ? rc : mpi_wait(c, handle);
}

static int mpi_all_reduce(tri_comm *c, tri_tensor x, tri_reduce_op op)
{
    return blocking(c, TRI_COMM_ALL_REDUCE, x, x, op);
}

static int mpi_reduce_scatter(tri_comm *c, tri_tensor out, tri_tensor in)
{
    return blocking(c, TRI_COMM_REDUCE_SCATTER, out, in, TRI_REDUCE_SUM);
}

static int mpi_all_gather(tri_comm *c, tri_tensor out, tri_tensor in)
{
    return blocking(c, TRI_COMM_ALL_GATHER, out, in, TRI_REDUCE_SUM);
}

/* Waits for one request started by `call` (its MPI return code): broadcast and barrier. */
static int finish(tri_comm *c, int started, MPI_Request *req, const char *call, const char *op)
{
    int rc = tri_mpi_check(started, call, __FILE__, __LINE__), err = MPI_SUCCESS;
    if (!rc) rc = wait_all(c, 1, req, NULL, op, c->seq, &err);
    if (!rc && err != MPI_SUCCESS)
        rc = tri_mpi_check(err, call, __FILE__, __LINE__);
    return rc;
}

static int mpi_broadcast(tri_comm *c, tri_tensor x, int root)
{
    int n = 0, rc = count_of(x, "broadcast", &n);
    MPI_Request req;
    if (rc)
        return rc;
    return finish(c, MPI_Ibcast(x.data, n, mpi_type(c, x.dtype), root, comm_of(c), &req), &req, "MPI_Ibcast",
                  "broadcast");
}

/* The status of a completed batch: the first request MPI failed (a message larger than its
 * receive is MPI_ERR_TRUNCATE), else the first receive that got fewer elements than it posted. */
static int p2p_verdict(tri_comm *c, const tri_p2p *ops, const int *counts, MPI_Status *st, int n, int err)
{
    for (int i = 0; i < n && err == MPI_ERR_IN_STATUS; i++) {
        int e = st[i].MPI_ERROR, cls = 0;
        if (e == MPI_SUCCESS || e == MPI_ERR_PENDING)
            continue;
        MPI_Error_class(e, &cls);
        if (cls == MPI_ERR_TRUNCATE)
            return TRI_ERR(TRI_ECOMM, "mpi p2p: rank %d sent more than the %d %s elements rank %d expects "
                           "(tag %d)", ops[i].peer, counts[i], tri_dtype_name(ops[i].t.dtype), c->rank,
                           ops[i].tag);
        return tri_error_context(tri_mpi_check(e, ops[i].send ? "MPI_Isend" : "MPI_Irecv", __FILE__, __LINE__),
                                 "mpi p2p with rank %d", ops[i].peer);
    }
    if (err != MPI_SUCCESS)
        return tri_mpi_check(err, "MPI_Testall", __FILE__, __LINE__);
    for (int i = 0; i < n; i++) {
        int got = 0;
        if (ops[i].send)
            continue;
        MPI_Get_count(&st[i], mpi_type(c, ops[i].t.dtype), &got);
        if (got != counts[i])
            return TRI_ERR(TRI_ECOMM, "mpi p2p: rank %d sent %d %s elements, rank %d expects %d (tag %d)",
                           ops[i].peer, got, tri_dtype_name(ops[i].t.dtype), c->rank, counts[i], ops[i].tag);
    }
    return TRI_OK;
}

static void p2p_free(mpi_request *r)
{
    free(r->reqs);
    free(r->st);
    free(r->ops);
    free(r->counts);
    free(r);
}

/* Posts a batch: MPI_Isend / MPI_Irecv for each op, every count checked before anything is posted;
 * completed by mpi_wait (polling MPI_Testall) or mpi_test. */
static int mpi_p2p_start(tri_comm *c, const tri_p2p *ops, int n, void **handle)
{
    mpi_request *r = calloc(1, sizeof *r);
    if (r) {
        r->reqs = calloc((size_t)n, sizeof *r->reqs);
        r->st = calloc((size_t)n, sizeof *r->st);
        r->ops = malloc((size_t)n * sizeof *r->ops);
        r->counts = calloc((size_t)n, sizeof *r->counts);
    }
    int rc = r && r->reqs && r->st && r->ops && r->counts ? TRI_OK : TRI_ERR(TRI_ENOMEM, "mpi p2p: out of memory");
    if (rc) {
        if (r)
            p2p_free(r);
        return rc;
    }
    r->n = n;
    r->call = "MPI_Testall";
    r->op = "p2p";
    r->seq = c->seq;
    memcpy(r->ops, ops, (size_t)n * sizeof *ops);
    for (int i = 0; i < n && !rc; i++)
        rc = count_of(ops[i].t, "p2p", &r->counts[i]);
    int posted = 0;
    for (; posted < n && !rc; posted++) {
        const tri_p2p *o = &ops[posted];
        if (o->send)
            rc = TRI_MPI(MPI_Isend(o->t.data, r->counts[posted], mpi_type(c, o->t.dtype), o->peer, o->tag,
                                   comm_of(c), &r->reqs[posted]));
        else
            rc = TRI_MPI(MPI_Irecv(o->t.data, r->counts[posted], mpi_type(c, o->t.dtype), o->peer, o->tag,
                                   comm_of(c), &r->reqs[posted]));
    }
    if (rc) { /* requests already posted are abandoned: the job is being torn down */
        p2p_free(r);
        return rc;
    }
    *handle = r;
    return TRI_OK;
}

static int mpi_p2p_wait(tri_comm *c, mpi_request *r)
{
    int err = MPI_SUCCESS, rc = wait_all(c, r->n, r->reqs, r->st, r->op, r->seq, &err);
    if (!rc)
        rc = p2p_verdict(c, r->ops, r->counts, r->st, r->n, err);
    p2p_free(r);
    return rc;
}

static int mpi_p2p_test(tri_comm *c, mpi_request *r, bool *done)
{
    int flag = 0, err = MPI_Testall(r->n, r->reqs, &flag, r->st);
    *done = flag || err != MPI_SUCCESS;
    if (!*done)
        return TRI_OK;
    int rc = p2p_verdict(c, r->ops, r->counts, r->st, r->n, err);
    p2p_free(r);
    return rc;
}

static int mpi_p2p(tri_comm *c, const tri_p2p *ops, int n)
{
    void *handle = NULL;
    int rc = mpi_p2p_start(c, ops, n, &handle);
    return rc ? rc : mpi_p2p_wait(c, handle);
}

/* counts[r] or displs[r] as MPI's int; TRI_EINVAL above INT_MAX (an int would wrap). */
static int int_of(int64_t v, const char *what, int r, int *out)
{
    if (v > INT_MAX)
        return TRI_ERR(TRI_EINVAL, "mpi all_to_all_v: %s[%d] = %lld exceeds MPI's int count limit %d", what, r,
                       (long long)v, INT_MAX);
    *out = (int)v;
    return TRI_OK;
}

/* MPI_Ialltoallv with this comm's element type (bf16: its 16-bit type), completed by the polling wait.
 * A message larger than its receive block is MPI_ERR_TRUNCATE (TRI_ECOMM). */
static int mpi_all_to_all_v(tri_comm *c, tri_tensor out, tri_tensor in, const int64_t *send_counts,
                            const int64_t *send_displs, const int64_t *recv_counts, const int64_t *recv_displs)
{
    int n = c->size;
    int *v = calloc((size_t)n * 4, sizeof *v); /* send counts, send displs, recv counts, recv displs */
    if (!v)
        return TRI_ERR(TRI_ENOMEM, "mpi all_to_all_v: out of memory for %d ranks' counts", n);
    int rc = TRI_OK;
    for (int r = 0; r < n && !rc; r++) {
        rc = int_of(send_counts[r], "send_counts", r, &v[r]);
        if (!rc) rc = int_of(send_displs[r], "send_displs", r, &v[n + r]);
        if (!rc) rc = int_of(recv_counts[r], "recv_counts", r, &v[2 * n + r]);
        if (!rc) rc = int_of(recv_displs[r], "recv_displs", r, &v[3 * n + r]);
    }
    MPI_Request req;
    MPI_Datatype type = mpi_type(c, in.dtype);
    if (!rc)
        rc = finish(c, MPI_Ialltoallv(in.data, v, v + n, type, out.data, v + 2 * n, v + 3 * n, type, comm_of(c),
                                      &req), &req, "MPI_Ialltoallv", "all_to_all_v");
    free(v);
    return rc;
}

static int wrap(tri_comm **out, MPI_Comm comm, tri_mpi_health *health)
{
    tri_comm *c = calloc(1, sizeof *c);
    mpi_comm *mc = calloc(1, sizeof *mc);
    if (!c || !mc) {
        free(c);
        free(mc);
        return TRI_ERR(TRI_ENOMEM, "mpi comm: out of memory");
    }
    mc->comm = comm;
    mc->health = health;
    mc->bf16 = MPI_DATATYPE_NULL;
    mc->bf16_sum = mc->bf16_max = MPI_OP_NULL;
    c->ops = &mpi_ops;
    c->impl = mc;
    int rc = TRI_MPI(MPI_Comm_set_errhandler(comm, MPI_ERRORS_RETURN));
    if (!rc) rc = TRI_MPI(MPI_Comm_rank(comm, &c->rank));
    if (!rc) rc = TRI_MPI(MPI_Comm_size(comm, &c->size));
    if (!rc) rc = make_bf16(mc);
    if (rc) {
        free_bf16(mc);
        free(mc);
        free(c);
        return rc;
    }
    *out = c;
    return TRI_OK;
}

static int mpi_split(tri_comm *c, int color, int key, tri_comm **out)
{
    MPI_Comm nc = MPI_COMM_NULL;
    int rc = TRI_MPI(MPI_Comm_split(comm_of(c), color < 0 ? MPI_UNDEFINED : color, key, &nc));
    if (rc || nc == MPI_COMM_NULL)
        return rc;
    rc = wrap(out, nc, ((mpi_comm *)c->impl)->health);
    if (rc)
        MPI_Comm_free(&nc);
    return rc;
}

static int mpi_barrier(tri_comm *c)
{
    MPI_Request req;
    return finish(c, MPI_Ibarrier(comm_of(c), &req), &req, "MPI_Ibarrier", "barrier");
}

/* Lets the ranks a verdict reached report it before the abort ends them all (comm_mpi_health.h):
 * a sleep with no MPI call, as the failed collective may still complete into a freed buffer. */
static void mpi_abort(tri_comm *c, int code)
{
    tri_mpi_health *h = ((mpi_comm *)c->impl)->health;
    if (h && tri_mpi_health_in_verdict(h))
        nanosleep(&(struct timespec){VERDICT_LINGER_S, 0}, NULL);
    MPI_Abort(comm_of(c), code ? code : 1);
}

static void mpi_destroy(tri_comm *c)
{
    mpi_comm *mc = c->impl;
    int finalized = 0;
    MPI_Finalized(&finalized);
    if (!finalized) {
        MPI_Comm_free(&mc->comm);
        free_bf16(mc);
    }
    if (mc->owns_health)
        tri_mpi_health_destroy(mc->health);
    free(mc);
    free(c);
}

static const tri_comm_ops mpi_ops = {
    .name = "mpi",
    .all_reduce = mpi_all_reduce,
    .reduce_scatter = mpi_reduce_scatter,
    .all_gather = mpi_all_gather,
    .broadcast = mpi_broadcast,
    .p2p = mpi_p2p,
    .p2p_start = mpi_p2p_start,
    .all_to_all_v = mpi_all_to_all_v,
    .split = mpi_split,
    .barrier = mpi_barrier,
    .abort = mpi_abort,
    .destroy = mpi_destroy,
    .start = mpi_start,
    .wait = mpi_wait,
    .test = mpi_test,
};

int tri_comm_mpi_create(tri_comm **out, const void *mpi_comm_handle)
{
    MPI_Comm dup = MPI_COMM_NULL;
    int rc = TRI_MPI(MPI_Comm_dup(*(const MPI_Comm *)mpi_comm_handle, &dup));
    if (rc)
        return rc;
    tri_mpi_health *health = NULL;
    rc = tri_mpi_health_create(&health, dup);
    if (!rc) rc = wrap(out, dup, health);
    if (rc) {
        tri_mpi_health_destroy(health);
        MPI_Comm_free(&dup);
        return rc;
    }
    ((mpi_comm *)(*out)->impl)->owns_health = true;
    return TRI_OK;
}
