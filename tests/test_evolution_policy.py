"""The evolution policy as pure functions: descriptors, islands, selection, migration, budget."""

from __future__ import annotations

import random

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from pydantic import ValidationError

from hipevolve.core.evaluation import StaticFacts
from hipevolve.evolution.budget import Admission, RunBudget
from hipevolve.evolution.descriptors import (
    AXES,
    BINS,
    all_labels,
    cell_from_key,
    cell_key,
    cell_of,
    hamming,
)
from hipevolve.evolution.islands import (
    Elite,
    EvolutionSettings,
    Island,
    best,
    best_fitness,
    holders,
    insert,
    ranked,
)
from hipevolve.evolution.migration import exchange, migrate, reseed, weaker_half
from hipevolve.evolution.selection import (
    PolicyState,
    choose_inspirations,
    empty_islands,
    plan,
    select_parent,
)

# ---- strategies -------------------------------------------------------------------------------

WIDTHS = ["8", "16", "32", "64", "96", "128", "format"]

facts_st = st.builds(
    StaticFacts,
    kernel=st.just("k"),
    target=st.just("gfx942"),
    occupancy=st.integers(0, 12),
    lds_bytes=st.integers(0, 160 * 1024),
    mfma=st.integers(0, 4),
    global_loads=st.dictionaries(st.sampled_from(WIDTHS), st.integers(0, 3), max_size=3),
    buffer_loads=st.dictionaries(st.sampled_from(WIDTHS), st.integers(0, 3), max_size=2),
)
tunables_st = st.dictionaries(
    st.sampled_from(["BV", "BLOCK", "BLOCK_SIZE", "TILE_K", "NUM_WARPS", "UNROLL", "bk"]),
    st.one_of(st.integers(1, 1024), st.sampled_from(["64", "x", "256"]), st.booleans()),
    max_size=3,
)

# Two bins per axis: 32 cells, dense enough for ties, collisions and grid neighbours.
LABELS = all_labels()
cell_st = st.tuples(*(st.sampled_from(LABELS[axis][:2]) for axis in AXES))


def consistent_elite(n: int, cid: int) -> Elite:
    """Elite whose fitness and cell are functions of its code, as in a real run."""
    cell = tuple(LABELS[axis][(n >> i) & 1] for i, axis in enumerate(AXES))
    return Elite(candidate_id=cid, fitness=((n * 37) % 23) / 4, source_hash=f"h{n}", cell=cell)


# Any data, including the same code re-measured with a different fitness or cell.
any_elite_st = st.builds(
    Elite,
    candidate_id=st.integers(0, 40),
    fitness=st.sampled_from([0.0, 0.5, 1.0, 1.0, 1.5, 2.0, 3.25]),
    source_hash=st.integers(0, 12).map(lambda i: f"h{i}"),
    cell=cell_st,
)


@st.composite
def islands_st(draw, min_islands: int = 1, max_islands: int = 5, min_elites: int = 0):
    """Islands built by inserts of consistent elites (a hash drawn on two islands is one kernel)."""
    k = draw(st.integers(min_islands, max_islands))
    islands = []
    for i in range(k):
        island = Island(id=i)
        for n in draw(st.lists(st.integers(0, 31), min_size=min_elites, max_size=12)):
            island = insert(island, consistent_elite(n, 100 * i + n))
        islands.append(island)
    return tuple(islands)


def facts(**kw) -> StaticFacts:
    return StaticFacts(kernel="k", target="gfx942", **kw)


# ---- descriptors ------------------------------------------------------------------------------


@given(st.lists(facts_st, max_size=3), tunables_st)
def test_cell_has_one_documented_bin_per_axis(kernel_facts, tunables):
    cell = cell_of(kernel_facts, tunables)
    assert len(cell) == len(AXES)
    for label, axis in zip(cell, AXES, strict=True):
        assert label in LABELS[axis]


def test_candidate_without_static_facts_gets_unknown_bins():
    assert cell_of([], {}) == ("occ:?", "lds:?", "vec:?", "mfma:?", "tile:?")
    assert cell_of([], {"BV": 32})[-1] == "tile:17-32"


@pytest.mark.parametrize(
    ("waves", "label"),
    [(1, "occ:1-2"), (2, "occ:1-2"), (3, "occ:3-4"), (8, "occ:5-8"), (10, "occ:9+")],
)
def test_occupancy_bins_at_their_edges(waves, label):
    assert cell_of([facts(occupancy=waves)])[0] == label


