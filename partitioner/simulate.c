/* partitioner/simulate.c - the schedule simulator (see simulate.h).
 *
 * Event-driven and linear in the number of ops: a stack holds the ranks that can go on; a rank runs
 * until it has posted a comm batch that cannot complete yet. Posting an op appends it to its
 * channel's send or receive list; when the other list already holds the op's partner (same index
 * k on that channel), the two are matched, their times set, and the partner's rank, if its batch
 * is now complete, is pushed. When the stack empties, any rank not at its end is deadlocked. */
#include "partitioner/simulate.h"

#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine/core/status.h"

/* What has happened to one (chunk, micro-batch) on its rank. */
enum {
    DONE_RECV_ACT = 1,
    DONE_FWD = 2,
    DONE_SEND_ACT = 4,
    DONE_RECV_GRAD = 8,
    DONE_BWD_INPUT = 16,   /* input gradient: BWD or BWD_INPUT */
    DONE_SEND_GRAD = 32,
    DONE_BWD_WEIGHT = 64,  /* weight gradient: BWD or BWD_WEIGHT */
    SPLIT_BWD = 128,       /* the backward was split (BWD_INPUT ran) */
};

typedef struct op_ref {
    int rank, op;
} op_ref;

/* Messages from one rank to a neighbour with one tag, in posting order. */
typedef struct channel {
    int n_send, n_recv;     /* posted so far */
    op_ref *sends, *recvs;  /* room for every send / receive of the schedule on this channel */
} channel;

typedef struct rank_state {
    int pc;                 /* next op, or the first op of the posted batch */
    int batch_end;          /* end of the posted batch, -1 when none */
    int pending;            /* messages of the posted batch not yet arrived */
    double time;            /* when the rank is free (or posted its batch) */
    double batch_done;      /* latest arrival in the posted batch */
    int in_flight;
    int *in_flight_chunk;   /* [v] */
    unsigned char *done;    /* [v * m] DONE_* flags of (chunk, mb) */
    int slots;              /* activation slots held, over all chunks */
    int *slots_chunk;       /* [v] */
    unsigned char *held;    /* [v * m] (chunk, mb) holds a slot */
    unsigned char *last_use;/* [n_ops]: the op is the last of its (chunk, mb) on this rank */
} rank_state;

typedef struct sim {
    const tri_schedule *s;
    const tri_sim_costs *c;
    tri_sim_result *out;
    rank_state *ranks;
    channel *chans;         /* [pp * 4]: sender, direction (next / previous rank), tag */
    op_ref *pool;
    int *stack, n_stack;
    int current;            /* the rank being advanced */
    bool training;          /* the schedule has backward ops */
} sim;

const char *tri_sim_verdict_name(tri_sim_verdict v)
{
    static const char *names[] = {"ok", "deadlock", "order", "invalid"};
    return v >= TRI_SIM_OK && v <= TRI_SIM_INVALID ? names[v] : "?";
}

/* "SEND_ACT(mb 2, chunk 0)" */
static const char *op_str(char *buf, size_t cap, const tri_sched_op *op)
{
    snprintf(buf, cap, "%s(mb %d, chunk %d)", tri_sched_kind_name(op->kind), op->mb, op->chunk);
    return buf;
}

static const tri_sched_op *op_at(const sim *S, op_ref x)
{
    return &S->s->ops[x.rank][x.op];
}

static bool is_send(int kind)
{
    return kind == TRI_SCHED_SEND_ACT || kind == TRI_SCHED_SEND_GRAD;
}

static bool is_backward(int kind)
{
    return kind == TRI_SCHED_BWD || kind == TRI_SCHED_BWD_INPUT || kind == TRI_SCHED_BWD_WEIGHT;
}

