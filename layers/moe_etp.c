/* layers/moe_etp.c - the MoE block with expert tensor parallelism (see moe_etp.h; docs/moe.md "Expert
 * tensor parallelism"): the etp group's all-gather of the dispatched rows, the slices' grouped GEMMs per
 * block, and the reduce-scatter of the partial outputs as an all_to_all_v plus adds in etp rank order,
 * around layers/moe_ep.c's exchange. Router, permutation, combine and losses are layers/moe.c's. */
#include "layers/moe_etp.h"

#include <stdlib.h>

/* ---- counts ---- */

/* This rank's block: at ep > 1 layers/moe_ep.c's count matrix over ep (what it sends to and receives
 * from each ep rank, and per source its local experts' counts); at ep 1 its own tokens_per_expert. Then
 * every etp peer's block counts by a host all-reduce of the (etp, E) matrix. */
static int exchange_counts(tri_comm *ep, tri_comm *etp, const tri_moe_acts *a, tri_moe_etp_acts *ea,
                           const tri_moe_shape *s)
{
    int64_t E = s->E;
    int n = ep ? ep->size : 1, r = ep ? ep->rank : 0, T = etp->size, t0 = etp->rank;
    int64_t El = E / n;
    int64_t *m = calloc((size_t)(n > T ? n : T) * (size_t)E, sizeof *m);
    if (!m)
        return TRI_ERR(TRI_ENOMEM, "moe: out of memory for the expert count matrices (%lld values)",
                       (long long)((n > T ? n : T) * E));
    ea->ep = n, ea->ep_rank = r, ea->etp = T, ea->etp_rank = t0;
    int rc = TRI_OK;
    int64_t mine[TRI_MOE_MAX_EXPERTS]; /* [q El + j]: local expert j's rows from ep source q */
    if (n > 1) {
        for (int64_t e = 0; e < E; e++)
            m[r * E + e] = a->counts[e];
        rc = tri_comm_host_all_reduce(ep, m, TRI_I64, n * E, TRI_REDUCE_SUM);
        for (int q = 0; q < n && !rc; q++) {
            ea->send_rows[q] = ea->recv_rows[q] = 0;
            for (int64_t j = 0; j < El; j++) {
                ea->send_rows[q] += a->counts[q * El + j];
                mine[q * El + j] = m[q * E + r * El + j];
                ea->recv_rows[q] += mine[q * El + j];
            }
        }
    } else {
        for (int64_t e = 0; e < E; e++)
            mine[e] = a->counts[e];
    }
    for (int64_t i = 0; i < T * E && !rc; i++)
        m[i] = 0;
    for (int64_t i = 0; i < E && !rc; i++)
        m[t0 * E + i] = mine[i];
    if (!rc) rc = tri_comm_host_all_reduce(etp, m, TRI_I64, T * E, TRI_REDUCE_SUM);
    ea->Pg = 0;
    for (int t = 0; t < T && !rc; t++) {
        ea->peer_rows[t] = 0;
        for (int64_t i = 0; i < E; i++) {
            ea->counts[t * E + i] = (int32_t)m[t * E + i];
            ea->peer_rows[t] += m[t * E + i];
        }
        ea->Pg += ea->peer_rows[t];
    }
    ea->P = rc ? 0 : ea->peer_rows[t0];
    free(m);
    if (!rc && ea->Pg > tri_moe_etp_max_rows(s, n, T)) /* the buffers' bound (check_experts keeps it) */
        rc = TRI_ERR(TRI_EINTERNAL, "moe: etp rank %d gathers %lld rows, more than the %lld its buffers hold", t0,
                     (long long)ea->Pg, (long long)tri_moe_etp_max_rows(s, n, T));
    return rc;
}

/* ---- the etp collectives ---- */

/* All-gather of each etp rank's `rows` rows (of C) at the start of `in` into out, peer t's at the t-th
 * place (rows peer_rows[t]). */
