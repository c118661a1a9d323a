"""The streaming draft in the store: fenced by the lease, kept across generations, handed to the
reply that finishes it. Run against every backend (see conftest)."""

from __future__ import annotations

from bot.core.events import ConversationKey, IncomingMessage
from bot.core.store import Committed, Draft, FinalCheck, NewReply, Timing
from storage.sql_store import SqlStore

T = Timing(quiet_seconds=2.0, max_wait_seconds=10.0)
KEY = ConversationKey("test", "w", "c1")
CID = KEY.id
NOW = 1_000.0


def msg(n: int) -> IncomingMessage:
    return IncomingMessage(KEY, f"m{n}", "u1", "alice", f"text {n}")


async def test_a_draft_is_recorded_key_first_then_its_message_id(store: SqlStore) -> None:
    await store.ingest(msg(1), NOW, T)
    lease = await store.acquire_lease(CID, "o1", NOW, 30.0)
    assert lease is not None
    assert await store.draft(CID) is None
    assert await store.record_draft(CID, lease.token, Draft("dkey1"))
    assert await store.draft(CID) == Draft("dkey1", None)
    assert await store.record_draft(CID, lease.token, Draft("dkey1", "m-100"))
    assert await store.draft(CID) == Draft("dkey1", "m-100")
    # one draft per conversation: a second key is refused while the first one is recorded
    assert not await store.record_draft(CID, lease.token, Draft("other"))
    assert await store.draft(CID) == Draft("dkey1", "m-100")


async def test_only_the_lease_holder_changes_the_draft(store: SqlStore) -> None:
    await store.ingest(msg(1), NOW, T)
    lease = await store.acquire_lease(CID, "o1", NOW, 30.0)
    assert lease is not None
    await store.release_lease(CID, lease.token)
    assert not await store.record_draft(CID, lease.token, Draft("dkey1"))
    taken = await store.acquire_lease(CID, "o2", NOW + 1, 30.0)
    assert taken is not None
    assert not await store.record_draft(CID, lease.token, Draft("dkey1"))  # stale token
    assert await store.record_draft(CID, taken.token, Draft("dkey2", "m-2"))
    assert not await store.drop_draft(CID, lease.token, "dkey2")
    assert not await store.drop_draft(CID, taken.token, "another key")
    assert await store.draft(CID) == Draft("dkey2", "m-2")
    assert await store.drop_draft(CID, taken.token, "dkey2")
    assert await store.draft(CID) is None


async def test_the_draft_outlives_a_released_lease_and_a_takeover(store: SqlStore) -> None:
    await store.ingest(msg(1), NOW, T)
    first = await store.acquire_lease(CID, "o1", NOW, 30.0)
    assert first is not None
    assert await store.record_draft(CID, first.token, Draft("dkey1", "m-1"))
    await store.release_lease(CID, first.token)  # superseded: the draft stays
    assert await store.draft(CID) == Draft("dkey1", "m-1")
    second = await store.acquire_lease(CID, "o1", NOW + 1, 30.0)
    assert second is not None
    crashed_takeover = await store.acquire_lease(CID, "o2", NOW + 40, 30.0)
    assert crashed_takeover is not None and crashed_takeover.taken_over
    assert await store.draft(CID) == Draft("dkey1", "m-1")


async def test_the_committed_reply_takes_the_draft_over(store: SqlStore) -> None:
    await store.ingest(msg(1), NOW, T)
    lease = await store.acquire_lease(CID, "o1", NOW, 30.0)
    assert lease is not None
    assert await store.record_draft(CID, lease.token, Draft("dkey1", "m-1"))
    check = FinalCheck(lease.token, lease.version, False)
    outcome = await store.commit(CID, check, NOW, T, NewReply("the answer"))
    assert isinstance(outcome, Committed) and outcome.reply is not None
    assert outcome.reply.draft == Draft("dkey1", "m-1")
    assert await store.draft(CID) is None
    [row] = await store.replies(CID)
    assert row.draft == Draft("dkey1", "m-1")
    claimed = await store.claim_replies("o1", NOW, 30.0, ["test"], 5)
    assert [r.draft for r in claimed] == [Draft("dkey1", "m-1")]


async def test_a_draft_whose_post_was_never_recorded_goes_to_the_reply_by_key(
    store: SqlStore,
) -> None:
    await store.ingest(msg(1), NOW, T)
    lease = await store.acquire_lease(CID, "o1", NOW, 30.0)
    assert lease is not None
    assert await store.record_draft(CID, lease.token, Draft("dkey1"))
    check = FinalCheck(lease.token, lease.version, False)
    outcome = await store.commit(CID, check, NOW, T, NewReply("the answer"))
    assert isinstance(outcome, Committed) and outcome.reply is not None
    assert outcome.reply.draft == Draft("dkey1", None)


async def test_a_discarded_commit_leaves_the_draft_with_the_conversation(store: SqlStore) -> None:
    await store.ingest(msg(1), NOW, T)
    lease = await store.acquire_lease(CID, "o1", NOW, 30.0)
    assert lease is not None
    assert await store.record_draft(CID, lease.token, Draft("dkey1", "m-1"))
    await store.ingest(msg(2), NOW + 1, T)  # newer input: the final check fails
    check = FinalCheck(lease.token, lease.version, False)
    assert not isinstance(await store.commit(CID, check, NOW, T, NewReply("stale")), Committed)
    assert await store.replies(CID) == []
    assert await store.draft(CID) == Draft("dkey1", "m-1")


async def test_a_reply_without_a_draft_has_none(store: SqlStore) -> None:
    await store.ingest(msg(1), NOW, T)
    lease = await store.acquire_lease(CID, "o1", NOW, 30.0)
    assert lease is not None
    check = FinalCheck(lease.token, lease.version, False)
    outcome = await store.commit(CID, check, NOW, T, NewReply("plain"))
    assert isinstance(outcome, Committed) and outcome.reply is not None
    assert outcome.reply.draft is None
