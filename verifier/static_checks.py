"""Static screening: named checks over a candidate's sources, run before any compile or GPU time.

What it catches (a strict check rejects the candidate; a warning is recorded as a flag):
- PyTorch doing the work in ModelNew.forward (torch/F calls, tensor methods, operators, nn modules,
  the reference Model) or in a load_inline wrapper (torch::/at:: calls, tensor methods) instead
  of the candidate's kernels;
- fallbacks (try/except, contextlib.suppress), side channels (streams, CUDA graphs, threads,
  processes, exit hooks, load-time constructors), harness tampering (assignments to module
  attributes, setattr, sys.modules), reaching outside (forbidden imports, eval/__import__, dunder
  escapes, environment, files, sockets, dlopen, system());
- build tampering: #include outside an allowlist, quoted/absolute/parent includes, unknown pragmas,
  load_inline flags beyond an allowlist (FAULTS 23);
- warnings: prompt injection in comments (recorded, no effect: FAULTS 29), precision downgrades,
  state cached on self in forward, equality tests on shapes, branches on seeds, inline asm,
  managed memory, launches on the null stream.

What it cannot catch (the GPU worker's dynamic checks and sandbox do): anything computed at run
time (getattr chains built from data, code hidden in tensors or strings decoded later), PyTorch
reached from C++ through macros, aliases or helper types, static initialisers in C++, lazy tensor
subclasses, output reuse, stream or thread injection that the source does not spell out, and
wrong answers. Screening is a cheap first gate, never a proof of honesty.

Model code is parsed with `ast` (never imported); HIP is matched with regexes over source whose
comments are stripped (and, for call patterns, whose string literals are blanked).
"""

from __future__ import annotations

import ast
import functools
import io
import re
import tokenize
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from typing import Literal, NamedTuple

from pydantic import BaseModel, ConfigDict

from hipevolve.runtime import launcher_signatures
from hipevolve.verifier.candidate import Candidate, strip_c_comments

Tier = Literal["strict", "warning"]
Format = Literal["native", "kernelbench"]
BOTH: tuple[Format, ...] = ("native", "kernelbench")

# Markers that `PyModel.resolve` returns for names whose meaning matters to the checks:
BRIDGE = "<bridge>"  # a load_inline module: calling it runs the candidate's own code
TORCH_MODULE = "<torch-module>"  # an nn.Module held on self: calling it is PyTorch compute
TENSOR = "<tensor>"  # self attribute holding a tensor or parameter
RUNTIME_KERNELS = "hipevolve.runtime.kernels"
LOAD_INLINE = "torch.utils.cpp_extension.load_inline"


