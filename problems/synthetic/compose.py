"""The compose mode: Level-2 style fusion tasks chained from 2-5 operators of the ops library,
with a small CPU case and timed cases of drawn shapes."""

from __future__ import annotations

import random
from collections.abc import Sequence
from typing import Any

from hipevolve.problems.synthetic.ops import OPS, Op, can_follow
from hipevolve.problems.synthetic.render import Candidate, Mode, render_chain

SMALL_ROWS = (32, 64)
SMALL_FEATURES = (64, 128, 256)
TIMED_ROWS = (1024, 2048, 4096, 8192, 16384)
TIMED_FEATURES = (768, 1024, 2048, 4096, 5120, 8192)


def draw_chain(rng: random.Random, length: int, linear_prob: float = 0.5) -> list[Op]:
    """A chain of `length` operators that can follow one another, at most two GEMMs."""
    chain: list[Op] = [OPS["linear"]] if rng.random() < linear_prob else []
    while len(chain) < length:
        last = len(chain) == length - 1
        options = [
            op
            for op in OPS.values()
            if can_follow(chain[-1] if chain else None, op)
            and (last or not op.terminal)
            and not (op.name == "linear" and sum(o.name == "linear" for o in chain) >= 2)
        ]
        # Terminal reductions are rare in fusion tasks; weigh them down.
        weights = [0.3 if op.terminal else 1.0 for op in options]
        chain.append(rng.choices(options, weights)[0])
    return chain


def _shapes(
    rng: random.Random, features: list[str], rows: Sequence[int], widths: Sequence[int]
) -> dict[str, int]:
    return {"rows": rng.choice(rows)} | {f: rng.choice(widths) for f in features}


def _case(
    name: str,
    shape: dict[str, int],
    features: list[str],
    input_features: list[str],
    dtype: str,
    small: bool,
) -> dict[str, Any]:
    return {
        "name": name,
        "init": {f: shape[f] for f in features} | {"dtype": dtype},
        "inputs": {"rows": shape["rows"]}
        | {f: shape[f] for f in input_features}
        | {"dtype": dtype},
        "dtypes": [dtype],
        "small": small,
        "timed": not small,
    }


def _tolerance(chain: Sequence[Op], dtype: str) -> dict[str, Any]:
    # GEMMs and outputs below 1e-2 (softmax, sigmoid of large rows) need a relative measure: an
    # absolute 1e-2 would pass an all-zero softmax. Otherwise KernelBench's per-dtype allclose.
    if any(op.kind == "matmul" for op in chain) or chain[-1].output_range == "unit":
        return {"kind": "rel_rms", "max_rel_rms": 1e-4 if dtype == "float32" else 1e-2}
    return {"kind": "kernelbench"}


def compose_candidate(
    rng: random.Random,
    name: str,
    seed: int = 0,
    ops: Sequence[str] | None = None,
    timed_cases: int = 2,
    rows: Sequence[int] = TIMED_ROWS,
    linear_prob: float = 0.5,
    mode: Mode = "compose",
) -> Candidate:
    """A Level-2 style fusion task: `ops` if given (unchecked, for tests), else a drawn chain."""
    chain = (
        [OPS[o] for o in ops]
        if ops is not None
        else draw_chain(rng, rng.randint(2, 5), linear_prob)
    )
    dtype = rng.choice(sorted(set.intersection(*(set(op.dtypes) for op in chain))))
    n_features = 1 + sum(op.name == "linear" for op in chain)
    names = [f"f{i}" for i in range(n_features)]
    timed = []
    while len(timed) < timed_cases:
        shape = _shapes(rng, names, rows, TIMED_FEATURES)
        if shape not in timed:
            timed.append(shape)
    small = _shapes(rng, names, SMALL_ROWS, SMALL_FEATURES)
    source, features, input_features = render_chain(chain, rng, mode, seed, timed[0], dtype)
    # CPU bf16 GEMMs are slow: small cases of GEMM chains run in float32.
    small_dtype = "float32" if n_features > 1 else dtype
    cases = [_case("small", small, features, input_features, small_dtype, small=True)]
    cases += [
        _case(
            f"r{s['rows']}_" + "x".join(str(s[f]) for f in features),
            s,
            features,
            input_features,
            dtype,
            small=False,
        )
        for s in timed
    ]
    label = "_".join(op.name for op in chain)
    return Candidate(
        name=f"{name}_{label}",
        mode=mode,
        family="fusion",
        description=f"Synthetic fusion {' -> '.join(op.name for op in chain)}, {dtype}, fp32 math",
        source=source,
        cases=cases,
        tolerance=_tolerance(chain, dtype),
    )
