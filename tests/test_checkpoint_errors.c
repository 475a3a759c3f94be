/* tests/test_checkpoint_errors.c - checkpoints that must be refused, and refused cleanly.
 *
 * From a small saved checkpoint: a truncated file, a file whose dataset is float64 or has other
 * dimensions (with the manifest updated, so only the dataset checks can catch it), another model's
 * checkpoint (by config, and by a tensor shape with the config check passed), an unknown format
 * version, a directory that is no checkpoint, names that would leave the directory (`latest` and a
 * manifest file name), a manifest.sha256 of the wrong form or digest, and a run with another seed.
 * Each is refused with a status and a message naming the file and the dataset or field. Also:
 * --keep-last keeps the newest steps only. */
#include <criterion/criterion.h>
#include <hdf5.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "checkpoints/fsutil.h"
#include "checkpoints/h5.h"
#include "checkpoints/manifest.h"
#include "checkpoints/reader.h"
#include "engine/core/status.h"
#include "tests/ckpt_harness.h"

enum { B = 1, T = 8, GLOBAL = 4 };

static tri_gpt_config cfg;
static int32_t *windows;
static char *dir;         /* the test's directory */
static char step[4300];   /* dir/run/iter_0000002 */
static char run_dir[4200];

static tu_ckpt_run make_run(const tri_gpt_config *c)
{
    return (tu_ckpt_run){.cfg = c, .B = B, .T = T, .global_batch = GLOBAL, .windows = windows,
                         .layout = {.tp = 2, .pp = 1, .dp = 2, .zero = 1}};
}

static void setup(void)
{
    cfg = tu_tiny_config();
    cfg.n_layer = 2;
    windows = tu_make_windows((int64_t)TU_CKPT_TOTAL * GLOBAL, T, cfg.vocab_size, 3);
    dir = tu_ckpt_tmpdir("errors");
    snprintf(run_dir, sizeof run_dir, "%s/run", dir);
    snprintf(step, sizeof step, "%s/iter_0000002", run_dir);
    tu_ckpt_run r = make_run(&cfg);
    r.until = 2;
    r.save_dir = run_dir;
    cr_assert_eq(tu_ckpt_train(&r), TRI_OK, "saving: %s", tri_error_message());
}

static void teardown(void)
{
    tri_fs_remove_tree(dir);
    free(dir);
    free(windows);
}

/* Loading `path` into the same model must fail with a message holding every string of want. */
static void expect_refused(const char *path, const tri_gpt_config *c, const char *const *want, int n)
{
    tu_ckpt_run r = make_run(c);
    r.load = path;
    r.until = 3;
    int rc = tu_ckpt_train(&r);
    cr_assert_neq(rc, TRI_OK, "loading %s was accepted", path);
    const char *msg = tri_error_message();
    for (int i = 0; i < n; i++)
        cr_expect(strstr(msg, want[i]) != NULL, "the message should name '%s': %s", want[i], msg);
    cr_log_info("refused (%s): %s", tri_status_name(rc), msg);
}

static char *path_in(const char *d, const char *name)
{
    static char p[4400];
    snprintf(p, sizeof p, "%s/%s", d, name);
    return p;
}

/* Replaces the manifest's entry for `name` with the file's real size and SHA-256. */
static void reseal(const char *name)
{
    tri_ckpt_manifest m;
    cr_assert_eq(tri_manifest_read(&m, step), TRI_OK, "%s", tri_error_message());
    for (int i = 0; i < m.n_files; i++)
        if (strcmp(m.files[i].name, name) == 0)
            cr_assert_eq(tri_sha256_file(path_in(step, name), m.files[i].sha256, &m.files[i].bytes), TRI_OK);
    cr_assert_eq(tri_manifest_write(&m, step), TRI_OK, "%s", tri_error_message());
    tri_manifest_free(&m);
}

TestSuite(checkpoint_errors, .init = setup, .fini = teardown, .timeout = 120);

