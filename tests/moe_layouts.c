/* tests/moe_layouts.c - the tiny Mixtral and the comparisons the MoE layout suites share (see
 * moe_layouts.h). */
#include "tests/moe_layouts.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine/core/status.h"
#include "tests/testutil.h"

#define TINY "{\"model_type\": \"mixtral\", \"hidden_size\": 64, \"intermediate_size\": 64, \"num_attention_heads\": 4, " \
             "\"num_key_value_heads\": 2, \"num_hidden_layers\": 4, \"vocab_size\": 100, \"max_position_embeddings\": 16, " \
             "\"num_local_experts\": 4, \"num_experts_per_tok\": 2, \"output_router_logits\": true, " \
             "\"router_aux_loss_coef\": 0.02, \"rms_norm_eps\": 1e-5, \"tie_word_embeddings\": true%s}"

int tu_moe_tiny(tri_model *m, const char *extra)
{
    char json[1024];
    snprintf(json, sizeof json, TINY, extra ? extra : "");
    return tri_model_parse(m, json, "tiny-mixtral");
}

int tu_moe_run(const tri_model *m, const tu_layout *l, tu_result *r, const int32_t *w)
{
    tu_layout lay = *l;
    lay.n_micro = lay.n_micro > 0 ? lay.n_micro : TU_MOE_GLOBAL / (TU_MOE_B * (l->dp > 0 ? l->dp : 1));
    return tu_run_model(m, TU_MOE_B, TU_MOE_T, &lay, w, TU_MOE_STEPS, r);
}

int64_t tu_moe_compared(const tu_result *r, int i)
{
    bool vocab = strcmp(r->names[i], "model.embed_tokens.weight") == 0 || strcmp(r->names[i], "lm_head.weight") == 0;
    return vocab ? TU_MOE_VOCAB * r->cols[i] : r->numel[i];
}

tu_ckpt_run tu_moe_ckpt_run(const tri_model *m, const int32_t *w, tu_layout l, int64_t until, const char *load,
                            const char *save)
{
    return (tu_ckpt_run){.model = m, .B = TU_MOE_B, .T = TU_MOE_T, .layout = l, .global_batch = TU_MOE_GLOBAL,
                         .windows = w, .until = until, .load = load, .save_dir = save};
}

double tu_moe_resume_diff(const char *name, const tu_ckpt_run *resumed, const tu_ckpt_run *full)
{
    double worst = 0;
    for (int s = 0; s < 3; s++)
        worst = fmax(worst, fabs(resumed->losses[s] - full->losses[3 + s]) / full->losses[3 + s]);
    if (getenv("TRIDENT_TEST_VERBOSE"))
        printf("%s: resumed steps 4-6 within %.2g of the uninterrupted run's (%.9f -> %.9f)\n", name, worst,
               full->losses[3], full->losses[5]);
    return worst;
}

static int same_tensors(const tu_result *got, const tu_result *ref)
{
    if (got->n != ref->n)
        return TRI_ERR(TRI_EINVAL, "the runs list %d and %d tensors", got->n, ref->n);
    for (int i = 0; i < ref->n; i++)
        if (strcmp(got->names[i], ref->names[i]) != 0)
            return TRI_ERR(TRI_EINVAL, "tensor %d is %s in one run and %s in the other", i, got->names[i],
                           ref->names[i]);
    return TRI_OK;
}

int tu_moe_diff_of(const tu_result *got, const tu_result *ref, tu_moe_diff *d)
{
    memset(d, 0, sizeof *d);
    d->grad_of = d->weight_of = d->drift_of = "";
    int rc = same_tensors(got, ref);
    if (rc)
        return rc;
    d->loss = fabs(got->grad_loss - ref->grad_loss) / ref->grad_loss;
    d->norm = fabs(got->grad_norm - ref->grad_norm) / ref->grad_norm;
    for (int i = 0; i < ref->n; i++) {
        int64_t n = tu_moe_compared(ref, i);
        double g = tu_tensor_rel(got->grads[i], ref->grads[i], n);
        double v = tu_tensor_rel(got->weights[i], ref->weights[i], n);
        double dr = tu_adamw_drift_ratio(got->weights[i], ref->weights[i], n, 1e-3, 0.9, 0.95, 1, TU_MOE_STEPS);
        if (g > d->grad) d->grad = g, d->grad_of = ref->names[i];
        if (v > d->weight) d->weight = v, d->weight_of = ref->names[i];
        if (dr > d->drift) d->drift = dr, d->drift_of = ref->names[i];
    }
    for (int s = 0; s < TU_MOE_STEPS; s++)
        d->step_loss = fmax(d->step_loss, fabs(got->losses[s] - ref->losses[s]) / ref->losses[s]);
    return TRI_OK;
}

