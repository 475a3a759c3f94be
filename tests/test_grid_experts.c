/* tests/test_grid_experts.c - the expert-parallel groups of the process grid (engine/comm/grid.h,
 * tri_grid_add_experts) on thread ranks: Megatron-Core's parallel folding, a stage's tp x dp ranks
 * (s = tp_rank + tp dp_rank) regrouped as ep adjacent ranks per ep group and the edp group across
 * them, at tp 1 (the dp ranks) and tp 2 (ep within tp, ep spanning tp and dp, ep 1 whose edp is the
 * whole stage), checked by the world ranks each group holds (every member's world rank summed and
 * maxed over the group, against the closed form), and the refusals naming the flags. */
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
    int ep = k->ep, st = g.tp_rank + g.tp * g.dp_rank, edp = g.tp * g.dp / ep, e = st % ep, f = st / ep;
    if (g.ep != ep || g.edp != edp || g.ep_rank != e || g.edp_rank != f || g.edp_comm->size != edp ||
        g.edp_comm->rank != f || (ep > 1 ? g.ep_comm->size != ep || g.ep_comm->rank != e : g.ep_comm != NULL))
        rc = TRI_ERR(TRI_EINTERNAL, "rank %d: ep %d/%d rank %d/%d, edp %d/%d rank %d/%d", rank, g.ep, ep, g.ep_rank, e,
                     g.edp, edp, g.edp_rank, f);
    /* the ep group: stage ranks f ep .. f ep + ep - 1 of this pp */
    int64_t s, m, want_s = 0, want_m = 0;
    for (int j = 0; j < ep; j++) {
        int r = f * ep + j;
        int64_t w = tri_grid_world_rank(g.tp, g.dp, r % g.tp, r / g.tp, g.pp_rank);
        want_s += w;
        want_m = w > want_m ? w : want_m;
    }
    if (!rc && ep > 1) rc = members(g.ep_comm, rank, &s, &m);
    if (!rc && ep > 1 && (s != want_s || m != want_m))
        rc = TRI_ERR(TRI_EINTERNAL, "rank %d: ep group world ranks sum %lld max %lld, expected %lld %lld", rank,
                     (long long)s, (long long)m, (long long)want_s, (long long)want_m);
    /* the edp group: stage ranks e, e + ep, ... */
    want_s = want_m = 0;
    for (int j = 0; j < edp; j++) {
        int r = e + j * ep;
        int64_t w = tri_grid_world_rank(g.tp, g.dp, r % g.tp, r / g.tp, g.pp_rank);
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

/* tp 2 x dp 2: ep 2 is the tp pair (ep_rank = tp_rank), edp the dp pair */
Test(grid_experts, ep2_of_tp2_dp2)
{
    grid_case k = {2, 1, 2};
    cr_assert_eq(tri_run_thread_ranks(4, rank_fn, &k), TRI_OK, "%s", tri_error_message());
}

/* tp 2 x dp 2 x pp 2: ep 4 spans both tp ranks of both dp replicas of each stage (edp 1) */
Test(grid_experts, ep4_of_tp2_dp2_with_pp2)
{
    grid_case k = {2, 2, 4};
    cr_assert_eq(tri_run_thread_ranks(8, rank_fn, &k), TRI_OK, "%s", tri_error_message());
}

/* tp 2 x dp 3: ep 3 groups ranks across tp and dp ((0,0) (1,0) (0,1) and the rest), edp 2 */
Test(grid_experts, ep3_of_tp2_dp3)
{
    grid_case k = {2, 1, 3};
    cr_assert_eq(tri_run_thread_ranks(6, rank_fn, &k), TRI_OK, "%s", tri_error_message());
}

/* tp 2 x dp 2, ep 1: no ep group; the experts' edp group is the whole stage (tp x dp) */
Test(grid_experts, ep1_of_tp2_dp2)
{
    grid_case k = {2, 1, 1};
    cr_assert_eq(tri_run_thread_ranks(4, rank_fn, &k), TRI_OK, "%s", tri_error_message());
}

static int refuse_fn(int rank, int size, tri_comm *world, void *arg)
{
    const grid_case *k = arg;
    tri_grid g;
    int rc = tri_grid_create(&g, world, k->tp, k->pp);
    int got = rc ? rc : tri_grid_add_experts(&g, k->ep);
    const char *want = k->tp > 1 ? "--expert-model-parallel-size 3 must be >= 1 and divide a pipeline stage's "
                                   "tensor x data-parallel ranks 2 x 2 = 4"
                                 : "--expert-model-parallel-size 3 must be >= 1 and divide a pipeline stage's "
                                   "tensor x data-parallel ranks 1 x 4 = 4";
    rc = got == TRI_EINVAL && strstr(tri_error_message(), want) ? TRI_OK
                                                                : TRI_ERR(TRI_EINTERNAL, "rank %d: got %d", rank, got);
    if (!rc && (g.ep_comm || g.edp_comm || g.stage_comm))
        rc = TRI_ERR(TRI_EINTERNAL, "rank %d: a refused ep split groups", rank);
    (void)size;
    tri_grid_destroy(&g);
    return rc;
}

/* Expert tensor parallelism (tri_grid_add_experts_etp): the stage's ranks s fold as etp x ep x edp,
 * etp fastest: etp group = s / etp alike, ep group = stride etp within (etp_rank, edp_rank), edp group =
 * stride etp ep; every group's world ranks against the closed form. */
typedef struct etp_case {
    int tp, pp, ep, etp;
} etp_case;

/* sum and max of the world ranks of stage ranks first + j * stride, j < n, on pipeline stage pp */
static void want(const tri_grid *g, int first, int stride, int n, int64_t *s, int64_t *m)
{
    *s = *m = 0;
    for (int j = 0; j < n; j++) {
        int r = first + j * stride;
        int64_t w = tri_grid_world_rank(g->tp, g->dp, r % g->tp, r / g->tp, g->pp_rank);
        *s += w;
        *m = w > *m ? w : *m;
    }
}

static int check_group(tri_comm *c, int rank, int size, int crank, int first, int stride, const tri_grid *g,
                       const char *name)
{
    if (!c || c->size != size || c->rank != crank)
        return TRI_ERR(TRI_EINTERNAL, "rank %d: %s comm %s size %d rank %d, expected %d %d", rank, name,
                       c ? "of" : "missing", c ? c->size : 0, c ? c->rank : 0, size, crank);
    int64_t s, m, ws, wm;
    int rc = members(c, rank, &s, &m);
    want(g, first, stride, size, &ws, &wm);
    if (!rc && (s != ws || m != wm))
        rc = TRI_ERR(TRI_EINTERNAL, "rank %d: %s group world ranks sum %lld max %lld, expected %lld %lld", rank, name,
                     (long long)s, (long long)m, (long long)ws, (long long)wm);
    return rc;
}

static int etp_fn(int rank, int size, tri_comm *world, void *arg)
{
    const etp_case *k = arg;
    tri_grid g;
    (void)size;
    int rc = tri_grid_create(&g, world, k->tp, k->pp);
    if (!rc) rc = tri_grid_add_experts_etp(&g, k->ep, k->etp);
    if (rc)
        return rc;
    int T = k->etp, ep = k->ep, st = g.tp_rank + g.tp * g.dp_rank, edp = g.tp * g.dp / (T * ep);
    int t = st % T, e = st / T % ep, f = st / (T * ep);
    if (g.etp != T || g.ep != ep || g.edp != edp || g.etp_rank != t || g.ep_rank != e || g.edp_rank != f)
        rc = TRI_ERR(TRI_EINTERNAL, "rank %d: etp %d rank %d, ep %d rank %d, edp %d rank %d; expected %d %d, %d %d, %d %d",
                     rank, g.etp, g.etp_rank, g.ep, g.ep_rank, g.edp, g.edp_rank, T, t, ep, e, edp, f);
    if (!rc) rc = check_group(g.etp_comm, rank, T, t, st - t, 1, &g, "etp");
    if (!rc && ep > 1) rc = check_group(g.ep_comm, rank, ep, e, t + T * ep * f, T, &g, "ep");
    if (!rc && ep == 1 && g.ep_comm)
        rc = TRI_ERR(TRI_EINTERNAL, "rank %d: an ep comm at ep 1", rank);
    if (!rc) rc = check_group(g.edp_comm, rank, edp, f, t + T * e, T * ep, &g, "edp");
    tri_grid_destroy(&g);
    return rc;
}

/* tp 2 x dp 1, etp 2 ep 1: the etp group is the TP pair, edp 1 */
Test(grid_experts, etp2_of_tp2)
{
    etp_case k = {2, 1, 1, 2};
    cr_assert_eq(tri_run_thread_ranks(2, etp_fn, &k), TRI_OK, "%s", tri_error_message());
}

/* tp 2 x dp 2, etp 2 ep 2: etp the TP pairs, ep across the dp ranks ((0,0) (0,1)), edp 1 */
Test(grid_experts, etp2_ep2_of_tp2_dp2)
{
    etp_case k = {2, 1, 2, 2};
    cr_assert_eq(tri_run_thread_ranks(4, etp_fn, &k), TRI_OK, "%s", tri_error_message());
}

/* tp 1 x dp 4, etp 2 ep 2 (from the dp comm); and tp 2 x pp 2 x dp 2 etp 2 ep 1 (edp 2 per stage) */
Test(grid_experts, etp2_ep2_of_dp4_and_pp2)
{
    etp_case k = {1, 1, 2, 2};
    cr_assert_eq(tri_run_thread_ranks(4, etp_fn, &k), TRI_OK, "%s", tri_error_message());
    etp_case p = {2, 2, 1, 2};
    cr_assert_eq(tri_run_thread_ranks(8, etp_fn, &p), TRI_OK, "%s", tri_error_message());
}

static int etp_refuse_fn(int rank, int size, tri_comm *world, void *arg)
{
    const etp_case *k = arg;
    tri_grid g;
    (void)size;
    int rc = tri_grid_create(&g, world, k->tp, k->pp);
    int got = rc ? rc : tri_grid_add_experts_etp(&g, k->ep, k->etp);
    rc = got == TRI_EINVAL && strstr(tri_error_message(), "--expert-tensor-parallel-size 4 x "
                                                          "--expert-model-parallel-size 2 must be >= 1 and divide a "
                                                          "pipeline stage's tensor x data-parallel ranks 2 x 2 = 4")
             ? TRI_OK
             : TRI_ERR(TRI_EINTERNAL, "rank %d: got %d (%s)", rank, got, tri_error_message());
    if (!rc && (g.etp_comm || g.ep_comm || g.edp_comm || g.stage_comm))
        rc = TRI_ERR(TRI_EINTERNAL, "rank %d: a refused etp split groups", rank);
    tri_grid_destroy(&g);
    return rc;
}

Test(grid_experts, etp_refusal)
{
    etp_case k = {2, 1, 2, 4};
    cr_assert_eq(tri_run_thread_ranks(4, etp_refuse_fn, &k), TRI_OK, "%s", tri_error_message());
}

Test(grid_experts, refusals)
{
    grid_case k = {1, 1, 3};
    cr_assert_eq(tri_run_thread_ranks(4, refuse_fn, &k), TRI_OK, "%s", tri_error_message());
    grid_case t = {2, 1, 3};
    cr_assert_eq(tri_run_thread_ranks(4, refuse_fn, &t), TRI_OK, "%s", tri_error_message());
}
