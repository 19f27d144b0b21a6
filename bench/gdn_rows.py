"""The rows bench/gdn_vs_fla.py compares on each case: FLA's chunk and recurrent kernels (where
FLA is installed), the shipped seeds, and a candidate folder, each built and bound to its own
kernel library."""

from __future__ import annotations

import importlib.util
import os
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType
from typing import Any

import torch
from graph_timer import Call

from hipevolve.core.reference import load_module
from hipevolve.core.taskspec import TaskSpec

PREFILL, DECODE = "gated_delta_net", "gated_delta_net_decode"
NO_CANDIDATE = "not run: no evolve run yet"

@dataclass
class Row:
    name: str
    call: Call | None
    not_run: str = ""  # why call is None
    graph_skip: str = ""  # why graph mode is not tried


def packed(rest: list[Any]) -> torch.Tensor | None:
    """The case's cu_seqlens (its seventh input, packed sequences), or None."""
    return rest[0] if rest else None


def fla_calls() -> dict[str, Call] | str:
    """FLA's two entry points as row calls, or why FLA cannot be used."""
    os.environ.setdefault("FLA_DISABLE_BACKEND_DISPATCH", "1")  # FLA's Triton, not FlashQLA
    try:
        from fla.ops.gated_delta_rule import (
            chunk_gated_delta_rule,
            fused_recurrent_gated_delta_rule,
        )
    except Exception as e:  # any import failure means: no FLA row
        return f"not run: FLA not importable ({type(e).__name__}: {e})"

    def recurrent(args: list[Any]) -> Any:
        q, k, v, g, beta, h0, *cu = args
        return fused_recurrent_gated_delta_rule(
            q, k, v, g=g, beta=beta, scale=q.shape[-1] ** -0.5, initial_state=h0,
            output_final_state=True, use_qk_l2norm_in_kernel=False, cu_seqlens=packed(cu),
        )  # fmt: skip

    return {"FLA chunk": fla_signature(chunk_gated_delta_rule), "FLA fused_recurrent": recurrent}


def fla_signature(fn: Any) -> Call:  # noqa: ANN401
    """A row call of a chunk_gated_delta_rule with FLA's signature (FLA's own, FlashQLA's):
    scale K^-0.5, from the initial state, the final state returned, q and k already
    normalised, cu_seqlens on packed cases."""

    def call(args: list[Any]) -> Any:
        q, k, v, g, beta, h0, *cu = args
        return fn(
            q, k, v, g, beta, scale=q.shape[-1] ** -0.5, initial_state=h0,
            output_final_state=True, use_qk_l2norm_in_kernel=False, cu_seqlens=packed(cu),
        )  # fmt: skip

    return call


def anchor_calls() -> dict[str, Call | str]:
    """The 2026 prefill anchors as row calls, each or why it cannot run here: FlashQLA
    (QwenLM/FlashQLA, TileLang; FLA's own signature) and FlashInfer's Hopper/Blackwell GDN
    prefill (varlen only: tokens packed as [B*T, heads, D] with cu_seqlens, its states [N, HV,
    V, K], the transpose of ours, and its gate the decay itself, alpha = exp(g): its kernels
    take log2(alpha + 1e-10), flashinfer/gdn_kernels/delta_rule_dsl/alpha.py; our g, the log
    of the decay, passed as it is would be a wrong gate). The exp is timed with the call."""
    calls: dict[str, Call | str] = {}
    try:
        from flash_qla import chunk_gated_delta_rule as qla
    except Exception as e:  # ImportError, or its refusal of GPUs other than sm90/sm100
        calls["FlashQLA"] = f"not run: FlashQLA not importable ({type(e).__name__}: {e})"[:300]
    else:
        calls["FlashQLA"] = fla_signature(qla)
    try:
        from flashinfer.gdn_prefill import chunk_gated_delta_rule as fi
    except Exception as e:
        calls["FlashInfer"] = f"not run: FlashInfer not importable ({type(e).__name__}: {e})"[:300]
    else:

        def flashinfer(args: list[Any]) -> Any:
            q, k, v, g, beta, h0, *given = args
            b, t = q.shape[:2]
            cu = packed(given)
            if cu is None:  # B sequences of T tokens
                cu = torch.arange(0, b * t + 1, t, dtype=torch.int64, device=q.device)
            o, state = fi(
                q.flatten(0, 1), k.flatten(0, 1), v.flatten(0, 1), g.flatten(0, 1).exp(),
                beta.flatten(0, 1), scale=q.shape[-1] ** -0.5, cu_seqlens=cu,
                initial_state=h0.transpose(-1, -2).contiguous(), output_final_state=True,
            )  # fmt: skip
            return o.unflatten(0, (b, t)), state.transpose(-1, -2)

        calls["FlashInfer"] = flashinfer
    return calls


