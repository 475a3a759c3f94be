/* tests/cuda_emu/cublasLt.h - the part of cuBLASLt that cuda/matmul/matmul.cu calls, on the CPU.
 *
 * For the emulated CUDA build (tests/cuda_emu/cuda_runtime.h says how it works). cublasLtMatmul
 * computes what NVIDIA's cuBLASLt documentation defines, in cuBLAS's column-major convention:
 * D = alpha op(A) op(B) + beta C (C not read when beta is 0) for each of the batch's matrices at
 * their strided offsets, where a layout is rows x cols with leading dimension ld (element (i, j) at
 * i + j ld), op(X) = X or X^T per CUBLASLT_MATMUL_DESC_TRANSA/B, and CUBLASLT_EPILOGUE_BIAS adds
 * bias[i] to row i of D (a vector of D's rows, of the BIAS_DATA_TYPE). A and B are fp32 or bf16 (one
 * type), C and D fp32 or bf16, the scale and the accumulation fp32 in the cuBLAS sense; the sum here
 * runs in double and is rounded once, a summation order of its own as cuBLASLt's is. So
 * cuda/matmul/matmul.cu's mapping of Trident's row-major products onto that convention (swapped operands,
 * leading dimensions, the bias on D's rows, batch strides) is checked against the CPU backend's
 * sgemm within the tolerance that a different order gives. Descriptor attributes the code does not
 * set keep cuBLASLt's defaults (no transposes, the default epilogue); preferences accept everything,
 * and the heuristic returns as many algorithms as tests/cuda_emu/cublaslt_knobs.h says (default 2,
 * each computing the same), of which cublasLtMatmul refuses the first tri_emu_lt_refused. */
#ifndef TRIDENT_TESTS_CUDA_EMU_CUBLASLT_H
#define TRIDENT_TESTS_CUDA_EMU_CUBLASLT_H

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cuda_runtime.h"
#include "engine/core/math.h"
#include "tests/cuda_emu/cublaslt_knobs.h"

typedef enum cublasStatus_t {
    CUBLAS_STATUS_SUCCESS = 0,
    CUBLAS_STATUS_ALLOC_FAILED = 3,
    CUBLAS_STATUS_INVALID_VALUE = 7,
    CUBLAS_STATUS_NOT_SUPPORTED = 15,
} cublasStatus_t;

typedef enum cublasOperation_t { CUBLAS_OP_N = 0, CUBLAS_OP_T = 1 } cublasOperation_t;
typedef enum cublasComputeType_t { CUBLAS_COMPUTE_32F = 68 } cublasComputeType_t;

typedef enum cublasLtEpilogue_t {
    CUBLASLT_EPILOGUE_DEFAULT = 1,
    CUBLASLT_EPILOGUE_BIAS = 4,
    CUBLASLT_EPILOGUE_GELU_BIAS = 36,
} cublasLtEpilogue_t;

typedef enum cublasLtMatmulDescAttributes_t {
    CUBLASLT_MATMUL_DESC_TRANSA = 3,
    CUBLASLT_MATMUL_DESC_TRANSB = 4,
    CUBLASLT_MATMUL_DESC_EPILOGUE = 7,
    CUBLASLT_MATMUL_DESC_BIAS_POINTER = 8,
    CUBLASLT_MATMUL_DESC_BIAS_DATA_TYPE = 26,
} cublasLtMatmulDescAttributes_t;

typedef enum cublasLtMatrixLayoutAttribute_t {
    CUBLASLT_MATRIX_LAYOUT_BATCH_COUNT = 5,
    CUBLASLT_MATRIX_LAYOUT_STRIDED_BATCH_OFFSET = 6,
} cublasLtMatrixLayoutAttribute_t;

typedef enum cublasLtMatmulPreferenceAttributes_t {
    CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES = 1,
    CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES = 9,
    CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES = 10,
    CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES = 11,
    CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES = 12,
} cublasLtMatmulPreferenceAttributes_t;

typedef struct tri_emu_lt {
    int unused;
} *cublasLtHandle_t;

typedef struct tri_emu_lt_desc {
    int32_t transa, transb;
    uint32_t epilogue;
    const void *bias;
    int32_t bias_type;
} *cublasLtMatmulDesc_t;

typedef struct tri_emu_lt_layout {
    cudaDataType_t type;
    uint64_t rows, cols;
    int64_t ld;
    int32_t batch;
    int64_t stride;
} *cublasLtMatrixLayout_t;

typedef struct tri_emu_lt_pref {
    int unused;
} *cublasLtMatmulPreference_t;

