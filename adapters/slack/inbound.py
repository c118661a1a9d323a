"""Slack event payloads → neutral events: what counts, which conversation, which message id.

All of it is decided from the payload alone (`place`), except whether a thread reply without a
mention is in a thread we are part of (`Placement.needs_thread_check`: the front end decides).
Bot messages never count. A DM's or a listened channel's conversation is the DM or channel, or
the thread of a thread reply; elsewhere a mention's is its thread (its own `ts` when it starts
one). Edits and deletes become `MessageEdited` / `MessageDeleted` (adding or removing a file is
an edit); other subtypes (joins, topic changes, an assistant thread's root, ...) are ignored.

`app_mention` and `message` twins compute the same key and the same id (`"{channel}:{ts}"`), so
the store keeps one of them. Slack `ts` values are unique per channel only, hence the channel.

`event_problem` checks the fields all of this reads before any of it runs: an event Slack signed
but that lacks a channel or has a field of the wrong type is acknowledged and logged, not retried.
"""

from __future__ import annotations

import functools
import html
import re
from collections.abc import Collection, Mapping
from dataclasses import dataclass
from typing import Any

from adapters.slack import files
from bot.core.events import (
    ConversationKey,
    Event,
    IncomingMessage,
    MessageDeleted,
    MessageEdited,
    ResetConversation,
)

PLATFORM = "slack"
NEW_MESSAGE_SUBTYPES = frozenset({"", "thread_broadcast", "file_share", "me_message"})
ASSISTANT_ROOT = "assistant_app_thread"  # an assistant thread's root; its edits set the title

Payload = Mapping[str, Any]

_USER_MENTION = re.compile(r"<@([UW][A-Z0-9]+)(?:\|([^>]*))?>")
_CHANNEL_LINK = re.compile(r"<#([CG][A-Z0-9]+)(?:\|([^>]*))?>")
_SPECIAL = re.compile(r"<!(channel|here|everyone)(?:\|[^>]*)?>")
_SUBTEAM = re.compile(r"<!subteam\^[A-Z0-9]+(?:\|([^>]*))?>")
_LINK = re.compile(r"<([^>|]+)(?:\|([^>]*))?>")
_TS = re.compile(r"[0-9]{1,12}\.[0-9]{1,9}")
_STRING_FIELDS = ("type", "subtype", "channel", "channel_type", "user", "text", "team",
                  "parent_user_id", "deleted_ts")  # fmt: skip


@dataclass(frozen=True, slots=True)
class Identity:
    """Who we are in the workspace, from `auth.test`."""

    team_id: str
    bot_user_id: str
    bot_id: str


@dataclass(frozen=True, slots=True)
class Placement:
    """Where a new message goes; `needs_thread_check`: counts only in a thread we are part of."""

    key: ConversationKey
    needs_thread_check: bool = False


def event_problem(event: Payload) -> str | None:
    """What makes a `message` / `app_mention` event unusable (None: nothing)."""
    if not isinstance(event.get("channel"), str) or not event["channel"]:
        return "no channel"
    problem = _message_problem(event)
    if problem:
        return problem
    for field in ("message", "previous_message"):
        inner = event.get(field)
        if inner is None:
            continue
        if not isinstance(inner, Mapping):
            return f"{field} is not an object"
        problem = _message_problem(inner)
        if problem:
            return f"{field}.{problem}"
    return None


def _message_problem(message: Payload) -> str | None:
    for field in _STRING_FIELDS:
        if message.get(field) is not None and not isinstance(message[field], str):
            return f"{field} is not a string"
    for field in ("ts", "thread_ts", "deleted_ts"):
        value = message.get(field)
        if value is not None and not (isinstance(value, str) and _TS.fullmatch(value)):
            return f"{field} is not a Slack timestamp"
    for field in ("user_profile", "bot_profile"):
        if message.get(field) is not None and not isinstance(message[field], Mapping):
            return f"{field} is not an object"
    if not list_of_objects(message.get("files")):
        return "files is not a list of objects"
    return None


def list_of_objects(value: Any) -> bool:
    """Absent, or a list of JSON objects: what a payload's lists of things must be."""
    return value is None or (isinstance(value, list) and all(isinstance(v, Mapping) for v in value))


def is_slack_ts(value: str) -> bool:
    return _TS.fullmatch(value) is not None


def message_id(channel: str, ts: str) -> str:
    return f"{channel}:{ts}"


def split_message_id(platform_id: str) -> tuple[str, str]:
    channel, _, ts = platform_id.partition(":")
    return channel, ts


def is_from_bot(message: Payload, identity: Identity) -> bool:
    return bool(
        message.get("bot_id")
        or message.get("bot_profile")
        or message.get("subtype") == "bot_message"
        or (identity.bot_user_id and message.get("user") == identity.bot_user_id)
    )


