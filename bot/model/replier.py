"""The replier contract.

A replier turns one `Prompt` into reply text. It streams internally and must stop at once when its
task is cancelled (the engine cancels superseded generations), and it keeps `usage` current while it
streams, so tokens spent on a cancelled stream are still counted as wasted.
Failures are raised as `RetryableReplierError` or `PermanentReplierError` (`bot/core/errors.py`).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal, Protocol


@dataclass(frozen=True, slots=True)
class BurstMessage:
    author_name: str
    text: str


@dataclass(frozen=True, slots=True)
class Turn:
    role: Literal["user", "assistant"]
    text: str


@dataclass(frozen=True, slots=True)
class Prompt:
    system: str
    history: tuple[Turn, ...]
    burst: tuple[BurstMessage, ...]

    def burst_text(self) -> str:
        """The final user turn: every message of the burst, each labelled with its author."""
        return "\n".join(f"{m.author_name}: {m.text}" for m in self.burst)


@dataclass(slots=True)
class Usage:
    """Token counts and the text so far, updated by the replier as the stream goes (the text is
    what a streamed draft shows; a replier that does not add to it is simply not streamed)."""

    input_tokens: int = 0
    output_tokens: int = 0
    cache_read_tokens: int = 0
    cache_write_tokens: int = 0
    streamed: list[str] = field(default_factory=list)

    def text_so_far(self) -> str:
        return "".join(self.streamed)


class Replier(Protocol):
    async def generate(self, prompt: Prompt, usage: Usage) -> str: ...
