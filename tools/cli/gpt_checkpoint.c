/* tools/cli/gpt_checkpoint.c - GPT sessions to and from checkpoints (see gpt_checkpoint.h). */
#include "tools/cli/gpt_checkpoint.h"

#include <stdlib.h>
#include <string.h>

#include "engine/status.h"
#include "models/gpt.h"

/* What a save records beyond the trainer: the model's config and parameter list, the run's settings.
 * *specs and *json are malloc'd for the caller to free. */
static int save_info(const tri_gpt_session *s, const tri_gpt_config *cfg, const tri_gpt_ckpt_run *run,
                     int64_t iteration, tri_ckpt_save_info *info, tri_param_spec **specs, char **json)
{
    int n = 0;
    *specs = NULL;
    *json = NULL;
    int rc = tri_gpt_all_param_specs(cfg, s->grid.tp, specs, &n);
    if (!rc) rc = tri_gpt_config_to_json(cfg, json);
    *info = (tri_ckpt_save_info){.config_json = *json, .model_name = cfg->name, .specs = *specs, .n_specs = n,
                                 .seed = run->seed, .lr = run->lr, .iteration = iteration,
                                 .keep_last = run->keep_last};
    return rc;
}

int tri_gpt_ckpt_save(tri_gpt_session *s, const tri_gpt_config *cfg, const char *save_dir,
                      const tri_gpt_ckpt_run *run, int64_t iteration)
{
    tri_param_spec *specs = NULL;
    char *json = NULL;
    tri_ckpt_save_info info;
    int rc = save_info(s, cfg, run, iteration, &info, &specs, &json);
    /* every rank computed the same inputs without communicating; a failure here is everyone's */
    if (!rc) rc = tri_ckpt_save(&s->trainer, save_dir, &info);
    free(specs);
    free(json);
    return rc;
}

int tri_gpt_ckpt_save_async(tri_gpt_session *s, tri_ckpt_async *saver, const tri_gpt_config *cfg,
                            const char *save_dir, const tri_gpt_ckpt_run *run, int64_t iteration,
                            tri_ckpt_async_report *prev)
{
    tri_param_spec *specs = NULL;
    char *json = NULL;
    tri_ckpt_save_info info;
    int rc = save_info(s, cfg, run, iteration, &info, &specs, &json);
    if (!rc) rc = tri_ckpt_async_start(saver, save_dir, &info, prev); /* info is copied */
    free(specs);
    free(json);
    return rc;
}

int tri_gpt_ckpt_resume(tri_gpt_session *s, const tri_gpt_config *cfg, const char *path,
                        tri_gpt_ckpt_run *run, int64_t *iteration)
{
    tri_ckpt_reader r;
    char *json = NULL;
    tri_ckpt_run cur;
    tri_ckpt_run_of(&s->trainer, run->seed, &run->lr, &cur);
    int rc = tri_ckpt_reader_open(&r, path);
    bool open = rc == TRI_OK;
    if (!rc) rc = tri_gpt_config_to_json(cfg, &json);
    if (!rc) rc = tri_ckpt_check_config(&r.m, json, r.dir);
    /* a step-0 checkpoint (imported weights) starts a new run: its run settings do not bind */
    bool resumes = !rc && (r.m.iteration > 0 || r.m.optimizer_step > 0);
    if (resumes)
        rc = tri_ckpt_check_resume(&r.m, &cur, run->lr_source, r.dir);
    if (resumes && !rc && run->lr_source == TRI_LR_CHECKPOINT)
        run->lr = r.m.run.lr;
    rc = tri_comm_agree(s->grid.world, rc);
    if (!rc) rc = tri_ckpt_load(&s->trainer, &r);
    if (!rc)
        *iteration = r.m.iteration;
    free(json);
    if (open)
        tri_ckpt_reader_close(&r);
    return rc;
}
