/* engine/zero.c - ZeRO stages 0-3 over a stage's units (see zero.h). */
#include "engine/zero.h"

#include <stdlib.h>
#include <string.h>

#include "engine/status.h"

static int64_t slice_len(const tri_zero *z, int u)
{
    return z->L->units[u].len / z->L->dp;
}

static int64_t owned_start(const tri_zero *z, int u)
{
    return tri_unit_slice(&z->L->units[u], z->L->dp, z->L->dp_rank);
}

/* The position of flat offset `at` (inside this rank's slice of its unit) in the shard buffers. */
static int64_t local_of(const tri_zero *z, int64_t at)
{
    for (int u = 0; u < z->L->n_units; u++) {
        int64_t s = owned_start(z, u);
        if (at >= s && at < s + slice_len(z, u))
            return z->slice_offset[u] + (at - s);
    }
    return -1;
}

static int take_1d(tri_arena *a, tri_mem_kind kind, tri_tensor *t, int64_t n)
{
    return tri_arena_take(a, kind, t, TRI_F32, 1, (int64_t[]){n > 0 ? n : 1});
}

/* Whole-unit buffers: the shared pool sized for the largest block (every unit but the largest
 * few), and one buffer for each unit longer than that. */
static int take_unit_buffers(tri_zero *z, tri_arena *a, tri_mem_kind kind, tri_zero_buffer **bufs, int *n)
{
    const tri_param_layout *L = z->L;
    int big = 0;
    for (int u = 0; u < L->n_units; u++)
        big += L->units[u].len > z->pool_len;
    if (!*bufs) {
        *bufs = calloc((size_t)(TRI_ZERO_POOL + big), sizeof **bufs);
        if (!*bufs)
            return TRI_ERR(TRI_ENOMEM, "zero: out of memory");
    }
    *n = TRI_ZERO_POOL + big;
    int rc = TRI_OK, k = 0;
    for (; k < TRI_ZERO_POOL && !rc; k++)
        rc = take_1d(a, kind, &(*bufs)[k].t, z->pool_len);
    for (int u = 0; u < L->n_units && !rc; u++)
        if (L->units[u].len > z->pool_len)
            rc = take_1d(a, kind, &(*bufs)[k++].t, L->units[u].len);
    for (int i = 0; i < *n; i++) {
        (*bufs)[i].unit = -1;
        (*bufs)[i].refs = 0;
    }
    return rc;
}

/* The largest unit holding a block: units with several parameters or any but the largest. */
static int64_t pool_length(const tri_param_layout *L)
{
    int64_t largest = 0, pool = 0;
    for (int u = 0; u < L->n_units; u++)
        largest = L->units[u].len > largest ? L->units[u].len : largest;
    for (int u = 0; u < L->n_units; u++)
        if (L->units[u].count > 1 || L->units[u].len < largest)
            pool = L->units[u].len > pool ? L->units[u].len : pool;
    return pool > 0 ? pool : largest;
}

static int take_1d_i64(tri_arena *a, tri_mem_kind kind, tri_tensor *t, int64_t n)
{
    return tri_arena_take(a, kind, t, TRI_I64, 1, (int64_t[]){n > 0 ? n : 1});
}

/* Deterministic mode's extra buffers: the int64 sums, and for stages 2-3 an int64 bucket and
 * reduce-scatter result. */
static int take_fixed(tri_zero *z, tri_arena *a, int64_t largest_slice)
{
    const tri_param_layout *L = z->L;
    int64_t largest = 0;
    for (int u = 0; u < L->n_units; u++)
        largest = L->units[u].len > largest ? L->units[u].len : largest;
    int rc = take_1d_i64(a, TRI_MEM_GRADS, &z->acc, z->stage < 2 ? L->padded_numel : L->shard_numel);
    if (!rc && z->stage >= 2) {
        rc = take_1d_i64(a, TRI_MEM_COMM, &z->acc_bucket, largest);
        if (!rc) rc = take_1d_i64(a, TRI_MEM_COMM, &z->acc_tmp, largest_slice);
    }
    if (!rc) rc = take_1d(a, TRI_MEM_WORKSPACE, &z->bad, 1);
    return rc;
}

