/* engine/train/zero.c - ZeRO stages 0-3 over a stage's units (see zero.h). */
#include "engine/train/zero.h"

#include <stdlib.h>
#include <string.h>

#include "engine/core/status.h"

/* Part k (engine/train/param.h tri_param_part): this rank's slice of it, and the group that shards it. */
static int64_t slice_len(const tri_zero *z, int k)
{
    return tri_part_slice_len(z->L, k);
}

static int64_t owned_start(const tri_zero *z, int k)
{
    return tri_part_slice(z->L, k);
}

static tri_comm *part_comm(const tri_zero *z, int k)
{
    return z->L->parts[k].expert && z->edp ? z->edp : z->dp;
}

/* Unit u's part k as a range of a whole-unit buffer (which starts at the unit's start). */
static tri_tensor in_unit(const tri_zero *z, tri_tensor unit_buf, int k)
{
    const tri_param_part *p = &z->L->parts[k];
    return tri_tensor_range(unit_buf, p->start - z->L->units[p->unit].start, p->len);
}

/* The elements this rank owns of unit u: the sum of its parts' slices. */
static int64_t unit_slice_len(const tri_zero *z, int u)
{
    const tri_param_unit *un = &z->L->units[u];
    int64_t n = 0;
    for (int k = un->first_part; k < un->first_part + un->n_parts; k++)
        n += slice_len(z, k);
    return n;
}

/* The position of flat offset `at` (inside this rank's slice of its part) in the shard buffers. */
static int64_t local_of(const tri_zero *z, int64_t at)
{
    for (int k = 0; k < z->L->n_parts; k++) {
        int64_t s = owned_start(z, k);
        if (at >= s && at < s + slice_len(z, k))
            return z->slice_offset[k] + (at - s);
    }
    return -1;
}

/* Waits for the requests of a unit's parts (every one, the first error returned). */
static int wait_parts(tri_comm_request *req, int n)
{
    int rc = TRI_OK;
    for (int j = 0; j < n; j++) {
        int r = tri_comm_wait(&req[j]);
        rc = rc ? rc : r;
    }
    return rc;
}

static int take_1d(tri_arena *a, tri_mem_kind kind, tri_tensor *t, int64_t n)
{
    return tri_arena_take(a, kind, t, TRI_F32, 1, (int64_t[]){n > 0 ? n : 1});
}

/* A 1-d buffer of the model's parameter dtype (bf16 with mixed precision, else fp32). */
static int take_1d_model(tri_zero *z, tri_arena *a, tri_mem_kind kind, tri_tensor *t, int64_t n)
{
    return tri_arena_take(a, kind, t, z->bf16 ? TRI_BF16 : TRI_F32, 1, (int64_t[]){n > 0 ? n : 1});
}

