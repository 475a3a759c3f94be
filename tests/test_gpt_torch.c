/* tests/test_gpt_torch.c - the whole GPT-2 against PyTorch (Debian's python3-torch).
 *
 * A small GPT-2 is built by Trident on one rank; its initial weights and token batches are written
 * to a file, tools/gpt2_torch_reference.py rebuilds the same model from them with torch in float64
 * and returns the logits, the loss, every parameter's gradient and the losses of 10 AdamW steps
 * (with gradient clipping and a warm-up + cosine learning rate). Trident runs in fp32, so
 * differences are Trident's rounding: everything must agree within 1e-4 relative (per tensor:
 * max |a - b| / max |b|), as llm.c's test_gpt2.c checks against its PyTorch dump. */
#include <criterion/criterion.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "engine/comm/grid.h"
#include "engine/core/rng.h"
#include "engine/core/status.h"
#include "engine/device/device.h"
#include "engine/train/optimizer.h"
#include "engine/train/train.h"
#include "models/gpt.h"
#include "partitioner/forward_schedule.h"
#include "partitioner/pipeline_schedules.h"
#include "tests/harness.h"
#include "tests/testutil.h"

#define STEPS 10

typedef struct torch_case {
    tri_gpt_config cfg;
    int64_t B, T;
    int32_t *windows;           /* (STEPS, B, T+1) */
    float lrs[STEPS];
    tri_adamw_config adamw;
    float clip;
    const char *dir;
} torch_case;

static int fill_from_windows(void *ctx, int64_t first, int64_t n, int32_t *out)
{
    const torch_case *c = ctx;
    int64_t step = first / c->B;
    memcpy(out, c->windows + step * c->B * (c->T + 1), (size_t)(n * (c->T + 1)) * sizeof *out);
    return TRI_OK;
}

/* Writes config, schedule, batches and the model's initial parameters for the reference script. */
static void write_input(const torch_case *c, tri_gpt *m, const char *path)
{
    FILE *f = fopen(path, "wb");
    cr_assert(f, "cannot write %s", path);
    double meta[] = {c->cfg.n_layer, c->cfg.n_head, c->cfg.n_embd, c->cfg.vocab_size,
                     c->cfg.n_positions, (double)c->B, (double)c->T, STEPS, c->adamw.beta1,
                     c->adamw.beta2, c->adamw.eps, c->adamw.weight_decay, c->clip};
    int64_t nmeta = sizeof meta / sizeof *meta;
    cr_assert_eq(tu_rec_write(f, "meta", 1, &nmeta, meta), 0);
    int64_t nlr = STEPS;
    cr_assert_eq(tu_rec_write_f32(f, "lrs", 1, &nlr, c->lrs), 0);
    int64_t wshape[3] = {STEPS, c->B, c->T + 1};
    int64_t nw = STEPS * c->B * (c->T + 1);
    double *w = malloc((size_t)nw * sizeof *w);
    for (int64_t i = 0; i < nw; i++)
        w[i] = c->windows[i];
    cr_assert_eq(tu_rec_write(f, "windows", 3, wshape, w), 0);
    free(w);
    int64_t np = m->d.chunk.layout.n;
    double *decay = malloc((size_t)np * sizeof *decay);
    for (int i = 0; i < m->d.chunk.layout.n; i++)
        decay[i] = m->d.chunk.layout.params[i].spec.weight_decay;
    cr_assert_eq(tu_rec_write(f, "decay", 1, &np, decay), 0);
    free(decay);
    for (int i = 0; i < m->d.chunk.layout.n; i++) {
        const tri_param *p = &m->d.chunk.layout.params[i];
        float *host = malloc((size_t)p->numel * sizeof *host);
        cr_assert_eq(tri_zero_read_param(&m->d.chunk.zero, &m->d.chunk.layout.params[i], false, host), TRI_OK);
        cr_assert_eq(tu_rec_write_f32(f, p->spec.name, p->spec.ndim, p->local_shape, host), 0);
        free(host);
    }
    fclose(f);
}

/* max |a - b| / max |b| over a tensor */
static double tensor_rel_err(const float *a, const double *b, int64_t n)
{
    double diff = 0.0, ref = 0.0;
    for (int64_t i = 0; i < n; i++) {
        diff = fmax(diff, fabs((double)a[i] - b[i]));
        ref = fmax(ref, fabs(b[i]));
    }
    return ref > 0 ? diff / ref : diff;
}

