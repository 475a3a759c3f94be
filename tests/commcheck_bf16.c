/* tests/commcheck_bf16.c - the comm contract for bf16 tensors (engine/comm/comm.h, "Dtypes"), checked on
 * every comm implementation (see commcheck.h).
 *
 * bf16 elements are raw 16-bit patterns held between guard elements of their own width, so a comm
 * that moved 4-byte elements would be caught by the guards, and every byte count is numel * 2.
 * Three kinds of values:
 * - small integers, whose partial sums over the group are all exact in bf16: every comm, in any
 *   order, must give the exact sum;
 * - "rough" values (random sign, 8 significant bits, 13 binades), whose sums need rounding: a comm
 *   must land within bf16 rounding of the exact (double) sum, and on groups of one or two ranks,
 *   where every comm rounds exactly once, on the correctly rounded sum bit for bit. (The thread
 *   comm's stronger promise - the rank-order fp32 sum rounded once, bit for bit, on any group - is
 *   checked in tests/test_comm.c, since MPI rounds at each combine.)
 * - any 16 bits, NaNs and infinities included, for the operations that only move data: the bits
 *   must arrive unchanged.
 * MAX must be exact: the bits of the largest value. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>

#include "engine/core/math.h"
#include "tests/commcheck.h"
#include "tests/commcheck_util.h"

/* ---- buffers ---- */

#define BF_GUARD 4
#define BF_GUARD_BITS 0x7fc1u /* a NaN */
#define BF_JUNK 0xc0e0u       /* -7.0: what output buffers hold before a call */

typedef struct bf_buf {
    uint16_t *mem; /* BF_GUARD + n + BF_GUARD elements */
    int64_t n;
    tri_tensor t;  /* rows x cols bf16 view of the middle */
} bf_buf;

static bf_buf bf_make(int64_t rows, int64_t cols)
{
    bf_buf b = {.n = rows * cols};
    b.mem = malloc((size_t)(b.n + 2 * BF_GUARD) * sizeof *b.mem);
    if (!b.mem) {
        fprintf(stderr, "commcheck: out of memory\n");
        abort();
    }
    for (int64_t i = 0; i < b.n + 2 * BF_GUARD; i++)
        b.mem[i] = BF_GUARD_BITS;
    b.t = tri_tensor_2d(b.mem + BF_GUARD, TRI_BF16, rows, cols);
    return b;
}

static void bf_free(bf_buf *b)
{
    free(b->mem);
    b->mem = NULL;
}

static void expect_guards(cc_verdict *v, const bf_buf *b, const char *what)
{
    for (int64_t k = 0; k < BF_GUARD; k++)
        if (b->mem[k] != BF_GUARD_BITS || b->mem[BF_GUARD + b->n + k] != BF_GUARD_BITS) {
            cc_fail(v, "%s: wrote outside the bf16 tensor", what);
            return;
        }
}

/* ---- values ---- */

typedef enum { BF_INT, BF_ROUGH, BF_BITS } bf_kind;

/* splitmix64 of the case, rank and element */
static uint64_t mix(int seed, int rank, int64_t i)
{
    uint64_t z = (uint64_t)seed * 0x9e3779b97f4a7c15u + (uint64_t)rank * 0x632be59bd9b4e019u +
                 (uint64_t)i * 0xd1b54a32d192ed03u;
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9u;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebu;
    return z ^ (z >> 31);
}

/* The bits rank `rank` of a group of `size` holds at element i in case `seed`:
 * BF_INT: an integer in [-m, m], m = 255 / size (at least 1), so every partial sum has magnitude at
 *   most 255 and is exact in bf16 (8 significant bits) whatever order a comm adds in;
 * BF_ROUGH: random sign, exponent in [-6, 6], random 7 stored mantissa bits;
 * BF_BITS: any 16 bits. */
