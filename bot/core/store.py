"""The storage contract, split by who uses it: one small protocol per consumer of the core.

`BurstStore` is the burst protocol's (the engine and the scheduler), `OutboxStore` delivery's,
`IndicatorMarks` and `DraftStore` the thinking indicator's and the streamed draft's,
`FrontendMemory` the threads' and catch-up's; front ends are handed their notes (`NoteBook`)
and installations (`InstallationBook`), tool calls their `ActionLog`. Each consumer's
constructor takes only the protocol it uses. Operations and the command line (status, explain,
retention, erasure, re-queue, usage, the cost guards' counters) are outside the core and work
on the SQL store itself (`storage.sql_store.SqlStore`), which implements every protocol here.

Implementations live in `storage/` (one SQL store; SQLite on aiosqlite, PostgreSQL on asyncpg)
and must pass one contract suite (`tests/contract/`). The records they take and return are plain
frozen values defined here, so that storage depends on the core and never the other way; times
in them are the caller's (see below). Rules every implementation keeps:

- every compare-and-swap is one conditional statement (`UPDATE ... WHERE ... RETURNING`) and the
  caller reads the returned rows, never a row count;
- debounce timers live in their own table; committing a reply deletes a timer only when its
  `armed_version <= covered version`, otherwise restarts its cap;
- `lease_token` only ever increases: it is the fencing token checked by renew, release and commit;
- message ids are unique per (platform, workspace); a second delivery of one id changes nothing;
- one clock for the protocol (G12): debounce due times and deadlines, lease and claim expiries
  and message arrival times are stamped and compared with the database's clock in the statement
  itself (PostgreSQL's; on SQLite the host's, which is the caller's). Times cross the protocol on
  the caller's clock, as float seconds since the epoch: `now` is the caller's reading when it
  calls, a time it passes (a retry, a postponement) is moved into the database by its distance
  from that `now`, and a time it gets back (a due time, an expiry) is the stored one at the same
  distance from `now`. Only differences cross between clocks, so a host whose clock is off changes
  nothing. Rows read for inspection (`conversation_state`, `replies`, ...) hold the stored times.
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Literal, Protocol

from bot.core.approvals import ApprovalStore
from bot.core.clicks import ClickStore
from bot.core.events import Attachment, Draft, IncomingMessage, MessageDeleted, MessageEdited
from bot.core.quiet_window import AdaptiveWindow
from bot.core.votes import VoteStore

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
    trace_context: str | None = None  # the pending burst's W3C traceparent (bot/ops/traces.py)
    opened: bool = False  # this change opened the burst: its trace starts here


@dataclass(frozen=True, slots=True)
class Timing:
    """Debounce settings for one arrival (per-channel overrides may change them)."""

    quiet_seconds: float
    max_wait_seconds: float
    adaptive: AdaptiveWindow | None = None
    """The window from the authors' rhythm (bot/core/quiet_window.py); None: `quiet_seconds`."""
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
class Share:
    """A conversation some process generates now (`generating`: its lease is live) or that is due
    to start, and the person its burst counts against ("": none known): fair shares (shares.py)."""

    conversation_id: str
    person: str
    generating: bool


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
    stop_version: int | None = None  # a click stopped the pending burst (bot/core/clicks.py)
    trace_context: str | None = None  # the burst's W3C traceparent, stored by its first message

    @property
    def close_reason(self) -> str:
        """Why the burst's window closes when it does: `max_wait` (the deadline came first),
        `retry` (a failed generation's backoff), or `quiet` (the quiet window or a flush)."""
        if self.failed_attempts:
            return "retry"
        if self.deadline_at is not None and self.closes_at >= self.deadline_at:
            return "max_wait"
        return "quiet"


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
    feedback: bool = False  # it carries the 👍/👎 buttons (bot/core/votes.py)
    model: str = ""  # the model that wrote it (votes are counted per model)


