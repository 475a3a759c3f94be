/* cuda/matmul/matmul.cu - every matmul through cuBLASLt, and the bias gradient.
 *
 * Trident's matrices are row-major, cuBLASLt's column-major. A row-major matrix X (r x c, row
 * stride ld) is, read column-major, the c x r matrix X^T with leading dimension ld, so the row-major
 * product C = op(A) op(B) (M x N) is computed as the column-major C^T = op(B)^T op(A)^T (N x M):
 * cuBLASLt's "A" operand is our b (transposed iff trans_b), its "B" operand our a (transposed iff
 * trans_a), m = N, n = M, k = K, and every leading dimension is the row stride we already have
 * (NVIDIA, cuBLAS documentation, "cublasLtMatmul" and "cublasLtMatrixLayoutCreate"). The bias of a
 * linear layer is added to every row of C, i.e. along the rows (length N) of C^T: exactly
 * CUBLASLT_EPILOGUE_BIAS, whose vector must match D's row count and is broadcast over the columns.
 * Compute type CUBLAS_COMPUTE_32F (true fp32, no TF32), alpha and beta on the host. With beta == 0
 * cuBLASLt, like BLAS, does not read C, so NaN in C does not propagate (the GPU suite checks it).
 *
 * bf16 mixed precision (engine/device/device.h "Precision"): A and B are CUDA_R_16BF when our a and b are
 * bf16 (they share a dtype), else CUDA_R_32F; C = D are CUDA_R_16BF or CUDA_R_32F as c is, each
 * independently; the compute type stays CUBLAS_COMPUTE_32F with scale type CUDA_R_32F (fp32 alpha,
 * beta and accumulation; D is rounded once at the end). Both bf16 forms, bf16 x bf16 -> bf16 and
 * bf16 x bf16 -> fp32 (a weight gradient kept fp32), are in cublasLtMatmul's table of supported
 * type combinations for CUBLAS_COMPUTE_32F. The bias vector's type is D's (cublasLt.h,
 * CUBLASLT_MATMUL_DESC_BIAS_DATA_TYPE: "Bias vector elements are the same type as the elements of
 * output matrix (Dtype)", default -1); it is set explicitly to D's type, and the interface gives the
 * bias c's dtype. Alignments are in bytes, so a bf16 view may be only 2-byte aligned (a head of odd
 * HS); the heuristic is told so, and strides count elements of each matrix's own size.
 *
 * A plan (descriptors, layouts and the heuristic's best TRI_GEMM_ALGOS algorithms, fastest first by
 * its estimate) is made once per shape, transposes, strides, batch, bias presence, data types and
 * pointer alignment class (the heuristic must not pick kernels that assume more alignment than a
 * view such as one head's columns has) and kept in a small cache; later calls only set the bias
 * pointer and call cublasLtMatmul on the device's stream with its 32 MiB workspace. The plan's first
 * call tries the algorithms in the heuristic's order and keeps the first that cuBLASLt accepts (an
 * algorithm may still be refused at run time: CUBLAS_STATUS_NOT_SUPPORTED); with none (or none
 * found) the shape runs on gemm_fallback_kernel (matmul.kern.h), slowly but never as a failure, and
 * the log says so once per plan. The choice is the same on every run (no timing), so reruns keep
 * their bits. The bias epilogue is used only for a bias aligned to 16 bytes
 * (below). The GELU epilogues (CUBLASLT_EPILOGUE_GELU_BIAS, GELU_AUX_BIAS) are not used: cuBLASLt's
 * GELU is its own arithmetic, not engine/device/ops/activations_math.h's tri_gelu, so the fused form would
 * break the one source of the math that the CPU suite checks, and the device interface keeps GELU a separate op
 * (docs/cuda-correctness.md). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cuda/matmul/colsum.kern.h"
#include "cuda/matmul/matmul.kern.h"
#include "cuda/launch.cuh"
#include "engine/core/log.h"
#include "engine/device/ops/activations_math.h"

#define MAX_PLANS 128
#define TRI_GEMM_ALGOS 8 /* the heuristic's algorithms a plan keeps, in its order */

typedef struct gemm_key {
    int64_t M, N, K, lda, ldb, ldc, stride_a, stride_b, stride_c;
    int32_t batch, trans_a, trans_b, has_bias;
    uint32_t align_a, align_b, align_c, align_bias;
    int32_t type_ab, type_c; /* cudaDataType of a and b, of c, d and the bias */
} gemm_key;

