/* tests/ckpt_harness.c - train, save and resume a small GPT on thread ranks (see ckpt_harness.h). */
#include "tests/ckpt_harness.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "checkpoints/fsutil.h"
#include "engine/core/log.h"
#include "engine/core/status.h"
#include "engine/device/device.h"
#include "models/gpt.h"
#include "models/session.h"
#include "models/session_checkpoint.h"

static int fill(void *ctx, int64_t first, int64_t n, int32_t *w)
{
    const tu_ckpt_run *r = ctx;
    if (first + n > TU_CKPT_TOTAL * r->global_batch)
        return TRI_ERR(TRI_EINVAL, "ckpt harness: samples [%lld, %lld) past the prepared windows", (long long)first,
                       (long long)(first + n));
    memcpy(w, r->windows + first * (r->T + 1), (size_t)(n * (r->T + 1)) * sizeof *w);
    return TRI_OK;
}

static int run_rank(int rank, int size, tri_comm *world, void *arg)
{
    tu_ckpt_run *r = arg;
    const tu_layout *l = &r->layout;
    int dp = size / (l->tp * (l->cp > 1 ? l->cp : 1) * l->pp); /* the replicas of a sequence: dp (cp splits it) */
    tri_device *dev = NULL;
    tri_session ss;
    tri_model model = r->model ? *r->model : tri_gpt_model(r->cfg);
    tri_session_options o = {.run = {.seed = r->seed ? r->seed : 1234}, .clip_grad = 1.0f,
                             .adamw = {.beta1 = 0.9f, .beta2 = 0.95f, .eps = 1e-8f, .weight_decay = 0.1f,
                                       .kind = (tri_optimizer_kind)l->optimizer, .momentum = 0.9f,
                                       .lars_eta = 0.02f, .freeze_step = l->adam_freeze_step,
                                       .onebit_adam = l->onebit_adam}};
    o.local_sgd = l->local;
    tu_layout per_replica = *l;
    per_replica.n_micro = (int)(r->global_batch / (r->B * dp));
    int lrc = tu_model_layout_resolve(&model, r->B, r->T, &per_replica, size, &o.run.layout);
    if (lrc)
        return lrc;
    tri_session_ckpt_run cr = {.seed = o.run.seed, .keep_last = r->keep_last, .reset_outer_state = r->reset_outer_state,
                               .reset_compression_state = r->reset_compression_state,
                               .no_load_optim = r->no_load_optim,
                               .lr = {.lr = 1e-3f, .min_lr = 1e-4f, .warmup_iters = 2,
                                      .decay_iters = TU_CKPT_TOTAL, .style = TRI_LR_COSINE}};
    tri_log_set_quiet(true);
    int rc = tri_device_cpu_create(&dev, 1);
    if (!rc) rc = tri_session_create(&ss, world, dev, &model, &o);
    if (rc) {
        tri_device_destroy(dev);
        return rc;
    }
    int64_t it = 0;
    tri_ckpt_async *saver = NULL;
    tri_ckpt_async_report done;
    if (r->async_save)
        rc = tri_ckpt_async_create(&saver, &ss.trainer);
    if (!rc && r->load)
        rc = tri_session_ckpt_resume(&ss, r->load, &cr, &it);
    if (rank == 0)
        r->start = it;
    if (!rc && r->load && r->save_dir && it == r->until) /* loaded and saved at once: a reshard */
        rc = tri_session_ckpt_save(&ss, r->save_dir, &cr, it);
    tri_batch_source src = {.ctx = r, .fill = fill};
    for (; it < r->until && !rc; it++) {
        tri_step_result res;
        rc = tri_trainer_step(&ss.trainer, &src, it, tri_lr_at(&cr.lr, it + 1), &res);
        if (!rc && rank == 0 && it - r->start < TU_MAX_STEPS)
            r->losses[it - r->start] = res.loss;
        if (!rc && saver)
            rc = tri_ckpt_async_poll(saver, &done);
        bool due = r->save_interval > 0 && (it + 1) % r->save_interval == 0;
        if (!rc && r->save_dir && (due || it + 1 == r->until))
            rc = saver ? tri_session_ckpt_save_async(&ss, saver, r->save_dir, &cr, it + 1, &done)
                       : tri_session_ckpt_save(&ss, r->save_dir, &cr, it + 1);
    }
    if (!rc && saver)
        rc = tri_ckpt_async_wait(saver, &done);
    tri_ckpt_async_destroy(saver);
    tri_session_destroy(&ss);
    tri_device_destroy(dev);
    return rc;
}

