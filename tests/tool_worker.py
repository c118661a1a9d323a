"""A bot process for the kill -9 tool test: the real engine on a SQLite file, the real Claude
replier against the fake Messages API and the real MCP client against the ticket server.

It stores one message ("open a ticket") unless told `"serve_only"`, then serves due work until
it is killed (or, on SIGTERM, shuts down). Run: `python -m tests.tool_worker '<json: db, api_url,
mcp_url[, owner, channels, serve_only, approve]>'`; prints `READY` once serving. With
`"approve": "ask"` its create_ticket calls wait for Approve / Deny, as a deployment's would.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import signal
import sys
from typing import Any

from bot.core.clock import SystemClock
from bot.core.events import IncomingMessage
from bot.core.tool_calls import ToolBox
from bot.tool_servers import McpHub
from bot.wiring import build_serving, claude_replier, engine_settings
from storage.sqlite import SqliteStore
from testkit import RecordingFrontend
from testkit.engine import shut_down
from testkit.fake_anthropic import FakeAnthropic
from tests.conftest import KEY
from tests.tool_harness import KEY_ENV, tool_config

ASKED = "the printer is on fire, open a ticket"


async def serve(settings: dict[str, Any]) -> None:
    fake = FakeAnthropic()
    fake.port = int(settings["api_url"].rsplit(":", 1)[1])
    mcp = {"name": "tracker", "url": settings["mcp_url"],
           "allowed_tools": ["search_tickets", "create_ticket"],
           "approve": settings.get("approve", "never")}  # fmt: skip
    channels = tuple(settings.get("channels") or ())
    timing = {"debounce": {"quiet_seconds": 0.5, "max_wait_seconds": 4.0},
              "lease": {"ttl_seconds": 3.0}} if channels else {}  # fmt: skip
    config = tool_config(fake, mcp, channels, **timing)
    store = SqliteStore(settings["db"])
    await store.open()
    hub = McpHub(config.tools.mcp)
    hub.start()
    await hub.first_attempts()
    clock = SystemClock()
    tuned = engine_settings(config)
    frontend = RecordingFrontend()
    owner = str(settings.get("owner", "doomed"))
    replier = claude_replier(config, KEY_ENV)
    served = {frontend.platform: frontend}
    tools = ToolBox(store, hub, clock.now, approvals=store)
    engine = build_serving(store, replier, clock, tuned, owner, served, tools=tools).engine
    if not settings.get("serve_only"):
        await engine.ingest(IncomingMessage(KEY, "m1", "u1", "alice", ASKED))
    stop = asyncio.Event()
    asyncio.get_running_loop().add_signal_handler(signal.SIGTERM, stop.set)
    print("READY", flush=True)
    while not stop.is_set():
        await engine.run_due()
        await engine.outbox.deliver_due()
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(stop.wait(), 0.05)
    await shut_down(engine, 5.0)
    await hub.close()
    await store.close()


if __name__ == "__main__":
    asyncio.run(serve(json.loads(sys.argv[1])))
