/* tests/torch_compare.c - a whole model against a PyTorch reference script (see torch_compare.h). */
#include "tests/torch_compare.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine/comm/grid.h"
#include "engine/core/rng.h"
#include "engine/core/status.h"
#include "engine/device/device.h"
#include "engine/train/optimizer.h"
#include "engine/train/train.h"
#include "models/model_chunk.h"
#include "partitioner/forward_schedule.h"
#include "partitioner/pipeline_schedules.h"
#include "tests/harness.h"
#include "tests/testutil.h"

enum { B = 2, T = 16 };

typedef struct job {
    const tu_torch_case *c;
    tu_torch_errors *err;
    int32_t windows[TU_TORCH_STEPS * B * (T + 1)];   /* (steps, B, T+1) */
    float lrs[TU_TORCH_STEPS];
    tri_adamw_config adamw;
    float clip;
} job;

static int fill_from_windows(void *ctx, int64_t first, int64_t n, int32_t *out)
{
    const job *j = ctx;
    int64_t step = first / B;
    memcpy(out, j->windows + step * B * (T + 1), (size_t)(n * (T + 1)) * sizeof *out);
    return TRI_OK;
}

/* The script's input: "meta" (B, T, steps, AdamW beta1, beta2, eps, weight decay, clip), "cfg",
 * "lrs", "windows", "decay" (per parameter), then every parameter in the chunk's order. */
static int write_input(const job *j, tri_chunk *chunk, const char *path)
{
    FILE *f = fopen(path, "wb");
    if (!f)
        return TRI_ERR(TRI_EIO, "cannot write %s", path);
    const tri_param_layout *L = &chunk->layout;
    double meta[] = {B, T, TU_TORCH_STEPS, j->adamw.beta1, j->adamw.beta2, j->adamw.eps, j->adamw.weight_decay,
                     j->clip};
    int64_t nmeta = sizeof meta / sizeof *meta, nlr = TU_TORCH_STEPS, np = L->n;
    int64_t wshape[3] = {TU_TORCH_STEPS, B, T + 1}, nw = TU_TORCH_STEPS * B * (T + 1);
    double *w = malloc((size_t)nw * sizeof *w), *decay = malloc((size_t)np * sizeof *decay);
    int bad = !w || !decay;
    for (int64_t i = 0; !bad && i < nw; i++)
        w[i] = j->windows[i];
    for (int i = 0; !bad && i < np; i++)
        decay[i] = L->params[i].spec.weight_decay;
    bad = bad || tu_rec_write(f, "meta", 1, &nmeta, meta) || tu_rec_write(f, "cfg", 1, &j->c->ncfg, j->c->cfg) ||
          tu_rec_write_f32(f, "lrs", 1, &nlr, j->lrs) || tu_rec_write(f, "windows", 3, wshape, w) ||
          tu_rec_write(f, "decay", 1, &np, decay);
    free(w);
    free(decay);
    int rc = TRI_OK;
    for (int i = 0; i < L->n && !bad && !rc; i++) {
        const tri_param *p = &L->params[i];
        float *host = malloc((size_t)p->numel * sizeof *host);
        rc = host ? tri_zero_read_param(&chunk->zero, p, false, host) : TRI_ERR(TRI_ENOMEM, "out of memory");
        bad = !rc && tu_rec_write_f32(f, p->spec.name, p->spec.ndim, p->local_shape, host);
        free(host);
    }
    if (fclose(f) != 0 || bad)
        return rc ? rc : TRI_ERR(TRI_EIO, "cannot write %s", path);
    return rc;
}

static const tu_record *need(const tu_records *ref, const char *name, int64_t numel)
{
    const tu_record *r = tu_rec_find(ref, name);
    return r && r->numel == numel ? r : NULL;
}

