"""Settings: defaults < ./hipevolve.toml < flags; unknown or bad settings are one-line errors;
every section of the one tree can be set in the file and reaches the run."""

import io
import sqlite3
from pathlib import Path

import pytest
from pydantic import ValidationError
from rich.console import Console
from standin import TASK_NAME, StandInEvaluators, write_task_folder

import hipevolve.core.config as config
from hipevolve.app.run_job import JobOptions, _policy, run_job
from hipevolve.archive.store import Archive
from hipevolve.core.base import canonical_json
from hipevolve.core.config import EvolutionSettings, Settings, load_settings
from hipevolve.core.errors import UserError
from hipevolve.verifier.evaluators import BaseEvaluator


def test_defaults_apply_without_a_config_file(tmp_path):
    s = load_settings(cwd=tmp_path)
    assert s.verifier.trials == 30 and s.verifier.backend == "auto"


def test_config_file_overrides_defaults_and_flags_override_the_file(tmp_path):
    (tmp_path / "hipevolve.toml").write_text("[verifier]\ntrials = 40\nwarmup = 7\n")
    s = load_settings({"verifier": {"trials": 60, "warmup": None}}, cwd=tmp_path)
    assert s.verifier.trials == 60  # flag wins
    assert s.verifier.warmup == 7  # flag not given: the file's value stays


def test_settings_are_frozen(tmp_path):
    s = load_settings(cwd=tmp_path)
    with pytest.raises(ValidationError):
        s.verifier.trials = 3


def test_unknown_setting_is_a_one_line_error_naming_it(tmp_path):
    (tmp_path / "hipevolve.toml").write_text("[verifier]\ntrails = 40\n")
    with pytest.raises(UserError) as e:
        load_settings(cwd=tmp_path)
    assert "verifier.trails" in e.value.line() and "\n" not in e.value.line()


def test_malformed_config_file_is_a_one_line_error(tmp_path):
    (tmp_path / "hipevolve.toml").write_text("[verifier\n")
    with pytest.raises(UserError) as e:
        load_settings(cwd=tmp_path)
    assert "hipevolve.toml" in e.value.line()


def test_environment_does_not_override_settings(tmp_path, monkeypatch):
    monkeypatch.setenv("HIPEVOLVE_VERIFIER__TRIALS", "99")
    monkeypatch.setenv("TRIALS", "99")
    assert load_settings(cwd=tmp_path).verifier.trials == 30


# ------------------------------------------------------------------ the tree, from file to run

@pytest.fixture
def here(tmp_path, monkeypatch) -> Path:
    """A working folder of its own (./hipevolve.toml is read from it), no settings from the
    environment."""
    monkeypatch.chdir(tmp_path)
    for name in ("HIPEVOLVE_MODEL", "HIPEVOLVE_TASKS"):
        monkeypatch.delenv(name, raising=False)
    return tmp_path


def job(root: Path, **flags) -> tuple[int, dict]:
    """A stand-in search by run_job with these flags: (exit code, the run's stored settings)."""
    quiet = Console(file=io.StringIO())
    options = JobOptions(task=TASK_NAME, **{"budget": 6, **flags})
    outcome = run_job(options, StandInEvaluators(root / "log"), quiet, quiet)
    with Archive.open(outcome.archive) as archive:
        return outcome.exit_code, archive.run(outcome.run).settings


def test_each_section_of_the_file_is_read(here):
    (here / "hipevolve.toml").write_text(
        '[tasks]\ndirs = ["kb"]\n'
        '[verifier]\nbackend = "rocm"\n'
        '[evolution]\nislands = 2\nmigrants = 2\n'
        '[agents]\nrepair_turns = 4\nconcurrency = 3\n'
        '[models]\nmodel = "openai/served"\napi_base = "http://127.0.0.1:8000/v1"\n'
        'token_budget = 5000\n[models.roles]\nauditor = ["anthropic/claude-sonnet-4-5"]\n'
        '[run]\narchive = "runs/all.db"\nseed = 7\n'
    )
    s = load_settings()
    assert s.tasks.dirs == (Path("kb"),) and s.verifier.backend == "rocm"
    assert (s.evolution.islands, s.evolution.migrants) == (2, 2)
    assert (s.agents.repair_turns, s.agents.concurrency) == (4, 3)
    assert s.models.role_models()["optimizer"] == ("openai/served",)
    assert s.models.role_models()["auditor"] == ("anthropic/claude-sonnet-4-5",)
    assert s.models.token_budget == 5000
    assert (s.run.archive, s.run.seed) == (Path("runs/all.db"), 7)


