"""What the optimizer and the mutator are told about the task, the target and the parent.

A strong model needs the facts a kernel engineer would look up before editing (which GPU and
backend time the kernel, its peak rates, the tolerance, the reference, the parent's time per case
against the memory and compute bounds) and none of the text the target never compiles. Each
function returns prompt text; nothing here calls a model.

The platform view (`platform_view`) folds the preprocessor branches the target never compiles
(the NVIDIA tensor-core path on an AMD target, and the other way round) into one marker line.
The lines it shows are the parent's own, so SEARCH/REPLACE edits apply to the real file;
a whole file written back with the markers in it gets the folded text restored (`restore`).
"""

from __future__ import annotations

import difflib
import re
from dataclasses import dataclass
from typing import Literal

from hipevolve.agents.case_inputs import case_inputs
from hipevolve.core.candidate import Candidate
from hipevolve.core.evaluation import Evaluation, StaticFacts
from hipevolve.core.hardware import H200, MI300X, Gpu
from hipevolve.core.taskspec import TaskSpec

Platform = Literal["amd", "nvidia"]
# Files up to this many lines may be rewritten whole; longer ones are edited in place.
WHOLE_FILE_LINES = 300
MFMA_EXAMPLE = "mfma_gfx942.hip"  # in prompts/: compiled for gfx942 by tests/test_briefing.py
# Branches shorter than this stay shown: a marker would save little and hide the contrast.
MIN_FOLD_LINES = 12
_MARKER = (
    "// [hipevolve: fold {n}: {lines} lines compiled only for {other}, not shown; kept as they are]"
)
_MARKER_RE = re.compile(r"^[ \t]*// \[hipevolve: fold (\d+): .*\]$", re.M)


@dataclass(frozen=True)
class Target:
    """Where the search's numbers come from: the backend that times (or, for `static`, only
    compiles) the candidates, the device, and the platform whose code paths count."""

    backend: str  # rocm, cuda or static
    device: str = ""

    @property
    def platform(self) -> Platform:
        return "nvidia" if self.backend == "cuda" else "amd"

    @property
    def gpu(self) -> Gpu:
        """Peak rates quoted to the model: the NVIDIA card timing the run, else MI300X."""
        return H200 if self.platform == "nvidia" else MI300X

    def sentence(self) -> str:
        if self.backend == "cuda":
            return (
                f"Candidates are timed on {self.device or 'an NVIDIA GPU'} through the cuda "
                "backend: the HIP source is compiled by nvcc through a HIP-to-CUDA header "
                "layer, so the `__HIP_PLATFORM_NVIDIA__` paths run and warpSize is 32; the "
                "users' target is AMD Instinct (gfx942), so keep the AMD path compiling."
            )
        if self.backend == "rocm":
            return (
                f"Candidates are timed on {self.device or 'an AMD GPU'} through the rocm "
                "backend (hipcc): the `__HIP_PLATFORM_AMD__` paths run and warpSize is 64."
            )
        return (
            "No GPU times this run: candidates are compiled for gfx942 (MI300X) by the "
            "static backend and judged on resource usage (VGPRs, LDS, occupancy, spills, "
            "MFMA count); the `__HIP_PLATFORM_AMD__` paths count and warpSize is 64."
        )

    def peaks(self) -> str:
        g = self.gpu
        return (
            f"{g.name} ({g.arch}) peaks: HBM {g.hbm_bytes_per_s / 1e12:g} TB/s, dense bf16 "
            f"matrix {g.bf16_flops_per_s / 1e12:g} TFLOP/s, fp32 vector "
            f"{g.fp32_flops_per_s / 1e12:g} TFLOP/s."
        )


def tolerance_text(task: TaskSpec) -> str:
    """The correctness bar, with what bf16 rounding alone costs, since that decides whether
    bf16 (matrix-core) intermediates can pass."""
    return (
        f"{task.tolerance.describe()}, checked on {task.check_seeds} input seeds (one never "
        "shown to agents). For scale: rounding a value to bf16 alone has a relative error "
        "up to 2^-9 = 0.2%, fp16 up to 2^-12 = 0.024%; errors of chained bf16 products "
        "accumulate."
    )


