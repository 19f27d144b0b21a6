"""The registry of static checks: each is a named function over `Sources` with a tier.

Check modules register with `@check(...)`; `screening` imports them and runs `CHECKS`. This
module imports no check module, so registering never forms an import cycle.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Literal

from hipevolve.verifier.screen.cxx import Hit
from hipevolve.verifier.screen.sources import Sources

Tier = Literal["strict", "warning"]
Format = Literal["native", "kernelbench"]
BOTH: tuple[Format, ...] = ("native", "kernelbench")


@dataclass(frozen=True)
class Check:
    """A named check: `run` yields a Hit per problem; `formats` are the candidate formats it
    applies to."""

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
