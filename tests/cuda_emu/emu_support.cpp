/* tests/cuda_emu/emu_support.cpp - what the emulated CUDA build (tests/cuda_emu/CMakeLists.txt)
 * puts in place of the three cuda/ sources it leaves out.
 *
 * cuda/cublaslt_lazy.c loads cuBLASLt with dlopen: here cuBLASLt is tests/cuda_emu/cublasLt.h, so
 * there is nothing to load. cuda/flash_mma.cu (the tiled attention: templates launched with dynamic
 * shared memory) has its own emulation (tests/test_flash_mma_cpu.cpp); here it supports no head
 * size, so cuda/flash.cu takes its simple kernels, as it does on a GPU without the shared memory.
 * cuda/comm_nccl.c needs NCCL and a GPU per rank: in its place the staged MPI comm, which ranks
 * sharing a GPU use, serves the emulated ranks. */
#include "cuda/comm_nccl.h"
#include "cuda/cuda_internal.h"
#include "cuda/flash_mma.h"
extern "C" {
#include "engine/train/comm_staged.h"
}

extern "C" int tri_cublaslt_load(void)
{
    return TRI_OK;
}

bool tri_flash_mma_supports(int64_t HS)
{
    (void)HS;
    return false;
}

size_t tri_flash_mma_smem_bytes(int64_t HS, bool bf16, bool backward)
{
    (void)HS, (void)bf16, (void)backward;
    return 0; /* no kernel for any head size */
}

int tri_flash_mma_forward(cudaStream_t stream, bool bf16, void *out, float *lse, const void *qkv, tri_flash_dims d)
{
    (void)stream, (void)bf16, (void)out, (void)lse, (void)qkv, (void)d;
    return TRI_ERR(TRI_ENOTSUP, "the emulated CUDA build has no tiled attention kernels");
}

int tri_flash_mma_backward(cudaStream_t stream, bool bf16, void *dqkv, const float *delta, const void *dout,
                           const void *qkv, const float *lse, tri_flash_dims d)
{
    (void)stream, (void)bf16, (void)dqkv, (void)delta, (void)dout, (void)qkv, (void)lse, (void)d;
    return TRI_ERR(TRI_ENOTSUP, "the emulated CUDA build has no tiled attention kernels");
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