def test_evolution_islands_from_the_file_make_the_run(here):
    tasks = write_task_folder(here)
    (here / "hipevolve.toml").write_text(f'[tasks]\ndirs = ["{tasks}"]\n[evolution]\nislands = 2\n')
    code, stored = job(here, archive=here / "a.db")
    assert code == 0 and stored["islands"] == 2


def test_flags_override_the_file_and_the_file_keeps_what_they_leave(here):
    tasks = write_task_folder(here)
    (here / "hipevolve.toml").write_text("[evolution]\nislands = 2\nmigrants = 3\n"
                                         '[run]\narchive = "from_file.db"\nseed = 9\n')
    code, stored = job(here, islands=3, tasks_dirs=(tasks,))
    assert code == 0 and stored["islands"] == 3 and stored["migrants"] == 3
    with Archive.open(here / "from_file.db") as archive:  # run.archive and run.seed: the file's
        assert archive.run(1).seed == 9
    s = load_settings({"models": {"model": "openai/flag", "api_base": None}})
    assert s.models.model == ("openai/flag",)


def test_a_fresh_run_stores_the_settings_evolve_always_stored(here):
    """Without a file: the text a run of `evolve` stored before the tree (archive runs.settings,
    compared on resume), byte for byte: the library's defaults, lag 1, one proposal per island
    for the stand-in's one slot."""
    tasks = write_task_folder(here)
    job(here, tasks_dirs=(tasks,), archive=here / "a.db", islands=2)
    with sqlite3.connect(here / "a.db") as db:
        (text,) = db.execute("SELECT settings FROM runs WHERE id = 1").fetchone()
    assert text == canonical_json(EvolutionSettings(islands=2, proposals_per_island=1, lag=1))
    assert text == (
        '{"elite_fraction":0.5,"elite_top_k":3,"fitness_weighted_fraction":0.3,"inspirations":3,'
        '"islands":2,"lag":1,"migrants":1,"migration_every":5,"proposals_per_island":1,'
        '"reseed_every":20,"reseed_from":"elites","uniform_fraction":0.2}'
    )


def test_lag_and_proposals_set_in_the_file_are_the_runs(here):
    tasks = write_task_folder(here)
    (here / "hipevolve.toml").write_text("[evolution]\nlag = 0\nproposals_per_island = 3\n")
    _, stored = job(here, tasks_dirs=(tasks,), archive=here / "a.db")
    assert (stored["lag"], stored["proposals_per_island"]) == (0, 3)


def test_a_resumed_run_keeps_its_settings_whatever_the_file_says_now(here):
    tasks = write_task_folder(here)
    job(here, tasks_dirs=(tasks,), archive=here / "a.db", budget=3)
    (here / "hipevolve.toml").write_text("[evolution]\nislands = 1\n[run]\nseed = 5\n")
    code, stored = job(here, tasks_dirs=(tasks,), archive=here / "a.db", budget=6, resume=1)
    assert code == 0 and stored["islands"] == 4
    with pytest.raises(UserError, match="run 1 was started with other settings: islands 4, not 1"):
        job(here, tasks_dirs=(tasks,), archive=here / "a.db", resume=1, islands=1)


def test_agents_and_models_sections_reach_the_agents(here):
    (here / "hipevolve.toml").write_text(
        "[agents]\nrepair_turns = 5\nproposals_per_generation = 3\nconcurrency = 1\n"
        '[models]\nmodel = "openai/served"\napi_base = "http://127.0.0.1:9/v1"\n'
        "timeout_s = 7.5\nexploration = 0.25\n[models.roles]\nauditor = [\"openai/judge\"]\n"
    )
    settings = load_settings()

    class OnACard(BaseEvaluator):
        settings_key, toolchain, backend, device = "k", "t", "cuda", "NVIDIA H200"

        def __call__(self, candidates):
            return []

    policy = _policy(settings, archive=None, run=None, evaluate=OnACard())  # type: ignore[arg-type]
    assert policy is not None and policy.limits == settings.agents
    assert (policy.target.backend, policy.target.device) == ("cuda", "NVIDIA H200")
    assert policy.limits.repair_turns == 5 and policy.limits.proposals_per_generation == 3
    ensemble = policy.ensemble
    assert ensemble.settings.timeout_s == 7.5 and ensemble.settings.exploration == 0.25
    assert ensemble.has("mutator") and ensemble.has("auditor") and policy.translates()
    assert [a.model for a in ensemble.arms("auditor")] == ["openai/judge"]
    assert _policy(load_settings(cwd=here / "nowhere"), None, None, OnACard()) is None  # type: ignore[arg-type]


