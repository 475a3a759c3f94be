/* checkpoints/safetensors.c - the safetensors reader and writer (see safetensors.h). */
#include "checkpoints/safetensors.h"

#include <cJSON.h>
#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "engine/core/file.h"
#include "engine/core/math.h"
#include "engine/core/status.h"

/* ---- element types ---- */

static const char *dtype_names[] = {"F16", "BF16", "F32"};

const char *tri_st_dtype_name(tri_st_dtype d)
{
    return dtype_names[d];
}

int tri_st_dtype_size(tri_st_dtype d)
{
    return d == TRI_ST_F32 ? 4 : 2;
}

int64_t tri_st_numel(const tri_st_tensor *t)
{
    int64_t n = 1;
    for (int d = 0; d < t->ndim; d++)
        n *= t->shape[d];
    return n;
}

uint16_t tri_float_to_f16(float f)
{
    uint32_t u;
    memcpy(&u, &f, sizeof u);
    uint32_t sign = (u >> 16) & 0x8000u, abs = u & 0x7fffffffu;
    if (abs > 0x7f800000u) /* NaN: keep it quiet */
        return (uint16_t)(sign | 0x7e00u | ((abs >> 13) & 0x3ffu));
    if (abs >= 0x477ff000u) /* rounds to 65520 or more: infinity */
        return (uint16_t)(sign | 0x7c00u);
    if (abs < 0x38800000u) { /* below 2^-14: a subnormal half, value = m * 2^-24 */
        if (abs < 0x33000000u) /* below 2^-25: rounds to zero */
            return (uint16_t)sign;
        uint32_t mant = (abs & 0x7fffffu) | 0x800000u;
        int shift = 126 - (int)(abs >> 23); /* 14..24 */
        uint32_t q = mant >> shift, rest = mant & ((1u << shift) - 1), half = 1u << (shift - 1);
        q += rest > half || (rest == half && (q & 1u));
        return (uint16_t)(sign | q);
    }
    uint32_t h = ((abs >> 13) - (112u << 10)); /* rebias the exponent 127 -> 15 */
    uint32_t rest = abs & 0x1fffu;
    h += rest > 0x1000u || (rest == 0x1000u && (h & 1u));
    return (uint16_t)(sign | h);
}

float tri_f16_to_float(uint16_t h)
{
    uint32_t sign = (uint32_t)(h & 0x8000u) << 16, e = (h >> 10) & 0x1fu, m = h & 0x3ffu, u;
    if (e == 0x1f)
        u = sign | 0x7f800000u | (m << 13);
    else if (e != 0)
        u = sign | ((e + 112u) << 23) | (m << 13);
    else if (m == 0)
        u = sign;
    else { /* subnormal: m * 2^-24, exact in float */
        float v = (float)m * 0x1p-24f;
        memcpy(&u, &v, sizeof u);
        u |= sign;
    }
    float f;
    memcpy(&f, &u, sizeof f);
    return f;
}

/* ---- reading ---- */

static int pread_all(int fd, void *buf, size_t n, uint64_t at)
{
    char *p = buf;
    while (n > 0) {
        ssize_t k = pread(fd, p, n, (off_t)at);
        if (k < 0 && errno == EINTR)
            continue;
        if (k <= 0)
            return -1;
        p += k;
        n -= (size_t)k;
        at += (uint64_t)k;
    }
    return 0;
}

/* A JSON number that is a non-negative integer below 2^53 (exact in a double). */
static bool json_uint(const cJSON *x, uint64_t *out)
{
    if (!cJSON_IsNumber(x) || x->valuedouble < 0 || x->valuedouble >= 9007199254740992.0 ||
        x->valuedouble != floor(x->valuedouble))
        return false;
    *out = (uint64_t)x->valuedouble;
    return true;
}

