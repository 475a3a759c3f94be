/* tests/moe_block_harness.h - one rank's tensors of the MoE block on thread ranks, shared by the block
 * tests test_moe_ep (layers/moe_ep.h against the one-rank block), test_moe_ep_wire (the all-to-all's
 * bytes and buffers) and test_moe_etp (layers/moe_etp.h against the one-rank block), which each
 * defined the same per-rank struct and set-up.
 *
 * A side is one rank (or one reference micro-batch): its device, its tokens' input and output (and
 * their gradients), its weights (E_l experts, each of width I, the etp slice's under expert tensor
 * parallelism) with their f32 gradient buffers, and the block's buffers bound for ep and etp. Which
 * weights a side holds stays with each test (host slices of shared weights, or a routing built by
 * hand); the rest is here. Device memory comes from tests/opsutil.h (freed by ot_teardown). */
#ifndef TRIDENT_TESTS_MOE_BLOCK_HARNESS_H
#define TRIDENT_TESTS_MOE_BLOCK_HARNESS_H

#include <stdint.h>

#include "layers/moe_etp.h"

typedef struct tu_moe_side {
    tri_device *dev;
    tri_tensor x, dy, y, dx;  /* (N, C) each in the block's dtype: input, output gradient, output, input gradient */
    tri_moe_weights w, g;     /* the weights (router (E, C), gate|up (E_l, 2I, C), down (E_l, C, I)) and
                                 their f32 gradients */
    tri_moe_acts acts;        /* the one-rank block's buffers (always bound) */
    tri_moe_scratch sc;
    tri_moe_ep_acts ea;       /* expert parallelism's (tu_moe_side_bind with ep > 0, etp 0) */
    tri_moe_ep_scratch es;
    tri_moe_etp_acts ta;      /* expert tensor parallelism's (etp > 0) */
    tri_moe_etp_scratch ts;
} tu_moe_side;

/* n floats uniform in [lo, hi) from seed (tests/testutil.h tu_fill_uniform), malloc'd: the caller frees. */
float *tu_moe_uniform(int64_t n, float lo, float hi, uint64_t seed);

/* Device memory for `shape` stored as dtype with every element v. */
tri_tensor tu_moe_filled(tri_device *d, tri_dtype dtype, tri_tensor shape, float v);

/* sd's device d, its x and dy from host (N, C) floats stored in s->dtype, y and dx zero (s->dtype). */
void tu_moe_side_io(tu_moe_side *sd, tri_device *d, const tri_moe_shape *s, const float *x, const float *dy);

/* sd's f32 gradient buffers for E_l experts of s (router (E, C), gate|up (E_l, 2I, C), down (E_l, C, I),
 * the shared expert's when s->I_shared > 0; no expert bias), every element v. */
void tu_moe_side_grads(tu_moe_side *sd, const tri_moe_shape *s, int64_t El, float v);

/* Binds sd's block buffers for s on sd->dev: the one-rank block's always, then expert tensor
 * parallelism's for (ep, etp) when etp > 0, else expert parallelism's for ep when ep > 0. Returns the
 * bind's status. */
int tu_moe_side_bind(tu_moe_side *sd, const tri_moe_shape *s, int ep, int etp);

#endif
