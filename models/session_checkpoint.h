/* models/session_checkpoint.h - saving and resuming a training session (models/session.h) of any
 * model family: the glue between the model (its family's config JSON and parameter list,
 * models/model.h) and the model-agnostic checkpoints/ library, shared by engine_train, the ckpt tool
 * and the tests. */
#ifndef TRIDENT_MODELS_SESSION_CHECKPOINT_H
#define TRIDENT_MODELS_SESSION_CHECKPOINT_H

#include "checkpoints/async_save.h"
#include "checkpoints/checkpoint.h"
#include "models/model.h"
#include "models/session.h"

/* What identifies the run beyond the session: seed and learning-rate schedule. */
typedef struct tri_session_ckpt_run {
    uint64_t seed;
    tri_lr_schedule lr;              /* on resume with TRI_LR_CHECKPOINT: set to the checkpoint's */
    tri_lr_source lr_source;         /* on resume: where the schedule comes from (checkpoint.h) */
    int keep_last;                   /* --keep-last: steps kept after a save (0: all) */
    bool reset_outer_state;          /* on resume: local SGD's outer state afresh (--reset-outer-state) */
    bool reset_compression_state;    /* on resume: the error feedback from zero and PowerSGD's Q
                                        drawn afresh, and another --grad-compression than the
                                        checkpoint's accepted (--reset-compression-state) */
    bool no_load_optim;              /* on resume: load the weights only, the optimizer starts fresh
                                        (--no-load-optim; then another --optimizer may resume) */
} tri_session_ckpt_run;

/* Saves the session as step `iteration` of save_dir (collective over the session's world). */
int tri_session_ckpt_save(tri_session *s, const char *save_dir, const tri_session_ckpt_run *run,
                          int64_t iteration);

/* The same, asynchronously (checkpoints/async_save.h): collective; returns once this rank's part is
 * copied to host memory, after waiting for the save still in flight (*prev reports it). */
int tri_session_ckpt_save_async(tri_session *s, tri_ckpt_async *saver, const char *save_dir,
                                const tri_session_ckpt_run *run, int64_t iteration, tri_ckpt_async_report *prev);

/* Loads `path` (a step directory, or a run directory's latest step) into the session, whatever
 * layout wrote it, after refusing another model's checkpoint or one whose seed, batch, sequence
 * length, AdamW settings or (with run->lr_source TRI_LR_SAME) LR schedule differ from this run's
 * (except at step 0: imported weights start a new run with any settings). With TRI_LR_CHECKPOINT
 * run->lr becomes the checkpoint's schedule. *iteration = the updates the checkpoint had done (the
 * next iteration's index). Collective: every rank returns the same status. */
/* The name of the first expert-bias tensor (model.layers.N.mlp.gate.e_score_correction_bias) in a
 * checkpoint's manifest, or NULL: a run that resumes or reshards it keeps the bias. */
const char *tri_session_ckpt_expert_bias(const tri_ckpt_manifest *m);

int tri_session_ckpt_resume(tri_session *s, const char *path, tri_session_ckpt_run *run, int64_t *iteration);

#endif
