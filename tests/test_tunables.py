"""Tunable declarations (`// @tunable NAME: v1, v2, ...` before `#define NAME value`), the space
they span, and the offline mutator's mutation and crossover over them."""

from __future__ import annotations

import difflib
import random
from pathlib import Path

import pytest

from hipevolve.core.candidate import Candidate, load_candidate
from hipevolve.evolution.offline.mutate import crossover, mutate, transformed
from hipevolve.evolution.offline.transforms import transform_named
from hipevolve.evolution.offline.tunables import (
    TunableError,
    configuration_key,
    configurations,
    current_configuration,
    parse_tunables,
    space_size,
    with_values,
)

ROOT = Path(__file__).resolve().parents[1]
SEEDS = [
    ROOT / "problems" / "gated_delta_net" / "seeds" / "chunked",
    ROOT / "problems" / "gated_delta_net_decode" / "seeds" / "recurrent",
]

# Three tunables, one with a trailing comment on its #define.
KERNEL = """#include <hip/hip_runtime.h>
// @tunable BLOCK: 64, 128, 256, 512
#define BLOCK 256  // threads per block
// @tunable VEC: 1, 2, 4, 8
#define VEC 4
// @tunable ITEMS: 1, 2, 4
#define ITEMS 1
__global__ void k(float* y) { y[threadIdx.x * VEC * ITEMS] = 0.0f; }
"""
MODEL = "from hipevolve.runtime import kernels\n\nclass ModelNew:\n    pass\n"


def native(source: str, name: str = "parent") -> Candidate:
    return Candidate(format="native", hip_source=source, python_source=MODEL, name=name)


def changed_lines(before: str, after: str) -> list[str]:
    diff = difflib.unified_diff(before.splitlines(), after.splitlines(), lineterm="", n=0)
    return [d for d in diff if d[:1] in "+-" and d[:3] not in ("+++", "---")]


# ----------------------------------------------------------------------------- parsing


def test_parse_reads_names_values_current_and_define_line():
    tunables = parse_tunables(KERNEL)
    assert [(t.name, t.values, t.current, t.line) for t in tunables] == [
        ("BLOCK", ("64", "128", "256", "512"), "256", 3),
        ("VEC", ("1", "2", "4", "8"), "4", 5),
        ("ITEMS", ("1", "2", "4"), "1", 7),
    ]


def test_setting_current_values_round_trips_byte_for_byte():
    for source in [KERNEL] + [(seed / "kernel.hip").read_text() for seed in SEEDS]:
        assert with_values(source, current_configuration(parse_tunables(source))) == source


def test_setting_values_changes_only_the_define_lines_and_keeps_their_comments():
    edited = with_values(KERNEL, {"BLOCK": "64", "ITEMS": "4"})
    assert changed_lines(KERNEL, edited) == [
        "-#define BLOCK 256  // threads per block",
        "+#define BLOCK 64  // threads per block",
        "-#define ITEMS 1",
        "+#define ITEMS 4",
    ]
    assert current_configuration(parse_tunables(edited)) == {
        "BLOCK": "64",
        "VEC": "4",
        "ITEMS": "4",
    }


def test_setting_an_undeclared_name_or_value_is_refused():
    with pytest.raises(KeyError, match="NOPE"):
        with_values(KERNEL, {"NOPE": "1"})
    with pytest.raises(ValueError, match="VEC=3"):
        with_values(KERNEL, {"VEC": "3"})


def test_a_source_without_declarations_has_one_empty_configuration():
    assert parse_tunables("__global__ void k() {}\n#define X 3\n") == []
    assert space_size([]) == 1
    assert list(configurations([])) == [{}]


def test_the_notation_inside_a_prose_comment_is_not_a_declaration():
    source = "// a comment `// @tunable NAME: v1, v2` explains the notation\n#define NAME v9\n"
    assert parse_tunables(source) == []


