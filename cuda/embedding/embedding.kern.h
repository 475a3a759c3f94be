/* cuda/embedding/embedding.kern.h - simple embedding kernels (CUDA and C).
 *
 * Forward ops write or add one element per thread. Backward ops (gradients of wte rows and wpe
 * rows) give one thread per column and add the rows n in order into the parameter gradient: the
 * CPU backend's order, so the sums are bit for bit the CPU's and deterministic (tokens repeat, so a
 * thread per row would race; atomics would make the order vary). Every floating array is fp32 or
 * bf16 (its `_bf16` flag; engine/core/math.h tri_load / tri_store, fp32 arithmetic). position_backward
 * sums each gradient element's rows in a register and stores it once, so a bf16 dwpe is rounded
 * once, as in the CPU backend. embedding_backward adds each row into dwte as it comes: a token that
 * repeats in the call rounds a bf16 dwte at every repeat (the CPU backend rounds once), which
 * only a per-row scratch of fp32 could avoid. */
#ifndef TRIDENT_CUDA_EMBEDDING_EMBEDDING_KERN_H
#define TRIDENT_CUDA_EMBEDDING_EMBEDDING_KERN_H

#include "cuda/kernels/shim.h"
#include "engine/device/ops/positions_math.h"
/* out(N,C)[n] = wte(V_l,C)[tokens[n] - vocab_start] when that row is in the shard, else 0 */
TRI_KERNEL embedding_forward_kernel(void *out, int out_bf16, const int32_t *tokens, const void *wte,
                                    int wte_bf16, int64_t N, int64_t C, int64_t V_l, int64_t vocab_start)
{
    for (int64_t i = TRI_GLOBAL_ID; i < N * C; i += TRI_GLOBAL_STRIDE) {
        int64_t n = i / C, j = i % C;
        int64_t r = (int64_t)tokens[n] - vocab_start;
        tri_store(out, out_bf16, i, (r >= 0 && r < V_l) ? tri_load(wte, wte_bf16, r * C + j) : 0.0f);
    }
}

/* dwte(V_l,C)[tokens[n] - vocab_start] += dout(N,C)[n] for tokens in the shard */
TRI_KERNEL embedding_backward_kernel(void *dwte, int dwte_bf16, const void *dout, int dout_bf16,
                                     const int32_t *tokens, int64_t N, int64_t C, int64_t V_l,
                                     int64_t vocab_start)
{
    for (int64_t j = TRI_GLOBAL_ID; j < C; j += TRI_GLOBAL_STRIDE)
        for (int64_t n = 0; n < N; n++) {
            int64_t r = (int64_t)tokens[n] - vocab_start;
            if (r >= 0 && r < V_l)
                tri_store(dwte, dwte_bf16, r * C + j,
                          tri_load(dwte, dwte_bf16, r * C + j) + tri_load(dout, dout_bf16, n * C + j));
        }
}

/* The fast form of embedding_backward_kernel, two launches with the same additions in the same
 * order. Every (vocab row, column) element of dwte adds the rows of dout whose token is that row, in
 * token order; the simple kernel gets that order by walking all N tokens per column (C threads). Here
 * the first pass links equal tokens: next[n] = the next m > n with tokens[m] == tokens[n] (-1 if
 * none) and first[n] = whether no earlier token equals it. token_links_kernel finds them by a scan, a
 * thread per token (O(N) each, O(N^2) a call): it is the simple twin, kept for the tests; the
 * backend sorts (token, position) keys instead (token_links_fast.cuh, the same arrays). The second
 * gives a thread to every (first occurrence n, column j) pair, neighbours along j, which follows the
 * links: dwte[r][j] = ((dwte[r][j] + dout[n][j]) + dout[next[n]][j]) + ..., rounded to bf16 after
 * each addition when dwte is bf16 (as the simple kernel's read-modify-writes are). */
