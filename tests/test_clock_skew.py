"""One clock for the protocol (G12): two processes on one PostgreSQL database, one of them on a
host whose clock is 10 s off, still answer each burst once, in order.

Each "process" is its own engine, scheduler and connection pool on the database's clock; the
skewed one reads the real clock through an `OffsetClock`. Messages of a burst arrive alternately
at the two processes, a fifth of the quiet window apart (the pacing is input, not an assertion).
Counting replies happens once both processes have settled the conversation: every message
answered and every reply delivered, so no further reply can follow.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from dataclasses import replace

import pytest

from bot.core.clock import Clock, SystemClock
from bot.wiring import build_serving
from storage.postgres import PostgresStore
from testkit import RecordingFrontend, ScriptedReplier, check_invariants
from testkit.clock import OffsetClock
from testkit.engine import shut_down
from tests import pg
from tests.conftest import KEY, SETTINGS, message

TIMING = replace(
    SETTINGS, quiet_seconds=2.0, max_wait_seconds=8.0, lease_ttl_seconds=3.0, poll_seconds=0.05
)
BURSTS = 3
PER_BURST = 3


class Process:
    def __init__(
        self, store: PostgresStore, clock: Clock, platform: RecordingFrontend, owner: str,
        delivered: asyncio.Event,
    ) -> None:  # fmt: skip
        self.store = store
        serving = build_serving(
            store, ScriptedReplier(), clock, TIMING, owner, {platform.platform: platform}
        )
        self.engine = serving.engine
        self.engine.subscribe(lambda name, _: delivered.set() if name == "delivered" else None)
        self.scheduler = serving.scheduler
        self.task = asyncio.create_task(self.scheduler.run())

    async def stop(self) -> None:
        self.scheduler.stop()
        await self.task
        await shut_down(self.engine)


@pytest.fixture
async def schema() -> AsyncIterator[str]:
    name = await pg.create_schema("burstbot_skew")
    yield name
    await pg.drop_schema(name)


async def open_store(schema: str) -> PostgresStore:
    store = PostgresStore(pg.dsn(), pool_size=3, clock="database", schema=schema)
    await store.open()
    return store


async def settled(processes: list[Process], delivered: asyncio.Event) -> None:
    """Until a delivery leaves both processes idle and the conversation settled."""

    async def after_each_delivery() -> None:
        while True:
            await delivered.wait()
            delivered.clear()
            for process in processes:
                await process.engine.idle()
            if all([await p.engine.is_settled(KEY) for p in processes]):
                return

    await asyncio.wait_for(after_each_delivery(), 30.0)


@pytest.mark.parametrize("offset", [10.0, -10.0])
async def test_a_host_whose_clock_is_off_changes_nothing(schema: str, offset: float) -> None:
    platform, delivered = RecordingFrontend(), asyncio.Event()
    honest = Process(await open_store(schema), SystemClock(), platform, "honest", delivered)
    off = OffsetClock(SystemClock(), offset)
    skewed = Process(await open_store(schema), off, platform, "off", delivered)
    processes = [honest, skewed]
    try:
        for burst in range(BURSTS):
            for n in range(PER_BURST):
                seq = burst * PER_BURST + n + 1
                arrival = processes[seq % 2].engine
                assert (await arrival.ingest(message(seq))).status == "accepted"
                if n < PER_BURST - 1:
                    await asyncio.sleep(0.2)  # far inside the quiet window, even on a busy host
            await settled(processes, delivered)
    finally:
        for process in processes:
            await process.stop()
    try:
        answered = [(p.covers_to_version, p.text) for p in platform.posts]
        assert answered == [
            ((b + 1) * PER_BURST,
             "reply to: " + " | ".join(f"text {b * PER_BURST + n + 1}" for n in range(PER_BURST)))
            for b in range(BURSTS)
        ]  # fmt: skip
        await check_invariants(honest.store, [KEY.id], frontend=platform)
    finally:
        for process in processes:
            await process.store.close()
