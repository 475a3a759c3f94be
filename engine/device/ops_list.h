/* engine/device/ops_list.h - the device ops, listed once: one row per op, its contract above it.
 *
 * An X-macro list (no include guard): define TRI_OP (and, where it differs, TRI_OP_OPTIONAL), include
 * this file, and the rows expand in place; the file undefines both macros at its end.
 * Every place that names all the ops is generated from these rows, so an op is added here and
 * nowhere else is it listed by hand:
 *   - the op slots of tri_device_ops and the tri_op_* wrapper declarations (engine/device/device.h);
 *   - the CPU backend's table and the declarations of its tri_cpu_<op> (engine/device/device_cpu.c,
 *     engine/device/cpu_ops.h);
 *   - the CUDA backend's table and the declarations of its tri_cuda_<op> (cuda/device_cuda.cu,
 *     cuda/cuda_internal.h).
 * A backend's table names every row, so an op without an implementation is a compile or link error
 * (an undefined tri_cpu_<op> / tri_cuda_<op>), never a NULL slot found at run time.
 *
 *   TRI_OP(name, (params))          every backend implements it: the slot `name`, the wrapper
 *                                   tri_op_<name> with the same params (after the row's comment)
 *   TRI_OP_OPTIONAL(name, (params)) a backend may leave the slot NULL: the wrapper then runs the ops
 *                                   it is defined by (a fusion, or a multi-tensor form of one op),
 *                                   whose sequence gives its bits. The CPU backend leaves every
 *                                   optional slot NULL but adamw_fused_multi (device_cpu.c says
 *                                   which), the CUDA backend fills every one.
 * An includer that defines only TRI_OP gets TRI_OP for the optional rows too.
 *
 * The wrapper of a row takes exactly the slot's params (device.c checks and dispatches them), so
 * the wrapper declarations are generated too; wrappers that are not a slot (tri_op_zero,
 * tri_op_copy) are declared by hand in device.h. Rows are grouped by op family, in the order of the
 * family files (engine/device/ops/). Shapes and dtypes follow device.h's conventions.
 *
 * Deterministic mode: the parameter-gradient arguments of matmul (c += a^T b), bias_backward,
 * layernorm_backward, rmsnorm_backward, rmsnorm_heads_backward, grouped_matmul_backward_weight,
 * embedding_backward and position_backward may be int64 exact fixed-point sums instead of float: the
 * wrapper then adds the op's fp32 result one 64-row chunk at a time (engine/device/ops/exact_grads.c,
 * tri_device_set_exact_grads); the slots only ever see float. */
#ifndef TRI_OP_OPTIONAL
#define TRI_OP_OPTIONAL(name, params) TRI_OP(name, params)
#endif

/* ---- element-wise and reductions: any shape, same numel unless stated ---- */
/* x[i] = value. */
TRI_OP(fill, (tri_device *d, tri_tensor x, float value))
/* out = a + b (out may alias a or b). */
TRI_OP(add, (tri_device *d, tri_tensor out, tri_tensor a, tri_tensor b))
/* y += alpha * x. */
TRI_OP(axpy, (tri_device *d, tri_tensor y, float alpha, tri_tensor x))
/* x *= s. */
TRI_OP(scale, (tri_device *d, tri_tensor x, float s))
/* out(1) += sum_i x[i]^2, accumulated in double within the call, added to out in fp32
 * (gradient norms). */
TRI_OP(sum_squares, (tri_device *d, tri_tensor out, tri_tensor x))
/* out(1) += number of NaN or Inf elements of x. */
TRI_OP(count_nonfinite, (tri_device *d, tri_tensor out, tri_tensor x))
/* Many sums of squares in one call (the gradient norm's; Apex's multi_tensor_l2norm): for k = 0 ..
 * n-1 in order, out[slots[k]] += sum_i xs[k][i]^2, each addition exactly what
 * tri_op_sum_squares(d, out[slots[k]], xs[k]) makes (the same bits), so a backend may run all the
 * tensors in a few launches instead of two each. out fp32 (S); xs fp32 or bf16; the pieces of one
 * slot must be consecutive. TRI_EINVAL naming the piece for a slot outside out, a non-float
 * tensor, or a slot that comes back after another; n 0 does nothing.
 * Optional: without it the wrapper calls sum_squares piece by piece. */
TRI_OP_OPTIONAL(sum_squares_multi, (tri_device *d, tri_tensor out, const tri_tensor *xs, const int64_t *slots, int n))
/* dst = src converted to dst's dtype (same numel; fp32 or bf16 each): bf16 -> fp32 is exact,
 * fp32 -> bf16 rounds to nearest even (NaN stays NaN), equal dtypes copy. dst and src do not
 * overlap unless their dtypes are equal. */
TRI_OP(convert, (tri_device *d, tri_tensor dst, tri_tensor src))

/* ---- matmul ----
 * c(M,N) = op(a) @ op(b) + bias + beta * c, with op(a) (M,K), op(b) (K,N); a and b are seen as
 * matrices (rows = all dims but the last). bias (N) is optional (absent: tri_tensor_none()) and
 * allowed only with beta == 0. With beta == 0, c is write-only (NaN in c does not propagate). Linear
 * layers keep weights (OC, C) as Megatron and llm.c do: forward out = inp @ w^T + b is
 * tri_op_matmul(d, out, inp, w, b, false, true, 0). */
