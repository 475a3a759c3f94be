/* tests/gpu/mpi_common.h - start-up shared by the GPU programs run under mpiexec (tests/gpu/mpi_*.c).
 *
 * NCCL wants one GPU per rank: a program with fewer usable GPUs than ranks prints why on rank 0 and
 * every rank exits with GPU_SKIP (CTest's SKIP_RETURN_CODE), so the test is reported as skipped,
 * never as passed. Results are agreed over MPI so every rank exits with the same status. */
#ifndef TRIDENT_TESTS_GPU_MPI_COMMON_H
#define TRIDENT_TESTS_GPU_MPI_COMMON_H

#include <mpi.h>
#include <stdbool.h>
#include <stdio.h>

#include "cuda/device_cuda.h"
#include "tests/gpu/gpuutil.h"

/* 0 when this job can run (one GPU per rank); else prints the reason on rank 0 and returns GPU_SKIP. */
static inline int mpi_gpu_check(int rank, int size)
{
    const char *why = "";
    int count = tri_cuda_available(&why) ? tri_cuda_device_count() : 0;
    if (count >= size)
        return 0;
    if (rank == 0)
        printf("SKIP: needs %d CUDA devices (one per rank), found %d%s%s\n", size, count, count ? "" : ": ",
               count ? "" : why);
    return GPU_SKIP;
}

/* 0 when this job can run: one GPU per rank (*shared false: NCCL), or fewer GPUs than ranks
 * (*shared true: ranks share GPUs, rank r on GPU r % count, and talk through the MPI comm staged
 * through host memory, engine/train/comm_staged.h, as engine_train --comm mpi does); GPU_SKIP,
 * saying why on rank 0, without a usable GPU. */
static inline int mpi_gpu_check_shared(int rank, int size, bool *shared)
{
    const char *why = "";
    int count = tri_cuda_available(&why) ? tri_cuda_device_count() : 0;
    *shared = count > 0 && count < size;
    if (count > 0) {
        if (*shared && rank == 0)
            printf("%d ranks share %d GPU%s: MPI comm staged through host memory\n", size, count, count == 1 ? "" : "s");
        return 0;
    }
    if (rank == 0)
        printf("SKIP: no usable CUDA device: %s\n", why);
    return GPU_SKIP;
}

/* Sum of every rank's failures (each rank reports the same total). */
static inline int mpi_total_failures(int failures)
{
    int total = 0;
    MPI_Allreduce(&failures, &total, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
    return total;
}

#endif
