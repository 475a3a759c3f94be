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