typedef struct cublasLtMatmulAlgo_t {
    uint64_t data[8];
} cublasLtMatmulAlgo_t;

typedef struct cublasLtMatmulHeuristicResult_t {
    cublasLtMatmulAlgo_t algo;
    size_t workspaceSize;
    cublasStatus_t state;
    float wavesCount;
    int reserved[4];
} cublasLtMatmulHeuristicResult_t;

static inline const char *cublasLtGetStatusString(cublasStatus_t st)
{
    return st == CUBLAS_STATUS_SUCCESS ? "CUBLAS_STATUS_SUCCESS"
           : st == CUBLAS_STATUS_ALLOC_FAILED ? "CUBLAS_STATUS_ALLOC_FAILED"
           : st == CUBLAS_STATUS_NOT_SUPPORTED ? "CUBLAS_STATUS_NOT_SUPPORTED"
                                               : "CUBLAS_STATUS_INVALID_VALUE";
}

static inline cublasStatus_t cublasLtCreate(cublasLtHandle_t *h)
{
    *h = (cublasLtHandle_t)calloc(1, sizeof **h);
    return *h ? CUBLAS_STATUS_SUCCESS : CUBLAS_STATUS_ALLOC_FAILED;
}

static inline cublasStatus_t cublasLtDestroy(cublasLtHandle_t h)
{
    free(h);
    return CUBLAS_STATUS_SUCCESS;
}

static inline cublasStatus_t cublasLtMatmulDescCreate(cublasLtMatmulDesc_t *d, cublasComputeType_t compute,
                                                      cudaDataType_t scale)
{
    if (compute != CUBLAS_COMPUTE_32F || scale != CUDA_R_32F)
        return CUBLAS_STATUS_NOT_SUPPORTED;
    *d = (cublasLtMatmulDesc_t)calloc(1, sizeof **d);
    if (!*d)
        return CUBLAS_STATUS_ALLOC_FAILED;
    (*d)->transa = (*d)->transb = CUBLAS_OP_N;
    (*d)->epilogue = CUBLASLT_EPILOGUE_DEFAULT;
    (*d)->bias_type = -1;
    return CUBLAS_STATUS_SUCCESS;
}

static inline cublasStatus_t cublasLtMatmulDescDestroy(cublasLtMatmulDesc_t d)
{
    free(d);
    return CUBLAS_STATUS_SUCCESS;
}

/* Copies the value (size bytes) into the attribute, refusing a size that is not the attribute's. */
static inline cublasStatus_t cublasLtMatmulDescSetAttribute(cublasLtMatmulDesc_t d, cublasLtMatmulDescAttributes_t a,
                                                            const void *v, size_t size)
{
    void *field = NULL;
    size_t want = 0;
    switch (a) {
    case CUBLASLT_MATMUL_DESC_TRANSA: field = &d->transa, want = sizeof d->transa; break;
    case CUBLASLT_MATMUL_DESC_TRANSB: field = &d->transb, want = sizeof d->transb; break;
    case CUBLASLT_MATMUL_DESC_EPILOGUE: field = &d->epilogue, want = sizeof d->epilogue; break;
    case CUBLASLT_MATMUL_DESC_BIAS_POINTER: field = &d->bias, want = sizeof d->bias; break;
    case CUBLASLT_MATMUL_DESC_BIAS_DATA_TYPE: field = &d->bias_type, want = sizeof d->bias_type; break;
    }
    if (!field || size != want)
        return CUBLAS_STATUS_INVALID_VALUE;
    memcpy(field, v, size);
    return CUBLAS_STATUS_SUCCESS;
}

static inline cublasStatus_t cublasLtMatrixLayoutCreate(cublasLtMatrixLayout_t *l, cudaDataType_t type, uint64_t rows,
                                                        uint64_t cols, int64_t ld)
{
    if ((type != CUDA_R_32F && type != CUDA_R_16BF) || ld < (int64_t)(rows ? rows : 1))
        return CUBLAS_STATUS_INVALID_VALUE; /* column-major: ld >= rows */
    *l = (cublasLtMatrixLayout_t)calloc(1, sizeof **l);
    if (!*l)
        return CUBLAS_STATUS_ALLOC_FAILED;
    (*l)->type = type, (*l)->rows = rows, (*l)->cols = cols, (*l)->ld = ld, (*l)->batch = 1;
    return CUBLAS_STATUS_SUCCESS;
}

static inline cublasStatus_t cublasLtMatrixLayoutDestroy(cublasLtMatrixLayout_t l)
{
    free(l);
    return CUBLAS_STATUS_SUCCESS;
}

