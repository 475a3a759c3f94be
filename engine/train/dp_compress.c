/* engine/train/dp_compress.c - the compressed data-parallel gradient reduction (see dp_compress.h). */
#include "engine/train/dp_compress.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "engine/core/rng.h"
#include "engine/core/status.h"
#include "engine/device/ops/compress_math.h"

/* The matrix view of this rank's shard of p: cols its last dimension, rows all the others. */
static void matrix_dims(const tri_param *p, int64_t *rows, int64_t *cols)
{
    *cols = p->spec.ndim >= 2 ? p->local_shape[p->spec.ndim - 1] : p->numel;
    *rows = *cols > 0 ? p->numel / *cols : 0;
}

/* A parameter PowerSGD compresses: two or more dimensions whose rank-r factors are smaller than its
 * matrix (tri_powersgd_compresses). Decided once, in powersgd_offsets: q_at[i] >= 0 says so after. */
static bool is_matrix(const tri_compression *c, const tri_param *p, int64_t *rows, int64_t *cols)
{
    matrix_dims(p, rows, cols);
    return p->spec.ndim >= 2 && tri_powersgd_compresses(c, *rows, *cols);
}

/* Words of one rank's payload for a unit of n elements (1bit, qsgd, topk). */
static int64_t payload_words(const tri_compression *c, int64_t n)
{
    return tri_compression_payload_bytes(c, 1, n) / 4;
}

/* PowerSGD's per-parameter offsets in q and p; returns the largest unit's p length. */
static int64_t powersgd_offsets(tri_dp_compress *x)
{
    const tri_param_layout *L = x->L;
    int64_t r = x->c.powersgd_rank, q = 0, largest = 0;
    for (int u = 0; u < L->n_units; u++) {
        const tri_param_unit *un = &L->units[u];
        int64_t pl = 0;
        for (int i = un->first; i < un->first + un->count; i++) {
            int64_t rows, cols;
            const tri_param *p = &L->params[i];
            x->p_at[i] = pl;
            if (is_matrix(&x->c, p, &rows, &cols)) {
                x->q_at[i] = q;
                q += r * cols;
                pl += r * rows;
            } else {
                x->q_at[i] = -1;
                pl += p->numel;
            }
        }
        largest = pl > largest ? pl : largest;
    }
    x->q_numel = q;
    return largest;
}

/* Two-phase: the chunk payloads (D per unit, each at the longest chunk's words), the server's
 * buffers and residual (the longest chunk of each unit: server_error_feedback, optimizer memory). */
static int take_two_phase(tri_dp_compress *x, tri_arena *a)
{
    const tri_param_layout *L = x->L;
    int64_t words = 1, longest = 1, total = 0;
    if (!x->server_at) {
        x->server_at = calloc((size_t)(L->n_units > 0 ? L->n_units : 1), sizeof *x->server_at);
        x->ops = calloc((size_t)(2 * L->dp), sizeof *x->ops);
        if (!x->server_at || !x->ops)
            return TRI_ERR(TRI_ENOMEM, "grad compression: out of memory");
    }
    for (int u = 0; u < L->n_units; u++) {
        int64_t chunk = tri_compression_chunk(&x->c, L->units[u].len, L->dp), w = payload_words(&x->c, chunk);
        words = w > words ? w : words;
        longest = chunk > longest ? chunk : longest;
        x->server_at[u] = total;
        total += chunk;
    }
    int rc = TRI_ARENA_TAKE(a, TRI_MEM_OPTIMIZER, &x->server_residual, TRI_F32, total > 0 ? total : 1);
    if (!rc) rc = TRI_ARENA_TAKE(a, TRI_MEM_COMM, &x->send, TRI_I32, (int64_t)L->dp * words);
    if (!rc) rc = TRI_ARENA_TAKE(a, TRI_MEM_COMM, &x->recv, TRI_I32, (int64_t)L->dp * words);
    if (!rc) rc = TRI_ARENA_TAKE(a, TRI_MEM_COMM, &x->gathered, TRI_I32, (int64_t)L->dp * words);
    if (!rc) rc = TRI_ARENA_TAKE(a, TRI_MEM_COMM, &x->server_send, TRI_I32, words);
    if (!rc) rc = TRI_ARENA_TAKE(a, TRI_MEM_COMM, &x->server_sum, TRI_F32, longest);
    return rc;
}

