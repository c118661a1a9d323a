"""Clicks in the store (G16): stored once per platform id, decided by one compare-and-swap. Run
against every backend (see conftest); the races run on separate connections where the backend
shares a database."""

from __future__ import annotations

import asyncio

from bot.core.clicks import Click
from bot.core.events import ConversationKey, Draft, IncomingMessage
from bot.core.store import Committed, Discarded, FinalCheck, NewReply, Timing
from storage.sql_store import SqlStore
from tests.contract.conftest import Backend

T = Timing(quiet_seconds=2.0, max_wait_seconds=10.0)
KEY = ConversationKey("test", "w", "c1")
CID = KEY.id
NOW = 1_000.0


def stop(click_id: str, clicker: str = "u1", target: str = "dkey") -> Click:
    return Click(click_id, KEY, "stop", target, clicker, clicker)


async def generating(store: SqlStore) -> int:
    """A burst under a lease with its draft posted: the lease's token."""
    await store.ingest(IncomingMessage(KEY, "m1", "u1", "alice", "hi"), NOW, T)
    lease = await store.acquire_lease(CID, "o1", NOW + 3, 30.0)
    assert lease is not None
    assert await store.record_draft(CID, lease.token, Draft("dkey", "m-100"))
    return lease.token


async def test_a_click_is_stored_once_and_decided_once(store: SqlStore) -> None:
    await generating(store)
    assert await store.stop(stop("A"), False, NOW + 4) == "stopped"
    assert await store.stop(stop("A"), False, NOW + 5) == "duplicate"
    assert await store.stop(stop("B"), False, NOW + 5) == "already_stopped"
    assert [(c.click_id, c.outcome) for c in await store.clicks(CID)] == [
        ("A", "stopped"),
        ("B", "already_stopped"),
    ]
    pending = await store.pending_stop(CID)
    assert pending is not None and pending.version == 2 and pending.clicker_name == "u1"


async def test_only_the_bursts_authors_or_an_admin_stop_it(store: SqlStore) -> None:
    await generating(store)
    assert await store.stop(stop("A", clicker="u9"), False, NOW + 4) == "refused"
    assert await store.stop(stop("B", target="old draft"), False, NOW + 4) == "ended"
    assert await store.current_version(CID) == 1
    assert await store.stop(stop("C", clicker="u9"), True, NOW + 4) == "stopped"


async def test_a_stop_wins_over_the_generations_own_commit(store: SqlStore) -> None:
    token = await generating(store)
    assert await store.stop(stop("A"), False, NOW + 4) == "stopped"
    normal = FinalCheck(token, 1, deadline_passed=True)  # past the deadline, newer input or not
    assert isinstance(await store.commit(CID, normal, NOW + 5, T, NewReply("all")), Discarded)
    stopped = FinalCheck(token, 2, deadline_passed=True, stopping=True)
    done = await store.commit(CID, stopped, NOW + 5, T, NewReply("half"))
    assert isinstance(done, Committed) and done.reply is not None
    assert done.reply.covers_to_version == 2 and done.reply.draft == Draft("dkey", "m-100")
    assert await store.pending_stop(CID) is None
    assert await store.stop(stop("B"), False, NOW + 6) == "ended"


async def test_two_stops_of_one_burst_at_once_decide_once(backend: Backend) -> None:
    stores = [await backend.new_store() for _ in range(2)]
    await generating(stores[0])
    outcomes = await asyncio.gather(
        *(s.stop(stop(f"click-{n}"), False, NOW + 4) for n, s in enumerate(stores))
    )
    assert sorted(outcomes) == ["already_stopped", "stopped"]
    assert await stores[0].current_version(CID) == 2


async def test_a_stop_racing_the_commit_has_exactly_one_outcome(backend: Backend) -> None:
    for attempt in range(6):
        stores = [await backend.new_store() for _ in range(2)]
        key = ConversationKey("test", "w", f"race{attempt}")
        hello = IncomingMessage(key, f"race-m{attempt}", "u1", "alice", "hi")
        assert (await stores[0].ingest(hello, NOW, T)).status == "accepted"
        lease = await stores[0].acquire_lease(key.id, "o1", NOW + 3, 30.0)
        assert lease is not None
        assert await stores[0].record_draft(key.id, lease.token, Draft("dkey", "m-1"))
        check = FinalCheck(lease.token, 1, deadline_passed=False)
        click = Click(f"race-{attempt}", key, "stop", "dkey", "u1", "alice")
        committed, stopped = await asyncio.gather(
            stores[0].commit(key.id, check, NOW + 4, T, NewReply("the answer")),
            stores[1].stop(click, False, NOW + 4),
        )
        if isinstance(committed, Committed):
            assert stopped == "ended"
            assert await stores[0].pending_stop(key.id) is None
        else:
            assert stopped == "stopped"
            assert await stores[0].replies(key.id) == []


async def test_a_stop_naming_a_message_of_the_pending_burst_stops_it(store: SqlStore) -> None:
    """An agent session's stop names the message its status went on for, not a draft: it stops
    the burst while that message is pending, with or without a draft posted yet."""
    await store.ingest(IncomingMessage(KEY, "m1", "u1", "alice", "hi"), NOW, T)
    assert await store.stop(stop("A", clicker="u9", target="m1"), False, NOW + 1) == "refused"
    assert await store.stop(stop("B", target="m-unknown"), False, NOW + 1) == "ended"
    assert await store.stop(stop("C", target="m1"), False, NOW + 1) == "stopped"
    assert await store.stop(stop("D", target="m1"), False, NOW + 2) == "already_stopped"
    pending = await store.pending_stop(CID)
    assert pending is not None and pending.version == 2


async def test_a_stop_naming_an_answered_message_changes_nothing(store: SqlStore) -> None:
    token = await generating(store)
    check = FinalCheck(token, 1, deadline_passed=True)
    assert isinstance(await store.commit(CID, check, NOW + 5, T, NewReply("done")), Committed)
    await store.ingest(IncomingMessage(KEY, "m2", "u1", "alice", "and?"), NOW + 6, T)
    assert await store.stop(stop("A", target="m1"), False, NOW + 7) == "ended"  # m1's is answered
    assert await store.current_version(CID) == 2
    assert await store.stop(stop("B", target="m2"), False, NOW + 7) == "stopped"