@pytest.mark.parametrize(
    ("source", "line", "message"),
    [
        ("// @tunable BV: 16, 32\nconstexpr int BV = 16;\n", 1, "directly followed by"),
        ("// @tunable BV: 16, 32\n\n#define BV 16\n", 1, "directly followed by"),
        ("// @tunable BV: 16, 32\n#define NT 16\n", 1, "directly followed by"),
        ("// @tunable BV: 16, 32\n", 1, "directly followed by"),
        ("// @tunable BV: 16, 32\n#define BV 64\n", 2, "not among the declared 16, 32"),
        ("// @tunable BV: 16, 32\n#define BV(x) 16\n", 2, "object-like"),
        ("// @tunable BV: 16, 32\n#define BV 8 * 2\n", 2, "object-like"),
        ("// @tunable BV 16, 32\n#define BV 16\n", 1, "write `// @tunable NAME"),
        ("// @tunable BV: 16,, 32\n#define BV 16\n", 1, "none empty"),
        ("// @tunable BV: 16, 16\n#define BV 16\n", 1, "listed twice"),
        ("// @tunable BV: 16, 4 * 8\n#define BV 16\n", 1, "not a single C token"),
        (
            "// @tunable BV: 16, 32\n#define BV 16\n// @tunable BV: 16, 32\n#define BV 32\n",
            3,
            "declared @tunable twice",
        ),
        ("// @tunable BV: 16, 32\n#define BV 16\n#if X\n#define BV 32\n#endif\n", 4, "again"),
    ],
)
def test_malformed_declarations_raise_with_their_line(source, line, message):
    with pytest.raises(TunableError, match=message) as raised:
        parse_tunables(source)
    assert raised.value.line == line


# ----------------------------------------------------------------------------- the space


RENDERED = 400  # configurations of a large space rendered and read back, besides every value


def test_the_gdn_seeds_spaces_enumerate_distinct_configurations_that_render_with_their_defines():
    """Every configuration is enumerated once (space_size of them, all distinct); every declared
    value of every tunable, and RENDERED configurations drawn with a seeded rng beside them,
    render with only their #define lines changed and read back as themselves. (Rendering all
    116,640 configurations of the chunked prefill took 790 s on a 2-core machine.)"""
    for seed in SEEDS:
        source = (seed / "kernel.hip").read_text()
        tunables = parse_tunables(source)
        assert tunables, f"{seed} declares no tunable"
        every = list(configurations(tunables))
        assert len(every) == len({configuration_key(c) for c in every}) == space_size(tunables)
        widest = max(len(t.values) for t in tunables)
        covering = [{t.name: t.values[i % len(t.values)] for t in tunables} for i in range(widest)]
        sample = random.Random(seed.name).sample(every, min(RENDERED, len(every)))
        defines = {t.line: t.name for t in tunables}
        original = source.splitlines()
        rendered = []
        for config in covering + sample:
            text = with_values(source, config)
            assert current_configuration(parse_tunables(text)) == config
            lines = text.splitlines()
            assert len(lines) == len(original)
            for number, (new, old) in enumerate(zip(lines, original, strict=True), start=1):
                name = defines.get(number)
                assert new == (f"#define {name} {config[name]}" if name else old), number
            rendered.append((configuration_key(config), text))
        assert len(dict(rendered)) == len(set(text for _, text in rendered))


def test_space_size_is_the_product_of_the_value_counts():
    tunables = parse_tunables(KERNEL)
    configs = list(configurations(tunables))
    assert space_size(tunables) == len(configs) == 4 * 4 * 3
    assert len({configuration_key(c) for c in configs}) == len(configs)


def test_configuration_key_is_independent_of_order():
    assert configuration_key({"VEC": "4", "BLOCK": "256"}) == "BLOCK=256;VEC=4"
    assert configuration_key({"BLOCK": "256", "VEC": "4"}) == "BLOCK=256;VEC=4"


# ----------------------------------------------------------------------------- mutation


def declared_space(candidate: Candidate) -> dict[str, tuple[str, ...]]:
    return {t.name: t.values for t in parse_tunables(candidate.hip_source or "")}


def config_of(candidate: Candidate) -> dict[str, str]:
    return current_configuration(parse_tunables(candidate.hip_source or ""))


def test_mutation_stays_inside_the_declared_values_and_changes_as_many_as_asked():
    parent = native(KERNEL)
    space, before = declared_space(parent), config_of(parent)
    rng = random.Random(1)
    for changes in (1, 2, 3, 5):
        for _ in range(40):
            child = mutate(parent, rng, changes=changes)
            assert child is not None
            after = config_of(child)
            assert all(after[name] in space[name] for name in space)
            differing = [n for n in before if after[n] != before[n]]
            assert len(differing) == min(changes, len(space))


