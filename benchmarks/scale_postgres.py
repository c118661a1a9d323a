"""Workload 4 on PostgreSQL: a million stored conversations, two burstbot processes sharing them.

The parent fills a schema of its own with COPY (each conversation with an answered message and a
sent reply; `armed_timers` of them with a pending message and a timer due a day later), then for
each due rate starts two fresh `python -m benchmarks.scale_postgres` processes on it: the real
engine + scheduler + `PostgresStore`, a fake model that answers at once, a recording platform, on
`burstbot run`'s event loop. Once both have opened the store, the parent moves the next timers to
fall due evenly over the window and tells both; each reports, as JSON, when its model calls began,
its own plain asyncio timer at every due time (the same-run baseline, as on SQLite) and its peak
RSS. Lateness counts every call of both processes against its timer's due time.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import sys
import time
from dataclasses import dataclass
from typing import Any

from benchmarks.ingest import percentile
from benchmarks.postgres import scratch_schema
from benchmarks.profiles import Profile
from benchmarks.scale import ROOT, channel_name, peak_rss_mb, plain_timers
from benchmarks.tally import FIXED_WINDOW, PLATFORM
from bot.cli.serve import run_event_loop
from bot.core.clock import SystemClock
from bot.wiring import build_serving
from testkit import RecordingFrontend, StreamingModel
from testkit.engine import shut_down

PROCESSES = 2
RATES = (100, 250)  # due per second: the two rates the scale goal names


@dataclass(frozen=True)
class PostgresScaleRow:
    stored_conversations: int
    armed_timers: int  # when the step began
    processes: int
    fired: int
    window_seconds: float
    p50_ms: float
    p99_ms: float
    max_ms: float
    peak_rss_mb: tuple[float, ...]  # one per process
    loop_p50_ms: float
    loop_p99_ms: float


async def populate(dsn: str, schema: str, conversations: int, timers: int) -> None:
    """COPY the same rows the SQLite workload writes, into a schema made by `PostgresStore`."""
    import asyncpg

    from storage.postgres import PostgresStore

    store = PostgresStore(dsn, schema=schema)
    await store.open()
    await store.close()
    now, later = time.time(), time.time() + 86_400
    cid = [f"{PLATFORM}/w/{channel_name(i)}/" for i in range(conversations)]
    conn = await asyncpg.connect(dsn, server_settings={"search_path": schema})
    try:
        await conn.copy_records_to_table(
            "conversations",
            columns=("id", "platform", "version", "answered_version", "created_at"),
            records=((cid[i], PLATFORM, 2 if i < timers else 1, 1, now)
                     for i in range(conversations)),
        )  # fmt: skip
        columns = ("conversation_id", "seq", "message_uid", "message_id", "author_id",
                   "author_name", "text", "created_at")  # fmt: skip
        await conn.copy_records_to_table(
            "messages",
            columns=columns,
            records=(_message(cid[i], 1, f"{channel_name(i)}-old", "an earlier question", now)
                     for i in range(conversations)),
        )  # fmt: skip
        await conn.copy_records_to_table(
            "messages",
            columns=columns,
            records=(_message(cid[i], 2, f"{channel_name(i)}-new", "a new question", now)
                     for i in range(timers)),
        )  # fmt: skip
        await conn.copy_records_to_table(
            "replies",
            columns=("conversation_id", "platform", "covers_from_version", "covers_to_version",
                     "seen_version", "text", "state", "next_attempt_at", "created_at", "sent_at"),
            records=((cid[i], PLATFORM, 0, 1, 1, "an earlier answer", "sent", now, now, now)
                     for i in range(conversations)),
        )  # fmt: skip
        await conn.copy_records_to_table(
            "debounce_timers",
            columns=("conversation_id", "due_at", "deadline_at", "quiet_until", "armed_version"),
            records=((cid[i], later, later, later, 2) for i in range(timers)),
        )
        await conn.execute("ANALYZE")
    finally:
        await conn.close()


def _message(
    conversation: str, seq: int, message_id: str, question: str, now: float
) -> tuple[str, int, str, str, str, str, str, float]:
    uid = f"{PLATFORM}/w/{message_id}"
    return (conversation, seq, uid, message_id, "u", "someone", f"{message_id} {question}", now)


async def run_scale_postgres(profile: Profile, dsn: str) -> list[PostgresScaleRow]:
    """Both rates, each with two fresh processes; every step reported, goal met or not."""
    async with scratch_schema(dsn, "burstbot_bench_scale") as schema:
        started = time.monotonic()
        await populate(dsn, schema, profile.stored_conversations, profile.armed_timers)
        print(f"  scale on PostgreSQL: {profile.stored_conversations:,} conversations stored in "
              f"{time.monotonic() - started:.0f} s", file=sys.stderr, flush=True)  # fmt: skip
        window = profile.firing[0][1]
        rates = RATES if profile.name != "quick" else (profile.firing[0][0] / window,)
        rows, armed = [], profile.armed_timers
        for rate in rates:
            firing = round(rate * window)
            rows.append(await _run_step(profile, dsn, schema, firing, window, armed))
            armed -= firing
        return rows


async def _run_step(
    profile: Profile, dsn: str, schema: str, firing: int, window: float, armed: int
) -> PostgresScaleRow:
    paths = [ROOT, os.environ.get("PYTHONPATH", "")]
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(p for p in paths if p)}
    children = [
        await asyncio.create_subprocess_exec(
            sys.executable,
            "-m",
            "benchmarks.scale_postgres",
            dsn,
            "--schema",
            schema,
            "--name",
            f"scale-{k}",
            "--timeout",
            str(window + profile.settle_timeout_seconds),
            stdin=asyncio.subprocess.PIPE,
            stdout=asyncio.subprocess.PIPE,
            env=env,
        )
        for k in range(PROCESSES)
    ]
    try:
        due, outs = await _fire(children, dsn, schema, firing, window)
    finally:  # a failed step leaves no process behind
        for child in children:
            if child.returncode is None:
                child.kill()
                await child.wait()
    late = sorted((at - due[cid]) * 1000 for out in outs for cid, at in out["calls"])
    loop_late = sorted(x for out in outs for x in out["loop_late"])
    if len(late) < firing:
        raise RuntimeError(f"only {len(late)} of {firing} due timers reached the model")
    return PostgresScaleRow(
        stored_conversations=profile.stored_conversations,
        armed_timers=armed,
        processes=PROCESSES,
        fired=len(late),
        window_seconds=window,
        p50_ms=percentile(late, 0.50),
        p99_ms=percentile(late, 0.99),
        max_ms=late[-1],
        peak_rss_mb=tuple(out["peak_rss_mb"] for out in outs),
        loop_p50_ms=percentile(loop_late, 0.50),
        loop_p99_ms=percentile(loop_late, 0.99),
    )


async def _fire(
    children: list[asyncio.subprocess.Process], dsn: str, schema: str, firing: int, window: float
) -> tuple[dict[str, float], list[dict[str, Any]]]:
    """Once every process has opened the store, the due times go to the database and to them."""
    for child in children:
        assert child.stdout is not None
        if (await child.stdout.readline()).strip() != b"ready":
            raise RuntimeError("a PostgreSQL scale process failed to start")
    due = await _make_due(dsn, schema, firing, window, start=time.time() + 1.0)
    line = (json.dumps(due) + "\n").encode()
    for child in children:
        assert child.stdin is not None
        child.stdin.write(line)
        await child.stdin.drain()
        child.stdin.close()
    outs = []
    for child in children:
        out, _ = await child.communicate()
        if child.returncode != 0:
            raise RuntimeError(f"a PostgreSQL scale process failed with code {child.returncode}")
        outs.append(json.loads(out.splitlines()[-1]))
    return due, outs


async def _make_due(
    dsn: str, schema: str, firing: int, window: float, start: float
) -> dict[str, float]:
    """The next `firing` armed timers fall due evenly over `window` seconds from `start`."""
    import asyncpg

    conn = await asyncpg.connect(dsn, server_settings={"search_path": schema})
    try:
        query = ("SELECT conversation_id FROM debounce_timers WHERE due_at > $1 "
                 "ORDER BY conversation_id LIMIT $2")  # fmt: skip
        chosen = [r[0] for r in await conn.fetch(query, start + 3_600, firing)]
        due = {cid: start + k * window / firing for k, cid in enumerate(chosen)}
        await conn.executemany(
            "UPDATE debounce_timers SET due_at = $1::float8, quiet_until = $1::float8, "
            "deadline_at = $1::float8 + 60 "
            "WHERE conversation_id = $2",
            [(at, cid) for cid, at in due.items()],
        )
    finally:
        await conn.close()
    return due


UNFINISHED = """
SELECT (SELECT COUNT(*) FROM conversations
        WHERE id = ANY($1::text[]) AND answered_version < version)
     + (SELECT COUNT(*) FROM replies
        WHERE conversation_id = ANY($1::text[]) AND state = 'pending')
