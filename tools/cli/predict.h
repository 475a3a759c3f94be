/* tools/cli/predict.h - a training step's per-op time on a named GPU, predicted on the CPU (the
 * kernel-time model: engine/device/device_cost.h records the step's kernels, partitioner/kernel_time.h
 * prices them). bench_cuda_train --predict prints it; tests/test_kernel_time.c checks it. */
#ifndef TRIDENT_TOOLS_CLI_PREDICT_H
#define TRIDENT_TOOLS_CLI_PREDICT_H

#include <stdbool.h>

#include "engine/comm/comm.h"
#include "models/model.h"
#include "partitioner/kernel_time.h"
#include "tools/cli/layout_flags.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Builds model m's session at layout request req on a cost device (the op set of `fused`:
 * engine/device/device_cost.h) over world (one rank: the model of one GPU), trains one warm-up step
 * and one recorded step on random tokens through the trainer engine_train uses (clipping at 1,
 * AdamW), and prices the recorded step's kernels on hw, with call_s seconds added per op call
 * (tri_kernel_rates), into *out. With cuda_graph (--enable-cuda-graph) the recorded step is the first
 * that replays graphs (the second trained: it captures its forward and backward passes, then launches
 * them), so their kernels are priced as graph nodes. Errors as the session's. */
int tri_cli_predict_step(tri_comm *world, const tri_model *m, tri_layout_request req, bool fused, bool cuda_graph,
                         const tri_hardware *hw, double call_s, tri_step_prediction *out);

#ifdef __cplusplus
}
#endif

#endif