typedef struct gemm_plan {
    gemm_key key;
    bool used;
    cublasLtMatmulDesc_t desc;
    cublasLtMatrixLayout_t la, lb, lc; /* cuBLASLt's A (our b), B (our a), C = D */
    cublasLtMatmulAlgo_t algos[TRI_GEMM_ALGOS];
    int n_algos;
    int chosen; /* -1: not tried yet; 0..n_algos-1: the algorithm in use; n_algos: gemm_fallback_kernel */
} gemm_plan;

struct tri_cuda_gemm_cache {
    gemm_plan plans[MAX_PLANS];
    int next; /* round-robin victim when full */
};

static void plan_release(gemm_plan *p)
{
    if (p->la) cublasLtMatrixLayoutDestroy(p->la);
    if (p->lb) cublasLtMatrixLayoutDestroy(p->lb);
    if (p->lc) cublasLtMatrixLayoutDestroy(p->lc);
    if (p->desc) cublasLtMatmulDescDestroy(p->desc);
    memset(p, 0, sizeof *p);
}

extern "C" int tri_cuda_gemm_cache_create(tri_cuda_gemm_cache **out)
{
    *out = (tri_cuda_gemm_cache *)calloc(1, sizeof **out);
    return *out ? TRI_OK : TRI_ERR(TRI_ENOMEM, "cuda: out of memory for the matmul plan cache");
}

extern "C" void tri_cuda_gemm_cache_destroy(tri_cuda_gemm_cache *cache)
{
    if (!cache)
        return;
    for (int i = 0; i < MAX_PLANS; i++)
        if (cache->plans[i].used)
            plan_release(&cache->plans[i]);
    free(cache);
}

/* Largest power of two (2..256 bytes) dividing the address: cuBLASLt's alignment preference. Every
 * element is at least 2-byte aligned (bf16), fp32 ones 4-byte. */
static uint32_t alignment(const void *p)
{
    uintptr_t u = (uintptr_t)p;
    uint32_t a = 256;
    while (a > 2 && u % a != 0)
        a /= 2;
    return a;
}

/* a, lowered to the alignment of a batch stride of `stride` elements of `elem` bytes (the later
 * members' starts). */
static uint32_t min_align(uint32_t a, int64_t stride, size_t elem)
{
    uint32_t s = alignment((const void *)(uintptr_t)((uint64_t)stride * elem));
    return stride == 0 || a < s ? a : s;
}

static cudaDataType_t type_of(bool bf16)
{
    return bf16 ? CUDA_R_16BF : CUDA_R_32F;
}

static int layout(cublasLtMatrixLayout_t *l, int32_t type, uint64_t rows, uint64_t cols, int64_t ld,
                  int32_t batch, int64_t stride)
{
    int rc = TRI_CUBLAS(cublasLtMatrixLayoutCreate(l, (cudaDataType_t)type, rows, cols, ld));
    if (!rc && batch > 1) {
        rc = TRI_CUBLAS(cublasLtMatrixLayoutSetAttribute(*l, CUBLASLT_MATRIX_LAYOUT_BATCH_COUNT, &batch,
                                                         sizeof batch));
        if (!rc) rc = TRI_CUBLAS(cublasLtMatrixLayoutSetAttribute(*l, CUBLASLT_MATRIX_LAYOUT_STRIDED_BATCH_OFFSET,
                                                                  &stride, sizeof stride));
    }
    return rc;
}

static int set_pref(cublasLtMatmulPreference_t pref, cublasLtMatmulPreferenceAttributes_t attr, uint32_t v)
{
    return TRI_CUBLAS(cublasLtMatmulPreferenceSetAttribute(pref, attr, &v, sizeof v));
}

/* Descriptors, layouts and the heuristic's best algorithms for key k (none found is not an error:
 * the plan then runs on the fallback kernel). */