int tri_dp_compress_take(tri_dp_compress *x, tri_arena *a, const tri_param_layout *L, const tri_compression *c,
                         int stage)
{
    int rc = tri_compression_check(c, stage);
    if (rc)
        return rc;
    x->c = *c;
    x->L = L;
    x->stage = stage;
    x->on = c->kind != TRI_COMPRESS_NONE && L->dp > 1;
    x->residual = x->send = x->gathered = x->q = x->p = tri_tensor_none();
    x->recv = x->server_send = x->server_sum = x->server_residual = tri_tensor_none();
    if (!x->on)
        return TRI_OK;
    rc = TRI_ARENA_TAKE(a, TRI_MEM_OPTIMIZER, &x->residual, TRI_F32, L->padded_numel);
    if (rc)
        return rc;
    if (c->kind == TRI_COMPRESS_POWERSGD) {
        if (!x->q_at) {
            x->q_at = calloc((size_t)(L->n > 0 ? L->n : 1), sizeof *x->q_at);
            x->p_at = calloc((size_t)(L->n > 0 ? L->n : 1), sizeof *x->p_at);
            if (!x->q_at || !x->p_at)
                return TRI_ERR(TRI_ENOMEM, "grad compression: out of memory");
        }
        int64_t pl = powersgd_offsets(x);
        rc = TRI_ARENA_TAKE(a, TRI_MEM_OPTIMIZER, &x->q, TRI_F32, x->q_numel > 0 ? x->q_numel : 1);
        if (!rc) rc = TRI_ARENA_TAKE(a, TRI_MEM_COMM, &x->p, TRI_F32, pl > 0 ? pl : 1);
        return rc;
    }
    int64_t words = 1;
    for (int u = 0; u < L->n_units; u++) {
        int64_t w = payload_words(c, L->units[u].len);
        words = w > words ? w : words;
    }
    if (c->reduce == TRI_COMPRESS_REDUCE_TWO_PHASE)
        return take_two_phase(x, a);
    rc = TRI_ARENA_TAKE(a, TRI_MEM_COMM, &x->send, TRI_I32, words);
    if (!rc) rc = TRI_ARENA_TAKE(a, TRI_MEM_COMM, &x->gathered, TRI_I32, (int64_t)L->dp * words);
    return rc;
}

void tri_dp_compress_free(tri_dp_compress *x)
{
    free(x->q_at);
    free(x->p_at);
    free(x->server_at);
    free(x->ops);
    memset(x, 0, sizeof *x);
}

void tri_dp_compress_reset(tri_dp_compress *x)
{
    x->q_ready = x->residual_ready = false;
}

/* The residuals (r, and r_s with two-phase) from zero unless they hold values already (a
 * compressed step ran, or a checkpoint wrote them). */
static int make_ready(tri_dp_compress *x, tri_device *dev)
{
    if (x->residual_ready)
        return TRI_OK;
    int rc = tri_op_fill(dev, x->residual, 0.0f);
    if (!rc && x->server_at) rc = tri_op_fill(dev, x->server_residual, 0.0f);
    x->residual_ready = !rc;
    return rc;
}

int tri_dp_compress_residual_read(tri_dp_compress *x, tri_device *dev, int64_t at, int64_t n, float *host)
{
    if (!x->on || at < 0 || at + n > x->L->padded_numel)
        return TRI_ERR(TRI_EINVAL, "error-feedback residual [%lld, %lld) read without compression or past its %lld "
                       "elements", (long long)at, (long long)(at + n), (long long)(x->L ? x->L->padded_numel : 0));
    if (!x->residual_ready) { /* no compressed step yet: r is zero */
        memset(host, 0, (size_t)n * sizeof *host);
        return TRI_OK;
    }
    return tri_device_copy_to_host(dev, host, tri_tensor_range(x->residual, at, n));
}

int tri_dp_compress_residual_write(tri_dp_compress *x, tri_device *dev, int64_t at, int64_t n, const float *host)
{
    if (!x->on || at < 0 || at + n > x->L->padded_numel)
        return TRI_ERR(TRI_EINVAL, "error-feedback residual [%lld, %lld) written without compression or past its "
                       "%lld elements", (long long)at, (long long)(at + n),
                       (long long)(x->L ? x->L->padded_numel : 0));
    int rc = make_ready(x, dev); /* the padding stays zero */
    return rc ? rc : tri_device_copy_from_host(dev, tri_tensor_range(x->residual, at, n), host);
}