/* One header entry into t. */
static int parse_entry(const char *path, const cJSON *e, tri_st_tensor *t)
{
    const char *name = e->string;
    if (strlen(name) >= TRI_ST_NAME_MAX)
        return TRI_ERR(TRI_ECORRUPT, "%s: tensor name '%.40s...' is longer than %d bytes", path, name,
                       TRI_ST_NAME_MAX - 1);
    snprintf(t->name, sizeof t->name, "%s", name);
    if (!cJSON_IsObject(e))
        return TRI_ERR(TRI_ECORRUPT, "%s: tensor %s: expected an object with dtype, shape and data_offsets", path,
                       name);
    const cJSON *dt = cJSON_GetObjectItemCaseSensitive(e, "dtype");
    const cJSON *shape = cJSON_GetObjectItemCaseSensitive(e, "shape");
    const cJSON *off = cJSON_GetObjectItemCaseSensitive(e, "data_offsets");
    if (!cJSON_IsString(dt))
        return TRI_ERR(TRI_ECORRUPT, "%s: tensor %s: \"dtype\" is missing or not a string", path, name);
    int d = -1;
    for (int i = 0; i < 3; i++)
        if (strcmp(dt->valuestring, dtype_names[i]) == 0)
            d = i;
    if (d < 0)
        return TRI_ERR(TRI_EINVAL, "%s: tensor %s: dtype \"%.20s\" is not read by Trident (expected F32, BF16 or "
                       "F16)", path, name, dt->valuestring);
    t->dtype = (tri_st_dtype)d;
    if (!cJSON_IsArray(shape) || cJSON_GetArraySize(shape) > TRI_ST_MAX_DIMS)
        return TRI_ERR(TRI_ECORRUPT, "%s: tensor %s: \"shape\" must be an array of at most %d sizes", path, name,
                       TRI_ST_MAX_DIMS);
    t->ndim = 0;
    double numel = 1;
    for (const cJSON *s = shape->child; s; s = s->next) {
        uint64_t v;
        if (!json_uint(s, &v) || v > (uint64_t)INT64_MAX)
            return TRI_ERR(TRI_ECORRUPT, "%s: tensor %s: shape entry %d is not a non-negative integer", path, name,
                           t->ndim);
        t->shape[t->ndim++] = (int64_t)v;
        numel *= (double)v;
    }
    uint64_t b, en;
    if (!cJSON_IsArray(off) || cJSON_GetArraySize(off) != 2 || !json_uint(off->child, &b) ||
        !json_uint(off->child->next, &en))
        return TRI_ERR(TRI_ECORRUPT, "%s: tensor %s: \"data_offsets\" must be [begin, end], two non-negative integers",
                       path, name);
    if (en < b)
        return TRI_ERR(TRI_ECORRUPT, "%s: tensor %s: data_offsets [%llu, %llu] end before they begin", path, name,
                       (unsigned long long)b, (unsigned long long)en);
    if (numel * tri_st_dtype_size(t->dtype) != (double)(en - b))
        return TRI_ERR(TRI_ECORRUPT, "%s: tensor %s: data_offsets [%llu, %llu] hold %llu bytes, its shape and dtype "
                       "need %.0f", path, name, (unsigned long long)b, (unsigned long long)en,
                       (unsigned long long)(en - b), numel * tri_st_dtype_size(t->dtype));
    t->begin = b;
    t->end = en;
    return TRI_OK;
}

static int by_begin(const void *a, const void *b)
{
    const tri_st_tensor *x = *(tri_st_tensor *const *)a, *y = *(tri_st_tensor *const *)b;
    return x->begin < y->begin ? -1 : x->begin > y->begin ? 1 : x->end < y->end ? -1 : x->end > y->end;
}

static int by_name(const void *a, const void *b)
{
    return strcmp((*(tri_st_tensor *const *)a)->name, (*(tri_st_tensor *const *)b)->name);
}

