/* engine/train/zero.h - ZeRO: where a stage's parameters, gradients and optimizer state live, and how
 * they are reduced and gathered over data parallelism (Rajbhandari et al. 2020, stages 0-3).
 *
 * The stage's flat buffers are cut into units (engine/train/param.h); data-parallel rank r owns the same
 * equal slice of every unit. The model asks for a unit's parameters and gradient buffer around each
 * use (tri_zero_params / tri_zero_grads) and says when it has finished writing a unit's gradients
 * (tri_zero_grads_done); the trainer reduces, updates and gathers around the step:
 *
 *   stage 0  full parameters, full gradients; gradients all-reduced at the end of the step.
 *   stage 1  full parameters, full gradients; each unit's gradients reduce-scattered at the end of
 *            the step, AdamW on the owned slices, each unit's parameters all-gathered after it.
 *   stage 2  full parameters; gradients live only as the owned slices: a unit's gradient bucket is
 *            reduce-scattered into them as soon as a pass has finished writing it, and released.
 *   stage 3  as stage 2, and the parameters live only as the owned slices: a unit is all-gathered
 *            into a buffer just before use and released after.
 *
 * Deterministic mode: every pass writes its gradients into a bucket (at any stage) of exact int64
 * fixed-point sums (2^-TRI_FIXED_BITS units, engine/core/math.h): the ops that write a parameter's
 * gradient add it one 64-row chunk of their rows at a time, each chunk's fp32 result rounded once
 * (engine/device/ops/exact_grads.c, through the chunk's scratch exact_tmp). The bucket is then added
 * into the whole stage's int64 sums at stages 0-1, or reduce-scattered as int64 into the owned slices
 * at stages 2-3. Integer sums do not depend on their order or grouping, and the chunks are the same
 * 64 positions of a sequence in every layout, so the gradients are the same bits in every layout that
 * differs in pp, dp, cp, ZeRO stage or micro-batch count, and from run to run; they become fp32 once,
 * at the end of the step.
 *
 * Overlap (Megatron-LM's --overlap-grad-reduce and --overlap-param-gather; Rajbhandari et al.
 * 2020 §7): with overlap_grad_reduce a reduction is started non-blocking (engine/comm/comm.h) where it
 * would otherwise block - a stage 2-3 bucket as soon as a pass has written it, a stage 0-1 unit as
 * soon as its last pass of the step has - and completed at the latest in tri_zero_reduce_grads, in
 * the order started (so the owned sums are added in the same order as without overlap: the same
 * bits). With overlap_param_gather, stages 1-2 start every unit's all-gather after the update and
 * wait for each unit only at its first use in the next forward; stage 3 records the order of the
 * first step's all-gathers and afterwards starts each one while the previous unit is in use
 * (prefetch, as DeepSpeed's ZeRO-3 traces its modules). Every operation moves the same bytes as
 * without overlap; buffers in flight belong to the comm until completed. A compressed reduction
 * (stages 0-1, engine/train/dp_compress.h) starts the same way: its first exchange when the unit's
 * last pass is done, its second when the next unit's is, its decoding in tri_zero_reduce_grads.
 *
 * Mixed precision (bf16, Megatron-LM's --bf16 with its fp32 main parameters and gradients;
 * Micikevicius et al. 2018): the parameters above (whole, shard and gathered buffers) are bf16,
 * what the forward and backward read; the gradients stay fp32; and the fp32 master weights live
 * with the optimizer state, over the owned ranges (whole at stage 0, the shard above). The
 * optimizer updates the master weights (tri_zero_owned_params) and tri_zero_publish_owned rounds
 * them into the owned bf16 parameters, which stages 1-2 then all-gather (half the bytes of fp32).
 * Per parameter: 2 + 4 + 12 bytes at stage 0, 2 + 4 + 12/dp at stage 1, 2 + (4 + 12)/dp at stage
 * 2, (2 + 4 + 12)/dp at stage 3 (plus the whole-unit buffers).
 *
 * Expert parallelism (docs/moe.md; Megatron-Core's distributed optimizer with parallel folding):
 * an ep rank's own experts (spec.expert) are replicated over the expert-data-parallel group edp =
 * dp / ep only, everything else over dp. A unit is therefore cut into parts (engine/train/param.h
 * tri_param_part: a sparse block's dense part, its experts, the dense part after) and everything
 * above acts per part on the part's group: the reduce-scatter / all-reduce of its gradients, the
 * all-gather of its parameters, its owned slice (len / group size, at the rank's index in that group)
 * and so the optimizer's owned ranges (one per part), the master weights laid out as they are, the
 * gradient norm's pieces and the checkpoint shards. Why parts of one unit rather than the experts as
 * a unit of their own: the model keeps asking for a block as one flat unit (its passes, views and
 * buffers do not change, nor do dense layouts: a unit without expert parameters is one part), and a
 * block's two groups move in the same step, so overlap and prefetch need no new ordering (each buffer
 * carries one request per part). In deterministic mode the experts' grouped GEMMs add their
 * gradients into the pass's int64 bucket like every other op (each call rounded once), and the bucket
 * is reduced part by part (the experts over edp). Gradient compression with ep stays refused (the compressors code whole units
 * over dp).
 *
 * Whole-unit buffers (stage 3's gathered parameters, stage 2-3's gradient buckets) come from a
 * pool of two buffers sized for the largest block, plus a buffer of its own for any larger unit
 * (the embedding): the largest unit must exist whole while it is used, as in FSDP. */
