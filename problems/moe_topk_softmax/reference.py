"""MoE router: softmax over expert logits, the top-k experts per token and their weights,
optionally renormalised over the k chosen (vLLM's topk_softmax). Returns (weights fp32 [T, k],
expert ids int32 [T, k]), in descending weight order."""

import torch
import torch.nn as nn


class Model(nn.Module):
    def __init__(self, top_k: int, renormalize: bool = True):
        super().__init__()
        self.top_k = top_k
        self.renormalize = renormalize

    def forward(self, logits: torch.Tensor):
        lf = logits.float()
        # Select on the logits (softmax is monotonic), so rounding in exp cannot create ties.
        top_logits, ids = torch.topk(lf, self.top_k, dim=-1, sorted=True)
        lse = torch.logsumexp(lf, dim=-1, keepdim=True)
        weights = torch.exp(top_logits - lse)
        if self.renormalize:
            weights = weights / weights.sum(dim=-1, keepdim=True)
        return weights, ids.to(torch.int32)


def get_inputs(tokens: int = 16384, experts: int = 128, dtype: str = "float32"):
    # Each row is a random permutation of evenly spaced levels plus jitter below half a level:
    # logits spread over about 6 units like a trained router's, and no two closer than
    # 0.75 * 6 / E (0.035 for 128 experts, over two bf16 ulps), so the top-k set and its order
    # are unambiguous for any correct kernel; random normal logits would tie now and then.
    levels = torch.argsort(torch.rand(tokens, experts), dim=-1).float()
    jitter = 0.25 * torch.rand(tokens, experts)
    logits = (levels + jitter) * (6.0 / experts) - 3.0
    return [logits.to(getattr(torch, dtype))]


def get_init_inputs(top_k: int = 8, renormalize: bool = True):
    return [top_k, renormalize]
