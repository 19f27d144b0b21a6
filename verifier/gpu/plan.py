"""A launch plan: what a native candidate's forward does, as data the trusted executor replays.

A native candidate's model.py runs only in the recorder (record.py), against stand-ins with no
data. What it did becomes one `CasePlan` per case; the executor (executor.py), a process that
never imports candidate Python, replays it for every checked and every timed call with its own
buffers. The plan is the whole of what a candidate's Python can ask for, so it is also the
boundary: a forged plan can ask for nothing a plan cannot say.

The format (JSON, standard library only: the judge and the sandbox load no pydantic):

    {"version": 1, "cases": {CASE: {
        "inputs":  [{"dtype": "bfloat16", "shape": [4096, 4096], "stride": [4096, 1]} | null],
        "buffers": [{"device": "cuda" | "cpu", "nbytes": N, "fill": null | 0 | 1.0, "dtype": D}],
        "steps":   [{"op": "fill", "ref": REF, "value": 0}
                    | {"op": "call", "launcher": NAME, "args": [ARG, ...]}],
        "outputs": [REF, ...]}}}

    REF  a tensor: {"buf": "in0" | "a0", "offset": BYTES, "dtype": D, "shape": [..], "stride": [..]}
         "in<i>" is the forward's i-th argument (a tensor input; null in "inputs" for a number),
         "a<j>" the j-th entry of "buffers". offset is in bytes from the buffer's start.
    ARG  {"ref": REF} | {"int": N} | {"float": X} | {"stream": true}

- "inputs" describes the stand-ins the plan was recorded against; the executor's inputs must
  match it (they come from the task's get_inputs, as the reference's do).
- A buffer's "fill" is None for uninitialised memory (the executor poisons it with 0xFF: NaN in
  every float type) or the number every element of its first view was set to at allocation.
- "fill" steps set a view to a number (zero_, fill_); "call" steps call an extern "C" launcher
  of kernel.hip: tensors as device (or host) pointers, numbers as the launcher's C types, the
  stream as the executor's stream. A trailing stream the model left out is added.
- Alignment: a buffer starts on a 256-byte boundary, no more (the executor shifts buffers by
  multiples of 256 bytes between calls); the recorder's stand-in addresses say the same.

`validate` checks a plan against the launchers' signatures (runtime.launcher_signatures) and
its own buffers: every view inside its buffer, every launcher known, pointers only for pointer
parameters. The executor validates every plan it runs; the recorder's refusals are for clear
messages, the validation is the boundary.
"""

from __future__ import annotations

import json
import math
import re
from dataclasses import asdict, dataclass, field
from typing import Any

VERSION = 1
ALIGN = 256  # bytes: what a plan may assume of a buffer's start
MAX_BUFFERS = 64
MAX_STEPS = 256
MAX_NBYTES = 1 << 38  # 256 GiB: beyond any device; a plan asking more is refused
DTYPES = {
    "float32": 4,
    "float16": 2,
    "bfloat16": 2,
    "float64": 8,
    "int8": 1,
    "uint8": 1,
    "int16": 2,
    "int32": 4,
    "int64": 8,
    "bool": 1,
    "uint16": 2,
    "uint32": 4,
    "uint64": 8,
    "float8_e4m3fn": 1,
    "float8_e5m2": 1,
}


class PlanError(ValueError):
    """A plan that cannot be run: what is wrong with it, in one line."""


@dataclass(frozen=True)
class Ref:
    buf: str
    offset: int
    dtype: str
    shape: tuple[int, ...]
    stride: tuple[int, ...]

    def extent(self) -> tuple[int, int]:
        """The bytes [first, last + 1) this view touches, relative to its buffer."""
        size = DTYPES[self.dtype]
        if any(n == 0 for n in self.shape):
            return self.offset, self.offset
        lo = self.offset + size * sum(
            min(0, (n - 1) * s) for n, s in zip(self.shape, self.stride, strict=False)
        )
        hi = self.offset + size * sum(
            max(0, (n - 1) * s) for n, s in zip(self.shape, self.stride, strict=False)
        )
        return lo, hi + size

    @classmethod
    def of(cls, d: dict) -> Ref:
        return cls(
            buf=str(d["buf"]),
            offset=int(d["offset"]),
            dtype=str(d["dtype"]),
            shape=tuple(int(n) for n in d["shape"]),
            stride=tuple(int(s) for s in d["stride"]),
        )


