"""The offline translator's lowering: a task's PyTorch reference -> a native candidate.

lower(task) traces every case (fx_trace.py), turns each graph into expressions (ir.py), picks
the pattern (rowreduce.py when the graph reduces over the last dimension, else
pointwise.py), emits one kernel per dtype variant of the cases, and writes model.py: ModelNew
with the reference's own __init__ (so parameters are drawn exactly as the reference draws them),
a forward that dispatches on the input dtypes, and every size the kernel needs derived from the
input shapes by a rule fitted over the task's cases (a dimension times a fixed ratio, or a
constant). Anything it cannot do comes back as Unlowered with one line naming the first
unsupported op or pattern; lowering never raises: any other failure is a one-line reason too.

The model.py is whole on its own: the reference's __init__ with `super(Model, self)` made
`super()` (there is no Model beside ModelNew), and the reference's module-level definitions that
__init__ reads (constants, helper functions and classes) copied above ModelNew.
"""

from __future__ import annotations

import ast
import re
from fractions import Fraction

from pydantic import BaseModel, ConfigDict

from hipevolve.agents.lowering import chain as lower_chain
from hipevolve.agents.lowering import gemm as lower_gemm
from hipevolve.agents.lowering import pointwise as lower_pointwise
from hipevolve.agents.lowering import rowreduce as lower_rowreduce
from hipevolve.agents.lowering.emit import DEVICE_HELPERS, F16_HELPERS, Emitter
from hipevolve.agents.lowering.fx_trace import TracedCase, TraceError, trace_case, trace_task
from hipevolve.agents.lowering.ir import (
    FLOAT_DTYPES,
    Graph,
    Unsupported,
    expression_graph,
    reductions,
)
from hipevolve.core.candidate import Candidate, parse_python
from hipevolve.core.taskspec import TaskSpec


class Unlowered(BaseModel):
    """The task's reference could not be lowered; `reason` is one line."""

    model_config = ConfigDict(frozen=True)

    task: str
    reason: str


class _Launch(BaseModel):
    """One kernel launch of a variant, with its arguments as Python expressions."""

    model_config = ConfigDict(frozen=True)

    launcher: str
    kernel: str
    pattern: str
    tensors: tuple[str, ...]  # the pointers read, in launcher order
    dests: tuple[str, ...]  # the tensors written ("out0", "buf1"), in launcher order
    sizes: tuple[str, ...]  # the int64 arguments after the pointers
    floats: tuple[str, ...]
    checks: tuple[str, ...] = ()  # lines of forward that refuse inputs the kernel cannot take


class _Variant(BaseModel):
    model_config = ConfigDict(frozen=True)

    key: tuple[str, ...]  # dtypes of the inputs then the parameters
    launches: tuple[_Launch, ...]
    buffers: tuple[tuple[str, tuple[str, ...], str], ...]  # (name, shape, dtype) of intermediates
    outputs: tuple[tuple[str, tuple[str, ...], str], ...]  # (variable, shape, dtype), in order

    @property
    def kernel(self) -> str:
        return "".join(launch.kernel for launch in self.launches)


def lower(task: TaskSpec) -> Candidate | Unlowered:
    """A native candidate computing the task's reference, or why there is none (never raises)."""
    try:
        return _lower(task)
    except (TraceError, Unsupported) as e:
        return Unlowered(task=task.name, reason=_one_line(e))
    except Exception as e:  # noqa: BLE001 - a bug of ours or an odd reference: a reason, not a crash
        return Unlowered(task=task.name, reason=f"{type(e).__name__}: {_one_line(e)}")


def _one_line(e: BaseException) -> str:
    return (str(e).strip().splitlines() or [type(e).__name__])[0][:300]


def _traced(task: TaskSpec) -> list[TracedCase]:
    """Every case traced; a case that sets module constants (a KernelBench file's reduced one)
    is left out when it alone does not trace: the task's own cases decide."""
    own = trace_task(
        task.model_copy(update={"cases": tuple(c for c in task.cases if not c.globals)})
    )
    reduced = []
    for case in (c for c in task.cases if c.globals):
        try:
            reduced.append(trace_case(task.reference, case))
        except TraceError:
            continue
    return own + reduced


def _lower(task: TaskSpec) -> Candidate:
    cases = _traced(task)
    graphs = [expression_graph(c) for c in cases]
    try:
        variants = _variants(task, graphs)
    except Unsupported:
        # A KernelBench task's reduced case may pick other kernels than its default one: the
        # default case alone still lowers (its sizes then come from that one case).
        timed = [g for g in graphs if g.case.case.timed]
        if len(timed) == len(graphs) or not timed:
            raise
        cases, graphs = [g.case for g in timed], timed
        variants = _variants(task, graphs)
    kernel = _kernel_source(task, variants, graphs)
    model = _model_source(task, cases[0], variants)
    return Candidate(
        format="native", hip_source=kernel, python_source=model, name=f"{task.name}-lowered"
    )


