"""Tools that act exactly once (G14): the real Claude replier against the fake Messages API, the
real MCP client against a real MCP server (tests/tool_server.py, over stdio and Streamable HTTP),
the real engine on SQLite with a fake clock.

The server counts its own `create_ticket` calls per idempotency key; that count is what these
tests assert, never ours."""

from __future__ import annotations

import asyncio
import json
import sys
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from bot.core.actions import ActionLog
from bot.core.burst import Burst
from bot.core.engine import Engine
from bot.core.events import IncomingMessage
from bot.core.tool_calls import DATA_NOTE, MAY_HAVE_RUN, BurstTools, ToolBox
from storage.sqlite import SqliteStore
from testkit import RecordingFrontend, check_invariants
from testkit.clock import FakeClock
from testkit.fake_anthropic import FakeAnthropic, Plan, ToolUse
from tests.conftest import KEY, SETTINGS
from tests.tool_harness import (
    all_text,
    http_process,
    http_server,
    stdio_server,
    tool_config,
    tool_engine,
    tool_results,
)
from tests.tool_server import calls_per_key

TICKET = ToolUse("create_ticket", {"title": "printer on fire"})


def said(n: int, text: str) -> IncomingMessage:
    return IncomingMessage(KEY, f"m{n}", "u1", "alice", text)


async def fire(engine: Engine, clock: FakeClock) -> None:
    await clock.advance(SETTINGS.quiet_seconds)
    await engine.run_due()
    await engine.idle()


def ledger_starts(ledger: Path) -> int:
    return sum(calls_per_key(ledger).values())


async def until(predicate: object, within: float = 20.0) -> None:
    async with asyncio.timeout(within):
        while not predicate():  # type: ignore[operator]  # noqa: ASYNC110
            await asyncio.sleep(0.01)


@pytest.fixture
def ledger(tmp_path: Path) -> Path:
    return tmp_path / "ledger.txt"


@pytest.fixture
def hold(tmp_path: Path) -> Path:
    return tmp_path / "hold"


async def test_stdio_a_ticket_is_created_once_and_the_reply_names_it(
    store: SqliteStore,
    clock: FakeClock,
    frontend: RecordingFrontend,
    server: FakeAnthropic,
    ledger: Path,
    hold: Path,
) -> None:
    server.queue(
        Plan(
            text="Let me look first.", tool_uses=[ToolUse("search_tickets", {"query": "printer"})]
        ),
        Plan(text="", tool_uses=[TICKET]),
        Plan(text="Opened OPS-201 for the printer."),
    )
    config = tool_config(server, stdio_server(ledger, hold))
    async with tool_engine(config, store, clock, frontend) as (engine, _):
        await engine.ingest(said(1, "the printer is on fire, open a ticket"))
        await fire(engine, clock)
    system = [b["text"] for b in server.requests[0].system_blocks]
    assert DATA_NOTE in system  # tool output is data, never instructions
    offered = sorted(t["name"] for t in server.requests[0].body["tools"])
    assert offered == ["create_ticket", "search_tickets"]
    create = next(t for t in server.requests[0].body["tools"] if t["name"] == "create_ticket")
    assert "idempotency_key" not in create["input_schema"]["properties"]  # ours to fill in
    [search] = tool_results(server.requests[1])
    assert search["content"] == "OPS-101: printer on fire"
    [created] = tool_results(server.requests[2])
    assert created["content"] == "created OPS-201 (normal priority): printer on fire"
    assert frontend.texts() == ["Let me look first.\n\nOpened OPS-201 for the printer."]
    counts = calls_per_key(ledger)
    assert list(counts.values()) == [1]
    log = store
    assert isinstance(log, ActionLog)
    actions = await log.actions(KEY.id)
    assert [(a.tool, a.state, a.read_only) for a in actions] == [
        ("search_tickets", "done", True), ("create_ticket", "done", False)
    ]  # fmt: skip
    assert list(counts) == [actions[1].idempotency_key]  # the server got our key
    [generation] = await store.generations(KEY.id)
    assert generation.outcome == "posted"
    await check_invariants(store, [KEY.id])


