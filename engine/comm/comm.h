/* engine/comm/comm.h - the comm interface: how ranks talk.
 *
 * A comm is one group of ranks (world, or a tp / pp / dp / embedding group made by tri_comm_split).
 * Implementations: MPI over host buffers (comm_mpi.c), thread ranks in one process for the unit
 * tests (comm_thread.c; Criterion forks, so tests never call MPI_Init), and NCCL over device
 * buffers (cuda/). Collectives are in-order per comm: every rank starts them in the same order.
 * Each is blocking, or split into a start and a wait (tri_comm_*_start, tri_comm_wait) so that
 * ZeRO overlaps its reduce-scatters and all-gathers with compute (MPI's non-blocking collectives,
 * MPI 3.1 §5.12; NCCL on its own stream). Every call counts the payload bytes it sends, per
 * operation kind, so tests compare traffic with the analytic volume.
 *
 * Dtypes: every call carries f32, bf16, i32 or i64 (engine/core/tensor.h; anything else is TRI_EINVAL).
 * bf16 tensors (mixed precision: raw bits, engine/core/math.h) move at 2 bytes an element, so their
 * traffic and their byte counts are half those of f32. A bf16 MAX is exact (the result is one of
 * the ranks' values). A bf16 SUM widens every value exactly to fp32, adds in fp32 and rounds to bf16
 * (nearest even, tri_float_to_bf16):
 * - thread comm: over the ranks in rank order, rounded once at the end, so the result is the bf16
 *   of the sequential fp32 sum, bit for bit (deterministic);
 * - MPI comm: MPI combines two buffers at a time with a user-defined op (widen both, add in fp32,
 *   round), so every combine rounds to bf16, in the order MPI's algorithm picks;
 * - NCCL comm: ncclBfloat16, in NCCL's order.
 * All are within bf16 rounding of the exact sum - the thread comm's within one rounding (plus fp32's
 * far smaller error), MPI's within one per combine, about 2^-8 * (size - 1) * sum_r |x_r| - but two
 * comms (or two MPI algorithms) may differ in the last bits of a bf16 sum.
 *
 * Byte counting convention (the "payload", as Megatron-LM and the ZeRO paper count volume):
 * all_reduce counts numel * dtype size; reduce_scatter and all_gather count the full (unsharded)
 * buffer; broadcast counts the buffer on every rank; p2p counts the bytes this rank sends;
 * all_to_all_v counts the bytes this rank sends to the other ranks (its own block, which stays on
 * the rank, is not counted). A group of one rank sends nothing and counts nothing.
 *
 * Wire bytes (what this rank itself puts on the network, counted beside the payload): the volumes
 * of the bandwidth-optimal ring algorithms (NCCL's, and Open MPI's for large buffers; Patarasuk &
 * Yuan 2009) for a group of D ranks and a payload of S bytes as above: all_reduce 2 (D-1)/D * S,
 * reduce_scatter and all_gather (D-1)/D * S, broadcast S on the root and 0 elsewhere, p2p and
 * all_to_all_v the bytes sent (to other ranks); integer bytes, rounded down per call. engine_train's per-step tp_bytes, pp_bytes and
 * dp_bytes are these counters of the grid's groups (engine/train/step_time.h), and compressed
 * data-parallel reductions (engine/train/grad_compression.h) are checked against them.
 *
 * Every call also adds the wall time this rank spent blocked in it (seconds, per kind): the whole
 * blocking call, or the start plus the wait of a non-blocking one (time overlapped with compute
 * between them is not counted). engine_train splits its step time with these (engine/train/step_time.h). */
#ifndef TRIDENT_ENGINE_COMM_COMM_H
#define TRIDENT_ENGINE_COMM_COMM_H

#include <signal.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "engine/core/tensor.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef enum { TRI_REDUCE_SUM = 0, TRI_REDUCE_MAX = 1 } tri_reduce_op;

typedef enum {
    TRI_COMM_ALL_REDUCE = 0,
    TRI_COMM_REDUCE_SCATTER,
    TRI_COMM_ALL_GATHER,
    TRI_COMM_BROADCAST,
    TRI_COMM_P2P,
    TRI_COMM_ALL_TO_ALL,
    TRI_COMM_KINDS
} tri_comm_kind;

