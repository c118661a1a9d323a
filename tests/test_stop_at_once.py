"""A stop, or newer input before the deadline, closes the model stream in the call that reports
it, not after the store answers the watch: on SQLite's one connection that read waits its turn
behind every queued transaction (docs/benchmarks.md, Stop). The store here is the real SQLite
store whose reads of the version and of a pending stop wait for the test, as they wait behind a
busy connection's queue; the front end counts every raw post."""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest

from bot.core.clicks import StopRequest
from storage.sqlite import SqliteStore
from testkit import ScriptedReplier, check_invariants
from testkit.clock import FakeClock
from tests.conftest import KEY, message
from tests.heard import Heard
from tests.test_stop import drafting, stop_click
from tests.test_streaming import answered, streaming_engine, until


class BusyReadsStore(SqliteStore):
    """`current_version` and `pending_stop` wait while `reads_wait` is set."""

    def __init__(self) -> None:
        super().__init__(":memory:")
        self.reads_wait = False
        self.waiting_reads = 0

    async def _turn(self) -> None:
        self.waiting_reads += 1
        try:
            await until(lambda: not self.reads_wait, within=30.0)
        finally:
            self.waiting_reads -= 1

    async def current_version(self, conversation_id: str) -> int:
        await self._turn()
        return await super().current_version(conversation_id)

    async def pending_stop(self, conversation_id: str) -> StopRequest | None:
        await self._turn()
        return await super().pending_stop(conversation_id)


@pytest.fixture
async def busy() -> AsyncIterator[BusyReadsStore]:
    store = BusyReadsStore()
    await store.open()
    yield store
    await store.close()


async def test_a_stop_closes_the_stream_before_the_busy_store_answers(
    busy: BusyReadsStore, clock: FakeClock
) -> None:
    frontend, engine, call = await drafting(busy, clock, "The plan is")
    busy.reads_wait = True
    assert (await engine.click(await stop_click(busy), admin=False)).acted
    await until(lambda: call.cancelled, within=2.0)  # no read of the store was answered
    busy.reads_wait = False
    await answered(engine, clock)
    assert frontend.visible() == ["The plan is\n\n_(stopped by alice)_"]
    assert len(frontend.posts) == 1
    [generation] = await busy.generations(KEY.id)
    assert generation.outcome == "stopped"
    await check_invariants(busy, [KEY.id], frontend=frontend)


async def test_newer_input_closes_the_stream_before_the_busy_store_answers(
    busy: BusyReadsStore, clock: FakeClock
) -> None:
    _, engine, call = await drafting(busy, clock, "Well")
    heard = Heard()
    engine.subscribe(heard)
    busy.reads_wait = True
    assert (await engine.ingest(message(2, "and one more thing"))).status == "accepted"
    await until(lambda: call.cancelled, within=2.0)
    await until(lambda: busy.waiting_reads == 1)  # is a stop pending? (decided elsewhere)
    assert heard.count("superseded") == 0  # not decided before the store answered that
    busy.reads_wait = False
    await answered(engine, clock)
    assert heard.count("superseded") == 1
    assert [g.outcome for g in await busy.generations(KEY.id)] == ["superseded"]


async def test_newer_input_here_over_a_stop_decided_in_another_process_ends_as_stopped(
    store: SqliteStore, clock: FakeClock
) -> None:
    """Another process decided a stop this one has not heard of: the newer message here cancels
    the stream at once, and the store's answer makes the outcome a stop, with what was shown."""
    frontend, engine, call = await drafting(store, clock, "Half of it")
    elsewhere = streaming_engine(store, clock, ScriptedReplier(hold=True), frontend, owner="w2")
    assert (await elsewhere.click(await stop_click(store), admin=False)).acted
    assert not call.cancelled  # the other process does not generate it
    await engine.ingest(message(2, "never mind"))
    await answered(engine, clock)
    assert call.cancelled
    assert frontend.visible() == ["Half of it\n\n_(stopped by alice)_"]
    assert [g.outcome for g in await store.generations(KEY.id)] == ["stopped"]
