"""A process cut from PostgreSQL by a partition: it never hangs, never posts without a claim, says
so on `/healthz`, and carries on without a restart once the network heals.

Two apps (the real Slack front end over HTTP, against the fake Slack API) share one PostgreSQL
schema; A reaches the database through `CuttableProxy`, B directly. A takes a burst and is cut
while the model writes; B takes it over. The cut is a partition without a reset: A's old
connections stay silent for good, new ones go through after the heal. Time is real (the timeouts
are what is tested) and compressed: half-second statements, a three-second lease.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass
from urllib.parse import urlsplit

import aiohttp
import pytest

from adapters.slack import SlackFrontend
from bot.app import App
from bot.config import parse_config
from bot.core.events import ConversationKey
from storage.pool_limits import PoolLimits
from storage.postgres import PostgresStore
from testkit import ScriptedReplier
from testkit.fake_slack import TEAM, EventSender, FakeSlackApi, dm
from tests import pg
from tests.pg_proxy import CuttableProxy
from tests.slack_harness import SECRET, TOKEN, api

__all__ = ["api"]  # fixture

DM = ConversationKey("slack", TEAM, "D1", "").id
LIMITS = PoolLimits(
    statement_seconds=0.5, acquire_seconds=1.0, connect_seconds=1.0, keepalive_seconds=1.0
)
BOUND = 30.0  # a liveness bound for real I/O, far above every limit above: a hang fails the test


@dataclass
class Running:
    app: App
    task: asyncio.Task[None]
    store: PostgresStore
    replier: ScriptedReplier
    sender: EventSender

    async def healthz(self) -> int:
        assert self.app.metrics_server is not None
        url = f"http://127.0.0.1:{self.app.metrics_server.port}/healthz"
        async with aiohttp.ClientSession() as http, http.get(url) as response:
            return response.status

    async def stop(self) -> None:
        self.app.request_stop()
        await asyncio.wait_for(self.task, BOUND)


@asynccontextmanager
async def running(
    fake: FakeSlackApi, dsn: str, schema: str, owner: str, replier: ScriptedReplier
) -> AsyncIterator[Running]:
    config = parse_config(
        {
            "console": {"enabled": False},
            "llm": {"provider": "offline"},
            "debounce": {"adaptive": False, "quiet_seconds": 0.3, "max_wait_seconds": 3.0},
            "lease": {"ttl_seconds": 3.0},
            "engine": {"poll_seconds": 0.2, "busy_retry_seconds": 0.2},
            "streaming": {"interval_seconds": 0.1},
            "catch_up": {"enabled": False},
            "metrics": {"enabled": True, "host": "127.0.0.1", "port": 0},
            "slack": {"enabled": True, "mode": "http", "api_base_url": fake.url, "http_port": 0},
        }
    )
    store = PostgresStore(dsn, pool_size=3, schema=schema, limits=LIMITS)
    frontend = SlackFrontend(config.slack, TOKEN, signing_secret=SECRET)
    app = App(config, store, replier, [frontend], owner=owner, shutdown_grace=1.0)
    task = asyncio.create_task(app.run())
    await asyncio.wait_for(app.serving.wait(), BOUND)
    url = f"http://127.0.0.1:{frontend.http_port}{config.slack.http_path}"
    bot = Running(app, task, store, replier, EventSender(url, SECRET))
    try:
        yield bot
    finally:
        if not task.done():
            await bot.stop()


async def until(condition: Callable[[], Awaitable[bool]], what: str) -> None:
    async def reached() -> None:
        while not await condition():  # noqa: ASYNC110 (another process's work, over the network)
            await asyncio.sleep(0.05)

    try:
        await asyncio.wait_for(reached(), BOUND)
    except TimeoutError:
        pytest.fail(f"never happened: {what}")


@pytest.fixture
async def schema() -> AsyncIterator[str]:
    name = await pg.create_schema("burstbot_partition")
    yield name
    await pg.drop_schema(name)


@pytest.fixture
async def proxy() -> AsyncIterator[CuttableProxy]:
    target = urlsplit(pg.dsn())
    cuttable = await CuttableProxy(target.hostname or "127.0.0.1", target.port or 5432).start()
    yield cuttable
    await cuttable.stop()


def bot_texts(fake: FakeSlackApi) -> list[str]:
    return [m.text for m in fake.posts("D1")]


async def all_answered(store: PostgresStore) -> bool:
    state = await store.conversation_state(DM)
    if state is None or state.answered_version < state.version:
        return False
    return all(r.state == "sent" for r in await store.replies(DM))


@pytest.mark.timeout(150)  # a regression hangs: fail instead of waiting out the default
async def test_a_process_cut_from_postgres_stops_says_so_and_recovers_without_a_restart(
    api: FakeSlackApi,
    schema: str,
    proxy: CuttableProxy,
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.WARNING, logger="burstbot")
    dsn = pg.dsn()
    async with running(api, proxy.dsn(dsn), schema, "A", ScriptedReplier(hold=True)) as a:
        assert await a.sender.send(dm("1700000000.000001", "first")) == 200
        writing = await a.replier.next_call(0, within=BOUND)
        writing.stream(5, "draft from A")
        await until(lambda: _shown(api, "draft from A"), "A's draft is shown")
        async with running(api, dsn, schema, "B", ScriptedReplier()) as b:
            proxy.cut()
            writing.finish("answer from A")  # its commit cannot reach the database

            assert await a.healthz() == 503
            during = dm("1700000000.000002", "during the cut")
            status = await asyncio.wait_for(a.sender.send(during), BOUND)
            assert status >= 500  # not acknowledged: Slack delivers it again
            assert await b.sender.send(during, retry_num=1) == 200  # (to a process that can)

            await until(lambda: all_answered(b.store), "B answers what A was cut from")
            answered = bot_texts(api)
            await b.stop()

        proxy.heal()
        after = dm("1700000000.000003", "after the heal")
        assert await asyncio.wait_for(a.sender.send(after), BOUND) == 200
        again = await a.replier.next_call(1, within=BOUND)
        assert again.texts == ["after the heal"]
        again.finish("answer after the heal")
        await until(lambda: all_answered(a.store), "A answers after the heal")
        assert await a.healthz() == 200

    texts = bot_texts(api)
    assert len(answered) == 1 and "answer from A" not in answered[0]
    assert texts == [answered[0], "answer after the heal"]
    assert not any("answer from A" in call["text"] for call in api.chat_log)
    lost = [r for r in caplog.records if r.name == "burstbot.scheduler" and "unavailable" in r.msg]
    regained = [r for r in caplog.records if r.name == "burstbot.scheduler" and "again" in r.msg]
    assert (len(lost), len(regained)) == (1, 1)
    assert [r.getMessage() for r in caplog.records if r.exc_info] == []


async def _shown(fake: FakeSlackApi, text: str) -> bool:
    return any(text in posted for posted in bot_texts(fake))
