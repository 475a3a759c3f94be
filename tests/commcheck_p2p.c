/* tests/commcheck_p2p.c - the comm contract checks of batched point-to-point (see commcheck.h). */
#include "tests/commcheck.h"

#include <stdio.h>

#include "tests/commcheck_util.h"

static uint64_t sent_bytes(const tri_p2p *ops, int n)
{
    uint64_t b = 0;
    for (int i = 0; i < n; i++)
        if (ops[i].send)
            b += tri_tensor_bytes(ops[i].t);
    return b;
}

/* Runs one batch and checks it was counted as one p2p call of the bytes it sends. */
static int batch(cc_verdict *v, tri_comm *c, const tri_p2p *ops, int n, const char *what)
{
    cc_snapshot before = cc_snap(c);
    int rc = tri_comm_p2p(c, ops, n);
    if (!rc)
        cc_expect_counted(v, c, &before, TRI_COMM_P2P, 1, sent_bytes(ops, n), what);
    return rc;
}

int cc_p2p_ring(tri_comm *c)
{
    cc_verdict v = cc_verdict_start("p2p ring", c);
    int rc = TRI_OK;
    if (c->size == 1)
        return TRI_OK;
    int next = (c->rank + 1) % c->size, prev = (c->rank + c->size - 1) % c->size;
    cc_buf sb = cc_buf_make(TRI_F32, 1, 5), rb = cc_buf_make(TRI_F32, 1, 5);
    for (int round = 0; round < 3 && !rc; round++) {
        int seed = 400 + round;
        cc_fill(sb.t, seed, c->rank, 0);
        cc_fill_const(rb.t, CC_JUNK);
        tri_p2p ops[2] = {cc_send_to(next, sb.t), cc_recv_from(prev, rb.t)};
        if (c->rank % 2) { /* posting order within a batch must not matter */
            ops[0] = cc_recv_from(prev, rb.t);
            ops[1] = cc_send_to(next, sb.t);
        }
        rc = batch(&v, c, ops, 2, "p2p ring");
        if (!rc) {
            cc_expect_from(&v, rb.t, seed, prev, 0, "p2p ring: received from the previous rank");
            cc_expect_guards(&v, &rb, "p2p ring");
            cc_expect_from(&v, sb.t, seed, c->rank, 0, "p2p ring: send buffer changed");
        }
    }
    cc_buf_free(&sb);
    cc_buf_free(&rb);
    return cc_verdict_end(&v, rc);
}

int cc_p2p_fifo(tri_comm *c)
{
    /* Rank 2k sends four messages to 2k+1 (two of equal size, so only their order tells them apart)
     * and receives two replies, interleaved in one batch on both sides. */
    enum { NM = 4, NR = 2 };
    static const int64_t msize[NM] = {2, 2, 3, 1}, rsize[NR] = {1, 3};
    cc_verdict v = cc_verdict_start("p2p fifo", c);
    int partner = c->rank ^ 1;
    if (partner >= c->size)
        return TRI_OK;
    bool even = c->rank % 2 == 0;
    cc_buf m[NM], r[NR];
    for (int k = 0; k < NM; k++) {
        m[k] = cc_buf_make(TRI_I32, 1, msize[k]);
        if (even)
            cc_fill(m[k].t, 500 + k, c->rank, 0);
        else
            cc_fill_const(m[k].t, CC_JUNK);
    }
    for (int k = 0; k < NR; k++) {
        r[k] = cc_buf_make(TRI_F32, 1, rsize[k]);
        if (even)
            cc_fill_const(r[k].t, CC_JUNK);
        else
            cc_fill(r[k].t, 510 + k, c->rank, 0);
    }
    tri_p2p ops[NM + NR];
    if (even) {
        ops[0] = cc_send_to(partner, m[0].t);
        ops[1] = cc_send_to(partner, m[1].t);
        ops[2] = cc_recv_from(partner, r[0].t);
        ops[3] = cc_send_to(partner, m[2].t);
        ops[4] = cc_recv_from(partner, r[1].t);
        ops[5] = cc_send_to(partner, m[3].t);
    } else {
        ops[0] = cc_recv_from(partner, m[0].t);
        ops[1] = cc_send_to(partner, r[0].t);
        ops[2] = cc_recv_from(partner, m[1].t);
        ops[3] = cc_recv_from(partner, m[2].t);
        ops[4] = cc_send_to(partner, r[1].t);
        ops[5] = cc_recv_from(partner, m[3].t);
    }
    int rc = batch(&v, c, ops, NM + NR, "p2p fifo");
    for (int k = 0; k < NM && !rc; k++) {
        char what[64];
        snprintf(what, sizeof what, "p2p fifo: message %d", k);
        cc_expect_from(&v, m[k].t, 500 + k, even ? c->rank : partner, 0, what);
        cc_expect_guards(&v, &m[k], what);
    }
    for (int k = 0; k < NR && !rc; k++) {
        char what[64];
        snprintf(what, sizeof what, "p2p fifo: reply %d", k);
        cc_expect_from(&v, r[k].t, 510 + k, even ? partner : c->rank, 0, what);
        cc_expect_guards(&v, &r[k], what);
    }
    for (int k = 0; k < NM; k++)
        cc_buf_free(&m[k]);
    for (int k = 0; k < NR; k++)
        cc_buf_free(&r[k]);
    return cc_verdict_end(&v, rc);
}