TRI_OP(matmul, (tri_device *d, tri_tensor c, tri_tensor a, tri_tensor b, tri_tensor bias, bool trans_a, bool trans_b,
                float beta))
/* dbias(OC) += column sums of dout(N, OC). */
TRI_OP(bias_backward, (tri_device *d, tri_tensor dbias, tri_tensor dout))
/* The grouped GEMM of the experts (Megatron-Core's GroupedMLP; engine/device/ops/matmul.c): G groups
 * of rows, group g's counts[g] rows contiguous and in group order from row 0 (x_e is rows
 * [sum_{g'<g} counts[g'], + counts[g]) of x); the weights stacked w(G, N_out, C), one (out, in)
 * matrix per group as Hugging Face's per-expert Linear weights. counts is a host array of G
 * non-negative ints (the caller reads tokens_per_expert back once per layer), their sum R at most
 * the rows P of the row-stacked tensors; rows R.. are neither read nor written. Each group is
 * exactly tri_op_matmul on the group's views (the same bits on each backend: one sgemm or one
 * cuBLASLt call per group, no padding to a capacity); a group of no rows adds nothing.
 * out(P, N_out): out_e = x_e(counts[g], C) @ w_g^T. */
TRI_OP(grouped_matmul_forward, (tri_device *d, tri_tensor out, tri_tensor x, tri_tensor w, const int32_t *counts))
/* dx(P, C): dx_e = dout_e(counts[g], N_out) @ w_g + beta dx_e (beta 0: dx_e write-only). */
TRI_OP(grouped_matmul_backward_input, (tri_device *d, tri_tensor dx, tri_tensor dout, tri_tensor w,
                                       const int32_t *counts, float beta))
/* dw(G, N_out, C): dw_g = dout_e^T @ x_e + beta dw_g (beta 1: the gradient accumulates; a group of
 * no rows gets beta dw_g, as tri_op_matmul with an inner dimension of 0). */
TRI_OP(grouped_matmul_backward_weight, (tri_device *d, tri_tensor dw, tri_tensor dout, tri_tensor x,
                                        const int32_t *counts, float beta))

/* ---- layernorm (Ba et al. 2016), eps 1e-5 as GPT-2 ----
 * out(N,C) = (inp - mean) * rstd * w + b; mean(N), rstd(N) saved for backward. */
TRI_OP(layernorm_forward, (tri_device *d, tri_tensor out, tri_tensor mean, tri_tensor rstd, tri_tensor inp,
                           tri_tensor w, tri_tensor b))
/* The residual add fused into the layernorm that follows it (as llm.c's fused residual forward):
 * res(N,C) = a + b, then out, mean, rstd = layernorm_forward(res, w, bias); the same bits as
 * tri_op_add followed by tri_op_layernorm_forward (each res element rounded once to res's dtype and
 * normalised as stored), which is what a backend without the fusion runs. res may alias a or b;
 * out, mean and rstd alias nothing. One pass over a and b instead of writing res and reading it
 * back in a second kernel. TRI_EINVAL naming the argument on a shape or dtype mismatch.
 * Optional (a fusion): without it, or on a backend without native bf16, the wrapper runs the two. */
TRI_OP_OPTIONAL(add_layernorm_forward, (tri_device *d, tri_tensor res, tri_tensor out, tri_tensor mean,
                                        tri_tensor rstd, tri_tensor a, tri_tensor b, tri_tensor w, tri_tensor bias))
/* dinp(N,C) +=, dw(C) +=, db(C) += the gradients given dout(N,C). */
TRI_OP(layernorm_backward, (tri_device *d, tri_tensor dinp, tri_tensor dw, tri_tensor db, tri_tensor dout,
                            tri_tensor inp, tri_tensor w, tri_tensor mean, tri_tensor rstd))

/* ---- RMSNorm (Zhang & Sennrich 2019), as Hugging Face's LlamaRMSNorm ----
 * out(N,C) = (inp * rstd) * w with rstd(N) f32 = 1 / sqrt(mean(inp^2) + eps) (engine/core/math.h's
 * row order), saved for backward. */
TRI_OP(rmsnorm_forward, (tri_device *d, tri_tensor out, tri_tensor rstd, tri_tensor inp, tri_tensor w, float eps))
/* res(N,C) = a + b, then out, rstd = rmsnorm_forward(res, w, eps): the same bits as tri_op_add
 * followed by tri_op_rmsnorm_forward (see tri_op_add_layernorm_forward; same aliasing rules).
 * Optional, as add_layernorm_forward. */
TRI_OP_OPTIONAL(add_rmsnorm_forward, (tri_device *d, tri_tensor res, tri_tensor out, tri_tensor rstd, tri_tensor a,
                                      tri_tensor b, tri_tensor w, float eps))
/* dinp(N,C) +=, dw(C) += the gradients given dout(N,C). */
TRI_OP(rmsnorm_backward, (tri_device *d, tri_tensor dinp, tri_tensor dw, tri_tensor dout, tri_tensor inp,
                          tri_tensor w, tri_tensor rstd))
/* Per-head RMSNorm of the fused q|k|v rows (Qwen3's q_norm / k_norm, Hugging Face's Qwen3Attention):
 * inp(N,W) rows hold NH q heads then NH_kv k heads of HS = numel(q_w) = numel(k_w) values from column
 * 0, then W - (NH + NH_kv) HS other columns (the v heads). Head h of row n, its "head row" r = n H + h
 * (H = NH + NH_kv), is RMS-normalised as rmsnorm_forward's row (C = HS), with q_w for h < NH and k_w
 * after; rstd(N,H) f32 keeps each head row's 1 / sqrt(mean(x^2) + eps). The other columns are copied
 * (untouched when out is inp: in place; out must otherwise not overlap inp). */
