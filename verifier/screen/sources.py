"""The candidate's sources as static screening reads them, parsed once per candidate.

`PyModel` is model.py (or a KernelBench file) parsed with `ast`, never imported: its aliases, its
ModelNew, the functions forward reaches and which names hold tensors. `CxxSource` (cxx.py) is
kernel.hip or a string handed to load_inline, with comments stripped (and, for call patterns,
string literals blanked). `Sources` bundles both for the checks, with the C++'s macro-expanded
views (expand.py); `Hit` (cxx.py) is where a check fired.
"""

from __future__ import annotations

import ast
import io
import tokenize
from collections.abc import Iterator
from dataclasses import dataclass, field

from hipevolve.core.candidate import Candidate, parse_python
from hipevolve.verifier.screen.cxx import CxxSource, Hit
from hipevolve.verifier.screen.expand import expanded_views

# Markers that `PyModel.resolve` returns for names whose meaning matters to the checks:
BRIDGE = "<bridge>"  # a load_inline module: calling it runs the candidate's own code
TORCH_MODULE = "<torch-module>"  # an nn.Module held on self: calling it is PyTorch compute
TENSOR = "<tensor>"  # self attribute holding a tensor or parameter
RUNTIME_KERNELS = "hipevolve.runtime.kernels"
LOAD_INLINE = "torch.utils.cpp_extension.load_inline"


def words(text: str) -> frozenset[str]:
    """A table written as whitespace-separated words (keeps long allow lists readable)."""
    return frozenset(text.split())


# What `PyModel.is_tensor` needs to tell tensor expressions from scalars and metadata.
_TORCH_SCALAR_CALLS = words(
    """
    torch.device torch.Size torch.finfo torch.iinfo torch.is_tensor torch.is_floating_point
    torch.numel torch.get_default_dtype torch.broadcast_shapes torch.promote_types
    torch.result_type torch.is_grad_enabled
    """
)
_SCALAR_METHODS = words(
    """
    size dim ndimension numel nelement stride storage_offset data_ptr element_size is_contiguous
    is_floating_point is_complex get_device item tolist
    """
)
TENSOR_ATTRS = {"T", "mT", "H", "mH", "data", "real", "imag", "grad"}


# ----------------------------------------------------------------------------- Python model


def _dotted_root(dotted: str) -> str:
    return dotted.split(".", 1)[0]


class PyModel:
    """model.py (or a KernelBench file) parsed once: aliases, ModelNew, what forward reaches."""

    def __init__(self, tree: ast.Module, file: str) -> None:
        self.tree = tree
        self._nodes = list(ast.walk(tree))  # walked once: a dozen checks go over every node
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
        for node in self._nodes:
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
            for node in self._nodes:
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
            return node.attr in TENSOR_ATTRS and self.is_tensor(node.value, names)
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
        return iter(self._nodes)

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
    # The C++ after macro expansion (verifier/screen/expand.py), for the host-escape checks.
    expanded: list[CxxSource] = field(default_factory=list)
    unscreenable: list[Hit] = field(default_factory=list)  # inline sources not statically known

    @classmethod
    def build(cls, candidate: Candidate) -> Sources:
        py_file = "model.py" if candidate.format == "native" else f"{candidate.name}.py"
        try:
            py = PyModel(parse_python(candidate.python_source), py_file)
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
        for src in sources.cxx:
            sources.expanded += expanded_views(src)
        return sources

    def host_code(self) -> list[CxxSource]:
        """The C++ as written and as the preprocessor expands it: where escapes are looked for."""
        return self.cxx + self.expanded

    def _inline_sources(self) -> None:
        assert self.py is not None
        for call in self.load_inline_calls():
            for index, key in ((1, "cpp_sources"), (2, "cuda_sources")):
                node = call_argument(call, index, key)
                if node is None or (isinstance(node, ast.Constant) and node.value is None):
                    continue
                parts = self.strings(node)
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

    def strings(self, node: ast.expr, depth: int = 0) -> list[tuple[str, int]] | None:
        """The string values an expression statically stands for, each with its first line."""
        if depth > 8:
            return None
        if isinstance(node, ast.Constant) and isinstance(node.value, str):
            return [(node.value, node.lineno)]
        if isinstance(node, (ast.List, ast.Tuple)):
            out: list[tuple[str, int]] = []
            for element in node.elts:
                part = self.strings(element, depth + 1)
                if part is None:
                    return None
                out += part
            return out
        if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Add):
            left, right = self.strings(node.left, depth + 1), self.strings(node.right, depth + 1)
            if left is None or right is None:
                return None
            joined = "".join(t for t, _ in left + right)
            return [(joined, (left + right)[0][1])] if left + right else []
        if isinstance(node, ast.Name):
            bound = self.assigned(node.id)
            return None if bound is None else self.strings(bound, depth + 1)
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


def call_argument(call: ast.Call, index: int, key: str) -> ast.expr | None:
    """The argument passed by keyword `key` or at position `index`, or None."""
    for kw in call.keywords:
        if kw.arg == key:
            return kw.value
    return call.args[index] if len(call.args) > index else None


def root_name(node: ast.expr) -> str | None:
    """The name an attribute or subscript chain starts from (`self` for self.a[0].b)."""
    while isinstance(node, (ast.Attribute, ast.Subscript)):
        node = node.value
    return node.id if isinstance(node, ast.Name) else None


def target_leaves(target: ast.expr) -> Iterator[ast.expr]:
    """The single targets inside an assignment target, unpacking tuples, lists and stars."""
    if isinstance(target, (ast.Tuple, ast.List)):
        for element in target.elts:
            yield from target_leaves(element)
    elif isinstance(target, ast.Starred):
        yield from target_leaves(target.value)
    else:
        yield target
