"""The replier contract.

A replier turns one `Prompt` into reply text. It streams internally and must stop at once when its
task is cancelled (the engine cancels superseded generations), and it keeps `usage` current while it
streams, so tokens spent on a cancelled stream are still counted as wasted.
Failures are raised as `RetryableReplierError` or `PermanentReplierError` (`bot/core/errors.py`).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Literal, Protocol

from bot.core.attachments import LoadedFile
from bot.core.progress import DraftText as DraftText  # the contract's streaming side, re-exported
from bot.core.progress import GenerationProgress as GenerationProgress
from bot.core.progress import SearchStep as SearchStep
from bot.core.progress import escape_markdown as escape_markdown
from bot.core.progress import same_draft as same_draft
from bot.core.settings import NO_TOOLS, WebTools
from bot.core.store import WebSearch as WebSearch  # reported as the store keeps them

if TYPE_CHECKING:
    from bot.core.tool_calls import BurstTools


@dataclass(frozen=True, slots=True)
class BurstMessage:
    """One message of the burst, with the files it came with (content, or a note each)."""

    author_name: str
    text: str
    files: tuple[LoadedFile, ...] = ()

    def heading(self) -> str:
        """`author: text`; a message of files only shows their names as its text."""
        text = self.text
        if not text.strip() and self.files:
            text = "[" + ", ".join(f.attachment.name for f in self.files) + "]"
        return f"{self.author_name}: {text}"

    def line(self) -> str:
        """The heading, then a note line for each file the model does not get."""
        notes = [f.note_line() for f in self.files if f.content is None]
        return "\n".join([self.heading(), *notes])


@dataclass(frozen=True, slots=True)
class Turn:
    role: Literal["user", "assistant"]
    text: str
    files: tuple[LoadedFile, ...] = ()


@dataclass(frozen=True, slots=True)
class Prompt:
    system: str
    history: tuple[Turn, ...]
    burst: tuple[BurstMessage, ...]
    model: str | None = None
    max_tokens: int | None = None
    tools: WebTools = NO_TOOLS
    calls: BurstTools | None = None  # the conversation's MCP tools, each call a durable action

    def burst_text(self) -> str:
        """The final user turn: every message of the burst, each labelled with its author."""
        return "\n".join(m.line() for m in self.burst)


class Replier(Protocol):
    async def generate(self, prompt: Prompt, usage: GenerationProgress) -> str: ...


class Closable(Protocol):
    """A replier holding connections (an HTTP client) to close at shutdown: an ability it
    declares among its bases, checked once at wiring as front ends' are."""

    async def aclose(self) -> None: ...
