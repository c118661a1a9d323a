"""The Stop control (G16): a click is input, stored and decided once before it is answered; a stop
ends the burst with what was shown. On the fake clock, a real SQLite store and a recording front
end that counts every raw post."""

from __future__ import annotations

from datetime import UTC, datetime
from itertools import count

from bot.cli.explain import explain_lines
from bot.core.clicks import Click
from bot.core.engine import Engine
from bot.core.events import ConversationKey, Draft
from bot.core.store import Timing
from storage.sqlite import SqliteStore
from testkit import RecordingFrontend, ReplierCall, ScriptedReplier, check_invariants
from testkit.clock import FakeClock
from tests.apps import make_app
from tests.clock_steps import step
from tests.conftest import KEY, SETTINGS, message
from tests.heard import Heard
from tests.test_streaming import (
    INTERVAL,
    answered,
    drafted,
    kill_9,
    one_message_generating,
    start_generation,
    streaming_engine,
    streaming_frontend,
)

_ids = count(1)


async def stop_click(
    store: SqliteStore,
    clicker_id: str = "u1",
    name: str = "alice",
    click_id: str | None = None,
    key: ConversationKey = KEY,
) -> Click:
    """A press of the Stop button on the conversation's draft, as a front end reports it."""
    draft = await store.draft(key.id)
    assert draft is not None
    return Click(click_id or f"click-{next(_ids)}", key, "stop", draft.key, clicker_id, name)


async def drafting(
    store: SqliteStore, clock: FakeClock, shown: str, replier: ScriptedReplier | None = None
) -> tuple[RecordingFrontend, Engine, ReplierCall]:
    """One message's answer streaming `shown` into a posted draft: (front end, engine, call)."""
    frontend = streaming_frontend(clock)
    engine, call = await one_message_generating(store, clock, frontend, replier)
    call.stream(2, shown)
    await drafted(store, frontend)
    return frontend, engine, call


async def test_a_stop_mid_stream_ends_the_burst_with_what_was_shown(
    store: SqliteStore, clock: FakeClock
) -> None:
    frontend = streaming_frontend(clock)
    engine, call = await one_message_generating(store, clock, frontend)
    heard = Heard()
    engine.subscribe(heard)
    call.stream(3, "The plan is")
    await drafted(store, frontend)
    answer = await engine.click(await stop_click(store), admin=False)
    assert answer.acted and answer.notice is None
    await heard.next("looked", lambda fields: fields["superseded"] is True)
    await answered(engine, clock)
    assert heard.count("stopped") == 1
    assert call.cancelled  # the model stream was closed, not read to its end
    assert frontend.visible() == ["The plan is\n\n_(stopped by alice)_"]
    assert len(frontend.posts) == 1  # the draft, finished by the stopped answer: no second reply
    [row] = await store.replies(KEY.id)
    assert row.state == "sent" and row.covers_to_version == 2  # the message, then the stop
    [generation] = await store.generations(KEY.id)
    assert generation.outcome == "stopped" and generation.error == "stopped by alice"
    await check_invariants(store, [KEY.id], frontend=frontend)


async def test_a_message_after_the_stop_starts_a_new_burst(
    store: SqliteStore, clock: FakeClock
) -> None:
    replier = ScriptedReplier(hold=True)
    frontend, engine, _ = await drafting(store, clock, "Well", replier)
    await engine.click(await stop_click(store), admin=False)
    await answered(engine, clock)
    await engine.ingest(message(2, "try again, shorter"))
    second = await start_generation(engine, clock, replier, 1)
    assert second.texts == ["try again, shorter"]  # the stopped burst is answered, not repeated
    second.finish("Short.")
    await answered(engine, clock)
    assert frontend.visible() == ["Well\n\n_(stopped by alice)_", "Short."]
    assert len(replier.calls) == 2


async def test_the_same_click_delivered_twice_acts_once(
    store: SqliteStore, clock: FakeClock
) -> None:
    frontend, engine, _ = await drafting(store, clock, "Hmm")
    click = await stop_click(store, click_id="A1")
    first, again = await engine.click(click, admin=False), await engine.click(click, admin=False)
    assert (first.outcome, again.outcome) == ("stopped", "duplicate")
    assert again.notice is None  # the first delivery was answered already
    await answered(engine, clock)
    assert await store.current_version(KEY.id) == 2  # one stop, one version step
    assert [c.outcome for c in await store.clicks(KEY.id)] == ["stopped"]
    assert len(frontend.posts) == 1 and len(await store.replies(KEY.id)) == 1


async def test_a_second_persons_stop_is_refused_and_an_admins_is_not(
    store: SqliteStore, clock: FakeClock
) -> None:
    frontend, engine, call = await drafting(store, clock, "Going")
    refused = await engine.click(await stop_click(store, "u9", "mallory"), admin=False)
    assert refused.outcome == "refused" and refused.notice is not None
    assert await store.current_version(KEY.id) == 1 and not call.cancelled
    admin = await engine.click(await stop_click(store, "u7", "root"), admin=True)
    assert admin.acted
    await answered(engine, clock)
    assert frontend.visible() == ["Going\n\n_(stopped by root)_"]


