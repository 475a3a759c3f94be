/* tests/test_step_time.c - the comms' wall-time account and the step-time split (engine/train/step_time.h)
 * on thread ranks.
 *
 * A rank that arrives late at a collective makes the others wait: the waiting ranks' blocked
 * seconds for that kind must cover the delay, and the step split must put it in the right group
 * (tp, dp or the pipeline's p2p "bubble") and sum to the step. Checks inside rank threads return a
 * status with a message; the test asserts on it. */
#include <criterion/criterion.h>
#include <stdio.h>
#include <time.h>

#include "engine/comm/comm.h"
#include "engine/comm/grid.h"
#include "engine/core/clock.h"
#include "engine/core/status.h"
#include "engine/train/step_time.h"

#define DELAY_S 0.05

static void sleep_s(double s)
{
    struct timespec ts = {(time_t)s, (long)((s - (double)(time_t)s) * 1e9)};
    nanosleep(&ts, NULL);
}

/* tp 2 x pp 2 x dp 2 on 8 thread ranks: world rank 0 is late to a TP all-reduce, a DP all-reduce
 * and a pipeline p2p; its partners must account the waits to the right group. */
static int late_rank(int rank, int size, tri_comm *world, void *arg)
{
    (void)size;
    (void)arg;
    tri_grid g;
    int rc = tri_grid_create(&g, world, 2, 2);
    if (rc)
        return rc;
    float x[4] = {1, 2, 3, 4};
    double t0 = tri_now_s();
    tri_step_time before = tri_step_time_snapshot(&g);
    /* TP group: rank 0 late */
    if (rank == 0) sleep_s(DELAY_S);
    if (!rc) rc = tri_comm_all_reduce(g.tp_comm, tri_tensor_1d(x, TRI_F32, 4), TRI_REDUCE_SUM);
    /* DP group: rank 0 late */
    if (rank == 0) sleep_s(DELAY_S);
    if (!rc) rc = tri_comm_all_reduce(g.dp_comm, tri_tensor_1d(x, TRI_F32, 4), TRI_REDUCE_SUM);
    /* pipeline: stage 0 sends to stage 1, rank 0 late */
    if (rank == 0) sleep_s(DELAY_S);
    tri_p2p op = {.send = g.pp_rank == 0, .peer = 1 - g.pp_rank, .tag = 1, .t = tri_tensor_1d(x, TRI_F32, 4)};
    if (!rc) rc = tri_comm_p2p(g.pp_comm, &op, 1);
    tri_step_time after = tri_step_time_snapshot(&g);
    tri_step_time t = tri_step_time_split(&before, &after, tri_now_s() - t0);
    double sum = t.compute_s + t.tp_s + t.pp_s + t.bubble_s + t.dp_s + t.other_s;
    if (!rc && (sum < t.step_s * 0.999 || sum > t.step_s * 1.001))
        rc = TRI_ERR(TRI_EINTERNAL, "rank %d: split sums to %g s, step %g s", rank, sum, t.step_s);
    /* rank 1 is rank 0's TP partner; rank 2 its DP partner; rank 4 its pipeline partner */
    if (!rc && rank == 1 && t.tp_s < 0.8 * DELAY_S)
        rc = TRI_ERR(TRI_EINTERNAL, "rank 1 waited %g s for its late TP partner, expected >= %g", t.tp_s, DELAY_S);
    if (!rc && rank == 2 && t.dp_s < 0.8 * DELAY_S)
        rc = TRI_ERR(TRI_EINTERNAL, "rank 2 waited %g s for its late DP partner, expected >= %g", t.dp_s, DELAY_S);
    if (!rc && rank == 4 && t.bubble_s < 0.8 * DELAY_S)
        rc = TRI_ERR(TRI_EINTERNAL, "rank 4 waited %g s for its late pipeline partner, expected >= %g",
                     t.bubble_s, DELAY_S);
    if (!rc && rank == 0 && t.compute_s < 2.5 * DELAY_S)
        rc = TRI_ERR(TRI_EINTERNAL, "rank 0 slept %g s outside comms but compute_s is %g", 3 * DELAY_S, t.compute_s);
    if (!rc && tri_comm_seconds(NULL, TRI_COMM_KINDS) != 0.0)
        rc = TRI_ERR(TRI_EINTERNAL, "tri_comm_seconds(NULL) is not 0");
    tri_grid_destroy(&g);
    return rc;
}

