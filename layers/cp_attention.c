/* layers/cp_attention.c - attention over a context-parallel group (see cp_attention.h): the
 * all-gather forward, the all_gather and the deterministic (owner computes) backward, and the p2p
 * ring (Liu et al. 2023, Ring Attention, in Megatron-Core's form with the two-chunk balance), on the
 * device's kv ops (engine/device/ops_list.h) and the comm's all-gather, reduce-scatter and
 * non-blocking p2p only. */
#include "layers/cp_attention.h"

#include "engine/core/status.h"

tri_flash_rows tri_cp_local_rows(int cp, int cp_rank, int64_t T_l)
{
    int64_t Tc = T_l / 2;
    tri_flash_rows r = {Tc, cp_rank * Tc, (2 * (int64_t)cp - 1 - cp_rank) * Tc};
    return r;
}

/* The rules that need no comm: cp, its rank, the chunk length, the comm type, the dtype. */
static int check_layout(const tri_cp *cp, const tri_cp_shape *s)
{
    int64_t T_l = s->local.T;
    if (cp->cp < 1 || cp->cp_rank < 0 || cp->cp_rank >= cp->cp)
        return TRI_ERR(TRI_EINVAL, "context parallel: cp %d and cp rank %d: cp must be >= 1 and the rank in [0, cp)",
                       cp->cp, cp->cp_rank);
    if (T_l % 2 != 0 || (T_l / 2) % TRI_FLASH_BC != 0)
        return TRI_ERR(TRI_EINVAL, "context parallel: seq-length %lld at cp %d gives chunks of Tc = T / (2 cp) = "
                       "%lld%s rows: Tc must be a whole multiple of %d (the fused attention's tile)",
                       (long long)(T_l * cp->cp), cp->cp, (long long)(T_l / 2), T_l % 2 ? ".5" : "", TRI_FLASH_BC);
    if (cp->type != TRI_CP_COMM_P2P && cp->type != TRI_CP_COMM_ALL_GATHER)
        return TRI_ERR(TRI_EINVAL, "context parallel: comm type %d is neither p2p (%d) nor all_gather (%d)",
                       (int)cp->type, TRI_CP_COMM_P2P, TRI_CP_COMM_ALL_GATHER);
    if (s->dtype != TRI_F32 && s->dtype != TRI_BF16)
        return TRI_ERR(TRI_EINVAL, "context parallel: activations %s, expected f32 or bf16", tri_dtype_name(s->dtype));
    return TRI_OK;
}

int tri_cp_check(const tri_cp *cp, const tri_cp_shape *s)
{
    int rc = check_layout(cp, s);
    if (rc)
        return rc;
    if (!cp->comm || cp->comm->size != cp->cp)
        return TRI_ERR(TRI_EINVAL, "context parallel: the cp group has %d ranks, cp is %d (cp must divide the ranks "
                       "and the group be its cp ranks)", cp->comm ? cp->comm->size : 0, cp->cp);
    return TRI_OK;
}

/* Whether this context runs the ring (p2p without deterministic mode; deterministic mode keeps the
 * owner-computes algorithm for both comm types). */
static bool ring(const tri_cp *cp)
{
    return cp->type == TRI_CP_COMM_P2P && !cp->deterministic && cp->cp > 1;
}

/* Sizes of the local problem. */
typedef struct cp_sizes {
    int64_t cp, B, T_l, Tc, T, NH, HS, C, KV, W; /* KV = 2 C_kv */
} cp_sizes;

static cp_sizes sizes_of(const tri_cp *cp, tri_flash_dims f)
{
    cp_sizes z = {cp->cp, f.B, f.T, f.T / 2, f.T * cp->cp, f.NH, f.HS, f.NH * f.HS, 2 * f.NH_kv * f.HS,
                  tri_flash_width(f)};
    return z;
}

int tri_cp_scratch_numel(const tri_cp *cp, const tri_cp_shape *s, int64_t *act_n, int64_t *f32_n)
{
    int rc = check_layout(cp, s);
    if (rc)
        return rc;
    int64_t fwd_n, fwd_f32_n; /* the counts shared with the partitioner's plan (engine/device/ops/attention_math.h) */
    if (ring(cp))
        tri_cp_ring_scratch_counts(s->local, act_n, f32_n, &fwd_n, &fwd_f32_n);
    else
        tri_cp_scratch_counts(s->local, cp->cp, cp->deterministic, act_n, f32_n, &fwd_n);
    return TRI_OK;
}