/* Zeroes the elements of t that are not the model's within the flat range [lo, hi), t's element 0
 * being flat offset `base`: the layout's padding between unit u's parameters and after the last, and
 * the vocabulary padding rows at the end of a parameter (tri_param_real_numel). Their gradient is not
 * a gradient (uncompressed it is zero; 1bit decodes a zero as +scale, PowerSGD's P Q^T spreads into
 * it), so it is not applied and carries no error feedback; this also keeps the padding rows of the
 * weights zero and makes the residuals exactly what their per-parameter checkpoint entries hold
 * (state_shards.h). */
int tri_dp_compress_zero_padding(const tri_dp_compress *x, tri_device *dev, int unit, tri_tensor t, int64_t base,
                                 int64_t lo, int64_t hi)
{
    const tri_param_unit *u = &x->L->units[unit];
    int64_t at = u->start;
    int rc = TRI_OK;
    for (int i = u->first; i <= u->first + u->count && !rc; i++) {
        int64_t next = i < u->first + u->count ? x->L->params[i].offset : u->start + u->len;
        int64_t a = at > lo ? at : lo, b = next < hi ? next : hi;
        if (b > a)
            rc = tri_op_fill(dev, tri_tensor_range(t, a - base, b - a), 0.0f);
        if (i < u->first + u->count)
            at = x->L->params[i].offset + tri_param_real_numel(&x->L->params[i]);
    }
    return rc;
}

/* Zeroes the decoded gradient g (unit u's, len elements) in the vocabulary padding rows of u's
 * parameters: uncompressed their gradient is zero, and decoded (1bit's +scale for a zero, PowerSGD's
 * P Q^T) it would move padding weights that stay zero and count in the gradient norm. */
static int zero_vocab_padding(tri_dp_compress *x, tri_device *dev, int unit, tri_tensor g)
{
    const tri_param_unit *u = &x->L->units[unit];
    int rc = TRI_OK;
    for (int i = u->first; i < u->first + u->count && !rc; i++) {
        const tri_param *p = &x->L->params[i];
        int64_t real = tri_param_real_numel(p);
        if (real < p->numel)
            rc = tri_op_fill(dev, tri_tensor_range(g, p->offset - u->start + real, p->numel - real), 0.0f);
    }
    return rc;
}

bool tri_dp_compress_plain(const tri_dp_compress *x, int64_t iter)
{
    return !x->on || iter < tri_compression_start_iter(&x->c);
}

/* The plain reduction of one unit (the iterations before tri_compression_start_iter): all-reduce at stage 0,
 * reduce-scatter into the owned slice at stage 1. */
static int plain_unit(tri_dp_compress *x, tri_comm *dp, tri_tensor whole, int unit)
{
    const tri_param_unit *u = &x->L->units[unit];
    if (x->stage == 0)
        return tri_comm_all_reduce(dp, whole, TRI_REDUCE_SUM);
    tri_tensor mine = tri_tensor_range(whole, (int64_t)dp->rank * (u->len / dp->size), u->len / dp->size);
    return tri_comm_reduce_scatter(dp, mine, whole);
}

