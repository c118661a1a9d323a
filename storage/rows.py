"""Rows to records and records to parameters, shared by both dialects (sqlite3.Row and
asyncpg.Record read alike; every statement uses the same parameter names)."""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import asdict, fields
from typing import Any, Protocol, TypeVar

from bot.core import store as contract
from bot.core.events import Attachment, ConversationKey, IncomingMessage, MessageEdited

Params = Mapping[str, Any]
R = TypeVar("R")


class Row(Protocol):
    """A result row by column name or position (sqlite3.Row, asyncpg.Record)."""

    def __getitem__(self, key: str | int, /) -> Any: ...


def message_uid(platform: str, workspace: str, message_id: str) -> str:
    """Platform ids are unique per platform and workspace; the store's dedupe key says so."""
    return f"{platform}/{workspace}/{message_id}"


def from_row(kind: type[R], r: Row, **computed: Any) -> R:
    """A record from the row's columns of the same names (both drivers return the Python types the
    schema declares), with the fields that are not plain columns given by the caller."""
    names = (f.name for f in fields(kind) if f.name not in computed)  # type: ignore[arg-type]
    return kind(**{name: r[name] for name in names}, **computed)


def by_name(record: Any) -> dict[str, Any]:
    """A record's fields by name, as they are: `from_row`'s inverse, without `asdict`'s deep copy
    of nested records (ingest's hot path converts the attachments itself)."""
    return {f.name: getattr(record, f.name) for f in fields(record)}


def attachments_json(attachments: Sequence[Attachment]) -> str:
    return json.dumps([asdict(a) for a in attachments])


def attachments_from_json(text: str) -> tuple[Attachment, ...]:
    """Stored descriptions back as records (keys a later version may add are left out)."""
    names = {f.name for f in fields(Attachment)}
    return tuple(Attachment(**{k: v for k, v in d.items() if k in names}) for d in json.loads(text))


def message_from_row(r: Row) -> contract.StoredMessage:
    attachments = attachments_from_json(r["attachments"])
    return from_row(contract.StoredMessage, r, deleted=bool(r["deleted"]), attachments=attachments)


def history_from_row(r: Row) -> contract.HistoryItem:
    attachments = attachments_from_json(r["attachments"])
    return from_row(contract.HistoryItem, r, version=int(r["version"]), attachments=attachments)


def summary_from_row(r: Row) -> contract.ConversationSummary:
    return from_row(contract.ConversationSummary, r, state=state_from_row(str(r["id"]), r))


def state_from_row(conversation_id: str, r: Row) -> contract.ConversationState:
    timer = None
    if r["due_at"] is not None:
        timer = contract.DueTimer(
            conversation_id, r["due_at"], r["deadline_at"], r["armed_version"]
        )
    return from_row(contract.ConversationState, r, conversation_id=conversation_id, timer=timer)


def outbox_from_row(r: Row, platform_message_ids: tuple[str, ...]) -> contract.OutboxRow:
    """`platform_message_ids` is decoded by the caller (JSON text in SQLite, an array in PG)."""
    return from_row(contract.OutboxRow, r, platform_message_ids=platform_message_ids,
                    feedback=bool(r["feedback"]))  # fmt: skip


def generation_from_row(r: Row) -> contract.GenerationRecord:
    searches = tuple(contract.WebSearch(**s) for s in json.loads(r["searches"] or "[]"))
    usage = from_row(contract.TokenUsage, r)
    return from_row(contract.GenerationRecord, r, usage=usage, searches=searches)


# Records to statement parameters (the same names in every dialect's statements) ----------------
def message_params(message: IncomingMessage, now: float) -> dict[str, Any]:
    """A new message as `insert_message` takes it, less its seq (its fields by name, the
    attachments as JSON)."""
    key = message.key
    uid = message_uid(key.platform, key.workspace, message.message_id)
    params = {**by_name(message), "attachments": attachments_json(message.attachments)}
    return {**params, "cid": key.id, "platform": key.platform, "uid": uid, "now": now}


def edit_params(event: MessageEdited) -> dict[str, Any]:
    """`change_message`: files replaced only when the edit names them (NULL keeps them)."""
    files = None if event.attachments is None else attachments_json(event.attachments)
    return {"text": event.text, "attachments": files, "deleted": False}


DELETED: Params = {"text": None, "attachments": None, "deleted": True}
"""`change_message` for a delete: the text and files stay as they were."""


def held_from_row(r: Row) -> IncomingMessage:
    """A held message comes back as it was held, marked as one that waited for its thread."""
    key = ConversationKey.parse(r["conversation_id"])
    attachments = attachments_from_json(r["attachments"])
    held = {"author_is_bot": False, "is_dm": False, "via": "held"}
    return from_row(IncomingMessage, r, key=key, attachments=attachments, **held)


def reply_params(
    cid: str,
    reply: contract.NewReply,
    answered_version: int,
    version: int,
    seen_version: int,
    now: float,
) -> dict[str, Any]:
    """`insert_reply`: the reply's fields and its usage's by name; it covers from the prompt's
    answered version unless the engine gave another."""
    covers = {"covers_from": answered_version, "version": version, "seen_version": seen_version}
    if reply.covers_from_version is not None:
        covers["covers_from"] = reply.covers_from_version
    params = {**by_name(reply), **by_name(reply.usage), **covers, "cid": cid, "now": now}
    return {**params, "platform": cid.split("/", 1)[0]}


def generation_params(record: contract.GenerationRecord) -> dict[str, Any]:
    """The record's fields by name, its usage's beside them and its searches as JSON."""
    params = asdict(record)  # usage a dict, searches a list of dicts
    usage = params.pop("usage")
    return {**params, **usage, "searches": json.dumps(params["searches"])}
