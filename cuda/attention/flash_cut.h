/* cuda/attention/flash_cut.h - the problem the tiled fused attention kernels solve (flash_mma.kern.h):
 * queries against keys and values in their own buffer, both at global positions (context
 * parallelism's cut sequence, Megatron-Core's split of 2 cp chunks a rank; Liu et al. 2023's ring
 * attention block), or today's problem (one qkv buffer, one chunk at position 0 on both sides).
 *
 * Queries are the q columns of rows W wide (query head h at column h HS); keys and values the last
 * 2 NH_kv HS columns of rows Wk wide (k heads, then v heads): a qkv buffer itself (W = Wk), a
 * gathered qkv or a packed (B, Tk, 2 C_kv) buffer, as engine/device/ops_list.h's
 * flash_attention_kv_* ops take them. Each side's rows are one chunk or a cp rank's two
 * (tri_flash_rows: local row r at global position tri_flash_pos); causal by global position. The
 * kernels need every chunk but a side's last to be whole 64-row tiles (tri_flash_mma_rows_ok), so a
 * tile never straddles two chunks and its rows sit at consecutive global positions. */
#ifndef TRIDENT_CUDA_ATTENTION_FLASH_CUT_H
#define TRIDENT_CUDA_ATTENTION_FLASH_CUT_H

#include <stdbool.h>
#include <stdint.h>

#include "engine/core/math.h"
#include "engine/device/ops/attention_math.h"

typedef struct tri_flash_mma_cut {
    tri_flash_dims d;      /* d.T: query rows (B, NH query heads, NH_kv key/value heads, HS) */
    int64_t W, Tk, Wk;     /* query row width; key rows and key row width (elements) */
    tri_flash_rows qr, kr; /* the two sides' global positions */
    int accumulate;        /* backward: add the gradient to the output's values (else overwrite) */
} tri_flash_mma_cut;

/* Today's problem: qkv(B, T, width) against itself, one chunk at position 0 on both sides. */
TRI_HD tri_flash_mma_cut tri_flash_mma_whole(tri_flash_dims d)
{
    tri_flash_mma_cut c;
    c.d = d;
    c.W = c.Wk = tri_flash_width(d);
    c.Tk = d.T;
    c.qr = c.kr = tri_flash_rows_whole(d.T);
    c.accumulate = 0;
    return c;
}

/* Whether the kernels take a side of n rows: one chunk (Tc >= n), or a first chunk of whole
 * 64-row tiles. */
TRI_HD bool tri_flash_mma_rows_ok(tri_flash_rows r, int64_t n)
{
    return r.Tc >= n || (r.Tc > 0 && r.Tc % TRI_FLASH_BR == 0);
}

/* The column of key head g in a key row (its value head at + NH_kv HS). */
TRI_HD int64_t tri_flash_mma_k_col(tri_flash_mma_cut c, int64_t g)
{
    return c.Wk - 2 * c.d.NH_kv * c.d.HS + g * c.d.HS;
}

#endif
