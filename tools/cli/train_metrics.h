/* tools/cli/train_metrics.h - engine_train's observability: the per-iteration metrics JSON line,
 * the time split of each step, straggler detection across ranks, and progress with ETA.
 *
 * Each iteration's step time is split by engine/train/step_time.h into compute, tp, pp, bubble, dp and
 * other communication. At every log interval all ranks exchange their compute and wait seconds
 * and device memory peak summed since the previous exchange (one small all-gather over the world,
 * reached by every rank at the same iterations), so rank 0 names the slowest rank: the straggler
 * the others wait for. One JSON object per iteration goes to SAVE_DIR/metrics.jsonl (rank 0):
 *   {"kind":"train","iter":N,"loss","lr","grad_norm","ms","tokens_per_s","gflops","mfu",
 *    "step_s","compute_s","tp_s","pp_s","bubble_s","dp_s","other_s","mem_mib","eta_s",
 *    "tp_bytes","pp_bytes","dp_bytes" (the wire bytes rank 0 sent in that step in its tensor-,
 *    pipeline- and data-parallel groups, counted by the comms: engine/comm/comm.h "Wire bytes"),
 *    "ep_s","ep_bytes" (expert parallelism: blocked seconds and wire bytes in the expert-parallel
 *    group, the MoE token all-to-all and its count exchange; 0 at ep 1),
 *    "cp_s","cp_bytes" (context parallelism: blocked seconds in the cp group, the exposed cp
 *    communication, and the payload bytes rank 0 sent in it, equal to the partitioner's
 *    tri_cp_layer_traffic summed over the step; 0 at cp 1),
 *    and at log intervals "ranks":{"compute_s":[..],"wait_s":[..],"mem_mib":[..]},
 *    "straggler_rank","straggler_compute_s","median_compute_s";
 *    models with experts (engine/train/moe_stats.h) also "moe_aux_loss","moe_z_loss" (the step's, apart
 *    from "loss"), "moe_load" (the largest layer's busiest-expert tokens over the mean per expert),
 *    "moe_drop_frac" (dropped / routed selections), and per sparse layer "moe_layer" (its index),
 *    "moe_layer_load", "moe_layer_drop_frac"}
 * Times are seconds of rank 0 (ms: milliseconds), memory MiB, mfu a fraction of the peak. */
#ifndef TRIDENT_TOOLS_CLI_TRAIN_METRICS_H
#define TRIDENT_TOOLS_CLI_TRAIN_METRICS_H

#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>

#include "engine/comm/comm.h"
#include "engine/train/moe_stats.h"
#include "engine/train/step_time.h"

typedef struct tri_train_metrics {
    FILE *out;                 /* metrics.jsonl on rank 0, NULL elsewhere (not owned) */
    tri_comm *world;           /* the exchange at log intervals (host buffers: the MPI world) */
    double peak_flops;         /* peak FLOP/s of the whole job, for MFU (0: no MFU) */
    int64_t first_iter, last_iter;   /* iterations run: (first_iter, last_iter] */
    double t_start;            /* tri_now_s() when training started */
    tri_step_time interval;    /* summed since the last exchange */
    int steps;                 /* iterations in interval */
    float *gathered;           /* (world size, 4) */
    const tri_moe_stats *moe;  /* the trainer's MoE account (reduced each step), or NULL: dense */
    /* the last exchange, for the log line */
    int straggler_rank;
    double straggler_compute_s, median_compute_s;
} tri_train_metrics;

/* Prepares the account. peak_gflops_per_rank: the hardware peak of one rank in GFLOP/s (0: MFU
 * is reported as 0). TRI_ENOMEM. */
int tri_train_metrics_init(tri_train_metrics *m, FILE *out, tri_comm *world, double peak_gflops_per_rank,
                           int64_t first_iter, int64_t last_iter);
void tri_train_metrics_free(tri_train_metrics *m);

/* One finished iteration `iter` (1-based) with its loss, lr, grad norm, time split (t.step_s is
 * the step's seconds), FLOPs and tokens, and the device's memory peak in bytes. When `exchange`
 * (which must be the same on every rank: a collective), gathers every rank's interval figures and
 * names the straggler. Writes the JSON line (rank 0). */
int tri_train_metrics_step(tri_train_metrics *m, int64_t iter, double loss, double lr, double grad_norm,
                           const tri_step_time *t, double flops, double tokens, size_t mem_peak_bytes,
                           bool exchange);

/* Seconds left at the average pace so far after iteration iter (0 before any). */
double tri_train_metrics_eta(const tri_train_metrics *m, int64_t iter);

/* Formats seconds as "1h02m03s", "2m03s" or "3.4s" into buf. */
const char *tri_format_duration(double seconds, char *buf, size_t cap);

#endif
