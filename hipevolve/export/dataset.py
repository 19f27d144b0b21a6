"""`evolve export --dataset DIR`: every evaluation of some runs as JSONL, for fine-tuning and RL.

DIR/evaluations.jsonl holds one DatasetRecord per line: a candidate's sources, its lineage,
and the evaluation that scores it (status, per-case speedups and errors, static AMD facts,
compiler log, mismatch summary). DIR/schema.json is DatasetRecord's JSON schema and
DIR/DATASET.md documents the fields and how to use them. Records are in run order, then in the
order the evaluations were recorded. DIR/notes.jsonl holds the runs' scratchpad notes (what each
run had tried and learned every few generations, as its agents were shown it), one per line.
"""

from __future__ import annotations

import json
import shutil
from collections import Counter
from collections.abc import Iterable, Iterator, Sequence
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, Field

from hipevolve.archive.store import Archive
from hipevolve.core.base import Frozen
from hipevolve.core.baseline import Speedup
from hipevolve.core.errors import UserError
from hipevolve.core.evaluation import Evaluation, StaticFacts
from hipevolve.export.folders import check_output, publish, render, staging_folder
from hipevolve.export.runs import describe_runs, find_run, open_archive, run_baseline

SCHEMA_VERSION = 1
RECORDS_FILE = "evaluations.jsonl"
NOTES_FILE = "notes.jsonl"
_DESCENT = ("mutation", "crossover", "migration")  # edges that pass code on (lineage.py)


class CaseRecord(Frozen):
    """One case of the task as the verifier checked and timed it."""

    case: str = Field(description="the task's case name")
    correct: bool = Field(description="outputs matched the reference on every seed")
    time_us: float | None = Field(description="the candidate's median time, microseconds")
    ref_time_us: float | None = Field(description="the reference's median time, same session")
    speedup: float | None = Field(description="ref_time_us / time_us; null when not timed")
    cv: float | None = Field(description="coefficient of variation of the candidate's trials")
    max_abs_err: float | None = Field(description="largest absolute error against the reference")
    rel_rms_err: float | None = Field(
        description="norm(out - ref) / norm(ref), over the whole output"
    )
    roofline_fraction: float | None = Field(
        description="memory-bound lower limit over the measured time (1.0 = at the roofline)"
    )
    message: str = Field(description="what went wrong in this case, if anything")


class ParentRef(Frozen):
    candidate_id: int = Field(description="the parent's candidate_id")
    kind: Literal["mutation", "crossover", "inspiration", "migration"] = Field(
        description="mutation and crossover pass code on; inspiration was only shown to the model"
    )


class DatasetRecord(Frozen):
    """One evaluation of one candidate: what was written, by whom, from what, and how it scored."""

    schema_version: Literal[1] = Field(default=1, description="this schema's version")
    run: int = Field(description="the archive's run id")
    task: str = Field(description="the task's name (hipevolve's task library)")
    candidate_id: int = Field(description="the candidate's id in the archive, unique per archive")
    evaluation_id: int = Field(description="the evaluation's id in the archive")
    cached: bool = Field(
        description="the evaluation was made for an identical candidate of another run (same "
        "source, settings and toolchain) and reused, not measured again"
    )
    format: Literal["native", "kernelbench"] = Field(
        description="native: hip_source is kernel.hip, python_source its model.py; kernelbench: "
        "one Python file holding the C++ (hip_source is null)"
    )
    hip_source: str | None = Field(description="kernel.hip")
    python_source: str = Field(description="model.py (native) or the KernelBench file")
    source_hash: str = Field(description="sha256 of the sources, comments and spacing normalised")
    parent: int | None = Field(
        description="the fittest code-carrying parent's candidate_id (the one a diff is taken "
        "against); null for seeds and first translations"
    )
    parents: list[ParentRef] = Field(description="every lineage edge into this candidate")
    agent: str = Field(description="who wrote it: seed, offline-mutator, mutator, repairer, ...")
    model: str = Field(description="the LLM (provider/name), empty for offline policies")
    prompt_hash: str = Field(description="hash of the prompt that produced it, empty if none")
    idea: str = Field(default="", description="the optimisation idea an agent implemented")
    diagnosis: str = Field(default="", description="the bottleneck diagnosis the idea acted on")
    reply: str = Field(default="", description="the model's reply that wrote it (trimmed)")
    island: int = Field(description="the island it was proposed on")
    generation: int = Field(description="the generation it was proposed in (0: seeds)")
    status: str = Field(
        description="ok, parse_error, rejected, compile_error, incorrect, runtime_error, timeout, "
        "hacked, suspect, compiled"
    )
    correct: bool = Field(description="status is ok: compiled, matched the reference, timed")
    fitness: float = Field(
        description="geometric-mean speedup over the timed cases; 0 unless status is ok"
    )
    backend: str = Field(description="where it was verified: cuda, rocm, static")
    message: str = Field(description="one line: why this status")
    flags: list[str] = Field(description="static and dynamic check findings")
    compile_log: str = Field(description="trimmed compiler output, in kernel.hip's line numbers")
    mismatch: str = Field(description="trimmed summary of the first wrong outputs")
    cases: list[CaseRecord] = Field(description="per-case results, the task's case order")
    static: list[StaticFacts] = Field(
        description="resource and ISA facts per kernel, from the AMD static compile (target "
        "gfx...) or, without that toolchain, the CUDA build (target sm_...): never mix the two"
    )
    baselines: list[Speedup] = Field(
        default_factory=list,
        description="speedups over the run's baselines (the reference and "
        "each strong baseline the task names, timed once at the run's start), with their "
        "uncertainty; empty unless status is ok and the run timed a baseline",
    )
    evaluated: str = Field(description="when the evaluation was recorded (ISO 8601, UTC)")


