/* tests/commcheck_a2a.c - the comm contract of all-to-all with variable counts (engine/comm/comm.h,
 * tri_comm_all_to_all_v), written once and run on every comm: thread ranks (tests/test_comm.c), the
 * staged comm (tests/test_comm_staged.c) and Open MPI ranks (tests/mpi/comm_mpi.c).
 *
 * The count matrix (how many elements rank src sends to rank dst) comes from a hash of the case's
 * seed, so every rank knows all of it: about a quarter of the blocks are empty, one rank sends
 * nothing and (on three ranks or more) another receives nothing. Blocks sit in the send buffer in
 * reverse rank order with one-element gaps and in the receive buffer in rank order with two-element
 * gaps, so a comm that packed them, or read or wrote with the wrong displacement, is caught. Element
 * i of the block from src to dst holds a_val(seed, src, dst, i) - any 16 bits for bf16 (NaN patterns
 * included: moved as bits), integers exact in f32, full-width i32 and i64 - so every received element
 * is checked against its source rank and index, every element no block covers must keep its junk
 * bytes (guards around the buffer included), the input must be unchanged, and the call counts exactly
 * the bytes sent to the other ranks. The receive counts come from tri_comm_all_to_all_counts, checked
 * against the matrix first. */
#include "tests/commcheck.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tests/commcheck_util.h"

#define A_PAD 8        /* junk elements before and after each buffer's tensor */
#define A_JUNK 0xA5    /* the junk byte */

static uint32_t mix(uint32_t h)
{
    h ^= h >> 16;
    h *= 0x7feb352du;
    h ^= h >> 15;
    h *= 0x846ca68bu;
    h ^= h >> 16;
    return h;
}

static uint32_t hash4(int a, int b, int c, int64_t d)
{
    return mix((uint32_t)a * 0x9e3779b9u ^ mix((uint32_t)b * 0x85ebca6bu ^ mix((uint32_t)c * 0xc2b2ae35u ^
                                                                             mix((uint32_t)d + 0x165667b1u))));
}

/* Elements rank src sends rank dst (of a group of n) in case `seed`: 0..6, a quarter of them 0; rank
 * seed % n sends nothing and, on 3 ranks or more, rank (seed + 1) % n receives nothing. */
static int64_t a_count(int seed, int n, int src, int dst)
{
    if (src == seed % n || (n >= 3 && dst == (seed + 1) % n))
        return 0;
    uint32_t h = hash4(seed, src, dst, -1);
    return h % 4 == 0 ? 0 : (int64_t)(h >> 8) % 7;
}

/* Writes element i of the block from src to dst into dtype-typed memory p at element k. */
static void a_put(void *p, tri_dtype dtype, int64_t k, int seed, int src, int dst, int64_t i)
{
    uint32_t h = hash4(seed, src, dst, i);
    switch (dtype) {
    case TRI_F32: ((float *)p)[k] = (float)((int32_t)(h % 2000001u) - 1000000); break; /* exact in f32 */
    case TRI_BF16: ((uint16_t *)p)[k] = (uint16_t)h; break;
    case TRI_I32: ((int32_t *)p)[k] = (int32_t)h; break;
    case TRI_I64: ((int64_t *)p)[k] = (int64_t)((uint64_t)h << 32 | hash4(src, dst, seed, i)); break;
    }
}

/* A buffer of numel elements between A_PAD junk elements on each side. */
typedef struct a_buf {
    unsigned char *mem;
    int64_t numel;
    size_t esize;
    tri_tensor t;
} a_buf;

static a_buf a_buf_make(tri_dtype dtype, int64_t numel)
{
    a_buf b = {.numel = numel, .esize = tri_dtype_size(dtype)};
    size_t bytes = (size_t)(numel + 2 * A_PAD) * b.esize;
    b.mem = malloc(bytes);
    if (!b.mem) {
        fprintf(stderr, "commcheck: out of memory\n");
        abort();
    }
    memset(b.mem, A_JUNK, bytes);
    b.t = tri_tensor_1d(b.mem + A_PAD * b.esize, dtype, numel);
    return b;
}