/* A view of n elements at *at of flat, shaped (n0, n1, n2), advancing *at. */
static tri_tensor carve(tri_tensor flat, int64_t *at, int64_t n0, int64_t n1, int64_t n2)
{
    int64_t shape[3] = {n0, n1, n2};
    tri_tensor t = tri_tensor_reshape(tri_tensor_range(flat, *at, n0 * n1 * n2), 3, shape);
    *at += n0 * n1 * n2;
    return t;
}

/* Between a gathered buffer in rank order (cp, B, T_l, X) and global order (B, T, X): rank r's rows
 * of sequence b are its chunk r (Tc rows) then its chunk 2cp-1-r. to_global: rank -> global. */
static int reorder_rows(tri_device *d, tri_tensor rank_major, tri_tensor global, const cp_sizes *z, int64_t X,
                        bool to_global)
{
    int rc = TRI_OK;
    for (int64_t r = 0; r < z->cp && !rc; r++)
        for (int64_t b = 0; b < z->B && !rc; b++)
            for (int64_t c = 0; c < 2 && !rc; c++) {
                int64_t chunk = c == 0 ? r : 2 * z->cp - 1 - r, n = z->Tc * X;
                tri_tensor rv = tri_tensor_range(rank_major, ((r * z->B + b) * z->T_l + c * z->Tc) * X, n);
                tri_tensor gv = tri_tensor_range(global, (b * z->T + chunk * z->Tc) * X, n);
                rc = to_global ? tri_op_copy(d, gv, rv) : tri_op_copy(d, rv, gv);
            }
    return rc;
}

/* The same for row statistics: (cp, B, NH, T_l) in rank order -> (B, NH, T). */
static int reorder_stats(tri_device *d, tri_tensor rank_major, tri_tensor global, const cp_sizes *z)
{
    int rc = TRI_OK;
    for (int64_t r = 0; r < z->cp && !rc; r++)
        for (int64_t bh = 0; bh < z->B * z->NH && !rc; bh++)
            for (int64_t c = 0; c < 2 && !rc; c++) {
                int64_t chunk = c == 0 ? r : 2 * z->cp - 1 - r;
                rc = tri_op_copy(d, tri_tensor_range(global, bh * z->T + chunk * z->Tc, z->Tc),
                                 tri_tensor_range(rank_major, (r * z->B * z->NH + bh) * z->T_l + c * z->Tc, z->Tc));
            }
    return rc;
}

/* kv_g (B, T, 2 C_kv) in global order: the k|v columns of every rank's qkv, packed, gathered. */
static int gather_kv(tri_device *d, const tri_cp *cp, const cp_sizes *z, tri_tensor qkv, tri_tensor act,
                     tri_tensor *kv_g)
{
    int64_t at = 0;
    tri_tensor kv_l = carve(act, &at, z->B, z->T_l, z->KV);
    tri_tensor kv_r = carve(act, &at, z->cp * z->B, z->T_l, z->KV);
    *kv_g = carve(act, &at, z->B, z->T, z->KV);
    int rc = tri_op_copy_columns(d, kv_l, 0, qkv, z->C, z->KV);
    if (!rc) rc = tri_comm_all_gather(cp->comm, tri_tensor_flat(kv_r), tri_tensor_flat(kv_l));
    if (!rc) rc = reorder_rows(d, kv_r, *kv_g, z, z->KV, true);
    return rc;
}

/* Checks shared by both passes: the cp context and the tensors' shapes (the ops check the rest). */
static int check_call(const char *fn, const tri_cp *cp, tri_tensor qkv, tri_tensor atty, tri_tensor lse,
                      const tri_cp_scratch *scratch, tri_cp_shape *s)
{
    char x[96], y[96];
    if (qkv.ndim != 3 || lse.ndim != 3 || lse.shape[1] == 0 || tri_tensor_cols(atty) % lse.shape[1] != 0)
        return TRI_ERR(TRI_EINVAL, "%s: qkv %s must be (B, T_l, W) and lse %s (B, NH_l, T_l)", fn, tri_tensor_describe(qkv, x, sizeof x),
                       tri_tensor_describe(lse, y, sizeof y));
    s->local = tri_flash_dims_of(qkv, atty, lse);
    s->dtype = qkv.dtype;
    int64_t act_n, f32_n;
    int rc = tri_cp_check(cp, s);
    if (!rc) rc = tri_cp_scratch_numel(cp, s, &act_n, &f32_n);
    if (rc)
        return rc;
    if (scratch->act.dtype != qkv.dtype || tri_tensor_numel(scratch->act) < act_n ||
        scratch->f32.dtype != TRI_F32 || tri_tensor_numel(scratch->f32) < f32_n)
        return TRI_ERR(TRI_EINVAL, "%s: scratch act %s and f32 %s: need %lld elements of qkv's dtype and %lld f32 "
                       "(tri_cp_scratch_numel)", fn, tri_tensor_describe(scratch->act, x, sizeof x), tri_tensor_describe(scratch->f32, y, sizeof y),
                       (long long)act_n, (long long)f32_n);
    return TRI_OK;
}

