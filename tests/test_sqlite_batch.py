"""SQLite group commit: one batch of concurrent ingests leaves exactly what the shared per-message
statements (`ensure_conversation`, `bump_version`, `insert_message`, `arm_timer`; a duplicate rolls
back to the savepoint), run one message after another in arrival order, would leave."""

from __future__ import annotations

import asyncio
import sqlite3
import threading
from collections.abc import Sequence
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from bot.core.errors import StoreError
from bot.core.events import ConversationKey, IncomingMessage
from bot.core.store import IngestResult, Timing
from storage.rows import attachments_json, message_uid
from storage.sqlite import MIGRATIONS, Q, SqliteStore, _statements
from storage.sqlite_batch import QueuedIngest

TIMINGS = (Timing(2.0, 10.0), Timing(0.5, 1.0), Timing(2.0, 10.0, 0.3), Timing(1.5, 1.0, 0.3))
NOW = 1_000.0

Arrival = tuple[IncomingMessage, float, Timing]
arrival = st.tuples(
    st.integers(0, 2),  # conversation
    st.integers(0, 5),  # message id (repeats are redeliveries)
    st.sampled_from([0.0, 0.3, 1.0, 4.0]),  # time since the previous arrival
    st.integers(0, len(TIMINGS) - 1),  # timing (with an early start, or none)
)


def arrivals(spec: Sequence[tuple[int, int, float, int]], start: float) -> list[Arrival]:
    out, now = [], start
    for conv, n, dt, timing in spec:
        now += dt
        key = ConversationKey("test", "w", f"c{conv}")
        out.append((IncomingMessage(key, f"m{n}", "u", "alice", f"text {n}"), now, TIMINGS[timing]))
    return out


def reference(
    before: list[Arrival], batch: list[Arrival]
) -> tuple[list[IngestResult], list[list[tuple[object, ...]]]]:
    """The per-message statements, one transaction per message, on plain sqlite3."""
    db = sqlite3.connect(":memory:", isolation_level=None)
    for script in MIGRATIONS:
        for statement in _statements(script):
            db.execute(statement)
    results = []
    for message, now, timing in [*before, *batch]:
        key = message.key
        db.execute("BEGIN IMMEDIATE")
        db.execute(Q["ensure_conversation"], {"cid": key.id, "platform": key.platform, "now": now})
        db.execute(Q["ingest_savepoint"])
        (version,) = db.execute(Q["bump_version"], {"cid": key.id}).fetchone()
        inserted = db.execute(
            Q["insert_message"],
            {"cid": key.id, "seq": version,
             "uid": message_uid(key.platform, key.workspace, message.message_id),
             "message_id": message.message_id, "author_id": message.author_id,
             "author_name": message.author_name, "text": message.text, "now": now,
             "via": message.via, "attachments": attachments_json(message.attachments)},
        ).fetchall()  # fmt: skip
        if not inserted:
            db.execute(Q["undo_ingest"])
            results.append(IngestResult("duplicate", key.id, 0))
        else:
            (due_at, start_at) = db.execute(
                Q["arm_timer"],
                {"cid": key.id, "now": now, "quiet": timing.quiet_seconds,
                 "max_wait": timing.max_wait_seconds, "version": version,
                 "speculate_after": timing.speculate_after_seconds},
            ).fetchone()  # fmt: skip
            results.append(IngestResult("accepted", key.id, version, due_at, start_at))
        db.execute("COMMIT")
    return results[len(before) :], dump(db)


STATE = (
    "SELECT id, version FROM conversations ORDER BY id",
    "SELECT conversation_id, seq, message_uid, text, created_at FROM messages ORDER BY 1, 2",
    "SELECT * FROM debounce_timers ORDER BY conversation_id",
)


def dump(db: sqlite3.Connection) -> list[list[tuple[object, ...]]]:
    return [[tuple(r) for r in db.execute(query)] for query in STATE]


