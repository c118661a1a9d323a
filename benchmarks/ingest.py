"""Workload 3: an ingest flood from many concurrent senders into one process on SQLite.

burstbot: `Engine.ingest` (what adapters call) on the SQLite store, first with every sender
awaiting its ack before sending its next message (how many acks a second one process gives), then
with messages offered at the floor's rate whether or not earlier ones were acked (the ack p99 at
that rate). The floor: **one process on SQLite acknowledges >= 200 messages a second with ack p99
<= 50 ms**, 25x Slack's per-workspace cap of 30,000 events an hour. Baseline, measured in the same
run: plain `sqlite3` running the same shared per-message statements (`ensure_conversation`,
`bump_version`, `insert_message`, `arm_timer`), one `BEGIN IMMEDIATE` ... `COMMIT` per message,
same PRAGMAs (WAL, synchronous=FULL), in a tight loop: what this disk allows one writer.
"""

from __future__ import annotations

import asyncio
import os
import random
import sqlite3
import time
from dataclasses import dataclass, replace

from benchmarks.profiles import Profile
from benchmarks.tally import FIXED_WINDOW, PLATFORM
from bot.core.clock import SystemClock
from bot.core.engine import Engine
from bot.core.events import ConversationKey, IncomingMessage
from bot.core.trace_context import new_trace_context
from bot.wiring import build_serving
from storage.rows import message_uid
from storage.sqlite import Q, SqliteStore
from testkit import StreamingModel

ACK_FLOOR_PER_SECOND = 200.0
"""Acks a second one process on SQLite must give (ingest and the Slack flood)."""
ACK_P99_FLOOR_MS = 50.0
"""The ack p99 it must keep at that rate."""


@dataclass(frozen=True)
class IngestRow:
    system: str
    messages: int
    seconds: float
    p50_ms: float
    p99_ms: float

    @property
    def rate(self) -> float:
        return self.messages / self.seconds


def percentile(values: list[float], q: float) -> float:
    """The nearest-rank `q` quantile (0.0 for no values); every benchmark's percentiles."""
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))] if ordered else 0.0


async def _fresh_database(path: str) -> None:
    store = SqliteStore(path)
    await store.open()
    await store.close()


def _message(sender: int, n: int) -> IncomingMessage:
    key = ConversationKey(PLATFORM, "w", f"flood{sender}")
    return IncomingMessage(
        key, f"f{sender}-{n}", f"u{sender}", "someone", f"message {n} of a flood"
    )


async def raw_sqlite(profile: Profile, directory: str) -> IngestRow:
    path = os.path.join(directory, "ingest-raw.db")
    await _fresh_database(path)
    db = sqlite3.connect(path, isolation_level=None)
    for pragma in (
        "busy_timeout = 10000",
        "journal_mode = WAL",
        "synchronous = FULL",
        "foreign_keys = ON",
    ):
        db.execute(f"PRAGMA {pragma}")
    settings = replace(FIXED_WINDOW, quiet_seconds=profile.quiet_seconds,
                       max_wait_seconds=profile.max_wait_seconds)  # fmt: skip
    latencies: list[float] = []
    started = time.perf_counter()
    for n in range(profile.messages_per_sender):
        for sender in range(profile.senders):
            m = _message(sender, n)
            cid, now, t = m.key.id, time.time(), time.perf_counter()
            db.execute("BEGIN IMMEDIATE")
            db.execute(Q["ensure_conversation"], {"cid": cid, "platform": PLATFORM, "now": now})
            bump = {"cid": cid, "trace_context": new_trace_context()}  # as the store's ingest
            (version, _) = db.execute(Q["bump_version"], bump).fetchone()
            db.execute(
                Q["insert_message"],
                {
                    "cid": cid,
                    "seq": version,
                    "uid": message_uid(PLATFORM, "w", m.message_id),
                    "message_id": m.message_id,
                    "author_id": m.author_id,
                    "author_name": m.author_name,
                    "text": m.text,
                    "now": now,
                    "via": "",
                    "attachments": "[]",
                },
            ).fetchall()
            db.execute(
                Q["arm_timer"],
                {
                    "cid": cid,
                    "now": now,
                    "quiet": settings.quiet_seconds,
                    "max_wait": settings.max_wait_seconds,
                    "version": version,
                    "speculate_after": None,  # the raw baseline arms no early start
                },
            ).fetchall()
            db.execute("COMMIT")
            latencies.append(time.perf_counter() - t)
    seconds = time.perf_counter() - started
    db.close()
    return IngestRow(
        "raw sqlite3, one transaction per message",
        len(latencies),
        seconds,
        percentile(latencies, 0.5) * 1000,
        percentile(latencies, 0.99) * 1000,
    )


