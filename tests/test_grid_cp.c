/* tests/test_grid_cp.c - the context-parallel axis of the process grid (engine/comm/grid.h,
 * tri_grid_create_cp) on thread ranks: Megatron-Core's order "tp-cp-ep-dp-pp", world_rank = tp_rank +
 * tp (cp_rank + cp (dp_rank + dp pp_rank)). Every group of every rank is checked member by member and
 * in order: each member writes its world rank at its comm rank, the group sums, and the list must be
 * the one derived here from the coordinates alone (the same (fixed coordinates), ranked by the key the
 * design names). Layouts: tp 2 cp 2 (4 ranks), tp 1 cp 2 pp 2 dp 2 and tp 2 cp 2 dp 2 (8 ranks), cp 2
 * with ep 2 (the experts fold tp x cp x dp, s = tp_rank + tp (cp_rank + cp dp_rank)); cp 1 keeps the
 * old numbering (tri_grid_coords_cp against tri_grid_coords) and the refusal names the sizes. */
#include <criterion/criterion.h>
#include <string.h>

#include "engine/comm/grid.h"
#include "engine/core/status.h"

typedef struct cp_case {
    int tp, cp, pp, ep, etp;
} cp_case;

typedef struct coords {
    int t, c, d, p, s; /* tp, cp, dp, pp ranks; s the stage rank */
} coords;

static coords coords_of(int w, const cp_case *k, int dp)
{
    coords x = {w % k->tp, w / k->tp % k->cp, w / (k->tp * k->cp) % dp, w / (k->tp * k->cp * dp), 0};
    x.s = x.t + k->tp * (x.c + k->cp * x.d);
    return x;
}

enum { G_TP, G_CP, G_DP, G_PP, G_MP, G_DPCP, G_STAGE, G_EP, G_EDP, G_EMBD };

/* The group `which` of a rank at x as the design defines it: *color (-1: not a member) and *key. */
static void group_of(int which, coords x, const cp_case *k, int dp, int64_t *color, int64_t *key)
{
    int ep = k->ep, etp = k->etp;
    switch (which) {
    case G_TP: *color = x.c + 100 * x.d + 10000 * x.p; *key = x.t; break;
    case G_CP: *color = x.t + 100 * x.d + 10000 * x.p; *key = x.c; break;
    case G_DP: *color = x.t + 100 * x.c + 10000 * x.p; *key = x.d; break;
    case G_PP: *color = x.t + 100 * x.c + 10000 * x.d; *key = x.p; break;
    case G_MP: *color = x.c + 100 * x.d; *key = x.t + 100 * x.p; break;
    case G_DPCP: *color = x.t + 100 * x.p; *key = x.c + k->cp * x.d; break;
    case G_STAGE: *color = x.p; *key = x.s; break;
    case G_EP: *color = x.p + 100 * (x.s % etp + 100 * (x.s / (etp * ep))); *key = x.s / etp % ep; break;
    case G_EDP: *color = x.p + 100 * (x.s % etp + 100 * (x.s / etp % ep)); *key = x.s / (etp * ep); break;
    default: /* G_EMBD: the first and last stage of each pipeline */
        *color = x.p == 0 || x.p == k->pp - 1 ? x.t + 100 * x.c + 10000 * x.d : -1;
        *key = x.p;
        break;
    }
    (void)dp;
}

