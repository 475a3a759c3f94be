/* cuda/cublaslt_lazy.c - cuBLASLt loaded when the first CUDA device is created, not at start-up.
 *
 * Why: libcublasLt.so (540 MB in CUDA 13) costs every process that links it about 0.45 s at start
 * (its constructors; 0.8 s under AddressSanitizer with leak checking), even a `ckpt inspect`, a
 * `tokenize` or an `engine_train --device cpu` that never touches a GPU, and a binary linked to it
 * does not start at all on a node without the CUDA libraries. So the CUDA backend does not link it:
 * this file defines the cuBLASLt functions Trident calls, with cublasLt.h's own prototypes (the
 * compiler checks them), each forwarding to the library's function resolved by dlopen/dlsym in
 * tri_cublaslt_load (the stub pattern of TensorFlow's cublasLt_stub.cc and NVIDIA's lib/stubs).
 * Only these 14 functions are forwarded; a new call needs a line here (the link fails until then).
 *
 * The library is found by its soname (LD_LIBRARY_PATH, the executable's run path), then at the path
 * CMake found at configure time. Loaded once per process (pthread_once), never unloaded. */
#include <cublasLt.h>
#include <dlfcn.h>
#include <pthread.h>
#include <stddef.h>
#include <stdio.h>
#include <string.h>

#include "cuda/cuda_internal.h"

#ifndef TRI_CUBLASLT_SONAME
#define TRI_CUBLASLT_SONAME "libcublasLt.so"
#endif
#ifndef TRI_CUBLASLT_PATH
#define TRI_CUBLASLT_PATH TRI_CUBLASLT_SONAME
#endif

/* the library's functions, typed by cublasLt.h's declarations */
static struct {
    __typeof__(cublasLtCreate) *Create;
    __typeof__(cublasLtDestroy) *Destroy;
    __typeof__(cublasLtGetStatusString) *GetStatusString;
    __typeof__(cublasLtMatmul) *Matmul;
    __typeof__(cublasLtMatmulAlgoGetHeuristic) *MatmulAlgoGetHeuristic;
    __typeof__(cublasLtMatmulDescCreate) *MatmulDescCreate;
    __typeof__(cublasLtMatmulDescDestroy) *MatmulDescDestroy;
    __typeof__(cublasLtMatmulDescSetAttribute) *MatmulDescSetAttribute;
    __typeof__(cublasLtMatmulPreferenceCreate) *MatmulPreferenceCreate;
    __typeof__(cublasLtMatmulPreferenceDestroy) *MatmulPreferenceDestroy;
    __typeof__(cublasLtMatmulPreferenceSetAttribute) *MatmulPreferenceSetAttribute;
    __typeof__(cublasLtMatrixLayoutCreate) *MatrixLayoutCreate;
    __typeof__(cublasLtMatrixLayoutDestroy) *MatrixLayoutDestroy;
    __typeof__(cublasLtMatrixLayoutSetAttribute) *MatrixLayoutSetAttribute;
} lt;

static pthread_once_t lt_once = PTHREAD_ONCE_INIT;
static char lt_error[512]; /* empty once loaded; written only inside the once routine */

/* dlsym into a typed pointer (dlsym returns void *, which ISO C does not convert to a function
 * pointer; POSIX guarantees the representation, so copy the bits) */
static int resolve(void *lib, const char *name, void *fn_ptr, size_t size)
{
    void *sym = dlsym(lib, name);
    if (!sym) {
        snprintf(lt_error, sizeof lt_error, "%s has no %s (a cuBLASLt older than this build's headers?)",
                 TRI_CUBLASLT_SONAME, name);
        return -1;
    }
    memcpy(fn_ptr, &sym, size);
    return 0;
}

#define RESOLVE(lib, field) resolve(lib, "cublasLt" #field, &lt.field, sizeof lt.field)

