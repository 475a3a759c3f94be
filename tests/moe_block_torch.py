#!/usr/bin/env python3
"""tests/moe_block_torch.py MODEL IN OUT [MODEL IN OUT ...] - Hugging Face's sparse MoE block in
PyTorch (float64), the reference tests/test_moe_block.c compares Trident's MoE block (layers/moe.h)
with.

Written from Hugging Face's documented MixtralSparseMoeBlock / Qwen3MoeSparseMoeBlock forward, not
from Trident's code: router_logits = gate(x); routing_weights = softmax(router_logits, dim=1,
dtype=float); top-k; renormalised to sum 1 (mixtral always; qwen3_moe when norm_topk_prob, here
false); for each expert with tokens, its MLP w2(silu(w1 x) * w3 x) times the token's routing weight,
index_add_ into the output. IN holds meta [N, C, E, K, I, norm], x (N, C), gate (E, C), gate_up
(E, 2I, C) (each expert's w1 rows then its w3 rows, Trident's stacking), down (E, C, I) (w2) and g
(N, C). OUT receives y (N, C) and the gradients of L = sum(y * g): dx, d_gate, d_gate_up (stacked as
gate_up) and d_down. Records: tools/gpt2_torch_reference.py's format."""
import os
import sys

import torch
import torch.nn.functional as F

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tools"))
from gpt2_torch_reference import read_records, run_jobs, write_records  # noqa: E402


def sparse_moe_block(x, gate, w1, w3, w2, top_k, norm_topk_prob):
    """MixtralSparseMoeBlock.forward (transformers 4.4x), one sequence of N tokens."""
    num_experts = gate.shape[0]
    router_logits = x @ gate.t()
    routing_weights = F.softmax(router_logits, dim=1, dtype=torch.double)
    routing_weights, selected_experts = torch.topk(routing_weights, top_k, dim=-1)
    if norm_topk_prob:
        routing_weights = routing_weights / routing_weights.sum(dim=-1, keepdim=True)
    final = torch.zeros_like(x)
    expert_mask = F.one_hot(selected_experts, num_classes=num_experts).permute(2, 1, 0)
    for e in range(num_experts):
        idx, top_x = torch.where(expert_mask[e])
        if top_x.numel() == 0:
            continue
        state = x[top_x]
        out = (F.silu(state @ w1[e].t()) * (state @ w3[e].t())) @ w2[e].t()
        final = final.index_add(0, top_x, out * routing_weights[top_x, idx, None])
    return final


def run(model, inp, out):
    r = read_records(inp)
    N, C, E, K, I, norm = (int(v) for v in r["meta"])
    if model == "mixtral":
        norm = 1
    t = lambda name: torch.tensor(r[name], dtype=torch.double, requires_grad=True)  # noqa: E731
    x, gate, gate_up, down = t("x"), t("gate"), t("gate_up"), t("down")
    g = torch.tensor(r["g"], dtype=torch.double)
    w1, w3 = gate_up[:, :I, :], gate_up[:, I:, :]
    y = sparse_moe_block(x, gate, w1, w3, down, K, bool(norm))
    (y * g).sum().backward()
    write_records(out, [("y", y.detach().numpy()), ("dx", x.grad.numpy()), ("d_gate", gate.grad.numpy()),
                        ("d_gate_up", gate_up.grad.numpy()), ("d_down", down.grad.numpy())])


if __name__ == "__main__":
    run_jobs(run, sys.argv[1:])
