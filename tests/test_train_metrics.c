/* tests/test_train_metrics.c - engine_train's progress figures (tools/cli/train_metrics.h): the
 * duration format of the ETA and the run time, on every branch (seconds, minutes, hours, and "?" for
 * what is no duration), and the ETA at the average pace so far. */
#include <criterion/criterion.h>
#include <math.h>

#include "engine/core/clock.h"
#include "tools/cli/train_metrics.h"

static void expect_duration(double s, const char *want)
{
    char buf[32];
    cr_expect_str_eq(tri_format_duration(s, buf, sizeof buf), want, "%g s", s);
}

Test(train_metrics, duration_format)
{
    expect_duration(0.0, "0.0s");
    expect_duration(3.44, "3.4s");
    expect_duration(59.9, "59.9s");
    expect_duration(60.0, "1m00s");
    expect_duration(123.9, "2m03s");
    expect_duration(3599.0, "59m59s");
    expect_duration(3600.0, "1h00m00s");
    expect_duration(3723.5, "1h02m03s");
    expect_duration(100.0 * 3600 + 59, "100h00m59s");
    /* not a duration: negative, NaN, beyond 1e9 s */
    expect_duration(-1.0, "?");
    expect_duration(NAN, "?");
    expect_duration(2e9, "?");
}

Test(train_metrics, duration_truncates_to_the_buffer)
{
    char buf[4];
    cr_expect_str_eq(tri_format_duration(3723.0, buf, sizeof buf), "1h0");
}

Test(train_metrics, eta_at_the_average_pace)
{
    tri_train_metrics m = {.first_iter = 10, .last_iter = 110};
    cr_expect_eq(tri_train_metrics_eta(&m, 10), 0.0, "no iteration done: no ETA");
    /* 20 of 100 iterations done in about 2 s: 80 left at the same pace, about 8 s (the clock runs
     * on between the start and the call: 4x those seconds more, bounded here by 5 s) */
    m.t_start = tri_now_s() - 2.0;
    double eta = tri_train_metrics_eta(&m, 30);
    cr_expect(eta >= 8.0 && eta < 8.0 + 4.0 * 5.0, "eta %g s, expected 8 s plus 4x the seconds the call took", eta);
}