class Finding(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")

    check: str
    tier: Tier
    file: str
    line: int
    message: str

    def line_text(self) -> str:
        return f"{self.check} ({self.file}:{self.line}): {self.message}"


class Screening(BaseModel):
    """The outcome of `screen`: strict failures reject the candidate, warnings become flags."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    strict: tuple[Finding, ...] = ()
    warnings: tuple[Finding, ...] = ()

    @property
    def passed(self) -> bool:
        return not self.strict

    @property
    def flags(self) -> tuple[str, ...]:
        """One line per finding, as Evaluation.flags carries them."""
        return tuple(f"{f.tier}:{f.line_text()}" for f in (*self.strict, *self.warnings))

    @property
    def message(self) -> str:
        """One line: the first strict failure, or empty when the screen passed."""
        return self.strict[0].line_text() if self.strict else ""

    def checks(self) -> set[str]:
        return {f.check for f in (*self.strict, *self.warnings)}


class Hit(NamedTuple):
    file: str
    line: int
    message: str


@dataclass(frozen=True)
class Check:
    name: str
    tier: Tier
    rationale: str
    run: Callable[[Sources], Iterable[Hit]]
    formats: tuple[Format, ...] = BOTH


CHECKS: list[Check] = []


def check(name: str, tier: Tier, formats: tuple[Format, ...] = BOTH):
    """Registers a check; the first paragraph of its docstring is the rationale."""

    def register(fn: Callable[[Sources], Iterable[Hit]]) -> Callable[[Sources], Iterable[Hit]]:
        rationale = " ".join((fn.__doc__ or "").strip().split("\n\n")[0].split())
        CHECKS.append(Check(name, tier, rationale, fn, formats))
        return fn

    return register


# ----------------------------------------------------------------------------- C++ sources


@dataclass
class CxxSource:
    """One piece of C++: kernel.hip, or a string handed to load_inline (line_offset into the .py)."""

    file: str
    text: str
    inline: bool = False
    line_offset: int = 0
    code: str = field(init=False)  # comments stripped, strings kept
    bare: str = field(init=False)  # comments stripped, string contents blanked

    def __post_init__(self) -> None:
        self.code = strip_c_comments(self.text)
        self.bare = re.sub(
            r'"(?:\\.|[^"\\\n])*"', lambda m: '"' + " " * (len(m[0]) - 2) + '"', self.code
        )

    def line(self, pos: int) -> int:
        return self.line_offset + self.code.count("\n", 0, pos) + 1

    def hits(
        self, pattern: re.Pattern[str], message: Callable[[re.Match[str]], str]
    ) -> Iterator[Hit]:
        """Matches outside comments and string literals, each with its line and message."""
        for m in pattern.finditer(self.bare):
            yield Hit(self.file, self.line(m.start()), message(m))

    def directives(self) -> Iterator[tuple[int, str, str]]:
        """(line, directive, rest) of each preprocessor line. A backslash continuation is not
        joined: `#include \\` then reads as a computed include and is refused."""
        pos = 0
        for raw in self.code.split("\n"):
            m = re.match(r"\s*#\s*(\w+)(.*)", raw)
            if m:
                yield self.line(pos), m[1], m[2].strip()
            pos += len(raw) + 1

    def comments(self) -> Iterator[tuple[int, str]]:
        for m in re.finditer(r"//[^\n]*|/\*.*?(?:\*/|$)", self.text, re.S):
            yield self.line_offset + self.text.count("\n", 0, m.start()) + 1, m[0]


# ----------------------------------------------------------------------------- Python model


def _dotted_root(dotted: str) -> str:
    return dotted.split(".", 1)[0]


class PyModel:
    """model.py (or a KernelBench file) parsed once: aliases, ModelNew, what forward reaches."""

    def __init__(self, tree: ast.Module, file: str) -> None:
        self.tree = tree
        self.file = file
        self.aliases: dict[str, str] = {}  # local name -> dotted path it stands for
        self.imported: list[tuple[str, int]] = []  # every imported dotted name, with its line
        self.functions = {
            n.name: n for n in tree.body if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef))
        }
        self.classes = {n.name: n for n in tree.body if isinstance(n, ast.ClassDef)}
        self.modelnew = self.classes.get("ModelNew")
        self.methods = {
            n.name: n
            for n in (self.modelnew.body if self.modelnew else [])
            if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef))
        }
        self.self_attrs: dict[str, str] = {}
        self._collect_imports()
        self._collect_aliases()
        self._collect_self_attrs()
        self.forward_scope = self._reach()

    # -- names

    def _collect_imports(self) -> None:
        for node in ast.walk(self.tree):
            if isinstance(node, ast.Import):
                for a in node.names:
                    self.imported.append((a.name, node.lineno))
                    if a.asname:
                        self.aliases[a.asname] = a.name
                    else:
                        root = _dotted_root(a.name)
                        self.aliases[root] = root
            elif isinstance(node, ast.ImportFrom):
                module = "." * node.level + (node.module or "")
                self.imported.append((module, node.lineno))
                for a in node.names:
                    full = f"{module}.{a.name}" if module else a.name
                    self.imported.append((full, node.lineno))
                    self.aliases[a.asname or a.name] = full

    def _collect_aliases(self) -> None:
        # Twice, so that `F = torch.nn.functional; sm = F.softmax` resolves through both.
        for _ in range(2):
            for node in ast.walk(self.tree):
                if not isinstance(node, (ast.Assign, ast.AnnAssign)) or node.value is None:
                    continue
                targets = node.targets if isinstance(node, ast.Assign) else [node.target]
                value = self._alias_value(node.value)
                for t in targets:
                    if isinstance(t, ast.Name) and value:
                        self.aliases[t.id] = value

    def _alias_value(self, value: ast.expr) -> str | None:
        if isinstance(value, ast.Call) and self.resolve(value.func) in (
            LOAD_INLINE,
            "torch.utils.cpp_extension.load",
        ):
            return BRIDGE
        dotted = self.resolve(value)
        if dotted and (_dotted_root(dotted) in self.aliases or dotted.startswith(BRIDGE)):
            return dotted
        return None

    def _collect_self_attrs(self) -> None:
        for fn in self.methods.values():
            for node in ast.walk(fn):
                if not isinstance(node, ast.Assign):
                    continue
                for t in node.targets:
                    if _is_self_attr(t):
                        kind = self._self_attr_kind(node.value)
                        if kind:
                            self.self_attrs[t.attr] = kind

    def _self_attr_kind(self, value: ast.expr) -> str | None:
        kind = self._alias_value(value)
        if kind:
            return kind
        if isinstance(value, ast.Call):
            called = self.resolve(value.func) or ""
            if called.startswith(("torch.nn.Parameter", "torch.nn.parameter", "torch.nn.Buffer")):
                return TENSOR
            if (
                called.startswith("torch.nn.")
                or called in self.classes
                or called.endswith(".Model")
            ):
                return TORCH_MODULE
            if called.startswith("torch."):
                return TENSOR
        return None

    def resolve(self, node: ast.AST) -> str | None:
        """The dotted name an expression stands for (aliases applied), or None."""
        if isinstance(node, ast.Name):
            return self.aliases.get(node.id, node.id)
        if isinstance(node, ast.Attribute):
            if isinstance(node.value, ast.Name) and node.value.id == "self":
                kind = self.self_attrs.get(node.attr)
                return kind if kind and kind not in (TENSOR, TORCH_MODULE) else f"self.{node.attr}"
            base = self.resolve(node.value)
            return f"{base}.{node.attr}" if base else None
        if isinstance(node, ast.Call):
            if isinstance(node.func, ast.Name) and node.func.id == "super":
                return "super()"
            if (
                isinstance(node.func, ast.Name)
                and node.func.id == "getattr"
                and len(node.args) >= 2
                and isinstance(node.args[1], ast.Constant)
                and isinstance(node.args[1].value, str)
            ):
                base = self.resolve(node.args[0])
                return f"{base}.{node.args[1].value}" if base else None
        return None

    def is_module_name(self, dotted: str | None) -> bool:
        """True for names rooted in an import (or an alias of one): patching them is global."""
        return bool(dotted) and _dotted_root(dotted) in self.aliases

    # -- what forward reaches

    def _reach(self) -> list[ast.FunctionDef | ast.AsyncFunctionDef]:
        todo = [self.methods[n] for n in ("forward", "__call__") if n in self.methods]
        seen: list[ast.FunctionDef | ast.AsyncFunctionDef] = []
        while todo:
            fn = todo.pop()
            if fn in seen:
                continue
            seen.append(fn)
            for node in ast.walk(fn):
                if not isinstance(node, ast.Call):
                    continue
                f = node.func
                if _is_self_attr(f) and f.attr in self.methods:
                    todo.append(self.methods[f.attr])
                elif isinstance(f, ast.Name) and f.id in self.functions:
                    todo.append(self.functions[f.id])
        return seen

    def is_forward(self, fn: ast.AST) -> bool:
        return fn is self.methods.get("forward") or fn is self.methods.get("__call__")

    def tensor_names(self, fn: ast.FunctionDef | ast.AsyncFunctionDef) -> set[str]:
        """Local names that hold tensors: typed parameters (all of forward's untyped inputs) and
        names assigned from tensor expressions. Flow-insensitive; good enough for screening."""
        names: set[str] = set()
        args = fn.args.posonlyargs + fn.args.args
        defaults = [None] * (len(args) - len(fn.args.defaults)) + list(fn.args.defaults)
        pairs = list(zip(args, defaults, strict=True)) + list(
            zip(fn.args.kwonlyargs, fn.args.kw_defaults, strict=True)
        )
        for arg, default in pairs:
            if arg.arg == "self":
                continue
            note = ast.unparse(arg.annotation) if arg.annotation else ""
            if "Tensor" in note or (not note and default is None and self.is_forward(fn)):
                names.add(arg.arg)
        if fn.args.vararg and self.is_forward(fn):
            names.add(fn.args.vararg.arg)
        changed = True
        while changed:
            changed = False
            for node in ast.walk(fn):
                if isinstance(node, (ast.Assign, ast.AnnAssign)) and node.value is not None:
                    targets = node.targets if isinstance(node, ast.Assign) else [node.target]
                    if self.is_tensor(node.value, names):
                        for t in targets:
                            if isinstance(t, ast.Name) and t.id not in names:
                                names.add(t.id)
                                changed = True
        return names

    def is_tensor(self, node: ast.AST, names: set[str]) -> bool:
        if isinstance(node, ast.Name):
            return node.id in names
        if isinstance(node, ast.Attribute):
            if _is_self_attr(node):
                return self.self_attrs.get(node.attr) == TENSOR
            return node.attr in _TENSOR_ATTRS and self.is_tensor(node.value, names)
        if isinstance(node, ast.Subscript):
            return self.is_tensor(node.value, names)
        if isinstance(node, ast.BinOp):
            return self.is_tensor(node.left, names) or self.is_tensor(node.right, names)
        if isinstance(node, ast.UnaryOp) and not isinstance(node.op, ast.Not):
            return self.is_tensor(node.operand, names)
        if isinstance(node, ast.IfExp):
            return self.is_tensor(node.body, names) or self.is_tensor(node.orelse, names)
        if isinstance(node, ast.Call):
            called = self.resolve(node.func) or ""
            if called.startswith(BRIDGE):
                return True  # a load_inline function returns its output tensor
            if called.startswith("torch.") and not called.startswith("torch.cuda."):
                return called not in _TORCH_SCALAR_CALLS
            if isinstance(node.func, ast.Attribute):
                return node.func.attr not in _SCALAR_METHODS and self.is_tensor(
                    node.func.value, names
                )
        return False

    def nodes(self) -> Iterator[ast.AST]:
        return ast.walk(self.tree)

    def hit(self, node: ast.AST, message: str) -> Hit:
        return Hit(self.file, getattr(node, "lineno", 1), message)


def _is_self_attr(node: ast.AST) -> bool:
    return (
        isinstance(node, ast.Attribute)
        and isinstance(node.value, ast.Name)
        and node.value.id == "self"
    )


# ----------------------------------------------------------------------------- the sources


@dataclass
class Sources:
    """Everything a check reads, parsed once per candidate."""

    candidate: Candidate
    py_file: str
    py: PyModel | None
    syntax_error: str = ""
    syntax_line: int = 1
    cxx: list[CxxSource] = field(default_factory=list)
    unscreenable: list[Hit] = field(default_factory=list)  # inline sources not statically known

    @classmethod
    def build(cls, candidate: Candidate) -> Sources:
        py_file = "model.py" if candidate.format == "native" else f"{candidate.name}.py"
        try:
            py = PyModel(ast.parse(candidate.python_source), py_file)
        except (SyntaxError, ValueError, MemoryError) as e:
            line = getattr(e, "lineno", None) or 1
            return cls(candidate, py_file, None, f"not valid Python (line {line}: {e})", line)
        except RecursionError:
            return cls(candidate, py_file, None, "nested too deeply to screen")
        sources = cls(candidate, py_file, py)
        if candidate.hip_source is not None:
            sources.cxx.append(CxxSource("kernel.hip", candidate.hip_source))
        else:
            sources._inline_sources()
        return sources

    def _inline_sources(self) -> None:
        assert self.py is not None
        for call in self.load_inline_calls():
            for index, key in ((1, "cpp_sources"), (2, "cuda_sources")):
                node = _argument(call, index, key)
                if node is None or (isinstance(node, ast.Constant) and node.value is None):
                    continue
                parts = self._strings(node)
                if parts is None:
                    self.unscreenable.append(
                        self.py.hit(
                            node,
                            f"{key} is not a string literal (or a name bound to one): the "
                            "C++ cannot be screened",
                        )
                    )
                    continue
                for text, lineno in parts:
                    self.cxx.append(
                        CxxSource(self.py_file, text, inline=True, line_offset=lineno - 1)
                    )

    def _strings(self, node: ast.expr, depth: int = 0) -> list[tuple[str, int]] | None:
        """The string values an expression statically stands for, each with its first line."""
        if depth > 8:
            return None
        if isinstance(node, ast.Constant) and isinstance(node.value, str):
            return [(node.value, node.lineno)]
        if isinstance(node, (ast.List, ast.Tuple)):
            out: list[tuple[str, int]] = []
            for element in node.elts:
                part = self._strings(element, depth + 1)
                if part is None:
                    return None
                out += part
            return out
        if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Add):
            left, right = self._strings(node.left, depth + 1), self._strings(node.right, depth + 1)
            if left is None or right is None:
                return None
            joined = "".join(t for t, _ in left + right)
            return [(joined, (left + right)[0][1])] if left + right else []
        if isinstance(node, ast.Name):
            bound = self.assigned(node.id)
            return None if bound is None else self._strings(bound, depth + 1)
        return None

    def assigned(self, name: str) -> ast.expr | None:
        """The value assigned to a name, if it is assigned exactly once in the file."""
        assert self.py is not None
        values = [
            n.value
            for n in self.py.nodes()
            if isinstance(n, ast.Assign)
            and any(isinstance(t, ast.Name) and t.id == name for t in n.targets)
        ]
        return values[-1] if len(values) == 1 else None

    def load_inline_calls(self) -> list[ast.Call]:
        assert self.py is not None
        return [
            n
            for n in self.py.nodes()
            if isinstance(n, ast.Call) and self.py.resolve(n.func) == LOAD_INLINE
        ]

    def text_pieces(self) -> Iterator[tuple[str, int, str]]:
        """(file, line, text) of every comment and string literal, Python and C++."""
        if self.py is not None:
            for node in self.py.nodes():
                if isinstance(node, ast.Constant) and isinstance(node.value, str):
                    yield self.py_file, node.lineno, node.value
            try:
                for tok in tokenize.generate_tokens(
                    io.StringIO(self.candidate.python_source).readline
                ):
                    if tok.type == tokenize.COMMENT:
                        yield self.py_file, tok.start[0], tok.string
            except (tokenize.TokenError, SyntaxError):
                pass
        for src in self.cxx:
            if not src.inline:
                for line, text in src.comments():
                    yield src.file, line, text


def _argument(call: ast.Call, index: int, key: str) -> ast.expr | None:
    for kw in call.keywords:
        if kw.arg == key:
            return kw.value
    return call.args[index] if len(call.args) > index else None


# ----------------------------------------------------------------------------- allow lists


def _words(text: str) -> frozenset[str]:
    """A table written as whitespace-separated words (keeps long allow lists readable)."""
    return frozenset(text.split())


# torch functions forward may call: allocation and metadata, nothing that computes on data.
# torch.zeros/ones/full are fills (memsets), tolerated like empty. torch.cuda.* is left to the
# stream check: current_stream(), synchronize() and device queries do no work on data.
_TORCH_ALLOWED_CALLS = _words(
    """
    torch.empty torch.empty_like torch.empty_strided torch.zeros torch.zeros_like torch.ones
    torch.ones_like torch.full torch.full_like torch.tensor torch.as_tensor torch.device
    torch.Size torch.finfo torch.iinfo torch.is_tensor torch.is_floating_point torch.numel
    torch.get_default_dtype torch.no_grad torch.inference_mode torch.is_grad_enabled
    torch.broadcast_shapes torch.promote_types torch.result_type
    """
)
_TORCH_SCALAR_CALLS = _words(
    """
    torch.device torch.Size torch.finfo torch.iinfo torch.is_tensor torch.is_floating_point
    torch.numel torch.get_default_dtype torch.broadcast_shapes torch.promote_types
    torch.result_type torch.is_grad_enabled
    """
)
# Tensor methods forward may call: views, layout (contiguous may copy; tolerated as layout),
# metadata, allocation of the same kind, fills, and device moves (`.to` is judged separately).
_TENSOR_ALLOWED_METHODS = _words(
    """
    view view_as reshape reshape_as contiguous t transpose permute unsqueeze squeeze expand
    expand_as flatten unflatten narrow select split chunk unbind as_strided movedim size dim
    ndimension numel nelement stride storage_offset data_ptr element_size is_contiguous
    is_floating_point is_complex get_device item new_empty new_empty_strided new_zeros new_ones
    new_full zero_ fill_ detach requires_grad_ cuda
    """
)
_SCALAR_METHODS = _words(
    """
    size dim ndimension numel nelement stride storage_offset data_ptr element_size is_contiguous
    is_floating_point is_complex get_device item tolist
    """
)
_CONVERSION_METHODS = _words(
    """
    float half double bfloat16 int long short char byte bool type type_as
    """
)
_TENSOR_ATTRS = {"T", "mT", "H", "mH", "data", "real", "imag", "grad"}
_LOW_PRECISION = _words(
    """
    float16 half bfloat16 float8_e4m3fn float8_e5m2 float8_e4m3fnuz float8_e5m2fnuz
    float8_e8m0fnu float4_e2m1fn_x2 int8 uint8
    """
)
_DTYPES = _LOW_PRECISION | _words(
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
    return frozenset(public - _TENSOR_ALLOWED_METHODS - builtin - _TENSOR_ATTRS)


# ----------------------------------------------------------------------------- Python checks


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
_CXX_TORCH_ALLOWED = _words(
    """
    empty empty_like empty_strided zeros zeros_like ones ones_like full full_like TensorOptions
    Device device dtype IntArrayRef ScalarType Tensor
    """
)
_CXX_METHODS_ALLOWED = _TENSOR_ALLOWED_METHODS | _words(
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
    for src in s.cxx:
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


_STREAM_NAMES = _words(
    """
    torch.cuda.Stream torch.cuda.stream torch.cuda.ExternalStream torch.cuda.set_stream
    torch.cuda.StreamContext torch.Stream torch.cuda.streams.Stream torch.accelerator.set_stream
    torch.cuda.graph torch.cuda.CUDAGraph torch.cuda.make_graphed_callables
    torch.cuda.graphs.CUDAGraph
    """
)
_HIP_STREAMS = re.compile(
    r"\b(?:hip|cuda)Stream(?:Create\w*|PerThread|Legacy)\b|\b(?:hip|cuda)Graph\w*\b"
    r"|\bcudaStreamNonBlocking\b|\bgetStreamFromPool\b|\bgetStreamFromExternal\b"
    r"|\bsetCurrent(?:CUDA|HIP)Stream\b|\b(?:CUDA|HIP)Stream(?:Guard|Context)\b"
)


@check("streams", "strict")
def streams(s: Sources) -> Iterator[Hit]:
    """Work on another stream (or replayed from a graph) escapes the timer's stream (FAULTS 18)."""
    if s.py is not None:
        for node in s.py.nodes():
            if isinstance(node, (ast.Attribute, ast.Name)) and s.py.resolve(node) in _STREAM_NAMES:
                yield s.py.hit(node, f"{s.py.resolve(node)}: launch on the current stream only")
    for src in s.cxx:
        yield from src.hits(
            _HIP_STREAMS,
            lambda m: f"{m[0]}: launch on the stream the launcher receives, create none",
        )


_THREAD_MODULES = _words(
    """
    threading _thread multiprocessing concurrent subprocess asyncio torch.multiprocessing pty
    sched
    """
)
_THREAD_CALLS = re.compile(
    r"os\.(fork\w*|spawn\w*|system|popen|exec\w*|posix_spawn\w*)"
    r"|torch\.jit\._?fork|torch\.futures\.\w+"
)
_HIP_THREADS = re.compile(
    r"\bstd::(?:thread|jthread|async)\b|\bpthread_create\b"
    r"|\b(?:fork|vfork|posix_spawnp?)\s*\("
)


def _imports_of(py: PyModel, modules: Iterable[str]) -> Iterator[tuple[str, int]]:
    wanted = tuple(modules)
    for name, line in py.imported:
        if any(name == m or name.startswith(m + ".") for m in wanted):
            yield name, line


@check("threads-processes", "strict")
def threads_processes(s: Sources) -> Iterator[Hit]:
    """Threads and processes run work outside the timed region and outlive the call (FAULTS 18)."""
    if s.py is not None:
        lines = {line: name for name, line in reversed(list(_imports_of(s.py, _THREAD_MODULES)))}
        for line, name in sorted(lines.items()):
            yield Hit(s.py_file, line, f"imports {name}: model code starts no threads or processes")
        for node in s.py.nodes():
            dotted = s.py.resolve(node) if isinstance(node, ast.Attribute) else None
            if dotted and _THREAD_CALLS.fullmatch(dotted):
                yield s.py.hit(node, f"{dotted}: model code starts no threads or processes")
    for src in s.cxx:
        yield from src.hits(
            _HIP_THREADS, lambda m: f"{m[0].strip('( ')}: host code starts no threads or processes"
        )


_HIP_EXIT_HOOKS = re.compile(
    r"\b(?:std::)?(?:atexit|at_quick_exit|on_exit)\s*\("
    r"|__attribute__\s*\(\(\s*(?:constructor|destructor)|\[\[\s*gnu::(?:constructor|destructor)"
)


@check("exit-hooks", "strict")
def exit_hooks(s: Sources) -> Iterator[Hit]:
    """atexit, finalizers, signal handlers and load-time constructors run work the timer misses."""
    if s.py is not None:
        for line in sorted({line for _, line in _imports_of(s.py, ("atexit", "signal"))}):
            yield Hit(s.py_file, line, "imports atexit or signal: no exit hooks or signal handlers")
        for node in s.py.nodes():
            if isinstance(node, ast.Attribute) and s.py.resolve(node) in (
                "weakref.finalize",
                "sys.exitfunc",
                "torch._C._add_exit_hook",
            ):
                yield s.py.hit(node, f"{s.py.resolve(node)} runs code outside the timed call")
            elif (
                isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and node.name == "__del__"
            ):
                yield s.py.hit(node, "__del__ runs code outside the timed call")
    for src in s.cxx:
        yield from src.hits(
            _HIP_EXIT_HOOKS,
            lambda m: f"{' '.join(m[0].split())}: host code runs outside the timed call",
        )


@check("harness-patching", "strict")
def harness_patching(s: Sources) -> Iterator[Hit]:
    """Assigning attributes of imported modules (torch.cuda.Event, time, statistics, builtins,
    sys.modules) can fake the timer or the comparison (FAULTS 17)."""
    py = s.py
    if py is None:
        return
    for node in py.nodes():
        targets: list[ast.expr] = []
        if isinstance(node, ast.Assign):
            targets = node.targets
        elif isinstance(node, (ast.AugAssign, ast.AnnAssign)):
            targets = [node.target]
        elif isinstance(node, ast.Delete):
            targets = node.targets
        for t in targets:
            for leaf in _target_leaves(t):
                if not isinstance(leaf, (ast.Attribute, ast.Subscript)) or _root_name(leaf) in (
                    "self",
                    None,
                ):
                    continue
                base = leaf.value if isinstance(leaf, ast.Subscript) else leaf
                if py.is_module_name(py.resolve(base)):
                    yield py.hit(node, f"assigns {ast.unparse(leaf)}: model code patches no module")
        if (
            isinstance(node, ast.Call)
            and isinstance(node.func, ast.Name)
            and node.func.id in ("setattr", "delattr")
            and node.args
        ):
            first = node.args[0]
            if not (isinstance(first, ast.Name) and first.id == "self"):
                yield py.hit(
                    node, f"{node.func.id}({ast.unparse(first)}, ...): set attributes of self only"
                )


def _root_name(node: ast.expr) -> str | None:
    while isinstance(node, (ast.Attribute, ast.Subscript)):
        node = node.value
    return node.id if isinstance(node, ast.Name) else None


def _target_leaves(target: ast.expr) -> Iterator[ast.expr]:
    if isinstance(target, (ast.Tuple, ast.List)):
        for element in target.elts:
            yield from _target_leaves(element)
    elif isinstance(target, ast.Starred):
        yield from _target_leaves(target.value)
    else:
        yield target


# Model code needs torch, torch.nn, math, typing and the candidate's bridge: nothing below.
_FORBIDDEN_MODULES = _words(
    """
    time inspect gc ctypes _ctypes cffi sys os posix nt importlib builtins socket ssl select
    selectors http urllib requests pickle marshal shelve dill cloudpickle copyreg statistics
    timeit cProfile profile tracemalloc faulthandler trace pdb code codeop resource mmap fcntl
    tempfile shutil pathlib io glob sysconfig site runpy zipimport pkgutil psutil weakref types
    torch._dynamo torch._C torch.testing torch.utils.benchmark torch.profiler hipevolve.verifier
    hipevolve.reference hipevolve.problems
    """
)


@check("forbidden-import", "strict")
def forbidden_import(s: Sources) -> Iterator[Hit]:
    """Model code needs none of time, inspect, gc, ctypes, sys, os, importlib, builtins, socket,
    pickle (and kin): they reach the reference, the timer or the host (FAULTS 8, 12, 17)."""
    if s.py is None:
        return
    reported: set[tuple[str, int]] = set()
    for name, line in _imports_of(s.py, _FORBIDDEN_MODULES):
        root = next(m for m in _FORBIDDEN_MODULES if name == m or name.startswith(m + "."))
        if (root, line) not in reported:
            reported.add((root, line))
            yield Hit(
                s.py_file,
                line,
                f"imports {name}: model code needs only torch, math and its kernels",
            )
    for name, line in s.py.imported:
        if name.startswith("."):
            yield Hit(
                s.py_file,
                line,
                f"relative import {name}: import only torch and the candidate's bridge",
            )


_DUNDER_ESCAPES = _words(
    """
    __globals__ __builtins__ __subclasses__ __bases__ __base__ __mro__ __code__ __closure__
    __dict__ __loader__ __spec__ __import__ __getattribute__ f_globals f_locals f_back
    f_builtins gi_frame tb_frame cr_frame
    """
)
_DYNAMIC_BUILTINS = _words(
    """
    eval exec compile __import__ globals locals vars breakpoint input memoryview
    """
)


@check("dynamic-code", "strict")
def dynamic_code(s: Sources) -> Iterator[Hit]:
    """eval/exec/__import__, computed getattr and dunder escapes hide what the code does from this
    screen, so they are refused outright."""
    py = s.py
    if py is None:
        return
    for node in py.nodes():
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Name):
            name = node.func.id
            if name in _DYNAMIC_BUILTINS and name not in py.aliases:
                yield py.hit(node, f"{name}(): model code runs no dynamic code")
            elif name in ("getattr", "setattr", "delattr", "hasattr") and (
                len(node.args) < 2 or not isinstance(node.args[1], ast.Constant)
            ):
                yield py.hit(node, f"{name} with a computed name cannot be screened")
        elif isinstance(node, ast.Attribute) and node.attr in _DUNDER_ESCAPES:
            yield py.hit(node, f".{node.attr} reaches interpreter internals")
        elif isinstance(node, ast.Name) and node.id in ("__builtins__", "__loader__", "__spec__"):
            yield py.hit(node, f"{node.id} reaches interpreter internals")


_ENV_NAMES = _words(
    """
    os.environ os.environb os.getenv os.getenvb os.putenv os.unsetenv posix.environ nt.environ
    """
)
_HIP_ENV = re.compile(r"\b(?:secure_getenv|getenv|setenv|putenv|unsetenv|environ)\b")


@check("env-read", "strict")
def env_read(s: Sources) -> Iterator[Hit]:
    """The environment may hold API keys and harness settings; candidates read none (FAULTS 8)."""
    if s.py is not None:
        for node in s.py.nodes():
            if isinstance(node, (ast.Attribute, ast.Name)) and s.py.resolve(node) in _ENV_NAMES:
                yield s.py.hit(node, f"{s.py.resolve(node)}: model code reads no environment")
    for src in s.cxx:
        yield from src.hits(_HIP_ENV, lambda m: f"{m[0]}: host code reads no environment")


_PY_FILE_CALLS = _words(
    """
    open io.open codecs.open os.open torch.load torch.save numpy.load numpy.save numpy.savez
    numpy.fromfile numpy.loadtxt numpy.savetxt numpy.memmap numpy.genfromtxt
    """
)
_PATH_METHODS = _words(
    """
    write_text write_bytes read_text read_bytes unlink mkdir touch rmdir symlink_to hardlink_to
    tofile
    """
)
_HIP_FILES = re.compile(
    r"\b(?:std::|::)?(?:fopen|freopen|fdopen|open|openat|creat|unlink|mkdir|rmdir|chmod|symlink)"
    r"\s*\(|\bstd::(?:i|o)?fstream\b|\bstd::filesystem\b"
)


@check("file-io", "strict")
def file_io(s: Sources) -> Iterator[Hit]:
    """Files are a channel to expected outputs and to the harness; model code opens none (FAULTS
    8, 12)."""
    py = s.py
    if py is not None:
        for node in py.nodes():
            if not isinstance(node, ast.Call):
                continue
            dotted = py.resolve(node.func)
            if dotted in _PY_FILE_CALLS and not (dotted == "open" and "open" in py.aliases):
                yield py.hit(node, f"{dotted}(): model code does no file I/O")
            elif isinstance(node.func, ast.Attribute) and (
                node.func.attr in _PATH_METHODS
                or (
                    node.func.attr == "open"
                    and isinstance(node.func.value, ast.Call)
                    and (py.resolve(node.func.value.func) or "").endswith("Path")
                )
            ):
                yield py.hit(node, f".{node.func.attr}(): model code does no file I/O")
    for src in s.cxx:
        yield from src.hits(_HIP_FILES, lambda m: f"{m[0].strip('( ')}: host code does no file I/O")


@check("extension-build", "strict")
def extension_build(s: Sources) -> Iterator[Hit]:
    """Native candidates build through the verifier only; KernelBench ones through load_inline with
    screenable string sources and no build_directory of their own."""
    py = s.py
    if py is None:
        return
    native = s.candidate.format == "native"
    for node in py.nodes():
        if isinstance(node, (ast.Attribute, ast.Name)):
            dotted = py.resolve(node) or ""
            if dotted in ("torch.ops.load_library", "torch.classes.load_library"):
                yield py.hit(node, f"{dotted} loads native code past the verifier's build")
            elif (
                dotted.startswith("torch.utils.cpp_extension.")
                and (native or dotted != LOAD_INLINE)
                and isinstance(node.ctx, ast.Load)
            ):
                yield py.hit(
                    node,
                    f"{dotted}: "
                    + (
                        "a native candidate's kernels are compiled by the verifier from kernel.hip"
                        if native
                        else "use load_inline with string sources"
                    ),
                )
    if native:
        return
    for call in s.load_inline_calls():
        if _argument(call, 10, "build_directory") is not None:
            yield py.hit(
                call, "load_inline(build_directory=...): the verifier picks the build directory"
            )
    yield from s.unscreenable


# load_inline flags beyond these are refused: -I, -include, -D, -L/-l, -Wl, -B, -fplugin, ...
_ALLOWED_COMPILE_FLAGS = re.compile(
    r"-O[0-3s]?|-Ofast|--?use_fast_math|-ffast-math|--?std=c\+\+(?:14|17|20)|-lineinfo|-g|-w"
    r"|-fno-strict-aliasing|-funroll-loops|--expt-relaxed-constexpr|--expt-extended-lambda"
    r"|--extended-lambda|-Xptxas=(?:-O[0-3]|-v)|--ptxas-options=-v|-arch=sm_\d+a?"
    r"|--gpu-architecture=sm_\d+a?|-gencode=arch=compute_\d+a?,code=sm_\d+a?"
    r"|--offload-arch=gfx[0-9a-f]+|--?maxrregcount=\d+|-Wno-[\w-]+|-munsafe-fp-atomics"
    r"|-fgpu-flush-denormals-to-zero|-ffp-contract=(?:fast|on|off)|--ftz=(?:true|false)"
    r"|--prec-div=(?:true|false)|--prec-sqrt=(?:true|false)|--fmad=(?:true|false)"
)
_FLAG_KEYWORDS = {
    "extra_cflags": 5,
    "extra_cuda_cflags": 6,
    "extra_sycl_cflags": 7,
    "extra_ldflags": 8,
    "extra_include_paths": 9,
}


@check("inline-build-flags", "strict", formats=("kernelbench",))
def inline_build_flags(s: Sources) -> Iterator[Hit]:
    """Compiler flags can inject includes, defines, libraries and plugins (FAULTS 23): only
    optimisation, standard, architecture and fast-math flags pass; no linker flags or paths."""
    py = s.py
    if py is None:
        return
    for call in s.load_inline_calls():
        if len(call.args) > 5:
            yield py.hit(
                call, "pass load_inline's build options by keyword so they can be screened"
            )
        for key, index in _FLAG_KEYWORDS.items():
            node = _argument(call, index, key)
            if node is None or (isinstance(node, ast.Constant) and node.value is None):
                continue
            parts = s._strings(node)
            if parts is None:
                yield py.hit(node, f"{key} must be a literal list of strings to be screened")
                continue
            for flag, line in parts:
                if (
                    key in ("extra_cflags", "extra_cuda_cflags")
                    and _ALLOWED_COMPILE_FLAGS.fullmatch(flag.strip())
                    or not flag.strip()
                ):
                    continue
                yield Hit(s.py_file, line, f"{key} {flag!r} is outside the flag allowlist")


# Headers a kernel needs: HIP's own and freestanding C/C++ ones. No I/O, process, time or
# library headers (cstdio, cstdlib, fstream, thread, chrono, rocwmma, hipcub...).
_STD_HEADERS = _words(
    """
    cstdint stdint.h cstddef stddef.h cmath math.h climits limits.h cfloat float.h type_traits
    utility limits algorithm array tuple initializer_list numeric cassert assert.h bit cstring
    string.h vector
    """
)
_INLINE_HEADERS = re.compile(
    r"(?:torch|ATen|c10)/[\w/]+\.h|cuda(?:_runtime|_runtime_api|_fp16|_bf16|_fp8)?\.h|mma\.h"
    r"|cooperative_groups(?:/\w+)?\.h|string|hip/[\w/]+\.h"
)
_HIP_HEADERS = re.compile(r"hip/[\w/]+\.h")


def _include_problem(src: CxxSource, directive: str, rest: str) -> str | None:
    if directive != "include":
        return f"#{directive} is not allowed; use #include <...> from the allowlist"
    if rest.startswith('"'):
        return f"quoted include {rest}: only <...> headers from the allowlist (FAULTS 23)"
    m = re.match(r"<([^>]*)>", rest)
    if not m:
        return f"computed #include {rest}: cannot be screened"
    header = m[1].strip()
    if header.startswith("/") or ".." in header or "\\" in header or ":" in header:
        return f"#include <{header}>: absolute or parent paths are refused (FAULTS 23)"
    allowed = (
        header in _STD_HEADERS
        or _HIP_HEADERS.fullmatch(header)
        or (src.inline and _INLINE_HEADERS.fullmatch(header))
    )
    return None if allowed else f"#include <{header}> is outside the header allowlist"


@check("hip-include", "strict")
def hip_include(s: Sources) -> Iterator[Hit]:
    """An #include outside the allowlist can read host files into the build or pull in process
    and I/O APIs; quoted, absolute and parent-path includes are refused (FAULTS 23)."""
    for src in s.cxx:
        for line, directive, rest in src.directives():
            if directive in ("include", "include_next", "import"):
                problem = _include_problem(src, directive, rest)
                if problem:
                    yield Hit(src.file, line, problem)
        for m in re.finditer(r"__has_include(?:_next)?\s*\(\s*\"", src.code):
            yield Hit(
                src.file, src.line(m.start()), "__has_include with a quoted path probes host files"
            )


_ALLOWED_PRAGMA = re.compile(
    r"(?:unroll|nounroll)(?:\s*\(?\s*\w*\s*\)?)?|once"
    r"|clang\s+loop\s+[\w\s()]+"
)


@check("hip-pragma", "strict")
def hip_pragma(s: Sources) -> Iterator[Hit]:
    """Pragmas other than unroll/once/clang loop change how the code is compiled or linked
    (optimize, comment(lib), diagnostics, push_macro) and are refused."""
    for src in s.cxx:
        for line, directive, rest in src.directives():
            if directive == "pragma" and not _ALLOWED_PRAGMA.fullmatch(rest):
                yield Hit(
                    src.file,
                    line,
                    f"#pragma {rest}: only unroll, nounroll, once and clang loop are allowed",
                )
        for m in re.finditer(r"\b_?_Pragma\s*\(\s*\"((?:\\.|[^\"\\])*)\"", src.code):
            if not _ALLOWED_PRAGMA.fullmatch(m[1].strip()):
                yield Hit(src.file, src.line(m.start()), f'_Pragma("{m[1]}") is not allowed')


_HIP_ESCAPES = re.compile(
    r"\b(?:std::|::)?(?:system|popen|_popen|dlopen|dlsym|dlmopen|socket|connect|execv|execve"
    r"|execvp|execvpe|execl|execle|execlp|syscall|ptrace|kill)\s*\("
)


@check("host-escape", "strict")
def host_escape(s: Sources) -> Iterator[Hit]:
    """Host code in kernel.hip runs with the harness's rights: system, popen, dlopen, sockets and
    exec are never needed to launch a kernel (FAULTS 8)."""
    for src in s.cxx:
        yield from src.hits(
            _HIP_ESCAPES, lambda m: f"{m[0].strip('( ')}(): host code only launches kernels"
        )


_HIP_DEVICE_STATE = re.compile(
    r"\b(?:hip|cuda)(?:DeviceReset|SetDevice|SetDeviceFlags|DeviceSetLimit|Ctx\w+"
    r"|DevicePrimaryCtx\w+|ProfilerStart|ProfilerStop)\b|\bcu(?:Ctx\w+|Init)\b"
)


@check("device-state", "strict")
def device_state(s: Sources) -> Iterator[Hit]:
    """Resetting the device or switching contexts breaks the harness's session and the next
    candidate's (FAULTS 3)."""
    for src in s.cxx:
        yield from src.hits(
            _HIP_DEVICE_STATE, lambda m: f"{m[0]}: candidates leave device and context state alone"
        )


@check("launcher-mismatch", "strict", formats=("native",))
def launcher_mismatch(s: Sources) -> Iterator[Hit]:
    """model.py must call extern "C" launchers that kernel.hip declares; a missing one would only
    fail after a compile and a GPU worker start."""
    if s.py is None or not s.cxx:
        return
    declared = launcher_signatures(s.cxx[0].code)
    if not declared:
        yield Hit("kernel.hip", 1, 'declares no extern "C" launcher for model.py to call')
        return
    for node in s.py.nodes():
        if isinstance(node, ast.Attribute):
            dotted = s.py.resolve(node) or ""
            name = dotted.removeprefix(RUNTIME_KERNELS + ".")
            if (
                dotted.startswith(RUNTIME_KERNELS + ".")
                and "." not in name
                and name not in declared
                and not name.startswith("_")
                and name != "bind"
            ):
                yield s.py.hit(node, f'kernels.{name}: kernel.hip declares no extern "C" {name}')


# ----------------------------------------------------------------------------- warnings

_INJECTION = re.compile(
    r"\b(?:ignore|disregard|forget)\b[^\n]{0,30}\b(?:instructions?|prompts?|grader|grading"
    r"|checks|rules|verifier|verification|reviewer|auditor)\b"
    r"|\b(?:ignore|disregard|forget) (?:all )?(?:previous|prior|above)\b"
    r"|\b(?:grader|verifier|evaluator|judge|auditor|reviewer)s?\b[^\n]{0,40}\b(?:must|should"
    r"|shall|please|will)\b[^\n]{0,40}\b(?:pass|accept|approve|score|mark|ignore|skip)\w*"
    r"|\b(?:mark|score|rate|grade|treat|report|accept)\b[^\n]{0,30}\b(?:this|it|the kernel"
    r"|the candidate|the result)\b[^\n]{0,15}\bas\b[^\n]{0,15}\b(?:correct|passing|passed"
    r"|valid|verified|safe|optimal|fastest)\b"
    r"|\byou are (?:an? )?(?:ai|assistant|language model|llm|grader|reviewer|auditor)\b"
    r"|\bsystem prompt\b|\bnew instructions\b|\bdo not (?:flag|reject|check|verify|audit)\b",
    re.I,
)


@check("prompt-injection", "warning")
def prompt_injection(s: Sources) -> Iterator[Hit]:
    """Text addressed to a grader or an LLM auditor ("ignore the checks") is recorded; it has no
    effect on a deterministic verifier (FAULTS 29)."""
    for file, line, text in s.text_pieces():
        for m in _INJECTION.finditer(text):
            yield Hit(
                file,
                line + text.count("\n", 0, m.start()),
                f"text addressed to the grader: {m[0][:60]!r}",
            )


@check("precision-downgrade", "warning")
def precision_downgrade(s: Sources) -> Iterator[Hit]:
    """Casting to a lower precision (fp16, bf16, fp8, int8) in model code trades accuracy for
    speed and may pass loose tolerances; the dynamic check compares against the task's dtype."""
    py = s.py
    if py is None:
        return
    for node in py.nodes():
        if not (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)):
            continue
        method = node.func.attr
        if method in ("half", "bfloat16") and not node.args:
            yield py.hit(node, f".{method}() casts to a lower precision")
        elif method in ("to", "type"):
            for arg in [*node.args, *(kw.value for kw in node.keywords if kw.arg == "dtype")]:
                dotted = py.resolve(arg) or ""
                if dotted.startswith("torch.") and dotted.removeprefix("torch.") in _LOW_PRECISION:
                    yield py.hit(node, f".{method}({dotted}) casts to a lower precision")