/* The channel a comm op of rank r travels on. Peers are always neighbours on the ring of ranks. */
static channel *channel_of(const sim *S, int r, const tri_sched_op *op)
{
    int pp = S->s->pp, peer = tri_sched_peer(S->s, r, op);
    int sender = is_send(op->kind) ? r : peer, receiver = is_send(op->kind) ? peer : r;
    int dir = receiver == (sender + 1) % pp ? 0 : 1, tag = S->c->untagged ? 1 : tri_sched_tag(op->kind);
    return &S->chans[(sender * 2 + dir) * 2 + tag - 1];
}

/* Records why the schedule cannot run; msg is the whole message. */
static int fail(sim *S, tri_sim_verdict v, const char *msg)
{
    S->out->verdict = v;
    return TRI_ERR(TRI_EINVAL, "%s", msg);
}

/* Ops in range, comm ops with a peer: checked for all ranks before anything runs. */
static int check_ops(sim *S)
{
    const tri_schedule *s = S->s;
    char a[96], msg[512];
    for (int r = 0; r < s->pp; r++)
        for (int i = 0; i < s->n_ops[r]; i++) {
            const tri_sched_op *op = &s->ops[r][i];
            const char *why = NULL;
            if (op->kind < 0 || op->kind >= TRI_SCHED_KINDS)
                why = "unknown op kind";
            else if (op->chunk < 0 || op->chunk >= s->v)
                why = "chunk out of range";
            else if (op->mb < 0 || op->mb >= s->m)
                why = "micro-batch out of range";
            else if (tri_sched_is_comm(op->kind) && tri_sched_peer(s, r, op) < 0)
                why = op->kind == TRI_SCHED_RECV_ACT || op->kind == TRI_SCHED_SEND_GRAD
                          ? "the first model chunk has no previous chunk"
                          : "the last model chunk has no next chunk";
            if (op->kind >= 0 && op->kind < TRI_SCHED_KINDS && is_backward(op->kind))
                S->training = true;
            if (!why)
                continue;
            snprintf(msg, sizeof msg, "invalid schedule: rank %d op %d %s: %s (pp %d, v %d, m %d)", r,
                     i, op_str(a, sizeof a, op), why, s->pp, s->v, s->m);
            return fail(S, TRI_SIM_INVALID, msg);
        }
    return TRI_OK;
}

/* Marks each rank's last op of every (chunk, mb) (the held flags serve as scratch). */
static void mark_last_uses(sim *S)
{
    const tri_schedule *s = S->s;
    for (int r = 0; r < s->pp; r++) {
        rank_state *R = &S->ranks[r];
        for (int i = s->n_ops[r] - 1; i >= 0; i--) {
            unsigned char *seen = &R->held[s->ops[r][i].chunk * s->m + s->ops[r][i].mb];
            R->last_use[i] = !*seen;
            *seen = 1;
        }
        memset(R->held, 0, (size_t)s->v * (size_t)s->m);
    }
}

/* Sizes every channel's lists from the schedule's sends and receives. */
static int make_channels(sim *S)
{
    const tri_schedule *s = S->s;
    size_t n_chan = (size_t)s->pp * 4, total = 0;
    int *n_send = calloc(n_chan, sizeof *n_send), *n_recv = calloc(n_chan, sizeof *n_recv);
    S->chans = calloc(n_chan, sizeof *S->chans);
    if (!n_send || !n_recv || !S->chans) {
        free(n_send);
        free(n_recv);
        return TRI_ERR(TRI_ENOMEM, "schedule simulator: out of memory");
    }
    for (int r = 0; r < s->pp; r++)
        for (int i = 0; i < s->n_ops[r]; i++) {
            const tri_sched_op *op = &s->ops[r][i];
            if (!tri_sched_is_comm(op->kind))
                continue;
            size_t ch = (size_t)(channel_of(S, r, op) - S->chans);
            (is_send(op->kind) ? n_send : n_recv)[ch]++;
            total++;
        }
    S->pool = malloc((total ? total : 1) * sizeof *S->pool);
    op_ref *p = S->pool;
    for (size_t ch = 0; ch < n_chan && S->pool; ch++) {
        S->chans[ch].sends = p;
        p += n_send[ch];
        S->chans[ch].recvs = p;
        p += n_recv[ch];
    }
    free(n_send);
    free(n_recv);
    return S->pool ? TRI_OK : TRI_ERR(TRI_ENOMEM, "schedule simulator: out of memory");
}

