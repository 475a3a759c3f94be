/* tests/commcheck.c - the comm contract checks of the collectives, barrier, byte counters and
 * argument checks, and the list of all checks (see commcheck.h; p2p in commcheck_p2p.c, split and
 * grid in commcheck_groups.c). */
#include "tests/commcheck.h"
#include "engine/core/clock.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "tests/commcheck_util.h"

/* ---- all_reduce ---- */

static int all_reduce_case(cc_verdict *v, tri_comm *c, tri_dtype dtype, tri_reduce_op op, int64_t rows,
                           int64_t cols, int seed)
{
    char what[128];
    snprintf(what, sizeof what, "all_reduce %s %s (%lld x %lld)", op == TRI_REDUCE_SUM ? "sum" : "max",
             tri_dtype_name(dtype), (long long)rows, (long long)cols);
    cc_buf x = cc_buf_make(dtype, rows, cols);
    int32_t *want = cc_ints(x.n);
    cc_fill(x.t, seed, c->rank, 0);
    for (int64_t i = 0; i < x.n; i++) {
        int32_t acc = cc_val(seed, 0, i);
        for (int r = 1; r < c->size; r++) {
            int32_t y = cc_val(seed, r, i);
            acc = op == TRI_REDUCE_SUM ? acc + y : (y > acc ? y : acc);
        }
        want[i] = acc;
    }
    cc_snapshot before = cc_snap(c);
    int rc = tri_comm_all_reduce(c, x.t, op);
    if (!rc) {
        cc_expect_counted(v, c, &before, TRI_COMM_ALL_REDUCE, 1, (uint64_t)x.n * 4, what);
        cc_expect_buf(v, &x, want, what);
    }
    free(want);
    cc_buf_free(&x);
    return rc;
}

int cc_all_reduce(tri_comm *c)
{
    static const int64_t shapes[][2] = {{1, 1}, {3, 5}, {2, 500}, {0, 3}};
    static const tri_dtype dtypes[] = {TRI_F32, TRI_I32};
    static const tri_reduce_op ops[] = {TRI_REDUCE_SUM, TRI_REDUCE_MAX};
    cc_verdict v = cc_verdict_start("all_reduce", c);
    int rc = TRI_OK, seed = 0;
    for (int d = 0; d < 2 && !rc; d++)
        for (int o = 0; o < 2 && !rc; o++)
            for (int s = 0; s < 4 && !rc; s++)
                rc = all_reduce_case(&v, c, dtypes[d], ops[o], shapes[s][0], shapes[s][1], ++seed);
    return cc_verdict_end(&v, rc);
}

/* ---- reduce_scatter ---- */

static int reduce_scatter_case(cc_verdict *v, tri_comm *c, tri_dtype dtype, int64_t n, bool in_place,
                               int seed)
{
    char what[128];
    snprintf(what, sizeof what, "reduce_scatter %s n=%lld%s", tri_dtype_name(dtype), (long long)n,
             in_place ? " (out = this rank's slice of in)" : "");
    cc_buf in = cc_buf_make(dtype, c->size, n), out = cc_buf_make(dtype, 1, n);
    cc_fill(in.t, seed, c->rank, 0);
    cc_fill_const(out.t, CC_JUNK);
    int32_t *want = cc_ints(n);
    for (int64_t i = 0; i < n; i++) {
        want[i] = 0;
        for (int r = 0; r < c->size; r++)
            want[i] += cc_val(seed, r, c->rank * n + i);
    }
    tri_tensor dst = in_place ? tri_tensor_range(in.t, c->rank * n, n) : out.t;
    cc_snapshot before = cc_snap(c);
    int rc = tri_comm_reduce_scatter(c, dst, in.t);
    if (!rc) {
        cc_expect_counted(v, c, &before, TRI_COMM_REDUCE_SCATTER, 1, (uint64_t)(c->size * n) * 4, what);
        cc_expect_values(v, dst, want, what);
        cc_expect_guards(v, &in, what);
        if (!in_place) {
            cc_expect_guards(v, &out, what);
            cc_expect_from(v, in.t, seed, c->rank, 0, "reduce_scatter changed its input");
        }
    }
    free(want);
    cc_buf_free(&in);
    cc_buf_free(&out);
    return rc;
}

