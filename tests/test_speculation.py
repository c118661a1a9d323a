"""Speculation (G4): a burst's generation starts `speculate_after_seconds` after its last message,
before its window closes, and nothing of it is visible or committed before the close. On a fake
clock with a real SQLite store, a scripted replier and a recording front end that counts every raw
post. The window here: quiet 1.5 s, an early start 0.3 s after the last message."""

from __future__ import annotations

import asyncio
from typing import Any

from bot.config import ChannelConfig, ToolsConfig
from bot.core.engine import Engine
from bot.core.errors import RetryableReplierError
from bot.core.events import ConversationKey
from bot.core.settings import ChannelSettings
from bot.wiring import channel_settings
from storage.sqlite import SqliteStore
from testkit import RecordingFrontend, ScriptedReplier, check_invariants
from testkit.clock import FakeClock
from tests.clock_steps import step
from tests.conftest import KEY, make_engine, message
from tests.heard import Heard

OTHER = ConversationKey("test", "w1", "c2")


def speculating(*args: Any, **overrides: Any) -> tuple[Engine, Heard]:
    engine = make_engine(*args, **{"speculate": True, "speculate_after_seconds": 0.3, **overrides})
    heard = Heard()
    engine.subscribe(heard)
    return engine, heard


async def drafts_shown(frontend: RecordingFrontend, count: int = 1) -> None:
    """Bounded wait on the real loop: the stream's post reaches the front end."""
    async with asyncio.timeout(5.0):
        while len(frontend.posts) < count:  # noqa: ASYNC110
            await asyncio.sleep(0.005)


async def test_a_speculation_cancelled_by_new_input_shows_nothing_and_one_reply_answers_all(
    store: SqliteStore, clock: FakeClock
) -> None:
    frontend = RecordingFrontend(drafts=True, clock=clock)
    replier = ScriptedReplier(hold=True)
    engine, heard = speculating(store, clock, replier, frontend, streaming=True)
    start = clock.now()
    await engine.ingest(message(1, "so about"))
    await clock.advance(0.3)
    assert await engine.run_due() == 1  # 0.3 s after the message, 1.2 s before the close
    early = await replier.next_call(0)
    assert (await heard.next("generating", since=0))["speculative"] is True
    early.stream(7, "So, about")
    await step(clock, 0.5)  # the text is there, the window still open: nothing shows
    assert frontend.posts == [] and frontend.edits == [] and frontend.busy == {}
    mark = heard.mark()
    await engine.ingest(message(2, "the plan for friday?"))
    superseded = await heard.next("superseded", since=mark)
    assert superseded["speculative"] is True and superseded["wasted"] == 7
    assert early.cancelled
    await engine.idle()
    assert frontend.posts == []
    await clock.advance(0.3)  # the re-armed timer's early start: 0.3 s after the second message
    assert await engine.run_due() == 1
    again = await replier.next_call(1)
    assert again.texts == ["so about", "the plan for friday?"]
    again.finish("Friday's plan is simple.")
    await heard.next("held")
    assert await store.replies(KEY.id) == []  # done before the close: held, not committed
    await step(clock, 1.2)  # the close: 1.5 s after the second message
    await engine.idle()
    assert clock.now() == start + 0.8 + 1.5
    assert [p.text for p in frontend.posts] == ["Friday's plan is simple."]
    outcomes = [(g.outcome, g.usage.output_tokens) for g in await store.generations(KEY.id)]
    assert sorted(outcomes) == [("posted", 0), ("superseded", 7)]  # the early tokens: wasted
    await check_invariants(store, [KEY.id], frontend=frontend)


async def test_a_generation_done_before_the_close_commits_only_at_the_close(
    store: SqliteStore, clock: FakeClock
) -> None:
    frontend = RecordingFrontend(drafts=True, clock=clock)
    replier = ScriptedReplier(hold=True)
    engine, heard = speculating(store, clock, replier, frontend, streaming=True)
    start = clock.now()
    await engine.ingest(message(1, "what time is it in Oslo?"))
    await clock.advance(0.3)
    await engine.run_due()
    (await replier.next_call(0)).finish("It is noon in Oslo.")
    await heard.next("held", since=0)
    await step(clock, 1.1)  # 0.1 s before the close: still held
    assert await store.replies(KEY.id) == [] and frontend.posts == []
    assert heard.count("committed") == 0
    await step(clock, 0.1)
    committed = await heard.next("committed", since=0)
    assert clock.now() == start + 1.5
    await engine.idle()
    assert [p.text for p in frontend.posts] == ["It is noon in Oslo."]  # posted whole: no draft
    assert frontend.edits == []
    assert committed["version"] == 1
    await check_invariants(store, [KEY.id], frontend=frontend)


