"""SQLite's one connection hands its next turn to a new message first (storage/turns.py)."""

from __future__ import annotations

import asyncio

from bot.core.store import Timing
from storage.sqlite import SqliteStore
from storage.turns import ArrivalsFirst
from tests.conftest import message

T = Timing(1.5, 8.0)


async def settle() -> None:
    """Let every task started so far run up to its wait for a turn."""
    for _ in range(10):
        await asyncio.sleep(0)


async def test_a_new_message_is_stored_before_background_steps_queued_ahead_of_it() -> None:
    """Replies being committed and delivered queue transactions; an ack waiting behind all of
    them is what made Slack's acks slow under load. The ingest queued last runs first."""
    store = SqliteStore(":memory:")
    await store.open()
    try:
        cid = (await store.ingest(message(1), 0.0, T)).conversation_id
        finished: list[str] = []

        async def step(name: str, work: asyncio.Future[object]) -> None:
            await work
            finished.append(name)

        async with store._transaction():  # a background step holds the connection
            steps = [
                asyncio.create_task(step(f"state {n}", store.conversation_state(cid)))
                for n in range(3)
            ]
            await settle()
            steps.append(asyncio.create_task(step("ingest", store.ingest(message(2), 1.0, T))))
            await settle()
            assert finished == []
        await asyncio.gather(*steps)
        assert finished == ["ingest", "state 0", "state 1", "state 2"]
        assert await store.current_version(cid) == 2
    finally:
        await store.close()


async def test_each_kind_keeps_its_order_and_a_cancelled_waiter_gives_up_its_place() -> None:
    lock = ArrivalsFirst()
    order: list[str] = []

    async def take(name: str, arrival: bool) -> None:
        async with lock.turn(arrival):
            order.append(name)

    async with lock.turn():
        tasks = {
            name: asyncio.create_task(take(name, arrival))
            for name, arrival in [("b1", False), ("a1", True), ("b2", False), ("a2", True)]
        }
        await settle()
        tasks["a1"].cancel()
        await settle()
    await asyncio.gather(*tasks.values(), return_exceptions=True)
    assert order == ["a2", "b1", "b2"]
    assert tasks["a1"].cancelled()
    assert not lock.locked()


async def test_a_waiter_cancelled_as_it_is_handed_the_turn_passes_it_on() -> None:
    """Cancelled between being handed the turn and waking up: the turn goes on, not lost."""
    lock = ArrivalsFirst()
    order: list[str] = []

    async def take(name: str) -> None:
        async with lock.turn():
            order.append(name)

    async with lock.turn():
        first = asyncio.create_task(take("first"))
        second = asyncio.create_task(take("second"))
        await settle()
    first.cancel()  # the turn is handed to `first` on leaving the block, before it runs
    await asyncio.gather(first, second, return_exceptions=True)
    assert first.cancelled()
    assert order == ["second"]
    assert not lock.locked()
