/* partitioner/time_model.h - predicted time of one training iteration, and where it goes.
 *
 * Per micro-batch and model chunk g on one TP rank (Narayanan et al. 2021 §3 for the structure):
 *   matmuls   the chunk's training FLOPs F_g (partitioner/stages.h: 3 (24 B s h^2 + 4 B s^2 h)/t a
 *             block, the LM head and embedding; forward F_g / 3, backward 2 F_g / 3) plus the
 *             recomputed forward (partitioner/flops.h), at peak x gemm fraction;
 *   memory    elementwise work, modelled as moving each activation byte the chunk would keep
 *             without recomputation (partitioner/memory_model.h) four times, twice forward (written,
 *             read) and twice backward (read, gradient written), and twice more when full
 *             recomputation reruns the forward, at memory bandwidth x memory fraction;
 *   TP comm   partitioner/traffic.h's bytes per micro-batch, forward and backward (the forward's
 *             again under full recomputation), as ring collectives over the TP group (NVLink when it
 *             fits in a node, else InfiniBand), times the exposed share;
 *   EP comm   a mixture of experts' all-to-alls (tri_ep_microbatch_traffic: dispatch and combine,
 *             forward and backward, again under full recomputation): the bytes sent over the ep
 *             group's bandwidth (ep ranks at stride etp: NVLink when etp x ep fits a node), all of
 *             it exposed (the experts wait for their tokens); the etp group's gathers as rings.
 *   CP comm   context parallelism (cp > 1; partitioner/context_parallel.h): a rank computes 1 / cp of
 *             the chunk's FLOPs (the causal work balanced by the 2 cp chunks) over T_l = T / cp rows
 *             (activations, TP/EP/PP messages of T_l rows); per layer the key/value exchange of
 *             tri_cp_layer_traffic over the cp group (ranks tp apart), all_gather fully exposed, p2p
 *             exposed per ring step as max(0, transfer - that step's attention); again under full
 *             recomputation. The data-parallel group is then dp x cp (gradients and ZeRO).
 * These give each chunk's forward and backward op time. The pipeline schedule is then simulated
 * (partitioner/simulate.h) with the mean forward and backward and each chunk's total as its
 * chunk_scale, once without and once with the p2p message time (tri_pp_message_bytes over
 * NVLink, or InfiniBand when the pipeline spans nodes). For the busiest pipeline rank:
 *   compute + TP + EP + CP  its busy time, split by the shares above;
 *   bubble        the simulated makespan without message time minus its busy time;
 *   PP            what the message time adds to the makespan;
 * and after the pipeline, once per step:
 *   DP            partitioner/traffic.h's ZeRO traffic for the rank's parameters as ring
 *                 collectives over the data-parallel group (gradients fp32, parameters in the
 *                 model's dtype: bf16 under mixed precision), and the replicated gradients' TP
 *                 all-reduce under sequence parallelism (fp32). What is exposed: with
 *                 --overlap-grad-reduce / --overlap-param-gather, simulated (partitioner/
 *                 dp_overlap.h: every pipeline rank's reductions and all-gathers on one comm stream
 *                 against its simulated compute, as the engine issues them; DP = the latest rank's
 *                 end past the makespan), unless the user sets the exposed share
 *                 (--dp-comm-exposed, which wins); without the flags all of it, as the engine then
 *                 blocks. A compressor (engine/train/grad_compression.h, tri_dp_method) replaces
 *                 each reduction's bytes by tri_compression_sent_bytes and adds its encode and
 *                 decode as memory-bound passes (an estimate, time_model.c codec_bytes); local SGD
 *                 (H > 1) has no dp traffic in inner steps and one blocking synchronisation (the
 *                 anchor's and the parameters' fp32 all-gathers and the deltas' reduction) every H
 *                 iterations, charged as 1/H of it a step. Inter-node links take the cluster's
 *                 inter_bw when set (--inter-node-bandwidth);
 *   optimizer     AdamW streams 28 bytes per parameter of its shard (4 reads and 3 writes of 4
 *                 bytes, ../shared/NOTES.md), 34 under bf16 mixed precision (the fp32 master weight
 *                 read again and rounded into the bf16 parameter), at memory bandwidth x memory
 *                 fraction.
 * The iteration time is their sum. Throughput: tokens/s = global batch x s / time; model TFLOP/s
 * per GPU = eq. 3 FLOPs (no recomputation) / time / GPUs; MFU = that / the dense peak (PaLM,
 * Chowdhery et al. 2022, App. B); HFU counts the recomputed FLOPs too. */
#ifndef TRIDENT_PARTITIONER_TIME_MODEL_H
#define TRIDENT_PARTITIONER_TIME_MODEL_H

#include <stdbool.h>

#include "engine/comm/comm.h"
#include "engine/train/schedule.h"
#include "partitioner/dp_overlap.h"
#include "partitioner/hardware.h"
#include "partitioner/simulate.h"
#include "partitioner/stages.h"
#include "partitioner/train_layout.h"

