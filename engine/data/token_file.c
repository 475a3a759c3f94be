/* engine/data/token_file.c - llm.c token files: atomic writer and validating memory-mapped reader
 * (see token_file.h). */
#include "engine/data/token_file.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "engine/core/file.h"
#include "engine/core/status.h"

#define CHUNK 32768 /* ids converted and written per write() */

struct tri_token_writer {
    char *path;     /* final name */
    char *tmp_path; /* where the bytes go until commit */
    int fd;
    int64_t count;  /* ids written so far */
    int vocab_size; /* ids are in [0, vocab_size) */
    int id_bytes;   /* 2 (uint16 file) or 4 (uint32 file) */
    uint16_t chunk16[CHUNK];
    uint32_t chunk32[CHUNK];
};

struct tri_token_file {
    char *path;
    void *map;
    size_t map_bytes;
    const void *ids; /* uint16_t or uint32_t, id_bytes each */
    int id_bytes;
    int64_t count;
};

static int write_all(int fd, const void *buf, size_t n, const char *path)
{
    const char *p = buf;
    while (n > 0) {
        ssize_t k = write(fd, p, n);
        if (k < 0 && errno == EINTR)
            continue;
        if (k <= 0)
            return TRI_ERR(TRI_EIO, "token file '%s': write failed: %s", path,
                           k < 0 ? strerror(errno) : "no progress");
        p += k;
        n -= (size_t)k;
    }
    return TRI_OK;
}

/* fsync of the directory holding path, so the rename itself survives a crash. */
static int sync_parent_dir(const char *path)
{
    char dir[4096];
    const char *slash = strrchr(path, '/');
    size_t n = slash ? (size_t)(slash - path) : 0;
    if (n >= sizeof dir)
        return TRI_ERR(TRI_EINVAL, "token file '%s': directory name too long", path);
    if (!slash)
        strcpy(dir, ".");
    else if (n == 0)
        strcpy(dir, "/");
    else {
        memcpy(dir, path, n);
        dir[n] = '\0';
    }
    int fd = open(dir, O_RDONLY);
    if (fd < 0)
        return TRI_ERR(TRI_EIO, "token file '%s': cannot open directory '%s': %s", path, dir,
                       strerror(errno));
    int rc = fsync(fd) == 0 || errno == EINVAL ? TRI_OK
             : TRI_ERR(TRI_EIO, "token file '%s': fsync of directory '%s' failed: %s", path, dir,
                       strerror(errno));
    close(fd);
    return rc;
}

static void writer_free(tri_token_writer *w)
{
    free(w->path);
    free(w->tmp_path);
    free(w);
}

int tri_token_writer_open(tri_token_writer **out, const char *path, int vocab_size)
{
    *out = NULL;
    if (vocab_size < 1)
        return TRI_ERR(TRI_EINVAL, "token file '%s': vocab_size %d must be positive", path, vocab_size);
    int rc = TRI_OK;
    tri_token_writer *w = calloc(1, sizeof *w);
    size_t n = strlen(path);
    if (!w)
        return TRI_ERR(TRI_ENOMEM, "token file '%s': out of memory", path);
    w->fd = -1;
    w->vocab_size = vocab_size;
    w->id_bytes = vocab_size <= TRI_TOKEN_FILE_U16_VOCAB ? 2 : 4;
    w->path = strdup(path);
    w->tmp_path = malloc(n + sizeof ".tmp.XXXXXX");
    if (!w->path || !w->tmp_path) {
        rc = TRI_ERR(TRI_ENOMEM, "token file '%s': out of memory", path);
        goto out_free;
    }
    memcpy(w->tmp_path, path, n);
    memcpy(w->tmp_path + n, ".tmp.XXXXXX", sizeof ".tmp.XXXXXX");
    w->fd = mkstemp(w->tmp_path);
    if (w->fd < 0) {
        rc = TRI_ERR(TRI_EIO, "token file '%s': cannot create temporary file '%s': %s", path,
                     w->tmp_path, strerror(errno));
        goto out_free;
    }
    (void)fchmod(w->fd, 0644); /* mkstemp makes 0600; token files are data, readable by all */
    int32_t header[TRI_TOKEN_FILE_HEADER_INTS] = {0}; /* placeholder until commit */
    rc = write_all(w->fd, header, sizeof header, w->tmp_path);
    if (rc != TRI_OK)
        goto out_abort;
    *out = w;
    return TRI_OK;
out_abort:
    tri_token_writer_abort(w);
    return rc;
out_free:
    writer_free(w);
    return rc;
}

