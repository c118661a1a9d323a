"""`burstbot run` as an operator runs it: Slack in HTTP mode against a fake Slack Web API.

These run a real process on the wall clock; waits are bounded polls for I/O. The quiet window is
long (3 s) so a burst sent in one go is not split by a busy machine, and "nothing more was posted"
is read from the store once every message is answered and every reply sent (`settled_replies`),
never from a pause.
"""

from __future__ import annotations

import asyncio
import os
import signal
import socket
import sys
import time
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

import aiohttp
import aiosqlite
import pytest

from testkit.fake_slack import EventSender, FakeSlackApi, assistant_event, dm
from tests import pg

ROOT = Path(__file__).resolve().parent.parent
SECRET = "operator-signing-secret"


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def write_config(
    tmp_path: Path, api: FakeSlackApi, port: int, extra: str = "", storage_url: str = ""
) -> Path:
    """`extra` adds TOML sections, and keys at the end of `[slack]`; the store is SQLite in
    `tmp_path` unless `storage_url` names another."""
    config = tmp_path / "burstbot.toml"
    config.write_text(
        f"""{extra}
[storage]
url = "{storage_url or f"sqlite:///{tmp_path / 'burstbot.db'}"}"

[debounce]
quiet_seconds = 3.0
max_wait_seconds = 30.0

[engine]
poll_seconds = 0.2

[llm]
provider = "offline"

[console]
enabled = false

[slack]
enabled = true
mode = "http"
api_base_url = "{api.url}"
http_port = {port}
"""
    )
    return config


async def start_burstbot(config: Path, token: str, *extra: str) -> asyncio.subprocess.Process:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("SLACK_", "ANTHROPIC_"))}
    env.update(
        PYTHONPATH=str(ROOT), SLACK_BOT_TOKEN=token, SLACK_SIGNING_SECRET=SECRET
    )  # fmt: skip
    return await asyncio.create_subprocess_exec(
        sys.executable, "-m", "bot", "run", "--config", str(config), *extra,
        cwd=config.parent, env=env,
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
    )  # fmt: skip


async def until(condition: Callable[[], bool], within: float = 15.0) -> None:
    deadline = time.monotonic() + within
    while not condition():
        assert time.monotonic() < deadline, "timed out"
        await asyncio.sleep(0.05)


CONVERSATIONS = "SELECT id, version, answered_version FROM conversations"
REPLIES = "SELECT conversation_id, state, text FROM replies ORDER BY id"
Rows = list[tuple[Any, ...]]


async def stored_rows(db: Path | str) -> tuple[Rows, Rows]:
    """Conversations and replies in the SQLite file `db`, or in PostgreSQL's schema `db`."""
    if isinstance(db, Path):
        async with aiosqlite.connect(f"file:{db}?mode=ro", uri=True) as conn:
            conversations = await conn.execute_fetchall(CONVERSATIONS)
            return [tuple(r) for r in conversations], [
                tuple(r) for r in await conn.execute_fetchall(REPLIES)
            ]
    import asyncpg

    pg_conn = await asyncpg.connect(pg.dsn(), server_settings={"search_path": db})
    try:
        return [tuple(r) for r in await pg_conn.fetch(CONVERSATIONS)], [
            tuple(r) for r in await pg_conn.fetch(REPLIES)
        ]
    finally:
        await pg_conn.close()


async def settled_replies(db: Path | str, within: float = 30.0) -> dict[str, list[tuple[str, str]]]:
    """Each conversation's replies (state, text) in the store `db` (see `stored_rows`), once every
    stored message is answered and every reply sent or failed: everything the process has posted
    and ever will."""
    deadline = time.monotonic() + within
    while True:
        conversations, rows = await stored_rows(db)
        replies: dict[str, list[tuple[str, str]]] = {str(c[0]): [] for c in conversations}
        for cid, state, text in rows:
            replies[str(cid)].append((str(state), str(text)))
        answered = all(version == done for _, version, done in conversations)
        if answered and all(state in ("sent", "failed") for _, state, _ in rows):
            return replies
        assert time.monotonic() < deadline, f"not settled: {conversations} {rows}"
        await asyncio.sleep(0.1)


