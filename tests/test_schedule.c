/* tests/test_schedule.c - pipeline schedule generators and the simulator (partitioner/pipeline_schedules.h,
 * partitioner/simulate.h).
 *
 * Every generator at pp 1..64, m up to 512 and v up to 8: each rank forwards and backwards each of
 * its (micro-batch, chunk) pairs exactly once with exactly the messages its place in the model
 * needs; the simulator (the executor's batch fusion, rendezvous, FIFO matching) finds no deadlock
 * and no order error; the in-flight peaks and bubble fractions equal their closed forms. Broken
 * schedules (a swapped op, a dropped send, a receive before a send) are caught with messages
 * naming the rank and the op. */
#include <criterion/criterion.h>
#include <stdlib.h>
#include <string.h>

#include "engine/core/status.h"
#include "partitioner/pipeline_schedules.h"
#include "partitioner/simulate.h"

static const int PPS[] = {1, 2, 3, 4, 8, 16, 64};
#define N_PPS (int)(sizeof PPS / sizeof *PPS)
static const int VS[] = {1, 2, 4, 8};

/* f : b = 1 : 2 (a backward costs two forwards), no comm time; zero-bubble halves 1 + 1. */
static const tri_sim_costs COSTS = {.fwd = 1.0, .bwd = 2.0, .bwd_input = 1.0, .bwd_weight = 1.0};

static int min_int(int a, int b)
{
    return a < b ? a : b;
}

/* Each (mb, local chunk) of each rank: one forward and one backward (BWD, or BWD_INPUT and
 * BWD_WEIGHT when split), the receive / send of activations unless first / last in the model, of
 * gradients unless last / first. */
static void check_structure(const tri_schedule *s, bool split)
{
    int chunks = s->pp * s->v;
    int *count = malloc((size_t)s->v * (size_t)s->m * TRI_SCHED_KINDS * sizeof *count);
    cr_assert(count);
    for (int r = 0; r < s->pp; r++) {
        memset(count, 0, (size_t)s->v * (size_t)s->m * TRI_SCHED_KINDS * sizeof *count);
        for (int i = 0; i < s->n_ops[r]; i++) {
            const tri_sched_op *op = &s->ops[r][i];
            cr_assert(op->chunk >= 0 && op->chunk < s->v && op->mb >= 0 && op->mb < s->m);
            count[(op->chunk * s->m + op->mb) * TRI_SCHED_KINDS + op->kind]++;
        }
        for (int c = 0; c < s->v; c++)
            for (int mb = 0; mb < s->m; mb++) {
                const int *k = &count[(c * s->m + mb) * TRI_SCHED_KINDS];
                int gc = c * s->pp + r, first = gc == 0, last = gc == chunks - 1;
                cr_assert_eq(k[TRI_SCHED_FWD], 1, "%s pp %d v %d m %d: rank %d forwards (%d, %d) %d times",
                             s->name, s->pp, s->v, s->m, r, mb, c, k[TRI_SCHED_FWD]);
                cr_assert_eq(k[TRI_SCHED_BWD], split ? 0 : 1, "%s rank %d BWD(%d, %d)", s->name, r, mb, c);
                cr_assert_eq(k[TRI_SCHED_BWD_INPUT], split ? 1 : 0, "%s rank %d BWD_INPUT", s->name, r);
                cr_assert_eq(k[TRI_SCHED_BWD_WEIGHT], split ? 1 : 0, "%s rank %d BWD_WEIGHT", s->name, r);
                cr_assert_eq(k[TRI_SCHED_RECV_ACT], !first, "%s rank %d RECV_ACT(%d, %d)", s->name, r, mb, c);
                cr_assert_eq(k[TRI_SCHED_SEND_ACT], !last, "%s rank %d SEND_ACT(%d, %d)", s->name, r, mb, c);
                cr_assert_eq(k[TRI_SCHED_RECV_GRAD], !last, "%s rank %d RECV_GRAD(%d, %d)", s->name, r, mb, c);
                cr_assert_eq(k[TRI_SCHED_SEND_GRAD], !first, "%s rank %d SEND_GRAD(%d, %d)", s->name, r, mb, c);
            }
    }
    free(count);
}

/* Simulates s, which must be executable; the caller frees *res. */
static void simulate_ok(const tri_schedule *s, const tri_sim_costs *c, tri_sim_result *res)
{
    int rc = tri_schedule_simulate(s, c, res);
    cr_assert_eq(rc, TRI_OK, "%s pp %d v %d m %d: %s", s->name, s->pp, s->v, s->m, tri_error_message());
    cr_assert_eq(res->verdict, TRI_SIM_OK);
}

static void expect_bubble(const tri_sim_result *res, const tri_schedule *s, double want)
{
    cr_expect(res->bubble > want - 1e-12 && res->bubble < want + 1e-12,
              "%s pp %d v %d m %d: bubble %.15f, theory %.15f", s->name, s->pp, s->v, s->m, res->bubble, want);
}

