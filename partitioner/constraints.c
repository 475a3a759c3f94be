/* partitioner/constraints.c - layout rules and nearest valid values (see constraints.h). */
#include "partitioner/constraints.h"

#include <stdio.h>
#include <string.h>

#include "engine/core/status.h"
#include "partitioner/stages.h"

/* Search limit for nearest values: far enough for any realistic size, bounded work. */
#define NEAREST_SPAN 1000000

void tri_nearest_valid(int64_t x, int64_t lo, int64_t hi, bool (*ok)(int64_t v, const void *ctx),
                       const void *ctx, char *buf, int cap)
{
    int64_t below = -1, above = -1;
    for (int64_t v = x - 1; v >= lo && v >= x - NEAREST_SPAN; v--)
        if (ok(v, ctx)) {
            below = v;
            break;
        }
    for (int64_t v = x + 1; v <= hi && v <= x + NEAREST_SPAN; v++)
        if (ok(v, ctx)) {
            above = v;
            break;
        }
    if (below >= 0 && above >= 0)
        snprintf(buf, (size_t)cap, "%lld, %lld", (long long)below, (long long)above);
    else if (below >= 0 || above >= 0)
        snprintf(buf, (size_t)cap, "%lld", (long long)(below >= 0 ? below : above));
    else
        snprintf(buf, (size_t)cap, "none");
}

typedef struct ctx {
    const tri_transformer *m;
    const tri_layout_request *r;
    int64_t a, b;  /* rule-specific numbers */
} ctx;

/* Key/value heads (grouped-query attention) split over tp, or shared by tp / n_kv ranks. */
static bool kv_heads_fit(const tri_transformer *m, int64_t tp)
{
    int64_t kv = m->n_kv_head > 0 ? m->n_kv_head : m->n_head;
    return kv % tp == 0 || tp % kv == 0;
}

bool tri_layout_tp_fits_heads(const tri_transformer *m, int64_t tp)
{
    return m->n_head % tp == 0 && kv_heads_fit(m, tp);
}

static bool divides_heads(int64_t tp, const void *p)
{
    const ctx *c = p;
    return tri_layout_tp_fits_heads(c->m, tp) && c->r->num_gpus % tp == 0;
}

static bool pp_ok(int64_t pp, const void *p)
{
    const ctx *c = p;
    return c->r->num_gpus % (c->r->tp * pp) == 0 && pp <= c->m->n_layer;
}

static bool multiple_of_a(int64_t v, const void *p)
{
    return v % ((const ctx *)p)->a == 0;
}

static bool divides_a(int64_t v, const void *p)
{
    return ((const ctx *)p)->a % v == 0;
}

/* Layers per virtual stage k: n_layer divisible by pp k, at least 2 chunks per rank. */
static bool per_chunk_ok(int64_t k, const void *p)
{
    const ctx *c = p;
    int64_t pp = c->r->pp, L = c->m->n_layer;
    return L % (pp * k) == 0 && L / (pp * k) >= 2;
}