static uint16_t bf_val(bf_kind kind, int seed, int rank, int64_t i, int size)
{
    uint64_t h = mix(seed, rank, i);
    if (kind == BF_INT) {
        int64_t m = size < 255 ? 255 / size : 1;
        return tri_float_to_bf16((float)((int64_t)(h % (uint64_t)(2 * m + 1)) - m));
    }
    if (kind == BF_ROUGH)
        return (uint16_t)((h & 1 ? 0x8000u : 0u) | (127u - 6u + (unsigned)((h >> 1) % 13)) << 7 |
                          ((h >> 8) & 0x7fu));
    return (uint16_t)(h >> 16);
}

/* t[i] = bf_val(kind, seed, rank, offset + i, size) */
static void bf_fill(tri_tensor t, bf_kind kind, int seed, int rank, int64_t offset, int size)
{
    uint16_t *p = t.data;
    for (int64_t i = 0; i < tri_tensor_numel(t); i++)
        p[i] = bf_val(kind, seed, rank, offset + i, size);
}

static void bf_fill_const(tri_tensor t, uint16_t bits)
{
    uint16_t *p = t.data;
    for (int64_t i = 0; i < tri_tensor_numel(t); i++)
        p[i] = bits;
}

/* t holds the bits rank `rank` filled in (a copy: a received part, or an input left alone). */
static void expect_from(cc_verdict *v, tri_tensor t, bf_kind kind, int seed, int rank, int64_t offset, int size,
                        const char *what)
{
    const uint16_t *p = t.data;
    for (int64_t i = 0; i < tri_tensor_numel(t); i++) {
        uint16_t want = bf_val(kind, seed, rank, offset + i, size);
        if (p[i] != want) {
            cc_fail(v, "%s: element %lld is 0x%04x, want rank %d's 0x%04x", what, (long long)i, p[i], rank, want);
            return;
        }
    }
}

/* t holds the group's sum of element offset + i: exactly the sum for BF_INT and, on groups of up to
 * two ranks, exactly the rounded sum (one fp32 add of two bf16 values here is exact, then one
 * rounding); else within one bf16 rounding (2^-8 relative) per combine, doubled for margin:
 * |got - exact| <= 2^-7 (size - 1) sum_r |x_r| (sum of magnitudes: cancellation leaves |exact|
 * smaller than the partial sums MPI rounds). The exact sum is exact in double. */
static void expect_sums(cc_verdict *v, tri_tensor t, bf_kind kind, int seed, int size, int64_t offset,
                        const char *what)
{
    const uint16_t *p = t.data;
    for (int64_t i = 0; i < tri_tensor_numel(t); i++) {
        double exact = 0.0, mag = 0.0;
        for (int r = 0; r < size; r++) {
            double x = tri_bf16_to_float(bf_val(kind, seed, r, offset + i, size));
            exact += x;
            mag += fabs(x);
        }
        uint16_t rounded = tri_float_to_bf16((float)exact);
        double got = tri_bf16_to_float(p[i]), bound = ldexp(1.0, -7) * (size - 1) * mag;
        bool once = kind == BF_INT || size <= 2;
        if (once && p[i] != rounded) {
            cc_fail(v, "%s: element %lld is %a (0x%04x), want the rounded exact sum %a (0x%04x)", what,
                    (long long)i, got, p[i], exact, rounded);
            return;
        }
        if (!once && !(fabs(got - exact) <= bound)) {
            cc_fail(v, "%s: element %lld is %a (0x%04x), %g from the exact sum %a: beyond the bound %g", what,
                    (long long)i, got, p[i], fabs(got - exact), exact, bound);
            return;
        }
    }
}

/* t holds the bits of the group's largest value at element offset + i (the values are finite and
 * none is zero, so equal values have equal bits). */
static void expect_max(cc_verdict *v, tri_tensor t, bf_kind kind, int seed, int size, int64_t offset,
                       const char *what)
{
    const uint16_t *p = t.data;
    for (int64_t i = 0; i < tri_tensor_numel(t); i++) {
        uint16_t best = bf_val(kind, seed, 0, offset + i, size);
        for (int r = 1; r < size; r++) {
            uint16_t h = bf_val(kind, seed, r, offset + i, size);
            best = tri_bf16_to_float(h) > tri_bf16_to_float(best) ? h : best;
        }
        if (p[i] != best) {
            cc_fail(v, "%s: element %lld is 0x%04x (%g), want the max 0x%04x (%g)", what, (long long)i, p[i],
                    tri_bf16_to_float(p[i]), best, tri_bf16_to_float(best));
            return;
        }
    }
}