TRI_OP(rmsnorm_heads_forward, (tri_device *d, tri_tensor out, tri_tensor rstd, tri_tensor inp, tri_tensor q_w,
                               tri_tensor k_w, int64_t NH, int64_t NH_kv, float eps))
/* dinp(N,W) = the gradient given dout(N,W) through rmsnorm_heads_forward: its q and k heads set
 * (not accumulated) by rmsnorm_backward's row formula, the other columns copied from dout; dinp may
 * be dout (in place). dq_w(HS) +=, dk_w(HS) += the weight gradients: each the column sum of dout x rstd
 * over its head rows in the order r' = n NH + h (q) or n NH_kv + (h - NH) (k), in engine/core/math.h's
 * column order (TRI_COL_CHUNK head rows a chunk, then the chunks in order). */
TRI_OP(rmsnorm_heads_backward, (tri_device *d, tri_tensor dinp, tri_tensor dq_w, tri_tensor dk_w, tri_tensor dout,
                                tri_tensor inp, tri_tensor q_w, tri_tensor k_w, tri_tensor rstd, int64_t NH,
                                int64_t NH_kv))

/* ---- causal multi-head self-attention core (Vaswani et al. 2017, scale 1/sqrt(HS)) ----
 * qkv(B,T,3*C_l) holds [q | k | v], each C_l = NH_l*HS wide, head h at columns h*HS of each part.
 * att(B,NH_l,T,T) receives the softmax probabilities (saved for backward; entries above the
 * diagonal are 0), out(B,T,C_l) the heads' outputs side by side. */
TRI_OP(attention_forward, (tri_device *d, tri_tensor out, tri_tensor att, tri_tensor qkv))
/* dqkv(B,T,3*C_l) = gradient given dout(B,T,C_l) (overwritten); datt(B,NH_l,T,T) is scratch. */
TRI_OP(attention_backward, (tri_device *d, tri_tensor dqkv, tri_tensor datt, tri_tensor dout, tri_tensor qkv,
                            tri_tensor att))

/* ---- fused causal attention (FlashAttention-2, Dao 2023; the tiling: engine/device/ops/attention_math.h) ----
 * The same math as attention_forward without the (T, T) matrix: out(B,T,C_l) from qkv(B,T,C_l + 2
 * C_kv) = [q | k | v] (C_kv = C_l: the layout above; C_kv < C_l: grouped-query attention, NH_kv =
 * C_kv / HS key/value heads each serving NH_l / NH_kv query heads: engine/device/ops/attention_math.h
 * tri_flash_dims), and lse(B,NH_l,T) f32, each query row's logsumexp of its scaled scores, saved for
 * the backward. NH_l is lse's dimension 1, HS = C_l / NH_l. B or T 0: nothing to do (TRI_OK).
 * Backends read the dims with tri_flash_dims_of (device.h). */
TRI_OP(flash_attention_forward, (tri_device *d, tri_tensor out, tri_tensor lse, tri_tensor qkv))
/* dqkv (qkv's shape) = gradient given dout(B,T,C_l) (overwritten), recomputing the probabilities from
 * qkv and lse; out is the forward's output; delta(B,NH_l,T) f32 is scratch (rows' dout . out).
 * Deterministic: no atomics, a fixed order of every sum (engine/core/math.h). */
TRI_OP(flash_attention_backward, (tri_device *d, tri_tensor dqkv, tri_tensor delta, tri_tensor dout, tri_tensor qkv,
                                  tri_tensor out, tri_tensor lse))

/* ---- fused attention across a split sequence (context parallelism: layers/cp_attention.c) ----
 * The ops above with queries and keys/values in different buffers at global positions
 * (tri_flash_rows, engine/device/ops/attention_math.h: one chunk, or a cp rank's two), causal by
 * global position. Queries: the q columns of qkv(B,T,C_l + 2 C_kv) (its k, v columns unread); keys
 * and values: the last 2 C_kv columns (k heads, then v heads) of kv(B,Tk,Wk), Wk >= 2 C_kv (a packed
 * (B,Tk,2 C_kv) buffer, or a gathered qkv). out, dout (B,T,C_l); lse, delta (B,NH_l,T) f32. A split
 * chunk length (Tc < rows) is a multiple of 64 and the key chunks start at multiples of 64, so the
 * key tiles sit at absolute multiples of TRI_FLASH_BC: a query row meets the key tiles in ascending
 * global order exactly as in flash_attention_forward over the whole sequence, and the bits are its
 * bits (qrows = krows = tri_flash_rows_whole(T) and kv = qkv is that op). */
/* out, lse of the queries against the given keys only: a row that sees no key gets out 0 and lse
 * -inf (the partial result a ring merges with flash_attention_merge). */
TRI_OP(flash_attention_kv_forward, (tri_device *d, tri_tensor out, tri_tensor lse, tri_tensor qkv, tri_tensor kv,
                                    tri_flash_rows qrows, tri_flash_rows krows))
/* delta(B,NH_l,T) f32 = each row's dout . out over the head's columns, left to right (Dao 2023
 * Algorithm 2's D; the first step of flash_attention_backward). */
