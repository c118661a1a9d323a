"""The SQLite store on aiosqlite: the default for one process, and safe for several on one file.

The steps are the shared SQL store's (storage/sql_store.py); SQLite supplies what differs:

- one connection that writes, so an asyncio lock keeps coroutines from interleaving statements
  inside each other's transactions. Every transaction starts with `BEGIN IMMEDIATE` (a deferred one
  fails with SQLITE_BUSY instead of waiting). What may wait for another process's lock (a BEGIN
  while it is held, statements outside transactions) or for the disk (COMMIT) runs on aiosqlite's
  thread, to completion even if its caller is cancelled (storage/sqlite_thread.py); the statements
  inside a transaction we hold run at once on the event loop's thread, through aiosqlite's
  underlying `sqlite3` connection (`_conn`, opened with `check_same_thread=False`). Either way the
  shared connection is never left mid-way;
- group commit for transactions (storage/sqlite_group.py): those already waiting for the lock
  share one COMMIT, and none returns before it;
- a second, read-only connection for the reads between a due timer and the model (`READS`);
- writers in several processes queue for SQLite's write lock in the kernel, on a lock file beside
  the database (storage/sqlite_turn.py), instead of sleeping and retrying in SQLite's busy handler;
- WAL with a busy timeout (the switch to WAL retried within it); numbered migrations tracked in
  `PRAGMA user_version`;
- group commit for ingest (storage/sqlite_batch.py); an arriving event's steps, which its ack
  waits for, go before other waiters for the connection's lock (storage/sqlite_lock.py);
- lists travel as JSON text, and the shared SQL's LEAST/GREATEST run as SQLite's MIN/MAX;
- the protocol's clock (G12) is the host's: the caller's `now` is the database's.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import re
import sqlite3
from collections.abc import Iterable, Iterator, Sequence
from contextlib import AbstractAsyncContextManager
from contextvars import ContextVar
from typing import Any

import aiosqlite

from bot.core.errors import StoreError
from bot.core.events import IncomingMessage, MessageDeleted, MessageEdited
from bot.core.store import IngestResult, Timing
from storage.queries import load_queries, migrations, on_clock
from storage.rows import Params, Row
from storage.sql_store import SqlStore
from storage.sqlite_batch import IngestBatcher, QueuedIngest, apply_ingest_batch
from storage.sqlite_group import GroupCommit, roll_back
from storage.sqlite_lock import WriteLock
from storage.sqlite_thread import to_completion
from storage.sqlite_turn import WriterTurn


def _for_sqlite(sql: str) -> str:
    """The shared statements' LEAST and GREATEST are SQLite's multi-argument MIN and MAX; the
    database's clock is the host's, so `:db_now` is the caller's `:now` and `:skew` is 0."""
    sql = on_clock(sql, db_now=":now", skew="0.0")
    return re.sub(r"\bGREATEST\(", "MAX(", re.sub(r"\bLEAST\(", "MIN(", sql))


Q = {name: _for_sqlite(sql) for name, sql in load_queries("sql_store.sql", "sqlite.sql").items()}
MIGRATIONS = migrations(Q)
# Reads that go to the second connection (`_open_reader`): the scheduler's lookups and what a
# generation reads, on the way from a due timer to the model. Other reads stay on the first one.
READS = frozenset(
    {
        "due_timers",
        "speculative_timers",
        "earliest_timers",
        "next_outbox_at",
        "pending_messages",
        "history",
    }
)