static const char *kind_name(bf_kind kind)
{
    return kind == BF_INT ? "integers" : kind == BF_ROUGH ? "rough values" : "any bits";
}

/* ---- all_reduce ---- */

static int all_reduce_case(cc_verdict *v, tri_comm *c, bf_kind kind, tri_reduce_op op, int64_t rows,
                           int64_t cols, int seed)
{
    char what[128];
    snprintf(what, sizeof what, "bf16 all_reduce %s of %s (%lld x %lld)", op == TRI_REDUCE_SUM ? "sum" : "max",
             kind_name(kind), (long long)rows, (long long)cols);
    bf_buf x = bf_make(rows, cols);
    bf_fill(x.t, kind, seed, c->rank, 0, c->size);
    cc_snapshot before = cc_snap(c);
    int rc = tri_comm_all_reduce(c, x.t, op);
    if (!rc) {
        cc_expect_counted(v, c, &before, TRI_COMM_ALL_REDUCE, 1, (uint64_t)x.n * 2, what);
        if (op == TRI_REDUCE_SUM)
            expect_sums(v, x.t, kind, seed, c->size, 0, what);
        else
            expect_max(v, x.t, kind, seed, c->size, 0, what);
        expect_guards(v, &x, what);
    }
    bf_free(&x);
    return rc;
}

int cc_bf16_all_reduce(tri_comm *c)
{
    static const int64_t shapes[][2] = {{1, 1}, {3, 5}, {2, 500}, {0, 3}};
    static const struct { bf_kind kind; tri_reduce_op op; } cases[] = {
        {BF_INT, TRI_REDUCE_SUM}, {BF_ROUGH, TRI_REDUCE_SUM}, {BF_ROUGH, TRI_REDUCE_MAX}, {BF_INT, TRI_REDUCE_MAX}};
    cc_verdict v = cc_verdict_start("bf16 all_reduce", c);
    int rc = TRI_OK, seed = 1000;
    for (int k = 0; k < 4 && !rc; k++)
        for (int s = 0; s < 4 && !rc; s++)
            rc = all_reduce_case(&v, c, cases[k].kind, cases[k].op, shapes[s][0], shapes[s][1], ++seed);
    return cc_verdict_end(&v, rc);
}

/* ---- reduce_scatter ---- */

static int reduce_scatter_case(cc_verdict *v, tri_comm *c, bf_kind kind, int64_t n, bool in_place, int seed)
{
    char what[128];
    snprintf(what, sizeof what, "bf16 reduce_scatter of %s n=%lld%s", kind_name(kind), (long long)n,
             in_place ? " (out = this rank's slice of in)" : "");
    bf_buf in = bf_make(c->size, n), out = bf_make(1, n);
    bf_fill(in.t, kind, seed, c->rank, 0, c->size);
    bf_fill_const(out.t, BF_JUNK);
    tri_tensor dst = in_place ? tri_tensor_range(in.t, c->rank * n, n) : out.t;
    cc_snapshot before = cc_snap(c);
    int rc = tri_comm_reduce_scatter(c, dst, in.t);
    if (!rc) {
        cc_expect_counted(v, c, &before, TRI_COMM_REDUCE_SCATTER, 1, (uint64_t)(c->size * n) * 2, what);
        expect_sums(v, dst, kind, seed, c->size, c->rank * n, what);
        expect_guards(v, &in, what);
        expect_guards(v, &out, what);
        if (!in_place)
            expect_from(v, in.t, kind, seed, c->rank, 0, c->size, "bf16 reduce_scatter changed its input");
    }
    bf_free(&in);
    bf_free(&out);
    return rc;
}