@pytest.fixture
async def pg_schema() -> AsyncIterator[str]:
    """A fresh PostgreSQL schema: `--workers N` refuses SQLite (skips without a server)."""
    schema = await pg.create_schema("burstbot_workers")
    yield schema
    await pg.drop_schema(schema)


def pg_url(schema: str) -> str:
    return f"{pg.dsn()}?search_path={schema}"


@pytest.fixture
async def api() -> AsyncIterator[FakeSlackApi]:
    fake = await FakeSlackApi().start()
    yield fake
    await fake.stop()


async def test_operator_run_answers_a_dm_burst_once_and_ignores_a_retry(
    api: FakeSlackApi, tmp_path: Path
) -> None:
    port = free_port()
    process = await start_burstbot(write_config(tmp_path, api, port), "xoxb-test")
    sender = EventSender(f"http://127.0.0.1:{port}/slack/events", SECRET)
    try:
        first = dm("1700000000.000001", "hey")
        deadline = time.monotonic() + 15
        while True:  # the endpoint is up once a request connects
            try:
                assert await sender.send(first) == 200
                break
            except aiohttp.ClientConnectionError:
                assert process.returncode is None and time.monotonic() < deadline
                await asyncio.sleep(0.1)
        assert await sender.send(dm("1700000000.000002", "quick question")) == 200
        assert await sender.send(dm("1700000000.000003", "is prod up?")) == 200
        await until(lambda: len(api.posts()) == 1)
        assert api.posts()[0].text == (
            "Got your 3 messages:\n> alice: hey\n> alice: quick question\n> alice: is prod up?"
        )
        assert await sender.send(first, retry_num=1) == 200  # Slack's retry of an answered one
        assert await sender.send(dm("1700000000.000004", "thanks")) == 200
        await until(lambda: len(api.posts()) == 2)
        assert api.posts()[1].text == "Got your 1 message:\n> alice: thanks"
    finally:
        if process.returncode is None:
            process.send_signal(signal.SIGTERM)
        _, stderr = await asyncio.wait_for(process.communicate(), 15)
    assert process.returncode == 0, stderr.decode()
    assert len(api.posts()) == 2


async def test_operator_run_serves_an_assistant_thread(api: FakeSlackApi, tmp_path: Path) -> None:
    """Opened from the assistant panel: prompts once; three quick lines, one answer, a title."""
    api.status_supported = True  # the app has assistant:write
    port = free_port()
    prompts = '[slack.assistant]\nsuggested_prompts = [{ title = "Hi", message = "Say hi" }]\n'
    process = await start_burstbot(write_config(tmp_path, api, port, prompts), "xoxb-test")
    sender = EventSender(f"http://127.0.0.1:{port}/slack/events", SECRET)
    channel, thread = api.open_assistant_thread("U1")
    opened = assistant_event("assistant_thread_started", channel, thread, "U1", "C7")
    try:
        deadline = time.monotonic() + 15
        while True:  # the endpoint is up once a request connects
            try:
                assert await sender.send(opened, event_id="Ev1") == 200
                break
            except aiohttp.ClientConnectionError:
                assert process.returncode is None and time.monotonic() < deadline
                await asyncio.sleep(0.1)
        assert await sender.send(opened, event_id="Ev1", retry_num=1) == 200
        for n, text in enumerate(["hey", "quick question", "is prod up?"]):
            line = dm(f"{float(thread) + n + 1:.6f}", text, thread_ts=thread, channel=channel)
            assert await sender.send(line) == 200
        await until(lambda: len(api.posts()) == 1 and api.titles != [])
        [answer] = api.posts()
        assert answer.thread_ts == thread and answer.text.startswith("Got your 3 messages:")
        assert api.suggested == [(channel, thread, [{"title": "Hi", "message": "Say hi"}], None)]
        assert api.titles == [(channel, thread, "hey")]
    finally:
        if process.returncode is None:
            process.send_signal(signal.SIGTERM)
        _, stderr = await asyncio.wait_for(process.communicate(), 15)
    assert process.returncode == 0, stderr.decode()