/* One half of a point-to-point exchange: send `t` to `peer`, or receive into `t` from `peer`.
 * Messages match by (sender, receiver, tag) in the order they were posted. */
typedef struct tri_p2p {
    bool send;
    int peer;        /* rank in this comm */
    int tag;         /* 0..1023 */
    tri_tensor t;
} tri_p2p;

typedef struct tri_comm tri_comm;

/* What a failure message names beyond the operation: the phase of the run ("init", "step",
 * "checkpoint", ...) and the iteration in progress, set by the trainer and shared by a comm and every
 * group split from it. */
typedef struct tri_comm_watch {
    char phase[16];      /* "" until set */
    int64_t iteration;   /* 0: none */
    /* Optional: a stop flag a signal handler sets (not owned). While it is set, a wait that lasts
     * more than a moment probes its peers once and logs the ranks that do not answer, because a
     * launcher that kills the job (mpirun when a rank died) signals before it kills. */
    const volatile sig_atomic_t *alert;
} tri_comm_watch;

/* A collective in flight, from tri_comm_*_start to tri_comm_wait. Until the wait, the operation's
 * buffers belong to the comm: the output must not be read nor the input written. */
typedef struct tri_comm_request {
    tri_comm *c;       /* NULL: nothing in flight */
    void *handle;      /* the implementation's; NULL when the operation completed at its start */
    uint64_t seq;      /* the operation's number on its comm (names it in a time-out) */
    tri_comm_kind kind; /* what it is, for the wall-time account */
} tri_comm_request;

typedef struct tri_comm_ops {
    const char *name;
    int (*all_reduce)(tri_comm *c, tri_tensor x, tri_reduce_op op);
    int (*reduce_scatter)(tri_comm *c, tri_tensor out, tri_tensor in);
    int (*all_gather)(tri_comm *c, tri_tensor out, tri_tensor in);
    int (*broadcast)(tri_comm *c, tri_tensor x, int root);
    int (*p2p)(tri_comm *c, const tri_p2p *ops, int n);
    /* The checked arguments of tri_comm_all_to_all_v (counts and displacements: c->size entries each,
     * in elements). Called on groups of two ranks or more only. */
    int (*all_to_all_v)(tri_comm *c, tri_tensor out, tri_tensor in, const int64_t *send_counts,
                        const int64_t *send_displs, const int64_t *recv_counts, const int64_t *recv_displs);
    int (*split)(tri_comm *c, int color, int key, tri_comm **out);
    int (*barrier)(tri_comm *c);
    void (*abort)(tri_comm *c, int code);
    void (*destroy)(tri_comm *c);
    /* Optional: dst = src (bytes, non-overlapping or equal) within this rank's memory, used by the
     * one-rank reduce_scatter / all_gather. NULL: memmove (host buffers). The NCCL comm, whose
     * buffers are device memory, copies on the device. */
    int (*local_copy)(tri_comm *c, void *dst, const void *src, size_t bytes);
    /* Optional non-blocking collectives: start one of all_reduce (out = in = x), reduce_scatter or
     * all_gather (the checked arguments of the blocking call), giving a handle that wait completes
     * (and frees, on error too) and test polls. NULL: the wrappers run the blocking call at the
     * start (the thread comm, whose ranks are threads that reach the same point anyway). */
    int (*start)(tri_comm *c, tri_comm_kind kind, tri_tensor out, tri_tensor in, tri_reduce_op op,
                 void **handle);
    int (*wait)(tri_comm *c, void *handle);
    int (*test)(tri_comm *c, void *handle, bool *done);
    /* Optional non-blocking p2p: posts the checked batch (ops may be freed on return; the tensors'
     * buffers belong to the comm until the wait), giving a handle that wait / test complete as a
     * collective's. NULL: the wrapper runs the blocking p2p at the start. */
    int (*p2p_start)(tri_comm *c, const tri_p2p *ops, int n, void **handle);
    /* Required when the comm's buffers are device memory (device_buffers): all_reduce (with op) or
     * broadcast (from root) of `host`, a tensor in host memory, through the comm's own device
     * scratch (outside any planned memory). */
    int (*host_collective)(tri_comm *c, tri_comm_kind kind, tri_tensor host, tri_reduce_op op, int root);
} tri_comm_ops;