/* Why op cannot run given what its (chunk, mb) has done (DONE_* flags d), or NULL. */
static const char *missing_input(const tri_sched_op *op, unsigned d, bool first, bool last)
{
    switch (op->kind) {
    case TRI_SCHED_RECV_ACT:
        return d & DONE_RECV_ACT ? "received twice" : NULL;
    case TRI_SCHED_FWD:
        if (d & DONE_FWD)
            return "forward run twice";
        return !first && !(d & DONE_RECV_ACT) ? "forward before its input activation is received" : NULL;
    case TRI_SCHED_SEND_ACT:
        if (d & DONE_SEND_ACT)
            return "sent twice";
        return !(d & DONE_FWD) ? "activation sent before its forward" : NULL;
    case TRI_SCHED_RECV_GRAD:
        return d & DONE_RECV_GRAD ? "received twice" : NULL;
    case TRI_SCHED_BWD:
    case TRI_SCHED_BWD_INPUT:
        if (d & DONE_BWD_INPUT)
            return "backward run twice";
        if (!(d & DONE_FWD))
            return "backward before its forward";
        return !last && !(d & DONE_RECV_GRAD) ? "backward before its output gradient is received" : NULL;
    case TRI_SCHED_SEND_GRAD:
        if (d & DONE_SEND_GRAD)
            return "sent twice";
        return !(d & DONE_BWD_INPUT) ? "gradient sent before its backward" : NULL;
    default: /* TRI_SCHED_BWD_WEIGHT */
        if (d & DONE_BWD_WEIGHT)
            return "weight gradient run twice";
        return !(d & SPLIT_BWD) ? "weight gradient before its BWD_INPUT" : NULL;
    }
}

/* The DONE_* flags an op sets. */
static unsigned done_by(int kind)
{
    static const unsigned flags[TRI_SCHED_KINDS] = {
        [TRI_SCHED_RECV_ACT] = DONE_RECV_ACT, [TRI_SCHED_FWD] = DONE_FWD,
        [TRI_SCHED_SEND_ACT] = DONE_SEND_ACT, [TRI_SCHED_RECV_GRAD] = DONE_RECV_GRAD,
        [TRI_SCHED_BWD] = DONE_BWD_INPUT | DONE_BWD_WEIGHT, [TRI_SCHED_SEND_GRAD] = DONE_SEND_GRAD,
        [TRI_SCHED_BWD_INPUT] = DONE_BWD_INPUT | SPLIT_BWD, [TRI_SCHED_BWD_WEIGHT] = DONE_BWD_WEIGHT,
    };
    return flags[kind];
}

static void raise_peak(int *peak, int now)
{
    *peak = now > *peak ? now : *peak;
}

/* The executor's activation slots: a (chunk, mb) takes one at its first op on the rank and gives it
 * back after its last; the ops of a comm batch all hold theirs until the batch completes. */
static void take_slot(sim *S, int r, const tri_sched_op *op)
{
    rank_state *R = &S->ranks[r];
    unsigned char *h = &R->held[op->chunk * S->s->m + op->mb];
    if (*h)
        return;
    *h = 1;
    R->slots++;
    R->slots_chunk[op->chunk]++;
    raise_peak(&S->out->peak_slots[r], R->slots);
    raise_peak(&S->out->peak_slots_chunk[r * S->s->v + op->chunk], R->slots_chunk[op->chunk]);
}

static void give_slot(sim *S, int r, int i)
{
    rank_state *R = &S->ranks[r];
    const tri_sched_op *op = &S->s->ops[r][i];
    if (!R->last_use[i])
        return;
    R->held[op->chunk * S->s->m + op->mb] = 0;
    R->slots--;
    R->slots_chunk[op->chunk]--;
}

