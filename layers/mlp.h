/* layers/mlp.h - the tensor-parallel MLP sub-block of a GPT-2 block.
 *
 * h = gelu(x @ Wfc_l^T + bfc_l) (column-parallel, 4C_l = 4C/tp hidden units per rank), then
 * y = reduce(h @ Wproj_l^T) + bproj (row-parallel). Shoeybi et al. 2019 §3 (Fig. 3a). */
#ifndef TRIDENT_LAYERS_MLP_H
#define TRIDENT_LAYERS_MLP_H

#include "layers/parallel.h"

typedef struct tri_mlp_weights {
    tri_tensor fc_w;    /* (4C_l, C) */
    tri_tensor fc_b;    /* (4C_l) */
    tri_tensor proj_w;  /* (C, 4C_l) */
    tri_tensor proj_b;  /* (C) */
} tri_mlp_weights;

typedef struct tri_mlp_acts {
    tri_tensor fch;       /* (N, 4C_l) pre-activation */
    tri_tensor fch_gelu;  /* (N, 4C_l) */
} tri_mlp_acts;

typedef struct tri_mlp_scratch {
    tri_tensor full_a, full_b;  /* (N, C) SP gather / partial buffers (unused without SP) */
    tri_tensor dh;              /* (N, 4C_l) */
} tri_mlp_scratch;

/* y(N_l, C) = MLP sub-block of x(N_l, C); fills acts. */
int tri_mlp_forward(const tri_tp *tp, tri_tensor y, tri_mlp_acts *acts, tri_tensor x,
                    const tri_mlp_weights *w, const tri_mlp_scratch *s);

/* dx(N_l, C) = input gradient (overwritten) given dy(N_l, C); weight gradients accumulate into g. */
int tri_mlp_backward(const tri_tp *tp, tri_tensor dx, const tri_mlp_weights *g, tri_tensor dy,
                     const tri_mlp_acts *acts, tri_tensor x, const tri_mlp_weights *w,
                     const tri_mlp_scratch *s);

#endif
