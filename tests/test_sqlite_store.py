"""SQLite-specific behaviour beyond the contract: migrations, cancellation safety."""

from __future__ import annotations

import asyncio
import sqlite3
import threading
from pathlib import Path

import pytest

from bot.core.errors import StoreError
from bot.core.store import Timing
from storage.sqlite import MIGRATIONS, SqliteStore
from tests.conftest import message

T = Timing(1.5, 8.0)


@pytest.mark.parametrize("passes", range(12))
async def test_a_cancelled_caller_never_leaves_the_connection_in_a_transaction(
    passes: int,
) -> None:
    store = SqliteStore(":memory:")
    await store.open()
    try:
        task = asyncio.ensure_future(store.ingest(message(1), 0.0, T))
        for _ in range(passes):
            await asyncio.sleep(0)
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)
        result = await store.ingest(message(2), 1.0, T)  # must not fail "within a transaction"
        assert result.status == "accepted"
        assert await store.current_version(result.conversation_id) in (1, 2)
    finally:
        await store.close()


async def test_migrations_are_numbered_and_run_once(tmp_path: Path) -> None:
    path = tmp_path / "m.db"
    for _ in range(2):
        store = SqliteStore(str(path))
        await store.open()
        await store.close()
    with sqlite3.connect(path) as db:
        assert db.execute("PRAGMA user_version").fetchone()[0] == len(MIGRATIONS)
        assert db.execute("PRAGMA journal_mode").fetchone()[0] == "wal"


async def test_a_newer_schema_is_refused_with_a_clear_error(tmp_path: Path) -> None:
    path = tmp_path / "future.db"
    with sqlite3.connect(path) as db:
        db.execute(f"PRAGMA user_version = {len(MIGRATIONS) + 5}")
    store = SqliteStore(str(path))
    with pytest.raises(StoreError, match="newer than this burstbot"):
        await store.open()
    await store.close()


async def test_an_unopenable_path_is_a_store_error(tmp_path: Path) -> None:
    store = SqliteStore(str(tmp_path / "missing-dir" / "x.db"))
    with pytest.raises(StoreError, match="cannot open"):
        await store.open()


@pytest.mark.parametrize("passes", range(8))
async def test_a_cancelled_single_statement_leaves_no_statement_in_progress(passes: int) -> None:
    store = SqliteStore(":memory:")
    await store.open()
    try:
        for n in range(3):
            await store.ingest(message(n), float(n), T)
        task = asyncio.ensure_future(store.due_timers(100.0, 10))
        for _ in range(passes):
            await asyncio.sleep(0)
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)
        assert (await store.ingest(message(9), 5.0, T)).status == "accepted"  # commits cleanly
        assert await store.release_owner("nobody") == 0
    finally:
        await store.close()


async def test_an_open_that_fails_leaves_no_connection_thread_behind(tmp_path: Path) -> None:
    """A database locked past the busy timeout at start: the error, and nothing left running
    (aiosqlite's non-daemon thread kept such a process alive after its error, never exiting)."""
    path = tmp_path / "locked.db"
    first = SqliteStore(str(path))
    await first.open()
    await first.close()
    before = set(threading.enumerate())
    holder = sqlite3.connect(path, isolation_level=None)
    holder.execute("BEGIN EXCLUSIVE")
    try:
        store = SqliteStore(str(path), busy_timeout_ms=50)
        with pytest.raises(StoreError, match="locked"):
            await store.open()
    finally:
        holder.execute("ROLLBACK")
        holder.close()
    for _ in range(100):
        if not [t for t in set(threading.enumerate()) - before if t.is_alive()]:
            break
        await asyncio.sleep(0.01)
    assert not [t for t in set(threading.enumerate()) - before if t.is_alive()]
