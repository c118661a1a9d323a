"""Claude's server tools (web search, web fetch): the tool list a request carries, what a streamed
response says about each search, and the sources its citations name (docs/web-search.md).

- The tools run on Anthropic's side inside one Messages call; a search's results arrive as a
  `web_search_tool_result` block (a list of results, or an error object: errors come with HTTP 200
  and never break the reply), and text built on them carries `citations_delta` events.
- The tool list is sorted by name and built the same way every time, so a conversation's requests
  keep one cacheable prefix (tools come first in the prompt cache's order).
- Only the final text and a short list of its sources are kept: the result blocks (billed as input
  tokens) are never replayed into a later burst's prompt.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from typing import Any

from anthropic.types import (
    RawContentBlockDeltaEvent,
    RawContentBlockStartEvent,
    ToolUnionParam,
    WebFetchTool20250910Param,
    WebSearchTool20250305Param,
)

from bot.core.replier import GenerationProgress, SearchStep, WebSearch, escape_markdown
from bot.core.settings import WebTools
from bot.core.store import UNFINISHED

MAX_SOURCES = 5
_URL = re.compile(r"https?://[^\s<>]+", re.IGNORECASE)


def tool_params(tools: WebTools, searches_left: int) -> list[ToolUnionParam]:
    """The request's server tools, sorted by name; `searches_left` is the burst's remaining
    search budget (a continuation is a new request: its `max_uses` counts afresh)."""
    params: list[ToolUnionParam] = []
    if tools.web_fetch:
        fetch: WebFetchTool20250910Param = {"type": "web_fetch_20250910", "name": "web_fetch"}
        params.append(fetch)
    if tools.web_search:
        search: WebSearchTool20250305Param = {
            "type": "web_search_20250305",
            "name": "web_search",
            "max_uses": max(1, searches_left),
        }
        if tools.allowed_domains:
            search["allowed_domains"] = sorted(tools.allowed_domains)
        if tools.blocked_domains:
            search["blocked_domains"] = sorted(tools.blocked_domains)
        params.append(search)
    return params


def searching_line(query: str) -> str:
    """What a draft shows while a search runs."""
    shown = escape_markdown(query[:120]) if query else ""
    return f"_searching the web: {shown}…_" if shown else "_searching the web…_"


@dataclass(frozen=True, slots=True)
class Source:
    url: str
    title: str


@dataclass
class ToolTrace:
    """One response's content rebuilt from its stream events (sent back as-is after a
    `pause_turn`), the searches it ran and the web sources its text cites."""

    usage: GenerationProgress
    sources: list[Source] = field(default_factory=list)
    blocks: dict[int, dict[str, Any]] = field(default_factory=dict)
    _json: dict[int, str] = field(default_factory=dict)
    _pending: dict[str, int] = field(default_factory=dict)  # tool_use id → its `searches` entry
    billed_before: int = 0  # searches billed by the earlier calls of this reply
    ran: int = 0  # this call's result blocks without an error (each one a billed search)
    worked: bool = False  # a tool block came since the last text: the next text starts a paragraph

    def new_response(self) -> None:
        self.blocks, self._json = {}, {}
        self.billed_before, self.ran = self.usage.web_searches, 0

    def billed(self, web_search_requests: int) -> None:
        """The call's own count (`usage.server_tool_use`): what it is billed for."""
        searches = self.billed_before + max(web_search_requests, self.ran)
        self.usage.web_searches = max(self.usage.web_searches, searches)

    def content(self) -> list[dict[str, Any]]:
        """The response's blocks as request params, in order (empty text blocks left out: the API
        refuses them)."""
        ordered = [self.blocks[i] for i in sorted(self.blocks)]
        return [b for b in ordered if b.get("type") != "text" or b.get("text")]

    def started(self, event: RawContentBlockStartEvent) -> None:
        block = event.content_block
        self.blocks[event.index] = block.model_dump(mode="json", exclude_none=True)
        worked = ("server_tool_use", "web_search_tool_result", "tool_use")
        self.worked = self.worked or block.type in worked
        if block.type == "tool_use":  # a client tool (MCP): its input streams as JSON
            self._json[event.index] = ""
        elif block.type == "server_tool_use":
            self._json[event.index] = ""
            if block.name == "web_search":  # recorded at once: what the draft shows is kept
                self._pending[block.id] = len(self.usage.searches)
                self.usage.searches.append(WebSearch("", 0, UNFINISHED))
                self.usage.step(SearchStep(block.id))
                self.usage.show_activity(searching_line(""))
            elif block.name == "web_fetch":
                self.usage.show_activity("_reading a page…_")
        elif block.type == "web_search_tool_result":
            at = self._pending.pop(block.tool_use_id, None)
            if at is None:
                at = len(self.usage.searches)
                self.usage.searches.append(WebSearch(""))
            query = self.usage.searches[at].query
            if isinstance(block.content, list):
                self.ran += 1
                self.usage.searches[at] = WebSearch(query, len(block.content))
                found = [(r.url, r.title.strip() or r.url) for r in block.content]
                sources = tuple((u, t) for u, t in found if _URL.fullmatch(u))[:MAX_SOURCES]
                self.usage.step(SearchStep(block.tool_use_id, query, "done", sources))
            else:
                code = block.content.error_code
                self.usage.searches[at] = WebSearch(query, 0, code)
                self.usage.step(SearchStep(block.tool_use_id, query, "failed", error=code))
            self.billed(0)  # counted as it runs, so a cancelled chain still shows its searches

    def paragraph_break(self, text_so_far: str) -> str:
        """What goes before text that follows a tool's work: text written before a search and
        text written after it are two paragraphs, not one run-on line."""
        worked, self.worked = self.worked, False
        return "\n\n" if worked and text_so_far and not text_so_far[-1].isspace() else ""

    def delta(self, event: RawContentBlockDeltaEvent) -> None:
        block, delta = self.blocks.get(event.index), event.delta
        if block is None:
            return
        if delta.type == "text_delta":
            block["text"] = block.get("text", "") + delta.text
            self.usage.activity = ""
        elif delta.type == "citations_delta":
            citation = delta.citation
            block.setdefault("citations", []).append(citation.model_dump(mode="json"))
            if citation.type == "web_search_result_location":
                self._cite(citation.url, citation.title or "")
        elif delta.type == "input_json_delta":
            self._json[event.index] = self._json.get(event.index, "") + delta.partial_json
            query = _partial_query(self._json[event.index])
            if block.get("name") == "web_search" and query:
                self._searching(str(block.get("id")), query)
        elif delta.type == "thinking_delta":
            block["thinking"] = block.get("thinking", "") + delta.thinking
        elif delta.type == "signature_delta":
            block["signature"] = delta.signature

    def stopped(self, index: int) -> None:
        block = self.blocks.get(index)
        if block is None or index not in self._json:
            return
        try:
            parsed = json.loads(self._json.pop(index) or "{}")
        except json.JSONDecodeError:
            parsed = {}
        block["input"] = parsed if isinstance(parsed, dict) else {}
        query = block["input"].get("query")
        if block.get("name") == "web_search" and isinstance(query, str):
            self._searching(str(block.get("id")), query)

    def _searching(self, tool_use_id: str, query: str) -> None:
        """The search's query is known: the draft's line and its record name it."""
        self.usage.show_activity(searching_line(query))
        at = self._pending.get(tool_use_id)
        if at is not None:
            self.usage.searches[at] = WebSearch(query, 0, UNFINISHED)
            self.usage.step(SearchStep(tool_use_id, query))

    def _cite(self, url: str, title: str) -> None:
        if not _URL.fullmatch(url) or any(s.url == url for s in self.sources):
            return
        self.sources.append(Source(url, title.strip() or url))

    def footer(self) -> str:
        """A short "Sources" line of Markdown links (http(s) only; the adapters render them
        through their safe-link rules), or "" when the text cites nothing."""
        links = [f"[{escape_markdown(s.title)}](<{s.url}>)" for s in self.sources[:MAX_SOURCES]]
        return "Sources: " + " · ".join(links) if links else ""


def _partial_query(partial_json: str) -> str:
    """The query of a search whose input is still streaming, once its string is complete."""
    match = re.search(r'"query"\s*:\s*("(?:[^"\\]|\\.)*")', partial_json)
    if match is None:
        return ""
    try:
        value = json.loads(match.group(1))
    except json.JSONDecodeError:
        return ""
    return value if isinstance(value, str) else ""
