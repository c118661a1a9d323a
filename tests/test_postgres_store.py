"""The PostgreSQL store: same answers as the SQLite store, and safe between separate connections.

- Differential: random operation sequences run on both stores (caller clock) must return equal
  results at every step — the SQLite store is the reference semantics.
- Races: separate stores (separate pools, so separate connections) contend for one lease, one
  conversation's ingest and one outbox; the compare-and-swaps let exactly one win.
- Database clock: a host whose clock runs ahead cannot steal a lease early, and sees every
  protocol time on its own clock.
"""

from __future__ import annotations

import asyncio
import random
import sys
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import replace
from typing import Any

import pytest

from bot.core.errors import ConfigError, StoreError
from bot.core.events import ConversationKey, IncomingMessage, MessageDeleted, MessageEdited
from bot.core.store import (
    Committed,
    FinalCheck,
    GenerationRecord,
    IngestResult,
    Lease,
    NewReply,
    Timing,
    TokenUsage,
)
from storage import open_store
from storage.pool_limits import PoolLimits
from storage.postgres import MIGRATIONS, PostgresStore
from storage.sqlite import SqliteStore
from tests import pg

TIMING = Timing(1.5, 8.0)
KEYS = [ConversationKey("test", "w1", f"c{i}") for i in range(3)] + [
    ConversationKey("other", "w1", "c9")
]
Factory = Callable[..., Awaitable[PostgresStore]]


@pytest.fixture
async def pg_stores() -> AsyncIterator[Factory]:
    """Opened PostgresStores on one fresh schema; each call is a separate pool."""
    schema = await pg.create_schema()
    opened: list[PostgresStore] = []

    async def make(**options: Any) -> PostgresStore:
        options.setdefault("clock", "caller")
        options.setdefault("pool_size", 4)
        store = PostgresStore(pg.dsn(), schema=schema, **options)
        await store.open()
        opened.append(store)
        return store

    yield make
    for store in opened:
        await store.close()
    await pg.drop_schema(schema)


def message(key: ConversationKey, n: int, text: str = "") -> IncomingMessage:
    return IncomingMessage(key, f"m{n}", f"u{n % 2}", f"user{n % 2}", text or f"text {n}")


# differential ------------------------------------------------------------------------------------
class Differential:
    """Applies one random operation to both stores and compares what they return."""

    def __init__(self, rng: random.Random, sqlite: SqliteStore, postgres: PostgresStore) -> None:
        self.rng, self.stores = rng, (sqlite, postgres)
        self.now = 1_000_000.0
        self.tokens: dict[str, int] = {}
        self.log: list[str] = []
        self.traces: tuple[dict[str, str], dict[str, str]] = ({}, {})

    def _traced(self, store: int, result: Any) -> Any:
        """A burst's trace context is random, chosen by each store: what must agree is which
        results share one (by the order each store first returned it), and when a burst opens
        a new one."""
        context = getattr(result, "trace_context", None)
        if not isinstance(result, IngestResult | Lease) or context is None:
            return result
        seen = self.traces[store]
        return replace(result, trace_context=seen.setdefault(context, f"trace {len(seen)}"))

    async def both(self, name: str, *args: Any) -> Any:
        self.log.append(f"{name}{args!r}")
        a = self._traced(0, await getattr(self.stores[0], name)(*args))
        b = self._traced(1, await getattr(self.stores[1], name)(*args))
        if name == "due_timers":
            a, b = sorted(a, key=repr), sorted(b, key=repr)
        assert a == b, "stores disagree after:\n" + "\n".join(self.log[-25:])
        return a

    async def step(self) -> None:
        rng = self.rng
        self.now += rng.choice([0.0, 0.2, 1.0, 3.0, 10.0, 40.0])
        key = rng.choice(KEYS)
        cid, now = key.id, self.now
        version = await self.both("current_version", cid)
        token = self.tokens.get(cid, 0) - rng.choice([0, 0, 0, 1])
        op = rng.randrange(20)
        if op < 6:
            result = await self.both("ingest", message(key, rng.randrange(12)), now, TIMING)
            assert result.status in {"accepted", "duplicate"}
        elif op == 6:
            event = MessageEdited(key, f"m{rng.randrange(14)}", f"edited {now}")
            await self.both("edit", event, now, TIMING)
        elif op == 7:
            await self.both("delete", MessageDeleted(key, f"m{rng.randrange(14)}"), now, TIMING)
        elif op == 8:
            await self.both("flush", cid, now)
        elif op == 9:
            await self.both("due_timers", now, 10)
            await self.both("next_due_at", now)
        elif op == 10:
            lease = await self.both("acquire_lease", cid, rng.choice(["w1", "w2"]), now, 30.0)
            if lease is not None:
                self.tokens[cid] = lease.token
            await self.both("lease_expiry", cid, now)
        elif op == 11:
            await self.both("renew_lease", cid, token, version, now, 30.0)
        elif op == 12:
            await self.both("release_lease", cid, token)
        elif op == 13:
            await self.both("postpone_timer", cid, now + rng.choice([0.5, 5.0]), now)
            await self.both("drop_timer", cid, version - rng.choice([0, 1]))
        elif op == 14:
            state = await self.both("conversation_state", cid)
            after = state.answered_version if state else 0
            await self.both("pending_messages", cid, after, version)
            await self.both("history", cid, version, rng.choice([3, 50]))
        elif op in (15, 16):
            reply = rng.choice([None, NewReply(f"reply {now}", "answer", "m1", TokenUsage(3, 4))])
            at = version - rng.choice([0, 0, 1])
            await self.both(
                "commit", cid, FinalCheck(token, at, rng.random() < 0.3), now, TIMING, reply
            )
        elif op == 17:
            await self.both("record_failure", cid, token, now + 2.0, now)
            record = GenerationRecord(cid, token, 0, version, now - 1, now, "failed", error="x")
            await self.both("record_generation", record)
        elif op == 18:
            platforms = rng.choice([["test"], ["test", "other"]])
            owner = rng.choice(["w1", "w2"])
            rows = await self.both("claim_replies", owner, now, 30.0, platforms, 2)
            await self.both("next_outbox_at", platforms, now)
            for row in rows:
                choice = rng.randrange(3)
                token = row.claim_token - rng.choice([0, 0, 0, 1])  # now and then a stale one
                if choice == 0:
                    await self.both("renew_claim", row.id, token, now + 1.0, 30.0)
                    await self.both("mark_sent", row.id, token, [f"p{row.id}"], now)
                elif choice == 1:
                    counts = rng.choice([True, False])
                    await self.both("mark_retry", row.id, token, now + 3.0, "flaky", now, counts)
                else:
                    await self.both("mark_failed", row.id, token, "gone")
        else:
            await self.both("release_owner", rng.choice(["w1", "w2"]))
        await self.both("conversation_state", cid)

    async def finish(self) -> None:
        await self.both("replies", None)
        await self.both("generations", None)
        for key in KEYS:
            await self.both("replies", key.id)


