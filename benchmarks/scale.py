"""Workload 4: a store holding many conversations and armed timers; how late do timers fire?

The parent fills a database (stored conversations, each with an answered message; some with a
pending one and an armed timer) and starts a fresh burstbot process on it: `python -m
benchmarks.scale`, the real engine + scheduler + SQLite store on the system clock, a fake model that
answers at once and a recording platform, on the event loop `burstbot run` uses (uvloop where it
is installed). The child moves `firing` of the armed timers to fall due evenly over `window`
seconds (the rest stay armed, due later) and reports, as JSON, the lateness of each model call
after its timer's due time and its own peak RSS: the whole process, as an operator would see it.

The baseline, from the same process and run: a plain asyncio timer (`loop.call_at`) set for each
of the same due times, how late the event loop itself runs it while the engine works (uvloop keeps
time in whole milliseconds, so a plain timer may run up to about 1 ms early: negative). What
burstbot adds beyond it is its own path from a due row to the model call (the scheduler's query,
the lease, the burst's read).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import resource
import shutil
import sqlite3
import sys
import time
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

from benchmarks.ingest import percentile
from benchmarks.profiles import Profile
from benchmarks.tally import FIXED_WINDOW, PLATFORM
from bot.cli.serve import run_event_loop
from bot.core.clock import SystemClock
from bot.wiring import build_serving
from storage.sqlite import SqliteStore
from testkit import RecordingFrontend, StreamingModel
from testkit.engine import shut_down

ROOT = str(Path(__file__).resolve().parent.parent)  # the child imports `benchmarks` from here
LATE_P99_GOAL_MS = 10.0
ALWAYS_MEASURED_RATE = 250  # due/s: the goal names 100 and 250, so both run, met or not


@dataclass(frozen=True)
class ScaleRow:
    stored_conversations: int
    armed_timers: int
    fired: int
    window_seconds: float
    p50_ms: float
    p99_ms: float
    max_ms: float
    peak_rss_mb: float
    still_armed: int
    loop_p50_ms: float  # the baseline: a plain asyncio timer at each due time, same process
    loop_p99_ms: float


def channel_name(i: int) -> str:
    return f"s{i}"


def populate(path: str, conversations: int, timers: int) -> None:
    """Bulk-load with plain sqlite3 (a schema made by `SqliteStore.open`): every conversation has an
    answered message and a sent reply; `timers` of them a pending message and a timer, due later."""
    now, later = time.time(), time.time() + 86_400
    db = sqlite3.connect(path, isolation_level=None)
    db.execute("BEGIN IMMEDIATE")
    db.executemany(
        "INSERT INTO conversations (id, platform, version, answered_version, created_at) "
        "VALUES (?, ?, ?, 1, ?)",
        (
            (f"{PLATFORM}/w/{channel_name(i)}/", PLATFORM, 2 if i < timers else 1, now)
            for i in range(conversations)
        ),
    )
    message = (
        "INSERT INTO messages (conversation_id, seq, message_uid, message_id, author_id, "
        "author_name, text, created_at) VALUES (?, ?, ?, ?, 'u', 'someone', ?, ?)"
    )
    db.executemany(
        message,
        (
            (
                f"{PLATFORM}/w/{channel_name(i)}/",
                1,
                f"{PLATFORM}/w/{channel_name(i)}-old",
                f"{channel_name(i)}-old",
                f"{channel_name(i)}-old an earlier question",
                now,
            )
            for i in range(conversations)
        ),
    )
    db.executemany(
        message,
        (
            (
                f"{PLATFORM}/w/{channel_name(i)}/",
                2,
                f"{PLATFORM}/w/{channel_name(i)}-new",
                f"{channel_name(i)}-new",
                f"{channel_name(i)}-new a new question",
                now,
            )
            for i in range(timers)
        ),
    )
    db.executemany(
        "INSERT INTO replies (conversation_id, platform, covers_from_version, covers_to_version, "
        "seen_version, text, state, next_attempt_at, created_at, sent_at) "
        "VALUES (?, ?, 0, 1, 1, 'an earlier answer', 'sent', ?, ?, ?)",
        (
            (f"{PLATFORM}/w/{channel_name(i)}/", PLATFORM, now, now, now)
            for i in range(conversations)
        ),
    )
    db.executemany(
        "INSERT INTO debounce_timers (conversation_id, due_at, deadline_at, quiet_until, "
        "armed_version) VALUES (?, ?, ?, ?, 2)",
        ((f"{PLATFORM}/w/{channel_name(i)}/", later, later, later) for i in range(timers)),
    )
    db.execute("COMMIT")
    db.close()


async def run_scale(profile: Profile, directory: str) -> list[ScaleRow]:
    """Step the due rate up (the profile's `firing`, slowest first) until a step's p99 passes
    `LATE_P99_GOAL_MS`: that step is reported too, faster ones are not run. Steps up to
    `ALWAYS_MEASURED_RATE` run whatever the slower ones measured."""
    template = os.path.join(directory, "scale-template.db")
    store = SqliteStore(template)
    await store.open()
    await store.close()
    started = time.monotonic()
    populate(template, profile.stored_conversations, profile.armed_timers)
    print(f"  scale: {profile.stored_conversations:,} conversations stored in "
          f"{time.monotonic() - started:.0f} s", file=sys.stderr, flush=True)  # fmt: skip
    rows = []
    for n, window in profile.firing:
        rows.append(await _run_once(profile, directory, template, n, window))
        if rows[-1].p99_ms > LATE_P99_GOAL_MS and n / window >= ALWAYS_MEASURED_RATE:
            break
    return rows


def highest_rate_within_goal(rows: list[ScaleRow]) -> float:
    """The fastest due rate (per second) among steps whose p99 stayed within the goal; else 0."""
    return max(
        (r.fired / r.window_seconds for r in rows if r.p99_ms <= LATE_P99_GOAL_MS), default=0
    )


async def _run_once(
    profile: Profile, directory: str, template: str, firing: int, window: float
) -> ScaleRow:
    path = os.path.join(directory, f"scale-{firing}.db")
    shutil.copyfile(template, path)  # the same million rows for every step, written once
    paths = [ROOT, os.environ.get("PYTHONPATH", "")]
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(p for p in paths if p)}
    child = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "benchmarks.scale",
        path,
        "--firing",
        str(firing),
        "--window",
        str(window),
        "--timeout",
        str(profile.settle_timeout_seconds),
        stdout=asyncio.subprocess.PIPE,
        env=env,
    )
    out, _ = await child.communicate()
    if child.returncode != 0:
        raise RuntimeError(f"the scale process failed with exit code {child.returncode}")
    for leftover in (path, path + "-wal", path + "-shm"):  # a million rows each: free the disk
        with contextlib.suppress(FileNotFoundError):
            os.remove(leftover)
    report = json.loads(out)
    return ScaleRow(
        stored_conversations=profile.stored_conversations,
        armed_timers=profile.armed_timers,
        **report,
    )


async def serve(path: str, firing: int, window: float, within: float) -> dict[str, float]:
    store = SqliteStore(path)
    await store.open()
    model = StreamingModel(tokens=20, token_latency=0.0)
    platform = RecordingFrontend(PLATFORM)
    serving = build_serving(
        store, model, SystemClock(), FIXED_WINDOW, "scale", {PLATFORM: platform}
    )
    engine = serving.engine
    due = _make_due(path, firing, window, start=time.time() + 0.5)
    loop_late = plain_timers(due.values())
    scheduler = serving.scheduler
    loop = asyncio.create_task(scheduler.run())
    give_up = time.monotonic() + window + within
    while len(platform.posts) < firing and time.monotonic() < give_up:  # noqa: ASYNC110
        await asyncio.sleep(0.05)
    scheduler.stop()
    await loop
    await shut_down(engine)
    still_armed = await _count_timers(store)
    await store.close()
    late = sorted(
        (call.started_at - due[f"{PLATFORM}/w/{call.covers[0].rsplit('-', 1)[0]}/"]) * 1000
        for call in model.calls
    )
    if len(late) < firing:
        raise RuntimeError(f"only {len(late)} of {firing} due timers reached the model")
    return {
        "fired": len(late),
        "window_seconds": window,
        "p50_ms": percentile(late, 0.50),
        "p99_ms": percentile(late, 0.99),
        "max_ms": late[-1],
        "peak_rss_mb": peak_rss_mb(),
        "still_armed": still_armed,
        "loop_p50_ms": percentile(loop_late, 0.50),
        "loop_p99_ms": percentile(loop_late, 0.99),
    }


def peak_rss_mb() -> float:
    """This program's peak RSS: `VmHWM` of /proc, which starts afresh at exec. (`ru_maxrss` does
    not: Linux carries the parent's peak over into an exec'd child, so it read the benchmark
    parent's size.) `ru_maxrss` where /proc is missing."""
    with contextlib.suppress(OSError):
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) / 1024
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def plain_timers(due_at: Iterable[float]) -> list[float]:
    """A `loop.call_at` for each wall-clock due time; the list fills with how late each ran (ms)."""
    loop = asyncio.get_running_loop()
    late: list[float] = []
    offset = loop.time() - time.time()

    def ran(at: float) -> None:
        late.append((time.time() - at) * 1000)

    for at in due_at:
        loop.call_at(at + offset, ran, at)
    return late