async def _engine(profile: Profile, path: str) -> tuple[Engine, SqliteStore]:
    store = SqliteStore(path)
    await store.open()
    settings = replace(FIXED_WINDOW, quiet_seconds=profile.quiet_seconds,
                       max_wait_seconds=profile.max_wait_seconds)  # fmt: skip
    serving = build_serving(store, StreamingModel(1, 0.0), SystemClock(), settings, "bench")
    return serving.engine, store


async def _ingest_one(engine: Engine, message: IncomingMessage, latencies: list[float]) -> None:
    t = time.perf_counter()
    result = await engine.ingest(message)
    latencies.append(time.perf_counter() - t)
    if result.status != "accepted":
        raise RuntimeError(f"flood message {message.message_id} was {result.status}")


async def burstbot_flood(profile: Profile, directory: str) -> IngestRow:
    """Closed loop: every sender sends its next message as soon as the last one is acked."""
    engine, store = await _engine(profile, os.path.join(directory, "ingest-flood.db"))
    latencies: list[float] = []

    async def sender(i: int) -> None:
        for n in range(profile.messages_per_sender):
            await _ingest_one(engine, _message(i, n), latencies)

    started = time.perf_counter()
    await asyncio.gather(*(sender(i) for i in range(profile.senders)))
    seconds = time.perf_counter() - started
    await store.close()
    return IngestRow(
        f"burstbot flood, {profile.senders} senders each awaiting its ack",
        len(latencies),
        seconds,
        percentile(latencies, 0.5) * 1000,
        percentile(latencies, 0.99) * 1000,
    )


async def burstbot_at_rate(profile: Profile, directory: str, rate: float) -> IngestRow:
    """Open loop: messages arrive at `rate` per second (Poisson), spread over the senders'
    conversations, whether or not earlier ones were acked yet."""
    engine, store = await _engine(profile, os.path.join(directory, "ingest-rate.db"))
    total = profile.senders * profile.messages_per_sender
    rng = random.Random(3)
    latencies: list[float] = []
    inflight: set[asyncio.Task[None]] = set()
    started = time.perf_counter()
    at = 0.0
    for n in range(total):
        at += rng.expovariate(rate)
        delay = started + at - time.perf_counter()
        if delay > 0:
            await asyncio.sleep(delay)
        task = asyncio.create_task(_ingest_one(engine, _message(n % profile.senders, n), latencies))
        inflight.add(task)
        task.add_done_callback(inflight.discard)
    await asyncio.gather(*inflight)
    seconds = time.perf_counter() - started
    await store.close()
    return IngestRow(
        f"burstbot at the floor's rate ({rate:.0f}/s offered)",
        len(latencies),
        seconds,
        percentile(latencies, 0.5) * 1000,
        percentile(latencies, 0.99) * 1000,
    )


async def run_ingest(profile: Profile, directory: str) -> list[IngestRow]:
    raw = await raw_sqlite(profile, directory)
    flood = await burstbot_flood(profile, directory)
    at_rate = await burstbot_at_rate(profile, directory, ACK_FLOOR_PER_SECOND)
    return [raw, flood, at_rate]