/* m values of the sweep for pipeline size pp (0 ends the list). */
static void sweep_ms(int pp, int ms[4])
{
    ms[0] = 1;
    ms[1] = pp;
    ms[2] = 2 * pp + 1;
    ms[3] = 512;
}

Test(schedule, gpipe_every_size)
{
    for (int i = 0; i < N_PPS; i++) {
        int pp = PPS[i], ms[4];
        sweep_ms(pp, ms);
        for (int j = 0; j < 4; j++) {
            int m = ms[j];
            tri_schedule s;
            cr_assert_eq(tri_schedule_gpipe(&s, pp, m), TRI_OK, "%s", tri_error_message());
            check_structure(&s, false);
            for (int r = 0; r < pp; r++) {   /* backwards in increasing micro-batch order */
                int next = 0;
                for (int k = 0; k < s.n_ops[r]; k++)
                    if (s.ops[r][k].kind == TRI_SCHED_BWD)
                        cr_assert_eq(s.ops[r][k].mb, next++, "gpipe rank %d backward order", r);
            }
            tri_sim_result res;
            simulate_ok(&s, &COSTS, &res);
            for (int r = 0; r < pp; r++) {
                cr_expect_eq(res.peak_in_flight[r], m, "gpipe pp %d m %d rank %d: peak %d", pp, m, r,
                             res.peak_in_flight[r]);
                cr_expect_eq(res.peak_slots[r], m, "gpipe pp %d m %d rank %d: %d slots", pp, m, r,
                             res.peak_slots[r]);
            }
            expect_bubble(&res, &s, (double)(pp - 1) / (m + pp - 1));
            cr_expect_float_eq(res.makespan, 3.0 * (m + pp - 1), 1e-9);
            tri_sim_result_free(&res);
            tri_schedule_free(&s);
        }
    }
}

Test(schedule, one_f_one_b_every_size)
{
    for (int i = 0; i < N_PPS; i++) {
        int pp = PPS[i], ms[4];
        sweep_ms(pp, ms);
        for (int j = 0; j < 4; j++) {
            int m = ms[j];
            tri_schedule s;
            cr_assert_eq(tri_schedule_1f1b(&s, pp, m), TRI_OK, "%s", tri_error_message());
            check_structure(&s, false);
            for (int r = 0; r < pp; r++) {   /* warm-up: min(pp - r - 1, m) forwards, then 1F1B */
                int fwd = 0, k = 0;
                for (; k < s.n_ops[r] && s.ops[r][k].kind != TRI_SCHED_BWD; k++)
                    fwd += s.ops[r][k].kind == TRI_SCHED_FWD;
                cr_expect_eq(fwd, min_int(pp - r, m), "1f1b pp %d m %d rank %d: %d forwards before the "
                             "first backward", pp, m, r, fwd);
            }
            tri_sim_result res;
            simulate_ok(&s, &COSTS, &res);
            for (int r = 0; r < pp; r++) {
                cr_expect_eq(res.peak_in_flight[r], min_int(pp - r, m), "1f1b pp %d m %d rank %d: peak %d",
                             pp, m, r, res.peak_in_flight[r]);
                cr_expect_eq(res.peak_in_flight_chunk[r], res.peak_in_flight[r]);
                /* the executor holds one slot more where a steady-state send_backward_recv_forward
                 * exchange holds the finished micro-batch and the next one together */
                int slots = min_int(pp - r, m) + (r > 0 && m > pp - r);
                cr_expect_eq(res.peak_slots[r], slots, "1f1b pp %d m %d rank %d: %d slots, expected %d", pp, m,
                             r, res.peak_slots[r], slots);
            }
            expect_bubble(&res, &s, (double)(pp - 1) / (m + pp - 1));
            tri_sim_result_free(&res);
            tri_schedule_free(&s);
        }
    }
}

/* Megatron-LM's pairs: in 1F1B every fused exchange of a middle rank is one of send_forward +
 * recv_forward (warm-up), send_forward_recv_backward, send_backward_recv_forward or send_backward
 * + recv_backward (cool-down), or a lone send / receive. */