/* `from` sends messages 0..n-1 (2 ints each, tags[k]) to `to` in one batch; `to` posts its receives
 * in the order `order` (message indices) in one batch: each must get the oldest message with its
 * tag. Ranks other than the two do nothing. */
static int tag_case(cc_verdict *v, tri_comm *c, int from, int to, const int *tags, const int *order, int n,
                    int seed, const char *what)
{
    enum { MAXN = 4 };
    if ((c->rank != from && c->rank != to) || n > MAXN)
        return TRI_OK;
    cc_buf m[MAXN];
    tri_p2p ops[MAXN] = {{0}};
    for (int k = 0; k < n; k++) {
        m[k] = cc_buf_make(TRI_I32, 1, 2);
        if (c->rank == from)
            cc_fill(m[k].t, seed + k, from, 0);
        else
            cc_fill_const(m[k].t, CC_JUNK);
    }
    for (int k = 0; k < n; k++) {
        int msg = c->rank == from ? k : order[k];
        ops[k] = c->rank == from ? cc_send_to(to, m[msg].t) : cc_recv_from(from, m[msg].t);
        ops[k].tag = tags[msg];
    }
    int rc = batch(v, c, ops, n, what);
    for (int k = 0; k < n && !rc && c->rank == to; k++) {
        char which[160];
        snprintf(which, sizeof which, "%s: message %d (tag %d)", what, k, tags[k]);
        cc_expect_from(v, m[k].t, seed + k, from, 0, which);
    }
    for (int k = 0; k < n; k++)
        cc_buf_free(&m[k]);
    return rc;
}

int cc_p2p_tags(tri_comm *c)
{
    cc_verdict v = cc_verdict_start("p2p tags", c);
    if (c->size == 1)
        return TRI_OK;
    /* rank 0 -> last: tags 7, 0, 7 received as tag 0, 7, 7: the tag-0 message overtakes; the two
     * tag-7 messages keep their order */
    const int tags[3] = {7, 0, 7}, order[3] = {1, 0, 2};
    int rc = tag_case(&v, c, 0, c->size - 1, tags, order, 3, 900, "p2p tags 7, 0, 7");
    /* last -> rank 0: the extreme tags, received in reverse */
    const int bounds[2] = {0, 1023}, reverse[2] = {1, 0};
    if (!rc)
        rc = tag_case(&v, c, c->size - 1, 0, bounds, reverse, 2, 910, "p2p tags 0 and 1023");
    if (!rc)
        rc = tri_comm_barrier(c);
    return cc_verdict_end(&v, rc);
}

