/* checkpoints/safetensors.h - Hugging Face's safetensors container: a checked reader and a writer
 * whose bytes are those of Hugging Face's own library.
 *
 * Format (huggingface/safetensors, README "Format"): 8 bytes, a little-endian u64 N; N bytes of
 * JSON, an object mapping each tensor name to {"dtype", "shape", "data_offsets": [begin, end]}
 * (offsets into the data that follows the header) plus an optional "__metadata__" object of
 * strings; then the data. The reader validates everything a caller relies on before it returns:
 * the header length against the file, the JSON, every dtype (F32, BF16, F16 are read; any other is
 * refused by name), shapes, offsets inside the data and matching the shape, and that the tensors
 * tile the data exactly (no overlap, no hole, no trailing bytes), as the reference library does.
 * Every error names the file and, where there is one, the tensor.
 *
 * The writer serializes as the reference library's `serialize` does, so a file it writes is byte
 * for byte the one `safetensors.torch.save_file(tensors, path, metadata={"format": "pt"})` writes:
 * tensors sorted by dtype (wider first) then name, the header as compact JSON ("__metadata__"
 * first, then each tensor's dtype, shape and data_offsets) padded with spaces to a multiple of 8.
 * It writes a temporary file beside the target and renames it over the target only when complete. */
#ifndef TRIDENT_CHECKPOINTS_SAFETENSORS_H
#define TRIDENT_CHECKPOINTS_SAFETENSORS_H

#include <stddef.h>
#include <stdint.h>

#define TRI_ST_NAME_MAX 256
#define TRI_ST_MAX_DIMS 8
/* Header lengths above this are refused (the reference library's limit is 100 MB). */
#define TRI_ST_MAX_HEADER (100u * 1000u * 1000u)

/* Element types Trident reads and writes. */
typedef enum tri_st_dtype { TRI_ST_F16, TRI_ST_BF16, TRI_ST_F32 } tri_st_dtype;

typedef struct tri_st_tensor {
    char name[TRI_ST_NAME_MAX];
    tri_st_dtype dtype;
    int ndim;
    int64_t shape[TRI_ST_MAX_DIMS];
    uint64_t begin, end; /* byte offsets into the data section */
} tri_st_tensor;

typedef struct tri_st_file {
    char *path;
    int fd;
    uint64_t data_start; /* 8 + header length */
    uint64_t data_bytes;
    int n;
    tri_st_tensor *tensors; /* in header order */
} tri_st_file;

/* The dtype's name in the header ("F32", "BF16", "F16") and its size in bytes. */
const char *tri_st_dtype_name(tri_st_dtype d);
int tri_st_dtype_size(tri_st_dtype d);
/* Elements of a tensor (product of its shape; 1 for a scalar). */
int64_t tri_st_numel(const tri_st_tensor *t);

/* Opens and validates path (see the top comment). TRI_EIO (cannot open or read), TRI_ECORRUPT (bad
 * header or layout) or TRI_EINVAL (a dtype Trident does not read), each naming the file and tensor. */
int tri_st_open(tri_st_file *f, const char *path);
void tri_st_close(tri_st_file *f);

/* The tensor named `name`, or NULL. */
const tri_st_tensor *tri_st_find(const tri_st_file *f, const char *name);

/* Reads tensor t as float32 (BF16 and F16 widened exactly). TRI_EIO naming the file and tensor. */
int tri_st_read_f32(const tri_st_file *f, const tri_st_tensor *t, float *out);

/* ---- writing ---- */

/* One tensor to write: its name, the dtype to store and shape; `fill` writes its numel float32
 * values into buf (called once, in the file's order; the writer rounds them to dtype: BF16 and F16
 * to nearest even). */
typedef struct tri_st_entry {
    char name[TRI_ST_NAME_MAX];
    tri_st_dtype dtype;
    int ndim;
    int64_t shape[TRI_ST_MAX_DIMS];
    int (*fill)(void *ctx, const struct tri_st_entry *e, float *buf);
    void *ctx;
} tri_st_entry;

/* Writes entries[0..n) to path as described at the top (reorders entries into the file's order).
 * TRI_EIO naming the file, TRI_ENOMEM, or fill's error. */
int tri_st_write(const char *path, tri_st_entry *entries, int n);

/* Bytes of entry e's data. */
uint64_t tri_st_entry_bytes(const tri_st_entry *e);

/* IEEE half precision: float32 -> binary16 rounded to nearest even (overflow to infinity) and back. */
uint16_t tri_float_to_f16(float f);
float tri_f16_to_float(uint16_t h);

#endif