def mentions(message: Payload, identity: Identity) -> bool:
    bot = identity.bot_user_id
    return bool(bot) and _own_mention(bot).search(str(message.get("text") or "")) is not None


def place(
    team: str,
    channel: str,
    channel_type: str,
    message: Payload,
    identity: Identity,
    listen_channels: Collection[str],
    mentioned: bool = False,
) -> Placement | None:
    """The conversation a new message belongs to, or None if it does not count."""
    ts, thread_ts = str(message.get("ts", "")), str(message.get("thread_ts") or "")
    if not ts:
        return None
    in_thread = bool(thread_ts) and thread_ts != ts
    if channel_type == "im" or channel in listen_channels:
        return Placement(ConversationKey(PLATFORM, team, channel, thread_ts if in_thread else ""))
    if mentioned or mentions(message, identity):
        return Placement(ConversationKey(PLATFORM, team, channel, thread_ts or ts))
    if in_thread:
        return Placement(ConversationKey(PLATFORM, team, channel, thread_ts), True)
    return None


@functools.cache
def _own_mention(bot_user_id: str) -> re.Pattern[str]:
    """Compiled once per bot id: building it for each message showed in the flood's profile."""
    return re.compile(rf"<@{re.escape(bot_user_id)}(?:\|[^>]*)?>\s?")


def plain_text(text: str, identity: Identity) -> str:
    """Slack's escaped text with `<…>` controls → what a person reads; our own mention removed."""
    if identity.bot_user_id:
        text = _own_mention(identity.bot_user_id).sub("", text)
    text = _USER_MENTION.sub(lambda m: "@" + (m.group(2) or m.group(1)), text)
    text = _CHANNEL_LINK.sub(lambda m: "#" + (m.group(2) or m.group(1)), text)
    text = _SPECIAL.sub(lambda m: "@" + m.group(1), text)
    text = _SUBTEAM.sub(lambda m: m.group(1) or "@group", text)
    text = _LINK.sub(lambda m: f"{m.group(2)} ({m.group(1)})" if m.group(2) else m.group(1), text)
    return html.unescape(text).strip()


def author_name(message: Payload) -> str:
    profile = message.get("user_profile") or {}
    for field in ("display_name", "real_name", "name"):
        if profile.get(field):
            return str(profile[field])
    return str(message.get("user") or "someone")


def new_message(
    placement: Placement, channel: str, message: Payload, identity: Identity
) -> IncomingMessage:
    text = plain_text(str(message.get("text") or ""), identity)
    return IncomingMessage(
        key=placement.key,
        message_id=message_id(channel, str(message["ts"])),
        author_id=str(message.get("user") or ""),
        author_name=author_name(message),
        text=text,
        is_dm=message.get("channel_type") == "im",
        attachments=files.attachments(message),
    )


def reset_request(body: Payload, default_team: str) -> ResetConversation | None:
    """`/reset` typed in a channel or DM → that conversation's reset (None: no channel given)."""
    channel = str(body.get("channel_id") or "")
    team = str(body.get("team_id") or default_team)
    if not channel or "/" in channel + team:
        return None
    return ResetConversation(
        ConversationKey(PLATFORM, team, channel, ""),
        author_id=str(body.get("user_id") or ""),
        is_dm=channel.startswith("D"),
    )


def change(
    team: str, event: Payload, identity: Identity, listen_channels: Collection[str]
) -> Event | None:
    """`message_changed` / `message_deleted` → an edit or delete; None when it changes nothing.

    The store finds the message by id alone; the key only has to name the right platform and
    workspace (and the conversation, for the thinking indicator), so the thread is best effort.
    """
    channel = str(event.get("channel", ""))
    channel_type = str(event.get("channel_type", ""))
    previous = event.get("previous_message") or {}

    def key_of(message: Payload) -> ConversationKey:
        placement = place(team, channel, channel_type, message, identity, listen_channels)
        if placement is not None:
            return placement.key
        return ConversationKey(PLATFORM, team, channel, str(message.get("thread_ts") or ""))

    if event.get("subtype") == "message_deleted":
        ts = str(event.get("deleted_ts") or previous.get("ts") or "")
        if not ts or is_from_bot(previous, identity):
            return None
        return MessageDeleted(key_of({**previous, "ts": ts}), message_id(channel, ts))
    message = event.get("message") or {}
    ts = str(message.get("ts", ""))
    if not ts or is_from_bot(message, identity) or message.get("subtype") == ASSISTANT_ROOT:
        return None
    text = plain_text(str(message.get("text") or ""), identity)
    attached = files.attachments(message)
    if previous and (plain_text(str(previous.get("text") or ""), identity), attached) == (
        text,
        files.attachments(previous),
    ):
        return None  # an unfurl, not an edit by the person (a file added or removed is one)
    return MessageEdited(key_of(message), message_id(channel, ts), text, attached)
