"""A bot process for the kill -9 tool test: the real engine on a SQLite file, the real Claude
replier against the fake Messages API and the real MCP client against the ticket server.

It stores one message ("open a ticket"), then serves due work until it is killed.
Run: `python -m tests.tool_worker '<json: db, api_url, mcp_url>'`; prints `READY` once serving.
"""

from __future__ import annotations

import asyncio
import json
import sys

from bot.core.clock import SystemClock
from bot.core.engine import Engine
from bot.core.events import IncomingMessage
from bot.core.settings import EngineSettings
from bot.model.claude import ClaudeReplier
from bot.model.mcp_client import McpHub
from bot.model.tool_calls import ToolBox
from storage.sqlite import SqliteStore
from tests.conftest import KEY
from tests.fakes.anthropic_server import FakeAnthropic
from tests.tool_harness import KEY_ENV, tool_config

ASKED = "the printer is on fire, open a ticket"


async def serve(settings: dict[str, str]) -> None:
    fake = FakeAnthropic()
    fake.port = int(settings["api_url"].rsplit(":", 1)[1])
    config = tool_config(fake, {"name": "tracker", "url": settings["mcp_url"],
                                "allowed_tools": ["search_tickets", "create_ticket"]})  # fmt: skip
    store = SqliteStore(settings["db"])
    await store.open()
    hub = McpHub(config.tools.mcp)
    await hub.start()
    clock = SystemClock()
    engine_settings = EngineSettings.from_config(config)
    engine = Engine(store, ClaudeReplier.from_config(config, KEY_ENV), clock, engine_settings,
                    "doomed", {}, tools=ToolBox(store, hub, clock.now))  # fmt: skip
    await engine.ingest(IncomingMessage(KEY, "m1", "u1", "alice", ASKED))
    print("READY", flush=True)
    while True:
        await engine.run_due()
        await asyncio.sleep(0.05)


if __name__ == "__main__":
    asyncio.run(serve(json.loads(sys.argv[1])))
