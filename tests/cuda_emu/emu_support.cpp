/* tests/cuda_emu/emu_support.cpp - what the emulated CUDA build (tests/cuda_emu/CMakeLists.txt)
 * puts in place of the two cuda/ sources it leaves out.
 *
 * cuda/cublaslt_lazy.c loads cuBLASLt with dlopen: here cuBLASLt is tests/cuda_emu/cublasLt.h, so
 * there is nothing to load. cuda/comm_nccl.c needs NCCL and a GPU per rank: in its place the
 * staged MPI comm, which ranks sharing a GPU use, serves the emulated ranks. */
#include "cuda/comm_nccl.h"
#include "cuda/cuda_internal.h"
extern "C" {
#include "engine/train/comm_staged.h"
}

extern "C" int tri_cublaslt_load(void)
{
    return TRI_OK;
}

/* tests/cuda_emu/cublaslt_knobs.h */
extern "C" {
int tri_emu_lt_found = 2;
int tri_emu_lt_refused = 0;
long tri_emu_lt_runs = 0;
}

/* "NCCL" here is what ranks sharing one GPU use (--comm mpi): the MPI comm with device tensors staged
 * through host memory (engine/train/comm_staged.h), over the same communicator. So the ranks of an
 * emulated run talk as on one GPU, whatever --comm says. */
extern "C" int tri_comm_nccl_create(tri_comm **out, const void *mpi_comm, tri_device *dev, double timeout_s)
{
    *out = NULL;
    tri_comm *inner = NULL;
    int rc = tri_comm_mpi_create(&inner, mpi_comm);
    if (!rc) tri_comm_set_timeout(inner, timeout_s);
    if (!rc) rc = tri_comm_staged_create(out, inner, dev);
    if (rc && inner)
        tri_comm_destroy(inner);
    return rc;
}