@dataclass(frozen=True)
class Buffer:
    device: str  # "cuda" or "cpu"
    nbytes: int
    fill: float | int | None = None
    dtype: str = "uint8"  # what it was allocated as: the fill's type
    param: str = ""  # filled by the executor from the reference model's tensor of this name


@dataclass(frozen=True)
class Step:
    op: str  # "fill" or "call"
    ref: Ref | None = None  # fill
    value: float | int = 0  # fill
    launcher: str = ""  # call
    args: tuple[dict, ...] = ()  # call: {"ref": Ref} | {"int": n} | {"float": x} | {"stream": True}


@dataclass(frozen=True)
class CasePlan:
    inputs: tuple[dict | None, ...]
    buffers: tuple[Buffer, ...] = ()
    steps: tuple[Step, ...] = ()
    outputs: tuple[Ref, ...] = ()

    def to_dict(self) -> dict:
        return {
            "inputs": list(self.inputs),
            "buffers": [asdict(b) for b in self.buffers],
            "steps": [_step_dict(s) for s in self.steps],
            "outputs": [asdict(r) for r in self.outputs],
        }

    @classmethod
    def of(cls, d: dict) -> CasePlan:
        try:
            return cls(
                inputs=tuple(d["inputs"]),
                buffers=tuple(
                    Buffer(
                        device=str(b["device"]),
                        nbytes=int(b["nbytes"]),
                        fill=b.get("fill"),
                        dtype=str(b.get("dtype", "uint8")),
                        param=str(b.get("param", "")),
                    )
                    for b in d["buffers"]
                ),
                steps=tuple(_step_of(s) for s in d["steps"]),
                outputs=tuple(Ref.of(r) for r in d["outputs"]),
            )
        except (KeyError, TypeError, ValueError) as e:
            raise PlanError(f"malformed plan: {type(e).__name__}: {e}"[:200]) from None


@dataclass(frozen=True)
class Plan:
    cases: dict[str, CasePlan] = field(default_factory=dict)

    def to_json(self) -> str:
        return json.dumps(
            {"version": VERSION, "cases": {n: c.to_dict() for n, c in self.cases.items()}}
        )

    @classmethod
    def from_json(cls, text: str | dict) -> Plan:
        data = json.loads(text) if isinstance(text, str) else text
        if not isinstance(data, dict) or data.get("version") != VERSION:
            raise PlanError("malformed plan: no version 1 plan")
        cases = data.get("cases")
        if not isinstance(cases, dict):
            raise PlanError("malformed plan: no cases")
        return cls(cases={str(n): CasePlan.of(c) for n, c in cases.items()})


def input_specs(values: list) -> list[dict | Any]:
    """What a recorder is told of each forward argument: a tensor's dtype, shape and strides
    (no data), anything else as it is."""
    return [
        {
            "dtype": str(v.dtype).removeprefix("torch."),
            "shape": [int(n) for n in v.shape],
            "stride": [int(s) for s in v.stride()],
        }
        if hasattr(v, "stride") and hasattr(v, "dtype")
        else v
        for v in values
    ]


def _step_dict(s: Step) -> dict:
    if s.op == "fill":
        return {"op": "fill", "ref": asdict(s.ref), "value": s.value}
    args = [{"ref": asdict(a["ref"])} if "ref" in a else a for a in s.args]
    return {"op": "call", "launcher": s.launcher, "args": args}


def _step_of(d: dict) -> Step:
    if d["op"] == "fill":
        return Step(op="fill", ref=Ref.of(d["ref"]), value=_number(d["value"]))
    if d["op"] != "call":
        raise ValueError(f"unknown step {d['op']!r}")
    args = []
    for a in d["args"]:
        if "ref" in a:
            args.append({"ref": Ref.of(a["ref"])})
        elif "int" in a:
            args.append({"int": int(a["int"])})
        elif "float" in a:
            args.append({"float": float(a["float"])})
        elif a.get("stream") is True:
            args.append({"stream": True})
        else:
            raise ValueError(f"unknown argument {a!r}")
    return Step(op="call", launcher=str(d["launcher"]), args=tuple(args))


