"""Operators that synthetic tasks are chained from, with their parameter ranges and shape rules.

Every operator maps a 2-D activation [rows, features] in fp32 to another one; only `linear` changes
the feature count and only the last-dim reductions (`sum_last`, `mean_last`) collapse it, so they end
a chain. Each operator emits source text (constructor lines and one forward statement) for the
generated reference: tasks are written as plain Python files, never pickled.
"""

from __future__ import annotations

import random
from typing import Literal

from pydantic import Field

from hipevolve.core.base import Frozen

DTYPES = ("bfloat16", "float16", "float32")


class Param(Frozen):
    """A scalar constant of an operator, drawn in [low, high] or from `choices`, baked into source."""

    name: str
    low: float = 0.0
    high: float = 0.0
    choices: tuple[str | float, ...] = ()

    def draw(self, rng: random.Random) -> str | float:
        if self.choices:
            return rng.choice(self.choices)
        return round(rng.uniform(self.low, self.high), 3)


class Op(Frozen):
    name: str
    kind: Literal["elementwise", "reduction", "matmul"]
    params: tuple[Param, ...] = ()
    dtypes: tuple[str, ...] = DTYPES
    min_features: int = Field(default=1, description="smallest last dim the op is meaningful on")
    terminal: bool = Field(default=False, description="collapses the last dim: ends a chain")
    extra_input: bool = Field(default=False, description="reads a second [rows, features] input")
    output_range: Literal["any", "nonneg", "nonpos", "unit"] = "any"
    needs_signed_input: bool = Field(
        default=False, description="constant on inputs of one sign (relu after log_softmax is 0)"
    )
    init: tuple[str, ...] = Field(default=(), description="constructor lines; {i} {f} {g} fields")
    forward: str = Field(description="one statement updating y; {i} {p[name]} fields")


ELEMENTWISE = (
    Op(
        name="relu",
        kind="elementwise",
        output_range="nonneg",
        needs_signed_input=True,
        forward="y = torch.relu(y)",
    ),
    Op(
        name="gelu",
        kind="elementwise",
        params=(Param(name="approximate", choices=("none", "tanh")),),
        forward='y = F.gelu(y, approximate="{p[approximate]}")',
    ),
    Op(name="silu", kind="elementwise", forward="y = F.silu(y)"),
    Op(name="sigmoid", kind="elementwise", output_range="unit", forward="y = torch.sigmoid(y)"),
    Op(name="tanh", kind="elementwise", forward="y = torch.tanh(y)"),
    Op(
        name="scale",
        kind="elementwise",
        params=(Param(name="factor", low=0.25, high=4.0),),
        forward="y = y * {p[factor]}",
    ),
    Op(
        name="add_bias",
        kind="elementwise",
        init=("self.b{i} = nn.Parameter((0.5 * torch.randn({f})).to(dt))",),
        forward="y = y + self.b{i}.float()",
    ),
    Op(name="residual_add", kind="elementwise", extra_input=True, forward="y = y + r{i}.float()"),
    Op(
        name="clamp",
        kind="elementwise",
        params=(Param(name="low", low=-3.0, high=-0.5), Param(name="high", low=0.5, high=3.0)),
        forward="y = torch.clamp(y, min={p[low]}, max={p[high]})",
    ),
)

REDUCTIONS = (
    Op(
        name="softmax",
        kind="reduction",
        min_features=2,
        output_range="unit",
        forward="y = torch.softmax(y, dim=-1)",
    ),
    Op(
        name="log_softmax",
        kind="reduction",
        min_features=2,
        output_range="nonpos",
        forward="y = torch.log_softmax(y, dim=-1)",
    ),
    Op(
        name="layernorm",
        kind="reduction",
        min_features=2,
        params=(Param(name="eps", choices=(1e-5, 1e-6)),),
        init=(
            "self.w{i} = nn.Parameter((1.0 + 0.5 * torch.randn({f})).to(dt))",
            "self.b{i} = nn.Parameter((0.5 * torch.randn({f})).to(dt))",
        ),
        forward="y = F.layer_norm(y, (y.shape[-1],), self.w{i}.float(), self.b{i}.float(), {p[eps]})",
    ),
    Op(
        name="rmsnorm",
        kind="reduction",
        min_features=2,
        params=(Param(name="eps", choices=(1e-5, 1e-6)),),
        init=("self.w{i} = nn.Parameter((1.0 + 0.5 * torch.randn({f})).to(dt))",),
        forward="y = y * torch.rsqrt(y.pow(2).mean(dim=-1, keepdim=True) + {p[eps]}) * self.w{i}.float()",
    ),
    Op(name="sum_last", kind="reduction", terminal=True, forward="y = y.sum(dim=-1, keepdim=True)"),
    Op(
        name="mean_last",
        kind="reduction",
        terminal=True,
        forward="y = y.mean(dim=-1, keepdim=True)",
    ),
)

MATMUL = (
    # The GEMM reads the activation rounded to the task dtype, as a fused kernel feeding a matrix
    # core would; weights of std 1/sqrt(K) keep the output near unit scale.
    Op(
        name="linear",
        kind="matmul",
        init=("self.w{i} = nn.Parameter((torch.randn({g}, {f}) * {f} ** -0.5).to(dt))",),
        forward="y = F.linear(y.to(x.dtype), self.w{i}).float()",
    ),
)

OPS: dict[str, Op] = {op.name: op for op in ELEMENTWISE + REDUCTIONS + MATMUL}


def can_follow(prev: Op | None, nxt: Op) -> bool:
    """Whether `nxt` may come after `prev` in a chain (degenerate pairs are left out up front;
    verification is still the gate)."""
    if prev is None:
        return True
    if prev.terminal or prev.name == nxt.name:
        return False
    if nxt.needs_signed_input and prev.output_range in ("nonneg", "nonpos", "unit"):
        return False
    # A softmax of rows already normalised is nearly uniform: keep chains that say something.
    return not (prev.kind == "reduction" and nxt.kind == "reduction" and nxt.name != "layernorm")