int cc_reduce_scatter(tri_comm *c)
{
    static const int64_t ns[] = {1, 5, 64, 0};
    static const tri_dtype dtypes[] = {TRI_F32, TRI_I32};
    cc_verdict v = cc_verdict_start("reduce_scatter", c);
    int rc = TRI_OK, seed = 100;
    for (int d = 0; d < 2 && !rc; d++)
        for (int k = 0; k < 4 && !rc; k++)
            for (int in_place = 0; in_place < 2 && !rc; in_place++)
                rc = reduce_scatter_case(&v, c, dtypes[d], ns[k], in_place, ++seed);
    return cc_verdict_end(&v, rc);
}

/* ---- all_gather ---- */

static int all_gather_case(cc_verdict *v, tri_comm *c, tri_dtype dtype, int64_t n, bool in_place, int seed)
{
    char what[128];
    snprintf(what, sizeof what, "all_gather %s n=%lld%s", tri_dtype_name(dtype), (long long)n,
             in_place ? " (in = this rank's slot of out)" : "");
    cc_buf out = cc_buf_make(dtype, c->size, n), in = cc_buf_make(dtype, 1, n);
    cc_fill_const(out.t, CC_JUNK);
    tri_tensor src = in_place ? tri_tensor_range(out.t, c->rank * n, n) : in.t;
    cc_fill(src, seed, c->rank, 0);
    int32_t *want = cc_ints(c->size * n);
    for (int r = 0; r < c->size; r++)
        for (int64_t i = 0; i < n; i++)
            want[r * n + i] = cc_val(seed, r, i);
    cc_snapshot before = cc_snap(c);
    int rc = tri_comm_all_gather(c, out.t, src);
    if (!rc) {
        cc_expect_counted(v, c, &before, TRI_COMM_ALL_GATHER, 1, (uint64_t)(c->size * n) * 4, what);
        cc_expect_buf(v, &out, want, what);
        if (!in_place) {
            cc_expect_guards(v, &in, what);
            cc_expect_from(v, in.t, seed, c->rank, 0, "all_gather changed its input");
        }
    }
    free(want);
    cc_buf_free(&in);
    cc_buf_free(&out);
    return rc;
}

int cc_all_gather(tri_comm *c)
{
    static const int64_t ns[] = {1, 4, 33, 0};
    static const tri_dtype dtypes[] = {TRI_F32, TRI_I32};
    cc_verdict v = cc_verdict_start("all_gather", c);
    int rc = TRI_OK, seed = 200;
    for (int d = 0; d < 2 && !rc; d++)
        for (int k = 0; k < 4 && !rc; k++)
            for (int in_place = 0; in_place < 2 && !rc; in_place++)
                rc = all_gather_case(&v, c, dtypes[d], ns[k], in_place, ++seed);
    return cc_verdict_end(&v, rc);
}

/* ---- broadcast ---- */

static int broadcast_case(cc_verdict *v, tri_comm *c, tri_dtype dtype, int root, int64_t rows, int seed)
{
    char what[128];
    snprintf(what, sizeof what, "broadcast %s from root %d (%lld x 3)", tri_dtype_name(dtype), root,
             (long long)rows);
    cc_buf x = cc_buf_make(dtype, rows, 3);
    cc_fill(x.t, seed, c->rank, 0);
    int32_t *want = cc_ints(x.n);
    for (int64_t i = 0; i < x.n; i++)
        want[i] = cc_val(seed, root, i);
    cc_snapshot before = cc_snap(c);
    int rc = tri_comm_broadcast(c, x.t, root);
    if (!rc) {
        cc_expect_counted(v, c, &before, TRI_COMM_BROADCAST, 1, (uint64_t)x.n * 4, what);
        cc_expect_buf(v, &x, want, what);
    }
    free(want);
    cc_buf_free(&x);
    return rc;
}

