"""The SQLite store on aiosqlite: the default for one process, and correct for several on a file.

The steps are the shared SQL store's (storage/sql_store.py); SQLite supplies what differs:

- one connection; a lock keeps coroutines from interleaving statements inside each other's
  transactions, and hands the next turn to a waiting platform event first (storage/turns.py).
  Every transaction starts with `BEGIN IMMEDIATE` (a deferred one fails with SQLITE_BUSY
  instead of waiting), and every statement runs on aiosqlite's thread to its end even if its
  caller is cancelled (storage/sqlite_thread.py), so the connection is never left mid-way;
- WAL with a busy timeout (the switch to WAL retried within it): a second process on the file
  waits for the write lock and runs the same compare-and-swap statements (docs/scaling.md);
- erased means gone from disk: `secure_delete` zeroes what a statement frees, and every erase
  ends with a checkpoint that copies the write-ahead log back and truncates it (`_off_disk`);
- numbered migrations tracked in `PRAGMA user_version`;
- lists travel as JSON text, and the shared SQL's LEAST/GREATEST run as SQLite's MIN/MAX;
- the protocol's clock (G12) is the host's: the caller's `now` is the database's.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import os
import re
import sqlite3
from collections.abc import AsyncIterator, Iterable, Sequence
from contextlib import asynccontextmanager
from typing import Any

import aiosqlite

from bot.core.errors import StoreError
from storage.queries import load_queries, migrations, on_clock
from storage.rows import Params, Row
from storage.sql_store import SqlStore
from storage.sqlite_thread import to_completion
from storage.turns import ArrivalsFirst

log = logging.getLogger("burstbot.storage")
_ROW_LOCK = re.compile(r"\bFOR (NO KEY )?UPDATE( OF \w+)?( SKIP LOCKED)?")
_IN_LIST = re.compile(r"= ANY\(CAST\((:\w+) AS TEXT\[\]\)\)")


def _for_sqlite(sql: str) -> str:
    """The shared statements' LEAST and GREATEST are SQLite's multi-argument MIN and MAX, their
    lists are JSON text, and their row locks go (`BEGIN IMMEDIATE` holds the write lock); the
    database's clock is the host's, so `:db_now` is the caller's `:now` and `:skew` is 0."""
    sql = _ROW_LOCK.sub("", on_clock(sql, db_now=":now", skew="0.0"))
    sql = _IN_LIST.sub(r"IN (SELECT value FROM json_each(\1))", sql)
    return re.sub(r"\bGREATEST\(", "MAX(", re.sub(r"\bLEAST\(", "MIN(", sql))


FIRST_SCHEMA_TYPES = {
    "BIGINT GENERATED ALWAYS AS IDENTITY PRIMARY KEY": "INTEGER PRIMARY KEY AUTOINCREMENT",
    "TEXT[] NOT NULL DEFAULT '{}'": "TEXT NOT NULL DEFAULT '[]'",  # a JSON list
    "BOOLEAN NOT NULL DEFAULT FALSE": "INTEGER NOT NULL DEFAULT 0",
    "DOUBLE PRECISION": "REAL",
    "BIGINT": "INTEGER",
}
"""SQLite's names for the types of the first two migrations, which sql_store.sql writes in
PostgreSQL's: a fresh file gets the schema SQLite databases always had (tests/test_schema.py).
Later migrations are written in names both dialects read, and are left as they are."""


def _sqlite_types(script: str) -> str:
    for postgres_type, sqlite_type in FIRST_SCHEMA_TYPES.items():
        script = script.replace(postgres_type, sqlite_type)
    return script


Q = {name: _for_sqlite(sql) for name, sql in load_queries("sql_store.sql", "sqlite.sql").items()}
MIGRATIONS = [
    _sqlite_types(script) if number <= 2 else script
    for number, script in enumerate(migrations(Q), start=1)
]


