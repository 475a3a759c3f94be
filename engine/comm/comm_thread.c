/* engine/comm/comm_thread.c - the thread-rank comm: N pthreads in one process act as N ranks.
 *
 * Criterion forks every test and must not call MPI_Init, so parallel algorithms are tested on
 * thread ranks. A collective posts each rank's buffer pointer in a shared table, meets at a
 * barrier, checks that every rank made the same call (kind, size, dtype, op, root: a mismatch is
 * TRI_EINVAL on every rank, where MPI would misbehave silently), lets every rank compute its result
 * from the others' buffers (summing in rank order, so results are deterministic; bf16 sums in fp32,
 * rounded once), and meets again before anyone reuses a buffer. All-to-all with variable counts
 * posts each rank's count arrays too, so a pair of ranks disagreeing on a count is TRI_EINVAL on every
 * rank (MPI would truncate or leave a block short). Point-to-point messages go through
 * per-(sender, receiver) FIFO queues: a batch posts all its sends and its receives, completes its
 * receives by copying from matching posted sends, in the order receives were posted (a receive of
 * the wrong size takes the message and fails, as in MPI), then waits until its own sends have been
 * consumed (so send buffers may be reused on return). A non-blocking batch (tri_comm_p2p_start)
 * returns after posting; the peers copy its sends out whenever they complete their receives.
 * Every wait gives up after the group's timeout or when any rank aborts, so a failing test reports
 * instead of hanging. */
#include "engine/comm/comm.h"

#include <errno.h>
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "engine/core/math.h"
#include "engine/core/status.h"

typedef struct message {
    struct message *next;
    const void *buf;
    size_t bytes;
    int tag;
    int consumed;
} message;

/* One rank's collective call, posted so that every rank can check they all made the same one. */
typedef enum {
    CALL_ALL_REDUCE, CALL_REDUCE_SCATTER, CALL_ALL_GATHER, CALL_BROADCAST, CALL_BARRIER, CALL_SPLIT,
    CALL_ALL_TO_ALL_V
} call_kind;

typedef struct call {
    call_kind kind;
    tri_dtype dtype;
    int64_t numel;                /* all_reduce, broadcast: x; reduce_scatter: out; all_gather: in */
    int arg;                      /* the reduce op, or the broadcast root */
} call;

/* State shared by the ranks of one group (the world or a split of it). */
typedef struct shared {
    pthread_mutex_t mu;
    pthread_cond_t cv;
    int size;
    double timeout_s;
    tri_thread_group *group;      /* the whole job: its abort flag */
    int refs;                     /* comms holding this group (and the thread group, for the world) */
    /* barrier */
    int arrived;
    atomic_ulong generation; /* barriers completed (written under mu; read by spinning waiters too) */
    /* collectives: each rank's call (two tables, used by turns; see enter), posted pointers and
     * scalar arguments */
    call *calls;
    void **inbuf;
    void **outbuf;
    int *ints;
    void **ptrs;
    /* all_to_all_v: each rank's four count/displacement arrays (send counts, send displs, recv
     * counts, recv displs), a2a[4 * rank + k] */
    const int64_t **a2a;
    /* p2p: queue[src * size + dst] */
    message **queue;
} shared;

struct tri_thread_group {
    int size;
    double timeout_s;
    /* The first abort's code (0 while none) and the world rank that raised it (-1). Atomic: each
     * group of the job has its own mutex, and every group's waits read the flag. */
    atomic_int aborted;
    atomic_int origin;
    shared *world;
};

struct posted;

typedef struct thread_comm {
    shared *sh;
    int world_rank;
    unsigned long entered;        /* collectives this rank has entered on this comm */
    struct posted *posted;        /* this rank's p2p receives in flight, in posting order */
    /* The reductions' result before it is copied over the rank's own buffer (which the other ranks
     * are still reading): kept from call to call and grown to the largest, so that a training step
     * does not map and fault in fresh pages at every all-reduce and reduce-scatter (under
     * AddressSanitizer every block above 128 KiB is a fresh mapping, and a freed one waits out the
     * quarantine) */
    void *scratch;
    size_t scratch_bytes;
} thread_comm;

static const tri_comm_ops thread_ops;

