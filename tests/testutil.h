/* tests/testutil.h - helpers shared by the Criterion suites: random tensors, comparisons, files. */
#ifndef TRIDENT_TESTS_TESTUTIL_H
#define TRIDENT_TESTS_TESTUTIL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* Fills x[0..n) with uniform values in [lo, hi) from a seeded generator. */
void tu_fill_uniform(float *x, size_t n, float lo, float hi, uint64_t seed);
/* max_i |a_i - b_i| / max(|b_i|, floor): relative error with an absolute floor for tiny values. */
double tu_max_rel_err(const float *a, const float *b, size_t n, double floor);
double tu_max_rel_err_d(const float *a, const double *b, size_t n, double floor);
/* Path of a file in the source tree (TRIDENT_SOURCE_DIR) or the build tree (TRIDENT_BINARY_DIR),
 * in a static buffer. */
const char *tu_source_path(const char *rel);
const char *tu_binary_path(const char *rel);
/* A fresh empty directory under the build tree's test scratch area (static buffer). */
const char *tu_scratch_dir(const char *name);

/* Captures this process's stderr (fd 2, where tri_log's warnings go) into a temporary file between
 * tu_stderr_capture and tu_stderr_release, which restores it and copies what was written (at most
 * cap - 1 bytes, NUL-terminated) into buf. */
typedef struct tu_capture {
    int saved, fd;
    char path[32];
} tu_capture;
void tu_stderr_capture(tu_capture *c);
void tu_stderr_release(tu_capture *c, char *buf, size_t cap);

#endif

/* ---- record files shared with tools/gpt2_torch_reference.py ----
 * Records: u32 name length, name, u32 ndim, i64 shape[ndim], float64 data. */
#include <stdio.h>

int tu_rec_write(FILE *f, const char *name, int ndim, const int64_t *shape, const double *data);
/* Writes float data (converted to float64). */
int tu_rec_write_f32(FILE *f, const char *name, int ndim, const int64_t *shape, const float *data);

typedef struct tu_record {
    char name[128];
    int ndim;
    int64_t shape[8];
    int64_t numel;
    double *data;
} tu_record;

typedef struct tu_records {
    int n;
    tu_record *r;
} tu_records;

/* Reads every record of a file; returns 0 on success. */
int tu_rec_read(const char *path, tu_records *out);
const tu_record *tu_rec_find(const tu_records *recs, const char *name);
void tu_rec_free(tu_records *recs);

/* Runs a command line with /bin/sh; returns its exit status (or -1). */
int tu_run(const char *cmd);

/* Runs the script at path script (python3's way: relative to the working directory) with its n
 * arguments on the suite's Python server, when TRIDENT_PYTHON_SERVER names its socket and it listens
 * (tests/python_server.py: torch, numpy and h5py imported once, a fork per script; tests/python_run.c).
 * The script writes to this process's stdout and stderr. Returns its exit status, -1 when the server's
 * child died without answering (or the request does not fit), or TU_NO_PYTHON_SERVER when no server
 * listens (the caller runs /usr/bin/python3 itself). */
#define TU_NO_PYTHON_SERVER (-2)
int tu_python_server_run(const char *script, const char *const *args, int n);

/* Runs the PyTorch reference script SCRIPT (relative to the source tree) with its n arguments, as
 * "/usr/bin/python3 SCRIPT ARGS..." would, and writes that command line into cmd (cmd_len bytes) for
 * the caller's message: on the suite's Python server (tu_python_server_run), else with /usr/bin/python3
 * itself. Returns the script's exit status, or -1 (the command does not fit, or the server's child
 * died without answering). */
int tu_torch_run(const char *script, const char *const *args, int n, char *cmd, size_t cmd_len);

/* One comparison of a PyTorch reference script: its MODEL IN OUT arguments. */
typedef struct tu_torch_job {
    const char *model, *in, *out;
} tu_torch_job;

/* Runs SCRIPT once with MODEL IN OUT ... for the n jobs (tools/gpt2_torch_reference.py's run_jobs),
 * through tu_torch_run: one script's set-up for several comparisons. */
int tu_torch_jobs(const char *script, const tu_torch_job *jobs, int n, char *cmd, size_t cmd_len);

/* Whether Debian's /usr/bin/python3 has PyTorch (python3-torch) for the reference checks: looks for the
 * package without importing it (an import costs 1.5 CPU-s). */
bool tu_have_torch(void);
