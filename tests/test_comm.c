/* tests/test_comm.c - the comm interface and the process grid on thread ranks.
 *
 * Every parallel algorithm in Trident is tested on thread ranks (engine/comm/comm_thread.c), so this comm
 * must keep engine/comm/comm.h's contract exactly; the same contract checks (tests/commcheck*.c) run
 * under real mpiexec in tests/mpi/comm_mpi.c. Here each check runs on groups of 1, 2, 3, 4 and 8
 * ranks, and the grid on 1 to 8 ranks (every (tp, pp) dividing the world). The rest is what only
 * the thread comm promises or needs:
 * - rank-order determinism: sums are bit-identical to a sequential sum in rank order, on values
 *   chosen so that another order gives different bits (checked here, so the test has teeth); bf16
 *   sums are the sequential fp32 sum rounded once, where rounding at every step would differ;
 * - a rank that fails makes tri_run_thread_ranks return its status and message, and wakes the
 *   ranks blocked in collectives (also in groups the failing rank is not part of) within a second;
 * - a group with a short timeout gives TRI_ETIMEOUT when a rank never joins;
 * - ranks making different collective calls (size, dtype, op, root, kind) get TRI_EINVAL naming
 *   both calls, instead of reading past a buffer.
 * Checks inside rank threads never call cr_assert (Criterion's asserts belong to the test's main
 * thread); they return a status with a message, and the test asserts on it. */
#include <criterion/criterion.h>
#include <math.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

#include "engine/comm/comm.h"
#include "engine/comm/grid.h"
#include "engine/core/clock.h"
#include "engine/core/math.h"
#include "engine/core/status.h"
#include "tests/commcheck.h"
#include "tests/testutil.h"

/* In the sanitizer build tests/leakcheck.c fails a test that leaves a leak: threads' comms and groups
 * must all be freed when a run returns. */

/* ---- helpers ---- */

static void sleep_s(double s)
{
    struct timespec ts = {(time_t)s, (long)((s - (double)(time_t)s) * 1e9)};
    nanosleep(&ts, NULL);
}

/* Runs `fn` on thread ranks and asserts every rank returned TRI_OK. */
static void run_ok(int size, tri_rank_fn fn, void *arg, const char *what)
{
    int rc = tri_run_thread_ranks(size, fn, arg);
    cr_assert_eq(rc, TRI_OK, "%s on %d thread ranks: %s: %s", what, size, tri_status_name(rc),
                 tri_error_message());
}

typedef struct check_arg {
    cc_check_fn fn;
} check_arg;

static int run_check(int rank, int size, tri_comm *c, void *arg)
{
    return ((const check_arg *)arg)->fn(c);
}

static const int sizes[] = {1, 2, 3, 4, 8};

static void check_all_sizes(cc_check_fn fn, const char *name)
{
    for (size_t i = 0; i < sizeof sizes / sizeof *sizes; i++) {
        check_arg a = {fn};
        run_ok(sizes[i], run_check, &a, name);
    }
}

/* ---- the shared contract checks ---- */

Test(comm, all_reduce) { check_all_sizes(cc_all_reduce, "all_reduce"); }
Test(comm, reduce_scatter) { check_all_sizes(cc_reduce_scatter, "reduce_scatter"); }
Test(comm, all_gather) { check_all_sizes(cc_all_gather, "all_gather"); }
Test(comm, broadcast) { check_all_sizes(cc_broadcast, "broadcast"); }
Test(comm, p2p_ring) { check_all_sizes(cc_p2p_ring, "p2p ring"); }
Test(comm, p2p_fifo) { check_all_sizes(cc_p2p_fifo, "p2p fifo"); }
Test(comm, p2p_tags) { check_all_sizes(cc_p2p_tags, "p2p tags"); }
Test(comm, p2p_pipeline) { check_all_sizes(cc_p2p_pipeline, "p2p pipeline"); }
Test(comm, p2p_mismatch) { check_all_sizes(cc_p2p_mismatch, "p2p mismatch"); }
Test(comm, p2p_nonblocking) { check_all_sizes(cc_p2p_nonblocking, "p2p non-blocking"); }
Test(comm, split) { check_all_sizes(cc_split, "split"); }
Test(comm, barrier_waits) { check_all_sizes(cc_barrier, "barrier"); }
Test(comm, counters) { check_all_sizes(cc_counters, "counters"); }
Test(comm, arg_checks) { check_all_sizes(cc_arg_checks, "argument checks"); }
Test(comm, nonblocking) { check_all_sizes(cc_nonblocking, "non-blocking collectives"); }
Test(comm, bf16_all_reduce) { check_all_sizes(cc_bf16_all_reduce, "bf16 all_reduce"); }
Test(comm, bf16_reduce_scatter) { check_all_sizes(cc_bf16_reduce_scatter, "bf16 reduce_scatter"); }
Test(comm, bf16_all_gather) { check_all_sizes(cc_bf16_all_gather, "bf16 all_gather"); }
Test(comm, bf16_broadcast) { check_all_sizes(cc_bf16_broadcast, "bf16 broadcast"); }
Test(comm, bf16_p2p) { check_all_sizes(cc_bf16_p2p, "bf16 p2p"); }
Test(comm, bf16_nonblocking) { check_all_sizes(cc_bf16_nonblocking, "bf16 non-blocking collectives"); }

