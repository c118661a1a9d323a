"""Per-channel overrides of debounce, system prompt and model settings (`[[channels]]`)."""

from __future__ import annotations

import pytest

from bot.config import parse_config
from bot.core.errors import ConfigError
from bot.core.events import ConversationKey, IncomingMessage
from bot.wiring import claude_replier, engine_settings
from storage.sqlite import SqliteStore
from testkit import RecordingFrontend, ScriptedReplier
from testkit.clock import FakeClock
from testkit.fake_anthropic import FakeAnthropic
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
    settings = engine_settings(parse_config(CONFIG))
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


async def test_a_channel_can_have_its_own_model_and_max_tokens(
    store: SqliteStore, clock: FakeClock, frontend: RecordingFrontend
) -> None:
    """The requests the real SDK sends to the fake Messages API carry each channel's settings;
    a conversation without an override keeps `[llm]`'s. No sampling parameter is ever sent."""
    server = await FakeAnthropic().start()
    config = parse_config({
        "llm": {"base_url": server.base_url, "api_key_env": "TEST_ANTHROPIC_KEY",
                "model": "claude-sonnet-5-5", "max_tokens": 1024},
        "channels": [{"platform": "test", "channel": "fast", "model": "claude-haiku-4-5",
                      "max_tokens": 300}],
    })  # fmt: skip
    claude = claude_replier(config, {"TEST_ANTHROPIC_KEY": "sk-test"})
    engine = make_engine(store, clock, claude, frontend)
    engine.settings = engine_settings(config)
    try:
        for n, key in enumerate((FAST, SLOW)):
            await engine.ingest(IncomingMessage(key, f"m{n}", "u1", "alice", f"to {key.channel}"))
        await clock.advance(1.5)
        await engine.run_due()
        await engine.idle()
    finally:
        await claude.aclose()
        await server.stop()
    sent = {r.last_user_text: r.body for r in server.requests}
    fast, slow = sent["alice: to fast"], sent["alice: to slow"]
    assert (fast["model"], fast["max_tokens"]) == ("claude-haiku-4-5", 300)
    assert (slow["model"], slow["max_tokens"]) == ("claude-sonnet-5-5", 1024)
    assert not {"temperature", "top_p", "top_k"} & {*fast, *slow}
    records = {g.conversation_id: g for g in await store.generations()}
    assert (records[FAST.id].model, records[FAST.id].user_id) == ("claude-haiku-4-5", "u1")
    assert records[SLOW.id].model == "claude-sonnet-5-5"


def test_channel_model_settings_are_checked() -> None:
    for bad, where in (
        ({"temperature": 0.5}, "channels.0.temperature: not supported: the Claude Messages API"),
        ({"max_tokens": 0}, "channels.0.max_tokens"),
        ({"model": ""}, "channels.0.model"),
    ):
        with pytest.raises(ConfigError, match=where):
            parse_config({"channels": [{"platform": "slack", "channel": "C1", **bad}]})


def test_a_temperature_anywhere_is_refused_with_the_reason() -> None:
    with pytest.raises(ConfigError, match=r"^llm.temperature: not supported: .* sampling"):
        parse_config({"llm": {"temperature": 1.0}})