static int check_tp_pp(const tri_transformer *m, const tri_layout_request *r, ctx *cx, char *near, int cap)
{
    if (r->num_gpus < 1)
        return TRI_ERR(TRI_EINVAL, "--num-gpus %d: must be >= 1", r->num_gpus);
    if (r->tp < 1 || r->pp < 1)
        return TRI_ERR(TRI_EINVAL, "--tensor-model-parallel-size %d and --pipeline-model-parallel-size %d "
                       "must be >= 1", r->tp, r->pp);
    if (m->n_head % r->tp != 0) {
        tri_nearest_valid(r->tp, 1, m->n_head, divides_heads, cx, near, cap);
        return TRI_ERR(TRI_EINVAL, "--tensor-model-parallel-size %d does not divide n_head %lld (attention "
                       "heads are split evenly over the tensor-parallel ranks); nearest valid: %s", r->tp,
                       (long long)m->n_head, near);
    }
    if (!kv_heads_fit(m, r->tp)) {
        tri_nearest_valid(r->tp, 1, m->n_head, divides_heads, cx, near, cap);
        return TRI_ERR(TRI_EINVAL, "--tensor-model-parallel-size %d and %lld key/value heads: one must divide the "
                       "other (key/value heads are split over the tensor-parallel ranks, or shared by tp / "
                       "n_kv ranks); nearest valid: %s", r->tp, (long long)m->n_kv_head, near);
    }
    if (r->num_gpus % r->tp != 0) {
        tri_nearest_valid(r->tp, 1, r->num_gpus, divides_heads, cx, near, cap);
        return TRI_ERR(TRI_EINVAL, "--tensor-model-parallel-size %d does not divide the %d ranks (--num-gpus, or "
                       "mpirun -np); nearest valid: %s", r->tp, r->num_gpus, near);
    }
    if (r->pp > m->n_layer) {
        tri_nearest_valid(r->pp, 1, m->n_layer, pp_ok, cx, near, cap);
        return TRI_ERR(TRI_EINVAL, "--pipeline-model-parallel-size %d exceeds n_layer %lld (every stage needs "
                       "at least one layer); nearest valid: %s", r->pp, (long long)m->n_layer, near);
    }
    if (r->num_gpus % (r->tp * r->pp) != 0) {
        tri_nearest_valid(r->pp, 1, m->n_layer, pp_ok, cx, near, cap);
        return TRI_ERR(TRI_EINVAL, "--tensor-model-parallel-size %d x --pipeline-model-parallel-size %d = %d "
                       "does not divide the %d ranks (--num-gpus, or mpirun -np; data-parallel size = ranks / "
                       "(tp x pp)); nearest valid pipeline sizes: %s", r->tp, r->pp, r->tp * r->pp, r->num_gpus,
                       near);
    }
    return TRI_OK;
}

static bool cp_ok(int64_t cp, const void *p)
{
    const ctx *c = p;
    return c->r->num_gpus % (c->r->tp * c->r->pp * cp) == 0;
}

/* --context-parallel-size against the ranks (before the batch, which needs dp). */
static int check_cp_ranks(const tri_layout_request *r, int cp, ctx *cx, char *near, int cap)
{
    if (cp < 1)
        return TRI_ERR(TRI_EINVAL, "--context-parallel-size %d: must be >= 1; nearest valid: 1", cp);
    int64_t mp = (int64_t)r->tp * cp * r->pp;
    if (r->num_gpus % mp != 0) {
        tri_nearest_valid(cp, 1, r->num_gpus, cp_ok, cx, near, cap);
        return TRI_ERR(TRI_EINVAL, "--tensor-model-parallel-size %d x --context-parallel-size %d x "
                       "--pipeline-model-parallel-size %d = %lld does not divide the %d ranks (--num-gpus, or "
                       "mpirun -np; data-parallel size = ranks / (tp x cp x pp)); nearest valid context-parallel "
                       "sizes: %s", r->tp, cp, r->pp, (long long)mp, r->num_gpus, near);
    }
    return TRI_OK;
}

#define CP_TILE 64 /* the fused attention's tile rows, TRI_FLASH_BR = TRI_FLASH_BC (attention_math.h) */

/* The sequence split of context parallelism (Megatron-Core's 2 cp chunks, rank i holding chunks i and
 * 2cp-1-i) and what it needs of the attention and of sequence parallelism. */
