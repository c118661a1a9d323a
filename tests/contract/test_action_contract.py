"""Tool calls as durable actions in the store: recorded before they run, fenced by the lease
token, once per idempotency key across the generations of a burst; the result written once;
erased by `forget`. Run against every backend (see conftest)."""

from __future__ import annotations

import asyncio
from dataclasses import replace

from bot.core.actions import ActionLog, NewAction, canonical_arguments, idempotency_key
from bot.core.events import ConversationKey, IncomingMessage
from bot.core.store import Timing
from storage.sql_store import SqlStore

T = Timing(quiet_seconds=2.0, max_wait_seconds=10.0)
KEY = ConversationKey("test", "w", "c1")
CID = KEY.id
NOW = 1_000.0


def log_of(store: SqlStore) -> ActionLog:
    assert isinstance(store, ActionLog)
    return store


def new_action(token: int, to_version: int = 1, title: str = "printer on fire") -> NewAction:
    arguments = canonical_arguments({"title": title})
    key = idempotency_key(CID, 0, "tracker", "create_ticket", arguments)
    return NewAction(CID, token, 0, to_version, key, "tracker", "create_ticket", arguments,
                     False, "toolu_1", "u1", NOW)  # fmt: skip


async def leased(store: SqlStore, owner: str = "o1", now: float = NOW) -> int:
    lease = await store.acquire_lease(CID, owner, now, 30.0)
    assert lease is not None
    return lease.token


async def test_a_call_is_recorded_once_and_a_later_generation_gets_the_record(
    store: SqlStore,
) -> None:
    log = log_of(store)
    await store.ingest(IncomingMessage(KEY, "m1", "u1", "alice", "open a ticket"), NOW, T)
    first = await leased(store)
    began = await log.begin_action(new_action(first))
    assert began is not None and began.created and began.record.state == "unknown"
    await store.release_lease(CID, first)
    await store.ingest(IncomingMessage(KEY, "m2", "u1", "alice", "make it high"), NOW + 1, T)
    second = await leased(store, now=NOW + 2)
    again = await log.begin_action(replace(new_action(second, to_version=2), started_at=NOW + 3))
    assert again is not None and not again.created
    assert again.record.lease_token == first and again.record.to_version == 1
    assert [a.idempotency_key for a in await log.actions(CID, 0)] == [began.record.idempotency_key]
    assert await log.actions(CID, 5) == []


async def test_a_stale_lease_records_nothing(store: SqlStore) -> None:
    log = log_of(store)
    await store.ingest(IncomingMessage(KEY, "m1", "u1", "alice", "open a ticket"), NOW, T)
    stale = await leased(store)
    await leased(store, "o2", NOW + 31)  # the first lease expired and was taken over
    assert await log.begin_action(new_action(stale)) is None
    assert await log.actions(CID) == []


async def test_of_two_racing_begins_exactly_one_creates(store: SqlStore) -> None:
    log = log_of(store)
    await store.ingest(IncomingMessage(KEY, "m1", "u1", "alice", "open a ticket"), NOW, T)
    token = await leased(store)
    a, b = await asyncio.gather(
        log.begin_action(new_action(token)), log.begin_action(new_action(token))
    )
    assert a is not None and b is not None
    assert sorted([a.created, b.created]) == [False, True]
    assert len(await log.actions(CID)) == 1


async def test_a_result_is_written_once(store: SqlStore) -> None:
    log = log_of(store)
    await store.ingest(IncomingMessage(KEY, "m1", "u1", "alice", "open a ticket"), NOW, T)
    began = await log.begin_action(new_action(await leased(store)))
    assert began is not None
    key = began.record.idempotency_key
    assert await log.finish_action(CID, key, "created OPS-1", False, NOW + 2)
    assert not await log.finish_action(CID, key, "created OPS-2", True, NOW + 3)
    (record,) = await log.actions(CID)
    assert (record.state, record.result, record.duration) == ("done", "created OPS-1", 2.0)


async def test_forget_erases_arguments_and_results_but_keeps_the_call(store: SqlStore) -> None:
    log = log_of(store)
    await store.ingest(IncomingMessage(KEY, "m1", "u1", "alice", "open a ticket"), NOW, T)
    token = await leased(store)
    began = await log.begin_action(new_action(token))
    assert began is not None
    await log.finish_action(CID, began.record.idempotency_key, "created OPS-1", False, NOW + 1)
    counts = await store.forget_conversation(CID)  # type: ignore[attr-defined]
    assert counts["actions"] == 1
    (record,) = await log.actions(CID)
    assert (record.arguments, record.result, record.state) == ("{}", "", "done")
    again = await log.begin_action(new_action(token))  # the erased call is still never repeated
    assert again is not None and not again.created


async def test_forget_user_erases_their_actions(store: SqlStore) -> None:
    log = log_of(store)
    await store.ingest(IncomingMessage(KEY, "m1", "u1", "alice", "open a ticket"), NOW, T)
    assert await log.begin_action(new_action(await leased(store))) is not None
    counts = await store.forget_user("u1", None, NOW)  # type: ignore[attr-defined]
    assert counts["actions"] == 1
    assert (await log.actions(CID))[0].arguments == "{}"
