"""The store contract: what the SQL store (`SqlStore`, every protocol of `bot.core.store`) must
do, run against every backend (see conftest)."""

from __future__ import annotations

import asyncio
from dataclasses import replace

import pytest

from bot.core.events import ConversationKey, IncomingMessage, MessageDeleted, MessageEdited
from bot.core.store import (
    Committed,
    Discarded,
    FinalCheck,
    NewReply,
    OutboxRow,
    Timing,
    TokenUsage,
)
from storage.sql_store import SqlStore
from tests.contract.conftest import Backend

T = Timing(quiet_seconds=2.0, max_wait_seconds=10.0)
KEY = ConversationKey("test", "w", "c1")
CID = KEY.id
NOW = 1_000.0


def msg(n: int, text: str = "hi", key: ConversationKey = KEY) -> IncomingMessage:
    return IncomingMessage(key, f"m{n}", "u1", "alice", text)


async def answer(
    store: SqlStore, owner: str = "o1", now: float = NOW, text: str = "ok"
) -> OutboxRow:
    lease = await store.acquire_lease(CID, owner, now, 30.0)
    assert lease is not None
    outcome = await store.commit(
        CID, FinalCheck(lease.token, lease.version, False), now, T, NewReply(text)
    )
    assert isinstance(outcome, Committed)
    row = outcome.reply
    assert isinstance(row, OutboxRow)
    return row


# 1. arrival ----------------------------------------------------------------------------------
async def test_ingest_stores_once_and_bumps_version_once(store: SqlStore) -> None:
    first = await store.ingest(msg(1), NOW, T)
    again = await store.ingest(msg(1), NOW + 1, T)
    assert (first.status, first.version, first.conversation_id) == ("accepted", 1, CID)
    assert (again.status, again.version) == ("duplicate", 1)
    assert [m.text for m in await store.pending_messages(CID, 0, 10)] == ["hi"]


async def test_same_text_twice_is_two_messages(store: SqlStore) -> None:
    await store.ingest(msg(1, "yes"), NOW, T)
    result = await store.ingest(msg(2, "yes"), NOW, T)
    assert result.version == 2
    assert [m.text for m in await store.pending_messages(CID, 0, 2)] == ["yes", "yes"]


async def test_message_ids_are_scoped_to_platform_and_workspace(store: SqlStore) -> None:
    other = ConversationKey("test", "w2", "c1")
    await store.ingest(msg(1), NOW, T)
    assert (await store.ingest(msg(1, key=other), NOW, T)).status == "accepted"


async def test_timer_waits_for_quiet_but_never_past_the_deadline(store: SqlStore) -> None:
    assert (await store.ingest(msg(1), NOW, T)).due_at == NOW + 2
    assert (await store.ingest(msg(2), NOW + 1.5, T)).due_at == NOW + 3.5
    assert (await store.ingest(msg(3), NOW + 9.0, T)).due_at == NOW + 10  # capped
    state = await store.conversation_state(CID)
    assert state is not None and state.timer is not None
    assert (state.timer.deadline_at, state.timer.armed_version) == (NOW + 10, 3)
    assert await store.next_due_at(NOW) == NOW + 10
    assert await store.due_timers(NOW + 9.9, 10) == []
    assert [t.conversation_id for t in await store.due_timers(NOW + 10, 10)] == [CID]


async def test_due_timers_come_earliest_first(store: SqlStore) -> None:
    keys = [ConversationKey("test", "w", f"c{i}") for i in range(3)]
    for i, key in enumerate(reversed(keys)):
        await store.ingest(msg(i, key=key), NOW + i, T)
    due = await store.due_timers(NOW + 100, 2)
    assert [t.conversation_id for t in due] == [keys[2].id, keys[1].id]


async def test_edit_of_pending_message_bumps_and_rearms(store: SqlStore) -> None:
    await store.ingest(msg(1, "helo"), NOW, T)
    result = await store.edit(MessageEdited(KEY, "m1", "hello"), NOW + 1, T)
    assert (result.status, result.version, result.due_at) == ("accepted", 2, NOW + 3)
    [m] = await store.pending_messages(CID, 0, 2)
    assert (m.text, m.edited_at) == ("hello", NOW + 1)


