"""The SQLite store's connection lock (storage/sqlite_lock.py): an arriving event's steps, which
acks wait for, go before other waiters, but never twice in a row while others wait."""

from __future__ import annotations

import asyncio

import pytest

from storage.sqlite_lock import WriteLock


async def queue_up(lock: WriteLock, order: list[str], name: str, urgent: bool) -> None:
    await lock.acquire(urgent=urgent)
    order.append(name)
    await asyncio.sleep(0)
    lock.release()


async def settle() -> None:
    for _ in range(5):
        await asyncio.sleep(0)


async def test_an_urgent_waiter_goes_before_the_others_but_not_twice_in_a_row() -> None:
    lock = WriteLock()
    order: list[str] = []
    await lock.acquire()
    tasks = [asyncio.create_task(queue_up(lock, order, "n1", urgent=False))]
    await settle()
    tasks.append(asyncio.create_task(queue_up(lock, order, "n2", urgent=False)))
    await settle()
    tasks.append(asyncio.create_task(queue_up(lock, order, "u1", urgent=True)))
    await settle()
    tasks.append(asyncio.create_task(queue_up(lock, order, "u2", urgent=True)))
    await settle()
    lock.release()
    await asyncio.gather(*tasks)
    assert order == ["u1", "n1", "u2", "n2"]
    assert not lock.locked()


async def test_waiters_of_one_kind_go_in_arrival_order() -> None:
    lock = WriteLock()
    order: list[str] = []
    await lock.acquire()
    tasks = []
    for n in range(4):
        tasks.append(asyncio.create_task(queue_up(lock, order, f"n{n}", urgent=False)))
        await settle()
    lock.release()
    await asyncio.gather(*tasks)
    assert order == ["n0", "n1", "n2", "n3"]


async def test_a_woken_waiter_that_is_cancelled_passes_the_lock_on() -> None:
    lock = WriteLock()
    order: list[str] = []
    await lock.acquire()
    first = asyncio.create_task(queue_up(lock, order, "u", urgent=True))
    await settle()
    second = asyncio.create_task(queue_up(lock, order, "n", urgent=False))
    await settle()
    lock.release()  # wakes the urgent one ...
    first.cancel()  # ... which is cancelled before it runs
    with pytest.raises(asyncio.CancelledError):
        await first
    await second
    assert order == ["n"]
    assert not lock.locked()


async def test_a_free_lock_is_taken_at_once_and_release_needs_a_holder() -> None:
    lock = WriteLock()
    async with lock.held():
        assert lock.locked()
    assert not lock.locked()
    with pytest.raises(RuntimeError):
        lock.release()
