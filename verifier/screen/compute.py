"""Checks that the candidate's own kernels do the work: model code parses, computes nothing in
PyTorch (in forward, what forward calls, or a load_inline wrapper) and never falls back."""

from __future__ import annotations

import ast
import functools
import re
from collections.abc import Iterator

from hipevolve.verifier.screen.cxx import CxxSource, Hit
from hipevolve.verifier.screen.registry import check
from hipevolve.verifier.screen.sources import (
    BRIDGE,
    RUNTIME_KERNELS,
    TENSOR_ATTRS,
    TORCH_MODULE,
    PyModel,
    Sources,
    words,
)

# torch functions forward may call: allocation and metadata, nothing that computes on data.
# torch.zeros/ones/full are fills (memsets), tolerated like empty. torch.cuda.* is left to the
# stream check: current_stream(), synchronize() and device queries do no work on data.
_TORCH_ALLOWED_CALLS = words(
    """
    torch.empty torch.empty_like torch.empty_strided torch.zeros torch.zeros_like torch.ones
    torch.ones_like torch.full torch.full_like torch.tensor torch.as_tensor torch.device
    torch.Size torch.finfo torch.iinfo torch.is_tensor torch.is_floating_point torch.numel
    torch.get_default_dtype torch.no_grad torch.inference_mode torch.is_grad_enabled
    torch.broadcast_shapes torch.promote_types torch.result_type
    """
)
# Tensor methods forward may call: views, layout (contiguous may copy; tolerated as layout),
# metadata, allocation of the same kind, fills, and device moves (`.to` is judged separately).
_TENSOR_ALLOWED_METHODS = words(
    """
    view view_as reshape reshape_as contiguous t transpose permute unsqueeze squeeze expand
    expand_as flatten unflatten narrow select split chunk unbind as_strided movedim size dim
    ndimension numel nelement stride storage_offset data_ptr element_size is_contiguous
    is_floating_point is_complex get_device item new_empty new_empty_strided new_zeros new_ones
    new_full zero_ fill_ detach requires_grad_ cuda
    """
)
_CONVERSION_METHODS = words(
    """
    float half double bfloat16 int long short char byte bool type type_as
    """
)
LOW_PRECISION = words(
    """
    float16 half bfloat16 float8_e4m3fn float8_e5m2 float8_e4m3fnuz float8_e5m2fnuz
    float8_e8m0fnu float4_e2m1fn_x2 int8 uint8
    """
)
_DTYPES = LOW_PRECISION | words(
    "float32 float float64 double int16 short int32 int int64 long bool complex64 complex128"
)


@functools.cache
def _tensor_compute_methods() -> frozenset[str]:
    """torch.Tensor's public methods that compute, less names that builtin types also have
    (so `shapes.sort()` or `names.add(x)` on non-tensors do not fire)."""
    import torch  # deferred: only screening needs the method list

    builtin = set().union(*(dir(t) for t in (str, bytes, list, dict, set, tuple, int, float)))
    public = {
        n for n in dir(torch.Tensor) if not n.startswith("_") and callable(getattr(torch.Tensor, n))
    }
    return frozenset(public - _TENSOR_ALLOWED_METHODS - builtin - TENSOR_ATTRS)


@check("python-syntax", "strict")
def python_syntax(s: Sources) -> Iterator[Hit]:
    """Model code that does not parse would fail at import; reject before compiling anything."""
    if s.py is None:
        yield Hit(s.py_file, s.syntax_line, s.syntax_error)


