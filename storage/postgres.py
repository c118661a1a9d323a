"""The PostgreSQL store on asyncpg: for several processes and hosts sharing one database.

Same semantics as the SQLite store, statement by statement (`postgres.sql` mirrors `sqlite.sql`).
Transactions run at READ COMMITTED: every compare-and-swap is one conditional `UPDATE ...
RETURNING`, whose row lock makes a concurrent writer wait and then re-check the condition. Each
read-then-write transaction first locks the conversation row, so transactions on one conversation
run one after the other (lock order: conversation, then timer, then outbox). Due timers and outbox
rows are picked with `FOR UPDATE SKIP LOCKED`. Migrations are numbered, tracked in
`burstbot_schema_version`, and serialized by an advisory lock, so processes starting together
migrate once.

`LISTEN/NOTIFY` is only a hint: `listen(hint)` hears other processes arm timers, queue replies and
release leases, so their schedulers can look at once instead of at the next poll.

Clock: with `clock="database"` (production) lease and delivery-claim expiry are set and compared
with the database's `statement_timestamp()`, so hosts whose clocks disagree still agree on who holds
a lease. Debounce timers and delivery back-off stay on the caller's clock, which the engine also
uses to judge deadlines. With `clock="caller"` every time is the caller's `now` (tests on a fake
clock, exactly like the SQLite store).
"""

from __future__ import annotations

import logging
import re
from collections.abc import AsyncIterator, Callable, Mapping, Sequence
from contextlib import asynccontextmanager
from typing import Any, Literal

import asyncpg

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

log = logging.getLogger("burstbot.storage")
Params = Mapping[str, Any]
WAKEUP_CHANNEL = "burstbot_wakeup"
ClockMode = Literal["database", "caller"]
_PARAM = re.compile(r"(?<!:):([A-Za-z_]\w*)")
_COMMENT = re.compile(r"^\s*--.*$", re.MULTILINE)
_DB_ERRORS = (asyncpg.PostgresError, asyncpg.InterfaceError, OSError)


def _positional(sql: str) -> tuple[str, tuple[str, ...]]:
    """`:name` placeholders → asyncpg's `$n`, one number per distinct name."""
    names: list[str] = []

    def number(match: re.Match[str]) -> str:
        if match.group(1) not in names:
            names.append(match.group(1))
        return f"${names.index(match.group(1)) + 1}"

    return _PARAM.sub(number, _COMMENT.sub("", sql)), tuple(names)


_RAW = load_queries("postgres.sql")
MIGRATIONS = migrations(_RAW)
Q = {name: _positional(sql) for name, sql in _RAW.items() if not name.startswith("migration_")}


class _Duplicate(Exception):
    """Rolls back the savepoint of an ingest whose message id is already stored."""

    def __init__(self, version: int) -> None:
        self.version = version