static int check_cp_sequence(const tri_transformer *m, const tri_layout_request *r, int cp, ctx *cx, char *near,
                             int cap)
{
    const char *type = r->cp_comm_type ? r->cp_comm_type : "p2p";
    if (strcmp(type, "p2p") != 0 && strcmp(type, "all_gather") != 0)
        return TRI_ERR(TRI_EINVAL, "--cp-comm-type %s: expected p2p (the key/value ring) or all_gather (key/value "
                       "gathered once per layer), Megatron-Core's names; nearest valid: p2p, all_gather", type);
    if (cp == 1)
        return TRI_OK;
    if (r->attention == TRI_ATTENTION_UNFUSED)
        return TRI_ERR(TRI_EINVAL, "--context-parallel-size %d needs the fused attention: --attention-backend "
                       "unfused has no block merge (context parallelism merges key/value blocks by their "
                       "log-sum-exp); nearest valid: --attention-backend flash, or --context-parallel-size 1", cp);
    int64_t T = r->seq_length;
    if (T % (2 * cp) != 0) {
        cx->a = 2 * cp * CP_TILE;
        tri_nearest_valid(T, 1, m->n_positions, multiple_of_a, cx, near, cap);
        return TRI_ERR(TRI_EINVAL, "--seq-length %lld does not split into 2 x --context-parallel-size %d = %d "
                       "chunks (cp rank i holds chunks i and 2cp-1-i); nearest valid (chunks of a multiple of "
                       "%d rows): %s", (long long)T, cp, 2 * cp, CP_TILE, near);
    }
    if (T / (2 * cp) % CP_TILE != 0) {
        cx->a = 2 * cp * CP_TILE;
        tri_nearest_valid(T, 1, m->n_positions, multiple_of_a, cx, near, cap);
        return TRI_ERR(TRI_EINVAL, "--seq-length %lld with --context-parallel-size %d: each of the 2 x cp chunks "
                       "has %lld rows, expected a multiple of the fused attention's %d-row tile (chunk boundaries "
                       "on tile boundaries), i.e. seq-length a multiple of 2 x cp x %d = %d; nearest valid: %s",
                       (long long)T, cp, (long long)(T / (2 * cp)), CP_TILE, CP_TILE, 2 * cp * CP_TILE, near);
    }
    if (r->sequence_parallel && r->tp > 1 && T / cp % r->tp != 0) {
        cx->a = (int64_t)2 * cp * CP_TILE * r->tp;
        tri_nearest_valid(T, 1, m->n_positions, multiple_of_a, cx, near, cap);
        return TRI_ERR(TRI_EINVAL, "--sequence-parallel with --context-parallel-size %d needs a rank's %lld local "
                       "rows (--seq-length %lld / cp) divisible by --tensor-model-parallel-size %d (sequence "
                       "parallelism splits them over tp); nearest valid seq-length: %s", cp,
                       (long long)(T / cp), (long long)T, r->tp, near);
    }
    return TRI_OK;
}

static bool ep_ok(int64_t ep, const void *p)
{
    const ctx *c = p;  /* a = the stage's tp x dp ranks, b = etp */
    return c->m->n_experts % ep == 0 && c->a % (c->b * ep) == 0;
}

static bool etp_ok(int64_t etp, const void *p)
{
    const ctx *c = p;  /* a = tp x dp, b = ep */
    return c->a % (c->b * etp) == 0;
}

/* Expert parallelism, Megatron-Core's parallel folding: within a stage the tp x dp ranks regroup as
 * etp x ep x edp for the experts (edp = tp dp / (etp ep), a positive integer); each ep rank holds
 * E / ep experts; K <= E; tp > 1 needs sequence parallelism. A dense model (n_experts 0) takes
 * ep = etp = 1 only. */