/* The tensors tile [0, data_bytes) exactly and no name repeats. */
static int check_layout(const tri_st_file *f)
{
    tri_st_tensor **order = malloc((size_t)(f->n ? f->n : 1) * sizeof *order);
    if (!order)
        return TRI_ERR(TRI_ENOMEM, "%s: out of memory", f->path);
    for (int i = 0; i < f->n; i++)
        order[i] = &f->tensors[i];
    int rc = TRI_OK;
    qsort(order, (size_t)f->n, sizeof *order, by_name);
    for (int i = 1; i < f->n && !rc; i++)
        if (strcmp(order[i - 1]->name, order[i]->name) == 0)
            rc = TRI_ERR(TRI_ECORRUPT, "%s: tensor %s appears twice in the header", f->path, order[i]->name);
    qsort(order, (size_t)f->n, sizeof *order, by_begin);
    uint64_t at = 0;
    for (int i = 0; i < f->n && !rc; i++) {
        const tri_st_tensor *t = order[i];
        if (t->end > f->data_bytes)
            rc = TRI_ERR(TRI_ECORRUPT, "%s: tensor %s: data_offsets [%llu, %llu] are out of range: the data is %llu "
                         "bytes", f->path, t->name, (unsigned long long)t->begin, (unsigned long long)t->end,
                         (unsigned long long)f->data_bytes);
        else if (t->begin < at)
            rc = TRI_ERR(TRI_ECORRUPT, "%s: tensor %s: data_offsets [%llu, %llu] overlap tensor %s's, which end at "
                         "%llu", f->path, t->name, (unsigned long long)t->begin, (unsigned long long)t->end,
                         order[i - 1]->name, (unsigned long long)at);
        else if (t->begin > at)
            rc = TRI_ERR(TRI_ECORRUPT, "%s: bytes [%llu, %llu) of the data belong to no tensor (before tensor %s)",
                         f->path, (unsigned long long)at, (unsigned long long)t->begin, t->name);
        at = t->end;
    }
    if (!rc && at != f->data_bytes)
        rc = TRI_ERR(TRI_ECORRUPT, "%s: %llu trailing bytes after the last tensor (the tensors end at %llu, the data "
                     "is %llu bytes)", f->path, (unsigned long long)(f->data_bytes - at), (unsigned long long)at,
                     (unsigned long long)f->data_bytes);
    free(order);
    return rc;
}

static int parse_header(tri_st_file *f, const char *json, size_t len)
{
    const char *end = NULL;
    cJSON *root = cJSON_ParseWithLengthOpts(json, len, &end, 0);
    if (!root)
        return TRI_ERR(TRI_ECORRUPT, "%s: the header is not valid JSON (near byte %zu of %zu)", f->path,
                       end ? (size_t)(end - json) : 0, len);
    int rc = TRI_OK;
    for (const char *p = end; p < json + len && !rc; p++)
        if (*p != ' ' && *p != '\t' && *p != '\n' && *p != '\r')
            rc = TRI_ERR(TRI_ECORRUPT, "%s: bytes after the header's JSON object (at byte %zu)", f->path,
                         (size_t)(p - json));
    if (!rc && !cJSON_IsObject(root))
        rc = TRI_ERR(TRI_ECORRUPT, "%s: the header is not a JSON object", f->path);
    int n = 0;
    for (const cJSON *e = rc ? NULL : root->child; e; e = e->next)
        n += strcmp(e->string, "__metadata__") != 0;
    f->tensors = rc ? NULL : calloc((size_t)(n ? n : 1), sizeof *f->tensors);
    if (!rc && !f->tensors)
        rc = TRI_ERR(TRI_ENOMEM, "%s: out of memory for %d tensors", f->path, n);
    for (const cJSON *e = rc ? NULL : root->child; e && !rc; e = e->next) {
        if (strcmp(e->string, "__metadata__") == 0) {
            bool ok = cJSON_IsObject(e);
            for (const cJSON *m = ok ? e->child : NULL; m; m = m->next)
                ok = ok && cJSON_IsString(m);
            if (!ok)
                rc = TRI_ERR(TRI_ECORRUPT, "%s: \"__metadata__\" must be an object of strings", f->path);
            continue;
        }
        rc = parse_entry(f->path, e, &f->tensors[f->n]);
        f->n += !rc;
    }
    cJSON_Delete(root);
    return rc ? rc : check_layout(f);
}

