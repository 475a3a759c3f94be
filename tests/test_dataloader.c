/* tests/test_dataloader.c - token files (atomic writer, validating reader) and the window loader
 * (epochs, shuffling, sharding by sample index). */
#include <criterion/criterion.h>
#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "engine/core/status.h"
#include "engine/data/dataloader.h"
#include "engine/train/train.h"
#include "tests/testutil.h"

/* ---- helpers ---- */

static const char *path_in(const char *dir, const char *name)
{
    static char buf[4][4200];
    static int next;
    char *p = buf[next++ % 4];
    snprintf(p, sizeof buf[0], "%s/%s", dir, name);
    return p;
}

/* ids[i] = i + offset: every position holds a distinct id, so a window is known by its first id. */
static void write_counting(const char *path, int n, int offset)
{
    int32_t *ids = malloc((size_t)n * sizeof *ids);
    for (int i = 0; i < n; i++)
        ids[i] = i + offset;
    cr_assert_eq(tri_token_file_write(path, ids, (size_t)n, 65536), TRI_OK, "%s", tri_error_message());
    free(ids);
}

/* Writes a raw file: header fields, n uint16 ids (i % 65536), then extra bytes. */
static void write_raw(const char *path, int32_t magic, int32_t version, int32_t count, int n, int extra)
{
    FILE *f = fopen(path, "wb");
    cr_assert(f);
    int32_t header[256] = {magic, version, count};
    fwrite(header, sizeof header, 1, f);
    for (int i = 0; i < n; i++) {
        uint16_t v = (uint16_t)i;
        fwrite(&v, 2, 1, f);
    }
    for (int i = 0; i < extra; i++)
        fputc(0, f);
    fclose(f);
}

static void expect_open_error(const char *path, int vocab, int code, const char *needle)
{
    tri_token_file *f = (tri_token_file *)1;
    int rc = tri_token_file_open(&f, path, vocab);
    const char *msg = tri_error_message();
    cr_assert_eq(rc, code, "%s: expected %s, got %s: %s", path, tri_status_name(code),
                 tri_status_name(rc), msg);
    cr_assert_null(f);
    cr_assert(strstr(msg, path), "message does not name the file: %s", msg);
    cr_assert(strstr(msg, needle), "message lacks \"%s\": %s", needle, msg);
}

static int count_files(const char *dir)
{
    DIR *d = opendir(dir);
    cr_assert(d);
    int n = 0;
    for (struct dirent *e; (e = readdir(d));)
        n += e->d_name[0] != '.';
    closedir(d);
    return n;
}

static tri_dataloader *open_loader(const char *path, int T, uint64_t seed, bool shuffle)
{
    tri_dataloader *dl;
    cr_assert_eq(tri_dataloader_open(&dl, path, T, 65536, seed, shuffle), TRI_OK, "%s",
                 tri_error_message());
    return dl;
}

/* ---- token files ---- */

Test(token_file, write_read_round_trip)
{
    const char *dir = tu_scratch_dir("tf_round_trip");
    const char *path = path_in(dir, "a.bin");
    enum { N = 100000 }; /* more than one write chunk */
    int32_t *ids = malloc(N * sizeof *ids);
    for (int i = 0; i < N; i++)
        ids[i] = (i * 7919) % 65536;
    cr_assert_eq(tri_token_file_write(path, ids, N, 65536), TRI_OK, "%s", tri_error_message());
    /* The bytes on disk are llm.c's layout. */
    FILE *raw = fopen(path, "rb");
    int32_t header[256];
    cr_assert_eq(fread(header, sizeof header, 1, raw), 1);
    cr_assert(header[0] == 20240520 && header[1] == 1 && header[2] == N);
    for (int i = 3; i < 256; i++)
        cr_assert_eq(header[i], 0);
    fclose(raw);
    tri_token_file *f;
    cr_assert_eq(tri_token_file_open(&f, path, 65536), TRI_OK, "%s", tri_error_message());
    cr_assert_eq(tri_token_file_count(f), N);
    cr_assert_eq(tri_token_file_id_bytes(f), 2);
    int32_t *got = malloc(N * sizeof *got);
    tri_token_file_read(f, 0, N, got);
    for (int i = 0; i < N; i++)
        cr_assert_eq(got[i], ids[i], "id %d is %d, expected %d", i, got[i], ids[i]);
    free(got);
    tri_token_file_close(f);
    cr_assert_eq(count_files(dir), 1, "temporary files left behind");
    free(ids);
}

