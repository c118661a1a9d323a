"""One failure, one meaning, on every Discord call path (adapters/discord/calls.py).

Real discord.py logs in to the fake Discord; then its REST calls are pointed at a server on
127.0.0.1 that fails in one way: a 503 in Discord's JSON or a proxy's HTML page, a refused or
reset connection, a timeout, a 429 too long for discord.py to wait out, a 403 or a 404. A post,
an edit, a delete, the draft look-up, a channel look-up and a history page must raise the core's
error of the same kind for the same failure (a delete of what is gone has nothing to do); the
log-in fails in one line and blames the token only when Discord refused it; the slash command
registration logs the failure and goes on. Never a raw library exception.
"""

from __future__ import annotations

import json
import logging
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import AbstractAsyncContextManager
from dataclasses import dataclass

import aiohttp
import discord
import pytest

from adapters.discord import DiscordFrontend, commands
from bot.core.errors import (
    BurstbotError,
    ConfigError,
    FetchError,
    MessageGone,
    PermanentDeliveryError,
    RateLimited,
    RetryableDeliveryError,
)
from bot.core.events import ConversationKey, Draft, Reply
from testkit.clock import FakeClock
from testkit.fake_discord import FakeDiscord, frontend_for
from tests.failing_network import Answer, answering, refusing, resetting, silent

TIMEOUT = 0.5  # every aiohttp session's limit in these tests (discord.py sets none of its own)
GUILD_ID, CHANNEL_ID = 400_000_000_000_000_001, 400_000_000_000_000_002
KEY = ConversationKey("discord", str(GUILD_ID), str(CHANNEL_ID))
MESSAGE_ID = "500000000000000009"
PAGE = (
    "<!DOCTYPE html>\n<html>\n<head><title>503 Service Temporarily Unavailable</title></head>\n"
    "<body><center><h1>503 Service Temporarily Unavailable</h1></center>\n"
    "<hr><center>cloudflare</center></body>\n</html>\n"
)


def discord_error(status: int, message: str, code: int = 0, **headers: str) -> Answer:
    return Answer(status, json.dumps({"message": message, "code": code}), headers=headers)


@dataclass(frozen=True)
class Fault:
    name: str
    server: Callable[[], AbstractAsyncContextManager[str]]
    kind: str  # what every path must make of it: retry, rate limited, permanent
    named: str = ""  # what the error's line must say


def scripted(answer: Answer) -> Callable[[], AbstractAsyncContextManager[str]]:
    return lambda: answering(answer)


LIMITED = json.dumps({"message": "You are being rate limited.", "retry_after": 120.0,
                      "global": False})  # fmt: skip
# fmt: off
FAULTS = [
    Fault("unavailable", scripted(discord_error(503, "upstream overloaded")), "retry", "503"),
    Fault("html-page", scripted(Answer(503, PAGE, "text/html")), "retry", "503"),
    Fault("refused", refusing, "retry", "connection failed"),
    Fault("reset", resetting, "retry", "connection failed"),
    Fault("timeout", silent, "retry", "connection failed"),
    Fault("rate-limited", scripted(Answer(429, LIMITED, headers={"Via": "1.1 google",
                                                                 "Retry-After": "120"})),
          "rate limited 120.0", "rate limited"),
    Fault("forbidden", scripted(discord_error(403, "Missing Permissions", 50013)), "permanent",
          "403 Missing Permissions"),
    Fault("unknown-channel", scripted(discord_error(404, "Unknown Channel", 10003)), "permanent",
          "404 Unknown Channel"),
]
# fmt: on


def kind(error: BaseException) -> str:
    """The core's meaning of an error, whatever its family (delivery, fetch)."""
    if isinstance(error, RateLimited):
        return f"rate limited {error.retry_after}"
    if isinstance(error, FetchError):
        if error.permanent:
            return "permanent"
        return "retry" if error.retry_after is None else f"rate limited {error.retry_after}"
    if isinstance(error, MessageGone):
        return "gone"
    if isinstance(error, PermanentDeliveryError):
        return "permanent"
    if isinstance(error, RetryableDeliveryError):
        return "retry"
    return f"unmapped {type(error).__name__}"


Path = Callable[[DiscordFrontend], Awaitable[object]]


def _channel(front: DiscordFrontend) -> discord.PartialMessageable:
    return front.client.get_partial_messageable(CHANNEL_ID, guild_id=GUILD_ID)