async def test_http_supersede_while_create_ticket_runs_makes_one_ticket_and_one_reply(
    store: SqliteStore,
    clock: FakeClock,
    frontend: RecordingFrontend,
    server: FakeAnthropic,
    ledger: Path,
    hold: Path,
) -> None:
    """The person adds "make it high priority" while the ticket is being created: the call is
    finished and recorded, the first generation is superseded, and the second one is given the
    action (and its result) instead of making it again."""
    await asyncio.to_thread(hold.touch)
    server.queue(
        Plan(text="", tool_uses=[TICKET]),
        Plan(text="", tool_uses=[TICKET]),  # the second generation asks for the same call again
        Plan(text="OPS-201 is open for the printer; I noted it is high priority."),
    )
    finishing: list[str] = []
    async with http_process(ledger, hold) as port:
        config = tool_config(server, http_server(port))
        async with tool_engine(config, store, clock, frontend) as (engine, _):
            engine.subscribe(lambda name, fields: finishing.append(name))
            await engine.ingest(said(1, "the printer is on fire, open a ticket"))
            await clock.advance(SETTINGS.quiet_seconds)
            await engine.run_due()
            await until(lambda: ledger_starts(ledger) == 1)  # create_ticket is running
            await engine.ingest(said(2, "make it high priority"))
            await until(lambda: "tool_finishing" in finishing)  # superseded during the call
            await asyncio.to_thread(hold.unlink)
            await engine.idle()
            assert frontend.texts() == []
            await fire(engine, clock)
    assert calls_per_key(ledger) == {next(iter(calls_per_key(ledger))): 1}
    assert frontend.texts() == ["OPS-201 is open for the printer; I noted it is high priority."]
    second = server.requests[1]
    assert "alice: make it high priority" in all_text(second)
    assert "created OPS-201 (normal priority): printer on fire" in all_text(second)
    [given] = tool_results(server.requests[2])  # the repeated call was given, not made
    assert given["content"] == "created OPS-201 (normal priority): printer on fire"
    superseded, posted = await store.generations(KEY.id)
    assert (superseded.outcome, posted.outcome) == ("superseded", "posted")
    assert isinstance(store, ActionLog)
    [action] = await store.actions(KEY.id)
    assert (action.state, action.lease_token) == ("done", superseded.lease_token)
    await check_invariants(store, [KEY.id])


class BeforeTheClose(ToolBox):
    """A generation that started speculatively: its window closes when the test says (the
    seam a speculating engine uses: `for_burst(..., window_closed=<set at the close>)`)."""

    closes: asyncio.Event

    def for_burst(
        self, burst: Burst, emit: Callable[..., None], window_closed: asyncio.Event | None = None
    ) -> BurstTools:
        return super().for_burst(burst, emit, self.closes)


async def test_speculation_never_calls_create_ticket_before_the_window_closes(
    store: SqliteStore,
    clock: FakeClock,
    frontend: RecordingFrontend,
    server: FakeAnthropic,
    ledger: Path,
    hold: Path,
) -> None:
    server.queue(
        Plan(text="", tool_uses=[ToolUse("search_tickets", {"query": "printer"}), TICKET]),
        Plan(text="Opened OPS-201."),
    )
    events: list[str] = []
    BeforeTheClose.closes = asyncio.Event()
    config = tool_config(server, stdio_server(ledger, hold))
    async with tool_engine(config, store, clock, frontend, BeforeTheClose) as (engine, _):
        engine.subscribe(lambda name, fields: events.append(name))
        await engine.ingest(said(1, "open a ticket for the printer"))
        await clock.advance(SETTINGS.quiet_seconds)
        await engine.run_due()
        await until(lambda: "tool_waiting" in events)  # the write waits for the close
        assert calls_per_key(ledger) == {}
        assert isinstance(store, ActionLog)
        assert [a.tool for a in await store.actions(KEY.id)] == ["search_tickets"]  # read-only ran
        BeforeTheClose.closes.set()
        await engine.idle()
    assert list(calls_per_key(ledger).values()) == [1]
    assert frontend.texts() == ["Opened OPS-201."]