#ifndef TRIDENT_ENGINE_TRAIN_ZERO_H
#define TRIDENT_ENGINE_TRAIN_ZERO_H

#include <stdbool.h>

#include "engine/comm/comm.h"
#include "engine/device/arena.h"
#include "engine/device/device.h"
#include "engine/train/dp_compress.h"
#include "engine/train/param.h"
#include "engine/train/train_layout.h"

#ifdef __cplusplus
extern "C" {
#endif

#define TRI_ZERO_POOL 2    /* shared whole-unit buffers per kind */
#define TRI_FIXED_BITS 44  /* deterministic mode: gradients in 2^-44 units, |g| < 2^18 */

typedef struct tri_zero_buffer {
    tri_tensor t;        /* (len) */
    int unit;            /* the unit it holds, -1 when free */
    int refs;            /* users of the held unit (0 with unit >= 0: prefetched or reducing) */
    bool prefetched;     /* parameters: all-gathered ahead of use (overlap), not used yet */
    bool reducing;       /* gradients: its reduce-scatter is in flight (overlap) */
    uint64_t ticket;     /* gradients: when the reduction started (they complete in that order) */
    tri_comm_request req[TRI_UNIT_MAX_PARTS]; /* one per part of the held unit */
    tri_tensor tmp;      /* gradients: (the unit's owned slices) the reduce-scatters' results, part after
                            part (i64 when deterministic) */
} tri_zero_buffer;

typedef struct tri_zero {
    /* from the run's layout (engine/train/train_layout.h), as tri_zero_take found it */
    int stage;                   /* 0..3 */
    bool deterministic;          /* exact fixed-point gradient sums (see the top comment) */
    bool overlap_grad_reduce, overlap_param_gather; /* (see the top comment) */
    bool bf16;                   /* bf16 parameters, fp32 master weights (see the top comment) */
    const tri_param_layout *L;
    tri_device *dev;
    tri_comm *dp;                /* the data-parallel group (NULL while planning) */
    tri_comm *edp;               /* expert parallelism: the expert-data-parallel group that reduces the
                                    expert parameters (spec.expert); NULL: none */
    int64_t *slice_offset;       /* per part: where its owned slice starts in the shard buffers */
    /* parameters */
    tri_tensor params;           /* stages 0-2: (padded_numel) the whole local stage */
    tri_tensor param_shard;      /* stage 3: (shard_numel) the owned slices, unit after unit */
    tri_tensor master;           /* bf16: f32 (tri_zero_owned_numel) master weights, laid out as the
                                    optimizer state; else absent */
    /* gradients */
    tri_tensor grads;            /* stages 0-1: (padded_numel) */
    tri_tensor grad_shard;       /* stages 2-3: (shard_numel) */
    tri_tensor reduce_tmp;       /* stages 2-3 without overlap: (largest unit's owned slices) a reduce-scatter's result */
    /* whole-unit buffers: [0, TRI_ZERO_POOL) shared, then one per unit larger than the shared ones */
    int n_param_bufs, n_grad_bufs;
    tri_zero_buffer *param_bufs, *grad_bufs;
    int64_t pool_len;            /* length of the shared buffers */
    /* deterministic mode */
    tri_tensor acc;              /* i64 exact sums: (padded_numel) at stages 0-1, (shard_numel) above */
    tri_tensor acc_tmp;          /* stages 2-3 without overlap: i64 (largest unit's owned slices) a reduce-scatter's result */
    tri_tensor exact_tmp;        /* f32 (largest unit): a 64-row chunk's gradient before its exact add
                                    (engine/device/ops/exact_grads.c, set on the device per pass) */
    tri_tensor bad;              /* f32 (1): contributions outside the fixed-point range */
    /* overlap: what is in flight */
    tri_comm_request *grad_req;  /* per part: stages 0-1, its gradient reduction */
    tri_comm_request *param_req; /* per part: stages 1-2, its parameter all-gather */
    int *grad_calls;             /* per unit: tri_zero_grads_done calls so far this step */
    int *grad_calls_per_step;    /* per unit: the calls that complete its gradient (0: unknown) */
    bool *grad_started;          /* per unit: its reduction has started this step */
    uint64_t next_ticket;
    /* stage 3 prefetch: the order of the first step's all-gathers, replayed one ahead */
    int *trace;
    int n_trace, trace_cap, trace_pos;
    bool in_step, trace_ready, trace_ok;
    /* compressed dp reduction (engine/train/dp_compress.h): replaces stages 0-1's plain one */
    tri_dp_compress comp;
    int64_t iteration;           /* the step's 0-based iteration (qsgd's rounding, powersgd's start) */
    bool grads_zeroed;           /* the last update zeroed every gradient this rank keeps in its own pass
                                    (tri_op_adamw_fused_multi where tri_zero_update_zeroes_grads): the
                                    next tri_zero_zero_grads skips their fill */
    /* what overlap did, for tests and logs: operations started non-blocking, prefetches used */
    uint64_t started_grad_reductions, started_param_gathers, prefetches_used;
} tri_zero;

/* Takes the stage's buffers from arena a (planning or real: called twice like every take) for the
 * run's ZeRO stage, overlaps, deterministic mode and precision. TRI_EINVAL for a stage outside 0..3,
 * TRI_ENOMEM. */
int tri_zero_take(tri_zero *z, tri_arena *a, const tri_param_layout *L, const tri_train_layout *run);
/* After the arena is committed: the device and the data-parallel group to work with. */
void tri_zero_bind(tri_zero *z, tri_device *dev, tri_comm *dp);
/* Expert parallelism (docs/moe.md): the expert parts (spec.expert) are reduced, sharded and gathered
 * over edp instead of dp, at every stage (see the top comment). */
void tri_zero_bind_experts(tri_zero *z, tri_comm *edp);
/* Completes whatever is in flight (ignoring errors), then frees the bookkeeping. */
void tri_zero_destroy(tri_zero *z);
/* With --overlap-grad-reduce at stages 0-1: unit u's gradient is complete after `calls`
 * tri_zero_grads_done calls in a step (passes writing it x micro-batches, from the model), so its
 * reduction starts then. Units left unknown (0) are reduced in tri_zero_reduce_grads. */
void tri_zero_expect_grads(tri_zero *z, int unit, int calls);
/* Completes every operation in flight and drops prefetched parameters: before reading or writing
 * the buffers directly (tri_zero_owned_*, checkpoints). */
int tri_zero_sync(tri_zero *z);

/* Unit u's parameters as one flat view of u->len elements, valid until released. Stage 3
 * all-gathers the owned slices into a whole-unit buffer (a unit in use by another caller is shared). */
int tri_zero_params(tri_zero *z, int unit, tri_tensor *flat);
void tri_zero_release_params(tri_zero *z, int unit);

/* Unit u's gradients as one flat view to accumulate into. Stages 2-3: a zeroed bucket (shared by
 * concurrent users of the same unit). */
int tri_zero_grads(tri_zero *z, int unit, tri_tensor *flat);
/* The caller has finished writing unit u's gradients for this pass. Stages 2-3: the bucket is
 * reduce-scattered over dp, this rank's slice added to its owned gradients, the bucket released
 * once its last user is done. Stages 0-1: nothing. */
int tri_zero_grads_done(tri_zero *z, int unit);

/* Deterministic mode: makes the device's exact scratch (tri_device_set_exact_grads) this chunk's,
 * before a pass writes gradients (the int64 views tri_zero_grads gives); outside deterministic mode it
 * clears it. TRI_OK or the device's error. */
int tri_zero_exact_grads(tri_zero *z);
/* Zeroes every gradient this rank keeps (start of a step); their fill is skipped when the last
 * update zeroed them already (z->grads_zeroed), the rest (exact sums, counters) is reset as always. */
int tri_zero_zero_grads(tri_zero *z);
/* End of a step's backward: stage 0 all-reduces the gradients, stage 1 reduce-scatters every unit
 * (in place: each rank's slice of the buffer receives the sum); stages 2-3 have done it per bucket.
 * With a compressor (run->compression, dp > 1) each unit goes through tri_dp_compress_unit instead,
 * for iteration z->iteration (set by the trainer).
 * Deterministic mode reduces the exact int64 sums the same way. Other reductions of owned pieces
 * (TP for replicated parameters under SP, the tied embedding) follow, on tri_zero_owned_sums. */
int tri_zero_reduce_grads(tri_zero *z);
/* Deterministic mode: converts the owned exact sums to the fp32 gradients the optimizer reads;
 * TRI_ENONFINITE when a contribution was not finite or outside the fixed-point range. Otherwise
 * nothing. */
int tri_zero_finish_grads(tri_zero *z);
/* After the optimizer updated the owned slices: stages 1-2 all-gather every unit's parameters. */
int tri_zero_gather_params(tri_zero *z);

/* ---- one parameter, whatever the stage and precision (checkpoints, tests, initialisation) ---- */

/* The local (TP-shard) values of parameter p (fp32: the master weights under bf16), or its complete
 * gradients (after the step's reductions), into host (p->numel floats). Where the values are
 * sharded (stage 3, or any stage above 0 for gradients and bf16 master weights) the pieces other
 * data-parallel ranks own are summed in over dp: collective over the data-parallel group. */
int tri_zero_read_param(tri_zero *z, const tri_param *p, bool grads, float *host);
/* Writes parameter p's local values from host (every data-parallel rank passes the same values):
 * the parameters, or under bf16 the fp32 master weights and their bf16 rounding. */
int tri_zero_write_param(tri_zero *z, const tri_param *p, const float *host);

/* ---- what this rank owns ----
 * The owned ranges, one per unit: stage 0 owns every unit whole, stages 1-3 their slices. For
 * each: its flat range [start, start + len) in the stage's buffers and where it sits in the
 * rank's optimizer state [local, local + len). */
int tri_zero_n_owned(const tri_zero *z);
void tri_zero_owned(const tri_zero *z, int k, int64_t *start, int64_t *len, int64_t *local);
/* The part of parameter p inside owned range k: flat offsets [*s, *s + *n) of the stage's buffers,
 * at [*at, *at + *n) of the rank's optimizer state. Returns false (and *n = 0) when they do not meet.
 * The pieces of p this rank owns are walked as
 *   for (int k = 0; k < tri_zero_n_owned(z); k++) if (tri_zero_owned_piece(z, k, p, &s, &n, &at)) ... */
bool tri_zero_owned_piece(const tri_zero *z, int k, const tri_param *p, int64_t *s, int64_t *n, int64_t *at);
/* Elements of optimizer state this rank keeps (padded_numel at stage 0, shard_numel above). */
int64_t tri_zero_owned_numel(const tri_zero *z);
/* The owned piece [start, start + len) (flat offsets) of the parameters the optimizer updates
 * (fp32: the master weights with bf16) and of the complete gradients (after
 * tri_zero_reduce_grads), as 1-d views. */
tri_tensor tri_zero_owned_params(const tri_zero *z, int64_t start, int64_t len);
/* The same piece of the parameters the model reads (bf16 with mixed precision; else the same
 * view as tri_zero_owned_params). */
tri_tensor tri_zero_owned_model(const tri_zero *z, int64_t start, int64_t len);
/* Whether an update of the owned pieces may also zero the gradients for the next step
 * (tri_op_adamw_fused_multi, then z->grads_zeroed): true when the gradients it reads are every
 * gradient element tri_zero_zero_grads fills but the units' padding, and that padding is zero
 * whatever the step did. So: stage 0 (each unit owned whole), stage 1 at dp 1, stages 2-3 (the
 * gradients live only as the owned slices); not stage 1 at dp > 1 (the rest of each unit holds this
 * rank's unreduced contributions, which the fill must clear), nor with a compressed dp reduction
 * (it decodes into the padding). The bf16 publish it also does covers the parameters' elements of
 * the owned ranges: the padding's master and model values stay the zeros init_params wrote. */
bool tri_zero_update_zeroes_grads(const tri_zero *z);
/* bf16: rounds every owned master range into the model's parameters (after an update or a write
 * of the master weights; stages 1-2 then all-gather them). fp32: nothing. */
int tri_zero_publish_owned(const tri_zero *z);
tri_tensor tri_zero_owned_grads(const tri_zero *z, int64_t start, int64_t len);
/* What further gradient reductions of an owned piece act on before tri_zero_finish_grads: the
 * int64 exact sums in deterministic mode, else the fp32 gradients. */
tri_tensor tri_zero_owned_sums(const tri_zero *z, int64_t start, int64_t len);

#ifdef __cplusplus
}
#endif

#endif
