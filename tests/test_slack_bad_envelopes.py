"""A Socket Mode envelope that cannot be read costs one log line, not the connection.

Real Bolt and slack_sdk's Socket Mode client against the fake Slack's WebSocket: frames no Slack
should send (not JSON, JSON of the wrong shape, an envelope without its id, type or payload, an
`events_api` payload without its event, binary), then a real message: the same connection is
up, the message is stored, acknowledged and answered once, and nothing logged a traceback.
"""

from __future__ import annotations

import asyncio
import json
import logging

import pytest

from testkit.fake_slack import FakeSlackApi, dm, event_callback
from tests.slack_harness import DM_KEY, api, running_bot, stored_texts, ts

__all__ = ["api"]  # fixture

BROKEN: list[str | bytes] = [
    "not json at all {",
    "{not json either",
    json.dumps([1, 2, 3]),
    json.dumps("a string"),
    json.dumps({"type": "events_api"}),
    json.dumps({"envelope_id": "e-1", "type": "events_api", "payload": "not an object"}),
    json.dumps({"envelope_id": "e-2", "type": "events_api", "payload": {"type": "event_callback"}}),
    json.dumps(
        {
            "envelope_id": "e-3",
            "type": "events_api",
            "payload": {**event_callback(dm(ts(5), "x")), "event": "not an object"},
        }
    ),
    json.dumps({"envelope_id": "e-4", "payload": event_callback(dm(ts(6), "no type"))}),
    json.dumps({"envelope_id": "e-5", "type": "no_such_type", "payload": {}}),
    json.dumps({"envelope_id": None, "type": "events_api", "payload": None}),
    b"\x00\x01binary",
]


async def test_broken_envelopes_are_dropped_and_the_socket_keeps_answering(
    api: FakeSlackApi, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG)
    async with running_bot(api, mode="socket") as bot:
        opened = api.methods().count("apps.connections.open")
        for frame in BROKEN:
            await api.push_raw(frame)
        api.ack_received.clear()
        good = await api.push_envelope(dm(ts(1), "still there?"))
        async with asyncio.timeout(5):
            while good not in api.acks:  # noqa: ASYNC110
                await asyncio.sleep(0.005)
        assert await stored_texts(bot, DM_KEY) == ["still there?"]
        await bot.step(1.5)
        assert [post.text for post in api.posts()] == ["reply to: still there?"]
        assert len(api.sockets) == 1 and api.methods().count("apps.connections.open") == opened
    tracebacks = [r for r in caplog.records if r.exc_info and r.levelno >= logging.WARNING]
    assert tracebacks == [], [r.getMessage() for r in tracebacks]
