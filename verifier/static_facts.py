"""Static facts of a native candidate's kernels (registers, LDS, occupancy, load widths,
matrix-core use), cached by source, target and toolchain, for the AMD targets where the AMD
static toolchain compiles them (verifier/build/amd_static.py), else for the cuda backend's own
build (verifier/build/cuda_static.py), so the MAP-Elites grid keeps its axes on an NVIDIA machine.

The cuda backend's build reads its facts as it compiles (BuildResult.facts, from_the_build):
what follows is for a library cached without them, and for the AMD targets.

A source the cache lacks is preprocessed first (verifier/build/preprocessed.py): one that
preprocesses as an analysed one did (a tunable only the other vendor reads) gets its facts
without a compile; the facts compile is as slow as the library's own (4-5 s with nvcc).
"""

from __future__ import annotations

import json
import os
import shutil
import tempfile
from pathlib import Path

from pydantic import BaseModel

from hipevolve.core.config import VerifierSettings
from hipevolve.core.evaluation import StaticFacts
from hipevolve.verifier.build.compile import Compiler, cache_key, trim_log


class StaticResult(BaseModel):
    facts: tuple[StaticFacts, ...] = ()
    error: str = ""  # trimmed compiler log when the source does not compile for a target
    note: str = ""  # the analysis itself failed (a tool, not the candidate)


def static_analysis(
    source: str,
    settings: VerifierSettings,
    cached_only: bool = False,
    compiler: Compiler | None = None,
) -> StaticResult | None:
    """Static facts, cached by source, target and toolchain: gfx facts for every configured
    target where the AMD toolchain compiles one, else, for the cuda backend's `compiler`, the
    facts of its CUDA build (verifier/build/cuda_static.py; their target is the sm_XX), so
    the grid keeps its axes on an NVIDIA machine. None of either: no facts.
    cached_only: None unless every target's facts are in the cache (nothing is compiled)."""
    from hipevolve.verifier.build.amd_static import find_toolchain

    tc = find_toolchain()
    if tc is not None and any(t in tc.targets for t in settings.amd_targets):
        return _amd_analysis(source, settings, cached_only, tc)
    if compiler is not None and compiler.name == "cuda":
        return _cuda_analysis(source, settings, cached_only, compiler)
    return StaticResult()


def from_the_build(settings: VerifierSettings, compiler: Compiler | None) -> bool:
    """Whether static_analysis gives the facts of the cuda backend's own build, which that
    build reads as it compiles (BuildResult.facts): no AMD toolchain for the targets."""
    from hipevolve.verifier.build.amd_static import find_toolchain

    if compiler is None or compiler.name != "cuda":
        return False
    tc = find_toolchain()
    return tc is None or not any(t in tc.targets for t in settings.amd_targets)


def _cached_facts(path: Path) -> list[StaticFacts] | None:
    if not path.exists():
        return None
    return [StaticFacts.model_validate(f) for f in json.loads(path.read_text())]


def _store_facts(path: Path, facts: list[StaticFacts]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    # a temp name of its own: two threads may analyse the same source at once
    fd, tmp = tempfile.mkstemp(dir=path.parent, suffix=".tmp")
    with os.fdopen(fd, "w") as out:
        out.write(json.dumps([fact.model_dump() for fact in facts]))
    os.replace(tmp, path)


def _alias(settings: VerifierSettings, same: str | None) -> Path | None:
    """Where the facts of every source with the preprocessed digest `same` are kept."""
    return settings.cache_dir / "static" / f"pp-{same}.json" if same else None


def _amd_analysis(
    source: str, settings: VerifierSettings, cached_only: bool, tc
) -> StaticResult | None:  # noqa: ANN001
    from hipevolve.verifier.build.amd_static import AmdCompileError, analyze, preprocessed_key

    facts: list[StaticFacts] = []
    for target in settings.amd_targets:
        if target not in tc.targets:
            continue
        key = cache_key(source, (target,), tc.version)
        cached = settings.cache_dir / "static" / f"{key}.json"
        found = _cached_facts(cached)
        if found is not None:
            facts += found
            continue
        if cached_only:
            return None
        workdir = Path(tempfile.mkdtemp(prefix="amd-"))
        try:
            same = preprocessed_key(source, target, tc, workdir, settings.compile_timeout_s)
            alias = _alias(settings, same)
            found = _cached_facts(alias) if alias else None
            if found is None:
                found = analyze(
                    source, target, workdir, timeout_s=settings.compile_timeout_s, toolchain=tc
                )
                if alias:
                    _store_facts(alias, found)
        except AmdCompileError as e:
            return StaticResult(error=f"{target}: " + trim_log(e.log, workdir))
        except RuntimeError as e:  # our disassembler failed: not the candidate's fault
            return StaticResult(facts=tuple(facts), note=f"static analysis incomplete: {e}")
        finally:
            shutil.rmtree(workdir, ignore_errors=True)
        _store_facts(cached, found)
        facts += found
    return StaticResult(facts=tuple(facts))


def _cuda_analysis(
    source: str, settings: VerifierSettings, cached_only: bool, compiler: Compiler
) -> StaticResult | None:
    """The CUDA build's facts. A failed facts compile is a note, never a verdict: the library's
    own build says whether the candidate compiles."""
    from hipevolve.verifier.build.cuda_static import (
        CudaAnalysisError,
        analyze,
        facts_command,
        preprocessed_key,
    )

    try:
        argv = facts_command(compiler.argv)
    except ValueError as e:
        return StaticResult(note=f"no CUDA facts: {e}")
    cached = settings.cache_dir / "static" / f"{cache_key(source, argv, compiler.toolchain)}.json"
    found = _cached_facts(cached)
    if found is not None:
        return StaticResult(facts=tuple(found))
    if cached_only:
        return None
    workdir = Path(tempfile.mkdtemp(prefix="cuda-facts-"))
    timeout_s = settings.compile_timeout_s
    try:
        same = preprocessed_key(source, compiler.argv, compiler.toolchain, workdir, timeout_s)
        alias = _alias(settings, same)
        found = _cached_facts(alias) if alias else None
        if found is None:
            found = analyze(source, compiler.argv, workdir, timeout_s=timeout_s)
            if alias:
                _store_facts(alias, found)
    except CudaAnalysisError as e:
        return StaticResult(note=f"no CUDA facts: {e}")
    finally:
        shutil.rmtree(workdir, ignore_errors=True)
    _store_facts(cached, found)
    return StaticResult(facts=tuple(found))