async def test_a_stop_of_an_answer_that_ended_changes_nothing(
    store: SqliteStore, clock: FakeClock
) -> None:
    frontend, engine, call = await drafting(store, clock, "Done")
    late = await stop_click(store)  # pressed on the draft; delivered after the answer ended
    call.finish("Done, fully.")
    await answered(engine, clock)
    outcome = await engine.click(late, admin=False)
    assert outcome.outcome == "ended" and outcome.notice is not None
    assert frontend.visible() == ["Done, fully."]
    assert await store.current_version(KEY.id) == 1
    assert [c.outcome for c in await store.clicks(KEY.id)] == ["ended"]


async def test_a_stop_while_the_worker_is_gone_is_answered_by_the_next_without_a_model_call(
    store: SqliteStore, clock: FakeClock
) -> None:
    """The generating process died; the stop is decided all the same, and the worker that takes
    the lease over answers the burst as stopped: nothing of it is generated again."""
    replier = ScriptedReplier(hold=True)
    frontend, engine, _ = await drafting(store, clock, "Half", replier)
    await kill_9(engine, store)
    other = streaming_engine(store, clock, replier, frontend, owner="w2")
    assert (await other.click(await stop_click(store), admin=False)).acted
    await clock.advance(SETTINGS.lease_ttl_seconds + 1)
    await other.run_due()
    await other.idle()
    await step(clock, INTERVAL)
    await other.idle()
    assert len(replier.calls) == 1  # no generation after the stop
    assert frontend.visible() == ["_(stopped by alice)_"]
    assert len(frontend.posts) == 1
    [generation] = [g for g in await store.generations(KEY.id) if g.outcome == "stopped"]
    assert generation.error == "stopped by alice"


async def test_a_stop_past_the_deadline_still_cancels_the_stream(
    store: SqliteStore, clock: FakeClock
) -> None:
    """Past its deadline a generation is not superseded by newer input (G4), but a stop ends it."""
    frontend = streaming_frontend(clock)
    engine, call = await one_message_generating(store, clock, frontend)
    heard = Heard()
    engine.subscribe(heard)
    call.stream(2, "Long")
    await drafted(store, frontend)
    await clock.advance(SETTINGS.max_wait_seconds)
    await engine.click(await stop_click(store), admin=False)
    await heard.next("looked", lambda fields: fields["superseded"] is True)
    await answered(engine, clock)
    assert heard.count("stopped") == 1
    assert call.cancelled
    assert frontend.visible() == ["Long\n\n_(stopped by alice)_"]


async def test_explain_says_who_stopped_the_answer_and_when(
    store: SqliteStore, clock: FakeClock
) -> None:
    _, engine, _ = await drafting(store, clock, "Let me")
    clicked_at = clock.now()
    await engine.click(await stop_click(store, name="alice"), admin=False)
    await answered(engine, clock)
    lines = await explain_lines(store, KEY.id, clock.now())
    assert lines is not None
    stamp = datetime.fromtimestamp(clicked_at, UTC).strftime("%H:%M:%S.%f")[:-3]
    assert any(f"stopped by alice at {stamp}" in line for line in lines), lines
    assert any("generated v1: stopped by alice, stream cancelled" in line for line in lines), lines


async def test_explain_says_in_words_why_a_stop_changed_nothing(
    store: SqliteStore, clock: FakeClock
) -> None:
    """A refused, a second and a late stop read as the vote lines do: words, not outcome codes."""
    replier = ScriptedReplier(hold=True)
    frontend, engine, _ = await drafting(store, clock, "Let me", replier)
    await engine.click(await stop_click(store, "u9", "mallory"), admin=False)
    await engine.click(await stop_click(store, "u1", "alice"), admin=False)
    await engine.click(await stop_click(store, "u1", "alice"), admin=False)
    await answered(engine, clock)
    await engine.ingest(message(2, "and then?"))
    second = await start_generation(engine, clock, replier, 1)
    second.stream(2, "Then")
    await drafted(store, frontend, posts=2)
    late = await stop_click(store, "u1", "alice")  # pressed on the draft, delivered after the end
    second.finish("Then it ended.")
    await answered(engine, clock)
    await engine.click(late, admin=False)
    lines = await explain_lines(store, KEY.id, clock.now())
    assert lines is not None
    unchanged = [line[line.index("clicked") :] for line in lines if "nothing changed" in line]
    assert unchanged == [
        "clicked   stop by mallory: not one of the people it answers, nothing changed",
        "clicked   stop by alice: already stopped, nothing changed",
        "clicked   stop by alice: the answer had already ended, nothing changed",
    ]


async def test_the_app_lets_an_admin_from_the_config_stop_anyones_answer(
    store: SqliteStore, clock: FakeClock
) -> None:
    frontend = RecordingFrontend()
    app = make_app(store, clock, ScriptedReplier(), frontend, access={"admin_ids": ["test:u7"]})
    await store.ingest(message(1), clock.now(), Timing(1.5, 8.0))
    lease = await store.acquire_lease(KEY.id, "elsewhere", clock.now() + 2, 30.0)
    assert lease is not None
    assert await store.record_draft(KEY.id, lease.token, Draft("dkey", "m-1"))
    stranger = await app.click(await stop_click(store, "u9", "mallory"))
    assert stranger.outcome == "refused"
    assert (await app.click(await stop_click(store, "u7", "root"))).acted
