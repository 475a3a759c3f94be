/* layers/moe_ep.h - the MoE block under expert parallelism: each rank of the ep group holds
 * E_l = E / ep consecutive experts and the tokens travel to their experts' ranks and back by
 * all-to-all with variable counts (GShard, Lepikhin et al. 2020; Switch Transformer, Fedus et al.
 * 2021; Megatron-Core's MoEAlltoAllTokenDispatcher and parallel folding).
 *
 * The router, the capacity, the permutation into expert order, the combine, the losses and the
 * shared expert are layers/moe.h's, on this rank's own N tokens with the whole router (E, C). What
 * changes is the experts' part:
 *   1. the (ep x E) matrix of per-expert row counts (every rank's tokens_per_expert) is summed over
 *      the ep group on the host: rank s sends rank r the rows of experts [r E_l, (r+1) E_l), already
 *      contiguous in x_perm (experts are in order and each rank's experts are consecutive);
 *   2. dispatch: one tri_comm_all_to_all_v; rows arrive by source rank, within a source by local
 *      expert, within an expert in the source's order (token order);
 *   3. the local experts' SwiGLU as one grouped GEMM *per source rank* over that source's per-expert
 *      counts: each GEMM batch is exactly the rows that expert gets from that source's micro-batch,
 *      as on one rank (the batches do not depend on the layout);
 *   4. combine: the outputs go back with the send and receive counts swapped, then the weighted sum.
 * Backward: the combine's gradient is dispatched the same way, the experts' backward runs per source
 * (each weight gradient accumulates the sources' GEMMs in source-rank order: the order in which the
 * one-rank run meets those micro-batches), and the input gradient is sent back. The counts are read
 * back to the host once per layer and pass (the forward's tokens_per_expert read, as on one rank)
 * plus the count matrix's host all-reduce; nothing else waits for the device.
 *
 * Buffers: the received rows' buffers are sized for the most rows a rank can receive,
 * tri_moe_ep_max_rows: from each of the ep sources at most N min(K, E_l) rows (a token selects an
 * expert once, so at most min(K, E_l) of its K copies come here: dropless, every source's tokens
 * routed to this rank's experts) and, with a capacity, at most E_l capacity rows (Megatron's token
 * dropping bounds each expert's rows per source). The partitioner plans the same function
 * (models/block_cost.c). Precision as moe.h's
 * shape.dtype: under bf16 (Megatron-LM's --bf16) the received rows, their gate|up, h and outputs
 * and their gradients are bf16, so the rows travel in bf16 (half fp32's bytes on the wire); the
 * router, the count matrix (int64, host) and the experts' weight gradients (fp32, and the exact
 * sums) are as at fp32. Letters as in moe.h; P the rows this rank receives. */
#ifndef TRIDENT_LAYERS_MOE_EP_H
#define TRIDENT_LAYERS_MOE_EP_H

#include "engine/comm/comm.h"
#include "layers/moe.h"

/* Kept from the forward for the backward (beside tri_moe_acts, per layer and micro-batch). */
typedef struct tri_moe_ep_acts {
    tri_tensor x_recv;    /* (Pmax, C) shape.dtype (so the two below): the P rows received, by source, local expert, token order;
                             Pmax = tri_moe_ep_max_rows */
    tri_tensor gate_up;   /* (Pmax, 2I) */
    tri_tensor h;         /* (Pmax, I), silu(gate) * up */
    int ep, rank;         /* the group's size and this rank's index in it when the forward ran */
    int64_t P;            /* rows received */
    int64_t send_rows[TRI_MOE_MAX_EXPERTS];  /* per ep rank: rows sent to it (ep <= E) */
    int64_t recv_rows[TRI_MOE_MAX_EXPERTS];  /* per ep rank: rows received from it */
    int32_t recv_counts[TRI_MOE_MAX_EXPERTS]; /* [s E_l + j]: rows of local expert j from source s */
} tri_moe_ep_acts;

