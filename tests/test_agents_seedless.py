"""A task without seed kernels: with a model the search starts from the translator's candidate
(PyTorch reference -> native candidate, over real HTTP); without one it is refused in one line."""

from __future__ import annotations

import shutil
import tomllib
from pathlib import Path

import pytest
from agents_support import MODEL, CompilingStandIn, replay_steps, replayed_run, transcript
from llm_server import ScriptedLLMServer

from hipevolve.app.run_job import first_candidates
from hipevolve.archive.store import Archive
from hipevolve.core.errors import UserError
from hipevolve.core.evaluation import Status
from hipevolve.evolution.islands import EvolutionSettings
from hipevolve.evolution.run import run_evolution
from hipevolve.problems import get_task, load_task_folder

REPLIES = "softmax_translate"
LOWERING = Path(__file__).parent / "data" / "lowering"


@pytest.fixture(autouse=True)
def _no_real_keys(monkeypatch):
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)


@pytest.fixture
def seedless(tmp_path):
    """softmax's task.toml and reference, minus `seeds`, under another name."""
    source = get_task("softmax")
    folder = tmp_path / "softmax_seedless"
    folder.mkdir()
    shutil.copy(source.reference, folder / "reference.py")
    lines = (source.reference.parent / "task.toml").read_text().splitlines()
    assert lines[0] == 'name = "softmax"'
    kept = ['name = "softmax_seedless"'] + [
        line for line in lines[1:] if not line.startswith("seeds")
    ]
    (folder / "task.toml").write_text("\n".join(kept) + "\n")
    task = load_task_folder(folder, "user")
    assert not task.seeds and "seeds" not in tomllib.loads((folder / "task.toml").read_text())
    return task


def test_seedless_task_with_a_model_starts_from_the_translators_candidate(tmp_path, seedless):
    evaluate = CompilingStandIn(tmp_path / "cache", task=seedless.name)
    settings = EvolutionSettings(islands=1, proposals_per_island=2)
    with ScriptedLLMServer(replay_steps(REPLIES)) as server, \
            Archive.open(tmp_path / "a.db") as archive:  # fmt: skip
        summary = replayed_run(archive, evaluate, server.api_base, budget=2, task=seedless,
                               settings=settings)  # fmt: skip
        sent = server.count
        rows = archive.db.execute(
            "SELECT c.id, c.agent, c.model, c.generation, e.status FROM candidates c"
            " JOIN evaluations e ON e.id = c.evaluation_id WHERE c.run = ? ORDER BY c.id",
            [summary.run],
        ).fetchall()
        lineage = archive.db.execute(
            "SELECT parent, child FROM lineage WHERE child IN (SELECT id FROM candidates"
            " WHERE run = ?)", [summary.run],
        ).fetchall()  # fmt: skip
        roles = [r[0] for r in archive.db.execute(
            "SELECT role FROM llm_calls WHERE run = ? ORDER BY id", [summary.run])]  # fmt: skip
    assert summary.reason == "budget", summary.message
    assert sent == len(transcript(REPLIES)) == 4
    assert roles == ["translator", "profiler_reader", "optimizer", "mutator"]
    (first_id, agent, model, generation, status), child = rows
    assert (agent, model, generation, status) == ("translator", MODEL, 0, Status.ok.value)
    assert child[1] == "mutator" and child[4] == Status.ok.value
    assert lineage == [(first_id, child[0])]  # the evolved child descends from the translation
    assert summary.progress.best_fitness == pytest.approx(1.2)  # BLOCK 512 over the seed's 1.0


CONV_REFERENCE = """\
import torch
import torch.nn as nn


class Model(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv = nn.Conv2d(3, 4, 3)

    def forward(self, x):
        return torch.relu(self.conv(x))


def get_inputs():
    return [torch.randn(1, 3, 8, 8)]


def get_init_inputs():
    return []
"""


def test_seedless_task_that_does_not_lower_is_refused_offline_in_one_line_before_a_run(tmp_path):
    # A convolution does not lower offline (pointwise, row reductions, GEMMs and their chains
    # do), and without a model nothing else can write a first kernel.
    folder = tmp_path / "conv_relu"
    folder.mkdir()
    (folder / "reference.py").write_text(CONV_REFERENCE)
    (folder / "task.toml").write_text(
        'name = "conv_relu"\ndescription = "relu(conv2d(x))"\nfamily = "fusion"\n'
        '[tolerance]\nkind = "kernelbench"\n[[cases]]\nname = "a"\nsmall = true\n'
    )
    task = load_task_folder(folder, "user")
    evaluate = CompilingStandIn(tmp_path / "cache", task=task.name, build=False)
    with Archive.open(tmp_path / "a.db") as archive:
        with pytest.raises(UserError) as refused:
            run_evolution(task, archive, EvolutionSettings(islands=1), evaluate,
                          first=first_candidates(task), budget=2, seed=0)  # fmt: skip
        runs = archive.runs()
    line = refused.value.line()
    assert f"task {task.name} has no seed kernels to start from" in line and "\n" not in line
    assert "does not lower" in line
    assert runs == []
