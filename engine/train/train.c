/* engine/train/train.c - one training step and evaluation over a rank's model chunks (see train.h). */
#include "engine/train/train.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine/core/status.h"
#include "engine/train/onebit_adam.h"
#include "engine/train/trust_ratio.h"

/* The data-parallel replicas whose gradients are averaged (Megatron-Core's data-parallel group with
 * context parallelism, docs/context_parallel.md): dp x cp ranks of the same (tp, pp), which hold the same
 * parameters and see different rows (cp ranks: other chunks of the same sequences); at cp 1 the dp group.
 * Their number and this rank's place among them (cp_rank + cp dp_rank); their comm is the grid's dp_cp_comm. */
static int grad_replicas(const tri_grid *g)
{
    return g->dp * (g->cp > 1 ? g->cp : 1);
}

static int grad_replica_rank(const tri_grid *g)
{
    return g->cp_rank + (g->cp > 1 ? g->cp : 1) * g->dp_rank;
}

/* Elements of optimizer state a rank keeps for a stage: all of it without ZeRO, its shard with. */
static int64_t owned_numel(const tri_param_layout *L, int zero_stage)
{
    return zero_stage == 0 ? L->padded_numel : L->shard_numel;
}

/* Gradient-norm slots: one per (global parameter, TP rank), and per DP rank when ZeRO shards. */
static int64_t norm_slots(int n_global_params, int tp, int dp, int zero_stage)
{
    return (int64_t)n_global_params * tp * (zero_stage > 0 ? dp : 1);
}

/* The trainer's buffers, taken from arena a (planning or real): per chunk the optimizer state of
 * what it owns, the gradient-norm slots and a scalar; for LARS and LAMB the trust ratios' partial
 * sums (both quantities' slots, or in deterministic mode their limbs per tensor) and the ratios.
 * Shared by tri_trainer_create and the planner. */
static int take_buffers(tri_arena *a, tri_optimizer *opt, const tri_param_layout *const *layouts, int v,
                        int n_global_params, int tp, int zero_stage, const tri_adamw_config *adamw,
                        tri_tensor *slots, tri_tensor *scalar, tri_tensor *fixed, tri_tensor trust[3])
{
    int rc = TRI_OK;
    for (int c = 0; c < v && !rc; c++)
        rc = tri_optimizer_take(&opt[c], a, adamw, owned_numel(layouts[c], zero_stage));
    int64_t n = norm_slots(n_global_params, tp, layouts[0]->dp, zero_stage);
    if (!rc) rc = tri_arena_take(a, TRI_MEM_COMM, slots, TRI_F32, 1, (int64_t[]){n});
    if (!rc) rc = tri_arena_take(a, TRI_MEM_WORKSPACE, scalar, TRI_F32, 1, (int64_t[]){1});
    /* the loss (1) and, in deterministic mode, the gradient norm's limbs (6), as int64 */
    if (!rc) rc = tri_arena_take(a, TRI_MEM_COMM, fixed, TRI_I64, 1, (int64_t[]){8});
    for (int i = 0; i < 3; i++)
        trust[i] = tri_tensor_none();
    if (rc || !tri_optimizer_has_trust_ratio(adamw->kind))
        return rc;
    rc = tri_arena_take(a, TRI_MEM_COMM, &trust[0], TRI_F32, 1, (int64_t[]){2 * n});
    if (!rc) rc = tri_arena_take(a, TRI_MEM_COMM, &trust[1], TRI_I64, 1, (int64_t[]){12 * (int64_t)n_global_params});
    if (!rc) rc = tri_arena_take(a, TRI_MEM_WORKSPACE, &trust[2], TRI_F32, 1, (int64_t[]){n_global_params});
    return rc;
}

int tri_trainer_plan(const tri_param_layout *const *layouts, int v, int n_global_params, int tp,
                     int zero_stage, const tri_adamw_config *opt_cfg, size_t bytes[TRI_MEM_KINDS])
{
    tri_arena a;
    tri_optimizer opt[TRI_MAX_CHUNKS];
    tri_tensor slots, scalar, fixed, trust[3];
    tri_adamw_config none = {0};
    if (!opt_cfg)
        opt_cfg = &none;
    if (v < 1 || v > TRI_MAX_CHUNKS)
        return TRI_ERR(TRI_EINVAL, "trainer: %d model chunks per rank (1..%d)", v, TRI_MAX_CHUNKS);
    tri_arena_plan(&a);
    int rc = take_buffers(&a, opt, layouts, v, n_global_params, tp, zero_stage, opt_cfg, &slots, &scalar, &fixed,
                          trust);
    if (!rc)
        memcpy(bytes, a.by_kind, TRI_MEM_KINDS * sizeof *bytes);
    return rc;
}