/* 1bit, qsgd, topk: pack e (in r), r -= D(own payload), all-gather, decode the sum in rank order. */
static int gather_unit(tri_dp_compress *x, tri_device *dev, tri_comm *dp, tri_tensor g, tri_tensor r, int unit,
                       int64_t iter)
{
    const tri_param_unit *u = &x->L->units[unit];
    const tri_compression *c = &x->c;
    int64_t n = u->len, words = payload_words(c, n);
    int levels = c->kind == TRI_COMPRESS_QSGD ? c->qsgd_levels : 0, block = c->block_size;
    tri_tensor send = tri_tensor_range(x->send, 0, words), all = tri_tensor_range(x->gathered, 0, dp->size * words);
    int rc;
    if (c->kind == TRI_COMPRESS_TOPK)
        rc = tri_op_compress_topk_pack(dev, send, r);
    else if (c->kind == TRI_COMPRESS_1BIT)
        rc = tri_op_compress_sign_pack(dev, send, r, block);
    else /* the rounding's stream: (iteration, dp rank, the unit's first parameter in the model, so
          * every pipeline split draws the same), the element its index in the unit */
        rc = tri_op_compress_qsgd_pack(dev, send, r, block, levels, c->seed,
                                       tri_rng_hash64(tri_rng_hash64((uint64_t)iter) ^ ((uint64_t)dp->rank << 48) ^
                                                      (uint64_t)x->L->params[u->first].spec.global_index));
    if (!rc) rc = tri_comm_all_gather(dp, all, send);
    /* the residual: e minus what this rank's payload decodes to */
    if (!rc) rc = c->kind == TRI_COMPRESS_TOPK ? tri_op_compress_topk_unpack_add(dev, r, send, 0, -1.0f)
                                               : tri_op_compress_unpack_add(dev, r, send, n, 0, block, levels, -1.0f);
    /* the sum of the decoded payloads over the whole unit (stage 0) or the owned slice (stage 1) */
    int64_t first = x->stage == 0 ? 0 : (int64_t)dp->rank * (n / dp->size), m = x->stage == 0 ? n : n / dp->size;
    tri_tensor out = tri_tensor_range(g, first, m);
    if (!rc) rc = tri_op_fill(dev, out, 0.0f);
    for (int k = 0; k < dp->size && !rc; k++) {
        tri_tensor pk = tri_tensor_range(all, (int64_t)k * words, words);
        rc = c->kind == TRI_COMPRESS_TOPK ? tri_op_compress_topk_unpack_add(dev, out, pk, first, 1.0f)
                                          : tri_op_compress_unpack_add(dev, out, pk, n, first, block, levels, 1.0f);
    }
    return rc;
}

/* The payload of e (its len elements) into payload (the words of that length), with the qsgd
 * rounding stream `stream`: 1bit, qsgd or topk. */
static int pack(tri_dp_compress *x, tri_device *dev, tri_tensor payload, tri_tensor e, uint64_t stream)
{
    const tri_compression *c = &x->c;
    if (c->kind == TRI_COMPRESS_TOPK)
        return tri_op_compress_topk_pack(dev, payload, e);
    if (c->kind == TRI_COMPRESS_1BIT)
        return tri_op_compress_sign_pack(dev, payload, e, c->block_size);
    return tri_op_compress_qsgd_pack(dev, payload, e, c->block_size, c->qsgd_levels, c->seed, stream);
}

/* out += alpha * elements [first, first + numel(out)) of a payload of n elements. */
static int unpack_add(tri_dp_compress *x, tri_device *dev, tri_tensor out, tri_tensor payload, int64_t n,
                      int64_t first, float alpha)
{
    const tri_compression *c = &x->c;
    if (c->kind == TRI_COMPRESS_TOPK)
        return tri_op_compress_topk_unpack_add(dev, out, payload, first, alpha);
    int levels = c->kind == TRI_COMPRESS_QSGD ? c->qsgd_levels : 0;
    return tri_op_compress_unpack_add(dev, out, payload, n, first, c->block_size, levels, alpha);
}

/* Elements of chunk j of a unit of n elements cut in chunks of `chunk` (0 past the end). */
static int64_t chunk_len(int64_t n, int64_t chunk, int j)
{
    int64_t lo = (int64_t)j * chunk;
    return lo < n ? (n - lo < chunk ? n - lo : chunk) : 0;
}

/* Two-phase's server step on unit u's chunk of this rank (len elements from flat offset at): s = the
 * D payloads (slot k of `from(k)`, `words` apart) decoded in rank order, + r_s; c_s = C(s) into
 * server_send; r_s = s - D(c_s), zero on the padding. */