class PostgresStore(OperatorQueries[asyncpg.Connection]):
    def __init__(
        self,
        dsn: str,
        pool_size: int = 10,
        clock: ClockMode = "database",
        schema: str | None = None,
        connect_timeout: float = 10.0,
    ) -> None:
        self.dsn = dsn
        self.pool_size = pool_size
        self.clock: ClockMode = clock
        self.schema = schema
        self.connect_timeout = connect_timeout
        self._pool: asyncpg.Pool | None = None
        self._listener: asyncpg.Connection | None = None

    # lifecycle -------------------------------------------------------------------------------
    @property
    def _settings(self) -> dict[str, str]:
        return {"search_path": self.schema} if self.schema else {}

    async def open(self) -> None:
        try:
            self._pool = await asyncpg.create_pool(
                self.dsn,
                min_size=1,
                max_size=self.pool_size,
                timeout=self.connect_timeout,
                server_settings=self._settings,
            )
        except (*_DB_ERRORS, TimeoutError) as exc:
            raise StoreError(f"cannot connect to PostgreSQL: {exc}") from exc
        try:
            await self._migrate()
        except BaseException:
            await self.close()
            raise

    async def _migrate(self) -> None:
        async with self._transaction() as conn:
            await self._rows("schema_lock", {}, conn)
            await self._rows("create_schema_version", {}, conn)
            row = await self._one("schema_version", {}, conn)
            current = int(row[0]) if row else 0
            if current > len(MIGRATIONS):
                raise StoreError(
                    f"database schema version {current} is newer than this burstbot "
                    f"({len(MIGRATIONS)}); upgrade burstbot"
                )
            for number, script in enumerate(MIGRATIONS[current:], start=current + 1):
                await conn.execute(script)
                await self._rows("record_schema_version", {"version": number}, conn)

    async def listen(self, hint: Callable[[str], None]) -> None:
        """Call `hint(payload)` on every wake-up hint (ours included); best effort."""

        def received(_conn: object, _pid: int, _channel: str, payload: str) -> None:
            hint(payload)

        try:
            self._listener = await asyncpg.connect(
                self.dsn, timeout=self.connect_timeout, server_settings=self._settings
            )
            await self._listener.add_listener(WAKEUP_CHANNEL, received)
        except (*_DB_ERRORS, TimeoutError) as exc:
            log.warning("no wake-up hints from other processes (polling only): %s", exc)

    async def close(self) -> None:
        if self._listener is not None:
            await self._listener.close()
            self._listener = None
        if self._pool is not None:
            await self._pool.close()
            self._pool = None

    @property
    def schema_version(self) -> int:
        return len(MIGRATIONS)

    # plumbing --------------------------------------------------------------------------------
    def _pool_or_fail(self) -> asyncpg.Pool:
        if self._pool is None:
            raise StoreError("store is not open")
        return self._pool

    @asynccontextmanager
    async def _transaction(self) -> AsyncIterator[asyncpg.Connection]:
        try:
            async with (
                self._pool_or_fail().acquire() as conn,
                conn.transaction(isolation="read_committed"),
            ):
                yield conn
        except _DB_ERRORS as exc:
            raise StoreError(f"PostgreSQL transaction failed: {exc}") from exc

    async def _rows(
        self, name: str, params: Params, conn: asyncpg.Connection | None = None
    ) -> list[asyncpg.Record]:
        sql, names = Q[name]
        args = [params[n] for n in names]
        try:
            if conn is not None:
                return list(await conn.fetch(sql, *args))
            async with self._pool_or_fail().acquire() as own:
                return list(await own.fetch(sql, *args))
        except _DB_ERRORS as exc:
            raise StoreError(f"{name}: {exc}") from exc

    async def _one(
        self, name: str, params: Params, conn: asyncpg.Connection | None = None
    ) -> asyncpg.Record | None:
        rows = await self._rows(name, params, conn)
        return rows[0] if rows else None

    def _lease_now(self, now: float) -> float | None:
        return now if self.clock == "caller" else None

    # 1. arrival ------------------------------------------------------------------------------
    async def ingest(self, message: IncomingMessage, now: float, timing: Timing) -> IngestResult:
        key = message.key
        cid = key.id
        uid = message_uid(key.platform, key.workspace, message.message_id)
        async with self._transaction() as conn:
            await self._rows(
                "ensure_conversation", {"cid": cid, "platform": key.platform, "now": now}, conn
            )
            try:
                async with conn.transaction():
                    bumped = await self._one("bump_version", {"cid": cid}, conn)
                    assert bumped is not None
                    version = int(bumped[0])
                    inserted = await self._one(
                        "insert_message",
                        {
                            "cid": cid,
                            "seq": version,
                            "uid": uid,
                            "message_id": message.message_id,
                            "author_id": message.author_id,
                            "author_name": message.author_name,
                            "text": message.text,
                            "now": now,
                        },
                        conn,
                    )
                    if inserted is None:
                        raise _Duplicate(version - 1)
                    return await self._arm(conn, cid, version, now, timing)
            except _Duplicate as duplicate:
                return IngestResult("duplicate", cid, duplicate.version)

    async def _arm(
        self, conn: asyncpg.Connection, cid: str, version: int, now: float, timing: Timing
    ) -> IngestResult:
        armed = await self._one(
            "arm_timer",
            {
                "cid": cid,
                "now": now,
                "quiet": timing.quiet_seconds,
                "max_wait": timing.max_wait_seconds,
                "version": version,
            },
            conn,
        )
        due_at = float(armed[0]) if armed else None
        await self._rows("notify", {"payload": f"timer {due_at}"}, conn)
        return IngestResult("accepted", cid, version, due_at)

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
        async with self._transaction() as conn:
            found = await self._one("find_message", {"uid": uid}, conn)
            if found is None:
                return IngestResult("unknown", "", 0)
            cid = str(found["conversation_id"])
            changed = await self._one(query, {"uid": uid, "now": now, **extra}, conn)
            pending = int(found["seq"]) > int(found["answered_version"])
            if changed is None or not pending:
                version = await self._one("current_version", {"cid": cid}, conn)
                status: Literal["history", "duplicate"] = "history" if changed else "duplicate"
                return IngestResult(status, cid, int(version[0]) if version else 0)
            bumped = await self._one("bump_version", {"cid": cid}, conn)
            assert bumped is not None
            return await self._arm(conn, cid, int(bumped[0]), now, timing)

    async def flush(self, conversation_id: str, now: float) -> None:
        await self._rows("flush_timer", {"cid": conversation_id, "now": now})

    # 2. timers and leases --------------------------------------------------------------------
    async def next_due_at(self) -> float | None:
        row = await self._one("next_due_at", {})
        return None if row is None or row[0] is None else float(row[0])

    async def due_timers(self, now: float, limit: int) -> list[DueTimer]:
        async with self._transaction() as conn:
            rows = await self._rows("due_timers", {"now": now, "limit": limit}, conn)
        return [DueTimer(r[0], float(r[1]), float(r[2]), int(r[3])) for r in rows]

    async def postpone_timer(self, conversation_id: str, due_at: float, now: float) -> None:
        await self._rows("postpone_timer", {"cid": conversation_id, "due_at": due_at, "now": now})

    async def acquire_lease(
        self, conversation_id: str, owner: str, now: float, ttl: float
    ) -> Lease | None:
        cid = conversation_id
        params = {"cid": cid, "owner": owner, "lease_now": self._lease_now(now), "ttl": ttl}
        async with self._transaction() as conn:
            row = await self._one("acquire_lease", params, conn)
            taken_over = row is None
            if taken_over:
                row = await self._one("take_over_lease", params, conn)
            if row is None:
                return None
            expires = float(row["lease_expires_at"])
            version = int(row["version"])
            timer = await self._one(
                "hold_timer_deadline",
                {"cid": cid, "expires_at": expires, "version": version},
                conn,
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
        params = {"cid": cid, "token": token, "lease_now": self._lease_now(now), "ttl": ttl}
        async with self._transaction() as conn:
            row = await self._one("renew_lease", params, conn)
            if row is None:
                return False
            await self._rows(
                "hold_timer", {"cid": cid, "expires_at": float(row[0]), "version": version}, conn
            )
        return True

    async def release_lease(self, conversation_id: str, token: int) -> None:
        async with self._transaction() as conn:
            released = await self._one(
                "release_lease", {"cid": conversation_id, "token": token}, conn
            )
            if released is not None:
                await self._rows("restore_timer", {"cid": conversation_id}, conn)

    async def drop_timer(self, conversation_id: str, version: int) -> None:
        await self._rows("drop_timer", {"cid": conversation_id, "version": version})

    async def release_owner(self, owner: str) -> int:
        async with self._transaction() as conn:
            released = await self._rows("release_owner_leases", {"owner": owner}, conn)
            cids = [str(r[0]) for r in released]
            await self._rows("restore_owner_timers", {"cids": cids}, conn)
            await self._rows("release_owner_claims", {"owner": owner}, conn)
            await self._rows("notify", {"payload": "released"}, conn)
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
        async with self._transaction() as conn:
            before = await self._one("lock_answered_version", {"cid": cid}, conn)
            checked = await self._one(
                "final_check",
                {"cid": cid, "token": token, "version": version,
                 "deadline_passed": check.deadline_passed},
                conn,
            )  # fmt: skip
            if checked is None or before is None:
                return Discarded()
            row: OutboxRow | None = None
            if reply is not None:
                answered = int(before[0])
                inserted = await self._one(
                    "insert_reply",
                    reply_params(cid, reply, answered, version, int(checked[0]), now),
                    conn,
                )
                assert inserted is not None
                row = _outbox(inserted)
                await self._rows("notify", {"payload": f"outbox {row.platform}"}, conn)
            await self._rows("drop_timer", {"cid": cid, "version": version}, conn)
            await self._rows(
                "restart_cap",
                {"cid": cid, "version": version, "now": now, "max_wait": timing.max_wait_seconds},
                conn,
            )
        return Committed(row)

    async def record_failure(self, conversation_id: str, token: int, retry_at: float) -> int | None:
        async with self._transaction() as conn:
            row = await self._one("count_failure", {"cid": conversation_id, "token": token}, conn)
            if row is None:
                return None
            await self._rows(
                "rearm_after_failure", {"cid": conversation_id, "retry_at": retry_at}, conn
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
            {"owner": owner, "now": now, "lease_now": self._lease_now(now), "ttl": ttl,
             "platforms": list(platforms), "limit": limit, "reply_id": reply_id},
        )  # fmt: skip
        return sorted((_outbox(r) for r in rows), key=lambda r: r.id)

    async def next_outbox_at(self, platforms: Sequence[str]) -> float | None:
        row = await self._one("next_outbox_at", {"platforms": list(platforms)})
        return None if row is None or row[0] is None else float(row[0])

    async def mark_sent(
        self, reply_id: int, owner: str, platform_message_ids: Sequence[str], now: float
    ) -> bool:
        params = {"id": reply_id, "ids": list(platform_message_ids), "now": now}
        return await self._one("mark_sent", params) is not None

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
    return outbox_from_row(r, tuple(r["platform_message_ids"]))
