"""Chaos runs: the guarantees hold across OS processes that are SIGKILLed while generating, on a
platform that is slow, rate-limits and dedupes only like Discord or not at all like Slack, with
input after deadlines and a store that is busy now and then (see `tests/chaos_run.py`).

In the test suite a CI-sized run on each database (SQLite file; PostgreSQL when
`BURSTBOT_TEST_POSTGRES_DSN` is reachable). Standalone, any size:

    python -m tests.test_chaos --size full --db sqlite
    python -m tests.test_chaos --size full --db postgres

Each prints one summary line; see `tests/chaos_check.py` for what every count means.
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
from tests.chaos_check import summary_line
from tests.chaos_run import SIZES, run_chaos


def violations(counts: dict[str, Any]) -> list[str]:
    problems = [
        f"{name}={counts[name]}"
        for name in (
            "duplicates",
            "duplicate_posts_raw",
            "wrong_channel",
            "unanswered",
            "stored_twice",
            "not_posted",
            "unseen",
            "out_of_order",
            "late",
            "no_takeover",
            "slow_takeovers",
            "stray_drafts",
        )
        if counts[name]
    ]
    return problems


def assert_guarantees(counts: dict[str, Any], size: str) -> None:
    assert not violations(counts), violations(counts)
    assert counts["acked"] == counts["messages"] > 0
    assert counts["kills_while_generating"] >= 1, "no worker was killed while generating"
    assert counts["takeovers"] >= 1
    assert counts["conversations"] >= SIZES[size].conversations
    # the faults happened: a kit whose faults never fire checks nothing
    for fault in ("multi_part", "retry_after", "slow_posts", "late_input", "store_busy"):
        assert counts[fault] >= 1, f"no {fault} in this run"
    assert counts["discord_like"] >= 1 and counts["slack_like"] >= 1
    assert counts["idle_samples"] >= SIZES[size].workers, "no quiet spell was measured"


def postgres_url(schema: str) -> str:
    base = os.environ[pg.DSN_ENV]
    return f"{base}{'&' if '?' in base else '?'}search_path={schema}"


@pytest.mark.slow
@pytest.mark.xdist_group("chaos")
async def test_processes_on_one_sqlite_file_keep_the_guarantees(tmp_path: Path) -> None:
    """Issue item: >=3 processes, >=20 conversations, SIGKILL while generating, takeover in time."""
    counts = await run_chaos("ci", f"sqlite:///{tmp_path / 'chaos.db'}")
    print(summary_line("sqlite", "ci", counts))
    assert SIZES["ci"].workers >= 3 and SIZES["ci"].conversations >= 20
    assert_guarantees(counts, "ci")


@pytest.mark.slow
@pytest.mark.xdist_group("chaos")
async def test_streaming_processes_keep_one_message_per_burst(tmp_path: Path) -> None:
    """Issue 15: with streaming on, SIGKILLs mid-stream and takeovers still end with one message
    per burst: no raw duplicate, no draft left that no reply finished."""
    counts = await run_chaos("ci", f"sqlite:///{tmp_path / 'chaos.db'}", streaming=True)
    print(summary_line("sqlite streaming", "ci", counts))
    assert_guarantees(counts, "ci")
    assert counts["streamed"] >= 1 and counts["edits"] >= counts["streamed"]
    assert counts["stray_drafts"] == 0


@pytest.mark.slow
@pytest.mark.xdist_group("chaos")
async def test_processes_on_postgres_keep_the_guarantees() -> None:
    pg.dsn()  # skips with the reason when no PostgreSQL is reachable
    schema = await pg.create_schema("burstbot_chaos")
    try:
        counts = await run_chaos("ci", postgres_url(schema))
    finally:
        await pg.drop_schema(schema)
    print(summary_line("postgres", "ci", counts))
    assert_guarantees(counts, "ci")


async def _standalone(size: str, db: str, seed: int | None, streaming: bool) -> dict[str, Any]:
    if db == "sqlite":
        with tempfile.TemporaryDirectory() as directory:
            return await run_chaos(size, f"sqlite:///{directory}/chaos.db", seed, streaming)
    reason = pg.unavailable()
    if reason is not None:
        raise SystemExit(f"cannot run on postgres: {reason}")
    schema = await pg.create_schema("burstbot_chaos")
    try:
        return await run_chaos(size, postgres_url(schema), seed, streaming)
    finally:
        await pg.drop_schema(schema)


def main() -> int:
    parser = argparse.ArgumentParser(prog="python -m tests.test_chaos", description=__doc__)
    parser.add_argument("--size", choices=sorted(SIZES), default="ci")
    parser.add_argument("--db", choices=["sqlite", "postgres"], default="sqlite")
    parser.add_argument("--seed", type=int, default=None)
    parser.add_argument("--streaming", action="store_true", help="workers stream into drafts")
    args = parser.parse_args()
    if args.db == "postgres":
        os.environ.setdefault(pg.DSN_ENV, "postgresql://postgres@127.0.0.1:5432/test")
    counts = asyncio.run(_standalone(args.size, args.db, args.seed, args.streaming))
    print(summary_line(args.db + (" streaming" if args.streaming else ""), args.size, counts))
    problems = violations(counts)
    if problems:
        print("VIOLATED: " + ", ".join(problems), file=sys.stderr)
    return 1 if problems else 0


if __name__ == "__main__":
    raise SystemExit(main())