static int server_step(tri_dp_compress *x, tri_device *dev, tri_comm *dp, int unit, int64_t at, int64_t len,
                       int64_t words, uint64_t stream)
{
    int64_t wl = payload_words(&x->c, len);
    tri_tensor s = tri_tensor_range(x->server_sum, 0, len), cs = tri_tensor_range(x->server_send, 0, wl);
    tri_tensor rs = tri_tensor_range(x->server_residual, x->server_at[unit], len);
    int rc = tri_op_fill(dev, s, 0.0f);
    for (int k = 0; k < dp->size && !rc; k++) /* this rank's own payload stayed in its send slot */
        rc = unpack_add(x, dev, s, tri_tensor_range(k == dp->rank ? x->send : x->recv, (int64_t)k * words, wl), len,
                        0, 1.0f);
    if (!rc) rc = tri_op_add(dev, s, s, rs);
    if (!rc) rc = pack(x, dev, cs, s, stream);
    if (!rc) rc = tri_op_copy(dev, rs, s);
    if (!rc) rc = unpack_add(x, dev, rs, cs, len, 0, -1.0f);
    if (!rc) rc = tri_dp_compress_zero_padding(x, dev, unit, rs, at, at, at + len);
    return rc;
}

/* Two-phase (see dp_compress.h) over unit u: g its gradient, r its residual holding e = g + r. */
static int two_phase_unit(tri_dp_compress *x, tri_device *dev, tri_comm *dp, tri_tensor g, tri_tensor r, int unit,
                          int64_t iter)
{
    const tri_param_unit *u = &x->L->units[unit];
    int D = dp->size, me = dp->rank, n_ops = 0;
    int64_t n = u->len, chunk = tri_compression_chunk(&x->c, n, D), words = payload_words(&x->c, chunk);
    /* the qsgd rounding streams: as the all-gather's, then per chunk; the server's apart from every
     * worker's */
    uint64_t unit_id = (uint64_t)x->L->params[u->first].spec.global_index, it = tri_rng_hash64((uint64_t)iter);
    uint64_t worker = tri_rng_hash64(it ^ ((uint64_t)me << 48) ^ unit_id),
             server = tri_rng_hash64(it ^ 0x5e7e5e7e5e7eull ^ (unit_id << 20) ^ (uint64_t)me);
    int rc = TRI_OK;
    /* worker: chunk j's payload into send slot j, r -= its decoding (error feedback) */
    for (int j = 0; j < D && !rc && chunk_len(n, chunk, j) > 0; j++) {
        int64_t len = chunk_len(n, chunk, j);
        tri_tensor pj = tri_tensor_range(x->send, (int64_t)j * words, payload_words(&x->c, len));
        tri_tensor ej = tri_tensor_range(r, (int64_t)j * chunk, len);
        rc = pack(x, dev, pj, ej, tri_rng_hash64(worker + (uint64_t)j));
        if (!rc) rc = unpack_add(x, dev, ej, pj, len, 0, -1.0f);
    }
    /* phase 1: chunk j's payload to rank j; rank k's payload of this rank's chunk into recv slot k */
    for (int k = 0; k < D; k++) {
        if (k == me)
            continue;
        x->ops[n_ops++] = (tri_p2p){.send = true, .peer = k, .tag = 32,
                                    .t = tri_tensor_range(x->send, (int64_t)k * words, words)};
        x->ops[n_ops++] = (tri_p2p){.send = false, .peer = k, .tag = 32,
                                    .t = tri_tensor_range(x->recv, (int64_t)k * words, words)};
    }
    if (!rc) rc = tri_comm_p2p(dp, x->ops, n_ops);
    /* server: this rank's chunk summed, with its residual, re-compressed (an empty chunk: nothing) */
    if (!rc && chunk_len(n, chunk, me) > 0)
        rc = server_step(x, dev, dp, unit, u->start + (int64_t)me * chunk, chunk_len(n, chunk, me), words, server);
    /* phase 2: every rank's re-compressed chunk; the unit (stage 0) or the owned slice (stage 1) decoded */
    tri_tensor all = tri_tensor_range(x->gathered, 0, (int64_t)D * words);
    if (!rc) rc = tri_comm_all_gather(dp, all, tri_tensor_range(x->server_send, 0, words));
    int64_t first = x->stage == 0 ? 0 : (int64_t)me * (n / D), m = x->stage == 0 ? n : n / D;
    if (!rc) rc = tri_op_fill(dev, tri_tensor_range(g, first, m), 0.0f);
    for (int j = 0; j < D && !rc; j++) {
        int64_t c0 = (int64_t)j * chunk, clen = chunk_len(n, chunk, j);
        int64_t a = first > c0 ? first : c0, b = first + m < c0 + clen ? first + m : c0 + clen;
        if (b > a)
            rc = unpack_add(x, dev, tri_tensor_range(g, a, b - a),
                            tri_tensor_range(all, (int64_t)j * words, payload_words(&x->c, clen)), clen, a - c0, 1.0f);
    }
    return rc;
}