/* all-to-all with variable counts: every group size from 1 to 5 (odd sizes leave the parity split's
 * two groups of different sizes), and 8 */
static void a2a_all_sizes(cc_check_fn fn, const char *name)
{
    for (int size = 1; size <= 8; size += size < 5 ? 1 : 3) {
        check_arg a = {fn};
        run_ok(size, run_check, &a, name);
    }
}

Test(comm, all_to_all_v) { a2a_all_sizes(cc_all_to_all_v, "all_to_all_v"); }
Test(comm, all_to_all_v_groups) { a2a_all_sizes(cc_all_to_all_v_groups, "all_to_all_v in sub-groups"); }
Test(comm, all_to_all_v_args) { a2a_all_sizes(cc_all_to_all_v_args, "all_to_all_v argument checks"); }

static int run_grid_layouts(int rank, int size, tri_comm *c, void *arg)
{
    return cc_grid_layouts(c);
}

/* 8 ranks: (tp, pp) in (1,1) (1,2) (1,4) (1,8) (2,1) (2,2) (2,4) (4,1) (4,2) (8,1); 6 ranks add tp
 * and pp of 3 (a single middle stage at pp = 3). */
Test(comm, grid_every_layout)
{
    static const int worlds[] = {1, 2, 3, 4, 6, 8};
    for (size_t i = 0; i < sizeof worlds / sizeof *worlds; i++)
        run_ok(worlds[i], run_grid_layouts, NULL, "grid layouts");
}

/* The pure coordinate functions are each other's inverse and follow Megatron's order. */
Test(comm, grid_coords)
{
    for (int tp = 1; tp <= 4; tp++)
        for (int dp = 1; dp <= 3; dp++)
            for (int pp = 1; pp <= 3; pp++) {
                int r = 0;
                for (int p = 0; p < pp; p++)
                    for (int d = 0; d < dp; d++)
                        for (int t = 0; t < tp; t++, r++) {
                            int tr, dr, pr;
                            tri_grid_coords(r, tp, dp, &tr, &dr, &pr);
                            cr_assert(tr == t && dr == d && pr == p,
                                      "tp=%d dp=%d: rank %d -> (%d, %d, %d), want (%d, %d, %d)", tp, dp, r,
                                      tr, dr, pr, t, d, p);
                            cr_assert_eq(tri_grid_world_rank(tp, dp, t, d, p), r);
                        }
            }
    int dp = 0;
    cr_assert_eq(tri_grid_check(8, 2, 2, &dp), TRI_OK);
    cr_assert_eq(dp, 2);
    cr_assert_eq(tri_grid_check(8, 3, 1, &dp), TRI_EINVAL);
    cr_assert(strstr(tri_error_message(), "world size 8 is not divisible"), "%s", tri_error_message());
}

/* ---- rank-order determinism ---- */

enum { ORDER_N = 96, ORDER_MAX_RANKS = 8 };

typedef struct order_arg {
    float x[ORDER_MAX_RANKS][ORDER_N]; /* rank r's input */
    float want[ORDER_N];               /* x[0] + x[1] + ... in that order, in f32 */
} order_arg;