async def test_speculation_superseded_before_the_close_records_and_runs_nothing(
    store: SqliteStore,
    clock: FakeClock,
    frontend: RecordingFrontend,
    server: FakeAnthropic,
    ledger: Path,
    hold: Path,
) -> None:
    server.queue(Plan(text="", tool_uses=[TICKET]), Plan(text="Nothing to open yet."))
    events: list[str] = []
    BeforeTheClose.closes = asyncio.Event()
    config = tool_config(server, stdio_server(ledger, hold))
    async with tool_engine(config, store, clock, frontend, BeforeTheClose) as (engine, _):
        engine.subscribe(lambda name, fields: events.append(name))
        await engine.ingest(said(1, "open a ticket"))
        await clock.advance(SETTINGS.quiet_seconds)
        await engine.run_due()
        await until(lambda: "tool_waiting" in events)
        await engine.ingest(said(2, "wait, never mind"))
        await engine.idle()
        assert isinstance(store, ActionLog)
        assert await store.actions(KEY.id) == []
        BeforeTheClose.closes.set()
        server.queue(Plan(text="Nothing to open, then."))
        await fire(engine, clock)
    assert calls_per_key(ledger) == {}


async def test_a_server_that_is_down_leaves_its_tools_out_and_the_answer_says_so(
    store: SqliteStore,
    clock: FakeClock,
    frontend: RecordingFrontend,
    server: FakeAnthropic,
    caplog: pytest.LogCaptureFixture,
) -> None:
    server.queue(Plan(text="I cannot open tickets right now."))
    config = tool_config(server, http_server(1))  # nothing listens on port 1
    async with tool_engine(config, store, clock, frontend) as (engine, _):
        await engine.ingest(said(1, "open a ticket"))
        await fire(engine, clock)
    assert "tools" not in server.requests[0].body
    assert frontend.texts() == [
        "I cannot open tickets right now.\n\n_Some tools were unavailable for this answer "
        "(tracker)._"
    ]
    named = "MCP server 'tracker' (http://127.0.0.1:1/mcp): unavailable: "
    warnings = [r.getMessage() for r in caplog.records if named in r.getMessage()]
    assert len(warnings) == 1 and warnings[0].endswith("; its tools are off until it answers")


async def test_an_allowed_tool_the_server_does_not_list_is_one_config_line(
    server: FakeAnthropic, ledger: Path, hold: Path
) -> None:
    from bot.core.errors import ConfigError
    from bot.tool_servers import McpHub

    mcp = {**stdio_server(ledger, hold), "allowed_tools": ["create_ticket", "delete_ticket"]}
    hub = McpHub(tool_config(server, mcp).tools.mcp)
    hub.start()
    with pytest.raises(ConfigError) as caught:
        await hub.first_attempts()
    assert str(caught.value) == (
        "tools.mcp.tracker.allowed_tools: the server lists no tool 'delete_ticket' "
        "(it lists: create_ticket, search_tickets)"
    )


async def test_a_call_recorded_without_a_result_is_given_as_may_have_run(
    store: SqliteStore,
    clock: FakeClock,
    frontend: RecordingFrontend,
    server: FakeAnthropic,
    ledger: Path,
    hold: Path,
) -> None:
    """A takeover finds the call recorded but not its result: it is never made again."""
    from bot.core.actions import NewAction, canonical_arguments, idempotency_key

    await store.ingest(said(1, "open a ticket for the printer"), clock.now(), SETTINGS.timing)
    lease = await store.acquire_lease(KEY.id, "dead", clock.now(), SETTINGS.lease_ttl_seconds)
    assert lease is not None
    arguments = canonical_arguments(TICKET.input)
    key = idempotency_key(KEY.id, 0, "tracker", "create_ticket", arguments)
    dead = NewAction(KEY.id, lease.token, 0, 1, key, "tracker", "create_ticket", arguments,
                     False, "toolu_dead", "u1", clock.now())  # fmt: skip
    await store.begin_action(dead)
    server.queue(
        Plan(text="", tool_uses=[TICKET]),
        Plan(text="The ticket may already have been created; please check the tracker."),
    )
    config = tool_config(server, stdio_server(ledger, hold))
    async with tool_engine(config, store, clock, frontend) as (engine, _):
        await clock.advance(SETTINGS.lease_ttl_seconds + 1)
        await engine.run_due()
        await engine.idle()
    assert calls_per_key(ledger) == {}
    assert "may have run" in all_text(server.requests[0])
    [given] = tool_results(server.requests[1])
    assert (given["content"], given.get("is_error")) == (MAY_HAVE_RUN, True)
    assert frontend.texts() == [
        "The ticket may already have been created; please check the tracker."
    ]
    assert json.loads((await store.actions(KEY.id))[0].arguments) == TICKET.input


