"""The PostgreSQL store on asyncpg: for several processes and hosts sharing one database.

The steps are the shared SQL store's (storage/sql_store.py); PostgreSQL supplies what differs:

- a pool; each transaction runs at READ COMMITTED on one connection. A compare-and-swap's row lock
  makes a concurrent writer wait and then re-check the condition; a read-then-write step locks the
  conversation row first, so steps on one conversation run one after the other. Due timers and
  outbox rows are picked with `FOR UPDATE SKIP LOCKED` (postgres.sql);
- bounded waits (pool_limits.py), so a partition is a `StoreError` within the limits, never a hang;
- numbered migrations tracked in `burstbot_schema_version`, serialized by an advisory lock;
- `LISTEN/NOTIFY` as a hint only: `listen(hint)` hears other processes arm timers, queue replies
  and release leases, so their schedulers look at once instead of at the next poll;
- the clock (G12, see sql_store.sql): with `clock="database"` (production) `:db_now` is the
  database's `statement_timestamp()`. Not `now()`: a transaction's later statements (a commit that
  waited for a row lock) stamp the time they run, not when the transaction began; and not
  `clock_timestamp()`: one statement reads one instant, so the times it stamps agree with each
  other and with the skew it returns them by. With `clock="caller"` every time is the caller's
  `now` (tests on a fake clock, like SQLite).
"""

from __future__ import annotations

import asyncio
import logging
import re
from collections.abc import AsyncIterator, Callable, Sequence
from contextlib import asynccontextmanager
from typing import Any, Literal

import asyncpg

from bot.core.errors import StoreError
from storage.pool_limits import PoolLimits
from storage.queries import load_queries, migrations, on_clock
from storage.rows import Params, Row
from storage.sql_store import SqlStore

log = logging.getLogger("burstbot.storage")
WAKEUP_CHANNEL = "burstbot_wakeup"
ClockMode = Literal["database", "caller"]
_PARAM = re.compile(r"(?<!:):([A-Za-z_]\w*)")
_COMMENT = re.compile(r"^\s*--.*$", re.MULTILINE)
_DATABASE_NOW = "CAST(EXTRACT(EPOCH FROM statement_timestamp()) AS FLOAT8)"
_CLOCKS = {
    "database": (_DATABASE_NOW, f"CAST(:now AS FLOAT8) - {_DATABASE_NOW}"),
    "caller": (":now", "CAST(0 AS FLOAT8)"),
}
_DB_ERRORS = (asyncpg.PostgresError, asyncpg.InterfaceError, OSError)
# The connection cannot be trusted with another statement (a server-side statement timeout or a
# constraint violation leaves it usable).
_LOST_CONNECTION = (
    OSError,  # TimeoutError too: the client's command or acquire timeout
    asyncpg.InterfaceError,
    asyncpg.PostgresConnectionError,
    asyncpg.exceptions.AdminShutdownError,
    asyncpg.exceptions.CrashShutdownError,
    asyncpg.exceptions.IdleInTransactionSessionTimeoutError,
)


def _positional(sql: str, clock: ClockMode) -> tuple[str, tuple[str, ...]]:
    """The clock's `:db_now` and `:skew`, then `:name` placeholders → asyncpg's `$n`, one number
    per distinct name."""
    names: list[str] = []

    def number(match: re.Match[str]) -> str:
        if match.group(1) not in names:
            names.append(match.group(1))
        return f"${names.index(match.group(1)) + 1}"

    db_now, skew = _CLOCKS[clock]
    return _PARAM.sub(number, on_clock(_COMMENT.sub("", sql), db_now, skew)), tuple(names)


_RAW = load_queries("sql_store.sql", "postgres.sql")
MIGRATIONS = migrations(_RAW)
QUERIES = {
    clock: {n: _positional(sql, clock) for n, sql in _RAW.items() if not n.startswith("migration_")}
    for clock in ("database", "caller")
}