int tri_st_open(tri_st_file *f, const char *path)
{
    memset(f, 0, sizeof *f);
    f->fd = -1;
    f->path = strdup(path);
    if (!f->path)
        return TRI_ERR(TRI_ENOMEM, "%s: out of memory", path);
    struct stat st;
    int rc = tri_file_open_read(path, &f->fd, NULL);
    if (!rc && fstat(f->fd, &st) != 0)
        rc = TRI_ERR(TRI_EIO, "cannot stat %s: %s", path, strerror(errno));
    unsigned char le[8];
    uint64_t hlen = 0, size = rc ? 0 : (uint64_t)st.st_size;
    if (!rc && (size < 8 || pread_all(f->fd, le, 8, 0) != 0))
        rc = TRI_ERR(TRI_ECORRUPT, "%s: %llu bytes, shorter than the 8-byte header length", path,
                     (unsigned long long)size);
    for (int i = 7; !rc && i >= 0; i--)
        hlen = hlen << 8 | le[i];
    if (!rc && (hlen > TRI_ST_MAX_HEADER || hlen > size - 8))
        rc = TRI_ERR(TRI_ECORRUPT, "%s: header length %llu exceeds %s (%llu bytes after the length field)", path,
                     (unsigned long long)hlen, hlen > TRI_ST_MAX_HEADER ? "the 100 MB limit" : "the file",
                     (unsigned long long)(size - 8));
    char *json = rc ? NULL : malloc(hlen + 1);
    if (!rc && !json)
        rc = TRI_ERR(TRI_ENOMEM, "%s: out of memory for a %llu-byte header", path, (unsigned long long)hlen);
    if (!rc && pread_all(f->fd, json, hlen, 8) != 0)
        rc = TRI_ERR(TRI_EIO, "%s: cannot read the header: %s", path, strerror(errno));
    if (!rc) {
        f->data_start = 8 + hlen;
        f->data_bytes = size - f->data_start;
        rc = parse_header(f, json, hlen);
    }
    free(json);
    if (rc)
        tri_st_close(f);
    return rc;
}

void tri_st_close(tri_st_file *f)
{
    if (f->fd >= 0)
        close(f->fd);
    free(f->path);
    free(f->tensors);
    memset(f, 0, sizeof *f);
    f->fd = -1;
}

const tri_st_tensor *tri_st_find(const tri_st_file *f, const char *name)
{
    for (int i = 0; i < f->n; i++)
        if (strcmp(f->tensors[i].name, name) == 0)
            return &f->tensors[i];
    return NULL;
}

int tri_st_read_f32(const tri_st_file *f, const tri_st_tensor *t, float *out)
{
    int64_t n = tri_st_numel(t);
    size_t bytes = (size_t)(t->end - t->begin);
    void *raw = t->dtype == TRI_ST_F32 ? (void *)out : malloc(bytes ? bytes : 1);
    if (!raw)
        return TRI_ERR(TRI_ENOMEM, "%s: out of memory for tensor %s", f->path, t->name);
    int rc = pread_all(f->fd, raw, bytes, f->data_start + t->begin) == 0
                 ? TRI_OK
                 : TRI_ERR(TRI_EIO, "%s: cannot read tensor %s: %s", f->path, t->name, strerror(errno));
    const uint16_t *h = raw;
    for (int64_t i = 0; !rc && t->dtype != TRI_ST_F32 && i < n; i++)
        out[i] = t->dtype == TRI_ST_BF16 ? tri_bf16_to_float(h[i]) : tri_f16_to_float(h[i]);
    if (raw != out)
        free(raw);
    return rc;
}

/* ---- writing ---- */

uint64_t tri_st_entry_bytes(const tri_st_entry *e)
{
    uint64_t n = 1;
    for (int d = 0; d < e->ndim; d++)
        n *= (uint64_t)e->shape[d];
    return n * (uint64_t)tri_st_dtype_size(e->dtype);
}

/* The reference library's order: dtype descending (its enum lists F16 < BF16 < F32), then name. */
static int file_order(const void *a, const void *b)
{
    const tri_st_entry *x = a, *y = b;
    if (x->dtype != y->dtype)
        return x->dtype > y->dtype ? -1 : 1;
    return strcmp(x->name, y->name);
}

/* Appends printf output to a growing string. */
typedef struct strbuf {
    char *s;
    size_t len, cap;
    bool oom;
} strbuf;

static void sb_printf(strbuf *b, const char *fmt, ...) TRI_PRINTF(2, 3);
static void sb_printf(strbuf *b, const char *fmt, ...)
{
    for (;;) {
        va_list ap;
        va_start(ap, fmt);
        size_t room = b->cap - b->len;
        int k = b->s ? vsnprintf(b->s + b->len, room, fmt, ap) : -1;
        va_end(ap);
        if (k >= 0 && (size_t)k < room) {
            b->len += (size_t)k;
            return;
        }
        size_t cap = b->cap ? 2 * b->cap + (size_t)(k > 0 ? k : 0) : 4096;
        char *s = realloc(b->s, cap);
        if (!s) {
            b->oom = true;
            return;
        }
        b->s = s;
        b->cap = cap;
    }
}