int tri_zero_take(tri_zero *z, tri_arena *a, const tri_param_layout *L, int stage, bool deterministic)
{
    if (stage < 0 || stage > 3)
        return TRI_ERR(TRI_EINVAL, "--zero-stage %d: expected 0, 1, 2 or 3", stage);
    z->stage = stage;
    z->deterministic = deterministic;
    z->L = L;
    if (!z->slice_offset) {
        z->slice_offset = calloc((size_t)(L->n_units > 0 ? L->n_units : 1), sizeof *z->slice_offset);
        if (!z->slice_offset)
            return TRI_ERR(TRI_ENOMEM, "zero: out of memory");
    }
    int64_t off = 0, largest_slice = 0;
    for (int u = 0; u < L->n_units; u++) {
        z->slice_offset[u] = off;
        off += L->units[u].len / L->dp;
        largest_slice = L->units[u].len / L->dp > largest_slice ? L->units[u].len / L->dp : largest_slice;
    }
    z->pool_len = pool_length(L);
    z->params = z->param_shard = z->grads = z->grad_shard = z->reduce_tmp = tri_tensor_none();
    z->acc = z->acc_bucket = z->acc_tmp = z->bad = tri_tensor_none();
    int rc = stage < 3 ? take_1d(a, TRI_MEM_PARAMS, &z->params, L->padded_numel)
                       : take_1d(a, TRI_MEM_PARAMS, &z->param_shard, L->shard_numel);
    if (!rc) rc = stage < 2 ? take_1d(a, TRI_MEM_GRADS, &z->grads, L->padded_numel)
                            : take_1d(a, TRI_MEM_GRADS, &z->grad_shard, L->shard_numel);
    if (!rc && stage >= 2 && !deterministic)
        rc = take_1d(a, TRI_MEM_COMM, &z->reduce_tmp, largest_slice);
    if (!rc && (stage >= 2 || deterministic))
        rc = take_unit_buffers(z, a, TRI_MEM_GRADS, &z->grad_bufs, &z->n_grad_bufs);
    if (!rc && deterministic)
        rc = take_fixed(z, a, largest_slice);
    if (!rc && stage == 3)
        rc = take_unit_buffers(z, a, TRI_MEM_PARAMS, &z->param_bufs, &z->n_param_bufs);
    return rc;
}

void tri_zero_bind(tri_zero *z, tri_device *dev, tri_comm *dp)
{
    z->dev = dev;
    z->dp = dp;
}

void tri_zero_destroy(tri_zero *z)
{
    free(z->slice_offset);
    free(z->param_bufs);
    free(z->grad_bufs);
    z->slice_offset = NULL;
    z->param_bufs = z->grad_bufs = NULL;
}

/* ---- whole-unit buffers ---- */

static tri_zero_buffer *held(tri_zero_buffer *bufs, int n, int unit)
{
    for (int i = 0; i < n; i++)
        if (bufs[i].unit == unit && bufs[i].refs > 0)
            return &bufs[i];
    return NULL;
}

/* A free buffer long enough for unit u: its own if it has one, else a shared one. */
static int acquire(tri_zero *z, tri_zero_buffer *bufs, int n, int unit, tri_zero_buffer **out)
{
    int64_t len = z->L->units[unit].len;
    int first = len > z->pool_len ? TRI_ZERO_POOL : 0, last = len > z->pool_len ? n : TRI_ZERO_POOL;
    for (int i = first; i < last; i++)
        if (bufs[i].refs == 0 && tri_tensor_numel(bufs[i].t) >= len) {
            bufs[i].unit = unit;
            bufs[i].refs = 1;
            *out = &bufs[i];
            return TRI_OK;
        }
    return TRI_ERR(TRI_EINTERNAL, "zero: no whole-unit buffer free for unit %d (%lld elements)", unit,
                   (long long)len);
}

static void release(tri_zero_buffer *bufs, int n, int unit)
{
    tri_zero_buffer *b = held(bufs, n, unit);
    if (b && --b->refs == 0)
        b->unit = -1;
}

/* ---- parameters ---- */

int tri_zero_params(tri_zero *z, int unit, tri_tensor *flat)
{
    const tri_param_unit *u = &z->L->units[unit];
    if (z->stage < 3) {
        *flat = tri_tensor_range(z->params, u->start, u->len);
        return TRI_OK;
    }
    tri_zero_buffer *b = held(z->param_bufs, z->n_param_bufs, unit);
    if (b) {
        b->refs++;
        *flat = tri_tensor_range(b->t, 0, u->len);
        return TRI_OK;
    }
    int rc = acquire(z, z->param_bufs, z->n_param_bufs, unit, &b);
    if (rc)
        return rc;
    *flat = tri_tensor_range(b->t, 0, u->len);
    rc = tri_comm_all_gather(z->dp, *flat, tri_tensor_range(z->param_shard, z->slice_offset[unit], slice_len(z, unit)));
    if (rc)
        release(z->param_bufs, z->n_param_bufs, unit);
    return rc;
}