/* ---- the ring (p2p, not deterministic) ----
 * cp - 1 steps. At step s rank i holds the k|v block of rank j = (i - s) mod cp (its local rows, at
 * j's two chunks' global positions) and, while computing against it, passes it on to rank i + 1 and
 * receives the next from rank i - 1 (tri_comm_p2p_start; the wait is the exposed time). The kv ops
 * skip the fully masked work by the rows' global positions: a block from j < i meets only chunk j
 * (its chunk 2cp-1-j lies after every local query), a block from j > i meets only the local second
 * chunk (the local chunk i lies before both of j's chunks: those rows get lse -inf, no tile), and
 * the own block is causal; no masked tile is computed. */

enum { TAG_KV = 1, TAG_DKV = 2 };

/* Starts passing `send` to the next rank and receiving `recv` from the previous one. */
static int ring_start(const tri_cp *cp, tri_tensor send, tri_tensor recv, int tag, tri_comm_request *req)
{
    int n = cp->cp;
    tri_p2p ops[2] = {
        {.send = true, .peer = (cp->cp_rank + 1) % n, .tag = tag, .t = tri_tensor_flat(send)},
        {.send = false, .peer = (cp->cp_rank + n - 1) % n, .tag = tag, .t = tri_tensor_flat(recv)},
    };
    return tri_comm_p2p_start(cp->comm, ops, 2, req);
}

/* Forward: the own block first (causal), then the blocks of ranks i-1, i-2, ...; each block's
 * partial (o2, l2) merged into (atty, lse) by the log-sum-exp (flash_attention_merge). */
static int forward_ring(tri_device *d, const tri_cp *cp, const cp_sizes *z, tri_tensor atty, tri_tensor lse,
                        tri_tensor qkv, const tri_cp_scratch *scratch)
{
    tri_flash_rows mine = tri_cp_local_rows(cp->cp, cp->cp_rank, z->T_l);
    int64_t at = 0, fat = 0;
    tri_tensor kv[2];
    kv[0] = carve(scratch->act, &at, z->B, z->T_l, z->KV);        /* the block in hand / arriving */
    kv[1] = carve(scratch->act, &at, z->B, z->T_l, z->KV);
    tri_tensor o2 = carve(scratch->act, &at, z->B, z->T_l, z->C); /* a block's partial out */
    tri_tensor l2 = carve(scratch->f32, &fat, z->B, z->NH, z->T_l); /* and lse */
    tri_comm_request req = {0};
    int rc = tri_op_copy_columns(d, kv[0], 0, qkv, z->C, z->KV);
    for (int s = 0; s < cp->cp && !rc; s++) {
        tri_tensor cur = kv[s % 2];
        if (s + 1 < cp->cp)
            rc = ring_start(cp, cur, kv[(s + 1) % 2], TAG_KV, &req);
        int j = (cp->cp_rank - s + cp->cp) % cp->cp;
        if (!rc && s == 0)
            rc = tri_op_flash_attention_kv_forward(d, atty, lse, qkv, qkv, mine, mine);
        if (!rc && s > 0)
            rc = tri_op_flash_attention_kv_forward(d, o2, l2, qkv, cur, mine, tri_cp_local_rows(cp->cp, j, z->T_l));
        if (!rc && s > 0)
            rc = tri_op_flash_attention_merge(d, atty, lse, o2, l2);
        int rw = tri_comm_wait(&req);
        rc = rc ? rc : rw;
    }
    return rc;
}

/* Backward: the k|v block and its f32 dk|dv accumulator travel together. Step s, block of rank j:
 * the block is passed on (started first, overlapping the whole step); one pass
 * (flash_attention_kv_backward) adds the block's share to dq and writes the local queries' share of
 * the block's dk, dv into dkv_loc, overlapping the accumulator's arrival from rank i - 1; then the
 * accumulator += dkv_loc and is passed on, overlapping the next step. After the last step each
 * accumulator, with every rank's share, is one hop before its owner: the last pass returns it, and
 * the owner unpacks it into dqkv's k|v columns. dq accumulates in dqkv's dtype, own block first. */