class SqliteStore(SqlStore[aiosqlite.Connection]):
    MIGRATIONS = MIGRATIONS

    def __init__(self, path: str, busy_timeout_ms: int = 10_000) -> None:
        self.path = path
        self.busy_timeout_ms = busy_timeout_ms
        self._db: aiosqlite.Connection | None = None
        self._lock = ArrivalsFirst()
        self._wal = False
        self._checkpoint_owed = False  # a checkpoint could not truncate the log yet

    async def open(self) -> None:
        """Connect, configure and migrate. On any failure the connection is closed again: its
        worker thread would otherwise keep the process alive after the error is reported."""
        try:
            _create_private(self.path)
            self._db = await aiosqlite.connect(self.path, isolation_level=None)
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
            await self._db.execute("PRAGMA secure_delete = ON")
            await self._migrate()
        except BaseException as exc:
            await self.close()
            if isinstance(exc, sqlite3.Error):
                raise StoreError(f"cannot open SQLite database {self.path!r}: {exc}") from exc
            raise

    async def _switch_to_wal(self, db: aiosqlite.Connection) -> None:
        """SQLite answers "database is locked" at once, without its busy timeout, when another
        process switches a new file to WAL at the same moment (two processes started together on
        a fresh file): retry within the busy timeout instead."""
        loop = asyncio.get_running_loop()
        give_up = loop.time() + self.busy_timeout_ms / 1000
        while True:
            try:
                mode = await (await db.execute("PRAGMA journal_mode = WAL")).fetchone()
                self._wal = mode is not None and str(mode[0]).lower() == "wal"
                return
            except sqlite3.OperationalError as exc:
                if "locked" not in str(exc) or loop.time() >= give_up:
                    raise
            await asyncio.sleep(0.02)

    async def close(self) -> None:
        """Safe to call more than once, and after a failed `open`."""
        db, self._db = self._db, None
        if db is not None:
            async with self._lock.turn():  # a statement in progress ends first
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

    def _open_db(self) -> aiosqlite.Connection:
        if self._db is None:
            raise StoreError("store is not open")
        return self._db

    @asynccontextmanager
    async def _transaction(self, arrival: bool = False) -> AsyncIterator[aiosqlite.Connection]:
        """BEGIN IMMEDIATE ... COMMIT in a turn of the lock (BEGIN waits for another process's
        write lock within the busy timeout); anything raised, a cancellation too, rolls back once
        the statement in progress has ended."""
        async with self._lock.turn(arrival):
            db = self._open_db()
            try:
                await _run(db, "BEGIN IMMEDIATE", "cannot begin transaction")
                yield db
                await _run(db, "COMMIT", "commit failed")
            except BaseException:
                await _roll_back(db)
                raise

    async def _rows(
        self, name: str, params: Params, db: aiosqlite.Connection | None = None
    ) -> list[Row]:
        """Inside `db`'s transaction (the caller holds the lock), or alone under the lock."""
        try:
            if db is not None:
                return list(await to_completion(db.execute_fetchall(Q[name], params)))
            async with self._lock.turn():
                statement = self._open_db().execute_fetchall(Q[name], params)
                return list(await to_completion(statement))
        except (sqlite3.Error, ValueError, OverflowError) as exc:  # bad input too: a clear error
            raise StoreError(f"{name}: {exc}") from exc

    async def _off_disk(self) -> None:
        """`secure_delete` zeroes the freed bytes in the pages an erase writes, but those pages go
        to the write-ahead log, and the log keeps the pages as they were before, text and all,
        until a checkpoint copies it back and truncates it: the checkpoint runs here, in a turn
        of the lock, so never inside this connection's own transaction. Another connection's
        reader on an older snapshot holds it back; SQLite waits for it within the busy timeout.
        If the log still could not be truncated, a warning names it, and the next erase or
        retention sweep (hourly, in every process) tries again."""
        if not self._wal:
            return
        async with self._lock.turn():
            try:
                checkpoint = self._open_db().execute_fetchall("PRAGMA wal_checkpoint(TRUNCATE)")
                [(busy, _, _)] = await to_completion(checkpoint)  # busy, log and copied frames
                reason = "another connection is still reading an older snapshot" if busy else ""
            except sqlite3.Error as exc:
                reason = str(exc)
        if reason:
            log.warning(
                "storage: erased text may still be readable in %s-wal: its checkpoint could not "
                "truncate it (%s); the next erase or retention sweep tries again",
                self.path, reason,
            )  # fmt: skip
        elif self._checkpoint_owed:
            log.info("storage: %s-wal checkpointed: the erased text is off the disk", self.path)
        self._checkpoint_owed = bool(reason)

    def _array(self, values: Sequence[str]) -> str:
        return json.dumps(list(values))

    def _strings(self, value: Any) -> tuple[str, ...]:
        return tuple(json.loads(value))


async def _run(db: aiosqlite.Connection, statement: str, failure: str) -> None:
    try:
        await to_completion(db.execute(statement))
    except sqlite3.Error as exc:
        raise StoreError(f"{failure}: {exc}") from exc


async def _roll_back(db: aiosqlite.Connection) -> None:
    """Undo the open transaction, if the failure left one (a failed COMMIT may not); a rollback
    that fails too (the connection is gone) leaves the first failure to be reported."""
    with contextlib.suppress(sqlite3.Error, ValueError):
        if db.in_transaction:
            await to_completion(db.execute("ROLLBACK"))


def _create_private(path: str) -> None:
    """Create a new database file readable by its owner only (0600) before SQLite opens it.

    SQLite gives the WAL and shared-memory files the database file's permissions, so they are
    private too. An existing file is left as it is, and so are `:memory:` and a `file:` URI (not a
    plain path).
    """
    if path == ":memory:" or path.startswith("file:"):
        return
    with contextlib.suppress(FileExistsError):
        os.close(os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600))


def _statements(script: str) -> Iterable[str]:
    """Split a migration script into statements (no statement of ours contains a semicolon)."""
    return (s.strip() for s in script.split(";") if s.strip())
