"""Approvals survive crashes and races (G14, G16): real bot processes killed with SIGKILL around
an Approve, a restart while a card waits, and one card's Approve delivered to two processes at
once on PostgreSQL. The ticket server (tests/tool_server.py, its own process) counts every
`create_ticket` call per idempotency key: that count, never ours, says the call ran at most once.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import signal
import sys
import time
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from bot.core.clicks import Click
from bot.core.events import IncomingMessage
from storage.postgres import PostgresStore
from storage.sqlite import SqliteStore
from testkit import RecordingFrontend, check_invariants
from testkit.clock import FakeClock
from testkit.fake_anthropic import FakeAnthropic, Plan, ToolUse
from tests import pg
from tests.conftest import KEY
from tests.tool_harness import http_process, http_server, tool_config, tool_engine, tool_results
from tests.tool_server import calls_per_key

pytestmark = [pytest.mark.slow, pytest.mark.xdist_group("chaos")]

TICKET = ToolUse("create_ticket", {"title": "printer on fire"})
CREATED = "created OPS-201 (normal priority): printer on fire"


def starts(ledger: Path) -> int:
    return sum(calls_per_key(ledger).values())


async def until(predicate: object, within: float = 30.0) -> None:
    async with asyncio.timeout(within):
        while not await asyncio.to_thread(predicate):  # type: ignore[arg-type]  # noqa: ASYNC110
            await asyncio.sleep(0.02)


def approve(card: int, click_id: str = "slack-1.0") -> Click:
    return Click(click_id, KEY, "approve", str(card), "u1", "alice")


@contextlib.asynccontextmanager
async def worker(
    db: Path, server: FakeAnthropic, port: int
) -> AsyncIterator[asyncio.subprocess.Process]:
    """A bot process whose create_ticket asks first; it stores "open a ticket" and serves."""
    settings = {"db": str(db), "api_url": server.base_url, "approve": "ask",
                "mcp_url": f"http://127.0.0.1:{port}/mcp"}  # fmt: skip
    process = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "tests.tool_worker", json.dumps(settings),
        stdout=asyncio.subprocess.PIPE, cwd=Path(__file__).parent.parent,
    )  # fmt: skip
    try:
        assert process.stdout is not None
        async with asyncio.timeout(30):
            assert (await process.stdout.readline()).strip() == b"READY"
        yield process
    finally:
        with contextlib.suppress(ProcessLookupError):
            process.kill()
        await process.wait()


async def card_waiting(store: SqliteStore) -> int:
    """Wait until the worker's card is posted; its reply id."""
    async with asyncio.timeout(30):
        while True:
            actions = await store.actions(KEY.id)
            rows = {r.id: r for r in await store.replies(KEY.id)}
            for action in actions:
                card = action.card_reply_id
                if card is not None and card in rows and rows[card].state == "sent":
                    return card
            await asyncio.sleep(0.02)


@pytest.fixture
def ledger(tmp_path: Path) -> Path:
    return tmp_path / "ledger.txt"


@pytest.fixture
def hold(tmp_path: Path) -> Path:
    return tmp_path / "hold"


@pytest.mark.parametrize("killed", ["after the click, before the call", "during the call"])
async def test_kill_9_around_an_approved_call_never_makes_a_second_ticket(
    tmp_path: Path, frontend: RecordingFrontend, server: FakeAnthropic, ledger: Path,
    hold: Path, killed: str,
) -> None:  # fmt: skip
    """The worker parks the burst and posts the card; Approve is stored (the platform was
    answered); the worker is killed with SIGKILL before it could make the call or while the
    server runs it. The process that takes over makes the call
    (once, if the dead one never claimed it) or says it may have run: the server's count is at
    most 1, one answer is posted and the card ends showing the outcome."""
    db = tmp_path / "bot.db"
    during = killed == "during the call"
    if during:
        await asyncio.to_thread(hold.touch)
    server.queue(
        Plan(text="", tool_uses=[TICKET]),
        Plan(text="The ticket may have been created." if during else "Opened OPS-201."),
    )
    store = SqliteStore(str(db))
    async with http_process(ledger, hold) as port:
        async with worker(db, server, port) as process:
            await store.open()
            card = await card_waiting(store)
            assert starts(ledger) == 0
            if not during:  # it dies before it can serve the decided burst. (Frozen with
                process.kill()  # SIGSTOP instead, it could hold SQLite's write lock forever.)
                await process.wait()
            assert (await store.decide(approve(card), False, "authors_and_admins",
                                       time.time())) == "approved"  # fmt: skip
            if during:
                await until(lambda: starts(ledger) == 1)
                process.kill()
                await process.wait()
        if during:
            await asyncio.to_thread(hold.unlink)  # the server finishes a call nobody awaits
            await until(lambda: "done" in ledger.read_text())
        try:
            clock = FakeClock(time.time() + 60)  # past the dead worker's lease
            config = tool_config(server, http_server(port, approve="ask"))
            async with tool_engine(config, store, clock, frontend) as (engine, _):
                await engine.run_due()
                await engine.idle()
            [action] = await store.actions(KEY.id)
            replies = await store.replies(KEY.id)
            await check_invariants(store, [KEY.id])
        finally:
            await store.close()
    assert list(calls_per_key(ledger).values()) == [1]
    assert action.approval == "running"
    assert action.state == ("unknown" if during else "done")
    [given] = tool_results(server.requests[-1])
    assert given["content"] != CREATED if during else given["content"] == CREATED
    answers = [r for r in replies if r.kind == "answer"]
    assert [r.state for r in answers] == ["sent"]
    assert frontend.texts() == [answers[0].text]
    assert [r.kind for r in replies] == ["card", "card_outcome", "answer"]
    card, outcome = replies[0], replies[1]
    assert outcome.state == "sent"
    [edited] = frontend.edits  # the new process edited the card the dead one posted
    assert (edited.message_id, edited.text) == (card.platform_message_ids[0], outcome.text)
    if during:
        assert "may have run" in outcome.text
    else:
        assert outcome.text.endswith(f"✅ Approved by alice: {CREATED}")


