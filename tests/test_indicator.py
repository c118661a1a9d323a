"""The thinking indicator against a real store: recorded before it goes on, taken down once."""

from __future__ import annotations

import asyncio

from bot.core.events import ConversationKey
from bot.core.indicator import Indicator
from bot.core.store import Timing
from storage.sqlite import SqliteStore
from testkit import RecordingFrontend
from testkit.clock import FakeClock
from tests.conftest import KEY, message

T = Timing(1.5, 8.0)


class CallsFrontend(RecordingFrontend):
    def __init__(self) -> None:
        super().__init__()
        self.calls: list[tuple[bool, str]] = []

    async def show_busy(self, key: ConversationKey, busy: bool, message_id: str) -> None:
        self.calls.append((busy, message_id))


class SlowRecordStore(SqliteStore):
    """`record_indicator` waits for the test: a message can arrive while it is in flight."""

    gate: asyncio.Event

    async def record_indicator(self, conversation_id: str, at: str, version: int) -> bool:
        await self.gate.wait()
        return await super().record_indicator(conversation_id, at, version)


async def test_the_indicator_goes_on_and_off_at_the_message_it_recorded() -> None:
    store, clock, frontend = SlowRecordStore(":memory:"), FakeClock(), CallsFrontend()
    store.gate = asyncio.Event()
    await store.open()
    try:
        indicator = Indicator({KEY.platform: frontend}, clock, store, delay=1.0)
        first = await store.ingest(message(1), clock.now(), T)
        indicator.show(KEY, first.due_at, first.version, "m1")
        assert first.due_at is not None
        await clock.advance(first.due_at + 1.0 - clock.now())  # the follower records "m1"...
        second = await store.ingest(message(2), clock.now(), T)
        indicator.show(KEY, second.due_at, second.version, "m2")  # ...while "m2" arrives
        store.gate.set()
        await indicator.idle()
        indicator.clear(KEY)
        await indicator.idle()
        assert frontend.calls == [(True, "m1"), (False, "m1")]
    finally:
        await store.close()


class SlowOnFrontend(CallsFrontend):
    """An "on" call reaches the platform only once `gate` is set (a slow call); `calls` is the
    order the platform saw."""

    def __init__(self) -> None:
        super().__init__()
        self.gate = asyncio.Event()
        self.on_sent = asyncio.Event()

    async def show_busy(self, key: ConversationKey, busy: bool, message_id: str) -> None:
        if busy:
            self.on_sent.set()
            await self.gate.wait()
        await super().show_busy(key, busy, message_id)


async def test_off_never_overtakes_a_slow_on() -> None:
    store, clock, frontend = SqliteStore(":memory:"), FakeClock(), SlowOnFrontend()
    await store.open()
    try:
        indicator = Indicator({KEY.platform: frontend}, clock, store, delay=1.0)
        accepted = await store.ingest(message(1), clock.now(), T)
        assert accepted.due_at is not None
        indicator.show(KEY, accepted.due_at, accepted.version, "m1")
        await clock.advance(accepted.due_at + 1.0 - clock.now())
        await frontend.on_sent.wait()  # the follower recorded it and called "on"
        [on] = indicator.running
        indicator.clear(KEY)  # answered while "on" is still on its way
        [take_down] = indicator.running - {on}
        await take_down  # the record is gone and "off" is called
        for _ in range(3):
            await asyncio.sleep(0)  # what an "off" free to go would need to reach the platform
        frontend.gate.set()
        await indicator.idle()
        assert frontend.calls == [(True, "m1"), (False, "m1")]
    finally:
        await store.close()
