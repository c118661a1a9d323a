"""Claude replies through the official SDK: one streamed Messages call per burst (a short chain
when a server tool's loop pauses the turn, see `bot/llm/web.py`, or when the model asks for
our MCP tools: each `tool_use` is made as a durable action, see `bot/core/tool_calls.py`, and
its `tool_result` sent back in the next call of the chain).

- The stream runs inside the task the engine cancels when newer input supersedes the burst; leaving
  the `async with` closes the HTTP response at once, so the provider stops generating (and billing)
  tokens nobody will read.
- `usage` is kept current while streaming: input and cache counts from `message_start`, output
  tokens estimated from the streamed text until `message_delta` reports the real figure, so a
  cancelled stream still shows what it cost ("wasted" tokens).
- The raw event stream (`messages.create(stream=True)`), not the SDK's `messages.stream()` helper:
  the helper rebuilds a snapshot of the whole message on every event, which we never read, and
  with dozens of replies streaming that work competes with the acks for the event loop.
- The stable prefix (system prompt, then the end of the history) carries `cache_control`, so the
  next burst of the same conversation reads it from the prompt cache.
- Every answer of the API, each attempt's (the SDK's own retries too), is told to the listeners
  (`listen`) with its status and headers: admission learns the rate limits from them
  (bot/core/admission.py). `limits_scope` names the key they belong to without revealing it.
"""

from __future__ import annotations

import asyncio
import base64
import hashlib
import logging
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from typing import Any, Literal, cast

import anthropic
import httpx2
from anthropic.types import (
    Base64ImageSourceParam,
    Base64PDFSourceParam,
    CacheControlEphemeralParam,
    ContentBlockParam,
    DocumentBlockParam,
    ImageBlockParam,
    MessageParam,
    PlainTextSourceParam,
    TextBlockParam,
    ToolUnionParam,
)

from bot.core.approvals import ApprovalNeeded, Continuation
from bot.core.attachments import LoadedFile
from bot.core.errors import PermanentReplierError, ReplierError, RetryableReplierError
from bot.core.replier import Closable, GenerationProgress, Prompt
from bot.core.tool_calls import BurstTools, tool_round, unavailable_note, with_actions
from bot.llm.web import ToolTrace, tool_params

log = logging.getLogger("burstbot.claude")
Listener = Callable[[int, Mapping[str, str]], Awaitable[None]]

RETRYABLE_STATUS = frozenset({408, 409, 429})
# Error types an `error` event inside a 200 stream may carry that retrying cannot fix.
PERMANENT_ERROR_TYPES = frozenset(
    {
        "invalid_request_error",
        "authentication_error",
        "permission_error",
        "not_found_error",
        "request_too_large",
        "billing_error",
    }
)
CACHE_PREFIX: CacheControlEphemeralParam = {"type": "ephemeral"}
MAX_CONTINUATIONS = 3  # continuations of a turn the API paused (`pause_turn`) per burst

Role = Literal["user", "assistant"]
Block = TextBlockParam | ImageBlockParam | DocumentBlockParam
ImageMediaType = Literal["image/jpeg", "image/png", "image/gif", "image/webp"]


def file_block(file: LoadedFile) -> Block:
    """A file the model reads: an image block, a PDF document, or a plain-text document."""
    assert file.content is not None
    if file.kind == "text":
        text = file.content.decode("utf-8")
        source: PlainTextSourceParam = {"type": "text", "media_type": "text/plain", "data": text}
        return {"type": "document", "source": source, "title": file.attachment.name}
    data = base64.b64encode(file.content).decode("ascii")
    if file.kind == "pdf":
        pdf: Base64PDFSourceParam = {
            "type": "base64",
            "media_type": "application/pdf",
            "data": data,
        }
        return {"type": "document", "source": pdf, "title": file.attachment.name}
    media_type = cast(ImageMediaType, file.media_type)
    image: Base64ImageSourceParam = {"type": "base64", "media_type": media_type, "data": data}
    return {"type": "image", "source": image}


def burst_blocks(prompt: Prompt) -> list[Block]:
    """The burst as one turn's blocks: its text, each file right after the message it came with.
    A burst without files is one text block."""
    blocks: list[Block] = []
    lines: list[str] = []
    for message in prompt.burst:
        lines.append(message.line())
        readable = [file_block(f) for f in message.files if f.content is not None]
        if readable:
            blocks.append({"type": "text", "text": "\n".join(lines)})
            blocks += readable
            lines = []
    if lines or not blocks:
        blocks.append({"type": "text", "text": "\n".join(lines)})
    return blocks


