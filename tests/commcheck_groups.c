/* tests/commcheck_groups.c - the comm contract checks of making groups: tri_comm_split, and the
 * process grid built on it (see commcheck.h). */
#include "tests/commcheck.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine/comm/grid.h"
#include "tests/commcheck_util.h"

/* ---- split ---- */

/* Splits `parent` with colors[r] and keys[r] given for every parent rank r and checks the new comm
 * against the rule: the ranks of one color, ordered by key and then by parent rank; color < 0 gives
 * NULL. Members are read back by all-gathering parent ranks through the new comm. *out is the new
 * comm (the caller destroys it). A rank left without a comm it should have returns TRI_ECOMM at
 * once: its group's other members would wait for it. */
static int split_case(cc_verdict *v, tri_comm *parent, const int *colors, const int *keys, tri_comm **out,
                      const char *what)
{
    int me = parent->rank, n = parent->size, count = 0, my_index = -1;
    int32_t *members = cc_ints(n);
    for (int r = 0; r < n; r++) {
        if (colors[me] < 0 || colors[r] != colors[me])
            continue;
        int at = count++; /* insertion sort by (key, parent rank): r grows, so equal keys stay in order */
        while (at > 0 && keys[members[at - 1]] > keys[r]) {
            members[at] = members[at - 1];
            at--;
        }
        members[at] = r;
    }
    for (int k = 0; k < count; k++)
        if (members[k] == me)
            my_index = k;
    int rc = tri_comm_split(parent, colors[me], keys[me], out);
    if (!rc && colors[me] < 0 && *out)
        cc_fail(v, "%s: color %d gave a comm, want NULL", what, colors[me]);
    if (!rc && colors[me] >= 0 && !*out)
        rc = TRI_ERR(TRI_ECOMM, "%s: color %d gave NULL, want a comm of %d", what, colors[me], count);
    if (!rc && *out) {
        /* every rank holding a comm gathers through it, whatever it finds, so that a wrong split
         * cannot leave some members waiting in the all_gather */
        tri_comm *s = *out;
        cc_snapshot zero = {{0}, {0}};
        cc_expect_counted(v, s, &zero, TRI_COMM_KINDS, 0, 0, "a new comm's counters");
        int32_t mine = me;
        cc_buf got = cc_buf_make(TRI_I32, 1, s->size);
        rc = tri_comm_all_gather(s, got.t, tri_tensor_1d(&mine, TRI_I32, 1));
        if (!rc && colors[me] >= 0 && (s->size != count || s->rank != my_index))
            cc_fail(v, "%s: rank %d of %d in the new comm, want %d of %d", what, s->rank, s->size, my_index,
                    count);
        else if (!rc && colors[me] >= 0)
            cc_expect_buf(v, &got, members, what);
        cc_buf_free(&got);
    }
    free(members);
    return rc;
}