/* Whether element k of b's tensor (A_PAD before it counts as negative k) still holds junk. */
static bool a_junk(const a_buf *b, int64_t k)
{
    const unsigned char *e = b->mem + (size_t)(k + A_PAD) * b->esize;
    for (size_t j = 0; j < b->esize; j++)
        if (e[j] != A_JUNK)
            return false;
    return true;
}

/* One exchange on group c in case `seed`: rank g of c is parent rank parent[g] (the values name the
 * parent ranks, so a sub-group mixing up its members is caught). Fills the verdict; returns the status
 * of a comm call that failed. */
static int a2a_case(cc_verdict *v, tri_comm *c, tri_dtype dtype, int seed, const int *parent)
{
    int n = c->size, me = c->rank;
    char what[160];
    snprintf(what, sizeof what, "all_to_all_v %s seed %d on %d ranks", tri_dtype_name(dtype), seed, n);
    int64_t *sc = calloc((size_t)n * 5, sizeof *sc);
    if (!sc) {
        fprintf(stderr, "commcheck: out of memory\n");
        abort();
    }
    int64_t *sd = sc + n, *rc_ = sc + 2 * n, *rd = sc + 3 * n, *want_rc = sc + 4 * n;
    /* send layout: blocks for dst = n-1 .. 0, one junk element before each */
    int64_t at = 0;
    for (int dst = n - 1; dst >= 0; dst--) {
        sc[dst] = a_count(seed, n, parent[me], parent[dst]);
        sd[dst] = at + 1;
        at += 1 + sc[dst];
    }
    a_buf in = a_buf_make(dtype, at + 1);
    for (int dst = 0; dst < n; dst++)
        for (int64_t i = 0; i < sc[dst]; i++)
            a_put(in.t.data, dtype, sd[dst] + i, seed, parent[me], parent[dst], i);
    unsigned char *in_copy = malloc((size_t)in.numel * in.esize + 1);
    if (!in_copy) {
        fprintf(stderr, "commcheck: out of memory\n");
        abort();
    }
    memcpy(in_copy, in.t.data, (size_t)in.numel * in.esize);
    for (int src = 0; src < n; src++)
        want_rc[src] = a_count(seed, n, parent[src], parent[me]);
    int rc = tri_comm_all_to_all_counts(c, n, sc, rc_);
    for (int src = 0; src < n && !rc; src++)
        if (rc_[src] != want_rc[src]) {
            cc_fail(v, "%s: all_to_all_counts gave rank %d recv_counts[%d] = %lld, want %lld", what, me, src,
                    (long long)rc_[src], (long long)want_rc[src]);
            rc_[src] = want_rc[src]; /* go on with the right counts so the ranks stay in step */
        }
    /* receive layout: blocks from src = 0 .. n-1, two junk elements before each */
    at = 0;
    for (int src = 0; src < n; src++) {
        rd[src] = at + 2;
        at += 2 + rc_[src];
    }
    a_buf out = a_buf_make(dtype, at + 2);
    uint64_t sent = 0;
    for (int dst = 0; dst < n; dst++)
        sent += dst == me ? 0 : (uint64_t)sc[dst] * in.esize;
    cc_snapshot before = cc_snap(c);
    if (!rc) rc = tri_comm_all_to_all_v(c, out.t, in.t, n, sc, sd, rc_, rd);
    if (!rc) {
        cc_expect_counted(v, c, &before, TRI_COMM_ALL_TO_ALL, 1, sent, what);
        if (memcmp(in_copy, in.t.data, (size_t)in.numel * in.esize) != 0)
            cc_fail(v, "%s: rank %d's input changed", what, me);
        a_buf want = a_buf_make(dtype, 1);
        for (int src = 0; src < n; src++) {
            for (int64_t i = 0; i < rc_[src]; i++) {
                a_put(want.t.data, dtype, 0, seed, parent[src], parent[me], i);
                if (memcmp(want.t.data, (char *)out.t.data + (size_t)(rd[src] + i) * out.esize, out.esize) != 0) {
                    cc_fail(v, "%s: rank %d: element %lld of the block from rank %d (out[%lld]) is wrong", what, me,
                            (long long)i, src, (long long)(rd[src] + i));
                    break;
                }
            }
        }
        free(want.mem);
        /* every element outside the blocks, guards included, still junk */
        int64_t k = -A_PAD;
        for (int src = 0; src <= n; src++) {
            int64_t end = src < n ? rd[src] : out.numel + A_PAD;
            for (; k < end; k++)
                if (!a_junk(&out, k)) {
                    cc_fail(v, "%s: rank %d: out[%lld], outside every block, was written", what, me, (long long)k);
                    break;
                }
            if (src < n)
                k = rd[src] + rc_[src];
        }
        for (int64_t g = 0; g < A_PAD; g++)
            if (!a_junk(&in, -1 - g) || !a_junk(&in, in.numel + g))
                cc_fail(v, "%s: rank %d: the input's guards were written", what, me);
    }
    free(in_copy);
    free(in.mem);
    free(out.mem);
    free(sc);
    return rc;
}