static inline cublasStatus_t cublasLtMatrixLayoutSetAttribute(cublasLtMatrixLayout_t l,
                                                              cublasLtMatrixLayoutAttribute_t a, const void *v,
                                                              size_t size)
{
    if (a == CUBLASLT_MATRIX_LAYOUT_BATCH_COUNT && size == sizeof l->batch)
        memcpy(&l->batch, v, size);
    else if (a == CUBLASLT_MATRIX_LAYOUT_STRIDED_BATCH_OFFSET && size == sizeof l->stride)
        memcpy(&l->stride, v, size);
    else
        return CUBLAS_STATUS_INVALID_VALUE;
    return CUBLAS_STATUS_SUCCESS;
}

static inline cublasStatus_t cublasLtMatmulPreferenceCreate(cublasLtMatmulPreference_t *p)
{
    *p = (cublasLtMatmulPreference_t)calloc(1, sizeof **p);
    return *p ? CUBLAS_STATUS_SUCCESS : CUBLAS_STATUS_ALLOC_FAILED;
}

static inline cublasStatus_t cublasLtMatmulPreferenceDestroy(cublasLtMatmulPreference_t p)
{
    free(p);
    return CUBLAS_STATUS_SUCCESS;
}

static inline cublasStatus_t cublasLtMatmulPreferenceSetAttribute(cublasLtMatmulPreference_t p,
                                                                  cublasLtMatmulPreferenceAttributes_t a,
                                                                  const void *v, size_t size)
{
    (void)p, (void)a, (void)v, (void)size;
    return CUBLAS_STATUS_SUCCESS;
}

static inline cublasStatus_t cublasLtMatmulAlgoGetHeuristic(cublasLtHandle_t h, cublasLtMatmulDesc_t d,
                                                            cublasLtMatrixLayout_t a, cublasLtMatrixLayout_t b,
                                                            cublasLtMatrixLayout_t c, cublasLtMatrixLayout_t dl,
                                                            cublasLtMatmulPreference_t p, int requested,
                                                            cublasLtMatmulHeuristicResult_t *result, int *found)
{
    (void)h, (void)d, (void)a, (void)b, (void)c, (void)dl, (void)p;
    if (requested < 1)
        return CUBLAS_STATUS_INVALID_VALUE;
    *found = tri_emu_lt_found < requested ? tri_emu_lt_found : requested;
    for (int i = 0; i < *found; i++) {
        memset(&result[i], 0, sizeof result[i]);
        result[i].algo.data[0] = (uint64_t)i; /* its place in the heuristic's order */
    }
    return CUBLAS_STATUS_SUCCESS;
}

/* Element (i, j) of op(X) for a layout l, op T when trans, in batch member z. */
static inline float tri_emu_lt_at(const void *x, cublasLtMatrixLayout_t l, int32_t trans, int64_t z, int64_t i,
                                  int64_t j)
{
    int64_t e = z * l->stride + (trans == CUBLAS_OP_T ? j + i * l->ld : i + j * l->ld);
    return tri_load(x, l->type == CUDA_R_16BF, e);
}

/* The product, computed at once (cublasLtMatmul checks the arguments first). Each element of D is
 * its k-ordered sum of op(A)[i][k] op(B)[k][j] in double, rounded once: the products of floats are
 * exact in double, so only that order defines the bits. The loops keep it and vectorise across the
 * row's n independent sums: op(A) is widened to an (m, ka) and op(B) to a (ka, n) row-major
 * double copy per batch member, and row i's sums advance together, four k at a time in k's order
 * (C's left-to-right additions). The naive loop over (i, j), with two layout lookups per product,
 * spent 3/4 of an emulated training's time; this gives the same bits. */
