/* engine/core/file.c - opening input files safely, and where a path really leads (see file.h). */
#define _XOPEN_SOURCE 700
#include "engine/core/file.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "engine/core/status.h"

#define MAX_LINKS 40 /* the kernel's limit on symlinks followed in one lookup */

const char *tri_file_kind(mode_t mode)
{
    if (S_ISREG(mode))
        return "a regular file";
    if (S_ISDIR(mode))
        return "a directory";
    if (S_ISFIFO(mode))
        return "a FIFO (named pipe)";
    if (S_ISCHR(mode))
        return "a character device";
    if (S_ISBLK(mode))
        return "a block device";
    if (S_ISSOCK(mode))
        return "a socket";
    if (S_ISLNK(mode))
        return "a symbolic link";
    return "a special file";
}

int tri_file_open_read(const char *path, int *fd, size_t *size)
{
    *fd = -1;
    /* O_NONBLOCK: open(2) of a FIFO without a writer returns at once instead of waiting for one */
    int d = open(path, O_RDONLY | O_NONBLOCK | O_CLOEXEC);
    struct stat st;
    if (d < 0) {
        int err = errno;
        if (stat(path, &st) == 0 && !S_ISREG(st.st_mode)) /* a socket: open(2) says ENXIO */
            return TRI_ERR(TRI_EIO, "%s is %s, not a regular file", path, tri_file_kind(st.st_mode));
        return TRI_ERR(TRI_EIO, "cannot open %s: %s", path, strerror(err));
    }
    if (fstat(d, &st) != 0) {
        int err = errno;
        close(d);
        return TRI_ERR(TRI_EIO, "cannot stat %s: %s", path, strerror(err));
    }
    if (!S_ISREG(st.st_mode)) {
        close(d);
        return TRI_ERR(TRI_EIO, "%s is %s, not a regular file", path, tri_file_kind(st.st_mode));
    }
    int flags = fcntl(d, F_GETFL);
    if (flags < 0 || fcntl(d, F_SETFL, flags & ~O_NONBLOCK) != 0) {
        int err = errno;
        close(d);
        return TRI_ERR(TRI_EIO, "cannot set %s to blocking reads: %s", path, strerror(err));
    }
    *fd = d;
    if (size)
        *size = (size_t)st.st_size;
    return TRI_OK;
}

int tri_file_fopen_read(const char *path, FILE **f)
{
    *f = NULL;
    int fd;
    int rc = tri_file_open_read(path, &fd, NULL);
    if (rc)
        return rc;
    *f = fdopen(fd, "rb");
    if (!*f) {
        int err = errno;
        close(fd);
        return TRI_ERR(TRI_EIO, "cannot open %s: %s", path, strerror(err));
    }
    return TRI_OK;
}

/* dir of path (without trailing slashes) into dir, its last component into base. */
static void split_path(const char *path, char *dir, char *base)
{
    char buf[TRI_PATH_MAX];
    snprintf(buf, sizeof buf, "%s", path);
    size_t n = strlen(buf);
    while (n > 1 && buf[n - 1] == '/')
        buf[--n] = '\0';
    char *slash = strrchr(buf, '/');
    if (!slash) {
        strcpy(dir, ".");
        snprintf(base, TRI_PATH_MAX, "%s", buf);
    } else if (slash == buf) {
        strcpy(dir, "/");
        snprintf(base, TRI_PATH_MAX, "%s", slash + 1);
    } else {
        *slash = '\0';
        snprintf(dir, TRI_PATH_MAX, "%s", buf);
        snprintf(base, TRI_PATH_MAX, "%s", slash + 1);
    }
}

static int resolve(const char *path, char *out, int links)
{
    if (realpath(path, out))
        return TRI_OK;
    if (errno != ENOENT && errno != ENOTDIR)
        return TRI_ERR(TRI_EIO, "cannot resolve %s: %s", path, strerror(errno));
    char dir[TRI_PATH_MAX], base[TRI_PATH_MAX];
    split_path(path, dir, base);
    struct stat st;
    if (lstat(path, &st) == 0 && S_ISLNK(st.st_mode)) { /* a dangling symlink: where it points */
        if (links >= MAX_LINKS)
            return TRI_ERR(TRI_EIO, "cannot resolve %s: %s", path, strerror(ELOOP));
        char target[TRI_PATH_MAX], next[2 * TRI_PATH_MAX + 2];
        ssize_t n = readlink(path, target, sizeof target - 1);
        if (n < 0)
            return TRI_ERR(TRI_EIO, "cannot read the symbolic link %s: %s", path, strerror(errno));
        target[n] = '\0';
        if (target[0] == '/')
            snprintf(next, sizeof next, "%s", target);
        else
            snprintf(next, sizeof next, "%s/%s", dir, target);
        if (strlen(next) >= TRI_PATH_MAX)
            return TRI_ERR(TRI_EINVAL, "path %s is too long", next);
        return resolve(next, out, links + 1);
    }
    if (strcmp(base, "") == 0 || strcmp(path, dir) == 0) /* "/" or "." always resolve: not reached */
        return TRI_ERR(TRI_EIO, "cannot resolve %s", path);
    char parent[TRI_PATH_MAX];
    int rc = resolve(dir, parent, links);
    if (rc)
        return rc;
    if (strcmp(base, ".") == 0) {
        snprintf(out, TRI_PATH_MAX, "%s", parent);
    } else if (strcmp(base, "..") == 0) {
        char *slash = strrchr(parent, '/');
        if (slash && slash != parent)
            *slash = '\0';
        else
            strcpy(parent, "/");
        snprintf(out, TRI_PATH_MAX, "%s", parent);
    } else if (strlen(parent) + 1 + strlen(base) >= TRI_PATH_MAX) {
        return TRI_ERR(TRI_EINVAL, "path %s is too long", path);
    } else {
        size_t k = strlen(parent);
        if (strcmp(parent, "/") != 0)
            parent[k++] = '/';
        memcpy(out, parent, k);
        memcpy(out + k, base, strlen(base) + 1);
    }
    return TRI_OK;
}

int tri_path_resolve(const char *path, char *out)
{
    if (!path || !*path)
        return TRI_ERR(TRI_EINVAL, "an empty path");
    if (strlen(path) >= TRI_PATH_MAX)
        return TRI_ERR(TRI_EINVAL, "path %.64s... is too long (at most %d bytes)", path, TRI_PATH_MAX - 1);
    return resolve(path, out, 0);
}

/* Whether directory path dir contains path p (component-wise; both resolved). */
static bool contains(const char *dir, const char *p)
{
    size_t n = strlen(dir);
    if (strcmp(dir, "/") == 0)
        return strcmp(p, "/") != 0;
    return strncmp(dir, p, n) == 0 && p[n] == '/';
}

tri_path_rel tri_path_relation(const char *a, const char *b)
{
    if (strcmp(a, b) == 0)
        return TRI_PATH_SAME;
    if (contains(a, b))
        return TRI_PATH_CONTAINS;
    if (contains(b, a))
        return TRI_PATH_INSIDE;
    struct stat sa, sb;
    if (stat(a, &sa) == 0 && stat(b, &sb) == 0 && sa.st_dev == sb.st_dev && sa.st_ino == sb.st_ino)
        return TRI_PATH_SAME;
    return TRI_PATH_APART;
}