/* Checks that op i of rank r finds its inputs and runs once, records it and counts the
 * micro-batches in flight (a forward opens one, the backward's weight part closes it). */
static int apply(sim *S, int r, int i)
{
    const tri_schedule *s = S->s;
    const tri_sched_op *op = &s->ops[r][i];
    rank_state *R = &S->ranks[r];
    unsigned char *d = &R->done[op->chunk * s->m + op->mb];
    int gc = tri_sched_global_chunk(s, r, op->chunk);
    const char *why = missing_input(op, *d, gc == 0, gc == s->pp * s->v - 1);
    if (why) {
        char a[96], msg[320];
        snprintf(msg, sizeof msg, "invalid schedule: rank %d op %d %s: %s", r, i, op_str(a, sizeof a, op),
                 why);
        return fail(S, TRI_SIM_INVALID, msg);
    }
    unsigned set = done_by(op->kind);
    *d |= (unsigned char)set;
    int delta = op->kind == TRI_SCHED_FWD ? 1 : set & DONE_BWD_WEIGHT ? -1 : 0;
    R->in_flight += delta;
    R->in_flight_chunk[op->chunk] += delta;
    raise_peak(&S->out->peak_in_flight[r], R->in_flight);
    raise_peak(&S->out->peak_in_flight_chunk[r * s->v + op->chunk], R->in_flight_chunk[op->chunk]);
    take_slot(S, r, op);
    return TRI_OK;
}

static double compute_cost(const sim *S, int r, const tri_sched_op *op)
{
    const tri_sim_costs *c = S->c;
    double t = op->kind == TRI_SCHED_FWD ? c->fwd
               : op->kind == TRI_SCHED_BWD ? c->bwd
               : op->kind == TRI_SCHED_BWD_INPUT ? c->bwd_input : c->bwd_weight;
    return c->chunk_scale ? t * c->chunk_scale[tri_sched_global_chunk(S->s, r, op->chunk)] : t;
}

/* One message of a batch has arrived at time t for rank r. */
static void arrived(sim *S, int r, double t)
{
    rank_state *R = &S->ranks[r];
    R->batch_done = t > R->batch_done ? t : R->batch_done;
    if (--R->pending == 0 && r != S->current)
        S->stack[S->n_stack++] = r;
}

/* The k-th send and the k-th receive of a channel meet. */
static int match(sim *S, op_ref snd, op_ref rcv)
{
    const tri_sched_op *a = op_at(S, snd), *b = op_at(S, rcv);
    int ga = tri_sched_global_chunk(S->s, snd.rank, a->chunk);
    int gb = tri_sched_global_chunk(S->s, rcv.rank, b->chunk);
    int want = a->kind == TRI_SCHED_SEND_ACT ? ga + 1 : ga - 1;
    bool same_kind = (a->kind == TRI_SCHED_SEND_ACT) == (b->kind == TRI_SCHED_RECV_ACT);
    if (!same_kind || a->mb != b->mb || gb != want) {
        char x[96], y[96], msg[512];
        snprintf(msg, sizeof msg, "order error: rank %d op %d %s (global chunk %d) is received by "
                 "rank %d op %d %s (global chunk %d), which expects micro-batch %d of global chunk %d",
                 snd.rank, snd.op, op_str(x, sizeof x, a), ga, rcv.rank, rcv.op, op_str(y, sizeof y, b),
                 gb, b->mb, b->kind == TRI_SCHED_RECV_ACT ? gb - 1 : gb + 1);
        return fail(S, TRI_SIM_ORDER, msg);
    }
    double *start_a = &S->out->start[snd.rank][snd.op], *start_b = &S->out->start[rcv.rank][rcv.op];
    double t = (*start_a > *start_b ? *start_a : *start_b) + S->c->comm;
    S->out->end[snd.rank][snd.op] = S->out->end[rcv.rank][rcv.op] = t;
    arrived(S, snd.rank, t);
    arrived(S, rcv.rank, t);
    return TRI_OK;
}

