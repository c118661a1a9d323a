"""The adapter contract: what an adapter may call, and what it must offer.

An adapter (Slack, Discord, console) converts platform events into `bot.core.events` types and
hands them to the `Host` (the running app: engine + store); for the way back it implements
`Frontend`. `deliver` must be idempotent by `reply.id`: asked twice for one reply (a crash
between posting and recording it), it posts once.

Shutdown asks a front end twice: first to stop taking events (optional `stop_intake`, see
`stop_intake` below), while replies in flight are still being posted through it; then, once they
are done or cancelled, to `stop` altogether.
"""

from __future__ import annotations

from typing import Protocol

from bot.core.catch_up import ThreadBook
from bot.core.errors import BurstbotError
from bot.core.events import ConversationKey, Draft, Event, Reply
from bot.core.notes import NoteBook
from bot.core.store import IngestResult


class Host(Protocol):
    threads: ThreadBook
    """Which threads are ours (from the store), and messages held until a lookup decides."""
    notes: NoteBook
    """What a front end remembers about a conversation beyond its messages (bot/core/notes.py)."""

    async def ingest(self, event: Event) -> IngestResult:
        """Store the event durably (milliseconds) and return; ack the platform only after this."""
        ...

    async def flush(self, key: ConversationKey) -> None:
        """No more input is coming for now: answer what is pending without waiting for quiet."""
        ...

    async def is_settled(self, key: ConversationKey) -> bool:
        """Nothing pending, generating or waiting in the outbox for this conversation."""
        ...

    async def typing(self, key: ConversationKey, author_id: str) -> None:
        """`author_id` started typing here (a notice, not a message: nothing is stored for it);
        with a pending burst of theirs, its quiet window waits for them (typing_window.py)."""
        ...

    def request_stop(self) -> None:
        """Ask the whole process to shut down gracefully (e.g. the console's stdin ended)."""
        ...

    def frontend_failed(self, platform: str, error: BurstbotError) -> None:
        """This front end stopped working for good (a connection it cannot restore): the whole
        process shuts down cleanly and then fails with `error`, so a supervisor restarts it."""
        ...


class Frontend(Protocol):
    platform: str

    async def start(self, host: Host) -> None:
        """Connect and start receiving in the background; return once running."""
        ...

    async def stop(self) -> None: ...

    async def deliver(self, reply: Reply) -> list[str]:
        """Post the reply; return the platform ids of what was posted (several if split).

        Call `reply.fence.check()` before posting each part (it raises `ClaimLost` once another
        worker may be delivering this reply). Raise `RetryableDeliveryError` (optionally with
        `retry_after`) or `PermanentDeliveryError`.
        """
        ...

    async def show_busy(self, key: ConversationKey, busy: bool, message_id: str) -> None:
        """Start or stop the thinking indicator for a conversation, shown at (or by) its message
        `message_id` (best effort, never raises). "Off" may come from another process than "on"
        did, or from one started after it (bot/core/indicator.py)."""
        ...


def frontend_health(frontend: Frontend) -> tuple[bool, str]:
    """Whether a front end can receive now, and how it is connected (`/healthz`). Optional: a
    front end may define `def health(self) -> tuple[bool, str]`; without it, (True, "running")."""
    method = getattr(frontend, "health", None)
    if method is None:
        return True, "running"
    ok, state = method()
    return bool(ok), str(state)


class DraftSurface(Protocol):
    """Streaming, offered by a front end that can edit its messages (`frontend.drafts`).

    A draft is one message per burst, shown while the model writes: posted once with the draft's
    key as idempotency key, then edited. Partial text is rendered so that half-written markup
    never shows broken (an unclosed code block is closed), and a draft shows at most one
    message's worth: the reply that finishes it (`Reply.draft`) edits it to its first part and
    posts the rest. Failures raise `DeliveryError`s, as `deliver` does; an edit of a message that
    was deleted raises `MessageGone`.
    """

    nonce_window: float
    """Seconds after a draft's creation during which posting it again with its key returns the
    message an earlier post made (Discord's nonce); 0 where the platform never dedupes (Slack)."""

    async def post_draft(self, key: ConversationKey, draft: Draft, text: str) -> str:
        """Post the draft (answering `draft.reply_to`) with its key; return its message id."""
        ...

    async def find_draft(self, key: ConversationKey, draft: Draft) -> str | None:
        """The message a post of this draft made, if it shows now: looked up from
        `draft.created_at` by its key (or, where the platform keeps no key, by what it
        answers)."""
        ...

    async def edit_draft(self, key: ConversationKey, message_id: str, text: str) -> None:
        """Show the text so far. A draft's text may be a `DraftText` (a str: the text and the
        activity line) that also names the searches, for a surface that shows them itself."""
        ...

    async def delete_draft(self, key: ConversationKey, message_id: str) -> None:
        """Remove the draft (its burst ended without a reply); one already gone is no error."""
        ...


async def draft_turn(surface: DraftSurface, key: ConversationKey, posting: bool) -> bool:
    """Whether one draft call (a post, or else an edit) may be made now on the platform's budget.

    Optional: a surface whose platform limits calls shared by many conversations defines
    `async def draft_turn(self, key, posting) -> bool` (`bot/core/pacing.py`). It never waits for
    budget: False skips the call (the stream's next call carries the newer text; a draft never
    posted leaves the reply to be posted whole). The stream reads its newest text after the
    turn."""
    method = getattr(surface, "draft_turn", None)
    if method is None:
        return True
    return bool(await method(key, posting))


def paces(surface: DraftSurface) -> bool:
    """The surface paces its calls itself (shares the platform's budget, final text first)."""
    return getattr(surface, "draft_turn", None) is not None


def drafts_of(frontend: Frontend) -> DraftSurface | None:
    """The front end's streaming surface, if it offers one (`drafts`, None when turned off)."""
    surface: DraftSurface | None = getattr(frontend, "drafts", None)
    return surface


async def stop_intake(frontend: Frontend) -> None:
    """Shutdown's first step: the front end takes no more events, but can still post.

    Optional: a front end may define `async def stop_intake(self) -> None`. It should refuse only
    what its platform delivers again (Slack retries an event that gets no 2xx); an event no
    platform redelivers is better stored, since another process or the restart answers it."""
    method = getattr(frontend, "stop_intake", None)
    if method is not None:
        await method()