static void load_once(void)
{
    void *lib = dlopen(TRI_CUBLASLT_SONAME, RTLD_NOW | RTLD_LOCAL);
    if (!lib)
        lib = dlopen(TRI_CUBLASLT_PATH, RTLD_NOW | RTLD_LOCAL);
    if (!lib) {
        const char *why = dlerror();
        snprintf(lt_error, sizeof lt_error, "cannot load cuBLASLt (%s, nor %s): %s; put the CUDA toolkit's "
                 "library directory on LD_LIBRARY_PATH", TRI_CUBLASLT_SONAME, TRI_CUBLASLT_PATH,
                 why ? why : "unknown error");
        return;
    }
    if (RESOLVE(lib, Create) || RESOLVE(lib, Destroy) || RESOLVE(lib, GetStatusString) || RESOLVE(lib, Matmul) ||
        RESOLVE(lib, MatmulAlgoGetHeuristic) || RESOLVE(lib, MatmulDescCreate) || RESOLVE(lib, MatmulDescDestroy) ||
        RESOLVE(lib, MatmulDescSetAttribute) || RESOLVE(lib, MatmulPreferenceCreate) ||
        RESOLVE(lib, MatmulPreferenceDestroy) || RESOLVE(lib, MatmulPreferenceSetAttribute) ||
        RESOLVE(lib, MatrixLayoutCreate) || RESOLVE(lib, MatrixLayoutDestroy) || RESOLVE(lib, MatrixLayoutSetAttribute)) {
        memset(&lt, 0, sizeof lt);
        dlclose(lib);
    }
}

int tri_cublaslt_load(void)
{
    pthread_once(&lt_once, load_once);
    if (lt_error[0])
        return TRI_ERR(TRI_EDEVICE, "%s", lt_error);
    return TRI_OK;
}

/* ---- the forwarding definitions (cublasLt.h's prototypes); before a successful load they fail
 * with CUBLAS_STATUS_NOT_INITIALIZED ---- */

cublasStatus_t CUBLASWINAPI cublasLtCreate(cublasLtHandle_t *lightHandle)
{
    return lt.Create ? lt.Create(lightHandle) : CUBLAS_STATUS_NOT_INITIALIZED;
}

cublasStatus_t CUBLASWINAPI cublasLtDestroy(cublasLtHandle_t lightHandle)
{
    return lt.Destroy ? lt.Destroy(lightHandle) : CUBLAS_STATUS_NOT_INITIALIZED;
}

const char *CUBLASWINAPI cublasLtGetStatusString(cublasStatus_t status)
{
    return lt.GetStatusString ? lt.GetStatusString(status) : "cuBLASLt is not loaded";
}

cublasStatus_t CUBLASWINAPI cublasLtMatmul(cublasLtHandle_t lightHandle, cublasLtMatmulDesc_t computeDesc,
                                           const void *alpha, const void *A, cublasLtMatrixLayout_t Adesc,
                                           const void *B, cublasLtMatrixLayout_t Bdesc, const void *beta,
                                           const void *C, cublasLtMatrixLayout_t Cdesc, void *D,
                                           cublasLtMatrixLayout_t Ddesc, const cublasLtMatmulAlgo_t *algo,
                                           void *workspace, size_t workspaceSizeInBytes, cudaStream_t stream)
{
    if (!lt.Matmul)
        return CUBLAS_STATUS_NOT_INITIALIZED;
    return lt.Matmul(lightHandle, computeDesc, alpha, A, Adesc, B, Bdesc, beta, C, Cdesc, D, Ddesc, algo, workspace,
                     workspaceSizeInBytes, stream);
}

cublasStatus_t CUBLASWINAPI cublasLtMatmulAlgoGetHeuristic(
    cublasLtHandle_t lightHandle, cublasLtMatmulDesc_t operationDesc, cublasLtMatrixLayout_t Adesc,
    cublasLtMatrixLayout_t Bdesc, cublasLtMatrixLayout_t Cdesc, cublasLtMatrixLayout_t Ddesc,
    cublasLtMatmulPreference_t preference, int requestedAlgoCount,
    cublasLtMatmulHeuristicResult_t heuristicResultsArray[], int *returnAlgoCount)
{
    if (!lt.MatmulAlgoGetHeuristic)
        return CUBLAS_STATUS_NOT_INITIALIZED;
    return lt.MatmulAlgoGetHeuristic(lightHandle, operationDesc, Adesc, Bdesc, Cdesc, Ddesc, preference,
                                     requestedAlgoCount, heuristicResultsArray, returnAlgoCount);
}

