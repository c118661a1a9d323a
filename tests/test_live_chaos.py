"""Live chaos: real `burstbot run` processes, streaming on, through the real Slack (Bolt, HTTP
mode) and Discord (discord.py) adapters and the Anthropic SDK, against fakes that fail like the
platforms do (see `tests/live_chaos_run.py`; the checks in `tests/live_chaos_check.py`).

In the test suite a CI-sized run on each database (SQLite file; PostgreSQL when
`BURSTBOT_TEST_POSTGRES_DSN` is reachable). Standalone, any size, streaming on or off:

    python -m tests.test_live_chaos --size full --db sqlite
    python -m tests.test_live_chaos --size ci --db postgres --no-streaming

Each run prints one summary line and, when a check fails, what people saw where it failed.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import sys
import tempfile
from pathlib import Path
from typing import Any

import pytest

from tests import pg
from tests.live_chaos_check import summary_line, violations
from tests.live_chaos_run import SIZES, run_live_chaos


def assert_kept(counts: dict[str, Any]) -> None:
    """The faults fired (a kit whose faults never fire checks nothing), then the promise held."""
    for fault in ("kills", "sigterms", "slow", "lost_answer", "rate_limited", "fail_before",
                  "people_deleted", "model_requests", "drafts", "edits", "multi_part",
                  "typed_past_deadline", "events_to_two_workers"):  # fmt: skip
        assert counts[fault] >= 1, f"no {fault} in this run"
    assert counts["model_overloaded"] + counts["model_error_mid_stream"] >= 1
    assert counts["edits"] > counts["drafts"], "drafts were not edited as they grew"
    problems = violations(counts)
    assert not problems, "\n".join([", ".join(problems), *counts["examples"]])


def postgres_url(schema: str) -> str:
    base = os.environ[pg.DSN_ENV]
    return f"{base}{'&' if '?' in base else '?'}search_path={schema}"


def report(db: str, size: str, counts: dict[str, Any]) -> None:
    print(summary_line(db, size, counts))
    for example in counts["examples"]:
        print(example, file=sys.stderr)


@pytest.mark.slow
@pytest.mark.xdist_group("chaos")
async def test_live_processes_on_sqlite_show_one_message_per_burst(tmp_path: Path) -> None:
    counts = await run_live_chaos("ci", f"sqlite:///{tmp_path / 'chaos.db'}", tmp_path)
    report("sqlite", "ci", counts)
    assert_kept(counts)


@pytest.mark.slow
@pytest.mark.xdist_group("chaos")
async def test_live_processes_on_postgres_show_one_message_per_burst(tmp_path: Path) -> None:
    pg.dsn()  # skips with the reason when no PostgreSQL is reachable
    schema = await pg.create_schema("burstbot_live_chaos")
    try:
        counts = await run_live_chaos("ci", postgres_url(schema), tmp_path)
    finally:
        await pg.drop_schema(schema)
    report("postgres", "ci", counts)
    assert_kept(counts)


async def _standalone(
    size: str, db: str, seed: int | None, streaming: bool, keep: str | None
) -> dict[str, Any]:
    with tempfile.TemporaryDirectory(prefix="burstbot-live-chaos-") as name:
        directory = Path(keep or name)
        directory.mkdir(parents=True, exist_ok=True)  # noqa: ASYNC240 (before anything runs)
        if db == "sqlite":
            url = f"sqlite:///{directory / 'chaos.db'}"
            return await run_live_chaos(size, url, directory, seed, streaming)
        reason = pg.unavailable()
        if reason is not None:
            raise SystemExit(f"cannot run on postgres: {reason}")
        schema = await pg.create_schema("burstbot_live_chaos")
        try:
            return await run_live_chaos(size, postgres_url(schema), directory, seed, streaming)
        finally:
            await pg.drop_schema(schema)


def main() -> int:
    parser = argparse.ArgumentParser(prog="python -m tests.test_live_chaos", description=__doc__)
    parser.add_argument("--size", choices=sorted(SIZES), default="ci")
    parser.add_argument("--db", choices=["sqlite", "postgres"], default="sqlite")
    parser.add_argument("--seed", type=int, default=None)
    parser.add_argument("--no-streaming", action="store_true", help="the baseline: no drafts")
    parser.add_argument("--keep", metavar="DIR", help="keep the workers' configs and logs here")
    args = parser.parse_args()
    if args.db == "postgres":
        os.environ.setdefault(pg.DSN_ENV, "postgresql://postgres@127.0.0.1:5432/test")
    counts = asyncio.run(
        _standalone(args.size, args.db, args.seed, not args.no_streaming, args.keep)
    )
    label = args.db + (" no-streaming" if args.no_streaming else "")
    report(label, args.size, counts)
    problems = violations(counts)
    if problems:
        print("VIOLATED: " + ", ".join(problems), file=sys.stderr)
    return 1 if problems else 0


if __name__ == "__main__":
    raise SystemExit(main())
