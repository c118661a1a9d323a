"""The store contract for speculation's early start (`start_at`), on every backend: the timer is
due at its early start, its window still closes at `due_at`, and closed windows come first."""

from __future__ import annotations

from pytest import approx

from bot.core.events import ConversationKey, IncomingMessage
from bot.core.store import Timing
from storage.sql_store import SqlStore

EARLY = Timing(quiet_seconds=2.0, max_wait_seconds=10.0, speculate_after_seconds=0.3)
PLAIN = Timing(quiet_seconds=2.0, max_wait_seconds=10.0)
KEY = ConversationKey("test", "w", "c1")
CID = KEY.id
NOW = 1_000.0


def msg(n: int, key: ConversationKey = KEY) -> IncomingMessage:
    return IncomingMessage(key, f"m{n}", "u1", "alice", f"text {n}")


async def test_a_timer_is_due_at_its_early_start_and_closes_at_due_at(store: SqlStore) -> None:
    armed = await store.ingest(msg(1), NOW, EARLY)
    assert (armed.start_at, armed.due_at) == (approx(NOW + 0.3), approx(NOW + 2.0))
    assert await store.next_due_at(NOW) == approx(NOW + 0.3)
    assert await store.due_timers(NOW + 0.29, 5) == []
    (timer,) = await store.due_timers(NOW + 0.3, 5)
    assert (timer.start_at, timer.due_at) == (approx(NOW + 0.3), approx(NOW + 2.0))
    assert await store.window_closes_at(CID, NOW) == approx(NOW + 2.0)


async def test_without_speculation_no_early_start_is_armed(store: SqlStore) -> None:
    armed = await store.ingest(msg(1), NOW, PLAIN)
    assert armed.start_at is None
    assert await store.next_due_at(NOW) == approx(NOW + 2.0)
    assert await store.due_timers(NOW + 1.9, 5) == []


async def test_the_early_start_never_comes_after_the_deadline(store: SqlStore) -> None:
    await store.ingest(msg(1), NOW, EARLY)
    armed = await store.ingest(msg(2), NOW + 9.9, EARLY)
    assert (armed.start_at, armed.due_at) == (approx(NOW + 10.0), approx(NOW + 10.0))


async def test_the_lease_takes_the_early_start_and_release_waits_for_the_close(
    store: SqlStore,
) -> None:
    await store.ingest(msg(1), NOW, EARLY)
    lease = await store.acquire_lease(CID, "o1", NOW + 0.3, 30.0)
    assert lease is not None and lease.closes_at == approx(NOW + 2.0)
    assert await store.next_due_at(NOW) == approx(NOW + 30.3)  # held: no second early start
    await store.release_lease(CID, lease.token)
    assert await store.next_due_at(NOW) == approx(NOW + 2.0)  # the real start, at the close
    assert await store.due_timers(NOW + 1.9, 5) == []


async def test_new_input_under_a_lease_arms_the_next_early_start(store: SqlStore) -> None:
    await store.ingest(msg(1), NOW, EARLY)
    lease = await store.acquire_lease(CID, "o1", NOW + 0.3, 30.0)
    assert lease is not None
    await store.ingest(msg(2), NOW + 1.0, EARLY)
    assert await store.next_due_at(NOW) == approx(NOW + 1.3)
    await store.release_lease(CID, lease.token)
    (timer,) = await store.due_timers(NOW + 1.3, 5)
    assert (timer.start_at, timer.due_at) == (approx(NOW + 1.3), approx(NOW + 3.0))


async def test_closed_windows_come_before_early_starts(store: SqlStore) -> None:
    other = ConversationKey("test", "w", "c2")
    await store.ingest(
        msg(1, other), NOW, Timing(8.0, 10.0, speculate_after_seconds=0.3)
    )  # starts early, closes late
    await store.ingest(msg(2), NOW + 0.5, PLAIN)  # closes at +2.5
    (first,) = await store.due_timers(NOW + 3.0, 1)
    assert first.conversation_id == CID
    both = await store.due_timers(NOW + 3.0, 5)
    assert [t.conversation_id for t in both] == [CID, other.id]


async def test_a_typing_notice_moves_the_close_and_flush_brings_it_to_now(store: SqlStore) -> None:
    await store.ingest(msg(1), NOW, EARLY)
    assert await store.extend_quiet(CID, "u1", NOW + 5.0, NOW + 1.0) == approx(NOW + 5.0)
    assert await store.window_closes_at(CID, NOW + 1.0) == approx(NOW + 5.0)
    assert await store.next_due_at(NOW) == approx(NOW + 0.3)  # the early start stays
    await store.flush(CID, NOW + 1.0)
    assert await store.window_closes_at(CID, NOW + 1.0) == approx(NOW + 1.0)
    assert await store.next_due_at(NOW) == approx(NOW + 0.3)


async def test_postponing_a_timer_leased_elsewhere_drops_its_early_start(store: SqlStore) -> None:
    await store.ingest(msg(1), NOW, EARLY)
    await store.postpone_timer(CID, NOW + 1.3, NOW + 0.3)
    assert await store.next_due_at(NOW) == approx(NOW + 2.0)  # not before, and the window holds
