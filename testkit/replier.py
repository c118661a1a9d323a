"""Fake repliers: the model side of a test or a benchmark, without a network.

- `ScriptedReplier`: a replier whose calls a test can hold open, finish, fail or stream into.
- `StreamingModel`: a replier that streams output tokens on the real clock, one every
  `token_latency` seconds, counting them in `GenerationProgress` as it goes and stopping at once
  when cancelled. Its reply names the generation and the messages it answered
  (`[g7] covers a b c`), so what a platform received can be checked for duplicates and wasted
  tokens the same way for every system a benchmark drives, whatever its internals.
"""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass, field

from bot.core.replier import GenerationProgress, Prompt


@dataclass(eq=False)
class ReplierCall:
    prompt: Prompt
    usage: GenerationProgress
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

    async def generate(self, prompt: Prompt, usage: GenerationProgress) -> str:
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

    async def generate(self, prompt: Prompt, usage: GenerationProgress) -> str:
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
