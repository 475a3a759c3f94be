/* tools/cli/backend.h - choosing a concrete device backend by name (tools and tests only).
 *
 * The one place where the build's CUDA switch (TRIDENT_CUDA, defined by CMake when nvcc is found)
 * is tested, so the rest of Trident never names a backend. */
#ifndef TRIDENT_TOOLS_CLI_BACKEND_H
#define TRIDENT_TOOLS_CLI_BACKEND_H

#include "engine/comm/comm.h"
#include "engine/device/device.h"

/* Creates the "cpu" (with `threads` OpenMP/BLAS threads, 0 = OpenMP's default) or "cuda" device.
 * "cuda" takes GPU (node-local MPI rank % GPUs on the node), so the ranks of a node get distinct
 * GPUs; with MPI initialised every rank must call it (the node-local rank is found collectively).
 * TRI_ENOTSUP when the build has no CUDA backend, TRI_EDEVICE when no GPU is usable; the message
 * says which. */
int tri_cli_device_create(const char *name, int threads, tri_device **out);

/* The world comm that matches device d of backend `name`, over MPI_COMM_WORLD (collective). `comm`
 * (engine_train's --comm) picks how the ranks of a "cuda" device talk:
 *   "nccl"  NCCL on d's GPU (its groups are NCCL communicators), one GPU per rank;
 *   "mpi"   the MPI comm, device tensors staged through host memory (engine/train/comm_staged.h):
 *           for ranks that share a GPU, which NCCL refuses;
 *   "auto"  NCCL, or "mpi" when a node runs more ranks than it has GPUs (rank 0 says so on stderr).
 * Operations fail after timeout_s seconds (--comm-timeout; 0: wait forever). For "cpu" *out = NULL:
 * the caller's MPI comm, over host buffers, serves ("auto" or "mpi"; "nccl" is TRI_EINVAL). MPI must
 * be initialised. */
int tri_cli_device_world(const char *name, const char *comm, tri_device *d, double timeout_s, tri_comm **out);

/* The dense peak of device d of backend `name` in GFLOP/s, MFU's denominator per rank: for "cuda"
 * the card's datasheet peak in bf16 or fp32 (cuda/peaks.c, the table bench_cuda_train uses), 0 for
 * a card not in the table; for "cpu" 100 GFLOP/s per thread (OpenBLAS sgemm on one core here,
 * ../shared/NOTES.md; 0 threads: 0, no MFU). */
double tri_cli_device_peak_gflops(const char *name, const tri_device *d, int threads, bool bf16);

#endif
