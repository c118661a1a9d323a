"""MCP servers as processes and connections: what a stdio server's environment holds, a start that
never waits for a server, and lines that name the server. Real servers (tests/tool_server.py, a
script that never answers) through the real `mcp` client."""

from __future__ import annotations

import asyncio
import json
import os
import sys
from pathlib import Path
from typing import Any

import pytest
from mcp.client.stdio import DEFAULT_INHERITED_ENV_VARS

from bot.config import parse_config
from bot.core.errors import ConfigError
from bot.tool_servers import McpHub, McpServer
from storage.sqlite import SqliteStore
from testkit import RecordingFrontend, ScriptedReplier
from testkit.clock import FakeClock
from tests.apps import make_app
from tests.test_health import scrape
from tests.tool_harness import free_port, http_process, http_server, stdio_server

HUNG = """import os, sys
path = sys.argv[1]
with open(path + ".tmp", "w") as out:
    out.write(str(os.getpid()))
os.replace(path + ".tmp", path)
sys.stdin.read()  # never answers initialize; leaves when its stdin closes
"""
"""A stdio server that starts and never answers: it writes its pid to the file it is given."""


def hub_of(*entries: dict[str, Any], clock: FakeClock | None = None) -> McpHub:
    return McpHub(parse_config({"tools": {"mcp": list(entries)}}).tools.mcp, clock=clock)


def alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True


async def until(predicate: Any, within: float = 60.0) -> None:
    """Poll `predicate`; `within` only bounds a broken build, it is never what a test asserts."""
    async with asyncio.timeout(within):
        while not predicate():  # noqa: ASYNC110
            await asyncio.sleep(0.01)