int cc_broadcast(tri_comm *c)
{
    cc_verdict v = cc_verdict_start("broadcast", c);
    int rc = TRI_OK, seed = 300;
    for (int root = 0; root < c->size && !rc; root++) {
        rc = broadcast_case(&v, c, TRI_F32, root, 2, ++seed);
        if (!rc)
            rc = broadcast_case(&v, c, TRI_I32, root, 5, ++seed);
    }
    if (!rc)
        rc = broadcast_case(&v, c, TRI_F32, c->size - 1, 0, ++seed);
    return cc_verdict_end(&v, rc);
}

/* ---- barrier ---- */

int cc_barrier(tri_comm *c)
{
    /* After a first barrier, the last rank arrives 300 ms late at a second one; everyone else must
     * wait for it. The threshold leaves 200 ms for ranks leaving the first barrier at different
     * times on an oversubscribed machine. */
    const double late = 0.3, min_wait = 0.1;
    cc_verdict v = cc_verdict_start("barrier", c);
    int rc = tri_comm_barrier(c);
    if (rc || c->size == 1)
        return cc_verdict_end(&v, rc);
    double t0 = tri_now_s();
    if (c->rank == c->size - 1) {
        struct timespec ts = {0, (long)(late * 1e9)};
        nanosleep(&ts, NULL);
    }
    rc = tri_comm_barrier(c);
    double waited = tri_now_s() - t0;
    if (!rc && c->rank != c->size - 1 && waited < min_wait)
        cc_fail(&v, "left the barrier after %.3f s, before the last rank arrived (%.1f s late)", waited,
                late);
    return cc_verdict_end(&v, rc);
}

/* ---- counters ---- */

