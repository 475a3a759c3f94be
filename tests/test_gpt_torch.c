/* tests/test_gpt_torch.c - the whole GPT-2 against PyTorch (Debian's python3-torch).
 *
 * A small GPT-2 is built by Trident on one rank; its initial weights and token batches are written
 * to a file, tools/gpt2_torch_reference.py rebuilds the same model from them with torch in float64
 * and returns the logits, the loss, every parameter's gradient and the losses of 10 AdamW steps
 * (with gradient clipping and a warm-up + cosine learning rate): tests/torch_compare.h. Trident runs
 * in fp32, so differences are Trident's rounding: everything must agree within 1e-5 relative (per
 * tensor: max |a - b| / max |b|), as the Llama's (tests/test_llama_torch.c), 15 times the worst
 * measured (6.4e-7) and tight enough to tell GELU's tanh form from the exact one (1.4e-5 in the
 * logits, 9.6e-5 in the gradients); llm.c's test_gpt2.c checks its PyTorch dump the same way. */
#include <criterion/criterion.h>
#include <math.h>

#include "engine/core/status.h"
#include "models/gpt.h"
#include "tests/torch_compare.h"

#define TOL 1e-5

Test(gpt_torch, matches_pytorch_forward_backward_and_adamw, .timeout = 300)
{
    tri_gpt_config cfg = {.n_layer = 2, .n_head = 4, .n_embd = 64, .vocab_size = 300, .n_positions = 32,
                          .init_std = 0.02f, .name = "torch-test"};
    tri_model model = tri_gpt_model(&cfg);
    double numbers[] = {cfg.n_layer, cfg.n_head, cfg.n_embd, cfg.vocab_size, cfg.n_positions};
    tu_torch_case c = {.model = &model, .script = "tools/gpt2_torch_reference.py", .cfg = numbers,
                       .ncfg = sizeof numbers / sizeof *numbers, .scratch = "gpt_torch"};
    tu_torch_errors e;
    cr_assert_eq(tu_torch_compare(&c, &e), TRI_OK, "%s", tri_error_message());
    cr_log_info("logits %.3g, loss %.3g, gradients %.3g (%s), AdamW step losses %.3g (loss %.4f -> %.4f, "
                "ln V = %.4f)", e.logits, e.loss, e.grads, e.worst_grad, e.steps, e.ref_first, e.ref_last,
                log((double)cfg.vocab_size));
    cr_expect_lt(e.logits, TOL, "logits differ from PyTorch: %g", e.logits);
    cr_expect_lt(e.loss, TOL, "the loss differs from PyTorch: %g", e.loss);
    cr_expect_lt(e.grads, TOL, "the gradient of %s differs from PyTorch: %g", e.worst_grad, e.grads);
    cr_expect_lt(e.steps, TOL, "a step's loss differs from PyTorch: %g", e.steps);
    cr_expect_lt(e.ref_last, e.ref_first - 0.05, "the loss should fall over the steps");
}
