/* tools/cli/backend.c - device backends by name (see backend.h). */
#include "tools/cli/backend.h"

#include <omp.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "engine/status.h"

#ifdef TRIDENT_CUDA
#include <mpi.h>

#include "cuda/comm_nccl.h"
#include "cuda/device_cuda.h"

/* Seconds an NCCL operation may stay incomplete before its communicator is aborted (PyTorch's
 * and NCCL watchdogs default to 10 minutes as well). */
#define NCCL_TIMEOUT_S 600.0
#endif

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

int tri_cli_device_create(const char *name, int threads, tri_device **out)
{
    *out = NULL;
    if (strcmp(name, "cpu") == 0)
        return tri_device_cpu_create(out, threads);
    if (strcmp(name, "cuda") == 0) {
#ifdef TRIDENT_CUDA
        return tri_device_cuda_create(out, 0);
#else
        return TRI_ERR(TRI_ENOTSUP, "--device cuda: this build has no CUDA backend (nvcc was not found "
                       "when it was configured)");
#endif
    }
    return TRI_ERR(TRI_EINVAL, "--device %s: expected cpu or cuda", name);
}

int tri_cli_device_world(const char *name, tri_device *d, tri_comm **out)
{
    *out = NULL;
#ifdef TRIDENT_CUDA
    if (strcmp(name, "cuda") == 0) {
        MPI_Comm world = MPI_COMM_WORLD;
        return tri_comm_nccl_create(out, &world, d, NCCL_TIMEOUT_S);
    }
#endif
    return TRI_OK;
}
