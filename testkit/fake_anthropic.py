"""A fake Anthropic Messages API on 127.0.0.1, for tests and benchmarks.

It speaks enough of `POST /v1/messages` for the real `AsyncAnthropic(base_url=...)`: bearer or
x-api-key auth, JSON errors with `retry-after-ms`, and streaming SSE (`message_start`,
`content_block_*`, `message_delta`, `message_stop`, or an `error` event). Each request follows the
next queued `Plan` (or the default one). Everything it sees is recorded: request bodies, and per
stream how many deltas went out and whether it completed, failed or saw the client disconnect.

Prompt caching is simulated: the first request with a given prefix (everything up to the last block
marked `cache_control`) reports it as cache write, later ones as cache read. Token counts are about
four characters a token. With `cache=PromptCache(...)` it is accounted as the API does instead:
hits only on an exact prefix ending at a breakpoint (or up to 20 blocks before one), nothing
cached below the model's minimum length, entries living five minutes from their last use.

With `limits=ApiLimits(...)` (testkit/rate_limits.py) it applies an organisation's rate limits
as the API does: requests, input and output tokens per minute, replenished continuously; every
answer carries the `anthropic-ratelimit-*` headers, a request over a limit gets 429 with
`retry-after`, and an overloaded API 529.

Server tools are streamed as the real API streams them: a `server_tool_use` block (input `{}`,
then the query as `input_json_delta`), a `web_search_tool_result` block (results, or an error
object with HTTP 200), text blocks carrying `citations_delta`, `pause_turn` when planned, and
`usage.server_tool_use` on `message_delta`. Like the API, a search happens only when the request
offers the `web_search` tool and `tool_choice` allows tools; searches past the tool's `max_uses`
answer `max_uses_exceeded` and are not billed.

Client tools (MCP tools burstbot runs) are asked for as the API asks: after the text, a `tool_use`
block each (input `{}`, then the arguments as `input_json_delta`) and `stop_reason: tool_use`;
like the API, only tools the request offers, and none when `tool_choice` is none.

Standalone: `python -m testkit.fake_anthropic --port 8765` (one line per request on stdout;
`--show-system` adds its system prompt).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import hashlib
import json
import re
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Literal

from aiohttp import web

from testkit.rate_limits import ApiLimits
from testkit.serving import serve_locally

ERROR_TYPES = {
    400: "invalid_request_error",
    401: "authentication_error",
    403: "permission_error",
    404: "not_found_error",
    408: "timeout_error",
    409: "conflict_error",
    413: "request_too_large",
    429: "rate_limit_error",
    500: "api_error",
    503: "api_error",
    529: "overloaded_error",
}


def count_tokens(text: str) -> int:
    return max(1, (len(text) + 3) // 4)


@dataclass
class Search:
    """One web search the model makes: its query and results (url, title), or an error code the
    tool answers with (`unavailable`, `too_many_requests`, …). `hold`: the stream stops after the
    query until `release()` or `release_searches()` (or the client disconnects), as a slow search
    would."""

    query: str
    results: list[tuple[str, str]] = field(default_factory=list)
    error: str | None = None
    hold: bool = False


@dataclass
class Fetch:
    """One page the model reads with `web_fetch`: like the API, only a URL already in the
    conversation is fetched (else `url_not_in_prior_context`), and only when the tool is offered."""

    url: str
    text: str = "page text"


@dataclass
class ToolUse:
    """One client tool call the model asks for (a tool the request must offer by name)."""

    name: str
    input: dict[str, Any] = field(default_factory=dict)


@dataclass
class Plan:
    """What the server does with one request."""

    status: int = 200  # anything else: a JSON error response with this status
    error_type: str | None = None  # default from the status
    retry_after: float | None = None  # seconds, sent as `retry-after-ms` (and `retry-after`)
    text: str | None = None  # the reply; None = the server's `reply` function
    words_per_delta: int = 1
    delay: float = 0.0  # seconds between deltas
    first_delay: float | None = None  # seconds before the first delta (time to first token)
    watch: bool = False  # notice a client that went away within 5 ms, not at the next delta
    pause_after: int | None = None  # hold after this many deltas until `release()` (or disconnect)
    error_after: int | None = None  # send an `error` event after this many deltas
    stream_error_type: str = "overloaded_error"
    end_after: int | None = None  # end the response after this many deltas, no message_stop
    thinking: str | None = None  # stream a thinking block before the text (adaptive thinking)
    searches: list[Search] = field(default_factory=list)  # web searches before the text
    fetches: list[Fetch] = field(default_factory=list)  # pages read before the searches
    cited: list[tuple[str, str]] = field(default_factory=list)  # (text, url): cited blocks after it
    stop_reason: str | None = None  # e.g. "pause_turn" (the server's tool loop ran long)
    tool_uses: list[ToolUse] = field(default_factory=list)  # client tools asked for after the text


@dataclass
class RecordedRequest:
    body: dict[str, Any]
    headers: dict[str, str]

    @property
    def messages(self) -> list[dict[str, Any]]:
        return list(self.body.get("messages", []))

    @property
    def system_blocks(self) -> list[dict[str, Any]]:
        system = self.body.get("system", [])
        return [{"type": "text", "text": system}] if isinstance(system, str) else list(system)

    def texts(self, message: dict[str, Any]) -> list[str]:
        content = message["content"]
        if isinstance(content, str):
            return [content]
        return [block["text"] for block in content if block.get("type") == "text"]

    @property
    def last_user_text(self) -> str:
        """The last text block of the final user message (burstbot puts the burst there)."""
        return self.texts(self.messages[-1])[-1]

    def cache_breakpoints(self) -> list[str]:
        """Where `cache_control` sits: "system" or "messages[i]" for each marked block."""
        marks = ["system" for b in self.system_blocks if b.get("cache_control")]
        for index, message in enumerate(self.messages):
            content = message["content"]
            if isinstance(content, list):
                marks += [f"messages[{index}]" for b in content if b.get("cache_control")]
        return marks


@dataclass
class StreamRecord:
    request_index: int
    total_deltas: int
    output_tokens: int  # what the full reply costs
    deltas_sent: int = 0
    paused: bool = False
    outcome: Literal["streaming", "completed", "error", "disconnected"] = "streaming"
    stop_reason: str = "end_turn"  # "max_tokens" when the request's max_tokens cut the reply
    searches_started: int = 0  # server_tool_use blocks sent
    fetches_started: int = 0
    web_search_requests: int = 0  # searches billed (not the errors)
    started_at: float = field(default_factory=time.monotonic)  # the request arrived
    delta_times: list[float] = field(default_factory=list)  # each text delta sent (monotonic)
    ended_at: float | None = None  # completed, failed, or the client went away


LOOKBACK_BLOCKS = 20  # the API checks for hits this many blocks before each breakpoint
CACHE_LIFETIME = 300.0  # seconds an entry lives after its last use (the default 5-minute cache)


@dataclass
class PromptCache:
    """The API's prompt cache, for one organisation: entries are exact prefixes of content blocks
    (ending where a request had a breakpoint) with the time they expire."""

    min_tokens: int = 1024  # the shortest cacheable prefix (Sonnet, Opus; Haiku: 2048)
    clock: Callable[[], float] = time.monotonic
    entries: dict[str, float] = field(default_factory=dict)

    def usage(self, model: str, blocks: list[dict[str, Any]]) -> dict[str, int]:
        """Input tokens split as billed: read from the cache, written to it, and the rest."""
        now = self.clock()
        sizes = [count_tokens(b.get("text", "")) for b in blocks]
        total = sum(sizes)
        keys = _prefix_keys(model, blocks)
        marks = [i for i, b in enumerate(blocks) if b.get("cache_control")][-4:]
        read_to = -1  # the last block of the longest live prefix found
        for mark in marks:
            for end in range(mark, max(-1, mark - LOOKBACK_BLOCKS - 1), -1):
                if self.entries.get(keys[end], 0.0) > now:
                    read_to = max(read_to, end)
                    break
        read = sum(sizes[: read_to + 1])
        write = 0
        for mark in marks:
            if sum(sizes[: mark + 1]) >= self.min_tokens and mark > read_to:
                write = sum(sizes[read_to + 1 : mark + 1])
            if sum(sizes[: mark + 1]) >= self.min_tokens:
                self.entries[keys[mark]] = now + CACHE_LIFETIME
        if read_to >= 0:
            self.entries[keys[read_to]] = now + CACHE_LIFETIME  # a hit refreshes the entry
        return {
            "input_tokens": max(1, total - read - write),
            "cache_creation_input_tokens": write,
            "cache_read_input_tokens": read,
        }


def _prefix_keys(model: str, blocks: list[dict[str, Any]]) -> list[str]:
    """A key for each prefix (blocks 0..i), from the content alone (not where the marks are)."""
    digest = hashlib.sha256(model.encode())
    keys = []
    for block in blocks:
        content = {k: v for k, v in block.items() if k != "cache_control"}
        digest.update(json.dumps(content, sort_keys=True).encode())
        keys.append(digest.copy().hexdigest())
    return keys


def echo_reply(request: RecordedRequest) -> str:
    return f"You said:\n{request.last_user_text}"


@dataclass
class FakeAnthropic:
    reply: Callable[[RecordedRequest], str] = echo_reply
    default_plan: Plan = field(default_factory=Plan)
    plans: deque[Plan] = field(default_factory=deque)
    requests: list[RecordedRequest] = field(default_factory=list)
    streams: list[StreamRecord] = field(default_factory=list)
    on_request: Callable[[RecordedRequest], None] | None = None
    cache: PromptCache | None = None  # account caching as the API does (else: the simple model)
    limits: ApiLimits | None = None  # the organisation's rate limits (else: unlimited, no headers)
    port: int = 0
    _gate: asyncio.Event = field(default_factory=asyncio.Event)
    _search_gate: asyncio.Event = field(default_factory=asyncio.Event)  # held searches only
    _cached_prefixes: set[str] = field(default_factory=set)
    _titles: dict[str, str] = field(default_factory=dict)
    _runner: web.AppRunner | None = None

    # lifecycle -------------------------------------------------------------------------------
    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def app(self) -> web.Application:
        app = web.Application()
        app.router.add_post("/v1/messages", self._messages)
        return app

    async def start(self, port: int = 0) -> FakeAnthropic:
        self._runner, self.port = await serve_locally(self.app(), port, shutdown_timeout=0.5)
        return self

    async def stop(self) -> None:
        self.release()
        if self._runner is not None:
            await self._runner.cleanup()

    # scripting -------------------------------------------------------------------------------
    def queue(self, *plans: Plan) -> None:
        self.plans.extend(plans)

    def release(self) -> None:
        """Let paused streams go on."""
        self._gate.set()
        self._search_gate.set()

    def release_searches(self) -> None:
        """Let held searches answer; a stream's `pause_after` still holds its text."""
        self._search_gate.set()

    async def wait_for(self, condition: Callable[[], bool], within: float = 5.0) -> None:
        """Bounded wait for real I/O (the client and this server share no clock)."""
        async with asyncio.timeout(within):
            while not condition():  # noqa: ASYNC110
                await asyncio.sleep(0.005)

    # the API ---------------------------------------------------------------------------------
    async def _messages(self, request: web.Request) -> web.StreamResponse:
        auth = request.headers.get("authorization", "")
        if not (auth.startswith("Bearer ") and len(auth) > 7) and not request.headers.get(
            "x-api-key"
        ):
            return _error(401, "authentication_error", "missing API key")
        headers = {name.lower(): value for name, value in request.headers.items()}
        recorded = RecordedRequest(await request.json(), headers)
        self.requests.append(recorded)
        if self.on_request is not None:
            self.on_request(recorded)
        usage: dict[str, int] | None = None
        if self.limits is not None:  # refused before a planned answer is used up
            usage = self._input_usage(recorded)
            status, wait = self.limits.admit(
                usage["input_tokens"] + usage["cache_creation_input_tokens"]
            )
            if status != 200:
                kind = ERROR_TYPES[status]
                refusal = {**self.limits.headers(), **_retry_headers(wait)}
                return _error(status, kind, f"{kind} (fake limits)", refusal)
        plan = self.plans.popleft() if self.plans else self.default_plan
        if plan.status != 200:
            kind = plan.error_type or ERROR_TYPES.get(plan.status, "api_error")
            return _error(
                plan.status, kind, f"planned {plan.status}", _retry_headers(plan.retry_after)
            )
        text = plan.text if plan.text is not None else self.reply(recorded)
        words = re.findall(r"\S+\s*", text) or [text]
        step = plan.words_per_delta
        chunks = ["".join(words[i : i + step]) for i in range(0, len(words), step)]
        thinking = count_tokens(plan.thinking) if plan.thinking else 0
        chunks, stop_reason = _within(chunks, int(recorded.body["max_tokens"]) - thinking)
        usage = self._input_usage(recorded) if usage is None else usage
        output_tokens = thinking + sum(count_tokens(c) for c in chunks)
        limit_headers = {} if self.limits is None else self.limits.headers()
        if not recorded.body.get("stream"):
            body = _message(
                recorded, "".join(chunks), {**usage, "output_tokens": output_tokens}, stop_reason
            )
            if self.limits is not None:
                self.limits.generated(output_tokens)
            return web.json_response(body, headers=limit_headers)
        output_tokens += sum(count_tokens(s.query) for s in plan.searches)
        output_tokens += sum(count_tokens(text) for text, _ in plan.cited)
        record = StreamRecord(
            len(self.requests) - 1,
            len(chunks),
            output_tokens,
            stop_reason=plan.stop_reason or stop_reason,
        )
        self.streams.append(record)
        response = web.StreamResponse(
            headers={"content-type": "text/event-stream", **limit_headers}
        )
        await response.prepare(request)
        if self.limits is not None:
            self.limits.streaming += 1
        try:
            await self._stream(request, response, recorded, plan, chunks, usage, record)
        except ConnectionError:
            record.outcome = "disconnected"
        except asyncio.CancelledError:  # aiohttp cancels the handler when the client goes away
            record.outcome = "disconnected"
            record.ended_at = time.monotonic()
            raise
        finally:
            self._generated(record)
        record.ended_at = time.monotonic()
        return response

    def _generated(self, record: StreamRecord) -> None:
        """An answer ended: its output tokens count against the limit (what was sent of it)."""
        if self.limits is not None:
            self.limits.streaming -= 1
            sent = record.deltas_sent / record.total_deltas if record.total_deltas else 1.0
            done = record.outcome == "completed"
            self.limits.generated(
                record.output_tokens if done else int(record.output_tokens * sent)
            )

    async def _stream(
        self,
        request: web.Request,
        response: web.StreamResponse,
        recorded: RecordedRequest,
        plan: Plan,
        chunks: list[str],
        usage: dict[str, int],
        record: StreamRecord,
    ) -> None:
        async def send(event: str, data: dict[str, Any]) -> None:
            _raise_if_gone(request)
            await response.write(f"event: {event}\ndata: {json.dumps(data)}\n\n".encode())

        await send("message_start", {"type": "message_start", "message": _message(
            recorded, "", {**usage, "output_tokens": 1}, None
        )})  # fmt: skip
        text_index = 0
        if plan.thinking:
            text_index = 1
            block = {"type": "thinking", "thinking": "", "signature": ""}
            await send(
                "content_block_start",
                {"type": "content_block_start", "index": 0, "content_block": block},
            )
            for delta in (
                {"type": "thinking_delta", "thinking": plan.thinking},
                {"type": "signature_delta", "signature": "c2lnbmF0dXJl"},
            ):
                await send(
                    "content_block_delta",
                    {"type": "content_block_delta", "index": 0, "delta": delta},
                )
            await send("content_block_stop", {"type": "content_block_stop", "index": 0})
        for fetch in plan.fetches if _offers(recorded.body, "web_fetch_") else []:
            text_index = await self._fetch(send, recorded, fetch, text_index, record)
        for search in plan.searches if _offers_search(recorded.body) else []:
            text_index = await self._search(request, send, recorded, search, text_index, record)
        block = {"type": "text", "text": ""}
        await send(
            "content_block_start",
            {"type": "content_block_start", "index": text_index, "content_block": block},
        )
        await send("ping", {"type": "ping"})
        for index, chunk in enumerate(chunks):
            if plan.error_after == index:
                error = {"type": plan.stream_error_type, "message": "planned stream error"}
                await send("error", {"type": "error", "error": error})
                record.outcome = "error"
                return
            if plan.end_after == index:
                await response.write_eof()
                record.outcome = "error"
                return
            if plan.pause_after == index:
                record.paused = True
                while not self._gate.is_set():
                    _raise_if_gone(request)
                    await asyncio.sleep(0.005)
            pause = plan.first_delay if index == 0 and plan.first_delay is not None else plan.delay
            if pause and plan.watch:
                await _sleep_watching(request, pause)
            elif pause:
                await asyncio.sleep(pause)
            delta = {"type": "text_delta", "text": chunk}
            await send(
                "content_block_delta",
                {"type": "content_block_delta", "index": text_index, "delta": delta},
            )
            record.deltas_sent += 1
            record.delta_times.append(time.monotonic())
        await send("content_block_stop", {"type": "content_block_stop", "index": text_index})
        asked = [use for use in plan.tool_uses if _offers_tool(recorded.body, use.name)]
        for number, use in enumerate(asked):
            text_index += 1
            tool_id = f"toolu_{len(self.requests):02d}{number:02d}"
            use_block: dict[str, Any] = {
                "type": "tool_use",
                "id": tool_id,
                "name": use.name,
                "input": {},
            }
            await send("content_block_start", {"type": "content_block_start", "index": text_index,
                                               "content_block": use_block})  # fmt: skip
            arguments = json.dumps(use.input)
            for part in (arguments[: len(arguments) // 2], arguments[len(arguments) // 2 :]):
                delta = {"type": "input_json_delta", "partial_json": part}
                event = {"type": "content_block_delta", "index": text_index, "delta": delta}
                await send("content_block_delta", event)
            await send("content_block_stop", {"type": "content_block_stop", "index": text_index})
        if asked:
            record.stop_reason = "tool_use"
        results = self._titles  # a citation names its result's title
        for text, url in plan.cited:
            text_index += 1
            cited_block: dict[str, Any] = {"type": "text", "text": "", "citations": []}
            await send("content_block_start", {"type": "content_block_start", "index": text_index,
                                               "content_block": cited_block})  # fmt: skip
            citation: dict[str, str] = {"type": "web_search_result_location", "url": url,
                        "title": results.get(url, url), "cited_text": text[:150],
                        "encrypted_index": "ZW5jcnlwdGVk"}  # fmt: skip
            deltas: list[dict[str, Any]] = [{"type": "citations_delta", "citation": citation},
                                            {"type": "text_delta", "text": text}]  # fmt: skip
            for delta in deltas:
                event = {"type": "content_block_delta", "index": text_index, "delta": delta}
                await send("content_block_delta", event)
            await send("content_block_stop", {"type": "content_block_stop", "index": text_index})
        usage_out: dict[str, Any] = {"output_tokens": record.output_tokens}
        if _offers_search(recorded.body, any_choice=True):
            usage_out["server_tool_use"] = {
                "web_search_requests": record.web_search_requests,
                "web_fetch_requests": 0,
            }
        await send("message_delta", {
            "type": "message_delta",
            "delta": {"stop_reason": record.stop_reason, "stop_sequence": None},
            "usage": usage_out,
        })  # fmt: skip
        await send("message_stop", {"type": "message_stop"})
        record.outcome = "completed"
        await response.write_eof()

    async def _search(
        self,
        request: web.Request,
        send: Callable[[str, dict[str, Any]], Any],
        recorded: RecordedRequest,
        search: Search,
        index: int,
        record: StreamRecord,
    ) -> int:
        """One search as the API streams it; returns the index the next block takes."""
        tool_id = f"srvtoolu_{len(self.requests):02d}{record.searches_started:02d}"
        record.searches_started += 1
        query = json.dumps({"query": search.query})
        halves = ("", query[: len(query) // 2], query[len(query) // 2 :])
        await _tool_use(send, index, tool_id, "web_search", halves)
        if search.hold:
            record.paused = True
            while not self._search_gate.is_set():
                _raise_if_gone(request)
                await asyncio.sleep(0.005)
        max_uses = _search_tool(recorded.body).get("max_uses")
        error = search.error
        if error is None and max_uses is not None and record.web_search_requests >= max_uses:
            error = "max_uses_exceeded"
        content: Any
        if error is not None:
            content = {"type": "web_search_tool_result_error", "error_code": error}
        else:
            record.web_search_requests += 1
            self._titles.update({url: title for url, title in search.results})
            content = [{"type": "web_search_result", "url": url, "title": title,
                        "encrypted_content": "ZW5jcnlwdGVk", "page_age": "1 day ago"}
                       for url, title in search.results]  # fmt: skip
        result = {"type": "web_search_tool_result", "tool_use_id": tool_id, "content": content}
        start = {"type": "content_block_start", "index": index + 1, "content_block": result}
        await send("content_block_start", start)
        await send("content_block_stop", {"type": "content_block_stop", "index": index + 1})
        return index + 2

    async def _fetch(
        self,
        send: Callable[[str, dict[str, Any]], Any],
        recorded: RecordedRequest,
        fetch: Fetch,
        index: int,
        record: StreamRecord,
    ) -> int:
        tool_id = f"srvtoolu_{len(self.requests):02d}f{record.fetches_started:02d}"
        record.fetches_started += 1
        await _tool_use(send, index, tool_id, "web_fetch", (json.dumps({"url": fetch.url}),))
        seen = json.dumps(recorded.messages)
        content: Any = {"type": "web_fetch_tool_result_error",
                        "error_code": "url_not_in_prior_context"}  # fmt: skip
        if fetch.url in seen:
            source = {"type": "text", "media_type": "text/plain", "data": fetch.text}
            document = {"type": "document", "source": source, "title": fetch.url}
            content = {"type": "web_fetch_result", "url": fetch.url,
                       "retrieved_at": "2026-12-01T12:00:00Z", "content": document}  # fmt: skip
        result = {"type": "web_fetch_tool_result", "tool_use_id": tool_id, "content": content}
        start = {"type": "content_block_start", "index": index + 1, "content_block": result}
        await send("content_block_start", start)
        await send("content_block_stop", {"type": "content_block_stop", "index": index + 1})
        return index + 2

    def _input_usage(self, recorded: RecordedRequest) -> dict[str, int]:
        """Input tokens, split into cache write/read for the prefix up to the last breakpoint."""
        blocks = list(recorded.system_blocks)
        for message in recorded.messages:
            content = message["content"]
            blocks += [{"type": "text", "text": content}] if isinstance(content, str) else content
        if self.cache is not None:
            return self.cache.usage(str(recorded.body.get("model")), blocks)
        total = sum(count_tokens(b.get("text", "")) for b in blocks)
        marked = [i for i, b in enumerate(blocks) if b.get("cache_control")]
        write = read = 0
        if marked:
            prefix = blocks[: marked[-1] + 1]
            key = json.dumps([recorded.body.get("model"), prefix], sort_keys=True)
            cached = sum(count_tokens(b.get("text", "")) for b in prefix)
            if key in self._cached_prefixes:
                read = cached
            else:
                write = cached
                self._cached_prefixes.add(key)
        return {
            "input_tokens": max(1, total - write - read),
            "cache_creation_input_tokens": write,
            "cache_read_input_tokens": read,
        }


async def _tool_use(
    send: Callable[[str, dict[str, Any]], Any],
    index: int,
    tool_id: str,
    name: str,
    partial_jsons: tuple[str, ...],
) -> None:
    """A server tool's use block as the API streams it: its start, its input in parts, its stop."""
    use = {"type": "server_tool_use", "id": tool_id, "name": name, "input": {}}
    await send("content_block_start",
               {"type": "content_block_start", "index": index, "content_block": use})  # fmt: skip
    for part in partial_jsons:
        delta = {"type": "input_json_delta", "partial_json": part}
        await send("content_block_delta",
                   {"type": "content_block_delta", "index": index, "delta": delta})  # fmt: skip
    await send("content_block_stop", {"type": "content_block_stop", "index": index})


def _search_tool(body: dict[str, Any], kind: str = "web_search_") -> dict[str, Any]:
    for tool in body.get("tools") or []:
        if isinstance(tool, dict) and str(tool.get("type", "")).startswith(kind):
            return tool
    return {}


def _offers(body: dict[str, Any], kind: str, any_choice: bool = False) -> bool:
    """The request lets the model use a tool: it is offered and `tool_choice` is not none."""
    offered = bool(_search_tool(body, kind))
    return offered and (any_choice or (body.get("tool_choice") or {}).get("type") != "none")


def _offers_tool(body: dict[str, Any], name: str) -> bool:
    """A client tool (no `type`, or `custom`) of that name is offered and may be used."""
    if (body.get("tool_choice") or {}).get("type") == "none":
        return False
    return any(
        isinstance(tool, dict) and tool.get("name") == name
        and tool.get("type", "custom") == "custom" and "input_schema" in tool
        for tool in body.get("tools") or []
    )  # fmt: skip


def _offers_search(body: dict[str, Any], any_choice: bool = False) -> bool:
    return _offers(body, "web_search_", any_choice)


def _within(chunks: list[str], max_tokens: int) -> tuple[list[str], str]:
    """Like the API, generation stops at the request's `max_tokens` (stop_reason max_tokens)."""
    kept: list[str] = []
    spent = 0
    for chunk in chunks:
        if spent + count_tokens(chunk) > max_tokens:
            return kept, "max_tokens"
        kept.append(chunk)
        spent += count_tokens(chunk)
    return kept, "end_turn"


async def _sleep_watching(request: web.Request, seconds: float) -> None:
    """Pause between deltas, noticing within 5 ms that the client went away (its close time is
    what cancel latency is measured by)."""
    deadline = time.monotonic() + seconds
    while (left := deadline - time.monotonic()) > 0:
        _raise_if_gone(request)
        await asyncio.sleep(min(0.005, left))


def _raise_if_gone(request: web.Request) -> None:
    transport = request.transport
    if transport is None or transport.is_closing():
        raise ConnectionResetError("client disconnected")


def _message(
    recorded: RecordedRequest, text: str, usage: dict[str, int], stop_reason: str | None
) -> dict[str, Any]:
    return {
        "id": f"msg_fake_{id(recorded):x}",
        "type": "message",
        "role": "assistant",
        "model": recorded.body.get("model", "claude"),
        "content": [{"type": "text", "text": text}] if text else [],
        "stop_reason": stop_reason,
        "stop_sequence": None,
        "usage": usage,
    }


def _retry_headers(seconds: float | None) -> dict[str, str]:
    """`retry-after-ms` (the SDK's precise one) and `retry-after` in whole seconds."""
    if seconds is None:
        return {}
    return {"retry-after-ms": str(int(seconds * 1000)), "retry-after": str(max(1, round(seconds)))}


def _error(
    status: int, kind: str, message: str, headers: dict[str, str] | None = None
) -> web.Response:
    body = {"type": "error", "error": {"type": kind, "message": message}}
    return web.json_response(body, status=status, headers=headers)


def _tool_plan(request: RecordedRequest, tool_use: ToolUse) -> Plan:
    """`--tool-use`: ask for the tool while the last turn has no result, then say what it gave."""
    content = request.messages[-1]["content"] if request.messages else ""
    results = [] if isinstance(content, str) else [
        b for b in content if b.get("type") == "tool_result"
    ]  # fmt: skip
    if not results:
        return Plan(text="On it.", tool_uses=[tool_use])
    said = results[-1].get("content")
    return Plan(text=f"Done: {said if isinstance(said, str) else json.dumps(said)}")


async def _serve(
    port: int,
    reply: str | None,
    delay: float,
    show_system: bool = False,
    tool_use: ToolUse | None = None,
) -> None:
    def log(request: RecordedRequest) -> None:
        if tool_use is not None:
            server.queue(_tool_plan(request, tool_use))
            print(f"request {len(server.requests)}: tools {json.dumps(request.body.get('tools'))}")
            return
        print(f"request {len(server.requests)}: {json.dumps(request.last_user_text)}", flush=True)
        if show_system:
            system = "\n".join(block.get("text", "") for block in request.system_blocks)
            print(f"  system: {json.dumps(system)}", flush=True)

    server = FakeAnthropic(on_request=log)
    server.default_plan = Plan(text=reply, delay=delay)
    await server.start(port)
    print(f"fake Messages API on {server.base_url}", flush=True)
    try:
        await asyncio.Event().wait()
    finally:
        await server.stop()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--port", type=int, default=8765)
    parser.add_argument("--reply", help="fixed reply text (default: echo the last user turn)")
    parser.add_argument("--delay", type=float, default=0.0, help="seconds between words")
    parser.add_argument("--show-system", action="store_true", help="print each system prompt")
    asked = "NAME=JSON: ask for this client tool (if offered), then answer with its result"
    parser.add_argument("--tool-use", help=asked)
    args = parser.parse_args()
    tool_use = None
    if args.tool_use:
        name, _, arguments = args.tool_use.partition("=")
        tool_use = ToolUse(name, json.loads(arguments or "{}"))
    with contextlib.suppress(KeyboardInterrupt):
        asyncio.run(_serve(args.port, args.reply, args.delay, args.show_system, tool_use))


if __name__ == "__main__":
    main()
