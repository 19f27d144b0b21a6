"""The constrain mode: a composed task whose first timed case meets a drawn bound on arithmetic
intensity or compulsory bytes, measured on the meta device."""

from __future__ import annotations

import random

from hipevolve.problems.synthetic.compose import compose_candidate
from hipevolve.problems.synthetic.measure import measure_case, module_from_source
from hipevolve.problems.synthetic.render import Candidate


def draw_constraint(rng: random.Random) -> dict[str, float | str]:
    kind = rng.choice(("memory_bound", "intensity_band", "bytes_range"))
    if kind == "memory_bound":
        return {"kind": kind, "max_intensity": rng.choice((1.0, 2.0, 4.0))}
    if kind == "intensity_band":
        low = rng.choice((16.0, 64.0, 256.0))
        return {"kind": kind, "low": low, "high": 4 * low}
    low = rng.choice((16.0, 64.0, 256.0)) * 2**20
    return {"kind": kind, "low": low, "high": 4 * low}


def meets(constraint: dict[str, float | str], nbytes: float, flops: float) -> bool:
    """Whether a case of `nbytes` compulsory bytes and `flops` FLOPs meets the constraint
    (intensity in FLOPs per byte)."""
    intensity = flops / nbytes
    if constraint["kind"] == "memory_bound":
        return intensity < float(constraint["max_intensity"])
    value = intensity if constraint["kind"] == "intensity_band" else nbytes
    return float(constraint["low"]) <= value < float(constraint["high"])


def describe_constraint(c: dict[str, float | str]) -> str:
    if c["kind"] == "memory_bound":
        return f"memory-bound: arithmetic intensity below {c['max_intensity']:g} FLOP/byte"
    if c["kind"] == "intensity_band":
        return f"arithmetic intensity in [{c['low']:g}, {c['high']:g}) FLOP/byte"
    return f"compulsory bytes in [{float(c['low']) / 2**20:g}, {float(c['high']) / 2**20:g}) MiB"


def constrain_candidate(
    rng: random.Random, name: str, seed: int = 0, attempts: int = 80
) -> Candidate:
    """A composed task whose timed case meets a drawn constraint, found by drawing chains and
    shapes and measuring them on the meta device (the last draw is returned if none meets it;
    admission then rejects it with the reason)."""
    constraint = draw_constraint(rng)
    linear_prob = {"memory_bound": 0.0, "intensity_band": 1.0}.get(str(constraint["kind"]), 0.4)
    rows = (16, 32, 64, 128, 256, 512, 1024, 2048, 4096, 8192, 16384)
    candidate = None
    for _ in range(attempts):
        candidate = compose_candidate(
            rng, name, seed, timed_cases=1, rows=rows, linear_prob=linear_prob, mode="constrain"
        )
        timed = candidate.cases[1]
        module = module_from_source(candidate.source, "constrain")
        nbytes, flops, _ = measure_case(module, timed["init"], timed["inputs"])
        if meets(constraint, nbytes, flops):
            break
    assert candidate is not None
    text = describe_constraint(constraint)
    return candidate.model_copy(
        update={
            "name": f"{name}_{constraint['kind']}",
            "constraint": constraint,
            "description": f"{candidate.description}; constraint {text}",
            "notes": f"generated to meet: {text} (case {candidate.cases[1]['name']})",
        }
    )
