/* layers/moe_etp.h - the MoE block with expert tensor parallelism: each of an etp group's ranks holds
 * an I / etp slice of every one of its experts' SwiGLU (Megatron-Core's --expert-tensor-parallel-size
 * and parallel folding, Liu et al. 2025 "MoE Parallel Folding"; the slices are Megatron-LM's tensor
 * parallelism, Shoeybi et al. 2019: gate and up column-parallel, I / etp rows of W_gate and W_up each,
 * down row-parallel, I / etp columns of W_down).
 *
 * Around layers/moe_ep.h's exchange (absent at ep 1):
 *   1. route (layers/moe.h) this rank's N tokens; at ep > 1 dispatch its rows to their experts' ep ranks
 *      (tri_moe_ep_exchange): this rank now has P rows for its E_l experts, by source, expert, token;
 *   2. the etp group all-gathers those rows (each etp rank's P_t rows, peer t's block at the t-th place:
 *      the same order on every etp rank), Pg = sum_t P_t rows, and the per-expert counts of every block
 *      (a host all-reduce of etp x E integers; no device read-back beyond the router's one a pass);
 *   3. each rank runs its slice of every local expert on all Pg rows, one grouped GEMM per (etp peer,
 *      ep source) block over that block's per-expert counts (the one-rank micro-batch's batches);
 *   4. the outputs (Pg, C), partial sums over this rank's I / etp, are "reduce-scattered": each peer's
 *      block goes back to it (one all_to_all_v) and every rank adds its etp partial blocks in etp rank
 *      order (tri_op_add, each add in fp32 rounded once to the dtype), so the sum's order is fixed;
 *   5. at ep > 1 the outputs go back to the tokens' ranks; the combine as on one rank.
 * Backward the reverse: the combine's gradient (at ep > 1 dispatched), all-gathered over etp, the
 * slice's weight gradients per block in block order (the rows are in the same order on every etp rank,
 * so a slice's gradient is the same GEMMs one rank with whole experts makes, restricted to the slice),
 * the input gradient's etp partials reduce-scattered the same way, then sent back at ep > 1.
 *
 * Exactness: the down projection's output is a sum over I split in etp pieces, so the block is not
 * bit-identical to etp 1 (|difference| <= (etp - 1) eps sum_i |h_i w_i| per output, plus the dtype's
 * rounding of the partials in bf16); at a fixed etp the order of every sum is fixed, so the block is
 * bit-identical run to run and across ep / pp / dp at the same etp (the dense tp promise).
 *
 * Letters as in moe.h and moe_ep.h; cfg->shape is the rank's: N its tokens, I its slice I_full / etp.
 * Buffers hold Pgmax = etp tri_moe_ep_max_rows(shape, ep) rows (every etp peer at most
 * tri_moe_ep_max_rows). */
#ifndef TRIDENT_LAYERS_MOE_ETP_H
#define TRIDENT_LAYERS_MOE_ETP_H

#include "layers/moe_ep.h"

#define TRI_MOE_MAX_ETP 8

/* Kept from the forward for the backward (per layer and micro-batch). */
typedef struct tri_moe_etp_acts {
    tri_tensor x_g;     /* (Pgmax, C) shape.dtype (so the two below): the etp group's gathered rows, peer
                           t's P_t rows at the t-th place */
    tri_tensor gate_up; /* (Pgmax, 2I) this rank's slice */
    tri_tensor h;       /* (Pgmax, I) silu(gate) * up of the slice */
    int ep, ep_rank, etp, etp_rank; /* the groups when the forward ran (ep 1: no ep comm) */
    int64_t P, Pg;                  /* rows this rank received (its block), rows gathered */
    int64_t send_rows[TRI_MOE_MAX_EXPERTS], recv_rows[TRI_MOE_MAX_EXPERTS]; /* per ep rank (ep > 1) */
    int64_t peer_rows[TRI_MOE_MAX_ETP];                  /* P_t per etp rank */
    int32_t counts[TRI_MOE_MAX_ETP * TRI_MOE_MAX_EXPERTS]; /* [t E + q E_l + j]: rows of local expert j
                                                              from ep source q in peer t's block */
} tri_moe_etp_acts;

/* Backward-only buffers (reusable across layers). */
typedef struct tri_moe_etp_scratch {
    tri_tensor o_g;      /* (Pgmax, C): the partial outputs; in the backward their gradient, then the
                            partial input gradients */
    tri_tensor dh;       /* (Pgmax, I) */
    tri_tensor dgate_up; /* (Pgmax, 2I) */
    tri_tensor part;     /* (Pgmax, C): this rank's rows from the ep dispatch, then the etp peers' partial
                            blocks (etp x P rows) */
} tri_moe_etp_scratch;

/* TRI_OK when s (E the whole model's, I the slice) runs on ep x etp: tri_moe_ep_check and
 * 1 <= etp <= TRI_MOE_MAX_ETP; else TRI_EINVAL naming the values. */
int tri_moe_etp_check(const tri_moe_shape *s, int ep, int etp);
/* Pgmax = etp tri_moe_ep_max_rows(s, ep); 0 when refused. */
int64_t tri_moe_etp_max_rows(const tri_moe_shape *s, int ep, int etp);
/* Bytes tri_moe_etp_bind carves (each buffer aligned to TRI_MOE_ALIGN); 0 when refused. */
size_t tri_moe_etp_acts_bytes(const tri_moe_shape *s, int ep, int etp);
size_t tri_moe_etp_scratch_bytes(const tri_moe_shape *s, int ep, int etp);
int tri_moe_etp_bind(const tri_moe_shape *s, int ep, int etp, tri_moe_etp_acts *ea, void *ea_mem,
                     tri_moe_etp_scratch *es, void *es_mem);

/* y(N, C) = the MoE block of x(N, C) with the experts over ep (NULL: ep 1, this rank holds all E) and
 * each expert's SwiGLU sliced over etp (etp->size >= 1): w->gate_up_w (E_l, 2I, C) the slice's gate rows
 * then its up rows, w->down_w (E_l, C, I) the slice's columns; router and shared expert as in moe_ep.h.
 * Collective over ep and etp. Fills acts (router, permutation, counts, o) as tri_moe_forward and ea; uses
 * es->o_g and es->part. TRI_EINVAL naming the argument as tri_moe_ep_forward, or on an etp group larger
 * than TRI_MOE_MAX_ETP. */
int tri_moe_etp_forward(tri_device *d, tri_comm *ep, tri_comm *etp, tri_tensor y, tri_moe_acts *acts,
                        tri_moe_etp_acts *ea, const tri_moe_etp_scratch *es, tri_tensor x, const tri_moe_weights *w,
                        const tri_moe_config *cfg);

/* dx(N, C) (overwritten) and the gradients in g (+=; the experts' as this rank's slices) given dy, as
 * tri_moe_ep_backward; exact (NULL: none) takes the slices' weight gradients into fixed-point sums
 * (E_l 2I C and E_l C I elements) one block at a time. Collective over ep and etp. */
int tri_moe_etp_backward(tri_device *d, tri_comm *ep, tri_comm *etp, tri_tensor dx, const tri_moe_weights *g,
                         tri_tensor dy, const tri_moe_acts *acts, const tri_moe_etp_acts *ea, tri_tensor x,
                         const tri_moe_weights *w, const tri_moe_scratch *scratch, const tri_moe_etp_scratch *es,
                         const tri_moe_config *cfg, float loss_scale);

#endif
