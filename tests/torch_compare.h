/* tests/torch_compare.h - a whole model of any family against a PyTorch reference script
 * (Debian's python3-torch), as llm.c's test_gpt2.c checks against its PyTorch dump.
 *
 * The model is built on one rank (fp32, CPU) from the family's config; its config numbers, initial
 * weights (under the checkpoint names) and token batches are written to a record file
 * (tests/testutil.h), and the script rebuilds the same model in float64 from them and returns the
 * logits, the loss, every parameter's gradient and the losses of TU_TORCH_STEPS AdamW steps (gradient
 * clipping at 1, warm-up + cosine learning rate, weight decay on the parameters Trident decays):
 * tools/gpt2_torch_reference.py's reference_run. What differs is Trident's fp32 rounding; the test
 * bounds the errors this returns. */
#ifndef TRIDENT_TESTS_TORCH_COMPARE_H
#define TRIDENT_TESTS_TORCH_COMPARE_H

#include <stdint.h>

#include "engine/train/param.h"
#include "models/model.h"

#define TU_TORCH_STEPS 10

typedef struct tu_torch_case {
    const tri_model *model;   /* a decoder family (models/model_chunk.h) */
    const char *script;       /* the reference, relative to the source tree */
    const double *cfg;        /* the config numbers the script reads (record "cfg") */
    int64_t ncfg;
    const char *scratch;      /* a scratch folder name of its own (tests may run at once) */
} tu_torch_case;

/* Worst relative errors, per tensor max |a - b| / max |b| (the loss: |a - b| / |b|). */
typedef struct tu_torch_errors {
    double logits;                           /* over each token's row of the real vocabulary */
    double loss;                             /* the first batch's, before any update */
    double grads;                            /* over every parameter's gradient */
    char worst_grad[TRI_PARAM_NAME_MAX];     /* where grads is */
    double steps;                            /* over the losses of the AdamW steps, before each update */
    double ref_first, ref_last;              /* the reference's first and last step losses */
} tu_torch_errors;

/* Runs the case (micro-batch 2, sequence 16, a learnable token stream) and measures the errors.
 * TRI_OK, or the failing call's status and message (the script's failure names its command). */
int tu_torch_compare(const tu_torch_case *c, tu_torch_errors *err);

#endif