Test(token_file, streaming_writer_appends_and_replaces_atomically)
{
    const char *dir = tu_scratch_dir("tf_stream");
    const char *path = path_in(dir, "s.bin");
    write_counting(path, 10, 0);
    tri_token_writer *w;
    cr_assert_eq(tri_token_writer_open(&w, path, 65536), TRI_OK);
    const int32_t a[] = {5, 6, 7}, b[] = {65535, 0};
    cr_assert_eq(tri_token_writer_append(w, a, 3), TRI_OK);
    /* Until commit the old file is intact and the new bytes live in a temporary file. */
    tri_token_file *f;
    cr_assert_eq(tri_token_file_open(&f, path, 65536), TRI_OK);
    cr_assert_eq(tri_token_file_count(f), 10);
    tri_token_file_close(f);
    cr_assert_eq(count_files(dir), 2);
    cr_assert_eq(tri_token_writer_append(w, b, 2), TRI_OK);
    cr_assert_eq(tri_token_writer_commit(w), TRI_OK, "%s", tri_error_message());
    cr_assert_eq(tri_token_file_open(&f, path, 65536), TRI_OK);
    cr_assert_eq(tri_token_file_count(f), 5);
    const int32_t want[] = {5, 6, 7, 65535, 0};
    int32_t got[5];
    tri_token_file_read(f, 0, 5, got);
    for (int i = 0; i < 5; i++)
        cr_assert_eq(got[i], want[i]);
    tri_token_file_close(f);
    cr_assert_eq(count_files(dir), 1);
}

Test(token_file, writer_rejects_ids_outside_the_vocabulary_and_leaves_nothing)
{
    const char *dir = tu_scratch_dir("tf_bad_id");
    const char *path = path_in(dir, "x.bin");
    const int32_t ids[] = {1, 2, 65536, 3};
    cr_assert_eq(tri_token_file_write(path, ids, 4, 65536), TRI_EINVAL);
    cr_assert(strstr(tri_error_message(), "position 2 has id 65536, outside the vocabulary [0, 65536)"),
              "%s", tri_error_message());
    cr_assert_eq(tri_token_file_write(path, ids, 4, 300), TRI_EINVAL); /* uint32 file, id >= vocab */
    cr_assert(strstr(tri_error_message(), "[0, 300)"), "%s", tri_error_message());
    cr_assert_eq(tri_token_file_write(path, ids, 4, 70000), TRI_OK, "%s", tri_error_message());
    unlink(path);
    const int32_t neg[] = {-4};
    cr_assert_eq(tri_token_file_write(path, neg, 1, 65536), TRI_EINVAL);
    cr_assert(strstr(tri_error_message(), "-4"), "%s", tri_error_message());
    cr_assert_eq(tri_token_file_write(path, neg, 1, 1 << 20), TRI_EINVAL);
    cr_assert(strstr(tri_error_message(), "-4"), "%s", tri_error_message());
    cr_assert_eq(tri_token_file_write(path, ids, 1, 0), TRI_EINVAL);
    cr_assert(strstr(tri_error_message(), "vocab_size 0"), "%s", tri_error_message());
    cr_assert_eq(count_files(dir), 0, "a failed write left a file");
    /* abort after some appends also leaves nothing */
    tri_token_writer *w;
    cr_assert_eq(tri_token_writer_open(&w, path, 65536), TRI_OK);
    cr_assert_eq(tri_token_writer_append(w, ids, 2), TRI_OK);
    tri_token_writer_abort(w);
    cr_assert_eq(count_files(dir), 0);
}

