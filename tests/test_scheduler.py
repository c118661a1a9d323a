"""The scheduler loop on a fake clock: sleeps to the earliest timer, wakes early, polls."""

from __future__ import annotations

import asyncio
import itertools
import logging
from collections.abc import AsyncIterator, Callable, Sequence
from contextlib import asynccontextmanager

import pytest

from bot.core.engine import Engine
from bot.core.errors import StoreError
from bot.core.events import ConversationKey
from bot.core.scheduler import FLOOR_SECONDS, STORE_BACKOFF_CAP_SECONDS, Scheduler
from bot.core.store import DueTimer, Lease, OutboxRow, Timing
from storage.sqlite import SqliteStore
from testkit import RecordingFrontend, ScriptedReplier
from testkit.clock import FakeClock
from testkit.engine import shut_down
from tests.conftest import KEY, make_serving, message
from tests.heard import Heard


async def eventually(condition: Callable[[], bool], within: float = 30.0) -> None:
    """Bounded wait for real I/O (the store's thread) to finish; never a debounce wait. The bound
    only catches a hang: on a machine loaded by parallel workers a few hops took over 5 s."""
    for _ in range(int(within / 0.01)):
        if condition():
            return
        await asyncio.sleep(0.01)
    raise AssertionError("condition not met in time")


@pytest.fixture
def heard() -> Heard:
    return Heard()


async def asleep_until(heard: Heard, when: float, since: int = 0) -> None:
    """The scheduler went to sleep until `when`: before the fake clock gets there (or something
    wakes it) it does nothing, so a negative asserted now is about the code, not about timing."""
    await heard.next("asleep", lambda fields: fields["until"] == pytest.approx(when), since)


async def sleep_through_rounds(heard: Heard, clock: FakeClock, rounds: int, since: int = 0) -> int:
    """Let the scheduler run `rounds` more rounds: each time it goes to sleep (heard since
    `since`), move the clock to its wake-up. Returns where the next call should look from."""
    for _ in range(rounds):
        fields = await heard.next("asleep", since=since)
        since = heard.mark()
        await clock.advance(float(str(fields["until"])) - clock.now())
    return since


@pytest.fixture
async def running(
    store: SqliteStore, clock: FakeClock, frontend: RecordingFrontend, heard: Heard
) -> AsyncIterator[tuple[Engine, Scheduler]]:
    serving = make_serving(store, clock, ScriptedReplier(), frontend, poll_seconds=60.0)
    engine = serving.engine
    engine.subscribe(heard)
    scheduler = serving.scheduler
    task = asyncio.create_task(scheduler.run())
    yield engine, scheduler
    scheduler.stop()
    await task
    await shut_down(engine)


async def test_sleeps_until_the_due_timer_then_answers(
    running: tuple[Engine, Scheduler],
    clock: FakeClock,
    frontend: RecordingFrontend,
    heard: Heard,
) -> None:
    engine, _ = running
    due = clock.now() + 1.5
    await engine.ingest(message(1))
    await asleep_until(heard, due)
    await clock.advance(1.4)
    assert frontend.posts == []  # quiet window not over: the scheduler sleeps until `due`
    assert clock.waiting()[0] == pytest.approx(due)
    await clock.advance(0.1)
    await eventually(lambda: len(frontend.posts) == 1)


async def test_an_in_process_arrival_wakes_a_long_sleep(
    running: tuple[Engine, Scheduler],
    clock: FakeClock,
    frontend: RecordingFrontend,
    heard: Heard,
) -> None:
    engine, _ = running
    await asleep_until(heard, clock.now() + 60.0)  # its poll interval
    due = clock.now() + 1.5
    await engine.ingest(message(1))
    await asleep_until(heard, due)  # woken by the arrival
    await clock.advance(1.5)  # far less than the poll interval
    await eventually(lambda: len(frontend.posts) == 1)


