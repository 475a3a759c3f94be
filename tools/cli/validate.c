/* tools/cli/validate.c - engine_train's communication-free input checks (see validate.h). */
#include "tools/cli/validate.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "engine/core/checked.h"
#include "engine/core/status.h"

int tri_cli_check_sizes(const tri_model *m, const char *config_path, int64_t global_batch,
                        int64_t seq_length, int64_t train_iters)
{
    tri_transformer d = m->family->dims(m->cfg);
    int64_t tokens = 0, samples = 0, C = d.n_embd, L = d.n_layer, cc = 0, block = 0, bytes = 0;
    if (!tri_mul_i64(global_batch, seq_length, &tokens))
        return TRI_ERR(TRI_EINVAL, "--global-batch-size %lld x --seq-length %lld overflows 64 bits",
                       (long long)global_batch, (long long)seq_length);
    if (!tri_mul_i64(global_batch, train_iters, &samples))
        return TRI_ERR(TRI_EINVAL, "--global-batch-size %lld x --train-iters %lld overflows 64 bits",
                       (long long)global_batch, (long long)train_iters);
    /* parameters: about 12 C^2 per layer; 16 bytes each with the gradient and AdamW's moments */
    if (!tri_mul_i64(C, C, &cc) || !tri_mul_i64(cc, 13, &block) || !tri_mul_i64(block, L, &block) ||
        !tri_mul_i64(block, 16, &bytes))
        return TRI_ERR(TRI_EINVAL, "%s: \"n_embd\" %d x \"n_embd\" x \"n_layer\" %d: the model's size "
                       "overflows 64 bits", config_path, (int)C, (int)L);
    return TRI_OK;
}

static double physical_gib(void)
{
    long pages = sysconf(_SC_PHYS_PAGES), page = sysconf(_SC_PAGESIZE);
    return pages > 0 && page > 0 ? (double)pages * (double)page / 1073741824.0 : 0.0;
}

int tri_cli_check_memory(const tri_model *m, const tri_model_run *o, double budget_gb)
{
    const tri_train_layout *l = &o->layout;
    double budget = budget_gb > 0 ? budget_gb : physical_gib();
    if (!(budget > 0))
        return TRI_OK; /* unknown machine size and no budget given: nothing to check against */
    for (int s = 0; s < l->pp; s++) {
        size_t b[TRI_MEM_KINDS];
        int rc = tri_model_rank_plan(m, o, 0, s, 0, b);
        if (rc)
            return rc;
        double total = 0.0;
        for (int k = 0; k < TRI_MEM_KINDS; k++)
            total += (double)b[k];
        total /= 1073741824.0;
        if (total > budget)
            return TRI_ERR(TRI_EINVAL, "pipeline stage %d of %s needs %.3g GiB per rank (tp %d x pp %d x dp %d, "
                           "ZeRO stage %d, micro-batch %lld x seq %lld), more than the %s of %.3g GiB; "
                           "expected a layout within it: more tp/pp/dp, a ZeRO stage, recomputation or "
                           "a smaller micro-batch", s, m->name, total, l->tp, l->pp, l->dp, l->zero_stage,
                           (long long)l->B, (long long)l->T,
                           budget_gb > 0 ? "--memory-budget-gb" : "machine's physical memory", budget);
    }
    return TRI_OK;
}

int tri_cli_check_output_dir(const char *flag, const char *dir)
{
    char path[4096];
    if (strlen(dir) >= sizeof path)
        return TRI_ERR(TRI_EINVAL, "--%s: path of %zu bytes, expected at most %zu", flag, strlen(dir),
                       sizeof path - 1);
    if (strchr(dir, '\''))
        return TRI_ERR(TRI_EINVAL, "--%s %s: expected a path without a single quote", flag, dir);
    snprintf(path, sizeof path, "%s", dir);
    for (;;) {
        struct stat st;
        if (stat(path, &st) == 0) {
            if (!S_ISDIR(st.st_mode))
                return TRI_ERR(TRI_EINVAL, "--%s %s: %s exists and is not a directory", flag, dir, path);
            if (access(path, W_OK | X_OK) != 0)
                return TRI_ERR(TRI_EIO, "--%s %s: directory %s is not writable", flag, dir, path);
            return TRI_OK;
        }
        if (errno == ENOTDIR) {
            /* a component is a file: walk up to it and report it */
        } else if (errno != ENOENT)
            return TRI_ERR(TRI_EIO, "--%s %s: %s: %s", flag, dir, path, strerror(errno));
        char *slash = strrchr(path, '/');
        while (slash && slash > path && slash[1] == '\0') { /* trailing slashes */
            *slash = '\0';
            slash = strrchr(path, '/');
        }
        if (!slash) {
            snprintf(path, sizeof path, ".");
            continue;
        }
        if (slash == path)
            slash[1] = '\0';
        else
            *slash = '\0';
    }
}

int tri_cli_check_input_path(const char *flag, const char *path)
{
    struct stat st;
    if (stat(path, &st) != 0)
        return TRI_ERR(TRI_EIO, "--%s %s: %s", flag, path, strerror(errno));
    return TRI_OK;
}
