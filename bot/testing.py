"""Public fakes for tests of burstbot and of code built on it.

- `ScriptedReplier`: a replier whose calls a test can hold open, finish, fail or stream into.
- `RecordingFrontend`: a front end that records every raw post (one per part) and dedupes only the
  way a platform lets an adapter: by reading back what is already shown. With `drafts=True` it
  streams too: a draft is one raw post, its edits are recorded apart (`edits`), and `visible`
  shows what each message says now.
- `check_invariants`: G1, G2, G3 and G9 over a store's outbox and state, and (given a
  `RecordingFrontend`) over the raw posts: each part once, in order.
"""

from __future__ import annotations

import asyncio
import sys
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace

from bot.core.clock import Clock
from bot.core.errors import BurstbotError, DeliveryError, MessageGone
from bot.core.events import ConversationKey, Draft, Reply
from bot.core.frontend import Drafting, Host
from bot.core.replier import Prompt, Usage
from bot.core.store import OutboxRow, Store


@dataclass(eq=False)
class ReplierCall:
    prompt: Prompt
    usage: Usage
    started: asyncio.Event = field(default_factory=asyncio.Event)
    _outcome: asyncio.Future[str] = field(
        default_factory=lambda: asyncio.get_running_loop().create_future()
    )
    cancelled: bool = False

    @property
    def texts(self) -> list[str]:
        return [m.text for m in self.prompt.burst]

    def stream(self, tokens: int, text: str = "") -> None:
        """Pretend the model wrote `tokens` more output tokens, and `text` (a draft shows it)."""
        self.usage.output_tokens += tokens
        if text:
            self.usage.streamed.append(text)

    def finish(self, text: str | None = None) -> None:
        if not self._outcome.done():
            self._outcome.set_result(text if text is not None else default_text(self.prompt))

    def fail(self, exc: BaseException) -> None:
        if not self._outcome.done():
            self._outcome.set_exception(exc)


def default_text(prompt: Prompt) -> str:
    return "reply to: " + " | ".join(m.text for m in prompt.burst)


class ScriptedReplier:
    """`hold=False`: answers at once. `hold=True`: each call waits for the test to finish it."""

    def __init__(self, hold: bool = False) -> None:
        self.hold = hold
        self.calls: list[ReplierCall] = []
        self.failures: list[BaseException] = []
        self._new_call = asyncio.Condition()

    async def generate(self, prompt: Prompt, usage: Usage) -> str:
        call = ReplierCall(prompt, usage)
        self.calls.append(call)
        call.started.set()
        async with self._new_call:
            self._new_call.notify_all()
        if self.failures:
            raise self.failures.pop(0)
        if not self.hold:
            usage.input_tokens += len(prompt.burst_text())
            usage.output_tokens += 5
            return default_text(prompt)
        try:
            return await asyncio.shield(call._outcome)
        except asyncio.CancelledError:
            call.cancelled = True
            raise

    async def next_call(self, index: int, within: float = 5.0) -> ReplierCall:
        """Wait (bounded, on the real loop) until call number `index` has started."""

        async def arrived() -> None:
            async with self._new_call:
                await self._new_call.wait_for(lambda: len(self.calls) > index)

        await asyncio.wait_for(arrived(), within)
        return self.calls[index]


@dataclass(frozen=True)
class Post:
    """One raw post as the platform received it: one part of one reply."""

    reply_id: str
    key: ConversationKey
    text: str
    covers_to_version: int
    part: int = 0

    @property
    def message_id(self) -> str:
        return f"{self.reply_id}-p{self.part}"


@dataclass(frozen=True)
class Fault:
    """A platform call that fails: before it takes effect, or after (`landed`: the response was
    lost). A post fault names the part whose post fails: a later part fails between parts."""

    error: BurstbotError
    landed: bool = False
    part: int = 0


