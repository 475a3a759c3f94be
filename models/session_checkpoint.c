/* models/session_checkpoint.c - sessions to and from checkpoints (see session_checkpoint.h). */
#include "models/session_checkpoint.h"

#include <stdlib.h>
#include <string.h>

#include "engine/core/status.h"

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
    rc = tri_comm_agree(s->grid.world, rc);
    if (!rc) rc = tri_ckpt_load(&s->trainer, &r, run->no_load_optim);
    if (!rc)
        *iteration = r.m.iteration;
    free(json);
    if (open)
        tri_ckpt_reader_close(&r);
    return rc;
}
