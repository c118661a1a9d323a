"""What a generation shows while it streams: the text so far, its token counts and the searches
it made, kept current by the replier and read by the burst, the tool calls and the drafts (a leaf
module: the replier contract and its users both import it)."""

from __future__ import annotations

import asyncio
import re
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Literal

from bot.core.store import WebSearch

_MARKDOWN_PUNCTUATION = re.compile(r"([\\`*_{}\[\]<>()#+!|~])")


def escape_markdown(text: str) -> str:
    """Text shown as is inside Markdown (a source's title, a search query, a tool's name): one
    line, every character that could start formatting or a link escaped."""
    return _MARKDOWN_PUNCTUATION.sub(r"\\\1", " ".join(text.split()))


class StreamedText(list[str]):
    """The text a replier streamed so far, in pieces (repliers `append` each); `arrived` is set
    by each new piece, so a draft goes out at the first word instead of at the next pacing tick."""

    def __init__(self) -> None:
        super().__init__()
        self.arrived = asyncio.Event()

    def append(self, piece: str) -> None:
        super().append(piece)
        if piece.strip():
            self.arrived.set()


@dataclass(frozen=True, slots=True)
class SearchStep:
    """One step of the model's work as a draft shows it (a web search, an MCP tool call, an
    approval it waited for): a surface that renders the work itself (Slack's task chunks) shows
    each step; the others show the activity line."""

    id: str  # the call's tool use id (an approval's: `approval:` and it): the same step throughout
    query: str = ""  # a search's query; a tool call's or an approval's tool name
    state: Literal["running", "done", "failed"] = "running"
    sources: tuple[tuple[str, str], ...] = ()  # (url, title) of its first results
    error: str = ""  # the error code of a failed search; why a call or an approval failed
    kind: Literal["search", "tool", "approval"] = "search"


class DraftText(str):
    """The text so far as a draft shows it (the text, then the activity line), which also carries
    its parts for a surface that renders the work itself: `body` is the text alone and `steps`
    the steps so far. Two draft texts are the same only with the same steps."""

    body: str
    steps: tuple[SearchStep, ...]

    def __new__(cls, shown: str, body: str, steps: tuple[SearchStep, ...] = ()) -> DraftText:
        text = super().__new__(cls, shown)
        text.body, text.steps = body, steps
        return text


def same_draft(a: str, b: str) -> bool:
    """Whether showing `a` again after `b` would change nothing (text and steps alike)."""
    return a == b and getattr(a, "steps", ()) == getattr(b, "steps", ())


@dataclass(slots=True)
class GenerationProgress:
    """Token counts and the text so far, updated by the replier as the stream goes (the text is
    what a streamed draft shows; a replier that does not add to it is simply not streamed).
    `activity` is one line the draft shows after the text while the model works without
    writing (a web search, a tool call), gone once the text goes on; `steps` are the searches,
    tool calls and approvals so far, kept for surfaces that show each one (`DraftText`)."""

    input_tokens: int = 0
    output_tokens: int = 0
    cache_read_tokens: int = 0
    cache_write_tokens: int = 0
    model: str = ""  # the model that answered, as the replier knows it (usage reports)
    streamed: StreamedText = field(default_factory=StreamedText)
    web_searches: int = 0  # billed searches, as the API reports them (`server_tool_use`)
    tool_calls: int = 0  # MCP tool calls asked for (made, or given from the burst's record)
    searches: list[WebSearch] = field(default_factory=list)
    activity: str = ""
    steps: list[SearchStep] = field(default_factory=list)
    announce: Callable[..., None] = field(default=lambda name, /, **fields: None, repr=False)
    """Names each model request as it starts and ends (`model_request`, `model_response`): the
    engine binds it to its events, which traces (bot/ops/traces.py) turn into spans."""

    def show_activity(self, line: str) -> None:
        """Set the activity line; a new one is something to show at once, like a first word."""
        self.activity = line
        if line:
            self.streamed.arrived.set()

    def step(self, step: SearchStep, before: str = "") -> None:
        """Add a step (last, or just before the step with id `before`), or replace the one with
        its id (its query known, its result in)."""
        at = next((i for i, s in enumerate(self.steps) if s.id == step.id), None)
        if at is not None:
            self.steps[at] = step
            return
        ahead = next((i for i, s in enumerate(self.steps) if s.id == before), None)
        if ahead is None:
            self.steps.append(step)
        else:
            self.steps.insert(ahead, step)

    def text_so_far(self) -> DraftText:
        text = "".join(self.streamed)
        shown = text
        if self.activity:
            shown = f"{text.rstrip()}\n\n{self.activity}" if text.strip() else self.activity
        return DraftText(shown, text, tuple(self.steps))