async def test_rejected_bot_token_prints_one_line_and_exits_2(
    api: FakeSlackApi, tmp_path: Path
) -> None:
    process = await start_burstbot(write_config(tmp_path, api, free_port()), "xoxb-revoked")
    _, stderr = await asyncio.wait_for(process.communicate(), 30)
    assert process.returncode == 2
    assert stderr.decode().strip().splitlines() == [
        "burstbot: config error: slack.bot_token_env: Slack rejected the bot token in "
        "SLACK_BOT_TOKEN (invalid_auth)"
    ]


async def test_two_workers_share_one_port_and_one_store_and_stop_together(
    api: FakeSlackApi, tmp_path: Path, pg_schema: str
) -> None:
    port = free_port()
    config = write_config(tmp_path, api, port, storage_url=pg_url(pg_schema))
    process = await start_burstbot(config, "xoxb-test", "--workers", "2", "-v")
    sender = EventSender(f"http://127.0.0.1:{port}/slack/events", SECRET)
    try:
        await until(lambda: api.methods().count("auth.test") == 2)  # both workers started
        for n in range(1, 21):  # new connections: the kernel spreads them over both workers
            event = dm(f"1700000000.{n:06d}", f"message {n}", channel=f"D{n % 4}")
            deadline = time.monotonic() + 15
            while True:
                try:
                    assert await sender.send(event) == 200
                    break
                except aiohttp.ClientConnectionError:
                    assert process.returncode is None and time.monotonic() < deadline
                    await asyncio.sleep(0.1)
        await until(lambda: len(api.posts()) == 4)
        replies = await settled_replies(pg_schema)
        assert [len(answers) for answers in replies.values()] == [1, 1, 1, 1]  # one per burst
        assert sorted(p.channel for p in api.posts()) == ["D0", "D1", "D2", "D3"]
        assert all(p.text.startswith("Got your 5 messages:") for p in api.posts())
    finally:
        if process.returncode is None:
            process.send_signal(signal.SIGTERM)
        _, stderr = await asyncio.wait_for(process.communicate(), 30)
    log = stderr.decode()
    assert process.returncode == 0, log
    assert log.count("slack: events endpoint on") == 2, log
    assert len(api.posts()) == 4


async def test_a_reload_of_the_workers_parent_reaches_every_worker(
    api: FakeSlackApi, tmp_path: Path, pg_schema: str
) -> None:
    """`engine.pid_file` names the parent of `--workers N`; its SIGHUP reloads every worker."""
    pid_file = tmp_path / "burstbot.pid"
    config = write_config(tmp_path, api, free_port(), storage_url=pg_url(pg_schema))
    text = config.read_text().replace("[engine]\n", f'[engine]\npid_file = "{pid_file}"\n', 1)
    config.write_text(text)
    process = await start_burstbot(config, "xoxb-test", "--workers", "2")
    try:
        await until(lambda: api.methods().count("auth.test") == 2)  # both workers started
        assert pid_file.read_text().strip() == str(process.pid)
        config.write_text(text.replace("quiet_seconds = 3.0", "quiet_seconds = 3.5"))
        process.send_signal(signal.SIGHUP)
        seen = await lines_until(process, "config reloaded from", 2)
    finally:
        if process.returncode is None:
            process.send_signal(signal.SIGTERM)
        _, stderr = await asyncio.wait_for(process.communicate(), 30)
    log = seen + stderr.decode()
    assert process.returncode == 0, log
    assert log.count("config reloaded from") == 2, log
    assert not pid_file.exists()


async def lines_until(process: asyncio.subprocess.Process, text: str, count: int) -> str:
    """The process's log up to the `count`th line containing `text` (bounded wait)."""
    assert process.stderr is not None
    seen: list[str] = []
    async with asyncio.timeout(15):
        while sum(text in line for line in seen) < count:
            line = (await process.stderr.readline()).decode()
            if not line:
                break
            seen.append(line)
    return "".join(seen)