def notice_slot(message_id: str) -> int:
    """The versions a notice answering `message_id` takes in the outbox: negative, so it covers
    no message, and the same for one message, so one message never gets two notices."""
    return -1 - int.from_bytes(hashlib.sha256(message_id.encode()).digest()[:6], "big")


@dataclass(frozen=True, slots=True)
class FinalCheck:
    """Step 5's condition: the lease's fencing `token` still holds and `version` (V, the burst's
    snapshot) is still current, unless the burst's deadline has passed. A burst with a decided stop
    is answered only by its stopped answer (`stopping`, with the stop's version)."""

    token: int
    version: int
    deadline_passed: bool
    stopping: bool = False


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
    feedback: bool = False  # it carries the 👍/👎 buttons (bot/core/votes.py)
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

GenerationOutcome = Literal[
    "posted", "superseded", "discarded", "failed", "lease_lost", "skipped", "stopped", "parked"
]


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
    waited: float = 0.0  # seconds the burst waited for the API's capacity before it started
    waited_for: str = ""  # what it waited for (bot/core/admission.py)


@dataclass(frozen=True, slots=True)
class ConversationSummary:
    """One conversation as `burstbot status` lists it."""

    state: ConversationState
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


class FileStore(Protocol):
    """Fetched files (`bot.core.attachments`): what a burst's prompt step remembers of each."""

    async def attachment_file(self, uid: str) -> StoredFile | None:
        """What is remembered of the file `uid` (platform/workspace/file id); None: never tried."""
        ...

    async def keep_attachment_file(self, uid: str, file: StoredFile, now: float) -> None:
        """Remember a fetch's outcome (the first one wins); bytes are stored once per hash."""
        ...


