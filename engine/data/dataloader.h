/* engine/data/dataloader.h - training samples from a token file: windows, epochs, shuffling, sharding.
 *
 * A sample is a window of T+1 consecutive tokens: input = its first T, target = its last T (the
 * input shifted by one), as in llm.c's loader. An epoch's windows start at multiples of T, so
 * n_windows = (count - 1) / T and windows share only their boundary token. The loader presents an
 * endless global sample stream: sample k is window k % n_windows of epoch k / n_windows. With
 * shuffling, each epoch visits its windows in its own permutation, a pure function of
 * (seed, epoch); without, in file order (validation).
 *
 * Addressing samples by global index makes data parallelism and resumption trivial: a rank
 * holding micro-batch rows [r*B, (r+1)*B) of global batch g fills samples g*B_global + r*B, ...;
 * a resumed run continues from its consumed-sample count. Every rank opens its own loader (no
 * globals) and all agree on every sample. */
#ifndef TRIDENT_ENGINE_DATA_DATALOADER_H
#define TRIDENT_ENGINE_DATA_DATALOADER_H

#include <stdbool.h>
#include <stdint.h>

#include "engine/data/token_file.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct tri_dataloader tri_dataloader;

/* Opens the token file at path (validated as by tri_token_file_open against vocab_size) for
 * windows of T+1 tokens. shuffle: permute windows per epoch from seed; off: file order.
 * Returns TRI_OK, the errors of tri_token_file_open, or TRI_EINVAL (T < 1, or fewer than T+1
 * tokens in the file: the message names the file, its count and T+1), or TRI_ENOMEM. */
int tri_dataloader_open(tri_dataloader **out, const char *path, int T, int vocab_size,
                        uint64_t seed, bool shuffle);

/* Unmaps and frees (NULL-safe). */
void tri_dataloader_close(tri_dataloader *dl);

/* Windows per epoch: (count - 1) / T. */
int64_t tri_dataloader_windows(const tri_dataloader *dl);

/* Tokens in the file. */
int64_t tri_dataloader_tokens(const tri_dataloader *dl);

/* Writes samples [first_sample, first_sample + n) of the global stream into out, shape (n, T+1),
 * row i holding the T+1 token ids of sample first_sample + i (inputs = row[0..T), targets =
 * row[1..T]). Deterministic for (file, T, seed, shuffle). Mutates a per-loader cache of the current
 * epoch's permutation, so a loader is used by one thread at a time.
 * Returns TRI_OK or TRI_EINVAL (first_sample < 0, n < 0, or the range overflows int64). */
int tri_dataloader_fill(tri_dataloader *dl, int64_t first_sample, int64_t n, int32_t *out);

/* tri_dataloader_fill with the loader passed as void *, the shape of a batch-source callback
 * (engine/train/train.h: `(tri_batch_source){.ctx = dl, .fill = tri_dataloader_fill_ctx}`). */
int tri_dataloader_fill_ctx(void *dl, int64_t first_sample, int64_t n, int32_t *out);

#ifdef __cplusplus
}
#endif

#endif