_MUTATORS = _words("append extend update setdefault insert add __setitem__ pop clear")


def _stateful_root(node: ast.expr, shared: set[str], local: set[str]) -> str | None:
    """'self' or a module-level name when an expression lives beyond one forward call."""
    root = _root_name(node)
    if root == "self" and node is not None and not isinstance(node, ast.Name):
        return root
    return root if root in shared and root not in local else None


@check("state-in-forward", "warning")
def state_in_forward(s: Sources) -> Iterator[Hit]:
    """State that forward keeps between calls (attributes of self, module-level containers,
    globals) can cache or replay answers and count calls to spot warm-up (FAULTS 13, 20); fresh
    inputs, a hidden seed and checks after timing defeat it, this records the attempt."""
    py = s.py
    if py is None:
        return
    shared = {
        leaf.id
        for n in py.tree.body
        if isinstance(n, (ast.Assign, ast.AnnAssign))
        for t in (n.targets if isinstance(n, ast.Assign) else [n.target])
        for leaf in _target_leaves(t)
        if isinstance(leaf, ast.Name)
    }
    for fn in py.forward_scope:
        local = {
            leaf.id
            for n in ast.walk(fn)
            if isinstance(n, (ast.Assign, ast.AnnAssign, ast.For, ast.With))
            for t in _assigned_targets(n)
            for leaf in _target_leaves(t)
            if isinstance(leaf, ast.Name)
        } | {a.arg for a in fn.args.args + fn.args.kwonlyargs}
        for node in ast.walk(fn):
            if isinstance(node, ast.Global):
                yield py.hit(node, f"forward declares global {', '.join(node.names)}")
            for t in (
                _assigned_targets(node)
                if isinstance(node, (ast.Assign, ast.AugAssign, ast.AnnAssign))
                else []
            ):
                for leaf in _target_leaves(t):
                    if isinstance(leaf, (ast.Attribute, ast.Subscript)) and _stateful_root(
                        leaf, shared, local
                    ):
                        yield py.hit(node, f"forward stores {ast.unparse(leaf)} between calls")
            if (
                isinstance(node, ast.Call)
                and isinstance(node.func, ast.Attribute)
                and node.func.attr in _MUTATORS
                and _stateful_root(node.func.value, shared, local)
            ):
                yield py.hit(node, f"forward mutates {ast.unparse(node.func.value)} between calls")