async def test_a_message_arriving_while_an_early_answer_is_held_supersedes_it(
    store: SqliteStore, clock: FakeClock
) -> None:
    frontend = RecordingFrontend(drafts=True, clock=clock)
    replier = ScriptedReplier(hold=True)
    engine, heard = speculating(store, clock, replier, frontend, streaming=True)
    await engine.ingest(message(1, "is the build green"))
    await clock.advance(0.3)
    await engine.run_due()
    first = await replier.next_call(0)
    first.stream(4, "Yes, the build")
    first.finish("Yes, the build is green.")
    await heard.next("held", since=0)
    await step(clock, 0.7)
    mark = heard.mark()
    await engine.ingest(message(2, "on main and on release?"))
    await heard.next("superseded", since=mark)
    await engine.idle()
    assert await store.replies(KEY.id) == [] and frontend.posts == []
    await clock.advance(0.3)
    await engine.run_due()
    second = await replier.next_call(1)
    assert second.texts == ["is the build green", "on main and on release?"]
    second.finish("Green on both.")
    await step(clock, 1.2)
    await engine.idle()
    assert [p.text for p in frontend.posts] == ["Green on both."]
    await check_invariants(store, [KEY.id], frontend=frontend)


async def test_at_the_close_the_text_so_far_shows_as_the_first_draft_at_once(
    store: SqliteStore, clock: FakeClock
) -> None:
    frontend = RecordingFrontend(drafts=True, clock=clock)
    replier = ScriptedReplier(hold=True)
    engine, heard = speculating(store, clock, replier, frontend, streaming=True)
    start = clock.now()
    await engine.ingest(message(1, "explain the outage"))
    await clock.advance(0.3)
    await engine.run_due()
    call = await replier.next_call(0)
    call.stream(5, "The outage began")
    await step(clock, 1.1)
    assert frontend.posts == []
    await step(clock, 0.1)  # the close
    await heard.next("window_closed", since=0)
    await drafts_shown(frontend)
    assert clock.now() == start + 1.5  # at the close, not a streaming interval later
    assert frontend.visible() == ["The outage began"]
    assert frontend.busy == {}  # the indicator keeps its timing: `delay` after the close
    await step(clock, 0.9)
    assert frontend.busy == {}
    await step(clock, 0.1)
    async with asyncio.timeout(5.0):
        while frontend.busy.get(KEY) is not True:  # noqa: ASYNC110
            await asyncio.sleep(0.005)
    call.stream(5, " at noon.")
    call.finish("The outage began at noon.")
    await step(clock, 1.0)
    await engine.idle()
    assert frontend.visible() == ["The outage began at noon."]
    assert len(frontend.posts) == 1  # one visible message: the draft became the reply
    await check_invariants(store, [KEY.id], frontend=frontend)


async def test_a_model_429_on_a_speculation_does_not_delay_the_real_start(
    store: SqliteStore, clock: FakeClock
) -> None:
    frontend = RecordingFrontend()
    replier = ScriptedReplier()
    replier.failures = [RetryableReplierError("429 rate limited")]
    engine, heard = speculating(store, clock, replier, frontend)
    start = clock.now()
    await engine.ingest(message(1))
    await clock.advance(0.3)
    await engine.run_due()
    await heard.next("speculation_failed", since=0)
    await engine.idle()
    state = await store.conversation_state(KEY.id)
    assert state is not None and state.failed_attempts == 0  # no attempt spent, no back-off
    assert state.timer is not None and state.timer.due_at == start + 1.5
    await step(clock, 1.1)
    assert await engine.run_due() == 0  # no second early start: the next one is the real one
    await step(clock, 0.1)
    assert await engine.run_due() == 1  # at the close, as if nothing had been tried
    await engine.idle()
    assert len(replier.calls) == 2 and [p.text for p in frontend.posts] == ["reply to: text 1"]
    outcomes = [g.outcome for g in await store.generations(KEY.id)]
    assert sorted(outcomes) == ["failed", "posted"]
    await check_invariants(store, [KEY.id], frontend=frontend)


