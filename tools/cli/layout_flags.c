/* tools/cli/layout_flags.c - the layout flags the tools share (see layout_flags.h). */
#include "tools/cli/layout_flags.h"

#include <string.h>

#include "engine/core/status.h"
#include "engine/device/ops/moe_router_math.h"

void tri_cli_layout_defaults(tri_cli_layout *l)
{
    memset(l, 0, sizeof *l);
    l->req = (tri_layout_request){.num_gpus = 1, .tp = 1, .pp = 1, .cp = 1, .ep = 1, .etp = 1, .micro_batch = 4,
                                  .global_batch = 0,
                                  .seq_length = 64, .first_layers = -1, .last_layers = -1};
    l->schedule = "1f1b";
    l->recompute = "none";
    l->attention = "auto";
    l->cp_comm_type = "p2p";
    l->moe_aux_loss_coeff = -1.0f;
    l->moe_drop_policy = "probs";
    l->moe_score_function = "softmax";
    l->moe_bias_rate = 1e-3f;
}

#define FLAG(name, kind, dst, help, lo, hi) {name, kind, dst, help, lo, hi, NULL, false}
#define CHOICE(name, dst, choices, help) {name, TRI_FLAG_CHOICE, dst, help, 0, 0, choices, false}

int tri_cli_layout_flags(tri_cli_layout *l, tri_flag *f, int n)
{
    tri_layout_request *r = &l->req;
    f[n++] = (tri_flag)FLAG("tensor-model-parallel-size", TRI_FLAG_INT, &r->tp, "tensor-parallel size (tp): divides n_head and the ranks", 1, 1 << 20);
    f[n++] = (tri_flag)FLAG("pipeline-model-parallel-size", TRI_FLAG_INT, &r->pp, "pipeline-parallel size (pp); data-parallel size dp = ranks / (tp x cp x pp)", 1, 1 << 20);
    f[n++] = (tri_flag)FLAG("context-parallel-size", TRI_FLAG_INT, &r->cp, "context-parallel size (cp): each sequence is cut in 2 x cp chunks of seq-length / (2 cp) rows (a multiple of 64), cp rank i holding chunks i and 2cp-1-i (Megatron-Core's split); ranks ordered tp-cp-dp-pp; needs the fused attention", 1, 1 << 20);
    f[n++] = (tri_flag)CHOICE("cp-comm-type", &l->cp_comm_type, "p2p|all_gather", "context-parallel key/value exchange: p2p = a ring passing key/value blocks while the previous block computes; all_gather = key/value gathered once per layer (Llama 3's choice with grouped-query attention)");
    f[n++] = (tri_flag)FLAG("expert-model-parallel-size", TRI_FLAG_INT, &r->ep, "expert-parallel size (ep; mixture-of-experts models): each ep rank holds num_experts / ep experts; a stage's tp x dp ranks regroup as etp x ep x expert-data-parallel (Megatron-Core's parallel folding)", 1, 1 << 20);
    f[n++] = (tri_flag)FLAG("expert-tensor-parallel-size", TRI_FLAG_INT, &r->etp, "expert tensor-parallel size (etp): splits each expert's width; etp x ep divides tp x dp", 1, 1 << 20);
    f[n++] = (tri_flag)CHOICE("pipeline-schedule", &l->schedule, "1f1b|gpipe|interleaved|zb-h1", "pipeline schedule (Narayanan et al. 2021; zb-h1, Qi et al. 2023, is modelled by the partitioner only); interleaved when --num-layers-per-virtual-pipeline-stage is given");
    f[n++] = (tri_flag)FLAG("num-layers-per-virtual-pipeline-stage", TRI_FLAG_INT, &r->layers_per_virtual_stage, "layers per model chunk with the interleaved schedule (0: none)", 0, 1 << 20);
    f[n++] = (tri_flag)FLAG("decoder-first-pipeline-num-layers", TRI_FLAG_INT, &r->first_layers, "layers of the first pipeline stage (-1: balanced)", -1, 1 << 20);
    f[n++] = (tri_flag)FLAG("decoder-last-pipeline-num-layers", TRI_FLAG_INT, &r->last_layers, "layers of the last pipeline stage (-1: balanced)", -1, 1 << 20);
    f[n++] = (tri_flag)FLAG("micro-batch-size", TRI_FLAG_INT64, &r->micro_batch, "sequences per micro-batch (B)", 1, 1 << 20);
    f[n++] = (tri_flag)FLAG("global-batch-size", TRI_FLAG_INT64, &r->global_batch, "sequences per iteration, a multiple of micro-batch-size x dp (0: micro-batch-size x dp)", 0, 1e12);
    f[n++] = (tri_flag)FLAG("seq-length", TRI_FLAG_INT64, &r->seq_length, "sequence length (T), at most n_positions", 1, 1 << 24);
    f[n++] = (tri_flag)FLAG("zero-stage", TRI_FLAG_INT, &r->zero_stage, "ZeRO stage (Rajbhandari et al. 2020): 0 none, 1 optimizer state, 2 + gradients, 3 + parameters sharded over data-parallel ranks (with --expert-model-parallel-size, an ep rank's experts over its expert-data-parallel group, Megatron-Core's rule)", 0, 3);
    f[n++] = (tri_flag)CHOICE("recompute-granularity", &l->recompute, "none|selective|full", "activation recomputation (Korthikanti et al. 2022): selective drops the attention softmax (only the unfused attention stores one: with flash it changes nothing), full keeps only block outputs");
    f[n++] = (tri_flag)CHOICE("attention-backend", &l->attention, "auto|flash|unfused", "attention core: flash = fused causal attention (FlashAttention-2, Dao 2023), no (T, T) matrix, memory linear in seq-length; unfused = the materialised softmax through the GEMMs; auto = unfused on a GPU, the path measured fastest there (GPT-2 124M bf16, 35.3 ms/iter on an H200, 2026-11-27; the tiled tensor-core flash kernels have not run on a GPU yet), flash on the CPU and for models with the fused core only (Llama)");
    f[n++] = (tri_flag)FLAG("sequence-parallel", TRI_FLAG_BOOL, &r->sequence_parallel, "shard layernorm/residual activations along the sequence (needs tp > 1 and seq-length divisible by tp)", 0, 0);
    f[n++] = (tri_flag)FLAG("bf16", TRI_FLAG_BOOL, &l->bf16, "bf16 mixed precision: bf16 weights and activations computed in fp32, fp32 gradients, master weights and AdamW moments (in the ZeRO shard)", 0, 0);
    f[n++] = (tri_flag)FLAG("deterministic-mode", TRI_FLAG_BOOL, &r->deterministic, "sum gradients, norms and losses in exact fixed point: bit-identical results for every pp, dp, ZeRO stage, micro-batch count and rerun at a given tp", 0, 0);
    f[n++] = (tri_flag)FLAG("overlap-grad-reduce", TRI_FLAG_BOOL, &r->overlap_grad_reduce, "start each gradient reduce-scatter/all-reduce during the backward, as soon as its bucket is complete (non-blocking collectives)", 0, 0);
    f[n++] = (tri_flag)FLAG("overlap-param-gather", TRI_FLAG_BOOL, &r->overlap_param_gather, "overlap parameter all-gathers with the forward: after the update (ZeRO 1-2), one unit ahead (ZeRO 3)", 0, 0);
    /* the MoE block's (models with experts; docs/moe.md) */
    f[n++] = (tri_flag)FLAG("moe-aux-loss-coeff", TRI_FLAG_FLOAT, &l->moe_aux_loss_coeff, "MoE load-balancing (Switch/GShard) loss coefficient in Megatron-Core's units, i.e. Hugging Face's router_aux_loss_coef x num_experts_per_tok (-1: the config's, 0 when output_router_logits is false)", -1, 1e6);
    f[n++] = (tri_flag)FLAG("moe-z-loss-coeff", TRI_FLAG_FLOAT, &l->moe_z_loss_coeff, "MoE router z-loss coefficient (ST-MoE, Zoph et al. 2022)", 0, 1e6);
    f[n++] = (tri_flag)FLAG("moe-expert-capacity-factor", TRI_FLAG_FLOAT, &l->moe_capacity_factor, "MoE expert capacity as a multiple of the even share N x top-k / experts; selections over it are dropped and pass through the residual (0: dropless)", 0, 1e6);
    f[n++] = (tri_flag)CHOICE("moe-token-drop-policy", &l->moe_drop_policy, "probs|position", "with a capacity, which selections an expert keeps: the largest router weights (probs) or the earliest tokens (position)");
    f[n++] = (tri_flag)CHOICE("moe-router-score-function", &l->moe_score_function, "softmax|sigmoid", "router scores: softmax (Mixtral, Qwen3-MoE) or sigmoid (DeepSeek-V3)");
    f[n++] = (tri_flag)FLAG("moe-router-enable-expert-bias", TRI_FLAG_BOOL, &l->moe_expert_bias, "DeepSeek-V3's auxiliary-loss-free load balancing: a per-expert bias (checkpoint key model.layers.N.mlp.gate.e_score_correction_bias) added to the router scores for the top-k selection only, updated after each optimizer step by --moe-router-bias-update-rate x sign(mean load - expert load) from the step's token counts", 0, 0);
    f[n++] = (tri_flag)FLAG("moe-router-bias-update-rate", TRI_FLAG_FLOAT, &l->moe_bias_rate, "the expert bias's step per iteration (DeepSeek-V3's gamma; needs --moe-router-enable-expert-bias)", 0, 1e6);
    return n;
}