# ------------------------------------------------------------------------------ variants


def _key(case: TracedCase) -> tuple[str, ...]:
    return tuple(str(p.dtype).removeprefix("torch.") for p in case.inputs + case.params)


def _variants(task: TaskSpec, graphs: list[Graph]) -> list[_Variant]:
    groups: dict[tuple[str, ...], list[Graph]] = {}
    for g in graphs:
        groups.setdefault(_key(g.case), []).append(g)
    stem = "lowered_" + re.sub(r"\W", "_", task.name)
    return [_variant(f"{stem}_v{k}", key, gs) for k, (key, gs) in enumerate(groups.items())]


_MODULES = {
    "lower_gemm": lower_gemm,
    "lower_rowreduce": lower_rowreduce,
    "lower_pointwise": lower_pointwise,
}


def _emit(g: Graph, launcher: str) -> tuple[lower_chain.Plan, list[tuple[str, Emitter]]]:
    """The graph's kernels: (source, emitter) per segment of its plan."""
    chain = lower_chain.plan(g)
    single = len(chain.segments) == 1
    emitted = []
    for j, seg in enumerate(chain.segments):
        pointers = {ph: f"in{i}" for i, ph in enumerate(seg.graph.used)}
        name = launcher if single else f"{launcher}_s{j}"
        emitted.append(_MODULES[seg.pattern].emit_kernel(seg.graph, name, pointers))
    return chain, emitted


def _size_factors(seg: lower_chain.Segment) -> list[list[int]]:
    """The launcher's leading int64 sizes, each as the factors whose product it is."""
    g = seg.graph
    if seg.pattern == "lower_gemm":
        return lower_gemm.size_factors(g)
    if seg.pattern == "lower_rowreduce":
        rows_shape = next(r.args[1].shape for o in g.outputs for r in reductions(o))
        return [list(rows_shape[:-1]), [rows_shape[-1]]]
    shape = g.outputs[0].shape
    return [list(shape), [shape[-1]] if shape else []]


def _variant(launcher: str, key: tuple[str, ...], graphs: list[Graph]) -> _Variant:
    planned = [_emit(g, launcher) for g in graphs]
    if len({"".join(src for src, _ in emitted) for _, emitted in planned}) != 1:
        names = ", ".join(g.case.case.name for g in graphs)
        raise Unsupported(f"the cases {names} (same dtypes) trace to different graphs")
    first = graphs[0]
    dims = _dim_sources(first)
    fit = lambda values: _fit(values, graphs, dims)  # noqa: E731

    def product(factors: list[list[int]]) -> str:
        if len({len(f) for f in factors}) != 1:
            raise Unsupported("cases of different ranks share a kernel")
        return " * ".join(f"({fit(list(col))})" for col in zip(*factors, strict=True)) or "1"

    chain, emitted = planned[0]
    placeholders = chain.segments[0].graph.case.placeholders
    launches = []
    for j, (seg, (source, emitter)) in enumerate(zip(chain.segments, emitted, strict=True)):
        per_graph = [plan.segments[j] for plan, _ in planned]
        per_ints = [em[j][1].ints for _, em in planned]
        counts = range(len(_size_factors(seg)))
        sizes = [product([_size_factors(s)[d] for s in per_graph]) for d in counts]
        # the row length (and N, K) as the bare expression, as before chains
        sizes[1:] = [
            x[1:-1] if x.count("(") == 1 and x.startswith("(") and x.endswith(")") else x
            for x in sizes[1:]
        ]
        sizes += [fit([ints[name] for ints in per_ints]) for name in emitter.ints]
        tensors = tuple(_tensor_expr(placeholders[ph]) for ph in seg.graph.used)
        launches.append(
            _Launch(
                launcher=launcher if len(chain.segments) == 1 else f"{launcher}_s{j}",
                kernel=source,
                pattern=seg.pattern,
                tensors=tensors,
                dests=tuple(seg.dests),
                sizes=tuple(sizes),
                floats=tuple(f"float(self.{f.removeprefix('s_')})" for f in emitter.floats),
                checks=_gemm_checks(seg, placeholders) if seg.pattern == "lower_gemm" else (),
            )
        )
    shape_of = lambda values: tuple(fit(list(d)) for d in zip(*values, strict=True))  # noqa: E731
    buffers = tuple(
        (
            name,
            shape_of([p.segments[0].graph.case.placeholders[name].shape for p, _ in planned]),
            FLOAT_DTYPES[placeholders[name].dtype],
        )
        for name in chain.buffers
    )
    outputs = []
    for j, var in enumerate(chain.returns):
        if var.startswith("buf"):
            outputs.append((var, (), ""))
        else:
            shape = shape_of([g.outputs[j].shape for g in graphs])
            outputs.append((var, shape, first.outputs[j].dtype))
    return _Variant(key=key, launches=tuple(launches), buffers=buffers, outputs=tuple(outputs))


