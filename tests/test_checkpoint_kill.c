/* tests/test_checkpoint_kill.c - SIGKILL at random moments never loses the last good checkpoint.
 *
 * A child process trains a small GPT on 4 thread ranks (tp 2 x dp 2, ZeRO 1), resuming from the
 * run directory's latest checkpoint when there is one and saving after every iteration (keeping the
 * last 2), so most of its time is spent saving; the parent kills it with SIGKILL (every rank at
 * once) after a random delay, 30 times. After each kill `latest`, when present, must name a complete
 * step whose every file verifies and whose every tensor reads, and the iteration it names never goes
 * back; the next child resumes from it. Finally a child runs to the end undisturbed. */
#include <criterion/criterion.h>
#include <dirent.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "checkpoints/fsutil.h"
#include "checkpoints/reader.h"
#include "engine/rng.h"
#include "engine/status.h"
#include "tests/ckpt_harness.h"

enum { B = 1, T = 8, GLOBAL = 4, KILLS = 30 };

static tri_gpt_config cfg;
static int32_t *windows;
static char run_dir[4200];

static int child(void)
{
    tu_ckpt_run r = {.cfg = &cfg, .B = B, .T = T, .global_batch = GLOBAL, .windows = windows,
                     .layout = {.tp = 2, .pp = 1, .dp = 2, .zero = 1}, .until = TU_CKPT_TOTAL,
                     .save_dir = run_dir, .save_interval = 1, .keep_last = 2};
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

Test(checkpoint_kill, sigkill_during_saves, .timeout = 240)
{
    cfg = tu_tiny_config();
    cfg.n_layer = 2;
    windows = tu_make_windows((int64_t)TU_CKPT_TOTAL * GLOBAL, T, cfg.vocab_size, 4);
    char *dir = tu_ckpt_tmpdir("kill");
    snprintf(run_dir, sizeof run_dir, "%s/run", dir);
    int64_t last = -1;
    int inside_save = 0, completed = 0, restarts = 0;
    for (int k = 0; k < KILLS; k++) {
        fflush(NULL);
        pid_t pid = fork();
        cr_assert_geq(pid, 0);
        if (pid == 0)
            _exit(child());
        /* 1-120 ms: from start-up through several iterations and their saves */
        int64_t us = 1000 + (int64_t)(tri_rng_uniform(77, 1, (uint64_t)k) * 119000.0);
        struct timespec ts = {.tv_sec = 0, .tv_nsec = (long)(us * 1000)};
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
    cr_log_info("%d SIGKILLs (%d inside a save, %d after the child had finished, %d fresh restarts; the killed "
                "children got to iteration %lld between them): latest always named a complete, verifiable step, "
                "never an older one", KILLS, inside_save, completed, restarts, (long long)before);
    tri_fs_remove_tree(dir);
    free(dir);
    free(windows);
}