Test(schedule, one_f_one_b_fuses_into_megatron_pairs)
{
    tri_schedule s;
    cr_assert_eq(tri_schedule_1f1b(&s, 4, 8), TRI_OK);
    int pairs[4] = {0};
    for (int r = 1; r < 3; r++) {
        const tri_sched_op *ops = s.ops[r];
        for (int i = 0, end; i < s.n_ops[r]; i = end) {
            end = tri_sched_batch_end(ops, s.n_ops[r], i);
            if (end - i < 2)
                continue;
            cr_assert_eq(end - i, 2, "rank %d: a batch of %d ops at op %d", r, end - i, i);
            int a = ops[i].kind, b = ops[i + 1].kind;
            if (a == TRI_SCHED_SEND_ACT && b == TRI_SCHED_RECV_ACT)
                pairs[0]++;
            else if (a == TRI_SCHED_SEND_ACT && b == TRI_SCHED_RECV_GRAD)
                pairs[1]++;
            else if (a == TRI_SCHED_SEND_GRAD && b == TRI_SCHED_RECV_ACT)
                pairs[2]++;
            else if (a == TRI_SCHED_SEND_GRAD && b == TRI_SCHED_RECV_GRAD)
                pairs[3]++;
            else
                cr_assert_fail("rank %d op %d: unexpected pair %s %s", r, i, tri_sched_kind_name(a),
                               tri_sched_kind_name(b));
        }
    }
    /* rank 1 (w = 2 warm-up forwards) and rank 2 (w = 1), m = 8: w send_forward + recv_forward;
     * m - w send_forward_recv_backward; m - w - 1 send_backward_recv_forward (the last steady
     * backward's send meets the first cool-down receive instead); w send_backward + recv_backward
     * (the very last send goes alone). */
    cr_expect_eq(pairs[0], 2 + 1, "send_forward + recv_forward: %d", pairs[0]);
    cr_expect_eq(pairs[1], 6 + 7, "send_forward_recv_backward: %d", pairs[1]);
    cr_expect_eq(pairs[2], 5 + 6, "send_backward_recv_forward: %d", pairs[2]);
    cr_expect_eq(pairs[3], 2 + 1, "send_backward + recv_backward: %d", pairs[3]);
    tri_schedule_free(&s);
}

/* Megatron-LM's virtual micro-batch k: forward chunk (k / pp) % v, micro-batch (k / (pp v)) pp +
 * k % pp; backward chunk v - 1 - (k / pp) % v. */
static void check_virtual_order(const tri_schedule *s)
{
    int pp = s->pp, v = s->v;
    for (int r = 0; r < pp; r++) {
        int kf = 0, kb = 0, warm = min_int(2 * (pp - r - 1) + (v - 1) * pp, s->m * v), fwd_first = -1;
        for (int i = 0; i < s->n_ops[r]; i++) {
            const tri_sched_op *op = &s->ops[r][i];
            if (op->kind == TRI_SCHED_FWD) {
                cr_assert_eq(op->chunk, (kf / pp) % v, "rank %d forward %d: chunk %d", r, kf, op->chunk);
                cr_assert_eq(op->mb, (kf / (pp * v)) * pp + kf % pp, "rank %d forward %d: mb %d", r, kf,
                             op->mb);
                kf++;
            } else if (op->kind == TRI_SCHED_BWD) {
                if (fwd_first < 0)
                    fwd_first = kf;
                cr_assert_eq(op->chunk, v - 1 - (kb / pp) % v, "rank %d backward %d: chunk %d", r, kb,
                             op->chunk);
                cr_assert_eq(op->mb, (kb / (pp * v)) * pp + kb % pp, "rank %d backward %d: mb %d", r, kb,
                             op->mb);
                kb++;
            }
        }
        cr_expect_eq(fwd_first, min_int(warm + 1, s->m * v), "interleaved pp %d v %d m %d rank %d: %d "
                     "forwards before the first backward", pp, v, s->m, r, fwd_first);
    }
}

Test(schedule, interleaved_every_size)
{
    for (int i = 0; i < N_PPS; i++)
        for (int j = 0; j < 4; j++) {
            int pp = PPS[i], v = VS[j];
            if (pp == 1 && v > 1)
                continue;
            int ms[3] = {pp, 2 * pp, 512 % pp == 0 ? 512 : 0};
            for (int k = 0; k < 3; k++) {
                int m = ms[k];
                if (m == 0)
                    continue;
                tri_schedule s;
                cr_assert_eq(tri_schedule_interleaved(&s, pp, v, m), TRI_OK, "%s", tri_error_message());
                check_structure(&s, false);
                check_virtual_order(&s);
                tri_sim_result res;
                simulate_ok(&s, &COSTS, &res);
                for (int r = 0; r < pp; r++) {
                    int want = min_int(2 * (pp - r - 1) + (v - 1) * pp + 1, m * v);
                    cr_expect_eq(res.peak_in_flight[r], want, "interleaved pp %d v %d m %d rank %d: peak %d, "
                                 "expected %d", pp, v, m, r, res.peak_in_flight[r], want);
                    /* receiving one step ahead holds the next micro-batch's slot too (on ranks that
                     * receive activations) */
                    int slots = pp == 1 || (v == 1 && r == 0) ? want : min_int(want + 1, m * v);
                    cr_expect_eq(res.peak_slots[r], slots, "interleaved pp %d v %d m %d rank %d: %d slots, "
                                 "expected %d", pp, v, m, r, res.peak_slots[r], slots);
                    int sum = 0, most = 0;
                    for (int c = 0; c < v; c++) {
                        int p = res.peak_in_flight_chunk[r * v + c];
                        sum += p;
                        most = p > most ? p : most;
                        cr_expect(p >= 1 && p <= m, "rank %d chunk %d: peak %d", r, c, p);
                    }
                    cr_expect(most <= res.peak_in_flight[r] && res.peak_in_flight[r] <= sum);
                }
                /* Narayanan et al. 2021 §2.2.2: the bubble shrinks by v: (p-1)/(v m + p - 1) of the time */
                expect_bubble(&res, &s, (double)(pp - 1) / (v * m + pp - 1));
                tri_sim_result_free(&res);
                tri_schedule_free(&s);
            }
        }
}

