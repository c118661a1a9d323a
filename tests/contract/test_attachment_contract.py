"""What every store keeps of attachments: their descriptions with the message (ingest, edits,
history, held messages) and each file's one fetch (bytes by hash, or a note). Every backend."""

from __future__ import annotations

import asyncio
import hashlib

from bot.core.events import Attachment, ConversationKey, IncomingMessage, MessageEdited
from bot.core.store import FinalCheck, StoredFile, Timing
from storage.sql_store import SqlStore
from tests.contract.conftest import Backend

T = Timing(quiet_seconds=2.0, max_wait_seconds=10.0)
DM = ConversationKey("slack", "T1", "D1")
NOW = 1_000.0
SHOT = Attachment("F1", "shot.png", "image/png", 2048, "https://files.example/F1", 640, 480)
LOG = Attachment("F2", "app.log", "text/plain", 10, "https://files.example/F2")
BYTES = bytes(range(256)) * 3  # every byte value, NUL included


def msg(n: int, *attachments: Attachment, text: str = "look") -> IncomingMessage:
    return IncomingMessage(DM, f"D1:{n}", "U1", "alice", text, attachments=attachments)


async def test_attachments_are_stored_with_their_message(store: SqlStore) -> None:
    await store.ingest(msg(1, SHOT, LOG), NOW, T)
    await store.ingest(msg(2), NOW, T)
    pending = await store.pending_messages(DM.id, 0, 2)
    assert [m.attachments for m in pending] == [(SHOT, LOG), ()]


async def test_concurrent_arrivals_keep_each_messages_own_files(store: SqlStore) -> None:
    """SQLite applies concurrent ingests as one batch: each message keeps its own files."""
    await asyncio.gather(*(store.ingest(msg(n, SHOT if n % 2 else LOG), NOW, T) for n in range(6)))
    pending = await store.pending_messages(DM.id, 0, 6)
    assert {m.message_id: m.attachments for m in pending} == {
        f"D1:{n}": (SHOT if n % 2 else LOG,) for n in range(6)
    }


async def test_an_edit_naming_files_replaces_them_and_one_that_does_not_keeps_them(
    store: SqlStore,
) -> None:
    await store.ingest(msg(1, SHOT), NOW, T)
    added = await store.edit(MessageEdited(DM, "D1:1", "look", (SHOT, LOG)), NOW + 1, T)
    assert (added.status, added.version) == ("accepted", 2)
    [message] = await store.pending_messages(DM.id, 0, 2)
    assert message.attachments == (SHOT, LOG)
    await store.edit(MessageEdited(DM, "D1:1", "look again"), NOW + 2, T)
    [message] = await store.pending_messages(DM.id, 0, 3)
    assert (message.text, message.attachments) == ("look again", (SHOT, LOG))
    await store.edit(MessageEdited(DM, "D1:1", "look again", ()), NOW + 3, T)
    [message] = await store.pending_messages(DM.id, 0, 4)
    assert message.attachments == ()


async def test_history_carries_each_turns_files(store: SqlStore) -> None:
    await store.ingest(msg(1, SHOT), NOW, T)
    lease = await store.acquire_lease(DM.id, "w1", NOW + 3, 30.0)
    assert lease is not None
    await store.commit(DM.id, FinalCheck(lease.token, 1, False), NOW + 4, T, None)
    await store.ingest(msg(2, text="and?"), NOW + 5, T)
    history = await store.history(DM.id, 2, 10)
    assert [(h.role, h.text, h.attachments) for h in history] == [
        ("user", "look", (SHOT,)),
        ("user", "and?", ()),
    ]


async def test_a_held_message_keeps_its_files(store: SqlStore) -> None:
    await store.hold(msg(1, SHOT, LOG), NOW)
    [held] = await store.held("slack", 10)
    assert held.attachments == (SHOT, LOG)


async def test_a_fetch_is_remembered_with_its_exact_bytes(store: SqlStore) -> None:
    kept = store
    assert await kept.attachment_file("slack/T1/F1") is None
    digest = hashlib.sha256(BYTES).hexdigest()
    await kept.keep_attachment_file("slack/T1/F1", StoredFile(digest, None, BYTES), NOW)
    assert await kept.attachment_file("slack/T1/F1") == StoredFile(digest, None, BYTES)


async def test_the_first_outcome_wins_and_equal_bytes_are_shared(store: SqlStore) -> None:
    kept = store
    digest = hashlib.sha256(BYTES).hexdigest()
    await kept.keep_attachment_file("slack/T1/F1", StoredFile(None, "HTTP 404"), NOW)
    await kept.keep_attachment_file("slack/T1/F1", StoredFile(digest, None, BYTES), NOW + 1)
    assert await kept.attachment_file("slack/T1/F1") == StoredFile(None, "HTTP 404", None)
    for uid in ("discord/g/7", "discord/g/8"):  # the same bytes under two files: stored once
        await kept.keep_attachment_file(uid, StoredFile(digest, None, BYTES), NOW)
    assert await kept.attachment_file("discord/g/7") == await kept.attachment_file("discord/g/8")


async def test_another_process_sees_what_was_fetched(backend: Backend) -> None:
    one, two = await backend.new_store(), await backend.new_store()
    digest = hashlib.sha256(BYTES).hexdigest()
    await one.keep_attachment_file("slack/T1/F1", StoredFile(digest, None, BYTES), NOW)
    assert await two.attachment_file("slack/T1/F1") == StoredFile(digest, None, BYTES)
