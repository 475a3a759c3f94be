/* checkpoints/load.c - loading a checkpoint into a trainer of any layout (see checkpoint.h).
 *
 * Each rank assembles, for every shard of state its owners list (engine/train/state_shards.h: the
 * weights of each parameter of its chunks, the moments of each piece its optimizer owns), the box its
 * TP shard covers from the stored pieces that overlap it (checkpoints/reader.h), whatever tp, pp and
 * dp wrote them, and hands the shard's range to its owner; the vocabulary padding of wte is zero. */
#include <cJSON.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "checkpoints/checkpoint.h"
#include "engine/train/powersgd_q.h"
#include "engine/train/state_shards.h"
#include "engine/core/log.h"
#include "engine/core/status.h"

/* The checkpoint's tensor for p must have p's logical shape. */
static int check_shape(const tri_ckpt_reader *r, const tri_param *p)
{
    int t = tri_manifest_tensor(&r->m, p->spec.name);
    if (t < 0)
        return TRI_ERR(TRI_EINVAL, "checkpoint %s holds no tensor %s: it was written for another model",
                       r->dir, p->spec.name);
    int64_t want[TRI_MAX_DIMS];
    tri_ckpt_logical_shape(&p->spec, want);
    const tri_ckpt_tensor *ten = &r->m.tensors[t];
    bool same = ten->ndim == p->spec.ndim;
    for (int d = 0; same && d < ten->ndim; d++)
        same = ten->shape[d] == want[d];
    if (!same) {
        char a[96] = "", b[96] = "";
        for (int d = 0; d < ten->ndim; d++)
            snprintf(a + strlen(a), sizeof a - strlen(a), "%s%lld", d ? " x " : "", (long long)ten->shape[d]);
        for (int d = 0; d < p->spec.ndim; d++)
            snprintf(b + strlen(b), sizeof b - strlen(b), "%s%lld", d ? " x " : "", (long long)want[d]);
        return TRI_ERR(TRI_EINVAL, "checkpoint %s: tensor %s is %s; this model's is %s: it was written for "
                       "another model", r->dir, p->spec.name, a, b);
    }
    return TRI_OK;
}

int tri_ckpt_state_groups(const tri_ckpt_manifest *m, const char *groups[3])
{
    bool adam = tri_optimizer_has_moments(m->run.adamw.kind);
    groups[0] = NULL;
    groups[1] = adam ? TRI_CKPT_EXP_AVG : TRI_CKPT_MOMENTUM;
    groups[2] = adam ? TRI_CKPT_EXP_AVG_SQ : NULL;
    return adam ? 3 : 2;
}

/* The values of shard e from the checkpoint: the box of its TP shard in group's tensors (read once
 * per parameter and group into *box, a buffer of the whole shard kept while its pieces follow), then
 * its range. */
static int read_shard(tri_ckpt_reader *r, const tri_state_shard *e, float **box, int64_t *cap,
                      const tri_param **boxed, tri_state_group *boxed_group)
{
    const tri_param *p = e->param;
    if (*boxed == p && *boxed_group == e->group)
        return TRI_OK;
    *boxed = NULL;
    if (!tri_ckpt_grow(box, cap, p->numel))
        return TRI_ERR(TRI_ENOMEM, "checkpoint: out of memory for %s", p->spec.name);
    tri_box b = tri_ckpt_shard_box(p);
    int rc = e->group == TRI_STATE_WEIGHTS ? check_shape(r, p) : TRI_OK;
    if (!rc) rc = tri_ckpt_read_box(r, tri_state_group_name(e->group), p->spec.name, &b, *box);
    if (!rc) {
        *boxed = p;
        *boxed_group = e->group;
    }
    return rc;
}