/* Inputs of mixed magnitudes (1e-3 to 1e8) and signs: f32 addition is far from associative on them. */
static void order_inputs(order_arg *a, int size)
{
    static const float scale[4] = {1e-3f, 1.0f, 1e4f, 1e8f};
    for (int r = 0; r < size; r++) {
        tu_fill_uniform(a->x[r], ORDER_N, -1.0f, 1.0f, 1000 + (uint64_t)r);
        for (int i = 0; i < ORDER_N; i++)
            a->x[r][i] *= scale[(i + r) % 4];
    }
    for (int i = 0; i < ORDER_N; i++) {
        float acc = a->x[0][i];
        for (int r = 1; r < size; r++)
            acc += a->x[r][i];
        a->want[i] = acc;
    }
}

static int bits_equal(const float *got, const float *want, int n, const char *what, int rank)
{
    for (int i = 0; i < n; i++)
        if (memcmp(&got[i], &want[i], sizeof(float)) != 0)
            return TRI_ERR(TRI_EINTERNAL, "%s: rank %d element %d is %a, sequential rank-order sum %a", what,
                           rank, i, (double)got[i], (double)want[i]);
    return TRI_OK;
}

static int run_order(int rank, int size, tri_comm *c, void *arg)
{
    const order_arg *a = arg;
    float x[ORDER_N], part[ORDER_N];
    memcpy(x, a->x[rank], sizeof x);
    int rc = tri_comm_all_reduce(c, tri_tensor_1d(x, TRI_F32, ORDER_N), TRI_REDUCE_SUM);
    if (!rc)
        rc = bits_equal(x, a->want, ORDER_N, "all_reduce", rank);
    /* reduce_scatter of the same inputs (their first n * size elements): this rank's slice of the
     * sequential sum */
    int n = ORDER_N / size;
    float in[ORDER_N];
    memcpy(in, a->x[rank], sizeof in);
    if (!rc)
        rc = tri_comm_reduce_scatter(c, tri_tensor_1d(part, TRI_F32, n),
                                     tri_tensor_1d(in, TRI_F32, n * size));
    if (!rc)
        rc = bits_equal(part, &a->want[rank * n], n, "reduce_scatter", rank);
    return rc;
}

Test(comm, sums_in_rank_order)
{
    static order_arg a;
    for (size_t s = 0; s < sizeof sizes / sizeof *sizes; s++) {
        int size = sizes[s];
        order_inputs(&a, size);
        if (size >= 3) { /* another order (reversed) must change some bits, or this proves nothing */
            int differ = 0;
            for (int i = 0; i < ORDER_N; i++) {
                float rev = a.x[size - 1][i];
                for (int r = size - 2; r >= 0; r--)
                    rev += a.x[r][i];
                differ += memcmp(&rev, &a.want[i], sizeof rev) != 0;
            }
            cr_assert_gt(differ, 0, "inputs on %d ranks sum to the same bits in any order", size);
        }
        run_ok(size, run_order, &a, "rank-order sums");
    }
}

/* ---- bf16 sums: widened, added in fp32 in rank order, rounded once (engine/comm/comm.h) ---- */

enum { BF16_N = 120 };

typedef struct bf16_arg {
    uint16_t x[ORDER_MAX_RANKS][BF16_N]; /* rank r's input (bf16 bits) */
    uint16_t want[BF16_N];               /* bf16 of the fp32 sum x[0] + x[1] + ... in rank order */
    double exact[BF16_N];                /* the exact sum (exact in double) */
    double mag[BF16_N];                  /* sum of |x[r]| */
} bf16_arg;

/* Values of both signs with bf16's 8 significant bits: the first half of magnitude 2^-6..2^7, where
 * every fp32 partial sum is exact (24 bits span them), so the reference is the correctly rounded
 * exact sum; the second half over 2^-20..2^21, where fp32 sums round too and rank order matters. */
