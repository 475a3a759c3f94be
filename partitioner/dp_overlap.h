/* partitioner/dp_overlap.h - how much of a pipeline rank's data-parallel communication its compute
 * hides, by replaying what the engine does against the rank's simulated timeline.
 *
 * The engine (engine/train/zero.h, Megatron-LM's --overlap-grad-reduce / --overlap-param-gather,
 * Rajbhandari et al. 2020 §7) runs its data-parallel collectives on one stream per rank, in the
 * order it starts them (one comm op at a time), against the compute that remains:
 *   gradients, with overlap_grad_reduce: at ZeRO 0-1 a unit's all-reduce / reduce-scatter starts as
 *     soon as its last writing pass of the step has finished (the last micro-batch's backward of its
 *     chunk, or the fused LM head's forward), a compressed reduction's first exchange too; its second
 *     (reduce2_s) when the next unit's gradient is complete, after the compute has waited for the
 *     first to end (the engine's tri_dp_compress_advance: a stall when the link is slower than the
 *     backward), or after the last compute (the codec's passes are charged apart, exposed); at ZeRO
 *     2-3 each pass's bucket is reduce-scattered as
 *     soon as that pass has written it. Without the flag they block after the pipeline.
 *   parameters, with overlap_param_gather: at ZeRO 1-2 every unit's all-gather starts after the
 *     update, in the units' order (units[] is the rank's units in the engine's order), and the next
 *     step's first forward waits for a unit only at its first use; at ZeRO 3 each use's all-gather starts when the previous use starts (one unit
 *     ahead) and the use waits for it. Without the flag they block (after the update at ZeRO 1-2,
 *     before each use at ZeRO 3).
 * Where inside a chunk's forward or backward op a unit is used or finished is its share of the
 * op's matmul work, the weights' elements before it (6 N D: a weight's FLOPs are proportional to its
 * elements; lookups and norms count 0): the forward runs embedding lookups, blocks, final norm, LM
 * head; the backward the reverse. A use that finds its parameters not yet gathered stalls the
 * rank's compute until they arrive (later ops shift by the stall). The step ends for the rank when
 * its shifted compute and its comm stream are both done, then the blocking operations run.
 *
 * Times come from partitioner/simulate.h (the op start / end times of the schedule with message
 * times); the simulation is not rerun with the stalls, so a stall on one rank is not propagated to
 * the ranks waiting for its messages (an underestimate of their effect when stalls occur). */
#ifndef TRIDENT_PARTITIONER_DP_OVERLAP_H
#define TRIDENT_PARTITIONER_DP_OVERLAP_H

#include <stdbool.h>

#include "engine/train/schedule.h"
#include "partitioner/simulate.h"

#ifdef __cplusplus
extern "C" {
#endif

/* One unit of parameters of a pipeline rank (engine/train/param.h: a block, a table, the final norm). */
typedef struct tri_dp_unit {
    int chunk;                         /* local model chunk of the rank, 0..v-1 */
    double reduce_s;                   /* seconds of one reduction of its gradient bucket (compressed:
                                          its first exchange) */
    double reduce2_s;                  /* ZeRO 0-1 compressed: its second exchange's seconds (two-phase's
                                          phase 2, PowerSGD's Q; 0: none) */
    double gather_s;                   /* seconds of one all-gather of its parameters (0: none) */
    int fwd_reads, bwd_reads;          /* per micro-batch (tri_unit_uses) */
    int fwd_writes, bwd_writes;
    double fwd_use, bwd_use;           /* where in its chunk's forward / backward op it is first read,
                                          as a fraction of the op, in [0, 1] */
    double fwd_done, bwd_done;         /* where in those ops it is last written */
} tri_dp_unit;

typedef struct tri_dp_stream {
    int zero_stage;                    /* 0..3 */
    int n_micro;                       /* micro-batches per step */
    bool overlap_grad_reduce, overlap_param_gather;
    double tail_s;                     /* blocking comm after the last compute in any case (the loss's
                                          all-reduce) */
} tri_dp_stream;

typedef struct tri_dp_overlap {
    double comm_s;                     /* every dp operation of the step, seconds on the stream */
    double blocking_s;                 /* of which not overlapped (no flag for it, or the tail) */
    double stall_s;                    /* compute waiting for parameters not yet gathered, or for a
                                          compressed reduction's first exchange to end */
    double compute_end_s;              /* the rank's last compute op ends (simulated, no dp) */
    double finish_s;                   /* the rank's step ends, dp included */
} tri_dp_overlap;

/* Replays rank r of schedule s, whose simulation is sim (verdict ok), with its n units. The rank's
 * exposed dp time is out->finish_s - out->compute_end_s; with neither overlap flag it is the sum of
 * all operations. TRI_EINVAL for a unit with a chunk outside the schedule's or a negative time,
 * TRI_ENOMEM. */
int tri_dp_overlap_rank(const tri_schedule *s, const tri_sim_result *sim, int r, const tri_dp_unit *units, int n,
                        const tri_dp_stream *st, tri_dp_overlap *out);

#ifdef __cplusplus
}
#endif

#endif