def messages(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [record.getMessage() for record in caplog.records]


async def test_a_stdio_server_gets_the_variables_its_entry_names_and_none_of_the_secrets(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    environ = tmp_path / "environ.json"
    burstbots = {"ANTHROPIC_API_KEY": "sk-ant-marker-1", "SLACK_BOT_TOKEN": "xoxb-marker-2",
                 "SLACK_SIGNING_SECRET": "marker-3", "TRACKER_TOKEN": "trk-marker-4"}  # fmt: skip
    for name, value in burstbots.items():
        monkeypatch.setenv(name, value)
    monkeypatch.delenv("TRACKER_DEBUG", raising=False)
    entry = stdio_server(tmp_path / "ledger", tmp_path / "hold")
    entry["args"] += ["--environ", str(environ)]
    entry |= {"env": {"TRACKER_REGION": "eu-1"}, "pass_env": ["TRACKER_TOKEN", "TRACKER_DEBUG"]}
    hub = hub_of(entry)
    hub.start()
    try:
        await hub.first_attempts()
        assert hub.servers["tracker"].up
    finally:
        await hub.close()
    given = json.loads(environ.read_text())
    assert given["TRACKER_TOKEN"] == "trk-marker-4"  # passed through by name
    assert given["TRACKER_REGION"] == "eu-1"  # set by value
    for secret in ("ANTHROPIC_API_KEY", "SLACK_BOT_TOKEN", "SLACK_SIGNING_SECRET"):
        assert secret not in given
    assert not any("marker" in value for name, value in given.items() if name != "TRACKER_TOKEN")
    named = {"TRACKER_TOKEN", "TRACKER_REGION", *DEFAULT_INHERITED_ENV_VARS}
    assert set(given) - {"LC_CTYPE"} <= named  # Python may set LC_CTYPE itself (PEP 538)
    assert (
        f"MCP server 'tracker' (command {sys.executable!r}): pass_env names TRACKER_DEBUG, "
        "which is not set; the server starts without it"
    ) in messages(caplog)


async def test_the_health_endpoint_answers_while_a_hung_server_is_still_starting(
    tmp_path: Path, clock: FakeClock
) -> None:
    pid_file = tmp_path / "hung.pid"
    hung = {"name": "hung", "command": sys.executable, "args": ["-c", HUNG, str(pid_file)],
            "allowed_tools": ["anything"]}  # fmt: skip
    store = SqliteStore(str(tmp_path / "hung.db"))
    app = make_app(store, clock, ScriptedReplier(), RecordingFrontend(), tools={"mcp": [hung]},
                   metrics={"enabled": True, "host": "127.0.0.1", "port": 0})  # fmt: skip
    task = asyncio.create_task(app.run())
    try:
        await until(app.serving.is_set)
        await until(pid_file.exists)  # the server runs and has been sent `initialize`
        status, report = await scrape(app, "/healthz")
        pid = int(pid_file.read_text())
        assert alive(pid)  # still starting: the first attempt has not given up on it
        assert app.mcp is not None and not app.mcp.servers["hung"].up
    finally:
        app.request_stop()
        await task
    assert status == 200 and report["ok"] is True


async def test_an_allowed_tool_the_server_does_not_list_at_its_first_connection_exits_2(
    tmp_path: Path, clock: FakeClock
) -> None:
    """The bot serves while the server starts; the mistake then stops it with one config line."""
    entry = stdio_server(tmp_path / "ledger", tmp_path / "hold")
    entry["allowed_tools"] = ["search_tickets", "delete_ticket"]
    store = SqliteStore(str(tmp_path / "mistake.db"))
    app = make_app(store, clock, ScriptedReplier(), RecordingFrontend(), tools={"mcp": [entry]})
    with pytest.raises(ConfigError) as caught:
        async with asyncio.timeout(60):  # bounds a broken build only
            await app.run()
    assert str(caught.value) == (
        "tools.mcp.tracker.allowed_tools: the server lists no tool 'delete_ticket' "
        "(it lists: create_ticket, search_tickets)"
    )


async def test_a_mistake_a_later_connection_finds_is_an_error_line_and_the_process_goes_on(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """Down at the first attempt (a warning, no mistake yet); the reconnect waits for our clock;
    the server it then finds lacks a tool: an error line naming it, and the process goes on."""
    clock = FakeClock()
    port = free_port()
    hub = hub_of({**http_server(port), "allowed_tools": ["search_tickets", "delete_ticket"]},
                 clock=clock)  # fmt: skip
    hub.start()
    where = f"MCP server 'tracker' (http://127.0.0.1:{port}/mcp)"
    try:
        await hub.first_attempts()  # nothing listens yet: not a config mistake
        assert any(line.startswith(f"{where}: unavailable: ") for line in messages(caplog))
        await until(clock.waiting)  # the backoff sleeps on the injected clock
        async with http_process(tmp_path / "ledger", tmp_path / "hold", port=port):
            await clock.advance(max(clock.waiting()) - clock.now())
            mistake = (
                f"{where}: tools.mcp.tracker.allowed_tools: the server lists no tool "
                "'delete_ticket' (it lists: create_ticket, search_tickets); its tools are off "
                "until it lists them"
            )
            await until(lambda: mistake in messages(caplog))
    finally:
        await hub.close()
    [record] = [r for r in caplog.records if r.getMessage() == mistake]
    assert record.levelname == "ERROR"


async def test_a_command_that_cannot_start_is_named_in_its_warning(
    caplog: pytest.LogCaptureFixture,
) -> None:
    hub = hub_of({"name": "tickets", "command": "ticket-srv-not-installed", "allowed_tools": ["x"]})
    hub.start()
    try:
        await hub.first_attempts()
    finally:
        await hub.close()
    assert (
        "MCP server 'tickets' (command 'ticket-srv-not-installed'): cannot start: No such file or "
        "directory; its tools are off until it answers"
    ) in messages(caplog)


def test_a_url_is_named_without_its_credentials_or_query() -> None:
    entry = {"name": "wiki", "url": "https://bot:pa55@wiki.example:8443/mcp?token=t0k#frag",
             "allowed_tools": ["search_pages"]}  # fmt: skip
    [config] = parse_config({"tools": {"mcp": [entry]}}).tools.mcp
    assert McpServer(config).label == "MCP server 'wiki' (https://wiki.example:8443/mcp)"