static int etp_gather(tri_comm *etp, tri_tensor out, tri_tensor in, int64_t C, const tri_moe_etp_acts *ea)
{
    int64_t sc[TRI_MOE_MAX_ETP], sd[TRI_MOE_MAX_ETP], rcn[TRI_MOE_MAX_ETP], rd[TRI_MOE_MAX_ETP];
    for (int t = 0; t < etp->size; t++) {
        sc[t] = ea->P * C; /* the same block to everyone */
        sd[t] = 0;
        rcn[t] = ea->peer_rows[t] * C;
    }
    tri_comm_displs(etp->size, rcn, rd);
    return tri_comm_all_to_all_v(etp, out, in, etp->size, sc, sd, rcn, rd);
}

/* The reduce-scatter of the partial sums `in` (Pg rows, peer t's block at the t-th place) into dst
 * (this rank's P rows): peer t's block goes to t, the etp blocks received land in part (P rows each, in
 * etp rank order) and are added in that order. */
static int etp_reduce_scatter(tri_device *d, tri_comm *etp, tri_tensor dst, tri_tensor in, tri_tensor part,
                              int64_t C, const tri_moe_etp_acts *ea)
{
    int T = etp->size;
    int64_t sc[TRI_MOE_MAX_ETP], sd[TRI_MOE_MAX_ETP], rcn[TRI_MOE_MAX_ETP], rd[TRI_MOE_MAX_ETP];
    for (int t = 0; t < T; t++) {
        sc[t] = ea->peer_rows[t] * C;
        rcn[t] = ea->P * C;
        rd[t] = t * ea->P * C;
    }
    tri_comm_displs(T, sc, sd);
    int rc = tri_comm_all_to_all_v(etp, part, in, T, sc, sd, rcn, rd);
    if (rc || ea->P == 0)
        return rc;
    tri_tensor out = tri_tensor_slice0(dst, 0, ea->P);
    if (T == 1)
        return tri_op_convert(d, out, tri_tensor_slice0(part, 0, ea->P));
    rc = tri_op_add(d, out, tri_tensor_slice0(part, 0, ea->P), tri_tensor_slice0(part, ea->P, ea->P));
    for (int t = 2; t < T && !rc; t++)
        rc = tri_op_add(d, out, out, tri_tensor_slice0(part, t * ea->P, ea->P));
    return rc;
}

/* ---- forward and backward ---- */

static int check_experts(tri_comm *ep, tri_comm *etp, const tri_moe_config *cfg, const tri_moe_weights *w)
{
    const tri_moe_shape *s = &cfg->shape;
    int n = ep ? ep->size : 1;
    if (!etp)
        return TRI_ERR(TRI_EINVAL, "moe: the expert-tensor-parallel block needs its etp comm");
    int rc = tri_moe_etp_check(s, n, etp->size);
    if (rc)
        return rc;
    int64_t El = s->E / n;
    if (w->gate_up_w.ndim != 3 || w->gate_up_w.shape[0] != El || w->gate_up_w.shape[1] != 2 * s->I ||
        w->down_w.ndim != 3 || w->down_w.shape[0] != El || w->down_w.shape[2] != s->I)
        return TRI_ERR(TRI_EINVAL, "moe: expert tensor parallelism %d, expert parallelism %d of %lld experts: the weights "
                       "must be gate_up_w (E_l, 2I, C) = (%lld, %lld, C) and down_w (E_l, C, I) with I the slice %lld",
                       etp->size, n, (long long)s->E, (long long)El, (long long)(2 * s->I), (long long)s->I);
    if (s->capacity > 0 && (cfg->capacity <= 0 || cfg->capacity > s->capacity))
        return TRI_ERR(TRI_EINVAL, "moe: the etp buffers hold capacity %lld rows an expert and source (shape.capacity) "
                       "but the routing keeps %lld (capacity, <= 0 dropless)", (long long)s->capacity,
                       (long long)cfg->capacity);
    return TRI_OK;
}

