/* engine/core/tensor.c - tensor view constructors and shape arithmetic (see tensor.h). */
#include "engine/core/tensor.h"

#include <stdio.h>
#include <string.h>

static tri_tensor make(void *data, tri_dtype dtype, int ndim, const int64_t *shape)
{
    tri_tensor t;
    memset(&t, 0, sizeof t);
    t.data = data;
    t.dtype = dtype;
    t.ndim = ndim;
    for (int i = 0; i < ndim; i++)
        t.shape[i] = shape[i];
    return t;
}

tri_tensor tri_tensor_1d(void *data, tri_dtype dtype, int64_t n0)
{
    int64_t s[1] = {n0};
    return make(data, dtype, 1, s);
}

tri_tensor tri_tensor_2d(void *data, tri_dtype dtype, int64_t n0, int64_t n1)
{
    int64_t s[2] = {n0, n1};
    return make(data, dtype, 2, s);
}

tri_tensor tri_tensor_3d(void *data, tri_dtype dtype, int64_t n0, int64_t n1, int64_t n2)
{
    int64_t s[3] = {n0, n1, n2};
    return make(data, dtype, 3, s);
}

tri_tensor tri_tensor_4d(void *data, tri_dtype dtype, int64_t n0, int64_t n1, int64_t n2, int64_t n3)
{
    int64_t s[4] = {n0, n1, n2, n3};
    return make(data, dtype, 4, s);
}

tri_tensor tri_tensor_none(void)
{
    return make(NULL, TRI_F32, 0, NULL);
}

bool tri_tensor_present(tri_tensor t)
{
    return t.data != NULL && t.ndim > 0;
}

size_t tri_dtype_size(tri_dtype dtype)
{
    switch (dtype) {
    case TRI_F32: return 4;
    case TRI_BF16: return 2;
    case TRI_I32: return 4;
    case TRI_I64: return 8;
    }
    return 0;
}

const char *tri_dtype_name(tri_dtype dtype)
{
    switch (dtype) {
    case TRI_F32: return "f32";
    case TRI_BF16: return "bf16";
    case TRI_I32: return "i32";
    case TRI_I64: return "i64";
    }
    return "?";
}

int64_t tri_tensor_numel(tri_tensor t)
{
    if (t.ndim == 0)
        return 0;
    int64_t n = 1;
    for (int i = 0; i < t.ndim; i++)
        n *= t.shape[i];
    return n;
}

size_t tri_tensor_bytes(tri_tensor t)
{
    return (size_t)tri_tensor_numel(t) * tri_dtype_size(t.dtype);
}

int64_t tri_tensor_cols(tri_tensor t)
{
    return t.ndim == 0 ? 0 : t.shape[t.ndim - 1];
}

int64_t tri_tensor_rows(tri_tensor t)
{
    int64_t r = t.ndim == 0 ? 0 : 1;
    for (int i = 0; i + 1 < t.ndim; i++)
        r *= t.shape[i];
    return r;
}

bool tri_tensor_same_shape(tri_tensor a, tri_tensor b)
{
    if (a.ndim != b.ndim)
        return false;
    for (int i = 0; i < a.ndim; i++)
        if (a.shape[i] != b.shape[i])
            return false;
    return true;
}

tri_tensor tri_tensor_slice0(tri_tensor t, int64_t row0, int64_t n)
{
    int64_t inner = t.shape[0] == 0 ? 0 : tri_tensor_numel(t) / t.shape[0];
    tri_tensor s = t;
    s.data = (char *)t.data + (size_t)(row0 * inner) * tri_dtype_size(t.dtype);
    s.shape[0] = n;
    return s;
}

tri_tensor tri_tensor_reshape(tri_tensor t, int ndim, const int64_t *shape)
{
    return make(t.data, t.dtype, ndim, shape);
}

tri_tensor tri_tensor_flat(tri_tensor t)
{
    return tri_tensor_1d(t.data, t.dtype, tri_tensor_numel(t));
}

tri_tensor tri_tensor_range(tri_tensor t, int64_t start, int64_t n)
{
    return tri_tensor_1d((char *)t.data + (size_t)start * tri_dtype_size(t.dtype), t.dtype, n);
}

const char *tri_tensor_describe(tri_tensor t, char *buf, size_t cap)
{
    size_t used = 0;
    used += (size_t)snprintf(buf, cap, "(");
    for (int i = 0; i < t.ndim && used < cap; i++)
        used += (size_t)snprintf(buf + used, cap - used, i ? ", %lld" : "%lld", (long long)t.shape[i]);
    if (used < cap)
        snprintf(buf + used, cap - used, ") %s", tri_dtype_name(t.dtype));
    return buf;
}
