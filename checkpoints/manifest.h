/* checkpoints/manifest.h - a checkpoint step's manifest: what was saved and how to verify it.
 *
 * One JSON file per step (manifest.json) holds the metadata (model config, layout, iteration,
 * consumed samples, seed, LR schedule, AdamW settings, format version), the logical global shape
 * of every tensor, and every file of the step with its size, SHA-256 and the pieces it stores
 * (which tensor, which box of its global index space, which flat range of that box). Beside it,
 * manifest.sha256 holds the manifest's own SHA-256 in sha256sum's format, so `sha256sum -c
 * manifest.sha256` works and a reader can verify the manifest before parsing it. With the
 * manifest a reader finds every piece it needs without opening any HDF5 file, and verifies only
 * the files it reads. */
#ifndef TRIDENT_CHECKPOINTS_MANIFEST_H
#define TRIDENT_CHECKPOINTS_MANIFEST_H

#include <stdbool.h>
#include <stdint.h>

#include "checkpoints/box.h"
#include "checkpoints/sha256.h"
#include "engine/train/grad_compression.h"
#include "engine/train/local_sgd.h"
#include "engine/train/optimizer.h"
#include "engine/train/param.h"

#define TRI_CKPT_FORMAT "trident-checkpoint"
#define TRI_CKPT_FORMAT_VERSION 1
#define TRI_CKPT_VERSION "0.1.0"       /* Trident's version written into checkpoints */
#define TRI_CKPT_MANIFEST "manifest.json"
#define TRI_CKPT_MANIFEST_SUM "manifest.sha256"
#define TRI_CKPT_INDEX "index.h5"
#define TRI_CKPT_MANIFEST_MAX (64u << 20) /* bytes: a larger manifest is refused unparsed */
#define TRI_CKPT_NAME_MAX 132

/* Local SGD (engine/train/local_sgd.h) adds two kinds, written by every data-parallel rank: "outer"
 * (outer_anchor/ and outer_momentum/ over the rank's outer slices, resharded like moments) and
 * "replica" (replica_weights/, replica_exp_avg/, replica_exp_avg_sq/: the whole TP shard as that
 * replica holds it; read back by the same dp rank). A compressed dp reduction (--grad-compression)
 * writes "replica" files too, holding error_feedback/ (each dp rank's residual, the whole TP shard),
 * error_feedback_copy/ (the residual of each copy this rank holds that is not the stored one: read
 * back by the same (tp, pp) rank only), with two-phase server_error_feedback/ and
 * server_error_feedback_copy/ beside them, and, under PowerSGD, powersgd_q/ (each matrix's Q^T,
 * rank x cols of the local shard, in dp rank 0's file: read back by any dp rank, at any pp from the
 * file of the stage that saved the matrix, at another tp resharded; under local SGD
 * outer_powersgd_q/ too). */
typedef enum {
    TRI_CKPT_MODEL = 0, TRI_CKPT_OPTIM = 1, TRI_CKPT_OTHER = 2, TRI_CKPT_OUTER = 3, TRI_CKPT_REPLICA = 4
} tri_ckpt_file_kind;

/* One stored dataset. Model files: `box` is the stored part of a TP shard (clipped to the logical
 * shape), lo = 0, hi = its elements. Optimizer files: `box` is the whole TP shard (as the saving
 * rank held it, vocabulary padding included) and [lo, hi) the flat range of it that the rank
 * owned under ZeRO; elements outside the logical shape are zero and skipped on load. */
typedef struct tri_ckpt_piece {
    int tensor;                  /* index into the manifest's tensors */
    tri_box box;
    int64_t lo, hi;
} tri_ckpt_piece;

typedef struct tri_ckpt_file {
    char name[TRI_CKPT_NAME_MAX];
    tri_ckpt_file_kind kind;
    int tp_rank, pp_rank, dp_rank;  /* the saving coordinates (dp_rank -1 for model files) */
    int64_t bytes;
    char sha256[TRI_SHA256_HEX];
    int n_pieces;
    tri_ckpt_piece *pieces;
} tri_ckpt_file;

typedef struct tri_ckpt_tensor {
    char name[TRI_PARAM_NAME_MAX];  /* the global parameter name (engine/train/param.h) */
    int ndim;
    int64_t shape[TRI_MAX_DIMS];    /* logical global shape: wte has the real vocabulary rows */
} tri_ckpt_tensor;

