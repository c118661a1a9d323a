"""Traces (bot/ops/traces.py): one trace per burst, in the GenAI conventions, from engine events.

The real engine, the real Claude replier (the Anthropic SDK against the fake Messages API) and a
real SQLite store; the spans go to the OpenTelemetry SDK's in-memory exporter.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import AsyncIterator, Sequence
from pathlib import Path

import pytest
from opentelemetry.sdk.trace import ReadableSpan
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from bot.config import parse_config
from bot.core.engine import Engine
from bot.core.errors import ConfigError
from bot.core.events import IncomingMessage
from bot.ops.trace_export import traces_endpoint, traces_through
from bot.wiring import claude_replier
from storage.sqlite import SqliteStore
from testkit import RecordingFrontend, ScriptedReplier, check_invariants
from testkit.clock import FakeClock
from testkit.fake_anthropic import FakeAnthropic, Plan, ToolUse
from tests.clock_steps import step
from tests.conftest import KEY, SETTINGS, make_engine
from tests.heard import Heard
from tests.test_claude_engine import KEY_ENV, ObservedClaude, fire
from tests.test_streaming import (
    INTERVAL,
    answered,
    drafted,
    start_generation,
    streaming_engine,
    streaming_frontend,
    until,
)
from tests.tool_harness import stdio_server, tool_config, tool_engine

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
    traces = traces_through(SimpleSpanProcessor(exporter), record_content, "w1")
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
    # each from the burst's first message, on the engine's clock: 1.5 s, then 1.5 + 1.5 s
    durations = [(w.end_time or 0) - (w.start_time or 0) for w in windows]
    assert durations[0] >= 1.5e9 and durations[1] >= 3.0e9
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


async def test_each_tool_call_is_an_execute_tool_span_between_its_model_requests(
    store: SqliteStore,
    clock: FakeClock,
    frontend: RecordingFrontend,
    server: FakeAnthropic,
    tmp_path: Path,
) -> None:
    server.queue(
        Plan(text="", tool_uses=[ToolUse("search_tickets", {"query": WORDS[0]})]),
        Plan(text="Found it."),
    )
    config = tool_config(server, stdio_server(tmp_path / "ledger.txt", tmp_path / "hold"))
    async with tool_engine(config, store, clock, frontend) as (engine, _):
        exporter = traced(engine)
        await engine.ingest(said(1))
        await fire(engine, clock)
    spans = exporter.get_finished_spans()
    [generation] = named(spans, "generation")
    [tool] = named(spans, "execute_tool search_tickets")
    assert tool.parent is not None and tool.parent.span_id == generation.context.span_id
    assert {k: tool.attributes[k] for k in (
        "gen_ai.operation.name", "gen_ai.tool.name", "burstbot.tool.outcome",
    )} == {"gen_ai.operation.name": "execute_tool", "gen_ai.tool.name": "search_tickets",
           "burstbot.tool.outcome": "done"}  # fmt: skip
    assert str(tool.attributes["gen_ai.tool.call.id"]).startswith("toolu_")
    asking, answering = [s for s in spans if s.name.startswith("chat ")]
    assert asking.attributes["gen_ai.response.finish_reasons"] == ("tool_use",)
    assert asking.end_time is not None and tool.start_time is not None
    assert answering.start_time is not None and tool.end_time is not None
    assert asking.end_time <= tool.start_time and tool.end_time <= answering.start_time
    assert WORDS[0] not in everything_said(spans)  # the tool's arguments are content too


async def test_recorded_content_is_redacted_like_the_logs(
    store: SqliteStore,
    clock: FakeClock,
    frontend: RecordingFrontend,
    server: FakeAnthropic,
    claude: ObservedClaude,
) -> None:
    engine = make_engine(store, clock, claude, frontend)
    exporter = traced(engine, record_content=True)
    token = "xoxb-1234567890-0987654321-abcdefghijklmnopqrstuvwx"
    await engine.ingest(IncomingMessage(KEY, "m1", "u-alice", "alice", f"my token is {token}"))
    await fire(engine, clock)
    text = everything_said(exporter.get_finished_spans())
    assert "my token is [redacted]" in text and token not in text


def opentelemetry_loaded(config: Path) -> list[str]:
    """The OpenTelemetry SDK and exporter modules a process has loaded once it built the app
    `burstbot run` builds from `config` (every front end, the model client, the web page's
    panel). The Anthropic SDK itself imports the small OpenTelemetry API: that one is always
    there."""
    probe = (
        "import sys\n"
        "SDK = ('opentelemetry.sdk', 'opentelemetry.exporter')\n"
        "import bot.cli.main\n"
        "from bot.app import App\n"
        "from bot.config import load_config\n"
        "from bot.wiring import build_frontends, build_replier, build_store\n"
        f"config = load_config({str(config)!r})\n"
        "App(config, build_store(config), build_replier(config), build_frontends(config))\n"
        "print(json.dumps(sorted(m for m in sys.modules if m.startswith(SDK))))\n"
    )
    env = {**os.environ, "ANTHROPIC_API_KEY": "sk-test-not-a-real-key"}
    done = subprocess.run([sys.executable, "-c", "import json\n" + probe], capture_output=True,
                          text=True, cwd=Path(__file__).parent.parent, env=env,
                          timeout=60)  # fmt: skip
    assert done.returncode == 0, done.stderr
    return list(json.loads(done.stdout))


def test_a_bot_without_telemetry_never_imports_the_opentelemetry_sdk(tmp_path: Path) -> None:
    config = tmp_path / "burstbot.toml"
    storage = f'[storage]\nurl = "sqlite:///{tmp_path / "b.db"}"\n'
    config.write_text(storage)
    assert opentelemetry_loaded(config) == []
    config.write_text(storage + '[telemetry]\notlp_endpoint = "http://127.0.0.1:4318"\n')
    assert "opentelemetry.sdk.trace" in opentelemetry_loaded(config)


async def test_a_speculation_is_a_span_of_its_generation_until_the_close(
    store: SqliteStore, clock: FakeClock
) -> None:
    """The first generation starts early and is superseded before the close; the second starts
    early too, finishes before the close and is held until it."""
    replier = ScriptedReplier(hold=True)
    frontend = RecordingFrontend(clock=clock)
    engine = make_engine(store, clock, replier, frontend, speculate=True,
                         speculate_after_seconds=0.3)  # fmt: skip
    exporter = traced(engine)
    heard = Heard()
    engine.subscribe(heard)
    await engine.ingest(said(1))
    await clock.advance(0.3)
    assert await engine.run_due() == 1
    early = await replier.next_call(0)
    await engine.ingest(said(2))
    await heard.next("superseded", since=0)
    assert early.cancelled
    await engine.idle()
    await clock.advance(0.3)
    assert await engine.run_due() == 1
    (await replier.next_call(1)).finish("an answer")
    await heard.next("held", since=0)
    await step(clock, 1.2)  # the close
    await engine.idle()
    assert len(frontend.posts) == 1

    spans = exporter.get_finished_spans()
    assert len({s.context.trace_id for s in spans}) == 1
    cancelled, answered = named(spans, "generation")
    first, second = named(spans, "speculation")
    assert first.parent is not None and first.parent.span_id == cancelled.context.span_id
    assert second.parent is not None and second.parent.span_id == answered.context.span_id
    assert first.attributes["burstbot.speculation.outcome"] == "superseded"
    assert second.attributes["burstbot.speculation.outcome"] == "reached_close"
    assert [e.name for e in second.events] == ["finished before the close; held"]
    still_open, closed = named(spans, "window")
    assert "burstbot.window.closed_by" not in (still_open.attributes or {})
    assert [e.name for e in still_open.events] == ["the generation ended before the window closed"]
    assert closed.attributes["burstbot.window.closed_by"] == "quiet"


async def test_a_streamed_drafts_posts_and_edits_are_spans_of_its_generation(
    store: SqliteStore, clock: FakeClock
) -> None:
    replier = ScriptedReplier(hold=True)
    frontend = streaming_frontend(clock)
    engine = streaming_engine(store, clock, replier, frontend)
    exporter = traced(engine)
    await engine.ingest(said(1))
    call = await start_generation(engine, clock, replier, 0)
    call.stream(2, "The plan")
    await step(clock, INTERVAL)
    await drafted(store, frontend)
    call.stream(3, " is simple:")
    await step(clock, INTERVAL)
    await until(lambda: len(frontend.edits) == 1)
    call.finish("The plan is simple: ship it.")
    await answered(engine, clock)
    assert frontend.visible() == ["The plan is simple: ship it."]

    spans = exporter.get_finished_spans()
    [generation] = named(spans, "generation")
    drafts = [s for s in spans if s.name.startswith(f"{frontend.platform} draft ")]
    assert [s.name for s in drafts] == [f"{frontend.platform} draft post",
                                        f"{frontend.platform} draft edit"]  # fmt: skip
    for span in drafts:
        assert span.parent is not None and span.parent.span_id == generation.context.span_id
        assert span.attributes["burstbot.draft.outcome"] == "done"
    [final] = named(spans, f"{frontend.platform} edit")  # the reply finishes its draft
    assert final.attributes["burstbot.delivery.outcome"] == "delivered"
    assert len({s.context.trace_id for s in spans}) == 1