static void bf16_inputs(bf16_arg *a, int size)
{
    float u[BF16_N];
    for (int r = 0; r < size; r++) {
        tu_fill_uniform(u, BF16_N, -2.0f, 2.0f, 2000 + (uint64_t)r);
        for (int i = 0; i < BF16_N; i++) {
            bool wide = i >= BF16_N / 2;
            int e = (i * 7 + r * 13) % (wide ? 41 : 13) - (wide ? 20 : 6);
            float m = 1.0f + fabsf(u[i]) / 2.0f; /* [1, 2), the sign of u */
            a->x[r][i] = tri_float_to_bf16(ldexpf(copysignf(m, u[i]), e));
        }
    }
    for (int i = 0; i < BF16_N; i++) {
        float acc = 0.0f;
        a->exact[i] = a->mag[i] = 0.0;
        for (int r = 0; r < size; r++) {
            float x = tri_bf16_to_float(a->x[r][i]);
            acc += x;
            a->exact[i] += x;
            a->mag[i] += fabs(x);
        }
        a->want[i] = tri_float_to_bf16(acc);
    }
}

static int bf16_bits_equal(const uint16_t *got, const uint16_t *want, int n, const char *what, int rank)
{
    for (int i = 0; i < n; i++)
        if (got[i] != want[i])
            return TRI_ERR(TRI_EINTERNAL, "%s: rank %d element %d is 0x%04x (%a), the rank-order fp32 sum "
                           "rounded once 0x%04x (%a)", what, rank, i, got[i], (double)tri_bf16_to_float(got[i]),
                           want[i], (double)tri_bf16_to_float(want[i]));
    return TRI_OK;
}

static int run_bf16_order(int rank, int size, tri_comm *c, void *arg)
{
    const bf16_arg *a = arg;
    uint16_t x[BF16_N], in[BF16_N], part[BF16_N];
    memcpy(x, a->x[rank], sizeof x);
    int rc = tri_comm_all_reduce(c, tri_tensor_1d(x, TRI_BF16, BF16_N), TRI_REDUCE_SUM);
    if (!rc)
        rc = bf16_bits_equal(x, a->want, BF16_N, "bf16 all_reduce", rank);
    int n = BF16_N / size;
    memcpy(in, a->x[rank], sizeof in);
    if (!rc)
        rc = tri_comm_reduce_scatter(c, tri_tensor_1d(part, TRI_BF16, n), tri_tensor_1d(in, TRI_BF16, n * size));
    if (!rc)
        rc = bf16_bits_equal(part, &a->want[rank * n], n, "bf16 reduce_scatter", rank);
    return rc;
}

Test(comm, bf16_sums_in_rank_order)
{
    static bf16_arg a;
    for (size_t s = 0; s < sizeof sizes / sizeof *sizes; s++) {
        int size = sizes[s];
        bf16_inputs(&a, size);
        int stepwise_differs = 0;
        for (int i = 0; i < BF16_N; i++) {
            /* the reference against the naive one, the exact sum rounded: equal where fp32 sums are
             * exact, and within one bf16 rounding (2^-8) plus fp32's error everywhere */
            double ref = tri_bf16_to_float(a.want[i]);
            if (i < BF16_N / 2)
                cr_assert_eq(a.want[i], tri_float_to_bf16((float)a.exact[i]), "%d ranks, element %d", size, i);
            cr_assert_leq(fabs(ref - a.exact[i]), ldexp(fabs(a.exact[i]), -8) + ldexp(a.mag[i], -24) * size,
                          "%d ranks, element %d: %a against the exact %a", size, i, ref, a.exact[i]);
            /* rounding to bf16 after every add (as MPI's pairwise combines do) */
            uint16_t step = a.x[0][i];
            for (int r = 1; r < size; r++)
                step = tri_float_to_bf16(tri_bf16_to_float(step) + tri_bf16_to_float(a.x[r][i]));
            stepwise_differs += step != a.want[i];
        }
        if (size >= 3) /* or this would not tell one rounding from many */
            cr_assert_gt(stepwise_differs, 0, "inputs on %d ranks sum alike rounded once or at every step", size);
        run_ok(size, run_bf16_order, &a, "bf16 rank-order sums");
    }
}

/* ---- barrier: nobody leaves before everyone arrived, round after round ---- */

typedef struct barrier_arg {
    atomic_int arrived;
} barrier_arg;