static int take_trainer_buffers(tri_trainer *t, const tri_adamw_config *adamw)
{
    const tri_param_layout *layouts[TRI_MAX_CHUNKS];
    for (int c = 0; c < t->v; c++)
        layouts[c] = &t->chunks[c]->layout;
    tri_tensor trust[3];
    int rc = take_buffers(&t->arena, t->opt, layouts, t->v, t->chunks[0]->n_global_params, t->grid->tp,
                          t->chunks[0]->zero.stage, adamw, &t->norm_slots, &t->scalar, &t->loss_fixed, trust);
    t->trust_sums = trust[0];
    t->trust_limbs = trust[1];
    t->trust_ratios = trust[2];
    if (t->cfg.local.steps == 0)
        return rc;
    /* local SGD: the outer state of each chunk (its dp slice) and one scratch for the largest unit */
    int64_t scratch = 1;
    for (int c = 0; c < t->v && !rc; c++) {
        rc = tri_outer_take(&t->outer[c], &t->arena, layouts[c], &t->cfg.local, &t->chunks[c]->zero.comp.c);
        int64_t n = tri_outer_scratch_numel(layouts[c]);
        scratch = n > scratch ? n : scratch;
    }
    if (!rc) rc = tri_arena_take(&t->arena, TRI_MEM_COMM, &t->outer_scratch, TRI_F32, 1, (int64_t[]){scratch});
    return rc;
}

/* Local SGD: ZeRO's data-parallel group becomes this rank alone (inner steps reduce nothing over
 * dp), and the outer state starts from the initial parameters. */
static int start_local_sgd(tri_trainer *t)
{
    int rc = tri_local_sgd_check(&t->cfg.local, t->chunks[0]->zero.stage);
    /* the outer step averages whole units over dp, where an ep rank's experts are other ep ranks'
     * other experts, and the inner steps would still reduce the experts over edp */
    if (!rc && (t->grid->ep > 1 || t->chunks[0]->zero.edp))
        rc = TRI_ERR(TRI_EINVAL, "--local-sgd-steps %d with --expert-model-parallel-size %d "
                     "(--tensor-model-parallel-size %d): local SGD's outer synchronisation averages each "
                     "data-parallel replica's whole units, while the experts reduce over the expert-data-parallel "
                     "group, which spans the ep ranks (different experts) and at tp > 1 the TP ranks (not built; "
                     "train without one of the two)", t->cfg.local.steps, t->grid->ep, t->grid->tp);
    if (!rc && t->grid->cp > 1) /* the outer step averages over dp, where the cp ranks hold one replica */
        rc = TRI_ERR(TRI_EINVAL, "--local-sgd-steps %d with --context-parallel-size %d: local SGD's inner steps keep "
                     "each data-parallel replica's gradients apart, while a replica's cp ranks must still sum theirs "
                     "every step (not built; train without one of the two)", t->cfg.local.steps, t->grid->cp);
    if (!rc && t->grid->etp > 1) /* the same: the etp ranks' slices are different tensors' parts */
        rc = TRI_ERR(TRI_EINVAL, "--local-sgd-steps %d with --expert-tensor-parallel-size %d: local SGD's outer "
                     "synchronisation averages each data-parallel replica's whole units, while expert tensor "
                     "parallelism gives the etp ranks different slices of the experts (not built)",
                     t->cfg.local.steps, t->grid->etp);
    if (!rc) rc = tri_comm_split(t->grid->dp_comm, t->grid->dp_rank, 0, &t->self_comm);
    return rc ? rc : tri_trainer_outer_reset(t);
}

int tri_trainer_outer_reset(tri_trainer *t)
{
    if (t->cfg.local.steps == 0)
        return TRI_ERR(TRI_EINVAL, "trainer: the outer state is reset only with local SGD (--local-sgd-steps)");
    int rc = TRI_OK;
    for (int c = 0; c < t->v && !rc; c++) {
        rc = tri_zero_sync(&t->chunks[c]->zero);
        if (!rc) rc = tri_outer_reset(t->dev, &t->outer[c], &t->chunks[c]->zero);
    }
    t->replicas_apart = false;
    return rc;
}

int tri_trainer_outer_sync(tri_trainer *t)
{
    if (t->cfg.local.steps == 0)
        return TRI_ERR(TRI_EINVAL, "trainer: an outer synchronisation needs local SGD (--local-sgd-steps)");
    int rc = TRI_OK;
    tri_outer_copies copies = {.tp = t->grid->tp > 1 ? t->grid->tp_comm : NULL, .shared = t->replica_comm};
    for (int c = 0; c < t->v && !rc; c++)
        rc = tri_outer_step(t->dev, t->grid->dp_comm, &t->chunks[c]->zero, &t->outer[c], t->outer_scratch,
                            &t->cfg.local, t->chunks[c]->zero.iteration, &copies);
    if (!rc) {
        t->outer_syncs++;
        t->replicas_apart = false;
    }
    return rc;
}

/* 1-bit Adam (engine/train/onebit_adam.h): the refusals; in the compression stage ZeRO's
 * data-parallel group is this rank alone during the backward pass (the gradients stay the
 * worker's own), so the self comm is split here. */
static int start_onebit_adam(tri_trainer *t)
{
    const tri_zero *z = &t->chunks[0]->zero;
    int rc = tri_onebit_adam_check(&t->opt[0].cfg, &z->comp.c, z->stage, t->cfg.local.steps, z->deterministic,
                                   t->grid->cp);
    if (!rc && t->grid->ep > 1) /* compression refuses ep > 1 already; said here for the record */
        rc = TRI_ERR(TRI_EINVAL, "--onebit-adam with --expert-model-parallel-size %d (not built)", t->grid->ep);
    if (!rc && z->comp.on) rc = tri_comm_split(t->grid->dp_comm, t->grid->dp_rank, 0, &t->self_comm);
    return rc;
}

/* The comm of the TP ranks sharing a shard (tri_param.replicas > 1), split from the TP group: every
 * TP rank of a stage holds the same parameters, so all of a group split, or none. */