async def test_a_restart_while_a_card_waits_posts_no_second_card_and_runs_the_call_once(
    tmp_path: Path, frontend: RecordingFrontend, server: FakeAnthropic, ledger: Path,
    hold: Path,
) -> None:  # fmt: skip
    db = tmp_path / "bot.db"
    server.queue(Plan(text="", tool_uses=[TICKET]), Plan(text="Opened OPS-201."))
    store = SqliteStore(str(db))
    async with http_process(ledger, hold) as port:
        async with worker(db, server, port) as process:
            await store.open()
            card = await card_waiting(store)
            process.send_signal(signal.SIGTERM)  # a deploy: it shuts down while the card waits
            await process.wait()
        try:
            clock = FakeClock(time.time() + 60)
            config = tool_config(server, http_server(port, approve="ask"))
            async with tool_engine(config, store, clock, frontend) as (engine, _):
                await engine.run_due()
                await engine.idle()
                assert frontend.texts() == [] and len(server.requests) == 1  # still waiting
                assert (await engine.click(approve(card), False)).acted
                await engine.run_due()
                await engine.idle()
            replies = await store.replies(KEY.id)
            await check_invariants(store, [KEY.id])
        finally:
            await store.close()
    assert list(calls_per_key(ledger).values()) == [1]
    assert [r.kind for r in replies] == ["card", "card_outcome", "answer"]
    assert frontend.texts() == ["Opened OPS-201."]


async def test_one_approve_delivered_to_two_processes_at_once_runs_the_call_once(
    server: FakeAnthropic, ledger: Path, hold: Path,
) -> None:  # fmt: skip
    """Two bot processes on one PostgreSQL database (each its own pool, owner and front end) get
    the same card's Approve at once, the same delivery and a second press; then both serve."""
    schema = await pg.create_schema()
    stores = [PostgresStore(pg.dsn(), pool_size=4, clock="caller", schema=schema)
              for _ in range(2)]  # fmt: skip
    fronts = [RecordingFrontend(), RecordingFrontend()]
    server.queue(Plan(text="", tool_uses=[TICKET]), Plan(text="Opened OPS-201."))
    try:
        for store in stores:
            await store.open()
        clock = FakeClock(time.time())
        async with http_process(ledger, hold) as port:
            config = tool_config(server, http_server(port, approve="ask"))
            async with (
                tool_engine(config, stores[0], clock, fronts[0], owner="w1") as (one, _),  # type: ignore[arg-type]
                tool_engine(config, stores[1], clock, fronts[1], owner="w2") as (two, _),  # type: ignore[arg-type]
            ):
                await one.ingest(IncomingMessage(KEY, "m1", "u1", "alice", "open a ticket"))
                await clock.advance(2.0)
                await one.run_due()
                await one.idle()
                [action] = await stores[0].actions(KEY.id)
                assert action.card_reply_id is not None
                card = action.card_reply_id
                answers = await asyncio.gather(
                    one.click(approve(card, "slack-9.1"), False),
                    two.click(approve(card, "slack-9.1"), False),  # the platform's redelivery
                    two.click(approve(card, "slack-9.2"), False),  # a second press
                )
                assert sorted(a.outcome for a in answers) == [
                    "already_decided", "approved", "duplicate"
                ]  # fmt: skip
                await asyncio.gather(one.run_due(), two.run_due())
                await asyncio.gather(one.idle(), two.idle())
                await asyncio.gather(one.run_due(), two.run_due())  # nothing left to serve
                await asyncio.gather(one.idle(), two.idle())
            replies = await stores[0].replies(KEY.id)
            await check_invariants(stores[0], [KEY.id])
    finally:
        for store in stores:
            await store.close()
        await pg.drop_schema(schema)
    assert list(calls_per_key(ledger).values()) == [1]
    assert [r.kind for r in replies] == ["card", "card_outcome", "answer"]
    assert sorted(fronts[0].texts()[1:] + fronts[1].texts()) == ["Opened OPS-201."]