def _gemm_checks(seg: lower_chain.Segment, placeholders) -> tuple[str, ...]:
    """forward refuses operands whose inner dimensions differ before the GEMM reads past them."""
    a, b, transposed = lower_gemm.operands(lower_gemm.product(seg.graph))
    pa, pb = placeholders[a.args[0]], placeholders[b.args[0]]
    if "buffer" in (pa.role, pb.role):
        return ()
    ea, eb = _tensor_expr(pa), _tensor_expr(pb)
    kb = f"{eb}.shape[{len(pb.shape) - 1 if transposed else 0}]"
    return (
        f"        if {ea}.shape[-1] != {kb}:",
        f'            raise ValueError(f"matrix product of inner sizes {{{ea}.shape[-1]}} '
        f'and {{{kb}}}")',
    )


def _tensor_expr(p) -> str:
    if p.role == "buffer":
        return p.key  # a local variable of the variant's method
    if p.role == "input":
        return f"x{p.key}"
    # "network.0.weight" -> self.network[0].weight (a Sequential's or ModuleList's child)
    return "self" + "".join(
        f"[{part}]" if part.isdigit() else f".{part}" for part in p.key.split(".")
    )


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


_DESCRIBE = {
    "lower_pointwise": "pointwise (1-D grid, vectorised)",
    "lower_rowreduce": "last-dimension reduction (one group of threads per row)",
    "lower_gemm": "tiled GEMM with a pointwise epilogue (mma.sync / MFMA / FMA paths)",
}


def _kernel_source(task: TaskSpec, variants: list[_Variant], graphs: list[Graph]) -> str:
    patterns = [launch.pattern for v in variants for launch in v.launches]
    kernels = "".join(v.kernel for v in variants)
    f16 = re.search(r"\b(f16_to_float|float_to_f16|round_f16|DT_F16)\b", kernels) is not None
    bf16 = re.search(r"\b(float_to_bf16|round_bf16)\b", kernels) is not None
    row, pointwise = "lower_rowreduce" in patterns, "lower_pointwise" in patterns
    gemm = "lower_gemm" in patterns
    tunables = []
    if row:
        tunables.append(lower_rowreduce.TUNABLES)
        if pointwise:  # the pointwise kernels' own parameter, next to the shared BLOCK and VEC
            pw = lower_pointwise.TUNABLES
            tunables.append(pw[pw.index("// Vectors per thread") :])
    elif pointwise:
        tunables.append(lower_pointwise.TUNABLES)
    if gemm:
        tunables.append(lower_gemm.tunables(kernels))
    described = [_DESCRIBE[p] for p in dict.fromkeys(patterns)]
    launches = max(len(v.launches) for v in variants)
    head = [
        f"// {task.name}: lowered from its PyTorch reference by hipevolve's offline translator.",
        "// fp32 math; values PyTorch holds in bfloat16/float16 are rounded where it rounds them.",
        "// Pattern: "
        + ", then ".join(described)
        + (f" ({launches} kernels in order, intermediates in buffers)" if launches > 1 else ""),
        "// Kernels read warpSize (32 on NVIDIA, 64 on CDNA); nothing assumes a warp width.",
        "//",
        "// Tunable parameters: a comment `// @tunable NAME: v1, v2, ...` lists the values the",
        "// `#define NAME` right after it may take; the #define holds the current choice.",
        "#include <hip/hip_runtime.h>",
        *(["#include <hip/hip_fp16.h>"] if f16 else []),
        *(["#include <hip/hip_bf16.h>"] if bf16 else []),
        "#include <cstdint>",
        "",
        *tunables,
        DEVICE_HELPERS,
        *([F16_HELPERS] if f16 else []),
    ]
    if row or pointwise:
        head += [
            "// VEC elements that move as one load or store (the alignment makes them one access).",
            "template <typename T>\nstruct alignas(sizeof(T) * VEC) Pack {\n    T v[VEC];\n};",
        ]
    if row:
        head.append(lower_rowreduce.HELPERS)
    if gemm:
        head += [lower_gemm.HELPERS, *([lower_gemm.F16_ELEM] if f16 else [])]
    return "\n".join(head) + kernels