/* Posts comm op i of rank r on its channel and matches it if its partner is already there. */
static int post(sim *S, int r, int i)
{
    const tri_sched_op *op = &S->s->ops[r][i];
    channel *ch = channel_of(S, r, op);
    op_ref me = {r, i};
    if (is_send(op->kind)) {
        int k = ch->n_send++;
        ch->sends[k] = me;
        return k < ch->n_recv ? match(S, me, ch->recvs[k]) : TRI_OK;
    }
    int k = ch->n_recv++;
    ch->recvs[k] = me;
    return k < ch->n_send ? match(S, ch->sends[k], me) : TRI_OK;
}

/* Runs rank r until it waits on a batch or ends. */
static int advance(sim *S, int r)
{
    const tri_sched_op *ops = S->s->ops[r];
    int n = S->s->n_ops[r], rc = TRI_OK;
    rank_state *R = &S->ranks[r];
    S->current = r;
    while (!rc) {
        if (R->batch_end >= 0) {          /* a posted batch */
            if (R->pending > 0)
                return TRI_OK;
            for (int j = R->pc; j < R->batch_end; j++)
                give_slot(S, r, j);
            R->time = R->batch_done;
            R->pc = R->batch_end;
            R->batch_end = -1;
        }
        if (R->pc >= n)
            return TRI_OK;
        int i = R->pc;
        if (!tri_sched_is_comm(ops[i].kind)) {
            rc = apply(S, r, i);
            double t = compute_cost(S, r, &ops[i]);
            S->out->start[r][i] = R->time;
            S->out->end[r][i] = R->time += t;
            S->out->busy[r] += t;
            if (!rc)
                give_slot(S, r, i);
            R->pc++;
            continue;
        }
        R->batch_end = tri_sched_batch_end(ops, n, i);
        R->pending = R->batch_end - i;
        R->batch_done = R->time;
        for (int j = i; j < R->batch_end && !rc; j++) {
            rc = apply(S, r, j);
            S->out->start[r][j] = R->time;
            if (!rc)
                rc = post(S, r, j);
        }
    }
    return rc;
}

/* Appends to msg (capacity cap, *len used), silently truncating. */
static void append(char *msg, size_t cap, size_t *len, const char *fmt, ...) TRI_PRINTF(4, 5);
static void append(char *msg, size_t cap, size_t *len, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    int n = *len < cap ? vsnprintf(msg + *len, cap - *len, fmt, ap) : 0;
    va_end(ap);
    *len += n > 0 ? (size_t)n : 0;
    *len = *len < cap ? *len : cap;
}

/* Names the blocked ranks (the first 8) and the ops of their batches still waiting. */
static int report_deadlock(sim *S)
{
    const tri_schedule *s = S->s;
    char msg[1600] = "", a[96];
    size_t len = 0;
    int blocked = 0;
    append(msg, sizeof msg, &len, "deadlock:");
    for (int r = 0; r < s->pp; r++) {
        rank_state *R = &S->ranks[r];
        if (R->pc >= s->n_ops[r] || blocked++ >= 8)
            continue;
        append(msg, sizeof msg, &len, "%s rank %d waits at", blocked > 1 ? ";" : "", r);
        for (int j = R->pc, k = 0; j < R->batch_end; j++) {
            const tri_sched_op *op = &s->ops[r][j];
            if (S->out->end[r][j] < 0)
                append(msg, sizeof msg, &len, "%s op %d %s %s rank %d", k++ ? "," : "", j,
                       op_str(a, sizeof a, op), is_send(op->kind) ? "->" : "<-", tri_sched_peer(s, r, op));
        }
    }
    append(msg, sizeof msg, &len, " (%d rank%s blocked)", blocked, blocked == 1 ? "" : "s");
    return fail(S, TRI_SIM_DEADLOCK, msg);
}

