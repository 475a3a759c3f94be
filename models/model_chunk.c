/* models/model_chunk.c - what every family's chunk does the same way (see model_chunk.h). */
#include "models/model_chunk.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine/core/math.h"
#include "engine/core/status.h"

tri_param_spec *tri_spec_list_add(tri_spec_list *l, const char *name, int ndim, const int64_t *shape, int split,
                                  bool decay, tri_init_kind init, float std)
{
    if (l->n == l->cap) {
        int cap = l->cap ? 2 * l->cap : 32;
        tri_param_spec *v = realloc(l->v, (size_t)cap * sizeof *v);
        if (!v)
            return NULL;
        l->v = v;
        l->cap = cap;
    }
    tri_param_spec *s = &l->v[l->n++];
    memset(s, 0, sizeof *s);
    snprintf(s->name, sizeof s->name, "%s", name);
    s->ndim = ndim;
    for (int d = 0; d < ndim; d++)
        s->shape[d] = shape[d];
    s->split_dim = split;
    s->weight_decay = decay;
    s->init = init;
    s->init_std = std;
    s->init_rows = shape[0];
    s->unit = l->unit;
    return s;
}

void tri_model_bind_views(const tri_param_layout *L, tri_tensor **wslot, tri_tensor **gslot, int u,
                          tri_tensor pflat, tri_tensor gflat)
{
    const tri_param_unit *unit = &L->units[u];
    for (int i = unit->first; i < unit->first + unit->count; i++) {
        const tri_param *p = &L->params[i];
        tri_tensor at = tri_tensor_range(pflat, p->offset - unit->start, p->numel);
        *wslot[i] = tri_tensor_reshape(at, p->spec.ndim, p->local_shape);
        if (tri_tensor_present(gflat)) {
            at = tri_tensor_range(gflat, p->offset - unit->start, p->numel);
            *gslot[i] = tri_tensor_reshape(at, p->spec.ndim, p->local_shape);
        }
    }
}

int tri_model_load_windows(tri_device *dev, int64_t B, int64_t T, const int32_t *windows, tri_tensor tokens,
                           tri_tensor targets)
{
    int32_t *buf = malloc((size_t)(2 * B * T) * sizeof *buf);
    if (!buf)
        return TRI_ERR(TRI_ENOMEM, "out of memory loading a batch");
    for (int64_t b = 0; b < B; b++) {
        memcpy(buf + b * T, windows + b * (T + 1), (size_t)T * sizeof *buf);
        memcpy(buf + B * T + b * T, windows + b * (T + 1) + 1, (size_t)T * sizeof *buf);
    }
    int rc = tri_device_copy_from_host(dev, tokens, buf);
    if (!rc) rc = tri_device_copy_from_host(dev, targets, buf + B * T);
    free(buf);
    return rc;
}

int tri_model_logits_row(const tri_tp *tp, tri_tensor logits, int64_t N, int64_t V_l, int64_t vocab_size,
                         int64_t row, float *out)
{
    if (row < 0 || row >= N)
        return TRI_ERR(TRI_EINVAL, "logits row %lld outside the %lld rows of a micro-batch", (long long)row,
                       (long long)N);
    /* this rank's V_l logits of the row, all-gathered over TP into the start of the logits buffer
     * after moving the row to the buffer's end, out of the way */
    int ntp = tri_tp_size(tp), rc = TRI_OK;
    int64_t Vp = V_l * ntp;
    tri_tensor src = tri_tensor_range(logits, row * V_l, V_l);
    if (ntp > 1) {
        if (N * V_l < Vp + V_l)
            return TRI_ERR(TRI_ENOTSUP, "reading logits under TP needs a micro-batch of at least %d rows", ntp + 1);
        tri_tensor stage = tri_tensor_range(logits, (N - 1) * V_l, V_l);
        src = tri_tensor_range(logits, 0, Vp);
        rc = tri_op_copy(tp->dev, stage, tri_tensor_range(logits, row * V_l, V_l));
        if (!rc) rc = tri_comm_all_gather(tp->comm, src, stage);
    }
    float *host = malloc((size_t)Vp * sizeof *host);
    if (!host)
        return TRI_ERR(TRI_ENOMEM, "out of memory for logits");
    if (!rc && src.dtype == TRI_BF16) { /* bf16 logits: read raw, widened on the host */
        uint16_t *raw = malloc((size_t)Vp * sizeof *raw);
        rc = raw ? tri_device_copy_to_host(tp->dev, raw, src) : TRI_ERR(TRI_ENOMEM, "out of memory for logits");
        for (int64_t v = 0; !rc && v < tri_tensor_numel(src); v++)
            host[v] = tri_bf16_to_float(raw[v]);
        free(raw);
    } else if (!rc) {
        rc = tri_device_copy_to_host(tp->dev, host, src);
    }
    if (!rc)
        memcpy(out, host, (size_t)vocab_size * sizeof *out);
    free(host);
    return rc;
}
