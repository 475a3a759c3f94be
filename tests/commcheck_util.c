/* tests/commcheck_util.c - helpers of the comm contract checks (see commcheck_util.h). */
#include "tests/commcheck_util.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---- verdict ---- */

cc_verdict cc_verdict_start(const char *check, tri_comm *c)
{
    return (cc_verdict){.check = check, .c = c};
}

void cc_fail(cc_verdict *v, const char *fmt, ...)
{
    if (v->fails++ > 0)
        return;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(v->first, sizeof v->first, fmt, ap);
    va_end(ap);
}

int cc_verdict_end(cc_verdict *v, int rc)
{
    if (rc)
        return tri_error_context(rc, "%s (rank %d of %d)", v->check, v->c->rank, v->c->size);
    if (v->fails == 0)
        return TRI_OK;
    return TRI_ERR(TRI_EINTERNAL, "%s: rank %d of %d: %d wrong result(s); first: %s", v->check,
                   v->c->rank, v->c->size, v->fails, v->first);
}

void cc_expect_status(cc_verdict *v, int rc, int want, const char *needle, const char *what)
{
    if (rc != want)
        cc_fail(v, "%s: returned %s, want %s (message: %s)", what, tri_status_name(rc),
                tri_status_name(want), rc ? tri_error_message() : "none");
    else if (rc && !strstr(tri_error_message(), needle))
        cc_fail(v, "%s: message does not name '%s': %s", what, needle, tri_error_message());
}

/* ---- byte counters ---- */

cc_snapshot cc_snap(const tri_comm *c)
{
    cc_snapshot s;
    memcpy(s.bytes, c->bytes, sizeof s.bytes);
    memcpy(s.calls, c->calls, sizeof s.calls);
    return s;
}

void cc_expect_counted(cc_verdict *v, const tri_comm *c, const cc_snapshot *before, int kind,
                       int calls, uint64_t bytes, const char *what)
{
    bool counts = c->size > 1; /* a group of one rank sends nothing and counts nothing */
    for (int k = 0; k < TRI_COMM_KINDS; k++) {
        uint64_t db = c->bytes[k] - before->bytes[k], dc = c->calls[k] - before->calls[k];
        uint64_t wb = counts && k == kind ? bytes : 0, wc = counts && k == kind ? (uint64_t)calls : 0;
        if (db != wb || dc != wc)
            cc_fail(v, "%s: counted %llu %s call(s) of %llu bytes, want %llu of %llu", what,
                    (unsigned long long)dc, tri_comm_kind_name((tri_comm_kind)k),
                    (unsigned long long)db, (unsigned long long)wc, (unsigned long long)wb);
    }
}

/* ---- buffers ---- */

cc_buf cc_buf_make(tri_dtype dtype, int64_t rows, int64_t cols)
{
    cc_buf b = {.n = rows * cols};
    b.mem = malloc((size_t)(b.n + 2 * CC_GUARD) * sizeof *b.mem);
    if (!b.mem) {
        fprintf(stderr, "commcheck: out of memory\n");
        abort();
    }
    for (int64_t i = 0; i < b.n + 2 * CC_GUARD; i++)
        b.mem[i] = CC_GUARD_WORD;
    b.t = tri_tensor_2d(b.mem + CC_GUARD, dtype, rows, cols);
    return b;
}

void cc_buf_free(cc_buf *b)
{
    free(b->mem);
    b->mem = NULL;
}

static void set_value(tri_tensor t, int64_t i, int32_t value)
{
    if (t.dtype == TRI_F32)
        ((float *)t.data)[i] = (float)value;
    else
        ((int32_t *)t.data)[i] = value;
}

/* 7919 = 80 (mod 201), prime to 201: ranks 0..200 get different values at every element. */
int32_t cc_val(int seed, int rank, int64_t i)
{
    return (int32_t)(((int64_t)rank * 7919 + i * 104729 + (int64_t)seed * 131) % 201) - 100;
}

void cc_fill(tri_tensor t, int seed, int rank, int64_t offset)
{
    for (int64_t i = 0; i < tri_tensor_numel(t); i++)
        set_value(t, i, cc_val(seed, rank, offset + i));
}

void cc_fill_const(tri_tensor t, int32_t value)
{
    for (int64_t i = 0; i < tri_tensor_numel(t); i++)
        set_value(t, i, value);
}

int32_t *cc_ints(int64_t n)
{
    int32_t *p = malloc((size_t)(n > 0 ? n : 1) * sizeof *p);
    if (!p) {
        fprintf(stderr, "commcheck: out of memory\n");
        abort();
    }
    return p;
}

void cc_expect_values(cc_verdict *v, tri_tensor t, const int32_t *want, const char *what)
{
    for (int64_t i = 0; i < tri_tensor_numel(t); i++) {
        bool ok = t.dtype == TRI_F32 ? ((const float *)t.data)[i] == (float)want[i]
                                     : ((const int32_t *)t.data)[i] == want[i];
        if (!ok) {
            double got = t.dtype == TRI_F32 ? ((const float *)t.data)[i] : ((const int32_t *)t.data)[i];
            cc_fail(v, "%s: element %lld is %g, want %d", what, (long long)i, got, want[i]);
            return;
        }
    }
}

void cc_expect_guards(cc_verdict *v, const cc_buf *b, const char *what)
{
    for (int64_t k = 0; k < CC_GUARD; k++)
        if (b->mem[k] != CC_GUARD_WORD || b->mem[CC_GUARD + b->n + k] != CC_GUARD_WORD) {
            cc_fail(v, "%s: wrote outside the tensor", what);
            return;
        }
}

void cc_expect_buf(cc_verdict *v, const cc_buf *b, const int32_t *want, const char *what)
{
    cc_expect_values(v, b->t, want, what);
    cc_expect_guards(v, b, what);
}

void cc_expect_from(cc_verdict *v, tri_tensor t, int seed, int rank, int64_t offset, const char *what)
{
    int64_t n = tri_tensor_numel(t);
    int32_t *want = cc_ints(n);
    for (int64_t i = 0; i < n; i++)
        want[i] = cc_val(seed, rank, offset + i);
    cc_expect_values(v, t, want, what);
    free(want);
}

/* ---- p2p ops ---- */

tri_p2p cc_send_to(int peer, tri_tensor t)
{
    return (tri_p2p){.send = true, .peer = peer, .t = t};
}

tri_p2p cc_recv_from(int peer, tri_tensor t)
{
    return (tri_p2p){.send = false, .peer = peer, .t = t};
}