async def test_edit_of_answered_message_only_updates_history(store: SqlStore) -> None:
    await store.ingest(msg(1, "helo"), NOW, T)
    await answer(store)
    result = await store.edit(MessageEdited(KEY, "m1", "hello"), NOW + 1, T)
    assert (result.status, result.version) == ("history", 1)
    state = await store.conversation_state(CID)
    assert state is not None and state.timer is None
    assert [h.text for h in await store.history(CID, 1, 10)] == ["hello", "ok"]


async def test_delete_of_pending_message_drops_it_from_the_burst(store: SqlStore) -> None:
    await store.ingest(msg(1, "a"), NOW, T)
    await store.ingest(msg(2, "b"), NOW, T)
    result = await store.delete(MessageDeleted(KEY, "m1"), NOW + 1, T)
    assert (result.status, result.version) == ("accepted", 3)
    assert [m.text for m in await store.pending_messages(CID, 0, 3)] == ["b"]
    again = await store.delete(MessageDeleted(KEY, "m1"), NOW + 2, T)
    assert again.status == "duplicate" and again.version == 3


async def test_edit_or_delete_of_unknown_message(store: SqlStore) -> None:
    assert (await store.edit(MessageEdited(KEY, "nope", "x"), NOW, T)).status == "unknown"
    assert (await store.delete(MessageDeleted(KEY, "nope"), NOW, T)).status == "unknown"


async def test_flush_makes_the_timer_due_now(store: SqlStore) -> None:
    await store.ingest(msg(1), NOW, T)
    await store.flush(CID, NOW + 0.1)
    assert [t.due_at for t in await store.due_timers(NOW + 0.1, 5)] == [NOW + 0.1]


# 2. leases -----------------------------------------------------------------------------------
async def test_lease_is_exclusive_until_expiry_and_the_token_only_grows(store: SqlStore) -> None:
    await store.ingest(msg(1), NOW, T)
    first = await store.acquire_lease(CID, "a", NOW, 30.0)
    assert first is not None and (first.version, first.answered_version) == (1, 0)
    assert first.deadline_at == NOW + 10
    assert await store.acquire_lease(CID, "b", NOW + 29, 30.0) is None
    assert await store.lease_expiry(CID, NOW) == NOW + 30
    taken = await store.acquire_lease(CID, "b", NOW + 31, 30.0)
    assert taken is not None and taken.token > first.token and taken.owner == "b"
    assert (first.taken_over, taken.taken_over) == (False, True)
    await store.release_lease(CID, taken.token)
    again = await store.acquire_lease(CID, "c", NOW + 32, 30.0)
    assert again is not None and not again.taken_over  # released, not abandoned


async def test_held_lease_pushes_the_timer_to_its_expiry_until_new_input(store: SqlStore) -> None:
    await store.ingest(msg(1), NOW, T)
    lease = await store.acquire_lease(CID, "a", NOW + 2, 30.0)
    assert lease is not None
    assert await store.due_timers(NOW + 31, 5) == []  # nobody retries while the lease is live
    assert await store.next_due_at(NOW) == NOW + 32
    await store.ingest(msg(2), NOW + 3, T)  # newer input re-arms on the natural schedule
    assert await store.next_due_at(NOW) == NOW + 5


async def test_renew_extends_and_fails_for_a_stale_token(store: SqlStore) -> None:
    await store.ingest(msg(1), NOW, T)
    old = await store.acquire_lease(CID, "a", NOW, 30.0)
    assert old is not None
    assert await store.renew_lease(CID, old.token, old.version, NOW + 10, 30.0) == NOW + 40
    assert await store.lease_expiry(CID, NOW) == NOW + 40
    new = await store.acquire_lease(CID, "b", NOW + 41, 30.0)
    assert new is not None
    assert await store.renew_lease(CID, old.token, old.version, NOW + 42, 30.0) is None


async def test_release_frees_the_lease_and_restores_the_timer(store: SqlStore) -> None:
    await store.ingest(msg(1), NOW, T)
    lease = await store.acquire_lease(CID, "a", NOW + 2, 30.0)
    assert lease is not None
    await store.release_lease(CID, lease.token + 5)  # a stale or wrong token changes nothing
    assert await store.lease_expiry(CID, NOW) == NOW + 32
    await store.release_lease(CID, lease.token)
    assert await store.lease_expiry(CID, NOW) is None
    assert await store.next_due_at(NOW) == NOW + 2
    assert await store.acquire_lease(CID, "b", NOW + 3, 30.0) is not None


