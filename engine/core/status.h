/* engine/core/status.h - status codes and the per-thread error message.
 *
 * Functions that act return an int status: TRI_OK (0) or a negative code. The function that first
 * sees a failure records one message with file and line via TRI_ERR, which evaluates to the code so
 * the caller writes `return TRI_ERR(TRI_EINVAL, ...)` (no macro hides a return). Callers higher up
 * may add context with tri_error_context(). The message lives in thread-local storage because ranks
 * run as threads in the unit tests. Library code never exits; only the CLI decides. */
#ifndef TRIDENT_ENGINE_CORE_STATUS_H
#define TRIDENT_ENGINE_CORE_STATUS_H

#include <stdbool.h>

#ifdef __cplusplus
extern "C" {
#endif

enum {
    TRI_OK = 0,
    TRI_EINVAL = -1,     /* bad argument, bad input file or flag */
    TRI_ENOMEM = -2,     /* allocation failed or size overflow */
    TRI_EIO = -3,        /* file system error */
    TRI_ECOMM = -4,      /* communication error */
    TRI_EDEVICE = -5,    /* device (CUDA/BLAS) error */
    TRI_ENOTSUP = -6,    /* not supported by this backend/build */
    TRI_ECORRUPT = -7,   /* corrupt file: checksum, magic, truncation */
    TRI_ETIMEOUT = -8,   /* a peer did not answer in time */
    TRI_ENONFINITE = -9, /* NaN or Inf in loss or gradients */
    TRI_EINTERNAL = -10, /* a bug: an invariant did not hold */
};

#if defined(__GNUC__)
#define TRI_PRINTF(fmt_idx, arg_idx) __attribute__((format(printf, fmt_idx, arg_idx)))
#else
#define TRI_PRINTF(fmt_idx, arg_idx)
#endif

/* Records "msg (file:line)" as this thread's error message and returns code. */
int tri_error_set(int code, const char *file, int line, const char *fmt, ...) TRI_PRINTF(4, 5);

/* Prepends "context: " to this thread's error message and returns code unchanged. */
int tri_error_context(int code, const char *fmt, ...) TRI_PRINTF(2, 3);

/* This thread's last error message ("" when none). */
const char *tri_error_message(void);

/* Short name of a status code, e.g. "EINVAL". */
const char *tri_status_name(int code);

void tri_error_clear(void);

/* Sets this thread's message to text as it is (a message carried over from another thread, which
 * already names its file and line) and returns code. */
int tri_error_restore(int code, const char *text);

#define TRI_ERR(code, ...) tri_error_set((code), __FILE__, __LINE__, __VA_ARGS__)

#ifdef __cplusplus
}
#endif

#endif
