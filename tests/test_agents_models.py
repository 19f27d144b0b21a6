"""Several models in one run (`--model A --model B`): the bandit spreads the calls over them,
the run logs which models it was started with and a resume keeps them, and `evolve report`
shows each model's calls, tokens, cost and the children it wrote that beat their parent."""

from __future__ import annotations

import os
import re
import subprocess
import sys

import pytest
from agents_support import CompilingStandIn, replay_steps, replayed_run
from llm_server import ScriptedLLMServer

from hipevolve.agents.llm.run_models import EVENT, recorded_models, resumed_models
from hipevolve.archive.store import Archive
from hipevolve.core.config import ModelSettings
from hipevolve.core.errors import UserError
from hipevolve.export.report import build_report

MODELS = ("openai/alpha", "openai/beta")


@pytest.fixture(autouse=True)
def _no_real_keys(monkeypatch):
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)


def test_two_models_share_one_run_and_each_ones_calls_cost_and_wins_are_reported(tmp_path):
    evaluate = CompilingStandIn(tmp_path / "cache", build=False)
    with ScriptedLLMServer(replay_steps()) as server, Archive.open(tmp_path / "a.db") as archive:
        summary = replayed_run(archive, evaluate, server.api_base, model_names=MODELS,
                               limits={"audit_rechecks": 0})  # fmt: skip
        asked = [r.body["model"] for r in server.requests]
        usage = {u.model: u for u in archive.llm_usage_by_model(summary.run)}
        calls = archive.llm_usage(summary.run)
        logged = recorded_models(archive, summary.run)
        children = archive.db.execute(
            "SELECT c.model, c.fitness, (SELECT max(p.fitness) FROM lineage l JOIN candidates p"
            " ON p.id = l.parent WHERE l.child = c.id AND l.kind = 'mutation')"
            " FROM candidates c WHERE c.run = ? AND c.model != '' AND c.evaluation_id IS NOT NULL",
            [summary.run]).fetchall()  # fmt: skip
        page = build_report(archive, summary.run)
    # Both providers' names reached the server: the bandit tried each model.
    assert set(asked) == {"alpha", "beta"}
    assert set(usage) == set(MODELS)
    assert sum(u.calls for u in usage.values()) == calls.calls == len(asked)
    assert sum(u.tokens_in for u in usage.values()) == calls.tokens_in
    for model, u in usage.items():
        mine = [(f or 0.0, p) for m, f, p in children if m == model]
        assert u.children == len(mine)
        assert u.improved == sum(p is not None and f > p for f, p in mine)
    assert sum(u.improved for u in usage.values()) >= 1  # the transcript's run improves
    assert logged == {"models": list(MODELS),
                      "roles": {r: list(MODELS) for r in logged["roles"]}}  # fmt: skip
    assert set(logged["roles"]) >= {"optimizer", "mutator", "repairer", "profiler_reader"}
    assert "<h3>Per model</h3>" in page and "beat their parent" in page
    assert all(f"<td class=l>{m}</td>" in page for m in MODELS)


def _recorded(*models: str) -> dict:
    from hipevolve.agents.llm.run_models import recorded

    return recorded(ModelSettings.for_model(*models))


def test_a_resume_without_models_keeps_the_runs_own():
    kept = resumed_models(ModelSettings(), _recorded(*MODELS), run=3)
    assert kept.models() == MODELS
    assert kept.role_models()["mutator"] == MODELS


def test_a_resume_naming_other_models_is_refused_in_one_line_naming_both():
    with pytest.raises(UserError) as e:
        resumed_models(ModelSettings.for_model("openai/gamma"), _recorded(*MODELS), run=3)
    line = e.value.line()
    assert "\n" not in line
    assert "run 3 was started with the models openai/alpha, openai/beta" in line
    assert "this resume names openai/gamma" in line


def test_a_resume_with_the_same_models_or_of_a_run_that_recorded_none_goes_on_as_given():
    same = ModelSettings.for_model(*MODELS)
    assert resumed_models(same, _recorded(*MODELS), run=1) == same
    other = ModelSettings.for_model("openai/gamma")
    assert resumed_models(other, None, run=1) == other


def test_the_models_are_logged_once_per_run(tmp_path):
    from hipevolve.agents.llm.run_models import record_models
    from hipevolve.evolution.islands import EvolutionSettings
    from hipevolve.problems import get_task

    with Archive.open(tmp_path / "a.db") as archive:
        run = archive.start_run(get_task("softmax"), EvolutionSettings(), 0, 4)
        record_models(archive, run, ModelSettings.for_model(*MODELS))
        record_models(archive, run, ModelSettings.for_model(*MODELS))
        assert len(archive.events(run, EVENT)) == 1