def case_table(task: TaskSpec, evaluation: Evaluation | None, target: Target) -> str:
    """One row per case: its inputs (those every case shares said once, above the table), the
    parent's time, its speedup over the reference, and the share of the memory and compute
    bounds on the target's peaks that the parent reaches."""
    results = {c.case: c for c in evaluation.cases} if evaluation else {}
    g = target.gpu
    shared = _shared_inputs(task)
    rows = [f"Every case: {', '.join(f'{k}={v}' for k, v in shared.items())}."] if shared else []
    rows += [
        f"| case | inputs | parent us | speedup | % of {g.name} memory bound "
        f"| % of {g.name} compute bound |",
        "|---|---|---|---|---|---|",
    ]
    for case in task.cases:
        inputs = (
            ", ".join(f"{k}={v}" for k, v in case.inputs.items() if k not in shared)
            if case.inputs
            else case_inputs(task, case)
        )
        if not case.timed:
            inputs += " (checked, not timed)"
        r = results.get(case.name)
        t = r.time_us if r else None
        ref = r.ref_time_us if r else None
        speedup = f"{ref / t:.2f}x" if t and ref else "-"
        mem = comp = "-"
        if case.roofline is not None and t:
            mem_us = case.roofline.bytes / g.hbm_bytes_per_s * 1e6
            comp_us = case.roofline.flops / g.bf16_flops_per_s * 1e6
            mem, comp = f"{100 * mem_us / t:.1f}%", f"{100 * comp_us / t:.1f}%"
        rows.append(f"| {case.name} | {inputs} | {_us(t)} | {speedup} | {mem} | {comp} |")
    if evaluation is None:
        rows.append("(the parent has no evaluation yet)")
    elif not any(r.time_us for r in evaluation.cases):
        rows.append(
            f"(the parent was not timed: {evaluation.status.value}, backend "
            f"{evaluation.backend or 'unknown'})"
        )
    return "\n".join(rows)


def _shared_inputs(task: TaskSpec) -> dict[str, object]:
    """The inputs every case of a task of several cases sets to the same value."""
    if len(task.cases) < 2:
        return {}
    first = task.cases[0].inputs
    return {
        k: v
        for k, v in first.items()
        if all(k in c.inputs and c.inputs[k] == v for c in task.cases[1:])
    }


def _us(value: float | None) -> str:
    return f"{value:.1f}" if value else "-"


# ---- the platform view ---------------------------------------------------------------------

_DIRECTIVE = re.compile(r"^[ \t]*#[ \t]*(if|ifdef|ifndef|elif|else|endif)\b(.*)$")
_PLATFORM_MACROS = {
    "amd": {"__HIP_PLATFORM_AMD__": True, "__HIP_PLATFORM_NVIDIA__": False,
            "__HIP_PLATFORM_HCC__": True, "__HIP_PLATFORM_NVCC__": False,
            "__CUDACC__": False, "__NVCC__": False},
    "nvidia": {"__HIP_PLATFORM_AMD__": False, "__HIP_PLATFORM_NVIDIA__": True,
               "__HIP_PLATFORM_HCC__": False, "__HIP_PLATFORM_NVCC__": True,
               "__CUDACC__": True, "__NVCC__": True},
}  # fmt: skip


@dataclass(frozen=True)
class View:
    """The parent's source as shown, and the folded text behind each marker."""

    text: str
    folds: tuple[str, ...]
    platform: Platform

    @property
    def folded_lines(self) -> int:
        return sum(f.count("\n") for f in self.folds)


