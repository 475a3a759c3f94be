/* tools/cli/backend.c - device backends by name (see backend.h). */
#include "tools/cli/backend.h"

#include <stdio.h>
#include <string.h>

#include "engine/core/status.h"
#include "engine/train/comm_staged.h"

#ifdef TRIDENT_CUDA
#include <mpi.h>

#include "cuda/comm_nccl.h"
#include "cuda/device_cuda.h"

/* This process's rank among the MPI ranks on its node (0 without MPI): the GPU it takes, so the
 * ranks of a node use distinct GPUs as NCCL requires. Collective over MPI_COMM_WORLD when MPI is
 * initialised (every rank creates its device). */
static int local_rank(int *out)
{
    int init = 0;
    *out = 0;
    MPI_Initialized(&init);
    if (!init)
        return TRI_OK;
    MPI_Comm node;
    if (MPI_Comm_split_type(MPI_COMM_WORLD, MPI_COMM_TYPE_SHARED, 0, MPI_INFO_NULL, &node) != MPI_SUCCESS)
        return TRI_ERR(TRI_ECOMM, "MPI_Comm_split_type(MPI_COMM_TYPE_SHARED) failed: cannot tell the node-local rank");
    MPI_Comm_rank(node, out);
    MPI_Comm_free(&node);
    return TRI_OK;
}
#endif

int tri_cli_device_create(const char *name, int threads, tri_device **out)
{
    *out = NULL;
    if (strcmp(name, "cpu") == 0)
        return tri_device_cpu_create(out, threads);
    if (strcmp(name, "cuda") == 0) {
#ifdef TRIDENT_CUDA
        int ordinal = 0, rc = local_rank(&ordinal), count = tri_cuda_device_count();
        if (rc)
            return rc;
        /* without a usable GPU, creation reports why ("no CUDA device: ...") */
        return tri_device_cuda_create(out, count > 0 ? ordinal % count : 0);
#else
        return TRI_ERR(TRI_ENOTSUP, "--device cuda: this build has no CUDA backend (nvcc was not found "
                       "when it was configured)");
#endif
    }
    return TRI_ERR(TRI_EINVAL, "--device %s: expected cpu or cuda", name);
}

int tri_cli_device_world(const char *name, const char *comm, tri_device *d, double timeout_s, tri_comm **out)
{
    *out = NULL;
    if (strcmp(comm, "auto") != 0 && strcmp(comm, "nccl") != 0 && strcmp(comm, "mpi") != 0)
        return TRI_ERR(TRI_EINVAL, "--comm %s: expected auto, nccl or mpi", comm);
    if (strcmp(name, "cuda") != 0) {
        if (strcmp(comm, "nccl") == 0)
            return TRI_ERR(TRI_EINVAL, "--comm nccl needs --device cuda (CPU ranks talk through MPI)");
        return TRI_OK;
    }
#ifdef TRIDENT_CUDA
    bool staged = strcmp(comm, "mpi") == 0;
    if (strcmp(comm, "auto") == 0) {
        int node_ranks = 1, rank = 0;
        MPI_Comm node;
        if (MPI_Comm_split_type(MPI_COMM_WORLD, MPI_COMM_TYPE_SHARED, 0, MPI_INFO_NULL, &node) != MPI_SUCCESS)
            return TRI_ERR(TRI_ECOMM, "MPI_Comm_split_type(MPI_COMM_TYPE_SHARED) failed: cannot count the node's ranks");
        MPI_Comm_size(node, &node_ranks);
        MPI_Comm_free(&node);
        /* every rank must choose alike: the largest node decides */
        MPI_Allreduce(MPI_IN_PLACE, &node_ranks, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD);
        MPI_Comm_rank(MPI_COMM_WORLD, &rank);
        int gpus = tri_cuda_device_count();
        staged = node_ranks > gpus;
        if (staged && rank == 0)
            fprintf(stderr, "note: %d ranks share %d GPU%s on a node, and NCCL needs one GPU per rank: the ranks "
                    "talk through MPI with device tensors staged through host memory (--comm mpi; slower than "
                    "NCCL)\n", node_ranks, gpus, gpus == 1 ? "" : "s");
    }
    MPI_Comm world = MPI_COMM_WORLD;
    if (!staged)
        return tri_comm_nccl_create(out, &world, d, timeout_s);
    tri_comm *inner = NULL;
    int rc = tri_comm_mpi_create(&inner, &world);
    if (!rc) tri_comm_set_timeout(inner, timeout_s);
    if (!rc) rc = tri_comm_staged_create(out, inner, d);
    if (rc && inner)
        tri_comm_destroy(inner);
    return rc;
#else
    (void)d;
    (void)timeout_s;
    return TRI_ERR(TRI_ENOTSUP, "--device cuda: this build has no CUDA backend");
#endif
}

double tri_cli_device_peak_gflops(const char *name, const tri_device *d, int threads, bool bf16)
{
    if (strcmp(name, "cpu") == 0)
        return 100.0 * threads;
#ifdef TRIDENT_CUDA
    tri_cuda_info info;
    double tflops = 0.0;
    if (strcmp(name, "cuda") == 0 && tri_cuda_device_info(d->ordinal, &info) == TRI_OK &&
        tri_cuda_peak_tflops(info.name, bf16, &tflops))
        return tflops * 1e3;
#else
    (void)d;
    (void)bf16;
#endif
    return 0.0;
}