int cc_p2p_pipeline(tri_comm *c)
{
    /* Stage s sends its activation (4 floats) to s+1 and its input gradient (3 floats) to s-1, and
     * receives both, in one batch: send-forward/recv-backward and send-backward/recv-forward
     * together, with even and odd stages posting in opposite orders. */
    cc_verdict v = cc_verdict_start("p2p pipeline", c);
    if (c->size == 1)
        return TRI_OK;
    int rank = c->rank;
    bool has_next = rank + 1 < c->size, has_prev = rank > 0;
    cc_buf act_out = cc_buf_make(TRI_F32, 1, 4), act_in = cc_buf_make(TRI_F32, 1, 4);
    cc_buf grad_out = cc_buf_make(TRI_F32, 1, 3), grad_in = cc_buf_make(TRI_F32, 1, 3);
    int rc = TRI_OK;
    for (int mb = 0; mb < 3 && !rc; mb++) {
        cc_fill(act_out.t, 600 + mb, rank, 0);
        cc_fill(grad_out.t, 700 + mb, rank, 0);
        cc_fill_const(act_in.t, CC_JUNK);
        cc_fill_const(grad_in.t, CC_JUNK);
        tri_p2p fwd[2] = {cc_send_to(rank + 1, act_out.t), cc_recv_from(rank + 1, grad_in.t)};
        tri_p2p bwd[2] = {cc_recv_from(rank - 1, act_in.t), cc_send_to(rank - 1, grad_out.t)};
        tri_p2p ops[4];
        int n = 0;
        for (int half = 0; half < 2; half++) {
            bool forward_half = (half == 0) == (rank % 2 == 0);
            if (forward_half && has_next) {
                ops[n++] = fwd[0];
                ops[n++] = fwd[1];
            } else if (!forward_half && has_prev) {
                ops[n++] = bwd[0];
                ops[n++] = bwd[1];
            }
        }
        rc = batch(&v, c, ops, n, "p2p pipeline");
        if (!rc && has_next)
            cc_expect_from(&v, grad_in.t, 700 + mb, rank + 1, 0, "p2p pipeline: gradient from stage + 1");
        if (!rc && has_prev)
            cc_expect_from(&v, act_in.t, 600 + mb, rank - 1, 0, "p2p pipeline: activation from stage - 1");
    }
    cc_expect_guards(&v, &act_in, "p2p pipeline");
    cc_expect_guards(&v, &grad_in, "p2p pipeline");
    cc_buf_free(&act_out);
    cc_buf_free(&act_in);
    cc_buf_free(&grad_out);
    cc_buf_free(&grad_in);
    return cc_verdict_end(&v, rc);
}

/* Rank 0 sends `sent` floats to rank 1, which posts a receive of `expected`. */
static void mismatch_case(cc_verdict *v, tri_comm *c, int64_t sent, int64_t expected, const char *what)
{
    if (c->rank > 1)
        return;
    cc_buf b = cc_buf_make(TRI_F32, 1, c->rank == 0 ? sent : expected);
    cc_fill(b.t, 800, c->rank, 0);
    tri_p2p op = c->rank == 0 ? cc_send_to(1, b.t) : cc_recv_from(0, b.t);
    int rc = tri_comm_p2p(c, &op, 1);
    if (c->rank == 0)
        cc_expect_status(v, rc, TRI_OK, "", what);
    else
        cc_expect_status(v, rc, TRI_ECOMM, "p2p: rank 0 sent", what);
    cc_expect_guards(v, &b, what);
    cc_buf_free(&b);
}

int cc_p2p_mismatch(tri_comm *c)
{
    cc_verdict v = cc_verdict_start("p2p mismatch", c);
    if (c->size == 1)
        return TRI_OK;
    mismatch_case(&v, c, 4, 8, "p2p: receive larger than the message");
    mismatch_case(&v, c, 8, 4, "p2p: receive smaller than the message");
    /* the pair still talks: a matching reply from rank 1 to rank 0 */
    int rc = TRI_OK;
    if (c->rank <= 1) {
        cc_buf b = cc_buf_make(TRI_I32, 1, 3);
        cc_fill(b.t, 801, c->rank, 0);
        tri_p2p op = c->rank == 1 ? cc_send_to(0, b.t) : cc_recv_from(1, b.t);
        rc = tri_comm_p2p(c, &op, 1);
        if (!rc && c->rank == 0)
            cc_expect_from(&v, b.t, 801, 1, 0, "p2p after a mismatch");
        cc_buf_free(&b);
    }
    if (!rc)
        rc = tri_comm_barrier(c);
    return cc_verdict_end(&v, rc);
}

