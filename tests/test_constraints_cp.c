/* tests/test_constraints_cp.c - the validator's context-parallel rules (partitioner/constraints.h) and
 * the flags that ask for them (tools/cli/layout_flags.h): each refusal names its rule, the values and
 * the nearest valid ones, before any communication; valid cp layouts resolve with dp = ranks / (tp cp pp)
 * and the comm type asked; a mixture of experts folds tp x cp x dp (its refusal counts cp in the stage).
 * The rules: tp x cp x pp divides the ranks; seq-length splits into 2 cp chunks, each a multiple of the
 * fused attention's 64-row tile; the fused attention; sequence parallelism's local rows T / cp split over
 * tp; --cp-comm-type p2p or all_gather. */
#include <criterion/criterion.h>
#include <string.h>

#include "engine/core/status.h"
#include "models/block_cost.h"
#include "models/model.h"
#include "partitioner/constraints.h"
#include "tests/gpt_outline.h"
#include "tools/cli/layout_flags.h"

TU_GPT_MODEL(GPT2, 12, 12, 768, 50257, 131072);
/* 6 heads: tp 3 splits them, so the sequence-parallel rule can fail on the local rows */
TU_GPT_MODEL(SIX, 4, 6, 384, 256, 4096);

static tri_layout_request request(int gpus, int tp, int cp, int pp, int64_t T)
{
    return (tri_layout_request){.num_gpus = gpus, .tp = tp, .cp = cp, .pp = pp, .micro_batch = 1,
                                .global_batch = 0, .seq_length = T, .first_layers = -1, .last_layers = -1};
}

static void refused(const tri_transformer *m, tri_layout_request r, const char *a, const char *b)
{
    tri_train_layout l;
    cr_assert_eq(tri_layout_resolve(m, &r, &l), TRI_EINVAL, "expected a refusal containing '%s'", a);
    cr_expect(strstr(tri_error_message(), a), "message '%s' lacks '%s'", tri_error_message(), a);
    cr_expect(strstr(tri_error_message(), b), "message '%s' lacks '%s'", tri_error_message(), b);
}

Test(constraints_cp, refusals_name_the_rule_and_the_values)
{
    refused(&GPT2, request(8, 2, 3, 1, 4096),
            "--tensor-model-parallel-size 2 x --context-parallel-size 3 x --pipeline-model-parallel-size 1 = 6 "
            "does not divide the 8 ranks", "nearest valid context-parallel sizes: 2, 4");
    refused(&GPT2, request(2, 1, -1, 1, 4096), "--context-parallel-size -1: must be >= 1", "nearest valid: 1");
    /* 4094 = 2 mod 4: not 2 x cp chunks; nearest multiples of 2 x 2 x 64 = 256 */
    refused(&GPT2, request(2, 1, 2, 1, 4094), "--seq-length 4094 does not split into 2 x --context-parallel-size 2 = "
            "4 chunks", "nearest valid (chunks of a multiple of 64 rows): 3840, 4096");
    /* 4 | 4000 but Tc = 1000 is not a multiple of 64 */
    refused(&GPT2, request(2, 1, 2, 1, 4000), "each of the 2 x cp chunks has 1000 rows, expected a multiple of the "
            "fused attention's 64-row tile", "2 x cp x 64 = 256; nearest valid: 3840, 4096");
    tri_layout_request r = request(2, 1, 2, 1, 4096);
    r.attention = TRI_ATTENTION_UNFUSED;
    refused(&GPT2, r, "--context-parallel-size 2 needs the fused attention: --attention-backend unfused has no "
            "block merge", "nearest valid: --attention-backend flash, or --context-parallel-size 1");
    r = request(2, 1, 2, 1, 4096);
    r.cp_comm_type = "ring";
    refused(&GPT2, r, "--cp-comm-type ring: expected p2p", "nearest valid: p2p, all_gather");
    /* tp 3 cp 3, T = 384 (3 | T, 2 x 3 x 64 | T): the local rows 128 do not split over tp 3; the next
       multiples of 2 cp 64 tp = 1152 */
    r = request(9, 3, 3, 1, 384);
    r.sequence_parallel = true;
    refused(&SIX, r, "--sequence-parallel with --context-parallel-size 3 needs a rank's 128 local rows (--seq-length "
            "384 / cp) divisible by --tensor-model-parallel-size 3", "nearest valid seq-length: 1152");
}

Test(constraints_cp, valid_layouts_resolve)
{
    tri_train_layout l;
    tri_layout_request r = request(32, 2, 4, 2, 131072);
    r.cp_comm_type = "all_gather";
    r.sequence_parallel = true;
    cr_assert_eq(tri_layout_resolve(&GPT2, &r, &l), TRI_OK, "%s", tri_error_message());
    cr_expect_eq(l.cp, 4);
    cr_expect_eq(l.dp, 2);
    cr_expect_eq(l.cp_comm_type, TRI_CP_COMM_ALL_GATHER);
    cr_expect_eq(tri_layout_check_model(&GPT2, &l), TRI_OK, "%s", tri_error_message());
    r = request(4, 1, 2, 1, 256); /* the smallest: 2 chunks of 64 rows per rank */
    cr_assert_eq(tri_layout_resolve(&GPT2, &r, &l), TRI_OK, "%s", tri_error_message());
    cr_expect_eq(l.cp, 2);
    cr_expect_eq(l.dp, 2);
    cr_expect_eq(l.cp_comm_type, TRI_CP_COMM_P2P);
    /* cp 1 (or unset) is today's layout */
    r = request(4, 2, 0, 1, 64);
    cr_assert_eq(tri_layout_resolve(&GPT2, &r, &l), TRI_OK, "%s", tri_error_message());
    cr_expect_eq(l.cp, 1);
    cr_expect_eq(l.dp, 2);
}

