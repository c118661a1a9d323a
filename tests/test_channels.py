"""Per-channel overrides of debounce and system prompt (`[[channels]]`)."""

from __future__ import annotations

from bot.config import parse_config
from bot.core.clock import FakeClock
from bot.core.errors import ConfigError
from bot.core.events import ConversationKey, IncomingMessage
from bot.core.settings import EngineSettings
from bot.testing import RecordingFrontend, ScriptedReplier
from storage.sqlite import SqliteStore
from tests.conftest import make_engine

FAST = ConversationKey("test", "w1", "fast")
SLOW = ConversationKey("test", "w1", "slow")
CONFIG = {
    "debounce": {"quiet_seconds": 1.5, "max_wait_seconds": 8.0},
    "llm": {"system_prompt": "global prompt"},
    "channels": [
        {"platform": "test", "channel": "fast", "quiet_seconds": 0.2, "system_prompt": "be terse"},
        {"platform": "test", "channel": "slow", "quiet_seconds": 5.0, "max_wait_seconds": 20.0},
    ],
}


async def test_each_channel_gets_its_own_quiet_window_and_prompt(
    store: SqliteStore, clock: FakeClock, frontend: RecordingFrontend
) -> None:
    settings = EngineSettings.from_config(parse_config(CONFIG))
    replier = ScriptedReplier()
    engine = make_engine(
        store, clock, replier, frontend,
        channels=settings.channels, system_prompt=settings.system_prompt,
    )  # fmt: skip
    other = ConversationKey("test", "w1", "other")
    for n, key in enumerate((FAST, SLOW, other)):
        await engine.ingest(IncomingMessage(key, f"m{n}", "u1", "alice", f"to {key.channel}"))
    await clock.advance(0.3)
    await engine.run_due()
    await engine.idle()
    assert [(c.texts, c.prompt.system) for c in replier.calls] == [(["to fast"], "be terse")]
    await clock.advance(1.5)
    await engine.run_due()
    await engine.idle()
    assert [(c.texts, c.prompt.system) for c in replier.calls[1:]] == [
        (["to other"], "global prompt")
    ]
    slow = await store.conversation_state(SLOW.id)
    assert slow is not None and slow.timer is not None
    assert slow.timer.deadline_at - slow.timer.due_at == 15.0  # 20 s cap, 5 s quiet
    await clock.advance(3.5)
    await engine.run_due()
    await engine.idle()
    assert [c.texts for c in replier.calls[2:]] == [["to slow"]]


def test_an_override_that_contradicts_the_cap_is_a_config_error() -> None:
    bad = {"channels": [{"platform": "slack", "channel": "C1", "quiet_seconds": 30}]}
    try:
        parse_config(bad)
    except ConfigError as exc:
        assert str(exc) == "channels.0: quiet_seconds must not exceed max_wait_seconds"
    else:
        raise AssertionError("accepted a quiet window longer than the cap")