TRI_KERNEL token_links_kernel(int32_t *next, int32_t *first, const int32_t *tokens, int64_t N)
{
    for (int64_t n = TRI_GLOBAL_ID; n < N; n += TRI_GLOBAL_STRIDE) {
        int32_t t = tokens[n], nx = -1, is_first = 1;
        for (int64_t m = 0; m < n && is_first; m++)
            is_first = tokens[m] != t;
        for (int64_t m = n + 1; m < N && nx < 0; m++)
            nx = tokens[m] == t ? (int32_t)m : -1;
        next[n] = nx;
        first[n] = is_first;
    }
}

TRI_KERNEL embedding_backward_links_kernel(void *dwte, int dwte_bf16, const void *dout, int dout_bf16,
                                           const int32_t *tokens, const int32_t *next, const int32_t *first,
                                           int64_t N, int64_t C, int64_t V_l, int64_t vocab_start)
{
    for (int64_t idx = TRI_GLOBAL_ID; idx < N * C; idx += TRI_GLOBAL_STRIDE) {
        int64_t n = idx / C, j = idx % C;
        int64_t r = (int64_t)tokens[n] - vocab_start;
        if (!first[n] || r < 0 || r >= V_l)
            continue;
        float acc = tri_load(dwte, dwte_bf16, r * C + j);
        for (int64_t m = n; m >= 0; m = next[m]) {
            acc = acc + tri_load(dout, dout_bf16, m * C + j);
            acc = dwte_bf16 ? tri_round_bf16(acc) : acc;
        }
        tri_store(dwte, dwte_bf16, r * C + j, acc);
    }
}

/* out(N,C)[n] += wpe[pos(row0 + n)], pos = tri_seq_position (engine/device/ops/positions_math.h: (row0 + n) % T
 * at cp 1, the global position of a local row under context parallelism) */
TRI_KERNEL position_forward_kernel(void *out, int out_bf16, const void *wpe, int wpe_bf16, int64_t N,
                                   int64_t C, int64_t T, int64_t row0, int cp, int cp_rank)
{
    for (int64_t i = TRI_GLOBAL_ID; i < N * C; i += TRI_GLOBAL_STRIDE) {
        int64_t n = i / C, j = i % C, pos = tri_seq_position(T, row0 + n, cp, cp_rank);
        tri_store(out, out_bf16, i, tri_load(out, out_bf16, i) + tri_load(wpe, wpe_bf16, pos * C + j));
    }
}

/* dwpe[pos(row0 + n)] += dout(N,C)[n]: each element (p, j), one thread, finds p's row t of a local
 * sequence of T_l = T / cp rows (tri_seq_local_row; none: another cp rank's position) and sums the rows
 * n = n0, n0 + T_l, ... (n0 = (t - row0) mod T_l) in order from dwpe[p][j] and stores once (elements are
 * independent, so a thread per element, neighbours along j, gives the bits of any other split);
 * positions no row reaches are left untouched. At cp 1, t = p and T_l = T: the mapping without cp. */
TRI_KERNEL position_backward_kernel(void *dwpe, int dwpe_bf16, const void *dout, int dout_bf16, int64_t N,
                                    int64_t C, int64_t T, int64_t row0, int cp, int cp_rank)
{
    int64_t T_l = cp > 1 ? T / cp : T;
    for (int64_t idx = TRI_GLOBAL_ID; idx < T * C; idx += TRI_GLOBAL_STRIDE) {
        int64_t p = idx / C, j = idx % C, t = tri_seq_local_row(T, p, cp, cp_rank);
        int64_t n0 = (t - row0 % T_l + T_l) % T_l;
        if (t < 0 || n0 >= N)
            continue;
        float acc = tri_load(dwpe, dwpe_bf16, p * C + j);
        for (int64_t n = n0; n < N; n += T_l)
            acc += tri_load(dout, dout_bf16, n * C + j);
        tri_store(dwpe, dwpe_bf16, p * C + j, acc);
    }
}

#endif