struct tri_comm {
    const tri_comm_ops *ops;
    void *impl;
    int rank, size;
    bool device_buffers;              /* tensors passed to it are device memory (NCCL); false: host
                                         memory (MPI, thread ranks). Host values go through
                                         tri_comm_host_* on either kind. */
    uint64_t bytes[TRI_COMM_KINDS];   /* payload bytes sent, per kind */
    uint64_t wire[TRI_COMM_KINDS];    /* wire bytes this rank sent, per kind (see above) */
    uint64_t calls[TRI_COMM_KINDS];   /* number of calls, per kind */
    double seconds[TRI_COMM_KINDS];   /* wall seconds blocked in calls, per kind (see above) */
    uint64_t seq;                     /* operations started on this comm (names a stuck one) */
    double timeout_s;                 /* a wait longer than this fails with TRI_ETIMEOUT (0: never) */
    tri_comm_watch *watch;            /* phase and iteration (NULL: own_watch); shared with splits */
    tri_comm_watch own_watch;
};

/* x (any shape, any dtype above) = reduction over the group of every rank's x, in place. Ranks'
 * values are combined in rank order on the thread comm (deterministic); MPI and NCCL choose their
 * order. i64 sums wrap modulo 2^64 (the fixed-point sums of deterministic mode); bf16: see above. */
int tri_comm_all_reduce(tri_comm *c, tri_tensor x, tri_reduce_op op);
/* out (n) = this rank's slice [rank*n, (rank+1)*n) of the sum over ranks of in (size*n), summed as
 * all_reduce sums its dtype. in is left unchanged, except when out overlaps it (e.g. out is this
 * rank's own slice of in): then the rest of in is undefined afterwards. */
int tri_comm_reduce_scatter(tri_comm *c, tri_tensor out, tri_tensor in);
/* out (size*n) = the ranks' in (n) concatenated in rank order. */
int tri_comm_all_gather(tri_comm *c, tri_tensor out, tri_tensor in);
/* x = root's x on every rank. */
int tri_comm_broadcast(tri_comm *c, tri_tensor x, int root);
/* Non-blocking forms of the three collectives above: same arguments, checks and byte counts; the
 * operation runs while the caller computes and is complete after tri_comm_wait(req). Every rank
 * must start a comm's collectives in the same order (blocking ones included); several may be in
 * flight at once and be waited for in any order. *req is cleared first, so waiting on the request
 * of a failed start is harmless. */
int tri_comm_all_reduce_start(tri_comm *c, tri_tensor x, tri_reduce_op op, tri_comm_request *req);
int tri_comm_reduce_scatter_start(tri_comm *c, tri_tensor out, tri_tensor in, tri_comm_request *req);
int tri_comm_all_gather_start(tri_comm *c, tri_tensor out, tri_tensor in, tri_comm_request *req);
/* Completes req (nothing to do when none is in flight) and clears it; TRI_ETIMEOUT after the
 * comm's timeout, naming the operation. */
int tri_comm_wait(tri_comm_request *req);
/* *done = whether req has completed (then it is cleared, as by tri_comm_wait). Also advances it:
 * MPI progresses non-blocking collectives only inside MPI calls, so a rank that computes between
 * a start and its wait should test now and then. */
int tri_comm_test(tri_comm_request *req, bool *done);
/* Whether req is in flight. */
bool tri_comm_pending(const tri_comm_request *req);

/* Runs n sends and receives together; returns when all are complete. Messages between two ranks
 * match in the order they were posted, so a send-forward/recv-backward pair needs no ordering trick. */