@pytest.mark.parametrize("seed", range(8))
async def test_postgres_answers_like_sqlite(pg_stores: Factory, seed: int) -> None:
    sqlite = SqliteStore(":memory:")
    await sqlite.open()
    try:
        run = Differential(random.Random(seed), sqlite, await pg_stores())
        for _ in range(120):
            await run.step()
        await run.finish()
    finally:
        await sqlite.close()


# races between connections -----------------------------------------------------------------------
async def test_exactly_one_owner_wins_each_lease_race(pg_stores: Factory) -> None:
    stores = [await pg_stores() for _ in range(4)]
    key = KEYS[0]
    await stores[0].ingest(message(key, 1), 1000.0, TIMING)
    last_token = 0
    for round_ in range(40):
        now = 1000.0 + round_ * 100.0  # every round the previous lease has expired
        results = await asyncio.gather(
            *(s.acquire_lease(key.id, f"w{i}", now, 30.0) for i, s in enumerate(stores))
        )
        winners = [lease for lease in results if lease is not None]
        assert len(winners) == 1, f"round {round_}: {winners}"
        assert winners[0].token == last_token + 1
        last_token = winners[0].token
        state = await stores[0].conversation_state(key.id)
        assert state is not None and state.lease_owner == winners[0].owner
        # the losers' stale tokens fence nothing
        for i, store in enumerate(stores):
            stale = await store.renew_lease(key.id, last_token - 1, 1, now, 30.0)
            assert not stale, f"store {i} renewed with a stale token"


async def test_concurrent_ingest_on_one_conversation_stores_each_message_once(
    pg_stores: Factory,
) -> None:
    stores = [await pg_stores() for _ in range(3)]
    key = KEYS[0]
    # every store delivers every message (platform retries, twin events, two processes)
    deliveries = [(s, n) for s in stores for n in range(30)]
    random.Random(7).shuffle(deliveries)
    results = await asyncio.gather(
        *(s.ingest(message(key, n), 1000.0 + n, TIMING) for s, n in deliveries)
    )
    accepted = sorted(r.version for r in results if r.status == "accepted")
    assert accepted == list(range(1, 31))
    assert sum(r.status == "duplicate" for r in results) == 60
    pending = await stores[0].pending_messages(key.id, 0, 30)
    assert sorted(m.message_id for m in pending) == sorted(f"m{n}" for n in range(30))
    assert [m.seq for m in pending] == list(range(1, 31))