async def test_postpone_only_moves_a_timer_that_is_due(store: SqlStore) -> None:
    await store.ingest(msg(1), NOW, T)
    await store.postpone_timer(CID, NOW + 50, NOW + 1)  # not due yet: unchanged
    assert await store.next_due_at(NOW) == NOW + 2
    await store.postpone_timer(CID, NOW + 50, NOW + 2)
    assert await store.next_due_at(NOW) == NOW + 50


async def test_release_owner_frees_its_leases_and_claims(store: SqlStore) -> None:
    await store.ingest(msg(1), NOW, T)
    row = await answer(store, owner="a")
    await store.ingest(msg(2), NOW + 1, T)
    assert await store.acquire_lease(CID, "a", NOW + 4, 30.0) is not None
    [claimed] = await store.claim_replies("a", NOW + 4, 30.0, ["test"], 10)
    assert claimed.id == row.id
    assert await store.release_owner("a") == 1
    assert await store.acquire_lease(CID, "b", NOW + 5, 30.0) is not None
    assert [r.id for r in await store.claim_replies("b", NOW + 5, 30.0, ["test"], 10)] == [row.id]


async def test_lease_race_between_connections_has_one_winner(backend: Backend) -> None:
    stores = [await backend.new_store() for _ in range(4)]
    await stores[0].ingest(msg(1), NOW, T)
    for round_ in range(10):
        now = NOW + round_ * 100
        won = await asyncio.gather(
            *(s.acquire_lease(CID, f"o{i}", now, 30.0) for i, s in enumerate(stores))
        )
        winners = [lease for lease in won if lease is not None]
        assert len(winners) == 1, f"round {round_}: {winners}"


async def test_concurrent_duplicate_ingest_stores_once(backend: Backend) -> None:
    stores = [await backend.new_store() for _ in range(3)]
    results = await asyncio.gather(*(s.ingest(msg(7), NOW, T) for s in stores for _ in range(3)))
    assert sorted(r.status for r in results).count("accepted") == 1
    assert await stores[0].current_version(CID) == 1


# 5. commit -----------------------------------------------------------------------------------
async def test_commit_answers_the_burst_and_drops_the_covered_timer(store: SqlStore) -> None:
    await store.ingest(msg(1), NOW, T)
    await store.ingest(msg(2), NOW, T)
    row = await answer(store, text="both")
    assert (row.covers_from_version, row.covers_to_version, row.state) == (0, 2, "pending")
    state = await store.conversation_state(CID)
    assert state is not None
    assert (state.answered_version, state.lease_owner, state.timer) == (2, None, None)


async def test_commit_is_refused_when_newer_input_arrived_unless_deadline_passed(
    store: SqlStore,
) -> None:
    await store.ingest(msg(1), NOW, T)
    lease = await store.acquire_lease(CID, "a", NOW + 2, 30.0)
    assert lease is not None
    await store.ingest(msg(2), NOW + 3, T)
    reply = NewReply("stale")
    assert (
        await store.commit(CID, FinalCheck(lease.token, 1, False), NOW + 4, T, reply) == Discarded()
    )
    outcome = await store.commit(CID, FinalCheck(lease.token, 1, True), NOW + 4, T, reply)
    assert isinstance(outcome, Committed)
    row = outcome.reply
    assert isinstance(row, OutboxRow) and row.covers_to_version == 1
    assert row.seen_version == 2


async def test_a_reply_for_an_older_version_keeps_the_newer_timer(store: SqlStore) -> None:
    """The seed's second bug: writing the reply erased the countdown of the next burst."""
    await store.ingest(msg(1), NOW, T)
    lease = await store.acquire_lease(CID, "a", NOW + 10, 30.0)
    assert lease is not None
    await store.ingest(msg(2), NOW + 11, T)  # past the deadline: the old reply still posts
    outcome = await store.commit(
        CID, FinalCheck(lease.token, 1, True), NOW + 12, T, NewReply("first")
    )
    assert isinstance(outcome, Committed)
    row = outcome.reply
    assert isinstance(row, OutboxRow)
    state = await store.conversation_state(CID)
    assert state is not None and state.timer is not None
    assert state.timer.armed_version == 2
    assert state.timer.deadline_at == NOW + 22  # the cap restarts for the next burst
    assert state.timer.due_at == NOW + 13  # quiet after msg 2, not earlier
    assert (state.answered_version, state.version) == (1, 2)


