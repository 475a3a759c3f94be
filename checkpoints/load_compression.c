/* checkpoints/load_compression.c - the compressed dp reduction's state read back (engine/train/dp_compress.h;
 * tri_ckpt_load_compression in checkpoint.h): each dp rank's error-feedback residual, each copy's
 * own, two-phase's server residuals and PowerSGD's Q, into the saving layout or any other. At
 * another dp the residuals keep what the average gradient owes (the saving ranks' sum shared by the
 * new ranks), the server residual is cut by the new chunks, and at another tp Q is resharded
 * (engine/train/powersgd_q.h). The group names and stored layouts are engine/train/state_shards.h's;
 * this file knows no compressor's arithmetic. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "checkpoints/checkpoint.h"
#include "engine/core/log.h"
#include "engine/core/status.h"
#include "engine/train/powersgd_q.h"
#include "engine/train/state_shards.h"

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

/* The Q shard of box b (its offset and shape) with Q^T qt. */
static tri_q_shard q_shard(const tri_box *b, const float *qt)
{
    tri_q_shard q = {.qt = qt};
    memcpy(q.off, b->off, sizeof q.off);
    memcpy(q.shape, b->shape, sizeof q.shape);
    return q;
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
            if (!rc && got && len != rank * b.shape[nd - 1]) {
                rc = TRI_ERR(TRI_ECORRUPT, "checkpoint %s: the %s of %s saved by tp rank %d holds %lld floats, not "
                             "rank %lld x %lld columns", r->dir, tri_state_group_name(e->group), p->spec.name, k,
                             (long long)len, (long long)rank, (long long)b.shape[nd - 1]);
                free(data[n]); /* not counted in n */
            }
            if (!rc && got) {
                saved[n] = q_shard(&b, data[n]);
                n++;
            }
        }
    }
    tri_box b = tri_ckpt_shard_box(p);
    tri_q_shard want = q_shard(&b, NULL);
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
 * resharded from another tp (resharded_q), residuals given their copies' shared sum (shared). */