async def test_two_workers_never_claim_one_reply(pg_stores: Factory) -> None:
    a, b = await pg_stores(), await pg_stores()
    for i, key in enumerate(KEYS[:3]):
        for n in range(4):
            await a.ingest(message(key, 10 * i + n), 1000.0, TIMING)
        lease = await a.acquire_lease(key.id, "w1", 1010.0, 30.0)
        assert lease is not None
        row = await a.commit(
            key.id, FinalCheck(lease.token, 4, False), 1010.0, TIMING, NewReply(f"r{i}")
        )
        assert isinstance(row, Committed) and row.reply is not None
    claimed = await asyncio.gather(
        *(s.claim_replies(f"w{i}", 1020.0, 30.0, ["test"], 1) for i, s in enumerate([a, b] * 3))
    )
    ids = [row.id for rows in claimed for row in rows]
    assert sorted(ids) == [1, 2, 3]


def pool_of(store: PostgresStore) -> Any:
    assert store._pool is not None, "the store is open"
    return store._pool


async def test_processes_starting_together_migrate_once(pg_stores: Factory) -> None:
    stores = await asyncio.gather(*(pg_stores() for _ in range(5)))
    conn = await stores[0]._rows("schema_version", {})
    assert int(conn[0][0]) == len(MIGRATIONS)
    rows = await pool_of(stores[0]).fetch("SELECT version FROM burstbot_schema_version")
    assert sorted(r[0] for r in rows) == list(range(1, len(MIGRATIONS) + 1))


# clocks --------------------------------------------------------------------------------------
async def test_database_clock_keeps_a_fast_host_from_stealing_a_lease(pg_stores: Factory) -> None:
    honest = await pg_stores(clock="database")
    fast = await pg_stores(clock="database")
    key = KEYS[0]
    await honest.ingest(message(key, 1), 1000.0, TIMING)
    wall = await pool_of(honest).fetchval("SELECT EXTRACT(EPOCH FROM now())::float8")
    lease = await honest.acquire_lease(key.id, "honest", wall, 30.0)
    assert lease is not None
    assert abs(lease.expires_at - (wall + 30.0)) < 5.0
    # an hour ahead: with caller time this host would think the lease expired long ago
    assert await fast.acquire_lease(key.id, "fast", wall + 3600.0, 30.0) is None
    assert await honest.renew_lease(key.id, lease.token, 1, wall - 3600.0, 30.0)
    state = await honest.conversation_state(key.id)
    assert state is not None and state.lease_expires_at is not None
    assert state.lease_expires_at > wall + 20.0  # renewed against the database, not the caller


async def test_each_host_sees_protocol_times_on_its_own_clock(pg_stores: Factory) -> None:
    """Debounce times are the database's: a host 10 s ahead neither finds a timer due early nor
    gets back times off by its skew, and the times it passes cross over by their distance."""
    honest = await pg_stores(clock="database")
    ahead = await pg_stores(clock="database")
    key, timing = KEYS[0], Timing(5.0, 8.0)
    wall = await pool_of(honest).fetchval("SELECT EXTRACT(EPOCH FROM now())::float8")
    armed = await honest.ingest(message(key, 1), wall, timing)
    assert armed.due_at is not None and abs(armed.due_at - (wall + 5.0)) < 2.0
    assert await ahead.due_timers(wall + 10.0, 10) == []  # 5 s of quiet left, not 5 s past
    due = await ahead.next_due_at(wall + 10.0)
    assert due is not None and abs(due - (wall + 15.0)) < 2.0
    lease = await ahead.acquire_lease(key.id, "ahead", wall + 10.0, 30.0)
    assert lease is not None and lease.deadline_at is not None
    assert abs(lease.deadline_at - (wall + 18.0)) < 2.0
    assert abs(lease.expires_at - (wall + 40.0)) < 2.0
    assert await ahead.record_failure(key.id, lease.token, wall + 13.0, wall + 10.0) == 1
    due = await honest.next_due_at(wall)
    assert due is not None and abs(due - (wall + 3.0)) < 2.0


async def test_caller_clock_uses_the_given_time(pg_stores: Factory) -> None:
    store = await pg_stores(clock="caller")
    key = KEYS[0]
    await store.ingest(message(key, 1), 1000.0, TIMING)
    lease = await store.acquire_lease(key.id, "w1", 1000.0, 30.0)
    assert lease is not None and lease.expires_at == 1030.0
    assert await store.acquire_lease(key.id, "w2", 1031.0, 30.0) is not None


