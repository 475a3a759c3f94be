/* tests/test_safetensors.c - the safetensors container (checkpoints/safetensors.c): half-precision
 * conversions against the compiler's _Float16, the writer's order, header and padding, a write/read
 * round trip in every dtype, and refusals. Whole GPT-2 directories (names, transposes, shards,
 * byte identity with files written from the format's specification) are tests/hf_interop.sh's. */
#include <criterion/criterion.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "checkpoints/safetensors.h"
#include "engine/core/math.h"
#include "engine/core/status.h"
#include "tests/testutil.h"

/* The compiler's IEEE half: _Float16, or where clang 14 lacks it on x86, its
 * storage-only __fp16, whose conversions round the same way (to nearest even). */
#if defined(__clang__) && !defined(__FLT16_MAX__)
typedef __fp16 half_t;
#else
typedef _Float16 half_t;
#endif

/* The half the compiler rounds f to, as bits. */
static uint16_t bits16(float f)
{
    half_t h = (half_t)f;
    uint16_t u;
    memcpy(&u, &h, sizeof u);
    return u;
}

static float from_bits(uint32_t u)
{
    float f;
    memcpy(&f, &u, sizeof f);
    return f;
}

/* Every half widens to the float _Float16 gives (NaNs: to a NaN). */
Test(safetensors, f16_to_float_matches_the_compiler_for_all_65536_halves)
{
    for (uint32_t h = 0; h < 65536; h++) {
        half_t x;
        uint16_t b = (uint16_t)h;
        memcpy(&x, &b, sizeof b);
        float want = (float)x, got = tri_f16_to_float(b);
        if (isnan(want))
            cr_assert(isnan(got), "0x%04x", h);
        else
            cr_assert(memcmp(&want, &got, sizeof got) == 0, "0x%04x: %a, expected %a", h, got, want);
    }
}

/* Rounding to nearest even, overflow, subnormals and ties, against _Float16's conversion. */
Test(safetensors, float_to_f16_rounds_as_the_compiler_does)
{
    uint64_t s = 12345;
    for (int i = 0; i < 2000000; i++) {
        s = s * 6364136223846793005ull + 1442695040888963407ull;
        uint32_t u = (uint32_t)(s >> 32);
        if (i % 4 == 1) /* near the half range: exponents 2^-26 .. 2^17 */
            u = (u & 0x807fffffu) | ((uint32_t)(101 + (s >> 20) % 44) << 23);
        if (i % 4 == 2) /* exact ties: the 13 dropped bits 1000000000000 */
            u = (u & 0xffffe000u) | 0x1000u;
        float f = from_bits(u);
        if (isnan(f))
            continue;
        uint16_t want = bits16(f), got = tri_float_to_f16(f);
        cr_assert_eq(got, want, "%a (0x%08x): 0x%04x, expected 0x%04x", f, u, got, want);
    }
    const float edge[] = {65504.0f, 65519.996f, 65520.0f, 1e9f, -65520.0f, 0x1p-24f, 0x1p-25f, 0x1.000002p-25f,
                          0x1.8p-24f, 0x1p-14f, 0x1.ffcp-15f, 0x1.ffep-15f, 0.0f, -0.0f, INFINITY, -INFINITY};
    for (size_t i = 0; i < sizeof edge / sizeof *edge; i++)
        cr_assert_eq(tri_float_to_f16(edge[i]), bits16(edge[i]), "%a", edge[i]);
    cr_assert(isnan(tri_f16_to_float(tri_float_to_f16(NAN))));
}

typedef struct values {
    const float *v;
} values;

static int fill(void *ctx, const tri_st_entry *e, float *buf)
{
    (void)e;
    const values *v = ctx;
    int64_t n = 1;
    for (int d = 0; d < e->ndim; d++)
        n *= e->shape[d];
    memcpy(buf, v->v, (size_t)n * sizeof *buf);
    return TRI_OK;
}

static char *read_all(const char *path, size_t *n)
{
    FILE *f = fopen(path, "rb");
    cr_assert(f, "%s", path);
    fseek(f, 0, SEEK_END);
    *n = (size_t)ftell(f);
    fseek(f, 0, SEEK_SET);
    char *b = malloc(*n + 1);
    cr_assert_eq(fread(b, 1, *n, f), *n);
    b[*n] = 0;
    fclose(f);
    return b;
}