@pytest.mark.parametrize(
    ("nbytes", "label"),
    [
        (0, "lds:none"),
        (16383, "lds:<16K"),
        (16384, "lds:<48K"),
        (49151, "lds:<48K"),
        (49152, "lds:48K+"),
    ],
)
def test_lds_bins_at_their_edges(nbytes, label):
    assert cell_of([facts(lds_bytes=nbytes)])[1] == label


def test_most_constrained_kernel_sets_occupancy_and_widest_load_sets_vector_width():
    helper = facts(occupancy=8, global_loads={"32": 4})
    main = facts(occupancy=3, global_loads={"128": 2, "32": 1}, lds_bytes=20000, mfma=8)
    assert cell_of([helper, main]) == ("occ:3-4", "lds:<48K", "vec:128", "mfma:yes", "tile:?")
    assert cell_of([facts(buffer_loads={"64": 1}, global_loads={"128": 0})])[2] == "vec:64"
    assert cell_of([facts(global_loads={"format": 3})])[2] == "vec:?"


def test_tile_bin_reads_only_integer_tile_like_tunables():
    assert cell_of([], {"BV": 64, "NUM_WARPS": 512})[-1] == "tile:33-64"
    assert cell_of([], {"BLOCK_SIZE": "256", "BK": 16})[-1] == "tile:>128"
    assert cell_of([], {"UNROLL": 4, "TILE": True, "BLOCK": "wide"})[-1] == "tile:?"
    assert (
        cell_of([], {"TILE_M": "0x40"})[-1] == "tile:33-64"
    )  # C tokens, as tunables.py keeps them


@given(st.lists(facts_st, max_size=2), tunables_st)
def test_cell_key_round_trips(kernel_facts, tunables):
    cell = cell_of(kernel_facts, tunables)
    assert cell_from_key(cell_key(cell)) == cell


def test_hamming_counts_differing_axes():
    a = ("occ:1-2", "lds:none", "vec:128", "mfma:no", "tile:?")
    assert hamming(a, a) == 0
    assert hamming(a, ("occ:3-4", *a[1:])) == 1
    assert hamming(a, a[:4]) == 5
    assert set(BINS) == set(AXES)


# ---- islands ----------------------------------------------------------------------------------


@given(st.lists(any_elite_st, max_size=40))
def test_island_best_never_decreases_and_equals_the_max_ever_inserted(elites):
    island, previous, inserted = Island(id=0), float("-inf"), []
    for elite in elites:
        island = insert(island, elite)
        inserted.append(elite.fitness)
        assert best_fitness(island) >= previous
        assert best_fitness(island) == max(inserted)
        previous = best_fitness(island)


@given(st.lists(any_elite_st, max_size=40))
def test_island_holds_one_elite_per_cell_and_each_source_once(elites):
    island = Island(id=0)
    for elite in elites:
        island = insert(island, elite)
        hashes = [e.source_hash for e in island.elites]
        assert len(hashes) == len(set(hashes))
        assert all(cell == e.cell for cell, e in island.grid.items())


def test_equal_fitness_keeps_the_incumbent_and_insert_does_not_mutate():
    cell = tuple(LABELS[a][0] for a in AXES)
    first = Elite(candidate_id=1, fitness=2.0, source_hash="ha", cell=cell)
    tie = Elite(candidate_id=2, fitness=2.0, source_hash="hb", cell=cell)
    better = Elite(candidate_id=3, fitness=2.5, source_hash="hc", cell=cell)
    one = insert(Island(id=0), first)
    assert insert(one, tie).grid[cell].candidate_id == 1
    two = insert(one, better)
    assert two.grid[cell].candidate_id == 3
    assert one.grid[cell].candidate_id == 1


def test_remeasured_code_moves_to_its_new_cell_only_when_fitter():
    a, b = tuple(LABELS[x][0] for x in AXES), tuple(LABELS[x][1] for x in AXES)
    island = insert(Island(id=0), Elite(candidate_id=1, fitness=1.0, source_hash="h", cell=a))
    moved = insert(island, Elite(candidate_id=2, fitness=1.5, source_hash="h", cell=b))
    assert [e.candidate_id for e in moved.elites] == [2]
    assert insert(island, Elite(candidate_id=3, fitness=0.5, source_hash="h", cell=b)) is island