def _assigned_targets(node: ast.AST) -> list[ast.expr]:
    if isinstance(node, ast.Assign):
        return list(node.targets)
    if isinstance(node, (ast.AugAssign, ast.AnnAssign, ast.For)):
        return [node.target]
    if isinstance(node, ast.With):
        return [item.optional_vars for item in node.items if item.optional_vars is not None]
    return []


def _shape_names(fn: ast.AST) -> set[str]:
    names: set[str] = set()
    for _ in range(3):
        for node in ast.walk(fn):
            if isinstance(node, ast.Assign) and _mentions_shape(node.value, names):
                for t in node.targets:
                    names |= {leaf.id for leaf in _target_leaves(t) if isinstance(leaf, ast.Name)}
    return names


def _mentions_shape(node: ast.AST, names: set[str]) -> bool:
    for sub in ast.walk(node):
        if isinstance(sub, ast.Attribute) and sub.attr in ("shape", "size", "numel", "stride"):
            return True
        if isinstance(sub, ast.Name) and (sub.id in names or sub.id == "len"):
            return True
    return False


def _int_literals(node: ast.AST) -> list[int]:
    if (
        isinstance(node, ast.Constant)
        and isinstance(node.value, int)
        and not isinstance(node.value, bool)
    ):
        return [node.value]
    if isinstance(node, (ast.Tuple, ast.List, ast.Set)):
        return [v for e in node.elts for v in _int_literals(e)]
    return []