int tri_cli_layout_resolve(tri_cli_layout *l, const tri_flag *f, int nf, int num_gpus, const tri_transformer *m,
                           tri_train_layout *out)
{
    tri_layout_request *r = &l->req;
    const tri_flag *sched = tri_flags_find(f, nf, "pipeline-schedule");
    r->num_gpus = num_gpus;
    r->cp_comm_type = l->cp_comm_type;
    r->schedule = sched && sched->seen ? l->schedule : NULL;
    r->recompute = strcmp(l->recompute, "full") == 0        ? TRI_RECOMPUTE_FULL
                   : strcmp(l->recompute, "selective") == 0 ? TRI_RECOMPUTE_SELECTIVE
                                                            : TRI_RECOMPUTE_NONE;
    r->precision = l->bf16 ? TRI_PRECISION_BF16 : TRI_PRECISION_FP32;
    r->attention = strcmp(l->attention, "unfused") == 0 ? TRI_ATTENTION_UNFUSED
                   : strcmp(l->attention, "flash") == 0 || r->cp > 1 ? TRI_ATTENTION_FLASH /* auto: cp needs it */
                                                                   : tri_cli_attention_auto(l->gpu, m);
    const tri_flag *cap = tri_flags_find(f, nf, "moe-expert-capacity-factor");
    if (cap && cap->seen && !(l->moe_capacity_factor > 0))
        return TRI_ERR(TRI_EINVAL, "--moe-expert-capacity-factor %g: a capacity factor must be positive (leave the "
                       "flag out for dropless routing)", (double)l->moe_capacity_factor);
    const tri_flag *rate = tri_flags_find(f, nf, "moe-router-bias-update-rate");
    if (rate && rate->seen && !l->moe_expert_bias)
        return TRI_ERR(TRI_EINVAL, "--moe-router-bias-update-rate %g needs --moe-router-enable-expert-bias (there is no "
                       "expert bias to update without it)", (double)l->moe_bias_rate);
    if (rate && rate->seen && !(l->moe_bias_rate > 0))
        return TRI_ERR(TRI_EINVAL, "--moe-router-bias-update-rate %g: the rate must be positive", (double)l->moe_bias_rate);
    int rc = tri_layout_resolve(m, r, out);
    /* also when the layout is refused: partitioner --search tries its own around the request */
    out->moe = (tri_moe_run){.aux_loss_coeff_set = l->moe_aux_loss_coeff >= 0,
                                 .aux_loss_coeff = l->moe_aux_loss_coeff >= 0 ? l->moe_aux_loss_coeff : 0,
                                 .z_loss_coeff = l->moe_z_loss_coeff, .capacity_factor = l->moe_capacity_factor,
                                 .drop_policy = strcmp(l->moe_drop_policy, "position") == 0 ? TRI_MOE_DROP_POSITION
                                                                                            : TRI_MOE_DROP_PROBS,
                                 .score_func = strcmp(l->moe_score_function, "sigmoid") == 0 ? TRI_MOE_SIGMOID
                                                                                             : TRI_MOE_SOFTMAX,
                                 .expert_bias = l->moe_expert_bias, .bias_update_rate = l->moe_bias_rate};
    return rc;
}

tri_attention_backend tri_cli_attention_auto(bool gpu, const tri_transformer *m)
{
    return gpu && !m->fused_attention_only ? TRI_ATTENTION_UNFUSED : TRI_ATTENTION_FLASH;
}

int tri_cli_model_layout(const tri_model *m, tri_layout_request r, tri_train_layout *out)
{
    tri_transformer dims = tri_model_dims(m);
    return tri_layout_resolve(&dims, &r, out);
}
