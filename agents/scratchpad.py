"""The run's scratchpad: every few generations, a short note of what was tried and learned.

The attempts a prompt shows (briefing.tried_text) are the latest few near one parent; the note
is the run's long memory: which ideas beat their parent and on which cases, which did not, and
which failed and why, across every island. It is built from the archive alone (the candidates,
their ideas, lineage and evaluations), so the same archive gives the same note; with
agents.scratchpad_writer = "model" the profiler_reader's model condenses it instead
(prompts/scratchpad.md), and the archive's note stands when that call fails. Either way it is
cut to agents.scratchpad_tokens, stored in the archive (notes table, one per generation) and
shown to the optimizer and the mutator under "Run notes".
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass
from typing import TYPE_CHECKING

from hipevolve.agents.llm.tokens import count_tokens
from hipevolve.archive.records import EvaluatedRecord
from hipevolve.archive.store import Archive
from hipevolve.core.evaluation import Evaluation

if TYPE_CHECKING:
    from hipevolve.agents.context import AgentContext

IDEA_CHARS = 160  # of an idea, in a note line
WRITER_ROLE = "profiler_reader"  # whose model writes the note when the writer is "model"
# Lines a section keeps before the token bound cuts further.
SHOWN = {"improved": 8, "flat": 5, "failed": 4}


@dataclass(frozen=True)
class _Entry:
    record: EvaluatedRecord
    parent: EvaluatedRecord | None  # the fittest code parent, if it was evaluated

    @property
    def fitness(self) -> float:
        return self.record.candidate.fitness or 0.0

    @property
    def parent_fitness(self) -> float | None:
        return (self.parent.candidate.fitness or 0.0) if self.parent else None


def build_note(archive: Archive, run: int, generation: int, max_tokens: int) -> str:
    """The note after the run's evaluations so far, at most `max_tokens` tokens; "" when no
    child has been evaluated yet."""
    records = {r.candidate.id: r for r in archive.evaluated_records(run)}
    parents: dict[int, list[int]] = defaultdict(list)
    for edge in archive.lineage_edges(run):
        if edge.kind in ("mutation", "crossover"):
            parents[edge.child].append(edge.parent)
    entries = []
    for cid, record in records.items():
        if record.candidate.generation == 0:
            continue
        known = [records[p] for p in parents.get(cid, ()) if p in records]
        best = max(known, key=lambda r: r.candidate.fitness or 0.0) if known else None
        entries.append(_Entry(record, best))
    if not entries:
        return ""
    ok = [r for r in records.values() if r.evaluation.status.value == "ok"]
    head = [f"After generation {generation}: {len(records)} candidates evaluated, {len(ok)} "
            f"correct."]  # fmt: skip
    if ok:
        top = max(ok, key=lambda r: (r.candidate.fitness or 0.0, -r.candidate.id))
        head[0] += (f" Best fitness {top.candidate.fitness or 0.0:.3f} (candidate "
                    f"{top.candidate.id}, generation {top.candidate.generation}).")  # fmt: skip
    sections = _sections(entries)
    return _fit(head, sections, max_tokens)


def _sections(entries: list[_Entry]) -> list[tuple[str, list[str]]]:
    improved = [e for e in entries if e.record.evaluation.status.value == "ok"
                and e.parent_fitness is not None and e.fitness > e.parent_fitness]  # fmt: skip
    better = {e.record.candidate.id for e in improved}
    flat = [e for e in entries
            if e.record.evaluation.status.value == "ok" and e.record.candidate.id not in better]  # fmt: skip
    failed: dict[str, list[_Entry]] = defaultdict(list)
    for e in entries:
        if e.record.evaluation.status.value != "ok":
            failed[e.record.evaluation.status.value].append(e)
    improved.sort(key=lambda e: (-(e.fitness / (e.parent_fitness or 1.0)), e.record.candidate.id))
    flat.sort(key=lambda e: -e.record.candidate.id)
    out = []
    if improved:
        out.append((f"Beat their parent ({len(improved)}, largest gain first):",
                    [_improved_line(e) for e in improved[: SHOWN["improved"]]]))  # fmt: skip
    if flat:
        out.append((f"Correct but not faster than their parent ({len(flat)}, newest first):",
                    [_flat_line(e) for e in flat[: SHOWN["flat"]]]))  # fmt: skip
    if failed:
        groups = sorted(failed.items(), key=lambda kv: (-len(kv[1]), kv[0]))
        out.append((f"Failed ({sum(len(v) for v in failed.values())}):",
                    [_failed_line(status, group) for status, group in groups[: SHOWN["failed"]]]))  # fmt: skip
    return out


def _who(e: _Entry) -> str:
    c = e.record.candidate
    author = c.agent or "offline"
    return f"candidate {c.id} (generation {c.generation}, {author}{', ' + c.model if c.model else ''})"


def _idea(e: _Entry) -> str:
    idea = " ".join(e.record.candidate.attempt.idea.split())
    if not idea:
        return "(no idea recorded: a tunable or catalogue move)"
    return idea if len(idea) <= IDEA_CHARS else idea[: IDEA_CHARS - 3] + "..."


def _improved_line(e: _Entry) -> str:
    before = e.parent_fitness or 0.0
    gain = f" (+{100 * (e.fitness / before - 1):.1f}%)" if before else ""
    line = f"- {_who(e)}: {_idea(e)} -> fitness {e.fitness:.3f} from {before:.3f}{gain}"
    faster, slower = _case_moves(e.record.evaluation, e.parent.evaluation if e.parent else None)
    if faster:
        line += f"; faster on {faster}"
    if slower:
        line += f"; slower on {slower}"
    return line


def _flat_line(e: _Entry) -> str:
    before = e.parent_fitness
    against = f" against its parent's {before:.3f}" if before is not None else ""
    return f"- {_who(e)}: {_idea(e)} -> fitness {e.fitness:.3f}{against}"


def _failed_line(status: str, group: list[_Entry]) -> str:
    newest = max(group, key=lambda e: e.record.candidate.id)
    lines = (newest.record.evaluation.message or status).strip().splitlines()
    why = lines[0][:160] if lines else status
    return f"- {status} x{len(group)}; newest: {_who(newest)}: {_idea(newest)} -> {why}"


def _case_moves(child: Evaluation, parent: Evaluation | None) -> tuple[str, str]:
    """The cases the child timed faster (and slower) than its parent, by more than 1%."""
    if parent is None:
        return "", ""
    before = {c.case: c.speedup for c in parent.cases if c.speedup}
    faster, slower = [], []
    for c in child.cases:
        old, new = before.get(c.case), c.speedup
        if old and new and abs(new / old - 1) > 0.01:
            (faster if new > old else slower).append(f"{c.case} {old:.2f}x->{new:.2f}x")
    return ", ".join(faster[:4]), ", ".join(slower[:3])


def _fit(head: list[str], sections: list[tuple[str, list[str]]], max_tokens: int) -> str:
    """The note within `max_tokens`: lines go from the end of a section, the flat ones first,
    then the rarer failures, then the smaller gains; last, the text itself is cut."""
    def text() -> str:
        parts = list(head)
        for title, lines in sections:
            if lines:
                parts += ["", title, *lines]
        return "\n".join(parts)

    order = {"Correct": 0, "Failed": 1, "Beat": 2}
    while count_tokens(text()) > max_tokens:
        live = [s for s in sections if s[1]]
        if not live:
            break
        live.sort(key=lambda s: order.get(s[0].split()[0], 3))
        live[0][1].pop()
    note = text()
    while count_tokens(note) > max_tokens and note:
        note = note[: int(len(note) * 0.9)].rstrip()
    return note


def notes(ctx: AgentContext) -> str:
    """The "Run notes" of a prompt built with `ctx` (no workshop: `evolve prompts show`)."""
    workshop = ctx.workshop
    if workshop is None:
        return note_text(None, None, ctx.limits.scratchpad_every)
    return note_text(workshop.archive, workshop.run, ctx.limits.scratchpad_every)


def note_text(archive: Archive | None, run: int | None, every: int) -> str:
    """What a prompt shows under "Run notes": the run's newest note, or why there is none."""
    note = archive.latest_note(run) if archive is not None and run is not None else None
    if note is None:
        when = f"every {every} generations" if every else "never (agents.scratchpad_every = 0)"
        return f"(none yet: the run writes its notes {when})"
    return f"(written after generation {note.generation})\n{note.text}"


