"""SQLite-specific behaviour beyond the contract: migrations, cancellation safety."""

from __future__ import annotations

import asyncio
import os
import sqlite3
import stat
import threading
from pathlib import Path
from typing import Any

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


async def test_a_version_3_database_upgrades_and_keeps_its_messages(tmp_path: Path) -> None:
    path = tmp_path / "v3.db"
    with sqlite3.connect(path) as db:
        for number, script in enumerate(MIGRATIONS[:3], start=1):
            db.executescript(script)
            db.execute(f"PRAGMA user_version = {number}")
        db.execute("INSERT INTO conversations (id, platform, created_at) VALUES ('a/b/c/', 'a', 1)")
        db.execute(
            "INSERT INTO messages (conversation_id, seq, message_uid, message_id, author_id, "
            "author_name, text, created_at) VALUES ('a/b/c/', 1, 'a/b/m1', 'm1', 'u', 'n', 'hi', 1)"
        )
    store = SqliteStore(str(path))
    await store.open()
    try:
        [kept] = await store.messages("a/b/c/")
        assert (kept.text, kept.via, kept.attachments) == ("hi", "", ())
        assert await store.catch_up_points("a", 2.0, 2.0) == {"a/b/c/": "m1"}
    finally:
        await store.close()


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


def connection_threads() -> set[threading.Thread]:
    """aiosqlite's worker threads alive now (other tests' closing stores may still be exiting)."""
    return {t for t in threading.enumerate() if "_connection_worker_thread" in t.name}


async def test_a_caller_cancelled_while_begin_waits_is_cancelled_even_when_begin_then_fails(
    tmp_path: Path,
) -> None:
    """Another process holds the write lock; the caller is cancelled while its BEGIN waits, and
    the BEGIN then fails "database is locked". The caller must see its cancellation, not a
    StoreError: a loop that catches store errors and tries again would never stop at shutdown."""
    path = tmp_path / "b.db"
    store = SqliteStore(str(path), busy_timeout_ms=300)
    await store.open()
    locker = sqlite3.connect(path, isolation_level=None, timeout=5)
    try:
        locker.execute("BEGIN IMMEDIATE")
        task = asyncio.ensure_future(store.ingest(message(1), 0.0, T))
        await asyncio.sleep(0.1)  # BEGIN IMMEDIATE is waiting within the busy timeout
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
    finally:
        locker.close()
        await store.close()


@pytest.mark.parametrize("content", ["not a database", "newer schema", "foreign tables"])
async def test_a_failed_open_closes_its_connection(tmp_path: Path, content: str) -> None:
    """aiosqlite's worker thread would keep the process alive after the error is reported."""
    path = tmp_path / "x.db"
    if content == "not a database":
        path.write_bytes(b"plain text, not SQLite\n" * 50)
    else:
        with sqlite3.connect(path) as db:
            if content == "newer schema":
                db.execute(f"PRAGMA user_version = {len(MIGRATIONS) + 1}")
            else:
                db.execute("CREATE TABLE conversations (name TEXT)")
    before = connection_threads()  # an earlier test's connection may still be winding down
    store = SqliteStore(str(path))
    with pytest.raises(StoreError):
        await store.open()
    for _ in range(1000):  # a bounded wait for the thread to exit (what is asserted is awaited)
        if not connection_threads() - before:
            break
        await asyncio.sleep(0.01)
    assert not connection_threads() - before, "the failed open left its worker thread running"
    await store.close()  # still safe afterwards


def file_modes(folder: Path) -> dict[str, int]:
    return {f.name: stat.S_IMODE(f.stat().st_mode) for f in folder.iterdir()}


async def test_the_database_and_its_wal_are_private_to_their_owner(tmp_path: Path) -> None:
    previous = os.umask(0o022)  # the usual default, which would make new files 0644
    try:
        store = SqliteStore(str(tmp_path / "private.db"))
        await store.open()
        await store.ingest(message(1), 0.0, T)
        modes = file_modes(tmp_path)
        await store.close()
    finally:
        os.umask(previous)
    assert modes == {
        "private.db": 0o600, "private.db-shm": 0o600, "private.db-wal": 0o600,
    }  # fmt: skip


def test_the_service_unit_keeps_new_files_private() -> None:
    unit = (Path(__file__).resolve().parent.parent / "deploy" / "burstbot.service").read_text()
    service = unit.split("[Service]", 1)[1].split("\n[", 1)[0]
    assert "UMask=0077" in service.splitlines()


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
    for _ in range(1000):  # a bounded wait for the threads to end: what is asserted is awaited
        if not [t for t in set(threading.enumerate()) - before if t.is_alive()]:
            break
        await asyncio.sleep(0.01)
    assert not [t for t in set(threading.enumerate()) - before if t.is_alive()]


async def test_a_new_file_another_process_is_writing_to_opens_once_it_is_done(
    tmp_path: Path,
) -> None:
    """Two processes started together on a fresh file: while another opener holds a write lock
    on the file (it has not switched it to WAL yet), SQLite refuses the switch to WAL at once,
    without its busy timeout. The store must wait for the lock like any other statement does,
    not fail."""
    path = str(tmp_path / "fresh.db")
    other = sqlite3.connect(path, isolation_level=None, check_same_thread=False)
    other.execute("BEGIN IMMEDIATE")
    other.execute("CREATE TABLE first_opener (x)")
    done = threading.Timer(0.3, lambda: other.execute("COMMIT"))
    done.start()
    store = SqliteStore(path)
    try:
        await store.open()
        assert await store.current_version("nobody") == 0
    finally:
        done.join()
        other.close()
        await store.close()


