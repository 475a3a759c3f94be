/* engine/data/dataloader.c - windows of T+1 tokens, one permutation per epoch (see dataloader.h).
 *
 * The permutation of an epoch is a Fisher-Yates shuffle (Knuth, TAOCP vol. 2, Algorithm 3.4.2P)
 * driven by the counter RNG at (seed, stream of the epoch), so it depends on nothing but
 * (seed, epoch, n_windows). It is built when fill first needs that epoch and kept until another
 * epoch is needed: consecutive fills, the usual pattern, rebuild it once per epoch. */
#include "engine/data/dataloader.h"

#include <stdlib.h>

#include "engine/core/rng.h"
#include "engine/core/status.h"

struct tri_dataloader {
    tri_token_file *file;
    int T;
    int64_t n_windows;
    uint64_t seed;
    bool shuffle;
    uint32_t *perm;     /* (n_windows) window of each position of perm_epoch; shuffle only */
    int64_t perm_epoch; /* epoch perm holds, -1 for none */
};

int tri_dataloader_open(tri_dataloader **out, const char *path, int T, int vocab_size,
                        uint64_t seed, bool shuffle)
{
    *out = NULL;
    if (T < 1)
        return TRI_ERR(TRI_EINVAL, "token file '%s': window length T = %d, expected >= 1", path, T);
    tri_dataloader *dl = calloc(1, sizeof *dl);
    if (!dl)
        return TRI_ERR(TRI_ENOMEM, "token file '%s': out of memory", path);
    int rc = tri_token_file_open(&dl->file, path, vocab_size);
    if (rc != TRI_OK)
        goto out_free;
    int64_t count = tri_token_file_count(dl->file);
    if (count < (int64_t)T + 1) {
        rc = TRI_ERR(TRI_EINVAL, "token file '%s': %lld tokens, fewer than one window of T+1 = %lld",
                     path, (long long)count, (long long)T + 1);
        goto out_free;
    }
    dl->T = T;
    dl->n_windows = (count - 1) / T;
    dl->seed = seed;
    dl->shuffle = shuffle;
    dl->perm_epoch = -1;
    if (shuffle) {
        dl->perm = malloc((size_t)dl->n_windows * sizeof *dl->perm);
        if (!dl->perm) {
            rc = TRI_ERR(TRI_ENOMEM, "token file '%s': cannot allocate a permutation of %lld "
                         "windows", path, (long long)dl->n_windows);
            goto out_free;
        }
    }
    *out = dl;
    return TRI_OK;
out_free:
    tri_dataloader_close(dl);
    return rc;
}

void tri_dataloader_close(tri_dataloader *dl)
{
    if (!dl)
        return;
    tri_token_file_close(dl->file);
    free(dl->perm);
    free(dl);
}

int64_t tri_dataloader_windows(const tri_dataloader *dl)
{
    return dl->n_windows;
}

int64_t tri_dataloader_tokens(const tri_dataloader *dl)
{
    return tri_token_file_count(dl->file);
}

/* Fills dl->perm with epoch's permutation of 0..n_windows-1. */
static void build_permutation(tri_dataloader *dl, int64_t epoch)
{
    tri_rng rng;
    tri_rng_init(&rng, dl->seed, tri_rng_hash_str("dataloader.epoch") ^ (uint64_t)epoch);
    int64_t n = dl->n_windows;
    for (int64_t i = 0; i < n; i++)
        dl->perm[i] = (uint32_t)i;
    /* Modulo bias is below n / 2^64, far under anything a test or training run could see. */
    for (int64_t i = n - 1; i > 0; i--) {
        int64_t j = (int64_t)(tri_rng_next_u64(&rng) % (uint64_t)(i + 1));
        uint32_t t = dl->perm[i];
        dl->perm[i] = dl->perm[j];
        dl->perm[j] = t;
    }
    dl->perm_epoch = epoch;
}

/* The window sample k reads. */
static int64_t window_of(tri_dataloader *dl, int64_t k)
{
    int64_t epoch = k / dl->n_windows, pos = k % dl->n_windows;
    if (!dl->shuffle)
        return pos;
    if (epoch != dl->perm_epoch)
        build_permutation(dl, epoch);
    return dl->perm[pos];
}

int tri_dataloader_fill(tri_dataloader *dl, int64_t first_sample, int64_t n, int32_t *out)
{
    if (first_sample < 0 || n < 0 || first_sample > INT64_MAX - n)
        return TRI_ERR(TRI_EINVAL, "token file '%s': samples [%lld, +%lld) are not a valid range",
                       tri_token_file_path(dl->file), (long long)first_sample, (long long)n);
    const int64_t row = (int64_t)dl->T + 1;
    for (int64_t i = 0; i < n; i++)
        tri_token_file_read(dl->file, window_of(dl, first_sample + i) * dl->T, row, out + i * row);
    return TRI_OK;
}

int tri_dataloader_fill_ctx(void *dl, int64_t first_sample, int64_t n, int32_t *out)
{
    return tri_dataloader_fill(dl, first_sample, n, out);
}