int cc_bf16_reduce_scatter(tri_comm *c)
{
    static const int64_t ns[] = {1, 37, 0};
    cc_verdict v = cc_verdict_start("bf16 reduce_scatter", c);
    int rc = TRI_OK, seed = 1100;
    for (int k = 0; k < 2 && !rc; k++)
        for (int s = 0; s < 3 && !rc; s++)
            for (int p = 0; p < 2 && !rc; p++)
                rc = reduce_scatter_case(&v, c, k ? BF_ROUGH : BF_INT, ns[s], p == 1, ++seed);
    return cc_verdict_end(&v, rc);
}

/* ---- all_gather ---- */

static int all_gather_case(cc_verdict *v, tri_comm *c, int64_t n, bool in_place, int seed)
{
    char what[128];
    snprintf(what, sizeof what, "bf16 all_gather n=%lld%s", (long long)n, in_place ? " (in = this rank's slot)" : "");
    bf_buf in = bf_make(1, n), out = bf_make(c->size, n);
    tri_tensor src = in_place ? tri_tensor_range(out.t, c->rank * n, n) : in.t;
    bf_fill_const(out.t, BF_JUNK);
    bf_fill(src, BF_BITS, seed, c->rank, 0, c->size);
    cc_snapshot before = cc_snap(c);
    int rc = tri_comm_all_gather(c, out.t, src);
    if (!rc) {
        cc_expect_counted(v, c, &before, TRI_COMM_ALL_GATHER, 1, (uint64_t)(c->size * n) * 2, what);
        for (int r = 0; r < c->size; r++)
            expect_from(v, tri_tensor_range(out.t, r * n, n), BF_BITS, seed, r, 0, c->size, what);
        expect_guards(v, &out, what);
        expect_guards(v, &in, what);
    }
    bf_free(&in);
    bf_free(&out);
    return rc;
}

int cc_bf16_all_gather(tri_comm *c)
{
    static const int64_t ns[] = {1, 37, 0};
    cc_verdict v = cc_verdict_start("bf16 all_gather", c);
    int rc = TRI_OK, seed = 1200;
    for (int s = 0; s < 3 && !rc; s++)
        for (int p = 0; p < 2 && !rc; p++)
            rc = all_gather_case(&v, c, ns[s], p == 1, ++seed);
    return cc_verdict_end(&v, rc);
}

/* ---- broadcast ---- */

int cc_bf16_broadcast(tri_comm *c)
{
    cc_verdict v = cc_verdict_start("bf16 broadcast", c);
    const int64_t n = 37;
    bf_buf x = bf_make(1, n);
    int rc = TRI_OK;
    for (int root = 0; root < c->size && !rc; root++) {
        char what[96];
        snprintf(what, sizeof what, "bf16 broadcast of %lld elements from root %d", (long long)n, root);
        if (c->rank == root)
            bf_fill(x.t, BF_BITS, 1300 + root, root, 0, c->size);
        else
            bf_fill_const(x.t, BF_JUNK);
        cc_snapshot before = cc_snap(c);
        rc = tri_comm_broadcast(c, x.t, root);
        if (!rc) {
            cc_expect_counted(&v, c, &before, TRI_COMM_BROADCAST, 1, (uint64_t)n * 2, what);
            expect_from(&v, x.t, BF_BITS, 1300 + root, root, 0, c->size, what);
            expect_guards(&v, &x, what);
        }
    }
    bf_free(&x);
    return cc_verdict_end(&v, rc);
}

/* ---- p2p ---- */

/* Rank 0 sends `sent` bf16 elements to rank 1, which posts a receive of `expected`: rank 1 gets
 * TRI_ECOMM naming the sender (on MPI, through MPI_Get_count or truncation with the bf16 type). */
static void mismatch_case(cc_verdict *v, tri_comm *c, int64_t sent, int64_t expected, const char *what)
{
    if (c->rank > 1)
        return;
    bf_buf b = bf_make(1, c->rank == 0 ? sent : expected);
    bf_fill(b.t, BF_BITS, 1410, c->rank, 0, c->size);
    tri_p2p op = c->rank == 0 ? cc_send_to(1, b.t) : cc_recv_from(0, b.t);
    int rc = tri_comm_p2p(c, &op, 1);
    cc_expect_status(v, rc, c->rank == 0 ? TRI_OK : TRI_ECOMM, "p2p: rank 0 sent", what);
    expect_guards(v, &b, what);
    bf_free(&b);
}