int tri_comm_p2p(tri_comm *c, const tri_p2p *ops, int n);
/* Non-blocking form of tri_comm_p2p: the same checks and byte counts (at the start); the batch is
 * posted and completes at tri_comm_wait(req) (or a tri_comm_test that says done). Until then the
 * send tensors must not be written nor the receive tensors read. ops itself may be reused at once.
 * Several batches may be in flight on a comm; messages between two ranks still match in posting
 * order. MPI: MPI_Isend/Irecv, completed by the polling Waitall; NCCL: grouped send/recv on the
 * comm's stream with its own event, which the compute stream waits for only at the wait; thread
 * ranks: the sends are posted at the start and the peers copy them out whenever they wait (so the
 * transfer overlaps the sender's work), the receives complete at the wait; staged: sends copied
 * down at the start, the inner comm's non-blocking p2p, receives copied up at the wait. The wait's
 * seconds count under TRI_COMM_P2P (the exposed time). */
int tri_comm_p2p_start(tri_comm *c, const tri_p2p *ops, int n, tri_comm_request *req);
/* ---- all-to-all with variable counts (engine/comm/comm_a2a.c) ----
 * Expert parallelism sends each token's hidden state to the rank holding its expert and back
 * (GShard, Lepikhin et al. 2020; Megatron-Core's MoEAlltoAllTokenDispatcher): MPI_Alltoallv's
 * semantics (MPI 3.1 §5.8) on every comm, for the group given (the world or any split of it).
 *
 * tri_comm_all_to_all_v: rank i sends send_counts[r] elements of in starting at element
 * send_displs[r] to every rank r, and receives recv_counts[r] elements from rank r into out starting
 * at element recv_displs[r]. n is the number of entries of each array and must be the group's size.
 * Counts and displacements are host arrays, in elements of in's dtype (f32, bf16, i32 or i64; out's
 * dtype must be the same; bf16 moves its raw bits). in and out are flat (any shape, numel counts)
 * and must not overlap; the receive blocks must not overlap one another; elements of out no block
 * covers are left as they were. recv_counts[r] on rank i must equal send_counts[i] on rank r: the
 * thread comm checks it (TRI_EINVAL on every rank); MPI and NCCL cannot be relied on to (a block
 * larger than its receive is an MPI truncation error at best) - exchange the counts with
 * tri_comm_all_to_all_counts first.
 * Blocking (no _start form); on a device comm in and out are device memory and the call is ordered
 * with the device's other ops like the other collectives. Counted under TRI_COMM_ALL_TO_ALL: the
 * bytes sent to the other ranks, payload and wire alike. TRI_EINVAL, nothing sent nor counted, for
 * n != size, a negative count or displacement, a block past its buffer's end (naming the rank,
 * value and buffer size), overlapping receive blocks, in and out overlapping, a dtype mismatch, or
 * send_counts[rank] != recv_counts[rank] (the block a rank keeps). */
int tri_comm_all_to_all_v(tri_comm *c, tri_tensor out, tri_tensor in, int n, const int64_t *send_counts,
                          const int64_t *send_displs, const int64_t *recv_counts, const int64_t *recv_displs);
/* recv_counts[r] = send_counts[rank] of rank r, for every rank r of c (n entries each, n = size):
 * the counts exchange that comes before the tokens (Megatron-Core exchanges its per-expert token
 * counts the same way). Collective over c; host arrays on any comm kind. Every rank's counts reach
 * every rank as one i64 sum all-reduce of the size x size count matrix (counted as an all_reduce of
 * size * size * 8 bytes; it goes through tri_comm_host_all_reduce, so NCCL and staged comms take host
 * arrays too). TRI_EINVAL (local: before anything is sent) for n != size or a negative count. */
int tri_comm_all_to_all_counts(tri_comm *c, int n, const int64_t *send_counts, int64_t *recv_counts);
/* displs[r] = counts[0] + ... + counts[r-1] (blocks packed in rank order); returns the total. */
int64_t tri_comm_displs(int n, const int64_t *counts, int64_t *displs);

/* Collective over c: ranks with the same color form a new comm ordered by key. color < 0 gives
 * *out = NULL (the rank joins no group). The new comm inherits c's timeout and phase. */
int tri_comm_split(tri_comm *c, int color, int key, tri_comm **out);
int tri_comm_barrier(tri_comm *c);
/* Stops every rank of the job (MPI_Abort), or wakes every thread rank with an error. On a rank that
 * sent or received a timeout verdict the MPI comm first sleeps 1 s, so the ranks the verdict reached
 * can report it before the first abort ends them all. */