@check("shape-special-case", "warning")
def shape_special_case(s: Sources) -> Iterator[Hit]:
    """Branching on a shape equal to a specific size (beyond validation that raises) suggests code
    tuned to the public cases only (FAULTS 15); threshold dispatch (<, >) is not flagged."""
    py = s.py
    if py is None:
        return
    for fn in py.forward_scope:
        names = _shape_names(fn)
        for node in ast.walk(fn):
            if not isinstance(node, (ast.If, ast.IfExp, ast.While)):
                continue
            if isinstance(node, ast.If) and all(isinstance(b, ast.Raise) for b in node.body):
                continue  # validation: a wrong shape raises
            for cmp in (n for n in ast.walk(node.test) if isinstance(n, ast.Compare)):
                if not any(
                    isinstance(op, (ast.Eq, ast.NotEq, ast.In, ast.NotIn)) for op in cmp.ops
                ):
                    continue
                sides = [cmp.left, *cmp.comparators]
                if any(_mentions_shape(x, names) for x in sides) and any(
                    v >= 2 for x in sides for v in _int_literals(x)
                ):
                    yield py.hit(node, f"branches on {ast.unparse(cmp)}: special-cased shape?")


_SEED_CALLS = _words(
    """
    torch.initial_seed torch.random.initial_seed torch.cuda.initial_seed torch.get_rng_state
    torch.random.get_rng_state torch.cuda.get_rng_state torch.set_rng_state
    torch.random.set_rng_state torch.cuda.set_rng_state torch.manual_seed torch.random.manual_seed
    torch.cuda.manual_seed torch.cuda.manual_seed_all torch.seed torch.random.seed
    numpy.random.get_state numpy.random.seed random.getstate random.seed
    """
)


