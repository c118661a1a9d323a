"""Admission by the Messages API's own limits (bot/core/admission.py, bot/core/shares.py).

The engines' time is a `FakeClock`, and so is the fake API's: its per-minute budgets replenish on
the same clock and its `-reset` headers are written on it. Only the HTTP traffic is real (the
real SDK against the fake server); each round waits for it with `engine.idle()`.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable
from typing import Any

import pytest

from bot.cli.explain import explain_lines
from bot.cli.status import status_lines
from bot.config import parse_config
from bot.core.admission import Admission
from bot.core.engine import Engine
from bot.core.events import ConversationKey, IncomingMessage
from bot.core.store import DueTimer
from bot.llm.claude import ClaudeReplier
from bot.wiring import claude_replier
from storage.sql_store import SqlStore
from storage.sqlite import SqliteStore
from testkit import RecordingFrontend
from testkit.clock import FakeClock
from testkit.fake_anthropic import FakeAnthropic, Plan
from testkit.rate_limits import ApiLimits, rfc3339
from tests import pg
from tests.conftest import SETTINGS, make_engine

KEY_ENV = {"TEST_ANTHROPIC_KEY": "sk-test-not-a-real-key"}
Claude = Callable[[], ClaudeReplier]


@pytest.fixture
async def claude(server: FakeAnthropic) -> AsyncIterator[Claude]:
    """Repliers on the fake API, one per engine (a process each), all with one API key; the
    SDK's own retries off, so every 429 the API sends is one the engine met."""
    made: list[ClaudeReplier] = []

    def make() -> ClaudeReplier:
        llm = {"base_url": server.base_url, "api_key_env": "TEST_ANTHROPIC_KEY", "max_retries": 0}
        made.append(claude_replier(parse_config({"llm": llm}), KEY_ENV))
        return made[-1]

    yield make
    for replier in made:
        await replier.aclose()


def limited(server: FakeAnthropic, clock: FakeClock, **per_minute: float) -> ApiLimits:
    server.limits = ApiLimits(**per_minute, clock=clock.monotonic, wall=clock.now)  # type: ignore[arg-type]
    return server.limits


def key(n: int, workspace: str = "w1", channel: str | None = None) -> ConversationKey:
    return ConversationKey("test", workspace, channel or f"c{n}")


async def ask(engine: Engine, keys: list[ConversationKey], text: str = "hi") -> None:
    for n, conversation in enumerate(keys):
        await engine.ingest(
            IncomingMessage(conversation, f"m-{conversation.id}", f"u{n}", f"user{n}", text)
        )


async def round_(engine: Engine, clock: FakeClock, seconds: float = 0.0) -> int:
    """Move the clock, start what may start, wait for it: how many started."""
    await clock.advance(seconds)
    started = await engine.run_due()
    await engine.idle()
    return started


def engine_on(
    store: SqlStore[Any],
    clock: FakeClock,
    replier: ClaudeReplier,
    frontend: RecordingFrontend,
    owner: str = "w1",
    **overrides: object,
) -> Engine:
    tuned = {"max_concurrent_generations": 1_000, "model_max_attempts": 50, **overrides}
    return make_engine(store, clock, replier, frontend, owner, **tuned)  # type: ignore[arg-type]


async def test_starts_follow_the_remaining_requests_the_headers_announce(
    store: SqliteStore,
    clock: FakeClock,
    frontend: RecordingFrontend,
    server: FakeAnthropic,
    claude: Claude,
) -> None:
    api = limited(server, clock, requests_per_minute=20, input_tokens_per_minute=100_000)
    engine = engine_on(store, clock, claude(), frontend)
    await ask(engine, [key(n) for n in range(30)])

    assert await round_(engine, clock, SETTINGS.quiet_seconds) == 8  # the limits unknown yet
    assert await round_(engine, clock) == 12  # the answers said 12 requests were left
    assert await round_(engine, clock) == 0
    assert engine.ready_at - clock.now() == pytest.approx(3.0, abs=0.05)  # 20 a minute
    assert await round_(engine, clock, 2.9) == 0
    assert await round_(engine, clock, 0.2) == 1
    assert await round_(engine, clock, 30.0) == 9
    assert len(frontend.posts) == 30 and len(server.requests) == 30
    assert api.refused == 0