# wiring and errors ---------------------------------------------------------------------------
def test_open_store_builds_a_postgres_store_for_postgresql_urls() -> None:
    store = open_store("postgresql://u@db.example:5432/burstbot", pool_size=7)
    assert isinstance(store, PostgresStore)
    assert store.pool_size == 7 and store.clock == "database"


def test_missing_asyncpg_is_a_config_error(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "asyncpg", None)
    with pytest.raises(ConfigError, match=r"burstbot\[postgres\]"):
        open_store("postgresql://u@localhost/burstbot")


async def test_unreachable_database_is_a_store_error() -> None:
    store = PostgresStore(
        "postgresql://nobody@127.0.0.1:1/none", limits=PoolLimits(connect_seconds=2.0)
    )
    with pytest.raises(StoreError, match="cannot connect to PostgreSQL"):
        await store.open()


@pytest.mark.parametrize(
    "dsn", ["postgresql://u:s3cret@db.internal:abc/db", "postgresql://u:s3cret@[db.internal/db"]
)
async def test_a_malformed_url_is_a_store_error_that_quotes_none_of_it(dsn: str) -> None:
    with pytest.raises(StoreError) as error:
        await PostgresStore(dsn, limits=PoolLimits(connect_seconds=2.0)).open()
    assert str(error.value) == "cannot connect to PostgreSQL: storage.url is malformed"


# wake-up hints -------------------------------------------------------------------------------
async def test_other_processes_hear_wakeup_hints(pg_stores: Factory) -> None:
    a, b = await pg_stores(), await pg_stores()
    heard: asyncio.Queue[str] = asyncio.Queue()
    await b.listen(heard.put_nowait)

    async def expect(payload: str) -> None:
        while await asyncio.wait_for(heard.get(), 5) != payload:
            pass  # hints from other users of the database are fine: they are only hints

    key = KEYS[0]
    await a.ingest(message(key, 1), 1000.0, TIMING)
    await expect("timer 1001.5")
    lease = await a.acquire_lease(key.id, "w1", 1002.0, 30.0)
    assert lease is not None
    await a.commit(key.id, FinalCheck(lease.token, 1, False), 1002.0, TIMING, NewReply("x"))
    await expect("outbox test")
    await a.ingest(message(key, 2), 1003.0, TIMING)
    assert await a.acquire_lease(key.id, "w9", 1010.0, 30.0) is not None
    assert await a.release_owner("w9") == 1
    await expect("released")


async def test_a_hint_wakes_the_scheduler_only_when_it_matters() -> None:
    from bot.app import App
    from bot.config import Config
    from bot.llm.offline import OfflineReplier
    from testkit import RecordingFrontend

    app = App(Config(), SqliteStore(":memory:"), OfflineReplier(), [RecordingFrontend("test")])
    wakeup = app.wakeup
    wakeup.sleeping_until = 100.0
    cases = [("timer 50.0", True), ("timer 150.0", False), ("timer x", False),
             ("outbox test", True), ("outbox slack", False), ("released", True),
             ("stop test/w/c/", True)]  # fmt: skip
    for payload, wakes in cases:
        wakeup.event.clear()
        app.hint(payload)
        assert wakeup.event.is_set() == wakes, payload


def test_an_unsupported_url_is_named_without_its_password() -> None:
    with pytest.raises(ConfigError, match="unsupported scheme 'mysql'") as error:
        open_store("mysql://bot:hunter2@db/burstbot")
    assert "hunter2" not in str(error.value)


# cancellation and schema ---------------------------------------------------------------------
@pytest.mark.parametrize("delay_ms", [0, 1, 2, 3, 5, 8])
async def test_a_cancelled_caller_never_leaves_a_connection_in_a_transaction(
    pg_stores: Factory, delay_ms: int
) -> None:
    store = await pg_stores(pool_size=1)  # the one connection is reused right after
    key = KEYS[0]
    for n in range(5):
        task = asyncio.ensure_future(store.ingest(message(key, 2 * n), 1000.0 + n, TIMING))
        await asyncio.sleep(delay_ms / 1000)
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)
        result = await store.ingest(message(key, 2 * n + 1), 1000.5 + n, TIMING)
        assert result.status == "accepted"
    pending = await store.pending_messages(key.id, 0, 100)
    assert [m.seq for m in pending] == list(range(1, len(pending) + 1))
    assert await store.acquire_lease(key.id, "w1", 2000.0, 30.0) is not None


async def test_a_newer_schema_is_refused_with_a_clear_error(pg_stores: Factory) -> None:
    store = await pg_stores()
    await store._rows("record_schema_version", {"version": len(MIGRATIONS) + 5})
    with pytest.raises(StoreError, match="newer than this burstbot"):
        await pg_stores()
