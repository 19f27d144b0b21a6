"""The moves the offline mutator offers, each as a lazy stream of children of one or two elites.

- `steps`: a parent with exactly k of its tunables set to other declared values (k = 1, 2, 3);
- `mixes`: a child taking each tunable from one of two parents, never equal to either (uniform
  crossover restricted to distinct configurations: a mix of the two that neither is);
- `edits`: the catalogue transforms that apply;
- `jumps`: any other configuration of the parent's declared space (the last resort).

Configurations are cheap to enumerate, candidates are not (each child's source hash parses it,
about 15 ms), so the streams enumerate configurations first, shuffle them with the rng passed in
(or keep a fixed order without one) and build a candidate only when the caller asks for the next.
`first_unseen` stops at the first child whose code has not been seen: walking a neighbourhood
costs only as many hashes as there are seen children in front of the first new one.
"""

from __future__ import annotations

import itertools
import random
from collections.abc import Iterable, Iterator, Set

from hipevolve.core.candidate import Candidate
from hipevolve.evolution.offline.inert import pin
from hipevolve.evolution.offline.transforms import CATALOGUE
from hipevolve.evolution.offline.tunables import (
    Configuration,
    Tunable,
    TunableError,
    configuration_key,
    configurations,
    current_configuration,
    parse_tunables,
    with_values,
)

STEP_SIZES = (1, 2, 3)  # how many tunables one step may change


def declared_tunables(candidate: Candidate) -> list[Tunable]:
    """A native candidate's declared tunables; none for other formats or malformed ones (the
    verifier already turned a malformed declaration into a parse_error)."""
    if candidate.format != "native" or candidate.hip_source is None:
        return []
    try:
        return parse_tunables(candidate.hip_source)
    except TunableError:
        return []


def tunables_of(candidate: Candidate) -> list[Tunable]:
    """The tunables the moves may change: the declared ones, those inert on this run's card
    held at their current value (evolution/offline/inert.py)."""
    return pin(candidate.hip_source or "", declared_tunables(candidate))


def at(
    parent: Candidate, tunables: list[Tunable], config: Configuration, tag: str = ""
) -> Candidate:
    """`parent` with its tunables set to `config` (a full or partial configuration)."""
    full = current_configuration(tunables) | config
    base = parent.name.split("@", 1)[0]
    return parent.model_copy(
        update={
            "hip_source": with_values(parent.hip_source or "", config),
            "name": f"{base}@{tag}{configuration_key(full)}",
            "origin": None,
        }
    )


def described(parent: Candidate, child: Candidate) -> str:
    """What a move changed from `parent`, as a child's idea says it: "tunables BLOCK 256->512,
    UNROLL 2->4", "transform <catalogue name>", or "" when neither shows (another edit)."""
    tag = child.name.split("@", 1)[1] if "@" in child.name else ""
    if tag in {t.name for t in CATALOGUE}:
        return f"transform {tag}"
    was = current_configuration(declared_tunables(parent))
    now = current_configuration(declared_tunables(child))
    moved = [f"{k} {was[k]}->{v}" for k, v in now.items() if k in was and was[k] != v]
    return f"tunables {', '.join(moved)}" if moved else ""


def _shuffled(items: list, rng: random.Random | None) -> list:
    if rng is not None:
        rng.shuffle(items)
    return items


def step_configurations(tunables: list[Tunable], k: int) -> list[Configuration]:
    """Every partial configuration changing exactly k tunables to another declared value, in a
    fixed order (tunables in source order, values in declared order)."""
    movable = [t for t in tunables if len(t.values) > 1]
    found: list[Configuration] = []
    for group in itertools.combinations(movable, k):
        others = [[v for v in t.values if v != t.current] for t in group]
        for values in itertools.product(*others):
            found.append({t.name: v for t, v in zip(group, values, strict=True)})
    return found


def steps(parent: Candidate, k: int, rng: random.Random | None = None) -> Iterator[Candidate]:
    """Children of `parent` with exactly k tunables changed; rng-shuffled, or a fixed order."""
    tunables = tunables_of(parent)
    for config in _shuffled(step_configurations(tunables, k), rng):
        yield at(parent, tunables, config)


def mix_configurations(first: list[Tunable], second: Configuration) -> list[Configuration]:
    """Every configuration taking each tunable where the two differ from one of them (a value
    of `second`'s that `first` does not declare is never taken), neither parent's own."""
    differ = [
        t
        for t in first
        if t.name in second and second[t.name] != t.current and second[t.name] in t.values
    ]
    found: list[Configuration] = []
    for picks in itertools.product((False, True), repeat=len(differ)):
        if any(picks) and not all(picks):
            found.append(
                {t.name: second[t.name] for t, take in zip(differ, picks, strict=True) if take}
            )
    return found


def mixes(
    first: Candidate, second: Candidate, rng: random.Random | None = None
) -> Iterator[Candidate]:
    """Crossover children of two parents of the same source: each tunable from one of them,
    never a copy of either. Nothing when they differ in fewer than two tunables."""
    mine = tunables_of(first)
    theirs = current_configuration(tunables_of(second))
    for config in _shuffled(mix_configurations(mine, theirs), rng):
        yield at(first, mine, config, tag="x")


def edits(parent: Candidate, rng: random.Random | None = None) -> Iterator[Candidate]:
    """`parent` with each catalogue transform that applies."""
    if parent.format != "native" or parent.hip_source is None:
        return
    for transform in _shuffled(list(CATALOGUE), rng):
        try:
            source = transform.apply(parent.hip_source)
        except (TunableError, ValueError):
            source = None
        if source is not None:
            base = parent.name.split("@", 1)[0]
            yield parent.model_copy(
                update={"hip_source": source, "origin": None, "name": f"{base}@{transform.name}"}
            )


def neighbourhood(parent: Candidate, rng: random.Random | None = None) -> Iterator[Candidate]:
    """Every child one move from `parent` alone, nearest first: single steps and transforms
    (mixed, in rng order), then steps of 2 tunables, then of 3."""
    near = list(steps(parent, 1)) + list(edits(parent))
    yield from _shuffled(near, rng)
    for k in STEP_SIZES[1:]:
        yield from steps(parent, k, rng)


def jumps(parent: Candidate, rng: random.Random | None = None) -> Iterator[Candidate]:
    """`parent` at every other configuration of its declared space (a restart anywhere in it),
    rng-shuffled or in the space's order; the last resort, so that "exhausted" means the whole
    declared space of every elite has been seen."""
    tunables = tunables_of(parent)
    own = current_configuration(tunables)
    others = [c for c in configurations(tunables) if c != own]
    for config in _shuffled(others, rng):
        yield at(parent, tunables, config, tag="j")


def first_unseen(options: Iterable[Candidate], seen: Set[str]) -> Candidate | None:
    return next((c for c in options if c.source_hash not in seen), None)