class BurstStore(FileStore, ClickStore, VoteStore, ApprovalStore, Protocol):
    """The burst protocol (the engine, its supervisor and speculation window, the scheduler's
    timer index, a typing notice): arrival and clicks, timers, leases, collect, the final check
    and commit, model failures and every generation's record."""

    # 1. arrival -------------------------------------------------------------------------------
    async def ingest(self, message: IncomingMessage, now: float, timing: Timing) -> IngestResult:
        """Insert (duplicate id → stop), bump the version, arm the timer: one transaction."""
        ...

    async def edit(self, event: MessageEdited, now: float, timing: Timing) -> IngestResult:
        """Pending message: update text, bump, re-arm. Answered: update history only."""
        ...

    async def delete(self, event: MessageDeleted, now: float, timing: Timing) -> IngestResult: ...

    async def flush(self, conversation_id: str, now: float) -> None:
        """Make an armed timer due now (the input source ended: no need to wait for quiet)."""
        ...

    async def extend_quiet(
        self, conversation_id: str, author_id: str, until: float, now: float
    ) -> float | None:
        """A typing notice: stretch an armed timer's quiet window to `until` (capped by its
        deadline) if `author_id` has a pending message there; the timer's due time, or None when
        nothing matched."""
        ...

    # 2. timers and leases ---------------------------------------------------------------------
    async def next_due_at(self, now: float, skip: Sequence[str] = ()) -> float | None:
        """Earliest time any armed timer is due (its `start_at` if it has one, else `due_at`; an
        index lookup), leaving out the conversations in `skip` (the ones this process is serving:
        their timers may be due at once)."""
        ...

    async def due_timers(self, now: float, limit: int) -> list[DueTimer]: ...

    async def shares(self, now: float) -> list[Share]:
        """Every conversation generating now (any process's live lease) or due: one query."""
        ...

    async def postpone_timer(self, conversation_id: str, due_at: float, now: float) -> None:
        """Back off a due timer whose conversation is leased elsewhere (only if still due)."""
        ...

    async def acquire_lease(
        self, conversation_id: str, owner: str, now: float, ttl: float
    ) -> Lease | None:
        """CAS: take the lease if free or expired, bumping the fencing token. While held, the
        timer's due time is pushed to the lease expiry (and its early start cleared) unless newer
        input re-armed it. The lease says when the burst's window closes (`closes_at`)."""
        ...

    async def lease_expiry(self, conversation_id: str, now: float) -> float | None: ...

    async def renew_lease(
        self, conversation_id: str, token: int, version: int, now: float, ttl: float
    ) -> float | None:
        """CAS on the token: the lease's new expiry, or None when the token no longer fences."""
        ...

    async def window_closes_at(self, conversation_id: str, now: float) -> float | None:
        """When the conversation's armed window closes (min of its quiet window and deadline; a
        typing notice may have moved it), or None without a timer."""
        ...

    async def release_lease(self, conversation_id: str, token: int) -> None: ...

    async def drop_timer(self, conversation_id: str, version: int) -> None:
        """Delete the timer if nothing newer than `version` armed it (nothing left to answer)."""
        ...

    async def release_owner(self, owner: str) -> int:
        """Shutdown: release every lease and outbox claim this owner holds; returns leases freed."""
        ...

    # 3. collect -------------------------------------------------------------------------------
    async def current_version(self, conversation_id: str) -> int: ...

    async def conversation_state(self, conversation_id: str) -> ConversationState | None: ...

    async def pending_messages(
        self, conversation_id: str, after_version: int, upto_version: int
    ) -> list[StoredMessage]:
        """Messages with after < seq <= upto, edits applied, deleted ones dropped, in order."""
        ...

    async def history(
        self, conversation_id: str, upto_version: int, limit: int
    ) -> list[HistoryItem]:
        """The newest `limit` earlier turns (messages with seq <= upto, non-failed replies), oldest
        first; only turns after the conversation's history floor (see `reset_history`)."""
        ...

    # 5. final check + commit ------------------------------------------------------------------
    async def commit(
        self,
        conversation_id: str,
        check: FinalCheck,
        now: float,
        timing: Timing,
        reply: NewReply | None,
        generation: GenerationRecord | None = None,
        claim: ClaimRequest | None = None,
    ) -> CommitOutcome:
        """One transaction: if `check` holds, answered_version=V and the lease released; then the
        outbox row (None reply = answered without a reply), which takes over the conversation's
        draft, the timer cleanup, `generation`'s record (not written when discarded) and the
        reply's delivery claim, if `claim` asks and the row can be claimed now (G9)."""
        ...

    async def record_failure(
        self, conversation_id: str, token: int, retry_at: float, now: float
    ) -> int | None:
        """A model call failed: count the attempt, re-arm the timer at `retry_at`, release the
        lease. Returns the attempt count, or None if the token no longer fences."""
        ...

    async def record_generation(self, record: GenerationRecord) -> None: ...


class OutboxStore(Protocol):
    """Step 6, delivery (`bot.core.outbox`): claims on the outbox's rows, fenced by each row's
    claim token, and their outcomes."""

    async def claim_replies(
        self,
        owner: str,
        now: float,
        ttl: float,
        platforms: Sequence[str],
        limit: int,
        reply_id: int | None = None,
    ) -> list[OutboxRow]:
        """CAS-claim pending rows that are due and unclaimed (or whose claim expired), bumping each
        row's claim token; a row waits while an earlier reply of its conversation is pending."""
        ...

    async def next_outbox_at(self, platforms: Sequence[str], now: float) -> float | None: ...

    async def renew_claim(
        self, reply_id: int, claim_token: int, now: float, ttl: float
    ) -> float | None:
        """CAS on the claim token: keep the claim while posting; its new expiry, or None when
        the claim was taken."""
        ...

    async def record_parts(
        self, reply_id: int, claim_token: int, platform_message_ids: Sequence[str]
    ) -> bool:
        """The parts posted so far (in order), kept on the pending row under the claim token."""
        ...

    async def mark_sent(
        self, reply_id: int, claim_token: int, platform_message_ids: Sequence[str], now: float
    ) -> Sent | None:
        """Every mark is conditional on the claim token: a stale deliverer changes nothing
        (None)."""
        ...

    async def mark_retry(
        self,
        reply_id: int,
        claim_token: int,
        next_attempt_at: float,
        error: str,
        now: float,
        counts: bool = True,
    ) -> bool:
        """Release the claim until `next_attempt_at`; a failure that `counts` (not a rate limit)
        adds an attempt, and the first failure (`now`) starts the give-up horizon
        (`failing_since`)."""
        ...

    async def mark_failed(self, reply_id: int, claim_token: int, error: str) -> bool:
        """Settle the row as failed (a permanent error, or the horizon ran out): it stays until
        an operator re-queues it (`burstbot retry`)."""
        ...

    async def replies(self, conversation_id: str | None = None) -> list[OutboxRow]:
        """The outbox's rows, of one conversation or of all (is one still to be posted?)."""
        ...