int cc_p2p_nonblocking(tri_comm *c)
{
    /* Context parallelism's ring (layers/cp_attention.c): each round passes buffer round % 2 to the
     * next rank and receives the other from the previous one, left in flight while the rank checks
     * the block in hand; beside it a reverse ring (tag 2) is in flight too, with a blocking batch
     * among the started ones. The reverse ring completes by polling tri_comm_test, the forward one
     * by tri_comm_wait. */
    enum { N = 41, ROUNDS = 4 };
    cc_verdict v = cc_verdict_start("p2p nonblocking", c);
    int rc = TRI_OK;
    int S = c->size, next = (c->rank + 1) % S, prev = (c->rank + S - 1) % S;
    cc_buf buf[2] = {cc_buf_make(TRI_F32, 1, N), cc_buf_make(TRI_F32, 1, N)};
    cc_buf rs = cc_buf_make(TRI_I32, 1, 3), rr = cc_buf_make(TRI_I32, 1, 3);
    cc_buf bs = cc_buf_make(TRI_I32, 1, 5), br = cc_buf_make(TRI_I32, 1, 5);
    cc_fill(buf[0].t, 600, c->rank, 0); /* round 0 holds the own block */
    for (int round = 0; round < ROUNDS && !rc && S > 1; round++) {
        tri_tensor cur = buf[round % 2].t, nxt = buf[(round + 1) % 2].t;
        cc_fill_const(nxt, CC_JUNK);
        cc_fill(rs.t, 610 + round, c->rank, 0);
        cc_fill_const(rr.t, CC_JUNK);
        tri_p2p ring[2] = {cc_send_to(next, cur), cc_recv_from(prev, nxt)};
        tri_p2p back[2] = {cc_send_to(prev, rs.t), cc_recv_from(next, rr.t)};
        back[0].tag = back[1].tag = 2;
        tri_comm_request req[2];
        cc_snapshot before = cc_snap(c);
        rc = tri_comm_p2p_start(c, ring, 2, &req[0]);
        if (!rc) rc = tri_comm_p2p_start(c, back, 2, &req[1]);
        if (!rc) /* counted at the start: two calls, the bytes each sends */
            cc_expect_counted(&v, c, &before, TRI_COMM_P2P, 2, (uint64_t)(N * 4 + 3 * 4), "p2p_start counted");
        ring[0] = back[0] = cc_recv_from(next, rr.t); /* the ops themselves may be reused at once */
        /* a blocking batch among the started ones (i32, tag 0 forward: on 2 ranks it follows the ring's
           message to the same peer with the same tag, so only the posting order matches them) */
        cc_fill(bs.t, 620 + round, c->rank, 0);
        cc_fill_const(br.t, CC_JUNK);
        tri_p2p blk[2] = {cc_send_to(next, bs.t), cc_recv_from(prev, br.t)};
        if (!rc) rc = tri_comm_p2p(c, blk, 2);
        /* "compute" on the block in hand while the next travels: it must hold its sender's values */
        int from = (c->rank - round + S * ROUNDS) % S;
        if (!rc)
            cc_expect_from(&v, cur, 600, from, 0, "p2p nonblocking: the block in hand");
        bool done = false;
        for (long k = 0; !rc && !done; k++) {
            rc = tri_comm_test(&req[1], &done);
            if (k > 100000000L) {
                cc_fail(&v, "rank %d: tri_comm_test never reported the p2p batch done", c->rank);
                break;
            }
        }
        if (!rc && tri_comm_pending(&req[1]))
            cc_fail(&v, "rank %d: a p2p batch tested done is still pending", c->rank);
        int rw = tri_comm_wait(&req[0]);
        rc = rc ? rc : rw;
        if (!rc && tri_comm_pending(&req[0]))
            cc_fail(&v, "rank %d: a p2p batch pending after its wait", c->rank);
        if (!rc) rc = tri_comm_wait(&req[0]); /* cleared: nothing to do */
        if (!rc) {
            cc_expect_from(&v, nxt, 600, (from + S - 1) % S, 0, "p2p nonblocking: the block received");
            cc_expect_guards(&v, &buf[(round + 1) % 2], "p2p nonblocking");
            cc_expect_from(&v, rr.t, 610 + round, next, 0, "p2p nonblocking: the reverse ring (tested)");
            cc_expect_from(&v, br.t, 620 + round, prev, 0, "p2p nonblocking: the blocking batch among them");
            cc_expect_from(&v, cur, 600, from, 0, "p2p nonblocking: send buffer changed");
        }
    }
    /* a refused start (peer = self) leaves a cleared request, nothing counted */
    tri_comm_request bad;
    tri_p2p self = cc_send_to(c->rank, rs.t);
    cc_snapshot before = cc_snap(c);
    cc_expect_status(&v, tri_comm_p2p_start(c, &self, 1, &bad), TRI_EINVAL, "p2p", "p2p_start to itself");
    cc_expect_counted(&v, c, &before, TRI_COMM_KINDS, 0, 0, "refused p2p_start");
    if (tri_comm_pending(&bad))
        cc_fail(&v, "rank %d: a refused p2p start left a pending request", c->rank);
    cc_expect_status(&v, tri_comm_p2p_start(c, NULL, 0, &bad), TRI_OK, "", "an empty p2p_start");
    if (tri_comm_pending(&bad))
        cc_fail(&v, "rank %d: an empty p2p start left a pending request", c->rank);
    cc_buf_free(&buf[0]), cc_buf_free(&buf[1]), cc_buf_free(&rs), cc_buf_free(&rr), cc_buf_free(&bs);
    cc_buf_free(&br);
    return cc_verdict_end(&v, rc);
}
