/* partitioner/pipeline_schedules.c - GPipe, 1F1B, interleaved 1F1B and ZB-H1 as op lists (see schedule.h). */
#include "partitioner/pipeline_schedules.h"

#include <limits.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine/core/status.h"

/* Ops one (micro-batch, chunk) can take on a rank: RECV_ACT FWD SEND_ACT RECV_GRAD BWD_INPUT
 * SEND_GRAD BWD_WEIGHT. */
#define OPS_PER_MB_CHUNK 7

static int check_sizes(const char *name, int pp, int v, int m)
{
    if (pp < 1)
        return TRI_ERR(TRI_EINVAL, "%s schedule: --pipeline-model-parallel-size %d must be >= 1", name, pp);
    if (v < 1 || v > TRI_SCHED_MAX_CHUNKS)
        return TRI_ERR(TRI_EINVAL, "%s schedule: %d model chunks per rank; must be 1..%d", name, v,
                       TRI_SCHED_MAX_CHUNKS);
    if (m < 1)
        return TRI_ERR(TRI_EINVAL, "%s schedule: %d micro-batches; must be >= 1", name, m);
    if (m > INT_MAX / OPS_PER_MB_CHUNK / v)
        return TRI_ERR(TRI_EINVAL, "%s schedule: %d micro-batches x %d chunks is too many ops for one "
                       "rank", name, m, v);
    return TRI_OK;
}

/* Sets up an empty schedule with room for every op a rank can get. */
static int start(tri_schedule *s, const char *name, int pp, int v, int m)
{
    memset(s, 0, sizeof *s);
    int rc = check_sizes(name, pp, v, m);
    if (rc)
        return rc;
    snprintf(s->name, sizeof s->name, "%s", name);
    s->pp = pp;
    s->v = v;
    s->m = m;
    size_t ranks = (size_t)(pp > 0 ? pp : 1), cap = (size_t)OPS_PER_MB_CHUNK * (size_t)v * (size_t)m;
    s->n_ops = calloc(ranks, sizeof *s->n_ops);
    s->ops = calloc(ranks, sizeof *s->ops);
    for (int r = 0; s->ops && r < pp; r++)
        if (!(s->ops[r] = malloc(cap * sizeof **s->ops)))
            break;
    if (!s->n_ops || !s->ops || !s->ops[pp - 1]) {
        tri_schedule_free(s);
        return TRI_ERR(TRI_ENOMEM, "%s schedule: out of memory for pp %d, v %d, m %d", name, pp, v, m);
    }
    return TRI_OK;
}

static void emit(tri_schedule *s, int r, int kind, int chunk, int mb)
{
    s->ops[r][s->n_ops[r]++] = (tri_sched_op){.kind = (int8_t)kind, .chunk = (int8_t)chunk, .mb = mb};
}

static bool first_chunk(const tri_schedule *s, int r, int chunk)
{
    return tri_sched_global_chunk(s, r, chunk) == 0;
}

static bool last_chunk(const tri_schedule *s, int r, int chunk)
{
    return tri_sched_global_chunk(s, r, chunk) == s->pp * s->v - 1;
}

/* RECV_ACT, FWD, SEND_ACT of (mb, chunk) on rank r. */
static void emit_forward(tri_schedule *s, int r, int chunk, int mb)
{
    if (!first_chunk(s, r, chunk))
        emit(s, r, TRI_SCHED_RECV_ACT, chunk, mb);
    emit(s, r, TRI_SCHED_FWD, chunk, mb);
    if (!last_chunk(s, r, chunk))
        emit(s, r, TRI_SCHED_SEND_ACT, chunk, mb);
}

/* RECV_GRAD, `kind` (BWD or BWD_INPUT), SEND_GRAD of (mb, chunk) on rank r. */
static void emit_backward(tri_schedule *s, int r, int chunk, int mb, int kind)
{
    if (!last_chunk(s, r, chunk))
        emit(s, r, TRI_SCHED_RECV_GRAD, chunk, mb);
    emit(s, r, kind, chunk, mb);
    if (!first_chunk(s, r, chunk))
        emit(s, r, TRI_SCHED_SEND_GRAD, chunk, mb);
}

static int min_int(int a, int b)
{
    return a < b ? a : b;
}