int cc_split(tri_comm *c)
{
    cc_verdict v = cc_verdict_start("split", c);
    int n = c->size, me = c->rank;
    int *colors = calloc((size_t)n, sizeof *colors), *keys = calloc((size_t)n, sizeof *keys);
    tri_comm *a = NULL, *b = NULL, *s = NULL;
    int rc = TRI_OK;
    /* parity groups, ordered by rank */
    for (int r = 0; r < n; r++)
        colors[r] = r % 2, keys[r] = r;
    rc = split_case(&v, c, colors, keys, &a, "split by parity");
    /* nested: each parity group split into halves, reversed */
    if (!rc && a) {
        int an = a->size;
        int *ac = calloc((size_t)an, sizeof *ac), *ak = calloc((size_t)an, sizeof *ak);
        for (int q = 0; q < an; q++)
            ac[q] = q < (an + 1) / 2 ? 0 : 1, ak[q] = -q;
        rc = split_case(&v, a, ac, ak, &b, "nested split of a parity group into reversed halves");
        free(ac);
        free(ak);
    }
    tri_comm_destroy(b);
    tri_comm_destroy(a);
    a = b = NULL;
    /* one group, reversed keys */
    for (int r = 0; r < n && !rc; r++)
        colors[r] = 0, keys[r] = n - r;
    if (!rc)
        rc = split_case(&v, c, colors, keys, &s, "split with reversed keys");
    tri_comm_destroy(s);
    s = NULL;
    /* equal keys: parent order */
    for (int r = 0; r < n && !rc; r++)
        colors[r] = 2 * (r % 3), keys[r] = 7;
    if (!rc)
        rc = split_case(&v, c, colors, keys, &s, "split with equal keys");
    tri_comm_destroy(s);
    s = NULL;
    /* color < 0 on every third rank, the others in two reversed groups */
    for (int r = 0; r < n && !rc; r++)
        colors[r] = r % 3 == 1 ? -1 : r % 2, keys[r] = -r;
    if (!rc)
        rc = split_case(&v, c, colors, keys, &s, "split with color < 0 on some ranks");
    tri_comm_destroy(s);
    s = NULL;
    /* every rank alone, then a split of that one-rank comm, which must work */
    for (int r = 0; r < n && !rc; r++)
        colors[r] = r, keys[r] = 0;
    if (!rc)
        rc = split_case(&v, c, colors, keys, &a, "split into one-rank comms");
    if (!rc && a) {
        int one_color = 5, one_key = 0, none = -1;
        rc = split_case(&v, a, &one_color, &one_key, &b, "split of a one-rank comm");
        if (!rc) {
            tri_comm *nothing = NULL;
            rc = split_case(&v, a, &none, &one_key, &nothing, "split of a one-rank comm, color -1");
            tri_comm_destroy(nothing);
        }
        if (!rc && b) {
            int32_t x = me;
            rc = tri_comm_all_reduce(b, tri_tensor_1d(&x, TRI_I32, 1), TRI_REDUCE_SUM);
            if (!rc && x != me)
                cc_fail(&v, "all_reduce on a one-rank comm gave %d, want %d", x, me);
        }
    }
    tri_comm_destroy(b);
    tri_comm_destroy(a);
    free(colors);
    free(keys);
    return cc_verdict_end(&v, rc);
}

/* ---- process grid ---- */

typedef struct coord {
    int t, d, p; /* tp, dp, pp rank */
} coord;

typedef enum { G_TP, G_PP, G_DP, G_MP, G_EMBD } group_kind;

static bool is_end(int p, int pp)
{
    return p == 0 || p == pp - 1;
}

/* Whether world ranks at a and b belong to the same group of this kind (the groups' definitions). */
static bool same_group(group_kind kind, coord a, coord b, int pp)
{
    switch (kind) {
    case G_TP: return a.d == b.d && a.p == b.p;
    case G_PP: return a.t == b.t && a.d == b.d;
    case G_DP: return a.t == b.t && a.p == b.p;
    case G_MP: return a.d == b.d;
    case G_EMBD: return a.t == b.t && a.d == b.d && is_end(a.p, pp) && is_end(b.p, pp);
    }
    return false;
}

/* `group` is this rank's group of `kind`: its members (ranks sharing the group, by world rank, which
 * is also the order of the group's own coordinate) and this rank's place among them, with
 * `want_size` members. */
static int grid_group_case(cc_verdict *v, const tri_grid *g, const coord *all, tri_comm *group,
                           group_kind kind, int want_size, const char *what)
{
    int n = g->world_size, me = g->world_rank, count = 0, my_index = -1;
    bool member = kind != G_EMBD || is_end(all[me].p, g->pp);
    if (!member && group)
        cc_fail(v, "%s: a middle stage (pp_rank %d of %d) has an embedding group", what, all[me].p, g->pp);
    if (member && !group)
        return TRI_ERR(TRI_ECOMM, "%s: missing on world rank %d", what, me);
    if (!group)
        return TRI_OK;
    int32_t *members = cc_ints(n);
    for (int r = 0; r < n; r++)
        if (same_group(kind, all[me], all[r], g->pp)) {
            if (r == me)
                my_index = count;
            members[count++] = r;
        }
    if (member && count != want_size)
        cc_fail(v, "%s: the definition gives %d members, want %d (test bug)", what, count, want_size);
    /* every rank holding a group gathers through it, whatever it finds (see split_case) */
    int32_t mine = me;
    cc_buf got = cc_buf_make(TRI_I32, 1, group->size);
    int rc = tri_comm_all_gather(group, got.t, tri_tensor_1d(&mine, TRI_I32, 1));
    if (!rc && member && (group->size != count || group->rank != my_index))
        cc_fail(v, "%s: world rank %d is rank %d of %d, want %d of %d", what, me, group->rank, group->size,
                my_index, count);
    else if (!rc && member)
        cc_expect_buf(v, &got, members, what);
    cc_buf_free(&got);
    free(members);
    return rc;
}