async def test_a_stale_token_cannot_commit(store: SqlStore) -> None:
    await store.ingest(msg(1), NOW, T)
    old = await store.acquire_lease(CID, "a", NOW, 30.0)
    new = await store.acquire_lease(CID, "b", NOW + 31, 30.0)
    assert old is not None and new is not None
    assert (
        await store.commit(CID, FinalCheck(old.token, 1, True), NOW + 32, T, NewReply("old"))
        == Discarded()
    )
    assert isinstance(
        await store.commit(CID, FinalCheck(new.token, 1, False), NOW + 32, T, NewReply("new")),
        Committed,
    )
    assert [r.text for r in await store.replies(CID)] == ["new"]


async def test_one_version_is_answered_once(store: SqlStore) -> None:
    await store.ingest(msg(1), NOW, T)
    lease = await store.acquire_lease(CID, "a", NOW, 30.0)
    assert lease is not None
    assert isinstance(
        await store.commit(CID, FinalCheck(lease.token, 1, False), NOW, T, NewReply("1")), Committed
    )
    assert (
        await store.commit(CID, FinalCheck(lease.token, 1, True), NOW, T, NewReply("2"))
        == Discarded()
    )
    assert len(await store.replies(CID)) == 1


async def test_commit_without_reply_marks_answered(store: SqlStore) -> None:
    await store.ingest(msg(1), NOW, T)
    await store.delete(MessageDeleted(KEY, "m1"), NOW, T)
    lease = await store.acquire_lease(CID, "a", NOW + 3, 30.0)
    assert lease is not None
    assert await store.commit(
        CID, FinalCheck(lease.token, 2, False), NOW + 3, T, None
    ) == Committed(None)
    state = await store.conversation_state(CID)
    assert state is not None and state.answered_version == 2 and state.timer is None
    assert await store.replies(CID) == []


async def test_failure_counts_attempts_and_rearms(store: SqlStore) -> None:
    await store.ingest(msg(1), NOW, T)
    lease = await store.acquire_lease(CID, "a", NOW + 2, 30.0)
    assert lease is not None
    assert await store.record_failure(CID, lease.token, NOW + 10, NOW) == 1
    assert await store.record_failure(CID, lease.token, NOW + 10, NOW) is None  # already released
    assert await store.next_due_at(NOW) == NOW + 10
    again = await store.acquire_lease(CID, "a", NOW + 10, 30.0)
    assert again is not None and again.failed_attempts >= 1
    await store.commit(CID, FinalCheck(again.token, 1, False), NOW + 11, T, NewReply("x"))
    state = await store.conversation_state(CID)
    assert state is not None and state.failed_attempts == 0


async def test_history_interleaves_messages_and_replies(store: SqlStore) -> None:
    await store.ingest(msg(1, "q1"), NOW, T)
    await answer(store, text="a1")
    await store.ingest(msg(2, "q2"), NOW + 1, T)
    await store.ingest(msg(3, "q3"), NOW + 1, T)
    await answer(store, now=NOW + 5, text="a2")
    history = await store.history(CID, 3, 10)
    assert [(h.role, h.text) for h in history] == [
        ("user", "q1"), ("assistant", "a1"), ("user", "q2"), ("user", "q3"), ("assistant", "a2"),
    ]  # fmt: skip
    assert [h.text for h in await store.history(CID, 3, 2)] == ["q3", "a2"]
    assert [h.text for h in await store.history(CID, 1, 10)] == ["q1", "a1"]


async def test_generation_records_are_kept(store: SqlStore) -> None:
    from bot.core.store import GenerationRecord

    record = GenerationRecord(CID, 1, 0, 3, NOW, NOW + 2, "superseded", TokenUsage(10, 7, 0, 0))
    await store.record_generation(record)
    priced = replace(record, usage=TokenUsage(1, 2, 3, 4), model="claude-haiku-4-5", user_id="U7")
    await store.record_generation(priced)
    assert await store.generations(CID) == [record, priced]