static int backward_ring(tri_device *d, const tri_cp *cp, const cp_sizes *z, tri_tensor dqkv, tri_tensor delta,
                         tri_tensor datty, tri_tensor qkv, tri_tensor lse, const tri_cp_scratch *scratch)
{
    tri_flash_rows mine = tri_cp_local_rows(cp->cp, cp->cp_rank, z->T_l);
    int64_t at = 0, fat = 0;
    tri_tensor kv[2], dkv[2];
    kv[0] = carve(scratch->act, &at, z->B, z->T_l, z->KV);
    kv[1] = carve(scratch->act, &at, z->B, z->T_l, z->KV);
    dkv[0] = carve(scratch->f32, &fat, z->B, z->T_l, z->KV); /* the accumulator in hand / arriving */
    dkv[1] = carve(scratch->f32, &fat, z->B, z->T_l, z->KV);
    tri_tensor dkv_loc = carve(scratch->f32, &fat, z->B, z->T_l, z->KV); /* this rank's share of a block */
    tri_comm_request kreq = {0}, dreq = {0};
    int rc = tri_op_copy_columns(d, kv[0], 0, qkv, z->C, z->KV);
    for (int s = 0; s < cp->cp && !rc; s++) {
        tri_tensor cur = kv[s % 2], acc = dkv[s % 2];
        tri_flash_rows rows = tri_cp_local_rows(cp->cp, (cp->cp_rank - s + cp->cp) % cp->cp, z->T_l);
        if (s + 1 < cp->cp)
            rc = ring_start(cp, cur, kv[(s + 1) % 2], TAG_KV, &kreq);
        /* the own block's share starts the accumulator; later shares go to dkv_loc, zeroed (the op's
           one accumulate flag is dq's) */
        if (!rc && s > 0) rc = tri_op_fill(d, dkv_loc, 0.0f);
        if (!rc)
            rc = tri_op_flash_attention_kv_backward(d, dqkv, s == 0 ? acc : dkv_loc, datty, qkv, cur, lse, delta, mine,
                                                    rows, s > 0);
        if (!rc) rc = tri_comm_wait(&dreq); /* acc: the accumulator of this block, from rank i - 1 */
        if (!rc && s > 0) rc = tri_op_add(d, acc, acc, dkv_loc);
        if (!rc) rc = ring_start(cp, acc, dkv[(s + 1) % 2], TAG_DKV, &dreq);
        int rw = tri_comm_wait(&kreq);
        rc = rc ? rc : rw;
    }
    int rw = tri_comm_wait(&dreq); /* the own block's accumulator, home */
    rc = rc ? rc : rw;
    if (!rc) rc = tri_op_copy_columns(d, dqkv, z->C, dkv[cp->cp % 2], 0, z->KV);
    return rc;
}

int tri_cp_attention_forward(tri_device *d, const tri_cp *cp, tri_tensor atty, tri_tensor lse, tri_tensor qkv,
                             const tri_cp_scratch *scratch)
{
    tri_cp_shape s;
    int rc = check_call("tri_cp_attention_forward", cp, qkv, atty, lse, scratch, &s);
    if (rc)
        return rc;
    cp_sizes z = sizes_of(cp, s.local);
    if (ring(cp))
        return forward_ring(d, cp, &z, atty, lse, qkv, scratch);
    tri_tensor kv_g;
    rc = gather_kv(d, cp, &z, qkv, scratch->act, &kv_g);
    if (!rc)
        rc = tri_op_flash_attention_kv_forward(d, atty, lse, qkv, kv_g, tri_cp_local_rows(cp->cp, cp->cp_rank, z.T_l),
                                               tri_flash_rows_whole(z.T));
    return rc;
}

/* all_gather: dq against the gathered keys, dk / dv partials of the whole sequence reduce-scattered
 * (f32) to their owners. */