Test(token_file, writer_reports_missing_directory)
{
    cr_assert_eq(tri_token_file_write("/nonexistent-dir/x.bin", (const int32_t[]){1}, 1, 10), TRI_EIO);
    cr_assert(strstr(tri_error_message(), "/nonexistent-dir/x.bin"), "%s", tri_error_message());
}

Test(token_file, empty_file_is_valid)
{
    const char *dir = tu_scratch_dir("tf_empty");
    const char *path = path_in(dir, "e.bin");
    cr_assert_eq(tri_token_file_write(path, NULL, 0, 10), TRI_OK);
    tri_token_file *f;
    cr_assert_eq(tri_token_file_open(&f, path, 10), TRI_OK, "%s", tri_error_message());
    cr_assert_eq(tri_token_file_count(f), 0);
    tri_token_file_close(f);
}

Test(token_file, bad_files_are_rejected_with_named_errors)
{
    const char *dir = tu_scratch_dir("tf_bad");
    const char *p;
    p = path_in(dir, "magic.bin");
    write_raw(p, 20240521, 1, 10, 10, 0);
    expect_open_error(p, 100, TRI_ECORRUPT, "magic is 20240521, expected 20240520 (uint16 ids) or 20240801 (uint32 ids)");
    p = path_in(dir, "version.bin");
    write_raw(p, 20240520, 2, 10, 10, 0);
    expect_open_error(p, 100, TRI_ECORRUPT, "version is 2, expected 1 with magic 20240520");
    p = path_in(dir, "version_u32.bin"); /* a uint16 file's version under the uint32 magic */
    write_raw(p, 20240801, 1, 5, 10, 0);
    expect_open_error(p, 100, TRI_ECORRUPT, "version is 1, expected 7 with magic 20240801 (uint32 token ids)");
    p = path_in(dir, "truncated_u32.bin"); /* 10 uint16 = 5 uint32 ids: the count must say 5 */
    write_raw(p, 20240801, 7, 10, 10, 0);
    expect_open_error(p, 100, TRI_ECORRUPT, "header token count 10 needs 1064 bytes, the file has 1044");
    p = path_in(dir, "trailing_u32.bin");
    write_raw(p, 20240801, 7, 4, 10, 0);
    expect_open_error(p, 100, TRI_ECORRUPT, "4 trailing bytes");
    p = path_in(dir, "truncated.bin");
    write_raw(p, 20240520, 1, 10, 9, 0);
    expect_open_error(p, 100, TRI_ECORRUPT, "truncated");
    p = path_in(dir, "trailing.bin");
    write_raw(p, 20240520, 1, 10, 10, 3);
    expect_open_error(p, 100, TRI_ECORRUPT, "3 trailing bytes");
    p = path_in(dir, "short_header.bin");
    FILE *f = fopen(p, "wb");
    fputs("20240520", f);
    fclose(f);
    expect_open_error(p, 100, TRI_ECORRUPT, "1024-byte header");
    p = path_in(dir, "negative.bin");
    write_raw(p, 20240520, 1, -5, 0, 0);
    expect_open_error(p, 100, TRI_ECORRUPT, "count is -5");
    expect_open_error(path_in(dir, "missing.bin"), 100, TRI_EIO, "No such file");
}

Test(token_file, ids_must_be_below_vocab_size)
{
    const char *dir = tu_scratch_dir("tf_vocab");
    const char *p = path_in(dir, "v.bin");
    const int32_t ids[] = {0, 5, 256, 300, 256, 1};
    cr_assert_eq(tri_token_file_write(p, ids, 6, 65536), TRI_OK);
    expect_open_error(p, 257, TRI_EINVAL, "position 3 has id 300");
    expect_open_error(p, 256, TRI_EINVAL, "position 2 has id 256");
    tri_token_file *f;
    cr_assert_eq(tri_token_file_open(&f, p, 301), TRI_OK, "%s", tri_error_message());
    tri_token_file_close(f);
}

