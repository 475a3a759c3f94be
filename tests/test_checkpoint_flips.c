/* tests/test_checkpoint_flips.c - every single-byte flip of a small checkpoint is refused or reads
 * identical data, never silently wrong data.
 *
 * A one-layer GPT (n_embd 8, vocab 16) saved on one rank: for every byte of every file
 * of the step (the HDF5 model and optimizer shards, the index, the manifest and its digest) and of
 * the run's `latest`, the byte is XORed with 0xFF and the checkpoint read the way a resume reads it
 * (resolve `latest`, verify the manifest, verify every file, assemble every tensor's weights and both
 * Adam moments); the outcome must be a refusal or the very same values as the intact checkpoint. In
 * process, a few thousand reads per second. A second part takes the manifest's protection away:
 * each flip of the model shard is read straight with libhdf5 (in a child process, restarted after a
 * crash inside libhdf5, which is counted rather than fatal) to measure what the dataset checks and
 * Fletcher32 catch alone. The sanitizer build flips every 53rd byte: with the slow unwinder the test
 * environment asks for, every malloc of the JSON parser costs microseconds. */
#include <criterion/criterion.h>
#include <dirent.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "checkpoints/fsutil.h"
#include "checkpoints/h5.h"
#include "checkpoints/reader.h"
#include "engine/core/status.h"
#include "tests/ckpt_harness.h"

enum { B = 1, T = 4, GLOBAL = 4 };

#if defined(__SANITIZE_ADDRESS__)
#define STRIDE 53
#else
#define STRIDE 1
#endif

typedef struct snapshot {
    int n;
    float *data[256];
    int64_t numel[256];
} snapshot;

/* Reads everything a resume reads; TRI_OK and *same when it equals ref (or fills ref when NULL). */
static int read_all(const char *run_dir, snapshot *ref, snapshot *fill, bool *same)
{
    tri_ckpt_reader r;
    int rc = tri_ckpt_reader_open(&r, run_dir);
    if (rc)
        return rc;
    rc = tri_ckpt_reader_verify_all(&r);
    const char *groups[3] = {NULL, TRI_CKPT_EXP_AVG, TRI_CKPT_EXP_AVG_SQ};
    int k = 0;
    *same = true;
    for (int t = 0; t < r.m.n_tensors && !rc; t++)
        for (int g = 0; g < 3 && !rc; g++, k++) {
            float *x = NULL;
            rc = tri_ckpt_read_tensor(&r, groups[g], r.m.tensors[t].name, &x);
            if (rc)
                break;
            int64_t n = 1;
            for (int d = 0; d < r.m.tensors[t].ndim; d++)
                n *= r.m.tensors[t].shape[d];
            if (fill) {
                fill->data[k] = x;
                fill->numel[k] = n;
                fill->n = k + 1;
                continue;
            }
            *same = *same && k < ref->n && ref->numel[k] == n && memcmp(ref->data[k], x, (size_t)n * 4) == 0;
            free(x);
        }
    if (!rc && ref && k != ref->n)
        *same = false;
    tri_ckpt_reader_close(&r);
    return rc;
}

static int64_t file_size(const char *path)
{
    FILE *f = fopen(path, "rb");
    if (!f)
        return -1;
    fseek(f, 0, SEEK_END);
    int64_t n = ftell(f);
    fclose(f);
    return n;
}

static void flip(const char *path, int64_t at)
{
    FILE *f = fopen(path, "r+b");
    cr_assert(f, "cannot open %s", path);
    fseek(f, at, SEEK_SET);
    int c = fgetc(f);
    fseek(f, at, SEEK_SET);
    fputc(c ^ 0xFF, f);
    fclose(f);
}

static char run_dir[4200], step[4300];
static char *dir;

static void save_small(void)
{
    tri_gpt_config cfg = {.n_layer = 1, .n_head = 2, .n_embd = 8, .vocab_size = 16, .n_positions = 8,
                          .init_std = 0.02f};
    int32_t *w = tu_make_windows((int64_t)TU_CKPT_TOTAL * GLOBAL, T, cfg.vocab_size, 9);
    dir = tu_ckpt_tmpdir("flips");
    snprintf(run_dir, sizeof run_dir, "%s/run", dir);
    snprintf(step, sizeof step, "%s/iter_0000002", run_dir);
    tu_ckpt_run r = {.cfg = &cfg, .B = B, .T = T, .global_batch = GLOBAL, .windows = w,
                     .layout = {.tp = 1, .pp = 1, .dp = 1, .zero = 0}, .until = 2, .save_dir = run_dir};
    cr_assert_eq(tu_ckpt_train(&r), TRI_OK, "%s", tri_error_message());
    free(w);
}