int tri_ckpt_load(tri_trainer *t, tri_ckpt_reader *r, bool weights_only)
{
    tri_state_shard *sh = NULL;
    int n = 0;
    int rc = tri_trainer_state_shards(t, &sh, &n);
    float *box = NULL;
    int64_t cap = 0;
    const tri_param *boxed = NULL;
    tri_state_group boxed_group = TRI_STATE_WEIGHTS;
    bool warned = false;
    for (int i = 0; i < n && !rc; i++) {
        if (sh[i].group >= TRI_STATE_OUTER_ANCHOR) /* local SGD's: tri_ckpt_load_local */
            continue;
        if (weights_only && sh[i].group != TRI_STATE_WEIGHTS)
            continue;
        /* a model buffer the checkpoint does not hold (saved before the model kept it: the expert bias
         * of a run without it) keeps its initial value */
        if (sh[i].buffer && tri_manifest_tensor(&r->m, sh[i].param->spec.name) < 0) {
            if (!warned)
                tri_log_rank0("checkpoint %s holds no %s (saved without it): it starts from its initial value",
                              r->dir, sh[i].param->spec.name);
            warned = true;
            continue;
        }
        rc = read_shard(r, &sh[i], &box, &cap, &boxed, &boxed_group);
        if (!rc) rc = tri_trainer_state_write(t, &sh[i], box + sh[i].lo);
    }
    free(box);
    free(sh);
    for (int c = 0; c < t->v && !rc; c++)
        t->opt[c].step = weights_only ? 0 : r->m.optimizer_step;
    return tri_comm_agree(t->grid->world, rc);
}

/* Whether replica state is read: the same dp (each replica its own), else none (see below). */
static int replica_plan(const tri_trainer *t, const tri_ckpt_reader *r, bool *replicas)
{
    const tri_ckpt_run *s = &r->m.run;
    *replicas = s->dp == t->grid->dp;
    if (*replicas || r->m.replicas_equal)
        return TRI_OK;
    return TRI_ERR(TRI_EINVAL, "checkpoint %s was saved by local SGD in the middle of a window (iteration %lld, "
                   "--local-sgd-steps %d) with dp %d: its %d replicas differ, so it resumes only with dp %d (this run "
                   "has dp %d; tp, pp and ZeRO 0's layout may change), or save at a synchronisation", r->dir,
                   (long long)r->m.iteration, s->local.steps, s->dp, s->dp, s->dp, t->grid->dp);
}

int tri_ckpt_load_local(tri_trainer *t, tri_ckpt_reader *r)
{
    tri_state_shard *sh = NULL;
    int n = 0;
    bool replicas = false;
    int rc = t->cfg.local.steps > 0 && r->m.run.local.steps > 0
                 ? TRI_OK
                 : TRI_ERR(TRI_EINVAL, "checkpoint %s: local SGD state loaded into a run without it, or from a "
                           "checkpoint without it", r->dir);
    if (!rc) rc = replica_plan(t, r, &replicas);
    if (!rc) rc = tri_trainer_state_shards(t, &sh, &n);
    float *box = NULL;
    int64_t cap = 0;
    for (int i = 0; i < n && !rc; i++) {
        const tri_state_shard *e = &sh[i];
        bool replica = e->group >= TRI_STATE_REPLICA_WEIGHTS;
        if (e->group < TRI_STATE_OUTER_ANCHOR || e->group >= TRI_STATE_EF_RESIDUAL || (replica && !replicas))
            continue; /* (the error feedback, the outer one included: tri_ckpt_load_compression) */
        /* the TP shard's box from the outer files (any layout) or this replica's own files */
        const tri_param *p = e->param;
        if (!tri_ckpt_grow(&box, &cap, p->numel))
            rc = TRI_ERR(TRI_ENOMEM, "checkpoint: out of memory for %s", p->spec.name);
        tri_box b = tri_ckpt_shard_box(p);
        if (!rc) rc = tri_ckpt_read_box_in(r, replica ? TRI_CKPT_REPLICA : TRI_CKPT_OUTER, replica ? t->grid->dp_rank : -1,
                                           tri_state_group_name(e->group), p->spec.name, &b, box);
        if (!rc) rc = tri_trainer_state_write(t, e, box + e->lo);
    }
    free(box);
    free(sh);
    if (!rc) {
        t->outer_syncs = r->m.outer_syncs;
        t->replicas_apart = !r->m.replicas_equal;
    }
    return tri_comm_agree(t->grid->world, rc);
}

/* Why this run cannot take the checkpoint's per-rank compression state (copies' residuals, q false,
 * or PowerSGD's Q), into why; "" when it can: the group held at all (older checkpoints hold
 * neither) and, for the copies' residuals, which belong to the saving rank's TP shard, the same tp
 * and pp (any dp: mean_of_workers). A Q is read at any tp and pp (read_q). */
static void own_state_plan(const tri_trainer *t, const tri_ckpt_reader *r, bool held, const char *what, bool q,
                           char *why, size_t cap)
{
    const tri_ckpt_run *s = &r->m.run;
    why[0] = '\0';
    if (!held)
        snprintf(why, cap, "the checkpoint predates %s in checkpoints", what);
    else if (!q && (s->tp != t->grid->tp || s->pp != t->grid->pp))
        snprintf(why, cap, "it was saved at tp %d x pp %d and %s belongs to the saving rank's shard (this run has "
                 "tp %d x pp %d)", s->tp, s->pp, what, t->grid->tp, t->grid->pp);
}