static int plan_make(tri_cuda *c, gemm_plan *p, const gemm_key *k, const tri_cuda_gemm_args *g)
{
    int32_t op_a = k->trans_b ? CUBLAS_OP_T : CUBLAS_OP_N; /* cuBLASLt's A is our b */
    int32_t op_b = k->trans_a ? CUBLAS_OP_T : CUBLAS_OP_N;
    int rc = TRI_CUBLAS(cublasLtMatmulDescCreate(&p->desc, CUBLAS_COMPUTE_32F, CUDA_R_32F)); /* scale fp32 */
    if (!rc) rc = TRI_CUBLAS(cublasLtMatmulDescSetAttribute(p->desc, CUBLASLT_MATMUL_DESC_TRANSA, &op_a, sizeof op_a));
    if (!rc) rc = TRI_CUBLAS(cublasLtMatmulDescSetAttribute(p->desc, CUBLASLT_MATMUL_DESC_TRANSB, &op_b, sizeof op_b));
    if (!rc && k->has_bias) {
        uint32_t epilogue = CUBLASLT_EPILOGUE_BIAS;
        rc = TRI_CUBLAS(cublasLtMatmulDescSetAttribute(p->desc, CUBLASLT_MATMUL_DESC_EPILOGUE, &epilogue,
                                                       sizeof epilogue));
        if (!rc) rc = TRI_CUBLAS(cublasLtMatmulDescSetAttribute(p->desc, CUBLASLT_MATMUL_DESC_BIAS_POINTER,
                                                                &g->bias, sizeof g->bias));
        int32_t bias_type = k->type_c; /* D's type */
        if (!rc) rc = TRI_CUBLAS(cublasLtMatmulDescSetAttribute(p->desc, CUBLASLT_MATMUL_DESC_BIAS_DATA_TYPE,
                                                                &bias_type, sizeof bias_type));
    }
    /* column-major shapes: A = op(b)^T-source (N x K when not transposed), B = a's view, C = N x M */
    if (!rc) rc = layout(&p->la, k->type_ab, (uint64_t)(k->trans_b ? k->K : k->N),
                         (uint64_t)(k->trans_b ? k->N : k->K), k->ldb, k->batch, k->stride_b);
    if (!rc) rc = layout(&p->lb, k->type_ab, (uint64_t)(k->trans_a ? k->M : k->K),
                         (uint64_t)(k->trans_a ? k->K : k->M), k->lda, k->batch, k->stride_a);
    if (!rc) rc = layout(&p->lc, k->type_c, (uint64_t)k->N, (uint64_t)k->M, k->ldc, k->batch, k->stride_c);
    if (rc)
        return rc;
    cublasLtMatmulPreference_t pref = NULL;
    rc = TRI_CUBLAS(cublasLtMatmulPreferenceCreate(&pref));
    uint64_t ws = c->workspace_bytes;
    if (!rc) rc = TRI_CUBLAS(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES,
                                                                  &ws, sizeof ws));
    if (!rc) rc = set_pref(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, k->align_b);
    if (!rc) rc = set_pref(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES, k->align_a);
    if (!rc) rc = set_pref(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, k->align_c);
    if (!rc) rc = set_pref(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES, k->align_c);
    cublasLtMatmulHeuristicResult_t results[TRI_GEMM_ALGOS];
    int found = 0;
    memset(results, 0, sizeof results);
    if (!rc) rc = TRI_CUBLAS(cublasLtMatmulAlgoGetHeuristic(c->lt, p->desc, p->la, p->lb, p->lc, p->lc, pref,
                                                            TRI_GEMM_ALGOS, results, &found));
    if (pref)
        cublasLtMatmulPreferenceDestroy(pref);
    p->n_algos = 0;
    for (int i = 0; i < found && i < TRI_GEMM_ALGOS && !rc; i++)
        if (results[i].state == CUBLAS_STATUS_SUCCESS)
            p->algos[p->n_algos++] = results[i].algo;
    p->chosen = -1;
    return rc;
}

/* The shape of key k, for messages. */
static void describe(const gemm_key *k, char *buf, size_t cap)
{
    snprintf(buf, cap, "(%lld x %lld) = op(%lld x %lld) op(%lld x %lld), batch %d, %s inputs, %s output, "
             "alignments %u/%u/%u bytes", (long long)k->M, (long long)k->N, (long long)k->M, (long long)k->K,
             (long long)k->K, (long long)k->N, (int)k->batch, k->type_ab == CUDA_R_16BF ? "bf16" : "fp32",
             k->type_c == CUDA_R_16BF ? "bf16" : "fp32", k->align_a, k->align_b, k->align_c);
}