@dataclass(frozen=True)
class Edit:
    """One edit of a message (a draft growing, or finished by its reply), at `at` on the clock."""

    message_id: str
    text: str
    at: float


class RecordingFrontend(Drafting):
    """A front end over a platform that records every raw post and dedupes nothing by itself.

    It behaves like the real adapters over a platform like Slack, and never helps: a first attempt
    posts straight away; a later attempt (`reply.attempt > 1`) first reads back the parts of that
    reply the platform already shows and posts only the others. A part still in flight is not
    shown yet, so two deliveries of one reply at once both post it, as they would on Slack.

    `parts` splits each reply into that many posts; `post_seconds` makes every post take that long
    on `clock` (a slow platform); `failures` are raised by the next calls, in order (a
    `RetryableDeliveryError` with `retry_after` is a 429 with Retry-After), before they post
    anything. `post_faults` fail the next raw posts (of the part each names, so a later part fails
    between parts), `final_edit_faults` the next edits that finish a draft; a `Fault` that
    `landed` takes effect on the platform first, and the call raises all the same (the response
    was lost). `person_deletes` is someone deleting one of the bot's messages.
    """

    def __init__(
        self,
        platform: str = "test",
        *,
        parts: int = 1,
        post_seconds: float = 0.0,
        clock: Clock | None = None,
        drafts: bool = False,
    ) -> None:
        self.platform = platform
        self.drafts = self if drafts else None
        self.edits: list[Edit] = []
        self.edit_failures: list[BurstbotError] = []
        self.shown: dict[str, str] = {}  # message id -> its text now, once edited
        self.deleted: set[str] = set()
        self.parts = parts
        self.post_seconds = post_seconds
        self.clock = clock
        self.posts: list[Post] = []
        self.attempts: list[str] = []
        self.busy: dict[ConversationKey, bool] = {}
        self.failures: list[BurstbotError] = []
        self.post_faults: list[Fault] = []
        self.final_edit_faults: list[Fault] = []
        self.deleted_by_people: set[str] = set()
        self.host: Host | None = None

    async def start(self, host: Host) -> None:
        self.host = host

    async def stop(self) -> None:
        self.host = None

    async def deliver(self, reply: Reply) -> list[str]:
        self.attempts.append(reply.id)
        if self.failures:
            raise self.failures.pop(0)
        shown = (
            {p.part for p in self.posts if p.reply_id == reply.id} if reply.attempt > 1 else set()
        )
        ids = []
        for part, text in enumerate(split_evenly(reply.text, self.parts)):
            if part == 0 and reply.draft is not None and part not in shown:
                reply.fence.check()
                ids.append(await self._finish_draft(reply, reply.draft, text))
                await reply.fence.posted(part, ids[-1])
                continue
            if part not in shown:
                reply.fence.check()
                if self.post_seconds and self.clock is not None:
                    await self.clock.sleep(self.post_seconds)
                self._post(Post(reply.id, reply.key, text, reply.covers_to_version, part))
                await reply.fence.posted(part, f"{reply.id}-p{part}")
            ids.append(f"{reply.id}-p{part}")
        return ids

    def _post(self, post: Post) -> str:
        """One raw post, unless the next post fault (for this part) fails it."""
        fault = self.post_faults[0] if self.post_faults else None
        if fault is None or fault.part != post.part:
            self.posts.append(post)
            return post.message_id
        self.post_faults.pop(0)
        if fault.landed:
            self.posts.append(post)
        raise fault.error

    async def _finish_draft(self, reply: Reply, draft: Draft, text: str) -> str:
        """The draft's message (posted first if the outbox found it never landed), edited to the
        reply's first part; a deleted draft is replaced by a fresh post of the part."""
        message_id = draft.message_id or await self.post_draft(reply.key, draft, text)
        try:
            if self.final_edit_faults:
                fault = self.final_edit_faults.pop(0)
                if fault.landed:
                    await self.edit_draft(reply.key, message_id, text)
                raise fault.error
            await self.edit_draft(reply.key, message_id, text)
        except MessageGone:
            return self._post(Post(reply.id, reply.key, text, reply.covers_to_version, 0))
        return message_id

    nonce_window = 0.0  # like Slack: a repeated post is a second message

    async def post_draft(self, key: ConversationKey, draft: Draft, text: str) -> str:
        return self._post(Post(draft.key, key, text, 0))

    async def find_draft(self, key: ConversationKey, draft: Draft) -> str | None:
        found = [p.message_id for p in self.posts if p.reply_id == draft.key]
        return next((m for m in found if m not in self.deleted), None)

    async def edit_draft(self, key: ConversationKey, message_id: str, text: str) -> None:
        if self.edit_failures:
            raise self.edit_failures.pop(0)
        if message_id in self.deleted:
            raise MessageGone(f"message {message_id}: deleted")
        self.edits.append(Edit(message_id, text, self.clock.now() if self.clock else 0.0))
        self.shown[message_id] = text

    async def delete_draft(self, key: ConversationKey, message_id: str) -> None:
        self.deleted.add(message_id)

    def person_deletes(self, message_id: str) -> None:
        """Someone deletes one of the bot's messages (a draft, or a part of a reply)."""
        self.deleted.add(message_id)
        self.deleted_by_people.add(message_id)

    def visible(self, key: ConversationKey | None = None) -> list[str]:
        """What the conversation shows now: each message (post or draft) with its latest text."""
        return [
            self.shown.get(p.message_id, p.text)
            for p in self.posts
            if (key is None or p.key == key) and p.message_id not in self.deleted
        ]

    async def show_busy(self, key: ConversationKey, busy: bool, message_id: str) -> None:
        self.busy[key] = busy

    def texts(self, key: ConversationKey | None = None) -> list[str]:
        return [p.text for p in self.posts if key is None or p.key == key]

    def replies(self) -> dict[str, list[int]]:
        """Raw posts grouped by reply id: the parts each reply was posted as, in posting order."""
        grouped: dict[str, list[int]] = {}
        for post in self.posts:
            grouped.setdefault(post.reply_id, []).append(post.part)
        return grouped