/* Backward-only buffers (reusable across layers). */
typedef struct tri_moe_ep_scratch {
    tri_tensor o_recv;    /* (Pmax, C) shape.dtype (so the two below): the experts' outputs, in the backward their gradient, then
                             the received rows' input gradient */
    tri_tensor dh;        /* (Pmax, I) */
    tri_tensor dgate_up;  /* (Pmax, 2I) */
} tri_moe_ep_scratch;

/* TRI_OK when s (E the whole model's experts) can run on an ep group of `ep` ranks: the shape is
 * valid (tri_moe_check_shape) and ep >= 1 divides E; else TRI_EINVAL naming the values. */
int tri_moe_ep_check(const tri_moe_shape *s, int ep);
/* The most rows (of C channels) a rank of an ep group receives in one exchange for shape s:
 * ep min(N min(K, E_l), E_l capacity) with E_l = E / ep (capacity <= 0: dropless, ep N min(K, E_l)).
 * What the engine's buffers hold and the partitioner plans; 0 when tri_moe_ep_check refuses. */
int64_t tri_moe_ep_max_rows(const tri_moe_shape *s, int ep);
/* Bytes of the ep activations and of the ep scratch for shape s on ep ranks, each buffer aligned to
 * TRI_MOE_ALIGN: what tri_moe_ep_bind carves. 0 when tri_moe_ep_check refuses. */
size_t tri_moe_ep_acts_bytes(const tri_moe_shape *s, int ep);
size_t tri_moe_ep_scratch_bytes(const tri_moe_shape *s, int ep);
/* Points ea's tensors into ea_mem and (when given) es's into es_mem. TRI_EINVAL as tri_moe_ep_check. */
int tri_moe_ep_bind(const tri_moe_shape *s, int ep, tri_moe_ep_acts *ea, void *ea_mem, tri_moe_ep_scratch *es,
                    void *es_mem);

/* y(N, C) = the MoE block of x(N, C) with the experts spread over ep (rank r holds experts
 * [r E_l, (r+1) E_l)): w->router_w (E, C) whole, w->gate_up_w (E_l, 2I, C) and w->down_w (E_l, C, I)
 * this rank's experts; cfg->shape.E the whole model's E. Collective over ep (every rank calls it for
 * the same layer; ranks may route different N-token batches of the same shape). x, y and the weights in
 * cfg->shape.dtype (fp32 or bf16, as tri_moe_forward). Fills acts (router, permutation, counts, o) as
 * tri_moe_forward does and ea; uses es->o_recv. TRI_EINVAL naming the argument on a shape, dtype or
 * expert count that does not fit (tri_moe_check_call's checks, then E_l), or a cfg->capacity the
 * buffers of cfg->shape.capacity do not hold (before anything is sent). */
int tri_moe_ep_forward(tri_device *d, tri_comm *ep, tri_tensor y, tri_moe_acts *acts, tri_moe_ep_acts *ea,
                       const tri_moe_ep_scratch *es, tri_tensor x, const tri_moe_weights *w,
                       const tri_moe_config *cfg);

/* dx(N, C) (overwritten) and every parameter gradient in g (+=; the experts' as this rank's E_l)
 * given dy, as tri_moe_backward; collective over ep. In deterministic mode (g's tensors int64 exact
 * sums, engine/device/ops/exact_grads.c) each source rank's expert GEMM is rounded once. */
int tri_moe_ep_backward(tri_device *d, tri_comm *ep, tri_tensor dx, const tri_moe_weights *g, tri_tensor dy,
                        const tri_moe_acts *acts, const tri_moe_ep_acts *ea, tri_tensor x, const tri_moe_weights *w,
                        const tri_moe_scratch *scratch, const tri_moe_ep_scratch *es, const tri_moe_config *cfg,
                        float loss_scale);

/* The exchange's two steps, shared with the expert-tensor-parallel block (layers/moe_etp.h):
 * tri_moe_ep_exchange sends rank q the block of send_rows[q] rows (of C values) of `in` (packed in rank
 * order) and receives recv_rows[q] rows from q packed in rank order into `out` (one all_to_all_v). */
int tri_moe_ep_exchange(tri_comm *ep, tri_tensor out, tri_tensor in, int64_t C, const int64_t *send_rows,
                        const int64_t *recv_rows);

#endif