/* The reference library's order (F32, then BF16, then F16; names ascending), header and padding. */
Test(safetensors, writer_orders_pads_and_reads_back)
{
    const char *dir = tu_scratch_dir("st_write");
    char path[4200];
    snprintf(path, sizeof path, "%s/m.safetensors", dir);
    const float a[6] = {1.0f, -2.5f, 3.0f, 0.1f, 1e-3f, 65504.0f}, b[3] = {0.1f, 0.2f, -0.3f}, c[1] = {7.0f};
    values va = {a}, vb = {b}, vc = {c};
    tri_st_entry e[4] = {
        {.name = "z.half", .dtype = TRI_ST_F16, .ndim = 2, .shape = {2, 3}, .fill = fill, .ctx = &va},
        {.name = "b.brain", .dtype = TRI_ST_BF16, .ndim = 1, .shape = {3}, .fill = fill, .ctx = &vb},
        {.name = "y.full", .dtype = TRI_ST_F32, .ndim = 1, .shape = {3}, .fill = fill, .ctx = &vb},
        {.name = "a.scalar", .dtype = TRI_ST_F32, .ndim = 0, .fill = fill, .ctx = &vc},
    };
    cr_assert_eq(tri_st_write(path, e, 4), TRI_OK, "%s", tri_error_message());
    size_t n;
    char *file = read_all(path, &n);
    uint64_t hlen = 0;
    for (int i = 7; i >= 0; i--)
        hlen = hlen << 8 | (unsigned char)file[i];
    cr_assert_eq(hlen % 8, 0);
    const char *want = "{\"__metadata__\":{\"format\":\"pt\"},"
                       "\"a.scalar\":{\"dtype\":\"F32\",\"shape\":[],\"data_offsets\":[0,4]},"
                       "\"y.full\":{\"dtype\":\"F32\",\"shape\":[3],\"data_offsets\":[4,16]},"
                       "\"b.brain\":{\"dtype\":\"BF16\",\"shape\":[3],\"data_offsets\":[16,22]},"
                       "\"z.half\":{\"dtype\":\"F16\",\"shape\":[2,3],\"data_offsets\":[22,34]}}";
    cr_assert_eq(hlen, (strlen(want) + 7) / 8 * 8);
    cr_assert(strncmp(file + 8, want, strlen(want)) == 0, "%.*s", (int)hlen, file + 8);
    for (size_t i = strlen(want); i < hlen; i++)
        cr_assert_eq(file[8 + i], ' ');
    cr_assert_eq(n, 8 + hlen + 34);
    free(file);
    cr_assert_neq(access(strcat(path, ".tmp"), F_OK), 0, "temporary file left");
    path[strlen(path) - 4] = 0;
    tri_st_file f;
    cr_assert_eq(tri_st_open(&f, path), TRI_OK, "%s", tri_error_message());
    cr_assert_eq(f.n, 4);
    float got[6];
    cr_assert_eq(tri_st_read_f32(&f, tri_st_find(&f, "z.half"), got), TRI_OK);
    for (int i = 0; i < 6; i++)
        cr_assert_eq(got[i], (float)(half_t)a[i], "z.half[%d] = %a", i, got[i]);
    cr_assert_eq(tri_st_read_f32(&f, tri_st_find(&f, "b.brain"), got), TRI_OK);
    for (int i = 0; i < 3; i++)
        cr_assert_eq(got[i], tri_round_bf16(b[i]));
    cr_assert_eq(tri_st_read_f32(&f, tri_st_find(&f, "y.full"), got), TRI_OK);
    cr_assert_arr_eq(got, b, sizeof b);
    cr_assert_eq(tri_st_read_f32(&f, tri_st_find(&f, "a.scalar"), got), TRI_OK);
    cr_assert_eq(got[0], 7.0f);
    cr_assert_null(tri_st_find(&f, "nope"));
    tri_st_close(&f);
}