int tri_schedule_gpipe(tri_schedule *out, int pp, int m)
{
    int rc = start(out, "gpipe", pp, 1, m);
    for (int r = 0; r < pp && !rc; r++) {
        for (int mb = 0; mb < m; mb++)
            emit_forward(out, r, 0, mb);
        for (int mb = 0; mb < m; mb++)
            emit_backward(out, r, 0, mb, TRI_SCHED_BWD);
    }
    return rc;
}

int tri_schedule_1f1b(tri_schedule *out, int pp, int m)
{
    int rc = start(out, "1f1b", pp, 1, m);
    for (int r = 0; r < pp && !rc; r++) {
        int warm = min_int(pp - r - 1, m);
        for (int i = 0; i < warm; i++)
            emit_forward(out, r, 0, i);
        for (int i = 0; i < m - warm; i++) {
            emit_forward(out, r, 0, warm + i);
            emit_backward(out, r, 0, i, TRI_SCHED_BWD);
        }
        for (int i = m - warm; i < m; i++)
            emit_backward(out, r, 0, i, TRI_SCHED_BWD);
    }
    return rc;
}

/* Megatron-LM's order of virtual micro-batches: groups of pp micro-batches run through the v
 * chunks in turn (forward: chunk 0 first; backward: chunk v-1 first). */
static int virtual_chunk(int k, int pp, int v, bool forward)
{
    int c = (k / pp) % v;
    return forward ? c : v - 1 - c;
}

static int virtual_mb(int k, int pp, int v)
{
    return (k / (pp * v)) * pp + k % pp;
}

/* One step of the interleaved schedule on a rank: the virtual forward and backward it computes
 * (-1: none). */
typedef struct vstep {
    int f, b;
} vstep;

static vstep interleaved_step(int step, int warm, int total)
{
    if (step < warm)
        return (vstep){step, -1};
    if (step < total)
        return (vstep){step, step - warm};
    return (vstep){-1, step - warm};
}

/* The receives rank r needs before computing step x (Megatron posts them one step ahead, in the
 * exchange that sends the previous step's results). */
static void emit_step_recvs(tri_schedule *s, int r, vstep x)
{
    int pp = s->pp, v = s->v;
    if (x.f >= 0 && !first_chunk(s, r, virtual_chunk(x.f, pp, v, true)))
        emit(s, r, TRI_SCHED_RECV_ACT, virtual_chunk(x.f, pp, v, true), virtual_mb(x.f, pp, v));
    if (x.b >= 0 && !last_chunk(s, r, virtual_chunk(x.b, pp, v, false)))
        emit(s, r, TRI_SCHED_RECV_GRAD, virtual_chunk(x.b, pp, v, false), virtual_mb(x.b, pp, v));
}

/* Step x's computes, then one exchange: its results out, the next step's inputs in. */
static void emit_step(tri_schedule *s, int r, vstep x, vstep next)
{
    int pp = s->pp, v = s->v;
    int fc = x.f >= 0 ? virtual_chunk(x.f, pp, v, true) : 0;
    int bc = x.b >= 0 ? virtual_chunk(x.b, pp, v, false) : 0;
    if (x.f >= 0)
        emit(s, r, TRI_SCHED_FWD, fc, virtual_mb(x.f, pp, v));
    if (x.b >= 0)
        emit(s, r, TRI_SCHED_BWD, bc, virtual_mb(x.b, pp, v));
    if (x.f >= 0 && !last_chunk(s, r, fc))
        emit(s, r, TRI_SCHED_SEND_ACT, fc, virtual_mb(x.f, pp, v));
    if (x.b >= 0 && !first_chunk(s, r, bc))
        emit(s, r, TRI_SCHED_SEND_GRAD, bc, virtual_mb(x.b, pp, v));
    emit_step_recvs(s, r, next);
}

