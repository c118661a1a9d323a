"""Retention and erasure on every backend: old answered text goes, pending work
(unanswered messages, replies in the outbox, armed timers) stays; `forget` erases in place."""

from __future__ import annotations

import hashlib

from bot.core.attachments import attachment_uid
from bot.core.events import Attachment, ConversationKey, IncomingMessage
from bot.core.store import (
    Committed,
    Discarded,
    FinalCheck,
    GenerationRecord,
    NewReply,
    StoredFile,
    Timing,
    TokenUsage,
    WebSearch,
)
from storage.sql_store import SqlStore

T = Timing(quiet_seconds=1.0, max_wait_seconds=8.0)
KEY = ConversationKey("test", "w", "c1")
OTHER = ConversationKey("other", "w", "c2")
DAY = 86_400.0
OLD, NOW = 1_000.0, 1_000.0 + 40 * DAY


def said(n: int, author: str = "u1", key: ConversationKey = KEY) -> IncomingMessage:
    return IncomingMessage(key, f"{key.channel}-m{n}", author, f"name-{author}", f"text {n}")


async def answer(store: SqlStore, now: float, text: str, key: ConversationKey = KEY) -> None:
    lease = await store.acquire_lease(key.id, "o1", now, 30.0)
    assert lease is not None
    check = FinalCheck(lease.token, lease.version, False)
    assert isinstance(await store.commit(key.id, check, now, T, NewReply(text)), Committed)
    record = GenerationRecord(key.id, lease.token, lease.answered_version, lease.version, now - 1,
                              now, "posted", TokenUsage(5, 5, web_searches=1), model="m",
                              user_id="u1", searches=(WebSearch("what u1 asked", 3),))  # fmt: skip
    await store.record_generation(record)


async def mark_sent(store: SqlStore, now: float) -> None:
    for row in await store.claim_replies("o1", now, 30.0, [KEY.platform], 10):
        assert await store.mark_sent(row.id, row.claim_token, ["p1"], now)


async def test_retention_deletes_old_answered_text_and_keeps_pending_work(store: SqlStore) -> None:
    await store.ingest(said(1), OLD, T)
    await answer(store, OLD + 2, "old answer, posted")
    await mark_sent(store, OLD + 3)
    await store.ingest(said(2), OLD + 10, T)
    await answer(store, OLD + 12, "old answer, never posted")  # still in the outbox
    await store.ingest(said(3), OLD + 20, T)  # old, but never answered: pending input
    counts = await store.prune(NOW - 30 * DAY)
    assert counts == {"messages": 2, "replies": 1, "generations": 2, "votes": 0, "clicks": 0,
                      "files": 0, "blobs": 0}  # fmt: skip
    assert [m.text for m in await store.messages(KEY.id)] == ["text 3"]
    assert [r.text for r in await store.replies(KEY.id)] == ["old answer, never posted"]
    state = await store.conversation_state(KEY.id)
    assert state is not None and state.timer is not None and state.version == 3  # armed
    assert await store.prune(NOW - 30 * DAY) == {
        "messages": 0, "replies": 0, "generations": 0, "votes": 0, "clicks": 0, "files": 0,
        "blobs": 0,
    }  # fmt: skip
    # the pending message is answered as usual afterwards
    lease = await store.acquire_lease(KEY.id, "o2", NOW, 30.0)
    assert lease is not None
    assert [m.text for m in await store.pending_messages(KEY.id, lease.answered_version, 3)] == [
        "text 3"
    ]


async def test_forget_user_erases_their_text_everywhere_and_only_theirs(store: SqlStore) -> None:
    await store.ingest(said(1, "u1"), OLD, T)
    await store.ingest(said(2, "u2"), OLD + 0.5, T)
    await answer(store, OLD + 2, "answer")
    await store.ingest(said(3, "u1", OTHER), OLD + 3, T)
    counts = await store.forget_user("u1", None, OLD + 4)
    assert counts == {"messages": 2, "held": 0, "generations": 1, "actions": 0, "cards": 0,
                      "votes": 0, "clicks": 0, "files": 0}  # fmt: skip
    messages = await store.messages(KEY.id)
    assert [(m.author_id, m.author_name, m.text, m.deleted) for m in messages] == [
        ("", "", "", True), ("u2", "name-u2", "text 2", False),
    ]  # fmt: skip
    [other] = await store.messages(OTHER.id)
    assert (other.text, other.deleted) == ("", True)  # pending: its burst has nothing left
    assert [(g.user_id, g.searches) for g in await store.generations()] == [("", ())]
    # the erased message keeps its id: a redelivery is a duplicate, not new text
    assert (await store.ingest(said(1, "u1"), NOW, T)).status == "duplicate"