/* The header: compact JSON as serde_json writes it, padded with spaces to a multiple of 8. */
static int header_json(const tri_st_entry *e, int n, strbuf *b)
{
    sb_printf(b, "{\"__metadata__\":{\"format\":\"pt\"}");
    uint64_t at = 0;
    for (int i = 0; i < n; i++) {
        for (const char *p = e[i].name; *p; p++)
            if (*p == '"' || *p == '\\' || (unsigned char)*p < 0x20)
                return TRI_ERR(TRI_EINVAL, "safetensors: tensor name '%s' needs JSON escapes", e[i].name);
        sb_printf(b, ",\"%s\":{\"dtype\":\"%s\",\"shape\":[", e[i].name, tri_st_dtype_name(e[i].dtype));
        for (int d = 0; d < e[i].ndim; d++)
            sb_printf(b, "%s%lld", d ? "," : "", (long long)e[i].shape[d]);
        uint64_t bytes = tri_st_entry_bytes(&e[i]);
        sb_printf(b, "],\"data_offsets\":[%llu,%llu]}", (unsigned long long)at, (unsigned long long)(at + bytes));
        at += bytes;
    }
    sb_printf(b, "}");
    while (b->len % 8 != 0 && !b->oom)
        sb_printf(b, " ");
    return b->oom ? TRI_ERR(TRI_ENOMEM, "safetensors: out of memory for the header") : TRI_OK;
}

static int write_all(FILE *f, const void *p, size_t n, const char *path)
{
    return fwrite(p, 1, n, f) == n ? TRI_OK : TRI_ERR(TRI_EIO, "cannot write %s: %s", path, strerror(errno));
}

/* Entry e's values, rounded to its dtype, appended to f. */
static int write_entry(FILE *f, const tri_st_entry *e, const char *path)
{
    uint64_t n = tri_st_entry_bytes(e) / (uint64_t)tri_st_dtype_size(e->dtype);
    float *v = malloc((size_t)(n ? n : 1) * sizeof *v);
    if (!v)
        return TRI_ERR(TRI_ENOMEM, "%s: out of memory for tensor %s", path, e->name);
    int rc = e->fill(e->ctx, e, v);
    if (!rc && e->dtype != TRI_ST_F32) {
        uint16_t *h = (uint16_t *)v; /* narrowing in place: element i is read before h[i] is written */
        for (uint64_t i = 0; i < n; i++) {
            float x = v[i];
            h[i] = e->dtype == TRI_ST_BF16 ? tri_float_to_bf16(x) : tri_float_to_f16(x);
        }
    }
    if (!rc) rc = write_all(f, v, (size_t)tri_st_entry_bytes(e), path);
    free(v);
    return rc;
}

int tri_st_write(const char *path, tri_st_entry *entries, int n)
{
    qsort(entries, (size_t)n, sizeof *entries, file_order);
    strbuf b = {0};
    int rc = header_json(entries, n, &b);
    char tmp[4200];
    if (!rc && snprintf(tmp, sizeof tmp, "%s.tmp", path) >= (int)sizeof tmp)
        rc = TRI_ERR(TRI_EINVAL, "%s: path too long", path);
    FILE *f = rc ? NULL : fopen(tmp, "wb");
    if (!rc && !f)
        rc = TRI_ERR(TRI_EIO, "cannot create %s: %s", tmp, strerror(errno));
    unsigned char le[8];
    for (int i = 0; i < 8; i++)
        le[i] = (unsigned char)((uint64_t)b.len >> (8 * i));
    if (!rc) rc = write_all(f, le, 8, tmp);
    if (!rc) rc = write_all(f, b.s, b.len, tmp);
    for (int i = 0; i < n && !rc; i++)
        rc = write_entry(f, &entries[i], tmp);
    free(b.s);
    if (f && fflush(f) == 0 && !rc && fsync(fileno(f)) != 0)
        rc = TRI_ERR(TRI_EIO, "cannot write %s: %s", tmp, strerror(errno));
    if (f && fclose(f) != 0 && !rc)
        rc = TRI_ERR(TRI_EIO, "cannot write %s: %s", tmp, strerror(errno));
    if (!rc && rename(tmp, path) != 0)
        rc = TRI_ERR(TRI_EIO, "cannot rename %s to %s: %s", tmp, path, strerror(errno));
    if (rc && f)
        unlink(tmp);
    return rc;
}