/* Entry e (a copy's residual or a matrix's Q) from the file of the (tp, pp) rank that saved it, pp
 * (Q: dp rank 0's, the same bits on every dp rank; residuals: saving dp rank dp's) into box (e's hi
 * floats), *found. */
static int read_own_at(tri_trainer *t, tri_ckpt_reader *r, const tri_state_shard *e, int pp, int dp, float *box,
                       bool *found)
{
    const tri_grid *g = t->grid;
    tri_box b = tri_ckpt_shard_box(e->param);
    return tri_ckpt_read_own(r, TRI_CKPT_REPLICA, g->tp_rank, pp, tri_state_group_is_q(e->group) ? 0 : dp,
                             tri_state_group_name(e->group), e->param->spec.name, &b, e->hi - e->lo, box, found);
}

/* The saving pipeline rank searched k-th for entry e's matrix: from the first stage for a holder,
 * from the last for a copy (the tied embedding's, on the last stage). */
static int search_pp(const tri_ckpt_reader *r, const tri_state_shard *e, int k)
{
    return e->holder ? k : r->m.run.pp - 1 - k;
}

/* Whether p's TP shard holds vocabulary padding rows only (at a larger tp the last shards of a
 * vocabulary-parallel matrix can). */
static bool padding_only(const tri_param *p)
{
    int64_t logical[TRI_MAX_DIMS];
    tri_ckpt_logical_shape(&p->spec, logical);
    for (int d = 0; d < p->spec.ndim; d++)
        if (p->global_offset[d] >= logical[d])
            return true;
    return false;
}

/* At another tp, matrix e's Q (into box, rank x cols) from every saving TP rank's
 * (tri_powersgd_q_reshard: the saved shards whose rows the new one meets, summed, each column from
 * the shards that hold it), each read from the first pipeline rank's file that holds the matrix
 * (search_pp), dp rank 0's. *found when every column is covered (or the shard is padding only). */
static int reshard_q(tri_trainer *t, tri_ckpt_reader *r, const tri_state_shard *e, float *box, bool *found)
{
    const tri_param *p = e->param;
    int tp = r->m.run.tp, nd = p->spec.ndim, n = 0, rc = TRI_OK;
    if (padding_only(p)) { /* its gradient is zero, so its Q does not matter: it keeps its draw */
        *found = true;
        return tri_trainer_state_read(t, e, box);
    }
    int64_t cols = p->local_shape[nd - 1], rank = cols > 0 ? (e->hi - e->lo) / cols : 0;
    tri_q_shard *saved = calloc((size_t)tp, sizeof *saved);
    float **data = calloc((size_t)tp, sizeof *data);
    if (!saved || !data)
        rc = TRI_ERR(TRI_ENOMEM, "checkpoint: out of memory for the Q of %s", p->spec.name);
    for (int k = 0; k < tp && !rc; k++) {
        bool got = false;
        for (int s = 0; s < r->m.run.pp && !got && !rc; s++) {
            tri_box b;
            int64_t len = 0;
            rc = tri_ckpt_read_own_shard(r, TRI_CKPT_REPLICA, k, search_pp(r, e, s), 0, tri_state_group_name(e->group),
                                         p->spec.name, nd, &b, &data[n], &len, &got);
            if (!rc && got && len != rank * b.shape[nd - 1])
                rc = TRI_ERR(TRI_ECORRUPT, "checkpoint %s: the %s of %s saved by tp rank %d holds %lld floats, not "
                             "rank %lld x %lld columns", r->dir, tri_state_group_name(e->group), p->spec.name, k,
                             (long long)len, (long long)rank, (long long)b.shape[nd - 1]);
            if (!rc && got) {
                memcpy(saved[n].off, b.off, sizeof b.off);
                memcpy(saved[n].shape, b.shape, sizeof b.shape);
                saved[n].qt = data[n];
                n++;
            }
        }
    }
    tri_q_shard want = {.qt = NULL};
    tri_box b = tri_ckpt_shard_box(p);
    memcpy(want.off, b.off, sizeof b.off);
    memcpy(want.shape, b.shape, sizeof b.shape);
    *found = !rc && n > 0 && tri_powersgd_q_reshard(nd, rank, saved, n, &want, box) == 0;
    for (int k = 0; data && k < n; k++)
        free(data[k]);
    free(data);
    free(saved);
    return rc;
}