static int run_case(int rank, int size, tri_comm *world, void *arg)
{
    torch_case *c = arg;
    tri_device *dev = NULL;
    tri_grid grid;
    cr_assert_eq(tri_device_cpu_create(&dev, 1), TRI_OK);
    cr_assert_eq(tri_grid_create(&grid, world, 1, 1), TRI_OK, "%s", tri_error_message());
    tri_chunk_place opt = {.n_slots = 1, .layer_start = 0, .layer_end = c->cfg.n_layer, .first = true, .last = true,
                           .seed = 1234};
    tri_train_layout run;
    tu_layout one = {.tp = 1, .pp = 1, .dp = 1, .n_micro = 1};
    cr_assert_eq(tu_layout_resolve(&c->cfg, c->B, c->T, &one, 1, &run), TRI_OK, "%s", tri_error_message());
    tri_gpt *m = NULL;
    cr_assert_eq(tri_gpt_create(&m, &c->cfg, &run, &opt, dev, grid.tp_comm, grid.dp_comm), TRI_OK, "%s",
                 tri_error_message());

    char in[4200], out[4200], cmd[13000];
    snprintf(in, sizeof in, "%s/in.bin", c->dir);
    snprintf(out, sizeof out, "%s/out.bin", c->dir);
    write_input(c, m, in);
    snprintf(cmd, sizeof cmd, "/usr/bin/python3 '%s' '%s' '%s'",
             tu_source_path("tools/gpt2_torch_reference.py"), in, out);
    cr_assert_eq(tu_run(cmd), 0, "the PyTorch reference failed: %s", cmd);
    tu_records ref;
    cr_assert_eq(tu_rec_read(out, &ref), 0, "cannot read %s", out);

    /* forward: logits of the real vocabulary and the loss */
    int64_t N = c->B * c->T, V = c->cfg.vocab_size;
    cr_assert_eq(tri_decoder_load_batch(&m->d, 0, c->windows), TRI_OK);
    cr_assert_eq(tri_chunk_forward(&m->d.chunk, 0, false, 0.0f), TRI_OK, "%s", tri_error_message());
    float *logits = malloc((size_t)(N * m->d.V_l) * sizeof *logits);
    cr_assert_eq(tri_device_copy_to_host(dev, logits, m->d.ls.logits), TRI_OK);
    const tu_record *rl = tu_rec_find(&ref, "logits");
    cr_assert(rl && rl->numel == N * V);
    double worst = 0.0;
    for (int64_t n = 0; n < N; n++)
        worst = fmax(worst, tensor_rel_err(logits + n * m->d.V_l, rl->data + n * V, V));
    cr_log_info("logits: max relative error %.3g", worst);
    cr_expect_lt(worst, 1e-4, "logits differ from PyTorch: %g", worst);
    free(logits);
    double loss_sum = 0.0;
    cr_assert_eq(tri_chunk_loss_sum(&m->d.chunk, 0, &loss_sum), TRI_OK);
    double loss = loss_sum / (double)N, ref_loss = tu_rec_find(&ref, "loss")->data[0];
    cr_log_info("loss: trident %.9f torch %.9f (ln V = %.4f)", loss, ref_loss, log((double)V));
    cr_expect_lt(fabs(loss - ref_loss) / ref_loss, 1e-5, "loss %g vs %g", loss, ref_loss);

    /* backward: every parameter's gradient */
    cr_assert_eq(tri_chunk_zero_grads(&m->d.chunk), TRI_OK);
    cr_assert_eq(tri_chunk_forward(&m->d.chunk, 0, true, 1.0f / (float)N), TRI_OK, "%s", tri_error_message());
    cr_assert_eq(tri_chunk_backward(&m->d.chunk, 0), TRI_OK, "%s", tri_error_message());
    cr_assert_eq(tri_chunk_finish_grads(&m->d.chunk), TRI_OK);
    double worst_grad = 0.0;
    for (int i = 0; i < m->d.chunk.layout.n; i++) {
        const tri_param *p = &m->d.chunk.layout.params[i];
        char key[160];
        snprintf(key, sizeof key, "grad.%s", p->spec.name);
        const tu_record *rg = tu_rec_find(&ref, key);
        cr_assert(rg && rg->numel == p->numel, "reference gradient %s missing", key);
        float *g = malloc((size_t)p->numel * sizeof *g);
        cr_assert_eq(tri_zero_read_param(&m->d.chunk.zero, &m->d.chunk.layout.params[i], true, g), TRI_OK);
        double e = tensor_rel_err(g, rg->data, p->numel);
        worst_grad = fmax(worst_grad, e);
        cr_expect_lt(e, 1e-4, "gradient of %s differs from PyTorch: %g", p->spec.name, e);
        free(g);
    }
    cr_log_info("gradients: max relative error over %d tensors %.3g", m->d.chunk.layout.n, worst_grad);

    /* ten AdamW steps through the trainer: losses before each update */
    tri_trainer tr;
    tri_schedule train_sched, eval_sched;
    cr_assert_eq(tri_schedule_1f1b(&train_sched, 1, 1), TRI_OK);
    cr_assert_eq(tri_schedule_forward_only(&eval_sched, 1, 1, 1), TRI_OK);
    tri_step_config sc = {.n_micro = 1, .clip_grad = c->clip};
    tri_chunk *chunks[1] = {&m->d.chunk};
    cr_assert_eq(tri_trainer_create(&tr, chunks, 1, &grid, dev, &sc, &c->adamw, &train_sched, &eval_sched),
                 TRI_OK, "%s", tri_error_message());
    tri_batch_source src = {.ctx = c, .fill = fill_from_windows};
    const tu_record *rs = tu_rec_find(&ref, "losses");
    cr_assert(rs && rs->numel == STEPS);
    double worst_step = 0.0;
    for (int s = 0; s < STEPS; s++) {
        tri_step_result r;
        cr_assert_eq(tri_trainer_step(&tr, &src, s, c->lrs[s], &r), TRI_OK, "%s", tri_error_message());
        double e = fabs(r.loss - rs->data[s]) / rs->data[s];
        worst_step = fmax(worst_step, e);
        cr_log_info("step %d: loss trident %.7f torch %.7f, grad norm %.4f, lr %.2e", s + 1, r.loss,
                    rs->data[s], r.grad_norm, (double)r.lr);
        cr_expect_lt(e, 1e-4, "step %d loss %g vs PyTorch %g", s + 1, r.loss, rs->data[s]);
    }
    cr_expect_lt(rs->data[STEPS - 1], rs->data[0] - 0.05, "the loss should fall over the steps");
    cr_log_info("AdamW steps: max relative loss difference %.3g", worst_step);
    tri_trainer_destroy(&tr);
    tri_schedule_free(&train_sched);
    tri_schedule_free(&eval_sched);
    tu_rec_free(&ref);
    tri_gpt_destroy(m);
    tri_grid_destroy(&grid);
    tri_device_destroy(dev);
    return TRI_OK;
}