/* Block b = (t, q)'s rows and per-expert counts: b in [0, etp ep), rows from *row. */
static int64_t block_rows(const tri_moe_etp_acts *ea, int64_t E, int b, const int32_t **cnt)
{
    int64_t El = E / ea->ep, n = 0;
    *cnt = &ea->counts[(b / ea->ep) * E + (b % ea->ep) * El];
    for (int64_t j = 0; j < El; j++)
        n += (*cnt)[j];
    return n;
}

int tri_moe_etp_forward(tri_device *d, tri_comm *ep, tri_comm *etp, tri_tensor y, tri_moe_acts *a,
                        tri_moe_etp_acts *ea, const tri_moe_etp_scratch *es, tri_tensor x, const tri_moe_weights *w,
                        const tri_moe_config *cfg)
{
    const tri_moe_shape *s = &cfg->shape;
    if (ep && ep->size == 1)
        ep = NULL;
    int rc = tri_moe_check_call(cfg, x, y, "y", w);
    if (!rc) rc = check_experts(ep, etp, cfg, w);
    if (!rc) rc = tri_moe_route(d, a, x, w, cfg);
    if (!rc) rc = exchange_counts(ep, etp, a, ea, s);
    /* this rank's rows: dispatched over ep into part, or its own permuted rows */
    tri_tensor mine = ep ? es->part : a->x_perm;
    if (!rc && ep) rc = tri_moe_ep_exchange(ep, es->part, a->x_perm, s->C, ea->send_rows, ea->recv_rows);
    if (!rc) rc = etp_gather(etp, ea->x_g, mine, s->C, ea);
    /* the slices of the local experts on every block */
    int nb = ea->etp * ea->ep;
    int64_t row = 0;
    for (int b = 0; b < nb && !rc; b++) {
        const int32_t *cnt;
        int64_t n = block_rows(ea, s->E, b, &cnt);
        if (n > 0)
            rc = tri_op_grouped_matmul_forward(d, tri_tensor_slice0(ea->gate_up, row, n),
                                               tri_tensor_slice0(ea->x_g, row, n), w->gate_up_w, cnt);
        row += n;
    }
    if (!rc && ea->Pg > 0)
        rc = tri_op_swiglu_forward(d, tri_tensor_slice0(ea->h, 0, ea->Pg), tri_tensor_slice0(ea->gate_up, 0, ea->Pg));
    row = 0;
    for (int b = 0; b < nb && !rc; b++) {
        const int32_t *cnt;
        int64_t n = block_rows(ea, s->E, b, &cnt);
        if (n > 0)
            rc = tri_op_grouped_matmul_forward(d, tri_tensor_slice0(es->o_g, row, n),
                                               tri_tensor_slice0(ea->h, row, n), w->down_w, cnt);
        row += n;
    }
    /* the partial outputs summed over etp into this rank's rows: a->o at ep 1, else o_g's first P rows
     * (its blocks were sent) and back over ep into a->o */
    tri_tensor dst = ep ? es->o_g : a->o;
    if (!rc) rc = etp_reduce_scatter(d, etp, dst, es->o_g, es->part, s->C, ea);
    if (!rc && ep) rc = tri_moe_ep_exchange(ep, a->o, es->o_g, s->C, ea->recv_rows, ea->send_rows);
    if (!rc) rc = tri_moe_combine(d, y, a, x, w, cfg);
    return rc;
}