/* A matrix's Q: from this rank's own (tp, pp) file at the saved tp and pp; at another pp (the same
 * tp) from the first pipeline rank's file that holds it (search_pp); at another tp resharded
 * (reshard_q, counted in *resharded). *holders_q: a tied copy took its holder's Q (the checkpoint,
 * saved at pp 1, holds no copy's own). */
static int read_q(tri_trainer *t, tri_ckpt_reader *r, const tri_state_shard *e, float *box, bool *found,
                  int *holders_q, int *resharded)
{
    int pp = r->m.run.pp, rc = TRI_OK;
    *found = false;
    if (r->m.run.tp != t->grid->tp) {
        rc = reshard_q(t, r, e, box, found);
        *resharded += *found;
    } else if (pp == t->grid->pp) {
        return read_own_at(t, r, e, t->grid->pp_rank, 0, box, found);
    } else {
        for (int k = 0; k < pp && !*found && !rc; k++)
            rc = read_own_at(t, r, e, search_pp(r, e, k), 0, box, found);
    }
    *holders_q += *found && !e->holder && e->param->spec.tied_copy && pp == 1;
    return rc;
}

/* What the load of the compression state could not take as saved, for its messages: copies whose
 * own residual was restored from the stored copy's (own), Q's drawn afresh (fresh_q[0] the gradient
 * reduction's, [1] the outer reduction's), tied copies' Q's taken from the holder (holders_q), Q's
 * resharded from another tp (resharded_q). */
typedef struct load_counts {
    int own, fresh_q[2], holders_q, resharded_q;
} load_counts;

/* What this rank's own compression state can come from: "" when the copies' residuals (copies) and
 * Q (q[0] the gradient reduction's, q[1] the outer reduction's) are read from the saving ranks'
 * files, else why not. */
typedef struct own_plan {
    char copies[256], q[2][256];
} own_plan;

/* Sets box's elements to the non-zero ones (by bits: -0 too) of one saving rank's entry x (n). */
static void take_chunks(float *box, const float *x, int64_t n)
{
    for (int64_t i = 0; i < n; i++) {
        uint32_t bits;
        memcpy(&bits, &x[i], sizeof bits);
        if (bits != 0)
            box[i] = x[i];
    }
}

/* Two-phase's server residual entry e into box. It is one tensor cut across the dp ranks (each holds
 * its chunk of every unit, +0 elsewhere), so the whole of it is every saving rank's entry merged
 * (take_chunks). With the saved tp, pp and dp the chunks are the same and this changes nothing; with
 * others a rank's new chunk may lie in another rank's file. The server's residual is of the reduced
 * (mean) gradient, whatever dp, so at another dp the merged tensor is the same debt, cut by the new
 * chunks. A non-holder copy's (server_error_feedback_copy) is merged from its own datasets in the
 * files of its (tp, pp) when the plan allows and every saving rank's is there; otherwise from the
 * holder's boxes (*holders set). */
static int read_server(tri_trainer *t, tri_ckpt_reader *r, const tri_state_shard *e, const own_plan *plan, float *box,
                       bool *holders)
{
    const tri_param *p = e->param;
    size_t bytes = (size_t)p->numel * sizeof *box;
    float *one = malloc(bytes > 0 ? bytes : 1);
    int rc = one ? TRI_OK : TRI_ERR(TRI_ENOMEM, "checkpoint: out of memory for %s", p->spec.name);
    bool found = e->group == TRI_STATE_EF_SERVER_COPY && !plan->copies[0];
    memset(box, 0, bytes);
    for (int k = 0; k < r->m.run.dp && found && !rc; k++) {
        rc = read_own_at(t, r, e, t->grid->pp_rank, k, one, &found);
        if (!rc && found)
            take_chunks(box, one, p->numel);
    }
    tri_box b = tri_ckpt_shard_box(p);
    if (!rc && !found) {
        *holders = true;
        memset(box, 0, bytes);
    }
    for (int k = 0; k < r->m.run.dp && !found && !rc; k++) {
        rc = tri_ckpt_read_box_in(r, TRI_CKPT_REPLICA, k, tri_state_group_name(TRI_STATE_EF_SERVER_RESIDUAL),
                                  p->spec.name, &b, one);
        if (!rc)
            take_chunks(box, one, p->numel);
    }
    free(one);
    return rc;
}

