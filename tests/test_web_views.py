"""What the operator's pages gather (the processes with the leases they hold, felt waits, the
histogram), the usage page's extra panels (the hook for feedback votes), and which worker serves
the page."""

from __future__ import annotations

import os
import re
import socket
from pathlib import Path
from typing import Any

import pytest

from bot import __version__
from bot.cli.serve import for_worker
from bot.cli.status import processes
from bot.config import parse_config
from bot.core.actions import ActionRecord
from bot.core.events import ConversationKey
from bot.core.processes import ProcessRecord
from bot.core.store import ConversationState, ConversationSummary
from bot.tool_servers import McpHub
from bot.web.feedback import feedback_panel
from bot.web.views import tool_servers, wait_histogram
from storage.postgres import PostgresStore
from storage.sqlite import SqliteStore
from tests import pg
from tests.test_vote_reports import GENERAL, NOW, answered, vote
from tests.web_harness import (
    ANSWERED,
    FAILING,
    OPERATOR_TOKEN,
    client,
    eventually,
    log_in,
    running_app,
)

HOSTILE = ConversationKey("slack", "T1", "<b>")  # a channel name is platform text


def summary(cid: str, owner: str | None, expires: float | None) -> ConversationSummary:
    state = ConversationState(cid, 2, 1, owner, 3, expires, 0, None)
    return ConversationSummary(state, 1, 0, 0, 100.0)


def seen(owner: str, at: float) -> ProcessRecord:
    host, pid = owner.split(":")
    return ProcessRecord(owner, host, int(pid), "0.1.0", started_at=10.0, seen_at=at)


def test_every_process_is_listed_with_the_leases_it_holds_idle_and_gone_ones_too() -> None:
    registered = [
        seen("host-a:1", 98.0),
        seen("host-d:4", 99.0),  # idle: holds nothing
        seen("host-e:5", 84.0),  # not seen for 16 s: gone
        seen("host-c:2", 70.0),  # the process serving the page (its refreshes failing)
    ]
    active = [
        summary("test/w/c1/", "host-a:1", 130.0),
        summary("test/w/c2/", "host-a:1", 140.0),
        summary("test/w/c3/", "host-b:7", 90.0),  # expired, and no row: host-b may be dead
        summary("test/w/c4/", None, None),
        summary("test/w/c5/", "host-f:6", 120.0),  # a lease, but no row written (yet)
    ]
    found = processes(registered, active, now=100.0, this_owner="host-c:2")
    assert [(p.owner, p.conversations, p.this_one, p.gone) for p in found] == [
        ("host-c:2", (), True, False),
        ("host-a:1", ("test/w/c1/", "test/w/c2/"), False, False),
        ("host-d:4", (), False, False),
        ("host-f:6", ("test/w/c5/",), False, False),
        ("host-e:5", (), False, True),
    ]
    assert found[1].record == registered[0] and found[3].record is None


def process_rows(page: str) -> list[list[str]]:
    table = re.search(r'<table id="processes">(.*?)</table>', page)
    assert table is not None
    rows = re.findall(r"<tr>(.*?)</tr>", table.group(1))[1:]  # under the headers
    return [re.findall(r"<td>(.*?)</td>", row) for row in rows]


