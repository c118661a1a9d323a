"""A refusal's notice is an outbox row (`SqlStore.queue_notice`) on every store: claimed and marked
like any reply, in order behind the conversation's earlier replies, covering no message, never in
history, never taking the pending burst's draft. Run against every backend (see conftest)."""

from __future__ import annotations

from bot.core.events import ConversationKey, Draft, IncomingMessage
from bot.core.store import Committed, FinalCheck, NewReply, Timing, notice_slot
from storage.sql_store import SqlStore

T = Timing(quiet_seconds=2.0, max_wait_seconds=10.0)
KEY = ConversationKey("test", "w", "c1")
NOW = 1_000.0


def msg(n: int) -> IncomingMessage:
    return IncomingMessage(KEY, f"m{n}", "u1", "alice", f"text {n}")


async def test_a_notice_is_delivered_like_a_reply_and_covers_nothing(store: SqlStore) -> None:
    notice = await store.queue_notice(KEY.id, "too long", "m0", NOW)  # a new conversation
    assert (notice.kind, notice.state, notice.platform, notice.reply_to_message_id) == (
        "notice", "pending", "test", "m0"
    )  # fmt: skip
    assert notice.covers_from_version == notice.covers_to_version == notice_slot("m0") < 0
    [claimed] = await store.claim_replies("o1", NOW, 30.0, ["test"], 10)
    assert claimed.id == notice.id
    assert await store.mark_sent(claimed.id, claimed.claim_token, ["p1"], NOW) is not None
    state = await store.conversation_state(KEY.id)
    assert state is not None and (state.version, state.answered_version) == (0, 0)
    assert await store.claim_replies("o1", NOW + 1, 30.0, ["test"], 10) == []  # posted once


async def test_a_notice_waits_behind_earlier_replies_and_leaves_the_draft_alone(
    store: SqlStore,
) -> None:
    await store.ingest(msg(1), NOW, T)
    lease = await store.acquire_lease(KEY.id, "o1", NOW, 30.0)
    assert lease is not None
    done = await store.commit(KEY.id, FinalCheck(lease.token, 1, False), NOW, T, NewReply("ok"))
    assert isinstance(done, Committed) and done.reply is not None
    await store.ingest(msg(2), NOW + 1, T)
    lease = await store.acquire_lease(KEY.id, "o1", NOW + 1, 30.0)
    assert lease is not None
    draft = Draft("d1", None, NOW + 1, "m2")
    assert await store.record_draft(KEY.id, lease.token, draft)
    notice = await store.queue_notice(KEY.id, "slow down", "m3", NOW + 1)
    [first] = await store.claim_replies("o1", NOW + 1, 30.0, ["test"], 10)
    assert first.id == done.reply.id  # G9: the earlier reply first
    assert await store.mark_sent(first.id, first.claim_token, ["p1"], NOW + 1) is not None
    [then] = await store.claim_replies("o1", NOW + 2, 30.0, ["test"], 10)
    assert then.id == notice.id and then.draft is None
    assert await store.draft(KEY.id) == draft  # still the pending burst's
    assert [h.text for h in await store.history(KEY.id, 2, 10)] == ["text 1", "ok", "text 2"]


async def test_a_notice_sent_leaves_the_pending_bursts_indicator_up(store: SqlStore) -> None:
    await store.ingest(msg(1), NOW, T)
    assert await store.record_indicator(KEY.id, "m1", 1)
    await store.queue_notice(KEY.id, "slow down", "m2", NOW)
    [notice] = await store.claim_replies("o1", NOW, 30.0, ["test"], 10)
    sent = await store.mark_sent(notice.id, notice.claim_token, ["p1"], NOW)
    assert sent is not None and sent.indicator_at is None
    assert await store.take_indicator(KEY.id) == "m1"  # still recorded: the reply takes it down
