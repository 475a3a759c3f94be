/* tests/test_recompute.c - activation recomputation changes memory, not numbers.
 *
 * Selective recomputation (the unfused attention's softmax) and full recomputation (whole blocks,
 * their TP communication included) rebuild activations with the same operations on the same
 * inputs, so a run trains bit-identically to one that keeps everything, here with tensor (and
 * sequence) and pipeline parallelism; and the planned activation memory shrinks. The fused
 * attention (the default) stores no softmax: selective recomputation then plans exactly what none
 * plans and trains the same bits; full still shrinks the plan. */
#include <criterion/criterion.h>
#include <stdlib.h>
#include <string.h>

#include "engine/core/status.h"
#include "models/gpt.h"
#include "tests/harness.h"

enum { B = 2, T = 8, STEPS = 3 };

static void check_with(int tp, int pp, bool sp, int recompute, int attention)
{
    tri_gpt_config cfg = tu_tiny_config();
    int32_t *w = tu_make_windows((int64_t)STEPS * B * 4, T, cfg.vocab_size, 23);
    tu_layout keep = {.tp = tp, .pp = pp, .sp = sp, .n_micro = 4, .attention = attention};
    tu_layout re = keep;
    re.recompute = recompute;
    tu_result a, b;
    cr_assert_eq(tu_run_gpt(&cfg, B, T, &keep, w, STEPS, &a), TRI_OK, "%s", tri_error_message());
    cr_assert_eq(tu_run_gpt(&cfg, B, T, &re, w, STEPS, &b), TRI_OK, "%s", tri_error_message());
    cr_expect(memcmp(a.losses, b.losses, sizeof a.losses) == 0, "losses differ with recomputation %d", recompute);
    for (int i = 0; i < a.n; i++) {
        cr_expect(memcmp(a.grads[i], b.grads[i], (size_t)a.numel[i] * sizeof(float)) == 0,
                  "recompute %d: gradient of %s differs", recompute, a.names[i]);
        cr_expect(memcmp(a.weights[i], b.weights[i], (size_t)a.numel[i] * sizeof(float)) == 0,
                  "recompute %d: final %s differs", recompute, a.names[i]);
    }
    if (recompute == TRI_RECOMPUTE_SELECTIVE && attention == TRI_ATTENTION_FLASH)
        cr_expect_eq(b.activation_bytes, a.activation_bytes, "selective with flash: nothing to drop");
    else
        cr_expect_lt(b.activation_bytes, a.activation_bytes, "recomputation should plan fewer activation bytes");
    cr_log_info("tp=%d pp=%d sp=%d recompute %s: bit-identical; rank 0 activations %.2f -> %.2f MiB", tp, pp, sp,
                recompute == TRI_RECOMPUTE_FULL ? "full" : "selective", (double)a.activation_bytes / 1048576.0,
                (double)b.activation_bytes / 1048576.0);
    tu_result_free(&a);
    tu_result_free(&b);
    free(w);
}

static void check(int tp, int pp, bool sp, int recompute)
{
    check_with(tp, pp, sp, recompute, TRI_ATTENTION_UNFUSED);
}

Test(recompute, selective_one_rank) { check(1, 1, false, TRI_RECOMPUTE_SELECTIVE); }
Test(recompute, selective_flash_changes_nothing) { check_with(2, 2, true, TRI_RECOMPUTE_SELECTIVE, TRI_ATTENTION_FLASH); }
Test(recompute, full_flash_tp2_pp2) { check_with(2, 2, false, TRI_RECOMPUTE_FULL, TRI_ATTENTION_FLASH); }
Test(recompute, full_one_rank) { check(1, 1, false, TRI_RECOMPUTE_FULL); }
Test(recompute, selective_tp2_sp_pp2) { check(2, 2, true, TRI_RECOMPUTE_SELECTIVE); }
Test(recompute, full_tp2_sp_pp2) { check(2, 2, true, TRI_RECOMPUTE_FULL); }
Test(recompute, full_tp2_pp2) { check(2, 2, false, TRI_RECOMPUTE_FULL); }
