"""One burstbot process with the real Slack front end against the fake Slack API, fake clock."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass
from typing import Any

from adapters.slack import SlackFrontend
from bot.app import App
from bot.clock import FakeClock
from bot.config import Config, parse_config
from bot.frontend import Host
from bot.testing import ScriptedReplier
from storage.sqlite import SqliteStore
from tests.fakes.slack_api import EventSender, FakeSlackApi

SECRET = "signing-secret-for-tests"
TOKEN = "xoxb-test"


def slack_config(api: FakeSlackApi, **slack: Any) -> Config:
    return parse_config(
        {
            "console": {"enabled": False},
            "llm": {"provider": "offline"},
            "debounce": {"quiet_seconds": 1.5, "max_wait_seconds": 8.0},
            "slack": {
                "enabled": True,
                "mode": "http",
                "api_base_url": api.url,
                "http_port": 0,
                **slack,
            },
        }
    )


@dataclass
class Bot:
    app: App
    frontend: SlackFrontend
    sender: EventSender
    clock: FakeClock
    replier: ScriptedReplier
    store: SqliteStore

    async def step(self, seconds: float = 0.0) -> None:
        """Advance the fake clock, run what is due and deliver; wait for that work to finish."""
        engine = self.app.engine
        if seconds:
            await self.clock.advance(seconds)
        await engine.run_due()
        await engine.idle()
        await engine.deliver_due()
        await engine.idle()

    async def send(self, event: dict[str, Any], **kwargs: Any) -> int:
        status = await self.sender.send(event, **kwargs)
        await self.app.engine.idle()  # thinking-indicator calls started by the ingest
        return status


@asynccontextmanager
async def running_bot(
    api: FakeSlackApi,
    db: str = ":memory:",
    clock: FakeClock | None = None,
    replier: ScriptedReplier | None = None,
    host_wrapper: Any = None,
    owner: str = "w1",
    **slack: Any,
) -> AsyncIterator[Bot]:
    config = slack_config(api, **slack)
    clock = clock or FakeClock()
    replier = replier or ScriptedReplier()
    store = SqliteStore(db)
    frontend = SlackFrontend(config.slack, TOKEN, signing_secret=SECRET, app_token=api.app_token)
    app = App(config, store, replier, [frontend], clock=clock, owner=owner)
    await store.open()
    host: Host = host_wrapper(app) if host_wrapper else app
    await frontend.start(host)
    url = f"http://127.0.0.1:{frontend.http_port}{config.slack.http_path}"
    try:
        yield Bot(app, frontend, EventSender(url, SECRET), clock, replier, store)
    finally:
        await frontend.stop()
        await app.engine.shutdown()
        await store.close()
