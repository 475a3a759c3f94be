#!/usr/bin/python3
"""tests/mixtral_torch_model.py IN.bin OUT.bin - the whole Mixtral model in PyTorch (float64), the
reference tests/test_mixtral.c compares Trident's "mixtral" family (models/llama_moe.c) with.

Written from Hugging Face's documented MixtralForCausalLM math (transformers' modeling_mixtral:
MixtralSparseMoeBlock: router_logits = gate(x); routing_weights = softmax(router_logits) over the E
experts; top-k; divided by their sum; each expert MixtralBlockSparseTop2MLP w2(silu(w1(x)) * w3(x));
the weighted sum; load_balancing_loss_func), not from Trident's code; the attention, norms and head
are tests/llama_torch_model.py's (Mixtral's are Llama's). The auxiliary loss is Hugging Face's
formula applied to each layer and summed over the layers, times router_aux_loss_coef when
output_router_logits (Hugging Face concatenates the layers' router logits before the formula; Megatron-Core
and Trident take each layer's loss, docs/moe.md). IN.bin's "cfg": llama_torch_model.py's numbers,
then num_experts, num_experts_per_tok, moe_intermediate_size, norm_topk_prob, the effective
router_aux_loss_coef (0 without output_router_logits), qwen3 (1: Qwen3-MoE's names and sparse-layer
rule; its per-head q/k norm is llama_torch_model.py's qk_norm), decoder_sparse_step, mlp_only_layers as a bit mask and the shared
expert's width (moe_shared_expert_intermediate_size: Megatron-Core's ungated shared expert, 0 none). The rest as tools/gpt2_torch_reference.py's
reference_run: the objective is the LM loss plus the auxiliary loss, the reported loss the LM loss."""
import os
import sys

import torch
import torch.nn.functional as F

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tools"))
from gpt2_torch_reference import reference_run  # noqa: E402
from llama_torch_model import CFG_KEYS, dense_mlp, llama_forward  # noqa: E402

MOE_KEYS = CFG_KEYS + ["num_experts", "top_k", "moe_intermediate_size", "norm_topk_prob", "aux_coef", "qwen3",
                       "decoder_sparse_step", "mlp_only_mask", "shared"]


def is_sparse(cfg, layer):
    """Qwen3MoeDecoderLayer's rule: not in mlp_only_layers (here a bit mask) and (layer + 1) %
    decoder_sparse_step == 0; Mixtral: every layer."""
    return not (cfg["mlp_only_mask"] >> layer) & 1 and (layer + 1) % cfg["decoder_sparse_step"] == 0


def moe_block(p, pre, z, cfg, layer):
    """MixtralSparseMoeBlock (or Qwen3MoeSparseMoeBlock: the same math under mlp.experts.J.gate_proj /
    up_proj / down_proj, the renormalisation by norm_topk_prob) on z (B, T, C) and this layer's
    auxiliary loss; a dense layer of Qwen3-MoE is LlamaMLP."""
    if not is_sparse(cfg, layer):
        return dense_mlp(p, pre, z, cfg, layer)
    B, T, C = z.shape
    E, K = cfg["num_experts"], cfg["top_k"]
    x = z.reshape(-1, C)
    blk, n1, n2, n3 = (("mlp.", "gate_proj", "down_proj", "up_proj") if cfg["qwen3"]
                       else ("block_sparse_moe.", "w1", "w2", "w3"))
    router_logits = x @ p[pre + blk + "gate.weight"].t()                    # (N, E)
    probs = torch.softmax(router_logits, dim=1)
    weights, selected = torch.topk(probs, K, dim=-1)                        # (N, K)
    if cfg["norm_topk_prob"]:
        weights = weights / weights.sum(dim=-1, keepdim=True)
    y = torch.zeros_like(x)
    for e in range(E):
        rows, slot = torch.where(selected == e)
        if rows.numel() == 0:
            continue
        xe = x[rows]
        w = "%s%sexperts.%d." % (pre, blk, e)
        h = F.silu(xe @ p[w + n1 + ".weight"].t()) * (xe @ p[w + n3 + ".weight"].t())
        y = y.index_add(0, rows, weights[rows, slot, None] * (h @ p[w + n2 + ".weight"].t()))
    # load_balancing_loss_func: the selections' one-hot mean over tokens (K, E), the router
    # probabilities' mean over tokens (E); E * sum(f * P)
    if cfg["shared"]:  # Megatron-Core's shared expert: an always-on, ungated SwiGLU added to the output
        sh = pre + blk + "shared_expert."
        h = F.silu(x @ p[sh + "gate_proj.weight"].t()) * (x @ p[sh + "up_proj.weight"].t())
        y = y + h @ p[sh + "down_proj.weight"].t()
    expert_mask = F.one_hot(selected, E).double()                           # (N, K, E)
    tokens_per_expert = expert_mask.mean(dim=0)
    router_prob_per_expert = probs.mean(dim=0)
    aux = (tokens_per_expert * router_prob_per_expert.unsqueeze(0)).sum() * E
    return y.reshape(B, T, C), cfg["aux_coef"] * aux


def mixtral_forward(p, tokens, cfg):
    return llama_forward(p, tokens, cfg, mlp=moe_block)


if __name__ == "__main__":
    reference_run(sys.argv, mixtral_forward, MOE_KEYS,
                  float_keys=("rms_norm_eps", "rope_theta", "factor", "low_freq_factor", "high_freq_factor",
                              "aux_coef"))
