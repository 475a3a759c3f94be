/* checkpoints/reader.c - verified reads of a checkpoint step (see reader.h). */
#include "checkpoints/reader.h"

#include <dirent.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "checkpoints/fsutil.h"
#include "checkpoints/h5.h"
#include "engine/core/status.h"

void tri_ckpt_step_name(int64_t iteration, char *out, size_t cap)
{
    snprintf(out, cap, "iter_%07lld", (long long)iteration);
}

int64_t tri_ckpt_parse_step_name(const char *name)
{
    if (strncmp(name, "iter_", 5) != 0)
        return -1;
    const char *d = name + 5;
    size_t n = strlen(d);
    if (n < 1 || n > 18)
        return -1;
    int64_t v = 0;
    for (size_t i = 0; i < n; i++) {
        if (d[i] < '0' || d[i] > '9')
            return -1;
        v = v * 10 + (d[i] - '0');
    }
    return v;
}

int tri_ckpt_resolve(const char *path, char *step_dir, size_t cap)
{
    char probe[TRI_CKPT_PATH_MAX];
    int rc = tri_fs_join(probe, sizeof probe, path, TRI_CKPT_MANIFEST_SUM);
    if (rc)
        return rc;
    if (tri_fs_exists(probe)) {
        if ((size_t)snprintf(step_dir, cap, "%s", path) >= cap)
            return TRI_ERR(TRI_EINVAL, "checkpoint path %s is too long", path);
        return TRI_OK;
    }
    rc = tri_fs_join(probe, sizeof probe, path, TRI_CKPT_LATEST);
    if (rc)
        return rc;
    if (!tri_fs_exists(probe)) {
        if (!tri_fs_is_dir(path))
            return TRI_ERR(TRI_EINVAL, "checkpoint %s: no such directory", path);
        return TRI_ERR(TRI_EINVAL, "%s is neither a checkpoint step (no %s) nor a run directory with a "
                       "'%s' file", path, TRI_CKPT_MANIFEST_SUM, TRI_CKPT_LATEST);
    }
    char *text = NULL;
    size_t n = 0;
    rc = tri_fs_read_small(probe, 64, &text, &n);
    if (rc)
        return rc;
    if (n > 0 && text[n - 1] == '\n')
        text[--n] = '\0';
    if (strlen(text) != n || tri_ckpt_parse_step_name(text) < 0) {
        free(text);
        return TRI_ERR(TRI_ECORRUPT, "%s: expected one line 'iter_<digits>'", probe);
    }
    rc = tri_fs_join(step_dir, cap, path, text);
    free(text);
    return rc;
}

int tri_ckpt_probe(const char *path, bool *found)
{
    char probe[TRI_CKPT_PATH_MAX];
    *found = false;
    if (!tri_fs_exists(path))
        return TRI_OK;
    if (!tri_fs_is_dir(path))
        return TRI_ERR(TRI_EINVAL, "checkpoint %s: not a directory (expected a run directory or a step "
                       "directory)", path);
    const char *markers[2] = {TRI_CKPT_MANIFEST_SUM, TRI_CKPT_LATEST};
    for (int k = 0; k < 2; k++) {
        int rc = tri_fs_join(probe, sizeof probe, path, markers[k]);
        if (rc)
            return rc;
        if (tri_fs_exists(probe)) {
            *found = true;
            return TRI_OK;
        }
    }
    /* no `latest`: complete step directories (renamed into place, so holding a manifest) there? */
    DIR *d = opendir(path);
    if (!d)
        return TRI_ERR(TRI_EIO, "cannot list %s: %s", path, strerror(errno));
    int64_t newest = -1;
    struct dirent *e;
    while ((e = readdir(d))) {
        int64_t it = tri_ckpt_parse_step_name(e->d_name);
        char step[TRI_CKPT_PATH_MAX];
        if (it > newest && tri_fs_join(step, sizeof step, path, e->d_name) == TRI_OK &&
            tri_fs_join(probe, sizeof probe, step, TRI_CKPT_MANIFEST_SUM) == TRI_OK && tri_fs_exists(probe))
            newest = it;
    }
    closedir(d);
    if (newest >= 0) {
        char name[64];
        tri_ckpt_step_name(newest, name, sizeof name);
        return TRI_ERR(TRI_EINVAL, "%s has complete checkpoint steps (the newest %s) but no '%s' file (a save "
                       "was stopped before it named its step); load one by name, e.g. %s/%s", path, name,
                       TRI_CKPT_LATEST, path, name);
    }
    return TRI_OK;
}