static int run_barrier_rounds(int rank, int size, tri_comm *c, void *arg)
{
    barrier_arg *a = arg;
    int rc = TRI_OK;
    for (int round = 0; round < 5 && !rc; round++) {
        if (rank == size - 1)
            sleep_s(0.01);
        atomic_fetch_add(&a->arrived, 1);
        rc = tri_comm_barrier(c);
        int seen = atomic_load(&a->arrived);
        if (!rc && seen != size * (round + 1))
            rc = TRI_ERR(TRI_EINTERNAL, "round %d: rank %d left the barrier having seen %d arrivals, want %d",
                         round, rank, seen, size * (round + 1));
        if (!rc)
            rc = tri_comm_barrier(c); /* nobody starts the next round while someone still counts */
    }
    return rc;
}

Test(comm, barrier_rounds)
{
    for (size_t s = 0; s < sizeof sizes / sizeof *sizes; s++) {
        barrier_arg a;
        atomic_init(&a.arrived, 0);
        run_ok(sizes[s], run_barrier_rounds, &a, "barrier rounds");
    }
}

/* ---- failure handling ---- */

enum { FAIL_RANKS = 4 };

typedef struct fail_arg {
    int failing;                 /* the rank that gives up */
    int fail_code;
    int rc[FAIL_RANKS];          /* what each rank's blocked call returned */
    double waited[FAIL_RANKS];   /* how long it was blocked */
} fail_arg;

/* The failing rank (0 or 3) gives up after 100 ms; the others block, each in a different call, and
 * must be woken: rank 0 or 3 in a world barrier, rank 1 in an all_reduce, rank 2 in a p2p receive
 * from rank 3 when that one fails; when rank 0 fails, rank 2 waits in a barrier of the pair {2, 3}
 * for rank 3, itself in the world barrier: rank 2 sleeps on a group's condition that the failing
 * rank never signals. */
static int run_one_fails(int rank, int size, tri_comm *c, void *arg)
{
    fail_arg *a = arg;
    tri_comm *pair = NULL;
    int rc = tri_comm_split(c, rank / 2, rank, &pair);
    if (rc)
        return rc;
    if (rank == a->failing) {
        sleep_s(0.1);
        tri_comm_destroy(pair);
        return TRI_ERR(a->fail_code, "rank %d gives up on purpose", rank);
    }
    double t0 = tri_now_s();
    float x[3] = {1, 2, 3};
    tri_p2p recv = {.send = false, .peer = a->failing, .t = tri_tensor_1d(x, TRI_F32, 3)};
    switch (rank) {
    case 0: rc = tri_comm_barrier(c); break;
    case 1: rc = tri_comm_all_reduce(c, tri_tensor_1d(x, TRI_F32, 3), TRI_REDUCE_SUM); break;
    case 2: rc = a->failing == 3 ? tri_comm_p2p(c, &recv, 1) : tri_comm_barrier(pair); break;
    default: rc = tri_comm_barrier(c); break;
    }
    a->waited[rank] = tri_now_s() - t0;
    a->rc[rank] = rc;
    tri_comm_destroy(pair);
    return rc;
}

static void expect_woken(int failing, int code)
{
    fail_arg a = {.failing = failing, .fail_code = code};
    double t0 = tri_now_s();
    int rc = tri_run_thread_ranks(FAIL_RANKS, run_one_fails, &a);
    double total = tri_now_s() - t0;
    cr_assert_eq(rc, code, "rank %d failed with %s, tri_run_thread_ranks returned %s: %s", failing,
                 tri_status_name(code), tri_status_name(rc), tri_error_message());
    char want[64];
    snprintf(want, sizeof want, "rank %d gives up on purpose", failing);
    cr_assert(strstr(tri_error_message(), want), "the failing rank's message is lost: %s",
              tri_error_message());
    for (int r = 0; r < FAIL_RANKS; r++) {
        if (r == failing)
            continue;
        cr_assert_eq(a.rc[r], TRI_ECOMM, "rank %d: %s", r, tri_status_name(a.rc[r]));
        cr_assert_lt(a.waited[r], 1.0, "rank %d was blocked %.2f s", r, a.waited[r]);
    }
    cr_assert_lt(total, 1.5, "the run took %.2f s", total);
}

Test(comm, failing_rank_wakes_the_others)
{
    expect_woken(3, TRI_EINVAL);
    expect_woken(0, TRI_EINVAL);
}

