"""The platform-neutral side of catch-up (bot/core/catch_up.py) with a front end that hands it
messages as a platform's history would: when passes run, what they read, how failures retry."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

import pytest

from bot.app import App
from bot.core.catch_up import CatchUp, CatchUpRun
from bot.core.errors import FetchError, StoreError
from bot.core.events import ConversationKey, IncomingMessage
from bot.core.frontend import CatchUpSource
from storage.sqlite import SqliteStore
from testkit import RecordingFrontend, ScriptedReplier
from testkit.clock import FakeClock
from tests.apps import make_app, step

KEY = ConversationKey("test", "w1", "c1")
START = 1_000_000.0


def said(n: int, key: ConversationKey = KEY, author: str = "u1") -> IncomingMessage:
    return IncomingMessage(key, f"m{n}", author, "alice", f"text {n}")


class HistoryFrontend(RecordingFrontend, CatchUpSource):
    """A front end whose platform history is `history`; a pass ingests what came after each point
    it is given (KEY, a listened channel, from the start) and may be told to fail first."""

    def __init__(self) -> None:
        super().__init__()
        self.history: list[IncomingMessage] = []
        self.runs: list[CatchUpRun] = []
        self.failures_before_reading: list[Exception] = []
        self.catch_up_runner: CatchUp | None = None
        self.gate: asyncio.Event | None = None  # set: a pass waits for it before reading

    def use_catch_up(self, catch_up: CatchUp) -> None:
        self.catch_up_runner = catch_up

    async def catch_up(self, run: CatchUpRun) -> None:
        self.runs.append(run)
        if self.gate is not None:
            await self.gate.wait()
        if self.failures_before_reading:
            raise self.failures_before_reading.pop(0)
        targets = dict(run.points)
        if run.listened:
            targets.setdefault(KEY, None)  # KEY stands for a listened channel
        for key, newest in targets.items():
            ids = [m.message_id for m in self.history]
            start = ids.index(newest) + 1 if newest in ids else 0
            await run.ingest(key.id, [m for m in self.history[start:] if m.key == key])


@pytest.fixture
async def app(store: SqliteStore, clock: FakeClock) -> AsyncIterator[App]:
    application = make_app(store, clock, ScriptedReplier(), HistoryFrontend())
    yield application
    for catch_up in application.catch_ups:
        await catch_up.stop()


def frontend_of(app: App) -> HistoryFrontend:
    frontend = app.frontends[0]
    assert isinstance(frontend, HistoryFrontend)
    return frontend


async def test_a_pass_starts_after_the_newest_message_stored_before_the_cut_off(
    app: App, clock: FakeClock
) -> None:
    front = frontend_of(app)
    front.history = [said(1), said(2), said(3)]
    await app.ingest(said(1))
    cut_off = clock.now() + 1
    await clock.advance(5)
    await app.ingest(said(3))  # live, after the reconnect: must not hide m2
    app.start_catch_up([front], cut_off)
    await app.catch_ups[0].idle()
    [run] = front.runs
    assert run.points == {KEY: "m1"} and run.listened
    messages = await app.store.messages(KEY.id)
    assert [(m.message_id, m.via) for m in messages] == [("m1", ""), ("m3", ""), ("m2", "catch-up")]


async def test_quiet_conversations_are_checked_too_most_recently_active_first(
    store: SqliteStore, clock: FakeClock
) -> None:
    app = make_app(
        store, clock, ScriptedReplier(), HistoryFrontend(), catch_up={"max_age_hours": 1}
    )
    quiet = ConversationKey("test", "w1", "quiet")
    await app.ingest(said(1, quiet))
    await clock.advance(7200)
    await app.ingest(said(2))
    app.start_catch_up(app.frontends, clock.now() + 1)
    await app.catch_ups[0].idle()
    [run] = frontend_of(app).runs
    assert list(run.points.items()) == [(KEY, "m2"), (quiet, "m1")]
    assert run.window_start == clock.now() - 3600  # the messages' age, not the conversations'


async def test_a_failed_pass_runs_again_after_a_backoff_with_the_same_cut_off(
    app: App, clock: FakeClock
) -> None:
    front = frontend_of(app)
    front.failures_before_reading = [FetchError("timeout"), StoreError("locked")]
    front.history = [said(1)]
    started = clock.now()
    app.start_catch_up([front], started)
    runner = app.catch_ups[0]
    live = ConversationKey("test", "w1", "live")
    await app.ingest(said(9, live))  # stored after the cut-off, while the pass is failing
    for backoff in (2, 4):  # each failure backs off on the fake clock, doubling
        for _ in range(500):  # the pass fails at once; 5 s of real time is ample
            if clock.now() + backoff in clock.waiting():
                break
            await asyncio.sleep(0.01)
        else:
            pytest.fail(f"no backoff of {backoff} s; sleepers wake at {clock.waiting()}")
        await clock.advance(backoff)  # to the backoff's end, no further
    await runner.idle()
    assert len(front.runs) == 3
    assert clock.now() - started == 2 + 4
    assert front.runs[2].points == {live: None} and front.runs[2].listened  # same cut-off
    assert [m.message_id for m in await app.store.messages(KEY.id)] == ["m1"]


async def test_requests_while_a_pass_runs_merge_into_one_more_pass(
    app: App, clock: FakeClock
) -> None:
    front = frontend_of(app)
    front.gate = asyncio.Event()
    app.start_catch_up([front], clock.now())
    runner = app.catch_ups[0]
    while not front.runs:  # noqa: ASYNC110 (bounded: the pass starts at once)
        await asyncio.sleep(0.01)
    runner.request(clock.now() - 10, only=KEY)
    runner.request(clock.now() - 20, only=ConversationKey("test", "w1", "c2"))
    front.gate.set()
    await runner.idle()
    first, second = front.runs
    assert first.listened and not second.listened
    assert set(second.points) == {KEY, ConversationKey("test", "w1", "c2")}


async def test_catch_up_can_be_switched_off(store: SqliteStore, clock: FakeClock) -> None:
    app = make_app(store, clock, ScriptedReplier(), HistoryFrontend(), catch_up={"enabled": False})
    app.start_catch_up(app.frontends, clock.now())
    assert app.catch_ups == [] and frontend_of(app).catch_up_runner is None


async def test_caught_up_messages_are_not_counted_against_the_rate_limit(
    store: SqliteStore, clock: FakeClock
) -> None:
    limits = {"user_messages_per_window": 2, "window_seconds": 60}
    app = make_app(store, clock, ScriptedReplier(), HistoryFrontend(), limits=limits)
    front = frontend_of(app)
    front.history = [said(n) for n in range(1, 6)]  # sent over an hour while nobody listened
    app.start_catch_up([front], clock.now())
    await app.catch_ups[0].idle()
    await step(app, clock)
    assert front.texts() == ["reply to: text 1 | text 2 | text 3 | text 4 | text 5"]
    await app.catch_ups[0].stop()
