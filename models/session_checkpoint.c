/* models/session_checkpoint.c - sessions to and from checkpoints (see session_checkpoint.h). */
#include "models/session_checkpoint.h"

#include <stdlib.h>
#include <string.h>

#include "engine/core/status.h"
#include "models/llama.h"

/* What a save records beyond the trainer: the model's config and parameter list, the run's settings.
 * *specs and *json are malloc'd for the caller to free. */
static int save_info(const tri_session *s, const tri_session_ckpt_run *run, int64_t iteration,
                     tri_ckpt_save_info *info, tri_param_spec **specs, char **json)
{
    const tri_model *m = s->model.model;
    int n = 0;
    *specs = NULL;
    *json = NULL;
    int rc = tri_model_all_specs(m, s->grid.tp, specs, &n);
    /* DeepSeek-V3's expert bias, when the run keeps it: its tensors after the parameters */
    const tri_llama_config *lc = tri_llama_config_of(m);
    if (!rc && lc && s->trainer.chunks[0]->run.moe.expert_bias)
        rc = tri_llama_moe_bias_specs(lc, specs, &n);
    if (!rc) rc = m->family->to_json(m->cfg, json);
    *info = (tri_ckpt_save_info){.config_json = *json, .model_name = m->name, .specs = *specs,
                                 .n_specs = n, .seed = run->seed, .lr = run->lr, .iteration = iteration,
                                 .keep_last = run->keep_last};
    return rc;
}

int tri_session_ckpt_save(tri_session *s, const char *save_dir, const tri_session_ckpt_run *run,
                          int64_t iteration)
{
    tri_param_spec *specs = NULL;
    char *json = NULL;
    tri_ckpt_save_info info;
    int rc = save_info(s, run, iteration, &info, &specs, &json);
    /* every rank computed the same inputs without communicating; a failure here is everyone's */
    if (!rc) rc = tri_ckpt_save(&s->trainer, save_dir, &info);
    free(specs);
    free(json);
    return rc;
}

int tri_session_ckpt_save_async(tri_session *s, tri_ckpt_async *saver, const char *save_dir,
                                const tri_session_ckpt_run *run, int64_t iteration, tri_ckpt_async_report *prev)
{
    tri_param_spec *specs = NULL;
    char *json = NULL;
    tri_ckpt_save_info info;
    int rc = save_info(s, run, iteration, &info, &specs, &json);
    if (!rc) rc = tri_ckpt_async_start(saver, save_dir, &info, prev); /* info is copied */
    free(specs);
    free(json);
    return rc;
}

/* "--local-sgd-steps H --outer-optimizer X" of a run (or "synchronous data parallelism"). */
static void local_text(const tri_local_sgd_config *c, char *out, size_t cap)
{
    if (c->steps > 0)
        snprintf(out, cap, "--local-sgd-steps %d --outer-optimizer %s", c->steps, tri_outer_kind_name(c->outer));
    else
        snprintf(out, cap, "synchronous data parallelism (no --local-sgd-steps)");
}

/* Local SGD on resume: the checkpoint's outer state continues only into the same H and outer
 * optimizer; another (or none on either side) is refused naming both, unless reset: then a local
 * SGD run starts its outer state from the loaded weights (*fresh) and a synchronous run drops it.
 * The outer lr and momentum are hyperparameters and may change. A step-0 checkpoint binds nothing. */
static int local_sgd_resume(const tri_ckpt_reader *r, const tri_ckpt_run *cur, bool reset, bool resumes, bool *fresh)
{
    const tri_local_sgd_config *a = &r->m.run.local, *b = &cur->local;
    bool same = a->steps == b->steps && (a->steps == 0 || a->outer == b->outer);
    *fresh = b->steps > 0 && (!same || reset || !resumes);
    if (same || reset || !resumes)
        return TRI_OK;
    char sa[96], sb[96];
    local_text(a, sa, sizeof sa);
    local_text(b, sb, sizeof sb);
    return TRI_ERR(TRI_EINVAL, "checkpoint %s was saved with %s; this run has %s (resume with the same, or pass "
                   "--reset-outer-state to start local SGD's outer state afresh from the loaded weights)", r->dir, sa,
                   sb);
}

/* The compressed dp reduction on resume: the checkpoint's error feedback continues only into the
 * same --grad-compression kind and --grad-compression-reduce (its options may change); another (or
 * none on either side) is refused naming both unless reset, which starts the residuals from zero and
 * draws PowerSGD's Q afresh. A step-0
 * checkpoint binds nothing; --no-load-optim counts as reset. Otherwise the state is read (*load,
 * tri_ckpt_load_compression) into any tp, pp and dp: at another dp each rank's residual is the saved
 * ranks' sum divided by the new dp. */