@pytest.mark.slow
@pytest.mark.parametrize("killed", ["during the call", "after its result was recorded"])
async def test_kill_9_during_create_ticket_never_makes_a_second_ticket(
    tmp_path: Path, frontend: RecordingFrontend, server: FakeAnthropic, ledger: Path, hold: Path,
    killed: str,
) -> None:  # fmt: skip
    """A real bot process is killed with SIGKILL while create_ticket runs (or right after its
    result was recorded); the process that takes over asks for the ticket again and is given the
    record: the server's count stays 1, and the reply says the ticket may have been created (or,
    with the result recorded, names it)."""
    db = tmp_path / "bot.db"
    await asyncio.to_thread(hold.touch)
    after_result = killed == "after its result was recorded"
    server.queue(
        Plan(text="", tool_uses=[TICKET]),
        *([Plan(text="never finished", pause_after=0)] if after_result else []),
        Plan(text="", tool_uses=[TICKET]),  # the takeover's model asks again
        Plan(text="OPS-201 is open." if after_result else "The ticket may have been created."),
    )
    async with http_process(ledger, hold) as port:
        settings = {"db": str(db), "api_url": server.base_url,
                    "mcp_url": f"http://127.0.0.1:{port}/mcp"}  # fmt: skip
        worker = await asyncio.create_subprocess_exec(
            sys.executable, "-m", "tests.tool_worker", json.dumps(settings),
            stdout=asyncio.subprocess.PIPE, cwd=Path(__file__).parent.parent,
        )  # fmt: skip
        try:
            assert worker.stdout is not None
            async with asyncio.timeout(30):
                assert (await worker.stdout.readline()).strip() == b"READY"
            await until(lambda: ledger_starts(ledger) == 1)
            if after_result:
                await asyncio.to_thread(hold.unlink)
                await until(lambda: len(server.requests) == 2 and server.streams[1].paused)
        finally:
            worker.kill()  # SIGKILL: nothing is cleaned up
            await worker.wait()
        if not after_result:
            await asyncio.to_thread(hold.unlink)  # the server finishes a call nobody awaits
            await until(lambda: "done" in ledger.read_text())
        store = SqliteStore(str(db))
        await store.open()
        try:
            clock = FakeClock(time.time() + 60)  # past the dead worker's lease
            config = tool_config(server, http_server(port))
            async with tool_engine(config, store, clock, frontend) as (engine, _):
                await engine.run_due()
                await engine.idle()
            [action] = await store.actions(KEY.id)
            assert action.state == ("done" if after_result else "unknown")
            [reply] = await store.replies(KEY.id)
        finally:
            await store.close()
    assert list(calls_per_key(ledger).values()) == [1]
    takeover = server.requests[-2]
    if after_result:
        assert "result: created OPS-201 (normal priority)" in all_text(takeover)
        assert frontend.texts() == ["OPS-201 is open."]
    else:
        assert "may have run" in all_text(takeover)
        assert frontend.texts() == ["The ticket may have been created."]
    [given] = tool_results(server.requests[-1])
    assert given["content"] != "" and ledger_starts(ledger) == 1
    assert reply.state == "sent"