int tri_token_writer_append(tri_token_writer *w, const int32_t *ids, size_t n)
{
    if (n > (size_t)(TRI_TOKEN_FILE_MAX_TOKENS - w->count))
        return TRI_ERR(TRI_EINVAL, "token file '%s': %lld + %zu tokens exceed the format's limit "
                       "of %d", w->path, (long long)w->count, n, TRI_TOKEN_FILE_MAX_TOKENS);
    for (size_t done = 0; done < n;) {
        size_t k = n - done < CHUNK ? n - done : CHUNK;
        for (size_t i = 0; i < k; i++) {
            int32_t id = ids[done + i];
            if (id < 0 || id >= w->vocab_size)
                return TRI_ERR(TRI_EINVAL, "token file '%s': token at position %lld has id %d, "
                               "outside the vocabulary [0, %d)", w->path,
                               (long long)(w->count + (int64_t)i), (int)id, w->vocab_size);
            if (w->id_bytes == 2)
                w->chunk16[i] = (uint16_t)id;
            else
                w->chunk32[i] = (uint32_t)id;
        }
        const void *bytes = w->id_bytes == 2 ? (const void *)w->chunk16 : (const void *)w->chunk32;
        int rc = write_all(w->fd, bytes, k * (size_t)w->id_bytes, w->tmp_path);
        if (rc != TRI_OK)
            return rc;
        w->count += (int64_t)k;
        done += k;
    }
    return TRI_OK;
}

int tri_token_writer_commit(tri_token_writer *w)
{
    int32_t header[TRI_TOKEN_FILE_HEADER_INTS] = {0};
    header[0] = w->id_bytes == 2 ? TRI_TOKEN_FILE_MAGIC : TRI_TOKEN_FILE_MAGIC_U32;
    header[1] = w->id_bytes == 2 ? TRI_TOKEN_FILE_VERSION : TRI_TOKEN_FILE_VERSION_U32;
    header[2] = (int32_t)w->count;
    int rc = TRI_OK;
    if (lseek(w->fd, 0, SEEK_SET) != 0) {
        rc = TRI_ERR(TRI_EIO, "token file '%s': seek failed: %s", w->tmp_path, strerror(errno));
        goto out_abort;
    }
    rc = write_all(w->fd, header, sizeof header, w->tmp_path);
    if (rc != TRI_OK)
        goto out_abort;
    if (fsync(w->fd) != 0) {
        rc = TRI_ERR(TRI_EIO, "token file '%s': fsync failed: %s", w->tmp_path, strerror(errno));
        goto out_abort;
    }
    if (close(w->fd) != 0) {
        w->fd = -1;
        rc = TRI_ERR(TRI_EIO, "token file '%s': close failed: %s", w->tmp_path, strerror(errno));
        goto out_abort;
    }
    w->fd = -1;
    if (rename(w->tmp_path, w->path) != 0) {
        rc = TRI_ERR(TRI_EIO, "token file '%s': cannot rename '%s' to it: %s", w->path,
                     w->tmp_path, strerror(errno));
        goto out_abort;
    }
    rc = sync_parent_dir(w->path);
    writer_free(w);
    return rc;
out_abort:
    tri_token_writer_abort(w);
    return rc;
}

void tri_token_writer_abort(tri_token_writer *w)
{
    if (!w)
        return;
    if (w->fd >= 0)
        close(w->fd);
    unlink(w->tmp_path);
    writer_free(w);
}

int tri_token_file_write(const char *path, const int32_t *ids, size_t n, int vocab_size)
{
    tri_token_writer *w;
    int rc = tri_token_writer_open(&w, path, vocab_size);
    if (rc != TRI_OK)
        return rc;
    rc = tri_token_writer_append(w, ids, n);
    if (rc != TRI_OK) {
        tri_token_writer_abort(w);
        return rc;
    }
    return tri_token_writer_commit(w);
}

/* ---- reading ---- */

/* Checks the header fields and the file size against the header's count; sets f->id_bytes. */
static int check_header(tri_token_file *f, const int32_t *h, size_t file_bytes)
{
    int version;
    if (h[0] == TRI_TOKEN_FILE_MAGIC)
        f->id_bytes = 2, version = TRI_TOKEN_FILE_VERSION;
    else if (h[0] == TRI_TOKEN_FILE_MAGIC_U32)
        f->id_bytes = 4, version = TRI_TOKEN_FILE_VERSION_U32;
    else
        return TRI_ERR(TRI_ECORRUPT, "token file '%s': header magic is %d, expected %d (uint16 ids) "
                       "or %d (uint32 ids) (not an llm.c token file)", f->path, (int)h[0],
                       TRI_TOKEN_FILE_MAGIC, TRI_TOKEN_FILE_MAGIC_U32);
    if (h[1] != version)
        return TRI_ERR(TRI_ECORRUPT, "token file '%s': header version is %d, expected %d with magic %d "
                       "(uint%d token ids)", f->path, (int)h[1], version, (int)h[0], 8 * f->id_bytes);
    if (h[2] < 0)
        return TRI_ERR(TRI_ECORRUPT, "token file '%s': header token count is %d, expected >= 0",
                       f->path, (int)h[2]);
    long long want = TRI_TOKEN_FILE_HEADER_BYTES + (long long)f->id_bytes * h[2], have = (long long)file_bytes;
    if (have < want)
        return TRI_ERR(TRI_ECORRUPT, "token file '%s': truncated: header token count %d needs "
                       "%lld bytes, the file has %lld", f->path, (int)h[2], want, have);
    if (have > want)
        return TRI_ERR(TRI_ECORRUPT, "token file '%s': %lld trailing bytes: header token count %d "
                       "needs %lld bytes, the file has %lld", f->path, have - want, (int)h[2],
                       want, have);
    return TRI_OK;
}