/* The failing rank's own status is TRI_ECOMM, like that of the ranks it wakes: its message must
 * still be the one reported, whichever rank it is. */
Test(comm, failing_rank_reported_among_woken_ranks)
{
    expect_woken(0, TRI_ECOMM);
    expect_woken(3, TRI_ECOMM);
}

Test(comm, timeout_when_a_rank_never_joins)
{
    tri_thread_group *g = NULL;
    tri_comm *c = NULL;
    cr_assert_eq(tri_thread_group_create(&g, 3, 0.25), TRI_OK);
    cr_assert_eq(tri_comm_thread_create(&c, g, 0), TRI_OK); /* ranks 1 and 2 never show up */
    double t0 = tri_now_s();
    int rc = tri_comm_barrier(c);
    double waited = tri_now_s() - t0;
    cr_assert_eq(rc, TRI_ETIMEOUT, "%s: %s", tri_status_name(rc), tri_error_message());
    cr_assert(strstr(tri_error_message(), "barrier timed out"), "%s", tri_error_message());
    cr_assert(waited >= 0.2 && waited < 1.5, "gave up after %.2f s with a 0.25 s timeout", waited);

    float x[2] = {0};
    tri_p2p recv = {.send = false, .peer = 1, .t = tri_tensor_1d(x, TRI_F32, 2)};
    rc = tri_comm_p2p(c, &recv, 1);
    cr_assert_eq(rc, TRI_ETIMEOUT, "p2p receive: %s: %s", tri_status_name(rc), tri_error_message());
    tri_p2p send = {.send = true, .peer = 2, .t = tri_tensor_1d(x, TRI_F32, 2)};
    rc = tri_comm_p2p(c, &send, 1);
    cr_assert_eq(rc, TRI_ETIMEOUT, "p2p send: %s: %s", tri_status_name(rc), tri_error_message());
    tri_comm_destroy(c);
    tri_thread_group_destroy(g); /* frees the group although two ranks never made a comm (ASan) */
}

/* ---- ranks that disagree on a collective ---- */

typedef enum { SAME, MORE_ELEMENTS, OTHER_DTYPE, OTHER_OP, OTHER_KIND, BARRIER_VS_REDUCE } disagreement;

typedef struct disagree_arg {
    disagreement how;
    int rc[2];
    char msg[2][512];
    int after[2]; /* a correct all_reduce afterwards */
} disagree_arg;

/* Rank 0 always all-reduces 4 floats (sum); rank 1 makes the call `how` describes. */
static int run_disagree(int rank, int size, tri_comm *c, void *arg)
{
    disagree_arg *a = arg;
    float f[8] = {1, 2, 3, 4, 5, 6, 7, 8};
    int32_t k[4] = {1, 2, 3, 4};
    tri_tensor four = tri_tensor_1d(f, TRI_F32, 4);
    int rc;
    if (rank == 0 || a->how == SAME)
        rc = tri_comm_all_reduce(c, four, TRI_REDUCE_SUM);
    else if (a->how == MORE_ELEMENTS)
        rc = tri_comm_all_reduce(c, tri_tensor_1d(f, TRI_F32, 8), TRI_REDUCE_SUM);
    else if (a->how == OTHER_DTYPE)
        rc = tri_comm_all_reduce(c, tri_tensor_1d(k, TRI_I32, 4), TRI_REDUCE_SUM);
    else if (a->how == OTHER_OP)
        rc = tri_comm_all_reduce(c, four, TRI_REDUCE_MAX);
    else if (a->how == OTHER_KIND)
        rc = tri_comm_broadcast(c, four, 1);
    else
        rc = tri_comm_barrier(c);
    a->rc[rank] = rc;
    snprintf(a->msg[rank], sizeof a->msg[rank], "%s", rc ? tri_error_message() : "");
    float one = 1.0f;
    a->after[rank] = tri_comm_all_reduce(c, tri_tensor_1d(&one, TRI_F32, 1), TRI_REDUCE_SUM);
    if (!a->after[rank] && one != 2.0f)
        a->after[rank] = TRI_EINTERNAL;
    return TRI_OK;
}

