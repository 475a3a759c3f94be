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

/* PowerSGD's per-parameter offsets in q and p (p_at: within its unit's P^T, which starts at
 * p_base[u]); returns p's length: the largest unit's P^T, or with overlap the units' together. */
static int64_t powersgd_offsets(tri_dp_compress *x)
{
    const tri_param_layout *L = x->L;
    int64_t r = x->c.powersgd_rank, q = 0, largest = 0, total = 0;
    for (int u = 0; u < L->n_units; u++) {
        const tri_param_unit *un = &L->units[u];
        int64_t pl = 0;
        x->p_base[u] = x->overlap ? total : 0;
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
        total += pl;
    }
    x->q_numel = q;
    return x->overlap ? total : largest;
}

/* Per unit, one rank's payload words (two-phase: of its longest chunk) and its slot's offset in
 * them: each unit its own with overlap, else all at 0. Returns the slots' total words (overlap) or
 * the largest unit's (at least 1). */
static int64_t payload_slots(tri_dp_compress *x)
{
    const tri_param_layout *L = x->L;
    bool two_phase = x->c.reduce == TRI_COMPRESS_REDUCE_TWO_PHASE;
    int64_t total = 0, largest = 1;
    for (int u = 0; u < L->n_units; u++) {
        int64_t n = L->units[u].len, w = payload_words(&x->c, two_phase ? tri_compression_chunk(&x->c, n, L->dp) : n);
        x->slot_words[u] = w;
        x->slot_at[u] = x->overlap ? total : 0;
        total += w;
        largest = w > largest ? w : largest;
    }
    return x->overlap ? (total > 0 ? total : 1) : largest;
}

/* Two-phase: the chunk payloads (D per unit slot), the server's buffers and residual (the longest
 * chunk of each unit: server_error_feedback, optimizer memory). */