void tri_zero_release_params(tri_zero *z, int unit)
{
    if (z->stage == 3)
        release(z->param_bufs, z->n_param_bufs, unit);
}

/* ---- gradients ---- */

/* Whether gradients go through buckets: always in deterministic mode, else from stage 2 on. */
static bool bucketed(const tri_zero *z)
{
    return z->deterministic || z->stage >= 2;
}

int tri_zero_grads(tri_zero *z, int unit, tri_tensor *flat)
{
    const tri_param_unit *u = &z->L->units[unit];
    if (!bucketed(z)) {
        *flat = tri_tensor_range(z->grads, u->start, u->len);
        return TRI_OK;
    }
    tri_zero_buffer *b = held(z->grad_bufs, z->n_grad_bufs, unit);
    if (b) {
        b->refs++;
        *flat = tri_tensor_range(b->t, 0, u->len);
        return TRI_OK;
    }
    int rc = acquire(z, z->grad_bufs, z->n_grad_bufs, unit, &b);
    if (rc)
        return rc;
    *flat = tri_tensor_range(b->t, 0, u->len);
    rc = tri_op_fill(z->dev, *flat, 0.0f);
    if (rc)
        release(z->grad_bufs, z->n_grad_bufs, unit);
    return rc;
}

/* Deterministic mode: the bucket of unit u in fixed point, added exactly to this rank's sums. */
static int add_bucket_fixed(tri_zero *z, int unit, tri_tensor bucket)
{
    const tri_param_unit *u = &z->L->units[unit];
    if (z->stage < 2)
        return tri_op_fixed_accumulate(z->dev, tri_tensor_range(z->acc, u->start, u->len), bucket, TRI_FIXED_BITS,
                                       z->bad);
    int64_t n = slice_len(z, unit);
    tri_tensor fixed = tri_tensor_range(z->acc_bucket, 0, u->len), tmp = tri_tensor_range(z->acc_tmp, 0, n);
    int rc = tri_op_zero(z->dev, fixed);
    if (!rc) rc = tri_op_fixed_accumulate(z->dev, fixed, bucket, TRI_FIXED_BITS, z->bad);
    if (!rc) rc = tri_comm_reduce_scatter(z->dp, tmp, fixed);
    if (!rc) rc = tri_op_add_i64(z->dev, tri_tensor_range(z->acc, z->slice_offset[unit], n), tmp);
    return rc;
}

int tri_zero_grads_done(tri_zero *z, int unit)
{
    if (!bucketed(z))
        return TRI_OK;
    tri_zero_buffer *b = held(z->grad_bufs, z->n_grad_bufs, unit);
    if (!b)
        return TRI_ERR(TRI_EINTERNAL, "zero: unit %d's gradients are done but were never taken", unit);
    if (b->refs > 1) {
        b->refs--;
        return TRI_OK;
    }
    int64_t len = z->L->units[unit].len, n = slice_len(z, unit);
    tri_tensor bucket = tri_tensor_range(b->t, 0, len);
    int rc;
    if (z->deterministic) {
        rc = add_bucket_fixed(z, unit, bucket);
    } else {
        tri_tensor tmp = tri_tensor_range(z->reduce_tmp, 0, n);
        rc = tri_comm_reduce_scatter(z->dp, tmp, bucket);
        if (!rc) rc = tri_op_axpy(z->dev, tri_tensor_range(z->grad_shard, z->slice_offset[unit], n), 1.0f, tmp);
    }
    release(z->grad_bufs, z->n_grad_bufs, unit);
    return rc;
}

int tri_zero_zero_grads(tri_zero *z)
{
    int rc = tri_op_fill(z->dev, z->stage < 2 ? z->grads : z->grad_shard, 0.0f);
    if (!rc && z->deterministic) {
        rc = tri_op_zero(z->dev, z->acc);
        if (!rc) rc = tri_op_fill(z->dev, z->bad, 0.0f);
    }
    return rc;
}