Test(comm, ranks_disagreeing_on_a_collective)
{
    static const struct {
        disagreement how;
        const char *needle; /* in both ranks' messages */
    } cases[] = {
        {MORE_ELEMENTS, "8 f32"}, {OTHER_DTYPE, "4 i32"}, {OTHER_OP, "max"},
        {OTHER_KIND, "broadcast"}, {BARRIER_VS_REDUCE, "barrier"},
    };
    disagree_arg same = {.how = SAME};
    run_ok(2, run_disagree, &same, "agreeing ranks");
    cr_assert(same.rc[0] == TRI_OK && same.rc[1] == TRI_OK);
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
        disagree_arg a = {.how = cases[i].how};
        run_ok(2, run_disagree, &a, "disagreeing ranks");
        for (int r = 0; r < 2; r++) {
            cr_assert_eq(a.rc[r], TRI_EINVAL, "case %zu rank %d: %s", i, r, tri_status_name(a.rc[r]));
            cr_assert(strstr(a.msg[r], cases[i].needle) && strstr(a.msg[r], "all_reduce of 4 f32"),
                      "case %zu rank %d: %s", i, r, a.msg[r]);
            cr_assert_eq(a.after[r], TRI_OK, "case %zu rank %d: the group is unusable afterwards", i, r);
        }
    }
}

/* Rank 0 sends 2 elements to rank 1, which expects 1 (each rank's own arguments are valid): the
 * thread comm compares every pair and refuses on every rank, naming the pair and both counts, and
 * the group stays usable. */
static int run_a2a_disagree(int rank, int size, tri_comm *c, void *arg)
{
    (void)size, (void)arg;
    float in[4] = {10.0f * rank + 1, 10.0f * rank + 2, 0, 0}, out[4] = {0};
    int64_t sc[2] = {1, rank == 0 ? 2 : 1}, sd[2] = {0, 1}, rc_[2] = {1, 1}, rd[2] = {0, 1};
    int rc = tri_comm_all_to_all_v(c, tri_tensor_1d(out, TRI_F32, 4), tri_tensor_1d(in, TRI_F32, 4), 2, sc, sd,
                                   rc_, rd);
    char msg[512];
    snprintf(msg, sizeof msg, "%s", rc ? tri_error_message() : "none");
    if (rc != TRI_EINVAL || !strstr(msg, "rank 0 sends 2 elements to rank 1") || !strstr(msg, "recv_counts[0] = 1"))
        return TRI_ERR(TRI_EINTERNAL, "rank %d: all_to_all_v with disagreeing counts gave %s: %s", rank,
                       tri_status_name(rc), msg);
    sc[1] = 1; /* agreeing now: the exchange goes through */
    rc = tri_comm_all_to_all_v(c, tri_tensor_1d(out, TRI_F32, 4), tri_tensor_1d(in, TRI_F32, 4), 2, sc, sd, rc_, rd);
    /* out[src] = rank src's in[rank] */
    if (!rc && (out[0] != 1.0f + (float)rank || out[1] != 11.0f + (float)rank))
        return TRI_ERR(TRI_EINTERNAL, "rank %d: after a refused all_to_all_v got {%g, %g}", rank, out[0], out[1]);
    return rc;
}

Test(comm, all_to_all_v_ranks_disagreeing_on_a_count)
{
    run_ok(2, run_a2a_disagree, NULL, "all_to_all_v with disagreeing counts");
}

/* Broadcast roots differ: rank 0 says 0, rank 1 says 1. */
static int run_other_root(int rank, int size, tri_comm *c, void *arg)
{
    float x[2] = {0};
    int rc = tri_comm_broadcast(c, tri_tensor_1d(x, TRI_F32, 2), rank);
    char msg[512];
    snprintf(msg, sizeof msg, "%s", rc ? tri_error_message() : "none");
    if (rc != TRI_EINVAL || !strstr(msg, "from root 0") || !strstr(msg, "from root 1"))
        return TRI_ERR(TRI_EINTERNAL, "rank %d: broadcast with different roots gave %s: %s", rank,
                       tri_status_name(rc), msg);
    return TRI_OK;
}

Test(comm, ranks_disagreeing_on_the_root)
{
    run_ok(2, run_other_root, NULL, "different broadcast roots");
}
