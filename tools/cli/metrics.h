/* tools/cli/metrics.h - reading what engine_train measured (SAVE_DIR/metrics.jsonl).
 *
 * engine_train appends one JSON object per line (cJSON): {"kind":"train","iter":N,"loss":...,
 * "ms":..., "tokens_per_s":..., "gflops":...} per iteration and {"kind":"eval",...} per
 * evaluation; a file may hold several runs, each starting again at iter 1. This reads the last
 * run's training iterations for `partitioner --calibrate`. */
#ifndef TRIDENT_TOOLS_CLI_METRICS_H
#define TRIDENT_TOOLS_CLI_METRICS_H

typedef struct tri_run_metrics {
    int iterations;          /* training iterations of the last run used (the first is skipped as
                                warm-up when there are more) */
    double median_s;         /* median seconds per iteration */
    double tokens_per_iter;  /* tokens_per_s x seconds, median */
    double flops_per_iter;   /* gflops x 1e9 x seconds, median (engine_train's eq. 3 FLOPs) */
} tri_run_metrics;

/* Reads path. TRI_EIO when it cannot be read; TRI_EINVAL naming the file and line when a line is
 * not a JSON object, a train line lacks "ms", "tokens_per_s" or "gflops", or there is no train
 * line at all. */
int tri_metrics_read(const char *path, tri_run_metrics *out);

#endif