/* ---- loader ---- */

Test(dataloader, too_few_tokens_and_bad_T)
{
    const char *dir = tu_scratch_dir("dl_few");
    const char *p = path_in(dir, "few.bin");
    write_counting(p, 8, 0);
    tri_dataloader *dl = (tri_dataloader *)1;
    cr_assert_eq(tri_dataloader_open(&dl, p, 8, 100, 1, true), TRI_EINVAL);
    cr_assert_null(dl);
    const char *msg = tri_error_message();
    cr_assert(strstr(msg, p) && strstr(msg, "8 tokens") && strstr(msg, "T+1 = 9"), "%s", msg);
    cr_assert_eq(tri_dataloader_open(&dl, p, 7, 100, 1, true), TRI_OK, "%s", tri_error_message());
    cr_assert_eq(tri_dataloader_windows(dl), 1);
    tri_dataloader_close(dl);
    cr_assert_eq(tri_dataloader_open(&dl, p, 0, 100, 1, true), TRI_EINVAL);
    cr_assert(strstr(tri_error_message(), "T = 0"), "%s", tri_error_message());
    /* errors of the file pass through */
    cr_assert_eq(tri_dataloader_open(&dl, path_in(dir, "nope.bin"), 4, 100, 1, true), TRI_EIO);
    cr_assert_eq(tri_dataloader_open(&dl, p, 4, 5, 1, true), TRI_EINVAL);
    cr_assert(strstr(tri_error_message(), "position 5 has id 5"), "%s", tri_error_message());
}

Test(dataloader, windows_in_order_with_shifted_targets)
{
    const char *dir = tu_scratch_dir("dl_order");
    const char *p = path_in(dir, "o.bin");
    enum { T = 8, COUNT = 86 }; /* (86 - 1) / 8 = 10 windows; the last 5 tokens are unused */
    write_counting(p, COUNT, 100);
    tri_dataloader *dl = open_loader(p, T, 0, false);
    cr_assert_eq(tri_dataloader_windows(dl), 10);
    cr_assert_eq(tri_dataloader_tokens(dl), COUNT);
    int32_t out[25][T + 1];
    cr_assert_eq(tri_dataloader_fill(dl, 0, 25, &out[0][0]), TRI_OK);
    for (int k = 0; k < 25; k++) {
        int w = k % 10; /* epoch k / 10 repeats the order */
        for (int t = 0; t <= T; t++)
            cr_assert_eq(out[k][t], 100 + w * T + t, "sample %d token %d", k, t);
        /* target t (row[t + 1]) is the token after input t (row[t]) */
        for (int t = 0; t < T; t++)
            cr_assert_eq(out[k][t + 1], out[k][t] + 1);
    }
    tri_dataloader_close(dl);
}

/* First ids of samples [epoch * nw, (epoch + 1) * nw): the windows in visiting order. */
static void epoch_order(tri_dataloader *dl, int epoch, int T, int nw, int32_t *first_ids)
{
    int32_t *rows = malloc((size_t)nw * (size_t)(T + 1) * sizeof *rows);
    cr_assert_eq(tri_dataloader_fill(dl, (int64_t)epoch * nw, nw, rows), TRI_OK);
    for (int i = 0; i < nw; i++) {
        first_ids[i] = rows[i * (T + 1)];
        for (int t = 0; t <= T; t++)
            cr_assert_eq(rows[i * (T + 1) + t], first_ids[i] + t, "a window is not contiguous");
    }
    free(rows);
}

