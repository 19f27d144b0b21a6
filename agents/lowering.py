"""The offline translator's lowering: a task's PyTorch reference -> a native candidate.

lower(task) traces every case (fx_trace), turns each graph into expressions (lower_ir), picks
the pattern (lower_rowreduce when the graph reduces over the last dimension, else
lower_pointwise), emits one kernel per dtype variant of the cases, and writes model.py: ModelNew
with the reference's own __init__ (so parameters are drawn exactly as the reference draws them),
a forward that dispatches on the input dtypes, and every size the kernel needs derived from the
input shapes by a rule fitted over the task's cases (a dimension times a fixed ratio, or a
constant). Anything it cannot do comes back as Unsupported with one line naming the first
unsupported op or pattern.
"""

from __future__ import annotations

import ast
import re
from fractions import Fraction

from pydantic import BaseModel, ConfigDict

from hipevolve.agents import lower_pointwise, lower_rowreduce
from hipevolve.agents.fx_trace import TracedCase, TraceError, trace_task
from hipevolve.agents.lower_ir import (
    DEVICE_HELPERS,
    F16_HELPERS,
    FLOAT_DTYPES,
    Graph,
    Unsupported,
    build_graph,
    reductions,
)
from hipevolve.taskspec import TaskSpec
from hipevolve.verifier.candidate import Candidate


class Unlowered(BaseModel):
    """The task's reference could not be lowered; `reason` is one line."""

    model_config = ConfigDict(frozen=True)

    task: str
    reason: str


class _Variant(BaseModel):
    model_config = ConfigDict(frozen=True, arbitrary_types_allowed=True)

    key: tuple[str, ...]  # dtypes of the inputs then the parameters
    launcher: str
    kernel: str
    pattern: str
    out_shapes: tuple[tuple[str, ...], ...]  # each output dim as a Python expression
    out_dtypes: tuple[str, ...]
    tensors: tuple[str, ...]  # Python expressions of the pointers, in launcher order
    sizes: tuple[str, ...]  # Python expressions of the int64 arguments after the pointers
    floats: tuple[str, ...]


def lower(task: TaskSpec) -> Candidate | Unlowered:
    """A native candidate computing the task's reference, or why there is none."""
    try:
        cases = trace_task(task)
        graphs = [build_graph(c) for c in cases]
        variants = _variants(task, graphs)
    except (TraceError, Unsupported) as e:
        return Unlowered(task=task.name, reason=str(e).splitlines()[0])
    kernel = _kernel_source(task, variants, graphs)
    model = _model_source(task, cases[0], variants)
    return Candidate(format="native", hip_source=kernel, python_source=model,
                     name=f"{task.name}-lowered")  # fmt: skip


# ------------------------------------------------------------------------------ variants


def _key(case: TracedCase) -> tuple[str, ...]:
    return tuple(str(p.dtype).removeprefix("torch.") for p in case.inputs + case.params)


def _variants(task: TaskSpec, graphs: list[Graph]) -> list[_Variant]:
    groups: dict[tuple[str, ...], list[Graph]] = {}
    for g in graphs:
        groups.setdefault(_key(g.case), []).append(g)
    stem = "lowered_" + re.sub(r"\W", "_", task.name)
    return [_variant(f"{stem}_v{k}", key, gs) for k, (key, gs) in enumerate(groups.items())]


def _variant(launcher: str, key: tuple[str, ...], graphs: list[Graph]) -> _Variant:
    emitted = []
    for g in graphs:
        pointers = {ph: f"in{j}" for j, ph in enumerate(g.used)}
        module = lower_rowreduce if any(reductions(o) for o in g.outputs) else lower_pointwise
        source, emitter = module.emit_kernel(g, launcher, pointers)
        emitted.append((source, emitter, module))
    if len({s for s, _, _ in emitted}) != 1:
        names = ", ".join(g.case.case.name for g in graphs)
        raise Unsupported(f"the cases {names} (same dtypes) trace to different graphs")
    source, emitter, module = emitted[0]
    first = graphs[0]
    dims = _dim_sources(first)
    fit = lambda values: _fit(values, graphs, dims)  # noqa: E731
    out_shapes = tuple(
        tuple(fit([g.outputs[j].shape[d] for g in graphs]) for d in range(len(o.shape)))
        for j, o in enumerate(first.outputs)
    )
    if module is lower_rowreduce:
        rows_shape = next(r.args[1].shape for o in first.outputs for r in reductions(o))
        cols = fit([next(r.args[1].shape[-1] for o in g.outputs for r in reductions(o))
                    for g in graphs])  # fmt: skip
        outer = [fit([next(r.args[1].shape[d] for o in g.outputs for r in reductions(o))
                      for g in graphs]) for d in range(len(rows_shape) - 1)]  # fmt: skip
        sizes = [" * ".join(f"({d})" for d in outer) or "1", cols]
    else:
        shape = out_shapes[0]
        sizes = [" * ".join(f"({d})" for d in shape) or "1", shape[-1] if shape else "1"]
    per_case = [_emitter_ints(g, launcher) for g in graphs]
    for name in emitter.ints:
        sizes.append(fit([ints[name] for ints in per_case]))
    tensors = tuple(_tensor_expr(first.case.placeholders[ph]) for ph in first.used)
    return _Variant(
        key=key, launcher=launcher, kernel=source, pattern=module.__name__.rsplit(".", 1)[-1],
        out_shapes=out_shapes, out_dtypes=tuple(o.dtype for o in first.outputs),
        tensors=tensors, sizes=tuple(sizes),
        floats=tuple(f"float(self.{f.removeprefix('s_')})" for f in emitter.floats),
    )  # fmt: skip