static int split_replicas(tri_trainer *t)
{
    int r = 1;
    for (int c = 0; c < t->v; c++)
        for (int i = 0; i < t->chunks[c]->layout.n; i++) {
            int k = t->chunks[c]->layout.params[i].replicas;
            if (k > 1 && r > 1 && k != r)
                return TRI_ERR(TRI_EINTERNAL, "trainer: parameters shared by %d and by %d TP ranks", r, k);
            if (k > 1)
                r = k;
        }
    if (r == 1)
        return TRI_OK;
    return tri_comm_split(t->grid->tp_comm, t->grid->tp_rank / r, t->grid->tp_rank, &t->replica_comm);
}

/* Models with experts (the chunk's moe_shape hook): the step's MoE account, which every chunk's
 * sparse layers add to in their backward. */
static int start_moe_stats(tri_trainer *t)
{
    const tri_chunk_model *m = &t->chunks[0]->model;
    if (!m->moe_shape)
        return TRI_OK;
    int layers = 0, E = 0;
    m->moe_shape(m->self, &layers, &E);
    /* room for every sparse layer of the rank's chunks in every micro-batch of a step */
    int rc = tri_moe_stats_init(&t->moe, layers, E, t->dev, t->cfg.n_micro * layers);
    for (int c = 0; c < t->v && !rc && E > 0; c++)
        t->chunks[c]->moe_stats = &t->moe;
    /* the expert bias moves with the replicas' summed counts: local SGD's replicas count apart */
    if (!rc && m->after_update && t->cfg.local.steps > 0)
        rc = TRI_ERR(TRI_EINVAL, "--moe-router-enable-expert-bias with --local-sgd-steps %d: the expert bias is "
                     "updated from the token counts summed over the data-parallel replicas every step, which local "
                     "SGD's inner steps do not share (train without one of the two)", t->cfg.local.steps);
    return rc;
}

/* After an applied update: the models' own state that follows the step (the expert bias, from the
 * step's reduced MoE account: the same on every rank that shares it). */
static int after_update(tri_trainer *t)
{
    int rc = TRI_OK;
    for (int c = 0; c < t->v && !rc; c++)
        if (t->chunks[c]->model.after_update)
            rc = t->chunks[c]->model.after_update(t->chunks[c]->model.self, &t->moe);
    return rc;
}

int tri_trainer_create(tri_trainer *t, tri_chunk *const *chunks, int v, const tri_grid *grid,
                       tri_device *dev, const tri_step_config *cfg, const tri_adamw_config *adamw,
                       const tri_schedule *train_sched, const tri_schedule *eval_sched)
{
    memset(t, 0, sizeof *t);
    if (v < 1 || v > TRI_MAX_CHUNKS)
        return TRI_ERR(TRI_EINVAL, "trainer: %d model chunks per rank (1..%d)", v, TRI_MAX_CHUNKS);
    if (cfg->n_micro < 1 || train_sched->m != cfg->n_micro || train_sched->v != v ||
        eval_sched->v != v || train_sched->pp != grid->pp || eval_sched->pp != grid->pp)
        return TRI_ERR(TRI_EINVAL, "trainer: schedule %s (pp %d, v %d, m %d) does not fit pp %d, v %d, "
                       "%d micro-batches", train_sched->name, train_sched->pp, train_sched->v,
                       train_sched->m, grid->pp, v, cfg->n_micro);
    if (cfg->cuda_graph) {
        int rc = tri_step_graph_check(dev, grid, chunks, v);
        if (rc)
            return rc;
    }
    t->v = v;
    memcpy(t->chunks, chunks, (size_t)v * sizeof *chunks);
    t->grid = grid;
    t->dev = dev;
    t->cfg = *cfg;
    t->train_sched = train_sched;
    t->eval_sched = eval_sched;
    t->windows = malloc((size_t)(chunks[0]->samples_per_mb * chunks[0]->window) * sizeof *t->windows);
    if (!t->windows)
        return TRI_ERR(TRI_ENOMEM, "trainer: out of memory");
    tri_arena_plan(&t->arena);
    int rc = take_trainer_buffers(t, adamw);
    if (!rc) rc = tri_arena_commit(&t->arena, dev);
    if (!rc) rc = take_trainer_buffers(t, adamw);
    for (int c = 0; c < v && !rc; c++)
        rc = tri_optimizer_reset(dev, &t->opt[c]);
    if (!rc) rc = tri_pipeline_create(&t->train_pipe, train_sched, grid->pp_rank, grid->pp_comm, t->chunks);
    if (!rc) rc = tri_pipeline_create(&t->eval_pipe, eval_sched, grid->pp_rank, grid->pp_comm, t->chunks);
    if (!rc) rc = split_replicas(t);
    if (!rc && cfg->local.steps > 0) rc = start_local_sgd(t);
    if (!rc && adamw->onebit_adam) rc = start_onebit_adam(t);
    if (!rc) rc = start_moe_stats(t);
    tri_step_graph_init(&t->graph, dev);
    if (!rc && cfg->cuda_graph)
        t->train_pipe.graph = &t->graph;
    if (rc) /* a refusal after the buffers (local SGD's, the MoE account's): nothing stays allocated */
        tri_trainer_destroy(t);
    return rc;
}

