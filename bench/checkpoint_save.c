/* bench/checkpoint_save.c - how long a checkpoint save blocks training: synchronous against
 * asynchronous (--async-save), in one run.
 *
 * A GPT (default GPT-2 124M) trains on random tokens on the CPU, one rank. The baseline is today's
 * synchronous save (tri_session_ckpt_save: the whole write, fsync and checksum blocks the loop), timed
 * --saves times. Then the same number of asynchronous saves: each blocks the loop while the rank
 * copies its weights and Adam moments to host memory; training steps then run while the background
 * thread writes, each polling the save, until it is published. Per save it prints the synchronous
 * time, the asynchronous blocked time (snapshot plus polls) and the background time, the ratio
 * synchronous / blocked, and the blocked time against a plain memcpy of the same bytes (what "at
 * most the host copy" means). Not a test: no threshold here. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "checkpoints/async_save.h"
#include "checkpoints/fsutil.h"
#include "engine/core/clock.h"
#include "engine/core/rng.h"
#include "engine/core/status.h"
#include "engine/device/device.h"
#include "models/config.h"
#include "models/gpt.h"
#include "models/gpt.h"
#include "models/session.h"
#include "models/session_checkpoint.h"
#include "tools/cli/backend.h"
#include "tools/cli/flags.h"
#include "tools/cli/layout_flags.h"
#include "tools/cli/threads.h"

typedef struct bench {
    const char *config, *dir;
    int B, T, saves, threads;
    tri_gpt_config cfg;
    tri_model model;            /* the session's handle on cfg (models/model.h) */
    /* results */
    double sync_s, blocked_s, background_s, copy_s;
    double first_blocked_s;     /* the first asynchronous save */
    double reserve_s;           /* creating the saver: its host memory allocated and touched */
    int steps_between;          /* training steps the asynchronous saves overlapped */
    double bytes;               /* weights + moments copied per save */
} bench;

static int fill_random(void *ctx, int64_t first, int64_t n, int32_t *w)
{
    const bench *b = ctx;
    for (int64_t i = 0; i < n * (b->T + 1); i++)
        w[i] = (int32_t)(tri_rng_uniform(42, (uint64_t)first, (uint64_t)i) * b->cfg.vocab_size);
    return TRI_OK;
}

/* memcpy of the bytes a snapshot copies: the floor of any host copy (best of 3). */
static double memcpy_seconds(double bytes)
{
    size_t n = (size_t)bytes;
    char *a = malloc(n), *c = malloc(n);
    if (!a || !c) {
        free(a);
        free(c);
        return 0.0;
    }
    memset(a, 1, n);
    memset(c, 2, n);
    double best = 1e30;
    for (int rep = 0; rep < 3; rep++) {
        double t0 = tri_now_s();
        memcpy(c, a, n);
        double dt = tri_now_s() - t0;
        best = dt < best ? dt : best;
    }
    free(a);
    free(c);
    return best;
}

static int run_rank(int rank, int size, tri_comm *world, void *arg)
{
    bench *b = arg;
    tri_device *dev = NULL;
    tri_session ss;
    tri_session_options o = {.run = {.seed = 1}, .clip_grad = 1.0f,
                             .adamw = {.beta1 = 0.9f, .beta2 = 0.95f, .eps = 1e-8f, .weight_decay = 0.1f}};
    tri_layout_request req = {.num_gpus = 1, .tp = 1, .pp = 1, .micro_batch = b->B, .global_batch = b->B,
                              .seq_length = b->T, .first_layers = -1, .last_layers = -1};
    int lrc = tri_cli_model_layout(&b->model, req, &o.run.layout);
    if (lrc)
        return lrc;
    tri_session_ckpt_run cr = {.seed = 1, .keep_last = 1,
                               .lr = {.lr = 1e-4f, .min_lr = 1e-5f, .decay_iters = 1000, .style = TRI_LR_COSINE}};
    tri_cli_set_threads(b->threads);
    int rc = tri_cli_device_create("cpu", b->threads, &dev);
    if (!rc) rc = tri_session_create(&ss, world, dev, &b->model, &o);
    if (rc) {
        tri_device_destroy(dev);
        return rc;
    }
    tri_batch_source src = {.ctx = b, .fill = fill_random};
    tri_step_result res;
    int64_t it = 0;
    rc = tri_trainer_step(&ss.trainer, &src, it++, 1e-4f, &res); /* moments to save */
    char sync_dir[4200], async_dir[4200];
    snprintf(sync_dir, sizeof sync_dir, "%s/sync", b->dir);
    snprintf(async_dir, sizeof async_dir, "%s/async", b->dir);
    /* the baseline: synchronous saves */
    for (int k = 0; k < b->saves && !rc; k++) {
        double t0 = tri_now_s();
        rc = tri_session_ckpt_save(&ss, sync_dir, &cr, it + k);
        b->sync_s += tri_now_s() - t0;
    }
    /* asynchronous saves, training on while each is written */
    tri_ckpt_async *saver = NULL;
    tri_ckpt_async_report done;
    double t_create = tri_now_s();
    if (!rc) rc = tri_ckpt_async_create(&saver, &ss.trainer);
    b->reserve_s = tri_now_s() - t_create;
    for (int k = 0; k < b->saves && !rc; k++) {
        rc = tri_session_ckpt_save_async(&ss, saver, async_dir, &cr, it, &done);
        while (!rc && tri_ckpt_async_busy(saver)) {
            rc = tri_trainer_step(&ss.trainer, &src, it++, 1e-4f, &res);
            if (!rc) rc = tri_ckpt_async_poll(saver, &done);
            b->steps_between++;
        }
        if (k == 0)
            b->first_blocked_s = done.blocked_s;
        b->blocked_s += done.blocked_s;
        b->background_s += done.total_s;
    }
    tri_ckpt_async_destroy(saver);
    for (int c = 0; c < ss.trainer.v; c++) {
        const tri_param_layout *L = &ss.trainer.chunks[c]->layout;
        for (int i = 0; i < L->n; i++)
            b->bytes += 3.0 * (double)L->params[i].numel * sizeof(float); /* weights, m, v */
    }
    tri_session_destroy(&ss);
    tri_device_destroy(dev);
    return rc;
}