cublasStatus_t CUBLASWINAPI cublasLtMatmulDescCreate(cublasLtMatmulDesc_t *matmulDesc,
                                                     cublasComputeType_t computeType, cudaDataType_t scaleType)
{
    return lt.MatmulDescCreate ? lt.MatmulDescCreate(matmulDesc, computeType, scaleType)
                               : CUBLAS_STATUS_NOT_INITIALIZED;
}

cublasStatus_t CUBLASWINAPI cublasLtMatmulDescDestroy(cublasLtMatmulDesc_t matmulDesc)
{
    return lt.MatmulDescDestroy ? lt.MatmulDescDestroy(matmulDesc) : CUBLAS_STATUS_NOT_INITIALIZED;
}

cublasStatus_t CUBLASWINAPI cublasLtMatmulDescSetAttribute(cublasLtMatmulDesc_t matmulDesc,
                                                           cublasLtMatmulDescAttributes_t attr, const void *buf,
                                                           size_t sizeInBytes)
{
    return lt.MatmulDescSetAttribute ? lt.MatmulDescSetAttribute(matmulDesc, attr, buf, sizeInBytes)
                                     : CUBLAS_STATUS_NOT_INITIALIZED;
}

cublasStatus_t CUBLASWINAPI cublasLtMatmulPreferenceCreate(cublasLtMatmulPreference_t *pref)
{
    return lt.MatmulPreferenceCreate ? lt.MatmulPreferenceCreate(pref) : CUBLAS_STATUS_NOT_INITIALIZED;
}

cublasStatus_t CUBLASWINAPI cublasLtMatmulPreferenceDestroy(cublasLtMatmulPreference_t pref)
{
    return lt.MatmulPreferenceDestroy ? lt.MatmulPreferenceDestroy(pref) : CUBLAS_STATUS_NOT_INITIALIZED;
}

cublasStatus_t CUBLASWINAPI cublasLtMatmulPreferenceSetAttribute(cublasLtMatmulPreference_t pref,
                                                                 cublasLtMatmulPreferenceAttributes_t attr,
                                                                 const void *buf, size_t sizeInBytes)
{
    return lt.MatmulPreferenceSetAttribute ? lt.MatmulPreferenceSetAttribute(pref, attr, buf, sizeInBytes)
                                           : CUBLAS_STATUS_NOT_INITIALIZED;
}

cublasStatus_t CUBLASWINAPI cublasLtMatrixLayoutCreate(cublasLtMatrixLayout_t *matLayout, cudaDataType type,
                                                       uint64_t rows, uint64_t cols, int64_t ld)
{
    return lt.MatrixLayoutCreate ? lt.MatrixLayoutCreate(matLayout, type, rows, cols, ld)
                                 : CUBLAS_STATUS_NOT_INITIALIZED;
}

cublasStatus_t CUBLASWINAPI cublasLtMatrixLayoutDestroy(cublasLtMatrixLayout_t matLayout)
{
    return lt.MatrixLayoutDestroy ? lt.MatrixLayoutDestroy(matLayout) : CUBLAS_STATUS_NOT_INITIALIZED;
}

cublasStatus_t CUBLASWINAPI cublasLtMatrixLayoutSetAttribute(cublasLtMatrixLayout_t matLayout,
                                                             cublasLtMatrixLayoutAttribute_t attr, const void *buf,
                                                             size_t sizeInBytes)
{
    return lt.MatrixLayoutSetAttribute ? lt.MatrixLayoutSetAttribute(matLayout, attr, buf, sizeInBytes)
                                       : CUBLAS_STATUS_NOT_INITIALIZED;
}
