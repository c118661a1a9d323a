"""The adapter contract: what an adapter may call, and what it must offer.

An adapter (Slack, Discord, console) converts platform events into `bot.core.events` types and
hands them to the `Host` (the running app: engine + store); for the way back it implements
`Frontend`. `deliver` must be idempotent by `reply.id`: asked twice for one reply (a crash
between posting and recording it), it posts once.

Shutdown asks a front end twice: first to stop taking events (the `StopsIntake` ability), while
replies in flight are still being posted through it; then, once they are done or cancelled, to
`stop` altogether.

Optional abilities are declared, never guessed (docs/design.md#front-end-abilities): each is a
`Protocol` of its own that a front end names among its bases, checked once at wiring
(`check_abilities`); after that the core asks the declaration (`declares`), not the object's
attributes.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Protocol, cast

from bot.core.clicks import Click, ClickAnswer
from bot.core.errors import BurstbotError, ConfigError
from bot.core.events import Attachment, ConversationKey, Draft, Event, Reply
from bot.core.installations import InstallationBook
from bot.core.notes import NoteBook
from bot.core.store import IngestResult
from bot.core.votes import Vote, VoteAnswer

if TYPE_CHECKING:  # catch-up and threads name front-end types too
    from bot.core.catch_up import CatchUp, CatchUpRun
    from bot.core.threads import ThreadBook


class Host(Protocol):
    threads: ThreadBook
    """Which threads are ours (from the store), and messages held until a lookup decides."""
    notes: NoteBook
    """What a front end remembers about a conversation beyond its messages (bot/core/notes.py)."""
    installations: InstallationBook
    """The workspaces installed through OAuth (bot/core/installations.py), and their erasure."""

    async def ingest(self, event: Event) -> IngestResult:
        """Store the event durably (milliseconds) and return; ack the platform only after this."""
        ...

    async def click(self, click: Click) -> ClickAnswer:
        """Store and decide a button press (G16) in one step; answer the platform only after
        this, telling the clicker alone `ClickAnswer.notice` if there is one."""
        ...

    async def vote(self, vote: Vote) -> VoteAnswer:
        """Store and decide a 👍/👎 press (G16, bot/core/votes.py) in one step; answer the
        platform only after this."""
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


class DraftSurface(Protocol):
    """Streaming, offered by a front end that can edit its messages (`Drafting.drafts`).

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


class PacedDrafts(Protocol):
    """A draft surface whose platform limits calls shared by many conversations
    (`bot/core/pacing.py`): it paces its calls itself, final text first."""

    async def draft_turn(self, key: ConversationKey, posting: bool) -> bool:
        """Whether one draft call (a post, or else an edit) may be made now on the platform's
        budget. It never waits for budget: False skips the call (the stream's next call carries
        the newer text; a draft never posted leaves the reply to be posted whole). The stream
        reads its newest text after the turn."""
        ...


class Healthy(Protocol):
    """A front end that can tell whether it receives now (`/healthz`); without the ability it
    counts as (True, "running")."""

    def health(self) -> tuple[bool, str]: ...


class Drafting(Protocol):
    """A front end that can stream: `drafts` is its surface (None while streaming is off or
    before it started)."""

    drafts: DraftSurface | None


class StopsIntake(Protocol):
    """Shutdown's first step: the front end takes no more events, but can still post. It should
    refuse only what its platform delivers again (Slack retries an event that gets no 2xx); an
    event no platform redelivers is better stored, since another process or the restart answers
    it."""

    async def stop_intake(self) -> None: ...


class PromptContext(Protocol):
    """A front end that adds to a conversation's system prompt (the channel a Slack user is
    viewing); asked with a bound on its time, and a failure answers without it."""

    async def prompt_context(self, key: ConversationKey) -> str: ...


class CatchUpSource(Protocol):
    """A front end that can fetch what it missed (`bot/core/catch_up.py`)."""

    def use_catch_up(self, catch_up: CatchUp) -> None:
        """Keep the runner: request a pass after a reconnect that may have lost events (or for a
        message that could not be stored); stop it when the front end stops."""
        ...

    async def catch_up(self, run: CatchUpRun) -> None:
        """Fetch what came after each of `run.points` (and, with `run.listened`, in the listened
        channels since `run.window_start`) and `run.ingest` what counts."""
        ...