Test(dataloader, every_window_once_per_epoch_in_a_new_order)
{
    const char *dir = tu_scratch_dir("dl_epoch");
    const char *p = path_in(dir, "e.bin");
    enum { T = 4, NW = 500 };
    write_counting(p, NW * T + 1, 0);
    tri_dataloader *dl = open_loader(p, T, 1234, true);
    cr_assert_eq(tri_dataloader_windows(dl), NW);
    int32_t order[3][NW];
    for (int e = 0; e < 3; e++) {
        epoch_order(dl, e, T, NW, order[e]);
        int seen[NW] = {0};
        for (int i = 0; i < NW; i++) {
            cr_assert_eq(order[e][i] % T, 0, "window starts at %d, not a multiple of T", order[e][i]);
            seen[order[e][i] / T]++;
        }
        for (int w = 0; w < NW; w++)
            cr_assert_eq(seen[w], 1, "epoch %d visits window %d %d times", e, w, seen[w]);
    }
    int in_place = 0;
    for (int i = 0; i < NW; i++)
        in_place += order[0][i] == i * T;
    cr_assert_lt(in_place, 20, "epoch 0 is barely shuffled (%d of %d in place)", in_place, NW);
    cr_assert(memcmp(order[0], order[1], sizeof order[0]) != 0, "epochs 0 and 1 share an order");
    cr_assert(memcmp(order[1], order[2], sizeof order[1]) != 0, "epochs 1 and 2 share an order");
    tri_dataloader_close(dl);
}

Test(dataloader, deterministic_for_a_seed_and_different_across_seeds)
{
    const char *dir = tu_scratch_dir("dl_seed");
    const char *p = path_in(dir, "s.bin");
    enum { T = 16, NW = 64 };
    write_counting(p, NW * T + 1, 0);
    tri_dataloader *a = open_loader(p, T, 42, true), *b = open_loader(p, T, 42, true);
    tri_dataloader *c = open_loader(p, T, 43, true);
    enum { N = 3 * NW };
    int32_t *ra = malloc(N * (T + 1) * sizeof(int32_t)), *rb = malloc(N * (T + 1) * sizeof(int32_t));
    int32_t *rc = malloc(N * (T + 1) * sizeof(int32_t));
    cr_assert_eq(tri_dataloader_fill(a, 0, N, ra), TRI_OK);
    /* b reads the same samples in a scattered order of calls: epochs 2, 0, 1 */
    cr_assert_eq(tri_dataloader_fill(b, 2 * NW, NW, rb + 2 * NW * (T + 1)), TRI_OK);
    cr_assert_eq(tri_dataloader_fill(b, 0, NW, rb), TRI_OK);
    cr_assert_eq(tri_dataloader_fill(b, NW, NW, rb + NW * (T + 1)), TRI_OK);
    cr_assert(memcmp(ra, rb, N * (T + 1) * sizeof(int32_t)) == 0, "same seed, different samples");
    cr_assert_eq(tri_dataloader_fill(c, 0, N, rc), TRI_OK);
    int differ = 0;
    for (int k = 0; k < N; k++)
        differ += ra[k * (T + 1)] != rc[k * (T + 1)];
    cr_assert_gt(differ, N / 2, "seeds 42 and 43 give nearly the same order (%d of %d differ)", differ, N);
    free(ra);
    free(rb);
    free(rc);
    tri_dataloader_close(a);
    tri_dataloader_close(b);
    tri_dataloader_close(c);
}