/* Q^T of every matrix parameter from the seeded RNG (the same on every dp rank), rows orthonormal
 * (PyTorch's powerSGD_hook initialises Q with randn and orthogonalises it). */
static int init_q(tri_dp_compress *x, tri_device *dev)
{
    const tri_param_layout *L = x->L;
    int rc = TRI_OK;
    for (int i = 0; i < L->n && !rc; i++) {
        int64_t rows, cols, r = x->c.powersgd_rank;
        if (x->q_at[i] < 0)
            continue;
        matrix_dims(&L->params[i], &rows, &cols);
        float *host = malloc((size_t)(r * cols) * sizeof *host);
        if (!host)
            return TRI_ERR(TRI_ENOMEM, "powersgd: out of memory for Q of %s", L->params[i].spec.name);
        uint64_t stream = tri_rng_hash_str(L->params[i].spec.name) ^ (uint64_t)L->params[i].shard_rank;
        for (int64_t k = 0; k < r * cols; k++)
            host[k] = (float)tri_rng_normal(x->c.seed ^ 0x9057u, stream, (uint64_t)k);
        tri_tensor qt = tri_tensor_2d(tri_tensor_range(x->q, x->q_at[i], r * cols).data, TRI_F32, r, cols);
        rc = tri_device_copy_from_host(dev, qt, host);
        free(host);
        if (!rc) rc = tri_op_orthonormalize_rows(dev, qt);
    }
    if (!rc)
        x->q_ready = true;
    return rc;
}

bool tri_dp_compress_q_range(const tri_dp_compress *x, int i, int64_t *at, int64_t *n)
{
    int64_t rows, cols;
    if (!x->on || x->c.kind != TRI_COMPRESS_POWERSGD || !x->q_at || i < 0 || i >= x->L->n || x->q_at[i] < 0)
        return false;
    matrix_dims(&x->L->params[i], &rows, &cols);
    *at = x->q_at[i];
    *n = x->c.powersgd_rank * cols;
    return true;
}

/* [at, at + n) inside Q, with powersgd on. */
static int check_q(const tri_dp_compress *x, int64_t at, int64_t n, const char *verb)
{
    if (x->on && x->c.kind == TRI_COMPRESS_POWERSGD && at >= 0 && n >= 0 && at + n <= x->q_numel)
        return TRI_OK;
    return TRI_ERR(TRI_EINVAL, "PowerSGD's Q [%lld, %lld) %s without --grad-compression powersgd or past its %lld "
                   "elements", (long long)at, (long long)(at + n), verb, (long long)x->q_numel);
}

int tri_dp_compress_q_read(tri_dp_compress *x, tri_device *dev, int64_t at, int64_t n, float *host)
{
    int rc = check_q(x, at, n, "read");
    if (!rc && !x->q_ready)
        rc = init_q(x, dev);
    return rc ? rc : tri_device_copy_to_host(dev, host, tri_tensor_range(x->q, at, n));
}

int tri_dp_compress_q_write(tri_dp_compress *x, tri_device *dev, int64_t at, int64_t n, const float *host)
{
    int rc = check_q(x, at, n, "written");
    if (!rc && !x->q_ready)
        rc = init_q(x, dev);
    return rc ? rc : tri_device_copy_from_host(dev, tri_tensor_range(x->q, at, n), host);
}

/* The views of matrix parameter i: M (rows x cols) of t, P^T (r x rows), Q^T (r x cols); t holds
 * the stage's flat layout from flat offset `base` on (0: the whole buffer, u->start: one unit's). */