/* c must hold exactly the world ranks of `which` around world rank w, ranked by key. */
static int check(tri_comm *c, int which, const char *name, int w, int world, const cp_case *k, int dp)
{
    int64_t color, key, want[64], got[64];
    int n = 0, mine = -1;
    group_of(which, coords_of(w, k, dp), k, dp, &color, &key);
    /* members in key order: keys are distinct within a group, so sort by key */
    for (int64_t kk = 0; kk < 256 && n < world; kk++) /* keys are < 256 here */
        for (int v = 0; v < world; v++) {
            int64_t cv, kv;
            group_of(which, coords_of(v, k, dp), k, dp, &cv, &kv);
            if (cv == color && kv == kk) {
                if (v == w) mine = n;
                want[n++] = v;
            }
        }
    if (!c || c->size != n || c->rank != mine)
        return TRI_ERR(TRI_EINTERNAL, "rank %d: %s comm %s size %d rank %d, expected %d %d", w, name,
                       c ? "of" : "missing", c ? c->size : 0, c ? c->rank : 0, n, mine);
    memset(got, 0, sizeof got);
    got[c->rank] = w;
    int rc = tri_comm_host_all_reduce(c, got, TRI_I64, n, TRI_REDUCE_SUM);
    for (int i = 0; !rc && i < n; i++)
        if (got[i] != want[i])
            rc = TRI_ERR(TRI_EINTERNAL, "rank %d: %s group member %d is world rank %lld, expected %lld", w, name, i,
                         (long long)got[i], (long long)want[i]);
    return rc;
}

static int rank_fn(int rank, int size, tri_comm *world, void *arg)
{
    const cp_case *k = arg;
    tri_grid g;
    int rc = tri_grid_create_cp(&g, world, k->tp, k->cp, k->pp);
    if (!rc && (k->ep > 1 || k->etp > 1)) rc = tri_grid_add_experts_etp(&g, k->ep, k->etp);
    if (rc)
        return rc;
    int dp = size / (k->tp * k->cp * k->pp);
    coords x = coords_of(rank, k, dp);
    if (g.dp != dp || g.cp != k->cp || g.tp_rank != x.t || g.cp_rank != x.c || g.dp_rank != x.d ||
        g.pp_rank != x.p || tri_grid_world_rank_cp(k->tp, k->cp, dp, x.t, x.c, x.d, x.p) != rank)
        rc = TRI_ERR(TRI_EINTERNAL, "rank %d: coordinates dp %d tp %d cp %d dp %d pp %d", rank, g.dp, g.tp_rank,
                     g.cp_rank, g.dp_rank, g.pp_rank);
    if (!rc) rc = check(g.tp_comm, G_TP, "tp", rank, size, k, dp);
    if (!rc) rc = check(g.dp_comm, G_DP, "dp", rank, size, k, dp);
    if (!rc) rc = check(g.pp_comm, G_PP, "pp", rank, size, k, dp);
    if (!rc) rc = check(g.mp_comm, G_MP, "mp", rank, size, k, dp);
    if (!rc) rc = check(g.dp_cp_comm, G_DPCP, "dp x cp", rank, size, k, dp);
    if (!rc) rc = k->cp > 1 ? check(g.cp_comm, G_CP, "cp", rank, size, k, dp)
                            : g.cp_comm || g.dp_cp_comm != g.dp_comm ? TRI_ERR(TRI_EINTERNAL, "cp 1 comms") : TRI_OK;
    bool embd = x.p == 0 || x.p == k->pp - 1;
    if (!rc) rc = embd ? check(g.embd_comm, G_EMBD, "embd", rank, size, k, dp)
                       : g.embd_comm ? TRI_ERR(TRI_EINTERNAL, "rank %d: a middle stage's embd comm", rank) : TRI_OK;
    if (!rc && k->ep > 1) {
        int ranks = k->tp * k->cp * dp, st = x.s;
        if (g.ep != k->ep || g.edp != ranks / (k->ep * k->etp) || g.ep_rank != st / k->etp % k->ep ||
            g.edp_rank != st / (k->etp * k->ep))
            rc = TRI_ERR(TRI_EINTERNAL, "rank %d: ep %d rank %d, edp %d rank %d", rank, g.ep, g.ep_rank, g.edp,
                         g.edp_rank);
        if (!rc) rc = check(g.ep_comm, G_EP, "ep", rank, size, k, dp);
        if (!rc) rc = check(g.edp_comm, G_EDP, "edp", rank, size, k, dp);
        if (!rc && k->tp > 1) rc = check(g.stage_comm, G_STAGE, "stage", rank, size, k, dp);
    }
    tri_grid_destroy(&g);
    return rc;
}