async def test_timers_armed_by_another_process_are_found_by_polling(
    running: tuple[Engine, Scheduler],
    store: SqliteStore,
    clock: FakeClock,
    frontend: RecordingFrontend,
    heard: Heard,
) -> None:
    _, scheduler = running
    poll_ends = clock.now() + 60.0
    await asleep_until(heard, poll_ends)
    # written straight to the store, as another process would: no in-process wake-up
    await store.ingest(message(1), clock.now(), Timing(1.5, 8.0))
    await clock.advance(30.0)
    assert frontend.posts == []  # still sleeping: nothing told this process
    assert scheduler.wakeup.sleeping_until == poll_ends and heard.count("asleep") == 1
    await clock.advance(30.0)  # the poll interval
    await eventually(lambda: len(frontend.posts) == 1)
    assert frontend.posts[0].key == KEY


async def test_a_store_outage_is_logged_once_when_it_starts_and_once_when_it_ends(
    store: SqliteStore,
    clock: FakeClock,
    frontend: RecordingFrontend,
    caplog: pytest.LogCaptureFixture,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    serving = make_serving(store, clock, ScriptedReplier(), frontend, poll_seconds=1.0)
    engine = serving.engine
    failed_rounds = 0

    async def store_down(now: float, skip: object = ()) -> float | None:
        nonlocal failed_rounds
        failed_rounds += 1
        raise StoreError("database is locked")

    monkeypatch.setattr(store, "next_due_at", store_down)
    heard = Heard()
    engine.subscribe(heard)
    scheduler = serving.scheduler
    task = asyncio.create_task(scheduler.run())
    with caplog.at_level(logging.WARNING, logger="burstbot.scheduler"):
        since = await sleep_through_rounds(heard, clock, 4)
        monkeypatch.undo()  # the database is back
        await sleep_through_rounds(heard, clock, 1, since)
        await eventually(lambda: any("again" in r.getMessage() for r in caplog.records))
    scheduler.stop()
    await task
    await shut_down(engine)
    assert failed_rounds >= 3
    messages = [r.getMessage() for r in caplog.records if r.name == "burstbot.scheduler"]
    assert len(messages) == 2, messages
    assert messages[0].startswith("store unavailable (database is locked)")
    assert messages[1].startswith("store available again after")
    assert all(r.exc_info is None for r in caplog.records)


async def test_a_timer_due_a_few_milliseconds_later_is_slept_to_exactly(
    store: SqliteStore, clock: FakeClock, frontend: RecordingFrontend
) -> None:
    serving = make_serving(store, clock, ScriptedReplier(), frontend, poll_seconds=60.0)
    engine = serving.engine
    scheduler = serving.scheduler
    other = ConversationKey(KEY.platform, KEY.workspace, "other", "")
    await engine.ingest(message(1))
    await clock.advance(0.01)
    await engine.ingest(message(2, key=other))  # due 10 ms after the first
    await clock.advance(1.49)  # the first is due
    first_round = clock.now()
    wanted = await scheduler.tick()
    assert wanted - first_round == pytest.approx(0.01, abs=1e-6)  # not a 50 ms floor later
    await shut_down(engine)


@asynccontextmanager
async def scheduled(
    store: SqliteStore, clock: FakeClock, frontend: RecordingFrontend
) -> AsyncIterator[tuple[Engine, Scheduler]]:
    """An engine and a scheduler (not running: the test calls `tick`) on a store of the test's."""
    await store.open()
    try:
        serving = make_serving(store, clock, ScriptedReplier(), frontend, poll_seconds=60.0)
        engine = serving.engine
        yield engine, serving.scheduler
        await shut_down(engine)
    finally:
        await store.close()


class SlowRoundStore(SqliteStore):
    """`due_timers` takes 10 ms of the fake clock: a timer can fall due during the round."""

    clock: FakeClock

    async def due_timers(self, now: float, limit: int) -> list[DueTimer]:
        found = await super().due_timers(now, limit)
        await self.clock.advance(0.01)
        return found


async def test_a_timer_falling_due_during_a_round_starts_the_next_round_at_once(
    clock: FakeClock, frontend: RecordingFrontend
) -> None:
    store = SlowRoundStore(":memory:")
    store.clock = clock
    async with scheduled(store, clock, frontend) as (engine, scheduler):
        other = ConversationKey(KEY.platform, KEY.workspace, "other", "")
        await engine.ingest(message(1))
        await clock.advance(0.005)
        await engine.ingest(message(2, key=other))  # due 5 ms after the first
        await clock.advance(1.495)  # the first is due; the other falls due during the round
        started = clock.now()
        wanted = await scheduler.tick()
        assert wanted - started == pytest.approx(0.005, abs=1e-6)  # not the 50 ms floor


class BusyLoopStore(SqliteStore):
    """Time passes between the round's end and the first step of the scheduler's sleep (a busy
    event loop runs other callbacks first): the last read of a round moves the clock just after
    the round, before the sleep task has run."""

    clock: FakeClock
    lag = 0.0

    async def next_due_at(self, now: float, skip: Sequence[str] = ()) -> float | None:
        found = await super().next_due_at(now, skip)
        asyncio.get_running_loop().call_soon(self.clock.jump, self.lag)
        return found


async def test_time_passing_before_the_sleep_starts_does_not_postpone_the_wakeup(
    clock: FakeClock, frontend: RecordingFrontend
) -> None:
    """The scheduler sleeps until the timer's due time, not for a duration counted from when its
    sleep task first ran (which left it asleep past the timer, for as long as the loop lagged)."""
    store = BusyLoopStore(":memory:")
    store.clock = clock
    async with scheduled(store, clock, frontend) as (engine, scheduler):
        await engine.ingest(message(1))  # due in 1.5 s
        store.lag = 1.0
        running = asyncio.create_task(scheduler.run())
        await eventually(lambda: clock.waiting() != ())
        store.lag = 0.0
        await clock.advance(0.5)  # the timer is due
        await eventually(lambda: len(frontend.posts) == 1)
        scheduler.stop()
        await running


class ClaimCountingStore(SqliteStore):
    sweeps = 0

    async def claim_replies(self, *args: object, **kwargs: object) -> list[OutboxRow]:
        self.sweeps += 1
        return await super().claim_replies(*args, **kwargs)  # type: ignore[arg-type]


async def test_a_round_claims_from_the_outbox_only_when_a_row_is_due(
    clock: FakeClock, frontend: RecordingFrontend
) -> None:
    """The sweep's claim is a write: a round whose read finds nothing due does not make it."""
    store = ClaimCountingStore(":memory:")
    async with scheduled(store, clock, frontend) as (engine, scheduler):
        await engine.ingest(message(1))
        await clock.advance(1.5)
        await scheduler.tick()
        await engine.idle()
        assert len(frontend.posts) == 1  # claimed by its commit, not by a sweep
        await scheduler.tick()
        assert store.sweeps == 0


async def test_failing_rounds_back_off_exponentially_up_to_a_cap(
    store: SqliteStore,
    clock: FakeClock,
    frontend: RecordingFrontend,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    serving = make_serving(
        store, clock, ScriptedReplier(), frontend, poll_seconds=1.0, backoff_jitter=0.0
    )
    engine = serving.engine
    rounds: list[float] = []

    async def store_down(*args: object, **kwargs: object) -> list[DueTimer]:
        rounds.append(clock.now())
        raise StoreError("database is locked")

    monkeypatch.setattr(store, "due_timers", store_down)
    heard = Heard()
    engine.subscribe(heard)
    scheduler = serving.scheduler
    task = asyncio.create_task(scheduler.run())
    await sleep_through_rounds(heard, clock, 7)
    await eventually(lambda: len(rounds) == 8)
    scheduler.stop()
    await task
    await shut_down(engine)
    gaps = [later - earlier for earlier, later in itertools.pairwise(rounds)]
    assert gaps[:6] == [1.0, 2.0, 4.0, 8.0, STORE_BACKOFF_CAP_SECONDS, STORE_BACKOFF_CAP_SECONDS]


class LeaseFailingStore(SqliteStore):
    async def acquire_lease(self, *args: object, **kwargs: object) -> Lease | None:
        raise StoreError("database is locked")


async def test_a_due_timer_that_cannot_be_started_does_not_make_the_loop_spin(
    clock: FakeClock, frontend: RecordingFrontend
) -> None:
    async with scheduled(LeaseFailingStore(":memory:"), clock, frontend) as (engine, scheduler):
        await engine.ingest(message(1))
        await clock.advance(1.5)
        started = clock.now()
        wanted = await scheduler.tick()  # the timer stays due: the lease cannot be taken
        await engine.idle()
        assert wanted - started == pytest.approx(FLOOR_SECONDS, abs=1e-6)
