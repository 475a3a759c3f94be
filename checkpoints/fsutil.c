/* checkpoints/fsutil.c - durable writes, renames and removal (see fsutil.h). */
#define _XOPEN_SOURCE 700
#include "checkpoints/fsutil.h"

#include <errno.h>
#include <dirent.h>
#include <fcntl.h>
#include <ftw.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "engine/core/file.h"
#include "engine/core/status.h"

int tri_fs_join(char *out, size_t cap, const char *a, const char *b)
{
    int n = snprintf(out, cap, "%s/%s", a, b);
    if (n < 0 || (size_t)n >= cap)
        return TRI_ERR(TRI_EINVAL, "path %s/%s is too long", a, b);
    return TRI_OK;
}

int tri_fs_mkdir_p(const char *path)
{
    char buf[4096];
    if (snprintf(buf, sizeof buf, "%s", path) >= (int)sizeof buf)
        return TRI_ERR(TRI_EINVAL, "path %s is too long", path);
    for (char *p = buf + 1; *p; p++) {
        if (*p != '/')
            continue;
        *p = '\0';
        if (mkdir(buf, 0755) != 0 && errno != EEXIST)
            return TRI_ERR(TRI_EIO, "cannot create directory %s: %s", buf, strerror(errno));
        *p = '/';
    }
    if (mkdir(buf, 0755) != 0 && errno != EEXIST)
        return TRI_ERR(TRI_EIO, "cannot create directory %s: %s", buf, strerror(errno));
    if (!tri_fs_is_dir(buf))
        return TRI_ERR(TRI_EIO, "%s exists and is not a directory", buf);
    return TRI_OK;
}

int tri_fs_fsync(const char *path)
{
    int fd = open(path, O_RDONLY);
    if (fd < 0)
        return TRI_ERR(TRI_EIO, "cannot open %s to fsync it: %s", path, strerror(errno));
    int rc = fsync(fd);
    int err = errno;
    close(fd);
    if (rc != 0 && err != EINVAL) /* EINVAL: a file system without fsync on directories */
        return TRI_ERR(TRI_EIO, "fsync of %s failed: %s", path, strerror(err));
    return TRI_OK;
}

int tri_fs_write_atomic(const char *dir, const char *name, const void *data, size_t n)
{
    char tmp[4096], dst[4096], tname[300];
    snprintf(tname, sizeof tname, "%s.tmp", name);
    int rc = tri_fs_join(tmp, sizeof tmp, dir, tname);
    if (!rc) rc = tri_fs_join(dst, sizeof dst, dir, name);
    if (rc)
        return rc;
    FILE *f = fopen(tmp, "wb");
    if (!f)
        return TRI_ERR(TRI_EIO, "cannot create %s: %s", tmp, strerror(errno));
    bool ok = fwrite(data, 1, n, f) == n && fflush(f) == 0 && fsync(fileno(f)) == 0;
    int err = errno;
    if (fclose(f) != 0)
        ok = false;
    if (!ok) {
        unlink(tmp);
        return TRI_ERR(TRI_EIO, "cannot write %s: %s", tmp, strerror(err));
    }
    if (rename(tmp, dst) != 0) {
        err = errno;
        unlink(tmp);
        return TRI_ERR(TRI_EIO, "cannot rename %s to %s: %s", tmp, dst, strerror(err));
    }
    return tri_fs_fsync(dir);
}

int tri_fs_read_small(const char *path, size_t max, char **data, size_t *n)
{
    *data = NULL;
    FILE *f = NULL;
    int rc = tri_file_fopen_read(path, &f);
    if (rc)
        return rc;
    struct stat st;
    if (fstat(fileno(f), &st) != 0) {
        fclose(f);
        return TRI_ERR(TRI_EIO, "cannot stat %s: %s", path, strerror(errno));
    }
    if ((uint64_t)st.st_size > max) {
        fclose(f);
        return TRI_ERR(TRI_ECORRUPT, "%s is larger than %zu bytes: not a file Trident wrote", path, max);
    }
    size_t size = (size_t)st.st_size;
    char *buf = malloc(size + 1);
    if (!buf) {
        fclose(f);
        return TRI_ERR(TRI_ENOMEM, "out of memory reading %s", path);
    }
    size_t got = fread(buf, 1, size, f);
    bool err = ferror(f) || got != size;
    fclose(f);
    if (err) {
        free(buf);
        return TRI_ERR(TRI_EIO, "error reading %s: %s", path, strerror(errno));
    }
    buf[got] = '\0';
    *data = buf;
    if (n)
        *n = got;
    return TRI_OK;
}

static int remove_entry(const char *path, const struct stat *st, int flag, struct FTW *ftw)
{
    (void)st;
    (void)flag;
    (void)ftw;
    return remove(path) != 0 && errno != ENOENT ? -1 : 0;
}