Test(checkpoint_flips, every_byte_refused_or_identical, .timeout = 240)
{
    save_small();
    snapshot ref = {0};
    bool same = false;
    cr_assert_eq(read_all(run_dir, NULL, &ref, &same), TRI_OK, "%s", tri_error_message());
    /* the files: latest, then every file of the step directory */
    char paths[64][4700];
    int n_paths = 0;
    snprintf(paths[n_paths++], sizeof paths[0], "%s/latest", run_dir);
    DIR *d = opendir(step);
    cr_assert(d);
    struct dirent *e;
    while ((e = readdir(d)) && n_paths < 64)
        if (e->d_name[0] != '.')
            snprintf(paths[n_paths++], sizeof paths[0], "%s/%s", step, e->d_name);
    closedir(d);
    int64_t cases = 0, refused = 0, identical = 0, wrong = 0;
    for (int p = 0; p < n_paths; p++) {
        int64_t size = file_size(paths[p]), file_refused = 0;
        for (int64_t at = 0; at < size; at += STRIDE) {
            flip(paths[p], at);
            int rc = read_all(run_dir, &ref, NULL, &same);
            flip(paths[p], at);
            tri_error_clear();
            cases++;
            if (rc) {
                refused++;
                file_refused++;
            } else if (same) {
                identical++;
            } else {
                wrong++;
                cr_expect(false, "flipping byte %lld of %s read different data without an error", (long long)at,
                          paths[p]);
            }
        }
        cr_log_info("%s: %lld bytes, %lld flips refused", strrchr(paths[p], '/') + 1, (long long)size,
                    (long long)file_refused);
    }
    cr_log_info("%lld single-byte flips: %lld refused, %lld read identical data, %lld silently wrong",
                (long long)cases, (long long)refused, (long long)identical, (long long)wrong);
    cr_expect_eq(wrong, 0);
    cr_expect_gt(cases, 40000 / STRIDE);
    cr_assert_eq(read_all(run_dir, &ref, NULL, &same), TRI_OK, "the restored checkpoint: %s", tri_error_message());
    cr_expect(same);
    for (int i = 0; i < ref.n; i++)
        free(ref.data[i]);
    tri_fs_remove_tree(dir);
    free(dir);
}

/* Without the manifest: reads every dataset of the model shard straight from libhdf5 with the
 * checks of checkpoints/h5.h. Returns 0 identical, 1 refused, 2 different data. */
static int h5_only(const char *path, const tri_ckpt_file *f, const tri_ckpt_manifest *m, float *const *want)
{
    hid_t h;
    if (tri_h5_open(path, &h))
        return 1;
    int verdict = 0;
    for (int k = 0; k < f->n_pieces && verdict != 1; k++) {
        const tri_ckpt_piece *pc = &f->pieces[k];
        int64_t n = tri_box_numel(&pc->box);
        float *x = malloc((size_t)n * sizeof *x);
        if (tri_h5_read_f32(h, path, m->tensors[pc->tensor].name, pc->box.ndim, pc->box.shape, x))
            verdict = 1;
        else if (memcmp(x, want[k], (size_t)n * sizeof *x) != 0)
            verdict = 2;
        free(x);
    }
    H5Fclose(h);
    return verdict;
}

Test(checkpoint_flips, hdf5_checks_alone, .timeout = 240)
{
    save_small();
    tri_ckpt_reader r;
    cr_assert_eq(tri_ckpt_reader_open(&r, run_dir), TRI_OK);
    int f = -1;
    for (int i = 0; i < r.m.n_files; i++)
        if (strcmp(r.m.files[i].name, "model_tp00_pp00.h5") == 0)
            f = i;
    cr_assert_geq(f, 0);
    const tri_ckpt_file *file = &r.m.files[f];
    float *want[128];
    for (int k = 0; k < file->n_pieces; k++) {
        want[k] = malloc((size_t)tri_box_numel(&file->pieces[k].box) * sizeof(float));
        cr_assert_eq(tri_ckpt_read_box(&r, NULL, r.m.tensors[file->pieces[k].tensor].name, &file->pieces[k].box,
                                       want[k]), TRI_OK);
    }
    char path[4600];
    snprintf(path, sizeof path, "%s/%s", step, file->name);
    int64_t size = file_size(path), counts[4] = {0};
    /* a child walks the flips from `at` on, one verdict byte per flip through a pipe; when it dies
     * inside libhdf5 the flip it was on counts as a crash and a new child goes on after it */
    for (int64_t at = 0; at < size;) {
        int fds[2];
        cr_assert_eq(pipe(fds), 0);
        fflush(NULL);
        pid_t pid = fork();
        if (pid == 0) {
            close(fds[0]);
            alarm(60);
            for (int64_t k = at; k < size; k += STRIDE) {
                flip(path, k);
                unsigned char v = (unsigned char)h5_only(path, file, &r.m, want);
                flip(path, k);
                if (write(fds[1], &v, 1) != 1)
                    _exit(1);
            }
            _exit(0);
        }
        close(fds[1]);
        unsigned char v;
        while (read(fds[0], &v, 1) == 1) {
            counts[v > 2 ? 2 : v]++;
            at += STRIDE;
        }
        close(fds[0]);
        int status = 0;
        waitpid(pid, &status, 0);
        if (at < size) { /* the child died on flip `at`: restore the byte, count it, go on */
            flip(path, at);
            counts[3]++;
            at += STRIDE;
        }
    }
    cr_log_info("model shard read by libhdf5 alone, %lld flips: %lld refused, %lld identical, %lld silently "
                "wrong, %lld crashed libhdf5 (with the manifest, all of these are refused before libhdf5)",
                (long long)(counts[0] + counts[1] + counts[2] + counts[3]), (long long)counts[1], (long long)counts[0], (long long)counts[2],
                (long long)counts[3]);
    cr_expect_eq(counts[2], 0, "Fletcher32 and the dataset checks let %lld flips through", (long long)counts[2]);
    for (int k = 0; k < file->n_pieces; k++)
        free(want[k]);
    tri_ckpt_reader_close(&r);
    tri_fs_remove_tree(dir);
    free(dir);
}