class IndicatorMarks(Protocol):
    """The thinking indicator (`bot.core.indicator`): recorded, so whoever posts the reply takes
    it down."""

    async def record_indicator(self, conversation_id: str, at: str, version: int) -> bool:
        """Record the indicator as shown at message `at`: True (show it now) unless the
        conversation is answered up to `version` or an indicator is recorded already."""
        ...

    async def take_indicator(self, conversation_id: str) -> str | None:
        """Delete the recorded indicator; the message it was shown at, if one was recorded."""
        ...

    async def conversation_state(self, conversation_id: str) -> ConversationState | None: ...


class DraftStore(Protocol):
    """Streaming (`bot.core.streaming`): the conversation's draft, fenced by the lease token."""

    async def draft(self, conversation_id: str) -> Draft | None:
        """The draft a generation of this conversation streams into, if one was started."""
        ...

    async def record_draft(self, conversation_id: str, token: int, draft: Draft) -> bool:
        """Start the draft (key, creation time and the message it answers, before its first post)
        or record its message id; refused (False) when the lease token no longer fences or another
        draft is recorded. The creation time and `reply_to` of the first record stay. A committed
        reply takes the draft over (`commit`), leaving the conversation without one."""
        ...

    async def drop_draft(self, conversation_id: str, token: int, key: str) -> bool:
        """Forget the draft (its message was deleted, by us or by a person); fenced by the lease
        token."""
        ...


class FrontendMemory(Protocol):
    """What front ends remember (`bot.core.threads`, `bot.core.catch_up`): which threads are
    ours, the messages held until their thread is decided, and where catch-up resumes. Notes and
    installations are the front ends' own small contracts (`NoteBook`, `InstallationBook`)."""

    async def thread_status(self, conversation_id: str) -> bool | None:
        """True: a conversation of ours, or a lookup said so; False: a lookup said it is not;
        None: never decided."""
        ...

    async def remember_thread(self, conversation_id: str, ours: bool, now: float) -> None: ...

    async def hold(self, message: IncomingMessage, now: float) -> None:
        """Keep a message until its thread is decided; holding one id twice changes nothing.
        Held messages are thread replies in channels (never DMs)."""
        ...

    async def held(self, platform: str, limit: int) -> list[IncomingMessage]:
        """The oldest held messages of a platform, with `via="held"`."""
        ...

    async def unhold(self, message: IncomingMessage) -> None: ...

    async def catch_up_points(
        self, platform: str, before: float, now: float
    ) -> dict[str, str | None]:
        """Every conversation of `platform` → the platform id of its newest message stored before
        `before` (None: none stored before then), most recently active first. Arrival times are
        the database's: `before` crosses over by its distance from `now`."""
        ...

    async def stored_in(self, platform: str, workspace: str, message_id: str) -> str | None:
        """The id of the conversation the platform message is stored in (None: not stored): a
        front end that keys a message by what is stored (Slack's agent DMs) keys it as before."""
        ...