def _to_message(py: PyModel, call: ast.Call, names: set[str]) -> str | None:
    """`.to(...)` is a device move (allowed) unless a dtype or another tensor is involved."""
    for kw in call.keywords:
        if kw.arg == "dtype":
            return ".to(dtype=...) converts dtype in PyTorch; convert inside the kernel"
    for index, arg in enumerate(call.args):
        dotted = py.resolve(arg) or ""
        if dotted.rsplit(".", 1)[-1] == "dtype" or dotted.removeprefix("torch.") in _DTYPES:
            return f".to({ast.unparse(arg)}) converts dtype in PyTorch; convert inside the kernel"
        device_like = (
            (
                isinstance(arg, ast.Constant)
                and isinstance(arg.value, str)
                and re.match(r"(cuda|cpu|hip|meta)\b", arg.value)
            )
            or "dev" in dotted.rsplit(".", 1)[-1].lower()
            or (isinstance(arg, ast.Call) and py.resolve(arg.func) == "torch.device")
        )
        if device_like or index > 0:
            continue
        if py.is_tensor(arg, names):
            return f".to({ast.unparse(arg)}) copies another tensor's dtype in PyTorch"
        return (
            f".to({ast.unparse(arg)}): cannot tell a device move from a dtype conversion; "
            "write .to(device=...)"
        )
    return None


def _call_compute(py: PyModel, call: ast.Call, names: set[str]) -> str | None:
    func = call.func
    dotted = py.resolve(func)
    if dotted and (dotted.startswith(BRIDGE) or dotted.startswith(RUNTIME_KERNELS)):
        return None
    if dotted in ("super().forward", "super().__call__"):
        return f"{dotted}(...) runs the parent class's (the reference's?) PyTorch forward"
    if dotted and dotted.startswith("torch."):
        if dotted in _TORCH_ALLOWED_CALLS or dotted.startswith("torch.cuda."):
            return None
        return f"calls {dotted}: PyTorch computes, not the candidate's kernel"
    if dotted and dotted.startswith("numpy."):
        return f"calls {dotted}: NumPy computes on the host, not the candidate's kernel"
    if dotted and (dotted == "Model" and "Model" in py.classes or dotted.endswith(".Model")):
        return "instantiates the reference Model inside forward"
    if (
        dotted
        and dotted.startswith("self.")
        and py.self_attrs.get(dotted.split(".")[1]) == TORCH_MODULE
    ):
        return f"calls {dotted}, a PyTorch module: PyTorch computes, not the kernel"
    if (
        isinstance(func, ast.Name)
        and func.id in {"sum", "abs", "pow", "max", "min", "round"}
        and any(py.is_tensor(a, names) for a in call.args)
    ):
        return f"builtin {func.id}() over a tensor runs PyTorch ops"
    if not isinstance(func, ast.Attribute) or py.is_module_name(py.resolve(func.value)):
        return None
    method, receiver = func.attr, func.value
    if method == "to":
        return _to_message(py, call, names)
    if method in _CONVERSION_METHODS and not (
        method == "type" and not call.args and not call.keywords
    ):
        if py.is_tensor(receiver, names) or method not in {"int", "bool", "type"}:
            return f".{method}() converts dtype in PyTorch; convert inside the kernel"
        return None
    if method in _TENSOR_ALLOWED_METHODS:
        return None
    if py.is_tensor(receiver, names) or method in _tensor_compute_methods():
        return f"tensor method .{method}() runs in PyTorch, not in the candidate's kernel"
    return None


def _operator_compute(py: PyModel, node: ast.AST, names: set[str]) -> str | None:
    if isinstance(node, ast.BinOp):
        if isinstance(node.op, ast.MatMult):
            return "the @ operator is a PyTorch matmul"
        if py.is_tensor(node.left, names) or py.is_tensor(node.right, names):
            return f"tensor arithmetic ({type(node.op).__name__}) runs in PyTorch"
    elif isinstance(node, ast.AugAssign):
        if (
            isinstance(node.op, ast.MatMult)
            or py.is_tensor(node.target, names)
            or py.is_tensor(node.value, names)
        ):
            return f"in-place tensor arithmetic ({type(node.op).__name__}=) runs in PyTorch"
    elif isinstance(node, ast.UnaryOp) and not isinstance(node.op, ast.Not):
        if py.is_tensor(node.operand, names):
            return f"tensor arithmetic ({type(node.op).__name__}) runs in PyTorch"
    elif isinstance(node, ast.Compare):
        value_ops = [
            op for op in node.ops if not isinstance(op, (ast.Is, ast.IsNot, ast.In, ast.NotIn))
        ]
        if value_ops and any(py.is_tensor(x, names) for x in [node.left, *node.comparators]):
            return "tensor comparison runs in PyTorch"
    return None


