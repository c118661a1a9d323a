"""A process's life as `App.run` leads it: who it is (its owner name), how it stops, and what a
dead front end does to it."""

from __future__ import annotations

import re

from bot.app import App
from bot.config import parse_config
from bot.core.clock import FakeClock
from bot.testing import RecordingFrontend, ScriptedReplier
from storage.sqlite import SqliteStore
from tests.conftest import KEY, message


def shared_config() -> dict[str, object]:
    return {
        "llm": {"provider": "offline"},
        "debounce": {"quiet_seconds": 1.5, "max_wait_seconds": 8.0},
        "console": {"enabled": False},
        "engine": {"owner": "bot-eu"},
    }


async def test_two_processes_with_one_configured_owner_keep_each_others_leases(
    store: SqliteStore, clock: FakeClock
) -> None:
    """Both processes read the same config; one's shutdown must not release the other's lease."""
    config = parse_config(shared_config())
    replier = ScriptedReplier(hold=True)
    a = App(config, store, ScriptedReplier(), [RecordingFrontend()], clock=clock)
    platform = RecordingFrontend()
    b = App(config, store, replier, [platform], clock=clock)
    assert a.engine.owner != b.engine.owner
    assert re.fullmatch(r"bot-eu:[^:]+:\d+:[0-9a-f]{6}", a.engine.owner)
    await b.ingest(message(1))
    await clock.advance(1.5)
    await b.engine.run_due()
    call = await replier.next_call(0)
    await a.engine.shutdown()
    state = await store.conversation_state(KEY.id)
    assert state is not None and state.lease_owner == b.engine.owner
    call.finish()
    await b.engine.idle()
    assert platform.texts() == ["reply to: text 1"]
    await b.engine.shutdown()