static inline void tri_emu_lt_run(tri_emu_lt_desc d, float a, const void *A, tri_emu_lt_layout la, const void *B,
                                  tri_emu_lt_layout lb, float b, const void *C, tri_emu_lt_layout lc, void *D,
                                  tri_emu_lt_layout ld)
{
    tri_emu_lt_runs++;
    int64_t m = (int64_t)ld.rows, n = (int64_t)ld.cols;
    int64_t ka = (int64_t)(d.transa == CUBLAS_OP_T ? la.rows : la.cols);
    bool bias = d.epilogue == CUBLASLT_EPILOGUE_BIAS;
    if (m == 0 || n == 0)
        return; /* D has no element */
    double *opa = (double *)malloc((size_t)(m * ka + ka * n + n) * sizeof(double)); /* (m, ka) */
    if (!opa) { /* the emulation's own scratch (as cuda_emu.h's lane stacks): the test cannot go on */
        fprintf(stderr, "cuda_emu: cublasLtMatmul cannot allocate its %lld x %lld x %lld scratch\n", (long long)m,
                (long long)ka, (long long)n);
        abort();
    }
    double *opb = opa + m * ka; /* (ka, n) */
    double *row = opb + ka * n; /* (n) */
    for (int64_t z = 0; z < ld.batch; z++) {
        for (int64_t i = 0; i < m; i++)
            for (int64_t k = 0; k < ka; k++)
                opa[i * ka + k] = tri_emu_lt_at(A, &la, d.transa, z, i, k);
        for (int64_t k = 0; k < ka; k++)
            for (int64_t j = 0; j < n; j++)
                opb[k * n + j] = tri_emu_lt_at(B, &lb, d.transb, z, k, j);
        for (int64_t i = 0; i < m; i++) {
            for (int64_t j = 0; j < n; j++)
                row[j] = 0.0;
            const double *ai = opa + i * ka;
            int64_t k = 0;
            for (; k + 4 <= ka; k += 4) { /* four terms per pass over the row, added in k's order */
                const double *b0 = opb + k * n, *b1 = b0 + n, *b2 = b1 + n, *b3 = b2 + n;
                for (int64_t j = 0; j < n; j++)
                    row[j] = row[j] + ai[k] * b0[j] + ai[k + 1] * b1[j] + ai[k + 2] * b2[j] + ai[k + 3] * b3[j];
            }
            for (; k < ka; k++)
                for (int64_t j = 0; j < n; j++)
                    row[j] += ai[k] * opb[k * n + j];
            for (int64_t j = 0; j < n; j++) {
                float v = a * (float)row[j];
                if (b != 0.0f)
                    v += b * tri_emu_lt_at(C, &lc, CUBLAS_OP_N, z, i, j);
                if (bias)
                    v += tri_load(d.bias, d.bias_type == CUDA_R_16BF, i);
                tri_store(D, ld.type == CUDA_R_16BF, z * ld.stride + i + j * ld.ld, v);
            }
        }
    }
    free(opa);
}

/* Checks the arguments, then computes the product on stream: at once, or recorded while the stream
 * captures (tests/cuda_emu/cuda_runtime.h), with the descriptors, layouts and scales read now, as
 * cuBLASLt reads them when the call is made. */
static inline cublasStatus_t cublasLtMatmul(cublasLtHandle_t h, cublasLtMatmulDesc_t d, const void *alpha,
                                            const void *A, cublasLtMatrixLayout_t la, const void *B,
                                            cublasLtMatrixLayout_t lb, const void *beta, const void *C,
                                            cublasLtMatrixLayout_t lc, void *D, cublasLtMatrixLayout_t ld,
                                            const cublasLtMatmulAlgo_t *algo, void *ws, size_t ws_bytes,
                                            cudaStream_t stream)
{
    (void)h, (void)ws, (void)ws_bytes;
    if (algo->data[0] < (uint64_t)tri_emu_lt_refused)
        return CUBLAS_STATUS_NOT_SUPPORTED;
    int64_t m = (int64_t)ld->rows, n = (int64_t)ld->cols;
    int64_t ka = (int64_t)(d->transa == CUBLAS_OP_T ? la->rows : la->cols);
    int64_t ma = (int64_t)(d->transa == CUBLAS_OP_T ? la->cols : la->rows);
    int64_t kb = (int64_t)(d->transb == CUBLAS_OP_T ? lb->cols : lb->rows);
    int64_t nb = (int64_t)(d->transb == CUBLAS_OP_T ? lb->rows : lb->cols);
    bool bias = d->epilogue == CUBLASLT_EPILOGUE_BIAS;
    if (ma != m || nb != n || ka != kb || lc->rows != ld->rows || lc->cols != ld->cols || la->type != lb->type ||
        la->batch != ld->batch || lb->batch != ld->batch || lc->batch != ld->batch ||
        (d->epilogue != CUBLASLT_EPILOGUE_DEFAULT && !bias) || (bias && (!d->bias || d->bias_type != ld->type)))
        return CUBLAS_STATUS_INVALID_VALUE;
    float a = *(const float *)alpha, b = *(const float *)beta;
    tri_emu_lt_desc dv = *d;
    tri_emu_lt_layout lav = *la, lbv = *lb, lcv = *lc, ldv = *ld;
    tri_emu_enqueue(stream, [=] { tri_emu_lt_run(dv, a, A, lav, B, lbv, b, C, lcv, D, ldv); });
    return CUBLAS_STATUS_SUCCESS;
}

#endif
