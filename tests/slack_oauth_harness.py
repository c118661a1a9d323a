"""burstbot with `install = "oauth"` against the fake Slack grid (several workspaces), fake clock.

`oauth_bot` runs one process (the real front end, built from the config and environment as
`burstbot run` builds it); `install` walks the "Add to Slack" flow with an HTTP client as a
browser would (the install page, Slack's authorize page, the redirect back with the state cookie)
and returns the page it lands on.
"""

from __future__ import annotations

import html
import re
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import aiohttp
import pytest
from cryptography.fernet import Fernet

from adapters.slack import SlackFrontend, build_slack_frontend
from bot.app import App
from bot.config import parse_config
from storage.sqlite import SqliteStore
from testkit import ScriptedReplier
from testkit.clock import FakeClock
from testkit.fake_slack_grid import FakeSlackGrid
from tests.slack_harness import SECRET, Bot, shut_down

CLIENT_ID, CLIENT_SECRET = "111.222", "client-secret"
KEY = Fernet.generate_key().decode()
ENV = {
    "SLACK_CLIENT_ID": CLIENT_ID,
    "SLACK_CLIENT_SECRET": CLIENT_SECRET,
    "SLACK_STATE_SECRET": "state-secret",
    "SLACK_SIGNING_SECRET": SECRET,
    "BURSTBOT_TOKEN_KEY": KEY,
}


@pytest.fixture
async def grid() -> AsyncIterator[FakeSlackGrid]:
    """Three workspaces, none installed yet."""
    fake = FakeSlackGrid(CLIENT_ID, CLIENT_SECRET)
    for team, name in (("T1", "Acme"), ("T2", "Globex"), ("T3", "Initech")):
        fake.add_workspace(team, name)
    await fake.start()
    yield fake
    await fake.stop()


@pytest.fixture
def oauth_env(monkeypatch: pytest.MonkeyPatch) -> dict[str, str]:
    for name, value in ENV.items():
        monkeypatch.setenv(name, value)
    return ENV


@asynccontextmanager
async def oauth_bot(
    grid: FakeSlackGrid,
    db: str = ":memory:",
    clock: FakeClock | None = None,
    replier: ScriptedReplier | None = None,
    owner: str = "w1",
    **slack: Any,
) -> AsyncIterator[Bot]:
    config = parse_config({
        "console": {"enabled": False},
        "llm": {"provider": "offline"},
        "debounce": {"adaptive": False, "speculate": False, "quiet_seconds": 1.5,
                     "max_wait_seconds": 8.0},
        "slack": {"enabled": True, "mode": "http", "install": "oauth", "api_base_url": grid.url,
                  "http_port": 0, **slack},
    })  # fmt: skip
    clock = clock or FakeClock()
    replier = replier or ScriptedReplier()
    store = SqliteStore(db)
    frontend = build_slack_frontend(config.slack, owner=owner)
    frontend.clock = clock
    app = App(config, store, replier, [frontend], clock=clock, owner=owner)
    await store.open()
    try:
        await frontend.start(app)
    except BaseException:  # a start refused (a wrong token key) leaves no connection open
        await store.close()
        raise
    url = f"http://127.0.0.1:{frontend.http_port}"
    grid.events_url, grid.signing_secret = url + config.slack.http_path, SECRET
    grid.redirect_url = url + config.slack.redirect_path
    try:
        yield Bot(app, frontend, grid.sender(""), clock, replier, store)
    finally:
        await shut_down(app, frontend, store)


def bot_url(frontend: SlackFrontend, path: str) -> str:
    return f"http://127.0.0.1:{frontend.http_port}{path}"


async def install(frontend: SlackFrontend, team: str, decision: str = "allow") -> tuple[int, str]:
    """Open the install page, follow "Add to Slack", pick `team` and press Allow (or Cancel),
    follow the redirect back; the final page's status and its outcome line."""
    return await land(*await approve(frontend, team, decision))


async def approve(frontend: SlackFrontend, team: str, decision: str) -> tuple[str, str]:
    """The install up to Slack's redirect: where it sends the browser, and the state cookie."""
    return await approve_at(bot_url(frontend, frontend.config.install_path), team, decision)


async def approve_at(install_url: str, team: str, decision: str = "allow") -> tuple[str, str]:
    async with aiohttp.ClientSession() as http:
        async with http.get(install_url) as page:
            assert page.status == 200, await page.text()
            cookie = page.headers["Set-Cookie"].split(";")[0]
            found = re.search(r'id="add-to-slack" href="([^"]+)"', await page.text())
            assert found is not None
            authorize = html.unescape(found.group(1))
        async with http.get(authorize) as page:
            form = dict(re.findall(r'name="(\w+)" value="([^"]*)"', await page.text()))
        form.update(team=team, decision=decision)
        async with http.post(authorize.split("?")[0], data=form, allow_redirects=False) as moved:
            return moved.headers["Location"], cookie


async def land(back: str, cookie: str) -> tuple[int, str]:
    """The redirect back to the bot, with the browser's cookie: the page's status and line."""
    async with aiohttp.ClientSession() as http, http.get(back, headers={"Cookie": cookie}) as page:
        outcome = re.search(r'<p id="outcome">(.*?)</p>', await page.text())
        text = "" if outcome is None else re.sub(r"<[^>]+>", "", outcome.group(1))
        return page.status, html.unescape(text)