TRI_OP(flash_attention_delta, (tri_device *d, tri_tensor delta, tri_tensor dout, tri_tensor out))
/* The dq pass: the q columns of dqkv (qkv's shape; other columns untouched) = (accumulate: +=) the
 * gradient through the given keys, per query row the key tiles ascending. Accumulating over key
 * blocks in ascending order gives the bits of one call over them all. */
TRI_OP(flash_attention_kv_backward_dq, (tri_device *d, tri_tensor dqkv, tri_tensor dout, tri_tensor qkv, tri_tensor kv,
                                        tri_tensor lse, tri_tensor delta, tri_flash_rows qrows, tri_flash_rows krows,
                                        bool accumulate))
/* The dk, dv pass: the last 2 C_kv columns of dkv (kv's shape; other columns untouched) = (accumulate:
 * +=) the gradient from the given queries, per key tile the group's query heads in order, for each
 * the query tiles ascending; key tiles no query reaches get 0 (or are left, accumulating). With
 * one query head per key/value head, accumulating over query blocks in ascending order gives the
 * bits of one call (grouped-query attention sums head by head, so blocks interleave differently). */
TRI_OP(flash_attention_kv_backward_dkv, (tri_device *d, tri_tensor dkv, tri_tensor dout, tri_tensor qkv,
                                         tri_tensor kv, tri_tensor lse, tri_tensor delta, tri_flash_rows qrows,
                                         tri_flash_rows krows, bool accumulate))
/* Both passes in one (the dq pass's and the dk, dv pass's results, each as its pass documents; the
 * same accumulate for both): per (b, key/value head) the key tiles ascending, each tile's P and dS
 * computed once for dq and dk, dv (FlashAttention-2's one-pass backward; the passes above recompute
 * them, about 1.4x the work). The CPU gives the two passes' bits (each output element receives the
 * same sgemm calls in the same order) and runs them instead when fewer (b, key/value head) tasks
 * than threads exist; the CUDA simple twin runs the two passes' kernels. */
TRI_OP(flash_attention_kv_backward, (tri_device *d, tri_tensor dqkv, tri_tensor dkv, tri_tensor dout, tri_tensor qkv,
                                     tri_tensor kv, tri_tensor lse, tri_tensor delta, tri_flash_rows qrows,
                                     tri_flash_rows krows, bool accumulate))
/* In place: out, lse (B,T,C_l), (B,NH_l,T) <- the merge of (out, lse) and (out2, lse2), two partial
 * attentions of the same queries over disjoint keys, per row by tri_flash_merge_weights (fixed
 * order: out w1 + out2 w2; rows -inf in both stay 0, -inf). */
TRI_OP(flash_attention_merge, (tri_device *d, tri_tensor out, tri_tensor lse, tri_tensor out2, tri_tensor lse2))
/* dst(N, Wd) columns [dst_col, dst_col + n) = src(N, Ws) columns [src_col, src_col + n), per row,
 * converted as convert (fp32 -> bf16 nearest even, same dtype copied bit for bit). Packs the k|v
 * columns of a qkv buffer and unpacks their gradients (context parallelism). */
TRI_OP(copy_columns, (tri_device *d, tri_tensor dst, int64_t dst_col, tri_tensor src, int64_t src_col, int64_t n))

/* ---- rotary position embedding (Su et al. 2021), Hugging Face's rotate_half convention ----
 * In place on x(N, W): the first n_heads heads of HS = 2 cos.cols columns of each row (q then k of
 * a qkv row) are rotated, pair (i, i + HS/2) by the angle of frequency i at the row's position
 * tri_seq_position(T, row0 + n, cp, cp_rank) (engine/device/ops/positions_math.h: (row0 + n) % T at cp 1;
 * under context parallelism the global position of local row row0 + n of cp rank cp_rank's two
 * chunks), whose cosine and sine are cos, sin (positions >= T, HS/2) f32. */
TRI_OP(rope_forward, (tri_device *d, tri_tensor x, tri_tensor cos, tri_tensor sin, int64_t n_heads, int64_t T,
                      int64_t row0, int cp, int cp_rank))
/* dx in place: the gradient through the rotation (the rotation by minus the angle). */
TRI_OP(rope_backward, (tri_device *d, tri_tensor dx, tri_tensor cos, tri_tensor sin, int64_t n_heads, int64_t T,
                       int64_t row0, int cp, int cp_rank))

/* ---- GELU, tanh approximation (Hendrycks & Gimpel 2016), as GPT-2 ---- */
TRI_OP(gelu_forward, (tri_device *d, tri_tensor out, tri_tensor inp))
/* dinp = gelu'(inp) * dout (overwritten; dinp may alias dout). */
TRI_OP(gelu_backward, (tri_device *d, tri_tensor dinp, tri_tensor inp, tri_tensor dout))
/* The bias add fused with the GELU after it (the MLP's first matmul epilogue where the matmul cannot
 * fuse it): out(N,OC) = gelu(inp(N,OC) + bias(OC)), bias broadcast over the rows (any leading dims:
 * OC = bias's numel, which must divide inp's, N = numel / OC; out has inp's numel). Per element, in
 * fp32 whatever the storage: x = inp + bias (one fp32 addition, not rounded to a storage dtype), out
 * = gelu(x) rounded once (engine/device/ops/activations_math.h tri_bias_gelu), so its bits are the
 * same on every backend. out may alias inp (then of the same dtype); bias overlaps neither. TRI_EINVAL
 * naming the argument on a dtype or size mismatch (bias empty or not dividing inp). */