async def test_a_burst_held_for_capacity_says_so_in_status_and_explain(
    store: SqliteStore,
    clock: FakeClock,
    frontend: RecordingFrontend,
    server: FakeAnthropic,
    claude: Claude,
) -> None:
    limited(server, clock, requests_per_minute=2)
    engine = engine_on(store, clock, claude(), frontend)
    waits: list[tuple[str, dict[str, object]]] = []
    engine.subscribe(lambda name, fields: waits.append((name, fields)))
    await ask(engine, [key(0)])
    assert await round_(engine, clock, SETTINGS.quiet_seconds) == 1  # the limits learned
    await ask(engine, [key(1), key(2)])
    assert await round_(engine, clock, SETTINGS.quiet_seconds) == 1
    assert await round_(engine, clock) == 0
    assert [f["waiting_for"] for n, f in waits if n == "capacity_wait"] == ["requests per minute"]
    status = "\n".join(await status_lines(store, clock.now()))
    assert "left this minute: requests 0/2" in status
    assert (
        "1 waiting to start, in the order they will:\n    1. test/w1/c2/  window closed" in status
    )
    assert await round_(engine, clock, 30.0) == 1
    [last] = await store.generations(key(2).id)
    assert last.waited == pytest.approx(30.0, abs=0.1) and last.waited_for == "requests per minute"
    lines = "\n".join(await explain_lines(store, key(2).id, clock.now()))
    assert "waited    30.0s for the API's capacity: requests per minute" in lines


async def test_input_tokens_bound_starts_by_the_measured_size_of_a_prompt(
    store: SqliteStore,
    clock: FakeClock,
    frontend: RecordingFrontend,
    server: FakeAnthropic,
    claude: Claude,
) -> None:
    api = limited(server, clock, requests_per_minute=1_000, input_tokens_per_minute=2_000)
    engine = engine_on(store, clock, claude(), frontend)
    await ask(engine, [key(99)])
    assert await round_(engine, clock, SETTINGS.quiet_seconds) == 1  # the limits learned
    await ask(engine, [key(n) for n in range(10)], "word " * 400)  # 500 tokens, never cached

    started = await round_(engine, clock, SETTINGS.quiet_seconds)
    started += await round_(engine, clock)
    started += await round_(engine, clock)
    assert started == 2  # about 1,990 left: two at the estimate (about 800 a prompt so far)
    for _ in range(40):
        await round_(engine, clock, 10.0)
    assert len(frontend.posts) == 11
    assert api.refused == 0


async def test_a_429_holds_every_engine_sharing_the_key(
    store: SqliteStore,
    clock: FakeClock,
    frontend: RecordingFrontend,
    server: FakeAnthropic,
    claude: Claude,
) -> None:
    await a_429_holds_both(store, store, clock, frontend, server, claude)


async def test_a_429_on_one_postgres_process_holds_the_other(
    clock: FakeClock,
    frontend: RecordingFrontend,
    server: FakeAnthropic,
    claude: Claude,
) -> None:
    """Two processes: two stores, each its own pool, on one PostgreSQL schema."""
    from storage.postgres import PostgresStore

    schema = await pg.create_schema()
    stores = [PostgresStore(pg.dsn(), pool_size=2, clock="caller", schema=schema) for _ in "ab"]
    try:
        for opened in stores:
            await opened.open()
        await a_429_holds_both(stores[0], stores[1], clock, frontend, server, claude)
    finally:
        for opened in stores:
            await opened.close()
        await pg.drop_schema(schema)


async def a_429_holds_both(
    first_store: SqlStore[Any],
    second_store: SqlStore[Any],
    clock: FakeClock,
    frontend: RecordingFrontend,
    server: FakeAnthropic,
    claude: Claude,
) -> None:
    limited(server, clock, requests_per_minute=1_000)
    first = engine_on(first_store, clock, claude(), frontend, owner="w1")
    second = engine_on(second_store, clock, claude(), frontend, owner="w2")
    await ask(first, [key(1)])
    assert await round_(first, clock, SETTINGS.quiet_seconds) == 1  # the probe: limits learned

    server.queue(Plan(status=429, retry_after=20.0))
    await ask(first, [key(2)])
    assert await round_(first, clock, SETTINGS.quiet_seconds) == 1  # met the 429
    await ask(second, [key(3)])
    assert await round_(second, clock, SETTINGS.quiet_seconds) == 0  # held by what first heard
    assert second.ready_at == pytest.approx(clock.now() + 20.0 - SETTINGS.quiet_seconds, abs=0.1)
    assert await round_(second, clock, 17.0) == 0
    assert await round_(second, clock, 2.0) == 2  # the hold ended: both due bursts go
    assert len(frontend.posts) == 3


