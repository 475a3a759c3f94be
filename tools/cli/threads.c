/* tools/cli/threads.c - the process's OpenMP and OpenBLAS threads (see threads.h). */
#include "tools/cli/threads.h"

#include <omp.h>
#include <stdlib.h>
#include <unistd.h>

extern void openblas_set_num_threads(int num_threads);

void tri_cli_passive_openmp(char **argv)
{
    if (getenv("OMP_WAIT_POLICY"))
        return;
    setenv("OMP_WAIT_POLICY", "PASSIVE", 1);
    execv("/proc/self/exe", argv); /* returns only on failure: carry on with OpenMP's default */
}

void tri_cli_set_threads(int threads)
{
    if (threads <= 0)
        return;
    omp_set_num_threads(threads);
    openblas_set_num_threads(threads);
}
