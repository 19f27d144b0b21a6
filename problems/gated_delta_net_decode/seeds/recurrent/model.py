"""Gated DeltaNet decode step through one bandwidth-bound kernel (kernel.hip: gdn_decode).

forward(q, k, v, g, beta, state) -> (o, new_state), out of place as the task declares:
q, k [B, 1, H, 128] bf16; v [B, 1, HV, 128] bf16 (HV a multiple of H); g, beta [B, 1, HV] fp32;
state [B, HV, 128, 128] fp32, read only; o [B, 1, HV, 128] bf16; new_state a new tensor like
state. Inputs the kernel was not written for raise ValueError before any kernel runs.
"""

import torch
import torch.nn as nn

from hipevolve.runtime import kernels

HEAD_DIM = 128  # K = V = 128: the thread map is built for it
MAX_GRID_DIM = 65535  # HV and B are the y and z grid dimensions


def _check(q, k, v, g, beta, state) -> None:
    named = {"q": q, "k": k, "v": v, "g": g, "beta": beta, "state": state}
    for name, x in named.items():
        if not isinstance(x, torch.Tensor):
            raise ValueError(f"{name} must be a tensor, got {type(x).__name__}")
    if q.dim() != 4 or k.dim() != 4 or v.dim() != 4:
        raise ValueError("q, k and v must be 4-D: [B, 1, H, K] and [B, 1, HV, V]")
    b, t, h, kd = q.shape
    hv, vd = v.shape[2], v.shape[3]
    if t != 1:
        raise ValueError(f"decode takes one token per sequence, got T = {t}")
    if tuple(k.shape) != tuple(q.shape):
        raise ValueError(f"k {tuple(k.shape)} must have q's shape {tuple(q.shape)}")
    if tuple(v.shape[:2]) != (b, t):
        raise ValueError(f"v {tuple(v.shape)} must be [B, 1, HV, V] with B = {b}")
    if kd != HEAD_DIM or vd != HEAD_DIM:
        raise ValueError(f"this kernel needs K = V = {HEAD_DIM}, got K = {kd}, V = {vd}")
    if h < 1 or hv < 1 or hv % h:
        raise ValueError(f"value heads HV = {hv} must be a positive multiple of H = {h}")
    if b < 1 or b > MAX_GRID_DIM or hv > MAX_GRID_DIM:
        raise ValueError(f"B = {b} and HV = {hv} must lie in 1..{MAX_GRID_DIM}")
    if tuple(g.shape) != (b, t, hv) or tuple(beta.shape) != (b, t, hv):
        raise ValueError(f"g and beta must be [B, 1, HV] = {(b, t, hv)}")
    if tuple(state.shape) != (b, hv, kd, vd):
        raise ValueError(f"state must be [B, HV, K, V] = {(b, hv, kd, vd)}")
    for name in ("q", "k", "v"):
        if named[name].dtype != torch.bfloat16:
            raise ValueError(f"{name} must be bfloat16, got {named[name].dtype}")
    for name in ("g", "beta", "state"):
        if named[name].dtype != torch.float32:
            raise ValueError(f"{name} must be float32, got {named[name].dtype}")
    for name, x in named.items():
        if not x.is_contiguous():
            raise ValueError(f"{name} must be contiguous")
    for name, x in named.items():
        if not x.is_cuda or x.device != q.device:
            raise ValueError(f"{name} is on {x.device}: every input must be on q's GPU")
    for name, x in named.items():
        if x.data_ptr() % 16:
            raise ValueError(f"{name} must start on a 16-byte boundary (16-byte vector loads)")


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, q, k, v, g, beta, state):
        _check(q, k, v, g, beta, state)
        b, _, h, kd = q.shape
        hv, vd = v.shape[2], v.shape[3]
        o = torch.empty((b, 1, hv, vd), dtype=torch.bfloat16, device=q.device)
        new_state = torch.empty((b, hv, kd, vd), dtype=torch.float32, device=q.device)
        kernels.gdn_decode(q, k, v, g, beta, state, o, new_state, b, h, hv)
        return o, new_state
