/* tests/gpu/cublaslt_lazy.c - cuBLASLt loaded on demand (cuda/cublaslt_lazy.c), checked without a GPU.
 *
 * Built with the CUDA backend, labelled cpu: loading the library and its host-side calls need no
 * device. Checks that before tri_cublaslt_load the forwarding functions fail cleanly, that after it
 * they reach the real library (its own status strings, descriptors created and destroyed), and that
 * the programs no longer link libcublasLt (the point: start-up without its ~0.45 s). */
#include <criterion/criterion.h>
#include <stdbool.h>
#include <stdio.h>
#include <string.h>

#include "cuda/cuda_internal.h"
#include "tests/testutil.h"

Test(cublaslt_lazy, calls_before_loading_fail_cleanly)
{
    /* Criterion runs each test in a fresh process: nothing is loaded yet */
    cublasLtHandle_t h = NULL;
    cr_assert_eq(cublasLtCreate(&h), CUBLAS_STATUS_NOT_INITIALIZED);
    cr_assert_null(h);
    cr_assert_str_eq(cublasLtGetStatusString(CUBLAS_STATUS_SUCCESS), "cuBLASLt is not loaded");
}

Test(cublaslt_lazy, loads_and_forwards_to_the_library)
{
    cr_assert_eq(tri_cublaslt_load(), TRI_OK, "%s", tri_error_message());
    cr_assert_eq(tri_cublaslt_load(), TRI_OK, "a second load is a no-op");
    /* the library's own strings, not the placeholder */
    cr_assert_str_eq(cublasLtGetStatusString(CUBLAS_STATUS_NOT_SUPPORTED), "the requested functionality is not supported");

    /* host-side descriptors: created, set and destroyed through the forwarding functions */
    cublasLtMatrixLayout_t layout = NULL;
    cr_assert_eq(cublasLtMatrixLayoutCreate(&layout, CUDA_R_32F, 64, 32, 64), CUBLAS_STATUS_SUCCESS);
    int32_t batch = 3;
    cr_assert_eq(cublasLtMatrixLayoutSetAttribute(layout, CUBLASLT_MATRIX_LAYOUT_BATCH_COUNT, &batch, sizeof batch),
                 CUBLAS_STATUS_SUCCESS);
    cr_assert_eq(cublasLtMatrixLayoutDestroy(layout), CUBLAS_STATUS_SUCCESS);
    cublasLtMatmulDesc_t desc = NULL;
    cr_assert_eq(cublasLtMatmulDescCreate(&desc, CUBLAS_COMPUTE_32F, CUDA_R_32F), CUBLAS_STATUS_SUCCESS);
    cublasLtEpilogue_t epilogue = CUBLASLT_EPILOGUE_BIAS;
    cr_assert_eq(cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_EPILOGUE, &epilogue, sizeof epilogue),
                 CUBLAS_STATUS_SUCCESS);
    cr_assert_eq(cublasLtMatmulDescDestroy(desc), CUBLAS_STATUS_SUCCESS);
    cublasLtMatmulPreference_t pref = NULL;
    cr_assert_eq(cublasLtMatmulPreferenceCreate(&pref), CUBLAS_STATUS_SUCCESS);
    uint64_t bytes = 1 << 20;
    cr_assert_eq(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &bytes,
                                                      sizeof bytes),
                 CUBLAS_STATUS_SUCCESS);
    cr_assert_eq(cublasLtMatmulPreferenceDestroy(pref), CUBLAS_STATUS_SUCCESS);
}

/* readelf -d PROGRAM: whether its dynamic section names libcublasLt */
static bool links_cublaslt(const char *program)
{
    char cmd[4096];
    snprintf(cmd, sizeof cmd, "readelf -d '%s' 2>&1", program);
    FILE *p = popen(cmd, "r");
    cr_assert_not_null(p);
    char line[1024];
    bool found = false, dynamic = false;
    while (fgets(line, sizeof line, p)) {
        found = found || strstr(line, "libcublasLt") != NULL;
        dynamic = dynamic || strstr(line, "(NEEDED)") != NULL;
    }
    cr_assert_eq(pclose(p), 0, "readelf -d %s failed", program);
    cr_assert(dynamic, "readelf -d %s lists no NEEDED library: not a dynamic executable?", program);
    return found;
}

Test(cublaslt_lazy, programs_do_not_link_the_library)
{
    const char *programs[] = {"bin/engine_train", "bin/ckpt", "bin/tokenize", "bin/bench_cuda_train"};
    for (size_t i = 0; i < sizeof programs / sizeof *programs; i++) {
        const char *path = tu_binary_path(programs[i]);
        cr_expect_not(links_cublaslt(path), "%s still links libcublasLt", path);
    }
}
