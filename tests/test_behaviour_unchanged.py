"""The re-layout (issue 31) moved code without changing what a search does: the same seeded
searches on the stand-in evaluators write the same archive, row for row, as they did at 77005a3
(tests/data/golden/runs.json, written by tests/golden_runs.py; timestamps and paths aside)."""

from __future__ import annotations

import json

import pytest
from golden_runs import CLI_RUNS, SNAPSHOT, agent_run, cli_run

GOLDEN = json.loads(SNAPSHOT.read_text())


def _assert_same_archive(got: dict, want: dict) -> None:
    assert sorted(got) == sorted(want), "the archive's tables differ"
    for table in want:
        assert len(got[table]) == len(want[table]), f"{table}: row count differs"
        for i, (a, b) in enumerate(zip(got[table], want[table], strict=True)):
            assert a == b, f"{table} row {i} differs"


@pytest.mark.parametrize("name,args", CLI_RUNS, ids=[n for n, _ in CLI_RUNS])
def test_a_seeded_offline_search_writes_the_archive_it_wrote_before_the_relayout(
    tmp_path, name, args
):
    _assert_same_archive(json.loads(json.dumps(cli_run(tmp_path, args))), GOLDEN[name])


def test_a_replayed_agent_run_writes_the_archive_it_wrote_before_the_relayout(tmp_path):
    _assert_same_archive(json.loads(json.dumps(agent_run(tmp_path))), GOLDEN["agents_replayed"])