static int shared_create(shared **out, int size, double timeout_s, tri_thread_group *group)
{
    shared *s = calloc(1, sizeof *s);
    if (!s)
        return TRI_ERR(TRI_ENOMEM, "thread comm: out of memory");
    s->size = size;
    s->timeout_s = timeout_s;
    s->group = group;
    s->refs = size;
    s->calls = calloc((size_t)size * 2, sizeof *s->calls);
    s->inbuf = calloc((size_t)size, sizeof *s->inbuf);
    s->outbuf = calloc((size_t)size, sizeof *s->outbuf);
    s->ints = calloc((size_t)size * 2, sizeof *s->ints);
    s->ptrs = calloc((size_t)size, sizeof *s->ptrs);
    s->a2a = calloc((size_t)size * 4, sizeof *s->a2a);
    s->queue = calloc((size_t)size * (size_t)size, sizeof *s->queue);
    if (!s->calls || !s->inbuf || !s->outbuf || !s->ints || !s->ptrs || !s->a2a || !s->queue) {
        free(s->calls); free(s->inbuf); free(s->outbuf); free(s->ints); free(s->ptrs); free(s->a2a);
        free(s->queue);
        free(s);
        return TRI_ERR(TRI_ENOMEM, "thread comm: out of memory");
    }
    atomic_init(&s->generation, 0);
    pthread_mutex_init(&s->mu, NULL);
    pthread_cond_init(&s->cv, NULL);
    *out = s;
    return TRI_OK;
}

static void shared_release(shared *s)
{
    pthread_mutex_lock(&s->mu);
    int left = --s->refs;
    pthread_mutex_unlock(&s->mu);
    if (left > 0)
        return;
    pthread_mutex_destroy(&s->mu);
    pthread_cond_destroy(&s->cv);
    free(s->calls); free(s->inbuf); free(s->outbuf); free(s->ints); free(s->ptrs); free(s->a2a);
    free(s->queue);
    free(s);
}

static struct timespec deadline(double seconds)
{
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    time_t whole = (time_t)seconds;
    long frac = (long)((seconds - (double)whole) * 1e9);
    ts.tv_sec += whole;
    ts.tv_nsec += frac;
    if (ts.tv_nsec >= 1000000000L) {
        ts.tv_sec += 1;
        ts.tv_nsec -= 1000000000L;
    }
    return ts;
}

/* Waits on the group's condition (mutex held), in slices of 20 ms so that an abort raised on any
 * group of the job (each group has its own condition variable) is seen promptly.
 * TRI_ETIMEOUT / TRI_ECOMM (aborted) on failure. */
static int wait_locked(shared *s, const struct timespec *until, const char *what)
{
    if (atomic_load(&s->group->aborted))
        return TRI_ERR(TRI_ECOMM, "thread comm: %s interrupted: another rank aborted", what);
    struct timespec slice = deadline(0.02);
    bool last = slice.tv_sec > until->tv_sec ||
                (slice.tv_sec == until->tv_sec && slice.tv_nsec >= until->tv_nsec);
    int e = pthread_cond_timedwait(&s->cv, &s->mu, last ? until : &slice);
    if (atomic_load(&s->group->aborted))
        return TRI_ERR(TRI_ECOMM, "thread comm: %s interrupted: another rank aborted", what);
    if (e == ETIMEDOUT && last)
        return TRI_ERR(TRI_ETIMEOUT, "thread comm: %s timed out after %.0f s", what, s->timeout_s);
    return TRI_OK;
}

/* Yields before a barrier's waiter sleeps on the condition. Ranks meet at a barrier hundreds of
 * times a step, and a sleep costs a futex wait, a wake and two context switches, which on the
 * project's 2-core VMs made half of a thread-rank test's CPU time system time: with 32 yields first
 * (the last rank usually arrives within them, and the broadcast then finds no sleeper) test_zero
 * took 4.55 s instead of 6.15 s, its system time 3.3 s instead of 5.2 s. Yielding, not spinning:
 * the ranks outnumber the cores. */
enum { BARRIER_YIELDS = 32 };

