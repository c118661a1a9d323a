"""Group commit (storage/sqlite_group.py): transactions that waited for the lock share one COMMIT,
and none returns before it is durable."""

from __future__ import annotations

import asyncio
import sqlite3
from pathlib import Path

from bot.core.store import Timing
from storage.sqlite import SqliteStore
from tests.conftest import message

T = Timing(1.5, 8.0)


async def open_store(path: Path) -> SqliteStore:
    store = SqliteStore(str(path))
    await store.open()
    async with store._transaction() as db:
        db._conn.execute("CREATE TABLE t (x INTEGER)")
    return store


async def insert(store: SqliteStore, x: int, fail: bool = False) -> None:
    async with store._transaction() as db:
        db._conn.execute("INSERT INTO t VALUES (?)", (x,))
        if fail:
            raise RuntimeError("this transaction fails")


def committed(path: Path) -> list[int]:
    """What another connection sees: only committed rows."""
    with sqlite3.connect(path) as other:
        return sorted(x for (x,) in other.execute("SELECT x FROM t"))


async def test_waiting_transactions_share_a_commit_and_return_once_it_is_durable(
    tmp_path: Path,
) -> None:
    store = await open_store(tmp_path / "g.db")
    commits: list[str] = []
    assert store._db is not None
    store._db._conn.set_trace_callback(lambda sql: commits.append(sql) if sql == "COMMIT" else None)
    try:
        results = await asyncio.gather(*(insert(store, x) for x in range(20)))
        assert results == [None] * 20
        assert committed(tmp_path / "g.db") == list(range(20))  # every one durable on return
        assert 1 <= len(commits) < 20
    finally:
        await store.close()


async def test_a_failing_member_is_rolled_back_alone(tmp_path: Path) -> None:
    store = await open_store(tmp_path / "g.db")
    try:
        outcomes = await asyncio.gather(
            insert(store, 1), insert(store, 2, fail=True), insert(store, 3),
            return_exceptions=True,
        )  # fmt: skip
        assert [type(o).__name__ for o in outcomes] == ["NoneType", "RuntimeError", "NoneType"]
        assert committed(tmp_path / "g.db") == [1, 3]
    finally:
        await store.close()


async def test_a_waiter_cancelled_before_its_turn_leaves_no_group_open(tmp_path: Path) -> None:
    """The first transaction sees the second waiting and leaves the group open for it; the second
    is cancelled before it runs. The group is still committed, and the first returns."""
    store = await open_store(tmp_path / "g.db")
    try:
        proceed = asyncio.Event()

        async def first() -> None:
            async with store._transaction() as db:
                db._conn.execute("INSERT INTO t VALUES (1)")
                await proceed.wait()

        one = asyncio.create_task(first())
        await asyncio.sleep(0.05)  # `first` holds the lock
        two = asyncio.create_task(insert(store, 2))
        await asyncio.sleep(0.05)  # `two` waits for the lock
        proceed.set()
        await asyncio.sleep(0)  # `first` finishes its body, sees `two` waiting, hands the lock on
        two.cancel()
        await asyncio.wait_for(one, 5)
        assert committed(tmp_path / "g.db") == [1]
        await store.ingest(message(1), 0.0, T)  # the store goes on working
    finally:
        await store.close()