void tri_trainer_destroy(tri_trainer *t)
{
    if (t->graph.dev)
        tri_step_graph_free(&t->graph);
    if (t->train_pipe.sched)
        tri_pipeline_destroy(&t->train_pipe);
    if (t->eval_pipe.sched)
        tri_pipeline_destroy(&t->eval_pipe);
    tri_arena_release(&t->arena);
    for (int c = 0; c < t->v; c++)
        tri_outer_free(&t->outer[c]);
    free(t->windows);
    t->windows = NULL;
    tri_moe_stats_free(&t->moe);
    tri_comm_destroy(t->replica_comm);
    t->replica_comm = NULL;
    for (int c = 0; c < t->v && t->self_comm; c++) /* ZeRO's comm is the chunk's again */
        if (t->chunks[c]->zero.dp == t->self_comm)
            t->chunks[c]->zero.dp = t->grid->dp_cp_comm;
    tri_comm_destroy(t->self_comm);
    t->self_comm = NULL;
}

/* Replicas whose gradients are averaged into one step: dp x cp (each rank's T / cp rows of its
 * sequences count as one replica's share: the loss's scale and sum below make the mean over all T
 * tokens of every sequence), or 1 for local SGD's inner steps (each replica's own; cp 1 there). */
static int step_replicas(const tri_trainer *t)
{
    return t->local_step ? 1 : grad_replicas(t->grid);
}

/* Local SGD: whether update iter + 1 is an inner step; ZeRO's data-parallel group is then this rank
 * alone, else (synchronous warm-up steps) the data-parallel group. */
static void begin_step(tri_trainer *t, int64_t iter)
{
    /* 1-bit Adam's compression stage: no dp reduction of the gradients (the optimizer exchanges the
     * momentum); ZeRO's group is the dp group again after the backward pass (backward) */
    t->onebit_step = t->opt[0].cfg.onebit_adam && tri_optimizer_onebit_stage(&t->opt[0], &t->chunks[0]->zero);
    for (int c = 0; c < t->v && t->opt[0].cfg.onebit_adam && t->self_comm; c++)
        t->chunks[c]->zero.dp = t->onebit_step ? t->self_comm : t->grid->dp_cp_comm;
    if (t->cfg.local.steps == 0)
        return;
    t->local_step = tri_local_sgd_inner(&t->cfg.local, iter + 1);
    for (int c = 0; c < t->v; c++)
        t->chunks[c]->zero.dp = t->local_step ? t->self_comm : t->grid->dp_cp_comm;
}

/* Sequences (of the whole T) a step: the cp ranks of a replica share theirs. */
int64_t tri_trainer_global_batch(const tri_trainer *t)
{
    return t->chunks[0]->samples_per_mb * t->cfg.n_micro * t->grid->dp;
}

/* The executor's data callback: micro-batch mb of this replica is samples
 * first_sample + mb * B ... (the replica's micro-batches are consecutive in the global batch). */
static int load(void *ctx, int chunk, int mb, int slot)
{
    tri_trainer *t = ctx;
    tri_chunk *st = t->chunks[chunk];
    int64_t B = st->samples_per_mb;
    int rc = t->src->fill(t->src->ctx, t->first_sample + (int64_t)mb * B, B, t->windows);
    return rc ? rc : st->model.load_batch(st->model.self, slot, t->windows);
}

/* The loss sum (fixed point, engine/train/pipeline.h) of the last stage's micro-batches, broadcast to
 * every stage and summed over the dp x cp replicas (replicas > 1; 1: this replica's alone; a cp rank's
 * sum is over its chunks' tokens, so the cp ranks' sums make the sequences' whole):
 * exact integer arithmetic, so the loss is the same bits in every layout. Returns the sum in loss
 * units. */
static int share_loss(tri_trainer *t, int64_t fixed, int replicas, double *sum)
{
    int rc = TRI_OK;
    if (t->grid->pp > 1) rc = tri_comm_host_broadcast(t->grid->pp_comm, &fixed, TRI_I64, 1, t->grid->pp - 1);
    if (!rc && replicas > 1) rc = tri_comm_host_all_reduce(t->grid->dp_cp_comm, &fixed, TRI_I64, 1, TRI_REDUCE_SUM);
    *sum = ldexp((double)fixed, -TRI_LOSS_BITS);
    return rc;
}

/* Sums the pieces of parameter p this rank owns over comm (their exact sums in deterministic mode). */
static int all_reduce_owned(tri_comm *comm, const tri_zero *z, const tri_param *p)
{
    int rc = TRI_OK;
    for (int k = 0; k < tri_zero_n_owned(z) && !rc; k++) {
        int64_t s, n, at;
        if (tri_zero_owned_piece(z, k, p, &s, &n, &at))
            rc = tri_comm_all_reduce(comm, tri_zero_owned_sums(z, s, n), TRI_REDUCE_SUM);
    }
    return rc;
}

/* Copies p's owned pieces from TP rank 0 to the other TP ranks (their exact sums in deterministic
 * mode). */
static int broadcast_owned(tri_comm *comm, const tri_zero *z, const tri_param *p)
{
    int rc = TRI_OK;
    for (int k = 0; k < tri_zero_n_owned(z) && !rc; k++) {
        int64_t s, n, at;
        if (tri_zero_owned_piece(z, k, p, &s, &n, &at))
            rc = tri_comm_broadcast(comm, tri_zero_owned_sums(z, s, n), 0);
    }
    return rc;
}

