"""The SQLite store on aiosqlite: the default for one process, and safe for several on one file.

WAL with a busy timeout; every read-then-write transaction starts with `BEGIN IMMEDIATE` (a deferred
one fails with SQLITE_BUSY instead of waiting); schema changes are numbered migrations tracked in
`PRAGMA user_version`. One connection per store, so an asyncio lock keeps coroutines from
interleaving statements inside each other's transactions.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import sqlite3
from collections.abc import AsyncIterator, Awaitable, Iterable, Mapping, Sequence
from contextlib import asynccontextmanager
from typing import Any, Literal, TypeVar

import aiosqlite

from bot.core.errors import StoreError
from bot.core.events import IncomingMessage, MessageDeleted, MessageEdited
from bot.core.store import (
    CommitOutcome,
    Committed,
    ConversationState,
    Discarded,
    DueTimer,
    FinalCheck,
    GenerationRecord,
    HistoryItem,
    IngestResult,
    Lease,
    NewReply,
    OutboxRow,
    StoredMessage,
    Timing,
)
from storage.ops import OperatorQueries
from storage.queries import load_queries, migrations
from storage.rows import (
    Row,
    generation_from_row,
    generation_params,
    message_from_row,
    message_uid,
    outbox_from_row,
    reply_params,
    state_from_row,
)
from storage.sqlite_batch import IngestBatcher, QueuedIngest, apply_ingest_batch

Q = load_queries("sqlite.sql")
MIGRATIONS = migrations(Q)
Params = Mapping[str, Any]
T = TypeVar("T")


class SqliteStore(OperatorQueries[aiosqlite.Connection]):
    def __init__(self, path: str, busy_timeout_ms: int = 10_000) -> None:
        self.path = path
        self.busy_timeout_ms = busy_timeout_ms
        self._db: aiosqlite.Connection | None = None
        self._lock = asyncio.Lock()
        self._batcher = IngestBatcher(self._ingest_batch)

    # lifecycle -------------------------------------------------------------------------------
    async def open(self) -> None:
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
        except sqlite3.Error as exc:
            raise StoreError(f"cannot open SQLite database {self.path!r}: {exc}") from exc

    async def _migrate(self) -> None:
        async with self._transaction() as db:
            cursor = await db.execute("PRAGMA user_version")
            row = await cursor.fetchone()
            current = int(row[0]) if row else 0
            if current > len(MIGRATIONS):
                raise StoreError(
                    f"database schema version {current} is newer than this burstbot "
                    f"({len(MIGRATIONS)}); upgrade burstbot"
                )
            for number, script in enumerate(MIGRATIONS[current:], start=current + 1):
                for statement in _statements(script):
                    await db.execute(statement)
                await db.execute(f"PRAGMA user_version = {number}")

    async def close(self) -> None:
        await self._batcher.wait_idle()
        if self._db is not None:
            await self._db.close()
            self._db = None

    @property
    def schema_version(self) -> int:
        return len(MIGRATIONS)

    # plumbing --------------------------------------------------------------------------------
    def _conn(self) -> aiosqlite.Connection:
        if self._db is None:
            raise StoreError("store is not open")
        return self._db

    @asynccontextmanager
    async def _transaction(self) -> AsyncIterator[aiosqlite.Connection]:
        """BEGIN IMMEDIATE ... COMMIT under the lock. BEGIN, COMMIT and ROLLBACK run to completion
        even if the caller is cancelled meanwhile, so a cancelled caller never leaves the shared
        connection inside a transaction (the cancellation is re-raised afterwards)."""
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
    ) -> list[sqlite3.Row]:
        # execute_fetchall runs execute, fetch and close as one call on aiosqlite's thread; run to
        # completion, a cancelled caller never leaves a statement in progress on the connection.
        try:
            if db is not None:
                return list(await _to_completion(db.execute_fetchall(Q[name], params)))
            async with self._lock:
                return list(await _to_completion(self._conn().execute_fetchall(Q[name], params)))
        except sqlite3.Error as exc:
            raise StoreError(f"{name}: {exc}") from exc

    async def _one(
        self, name: str, params: Params, db: aiosqlite.Connection | None = None
    ) -> sqlite3.Row | None:
        rows = await self._rows(name, params, db)
        return rows[0] if rows else None

    # 1. arrival ------------------------------------------------------------------------------
    async def ingest(self, message: IncomingMessage, now: float, timing: Timing) -> IngestResult:
        """Queued for group commit (storage/sqlite_batch.py); returns once the batch committed."""
        return await self._batcher.submit(message, now, timing)

    async def _ingest_batch(self, batch: Sequence[QueuedIngest]) -> list[IngestResult]:
        async with self._lock:
            return await apply_ingest_batch(self._conn(), batch)

    async def _bump_and_arm(
        self, db: aiosqlite.Connection, cid: str, now: float, timing: Timing
    ) -> IngestResult:
        bumped = await self._one("bump_version", {"cid": cid}, db)
        assert bumped is not None
        version = int(bumped[0])
        armed = await self._one(
            "arm_timer",
            {
                "cid": cid,
                "now": now,
                "quiet": timing.quiet_seconds,
                "max_wait": timing.max_wait_seconds,
                "version": version,
            },
            db,
        )
        return IngestResult("accepted", cid, version, float(armed[0]) if armed else None)

    async def edit(self, event: MessageEdited, now: float, timing: Timing) -> IngestResult:
        return await self._change(event.key.platform, event.key.workspace, event.message_id,
                                  "edit_message", {"text": event.text}, now, timing)  # fmt: skip

    async def delete(self, event: MessageDeleted, now: float, timing: Timing) -> IngestResult:
        return await self._change(event.key.platform, event.key.workspace, event.message_id,
                                  "delete_message", {}, now, timing)  # fmt: skip

    async def _change(
        self,
        platform: str,
        workspace: str,
        message_id: str,
        query: str,
        extra: Params,
        now: float,
        timing: Timing,
    ) -> IngestResult:
        uid = message_uid(platform, workspace, message_id)
        async with self._transaction() as db:
            found = await self._one("find_message", {"uid": uid}, db)
            if found is None:
                return IngestResult("unknown", "", 0)
            cid = str(found["conversation_id"])
            changed = await self._one(query, {"uid": uid, "now": now, **extra}, db)
            pending = int(found["seq"]) > int(found["answered_version"])
            if changed is None or not pending:
                version = await self._one("current_version", {"cid": cid}, db)
                status: Literal["history", "duplicate"] = "history" if changed else "duplicate"
                return IngestResult(status, cid, int(version[0]) if version else 0)
            return await self._bump_and_arm(db, cid, now, timing)

    async def flush(self, conversation_id: str, now: float) -> None:
        await self._rows("flush_timer", {"cid": conversation_id, "now": now})

    # 2. timers and leases --------------------------------------------------------------------
    async def next_due_at(self) -> float | None:
        row = await self._one("next_due_at", {})
        return None if row is None or row[0] is None else float(row[0])

    async def due_timers(self, now: float, limit: int) -> list[DueTimer]:
        rows = await self._rows("due_timers", {"now": now, "limit": limit})
        return [DueTimer(r[0], float(r[1]), float(r[2]), int(r[3])) for r in rows]

    async def postpone_timer(self, conversation_id: str, due_at: float, now: float) -> None:
        await self._rows("postpone_timer", {"cid": conversation_id, "due_at": due_at, "now": now})

    async def acquire_lease(
        self, conversation_id: str, owner: str, now: float, ttl: float
    ) -> Lease | None:
        cid = conversation_id
        params = {"cid": cid, "owner": owner, "now": now, "ttl": ttl}
        async with self._transaction() as db:
            row = await self._one("acquire_lease", params, db)
            taken_over = row is None
            if taken_over:
                row = await self._one("take_over_lease", params, db)
            if row is None:
                return None
            expires = float(row["lease_expires_at"])
            version = int(row["version"])
            timer = await self._one(
                "hold_timer_deadline", {"cid": cid, "expires_at": expires, "version": version}, db
            )
        return Lease(
            conversation_id=cid,
            owner=owner,
            token=int(row["lease_token"]),
            version=version,
            answered_version=int(row["answered_version"]),
            expires_at=expires,
            deadline_at=float(timer[0]) if timer else None,
            failed_attempts=int(row["failed_attempts"]),
            taken_over=taken_over,
        )

    async def lease_expiry(self, conversation_id: str) -> float | None:
        row = await self._one("lease_expiry", {"cid": conversation_id})
        return None if row is None or row[0] is None else float(row[0])

    async def renew_lease(
        self, conversation_id: str, token: int, version: int, now: float, ttl: float
    ) -> bool:
        cid = conversation_id
        async with self._transaction() as db:
            row = await self._one(
                "renew_lease", {"cid": cid, "token": token, "now": now, "ttl": ttl}, db
            )
            if row is None:
                return False
            await self._rows(
                "hold_timer", {"cid": cid, "expires_at": float(row[0]), "version": version}, db
            )
        return True

    async def release_lease(self, conversation_id: str, token: int) -> None:
        async with self._transaction() as db:
            released = await self._one(
                "release_lease", {"cid": conversation_id, "token": token}, db
            )
            if released is not None:
                await self._rows("restore_timer", {"cid": conversation_id}, db)

    async def drop_timer(self, conversation_id: str, version: int) -> None:
        await self._rows("drop_timer", {"cid": conversation_id, "version": version})

    async def release_owner(self, owner: str) -> int:
        async with self._transaction() as db:
            await self._rows("restore_owner_timers", {"owner": owner}, db)
            released = await self._rows("release_owner_leases", {"owner": owner}, db)
            await self._rows("release_owner_claims", {"owner": owner}, db)
        return len(released)

    # 3. collect ------------------------------------------------------------------------------
    async def current_version(self, conversation_id: str) -> int:
        row = await self._one("current_version", {"cid": conversation_id})
        return int(row[0]) if row else 0

    async def pending_messages(
        self, conversation_id: str, after_version: int, upto_version: int
    ) -> list[StoredMessage]:
        rows = await self._rows(
            "pending_messages",
            {"cid": conversation_id, "after": after_version, "upto": upto_version},
        )
        return [message_from_row(r) for r in rows]

    async def history(
        self, conversation_id: str, upto_version: int, limit: int
    ) -> list[HistoryItem]:
        rows = await self._rows(
            "history", {"cid": conversation_id, "upto": upto_version, "limit": limit}
        )
        return [HistoryItem(r[0], str(r[1]), str(r[2]), int(r[3])) for r in reversed(rows)]

    # 5. final check + commit -----------------------------------------------------------------
    async def commit(
        self,
        conversation_id: str,
        check: FinalCheck,
        now: float,
        timing: Timing,
        reply: NewReply | None,
    ) -> CommitOutcome:
        cid, token, version = conversation_id, check.token, check.version
        async with self._transaction() as db:
            before = await self._one("answered_version", {"cid": cid}, db)
            checked = await self._one(
                "final_check",
                {"cid": cid, "token": token, "version": version,
                 "deadline_passed": 1 if check.deadline_passed else 0},
                db,
            )  # fmt: skip
            if checked is None or before is None:
                return Discarded()
            row: OutboxRow | None = None
            if reply is not None:
                answered = int(before[0])
                inserted = await self._one(
                    "insert_reply",
                    reply_params(cid, reply, answered, version, int(checked[0]), now),
                    db,
                )
                assert inserted is not None
                row = _outbox(inserted)
            await self._rows("drop_timer", {"cid": cid, "version": version}, db)
            await self._rows(
                "restart_cap",
                {"cid": cid, "version": version, "now": now, "max_wait": timing.max_wait_seconds},
                db,
            )
        return Committed(row)

    async def record_failure(self, conversation_id: str, token: int, retry_at: float) -> int | None:
        async with self._transaction() as db:
            row = await self._one("count_failure", {"cid": conversation_id, "token": token}, db)
            if row is None:
                return None
            await self._rows(
                "rearm_after_failure", {"cid": conversation_id, "retry_at": retry_at}, db
            )
        return int(row[0])

    async def record_generation(self, record: GenerationRecord) -> None:
        await self._rows("record_generation", generation_params(record))

    # 6. deliver ------------------------------------------------------------------------------
    async def claim_replies(
        self,
        owner: str,
        now: float,
        ttl: float,
        platforms: Sequence[str],
        limit: int,
        reply_id: int | None = None,
    ) -> list[OutboxRow]:
        rows = await self._rows(
            "claim_replies",
            {"owner": owner, "now": now, "ttl": ttl, "platforms": json.dumps(list(platforms)),
             "limit": limit, "reply_id": reply_id},
        )  # fmt: skip
        return sorted((_outbox(r) for r in rows), key=lambda r: r.id)

    async def next_outbox_at(self, platforms: Sequence[str]) -> float | None:
        row = await self._one("next_outbox_at", {"platforms": json.dumps(list(platforms))})
        return None if row is None or row[0] is None else float(row[0])

    async def mark_sent(
        self, reply_id: int, owner: str, platform_message_ids: Sequence[str], now: float
    ) -> bool:
        ids = json.dumps(list(platform_message_ids))
        return await self._one("mark_sent", {"id": reply_id, "ids": ids, "now": now}) is not None

    async def mark_retry(
        self, reply_id: int, owner: str, next_attempt_at: float, error: str
    ) -> bool:
        params = {"id": reply_id, "owner": owner, "at": next_attempt_at, "error": error}
        return await self._one("mark_retry", params) is not None

    async def mark_failed(self, reply_id: int, owner: str, error: str) -> bool:
        return await self._one("mark_failed", {"id": reply_id, "error": error}) is not None

    # inspection ------------------------------------------------------------------------------
    async def conversation_state(self, conversation_id: str) -> ConversationState | None:
        r = await self._one("conversation_state", {"cid": conversation_id})
        if r is None:
            return None
        return state_from_row(conversation_id, r)

    async def replies(self, conversation_id: str | None = None) -> list[OutboxRow]:
        return [_outbox(r) for r in await self._rows("replies", {"cid": conversation_id})]

    async def generations(self, conversation_id: str | None = None) -> list[GenerationRecord]:
        rows = await self._rows("generations", {"cid": conversation_id})
        return [generation_from_row(r) for r in rows]


def _outbox(r: Row) -> OutboxRow:
    return outbox_from_row(r, tuple(json.loads(r["platform_message_ids"])))


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
