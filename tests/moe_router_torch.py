#!/usr/bin/env python3
"""tests/moe_router_torch.py MODEL IN OUT [MODEL IN OUT ...] - the Mixture-of-Experts router in
PyTorch (float64), the reference tests/test_moe_router.c compares Trident's router ops with.

Written from Hugging Face's documented routing, not from Trident's code:
  mixtral     (MixtralSparseMoeBlock) softmax over all experts, top-k, renormalised to sum 1;
  qwen3_moe   (Qwen3MoeSparseMoeBlock, norm_topk_prob False) softmax, top-k, not renormalised;
  deepseek_v3 (DeepseekV3TopkRouter, n_group = topk_group = 1, routed_scaling_factor 1) sigmoid,
              top-k of sigmoid + e_score_correction_bias, weights the unbiased sigmoid scores
              divided by their sum + 1e-20.
The auxiliary loss is transformers' load_balancing_loss_func (softmax over all experts, top-k,
tokens_per_expert = mean of the one-hot selections (K, E), router_prob_per_expert = mean of the
softmax, sum of their product times num_experts) times router_aux_loss_coef (not for deepseek_v3);
the z-loss is ST-MoE's coefficient * mean(logsumexp(logits)^2). IN holds meta [N, E, K, aux coef,
z coef, with_bias], logits (N, E), R (N, K) and, with_bias, bias (E). OUT receives idx (N, K) (in
descending order of the selection key), w (N, K), aux, z and d_logits, the gradient of
L = sum(w * R) + aux + z. Records: tools/gpt2_torch_reference.py's format."""
import os
import sys

import torch
import torch.nn.functional as F

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tools"))
from gpt2_torch_reference import read_records, run_jobs, write_records  # noqa: E402


def load_balancing_loss_func(gate_logits, num_experts, top_k):
    routing_weights = F.softmax(gate_logits, dim=-1)
    _, selected_experts = torch.topk(routing_weights, top_k, dim=-1)
    expert_mask = F.one_hot(selected_experts, num_experts)
    tokens_per_expert = torch.mean(expert_mask.double(), dim=0)
    router_prob_per_expert = torch.mean(routing_weights, dim=0)
    overall_loss = torch.sum(tokens_per_expert * router_prob_per_expert.unsqueeze(0))
    return overall_loss * num_experts


def route(model, logits, K, bias):
    if model == "deepseek_v3":
        scores = logits.sigmoid()
        key = scores + bias.unsqueeze(0)
        _, idx = torch.topk(key, k=K, dim=-1, sorted=False)
        # sorted=False leaves the order open: put the selections in descending key order
        order = torch.argsort(key.gather(1, idx), dim=-1, descending=True)
        idx = idx.gather(1, order)
        w = scores.gather(1, idx)
        return idx, w / (w.sum(dim=-1, keepdim=True) + 1e-20)
    probs = F.softmax(logits, dim=1, dtype=torch.double)
    w, idx = torch.topk(probs, K, dim=-1)
    if model == "mixtral":
        w = w / w.sum(dim=-1, keepdim=True)
    return idx, w


def run(model, inp, out):
    r = read_records(inp)
    N, E, K, aux_coef, z_coef, with_bias = r["meta"]
    N, E, K = int(N), int(E), int(K)
    logits = torch.tensor(r["logits"], dtype=torch.double, requires_grad=True)
    R = torch.tensor(r["R"], dtype=torch.double)
    bias = torch.tensor(r["bias"], dtype=torch.double) if with_bias else torch.zeros(E, dtype=torch.double)
    idx, w = route(model, logits, K, bias)
    aux = torch.zeros((), dtype=torch.double)
    if model != "deepseek_v3":
        aux = aux_coef * load_balancing_loss_func(logits, E, K)
    z = z_coef * torch.mean(torch.square(torch.logsumexp(logits, dim=-1)))
    L = (w * R).sum() + aux + z
    L.backward()
    write_records(out, [("idx", idx.double().numpy()), ("w", w.detach().numpy()), ("aux", aux.detach().reshape(1).numpy()),
                        ("z", z.detach().reshape(1).numpy()), ("d_logits", logits.grad.numpy())])


if __name__ == "__main__":
    run_jobs(run, sys.argv[1:])