/* Every (micro-batch, chunk) of every rank had its forward and backward and their messages. */
static int check_complete(sim *S)
{
    const tri_schedule *s = S->s;
    for (int r = 0; r < s->pp; r++)
        for (int c = 0; c < s->v; c++)
            for (int mb = 0; mb < s->m; mb++) {
                int gc = tri_sched_global_chunk(s, r, c);
                bool first = gc == 0, last = gc == s->pp * s->v - 1;
                unsigned char d = S->ranks[r].done[c * s->m + mb];
                int need = DONE_FWD | (first ? 0 : DONE_RECV_ACT) | (last ? 0 : DONE_SEND_ACT);
                if (S->training)
                    need |= DONE_BWD_INPUT | DONE_BWD_WEIGHT | (last ? 0 : DONE_RECV_GRAD) |
                            (first ? 0 : DONE_SEND_GRAD);
                int missing = need & ~d;
                if (!missing)
                    continue;
                int kind = missing & DONE_RECV_ACT ? TRI_SCHED_RECV_ACT
                           : missing & DONE_FWD ? TRI_SCHED_FWD
                           : missing & DONE_SEND_ACT ? TRI_SCHED_SEND_ACT
                           : missing & DONE_RECV_GRAD ? TRI_SCHED_RECV_GRAD
                           : missing & DONE_BWD_INPUT ? TRI_SCHED_BWD
                           : missing & DONE_SEND_GRAD ? TRI_SCHED_SEND_GRAD : TRI_SCHED_BWD_WEIGHT;
                char msg[160];
                snprintf(msg, sizeof msg, "invalid schedule: rank %d never runs %s of micro-batch %d, "
                         "chunk %d", r, tri_sched_kind_name(kind), mb, c);
                return fail(S, TRI_SIM_INVALID, msg);
            }
    return TRI_OK;
}

static int alloc_result(tri_sim_result *o, const tri_schedule *s)
{
    memset(o, 0, sizeof *o);
    o->pp = s->pp;
    o->v = s->v;
    size_t pp = (size_t)s->pp;
    o->peak_in_flight = calloc(pp, sizeof *o->peak_in_flight);
    o->peak_in_flight_chunk = calloc(pp * (size_t)s->v, sizeof *o->peak_in_flight_chunk);
    o->peak_slots = calloc(pp, sizeof *o->peak_slots);
    o->peak_slots_chunk = calloc(pp * (size_t)s->v, sizeof *o->peak_slots_chunk);
    o->busy = calloc(pp, sizeof *o->busy);
    o->idle = calloc(pp, sizeof *o->idle);
    o->start = calloc(pp, sizeof *o->start);
    o->end = calloc(pp, sizeof *o->end);
    if (!o->peak_in_flight || !o->peak_in_flight_chunk || !o->peak_slots || !o->peak_slots_chunk || !o->busy ||
        !o->idle || !o->start || !o->end)
        return TRI_ERR(TRI_ENOMEM, "schedule simulator: out of memory");
    for (int r = 0; r < s->pp; r++) {
        size_t n = (size_t)(s->n_ops[r] > 0 ? s->n_ops[r] : 1);
        o->start[r] = malloc(n * sizeof **o->start);
        o->end[r] = malloc(n * sizeof **o->end);
        if (!o->start[r] || !o->end[r])
            return TRI_ERR(TRI_ENOMEM, "schedule simulator: out of memory");
        for (int i = 0; i < s->n_ops[r]; i++)
            o->start[r][i] = o->end[r][i] = -1.0;
    }
    return TRI_OK;
}