def to_messages(prompt: Prompt) -> tuple[list[TextBlockParam], list[MessageParam]]:
    """Map a prompt to the Messages API: system blocks and alternating user/assistant turns.

    Consecutive turns of one role become one message with several blocks (roles must alternate;
    block boundaries keep each author's text apart); a turn's files follow its text. The
    conversation must open with a user turn, so assistant turns left at the start by history
    trimming are dropped. The burst ends the final user message (`burst_blocks`); the cache
    breakpoints sit on the system prompt and on the last history block — the part that is the
    same for the next burst.
    """
    system: list[TextBlockParam] = []
    if prompt.system.strip():
        system.append({"type": "text", "text": prompt.system, "cache_control": CACHE_PREFIX})
    turns: list[tuple[Role, list[Block]]] = []
    for turn in prompt.history:
        if not turn.text.strip() or (not turns and turn.role == "assistant"):
            continue
        blocks: list[Block] = [{"type": "text", "text": turn.text}]
        blocks += [file_block(f) for f in turn.files if f.content is not None]
        if turns and turns[-1][0] == turn.role:
            turns[-1][1].extend(blocks)
        else:
            turns.append((turn.role, blocks))
    if turns:
        turns[-1][1][-1]["cache_control"] = CACHE_PREFIX
    burst = burst_blocks(prompt)
    if turns and turns[-1][0] == "user":
        turns[-1][1].extend(burst)
    else:
        turns.append(("user", burst))
    messages: list[MessageParam] = []
    for role, content in turns:
        if role == "user":
            messages.append({"role": "user", "content": content})
        else:
            messages.append({"role": "assistant", "content": content})
    return system, messages


async def parking(
    calls: BurstTools,
    messages: list[MessageParam],
    content: list[dict[str, Any]],
    usage: GenerationProgress,
    base: int,
    parts: list[str],
) -> list[MessageParam]:
    """One round of our tool calls; a call that must ask ends the answer here, with what it
    added after the prompt saved for the answer to resume from (bot/core/approvals.py)."""
    try:
        return await tool_round(calls, messages, content, usage)
    except ApprovalNeeded as parked:
        turns = cast(list[dict[str, Any]], messages[base:])
        parked.continuation = Continuation(turns, content, "".join(parts))
        raise


def map_error(exc: Exception) -> ReplierError:
    """SDK exception → the engine's error tree: permanent only when retrying cannot help."""
    if isinstance(exc, anthropic.APIStatusError):
        status, kind = exc.status_code, exc.type or "error"
        detail = exc.api_message or exc.message
        if status < 400:  # an `error` event in the middle of a successful stream
            message = f"Claude API {kind} during the stream: {detail}"
            if kind in PERMANENT_ERROR_TYPES:
                return PermanentReplierError(message)
            return RetryableReplierError(message)
        message = f"Claude API {status} {kind}: {detail}"
        if status in RETRYABLE_STATUS or status >= 500:
            return RetryableReplierError(message)
        return PermanentReplierError(message)
    if isinstance(exc, anthropic.APITimeoutError):
        return RetryableReplierError("Claude API request timed out")
    if isinstance(exc, anthropic.APIConnectionError | httpx2.HTTPError):
        return RetryableReplierError(f"could not reach the Claude API: {exc}")
    if isinstance(exc, anthropic.CredentialsError):
        return PermanentReplierError(f"Claude API credentials: {exc}")
    return RetryableReplierError(f"Claude API failure: {exc}")


class HeardAnswers(anthropic.Middleware):
    """Runs inside the SDK's retry loop, once per attempt: each HTTP answer's status and headers
    go to `listener` before the SDK reads the body (a stream's headers come first). A listener
    that fails costs the lesson, never the request."""

    def __init__(self, listener: Listener) -> None:
        self.listener = listener

    async def handle_async(self, request: Any, call_next: Any) -> Any:
        response = await call_next(request)
        try:
            await self.listener(int(response.status_code), response.headers)
        except Exception:
            log.exception("a listener to the API's answers failed")
        return response