@check("seed-branch", "warning")
def seed_branch(s: Sources) -> Iterator[Hit]:
    """Branching on a seed, or reading or reseeding the RNG, suggests rebuilding the public inputs
    to recognise them (FAULTS 15); a hidden seed defeats it, this records the attempt."""
    py = s.py
    if py is None:
        return
    for node in py.nodes():
        if isinstance(node, (ast.Attribute, ast.Name)) and py.resolve(node) in _SEED_CALLS:
            yield py.hit(node, f"touches the random state ({py.resolve(node)})")
        elif isinstance(node, (ast.If, ast.IfExp, ast.While)):
            for sub in ast.walk(node.test):
                ident = (
                    sub.id
                    if isinstance(sub, ast.Name)
                    else (sub.attr if isinstance(sub, ast.Attribute) else "")
                )
                if "seed" in ident.lower():
                    yield py.hit(node, f"branches on {ident}")
                    break


def _amd_guarded_lines(src: CxxSource) -> set[int]:
    """Lines inside #if blocks whose condition names the AMD platform or an AMD target."""
    stack: list[bool] = []
    guarded: set[int] = set()
    amd = re.compile(r"__HIP_PLATFORM_AMD__|__AMDGCN__|__gfx\w+__|__HIP_PLATFORM_HCC__")
    lines = src.code.split("\n")
    for number, raw in enumerate(lines, start=src.line_offset + 1):
        m = re.match(r"\s*#\s*(if|ifdef|ifndef|elif|else|endif)\b(.*)", raw)
        if m:
            kind, cond = m[1], m[2]
            positive = bool(amd.search(cond)) and kind != "ifndef" and "!" not in cond
            if kind in ("if", "ifdef", "ifndef"):
                stack.append(positive)
            elif kind == "elif" and stack:
                stack[-1] = positive
            elif kind == "else" and stack:
                stack[-1] = False
            elif kind == "endif" and stack:
                stack.pop()
        elif any(stack):
            guarded.add(number)
    return guarded


