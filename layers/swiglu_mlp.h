/* layers/swiglu_mlp.h - the tensor-parallel SwiGLU MLP sub-block of a Llama block.
 *
 * As Hugging Face's LlamaMLP: y = down(silu(gate(x)) * up(x)) (Shazeer 2020), biases only when the
 * config's mlp_bias asks. Tensor parallelism (Shoeybi et al. 2019 §3, as Megatron-LM's fused
 * SwiGLU): gate and up are one column-parallel layer whose rank-local weight rows are [its F_l gate
 * rows | its F_l up rows], so tri_op_swiglu reads each row's [gate | up] halves; down is
 * row-parallel. F is intermediate_size, F_l = F / tp. */
#ifndef TRIDENT_LAYERS_SWIGLU_MLP_H
#define TRIDENT_LAYERS_SWIGLU_MLP_H

#include "layers/parallel.h"

typedef struct tri_swiglu_mlp_weights {
    tri_tensor gate_up_w;   /* (2 F_l, C): this rank's gate rows, then its up rows */
    tri_tensor gate_up_b;   /* (2 F_l) or absent */
    tri_tensor down_w;      /* (C, F_l) */
    tri_tensor down_b;      /* (C) or absent */
} tri_swiglu_mlp_weights;

typedef struct tri_swiglu_mlp_acts {
    tri_tensor gate_up;     /* (N, 2 F_l) */
    tri_tensor h;           /* (N, F_l) silu(gate) * up */
} tri_swiglu_mlp_acts;

typedef struct tri_swiglu_mlp_scratch {
    tri_tensor full_a, full_b;  /* (N, C) SP gather / partial buffers (unused without SP) */
    tri_tensor dh;              /* (N, F_l) */
    tri_tensor dgate_up;        /* (N, 2 F_l) */
} tri_swiglu_mlp_scratch;

/* y(N_l, C) = the MLP sub-block of x(N_l, C); fills acts. */
int tri_swiglu_mlp_forward(const tri_tp *tp, tri_tensor y, tri_swiglu_mlp_acts *acts, tri_tensor x,
                           const tri_swiglu_mlp_weights *w, const tri_swiglu_mlp_scratch *s);

/* dx(N_l, C) = the input gradient (overwritten) given dy(N_l, C); weight gradients accumulate into g. */
int tri_swiglu_mlp_backward(const tri_tp *tp, tri_tensor dx, const tri_swiglu_mlp_weights *g, tri_tensor dy,
                            const tri_swiglu_mlp_acts *acts, tri_tensor x, const tri_swiglu_mlp_weights *w,
                            const tri_swiglu_mlp_scratch *s);

#endif