Test(grid_cp, tp2_cp2)
{
    cp_case k = {2, 2, 1, 1, 1};
    cr_assert_eq(tri_run_thread_ranks(4, rank_fn, &k), TRI_OK, "%s", tri_error_message());
}

Test(grid_cp, cp2_pp2_dp2)
{
    cp_case k = {1, 2, 2, 1, 1};
    cr_assert_eq(tri_run_thread_ranks(8, rank_fn, &k), TRI_OK, "%s", tri_error_message());
}

Test(grid_cp, tp2_cp2_dp2)
{
    cp_case k = {2, 2, 1, 1, 1};
    cr_assert_eq(tri_run_thread_ranks(8, rank_fn, &k), TRI_OK, "%s", tri_error_message());
}

/* the experts fold tp x cp x dp: tp 1 cp 2 dp 2 ep 2 (from dp_cp_comm: ep = the cp pair), tp 2 cp 2
 * ep 2 (the stage comm: ep = the tp pair, edp spans cp), tp 2 cp 2 ep 2 etp 2 */
Test(grid_cp, cp2_with_ep2)
{
    cp_case a = {1, 2, 1, 2, 1};
    cr_assert_eq(tri_run_thread_ranks(4, rank_fn, &a), TRI_OK, "%s", tri_error_message());
    cp_case b = {2, 2, 1, 2, 1};
    cr_assert_eq(tri_run_thread_ranks(8, rank_fn, &b), TRI_OK, "%s", tri_error_message());
    cp_case c = {2, 2, 1, 2, 2};
    cr_assert_eq(tri_run_thread_ranks(8, rank_fn, &c), TRI_OK, "%s", tri_error_message());
}

/* cp 1 is the tp-dp-pp grid: the same coordinates and world ranks, the same comms (checked above by
 * the cp-free definitions with c = 0) */
Test(grid_cp, cp1_is_the_old_grid)
{
    for (int w = 0; w < 24; w++) {
        int t, d, p, t2, c2, d2, p2;
        tri_grid_coords(w, 2, 3, &t, &d, &p);
        tri_grid_coords_cp(w, 2, 1, 3, &t2, &c2, &d2, &p2);
        cr_assert(t == t2 && c2 == 0 && d == d2 && p == p2, "world rank %d", w);
        cr_assert_eq(tri_grid_world_rank_cp(2, 1, 3, t, 0, d, p), tri_grid_world_rank(2, 3, t, d, p));
    }
    cp_case k = {2, 1, 2, 1, 1};
    cr_assert_eq(tri_run_thread_ranks(8, rank_fn, &k), TRI_OK, "%s", tri_error_message());
}

static int refuse_fn(int rank, int size, tri_comm *world, void *arg)
{
    (void)size;
    const cp_case *k = arg;
    tri_grid g;
    int got = tri_grid_create_cp(&g, world, k->tp, k->cp, k->pp);
    const char *want = "world size 4 is not divisible by tensor-model-parallel-size 1 x context-parallel-size 3 "
                       "x pipeline-model-parallel-size 1 = 3";
    int rc = got == TRI_EINVAL && strstr(tri_error_message(), want)
                 ? TRI_OK
                 : TRI_ERR(TRI_EINTERNAL, "rank %d: got %d (%s)", rank, got, tri_error_message());
    if (!rc && (g.tp_comm || g.cp_comm || g.dp_cp_comm))
        rc = TRI_ERR(TRI_EINTERNAL, "rank %d: a refused grid split groups", rank);
    return rc;
}

Test(grid_cp, refusal)
{
    cp_case k = {1, 3, 1, 1, 1};
    cr_assert_eq(tri_run_thread_ranks(4, refuse_fn, &k), TRI_OK, "%s", tri_error_message());
}