PATHS: dict[str, Path] = {
    "post": lambda f: f.deliver(Reply("r1", KEY, "hello", 1, reply_to_message_id=MESSAGE_ID)),
    "edit": lambda f: f.drafts.edit_draft(KEY, MESSAGE_ID, "more"),
    "delete": lambda f: f.drafts.delete_draft(KEY, MESSAGE_ID),
    "draft look-up": lambda f: f.drafts.find_draft(
        KEY, Draft("d1", created_at=time.time(), reply_to=MESSAGE_ID)
    ),
    "channel look-up": lambda f: f.history._channel(CHANNEL_ID),
    "history page": lambda f: f.history._page(_channel(f), 0),
}


@pytest.fixture(autouse=True)
def short_timeout(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(aiohttp.client, "DEFAULT_TIMEOUT", aiohttp.ClientTimeout(total=TIMEOUT))


@pytest.fixture
async def front(fake_discord: FakeDiscord, clock: FakeClock) -> AsyncIterator[DiscordFrontend]:
    """Logged in to the fake Discord (so the client knows itself and its application)."""
    frontend = frontend_for(fake_discord, clock)
    await frontend.client.login(fake_discord.token)
    yield frontend
    await frontend.stop()


def rest_at(monkeypatch: pytest.MonkeyPatch, url: str) -> None:
    monkeypatch.setattr(discord.http.Route, "BASE", f"{url}api/v10")


@pytest.mark.parametrize("path", list(PATHS))
@pytest.mark.parametrize("fault", FAULTS, ids=[f.name for f in FAULTS])
async def test_every_rest_path_maps_a_failure_the_same_way(
    fault: Fault, path: str, front: DiscordFrontend, monkeypatch: pytest.MonkeyPatch
) -> None:
    async with fault.server() as url:
        rest_at(monkeypatch, url)
        if path == "delete" and fault.name == "unknown-channel":
            await PATHS[path](front)  # its channel is gone: nothing left to delete
            return
        with pytest.raises(BurstbotError) as caught:
            await PATHS[path](front)
    assert kind(caught.value) == fault.kind
    line = str(caught.value)
    assert fault.named in line and "\n" not in line and "<" not in line


async def test_an_edit_of_a_deleted_message_is_gone_and_its_delete_is_done(
    front: DiscordFrontend, monkeypatch: pytest.MonkeyPatch
) -> None:
    async with answering(discord_error(404, "Unknown Message", 10008)) as url:
        rest_at(monkeypatch, url)
        with pytest.raises(MessageGone):
            await front.drafts.edit_draft(KEY, MESSAGE_ID, "more")
        await front.drafts.delete_draft(KEY, MESSAGE_ID)


@pytest.mark.parametrize("fault", FAULTS, ids=[f.name for f in FAULTS])
async def test_the_log_in_fails_in_one_line_that_blames_no_token(
    fault: Fault, fake_discord: FakeDiscord, clock: FakeClock, monkeypatch: pytest.MonkeyPatch
) -> None:
    frontend = frontend_for(fake_discord, clock)
    async with fault.server() as url:
        rest_at(monkeypatch, url)
        with pytest.raises(BurstbotError) as caught:
            await frontend.start(None)  # type: ignore[arg-type]
    line = str(caught.value)
    assert not isinstance(caught.value, ConfigError), line
    assert line.startswith("discord: cannot reach Discord to log in") and fault.named in line
    assert "\n" not in line and "<" not in line


async def test_a_refused_token_is_the_one_config_error(
    fake_discord: FakeDiscord, clock: FakeClock, monkeypatch: pytest.MonkeyPatch
) -> None:
    frontend = frontend_for(fake_discord, clock)
    async with answering(discord_error(401, "401: Unauthorized")) as url:
        rest_at(monkeypatch, url)
        with pytest.raises(ConfigError, match=r"^discord\.token_env: Discord rejected the bot"):
            await frontend.start(None)  # type: ignore[arg-type]


@pytest.mark.parametrize("fault", FAULTS, ids=[f.name for f in FAULTS])
async def test_a_failed_command_registration_is_one_warning_and_start_goes_on(
    fault: Fault,
    front: DiscordFrontend,
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
) -> None:
    async with fault.server() as url:
        rest_at(monkeypatch, url)
        await commands.register_commands(front.client, front.tree)
    [warning] = [r for r in caplog.records if "slash commands" in r.getMessage()]
    assert warning.levelno == logging.WARNING and fault.named in warning.getMessage()
