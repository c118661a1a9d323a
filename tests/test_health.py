"""`/healthz` names every front end and the store; `/metrics` gauges the backlog and the work in
flight. Scraped over HTTP from a running app; the adapters' own states from the real libraries."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import aiohttp

from adapters.slack import SlackFrontend
from bot.app import App
from bot.core.errors import RetryableDeliveryError
from bot.core.events import ConversationKey, IncomingMessage
from bot.core.frontend import Healthy
from storage.sqlite import SqliteStore
from testkit import RecordingFrontend, ScriptedReplier
from testkit.clock import FakeClock
from testkit.fake_discord import FakeDiscord, frontend_for
from testkit.fake_slack import FakeSlackApi
from tests.apps import make_app
from tests.slack_harness import SECRET, TOKEN, api, slack_config
from tests.test_metrics import until

__all__ = ["api"]  # fixture

KEY = ConversationKey("test", "w1", "c1")
OTHER = ConversationKey("test", "w1", "c2")


class Reconnecting(RecordingFrontend, Healthy):
    """A front end whose connection is down (as a gateway that is reconnecting)."""

    def health(self) -> tuple[bool, str]:
        return False, "gateway reconnecting"


async def scrape(app: App, path: str) -> tuple[int, Any]:
    assert app.metrics_server is not None
    url = f"http://127.0.0.1:{app.metrics_server.port}{path}"
    async with aiohttp.ClientSession() as http, http.get(url) as response:
        body = await (response.json() if path == "/healthz" else response.text())
        return response.status, body


def gauges(text: str) -> dict[str, float]:
    wanted = ("burstbot_outbox_depth", "burstbot_oldest_pending_message_age_seconds",
              "burstbot_generations_in_flight")  # fmt: skip
    return {
        name: float(value)
        for name, value in (line.rsplit(" ", 1) for line in text.splitlines() if line)
        if name in wanted
    }


async def running_app(
    tmp_path: Path, clock: FakeClock, frontends: list[RecordingFrontend], replier: ScriptedReplier
) -> tuple[App, asyncio.Task[None]]:
    store = SqliteStore(str(tmp_path / "health.db"))
    app = make_app(store, clock, replier, frontends[0],
                   metrics={"enabled": True, "host": "127.0.0.1", "port": 0})  # fmt: skip
    app.frontends = list(frontends)
    app.by_platform = {f.platform: f for f in frontends}
    task = asyncio.create_task(app.run())
    await until(lambda: app.metrics_server is not None)
    return app, task


async def test_healthz_is_503_naming_the_front_end_that_is_down(
    tmp_path: Path, clock: FakeClock
) -> None:
    up, down = RecordingFrontend("test"), Reconnecting("discord")
    app, task = await running_app(tmp_path, clock, [up, down], ScriptedReplier())
    try:
        status, report = await scrape(app, "/healthz")
    finally:
        app.request_stop()
        await task
    assert status == 503
    assert report == {
        "ok": False,
        "store": {"ok": True, "state": "answering"},
        "frontends": {
            "test": {"ok": True, "state": "running"},
            "discord": {"ok": False, "state": "gateway reconnecting"},
        },
    }


async def test_healthz_is_503_when_the_store_fails(tmp_path: Path, clock: FakeClock) -> None:
    app, task = await running_app(tmp_path, clock, [RecordingFrontend()], ScriptedReplier())
    try:
        broken: Any = app.store

        async def failing(skip: object = ()) -> None:
            raise OSError("disk gone")

        broken.next_due_at = failing
        status, report = await scrape(app, "/healthz")
        del broken.next_due_at
    finally:
        app.request_stop()
        await task
    assert status == 503 and report["store"] == {"ok": False, "state": "failing (OSError)"}


async def test_gauges_show_the_backlog_and_the_generations_in_flight(
    tmp_path: Path, clock: FakeClock
) -> None:
    frontend = RecordingFrontend()
    replier = ScriptedReplier(hold=True)
    app, task = await running_app(tmp_path, clock, [frontend], replier)
    try:
        start = clock.now()
        _, text = await scrape(app, "/metrics")
        assert gauges(text) == {
            "burstbot_outbox_depth": 0.0,
            "burstbot_oldest_pending_message_age_seconds": 0.0,
            "burstbot_generations_in_flight": 0.0,
        }
        await app.ingest(IncomingMessage(KEY, "m1", "u1", "alice", "first"))
        await clock.advance(1.0)
        await app.ingest(IncomingMessage(OTHER, "m2", "u1", "alice", "second"))
        await clock.advance(1.0)  # KEY is due: its generation is held open
        call = await replier.next_call(0)
        _, text = await scrape(app, "/metrics")
        assert gauges(text) == {
            "burstbot_outbox_depth": 0.0,
            "burstbot_oldest_pending_message_age_seconds": clock.now() - start,
            "burstbot_generations_in_flight": 1.0,
        }
        frontend.failures.append(RetryableDeliveryError("slow down", retry_after=600))
        call.finish("answer")
        await until(lambda: bool(frontend.attempts))
        await app.engine.idle()
        _, text = await scrape(app, "/metrics")
        assert gauges(text)["burstbot_outbox_depth"] == 1.0  # waiting out the Retry-After
        assert gauges(text)["burstbot_oldest_pending_message_age_seconds"] == 1.0  # OTHER's
    finally:
        app.request_stop()
        await task


# the adapters' own states -------------------------------------------------------------------
async def test_discord_is_healthy_while_its_gateway_session_is_up(
    fake_discord: FakeDiscord, store: SqliteStore, clock: FakeClock
) -> None:
    front = frontend_for(fake_discord, clock)
    assert front.health() == (False, "gateway not connected")
    app = make_app(store, clock, ScriptedReplier(), RecordingFrontend())
    await front.start(app)
    try:
        assert front.health() == (True, "gateway connected")
        await front.on_disconnect()  # what discord.py reports when the connection drops
        assert front.health() == (False, "gateway reconnecting")
        await front.on_resumed()
        assert front.health() == (True, "gateway connected")
    finally:
        await front.stop()
    assert front.health()[0] is False


async def test_slack_http_mode_is_healthy_while_it_listens(
    api: FakeSlackApi, store: SqliteStore, clock: FakeClock
) -> None:
    config = slack_config(api, thinking_indicator="off")
    front = SlackFrontend(config.slack, TOKEN, signing_secret=SECRET)
    assert front.health() == (False, "down")
    app = make_app(store, clock, ScriptedReplier(), RecordingFrontend())
    await front.start(app)
    try:
        assert front.health() == (True, f"http listener on port {front.http_port}")
        await front.stop_intake()  # shutting down: Slack gets 503s and retries elsewhere
        assert front.health() == (False, "down")
    finally:
        await front.stop()