Test(schedule, zb_h1_every_size)
{
    /* Qi et al. 2023: with T_F = T_B = T_W the bubble is (p - 1)(T_F + T_B - T_W) = p - 1 when
     * m >= p; the peak in flight is min(p, m) on every rank, 1F1B's largest. */
    tri_sim_costs unit = {.fwd = 1.0, .bwd_input = 1.0, .bwd_weight = 1.0};
    for (int i = 0; i < N_PPS; i++) {
        int pp = PPS[i], ms[4];
        sweep_ms(pp, ms);
        for (int j = 0; j < 4; j++) {
            int m = ms[j];
            tri_schedule s;
            cr_assert_eq(tri_schedule_zb_h1(&s, pp, m), TRI_OK, "%s", tri_error_message());
            check_structure(&s, true);
            tri_sim_result res;
            simulate_ok(&s, &unit, &res);
            for (int r = 0; r < pp; r++) {
                cr_expect_eq(res.peak_in_flight[r], min_int(pp, m), "zb-h1 pp %d m %d rank %d: peak %d", pp,
                             m, r, res.peak_in_flight[r]);
                cr_expect_eq(res.peak_slots[r], min_int(pp, m), "zb-h1 pp %d m %d rank %d: %d slots", pp, m,
                             r, res.peak_slots[r]);
            }
            if (m >= pp) {
                cr_expect_float_eq(res.makespan, 3.0 * m + pp - 1, 1e-9, "zb-h1 pp %d m %d: makespan %g",
                                   pp, m, res.makespan);
                expect_bubble(&res, &s, (double)(pp - 1) / (3 * m + pp - 1));
            }
            tri_sim_result res1;   /* never slower than 1F1B at f : b = 1 : 2 */
            tri_schedule s1;
            cr_assert_eq(tri_schedule_1f1b(&s1, pp, m), TRI_OK);
            simulate_ok(&s1, &COSTS, &res1);
            cr_expect(res.makespan <= res1.makespan + 1e-9, "zb-h1 pp %d m %d: %g vs 1f1b %g", pp, m,
                      res.makespan, res1.makespan);
            tri_sim_result_free(&res1);
            tri_schedule_free(&s1);
            tri_sim_result_free(&res);
            tri_schedule_free(&s);
        }
    }
}

/* A few values of the closed forms, spelled out. */
Test(schedule, bubble_table)
{
    struct { const char *name; int pp, v, m; double bubble; } t[] = {
        {"gpipe", 4, 1, 8, 3.0 / 11}, {"1f1b", 4, 1, 8, 3.0 / 11}, {"1f1b", 8, 1, 64, 7.0 / 71},
        {"interleaved", 4, 2, 8, 3.0 / 19}, {"interleaved", 4, 4, 8, 3.0 / 35},
        {"interleaved", 8, 8, 64, 7.0 / 519}, {"1f1b", 64, 1, 512, 63.0 / 575},
    };
    for (size_t i = 0; i < sizeof t / sizeof *t; i++) {
        tri_schedule s;
        int rc = tri_schedule_make(&s, t[i].name, t[i].pp, t[i].v, t[i].m);
        cr_assert_eq(rc, TRI_OK, "%s", tri_error_message());
        tri_sim_result res;
        simulate_ok(&s, &COSTS, &res);
        expect_bubble(&res, &s, t[i].bubble);
        tri_sim_result_free(&res);
        tri_schedule_free(&s);
    }
}

/* The closed forms hold for any forward : backward ratio; only makespans scale. */
Test(schedule, bubble_independent_of_cost_ratio)
{
    double ratios[][2] = {{1, 1}, {1, 3}, {2, 3}};
    for (int i = 0; i < 3; i++) {
        tri_sim_costs c = {.fwd = ratios[i][0], .bwd = ratios[i][1]};
        const char *names[] = {"gpipe", "1f1b", "interleaved"};
        for (int k = 0; k < 3; k++) {
            int v = k == 2 ? 3 : 1;
            tri_schedule s;
            cr_assert_eq(tri_schedule_make(&s, names[k], 4, v, 8), TRI_OK);
            tri_sim_result res;
            simulate_ok(&s, &c, &res);
            expect_bubble(&res, &s, 3.0 / (v * 8 + 3));
            cr_expect_float_eq(res.makespan, (c.fwd + c.bwd) * (v * 8 + 3), 1e-9);
            tri_sim_result_free(&res);
            tri_schedule_free(&s);
        }
    }
}

