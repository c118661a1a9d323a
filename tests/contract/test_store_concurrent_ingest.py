"""Concurrent ingest, for every store: each caller gets its own answer, the same as if the calls had
run one after another (G6: a redelivered id is stored once, "yes" twice is two messages)."""

from __future__ import annotations

import asyncio

import pytest

from bot.core.errors import StoreError
from bot.core.events import ConversationKey, IncomingMessage
from bot.core.store import IngestResult, Timing
from storage.sql_store import SqlStore
from tests.contract.conftest import Backend

T = Timing(quiet_seconds=2.0, max_wait_seconds=10.0)
NOW = 1_000.0


def msg(key: ConversationKey, n: int | str, text: str = "hi") -> IncomingMessage:
    """Message ids are unique per workspace: `n` must differ across conversations too."""
    return IncomingMessage(key, f"m{n}", "u1", "alice", text)


def keys(count: int) -> list[ConversationKey]:
    return [ConversationKey("test", "w", f"c{i}") for i in range(count)]


async def test_concurrent_ingests_across_conversations_each_get_their_own_seq(
    store: SqlStore,
) -> None:
    convs = keys(5)
    messages = [msg(key, f"{i}-{n}") for n in range(10) for i, key in enumerate(convs)]
    results = await asyncio.gather(*(store.ingest(m, NOW, T) for m in messages))

    assert all(r.status == "accepted" for r in results)
    for key in convs:
        mine = {m.message_id: r for m, r in zip(messages, results, strict=True) if m.key == key}
        assert all(r.conversation_id == key.id for r in mine.values())
        stored = await store.pending_messages(key.id, 0, 100)
        assert sorted(r.version for r in mine.values()) == list(range(1, 11))
        assert {m.message_id: m.seq for m in stored} == {i: r.version for i, r in mine.items()}
        state = await store.conversation_state(key.id)
        assert state is not None and state.timer is not None
        assert (state.version, state.timer.armed_version) == (10, 10)


async def test_copies_of_one_id_in_one_burst_of_calls_are_stored_once(store: SqlStore) -> None:
    (key,) = keys(1)
    await store.ingest(msg(key, 0), NOW, T)
    calls = [
        msg(key, 1),
        msg(key, 1),
        msg(key, 0),
        msg(key, 2, "yes"),
        msg(key, 1),
        msg(key, 3, "yes"),
    ]
    results = await asyncio.gather(*(store.ingest(m, NOW + 1, T) for m in calls))

    statuses = [r.status for r in results]
    assert statuses.count("accepted") == 3  # m1 once, m2, m3 ("yes" twice is two messages)
    assert [statuses[i] for i in (2,)] == ["duplicate"]  # stored before the batch
    assert sorted(statuses[i] for i in (0, 1, 4)) == ["accepted", "duplicate", "duplicate"]
    stored = await store.pending_messages(key.id, 0, 100)
    assert [m.message_id for m in stored].count("m1") == 1
    assert sorted(m.seq for m in stored) == [1, 2, 3, 4]
    accepted = sorted(r.version for r in results if r.status == "accepted")
    assert accepted == [2, 3, 4]
    assert all(r.version >= 1 for r in results if r.status == "duplicate")


async def test_a_message_the_store_cannot_take_fails_alone(store: SqlStore) -> None:
    good, other = keys(2)
    calls = [msg(good, 1), msg(other, 9), msg(good, 2, "bad \ud800 text"), msg(good, 3)]
    results = await asyncio.gather(
        *(store.ingest(m, NOW, T) for m in calls), return_exceptions=True
    )

    assert isinstance(results[2], StoreError)
    ok = [r for i, r in enumerate(results) if i != 2]
    assert all(isinstance(r, IngestResult) and r.status == "accepted" for r in ok)
    stored = await store.pending_messages(good.id, 0, 100)
    # concurrent arrivals: on PostgreSQL each takes its own connection, so either may come first
    assert sorted(m.message_id for m in stored) == ["m1", "m3"]
    assert [m.seq for m in stored] == [1, 2]
    assert (await store.current_version(good.id), await store.current_version(other.id)) == (2, 1)
    # the refused message can be sent again once fixed; nothing of it was half-stored
    retry = await store.ingest(msg(good, 2, "fixed text"), NOW + 1, T)
    assert (retry.status, retry.version) == ("accepted", 3)


async def test_acknowledged_ingests_are_visible_to_another_connection(backend: Backend) -> None:
    if not backend.shared:
        pytest.skip("needs two connections to one database")
    writer, reader = await backend.new_store(), await backend.new_store()
    convs = keys(20)
    results = await asyncio.gather(*(writer.ingest(msg(k, k.channel), NOW, T) for k in convs))
    assert all(r.status == "accepted" for r in results)
    for key in convs:
        assert await reader.current_version(key.id) == 1
    assert await reader.next_due_at(NOW) == NOW + T.quiet_seconds
