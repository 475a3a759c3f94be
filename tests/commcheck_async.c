/* tests/commcheck_async.c - the non-blocking collectives' contract (engine/comm/comm.h: tri_comm_*_start,
 * tri_comm_wait, tri_comm_test), checked on every comm implementation.
 *
 * Four collectives are left in flight at once on one comm - a reduce-scatter into a separate
 * buffer, a reduce-scatter in place (out = this rank's slice of in, as ZeRO-1 reduces), an in-place
 * all-gather (as ZeRO gathers parameters) and an all-reduce - with a blocking all-reduce started
 * among them (comm order is start order), and then completed in another order: one by polling
 * tri_comm_test, the others by tri_comm_wait in reverse. Each result is compared with the exact
 * sums; bytes are counted at the start, as for the blocking calls; a completed request is cleared,
 * so waiting on it again does nothing. */
#include <stdio.h>
#include <stdlib.h>

#include "tests/commcheck.h"
#include "tests/commcheck_util.h"

/* want[i] = sum over ranks of cc_val(seed, r, offset + i) */
static int32_t *sums(tri_comm *c, int seed, int64_t offset, int64_t n)
{
    int32_t *want = cc_ints(n);
    for (int64_t i = 0; i < n; i++) {
        want[i] = 0;
        for (int r = 0; r < c->size; r++)
            want[i] += cc_val(seed, r, offset + i);
    }
    return want;
}

int cc_nonblocking(tri_comm *c)
{
    cc_verdict v = cc_verdict_start("nonblocking", c);
    const int64_t n = 37;
    const int S = c->size;
    cc_buf rs_in = cc_buf_make(TRI_F32, S, n), rs_out = cc_buf_make(TRI_F32, 1, n);
    cc_buf rsi = cc_buf_make(TRI_I32, S, n), ag = cc_buf_make(TRI_F32, S, n);
    cc_buf ar = cc_buf_make(TRI_F32, 3, n), blocking = cc_buf_make(TRI_I32, 1, n);
    cc_fill(rs_in.t, 1, c->rank, 0);
    cc_fill_const(rs_out.t, CC_JUNK);
    cc_fill(rsi.t, 2, c->rank, 0);
    cc_fill_const(ag.t, CC_JUNK);
    tri_tensor mine = tri_tensor_range(ag.t, c->rank * n, n), rsi_mine = tri_tensor_range(rsi.t, c->rank * n, n);
    cc_fill(mine, 3, c->rank, 0);
    cc_fill(ar.t, 4, c->rank, 0);
    cc_fill(blocking.t, 5, c->rank, 0);

    tri_comm_request req[4];
    cc_snapshot before = cc_snap(c);
    int rc = tri_comm_reduce_scatter_start(c, rs_out.t, rs_in.t, &req[0]);
    if (!rc) rc = tri_comm_reduce_scatter_start(c, rsi_mine, rsi.t, &req[1]);
    if (!rc) rc = tri_comm_all_reduce(c, blocking.t, TRI_REDUCE_SUM);
    if (!rc) rc = tri_comm_all_gather_start(c, ag.t, mine, &req[2]);
    if (!rc) rc = tri_comm_all_reduce_start(c, ar.t, TRI_REDUCE_SUM, &req[3]);
    if (!rc) {
        /* counted at the start: 2 reduce-scatters, 2 all-reduces, 1 all-gather */
        cc_snapshot after = cc_snap(c);
        uint64_t want_rs = (uint64_t)(2 * S * n) * 4, want_ag = (uint64_t)(S * n) * 4;
        uint64_t want_ar = (uint64_t)(4 * n) * 4;
        bool one = S == 1;
        if (after.bytes[TRI_COMM_REDUCE_SCATTER] - before.bytes[TRI_COMM_REDUCE_SCATTER] != (one ? 0 : want_rs) ||
            after.bytes[TRI_COMM_ALL_GATHER] - before.bytes[TRI_COMM_ALL_GATHER] != (one ? 0 : want_ag) ||
            after.bytes[TRI_COMM_ALL_REDUCE] - before.bytes[TRI_COMM_ALL_REDUCE] != (one ? 0 : want_ar))
            cc_fail(&v, "rank %d: bytes counted at the start: rs %llu ag %llu ar %llu, want %llu %llu %llu", c->rank,
                    (unsigned long long)(after.bytes[TRI_COMM_REDUCE_SCATTER] - before.bytes[TRI_COMM_REDUCE_SCATTER]),
                    (unsigned long long)(after.bytes[TRI_COMM_ALL_GATHER] - before.bytes[TRI_COMM_ALL_GATHER]),
                    (unsigned long long)(after.bytes[TRI_COMM_ALL_REDUCE] - before.bytes[TRI_COMM_ALL_REDUCE]),
                    (unsigned long long)(one ? 0 : want_rs), (unsigned long long)(one ? 0 : want_ag),
                    (unsigned long long)(one ? 0 : want_ar));
    }
    /* the all-gather by polling, then the rest waited for in reverse order */
    bool done = false;
    for (long k = 0; !rc && !done; k++) {
        rc = tri_comm_test(&req[2], &done);
        if (k > 100000000L) {
            cc_fail(&v, "rank %d: tri_comm_test never reported the all-gather done", c->rank);
            break;
        }
    }
    if (!rc && tri_comm_pending(&req[2]))
        cc_fail(&v, "rank %d: a request tested done is still pending", c->rank);
    for (int k = 3; k >= 0 && !rc; k--)
        rc = tri_comm_wait(&req[k]);
    for (int k = 0; k < 4 && !rc; k++) {
        if (tri_comm_pending(&req[k]))
            cc_fail(&v, "rank %d: request %d pending after its wait", c->rank, k);
        rc = tri_comm_wait(&req[k]); /* cleared: nothing to do */
    }
    if (!rc) {
        int32_t *w0 = sums(c, 1, c->rank * n, n), *w1 = sums(c, 2, c->rank * n, n);
        int32_t *w3 = sums(c, 4, 0, 3 * n), *w4 = sums(c, 5, 0, n), *w2 = cc_ints(S * n);
        for (int r = 0; r < S; r++)
            for (int64_t i = 0; i < n; i++)
                w2[r * n + i] = cc_val(3, r, i);
        cc_expect_buf(&v, &rs_out, w0, "reduce_scatter_start into another buffer");
        cc_expect_from(&v, rs_in.t, 1, c->rank, 0, "reduce_scatter_start changed its input");
        cc_expect_values(&v, rsi_mine, w1, "reduce_scatter_start in place (i32)");
        cc_expect_guards(&v, &rsi, "reduce_scatter_start in place (i32)");
        cc_expect_buf(&v, &ag, w2, "all_gather_start in place");
        cc_expect_buf(&v, &ar, w3, "all_reduce_start");
        cc_expect_buf(&v, &blocking, w4, "blocking all_reduce among started ones");
        free(w0), free(w1), free(w2), free(w3), free(w4);
    }
    /* a failed start leaves a cleared request */
    tri_comm_request bad;
    cc_expect_status(&v, tri_comm_reduce_scatter_start(c, rs_out.t, rs_out.t, &bad), S == 1 ? TRI_OK : TRI_EINVAL,
                     "reduce_scatter", "reduce_scatter_start with in the size of out");
    if (tri_comm_pending(&bad))
        cc_fail(&v, "rank %d: a refused start left a pending request", c->rank);
    cc_buf_free(&rs_in), cc_buf_free(&rs_out), cc_buf_free(&rsi), cc_buf_free(&ag), cc_buf_free(&ar);
    cc_buf_free(&blocking);
    return cc_verdict_end(&v, rc);
}
