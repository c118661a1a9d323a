"""OpenTelemetry traces from the engine's named events: one trace per burst, exported over OTLP.

`Traces.observe` is an engine listener like `Metrics.observe`: the pipeline emits `accepted`,
`generating`, `model_request`, `committed`, `delivering`, ... and this turns them into spans,
so nothing in the engine knows about OpenTelemetry. The burst's trace id is the one the store
chose when its first message was stored (`bot/core/trace_context.py`): every process that
generates, commits or takes the burst over reads it back from the lease and joins the same trace.
The first message's ingest span is the trace's root, with exactly the stored ids.

Spans: `ingest` (each message, edit or delete), `window` (until it closed, and why),
`speculation` (a generation started before the close), `generation` (each, with its outcome),
`chat {model}` (each model request, GenAI conventions), `execute_tool {tool}` (each MCP call),
`{platform} draft post` / `draft edit` (the streamed draft), `commit` and `{platform} post` /
`{platform} edit` (each delivery of a reply). Prompt and answer text is recorded only with
`[telemetry] record_content = true` (in the GenAI shapes of `genai.py`); every string attribute
goes through `redact` first. This module imports the OpenTelemetry SDK: the app imports it (through
`trace_export.py`, which sets up the exporter) only when `[telemetry] otlp_endpoint` is set.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from opentelemetry import context as otel_context
from opentelemetry import trace
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.id_generator import IdGenerator, RandomIdGenerator
from opentelemetry.trace import Span, SpanContext, SpanKind, Status, StatusCode, TraceFlags

from bot.core.secrets import redact
from bot.core.trace_context import TraceIds, parse_trace_context
from bot.ops.genai import PROVIDER, input_messages, output_messages

log = logging.getLogger("burstbot.traces")

MAX_REMEMBERED = 10_000  # bursts and replies followed at once; the oldest are forgotten past it
Attributes = dict[str, str | bool | int | float | Sequence[str]]


class BurstIds(IdGenerator):
    """Random ids, except for a burst's root span, which takes the ids the store chose for it
    (`reserve` just before starting that span)."""

    def __init__(self) -> None:
        self._random = RandomIdGenerator()
        self._reserved: TraceIds | None = None

    def reserve(self, ids: TraceIds) -> None:
        self._reserved = ids

    def generate_trace_id(self) -> int:
        reserved = self._reserved
        return self._random.generate_trace_id() if reserved is None else reserved.trace_id

    def generate_span_id(self) -> int:
        reserved, self._reserved = self._reserved, None
        return self._random.generate_span_id() if reserved is None else reserved.span_id


@dataclass
class BurstSpans:
    """The open spans of one conversation's pending burst in this process."""

    parent: otel_context.Context
    window: Span | None = None
    speculation: Span | None = None
    generation: Span | None = None
    chat: Span | None = None
    commit: Span | None = None
    tools: dict[str, Span] = field(default_factory=dict)
    closed_by: str = "quiet"


def _parent(ids: TraceIds) -> otel_context.Context:
    remote = SpanContext(ids.trace_id, ids.span_id, is_remote=True,
                         trace_flags=TraceFlags(TraceFlags.SAMPLED))  # fmt: skip
    return trace.set_span_in_context(trace.NonRecordingSpan(remote), otel_context.Context())


def _clean(value: object) -> str:
    return redact(str(value))