"""
"""Of the due conversations, those not answered yet or with a reply not sent: both processes
stop at zero. Read from the database, not from this process's own calls and posts: either
process may post the other's reply, and a process that stopped because its posts caught up with
its calls could cancel a generation it had begun (a held timer is not due, so it was not counted
either), and the other process generated that conversation again."""


async def serve(dsn: str, schema: str, name: str, within: float) -> dict[str, Any]:
    import asyncpg

    from storage.postgres import PostgresStore

    store = PostgresStore(dsn, schema=schema)
    await store.open()
    model = StreamingModel(tokens=20, token_latency=0.0)
    platform = RecordingFrontend(PLATFORM)
    serving = build_serving(store, model, SystemClock(), FIXED_WINDOW, name, {PLATFORM: platform})
    engine = serving.engine
    print("ready", flush=True)
    line = await asyncio.get_running_loop().run_in_executor(None, sys.stdin.readline)
    if not line:  # the parent gave up before the due times were set
        await store.close()
        raise SystemExit("scale_postgres: no due times arrived; stopping")
    due: dict[str, float] = json.loads(line)
    loop_late = plain_timers(due.values())
    scheduler = serving.scheduler
    running = asyncio.create_task(scheduler.run())
    conn = await asyncpg.connect(dsn, server_settings={"search_path": schema})
    give_up = time.monotonic() + within
    while time.monotonic() < give_up:  # until every due conversation is answered and sent
        await asyncio.sleep(0.1)
        if await conn.fetchval(UNFINISHED, list(due)) == 0:
            break
    await conn.close()
    scheduler.stop()
    await running
    await shut_down(engine)
    await store.close()
    calls = [
        (f"{PLATFORM}/w/{call.covers[0].rsplit('-', 1)[0]}/", call.started_at)
        for call in model.calls
    ]
    return {"calls": calls, "loop_late": loop_late, "peak_rss_mb": peak_rss_mb()}


def main() -> None:
    parser = argparse.ArgumentParser(description="one burstbot process firing timers on PostgreSQL")
    parser.add_argument("dsn")
    parser.add_argument("--schema", required=True)
    parser.add_argument("--name", required=True)
    parser.add_argument("--timeout", type=float, default=120.0)
    args = parser.parse_args()
    report = run_event_loop(serve(args.dsn, args.schema, args.name, args.timeout))
    print(json.dumps(report))


if __name__ == "__main__":
    main()
