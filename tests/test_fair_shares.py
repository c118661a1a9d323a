"""Fair shares across processes and down to people (bot/core/shares.py).

The order counts what every process sharing the database generates (their live leases), and
its third level is the person: two engines on one PostgreSQL schema, each its own pool, with the
real SDK against the fake API and its limits, on the fake clock (as tests/test_admission.py).
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import pytest

from bot.cli.status import status_lines
from bot.core.engine import Engine
from bot.core.events import ConversationKey, IncomingMessage
from bot.core.shares import fair_order
from storage.sql_store import SqlStore
from storage.sqlite import SqliteStore
from testkit import RecordingFrontend
from testkit.clock import FakeClock
from testkit.fake_anthropic import FakeAnthropic, Plan
from tests import pg
from tests.conftest import SETTINGS
from tests.test_admission import Claude, ask, engine_on, key, limited, round_, timer
from tests.test_admission import claude as claude  # the fixture: repliers on the fake API


@pytest.fixture
async def two_stores() -> AsyncIterator[list[SqlStore[Any]]]:
    """Two processes' stores: each its own pool, on one PostgreSQL schema."""
    from storage.postgres import PostgresStore

    schema = await pg.create_schema()
    stores: list[SqlStore[Any]] = [
        PostgresStore(pg.dsn(), pool_size=2, clock="caller", schema=schema) for _ in "ab"
    ]
    try:
        for opened in stores:
            await opened.open()
        yield stores
    finally:
        for opened in stores:
            await opened.close()
        await pg.drop_schema(schema)


def posted(frontend: RecordingFrontend, workspace: str) -> int:
    return sum(1 for post in frontend.posts if post.key.workspace == workspace)


async def test_a_workspace_generating_on_one_process_goes_after_the_others_on_both(
    two_stores: list[SqlStore[Any]],
    clock: FakeClock,
    frontend: RecordingFrontend,
    server: FakeAnthropic,
    claude: Claude,
) -> None:
    limited(server, clock, requests_per_minute=7)
    first = engine_on(two_stores[0], clock, claude(), frontend, owner="w1")
    second = engine_on(two_stores[1], clock, claude(), frontend, owner="w2")
    await ask(first, [key(0, "probe")])
    assert await round_(first, clock, SETTINGS.quiet_seconds) == 1  # the limits learned

    server.queue(*[Plan(text="held", pause_after=0)] * 3)  # the busy workspace's streams go on
    await ask(first, [key(n, "busy") for n in range(3)])
    await clock.advance(SETTINGS.quiet_seconds)
    assert await first.run_due() == 3
    await server.wait_for(lambda: len(server.requests) == 4)

    # the second process generates nothing itself; the busy workspace's bursts are due first
    await ask(second, [key(n, "busy") for n in range(3, 5)])
    await clock.advance(0.1)
    await ask(second, [key(n, "quiet") for n in range(2)])
    started = await round_(second, clock, SETTINGS.quiet_seconds)
    assert started < 4  # not all may start (the minute's requests) ...
    assert posted(frontend, "quiet") == 2  # ... and the quiet workspace's go first
    status = "\n".join(await status_lines(two_stores[1], clock.now()))
    assert "waiting to start, in the order they will:\n    1. test/busy/c" in status

    await ask(first, [key(5, "busy")])
    await clock.advance(0.1)
    await ask(first, [key(2, "quiet")])
    await clock.advance(SETTINGS.quiet_seconds)
    status = "\n".join(await status_lines(two_stores[0], clock.now()))
    assert "in the order they will:\n    1. test/quiet/c2/" in status  # on the first too
    server.release()
    await first.idle()
    for _ in range(30):  # the minute's requests come back: every burst is answered
        await round_(first, clock, 5.0)
        await round_(second, clock)
    assert posted(frontend, "busy") == 6 and posted(frontend, "quiet") == 3


async def message_from(engine: Engine, conversation: ConversationKey, person: str) -> None:
    cid = conversation.id
    await engine.ingest(IncomingMessage(conversation, f"m-{cid}", person, person, "hi"))


async def test_people_in_one_channel_are_served_in_turn(
    store: SqliteStore,
    clock: FakeClock,
    frontend: RecordingFrontend,
    server: FakeAnthropic,
    claude: Claude,
) -> None:
    limited(server, clock, requests_per_minute=3)
    engine = engine_on(store, clock, claude(), frontend)
    await message_from(engine, ConversationKey("test", "w1", "probe"), "probe")
    assert await round_(engine, clock, SETTINGS.quiet_seconds) == 1  # the limits learned

    for thread in ("t1", "t2", "t3"):  # one person's three threads, due first
        await message_from(engine, ConversationKey("test", "w1", "c1", thread), "ann")
    await clock.advance(0.1)
    await message_from(engine, ConversationKey("test", "w1", "c1", "t4"), "bob")
    assert await round_(engine, clock, SETTINGS.quiet_seconds) == 2  # what the minute has left
    answered = {post.key.thread for post in frontend.posts if post.key.channel == "c1"}
    assert answered == {"t1", "t4"}


def test_the_third_share_is_the_person_and_running_counts_come_from_every_process() -> None:
    now = 100.0
    timers = [
        timer("s/a/c1/t1", 98.0),
        timer("s/a/c1/t2", 98.5),
        timer("s/a/c1/t3", 98.2),
        timer("s/b/c1/t1", 99.5),
    ]
    people = {"s/a/c1/t1": "ann", "s/a/c1/t2": "ann", "s/a/c1/t3": "bob"}
    order = [t.conversation_id for t in fair_order(timers, [], now, people)]
    assert order == ["s/a/c1/t1", "s/b/c1/t1", "s/a/c1/t3", "s/a/c1/t2"]  # bob before ann's 2nd
    running = ["s/a/c1/t8", "s/a/c1/t9"]  # bob generates twice (on any process)
    people |= {"s/a/c1/t8": "bob", "s/a/c1/t9": "bob"}
    order = [t.conversation_id for t in fair_order(timers, running, now, people)]
    assert order == ["s/b/c1/t1", "s/a/c1/t1", "s/a/c1/t2", "s/a/c1/t3"]
