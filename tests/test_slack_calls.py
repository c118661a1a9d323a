"""One failure, one meaning, on every Slack call path (adapters/slack/calls.py).

Each path (a post, an update, a delete, the look-up for earlier posts, a native stream's start,
stop and look-up, a thread look-up, the start-up token check, a file download) runs through the
real `AsyncWebClient` (or aiohttp for files) against a server on 127.0.0.1 that fails in one way:
an outage page, a JSON 500, a refused or reset connection, a timeout, a 429 with Retry-After, a
permanent Slack error. Every path must raise the core's error of the same kind for the same
failure: retried, rate limited with the Retry-After, permanent with its name — never a raw
library exception, and never a verdict on the token for an outage.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import AbstractAsyncContextManager
from dataclasses import dataclass

import aiohttp
import pytest

import adapters.download
import adapters.slack.transport
from adapters.slack import SlackFrontend, files
from adapters.slack.history import History
from adapters.slack.inbound import Identity
from adapters.slack.outbound import Outbound, part_metadata
from adapters.slack.streaming import SlackDrafts
from adapters.slack.transport import web_client
from bot.config import SlackConfig, parse_config
from bot.core.errors import (
    BurstbotError,
    ConfigError,
    FetchError,
    MessageGone,
    PermanentDeliveryError,
    RateLimited,
    RetryableDeliveryError,
)
from bot.core.events import Attachment, ConversationKey, Reply
from testkit.fake_slack import BOT_ID, BOT_USER, TEAM
from tests.failing_network import Answer, answering, refusing, resetting, silent

TIMEOUT = 0.5  # the client's timeout against the silent server
KEY = ConversationKey("slack", TEAM, "C1", "")
THREAD = ConversationKey("slack", TEAM, "C1", "1.000100")
PAGE = (
    "<!DOCTYPE html>\n<html><head><title>503 Service Unavailable</title></head>\n"
    "<body><h1>503 Service Unavailable</h1></body></html>\n"
)


def slack_error(error: str, status: int = 200, **headers: str) -> Answer:
    return Answer(status, json.dumps({"ok": False, "error": error}), headers=headers)


@dataclass(frozen=True)
class Fault:
    name: str
    server: Callable[[], AbstractAsyncContextManager[str]]
    kind: str  # what every path must make of it: retry, rate limited, permanent
    named: str = ""  # what the error's line must say
    api_only: bool = False  # an error in Slack's JSON: a file download sees a 200 body


def scripted(answer: Answer) -> Callable[[], AbstractAsyncContextManager[str]]:
    return lambda: answering(answer)


OUTAGE = "upstream connect error or disconnect/reset before headers"
# fmt: off
FAULTS = [
    Fault("outage-page", scripted(Answer(503, OUTAGE, "text/plain")), "retry", "HTTP 503"),
    Fault("html-page", scripted(Answer(503, PAGE, "text/html")), "retry", "503"),
    Fault("json-500", scripted(slack_error("internal_error", 500)), "retry", "internal_error",
          api_only=True),
    Fault("refused", refusing, "retry"),
    Fault("reset", resetting, "retry"),
    Fault("timeout", silent, "retry"),
    Fault("rate-limited", scripted(slack_error("ratelimited", 429, **{"Retry-After": "30"})),
          "rate limited 30.0", "rate limited"),
    Fault("channel-not-found", scripted(slack_error("channel_not_found")), "permanent",
          "channel_not_found", api_only=True),
    Fault("invalid-auth", scripted(slack_error("invalid_auth")), "permanent", "invalid_auth",
          api_only=True),
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


@dataclass
class Adapter:
    outbound: Outbound
    drafts: SlackDrafts
    history: History


Path = Callable[[Adapter], Awaitable[object]]
PATHS: dict[str, Path] = {
    "post": lambda a: a.outbound.post(KEY, "hi", part_metadata("r1", 0, KEY), "reply r1 part 0"),
    "update": lambda a: a.drafts.edit_draft(KEY, "C1:1.000200", "more"),
    "delete": lambda a: a.drafts.delete_draft(KEY, "C1:1.000200"),
    "earlier posts": lambda a: a.outbound.posted_parts(Reply("r1", KEY, "hi", 1, attempt=2)),
    "stream start": lambda a: a.drafts.streams.start(THREAD, "hello"),
    "stream stop": lambda a: a.drafts.streams.stop("C1:1.000200", None),
    "stream look-up": lambda a: a.drafts.streams.find_unlabelled(THREAD, "0"),
    "thread look-up": lambda a: a.history.thread_is_ours(THREAD),
}


@pytest.fixture(autouse=True)
def short_timeout(monkeypatch: pytest.MonkeyPatch) -> None:
    """Calls time out after TIMEOUT; aiohttp's own limit is gone, so only ours can end a call
    to the silent server."""
    monkeypatch.setattr(adapters.slack.transport, "API_TIMEOUT_SECONDS", TIMEOUT)
    monkeypatch.setattr(adapters.download, "DOWNLOAD_TIMEOUT_SECONDS", TIMEOUT)
    monkeypatch.setattr(aiohttp.client, "DEFAULT_TIMEOUT", aiohttp.ClientTimeout())


@pytest.fixture
async def session() -> AsyncIterator[aiohttp.ClientSession]:
    async with aiohttp.ClientSession() as opened:
        yield opened


def slack_config(base_url: str) -> SlackConfig:
    return parse_config({"console": {"enabled": False}, "llm": {"provider": "offline"},
                         "slack": {"enabled": True, "mode": "http", "api_base_url": base_url,
                                   "http_port": 0}}).slack  # fmt: skip


@pytest.fixture
async def sessions() -> AsyncIterator[list[aiohttp.ClientSession]]:
    opened: list[aiohttp.ClientSession] = []
    yield opened
    for session in opened:
        await session.close()


def adapter(base_url: str, sessions: list[aiohttp.ClientSession]) -> Adapter:
    """The adapter's objects on the front end's own client (its session, its timeout)."""
    client, session = web_client(slack_config(base_url), "xoxb-test")
    sessions.append(session)
    identity = Identity(TEAM, BOT_USER, BOT_ID)
    outbound = Outbound(client, identity)
    return Adapter(outbound, SlackDrafts(outbound), History(client, identity, frozenset()))


@pytest.mark.parametrize("path", list(PATHS))
@pytest.mark.parametrize("fault", FAULTS, ids=[f.name for f in FAULTS])
async def test_every_web_api_path_maps_a_failure_the_same_way(
    fault: Fault, path: str, sessions: list[aiohttp.ClientSession]
) -> None:
    async with fault.server() as url:
        with pytest.raises(BurstbotError) as caught:
            await PATHS[path](adapter(url, sessions))
    assert kind(caught.value) == fault.kind
    line = str(caught.value)
    assert fault.named in line and "\n" not in line and "<" not in line


@pytest.mark.parametrize("fault", FAULTS, ids=[f.name for f in FAULTS])
async def test_the_start_up_token_check_blames_the_token_only_when_slack_refused_it(
    fault: Fault,
) -> None:
    """A 429 or a 500 at start-up says nothing of the token: the start fails as an outage (the
    service manager starts it again), not as a config error to fix (exit 2)."""
    async with fault.server() as url:
        frontend = SlackFrontend(slack_config(url), "xoxb-test", signing_secret="s")
        with pytest.raises(BurstbotError) as caught:
            await frontend.start(None)  # type: ignore[arg-type]
    line = str(caught.value)
    assert "\n" not in line and "<" not in line
    if fault.kind == "permanent":
        assert isinstance(caught.value, ConfigError)
        assert line == (f"slack.bot_token_env: Slack rejected the bot token in SLACK_BOT_TOKEN "
                        f"({fault.named})")  # fmt: skip
    else:
        assert not isinstance(caught.value, ConfigError), line
        assert line.startswith("slack: the Slack Web API at ") and "unavailable" in line


@pytest.mark.parametrize("fault", [f for f in FAULTS if not f.api_only], ids=lambda f: f.name)
async def test_a_file_download_maps_a_failure_like_every_call(
    fault: Fault, session: aiohttp.ClientSession
) -> None:
    async with fault.server() as url:
        attachment = Attachment("F1", "a.png", "image/png", 10, f"{url}files/F1/a.png")
        with pytest.raises(FetchError) as caught:
            await files.fetch(session, "xoxb-test", attachment, 1000, {"127.0.0.1"})
    assert kind(caught.value) == fault.kind
    assert "\n" not in str(caught.value) and "<" not in str(caught.value)


async def test_a_deleted_message_is_gone_for_an_update_and_done_for_a_delete(
    sessions: list[aiohttp.ClientSession],
) -> None:
    async with answering(slack_error("message_not_found")) as url:
        slack = adapter(url, sessions)
        with pytest.raises(MessageGone):
            await slack.drafts.edit_draft(KEY, "C1:1.000200", "more")
        await slack.drafts.delete_draft(KEY, "C1:1.000200")  # nothing left to delete: fine