bool tu_moe_close(const tu_moe_diff *d, double weight_bound, char *why, size_t len)
{
    if (!(d->loss < 1e-5))
        snprintf(why, len, "the first pass's loss differs by %g", d->loss);
    else if (!(d->norm < 1e-5))
        snprintf(why, len, "the gradient norm differs by %g", d->norm);
    else if (!(d->grad < 1e-5))
        snprintf(why, len, "the gradient of %s differs by %g", d->grad_of, d->grad);
    else if (!(d->weight < weight_bound))
        snprintf(why, len, "the final %s differs by %g (bound %g)", d->weight_of, d->weight, weight_bound);
    else if (!(d->drift <= 1.0))
        snprintf(why, len, "the final %s drifts %.3g of AdamW's bound", d->drift_of, d->drift);
    else if (!(d->step_loss < 1e-4))
        snprintf(why, len, "a step's loss differs by %g", d->step_loss);
    else {
        snprintf(why, len, "within the bounds");
        return true;
    }
    return false;
}

bool tu_moe_bf16_tracks(const char *name, const tu_result *got, const tu_result *fp, char *why, size_t len)
{
    bool verbose = getenv("TRIDENT_TEST_VERBOSE") != NULL;
    double loss = 0, grad = 0;
    for (int s = 0; s < TU_MOE_STEPS; s++)
        loss = fmax(loss, fabs(got->losses[s] - fp->losses[s]) / fp->losses[s]);
    for (int i = 0; i < fp->n; i++) {
        double e = tu_tensor_rel(got->grads[i], fp->grads[i], tu_moe_compared(fp, i));
        if (verbose && e > 1e-2)
            printf("  %s: %s %.3g\n", name, fp->names[i], e);
        grad = fmax(grad, e);
    }
    if (verbose)
        printf("%s vs fp32: losses %.2g, first gradients %.2g\n", name, loss, grad);
    if (!(loss < 2e-3))
        snprintf(why, len, "the losses differ from fp32's by %g", loss);
    else if (!(loss > 0.0))
        snprintf(why, len, "bf16 gave the fp32 losses exactly: bf16 is not in effect");
    else if (!(grad < 5e-2))
        snprintf(why, len, "the first gradients differ from fp32's by %g", grad);
    else if (got->bf16_checked <= 0)
        snprintf(why, len, "no bf16 parameter was checked against its master weight");
    else if (got->bf16_stale != 0)
        snprintf(why, len, "%lld bf16 parameters are not their rounded master weight", (long long)got->bf16_stale);
    else {
        snprintf(why, len, "within the bounds");
        return true;
    }
    return false;
}

void tu_moe_diff_log(const char *name, const tu_moe_diff *d)
{
    if (getenv("TRIDENT_TEST_VERBOSE"))
        printf("%s: first loss diff %.2g, max gradient diff %.2g (%s), max step-loss diff %.2g, max weight diff "
               "%.2g (%s; AdamW drift %.2g of its bound)\n", name, d->loss, d->grad, d->grad_of, d->step_loss,
               d->weight, d->weight_of, d->drift);
}

tu_moe_bits tu_moe_bits_of(const tu_result *got, const tu_result *ref)
{
    tu_moe_bits b = {.loss = memcmp(&got->grad_loss, &ref->grad_loss, sizeof ref->grad_loss) == 0,
                     .steps = memcmp(got->losses, ref->losses, sizeof ref->losses) == 0 &&
                              memcmp(got->norms, ref->norms, sizeof ref->norms) == 0,
                     .n = ref->n, .first_diff = ""};
    if (same_tensors(got, ref)) {
        b.first_diff = "(the tensor lists differ)";
        return b;
    }
    for (int i = 0; i < ref->n; i++) {
        size_t bytes = (size_t)tu_moe_compared(ref, i) * sizeof(float);
        bool same = memcmp(got->grads[i], ref->grads[i], bytes) == 0 &&
                    memcmp(got->weights[i], ref->weights[i], bytes) == 0;
        b.same += same;
        if (!same && !b.first_diff[0])
            b.first_diff = ref->names[i];
    }
    return b;
}

bool tu_moe_identical(const char *name, const tu_result *got, const tu_result *ref, char *why, size_t len)
{
    tu_moe_bits b = tu_moe_bits_of(got, ref);
    snprintf(why, len, "%d of %d tensors bit-identical (gradients and final weights; first differing: %s), first "
             "loss %s, step losses and norms %s", b.same, b.n, b.first_diff[0] ? b.first_diff : "none",
             b.loss ? "the same" : "differs", b.steps ? "the same" : "differ");
    if (getenv("TRIDENT_TEST_VERBOSE"))
        printf("deterministic %s: %s\n", name, why);
    return b.loss && b.steps && b.same == b.n;
}
