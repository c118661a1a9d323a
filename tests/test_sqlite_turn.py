"""Writers on one SQLite file take turns through a lock file the kernel queues
(storage/sqlite_turn.py), not through SQLite's sleep-and-retry busy handler."""

from __future__ import annotations

import asyncio
import contextlib
import fcntl
import os
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import pytest

from bot.core.store import Timing
from storage.sqlite import SqliteStore
from tests.conftest import message

T = Timing(1.5, 8.0)


@contextlib.asynccontextmanager
async def opened(path: Path, busy_timeout_ms: int = 10_000) -> AsyncIterator[SqliteStore]:
    store = SqliteStore(str(path), busy_timeout_ms=busy_timeout_ms)
    await store.open()
    try:
        yield store
    finally:
        await store.close()


@contextlib.contextmanager
def probe(path: Path) -> Iterator[int]:
    """A third party's descriptor on the lock file."""
    fd = os.open(f"{path}-writer", os.O_RDWR)
    try:
        yield fd
    finally:
        os.close(fd)


async def queued(store: SqliteStore) -> None:
    """The store found the turn taken and waits in the kernel's queue for it (bounded wait)."""
    async with asyncio.timeout(10):
        while store._turn.queued == 0:  # noqa: ASYNC110 (a thread's state, no event to await)
            await asyncio.sleep(0.005)


def turn_is_free(path: Path) -> bool:
    with probe(path) as fd:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            return False
        fcntl.flock(fd, fcntl.LOCK_UN)
        return True


async def test_a_transaction_holds_the_turn_from_begin_to_commit(tmp_path: Path) -> None:
    path = tmp_path / "bot.db"
    async with opened(path) as store:
        assert turn_is_free(path)
        async with store._transaction():
            assert not turn_is_free(path)
        assert turn_is_free(path)
        await store.ingest(message(1), 100.0, T)
        assert turn_is_free(path)


async def test_a_second_writer_waits_for_its_turn_instead_of_failing(tmp_path: Path) -> None:
    """With no busy timeout, SQLite's own lock would refuse the second writer at once
    ("database is locked"); the turn makes it wait until the first one has committed."""
    path = tmp_path / "bot.db"
    async with opened(path) as first, opened(path, busy_timeout_ms=0) as second:
        async with first._transaction():
            arrival = asyncio.create_task(second.ingest(message(1), 100.0, T))
            await queued(second)
            assert not arrival.done(), arrival.exception()
        result = await arrival
        assert result.status == "accepted"
        assert turn_is_free(path)


async def test_a_writer_cancelled_while_waiting_leaves_the_turn_free(tmp_path: Path) -> None:
    path = tmp_path / "bot.db"
    async with opened(path) as first, opened(path) as second:

        async def write() -> None:
            async with second._transaction():
                pass

        async with first._transaction():
            waiting = asyncio.create_task(write())
            await queued(second)
            waiting.cancel()
        with pytest.raises(asyncio.CancelledError):
            await waiting
        assert turn_is_free(path)
        assert (await second.ingest(message(2), 100.0, T)).status == "accepted"
        assert turn_is_free(path)


async def test_an_in_memory_database_has_no_lock_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    store = SqliteStore(":memory:")
    await store.open()
    try:
        assert (await store.ingest(message(1), 100.0, T)).status == "accepted"
    finally:
        await store.close()
    assert os.listdir(tmp_path) == []


async def test_a_lock_file_that_cannot_be_made_leaves_the_store_writing(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """The turn only orders writers; without it SQLite's own lock still keeps the data safe."""
    path = tmp_path / "bot.db"
    os.mkdir(f"{path}-writer")  # in the way: the file cannot be opened
    async with opened(path) as store:
        assert (await store.ingest(message(1), 100.0, T)).status == "accepted"
        async with store._transaction():
            pass
    assert "no writer lock file" in caplog.text