async def test_the_commit_writes_the_generation_record_only_when_it_commits(
    store: SqlStore,
) -> None:
    from bot.core.store import GenerationRecord

    await store.ingest(msg(1), NOW, T)
    lease = await store.acquire_lease(CID, "a", NOW, 30.0)
    assert lease is not None
    posted = GenerationRecord(
        CID, lease.token, 0, 1, NOW, NOW + 2, "posted", TokenUsage(5, 6, 0, 0)
    )
    stale = FinalCheck(lease.token + 1, lease.version, False)
    assert isinstance(await store.commit(CID, stale, NOW + 2, T, NewReply("x"), posted), Discarded)
    assert await store.generations(CID) == []
    check = FinalCheck(lease.token, lease.version, False)
    assert isinstance(await store.commit(CID, check, NOW + 2, T, NewReply("x"), posted), Committed)
    assert await store.generations(CID) == [posted]


# 6. outbox -----------------------------------------------------------------------------------
async def test_claims_are_exclusive_until_they_expire(store: SqlStore) -> None:
    await store.ingest(msg(1), NOW, T)
    row = await answer(store)
    [mine] = await store.claim_replies("a", NOW, 30.0, ["test"], 10)
    assert mine.id == row.id and mine.claim_token == 1
    assert await store.claim_replies("b", NOW + 10, 30.0, ["test"], 10) == []
    assert await store.claim_replies("b", NOW + 31, 30.0, ["other"], 10) == []
    [theirs] = await store.claim_replies("b", NOW + 31, 30.0, ["test"], 10)
    assert theirs.claim_token == 2
    assert theirs.attempts == 0  # a claim taken over (a restart, a stall) is not a failed attempt


async def test_a_commit_can_claim_its_reply_for_delivery(store: SqlStore) -> None:
    from bot.core.store import ClaimRequest

    await store.ingest(msg(1), NOW, T)
    lease = await store.acquire_lease(CID, "a", NOW, 30.0)
    assert lease is not None
    check = FinalCheck(lease.token, lease.version, False)
    claim = ClaimRequest("a", 30.0, ("test",))
    done = await store.commit(CID, check, NOW, T, NewReply("first"), None, claim)
    assert isinstance(done, Committed) and done.claimed and done.reply is not None
    assert (done.reply.attempts, done.reply.claim_token) == (0, 1)
    assert done.reply.claim_expires_at == NOW + 30
    assert await store.claim_replies("b", NOW + 10, 30.0, ["test"], 10) == []  # claimed by "a"
    # the next reply waits behind the first (G9): committed, not claimed
    await store.ingest(msg(2), NOW + 1, T)
    lease = await store.acquire_lease(CID, "a", NOW + 1, 30.0)
    assert lease is not None
    check = FinalCheck(lease.token, lease.version, False)
    later = await store.commit(CID, check, NOW + 1, T, NewReply("second"), None, claim)
    assert isinstance(later, Committed) and not later.claimed and later.reply is not None
    assert later.reply.attempts == 0
    # a platform the claimer does not serve is never claimed
    assert await store.mark_sent(done.reply.id, 1, ["p1"], NOW + 2)
    elsewhere = ClaimRequest("a", 30.0, ("other",))
    await store.ingest(msg(3), NOW + 3, T)
    lease = await store.acquire_lease(CID, "a", NOW + 3, 30.0)
    assert lease is not None
    check = FinalCheck(lease.token, lease.version, False)
    third = await store.commit(CID, check, NOW + 3, T, NewReply("third"), None, elsewhere)
    assert isinstance(third, Committed) and not third.claimed


async def test_sent_rows_are_never_claimed_again(store: SqlStore) -> None:
    await store.ingest(msg(1), NOW, T)
    row = await answer(store)
    [claimed] = await store.claim_replies("a", NOW, 30.0, ["test"], 10)
    assert await store.mark_sent(row.id, claimed.claim_token, ["p1", "p2"], NOW + 1)
    assert await store.claim_replies("b", NOW + 100, 30.0, ["test"], 10) == []
    [sent] = await store.replies(CID)
    assert (sent.state, sent.platform_message_ids, sent.sent_at) == ("sent", ("p1", "p2"), NOW + 1)
    assert await store.next_outbox_at(["test"], NOW) is None