class Traces:
    """Spans from engine events (a listener: never raises into the pipeline)."""

    def __init__(
        self, provider: TracerProvider, ids: BurstIds, record_content: bool = False
    ) -> None:
        self.provider = provider
        self.ids = ids
        self.record_content = record_content
        self.tracer = provider.get_tracer("burstbot")
        self._bursts: dict[str, BurstSpans] = {}
        self._replies: dict[int, otel_context.Context] = {}  # committed, not yet delivered
        self._posts: dict[int, Span] = {}

    def shutdown(self) -> None:
        """Export what is buffered (bounded by the exporter's timeout) and stop."""
        self.provider.shutdown()

    def observe(self, name: str, fields: dict[str, object]) -> None:
        try:
            self._observe(name, fields)
        except Exception:
            log.debug("traces: cannot trace %s", name, exc_info=True)

    # the events -------------------------------------------------------------------------------
    def _observe(self, name: str, fields: dict[str, object]) -> None:
        cid = fields.get("conversation")
        handler = _HANDLERS.get(name)
        if handler is None:
            return
        if name in _REPLY_EVENTS:
            handler(self, str(cid or ""), fields)
        elif isinstance(cid, str):
            handler(self, cid, fields)

    def _start(
        self,
        name: str,
        parent: otel_context.Context,
        attributes: Attributes,
        kind: SpanKind = SpanKind.INTERNAL,
    ) -> Span:
        clean = {k: _clean(v) if isinstance(v, str) else v for k, v in attributes.items()}
        return self.tracer.start_span(name, context=parent, kind=kind, attributes=clean)

    def _point(self, name: str, parent: otel_context.Context, attributes: Attributes) -> None:
        self._start(name, parent, attributes).end()

    def _remember(self, cid: str, spans: BurstSpans) -> BurstSpans:
        self._bursts.pop(cid, None)
        self._bursts[cid] = spans
        while len(self._bursts) > MAX_REMEMBERED:
            self._forget(next(iter(self._bursts)))
        return spans

    def _burst(self, cid: str) -> BurstSpans | None:
        """The spans of the burst this process holds the lease of, if it is traced."""
        return self._bursts.get(cid)

    def _forget(self, cid: str) -> None:
        spans = self._bursts.pop(cid, None)
        if spans is None:
            return
        for span in (spans.chat, *spans.tools.values(), spans.speculation, spans.generation,
                     spans.window, spans.commit):  # fmt: skip
            if span is not None and span.is_recording():
                span.end()

    def ingested(self, cid: str, fields: dict[str, object]) -> None:
        ids = parse_trace_context(fields.get("trace_context"))
        if ids is None:
            return
        attributes: Attributes = {
            "gen_ai.conversation.id": cid,
            "burstbot.version": int(str(fields.get("version", 0))),
            "burstbot.message.id": str(fields.get("message_id", "")),
            "burstbot.change": str(fields.get("change", "")),
            "burstbot.opened": bool(fields.get("opened")),
        }
        if fields.get("opened"):  # the burst's root span: the ids the store chose
            self.ids.reserve(ids)
            self._point("ingest", otel_context.Context(), attributes)
        else:
            self._point("ingest", _parent(ids), attributes)

    def leased(self, cid: str, fields: dict[str, object]) -> None:
        """A lease starts this process's spans of the burst (a new lease, new spans: what an
        earlier lease left open here is ended)."""
        self._forget(cid)
        ids = parse_trace_context(fields.get("trace_context"))
        if ids is None:
            return
        spans = self._remember(cid, BurstSpans(_parent(ids)))
        if fields.get("taken_over"):
            self._point("lease takeover", spans.parent, {"gen_ai.conversation.id": cid})

    def generating(self, cid: str, fields: dict[str, object]) -> None:
        spans = self._burst(cid)
        if spans is None:
            return
        spans.closed_by = str(fields.get("closed_by", "quiet"))
        spans.window = self._window(cid, spans, fields.get("waited"))
        attributes: Attributes = {
            "gen_ai.conversation.id": cid,
            "gen_ai.operation.name": "invoke_agent",  # burstbot answering the burst
            "gen_ai.agent.name": "burstbot",
            "burstbot.version": int(str(fields.get("version", 0))),
            "burstbot.burst.messages": int(str(fields.get("burst", 0))),
            "burstbot.speculative": bool(fields.get("speculative")),
            "burstbot.attempt": int(str(fields.get("attempt", 1))),
        }
        spans.generation = self._start("generation", spans.parent, attributes)
        if fields.get("speculative"):
            spans.speculation = self._start(
                "speculation", trace.set_span_in_context(spans.generation), {}
            )
        else:
            self._close_window(spans)

    def _window(self, cid: str, spans: BurstSpans, waited: object) -> Span:
        """The burst's window, from its first pending message (`waited` seconds ago on the
        engine's clock, whichever process stored it) until it closed: drawn by the process that
        generates, so no process keeps a span open for a burst another one answers."""
        seconds = float(waited) if isinstance(waited, int | float) and waited > 0 else 0.0
        started = time.time_ns() - int(seconds * 1e9)
        attributes = {"gen_ai.conversation.id": _clean(cid)}
        return self.tracer.start_span("window", context=spans.parent, attributes=attributes,
                                      start_time=started)  # fmt: skip

    def _close_window(self, spans: BurstSpans) -> None:
        if spans.window is not None:
            spans.window.set_attribute("burstbot.window.closed_by", spans.closed_by)
            spans.window.end()
            spans.window = None

    def window_closed(self, cid: str, fields: dict[str, object]) -> None:
        spans = self._burst(cid)
        if spans is None:
            return
        self._close_window(spans)
        if spans.speculation is not None:
            spans.speculation.set_attribute("burstbot.speculation.outcome", "reached_close")
            spans.speculation.end()
            spans.speculation = None

    def held(self, cid: str, fields: dict[str, object]) -> None:
        spans = self._burst(cid)
        if spans is not None and spans.speculation is not None:
            spans.speculation.add_event("finished before the close; held")

    def model_request(self, cid: str, fields: dict[str, object]) -> None:
        spans = self._burst(cid)
        if spans is None or spans.generation is None:
            return
        model = str(fields.get("model", ""))
        attributes: Attributes = {
            "gen_ai.operation.name": "chat",
            "gen_ai.provider.name": str(fields.get("provider", PROVIDER)),
            "gen_ai.system": str(fields.get("provider", PROVIDER)),  # before semconv 1.37
            "gen_ai.request.model": model,
            "gen_ai.request.max_tokens": int(str(fields.get("max_tokens", 0))),
            "gen_ai.conversation.id": cid,
        }
        if self.record_content:
            system, messages = input_messages(fields.get("system"), fields.get("messages"))
            attributes["gen_ai.system_instructions"] = system
            attributes["gen_ai.input.messages"] = messages
        parent = trace.set_span_in_context(spans.generation)
        spans.chat = self._start(f"chat {model}", parent, attributes, SpanKind.CLIENT)

    def model_response(self, cid: str, fields: dict[str, object]) -> None:
        spans = self._burst(cid)
        if spans is None or spans.chat is None:
            return
        chat, spans.chat = spans.chat, None
        reason = fields.get("finish_reason")
        chat.set_attributes({
            "gen_ai.response.model": _clean(fields.get("response_model", "")),
            "gen_ai.usage.input_tokens": int(str(fields.get("input_tokens", 0))),
            "gen_ai.usage.output_tokens": int(str(fields.get("output_tokens", 0))),
            "gen_ai.usage.cache_read.input_tokens": int(str(fields.get("cache_read_tokens", 0))),
            "gen_ai.usage.cache_creation.input_tokens": int(
                str(fields.get("cache_write_tokens", 0))
            ),
        })  # fmt: skip
        if reason:
            chat.set_attribute("gen_ai.response.finish_reasons", [str(reason)])
        if self.record_content:
            output = output_messages(str(fields.get("text", "")), str(reason or ""))
            chat.set_attribute("gen_ai.output.messages", _clean(output))
        error = fields.get("error")
        if error:
            chat.set_attribute("error.type", str(error))
            chat.set_status(Status(StatusCode.ERROR, str(error)))
        chat.end()

    def tool_started(self, cid: str, fields: dict[str, object]) -> None:
        spans = self._burst(cid)
        if spans is None or spans.generation is None:
            return
        call_id = str(fields.get("tool_use_id", ""))
        spans.tools[call_id] = self._tool_span(spans, fields)

    def _tool_span(self, spans: BurstSpans, fields: dict[str, object]) -> Span:
        tool = str(fields.get("tool", ""))
        attributes: Attributes = {
            "gen_ai.operation.name": "execute_tool",
            "gen_ai.tool.name": tool,
            "gen_ai.tool.call.id": str(fields.get("tool_use_id", "")),
            "gen_ai.tool.type": "extension",
            "burstbot.tool.server": str(fields.get("server", "")),
        }
        if self.record_content and "arguments" in fields:
            attributes["gen_ai.tool.call.arguments"] = str(fields["arguments"])
        parent = trace.set_span_in_context(spans.generation or trace.INVALID_SPAN)
        return self._start(f"execute_tool {tool}", parent, attributes)

    def tool_call(self, cid: str, fields: dict[str, object]) -> None:
        spans = self._burst(cid)
        if spans is None or spans.generation is None:
            return
        span = spans.tools.pop(str(fields.get("tool_use_id", "")), None)
        if span is None:  # given from the burst's record: nothing ran
            span = self._tool_span(spans, fields)
        outcome = str(fields.get("outcome", ""))
        span.set_attribute("burstbot.tool.outcome", outcome)
        if self.record_content and "result" in fields:
            span.set_attribute("gen_ai.tool.call.result", _clean(fields["result"]))
        if outcome in ("failed", "unknown", "unavailable"):
            span.set_attribute("error.type", outcome)
            span.set_status(Status(StatusCode.ERROR, outcome))
        span.end()

    def generation(self, cid: str, fields: dict[str, object]) -> None:
        spans = self._burst(cid)
        if spans is None or spans.generation is None:
            return
        for call_id in list(spans.tools):
            spans.tools.pop(call_id).end()
        if spans.chat is not None:
            spans.chat.end()
            spans.chat = None
        outcome = str(fields.get("outcome", ""))
        if spans.speculation is not None:
            spans.speculation.set_attribute("burstbot.speculation.outcome", outcome)
            spans.speculation.end()
            spans.speculation = None
        if spans.window is not None:  # ended before the close: newer input moved it later
            spans.window.add_event("the generation ended before the window closed")
            spans.window.end()
            spans.window = None
        span, spans.generation = spans.generation, None
        span.set_attributes({
            "burstbot.generation.outcome": outcome,
            "gen_ai.response.model": _clean(fields.get("model", "")),
            "gen_ai.usage.input_tokens": int(str(fields.get("input_tokens", 0))),
            "gen_ai.usage.output_tokens": int(str(fields.get("output_tokens", 0))),
        })  # fmt: skip
        if outcome == "superseded":  # the output it streamed is wasted
            wasted = {"burstbot.wasted_output_tokens": int(str(fields.get("output_tokens", 0)))}
            span.add_event("superseded: newer input cancelled the stream", wasted)
        elif outcome == "failed":
            span.set_status(Status(StatusCode.ERROR, _clean(fields.get("error") or "failed")))
        span.end()

    def committing(self, cid: str, fields: dict[str, object]) -> None:
        spans = self._burst(cid)
        if spans is not None:
            spans.commit = self._start("commit", spans.parent, {"gen_ai.conversation.id": cid})

    def committed(self, cid: str, fields: dict[str, object], outcome: str) -> None:
        spans = self._burst(cid)
        if spans is None:
            return
        span, spans.commit = spans.commit, None
        if span is None:
            span = self._start("commit", spans.parent, {"gen_ai.conversation.id": cid})
        span.set_attribute("burstbot.commit.outcome", outcome)
        if "version" in fields:
            span.set_attribute("burstbot.version", int(str(fields["version"])))
        reply_id = fields.get("reply_id")
        if isinstance(reply_id, int):
            span.set_attribute("burstbot.reply.id", reply_id)
            self._replies[reply_id] = spans.parent
            while len(self._replies) > MAX_REMEMBERED:
                del self._replies[next(iter(self._replies))]
        span.end()
        if outcome != "discarded":
            self._close_window(spans)
            self._forget(cid)

    def draft_call(self, cid: str, fields: dict[str, object]) -> None:
        """A post or an edit of the streamed draft while the model writes, under its
        generation."""
        spans = self._burst(cid)
        if spans is None:
            return
        seconds = fields.get("seconds")
        elapsed = float(seconds) if isinstance(seconds, int | float) and seconds > 0 else 0.0
        platform, outcome = str(fields.get("platform", "")), str(fields.get("outcome", ""))
        parent = spans.parent
        if spans.generation is not None:
            parent = trace.set_span_in_context(spans.generation)
        attributes = {"gen_ai.conversation.id": _clean(cid), "burstbot.platform": _clean(platform),
                      "burstbot.draft.outcome": _clean(outcome)}  # fmt: skip
        span = self.tracer.start_span(
            f"{platform} draft {fields.get('call', '')}", context=parent, kind=SpanKind.CLIENT,
            attributes=attributes, start_time=time.time_ns() - int(elapsed * 1e9),
        )  # fmt: skip
        if outcome != "done":
            span.set_attribute("error.type", _clean(outcome))
            span.set_status(Status(StatusCode.ERROR, _clean(outcome)))
        span.end()

    def delivering(self, cid: str, fields: dict[str, object]) -> None:
        reply_id = fields.get("reply_id")
        parent = self._replies.get(reply_id) if isinstance(reply_id, int) else None
        if parent is None or not isinstance(reply_id, int):
            return
        platform = str(fields.get("platform", ""))
        verb = "edit" if fields.get("edit") else "post"
        attributes: Attributes = {
            "gen_ai.conversation.id": cid,
            "burstbot.platform": platform,
            "burstbot.reply.id": reply_id,
            "burstbot.delivery.claim": int(str(fields.get("attempt", 1))),
        }
        stale = self._posts.pop(reply_id, None)
        if stale is not None:
            stale.end()
        self._posts[reply_id] = self._start(f"{platform} {verb}", parent, attributes,
                                            SpanKind.CLIENT)  # fmt: skip

    def delivered(self, cid: str, fields: dict[str, object], outcome: str) -> None:
        reply_id = fields.get("reply_id")
        if not isinstance(reply_id, int) or (span := self._posts.pop(reply_id, None)) is None:
            return
        span.set_attribute("burstbot.delivery.outcome", outcome)
        if outcome == "delivered":
            span.set_attribute("burstbot.delivery.parts", len(_list(fields.get("parts"))))
        else:
            error = str(fields.get("error", outcome))
            span.set_attribute("error.type", outcome)
            span.set_status(Status(StatusCode.ERROR, _clean(error)))
        if outcome in ("delivered", "delivery_failed"):
            self._replies.pop(reply_id, None)
        span.end()


