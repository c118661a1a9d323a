"""`burstbot run` in Slack HTTP mode, tried as an attacker would: a thousand unsigned junk requests
of every kind, then a real message.

Acceptance: every junk request gets a 4xx, the process stays up, its log stays under 1,100 lines
(one line per refused request, no tracebacks), and the valid message afterwards is answered
exactly once. A real process on the wall clock against the fake Slack Web API.
"""

from __future__ import annotations

import asyncio
import itertools
import signal
import time
from collections import Counter
from pathlib import Path

import aiohttp

from testkit.fake_slack import EventSender, FakeSlackApi, dm
from tests.test_slack_cli import (
    SECRET,
    api,
    free_port,
    settled_replies,
    start_burstbot,
    until,
    write_config,
)
from tests.test_slack_endpoint import unsigned_junk

__all__ = ["api"]  # fixture

JUNK_REQUESTS = 1_000
CONCURRENCY = 20


async def wait_until_listening(url: str, process: asyncio.subprocess.Process) -> None:
    deadline = time.monotonic() + 15
    async with aiohttp.ClientSession() as session:
        while True:
            try:
                async with session.get(url) as response:  # only POST is routed: a 405
                    await response.read()
                    return
            except aiohttp.ClientConnectionError:
                assert process.returncode is None and time.monotonic() < deadline
                await asyncio.sleep(0.1)


async def test_a_thousand_junk_requests_then_one_message_answered_once(
    api: FakeSlackApi, tmp_path: Path
) -> None:
    port = free_port()
    url = f"http://127.0.0.1:{port}/slack/events"
    process = await start_burstbot(write_config(tmp_path, api, port), "xoxb-test")
    try:
        await wait_until_listening(url, process)
        kinds = itertools.cycle(unsigned_junk(int(time.time())))
        statuses: list[int] = []
        started = time.monotonic()
        async with aiohttp.ClientSession(
            connector=aiohttp.TCPConnector(limit=CONCURRENCY)
        ) as session:

            async def attack(body: bytes, headers: dict[str, str]) -> None:
                async with session.post(url, data=body, headers=headers) as response:
                    await response.read()
                    statuses.append(response.status)

            batch = [next(kinds) for _ in range(JUNK_REQUESTS)]
            await asyncio.gather(*(attack(body, headers) for _, body, headers, _ in batch))
        took = time.monotonic() - started
        assert len(statuses) == JUNK_REQUESTS
        assert all(400 <= status < 500 for status in statuses), sorted(set(statuses))
        assert process.returncode is None, "the process died"

        sender = EventSender(url, SECRET)
        assert await sender.send(dm("1700000000.000001", "are you still there?")) == 200
        await until(lambda: len(api.posts()) == 1)
        replies = await settled_replies(tmp_path / "burstbot.db")  # nothing more to post
        assert [len(answers) for answers in replies.values()] == [1]
        assert [p.text for p in api.posts()] == [
            "Got your 1 message:\n> alice: are you still there?"
        ]
    finally:
        if process.returncode is None:
            process.send_signal(signal.SIGTERM)
        _, stderr = await asyncio.wait_for(process.communicate(), 15)
    log = stderr.decode().splitlines()
    assert process.returncode == 0, stderr.decode()[-2000:]
    assert len(log) < 1_100, log[-5:]
    assert not any("Traceback" in line for line in log)
    refused = [line for line in log if "slack: refused a request from 127.0.0.1" in line]
    assert len(refused) == JUNK_REQUESTS
    counts = dict(sorted(Counter(statuses).items()))
    print(f"\n{JUNK_REQUESTS} junk requests in {took:.2f}s; statuses {counts}; "
          f"{len(log)} log lines; {len(api.posts())} post(s)")  # fmt: skip
