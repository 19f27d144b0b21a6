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
    preprocesses as the source does. Two calls to `digests`: each source with one other value
    of each tunable, then the remaining values of the tunables that left the text unchanged
    (most tunables are live and cost one variant)."""
    declared = [[t for t in _declared(source) if _others(t)] for source in sources]
    first = [
        variant
        for source, tunables in zip(sources, declared, strict=True)
        if tunables
        for variant in [source, *(with_values(source, {t.name: _others(t)[0]}) for t in tunables)]
    ]
    found = iter(digests(first) if first else [])
    plans: list[tuple[str | None, list[Tunable]]] = []  # (own digest, tunables still alike)
    for tunables in declared:
        own = next(found) if tunables else None
        moved = [next(found) for _ in tunables]
        plans.append((own, [t for t, d in zip(tunables, moved, strict=True) if own and d == own]))
    second = [
        with_values(source, {t.name: v})
        for source, (_, alike) in zip(sources, plans, strict=True)
        for t in alike
        for v in _others(t)[1:]
    ]
    found = iter(digests(second) if second else [])
    inert = []
    for own, alike in plans:
        rest = {t.name: [next(found) for _ in _others(t)[1:]] for t in alike}
        inert.append(frozenset(name for name, ds in rest.items() if all(d == own for d in ds)))
    return inert


def _others(tunable: Tunable) -> list[str]:
    """Its declared values but the current one."""
    return [v for v in tunable.values if v != tunable.current]


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