static int check_experts(const tri_transformer *m, int tp, int cp, int dp, int ep, int etp, bool sequence_parallel,
                         ctx *cx, char *near, int cap)
{
    if (ep < 1 || etp < 1)
        return TRI_ERR(TRI_EINVAL, "--expert-model-parallel-size %d and --expert-tensor-parallel-size %d must be "
                       ">= 1", ep, etp);
    if (m->n_experts <= 0) {
        if (ep > 1)
            return TRI_ERR(TRI_EINVAL, "--expert-model-parallel-size %d needs a mixture-of-experts model (this "
                           "model is dense: num_experts 0); nearest valid: 1", ep);
        if (etp > 1)
            return TRI_ERR(TRI_EINVAL, "--expert-tensor-parallel-size %d needs a mixture-of-experts model (this "
                           "model is dense: num_experts 0); nearest valid: 1", etp);
        return TRI_OK;
    }
    if (m->experts_per_tok < 1 || m->experts_per_tok > m->n_experts)
        return TRI_ERR(TRI_EINVAL, "num_experts_per_tok %lld: expected 1..num_experts %lld (each token's top-k "
                       "experts are distinct)", (long long)m->experts_per_tok, (long long)m->n_experts);
    /* Megatron-LM's arguments.py: "When using MoE and tensor parallelism, sequence parallelism must be
     * used" - the router and the experts (etp 1) see each TP rank's own N / tp tokens */
    if (tp > 1 && !sequence_parallel)
        return TRI_ERR(TRI_EINVAL, "--tensor-model-parallel-size %d with a mixture-of-experts model (num_experts "
                       "%lld) needs --sequence-parallel (each tensor-parallel rank routes its own sequence shard "
                       "through the router and the experts; Megatron-Core's rule)", tp, (long long)m->n_experts);
    int64_t ranks = (int64_t)tp * cp * dp;
    char stage[96]; /* the stage's ranks in words: under context parallelism cp folds in with dp */
    if (cp > 1)
        snprintf(stage, sizeof stage, "tp x cp x dp = %d x %d x %d = %lld", tp, cp, dp, (long long)ranks);
    else
        snprintf(stage, sizeof stage, "tp x dp = %d x %d = %lld", tp, dp, (long long)ranks);
    cx->a = ranks;
    cx->b = etp;
    if (m->n_experts % ep != 0) {
        tri_nearest_valid(ep, 1, m->n_experts, ep_ok, cx, near, cap);
        return TRI_ERR(TRI_EINVAL, "--expert-model-parallel-size %d does not divide num_experts %lld (each "
                       "expert-parallel rank holds num_experts / ep experts); nearest valid: %s", ep,
                       (long long)m->n_experts, near);
    }
    if (ranks % ((int64_t)etp * ep) != 0) {
        if (ranks % etp == 0) {
            tri_nearest_valid(ep, 1, m->n_experts, ep_ok, cx, near, cap);
            return TRI_ERR(TRI_EINVAL, "--expert-tensor-parallel-size %d x --expert-model-parallel-size %d = %d "
                           "does not divide a pipeline stage's %s ranks (parallel folding: "
                           "they regroup as etp x ep x expert-data-parallel); nearest valid expert-model-parallel "
                           "sizes: %s", etp, ep, etp * ep, stage, near);
        }
        cx->b = ep;
        tri_nearest_valid(etp, 1, ranks, etp_ok, cx, near, cap);
        return TRI_ERR(TRI_EINVAL, "--expert-tensor-parallel-size %d x --expert-model-parallel-size %d = %d does "
                       "not divide a pipeline stage's %s ranks (parallel folding: they "
                       "regroup as etp x ep x expert-data-parallel); nearest valid expert-tensor-parallel sizes: "
                       "%s", etp, ep, etp * ep, stage, near);
    }
    return TRI_OK;
}

static bool multiple_of_tp(int64_t T, const void *p)
{
    return T % ((const ctx *)p)->r->tp == 0;
}

/* The batch shape; *global is the global batch (0 asked: one micro-batch per replica). */
static int check_batch(const tri_transformer *m, const tri_layout_request *r, int dp, ctx *cx, char *near,
                       int cap, int64_t *global)
{
    if (r->seq_length < 1 || r->seq_length > m->n_positions)
        return TRI_ERR(TRI_EINVAL, "--seq-length %lld: must be in [1, n_positions %lld]; nearest valid: %lld",
                       (long long)r->seq_length, (long long)m->n_positions,
                       (long long)(r->seq_length < 1 ? 1 : m->n_positions));
    if (r->micro_batch < 1)
        return TRI_ERR(TRI_EINVAL, "--micro-batch-size %lld: must be >= 1", (long long)r->micro_batch);
    if (r->micro_batch * r->seq_length > (1LL << 31))
        return TRI_ERR(TRI_EINVAL, "--micro-batch-size %lld x --seq-length %lld = %lld tokens per micro-batch, "
                       "expected at most 2^31", (long long)r->micro_batch, (long long)r->seq_length,
                       (long long)(r->micro_batch * r->seq_length));
    int64_t per = r->micro_batch * dp;
    *global = r->global_batch == 0 ? per : r->global_batch;
    if (r->global_batch < 0 || r->global_batch % per != 0) {
        cx->a = per;
        tri_nearest_valid(r->global_batch, per, INT64_MAX / 2, multiple_of_a, cx, near, cap);
        char mb[160] = "";
        if (r->global_batch >= dp && r->global_batch % dp == 0) {
            cx->a = r->global_batch / dp;
            tri_nearest_valid(r->micro_batch, 1, cx->a, divides_a, cx, mb, sizeof mb);
        }
        return TRI_ERR(TRI_EINVAL, "--global-batch-size %lld is not a multiple of --micro-batch-size %lld x "
                       "data-parallel size %d = %lld; nearest valid global batch sizes: %s%s%s",
                       (long long)r->global_batch, (long long)r->micro_batch, dp, (long long)per, near,
                       mb[0] ? "; or micro-batch sizes: " : "", mb);
    }
    if (*global / per > (1 << 20))
        return TRI_ERR(TRI_EINVAL, "--global-batch-size %lld / (--micro-batch-size %lld x data-parallel size %d) = "
                       "%lld micro-batches, expected at most %d", (long long)*global, (long long)r->micro_batch,
                       dp, (long long)(*global / per), 1 << 20);
    return TRI_OK;
}