int cc_bf16_p2p(tri_comm *c)
{
    cc_verdict v = cc_verdict_start("bf16 p2p", c);
    if (c->size == 1)
        return TRI_OK;
    const int64_t n = 37; /* 74 bytes: not a multiple of 4 */
    int next = (c->rank + 1) % c->size, prev = (c->rank + c->size - 1) % c->size, rc = TRI_OK;
    bf_buf sb = bf_make(1, n), rb = bf_make(1, n);
    cc_buf sf = cc_buf_make(TRI_F32, 1, 5), rf = cc_buf_make(TRI_F32, 1, 5);
    /* a ring carrying a bf16 and an f32 message in one batch (odd ranks post the receives first) */
    for (int round = 0; round < 2 && !rc; round++) {
        int seed = 1400 + round;
        bf_fill(sb.t, BF_BITS, seed, c->rank, 0, c->size);
        bf_fill_const(rb.t, BF_JUNK);
        cc_fill(sf.t, seed, c->rank, 0);
        cc_fill_const(rf.t, CC_JUNK);
        tri_p2p sends[2] = {cc_send_to(next, sb.t), cc_send_to(next, sf.t)};
        tri_p2p recvs[2] = {cc_recv_from(prev, rb.t), cc_recv_from(prev, rf.t)};
        bool odd = c->rank % 2;
        tri_p2p ops[4] = {odd ? recvs[0] : sends[0], odd ? recvs[1] : sends[1], odd ? sends[0] : recvs[0],
                          odd ? sends[1] : recvs[1]};
        cc_snapshot before = cc_snap(c);
        rc = tri_comm_p2p(c, ops, 4);
        if (!rc) {
            cc_expect_counted(&v, c, &before, TRI_COMM_P2P, 1, (uint64_t)n * 2 + 5 * 4, "bf16 p2p ring");
            expect_from(&v, rb.t, BF_BITS, seed, prev, 0, c->size, "bf16 p2p ring: received from the previous rank");
            expect_from(&v, sb.t, BF_BITS, seed, c->rank, 0, c->size, "bf16 p2p ring: send buffer changed");
            cc_expect_from(&v, rf.t, seed, prev, 0, "bf16 p2p ring: the f32 message beside the bf16 one");
            expect_guards(&v, &rb, "bf16 p2p ring");
            cc_expect_guards(&v, &rf, "bf16 p2p ring");
        }
    }
    bf_free(&sb);
    bf_free(&rb);
    cc_buf_free(&sf);
    cc_buf_free(&rf);
    if (!rc) {
        mismatch_case(&v, c, 3, 5, "bf16 p2p: receive larger than the message");
        mismatch_case(&v, c, 5, 3, "bf16 p2p: receive smaller than the message");
    }
    /* the pair still talks: an odd-sized bf16 reply from rank 1 to rank 0 */
    if (!rc && c->rank <= 1) {
        bf_buf b = bf_make(1, 7);
        bf_fill(b.t, BF_BITS, 1420, c->rank, 0, c->size);
        tri_p2p op = c->rank == 1 ? cc_send_to(0, b.t) : cc_recv_from(1, b.t);
        rc = tri_comm_p2p(c, &op, 1);
        if (!rc && c->rank == 0)
            expect_from(&v, b.t, BF_BITS, 1420, 1, 0, c->size, "bf16 p2p after a mismatch");
        bf_free(&b);
    }
    if (!rc)
        rc = tri_comm_barrier(c);
    return cc_verdict_end(&v, rc);
}

/* ---- non-blocking ---- */

/* Starts a collective and checks it counted one call of `bytes` under `kind` at the start. */
#define STARTED(call, kind, bytes, what)                                       \
    do {                                                                       \
        cc_snapshot before_ = cc_snap(c);                                      \
        rc = (call);                                                           \
        if (!rc)                                                               \
            cc_expect_counted(&v, c, &before_, (kind), 1, (bytes), (what));   \
    } while (0)

