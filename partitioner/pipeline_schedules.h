/* partitioner/pipeline_schedules.h - training schedules of a pipeline, generated as data (DESIGN.md §6).
 *
 * Each generator fills a tri_schedule (engine/train/schedule.h): per pipeline rank, the ops it runs in
 * order. A forward of (micro-batch, chunk) is RECV_ACT, FWD, SEND_ACT and a backward RECV_GRAD,
 * BWD, SEND_GRAD, leaving out the messages the first model chunk (it reads tokens, sends no input
 * gradient) and the last (it computes the loss) do not have. The executor fuses each maximal run
 * of adjacent comm ops into one batched exchange that completes as a whole (tri_sched_batch_end),
 * and a send completes only when its receive is posted, so WHERE the comm ops sit decides whether
 * the ranks can deadlock; partitioner/simulate.h checks it, and the tests run every generator
 * through it.
 *
 *   gpipe        Huang et al. 2019 (GPipe): all m forwards, then all m backwards. The backwards run
 *                in INCREASING micro-batch order so that weight gradients accumulate in the order
 *                0..m-1 exactly as a one-stage run does (bit-identical to pp = 1).
 *   1f1b         PipeDream-Flush (Narayanan et al. 2019 PipeDream; 2021 §2.2): rank r runs
 *                min(pp - r - 1, m) warm-up forwards, then pairs (forward of mb w + i, backward of
 *                mb i), then the cool-down backwards; at most min(pp - r, m) micro-batches in flight.
 *                Each receive sits right before the compute that needs it and each send right after
 *                the compute that produced it, so the fused exchanges are Megatron-LM's pairs:
 *                SEND_ACT(f) RECV_GRAD(b) = send_forward_recv_backward and SEND_GRAD(b)
 *                RECV_ACT(f') = send_backward_recv_forward.
 *   interleaved  Narayanan et al. 2021 §2.2.2 (Megatron-LM's interleaved 1F1B): v model chunks per
 *                rank (chunk c of pp*v on rank c % pp); the m*v virtual micro-batches k run in
 *                Megatron's order: forward chunk (k / pp) % v, backward chunk v - 1 - (k / pp) % v,
 *                micro-batch (k / (pp*v)) * pp + k % pp. Rank r runs
 *                w = min(2 (pp - r - 1) + (v - 1) pp, m v) warm-up forwards, then steps of one
 *                forward and one backward, then the cool-down backwards; at most
 *                min(w + 1, m v) chunk micro-batches in flight. As in Megatron, each step ends with
 *                ONE exchange that sends the step's results and receives the NEXT step's inputs
 *                (with receives placed as in 1F1B the wrap-around from the last rank to the first
 *                closes a cycle of ranks blocked in sends). Requires m % pp == 0 and, for v > 1,
 *                pp > 1. Megatron runs all forwards first when m == pp; here the general warm-up
 *                is deadlock-free for m == pp too, so there is no special case.
 *   zb_h1        Qi et al. 2023 (Zero Bubble Pipeline Parallelism, schedule ZB-H1): 1F1B with the
 *                backward split into BWD_INPUT (input gradient, sent on) and BWD_WEIGHT (weight
 *                gradient), rank r keeping up to r weight gradients queued so that they fill the
 *                cool-down bubble. Every rank then has up to min(pp, m) micro-batches in flight, the
 *                peak of 1F1B's first rank, so the peak memory is 1F1B's.
 *
 * Bubble fractions under the simulator, with no comm time, for any forward : backward cost ratio
 * (costs per chunk, so a chunk of an interleaved schedule costs 1/v of a stage): gpipe and 1f1b
 * (p - 1) / (m + p - 1); interleaved (p - 1) / (v m + p - 1), the (p - 1) / (v m) of the ideal time
 * of Narayanan et al. 2021; zb-h1 with T_F = T_B = T_W and m >= p, (p - 1) / (3 m + p - 1), i.e.
 * a bubble of (p - 1)(T_F + T_B - T_W) (Qi et al. 2023).
 *
 * Each generator returns TRI_OK, TRI_EINVAL with a message naming the value (and Megatron-LM's
 * flag) when the sizes are not allowed, or TRI_ENOMEM. On failure *out is left empty (safe to pass
 * to tri_schedule_free). Pure planning: no device, no comm. */
#ifndef TRIDENT_PARTITIONER_PIPELINE_SCHEDULES_H
#define TRIDENT_PARTITIONER_PIPELINE_SCHEDULES_H

#include "engine/train/schedule.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Largest v the op format holds (tri_sched_op.chunk is an int8_t). */
#define TRI_SCHED_MAX_CHUNKS 127

/* GPipe over pp ranks and m micro-batches (v = 1). pp, m >= 1. */
int tri_schedule_gpipe(tri_schedule *out, int pp, int m);

/* 1F1B (PipeDream-Flush) over pp ranks and m micro-batches (v = 1). pp, m >= 1. */
int tri_schedule_1f1b(tri_schedule *out, int pp, int m);

/* Interleaved 1F1B over pp ranks with v chunks each and m micro-batches. pp, v, m >= 1,
 * v <= TRI_SCHED_MAX_CHUNKS, m % pp == 0, and pp > 1 when v > 1 (one rank would send to itself). */
int tri_schedule_interleaved(tri_schedule *out, int pp, int v, int m);

/* ZB-H1 over pp ranks and m micro-batches (v = 1); uses BWD_INPUT / BWD_WEIGHT instead of BWD.
 * pp, m >= 1. */
int tri_schedule_zb_h1(tri_schedule *out, int pp, int m);

/* The generator called `name` ("gpipe", "1f1b", "interleaved", "zb-h1"; gpipe, 1f1b and zb-h1
 * need v == 1). TRI_EINVAL names the unknown schedule or the refused sizes. */
int tri_schedule_make(tri_schedule *out, const char *name, int pp, int v, int m);

#ifdef __cplusplus
}
#endif

#endif