def _list(value: object) -> list[Any]:
    return value if isinstance(value, list) else []


def _committed(outcome: str) -> Any:
    return lambda traces, cid, fields: traces.committed(cid, fields, outcome)


def _delivered(outcome: str) -> Any:
    return lambda traces, cid, fields: traces.delivered(cid, fields, outcome)


_HANDLERS: dict[str, Any] = {
    "accepted": Traces.ingested,
    "lease_acquired": Traces.leased,
    "generating": Traces.generating,
    "window_closed": Traces.window_closed,
    "held": Traces.held,
    "model_request": Traces.model_request,
    "model_response": Traces.model_response,
    "tool_started": Traces.tool_started,
    "tool_call": Traces.tool_call,
    "generation": Traces.generation,
    "committing": Traces.committing,
    "committed": _committed("committed"),
    "discarded": _committed("discarded"),
    "stopped": _committed("stopped"),
    "apology": _committed("apology"),
    "draft_call": Traces.draft_call,
    "delivering": Traces.delivering,
    "delivered": _delivered("delivered"),
    "delivery_retry": _delivered("delivery_retry"),
    "delivery_failed": _delivered("delivery_failed"),
    "delivery_claim_lost": _delivered("delivery_claim_lost"),
}
_REPLY_EVENTS = frozenset({"delivering", "delivered", "delivery_retry", "delivery_failed",
                           "delivery_claim_lost"})  # fmt: skip
