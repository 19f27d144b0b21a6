"""Tunables that change nothing the card runs, kept still by the offline mutator on that card.

The GDN seed's MFMA_KSTEP and AMD_STATE_BF16 are read only under `__HIP_PLATFORM_AMD__`: on an
NVIDIA card every value of them builds the same machine code. A move in such a tunable is a
machine-code copy, screened out after a build (evolution/generations.py) and proposed again;
late in a GDN run on an H200, 3 of every 4 children were such copies, each round a build on the
generation's critical path. Here a tunable is inert in a kernel source when every other declared
value of it preprocesses to the same text as the value the source holds (the evaluator's
`preprocessed` digests, about 0.2 s each: verifier/build/preprocessed.py), so each of its values
builds the same library. The moves then see it with its current value only (`pinned`): they
never change it on this card, and the source keeps its declaration for another card.

Exact for the source it is asked of, per tunable: whether a value is read in `#if` or in code,
any change in the preprocessed text keeps the tunable live. A tunable that only another
tunable's value makes live (read under `#if OTHER == 1` and OTHER is 0 here) is inert in this
source and live in a child that moves OTHER: each source is asked on its own. Without digests
(a stand-in evaluator, a failed pass) nothing is inert. The answer depends on the source and the
card's compiler only, so a resumed run pins what the uninterrupted one did.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from contextvars import ContextVar
from types import MappingProxyType

from hipevolve.evolution.offline.tunables import Tunable, TunableError, parse_tunables, with_values

Digests = Callable[[list[str]], list[str | None]]

# kernel source -> the tunables inert in it on this run's card (set by `pinned`)
_PINNED: ContextVar[Mapping[str, frozenset[str]]] = ContextVar(
    "pinned", default=MappingProxyType({})
)


def inert_tunables(sources: Sequence[str], digests: Digests) -> list[frozenset[str]]:
    """For each kernel source, the names of its tunables whose every other declared value
    preprocesses as the source does. One call to `digests` for all the variants."""
    variants: list[str] = []
    plans: list[tuple[int, list[tuple[str, range]]]] = []  # (source's index, its tunables')
    for source in sources:
        tunables = _declared(source)
        own = len(variants)
        if tunables:  # nothing to preprocess in a source without tunables
            variants.append(source)
        moves = []
        for t in tunables:
            others = [with_values(source, {t.name: v}) for v in t.values if v != t.current]
            moves.append((t.name, range(len(variants), len(variants) + len(others))))
            variants += others
        plans.append((own, moves))
    found = digests(variants) if variants else []
    return [
        frozenset(
            name
            for name, at in moves
            if found[own] is not None and at and all(found[i] == found[own] for i in at)
        )
        for own, moves in plans
    ]


def _declared(source: str) -> list[Tunable]:
    try:
        return parse_tunables(source)
    except TunableError:
        return []


@contextmanager
def pinned(inert: Mapping[str, frozenset[str]]) -> Iterator[None]:
    """While open, `pin` shows each source's inert tunables with their current value only."""
    token = _PINNED.set(inert)
    try:
        yield
    finally:
        _PINNED.reset(token)


def pin(source: str, tunables: list[Tunable]) -> list[Tunable]:
    """`tunables` of `source`, each one inert in it on this card declared with its current value
    only (no move changes it)."""
    inert = _PINNED.get().get(source)
    if not inert:
        return tunables
    return [
        t.model_copy(update={"values": (t.current,)}) if t.name in inert else t for t in tunables
    ]