/* Whether this step's dp reduction of chunk st was compressed (grad_compression.h). Each TP rank
 * compresses its own unit, whose blocks mix a replicated parameter with the rank's own shards, so the
 * copies of a replicated parameter decode differently. */
static bool compressed(const tri_chunk *st)
{
    const tri_zero *z = &st->zero;
    return z->comp.on && z->dp->size > 1 && !tri_dp_compress_plain(&z->comp, z->iteration);
}

/* Gradient reductions that make a chunk's owned gradients complete: over data-parallel replicas
 * (ZeRO: all-reduce, or reduce-scatter into the owned slices), then, on the owned pieces, over TP
 * for the replicated parameters under SP and those whose TP ranks compute parts (without SP, after a compressed reduction, TP rank 0's
 * decoding of them to the other TP ranks), over the ranks sharing a shard for the parameters split
 * into fewer shards than tp, and over the embedding group for the tied embedding
 * (in deterministic mode on the exact integer sums, converted to fp32 after all of them). */
static int sync_grads(tri_trainer *t, tri_chunk *st)
{
    const tri_param_layout *L = &st->layout;
    int rc = tri_chunk_finish_grads(st);
    if (!rc) rc = tri_zero_reduce_grads(&st->zero);
    for (int i = 0; i < L->n && !rc; i++) {
        const tri_param *p = &L->params[i];
        /* under SP each TP rank saw only its sequence shard (and a tp_partial_grad parameter's only
         * its heads): sum the replicated parameters' parts */
        if ((t->cfg.sequence_parallel || p->spec.tp_partial_grad) && p->tp_replicated && t->grid->tp > 1 &&
            !p->spec.expert) /* an expert (ep > 1 or tp > 1): reduced over its edp group, which spans tp (zero.c) */
            rc = all_reduce_owned(t->grid->tp_comm, &st->zero, p);
        /* without SP every TP rank holds the whole gradient of a replicated parameter: after a
         * compressed dp reduction TP rank 0's decoding is the one all copies apply, so they stay equal */
        else if (p->tp_replicated && t->grid->tp > 1 && compressed(st))
            rc = broadcast_owned(t->grid->tp_comm, &st->zero, p);
        if (!rc && p->replicas > 1)
            rc = all_reduce_owned(t->replica_comm, &st->zero, p);
        if (!rc && p->spec.tied && t->grid->embd_comm)
            rc = all_reduce_owned(t->grid->embd_comm, &st->zero, p);
    }
    return rc ? rc : tri_zero_finish_grads(&st->zero);
}

/* After a wait for the device: the step's MoE figures (engine/train/moe_stats.h), staged by the
 * sparse layers' backwards, folded in and summed over the replicas that share the routers (the
 * step's own) and over the stages (disjoint layers): the same on every rank. */
static int finish_moe_stats(tri_trainer *t)
{
    if (t->moe.E == 0)
        return TRI_OK;
    int rc = tri_moe_stats_collect(&t->moe);
    if (!rc && step_replicas(t) > 1) rc = tri_moe_stats_reduce(&t->moe, t->grid->dp_cp_comm);
    /* sequence parallelism: each TP rank routed its own tokens, and its losses are its shares */
    if (!rc && t->cfg.sequence_parallel && t->grid->tp > 1) rc = tri_moe_stats_reduce(&t->moe, t->grid->tp_comm);
    if (!rc && t->grid->pp > 1) rc = tri_moe_stats_reduce(&t->moe, t->grid->pp_comm);
    return rc;
}

/* The gradients of global batch iter (tri_trainer_gradients) without waiting for the device: the
 * losses stay pending in the pipeline (finish_loss reads them). */
static int backward(tri_trainer *t, const tri_batch_source *src, int64_t iter)
{
    int rc = TRI_OK;
    t->local_bad = false;
    begin_step(t, iter);
    tri_moe_stats_reset(&t->moe, (int64_t)t->cfg.n_micro * step_replicas(t));
    if (t->train_pipe.graph)
        tri_step_graph_begin_step(t->train_pipe.graph);
    for (int c = 0; c < t->v && !rc; c++) {
        rc = tri_chunk_zero_grads(t->chunks[c]);
        /* a compressed dp reduction's rounding and start (before the backward, which starts the
         * overlapped ones); 1-bit Adam counts both in updates, as the freeze does (a skipped step
         * advances neither) */
        t->chunks[c]->zero.iteration = t->opt[c].cfg.onebit_adam ? t->opt[c].step : iter;
    }
    t->src = src;
    t->first_sample = iter * tri_trainer_global_batch(t) +
                      (int64_t)t->grid->dp_rank * t->cfg.n_micro * t->chunks[0]->samples_per_mb;
    float dloss = 1.0f / (float)(t->chunks[0]->tokens_per_mb * t->cfg.n_micro * step_replicas(t));
    tri_pipeline_io io = {.ctx = t, .load = load};
    if (!rc) rc = tri_pipeline_run(&t->train_pipe, &io, true, dloss, NULL);
    for (int c = 0; c < t->v && !rc; c++) {
        rc = sync_grads(t, t->chunks[c]);
        if (t->onebit_step)
            t->chunks[c]->zero.dp = t->grid->dp_cp_comm; /* the momentum exchange's group */
        if (rc == TRI_ENONFINITE && t->guard) {
            /* deterministic mode found non-finite contributions on this rank: the guard's agreement
             * decides for every rank, so this rank goes on through the same collectives */
            t->local_bad = true;
            tri_error_clear();
            rc = TRI_OK;
        }
    }
    if (!rc && t->after_grads)
        rc = t->after_grads(t->after_grads_ctx, t, iter);
    return rc;
}