class PostgresStore(SqlStore[asyncpg.Connection]):
    MIGRATIONS = MIGRATIONS

    def __init__(
        self,
        dsn: str,
        pool_size: int = 10,
        clock: ClockMode = "database",
        schema: str | None = None,
        limits: PoolLimits | None = None,
    ) -> None:
        self.dsn = dsn
        self.pool_size = pool_size
        self.clock: ClockMode = clock
        self.schema = schema
        self.limits = limits or PoolLimits()
        self._q = QUERIES[clock]
        self._pool: asyncpg.Pool | None = None
        self._listener: asyncpg.Connection | None = None

    @property
    def _connect_options(self) -> dict[str, Any]:
        """What the pool's connections and the wake-up connection are opened with."""
        schema = {"search_path": self.schema} if self.schema else {}
        return {
            "timeout": self.limits.connect_seconds,
            "command_timeout": self.limits.command_seconds,
            "server_settings": {**self.limits.server_settings(), **schema},
        }

    async def open(self) -> None:
        """Connects once at start, so a wrong URL or an unreachable server fails here."""
        try:
            self._pool = await asyncpg.create_pool(
                self.dsn,
                min_size=0,  # no background reconnects (and their tracebacks) in an outage
                max_size=self.pool_size,
                **self._connect_options,
            )
            async with self._pool.acquire(timeout=self.limits.connect_seconds):
                pass
        except (*_DB_ERRORS, TimeoutError) as exc:
            await self.close()
            raise StoreError(f"cannot connect to PostgreSQL: {exc}") from exc
        except ValueError as exc:  # a malformed URL; its text may quote the password
            await self.close()
            raise StoreError("cannot connect to PostgreSQL: storage.url is malformed") from exc
        try:
            await self._migrate()
        except BaseException:
            await self.close()
            raise

    async def listen(self, hint: Callable[[str], None]) -> None:
        """Call `hint(payload)` on every wake-up hint (ours included); best effort."""
        try:
            self._listener = await asyncpg.connect(self.dsn, **self._connect_options)
            await self._listener.add_listener(
                WAKEUP_CHANNEL, lambda _listener, _pid, _channel, payload: hint(payload)
            )
        except (*_DB_ERRORS, TimeoutError) as exc:
            log.warning("no wake-up hints from other processes (polling only): %s", exc)

    async def close(self) -> None:
        """Bounded too: a connection the network dropped is terminated, not waited for."""
        listener, self._listener = self._listener, None
        if listener is not None:
            try:
                await listener.close(timeout=self.limits.command_seconds)
            except (*_DB_ERRORS, TimeoutError) as exc:
                log.warning("closing the wake-up connection failed (%s); dropped", _describe(exc))
                listener.terminate()
        pool, self._pool = self._pool, None
        if pool is not None:
            try:  # a failing close() terminates the pool itself
                await asyncio.wait_for(pool.close(), self.limits.command_seconds)
            except (*_DB_ERRORS, TimeoutError) as exc:
                log.warning("closing the pool failed (%s); connections dropped", _describe(exc))

    # the seam --------------------------------------------------------------------------------
    async def _schema_in_use(self, db: asyncpg.Connection) -> int:
        await self._rows("schema_lock", {}, db)
        await self._rows("create_schema_version", {}, db)
        row = await self._one("schema_version", {}, db)
        return int(row[0]) if row else 0

    async def _migrate_to(self, db: asyncpg.Connection, number: int, script: str) -> None:
        await db.execute(script)
        await self._rows("record_schema_version", {"version": number}, db)

    @asynccontextmanager
    async def _pooled(self) -> AsyncIterator[asyncpg.Connection]:
        """A pooled connection, waited for no longer than the acquire limit; one that was lost
        while in use is terminated (not reset and reused) and the rest of the pool expired."""
        pool = self._pool
        if pool is None:
            raise StoreError("store is not open")
        async with pool.acquire(timeout=self.limits.acquire_seconds) as conn:
            try:
                yield conn
            except BaseException as exc:
                if isinstance(exc, _LOST_CONNECTION):
                    conn.terminate()
                    await pool.expire_connections()
                raise

    @asynccontextmanager
    async def _transaction(self, arrival: bool = False) -> AsyncIterator[asyncpg.Connection]:
        """Started and ended by hand: after a lost connection no ROLLBACK waits on it again.
        Arrivals take no precedence: the pool's connections let them run beside other steps."""
        try:
            async with self._pooled() as conn:
                transaction = conn.transaction(isolation="read_committed")
                await transaction.start()
                try:
                    yield conn
                except BaseException as exc:
                    if not isinstance(exc, _LOST_CONNECTION):
                        await transaction.rollback()
                    raise
                await transaction.commit()
        except _DB_ERRORS as exc:
            raise StoreError(f"PostgreSQL transaction failed: {_describe(exc)}") from exc

    async def _rows(
        self, name: str, params: Params, db: asyncpg.Connection | None = None
    ) -> list[Row]:
        sql, names = self._q[name]
        args = [params[n] for n in names]
        try:
            if db is not None:
                return list(await db.fetch(sql, *args))
            async with self._pooled() as own:
                return list(await own.fetch(sql, *args))
        except _DB_ERRORS as exc:
            raise StoreError(f"{name}: {_describe(exc)}") from exc

    def _array(self, values: Sequence[str]) -> list[str]:
        return list(values)

    def _strings(self, value: Any) -> tuple[str, ...]:
        return tuple(value)

    async def _hint(self, db: asyncpg.Connection, payload: str) -> None:
        """NOTIFY, delivered when the transaction commits; polling stays the guarantee."""
        await self._rows("notify", {"payload": payload}, db)


def _describe(exc: BaseException) -> str:
    """A client-side timeout has no text of its own."""
    if isinstance(exc, TimeoutError) and not str(exc):
        return "PostgreSQL did not answer in time"
    return str(exc)
