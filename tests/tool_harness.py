"""The pieces the tool tests share: the ticket server (tests/tool_server.py) over stdio or
Streamable HTTP, an engine with the real Claude replier and MCP client, and what the fake Messages
API is told to say about tool results."""

from __future__ import annotations

import asyncio
import contextlib
import socket
import subprocess
import sys
from collections.abc import AsyncIterator
from dataclasses import replace
from pathlib import Path
from typing import Any

from bot.config import Config, parse_config
from bot.core.engine import Engine
from bot.core.tool_calls import ToolBox
from bot.tool_servers import McpHub
from bot.wiring import build_serving, claude_replier, engine_settings
from storage.sqlite import SqliteStore
from testkit import RecordingFrontend
from testkit.clock import FakeClock
from testkit.fake_anthropic import FakeAnthropic, RecordedRequest
from tests.conftest import KEY, SETTINGS

SERVER_SCRIPT = Path(__file__).with_name("tool_server.py")
KEY_ENV = {"TEST_ANTHROPIC_KEY": "sk-test-not-a-real-key"}
TOOLS = ["search_tickets", "create_ticket"]


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def stdio_server(ledger: Path, hold: Path, approve: str = "never") -> dict[str, Any]:
    """The ticket server over stdio; `approve = "never"` unless a test is about approvals."""
    args = [str(SERVER_SCRIPT), "--ledger", str(ledger), "--hold", str(hold)]
    return {"name": "tracker", "command": sys.executable, "args": args, "allowed_tools": TOOLS,
            "approve": approve}  # fmt: skip


def http_server(port: int, token_env: str | None = None, approve: str = "never") -> dict[str, Any]:
    server: dict[str, Any] = {"name": "tracker", "url": f"http://127.0.0.1:{port}/mcp",
                              "allowed_tools": TOOLS, "approve": approve}  # fmt: skip
    if token_env:
        server["bearer_token_env"] = token_env
    return server


@contextlib.asynccontextmanager
async def http_process(
    ledger: Path, hold: Path, slow: float = 0.0, port: int | None = None
) -> AsyncIterator[int]:
    """The ticket server as its own process on 127.0.0.1 (it outlives a killed bot), on `port`
    or a free one."""
    port = port or free_port()
    command = [sys.executable, str(SERVER_SCRIPT), "--ledger", str(ledger), "--hold", str(hold),
               "--http", str(port), "--slow", str(slow)]  # fmt: skip
    process = await asyncio.create_subprocess_exec(
        *command, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
    )
    try:
        async with asyncio.timeout(20):
            while True:
                with contextlib.suppress(OSError):
                    _, writer = await asyncio.open_connection("127.0.0.1", port)
                    writer.close()
                    break
                await asyncio.sleep(0.05)
        yield port
    finally:
        process.kill()
        await process.wait()


def tool_config(
    server: FakeAnthropic,
    mcp: dict[str, Any],
    channels: tuple[str, ...] = (),
    tools_max_calls: int = 8,
    approval_timeout_seconds: float = 900.0,
    **sections: Any,
) -> Config:
    llm = {"base_url": server.base_url, "api_key_env": "TEST_ANTHROPIC_KEY", "max_retries": 0,
           "timeout_seconds": 20.0}  # fmt: skip
    listed = [{"platform": KEY.platform, "channel": channel, "tools": {"mcp": ["tracker"]}}
              for channel in channels or (KEY.channel,)]  # fmt: skip
    tools = {"mcp": [mcp], "max_tool_calls": tools_max_calls,
             "approval_timeout_seconds": approval_timeout_seconds}  # fmt: skip
    debounce = {"adaptive": False, **sections.pop("debounce", {})}  # the fixed window these steps
    return parse_config({"llm": llm, "tools": tools, "channels": listed, "debounce": debounce,
                         **sections})  # fmt: skip


@contextlib.asynccontextmanager
async def tool_engine(
    config: Config,
    store: SqliteStore,
    clock: FakeClock,
    frontend: RecordingFrontend,
    box: type[ToolBox] = ToolBox,
    owner: str = "w1",
) -> AsyncIterator[tuple[Engine, McpHub]]:
    hub = McpHub(config.tools.mcp)
    hub.start()
    await hub.first_attempts()
    replier = claude_replier(config, KEY_ENV)
    settings = engine_settings(config)
    timing = {f: getattr(SETTINGS, f) for f in ("quiet_seconds", "max_wait_seconds",
              "lease_ttl_seconds", "poll_seconds", "model_backoff_seconds")}  # fmt: skip
    settings = replace(settings, **timing)
    tools = box(store, hub, clock.now, {"tracker": 20_000}, approvals=store,
                approval_timeout=config.tools.approval_timeout_seconds,
                approvers=config.access.approvers)  # fmt: skip
    engine = build_serving(store, replier, clock, settings, owner,
                           {frontend.platform: frontend}, tools=tools).engine  # fmt: skip
    try:
        yield engine, hub
    finally:
        engine.stop_taking_work()
        await engine.finish(0.0)
        await engine.release()
        await replier.aclose()
        await hub.close()


def tool_results(request: RecordedRequest) -> list[dict[str, Any]]:
    """The `tool_result` blocks of the request's final user turn."""
    content = request.messages[-1]["content"]
    return [] if isinstance(content, str) else [b for b in content if b["type"] == "tool_result"]


def all_text(request: RecordedRequest) -> str:
    texts = []
    for message in request.messages:
        content = message["content"]
        blocks = [{"type": "text", "text": content}] if isinstance(content, str) else content
        texts += [b.get("text", "") for b in blocks]
    return "\n".join(texts)