def _emitter_ints(g: Graph, launcher: str) -> dict[str, int]:
    pointers = {ph: f"in{j}" for j, ph in enumerate(g.used)}
    module = lower_rowreduce if any(reductions(o) for o in g.outputs) else lower_pointwise
    return module.emit_kernel(g, launcher, pointers)[1].ints


def _tensor_expr(p) -> str:
    return f"x{p.key}" if p.role == "input" else f"self.{p.key}"


def _dim_sources(g: Graph) -> list[tuple[str, int]]:
    """(expression, position) of every input and parameter dimension, inputs first."""
    found = []
    for p in g.case.inputs + g.case.params:
        for d in range(len(p.shape)):
            found.append((f"{_tensor_expr(p)}.shape[{d}]", len(found)))
    return found


def _all_dims(g: Graph) -> list[int]:
    return [s for p in g.case.inputs + g.case.params for s in p.shape]


def _fit(values: list[int], graphs: list[Graph], dims: list[tuple[str, int]]) -> str:
    """A Python expression giving `values` (one per case) from the input shapes."""
    per_case = [_all_dims(g) for g in graphs]
    ratios = []
    for expr, pos in dims:
        if any(len(c) <= pos or c[pos] == 0 for c in per_case):
            continue
        fs = {Fraction(v, c[pos]) for v, c in zip(values, per_case, strict=True)}
        if len(fs) == 1:
            ratios.append((fs.pop(), expr))
    exact = [e for f, e in ratios if f == 1]
    if exact:
        return exact[0]
    if len(set(values)) == 1 and (len(graphs) > 1 or not ratios):
        return str(values[0])
    if ratios:
        f, e = min(ratios, key=lambda r: (r[0].denominator, r[0].numerator))
        return f"{e} * {f.numerator} // {f.denominator}" if f.denominator > 1 else f"{e} * {f}"
    raise Unsupported(f"a size ({values}) that no input dimension determines")


# ------------------------------------------------------------------------------ sources


def _kernel_source(task: TaskSpec, variants: list[_Variant], graphs: list[Graph]) -> str:
    patterns = {v.pattern for v in variants}
    f16 = any("float16" in v.key or "float16" in v.out_dtypes for v in variants)
    row = "lower_rowreduce" in patterns
    tunables = lower_rowreduce.TUNABLES if row else lower_pointwise.TUNABLES
    if row and "lower_pointwise" in patterns:
        raise Unsupported("cases that lower to different patterns")
    head = [
        f"// {task.name}: lowered from its PyTorch reference by hipevolve's offline translator.",
        "// fp32 math; values PyTorch holds in bfloat16/float16 are rounded where it rounds them.",
        "// Pattern: "
        + (
            "last-dimension reduction (one group of threads per row)"
            if row
            else "pointwise (1-D grid, vectorised)"
        ),  # fmt: skip
        "// Kernels read warpSize (32 on NVIDIA, 64 on CDNA); nothing assumes a warp width.",
        "//",
        "// Tunable parameters: a comment `// @tunable NAME: v1, v2, ...` lists the values the",
        "// `#define NAME` right after it may take; the #define holds the current choice.",
        "#include <hip/hip_runtime.h>",
        *(["#include <hip/hip_fp16.h>"] if f16 else []),
        "#include <cstdint>",
        "",
        tunables,
        DEVICE_HELPERS,
        *([F16_HELPERS] if f16 else []),
        "// VEC elements that move as one load or store (the alignment makes them one access).",
        "template <typename T>\nstruct alignas(sizeof(T) * VEC) Pack {\n    T v[VEC];\n};",
        *([lower_rowreduce.HELPERS] if row else []),
    ]
    return "\n".join(head) + "".join(v.kernel for v in variants)