/* a mixture of experts: the stage's tp x cp x dp ranks fold as etp x ep x edp */
static void moe_block(const void *cfg, const tri_train_layout *l, tri_block_cost *out)
{
    tri_decoder_block_cost(cfg, l, out);
}

Test(constraints_cp, experts_fold_cp_into_the_stage)
{
    static const tri_decoder_block b = {.C = 256, .NH = 4, .NH_kv = 4, .HS = 64, .F = 512, .gated_mlp = true,
                                        .norm = TRI_NORM_RMSNORM, .rotary = true, .tensors = 10, .sparse = true,
                                        .E = 8, .K = 2, .I = 128};
    tri_transformer m = {.n_layer = 2, .n_head = 4, .n_embd = 256, .vocab_size = 256, .n_positions = 4096,
                         .n_kv_head = 4, .n_experts = 8, .experts_per_tok = 2, .final_norm = TRI_NORM_RMSNORM,
                         .untied_head = true, .fused_attention_only = true, .block_cost = moe_block, .cfg = &b};
    tri_train_layout l;
    tri_layout_request r = request(4, 1, 2, 1, 256);
    r.ep = 4; /* tp 1 x cp 2 x dp 2 = 4 ranks: ep 4 spans cp and dp */
    cr_assert_eq(tri_layout_resolve(&m, &r, &l), TRI_OK, "%s", tri_error_message());
    cr_expect_eq(l.ep, 4);
    r.ep = 8; /* E 8 divides, the stage's 4 ranks do not */
    refused(&m, r, "does not divide a pipeline stage's tp x cp x dp = 1 x 2 x 2 = 4 ranks",
            "nearest valid expert-model-parallel sizes: 4");
}

/* --context-parallel-size and --cp-comm-type are layout flags (both CLIs, in -h); --attention-backend
   auto takes the fused core under cp; an unknown comm type is refused by the parser naming the flag,
   the value and the choices */
Test(constraints_cp, flags_parse_and_resolve)
{
    tri_model m;
    cr_assert_eq(tri_model_parse(&m, "{\"model_type\": \"gpt2\", \"n_layer\": 2, \"n_head\": 2, \"n_embd\": 32, "
                                      "\"vocab_size\": 300, \"n_positions\": 512}", "test"),
                 TRI_OK, "%s", tri_error_message());
    tri_cli_layout cl;
    tri_cli_layout_defaults(&cl);
    tri_flag f[TRI_CLI_LAYOUT_FLAGS];
    int n = tri_cli_layout_flags(&cl, f, 0);
    cr_assert_eq(n, TRI_CLI_LAYOUT_FLAGS);
    char *argv[] = {"test", "--context-parallel-size", "2", "--cp-comm-type", "all_gather", "--seq-length", "256"};
    bool help = false;
    cr_assert_eq(tri_flags_parse(f, n, 7, argv, &help), TRI_OK, "%s", tri_error_message());
    tri_transformer dims = tri_model_dims(&m);
    tri_train_layout out;
    cr_assert_eq(tri_cli_layout_resolve(&cl, f, n, 4, &dims, &out), TRI_OK, "%s", tri_error_message());
    cr_expect_eq(out.cp, 2);
    cr_expect_eq(out.dp, 2);
    cr_expect_eq(out.cp_comm_type, TRI_CP_COMM_ALL_GATHER);
    /* --attention-backend auto on a GPU is the unfused core for GPT-2, but the fused one under cp */
    cl.gpu = true;
    cr_assert_eq(tri_cli_layout_resolve(&cl, f, n, 4, &dims, &out), TRI_OK, "%s", tri_error_message());
    cr_expect_eq(out.attention, TRI_ATTENTION_FLASH);
    cl.req.cp = 1;
    cr_assert_eq(tri_cli_layout_resolve(&cl, f, n, 4, &dims, &out), TRI_OK, "%s", tri_error_message());
    cr_expect_eq(out.attention, TRI_ATTENTION_UNFUSED);
    tri_cli_layout_defaults(&cl);
    n = tri_cli_layout_flags(&cl, f, 0);
    char *bad[] = {"test", "--cp-comm-type", "ring"};
    cr_assert_eq(tri_flags_parse(f, n, 3, bad, &help), TRI_EINVAL);
    cr_expect(strstr(tri_error_message(), "--cp-comm-type ring: expected one of p2p|all_gather"), "%s",
              tri_error_message());
    tri_model_free(&m);
}