/* A file from raw header text and data bytes. */
static const char *raw_file(const char *dir, const char *name, const char *header, size_t data_bytes)
{
    static char path[4200];
    snprintf(path, sizeof path, "%s/%s", dir, name);
    FILE *f = fopen(path, "wb");
    uint64_t n = strlen(header);
    unsigned char le[8];
    for (int i = 0; i < 8; i++)
        le[i] = (unsigned char)(n >> (8 * i));
    fwrite(le, 1, 8, f);
    fwrite(header, 1, n, f);
    for (size_t i = 0; i < data_bytes; i++)
        fputc(0, f);
    fclose(f);
    return path;
}

static void refused(const char *path, int code, const char *needle)
{
    tri_st_file f;
    int rc = tri_st_open(&f, path);
    cr_assert_eq(rc, code, "%s: %s", path, tri_error_message());
    cr_assert(strstr(tri_error_message(), path), "%s", tri_error_message());
    cr_assert(strstr(tri_error_message(), needle), "expected '%s' in: %s", needle, tri_error_message());
}

Test(safetensors, bad_files_are_refused_naming_the_file_and_tensor)
{
    const char *dir = tu_scratch_dir("st_bad");
    refused(raw_file(dir, "json.st", "{\"a\":", 0), TRI_ECORRUPT, "not valid JSON");
    refused(raw_file(dir, "array.st", "[1]     ", 0), TRI_ECORRUPT, "not a JSON object");
    refused(raw_file(dir, "dtype.st", "{\"w\":{\"dtype\":\"I64\",\"shape\":[1],\"data_offsets\":[0,8]}}", 8),
            TRI_EINVAL, "tensor w: dtype \"I64\"");
    refused(raw_file(dir, "size.st", "{\"w\":{\"dtype\":\"F32\",\"shape\":[3],\"data_offsets\":[0,8]}}", 8),
            TRI_ECORRUPT, "tensor w: data_offsets [0, 8] hold 8 bytes, its shape and dtype need 12");
    refused(raw_file(dir, "range.st", "{\"w\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]}}", 4),
            TRI_ECORRUPT, "tensor w: data_offsets [0, 8] are out of range: the data is 4 bytes");
    refused(raw_file(dir, "overlap.st", "{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]},"
                                        "\"b\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[4,12]}}", 12),
            TRI_ECORRUPT, "tensor b: data_offsets [4, 12] overlap tensor a's");
    refused(raw_file(dir, "hole.st", "{\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[4,8]}}", 8),
            TRI_ECORRUPT, "bytes [0, 4) of the data belong to no tensor (before tensor a)");
    refused(raw_file(dir, "trail.st", "{\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4]}}", 6),
            TRI_ECORRUPT, "2 trailing bytes");
    refused(raw_file(dir, "twice.st", "{\"a\":{\"dtype\":\"F16\",\"shape\":[1],\"data_offsets\":[0,2]},"
                                      "\"a\":{\"dtype\":\"F16\",\"shape\":[1],\"data_offsets\":[2,4]}}", 4),
            TRI_ECORRUPT, "tensor a appears twice");
    refused(raw_file(dir, "neg.st", "{\"a\":{\"dtype\":\"F32\",\"shape\":[-1],\"data_offsets\":[0,4]}}", 4),
            TRI_ECORRUPT, "tensor a: shape entry 0");
    refused(raw_file(dir, "meta.st", "{\"__metadata__\":{\"n\":1}}", 0), TRI_ECORRUPT, "\"__metadata__\" must be");
    /* the length field larger than the file */
    char path[4200];
    snprintf(path, sizeof path, "%s/len.st", dir);
    FILE *f = fopen(path, "wb");
    fwrite("\xff\xff\x00\x00\x00\x00\x00\x00{}", 1, 10, f);
    fclose(f);
    refused(path, TRI_ECORRUPT, "header length 65535 exceeds the file (2 bytes after the length field)");
    snprintf(path, sizeof path, "%s/short.st", dir);
    f = fopen(path, "wb");
    fwrite("\x02\x00", 1, 2, f);
    fclose(f);
    refused(path, TRI_ECORRUPT, "shorter than the 8-byte header length");
    tri_st_file ok; /* no tensors is a valid file */
    cr_assert_eq(tri_st_open(&ok, raw_file(dir, "empty.st", "{}      ", 0)), TRI_OK, "%s", tri_error_message());
    cr_assert_eq(ok.n, 0);
    tri_st_close(&ok);
}