static int take_1d_i64(tri_arena *a, tri_mem_kind kind, tri_tensor *t, int64_t n)
{
    return tri_arena_take(a, kind, t, TRI_I64, 1, (int64_t[]){n > 0 ? n : 1});
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
    /* parameters: the model's dtype; gradients fp32, or in deterministic mode the pass's exact sums
       (int64, written per 64-row chunk by the ops: engine/device/ops/exact_grads.c) */
    tri_dtype dtype = kind == TRI_MEM_PARAMS ? (z->bf16 ? TRI_BF16 : TRI_F32) : z->deterministic ? TRI_I64 : TRI_F32;
    for (; k < TRI_ZERO_POOL && !rc; k++)
        rc = tri_arena_take(a, kind, &(*bufs)[k].t, dtype, 1, (int64_t[]){z->pool_len > 0 ? z->pool_len : 1});
    for (int u = 0; u < L->n_units && !rc; u++)
        if (L->units[u].len > z->pool_len)
            rc = tri_arena_take(a, kind, &(*bufs)[k++].t, dtype, 1, (int64_t[]){L->units[u].len});
    for (int i = 0; i < *n; i++) {
        (*bufs)[i].unit = -1;
        (*bufs)[i].refs = 0;
        (*bufs)[i].prefetched = (*bufs)[i].reducing = false;
        memset((*bufs)[i].req, 0, sizeof (*bufs)[i].req);
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


static int64_t largest_unit(const tri_param_layout *L)
{
    int64_t largest = 0;
    for (int u = 0; u < L->n_units; u++)
        largest = L->units[u].len > largest ? L->units[u].len : largest;
    return largest;
}

/* The owned slices (elements) of the units gradient buffer i may hold: a shared one (i < TRI_ZERO_POOL)
 * any unit up to pool_len, one of its own that unit (take_unit_buffers gives them in unit order).
 * len / dp without expert parts. */
static int64_t buffer_slice(const tri_zero *z, int i)
{
    int64_t slice = 0;
    for (int u = 0, big = 0; u < z->L->n_units; u++) {
        bool own = z->L->units[u].len > z->pool_len;
        if (i < TRI_ZERO_POOL ? !own : own && big++ == i - TRI_ZERO_POOL)
            slice = unit_slice_len(z, u) > slice ? unit_slice_len(z, u) : slice;
    }
    return slice;
}

/* Where each gradient bucket's reduce-scatter lands (tmp; int64 in deterministic mode, as the
 * buckets): without overlap one shared buffer serves every bucket (a reduction completes before the
 * next starts); with overlap each bucket has its own, as several are in flight. */
static int take_reduce_buffers(tri_zero *z, tri_arena *a, int64_t largest_slice)
{
    tri_dtype dtype = z->deterministic ? TRI_I64 : TRI_F32;
    tri_tensor tmp = tri_tensor_none();
    int rc = TRI_OK;
    if (!z->overlap_grad_reduce) {
        rc = tri_arena_take(a, TRI_MEM_COMM, &tmp, dtype, 1, (int64_t[]){largest_slice > 0 ? largest_slice : 1});
        if (z->deterministic)
            z->acc_tmp = tmp;
        else
            z->reduce_tmp = tmp;
    }
    for (int i = 0; i < z->n_grad_bufs && !rc; i++) {
        tri_zero_buffer *b = &z->grad_bufs[i];
        int64_t slice = buffer_slice(z, i);
        b->tmp = tmp;
        if (z->overlap_grad_reduce)
            rc = tri_arena_take(a, TRI_MEM_COMM, &b->tmp, dtype, 1, (int64_t[]){slice > 0 ? slice : 1});
    }
    return rc;
}

/* Per-unit bookkeeping of the operations in flight (allocated once: takes run twice). */
static int alloc_tracking(tri_zero *z)
{
    int n = z->L->n_units > 0 ? z->L->n_units : 1, np = z->L->n_parts > 0 ? z->L->n_parts : 1;
    if (z->slice_offset)
        return TRI_OK;
    z->slice_offset = calloc((size_t)np, sizeof *z->slice_offset);
    z->grad_req = calloc((size_t)np, sizeof *z->grad_req);
    z->param_req = calloc((size_t)np, sizeof *z->param_req);
    z->grad_calls = calloc((size_t)n, sizeof *z->grad_calls);
    z->grad_calls_per_step = calloc((size_t)n, sizeof *z->grad_calls_per_step);
    z->grad_started = calloc((size_t)n, sizeof *z->grad_started);
    if (!z->slice_offset || !z->grad_req || !z->param_req || !z->grad_calls || !z->grad_calls_per_step ||
        !z->grad_started)
        return TRI_ERR(TRI_ENOMEM, "zero: out of memory");
    return TRI_OK;
}

int tri_zero_take(tri_zero *z, tri_arena *a, const tri_param_layout *L, const tri_train_layout *run)
{
    if (run->zero_stage < 0 || run->zero_stage > 3)
        return TRI_ERR(TRI_EINVAL, "--zero-stage %d: expected 0, 1, 2 or 3", run->zero_stage);
    z->stage = run->zero_stage;
    z->deterministic = run->deterministic;
    z->overlap_grad_reduce = run->overlap_grad_reduce;
    z->overlap_param_gather = run->overlap_param_gather;
    z->bf16 = run->precision == TRI_PRECISION_BF16;
    z->grads_zeroed = false;
    z->L = L;
    int rc = alloc_tracking(z);
    if (rc)
        return rc;
    int64_t off = 0, largest_slice = 0;
    for (int k = 0; k < L->n_parts; k++) {
        z->slice_offset[k] = off;
        off += slice_len(z, k);
    }
    for (int u = 0; u < L->n_units; u++)
        largest_slice = unit_slice_len(z, u) > largest_slice ? unit_slice_len(z, u) : largest_slice;
    bool experts = false;
    for (int k = 0; k < L->n_parts; k++)
        experts |= L->parts[k].expert;
    z->pool_len = pool_length(L);
    z->params = z->param_shard = z->grads = z->grad_shard = z->reduce_tmp = tri_tensor_none();
    z->acc = z->acc_tmp = z->exact_tmp = z->bad = z->master = tri_tensor_none();
    int stage = run->zero_stage;
    rc = stage < 3 ? take_1d_model(z, a, TRI_MEM_PARAMS, &z->params, L->padded_numel)
                   : take_1d_model(z, a, TRI_MEM_PARAMS, &z->param_shard, L->shard_numel);
    if (!rc && z->bf16) /* fp32 master weights: optimizer state, sharded from stage 1 */
        rc = take_1d(a, TRI_MEM_OPTIMIZER, &z->master, stage == 0 ? L->padded_numel : L->shard_numel);
    if (!rc) rc = stage < 2 ? take_1d(a, TRI_MEM_GRADS, &z->grads, L->padded_numel)
                            : take_1d(a, TRI_MEM_GRADS, &z->grad_shard, L->shard_numel);
    if (!rc && (stage >= 2 || z->deterministic))
        rc = take_unit_buffers(z, a, TRI_MEM_GRADS, &z->grad_bufs, &z->n_grad_bufs);
    if (!rc && stage >= 2)
        rc = take_reduce_buffers(z, a, largest_slice);
    if (!rc && z->deterministic) {
        rc = take_1d_i64(a, TRI_MEM_GRADS, &z->acc, stage < 2 ? L->padded_numel : L->shard_numel);
        if (!rc) rc = take_1d(a, TRI_MEM_WORKSPACE, &z->bad, 1);
        /* a chunk's fp32 gradient before its exact add (tri_zero_exact_grads): as long as a unit */
        if (!rc) rc = take_1d(a, TRI_MEM_WORKSPACE, &z->exact_tmp, largest_unit(L));
    }
    if (!rc && stage == 3)
        rc = take_unit_buffers(z, a, TRI_MEM_PARAMS, &z->param_bufs, &z->n_param_bufs);
    if (!rc) rc = tri_dp_compress_take(&z->comp, a, L, &run->compression, stage, run->overlap_grad_reduce);
    if (!rc && experts && z->comp.on)
        rc = TRI_ERR(TRI_EINVAL, "--expert-model-parallel-size %d with gradient compression (at "
                     "--tensor-model-parallel-size %d): a compressor codes and exchanges whole units over dp, while a "
                     "sparse block's experts reduce over the expert-data-parallel group (not built)",
                     run->ep > 1 ? run->ep : 1, run->tp > 1 ? run->tp : 1);
    if (!rc && run->etp > 1 && z->comp.on)
        rc = TRI_ERR(TRI_EINVAL, "--expert-tensor-parallel-size %d with gradient compression: a compressor codes "
                     "and exchanges whole units over dp, while the expert slices reduce over the expert-data-parallel "
                     "group (not built)", run->etp);
    return rc;
}

void tri_zero_bind(tri_zero *z, tri_device *dev, tri_comm *dp)
{
    z->dev = dev;
    z->dp = dp;
}

void tri_zero_bind_experts(tri_zero *z, tri_comm *edp)
{
    z->edp = edp;
}

/* Stage 0 without overlap: the whole stage all-reduced over dp in one call; under expert parallelism
 * each run of consecutive parts with the same group in one call (the experts over edp, the
 * stretches between over dp). */
static int all_reduce_stage(tri_zero *z, tri_tensor whole)
{
    const tri_param_layout *L = z->L;
    if (!z->edp)
        return tri_comm_all_reduce(z->dp, whole, TRI_REDUCE_SUM);
    int rc = TRI_OK;
    for (int k = 0; k < L->n_parts && !rc;) {
        int j = k;
        while (j < L->n_parts && L->parts[j].expert == L->parts[k].expert)
            j++;
        int64_t s = L->parts[k].start, e = L->parts[j - 1].start + L->parts[j - 1].len;
        rc = tri_comm_all_reduce(part_comm(z, k), tri_tensor_range(whole, s, e - s), TRI_REDUCE_SUM);
        k = j;
    }
    return rc;
}

void tri_zero_expect_grads(tri_zero *z, int unit, int calls)
{
    z->grad_calls_per_step[unit] = calls;
}

void tri_zero_destroy(tri_zero *z)
{
    if (z->dp && z->slice_offset)
        tri_zero_sync(z); /* nothing may stay in flight on freed buffers; errors are moot here */
    free(z->slice_offset);
    free(z->param_bufs);
    free(z->grad_bufs);
    free(z->grad_req);
    free(z->param_req);
    free(z->grad_calls);
    free(z->grad_calls_per_step);
    free(z->grad_started);
    free(z->trace);
    tri_dp_compress_free(&z->comp);
    memset(z, 0, sizeof *z);
}

/* ---- whole-unit buffers ---- */

/* The buffer holding unit u for users (refs > 0), or NULL. */
static tri_zero_buffer *held(tri_zero_buffer *bufs, int n, int unit)
{
    for (int i = 0; i < n; i++)
        if (bufs[i].unit == unit && bufs[i].refs > 0)
            return &bufs[i];
    return NULL;
}

static tri_zero_buffer *prefetched(tri_zero *z, int unit)
{
    for (int i = 0; i < z->n_param_bufs; i++)
        if (z->param_bufs[i].unit == unit && z->param_bufs[i].prefetched)
            return &z->param_bufs[i];
    return NULL;
}

/* Completes a prefetch that will not be used, freeing its buffer. */
static int drop_prefetch(tri_zero_buffer *b)
{
    int rc = wait_parts(b->req, TRI_UNIT_MAX_PARTS);
    b->prefetched = false;
    b->unit = -1;
    return rc;
}

static int retire_until(tri_zero *z, uint64_t ticket);

/* The range of buffers that can hold unit u: its own when it is longer than the shared ones. */
static void candidates(const tri_zero *z, tri_zero_buffer *bufs, int n, int unit, int *first, int *last)
{
    bool big = z->L->units[unit].len > z->pool_len;
    *first = big ? TRI_ZERO_POOL : 0;
    *last = big ? n : TRI_ZERO_POOL;
    (void)bufs;
}

static tri_zero_buffer *free_buffer(const tri_zero *z, tri_zero_buffer *bufs, int n, int unit)
{
    int first, last;
    candidates(z, bufs, n, unit, &first, &last);
    for (int i = first; i < last; i++)
        if (bufs[i].unit < 0 && tri_tensor_numel(bufs[i].t) >= z->L->units[unit].len)
            return &bufs[i];
    return NULL;
}

/* A free buffer for unit u, made free if need be: a parameter buffer by dropping a prefetch, a
 * gradient buffer by completing the oldest reductions. */
static int acquire(tri_zero *z, tri_zero_buffer *bufs, int n, int unit, tri_zero_buffer **out)
{
    tri_zero_buffer *b = free_buffer(z, bufs, n, unit);
    int first, last, rc = TRI_OK;
    candidates(z, bufs, n, unit, &first, &last);
    for (int i = first; !b && !rc && i < last; i++) {
        if (bufs[i].prefetched)
            rc = drop_prefetch(&bufs[i]);
        else if (bufs[i].reducing)
            rc = retire_until(z, bufs[i].ticket + 1);
        b = rc ? NULL : free_buffer(z, bufs, n, unit);
    }
    if (rc)
        return rc;
    if (!b)
        return TRI_ERR(TRI_EINTERNAL, "zero: no whole-unit buffer free for unit %d (%lld elements)", unit,
                       (long long)z->L->units[unit].len);
    b->unit = unit;
    b->refs = 1;
    *out = b;
    return TRI_OK;
}

static void release(tri_zero_buffer *bufs, int n, int unit)
{
    tri_zero_buffer *b = held(bufs, n, unit);
    if (b && --b->refs == 0)
        b->unit = -1;
}

/* Advances everything in flight (MPI progresses non-blocking collectives only inside its calls):
 * called at every use of a unit. Completion is only noted here; results are applied in order later. */
static int progress(tri_zero *z)
{
    bool done;
    int rc = TRI_OK;
    for (int k = 0; k < z->L->n_parts && !rc; k++) {
        rc = tri_comm_test(&z->grad_req[k], &done);
        if (!rc) rc = tri_comm_test(&z->param_req[k], &done);
    }
    for (int i = 0; i < z->n_grad_bufs && !rc; i++)
        for (int j = 0; j < TRI_UNIT_MAX_PARTS && !rc; j++)
            rc = tri_comm_test(&z->grad_bufs[i].req[j], &done);
    for (int i = 0; i < z->n_param_bufs && !rc; i++)
        for (int j = 0; j < TRI_UNIT_MAX_PARTS && !rc; j++)
            rc = tri_comm_test(&z->param_bufs[i].req[j], &done);
    return rc ? rc : tri_dp_compress_progress(&z->comp);
}

/* ---- parameters ---- */

/* Stage 3: this rank's slice of part k. */
static tri_tensor shard_params(const tri_zero *z, int k)
{
    return tri_tensor_range(z->param_shard, z->slice_offset[k], slice_len(z, k));
}

/* Stage 3: all-gathers unit u's parts into buffer b (started non-blocking into b->req when `async`). */
static int gather_parts(tri_zero *z, tri_zero_buffer *b, int unit, bool async)
{
    const tri_param_unit *u = &z->L->units[unit];
    tri_tensor whole = tri_tensor_range(b->t, 0, u->len);
    int rc = TRI_OK;
    for (int j = 0; j < u->n_parts && !rc; j++) {
        int k = u->first_part + j;
        rc = async ? tri_comm_all_gather_start(part_comm(z, k), in_unit(z, whole, k), shard_params(z, k), &b->req[j])
                   : tri_comm_all_gather(part_comm(z, k), in_unit(z, whole, k), shard_params(z, k));
    }
    return rc;
}

/* Stage 3: starts gathering unit v into a free buffer, unless it is held or no buffer is free. */
static int prefetch(tri_zero *z, int v)
{
    if (held(z->param_bufs, z->n_param_bufs, v) || prefetched(z, v))
        return TRI_OK;
    tri_zero_buffer *b = free_buffer(z, z->param_bufs, z->n_param_bufs, v);
    if (!b)
        return TRI_OK;
    int rc = gather_parts(z, b, v, true);
    if (!rc) {
        b->unit = v;
        b->prefetched = true;
        z->started_param_gathers++;
    }
    return rc;
}

/* Stage 3: unit u's all-gather happened (or its prefetch was taken). The first step records the
 * order; later steps check they follow it and prefetch the next entry. */
static int gathered(tri_zero *z, int unit)
{
    if (!z->overlap_param_gather || !z->in_step)
        return TRI_OK;
    if (!z->trace_ready) {
        if (z->n_trace == z->trace_cap) {
            int cap = z->trace_cap ? 2 * z->trace_cap : 64;
            int *t = realloc(z->trace, (size_t)cap * sizeof *t);
            if (!t)
                return TRI_ERR(TRI_ENOMEM, "zero: out of memory for the gather order");
            z->trace = t;
            z->trace_cap = cap;
        }
        z->trace[z->n_trace++] = unit;
        return TRI_OK;
    }
    if (!z->trace_ok || z->trace_pos >= z->n_trace || z->trace[z->trace_pos] != unit) {
        z->trace_ok = false; /* the order changed: no more prefetching this step */
        return TRI_OK;
    }
    z->trace_pos++;
    return z->trace_pos < z->n_trace ? prefetch(z, z->trace[z->trace_pos]) : TRI_OK;
}

/* Stage 3: unit u gathered into a buffer (a prefetched one if it is there). */
static int gather_unit(tri_zero *z, int unit, tri_tensor *flat)
{
    const tri_param_unit *u = &z->L->units[unit];
    tri_zero_buffer *b = prefetched(z, unit);
    int rc;
    if (b) {
        b->prefetched = false;
        b->refs = 1;
        z->prefetches_used++;
        rc = wait_parts(b->req, TRI_UNIT_MAX_PARTS);
    } else {
        rc = acquire(z, z->param_bufs, z->n_param_bufs, unit, &b);
        if (rc)
            return rc;
        rc = gather_parts(z, b, unit, false);
    }
    *flat = tri_tensor_range(b->t, 0, u->len);
    if (!rc) rc = gathered(z, unit);
    if (rc)
        release(z->param_bufs, z->n_param_bufs, unit);
    return rc;
}

int tri_zero_params(tri_zero *z, int unit, tri_tensor *flat)
{
    const tri_param_unit *u = &z->L->units[unit];
    int rc = progress(z);
    if (rc)
        return rc;
    if (z->stage < 3) {
        *flat = tri_tensor_range(z->params, u->start, u->len);
        return wait_parts(&z->param_req[u->first_part], u->n_parts);
    }
    tri_zero_buffer *b = held(z->param_bufs, z->n_param_bufs, unit);
    if (b) {
        b->refs++;
        *flat = tri_tensor_range(b->t, 0, u->len);
        return TRI_OK;
    }
    return gather_unit(z, unit, flat);
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
    z->grads_zeroed = false; /* written from here on (without a tri_zero_zero_grads first, too) */
    int rc = progress(z);
    if (rc)
        return rc;
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
    rc = acquire(z, z->grad_bufs, z->n_grad_bufs, unit, &b);
    if (rc)
        return rc;
    *flat = tri_tensor_range(b->t, 0, u->len);
    rc = tri_op_zero(z->dev, *flat);
    if (rc)
        release(z->grad_bufs, z->n_grad_bufs, unit);
    return rc;
}

/* Stages 2-3: completes bucket b's reduce-scatters and adds this rank's slices to its owned sums. */
static int retire(tri_zero *z, tri_zero_buffer *b)
{
    const tri_param_unit *u = &z->L->units[b->unit];
    int rc = wait_parts(b->req, u->n_parts);
    int64_t at = 0; /* where part j's slice sits in b->tmp */
    for (int j = 0; j < u->n_parts && !rc; j++) {
        int k = u->first_part + j;
        int64_t n = slice_len(z, k);
        tri_tensor mine = tri_tensor_range(b->tmp, at, n);
        if (z->deterministic)
            rc = tri_op_add_i64(z->dev, tri_tensor_range(z->acc, z->slice_offset[k], n), mine);
        else
            rc = tri_op_axpy(z->dev, tri_tensor_range(z->grad_shard, z->slice_offset[k], n), 1.0f, mine);
        at += n;
    }
    b->reducing = false;
    b->refs = 0;
    b->unit = -1;
    return rc;
}

/* Completes the bucket reductions started before `ticket`, oldest first (UINT64_MAX: all). */
static int retire_until(tri_zero *z, uint64_t ticket)
{
    for (;;) {
        tri_zero_buffer *oldest = NULL;
        for (int i = 0; i < z->n_grad_bufs; i++) {
            tri_zero_buffer *b = &z->grad_bufs[i];
            if (b->reducing && b->ticket < ticket && (!oldest || b->ticket < oldest->ticket))
                oldest = b;
        }
        if (!oldest)
            return TRI_OK;
        int rc = retire(z, oldest);
        if (rc)
            return rc;
    }
}

/* Stages 2-3: reduce-scatters bucket b (unit u's gradients of one pass, exact int64 sums in
 * deterministic mode), each part over its group into its place in b->tmp; started non-blocking with
 * overlap, else completed at once. */
static int reduce_bucket(tri_zero *z, tri_zero_buffer *b)
{
    const tri_param_unit *u = &z->L->units[b->unit];
    tri_tensor src = tri_tensor_range(b->t, 0, u->len);
    int rc = TRI_OK;
    int64_t at = 0; /* where part j's slice goes in b->tmp */
    for (int j = 0; j < u->n_parts && !rc; j++) {
        int k = u->first_part + j;
        tri_tensor dst = tri_tensor_range(b->tmp, at, slice_len(z, k));
        rc = z->overlap_grad_reduce ? tri_comm_reduce_scatter_start(part_comm(z, k), dst, in_unit(z, src, k), &b->req[j])
                                    : tri_comm_reduce_scatter(part_comm(z, k), dst, in_unit(z, src, k));
        at += slice_len(z, k);
    }
    b->reducing = true;
    b->refs = 0;
    b->ticket = z->next_ticket++;
    z->started_grad_reductions += z->overlap_grad_reduce;
    if (rc) {
        b->reducing = false;
        b->unit = -1;
        return rc;
    }
    return z->overlap_grad_reduce ? TRI_OK : retire(z, b);
}

/* Stages 0-1: unit u's gradients (or exact sums) reduced over each part's group - all-reduced at
 * stage 0, reduce-scattered in place into the owned slice at stage 1 - non-blocking when `async`. */
static int reduce_unit(tri_zero *z, int unit, bool async)
{
    const tri_param_unit *u = &z->L->units[unit];
    tri_tensor base = z->deterministic ? z->acc : z->grads;
    int rc = TRI_OK;
    z->grad_started[unit] = true;
    z->started_grad_reductions += async;
    for (int k = u->first_part; k < u->first_part + u->n_parts && !rc; k++) {
        tri_tensor whole = tri_tensor_range(base, z->L->parts[k].start, z->L->parts[k].len);
        tri_tensor mine = tri_tensor_range(base, owned_start(z, k), slice_len(z, k));
        tri_comm *c = part_comm(z, k);
        if (z->stage == 0)
            rc = async ? tri_comm_all_reduce_start(c, whole, TRI_REDUCE_SUM, &z->grad_req[k])
                       : tri_comm_all_reduce(c, whole, TRI_REDUCE_SUM);
        else
            rc = async ? tri_comm_reduce_scatter_start(c, mine, whole, &z->grad_req[k])
                       : tri_comm_reduce_scatter(c, mine, whole);
    }
    return rc;
}

/* Whether this step's dp reduction is a compressed one (a compressor, dp > 1, past its start
 * iteration). */
static bool compressing(const tri_zero *z)
{
    return z->comp.on && z->dp->size > 1 && !tri_dp_compress_plain(&z->comp, z->iteration);
}

/* Deterministic stages 0-1 with a compressor: unit u's exact sums as fp32 gradients (what is
 * compressed), and back: the decoded sum (the same bits on every rank) into the exact sums that the
 * later reductions and tri_zero_finish_grads read, over the whole unit (stage 0) or the owned slice. */
static int exact_to_float(tri_zero *z, int unit)
{
    const tri_param_unit *u = &z->L->units[unit];
    return tri_op_fixed_to_float(z->dev, tri_tensor_range(z->grads, u->start, u->len),
                                 tri_tensor_range(z->acc, u->start, u->len), TRI_FIXED_BITS);
}

static int float_to_exact(tri_zero *z, int unit)
{
    const tri_param_unit *u = &z->L->units[unit];
    /* (a compressed unit is one part: compression is refused with expert parts) */
    int64_t at = z->stage == 0 ? u->start : owned_start(z, u->first_part);
    int64_t n = z->stage == 0 ? u->len : slice_len(z, u->first_part);
    tri_tensor mine = tri_tensor_range(z->acc, at, n);
    int rc = tri_op_zero(z->dev, mine);
    return rc ? rc : tri_op_fixed_accumulate(z->dev, mine, tri_tensor_range(z->grads, at, n), TRI_FIXED_BITS, z->bad);
}

/* With overlap and a compressor, when the backward pass has completed unit u's gradient: the
 * reductions started before it go on to their second exchange (PowerSGD's Q, two-phase's phase 2:
 * their first has had a unit's backward to complete), then u's starts, its first exchange
 * non-blocking (engine/train/dp_compress.h). The rest runs in tri_zero_reduce_grads. */
static int start_compressed(tri_zero *z, int unit)
{
    const tri_param_unit *u = &z->L->units[unit];
    int rc = TRI_OK;
    for (int v = 0; v < z->L->n_units && !rc; v++)
        rc = tri_dp_compress_advance(&z->comp, z->dev, z->dp, v, true);
    if (!rc && z->deterministic) rc = exact_to_float(z, unit);
    z->grad_started[unit] = true;
    z->started_grad_reductions++;
    return rc ? rc : tri_dp_compress_start(&z->comp, z->dev, z->dp, tri_tensor_range(z->grads, u->start, u->len), unit,
                                           z->iteration, true);
}

int tri_zero_grads_done(tri_zero *z, int unit)
{
    int rc = TRI_OK;
    if (bucketed(z)) {
        tri_zero_buffer *b = held(z->grad_bufs, z->n_grad_bufs, unit);
        if (!b)
            return TRI_ERR(TRI_EINTERNAL, "zero: unit %d's gradients are done but were never taken", unit);
        if (b->refs > 1) {
            b->refs--;
            return TRI_OK;
        }
        if (z->stage >= 2)
            return reduce_bucket(z, b);
        /* deterministic stages 0-1: the pass's exact sums added to the whole stage's */
        const tri_param_unit *u = &z->L->units[unit];
        rc = tri_op_add_i64(z->dev, tri_tensor_range(z->acc, u->start, u->len), tri_tensor_range(b->t, 0, u->len));
        release(z->grad_bufs, z->n_grad_bufs, unit);
    }
    /* stages 0-1 with overlap: the unit's last pass of the step starts its reduction, plain or
     * compressed (nothing while a compressor's group is this rank alone: local SGD's inner steps,
     * 1-bit Adam's compression stage) */
    if (!rc && z->overlap_grad_reduce && (!z->comp.on || z->dp->size > 1) && z->grad_calls_per_step[unit] > 0 &&
        ++z->grad_calls[unit] == z->grad_calls_per_step[unit])
        rc = compressing(z) ? start_compressed(z, unit) : reduce_unit(z, unit, true);
    return rc;
}

int tri_zero_exact_grads(tri_zero *z)
{
    return tri_device_set_exact_grads(z->dev, z->deterministic ? z->exact_tmp : tri_tensor_none(), z->bad,
                                      TRI_FIXED_BITS);
}

int tri_zero_zero_grads(tri_zero *z)
{
    /* (stage 1-2 all-gathers started after the last update stay in flight: the forward waits) */
    int rc = z->grads_zeroed ? TRI_OK : tri_op_fill(z->dev, z->stage < 2 ? z->grads : z->grad_shard, 0.0f);
    z->grads_zeroed = false;
    if (!rc && z->deterministic) {
        rc = tri_op_zero(z->dev, z->acc);
        if (!rc) rc = tri_op_fill(z->dev, z->bad, 0.0f);
    }
    for (int u = 0; u < z->L->n_units; u++) {
        z->grad_calls[u] = 0;
        z->grad_started[u] = false;
    }
    /* the step's compressed reduction counts from here (overlap starts it in the backward); none is
     * left in flight by a step that ended early */
    if (!rc) rc = tri_dp_compress_drain(&z->comp);
    z->comp.last_sent = z->comp.last_plain = 0;
    z->in_step = true;
    z->trace_pos = 0;
    z->trace_ok = true;
    return rc;
}

int tri_zero_finish_grads(tri_zero *z)
{
    int rc = TRI_OK;
    if (!z->deterministic)
        return rc;
    for (int k = 0; k < tri_zero_n_owned(z) && !rc; k++) {
        int64_t start, len, local;
        tri_zero_owned(z, k, &start, &len, &local);
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

/* Stages 0-1 with a compressor: every unit's compressed reduction, finished in unit order (those
 * the backward started first go on to their second exchange, the others run whole now). In
 * deterministic mode the rank's exact sums of the unit become fp32 first, and the decoded sum goes
 * back into the exact sums (exact_to_float, float_to_exact). */
static int compress_units(tri_zero *z)
{
    int rc = TRI_OK;
    for (int unit = 0; unit < z->L->n_units && !rc; unit++)
        rc = tri_dp_compress_advance(&z->comp, z->dev, z->dp, unit, true);
    for (int unit = 0; unit < z->L->n_units && !rc; unit++) {
        const tri_param_unit *u = &z->L->units[unit];
        tri_tensor g = tri_tensor_range(z->grads, u->start, u->len);
        if (!tri_dp_compress_in_flight(&z->comp, unit)) {
            if (z->deterministic)
                rc = exact_to_float(z, unit);
            if (!rc) rc = tri_dp_compress_start(&z->comp, z->dev, z->dp, g, unit, z->iteration, false);
        }
        if (!rc) rc = tri_dp_compress_finish(&z->comp, z->dev, z->dp, g, unit);
        if (!rc && z->deterministic)
            rc = float_to_exact(z, unit);
    }
    return rc;
}

/* Stages 0-1: every unit's reduction, completed in unit order (those the backward started
 * non-blocking are waited for, the rest run now). Without overlap stage 0 all-reduces the whole
 * stage in one call. */
static int reduce_units(tri_zero *z)
{
    int rc = TRI_OK;
    /* local SGD's inner steps bind z->dp to this rank alone: nothing to reduce, nothing to compress */
    if (compressing(z))
        return compress_units(z);
    if (!z->overlap_grad_reduce && z->stage == 0)
        return all_reduce_stage(z, z->deterministic ? z->acc : z->grads);
    for (int u = 0; u < z->L->n_units && !rc; u++)
        rc = z->grad_started[u] ? wait_parts(&z->grad_req[z->L->units[u].first_part], z->L->units[u].n_parts)
                                : reduce_unit(z, u, false);
    return rc;
}

int tri_zero_reduce_grads(tri_zero *z)
{
    int rc = TRI_OK;
    /* nothing gathered ahead may outlive the step: the update changes the owned slices */
    for (int i = 0; i < z->n_param_bufs && !rc; i++)
        if (z->param_bufs[i].prefetched)
            rc = drop_prefetch(&z->param_bufs[i]);
    if (z->in_step && z->overlap_param_gather && !z->trace_ready && z->n_trace > 0)
        z->trace_ready = true;
    z->in_step = false;
    if (rc)
        return rc;
    if (z->stage >= 2)
        return retire_until(z, UINT64_MAX);
    /* (the experts' group can be larger than dp: at tp > 1 and dp 1 it is the TP ranks) */
    if (z->stage == 1 || z->deterministic || z->dp->size > 1 || (z->edp && z->edp->size > 1))
        rc = reduce_units(z);
    return rc;
}

int tri_zero_gather_params(tri_zero *z)
{
    int rc = TRI_OK;
    for (int k = 0; (z->stage == 1 || z->stage == 2) && k < z->L->n_parts && !rc; k++) {
        tri_tensor mine = tri_tensor_range(z->params, owned_start(z, k), slice_len(z, k));
        tri_tensor whole = tri_tensor_range(z->params, z->L->parts[k].start, z->L->parts[k].len);
        rc = z->overlap_param_gather ? tri_comm_all_gather_start(part_comm(z, k), whole, mine, &z->param_req[k])
                                     : tri_comm_all_gather(part_comm(z, k), whole, mine);
        z->started_param_gathers += z->overlap_param_gather;
    }
    return rc;
}

int tri_zero_sync(tri_zero *z)
{
    int rc = TRI_OK, r;
    for (int k = 0; k < z->L->n_parts; k++) {
        r = tri_comm_wait(&z->param_req[k]);
        rc = rc ? rc : r;
        r = tri_comm_wait(&z->grad_req[k]);
        rc = rc ? rc : r;
    }
    for (int i = 0; i < z->n_param_bufs; i++)
        if (z->param_bufs[i].prefetched) {
            r = drop_prefetch(&z->param_bufs[i]);
            rc = rc ? rc : r;
        }
    r = retire_until(z, UINT64_MAX);
    rc = rc ? rc : r;
    r = tri_dp_compress_drain(&z->comp);
    return rc ? rc : r;
}

/* ---- one parameter ---- */

int tri_zero_read_param(tri_zero *z, const tri_param *p, bool grads, float *host)
{
    /* whole on every dp rank: stage 0 gradients; stage 0-2 parameters (stage 0's fp32 master
     * weights with bf16, whose master weights are sharded from stage 1) */
    bool whole = grads || z->bf16 ? z->stage == 0 : z->stage < 3;
    int rc = tri_zero_sync(z);
    if (rc)
        return rc;
    if (whole) {
        tri_tensor src = grads ? tri_tensor_range(z->grads, p->offset, p->numel)
                               : tri_zero_owned_params(z, p->offset, p->numel);
        return tri_device_copy_to_host(z->dev, host, src);
    }
    /* sharded: each rank of p's group (dp; edp for an ep rank's own expert) contributes the pieces it
     * owns, the others are zero, summed over that group */
    tri_tensor buf = {0};
    rc = tri_device_alloc(z->dev, &buf.data, (size_t)p->numel * sizeof(float));
    buf = tri_tensor_1d(buf.data, TRI_F32, p->numel);
    if (!rc) rc = tri_op_fill(z->dev, buf, 0.0f);
    for (int k = 0; k < tri_zero_n_owned(z) && !rc; k++) {
        int64_t s, n, at;
        if (tri_zero_owned_piece(z, k, p, &s, &n, &at))
            rc = tri_op_copy(z->dev, tri_tensor_range(buf, s - p->offset, n),
                             grads ? tri_zero_owned_grads(z, s, n) : tri_zero_owned_params(z, s, n));
    }
    if (!rc) rc = tri_comm_all_reduce(p->spec.expert && z->edp ? z->edp : z->dp, buf, TRI_REDUCE_SUM);
    if (!rc) rc = tri_device_copy_to_host(z->dev, host, buf);
    tri_device_free(z->dev, buf.data);
    return rc;
}

/* bf16 at stages 0-2: the whole parameter's bf16 values (every rank holds them), rounded from host
 * through an fp32 device buffer. */
static int write_whole_bf16(tri_zero *z, const tri_param *p, const float *host)
{
    tri_tensor buf = {0};
    int rc = tri_device_alloc(z->dev, &buf.data, (size_t)p->numel * sizeof(float));
    if (rc)
        return rc;
    buf = tri_tensor_1d(buf.data, TRI_F32, p->numel);
    rc = tri_device_copy_from_host(z->dev, buf, host);
    if (!rc) rc = tri_op_convert(z->dev, tri_tensor_range(z->params, p->offset, p->numel), buf);
    tri_device_free(z->dev, buf.data);
    return rc;
}

int tri_zero_write_param(tri_zero *z, const tri_param *p, const float *host)
{
    int rc = tri_zero_sync(z);
    if (rc)
        return rc;
    if (z->stage < 3 && !z->bf16)
        return tri_device_copy_from_host(z->dev, tri_tensor_range(z->params, p->offset, p->numel), host);
    /* the owned pieces (the master weights with bf16; at stage 3 also rounded into the model's bf16
     * shard, which holds nothing else of the parameter) */
    for (int k = 0; k < tri_zero_n_owned(z) && !rc; k++) {
        int64_t s, n, at;
        if (!tri_zero_owned_piece(z, k, p, &s, &n, &at))
            continue;
        rc = tri_device_copy_from_host(z->dev, tri_zero_owned_params(z, s, n), host + (s - p->offset));
        if (!rc && z->bf16 && z->stage == 3)
            rc = tri_op_convert(z->dev, tri_zero_owned_model(z, s, n), tri_zero_owned_params(z, s, n));
    }
    if (!rc && z->bf16 && z->stage < 3)
        rc = write_whole_bf16(z, p, host);
    return rc;
}

/* ---- ownership ---- */

int tri_zero_n_owned(const tri_zero *z)
{
    return z->L->n_parts;
}

void tri_zero_owned(const tri_zero *z, int k, int64_t *start, int64_t *len, int64_t *local)
{
    const tri_param_part *u = &z->L->parts[k];
    if (z->stage == 0) {
        *start = *local = u->start;
        *len = u->len;
        return;
    }
    *start = owned_start(z, k);
    *len = slice_len(z, k);
    *local = z->slice_offset[k];
}

bool tri_zero_owned_piece(const tri_zero *z, int k, const tri_param *p, int64_t *s, int64_t *n, int64_t *at)
{
    int64_t start, len, local;
    tri_zero_owned(z, k, &start, &len, &local);
    int64_t lo = p->offset > start ? p->offset : start;
    int64_t hi = p->offset + p->numel < start + len ? p->offset + p->numel : start + len;
    *s = lo;
    *n = hi > lo ? hi - lo : 0;
    *at = local + (lo - start);
    return hi > lo;
}

int64_t tri_zero_owned_numel(const tri_zero *z)
{
    return z->stage == 0 ? z->L->padded_numel : z->L->shard_numel;
}

tri_tensor tri_zero_owned_params(const tri_zero *z, int64_t start, int64_t len)
{
    if (z->bf16)
        return tri_tensor_range(z->master, z->stage == 0 ? start : local_of(z, start), len);
    return tri_zero_owned_model(z, start, len);
}

tri_tensor tri_zero_owned_model(const tri_zero *z, int64_t start, int64_t len)
{
    if (z->stage < 3)
        return tri_tensor_range(z->params, start, len);
    return tri_tensor_range(z->param_shard, local_of(z, start), len);
}

bool tri_zero_update_zeroes_grads(const tri_zero *z)
{
    /* (stage 1 owns the whole stage only when neither dp nor the experts' group shards it) */
    return (z->stage != 1 || (z->L->dp == 1 && z->L->edp == 1)) && !z->comp.on;
}

int tri_zero_publish_owned(const tri_zero *z)
{
    int rc = TRI_OK;
    for (int k = 0; z->bf16 && k < tri_zero_n_owned(z) && !rc; k++) {
        int64_t start, len, local;
        tri_zero_owned(z, k, &start, &len, &local);
        rc = tri_op_convert(z->dev, tri_zero_owned_model(z, start, len), tri_zero_owned_params(z, start, len));
    }
    return rc;
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