async def test_forget_user_on_one_platform_leaves_the_others(store: SqlStore) -> None:
    await store.ingest(said(1, "u1"), OLD, T)
    await store.ingest(said(2, "u1", OTHER), OLD, T)
    assert (await store.forget_user("u1", "other", OLD + 1))["messages"] == 1
    [kept] = await store.messages(KEY.id)
    assert kept.text == "text 1"


async def test_forget_conversation_erases_messages_and_posted_replies(store: SqlStore) -> None:
    await store.ingest(said(1), OLD, T)
    await answer(store, OLD + 2, "posted answer")
    await mark_sent(store, OLD + 3)
    await store.ingest(said(2), OLD + 4, T)
    await answer(store, OLD + 5, "waiting in the outbox")
    await store.ingest(said(3, "u9", OTHER), OLD, T)
    counts = await store.forget_conversation(KEY.id)
    assert counts == {"messages": 2, "replies": 1, "held": 0, "generations": 2, "actions": 0,
                      "votes": 0, "clicks": 0, "files": 0, "unsent_replies_kept": 1}  # fmt: skip
    searches = [(g.searches, g.usage.web_searches) for g in await store.generations(KEY.id)]
    assert searches == [((), 1), ((), 1)]  # the queries go, the count stays (it was billed)
    assert {m.text for m in await store.messages(KEY.id)} == {""}
    assert [r.text for r in await store.replies(KEY.id)] == ["", "waiting in the outbox"]
    assert [h.text for h in await store.history(KEY.id, 5, 10)] == []
    [untouched] = await store.messages(OTHER.id)
    assert untouched.text == "text 3"


async def test_forget_fences_out_an_answer_still_being_generated(store: SqlStore) -> None:
    """An answer generated while its conversation is erased (an uninstall, `burstbot forget`) is
    not stored afterwards: the erase takes the fence from its lease, and what it answered is
    gone, so nothing is generated for it again."""
    await store.ingest(said(1), OLD, T)
    lease = await store.acquire_lease(KEY.id, "o1", OLD + 2, 30.0)
    assert lease is not None
    await store.forget_conversation(KEY.id)
    check = FinalCheck(lease.token, lease.version, False)
    outcome = await store.commit(KEY.id, check, OLD + 3, T, NewReply("quoting text 1"))
    assert isinstance(outcome, Discarded)
    assert await store.replies(KEY.id) == []
    assert await store.renew_lease(KEY.id, lease.token, lease.version, OLD + 3, 30.0) is None
    assert await store.next_due_at(OLD + 100) is None  # no timer left to answer erased input
    assert await store.acquire_lease(KEY.id, "o2", OLD + 100, 30.0) is not None  # free again


async def test_forget_user_fences_out_an_answer_being_generated_where_they_spoke(
    store: SqlStore,
) -> None:
    """An answer generated while one of its authors is erased may quote them: the erase takes the
    fence from its lease, and the others' input is answered again, without the erased text. A
    conversation the person never spoke in keeps its generation."""
    await store.ingest(said(1, "u1"), OLD, T)
    await store.ingest(said(2, "u2"), OLD + 0.5, T)
    await store.ingest(said(3, "u2", OTHER), OLD, T)
    lease = await store.acquire_lease(KEY.id, "o1", OLD + 2, 30.0)
    elsewhere = await store.acquire_lease(OTHER.id, "o1", OLD + 2, 30.0)
    assert lease is not None and elsewhere is not None
    await store.forget_user("u1", None, OLD + 2.5)
    check = FinalCheck(lease.token, lease.version, False)
    quoting = await store.commit(KEY.id, check, OLD + 3, T, NewReply("quoting text 1"))
    assert isinstance(quoting, Discarded)
    assert await store.replies(KEY.id) == []
    due = await store.next_due_at(OLD + 3)
    assert due is not None and due <= OLD + 3  # what u2 said is owed an answer at once
    again = await store.acquire_lease(KEY.id, "o2", OLD + 3, 30.0)
    assert again is not None
    pending = await store.pending_messages(KEY.id, again.answered_version, again.version)
    assert [m.text for m in pending] == ["text 2"]
    untouched = FinalCheck(elsewhere.token, elsewhere.version, False)
    kept = await store.commit(OTHER.id, untouched, OLD + 3, T, NewReply("ok"))
    assert isinstance(kept, Committed)