/* The product on gemm_fallback_kernel (matmul.kern.h). */
static int gemm_fallback(tri_cuda *c, const tri_cuda_gemm_args *g)
{
    return TRI_CUDA_LAUNCH_N(gemm_fallback_kernel, (int64_t)g->batch * g->M * g->N, c->stream, g->c, g->c_bf16, g->a,
                             g->b, g->ab_bf16, g->bias, g->M, g->N, g->K, g->trans_a, g->trans_b, g->lda, g->ldb,
                             g->ldc, g->stride_a, g->stride_b, g->stride_c, (int64_t)g->batch, g->alpha, g->beta);
}

/* The cached plan for g (made on first use). */
static int plan_for(tri_cuda *c, const tri_cuda_gemm_args *g, gemm_plan **out)
{
    gemm_key k;
    memset(&k, 0, sizeof k); /* padding too: keys compare with memcmp */
    k.M = g->M, k.N = g->N, k.K = g->K, k.lda = g->lda, k.ldb = g->ldb, k.ldc = g->ldc;
    k.batch = g->batch;
    if (g->batch > 1)
        k.stride_a = g->stride_a, k.stride_b = g->stride_b, k.stride_c = g->stride_c;
    k.trans_a = g->trans_a, k.trans_b = g->trans_b, k.has_bias = g->bias != NULL;
    size_t ab_size = g->ab_bf16 ? 2 : 4, c_size = g->c_bf16 ? 2 : 4;
    k.align_a = alignment(g->a), k.align_b = alignment(g->b), k.align_c = alignment(g->c);
    if (g->batch > 1) { /* every batch member's start counts: base + i * stride elements */
        k.align_a = min_align(k.align_a, g->stride_a, ab_size), k.align_b = min_align(k.align_b, g->stride_b, ab_size);
        k.align_c = min_align(k.align_c, g->stride_c, c_size);
    }
    k.align_bias = g->bias ? alignment(g->bias) : 0;
    k.type_ab = type_of(g->ab_bf16), k.type_c = type_of(g->c_bf16);
    tri_cuda_gemm_cache *cache = c->gemm;
    for (int i = 0; i < MAX_PLANS; i++)
        if (cache->plans[i].used && memcmp(&cache->plans[i].key, &k, sizeof k) == 0) {
            *out = &cache->plans[i];
            return TRI_OK;
        }
    gemm_plan *p = &cache->plans[cache->next];
    cache->next = (cache->next + 1) % MAX_PLANS;
    if (p->used)
        plan_release(p);
    int rc = plan_make(c, p, &k, g);
    if (rc) {
        plan_release(p);
        return rc;
    }
    p->key = k;
    p->used = true;
    *out = p;
    return TRI_OK;
}

extern "C" int tri_cuda_gemm(tri_cuda *c, const tri_cuda_gemm_args *g)
{
    gemm_plan *p = NULL;
    int rc = plan_for(c, g, &p);
    if (!rc && g->bias)
        rc = TRI_CUBLAS(cublasLtMatmulDescSetAttribute(p->desc, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &g->bias,
                                                       sizeof g->bias));
    if (rc)
        return rc;
    float alpha = g->alpha, beta = g->beta;
    if (p->chosen >= 0 && p->chosen < p->n_algos)
        return TRI_CUBLAS(cublasLtMatmul(c->lt, p->desc, &alpha, g->b, p->la, g->a, p->lb, &beta, g->c, p->lc, g->c,
                                         p->lc, &p->algos[p->chosen], c->workspace, c->workspace_bytes, c->stream));
    if (p->chosen < 0) { /* the first call: the heuristic's algorithms in order, the first accepted kept */
        for (int i = 0; i < p->n_algos; i++) {
            cublasStatus_t st = cublasLtMatmul(c->lt, p->desc, &alpha, g->b, p->la, g->a, p->lb, &beta, g->c, p->lc,
                                               g->c, p->lc, &p->algos[i], c->workspace, c->workspace_bytes, c->stream);
            if (st == CUBLAS_STATUS_SUCCESS) {
                p->chosen = i;
                return TRI_OK;
            }
            if (st != CUBLAS_STATUS_NOT_SUPPORTED && st != CUBLAS_STATUS_INVALID_VALUE)
                return TRI_CUBLAS(st);
        }
        p->chosen = p->n_algos;
        char what[256];
        describe(&p->key, what, sizeof what);
        if (p->n_algos == 0)
            tri_log("cuBLASLt found no algorithm for %s; this shape runs on the fallback GEMM kernel (slow)", what);
        else
            tri_log("cuBLASLt refused the %d algorithms its heuristic found for %s; this shape runs on the fallback "
                    "GEMM kernel (slow)", p->n_algos, what);
    }
    return gemm_fallback(c, g);
}