/* A worker's residual entry e (error_feedback, error_feedback_copy, outer_error_feedback) as saving
 * dp rank k stored it, into box (room for e's TP shard; e's values at [e->lo, e->hi)): a copy's own
 * from its file when the plan allows, else the stored copy's box (*holders set). */
static int read_worker(tri_trainer *t, tri_ckpt_reader *r, const tri_state_shard *e, const own_plan *plan, int k,
                       float *box, bool *holders)
{
    bool found = false;
    int rc = TRI_OK;
    if (e->group == TRI_STATE_EF_COPY && !plan->copies[0])
        rc = read_own_at(t, r, e, t->grid->pp_rank, k, box, &found);
    if (rc || found)
        return rc;
    *holders = true;
    tri_box b = tri_ckpt_shard_box(e->param);
    tri_state_group g = e->group == TRI_STATE_EF_COPY ? TRI_STATE_EF_RESIDUAL : e->group;
    return tri_ckpt_read_box_in(r, TRI_CKPT_REPLICA, k, tri_state_group_name(g), e->param->spec.name, &b, box);
}

/* At another dp, a worker's residual entry e: every saving rank's (read_worker) summed in double, in
 * rank order, divided by this run's dp and rounded once. Each rank's gradient enters the reduction
 * divided by dp (dp_compress.h), so what the average gradient still owes is the residuals' sum
 * (Seide et al. 2014: nothing withheld is lost); every new rank takes an equal share of it, which
 * keeps the sum, while the split between replicas, each saving replica's own, has no counterpart at
 * another dp. */
static int mean_of_workers(tri_trainer *t, tri_ckpt_reader *r, const tri_state_shard *e, const own_plan *plan,
                           float *box, bool *holders)
{
    int64_t n = e->hi - e->lo;
    double *sum = calloc((size_t)(n > 0 ? n : 1), sizeof *sum);
    int rc = sum ? TRI_OK : TRI_ERR(TRI_ENOMEM, "checkpoint: out of memory for %s", e->param->spec.name);
    for (int k = 0; k < r->m.run.dp && !rc; k++) {
        rc = read_worker(t, r, e, plan, k, box, holders);
        for (int64_t i = 0; i < n && !rc; i++)
            sum[i] += (double)box[e->lo + i];
    }
    for (int64_t i = 0; i < n && !rc; i++)
        box[e->lo + i] = (float)(sum[i] / (double)t->grid->dp);
    free(sum);
    return rc;
}

/* Compression entry e (a holder's residual, a copy's, a server residual, or a matrix's Q) from the
 * checkpoint into the trainer, through box (room for e's TP shard and Q). A copy not read from its
 * own file gets the holder's residual (counted in c->own when its residual is its own; so does a
 * non-holder's server residual); a Q not read keeps the fresh draw (counted in
 * c->fresh_q). At another dp a worker's residual is the saving ranks' mean (mean_of_workers), the
 * server's is merged from every file (read_server) and Q is dp rank 0's (the same on every rank). */
static int load_entry(tri_trainer *t, tri_ckpt_reader *r, const tri_state_shard *e, const own_plan *plan, float *box,
                      load_counts *c)
{
    const tri_param *p = e->param;
    int rc = TRI_OK;
    if (tri_state_group_is_q(e->group)) {
        bool found = false, outer = tri_state_group_is_outer_compression(e->group);
        if (!plan->q[outer][0])
            rc = read_q(t, r, e, box, &found, &c->holders_q, &c->resharded_q);
        if (rc)
            return rc;
        c->fresh_q[outer] += !found;
        return found ? tri_trainer_state_write(t, e, box) : TRI_OK;
    }
    bool holders = false;
    if (e->group == TRI_STATE_EF_SERVER_RESIDUAL || e->group == TRI_STATE_EF_SERVER_COPY) {
        rc = read_server(t, r, e, plan, box, &holders);
    } else if (r->m.run.dp == t->grid->dp) {
        rc = read_worker(t, r, e, plan, t->grid->dp_rank, box, &holders);
    } else {
        rc = mean_of_workers(t, r, e, plan, box, &holders);
    }
    /* a copy given the holder's: equal for a copy without SP, shared shards or a tied copy, which sum
     * their gradients after the dp reduction (engine/train/train.c sync_grads) */
    c->own += holders && !e->holder &&
            (p->spec.tied_copy || p->replicas > 1 ||
             (p->tp_replicated && (t->cfg.sequence_parallel || p->spec.tp_partial_grad) && t->grid->tp > 1));
    return rc ? rc : tri_trainer_state_write(t, e, box + e->lo);
}