Test(gpt_torch, matches_pytorch_forward_backward_and_adamw, .timeout = 300)
{
    torch_case c = {.B = 2, .T = 16, .clip = 1.0f};
    c.cfg = (tri_gpt_config){.n_layer = 2, .n_head = 4, .n_embd = 64, .vocab_size = 300,
                             .n_positions = 32, .init_std = 0.02f};
    snprintf(c.cfg.name, sizeof c.cfg.name, "torch-test");
    c.adamw = (tri_adamw_config){.beta1 = 0.9f, .beta2 = 0.95f, .eps = 1e-8f, .weight_decay = 0.1f};
    tri_lr_schedule sched = {.lr = 3e-3f, .min_lr = 3e-4f, .warmup_iters = 3, .decay_iters = STEPS,
                             .style = TRI_LR_COSINE};
    for (int s = 0; s < STEPS; s++)
        c.lrs[s] = tri_lr_at(&sched, s + 1);
    int64_t nw = STEPS * c.B * (c.T + 1);
    c.windows = malloc((size_t)nw * sizeof *c.windows);
    /* a learnable stream: token t+1 = (token t * 7 + 3) mod V with some noise */
    for (int64_t i = 0; i < nw; i++) {
        if (i % (c.T + 1) == 0)
            c.windows[i] = (int32_t)(tri_rng_uniform(5, 1, (uint64_t)i) * c.cfg.vocab_size);
        else if (tri_rng_uniform(5, 2, (uint64_t)i) < 0.2)
            c.windows[i] = (int32_t)(tri_rng_uniform(5, 3, (uint64_t)i) * c.cfg.vocab_size);
        else
            c.windows[i] = (c.windows[i - 1] * 7 + 3) % c.cfg.vocab_size;
    }
    c.dir = tu_scratch_dir("gpt_torch");
    cr_assert(c.dir);
    int rc = tri_run_thread_ranks(1, run_case, &c);
    cr_assert_eq(rc, TRI_OK, "%s", tri_error_message());
    free(c.windows);
}