int tri_schedule_interleaved(tri_schedule *out, int pp, int v, int m)
{
    int rc = start(out, "interleaved", pp, v, m);
    if (rc)
        return rc;
    if (m % pp != 0) {
        tri_schedule_free(out);
        return TRI_ERR(TRI_EINVAL, "interleaved schedule: micro-batches %d is not a multiple of "
                       "--pipeline-model-parallel-size %d", m, pp);
    }
    if (v > 1 && pp == 1) {
        tri_schedule_free(out);
        return TRI_ERR(TRI_EINVAL, "interleaved schedule: %d model chunks per rank need "
                       "--pipeline-model-parallel-size > 1 (with 1 rank every chunk would send to "
                       "itself)", v);
    }
    int total = m * v;
    for (int r = 0; r < pp; r++) {
        int warm = min_int(2 * (pp - r - 1) + (v - 1) * pp, total), steps = total + warm;
        emit_step_recvs(out, r, interleaved_step(0, warm, total));
        for (int k = 0; k < steps; k++)
            emit_step(out, r, interleaved_step(k, warm, total),
                      k + 1 < steps ? interleaved_step(k + 1, warm, total) : (vstep){-1, -1});
    }
    return TRI_OK;
}

/* Weight gradients queued on a ZB-H1 rank: micro-batches next..done-1 wait for BWD_WEIGHT. */
typedef struct wqueue {
    int next, done;
} wqueue;

/* Runs the oldest queued weight gradients until at most `keep` wait. */
static void emit_weights(tri_schedule *s, int r, wqueue *q, int keep)
{
    while (q->done - q->next > keep)
        emit(s, r, TRI_SCHED_BWD_WEIGHT, 0, q->next++);
}

/* ZB-H1 backward of micro-batch mb on rank r, keeping up to `defer` weight gradients queued. While
 * the previous rank is in its steady state, the due weight gradient runs before the input gradient
 * is sent: that rank is busy with a forward and posts the matching receive only after it, so
 * sending later loses nothing and this rank computes instead of waiting in the rendezvous. When
 * the previous rank is in its cool-down it waits for the gradient, so the send goes first and the
 * weight gradient fills this rank's wait for its next gradient. */
static void zb_backward(tri_schedule *s, int r, int mb, wqueue *q, int defer, bool steady)
{
    if (!last_chunk(s, r, 0))
        emit(s, r, TRI_SCHED_RECV_GRAD, 0, mb);
    emit(s, r, TRI_SCHED_BWD_INPUT, 0, mb);
    q->done = mb + 1;
    if (steady)
        emit_weights(s, r, q, defer);
    if (!first_chunk(s, r, 0))
        emit(s, r, TRI_SCHED_SEND_GRAD, 0, mb);
    if (!steady)
        emit_weights(s, r, q, defer);
}

int tri_schedule_zb_h1(tri_schedule *out, int pp, int m)
{
    int rc = start(out, "zb-h1", pp, 1, m);
    for (int r = 0; r < pp && !rc; r++) {
        int warm = min_int(pp - r - 1, m);
        wqueue q = {0, 0};
        for (int i = 0; i < warm; i++)
            emit_forward(out, r, 0, i);
        int prev_steady = r > 0 ? m - min_int(pp - r, m) : 0;  /* steady backwards of rank r-1 */
        for (int i = 0; i < m - warm; i++) {
            emit_forward(out, r, 0, warm + i);
            zb_backward(out, r, i, &q, r, i < prev_steady);
        }
        for (int i = m - warm; i < m; i++)
            zb_backward(out, r, i, &q, r, false);
        emit_weights(out, r, &q, 0);
    }
    return rc;
}

int tri_schedule_make(tri_schedule *out, const char *name, int pp, int v, int m)
{
    memset(out, 0, sizeof *out);
    if (strcmp(name, "interleaved") == 0)
        return tri_schedule_interleaved(out, pp, v, m);
    bool known = strcmp(name, "gpipe") == 0 || strcmp(name, "1f1b") == 0 || strcmp(name, "zb-h1") == 0;
    if (!known)
        return TRI_ERR(TRI_EINVAL, "unknown pipeline schedule '%s' (gpipe, 1f1b, interleaved, zb-h1)", name);
    if (v != 1)
        return TRI_ERR(TRI_EINVAL, "pipeline schedule %s runs one model chunk per rank, not %d "
                       "(use interleaved with --num-layers-per-virtual-pipeline-stage)", name, v);
    if (strcmp(name, "gpipe") == 0)
        return tri_schedule_gpipe(out, pp, m);
    if (strcmp(name, "1f1b") == 0)
        return tri_schedule_1f1b(out, pp, m);
    return tri_schedule_zb_h1(out, pp, m);
}
