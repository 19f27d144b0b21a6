"""`evolve report RUN`: one self-contained HTML page, rendered in a real headless Chromium.

The run is a real stand-in search in a real SQLite archive (tests/standin.py), with LLM calls
recorded through the archive's accounting. The browser test needs Chromium and playwright
(`bash scripts/setup.sh --dev` installs both); it skips, saying so, where either is missing.
"""

from __future__ import annotations

import os
import shutil
from html.parser import HTMLParser
from pathlib import Path

import pytest
import typer
from standin import TASK_NAME, StandIn, write_task_folder
from typer.testing import CliRunner

from hipevolve.app.export_commands import register
from hipevolve.app.run_job import first_candidates
from hipevolve.archive.lineage import ancestors_of_best
from hipevolve.archive.store import Archive
from hipevolve.core.errors import UserError
from hipevolve.evolution.islands import EvolutionSettings
from hipevolve.evolution.run import run_evolution
from hipevolve.export.report import write_report
from hipevolve.problems import load_task_folder

CALLS = [("mutator", "openai/gpt-x", 1200, 300, 0.0125), ("mutator", "openai/gpt-x", 800, 200, 0.01),
         ("repairer", "local/qwen", 500, 100, 0.0)]  # fmt: skip


@pytest.fixture(scope="module")
def archive_path(tmp_path_factory) -> Path:
    """A finished stand-in search (run 1) with three LLM calls in its accounting."""
    root = tmp_path_factory.mktemp("report")
    task = load_task_folder(write_task_folder(root) / TASK_NAME, "user")
    db = root / "run.db"
    with Archive.open(db) as archive:
        run_evolution(task, archive, EvolutionSettings(), StandIn(root / "log"),
                      first=first_candidates(task), budget=30, seed=5)  # fmt: skip
        archive.resume(1)  # take the run's lock again to record into its accounting
        for role, model, tokens_in, tokens_out, cost in CALLS:
            archive.record_llm_call(1, role, model, "p", tokens_in, tokens_out, cost, 1.5)
        archive.finish_run(1)
    return db