_KERNELBENCH_API = {"Model", "get_inputs", "get_init_inputs"}


def _defined_names(node: ast.stmt) -> set[str]:
    if isinstance(node, (ast.FunctionDef, ast.ClassDef, ast.AsyncFunctionDef)):
        return {node.name}
    if isinstance(node, (ast.Assign, ast.AnnAssign)):
        targets = node.targets if isinstance(node, ast.Assign) else [node.target]
        return {n.id for t in targets for n in ast.walk(t) if isinstance(n, ast.Name)}
    return set()


def _read_names(node: ast.AST) -> set[str]:
    return {n.id for n in ast.walk(node) if isinstance(n, ast.Name)}


def _definitions_read(tree: ast.Module, lines: list[str], init: ast.AST) -> list[str]:
    """The module-level statements (not the KernelBench API) that `init` reads, directly or
    through each other, as text in file order."""
    top = [(node, _defined_names(node)) for node in tree.body]
    top = [(n, names) for n, names in top if names and not names & _KERNELBENCH_API]
    wanted, needed = _read_names(init), set()
    while True:
        more = {i for i, (node, names) in enumerate(top) if names & wanted} - needed
        if not more:
            break
        needed |= more
        for i in more:
            wanted |= _read_names(top[i][0])
    return ["\n".join(lines[top[i][0].lineno - 1 : top[i][0].end_lineno]) for i in sorted(needed)]


def _init_source(task: TaskSpec) -> tuple[list[str], str]:
    """The reference's imports and the module-level definitions its Model.__init__ reads, then
    that __init__, as text."""
    text = task.reference.read_text()
    tree = parse_python(text)
    lines = text.splitlines()
    imports = []
    for node in tree.body:
        if isinstance(node, (ast.Import, ast.ImportFrom)):
            imports.append("\n".join(lines[node.lineno - 1 : node.end_lineno]))
    model = next((n for n in tree.body if isinstance(n, ast.ClassDef) and n.name == "Model"), None)
    init = None
    if model is not None:
        init = next(
            (n for n in model.body if isinstance(n, ast.FunctionDef) and n.name == "__init__"), None
        )
    if init is None:
        return imports, "    def __init__(self):\n        super().__init__()\n"
    imports += _definitions_read(tree, lines, init)
    body = "\n".join(lines[init.lineno - 1 : init.end_lineno]) + "\n"
    body = re.sub(r"\bsuper\(\s*Model\s*,\s*self\s*\)", "super()", body)
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
        out += [
            f"        if not isinstance({a}, torch.Tensor) or {a}.dim() != {rank}:",
            f'            raise ValueError("{a} must be a tensor of rank {rank}")',
        ]
    dtypes = [f"{_tensor_expr(p)}.dtype" for p in case.inputs + case.params]
    out.append(f"        key = ({', '.join(dtypes)},)")
    for k, v in enumerate(variants):
        wanted_key = ", ".join(f"torch.{d}" for d in v.key)
        out += [
            f"        if key == ({wanted_key},):",
            f"            return self._v{k}({', '.join(args)})",
        ]
    out.append('        raise ValueError(f"no kernel for the dtypes {key}")')
    device = f"{args[0] if args else 'self.weight'}.device"
    for k, v in enumerate(variants):
        out += ["", f"    def _v{k}(self, {', '.join(args)}):"]
        for launch in v.launches:
            out += list(launch.checks)
        allocated = [(n, shape, dt) for n, shape, dt in v.outputs if dt] + list(v.buffers)
        for name, shape, dtype in allocated:
            dims = ", ".join(shape) + ("," if len(shape) == 1 else "")
            out.append(
                f"        {name} = torch.empty(({dims}), dtype=torch.{dtype}, device={device})"
            )
        for launch in v.launches:
            touched = ", ".join(launch.tensors + launch.dests)
            call = [*launch.tensors, *launch.dests, *launch.sizes, *launch.floats]
            if launch.pattern == "lower_gemm":  # no vector flag: the GEMM stages through LDS
                out.append(f"        _ready([{touched}])")
            else:
                out.append(f"        vec_ok = _ready([{touched}])")
                call.append("vec_ok")
            out.append(f"        kernels.{launch.launcher}({', '.join(call)})")
        names = [n for n, _, _ in v.outputs]
        out.append(
            f"        return {', '.join(names)}"
            + ("," if case.returns_tuple and len(names) == 1 else "")
        )
    return "\n".join(out) + "\n"


__all__ = ["FLOAT_DTYPES", "Unlowered", "lower"]
