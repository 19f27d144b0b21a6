"""Gated DeltaNet prefill through kernel.hip's gdn_chunk_fwd: two tensor-core kernels on NVIDIA
sm_80+, one fused chunked kernel elsewhere (kernel.hip says which, and why).

forward(q, k, v, g, beta, initial_state, cu_seqlens=None) -> (o, final_state), as the task's
Model: q, k [B, T, H, 128] bf16; v [B, T, HV, 128] bf16 (HV a multiple of H); g, beta [B, T, HV]
fp32; initial_state [N, HV, 128, 128] fp32, read only; o [B, T, HV, 128] bf16; final_state a new
[N, HV, 128, 128] fp32 tensor. N = B, or with cu_seqlens ([N + 1] int64 on q's GPU: packed
sequences, B = 1) its N; the kernels read the sequence bounds on the device
(gdn_chunk_fwd_varlen). Inputs the kernel was not written for raise ValueError before any
kernel runs. The device workspace the tensor-core path needs (gdn_chunk_workspace: W, U, P and
gamma per chunk) comes from PyTorch's caching allocator, so repeated calls do not hit the driver.

Long sequences with few heads take context parallelism (gdn_cp_fwd: each sequence cut into
segments of L chunks that run side by side, their initial states made exact by a serial fp32
fixup of the segments' state maps; kernel.hip says how). gdn_chunk_fwd(_varlen) decides at the
launch, from N, T, HV and the SM count of the GPU it launches on (a wave model, its knobs
kernel.hip's CP_* tunables); the workspace query sizes for either path. Nothing here asks the
device anything: the verifier records the launches where no device is. Nothing reads device
memory either, so CUDA graphs capture either path.
"""

import torch
import torch.nn as nn

from hipevolve.runtime import kernels

HEAD_DIM = 128  # K = V = 128: the kernel's tiles are built for it
MAX_GRID_DIM = 65535  # HV and B are the y and z grid dimensions


def _check(q, k, v, g, beta, initial_state, cu_seqlens) -> None:
    named = {"q": q, "k": k, "v": v, "g": g, "beta": beta, "initial_state": initial_state}
    if cu_seqlens is not None:
        named["cu_seqlens"] = cu_seqlens
    for name, x in named.items():
        if not isinstance(x, torch.Tensor):
            raise ValueError(f"{name} must be a tensor, got {type(x).__name__}")
    if q.dim() != 4 or k.dim() != 4 or v.dim() != 4:
        raise ValueError("q, k and v must be 4-D: [B, T, H, K] and [B, T, HV, V]")
    b, t, h, kd = q.shape
    hv, vd = v.shape[2], v.shape[3]
    if tuple(k.shape) != tuple(q.shape):
        raise ValueError(f"k {tuple(k.shape)} must have q's shape {tuple(q.shape)}")
    if tuple(v.shape[:2]) != (b, t):
        raise ValueError(f"v {tuple(v.shape)} must be [B, T, HV, V] with B, T = {b}, {t}")
    if kd != HEAD_DIM or vd != HEAD_DIM:
        raise ValueError(f"this kernel needs K = V = {HEAD_DIM}, got K = {kd}, V = {vd}")
    if h < 1 or hv < 1 or hv % h:
        raise ValueError(f"value heads HV = {hv} must be a positive multiple of H = {h}")
    if b < 1 or b > MAX_GRID_DIM or hv > MAX_GRID_DIM:
        raise ValueError(f"B = {b} and HV = {hv} must lie in 1..{MAX_GRID_DIM}")
    if tuple(g.shape) != (b, t, hv) or tuple(beta.shape) != (b, t, hv):
        raise ValueError(f"g and beta must be [B, T, HV] = {(b, t, hv)}")
    n = b
    if cu_seqlens is not None:
        if cu_seqlens.dim() != 1 or cu_seqlens.shape[0] < 2 or cu_seqlens.dtype != torch.int64:
            raise ValueError("cu_seqlens must be a 1-D int64 tensor of N + 1 >= 2 offsets")
        if b != 1:
            raise ValueError(f"packed sequences (cu_seqlens) need B = 1, got B = {b}")
        n = cu_seqlens.shape[0] - 1
    if n > MAX_GRID_DIM:
        raise ValueError(f"N = {n} sequences must lie in 1..{MAX_GRID_DIM}")
    if tuple(initial_state.shape) != (n, hv, kd, vd):
        raise ValueError(f"initial_state must be [N, HV, K, V] = {(n, hv, kd, vd)}")
    for name in ("q", "k", "v"):
        if named[name].dtype != torch.bfloat16:
            raise ValueError(f"{name} must be bfloat16, got {named[name].dtype}")
    for name in ("g", "beta", "initial_state"):
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


def gdn_forward(q, k, v, g, beta, initial_state, cu_seqlens):
    """The launches for checked inputs (the tests run this on CPU threads with kernels bound to a
    CPU build). The kernels choose context parallelism or not themselves, on the device they
    launch on (kernel.hip, cp_launch_choice): the workspace they ask for fits either path."""
    b, t, h, kd = q.shape
    hv, vd = v.shape[2], v.shape[3]
    n = initial_state.shape[0]  # sequences: B, or cu_seqlens' N
    o = torch.empty((b, t, hv, vd), dtype=torch.bfloat16, device=q.device)
    final_state = torch.empty((n, hv, kd, vd), dtype=torch.float32, device=q.device)
    size = torch.zeros(1, dtype=torch.int64)  # host memory: the launcher writes the byte count
    if cu_seqlens is None:
        kernels.gdn_chunk_workspace(b, t, hv, size)
        work = torch.empty(int(size), dtype=torch.uint8, device=q.device)
        kernels.gdn_chunk_fwd(q, k, v, g, beta, initial_state, o, final_state, work, b, t, h, hv)
    else:
        kernels.gdn_chunk_workspace_varlen(n, t, hv, size)
        work = torch.empty(int(size), dtype=torch.uint8, device=q.device)
        kernels.gdn_chunk_fwd_varlen(
            q, k, v, g, beta, initial_state, cu_seqlens, o, final_state, work, n, t, h, hv
        )
    return o, final_state


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, q, k, v, g, beta, initial_state, cu_seqlens=None):
        _check(q, k, v, g, beta, initial_state, cu_seqlens)
        return gdn_forward(q, k, v, g, beta, initial_state, cu_seqlens)