static int compression_resume(const tri_ckpt_reader *r, const tri_ckpt_run *cur, bool reset, bool resumes, bool *load)
{
    tri_compression_kind a = r->m.run.compression.kind, b = cur->compression.kind;
    *load = resumes && !reset && a == b && b != TRI_COMPRESS_NONE;
    tri_compression_reduce ra = r->m.run.compression.reduce, rb = cur->compression.reduce;
    if (*load && ra != rb) /* the residuals mean other things (and the server's exist only with two-phase) */
        return TRI_ERR(TRI_EINVAL, "checkpoint %s was saved with --grad-compression %s --grad-compression-reduce %s; "
                       "this run has --grad-compression %s --grad-compression-reduce %s (resume with the same, or pass "
                       "--reset-compression-state to start the compression state from zero)", r->dir,
                       tri_compression_name(a), tri_compression_reduce_name(ra), tri_compression_name(b),
                       tri_compression_reduce_name(rb));
    if (a == b || reset || !resumes)
        return TRI_OK;
    return TRI_ERR(TRI_EINVAL, "checkpoint %s was saved with --grad-compression %s; this run has --grad-compression "
                   "%s (resume with the same, or pass --reset-compression-state to start the compression state "
                   "from zero)", r->dir, tri_compression_name(a), tri_compression_name(b));
}

/* The first expert-bias tensor (model.layers.N.mlp.gate.e_score_correction_bias) the checkpoint holds, or
 * NULL. */
const char *tri_session_ckpt_expert_bias(const tri_ckpt_manifest *m)
{
    static const char tail[] = ".mlp.gate.e_score_correction_bias";
    size_t t = sizeof tail - 1;
    for (int i = 0; i < m->n_tensors; i++) {
        size_t k = strlen(m->tensors[i].name);
        if (k > t && strcmp(m->tensors[i].name + k - t, tail) == 0)
            return m->tensors[i].name;
    }
    return NULL;
}

/* A checkpoint with an expert bias resumes only into a run that keeps one (else the selection would
 * silently change); one without it starts the bias from zero (load.c). */
static int expert_bias_resume(const tri_ckpt_reader *r, const tri_session *s)
{
    const char *name = tri_session_ckpt_expert_bias(&r->m);
    if (!name || s->trainer.chunks[0]->run.moe.expert_bias)
        return TRI_OK;
    return TRI_ERR(TRI_EINVAL, "checkpoint %s holds DeepSeek-V3's expert bias (%s): resume it with "
                   "--moe-router-enable-expert-bias, which this run does not have", r->dir, name);
}

int tri_session_ckpt_resume(tri_session *s, const char *path, tri_session_ckpt_run *run, int64_t *iteration)
{
    const tri_model *m = s->model.model;
    tri_ckpt_reader r;
    char *json = NULL;
    tri_ckpt_run cur;
    tri_ckpt_run_of(&s->trainer, run->seed, &run->lr, &cur);
    int rc = tri_ckpt_reader_open(&r, path);
    bool open = rc == TRI_OK;
    if (!rc) rc = m->family->to_json(m->cfg, &json);
    if (!rc) rc = tri_ckpt_check_config(&r.m, json, r.dir);
    /* a step-0 checkpoint (imported weights) starts a new run: its run settings do not bind */
    bool resumes = !rc && (r.m.iteration > 0 || r.m.optimizer_step > 0);
    if (resumes)
        rc = tri_ckpt_check_resume(&r.m, &cur, run->lr_source, run->no_load_optim, r.dir);
    if (resumes && !rc && run->lr_source == TRI_LR_CHECKPOINT)
        run->lr = r.m.run.lr;
    bool fresh = false; /* local SGD's outer state starts from the loaded weights */
    if (!rc) rc = local_sgd_resume(&r, &cur, run->reset_outer_state, resumes, &fresh);
    bool ef = false; /* the error feedback is read */
    if (!rc) rc = compression_resume(&r, &cur, run->reset_compression_state || run->no_load_optim, resumes, &ef);
    if (!rc) rc = expert_bias_resume(&r, s);
    rc = tri_comm_agree(s->grid.world, rc);
    if (!rc) rc = tri_ckpt_load(&s->trainer, &r, run->no_load_optim);
    for (int c = 0; c < s->trainer.v && !rc; c++)
        tri_dp_compress_reset(&s->trainer.chunks[c]->zero.comp); /* from zero unless read below */
    if (!rc && ef)
        rc = tri_ckpt_load_compression(&s->trainer, &r);
    if (!rc && cur.local.steps > 0)
        rc = fresh ? tri_trainer_outer_reset(&s->trainer) : tri_ckpt_load_local(&s->trainer, &r);
    if (!rc)
        *iteration = r.m.iteration;
    free(json);
    if (open)
        tri_ckpt_reader_close(&r);
    return rc;
}
