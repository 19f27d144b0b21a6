"""Gated DeltaNet in plain PyTorch, token by token, packed sequences (cu_seqlens) included: a
stand-in for a kernel on the cpu backend (tests/test_gdn_packed_verifier.py)."""

import torch
import torch.nn as nn


class ModelNew(nn.Module):
    def forward(self, q, k, v, g, beta, initial_state, cu_seqlens=None):
        b, t, h, kd = q.shape
        hv = v.shape[2]
        qf = q.float().repeat_interleave(hv // h, 2) * kd**-0.5  # [B, T, HV, K]
        kf = k.float().repeat_interleave(hv // h, 2)
        bv = v.float() * beta[..., None]  # [B, T, HV, V]
        eg = g.exp()[..., None, None]  # [B, T, HV, 1, 1]
        n = initial_state.shape[0]
        if cu_seqlens is None:  # B rows: row r is sequence r
            owner = torch.arange(b)[:, None].expand(b, t)  # [B, T]
        else:
            owner = (torch.searchsorted(cu_seqlens, torch.arange(t), right=True) - 1)[None]
        state = initial_state.clone()  # [N, HV, K, V]
        o = torch.empty(b, t, hv, v.shape[3])
        rows = torch.arange(n)
        for r in range(b):
            for i in range(t):
                mine = (rows == owner[r, i])[:, None, None, None]  # [N, 1, 1, 1]
                decayed = state * eg[r, i]
                kh = (decayed * kf[r, i, :, :, None]).sum(-2)  # [N, HV, V]
                u = bv[r, i] - beta[r, i, :, None] * kh
                state = torch.where(mine, decayed + kf[r, i, :, :, None] * u[:, :, None, :], state)
                o[r, i] = ((state * qf[r, i, :, :, None]).sum(-2) * mine[..., 0]).sum(0)
        return o.to(q.dtype), state