def platform_view(source: str, platform: Platform) -> View:
    """`source` with every #if/#elif/#else branch that `platform` never compiles folded into a
    marker line. A branch is folded only when its condition is decided by the platform macros
    alone (three-valued: any other macro leaves it shown)."""
    other = "NVIDIA" if platform == "amd" else "AMD"
    out: list[str] = []
    folds: list[str] = []
    fold: list[str] | None = None  # the lines of the branch being folded
    depth = 0  # #if nesting inside the folded branch
    taken: list[bool | None] = []  # per open #if: a branch taken (True), none yet, or unknown

    for line in source.splitlines(keepends=True):
        m = _DIRECTIVE.match(line)
        kind = m.group(1) if m else None
        if fold is not None:
            if kind in ("if", "ifdef", "ifndef"):
                depth += 1
            elif depth and kind == "endif":
                depth -= 1
            elif not depth and kind in ("elif", "else", "endif"):
                if len(fold) < MIN_FOLD_LINES:
                    out.extend(fold)
                else:
                    folds.append("".join(fold))
                    out.append(_MARKER.format(n=len(folds), lines=len(fold), other=other) + "\n")
                fold = None
            if fold is not None:
                fold.append(line)
                continue
        out.append(line)
        if kind in ("if", "ifdef", "ifndef"):
            value = _condition(kind, m.group(2), platform)
            taken.append(value if value is not False else False)
            fold = [] if value is False else None
        elif kind in ("elif", "else") and taken:
            value = True if kind == "else" else _condition("if", m.group(2), platform)
            if taken[-1] is True:
                value = False  # an earlier branch compiles: this one never does
            elif taken[-1] is None and value is True:
                value = None  # compiles unless an earlier, undecided branch was taken
            if value is not False:
                taken[-1] = value if taken[-1] is False else None
            fold = [] if value is False else None
        elif kind == "endif" and taken:
            taken.pop()
    if fold:  # an unterminated #if: show what is left rather than lose it
        out.extend(fold)
    return View(text="".join(out), folds=tuple(folds), platform=platform)


def restore(text: str, view: View) -> str:
    """A file written back against `view`: every marker line replaced by the text it folded."""

    def put_back(m: re.Match) -> str:
        n = int(m.group(1))
        return view.folds[n - 1].rstrip("\n") if 0 < n <= len(view.folds) else m.group(0)

    return _MARKER_RE.sub(put_back, text)


def _condition(kind: str, expr: str, platform: Platform) -> bool | None:
    """The truth of a directive's condition on `platform`, or None when other macros decide."""
    macros = _PLATFORM_MACROS[platform]
    expr = re.sub(r"//.*|/\*.*?\*/", "", expr).strip()
    if kind in ("ifdef", "ifndef"):
        name = expr.split()[0] if expr.split() else ""
        known = macros.get(name)
        return None if known is None else (known if kind == "ifdef" else not known)
    try:
        return _Parser(expr, macros).parse()
    except ValueError:
        return None


class _Parser:
    """Three-valued evaluation of `||`, `&&`, `!`, parentheses and `defined(X)` over the
    platform macros; any other operand is unknown (None)."""

    _TOKEN = re.compile(r"\s*(\|\||&&|!(?!=)|\(|\)|defined\b|[A-Za-z_]\w*|[^\s()|&!]+)")

    def __init__(self, expr: str, macros: dict[str, bool]) -> None:
        self.tokens = [t for t in self._TOKEN.findall(expr) if t]
        self.macros, self.i = macros, 0

    def parse(self) -> bool | None:
        value = self._or()
        if self.i != len(self.tokens):
            raise ValueError("trailing tokens")
        return value

    def _peek(self) -> str | None:
        return self.tokens[self.i] if self.i < len(self.tokens) else None

    def _take(self) -> str:
        if self.i >= len(self.tokens):
            raise ValueError("unexpected end")
        self.i += 1
        return self.tokens[self.i - 1]

    def _or(self) -> bool | None:
        value = self._and()
        while self._peek() == "||":
            self._take()
            right = self._and()
            value = (
                True
                if value is True or right is True
                else (False if value is False and right is False else None)
            )
        return value

    def _and(self) -> bool | None:
        value = self._not()
        while self._peek() == "&&":
            self._take()
            right = self._not()
            value = (
                False
                if value is False or right is False
                else (True if value is True and right is True else None)
            )
        return value

    def _not(self) -> bool | None:
        if self._peek() == "!":
            self._take()
            value = self._not()
            return None if value is None else not value
        return self._atom()

    def _atom(self) -> bool | None:
        token = self._take()
        if token == "(":
            value = self._or()
            if self._take() != ")":
                raise ValueError("unbalanced")
            return value
        if token == "defined":
            name = self._take()
            if name == "(":
                name = self._take()
                if self._take() != ")":
                    raise ValueError("unbalanced")
            return self.macros.get(name)
        if token in self.macros:
            return self.macros[token]
        # A comparison or arithmetic after an unknown operand: skip it, unknown.
        while self._peek() not in (None, "||", "&&", ")"):
            self._take()
        return None