int cc_bf16_nonblocking(tri_comm *c)
{
    cc_verdict v = cc_verdict_start("bf16 nonblocking", c);
    const int64_t n = 37;
    const int S = c->size;
    bf_buf sum = bf_make(3, n), mx = bf_make(1, n), rs = bf_make(S, n), ag = bf_make(S, n), blk = bf_make(1, n);
    tri_tensor rs_mine = tri_tensor_range(rs.t, c->rank * n, n), ag_mine = tri_tensor_range(ag.t, c->rank * n, n);
    bf_fill(sum.t, BF_INT, 1501, c->rank, 0, S);
    bf_fill(mx.t, BF_ROUGH, 1502, c->rank, 0, S);
    bf_fill(rs.t, BF_ROUGH, 1503, c->rank, 0, S);
    bf_fill_const(ag.t, BF_JUNK);
    bf_fill(ag_mine, BF_BITS, 1504, c->rank, 0, S);
    bf_fill(blk.t, BF_ROUGH, 1505, c->rank, 0, S);
    uint64_t b2 = 2, rows = (uint64_t)S * (uint64_t)n;

    tri_comm_request req[4] = {{0}};
    int rc = TRI_OK;
    STARTED(tri_comm_all_reduce_start(c, sum.t, TRI_REDUCE_SUM, &req[0]), TRI_COMM_ALL_REDUCE, 3 * n * b2,
            "bf16 all_reduce_start sum");
    if (!rc)
        STARTED(tri_comm_all_reduce_start(c, mx.t, TRI_REDUCE_MAX, &req[1]), TRI_COMM_ALL_REDUCE, n * b2,
                "bf16 all_reduce_start max");
    if (!rc)
        STARTED(tri_comm_all_reduce(c, blk.t, TRI_REDUCE_SUM), TRI_COMM_ALL_REDUCE, n * b2,
                "bf16 blocking all_reduce among started ones");
    if (!rc)
        STARTED(tri_comm_reduce_scatter_start(c, rs_mine, rs.t, &req[2]), TRI_COMM_REDUCE_SCATTER, rows * b2,
                "bf16 reduce_scatter_start in place");
    if (!rc)
        STARTED(tri_comm_all_gather_start(c, ag.t, ag_mine, &req[3]), TRI_COMM_ALL_GATHER, rows * b2,
                "bf16 all_gather_start in place");
    /* the max by polling, then the rest waited for in reverse order */
    bool done = false;
    for (long k = 0; !rc && !done; k++) {
        rc = tri_comm_test(&req[1], &done);
        if (k > 100000000L) {
            cc_fail(&v, "rank %d: tri_comm_test never reported the bf16 max done", c->rank);
            break;
        }
    }
    for (int k = 3; k >= 0 && !rc; k--)
        rc = tri_comm_wait(&req[k]);
    if (!rc) {
        expect_sums(&v, sum.t, BF_INT, 1501, S, 0, "bf16 all_reduce_start sum");
        expect_max(&v, mx.t, BF_ROUGH, 1502, S, 0, "bf16 all_reduce_start max");
        expect_sums(&v, blk.t, BF_ROUGH, 1505, S, 0, "bf16 blocking all_reduce among started ones");
        expect_sums(&v, rs_mine, BF_ROUGH, 1503, S, c->rank * n, "bf16 reduce_scatter_start in place");
        for (int r = 0; r < S; r++)
            expect_from(&v, tri_tensor_range(ag.t, r * n, n), BF_BITS, 1504, r, 0, S, "bf16 all_gather_start");
        expect_guards(&v, &sum, "bf16 all_reduce_start sum");
        expect_guards(&v, &mx, "bf16 all_reduce_start max");
        expect_guards(&v, &rs, "bf16 reduce_scatter_start");
        expect_guards(&v, &ag, "bf16 all_gather_start");
    }
    bf_free(&sum), bf_free(&mx), bf_free(&rs), bf_free(&ag), bf_free(&blk);
    return cc_verdict_end(&v, rc);
}
#undef STARTED
