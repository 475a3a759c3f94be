/* tools/cli/outputs.c - an output never destroys an input, a run or a model (see outputs.h). */
#define _XOPEN_SOURCE 700
#include "tools/cli/outputs.h"

#include <dirent.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "checkpoints/fsutil.h"
#include "checkpoints/manifest.h"
#include "checkpoints/reader.h"
#include "engine/core/file.h"
#include "engine/core/status.h"

#define MAX_RESOLVED 256 /* resolved paths of one input: itself and the symlinks inside it */
#define SYMLINK_DEPTH 2  /* a run directory, its step directories, their files */

/* The paths one input leads to: itself resolved, and what each symlink inside it (down to
 * SYMLINK_DEPTH directory levels) resolves to: a step directory assembled from links to files
 * elsewhere reads those files. */
typedef struct resolved {
    char (*path)[TRI_PATH_MAX];
    int n;
} resolved;

static void add_links(resolved *r, const char *dir, int depth)
{
    DIR *d = depth > 0 ? opendir(dir) : NULL;
    struct dirent *e;
    while (d && (e = readdir(d)) != NULL && r->n < MAX_RESOLVED) {
        if (strcmp(e->d_name, ".") == 0 || strcmp(e->d_name, "..") == 0)
            continue;
        char p[TRI_PATH_MAX];
        if (tri_fs_join(p, sizeof p, dir, e->d_name)) {
            tri_error_clear();
            continue;
        }
        struct stat st;
        if (lstat(p, &st) != 0)
            continue;
        if (S_ISLNK(st.st_mode)) {
            if (tri_path_resolve(p, r->path[r->n]) == TRI_OK)
                r->n++;
            tri_error_clear();
        } else if (S_ISDIR(st.st_mode)) {
            add_links(r, p, depth - 1);
        }
    }
    if (d)
        closedir(d);
}

static int resolve_input(const tri_cli_input *in, resolved *r)
{
    r->n = 0;
    r->path = malloc(MAX_RESOLVED * sizeof *r->path);
    if (!r->path)
        return TRI_ERR(TRI_ENOMEM, "out of memory");
    int rc = tri_path_resolve(in->path, r->path[0]);
    if (rc)
        return tri_error_context(rc, "%s %s", in->name, in->path);
    r->n = 1;
    add_links(r, r->path[0], SYMLINK_DEPTH);
    return TRI_OK;
}

/* out (resolved to o) against input in (resolved to r). */
static int collide(const tri_cli_output *out, const char *o, const tri_cli_input *in, const resolved *r)
{
    for (int k = 0; k < r->n; k++) {
        const char *p = r->path[k];
        tri_path_rel rel = tri_path_relation(o, p);
        if (rel == TRI_PATH_APART)
            continue;
        char via[TRI_PATH_MAX + 40] = "", to[TRI_PATH_MAX + 20] = "";
        if (k > 0)
            snprintf(via, sizeof via, " (a symlink inside it leads to %s)", p);
        else if (strcmp(in->path, p) != 0)
            snprintf(via, sizeof via, " (%s)", p);
        if (strcmp(out->path, o) != 0)
            snprintf(to, sizeof to, " (resolves to %s)", o);
        const char *how = rel == TRI_PATH_SAME     ? "is"
                          : rel == TRI_PATH_INSIDE ? "lies inside"
                                                   : "contains";
        return TRI_ERR(TRI_EINVAL, "%s %s%s %s the input %s %s%s: writing it would destroy what this command "
                       "reads; choose an output outside the input", out->name,
                       out->path, to, how, in->name, in->path, via);
    }
    return TRI_OK;
}

const char *tri_cli_dir_holds(const char *dir, char *what, size_t cap)
{
    char p[TRI_PATH_MAX];
    if (!tri_fs_is_dir(dir))
        return NULL;
    if (!tri_fs_join(p, sizeof p, dir, TRI_CKPT_LATEST) && tri_fs_exists(p)) {
        char *text = NULL;
        size_t n = 0;
        if (tri_fs_read_small(p, 64, &text, &n) == TRI_OK && n > 0 && text[n - 1] == '\n')
            text[n - 1] = '\0';
        tri_error_clear();
        snprintf(what, cap, "a run (latest -> %.64s)", text ? text : "?");
        free(text);
        return what;
    }
    if (!tri_fs_join(p, sizeof p, dir, TRI_CKPT_MANIFEST_SUM) && tri_fs_exists(p)) {
        snprintf(what, cap, "a checkpoint step (%s)", TRI_CKPT_MANIFEST_SUM);
        return what;
    }
    DIR *d = opendir(dir);
    struct dirent *e;
    while (d && (e = readdir(d)) != NULL)
        if (tri_ckpt_parse_step_name(e->d_name) >= 0) {
            snprintf(what, cap, "a run (step directory %.64s)", e->d_name);
            closedir(d);
            return what;
        }
    if (d)
        closedir(d);
    static const char *const model_files[] = {"config.json", "model.safetensors", "model.safetensors.index.json"};
    for (size_t i = 0; i < sizeof model_files / sizeof *model_files; i++)
        if (!tri_fs_join(p, sizeof p, dir, model_files[i]) && tri_fs_exists(p)) {
            snprintf(what, cap, "a model (%s)", model_files[i]);
            return what;
        }
    tri_error_clear();
    return NULL;
}

/* The output's own kind: a file output may replace a regular file only; a directory output may
 * fill an absent or existing directory that holds no run (nor a model, unless --force). */