@pytest.fixture(scope="module")
def page(archive_path, tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("page") / "run1.html"
    write_report(archive_path, 1, out)
    return out


class Page(HTMLParser):
    """Tags, attributes and text of a page, for the checks below."""

    def __init__(self) -> None:
        super().__init__()
        self.tags: list[tuple[str, dict[str, str | None]]] = []
        self.text: list[str] = []

    def handle_starttag(self, tag, attrs):
        self.tags.append((tag, dict(attrs)))

    def handle_data(self, data):
        self.text.append(data)


def parse(path: Path) -> Page:
    parsed = Page()
    parsed.feed(path.read_text())
    return parsed


def test_page_loads_nothing_from_elsewhere(page):
    parsed = parse(page)
    for tag, attrs in parsed.tags:
        assert tag not in ("link", "iframe", "img", "object", "embed"), tag
        for name in ("src", "href"):
            assert attrs.get(name) is None, (tag, attrs)
    assert [t for t, _ in parsed.tags].count("script") == 1
    assert sum(t == "svg" for t, _ in parsed.tags) == 4  # progress, islands, statuses, lineage


def test_page_shows_every_section_with_the_runs_figures(page, archive_path):
    text = " ".join(parse(page).text)
    html = page.read_text()
    for heading in ("Best so far", "Per-island progress", "Statuses and valid rate per generation",
                    "Lineage of the best", "MAP-Elites grids", "Speedups per case",
                    "The best kernel", "LLM calls and cost"):  # fmt: skip
        assert f"<h2>{heading}</h2>" in html, heading
    with Archive.open(archive_path) as archive:
        best = archive.best(1)
        path = ancestors_of_best(archive, 1)
        elites = archive.elites(1)
        kernel = archive.candidate(best.candidate_id).candidate.hip_source
        evaluated = archive.db.execute(
            "SELECT count(*), sum(status = 'ok') FROM evaluations e JOIN candidates c"
            " ON c.id = e.candidate WHERE c.run = 1"
        ).fetchone()
    assert f"Run 1: {TASK_NAME}" in text
    assert f"{best.fitness:.3f}x best fitness" in text
    assert f"{evaluated[0]} evaluations" in text
    assert f"{evaluated[1] / evaluated[0]:.0%} valid rate" in text
    for cid in path:  # the lineage tree draws the whole path to the best
        assert f'<circle data-id="{cid}"' in html
    for elite in elites:  # every island's grid shows its elites
        assert f"#{elite.candidate_id}</small>" in html
    for case in best.evaluation.cases:
        assert f"{case.speedup:.3f}x" in text
    assert kernel.splitlines()[3] in text  # the source, escaped and shown
    assert f"diff from parent {path[-2]}" in text
    assert '<span class="ln add">+#define' in html  # the diff marks the changed tunables
    assert "$0.0225" in text and "2500" in text and "local/qwen" in text  # LLM totals


def _chromium() -> str | None:
    """Debian's chromium, else the one `python -m playwright install chromium` downloads."""
    found = shutil.which("chromium") or shutil.which("chromium-browser")
    if found:
        return found
    try:
        from playwright.sync_api import sync_playwright

        with sync_playwright() as p:
            bundled = p.chromium.executable_path
    except Exception:  # noqa: BLE001 (no playwright, or no driver: no browser either)
        return None
    return bundled if Path(bundled).is_file() else None


def test_report_renders_in_headless_chromium_without_console_errors(page, tmp_path):
    sync_api = pytest.importorskip(
        "playwright.sync_api", reason="needs playwright (setup.sh --dev)"
    )
    executable = _chromium()
    if executable is None:
        pytest.skip("needs Chromium: apt-get install chromium (setup.sh --dev)")
    console, errors, requests = [], [], []
    with sync_api.sync_playwright() as p:
        # As root Chromium will not start its sandbox; a test page needs none.
        args = ["--no-sandbox"] if os.geteuid() == 0 else []
        browser = p.chromium.launch(executable_path=executable, args=args)
        try:
            view = browser.new_page(viewport={"width": 1240, "height": 900})
            view.on("console", lambda m: console.append(f"{m.type}: {m.text}"))
            view.on("pageerror", lambda e: errors.append(str(e)))
            view.on("request", lambda r: requests.append(r.url))
            view.goto(page.as_uri(), wait_until="load")
            charts = view.locator("svg").count()
            width = view.locator("svg").first.bounding_box()["width"]
            assert view.locator("#panel-source").is_visible()
            view.get_by_role("button", name="diff from parent").click()
            diff_shown = view.locator("#panel-diff").is_visible()
            source_hidden = not view.locator("#panel-source").is_visible()
            shot = tmp_path / "report.png"
            view.screenshot(path=str(shot), full_page=True)
        finally:
            browser.close()
    print(f"screenshot of the report: {shot}")
    assert errors == [] and console == [], (errors, console)
    assert requests == [page.as_uri()]  # nothing fetched but the page itself
    assert charts == 4 and width > 1000
    assert diff_shown and source_hidden  # the inline script switched the panels
    assert shot.stat().st_size > 50_000


def test_unknown_run_lists_the_runs(archive_path, tmp_path):
    app = typer.Typer()
    register(app)
    result = CliRunner().invoke(app, ["report", "4", "--archive", str(archive_path), "--out",
                                      str(tmp_path / "r.html")])  # fmt: skip
    assert isinstance(result.exception, UserError)
    assert f"no run 4 in {archive_path}; runs: 1 ({TASK_NAME}, finished" in result.exception.line()
    assert not (tmp_path / "r.html").exists()


def test_report_command_writes_the_default_file_name_in_an_output_folder(archive_path, tmp_path):
    app = typer.Typer()
    register(app)
    result = CliRunner().invoke(app, ["report", "1", "--archive", str(archive_path), "--out",
                                      str(tmp_path)])  # fmt: skip
    assert result.exit_code == 0, result.output
    assert (tmp_path / "report-run1.html").stat().st_size > 10_000
    assert "wrote" in result.output and "30 evaluations" in result.output


def test_a_run_without_evaluations_still_gets_a_page(tmp_path):
    task = load_task_folder(write_task_folder(tmp_path) / TASK_NAME, "user")
    db = tmp_path / "empty.db"
    with Archive.open(db) as archive:
        archive.finish_run(archive.start_run(task, {}, seed=0, budget=1))
    done = write_report(db, 1, tmp_path / "empty.html")
    text = " ".join(parse(done.out).text)
    assert done.evaluations == 0
    assert "This run has recorded no evaluation yet." in text
    assert "No correct candidate, so no best." in text
    assert "No LLM calls" in text