# ---- static facts ---------------------------------------------------------------------------


def facts_text(facts: tuple[StaticFacts, ...]) -> str:
    """One line per kernel: the static facts a prompt quotes (AMD's, else the CUDA build's)."""
    if not facts:
        return "(no static AMD analysis on this machine)"
    if all(f.platform == "cuda" for f in facts):
        return _cuda_facts_text(facts)
    lines = []
    for f in facts:
        loads = ", ".join(f"{w}:{n}" for w, n in sorted(f.global_loads.items())) or "none"
        buffers = ", ".join(f"{w}:{n}" for w, n in sorted(f.buffer_loads.items())) or "none"
        lines.append(
            f"- {f.kernel} ({f.target}): {f.vgprs} VGPRs, {f.agprs} AGPRs, {f.sgprs} SGPRs, "
            f"LDS {f.lds_bytes} B, scratch {f.scratch_bytes} B, occupancy {f.occupancy} "
            f"waves/SIMD, spills {f.spills}, MFMA {f.mfma}, global loads {loads}, "
            f"buffer loads {buffers}"
        )
    return "\n".join(lines)


def _cuda_facts_text(facts: tuple[StaticFacts, ...]) -> str:
    lines = [
        f"(no AMD toolchain on this machine: the facts of the CUDA build for "
        f"{', '.join(sorted({f.target for f in facts}))}, in CUDA's terms)"
    ]
    for f in facts:
        loads = ", ".join(f"{w}:{n}" for w, n in sorted(f.global_loads.items())) or "none"
        lines.append(
            f"- {f.kernel} ({f.target}): {f.vgprs} registers/thread, shared {f.lds_bytes} B, "
            f"stack {f.scratch_bytes} B, occupancy {f.occupancy} warps/scheduler, spill stores "
            f"{4 * f.spills_vgpr} B, tensor-core ops {f.mfma}, global loads {loads}"
        )
    return "\n".join(lines)


# ---- compile errors and inspirations ---------------------------------------------------------


def numbered(source: str, around: list[int], context: int = 4) -> str:
    """The lines around each of `around` (1-based), numbered as the compiler counts them."""
    lines = source.splitlines()
    keep: set[int] = set()
    for n in around:
        keep.update(range(max(1, n - context), min(len(lines), n + context) + 1))
    out, last = [], 0
    for n in sorted(keep):
        if last and n != last + 1:
            out.append("   ...")
        mark = ">" if n in around else " "
        out.append(f"{mark}{n:5d} | {lines[n - 1]}")
        last = n
    return "\n".join(out)


def error_lines(log: str, file_name: str = "kernel.hip") -> list[int]:
    """Line numbers the compiler log blames in `file_name` (clang `f:12:3:`, nvcc `f(12):`)."""
    found = re.findall(rf"{re.escape(file_name)}(?::(\d+):|\((\d+)\))", log)
    return sorted({int(a or b) for a, b in found})[:8]


