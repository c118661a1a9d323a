"""Admitted starts that never reach the API give their share back (bot/core/admission.py).

Real SDK against the fake API and its limits, SQLite, on the fake clock (as
tests/test_admission.py): a start admitted for a burst with nothing left to answer must not keep
the minute's request it took.
"""

from __future__ import annotations

from bot.core.admission import UNKNOWN
from bot.core.events import MessageDeleted
from storage.sqlite import SqliteStore
from testkit import RecordingFrontend
from testkit.clock import FakeClock
from testkit.fake_anthropic import FakeAnthropic
from tests.conftest import SETTINGS
from tests.test_admission import Claude, ask, engine_on, key, limited, round_
from tests.test_admission import claude as claude  # the fixture: repliers on the fake API


async def test_a_start_with_nothing_to_answer_gives_its_request_back(
    store: SqliteStore,
    clock: FakeClock,
    frontend: RecordingFrontend,
    server: FakeAnthropic,
    claude: Claude,
) -> None:
    api = limited(server, clock, requests_per_minute=3)
    engine = engine_on(store, clock, claude(), frontend)
    await ask(engine, [key(0)])
    assert await round_(engine, clock, SETTINGS.quiet_seconds) == 1  # the limits learned: 2 left

    await ask(engine, [key(1), key(2)])
    await engine.ingest(MessageDeleted(key(1), f"m-{key(1).id}"))  # nothing left to answer
    assert await round_(engine, clock, SETTINGS.quiet_seconds) == 2  # both admitted ...
    assert len(server.requests) == 2  # ... one called the API

    await ask(engine, [key(3)])
    assert await round_(engine, clock, SETTINGS.quiet_seconds) == 1  # the unused one's request
    assert len(server.requests) == 3 and api.refused == 0


def test_an_unused_probe_lets_the_next_one_go() -> None:
    needs = {"requests": 1.0}
    probing = UNKNOWN.aged(0.0).take(needs).heard(529, {}, 0.0)
    probing = probing.aged(probing.held).take(needs)  # the probe after the 529's hold
    assert probing.wait(needs)[0] > 0
    assert probing.give_back(needs).wait(needs) == (0.0, "")