Test(checkpoint_errors, loads_when_intact)
{
    tu_ckpt_run r = make_run(&cfg);
    r.load = run_dir;
    r.until = 3;
    cr_assert_eq(tu_ckpt_train(&r), TRI_OK, "%s", tri_error_message());
    cr_expect_eq(r.start, 2);
}

Test(checkpoint_errors, truncated_file)
{
    cr_assert_eq(truncate(path_in(step, "model_tp01_pp00.h5"), 1000), 0);
    expect_refused(run_dir, &cfg, (const char *[]){"model_tp01_pp00.h5", "truncated"}, 2);
}

Test(checkpoint_errors, flipped_byte_in_optimizer_shard)
{
    FILE *f = fopen(path_in(step, "optim_tp00_pp00_dp001.h5"), "r+b");
    cr_assert(f);
    fseek(f, 5000, SEEK_SET);
    int c = fgetc(f);
    fseek(f, 5000, SEEK_SET);
    fputc(c ^ 0x10, f);
    fclose(f);
    expect_refused(run_dir, &cfg, (const char *[]){"optim_tp00_pp00_dp001.h5", "SHA-256"}, 2);
}

/* A model file rewritten with one dataset changed, the manifest resealed: only the dataset checks
 * stand between it and the model. */
static void rewrite_model(const char *victim, bool f64, int64_t extra_rows)
{
    tri_ckpt_reader r;
    cr_assert_eq(tri_ckpt_reader_open(&r, step), TRI_OK, "%s", tri_error_message());
    int f = -1;
    for (int i = 0; i < r.m.n_files; i++)
        if (strcmp(r.m.files[i].name, "model_tp00_pp00.h5") == 0)
            f = i;
    cr_assert_geq(f, 0);
    char tmp[4400];
    snprintf(tmp, sizeof tmp, "%s/new.h5", dir);
    hid_t out;
    cr_assert_eq(tri_h5_create(tmp, &out), TRI_OK);
    for (int k = 0; k < r.m.files[f].n_pieces; k++) {
        const tri_ckpt_piece *pc = &r.m.files[f].pieces[k];
        const char *name = r.m.tensors[pc->tensor].name;
        float *buf = malloc((size_t)(tri_box_numel(&pc->box) + 4096) * sizeof *buf);
        cr_assert_eq(tri_ckpt_read_box(&r, NULL, name, &pc->box, buf), TRI_OK, "%s", tri_error_message());
        int64_t shape[TRI_MAX_DIMS];
        memcpy(shape, pc->box.shape, sizeof shape);
        if (strcmp(name, victim) != 0) {
            cr_assert_eq(tri_h5_write_f32(out, tmp, name, pc->box.ndim, shape, buf, NULL), TRI_OK);
        } else if (!f64) {
            shape[0] += extra_rows;
            cr_assert_eq(tri_h5_write_f32(out, tmp, name, pc->box.ndim, shape, buf, NULL), TRI_OK);
        } else { /* the same values as float64, chunked with Fletcher32 like ours */
            int64_t n = tri_box_numel(&pc->box);
            double *d = malloc((size_t)n * sizeof *d);
            for (int64_t i = 0; i < n; i++)
                d[i] = buf[i];
            hsize_t dims[TRI_MAX_DIMS];
            for (int i = 0; i < pc->box.ndim; i++)
                dims[i] = (hsize_t)shape[i];
            hid_t space = H5Screate_simple(pc->box.ndim, dims, NULL), dcpl = H5Pcreate(H5P_DATASET_CREATE);
            H5Pset_chunk(dcpl, pc->box.ndim, dims);
            H5Pset_fletcher32(dcpl);
            hid_t ds = H5Dcreate2(out, name, H5T_IEEE_F64LE, space, H5P_DEFAULT, dcpl, H5P_DEFAULT);
            cr_assert_geq(H5Dwrite(ds, H5T_NATIVE_DOUBLE, H5S_ALL, H5S_ALL, H5P_DEFAULT, d), 0);
            H5Dclose(ds);
            H5Pclose(dcpl);
            H5Sclose(space);
            free(d);
        }
        free(buf);
    }
    cr_assert_eq(tri_h5_close(out, tmp), TRI_OK);
    tri_ckpt_reader_close(&r);
    cr_assert_eq(rename(tmp, path_in(step, "model_tp00_pp00.h5")), 0);
    reseal("model_tp00_pp00.h5");
}

