"""A fake streaming model and a recording platform shared by every system under test.

The model streams `tokens` output tokens, one every `token_latency` seconds, counting them in
`Usage` as it goes and stopping at once when cancelled. Its reply names the generation and the
messages it answered (`[g7] covers a b c`), so what the platform received can be checked for
duplicates and wasted tokens the same way for every system, whatever its internals.
"""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass, field

from bot.core.events import ConversationKey, Reply
from bot.core.frontend import Host
from bot.core.replier import Prompt, Usage

PLATFORM = "bench"


@dataclass
class ModelCall:
    id: int
    started_at: float
    covers: tuple[str, ...]
    output_tokens: int = 0
    cancelled: bool = False
    finished: bool = False


class StreamingModel:
    """A `Replier`. Message texts start with their message id, which the reply quotes back."""

    def __init__(self, tokens: int, token_latency: float) -> None:
        self.tokens = tokens
        self.token_latency = token_latency
        self.calls: list[ModelCall] = []

    @property
    def active(self) -> int:
        return sum(1 for c in self.calls if not (c.finished or c.cancelled))

    async def generate(self, prompt: Prompt, usage: Usage) -> str:
        call = ModelCall(
            len(self.calls) + 1, time.time(), tuple(m.text.split()[0] for m in prompt.burst)
        )
        self.calls.append(call)
        usage.input_tokens += len(prompt.burst_text().split())
        try:
            for _ in range(self.tokens):
                if self.token_latency > 0:
                    await asyncio.sleep(self.token_latency)
                usage.output_tokens += 1
                call.output_tokens += 1
        except asyncio.CancelledError:
            call.cancelled = True
            raise
        call.finished = True
        return f"[g{call.id}] covers {' '.join(call.covers)}"


@dataclass(frozen=True)
class Post:
    conversation_id: str
    generation: int
    covers: tuple[str, ...]


@dataclass
class RecordingPlatform:
    """A `Frontend` that keeps every post; a reply id is posted once (like an idempotency key)."""

    platform: str = PLATFORM
    posts: list[Post] = field(default_factory=list)
    _reply_ids: set[str] = field(default_factory=set)

    async def start(self, host: Host) -> None:
        return None

    async def stop(self) -> None:
        return None

    async def deliver(self, reply: Reply) -> list[str]:
        if reply.id not in self._reply_ids:
            self._reply_ids.add(reply.id)
            self.post(reply.key.id, reply.text)
        return [f"{reply.id}-p0"]

    async def show_busy(self, key: ConversationKey, busy: bool, message_id: str) -> None:
        return None

    def post(self, conversation_id: str, text: str) -> None:
        tag, _, ids = text.split(" ", 2)
        self.posts.append(Post(conversation_id, int(tag.strip("[g]")), tuple(ids.split())))


@dataclass(frozen=True)
class Tally:
    """What a run cost and what the people saw."""

    messages: int
    model_calls: int
    replies: int
    duplicate_replies: int  # replies covering a message an earlier reply already covered
    unanswered: int  # messages no reply covered
    output_tokens: int
    wasted_tokens: int  # output tokens of generations whose text was never posted


def tally(sent: list[str], model: StreamingModel, platform: RecordingPlatform) -> Tally:
    covered: set[str] = set()
    duplicates = 0
    for post in platform.posts:
        if covered.intersection(post.covers):
            duplicates += 1
        covered.update(post.covers)
    posted = {p.generation for p in platform.posts}
    return Tally(
        messages=len(sent),
        model_calls=len(model.calls),
        replies=len(platform.posts),
        duplicate_replies=duplicates,
        unanswered=sum(1 for m in sent if m not in covered),
        output_tokens=sum(c.output_tokens for c in model.calls),
        wasted_tokens=sum(c.output_tokens for c in model.calls if c.id not in posted),
    )