static int take_two_phase(tri_dp_compress *x, tri_arena *a, int64_t words)
{
    const tri_param_layout *L = x->L;
    int64_t longest = 1, total = 0;
    if (!x->server_at) {
        x->server_at = calloc((size_t)(L->n_units > 0 ? L->n_units : 1), sizeof *x->server_at);
        x->ops = calloc((size_t)(2 * L->dp), sizeof *x->ops);
        if (!x->server_at || !x->ops)
            return TRI_ERR(TRI_ENOMEM, "grad compression: out of memory");
    }
    for (int u = 0; u < L->n_units; u++) {
        int64_t chunk = tri_compression_chunk(&x->c, L->units[u].len, L->dp);
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

/* The per-unit bookkeeping (allocated once: takes run twice). */
static int alloc_units(tri_dp_compress *x)
{
    size_t n = (size_t)(x->L->n_units > 0 ? x->L->n_units : 1);
    if (x->req)
        return TRI_OK;
    x->slot_at = calloc(n, sizeof *x->slot_at);
    x->slot_words = calloc(n, sizeof *x->slot_words);
    x->p_base = calloc(n, sizeof *x->p_base);
    x->req = calloc(n, sizeof *x->req);
    x->phase = calloc(n, sizeof *x->phase);
    x->iter_of = calloc(n, sizeof *x->iter_of);
    if (!x->slot_at || !x->slot_words || !x->p_base || !x->req || !x->phase || !x->iter_of)
        return TRI_ERR(TRI_ENOMEM, "grad compression: out of memory");
    return TRI_OK;
}

int tri_dp_compress_take(tri_dp_compress *x, tri_arena *a, const tri_param_layout *L, const tri_compression *c,
                         int stage, bool overlap)
{
    int rc = tri_compression_check(c, stage);
    if (rc)
        return rc;
    x->c = *c;
    x->L = L;
    x->stage = stage;
    x->overlap = overlap;
    x->on = c->kind != TRI_COMPRESS_NONE && L->dp > 1;
    x->residual = x->send = x->gathered = x->q = x->p = tri_tensor_none();
    x->recv = x->server_send = x->server_sum = x->server_residual = tri_tensor_none();
    rc = alloc_units(x); /* (also off: the reduction then is the plain one) */
    if (rc || !x->on)
        return rc;
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
    int64_t words = payload_slots(x);
    if (c->reduce == TRI_COMPRESS_REDUCE_TWO_PHASE)
        return take_two_phase(x, a, words);
    rc = TRI_ARENA_TAKE(a, TRI_MEM_COMM, &x->send, TRI_I32, words);
    if (!rc) rc = TRI_ARENA_TAKE(a, TRI_MEM_COMM, &x->gathered, TRI_I32, (int64_t)L->dp * words);
    return rc;
}

void tri_dp_compress_free(tri_dp_compress *x)
{
    free(x->slot_at);
    free(x->slot_words);
    free(x->p_base);
    free(x->req);
    free(x->phase);
    free(x->iter_of);
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

/* One collective of unit u's reduction: blocking, or started on the unit's request (`async`). */
static int all_reduce(tri_dp_compress *x, tri_comm *dp, tri_tensor t, int unit, bool async)
{
    return async ? tri_comm_all_reduce_start(dp, t, TRI_REDUCE_SUM, &x->req[unit])
                 : tri_comm_all_reduce(dp, t, TRI_REDUCE_SUM);
}

static int all_gather(tri_dp_compress *x, tri_comm *dp, tri_tensor out, tri_tensor in, int unit, bool async)
{
    return async ? tri_comm_all_gather_start(dp, out, in, &x->req[unit]) : tri_comm_all_gather(dp, out, in);
}

/* Unit u's slot in a payload buffer holding `per` payloads a unit (1: send and server_send of the
 * all-gather kinds; D: gathered, recv, two-phase's send). */
static tri_tensor slot(const tri_dp_compress *x, tri_tensor buf, int unit, int64_t per)
{
    return tri_tensor_range(buf, per * x->slot_at[unit], per * x->slot_words[unit]);
}

/* The plain reduction of one unit (the iterations before tri_compression_start_iter): all-reduce at stage 0,
 * reduce-scatter into the owned slice at stage 1. */
static int plain_unit(tri_dp_compress *x, tri_comm *dp, tri_tensor whole, int unit, bool async)
{
    const tri_param_unit *u = &x->L->units[unit];
    if (x->stage == 0)
        return all_reduce(x, dp, whole, unit, async);
    tri_tensor mine = tri_tensor_range(whole, (int64_t)dp->rank * (u->len / dp->size), u->len / dp->size);
    return async ? tri_comm_reduce_scatter_start(dp, mine, whole, &x->req[unit]) : tri_comm_reduce_scatter(dp, mine, whole);
}

/* 1bit, qsgd, topk, first exchange: pack e (in r) into the unit's send slot, all-gather the payloads,
 * r -= D(own payload). */
static int gather_first(tri_dp_compress *x, tri_device *dev, tri_comm *dp, tri_tensor r, int unit, int64_t iter,
                        bool async)
{
    const tri_param_unit *u = &x->L->units[unit];
    const tri_compression *c = &x->c;
    int64_t n = u->len;
    int levels = c->kind == TRI_COMPRESS_QSGD ? c->qsgd_levels : 0, block = c->block_size;
    tri_tensor send = slot(x, x->send, unit, 1), all = slot(x, x->gathered, unit, dp->size);
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
    if (!rc) rc = all_gather(x, dp, all, send, unit, async);
    /* the residual: e minus what this rank's payload decodes to (the send slot is only read while
     * in flight) */
    if (!rc) rc = c->kind == TRI_COMPRESS_TOPK ? tri_op_compress_topk_unpack_add(dev, r, send, 0, -1.0f)
                                               : tri_op_compress_unpack_add(dev, r, send, n, 0, block, levels, -1.0f);
    return rc;
}

/* 1bit, qsgd, topk, once the all-gather is complete: the sum of the decoded payloads, in rank order,
 * over the whole unit (stage 0) or the owned slice (stage 1). */
static int gather_last(tri_dp_compress *x, tri_device *dev, tri_comm *dp, tri_tensor g, int unit)
{
    const tri_compression *c = &x->c;
    int64_t n = x->L->units[unit].len, words = x->slot_words[unit];
    int levels = c->kind == TRI_COMPRESS_QSGD ? c->qsgd_levels : 0, block = c->block_size;
    tri_tensor all = slot(x, x->gathered, unit, dp->size);
    int64_t first = x->stage == 0 ? 0 : (int64_t)dp->rank * (n / dp->size), m = x->stage == 0 ? n : n / dp->size;
    tri_tensor out = tri_tensor_range(g, first, m);
    int rc = tri_op_fill(dev, out, 0.0f);
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

/* The qsgd rounding streams of two-phase: the workers' (as the all-gather's, then per chunk) and
 * the server's, apart from every worker's. */
static uint64_t two_phase_stream(const tri_dp_compress *x, int unit, int64_t iter, int rank, bool server)
{
    uint64_t unit_id = (uint64_t)x->L->params[x->L->units[unit].first].spec.global_index;
    uint64_t it = tri_rng_hash64((uint64_t)iter);
    return server ? tri_rng_hash64(it ^ 0x5e7e5e7e5e7eull ^ (unit_id << 20) ^ (uint64_t)rank)
                  : tri_rng_hash64(it ^ ((uint64_t)rank << 48) ^ unit_id);
}

/* Two-phase's server step on unit u's chunk of this rank (len elements from flat offset at): s = the
 * D payloads (slot k of the unit's send slots for this rank's own, of its recv slots for the
 * others', `words` apart) decoded in rank order, + r_s; c_s = C(s) into the unit's server_send slot;
 * r_s = s - D(c_s), zero on the padding. */
static int server_step(tri_dp_compress *x, tri_device *dev, tri_comm *dp, int unit, int64_t at, int64_t len,
                       uint64_t stream)
{
    int64_t wl = payload_words(&x->c, len), words = x->slot_words[unit];
    tri_tensor send = slot(x, x->send, unit, dp->size), recv = slot(x, x->recv, unit, dp->size);
    tri_tensor s = tri_tensor_range(x->server_sum, 0, len), cs = tri_tensor_range(slot(x, x->server_send, unit, 1), 0, wl);
    tri_tensor rs = tri_tensor_range(x->server_residual, x->server_at[unit], len);
    int rc = tri_op_fill(dev, s, 0.0f);
    for (int k = 0; k < dp->size && !rc; k++) /* this rank's own payload stayed in its send slot */
        rc = unpack_add(x, dev, s, tri_tensor_range(k == dp->rank ? send : recv, (int64_t)k * words, wl), len, 0, 1.0f);
    if (!rc) rc = tri_op_add(dev, s, s, rs);
    if (!rc) rc = pack(x, dev, cs, s, stream);
    if (!rc) rc = tri_op_copy(dev, rs, s);
    if (!rc) rc = unpack_add(x, dev, rs, cs, len, 0, -1.0f);
    if (!rc) rc = tri_dp_compress_zero_padding(x, dev, unit, rs, at, at, at + len);
    return rc;
}

/* Two-phase (see dp_compress.h) over unit u, first exchange: r holds e = g + r; the worker's chunk
 * payloads into the unit's send slots, r -= their decoding (error feedback); phase 1: chunk j's
 * payload to rank j, rank k's payload of this rank's chunk into recv slot k. */
static int two_phase_first(tri_dp_compress *x, tri_device *dev, tri_comm *dp, tri_tensor r, int unit, int64_t iter,
                           bool async)
{
    int D = dp->size, me = dp->rank, n_ops = 0;
    int64_t n = x->L->units[unit].len, chunk = tri_compression_chunk(&x->c, n, D), words = x->slot_words[unit];
    tri_tensor send = slot(x, x->send, unit, D), recv = slot(x, x->recv, unit, D);
    uint64_t worker = two_phase_stream(x, unit, iter, me, false);
    int rc = TRI_OK;
    for (int j = 0; j < D && !rc && chunk_len(n, chunk, j) > 0; j++) {
        int64_t len = chunk_len(n, chunk, j);
        tri_tensor pj = tri_tensor_range(send, (int64_t)j * words, payload_words(&x->c, len));
        tri_tensor ej = tri_tensor_range(r, (int64_t)j * chunk, len);
        rc = pack(x, dev, pj, ej, tri_rng_hash64(worker + (uint64_t)j));
        if (!rc) rc = unpack_add(x, dev, ej, pj, len, 0, -1.0f);
    }
    for (int k = 0; k < D; k++) {
        if (k == me)
            continue;
        x->ops[n_ops++] = (tri_p2p){.send = true, .peer = k, .tag = 32,
                                    .t = tri_tensor_range(send, (int64_t)k * words, words)};
        x->ops[n_ops++] = (tri_p2p){.send = false, .peer = k, .tag = 32,
                                    .t = tri_tensor_range(recv, (int64_t)k * words, words)};
    }
    if (!rc) rc = async ? tri_comm_p2p_start(dp, x->ops, n_ops, &x->req[unit]) : tri_comm_p2p(dp, x->ops, n_ops);
    return rc;
}

/* Two-phase, phase 2 at ZeRO 1: this rank's re-compressed chunk to the ranks whose owned slice it
 * overlaps, and from every rank whose chunk overlaps this rank's slice its re-compressed chunk into
 * its slot of gathered (tri_compression_chunk_read_by): one p2p batch, where ZeRO 0 all-gathers. */
static int gather_to_readers(tri_dp_compress *x, tri_comm *dp, int unit, bool async)
{
    int D = dp->size, me = dp->rank, n_ops = 0;
    int64_t n = x->L->units[unit].len, words = x->slot_words[unit];
    tri_tensor all = slot(x, x->gathered, unit, D), mine = slot(x, x->server_send, unit, 1);
    for (int k = 0; k < D; k++) {
        if (tri_compression_chunk_read_by(&x->c, n, D, x->stage, me, k))
            x->ops[n_ops++] = (tri_p2p){.send = true, .peer = k, .tag = 33, .t = mine};
        if (tri_compression_chunk_read_by(&x->c, n, D, x->stage, k, me))
            x->ops[n_ops++] = (tri_p2p){.send = false, .peer = k, .tag = 33,
                                        .t = tri_tensor_range(all, (int64_t)k * words, words)};
    }
    if (n_ops == 0)
        return TRI_OK;
    return async ? tri_comm_p2p_start(dp, x->ops, n_ops, &x->req[unit]) : tri_comm_p2p(dp, x->ops, n_ops);
}

/* Two-phase, second exchange (phase 1 complete): the server step on this rank's chunk (an empty
 * chunk: nothing), then phase 2: the all-gather of every rank's re-compressed chunk (ZeRO 0), or
 * each chunk to the ranks that decode it (ZeRO 1, gather_to_readers). */
static int two_phase_second(tri_dp_compress *x, tri_device *dev, tri_comm *dp, int unit, bool async)
{
    const tri_param_unit *u = &x->L->units[unit];
    int D = dp->size, me = dp->rank;
    int64_t n = u->len, chunk = tri_compression_chunk(&x->c, n, D);
    int rc = TRI_OK;
    if (chunk_len(n, chunk, me) > 0)
        rc = server_step(x, dev, dp, unit, u->start + (int64_t)me * chunk, chunk_len(n, chunk, me),
                         two_phase_stream(x, unit, x->iter_of[unit], me, true));
    if (!rc && x->stage == 0)
        rc = all_gather(x, dp, slot(x, x->gathered, unit, D), slot(x, x->server_send, unit, 1), unit, async);
    else if (!rc)
        rc = gather_to_readers(x, dp, unit, async);
    return rc;
}

/* Two-phase, once phase 2 is complete: the unit (stage 0) or the owned slice (stage 1) decoded from
 * every chunk's re-compressed sum it overlaps (this rank's own from its server_send slot, the
 * others' from gathered). */
static int two_phase_last(tri_dp_compress *x, tri_device *dev, tri_comm *dp, tri_tensor g, int unit)
{
    int D = dp->size, me = dp->rank;
    int64_t n = x->L->units[unit].len, chunk = tri_compression_chunk(&x->c, n, D), words = x->slot_words[unit];
    tri_tensor all = slot(x, x->gathered, unit, D), mine = slot(x, x->server_send, unit, 1);
    int64_t first = x->stage == 0 ? 0 : (int64_t)me * (n / D), m = x->stage == 0 ? n : n / D;
    int rc = tri_op_fill(dev, tri_tensor_range(g, first, m), 0.0f);
    for (int j = 0; j < D && !rc; j++) {
        int64_t c0 = (int64_t)j * chunk, clen = chunk_len(n, chunk, j);
        int64_t a = first > c0 ? first : c0, b = first + m < c0 + clen ? first + m : c0 + clen;
        tri_tensor cj = j == me ? mine : tri_tensor_range(all, (int64_t)j * words, words);
        if (b > a)
            rc = unpack_add(x, dev, tri_tensor_range(g, a, b - a), tri_tensor_range(cj, 0, payload_words(&x->c, clen)),
                            clen, a - c0, 1.0f);
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

/* The views of matrix parameter i of unit u: M (rows x cols) of t, P^T (r x rows), Q^T (r x cols); t
 * holds the stage's flat layout from flat offset `base` on (0: the whole buffer, u->start: one
 * unit's). */
static void matrix_views(const tri_dp_compress *x, int unit, int i, tri_tensor t, int64_t base, tri_tensor *m,
                         tri_tensor *pt, tri_tensor *qt)
{
    const tri_param *p = &x->L->params[i];
    int64_t rows, cols, r = x->c.powersgd_rank;
    matrix_dims(p, &rows, &cols);
    *m = tri_tensor_2d(tri_tensor_range(t, p->offset - base, p->numel).data, TRI_F32, rows, cols);
    *pt = tri_tensor_2d(tri_tensor_range(x->p, x->p_base[unit] + x->p_at[i], r * rows).data, TRI_F32, r, rows);
    *qt = tri_tensor_2d(tri_tensor_range(x->q, x->q_at[i], r * cols).data, TRI_F32, r, cols);
}

/* Unit u's P^T and its vectors, as one range of p. */
static tri_tensor unit_p(const tri_dp_compress *x, int unit)
{
    const tri_param_unit *u = &x->L->units[unit];
    int last = u->first + u->count - 1;
    const tri_param *p = &x->L->params[last];
    int64_t rows, cols;
    matrix_dims(p, &rows, &cols);
    int64_t len = x->p_at[last] + (x->q_at[last] >= 0 ? x->c.powersgd_rank * rows : p->numel);
    return tri_tensor_range(x->p, x->p_base[unit], len);
}

/* Unit u's Q^T of its matrices, as one range of q ([0, 0) without one). */
static tri_tensor unit_q(const tri_dp_compress *x, int unit)
{
    const tri_param_unit *u = &x->L->units[unit];
    int64_t lo = -1, hi = -1;
    for (int i = u->first; i < u->first + u->count; i++) {
        int64_t rows, cols;
        if (x->q_at[i] < 0)
            continue;
        matrix_dims(&x->L->params[i], &rows, &cols);
        lo = lo < 0 ? x->q_at[i] : lo;
        hi = x->q_at[i] + x->c.powersgd_rank * cols;
    }
    return tri_tensor_range(x->q, lo < 0 ? 0 : lo, hi - lo);
}

/* PowerSGD over unit u (see dp_compress.h), first exchange: P^T = Q^T M^T of every matrix (M = e, in
 * the residual), the vectors and smaller matrices copied beside them from g (the unit's gradient),
 * all of it all-reduced. */
static int powersgd_first(tri_dp_compress *x, tri_device *dev, tri_comm *dp, tri_tensor g, int unit, bool async)
{
    const tri_param_layout *L = x->L;
    const tri_param_unit *u = &L->units[unit];
    int rc = x->q_ready ? TRI_OK : init_q(x, dev);
    tri_tensor m, pt, qt;
    for (int i = u->first; i < u->first + u->count && !rc; i++) {
        const tri_param *p = &L->params[i];
        if (x->q_at[i] >= 0) {
            matrix_views(x, unit, i, x->residual, 0, &m, &pt, &qt);
            rc = tri_op_matmul(dev, pt, qt, m, tri_tensor_none(), false, true, 0.0f); /* P^T = Q^T M^T */
        } else {
            tri_tensor v = tri_tensor_range(x->p, x->p_base[unit] + x->p_at[i], p->numel);
            rc = tri_op_copy(dev, v, tri_tensor_range(g, p->offset - u->start, p->numel));
        }
    }
    tri_tensor all = unit_p(x, unit);
    if (!rc && tri_tensor_numel(all) > 0) rc = all_reduce(x, dp, all, unit, async);
    return rc;
}

/* PowerSGD, second exchange (P's all-reduce complete): P's rows orthonormalised, Q^T = P^T M,
 * all-reduced (kept as the next step's warm start). */
static int powersgd_second(tri_dp_compress *x, tri_device *dev, tri_comm *dp, int unit, bool async)
{
    const tri_param_unit *u = &x->L->units[unit];
    tri_tensor m, pt, qt;
    int rc = TRI_OK;
    for (int i = u->first; i < u->first + u->count && !rc; i++) {
        if (x->q_at[i] < 0)
            continue;
        matrix_views(x, unit, i, x->residual, 0, &m, &pt, &qt);
        rc = tri_op_orthonormalize_rows(dev, pt);
        if (!rc) rc = tri_op_matmul(dev, qt, pt, m, tri_tensor_none(), false, false, 0.0f); /* Q^T = P^T M */
    }
    tri_tensor q = unit_q(x, unit);
    if (!rc && tri_tensor_numel(q) > 0) rc = all_reduce(x, dp, q, unit, async);
    return rc;
}

/* PowerSGD, once Q's all-reduce is complete: each matrix's gradient P Q^T and residual e - P Q^T /
 * dp; the vectors' sums copied back, with no residual. */
static int powersgd_last(tri_dp_compress *x, tri_device *dev, tri_comm *dp, tri_tensor g, int unit)
{
    const tri_param_layout *L = x->L;
    const tri_param_unit *u = &L->units[unit];
    int rc = TRI_OK;
    for (int i = u->first; i < u->first + u->count && !rc; i++) {
        const tri_param *p = &L->params[i];
        tri_tensor gi = tri_tensor_range(g, p->offset - u->start, p->numel), ri = tri_tensor_range(x->residual, p->offset, p->numel);
        if (x->q_at[i] < 0) {
            rc = tri_op_copy(dev, gi, tri_tensor_range(x->p, x->p_base[unit] + x->p_at[i], p->numel));
            if (!rc) rc = tri_op_fill(dev, ri, 0.0f);
            continue;
        }
        tri_tensor gm, pt, qt;
        matrix_views(x, unit, i, g, u->start, &gm, &pt, &qt);
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

/* g has unit u's length: TRI_EINVAL naming both otherwise. */
static int check_len(const tri_dp_compress *x, tri_tensor g, int unit)
{
    const tri_param_unit *u = &x->L->units[unit];
    if (tri_tensor_numel(g) == u->len)
        return TRI_OK;
    return TRI_ERR(TRI_EINVAL, "compressed dp reduction of unit %d: %lld elements given, the unit has %lld", unit,
                   (long long)tri_tensor_numel(g), (long long)u->len);
}

int tri_dp_compress_start(tri_dp_compress *x, tri_device *dev, tri_comm *dp, tri_tensor g, int unit, int64_t iter,
                          bool async)
{
    const tri_param_unit *u = &x->L->units[unit];
    int rc = check_len(x, g, unit);
    if (!rc && x->phase[unit] != 0)
        rc = TRI_ERR(TRI_EINTERNAL, "compressed dp reduction of unit %d started twice", unit);
    if (rc)
        return rc;
    uint64_t before = tri_comm_wire_bytes(dp, TRI_COMM_KINDS);
    x->last_plain += (uint64_t)tri_compression_sent_bytes(&x->c, 1, u->len, dp->size, x->stage, false);
    x->iter_of[unit] = iter;
    x->phase[unit] = 1;
    if (tri_dp_compress_plain(x, iter)) {
        rc = plain_unit(x, dp, g, unit, async);
    } else {
        tri_tensor r = tri_tensor_range(x->residual, u->start, u->len);
        rc = make_ready(x, dev);
        if (!rc) rc = tri_op_add(dev, r, r, g); /* e = g + r, kept in r */
        if (!rc) rc = x->c.kind == TRI_COMPRESS_POWERSGD              ? powersgd_first(x, dev, dp, g, unit, async)
                      : x->c.reduce == TRI_COMPRESS_REDUCE_TWO_PHASE ? two_phase_first(x, dev, dp, r, unit, iter, async)
                                                                     : gather_first(x, dev, dp, r, unit, iter, async);
    }
    x->last_sent += tri_comm_wire_bytes(dp, TRI_COMM_KINDS) - before;
    if (rc) /* nothing more of it runs (a collective it started is drained with the others) */
        x->phase[unit] = 0;
    return rc;
}

int tri_dp_compress_advance(tri_dp_compress *x, tri_device *dev, tri_comm *dp, int unit, bool async)
{
    if (x->phase[unit] != 1)
        return TRI_OK;
    x->phase[unit] = 2;
    bool second = x->c.kind == TRI_COMPRESS_POWERSGD || x->c.reduce == TRI_COMPRESS_REDUCE_TWO_PHASE;
    if (!second || tri_dp_compress_plain(x, x->iter_of[unit]))
        return TRI_OK;
    uint64_t before = tri_comm_wire_bytes(dp, TRI_COMM_KINDS);
    int rc = tri_comm_wait(&x->req[unit]);
    if (!rc) rc = x->c.kind == TRI_COMPRESS_POWERSGD ? powersgd_second(x, dev, dp, unit, async)
                                                     : two_phase_second(x, dev, dp, unit, async);
    x->last_sent += tri_comm_wire_bytes(dp, TRI_COMM_KINDS) - before;
    return rc;
}

int tri_dp_compress_finish(tri_dp_compress *x, tri_device *dev, tri_comm *dp, tri_tensor g, int unit)
{
    const tri_param_unit *u = &x->L->units[unit];
    int rc = check_len(x, g, unit);
    if (!rc && x->phase[unit] == 0)
        rc = TRI_ERR(TRI_EINTERNAL, "compressed dp reduction of unit %d finished but never started", unit);
    if (!rc) rc = tri_dp_compress_advance(x, dev, dp, unit, false);
    int w = tri_comm_wait(&x->req[unit]);
    rc = rc ? rc : w;
    x->phase[unit] = 0;
    if (rc || tri_dp_compress_plain(x, x->iter_of[unit]))
        return rc;
    rc = x->c.kind == TRI_COMPRESS_POWERSGD              ? powersgd_last(x, dev, dp, g, unit)
         : x->c.reduce == TRI_COMPRESS_REDUCE_TWO_PHASE ? two_phase_last(x, dev, dp, g, unit)
                                                        : gather_last(x, dev, dp, g, unit);
    if (!rc) rc = tri_dp_compress_zero_padding(x, dev, unit, x->residual, 0, u->start, u->start + u->len);
    if (!rc) rc = zero_vocab_padding(x, dev, unit, g);
    return rc;
}

bool tri_dp_compress_in_flight(const tri_dp_compress *x, int unit)
{
    return x->phase && x->phase[unit] != 0;
}

int tri_dp_compress_progress(tri_dp_compress *x)
{
    int rc = TRI_OK;
    bool done;
    for (int u = 0; x->req && u < x->L->n_units && !rc; u++)
        rc = tri_comm_test(&x->req[u], &done);
    return rc;
}

int tri_dp_compress_drain(tri_dp_compress *x)
{
    int rc = TRI_OK;
    for (int u = 0; x->req && u < x->L->n_units; u++) {
        int w = tri_comm_wait(&x->req[u]);
        rc = rc ? rc : w;
        x->phase[u] = 0;
    }
    return rc;
}

int tri_dp_compress_reduce(tri_dp_compress *x, tri_device *dev, tri_comm *dp, tri_tensor g, int unit, int64_t iter)
{
    int rc = tri_dp_compress_start(x, dev, dp, g, unit, iter, false);
    return rc ? rc : tri_dp_compress_finish(x, dev, dp, g, unit);
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

int tri_dp_compress_server_view(tri_dp_compress *x, int64_t at, int64_t n, tri_tensor *view)
{
    int64_t a = 0, b = 0, off = 0;
    int rc = server_range(x, at, n, &a, &b, &off);
    if (!rc)
        *view = tri_tensor_range(x->server_residual, off, b > a ? b - a : 0);
    return rc;
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
