"""The records that cross the storage boundary: what the core hands a store and what it gets back.

Plain frozen values, defined in the core so that storage depends on the core and never the other
way (the `Store` protocol in bot/core/store.py names them). Times are the caller's (see there).
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, field
from typing import Literal

from bot.core.events import Attachment, Draft

IngestStatus = Literal["accepted", "duplicate", "history", "unknown", "ignored"]
"""accepted: stored and the version bumped; duplicate: already stored; history: an edit or delete of
an answered message (history updated, no new burst); unknown: edit/delete of a message never seen;
ignored: refused before storage (a bot's message)."""


@dataclass(frozen=True, slots=True)
class IngestResult:
    status: IngestStatus
    conversation_id: str
    version: int
    due_at: float | None = None  # the burst's window closes then
    start_at: float | None = None  # its generation may start then (speculation), if armed


@dataclass(frozen=True, slots=True)
class Timing:
    """Debounce settings for one arrival (per-channel overrides may change them)."""

    quiet_seconds: float
    max_wait_seconds: float
    adaptive: bool = False  # the window from the authors' rhythm (bot/core/quiet_window.py)
    min_quiet_seconds: float = 0.5
    max_quiet_seconds: float = 5.0
    speculate_after_seconds: float | None = None
    """A generation may start this long after the arrival, before the window closes (the
    timer's `start_at`); None: it starts at the close."""


@dataclass(frozen=True, slots=True)
class DueTimer:
    conversation_id: str
    due_at: float
    deadline_at: float
    armed_version: int
    start_at: float | None = None  # a speculative start before `due_at` (None: none armed)


@dataclass(frozen=True, slots=True)
class Lease:
    conversation_id: str
    owner: str
    token: int
    version: int
    answered_version: int
    expires_at: float
    deadline_at: float | None
    failed_attempts: int
    taken_over: bool = False  # the previous holder let it expire without releasing it
    closes_at: float = 0.0  # the burst's window closes then: a lease taken before it speculates


@dataclass(frozen=True, slots=True)
class StoredMessage:
    seq: int
    message_id: str
    author_id: str
    author_name: str
    text: str
    created_at: float
    edited_at: float | None
    deleted: bool
    via: str = ""  # as `IncomingMessage.via`
    attachments: tuple[Attachment, ...] = ()
    quiet_reason: str | None = None  # the adaptive window this message armed, and why


@dataclass(frozen=True, slots=True)
class HistoryItem:
    """One earlier turn: a user message (`author_name` set) or one of our replies."""

    role: Literal["user", "assistant"]
    author_name: str
    text: str
    version: int
    attachments: tuple[Attachment, ...] = ()


UNFINISHED = "unfinished"  # a search's error while its result never came (the generation ended)


@dataclass(frozen=True, slots=True)
class WebSearch:
    """One search the model ran: its query, how many results came back, or the error code the
    tool answered with (errors arrive inside a successful response)."""

    query: str
    results: int = 0
    error: str | None = None


@dataclass(frozen=True, slots=True)
class TokenUsage:
    input_tokens: int = 0
    output_tokens: int = 0
    cache_read_tokens: int = 0
    cache_write_tokens: int = 0
    web_searches: int = 0  # billed per search on top of the tokens


@dataclass(frozen=True, slots=True)
class NewReply:
    """A reply to commit. `covers_from_version` is the answered version the prompt was built on
    (the lease's); the outbox records it, so a reply that re-answered covered messages shows up as
    an overlap instead of hiding behind the version read at commit time."""

    text: str
    kind: Literal["answer", "apology", "notice"] = "answer"
    reply_to_message_id: str | None = None
    usage: TokenUsage = field(default_factory=TokenUsage)
    covers_from_version: int | None = None


def notice_slot(message_id: str) -> int:
    """The versions a notice answering `message_id` takes in the outbox: negative, so it covers
    no message, and the same for one message, so one message never gets two notices."""
    return -1 - int.from_bytes(hashlib.sha256(message_id.encode()).digest()[:6], "big")


@dataclass(frozen=True, slots=True)
class FinalCheck:
    """Step 5's condition: the lease's fencing `token` still holds and `version` (V, the burst's
    snapshot) is still current, unless the burst's deadline has passed."""

    token: int
    version: int
    deadline_passed: bool


OutboxState = Literal["pending", "sent", "failed"]


@dataclass(frozen=True, slots=True)
class OutboxRow:
    id: int
    conversation_id: str
    platform: str
    covers_from_version: int
    covers_to_version: int
    seen_version: int  # the conversation's version at the final check (> covers_to: deadline)
    text: str
    kind: str
    state: OutboxState
    attempts: int  # failed attempts to post (claims and rate limits are not attempts)
    next_attempt_at: float
    reply_to_message_id: str | None
    platform_message_ids: tuple[str, ...]
    created_at: float
    sent_at: float | None
    last_error: str | None
    claim_token: int = 0  # bumped by every claim: renewals and marks are fenced by it
    claim_expires_at: float | None = None  # as stored; in a row a claim returned, the claimer's
    draft_key: str | None = None  # the draft this reply finishes (its first part edits it)
    draft_message_id: str | None = None  # None with a key: posted, but its id was never recorded
    draft_created_at: float | None = None
    draft_reply_to: str | None = None
    failing_since: float | None = None  # its first failure: the give-up horizon runs from here

    @property
    def draft(self) -> Draft | None:
        if self.draft_key is None:
            return None
        created_at = self.draft_created_at or 0.0
        return Draft(self.draft_key, self.draft_message_id, created_at, self.draft_reply_to)


@dataclass(frozen=True, slots=True)
class ConversationState:
    conversation_id: str
    version: int
    answered_version: int
    lease_owner: str | None
    lease_token: int
    lease_expires_at: float | None
    failed_attempts: int
    timer: DueTimer | None


@dataclass(frozen=True, slots=True)
class Committed:
    """The final check passed: the burst is answered. `reply` is its outbox row, or None when it
    was answered without a reply (every message deleted, a guard's silent refusal)."""

    reply: OutboxRow | None
    claimed: bool = False  # `reply` was claimed for delivery by the commit (`ClaimRequest`)


@dataclass(frozen=True, slots=True)
class ClaimRequest:
    """Claim the committed reply for `owner` in the commit's own transaction, as `claim_replies`
    would right after it: delivery starts without a commit of its own."""

    owner: str
    ttl: float
    platforms: tuple[str, ...]


@dataclass(frozen=True, slots=True)
class Discarded:
    """The final check failed: the token no longer fences, or newer input arrived in time."""


CommitOutcome = Committed | Discarded

GenerationOutcome = Literal["posted", "superseded", "discarded", "failed", "lease_lost", "skipped"]


@dataclass(frozen=True, slots=True)
class Sent:
    """A reply marked sent. It took the conversation's recorded thinking indicator down with it:
    `indicator_at` is the message it was shown at, for the caller to remove from the platform."""

    indicator_at: str | None


@dataclass(frozen=True, slots=True)
class GenerationRecord:
    conversation_id: str
    lease_token: int
    from_version: int
    to_version: int
    started_at: float
    ended_at: float
    outcome: GenerationOutcome
    usage: TokenUsage = field(default_factory=TokenUsage)
    error: str | None = None
    model: str = ""  # as the replier reported it ("" when no model was called)
    user_id: str = ""  # the platform id of whom the reply answers (the burst's last author)
    searches: tuple[WebSearch, ...] = ()  # the web searches the model ran, in order


@dataclass(frozen=True, slots=True)
class ConversationSummary:
    """One conversation as `burstbot status` lists it."""

    state: ConversationState
    history_floor: int
    pending_messages: int
    outbox_pending: int
    outbox_failed: int
    last_activity_at: float


@dataclass(frozen=True, slots=True)
class Backlog:
    """Every process's outstanding work, as `/metrics` reports it."""

    outbox_depth: int  # replies waiting in the outbox
    oldest_pending_at: float | None  # when the oldest unanswered message arrived
    outbox_failed: int  # replies that failed for good, until `burstbot retry`


@dataclass(frozen=True, slots=True)
class StoredFile:
    """What the store remembers of one file: its bytes (kept by `sha256`) or why there are none."""

    sha256: str | None
    note: str | None
    content: bytes | None = None