int tri_ckpt_reader_open(tri_ckpt_reader *r, const char *path)
{
    memset(r, 0, sizeof *r);
    int rc = tri_ckpt_resolve(path, r->dir, sizeof r->dir);
    if (!rc) rc = tri_manifest_read(&r->m, r->dir);
    if (rc)
        return rc;
    r->verified = calloc((size_t)r->m.n_files, sizeof *r->verified);
    r->h5 = malloc((size_t)r->m.n_files * sizeof *r->h5);
    if (!r->verified || !r->h5) {
        tri_ckpt_reader_close(r);
        return TRI_ERR(TRI_ENOMEM, "checkpoint %s: out of memory", r->dir);
    }
    for (int i = 0; i < r->m.n_files; i++)
        r->h5[i] = -1;
    return TRI_OK;
}

void tri_ckpt_reader_close(tri_ckpt_reader *r)
{
    for (int i = 0; r->h5 && i < r->m.n_files; i++)
        if (r->h5[i] >= 0)
            H5Fclose(r->h5[i]);
    free(r->h5);
    free(r->verified);
    free(r->scratch);
    tri_manifest_free(&r->m);
    memset(r, 0, sizeof *r);
}

int tri_ckpt_reader_path(const tri_ckpt_reader *r, int f, char *out, size_t cap)
{
    return tri_fs_join(out, cap, r->dir, r->m.files[f].name);
}

int tri_ckpt_reader_verify(tri_ckpt_reader *r, int f)
{
    if (r->verified[f])
        return TRI_OK;
    const tri_ckpt_file *file = &r->m.files[f];
    char path[TRI_CKPT_PATH_MAX], hex[TRI_SHA256_HEX];
    int64_t bytes = 0;
    int rc = tri_ckpt_reader_path(r, f, path, sizeof path);
    if (!rc) rc = tri_sha256_file(path, hex, &bytes);
    if (rc)
        return tri_error_context(TRI_ECORRUPT, "checkpoint %s", r->dir);
    if (bytes != file->bytes)
        return TRI_ERR(TRI_ECORRUPT, "%s has %lld bytes; the manifest says %lld (truncated or replaced)", path,
                       (long long)bytes, (long long)file->bytes);
    if (strcmp(hex, file->sha256) != 0)
        return TRI_ERR(TRI_ECORRUPT, "%s: SHA-256 %s does not match the manifest's %s: the file is corrupt",
                       path, hex, file->sha256);
    r->verified[f] = true;
    return TRI_OK;
}

int tri_ckpt_reader_verify_all(tri_ckpt_reader *r)
{
    int64_t total = 0, done = 0;
    for (int f = 0; f < r->m.n_files; f++)
        total += r->m.files[f].bytes;
    int rc = TRI_OK;
    for (int f = 0; f < r->m.n_files && !rc; f++) {
        rc = tri_ckpt_reader_verify(r, f);
        done += r->m.files[f].bytes;
        if (r->progress)
            r->progress(r->progress_ctx, "verify", done, total);
    }
    return rc;
}

/* File f opened by libhdf5, after verification. */
static int open_file(tri_ckpt_reader *r, int f, char *path, size_t cap)
{
    int rc = tri_ckpt_reader_path(r, f, path, cap);
    if (rc)
        return rc;
    if (r->h5[f] >= 0)
        return TRI_OK;
    rc = tri_ckpt_reader_verify(r, f);
    if (!rc) rc = tri_h5_open(path, &r->h5[f]);
    return rc;
}

int tri_ckpt_read_box(tri_ckpt_reader *r, const char *group, const char *name, const tri_box *want, float *dst)
{
    return tri_ckpt_read_box_in(r, group ? TRI_CKPT_OPTIM : TRI_CKPT_MODEL, -1, group, name, want, dst);
}

