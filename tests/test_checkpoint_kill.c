/* tests/test_checkpoint_kill.c - SIGKILL at random moments never loses the last good checkpoint.
 *
 * A child process trains a small GPT on 4 thread ranks (tp 2 x dp 2, ZeRO 1), resuming from the
 * run directory's latest checkpoint when there is one and saving after every iteration (keeping the
 * last 2), so most of its time is spent saving; the parent kills it with SIGKILL (every rank at
 * once) after a random delay, 30 times (12 under the sanitizers): a random fraction of an
 * undisturbed child's run time, measured first, so the kills fall alike on a fast or a slow machine.
 * After each kill `latest`, when present, must name a complete step whose every file verifies and
 * whose every tensor reads, and the iteration it names never goes back; the next child resumes from
 * it. Finally a child runs to the end undisturbed. The same again with asynchronous saves
 * (checkpoints/async_save.h). */
#include <criterion/criterion.h>
#include <dirent.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "checkpoints/fsutil.h"
#include "checkpoints/reader.h"
#include "engine/core/clock.h"
#include "engine/core/rng.h"
#include "engine/core/status.h"
#include "tests/ckpt_harness.h"

/* Under the sanitizers every kill checks the same save and resume paths at 3x the cost (the test took
 * 105 s of the sanitizer stage at 30 kills): 12 there. */
#if defined(__SANITIZE_ADDRESS__)
enum { KILLS = 12 };
#else
enum { KILLS = 30 };
#endif
enum { B = 1, T = 8, GLOBAL = 4 };

static tri_gpt_config cfg;
static int32_t *windows;
static char run_dir[4200];
static bool async_saves; /* the children save with --async-save */

static int child(void)
{
    tu_ckpt_run r = {.cfg = &cfg, .B = B, .T = T, .global_batch = GLOBAL, .windows = windows,
                     .layout = {.tp = 2, .pp = 1, .dp = 2, .zero = 1}, .until = TU_CKPT_TOTAL,
                     .save_dir = run_dir, .save_interval = 1, .keep_last = 2, .async_save = async_saves};
    char probe[4300];
    snprintf(probe, sizeof probe, "%s/latest", run_dir);
    if (tri_fs_exists(probe))
        r.load = run_dir;
    int rc = tu_ckpt_train(&r);
    if (rc)
        fprintf(stderr, "child: %s\n", tri_error_message());
    return rc ? 1 : 0;
}

/* The iteration `latest` names after a complete verification (-1: no latest yet). */
static int64_t check_latest(void)
{
    char probe[4300];
    snprintf(probe, sizeof probe, "%s/latest", run_dir);
    if (!tri_fs_exists(probe))
        return -1;
    tri_ckpt_reader r;
    cr_assert_eq(tri_ckpt_reader_open(&r, run_dir), TRI_OK, "after a kill: %s", tri_error_message());
    cr_assert_eq(tri_ckpt_reader_verify_all(&r), TRI_OK, "after a kill: %s", tri_error_message());
    const char *groups[3] = {NULL, TRI_CKPT_EXP_AVG, TRI_CKPT_EXP_AVG_SQ};
    for (int t = 0; t < r.m.n_tensors; t++)
        for (int g = 0; g < 3; g++) {
            float *x = NULL;
            cr_assert_eq(tri_ckpt_read_tensor(&r, groups[g], r.m.tensors[t].name, &x), TRI_OK, "after a kill: %s",
                         tri_error_message());
            free(x);
        }
    int64_t it = r.m.iteration;
    tri_ckpt_reader_close(&r);
    return it;
}

/* Whether an interrupted save left its temporary directory (the kill landed inside a save). */
static bool mid_save(void)
{
    DIR *d = opendir(run_dir);
    bool found = false;
    struct dirent *e;
    while (d && (e = readdir(d)))
        found = found || strstr(e->d_name, ".tmp") != NULL;
    if (d)
        closedir(d);
    return found;
}