int main(int argc, char **argv)
{
    tri_cli_passive_openmp(argv);
    char dir[256];
    snprintf(dir, sizeof dir, "%s/trident-bench-ckpt-%d", getenv("TMPDIR") ? getenv("TMPDIR") : "/tmp", (int)getpid());
    bench b = {.config = "models/gpt2.json", .dir = dir, .B = 1, .T = 64, .saves = 3, .threads = 2};
    tri_flag flags[] = {
        {"config", TRI_FLAG_STRING, &b.config, "model config", 0, 0, NULL, false},
        {"save-dir", TRI_FLAG_STRING, &b.dir, "where the checkpoints go (removed at the end)", 0, 0, NULL, false},
        {"micro-batch-size", TRI_FLAG_INT, &b.B, "sequences per training step", 1, 1 << 16, NULL, false},
        {"seq-length", TRI_FLAG_INT, &b.T, "sequence length", 1, 1 << 16, NULL, false},
        {"saves", TRI_FLAG_INT, &b.saves, "saves of each kind", 1, 1000, NULL, false},
        {"threads", TRI_FLAG_INT, &b.threads, "BLAS/OpenMP threads", 1, 1024, NULL, false},
    };
    int nf = sizeof flags / sizeof *flags;
    bool help = false;
    int rc = tri_flags_parse(flags, nf, argc, argv, &help);
    if (rc || help) {
        if (rc)
            fprintf(stderr, "bench_checkpoint_save: %s\n", tri_error_message());
        tri_flags_usage(rc ? stderr : stdout, flags, nf, "bench_checkpoint_save",
                        "Times how long synchronous and asynchronous checkpoint saves block training.");
        return rc ? 2 : 0;
    }
    rc = tri_gpt_config_load(&b.cfg, b.config);
    b.model = tri_gpt_model(&b.cfg);
    if (!rc) rc = tri_run_thread_ranks(1, run_rank, &b);
    tri_fs_remove_tree(b.dir);
    if (rc) {
        fprintf(stderr, "bench_checkpoint_save: %s\n", tri_error_message());
        return 1;
    }
    b.copy_s = memcpy_seconds(b.bytes);
    double sync = b.sync_s / b.saves, blocked = b.blocked_s / b.saves, background = b.background_s / b.saves;
    printf("%s on the CPU, 1 rank, %d threads; %.0f MB of weights and Adam moments per save:\n", b.cfg.name,
           b.threads, b.bytes / 1e6);
    printf("  synchronous save (baseline, same run): %8.3f s blocked per save\n", sync);
    printf("  asynchronous save:                     %8.3f s blocked per save (the first %.3f s): the snapshot to host "
           "memory and the polls; written in %.3f s in the background over %.1f training steps. Its host memory "
           "was allocated at start-up, outside the loop, in %.3f s\n", blocked, b.first_blocked_s, background,
           (double)b.steps_between / b.saves, b.reserve_s);
    printf("  ratio synchronous / asynchronous blocked time = %.1fx\n", blocked > 0 ? sync / blocked : 0.0);
    printf("  asynchronous blocked time / memcpy of the same %.0f MB (%.3f s) = %.2f\n", b.bytes / 1e6, b.copy_s,
           b.copy_s > 0 ? blocked / b.copy_s : 0.0);
    return 0;
}