def _make_due(path: str, firing: int, window: float, start: float) -> dict[str, float]:
    db = sqlite3.connect(path, isolation_level=None)
    db.execute("PRAGMA busy_timeout = 10000")
    query = "SELECT conversation_id FROM debounce_timers ORDER BY conversation_id LIMIT ?"
    chosen = [cid for (cid,) in db.execute(query, (firing,))]
    due = {cid: start + k * window / firing for k, cid in enumerate(chosen)}
    db.execute("BEGIN IMMEDIATE")
    db.executemany(
        "UPDATE debounce_timers SET due_at = ?, quiet_until = ?, deadline_at = ? "
        "WHERE conversation_id = ?",
        ((at, at, at + 60, cid) for cid, at in due.items()),
    )
    db.execute("COMMIT")
    db.close()
    return due


async def _count_timers(store: SqliteStore) -> int:
    db = store._db
    assert db is not None
    rows = await db.execute_fetchall("SELECT COUNT(*) FROM debounce_timers")
    return int(next(iter(rows))[0])


def main() -> None:
    parser = argparse.ArgumentParser(description="one burstbot process firing armed timers")
    parser.add_argument("database")
    parser.add_argument("--firing", type=int, required=True)
    parser.add_argument("--window", type=float, required=True)
    parser.add_argument("--timeout", type=float, default=120.0)
    args = parser.parse_args()
    report = run_event_loop(serve(args.database, args.firing, args.window, args.timeout))
    print(json.dumps(report))


if __name__ == "__main__":
    main()