int cc_counters(tri_comm *c)
{
    cc_verdict v = cc_verdict_start("counters", c);
    int s = c->size, rank = c->rank;
    float f[10] = {0}, g[20 * 8] = {0};
    int32_t k[3 * 8] = {0}, k3[3] = {0}, k2[2] = {0};
    if (s > 8)
        return TRI_OK; /* the buffers above are sized for groups of up to 8 */
    tri_comm_reset_counters(c);
    int rc = tri_comm_all_reduce(c, tri_tensor_1d(f, TRI_F32, 10), TRI_REDUCE_SUM);        /* 40 B */
    if (!rc) rc = tri_comm_all_reduce(c, tri_tensor_1d(k, TRI_I32, 3), TRI_REDUCE_MAX);    /* 12 B */
    if (!rc) rc = tri_comm_reduce_scatter(c, tri_tensor_1d(k3, TRI_I32, 3),
                                          tri_tensor_1d(k, TRI_I32, 3 * s));               /* 12 s B */
    if (!rc) rc = tri_comm_all_gather(c, tri_tensor_1d(g, TRI_F32, 5 * s),
                                      tri_tensor_1d(f, TRI_F32, 5));                       /* 20 s B */
    if (!rc) rc = tri_comm_broadcast(c, tri_tensor_1d(f, TRI_F32, 7), s - 1);              /* 28 B */
    if (!rc) rc = tri_comm_barrier(c);                                                     /* nothing */
    uint64_t p2p_bytes = 0, p2p_calls = 0;
    if (!rc && s > 1) {
        /* a ring of 6 floats (24 B sent by everyone), then rank 1 sends 2 ints to rank 0: a batch
         * that only receives counts a call of 0 bytes */
        tri_p2p ring[2] = {cc_send_to((rank + 1) % s, tri_tensor_1d(f, TRI_F32, 6)),
                           cc_recv_from((rank + s - 1) % s, tri_tensor_1d(g, TRI_F32, 6))};
        rc = tri_comm_p2p(c, ring, 2);
        p2p_bytes += 24, p2p_calls++;
        tri_p2p one = rank == 1 ? cc_send_to(0, tri_tensor_1d(k2, TRI_I32, 2))
                                : cc_recv_from(1, tri_tensor_1d(k2, TRI_I32, 2));
        if (!rc && rank <= 1) {
            rc = tri_comm_p2p(c, &one, 1);
            p2p_bytes += rank == 1 ? 8 : 0, p2p_calls++;
        }
    }
    tri_comm *sub = NULL;
    if (!rc) rc = tri_comm_split(c, 0, rank, &sub);                                        /* nothing */
    tri_comm_destroy(sub);
    if (!rc) {
        const uint64_t many = s > 1; /* a group of one rank sends nothing and counts nothing */
        const uint64_t want_bytes[TRI_COMM_KINDS] = {
            [TRI_COMM_ALL_REDUCE] = 52 * many, [TRI_COMM_REDUCE_SCATTER] = 12 * (uint64_t)s * many,
            [TRI_COMM_ALL_GATHER] = 20 * (uint64_t)s * many, [TRI_COMM_BROADCAST] = 28 * many,
            [TRI_COMM_P2P] = p2p_bytes};
        const uint64_t want_calls[TRI_COMM_KINDS] = {
            [TRI_COMM_ALL_REDUCE] = 2 * many, [TRI_COMM_REDUCE_SCATTER] = many, [TRI_COMM_ALL_GATHER] = many,
            [TRI_COMM_BROADCAST] = many, [TRI_COMM_P2P] = p2p_calls};
        for (int kind = 0; kind < TRI_COMM_KINDS; kind++) {
            tri_comm_kind kd = (tri_comm_kind)kind;
            if (tri_comm_bytes(c, kd) != want_bytes[kind] || c->calls[kind] != want_calls[kind])
                cc_fail(&v, "%s: %llu bytes in %llu calls, want %llu in %llu", tri_comm_kind_name(kd),
                        (unsigned long long)tri_comm_bytes(c, kd), (unsigned long long)c->calls[kind],
                        (unsigned long long)want_bytes[kind], (unsigned long long)want_calls[kind]);
        }
        tri_comm_reset_counters(c);
        cc_snapshot zero = {{0}, {0}};
        cc_expect_counted(&v, c, &zero, TRI_COMM_KINDS, 0, 0, "after tri_comm_reset_counters");
    }
    static const char *names[TRI_COMM_KINDS + 1] = {"all_reduce", "reduce_scatter", "all_gather",
                                                    "broadcast", "p2p", "all_to_all", "?"};
    for (int kind = 0; kind <= TRI_COMM_KINDS; kind++)
        if (strcmp(tri_comm_kind_name((tri_comm_kind)kind), names[kind]) != 0)
            cc_fail(&v, "kind %d is named '%s', want '%s'", kind, tri_comm_kind_name((tri_comm_kind)kind),
                    names[kind]);
    return cc_verdict_end(&v, rc);
}

/* ---- wrapper argument checks ---- */

/* rc is TRI_EINVAL with a message naming `op`. */
static void einval(cc_verdict *v, int rc, const char *op, const char *call)
{
    char what[128];
    snprintf(what, sizeof what, "%s %s", op, call);
    cc_expect_status(v, rc, TRI_EINVAL, op, what);
}

