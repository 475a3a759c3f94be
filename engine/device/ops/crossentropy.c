/* engine/device/ops/crossentropy.c - the softmax cross-entropy ops' checked wrappers: the
 * vocab-parallel pieces (row max, sum of exponentials and target logit, loss, backward) and the
 * fused classifier of rows that hold the whole vocabulary.
 *
 * Contracts in engine/device/ops_list.h. The CPU loops are crossentropy_cpu.c; the CUDA ones
 * cuda/crossentropy/crossentropy.cu. */
#include <stdbool.h>

#include "engine/device/ops_internal.h"

/* ---- cross-entropy ---- */

static int check_logits(const char *op, tri_tensor logits, int64_t V_valid)
{
    int rc = tri_need_float(op, "logits", logits);
    if (!rc && (V_valid < 0 || V_valid > tri_tensor_cols(logits)))
        rc = TRI_ERR(TRI_EINVAL, "%s: V_valid %lld outside [0, %lld]", op, (long long)V_valid,
                     (long long)tri_tensor_cols(logits));
    return rc;
}

static int check_ce(const char *op, tri_tensor logits, tri_tensor maxes, int64_t V_valid)
{
    int rc = check_logits(op, logits, V_valid);
    if (!rc) rc = tri_need(op, "maxes", maxes, TRI_F32);
    if (!rc) rc = tri_need_numel(op, "maxes", maxes, tri_tensor_rows(logits));
    return rc;
}

int tri_op_ce_row_max(tri_device *d, tri_tensor maxes, tri_tensor logits, int64_t V_valid)
{
    tri_widen w = tri_widen_start(d, check_ce("ce_row_max", logits, maxes, V_valid));
    tri_widen_arg(&w, &logits, false);
    return tri_widen_end(&w, w.rc ? 0 : TRI_DISPATCH(d, ce_row_max, maxes, logits, V_valid));
}

int tri_op_ce_sumexp_target(tri_device *d, tri_tensor stats, tri_tensor logits, tri_tensor maxes,
                            tri_tensor targets, int64_t vocab_start, int64_t V_valid)
{
    const char *op = "ce_sumexp_target";
    int rc = check_ce(op, logits, maxes, V_valid);
    if (!rc) rc = tri_need(op, "stats", stats, TRI_F32);
    if (!rc) rc = tri_need_matrix(op, "stats", stats, tri_tensor_rows(logits), 2);
    if (!rc) rc = tri_need(op, "targets", targets, TRI_I32);
    if (!rc) rc = tri_need_numel(op, "targets", targets, tri_tensor_rows(logits));
    tri_widen w = tri_widen_start(d, rc);
    tri_widen_arg(&w, &logits, false);
    return tri_widen_end(&w, w.rc ? 0
                                    : TRI_DISPATCH(d, ce_sumexp_target, stats, logits, maxes, targets, vocab_start,
                                                   V_valid));
}

int tri_op_ce_loss(tri_device *d, tri_tensor losses, tri_tensor maxes, tri_tensor stats)
{
    int rc = tri_need("ce_loss", "losses", losses, TRI_F32);
    if (!rc) rc = tri_need("ce_loss", "maxes", maxes, TRI_F32);
    if (!rc) rc = tri_need_numel("ce_loss", "maxes", maxes, tri_tensor_numel(losses));
    if (!rc) rc = tri_need("ce_loss", "stats", stats, TRI_F32);
    if (!rc) rc = tri_need_numel("ce_loss", "stats", stats, 2 * tri_tensor_numel(losses));
    return rc ? rc : TRI_DISPATCH(d, ce_loss, losses, maxes, stats);
}

int tri_op_ce_backward(tri_device *d, tri_tensor dlogits, tri_tensor logits, tri_tensor maxes,
                       tri_tensor stats, tri_tensor targets, int64_t vocab_start, int64_t V_valid,
                       float dloss)
{
    const char *op = "ce_backward";
    int rc = check_ce(op, logits, maxes, V_valid);
    if (!rc) rc = tri_need_float(op, "dlogits", dlogits);
    if (!rc) rc = tri_need_numel(op, "dlogits", dlogits, tri_tensor_numel(logits));
    if (!rc) rc = tri_need(op, "stats", stats, TRI_F32);
    if (!rc) rc = tri_need_matrix(op, "stats", stats, tri_tensor_rows(logits), 2);
    if (!rc) rc = tri_need(op, "targets", targets, TRI_I32);
    if (!rc) rc = tri_need_numel(op, "targets", targets, tri_tensor_rows(logits));
    tri_widen w = tri_widen_start(d, rc);
    tri_widen_arg(&w, &dlogits, true);
    tri_widen_arg(&w, &logits, false);
    return tri_widen_end(&w, w.rc ? 0
                                    : TRI_DISPATCH(d, ce_backward, dlogits, logits, maxes, stats, targets, vocab_start,
                                                   V_valid, dloss));
}

/* dlogits may be the logits themselves (same data, same dtype) or apart from them, nothing between. */
static int check_in_place(const char *op, tri_tensor dlogits, tri_tensor logits)
{
    const char *a = dlogits.data, *b = logits.data;
    bool apart = a + tri_tensor_bytes(dlogits) <= b || b + tri_tensor_bytes(logits) <= a;
    if (a == b && dlogits.dtype != logits.dtype)
        return TRI_ERR(TRI_EINVAL, "%s: 'dlogits' is the logits' memory but %s, not the logits' %s", op,
                       tri_dtype_name(dlogits.dtype), tri_dtype_name(logits.dtype));
    if (a != b && !apart)
        return TRI_ERR(TRI_EINVAL, "%s: 'dlogits' overlaps 'logits' without being them (in place means the same "
                       "data pointer)", op);
    return TRI_OK;
}

int tri_op_ce_fused(tri_device *d, tri_tensor losses, tri_tensor dlogits, tri_tensor logits, tri_tensor targets,
                    int64_t V_valid, float dloss)
{
    const char *op = "ce_fused";
    int64_t N = tri_tensor_rows(logits);
    int rc = check_logits(op, logits, V_valid);
    if (!rc) rc = tri_need(op, "losses", losses, TRI_F32);
    if (!rc) rc = tri_need_numel(op, "losses", losses, N);
    if (!rc) rc = tri_need(op, "targets", targets, TRI_I32);
    if (!rc) rc = tri_need_numel(op, "targets", targets, N);
    if (!rc && tri_tensor_present(dlogits)) {
        rc = tri_need_float(op, "dlogits", dlogits);
        if (!rc) rc = tri_need_numel(op, "dlogits", dlogits, tri_tensor_numel(logits));
        if (!rc) rc = check_in_place(op, dlogits, logits);
    }
    tri_widen w = tri_widen_start(d, rc);
    tri_widen_arg(&w, &dlogits, true);
    tri_widen_arg(&w, &logits, false);
    return tri_widen_end(&w, w.rc ? 0 : TRI_DISPATCH(d, ce_fused, losses, dlogits, logits, targets, V_valid, dloss));
}