/* *loss = the mean token loss of the last backward's global batch, on every rank: the pipeline's
 * pending losses (a wait for the device, none when the gradient norm's copy has waited already),
 * shared over the pipeline and the replicas. */
static int finish_loss(tri_trainer *t, double *loss)
{
    double loss_sum = 0.0;
    int64_t loss_fixed = 0;
    int rc = tri_pipeline_losses(&t->train_pipe, &loss_fixed);
    int replicas = step_replicas(t);
    if (!rc) rc = share_loss(t, loss_fixed, replicas, &loss_sum);
    *loss = loss_sum / (double)(t->chunks[0]->tokens_per_mb * t->cfg.n_micro * replicas);
    return rc;
}

int tri_trainer_gradients(tri_trainer *t, const tri_batch_source *src, int64_t iter, double *loss)
{
    int rc = backward(t, src, iter);
    if (!rc) rc = finish_loss(t, loss);
    if (!rc && t->moe.E > 0) rc = tri_device_sync(t->dev); /* the staged MoE figures (no norm's copy here) */
    return rc ? rc : finish_moe_stats(t);
}

/* Whether this rank adds p's owned pieces to the gradient norm. At stage 0 under expert parallelism
 * an expert parameter lives on one ep rank (and its edp replicas), so the norm sums over the world
 * with one holder of each: dp rank 0 for the other parameters, edp rank 0 for the experts. At stages
 * 1-3 every owned slice is one rank's (over dp, or over edp for an expert part): each rank counts its
 * own. */
bool tri_trainer_norm_holder(const tri_trainer *t, const tri_param *p)
{
    /* an expert is replicated over tp (count_in_norm: tp rank 0) but at ep > 1 with tp > 1 its ep rank
     * may be any tp rank: its one holder is its edp rank 0 */
    if (p->spec.expert && (t->grid->ep > 1 || t->grid->etp > 1) && t->chunks[0]->zero.stage == 0)
        return !p->spec.tied_copy && t->grid->edp_rank == 0;
    /* at stages 1-3 an expert part's slices are owned by its edp ranks, which at tp > 1 span the TP
     * ranks: each counts its own (count_in_norm would keep TP rank 0's only) */
    if (p->spec.expert && t->chunks[0]->zero.stage > 0)
        return !p->spec.tied_copy;
    if (!p->count_in_norm)
        return false;
    if ((t->grid->ep <= 1 && t->grid->etp <= 1) || t->chunks[0]->zero.stage > 0)
        return true;
    return p->spec.expert ? t->grid->edp_rank == 0 : grad_replica_rank(t->grid) == 0;
}

/* Deterministic mode: the squares of the gradients (rounded to 2^-TRI_FIXED_BITS) summed exactly as
 * a multi-limb integer, so the norm does not depend on how ZeRO cut the gradients or on the order. */
static int grad_norm_exact(tri_trainer *t, double *norm)
{
    tri_tensor limbs = tri_tensor_range(t->loss_fixed, 2, 6);
    int rc = tri_op_zero(t->dev, limbs);
    for (int c = 0; c < t->v && !rc; c++) {
        const tri_zero *z = &t->chunks[c]->zero;
        const tri_param_layout *L = &t->chunks[c]->layout;
        for (int i = 0; i < L->n && !rc; i++)
            for (int k = 0; k < tri_zero_n_owned(z) && !rc && tri_trainer_norm_holder(t, &L->params[i]); k++) {
                int64_t s, n, at;
                if (tri_zero_owned_piece(z, k, &L->params[i], &s, &n, &at))
                    rc = tri_op_fixed_sum_squares(t->dev, limbs, tri_zero_owned_grads(z, s, n), TRI_FIXED_BITS,
                                                  z->bad);
            }
    }
    tri_comm *over = tri_trainer_norm_comm(t);
    int64_t host[6] = {0};
    for (int c = 0; c < t->v && !rc; c++) { /* squares of non-finite gradients are counted in bad */
        float bad = 0.0f;
        rc = tri_device_copy_to_host(t->dev, &bad, t->chunks[c]->zero.bad);
        if (bad > 0)
            t->local_bad = true;
    }
    if (!rc) rc = tri_comm_all_reduce(over, limbs, TRI_REDUCE_SUM);
    if (!rc) rc = tri_device_copy_to_host(t->dev, host, limbs);
    *norm = sqrt(tri_fixed_limbs_value(host, 2 * TRI_FIXED_BITS));
    return rc;
}

/* The slot of parameter p's sum of squares in norm_slots (see below). */
static int64_t norm_slot(const tri_trainer *t, const tri_param *p, int dp, int stage)
{
    return ((int64_t)p->spec.global_index * t->grid->tp + t->grid->tp_rank) * dp +
           (stage > 0 ? grad_replica_rank(t->grid) : 0);
}

