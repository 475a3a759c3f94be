/* engine/device/ops_internal.h - what the op families' wrappers share (engine/device/ops/<family>.c).
 *
 * Each tri_op_* wrapper checks its arguments with the tri_need* checks (a message naming the op, the
 * argument and its shape on a mismatch), hands a backend without native bf16 fp32 copies of its bf16
 * arguments (tri_widen_*), and calls the backend's slot through TRI_DISPATCH, which times it when
 * the device profiles. All defined in engine/device/device.c. Not a public header: the engine's
 * callers use engine/device/device.h. */
#ifndef TRIDENT_ENGINE_DEVICE_OPS_INTERNAL_H
#define TRIDENT_ENGINE_DEVICE_OPS_INTERNAL_H

#include <stdbool.h>

#include "engine/core/status.h"
#include "engine/device/device.h"

/* "dtype[shape]" of t in the char array buf, for messages. */
#define TRI_DESC(t, buf) tri_tensor_describe((t), (buf), sizeof(buf))

/* ---- argument checks: TRI_OK, or TRI_EINVAL naming op and the argument arg ---- */
/* t present, of dtype. */
int tri_need(const char *op, const char *arg, tri_tensor t, tri_dtype dtype);
/* t present and floating: fp32 or bf16 (device.h's precision rule). */
int tri_need_float(const char *op, const char *arg, tri_tensor t);
/* t of numel elements. */
int tri_need_numel(const char *op, const char *arg, tri_tensor t, int64_t numel);
/* t a matrix view (rows, cols) (any dims, rows = all but the last). */
int tri_need_matrix(const char *op, const char *arg, tri_tensor t, int64_t rows, int64_t cols);
/* A sequence of T positions split over cp context-parallel ranks (engine/device/ops/positions_math.h):
 * cp >= 1, 0 <= cp_rank < cp, and T divisible by 2 cp when cp > 1. */
int tri_check_seq_split(const char *op, int64_t T, int cp, int cp_rank);

/* ---- exact weight gradients (deterministic mode; engine/device/ops/exact_grads.c) ----
 * An op whose parameter-gradient arguments are int64 adds them as exact fixed-point sums, one fp32
 * contribution per chunk of rows. */
#define TRI_EXACT_MAX_GRADS 4
/* The rows [r0, r0 + n) of t seen as an (n, cols) matrix (rows: every dimension but the last). */
tri_tensor tri_rows_view(tri_tensor t, int64_t r0, int64_t n);
/* *exact: whether the present gradients among grads[0 .. n) are int64; TRI_EINVAL naming op when
 * int64 and floating ones are mixed. */
int tri_exact_grads_check(const char *op, const tri_tensor *grads, int n, bool *exact);
/* One chunk: the op's fp32 gradients of rows [r0, r0 + n) added into tmp[i] (zeroed unless the
 * chunk overwrites, shaped as grads[i]; absent where grads[i] is). */
typedef int (*tri_exact_chunk_fn)(tri_device *d, void *ctx, int64_t r0, int64_t n, const tri_tensor *tmp);
/* Runs fn over N rows in chunks of `chunk` rows (0: all N at once) and adds each chunk's gradients
 * exactly into grads[i] (int64, absent ones skipped) with the device's exact scratch and bits
 * (tri_device_set_exact_grads). The scratch is zeroed before each chunk unless `overwrites` says fn
 * writes every element of tmp (a GEMM with beta 0). TRI_EINVAL naming op when the scratch is not set
 * or too short. */
int tri_exact_grads_rows(tri_device *d, const char *op, int64_t N, int64_t chunk, bool overwrites, tri_tensor *grads,
                         int n, tri_exact_chunk_fn fn, void *ctx);

/* ---- dispatch ---- */
/* The profile's clock around one op: start, then end with the op's status (which it returns, or the
 * sync's failure). */
void tri_dispatch_start(tri_device *d);
int tri_dispatch_end(tri_device *d, const char *name, int rc);

/* Calls the backend's slot fn with d and the arguments (timed when profiling); the comma operator
 * starts the clock before the call. Every slot of a row that is not optional is filled (the
 * backends' tables are generated from engine/device/ops_list.h); the wrappers of the optional rows
 * test their slot first and run the ops that define them where it is NULL. */
#define TRI_DISPATCH(d, fn, ...) \
    (tri_dispatch_start(d), tri_dispatch_end((d), #fn, (d)->ops->fn((d), __VA_ARGS__)))

/* ---- bf16 on a backend that computes in fp32 only (device.c says how) ----
 * tri_widen w = tri_widen_start(d, rc);        rc: the checks' status (nothing is widened after one)
 * tri_widen_arg(&w, &x, writes);               each argument; x becomes its fp32 copy if bf16
 * return tri_widen_end(&w, w.rc ? 0 : TRI_DISPATCH(...));   rounds the written copies back */
typedef struct tri_widen {
    tri_device *d;
    int rc;
    int n;
    struct {
        tri_tensor orig;   /* the caller's bf16 tensor */
        void *wide;        /* its fp32 copy */
        bool written;      /* rounded back after the op */
    } arg[TRI_WIDEN_MAX];
} tri_widen;

tri_widen tri_widen_start(tri_device *d, int rc);
/* Points *t at an fp32 copy when it is bf16 (and the backend is not native); `writes` when the op
 * writes it. */
void tri_widen_arg(tri_widen *w, tri_tensor *t, bool writes);
/* After the op (status rc): rounds the written copies back; returns the status. */
int tri_widen_end(tri_widen *w, int rc);

#endif
