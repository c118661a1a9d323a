"""The SQLite store's operator side: history floor (/reset), guard counters, inspection."""

from __future__ import annotations

from bot.clock import FakeClock
from bot.events import ConversationKey, IncomingMessage, MessageDeleted
from bot.guards import CounterStore
from bot.inspection import StoreInspector
from bot.store import Timing
from bot.testing import RecordingFrontend, ScriptedReplier
from storage.sqlite import SqliteStore
from tests.conftest import KEY, make_engine, message

TIMING = Timing(1.5, 8.0)


async def test_reset_hides_earlier_turns_from_prompts_but_keeps_the_messages(
    store: SqliteStore, clock: FakeClock, frontend: RecordingFrontend
) -> None:
    replier = ScriptedReplier()
    engine = make_engine(store, clock, replier, frontend)
    await engine.ingest(message(1, "my number is 42"))
    await clock.advance(2)
    await engine.run_due()
    await engine.idle()
    assert await store.reset_history(KEY.id) == 1
    await engine.ingest(message(2, "what was my number?"))
    await clock.advance(2)
    await engine.run_due()
    await engine.idle()
    assert [t.text for t in replier.calls[1].prompt.history] == []
    assert [m.text for m in await store.messages(KEY.id)] == [
        "my number is 42",
        "what was my number?",
    ]
    await engine.ingest(message(3, "and now?"))
    await clock.advance(2)
    await engine.run_due()
    await engine.idle()
    history = [t.text for t in replier.calls[2].prompt.history]
    assert history == ["alice: what was my number?", "reply to: what was my number?"]
    assert await store.reset_history("test/w1/nowhere/") is None


async def test_counters_add_atomically_per_window_and_expire(store: SqliteStore) -> None:
    assert isinstance(store, CounterStore)
    assert await store.add_to_counter("rate:u", 7, 1, expires_at=100.0, now=10.0) == 1
    assert await store.add_to_counter("rate:u", 7, 2, expires_at=100.0, now=10.0) == 3
    assert await store.add_to_counter("rate:u", 8, 1, expires_at=200.0, now=10.0) == 1
    assert await store.read_counter("rate:u", 7) == 3
    assert await store.read_counter("rate:v", 7) == 0
    await store.add_to_counter("other", 1, 1, expires_at=300.0, now=150.0)  # prunes window 7
    assert await store.read_counter("rate:u", 7) == 0
    assert await store.read_counter("rate:u", 8) == 1


async def test_inspection_lists_active_conversations_and_every_message(
    store: SqliteStore, clock: FakeClock, frontend: RecordingFrontend
) -> None:
    assert isinstance(store, StoreInspector)
    engine = make_engine(store, clock, ScriptedReplier(), frontend)
    quiet = ConversationKey("test", "w1", "quiet")
    await engine.ingest(IncomingMessage(quiet, "q1", "u1", "bob", "answered"))
    await clock.advance(2)
    await engine.run_due()
    await engine.idle()
    await engine.ingest(message(1))
    await engine.ingest(message(2))
    await engine.ingest(MessageDeleted(KEY, "m2"))
    [active] = await store.list_conversations(active_only=True)
    assert active.state.conversation_id == KEY.id
    assert active.pending_messages == 1 and active.state.timer is not None
    assert (active.outbox_pending, active.outbox_failed) == (0, 0)
    every = await store.list_conversations(active_only=False)
    assert [s.state.conversation_id for s in every] == [KEY.id, quiet.id]  # newest first
    assert [(m.seq, m.deleted) for m in await store.messages(KEY.id)] == [(1, False), (2, True)]