/* Times of single ops, worked by hand: GPipe on 2 ranks, 1 micro-batch, f 1, b 2, comm 0.5, the
 * second chunk twice as slow. Rank 0: F [0, 1], send arrives 1.5; rank 1: F [1.5, 3.5],
 * B [3.5, 7.5], gradient arrives 8; rank 0: B [8, 10]. */
Test(schedule, op_times_comm_latency_and_chunk_scale)
{
    double scale[2] = {1.0, 2.0};
    tri_sim_costs c = {.fwd = 1.0, .bwd = 2.0, .comm = 0.5, .chunk_scale = scale};
    tri_schedule s;
    cr_assert_eq(tri_schedule_gpipe(&s, 2, 1), TRI_OK);
    tri_sim_result res;
    simulate_ok(&s, &c, &res);
    /* rank 0: FWD SEND_ACT RECV_GRAD BWD -> the send and receive fuse into one batch */
    cr_assert_eq(s.n_ops[0], 4);
    double want0[4][2] = {{0, 1}, {1, 1.5}, {1, 8}, {8, 10}};
    for (int i = 0; i < 4; i++) {
        cr_expect_float_eq(res.start[0][i], want0[i][0], 1e-12, "rank 0 op %d start %g", i, res.start[0][i]);
        cr_expect_float_eq(res.end[0][i], want0[i][1], 1e-12, "rank 0 op %d end %g", i, res.end[0][i]);
    }
    double want1[4][2] = {{0, 1.5}, {1.5, 3.5}, {3.5, 7.5}, {7.5, 8}};
    for (int i = 0; i < 4; i++) {
        cr_expect_float_eq(res.start[1][i], want1[i][0], 1e-12, "rank 1 op %d start %g", i, res.start[1][i]);
        cr_expect_float_eq(res.end[1][i], want1[i][1], 1e-12, "rank 1 op %d end %g", i, res.end[1][i]);
    }
    cr_expect_float_eq(res.makespan, 10.0, 1e-12);
    cr_expect_float_eq(res.busy[0], 3.0, 1e-12);
    cr_expect_float_eq(res.busy[1], 6.0, 1e-12);
    cr_expect_float_eq(res.idle[0], 0.7, 1e-12);
    cr_expect_float_eq(res.bubble, 1.0 - 9.0 / 20.0, 1e-12);
    tri_sim_result_free(&res);
    tri_schedule_free(&s);
}

/* Comm latency never helps, and every op's interval is consistent. */
Test(schedule, comm_latency_slows_and_times_are_consistent)
{
    tri_schedule s;
    cr_assert_eq(tri_schedule_interleaved(&s, 4, 2, 8), TRI_OK);
    tri_sim_result a, b;
    tri_sim_costs slow = COSTS;
    slow.comm = 0.25;
    simulate_ok(&s, &COSTS, &a);
    simulate_ok(&s, &slow, &b);
    cr_expect(b.makespan > a.makespan, "%g vs %g", b.makespan, a.makespan);
    for (int r = 0; r < s.pp; r++)
        for (int i = 0; i < s.n_ops[r]; i++) {
            cr_assert(b.start[r][i] >= 0 && b.end[r][i] >= b.start[r][i]);
            if (i > 0 && !tri_sched_is_comm(s.ops[r][i].kind))
                cr_assert(b.start[r][i] >= b.end[r][i - 1] - 1e-12, "rank %d op %d starts before op %d ends", r,
                          i, i - 1);
            if (tri_sched_is_comm(s.ops[r][i].kind))
                cr_assert(b.end[r][i] >= b.start[r][i] + 0.25 - 1e-12);
        }
    tri_sim_result_free(&a);
    tri_sim_result_free(&b);
    tri_schedule_free(&s);
}

/* ---- broken schedules ---- */

/* Simulates s expecting verdict v and a message holding each non-NULL needle. */
static void expect_broken(const tri_schedule *s, tri_sim_verdict v, const char *n1, const char *n2)
{
    tri_sim_result res;
    int rc = tri_schedule_simulate(s, &COSTS, &res);
    const char *msg = tri_error_message();
    cr_expect_eq(rc, TRI_EINVAL, "status %d: %s", rc, msg);
    cr_expect_eq(res.verdict, v, "verdict %s, expected %s: %s", tri_sim_verdict_name(res.verdict),
                 tri_sim_verdict_name(v), msg);
    if (n1)
        cr_expect(strstr(msg, n1) != NULL, "message names '%s': %s", n1, msg);
    if (n2)
        cr_expect(strstr(msg, n2) != NULL, "message names '%s': %s", n2, msg);
    tri_sim_result_free(&res);
}