TRI_OP(bias_gelu_forward, (tri_device *d, tri_tensor out, tri_tensor inp, tri_tensor bias))

/* ---- SwiGLU (Shazeer 2020), as Hugging Face's LlamaMLP ----
 * out(N,F) = silu(gate) * up where gate_up(N,2F) holds each row's gate (columns 0..F) then up. */
TRI_OP(swiglu_forward, (tri_device *d, tri_tensor out, tri_tensor gate_up))
/* dgate_up(N,2F) = gradient given dout(N,F) (overwritten). */
TRI_OP(swiglu_backward, (tri_device *d, tri_tensor dgate_up, tri_tensor gate_up, tri_tensor dout))

/* ---- Mixture-of-Experts router (engine/device/ops/moe_router_math.h: the math, its sources and
 * its summation orders; docs/moe.md "The router") ----
 * The router's linear (N,C) x (C,E) is a matmul; these ops start from its logits (N,E) f32. Every
 * tensor here is fp32 or i32 (the router runs in fp32, as Megatron-Core's). N tokens (B*T), E
 * experts, K selections per token (1 <= K <= E). score_func TRI_MOE_SOFTMAX or TRI_MOE_SIGMOID. */
/* scores(N,E) = softmax or sigmoid of logits(N,E) per token (saved for the backward and the aux
 * loss); expert_idx(N,K) i32 = the K experts of largest score + expert_bias(E) (absent:
 * tri_tensor_none(); DeepSeek-V3's bias changes the selection only), in descending order, ties to
 * the lower expert index; expert_w(N,K) = their unbiased scores, renormalised to sum 1 when
 * norm_topk. No overlap. TRI_EINVAL naming the argument on a shape or dtype mismatch, K outside
 * [1, E] or an unknown score_func. */
TRI_OP(moe_router_forward, (tri_device *d, tri_tensor expert_idx, tri_tensor expert_w, tri_tensor scores,
                            tri_tensor logits, tri_tensor expert_bias, int score_func, bool norm_topk))
/* Expert capacity (Megatron-Core's apply_router_token_dropping, pad_to_capacity off): kept_idx(N,K)
 * i32 = expert_idx(N,K), except that a selection whose place in its expert's queue is >= capacity
 * becomes -1 - e (dropped: the dispatch skips negative entries and the token passes through the
 * residual; the backward still sees its expert). The queue (drop_policy): TRI_MOE_DROP_PROBS by
 * expert_w(N,K) descending, ties to the earlier token; TRI_MOE_DROP_POSITION by token order.
 * capacity <= 0 is dropless (kept_idx = expert_idx). routed_per_expert(E) i32 = the selections of
 * each expert before dropping (the aux loss's counts), tokens_per_expert(E) i32 = the kept ones (the
 * dispatch's counts); the dropped count is N*K - sum(tokens_per_expert). Integer counts, no atomics.
 * tri_moe_capacity (moe_router_math.h) gives Megatron's capacity from the capacity factor. No
 * overlap. TRI_EINVAL naming the argument on a mismatch or an unknown drop_policy. */
TRI_OP(moe_router_capacity, (tri_device *d, tri_tensor kept_idx, tri_tensor tokens_per_expert,
                             tri_tensor routed_per_expert, tri_tensor expert_idx, tri_tensor expert_w,
                             int64_t capacity, int drop_policy))
/* dlogits(N,E) = the gradient on the logits given d_expert_w(N,K) (overwritten), through the
 * renormalisation (norm_topk) and the score function, from kept_idx(N,K) (or expert_idx when
 * dropless; a dropped selection's d_expert_w is not read: its weight does not reach the output) and
 * the forward's scores(N,E). Same score_func and norm_topk as the forward. The losses' ops below
 * then add their gradients into dlogits. No overlap. */
TRI_OP(moe_router_backward, (tri_device *d, tri_tensor dlogits, tri_tensor d_expert_w, tri_tensor kept_idx,
                             tri_tensor scores, int score_func, bool norm_topk))
/* The Switch/GShard load-balancing loss as Megatron-Core's switch_load_balancing_loss_func: loss(1)
 * f32 = coeff * E / (K N^2) * sum_e routed_per_expert[e] * sum_n p_ne, p the softmax scores(N,E) or
 * (sigmoid) the sigmoid scores normalised per token; when dlogits(N,E) is present, dlogits +=
 * dloss * d loss / d logits (the counts are constants). K (the selections per token) in [1, E]. */
TRI_OP(moe_aux_loss, (tri_device *d, tri_tensor loss, tri_tensor dlogits, tri_tensor scores,
                      tri_tensor routed_per_expert, int64_t K, int score_func, float coeff, float dloss))
/* The router z-loss (ST-MoE, Zoph et al. 2022; Megatron-Core's z_loss_func): loss(1) f32 = coeff *
 * mean_n (logsumexp_e logits(N,E))^2; when dlogits(N,E) is present, dlogits += dloss * d loss / d
 * logits. */
TRI_OP(moe_z_loss, (tri_device *d, tri_tensor loss, tri_tensor dlogits, tri_tensor logits, float coeff, float dloss))
/* DeepSeek-V3's auxiliary-loss-free balancing, after the optimizer step (no gradient): expert_bias(E)
 * f32 += rate * sign(mean_e c - c_e), c = tokens_per_expert(E) i32, the step's counts summed over
 * its micro-batches and ranks by the caller (Megatron-Core's get_updated_expert_bias). */