static int barrier(shared *s, const char *what)
{
    struct timespec until = deadline(s->timeout_s);
    pthread_mutex_lock(&s->mu);
    unsigned long gen = atomic_load_explicit(&s->generation, memory_order_relaxed);
    int rc = TRI_OK;
    if (++s->arrived == s->size) { /* the last: the others' posts happened before their unlock */
        s->arrived = 0;
        atomic_store_explicit(&s->generation, gen + 1, memory_order_release);
        pthread_cond_broadcast(&s->cv);
        pthread_mutex_unlock(&s->mu);
        return TRI_OK;
    }
    pthread_mutex_unlock(&s->mu);
    for (int i = 0; i < BARRIER_YIELDS; i++) {
        if (atomic_load_explicit(&s->generation, memory_order_acquire) != gen)
            return TRI_OK; /* acquire: everything before the last rank's release is visible */
        sched_yield();
    }
    pthread_mutex_lock(&s->mu);
    while (gen == atomic_load_explicit(&s->generation, memory_order_relaxed) && rc == TRI_OK)
        rc = wait_locked(s, &until, what);
    pthread_mutex_unlock(&s->mu);
    return rc;
}

static shared *sh_of(tri_comm *c)
{
    return ((thread_comm *)c->impl)->sh;
}

static const char *call_name(call_kind kind)
{
    static const char *names[] = {"all_reduce", "reduce_scatter", "all_gather", "broadcast", "barrier",
                                  "split", "all_to_all_v"};
    return names[kind];
}

static bool same_call(const call *a, const call *b)
{
    return a->kind == b->kind && a->dtype == b->dtype && a->numel == b->numel && a->arg == b->arg;
}

static void describe(const call *k, char *buf, size_t cap)
{
    const char *dt = tri_dtype_name(k->dtype);
    long long n = (long long)k->numel;
    switch (k->kind) {
    case CALL_ALL_REDUCE:
        snprintf(buf, cap, "all_reduce of %lld %s (%s)", n, dt, k->arg == TRI_REDUCE_SUM ? "sum" : "max");
        break;
    case CALL_REDUCE_SCATTER: snprintf(buf, cap, "reduce_scatter to %lld %s per rank", n, dt); break;
    case CALL_ALL_GATHER: snprintf(buf, cap, "all_gather of %lld %s per rank", n, dt); break;
    case CALL_BROADCAST: snprintf(buf, cap, "broadcast of %lld %s from root %d", n, dt, k->arg); break;
    case CALL_ALL_TO_ALL_V: snprintf(buf, cap, "all_to_all_v of %s", dt); break;
    default: snprintf(buf, cap, "%s", call_name(k->kind)); break;
    }
}

/* Enters a collective: posts this rank's call, meets the group, and checks that every rank made the
 * same call, so a rank passing another size, dtype, op or root, or calling another collective, gets
 * TRI_EINVAL (on every rank, as they all read the same table) instead of reading past a buffer or
 * pairing its barriers with another call's. The two call tables are used by turns: a rank may post
 * its next call while others still read this one, but cannot get two calls ahead, since that takes
 * every rank through the next call's barrier. */
static int enter(tri_comm *c, call mine)
{
    thread_comm *tc = c->impl;
    shared *s = tc->sh;
    call *table = s->calls + (size_t)(tc->entered++ % 2) * (size_t)s->size;
    table[c->rank] = mine;
    const char *what = call_name(mine.kind);
    int rc = barrier(s, what);
    if (rc)
        return rc;
    for (int r = 1; r < s->size; r++)
        if (!same_call(&table[r], &table[0])) {
            char first[128], other[128];
            describe(&table[0], first, sizeof first);
            describe(&table[r], other, sizeof other);
            return TRI_ERR(TRI_EINVAL, "thread comm %s: ranks disagree: rank 0 called %s, rank %d %s", what,
                           first, r, other);
        }
    return TRI_OK;
}

/* d[i] = the reduction over n sources of element offset + i, in rank order (deterministic). */
#define REDUCE_TYPED(type, add)                                                         \
    do {                                                                                \
        type *d = dst;                                                                  \
        for (int64_t i = 0; i < count; i++) {                                           \
            type acc = ((const type *)srcs[0])[offset + i];                             \
            for (int r = 1; r < n; r++) {                                               \
                type v = ((const type *)srcs[r])[offset + i];                           \
                acc = op == TRI_REDUCE_SUM ? add(acc, v) : (v > acc ? v : acc);         \
            }                                                                           \
            d[i] = acc;                                                                 \
        }                                                                               \
    } while (0)

#define PLAIN_ADD(a, b) ((a) + (b))

/* The bf16 form (comm.h): a sum widens each rank's value exactly, adds in fp32 in rank order and
 * rounds once to bf16 at the end; a max keeps the bits of the largest value (exact; the first of
 * equal ones). */