static void matrix_views(const tri_dp_compress *x, int i, tri_tensor t, int64_t base, tri_tensor *m, tri_tensor *pt,
                         tri_tensor *qt)
{
    const tri_param *p = &x->L->params[i];
    int64_t rows, cols, r = x->c.powersgd_rank;
    matrix_dims(p, &rows, &cols);
    *m = tri_tensor_2d(tri_tensor_range(t, p->offset - base, p->numel).data, TRI_F32, rows, cols);
    *pt = tri_tensor_2d(tri_tensor_range(x->p, x->p_at[i], r * rows).data, TRI_F32, r, rows);
    *qt = tri_tensor_2d(tri_tensor_range(x->q, x->q_at[i], r * cols).data, TRI_F32, r, cols);
}

/* PowerSGD over unit u (see dp_compress.h); g is the unit's gradient (len elements), the residual
 * the stage's whole buffer. */
static int powersgd_unit(tri_dp_compress *x, tri_device *dev, tri_comm *dp, tri_tensor g, int unit)
{
    const tri_param_layout *L = x->L;
    const tri_param_unit *u = &L->units[unit];
    int rc = x->q_ready ? TRI_OK : init_q(x, dev);
    int first = u->first, last = u->first + u->count;
    int64_t p_len = 0, q_lo = -1, q_hi = -1;
    tri_tensor m, pt, qt;
    for (int i = first; i < last && !rc; i++) {
        const tri_param *p = &L->params[i];
        if (x->q_at[i] >= 0) {
            matrix_views(x, i, x->residual, 0, &m, &pt, &qt);
            rc = tri_op_matmul(dev, pt, qt, m, tri_tensor_none(), false, true, 0.0f); /* P^T = Q^T M^T */
            p_len = x->p_at[i] + tri_tensor_numel(pt);
            q_lo = q_lo < 0 ? x->q_at[i] : q_lo;
            q_hi = x->q_at[i] + tri_tensor_numel(qt);
        } else {
            tri_tensor v = tri_tensor_range(x->p, x->p_at[i], p->numel);
            rc = tri_op_copy(dev, v, tri_tensor_range(g, p->offset - u->start, p->numel));
            p_len = x->p_at[i] + p->numel;
        }
    }
    if (!rc && p_len > 0) rc = tri_comm_all_reduce(dp, tri_tensor_range(x->p, 0, p_len), TRI_REDUCE_SUM);
    for (int i = first; i < last && !rc; i++) {
        if (x->q_at[i] < 0)
            continue;
        matrix_views(x, i, x->residual, 0, &m, &pt, &qt);
        rc = tri_op_orthonormalize_rows(dev, pt);
        if (!rc) rc = tri_op_matmul(dev, qt, pt, m, tri_tensor_none(), false, false, 0.0f); /* Q^T = P^T M */
    }
    if (!rc && q_hi > q_lo) rc = tri_comm_all_reduce(dp, tri_tensor_range(x->q, q_lo, q_hi - q_lo), TRI_REDUCE_SUM);
    for (int i = first; i < last && !rc; i++) {
        const tri_param *p = &L->params[i];
        tri_tensor gi = tri_tensor_range(g, p->offset - u->start, p->numel), ri = tri_tensor_range(x->residual, p->offset, p->numel);
        if (x->q_at[i] < 0) {
            rc = tri_op_copy(dev, gi, tri_tensor_range(x->p, x->p_at[i], p->numel));
            if (!rc) rc = tri_op_fill(dev, ri, 0.0f);
            continue;
        }
        tri_tensor gm;
        matrix_views(x, i, g, u->start, &gm, &pt, &qt);
        rc = tri_op_matmul(dev, gm, pt, qt, tri_tensor_none(), true, false, 0.0f); /* G = P Q^T */
        if (!rc) rc = tri_op_axpy(dev, ri, -1.0f / (float)dp->size, gi);             /* r = e - G / dp */
    }
    return rc;
}

int tri_dp_compress_unit(tri_dp_compress *x, tri_device *dev, tri_comm *dp, tri_tensor grads, int unit, int64_t iter)
{
    const tri_param_unit *u = &x->L->units[unit];
    return tri_dp_compress_reduce(x, dev, dp, tri_tensor_range(grads, u->start, u->len), unit, iter);
}