@settings(max_examples=60, deadline=None)
@given(st.lists(arrival, max_size=6), st.lists(arrival, min_size=1, max_size=14))
def test_a_batch_equals_the_same_messages_one_by_one(
    before_spec: list[tuple[int, int, float, int]], batch_spec: list[tuple[int, int, float, int]]
) -> None:
    before, batch = arrivals(before_spec, NOW), arrivals(batch_spec, NOW + 100)
    expected_results, expected_state = reference(before, batch)

    async def run() -> tuple[list[IngestResult], list[list[tuple[object, ...]]], list[int]]:
        store = SqliteStore(":memory:")
        await store.open()
        sizes: list[int] = []
        write = store._ingest_batch

        async def counting(items: Sequence[QueuedIngest]) -> list[IngestResult]:
            sizes.append(len(items))
            return await write(items)

        store._batcher._write_batch = counting
        for message, now, timing in before:
            await store.ingest(message, now, timing)
        got = await asyncio.gather(*(store.ingest(*a) for a in batch))
        assert store._db is not None
        snapshot = [[tuple(r) for r in await store._db.execute_fetchall(q)] for q in STATE]
        await store.close()
        return list(got), snapshot, sizes

    got, state, sizes = asyncio.run(run())
    assert sizes[-1] == len(batch)  # the concurrent calls really formed one batch
    assert state == expected_state
    for mine, theirs in zip(got, expected_results, strict=True):
        assert (mine.status, mine.conversation_id) == (theirs.status, theirs.conversation_id)
        if mine.status == "accepted":
            assert (mine.version, mine.due_at) == (theirs.version, theirs.due_at)


async def test_a_caller_cancelled_while_queued_does_not_hold_up_the_others() -> None:
    store = SqliteStore(":memory:")
    await store.open()
    key = ConversationKey("test", "w", "c")
    tasks = [
        asyncio.create_task(
            store.ingest(IncomingMessage(key, f"m{n}", "u", "a", "t"), NOW, TIMINGS[0])
        )
        for n in range(5)
    ]
    await asyncio.sleep(0)  # all five are queued
    tasks[1].cancel()
    done = await asyncio.gather(*tasks, return_exceptions=True)
    assert isinstance(done[1], asyncio.CancelledError)
    assert [r.version for r in done if isinstance(r, IngestResult)] == [1, 2, 3, 4]
    await store.close()


async def test_a_writer_cancelled_while_its_commit_is_queued_leaves_no_open_transaction() -> None:
    """The writer is cancelled while its COMMIT still waits behind other work on aiosqlite's
    thread. Deciding about ROLLBACK before the COMMIT has run would roll back a batch that then
    commits, or leave the shared connection inside a transaction. The COMMIT runs to its end
    first: the caller is not acked (its platform retries), the retry finds the message stored,
    and the connection is left outside any transaction."""
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

    async def commit_behind_busy_thread(sql: str) -> Any:
        busy.append(asyncio.ensure_future(real_execute("SELECT hold_thread()")))
        commit = asyncio.ensure_future(real_execute(sql))
        await asyncio.sleep(0)  # both are queued on the thread, the COMMIT behind the busy call
        writer = store._batcher._writer
        assert writer is not None
        writer.cancel()
        released.set()
        return await commit

    def execute(sql: str, *args: object) -> Any:
        if sql == "COMMIT" and not busy:
            return commit_behind_busy_thread(sql)
        return real_execute(sql, *args)

    db.execute = execute  # type: ignore[method-assign]
    key = ConversationKey("test", "w", "c")
    first = IncomingMessage(key, "m1", "u", "alice", "first")
    [outcome] = await asyncio.gather(store.ingest(first, NOW, TIMINGS[0]), return_exceptions=True)
    assert isinstance(outcome, StoreError)  # the caller was not acked: its platform retries
    db.execute = real_execute  # type: ignore[method-assign]
    await asyncio.gather(*busy)

    assert not db.in_transaction
    retried = await store.ingest(first, NOW + 1, TIMINGS[0])
    assert (retried.status, retried.version) == ("duplicate", 1)  # the COMMIT ran to its end
    later = await store.ingest(IncomingMessage(key, "m2", "u", "alice", "t"), NOW + 2, TIMINGS[0])
    assert (later.status, later.version) == ("accepted", 2)
    assert not db.in_transaction
    await store.close()