static void reduce_bf16(uint16_t *d, void *const *srcs, int n, int64_t count, tri_reduce_op op,
                        int64_t offset)
{
    for (int64_t i = 0; i < count; i++) {
        uint16_t best = ((const uint16_t *)srcs[0])[offset + i];
        float acc = tri_bf16_to_float(best);
        for (int r = 1; r < n; r++) {
            uint16_t h = ((const uint16_t *)srcs[r])[offset + i];
            float v = tri_bf16_to_float(h);
            if (op == TRI_REDUCE_SUM) {
                acc += v;
            } else if (v > acc) {
                acc = v;
                best = h;
            }
        }
        d[i] = op == TRI_REDUCE_SUM ? tri_float_to_bf16(acc) : best;
    }
}

static void reduce_into(void *dst, void *const *srcs, int n, int64_t count, tri_dtype dtype,
                        tri_reduce_op op, int64_t offset)
{
    if (dtype == TRI_F32)
        REDUCE_TYPED(float, PLAIN_ADD);
    else if (dtype == TRI_BF16)
        reduce_bf16(dst, srcs, n, count, op, offset);
    else if (dtype == TRI_I64)
        REDUCE_TYPED(int64_t, tri_fixed_add); /* fixed point wraps mod 2^64 */
    else
        REDUCE_TYPED(int32_t, PLAIN_ADD);
}
#undef REDUCE_TYPED
#undef PLAIN_ADD

/* This rank's scratch of at least `bytes` (NULL if it cannot grow). */
static void *scratch(tri_comm *c, size_t bytes)
{
    thread_comm *tc = c->impl;
    if (!tc->scratch || bytes > tc->scratch_bytes) {
        free(tc->scratch);
        tc->scratch = malloc(bytes ? bytes : 1);
        tc->scratch_bytes = tc->scratch ? bytes : 0;
    }
    return tc->scratch;
}

static int thread_all_reduce(tri_comm *c, tri_tensor x, tri_reduce_op op)
{
    shared *s = sh_of(c);
    size_t bytes = tri_tensor_bytes(x);
    void *tmp = scratch(c, bytes);
    if (!tmp)
        return TRI_ERR(TRI_ENOMEM, "thread comm all_reduce: cannot allocate %zu bytes", bytes);
    s->inbuf[c->rank] = x.data;
    int rc = enter(c, (call){CALL_ALL_REDUCE, x.dtype, tri_tensor_numel(x), (int)op});
    if (!rc) {
        reduce_into(tmp, s->inbuf, s->size, tri_tensor_numel(x), x.dtype, op, 0);
        rc = barrier(s, "all_reduce");
    }
    if (!rc)
        memcpy(x.data, tmp, bytes);
    return rc;
}

static int thread_reduce_scatter(tri_comm *c, tri_tensor out, tri_tensor in)
{
    shared *s = sh_of(c);
    int64_t n = tri_tensor_numel(out);
    size_t bytes = tri_tensor_bytes(out);
    void *tmp = scratch(c, bytes);
    if (!tmp)
        return TRI_ERR(TRI_ENOMEM, "thread comm reduce_scatter: cannot allocate %zu bytes", bytes);
    s->inbuf[c->rank] = in.data;
    int rc = enter(c, (call){CALL_REDUCE_SCATTER, in.dtype, n, 0});
    if (!rc) {
        reduce_into(tmp, s->inbuf, s->size, n, in.dtype, TRI_REDUCE_SUM, (int64_t)c->rank * n);
        rc = barrier(s, "reduce_scatter");
    }
    if (!rc)
        memcpy(out.data, tmp, bytes);
    return rc;
}

static int thread_all_gather(tri_comm *c, tri_tensor out, tri_tensor in)
{
    shared *s = sh_of(c);
    size_t part = tri_tensor_bytes(in);
    s->inbuf[c->rank] = in.data;
    s->outbuf[c->rank] = out.data;
    int rc = enter(c, (call){CALL_ALL_GATHER, in.dtype, tri_tensor_numel(in), 0});
    if (rc)
        return rc;
    /* Each rank writes its own part into every rank's output (out and in may overlap only at
     * the writer's own slot, which memmove handles). */
    for (int r = 0; r < s->size; r++)
        memmove((char *)s->outbuf[r] + (size_t)c->rank * part, in.data, part);
    return barrier(s, "all_gather");
}

