"""Public fakes for tests of burstbot and of code built on it.

- `ScriptedReplier`: a replier whose calls a test can hold open, finish, fail or stream into.
- `RecordingFrontend`: a front end that records every post and dedupes by reply id like a platform
  with idempotency keys would.
- `check_invariants`: G1–G4 over a store's final state and what the front end received.
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from dataclasses import dataclass, field

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
    reply_id: str
    key: ConversationKey
    text: str
    covers_to_version: int


class RecordingFrontend:
    """Records posts; a reply id already posted is not posted again (like a Discord nonce)."""

    def __init__(self, platform: str = "test") -> None:
        self.platform = platform
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
        if not any(p.reply_id == reply.id for p in self.posts):
            self.posts.append(Post(reply.id, reply.key, reply.text, reply.covers_to_version))
        return [f"{reply.id}-p0"]

    async def show_busy(self, key: ConversationKey, busy: bool) -> None:
        self.busy[key] = busy

    def texts(self, key: ConversationKey | None = None) -> list[str]:
        return [p.text for p in self.posts if key is None or p.key == key]


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