float *tri_ckpt_grow(float **buf, int64_t *cap, int64_t n)
{
    if (n > *cap || !*buf) {
        free(*buf);
        *cap = n > 0 ? n : 1;
        *buf = malloc((size_t)*cap * sizeof **buf);
        if (!*buf)
            *cap = 0;
    }
    return *buf;
}

int tri_ckpt_read_box_in(tri_ckpt_reader *r, tri_ckpt_file_kind kind, int dp_rank, const char *group,
                         const char *name, const tri_box *want, float *dst)
{
    int t = tri_manifest_tensor(&r->m, name);
    if (t < 0)
        return TRI_ERR(TRI_EINVAL, "checkpoint %s holds no tensor %s", r->dir, name);
    const tri_ckpt_tensor *ten = &r->m.tensors[t];
    if (want->ndim != ten->ndim)
        return TRI_ERR(TRI_EINVAL, "checkpoint %s: tensor %s has %d dimensions; the model's has %d", r->dir, name,
                       ten->ndim, want->ndim);
    int64_t n = tri_box_numel(want), need = 0, got = 0;
    memset(dst, 0, (size_t)n * sizeof *dst);
    tri_box live;
    if (tri_box_clip(want, ten->shape, &live))
        need = tri_box_numel(&live);
    int rc = TRI_OK;
    for (int f = 0; f < r->m.n_files && !rc && need > 0; f++) {
        const tri_ckpt_file *file = &r->m.files[f];
        bool mine = file->kind == kind && (dp_rank < 0 || file->dp_rank == dp_rank);
        for (int k = 0; mine && k < file->n_pieces && !rc; k++) {
            const tri_ckpt_piece *pc = &file->pieces[k];
            tri_box stored;
            if (pc->tensor != t || !tri_box_clip(&pc->box, ten->shape, &stored) || !tri_box_overlap(&stored, &live))
                continue;
            char path[TRI_CKPT_PATH_MAX], dset[TRI_CKPT_NAME_MAX + TRI_PARAM_NAME_MAX];
            int64_t len = pc->hi - pc->lo;
            float *buf = tri_ckpt_grow(&r->scratch, &r->scratch_n, len);
            if (!buf)
                return TRI_ERR(TRI_ENOMEM, "checkpoint %s: out of memory for %s", r->dir, name);
            snprintf(dset, sizeof dset, "%s%s%s", group ? group : "", group ? "/" : "", name);
            rc = open_file(r, f, path, sizeof path);
            if (!rc)
                rc = kind == TRI_CKPT_MODEL ? tri_h5_read_f32(r->h5[f], path, dset, pc->box.ndim, pc->box.shape, buf)
                                            : tri_h5_read_f32(r->h5[f], path, dset, 1, &len, buf);
            if (!rc)
                got += tri_box_copy(&pc->box, pc->lo, pc->hi, buf, want, dst, ten->shape);
        }
    }
    if (!rc && got != need)
        rc = TRI_ERR(TRI_ECORRUPT, "checkpoint %s: the stored %s pieces of %s cover %lld of the %lld elements "
                     "a rank needs (missing or overlapping shards)", r->dir, group ? group : "weight", name,
                     (long long)got, (long long)need);
    return rc;
}

/* The file of kind saved at (tp, pp, dp), opened, and whether it holds dataset group/name (its path
 * and the dataset's in path and dset); *f -1 when there is no such file. */
static int own_dataset(tri_ckpt_reader *r, tri_ckpt_file_kind kind, int tp, int pp, int dp, const char *group,
                       const char *name, int *f, char *path, char *dset, bool *exists)
{
    *f = -1;
    *exists = false;
    for (int k = 0; k < r->m.n_files && *f < 0; k++) {
        const tri_ckpt_file *file = &r->m.files[k];
        if (file->kind == kind && file->tp_rank == tp && file->pp_rank == pp && file->dp_rank == dp)
            *f = k;
    }
    if (*f < 0)
        return TRI_OK;
    snprintf(dset, TRI_CKPT_NAME_MAX + TRI_PARAM_NAME_MAX, "%s/%s", group, name);
    int rc = open_file(r, *f, path, TRI_CKPT_PATH_MAX);
    *exists = !rc && tri_h5_exists(r->h5[*f], dset);
    return rc;
}