async def test_the_overview_shows_each_process_alive_idle_or_gone_and_when_it_was_seen(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    async with running_app(tmp_path, monkeypatch) as bot, client() as http:
        start = bot.clock.now() - 4  # the app started 4 s ago (two quiet windows)
        await bot.store.see_process("idle-host:7:aa", "idle-host", 7, "0.1.0", start + 2)
        await bot.store.see_process("dead-host:9:bb", "dead-host", 9, "0.0.9", start - 60)
        await log_in(http, bot.base, OPERATOR_TOKEN)
        async with http.get(bot.base + "/") as page:
            rows = process_rows(await page.text())
        assert [row[:3] for row in rows] == [
            ["w1 (this process)", "alive", "4.0s ago"],  # written when it started
            ["idle-host:7:aa", "alive", "2.0s ago"],
            ["dead-host:9:bb", "gone", "64.0s ago"],
        ]
        here = f"{socket.gethostname()}, pid {os.getpid()}, burstbot {__version__}"
        assert rows[0][3] == f"{here}, started 4.0s ago"
        assert rows[1][3:] == ["idle-host, pid 7, burstbot 0.1.0, started 2.0s ago", "none"]

        refreshes = bot.app.presence.refreshes
        await bot.clock.advance(1.0)  # its first refresh is due 5 s after the start

        async def refreshed() -> bool:
            return bot.app.presence.refreshes > refreshes

        await eventually(refreshed)
        async with http.get(bot.base + "/") as page:
            rows = process_rows(await page.text())
        assert rows[0][:3] == ["w1 (this process)", "alive", "0.0s ago"]
    after = SqliteStore(str(tmp_path / "web.db"))  # the app has stopped: its row is gone
    await after.open()
    try:
        listed = await after.processes(start)
        assert [p.owner for p in listed] == ["dead-host:9:bb", "idle-host:7:aa"]
    finally:
        await after.close()


def test_felt_waits_are_counted_into_their_bars() -> None:
    bars = dict(wait_histogram([0.2, 0.9, 1.0, 2.5, 45.0, 61.0, 3600.0]))
    assert bars == {"<1 s": 2, "1-2 s": 1, "2-3 s": 1, "3-5 s": 0, "5-10 s": 0, "10-30 s": 0,
                    "30-60 s": 1, ">60 s": 2}  # fmt: skip


async def test_a_felt_wait_runs_from_the_bursts_last_message_to_its_post(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    async with running_app(tmp_path, monkeypatch) as bot:
        # FAILING was never shown; ANSWERED was posted when its 1.5 s window closed (the
        # scheduler ran at the 2 s step), however long the failing one took before it
        waits = await bot.store.felt_waits(0.0)
        assert waits == [pytest.approx(2.0)]
        assert await bot.store.felt_waits(bot.clock.now() + 1) == []


async def test_the_usage_page_shows_each_extra_panel(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    seen: list[float] = []

    async def votes(store: Any, since: float) -> str:
        seen.append(since)
        return '<section id="votes"><h2>Feedback</h2><p>3 up, 1 down</p></section>'

    async with running_app(tmp_path, monkeypatch) as bot, client() as http:
        bot.app.web_panels.append(votes)
        await log_in(http, bot.base, OPERATOR_TOKEN)
        async with http.get(bot.base + "/usage?since=7d") as page:
            text = await page.text()
        assert '<section id="votes"><h2>Feedback</h2><p>3 up, 1 down</p></section>' in text
        assert seen == [bot.clock.now() - 7 * 86_400]
        async with http.get(bot.base + "/usage?since=last+tuesday") as page:
            assert page.status == 400 and "--since &#x27;last tuesday&#x27;" in await page.text()


def test_only_the_first_worker_serves_the_page() -> None:
    config = parse_config({"web": {"enabled": True}})
    assert [for_worker(config, i).web.enabled for i in range(3)] == [True, False, False]


async def test_the_pages_read_a_postgresql_store_too(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The queries the pages use beyond the command line's (every reply, every generation)."""
    schema = await pg.create_schema("burstbot_web")
    try:
        store = PostgresStore(pg.dsn(), pool_size=3, clock="caller", schema=schema)
        async with running_app(tmp_path, monkeypatch, store=store) as bot, client() as http:
            await log_in(http, bot.base, OPERATOR_TOKEN)
            texts = []
            for path in ("/", "/conversation?id=" + FAILING.id, "/usage?since=1d"):
                async with http.get(bot.base + path) as page:
                    assert page.status == 200
                    texts.append(await page.text())
            overview, timeline, usage = texts
            assert "channel_not_found ([redacted])" in overview and "retry-r1" in timeline
            assert '<span id="total">2 generations' in usage
            assert "1 answered bursts; median 2.0 s" in usage
    finally:
        await pg.drop_schema(schema)


def action(server: str, finished: float | None, failed: bool = False) -> ActionRecord:
    return ActionRecord("test/w/c1/", f"k{server}{finished}", 0, 1, 1, server, "look", "{}",
                        False, "tu1", 10.0, finished, None, failed)  # fmt: skip


def test_each_mcp_server_shows_its_state_and_its_calls() -> None:
    config = parse_config({"tools": {"mcp": [
        {"name": "wiki", "url": "http://127.0.0.1:9/mcp", "allowed_tools": ["look"]},
        {"name": "tickets", "url": "http://127.0.0.1:9/mcp", "allowed_tools": ["look"]},
    ]}})  # fmt: skip
    configured = [server.name for server in config.tools.mcp]
    actions = [action("wiki", 11.0), action("wiki", 12.0, failed=True), action("wiki", None)]
    hub = McpHub(config.tools.mcp)  # never started: no session, so down
    found = tool_servers(configured, hub, actions)
    assert [(t.name, t.state, t.calls) for t in found] == [
        ("wiki", "down: its tools are off", "3 call(s), 1 failed, 1 may have run"),
        ("tickets", "down: its tools are off", "0 call(s), 0 failed, 0 may have run"),
    ]
    from_the_database = tool_servers(configured, None, [])
    assert {t.state for t in from_the_database} == {
        "configured (its state is known to `burstbot run` only)"
    }


async def test_the_feedback_panel_charts_the_votes_per_channel_and_per_model(
    tmp_path: Path,
) -> None:
    store = SqliteStore(str(tmp_path / "votes.db"))
    await store.open()
    try:
        assert "no votes yet" in await feedback_panel(store, 0.0)
        first = await answered(store, GENERAL, "claude-sonnet-5-5")
        second = await answered(store, HOSTILE, "claude-haiku-4-5")
        for key, reply, voter, value, at in [
            (GENERAL, first, "U1", "up", NOW + 10),
            (GENERAL, first, "U1", "down", NOW + 11),  # changed their mind: counts as 👎
            (GENERAL, first, "U2", "up", NOW + 12),
            (HOSTILE, second, "U1", "up", NOW + 13),
            (HOSTILE, second, "U3", "down", NOW - 86_400 * 400),  # before the page's `since`
        ]:
            assert await store.vote(vote(key, reply, voter, value, at), NOW) == "voted"
        panel = await feedback_panel(store, NOW - 86_400)
        everything = await feedback_panel(store, 0.0)
    finally:
        await store.close()
    bars = re.findall(r"<title>([^<]*)</title>", panel)
    assert bars == [
        "slack/T1/C1: 1 up", "slack/T1/C1: 1 down",
        "slack/T1/&lt;b&gt;: 1 up", "slack/T1/&lt;b&gt;: 0 down",  # escaped, like every label
        "claude-sonnet-5-5: 1 up", "claude-sonnet-5-5: 1 down",  # the most votes first
        "claude-haiku-4-5: 1 up", "claude-haiku-4-5: 0 down",
    ]  # fmt: skip
    assert "<b>" not in panel
    assert "2 up (👍), 1 down (👎) on answers" in panel
    assert "2 up (👍), 2 down (👎) on answers" in everything and "1 / 1 (50%)" in everything


async def test_the_usage_page_has_the_feedback_panel(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    async with running_app(tmp_path, monkeypatch) as bot, client() as http:
        [reply] = await bot.store.replies(ANSWERED.id)
        at = bot.clock.now()
        assert await bot.store.vote(vote(ANSWERED, f"r{reply.id}", "U7", "up", at), at) == "voted"
        await log_in(http, bot.base, OPERATOR_TOKEN)
        async with http.get(bot.base + "/usage?since=7d") as page:
            text = await page.text()
    assert '<section id="feedback">' in text and "1 up (👍), 0 down (👎) on answers" in text
    assert f"<title>{ANSWERED.platform}/{ANSWERED.workspace}/{ANSWERED.channel}: 1 up" in text