def _number(v: Any) -> float | int:
    if isinstance(v, bool) or not isinstance(v, (int, float)):
        raise ValueError(f"fill value {v!r} is not a number")
    return v


def _is_pointer(decl: str) -> bool:
    return "*" in decl


_PARAM = re.compile(r"[A-Za-z_][A-Za-z0-9_]*(\.[A-Za-z0-9_]+){0,15}")


def validate(plan: CasePlan, signatures: dict[str, tuple[str, list[str]]]) -> None:
    """Raises PlanError unless every view lies inside its buffer and every call matches its
    launcher's declared parameters (pointers for pointers, numbers for numbers)."""
    if len(plan.buffers) > MAX_BUFFERS or len(plan.steps) > MAX_STEPS:
        raise PlanError(f"plan too large: at most {MAX_BUFFERS} buffers and {MAX_STEPS} steps")
    sizes: dict[str, tuple[str, int]] = {}
    for i, spec in enumerate(plan.inputs):
        if spec is not None:
            ref = Ref.of({"buf": f"in{i}", "offset": 0, **spec})
            _check_dtype(ref)
            sizes[f"in{i}"] = ("cuda", ref.extent()[1])
    for j, b in enumerate(plan.buffers):
        if b.device not in ("cuda", "cpu") or not 0 <= b.nbytes <= MAX_NBYTES:
            raise PlanError(f"buffer a{j}: device {b.device!r}, {b.nbytes} bytes is not allowed")
        if b.dtype not in DTYPES or b.nbytes % DTYPES[b.dtype]:
            raise PlanError(f"buffer a{j}: dtype {b.dtype!r} does not fit {b.nbytes} bytes")
        if b.fill is not None:
            _number(b.fill)
        if b.param and (b.device != "cuda" or b.fill is not None or not _PARAM.fullmatch(b.param)):
            raise PlanError(f"buffer a{j}: parameter {b.param[:60]!r} is not allowed")
        sizes[f"a{j}"] = (b.device, b.nbytes)
    for step in plan.steps:
        if step.op == "fill":
            _check_ref(step.ref, sizes, "fill")
            if not math.isfinite(float(step.value)):
                raise PlanError("a fill value must be finite")
            continue
        if step.launcher not in signatures:
            raise PlanError(f'no extern "C" launcher named {step.launcher!r} in kernel.hip')
        _, decls = signatures[step.launcher]
        args = list(step.args)
        if decls and "hipStream_t" in decls[-1] and len(args) == len(decls) - 1:
            args.append({"stream": True})
        if len(args) != len(decls):
            raise PlanError(f"{step.launcher} takes {len(decls)} arguments, got {len(args)}")
        for k, (arg, decl) in enumerate(zip(args, decls, strict=False)):
            where = f"{step.launcher} argument {k}"
            if "hipStream_t" in decl:
                if arg != {"stream": True}:
                    raise PlanError(f"{where}: a stream must be the executor's stream")
            elif _is_pointer(decl):
                if "ref" not in arg:
                    raise PlanError(f"{where}: a pointer must be a tensor, not {arg}")
                _check_ref(arg["ref"], sizes, where)
            elif "ref" in arg or "stream" in arg:
                raise PlanError(f"{where}: {decl!r} takes a number")
    for k, ref in enumerate(plan.outputs):
        _check_ref(ref, sizes, f"output {k}")
        if sizes[ref.buf][0] != "cuda":
            raise PlanError(f"output {k} lies in host memory")


def _check_dtype(ref: Ref) -> None:
    if ref.dtype not in DTYPES:
        raise PlanError(f"dtype {ref.dtype!r} is not allowed")
    if len(ref.shape) != len(ref.stride) or any(n < 0 for n in ref.shape):
        raise PlanError("a view's shape and strides do not match")


def _check_ref(ref: Ref | None, sizes: dict[str, tuple[str, int]], where: str) -> None:
    if ref is None or ref.buf not in sizes:
        raise PlanError(f"{where}: a tensor that is not an input, an allocation or a view of one")
    _check_dtype(ref)
    lo, hi = ref.extent()
    if lo < 0 or hi > sizes[ref.buf][1] or (ref.offset % DTYPES[ref.dtype]):
        raise PlanError(f"{where}: a view outside its buffer {ref.buf}")