typedef struct load_counts {
    int own, fresh_q[2], holders_q, resharded_q, shared;
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

/* ---- copies whose gradients are summed, at another tp or pp ----
 * The tied embedding's copy on the last stage, sequence parallelism's TP-replicated parameters and
 * shared shards each reduce their own part of the gradient over dp, and the parts are summed after
 * the reduction (engine/train/train.c sync_grads): what they owe together is the sum of their
 * residuals (and of their server residuals). At another tp or pp the copies are other ones, so that
 * sum is read from every saved copy and shared equally by this run's copies. Copies that reduced
 * equal gradients (TP-replicated without sequence parallelism) owed one residual each, the
 * holder's. Not under 1-bit Adam, whose exchange gives every copy the first copy's momentum, so the
 * other copies' residuals are lost in any layout. */

/* How many copies in this run sum their parts of p's gradient after the dp reduction (1: none). */
static int sharing_copies(const tri_trainer *t, const tri_param *p)
{
    int m = p->spec.tied ? 2 : 1;
    if (p->tp_replicated && t->grid->tp > 1 && (t->cfg.sequence_parallel || p->spec.tp_partial_grad))
        m *= t->grid->tp;
    return p->replicas > 1 ? m * p->replicas : m;
}

/* Whether p's copies in the saving layout reduced equal gradients (each owed the holder's). */
static bool saved_copies_equal(const tri_ckpt_reader *r, const tri_param *p)
{
    return p->spec.split_dim < 0 && !p->spec.tp_partial_grad && !r->m.run.sequence_parallel;
}

/* Whether entry e (the gradient reduction's residual or server residual, a holder's or a copy's)
 * takes the copies' shared sum: the checkpoint holds the copies' own, the layout changed where
 * copies are (tp or pp), and there are copies on either side. */
static bool shares_copies_sum(const tri_trainer *t, const tri_ckpt_reader *r, const tri_state_shard *e)
{
    const tri_ckpt_run *s = &r->m.run;
    tri_state_group g = e->group;
    bool grad = g == TRI_STATE_EF_RESIDUAL || g == TRI_STATE_EF_COPY || g == TRI_STATE_EF_SERVER_RESIDUAL ||
                g == TRI_STATE_EF_SERVER_COPY;
    bool moved = s->tp != t->grid->tp || s->pp != t->grid->pp;
    bool copies = s->tp > 1 || s->pp > 1 || sharing_copies(t, e->param) > 1;
    return grad && r->m.residual_copies && !t->opt[0].cfg.onebit_adam && moved && copies;
}

/* The sum of p's saved copies' residuals of the holder's group (error_feedback or
 * server_error_feedback) on p's shard, into box: the holder's box and, unless the saved copies were
 * equal, every copy's own entry (group + its _copy group, in every (tp, pp) file) of saving dp ranks
 * [k0, k1), added in double in that order and divided by this run's sharing copies. *shared is set
 * when that changed anything: a copy's entry was found or this run has several copies. */
static int copies_sum(tri_trainer *t, tri_ckpt_reader *r, const tri_param *p, tri_state_group holder, int k0, int k1,
                      float *box, bool *shared)
{
    tri_state_group own = holder == TRI_STATE_EF_SERVER_RESIDUAL ? TRI_STATE_EF_SERVER_COPY : TRI_STATE_EF_COPY;
    tri_box db = tri_ckpt_shard_box(p);
    int64_t n = p->numel, limit[TRI_MAX_DIMS];
    tri_ckpt_logical_shape(&p->spec, limit);
    double *sum = calloc((size_t)(n > 0 ? n : 1), sizeof *sum);
    float *one = malloc((size_t)(n > 0 ? n : 1) * sizeof *one);
    int rc = sum && one ? TRI_OK : TRI_ERR(TRI_ENOMEM, "checkpoint: out of memory for %s", p->spec.name);
    bool equal = saved_copies_equal(r, p);
    for (int k = k0; k < k1 && !rc; k++) {
        rc = tri_ckpt_read_box_in(r, TRI_CKPT_REPLICA, k, tri_state_group_name(holder), p->spec.name, &db, one);
        for (int64_t i = 0; i < n && !rc; i++)
            sum[i] += (double)one[i];
        for (int f = 0; f < r->m.n_files && !rc && !equal; f++) {
            const tri_ckpt_file *file = &r->m.files[f];
            if (file->kind != TRI_CKPT_REPLICA || file->dp_rank != k)
                continue;
            tri_box sb;
            float *x = NULL;
            int64_t len = 0;
            bool found = false;
            rc = tri_ckpt_read_own_shard(r, TRI_CKPT_REPLICA, file->tp_rank, file->pp_rank, k,
                                         tri_state_group_name(own), p->spec.name, p->spec.ndim, &sb, &x, &len, &found);
            if (!rc && found) {
                memset(one, 0, (size_t)n * sizeof *one);
                tri_box_copy(&sb, 0, len, x, &db, one, limit);
                for (int64_t i = 0; i < n; i++)
                    sum[i] += (double)one[i];
                *shared = true;
            }
            free(x);
        }
    }
    int m = sharing_copies(t, p);
    *shared = *shared || m > 1;
    for (int64_t i = 0; i < n && !rc; i++)
        box[i] = (float)(sum[i] / (double)m);
    free(sum);
    free(one);
    return rc;
}

/* Two-phase's server residual entry e into box. It is one tensor cut across the dp ranks (each holds
 * its chunk of every unit, +0 elsewhere), so the whole of it is every saving rank's entry merged
 * (take_chunks). With the saved tp, pp and dp the chunks are the same and this changes nothing; with
 * others a rank's new chunk may lie in another rank's file. The server's residual is of the reduced
 * (mean) gradient, whatever dp, so at another dp the merged tensor is the same debt, cut by the new
 * chunks. A non-holder copy's (server_error_feedback_copy) is merged from its own datasets in the
 * files of its (tp, pp) when the plan allows and every saving rank's is there; otherwise from the
 * holder's boxes (*holders set). Local SGD's outer reduction's (outer_server_error_feedback) is the
 * holder's, as its copies are. */
static int read_server(tri_trainer *t, tri_ckpt_reader *r, const tri_state_shard *e, const own_plan *plan, float *box,
                       bool *holders, bool *shared)
{
    const tri_param *p = e->param;
    if (shares_copies_sum(t, r, e)) /* every saving rank's chunks: their sum is their merge */
        return copies_sum(t, r, p, TRI_STATE_EF_SERVER_RESIDUAL, 0, r->m.run.dp, box, shared);
    size_t bytes = (size_t)p->numel * sizeof *box;
    float *one = malloc(bytes > 0 ? bytes : 1);
    int rc = one ? TRI_OK : TRI_ERR(TRI_ENOMEM, "checkpoint: out of memory for %s", p->spec.name);
    bool found = e->group == TRI_STATE_EF_SERVER_COPY && !plan->copies[0];
    tri_state_group holder = e->group == TRI_STATE_OUTER_EF_SERVER_RESIDUAL ? e->group : TRI_STATE_EF_SERVER_RESIDUAL;
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
        rc = tri_ckpt_read_box_in(r, TRI_CKPT_REPLICA, k, tri_state_group_name(holder), p->spec.name, &b, one);
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
                       float *box, bool *holders, bool *shared)
{
    if (shares_copies_sum(t, r, e))
        return copies_sum(t, r, e->param, TRI_STATE_EF_RESIDUAL, k, k + 1, box, shared);
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
                           float *box, bool *holders, bool *shared)
{
    int64_t n = e->hi - e->lo;
    double *sum = calloc((size_t)(n > 0 ? n : 1), sizeof *sum);
    int rc = sum ? TRI_OK : TRI_ERR(TRI_ENOMEM, "checkpoint: out of memory for %s", e->param->spec.name);
    for (int k = 0; k < r->m.run.dp && !rc; k++) {
        rc = read_worker(t, r, e, plan, k, box, holders, shared);
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
 * server's is merged from every file (read_server) and Q is dp rank 0's (the same on every rank); at
 * another tp or pp copies that sum their gradients take their saved copies' shared sum (copies_sum,
 * counted in c->shared). */
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
    bool holders = false, shared = false;
    if (tri_state_group_is_server(e->group)) {
        rc = read_server(t, r, e, plan, box, &holders, &shared);
    } else if (r->m.run.dp == t->grid->dp) {
        rc = read_worker(t, r, e, plan, t->grid->dp_rank, box, &holders, &shared);
    } else {
        rc = mean_of_workers(t, r, e, plan, box, &holders, &shared);
    }
    c->shared += shared;
    /* a copy given the holder's: equal for a copy reducing an equal gradient; not for copies that sum
     * their gradients after the dp reduction (sharing_copies: engine/train/train.c sync_grads); the
     * outer reduction's copies are equal (local SGD aligns them to the holder's) */
    c->own += holders && !e->holder && !tri_state_group_is_outer_compression(e->group) && sharing_copies(t, p) > 1;
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
    if (!rc && c.shared > 0 && t->grid->dp_rank == 0)
        tri_log("checkpoint %s was saved at tp %d x pp %d: %d error-feedback residual(s) of this rank belong to copies "
                "that sum their gradients (the tied embedding, sequence-parallel replicated parameters, shared "
                "shards): each starts from the saved copies' sum shared by this run's copies", r->dir, s->tp, s->pp,
                c.shared);
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
                    "(%s), so this resume is not bit-identical to an uninterrupted run", r->dir, q_name[k],
                    c.fresh_q[k], plan.q[k][0] ? plan.q[k] : "not found for this rank's shard");
    return tri_comm_agree(t->grid->world, rc);
}