/* The run a checkpoint belongs to: what a resumed run must agree with, and the saving layout. */
typedef struct tri_ckpt_run {
    int tp, pp, dp, zero_stage, v;  /* layout; v = model chunks per pipeline rank */
    int ep;                         /* --expert-model-parallel-size (layout's "expert_model_parallel_size",
                                       written only when > 1; absent, as in every older checkpoint: 1) */
    int etp;                        /* --expert-tensor-parallel-size (layout's "expert_tensor_parallel_size",
                                       written only when > 1; absent, as in every older checkpoint: 1) */
    int cp;                         /* --context-parallel-size (layout's "context_parallel_size", written only
                                       when > 1; absent, as in every older checkpoint: 1). The files' dp
                                       index is the rank in dp x cp (cp_rank + cp dp_rank): the cp ranks are
                                       replicas of the parameters and ZeRO shards over dp x cp */
    char schedule[32];
    bool sequence_parallel;
    bool deterministic;             /* exact fixed-point sums: bit-identical across pp, dp, ZeRO */
    int64_t micro_batch, global_batch, seq_length;
    uint64_t seed;                  /* initialisation and data order are pure functions of it */
    tri_lr_schedule lr;
    tri_adamw_config adamw;
    float clip_grad;
    tri_local_sgd_config local;     /* local SGD (steps 0: none; final_iter not recorded) */
    tri_compression compression;    /* --grad-compression and its options (kind none: none or dp 1;
                                       seed not recorded: it is the run's) */
} tri_ckpt_run;

typedef struct tri_ckpt_manifest {
    int format_version;
    char trident_version[32];
    char *config_json;              /* the model config as a JSON object (models/config.h keys) */
    char model_name[128];
    tri_ckpt_run run;
    int64_t iteration;              /* optimizer updates done = the next iteration's index */
    int64_t consumed_samples;       /* iteration x global batch: the data position */
    int64_t optimizer_step;         /* AdamW's step count (bias correction) */
    int64_t outer_syncs;            /* local SGD: outer synchronisations done */
    bool replicas_equal;            /* local SGD: saved at a synchronisation (every replica's weights
                                       are the anchor; their AdamW moments still differ) */
    bool residual_copies;           /* compression: every copy's own error-feedback residual is held
                                       (error_feedback_copy, and with two-phase
                                       server_error_feedback_copy, which older two-phase checkpoints
                                       lack: then the copy falls back; false in older checkpoints) */
    bool powersgd_q;                /* powersgd: each matrix's Q is held (powersgd_q; false in older
                                       checkpoints, whose resumes draw it afresh) */
    bool outer_powersgd_q;          /* powersgd under local SGD: the outer reduction's Q is held too
                                       (outer_powersgd_q; false in older checkpoints) */
    int n_tensors;
    tri_ckpt_tensor *tensors;       /* in the model's global order */
    int n_files;
    tri_ckpt_file *files;
} tri_ckpt_manifest;

/* Renders the manifest as JSON (malloc'd text). */
int tri_manifest_render(const tri_ckpt_manifest *m, char **json);

/* Parses and validates manifest JSON (every field typed and in range, names safe, pieces inside
 * their tensors). `source` names it in messages. TRI_ECORRUPT / TRI_EINVAL naming the field. */
int tri_manifest_parse(tri_ckpt_manifest *m, const char *json, const char *source);

/* Writes dir/manifest.json and dir/manifest.sha256 (fsynced). */
int tri_manifest_write(const tri_ckpt_manifest *m, const char *dir);

/* Reads dir/manifest.sha256, verifies dir/manifest.json against it, then parses it. A missing,
 * truncated or altered manifest is TRI_ECORRUPT naming the file. */
int tri_manifest_read(tri_ckpt_manifest *m, const char *dir);

void tri_manifest_free(tri_ckpt_manifest *m);

/* The tensor called name (-1 when absent). */
int tri_manifest_tensor(const tri_ckpt_manifest *m, const char *name);

/* Appends a file entry (pieces copied); returns its index or a negative status. */
int tri_manifest_add_file(tri_ckpt_manifest *m, const tri_ckpt_file *f);

/* Name of a LR style / kind ("cosine", "model"...). */
const char *tri_ckpt_lr_style_name(tri_lr_style s);

#endif
