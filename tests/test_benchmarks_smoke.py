"""The benchmark command, on its quick profile: every workload runs and the report has every row.

Speed is not asserted here (that is what the report is for); only that each system was measured
and that the numbers are the kind each system must produce."""

from __future__ import annotations

import asyncio
import math
import re
from pathlib import Path

import pytest

from benchmarks.__main__ import main
from benchmarks.flood import PHASES
from benchmarks.profiles import QUICK
from tests import pg

SYSTEMS = ("naive", "sleep-debounce", "complete-then-discard", "burstbot")


def rows(report: str, section: str) -> list[list[str]]:
    """The body rows of the Markdown table under the heading that starts with `section`."""
    body = report.split(f"### {section}", 1)[1]
    lines = re.split(r"\n#{2,3} ", body, maxsplit=1)[0].splitlines()  # to the next heading
    table = [line for line in lines if line.startswith("|")]
    return [[cell.strip() for cell in line.strip("|").split("|")] for line in table[2:]]


@pytest.mark.slow
def test_quick_run_writes_a_report_with_every_row(tmp_path: Path) -> None:
    assert main(["--quick", "--out", str(tmp_path), "--db-dir", str(tmp_path)]) == 0

    report = (tmp_path / "benchmarks.md").read_text(encoding="utf-8")
    assert (tmp_path / "benchmarks.png").read_bytes().startswith(b"\x89PNG")
    bursts, typing = rows(report, "1. Bursts"), rows(report, "2. Typing")
    assert [r[0] for r in bursts] == list(SYSTEMS)
    assert [r[0] for r in typing] == list(SYSTEMS)
    naive = dict(zip(SYSTEMS, bursts, strict=True))["naive"]
    assert float(naive[2]) >= QUICK.burst_size[0]  # a model call for every message
    for system, row in zip(SYSTEMS, typing, strict=True):
        assert int(row[2]) >= QUICK.typing_conversations, system  # everyone was answered
    ingest = rows(report, "3. Ingest")
    assert [r[0].split(",")[0].split(" (")[0] for r in ingest] == [
        "raw sqlite3",
        "burstbot flood",
        "burstbot at the floor's rate",
    ]
    assert all(int(r[1]) == QUICK.senders * QUICK.messages_per_sender for r in ingest)
    assert "### 4b. Scale on PostgreSQL" not in report  # quick: only with --postgres-dsn
    scale = rows(report, "4. Scale")
    assert len(scale) == len(QUICK.firing)
    assert int(scale[0][2]) == QUICK.firing[0][0]  # every due timer reached the model
    baseline = [float(x) for r in scale for x in r[9].split(" / ")]  # the plain asyncio timer's
    assert len(baseline) == 2 * len(scale) and all(math.isfinite(x) for x in baseline)
    flood = rows(report, "5. Slack HTTP flood")
    phases = list(PHASES)
    expected = [(str(run), phase, str(workers)) for workers in QUICK.flood_workers
                for run in range(1, QUICK.flood_runs + 1) for phase in phases]  # fmt: skip
    assert [(r[0], r[1], r[2]) for r in flood] == expected
    sent = QUICK.flood_senders * QUICK.flood_messages_per_sender
    assert all(int(r[3]) == sent and r[10] == "0" for r in flood)  # every event acked with 200
    assert all(float(r[4]) > 0 and float(r[5]) > 0 for r in flood)
    # CPU per ack read from /proc (this machine has it); a quick flood may fit in one clock tick
    cpu = [float(x) for r in flood for x in r[11].split(" / ")]
    assert len(cpu) == 2 * len(flood) and all(x >= 0 for x in cpu) and sum(cpu) > 0
    indicator = rows(report, "6. Thinking indicator")
    assert len(indicator) == len(QUICK.flood_workers) * QUICK.flood_runs
    assert all(int(r[3]) >= int(r[2]) for r in indicator)  # every burst was answered
    first_word = rows(report, "7. First visible word")
    assert [(r[0], int(r[1])) for r in first_word] == [("SQLite", QUICK.felt_conversations)]
    assert all(len(cell.split(" / ")) == 2 for cell in first_word[0][2:])
    [cancel] = rows(report, "8. Cancel latency")
    assert cancel[5] == f"{QUICK.felt_conversations} of {QUICK.felt_conversations}"
    caching = rows(report, "9. Prompt caching")
    assert [r[0] for r in caching] == ["1-4", f"5-{QUICK.caching_turns}"]
    assert int(caching[1][5].replace(",", "")) > 0  # later turns read the cached prefix
    limits = rows(report, "10. Streaming under rate limits")
    assert [r[0].split(" (")[0] for r in limits] == [
        "burstbot",
        "each conversation alone",
        "Discord, one channel: burstbot",
        "Discord, one channel: each conversation alone",
    ]
    assert all(r[6] == r[1] and r[7] == "0" for r in limits)  # every reply whole
    idle = rows(report, "11. Idle CPU")
    assert [r[0] for r in idle] == [
        "bare Bolt (baseline)",
        "burstbot, waiting on the model",
        "burstbot, idle",
    ]
    assert all(float(r[1]) >= QUICK.idle_seconds and float(r[2]) >= 0 for r in idle)
    busy = rows(report, "13. A busy workspace")
    assert [(r[0], r[2]) for r in busy] == [
        ("Slack, Tier 3 enforced", str(QUICK.busy_sizes[0])),
        ("Slack, no limits", str(QUICK.busy_sizes[0])),
        ("Slack, no limits, pacer off (baseline)", str(QUICK.busy_sizes[0])),
        ("Slack, Tier 3 enforced", str(QUICK.busy_streams)),
        ("Discord, one channel, 5 writes / 5 s", str(QUICK.discord_people)),
        ("Discord, one channel, 5 writes / 5 s", str(QUICK.discord_people)),
    ]
    assert all(r[8] == f"{r[2]} of {r[2]}" and r[10] == "0" for r in busy)  # each answered once
    targets = rows(report, "Targets")
    assert len(targets) == 6 + len(PHASES) + 1 + 9 + 4
    assert all(r[3] in ("yes", "**no**") for r in targets)


@pytest.mark.slow
def test_postgres_rows_when_a_server_is_given(tmp_path: Path) -> None:
    """With `--postgres-dsn` the first word and the two-process scale run on PostgreSQL too, each
    in a schema of its own that is dropped afterwards."""
    server = pg.dsn()
    arguments = ["--quick", "--only", "scale,felt", "--postgres-dsn", server]
    assert main([*arguments, "--out", str(tmp_path), "--db-dir", str(tmp_path)]) == 0

    report = (tmp_path / "benchmarks.md").read_text(encoding="utf-8")
    first_word = rows(report, "7. First visible word")
    assert [r[0] for r in first_word] == ["SQLite", "PostgreSQL"]
    assert all(len(cell.split(" / ")) == 2 for r in first_word for cell in r[2:])
    [scale] = rows(report, "4b. Scale on PostgreSQL")
    assert (scale[2], scale[3]) == ("2", str(QUICK.firing[0][0]))  # every due timer fired once
    assert len(scale[8].split(" / ")) == 2  # a peak RSS for each process
    names = [r[0] for r in rows(report, "Targets")]
    assert "first token -> draft request, p99 (PostgreSQL)" in names
    assert asyncio.run(leftover_schemas(server)) == []


async def leftover_schemas(server: str) -> list[str]:
    import asyncpg

    conn = await asyncpg.connect(server)
    try:
        query = "SELECT nspname FROM pg_namespace WHERE nspname LIKE 'burstbot_bench%'"
        return [r[0] for r in await conn.fetch(query)]
    finally:
        await conn.close()