static int thread_broadcast(tri_comm *c, tri_tensor x, int root)
{
    shared *s = sh_of(c);
    s->inbuf[c->rank] = x.data;
    int rc = enter(c, (call){CALL_BROADCAST, x.dtype, tri_tensor_numel(x), root});
    if (!rc && c->rank != root)
        memcpy(x.data, s->inbuf[root], tri_tensor_bytes(x));
    if (!rc)
        rc = barrier(s, "broadcast");
    return rc;
}

/* All-to-all with variable counts: every rank posts its buffers and its four arrays, meets the
 * others, checks that each pair agrees (rank r's send_counts[i] is rank i's recv_counts[r]: every
 * rank reads the same table, so a disagreement is TRI_EINVAL on every rank, naming the first pair),
 * copies the blocks sent to it from the senders' inputs into its own output in rank order, and meets
 * them again before anyone reuses an input. */
static int thread_all_to_all_v(tri_comm *c, tri_tensor out, tri_tensor in, const int64_t *send_counts,
                               const int64_t *send_displs, const int64_t *recv_counts,
                               const int64_t *recv_displs)
{
    shared *s = sh_of(c);
    int me = c->rank, n = s->size;
    s->inbuf[me] = in.data;
    s->a2a[4 * me + 0] = send_counts;
    s->a2a[4 * me + 1] = send_displs;
    s->a2a[4 * me + 2] = recv_counts;
    s->a2a[4 * me + 3] = recv_displs;
    int rc = enter(c, (call){CALL_ALL_TO_ALL_V, in.dtype, 0, 0});
    if (rc)
        return rc;
    for (int src = 0; src < n && !rc; src++)
        for (int dst = 0; dst < n && !rc; dst++) {
            int64_t sent = s->a2a[4 * src + 0][dst], expected = s->a2a[4 * dst + 2][src];
            if (sent != expected)
                rc = TRI_ERR(TRI_EINVAL, "thread comm all_to_all_v: rank %d sends %lld elements to rank %d, which "
                             "expects recv_counts[%d] = %lld (want equal)", src, (long long)sent, dst, src,
                             (long long)expected);
        }
    size_t esize = tri_dtype_size(in.dtype);
    for (int src = 0; src < n && !rc; src++)
        if (recv_counts[src] > 0)
            memcpy((char *)out.data + (size_t)recv_displs[src] * esize,
                   (const char *)s->inbuf[src] + (size_t)s->a2a[4 * src + 1][me] * esize,
                   (size_t)recv_counts[src] * esize);
    int rc2 = barrier(s, "all_to_all_v");
    return rc ? rc : rc2;
}

/* The link pointing at the oldest queued message with `tag`, or NULL. */
static message **first_with_tag(message **q, int tag)
{
    for (; *q; q = &(*q)->next)
        if ((*q)->tag == tag)
            return q;
    return NULL;
}

/* A p2p batch in flight: the ops (copied), this rank's posted send messages, its posted receives
 * and which of them have completed. The sends sit in the queues from the start; a peer copies one
 * out whenever it completes the matching receive, so the transfer overlaps whatever this rank does
 * meanwhile. Receives are matched as MPI matches them: in the order they were posted, across the
 * batches in flight (a receive posted earlier takes the older message with its tag, whichever
 * batch is waited for first): every rank keeps its posted receives in one list (thread_comm). */
typedef struct posted {
    struct posted *next;
    struct p2p_batch *b;
    int i;                        /* the op in b */
} posted;

typedef struct p2p_batch {
    int n;
    tri_p2p *ops;
    message *mine;   /* (n): the send messages (unused for receives) */
    posted *recv;    /* (n): the receive records (unused for sends) */
    bool *got;       /* (n): receive completed */
    int mismatch;    /* the first size mismatch (the message is consumed anyway) */
} p2p_batch;

static void batch_free(p2p_batch *b)
{
    if (!b)
        return;
    free(b->ops);
    free(b->mine);
    free(b->recv);
    free(b->got);
    free(b);
}

static thread_comm *tc_of(tri_comm *c)
{
    return (thread_comm *)c->impl;
}

