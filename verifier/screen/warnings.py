"""Warning-tier checks: recorded as flags on the evaluation, never a rejection. Each records an
attempt (prompt injection, cached state, shape or seed special-casing) or a risk (lower precision,
inline asm, managed memory, the null stream) that the dynamic checks then judge."""

from __future__ import annotations

import ast
import re
from collections.abc import Iterator

from hipevolve.verifier.screen.compute import LOW_PRECISION
from hipevolve.verifier.screen.cxx import CxxSource, Hit
from hipevolve.verifier.screen.registry import check
from hipevolve.verifier.screen.sources import Sources, root_name, target_leaves, words

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
                if dotted.startswith("torch.") and dotted.removeprefix("torch.") in LOW_PRECISION:
                    yield py.hit(node, f".{method}({dotted}) casts to a lower precision")


_MUTATORS = words("append extend update setdefault insert add __setitem__ pop clear")


def _stateful_root(node: ast.expr, shared: set[str], local: set[str]) -> str | None:
    """'self' or a module-level name when an expression lives beyond one forward call."""
    root = root_name(node)
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
        for leaf in target_leaves(t)
        if isinstance(leaf, ast.Name)
    }
    for fn in py.forward_scope:
        local = {
            leaf.id
            for n in ast.walk(fn)
            if isinstance(n, (ast.Assign, ast.AnnAssign, ast.For, ast.With))
            for t in _assigned_targets(n)
            for leaf in target_leaves(t)
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
                for leaf in target_leaves(t):
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
                    names |= {leaf.id for leaf in target_leaves(t) if isinstance(leaf, ast.Name)}
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


_SEED_CALLS = words(
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


_AMD = re.compile(r"__HIP_PLATFORM_AMD__|__AMDGCN__|__gfx\w+__|__HIP_PLATFORM_HCC__")
_NVIDIA = re.compile(r"__HIP_PLATFORM_NVIDIA__|__HIP_PLATFORM_NVCC__|__CUDA_ARCH__|__NVCC__")
_OTHER = {"AMD": "NVIDIA", "NVIDIA": "AMD"}


def _platform_named(cond: str) -> str | None:
    """The one platform an #if condition requires, if it names one and is not negated."""
    if "!" in cond:
        return None
    amd, nvidia = bool(_AMD.search(cond)), bool(_NVIDIA.search(cond))
    return "AMD" if amd and not nvidia else "NVIDIA" if nvidia and not amd else None


def _platform_guarded_lines(src: CxxSource) -> dict[int, str]:
    """Line -> "AMD" or "NVIDIA" for lines only that platform compiles: inside an #if (or #elif)
    whose condition requires it, or in the #else of a plain #if that requires the other one."""
    stack: list[tuple[str | None, bool]] = []  # (platform or None, whether it had an #elif)
    guarded: dict[int, str] = {}
    lines = src.code.split("\n")
    for number, raw in enumerate(lines, start=src.line_offset + 1):
        m = re.match(r"\s*#\s*(if|ifdef|ifndef|elif|else|endif)\b(.*)", raw)
        if m:
            kind, cond = m[1], m[2]
            if kind in ("if", "ifdef", "ifndef"):
                stack.append((_platform_named(cond) if kind != "ifndef" else None, False))
            elif kind == "elif" and stack:
                stack[-1] = (_platform_named(cond), True)
            elif kind == "else" and stack:
                platform, had_elif = stack[-1]
                stack[-1] = (None if had_elif else _OTHER.get(platform), had_elif)
            elif kind == "endif" and stack:
                stack.pop()
            continue
        platforms = [platform for platform, _ in stack if platform]
        if platforms:
            guarded[number] = platforms[-1]
    return guarded


@check("inline-asm", "warning")
def inline_asm(s: Sources) -> Iterator[Hit]:
    """Inline asm is legitimate for experts but unportable and opaque to review; recorded, with
    the platform guard it sits under (asm outside one cannot build on both platforms)."""
    pattern = re.compile(r"\b(?:asm|__asm__|__asm)\b(?:\s+(?:volatile|__volatile__|goto))?\s*\(")
    for src in s.cxx:
        guarded = _platform_guarded_lines(src)
        for hit in src.hits(pattern, lambda m: "inline asm"):
            platform = guarded.get(hit.line)
            where = f"under an {platform} guard" if platform else "not under a platform guard"
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
