"""The typing notice's one statement (`extend_quiet`) on every backend: it stretches
an armed timer of a conversation with pending input from that author, within the deadline, and
touches nothing else."""

from __future__ import annotations

from bot.core.events import ConversationKey, IncomingMessage, MessageDeleted
from bot.core.store import Committed, FinalCheck, NewReply, Timing
from storage.sql_store import SqlStore

T = Timing(quiet_seconds=1.0, max_wait_seconds=8.0)
KEY = ConversationKey("test", "w", "c1")
NOW = 1_000.0


def said(n: int, author: str = "u1") -> IncomingMessage:
    return IncomingMessage(KEY, f"m{n}", author, author, f"text {n}")


async def due(store: SqlStore) -> float | None:
    state = await store.conversation_state(KEY.id)
    return None if state is None or state.timer is None else state.timer.due_at


async def test_an_author_typing_stretches_the_quiet_window_up_to_the_deadline(
    store: SqlStore,
) -> None:
    await store.ingest(said(1), NOW, T)
    assert await due(store) == NOW + 1.0
    assert await store.extend_quiet(KEY.id, "u1", NOW + 5.0, NOW) == NOW + 5.0
    assert await due(store) == NOW + 5.0
    # never shorter than it was, never past the deadline
    assert await store.extend_quiet(KEY.id, "u1", NOW + 3.0, NOW) == NOW + 5.0
    assert await store.extend_quiet(KEY.id, "u1", NOW + 60.0, NOW) == NOW + 8.0
    assert await due(store) == NOW + 8.0
    # the next message re-arms the quiet window from itself, as always
    await store.ingest(said(2), NOW + 6.0, T)
    assert await due(store) == NOW + 7.0


async def test_typing_changes_nothing_without_pending_input_from_its_author(
    store: SqlStore,
) -> None:
    typing = store
    assert await typing.extend_quiet(KEY.id, "u1", NOW + 5.0, NOW) is None
    assert await store.conversation_state(KEY.id) is None  # nothing created
    await store.ingest(said(1), NOW, T)
    assert await typing.extend_quiet(KEY.id, "someone-else", NOW + 5.0, NOW) is None
    await store.delete(MessageDeleted(KEY, "m1"), NOW + 0.5, T)
    assert await typing.extend_quiet(KEY.id, "u1", NOW + 5.0, NOW) is None  # only a deleted one
    assert await due(store) == NOW + 1.5


async def test_typing_after_the_burst_was_answered_changes_nothing(store: SqlStore) -> None:
    await store.ingest(said(1), NOW, T)
    lease = await store.acquire_lease(KEY.id, "o1", NOW + 1.0, 30.0)
    assert lease is not None
    check = FinalCheck(lease.token, lease.version, False)
    assert isinstance(await store.commit(KEY.id, check, NOW + 2.0, T, NewReply("ok")), Committed)
    assert await store.extend_quiet(KEY.id, "u1", NOW + 9.0, NOW) is None
    assert await due(store) is None