int tri_dp_compress_reduce(tri_dp_compress *x, tri_device *dev, tri_comm *dp, tri_tensor g, int unit, int64_t iter)
{
    const tri_param_unit *u = &x->L->units[unit];
    if (tri_tensor_numel(g) != u->len)
        return TRI_ERR(TRI_EINVAL, "compressed dp reduction of unit %d: %lld elements given, the unit has %lld", unit,
                       (long long)tri_tensor_numel(g), (long long)u->len);
    uint64_t before = tri_comm_wire_bytes(dp, TRI_COMM_KINDS);
    x->last_plain += (uint64_t)tri_compression_sent_bytes(&x->c, 1, u->len, dp->size, x->stage, false);
    int rc;
    if (tri_dp_compress_plain(x, iter)) {
        rc = plain_unit(x, dp, g, unit);
    } else {
        tri_tensor r = tri_tensor_range(x->residual, u->start, u->len);
        rc = make_ready(x, dev);
        if (!rc) rc = tri_op_add(dev, r, r, g); /* e = g + r, kept in r */
        if (!rc) rc = x->c.kind == TRI_COMPRESS_POWERSGD              ? powersgd_unit(x, dev, dp, g, unit)
                      : x->c.reduce == TRI_COMPRESS_REDUCE_TWO_PHASE ? two_phase_unit(x, dev, dp, g, r, unit, iter)
                                                                     : gather_unit(x, dev, dp, g, r, unit, iter);
        if (!rc) rc = tri_dp_compress_zero_padding(x, dev, unit, x->residual, 0, u->start, u->start + u->len);
        if (!rc) rc = zero_vocab_padding(x, dev, unit, g);
    }
    x->last_sent += tri_comm_wire_bytes(dp, TRI_COMM_KINDS) - before;
    return rc;
}

/* This rank's chunk of the unit holding flat offset `at`: its flat range [*lo, *hi) and its offset
 * in server_residual (*base: the chunk's first element). false past the layout. */
static bool server_chunk(const tri_dp_compress *x, int64_t at, int64_t *lo, int64_t *hi, int64_t *base)
{
    const tri_param_layout *L = x->L;
    for (int u = 0; u < L->n_units; u++) {
        const tri_param_unit *un = &L->units[u];
        if (at < un->start || at >= un->start + un->len)
            continue;
        int64_t chunk = tri_compression_chunk(&x->c, un->len, L->dp), c0 = (int64_t)L->dp_rank * chunk;
        *lo = un->start + (c0 < un->len ? c0 : un->len);
        *hi = un->start + (c0 + chunk < un->len ? c0 + chunk : un->len);
        *base = x->server_at[u];
        return true;
    }
    return false;
}

/* The part of [at, at + n) in this rank's chunk: [*a, *b) flat, *off its offset in server_residual;
 * TRI_EINVAL without two-phase or past the layout. */
static int server_range(const tri_dp_compress *x, int64_t at, int64_t n, int64_t *a, int64_t *b, int64_t *off)
{
    int64_t lo, hi, base;
    if (!x->on || !x->server_at || at < 0 || n < 0 || !server_chunk(x, at, &lo, &hi, &base))
        return TRI_ERR(TRI_EINVAL, "server error-feedback residual [%lld, %lld) without --grad-compression-reduce "
                       "two-phase or past the layout", (long long)at, (long long)(at + n));
    *a = at > lo ? at : lo;
    *b = at + n < hi ? at + n : hi;
    *off = base + (*a - lo);
    return TRI_OK;
}

int tri_dp_compress_server_read(tri_dp_compress *x, tri_device *dev, int64_t at, int64_t n, float *host)
{
    int64_t a = 0, b = 0, off = 0;
    int rc = server_range(x, at, n, &a, &b, &off);
    if (rc)
        return rc;
    memset(host, 0, (size_t)n * sizeof *host);
    if (!x->residual_ready || b <= a) /* no compressed step yet, or not this rank's chunk: zero */
        return TRI_OK;
    return tri_device_copy_to_host(dev, host + (a - at), tri_tensor_range(x->server_residual, off, b - a));
}

int tri_dp_compress_server_write(tri_dp_compress *x, tri_device *dev, int64_t at, int64_t n, const float *host)
{
    int64_t a = 0, b = 0, off = 0;
    int rc = server_range(x, at, n, &a, &b, &off);
    if (!rc) rc = make_ready(x, dev);
    if (rc || b <= a)
        return rc;
    return tri_device_copy_from_host(dev, tri_tensor_range(x->server_residual, off, b - a), host + (a - at));
}