def split_evenly(text: str, parts: int) -> list[str]:
    if parts <= 1:
        return [text]
    size = -(-len(text) // parts) or 1
    return [text[i * size : (i + 1) * size] for i in range(parts)]


EPSILON = 1e-6  # fake clocks land exactly on deadlines


class InvariantViolation(AssertionError):
    pass


async def check_invariants(
    store: Store,
    conversation_ids: Sequence[str],
    *,
    quiescent: bool = True,
    max_wait_seconds: float | None = None,
    frontend: RecordingFrontend | None = None,
) -> dict[str, int]:
    """Check G1, G2, G3 and G9 from the store's outbox and state, and what `frontend` received.

    G1: the replies of a conversation cover disjoint version ranges, none past `answered_version`.
    G2 (when `quiescent`): every version is answered and every reply is sent (or failed, logged).
    G3 (given `max_wait_seconds`): an answer committed past newer input (`seen_version >
    covers_to_version`) was committed at or after its burst's deadline, `max_wait_seconds` after
    the burst began: its first message, or the previous reply's commit if later (a commit
    restarts the cap). A burst whose first version is no visible message (deleted, or an edit)
    is not judged: its first arrival is unknown.
    G9: a reply is sent only once every earlier reply of its conversation is settled (sent or
    failed), and the sent ones were sent in commit order.
    Raw posts (given `frontend`): each part of a reply posted at most once and in order (again
    only after a person deleted it: a draft deleted mid-stream is replaced), a conversation's
    replies posted one after another in commit order, and (when `quiescent`) every sent reply
    showing all its parts, and G10: every message still visible is a part of a sent reply showing
    that part's text (no stray draft, no draft left with a partial text), and no part visible twice.

    Raises `InvariantViolation` naming each breach; returns counts for a summary line.
    """
    counts = dict.fromkeys(
        ("conversations", "replies", "duplicates", "unanswered", "failed", "stale"), 0
    ) | dict.fromkeys(("out_of_order", "duplicate_posts", "missing_parts", "stray_drafts"), 0)
    problems: list[str] = []

    def breach(name: str, what: str) -> None:
        counts[name] += 1
        problems.append(what)

    rows_by_reply_id: dict[str, OutboxRow] = {}
    for cid in conversation_ids:
        state = await store.conversation_state(cid)
        if state is None:
            continue
        counts["conversations"] += 1
        replies = sorted(await store.replies(cid), key=lambda r: r.id)
        messages = {m.seq: m for m in await store.pending_messages(cid, 0, state.version)}
        covered_to, previous_commit, previous_sent_at = 0, None, None
        settled_so_far = True
        for reply in replies:
            rows_by_reply_id[f"r{reply.id}"] = reply
            counts["replies"] += 1
            covers = reply.kind != "notice"  # an arrival refusal's notice covers no message
            if covers and reply.covers_from_version < covered_to:
                breach("duplicates", f"G1: r{reply.id} covers versions covered before ({cid})")
            if covers and reply.covers_to_version > state.answered_version:
                breach("duplicates", f"G1: r{reply.id} covers past answered_version ({cid})")
            covered_to = max(covered_to, reply.covers_to_version)
            if reply.state == "failed":
                counts["failed"] += 1
            elif quiescent and reply.state != "sent":
                breach("unanswered", f"G2: r{reply.id} is still {reply.state} ({cid})")
            if reply.state == "sent":
                if not settled_so_far:
                    breach("out_of_order", f"G9: r{reply.id} sent before an earlier reply ({cid})")
                sent_at = reply.sent_at or 0.0
                if previous_sent_at is not None and sent_at < previous_sent_at:
                    breach("out_of_order", f"G9: r{reply.id} sent before its predecessor ({cid})")
                previous_sent_at = sent_at
            settled_so_far = settled_so_far and reply.state in ("sent", "failed")
            first = messages.get(reply.covers_from_version + 1)
            if (
                max_wait_seconds is not None
                and reply.kind == "answer"
                and reply.seen_version > reply.covers_to_version
                and first is not None
            ):
                began = max(first.created_at, previous_commit or first.created_at)
                early = began + max_wait_seconds - reply.created_at
                if early > EPSILON:
                    breach(
                        "stale",
                        f"G3: r{reply.id} committed past newer input (v{reply.seen_version} > "
                        f"v{reply.covers_to_version}) {early:.3f}s before its deadline ({cid})",
                    )
            previous_commit = reply.created_at
        if quiescent and state.answered_version < state.version:
            breach(
                "unanswered", f"G2: {cid} answered to v{state.answered_version} of v{state.version}"
            )
    if frontend is not None:
        check_posts(frontend, rows_by_reply_id, set(conversation_ids), quiescent, breach)
    if problems:
        raise InvariantViolation("invariants violated: " + "; ".join(problems))
    return counts


def check_posts(
    frontend: RecordingFrontend,
    rows: Mapping[str, OutboxRow],
    conversation_ids: set[str],
    quiescent: bool,
    breach: Callable[[str, str], None],
) -> None:
    """The raw posts against the outbox rows: once per part, parts in order, replies in order;
    when quiescent, what is still visible (`check_visible`)."""
    parts: dict[str, list[int]] = {}
    last_reply: dict[str, str] = {}  # conversation -> reply whose parts were posted last
    done: set[str] = set()  # replies a later reply of their conversation was posted after
    finished = {row.draft_key: reply_id for reply_id, row in rows.items() if row.draft_key}
    messages: dict[tuple[str, int], list[str]] = {}  # (reply, part) -> its messages, in order
    for raw in frontend.posts:
        cid = raw.key.id
        if cid not in conversation_ids:
            continue
        post = replace(raw, reply_id=finished.get(raw.reply_id, raw.reply_id))  # a draft: part 0
        if post.reply_id not in rows and raw.message_id in frontend.deleted:
            continue  # a draft no reply finished, gone (no reply, or a person deleted it)
        seen = parts.setdefault(post.reply_id, [])
        earlier = messages.setdefault((post.reply_id, post.part), [])
        earlier.append(raw.message_id)
        replaced = any(m in frontend.deleted_by_people for m in earlier[:-1])
        if post.part in seen and replaced:
            continue  # a replacement for a message a person deleted: not a second copy
        if post.part in seen:
            breach("duplicate_posts", f"part {post.part} of {post.reply_id} posted again ({cid})")
        elif post.part != max(seen, default=-1) + 1:
            breach("out_of_order", f"part {post.part} of {post.reply_id} posted after {seen}")
        seen.append(post.part)
        previous = last_reply.get(cid)
        if previous is not None and previous != post.reply_id:
            if post.reply_id in done or reply_number(post.reply_id) < reply_number(previous):
                breach("out_of_order", f"G9: {post.reply_id} posted after {previous} ({cid})")
            done.add(previous)
        last_reply[cid] = post.reply_id
    for reply_id, row in rows.items():
        if (
            quiescent
            and row.state == "sent"
            and sorted(set(parts.get(reply_id, []))) != list(range(frontend.parts))
        ):
            breach("missing_parts", f"{reply_id} is sent but shows parts {parts.get(reply_id)}")
    if quiescent:
        check_visible(frontend, rows, finished, conversation_ids, messages, breach)


def check_visible(
    frontend: RecordingFrontend,
    rows: Mapping[str, OutboxRow],
    finished: Mapping[str, str],
    conversation_ids: set[str],
    messages: Mapping[tuple[str, int], list[str]],
    breach: Callable[[str, str], None],
) -> None:
    """G10 once all is settled: each message the conversation still shows is one part of a sent
    reply, with that part's text; each part shows once (none, if a person deleted it)."""
    showing: dict[tuple[str, int], int] = {}
    for raw in frontend.posts:
        if raw.key.id not in conversation_ids or raw.message_id in frontend.deleted:
            continue
        reply_id = finished.get(raw.reply_id, raw.reply_id)
        row = rows.get(reply_id)
        text = frontend.shown.get(raw.message_id, raw.text)
        if row is None or row.state != "sent":
            state = "no reply" if row is None else row.state
            breach("stray_drafts", f"{raw.message_id} shows {text!r} ({state}, {raw.key.id})")
            continue
        expected = split_evenly(row.text, frontend.parts)[raw.part]
        if text != expected:
            breach("stray_drafts", f"{raw.message_id} shows {text!r}, not {reply_id}'s text")
        showing[(reply_id, raw.part)] = showing.get((reply_id, raw.part), 0) + 1
    for (reply_id, part), count in showing.items():
        if count > 1:
            breach("duplicate_posts", f"part {part} of {reply_id} is visible {count} times")
    for reply_id, row in rows.items():
        for part in range(frontend.parts) if row.state == "sent" else ():
            deleted = any(
                m in frontend.deleted_by_people for m in messages.get((reply_id, part), [])
            )
            if not showing.get((reply_id, part)) and not deleted:
                breach("missing_parts", f"part {part} of sent {reply_id} is not visible")


def reply_number(reply_id: str) -> int:
    """The outbox row of a reply id; a draft no reply finished yet is the newest message."""
    number = reply_id.removeprefix("r")
    return int(number) if number.isdigit() else sys.maxsize


def delivery_error(message: str = "platform unavailable") -> DeliveryError:
    from bot.core.errors import RetryableDeliveryError

    return RetryableDeliveryError(message)