@dataclass(eq=False, repr=False)
class ClaudeReplier(Closable):
    """A `Replier` on `AsyncAnthropic`: streams one reply per burst."""

    client: anthropic.AsyncAnthropic
    model: str
    max_tokens: int
    timeout_seconds: float
    cut_note: str = ""

    async def aclose(self) -> None:
        await self.client.close()

    def listen(self, listener: Listener) -> None:
        """Tell `listener` every answer of the API from now on."""
        self.client = self.client.with_middleware(HeardAnswers(listener))

    @property
    def limits_scope(self) -> str:
        """The API key's rate limits' name, the same for every process using that key at that
        address: a digest, never the key."""
        key = self.client.api_key or self.client.auth_token or ""
        digest = hashlib.sha256(f"{self.client.base_url}\n{key}".encode()).hexdigest()
        return f"anthropic:{digest[:16]}"

    async def generate(self, prompt: Prompt, usage: GenerationProgress) -> str:
        """One reply: one call, or with server tools a chain of calls continuing a paused turn;
        each call bounded by `timeout_seconds` (SDK retries and `retry-after` too)."""
        try:
            return await self._reply(prompt, usage)
        except (anthropic.AnthropicError, httpx2.HTTPError) as exc:
            raise map_error(exc) from exc

    async def _reply(self, prompt: Prompt, usage: GenerationProgress) -> str:
        """A turn paused by the API (`pause_turn`) is continued, up to `MAX_CONTINUATIONS` times,
        all inside this one task: a newer burst cancels the whole chain. The search budget and the
        last call without tools: docs/web-search.md."""
        system, messages = to_messages(prompt)
        tools, trace, calls = prompt.tools, ToolTrace(usage), prompt.calls
        if calls is not None:
            system, messages = with_actions(calls, system, messages)
        base = len(messages)  # what this answer adds after the prompt is its continuation
        parts: list[str] = []
        stop_reason: str | None = None
        pauses = rounds = 0
        if calls is not None and calls.resume is not None:  # a parked answer goes on
            resumed = calls.resume
            if resumed.shown:
                parts.append(resumed.shown)
                usage.streamed.append(resumed.shown)
                trace.worked = True  # what follows the call is a paragraph of its own
            messages = [*messages, *cast(list[MessageParam], resumed.turns)]
            rounds = 1
            messages = await parking(calls, messages, resumed.content, usage, base, parts)
        while True:
            left = tools.max_uses - usage.web_searches
            wrap_up = pauses > 0 and (pauses == MAX_CONTINUATIONS or left <= 0)
            if calls is not None and rounds > 0:  # no calls left, or a model that keeps asking
                wrap_up = wrap_up or calls.calls_left <= 0 or rounds >= calls.max_calls
            trace.new_response()
            try:
                async with asyncio.timeout(self.timeout_seconds):
                    stop_reason = await self._stream(
                        prompt, usage, system, messages, trace, parts, wrap_up
                    )
            except TimeoutError:
                raise RetryableReplierError(
                    f"no complete reply from the Claude API within {self.timeout_seconds:g}s"
                ) from None
            if stop_reason == "tool_use" and calls is not None and not wrap_up:
                rounds += 1  # our tools: make the calls, hand back their results, go on
                messages = await parking(calls, messages, trace.content(), usage, base, parts)
                continue
            if stop_reason != "pause_turn" or wrap_up:
                break
            pauses += 1
            paused = cast(list[ContentBlockParam], trace.content())
            if messages[-1]["role"] == "assistant":
                previous = cast(list[ContentBlockParam], messages[-1]["content"])
                messages[-1] = {"role": "assistant", "content": [*previous, *paused]}
            else:
                messages = [*messages, {"role": "assistant", "content": paused}]
        usage.activity = ""
        text = "".join(parts).strip()
        if not text and stop_reason == "refusal":
            raise PermanentReplierError("Claude declined to answer this burst")
        if text and stop_reason == "max_tokens" and self.cut_note:
            text = f"{text}\n\n{self.cut_note}"
        footer = "\n\n".join(f for f in (trace.footer(), unavailable_note(calls)) if f)
        return f"{text}\n\n{footer}" if text and footer else text

    async def _stream(
        self,
        prompt: Prompt,
        usage: GenerationProgress,
        system: list[TextBlockParam],
        messages: list[MessageParam],
        trace: ToolTrace,
        parts: list[str],
        wrap_up: bool,
    ) -> str | None:
        """One streamed call; returns its stop reason. Announced as it starts and as it ends
        (how, and what it cost), for traces; the prompt travels in the start's fields, and only
        a listener told to record content reads it."""
        model = prompt.model or self.model
        max_tokens = prompt.max_tokens or self.max_tokens
        usage.announce("model_request", provider="anthropic", model=model, max_tokens=max_tokens,
                       system=system, messages=messages)  # fmt: skip
        before = (usage.input_tokens, usage.output_tokens, usage.cache_read_tokens,
                  usage.cache_write_tokens, len(parts))  # fmt: skip
        try:
            stop_reason = await self._stream_once(
                prompt, usage, system, messages, trace, parts, wrap_up, model, max_tokens
            )
        except BaseException as exc:
            error = "cancelled" if isinstance(exc, asyncio.CancelledError) else type(exc).__name__
            self._announce_end(usage, before, parts, None, error)
            raise
        self._announce_end(usage, before, parts, stop_reason, None)
        return stop_reason

    @staticmethod
    def _announce_end(
        usage: GenerationProgress,
        before: tuple[int, int, int, int, int],
        parts: list[str],
        stop_reason: str | None,
        error: str | None,
    ) -> None:
        """`model_response`: this one call's tokens (the counts since it started), its finish
        reason or its error (`cancelled`: a supersede or a stop), and the text it wrote."""
        input_tokens, output_tokens, cache_read, cache_write, first_part = before
        usage.announce("model_response", response_model=usage.model, finish_reason=stop_reason,
                       error=error, input_tokens=usage.input_tokens - input_tokens,
                       output_tokens=usage.output_tokens - output_tokens,
                       cache_read_tokens=usage.cache_read_tokens - cache_read,
                       cache_write_tokens=usage.cache_write_tokens - cache_write,
                       text="".join(parts[first_part:]))  # fmt: skip

    async def _stream_once(
        self,
        prompt: Prompt,
        usage: GenerationProgress,
        system: list[TextBlockParam],
        messages: list[MessageParam],
        trace: ToolTrace,
        parts: list[str],
        wrap_up: bool,
        model: str,
        max_tokens: int,
    ) -> str | None:
        streamed_chars = 0
        reported_output = 0
        stop_reason: str | None = None
        finished = False
        usage.model = model
        tools = tool_params(prompt.tools, prompt.tools.max_uses - usage.web_searches)
        if prompt.calls is not None:
            tools = [*tools, *cast(list[ToolUnionParam], prompt.calls.params())]
        stream = await self.client.messages.create(
            model=usage.model,
            max_tokens=max_tokens,
            system=system or anthropic.omit,
            messages=messages,
            tools=tools or anthropic.omit,
            tool_choice={"type": "none"} if tools and wrap_up else anthropic.omit,
            stream=True,
        )
        async with stream:  # closed on the way out, cancellation included
            async for event in stream:
                if event.type == "message_start":
                    usage.model = event.message.model or usage.model
                    start = event.message.usage
                    usage.input_tokens += start.input_tokens
                    usage.cache_write_tokens += start.cache_creation_input_tokens or 0
                    usage.cache_read_tokens += start.cache_read_input_tokens or 0
                    reported_output = start.output_tokens
                    usage.output_tokens += reported_output
                elif event.type == "content_block_start":
                    trace.started(event)
                elif event.type == "content_block_stop":
                    trace.stopped(event.index)
                elif event.type == "content_block_delta":
                    trace.delta(event)
                    if event.delta.type == "text_delta":
                        text = trace.paragraph_break(parts[-1] if parts else "") + event.delta.text
                        parts.append(text)
                        usage.streamed.append(text)
                        streamed_chars += len(event.delta.text)
                    elif event.delta.type == "thinking_delta":  # billed as output, not shown
                        streamed_chars += len(event.delta.thinking)
                    # until the API reports output tokens (at the end): four characters a token
                    estimate = max(
                        reported_output, streamed_chars // 4 + 1 if streamed_chars else 0
                    )
                    usage.output_tokens += estimate - reported_output
                    reported_output = estimate
                elif event.type == "message_delta":
                    usage.output_tokens += event.usage.output_tokens - reported_output
                    reported_output = event.usage.output_tokens
                    stop_reason = event.delta.stop_reason
                    server = event.usage.server_tool_use
                    if server is not None:
                        trace.billed(server.web_search_requests)
                elif event.type == "message_stop":
                    finished = True
        if not finished:
            raise RetryableReplierError("the Claude API stream ended before message_stop")
        return stop_reason