int tu_ckpt_train(tu_ckpt_run *r)
{
    tu_layout *l = &r->layout;
    if (l->tp < 1)
        l->tp = 1;
    if (l->pp < 1)
        l->pp = 1;
    if (l->dp < 1)
        l->dp = 1;
    if (l->cp < 1)
        l->cp = 1;
    memset(r->losses, 0, sizeof r->losses);
    r->start = 0;
    return tri_run_thread_ranks(l->tp * l->cp * l->pp * l->dp, run_rank, r);
}

char *tu_ckpt_tmpdir(const char *tag)
{
    const char *base = getenv("TMPDIR") ? getenv("TMPDIR") : "/tmp";
    char *path = malloc(4096);
    snprintf(path, 4096, "%s/trident-%s-%d", base, tag, (int)getpid());
    tri_fs_remove_tree(path);
    tri_fs_mkdir_p(path);
    return path;
}

float *tu_ckpt_tensor(const char *dir, tri_ckpt_file_kind kind, int dp, const char *group, const char *name,
                      int64_t *n)
{
    tri_ckpt_reader r;
    if (tri_ckpt_reader_open(&r, dir) != TRI_OK)
        return NULL;
    int t = tri_manifest_tensor(&r.m, name);
    float *buf = NULL;
    if (t < 0) {
        TRI_ERR(TRI_EINVAL, "checkpoint %s has no tensor %s", dir, name);
    } else {
        tri_box all = {.ndim = r.m.tensors[t].ndim};
        for (int d = 0; d < all.ndim; d++)
            all.shape[d] = r.m.tensors[t].shape[d];
        *n = tri_box_numel(&all);
        buf = malloc((size_t)*n * sizeof *buf);
        if (buf && tri_ckpt_read_box_in(&r, kind, dp, group, name, &all, buf) != TRI_OK) {
            free(buf);
            buf = NULL;
        }
    }
    tri_ckpt_reader_close(&r);
    return buf;
}

int tu_ckpt_compare(const char *a_dir, const char *b_dir, int first, int last, tu_ckpt_diff *d)
{
    tri_ckpt_reader a, b;
    *d = (tu_ckpt_diff){.identical = true};
    int rc = tri_ckpt_reader_open(&a, a_dir);
    if (rc)
        return rc;
    rc = tri_ckpt_reader_open(&b, b_dir);
    if (rc) {
        tri_ckpt_reader_close(&a);
        return rc;
    }
    if (a.m.n_tensors != b.m.n_tensors || a.m.run.adamw.kind != b.m.run.adamw.kind)
        rc = TRI_ERR(TRI_EINVAL, "tu_ckpt_compare: %s has %d tensors (optimizer %d), %s %d (optimizer %d)", a_dir,
                     a.m.n_tensors, (int)a.m.run.adamw.kind, b_dir, b.m.n_tensors, (int)b.m.run.adamw.kind);
    bool adam = tri_optimizer_has_moments(a.m.run.adamw.kind);
    const char *groups[3] = {NULL, adam ? TRI_CKPT_EXP_AVG : TRI_CKPT_MOMENTUM, TRI_CKPT_EXP_AVG_SQ};
    for (int t = 0; t < a.m.n_tensors && !rc; t++)
        for (int g = 0; g < (adam ? 3 : 2) && !rc; g++) {
            float *x = NULL, *y = NULL; /* (n) the tensor in a, in b */
            const char *name = a.m.tensors[t].name;
            rc = tri_ckpt_read_tensor(&a, groups[g], name, &x);
            if (!rc) rc = tri_ckpt_read_tensor(&b, groups[g], name, &y);
            if (!rc) {
                int64_t n = 1;
                for (int k = 0; k < a.m.tensors[t].ndim; k++)
                    n *= a.m.tensors[t].shape[k];
                double rel = tu_tensor_rel(x, y, n);
                if (g == 0) {
                    d->weights = fmax(d->weights, rel);
                    d->drift = fmax(d->drift, tu_adamw_drift_ratio(x, y, n, 1e-3, 0.9, 0.95, first, last));
                } else
                    d->moments = fmax(d->moments, rel);
                d->identical = d->identical && memcmp(x, y, (size_t)n * sizeof *x) == 0;
            }
            free(x);
            free(y);
        }
    tri_ckpt_reader_close(&a);
    tri_ckpt_reader_close(&b);
    return rc;
}