/* Id i of the file, whichever its width. */
static uint32_t id_at(const tri_token_file *f, int64_t i)
{
    return f->id_bytes == 2 ? ((const uint16_t *)f->ids)[i] : ((const uint32_t *)f->ids)[i];
}

static int check_ids(const tri_token_file *f, int vocab_size)
{
    for (int64_t i = 0; i < f->count; i++) {
        uint32_t id = id_at(f, i);
        if (id >= (uint32_t)vocab_size)
            return TRI_ERR(TRI_EINVAL, "token file '%s': token at position %lld has id %u, not "
                           "below the model's vocab_size %d", f->path, (long long)i, (unsigned)id,
                           vocab_size);
    }
    return TRI_OK;
}

/* Opens and maps path into f (whole file). */
static int map_file(tri_token_file *f)
{
    int fd = -1;
    int rc = tri_file_open_read(f->path, &fd, NULL);
    if (rc)
        return tri_error_context(rc, "token file");
    struct stat st;
    if (fstat(fd, &st) != 0) {
        rc = TRI_ERR(TRI_EIO, "token file '%s': cannot stat: %s", f->path, strerror(errno));
        goto out_close;
    }
    if ((size_t)st.st_size < TRI_TOKEN_FILE_HEADER_BYTES) {
        rc = TRI_ERR(TRI_ECORRUPT, "token file '%s': truncated: %lld bytes, shorter than the "
                     "%d-byte header", f->path, (long long)st.st_size, TRI_TOKEN_FILE_HEADER_BYTES);
        goto out_close;
    }
    f->map_bytes = (size_t)st.st_size;
    f->map = mmap(NULL, f->map_bytes, PROT_READ, MAP_PRIVATE, fd, 0);
    if (f->map == MAP_FAILED) {
        f->map = NULL;
        rc = TRI_ERR(TRI_EIO, "token file '%s': mmap of %zu bytes failed: %s", f->path,
                     f->map_bytes, strerror(errno));
    }
out_close:
    close(fd);
    return rc;
}

int tri_token_file_open(tri_token_file **out, const char *path, int vocab_size)
{
    *out = NULL;
    if (vocab_size <= 0)
        return TRI_ERR(TRI_EINVAL, "token file '%s': vocab_size %d must be positive", path, vocab_size);
    tri_token_file *f = calloc(1, sizeof *f);
    if (!f || !(f->path = strdup(path))) {
        free(f);
        return TRI_ERR(TRI_ENOMEM, "token file '%s': out of memory", path);
    }
    int rc = map_file(f);
    if (rc != TRI_OK)
        goto out_close;
    const int32_t *header = f->map;
    rc = check_header(f, header, f->map_bytes);
    if (rc != TRI_OK)
        goto out_close;
    f->count = header[2];
    f->ids = (const char *)f->map + TRI_TOKEN_FILE_HEADER_BYTES;
    rc = check_ids(f, vocab_size);
    if (rc != TRI_OK)
        goto out_close;
    *out = f;
    return TRI_OK;
out_close:
    tri_token_file_close(f);
    return rc;
}

void tri_token_file_close(tri_token_file *f)
{
    if (!f)
        return;
    if (f->map)
        munmap(f->map, f->map_bytes);
    free(f->path);
    free(f);
}

void tri_token_file_read(const tri_token_file *f, int64_t first, int64_t n, int32_t *out)
{
    if (f->id_bytes == 2) {
        const uint16_t *ids = (const uint16_t *)f->ids + first;
        for (int64_t i = 0; i < n; i++)
            out[i] = ids[i];
    } else {
        const uint32_t *ids = (const uint32_t *)f->ids + first;
        for (int64_t i = 0; i < n; i++)
            out[i] = (int32_t)ids[i]; /* < vocab_size <= INT_MAX: checked at open */
    }
}

int tri_token_file_id_bytes(const tri_token_file *f)
{
    return f->id_bytes;
}

int64_t tri_token_file_count(const tri_token_file *f)
{
    return f->count;
}

const char *tri_token_file_path(const tri_token_file *f)
{
    return f->path;
}