TRI_OP(moe_expert_bias_update, (tri_device *d, tri_tensor expert_bias, tri_tensor tokens_per_expert, float rate))

/* ---- embeddings ----
 * out(N,C) = wte[tokens[n] - vocab_start] for tokens inside this vocab shard wte(V_l,C), else 0
 * (vocab-parallel embedding: the shards' outputs are summed over the TP group afterwards). */
TRI_OP(embedding_forward, (tri_device *d, tri_tensor out, tri_tensor tokens, tri_tensor wte, int64_t vocab_start))
/* dwte(V_l,C) += dout rows of the tokens inside this shard. */
TRI_OP(embedding_backward, (tri_device *d, tri_tensor dwte, tri_tensor dout, tri_tensor tokens, int64_t vocab_start))
/* out(N,C) += wpe[pos(row0 + n)]: row n of out is local row row0 + n of a (B, T / cp)-row batch, at global
 * position pos(r) = tri_seq_position(T, r, cp, cp_rank) (engine/device/ops/positions_math.h; (row0 + n) % T
 * at cp 1). cp >= 1, 0 <= cp_rank < cp, T divisible by 2 cp when cp > 1. */
TRI_OP(position_forward, (tri_device *d, tri_tensor out, tri_tensor wpe, int64_t T, int64_t row0, int cp,
                          int cp_rank))
/* dwpe(n_positions,C) row pos(row0 + n) += dout(N,C) row n, rows in order. */
TRI_OP(position_backward, (tri_device *d, tri_tensor dwpe, tri_tensor dout, int64_t T, int64_t row0, int cp,
                           int cp_rank))

/* ---- softmax cross-entropy in vocab-parallel pieces (Megatron's VocabParallelCrossEntropy) ----
 * logits(N,V_l) is a vocab shard starting at global id vocab_start; only its first V_valid
 * columns are real tokens (the rest is vocab padding, kept out of the loss). Between the pieces
 * the caller reduces maxes with MAX and stats with SUM over the tensor-parallel group. */
/* maxes(N) = max over the valid columns (-FLT_MAX when V_valid == 0). */
TRI_OP(ce_row_max, (tri_device *d, tri_tensor maxes, tri_tensor logits, int64_t V_valid))
/* stats(N,2): [0] = sum exp(logit - max) over valid columns, [1] = the target's logit if the target
 * lies in this shard, else 0. targets(N) are global token ids (i32). */
TRI_OP(ce_sumexp_target, (tri_device *d, tri_tensor stats, tri_tensor logits, tri_tensor maxes, tri_tensor targets,
                          int64_t vocab_start, int64_t V_valid))
/* losses(N) = log(sumexp) + max - target logit (from the reduced stats). */
TRI_OP(ce_loss, (tri_device *d, tri_tensor losses, tri_tensor maxes, tri_tensor stats))
/* dlogits(N,V_l) = dloss * (softmax - onehot(target)); padded columns 0. dlogits may alias logits
 * (llm.c's fused classifier overwrites the logits with their gradient). */
TRI_OP(ce_backward, (tri_device *d, tri_tensor dlogits, tri_tensor logits, tri_tensor maxes, tri_tensor stats,
                     tri_tensor targets, int64_t vocab_start, int64_t V_valid, float dloss))
/* The whole classifier loss of rows that hold the whole vocabulary (no vocab-parallel split, so no
 * all-reduce between the pieces), in one op and one pass of a GPU block over each row (llm.c's fused
 * classifier): losses(N) and, when dlogits is present, dlogits(N,V_l) = dloss * (softmax - onehot)
 * with padded columns 0. Exactly the bits of ce_row_max, ce_sumexp_target (vocab_start 0), ce_loss
 * and ce_backward in turn. logits and dlogits are fp32 or bf16; dlogits may alias logits (then of
 * the same dtype), no other overlap. targets(N) i32 in [0, V_valid) for a finite loss (one outside
 * counts as a target logit of 0, as the pieces do). TRI_EINVAL names the argument that is wrong. */
TRI_OP(ce_fused, (tri_device *d, tri_tensor losses, tri_tensor dlogits, tri_tensor logits, tri_tensor targets,
                  int64_t V_valid, float dloss))

/* ---- Mixture-of-Experts dispatch: token permutation and combine (Megatron-Core's moe_utils permute
 * and unpermute; engine/device/ops/moe_dispatch_math.h defines every order) ----
 * N tokens, K selections each (top-k), E experts. expert_idx(N,K) i32 holds each selection's expert,
 * -1 (any value outside [0, E)) for a dropped one. The permuted order groups the kept selections by
 * expert 0..E-1 and, within an expert, by the selection's flat index n*K + k ascending (a stable
 * sort by expert: token n ascending, then k). R = the kept selections; permuted buffers have N*K
 * rows, the first R used. */
/* The counting sort (counts, exclusive scan, stable placement; deterministic, no atomics):
 * tokens_per_expert(E) i32 = the kept selections of each expert; row_id_map(N,K) i32 = the permuted
 * row of selection (n,k), -1 when dropped; sorted_indices(N*K) i32 = the selection n*K + k of
 * permuted row r < R, -1 for r >= R. All three overwritten. */
TRI_OP(moe_permute_map, (tri_device *d, tri_tensor row_id_map, tri_tensor sorted_indices, tri_tensor tokens_per_expert,
                         tri_tensor expert_idx))