int tri_ckpt_load_compression(tri_trainer *t, tri_ckpt_reader *r)
{
    const tri_ckpt_run *s = &r->m.run;
    tri_compression_kind cur = t->chunks[0]->zero.comp.on ? t->chunks[0]->zero.comp.c.kind : TRI_COMPRESS_NONE;
    tri_state_shard *sh = NULL;
    int n = 0;
    load_counts c = {0};
    tri_compression_reduce red = t->chunks[0]->zero.comp.c.reduce;
    int rc = cur != TRI_COMPRESS_NONE && s->compression.kind == cur && s->compression.reduce == red
                 ? TRI_OK
                 : TRI_ERR(TRI_EINVAL, "checkpoint %s: the error feedback of --grad-compression %s "
                           "--grad-compression-reduce %s loaded into a run with --grad-compression %s "
                           "--grad-compression-reduce %s (resume with the same, or pass --reset-compression-state)",
                           r->dir, tri_compression_name(s->compression.kind),
                           tri_compression_reduce_name(s->compression.reduce), tri_compression_name(cur),
                           tri_compression_reduce_name(red));
    own_plan plan;
    own_state_plan(t, r, r->m.residual_copies, "each copy's own residual", false, plan.copies, sizeof plan.copies);
    static const char *const q_name[2] = {"PowerSGD's Q", "the outer reduction's PowerSGD Q"};
    own_state_plan(t, r, r->m.powersgd_q, q_name[0], true, plan.q[0], sizeof plan.q[0]);
    own_state_plan(t, r, r->m.outer_powersgd_q, q_name[1], true, plan.q[1], sizeof plan.q[1]);
    int rank = t->chunks[0]->zero.comp.c.powersgd_rank;
    for (int k = 0; k < 2 && cur == TRI_COMPRESS_POWERSGD && s->compression.powersgd_rank != rank; k++)
        if (!plan.q[k][0])
            snprintf(plan.q[k], sizeof plan.q[k], "it was saved with --powersgd-rank %d (this run has %d)",
                     s->compression.powersgd_rank, rank);
    if (!rc) rc = tri_trainer_state_shards(t, &sh, &n);
    float *box = NULL;
    int64_t cap = 0;
    for (int i = 0; i < n && !rc; i++) {
        const tri_state_shard *e = &sh[i];
        /* the outer reduction's residual and Q only from a checkpoint of local SGD (one without it
         * leaves the residual zero and Q drawn; a fresh outer state resets both after this) */
        if (e->group < TRI_STATE_EF_RESIDUAL || (tri_state_group_is_outer_compression(e->group) && s->local.steps == 0))
            continue;
        rc = tri_ckpt_grow(&box, &cap, e->hi > e->param->numel ? e->hi : e->param->numel)
                 ? load_entry(t, r, e, &plan, box, &c)
                 : TRI_ERR(TRI_ENOMEM, "checkpoint: out of memory for %s", e->param->spec.name);
    }
    free(box);
    free(sh);
    if (!rc && s->dp != t->grid->dp && t->grid->dp_rank == 0)
        tri_log("checkpoint %s was saved at dp %d: each dp rank's error-feedback residual starts from the %d saved "
                "ranks' sum divided by %d (what the average gradient still owes is kept; each saving replica's own "
                "share has no counterpart at dp %d)%s", r->dir, s->dp, s->dp, t->grid->dp, t->grid->dp,
                red == TRI_COMPRESS_REDUCE_TWO_PHASE ? "; the server residual is cut by the new chunks" : "");
    if (!rc && c.resharded_q > 0 && t->grid->dp_rank == 0)
        tri_log("checkpoint %s was saved at tp %d: PowerSGD's Q of %d matrix(es) of this rank resharded to tp %d "
                "(engine/train/powersgd_q.h: the saved row shards' Q summed, the column shards' side by side)",
                r->dir, s->tp, c.resharded_q, t->grid->tp);
    if (!rc && c.own > 0 && t->grid->dp_rank == 0)
        tri_log("warning: checkpoint %s: %d error-feedback residual(s) of this rank (sequence-parallel replicated "
                "parameters, shared TP shards or the tied embedding's copy) are its own but are restored from the "
                "stored copy (%s), so this resume is not bit-identical to an uninterrupted run", r->dir, c.own,
                plan.copies[0] ? plan.copies : "this rank's shard was not found: an older checkpoint");
    if (!rc && c.holders_q > 0 && t->grid->dp_rank == 0)
        tri_log("warning: checkpoint %s: %d PowerSGD Q(s) of the tied embedding's copy on the last stage start "
                "from its holder's: the checkpoint was saved at pp 1, where there is no copy", r->dir, c.holders_q);
    for (int k = 0; k < 2 && !rc; k++)
        if (c.fresh_q[k] > 0 && t->grid->dp_rank == 0)
            tri_log("warning: checkpoint %s: %s of %d matrix(es) of this rank is drawn afresh from the seeded RNG "
                    "(%s), so this resume is not bit-identical to an uninterrupted run", r->dir, q_name[k], c.fresh_q[k],
                    plan.q[k][0] ? plan.q[k] : "not found for this rank's shard");
    return tri_comm_agree(t->grid->world, rc);
}