async def test_forget_user_whose_burst_was_alone_leaves_nothing_to_answer(store: SqlStore) -> None:
    await store.ingest(said(1, "u1"), OLD, T)
    lease = await store.acquire_lease(KEY.id, "o1", OLD + 2, 30.0)
    assert lease is not None
    await store.forget_user("u1", None, OLD + 2.5)
    again = await store.acquire_lease(KEY.id, "o2", OLD + 3, 30.0)
    assert again is not None  # free at once, and its burst has no message left to quote
    assert await store.pending_messages(KEY.id, again.answered_version, again.version) == []


SHOT = Attachment("F1", "shot.png", "image/png", 4, "https://files.example/F1")
PDF = Attachment("F2", "report.pdf", "application/pdf", 4, "https://files.example/F2")


async def keep(store: SqlStore, key: ConversationKey, attachment: Attachment, content: bytes,
               now: float) -> str:  # fmt: skip
    uid = attachment_uid(key, attachment)
    file = StoredFile(hashlib.sha256(content).hexdigest(), None, content)
    await store.keep_attachment_file(uid, file, now)
    return uid


async def test_forget_user_erases_their_files_and_the_bytes_only_they_had(store: SqlStore) -> None:
    await store.ingest(IncomingMessage(KEY, "m1", "u1", "alice", "look", attachments=(SHOT,)),
                       OLD, T)  # fmt: skip
    await store.ingest(IncomingMessage(KEY, "m2", "u2", "bob", "mine", attachments=(PDF,)), OLD, T)
    shot = await keep(store, KEY, SHOT, b"\x89PNG", OLD + 1)
    report = await keep(store, KEY, PDF, b"%PDF", OLD + 1)
    counts = await store.forget_user("u1", None, OLD + 2)
    assert (counts["messages"], counts["files"]) == (1, 1)
    assert await store.attachment_file(shot) is None
    assert await store.attachment_file(report) is not None
    erased, kept = await store.messages(KEY.id)
    assert (erased.attachments, kept.attachments) == ((), (PDF,))


async def test_forget_conversation_erases_its_files(store: SqlStore) -> None:
    await store.ingest(IncomingMessage(KEY, "m1", "u1", "alice", "", attachments=(SHOT,)), OLD, T)
    shot = await keep(store, KEY, SHOT, b"\x89PNG", OLD + 1)
    counts = await store.forget_conversation(KEY.id)
    assert (counts["messages"], counts["files"]) == (1, 1)
    assert await store.attachment_file(shot) is None
    [erased] = await store.messages(KEY.id)
    assert erased.attachments == ()


async def test_retention_deletes_old_files_and_bytes_nothing_refers_to(store: SqlStore) -> None:
    old = await keep(store, KEY, SHOT, b"old bytes", OLD)
    new = await keep(store, KEY, PDF, b"new bytes", NOW)
    counts = await store.prune(NOW - 30 * DAY)
    assert (counts["files"], counts["blobs"]) == (1, 1)
    assert await store.attachment_file(old) is None
    assert await store.attachment_file(new) is not None


async def test_file_retention_deletes_old_files_and_keeps_the_text_that_carried_them(
    store: SqlStore,
) -> None:
    await store.ingest(IncomingMessage(KEY, "m1", "u1", "alice", "look", attachments=(SHOT,)),
                       OLD, T)  # fmt: skip
    await answer(store, OLD + 2, "answered")
    old = await keep(store, KEY, SHOT, b"old bytes", OLD)
    new = await keep(store, KEY, PDF, b"new bytes", NOW)
    counts = await store.prune_files(NOW - 30 * DAY)
    assert counts == {"files": 1, "blobs": 1}
    assert await store.attachment_file(old) is None
    assert await store.attachment_file(new) is not None
    [message] = await store.messages(KEY.id)
    assert (message.text, message.attachments) == ("look", (SHOT,))
    assert len(await store.replies(KEY.id)) == 1