tri_comm *tri_trainer_norm_comm(const tri_trainer *t)
{
    /* expert tensor parallelism: the etp ranks of one replica may be other dp ranks (tp 1), each with
     * its own slices: the norm sums over the world with one holder of each (norm_holder) */
    return t->chunks[0]->zero.stage > 0 || t->grid->ep > 1 || t->grid->etp > 1 ? t->grid->world : t->grid->mp_comm;
}

int64_t tri_trainer_norm_slot(const tri_trainer *t, const tri_param *p)
{
    int stage = t->chunks[0]->zero.stage;
    return norm_slot(t, p, stage > 0 ? grad_replicas(t->grid) : 1, stage);
}

/* The sum of squares of each counted parameter (over the pieces this rank owns) lands in its own
 * slot (global index, TP rank, and DP rank when ZeRO shards); after the all-reduce over the ranks
 * holding pieces every slot holds exactly one rank's value (the others added zeros, which is exact),
 * and the slots are summed in index order in double. */

int tri_trainer_grad_norm(tri_trainer *t, double *norm)
{
    if (t->chunks[0]->zero.deterministic)
        return grad_norm_exact(t, norm);
    int64_t nslots = tri_tensor_numel(t->norm_slots);
    int stage = t->chunks[0]->zero.stage, dp = stage > 0 ? grad_replicas(t->grid) : 1;
    float *slots = calloc((size_t)nslots, sizeof *slots);
    if (!slots)
        return TRI_ERR(TRI_ENOMEM, "trainer: out of memory for the gradient norm");
    /* each parameter's pieces add their sums of squares into its slot on the device, all in one
     * call (a few launches on a GPU): no host sync until the one copy after the all-reduce */
    int n_pieces = 0, cap = 0;
    for (int c = 0; c < t->v; c++)
        cap += t->chunks[c]->layout.n * tri_zero_n_owned(&t->chunks[c]->zero);
    tri_tensor *xs = malloc((size_t)(cap > 0 ? cap : 1) * sizeof *xs);
    int64_t *piece_slots = malloc((size_t)(cap > 0 ? cap : 1) * sizeof *piece_slots);
    int rc = xs && piece_slots ? TRI_OK : TRI_ERR(TRI_ENOMEM, "trainer: out of memory for the gradient norm");
    for (int c = 0; c < t->v && !rc; c++) {
        const tri_chunk *st = t->chunks[c];
        for (int i = 0; i < st->layout.n; i++) {
            const tri_param *p = &st->layout.params[i];
            for (int k = 0; k < tri_zero_n_owned(&st->zero) && tri_trainer_norm_holder(t, p); k++) {
                int64_t s, n, at;
                if (!tri_zero_owned_piece(&st->zero, k, p, &s, &n, &at))
                    continue;
                xs[n_pieces] = tri_zero_owned_grads(&st->zero, s, n);
                piece_slots[n_pieces++] = norm_slot(t, p, dp, stage); /* a parameter's pieces are consecutive */
            }
        }
    }
    if (!rc) rc = tri_op_fill(t->dev, t->norm_slots, 0.0f);
    if (!rc) rc = tri_op_sum_squares_multi(t->dev, t->norm_slots, xs, piece_slots, n_pieces);
    free(xs);
    free(piece_slots);
    tri_comm *over = tri_trainer_norm_comm(t);
    if (!rc) rc = tri_comm_all_reduce(over, t->norm_slots, TRI_REDUCE_SUM);
    if (!rc) rc = tri_device_copy_to_host(t->dev, slots, t->norm_slots);
    /* this rank's own slots (the others added zeros, which keeps NaN and Inf) decide local_bad */
    for (int c = 0; c < t->v && !rc; c++) {
        const tri_chunk *st = t->chunks[c];
        for (int i = 0; i < st->layout.n; i++)
            if (st->layout.params[i].count_in_norm && !isfinite(slots[norm_slot(t, &st->layout.params[i], dp, stage)]))
                t->local_bad = true;
    }
    double sum = 0.0;
    for (int64_t i = 0; i < nslots; i++)
        sum += slots[i];
    free(slots);
    *norm = sqrt(sum);
    return rc;
}

/* 1-bit Adam's compression stage on chunk c: the momentum exchanged (tri_onebit_adam_exchange, the
 * worker's gradient clipped by scale), then every copy of a parameter given the first copy's m, so
 * the copies stay equal (each compressed its own unit): TP rank 0's for TP-replicated parameters,
 * the shard's first TP rank's for shared shards, the first stage's for the tied embedding. */
static int onebit_exchange(tri_trainer *t, int c, float scale)
{
    tri_chunk *st = t->chunks[c];
    const tri_param_layout *L = &st->layout;
    int rc = tri_onebit_adam_exchange(t->dev, &t->opt[c], &st->zero, scale);
    for (int i = 0; i < L->n && !rc; i++) {
        const tri_param *p = &L->params[i];
        if (p->tp_replicated && t->grid->tp > 1)
            rc = broadcast_owned(t->grid->tp_comm, &st->zero, p);
        if (!rc && p->replicas > 1)
            rc = broadcast_owned(t->replica_comm, &st->zero, p);
        if (!rc && p->spec.tied && t->grid->embd_comm)
            rc = broadcast_owned(t->grid->embd_comm, &st->zero, p);
    }
    return rc;
}

/* The optimizer's update of every chunk, then the parameters gathered again. LAMB first turns the
 * owned gradients into its directions; LARS and LAMB then need every tensor's trust ratio, over all
 * chunks and ranks at once (engine/train/trust_ratio.h), before any chunk updates. */