def diff_text(parent: str, other: str, name: str = "kernel.hip", limit: int = 120) -> str:
    """A unified diff from the parent to `other`, cut at `limit` lines."""
    diff = list(
        difflib.unified_diff(
            parent.splitlines(),
            other.splitlines(),
            f"parent/{name}",
            f"inspiration/{name}",
            n=2,
            lineterm="",
        )
    )
    if not diff:
        return "(same source as the parent)"
    if len(diff) > limit:
        diff = diff[:limit] + [f"... ({len(diff) - limit} more diff lines)"]
    return "\n".join(diff)


def outcome_line(evaluation: Evaluation | None) -> str:
    """One line: the per-case speedups, or why the candidate failed."""
    if evaluation is None:
        return "not evaluated"
    timed = [
        (c.case, c.ref_time_us / c.time_us) for c in evaluation.cases if c.time_us and c.ref_time_us
    ]
    if evaluation.status.value == "ok" and timed:
        cases = ", ".join(f"{name} {s:.2f}x" for name, s in timed)
        return f"ok, fitness {evaluation.fitness:.3f}: {cases}"
    first = (evaluation.message or evaluation.status.value).splitlines()
    return f"{evaluation.status.value}: {first[0] if first else ''}"[:200]


def inspiration_text(
    parent: Candidate | None, items: list[tuple[int, Candidate, Evaluation | None]]
) -> str:
    """Each inspiration as a diff against the parent with its measured outcome."""
    if not items:
        return "(none)"
    base = parent.hip_source or "" if parent else ""
    parts = []
    for cid, candidate, evaluation in items:
        parts.append(
            f"### candidate {cid}: {outcome_line(evaluation)}\n```diff\n"
            f"{diff_text(base, candidate.hip_source or '')}\n```"
        )
    return "\n".join(parts)


# ---- the prompt parts ------------------------------------------------------------------------


def tried_text(workshop, proposal) -> str:  # noqa: ANN001 (a Workshop and a Proposal, or None)
    """The latest attempts from the proposal's parent and on its island, one line each: what
    was tried and how it came out, so a model does not repeat a failed idea."""
    if workshop is None:
        return "(none yet)"
    parent = proposal.parent.candidate_id if proposal.parent else None
    lines = []
    for t in workshop.tried_near(parent, proposal.island):
        outcome = f"ok, fitness {t.fitness:.3f}" if t.status == "ok" else f"{t.status}: {t.message}"
        whence = "child of the parent" if t.from_parent else f"island {t.island}"
        idea = t.idea or f"(written by {t.agent or 'the offline mutator'}, no idea recorded)"
        lines.append(
            f"- candidate {t.candidate_id} (generation {t.generation}, {whence}): "
            f"{_cut(idea, 200)} -> {outcome}"
        )
    return "\n".join(lines) or "(none yet)"


def _cut(text: str, chars: int) -> str:
    text = " ".join(text.split())
    return text if len(text) <= chars else text[: chars - 3] + "..."


def briefing(task: TaskSpec, target: Target) -> str:
    """The stable head of a proposal's prompts: task, target, tolerance and the reference (the
    same for every proposal of a run, so providers cache it)."""
    from hipevolve.prompts.render import block, render

    source = task.reference.read_text() if task.reference.exists() else ""
    reference, note = reference_text(source)
    text = render(
        "briefing",
        task_name=task.name,
        task_description=task.description,
        target=target.sentence(),
        peaks=target.peaks(),
        tolerance=tolerance_text(task),
        reference_note=note,
        reference=block(reference or "(not available)"),
    )
    return text.rstrip("\n")


# A reference up to this many tokens is shown whole to a role that reads a parent; a longer one
# as its contract (its docstring, constants and Model class), since the parent computes it and
# the case table gives the inputs.
REFERENCE_TOKENS = 1200


def reference_text(source: str) -> tuple[str, str]:
    """(the reference as a proposal's roles see it, a note saying what was left out)."""
    from hipevolve.agents.llm.tokens import count_tokens

    if count_tokens(source) <= REFERENCE_TOKENS:
        return source, ""
    contract = reference_contract(source)
    if contract is None:
        return source, ""
    text, left_out = contract
    note = (
        f"The reference's contract (its docstring, constants and Model class; the cases "
        f"below give the inputs). Left out, since the parent computes them: {left_out}.\n"
    )
    return text, note


