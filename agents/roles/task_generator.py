"""task_generator: new verified tasks near existing ones.

Offline it runs the synthetic generator (problems/synthetic/generate.py: mutation, composition,
constraints from our own templates). With a model, each call asks for one task near a source
task, in one mode: the reply is a TaskDraft (task.toml's metadata, ```json) and a KernelBench
reference (```python), read by agents/llm/task_reply.py. It goes through the synthetic generator's
own admission (measure the rooflines, verify the small case: runs, deterministic, finite, not
constant, sensitive to every input, fast enough; WL-hash dedupe against the tasks already in
the output folder and every task the library knows, built-in ones included) in a child process
(agents/roles/task_admission.py), is written the same way, or is rejected with its reason.

Where the calls go: `evolve tasks generate --model M` starts no search run, so there is no
archive run to hold them. Every call is appended to `<out>/llm_calls.jsonl`, one JSON object a
line: the call as agents/llm/client.py's LLMCall (reply text, tokens, cost, latency, error) with the
source task, the mode and the outcome (kept: its folder; rejected: the reason).
"""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from pathlib import Path

from hipevolve.agents.llm.client import LLMCall
from hipevolve.agents.llm.ensemble import Ensemble
from hipevolve.agents.llm.task_reply import TaskCaseDraft, TaskDraft, candidate_of, parse_task_reply
from hipevolve.agents.roles.task_admission import AdmissionWorker
from hipevolve.core.errors import UserError
from hipevolve.core.taskspec import TaskSpec
from hipevolve.problems.synthetic.dedupe import graph_hash
from hipevolve.problems.synthetic.generate import (
    GenerationReport,
    KeptTask,
    ModeCounts,
    Rejection,
    remove_empty_staging,
)
from hipevolve.problems.synthetic.render import Mode
from hipevolve.prompts.render import block, field_lines, render, schema_text

ROLE = "task_generator"
CALL_LOG = "llm_calls.jsonl"
MODE_HINTS: dict[str, str] = {
    "mutate": "Keep its computation and change what a kernel engineer meets in practice: other "
    "sizes or shape regimes, another dtype, a swapped activation or reduction axis.",
    "compose": "Fuse it with a neighbouring operator that real models run right before or "
    "after it (a norm, an activation, a residual add, a projection).",
    "constrain": "Pose it under a constraint that changes the kernel: a memory-bound shape, a "
    "layout (strided, transposed), a dtype, or an arithmetic-intensity regime.",
}


def prompt(source: TaskSpec, mode: str, taken: Sequence[str]) -> str:
    """The request for one task near `source` in `mode`; `taken` are names not to reuse."""
    reference = source.reference.read_text() if source.reference.exists() else ""
    head = render(
        "task_generator",
        task_name=source.name,
        task_description=source.description,
        reference=block(reference),
        schema=reply_text(),
    )
    turn = render(
        "task_generator_turn",
        mode=mode,
        mode_hint=MODE_HINTS[mode],
        taken=", ".join(sorted(taken)) or "(none)",
    )
    return head + turn


def reply_text() -> str:
    """What the model is told about its reply: TaskDraft's docstring and every field."""
    lines = [
        schema_text(TaskDraft, json_reply=False),
        "The ```json object:",
        *field_lines(TaskDraft),
        "Each case:",
        *field_lines(TaskCaseDraft),
        'The tolerance: {"kind": "allclose", "atol": A, "rtol": R} or '
        '{"kind": "rel_rms", "max_rel_rms": E}; NaN never passes.',
    ]
    return "\n".join(lines) + "\n"


def known_hashes(tasks: Sequence[TaskSpec]) -> dict[str, str]:
    """Graph hash -> name of the library's tasks: a model that copies one writes a duplicate."""
    seen: dict[str, str] = {}
    for task in tasks:
        try:
            seen.setdefault(graph_hash(task), task.name)
        except Exception:  # a task the tracer cannot build is no duplicate of anything new
            continue
    return seen


def draft_task(
    call: LLMCall,
    worker: AdmissionWorker,
    seen: dict[str, str],
    name: str,
    mode: Mode,
    source: str,
) -> KeptTask | Rejection:
    """One reply through the synthetic admission, named `name`; what failed, with its reason."""
    if not call.ok:
        return Rejection(name=name, mode=mode, reason=f"model call failed: {call.error}")
    reply = parse_task_reply(call.text)
    if not reply.ok or reply.draft is None:
        return Rejection(name=name, mode=mode, reason=f"reply {reply.error_class}: {reply.message}")
    header = (
        f"# Written by {call.model} for `evolve tasks generate` ({mode} from task "
        f"{source}); prompt {call.prompt_hash[:12]}."
    )
    named = f"{name}_{reply.draft.name}"
    candidate = candidate_of(reply.draft, reply.reference, named, mode, header)
    return worker.admit(candidate, seen)


def generate_with_model(
    n: int,
    seed: int,
    modes: Sequence[Mode],
    sources: Sequence[TaskSpec],
    library: Sequence[TaskSpec],
    out_dir: Path,
    ensemble: Ensemble,
    progress: Callable[[KeptTask | Rejection], None] | None = None,
    timeout_s: float = 60.0,
) -> GenerationReport:
    """Asks the model for `n` tasks (the modes and the sources in turn), admits each reply as
    the synthetic generator admits its own, and returns the same report. Task k is named
    `llm<seed>_<k>_<the model's name>`. Stops early, reporting why, when a budget runs out."""
    modes = list(dict.fromkeys(modes))
    sources = sorted(sources, key=lambda s: s.name)
    if not modes or not sources:
        raise UserError("nothing to generate from: no mode or no source task", "pass --from TASK")
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    report = GenerationReport(
        seed=seed, out_dir=str(out_dir), per_mode={m: ModeCounts() for m in modes}
    )
    taken = {t.name for t in library}
    with AdmissionWorker(out_dir, timeout_s) as worker, (out_dir / CALL_LOG).open("a") as log:
        seen = known_hashes(library) | worker.existing_hashes()
        for k in range(n):
            if ensemble.stop_reason() is not None:
                break
            mode, source = modes[k % len(modes)], sources[k % len(sources)]
            text = prompt(source, mode, sorted(taken))
            call = ensemble.complete(ROLE, [{"role": "user", "content": text}])
            if call.error_class == "budget_exhausted":
                break
            name = f"llm{seed}_{k:03d}"
            outcome = draft_task(call, worker, seen, name, mode, source.name)
            if isinstance(outcome, KeptTask):
                taken.add(outcome.name.removeprefix(f"{name}_"))  # the name the model chose
            log.write(
                json.dumps(
                    {
                        "k": k,
                        "seed": seed,
                        "mode": mode,
                        "source": source.name,
                        "call": call.model_dump(mode="json"),
                        "outcome": {
                            "kept"
                            if isinstance(outcome, KeptTask)
                            else "rejected": outcome.model_dump(mode="json")
                        },
                    }
                )
                + "\n"
            )
            log.flush()
            report.count(mode, outcome)
            if progress:
                progress(outcome)
    remove_empty_staging(out_dir)
    return report