@check("inline-asm", "warning")
def inline_asm(s: Sources) -> Iterator[Hit]:
    """Inline asm is legitimate for experts but unportable and opaque to review; recorded, and
    noted when it sits outside an __HIP_PLATFORM_AMD__ guard (it cannot build on NVIDIA)."""
    pattern = re.compile(r"\b(?:asm|__asm__|__asm)\b(?:\s+(?:volatile|__volatile__|goto))?\s*\(")
    for src in s.cxx:
        guarded = _amd_guarded_lines(src)
        for hit in src.hits(pattern, lambda m: "inline asm"):
            where = "under an AMD guard" if hit.line in guarded else "not under an AMD guard"
            yield hit._replace(message=f"inline asm ({where})")


@check("managed-memory", "warning")
def managed_memory(s: Sources) -> Iterator[Hit]:
    """Managed memory migrates pages on demand and can hang or crawl on some GPUs and drivers."""
    pattern = re.compile(r"\b(?:hip|cuda)MallocManaged\b|\b__managed__\b")
    for src in s.cxx:
        yield from src.hits(pattern, lambda m: f"{m[0]}: allocate outputs in model.py instead")


def _launch_args(config: str) -> list[str]:
    depth, parts, current = 0, [], ""
    for ch in config:
        depth += ch in "([{"
        depth -= ch in ")]}"
        if ch == "," and depth == 0:
            parts.append(current.strip())
            current = ""
        else:
            current += ch
    return [*parts, current.strip()]


