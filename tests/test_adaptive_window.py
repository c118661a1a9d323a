"""The adaptive quiet window through the engine, on the fake clock with a real SQLite store."""

from __future__ import annotations

import pytest

from bot.cli.explain import explain_lines
from bot.config import parse_config
from bot.core.errors import ConfigError
from bot.core.events import ConversationKey, IncomingMessage
from bot.core.quiet_window import AdaptiveWindow
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


PARTS = ("so I was thinking", "what about caching", "and the deploy")


async def split_in_three(engine, clock: FakeClock, bursts: int) -> int:  # type: ignore[no-untyped-def]
    """Earlier bursts: alice writes three parts 2 s apart (each part answered on its own)."""
    n = 0
    for _ in range(bursts):
        for part in PARTS:
            await engine.ingest(said(n, part))
            n += 1
            await tick(engine, clock, 2.0)
        await tick(engine, clock, 30.0)
    return n


async def test_a_person_who_splits_2_s_apart_gets_their_follow_up_in_one_burst(
    store: SqliteStore, clock: FakeClock, frontend: RecordingFrontend
) -> None:
    replier = ScriptedReplier()
    engine = make_engine(store, clock, replier, frontend, **ADAPTIVE)
    n = await split_in_three(engine, clock, 3)
    calls = len(replier.calls)
    await engine.ingest(said(n, "next: the deploy"))
    await tick(engine, clock, 2.0)
    assert len(replier.calls) == calls  # still open 2 s on
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


async def test_a_strangers_dangling_message_closes_at_the_minimum(
    store: SqliteStore, clock: FakeClock, frontend: RecordingFrontend
) -> None:
    """A dangling end is followed within 10 s about one time in seven, mostly seconds later:
    not worth a wait on every such message (the old rule held a stranger 3 s)."""
    replier = ScriptedReplier()
    engine = make_engine(store, clock, replier, frontend, **ADAPTIVE)
    await engine.ingest(said(1, "so I tried,", author="u9", name="bob"))
    assert await tick(engine, clock, 0.49) == 0
    assert await tick(engine, clock, 0.01) == 1
    lines = await explain_lines(store, KEY.id, clock.now())
    assert lines is not None
    [window] = [line.split("s  ", 1)[1] for line in lines if "window  " in line]
    assert window == (
        "window    0.5 s after bob's last message: bob is new here: not likely enough soon "
        "enough to wait for; the message trailed off ('ed,') (closed 0.5 s after the burst's end)"
    )


async def test_a_person_whose_late_follow_ups_held_the_full_bound_now_closes_early(
    store: SqliteStore, clock: FakeClock, frontend: RecordingFrontend
) -> None:
    """Erin followed one message in four, 4.5 s later: the old rule held her 5 s after every
    message; her next message closes at the minimum (and a late follow-up is its own burst)."""
    replier = ScriptedReplier()
    engine = make_engine(store, clock, replier, frontend, **ADAPTIVE)
    n = 0
    for _ in range(3):
        await engine.ingest(said(n, "so I was thinking", name="erin"))
        await tick(engine, clock, 4.5)
        await engine.ingest(said(n + 1, "what about caching", name="erin"))
        n += 2
        for _ in range(2):
            await tick(engine, clock, 30.0)
            await engine.ingest(said(n, f"question {n}?", name="erin"))
            n += 1
        await tick(engine, clock, 30.0)
    calls = len(replier.calls)
    await engine.ingest(said(n, "next: the deploy", name="erin"))
    assert await tick(engine, clock, 0.49) == 0
    assert await tick(engine, clock, 0.01) == 1
    assert [c.texts for c in replier.calls[calls:]] == [["next: the deploy"]]


async def test_explain_says_the_window_waited_for_the_splitter_in_a_shared_burst(
    store: SqliteStore, clock: FakeClock, frontend: RecordingFrontend
) -> None:
    replier = ScriptedReplier()
    engine = make_engine(store, clock, replier, frontend, **ADAPTIVE)
    n = await split_in_three(engine, clock, 3)
    await engine.ingest(said(n, "so the build"))  # alice may still be writing
    await clock.advance(1.0)
    await engine.ingest(said(n + 1, "same here.", author="u2", name="carol"))  # carol is done
    assert await tick(engine, clock, 0.5) == 0  # carol's 0.5 s passed; alice's window holds
    lines = await explain_lines(store, KEY.id, clock.now())
    assert lines is not None
    *_, window = [line for line in lines if "window  " in line]  # the open burst's
    assert "after alice's last message: alice writes again within 10 s" in window
    assert "worth waiting for" in window


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
        1.5, 8.0, AdaptiveWindow(0.5, 5.0), speculate_after_seconds=0.3
    )
    assert settings.timing_for(ConversationKey("slack", "T", "C1")).adaptive is None
    c2 = settings.timing_for(ConversationKey("slack", "T", "C2")).adaptive
    assert c2 is not None and c2.min_quiet_seconds == 0.2
    with pytest.raises(ConfigError, match=r"^debounce: min_quiet_seconds must not exceed"):
        parse_config({"debounce": {"min_quiet_seconds": 3.0, "max_quiet_seconds": 2.0}})
    with pytest.raises(ConfigError, match=r"^channels\.0: min_quiet_seconds must not exceed"):
        parse_config({"channels": [{"platform": "s", "channel": "c", "max_quiet_seconds": 0.1}]})