class DatasetExport(Frozen):
    out: Path
    records: int
    runs: tuple[int, ...]
    statuses: dict[str, int]


def _cases(evaluation: Evaluation) -> list[CaseRecord]:
    return [
        CaseRecord(
            case=c.case,
            correct=c.correct,
            time_us=c.time_us,
            ref_time_us=c.ref_time_us,
            speedup=c.speedup,
            cv=c.cv,
            max_abs_err=c.max_abs_err,
            rel_rms_err=c.rel_rms_err,
            roofline_fraction=c.roofline_fraction,
            message=c.message,
        )
        for c in evaluation.cases
    ]


def _lineage(archive: Archive, run: int) -> dict[int, list[tuple[int, str, float]]]:
    """child -> [(parent, kind, parent fitness)] for the run's candidates."""
    edges: dict[int, list[tuple[int, str, float]]] = {}
    for edge in archive.lineage_edges(run):
        edges.setdefault(edge.child, []).append((edge.parent, edge.kind, edge.parent_fitness))
    return edges


def records(archive: Archive, run: int) -> Iterator[DatasetRecord]:
    """The run's scored candidates as records, in the order their evaluations were recorded."""
    task = find_run(archive, run).task
    edges = _lineage(archive, run)
    baseline = run_baseline(archive, run)
    for found in archive.evaluated_records(run):
        c, evaluation = found.candidate, found.evaluation
        into = edges.get(c.id, [])
        descent = [(p, f) for p, kind, f in into if kind in _DESCENT]
        parent = max(descent, key=lambda pf: (pf[1], -pf[0]))[0] if descent else None
        yield DatasetRecord(
            run=run,
            task=task,
            candidate_id=c.id,
            evaluation_id=found.evaluation_id,
            cached=found.evaluated_for != c.id,
            format=c.candidate.format,
            hip_source=c.candidate.hip_source,
            python_source=c.candidate.python_source,
            source_hash=c.source_hash,
            parent=parent,
            parents=[ParentRef(candidate_id=p, kind=kind) for p, kind, _ in into],
            agent=c.agent,
            model=c.model,
            prompt_hash=c.prompt_hash,
            idea=c.attempt.idea,
            diagnosis=c.attempt.diagnosis,
            reply=c.attempt.reply,
            island=c.island,
            generation=c.generation,
            status=evaluation.status.value,
            correct=evaluation.ok,
            fitness=evaluation.fitness,
            backend=evaluation.backend,
            message=evaluation.message,
            flags=list(evaluation.flags),
            compile_log=evaluation.compile_log,
            mismatch=evaluation.mismatch,
            cases=_cases(evaluation),
            static=list(evaluation.static),
            evaluated=found.evaluated,
            baselines=baseline.speedups(evaluation.cases) if baseline and evaluation.ok else [],
        )