/* The first batch's logits (each row's real vocabulary) and loss, without training. */
static int compare_forward(job *j, tri_decoder *d, const tu_records *ref)
{
    tri_chunk *chunk = &d->chunk;
    int64_t N = B * T, V = d->vocab_size;
    const tu_record *rl = need(ref, "logits", N * V), *rloss = need(ref, "loss", 1);
    if (!rl || !rloss)
        return TRI_ERR(TRI_EINVAL, "the reference has no logits (%lld) or loss", (long long)(N * V));
    float *logits = malloc((size_t)(N * d->V_l) * sizeof *logits);
    int rc = logits ? tri_decoder_load_batch(d, 0, j->windows) : TRI_ERR(TRI_ENOMEM, "out of memory");
    if (!rc) rc = tri_chunk_forward(chunk, 0, false, 0.0f);
    if (!rc) rc = tri_device_copy_to_host(d->dev, logits, d->ls.logits);
    for (int64_t n = 0; !rc && n < N; n++)
        j->err->logits = fmax(j->err->logits, tu_tensor_rel_f64(logits + n * d->V_l, rl->data + n * V, V));
    free(logits);
    double sum = 0.0;
    if (!rc) rc = tri_chunk_loss_sum(chunk, 0, &sum);
    j->err->loss = fabs(sum / (double)N - rloss->data[0]) / rloss->data[0];
    return rc;
}

/* Every parameter's gradient of the first batch's mean loss. */
static int compare_grads(job *j, tri_chunk *chunk, const tu_records *ref)
{
    int rc = tri_chunk_zero_grads(chunk);
    if (!rc) rc = tri_chunk_forward(chunk, 0, true, 1.0f / (float)(B * T));
    if (!rc) rc = tri_chunk_backward(chunk, 0);
    if (!rc) rc = tri_chunk_finish_grads(chunk);
    for (int i = 0; i < chunk->layout.n && !rc; i++) {
        const tri_param *p = &chunk->layout.params[i];
        char key[TRI_PARAM_NAME_MAX + 8];
        snprintf(key, sizeof key, "grad.%s", p->spec.name);
        const tu_record *rg = need(ref, key, p->numel);
        float *g = malloc((size_t)p->numel * sizeof *g);
        if (!rg || !g)
            rc = TRI_ERR(rg ? TRI_ENOMEM : TRI_EINVAL, "reference gradient %s missing (or out of memory)", key);
        if (!rc) rc = tri_zero_read_param(&chunk->zero, p, true, g);
        double e = rc ? 0.0 : tu_tensor_rel_f64(g, rg->data, p->numel);
        if (i == 0 || e > j->err->grads) {
            j->err->grads = e;
            snprintf(j->err->worst_grad, sizeof j->err->worst_grad, "%s", p->spec.name);
        }
        free(g);
    }
    return rc;
}

/* TU_TORCH_STEPS AdamW steps through the trainer: the loss before each update. */
static int compare_steps(job *j, tri_chunk *chunk, tri_grid *grid, tri_device *dev, const tu_records *ref)
{
    const tu_record *rs = need(ref, "losses", TU_TORCH_STEPS);
    if (!rs)
        return TRI_ERR(TRI_EINVAL, "the reference has no %d step losses", TU_TORCH_STEPS);
    j->err->ref_first = rs->data[0];
    j->err->ref_last = rs->data[TU_TORCH_STEPS - 1];
    tri_trainer tr;
    tri_schedule train_sched = {0}, eval_sched = {0};
    int rc = tri_schedule_1f1b(&train_sched, 1, 1);
    if (!rc) rc = tri_schedule_forward_only(&eval_sched, 1, 1, 1);
    tri_step_config sc = {.n_micro = 1, .clip_grad = j->clip};
    bool made = !rc && !(rc = tri_trainer_create(&tr, &chunk, 1, grid, dev, &sc, &j->adamw, &train_sched, &eval_sched));
    tri_batch_source src = {.ctx = j, .fill = fill_from_windows};
    for (int s = 0; s < TU_TORCH_STEPS && !rc; s++) {
        tri_step_result r;
        rc = tri_trainer_step(&tr, &src, s, j->lrs[s], &r);
        if (!rc)
            j->err->steps = fmax(j->err->steps, fabs(r.loss - rs->data[s]) / rs->data[s]);
    }
    if (made)
        tri_trainer_destroy(&tr);
    tri_schedule_free(&train_sched);
    tri_schedule_free(&eval_sched);
    return rc;
}