class SqliteStore(SqlStore[aiosqlite.Connection]):
    MIGRATIONS = MIGRATIONS

    def __init__(self, path: str, busy_timeout_ms: int = 10_000) -> None:
        self.path = path
        self.busy_timeout_ms = busy_timeout_ms
        self._db: aiosqlite.Connection | None = None
        self._reader: aiosqlite.Connection | None = None  # a file's reads outside transactions
        self._lock = WriteLock(on_release=self._give_back_turn_if_idle)
        self._batcher = IngestBatcher(self._ingest_batch)
        self._groups = GroupCommit(self._lock, self._conn, self._begin)
        self._turn = WriterTurn(path if _is_file(path) else None)

    async def open(self) -> None:
        """Connect, configure and migrate. On any failure the connection is closed again: its
        worker thread would otherwise keep the process alive after the error is reported."""
        try:
            _create_private(self.path)
            self._turn.open()
            # statements inside our own transactions run on the event loop's thread (`_rows`)
            self._db = await aiosqlite.connect(
                self.path, isolation_level=None, check_same_thread=False
            )
        except (sqlite3.Error, OSError) as exc:
            reason = exc.strerror if isinstance(exc, OSError) and exc.strerror else exc
            raise StoreError(f"cannot open SQLite database {self.path!r}: {reason}") from exc
        try:
            self._db.row_factory = sqlite3.Row
            await self._db.execute(f"PRAGMA busy_timeout = {int(self.busy_timeout_ms)}")
            if self.path != ":memory:":
                await self._switch_to_wal(self._db)
            await self._db.execute("PRAGMA synchronous = FULL")
            await self._db.execute("PRAGMA foreign_keys = ON")
            await self._migrate()
            for statement in _statements(Q["create_ingest_batch"]):
                await self._db.execute(statement)
            if self.path != ":memory:":
                self._reader = await self._open_reader()
        except BaseException as exc:
            await self._close_connection()
            if isinstance(exc, sqlite3.Error):
                raise StoreError(f"cannot open SQLite database {self.path!r}: {exc}") from exc
            raise

    async def _switch_to_wal(self, db: aiosqlite.Connection) -> None:
        """SQLite answers "database is locked" at once, without its busy timeout, when another
        process switches a new file to WAL at the same moment (`--workers N` on a fresh file):
        retry within the busy timeout instead."""
        loop = asyncio.get_running_loop()
        give_up = loop.time() + self.busy_timeout_ms / 1000
        while True:
            try:
                await db.execute("PRAGMA journal_mode = WAL")
                return
            except sqlite3.OperationalError as exc:
                if "locked" not in str(exc) or loop.time() >= give_up:
                    raise
            await asyncio.sleep(0.02)

    async def _open_reader(self) -> aiosqlite.Connection:
        """A second connection for `READS`: WAL lets it read the last commit while the first one
        writes, so those reads never wait behind a transaction (or its fsync)."""
        reader = await aiosqlite.connect(self.path, isolation_level=None)
        try:
            reader.row_factory = sqlite3.Row
            await reader.execute(f"PRAGMA busy_timeout = {int(self.busy_timeout_ms)}")
            await reader.execute("PRAGMA query_only = ON")
        except BaseException:
            with contextlib.suppress(sqlite3.Error, ValueError):
                await reader.close()
            raise
        return reader

    async def close(self) -> None:
        """Safe to call more than once, and after a failed `open`."""
        try:
            await self._batcher.wait_idle()
            if self._db is not None:
                async with self._lock.held():
                    await self._groups.flush()
        finally:
            await self._close_connection()

    async def _close_connection(self) -> None:
        self._turn.close()
        connections, self._db, self._reader = (self._db, self._reader), None, None
        for db in connections:
            if db is not None:
                with contextlib.suppress(sqlite3.Error, ValueError):
                    await db.close()  # stops the worker thread even when closing reports an error

    # the seam --------------------------------------------------------------------------------
    async def _schema_in_use(self, db: aiosqlite.Connection) -> int:
        row = await (await db.execute("PRAGMA user_version")).fetchone()
        return int(row[0]) if row else 0

    async def _migrate_to(self, db: aiosqlite.Connection, number: int, script: str) -> None:
        for statement in _statements(script):  # to its end: a rollback must not overtake it
            await to_completion(db.execute(statement))
        await to_completion(db.execute(f"PRAGMA user_version = {number}"))

    def _conn(self) -> aiosqlite.Connection:
        if self._db is None:
            raise StoreError("store is not open")
        return self._db

    def _transaction(self) -> AbstractAsyncContextManager[aiosqlite.Connection]:
        """BEGIN IMMEDIATE ... COMMIT under the lock, committed in a group with the transactions
        already waiting (storage/sqlite_group.py); a cancellation is re-raised afterwards."""
        return self._groups.transaction(urgent=ARRIVING.get())

    async def _begin(self, db: aiosqlite.Connection) -> None:
        """Take the writer's turn (storage/sqlite_turn.py), then BEGIN IMMEDIATE. The turn is given
        back when the lock is let go with no transaction open (`_give_back_turn_if_idle`)."""
        await self._turn.take()
        try:
            if not self._begin_at_once(db):
                await to_completion(db.execute("BEGIN IMMEDIATE"))
        except sqlite3.Error as exc:
            raise StoreError(f"cannot begin transaction: {exc}") from exc
        except asyncio.CancelledError:  # BEGIN ran; undo it before giving up the lock
            await roll_back(db, "a cancelled BEGIN")
            raise

    def _give_back_turn_if_idle(self) -> None:
        """Whenever the lock is let go: a group commit may keep its transaction open across
        holders, and keeps the turn with it."""
        try:
            open_transaction = self._db is not None and self._db._conn.in_transaction
        except ValueError:  # the connection is closed: nothing of ours is open
            open_transaction = False
        if not open_transaction:
            self._turn.give_back()

    def _begin_at_once(self, db: aiosqlite.Connection) -> bool:
        """BEGIN IMMEDIATE on this thread when the write lock is free (no round trip to the
        connection's thread); False when another process holds it: then BEGIN waits there,
        within the busy timeout, and the event loop never does."""
        conn = db._conn
        conn.execute("PRAGMA busy_timeout = 0")
        try:
            conn.execute("BEGIN IMMEDIATE")
            return True
        except sqlite3.OperationalError as exc:
            if "locked" not in str(exc) and "busy" not in str(exc):
                raise
            return False
        finally:
            conn.execute(f"PRAGMA busy_timeout = {int(self.busy_timeout_ms)}")

    async def _rows(
        self, name: str, params: Params, db: aiosqlite.Connection | None = None
    ) -> list[Row]:
        """Outside a transaction: one call on aiosqlite's thread (it may wait for another
        process's write lock). Inside one of ours: at once, on this thread. We hold the write
        lock, so nothing can wait, and a round trip to the thread costs ~100 µs where the
        statement costs a few: the lock (and the ack of everything queued behind it) is held
        for less."""
        try:
            if db is not None:
                return db._conn.execute(Q[name], params).fetchall()
            if self._reader is not None and name in READS:
                return list(await self._reader.execute_fetchall(Q[name], params))
            async with self._lock.held(urgent=ARRIVING.get()):
                await self._groups.flush()
                return list(await to_completion(self._conn().execute_fetchall(Q[name], params)))
        except sqlite3.Error as exc:
            raise StoreError(f"{name}: {exc}") from exc

    def _array(self, values: Sequence[str]) -> str:
        return json.dumps(list(values))

    def _strings(self, value: Any) -> tuple[str, ...]:
        return tuple(json.loads(value))

    # 1. arrival: group commit, and first in line for the lock -------------------------------
    async def ingest(self, message: IncomingMessage, now: float, timing: Timing) -> IngestResult:
        """Queued for group commit (storage/sqlite_batch.py); returns once the batch committed."""
        return await self._batcher.submit(message, now, timing)

    # The other steps an arriving event takes before its ack: ahead of other waiters for the
    # lock, like the ingest batch, so arrivals keep their order among themselves.
    async def edit(self, event: MessageEdited, now: float, timing: Timing) -> IngestResult:
        with _arriving():
            return await super().edit(event, now, timing)

    async def delete(self, event: MessageDeleted, now: float, timing: Timing) -> IngestResult:
        with _arriving():
            return await super().delete(event, now, timing)

    async def extend_quiet(
        self, conversation_id: str, author_id: str, until: float, now: float
    ) -> float | None:
        with _arriving():
            return await super().extend_quiet(conversation_id, author_id, until, now)

    async def thread_status(self, conversation_id: str) -> bool | None:
        with _arriving():
            return await super().thread_status(conversation_id)

    async def hold(self, message: IncomingMessage, now: float) -> None:
        with _arriving():
            await super().hold(message, now)

    async def put_note(self, conversation_id: str, name: str, value: str, now: float) -> None:
        with _arriving():  # an assistant thread's event waits for it before its ack
            await super().put_note(conversation_id, name, value, now)

    async def add_note(self, conversation_id: str, name: str, value: str, now: float) -> bool:
        with _arriving():
            return await super().add_note(conversation_id, name, value, now)

    async def _ingest_batch(self, batch: Sequence[QueuedIngest]) -> list[IngestResult]:
        """Before other waiters for the lock: acks wait for this (storage/sqlite_lock.py)."""
        async with self._lock.held(urgent=True):
            await self._groups.flush()
            return await apply_ingest_batch(self._conn(), batch, self._begin)


ARRIVING: ContextVar[bool] = ContextVar("burstbot_sqlite_arriving", default=False)
"""True while an arriving event's step runs: its turn at the lock comes first."""


@contextlib.contextmanager
def _arriving() -> Iterator[None]:
    token = ARRIVING.set(True)
    try:
        yield
    finally:
        ARRIVING.reset(token)


def _is_file(path: str) -> bool:
    """A plain path (not `:memory:`, not a `file:` URI): files beside it can be made."""
    return path != ":memory:" and not path.startswith("file:")


def _create_private(path: str) -> None:
    """Create a new database file readable by its owner only (0600) before SQLite opens it.

    SQLite gives the WAL and shared-memory files the database file's permissions, so they are
    private too. An existing file is left as it is.
    """
    if not _is_file(path):
        return
    with contextlib.suppress(FileExistsError):
        os.close(os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600))


def _statements(script: str) -> Iterable[str]:
    """Split a migration script into statements (no statement of ours contains a semicolon)."""
    return (s.strip() for s in script.split(";") if s.strip())