Test(step_time, late_rank_waits_land_in_their_group)
{
    int rc = tri_run_thread_ranks(8, late_rank, NULL);
    cr_assert_eq(rc, TRI_OK, "%s", tri_error_message());
}

/* cp 2 x dp 2 on 4 thread ranks (tp 1, pp 1): world rank 0 is late to an all-gather over the cp group
 * (as the cp attention's key/value gather) and to an all-reduce over dp x cp (the gradients); rank 1 (its
 * cp partner) must account the first wait to cp_s, rank 2 (its dp partner, not in its cp group) only the
 * second, to dp_s (every rank is in dp x cp, so rank 1 waits there too); cp_bytes is
 * the cp group's payload, the whole gathered buffer (engine/comm/comm.h; partitioner/context_parallel.h's
 * tri_cp_layer_traffic counts the same), on every rank, and the split sums to the step. */
static int late_cp_rank(int rank, int size, tri_comm *world, void *arg)
{
    (void)size;
    (void)arg;
    tri_grid g;
    int rc = tri_grid_create_cp(&g, world, 1, 2, 1);
    if (rc)
        return rc;
    float in[6] = {1, 2, 3, 4, 5, 6}, out[12];
    double t0 = tri_now_s();
    tri_step_time before = tri_step_time_snapshot(&g);
    if (rank == 0) sleep_s(DELAY_S);
    rc = tri_comm_all_gather(g.cp_comm, tri_tensor_1d(out, TRI_F32, 12), tri_tensor_1d(in, TRI_F32, 6));
    if (rank == 0) sleep_s(DELAY_S);
    if (!rc) rc = tri_comm_all_reduce(g.dp_cp_comm, tri_tensor_1d(in, TRI_F32, 6), TRI_REDUCE_SUM);
    tri_step_time after = tri_step_time_snapshot(&g);
    tri_step_time t = tri_step_time_split(&before, &after, tri_now_s() - t0);
    double sum = t.compute_s + t.tp_s + t.pp_s + t.bubble_s + t.dp_s + t.ep_s + t.cp_s + t.other_s;
    if (!rc && (sum < t.step_s * 0.999 || sum > t.step_s * 1.001))
        rc = TRI_ERR(TRI_EINTERNAL, "rank %d: split sums to %g s, step %g s", rank, sum, t.step_s);
    if (!rc && t.cp_bytes != 12 * sizeof(float))
        rc = TRI_ERR(TRI_EINTERNAL, "rank %d: cp_bytes %g, the gathered buffer is %zu", rank, t.cp_bytes,
                     12 * sizeof(float));
    if (!rc && rank == 1 && t.cp_s < 0.8 * DELAY_S)
        rc = TRI_ERR(TRI_EINTERNAL, "rank 1 (cp partner) cp_s %g, expected >= %g", t.cp_s, DELAY_S);
    if (!rc && rank == 2 && (t.dp_s < 1.6 * DELAY_S || t.cp_s > 0.5 * DELAY_S))
        rc = TRI_ERR(TRI_EINTERNAL, "rank 2 (dp partner) dp_s %g cp_s %g, expected dp_s >= %g and cp_s ~ 0", t.dp_s,
                     t.cp_s, 2 * DELAY_S);
    tri_grid_destroy(&g);
    return rc;
}

Test(step_time, late_cp_rank_waits_land_in_cp)
{
    int rc = tri_run_thread_ranks(4, late_cp_rank, NULL);
    cr_assert_eq(rc, TRI_OK, "%s", tri_error_message());
}

Test(step_time, split_add_and_clamp)
{
    tri_step_time a = {.step_s = 1, .compute_s = 0.5, .tp_s = 0.25, .dp_s = 0.25};
    tri_step_time b = a;
    tri_step_time_add(&a, &b);
    cr_assert_float_eq(a.step_s, 2.0, 1e-12);
    cr_assert_float_eq(tri_step_time_wait(&a), 1.0, 1e-12);
    tri_step_time none = {0}, more = {.tp_s = 3.0};
    tri_step_time s = tri_step_time_split(&none, &more, 1.0);
    cr_assert_float_eq(s.compute_s, 0.0, 1e-12, "compute is clamped at 0 when waits exceed the step");
}
