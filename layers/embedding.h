/* layers/embedding.h - vocab-parallel token embedding plus learned position embedding.
 *
 * Megatron's VocabParallelEmbedding: each TP rank holds V_l = Vp/tp rows of wte starting at token
 * id vocab_start, looks up the tokens it holds (zero rows for the others), and the ranks' outputs
 * are summed (all-reduce, or reduce-scatter to the sequence shard under SP). Positions are added
 * after the sum, on the rows this rank holds. GPT-2 (Radford et al. 2019) adds both embeddings. */
#ifndef TRIDENT_LAYERS_EMBEDDING_H
#define TRIDENT_LAYERS_EMBEDDING_H

#include "layers/parallel.h"

/* out(N_l, C) = sum over TP of wte_l[tokens] + wpe[position]; tokens (N = B*T_l) i32, wte (V_l, C),
 * wpe (n_positions, C), or absent (tri_tensor_none: no position embedding, as Llama's rotary
 * models). A row's position is its global one in seq (engine/device/ops/positions_math.h; row % T
 * without context parallelism). Scratch: partial (N, C) under SP. */
int tri_embedding_forward(const tri_tp *tp, tri_tensor out, tri_tensor tokens, tri_tensor wte,
                          tri_tensor wpe, int64_t vocab_start, tri_seq seq, tri_tensor partial);

/* dwte += rows of gather(dout) for the tokens in this shard; dwpe += dout rows by position (under
 * SP a partial sum over this shard's rows; dwpe absent: none). dout (N_l, C); scratch dout_full (N, C)
 * under SP. */
int tri_embedding_backward(const tri_tp *tp, tri_tensor dwte, tri_tensor dwpe, tri_tensor dout,
                           tri_tensor tokens, int64_t vocab_start, tri_seq seq, tri_tensor dout_full);

#endif