@given(islands_st(max_islands=1))
def test_island_round_trips_through_json(islands):
    (island,) = islands
    assert Island.model_validate_json(island.model_dump_json()) == island


# ---- selection --------------------------------------------------------------------------------


@given(islands_st(), st.integers(0, 2**32), st.integers(0, 40))
@settings(max_examples=60)
def test_plan_is_deterministic_for_a_seed(islands, seed, generation):
    state = PolicyState(islands=islands, generation=generation)
    config = EvolutionSettings(islands=len(islands), proposals_per_island=2)
    assert plan(state, config, random.Random(seed)) == plan(state, config, random.Random(seed))


@given(islands_st(max_islands=1, min_elites=1), st.integers(0, 2**32), st.integers(0, 6))
def test_inspirations_never_include_the_parent_or_repeat_code(islands, seed, count):
    (island,) = islands
    rng = random.Random(seed)
    parent = select_parent(island, rng, EvolutionSettings())
    chosen = choose_inspirations(island, parent, rng, count)
    hashes = [e.source_hash for e in chosen]
    assert parent.source_hash not in hashes
    assert all(e.candidate_id != parent.candidate_id for e in chosen)
    assert len(hashes) == len(set(hashes))
    assert all(e in island.elites for e in chosen)
    assert len(chosen) == min(count, len(island.grid) - 1)


def test_inspirations_show_island_best_a_grid_neighbour_and_a_random_elite():
    cells = {n: consistent_elite(n, n) for n in range(32)}
    parent = cells[0]
    island = Island(id=0)
    for elite in cells.values():
        island = insert(island, elite)
    top = best(island)
    for seed in range(20):
        first, second, third = choose_inspirations(island, parent, random.Random(seed), 3)
        assert first == top
        assert hamming(second.cell, parent.cell) == 1
        assert third not in (first, second, parent)


def test_elite_draw_stays_in_top_k_and_uniform_draw_reaches_every_elite():
    island = Island(id=0)
    for n in range(32):
        island = insert(island, consistent_elite(n, n))
    rng = random.Random(7)
    elite_only = EvolutionSettings(
        elite_fraction=1.0, fitness_weighted_fraction=0.0, uniform_fraction=0.0, elite_top_k=2
    )
    top_two = sorted(island.elites, key=lambda e: (-e.fitness, e.candidate_id))[:2]
    assert {select_parent(island, rng, elite_only) for _ in range(200)} == set(top_two)
    uniform = EvolutionSettings(
        elite_fraction=0.0, fitness_weighted_fraction=0.0, uniform_fraction=1.0
    )
    assert {select_parent(island, rng, uniform) for _ in range(2000)} == set(island.elites)


