"""/reset end to end on the engine: the next prompt leaves out every earlier turn."""

from __future__ import annotations

from bot.core.store import Timing
from storage.sqlite import SqliteStore
from testkit import RecordingFrontend, ScriptedReplier
from testkit.clock import FakeClock
from tests.conftest import KEY, make_engine, message

TIMING = Timing(1.5, 8.0)


async def test_reset_hides_earlier_turns_from_prompts_but_keeps_the_messages(
    store: SqliteStore, clock: FakeClock, frontend: RecordingFrontend
) -> None:
    replier = ScriptedReplier()
    engine = make_engine(store, clock, replier, frontend)
    await engine.ingest(message(1, "my number is 42"))
    await clock.advance(2)
    await engine.run_due()
    await engine.idle()
    assert await store.reset_history(KEY.id) == 1
    await engine.ingest(message(2, "what was my number?"))
    await clock.advance(2)
    await engine.run_due()
    await engine.idle()
    assert [t.text for t in replier.calls[1].prompt.history] == []
    assert [m.text for m in await store.messages(KEY.id)] == [
        "my number is 42",
        "what was my number?",
    ]
    await engine.ingest(message(3, "and now?"))
    await clock.advance(2)
    await engine.run_due()
    await engine.idle()
    history = [t.text for t in replier.calls[2].prompt.history]
    assert history == ["alice: what was my number?", "reply to: what was my number?"]
    assert await store.reset_history("test/w1/nowhere/") is None