def test_mutation_with_neighbour_probability_one_moves_one_step_in_declared_order():
    parent = native(with_values(KERNEL, {"VEC": "1"}))
    seen = set()
    rng = random.Random(7)
    for _ in range(60):
        child = mutate(parent, rng, neighbour_p=1.0)
        for name, values in declared_space(parent).items():
            old = values.index(config_of(parent)[name])
            new = values.index(config_of(child)[name])
            assert abs(new - old) <= 1
        seen.add(configuration_key(config_of(child)))
    # VEC=1 is at the start of its list: its only neighbour is 2.
    assert not any("VEC=4" in key or "VEC=8" in key for key in seen)


def test_mutation_keeps_model_py_and_the_native_format():
    parent = native(KERNEL)
    child = mutate(parent, random.Random(0))
    assert child.format == "native" and child.python_source == parent.python_source
    assert child.name.startswith("parent@") and child.hip_source != parent.hip_source


def test_mutation_is_deterministic_for_a_seed():
    parent = native(KERNEL)
    first = [mutate(parent, random.Random(42), changes=2).hip_source for _ in range(3)]
    rng_a, rng_b = random.Random(5), random.Random(5)
    run_a = [mutate(parent, rng_a).hip_source for _ in range(20)]
    run_b = [mutate(parent, rng_b).hip_source for _ in range(20)]
    assert len(set(first)) == 1 and run_a == run_b and len(set(run_a)) > 1


def test_mutation_has_nothing_to_do_without_a_second_value():
    assert mutate(native("#define X 1\n"), random.Random(0)) is None
    single = "// @tunable X: 1\n#define X 1\n"
    assert mutate(native(single), random.Random(0)) is None


def test_mutation_of_each_gdn_seed_reaches_every_declared_value():
    for seed in SEEDS:
        parent = load_candidate(seed)
        rng = random.Random(3)
        children = [config_of(mutate(parent, rng)) for _ in range(600)]  # GDN: 11 tunables
        current = config_of(parent)
        assert all(child != current for child in children)
        for tunable in parse_tunables((seed / "kernel.hip").read_text()):
            reached = {child[tunable.name] for child in children}
            assert set(tunable.values) - {current[tunable.name]} <= reached, tunable.name
            assert reached <= set(tunable.values), tunable.name


# ----------------------------------------------------------------------------- crossover


def test_crossover_only_mixes_the_parents_values():
    first = native(with_values(KERNEL, {"BLOCK": "64", "VEC": "1", "ITEMS": "1"}), "a")
    second = native(with_values(KERNEL, {"BLOCK": "512", "VEC": "8", "ITEMS": "4"}), "b")
    a, b = config_of(first), config_of(second)
    rng = random.Random(11)
    children = [crossover(first, second, rng) for _ in range(60)]
    for child in children:
        config = config_of(child)
        assert all(config[name] in (a[name], b[name]) for name in a)
        assert child.python_source == first.python_source and child.name.startswith("a@x")
    # Uniform per parameter: every mix of the three shows up in 60 draws.
    assert len({configuration_key(config_of(c)) for c in children}) == 8


def test_crossover_mixes_only_shared_names_and_values_the_first_declares():
    first = native(KERNEL, "a")
    other = "// @tunable VEC: 4, 16\n#define VEC 16\n// @tunable ITEMS: 1, 2\n#define ITEMS 2\n"
    second = native(other, "b")
    rng = random.Random(2)
    configs = [config_of(crossover(first, second, rng)) for _ in range(40)]
    assert all(c["BLOCK"] == "256" and c["VEC"] == "4" for c in configs)  # 16 not declared by a
    assert {c["ITEMS"] for c in configs} == {"1", "2"}


def test_crossover_is_deterministic_for_a_seed():
    first = native(with_values(KERNEL, {"BLOCK": "64"}), "a")
    second = native(with_values(KERNEL, {"BLOCK": "512", "VEC": "1"}), "b")
    runs = [
        [crossover(first, second, rng).hip_source for _ in range(10)]
        for rng in (random.Random(9), random.Random(9))
    ]
    assert runs[0] == runs[1]


def test_crossover_without_shared_names_gives_nothing():
    other = native("// @tunable BV: 16, 32\n#define BV 16\n")
    assert crossover(native(KERNEL), other, random.Random(0)) is None


def test_transformed_candidate_carries_the_edit_and_the_same_model():
    parent = native(KERNEL)
    child = transformed(parent, transform_named("widen_vector"))
    assert config_of(child)["VEC"] == "8" and child.python_source == MODEL
    assert child.name == "parent@widen_vector"
    assert transformed(child, transform_named("widen_vector")) is None
