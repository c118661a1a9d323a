"""Traces (bot/ops/traces.py): one trace per burst, in the GenAI conventions, from engine events.

The real engine, the real Claude replier (the Anthropic SDK against the fake Messages API) and a
real SQLite store; the spans go to the OpenTelemetry SDK's in-memory exporter.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Sequence

import pytest
from opentelemetry.sdk.trace import ReadableSpan
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from bot.config import parse_config
from bot.core.engine import Engine
from bot.core.errors import ConfigError
from bot.core.events import IncomingMessage
from bot.ops.traces import Traces, traces_endpoint
from bot.wiring import claude_replier
from storage.sqlite import SqliteStore
from testkit import RecordingFrontend, check_invariants
from testkit.clock import FakeClock
from testkit.fake_anthropic import FakeAnthropic, Plan
from tests.conftest import KEY, SETTINGS, make_engine
from tests.test_claude_engine import KEY_ENV, ObservedClaude, fire

WORDS = ("ultramarine-otter", "quartz-lantern", "velvet-harbour")
"""What people write: none of it may appear in a span unless content recording is on."""


@pytest.fixture
async def claude(server: FakeAnthropic) -> AsyncIterator[ObservedClaude]:
    llm = {"base_url": server.base_url, "api_key_env": "TEST_ANTHROPIC_KEY", "max_retries": 2}
    replier = claude_replier(parse_config({"llm": llm}), KEY_ENV, ObservedClaude)
    assert isinstance(replier, ObservedClaude)
    replier.usages = []
    yield replier
    await replier.aclose()


def traced(engine: Engine, record_content: bool = False) -> InMemorySpanExporter:
    exporter = InMemorySpanExporter()
    traces = Traces.with_processor(SimpleSpanProcessor(exporter), record_content, "w1")
    engine.subscribe(traces.observe)
    return exporter


def said(n: int) -> IncomingMessage:
    return IncomingMessage(KEY, f"m{n}", "u-alice", "alice", f"about the {WORDS[n - 1]}")


def named(spans: Sequence[ReadableSpan], name: str) -> list[ReadableSpan]:
    return [s for s in spans if s.name == name]


def everything_said(spans: Sequence[ReadableSpan]) -> str:
    """Every name, attribute and event of every span, as one text to search."""
    shown = []
    for span in spans:
        shown.append(span.name)
        shown.append(json.dumps({k: str(v) for k, v in (span.attributes or {}).items()}))
        for event in span.events:
            shown.append(event.name + json.dumps({k: str(v) for k, v in event.attributes.items()}))
    return "\n".join(shown)


async def superseded_burst(
    engine: Engine, clock: FakeClock, server: FakeAnthropic, claude: ObservedClaude
) -> None:
    """Two messages; the model starts; a third one cancels it; the next generation answers all."""
    server.queue(Plan(text=" ".join(f"word{i}" for i in range(300)), pause_after=20))
    await engine.ingest(said(1))
    await engine.ingest(said(2))
    await clock.advance(SETTINGS.quiet_seconds)
    await engine.run_due()
    await server.wait_for(lambda: bool(server.streams) and server.streams[0].paused)
    await engine.ingest(said(3))  # newer input while the model streams: superseded
    await engine.idle()
    await fire(engine, clock)


async def test_a_superseded_burst_is_one_trace_with_both_generations_the_cancel_and_the_post(
    store: SqliteStore,
    clock: FakeClock,
    frontend: RecordingFrontend,
    server: FakeAnthropic,
    claude: ObservedClaude,
) -> None:
    engine = make_engine(store, clock, claude, frontend)
    exporter = traced(engine)
    await superseded_burst(engine, clock, server, claude)
    assert len(frontend.posts) == 1
    await check_invariants(store, [KEY.id])

    spans = exporter.get_finished_spans()
    assert len({s.context.trace_id for s in spans}) == 1, [s.name for s in spans]
    [root] = [s for s in spans if s.parent is None]
    assert (root.name, root.attributes["burstbot.message.id"]) == ("ingest", "m1")
    assert [s.attributes["burstbot.message.id"] for s in named(spans, "ingest")] == [
        "m1", "m2", "m3"
    ]  # fmt: skip

    first, second = named(spans, "generation")
    assert first.attributes["burstbot.generation.outcome"] == "superseded"
    assert [e.name for e in first.events] == ["superseded: newer input cancelled the stream"]
    assert second.attributes["burstbot.generation.outcome"] == "posted"
    assert second.attributes["burstbot.burst.messages"] == 3

    cancelled, answered = [s for s in spans if s.name.startswith("chat ")]
    assert cancelled.parent is not None and cancelled.parent.span_id == first.context.span_id
    assert answered.parent is not None and answered.parent.span_id == second.context.span_id
    assert cancelled.attributes["error.type"] == "cancelled"
    model = answered.attributes["gen_ai.request.model"]
    assert model and answered.name == f"chat {model}"
    assert {k: answered.attributes[k] for k in (
        "gen_ai.operation.name", "gen_ai.provider.name", "gen_ai.response.finish_reasons",
    )} == {"gen_ai.operation.name": "chat", "gen_ai.provider.name": "anthropic",
           "gen_ai.response.finish_reasons": ("end_turn",)}  # fmt: skip
    assert answered.attributes["gen_ai.usage.output_tokens"] == server.streams[1].output_tokens
    assert answered.attributes["gen_ai.usage.input_tokens"] > 0

    windows = named(spans, "window")
    assert [w.attributes["burstbot.window.closed_by"] for w in windows] == ["quiet", "quiet"]
    [commit] = named(spans, "commit")
    assert commit.attributes["burstbot.commit.outcome"] == "committed"
    [post] = named(spans, f"{frontend.platform} post")
    assert post.attributes["burstbot.delivery.outcome"] == "delivered"
    assert post.attributes["burstbot.delivery.parts"] == 1
    assert commit.end_time is not None and post.start_time is not None
    assert post.start_time >= commit.end_time

    text = everything_said(spans)
    assert not [word for word in WORDS if word in text]  # no prompt or answer text


async def test_content_is_recorded_only_when_asked(
    store: SqliteStore,
    clock: FakeClock,
    frontend: RecordingFrontend,
    server: FakeAnthropic,
    claude: ObservedClaude,
) -> None:
    engine = make_engine(store, clock, claude, frontend)
    exporter = traced(engine, record_content=True)
    await superseded_burst(engine, clock, server, claude)
    spans = exporter.get_finished_spans()
    answered = [s for s in spans if s.name.startswith("chat ")][-1]
    asked = json.loads(str(answered.attributes["gen_ai.input.messages"]))
    assert asked[-1]["role"] == "user"
    assert all(word in asked[-1]["parts"][-1]["content"] for word in WORDS)
    [output] = json.loads(str(answered.attributes["gen_ai.output.messages"]))
    assert output["finish_reason"] == "end_turn"
    assert WORDS[2] in output["parts"][0]["content"]  # the fake model echoes the burst


def test_telemetry_config_is_strict() -> None:
    assert parse_config({}).telemetry.otlp_endpoint == ""
    for bad in ("127.0.0.1:4318", "ftp://collector", "http://user:pw@collector:4318"):
        with pytest.raises(ConfigError) as caught:
            parse_config({"telemetry": {"otlp_endpoint": bad}})
        assert "\n" not in str(caught.value) and "otlp_endpoint" in str(caught.value)
        assert "pw" not in str(caught.value)
    with pytest.raises(ConfigError):
        parse_config({"telemetry": {"endpoint": "http://collector:4318"}})
    assert traces_endpoint("http://c:4318") == "http://c:4318/v1/traces"
    assert traces_endpoint("http://c:4318/custom/traces") == "http://c:4318/custom/traces"
