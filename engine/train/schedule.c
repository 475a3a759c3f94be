/* engine/train/schedule.c - names, printing and freeing of schedules (see schedule.h). */
#include "engine/train/schedule.h"

#include <stdlib.h>
#include <string.h>

const char *tri_sched_kind_name(int kind)
{
    static const char *names[TRI_SCHED_KINDS] = {"RECV_ACT", "FWD", "SEND_ACT", "RECV_GRAD",
                                                 "BWD", "SEND_GRAD", "BWD_INPUT", "BWD_WEIGHT"};
    return kind >= 0 && kind < TRI_SCHED_KINDS ? names[kind] : "?";
}

/* Short form: F3 (forward of micro-batch 3), B3, I3 / W3 (zero-bubble halves); chunk as F3.1. */
static void print_short(FILE *f, const tri_sched_op *op, int v)
{
    static const char letter[TRI_SCHED_KINDS] = {'r', 'F', 's', 'r', 'B', 's', 'I', 'W'};
    if (tri_sched_is_comm(op->kind))
        return;
    if (v > 1)
        fprintf(f, " %c%d.%d", letter[op->kind], op->mb, op->chunk);
    else
        fprintf(f, " %c%d", letter[op->kind], op->mb);
}

void tri_schedule_print(FILE *f, const tri_schedule *s, int verbose)
{
    fprintf(f, "schedule %s: pp %d, %d chunk%s per rank, %d micro-batches\n", s->name, s->pp, s->v,
            s->v == 1 ? "" : "s", s->m);
    for (int r = 0; r < s->pp; r++) {
        fprintf(f, "rank %d:", r);
        for (int i = 0; i < s->n_ops[r]; i++) {
            const tri_sched_op *op = &s->ops[r][i];
            if (verbose)
                fprintf(f, " %s(%d,%d)", tri_sched_kind_name(op->kind), op->mb, op->chunk);
            else
                print_short(f, op, s->v);
        }
        fprintf(f, "\n");
    }
}

void tri_schedule_free(tri_schedule *s)
{
    for (int r = 0; s->ops && r < s->pp; r++)
        free(s->ops[r]);
    free(s->ops);
    free(s->n_ops);
    s->ops = NULL;
    s->n_ops = NULL;
}

int tri_sched_peer(const tri_schedule *s, int rank, const tri_sched_op *op)
{
    int gc = tri_sched_global_chunk(s, rank, op->chunk), chunks = s->pp * s->v;
    int other;
    switch (op->kind) {
    case TRI_SCHED_RECV_ACT:
    case TRI_SCHED_SEND_GRAD:
        other = gc - 1;
        break;
    case TRI_SCHED_SEND_ACT:
    case TRI_SCHED_RECV_GRAD:
        other = gc + 1;
        break;
    default:
        return -1;
    }
    return other < 0 || other >= chunks ? -1 : other % s->pp;
}

int tri_sched_batch_end(const tri_sched_op *ops, int n, int i)
{
    if (i >= n || !tri_sched_is_comm(ops[i].kind))
        return i + 1;
    while (i < n && tri_sched_is_comm(ops[i].kind))
        i++;
    return i;
}

void tri_sched_last_uses(const tri_schedule *s, int rank, unsigned char *last_use)
{
    int n = s->n_ops[rank];
    const tri_sched_op *ops = s->ops[rank];
    unsigned char *seen = calloc((size_t)s->v * (size_t)s->m, 1);
    memset(last_use, 0, (size_t)n);
    for (int i = n - 1; i >= 0 && seen; i--) {
        size_t key = (size_t)ops[i].chunk * (size_t)s->m + (size_t)ops[i].mb;
        last_use[i] = !seen[key];
        seen[key] = 1;
    }
    free(seen);
}

int tri_sched_slots_needed(const tri_schedule *s, int rank, int chunk)
{
    int n = s->n_ops[rank], alive = 0, peak = 0;
    const tri_sched_op *ops = s->ops[rank];
    unsigned char *last = malloc((size_t)(n > 0 ? n : 1));
    unsigned char *open = calloc((size_t)s->m, 1);
    if (!last || !open) {
        free(last);
        free(open);
        return s->m; /* out of memory: the safe upper bound */
    }
    tri_sched_last_uses(s, rank, last);
    /* in the executor's order: a batch takes all its slots, then releases its last uses */
    for (int i = 0; i < n;) {
        int end = tri_sched_batch_end(ops, n, i);
        for (int j = i; j < end; j++)
            if (ops[j].chunk == chunk && !open[ops[j].mb]) {
                open[ops[j].mb] = 1;
                alive++;
                peak = alive > peak ? alive : peak;
            }
        for (int j = i; j < end; j++)
            if (ops[j].chunk == chunk && last[j]) {
                open[ops[j].mb] = 0;
                alive--;
            }
        i = end;
    }
    free(last);
    free(open);
    return peak;
}
