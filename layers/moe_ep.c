/* layers/moe_ep.c - the MoE block with its experts spread over an expert-parallel group: the token
 * exchange around the local experts (see moe_ep.h; docs/moe.md "Expert parallelism in the MoE
 * block"). The router, permutation, combine, losses and shared expert call the same device ops in
 * the same order as layers/moe.c, so a rank's tokens see the same bits as on one rank, in fp32 and
 * in bf16 (the buffers and the rows on the wire in shape.dtype). */
#include "layers/moe_ep.h"

#include <stdlib.h>

#include "engine/device/ops/moe_router_math.h"

/* ---- the exchange ---- */

/* Rows of C channels: rank q's block of `send_rows[q]` rows of in (packed in rank order) goes to q,
 * and `recv_rows[q]` rows from q land packed in rank order in out. */
int tri_moe_ep_exchange(tri_comm *ep, tri_tensor out, tri_tensor in, int64_t C, const int64_t *send_rows,
                        const int64_t *recv_rows)
{
    int64_t sc[TRI_MOE_MAX_EXPERTS], sd[TRI_MOE_MAX_EXPERTS], rcn[TRI_MOE_MAX_EXPERTS], rd[TRI_MOE_MAX_EXPERTS];
    for (int q = 0; q < ep->size; q++) {
        sc[q] = send_rows[q] * C;
        rcn[q] = recv_rows[q] * C;
    }
    tri_comm_displs(ep->size, sc, sd);
    tri_comm_displs(ep->size, rcn, rd);
    return tri_comm_all_to_all_v(ep, out, in, ep->size, sc, sd, rcn, rd);
}

/* The count matrix (rank q's tokens_per_expert in row q) summed over ep on the host, and from it
 * what this rank sends to and receives from each rank. */
static int exchange_counts(tri_comm *ep, const tri_moe_acts *a, tri_moe_ep_acts *ea, const tri_moe_shape *s)
{
    int64_t E = s->E;
    int n = ep->size, r = ep->rank;
    int64_t El = E / n;
    int64_t *m = calloc((size_t)n * (size_t)E, sizeof *m);
    if (!m)
        return TRI_ERR(TRI_ENOMEM, "moe: out of memory for the %d x %lld expert count matrix", n, (long long)E);
    for (int64_t e = 0; e < E; e++)
        m[r * E + e] = a->counts[e];
    int rc = tri_comm_host_all_reduce(ep, m, TRI_I64, n * E, TRI_REDUCE_SUM);
    ea->ep = n;
    ea->rank = r;
    ea->P = 0;
    for (int q = 0; q < n && !rc; q++) {
        ea->send_rows[q] = ea->recv_rows[q] = 0;
        for (int64_t j = 0; j < El; j++) {
            ea->send_rows[q] += a->counts[q * El + j];
            ea->recv_counts[q * El + j] = (int32_t)m[q * E + r * El + j];
            ea->recv_rows[q] += m[q * E + r * El + j];
        }
        ea->P += ea->recv_rows[q];
    }
    free(m);
    if (!rc && ea->P > tri_moe_ep_max_rows(s, n)) /* the buffers' bound (check_call keeps it) */
        rc = TRI_ERR(TRI_EINTERNAL, "moe: ep rank %d receives %lld rows, more than the %lld its buffers hold", r,
                     (long long)ea->P, (long long)tri_moe_ep_max_rows(s, n));
    return rc;
}

/* ---- forward and backward ---- */

/* layers/moe.c's checks (shape, dtypes, (N, C), the shared expert) plus the experts' count: the
 * weights hold this rank's E_l = E / ep experts. */
static int check_experts(tri_comm *ep, const tri_moe_config *cfg, const tri_moe_weights *w)
{
    const tri_moe_shape *s = &cfg->shape;
    int rc = tri_moe_ep_check(s, ep->size);
    if (rc)
        return rc;
    int64_t El = s->E / ep->size;
    if (w->gate_up_w.ndim != 3 || w->gate_up_w.shape[0] != El || w->down_w.ndim != 3 || w->down_w.shape[0] != El)
        return TRI_ERR(TRI_EINVAL, "moe: expert parallelism %d of %lld experts: the weights must hold E_l = %lld "
                       "experts, got gate_up_w %lld and down_w %lld", ep->size, (long long)s->E, (long long)El,
                       (long long)w->gate_up_w.shape[0], (long long)w->down_w.shape[0]);
    if (s->capacity > 0 && (cfg->capacity <= 0 || cfg->capacity > s->capacity))
        return TRI_ERR(TRI_EINVAL, "moe: the ep buffers hold capacity %lld rows an expert and source (shape.capacity) "
                       "but the routing keeps %lld (capacity, <= 0 dropless): set shape.capacity to the capacity or "
                       "<= 0", (long long)s->capacity, (long long)cfg->capacity);
    return TRI_OK;
}

/* Source q's rows [*row, *row + recv_rows[q]) of a (Pmax, cols) buffer. */
static tri_tensor rows_of(tri_tensor t, int64_t row, int64_t n)
{
    return tri_tensor_slice0(t, row, n);
}

