"""The HTTP endpoint as an attacker meets it: unsigned junk is refused before anything parses it,
signed but unusable requests are acknowledged (so Slack does not retry them); each costs one
WARNING line and never a traceback, and a valid message afterwards is answered once."""

from __future__ import annotations

import asyncio
import hashlib
import hmac
import json
import logging
import time
from typing import Any

import aiohttp
import pytest

from adapters.slack.endpoint import verify
from testkit.fake_slack import FakeSlackApi, dm, event_callback
from tests.slack_harness import DM_KEY, SECRET, Bot, api, bot, ts

__all__ = ["api", "bot"]  # fixtures

NOW = 1_700_000_000
DEEP_LIST = "[" * 100_000 + "]" * 100_000
DEEP_OBJECT = '{"a":' * 5_000 + "1" + "}" * 5_000


def sign(body: bytes, stamp: str, secret: str = SECRET) -> str:
    base = b"v0:" + stamp.encode() + b":" + body
    return "v0=" + hmac.new(secret.encode(), base, hashlib.sha256).hexdigest()


def signed_headers(body: bytes, content_type: str = "application/json") -> dict[str, str]:
    stamp = str(int(time.time()))
    return {"Content-Type": content_type, "X-Slack-Request-Timestamp": stamp,
            "X-Slack-Signature": sign(body, stamp)}  # fmt: skip


def unsigned_junk(now: int) -> list[tuple[str, bytes, dict[str, str], int]]:
    """(what, body, headers, expected status) for each kind of junk from the open internet."""
    json_type = {"Content-Type": "application/json"}
    fresh = str(now)
    return [
        ("garbage body", b"garbage{", json_type, 401),
        ("null", b"null", json_type, 401),
        ("deeply nested JSON", DEEP_LIST.encode(), json_type, 401),
        ("no headers", b'{"type": "event_callback"}', {}, 401),
        ("signature only", b"{}", {"X-Slack-Signature": "v0=00"}, 401),
        ("timestamp only", b"{}", {"X-Slack-Request-Timestamp": fresh}, 401),
        ("non-numeric timestamp", b"{}",
         {"X-Slack-Request-Timestamp": "soon", "X-Slack-Signature": "v0=00"}, 400),
        ("non-ASCII digits", b"{}",
         {"X-Slack-Request-Timestamp": "١٧٠٠", "X-Slack-Signature": "v0=00"}, 400),
        ("a huge timestamp", b"{}",
         {"X-Slack-Request-Timestamp": "9" * 400, "X-Slack-Signature": "v0=00"}, 400),
        ("stale timestamp", b"{}",
         {"X-Slack-Request-Timestamp": str(now - 3600), "X-Slack-Signature": sign(b"{}", "1")},
         401),
        ("wrong signature", b"{}",
         {"X-Slack-Request-Timestamp": fresh, "X-Slack-Signature": sign(b"{}", fresh, "guess")},
         401),
        ("non-ASCII signature", b"{}",
         {"X-Slack-Request-Timestamp": fresh, "X-Slack-Signature": "v0=é"}, 401),
        ("a body that is not UTF-8", b"\xff{}",
         {"X-Slack-Request-Timestamp": fresh, "X-Slack-Signature": sign(b"\xff{}", fresh)}, 400),
        ("signature for another body", b'{"x": 1}',
         {"X-Slack-Request-Timestamp": fresh, "X-Slack-Signature": sign(b"{}", fresh)}, 401),
    ]  # fmt: skip


def signed_junk() -> list[tuple[str, str, str]]:
    """(what, body, content type) that Slack could sign but this app cannot use."""
    message = {"type": "message", "channel": "D1", "channel_type": "im", "user": "U1",
               "text": "hi", "ts": ts(90)}  # fmt: skip
    without_channel = {k: v for k, v in message.items() if k != "channel"}
    form = "application/x-www-form-urlencoded"
    bodies: list[tuple[str, Any]] = [
        ("no channel", event_callback(without_channel)),
        ("channel is a number", event_callback({**message, "channel": 5})),
        ("ts is an object", event_callback({**message, "ts": {}})),
        ("text is a list", event_callback({**message, "text": ["hi"]})),
        ("files is a string", event_callback({**message, "files": "x"})),
        ("user is an object", event_callback({**message, "user": {}})),
        ("edit without message", event_callback({**message, "subtype": "message_changed",
                                                 "message": "x"})),
        ("event is a string", {"type": "event_callback", "team_id": "T0001", "event": "x"}),
        ("team_id is a number", {**event_callback(message), "team_id": 5}),
        ("authorizations is a string", {**event_callback(message), "authorizations": "x"}),
        ("an unsubscribed event", event_callback({"type": "reaction_added"})),
        ("an unknown envelope", {"type": "something_new"}),
        ("URL check without a challenge", {"type": "url_verification"}),
    ]  # fmt: skip
    cases = [(what, json.dumps(body), "application/json") for what, body in bodies]
    cases += [
        ("garbage body", "garbage{", "application/json"),
        ("null", "null", "application/json"),
        ("a list", "[1, 2]", "application/json"),
        ("deeply nested list", DEEP_LIST, "application/json"),
        ("deeply nested object", DEEP_OBJECT, "application/json"),
        ("empty body", "", "application/json"),
        ("a form of nothing", "a=b&c", form),
        ("interactivity junk", "payload=garbage{", form),
        ("interactivity null", "payload=null", form),
        ("an unknown command", "command=/deploy&channel_id=C1", form),
    ]
    return cases


