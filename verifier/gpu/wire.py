"""A safe message format between the judge and the sandbox: JSON header + raw tensor bytes.

Nothing that crosses a process boundary is ever unpickled: the candidate process is hostile, and
`pickle.loads` on its bytes would run its code in the judge. A message is

    8 bytes   big-endian length of the header
    header    UTF-8 JSON: {"kind": str, ..., "tensors": [{"dtype", "shape", "nbytes"}]}
    payload   each tensor's bytes, C-contiguous, in header order

A CUDA tensor may instead travel by IPC (`share=True`, see ipc.py): its spec carries "shared"
(the allocation's IPC handle and the view's place in it) and no payload; the reader returns an
ipc.Shared description for the judge to open, and the sender waits for the judge's "ack".

The reader validates every field (dtype from an allowlist, nbytes equal to the shape's size) and
caps sizes, so a malformed or hostile message raises WireError instead of doing anything else.
Only tensor *values* travel; what the sender says about a tensor (its strides, type, device) is
metadata in the header, to be judged, never trusted.

Imports torch, the standard library and ipc.py only (the judge and the sandbox both use it).
"""

from __future__ import annotations

import json
import math
import struct
from typing import Any, BinaryIO

import torch

from hipevolve.verifier.gpu import ipc

MAX_HEADER = 4 << 20  # a header is metadata only; 4 MiB is generous
MAX_PAYLOAD = 64 << 30  # the sum of one message's tensors

DTYPES: dict[str, torch.dtype] = {
    str(d).removeprefix("torch."): d
    for d in (
        torch.float64,
        torch.float32,
        torch.float16,
        torch.bfloat16,
        torch.int64,
        torch.int32,
        torch.int16,
        torch.int8,
        torch.uint8,
        torch.bool,
        torch.complex64,
        torch.complex128,
    )
}
for _name in ("float8_e4m3fn", "float8_e5m2", "float8_e4m3fnuz", "float8_e5m2fnuz"):
    if hasattr(torch, _name):
        DTYPES[_name] = getattr(torch, _name)


class WireError(Exception):
    """The other side sent something that is not a well-formed message (or nothing at all)."""


def dtype_name(dtype: torch.dtype) -> str:
    return str(dtype).removeprefix("torch.")


def _tensor_bytes(t: torch.Tensor) -> bytes:
    flat = t.detach().to("cpu").contiguous().reshape(-1)
    if flat.numel() == 0:
        return b""
    return flat.view(torch.uint8).numpy().tobytes()


def write_message(
    stream: BinaryIO,
    kind: str,
    tensors: list[torch.Tensor] = (),
    share: bool = False,
    **fields: Any,
) -> list[ipc.Counter]:
    """Sends one message; `fields` must be JSON-serialisable. With `share`, CUDA tensors go by
    IPC where they can; the counters of those that did are returned: wait for the receiver's
    "ack", then ipc.release them."""
    specs = []
    payloads = []
    counters = []
    for t in tensors:
        shared = ipc.share(t) if share else "not asked"
        if isinstance(shared, str):
            if share and t.device.type == "cuda" and t.numel() and "not_shared" not in fields:
                fields["not_shared"] = shared  # the first reason, for the judge's flags
        else:
            spec, counter = shared
            specs.append({"dtype": dtype_name(t.dtype), "shape": list(t.shape), "shared": spec})
            counters.append(counter)
            continue
        data = _tensor_bytes(t)
        specs.append({"dtype": dtype_name(t.dtype), "shape": list(t.shape), "nbytes": len(data)})
        payloads.append(data)
    header = json.dumps({"kind": kind, **fields, "tensors": specs}, allow_nan=True).encode()
    stream.write(struct.pack(">Q", len(header)))
    stream.write(header)
    for data in payloads:
        stream.write(data)
    stream.flush()
    return counters


def _read_exact(stream: BinaryIO, n: int) -> bytearray:
    buf = bytearray(n)
    view = memoryview(buf)
    got = 0
    while got < n:
        k = stream.readinto(view[got:])
        if not k:
            raise WireError(f"stream ended after {got} of {n} bytes")
        got += k
    return buf


def _tensor_from(spec: Any, stream: BinaryIO, budget: list[int]) -> torch.Tensor | ipc.Shared:
    if not isinstance(spec, dict) or set(spec) not in (
        {"dtype", "shape", "nbytes"},
        {"dtype", "shape", "shared"},
    ):
        raise WireError("bad tensor spec")
    dtype = DTYPES.get(spec["dtype"]) if isinstance(spec["dtype"], str) else None
    shape = spec["shape"]
    if dtype is None:
        raise WireError(f"dtype {spec['dtype']!r} not allowed")
    if not isinstance(shape, list) or not all(type(s) is int and s >= 0 for s in shape):
        raise WireError("bad shape")
    if "shared" in spec:
        if not isinstance(spec["shared"], dict):
            raise WireError("bad shared tensor spec")
        try:
            return ipc.parse(spec["shared"], dtype, shape)
        except ValueError as e:
            raise WireError(f"bad shared tensor: {e}") from None
    itemsize = torch.empty((), dtype=dtype).element_size()
    nbytes = math.prod(shape) * itemsize
    if spec["nbytes"] != nbytes:
        raise WireError(f"nbytes {spec['nbytes']!r} does not match shape {shape} of {dtype}")
    budget[0] -= nbytes
    if budget[0] < 0:
        raise WireError("message payload too large")
    if nbytes == 0:
        return torch.empty(shape, dtype=dtype)
    raw = _read_exact(stream, nbytes)
    return torch.frombuffer(raw, dtype=torch.uint8).view(dtype).reshape(shape)


def read_message(stream: BinaryIO) -> tuple[dict[str, Any], list[torch.Tensor | ipc.Shared]]:
    """Reads one message: (header without "tensors", tensors on the CPU or ipc.Shared
    descriptions of shared ones). Raises WireError."""
    (length,) = struct.unpack(">Q", bytes(_read_exact(stream, 8)))
    if length > MAX_HEADER:
        raise WireError(f"header of {length} bytes is too large")
    try:
        header = json.loads(bytes(_read_exact(stream, length)).decode())
    except (UnicodeDecodeError, json.JSONDecodeError) as e:
        raise WireError(f"header is not JSON: {e}") from None
    if not isinstance(header, dict) or not isinstance(header.get("kind"), str):
        raise WireError("header has no kind")
    specs = header.pop("tensors", [])
    if not isinstance(specs, list):
        raise WireError("tensors is not a list")
    budget = [MAX_PAYLOAD]
    return header, [_tensor_from(s, stream, budget) for s in specs]