async def test_a_529_storm_backs_off_doubling_and_recovers(
    store: SqliteStore,
    clock: FakeClock,
    frontend: RecordingFrontend,
    server: FakeAnthropic,
    claude: Claude,
) -> None:
    api = limited(server, clock, requests_per_minute=1_000)
    api.overloaded = True
    engine = engine_on(store, clock, claude(), frontend, model_backoff_seconds=0.5)
    await ask(engine, [key(n) for n in range(10)])

    assert await round_(engine, clock, SETTINGS.quiet_seconds) == 8  # the limits unknown yet
    for _ in range(60):  # a minute of the storm, a round a second
        await round_(engine, clock, 1.0)
    probes = len(server.requests) - 8
    assert 3 <= probes <= 6  # one per hold: 1, 2, 4, 8, 16, 32 s (the first 8's 529s: one)
    assert frontend.posts == []

    api.overloaded = False
    for _ in range(70):
        await round_(engine, clock, 1.0)
        if len(frontend.posts) == 10:
            break
    assert len(frontend.posts) == 10  # every burst answered, none with the failure message
    assert SETTINGS.failure_message not in frontend.texts()


async def test_a_workspace_sending_most_bursts_gets_no_more_than_its_share(
    store: SqliteStore,
    clock: FakeClock,
    frontend: RecordingFrontend,
    server: FakeAnthropic,
    claude: Claude,
) -> None:
    limited(server, clock, requests_per_minute=7)
    engine = engine_on(store, clock, claude(), frontend, model_max_attempts=50)
    await ask(engine, [key(0, "probe")])
    assert await round_(engine, clock, SETTINGS.quiet_seconds) == 1
    busy = [key(n, "busy") for n in range(8)]
    quiet = [key(n, "quiet") for n in range(2)]
    await ask(engine, busy + quiet)  # the busy workspace's bursts are due first
    await round_(engine, clock, SETTINGS.quiet_seconds)
    assert len(frontend.posts) == 1 + 6  # what the minute had left after the probe
    assert sum(1 for p in frontend.posts if p.key.workspace == "quiet") == 2
    assert sum(1 for p in frontend.posts if p.key.workspace == "busy") == 4


async def test_a_burst_waiting_for_capacity_shows_the_thinking_indicator(
    store: SqliteStore,
    clock: FakeClock,
    frontend: RecordingFrontend,
    server: FakeAnthropic,
    claude: Claude,
) -> None:
    limited(server, clock, requests_per_minute=2)
    engine = engine_on(store, clock, claude(), frontend)
    await ask(engine, [key(0)])
    assert await round_(engine, clock, SETTINGS.quiet_seconds) == 1  # the limits learned
    await ask(engine, [key(1), key(2)])
    assert await round_(engine, clock, SETTINGS.quiet_seconds) == 1
    await round_(engine, clock, SETTINGS.indicator_delay_seconds + 0.1)
    assert frontend.busy.get(key(2)) is True and frontend.texts(key(2)) == []  # waits, seen
    assert await round_(engine, clock, 60.0) == 1
    await engine.idle()
    assert frontend.busy.get(key(2)) is False and len(frontend.texts(key(2))) == 1


def timer(cid: str, due: float, start: float | None = None) -> DueTimer:
    return DueTimer(cid, due, due + 8.0, 1, start)


def test_closed_windows_go_before_speculation_then_workspaces_then_channels() -> None:
    from bot.core.shares import fair_order

    now = 100.0
    timers = [
        timer("s/a/early/", 101.0, 99.0),  # due at its early start, its window still open
        timer("s/a/c1/t1", 98.0),
        timer("s/a/c1/t2", 98.5),
        timer("s/a/c2/t1", 99.0),
        timer("s/b/c1/t1", 99.5),
    ]
    order = [t.conversation_id for t in fair_order(timers, [], now)]
    assert order == ["s/a/c1/t1", "s/b/c1/t1", "s/a/c2/t1", "s/a/c1/t2", "s/a/early/"]
    running = ["s/b/c9/t", "s/b/c8/t"]  # b has two generations going: a catches up first
    order = [t.conversation_id for t in fair_order(timers, running, now)]
    assert order == ["s/a/c1/t1", "s/a/c2/t1", "s/b/c1/t1", "s/a/c1/t2", "s/a/early/"]