int cc_grid(tri_comm *world, int tp, int pp)
{
    char name[64];
    snprintf(name, sizeof name, "grid tp=%d pp=%d", tp, pp);
    cc_verdict v = cc_verdict_start(name, world);
    int n = world->size, dp = n / (tp * pp), me = world->rank;
    /* Megatron's order by enumeration: pipeline stage outermost, then data-parallel replica, then
     * tensor-parallel rank fastest. */
    coord *all = calloc((size_t)n, sizeof *all);
    int r = 0;
    for (int p = 0; p < pp; p++)
        for (int d = 0; d < dp; d++)
            for (int t = 0; t < tp; t++)
                all[r++] = (coord){t, d, p};
    tri_grid g;
    int rc = tri_grid_create(&g, world, tp, pp);
    if (rc) {
        free(all);
        return cc_verdict_end(&v, rc);
    }
    if (g.tp != tp || g.pp != pp || g.dp != dp || g.world_size != n || g.world_rank != me || g.world != world)
        cc_fail(&v, "sizes %dx%dx%d of %d, world rank %d; want %dx%dx%d of %d, %d", g.tp, g.pp, g.dp,
                g.world_size, g.world_rank, tp, pp, dp, n, me);
    if (g.tp_rank != all[me].t || g.dp_rank != all[me].d || g.pp_rank != all[me].p)
        cc_fail(&v, "world rank %d has (tp, dp, pp) ranks (%d, %d, %d), want (%d, %d, %d)", me, g.tp_rank,
                g.dp_rank, g.pp_rank, all[me].t, all[me].d, all[me].p);
    rc = grid_group_case(&v, &g, all, g.tp_comm, G_TP, tp, "tp group");
    if (!rc) rc = grid_group_case(&v, &g, all, g.pp_comm, G_PP, pp, "pp group");
    if (!rc) rc = grid_group_case(&v, &g, all, g.dp_comm, G_DP, dp, "dp group");
    if (!rc) rc = grid_group_case(&v, &g, all, g.mp_comm, G_MP, tp * pp, "model-parallel group");
    if (!rc) rc = grid_group_case(&v, &g, all, g.embd_comm, G_EMBD, pp == 1 ? 1 : 2, "embedding group");
    tri_grid_destroy(&g);
    if (g.tp_comm || g.pp_comm || g.dp_comm || g.mp_comm || g.embd_comm)
        cc_fail(&v, "tri_grid_destroy left a group pointer set");
    free(all);
    return cc_verdict_end(&v, rc);
}

int cc_grid_layouts(tri_comm *world)
{
    cc_verdict v = cc_verdict_start("grid layouts", world);
    int n = world->size, rc = TRI_OK;
    for (int tp = 1; tp <= n && !rc; tp++)
        for (int pp = 1; pp <= n && !rc; pp++) {
            if (n % (tp * pp) != 0)
                continue;
            rc = cc_grid(world, tp, pp);
            if (rc == TRI_EINTERNAL) { /* wrong values: record them and go on in step with the others */
                cc_fail(&v, "%s", tri_error_message());
                rc = TRI_OK;
            }
        }
    if (rc) /* cc_grid's message already names the layout and the rank */
        return rc;
    const int bad[4][2] = {{0, 1}, {1, 0}, {-2, 1}, {n + 1, 1}}; /* (tp, pp) */
    for (int i = 0; i < 4; i++) {
        int tp = bad[i][0], pp = bad[i][1];
        tri_grid g;
        memset(&g, 0xff, sizeof g);
        char what[64];
        snprintf(what, sizeof what, "grid tp=%d pp=%d on %d ranks", tp, pp, n);
        cc_expect_status(&v, tri_grid_create(&g, world, tp, pp), TRI_EINVAL,
                         i < 3 ? "must be >= 1" : "not divisible", what);
        if (g.tp_comm || g.pp_comm || g.dp_comm || g.mp_comm || g.embd_comm)
            cc_fail(&v, "%s: a failed tri_grid_create left group pointers set", what);
    }
    return cc_verdict_end(&v, rc);
}