static int check_sequence_parallel(const tri_transformer *m, const tri_layout_request *r, ctx *cx, char *near,
                                   int cap)
{
    if (!r->sequence_parallel)
        return TRI_OK;
    if (r->tp == 1)
        return TRI_ERR(TRI_EINVAL, "--sequence-parallel needs --tensor-model-parallel-size > 1 (got 1)");
    if (r->seq_length % r->tp != 0) {
        tri_nearest_valid(r->seq_length, 1, m->n_positions, multiple_of_tp, cx, near, cap);
        return TRI_ERR(TRI_EINVAL, "--sequence-parallel needs --seq-length %lld divisible by "
                       "--tensor-model-parallel-size %d (each rank keeps a shard of the sequence); nearest valid: %s",
                       (long long)r->seq_length, r->tp, near);
    }
    return TRI_OK;
}

static int check_schedule(const tri_transformer *m, const tri_layout_request *r, const char *sched, int n_micro,
                          int dp, ctx *cx, char *near, int cap, int *v)
{
    *v = 1;
    bool inter = strcmp(sched, "interleaved") == 0;
    if (!inter && strcmp(sched, "1f1b") != 0 && strcmp(sched, "gpipe") != 0 && strcmp(sched, "zb-h1") != 0)
        return TRI_ERR(TRI_EINVAL, "--pipeline-schedule %s: expected 1f1b, gpipe, interleaved or zb-h1", sched);
    if (!inter && r->layers_per_virtual_stage > 0)
        return TRI_ERR(TRI_EINVAL, "--num-layers-per-virtual-pipeline-stage %d needs --pipeline-schedule "
                       "interleaved (got %s)", r->layers_per_virtual_stage, sched);
    if (!inter)
        return TRI_OK;
    if (r->pp < 2)
        return TRI_ERR(TRI_EINVAL, "the interleaved schedule needs --pipeline-model-parallel-size > 1 (got %d)",
                       r->pp);
    int k = r->layers_per_virtual_stage;
    if (k < 1 || !per_chunk_ok(k, cx)) {
        tri_nearest_valid(k, 1, m->n_layer, per_chunk_ok, cx, near, cap);
        return TRI_ERR(TRI_EINVAL, "--num-layers-per-virtual-pipeline-stage %d: n_layer %lld must divide by "
                       "--pipeline-model-parallel-size %d x it with at least 2 model chunks per rank; nearest "
                       "valid: %s", k, (long long)m->n_layer, r->pp, near);
    }
    *v = (int)(m->n_layer / ((int64_t)r->pp * k));
    if (n_micro % r->pp != 0) {
        cx->a = r->micro_batch * dp * r->pp;
        tri_nearest_valid(r->global_batch, cx->a, INT64_MAX / 2, multiple_of_a, cx, near, cap);
        return TRI_ERR(TRI_EINVAL, "the interleaved schedule needs the micro-batches per replica (%d = "
                       "--global-batch-size %lld / (--micro-batch-size %lld x dp %d)) to be a multiple of "
                       "--pipeline-model-parallel-size %d; nearest valid global batch sizes: %s", n_micro,
                       (long long)r->global_batch, (long long)r->micro_batch, dp, r->pp, near);
    }
    return TRI_OK;
}

int tri_layout_check_model(const tri_transformer *m, const tri_train_layout *l)
{
    int pp = l->pp > 0 ? l->pp : 1, dp = l->dp > 0 ? l->dp : 1, cp = tri_layout_cp(l); /* sizes these rules do not concern */
    tri_layout_request r = {.num_gpus = l->tp * cp * pp * dp, .tp = l->tp, .pp = pp, .cp = cp, .micro_batch = l->B,
                            .global_batch = 0, .seq_length = l->T, .sequence_parallel = l->sequence_parallel,
                            .attention = l->attention, .cp_comm_type = tri_cp_comm_type_name(l->cp_comm_type)};
    char near[160];
    int64_t global = 0;
    ctx cx = {.m = m, .r = &r};
    int rc = check_tp_pp(m, &r, &cx, near, sizeof near);
    if (!rc) rc = check_cp_ranks(&r, cp, &cx, near, sizeof near);
    if (!rc) rc = check_batch(m, &r, dp, &cx, near, sizeof near, &global);
    if (!rc) rc = check_sequence_parallel(m, &r, &cx, near, sizeof near);
    if (!rc) rc = check_cp_sequence(m, &r, cp, &cx, near, sizeof near);
    if (!rc) rc = check_experts(m, l->tp, cp, dp, l->ep > 0 ? l->ep : 1, l->etp > 0 ? l->etp : 1, l->sequence_parallel,
                                &cx, near, sizeof near);
    return rc;
}

