/* tests/test_grid_experts.c - the expert-parallel groups of the process grid (engine/comm/grid.h,
 * tri_grid_add_experts) on thread ranks: Megatron-Core's parallel folding with tp 1, ep adjacent dp
 * ranks per ep group and the edp group across them, checked by the world ranks each group holds
 * (every member's world rank summed and maxed over the group, against the closed form), and the
 * refusals naming the flags. */
#include <criterion/criterion.h>
#include <string.h>

#include "engine/comm/grid.h"
#include "engine/core/status.h"

typedef struct grid_case {
    int tp, pp, ep;
} grid_case;

/* sum and max of the world ranks in comm c */
static int members(tri_comm *c, int world_rank, int64_t *sum, int64_t *max)
{
    *sum = *max = world_rank;
    int rc = tri_comm_host_all_reduce(c, sum, TRI_I64, 1, TRI_REDUCE_SUM);
    if (!rc) rc = tri_comm_host_all_reduce(c, max, TRI_I64, 1, TRI_REDUCE_MAX);
    return rc;
}

static int rank_fn(int rank, int size, tri_comm *world, void *arg)
{
    const grid_case *k = arg;
    tri_grid g;
    int rc = tri_grid_create(&g, world, k->tp, k->pp);
    if (!rc) rc = tri_grid_add_experts(&g, k->ep);
    if (rc)
        return rc;
    int ep = k->ep, edp = g.dp / ep, e = g.dp_rank % ep, f = g.dp_rank / ep;
    if (g.ep != ep || g.edp != edp || g.ep_rank != e || g.edp_rank != f || g.ep_comm->size != ep ||
        g.edp_comm->size != edp || g.ep_comm->rank != e || g.edp_comm->rank != f)
        rc = TRI_ERR(TRI_EINTERNAL, "rank %d: ep %d/%d rank %d/%d, edp %d/%d rank %d/%d", rank, g.ep, ep, g.ep_rank, e,
                     g.edp, edp, g.edp_rank, f);
    /* the ep group: dp ranks f ep .. f ep + ep - 1 of this (tp, pp) */
    int64_t s, m, want_s = 0, want_m = 0;
    for (int j = 0; j < ep; j++) {
        int64_t w = tri_grid_world_rank(g.tp, g.dp, g.tp_rank, f * ep + j, g.pp_rank);
        want_s += w;
        want_m = w > want_m ? w : want_m;
    }
    if (!rc) rc = members(g.ep_comm, rank, &s, &m);
    if (!rc && (s != want_s || m != want_m))
        rc = TRI_ERR(TRI_EINTERNAL, "rank %d: ep group world ranks sum %lld max %lld, expected %lld %lld", rank,
                     (long long)s, (long long)m, (long long)want_s, (long long)want_m);
    /* the edp group: dp ranks e, e + ep, ... */
    want_s = want_m = 0;
    for (int j = 0; j < edp; j++) {
        int64_t w = tri_grid_world_rank(g.tp, g.dp, g.tp_rank, e + j * ep, g.pp_rank);
        want_s += w;
        want_m = w > want_m ? w : want_m;
    }
    if (!rc) rc = members(g.edp_comm, rank, &s, &m);
    if (!rc && (s != want_s || m != want_m))
        rc = TRI_ERR(TRI_EINTERNAL, "rank %d: edp group world ranks sum %lld max %lld, expected %lld %lld", rank,
                     (long long)s, (long long)m, (long long)want_s, (long long)want_m);
    (void)size;
    tri_grid_destroy(&g);
    return rc;
}

Test(grid_experts, ep2_of_dp4_with_pp2)
{
    grid_case k = {1, 2, 2};
    cr_assert_eq(tri_run_thread_ranks(8, rank_fn, &k), TRI_OK, "%s", tri_error_message());
}

Test(grid_experts, ep4_of_dp4)
{
    grid_case k = {1, 1, 4};
    cr_assert_eq(tri_run_thread_ranks(4, rank_fn, &k), TRI_OK, "%s", tri_error_message());
}

Test(grid_experts, ep2_of_dp6)
{
    grid_case k = {1, 1, 2};
    cr_assert_eq(tri_run_thread_ranks(6, rank_fn, &k), TRI_OK, "%s", tri_error_message());
}

static int refuse_fn(int rank, int size, tri_comm *world, void *arg)
{
    const grid_case *k = arg;
    tri_grid g;
    int rc = tri_grid_create(&g, world, k->tp, k->pp);
    int got = rc ? rc : tri_grid_add_experts(&g, k->ep);
    const char *want = k->tp > 1 ? "--expert-model-parallel-size 2 with --tensor-model-parallel-size 2"
                                 : "--expert-model-parallel-size 3 must be >= 1 and divide the data-parallel size 4";
    rc = got == TRI_EINVAL && strstr(tri_error_message(), want) ? TRI_OK
                                                                : TRI_ERR(TRI_EINTERNAL, "rank %d: got %d", rank, got);
    if (!rc && (g.ep_comm || g.edp_comm))
        rc = TRI_ERR(TRI_EINTERNAL, "rank %d: a refused ep split groups", rank);
    (void)size;
    tri_grid_destroy(&g);
    return rc;
}

Test(grid_experts, refusals)
{
    grid_case k = {1, 1, 3};
    cr_assert_eq(tri_run_thread_ranks(4, refuse_fn, &k), TRI_OK, "%s", tri_error_message());
    grid_case t = {2, 1, 2};
    cr_assert_eq(tri_run_thread_ranks(4, refuse_fn, &t), TRI_OK, "%s", tri_error_message());
}