/* Dataset dset's shard attributes (ndim dimensions) and its local range. */
static int own_attrs(tri_ckpt_reader *r, int f, const char *path, const char *dset, int ndim, int64_t *off,
                     int64_t *shape, int64_t range[2])
{
    int rc = tri_h5_read_attr_i64(r->h5[f], path, dset, "shard_offset", ndim, off);
    if (!rc) rc = tri_h5_read_attr_i64(r->h5[f], path, dset, "shard_shape", ndim, shape);
    if (!rc) rc = tri_h5_read_attr_i64(r->h5[f], path, dset, "local_range", 2, range);
    return rc;
}

int tri_ckpt_read_own_shard(tri_ckpt_reader *r, tri_ckpt_file_kind kind, int tp, int pp, int dp, const char *group,
                            const char *name, int ndim, tri_box *saved, float **dst, int64_t *n, bool *found)
{
    *found = false;
    *dst = NULL;
    int f;
    bool exists;
    char path[TRI_CKPT_PATH_MAX], dset[TRI_CKPT_NAME_MAX + TRI_PARAM_NAME_MAX];
    int rc = own_dataset(r, kind, tp, pp, dp, group, name, &f, path, dset, &exists);
    if (rc || !exists)
        return rc;
    int64_t range[2];
    saved->ndim = ndim;
    rc = own_attrs(r, f, path, dset, ndim, saved->off, saved->shape, range);
    if (!rc && (range[0] != 0 || range[1] < 0))
        rc = TRI_ERR(TRI_ECORRUPT, "checkpoint %s: %s has local_range [%lld, %lld)", path, dset, (long long)range[0],
                     (long long)range[1]);
    *n = rc ? 0 : range[1];
    if (!rc && !(*dst = malloc((size_t)(*n > 0 ? *n : 1) * sizeof **dst)))
        rc = TRI_ERR(TRI_ENOMEM, "checkpoint %s: out of memory for %s", path, dset);
    if (!rc) rc = tri_h5_read_f32(r->h5[f], path, dset, 1, n, *dst);
    if (rc) {
        free(*dst);
        *dst = NULL;
    }
    *found = rc == TRI_OK;
    return rc;
}

int tri_ckpt_read_own(tri_ckpt_reader *r, tri_ckpt_file_kind kind, int tp, int pp, int dp, const char *group,
                      const char *name, const tri_box *want, int64_t n, float *dst, bool *found)
{
    tri_box saved;
    float *x = NULL;
    int64_t len = 0;
    int rc = tri_ckpt_read_own_shard(r, kind, tp, pp, dp, group, name, want->ndim, &saved, &x, &len, found);
    *found = *found && len == n;
    for (int d = 0; *found && d < want->ndim; d++)
        *found = saved.off[d] == want->off[d] && saved.shape[d] == want->shape[d];
    if (*found)
        memcpy(dst, x, (size_t)n * sizeof *dst);
    free(x);
    return rc;
}

int tri_ckpt_read_tensor(tri_ckpt_reader *r, const char *group, const char *name, float **out)
{
    *out = NULL;
    int t = tri_manifest_tensor(&r->m, name);
    if (t < 0)
        return TRI_ERR(TRI_EINVAL, "checkpoint %s holds no tensor %s", r->dir, name);
    tri_box all = {.ndim = r->m.tensors[t].ndim};
    for (int d = 0; d < all.ndim; d++)
        all.shape[d] = r->m.tensors[t].shape[d];
    float *buf = malloc((size_t)tri_box_numel(&all) * sizeof *buf);
    if (!buf)
        return TRI_ERR(TRI_ENOMEM, "checkpoint %s: out of memory for %s", r->dir, name);
    int rc = tri_ckpt_read_box(r, group, name, &all, buf);
    if (rc)
        free(buf);
    else
        *out = buf;
    return rc;
}