async def test_retry_waits_and_failed_is_final(store: SqlStore) -> None:
    await store.ingest(msg(1), NOW, T)
    row = await answer(store)
    [claimed] = await store.claim_replies("a", NOW, 30.0, ["test"], 10)
    assert not await store.mark_retry(row.id, claimed.claim_token - 1, NOW + 5, "x", NOW)
    assert await store.mark_retry(row.id, claimed.claim_token, NOW + 5, "timeout", NOW)
    assert await store.next_outbox_at(["test"], NOW) == NOW + 5
    assert await store.claim_replies("a", NOW + 4, 30.0, ["test"], 10) == []
    [again] = await store.claim_replies("a", NOW + 5, 30.0, ["test"], 10)
    assert (again.last_error, again.attempts, again.failing_since) == ("timeout", 1, NOW)
    assert not await store.mark_failed(row.id, claimed.claim_token, "stale")  # claimed again
    assert await store.mark_failed(row.id, again.claim_token, "channel gone")
    [failed] = await store.replies(CID)
    assert (failed.state, failed.attempts) == ("failed", 2)
    assert await store.claim_replies("a", NOW + 100, 30.0, ["test"], 10) == []


async def test_a_rate_limit_is_no_attempt_but_starts_the_horizon(store: SqlStore) -> None:
    await store.ingest(msg(1), NOW, T)
    row = await answer(store)
    [claimed] = await store.claim_replies("a", NOW + 1, 30.0, ["test"], 10)
    assert await store.mark_retry(row.id, claimed.claim_token, NOW + 9, "429", NOW + 1, False)
    [again] = await store.claim_replies("a", NOW + 9, 30.0, ["test"], 10)
    assert (again.attempts, again.failing_since) == (0, NOW + 1)
    assert await store.mark_retry(row.id, again.claim_token, NOW + 12, "503", NOW + 10)
    [third] = await store.claim_replies("a", NOW + 12, 30.0, ["test"], 10)
    assert (third.attempts, third.failing_since) == (1, NOW + 1)  # from the first failure


async def test_a_failed_reply_is_requeued_by_hand(store: SqlStore) -> None:
    from storage.requeue import RequeueSteps

    assert isinstance(store, RequeueSteps)
    await store.ingest(msg(1), NOW, T)
    row = await answer(store)
    assert await store.requeue_failed(row.id, None, NOW) == []  # pending: nothing to re-queue
    [claimed] = await store.claim_replies("a", NOW, 30.0, ["test"], 10)
    assert await store.mark_retry(row.id, claimed.claim_token, NOW + 5, "503", NOW)
    [claimed] = await store.claim_replies("a", NOW + 5, 30.0, ["test"], 10)
    assert await store.mark_failed(row.id, claimed.claim_token, "gave up")
    assert (await store.backlog()).outbox_failed == 1
    assert await store.requeue_failed(None, CID, NOW + 100) == [row.id]
    [requeued] = await store.replies(CID)
    assert (requeued.state, requeued.attempts, requeued.failing_since) == ("pending", 0, None)
    assert (requeued.next_attempt_at, requeued.last_error) == (NOW + 100, "gave up")
    assert (await store.backlog()).outbox_failed == 0
    [claimed] = await store.claim_replies("b", NOW + 100, 30.0, ["test"], 10)
    assert claimed.id == row.id and claimed.attempts == 0
    assert await store.reply_state(row.id) == "pending"
    assert await store.reply_state(row.id + 100) is None


@pytest.mark.parametrize("rows", [3])
async def test_claim_by_id_takes_only_that_row(store: SqlStore, rows: int) -> None:
    made = []
    for i in range(rows):  # one reply in each of three conversations
        key = ConversationKey("test", "w1", f"c{i}")
        await store.ingest(msg(i, key=key), NOW, T)
        lease = await store.acquire_lease(key.id, "o1", NOW + 5, 30.0)
        assert lease is not None
        check = FinalCheck(lease.token, lease.version, deadline_passed=False)
        outcome = await store.commit(key.id, check, NOW + 5, T, NewReply(f"r{i}"))
        assert isinstance(outcome, Committed) and outcome.reply is not None
        made.append(outcome.reply)
    [only] = await store.claim_replies("a", NOW + 100, 30.0, ["test"], 10, reply_id=made[1].id)
    assert only.id == made[1].id
    assert len(await store.claim_replies("b", NOW + 100, 30.0, ["test"], 10)) == 2