static const tri_dtype a_dtypes[] = {TRI_F32, TRI_BF16, TRI_I32, TRI_I64};

int cc_all_to_all_v(tri_comm *c)
{
    cc_verdict v = cc_verdict_start("all_to_all_v", c);
    int *parent = malloc((size_t)c->size * sizeof *parent);
    if (!parent)
        return cc_verdict_end(&v, TRI_ERR(TRI_ENOMEM, "out of memory"));
    for (int r = 0; r < c->size; r++)
        parent[r] = r;
    int rc = TRI_OK;
    for (int d = 0; d < 4 && !rc; d++)
        for (int seed = 1; seed <= 3 && !rc; seed++)
            rc = a2a_case(&v, c, a_dtypes[d], seed + 10 * d, parent);
    free(parent);
    return cc_verdict_end(&v, rc);
}

int cc_all_to_all_v_groups(tri_comm *c)
{
    cc_verdict v = cc_verdict_start("all_to_all_v in sub-groups", c);
    /* colors by rank parity, keys reversed: sub-rank g of color col is the g-th largest such rank */
    int col = c->rank % 2, n = 0;
    int *parent = malloc((size_t)c->size * sizeof *parent);
    if (!parent)
        return cc_verdict_end(&v, TRI_ERR(TRI_ENOMEM, "out of memory"));
    for (int r = c->size - 1; r >= 0; r--)
        if (r % 2 == col)
            parent[n++] = r;
    tri_comm *sub = NULL;
    int rc = tri_comm_split(c, col, c->size - c->rank, &sub);
    if (!rc && (!sub || sub->size != n || parent[sub->rank] != c->rank))
        rc = TRI_ERR(TRI_EINTERNAL, "split by parity: rank %d got a group of %d (want %d)", c->rank,
                     sub ? sub->size : -1, n);
    cc_snapshot before = cc_snap(c);
    for (int d = 0; d < 4 && !rc; d++)
        rc = a2a_case(&v, sub, a_dtypes[d], 40 + d, parent);
    if (!rc) /* each group counts its own traffic: the parent comm counted none of the sub-group's */
        cc_expect_counted(&v, c, &before, TRI_COMM_KINDS, 0, 0, "the parent comm during the sub-groups' calls");
    tri_comm_destroy(sub);
    free(parent);
    return cc_verdict_end(&v, rc);
}

/* rc is TRI_EINVAL and the message names `needle`. */
static void refused(cc_verdict *v, int rc, const char *needle, const char *what)
{
    cc_expect_status(v, rc, TRI_EINVAL, needle, what);
}

