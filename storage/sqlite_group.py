"""Group commit for the SQLite store's transactions: one COMMIT (one fsync) for several.

Each transaction's statements run at once under the store's lock; its COMMIT is the slow part
(a round trip to aiosqlite's thread and an fsync). When other transactions are already waiting
for the lock, a finished transaction does not commit: it hands the lock on with the outer
transaction still open, and the next one runs inside it. The last one of the group (nobody
waiting, or `MAX_MEMBERS` reached) commits for all, and only then does any of them return, so a
caller still learns of its transaction only once it is durable (a failed COMMIT fails them all,
as if each had failed alone).

Rules that keep it correct:

1. Each member runs inside a SAVEPOINT: one that raises is rolled back alone, the others stay.
2. Nothing else uses the connection while a group is open: a lock holder that is not a member
   (a statement outside transactions, the ingest batch) commits the group first (`flush`).
3. A member that leaves the group open also schedules a flush behind the waiters it saw, so a
   group is committed even when those waiters are cancelled before they get the lock.
"""

from __future__ import annotations

import asyncio
import logging
import sqlite3
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass, field

import aiosqlite

from bot.core.errors import StoreError
from storage.sqlite_lock import WriteLock
from storage.sqlite_thread import to_completion

log = logging.getLogger("burstbot.storage")

MAX_MEMBERS = 8


@dataclass
class _Group:
    members: int = 0
    done: asyncio.Future[None] = field(
        default_factory=lambda: asyncio.get_running_loop().create_future()
    )


class GroupCommit:
    def __init__(
        self,
        lock: WriteLock,
        connection: Callable[[], aiosqlite.Connection],
        begin: Callable[[aiosqlite.Connection], Awaitable[None]],
    ) -> None:
        self._lock = lock
        self._connection = connection
        self._begin = begin
        self._group: _Group | None = None
        self._waiting = 0  # transactions queued for the lock
        self._flushing: set[asyncio.Task[None]] = set()

    @asynccontextmanager
    async def transaction(self, urgent: bool = False) -> AsyncIterator[aiosqlite.Connection]:
        """One member of the open group (or of a new one); returns once its group committed.
        `urgent`: before other waiters for the lock (storage/sqlite_lock.py)."""
        self._waiting += 1
        try:
            await self._lock.acquire(urgent)
        finally:
            self._waiting -= 1
        try:
            db = self._connection()
            group = self._group
            if group is None:
                await self._begin(db)
                group = self._group = _Group()
            conn = db._conn
            conn.execute("SAVEPOINT member")
            try:
                yield db
            except BaseException:
                conn.execute("ROLLBACK TO member")
                conn.execute("RELEASE member")
                if group.members == 0:  # nobody else's work is in it: end it here
                    self._group = None
                    await roll_back(db, "a failed write")
                else:
                    await self.flush()
                raise
            conn.execute("RELEASE member")
            group.members += 1
            if self._waiting and group.members < MAX_MEMBERS:
                self._flush_later(group)
            else:
                await self.flush()
        finally:
            self._lock.release()
        await asyncio.shield(group.done)

    async def flush(self) -> None:
        """Commit the open group, if any (the caller holds the lock)."""
        group, self._group = self._group, None
        if group is None:
            return
        db = self._connection()
        try:
            await to_completion(db.execute("COMMIT"))
        except sqlite3.Error as exc:
            await roll_back(db, "a failed commit")
            group.done.set_exception(StoreError(f"commit failed: {exc}"))
            group.done.exception()  # retrieved here: each member that waits re-raises it
        except asyncio.CancelledError:
            group.done.set_result(None)  # to_completion: the COMMIT ran to its end
            raise
        else:
            group.done.set_result(None)

    def _flush_later(self, group: _Group) -> None:
        async def flush_if_still_open() -> None:
            async with self._lock.held():
                if self._group is group:
                    await self.flush()

        task = asyncio.ensure_future(flush_if_still_open())
        self._flushing.add(task)
        task.add_done_callback(self._flushing.discard)


async def roll_back(db: aiosqlite.Connection, after: str) -> None:
    """Undo an open transaction after a failure that is reported anyway; a rollback that fails
    too (the connection is gone) is logged, and the first failure goes up."""
    try:
        await to_completion(db.execute("ROLLBACK"))
    except Exception as exc:
        log.warning("sqlite: rollback after %s failed too (%r)", after, exc)