async def answer_next(store: SqlStore, n: int, now: float) -> OutboxRow:
    """One more burst of one message in CID, answered at `now`."""
    await store.ingest(msg(n), now, T)
    return await answer(store, now=now + 1, text=f"reply {n}")


async def test_a_conversations_replies_are_claimed_one_at_a_time_in_commit_order(
    store: SqlStore,
) -> None:
    """G9: a later reply waits while an earlier one of its conversation is pending, even when the
    earlier one is held back (Retry-After) or claimed elsewhere; other conversations do not wait."""
    first = await answer_next(store, 1, NOW)
    second = await answer_next(store, 2, NOW + 2)
    other_key = ConversationKey("test", "w1", "elsewhere")
    await store.ingest(msg(9, key=other_key), NOW, T)
    lease = await store.acquire_lease(other_key.id, "o1", NOW + 3, 30.0)
    assert lease is not None
    check = FinalCheck(lease.token, lease.version, deadline_passed=False)
    await store.commit(other_key.id, check, NOW + 3, T, NewReply("other"))
    claimed = await store.claim_replies("a", NOW + 4, 30.0, ["test"], 10)
    assert sorted(r.text for r in claimed) == ["other", "reply 1"]
    assert await store.claim_replies("b", NOW + 4, 30.0, ["test"], 10, reply_id=second.id) == []
    [mine] = [r for r in claimed if r.id == first.id]
    [theirs] = [r for r in claimed if r.id != first.id]
    assert await store.mark_sent(theirs.id, theirs.claim_token, ["o1"], NOW + 4)
    assert await store.mark_retry(first.id, mine.claim_token, NOW + 60, "429 Retry-After: 56", NOW)
    assert await store.claim_replies("b", NOW + 5, 30.0, ["test"], 10) == []
    assert await store.next_outbox_at(["test"], NOW) == NOW + 60  # not the waiting second reply's
    [again] = await store.claim_replies("b", NOW + 60, 30.0, ["test"], 10)
    assert again.id == first.id
    assert await store.mark_sent(first.id, again.claim_token, ["p1"], NOW + 61)
    [then] = await store.claim_replies("b", NOW + 61, 30.0, ["test"], 10)
    assert then.id == second.id


async def test_a_claim_is_fenced_by_its_token_and_renewals_keep_it(store: SqlStore) -> None:
    row = await answer_next(store, 1, NOW - 1)  # committed at NOW
    [first] = await store.claim_replies("a", NOW, 30.0, ["test"], 10)
    assert first.claim_expires_at == NOW + 30
    assert await store.renew_claim(row.id, first.claim_token, NOW + 25, 30.0) == NOW + 55
    assert await store.claim_replies("b", NOW + 31, 30.0, ["test"], 10) == []  # renewed to +55
    [second] = await store.claim_replies("b", NOW + 56, 30.0, ["test"], 10)
    assert second.claim_token > first.claim_token
    assert await store.renew_claim(row.id, first.claim_token, NOW + 57, 30.0) is None
    assert not await store.mark_sent(row.id, first.claim_token, ["stale"], NOW + 57)
    assert not await store.mark_failed(row.id, first.claim_token, "stale")
    assert not await store.mark_retry(row.id, first.claim_token, NOW + 90, "stale", NOW)
    assert await store.mark_sent(row.id, second.claim_token, ["p1"], NOW + 58)
    [sent] = await store.replies(CID)
    assert (sent.state, sent.platform_message_ids) == ("sent", ("p1",))
    assert not await store.renew_claim(row.id, second.claim_token, NOW + 59, 30.0)


async def test_next_due_at_skips_the_conversations_a_process_serves(store: SqlStore) -> None:
    await store.ingest(msg(1), NOW, T)
    other = ConversationKey("test", "w1", "elsewhere")
    await store.ingest(msg(2, key=other), NOW + 5, T)
    assert await store.next_due_at(NOW) == NOW + T.quiet_seconds
    assert await store.next_due_at(NOW, skip=[CID]) == NOW + 5 + T.quiet_seconds
    assert await store.next_due_at(NOW, skip=[CID, other.id]) is None
