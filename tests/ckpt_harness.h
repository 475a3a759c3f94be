/* tests/ckpt_harness.h - a small GPT trained on thread ranks in any layout, from its initial
 * weights or from a checkpoint, saving checkpoints on the way: what the checkpoint tests resume,
 * corrupt and kill. */
#ifndef TRIDENT_TESTS_CKPT_HARNESS_H
#define TRIDENT_TESTS_CKPT_HARNESS_H

#include <stdint.h>

#include "checkpoints/reader.h"
#include "tests/harness.h"

#define TU_CKPT_TOTAL 20 /* the LR schedule's decay length: every run belongs to one 20-step run */

typedef struct tu_ckpt_run {
    const tri_gpt_config *cfg;
    const tri_model *model;       /* another family's model (NULL: the GPT of cfg) */
    int64_t B, T;                 /* micro-batch size, sequence length */
    tu_layout layout;             /* n_micro is derived: global batch / (B * dp); ranks tp x cp x pp x dp */
    int64_t global_batch;
    const int32_t *windows;       /* (TU_CKPT_TOTAL * global_batch, T + 1) token windows */
    uint64_t seed;                /* 0: 1234 */
    const char *load;             /* NULL: start from the initial weights; else a run or step dir */
    int64_t until;                /* train up to this iteration (total); a load with until at its
                                     iteration and a save_dir saves it again at once (a reshard) */
    const char *save_dir;         /* NULL: no checkpoints */
    int save_interval;            /* save at multiples of it and at `until` (0: only at `until`) */
    int keep_last;
    bool async_save;              /* --async-save: background saves, polled every step, waited at the end */
    bool reset_outer_state;       /* --reset-outer-state (local SGD: layout.local) */
    bool reset_compression_state; /* --reset-compression-state (layout.compression) */
    bool no_load_optim;           /* --no-load-optim: resume the weights only */
    /* results */
    int64_t start;                /* the first iteration run (0, or the checkpoint's) */
    double losses[TU_MAX_STEPS];  /* losses[k]: loss of iteration start + k + 1 */
} tu_ckpt_run;

/* Runs r on thread ranks; a status (the failing rank's message via tri_error_message). */
int tu_ckpt_train(tu_ckpt_run *r);

/* A fresh empty directory under TMPDIR (or /tmp) named after tag; caller frees the string. */
char *tu_ckpt_tmpdir(const char *tag);

/* The whole tensor `name` of group (NULL: the weights) from checkpoint dir's files of `kind` (dp
 * rank dp; -1: any), malloc'd, its element count in *n; NULL with the reader's error otherwise. */
float *tu_ckpt_tensor(const char *dir, tri_ckpt_file_kind kind, int dp, const char *group, const char *name,
                      int64_t *n);

#endif
