"""A running app with its operator page (`[web]`) over a recording front end and a fake clock,
and an HTTP client that logs in as a browser would (cookies, the login form's CSRF token)."""

from __future__ import annotations

import asyncio
import re
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import aiohttp
import pytest

from bot.app import App
from bot.core.errors import PermanentDeliveryError
from bot.core.events import ConversationKey, IncomingMessage
from bot.core.replier import GenerationProgress, Prompt
from storage.sql_store import SqlStore
from storage.sqlite import SqliteStore
from testkit import RecordingFrontend, ScriptedReplier
from testkit.clock import FakeClock
from tests.apps import make_app

OPERATOR_TOKEN = "operator-token-4f9a1c"
VIEWER_TOKEN = "viewer-token-77d2e0"
TOKEN_ENV = {"TEST_WEB_OPERATOR": OPERATOR_TOKEN, "TEST_WEB_VIEWER": VIEWER_TOKEN}
WEB = {"enabled": True, "port": 0, "token_env": "TEST_WEB_OPERATOR",
       "viewer_token_env": "TEST_WEB_VIEWER"}  # fmt: skip
FAILING = ConversationKey("test", "w1", "c1")
ANSWERED = ConversationKey("test", "w1", "c2")
HOSTILE_TEXT = "<script>document.title='owned'</script><b>bold?</b> hi"
LEAKED = "xoxb-1111-2222-leakedtokenvalue"
CSRF = re.compile(r'name="csrf" value="([^"]+)"')
FORM = re.compile(r'<form method="post" action="(/retry|/erase)" class="inline">(.*?)</form>')
FIELD = re.compile(r'<input type="hidden" name="([^"]+)" value="([^"]*)">')


class PricedReplier(ScriptedReplier):
    """Answers as `ScriptedReplier` does, reporting a priced model (usage shows a cost)."""

    async def generate(self, prompt: Prompt, usage: GenerationProgress) -> str:
        usage.model = "claude-sonnet-5-5"
        return await super().generate(prompt, usage)


async def eventually(check: Callable[[], Awaitable[bool]], within: float = 10.0) -> None:
    """Bounded wait for real I/O and the app's own tasks, never for debounce."""
    async with asyncio.timeout(within):
        while not await check():  # noqa: ASYNC110
            await asyncio.sleep(0.02)


@dataclass(eq=False)
class Running:
    app: App
    store: SqlStore[Any]
    clock: FakeClock
    frontend: RecordingFrontend

    @property
    def base(self) -> str:
        assert self.app.web_server is not None
        return f"http://127.0.0.1:{self.app.web_server.port}"

    async def reply_states(self, key: ConversationKey) -> list[str]:
        return [r.state for r in await self.store.replies(key.id)]

    async def settle(self, key: ConversationKey, seconds: float = 2.0) -> None:
        """Let the quiet window pass on the fake clock; the running scheduler answers the burst
        and delivers (or gives up on) its reply."""
        await self.clock.advance(seconds)

        async def settled() -> bool:
            state = await self.store.conversation_state(key.id)
            answered = state is not None and state.answered_version == state.version
            idle = state is not None and state.lease_owner is None and state.timer is None
            states = await self.reply_states(key)
            return answered and idle and bool(states) and "pending" not in states

        await eventually(settled)


@asynccontextmanager
async def running_app(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, start: float = 1e6,
                      store: SqlStore[Any] | None = None,
                      **web: object) -> AsyncIterator[Running]:  # fmt: skip
    """The app serving its page, with two conversations: FAILING (a chat user's HTML; its reply
    failed for good, the error quoting a token) and ANSWERED (answered and posted)."""
    for name, value in TOKEN_ENV.items():
        monkeypatch.setenv(name, value)
    store = store or SqliteStore(str(tmp_path / "web.db"))
    clock, frontend = FakeClock(start), RecordingFrontend()
    app = make_app(store, clock, PricedReplier(), frontend, web={**WEB, **web})
    task = asyncio.create_task(app.run())
    try:
        await eventually(lambda: _true(app.serving.is_set() and app.web_server is not None))
        running = Running(app, store, clock, frontend)
        frontend.failures.append(PermanentDeliveryError(f"channel_not_found ({LEAKED})"))
        await app.ingest(IncomingMessage(FAILING, "m1", "u1", "alice", HOSTILE_TEXT))
        await running.settle(FAILING)
        await app.ingest(IncomingMessage(ANSWERED, "m2", "u2", "bob", "a plain question"))
        await running.settle(ANSWERED)
        assert await running.reply_states(FAILING) == ["failed"]
        assert await running.reply_states(ANSWERED) == ["sent"]
        yield running
    finally:
        app.request_stop()
        await task


async def _true(value: bool) -> bool:
    return value


def client() -> aiohttp.ClientSession:
    """A client that keeps cookies from 127.0.0.1 (aiohttp's default jar refuses an IP's)."""
    return aiohttp.ClientSession(cookie_jar=aiohttp.CookieJar(unsafe=True))


async def log_in(http: aiohttp.ClientSession, base: str, token: str) -> aiohttp.ClientResponse:
    async with http.get(f"{base}/login") as page:
        found = CSRF.search(await page.text())
    assert found is not None
    form = {"csrf": found.group(1), "token": token}
    async with http.post(f"{base}/login", data=form, allow_redirects=False) as response:
        await response.read()
        return response


def forms(page: str) -> list[tuple[str, dict[str, str]]]:
    """Each action form (retry, erase) of a page: its path and its hidden fields."""
    return [(path, dict(FIELD.findall(inputs))) for path, inputs in FORM.findall(page)]
