/* tests/test_fault.c - engine/train/fault.c: the agreed step verdict, the skip decisions and the run identity.
 *
 * The decisions (tri_step_guard_decide) are pure: fed verdicts and losses, they must fail at the
 * first non-finite step without --skip-nonfinite, skip exactly K in a row with it, reset after a
 * good step, and skip a loss spike only against a full window. The agreements run on 4 thread ranks:
 * one rank's non-finite flag and another's stop request reach every rank; one rank's different
 * identity text makes every rank fail naming that rank, and that rank also names its line. */
#include <criterion/criterion.h>
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "engine/comm/comm.h"
#include "engine/core/status.h"
#include "engine/device/device.h"
#include "engine/train/fault.h"

TestSuite(fault);

static tri_step_verdict verdict(int n_bad, const char *ranks)
{
    tri_step_verdict v;
    memset(&v, 0, sizeof v);
    v.n_bad = n_bad;
    snprintf(v.bad_ranks, sizeof v.bad_ranks, "%s", ranks);
    return v;
}

Test(fault, nonfinite_fails_at_once_without_skipping)
{
    tri_step_guard g;
    tri_step_action a;
    cr_assert_eq(tri_step_guard_init(&g, 0, 0.0, 0), TRI_OK);
    tri_step_verdict ok = verdict(0, ""), bad = verdict(2, "1, 3");
    cr_assert_eq(tri_step_guard_decide(&g, 1, 2.5, &ok, &a), TRI_OK);
    cr_assert_eq(a, TRI_STEP_APPLY);
    cr_assert_eq(tri_step_guard_decide(&g, 2, 2.4, &bad, &a), TRI_ENONFINITE);
    cr_assert(strstr(tri_error_message(), "iteration 2: non-finite gradients or loss on ranks 1, 3"),
              "%s", tri_error_message());
    /* a NaN loss with every rank's gradients finite is refused too, naming the loss */
    cr_assert_eq(tri_step_guard_decide(&g, 3, NAN, &ok, &a), TRI_ENONFINITE);
    cr_assert(strstr(tri_error_message(), "iteration 3: the loss is nan"), "%s", tri_error_message());
    tri_step_guard_destroy(&g);
}

Test(fault, skips_k_in_a_row_then_fails)
{
    tri_step_guard g;
    tri_step_action a;
    cr_assert_eq(tri_step_guard_init(&g, 2, 0.0, 0), TRI_OK);
    tri_step_verdict ok = verdict(0, ""), bad = verdict(1, "0");
    for (int round = 0; round < 2; round++) { /* a good step resets the count */
        cr_assert_eq(tri_step_guard_decide(&g, 10, 2.0, &bad, &a), TRI_OK);
        cr_assert_eq(a, TRI_STEP_SKIP_NONFINITE);
        cr_assert_eq(tri_step_guard_decide(&g, 11, 2.0, &bad, &a), TRI_OK);
        cr_assert_eq(a, TRI_STEP_SKIP_NONFINITE);
        cr_assert_eq(tri_step_guard_decide(&g, 12, 2.0, &ok, &a), TRI_OK);
        cr_assert_eq(a, TRI_STEP_APPLY);
    }
    cr_assert_eq(g.skipped_nonfinite, 4);
    cr_assert_eq(tri_step_guard_decide(&g, 20, 2.0, &bad, &a), TRI_OK);
    cr_assert_eq(tri_step_guard_decide(&g, 21, 2.0, &bad, &a), TRI_OK);
    cr_assert_eq(tri_step_guard_decide(&g, 22, 2.0, &bad, &a), TRI_ENONFINITE);
    cr_assert(strstr(tri_error_message(), "iteration 22: non-finite gradients or loss on rank 0; no update applied; "
                                          "3 non-finite steps in a row exceed --skip-nonfinite 2"),
              "%s", tri_error_message());
    tri_step_guard_destroy(&g);
}

Test(fault, loss_spike_needs_a_full_window)
{
    tri_step_guard g;
    tri_step_action a;
    tri_step_verdict ok = verdict(0, "");
    cr_assert_eq(tri_step_guard_init(&g, 0, 3.0, 4), TRI_OK);
    const double losses[] = {2.0, 2.1, 1.9};
    for (int i = 0; i < 3; i++) {
        cr_assert_eq(tri_step_guard_decide(&g, i + 1, losses[i], &ok, &a), TRI_OK);
        cr_assert_eq(a, TRI_STEP_APPLY);
    }
    /* the window is not full yet (3 of 4): a jump is taken */
    cr_assert_eq(tri_step_guard_decide(&g, 4, 2.3, &ok, &a), TRI_OK);
    cr_assert_eq(a, TRI_STEP_APPLY);
    /* window {2.0, 2.1, 1.9, 2.3}: mean 2.075, sd 0.171; 2.5 is z = 2.5, 10 is z = 46 */
    cr_assert_eq(tri_step_guard_decide(&g, 5, 2.5, &ok, &a), TRI_OK);
    cr_assert_eq(a, TRI_STEP_APPLY);
    cr_assert_eq(tri_step_guard_decide(&g, 6, 10.0, &ok, &a), TRI_OK);
    cr_assert_eq(a, TRI_STEP_SKIP_SPIKE);
    cr_assert_eq(g.skipped_spikes, 1);
    cr_assert_eq(tri_step_guard_decide(&g, 7, 2.2, &ok, &a), TRI_OK);
    cr_assert_eq(a, TRI_STEP_APPLY);
    /* a lasting jump is skipped at most TRI_SPIKE_MAX_IN_ROW times, then taken as the new level */
    int skipped = 0;
    for (int i = 0; i < TRI_SPIKE_MAX_IN_ROW + 1; i++) {
        cr_assert_eq(tri_step_guard_decide(&g, 8 + i, 50.0, &ok, &a), TRI_OK);
        skipped += a == TRI_STEP_SKIP_SPIKE;
    }
    cr_assert_eq(skipped, TRI_SPIKE_MAX_IN_ROW);
    cr_assert_eq(a, TRI_STEP_APPLY);
    tri_step_guard_destroy(&g);
}