static int thread_p2p_start(tri_comm *c, const tri_p2p *ops, int n, void **handle)
{
    shared *s = sh_of(c);
    p2p_batch *b = calloc(1, sizeof *b);
    if (b) {
        b->n = n;
        b->ops = malloc((size_t)n * sizeof *b->ops);
        b->mine = calloc((size_t)n, sizeof *b->mine);
        b->recv = calloc((size_t)n, sizeof *b->recv);
        b->got = calloc((size_t)n, sizeof *b->got);
    }
    if (!b || !b->ops || !b->mine || !b->recv || !b->got) {
        batch_free(b);
        return TRI_ERR(TRI_ENOMEM, "thread comm p2p: out of memory");
    }
    memcpy(b->ops, ops, (size_t)n * sizeof *ops);
    /* post receives at the tail of this rank's list (only this rank's thread touches it) */
    posted **tail = &tc_of(c)->posted;
    while (*tail)
        tail = &(*tail)->next;
    for (int i = 0; i < n; i++) {
        if (ops[i].send)
            continue;
        b->recv[i] = (posted){.b = b, .i = i};
        *tail = &b->recv[i];
        tail = &b->recv[i].next;
    }
    pthread_mutex_lock(&s->mu);
    /* post sends at the tail of queue[me -> peer] */
    for (int i = 0; i < n; i++) {
        if (!ops[i].send)
            continue;
        b->mine[i].buf = ops[i].t.data;
        b->mine[i].bytes = tri_tensor_bytes(ops[i].t);
        b->mine[i].tag = ops[i].tag;
        message **q = &s->queue[c->rank * s->size + ops[i].peer];
        while (*q)
            q = &(*q)->next;
        *q = &b->mine[i];
    }
    pthread_cond_broadcast(&s->cv);
    pthread_mutex_unlock(&s->mu);
    *handle = b;
    return TRI_OK;
}

/* Completes every posted receive of this rank whose message has arrived, in posting order (mutex
 * held). A receive whose size differs from the message is an error of its batch, but it still
 * takes the message (as an MPI receive does), so the sender completes and later messages between
 * the pair keep matching in order. */
static void match_receives(tri_comm *c)
{
    shared *s = sh_of(c);
    for (posted **r = &tc_of(c)->posted; *r;) {
        p2p_batch *b = (*r)->b;
        const tri_p2p *o = &b->ops[(*r)->i];
        message **q = first_with_tag(&s->queue[o->peer * s->size + c->rank], o->tag);
        if (!q) {
            r = &(*r)->next;
            continue;
        }
        message *m = *q;
        if (m->bytes == tri_tensor_bytes(o->t))
            memcpy(o->t.data, m->buf, m->bytes);
        else if (!b->mismatch)
            b->mismatch = TRI_ERR(TRI_ECOMM, "thread comm p2p: rank %d sent %zu bytes, rank %d expects %zu "
                                  "(tag %d)", o->peer, m->bytes, c->rank, tri_tensor_bytes(o->t), o->tag);
        *q = m->next;
        m->consumed = 1;
        b->got[(*r)->i] = true;
        *r = (*r)->next;
        pthread_cond_broadcast(&s->cv);
    }
}

/* Advances batch b (mutex held) until its receives have completed and its sends were received.
 * block: wait for what is missing (until the deadline), else return with *done false at the first
 * thing not ready. On failure the batch's unconsumed sends and pending receives are withdrawn so no
 * peer reads, and no later match writes, freed memory. */
static int batch_progress(tri_comm *c, p2p_batch *b, bool block, bool *done)
{
    shared *s = sh_of(c);
    struct timespec until = deadline(s->timeout_s);
    int rc = TRI_OK;
    *done = false;
    for (int i = 0; i < b->n && rc == TRI_OK; i++) {
        if (b->ops[i].send)
            continue;
        match_receives(c);
        while (rc == TRI_OK && !b->got[i]) {
            if (!block)
                return TRI_OK;
            rc = wait_locked(s, &until, "p2p receive");
            if (!rc)
                match_receives(c);
        }
    }
    for (int i = 0; i < b->n && rc == TRI_OK; i++)
        while (b->ops[i].send && !b->mine[i].consumed && rc == TRI_OK) {
            if (!block)
                return TRI_OK;
            rc = wait_locked(s, &until, "p2p send");
        }
    if (rc) {
        for (int i = 0; i < b->n; i++) {
            if (!b->ops[i].send || b->mine[i].consumed)
                continue;
            message **q = &s->queue[c->rank * s->size + b->ops[i].peer];
            while (*q && *q != &b->mine[i])
                q = &(*q)->next;
            if (*q)
                *q = b->mine[i].next;
        }
        for (posted **r = &tc_of(c)->posted; *r;)
            if ((*r)->b == b)
                *r = (*r)->next;
            else
                r = &(*r)->next;
    }
    *done = true;
    return rc ? rc : b->mismatch;
}

