/* tests/moe_layouts.h - what the MoE layout suites share (test_moe_ep_layouts, test_moe_tp,
 * test_moe_shared_tp, test_moe_etp_layouts): the tiny Mixtral they train (4 layers of hidden 64, 4
 * experts of width 64, top-2, the auxiliary loss on, vocabulary 100), its run of STEPS AdamW steps of
 * GLOBAL sequences of T tokens under a layout, and the two comparisons every suite makes of a layout's
 * run against a reference run: the largest differences (the caller holds them to its derived bounds,
 * naming the tensor), and bit-identity (deterministic mode). */
#ifndef TRIDENT_TESTS_MOE_LAYOUTS_H
#define TRIDENT_TESTS_MOE_LAYOUTS_H

#include <stdbool.h>
#include <stddef.h>

#include "models/model.h"
#include "tests/ckpt_harness.h"
#include "tests/harness.h"

enum { TU_MOE_B = 1, TU_MOE_T = 8, TU_MOE_GLOBAL = 8, TU_MOE_STEPS = 4, TU_MOE_VOCAB = 100 };

typedef struct tu_named_layout {
    const char *name;
    tu_layout l;
} tu_named_layout;

/* Parses the tiny Mixtral into m; `extra` ("" or ", \"key\": value, ...") adds config keys. */
int tu_moe_tiny(tri_model *m, const char *extra);

/* Trains m for TU_MOE_STEPS steps under l (n_micro defaults to GLOBAL / (B dp)) on windows w. */
int tu_moe_run(const tri_model *m, const tu_layout *l, tu_result *r, const int32_t *w);

/* The elements of tensor i compared: the vocabulary's 100 rows of the (padded) embedding and head. */
int64_t tu_moe_compared(const tu_result *r, int i);

/* A checkpointed run of m under l (tests/ckpt_harness.h) with the suites' B, T and global batch. */
tu_ckpt_run tu_moe_ckpt_run(const tri_model *m, const int32_t *w, tu_layout l, int64_t until, const char *load,
                            const char *save);

/* A checkpoint's resume: resumed ran iterations 4-6 from a checkpoint saved after iteration 3, full
 * the same 6 iterations uninterrupted; the largest relative difference of their losses (with
 * TRIDENT_TEST_VERBOSE printed under name). */
double tu_moe_resume_diff(const char *name, const tu_ckpt_run *resumed, const tu_ckpt_run *full);

/* got against ref (the same tensors in the same order: TRI_EINVAL naming the first mismatch
 * otherwise): relative differences (tu_tensor_rel) of the first pass's loss and gradient norm, the
 * largest of any gradient and final weight and of the step losses, and the largest final weight's
 * drift as a fraction of AdamW's bound (tu_adamw_drift_ratio at lr 1e-3, betas 0.9 / 0.95), each with
 * the tensor it came from. */
typedef struct tu_moe_diff {
    double loss, norm, grad, weight, drift, step_loss;
    const char *grad_of, *weight_of, *drift_of; /* names in ref (not owned) */
} tu_moe_diff;
int tu_moe_diff_of(const tu_result *got, const tu_result *ref, tu_moe_diff *d);
/* Whether d is within the suites' bounds (each suite's top comment derives them): 1e-5 on the first
 * pass's loss, gradient norm and every gradient, weight_bound on every final weight, AdamW's drift bound
 * (ratio <= 1), 1e-4 on the step losses. false: the first bound broken, with its tensor, in why. */
bool tu_moe_close(const tu_moe_diff *d, double weight_bound, char *why, size_t len);
/* Whether a --bf16 run got tracks the fp32 run fp within tests/test_mixtral.c's bf16 bounds: every
 * step's loss within 2e-3 relative but not the same (bf16 in effect), every first-pass gradient within
 * 5e-2 of its tensor's largest, and every bf16 parameter checked its rounded master weight. false: the
 * first bound broken in why (with TRIDENT_TEST_VERBOSE the figures and the tensors above 1e-2 printed
 * under name). */
bool tu_moe_bf16_tracks(const char *name, const tu_result *got, const tu_result *fp, char *why, size_t len);
/* With TRIDENT_TEST_VERBOSE set: one line of d's figures under name. */
void tu_moe_diff_log(const char *name, const tu_moe_diff *d);

/* Whether got is ref bit for bit: the first pass's loss, every step's loss and gradient norm, and of
 * the n tensors how many have the same gradient and final weight bits (same == n), the first that
 * does not named in first_diff ("" when none). */
typedef struct tu_moe_bits {
    bool loss, steps;
    int same, n;
    const char *first_diff;
} tu_moe_bits;
tu_moe_bits tu_moe_bits_of(const tu_result *got, const tu_result *ref);
/* tu_moe_bits_of as a verdict: true when everything is the same bits; why says what (and, with
 * TRIDENT_TEST_VERBOSE, is printed under name). */
bool tu_moe_identical(const char *name, const tu_result *got, const tu_result *ref, char *why, size_t len);

#endif