int tri_moe_ep_forward(tri_device *d, tri_comm *ep, tri_tensor y, tri_moe_acts *a, tri_moe_ep_acts *ea,
                       const tri_moe_ep_scratch *es, tri_tensor x, const tri_moe_weights *w,
                       const tri_moe_config *cfg)
{
    const tri_moe_shape *s = &cfg->shape;
    int rc = tri_moe_check_call(cfg, x, y, "y", w);
    if (!rc) rc = check_experts(ep, cfg, w);
    /* router and the permutation into expert order: layers/moe.c's sequence */
    if (!rc) rc = tri_moe_route(d, a, x, w, cfg);
    /* dispatch: counts, then the rows to their experts' ranks */
    if (!rc) rc = exchange_counts(ep, a, ea, s);
    if (!rc) rc = tri_moe_ep_exchange(ep, ea->x_recv, a->x_perm, s->C, ea->send_rows, ea->recv_rows);
    /* the local experts, one grouped GEMM per source rank over its per-expert counts */
    int64_t El = s->E / ep->size, row = 0;
    for (int q = 0; q < ep->size && !rc; row += ea->recv_rows[q], q++)
        if (ea->recv_rows[q] > 0)
            rc = tri_op_grouped_matmul_forward(d, rows_of(ea->gate_up, row, ea->recv_rows[q]),
                                               rows_of(ea->x_recv, row, ea->recv_rows[q]), w->gate_up_w,
                                               &ea->recv_counts[q * El]);
    if (!rc && ea->P > 0)
        rc = tri_op_swiglu_forward(d, rows_of(ea->h, 0, ea->P), rows_of(ea->gate_up, 0, ea->P));
    row = 0;
    for (int q = 0; q < ep->size && !rc; row += ea->recv_rows[q], q++)
        if (ea->recv_rows[q] > 0)
            rc = tri_op_grouped_matmul_forward(d, rows_of(es->o_recv, row, ea->recv_rows[q]),
                                               rows_of(ea->h, row, ea->recv_rows[q]), w->down_w,
                                               &ea->recv_counts[q * El]);
    /* combine: the outputs back to their tokens' ranks, into expert order, then the weighted sum */
    if (!rc) rc = tri_moe_ep_exchange(ep, a->o, es->o_recv, s->C, ea->recv_rows, ea->send_rows);
    if (!rc) rc = tri_moe_combine(d, y, a, x, w, cfg);
    return rc;
}

int tri_moe_ep_backward(tri_device *d, tri_comm *ep, tri_tensor dx, const tri_moe_weights *g, tri_tensor dy,
                        const tri_moe_acts *a, const tri_moe_ep_acts *ea, tri_tensor x, const tri_moe_weights *w,
                        const tri_moe_scratch *sc, const tri_moe_ep_scratch *es, const tri_moe_config *cfg,
                        float loss_scale)
{
    const tri_moe_shape *s = &cfg->shape;
    int rc = tri_moe_check_backward(cfg, dx, g, dy, x, w, sc);
    if (!rc) rc = check_experts(ep, cfg, w);
    if (!rc && (ea->ep != ep->size || ea->rank != ep->rank))
        rc = TRI_ERR(TRI_EINVAL, "moe: the backward's ep group (rank %d of %d) is not the forward's (%d of %d)",
                     ep->rank, ep->size, ea->rank, ea->ep);
    /* combine's backward on this rank's tokens, then the outputs' gradient to the experts' ranks */
    if (!rc) rc = tri_op_moe_unpermute_backward(d, sc->d_o, sc->d_expert_w, dy, a->o, a->sorted_indices,
                                                a->row_id_map, a->expert_w);
    if (!rc) rc = tri_moe_ep_exchange(ep, es->o_recv, sc->d_o, s->C, ea->send_rows, ea->recv_rows);
    /* the local experts reversed, per source rank in rank order (the weight gradients accumulate the
     * sources' GEMMs in that order) */
    int64_t El = s->E / ep->size, row = 0;
    for (int q = 0; q < ep->size && !rc; row += ea->recv_rows[q], q++) {
        int64_t n = ea->recv_rows[q];
        const int32_t *cnt = &ea->recv_counts[q * El];
        if (n == 0)
            continue;
        rc = tri_op_grouped_matmul_backward_weight(d, g->down_w, rows_of(es->o_recv, row, n), rows_of(ea->h, row, n),
                                                    cnt, 1.0f);
        if (!rc) rc = tri_op_grouped_matmul_backward_input(d, rows_of(es->dh, row, n), rows_of(es->o_recv, row, n),
                                                           w->down_w, cnt, 0.0f);
    }
    if (!rc && ea->P > 0)
        rc = tri_op_swiglu_backward(d, rows_of(es->dgate_up, 0, ea->P), rows_of(ea->gate_up, 0, ea->P),
                                    rows_of(es->dh, 0, ea->P));
    row = 0;
    for (int q = 0; q < ep->size && !rc; row += ea->recv_rows[q], q++) {
        int64_t n = ea->recv_rows[q];
        const int32_t *cnt = &ea->recv_counts[q * El];
        if (n == 0)
            continue;
        rc = tri_op_grouped_matmul_backward_weight(d, g->gate_up_w, rows_of(es->dgate_up, row, n),
                                                    rows_of(ea->x_recv, row, n), cnt, 1.0f);
        /* o_recv is dead once the down GEMMs are done: the received rows' input gradient goes there */
        if (!rc) rc = tri_op_grouped_matmul_backward_input(d, rows_of(es->o_recv, row, n),
                                                           rows_of(es->dgate_up, row, n), w->gate_up_w, cnt, 0.0f);
    }
    /* the input gradient back to the tokens' ranks (into expert order), then layers/moe.c's tail */
    tri_tensor dx_perm = sc->d_o;
    if (!rc) rc = tri_moe_ep_exchange(ep, dx_perm, es->o_recv, s->C, ea->recv_rows, ea->send_rows);
    if (!rc) rc = tri_moe_route_backward(d, dx, dx_perm, g, dy, a, x, w, sc, cfg, loss_scale);
    return rc;
}