def test_a_reset_later_than_a_minute_s_refill_slows_the_estimate() -> None:
    from bot.core.admission import UNKNOWN

    wall = 1_800_000_000.0
    headers = {
        "anthropic-ratelimit-requests-limit": "60",
        "anthropic-ratelimit-requests-remaining": "0",
        "anthropic-ratelimit-requests-reset": rfc3339(wall + 120.0),  # full in 2 min, not 1
    }
    heard = UNKNOWN.heard(200, headers, wall)
    assert heard.wait({"requests": 1.0}) == (pytest.approx(2.0), "requests per minute")
    headers["anthropic-ratelimit-requests-reset"] = rfc3339(wall + 30.0)  # faster: not believed
    assert UNKNOWN.heard(200, headers, wall).wait({"requests": 1.0})[0] == pytest.approx(1.0)


def test_529s_in_a_row_double_the_hold_and_an_answer_ends_it() -> None:
    from bot.core.admission import UNKNOWN

    limits, holds = UNKNOWN, []
    for _ in range(4):
        limits = limits.aged(limits.held).take({}).heard(529, {}, 0.0)  # the probe met a 529
        holds.append(limits.held)
    assert holds == [1.0, 2.0, 4.0, 8.0]
    probing = limits.aged(limits.held).take({})
    assert probing.wait({})[0] > 0  # the probe goes alone
    assert probing.heard(200, {}, 0.0).wait({}) == (0.0, "")


async def test_answers_heard_at_once_by_one_process_each_count(
    store: SqliteStore, clock: FakeClock
) -> None:
    """Eight answers of one wave, heard together (each a read and a compare-and-swap on the
    shared row): none is lost to this process's own other saves, so the fewest remaining the
    API announced is what the next round may take."""
    admission = Admission(store, clock, "key-1")
    reset = rfc3339(clock.now() + 30.0)

    def answer(remaining: int) -> dict[str, str]:
        return {
            "anthropic-ratelimit-requests-limit": "20",
            "anthropic-ratelimit-requests-remaining": str(remaining),
            "anthropic-ratelimit-requests-reset": reset,
        }

    await asyncio.gather(*(admission.heard(200, answer(n)) for n in range(19, 11, -1)))
    assert (await admission.admit(100)).granted == 12


async def test_a_529_heard_by_one_engine_holds_the_other_sharing_the_key(
    store: SqliteStore,
    clock: FakeClock,
    frontend: RecordingFrontend,
    server: FakeAnthropic,
    claude: Claude,
) -> None:
    limited(server, clock, requests_per_minute=1_000)
    first = engine_on(store, clock, claude(), frontend, owner="w1")
    second = engine_on(store, clock, claude(), frontend, owner="w2")
    waits: list[dict[str, object]] = []
    second.subscribe(lambda name, fields: waits.append(fields) if name == "capacity_wait" else 0)
    await ask(first, [key(1)])
    assert await round_(first, clock, SETTINGS.quiet_seconds) == 1  # the limits learned

    server.queue(Plan(status=529, retry_after=20.0))
    await ask(first, [key(2)])
    assert await round_(first, clock, SETTINGS.quiet_seconds) == 1  # met the 529
    await ask(second, [key(3)])
    assert await round_(second, clock, SETTINGS.quiet_seconds) == 0  # held by what first heard
    assert {w["conversation"]: w["waiting_for"] for w in waits}[key(3).id] == "529 overloaded"
    assert await round_(second, clock, 17.0) == 0
    assert await round_(second, clock, 2.0) == 1  # the hold ended: one probes alone ...
    assert await round_(second, clock) == 1  # ... and its answer lets the other go
    assert len(frontend.texts(key(2))) == 1 and len(frontend.texts(key(3))) == 1


async def test_an_answer_heard_while_waiting_its_turn_does_not_date_the_row_back(
    store: SqliteStore, clock: FakeClock
) -> None:
    """An answer waits for this process's turn at the row while another process saves it: its
    save is stamped when it is made, not when the answer came, or the time between would be
    replenished twice (the other process's save already counted it)."""
    here, other = Admission(store, clock, "key-1"), Admission(store, clock, "key-1")
    reset = rfc3339(clock.now() + 60.0)
    answer = {
        "anthropic-ratelimit-requests-limit": "60",  # one a second
        "anthropic-ratelimit-requests-remaining": "0",
        "anthropic-ratelimit-requests-reset": reset,
    }
    await here.heard(200, answer)
    later = answer | {
        "anthropic-ratelimit-output-tokens-limit": "10000",
        "anthropic-ratelimit-output-tokens-remaining": "10000",
    }
    async with here._turn:  # this process is busy with the row ...
        waiting = asyncio.create_task(here.heard(200, later))  # ... when an answer comes
        await asyncio.sleep(0)
        await clock.advance(10.0)
        assert (await other.admit(100)).granted == 10  # ten seconds' worth, taken elsewhere
    await waiting
    assert (await other.admit(100)).granted == 0