int tri_fs_remove_tree(const char *path)
{
    if (!tri_fs_exists(path))
        return TRI_OK;
    if (nftw(path, remove_entry, 16, FTW_DEPTH | FTW_PHYS) != 0)
        return TRI_ERR(TRI_EIO, "cannot remove %s: %s", path, strerror(errno));
    return TRI_OK;
}

bool tri_fs_exists(const char *path)
{
    struct stat st;
    return lstat(path, &st) == 0;
}

bool tri_fs_is_dir(const char *path)
{
    struct stat st;
    return stat(path, &st) == 0 && S_ISDIR(st.st_mode);
}

bool tri_fs_safe_name(const char *name)
{
    size_t n = strlen(name);
    if (n < 1 || n > 128 || name[0] == '.')
        return false;
    for (size_t i = 0; i < n; i++) {
        char c = name[i];
        if (!((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_' ||
              c == '.' || c == '-'))
            return false;
    }
    return true;
}

int tri_fs_temp_beside(const char *path, char *tmp, size_t cap)
{
    char buf[4096];
    if (snprintf(buf, sizeof buf, "%s", path) >= (int)sizeof buf)
        return TRI_ERR(TRI_EINVAL, "path %s is too long", path);
    size_t n = strlen(buf);
    while (n > 1 && buf[n - 1] == '/')
        buf[--n] = '\0';
    char *slash = strrchr(buf, '/');
    const char *base = slash ? slash + 1 : buf;
    int k = slash ? snprintf(tmp, cap, "%.*s/.%s.tmp-%ld", (int)(slash - buf), buf, base, (long)getpid())
                  : snprintf(tmp, cap, ".%s.tmp-%ld", base, (long)getpid());
    if (k < 0 || (size_t)k >= cap)
        return TRI_ERR(TRI_EINVAL, "path %s is too long for a temporary name beside it", path);
    return tri_fs_remove_tree(tmp);
}

/* The directory path lies in ("." for a bare name). */
static void parent_of(const char *path, char *dir, size_t cap)
{
    const char *slash = strrchr(path, '/');
    if (!slash)
        snprintf(dir, cap, ".");
    else if (slash == path)
        snprintf(dir, cap, "/");
    else
        snprintf(dir, cap, "%.*s", (int)(slash - path), path);
}

/* Each entry of directory tmp renamed into directory path, `latest` last; then tmp removed. */
static int publish_entries(const char *tmp, const char *path)
{
    DIR *d = opendir(tmp);
    if (!d)
        return TRI_ERR(TRI_EIO, "cannot open %s: %s", tmp, strerror(errno));
    int rc = TRI_OK;
    bool has_latest = false;
    struct dirent *e;
    for (int pass = 0; pass < 2 && !rc; pass++) {
        rewinddir(d);
        while (!rc && (e = readdir(d)) != NULL) {
            if (strcmp(e->d_name, ".") == 0 || strcmp(e->d_name, "..") == 0)
                continue;
            bool latest = strcmp(e->d_name, "latest") == 0;
            has_latest |= latest;
            if (latest != (pass == 1))
                continue;
            char from[4096], to[4096];
            rc = tri_fs_join(from, sizeof from, tmp, e->d_name);
            if (!rc) rc = tri_fs_join(to, sizeof to, path, e->d_name);
            if (!rc && rename(from, to) != 0)
                rc = TRI_ERR(TRI_EIO, "cannot move %s to %s: %s", from, to, strerror(errno));
        }
        if (pass == 0 && !has_latest)
            break;
    }
    closedir(d);
    if (!rc) rc = tri_fs_fsync(path);
    if (!rc && rmdir(tmp) != 0)
        rc = TRI_ERR(TRI_EIO, "cannot remove %s: %s", tmp, strerror(errno));
    return rc;
}

int tri_fs_publish(const char *tmp, const char *path)
{
    struct stat st;
    if (lstat(tmp, &st) != 0)
        return TRI_ERR(TRI_EIO, "cannot publish %s: %s", tmp, strerror(errno));
    if (S_ISREG(st.st_mode)) {
        int rc = tri_fs_fsync(tmp);
        if (rc)
            return rc;
    }
    int rc = TRI_OK;
    if (rename(tmp, path) != 0) {
        int err = errno;
        if (S_ISDIR(st.st_mode) && (err == ENOTEMPTY || err == EEXIST))
            rc = publish_entries(tmp, path);
        else
            rc = TRI_ERR(TRI_EIO, "cannot rename %s to %s: %s", tmp, path, strerror(err));
    }
    char dir[4096];
    parent_of(path, dir, sizeof dir);
    if (!rc) rc = tri_fs_fsync(dir);
    return rc;
}