def reference_contract(source: str) -> tuple[str, str] | None:
    """The reference's module docstring, module constants and `Model` as written, and the names
    of the definitions left out; None where it does not parse or has no Model."""
    import ast

    try:
        tree = ast.parse(source)
    except SyntaxError:
        return None
    lines = source.splitlines(keepends=True)
    keep, left = [], []
    for node in tree.body:
        doc = isinstance(node, ast.Expr) and isinstance(getattr(node, "value", None), ast.Constant)
        if doc and node is tree.body[0]:
            keep.append(node)
        elif isinstance(node, ast.ClassDef | ast.FunctionDef):
            (keep if node.name == "Model" else left).append(node)
        elif isinstance(node, ast.Assign):
            keep.append(node)
    if not any(isinstance(n, ast.ClassDef) and n.name == "Model" for n in keep):
        return None
    parts = []
    for node in keep:
        first = min([node.lineno, *(d.lineno for d in getattr(node, "decorator_list", []))])
        parts.append("".join(lines[first - 1 : node.end_lineno]))
    names = ", ".join(f"{n.name}()" if isinstance(n, ast.FunctionDef) else n.name for n in left)
    return "\n\n".join(p.rstrip("\n") for p in parts) + "\n", names or "nothing"


def mfma_text(
    target: Target, parent: Candidate | None = None, evaluation: Evaluation | None = None
) -> str:
    """The worked MFMA example where the AMD path counts and the parent uses no matrix cores
    yet (its static facts count no MFMA, its source names none), else nothing."""
    if target.platform != "amd":
        return ""
    if evaluation is not None and any(f.mfma for f in evaluation.static):
        return ""
    if parent is not None and "mfma" in (parent.hip_source or "").lower():
        return ""
    from hipevolve.prompts.render import HERE, block, render

    kernel = (HERE / MFMA_EXAMPLE).read_text()
    return render("mfma", mfma_kernel=block(kernel)).rstrip("\n")


def parent_fields(parent: Candidate | None, target: Target) -> tuple[View, dict[str, str]]:
    """The parent's kernel as the target compiles it, and the template fields that show it."""
    from hipevolve.prompts.render import block

    source = parent.hip_source or "" if parent else ""
    view = platform_view(source, target.platform)
    other = "NVIDIA" if target.platform == "amd" else "AMD"
    folded = (
        f"; {view.folded_lines} lines compiled only for {other} folded into marker lines"
        if view.folds
        else ""
    )
    lines = source.count("\n")
    return view, {
        "kernel": block(view.text),
        "kernel_lines": str(lines),
        "kernel_folded": folded,
        "edit_rule": edit_rule(parent),
    }


def edit_rule(base: Candidate | None) -> str:
    """How a reply may change `base`: edits only for a kernel.hip too long to rewrite, else
    edits or whole files; with the edit format, so no prompt says two things."""
    from hipevolve.prompts.render import render

    lines = (base.hip_source or "").count("\n") if base else 0
    if lines > WHOLE_FILE_LINES:
        rule = (
            f"kernel.hip has {lines} lines: answer with SEARCH/REPLACE edits against the "
            "lines shown; do not rewrite the file, and leave any marker lines as they are."
        )
    else:
        rule = (
            "Answer with SEARCH/REPLACE edits against the files shown, or with whole files "
            "(one ```hip block for kernel.hip, one ```python block for model.py; a file you "
            "leave out is kept as it is)."
        )
    return render("edits", rule=rule).rstrip("\n")


def restored(candidate: Candidate, view: View) -> Candidate:
    """A reply's candidate with any folded text it carried as marker lines put back."""
    if not view.folds or not candidate.hip_source or not _MARKER_RE.search(candidate.hip_source):
        return candidate
    return candidate.model_copy(update={"hip_source": restore(candidate.hip_source, view)})
