"""The operator side of the store contract: `/reset`, the cost guards' counters and inspection
(status, explain)."""

from __future__ import annotations

import asyncio

from bot.core.events import ConversationKey, IncomingMessage, MessageDeleted
from bot.core.store import Committed, FinalCheck, NewReply, OutboxRow, Timing
from storage.sql_store import SqlStore
from tests.contract.conftest import Backend

T = Timing(quiet_seconds=2.0, max_wait_seconds=10.0)
KEY = ConversationKey("test", "w", "c1")
CID = KEY.id
NOW = 1_000.0


def msg(n: int, text: str, key: ConversationKey = KEY) -> IncomingMessage:
    return IncomingMessage(key, f"m{n}", "u1", "alice", text)


async def answer(store: SqlStore, now: float, text: str) -> None:
    lease = await store.acquire_lease(CID, "o1", now, 30.0)
    assert lease is not None
    outcome = await store.commit(
        CID, FinalCheck(lease.token, lease.version, False), now, T, NewReply(text)
    )
    assert isinstance(outcome, Committed)
    row = outcome.reply
    assert isinstance(row, OutboxRow)


async def test_reset_history_leaves_earlier_turns_out_of_history(store: SqlStore) -> None:
    await store.ingest(msg(1, "my number is 42"), NOW, T)
    await answer(store, NOW + 3, "noted")
    assert await store.reset_history(CID) == 1
    await store.ingest(msg(2, "what was it?"), NOW + 5, T)
    assert await store.history(CID, 1, 50) == []  # what the next prompt gets: nothing earlier
    assert [m.text for m in await store.pending_messages(CID, 1, 2)] == ["what was it?"]
    await answer(store, NOW + 8, "no idea")
    history = await store.history(CID, 2, 50)
    assert [(h.role, h.text) for h in history] == [
        ("user", "what was it?"),
        ("assistant", "no idea"),
    ]
    assert await store.reset_history("test/w/unknown/") is None


async def test_counters_add_atomically_per_window_and_expire(store: SqlStore) -> None:
    assert await store.add_to_counter("rate:u", 7, 1, expires_at=100.0, now=10.0) == 1
    assert await store.add_to_counter("rate:u", 7, 2, expires_at=100.0, now=10.0) == 3
    assert await store.add_to_counter("rate:u", 8, 1, expires_at=200.0, now=10.0) == 1
    assert await store.read_counter("rate:u", 7) == 3
    assert await store.read_counter("rate:v", 7) == 0
    await store.add_to_counter("other", 1, 1, expires_at=300.0, now=150.0)  # prunes window 7
    assert await store.read_counter("rate:u", 7) == 0
    assert await store.read_counter("rate:u", 8) == 1


async def test_a_key_adds_to_a_counter_once_and_repeats_its_total(backend: Backend) -> None:
    """Twin deliveries of one message, racing on separate connections: exactly one adds."""
    stores = [await backend.new_store() for _ in range(3)]
    counters = stores
    assert await counters[0].add_once("m0", "rate:u", 7, 100.0, 500.0, now=10.0) == (1, True)
    outcomes = await asyncio.gather(
        *(c.add_once("m1", "rate:u", 7, 100.0, 500.0, now=10.0) for c in counters for _ in "ab")
    )
    assert sorted(outcomes) == [(2, False)] * 5 + [(2, True)]
    assert await counters[1].read_counter("rate:u", 7) == 2
    assert await counters[2].add_once("m0", "rate:u", 8, 200.0, 500.0, now=150.0) == (1, False)
    assert await counters[2].read_counter("rate:u", 8) == 0  # a repeat adds to no window
    await counters[0].add_to_counter("other", 1, 1, expires_at=900.0, now=600.0)  # forgets m0
    assert await counters[0].add_once("m0", "rate:u", 9, 900.0, 1000.0, now=600.0) == (1, True)


async def test_inspection_lists_active_conversations_and_every_message(store: SqlStore) -> None:
    quiet = ConversationKey("test", "w", "quiet")
    await store.ingest(IncomingMessage(quiet, "q1", "u1", "bob", "answered"), NOW, T)
    lease = await store.acquire_lease(quiet.id, "o1", NOW + 3, 30.0)
    assert lease is not None
    await store.commit(
        quiet.id, FinalCheck(lease.token, lease.version, False), NOW + 3, T, NewReply("ok")
    )
    [row] = await store.claim_replies("o1", NOW + 3, 30.0, ["test"], 10)
    assert await store.mark_sent(row.id, row.claim_token, ["p1"], NOW + 3)
    await store.ingest(msg(1, "a"), NOW + 4, T)
    await store.ingest(msg(2, "b"), NOW + 5, T)
    await store.delete(MessageDeleted(KEY, "m2"), NOW + 6, T)
    [active] = await store.list_conversations(active_only=True)
    assert active.state.conversation_id == CID
    assert active.pending_messages == 1 and active.state.timer is not None
    assert (active.outbox_pending, active.outbox_failed) == (0, 0)
    every = await store.list_conversations(active_only=False)
    assert [s.state.conversation_id for s in every] == [CID, quiet.id]  # newest first
    assert [(m.seq, m.text, m.deleted) for m in await store.messages(CID)] == [
        (1, "a", False),
        (2, "b", True),
    ]


async def test_felt_waits_run_from_a_bursts_last_message_to_its_first_shown_text(
    store: SqlStore,
) -> None:
    await store.ingest(msg(1, "first"), NOW, T)
    await store.ingest(msg(2, "second"), NOW + 1, T)
    await answer(store, NOW + 4, "both answered")  # committed, not posted: no wait yet
    assert await store.felt_waits(0.0) == []
    [claimed] = await store.claim_replies("o1", NOW + 4, 30.0, ["test"], 5)
    assert await store.mark_sent(claimed.id, claimed.claim_token, ["p1"], NOW + 4.5) is not None
    other = ConversationKey("test", "w", "c2")
    await store.ingest(msg(3, "elsewhere", other), NOW + 10, T)
    lease = await store.acquire_lease(other.id, "o1", NOW + 12, 30.0)
    assert lease is not None
    await store.commit(other.id, FinalCheck(lease.token, lease.version, False), NOW + 13, T,
                       NewReply("failed later"))  # fmt: skip
    assert await store.felt_waits(0.0) == [3.5]  # from "second"; the unsent one has none
    assert await store.felt_waits(NOW + 5) == []  # answers committed since then only