int tri_layout_resolve(const tri_transformer *m, const tri_layout_request *r, tri_train_layout *out)
{
    memset(out, 0, sizeof *out);
    char near[160];
    ctx cx = {.m = m, .r = r};
    int cp = r->cp == 0 ? 1 : r->cp;
    int rc = check_tp_pp(m, r, &cx, near, sizeof near);
    if (!rc) rc = check_cp_ranks(r, cp, &cx, near, sizeof near);
    if (rc)
        return rc;
    int dp = r->num_gpus / (r->tp * cp * r->pp);
    int64_t global = 0;
    rc = check_batch(m, r, dp, &cx, near, sizeof near, &global);
    if (!rc) rc = check_sequence_parallel(m, r, &cx, near, sizeof near);
    if (!rc) rc = check_cp_sequence(m, r, cp, &cx, near, sizeof near);
    int ep = r->ep > 0 ? r->ep : 1, etp = r->etp > 0 ? r->etp : 1;
    if (!rc) rc = check_experts(m, r->tp, cp, dp, ep, etp, r->sequence_parallel, &cx, near, sizeof near);
    if (rc)
        return rc;
    if (r->zero_stage < 0 || r->zero_stage > 3)
        return TRI_ERR(TRI_EINVAL, "--zero-stage %d: expected 0, 1, 2 or 3", r->zero_stage);
    int n_micro = (int)(global / (r->micro_batch * dp));
    const char *sched = r->schedule ? r->schedule : r->layers_per_virtual_stage > 0 ? "interleaved" : "1f1b";
    static const char *const names[] = {"1f1b", "gpipe", "interleaved", "zb-h1"};
    for (size_t i = 0; i < sizeof names / sizeof names[0]; i++)
        if (strcmp(sched, names[i]) == 0)
            sched = names[i]; /* the layout keeps a string literal, not the caller's text */
    int v = 1;
    tri_layout_request with_global = *r;
    with_global.global_batch = global;
    rc = check_schedule(m, &with_global, sched, n_micro, dp, &cx, near, sizeof near, &v);
    if (rc)
        return rc;
    /* the stage split itself: first/last stage overrides, layers per stage */
    tri_layout_shape shape = {.tp = r->tp, .pp = r->pp, .dp = dp, .sequence_parallel = r->sequence_parallel,
                              .B = r->micro_batch, .T = r->seq_length, .n_micro = n_micro};
    tri_stage_options so = {.v = v, .first_layers = r->first_layers, .last_layers = r->last_layers};
    tri_stage_plan plan;
    rc = tri_stage_split(&plan, m, &shape, &so);
    if (rc)
        return rc;
    tri_stage_plan_free(&plan);
    *out = (tri_train_layout){.tp = r->tp, .pp = r->pp, .dp = dp, .cp = cp, .ep = ep, .etp = etp,
                              .cp_comm_type = r->cp_comm_type && strcmp(r->cp_comm_type, "all_gather") == 0
                                                  ? TRI_CP_COMM_ALL_GATHER : TRI_CP_COMM_P2P,
                              .v = v, .sequence_parallel = r->sequence_parallel,
                              .B = r->micro_batch, .T = r->seq_length, .global_batch = global,
                              .n_micro = n_micro, .zero_stage = r->zero_stage, .recompute = r->recompute,
                              .precision = r->precision, .attention = r->attention, .schedule = sched, .first_layers = r->first_layers,
                              .last_layers = r->last_layers, .deterministic = r->deterministic,
                              .overlap_grad_reduce = r->overlap_grad_reduce,
                              .overlap_param_gather = r->overlap_param_gather};
    return TRI_OK;
}