void tri_comm_abort(tri_comm *c, int code);
void tri_comm_destroy(tri_comm *c);

/* ---- host values through a collective, and agreement (engine/comm/comm_host.c) ----
 * Small host values (flags, a status, a loss in fixed point, a sampled token) on a comm of either
 * kind: a comm whose buffers are host memory takes them as they are, one whose buffers are device
 * memory stages them through its own scratch. */
int tri_comm_host_all_reduce(tri_comm *c, void *host, tri_dtype dtype, int64_t n, tri_reduce_op op);
int tri_comm_host_broadcast(tri_comm *c, void *host, tri_dtype dtype, int64_t n, int root);

/* Every rank agrees on a status (collective over c): each passes its own rc; when every rank passed
 * TRI_OK every rank gets TRI_OK, else every rank gets the status of the lowest failing rank, a
 * failing rank keeping its own message and the others receiving "on rank N: <its message>". If the
 * agreement itself fails, a rank returns its own rc, or the comm's error. */
int tri_comm_agree(tri_comm *c, int rc);

/* Sets how long a wait may take before it fails with TRI_ETIMEOUT, naming the operation and its
 * sequence number (0: wait forever). The MPI comm polls; the thread comm has its group's timeout. */
void tri_comm_set_timeout(tri_comm *c, double seconds);

/* Records the phase ("init", "step", "checkpoint", ...; at most 15 characters) and iteration that
 * a failure of any collective on c, or on a group split from c afterwards, names. */
void tri_comm_set_phase(tri_comm *c, const char *phase, int64_t iteration);
/* Sets the stop flag the waits of c and its splits watch (see tri_comm_watch; NULL: none). */
void tri_comm_set_alert(tri_comm *c, const volatile sig_atomic_t *alert);
/* The phase and iteration set on c (or on the comm it was split from). */
const tri_comm_watch *tri_comm_phase(tri_comm *c);

/* Total payload bytes of one kind, and resetting the counters (bytes, calls and seconds). */
uint64_t tri_comm_bytes(const tri_comm *c, tri_comm_kind kind);
/* Wire bytes this rank sent in calls of one kind (all kinds: TRI_COMM_KINDS; see "Wire bytes"
 * above); 0 for NULL. */
uint64_t tri_comm_wire_bytes(const tri_comm *c, tri_comm_kind kind);
/* Wall seconds this rank spent blocked in calls of one kind (all kinds: TRI_COMM_KINDS); 0 for
 * NULL. */
double tri_comm_seconds(const tri_comm *c, tri_comm_kind kind);
void tri_comm_reset_counters(tri_comm *c);
const char *tri_comm_kind_name(tri_comm_kind kind);

/* ---- implementations ---- */

/* The MPI comm over `mpi_comm` (an MPI_Comm handle, duplicated inside); MPI must be initialised.
 * A second duplicate carries liveness probes: a wait that times out asks every rank of mpi_comm
 * whether it is alive (ranks answer from inside their own waits), names the ranks that did not
 * answer within a grace period, and sends that verdict to the others, whose waits then fail with
 * the same message (engine/comm/comm_mpi.c). */
int tri_comm_mpi_create(tri_comm **out, const void *mpi_comm);

/* Thread ranks: tri_thread_group_create makes a group of `size` ranks; each thread then calls
 * tri_comm_thread_create(&c, group, rank). Blocking waits give up with TRI_ETIMEOUT after
 * timeout_s seconds so a failing test cannot hang. */
typedef struct tri_thread_group tri_thread_group;
int tri_thread_group_create(tri_thread_group **out, int size, double timeout_s);
void tri_thread_group_destroy(tri_thread_group *g);
int tri_comm_thread_create(tri_comm **out, tri_thread_group *g, int rank);

/* Runs fn(rank, size, comm, arg) on `size` threads, each with its own thread comm, and returns the
 * first non-zero status (with that thread's message copied to the caller's thread). */
typedef int (*tri_rank_fn)(int rank, int size, tri_comm *comm, void *arg);
int tri_run_thread_ranks(int size, tri_rank_fn fn, void *arg);

#ifdef __cplusplus
}
#endif

#endif
