"""Rows to records and records to parameters, shared by both dialects (sqlite3.Row and
asyncpg.Record read alike; every statement uses the same parameter names)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import asdict
from typing import Any, Protocol

from bot.core.events import IncomingMessage
from bot.core.store import (
    ConversationState,
    DueTimer,
    GenerationRecord,
    NewReply,
    OutboxRow,
    StoredMessage,
    TokenUsage,
)
from bot.ops.inspection import ConversationSummary

Params = Mapping[str, Any]
_USAGE = ("input_tokens", "output_tokens", "cache_read_tokens", "cache_write_tokens")


class Row(Protocol):
    """A result row by column name or position (sqlite3.Row, asyncpg.Record)."""

    def __getitem__(self, key: str | int, /) -> Any: ...


def message_uid(platform: str, workspace: str, message_id: str) -> str:
    """Platform ids are unique per platform and workspace; the store's dedupe key says so."""
    return f"{platform}/{workspace}/{message_id}"


def message_from_row(r: Row) -> StoredMessage:
    return StoredMessage(
        seq=int(r["seq"]), message_id=str(r["message_id"]), author_id=str(r["author_id"]),
        author_name=str(r["author_name"]), text=str(r["text"]),
        created_at=float(r["created_at"]), edited_at=_time(r["edited_at"]),
        deleted=bool(r["deleted"]),
    )  # fmt: skip


def summary_from_row(r: Row) -> ConversationSummary:
    return ConversationSummary(
        state=state_from_row(str(r["id"]), r), history_floor=int(r["history_floor"]),
        pending_messages=int(r["pending_messages"]), outbox_pending=int(r["outbox_pending"]),
        outbox_failed=int(r["outbox_failed"]), last_activity_at=float(r["last_activity_at"]),
    )  # fmt: skip


def state_from_row(conversation_id: str, r: Row) -> ConversationState:
    timer = None
    if r["due_at"] is not None:
        timer = DueTimer(
            conversation_id, float(r["due_at"]), float(r["deadline_at"]), int(r["armed_version"])
        )
    return ConversationState(
        conversation_id=conversation_id, version=int(r["version"]),
        answered_version=int(r["answered_version"]), lease_owner=r["lease_owner"],
        lease_token=int(r["lease_token"]), lease_expires_at=_time(r["lease_expires_at"]),
        failed_attempts=int(r["failed_attempts"]), timer=timer,
    )  # fmt: skip


def outbox_from_row(r: Row, platform_message_ids: tuple[str, ...]) -> OutboxRow:
    """`platform_message_ids` is decoded by the caller (JSON text in SQLite, an array in PG)."""
    return OutboxRow(
        id=int(r["id"]), conversation_id=str(r["conversation_id"]), platform=str(r["platform"]),
        covers_from_version=int(r["covers_from_version"]),
        covers_to_version=int(r["covers_to_version"]), seen_version=int(r["seen_version"]),
        text=str(r["text"]), kind=str(r["kind"]), state=r["state"], attempts=int(r["attempts"]),
        next_attempt_at=float(r["next_attempt_at"]),
        reply_to_message_id=r["reply_to_message_id"], platform_message_ids=platform_message_ids,
        created_at=float(r["created_at"]), sent_at=_time(r["sent_at"]),
        last_error=r["last_error"], claim_token=int(r["claim_token"]),
    )  # fmt: skip


def generation_from_row(r: Row) -> GenerationRecord:
    usage = TokenUsage(*(int(r[name]) for name in _USAGE))
    return GenerationRecord(
        conversation_id=str(r["conversation_id"]), lease_token=int(r["lease_token"]),
        from_version=int(r["from_version"]), to_version=int(r["to_version"]),
        started_at=float(r["started_at"]), ended_at=float(r["ended_at"]),
        outcome=r["outcome"], usage=usage, error=r["error"],
    )  # fmt: skip


def _time(value: Any) -> float | None:
    return None if value is None else float(value)


# Records to statement parameters (the same names in every dialect's statements) ----------------
def message_params(message: IncomingMessage, now: float) -> dict[str, Any]:
    """A new message as `insert_message` (and the SQLite group commit) take it, less its seq."""
    key = message.key
    return {"cid": key.id, "platform": key.platform, "now": now,
            "uid": message_uid(key.platform, key.workspace, message.message_id),
            "message_id": message.message_id, "author_id": message.author_id,
            "author_name": message.author_name, "text": message.text}  # fmt: skip


def reply_params(
    cid: str, reply: NewReply, answered_version: int, version: int, seen_version: int, now: float
) -> dict[str, Any]:
    """`insert_reply`: covers from the prompt's answered version when the engine gave it."""
    covers_from = (
        answered_version if reply.covers_from_version is None else reply.covers_from_version
    )
    return {"cid": cid, "platform": cid.split("/", 1)[0], "covers_from": covers_from,
            "version": version, "seen_version": seen_version, "now": now,
            "reply_to": reply.reply_to_message_id, "text": reply.text, "kind": reply.kind,
            **asdict(reply.usage)}  # fmt: skip


def generation_params(record: GenerationRecord) -> dict[str, Any]:
    return {"cid": record.conversation_id, "token": record.lease_token,
            "from_version": record.from_version, "to_version": record.to_version,
            "started_at": record.started_at, "ended_at": record.ended_at,
            "outcome": record.outcome, "error": record.error, **asdict(record.usage)}  # fmt: skip
