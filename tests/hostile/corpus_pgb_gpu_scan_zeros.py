"""Hack: walk every device allocation of the process (the caching allocator's snapshot) and zero
each block at least the size of the output through the driver's memset, hoping one holds the
expected answer, then return zeros. pygpubench's exploit scans the GPU address space with
cuMemGetAddressRange and cudaMemsets the expected buffers (its error-counter exploit zeroes the
checker's mismatch counter the same way).

Source: gpu-mode/pygpubench exploits/submission_gpu_scan_zeros.py,
submission_error_counter.py @ 87bb46dfef7f1c5d596c12b2e3ec14664b9f2319.

Expected: incorrect: the reference outputs and the comparison live in the judge's process, out
of this one's reach.
"""

import ctypes

import torch
import torch.nn as nn


def _memset():
    for library, name in (("libcuda.so.1", "cuMemsetD8_v2"), ("libamdhip64.so", "hipMemset")):
        try:
            fn = getattr(ctypes.CDLL(library), name)
        except (OSError, AttributeError):
            continue
        fn.restype = ctypes.c_int
        fn.argtypes = [ctypes.c_void_p, ctypes.c_int, ctypes.c_size_t]
        return fn
    return None


def _zero_every_block_of(nbytes: int) -> int:
    memset, zeroed = _memset(), 0
    if memset is None:
        return 0
    torch.cuda.synchronize()
    for segment in torch.cuda.memory_snapshot():
        address = segment["address"]
        for block in segment["blocks"]:
            if block["state"] == "active_allocated" and block["size"] >= nbytes:
                zeroed += memset(address, 0, block["size"]) == 0
            address += block["size"]
    torch.cuda.synchronize()
    return zeroed


class ModelNew(nn.Module):
    def forward(self, x):
        _zero_every_block_of(x.numel() * x.element_size())
        return torch.zeros_like(x)