async def test_a_speculation_refused_by_the_slot_limit_starts_when_a_slot_frees(
    store: SqliteStore, clock: FakeClock
) -> None:
    """One slot, taken by another conversation until after this burst's close: the burst starts
    the moment the slot frees, as without speculation (no back-off past its close)."""
    frontend = RecordingFrontend()
    replier = ScriptedReplier(hold=True)
    engine, heard = speculating(store, clock, replier, frontend, max_concurrent_generations=1)
    await engine.ingest(message("o1", key=OTHER))
    await clock.advance(0.3)
    assert await engine.run_due() == 1
    busy = await replier.next_call(0)
    await engine.ingest(message(1))
    await clock.advance(0.3)  # this burst's early start: no free slot
    assert await engine.run_due() == 0
    await step(clock, 1.5)  # past both closes; the other one still generates
    assert await engine.run_due() == 0
    busy.finish()
    await engine.idle()
    assert await engine.run_due() == 1  # the freed slot goes to this burst at once
    call = await replier.next_call(1)
    assert call.texts == ["text 1"]
    assert heard.count("lease_conflict") == 0
    call.finish()
    await engine.idle()
    assert sorted(p.text for p in frontend.posts) == ["reply to: text 1", "reply to: text o1"]


async def test_closed_windows_take_a_free_slot_before_early_starts(
    store: SqliteStore, clock: FakeClock
) -> None:
    """A burst whose window has closed is never displaced by another's speculation, even when
    that speculation's start was due first."""
    frontend = RecordingFrontend()
    replier = ScriptedReplier(hold=True)
    later = ChannelSettings("test", "c2", {"quiet_seconds": 5.0})
    engine, _ = speculating(
        store, clock, replier, frontend, max_concurrent_generations=1, channels=(later,)
    )
    third = ConversationKey("test", "w1", "c3")
    await engine.ingest(message("t1", key=third))
    await clock.advance(0.3)
    assert await engine.run_due() == 1
    holder = await replier.next_call(0)
    await engine.ingest(message("o1", key=OTHER))  # early start at +0.3, window closes at +5
    await step(clock, 0.1)
    await engine.ingest(message(1))  # early start at +0.3, window closes at +1.5
    await step(clock, 2.0)  # both are due; only this one's window has closed
    holder.finish()
    await engine.idle()
    assert await engine.run_due() == 1
    nxt = await replier.next_call(1)
    assert nxt.texts == ["text 1"]


async def test_speculate_off_starts_at_the_close_as_before(
    store: SqliteStore, clock: FakeClock
) -> None:
    frontend = RecordingFrontend()
    engine, heard = speculating(store, clock, ScriptedReplier(), frontend, speculate=False)
    result = await engine.ingest(message(1))
    assert result.start_at is None
    await step(clock, 1.4)
    assert await engine.run_due() == 0
    await step(clock, 0.1)
    assert await engine.run_due() == 1
    await engine.idle()
    assert (await heard.next("generating", since=0))["speculative"] is False
    assert [p.text for p in frontend.posts] == ["reply to: text 1"]


async def test_no_speculation_where_the_model_may_search_the_web(
    store: SqliteStore, clock: FakeClock
) -> None:
    """A paid server tool never runs before the window closes: such a channel does not speculate."""
    searching = channel_settings(
        ChannelConfig(platform="test", channel="c1", tools={"web_search": True}), ToolsConfig()
    )
    engine, _ = speculating(store, clock, ScriptedReplier(), None, channels=(searching,))
    assert engine.settings.timing_for(KEY).speculate_after_seconds is None
    assert engine.settings.timing_for(OTHER).speculate_after_seconds == 0.3
    result = await engine.ingest(message(1))
    assert result.start_at is None and result.due_at is not None
    await clock.advance(0.3)
    assert await engine.run_due() == 0


async def test_a_typing_notice_during_a_held_answer_keeps_it_held_until_the_new_close(
    store: SqliteStore, clock: FakeClock
) -> None:
    """Discord's typing holds the window open: the early answer waits for the moved close."""
    frontend = RecordingFrontend()
    replier = ScriptedReplier()
    engine, heard = speculating(store, clock, replier, frontend)
    start = clock.now()
    await engine.ingest(message(1))
    await clock.advance(0.3)
    await engine.run_due()
    await heard.next("held", since=0)
    await store.extend_quiet(KEY.id, "u1", clock.now() + 3.0, clock.now())  # typing at +0.3
    await step(clock, 1.2)  # the first close: read again, moved
    assert heard.count("committed") == 0
    await step(clock, 1.7)
    assert heard.count("committed") == 0
    await step(clock, 0.2)  # past +3.3, the moved close
    await heard.next("committed", since=0)
    generations = await store.generations(KEY.id)
    assert [g.ended_at >= start + 3.3 for g in generations] == [True]
    await engine.idle()
    assert len(frontend.posts) == 1
