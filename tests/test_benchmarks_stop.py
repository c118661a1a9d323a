"""The Stop latency benchmark on a few samples: both paths are measured and the goal line is
computed from them. Speed is not asserted (the report is for that)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from benchmarks.stop_latency import main


def test_a_few_samples_measure_both_paths_and_state_the_goal(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["--samples", "2", "--concurrency", "2", "--db-dir", str(tmp_path),
                 "--postgres-dsn", ""]) == 0  # fmt: skip
    out = capsys.readouterr().out
    rows = [line for line in out.splitlines() if line.startswith("| SQLite |")]
    assert len(rows) == 2 and all(" | 2 | " in row for row in rows)  # two samples per path
    goal = re.search(r"SQLite: click acknowledged -> stream closed p99 <= 50 ms: (met|not met) "
                     r"\(p99 [\d.]+ ms; clicks that did not stop: 0\)", out)  # fmt: skip
    assert goal is not None
    assert out.count("load average at the") == 2