Test(fault, init_refuses_bad_settings)
{
    tri_step_guard g;
    cr_assert_eq(tri_step_guard_init(&g, -1, 0.0, 0), TRI_EINVAL);
    cr_assert(strstr(tri_error_message(), "--skip-nonfinite -1"));
    cr_assert_eq(tri_step_guard_init(&g, 0, -2.0, 10), TRI_EINVAL);
    cr_assert_eq(tri_step_guard_init(&g, 0, 3.0, 1), TRI_EINVAL);
    cr_assert(strstr(tri_error_message(), "--loss-spike-window 1"));
}

Test(fault, fnv1a64_known_values)
{
    cr_assert_eq(tri_fnv1a64("", 0), 0xcbf29ce484222325ULL);
    cr_assert_eq(tri_fnv1a64("a", 1), 0xaf63dc4c8601ec8cULL);
    cr_assert_eq(tri_fnv1a64("foobar", 6), 0x85944171f73967e8ULL);
}

/* ---- agreements on 4 thread ranks ---- */

typedef struct agree_out {
    tri_step_verdict v[4];
    int rc[4];
    char msg[4][512];
} agree_out;

static int agree_rank(int rank, int size, tri_comm *comm, void *arg)
{
    (void)size;
    agree_out *o = arg;
    tri_device *dev = NULL;
    tri_step_guard g;
    int rc = tri_device_cpu_create(&dev, 1);
    if (!rc) rc = tri_step_guard_init(&g, 0, 0.0, 0);
    if (rc)
        return rc;
    g.stop_requested = rank == 1;
    rc = tri_step_guard_agree(&g, comm, rank == 2, &o->v[rank]);
    /* a second step: nobody bad, nobody stopping */
    g.stop_requested = false;
    tri_step_verdict again;
    if (!rc) rc = tri_step_guard_agree(&g, comm, false, &again);
    if (!rc && (again.n_bad != 0 || again.stop))
        rc = TRI_ERR(TRI_EINTERNAL, "rank %d: the second verdict kept %d bad ranks / stop %d", rank, again.n_bad,
                     again.stop);
    tri_step_guard_destroy(&g);
    tri_device_destroy(dev);
    return rc;
}

Test(fault, verdict_reaches_every_rank)
{
    agree_out o;
    memset(&o, 0, sizeof o);
    int rc = tri_run_thread_ranks(4, agree_rank, &o);
    cr_assert_eq(rc, TRI_OK, "%s", tri_error_message());
    for (int r = 0; r < 4; r++) {
        cr_assert_eq(o.v[r].n_bad, 1, "rank %d", r);
        cr_assert_str_eq(o.v[r].bad_ranks, "2", "rank %d", r);
        cr_assert(o.v[r].stop, "rank %d did not see rank 1's stop request", r);
    }
}

static int identity_rank(int rank, int size, tri_comm *comm, void *arg)
{
    (void)size;
    agree_out *o = arg;
    const char *text = rank == 3 ? "world_size=4\nlr=0.001\nseed=1\n" : "world_size=4\nlr=0.0006\nseed=1\n";
    o->rc[rank] = tri_identity_agree(comm, "flags", text);
    snprintf(o->msg[rank], sizeof o->msg[rank], "%s", tri_error_message());
    return TRI_OK;
}

Test(fault, identity_mismatch_names_the_rank_and_line)
{
    agree_out o;
    memset(&o, 0, sizeof o);
    cr_assert_eq(tri_run_thread_ranks(4, identity_rank, &o), TRI_OK, "%s", tri_error_message());
    for (int r = 0; r < 4; r++) {
        cr_assert_eq(o.rc[r], TRI_EINVAL, "rank %d", r);
        cr_assert(strstr(o.msg[r], "the ranks disagree on the flags: rank 3 differs from rank 0"), "rank %d: %s", r,
                  o.msg[r]);
    }
    cr_assert(strstr(o.msg[3], "this rank has 'lr=0.001' where rank 0 has 'lr=0.0006'"), "%s", o.msg[3]);
    cr_assert_null(strstr(o.msg[0], "this rank has"), "%s", o.msg[0]);
}

static int identity_same(int rank, int size, tri_comm *comm, void *arg)
{
    (void)rank;
    (void)size;
    (void)arg;
    return tri_identity_agree(comm, "flags", "world_size=4\nlr=0.0006\n");
}

Test(fault, identity_agreement_passes)
{
    cr_assert_eq(tri_run_thread_ranks(4, identity_same, NULL), TRI_OK, "%s", tri_error_message());
}