static int find_op(const tri_schedule *s, int r, int kind, int mb, int chunk)
{
    for (int i = 0; i < s->n_ops[r]; i++)
        if (s->ops[r][i].kind == kind && s->ops[r][i].mb == mb && s->ops[r][i].chunk == chunk)
            return i;
    cr_assert_fail("rank %d has no %s(%d, %d)", r, tri_sched_kind_name(kind), mb, chunk);
    return -1;
}

static void drop_op(tri_schedule *s, int r, int i)
{
    memmove(&s->ops[r][i], &s->ops[r][i + 1], (size_t)(s->n_ops[r] - i - 1) * sizeof **s->ops);
    s->n_ops[r]--;
}

Test(schedule, swapped_receives_are_an_order_error)
{
    tri_schedule s;
    cr_assert_eq(tri_schedule_1f1b(&s, 4, 8), TRI_OK);
    int a = find_op(&s, 2, TRI_SCHED_RECV_ACT, 0, 0), b = find_op(&s, 2, TRI_SCHED_RECV_ACT, 1, 0);
    s.ops[2][a].mb = 1;    /* rank 2 now expects micro-batch 1 first, and 0 second */
    s.ops[2][b].mb = 0;
    expect_broken(&s, TRI_SIM_ORDER, "rank 1 op 2 SEND_ACT(mb 0, chunk 0)",
                  "rank 2 op 0 RECV_ACT(mb 1, chunk 0)");
    tri_schedule_free(&s);
}

Test(schedule, a_dropped_send_is_caught)
{
    tri_schedule s;
    /* the last activation send of rank 0: rank 1 waits for it forever */
    cr_assert_eq(tri_schedule_gpipe(&s, 2, 4), TRI_OK);
    drop_op(&s, 0, find_op(&s, 0, TRI_SCHED_SEND_ACT, 3, 0));
    expect_broken(&s, TRI_SIM_DEADLOCK, "rank 1 waits at op 6 RECV_ACT(mb 3, chunk 0) <- rank 0", "deadlock");
    tri_schedule_free(&s);
    /* a middle one: the next send meets the receive of the dropped micro-batch */
    cr_assert_eq(tri_schedule_1f1b(&s, 3, 6), TRI_OK);
    drop_op(&s, 1, find_op(&s, 1, TRI_SCHED_SEND_GRAD, 2, 0));
    expect_broken(&s, TRI_SIM_ORDER, "SEND_GRAD(mb 3, chunk 0)", "rank 0 op");
    tri_schedule_free(&s);
    /* a gradient send of the interleaved wrap-around (rank 0's chunk 1 to rank 3's chunk 0) */
    cr_assert_eq(tri_schedule_interleaved(&s, 4, 2, 8), TRI_OK);
    drop_op(&s, 0, find_op(&s, 0, TRI_SCHED_SEND_GRAD, 7, 1));
    expect_broken(&s, TRI_SIM_DEADLOCK, "rank 3 waits at", "RECV_GRAD(mb 7, chunk 0) <- rank 0");
    tri_schedule_free(&s);
}

/* Two ranks each waiting to receive before they send. */
Test(schedule, receive_before_send_deadlocks)
{
    tri_schedule s;
    cr_assert_eq(tri_schedule_1f1b(&s, 2, 1), TRI_OK);
    /* rank 0: FWD SEND_ACT RECV_GRAD BWD -> RECV_GRAD FWD SEND_ACT BWD */
    tri_sched_op *o = s.ops[0];
    cr_assert_eq(o[2].kind, TRI_SCHED_RECV_GRAD);
    tri_sched_op rg = o[2];
    o[2] = o[1];
    o[1] = o[0];
    o[0] = rg;
    expect_broken(&s, TRI_SIM_DEADLOCK, "rank 0 waits at op 0 RECV_GRAD(mb 0, chunk 0) <- rank 1",
                  "rank 1 waits at op 0 RECV_ACT(mb 0, chunk 0) <- rank 0");
    tri_schedule_free(&s);
}

/* The interleaved schedule with each receive right before its compute and each send right after
 * (as 1F1B places them): under the executor's batch-synchronous rendezvous, the wrap-around from
 * the last rank to the first closes a cycle of ranks each blocked in a gradient send. This is why
 * the interleaved generator receives one step ahead, in the exchange that sends the previous
 * step's results, as Megatron-LM does. */
