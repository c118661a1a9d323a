"""Platform-neutral events and keys.

Adapters translate platform payloads into these types and back; nothing platform-specific crosses
into the engine. Every type is frozen: an event is a fact that already happened.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Protocol


@dataclass(frozen=True, slots=True)
class ConversationKey:
    """Where a burst lives: one conversation per (platform, workspace, channel, thread).

    `thread` is "" for a channel or DM without threads. Discord's per-user scope puts the user id in
    `thread` so each person in a busy channel gets bursts of their own.
    """

    platform: str
    workspace: str
    channel: str
    thread: str = ""

    def __post_init__(self) -> None:
        for name in ("platform", "workspace", "channel", "thread"):
            if "/" in getattr(self, name):
                raise ValueError(f"ConversationKey.{name} must not contain '/'")
        if not self.platform or not self.channel:
            raise ValueError("ConversationKey needs a platform and a channel")

    @property
    def id(self) -> str:
        """The stable string stored in the database."""
        return f"{self.platform}/{self.workspace}/{self.channel}/{self.thread}"

    @classmethod
    def parse(cls, conversation_id: str) -> ConversationKey:
        parts = conversation_id.split("/")
        if len(parts) != 4:
            raise ValueError(f"not a conversation id: {conversation_id!r}")
        return cls(*parts)


@dataclass(frozen=True, slots=True)
class Attachment:
    """A file on a message, as the platform described it at arrival.

    Only this description is stored with the message (the ack never waits for a download); the
    bytes are fetched from `url` when the burst is answered. `platform_id` is stable per platform
    and workspace (Slack file id, Discord attachment id); `size` is the declared size in bytes
    (0: unknown); `width`/`height` are an image's pixels when the platform says (0: unknown).
    """

    platform_id: str
    name: str
    mime_type: str
    size: int
    url: str
    width: int = 0
    height: int = 0


@dataclass(frozen=True, slots=True)
class IncomingMessage:
    """A user message as an adapter accepted it; `message_id` is the platform's id (dedupe key)."""

    key: ConversationKey
    message_id: str
    author_id: str
    author_name: str
    text: str
    author_is_bot: bool = False
    is_dm: bool = False  # a direct message to the bot (the access policy's `dm_policy` applies)
    via: str = ""
    """How it reached us: "" live, "catch-up" (fetched after downtime), "held" (kept until its
    thread was looked up). Stored with the message; `burstbot explain` shows it."""
    attachments: tuple[Attachment, ...] = ()


@dataclass(frozen=True, slots=True)
class MessageEdited:
    """New text, and the files the message now has (None: the platform did not say; kept)."""

    key: ConversationKey
    message_id: str
    text: str
    attachments: tuple[Attachment, ...] | None = None


@dataclass(frozen=True, slots=True)
class MessageDeleted:
    key: ConversationKey
    message_id: str


@dataclass(frozen=True, slots=True)
class ResetConversation:
    """A user asked to forget the conversation so far (`/reset`): later prompts start fresh.

    Stored messages are kept (explain still shows them); only what prompts include changes.
    """

    key: ConversationKey
    author_id: str = ""
    is_dm: bool = False


MessageEvent = IncomingMessage | MessageEdited | MessageDeleted
Event = MessageEvent | ResetConversation


class DeliveryFence(Protocol):
    def check(self) -> None:
        """Raise `ClaimLost` if the delivery may no longer post; adapters call it before each
        part, so a delivery whose claim was taken stops before its next part."""

    async def posted(self, part: int, platform_id: str) -> None:
        """Record, durably, that `part` reached the platform; adapters call it after each part,
        so a retry by any process (after a crash too) posts only the parts still missing."""


class Unfenced:
    """The fence of a reply posted outside the outbox (a guard's notice): always open."""

    def check(self) -> None:
        return None

    async def posted(self, part: int, platform_id: str) -> None:
        return None


@dataclass(frozen=True, slots=True)
class Draft:
    """The message a conversation's generations stream into until a reply finishes it.

    `key` is recorded before the first post and is that post's idempotency key (Slack metadata,
    Discord nonce), so a post whose response was lost is found again; `message_id` is recorded
    once known. `created_at` (recorded with the key, before the post) is where a look-up for a
    post whose outcome is unknown starts, and `reply_to` the message the first post answered
    (Discord finds a draft past its nonce window by it).
    """

    key: str
    message_id: str | None = None
    created_at: float = 0.0
    reply_to: str | None = None


@dataclass(frozen=True, slots=True)
class Reply:
    """One outbox row handed to an adapter for posting.

    `id` is the delivery idempotency key: the adapter must post a given reply at most once, even
    when asked again after a crash (Discord nonce, Slack metadata, ...).
    """

    id: str
    key: ConversationKey
    text: str
    covers_to_version: int
    reply_to_message_id: str | None = None
    attempt: int = 1
    already_posted: tuple[str, ...] = field(default=())
    fence: DeliveryFence = field(default=Unfenced(), compare=False)
    draft: Draft | None = None
    """The streamed draft this reply finishes: its first part is an edit of that message (found
    by `draft.key` if its id was never recorded), not a new post."""
    feedback: bool = False
    """An answer that carries the 👍/👎 buttons (bot/core/votes.py): on its last part, once."""
    card: str | None = None
    """An approval card (bot/core/approvals.py): what its Approve and Deny buttons name (the
    card's own reply id, without the "r"), shown under the text. A front end without buttons
    posts the text alone."""
    ends_card: str | None = None
    """The platform id of the approval card this reply ends: its text replaces the card's and
    the buttons go (an edit, made again safely on a retry), not a new post."""
