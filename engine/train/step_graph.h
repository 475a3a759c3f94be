/* engine/train/step_graph.h - the training step's forward and backward passes as device graphs.
 *
 * Launch overhead is a fixed cost per kernel (about 4 us on a GPU; ~480 kernels a GPT-2 124M step).
 * A CUDA graph (the CUDA Programming Guide's "CUDA Graphs"; Megatron-LM's --enable-cuda-graph)
 * records a stream's work once and replays it with one launch. What repeats exactly in a step is
 * the pipeline executor's compute ops: the forward of a micro-batch in an activation slot (with the
 * fused loss backward, scaled by the step's dloss) and its backward. Each (op kind, chunk, slot,
 * dloss) is captured once, on the second training step (the first runs eagerly: cuBLASLt's plans,
 * the loss staging and every lazily made buffer exist before any capture, as nothing may allocate or
 * wait inside one), and replayed by every later step's same op. The graph reads the slot's token
 * buffers, which the executor uploads before it is launched (uploads stay outside: a captured upload
 * would replay the bytes of its staging slot, not the new batch), and the per-micro-batch loss copy
 * to the host follows it, outside too. Zeroing the gradients, their reductions, the gradient norm,
 * the optimizer (its learning rate and step are host scalars of each step) and evaluation (another
 * pass list) run uncaptured.
 *
 * Supported: one rank per model replica and no data parallelism (tp = pp = dp = 1), ZeRO stage 0-1
 * without deterministic mode or overlapped reductions, on a device that captures (CUDA). Elsewhere
 * tri_step_graph_check refuses with the reason: the comms wait on the host (MPI, the staged comm) or
 * are not captured in this version (NCCL), and ZeRO's gradient buckets, parameter gathers and
 * overlapped reductions keep host bookkeeping per pass that a replay would skip. */
#ifndef TRIDENT_ENGINE_TRAIN_STEP_GRAPH_H
#define TRIDENT_ENGINE_TRAIN_STEP_GRAPH_H

#include "engine/comm/grid.h"
#include "engine/device/device.h"
#include "engine/train/chunk.h"

#ifdef __cplusplus
extern "C" {
#endif

/* One captured compute op. */
typedef struct tri_step_graph_entry {
    int kind, chunk, slot;     /* the schedule op's kind (TRI_SCHED_FWD / _BWD), local chunk, slot */
    float dloss;               /* the step's loss scale it was captured with */
    tri_device_graph *graph;
    int64_t nodes;             /* its nodes (kernels, copies, cuBLASLt calls) */
} tri_step_graph_entry;

typedef struct tri_step_graph {
    tri_device *dev;
    int64_t steps;             /* training steps begun (tri_step_graph_begin_step) */
    tri_step_graph_entry *entry;
    int n, cap;
    int64_t captures, launches; /* graphs captured, graph launches so far */
} tri_step_graph;

/* TRI_OK when the trainer's layout can capture its step on dev, else TRI_ENOTSUP naming
 * --enable-cuda-graph and the reason (the device, profiling, tp/pp/dp > 1, ZeRO stage 2-3,
 * deterministic mode, overlapped gradient reductions). */
int tri_step_graph_check(const tri_device *dev, const tri_grid *grid, tri_chunk *const *chunks, int v);

void tri_step_graph_init(tri_step_graph *g, tri_device *dev);
void tri_step_graph_free(tri_step_graph *g);

/* A training step begins: the first runs eagerly, later ones capture or replay. */
void tri_step_graph_begin_step(tri_step_graph *g);

/* Runs pass(ctx), the compute op (kind, chunk, slot) of a training step with loss scale dloss:
 * eagerly in the first step; in a later one by launching its graph, captured first when it has
 * none (the pass then runs under capture, and its graph is launched at once). A capture that fails
 * (a wait or an allocation inside the pass) returns the device's error with context. */
int tri_step_graph_run(tri_step_graph *g, int kind, int chunk, int slot, float dloss, int (*pass)(void *ctx),
                       void *ctx);

#ifdef __cplusplus
}
#endif

#endif