extern "C" int tri_cuda_matmul(tri_device *d, tri_tensor c, tri_tensor a, tri_tensor b, tri_tensor bias,
                               bool trans_a, bool trans_b, float beta)
{
    tri_cuda *cu = tri_cuda_of(d);
    int64_t M = tri_tensor_rows(c), N = tri_tensor_cols(c);
    int64_t K = trans_a ? tri_tensor_rows(a) : tri_tensor_cols(a);
    bool has_bias = tri_tensor_present(bias);
    if (K == 0) { /* no product: c = bias, or beta c (0 when beta == 0) */
        if (has_bias)
            return TRI_CUDA_LAUNCH_N(bias_broadcast_kernel, M * N, cu->stream, tri_data(c), tri_is_bf16(c),
                                     tri_data(bias), tri_is_bf16(bias), M, N);
        return beta == 1.0f ? TRI_OK
                            : TRI_CUDA_LAUNCH_N(matmul_scale_kernel, M * N, cu->stream, tri_data(c), tri_is_bf16(c),
                                                beta, M * N);
    }
    tri_cuda_gemm_args g;
    memset(&g, 0, sizeof g);
    g.M = M, g.N = N, g.K = K, g.trans_a = trans_a, g.trans_b = trans_b;
    g.ab_bf16 = tri_is_bf16(a), g.c_bf16 = tri_is_bf16(c); /* the wrapper checked b's and bias's dtypes */
    g.a = a.data, g.b = b.data, g.c = c.data, g.bias = has_bias ? bias.data : NULL;
    g.lda = tri_tensor_cols(a), g.ldb = tri_tensor_cols(b), g.ldc = N;
    g.batch = 1, g.alpha = 1.0f, g.beta = beta;
    if (has_bias && alignment(g.bias) < TRI_BIAS_EPILOGUE_ALIGN) {
        /* a view too little aligned for the epilogue: c = bias rows, then c = a b + 1 c (the CPU
         * backend's order of operations; a bf16 c holds the bf16 bias exactly) */
        int rc = TRI_CUDA_LAUNCH_N(bias_broadcast_kernel, M * N, cu->stream, tri_data(c), tri_is_bf16(c),
                                   tri_data(bias), tri_is_bf16(bias), M, N);
        g.bias = NULL, g.beta = 1.0f;
        return rc ? rc : tri_cuda_gemm(cu, &g);
    }
    return tri_cuda_gemm(cu, &g);
}

extern "C" int tri_cuda_col_chunks_finish(tri_cuda *cu, tri_tensor acc, const float *part, int64_t n_chunks,
                                         int64_t C)
{
    return TRI_CUDA_LAUNCH_N(col_chunks_finish_kernel, C, cu->stream, tri_data(acc), tri_is_bf16(acc), part, n_chunks,
                             C);
}

/* dbias += the column sums of dout: the chunked two-pass form (cuda/matmul/colsum.kern.h) through the
 * workspace, or the simple kernel (simple switch, or chunk sums larger than the workspace); same bits. */
extern "C" int tri_cuda_bias_backward(tri_device *d, tri_tensor dbias, tri_tensor dout)
{
    tri_cuda *cu = tri_cuda_of(d);
    int64_t N = tri_tensor_rows(dout), OC = tri_tensor_cols(dout), nch = tri_col_chunks(N);
    if (cu->simple || (size_t)(nch * OC) * sizeof(float) > cu->workspace_bytes)
        return TRI_CUDA_LAUNCH_N(bias_backward_kernel, OC, cu->stream, tri_data(dbias), tri_is_bf16(dbias),
                                 tri_data(dout), tri_is_bf16(dout), N, OC);
    float *part = (float *)cu->workspace;
    int rc = TRI_CUDA_LAUNCH_N(col_chunk_sums_kernel, nch * OC, cu->stream, part, tri_data(dout), tri_is_bf16(dout),
                               N, OC);
    if (!rc) rc = tri_cuda_col_chunks_finish(cu, dbias, part, nch, OC);
    return rc;
}