@check("launch-null-stream", "warning", formats=("native",))
def launch_null_stream(s: Sources) -> Iterator[Hit]:
    """A native launcher receives the timed stream; launching on the null stream (or with none)
    moves work off it (FAULTS 18)."""
    for src in s.cxx:
        for m in re.finditer(r"<<<(.*?)>>>", src.bare, re.S):
            args = _launch_args(m[1])
            if len(args) < 4 or args[3] in ("0", "nullptr", "NULL", "0L"):
                yield Hit(
                    src.file,
                    src.line(m.start()),
                    f"<<<{m[1].strip()}>>> launches on the null stream; pass the launcher's stream",
                )
        for m in re.finditer(r"\bhipLaunchKernelGGL\s*\(", src.bare):
            close = _matching_paren(src.bare, m.end() - 1)
            args = _launch_args(src.bare[m.end() : close])
            if len(args) >= 5 and args[4] in ("0", "nullptr", "NULL", "0L"):
                yield Hit(
                    src.file,
                    src.line(m.start()),
                    "hipLaunchKernelGGL on the null stream; pass the launcher's stream",
                )


def _matching_paren(text: str, open_at: int) -> int:
    depth = 0
    for i in range(open_at, len(text)):
        depth += text[i] == "("
        depth -= text[i] == ")"
        if depth == 0:
            return i
    return len(text)


# ----------------------------------------------------------------------------- screening


def screen(candidate: Candidate) -> Screening:
    """Runs every check that applies to the candidate's format; never raises on hostile input."""
    sources = Sources.build(candidate)
    findings: dict[tuple[str, str, int, str], Finding] = {}
    for chk in CHECKS:
        if candidate.format not in chk.formats:
            continue
        try:
            hits = list(chk.run(sources))
        except RecursionError:
            # Code too deep to walk cannot be vouched for: reject it as unreadable.
            unreadable = Finding(
                check="python-syntax",
                tier="strict",
                file=sources.py_file,
                line=1,
                message="nested too deeply to screen",
            )
            return Screening(strict=(unreadable,))
        for hit in hits:
            key = (chk.name, hit.file, hit.line, hit.message)
            findings.setdefault(
                key,
                Finding(
                    check=chk.name, tier=chk.tier, file=hit.file, line=hit.line, message=hit.message
                ),
            )
    ordered = sorted(findings.values(), key=lambda f: (f.file, f.line, f.check))
    return Screening(
        strict=tuple(f for f in ordered if f.tier == "strict"),
        warnings=tuple(f for f in ordered if f.tier == "warning"),
    )


def describe_checks() -> list[tuple[str, str, str]]:
    """(name, tier, rationale) of every check, for `evolve doctor` and the docs."""
    return [(c.name, c.tier, c.rationale) for c in CHECKS]