def test_models_from_the_file_are_checked_before_anything_is_written(here):
    (here / "hipevolve.toml").write_text('[models]\napi_base = "http://127.0.0.1:9/v1"\n')
    with pytest.raises(UserError, match="--api-base needs --model"):
        job(here, archive=here / "a.db")
    assert not (here / "a.db").exists()


@pytest.mark.parametrize(
    ("text", "where"),
    [
        ("[tasks]\ndir = []\n", "tasks.dir"),
        ("[evolution]\nislandz = 2\n", "evolution.islandz"),
        ("[agents]\nrepair_turn = 1\n", "agents.repair_turn"),
        ('[models]\nmodle = "x"\n', "models.modle"),
        ('[models.roles]\noptimiser = ["x"]\n', "models.roles.optimiser"),
        ('[run]\narchiv = "x.db"\n', "run.archiv"),
        ("[evolutoin]\nislands = 2\n", "evolutoin"),
    ],
)
def test_unknown_keys_of_every_section_are_one_line_naming_them(here, text, where):
    (here / "hipevolve.toml").write_text(text)
    with pytest.raises(UserError) as e:
        load_settings()
    line = e.value.line()
    assert f"setting {where}:" in line and "hipevolve.toml" in line and "\n" not in line


@pytest.mark.parametrize(
    ("text", "flags", "says"),
    [
        ("[evolution]\nislands = 0\n", None, "setting evolution.islands: Input should be greater"),
        ("[evolution]\nuniform_fraction = 0.5\n", None,
         "setting evolution: parent-selection fractions sum to 1.3, not 1"),
        ('[verifier]\nbackend = "metal"\n', None, "unknown backend 'metal'"),
        ("", {"verifier": {"backend": "metal"}}, "unknown backend 'metal'"),
        ("[agents]\nconcurrency = 99\n", None, "setting agents.concurrency"),
    ],
)
def test_bad_values_are_one_line_saying_where_they_came_from(here, text, flags, says):
    (here / "hipevolve.toml").write_text(text)
    with pytest.raises(UserError) as e:
        load_settings(flags)
    line = e.value.line()
    assert says in line and "\n" not in line
    assert ("(from the flags)" in line) == bool(flags)


def test_hipevolve_model_is_the_model_only_when_neither_file_nor_flag_names_one(here, monkeypatch):
    monkeypatch.setenv("HIPEVOLVE_MODEL", "openai/from-env")
    assert load_settings().models.model == ("openai/from-env",)
    assert load_settings({"models": {"model": "openai/flag"}}).models.model == ("openai/flag",)
    (here / "hipevolve.toml").write_text('[models]\nmodel = "openai/file"\n')
    assert load_settings().models.model == ("openai/file",)


def test_several_models_from_the_flags_or_the_file_stand_behind_every_writing_role(here):
    s = load_settings({"models": {"model": ["openai/a", "anthropic/b", "openai/a"]}})
    assert s.models.model == ("openai/a", "anthropic/b")  # a repeated --model counts once
    assert s.models.role_models()["mutator"] == ("openai/a", "anthropic/b")
    assert s.models.role_models()["optimizer"] == ("openai/a", "anthropic/b")
    (here / "hipevolve.toml").write_text('[models]\nmodel = ["openai/x", "openai/y"]\n')
    assert load_settings().models.models() == ("openai/x", "openai/y")


def test_every_setting_is_described_and_named_in_the_config_docstring():
    doc = config.__doc__ or ""
    for section, field in Settings.model_fields.items():
        assert field.description and f"[{section}]" in doc, section
        for name, sub in field.annotation.model_fields.items():
            assert sub.description, f"{section}.{name} has no description"
            assert name in doc, f"{section}.{name} is not documented in hipevolve/core/config.py"
