/* tests/commcheck_util.h - what the comm contract checks (tests/commcheck*.c) share.
 *
 * A verdict collects wrong values without leaving the call sequence: a check records a failure and
 * goes on making the same calls as the other ranks, which would otherwise wait in a collective
 * this rank skipped. Buffers hold 4-byte elements (f32 or i32) between guard words, filled with
 * small integers from cc_val, so every expected result is an exact integer, whatever order a comm
 * sums in. Internal to the checks; tests use tests/commcheck.h. */
#ifndef TRIDENT_TESTS_COMMCHECK_UTIL_H
#define TRIDENT_TESTS_COMMCHECK_UTIL_H

#include <stdbool.h>
#include <stdint.h>

#include "engine/comm/comm.h"
#include "engine/core/status.h"

/* ---- verdict ---- */

typedef struct cc_verdict {
    const char *check;
    tri_comm *c;
    int fails;
    char first[1024];
} cc_verdict;

cc_verdict cc_verdict_start(const char *check, tri_comm *c);
/* Records a wrong result (the first one's message is kept). */
void cc_fail(cc_verdict *v, const char *fmt, ...) TRI_PRINTF(2, 3);
/* The check's status: rc if a comm call failed (its message gets the check's name), else
 * TRI_EINTERNAL if any result was wrong, else TRI_OK. */
int cc_verdict_end(cc_verdict *v, int rc);
/* rc is `want`, and when an error, this thread's message contains `needle`. */
void cc_expect_status(cc_verdict *v, int rc, int want, const char *needle, const char *what);

/* ---- byte counters ---- */

typedef struct cc_snapshot {
    uint64_t bytes[TRI_COMM_KINDS], calls[TRI_COMM_KINDS];
} cc_snapshot;

cc_snapshot cc_snap(const tri_comm *c);
/* Since `before`, `calls` calls of `kind` were counted with `bytes` payload bytes in all, and
 * nothing under any other kind (kind = TRI_COMM_KINDS, calls = 0: nothing at all). On a group of one
 * rank, which sends nothing, nothing at all (comm.h). */
void cc_expect_counted(cc_verdict *v, const tri_comm *c, const cc_snapshot *before, int kind, int calls,
                       uint64_t bytes, const char *what);

/* ---- buffers ---- */

#define CC_GUARD 4
#define CC_GUARD_WORD 0x7fc0deadu /* a NaN as f32 */
#define CC_JUNK (-7777)           /* what output buffers hold before a call */

typedef struct cc_buf {
    uint32_t *mem; /* CC_GUARD + n + CC_GUARD words */
    int64_t n;
    tri_tensor t;  /* rows x cols view of the middle */
} cc_buf;

cc_buf cc_buf_make(tri_dtype dtype, int64_t rows, int64_t cols);
void cc_buf_free(cc_buf *b);
/* n int32 (at least one), for expected values. Allocation failures abort the test program. */
int32_t *cc_ints(int64_t n);

/* The value rank `rank` contributes at element i in case `seed`: an integer in [-100, 100] (exact in
 * f32, and so are sums of a few of them), different on every rank of a group up to 201 ranks, and
 * whose maximum over the ranks falls on different ranks for different elements. */
int32_t cc_val(int seed, int rank, int64_t i);
/* t[i] = cc_val(seed, rank, offset + i) */
void cc_fill(tri_tensor t, int seed, int rank, int64_t offset);
void cc_fill_const(tri_tensor t, int32_t value);

/* t holds exactly want[0..numel). */
void cc_expect_values(cc_verdict *v, tri_tensor t, const int32_t *want, const char *what);
/* Nothing was written outside b's tensor. */
void cc_expect_guards(cc_verdict *v, const cc_buf *b, const char *what);
void cc_expect_buf(cc_verdict *v, const cc_buf *b, const int32_t *want, const char *what);
/* t[i] == cc_val(seed, rank, offset + i): an input the call must leave alone, or a received part. */
void cc_expect_from(cc_verdict *v, tri_tensor t, int seed, int rank, int64_t offset, const char *what);

/* ---- p2p ops ---- */

tri_p2p cc_send_to(int peer, tri_tensor t);
tri_p2p cc_recv_from(int peer, tri_tensor t);

#endif