class FileSource(Protocol):
    """A front end that can download its platform's files (with its credentials)."""

    async def fetch_attachment(
        self, key: ConversationKey, attachment: Attachment, max_bytes: int
    ) -> bytes:
        """The file's bytes, with the credentials of `key`'s workspace; `FetchError` with a short
        reason when they cannot be had (a failed download, or more than `max_bytes`, which stops
        the download there)."""
        ...


FRONTEND_ABILITIES: tuple[type, ...] = (
    Healthy, Drafting, StopsIntake, PromptContext, CatchUpSource, FileSource
)  # fmt: skip


_checked_surfaces: set[type] = set()


def declares(obj: object, ability: type) -> bool:
    """`obj` names `ability` among its bases (checked at wiring by `check_abilities`)."""
    return ability in type(obj).__mro__


def _members(ability: type) -> list[str]:
    methods = [name for name, value in vars(ability).items()
               if callable(value) and not name.startswith("_")]  # fmt: skip
    return [*methods, *vars(ability).get("__annotations__", {})]


def _has(obj: object, ability: type, name: str) -> bool:
    """`obj` itself provides `name`: not the ability's stub, and (for an attribute) set."""
    if name in vars(ability).get("__annotations__", {}):
        return hasattr(obj, name)
    return getattr(type(obj), name, None) not in (None, vars(ability)[name])


def check_abilities(obj: object, what: str, abilities: tuple[type, ...]) -> None:
    """Fail with one line when `obj` declares an ability it does not implement, or implements one
    it does not declare (a misspelt method or base would otherwise turn a feature off)."""
    for ability in abilities:
        members = _members(ability)
        if declares(obj, ability):
            lacking = [name for name in members if not _has(obj, ability, name)]
            if lacking:
                problem = f"declares {ability.__name__} but has no {lacking[0]}"
                raise ConfigError(f"{what}: {type(obj).__name__} {problem}")
        elif all(_has(obj, ability, name) for name in members):
            problem = f"has {', '.join(members)} but does not declare {ability.__name__}"
            raise ConfigError(f"{what}: {type(obj).__name__} {problem}")


def frontend_health(frontend: Frontend) -> tuple[bool, str]:
    """Whether a front end can receive now, and how it is connected (`/healthz`)."""
    if not declares(frontend, Healthy):
        return True, "running"
    ok, state = cast(Healthy, frontend).health()
    return bool(ok), str(state)


def drafts_of(frontend: Frontend) -> DraftSurface | None:
    """The front end's streaming surface, if it offers one (None when turned off)."""
    if not declares(frontend, Drafting):
        return None
    surface = cast(Drafting, frontend).drafts
    if surface is not None and type(surface) not in _checked_surfaces:  # made at start, not wiring
        check_abilities(surface, f"{frontend.platform} drafts", (PacedDrafts,))
        _checked_surfaces.add(type(surface))
    return surface


def paces(surface: DraftSurface) -> bool:
    """The surface paces its calls itself (shares the platform's budget, final text first)."""
    return declares(surface, PacedDrafts)


async def draft_turn(surface: DraftSurface, key: ConversationKey, posting: bool) -> bool:
    """Whether one draft call may be made now on the platform's budget (always, where the
    surface is not paced); it never waits."""
    if not paces(surface):
        return True
    return bool(await cast(PacedDrafts, surface).draft_turn(key, posting))


async def stop_intake(frontend: Frontend) -> None:
    """Shutdown's first step, for a front end that `StopsIntake` (others have nothing to stop)."""
    if declares(frontend, StopsIntake):
        await cast(StopsIntake, frontend).stop_intake()


def prompt_context_of(frontend: Frontend | None) -> PromptContext | None:
    return cast(PromptContext, frontend) if declares(frontend, PromptContext) else None


def catch_up_source(frontend: Frontend) -> CatchUpSource | None:
    return cast(CatchUpSource, frontend) if declares(frontend, CatchUpSource) else None


def file_source(frontend: Any) -> FileSource | None:
    return cast(FileSource, frontend) if declares(frontend, FileSource) else None
