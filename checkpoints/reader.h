/* checkpoints/reader.h - reading a checkpoint step: resolve, verify, assemble any box of a tensor.
 *
 * A reader opens a step directory (or a run directory's `latest`), verifies and parses its
 * manifest, and then assembles any box of any tensor's global index space from the stored pieces
 * that overlap it, whatever layout wrote them: this is how a trainer in another layout loads
 * (resharding on load) and how the tools merge and export. Each file's size and SHA-256 are
 * checked against the manifest before libhdf5 opens it, once per reader; every dataset's type and
 * dimensions are checked before it is read. */
#ifndef TRIDENT_CHECKPOINTS_READER_H
#define TRIDENT_CHECKPOINTS_READER_H

#include <hdf5.h>
#include <stdbool.h>
#include <stddef.h>

#include "checkpoints/box.h"
#include "checkpoints/manifest.h"

#define TRI_CKPT_LATEST "latest"
#define TRI_CKPT_PATH_MAX 4096

/* Dataset groups of an optimizer file: Adam's first and second moments, or SGD's and LARS's
 * momentum buffer (PyTorch's names). A
 * separate fp32 master copy, for a run whose weights are not fp32, would be the group "master". */
#define TRI_CKPT_EXP_AVG "exp_avg"
#define TRI_CKPT_EXP_AVG_SQ "exp_avg_sq"
#define TRI_CKPT_MOMENTUM "momentum_buffer"

typedef void (*tri_ckpt_progress_fn)(void *ctx, const char *what, int64_t done, int64_t total);

typedef struct tri_ckpt_reader {
    char dir[TRI_CKPT_PATH_MAX];     /* the step directory */
    tri_ckpt_manifest m;
    bool *verified;                  /* per manifest file: size and SHA-256 checked */
    hid_t *h5;                       /* per manifest file: open handle or -1 */
    tri_ckpt_progress_fn progress;   /* optional: called as files are verified */
    void *progress_ctx;
    float *scratch;                  /* one stored piece at a time (tri_ckpt_read_box_in), reused */
    int64_t scratch_n;               /* its capacity in elements */
} tri_ckpt_reader;

/* The step directory `path` names: path itself when it holds a manifest, else the step its
 * `latest` file names (one line "iter_<digits>"; anything else is refused, so a name read from
 * the checkpoint never leaves the directory). TRI_EINVAL / TRI_ECORRUPT naming the path. */
int tri_ckpt_resolve(const char *path, char *step_dir, size_t cap);

/* Whether `path` (what --load names) holds a checkpoint to resume: *found = true for a step
 * directory or a run directory with a `latest` file (tri_ckpt_resolve then reads it, refusing a
 * broken one); *found = false when there is nothing to resume yet: path does not exist, or is a
 * directory with no `latest` and no complete step directory (an interrupted first save's
 * iter_N.tmp, metrics and logs do not count). A run directory holding complete step directories
 * but no `latest` (a first save killed between its rename and `latest`) is refused (TRI_EINVAL
 * naming the newest step, to be loaded by name): starting afresh there would later replace it.
 * TRI_EINVAL also when path exists but is not a directory. */
int tri_ckpt_probe(const char *path, bool *found);

/* "iter_%07lld" and its inverse (-1 when name is not exactly "iter_<1..18 digits>"). */
void tri_ckpt_step_name(int64_t iteration, char *out, size_t cap);
int64_t tri_ckpt_parse_step_name(const char *name);

/* *buf holding at least n floats (capacity *cap, both 0/NULL at first): kept when large enough, else
 * replaced (contents not kept). Loads read tensor after tensor through one such buffer instead of an
 * allocation each: a block of a tensor's size is a fresh mapping, its pages faulted in afresh, in
 * glibc's default set-up and under AddressSanitizer. Returns *buf, NULL when out of memory. */
float *tri_ckpt_grow(float **buf, int64_t *cap, int64_t n);

/* Resolves path, reads and verifies the manifest. */
int tri_ckpt_reader_open(tri_ckpt_reader *r, const char *path);
void tri_ckpt_reader_close(tri_ckpt_reader *r);

/* Checks file f's size and SHA-256 against the manifest (once). TRI_ECORRUPT naming the file. */
int tri_ckpt_reader_verify(tri_ckpt_reader *r, int f);
/* Verifies every file of the step. */
int tri_ckpt_reader_verify_all(tri_ckpt_reader *r);

/* The full path of manifest file f. */
int tri_ckpt_reader_path(const tri_ckpt_reader *r, int f, char *out, size_t cap);

/* Fills dst (the elements of box `want` of tensor `name`, row-major) from the stored pieces of
 * model files (group NULL) or optimizer files (group TRI_CKPT_EXP_AVG / _SQ / TRI_CKPT_MOMENTUM). Elements outside the
 * tensor's logical shape (vocabulary padding) are set to zero. TRI_EINVAL when the tensor is not in
 * the checkpoint or the box's rank differs, TRI_ECORRUPT when the pieces do not cover the box
 * exactly or a file fails verification. */
int tri_ckpt_read_box(tri_ckpt_reader *r, const char *group, const char *name, const tri_box *want, float *dst);

/* The same from the files of one kind only (and, dp_rank >= 0, of that data-parallel rank only:
 * local SGD's replica files, each replica's own state), dataset group/name. */
int tri_ckpt_read_box_in(tri_ckpt_reader *r, tri_ckpt_file_kind kind, int dp_rank, const char *group,
                         const char *name, const tri_box *want, float *dst);

/* State a rank stores for itself alone (engine/train/state_shards.h: error_feedback_copy,
 * powersgd_q), which is no box of its tensor: dataset group/name of the file of `kind` saved at
 * (tp, pp, dp), read into dst (n floats) when that file holds it for the same TP shard (its
 * shard_offset and shard_shape attributes equal want's) and n long (*found true); *found false,
 * and TRI_OK, when the file, the dataset or that shard is not there (another layout saved it).
 * TRI_ECORRUPT when the file fails verification or the dataset is malformed. */
int tri_ckpt_read_own(tri_ckpt_reader *r, tri_ckpt_file_kind kind, int tp, int pp, int dp, const char *group,
                      const char *name, const tri_box *want, int64_t n, float *dst, bool *found);

/* The same entry whatever TP shard the file holds it for: its box (ndim dimensions, from the
 * shard_offset and shard_shape attributes) into *saved and its floats into *dst (malloc'd, *n of
 * them; the caller frees it), *found true; *found false and TRI_OK when the file or the dataset is
 * not there. TRI_ECORRUPT, TRI_ENOMEM. (PowerSGD's Q at another tp, checkpoints/load.c.) */
int tri_ckpt_read_own_shard(tri_ckpt_reader *r, tri_ckpt_file_kind kind, int tp, int pp, int dp, const char *group,
                            const char *name, int ndim, tri_box *saved, float **dst, int64_t *n, bool *found);

/* The whole tensor (its logical shape) into a malloc'd buffer. */
int tri_ckpt_read_tensor(tri_ckpt_reader *r, const char *group, const char *name, float **out);

#endif