Test(dataloader, sharding_by_sample_index_equals_the_unsharded_stream)
{
    /* 4 data-parallel ranks, 3 rows each, global batch 12; 30 steps cross several epochs (NW=37,
     * not a multiple of 12, so batches straddle epoch boundaries). Each rank has its own loader. */
    const char *dir = tu_scratch_dir("dl_shard");
    const char *p = path_in(dir, "d.bin");
    enum { T = 5, NW = 37, DP = 4, B = 3, GB = DP * B, STEPS = 30, ROW = T + 1 };
    write_counting(p, NW * T + 3, 7);
    tri_dataloader *whole = open_loader(p, T, 99, true);
    tri_dataloader *rank[DP];
    for (int r = 0; r < DP; r++)
        rank[r] = open_loader(p, T, 99, true);
    int32_t global[GB * ROW], local[B * ROW];
    for (int step = 0; step < STEPS; step++) {
        cr_assert_eq(tri_dataloader_fill(whole, (int64_t)step * GB, GB, global), TRI_OK);
        for (int r = 0; r < DP; r++) {
            cr_assert_eq(tri_dataloader_fill(rank[r], (int64_t)step * GB + r * B, B, local), TRI_OK);
            cr_assert(memcmp(local, global + r * B * ROW, sizeof local) == 0,
                      "step %d rank %d differs from the global batch", step, r);
        }
    }
    /* resuming: a fresh loader started at a consumed-sample count continues the same stream */
    tri_dataloader *resumed = open_loader(p, T, 99, true);
    cr_assert_eq(tri_dataloader_fill(resumed, (int64_t)(STEPS - 1) * GB, GB, global), TRI_OK);
    int32_t again[GB * ROW];
    cr_assert_eq(tri_dataloader_fill(whole, (int64_t)(STEPS - 1) * GB, GB, again), TRI_OK);
    cr_assert(memcmp(global, again, sizeof again) == 0, "a resumed loader reads other samples");
    tri_dataloader_close(resumed);
    tri_dataloader_close(whole);
    for (int r = 0; r < DP; r++)
        tri_dataloader_close(rank[r]);
}

Test(dataloader, fill_rejects_bad_ranges)
{
    const char *dir = tu_scratch_dir("dl_range");
    const char *p = path_in(dir, "r.bin");
    write_counting(p, 33, 0);
    tri_dataloader *dl = open_loader(p, 8, 0, true);
    int32_t out[9];
    cr_assert_eq(tri_dataloader_fill(dl, -1, 1, out), TRI_EINVAL);
    cr_assert(strstr(tri_error_message(), p), "%s", tri_error_message());
    cr_assert_eq(tri_dataloader_fill(dl, 0, -1, out), TRI_EINVAL);
    cr_assert_eq(tri_dataloader_fill(dl, INT64_MAX, 2, out), TRI_EINVAL);
    cr_assert_eq(tri_dataloader_fill(dl, 5, 0, out), TRI_OK);
    /* the loader plugs into the trainer's batch source */
    tri_batch_source src = {.ctx = dl, .fill = tri_dataloader_fill_ctx};
    int32_t a[2 * 9], b[2 * 9];
    cr_assert_eq(tri_dataloader_fill(dl, 3, 2, a), TRI_OK);
    cr_assert_eq(src.fill(src.ctx, 3, 2, b), TRI_OK);
    cr_assert(memcmp(a, b, sizeof a) == 0);
    tri_dataloader_close(dl);
}

/* ---- uint32 token files (vocabularies above 65,536) ---- */

Test(token_file, vocabularies_above_65536_write_llmc_uint32_files)
{
    const char *dir = tu_scratch_dir("tf_u32");
    const char *path = path_in(dir, "llama3.bin");
    enum { N = 70000, V = 128256 }; /* Llama 3's vocabulary; more than one write chunk */
    int32_t *ids = malloc(N * sizeof *ids);
    for (int i = 0; i < N; i++)
        ids[i] = (int32_t)(((int64_t)i * 104729) % V);
    ids[N - 1] = V - 1;
    cr_assert_eq(tri_token_file_write(path, ids, N, V), TRI_OK, "%s", tri_error_message());
    /* The bytes on disk are llm.c's Llama 3 layout: magic 20240801, version 7, uint32 ids. */
    FILE *raw = fopen(path, "rb");
    int32_t header[256];
    cr_assert_eq(fread(header, sizeof header, 1, raw), 1);
    cr_assert(header[0] == 20240801 && header[1] == 7 && header[2] == N, "%d %d %d", header[0], header[1],
              header[2]);
    for (int i = 3; i < 256; i++)
        cr_assert_eq(header[i], 0);
    uint32_t *body = malloc(N * sizeof *body);
    cr_assert_eq(fread(body, sizeof *body, N, raw), (size_t)N);
    cr_assert_eq(fgetc(raw), EOF, "bytes after the ids");
    for (int i = 0; i < N; i++)
        cr_assert_eq(body[i], (uint32_t)ids[i]);
    fclose(raw);
    tri_token_file *f;
    cr_assert_eq(tri_token_file_open(&f, path, V), TRI_OK, "%s", tri_error_message());
    cr_assert_eq(tri_token_file_id_bytes(f), 4);
    cr_assert_eq(tri_token_file_count(f), N);
    int32_t *got = malloc(N * sizeof *got);
    tri_token_file_read(f, 0, N, got);
    cr_assert_arr_eq(got, ids, N * sizeof *ids);
    tri_token_file_read(f, N - 3, 3, got); /* a range inside the file */
    cr_assert_arr_eq(got, ids + N - 3, 3 * sizeof *ids);
    tri_token_file_close(f);
    /* every id is checked against the model's vocabulary, above 65,535 too */
    expect_open_error(path, V - 1, TRI_EINVAL, "has id 128255, not below the model's vocab_size 128255");
    cr_assert_eq(count_files(dir), 1, "temporary files left behind");
    free(body);
    free(got);
    free(ids);
}