static void kill_during_saves(const char *tag)
{
    cfg = tu_tiny_config();
    cfg.n_layer = 2;
    windows = tu_make_windows((int64_t)TU_CKPT_TOTAL * GLOBAL, T, cfg.vocab_size, 4);
    char *dir = tu_ckpt_tmpdir(tag);
    /* the kills land at random fractions of an undisturbed child's run time, measured here, so they
     * cover start-up, training and every save on a fast or a slow (or loaded) machine alike */
    snprintf(run_dir, sizeof run_dir, "%s/timing", dir);
    double t0 = tri_now_s();
    fflush(NULL);
    pid_t timing = fork();
    cr_assert_geq(timing, 0);
    if (timing == 0)
        _exit(child());
    int timing_status = 0;
    waitpid(timing, &timing_status, 0);
    double whole = tri_now_s() - t0;
    cr_assert(WIFEXITED(timing_status) && WEXITSTATUS(timing_status) == 0, "the undisturbed child failed");
    snprintf(run_dir, sizeof run_dir, "%s/run", dir);
    int64_t last = -1, furthest = -1;
    int inside_save = 0, completed = 0, restarts = 0;
    for (int k = 0; k < KILLS; k++) {
        fflush(NULL);
        pid_t pid = fork();
        cr_assert_geq(pid, 0);
        if (pid == 0)
            _exit(child());
        /* 2% to 50% of an undisturbed run from scratch: a resumed child has less left to do, and
         * later kills would mostly find it finished */
        double at = whole * (0.02 + 0.48 * tri_rng_uniform(77, 1, (uint64_t)k));
        struct timespec ts = {.tv_sec = (time_t)at, .tv_nsec = (long)((at - (double)(time_t)at) * 1e9)};
        nanosleep(&ts, NULL);
        kill(pid, SIGKILL);
        int status = 0;
        waitpid(pid, &status, 0);
        if (WIFEXITED(status)) {
            cr_assert_eq(WEXITSTATUS(status), 0, "kill %d: the child failed on its own", k);
            completed++;
        }
        inside_save += mid_save();
        int64_t it = check_latest();
        cr_expect_geq(it, last, "kill %d: latest went back from iteration %lld to %lld", k, (long long)last,
                      (long long)it);
        last = it;
        furthest = it > furthest ? it : furthest;
        if (it == TU_CKPT_TOTAL) { /* the run finished before the kill: start a new one */
            tri_fs_remove_tree(run_dir);
            last = -1;
            restarts++;
        }
    }
    int64_t before = last;
    /* undisturbed: resumes from whatever the last kill left and trains to the end */
    fflush(NULL);
    pid_t pid = fork();
    if (pid == 0)
        _exit(child());
    int status = 0;
    waitpid(pid, &status, 0);
    cr_assert(WIFEXITED(status) && WEXITSTATUS(status) == 0, "the final child failed");
    cr_expect_eq(check_latest(), TU_CKPT_TOTAL);
    cr_expect_gt(inside_save, 0, "%s: no kill landed inside a save", tag);
    cr_expect_gt(furthest, 0, "%s: no child got as far as a checkpoint before its kill", tag);
    cr_log_info("%s: %d SIGKILLs at random points of an undisturbed run's %.2f s (%d inside a save, %d after the "
                "child had finished, %d fresh restarts; the killed children got to iteration %lld between them, at most "
                "%lld): latest always named a complete, verifiable step, never an older one", tag, KILLS, whole,
                inside_save, completed, restarts, (long long)before, (long long)furthest);
    tri_fs_remove_tree(dir);
    free(dir);
    free(windows);
}

Test(checkpoint_kill, sigkill_during_saves, .timeout = 240)
{
    async_saves = false;
    kill_during_saves("kill");
}

/* The same with background saves: a kill also lands while the writer threads write, between the
 * last rank's files and rank 0's publication, and during it. */
Test(checkpoint_kill, sigkill_during_async_saves, .timeout = 240)
{
    async_saves = true;
    kill_during_saves("kill-async");
}

/* A background write that fails (a file-size limit standing in for a full disk) fails the run on
 * every rank with a message naming the file, and `latest` keeps naming the last good step. */
Test(checkpoint_kill, async_write_failure_keeps_latest, .timeout = 120)
{
    cfg = tu_tiny_config();
    cfg.n_layer = 2;
    windows = tu_make_windows((int64_t)TU_CKPT_TOTAL * GLOBAL, T, cfg.vocab_size, 5);
    char *dir = tu_ckpt_tmpdir("async-fail");
    snprintf(run_dir, sizeof run_dir, "%s/run", dir);
    tu_ckpt_run good = {.cfg = &cfg, .B = B, .T = T, .global_batch = GLOBAL, .windows = windows,
                        .layout = {.tp = 2, .pp = 1, .dp = 2, .zero = 1}, .until = 2, .save_dir = run_dir,
                        .save_interval = 1, .async_save = true};
    cr_assert_eq(tu_ckpt_train(&good), TRI_OK, "%s", tri_error_message());
    cr_assert_eq(check_latest(), 2);
    fflush(NULL);
    pid_t pid = fork();
    cr_assert_geq(pid, 0);
    if (pid == 0) {
        /* files of at most 4 KiB: the HDF5 files of the next save cannot be written */
        struct rlimit lim = {.rlim_cur = 4096, .rlim_max = 4096};
        signal(SIGXFSZ, SIG_IGN);
        if (setrlimit(RLIMIT_FSIZE, &lim) != 0)
            _exit(3);
        tu_ckpt_run r = good;
        r.load = run_dir;
        r.until = 4;
        int rc = tu_ckpt_train(&r);
        const char *msg = tri_error_message();
        fprintf(stderr, "child: status %d: %s\n", rc, msg);
        _exit(rc != TRI_OK && strstr(msg, "asynchronous checkpoint") && strstr(msg, ".h5") ? 0 : 1);
    }
    int status = 0;
    waitpid(pid, &status, 0);
    cr_expect(WIFEXITED(status) && WEXITSTATUS(status) == 0,
              "the failed background write was not reported as a failure naming the checkpoint and the file "
              "(status %d)", status);
    cr_expect_eq(check_latest(), 2, "latest no longer names the last good step");
    tri_fs_remove_tree(dir);
    free(dir);
    free(windows);
}