/* Deterministic mode: the exact sums reduced over dp (all-reduce at stage 0, reduce-scatter into the
 * owned slices at stage 1; stages 2-3 did it per bucket). */
static int reduce_grads_fixed(tri_zero *z)
{
    int rc = TRI_OK;
    if (z->stage == 0)
        rc = tri_comm_all_reduce(z->dp, z->acc, TRI_REDUCE_SUM);
    for (int u = 0; z->stage == 1 && u < z->L->n_units && !rc; u++) {
        const tri_param_unit *unit = &z->L->units[u];
        rc = tri_comm_reduce_scatter(z->dp, tri_tensor_range(z->acc, owned_start(z, u), slice_len(z, u)),
                                     tri_tensor_range(z->acc, unit->start, unit->len));
    }
    return rc;
}

int tri_zero_finish_grads(tri_zero *z)
{
    int rc = TRI_OK;
    if (!z->deterministic)
        return rc;
    for (int u = 0; u < z->L->n_units && !rc; u++) {
        int64_t start, len, local;
        tri_zero_owned(z, u, &start, &len, &local);
        rc = tri_op_fixed_to_float(z->dev, tri_zero_owned_grads(z, start, len), tri_zero_owned_sums(z, start, len),
                                   TRI_FIXED_BITS);
    }
    float bad = 0.0f;
    if (!rc) rc = tri_device_copy_to_host(z->dev, &bad, z->bad);
    if (!rc && bad > 0)
        rc = TRI_ERR(TRI_ENONFINITE, "deterministic mode: %.0f gradient contributions were not finite or beyond "
                     "the fixed-point range |g| < 2^%d", (double)bad, 62 - TRI_FIXED_BITS);
    return rc;
}

int tri_zero_reduce_grads(tri_zero *z)
{
    int rc = TRI_OK;
    if (z->deterministic)
        return reduce_grads_fixed(z);
    if (z->stage == 0 && z->dp->size > 1)
        return tri_comm_all_reduce(z->dp, z->grads, TRI_REDUCE_SUM);
    for (int u = 0; z->stage == 1 && u < z->L->n_units && !rc; u++) {
        const tri_param_unit *unit = &z->L->units[u];
        rc = tri_comm_reduce_scatter(z->dp, tri_tensor_range(z->grads, owned_start(z, u), slice_len(z, u)),
                                     tri_tensor_range(z->grads, unit->start, unit->len));
    }
    return rc;
}

int tri_zero_gather_params(tri_zero *z)
{
    int rc = TRI_OK;
    for (int u = 0; (z->stage == 1 || z->stage == 2) && u < z->L->n_units && !rc; u++) {
        const tri_param_unit *unit = &z->L->units[u];
        rc = tri_comm_all_gather(z->dp, tri_tensor_range(z->params, unit->start, unit->len),
                                 tri_tensor_range(z->params, owned_start(z, u), slice_len(z, u)));
    }
    return rc;
}

/* ---- ownership ---- */

int tri_zero_n_owned(const tri_zero *z)
{
    return z->L->n_units;
}

void tri_zero_owned(const tri_zero *z, int k, int64_t *start, int64_t *len, int64_t *local)
{
    const tri_param_unit *u = &z->L->units[k];
    if (z->stage == 0) {
        *start = *local = u->start;
        *len = u->len;
        return;
    }
    *start = owned_start(z, k);
    *len = slice_len(z, k);
    *local = z->slice_offset[k];
}

int64_t tri_zero_owned_numel(const tri_zero *z)
{
    return z->stage == 0 ? z->L->padded_numel : z->L->shard_numel;
}

tri_tensor tri_zero_owned_params(const tri_zero *z, int64_t start, int64_t len)
{
    if (z->stage < 3)
        return tri_tensor_range(z->params, start, len);
    return tri_tensor_range(z->param_shard, local_of(z, start), len);
}

tri_tensor tri_zero_owned_grads(const tri_zero *z, int64_t start, int64_t len)
{
    if (z->stage < 2)
        return tri_tensor_range(z->grads, start, len);
    return tri_tensor_range(z->grad_shard, local_of(z, start), len);
}

tri_tensor tri_zero_owned_sums(const tri_zero *z, int64_t start, int64_t len)
{
    if (!z->deterministic)
        return tri_zero_owned_grads(z, start, len);
    return tri_tensor_range(z->acc, z->stage < 2 ? start : local_of(z, start), len);
}