Test(checkpoint_errors, float64_dataset)
{
    rewrite_model("wpe", true, 0);
    expect_refused(run_dir, &cfg, (const char *[]){"model_tp00_pp00.h5", "dataset wpe", "not float32"}, 3);
}

Test(checkpoint_errors, wrong_dimensions)
{
    rewrite_model("h.1.ln_2.b", false, 3);
    expect_refused(run_dir, &cfg, (const char *[]){"model_tp00_pp00.h5", "dataset h.1.ln_2.b", "expected 48"}, 3);
}

Test(checkpoint_errors, another_model_by_config)
{
    tri_gpt_config other = cfg;
    other.n_embd = 24;
    expect_refused(run_dir, &other, (const char *[]){"another model", "n_embd", "48", "24"}, 4);
}

Test(checkpoint_errors, another_model_by_shape)
{
    /* the config check passed (same key values), a tensor of another shape: the load refuses */
    tri_ckpt_manifest m;
    cr_assert_eq(tri_manifest_read(&m, step), TRI_OK);
    int t = tri_manifest_tensor(&m, "wpe");
    m.tensors[t].shape[0] = 32;
    cr_assert_eq(tri_manifest_write(&m, step), TRI_OK);
    tri_manifest_free(&m);
    expect_refused(run_dir, &cfg, (const char *[]){"tensor wpe is 32 x 48", "16 x 48", "another model"}, 3);
}

Test(checkpoint_errors, unknown_format_version)
{
    char *json = NULL;
    size_t n = 0;
    cr_assert_eq(tri_fs_read_small(path_in(step, TRI_CKPT_MANIFEST), TRI_CKPT_MANIFEST_MAX, &json, &n), TRI_OK);
    char *at = strstr(json, "\"format_version\":\t1");
    cr_assert(at, "no format_version in %s", json);
    at[strlen("\"format_version\":\t")] = '7';
    char hex[TRI_SHA256_HEX], sum[128];
    tri_sha256_buffer(json, n, hex);
    snprintf(sum, sizeof sum, "%s  %s\n", hex, TRI_CKPT_MANIFEST);
    cr_assert_eq(tri_fs_write_atomic(step, TRI_CKPT_MANIFEST, json, n), TRI_OK);
    cr_assert_eq(tri_fs_write_atomic(step, TRI_CKPT_MANIFEST_SUM, sum, strlen(sum)), TRI_OK);
    free(json);
    expect_refused(run_dir, &cfg, (const char *[]){"manifest.json", "format version 7"}, 2);
}

Test(checkpoint_errors, not_a_checkpoint)
{
    expect_refused(dir, &cfg, (const char *[]){dir, "neither a checkpoint step"}, 2);
    cr_assert_eq(remove(path_in(step, TRI_CKPT_MANIFEST_SUM)), 0);
    expect_refused(step, &cfg, (const char *[]){step, "neither a checkpoint step"}, 2);
    expect_refused(run_dir, &cfg, (const char *[]){"iter_0000002", "not a complete checkpoint"}, 2);
}

Test(checkpoint_errors, latest_leaving_the_directory)
{
    const char *evil = "../../../etc\n";
    cr_assert_eq(tri_fs_write_atomic(run_dir, TRI_CKPT_LATEST, evil, strlen(evil)), TRI_OK);
    expect_refused(run_dir, &cfg, (const char *[]){"latest", "iter_<digits>"}, 2);
}

Test(checkpoint_errors, file_name_leaving_the_directory)
{
    tri_ckpt_manifest m;
    cr_assert_eq(tri_manifest_read(&m, step), TRI_OK);
    snprintf(m.files[0].name, sizeof m.files[0].name, "../../model_tp00_pp00.h5");
    cr_assert_eq(tri_manifest_write(&m, step), TRI_OK);
    tri_manifest_free(&m);
    expect_refused(run_dir, &cfg, (const char *[]){"manifest.json", "../../model_tp00_pp00.h5", "not a plain file name"}, 3);
}

