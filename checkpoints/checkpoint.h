/* checkpoints/checkpoint.h - saving a trainer's state atomically and loading it into any layout.
 *
 * On-disk layout (DESIGN.md §8), under a run directory SAVE_DIR:
 *
 *   SAVE_DIR/latest                          "iter_0000100\n": the newest complete step
 *   SAVE_DIR/iter_0000100/manifest.json      metadata, tensors, files (checkpoints/manifest.h)
 *   SAVE_DIR/iter_0000100/manifest.sha256    the manifest's SHA-256 (sha256sum format)
 *   SAVE_DIR/iter_0000100/model_tp00_pp00.h5 the weights of tensor-parallel rank 0, pipeline rank 0
 *   SAVE_DIR/iter_0000100/optim_tp00_pp00_dp000.h5  the ZeRO optimizer shard of one rank
 *   SAVE_DIR/iter_0000100/index.h5           HDF5 virtual datasets: the full weight tensors
 *
 * Model files hold one float32 dataset per parameter, named by its global name (wte, h.3.attn.
 * c_attn.w, ...), the TP shard clipped to the logical shape (wte keeps the real vocabulary rows),
 * with attributes global_shape and global_offset; replicated parameters are stored once (TP rank
 * 0) and the last stage's tied copy of wte not at all. Optimizer files hold exp_avg/<name> and
 * exp_avg_sq/<name>: the flat range of the TP shard the rank owns under ZeRO, with attributes
 * global_shape, shard_offset, shard_shape and local_range. At ZeRO 0 every data-parallel rank
 * owns everything and only dp rank 0 writes. The fp32 master weights are the model weights.
 * Under context parallelism (cp > 1) the cp ranks of a (tp, dp, pp) coordinate hold the same parameters
 * and ZeRO shards over dp x cp, so "dp" above is the rank in dp x cp, cp_rank + cp dp_rank (the layout's
 * rank; dp_rank at cp 1): its rank 0 writes the model files, each ZeRO shard its optimizer file, and the
 * manifest records context_parallel_size. Loading reads boxes, so any cp resumes any checkpoint.
 *
 * A save writes SAVE_DIR/iter_N.tmp, fsyncs every file, writes the manifest last, renames the
 * directory into place and only then replaces `latest`; --keep-last K removes older steps after
 * that. A process killed at any moment leaves `latest` naming a complete step. The steps of a save
 * (checkpoints/save_steps.h) are shared with the asynchronous save (checkpoints/async_save.h), which
 * blocks training only for the copy to host memory (checkpoints/snapshot.h). */
#ifndef TRIDENT_CHECKPOINTS_CHECKPOINT_H
#define TRIDENT_CHECKPOINTS_CHECKPOINT_H

#include "checkpoints/manifest.h"
#include "checkpoints/reader.h"
#include "engine/train/state_shards.h"
#include "engine/train/train.h"

/* The dataset groups of checkpoint m's tensors, by its optimizer: groups[0] NULL (the weights), then
 * exp_avg and exp_avg_sq (AdamW, LAMB) or momentum_buffer (SGD, LARS). Returns how many (3 or 2). */
int tri_ckpt_state_groups(const tri_ckpt_manifest *m, const char *groups[3]);

/* What the caller knows that the trainer does not. */
typedef struct tri_ckpt_save_info {
    const char *config_json;        /* the model config as JSON (models/config.h) */
    const char *model_name;
    const tri_param_spec *specs;    /* every parameter of the whole model, in global order */
    int n_specs;
    uint64_t seed;
    tri_lr_schedule lr;
    int64_t iteration;              /* updates done */
    int keep_last;                  /* > 0: keep this many steps (the new one included) */
    tri_ckpt_progress_fn progress;  /* optional, rank 0: files written */
    void *progress_ctx;
} tri_ckpt_save_info;

/* Saves the trainer's weights and optimizer state as step `iteration` of save_dir. Collective
 * over the trainer's world (every rank calls it; the data-parallel peers of a stage read its
 * parameters together). Every rank returns the same verdict; the failing rank's message names
 * the file. */
int tri_ckpt_save(tri_trainer *t, const char *save_dir, const tri_ckpt_save_info *info);

/* The run settings of the trainer as a checkpoint records them. */
void tri_ckpt_run_of(const tri_trainer *t, uint64_t seed, const tri_lr_schedule *lr, tri_ckpt_run *run);

/* Where a resumed run's learning-rate schedule (peak and minimum lr, warm-up and decay iterations,
 * decay style) comes from: Megatron-LM's --use-checkpoint-opt_param-scheduler and
 * --override-opt_param-scheduler. By default a changed schedule is refused, never taken silently. */