static int apply_update(tri_trainer *t, float lr, float scale)
{
    tri_optimizer_kind kind = t->opt[0].cfg.kind;
    int rc = TRI_OK;
    for (int c = 0; c < t->v && !rc && kind == TRI_OPT_LAMB; c++)
        rc = tri_optimizer_lamb_direction(t->dev, &t->opt[c], &t->chunks[c]->zero, scale);
    if (!rc && tri_optimizer_has_trust_ratio(kind))
        rc = tri_trainer_trust_ratios(t, scale);
    for (int c = 0; c < t->v && !rc; c++) {
        /* 1-bit Adam: the buffer then holds the averaged momentum, the clipping applied before */
        if (t->onebit_step)
            rc = onebit_exchange(t, c, scale);
        if (!rc) rc = tri_optimizer_step(t->dev, &t->opt[c], &t->chunks[c]->zero, lr, t->onebit_step ? 1.0f : scale,
                                         t->trust_ratios);
        if (!rc) rc = tri_zero_gather_params(&t->chunks[c]->zero);
    }
    return rc;
}

int tri_trainer_step(tri_trainer *t, const tri_batch_source *src, int64_t iter, float lr,
                     tri_step_result *res)
{
    double norm = 0.0;
    /* one wait for the device a step: the gradient norm's copy; the losses are read after it */
    int rc = backward(t, src, iter);
    if (!rc) rc = tri_trainer_grad_norm(t, &norm);
    if (!rc) rc = finish_loss(t, &res->loss);
    if (!rc) rc = finish_moe_stats(t); /* after the norm's wait */
    if (rc)
        return rc;
    /* 1-bit Adam's compression stage: the gradients are this replica's own (divided by dp), and it
     * clips its own, as DeepSpeed's OnebitAdam does: the norm of the replica's gradient */
    if (t->onebit_step)
        norm *= (double)grad_replicas(t->grid);
    res->grad_norm = norm;
    res->lr = lr;
    res->action = TRI_STEP_APPLY;
    res->stop = false;
    res->outer_sync = false;
    res->outer_syncs = t->outer_syncs;
    if (t->local_step && !isfinite(res->loss))
        t->local_bad = true; /* the loss is this replica's own: its verdict must reach the agreement */
    if (t->guard) {
        tri_step_verdict v;
        rc = tri_step_guard_agree(t->guard, t->grid->world, t->local_bad, &v);
        if (!rc && !isfinite(norm) && v.n_bad == 0) { /* finite parts whose squares overflowed */
            v.n_bad = t->grid->world_size;
            snprintf(v.bad_ranks, sizeof v.bad_ranks, "all (the global gradient norm is %g)", norm);
        }
        if (!rc) rc = tri_step_guard_decide(t->guard, iter + 1, res->loss, &v, &res->action);
        if (rc)
            return rc;
        res->stop = v.stop;
    } else if (!isfinite(norm)) {
        return TRI_ERR(TRI_ENONFINITE, "iteration %lld: the gradient norm is %g; no update applied",
                       (long long)iter + 1, norm);
    }
    /* a skipped step makes no update; the parameters are gathered again, unchanged, so ZeRO's
     * in-flight state is the same as after an update */
    float scale = t->cfg.clip_grad > 0 && norm > t->cfg.clip_grad ? (float)(t->cfg.clip_grad / norm) : 1.0f;
    if (res->action == TRI_STEP_APPLY)
        rc = apply_update(t, lr, scale);
    if (!rc && res->action == TRI_STEP_APPLY)
        rc = after_update(t);
    for (int c = 0; c < t->v && !rc && res->action != TRI_STEP_APPLY; c++)
        rc = tri_zero_gather_params(&t->chunks[c]->zero);
    /* local SGD: the outer synchronisation ends its window, skipped step or not (the iterations
     * count the window) */
    t->replicas_apart = t->local_step;
    /* the end of the synchronous warm-up: the replicas are one model, the anchor starts here */
    if (!rc && t->cfg.local.steps > 0 && t->cfg.local.warmup_iters == iter + 1)
        rc = tri_trainer_outer_reset(t);
    if (!rc && tri_local_sgd_syncs_at(&t->cfg.local, iter + 1)) {
        rc = tri_trainer_outer_sync(t);
        res->outer_sync = rc == TRI_OK;
        res->outer_syncs = t->outer_syncs;
    }
    return rc;
}

int tri_trainer_eval(tri_trainer *t, const tri_batch_source *src, int n_batches, double *loss)
{
    int64_t m = t->eval_sched->m, B = t->chunks[0]->samples_per_mb;
    tri_pipeline_io io = {.ctx = t, .load = load};
    double total = 0.0;
    int64_t fixed = 0;
    int rc = TRI_OK;
    t->src = src;
    for (int k = 0; k < n_batches && !rc; k++) {
        int64_t s = 0;
        t->first_sample = ((int64_t)k * t->grid->dp + t->grid->dp_rank) * m * B;
        rc = tri_pipeline_run(&t->eval_pipe, &io, false, 0.0f, &s);
        fixed += s;
    }
    if (!rc) rc = share_loss(t, fixed, grad_replicas(t->grid), &total);
    *loss = total / (double)(t->chunks[0]->tokens_per_mb * m * (int64_t)n_batches * grad_replicas(t->grid));
    return rc;
}