/* The thread comm's handles are p2p batches (its collectives have no start). */
static int thread_wait(tri_comm *c, void *handle)
{
    shared *s = sh_of(c);
    bool done = false;
    pthread_mutex_lock(&s->mu);
    int rc = batch_progress(c, handle, true, &done);
    pthread_mutex_unlock(&s->mu);
    batch_free(handle);
    return rc;
}

static int thread_test(tri_comm *c, void *handle, bool *done)
{
    shared *s = sh_of(c);
    pthread_mutex_lock(&s->mu);
    int rc = batch_progress(c, handle, false, done);
    pthread_mutex_unlock(&s->mu);
    if (*done)
        batch_free(handle);
    return rc;
}

static int thread_p2p(tri_comm *c, const tri_p2p *ops, int n)
{
    void *handle = NULL;
    int rc = thread_p2p_start(c, ops, n, &handle);
    return rc ? rc : thread_wait(c, handle);
}

static int thread_barrier(tri_comm *c)
{
    return enter(c, (call){CALL_BARRIER, TRI_F32, 0, 0});
}

static int wrap(tri_comm **out, shared *sh, int rank, int world_rank)
{
    tri_comm *c = calloc(1, sizeof *c);
    thread_comm *tc = calloc(1, sizeof *tc);
    if (!c || !tc) {
        free(c);
        free(tc);
        return TRI_ERR(TRI_ENOMEM, "thread comm: out of memory");
    }
    tc->sh = sh;
    tc->world_rank = world_rank;
    c->ops = &thread_ops;
    c->impl = tc;
    c->rank = rank;
    c->size = sh->size;
    *out = c;
    return TRI_OK;
}

/* Split: every rank posts (color, key); the lowest rank of each color creates the new group's
 * shared state and posts its pointer; members find their new rank by counting smaller keys. */
static int thread_split(tri_comm *c, int color, int key, tri_comm **out)
{
    shared *s = sh_of(c);
    s->ints[2 * c->rank] = color;
    s->ints[2 * c->rank + 1] = key;
    int rc = enter(c, (call){CALL_SPLIT, TRI_F32, 0, 0});
    if (rc)
        return rc;
    int leader = -1, members = 0, my_rank = 0;
    for (int r = 0; r < s->size; r++) {
        if (color < 0 || s->ints[2 * r] != color)
            continue;
        if (leader < 0)
            leader = r;
        members++;
        int k = s->ints[2 * r + 1];
        if (k < key || (k == key && r < c->rank))
            my_rank++;
    }
    shared *ns = NULL;
    if (leader == c->rank)
        rc = shared_create(&ns, members, s->timeout_s, s->group);
    s->ptrs[c->rank] = ns;
    int rc2 = barrier(s, "split");
    if (rc || rc2)
        return rc ? rc : rc2;
    if (color >= 0) {
        ns = s->ptrs[leader];
        if (!ns)
            rc = TRI_ERR(TRI_ENOMEM, "thread comm split: the group leader failed to allocate");
        else
            rc = wrap(out, ns, my_rank, ((thread_comm *)c->impl)->world_rank);
    }
    rc2 = barrier(s, "split");
    return rc ? rc : rc2;
}

/* Raises the job's abort flag (the first abort's code and rank are kept) and wakes this group's
 * waiters; waiters in other groups see the flag within a 20 ms wait slice. */
static void thread_abort(tri_comm *c, int code)
{
    thread_comm *tc = c->impl;
    shared *s = tc->sh;
    int none = 0;
    if (atomic_compare_exchange_strong(&s->group->aborted, &none, code ? code : 1))
        atomic_store(&s->group->origin, tc->world_rank);
    pthread_mutex_lock(&s->mu);
    pthread_cond_broadcast(&s->cv);
    pthread_mutex_unlock(&s->mu);
}

static void thread_destroy(tri_comm *c)
{
    shared_release(sh_of(c));
    free(((thread_comm *)c->impl)->scratch);
    free(c->impl);
    free(c);
}

