/* tools/cli/layout_flags.h - the layout flags engine_train, the partitioner and the benches share.
 *
 * One set of names (Megatron-LM's), ranges and help, read into one tri_layout_request and resolved
 * by one function (partitioner/constraints.h) into the run's tri_train_layout
 * (engine/train/train_layout.h): the CLIs refuse an impossible layout with the same message, naming the
 * flag, the value and the nearest valid values. */
#ifndef TRIDENT_TOOLS_CLI_LAYOUT_FLAGS_H
#define TRIDENT_TOOLS_CLI_LAYOUT_FLAGS_H

#include <stdbool.h>

#include "models/model.h"
#include "partitioner/constraints.h"
#include "tools/cli/flags.h"

#define TRI_CLI_LAYOUT_FLAGS 28 /* flags tri_cli_layout_flags adds */

/* What the layout flags write: the request, and the flags whose text becomes an enum. */
typedef struct tri_cli_layout {
    tri_layout_request req;   /* num_gpus is the caller's (--num-gpus, or the world size) */
    const char *schedule;     /* --pipeline-schedule */
    const char *recompute;    /* --recompute-granularity */
    const char *attention;    /* --attention-backend: auto, flash or unfused */
    const char *cp_comm_type; /* --cp-comm-type: p2p (default) or all_gather */
    bool bf16;                /* --bf16 */
    float moe_aux_loss_coeff; /* --moe-aux-loss-coeff (< 0: the config's router_aux_loss_coef x top-k) */
    float moe_z_loss_coeff, moe_capacity_factor; /* --moe-z-loss-coeff, --moe-expert-capacity-factor (0: dropless) */
    const char *moe_drop_policy, *moe_score_function; /* --moe-token-drop-policy, --moe-router-score-function */
    bool moe_expert_bias;     /* --moe-router-enable-expert-bias */
    float moe_bias_rate;      /* --moe-router-bias-update-rate (1e-3) */
    bool gpu;                 /* the caller's: the run's device is a GPU (engine_train --device cuda, a
                                 GPU preset), where --attention-backend auto picks the measured path */
} tri_cli_layout;

/* Defaults: tp = cp = pp = ep = etp = 1 (--cp-comm-type p2p), micro-batch 4, sequence 64, global batch 0 (one micro-batch per replica),
 * ZeRO 0, 1f1b, no recomputation, fp32, balanced stages. A CLI may change them before parsing. */
void tri_cli_layout_defaults(tri_cli_layout *l);

/* Appends the layout flags, bound to l, to f (n flags so far); returns the new count. */
int tri_cli_layout_flags(tri_cli_layout *l, tri_flag *f, int n);

/* Resolves the parsed flags for num_gpus ranks of model m into *out (partitioner/constraints.h):
 * TRI_EINVAL with the rule's message. f (nf flags) tells whether --pipeline-schedule was given (else
 * the schedule follows --num-layers-per-virtual-pipeline-stage). --attention-backend auto resolves
 * with tri_cli_attention_auto, and to the fused core with --context-parallel-size > 1 (the only one
 * that merges key/value blocks). */
int tri_cli_layout_resolve(tri_cli_layout *l, const tri_flag *f, int nf, int num_gpus, const tri_transformer *m,
                           tri_train_layout *out);

/* What --attention-backend auto (the default) runs: on a GPU the unfused core, the path measured
 * fastest there (GPT-2 124M bf16 at 35.3 ms/iter on an H200, 2026-11-27: docs/cuda-correctness.md;
 * the tiled tensor-core attention has run only in the emulated build since), unless the model has
 * the fused core only (m->fused_attention_only: Llama); on the CPU the fused core (FlashAttention-2's
 * tiles through sgemm, memory linear in T). */
tri_attention_backend tri_cli_attention_auto(bool gpu, const tri_transformer *m);

/* For code that sets its layout itself (the benches, the checkpoint tool, tests): request r,
 * first_layers / last_layers -1 unless set, resolved for model m by the same validator. */
int tri_cli_model_layout(const tri_model *m, tri_layout_request r, tri_train_layout *out);

#endif
