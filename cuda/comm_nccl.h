/* cuda/comm_nccl.h - the NCCL comm: the comm interface (engine/comm/comm.h) over device buffers.
 *
 * Only tools/ and tests/ create one (through tools/cli/backend.h or directly in GPU tests); the
 * rest of Trident sees a tri_comm. */
#ifndef TRIDENT_CUDA_COMM_NCCL_H
#define TRIDENT_CUDA_COMM_NCCL_H

#include "engine/comm/comm.h"
#include "engine/device/device.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Collective over the MPI communicator *mpi_comm (an MPI_Comm *; MPI must be initialised): rank 0
 * makes an NCCL unique id (ncclGetUniqueId), MPI_Bcast gives it to every rank, and each rank joins
 * with ncclCommInitRankConfig on dev's GPU (dev must be a CUDA device; one GPU per rank, as NCCL
 * requires). Groups made later with tri_comm_split are NCCL communicators too (ncclCommSplit), so
 * tri_grid_create makes one communicator per group at start. Buffers passed to the comm must be
 * dev's memory. Operations are queued on a communication stream ordered after dev's earlier ops
 * and before its later ones by events; a wait on dev (copy_to_host, sync) also watches the comm:
 * an asynchronous NCCL error (ncclCommGetAsyncError) or an operation not complete after timeout_s
 * seconds (0: no limit; the comm's tri_comm_set_timeout changes it) aborts the communicator (ncclCommAbort) and fails the wait with TRI_ECOMM / TRI_ETIMEOUT
 * instead of hanging. tri_comm_abort aborts the communicator, then the MPI job. */
int tri_comm_nccl_create(tri_comm **out, const void *mpi_comm, tri_device *dev, double timeout_s);

#ifdef __cplusplus
}
#endif

#endif