static int differs_f(const char *dir, const char *field, double saved, double cur)
{
    return TRI_ERR(TRI_EINVAL, "checkpoint %s was saved with %s %.9g; this run has %.9g (resume with the same "
                   "value)", dir, field, saved, cur);
}

/* A learning-rate schedule setting that differs: refused, naming Megatron's two ways to choose. */
static int lr_differs(const char *dir, const char *field, double saved, double cur)
{
    return TRI_ERR(TRI_EINVAL, "checkpoint %s was saved with %s %.9g; this run has %.9g: the learning-rate "
                   "schedule changed (resume with the same value, or choose: --use-checkpoint-opt_param-scheduler "
                   "keeps the checkpoint's schedule, --override-opt_param-scheduler takes this run's flags)", dir,
                   field, saved, cur);
}

/* The learning-rate schedule fields, with TRI_LR_SAME. */
static int check_lr(const tri_lr_schedule *a, const tri_lr_schedule *cur, const char *dir)
{
    if (a->lr != cur->lr)
        return lr_differs(dir, "--lr", a->lr, cur->lr);
    if (a->min_lr != cur->min_lr)
        return lr_differs(dir, "--min-lr", a->min_lr, cur->min_lr);
    if (a->warmup_iters != cur->warmup_iters)
        return lr_differs(dir, "--lr-warmup-iters", (double)a->warmup_iters, (double)cur->warmup_iters);
    if (a->decay_iters != cur->decay_iters)
        return lr_differs(dir, "--lr-decay-iters (default: --train-iters)", (double)a->decay_iters,
                          (double)cur->decay_iters);
    if (a->style != cur->style)
        return TRI_ERR(TRI_EINVAL, "checkpoint %s was saved with --lr-decay-style %s; this run has %s: the "
                       "learning-rate schedule changed (--use-checkpoint-opt_param-scheduler keeps the checkpoint's "
                       "schedule, --override-opt_param-scheduler takes this run's flags)", dir,
                       tri_ckpt_lr_style_name(a->style), tri_ckpt_lr_style_name(cur->style));
    return TRI_OK;
}