@pytest.mark.parametrize(
    ("what", "body", "headers", "status"), unsigned_junk(NOW), ids=lambda v: str(v)[:30]
)
def test_verify_refuses_unsigned_junk_before_parsing(
    what: str, body: bytes, headers: dict[str, str], status: int
) -> None:
    rejection = verify(headers, body, SECRET, NOW)
    assert rejection is not None and rejection.status == status, what


def test_verify_accepts_a_correct_signature_within_five_minutes() -> None:
    body = b'{"type": "event_callback"}'
    stamp = str(NOW - 200)
    headers = {"X-Slack-Request-Timestamp": stamp, "X-Slack-Signature": sign(body, stamp)}
    assert verify(headers, body, SECRET, NOW) is None
    assert verify(headers, body, SECRET, NOW + 200) is not None


async def post(url: str, body: bytes, headers: dict[str, str]) -> int:
    async with (
        aiohttp.ClientSession() as session,
        session.post(url, data=body, headers=headers) as response,
    ):
        await response.read()
        return response.status


def warnings_and_worse(caplog: pytest.LogCaptureFixture) -> list[logging.LogRecord]:
    return [r for r in caplog.records if r.levelno >= logging.WARNING]


async def test_unsigned_junk_gets_4xx_and_one_warning_line_each(
    bot: Bot, api: FakeSlackApi, caplog: pytest.LogCaptureFixture
) -> None:
    for what, body, headers, status in unsigned_junk(int(time.time())):
        caplog.clear()
        assert await post(bot.sender.url, body, headers) == status, what
        [record] = warnings_and_worse(caplog)
        assert record.levelno == logging.WARNING and record.exc_info is None, what
        assert record.getMessage().startswith("slack: refused a request from 127.0.0.1: ")
        assert "\n" not in record.getMessage()
    assert await bot.store.conversation_state(DM_KEY.id) is None


async def test_signed_junk_is_acknowledged_with_one_warning_and_never_retried(
    bot: Bot, api: FakeSlackApi, caplog: pytest.LogCaptureFixture
) -> None:
    for what, body, content_type in signed_junk():
        caplog.clear()
        raw = body.encode()
        assert await post(bot.sender.url, raw, signed_headers(raw, content_type)) == 200, what
        records = warnings_and_worse(caplog)
        assert len(records) == 1, (what, [r.getMessage() for r in records])
        assert records[0].levelno == logging.WARNING and records[0].exc_info is None, what
        assert "\n" not in records[0].getMessage()
    assert await bot.store.conversation_state(DM_KEY.id) is None
    caplog.clear()
    assert await bot.send(dm(ts(1), "still there?")) == 200
    await bot.step(2)
    assert [p.text for p in api.posts()] == ["reply to: still there?"]
    assert warnings_and_worse(caplog) == []


async def test_a_body_over_the_limit_is_refused(bot: Bot) -> None:
    body = b"x" * (2 * 1024 * 1024)
    assert await post(bot.sender.url, body, signed_headers(body)) == 413


@pytest.mark.parametrize(
    "raw",
    [
        b"garbage{\r\n\r\n",
        b"\x00\xff\xfe" * 50 + b"\r\n\r\n",
        b"POST /slack/events HTTP/1.1\r\nHost: x\r\nContent-Length: lots\r\n\r\n",
        b"POST /slack/events HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\n",
        b"POST /slack/events HTTP/1.1\r\nHost: x\r\nBad Header\r\n\r\n",
    ],
)
async def test_malformed_http_is_refused_in_at_most_one_line(
    bot: Bot, caplog: pytest.LogCaptureFixture, raw: bytes
) -> None:
    reader, writer = await asyncio.open_connection("127.0.0.1", bot.frontend.http_port)
    try:
        writer.write(raw)
        await writer.drain()
        answer = await asyncio.wait_for(reader.read(100), 5)
    finally:
        writer.close()
    assert answer.startswith((b"HTTP/1.0 400", b"HTTP/1.1 400"))
    records = warnings_and_worse(caplog)
    assert len(records) <= 1 and all(r.exc_info is None for r in records)
    assert all(r.levelno == logging.WARNING and "\n" not in r.getMessage() for r in records)