int cc_all_to_all_v_args(tri_comm *c)
{
    cc_verdict v = cc_verdict_start("all_to_all_v argument checks", c);
    int n = c->size, me = c->rank;
    if (n > 8)
        return cc_verdict_end(&v, TRI_OK); /* the arrays below hold groups of up to 8 */
    float fin[16] = {0}, fout[16] = {0};
    uint16_t hout[16] = {0};
    int64_t sc[8], sd[8], rcn[8], rd[8];
    /* a valid layout: one element to and from every rank, packed */
    for (int r = 0; r < n; r++)
        sc[r] = rcn[r] = 1, sd[r] = rd[r] = r;
    tri_tensor in = tri_tensor_1d(fin, TRI_F32, n), out = tri_tensor_1d(fout, TRI_F32, n);
    cc_snapshot before = cc_snap(c);
    refused(&v, tri_comm_all_to_all_v(c, out, in, n + 1, sc, sd, rcn, rd), "group of", "n = size + 1");
    refused(&v, tri_comm_all_to_all_v(c, tri_tensor_1d(hout, TRI_BF16, n), in, n, sc, sd, rcn, rd), "dtype",
            "bf16 out, f32 in");
    refused(&v, tri_comm_all_to_all_v(c, out, tri_tensor_1d(fin, (tri_dtype)7, n), n, sc, sd, rcn, rd), "dtype",
            "dtype 7");
    refused(&v, tri_comm_all_to_all_v(c, out, in, n, NULL, sd, rcn, rd), "NULL", "send_counts NULL");
    int64_t keep;
#define ONE_BAD(arr, idx, val, needle, what)                                              \
    do {                                                                                  \
        keep = arr[idx];                                                                  \
        arr[idx] = val;                                                                   \
        refused(&v, tri_comm_all_to_all_v(c, out, in, n, sc, sd, rcn, rd), needle, what); \
        arr[idx] = keep;                                                                  \
    } while (0)
    ONE_BAD(sc, n - 1, -1, "send_counts[", "a negative send count");
    ONE_BAD(rcn, 0, -3, "recv_counts[0] = -3", "a negative recv count");
    ONE_BAD(sd, 0, -1, "send_displs[0] = -1", "a negative send displacement");
    ONE_BAD(rd, n - 1, -2, "recv_displs[", "a negative recv displacement");
    ONE_BAD(sd, n - 1, n, "past the in buffer", "a send block past in's end");
    ONE_BAD(rd, 0, n, "past the out buffer", "a recv block past out's end");
    ONE_BAD(sd, 0, INT64_MAX, "past the in buffer", "a send displacement of INT64_MAX");
    ONE_BAD(sc, 0, INT64_MAX, "past the in buffer", "a send count of INT64_MAX");
    if (n >= 2)
        ONE_BAD(rd, 1, 0, "overlap", "overlapping recv blocks");
    ONE_BAD(sc, me, 0, "keeps", "send_counts[rank] != recv_counts[rank]");
#undef ONE_BAD
    refused(&v, tri_comm_all_to_all_v(c, in, in, n, sc, sd, rcn, rd), "overlap", "out = in");
    refused(&v, tri_comm_all_to_all_counts(c, n - 1, sc, rcn), "group of", "all_to_all_counts with n = size - 1");
    sc[0] = -5;
    refused(&v, tri_comm_all_to_all_counts(c, n, sc, rcn), "send_counts[0] = -5", "all_to_all_counts, count -5");
    cc_expect_counted(&v, c, &before, TRI_COMM_KINDS, 0, 0, "refused calls");
    /* tri_comm_displs packs blocks in rank order */
    int64_t counts[4] = {3, 0, 2, 5}, displs[4], want[4] = {0, 3, 3, 5};
    int64_t all = tri_comm_displs(4, counts, displs);
    if (all != 10 || memcmp(displs, want, sizeof want) != 0)
        cc_fail(&v, "tri_comm_displs of {3, 0, 2, 5}: total %lld, displs {%lld, %lld, %lld, %lld}; want 10, "
                "{0, 3, 3, 5}", (long long)all, (long long)displs[0], (long long)displs[1], (long long)displs[2],
                (long long)displs[3]);
    return cc_verdict_end(&v, TRI_OK);
}