/* x_perm(N*K, C)[r] = x(N, C)[sorted_indices[r] / K] (a copy: the same bits; rounded once when x_perm
 * is bf16 and x fp32), rows r >= R zero; K = rows(x_perm) / rows(x). */
TRI_OP(moe_permute, (tri_device *d, tri_tensor x_perm, tri_tensor x, tri_tensor sorted_indices))
/* The gather's backward: dx(N, C)[n] = sum over k = 0..K-1 in k order of dx_perm(N*K, C)[row_id_map[n,k]]
 * (dropped skipped), fp32 from 0, rounded once; overwritten (a token with every selection dropped
 * gets 0). */
TRI_OP(moe_permute_backward, (tri_device *d, tri_tensor dx, tri_tensor dx_perm, tri_tensor row_id_map))
/* The combine: y(N, C)[n] = sum over k = 0..K-1 in k order, not dropped, of w[n,k] * y_perm[row_id_map[n,k]],
 * fp32 from 0 (one product then one addition per term), rounded once; w(N,K) f32; overwritten. */
TRI_OP(moe_unpermute, (tri_device *d, tri_tensor y, tri_tensor y_perm, tri_tensor row_id_map, tri_tensor w))
/* The combine's backward: dy_perm(N*K, C)[r] = w[s] * dy[s / K] for s = sorted_indices[r] >= 0, else 0;
 * dw(N,K) f32 = dot(dy[n], y_perm[row_id_map[n,k]]) summed in engine/core/math.h's row order, 0 for
 * a dropped selection. dy_perm and dw overwritten. */
TRI_OP(moe_unpermute_backward, (tri_device *d, tri_tensor dy_perm, tri_tensor dw, tri_tensor dy, tri_tensor y_perm,
                                tri_tensor sorted_indices, tri_tensor row_id_map, tri_tensor w))

/* ---- optimizer ----
 * One AdamW step on equal-length 1-d views (fp32): g = grad * grad_scale;
 * m = b1 m + (1-b1) g; v = b2 v + (1-b2) g^2; p -= lr (m_hat / (sqrt(v_hat) + eps) + wd p).
 * With hp->freeze_step N > 0 and step > N, v is left as it is and v_hat = v / (1 - b2^N): 1-bit
 * Adam's frozen variance (Tang et al. 2021 §3); freeze_step 0 is the plain step, bit for bit. */
TRI_OP(adamw, (tri_device *d, tri_tensor param, tri_tensor grad, tri_tensor m, tri_tensor v,
               const tri_adamw_hparams *hp))
/* The same step over many tensors in one call (Apex's multi_tensor_adam): each piece gets exactly
 * what tri_op_adamw(d, param, grad, m, v, hp) with the piece's weight_decay gives it (hp's own
 * weight_decay is not used), so a backend may update them all in a few launches. The pieces must not
 * overlap. TRI_EINVAL naming the piece and tensor as tri_op_adamw would; n 0 does nothing.
 * Optional: without it the wrapper calls adamw piece by piece. */
TRI_OP_OPTIONAL(adamw_multi, (tri_device *d, const tri_adamw_piece *pieces, int n, const tri_adamw_hparams *hp))
/* adamw_multi, the bf16 publish and the gradient zeroing in one pass over each piece (Apex's and
 * PyTorch's fused Adam write the low-precision copy in the same way): per element exactly
 * tri_adamw_element (as adamw_multi), then, when models is given, models[k] (bf16, piece k's numel:
 * the model's copy of param under bf16 mixed precision) = param rounded to nearest even
 * (tri_float_to_bf16, as tri_op_convert), then grad = +0.0f (as tri_op_fill(grad, 0)). So param, m,
 * v, the models and grad get the bits of adamw_multi, convert and fill run in turn on the same
 * pieces. models: NULL (fp32 training), or n views written as bf16 by every backend (none widened).
 * Nothing may overlap. TRI_EINVAL naming the piece and tensor as adamw_multi does, or a model view
 * that is not bf16 of param's numel; n 0 does nothing.
 * Optional (a fusion): without it the wrapper runs adamw_multi, then convert and fill piece by
 * piece; the trainer then keeps its own separate passes (tri_device_has_adamw_fused). The CPU and
 * CUDA backends fill it; the cost device's 2026-11-27 op set, which models the backend before it,
 * does not. */
TRI_OP_OPTIONAL(adamw_fused_multi, (tri_device *d, const tri_adamw_piece *pieces, const tri_tensor *models, int n,
                           const tri_adamw_hparams *hp))
/* Momentum SGD or LARS over many tensors in one call (fp32 param, grad, buf of equal length per
 * piece; pieces do not overlap). Per element, with g = grad * grad_scale and wd the piece's decay:
 *   SGD (torch.optim.SGD, dampening 0): d = g + wd p; buf = mu buf + d; p -= lr (nesterov ? d + mu buf : buf)
 *   LARS (You et al. 2017, Alg. 1):      d = lr r (g + wd p); buf = mu buf + d; p -= nesterov ? d + mu buf : buf
 * with r = ratios[piece.ratio] (f32, on the device) or 1 when piece.ratio < 0. ratios may be absent
 * (tri_tensor_none()) when no piece names one. TRI_EINVAL naming the piece and tensor; n 0 does nothing. */