def test_rank_weighted_draw_prefers_fitter_elites():
    island = Island(id=0)
    for n in range(32):
        island = insert(island, consistent_elite(n, n))
    weighted = EvolutionSettings(
        elite_fraction=0.0, fitness_weighted_fraction=1.0, uniform_fraction=0.0
    )
    rng = random.Random(3)
    draws = [select_parent(island, rng, weighted).fitness for _ in range(4000)]
    median = sorted(e.fitness for e in island.elites)[len(island.grid) // 2]
    assert sum(f > median for f in draws) > 1.3 * sum(f < median for f in draws)


def test_settings_reject_fractions_that_do_not_sum_to_one():
    with pytest.raises(ValidationError, match="sum to"):
        EvolutionSettings(elite_fraction=0.5, fitness_weighted_fraction=0.5, uniform_fraction=0.5)
    with pytest.raises(ValidationError):
        EvolutionSettings(unknown=1)


@given(islands_st(), st.integers(0, 2**32))
def test_plan_proposes_from_each_island_and_seeds_empty_ones(islands, seed):
    config = EvolutionSettings(islands=len(islands), proposals_per_island=2)
    result = plan(PolicyState(islands=islands, generation=1), config, random.Random(seed))
    assert [p.island for p in result.proposals] == [i.id for i in islands for _ in range(2)]
    by_id = {i.id: i for i in result.islands}
    for proposal in result.proposals:
        island = by_id[proposal.island]
        if not island.grid:
            assert proposal.parent is None and proposal.inspirations == ()
        else:
            assert proposal.parent in island.elites
            assert len(proposal.inspirations) == min(3, len(island.grid) - 1)


def test_first_plan_gives_every_island_a_seed_proposal():
    config = EvolutionSettings()
    result = plan(
        PolicyState(islands=empty_islands(config), generation=0), config, random.Random(0)
    )
    assert [(p.island, p.parent) for p in result.proposals] == [(i, None) for i in range(4)]


# ---- migration and reseeding ------------------------------------------------------------------


@given(islands_st(min_islands=2), st.integers(0, 4))
def test_migration_never_duplicates_a_source_hash_within_an_island(islands, migrants):
    result, moves = migrate(islands, migrants)
    for island in result:
        hashes = [e.source_hash for e in island.elites]
        assert len(hashes) == len(set(hashes))
    assert all(m.kind == "migrate" and m.target == (m.source + 1) % len(islands) for m in moves)


def test_migrant_whose_code_the_target_holds_is_skipped_even_if_measured_fitter():
    cell = tuple(LABELS[a][0] for a in AXES)
    source = insert(Island(id=0), Elite(candidate_id=1, fitness=3.0, source_hash="h", cell=cell))
    target = insert(Island(id=1), Elite(candidate_id=2, fitness=1.0, source_hash="h", cell=cell))
    result, moves = migrate((source, target), 1)
    assert result[1] is target and moves == ()


@given(islands_st(min_islands=2))
def test_migration_carries_each_island_best_to_the_next_in_the_ring(islands):
    """...when no other island holds it: code already on two islands is not relayed."""
    result, _ = migrate(islands, 1)
    held = holders(islands)
    for i, island in enumerate(islands):
        if island.grid and held[ranked(island)[0].source_hash] == 1:
            assert best_fitness(result[(i + 1) % len(islands)]) >= best_fitness(island)


@given(islands_st(), st.sampled_from(["elites", "best"]))
def test_reseed_keeps_the_global_best_and_resets_only_the_weaker_half(islands, mode):
    result, moves = reseed(islands, mode)
    before = max(best_fitness(i) for i in islands)
    assert max(best_fitness(i) for i in result) == before
    reset = {m.target for m in moves}
    assert reset <= {islands[i].id for i in weaker_half(islands)}
    assert len(weaker_half(islands)) == len(islands) // 2
    for old, new in zip(islands, result, strict=True):
        assert new.id == old.id
        if old.id not in reset:
            assert new == old
        else:
            assert best_fitness(new) == before


def test_exchange_runs_on_schedule():
    config = EvolutionSettings(islands=2, migration_every=5, reseed_every=20)
    strong, weak = Island(id=0), Island(id=1)
    for n in (1, 2, 3):
        strong = insert(strong, consistent_elite(n, n))
    weak = insert(weak, consistent_elite(0, 10))
    islands = (strong, weak)
    assert exchange(islands, 0, config) == (islands, ())
    assert exchange(islands, 3, config) == (islands, ())
    _, moves = exchange(islands, 5, config)
    assert {m.kind for m in moves} == {"migrate"}
    after, moves = exchange(islands, 20, config)
    assert {m.kind for m in moves} == {"reseed"}  # migration finds its code already there
    assert after[1].grid == strong.grid


# ---- budget -----------------------------------------------------------------------------------


@given(
    st.integers(0, 30),
    st.lists(st.integers(0, 50).map(lambda i: f"h{i}"), max_size=120),
    st.lists(st.integers(0, 50).map(lambda i: f"h{i}"), max_size=10),
)
def test_evaluations_never_exceed_the_budget_whatever_the_proposal_stream(limit, stream, resumed):
    budget = RunBudget(limit)
    budget.restore(admitted=[(h, 0) for h in resumed])
    admitted = [h for h in stream if budget.admit(h) is Admission.evaluate]
    assert len(set(resumed)) + len(admitted) <= max(limit, len(set(resumed)))
    assert len(admitted) == len(set(admitted))
    assert not set(admitted) & set(resumed)
    fresh = len(set(stream) - set(resumed))
    assert len(admitted) == min(fresh, max(limit - len(set(resumed)), 0))


def test_duplicates_cost_nothing_even_after_the_budget_is_spent():
    budget = RunBudget(2)
    assert [budget.admit(h) for h in ("a", "a", "b", "a", "c", "b")] == [
        Admission.evaluate,
        Admission.duplicate,
        Admission.evaluate,
        Admission.duplicate,
        Admission.exhausted,
        Admission.duplicate,
    ]
    assert (budget.spent, budget.remaining, budget.exhausted) == (2, 0, True)
    with pytest.raises(ValueError):
        RunBudget(-1)
