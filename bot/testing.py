"""Public fakes for tests of burstbot and of code built on it.

- `ScriptedReplier`: a replier whose calls a test can hold open, finish, fail or stream into.
- `RecordingFrontend`: a front end that records every raw post (one per part) and dedupes only the
  way a platform lets an adapter: by reading back what is already shown.
- `check_invariants`: G1–G4 over a store's final state and what the front end received.
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from dataclasses import dataclass, field

from bot.core.clock import Clock
from bot.core.errors import BurstbotError, DeliveryError
from bot.core.events import ConversationKey, Reply
from bot.core.frontend import Host
from bot.core.store import Store
from bot.model.replier import Prompt, Usage


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

    def stream(self, tokens: int) -> None:
        """Pretend the model produced `tokens` more output tokens."""
        self.usage.output_tokens += tokens

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


class RecordingFrontend:
    """A front end over a platform that records every raw post and dedupes nothing by itself.

    It behaves like the real adapters over a platform like Slack, and never helps: a first attempt
    posts straight away; a later attempt (`reply.attempt > 1`) first reads back the parts of that
    reply the platform already shows and posts only the others. A part still in flight is not
    shown yet, so two deliveries of one reply at once both post it, as they would on Slack.

    `parts` splits each reply into that many posts; `post_seconds` makes every post take that long
    on `clock` (a slow platform); `failures` are raised by the next calls, in order (a
    `RetryableDeliveryError` with `retry_after` is a 429 with Retry-After).
    """

    def __init__(
        self,
        platform: str = "test",
        *,
        parts: int = 1,
        post_seconds: float = 0.0,
        clock: Clock | None = None,
    ) -> None:
        self.platform = platform
        self.parts = parts
        self.post_seconds = post_seconds
        self.clock = clock
        self.posts: list[Post] = []
        self.attempts: list[str] = []
        self.busy: dict[ConversationKey, bool] = {}
        self.failures: list[BurstbotError] = []
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
            if part not in shown:
                reply.fence.check()
                if self.post_seconds and self.clock is not None:
                    await self.clock.sleep(self.post_seconds)
                self.posts.append(Post(reply.id, reply.key, text, reply.covers_to_version, part))
            ids.append(f"{reply.id}-p{part}")
        return ids

    async def show_busy(self, key: ConversationKey, busy: bool) -> None:
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


class InvariantViolation(AssertionError):
    pass


async def check_invariants(
    store: Store,
    conversation_ids: Sequence[str],
    *,
    quiescent: bool = True,
) -> dict[str, int]:
    """Check G1–G2 (and the bookkeeping behind G3) from the store's outbox and state.

    G1: committed replies of a conversation cover disjoint, contiguous version ranges.
    G2 (when `quiescent`): every version is answered and every reply is sent (or failed, logged).
    Returns counts for a summary line.
    """
    counts = {"conversations": 0, "replies": 0, "duplicates": 0, "unanswered": 0, "failed": 0}
    for cid in conversation_ids:
        state = await store.conversation_state(cid)
        if state is None:
            continue
        counts["conversations"] += 1
        replies = sorted(await store.replies(cid), key=lambda r: r.covers_to_version)
        covered_to = 0
        for reply in replies:
            counts["replies"] += 1
            if reply.covers_from_version < covered_to:
                counts["duplicates"] += 1
            covered_to = max(covered_to, reply.covers_to_version)
            if reply.state == "failed":
                counts["failed"] += 1
            elif quiescent and reply.state != "sent":
                counts["unanswered"] += 1
        if replies and replies[-1].covers_to_version > state.answered_version:
            counts["duplicates"] += 1
        if quiescent and state.answered_version < state.version:
            counts["unanswered"] += 1
    if counts["duplicates"] or counts["unanswered"]:
        raise InvariantViolation(f"invariants violated: {counts}")
    return counts


def delivery_error(message: str = "platform unavailable") -> DeliveryError:
    from bot.core.errors import RetryableDeliveryError

    return RetryableDeliveryError(message)
