"""Static screening: named checks over a candidate's sources, run before any compile or GPU time.

What it catches (a strict check rejects the candidate; a warning is recorded as a flag):
- PyTorch doing the work in ModelNew.forward (torch/F calls, tensor methods, operators, nn modules,
  the reference Model) or in a load_inline wrapper (torch::/at:: calls, tensor methods) instead
  of the candidate's kernels;
- fallbacks (try/except, contextlib.suppress), side channels (streams, CUDA graphs, threads,
  processes, exit hooks, load-time constructors), harness tampering (assignments to module
  attributes, setattr, sys.modules), reaching outside (forbidden imports, eval/__import__, dunder
  escapes, environment, files, sockets, dlopen, system());
- build tampering: #include outside an allowlist, quoted/absolute/parent/computed includes,
  #embed, #line, __has_include probes, assembler .incbin, trigraphs, unknown pragmas, load_inline
  flags beyond an allowlist (FAULTS 23);
- warnings: prompt injection in comments (recorded, no effect: FAULTS 29), precision downgrades,
  state cached on self in forward, equality tests on shapes, branches on seeds, inline asm,
  managed memory, launches on the null stream.

What it cannot catch (the GPU worker's dynamic checks and sandbox do): anything computed at run
time (getattr chains built from data, code hidden in tensors or strings decoded later), PyTorch
reached from C++ through macros, aliases or helper types, static initialisers in C++, lazy tensor
subclasses, output reuse, stream or thread injection that the source does not spell out, and
wrong answers. Screening is a cheap first gate, never a proof of honesty.

Model code is parsed with `ast` (never imported); HIP is lexed the way the compiler's first
phases read it (lexer.py: line splices, raw strings, digraphs, character literals, digit
separators), then matched with regexes over source whose comments are stripped (and, for call
patterns, whose string and character literals are blanked). The screen is the first gate for
includes, not the last: the build asks the compiler for every file it reads
(verifier/build/includes.py) and scrubs its logs.

Where things live (verifier/screen/): sources.py parses the candidate (PyModel, CxxSource,
Sources); registry.py holds Check and the @check registry; the checks are in compute.py (the
kernel does the work), escape.py (side channels, tampering, reaching outside), toolchain.py
(what reaches the compiler) and warnings.py (the warning tier); lexer.py reads C/C++. This
module runs them.
"""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict

# Importing the check modules registers their checks; import order is CHECKS order.
from hipevolve.core.candidate import Candidate
from hipevolve.verifier.screen import compute, escape, toolchain, warnings, warp_width  # noqa: F401
from hipevolve.verifier.screen.registry import CHECKS, Check, Tier, check
from hipevolve.verifier.screen.sources import Sources

__all__ = ["CHECKS", "Check", "Finding", "Screening", "check", "describe_checks", "screen"]


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