static int check_kind(const tri_cli_output *out, const char *o)
{
    struct stat st;
    if (stat(o, &st) != 0)
        return TRI_OK; /* absent: created */
    if (!out->is_dir) {
        if (!S_ISREG(st.st_mode))
            return TRI_ERR(TRI_EINVAL, "%s %s is %s; this command writes one file there (a regular file is "
                           "replaced once the new one is complete)", out->name, out->path, tri_file_kind(st.st_mode));
        return TRI_OK;
    }
    if (!S_ISDIR(st.st_mode))
        return TRI_ERR(TRI_EINVAL, "%s %s is %s; this command writes a directory there", out->name, out->path,
                       tri_file_kind(st.st_mode));
    char what[256];
    if (!tri_cli_dir_holds(o, what, sizeof what))
        return TRI_OK;
    if (strncmp(what, "a model", 7) == 0) {
        if (out->force)
            return TRI_OK;
        return TRI_ERR(TRI_EINVAL, "%s %s already holds %s; pass --force to replace that model once the new one "
                       "is complete, or choose a new directory", out->name, out->path, what);
    }
    return TRI_ERR(TRI_EINVAL, "%s %s already holds %s: writing into it would replace its steps or move its "
                   "`latest`; choose a new directory (--force does not change this)", out->name, out->path, what);
}

int tri_cli_check_output(const tri_cli_output *out, const tri_cli_input *in, int n)
{
    char o[TRI_PATH_MAX];
    int rc = tri_path_resolve(out->path, o);
    if (rc)
        return tri_error_context(rc, "%s %s", out->name, out->path);
    for (int i = 0; i < n && !rc; i++) {
        resolved r;
        rc = resolve_input(&in[i], &r);
        if (!rc) rc = collide(out, o, &in[i], &r);
        free(r.path);
    }
    if (!rc) rc = check_kind(out, o);
    return rc;
}

/* The iteration of step directory step (its name iter_N), or -1. */
static int64_t step_iteration(const char *step)
{
    const char *base = strrchr(step, '/');
    return tri_ckpt_parse_step_name(base ? base + 1 : step);
}

/* The iteration `latest` in run directory dir names, or -1 (none or unreadable). */
static int64_t latest_iteration(const char *dir)
{
    char step[TRI_PATH_MAX];
    if (tri_ckpt_resolve(dir, step, sizeof step) != TRI_OK) {
        tri_error_clear();
        return -1;
    }
    return step_iteration(step);
}

/* Whether resolved input p is a path the saves of resolved run directory s write or prune. */
static const char *written_by_saves(const char *s, const char *p)
{
    if (strcmp(s, p) == 0)
        return "is";
    if (tri_path_relation(s, p) != TRI_PATH_CONTAINS)
        return NULL;
    char first[TRI_PATH_MAX];
    const char *rest = p + strlen(s) + (strcmp(s, "/") != 0);
    size_t k = strcspn(rest, "/");
    snprintf(first, sizeof first, "%.*s", (int)k, rest);
    if (strcmp(first, "metrics.jsonl") == 0)
        return "lies where the saves of";
    char *dot = strchr(first, '.'); /* the temporaries: iter_N.tmp, iter_N.trash, latest.tmp */
    if (dot && strcmp(dot, ".tmp") != 0 && strcmp(dot, ".trash") != 0)
        return NULL;
    if (dot)
        *dot = '\0';
    if (strcmp(first, TRI_CKPT_LATEST) == 0 || tri_ckpt_parse_step_name(first) >= 0)
        return "lies where the saves of";
    return NULL;
}

int tri_cli_check_save_dir(const char *save_dir, const char *load, const tri_cli_input *in, int n)
{
    char s[TRI_PATH_MAX];
    int rc = tri_path_resolve(save_dir, s);
    if (rc)
        return tri_error_context(rc, "--save-dir %s", save_dir);
    for (int i = 0; i < n && !rc; i++) {
        char p[TRI_PATH_MAX];
        rc = tri_path_resolve(in[i].path, p);
        if (rc)
            return tri_error_context(rc, "%s %s", in[i].name, in[i].path);
        const char *how = written_by_saves(s, p);
        if (how)
            rc = TRI_ERR(TRI_EINVAL, "%s %s (%s) %s --save-dir %s write or prune (latest, metrics.jsonl, iter_N/): "
                         "a save would destroy it; keep inputs outside those", in[i].name, in[i].path, p, how,
                         save_dir);
    }
    int64_t start = 0;
    if (!rc && load) {
        char step[TRI_PATH_MAX], st[TRI_PATH_MAX];
        bool found = tri_ckpt_resolve(load, step, sizeof step) == TRI_OK && tri_path_resolve(step, st) == TRI_OK;
        if (!found)
            tri_error_clear(); /* no checkpoint there yet: a first start from iteration 0 */
        if (found) {
            tri_path_rel rel = tri_path_relation(s, st);
            if (rel == TRI_PATH_SAME || rel == TRI_PATH_INSIDE)
                rc = TRI_ERR(TRI_EINVAL, "--save-dir %s %s the checkpoint step %s that --load %s resumes from: "
                             "save into the run directory that holds it (or a new one)", save_dir,
                             rel == TRI_PATH_SAME ? "is" : "lies inside", step, load);
            start = step_iteration(step); /* -1 for a step not named iter_N: no comparison */
        }
    }
    int64_t newest = rc ? -1 : latest_iteration(save_dir);
    if (!rc && newest > start && start >= 0)
        rc = TRI_ERR(TRI_EINVAL, "--save-dir %s holds a run whose latest step is iteration %lld, and this run "
                     "starts at iteration %lld (%s%s): its saves would replace the newer steps; resume from it "
                     "(--load %s) or choose another --save-dir", save_dir, (long long)newest, (long long)start,
                     load ? "--load " : "no --load", load ? load : "", save_dir);
    return rc;
}
