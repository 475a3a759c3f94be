/* tests/test_layout_flags.c - the layout flags the CLIs share (tools/cli/layout_flags.h): what
 * --attention-backend resolves to on each device and model.
 *
 * auto (the default) is the unfused core on a GPU, the path measured fastest there (GPT-2 124M bf16,
 * 35.3 ms/iter on an H200; the tiled tensor-core kernels have not run on a GPU), the fused core on
 * the CPU and for a model with the fused core only (Llama); flash and unfused are what they say on
 * either device. */
#include <criterion/criterion.h>

#include "engine/core/status.h"
#include "models/model.h"
#include "tools/cli/layout_flags.h"

static const char *GPT = "{\"model_type\": \"gpt2\", \"n_layer\": 2, \"n_head\": 2, \"n_embd\": 32, "
                         "\"vocab_size\": 300, \"n_positions\": 64}";
static const char *LLAMA = "{\"model_type\": \"llama\", \"hidden_size\": 32, \"intermediate_size\": 64, "
                           "\"num_attention_heads\": 2, \"num_hidden_layers\": 2, \"vocab_size\": 300, "
                           "\"max_position_embeddings\": 64}";

/* The backend engine_train would run: `args` parsed as its layout flags, on a GPU or not. */
static tri_attention_backend resolve(const char *json, bool gpu, const char *flag)
{
    tri_model m;
    cr_assert_eq(tri_model_parse(&m, json, "test"), TRI_OK, "%s", tri_error_message());
    tri_cli_layout l;
    tri_cli_layout_defaults(&l);
    tri_flag f[TRI_CLI_LAYOUT_FLAGS + 8]; /* room to find a wrong count below, not overrun it */
    int n = tri_cli_layout_flags(&l, f, 0);
    cr_assert_eq(n, TRI_CLI_LAYOUT_FLAGS, "the layout flags are %d, TRI_CLI_LAYOUT_FLAGS says %d", n,
                 TRI_CLI_LAYOUT_FLAGS);
    char *argv[] = {"test", "--attention-backend", (char *)flag};
    bool help = false;
    cr_assert_eq(tri_flags_parse(f, n, flag ? 3 : 1, argv, &help), TRI_OK, "%s", tri_error_message());
    l.gpu = gpu;
    tri_transformer dims = tri_model_dims(&m);
    tri_train_layout out;
    cr_assert_eq(tri_cli_layout_resolve(&l, f, n, 1, &dims, &out), TRI_OK, "%s", tri_error_message());
    tri_model_free(&m);
    return out.attention;
}

Test(layout_flags, attention_auto_is_the_default)
{
    tri_cli_layout l;
    tri_cli_layout_defaults(&l);
    cr_expect_str_eq(l.attention, "auto");
}

Test(layout_flags, auto_is_unfused_on_a_gpu_flash_on_the_cpu)
{
    cr_expect_eq(resolve(GPT, true, NULL), TRI_ATTENTION_UNFUSED);
    cr_expect_eq(resolve(GPT, false, NULL), TRI_ATTENTION_FLASH);
    cr_expect_eq(resolve(GPT, true, "auto"), TRI_ATTENTION_UNFUSED);
}

Test(layout_flags, auto_keeps_the_fused_core_for_a_model_without_another)
{
    cr_expect_eq(resolve(LLAMA, true, NULL), TRI_ATTENTION_FLASH);
    cr_expect_eq(resolve(LLAMA, false, NULL), TRI_ATTENTION_FLASH);
}

Test(layout_flags, an_explicit_backend_is_kept_on_either_device)
{
    cr_expect_eq(resolve(GPT, true, "flash"), TRI_ATTENTION_FLASH);
    cr_expect_eq(resolve(GPT, false, "unfused"), TRI_ATTENTION_UNFUSED);
}