/* `text` as manifest.sha256 must be refused, by tri_manifest_read and by a load, naming the file and want */
static void expect_checksum_refused(const char *text, const char *want)
{
    cr_assert_eq(tri_fs_write_atomic(step, TRI_CKPT_MANIFEST_SUM, text, strlen(text)), TRI_OK);
    tri_ckpt_manifest m;
    cr_expect_eq(tri_manifest_read(&m, step), TRI_ECORRUPT, "accepted: %s", text);
    const char *msg = tri_error_message();
    cr_expect(strstr(msg, TRI_CKPT_MANIFEST_SUM) && strstr(msg, want), "%s: %s", text, msg);
    expect_refused(run_dir, &cfg, (const char *[]){TRI_CKPT_MANIFEST_SUM, want}, 2);
}

/* manifest.sha256 must be exactly "<64 lowercase hex>  manifest.json\n" and match the manifest: a
 * line naming another file, an uppercase digest and a digest of other bytes are each refused. */
Test(checkpoint_errors, manifest_checksum_file)
{
    char *sum = NULL, bad[160];
    size_t n = 0;
    cr_assert_eq(tri_fs_read_small(path_in(step, TRI_CKPT_MANIFEST_SUM), 256, &sum, &n), TRI_OK);
    cr_assert_eq(n, 64 + strlen("  " TRI_CKPT_MANIFEST "\n"));

    snprintf(bad, sizeof bad, "%.64s  manifest.jsn\n", sum);
    expect_checksum_refused(bad, "expected one line '<sha256>  manifest.json'");

    snprintf(bad, sizeof bad, "%s", sum); /* the digest's first letter in upper case */
    char *c = bad;
    while (c < bad + 64 && !(*c >= 'a' && *c <= 'f'))
        c++;
    cr_assert(c < bad + 64, "the digest %.64s has no letter", bad);
    *c = (char)(*c - 'a' + 'A');
    expect_checksum_refused(bad, "the digest is not 64 lowercase hex digits");

    snprintf(bad, sizeof bad, "%s", sum); /* another digest */
    bad[0] = bad[0] == '0' ? '1' : '0';
    expect_checksum_refused(bad, "the manifest is corrupt");

    cr_assert_eq(tri_fs_write_atomic(step, TRI_CKPT_MANIFEST_SUM, sum, n), TRI_OK); /* and intact again */
    tri_ckpt_manifest m;
    cr_expect_eq(tri_manifest_read(&m, step), TRI_OK, "%s", tri_error_message());
    tri_manifest_free(&m);
    free(sum);
}

Test(checkpoint_errors, another_seed)
{
    tu_ckpt_run r = make_run(&cfg);
    r.load = run_dir;
    r.until = 3;
    r.seed = 99;
    cr_assert_neq(tu_ckpt_train(&r), TRI_OK);
    cr_expect(strstr(tri_error_message(), "--seed 1234") != NULL, "%s", tri_error_message());
}

Test(checkpoint_errors, keep_last)
{
    char keep[4300];
    snprintf(keep, sizeof keep, "%s/keep", dir);
    tu_ckpt_run r = make_run(&cfg);
    r.until = 5;
    r.save_dir = keep;
    r.save_interval = 1;
    r.keep_last = 2;
    cr_assert_eq(tu_ckpt_train(&r), TRI_OK, "%s", tri_error_message());
    for (int it = 1; it <= 5; it++) {
        char p[4400];
        snprintf(p, sizeof p, "%s/iter_%07d", keep, it);
        cr_expect_eq(tri_fs_exists(p), it >= 4, "iter %d %s", it, it >= 4 ? "missing" : "not removed");
    }
    char resolved[4400];
    cr_assert_eq(tri_ckpt_resolve(keep, resolved, sizeof resolved), TRI_OK);
    cr_expect(strstr(resolved, "iter_0000005") != NULL, "latest names %s", resolved);
}