Test(token_file, the_writer_keeps_uint16_up_to_65536_tokens)
{
    const char *dir = tu_scratch_dir("tf_width");
    const int vocabs[] = {1, 257, 50257, 65536, 65537, 128256};
    const int widths[] = {2, 2, 2, 2, 4, 4};
    for (int k = 0; k < 6; k++) {
        const char *p = path_in(dir, "w.bin");
        const int32_t ids[] = {0, vocabs[k] - 1};
        cr_assert_eq(tri_token_file_write(p, ids, 2, vocabs[k]), TRI_OK, "%s", tri_error_message());
        tri_token_file *f;
        cr_assert_eq(tri_token_file_open(&f, p, vocabs[k]), TRI_OK, "%s", tri_error_message());
        cr_assert_eq(tri_token_file_id_bytes(f), widths[k], "vocab %d", vocabs[k]);
        int32_t got[2];
        tri_token_file_read(f, 0, 2, got);
        cr_assert(got[0] == 0 && got[1] == vocabs[k] - 1);
        tri_token_file_close(f);
    }
}

/* The loader gives the same samples from a uint16 and a uint32 file of the same ids. */
Test(dataloader, uint32_files_give_the_samples_of_uint16_files)
{
    const char *dir = tu_scratch_dir("dl_u32");
    const char *p16 = path_in(dir, "a16.bin"), *p32 = path_in(dir, "a32.bin");
    enum { T = 8, NW = 40, COUNT = NW * T + 5 };
    int32_t ids[COUNT];
    for (int i = 0; i < COUNT; i++)
        ids[i] = (i * 7919) % 65536;
    cr_assert_eq(tri_token_file_write(p16, ids, COUNT, 65536), TRI_OK, "%s", tri_error_message());
    cr_assert_eq(tri_token_file_write(p32, ids, COUNT, 100000), TRI_OK, "%s", tri_error_message());
    for (int shuffle = 0; shuffle < 2; shuffle++) {
        tri_dataloader *a, *b;
        cr_assert_eq(tri_dataloader_open(&a, p16, T, 65536, 5, shuffle), TRI_OK, "%s", tri_error_message());
        cr_assert_eq(tri_dataloader_open(&b, p32, T, 100000, 5, shuffle), TRI_OK, "%s", tri_error_message());
        enum { S = 3 * NW + 7 };
        static int32_t ra[S * (T + 1)], rb[S * (T + 1)];
        cr_assert_eq(tri_dataloader_fill(a, 0, S, ra), TRI_OK);
        cr_assert_eq(tri_dataloader_fill(b, 0, S, rb), TRI_OK);
        cr_assert_arr_eq(ra, rb, sizeof ra, "shuffle %d", shuffle);
        /* and the windows are the file's: sample 1 in file order starts at token T */
        if (!shuffle)
            cr_assert_arr_eq(rb + (T + 1), ids + T, (T + 1) * sizeof *ids);
        tri_dataloader_close(a);
        tri_dataloader_close(b);
    }
}
