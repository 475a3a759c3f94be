/* tests/test_file.c - where paths lead and how they relate (engine/core/file.h), the output rule's
 * pieces (tools/cli/outputs.h) and staged outputs (checkpoints/fsutil.h), on real files.
 *
 * Resolution through symlinks, dangling symlinks, "..", paths that do not exist yet; relations by
 * components (a sibling sharing a prefix, "/a/bc" beside "/a/b", is apart) and by inode (a hard
 * link is the same file); special files refused at once by kind with O_NONBLOCK (a FIFO without a
 * writer would block a plain open forever: a test that hangs fails by CTest's timeout); staged
 * outputs published by rename or entry by entry with `latest` last. */
#define _XOPEN_SOURCE 700
#include <criterion/criterion.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include "checkpoints/fsutil.h"
#include "engine/core/file.h"
#include "engine/core/status.h"
#include "tests/testutil.h"
#include "tools/cli/outputs.h"

static char dir[TRI_PATH_MAX]; /* the test's directory, resolved */

static void setup(void)
{
    const char *d = tu_scratch_dir("test_file");
    cr_assert(d);
    cr_assert(realpath(d, dir));
}

static const char *at(const char *name)
{
    static _Thread_local char buf[4][TRI_PATH_MAX + 64];
    static _Thread_local int k;
    k = (k + 1) % 4;
    snprintf(buf[k], sizeof buf[k], "%s/%s", dir, name);
    return buf[k];
}

static void touch(const char *path)
{
    FILE *f = fopen(path, "w");
    cr_assert(f, "cannot create %s", path);
    fputs("x", f);
    fclose(f);
}

TestSuite(file, .init = setup);

Test(file, resolve_follows_links_and_missing_tails)
{
    char out[TRI_PATH_MAX];
    cr_assert(mkdir(at("d"), 0755) == 0);
    touch(at("d/f"));
    cr_assert(symlink("d", at("ld")) == 0);
    cr_assert(symlink("nowhere/x", at("dangling")) == 0);
    cr_assert_eq(tri_path_resolve(at("ld/f"), out), TRI_OK);
    cr_assert_str_eq(out, at("d/f"));
    cr_assert_eq(tri_path_resolve(at("ld/new/deeper"), out), TRI_OK);
    cr_assert_str_eq(out, at("d/new/deeper"));
    cr_assert_eq(tri_path_resolve(at("dangling"), out), TRI_OK);  /* where writing would create it */
    cr_assert_str_eq(out, at("nowhere/x"));
    cr_assert_eq(tri_path_resolve(at("missing/../d/f"), out), TRI_OK);
    cr_assert_str_eq(out, at("d/f"));
    cr_assert(symlink("loop", at("loop")) == 0);
    cr_assert_eq(tri_path_resolve(at("loop"), out), TRI_EIO);
    cr_assert(strstr(tri_error_message(), "symbolic links"), "%s", tri_error_message());
    cr_assert_eq(tri_path_resolve("", out), TRI_EINVAL);
}

Test(file, relations_by_component_and_inode)
{
    cr_assert_eq(tri_path_relation("/a/b", "/a/b"), TRI_PATH_SAME);
    cr_assert_eq(tri_path_relation("/a/b", "/a/b/c"), TRI_PATH_CONTAINS);
    cr_assert_eq(tri_path_relation("/a/b/c", "/a/b"), TRI_PATH_INSIDE);
    cr_assert_eq(tri_path_relation("/a/bc", "/a/b"), TRI_PATH_APART);
    cr_assert_eq(tri_path_relation("/a/b", "/a/bc"), TRI_PATH_APART);
    cr_assert_eq(tri_path_relation("/", "/x"), TRI_PATH_CONTAINS);
    touch(at("f"));
    cr_assert(link(at("f"), at("hard")) == 0);
    cr_assert_eq(tri_path_relation(at("hard"), at("f")), TRI_PATH_SAME);
    touch(at("g"));
    cr_assert_eq(tri_path_relation(at("g"), at("f")), TRI_PATH_APART);
}

/* tri_file_open_read refuses path by kind, naming it. */
static void refused_as(const char *path, const char *kind)
{
    int fd = 7;
    size_t size;
    cr_assert_eq(tri_file_open_read(path, &fd, &size), TRI_EIO, "%s accepted", path);
    cr_assert_eq(fd, -1);
    cr_assert(strstr(tri_error_message(), path) && strstr(tri_error_message(), kind), "%s", tri_error_message());
}