Test(schedule, interleaved_without_step_exchanges_deadlocks)
{
    int pp = 4, v = 2, m = 8, total = m * v;
    tri_schedule s;
    cr_assert_eq(tri_schedule_interleaved(&s, pp, v, m), TRI_OK);
    for (int r = 0; r < pp; r++) {
        int warm = min_int(2 * (pp - r - 1) + (v - 1) * pp, total), n = 0;
        for (int step = 0; step < total + warm; step++) {
            for (int dir = 0; dir < 2; dir++) {
                int k = dir == 0 ? step : step - warm;
                if (k < 0 || k >= total || (dir == 0 && step >= total))
                    continue;
                int c = dir == 0 ? (k / pp) % v : v - 1 - (k / pp) % v, mb = (k / (pp * v)) * pp + k % pp;
                int gc = c * pp + r, first = gc == 0, last = gc == pp * v - 1;
                int in = dir == 0 ? TRI_SCHED_RECV_ACT : TRI_SCHED_RECV_GRAD;
                int out = dir == 0 ? TRI_SCHED_SEND_ACT : TRI_SCHED_SEND_GRAD;
                if (dir == 0 ? !first : !last)
                    s.ops[r][n++] = (tri_sched_op){.kind = (int8_t)in, .chunk = (int8_t)c, .mb = mb};
                s.ops[r][n++] = (tri_sched_op){.kind = (int8_t)(dir == 0 ? TRI_SCHED_FWD : TRI_SCHED_BWD),
                                               .chunk = (int8_t)c, .mb = mb};
                if (dir == 0 ? !last : !first)
                    s.ops[r][n++] = (tri_sched_op){.kind = (int8_t)out, .chunk = (int8_t)c, .mb = mb};
            }
        }
        cr_assert_eq(n, s.n_ops[r]);
    }
    check_structure(&s, false);
    expect_broken(&s, TRI_SIM_DEADLOCK, "SEND_GRAD", "4 ranks blocked");
    tri_schedule_free(&s);
}

Test(schedule, invalid_ops_are_named)
{
    tri_schedule s;
    cr_assert_eq(tri_schedule_1f1b(&s, 2, 2), TRI_OK);
    s.ops[0][0].kind = TRI_SCHED_RECV_ACT;   /* the first chunk receives nothing */
    expect_broken(&s, TRI_SIM_INVALID, "rank 0 op 0 RECV_ACT(mb 0, chunk 0)", "first model chunk");
    tri_schedule_free(&s);

    cr_assert_eq(tri_schedule_1f1b(&s, 2, 2), TRI_OK);
    s.ops[1][1].mb = 1;                        /* forward 1 before its activation arrives */
    expect_broken(&s, TRI_SIM_INVALID, "rank 1 op 1 FWD(mb 1, chunk 0)", "before its input activation");
    tri_schedule_free(&s);

    cr_assert_eq(tri_schedule_gpipe(&s, 1, 3), TRI_OK);
    drop_op(&s, 0, find_op(&s, 0, TRI_SCHED_BWD, 1, 0));
    expect_broken(&s, TRI_SIM_INVALID, "rank 0 never runs BWD of micro-batch 1, chunk 0", NULL);
    tri_schedule_free(&s);

    cr_assert_eq(tri_schedule_gpipe(&s, 1, 3), TRI_OK);
    s.ops[0][find_op(&s, 0, TRI_SCHED_BWD, 2, 0)].mb = 0;
    expect_broken(&s, TRI_SIM_INVALID, "rank 0 op 5 BWD(mb 0, chunk 0)", "backward run twice");
    tri_schedule_free(&s);

    cr_assert_eq(tri_schedule_zb_h1(&s, 1, 2), TRI_OK);
    s.ops[0][find_op(&s, 0, TRI_SCHED_BWD_INPUT, 1, 0)].kind = TRI_SCHED_BWD_WEIGHT;
    expect_broken(&s, TRI_SIM_INVALID, "BWD_WEIGHT(mb 1, chunk 0)", "before its BWD_INPUT");
    tri_schedule_free(&s);

    cr_assert_eq(tri_schedule_gpipe(&s, 2, 2), TRI_OK);
    s.ops[1][0].mb = 5;
    expect_broken(&s, TRI_SIM_INVALID, "rank 1 op 0 RECV_ACT(mb 5, chunk 0)", "micro-batch out of range");
    tri_schedule_free(&s);
}

/* A schedule without any backward op is a valid forward-only (evaluation) schedule. */
Test(schedule, forward_only_schedules_are_accepted)
{
    tri_schedule s;
    cr_assert_eq(tri_schedule_gpipe(&s, 3, 4), TRI_OK);
    for (int r = 0; r < 3; r++)
        s.n_ops[r] = find_op(&s, r, r == 2 ? TRI_SCHED_BWD : TRI_SCHED_RECV_GRAD, 0, 0);
    tri_sim_result res;
    simulate_ok(&s, &COSTS, &res);
    cr_expect_float_eq(res.makespan, 4 + 2, 1e-12);
    tri_sim_result_free(&res);
    tri_schedule_free(&s);
}

static void expect_refused(int rc, const char *n1, const char *n2)
{
    const char *msg = tri_error_message();
    cr_expect_eq(rc, TRI_EINVAL, "status %d: %s", rc, msg);
    cr_expect(strstr(msg, n1) != NULL, "message names '%s': %s", n1, msg);
    if (n2)
        cr_expect(strstr(msg, n2) != NULL, "message names '%s': %s", n2, msg);
}

