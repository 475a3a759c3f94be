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

/* The world comm that matches device d of backend `name`, over MPI_COMM_WORLD (collective): for
 * "cuda" an NCCL comm on d's GPU (its groups are NCCL communicators) whose operations fail after
 * timeout_s seconds (engine_train's --comm-timeout; 0: wait forever), for "cpu" *out = NULL: the
 * caller's MPI comm, over host buffers, serves. MPI must be initialised. */
int tri_cli_device_world(const char *name, tri_device *d, double timeout_s, tri_comm **out);

/* OpenMP threads that busy-wait between loops take the cores from OpenBLAS's threads; libgomp reads
 * OMP_WAIT_POLICY only when it loads, so when it is unset this sets it to PASSIVE and re-executes
 * the program (same arguments, same process) before anything else runs. Call first in main. */
void tri_cli_passive_openmp(char **argv);

/* Sets the process-wide OpenMP and OpenBLAS thread counts. */
void tri_cli_set_threads(int threads);

#endif