Test(file, special_files_refused_by_kind, .timeout = 20)
{
    cr_assert(mkfifo(at("fifo"), 0644) == 0);
    refused_as(at("fifo"), "is a FIFO (named pipe), not a regular file");
    refused_as(dir, "is a directory, not a regular file");
    refused_as("/dev/null", "is a character device, not a regular file");
    refused_as(at("absent"), "No such file or directory");
    int s = socket(AF_UNIX, SOCK_STREAM, 0);
    struct sockaddr_un a = {.sun_family = AF_UNIX};
    if (s >= 0 && strlen(at("sock")) < sizeof a.sun_path) {
        snprintf(a.sun_path, sizeof a.sun_path, "%s", at("sock"));
        cr_assert(bind(s, (struct sockaddr *)&a, sizeof a) == 0);
        refused_as(at("sock"), "is a socket, not a regular file");
    }
    if (s >= 0)
        close(s);
    touch(at("plain"));
    FILE *f = NULL;
    cr_assert_eq(tri_file_fopen_read(at("plain"), &f), TRI_OK);
    cr_assert_eq(fgetc(f), 'x'); /* blocking reads again */
    fclose(f);
}

Test(file, output_rule)
{
    cr_assert(mkdir(at("run"), 0755) == 0);
    touch(at("run/latest"));
    cr_assert(symlink("run/latest", at("to_latest")) == 0);
    char *run = strdup(at("run"));
    tri_cli_input in[1] = {{"SRC", run}};
    tri_cli_output out = {.name = "OUT", .path = at("to_latest")};
    cr_assert_eq(tri_cli_check_output(&out, in, 1), TRI_EINVAL);
    cr_assert(strstr(tri_error_message(), "lies inside the input SRC"), "%s", tri_error_message());
    out.path = dir; /* contains the input */
    out.is_dir = true;
    cr_assert_eq(tri_cli_check_output(&out, in, 1), TRI_EINVAL);
    cr_assert(strstr(tri_error_message(), "contains the input SRC"), "%s", tri_error_message());
    cr_assert(mkdir(at("other"), 0755) == 0);
    touch(at("other/latest"));
    out.path = at("other"); /* holds a run, not an input: refused even with --force */
    out.force = true;
    cr_assert_eq(tri_cli_check_output(&out, in, 1), TRI_EINVAL);
    cr_assert(strstr(tri_error_message(), "already holds a run"), "%s", tri_error_message());
    cr_assert(mkdir(at("model"), 0755) == 0);
    touch(at("model/config.json"));
    out.path = at("model"); /* a model: --force may replace it */
    cr_assert_eq(tri_cli_check_output(&out, in, 1), TRI_OK, "%s", tri_error_message());
    out.force = false;
    cr_assert_eq(tri_cli_check_output(&out, in, 1), TRI_EINVAL);
    cr_assert(strstr(tri_error_message(), "pass --force"), "%s", tri_error_message());
    out = (tri_cli_output){.name = "OUT", .path = at("model")}; /* a file output onto a directory */
    cr_assert_eq(tri_cli_check_output(&out, in, 1), TRI_EINVAL);
    cr_assert(strstr(tri_error_message(), "is a directory"), "%s", tri_error_message());
    out.path = at("fresh.h5");
    cr_assert_eq(tri_cli_check_output(&out, in, 1), TRI_OK, "%s", tri_error_message());
    free(run);
}

Test(file, staged_directory_published_latest_last)
{
    char tmp[TRI_PATH_MAX];
    cr_assert_eq(tri_fs_temp_beside(at("out"), tmp, sizeof tmp), TRI_OK);
    char want[TRI_PATH_MAX + 64];
    snprintf(want, sizeof want, "%s/.out.tmp-%ld", dir, (long)getpid());
    cr_assert_str_eq(tmp, want);
    cr_assert_eq(tri_fs_mkdir_p(tmp), TRI_OK);
    char p[TRI_PATH_MAX + 64];
    snprintf(p, sizeof p, "%s/latest", tmp);
    touch(p);
    snprintf(p, sizeof p, "%s/iter_0000000", tmp);
    cr_assert_eq(tri_fs_mkdir_p(p), TRI_OK);
    cr_assert(mkdir(at("out"), 0755) == 0);
    touch(at("out/keep.txt")); /* an existing directory: entries move in one by one */
    cr_assert_eq(tri_fs_publish(tmp, at("out")), TRI_OK, "%s", tri_error_message());
    cr_assert(tri_fs_exists(at("out/latest")) && tri_fs_is_dir(at("out/iter_0000000")) &&
              tri_fs_exists(at("out/keep.txt")));
    cr_assert(!tri_fs_exists(tmp));
    /* a file replaces a file */
    cr_assert_eq(tri_fs_temp_beside(at("f.bin"), tmp, sizeof tmp), TRI_OK);
    touch(at("f.bin"));
    FILE *f = fopen(tmp, "w");
    fputs("new", f);
    fclose(f);
    cr_assert_eq(tri_fs_publish(tmp, at("f.bin")), TRI_OK);
    char *text = NULL;
    cr_assert_eq(tri_fs_read_small(at("f.bin"), 16, &text, NULL), TRI_OK);
    cr_assert_str_eq(text, "new");
    free(text);
}