#ifdef __cplusplus
extern "C" {
#endif

/* What one micro-batch costs in one global chunk, in seconds. */
typedef struct tri_chunk_time {
    double fwd_compute, bwd_compute;   /* matmuls and elementwise work (bwd: with recomputation) */
    double fwd_tp, bwd_tp;             /* exposed tensor-parallel communication */
    double fwd_ep, bwd_ep;             /* expert-parallel all-to-alls (blocking: the experts wait for
                                          their tokens), at the ep group's bandwidth */
    double fwd_cp, bwd_cp;             /* exposed context-parallel key/value communication
                                          (partitioner/context_parallel.h) */
} tri_chunk_time;

typedef struct tri_time_result {
    double iteration_s;
    /* the iteration split for the busiest pipeline rank (they sum to iteration_s) */
    double compute_s, tp_s, ep_s, cp_s, bubble_s, pp_s, dp_s, optimizer_s;
    int busiest_rank;
    double bubble_fraction;        /* the simulator's 1 - sum(busy) / (pp x makespan), with messages */
    double makespan_s, makespan_no_comm_s;
    double fwd_s, bwd_s;           /* mean op time per (micro-batch, chunk) given to the simulator */
    double p2p_message_s;          /* one pipeline message */
    double model_flops, hw_flops;  /* per iteration, all GPUs */
    double tokens_per_s, model_tflops_per_gpu, mfu, hfu;
    double tp_bytes, pp_bytes, dp_bytes;  /* per step, on the busiest rank (payload convention, traffic.h) */
    double ep_bytes;               /* expert-parallel bytes per step on the busiest rank (traffic.h) */
    double cp_bytes;               /* context-parallel key/value bytes per step on the busiest rank (payload
                                      convention; partitioner/context_parallel.h) */
    /* data parallelism (see "DP" above) on the busiest rank, per step */
    double dp_sent_bytes;          /* what it puts on the wire (ring volumes; compressed payloads) */
    double dp_grad_sent_bytes;     /* of which the gradient reductions (local SGD: the deltas') */
    double dp_sent_uncompressed;   /* dp_sent_bytes with full-precision reductions */
    double dp_comm_s;              /* every dp operation on its comm stream, before any overlap */
    double dp_codec_s;             /* compressors' encode + decode (in dp_s) */
    double dp_stall_s;             /* overlap: its compute waiting for parameter all-gathers or a compressed
                                      reduction's first exchange (in dp_s) */
    double dp_expert_bytes;        /* of dp_bytes, the routed experts' (ep > 1): over the expert-data-
                                      parallel group (tri_expert_dp), 0 when that is one rank */
    double dp_expert_s;            /* their exposed share of the plain (not simulated) dp time: each
                                      collective at edp's ring factor and its ranks' link (etp ep apart) */
    bool dp_overlap_simulated;     /* dp_s from the rank timelines (partitioner/dp_overlap.h) */
    double dp_blocking_s;          /* simulated: the same timelines with every dp operation blocking
                                      (the latest rank's end, which may be another rank than the
                                      busiest one the share model charges) */
    bool tp_inter_node, pp_inter_node, dp_inter_node, ep_inter_node, cp_inter_node;
    bool simulated;                /* false: the closed-form bubble (tri_time_model_quick) */
} tri_time_result;

/* The per-micro-batch op times of global chunk g under plan (see the top comment). */
tri_chunk_time tri_time_chunk(const tri_transformer *m, const tri_train_layout *l, const tri_cluster *c,
                              const tri_stage_plan *plan, int g);

/* Predicts one iteration of schedule s (tri_schedule_make for l) under plan on cluster c.
 * When sim is not NULL it receives the simulation with message times (free with
 * tri_sim_result_free; for the timeline). TRI_EINVAL when the schedule cannot run,
 * TRI_ENOMEM. */
int tri_time_model_run(const tri_transformer *m, const tri_train_layout *l, const tri_cluster *c,
                       const tri_stage_plan *plan, const tri_schedule *s, tri_time_result *out,
                       tri_sim_result *sim);

/* The same without simulating: the bubble of the busiest rank in closed form, (p - 1) / v op
 * pairs of the mean chunk (ZB-H1: (p - 1) (T_F + T_B - T_W)), messages on the critical path
 * 2 (p - 1). For ranking many layouts quickly (partitioner/search.h). */
void tri_time_model_quick(const tri_transformer *m, const tri_train_layout *l, const tri_cluster *c,
                          const tri_stage_plan *plan, tri_time_result *out);

/* The gemm fraction (c->eff.gemm, else unchanged) for which schedule s of layout l predicts an
 * iteration of measured_s seconds, by bisection over (0, 1] (the predicted time falls as the
 * fraction grows): what `partitioner --calibrate` sets from a measured run. TRI_EINVAL when even
 * 100% of peak is slower than measured_s (the message gives the fastest possible time). */
int tri_time_model_calibrate_gemm(const tri_transformer *m, const tri_train_layout *l, const tri_cluster *c,
                                  const tri_stage_plan *plan, const tri_schedule *s, double measured_s,
                                  double *gemm);

/* bytes[kind] of data-parallel traffic in one step on pipeline rank r: partitioner/traffic.h's
 * tri_dp_step_traffic (the engine's own count) over the rank's units of parameters as the engine
 * uses them (models/gpt.c, tri_gpt_unit_uses): fp32 gradients, parameters in the layout's
 * precision; payload bytes of both groups together: under expert parallelism the routed experts'
 * units over the expert-data-parallel group (tri_expert_dp; none when it is one rank), the rest over
 * dp. TRI_ENOMEM. */
int tri_time_dp_traffic(const tri_transformer *m, const tri_train_layout *l, const tri_stage_plan *plan, int r,
                        double bytes[TRI_COMM_KINDS]);

/* The data-parallel method d against layout l: tri_compression_check (compressors with ZeRO 2-3
 * refused) and local SGD (H >= 1; H > 1 only at ZeRO 0, as the engine). TRI_EINVAL naming the flag
 * and value. */
int tri_time_dp_method_check(const tri_dp_method *d, const tri_train_layout *l);

/* Parameter elements on pipeline rank r (all its chunks) on one TP rank. */
double tri_time_rank_params(const tri_transformer *m, const tri_train_layout *l, const tri_stage_plan *plan,
                            int r);

#ifdef __cplusplus
}
#endif

#endif
