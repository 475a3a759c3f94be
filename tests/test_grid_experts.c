/* tests/test_grid_experts.c - the expert-parallel groups of the process grid (engine/comm/grid.h,
 * tri_grid_add_experts, tri_grid_add_experts_etp) on thread ranks: Megatron-Core's parallel folding, a
 * stage's tp x dp ranks (s = tp_rank + tp dp_rank) regrouped as etp x ep x edp, etp fastest: the etp
 * group s / etp alike, the ep group stride etp within (etp_rank, edp_rank), the edp group stride etp ep
 * (etp 1: ep adjacent ranks per ep group and the edp group across them). One table of layouts - tp 1
 * (the dp ranks), tp 2 (ep within tp, ep spanning tp and dp, ep 1 whose edp is the whole stage), with
 * pp 2, and etp 2 - each group checked by the world ranks it holds (every member's world rank summed
 * and maxed over the group, against the closed form); and the refusals naming the flags. */
#include <criterion/criterion.h>
#include <string.h>

#include "engine/comm/grid.h"
#include "engine/core/status.h"

typedef struct grid_case {
    int tp, pp, dp, ep, etp;  /* etp 0: tri_grid_add_experts (etp 1), else tri_grid_add_experts_etp */
    const char *what;
} grid_case;

/* sum and max of the world ranks in comm c */
static int members(tri_comm *c, int world_rank, int64_t *sum, int64_t *max)
{
    *sum = *max = world_rank;
    int rc = tri_comm_host_all_reduce(c, sum, TRI_I64, 1, TRI_REDUCE_SUM);
    if (!rc) rc = tri_comm_host_all_reduce(c, max, TRI_I64, 1, TRI_REDUCE_MAX);
    return rc;
}

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

/* comm c is this rank's `name` group: `size` members, this rank at crank, the stage ranks first + j stride */
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

static int rank_fn(int rank, int size, tri_comm *world, void *arg)
{
    const grid_case *k = arg;
    tri_grid g;
    (void)size;
    int rc = tri_grid_create(&g, world, k->tp, k->pp);
    if (!rc) rc = k->etp ? tri_grid_add_experts_etp(&g, k->ep, k->etp) : tri_grid_add_experts(&g, k->ep);
    if (rc)
        return rc;
    int T = k->etp ? k->etp : 1, ep = k->ep, st = g.tp_rank + g.tp * g.dp_rank, edp = g.tp * g.dp / (T * ep);
    int t = st % T, e = st / T % ep, f = st / (T * ep);
    if ((k->etp && (g.etp != T || g.etp_rank != t)) || g.ep != ep || g.edp != edp || g.ep_rank != e ||
        g.edp_rank != f)
        rc = TRI_ERR(TRI_EINTERNAL, "rank %d: etp %d rank %d, ep %d rank %d, edp %d rank %d; expected %d %d, %d %d, %d %d",
                     rank, g.etp, g.etp_rank, g.ep, g.ep_rank, g.edp, g.edp_rank, T, t, ep, e, edp, f);
    if (!rc && T > 1) rc = check_group(g.etp_comm, rank, T, t, st - t, 1, &g, "etp");
    if (!rc && ep > 1) rc = check_group(g.ep_comm, rank, ep, e, t + T * ep * f, T, &g, "ep");
    if (!rc && ep == 1 && g.ep_comm)
        rc = TRI_ERR(TRI_EINTERNAL, "rank %d: an ep comm at ep 1", rank);
    if (!rc) rc = check_group(g.edp_comm, rank, edp, f, t + T * e, T * ep, &g, "edp");
    tri_grid_destroy(&g);
    return rc;
}

static const grid_case cases[] = {
    {1, 2, 4, 2, 0, "ep 2 of dp 4 with pp 2"},
    {1, 1, 4, 4, 0, "ep 4 of dp 4"},
    {1, 1, 6, 2, 0, "ep 2 of dp 6"},
    {2, 1, 2, 2, 0, "tp 2 x dp 2: ep 2 is the tp pair (ep_rank = tp_rank), edp the dp pair"},
    {2, 2, 2, 4, 0, "tp 2 x dp 2 x pp 2: ep 4 spans both tp ranks of both dp replicas of each stage (edp 1)"},
    {2, 1, 3, 3, 0, "tp 2 x dp 3: ep 3 groups ranks across tp and dp ((0,0) (1,0) (0,1) and the rest), edp 2"},
    {2, 1, 2, 1, 0, "tp 2 x dp 2, ep 1: no ep group; the experts' edp group is the whole stage (tp x dp)"},
    {2, 1, 1, 1, 2, "tp 2, etp 2 ep 1: the etp group is the TP pair, edp 1"},
    {2, 1, 2, 2, 2, "tp 2 x dp 2, etp 2 ep 2: etp the TP pairs, ep across the dp ranks ((0,0) (0,1)), edp 1"},
    {1, 1, 4, 2, 2, "tp 1 x dp 4, etp 2 ep 2 (from the dp comm)"},
    {2, 2, 2, 1, 2, "tp 2 x pp 2 x dp 2, etp 2 ep 1 (edp 2 per stage)"},
};

Test(grid_experts, every_group_holds_its_world_ranks)
{
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        const grid_case *k = &cases[i];
        cr_assert_eq(tri_run_thread_ranks(k->tp * k->pp * k->dp, rank_fn, (void *)k), TRI_OK, "%s: %s", k->what,
                     tri_error_message());
    }
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

static int etp_refuse_fn(int rank, int size, tri_comm *world, void *arg)
{
    const grid_case *k = arg;
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
    grid_case k = {2, 1, 2, 2, 4, "etp 4 x ep 2 on tp 2 x dp 2"};
    cr_assert_eq(tri_run_thread_ranks(4, etp_refuse_fn, &k), TRI_OK, "%s", tri_error_message());
}

Test(grid_experts, refusals)
{
    grid_case k = {1, 1, 4, 3, 0, "ep 3 of dp 4"};
    cr_assert_eq(tri_run_thread_ranks(4, refuse_fn, &k), TRI_OK, "%s", tri_error_message());
    grid_case t = {2, 1, 2, 3, 0, "ep 3 of tp 2 x dp 2"};
    cr_assert_eq(tri_run_thread_ranks(4, refuse_fn, &t), TRI_OK, "%s", tri_error_message());
}
