"""Admission by this process's CPU (bot/core/cpu_budget.py): starts wait while the process is
saturated and resume when it recovers.

The meter is the budget's own seam (CPU seconds and wall seconds): a measurement, given here by
the test on the fake clock, so a saturated process is a number, not a loaded machine. Everything
else is real: the engine, SQLite, the Anthropic SDK against the fake API.
"""

from __future__ import annotations

import pytest

from bot.cli.explain import explain_lines
from bot.core.cpu_budget import WAITING_FOR, CpuBudget
from storage.sqlite import SqliteStore
from testkit import RecordingFrontend
from testkit.clock import FakeClock
from testkit.fake_anthropic import FakeAnthropic
from tests.conftest import SETTINGS
from tests.test_admission import Claude, ask, engine_on, key, limited, round_
from tests.test_admission import claude as claude  # the fixture: repliers on the fake API


class Meter:
    """CPU seconds this process spent, as the test says."""

    def __init__(self) -> None:
        self.spent = 0.0

    def __call__(self) -> float:
        return self.spent


async def test_starts_wait_while_the_process_is_saturated_and_resume_when_it_recovers(
    store: SqliteStore,
    clock: FakeClock,
    frontend: RecordingFrontend,
    server: FakeAnthropic,
    claude: Claude,
) -> None:
    limited(server, clock, requests_per_minute=1_000)
    engine = engine_on(store, clock, claude(), frontend)
    meter = Meter()
    engine.cpu = CpuBudget(meter, clock.monotonic)
    events: list[tuple[str, dict[str, object]]] = []
    engine.subscribe(lambda name, fields: events.append((name, fields)))
    await ask(engine, [key(n) for n in range(3)])

    meter.spent += 0.95 * SETTINGS.quiet_seconds  # busy 95 % of a core while the windows ran
    # busy with something else (nothing was generating): one starts, since holding all of them
    # would relieve nothing; the others wait for the next window
    assert await round_(engine, clock, SETTINGS.quiet_seconds) == 1
    assert engine.ready_at == pytest.approx(clock.now() + 1.0)  # the next window measures again
    waits = [f["waiting_for"] for n, f in events if n == "capacity_wait"]
    assert waits == [WAITING_FOR] * 2

    meter.spent += 0.1  # recovered a second later
    assert await round_(engine, clock, 1.0) == 2
    assert len(frontend.posts) == 3 and len(server.requests) == 3

    waited = [(await store.generations(key(n).id))[0] for n in range(3)]
    assert sorted(g.waited for g in waited) == pytest.approx([0.0, 1.0, 1.0])
    [held, *_] = [n for n, g in enumerate(waited) if g.waited_for == WAITING_FOR]
    lines = "\n".join(await explain_lines(store, key(held).id, clock.now()))
    assert "waited    1.0s for this process's CPU" in lines


async def test_without_a_budget_the_saturated_meter_changes_nothing(
    store: SqliteStore,
    clock: FakeClock,
    frontend: RecordingFrontend,
    server: FakeAnthropic,
    claude: Claude,
) -> None:
    """The same rounds with no CPU budget: all three start at once (the test above can fail)."""
    limited(server, clock, requests_per_minute=1_000)
    engine = engine_on(store, clock, claude(), frontend)
    await ask(engine, [key(n) for n in range(3)])
    assert await round_(engine, clock, SETTINGS.quiet_seconds) == 3


def test_what_one_generation_costs_is_learned_and_bounds_the_next_starts() -> None:
    cpu, wall = Meter(), Meter()
    budget = CpuBudget(cpu, wall, target=0.8, window=1.0)
    assert budget.allowed(0) is None  # nothing measured yet: no bound
    wall.spent, cpu.spent = 1.0, 0.4  # 4 generations ran, 40 % of a core: 0.1 each
    assert budget.allowed(4) == 4  # 0.4 of headroom
    budget.granted(3)
    assert budget.allowed(7) == 1  # 0.1 left until the next window measures the 3 started
    budget.granted(1)
    assert budget.allowed(8) == 0  # the headroom is spent
    wall.spent, cpu.spent = 2.0, 0.4 + 0.85  # measured: saturated
    assert budget.allowed(8) == 0
    wall.spent, cpu.spent = 3.0, 1.25 + 0.5  # answers ended: 4 running, half a core
    assert budget.allowed(4) is not None and budget.allowed(4) >= 1


def test_a_process_busy_with_no_generation_running_still_starts_one() -> None:
    """Holding starts relieves nothing when none runs: saturated by other work (a flood of
    events), the process still answers, one generation at a time."""
    cpu, wall = Meter(), Meter()
    budget = CpuBudget(cpu, wall, target=0.8, window=1.0)
    wall.spent, cpu.spent = 1.0, 0.95  # saturated, with nothing generating
    assert budget.allowed(0) == 1
    assert budget.allowed(1) == 0  # one is running: the others wait for the next window