static int alloc_ranks(sim *S)
{
    const tri_schedule *s = S->s;
    S->ranks = calloc((size_t)s->pp, sizeof *S->ranks);
    S->stack = malloc((size_t)s->pp * sizeof *S->stack);
    if (!S->ranks || !S->stack)
        return TRI_ERR(TRI_ENOMEM, "schedule simulator: out of memory");
    for (int r = 0; r < s->pp; r++) {
        rank_state *R = &S->ranks[r];
        R->batch_end = -1;
        R->in_flight_chunk = calloc((size_t)s->v, sizeof *R->in_flight_chunk);
        R->slots_chunk = calloc((size_t)s->v, sizeof *R->slots_chunk);
        R->done = calloc((size_t)s->v * (size_t)s->m, 1);
        R->held = calloc((size_t)s->v * (size_t)s->m, 1);
        R->last_use = calloc((size_t)(s->n_ops[r] > 0 ? s->n_ops[r] : 1), 1);
        if (!R->in_flight_chunk || !R->slots_chunk || !R->done || !R->held || !R->last_use)
            return TRI_ERR(TRI_ENOMEM, "schedule simulator: out of memory");
        S->stack[S->n_stack++] = r;
    }
    return TRI_OK;
}

static void free_sim(sim *S)
{
    for (int r = 0; S->ranks && r < S->s->pp; r++) {
        free(S->ranks[r].in_flight_chunk);
        free(S->ranks[r].slots_chunk);
        free(S->ranks[r].done);
        free(S->ranks[r].held);
        free(S->ranks[r].last_use);
    }
    free(S->ranks);
    free(S->stack);
    free(S->chans);
    free(S->pool);
}

static void finish_timing(sim *S)
{
    tri_sim_result *o = S->out;
    double total = 0.0;
    for (int r = 0; r < S->s->pp; r++) {
        o->makespan = S->ranks[r].time > o->makespan ? S->ranks[r].time : o->makespan;
        total += o->busy[r];
    }
    for (int r = 0; r < S->s->pp; r++)
        o->idle[r] = o->makespan > 0 ? 1.0 - o->busy[r] / o->makespan : 0.0;
    o->bubble = o->makespan > 0 ? 1.0 - total / (S->s->pp * o->makespan) : 0.0;
}

int tri_schedule_simulate(const tri_schedule *s, const tri_sim_costs *c, tri_sim_result *out)
{
    sim S = {.s = s, .c = c, .out = out, .current = -1};
    if (s->pp < 1 || s->v < 1 || s->m < 1 || !s->n_ops || !s->ops) {
        memset(out, 0, sizeof *out);
        out->verdict = TRI_SIM_INVALID;
        return TRI_ERR(TRI_EINVAL, "schedule simulator: empty schedule (pp %d, v %d, m %d)", s->pp, s->v,
                       s->m);
    }
    if (c->fwd < 0 || c->bwd < 0 || c->bwd_input < 0 || c->bwd_weight < 0 || c->comm < 0) {
        memset(out, 0, sizeof *out);
        out->verdict = TRI_SIM_INVALID;
        return TRI_ERR(TRI_EINVAL, "schedule simulator: op costs must be >= 0 (fwd %g, bwd %g, bwd_input %g, "
                       "bwd_weight %g, comm %g)", c->fwd, c->bwd, c->bwd_input, c->bwd_weight, c->comm);
    }
    int rc = alloc_result(out, s);
    if (!rc)
        rc = alloc_ranks(&S);
    if (!rc)
        rc = check_ops(&S);
    if (!rc)
        rc = make_channels(&S);
    if (!rc)
        mark_last_uses(&S);
    while (!rc && S.n_stack > 0)
        rc = advance(&S, S.stack[--S.n_stack]);
    S.current = -1;
    for (int r = 0; !rc && r < s->pp; r++)
        if (S.ranks[r].pc < s->n_ops[r])
            rc = report_deadlock(&S);
    if (!rc)
        rc = check_complete(&S);
    if (!rc)
        finish_timing(&S);
    free_sim(&S);
    return rc;
}

void tri_sim_result_free(tri_sim_result *r)
{
    for (int i = 0; r->start && i < r->pp; i++)
        free(r->start[i]);
    for (int i = 0; r->end && i < r->pp; i++)
        free(r->end[i]);
    free(r->start);
    free(r->end);
    free(r->peak_in_flight);
    free(r->peak_in_flight_chunk);
    free(r->peak_slots);
    free(r->peak_slots_chunk);
    free(r->busy);
    free(r->idle);
    memset(r, 0, sizeof *r);
}