static int backward_all_gather(tri_device *d, const tri_cp *cp, const cp_sizes *z, tri_tensor dqkv, tri_tensor delta,
                               tri_tensor datty, tri_tensor qkv, tri_tensor lse, const tri_cp_scratch *scratch)
{
    tri_flash_rows mine = tri_cp_local_rows(cp->cp, cp->cp_rank, z->T_l), all = tri_flash_rows_whole(z->T);
    tri_tensor kv_g;
    int64_t at = 0;
    tri_tensor dkv_g = carve(scratch->f32, &at, z->B, z->T, z->KV);
    tri_tensor dkv_r = carve(scratch->f32, &at, z->cp * z->B, z->T_l, z->KV);
    tri_tensor dkv_l = carve(scratch->f32, &at, z->B, z->T_l, z->KV);
    int rc = gather_kv(d, cp, z, qkv, scratch->act, &kv_g);
    if (!rc) rc = tri_op_flash_attention_kv_backward(d, dqkv, dkv_g, datty, qkv, kv_g, lse, delta, mine, all, false);
    if (!rc) rc = reorder_rows(d, dkv_r, dkv_g, z, z->KV, false);
    if (!rc) rc = tri_comm_reduce_scatter(cp->comm, tri_tensor_flat(dkv_l), tri_tensor_flat(dkv_r));
    if (!rc) rc = tri_op_copy_columns(d, dqkv, z->C, dkv_l, 0, z->KV);
    return rc;
}

/* Deterministic, owner computes: every rank's qkv, dout, lse and delta gathered in global order;
 * dq of the local queries against all keys, dk / dv of the local keys against all queries. */
static int backward_owner(tri_device *d, const tri_cp *cp, const cp_sizes *z, tri_tensor dqkv, tri_tensor delta,
                          tri_tensor datty, tri_tensor qkv, tri_tensor lse, const tri_cp_scratch *scratch)
{
    tri_flash_rows mine = tri_cp_local_rows(cp->cp, cp->cp_rank, z->T_l), all = tri_flash_rows_whole(z->T);
    int64_t at = 0, fat = 0;
    tri_tensor qkv_r = carve(scratch->act, &at, z->cp * z->B, z->T_l, z->W);
    tri_tensor qkv_g = carve(scratch->act, &at, z->B, z->T, z->W);
    tri_tensor dout_r = carve(scratch->act, &at, z->cp * z->B, z->T_l, z->C);
    tri_tensor dout_g = carve(scratch->act, &at, z->B, z->T, z->C);
    tri_tensor stat_r = carve(scratch->f32, &fat, z->cp * z->B, z->NH, z->T_l);
    tri_tensor lse_g = carve(scratch->f32, &fat, z->B, z->NH, z->T);
    tri_tensor delta_g = carve(scratch->f32, &fat, z->B, z->NH, z->T);
    tri_comm *c = cp->comm;
    int rc = tri_comm_all_gather(c, tri_tensor_flat(qkv_r), tri_tensor_flat(qkv));
    if (!rc) rc = reorder_rows(d, qkv_r, qkv_g, z, z->W, true);
    if (!rc) rc = tri_comm_all_gather(c, tri_tensor_flat(dout_r), tri_tensor_flat(datty));
    if (!rc) rc = reorder_rows(d, dout_r, dout_g, z, z->C, true);
    if (!rc) rc = tri_comm_all_gather(c, tri_tensor_flat(stat_r), tri_tensor_flat(lse));
    if (!rc) rc = reorder_stats(d, stat_r, lse_g, z);
    if (!rc) rc = tri_comm_all_gather(c, tri_tensor_flat(stat_r), tri_tensor_flat(delta));
    if (!rc) rc = reorder_stats(d, stat_r, delta_g, z);
    if (!rc) rc = tri_op_flash_attention_kv_backward_dq(d, dqkv, datty, qkv, qkv_g, lse, delta, mine, all, false);
    if (!rc)
        rc = tri_op_flash_attention_kv_backward_dkv(d, dqkv, dout_g, qkv_g, qkv, lse_g, delta_g, all, mine, false);
    return rc;
}

int tri_cp_attention_backward(tri_device *d, const tri_cp *cp, tri_tensor dqkv, tri_tensor delta, tri_tensor datty,
                              tri_tensor qkv, tri_tensor atty, tri_tensor lse, const tri_cp_scratch *scratch)
{
    tri_cp_shape s;
    int rc = check_call("tri_cp_attention_backward", cp, qkv, atty, lse, scratch, &s);
    if (!rc) rc = tri_op_flash_attention_delta(d, delta, datty, atty);
    if (rc)
        return rc;
    cp_sizes z = sizes_of(cp, s.local);
    if (ring(cp))
        return backward_ring(d, cp, &z, dqkv, delta, datty, qkv, lse, scratch);
    return cp->deterministic ? backward_owner(d, cp, &z, dqkv, delta, datty, qkv, lse, scratch)
                             : backward_all_gather(d, cp, &z, dqkv, delta, datty, qkv, lse, scratch);
}