def import_model(folder: Path, tag: str) -> ModuleType:
    spec = importlib.util.spec_from_file_location(f"gdn_bench_{tag}", folder / "model.py")
    if spec is None or spec.loader is None:
        raise ImportError(f"cannot import {folder / 'model.py'}")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def native_models(folders: dict[str, Path], cache: Path) -> dict[str, torch.nn.Module | str]:
    """name -> ModelNew of each native candidate folder (built in parallel), or why not.

    model.py reaches its launchers through `from hipevolve.runtime import kernels`, one shared
    object that holds one library at a time; each model module gets its own bound Kernels
    instead, so the seeds and the candidate live side by side.
    """
    from hipevolve.runtime import Kernels
    from hipevolve.verifier.build.backends import compiler_for, gpu_backend
    from hipevolve.verifier.build.compile import build_many

    try:
        compiler = compiler_for(gpu_backend() or "cuda")
    except Exception as e:  # no compiler: every native row says why
        return {name: f"not run: no compiler ({e})" for name in folders}
    sources = {}
    for name, folder in folders.items():
        try:
            sources[name] = (folder / "kernel.hip").read_text()
        except OSError as e:
            sources[name] = e
    ready = {n: s for n, s in sources.items() if isinstance(s, str)}
    built = dict(zip(ready, build_many(list(ready.values()), compiler, cache), strict=True))
    models: dict[str, torch.nn.Module | str] = {}
    for i, (name, folder) in enumerate(folders.items()):
        if name not in built:
            models[name] = f"not run: {sources[name]}"
            continue
        result = built[name]
        if not result.ok:
            first = (result.log.strip().splitlines() or ["compiler failed"])[0]
            models[name] = f"not run: build failed ({first})"
            continue
        try:
            module = import_model(folder, str(i))
            if not isinstance(getattr(module, "kernels", None), Kernels):
                raise ImportError("model.py does not import kernels from hipevolve.runtime")
            module.kernels = Kernels()
            module.kernels.bind(result.library, sources[name])
            models[name] = module.ModelNew()
        except Exception as e:  # a broken candidate is a row note, not a crash
            models[name] = f"not run: {type(e).__name__}: {e}"
    return models


def rows_for(task: TaskSpec, fla: dict[str, Call] | str, natives: dict, candidate: str,
             anchors: dict[str, Call | str] | None = None,
             variants: Sequence[str] = ()) -> list:  # fmt: skip
    """The task's rows: FLA's, the prefill anchors (`anchor_calls`), the reference, the seed,
    the candidate and the seed's tunable variants (row names, keys of `natives` after the task)."""
    reference = load_module(task.reference).Model().cuda().eval()
    seed = f"seed {task.seeds[0].name}"
    fla_names = (
        ["FLA chunk", "FLA fused_recurrent"] if task.name == PREFILL else ["FLA fused_recurrent"]
    )
    rows = [
        Row(n, None, not_run=fla) if isinstance(fla, str) else Row(n, fla[n]) for n in fla_names
    ]
    if task.name == PREFILL:
        for name, call in (anchors or {}).items():
            rows.append(Row(name, None, not_run=call) if isinstance(call, str) else Row(name, call))
    rows.append(Row("PyTorch reference", lambda a: reference(*a), graph_skip="skipped: slow"))
    for name in (seed, candidate, *variants):
        model = natives.get(f"{task.name}:{name}", NO_CANDIDATE)
        if isinstance(model, str):
            rows.append(Row(name, None, not_run=model))
        else:
            rows.append(Row(name, lambda a, m=model: m(*a)))
    return rows