async def test_waiting_for_another_process_s_write_lock_never_blocks_the_event_loop(
    tmp_path: Path,
) -> None:
    """While another process holds the write lock, BEGIN waits on the connection's thread (the
    busy timeout) and the event loop keeps running."""
    path = str(tmp_path / "shared.db")
    store = SqliteStore(path)
    await store.open()
    other = sqlite3.connect(path, isolation_level=None, check_same_thread=False)
    try:
        await store.ingest(message(1), 0.0, T)
        other.execute("BEGIN IMMEDIATE")
        threading.Timer(0.5, lambda: other.execute("COMMIT")).start()
        ticks = 0

        async def ticker() -> None:
            nonlocal ticks
            while True:
                await asyncio.sleep(0.01)
                ticks += 1

        running = asyncio.create_task(ticker())
        lease = await store.acquire_lease(message(1).key.id, "me", 1.0, 30.0)
        running.cancel()
        assert lease is not None
        assert ticks >= 10  # the loop ran while the lease waited for the lock
    finally:
        other.close()
        await store.close()


async def test_a_second_process_on_the_file_waits_for_the_write_lock_instead_of_failing(
    tmp_path: Path,
) -> None:
    """A second `burstbot run` started by accident on the same file: its writes wait for the
    first one's transaction (busy timeout + BEGIN IMMEDIATE) and then run the same
    compare-and-swap, so a lease still has one holder."""
    path = tmp_path / "bot.db"
    first, second = SqliteStore(str(path)), SqliteStore(str(path))
    await first.open()
    await second.open()
    try:
        await first.ingest(message(1), 0.0, T)
        cid = message(1).key.id
        async with first._transaction() as db:
            await first._rows("drop_timer", {"cid": cid, "version": 0}, db)
            arrival = asyncio.create_task(second.ingest(message(2), 1.0, T))
            theirs = asyncio.create_task(second.acquire_lease(cid, "second", 1.0, 30.0))
            async with asyncio.timeout(10):  # the second store's BEGIN is under way
                while not second._lock.locked():  # noqa: ASYNC110 (no event to await)
                    await asyncio.sleep(0.005)
            await asyncio.sleep(0.05)  # time for it to reach SQLite's busy handler
            mine = await first._one(
                "acquire_lease",
                {"cid": cid, "owner": "first", "now": 1.0, "ttl": 30.0, "takeover": False},
                db,
            )
        assert mine is not None
        assert (await arrival).status == "accepted"
        assert await theirs is None  # the first process's lease holds: one owner
        state = await second.conversation_state(cid)
        assert state is not None and state.version == 2
    finally:
        await second.close()
        await first.close()


async def test_a_writer_cancelled_while_its_commit_is_queued_leaves_no_open_transaction() -> None:
    """The caller is cancelled while its COMMIT still waits behind other work on aiosqlite's
    thread. Deciding about ROLLBACK before the COMMIT has run would roll back a transaction that
    then commits, or leave the shared connection inside one. The COMMIT runs to its end first:
    the caller is not acked (its platform retries), the retry finds the message stored, and the
    connection is left outside any transaction."""
    store = SqliteStore(":memory:")
    await store.open()
    db = store._db
    assert db is not None
    released = threading.Event()

    def hold_thread() -> int:
        released.wait(timeout=0.3)
        return 1

    await db.create_function("hold_thread", 0, hold_thread)
    busy: list[asyncio.Future[Any]] = []
    real_execute = db.execute
    ingest: list[asyncio.Task[Any]] = []

    async def commit_behind_busy_thread(sql: str) -> Any:
        busy.append(asyncio.ensure_future(real_execute("SELECT hold_thread()")))
        commit = asyncio.ensure_future(real_execute(sql))
        await asyncio.sleep(0)  # both are queued on the thread, the COMMIT behind the busy call
        ingest[0].cancel()
        released.set()
        return await commit

    def execute(sql: str, *args: object) -> Any:
        if sql == "COMMIT" and not busy:
            return commit_behind_busy_thread(sql)
        return real_execute(sql, *args)

    db.execute = execute  # type: ignore[method-assign]
    first = message(1)
    ingest.append(asyncio.create_task(store.ingest(first, 0.0, T)))
    [outcome] = await asyncio.gather(*ingest, return_exceptions=True)
    assert isinstance(outcome, asyncio.CancelledError)  # not acked: its platform retries
    db.execute = real_execute  # type: ignore[method-assign]
    await asyncio.gather(*busy)
    try:
        assert not db.in_transaction
        retried = await store.ingest(first, 1.0, T)
        assert (retried.status, retried.version) == ("duplicate", 1)  # the COMMIT ran to its end
        assert (await store.ingest(message(2), 2.0, T)).version == 2
        assert not db.in_transaction
    finally:
        await store.close()