int cc_arg_checks(tri_comm *c)
{
    cc_verdict v = cc_verdict_start("argument checks", c);
    int s = c->size, rank = c->rank;
    float f[2 * 8 + 2] = {0};
    int32_t k[2 * 8] = {0};
    if (s > 8)
        return TRI_OK; /* the buffers above are sized for groups of up to 8 */
    tri_tensor f2 = tri_tensor_1d(f, TRI_F32, 2), f2s = tri_tensor_1d(f, TRI_F32, 2 * s);
    tri_tensor f2s1 = tri_tensor_1d(f, TRI_F32, 2 * s + 1), k2 = tri_tensor_1d(k, TRI_I32, 2);
    tri_tensor k2s = tri_tensor_1d(k, TRI_I32, 2 * s);
    /* a dtype value outside tri_dtype (a corrupt or uninitialised tensor) */
    tri_tensor u1 = tri_tensor_1d(f, (tri_dtype)7, 1), us = tri_tensor_1d(f, (tri_dtype)7, s);
    tri_p2p bad_peers[3] = {cc_send_to(-1, f2), cc_recv_from(s, f2), cc_send_to(rank, f2)};
    tri_p2p u_op = cc_send_to((rank + 1) % s, u1);
    cc_snapshot before = cc_snap(c);
    einval(&v, tri_comm_reduce_scatter(c, f2, f2s1), "reduce_scatter", "with in != size * out");
    einval(&v, tri_comm_reduce_scatter(c, k2, f2s), "reduce_scatter", "with an i32 out and an f32 in");
    einval(&v, tri_comm_all_gather(c, f2s1, f2), "all_gather", "with out != size * in");
    einval(&v, tri_comm_all_gather(c, k2s, f2), "all_gather", "with an i32 out and an f32 in");
    einval(&v, tri_comm_broadcast(c, f2, -1), "broadcast", "from root -1");
    einval(&v, tri_comm_broadcast(c, f2, s), "broadcast", "from root = size");
    for (int i = 0; i < 3; i++)
        einval(&v, tri_comm_p2p(c, &bad_peers[i], 1), "p2p", "with a bad peer");
    if (s > 1) {
        tri_p2p bad_tags[2] = {cc_send_to((rank + 1) % s, f2), cc_recv_from((rank + 1) % s, f2)};
        bad_tags[0].tag = -1;
        bad_tags[1].tag = 1024;
        for (int i = 0; i < 2; i++)
            einval(&v, tri_comm_p2p(c, &bad_tags[i], 1), "p2p", "with a tag outside [0, 1023]");
    }
    einval(&v, tri_comm_all_reduce(c, u1, TRI_REDUCE_SUM), "all_reduce", "of dtype 7");
    einval(&v, tri_comm_reduce_scatter(c, u1, us), "reduce_scatter", "of dtype 7");
    einval(&v, tri_comm_all_gather(c, us, u1), "all_gather", "of dtype 7");
    einval(&v, tri_comm_broadcast(c, u1, 0), "broadcast", "of dtype 7");
    if (s > 1)
        einval(&v, tri_comm_p2p(c, &u_op, 1), "p2p", "of dtype 7");
    einval(&v, tri_comm_all_reduce(c, f2, (tri_reduce_op)7), "all_reduce", "with reduce op 7");
    einval(&v, tri_comm_p2p(c, bad_peers, -1), "p2p", "batch of -1 ops");
    cc_expect_counted(&v, c, &before, TRI_COMM_KINDS, 0, 0, "rejected calls");
    return cc_verdict_end(&v, TRI_OK);
}

const cc_check cc_checks[] = {
    {"all_reduce", cc_all_reduce},
    {"reduce_scatter", cc_reduce_scatter},
    {"all_gather", cc_all_gather},
    {"broadcast", cc_broadcast},
    {"p2p_ring", cc_p2p_ring},
    {"p2p_fifo", cc_p2p_fifo},
    {"p2p_tags", cc_p2p_tags},
    {"p2p_pipeline", cc_p2p_pipeline},
    {"p2p_mismatch", cc_p2p_mismatch},
    {"p2p_nonblocking", cc_p2p_nonblocking},
    {"split", cc_split},
    {"barrier", cc_barrier},
    {"counters", cc_counters},
    {"arg_checks", cc_arg_checks},
    {"nonblocking", cc_nonblocking},
    {"bf16_all_reduce", cc_bf16_all_reduce},
    {"bf16_reduce_scatter", cc_bf16_reduce_scatter},
    {"bf16_all_gather", cc_bf16_all_gather},
    {"bf16_broadcast", cc_bf16_broadcast},
    {"bf16_p2p", cc_bf16_p2p},
    {"bf16_nonblocking", cc_bf16_nonblocking},
    {"all_to_all_v", cc_all_to_all_v},
    {"all_to_all_v_groups", cc_all_to_all_v_groups},
    {"all_to_all_v_args", cc_all_to_all_v_args},
};
const int cc_n_checks = (int)(sizeof cc_checks / sizeof cc_checks[0]);