def test_a_bad_model_among_several_is_named_in_one_line_before_the_archive_exists(tmp_path):
    env = {k: v for k, v in os.environ.items() if k not in ("ANTHROPIC_API_KEY", "HIPEVOLVE_MODEL")}
    env["OPENAI_API_KEY"] = "sk-not-used"  # the first model passes; the second is the bad one
    out = subprocess.run(
        [sys.executable, "-m", "hipevolve", "--task", "softmax", "--budget", "2",
         "--archive", str(tmp_path / "a.db"), "--model", "openai/gpt-4.1",
         "--model", "anthropic/claude-sonnet-4-5"],
        capture_output=True, text=True, timeout=600, cwd=tmp_path, env=env,
    )  # fmt: skip
    line = out.stderr.strip()
    assert out.returncode == 2 and "Traceback" not in out.stderr
    assert line.startswith("error: ") and "\n" not in line
    assert "model 'anthropic/claude-sonnet-4-5' (provider anthropic) needs ANTHROPIC_API_KEY" in line
    assert not (tmp_path / "a.db").exists()


def test_a_resumed_bandit_starts_from_the_record_the_live_one_ended_with(tmp_path):
    from agents_support import SETTINGS

    from hipevolve.agents.llm.ensemble import Ensemble
    from hipevolve.agents.llm.run_models import arms_in
    from hipevolve.agents.policy import AgentPolicy
    from hipevolve.agents.state import AgentLimits
    from hipevolve.app.run_job import first_candidates
    from hipevolve.evolution.run import run_evolution
    from hipevolve.problems import get_task

    task = get_task("softmax")
    evaluate = CompilingStandIn(tmp_path / "cache", build=False)
    with ScriptedLLMServer(replay_steps()) as server, Archive.open(tmp_path / "a.db") as archive:
        settings = ModelSettings.for_model(*MODELS, api_base=server.api_base, max_retries=0)
        live = Ensemble(settings)
        policy = AgentPolicy(live, AgentLimits(concurrency=1, audit_rechecks=0))
        summary = run_evolution(task, archive, SETTINGS, evaluate, budget=8, seed=0,
                                first=first_candidates(task, translates=True), policy=policy)  # fmt: skip
        rebuilt = arms_in(archive, summary.run)
    resumed = Ensemble(settings, arms=rebuilt)
    for role in ("profiler_reader", "optimizer", "mutator", "repairer"):
        for was, now in zip(live.arms(role), resumed.arms(role), strict=True):
            assert (now.model, now.pulls) == (was.model, was.pulls)
            assert now.cost_usd == pytest.approx(was.cost_usd)
            assert now.reward == pytest.approx(was.reward)
    assert sum(a.reward for a in live.arms("mutator")) > 0  # the record holds a gain
    assert resumed.choose("mutator") == live.choose("mutator")


def _interrupted_run_with_models(path) -> int:
    from hipevolve.agents.llm.run_models import record_models
    from hipevolve.evolution.islands import EvolutionSettings
    from hipevolve.problems import get_task

    with Archive.open(path) as archive:
        run = archive.start_run(get_task("softmax"), EvolutionSettings(), 0, 4)
        record_models(archive, run, ModelSettings.for_model(*MODELS))
        archive.finish_run(run, "interrupted")
    return run


def _resume(path, run: int, *models: str):
    from rich.console import Console

    from hipevolve.app.job_options import JobOptions
    from hipevolve.app.run_job import run_job

    def no_gpu(*_):
        raise AssertionError("the resume should be refused before an evaluator is made")

    options = JobOptions(task="softmax", resume=run, archive=path, model=models)
    return run_job(options, no_gpu, Console(), Console(stderr=True))


def test_resuming_through_the_job_keeps_the_runs_models_or_refuses_others(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("HIPEVOLVE_MODEL", raising=False)
    path = tmp_path / "a.db"
    run = _interrupted_run_with_models(path)
    with pytest.raises(UserError, match="was started with the models openai/alpha, openai/beta; "
                                        "this resume names openai/gamma"):  # fmt: skip
        _resume(path, run, "openai/gamma")
    # No --model: the run's own models are checked (here: no key for them), not the offline policy.
    with pytest.raises(UserError, match="model 'openai/alpha' \\(provider openai\\) needs "
                                        "OPENAI_API_KEY"):  # fmt: skip
        _resume(path, run)


def test_evolve_with_two_models_ends_with_a_line_per_model(tmp_path, monkeypatch):
    from typer.testing import CliRunner

    from hipevolve.app.cli import app

    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("HIPEVOLVE_MODEL", raising=False)
    evaluate = CompilingStandIn(tmp_path / "cache", build=False)
    with ScriptedLLMServer(replay_steps() * 3, any_order=True) as server:
        result = CliRunner().invoke(app, [
            "--task", "softmax", "--budget", "8", "--islands", "1", "--archive", "a.db",
            "--model", MODELS[0], "--model", MODELS[1], "--api-base", server.api_base,
        ], obj=lambda task, settings, backend: evaluate)  # fmt: skip
        asked = {r.body["model"] for r in server.requests}
    assert result.exit_code == 0, result.output + repr(result.exception)
    lines = [line for line in result.output.splitlines() if line.startswith("model ")]
    assert [line.split(":")[0] for line in lines] == [f"model {m}" for m in MODELS]
    assert all(re.search(r": \d+ calls, [\d,]+ tokens, \$0\.0000; \d+ children, \d+ beat their "
                         r"parent$", line) for line in lines), lines  # fmt: skip
    assert asked == {"alpha", "beta"}
    with Archive.open(tmp_path / "a.db", create=False, read_only=True) as archive:
        assert recorded_models(archive, 1)["models"] == list(MODELS)
