/* tests/gpu/gpuutil.c - the GPU suites' helpers (see gpuutil.h). */
#include "tests/gpu/gpuutil.h"

#include <criterion/criterion.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "cuda/device_cuda.h"
#include "engine/core/math.h"
#include "tests/opsutil.h"

bool gpu_probe(char *why, size_t cap)
{
    int fd[2];
    snprintf(why, cap, "cannot probe for a GPU");
    if (pipe(fd) != 0)
        return false;
    pid_t pid = fork();
    if (pid < 0) {
        close(fd[0]);
        close(fd[1]);
        return false;
    }
    if (pid == 0) {
        const char *reason = "";
        int ok = tri_cuda_available(&reason);
        char msg[512];
        int len = snprintf(msg, sizeof msg, "%d%s", ok, ok ? "" : reason);
        ssize_t w = write(fd[1], msg, (size_t)len);
        _exit(w == len ? 0 : 1);
    }
    close(fd[1]);
    char msg[512] = {0};
    ssize_t got = read(fd[0], msg, sizeof msg - 1);
    close(fd[0]);
    int status = 0;
    waitpid(pid, &status, 0);
    if (got <= 0)
        return false;
    if (msg[0] == '1')
        return true;
    snprintf(why, cap, "%s", msg + 1);
    return false;
}

bool gpu_close(const char *what, const float *got, const float *want, size_t n, double tol)
{
    double diff = 0.0, ref = 0.0;
    size_t worst = 0;
    for (size_t i = 0; i < n; i++) {
        double e = fabs((double)got[i] - (double)want[i]);
        if (isnan(e) && !(isnan(got[i]) && isnan(want[i])))
            e = INFINITY;
        if (e > diff) {
            diff = e;
            worst = i;
        }
        ref = fmax(ref, fabs((double)want[i]));
    }
    double err = diff / fmax(ref, 1e-30);
    bool ok = err <= tol;
    if (!ok || getenv("TRIDENT_TEST_VERBOSE"))
        fprintf(stderr, "%s %-40s normalised err %.3e (tol %.0e) worst [%zu] got %.9g want %.9g\n",
                ok ? "ok  " : "FAIL", what, err, tol, worst, n ? (double)got[worst] : 0.0,
                n ? (double)want[worst] : 0.0);
    return ok;
}

float *gpu_read(tri_device *d, tri_tensor t)
{
    /* ot_read widens a bf16 tensor itself. (Until the second GPU run this widened its result a second
     * time, reading the floats as bf16 pairs, so every bf16 comparison checked only the first half
     * of its elements; a new bit-exact test showed the pattern.) */
    return ot_read(d, t);
}
