"""The run's scratchpad: every few generations, a short note of what was tried and learned.

The attempts a prompt shows (briefing.tried_text) are the latest few near one parent; the note
is the run's long memory: which ideas beat their parent and on which cases, which did not, and
which failed and why, across every island. It is built from the archive alone (one lean pass over
the candidates, their ideas and lineage, then the evaluations of the few lines shown), so the
same archive gives the same note; with
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
from hipevolve.archive.records import Attempted
from hipevolve.archive.store import Archive
from hipevolve.core.evaluation import Evaluation
from hipevolve.evolution.offline.moves import described

if TYPE_CHECKING:
    from hipevolve.agents.context import AgentContext

IDEA_CHARS = 160  # of an idea, in a note line
WRITER_ROLE = "profiler_reader"  # whose model writes the note when the writer is "model"
# Lines a section keeps before the token bound cuts further.
SHOWN = {"improved": 8, "flat": 5, "failed": 4}


@dataclass(frozen=True)
class _Entry:
    child: Attempted
    parent: Attempted | None  # its fittest evaluated code parent

    @property
    def fitness(self) -> float:
        return self.child.fitness

    @property
    def parent_fitness(self) -> float | None:
        return self.parent.fitness if self.parent else None


def build_note(archive: Archive, run: int, generation: int, max_tokens: int) -> str:
    """The note after the run's evaluations so far, at most `max_tokens` tokens; "" when no
    child has been evaluated yet."""
    rows = {a.candidate_id: a for a in archive.attempted(run)}
    entries = [
        _Entry(a, rows.get(a.parent_id) if a.parent_id is not None else None)
        for a in rows.values()
        if a.generation > 0
    ]
    if not entries:
        return ""
    ok = [a for a in rows.values() if a.status == "ok"]
    head = [f"After generation {generation}: {len(rows)} candidates evaluated, {len(ok)} correct."]
    if ok:
        top = max(ok, key=lambda a: (a.fitness, -a.candidate_id))
        head[0] += (
            f" Best fitness {top.fitness:.3f} (candidate {top.candidate_id}, "
            f"generation {top.generation})."
        )
    return _fit(head, _sections(archive, entries), max_tokens)


def _sections(archive: Archive, entries: list[_Entry]) -> list[tuple[str, list[str]]]:
    improved = [
        e
        for e in entries
        if e.child.status == "ok" and e.parent_fitness is not None and e.fitness > e.parent_fitness
    ]
    better = {e.child.candidate_id for e in improved}
    flat = [e for e in entries if e.child.status == "ok" and e.child.candidate_id not in better]
    failed: dict[str, list[_Entry]] = defaultdict(list)
    for e in entries:
        if e.child.status != "ok":
            failed[e.child.status].append(e)
    improved.sort(key=lambda e: (-(e.fitness / (e.parent_fitness or 1.0)), e.child.candidate_id))
    flat.sort(key=lambda e: -e.child.candidate_id)
    out = []
    if improved:
        out.append(
            (
                f"Beat their parent ({len(improved)}, largest gain first):",
                [_improved_line(archive, e) for e in improved[: SHOWN["improved"]]],
            )
        )
    if flat:
        out.append(
            (
                f"Correct but not faster than their parent ({len(flat)}, newest first):",
                [_flat_line(archive, e) for e in flat[: SHOWN["flat"]]],
            )
        )
    if failed:
        groups = sorted(failed.items(), key=lambda kv: (-len(kv[1]), kv[0]))
        out.append(
            (
                f"Failed ({sum(len(v) for v in failed.values())}):",
                [
                    _failed_line(archive, status, group)
                    for status, group in groups[: SHOWN["failed"]]
                ],
            )
        )
    return out


def _who(e: _Entry) -> str:
    c = e.child
    return (
        f"candidate {c.candidate_id} (generation {c.generation}, {c.agent or 'offline'}"
        f"{', ' + c.model if c.model else ''})"
    )


def _idea(archive: Archive, e: _Entry) -> str:
    idea = " ".join(e.child.idea.split())
    if not idea:
        return _moves(archive, e) or "(no idea recorded)"
    return idea if len(idea) <= IDEA_CHARS else idea[: IDEA_CHARS - 3] + "..."


def _moves(archive: Archive, e: _Entry) -> str:
    """What the child changed from its parent ("tunables BLOCK 256->512", "transform ..."),
    or "" (an archive from before children recorded their moves)."""
    if e.parent is None:
        return ""
    parent = archive.candidate(e.parent.candidate_id).candidate
    return described(parent, archive.candidate(e.child.candidate_id).candidate)


def _improved_line(archive: Archive, e: _Entry) -> str:
    before = e.parent_fitness or 0.0
    gain = f" (+{100 * (e.fitness / before - 1):.1f}%)" if before else ""
    line = f"- {_who(e)}: {_idea(archive, e)} -> fitness {e.fitness:.3f} from {before:.3f}{gain}"
    child = archive.evaluation_of(e.child.candidate_id)
    parent = archive.evaluation_of(e.parent.candidate_id) if e.parent else None
    faster, slower = _case_moves(child, parent)
    if faster:
        line += f"; faster on {faster}"
    if slower:
        line += f"; slower on {slower}"
    return line


def _flat_line(archive: Archive, e: _Entry) -> str:
    before = e.parent_fitness
    against = f" against its parent's {before:.3f}" if before is not None else ""
    return f"- {_who(e)}: {_idea(archive, e)} -> fitness {e.fitness:.3f}{against}"


def _failed_line(archive: Archive, status: str, group: list[_Entry]) -> str:
    newest = max(group, key=lambda e: e.child.candidate_id)
    evaluation = archive.evaluation_of(newest.child.candidate_id)
    lines = ((evaluation.message if evaluation else "") or status).strip().splitlines()
    why = lines[0][:160] if lines else status
    return f"- {status} x{len(group)}; newest: {_who(newest)}: {_idea(archive, newest)} -> {why}"


def _case_moves(child: Evaluation | None, parent: Evaluation | None) -> tuple[str, str]:
    """The cases the child timed faster (and slower) than its parent, by more than 1%."""
    if child is None or parent is None:
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
    prompt = render("scratchpad", task_name=ctx.task.name, words=str(int(bound * 0.6)), facts=facts)
    call = ctx.ask(WRITER_ROLE, prompt)
    text = call.text.strip() if call.ok else ""
    if not text:
        return None
    while count_tokens(text) > bound:
        text = text[: int(len(text) * 0.9)].rstrip()
    return (text, call.model) if text else None