int tri_moe_etp_backward(tri_device *d, tri_comm *ep, tri_comm *etp, tri_tensor dx, const tri_moe_weights *g,
                         tri_tensor dy, const tri_moe_acts *a, const tri_moe_etp_acts *ea, tri_tensor x,
                         const tri_moe_weights *w, const tri_moe_scratch *sc, const tri_moe_etp_scratch *es,
                         const tri_moe_config *cfg, float loss_scale)
{
    const tri_moe_shape *s = &cfg->shape;
    if (ep && ep->size == 1)
        ep = NULL;
    int rc = tri_moe_check_backward(cfg, dx, g, dy, x, w, sc);
    if (!rc) rc = check_experts(ep, etp, cfg, w);
    if (!rc && (ea->ep != (ep ? ep->size : 1) || ea->ep_rank != (ep ? ep->rank : 0) || ea->etp != etp->size ||
                ea->etp_rank != etp->rank))
        rc = TRI_ERR(TRI_EINVAL, "moe: the backward's groups (ep rank %d of %d, etp rank %d of %d) are not the "
                     "forward's (%d of %d, %d of %d)", ep ? ep->rank : 0, ep ? ep->size : 1, etp->rank, etp->size,
                     ea->ep_rank, ea->ep, ea->etp_rank, ea->etp);
    /* the combine's backward, the outputs' gradient to the experts' ranks, gathered over etp into o_g */
    if (!rc) rc = tri_op_moe_unpermute_backward(d, sc->d_o, sc->d_expert_w, dy, a->o, a->sorted_indices,
                                                a->row_id_map, a->expert_w);
    tri_tensor mine = ep ? es->part : sc->d_o;
    if (!rc && ep) rc = tri_moe_ep_exchange(ep, es->part, sc->d_o, s->C, ea->send_rows, ea->recv_rows);
    if (!rc) rc = etp_gather(etp, es->o_g, mine, s->C, ea);
    /* the slices reversed, block by block in block order (the weight gradients add the blocks in it) */
    int nb = ea->etp * ea->ep;
    int64_t row = 0;
    for (int b = 0; b < nb && !rc; b++) {
        const int32_t *cnt;
        int64_t n = block_rows(ea, s->E, b, &cnt);
        if (n > 0) {
            rc = tri_op_grouped_matmul_backward_weight(d, g->down_w, tri_tensor_slice0(es->o_g, row, n),
                                                        tri_tensor_slice0(ea->h, row, n), cnt, 1.0f);
            if (!rc) rc = tri_op_grouped_matmul_backward_input(d, tri_tensor_slice0(es->dh, row, n),
                                                               tri_tensor_slice0(es->o_g, row, n), w->down_w, cnt, 0.0f);
        }
        row += n;
    }
    if (!rc && ea->Pg > 0)
        rc = tri_op_swiglu_backward(d, tri_tensor_slice0(es->dgate_up, 0, ea->Pg),
                                    tri_tensor_slice0(ea->gate_up, 0, ea->Pg), tri_tensor_slice0(es->dh, 0, ea->Pg));
    row = 0;
    for (int b = 0; b < nb && !rc; b++) {
        const int32_t *cnt;
        int64_t n = block_rows(ea, s->E, b, &cnt);
        if (n > 0) {
            rc = tri_op_grouped_matmul_backward_weight(d, g->gate_up_w, tri_tensor_slice0(es->dgate_up, row, n),
                                                        tri_tensor_slice0(ea->x_g, row, n), cnt, 1.0f);
            /* o_g is dead once the down GEMMs are done: the slice's partial input gradient goes there */
            if (!rc) rc = tri_op_grouped_matmul_backward_input(d, tri_tensor_slice0(es->o_g, row, n),
                                                               tri_tensor_slice0(es->dgate_up, row, n), w->gate_up_w,
                                                               cnt, 0.0f);
        }
        row += n;
    }
    /* the partials summed over etp into this rank's rows (sc->d_o, dead, at ep 1; o_g's first P rows then
     * back over ep into sc->d_o), then layers/moe.c's tail */
    tri_tensor dx_perm = sc->d_o;
    tri_tensor dst = ep ? es->o_g : dx_perm;
    if (!rc) rc = etp_reduce_scatter(d, etp, dst, es->o_g, es->part, s->C, ea);
    if (!rc && ep) rc = tri_moe_ep_exchange(ep, dx_perm, es->o_g, s->C, ea->recv_rows, ea->send_rows);
    if (!rc) rc = tri_moe_route_backward(d, dx, dx_perm, g, dy, a, x, w, sc, cfg, loss_scale);
    return rc;
}