static const tri_comm_ops thread_ops = {
    .name = "thread",
    .all_reduce = thread_all_reduce,
    .reduce_scatter = thread_reduce_scatter,
    .all_gather = thread_all_gather,
    .broadcast = thread_broadcast,
    .p2p = thread_p2p,
    .p2p_start = thread_p2p_start,
    .wait = thread_wait,
    .test = thread_test,
    .all_to_all_v = thread_all_to_all_v,
    .split = thread_split,
    .barrier = thread_barrier,
    .abort = thread_abort,
    .destroy = thread_destroy,
};

int tri_thread_group_create(tri_thread_group **out, int size, double timeout_s)
{
    tri_thread_group *g = calloc(1, sizeof *g);
    if (!g)
        return TRI_ERR(TRI_ENOMEM, "thread comm: out of memory");
    g->size = size;
    g->timeout_s = timeout_s;
    atomic_init(&g->aborted, 0);
    atomic_init(&g->origin, -1);
    int rc = shared_create(&g->world, size, timeout_s, g);
    if (rc) {
        free(g);
        return rc;
    }
    g->world->refs = 1; /* the thread group's; each comm made of it adds one */
    *out = g;
    return TRI_OK;
}

void tri_thread_group_destroy(tri_thread_group *g)
{
    if (!g)
        return;
    shared_release(g->world);
    free(g);
}

int tri_comm_thread_create(tri_comm **out, tri_thread_group *g, int rank)
{
    if (rank < 0 || rank >= g->size)
        return TRI_ERR(TRI_EINVAL, "thread comm: rank %d outside group of %d", rank, g->size);
    shared *w = g->world;
    pthread_mutex_lock(&w->mu);
    w->refs++;
    pthread_mutex_unlock(&w->mu);
    int rc = wrap(out, w, rank, rank);
    if (rc)
        shared_release(w);
    return rc;
}

/* ---- running a function on thread ranks ---- */

typedef struct rank_job {
    int rank, size;
    tri_thread_group *group;
    tri_rank_fn fn;
    void *arg;
    int rc;
    char msg[2048];
} rank_job;

static void *rank_main(void *p)
{
    rank_job *j = p;
    tri_comm *c = NULL;
    j->rc = tri_comm_thread_create(&c, j->group, j->rank);
    if (!j->rc)
        j->rc = j->fn(j->rank, j->size, c, j->arg);
    if (j->rc) {
        snprintf(j->msg, sizeof j->msg, "rank %d: %s", j->rank, tri_error_message());
        if (c)
            thread_abort(c, j->rc); /* wake the other ranks instead of letting them time out */
    }
    if (c)
        thread_destroy(c);
    return NULL;
}

int tri_run_thread_ranks(int size, tri_rank_fn fn, void *arg)
{
    tri_thread_group *g = NULL;
    int rc = tri_thread_group_create(&g, size, 120.0);
    if (rc)
        return rc;
    rank_job *jobs = calloc((size_t)size, sizeof *jobs);
    pthread_t *th = calloc((size_t)size, sizeof *th);
    if (!jobs || !th) {
        free(jobs);
        free(th);
        tri_thread_group_destroy(g);
        return TRI_ERR(TRI_ENOMEM, "thread ranks: out of memory");
    }
    int started = 0;
    for (int r = 0; r < size; r++) {
        jobs[r] = (rank_job){.rank = r, .size = size, .group = g, .fn = fn, .arg = arg};
        if (pthread_create(&th[r], NULL, rank_main, &jobs[r]) != 0) {
            rc = TRI_ERR(TRI_ENOMEM, "thread ranks: cannot start thread %d", r);
            atomic_store(&g->aborted, TRI_ENOMEM);
            break;
        }
        started++;
    }
    for (int r = 0; r < started; r++)
        pthread_join(th[r], NULL);
    /* Report the failure that came first: the rank that aborted the job (a failing rank aborts as
     * it returns), not a rank it woke with TRI_ECOMM. The status alone cannot tell them apart, since
     * a rank may fail with TRI_ECOMM itself. Without an aborting rank, the lowest failing one. */
    int origin = atomic_load(&g->origin), first = -1;
    if (origin >= 0 && origin < started && jobs[origin].rc)
        first = origin;
    for (int r = 0; r < started && first < 0; r++)
        if (jobs[r].rc)
            first = r;
    if (!rc && first >= 0) {
        rc = jobs[first].rc;
        tri_error_set(rc, __FILE__, __LINE__, "%s", jobs[first].msg);
    }
    free(jobs);
    free(th);
    tri_thread_group_destroy(g);
    return rc;
}
