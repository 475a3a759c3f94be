/* partitioner/simulate.h - runs every rank's op list of a schedule together, before launch.
 *
 * DESIGN.md §6: because schedules are data, a simulator can prove that a schedule is executable
 * (every send meets its receive, in order, and nothing deadlocks), count the micro-batches each
 * rank keeps in flight (peak activation memory, DESIGN.md §7) and time it for given op costs,
 * which gives the pipeline bubble (Huang et al. 2019; Narayanan et al. 2021 §2.2; Qi et al. 2023).
 *
 * Semantics, those of the executor (engine/train/pipeline.h):
 *  - A rank runs its ops in order. Each maximal run of consecutive comm ops is ONE batch
 *    (tri_sched_batch_end): all its sends and receives are posted together and the rank goes on
 *    only when all of them have completed.
 *  - Rendezvous: a send completes when the peer's matching receive is posted, and a receive when
 *    the matching send is posted (no eager buffering, as with NCCL). Messages are matched in FIFO
 *    order per (sender, receiver, tag), or per (sender, receiver) with `untagged` (NCCL's p2p has
 *    no tags): the k-th send on that channel meets the k-th receive, in list order.
 *  - The matched receive must be of the same kind, micro-batch and the neighbouring global chunk
 *    (SEND_ACT of chunk g meets RECV_ACT of chunk g + 1, SEND_GRAD of g meets RECV_GRAD of g - 1),
 *    else the schedule has an order error.
 *  - Every op must find its inputs on its rank: FWD after its RECV_ACT (except on the first chunk),
 *    SEND_ACT after FWD, BWD / BWD_INPUT after FWD and RECV_GRAD (except on the last chunk),
 *    SEND_GRAD after the input gradient, BWD_WEIGHT after BWD_INPUT; each op runs at most once per
 *    (micro-batch, chunk), and by the end every (micro-batch, chunk) of the rank has had its
 *    forward and backward (or only its forward, in a schedule with no backward op at all).
 *  - Time: a compute op of global chunk g takes its cost (fwd, bwd, bwd_input or bwd_weight,
 *    times chunk_scale[g] when given) from when the rank reaches it. A batch is posted when the
 *    rank reaches it; each of its messages arrives `comm` after both ends are posted; the batch
 *    ends when its last message arrives. Comm time is not busy time.
 *
 * Work is linear in the number of ops (each op is posted and matched once), so pp 64 x m 512 x
 * v 8 (1.6 million ops) simulates in well under a second. */
#ifndef TRIDENT_PARTITIONER_SIMULATE_H
#define TRIDENT_PARTITIONER_SIMULATE_H

#include <stdbool.h>

#include "engine/train/schedule.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Costs of one op in any time unit (seconds, or 1 = one forward). */
typedef struct tri_sim_costs {
    double fwd;                /* FWD of one (micro-batch, chunk) */
    double bwd;                /* BWD: input and weight gradients */
    double bwd_input;          /* BWD_INPUT (zero-bubble split) */
    double bwd_weight;         /* BWD_WEIGHT */
    double comm;               /* latency of one message, from both ends posted to arrival (may be 0) */
    bool untagged;             /* match messages per (sender, receiver) only, ignoring tags, as NCCL's
                                  p2p (which has no tags) would */
    const double *chunk_scale; /* NULL, or [pp * v] factors on the compute costs of each global chunk */
} tri_sim_costs;

typedef enum {
    TRI_SIM_OK = 0,
    TRI_SIM_DEADLOCK,          /* some ranks wait forever; the message names them and their ops */
    TRI_SIM_ORDER,             /* a receive met a send of another (micro-batch, chunk) */
    TRI_SIM_INVALID,           /* an op without its inputs, repeated, missing, or out of range */
} tri_sim_verdict;

typedef struct tri_sim_result {
    tri_sim_verdict verdict;
    int pp, v;
    /* in flight: forwards done whose backward (its weight part, for split backwards) is not */
    int *peak_in_flight;       /* [pp]: the most at once, summed over the rank's chunks */
    int *peak_in_flight_chunk; /* [pp * v]: per (rank, local chunk), index rank * v + chunk */
    /* activation slots the executor holds (DESIGN.md §7 sizes the arenas from these): a
       (micro-batch, chunk) holds one from its first op on the rank to its last, and every op of a
       comm batch holds its slot until the whole batch completes, so a fused SEND_GRAD(b) +
       RECV_ACT(f) needs b's and f's slots at once: up to one more than in flight */
    int *peak_slots;           /* [pp], summed over the rank's chunks */
    int *peak_slots_chunk;     /* [pp * v] */
    /* timing (meaningful when verdict == TRI_SIM_OK) */
    double makespan;           /* when the last op ends; the step starts at 0 */
    double *busy;              /* [pp]: compute time of each rank */
    double *idle;              /* [pp]: 1 - busy / makespan */
    double bubble;             /* 1 - sum(busy) / (pp * makespan) */
    double **start, **end;     /* [pp][n_ops[r]]: when each op starts and ends (comm: posted and
                                  arrived); ops never reached keep -1 */
} tri_sim_result;

/* Simulates s with costs c. Returns TRI_OK when the schedule is executable (out->verdict ==
 * TRI_SIM_OK), TRI_EINVAL when it is not: out->verdict says how and the error message names the
 * ranks, op indices and ops (e.g. "deadlock: rank 0 waits at op 7 SEND_ACT(mb 2, chunk 0) -> rank
 * 1; ..."); the in-flight peaks and op times up to the failure are kept. TRI_ENOMEM on allocation
 * failure. Free out with tri_sim_result_free in every case. */
int tri_schedule_simulate(const tri_schedule *s, const tri_sim_costs *c, tri_sim_result *out);

void tri_sim_result_free(tri_sim_result *r);

/* "ok", "deadlock", "order", "invalid". */
const char *tri_sim_verdict_name(tri_sim_verdict v);

#ifdef __cplusplus
}
#endif

#endif
