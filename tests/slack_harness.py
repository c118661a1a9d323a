"""One burstbot process with the real Slack front end against the fake Slack API, fake clock."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass
from typing import Any

import pytest

from adapters.slack import SlackFrontend
from bot.app import App
from bot.config import Config, parse_config
from bot.core.events import ConversationKey
from bot.core.frontend import Host
from storage.sqlite import SqliteStore
from testkit import ScriptedReplier
from testkit.clock import FakeClock
from testkit.fake_slack import TEAM, EventSender, FakeSlackApi

SECRET = "signing-secret-for-tests"
TOKEN = "xoxb-test"
DM_KEY = ConversationKey("slack", TEAM, "D1", "")


def slack_config(
    api: FakeSlackApi,
    access: dict[str, Any] | None = None,
    limits: dict[str, Any] | None = None,
    catch_up_section: dict[str, Any] | None = None,
    sections: dict[str, Any] | None = None,
    **slack: Any,
) -> Config:
    """`sections`: more of the config's top-level sections, added or replaced (`feedback`, `llm`,
    `tools`, `channels`, ...)."""
    return parse_config(
        {
            **(sections or {}),
            "access": access or {},
            "limits": limits or {},
            "catch_up": catch_up_section or {},
            "console": {"enabled": False},
            "llm": {"provider": "offline"},
            "debounce": {
                "adaptive": False,
                "speculate": False,
                "quiet_seconds": 1.5,
                "max_wait_seconds": 8.0,
            },
            "slack": {
                "enabled": True,
                "mode": "http",
                "api_base_url": api.url,
                "http_port": 0,
                **slack,
            },
        }
        | (sections or {})
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
        await engine.indicator.idle()
        await self.frontend.statuses.idle()
        await engine.run_due()
        await engine.idle()
        await engine.outbox.deliver_due()
        await engine.idle()
        await engine.indicator.idle()
        await self.frontend.statuses.idle()  # assistant statuses set again

    async def settle(self) -> None:
        """Wait for background reads: held threads decided, catch-up passes done."""
        await self.app.threads.idle()
        for catch_up in self.app.catch_ups:
            await catch_up.idle()
        await self.app.threads.idle()

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
    access: dict[str, Any] | None = None,
    limits: dict[str, Any] | None = None,
    catch_up: bool = False,
    catch_up_section: dict[str, Any] | None = None,
    sections: dict[str, Any] | None = None,
    store: Any = None,
    llm: Any = None,
    **slack: Any,
) -> AsyncIterator[Bot]:
    """`store`: another store than a SQLite one on `db` (a process on a shared PostgreSQL);
    `llm(config)`: the replier to use, built from the config (else `replier`)."""
    config = slack_config(api, access, limits, catch_up_section, sections, **slack)
    clock = clock or FakeClock()
    replier = replier or ScriptedReplier()
    model = replier if llm is None else llm(config)
    store = SqliteStore(db) if store is None else store
    frontend = SlackFrontend(
        config.slack, TOKEN, signing_secret=SECRET, app_token=api.app_token, clock=clock
    )
    app = App(config, store, model, [frontend], clock=clock, owner=owner)
    await store.open()
    if app.mcp is not None:  # what App.run does first with `[[tools.mcp]]`
        app.mcp.start()
        await app.mcp.first_attempts()
    host: Host = host_wrapper(app) if host_wrapper else app
    connecting_at = clock.now()
    await frontend.start(host)
    if catch_up:  # what App.run does once its front ends are up
        app.start_catch_up([frontend], connecting_at)
    url = f"http://127.0.0.1:{frontend.http_port}{config.slack.http_path}"
    try:
        yield Bot(app, frontend, EventSender(url, SECRET), clock, replier, store)
    finally:
        await shut_down(app, frontend, store)
        if app.mcp is not None:
            await app.mcp.close()
        if llm is not None:
            await model.aclose()


async def shut_down(app: App, frontend: SlackFrontend, store: SqliteStore) -> None:
    """The order App.run uses; tests step explicitly, so no grace period is needed."""
    await frontend.stop_intake()
    app.engine.stop_taking_work()
    await app.engine.finish(0.0)
    await frontend.stop()
    await app.engine.release()
    await store.close()


@pytest.fixture
async def api() -> AsyncIterator[FakeSlackApi]:
    fake = await FakeSlackApi().start()
    yield fake
    await fake.stop()


@pytest.fixture
async def bot(api: FakeSlackApi) -> AsyncIterator[Bot]:
    async with running_bot(api) as running:
        yield running


def ts(n: int) -> str:
    return f"1700000000.{n:06d}"


async def stored_texts(bot: Bot, key: ConversationKey) -> list[str]:
    state = await bot.store.conversation_state(key.id)
    assert state is not None
    messages = await bot.store.pending_messages(key.id, state.answered_version, state.version)
    return [m.text for m in messages]