typedef enum tri_lr_source {
    TRI_LR_SAME = 0,        /* the run's flags, which must equal the checkpoint's */
    TRI_LR_CHECKPOINT,      /* the checkpoint's, whatever the flags say */
    TRI_LR_FLAGS,           /* the run's flags, whatever the checkpoint says */
} tri_lr_source;

/* Refuses to resume run `cur` from a checkpoint of run `saved` when they disagree on what fixes
 * the continuation: seed, global batch, sequence length, the LR schedule (only with TRI_LR_SAME),
 * the optimizer (--optimizer, named both ways) and its settings, clipping (TRI_EINVAL naming the field
 * and both values; the layout may differ). fresh_optim (--no-load-optim): the optimizer and its
 * settings may differ, its state is not loaded. */
int tri_ckpt_check_resume(const tri_ckpt_manifest *saved, const tri_ckpt_run *cur, tri_lr_source lr_source,
                          bool fresh_optim, const char *dir);

/* Refuses a checkpoint of another model: its config object must equal config_json (same keys and
 * values). TRI_EINVAL naming the first differing key and both values. */
int tri_ckpt_check_config(const tri_ckpt_manifest *saved, const char *config_json, const char *dir);

/* Loads weights and optimizer state (only the weights with weights_only: the optimizer starts
 * fresh at step 0) from an open reader into the trainer, whatever layout wrote them; sets the
 * optimizers' step. Every tensor's logical shape must match the model's.
 * Collective over the world only to agree on the verdict (every rank returns the same status). */
int tri_ckpt_load(tri_trainer *t, tri_ckpt_reader *r, bool weights_only);

/* Local SGD's state (engine/train/local_sgd.h) after tri_ckpt_load, from a checkpoint saved with
 * the same --local-sgd-steps and outer optimizer (the caller checks): the outer anchor and momentum
 * resharded to any layout; each replica's own weights and AdamW moments when dp is the checkpoint's
 * (tp, pp may differ). With another dp, a checkpoint saved at a synchronisation gives every replica
 * replica 0's state (tri_ckpt_load's: its weights are the anchor); one saved in the middle of a
 * window is refused (TRI_EINVAL naming both dp), since replicas cannot be split or merged. Sets the
 * trainer's synchronisation count. Collective over the world for the verdict. */
int tri_ckpt_load_local(tri_trainer *t, tri_ckpt_reader *r);

/* The compressed dp reduction's state (engine/train/dp_compress.h) after tri_ckpt_load, from a
 * checkpoint saved with the same --grad-compression kind and --grad-compression-reduce (its options
 * may differ; TRI_EINVAL naming both otherwise), into any layout. The holder of each TP shard reads
 * its residual (error_feedback) resharded from any tp and pp; every other copy (error_feedback_copy,
 * and with two-phase server_error_feedback_copy: sequence-parallel replicated parameters at tp > 1,
 * shared shards, the tied embedding's copy at pp > 1, whose gradients are summed after the dp
 * reduction) from the files of this rank's own (tp, pp). At another tp or pp the copies whose
 * gradients are summed each start from all saved copies' sum shared by this run's copies, the
 * others from the holder's. At
 * the checkpoint's dp each dp rank reads its own residuals; at another each starts from the saving
 * ranks' sum divided by the new dp (what the average gradient still owes). Two-phase's server
 * residual is merged from every saving dp rank's file and cut by this run's chunks. PowerSGD's Q
 * (powersgd_q, and under local SGD outer_powersgd_q, from dp rank 0's files) is read from the file
 * of whichever pipeline rank saved the matrix, and at another tp resharded from every saving TP
 * rank's (engine/train/powersgd_q.h); only with the same --powersgd-rank. Whatever a checkpoint
 * does not hold (its manifest says so: an older one) falls back, a copy to the holder's residual and
 * Q to a fresh draw, each with a warning naming why (such a resume is not bit-identical).
 * Collective over the world; every rank gets the same status. */
int tri_ckpt_load_compression(tri_trainer *t, tri_ckpt_reader *r);

/* The box of parameter p's TP shard in its global index space (vocabulary padding included). */
tri_box tri_ckpt_shard_box(const tri_param *p);

/* Logical global shape of a parameter: its shape with the vocabulary padding rows left out. */
void tri_ckpt_logical_shape(const tri_param_spec *s, int64_t *shape);

/* Writes the virtual-dataset index (TRI_CKPT_INDEX) of the model files listed in m into dir. */
int tri_ckpt_write_index(const tri_ckpt_manifest *m, const char *dir);

#endif
