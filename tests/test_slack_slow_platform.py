"""Tried as a new user would: `burstbot run` in Slack HTTP mode against a slow Web API.

Every `chat.postMessage` answers only after 0.8 × the lease TTL, so a four-part reply takes far
longer to post than one claim lasts. The reply must still reach Slack exactly once, in order: the
fake records every raw post and dedupes nothing (Slack does not).
"""

from __future__ import annotations

import asyncio
import signal
import time
from collections.abc import AsyncIterator
from pathlib import Path

import aiohttp
import pytest

from adapters.slack.mrkdwn import split_mrkdwn, to_mrkdwn
from testkit.fake_slack import EventSender, FakeSlackApi, dm
from tests.test_slack_cli import (
    SECRET,
    free_port,
    settled_replies,
    start_burstbot,
    until,
    write_config,
)

TTL = 1.0
PARAGRAPHS = [f"paragraph {n}: " + " ".join(f"word{n}x{i}" for i in range(330)) for n in range(4)]


@pytest.fixture
async def api() -> AsyncIterator[FakeSlackApi]:
    fake = await FakeSlackApi().start()
    fake.slow("chat.postMessage", 0.8 * TTL)
    yield fake
    await fake.stop()


async def test_a_four_part_reply_reaches_a_slow_slack_exactly_once_in_order(
    api: FakeSlackApi, tmp_path: Path
) -> None:
    port = free_port()
    extra = f"[lease]\nttl_seconds = {TTL}\n"  # the poll stays 0.2 s: claims matter here
    process = await start_burstbot(write_config(tmp_path, api, port, extra), "xoxb-test")
    sender = EventSender(f"http://127.0.0.1:{port}/slack/events", SECRET)
    text = "\n\n".join(PARAGRAPHS)
    expected = split_mrkdwn(to_mrkdwn(f"Got your 1 message:\n> alice: {text}"))
    assert len(expected) == 4
    try:
        deadline = time.monotonic() + 15
        while True:  # the endpoint is up once a request connects
            try:
                assert await sender.send(dm("1700000000.000001", text)) == 200
                break
            except aiohttp.ClientConnectionError:
                assert process.returncode is None and time.monotonic() < deadline
                await asyncio.sleep(0.1)
        await until(lambda: len(api.posts()) >= 4, within=30)
        # sent, so no re-claim can post it again
        replies = await settled_replies(tmp_path / "burstbot.db")
        assert [[state for state, _ in answers] for answers in replies.values()] == [["sent"]]
    finally:
        if process.returncode is None:
            process.send_signal(signal.SIGTERM)
        _, stderr = await asyncio.wait_for(process.communicate(), 30)
    assert process.returncode == 0, stderr.decode()
    assert [post.text for post in api.posts()] == expected