def due(generation: int, every: int) -> bool:
    """Whether a note is written as `generation` starts."""
    return every > 0 and generation > 0 and generation % every == 0


def write_note(ctx: AgentContext) -> str | None:
    """Writes the run's note as the workshop's generation starts, when one is due and not yet
    written (a resume never writes it twice); returns what was stored, or None."""
    workshop, limits = ctx.workshop, ctx.limits
    generation = workshop.generation
    if not due(generation, limits.scratchpad_every):
        return None
    latest = workshop.archive.latest_note(workshop.run)
    if latest is not None and latest.generation >= generation:
        return None
    facts = build_note(workshop.archive, workshop.run, generation, limits.scratchpad_tokens)
    if not facts:
        return None
    text, author = facts, ""
    if limits.scratchpad_writer == "model" and ctx.uses_model(WRITER_ROLE):
        written = _model_note(ctx, facts)
        if written is not None:
            text, author = written
    if not workshop.archive.add_note(workshop.run, generation, text, author):
        return None
    return text


def _model_note(ctx: AgentContext, facts: str) -> tuple[str, str] | None:
    """The profiler_reader's model's condensed note, cut to the bound, and that model; None
    when the call fails or the reply is empty."""
    from hipevolve.prompts.render import render

    bound = ctx.limits.scratchpad_tokens
    prompt = render("scratchpad", task_name=ctx.task.name, words=str(int(bound * 0.6)),
                    facts=facts)  # fmt: skip
    call = ctx.ask(WRITER_ROLE, prompt)
    text = call.text.strip() if call.ok else ""
    if not text:
        return None
    while count_tokens(text) > bound:
        text = text[: int(len(text) * 0.9)].rstrip()
    return (text, call.model) if text else None