def select_runs(archive: Archive, runs: Sequence[int], task: str | None) -> list[int]:
    """The runs asked for (each checked), or every run of the archive (of `task`, if given)."""
    if runs:
        for run in runs:
            info = find_run(archive, run)
            if task is not None and info.task != task:
                raise UserError(
                    f"run {run} searched task {info.task}, not {task}",
                    "leave out --task, or pass runs of that task",
                )
        return sorted(set(runs))
    chosen = [r.id for r in archive.runs() if task is None or r.task == task]
    if not chosen:
        raise UserError(
            f"no run{'' if task is None else ' of task ' + task} in {archive.path}; runs: "
            f"{describe_runs(archive)}",
            "run a search first, or pick another --task",
        )
    return chosen


def _field_rows(model: type[BaseModel]) -> Iterable[str]:
    properties = model.model_json_schema()["properties"]
    for name, field in model.model_fields.items():
        kind = _type_name(properties[name])
        yield f"| `{name}` | {kind} | {field.description or ''} |"


def _type_name(schema: dict[str, Any]) -> str:
    if "anyOf" in schema:
        return " or ".join(_type_name(s) for s in schema["anyOf"])
    if "$ref" in schema:
        return "object (" + schema["$ref"].rsplit("/", 1)[-1] + ")"
    if schema.get("type") == "array":
        return "array of " + _type_name(schema.get("items", {}))
    if "const" in schema:
        return json.dumps(schema["const"])
    if "enum" in schema:
        return "one of " + ", ".join(json.dumps(v) for v in schema["enum"])
    return str(schema.get("type", "any"))


def dataset_doc(statuses: Counter[str], runs: Sequence[int], tasks: Sequence[str]) -> str:
    header = "| field | type | meaning |\n|---|---|---|\n"
    summary = ", ".join(f"{n} {s}" for s, n in statuses.most_common())
    return render(
        "DATASET.md.tmpl",
        {
            "RECORDS": str(sum(statuses.values())),
            "SUMMARY": summary,
            "RUNS": ", ".join(str(r) for r in runs),
            "TASKS": ", ".join(sorted(set(tasks))),
            "RECORD_FIELDS": header + "\n".join(_field_rows(DatasetRecord)),
            "CASE_FIELDS": header + "\n".join(_field_rows(CaseRecord)),
            "STATIC_FIELDS": header + "\n".join(_field_rows(StaticFacts)),
            "PARENT_FIELDS": header + "\n".join(_field_rows(ParentRef)),
        },
    )


def export_dataset(
    archive_path: Path,
    out: Path,
    *,
    runs: Sequence[int] = (),
    task: str | None = None,
    force: bool = False,
) -> DatasetExport:
    """Writes evaluations.jsonl, notes.jsonl, schema.json and DATASET.md for the runs into
    `out`."""
    out = Path(out)
    check_output(out, force, "--dataset")
    with open_archive(archive_path) as archive:
        chosen = select_runs(archive, runs, task)
        staged = staging_folder(out)
        try:
            statuses: Counter[str] = Counter()
            tasks: list[str] = []
            with (staged / RECORDS_FILE).open("w", encoding="utf-8") as f:
                for run in chosen:
                    for record in records(archive, run):
                        f.write(record.model_dump_json() + "\n")
                        statuses[record.status] += 1
                        tasks.append(record.task)
            if not statuses:
                raise UserError(
                    f"run{'s' if len(chosen) > 1 else ''} {', '.join(map(str, chosen))} "
                    "recorded no evaluation; nothing was written",
                    "let the search evaluate something first",
                )
            with (staged / NOTES_FILE).open("w", encoding="utf-8") as f:
                for run in chosen:
                    for note in archive.notes(run):
                        f.write(note.model_dump_json() + "\n")
            schema = DatasetRecord.model_json_schema()
            (staged / "schema.json").write_text(json.dumps(schema, indent=2) + "\n")
            (staged / "DATASET.md").write_text(dataset_doc(statuses, chosen, tasks))
            publish(staged, out, "dataset")
        except BaseException:
            shutil.rmtree(staged, ignore_errors=True)
            raise
    return DatasetExport(
        out=out, records=sum(statuses.values()), runs=tuple(chosen), statuses=dict(statuses)
    )