int tri_ckpt_check_resume(const tri_ckpt_manifest *s, const tri_ckpt_run *cur, tri_lr_source lr_source,
                          bool fresh_optim, const char *dir)
{
    const tri_ckpt_run *a = &s->run;
    if (a->seed != cur->seed)
        return TRI_ERR(TRI_EINVAL, "checkpoint %s was saved with --seed %llu; this run has %llu (initialisation "
                       "and data order follow the seed)", dir, (unsigned long long)a->seed,
                       (unsigned long long)cur->seed);
    if (a->global_batch != cur->global_batch)
        return differs_f(dir, "--global-batch-size", (double)a->global_batch, (double)cur->global_batch);
    if (a->seq_length != cur->seq_length)
        return differs_f(dir, "--seq-length", (double)a->seq_length, (double)cur->seq_length);
    if (lr_source == TRI_LR_SAME) {
        int rc = check_lr(&a->lr, &cur->lr, dir);
        if (rc)
            return rc;
    }
    if (!fresh_optim && a->adamw.kind != cur->adamw.kind)
        return TRI_ERR(TRI_EINVAL, "checkpoint %s was saved with --optimizer %s; this run has --optimizer %s: its "
                       "state does not carry over (resume with --optimizer %s, or pass --no-load-optim to start "
                       "the %s state fresh from the checkpoint's weights)", dir, tri_optimizer_name(a->adamw.kind),
                       tri_optimizer_name(cur->adamw.kind), tri_optimizer_name(a->adamw.kind),
                       tri_optimizer_name(cur->adamw.kind));
    if (fresh_optim)
        return a->clip_grad != cur->clip_grad ? differs_f(dir, "--clip-grad", a->clip_grad, cur->clip_grad) : TRI_OK;
    if (a->adamw.beta1 != cur->adamw.beta1)
        return differs_f(dir, "--adam-beta1", a->adamw.beta1, cur->adamw.beta1);
    if (a->adamw.beta2 != cur->adamw.beta2)
        return differs_f(dir, "--adam-beta2", a->adamw.beta2, cur->adamw.beta2);
    if (a->adamw.eps != cur->adamw.eps)
        return differs_f(dir, "--adam-eps", a->adamw.eps, cur->adamw.eps);
    if (a->adamw.weight_decay != cur->adamw.weight_decay)
        return differs_f(dir, "--weight-decay", a->adamw.weight_decay, cur->adamw.weight_decay);
    if (a->clip_grad != cur->clip_grad)
        return differs_f(dir, "--clip-grad", a->clip_grad, cur->clip_grad);
    bool momentum = a->adamw.kind == TRI_OPT_SGD || a->adamw.kind == TRI_OPT_LARS;
    if (momentum && a->adamw.momentum != cur->adamw.momentum)
        return differs_f(dir, "--sgd-momentum", a->adamw.momentum, cur->adamw.momentum);
    if (momentum && a->adamw.nesterov != cur->adamw.nesterov)
        return differs_f(dir, "--sgd-nesterov", a->adamw.nesterov, cur->adamw.nesterov);
    if (a->adamw.kind == TRI_OPT_LARS && a->adamw.lars_eta != cur->adamw.lars_eta)
        return differs_f(dir, "--lars-eta", a->adamw.lars_eta, cur->adamw.lars_eta);
    if (a->adamw.kind == TRI_OPT_ADAM && a->adamw.freeze_step != cur->adamw.freeze_step)
        return TRI_ERR(TRI_EINVAL, "checkpoint %s was saved with --adam-freeze-step %lld; this run has "
                       "--adam-freeze-step %lld: the second moment it holds was frozen (or not) by the first (resume "
                       "with the same value, or pass --no-load-optim to start the optimizer state fresh)", dir,
                       (long long)a->adamw.freeze_step, (long long)cur->adamw.freeze_step);
    if (a->adamw.kind == TRI_OPT_ADAM && a->adamw.onebit_adam != cur->adamw.onebit_adam)
        return TRI_ERR(TRI_EINVAL, "checkpoint %s was saved %s --onebit-adam; this run is %s it: after the freeze the "
                       "state it holds (the error-feedback residuals) compresses the %s, not the %s (resume with the "
                       "same setting, or pass --no-load-optim to start the optimizer state fresh)", dir,
                       a->adamw.onebit_adam ? "with" : "without", cur->adamw.onebit_adam ? "with" : "without",
                       a->adamw.onebit_adam ? "momentum" : "gradient", a->adamw.onebit_adam ? "gradient" : "momentum");
    return TRI_OK;
}

int tri_ckpt_check_config(const tri_ckpt_manifest *saved, const char *config_json, const char *dir)
{
    cJSON *a = cJSON_Parse(saved->config_json ? saved->config_json : "{}");
    cJSON *b = cJSON_Parse(config_json ? config_json : "{}");
    int rc = TRI_OK;
    if (!a || !b) {
        rc = TRI_ERR(TRI_EINVAL, "checkpoint %s: a model config is not valid JSON", dir);
    } else if (!cJSON_Compare(a, b, true)) {
        const cJSON *x = NULL, *key = NULL;
        for (x = b->child; x && !key; x = x->next) /* a key of this model that differs or is absent */
            if (!cJSON_Compare(x, cJSON_GetObjectItemCaseSensitive(a, x->string), true))
                key = x;
        for (x = a->child; x && !key; x = x->next) /* a key only the checkpoint has */
            if (!cJSON_GetObjectItemCaseSensitive(b, x->string))
                key = x;
        const char *k = key && key->string ? key->string : "?";
        char *sa = cJSON_PrintUnformatted(cJSON_GetObjectItemCaseSensitive(a, k));
        char *sb = cJSON_PrintUnformatted(cJSON_GetObjectItemCaseSensitive(b, k));
        rc = TRI_ERR(TRI_EINVAL, "checkpoint %s was written for another model: config key %s is %s there and "
                     "%s here", dir, k, sa ? sa : "absent", sb ? sb : "absent");
        cJSON_free(sa);
        cJSON_free(sb);
    }
    cJSON_Delete(a);
    cJSON_Delete(b);
    return rc;
}
