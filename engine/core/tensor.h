/* engine/core/tensor.h - tensor views: a pointer into device memory with a dtype and a row-major shape.
 *
 * A view never owns memory; arenas (engine/device/arena.h) and flat parameter buffers own it. Views are
 * small values passed by value, so layers can slice them freely (tri_tensor_rows). Parallel code
 * never dereferences `data`: it is device memory, read by the host only through tri_device_copy. */
#ifndef TRIDENT_ENGINE_CORE_TENSOR_H
#define TRIDENT_ENGINE_CORE_TENSOR_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#define TRI_MAX_DIMS 4

typedef enum { TRI_F32 = 0, TRI_BF16 = 1, TRI_I32 = 2, TRI_I64 = 3 } tri_dtype;

typedef struct tri_tensor {
    void *data;                      /* device memory; NULL for an absent optional tensor */
    tri_dtype dtype;
    int ndim;                        /* 1..TRI_MAX_DIMS */
    int64_t shape[TRI_MAX_DIMS];     /* row-major, contiguous */
} tri_tensor;

tri_tensor tri_tensor_1d(void *data, tri_dtype dtype, int64_t n0);
tri_tensor tri_tensor_2d(void *data, tri_dtype dtype, int64_t n0, int64_t n1);
tri_tensor tri_tensor_3d(void *data, tri_dtype dtype, int64_t n0, int64_t n1, int64_t n2);
tri_tensor tri_tensor_4d(void *data, tri_dtype dtype, int64_t n0, int64_t n1, int64_t n2, int64_t n3);

/* The absent tensor (data NULL, ndim 0): used for optional arguments such as a missing bias. */
tri_tensor tri_tensor_none(void);
bool tri_tensor_present(tri_tensor t);

size_t tri_dtype_size(tri_dtype dtype);
const char *tri_dtype_name(tri_dtype dtype);
int64_t tri_tensor_numel(tri_tensor t);
size_t tri_tensor_bytes(tri_tensor t);
/* Number of rows when viewed as a matrix (product of all but the last dim) and its row length. */
int64_t tri_tensor_rows(tri_tensor t);
int64_t tri_tensor_cols(tri_tensor t);
bool tri_tensor_same_shape(tri_tensor a, tri_tensor b);

/* Rows [row0, row0 + n) of dim 0 (the view keeps the other dims). */
tri_tensor tri_tensor_slice0(tri_tensor t, int64_t row0, int64_t n);
/* The same memory seen with another shape of equal numel (ndim dims from shape). */
tri_tensor tri_tensor_reshape(tri_tensor t, int ndim, const int64_t *shape);
/* The whole tensor as one dimension. */
tri_tensor tri_tensor_flat(tri_tensor t);
/* Elements [start, start + n) of the flattened tensor as a 1-d view. */
tri_tensor tri_tensor_range(tri_tensor t, int64_t start, int64_t n);

/* "(4, 64, 768) f32" into buf; returns buf. */
const char *tri_tensor_describe(tri_tensor t, char *buf, size_t cap);

#ifdef __cplusplus
}
#endif

#endif
