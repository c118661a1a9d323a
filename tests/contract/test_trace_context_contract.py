"""The store contract for a burst's trace context (bot/core/trace_context.py), on every backend:
chosen when the burst's first message is stored, the same for the rest of the burst (edits too),
handed to the lease (a process taking the burst over joins its trace), and new for the next
burst, also one whose input arrived while the previous answer was committed."""

from __future__ import annotations

from bot.core.events import ConversationKey, IncomingMessage, MessageEdited
from bot.core.store import FinalCheck, Timing
from bot.core.trace_context import parse_trace_context
from storage.sql_store import SqlStore

TIMING = Timing(quiet_seconds=2.0, max_wait_seconds=10.0)
KEY = ConversationKey("test", "w", "c1")
CID = KEY.id
NOW = 1_000.0


def msg(n: int) -> IncomingMessage:
    return IncomingMessage(KEY, f"m{n}", "u1", "alice", f"text {n}")


async def test_a_burst_keeps_the_trace_context_its_first_message_opened(store: SqlStore) -> None:
    first = await store.ingest(msg(1), NOW, TIMING)
    second = await store.ingest(msg(2), NOW + 0.1, TIMING)
    edited = await store.edit(MessageEdited(KEY, "m1", "text one"), NOW + 0.2, TIMING)
    duplicate = await store.ingest(msg(2), NOW + 0.3, TIMING)
    assert parse_trace_context(first.trace_context) is not None
    assert (first.opened, second.opened, edited.opened) == (True, False, False)
    assert second.trace_context == edited.trace_context == first.trace_context
    assert duplicate.status == "duplicate" and not duplicate.opened

    lease = await store.acquire_lease(CID, "w1", NOW + 5, 30.0)
    assert lease is not None and lease.trace_context == first.trace_context

    check = FinalCheck(lease.token, lease.version, deadline_passed=False)
    await store.commit(CID, check, NOW + 5, TIMING, None)
    later = await store.ingest(msg(3), NOW + 6, TIMING)
    assert later.opened and later.trace_context not in (None, first.trace_context)


async def test_input_past_the_committed_version_opens_the_next_bursts_trace(
    store: SqlStore,
) -> None:
    first = await store.ingest(msg(1), NOW, TIMING)
    lease = await store.acquire_lease(CID, "w1", NOW + 3, 30.0)
    assert lease is not None
    newer = await store.ingest(msg(2), NOW + 4, TIMING)  # past the deadline: the next burst's
    assert not newer.opened and newer.trace_context == first.trace_context
    check = FinalCheck(lease.token, lease.version, deadline_passed=True)
    await store.commit(CID, check, NOW + 5, TIMING, None)
    await store.release_lease(CID, lease.token)
    next_lease = await store.acquire_lease(CID, "w1", NOW + 7, 30.0)
    assert next_lease is not None and next_lease.version == newer.version
    assert next_lease.trace_context not in (None, first.trace_context)
    assert parse_trace_context(next_lease.trace_context) is not None