async def test_explain_usage_and_metrics_show_each_action(
    store: SqliteStore,
    clock: FakeClock,
    frontend: RecordingFrontend,
    server: FakeAnthropic,
    ledger: Path,
    hold: Path,
) -> None:
    from bot.cli.explain import explain_lines
    from bot.ops.metrics import Metrics
    from bot.ops.usage import PriceTable, tool_call_lines

    server.queue(
        Plan(text="", tool_uses=[ToolUse("search_tickets", {"query": "wifi"}), TICKET]),
        Plan(text="Opened OPS-201."),
    )
    metrics = Metrics(PriceTable())
    config = tool_config(server, stdio_server(ledger, hold))
    async with tool_engine(config, store, clock, frontend) as (engine, _):
        engine.subscribe(metrics.observe)
        await engine.ingest(said(1, "open a ticket for the printer"))
        await fire(engine, clock)
    lines = await explain_lines(store, KEY.id, clock.now()) or []
    tools = [line.split("s  ", 1)[1] for line in lines if "  tool  " in line]
    assert tools == [
        'tool      tracker.search_tickets {"query":"wifi"} (read-only) → done in 0.00s; lease #1',
        'tool      tracker.create_ticket {"title":"printer on fire"} (with effect) → done in '
        "0.00s; lease #1",
    ]
    redacted = await explain_lines(store, KEY.id, clock.now(), redact=True) or []
    assert not any("printer on fire" in line for line in redacted)
    assert tool_call_lines(await store.actions_since(0.0)) == [
        "", "tool calls (MCP), by server:", "  tracker: 2 call(s), 0 failed, 0 may have run"
    ]  # fmt: skip
    exposition = metrics.exposition().decode()
    assert 'burstbot_tool_calls_total{outcome="done",server="tracker"} 2.0' in exposition
    counts = await store.forget_conversation(KEY.id)
    assert counts["actions"] == 2
    assert all(a.arguments == "{}" and a.result == "" for a in await store.actions(KEY.id))


async def test_max_tool_calls_caps_a_burst_and_the_last_request_writes_the_answer(
    store: SqliteStore,
    clock: FakeClock,
    frontend: RecordingFrontend,
    server: FakeAnthropic,
    ledger: Path,
    hold: Path,
) -> None:
    search = ToolUse("search_tickets", {"query": "printer"})
    server.queue(
        Plan(text="", tool_uses=[search]),
        Plan(text="One search was all I could do.", tool_uses=[TICKET]),  # not offered: no call
    )
    config = tool_config(server, stdio_server(ledger, hold), tools_max_calls=1)
    async with tool_engine(config, store, clock, frontend) as (engine, _):
        await engine.ingest(said(1, "find the printer ticket, or open one"))
        await fire(engine, clock)
    assert server.requests[1].body["tool_choice"] == {"type": "none"}
    assert frontend.texts() == ["One search was all I could do."]
    assert calls_per_key(ledger) == {}


async def test_a_bearer_token_never_reaches_the_log(
    server: FakeAnthropic, caplog: pytest.LogCaptureFixture
) -> None:
    from bot.tool_servers import McpHub

    secret = "tok-5ecret-value"
    config = tool_config(server, http_server(1, token_env="TRACKER_TOKEN"))
    hub = McpHub(config.tools.mcp, {"TRACKER_TOKEN": secret})
    hub.start()
    await hub.first_attempts()  # nothing listens on port 1: one warning, the token not in it
    await hub.close()
    lines = [r.getMessage() for r in caplog.records]
    assert any("MCP server 'tracker' (http://127.0.0.1:1/mcp): unavailable" in line
               for line in lines)  # fmt: skip
    assert not any(secret in line for line in lines)


async def test_a_server_that_is_down_is_tried_again_with_backoff_on_the_injected_clock(
    server: FakeAnthropic, clock: FakeClock
) -> None:
    from bot.tool_servers import RECONNECT_BACKOFF, McpHub

    config = tool_config(server, http_server(1))  # nothing listens on port 1
    hub = McpHub(config.tools.mcp, clock=clock)
    hub.start()
    try:
        for failures in (1, 2, 3):  # each failed connection waits on the fake clock, doubling
            await until(clock.waiting)
            [wake] = clock.waiting()
            ceiling = RECONNECT_BACKOFF.ceiling(failures)
            assert clock.now() + ceiling / 2 < wake <= clock.now() + ceiling  # jittered below it
            await clock.advance(wake - clock.now())  # the next attempt runs, fails, waits again
    finally:
        await hub.close()
    assert RECONNECT_BACKOFF.ceiling(3) == 2.0 and clock.waiting() == ()


async def test_a_token_variable_that_is_not_set_is_one_config_line(server: FakeAnthropic) -> None:
    from bot.core.errors import ConfigError
    from bot.tool_servers import McpHub

    config = tool_config(server, http_server(1, token_env="TRACKER_TOKEN"))
    with pytest.raises(ConfigError) as caught:
        McpHub(config.tools.mcp, {}).start()  # before anything connects
    assert str(caught.value) == (
        "tools.mcp.tracker.bearer_token_env: environment variable TRACKER_TOKEN is not set"
    )