/* Builds the model on one rank, runs the script and compares. */
static int run_case(int rank, int size, tri_comm *world, void *arg)
{
    (void)rank, (void)size;
    job *j = arg;
    const tri_model *model = j->c->model;
    tri_device *dev = NULL;
    tri_grid grid;
    void *impl = NULL;
    tri_chunk *chunk = NULL;
    tri_train_layout run;
    tu_layout one = {.tp = 1, .pp = 1, .dp = 1, .n_micro = 1};
    tri_chunk_place place = {.n_slots = 1, .layer_end = tri_model_dims(model).n_layer, .first = true, .last = true,
                             .seed = 1234};
    int rc = tri_device_cpu_create(&dev, 1);
    if (rc)
        return rc;
    bool have_grid = !(rc = tri_grid_create(&grid, world, 1, 1));
    if (!rc) rc = tu_model_layout_resolve(model, B, T, &one, 1, &run);
    if (!rc) rc = model->family->create(&impl, &chunk, model->cfg, &run, &place, dev, grid.tp_comm, grid.dp_comm);

    char in[4300], out[4300], cmd[13000];
    const char *scratch = tu_scratch_dir(j->c->scratch);
    snprintf(in, sizeof in, "%s/in.bin", scratch ? scratch : "");
    snprintf(out, sizeof out, "%s/out.bin", scratch ? scratch : "");
    if (!rc && !scratch) rc = TRI_ERR(TRI_EIO, "no scratch folder %s", j->c->scratch);
    if (!rc) rc = write_input(j, chunk, in);
    const char *args[] = {in, out};
    if (!rc && tu_torch_run(j->c->script, args, 2, cmd, sizeof cmd) != 0)
        rc = TRI_ERR(TRI_EIO, "the PyTorch reference failed: %s", cmd);
    tu_records ref = {0};
    if (!rc && tu_rec_read(out, &ref) != 0) rc = TRI_ERR(TRI_EIO, "cannot read %s", out);
    tri_decoder *d = impl; /* a decoder family's chunk starts with its tri_decoder */
    if (!rc) rc = compare_forward(j, d, &ref);
    if (!rc) rc = compare_grads(j, chunk, &ref);
    if (!rc) rc = compare_steps(j, chunk, &grid, dev, &ref);
    tu_rec_free(&ref);
    if (impl)
        model->family->destroy(impl);
    if (have_grid)
        tri_grid_destroy(&grid);
    tri_device_destroy(dev);
    return rc;
}

int tu_torch_compare(const tu_torch_case *c, tu_torch_errors *err)
{
    memset(err, 0, sizeof *err);
    job *j = calloc(1, sizeof *j);
    if (!j)
        return TRI_ERR(TRI_ENOMEM, "out of memory");
    j->c = c;
    j->err = err;
    j->clip = 1.0f;
    j->adamw = (tri_adamw_config){.beta1 = 0.9f, .beta2 = 0.95f, .eps = 1e-8f, .weight_decay = 0.1f};
    tri_lr_schedule sched = {.lr = 3e-3f, .min_lr = 3e-4f, .warmup_iters = 3, .decay_iters = TU_TORCH_STEPS,
                             .style = TRI_LR_COSINE};
    for (int s = 0; s < TU_TORCH_STEPS; s++)
        j->lrs[s] = tri_lr_at(&sched, s + 1);
    /* a learnable stream: token t+1 = (token t * 7 + 3) mod V with some noise */
    int V = tri_model_vocab_size(c->model);
    for (int64_t i = 0; i < TU_TORCH_STEPS * B * (T + 1); i++) {
        if (i % (T + 1) == 0)
            j->windows[i] = (int32_t)(tri_rng_uniform(5, 1, (uint64_t)i) * V);
        else if (tri_rng_uniform(5, 2, (uint64_t)i) < 0.2)
            j->windows[i] = (int32_t)(tri_rng_uniform(5, 3, (uint64_t)i) * V);
        else
            j->windows[i] = (j->windows[i - 1] * 7 + 3) % V;
    }
    int rc = tri_run_thread_ranks(1, run_case, j);
    free(j);
    return rc;
}
