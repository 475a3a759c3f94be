/* tools/cli/predict.c - a step's per-op time predicted on the CPU (see predict.h). */
#include "tools/cli/predict.h"

#include "engine/core/rng.h"
#include "engine/core/status.h"
#include "engine/device/device_cost.h"
#include "engine/train/train.h"
#include "models/session.h"

typedef struct fill_ctx {
    int T, vocab;
} fill_ctx;

/* Random tokens (their values do not change what the ops move). */
static int fill_random(void *ctx, int64_t first, int64_t n, int32_t *w)
{
    const fill_ctx *f = ctx;
    for (int64_t i = 0; i < n * (f->T + 1); i++)
        w[i] = (int32_t)(tri_rng_uniform(42, (uint64_t)first, (uint64_t)i) * f->vocab);
    return TRI_OK;
}

int tri_cli_predict_step(tri_comm *world, const tri_model *m, tri_layout_request req, bool fused, bool cuda_graph,
                         const tri_hardware *hw, double call_s, tri_step_prediction *out)
{
    tri_device *dev = NULL;
    tri_session ss;
    tri_session_options o = {.run = {.seed = 1}, .clip_grad = 1.0f,
                             .adamw = {.beta1 = 0.9f, .beta2 = 0.95f, .eps = 1e-8f, .weight_decay = 0.1f},
                             .cuda_graph = cuda_graph};
    int rc = tri_cli_model_layout(m, req, &o.run.layout);
    if (!rc) rc = tri_device_cost_create(&dev, fused);
    if (!rc) rc = tri_session_create(&ss, world, dev, m, &o);
    if (rc) {
        tri_device_destroy(dev);
        return rc;
    }
    fill_ctx fc = {.T = req.seq_length, .vocab = tri_model_vocab_size(m)};
    tri_batch_source src = {.ctx = &fc, .fill = fill_random};
    tri_step_result res;
    rc = tri_trainer_step(&ss.trainer, &src, 0, 1e-4f, &res); /* the warm-up step: first-step work */
    tri_device_cost_clear(dev);
    if (!rc) rc = tri_trainer_step(&ss.trainer, &src, 1, 1e-4f, &res);
    int64_t n = 0;
    const tri_kernel_cost *k = tri_device_cost_kernels(dev, &n);
    tri_kernel_rates rates = tri_kernel_rates_of(hw);
    rates.call_s = call_s;
    if (!rc) rc = tri_kernel_time_predict(k, n, &rates, out);
    tri_session_destroy(&ss);
    tri_device_destroy(dev);
    return rc;
}