# In a load_inline wrapper: ATen functions that allocate or describe, and tensor methods that read
# metadata or make views. `at::cuda::...` and other nested namespaces are not matched at all.
_CXX_TORCH_ALLOWED = words(
    """
    empty empty_like empty_strided zeros zeros_like ones ones_like full full_like TensorOptions
    Device device dtype IntArrayRef ScalarType Tensor
    """
)
_CXX_METHODS_ALLOWED = _TENSOR_ALLOWED_METHODS | words(
    """
    sizes strides scalar_type options defined is_cuda mutable_data_ptr const_data_ptr data
    device dtype layout memory_format pinned_memory any all max min
    """
)
_CXX_TORCH_CALL = re.compile(r"\b(?:torch|at)::(\w+)\s*(?:<[^<>;]*>)?\s*\(")
_CXX_METHOD_CALL = re.compile(r"(?:\.|->)\s*(\w+)\s*(?:<[^<>;]*>)?\s*\(")


def _inline_torch_compute(src: CxxSource) -> Iterator[Hit]:
    """torch::/at:: calls and tensor methods in a load_inline wrapper run PyTorch kernels."""
    for m in _CXX_TORCH_CALL.finditer(src.bare):
        if m[1] not in _CXX_TORCH_ALLOWED:
            yield Hit(
                src.file,
                src.line(m.start()),
                f"{m[0].rstrip('( ')}(): PyTorch computes "
                "inside the extension, not the candidate's kernel",
            )
    compute = (_tensor_compute_methods() | {"to"}) - _CXX_METHODS_ALLOWED
    for m in _CXX_METHOD_CALL.finditer(src.bare):
        if m[1] in compute:
            yield Hit(
                src.file,
                src.line(m.start()),
                f".{m[1]}() in the extension runs a PyTorch op, not the candidate's kernel",
            )


@check("torch-compute", "strict")
def torch_compute(s: Sources) -> Iterator[Hit]:
    """PyTorch compute in ModelNew.forward (or what it calls), or in a load_inline wrapper, makes
    torch, not the kernel, do the timed work; only allocation, views, metadata and the
    candidate's own launchers are allowed."""
    for src in s.host_code():
        if src.inline:
            yield from _inline_torch_compute(src)
    py = s.py
    if py is None or py.modelnew is None:
        return
    for base in py.modelnew.bases:
        if (py.resolve(base) or "") not in ("torch.nn.Module", "torch.nn.modules.module.Module"):
            yield py.hit(
                base,
                f"ModelNew derives from {ast.unparse(base)}; derive from "
                "nn.Module so no reference code is inherited",
            )
    if not py.forward_scope:
        yield py.hit(py.modelnew, "ModelNew defines no forward")
    for fn in py.forward_scope:
        names = py.tensor_names(fn)
        for node in ast.walk(fn):
            message = (
                _call_compute(py, node, names)
                if isinstance(node, ast.Call)
                else _operator_compute(py, node, names)
            )
            if message:
                yield py.hit(node, f"{message} (in {fn.name})")


@check("try-except", "strict")
def try_except(s: Sources) -> Iterator[Hit]:
    """A try/except in model code can fall back to PyTorch when the kernel fails (FAULTS 16)."""
    if s.py is None:
        return
    for node in s.py.nodes():
        if isinstance(node, (ast.Try, ast.TryStar)):
            yield s.py.hit(
                node, "try/except in model code: a failing kernel must fail, not fall back"
            )
        elif isinstance(node, ast.Call) and s.py.resolve(node.func) == "contextlib.suppress":
            yield s.py.hit(node, "contextlib.suppress swallows a failing kernel like try/except")