def _init_source(task: TaskSpec) -> tuple[list[str], str]:
    """The reference's imports and its Model.__init__, as text."""
    text = task.reference.read_text()
    tree = ast.parse(text)
    lines = text.splitlines()
    imports = []
    for node in tree.body:
        if isinstance(node, (ast.Import, ast.ImportFrom)):
            imports.append("\n".join(lines[node.lineno - 1 : node.end_lineno]))
    model = next((n for n in tree.body if isinstance(n, ast.ClassDef) and n.name == "Model"), None)
    init = None
    if model is not None:
        init = next((n for n in model.body
                     if isinstance(n, ast.FunctionDef) and n.name == "__init__"), None)  # fmt: skip
    if init is None:
        return imports, "    def __init__(self):\n        super().__init__()\n"
    body = "\n".join(lines[init.lineno - 1 : init.end_lineno]) + "\n"
    # getattr(torch, name) is how references turn a dtype name into a dtype; the static screen
    # refuses computed getattr, so the copy looks the name up in a table instead.
    return imports, re.sub(r"\bgetattr\(\s*torch\s*,\s*", "_dtype_named(", body)


def _model_source(task: TaskSpec, case: TracedCase, variants: list[_Variant]) -> str:
    imports, init = _init_source(task)
    wanted = {"import torch", "import torch.nn as nn"}
    extra = [i for i in imports if i not in wanted and "hipevolve" not in i]
    args = [f"x{i}" for i in range(len(case.inputs))]
    out = [
        f'"""{task.name}: ModelNew over the lowered kernels (kernel.hip), one per dtype variant.',
        "",
        "__init__ is the reference Model's own, so parameters are drawn as the reference draws",
        "them. forward checks its inputs (GPU, contiguous, the dtypes and ranks of the task's",
        "cases) and raises ValueError before any launch for inputs the kernels were not written",
        'for; every size comes from the input shapes."""',
        "",
        "import torch",
        "import torch.nn as nn",
        *extra,
        "",
        "from hipevolve.runtime import kernels",
        "",
        "ALIGN = 32  # bytes: VEC = 8 float32 elements move as one access",
        "",
        "",
        "def _numel(shape) -> int:",
        "    n = 1",
        "    for s in shape:",
        "        n *= s",
        "    return n",
        "",
        "",
        '_DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16, '
        '"float16": torch.float16}',
        "",
        "",
        "def _dtype_named(name: str):",
        "    if name not in _DTYPES:",
        "        raise ValueError(f\"dtype must be one of {', '.join(_DTYPES)}, got {name!r}\")",
        "    return _DTYPES[name]",
        "",
        "",
        "def _ready(tensors) -> int:",
        '    """1 when every tensor may be read a vector at a time; ValueError for bad ones."""',
        "    aligned = 1",
        "    for t in tensors:",
        "        if not t.is_cuda:",
        '            raise ValueError(f"a tensor is on {t.device}: the kernels run on a GPU")',
        "        if not t.is_contiguous():",
        '            raise ValueError("inputs must be contiguous")',
        "        if t.data_ptr() % ALIGN:",
        "            aligned = 0",
        "    return aligned",
        "",
        "",
        "class ModelNew(nn.Module):",
        init.rstrip("\n"),
        "",
        f"    def forward(self, {', '.join(args)}):",
    ]
    ranks = [len(p.shape) for p in case.inputs]
    for a, rank in zip(args, ranks, strict=True):
        out += [f"        if not isinstance({a}, torch.Tensor) or {a}.dim() != {rank}:",
                f'            raise ValueError("{a} must be a tensor of rank {rank}")']  # fmt: skip
    dtypes = [f"{_tensor_expr(p)}.dtype" for p in case.inputs + case.params]
    out.append(f"        key = ({', '.join(dtypes)},)")
    for k, v in enumerate(variants):
        wanted_key = ", ".join(f"torch.{d}" for d in v.key)
        out += [f"        if key == ({wanted_key},):",
                f"            return self._v{k}({', '.join(args)})"]  # fmt: skip
    out.append('        raise ValueError(f"no kernel for the dtypes {key}")')
    for k, v in enumerate(variants):
        out += ["", f"    def _v{k}(self, {', '.join(args)}):"]
        names = []
        for j, (shape, dtype) in enumerate(zip(v.out_shapes, v.out_dtypes, strict=True)):
            dims = ", ".join(shape) + ("," if len(shape) == 1 else "")
            out.append(f"        out{j} = torch.empty(({dims}), dtype=torch.{dtype}, "
                       f"device={args[0] if args else 'self.weight'}.device)")  # fmt: skip
            names.append(f"out{j}")
        out.append(f"        vec_ok = _ready([{', '.join(v.tensors + tuple(names))}])")
        call = [*v.tensors, *names, *v.sizes, *v.floats, "vec_ok"]
        out.append(f"        kernels.{v.launcher}({', '.join(call)})")
        returns_tuple = case.returns_tuple
        out.append(f"        return {', '.join(names)}" + ("," if returns_tuple and
                                                           len(names) == 1 else ""))  # fmt: skip
    return "\n".join(out) + "\n"


__all__ = ["FLOAT_DTYPES", "Unlowered", "lower"]
