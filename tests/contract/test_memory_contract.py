"""What every store remembers for front ends : threads, held messages, where
catch-up starts, and how each message arrived. Run against every backend (see conftest)."""

from __future__ import annotations

from dataclasses import replace

from bot.core.events import ConversationKey, IncomingMessage
from bot.core.store import Timing
from storage.sql_store import SqlStore

T = Timing(quiet_seconds=2.0, max_wait_seconds=10.0)
DM = ConversationKey("slack", "T1", "D1")
THREAD = ConversationKey("slack", "T1", "C1", "1700000000.000005")
NOW = 1_000.0


def msg(n: int, key: ConversationKey = DM, via: str = "") -> IncomingMessage:
    return IncomingMessage(key, f"{key.channel}:{n}", "U1", "alice", f"text {n}", via=via)


async def test_a_thread_is_ours_once_we_hold_its_conversation_or_a_lookup_said_so(
    store: SqlStore,
) -> None:
    other = ConversationKey("slack", "T1", "C1", "1700000000.000009")
    assert await store.thread_status(THREAD.id) is None
    await store.remember_thread(other.id, False, NOW)
    assert await store.thread_status(other.id) is False
    await store.remember_thread(other.id, True, NOW + 1)  # decided again: the last answer holds
    assert await store.thread_status(other.id) is True
    await store.ingest(msg(1, THREAD), NOW, T)
    assert await store.thread_status(THREAD.id) is True


async def test_held_messages_are_kept_once_in_order_until_unheld(store: SqlStore) -> None:
    first, second = msg(1, THREAD), msg(2, THREAD)
    await store.hold(first, NOW)
    await store.hold(second, NOW + 1)
    await store.hold(first, NOW + 2)  # Slack's retry of the same event
    await store.hold(msg(3, ConversationKey("discord", "g", "c")), NOW)
    held = await store.held("slack", 10)
    assert held == [replace(first, via="held"), replace(second, via="held")]
    assert await store.held("slack", 1) == [replace(first, via="held")]
    await store.unhold(held[0])
    assert [m.message_id for m in await store.held("slack", 10)] == [second.message_id]
    assert await store.conversation_state(THREAD.id) is None  # held is not accepted input


async def test_catch_up_points_name_every_conversation_most_recently_active_first(
    store: SqlStore,
) -> None:
    quiet = ConversationKey("slack", "T1", "D9")
    await store.ingest(msg(1, quiet), NOW - 100_000, T)  # quiet for longer than any window
    await store.ingest(msg(1), NOW - 50, T)
    await store.ingest(msg(2), NOW - 40, T)
    await store.ingest(msg(3), NOW + 5, T)  # stored after the cut-off: a live message
    await store.ingest(msg(1, THREAD), NOW + 6, T)  # a conversation first seen after it
    await store.ingest(msg(1, ConversationKey("discord", "g", "c")), NOW, T)
    points = await store.catch_up_points("slack", NOW, NOW)
    assert list(points.items()) == [(THREAD.id, None), (DM.id, "D1:2"), (quiet.id, "D9:1")]


async def test_a_message_is_found_in_the_conversation_it_is_stored_in(store: SqlStore) -> None:
    await store.ingest(msg(1, THREAD), NOW, T)
    assert await store.stored_in("slack", "T1", "C1:1") == THREAD.id
    assert await store.stored_in("slack", "T2", "C1:1") is None  # ids are per workspace
    assert await store.stored_in("slack", "T1", "C1:2") is None
    again = replace(msg(1, THREAD), key=DM)  # the same message under another key: a duplicate
    assert (await store.ingest(again, NOW, T)).status == "duplicate"
    assert await store.stored_in("slack", "T1", "C1:1") == THREAD.id


async def test_each_message_remembers_how_it_arrived(store: SqlStore) -> None:
    await store.ingest(msg(1), NOW, T)
    await store.ingest(msg(2, via="catch-up"), NOW, T)
    await store.ingest(msg(3, via="held"), NOW, T)
    pending = await store.pending_messages(DM.id, 0, 3)
    assert [m.via for m in pending] == ["", "catch-up", "held"]