TRI_OP(sgd_multi, (tri_device *d, const tri_sgd_piece *pieces, int n, tri_tensor ratios, const tri_sgd_hparams *hp))
/* LAMB's first phase (You et al. 2020, Algorithm 2) over many tensors: per element, with g = grad *
 * grad_scale, m = b1 m + (1-b1) g; v = b2 v + (1-b2) g^2; then grad is overwritten with the update
 * direction r = (m / bc1) / (sqrt(v / bc2) + eps) + wd p (bc = 1 - beta^step, the piece's decay).
 * Same pieces and checks as adamw_multi (hp's lr and weight_decay unused). */
TRI_OP(lamb_direction_multi, (tri_device *d, const tri_adamw_piece *pieces, int n, const tri_adamw_hparams *hp))
/* LAMB's second phase: param -= lr * r * grad per piece (grad holds the direction), r as in
 * sgd_multi (pieces' buf and weight_decay unused). */
TRI_OP(lamb_update_multi, (tri_device *d, const tri_sgd_piece *pieces, int n, tri_tensor ratios, float lr))
/* Layer-wise trust ratios from per-tensor sums of squares: ratios(n) f32, sums(2 n span) f32 holding
 * tensor i's partial sums of the weights' squares at [i span, (i+1) span) and of the second
 * quantity's (LARS: the gradient, LAMB: the update direction) at [(n + i) span, (n + i + 1) span).
 * Each tensor's partials are added in index order in double, then tri_trust_ratio
 * (optimizer_math.h) gives the ratio. TRI_EINVAL for a wrong dtype, numel or span < 1. */
TRI_OP(trust_ratio, (tri_device *d, tri_tensor ratios, tri_tensor sums, int64_t span, const tri_trust_hparams *hp))

/* ---- fixed point: exact sums in any order (deterministic mode; engine/core/math.h) ----
 * acc(n) i64 += round(x(n) * 2^bits); elements not representable (NaN, Inf, |x| >= 2^(62 - bits))
 * are not added and counted into bad(1) f32. */
TRI_OP(fixed_accumulate, (tri_device *d, tri_tensor acc, tri_tensor x, int bits, tri_tensor bad))
/* out(n) f32 = acc(n) * 2^-bits. */
TRI_OP(fixed_to_float, (tri_device *d, tri_tensor out, tri_tensor acc, int bits))
/* y(n) i64 += x(n) i64 (exact). */
TRI_OP(add_i64, (tri_device *d, tri_tensor y, tri_tensor x))
/* limbs(6) i64, limb k += bits [32k, 32k + 32) of the exact sum of round(x[i] * 2^bits)^2 (a
 * 192-bit integer): limbs add without carries, so sums over calls and ranks stay exact and
 * independent of how x is split; tri_fixed_limbs_value (device.h) reads them. Elements not
 * representable are counted into bad(1) f32. */
TRI_OP(fixed_sum_squares, (tri_device *d, tri_tensor limbs, tri_tensor x, int bits, tri_tensor bad))

/* ---- gradient compression (engine/device/ops/compress_math.h: the wire formats; Seide et al. 2014,
 * Alistarh et al. 2017, Aji & Heafield 2017, Vogels et al. 2019) ----
 * payload i32 (tri_compress_words(n, block, 0)) = the 1bit payload of e f32 (n): per block of
 * `block` elements its mean |e| (fp32 bits), then the signs, one bit each (1 = negative). */
TRI_OP(compress_sign_pack, (tri_device *d, tri_tensor payload, tri_tensor e, int block))
/* payload i32 (tri_compress_words(n, block, levels)) = the qsgd payload of e f32 (n): per block its
 * l2 norm, then per element its sign and a level in 0..levels rounded stochastically with
 * tri_compress_uniform(seed, stream, i). levels >= 1. */
TRI_OP(compress_qsgd_pack, (tri_device *d, tri_tensor payload, tri_tensor e, int block, int levels, uint64_t seed,
                            uint64_t stream))
/* out f32 (m)[j] += alpha * element first + j of a 1bit (levels 0) or qsgd (levels s) payload i32 of
 * n elements (first + m <= n), decoded by tri_compress_decode: one fp32 multiply and add per element
 * (alpha -1 makes the error-feedback residual e - D(C(e)) in place of e). */
TRI_OP(compress_unpack_add, (tri_device *d, tri_tensor out, tri_tensor payload, int64_t n, int64_t first, int block,
                             int levels, float alpha))
/* payload i32 (2k) = the top-k payload of e f32 (n), k = numel(payload) / 2 in [1, n]: the k largest
 * |e_i| as (index, value bits) pairs in index order, ties towards the lower index
 * (compress_math.h's radix select; the CUDA backend selects on the device, cuda/compress/topk_fast.cuh). */
TRI_OP(compress_topk_pack, (tri_device *d, tri_tensor payload, tri_tensor e))
/* out f32 (m)[idx - first] += alpha * value for every pair of a top-k payload i32 (2k) whose index
 * idx is in [first, first + m) (indices are distinct, so pairs are independent). */
TRI_OP(compress_topk_unpack_add, (tri_device *d, tri_tensor out, tri_tensor payload, int64_t first, float alpha))
/* x f32 (r, n): its rows orthonormalised by Gram-Schmidt in row order (tri_orthonormalize_rows:
 * its dot products over compress_math.h's TRI_GS_SLOTS slots; PowerSGD's P). */
TRI_OP(orthonormalize_rows, (tri_device *d, tri_tensor x))

#undef TRI_OP
#undef TRI_OP_OPTIONAL
