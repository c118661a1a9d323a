"""The SQLite store on aiosqlite: the default for one process, and safe for several on one file.

The steps are the shared SQL store's (storage/sql_store.py); SQLite supplies what differs:

- one connection per store, so an asyncio lock keeps coroutines from interleaving statements inside
  each other's transactions. Every transaction starts with `BEGIN IMMEDIATE` (a deferred one fails
  with SQLITE_BUSY instead of waiting), and every statement, BEGIN, COMMIT and ROLLBACK runs to
  completion even if its caller is cancelled, so the shared connection is never left mid-way;
- WAL with a busy timeout; numbered migrations tracked in `PRAGMA user_version`;
- group commit for ingest (storage/sqlite_batch.py);
- lists travel as JSON text, and the shared SQL's LEAST/GREATEST run as SQLite's MIN/MAX.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import re
import sqlite3
from collections.abc import AsyncIterator, Awaitable, Iterable, Sequence
from contextlib import asynccontextmanager
from typing import Any, TypeVar

import aiosqlite

from bot.core.errors import StoreError
from bot.core.events import IncomingMessage
from bot.core.store import IngestResult, Timing
from storage.queries import load_queries, migrations
from storage.rows import Params, Row
from storage.sql_store import SqlStore
from storage.sqlite_batch import IngestBatcher, QueuedIngest, apply_ingest_batch


def _for_sqlite(sql: str) -> str:
    """The shared statements' LEAST and GREATEST are SQLite's multi-argument MIN and MAX."""
    return re.sub(r"\bGREATEST\(", "MAX(", re.sub(r"\bLEAST\(", "MIN(", sql))


Q = {name: _for_sqlite(sql) for name, sql in load_queries("sql_store.sql", "sqlite.sql").items()}
MIGRATIONS = migrations(Q)
T = TypeVar("T")


class SqliteStore(SqlStore[aiosqlite.Connection]):
    MIGRATIONS = MIGRATIONS

    def __init__(self, path: str, busy_timeout_ms: int = 10_000) -> None:
        self.path = path
        self.busy_timeout_ms = busy_timeout_ms
        self._db: aiosqlite.Connection | None = None
        self._lock = asyncio.Lock()
        self._batcher = IngestBatcher(self._ingest_batch)

    async def open(self) -> None:
        """Connect, set up and migrate; on failure close again (aiosqlite's connection thread
        would otherwise keep the process from exiting)."""
        try:
            self._db = await aiosqlite.connect(self.path, isolation_level=None)
            self._db.row_factory = sqlite3.Row
            await self._db.execute(f"PRAGMA busy_timeout = {int(self.busy_timeout_ms)}")
            if self.path != ":memory:":
                await self._db.execute("PRAGMA journal_mode = WAL")
            await self._db.execute("PRAGMA synchronous = FULL")
            await self._db.execute("PRAGMA foreign_keys = ON")
            await self._migrate()
            for statement in _statements(Q["create_ingest_batch"]):
                await self._db.execute(statement)
        except BaseException as exc:
            if self._db is not None:
                with contextlib.suppress(Exception):
                    await self._db.close()
                self._db = None
            if isinstance(exc, sqlite3.Error):
                raise StoreError(f"cannot open SQLite database {self.path!r}: {exc}") from exc
            raise

    async def close(self) -> None:
        await self._batcher.wait_idle()
        if self._db is not None:
            await self._db.close()
            self._db = None

    # the seam --------------------------------------------------------------------------------
    async def _schema_in_use(self, db: aiosqlite.Connection) -> int:
        row = await (await db.execute("PRAGMA user_version")).fetchone()
        return int(row[0]) if row else 0

    async def _migrate_to(self, db: aiosqlite.Connection, number: int, script: str) -> None:
        for statement in _statements(script):
            await db.execute(statement)
        await db.execute(f"PRAGMA user_version = {number}")

    def _conn(self) -> aiosqlite.Connection:
        if self._db is None:
            raise StoreError("store is not open")
        return self._db

    @asynccontextmanager
    async def _transaction(self) -> AsyncIterator[aiosqlite.Connection]:
        """BEGIN IMMEDIATE ... COMMIT under the lock; a cancellation is re-raised afterwards."""
        async with self._lock:
            db = self._conn()
            try:
                await _to_completion(db.execute("BEGIN IMMEDIATE"))
            except sqlite3.Error as exc:
                raise StoreError(f"cannot begin transaction: {exc}") from exc
            except asyncio.CancelledError:  # BEGIN ran; undo it before giving up the lock
                with contextlib.suppress(Exception):
                    await _to_completion(db.execute("ROLLBACK"))
                raise
            try:
                yield db
            except BaseException:
                with contextlib.suppress(Exception):
                    await _to_completion(db.execute("ROLLBACK"))
                raise
            try:
                await _to_completion(db.execute("COMMIT"))
            except sqlite3.Error as exc:
                with contextlib.suppress(Exception):
                    await _to_completion(db.execute("ROLLBACK"))
                raise StoreError(f"commit failed: {exc}") from exc

    async def _rows(
        self, name: str, params: Params, db: aiosqlite.Connection | None = None
    ) -> list[Row]:
        """execute_fetchall is one call on aiosqlite's thread: execute, fetch and close."""
        try:
            if db is not None:
                return list(await _to_completion(db.execute_fetchall(Q[name], params)))
            async with self._lock:
                return list(await _to_completion(self._conn().execute_fetchall(Q[name], params)))
        except sqlite3.Error as exc:
            raise StoreError(f"{name}: {exc}") from exc

    def _array(self, values: Sequence[str]) -> str:
        return json.dumps(list(values))

    def _strings(self, value: Any) -> tuple[str, ...]:
        return tuple(json.loads(value))

    # 1. arrival: group commit ----------------------------------------------------------------
    async def ingest(self, message: IncomingMessage, now: float, timing: Timing) -> IngestResult:
        """Queued for group commit (storage/sqlite_batch.py); returns once the batch committed."""
        return await self._batcher.submit(message, now, timing)

    async def _ingest_batch(self, batch: Sequence[QueuedIngest]) -> list[IngestResult]:
        async with self._lock:
            return await apply_ingest_batch(self._conn(), batch)


async def _to_completion(statement: Awaitable[T]) -> T:
    """Await a statement to its end even through cancellation, then re-raise the cancellation."""
    task = asyncio.ensure_future(statement)
    cancelled = False
    while True:
        try:
            result = await asyncio.shield(task)
            break
        except asyncio.CancelledError:
            if task.cancelled():
                raise
            cancelled = True
    if cancelled:
        raise asyncio.CancelledError
    return result


def _statements(script: str) -> Iterable[str]:
    """Split a migration script into statements (no statement of ours contains a semicolon)."""
    return (s.strip() for s in script.split(";") if s.strip())