Test(schedule, refused_sizes)
{
    tri_schedule s;
    expect_refused(tri_schedule_interleaved(&s, 4, 2, 6), "micro-batches 6 is not a multiple of "
                   "--pipeline-model-parallel-size 4", NULL);
    cr_expect(s.ops == NULL && s.n_ops == NULL);
    tri_schedule_free(&s);
    expect_refused(tri_schedule_interleaved(&s, 1, 2, 4), "--pipeline-model-parallel-size > 1",
                   "2 model chunks");
    expect_refused(tri_schedule_1f1b(&s, 0, 4), "--pipeline-model-parallel-size 0", NULL);
    expect_refused(tri_schedule_gpipe(&s, 2, 0), "0 micro-batches", NULL);
    expect_refused(tri_schedule_interleaved(&s, 2, 0, 4), "0 model chunks", NULL);
    expect_refused(tri_schedule_interleaved(&s, 2, 200, 4), "200 model chunks", "1..127");
    expect_refused(tri_schedule_make(&s, "pipedream", 2, 1, 4), "unknown pipeline schedule 'pipedream'", NULL);
    expect_refused(tri_schedule_make(&s, "1f1b", 2, 2, 4), "1f1b", "not 2");
    tri_schedule_free(&s);
    cr_assert_eq(tri_schedule_1f1b(&s, 2, 2), TRI_OK);
    tri_sim_costs bad = COSTS;
    bad.comm = -1.0;
    tri_sim_result res;
    expect_refused(tri_schedule_simulate(&s, &bad, &res), "op costs must be >= 0", "comm -1");
    tri_sim_result_free(&res);
    tri_schedule_free(&s);
}

/* The largest sweep point, alone: 64 ranks, 8 chunks each, 512 micro-batches (1.6 million ops). */
Test(schedule, largest_interleaved_is_quick, .timeout = 60)
{
    tri_schedule s;
    cr_assert_eq(tri_schedule_interleaved(&s, 64, 8, 512), TRI_OK);
    long ops = 0;
    for (int r = 0; r < 64; r++)
        ops += s.n_ops[r];
    cr_expect_eq(ops, 64L * 8 * 512 * 6 - 2 * 512 * 2);   /* first / last chunk: 2 messages fewer */
    tri_sim_result res;
    simulate_ok(&s, &COSTS, &res);
    expect_bubble(&res, &s, 63.0 / (8 * 512 + 63));
    tri_sim_result_free(&res);
    tri_schedule_free(&s);
}

/* NCCL's p2p has no tags: messages between two ranks match in issue order whatever they carry.
 * Only pp = 2 with v > 1 sends both activations and gradients from one rank to the other; every
 * generator's order holds without tags too. Swapping the two sends of one of rank 0's exchanges
 * is harmless with tags and an order error without. */
Test(schedule, schedules_hold_without_tags)
{
    tri_sim_costs untagged = COSTS;
    untagged.untagged = true;
    const char *names[] = {"gpipe", "1f1b", "zb-h1", "interleaved"};
    for (int k = 0; k < 4; k++)
        for (int pp = 2; pp <= 4; pp++)
            for (int v = 1; v <= (k == 3 ? 4 : 1); v++)
                for (int m = pp; m <= 3 * pp; m += pp) {
                    tri_schedule s;
                    cr_assert_eq(tri_schedule_make(&s, names[k], pp, v, m), TRI_OK, "%s", tri_error_message());
                    tri_sim_result res;
                    simulate_ok(&s, &untagged, &res);
                    tri_sim_result_free(&res);
                    tri_schedule_free(&s);
                }
    tri_schedule s;
    cr_assert_eq(tri_schedule_interleaved(&s, 2, 2, 4), TRI_OK);
    int i = find_op(&s, 0, TRI_SCHED_SEND_GRAD, 0, 1);
    cr_assert_eq(s.ops[0][i - 1].kind, TRI_SCHED_SEND_ACT, "an activation and a gradient in one exchange");
    tri_sched_op t = s.ops[0][i];
    s.ops[0][i] = s.ops[0][i - 1];
    s.ops[0][i - 1] = t;
    tri_sim_result res;
    simulate_ok(&s, &COSTS, &res);
    tri_sim_result_free(&res);
    cr_expect_eq(tri_schedule_simulate(&s, &untagged, &res), TRI_EINVAL);
    cr_expect_eq(res.verdict, TRI_SIM_ORDER, "%s", tri_error_message());
    cr_expect(strstr(tri_error_message(), "SEND_GRAD(mb 0, chunk 1) (global chunk 2) is received by rank 1")
              != NULL, "%s", tri_error_message());
    tri_sim_result_free(&res);
    tri_schedule_free(&s);
}
