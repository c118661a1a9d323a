"""The adaptive quiet window through the engine, on the fake clock with a real SQLite store."""

from __future__ import annotations

import pytest

from bot.cli.explain import explain_lines
from bot.config import parse_config
from bot.core.errors import ConfigError
from bot.core.events import ConversationKey, IncomingMessage
from bot.core.quiet_window import SHAPE_WINDOW
from bot.core.store import Timing
from bot.wiring import engine_settings
from storage.sqlite import SqliteStore
from testkit import RecordingFrontend, ScriptedReplier, check_invariants
from testkit.clock import FakeClock
from tests.conftest import KEY, make_engine

ADAPTIVE = {"adaptive": True, "min_quiet_seconds": 0.5, "max_quiet_seconds": 5.0}


def said(n: int, text: str, author: str = "u1", name: str = "alice") -> IncomingMessage:
    return IncomingMessage(KEY, f"m{n}", author, name, text)


async def tick(engine, clock: FakeClock, seconds: float = 0.0) -> int:  # type: ignore[no-untyped-def]
    if seconds:
        await clock.advance(seconds)
    started = await engine.run_due()
    await engine.idle()
    return started


async def test_a_person_who_splits_at_2_5_s_gets_their_follow_up_in_one_burst(
    store: SqliteStore, clock: FakeClock, frontend: RecordingFrontend
) -> None:
    replier = ScriptedReplier()
    engine = make_engine(store, clock, replier, frontend, **ADAPTIVE)
    n = 0
    for _ in range(3):  # earlier bursts: alice writes two parts 2.5 s apart (each answered twice)
        for part in ("so I was thinking", "what about caching"):
            await engine.ingest(said(n, part))
            n += 1
            await tick(engine, clock, 2.5)
        await tick(engine, clock, 30.0)
    calls = len(replier.calls)
    await engine.ingest(said(n, "next: the deploy"))
    await tick(engine, clock, 2.5)
    assert len(replier.calls) == calls  # still open 2.5 s on
    await engine.ingest(said(n + 1, "is it safe?"))
    await tick(engine, clock, 5.0)
    assert [c.texts for c in replier.calls[calls:]] == [["next: the deploy", "is it safe?"]]
    await check_invariants(store, [KEY.id])


async def test_the_same_follow_up_is_a_second_burst_with_the_fixed_window(
    store: SqliteStore, clock: FakeClock, frontend: RecordingFrontend
) -> None:
    replier = ScriptedReplier()
    engine = make_engine(store, clock, replier, frontend, adaptive=False, quiet_seconds=1.5)
    await engine.ingest(said(1, "next: the deploy"))
    assert await tick(engine, clock, 1.4) == 0
    assert await tick(engine, clock, 0.1) == 1  # today's window: 1.5 s, whatever the rhythm
    await engine.ingest(said(2, "is it safe?"))
    await tick(engine, clock, 1.5)
    assert [c.texts for c in replier.calls] == [["next: the deploy"], ["is it safe?"]]


async def test_a_person_who_never_splits_is_answered_at_the_minimum_after_a_question(
    store: SqliteStore, clock: FakeClock, frontend: RecordingFrontend
) -> None:
    replier = ScriptedReplier()
    engine = make_engine(store, clock, replier, frontend, **ADAPTIVE)
    for n in range(10):  # one finished message at a time, a minute apart
        await engine.ingest(said(n, f"question {n}?"))
        await tick(engine, clock, 60.0)
    await engine.ingest(said(10, "and the last one?"))
    assert await tick(engine, clock, 0.49) == 0
    assert await tick(engine, clock, 0.01) == 1
    assert len(replier.calls) == 11


async def test_a_stranger_gets_the_window_of_the_messages_shape(
    store: SqliteStore, clock: FakeClock, frontend: RecordingFrontend
) -> None:
    replier = ScriptedReplier()
    engine = make_engine(store, clock, replier, frontend, **ADAPTIVE)
    await engine.ingest(said(1, "so I tried,", author="u9", name="bob"))
    dangling = SHAPE_WINDOW["dangling"]
    assert await tick(engine, clock, dangling - 0.01) == 0
    assert await tick(engine, clock, 0.01) == 1
    lines = await explain_lines(store, KEY.id, clock.now())
    assert lines is not None
    [window] = [line.split("s  ", 1)[1] for line in lines if "window  " in line]
    assert window == (
        f"window    {dangling:.1f} s after bob's last message: bob is new here; the message "
        f"trailed off ('ed,') (closed {dangling:.1f} s after the burst's end)"
    )


async def test_explain_says_the_window_waited_for_the_splitter_in_a_shared_burst(
    store: SqliteStore, clock: FakeClock, frontend: RecordingFrontend
) -> None:
    replier = ScriptedReplier()
    engine = make_engine(store, clock, replier, frontend, **ADAPTIVE)
    await engine.ingest(said(1, "so the build,"))  # alice trails off: 3 s
    await clock.advance(1.0)
    await engine.ingest(said(2, "same here.", author="u2", name="carol"))  # carol is done
    assert await tick(engine, clock, 0.5) == 0  # carol's 0.5 s passed; alice's window holds
    assert await tick(engine, clock, 1.5) == 1
    lines = await explain_lines(store, KEY.id, clock.now())
    assert lines is not None
    [window] = [line for line in lines if "window  " in line]
    assert "after alice's last message: alice is new here" in window
    assert "closed 2.0 s after the burst's end" in window


def test_the_config_keys_resolve_per_channel_and_refuse_crossed_bounds() -> None:
    config = parse_config(
        {
            "channels": [
                {"platform": "slack", "channel": "C1", "adaptive": False},
                {"platform": "slack", "channel": "C2", "min_quiet_seconds": 0.2},
            ]
        }
    )
    assert config.debounce.adaptive is True  # the default
    settings = engine_settings(config)
    assert settings.timing_for(ConversationKey("slack", "T", "C0")) == Timing(
        1.5, 8.0, True, 0.5, 5.0, speculate_after_seconds=0.3
    )
    assert settings.timing_for(ConversationKey("slack", "T", "C1")).adaptive is False
    assert settings.timing_for(ConversationKey("slack", "T", "C2")).min_quiet_seconds == 0.2
    with pytest.raises(ConfigError, match=r"^debounce: min_quiet_seconds must not exceed"):
        parse_config({"debounce": {"min_quiet_seconds": 3.0, "max_quiet_seconds": 2.0}})
    with pytest.raises(ConfigError, match=r"^channels\.0: min_quiet_seconds must not exceed"):
        parse_config({"channels": [{"platform": "s", "channel": "c", "max_quiet_seconds": 0.1}]})
