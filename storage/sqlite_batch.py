"""Group commit for SQLite ingest: concurrent `ingest` calls share one transaction.

aiosqlite runs every statement on its own thread and hands the result back to the event loop, and
every commit waits for the disk; one transaction per message therefore caps ingest at a few hundred
messages a second. Here callers queue their message and await their own future; one writer task
takes whatever is queued (up to `max_batch`), applies it with one set-based statement per step
inside one `BEGIN IMMEDIATE` transaction, commits, and only then answers every caller (G7: a
caller's await returns after its message is durable). A lone message is written at once: batches
form only while a previous batch is committing.

Every caller gets its own result or its own error. Duplicates are found per message, including two
copies of one id in the same batch (the first in arrival order wins, as if they had run one after
another). If a batch fails because one message cannot be stored (bad input), it is rolled back and
its messages are retried one by one, so only the bad one gets the error; an operational failure
(database locked beyond the busy timeout, disk full) fails every caller of that batch.
"""

from __future__ import annotations

import asyncio
import sqlite3
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass

import aiosqlite

from bot.core.errors import StoreError
from bot.core.events import IncomingMessage
from bot.core.store import IngestResult, Timing
from storage.queries import load_queries
from storage.rows import message_params
from storage.sqlite_thread import to_completion

Q = load_queries("sqlite.sql")
MAX_BATCH = 256
STEPS = (
    "ensure_batch_conversations",
    "number_batch_messages",
    "insert_batch_messages",
    "bump_batch_versions",
    "arm_batch_timers",
)


@dataclass(frozen=True, slots=True)
class QueuedIngest:
    message: IncomingMessage
    now: float
    timing: Timing
    result: asyncio.Future[IngestResult]


WriteBatch = Callable[[Sequence[QueuedIngest]], Awaitable[list[IngestResult]]]


class IngestBatcher:
    """A queue of pending ingests and the one writer task that drains it."""

    def __init__(self, write_batch: WriteBatch, max_batch: int = MAX_BATCH) -> None:
        self._write_batch = write_batch
        self._max_batch = max_batch
        self._queue: list[QueuedIngest] = []
        self._writer: asyncio.Task[None] | None = None

    async def submit(self, message: IncomingMessage, now: float, timing: Timing) -> IngestResult:
        result: asyncio.Future[IngestResult] = asyncio.get_running_loop().create_future()
        self._queue.append(QueuedIngest(message, now, timing, result))
        if self._writer is None or self._writer.done():
            self._writer = asyncio.create_task(self._drain())
        return await result

    async def wait_idle(self) -> None:
        """Let queued ingests finish (before closing the connection)."""
        if self._writer is not None:
            await asyncio.gather(self._writer, return_exceptions=True)

    async def _drain(self) -> None:
        batch: list[QueuedIngest] = []
        try:
            while self._queue:
                batch = self._queue[: self._max_batch]
                del self._queue[: len(batch)]
                # A caller cancelled while queued never got an ack; its platform will redeliver.
                live = [item for item in batch if not item.result.done()]
                if live:
                    await self._write(live)
        finally:  # cancelled (event loop closing): nobody may wait forever
            stranded, self._queue = [*batch, *self._queue], []
            for item in stranded:
                _fail(item, StoreError("the store stopped before this message was written"))

    async def _write(self, batch: Sequence[QueuedIngest]) -> None:
        try:
            results = await self._write_batch(batch)
        except Exception as exc:
            if len(batch) == 1 or isinstance(exc, sqlite3.OperationalError | StoreError):
                for item in batch:
                    _fail(item, exc)
                return
            for item in batch:  # bad input somewhere: isolate it
                await self._write([item])
            return
        for item, result in zip(batch, results, strict=True):
            if not item.result.done():
                item.result.set_result(result)


async def apply_ingest_batch(
    db: aiosqlite.Connection,
    batch: Sequence[QueuedIngest],
    begin: Callable[[aiosqlite.Connection], Awaitable[None]],
) -> list[IngestResult]:
    """Write a batch in one transaction; the caller holds the connection's lock.

    `begin` starts it (at once on this thread when the write lock is free). The statements then
    run at once on this thread, like those of the store's other transactions: the scratch table
    (private to this connection) is filled, every step runs set-based, the results are read and
    the scratch table cleared. Only the COMMIT (the disk) goes to aiosqlite's thread: one round
    trip per batch, where there were five, each waiting under load for that thread to get a core
    and for the event loop to pick up its result.
    """
    rows = [
        {**message_params(item.message, item.now), "k": k, "quiet": item.timing.quiet_seconds,
         "max_wait": item.timing.max_wait_seconds,
         "speculate_after": item.timing.speculate_after_seconds}
        for k, item in enumerate(batch)
    ]  # fmt: skip
    await begin(db)
    conn = db._conn
    try:
        conn.executemany(Q["fill_ingest_batch"], rows)
        for step in STEPS:
            conn.execute(Q[step])
        results = conn.execute(Q["ingest_batch_results"]).fetchall()
        conn.execute(Q["clear_ingest_batch"])
        await to_completion(db.execute("COMMIT"))
    except BaseException:
        # Every step above has finished (see sqlite_thread.py), so the state is the real one.
        if conn.in_transaction:
            await to_completion(db.execute("ROLLBACK"))
        raise
    return [
        IngestResult("accepted", r["cid"], int(r["seq"]), float(r["due_at"]), _maybe(r["start_at"]))
        if r["seq"] is not None
        else IngestResult("duplicate", r["cid"], int(r["version"]))
        for r in results
    ]


def _maybe(value: float | None) -> float | None:
    return None if value is None else float(value)


def _fail(item: QueuedIngest, exc: Exception) -> None:
    if item.result.done():
        return
    if isinstance(exc, StoreError):
        item.result.set_exception(exc)
        return
    error = StoreError(f"cannot store message {item.message.message_id!r}: {exc}")
    error.__cause__ = exc
    item.result.set_exception(error)
