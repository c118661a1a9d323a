"""Streaming (G10): one visible message per burst, edited as it grows, on a fake clock with a real
SQLite store and a recording front end that counts every raw post (edits are not posts)."""

from __future__ import annotations

import asyncio
import itertools
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

import pytest

from bot.core.engine import Engine
from bot.core.errors import PermanentReplierError, RetryableDeliveryError
from bot.core.events import ConversationKey, Draft, MessageDeleted
from bot.core.settings import ChannelSettings
from bot.core.streaming import WAITING
from storage.sqlite import SqliteStore
from testkit import RecordingFrontend, ScriptedReplier, check_invariants
from testkit.clock import FakeClock
from tests.clock_steps import step
from tests.conftest import KEY, SETTINGS, make_engine, message
from tests.heard import Heard

INTERVAL = 1.0


def streaming_engine(*args: Any, **overrides: Any) -> Engine:
    return make_engine(*args, **{"streaming": True, **overrides})


def streaming_frontend(clock: FakeClock, parts: int = 1) -> RecordingFrontend:
    return RecordingFrontend(drafts=True, clock=clock, parts=parts)


async def until(predicate: Callable[[], bool], within: float = 5.0) -> None:
    """Bounded wait on the real loop for the store's thread and the tasks to catch up."""
    async with asyncio.timeout(within):
        while not predicate():  # noqa: ASYNC110
            await asyncio.sleep(0.005)


async def drafted(store: SqliteStore, frontend: RecordingFrontend, posts: int = 1) -> None:
    """Wait until the draft is posted and its message id recorded."""
    await until(lambda: len(frontend.posts) == posts)
    async with asyncio.timeout(5.0):
        while (draft := await store.draft(KEY.id)) is None or not draft.message_id:  # noqa: ASYNC110
            await asyncio.sleep(0.005)


async def answered(engine: Engine, clock: FakeClock) -> None:
    """The generation ended: the final edit keeps the interval after the stream's last call."""
    await step(clock, INTERVAL)
    await engine.idle()


async def start_generation(engine: Engine, clock: FakeClock, replier: ScriptedReplier, n: int):  # type: ignore[no-untyped-def]
    await clock.advance(1.5)
    await engine.run_due()
    return await replier.next_call(n)


async def one_message_generating(
    store: SqliteStore,
    clock: FakeClock,
    frontend: RecordingFrontend,
    replier: ScriptedReplier | None = None,
    **overrides: Any,
) -> tuple[Engine, Any]:
    """A burst of one message whose generation has started: the engine, and the model call the
    test drives (on `replier`, a held one by default)."""
    replier = replier or ScriptedReplier(hold=True)
    engine = streaming_engine(store, clock, replier, frontend, **overrides)
    await engine.ingest(message(1))
    return engine, await start_generation(engine, clock, replier, 0)


@pytest.fixture
async def two_stores(tmp_path: Path) -> AsyncIterator[tuple[SqliteStore, SqliteStore]]:
    """Two processes' stores on one database file: the one that dies, the one that takes over."""
    path = str(tmp_path / "bot.db")
    stores = SqliteStore(path), SqliteStore(path)
    for store in stores:
        await store.open()
    yield stores
    for store in stores:
        await store.close()


async def kill_9(engine: Engine, store: SqliteStore) -> None:
    """The process dies mid-generation: its workers stop and it releases nothing."""

    async def killed(conversation_id: str, token: int) -> None:
        return None

    store.release_lease = killed  # type: ignore[method-assign]
    for task in list(engine._workers.values()):
        task.cancel()
    await asyncio.gather(*engine._workers.values(), return_exceptions=True)


async def test_a_burst_streams_into_one_message_that_ends_as_the_answer(
    store: SqliteStore, clock: FakeClock
) -> None:
    frontend = streaming_frontend(clock)
    replier = ScriptedReplier(hold=True)
    engine = streaming_engine(store, clock, replier, frontend)
    for n, text in enumerate(["so", "about that", "plan?"]):
        await engine.ingest(message(n, text))
        await clock.advance(0.3)
    call = await start_generation(engine, clock, replier, 0)
    assert call.texts == ["so", "about that", "plan?"]
    assert frontend.posts == []  # nothing shown before the model wrote anything
    call.stream(2, "The plan")
    await step(clock, INTERVAL)
    await drafted(store, frontend)
    assert frontend.visible() == ["The plan"]
    call.stream(3, " is simple:")
    await step(clock, INTERVAL)
    await until(lambda: len(frontend.edits) == 1)
    assert frontend.visible() == ["The plan is simple:"]
    call.finish("The plan is simple: ship it.")
    await answered(engine, clock)
    assert frontend.visible() == ["The plan is simple: ship it."]
    assert len(frontend.posts) == 1  # one raw post: the draft; the rest were edits
    [row] = await store.replies(KEY.id)
    assert row.state == "sent" and row.draft is not None
    assert row.platform_message_ids == (frontend.posts[0].message_id,)
    assert await store.draft(KEY.id) is None  # the next burst starts a draft of its own
    await check_invariants(store, [KEY.id], frontend=frontend)


async def test_the_first_word_is_shown_at_once_then_edits_keep_the_interval(
    store: SqliteStore, clock: FakeClock
) -> None:
    frontend = streaming_frontend(clock)
    engine, call = await one_message_generating(store, clock, frontend)
    started = clock.now()
    call.stream(1, "Sure")
    await drafted(store, frontend)  # the clock has not moved: no pacing tick before it
    assert clock.now() == started and frontend.visible() == ["Sure"]
    call.stream(1, ",")
    call.stream(1, " here")
    await step(clock, INTERVAL)
    await until(lambda: frontend.visible() == ["Sure, here"])
    assert [e.at for e in frontend.edits] == [started + INTERVAL]
    call.finish("Sure, here it is.")
    await answered(engine, clock)
    assert frontend.visible() == ["Sure, here it is."] and len(frontend.posts) == 1


async def test_edits_are_never_closer_than_the_interval(
    store: SqliteStore, clock: FakeClock
) -> None:
    frontend = streaming_frontend(clock)
    engine, call = await one_message_generating(
        store, clock, frontend, streaming_interval_seconds=INTERVAL
    )
    for n in range(40):  # a token every 0.25 s for 10 s
        call.stream(1, f"w{n} ")
        await clock.advance(0.25)
        await asyncio.sleep(0.01)
    call.finish("done")
    await answered(engine, clock)
    times = [e.at for e in frontend.edits]
    assert len(times) >= 5  # it did stream
    assert all(later - earlier >= INTERVAL for earlier, later in itertools.pairwise(times))
    assert frontend.visible() == ["done"] and len(frontend.posts) == 1


async def test_a_stream_that_stalled_past_its_fence_leaves_the_draft_alone(
    store: SqliteStore, clock: FakeClock
) -> None:
    """A superseded generation's "still reading" edit waits for the interval; if the process
    stalls meanwhile past the lease's fence, another worker may own the draft (and its reply may
    have finished it): the late edit is not made."""
    frontend = streaming_frontend(clock)
    replier = ScriptedReplier(hold=True)
    engine = streaming_engine(store, clock, replier, frontend)
    heard = Heard()
    engine.subscribe(heard)
    await engine.ingest(message(1, "what is"))
    first = await start_generation(engine, clock, replier, 0)
    first.stream(3, "It is a")
    await drafted(store, frontend)  # posted at the first word, at this time on the clock
    edit_due = clock.now() + INTERVAL
    await engine.ingest(message(2, "the time?"))
    await heard.next("looked", lambda fields: fields["superseded"] is True)
    await until(lambda: edit_due in clock.waiting())  # the "still reading" edit waits
    clock.jump(SETTINGS.lease_ttl_seconds)  # a stall: the fence ends before it wakes
    await clock.advance(0.0)
    await engine.idle()
    assert WAITING not in [edit.text for edit in frontend.edits]
    assert frontend.visible() == ["It is a"]


async def test_a_supersede_mid_stream_ends_with_one_message_covering_both_bursts(
    store: SqliteStore, clock: FakeClock
) -> None:
    frontend = streaming_frontend(clock)
    replier = ScriptedReplier(hold=True)
    engine = streaming_engine(store, clock, replier, frontend)
    await engine.ingest(message(1, "what is"))
    first = await start_generation(engine, clock, replier, 0)
    first.stream(3, "It is a")
    await step(clock, INTERVAL)
    await drafted(store, frontend)
    await engine.ingest(message(2, "the time?"))  # typing again while it grows
    await step(clock, INTERVAL)  # the "still reading" edit waits for the interval
    await until(lambda: frontend.visible() == [WAITING])
    await engine.idle()
    assert first.cancelled
    [superseded] = await store.generations(KEY.id)
    assert (superseded.outcome, superseded.usage.output_tokens) == ("superseded", 3)
    second = await start_generation(engine, clock, replier, 1)
    assert second.texts == ["what is", "the time?"]
    second.stream(2, "It is noon")
    await step(clock, INTERVAL)
    await until(lambda: frontend.visible() == ["It is noon"])
    second.finish("It is noon, for both questions.")
    await answered(engine, clock)
    assert frontend.visible() == ["It is noon, for both questions."]
    assert len(frontend.posts) == 1  # the same message all along
    [row] = await store.replies(KEY.id)
    assert (row.covers_from_version, row.covers_to_version) == (0, 2)
    await check_invariants(store, [KEY.id], frontend=frontend)


async def test_a_takeover_after_a_crash_mid_stream_edits_the_same_message(
    two_stores: tuple[SqliteStore, SqliteStore], clock: FakeClock
) -> None:
    doomed_store, survivor_store = two_stores
    frontend = streaming_frontend(clock)
    replier = ScriptedReplier(hold=True)
    doomed = streaming_engine(doomed_store, clock, replier, frontend, owner="a")
    await doomed.ingest(message(1, "hello"))
    call = await start_generation(doomed, clock, replier, 0)
    call.stream(2, "Hi the")
    await step(clock, INTERVAL)
    await drafted(survivor_store, frontend)
    await kill_9(doomed, doomed_store)

    survivor_replier = ScriptedReplier(hold=True)
    survivor = streaming_engine(survivor_store, clock, survivor_replier, frontend, owner="b")
    await clock.advance(31.0)  # the lease expires; its timer fires for the takeover
    await survivor.run_due()
    again = await survivor_replier.next_call(0)
    again.stream(2, "Hi there")
    await step(clock, INTERVAL)
    await until(lambda: frontend.visible() == ["Hi there"])
    again.finish("Hi there, welcome.")
    await answered(survivor, clock)
    assert frontend.visible() == ["Hi there, welcome."]
    assert len(frontend.posts) == 1
    await check_invariants(survivor_store, [KEY.id], frontend=frontend)


class LostResponse(RecordingFrontend):
    """The draft's post lands, but its response never comes back (a crash, a cut connection)."""

    async def post_draft(self, key: ConversationKey, draft: Draft, text: str) -> str:
        await super().post_draft(key, draft, text)
        await asyncio.Event().wait()
        raise AssertionError("unreachable")


async def test_a_draft_posted_but_never_recorded_is_found_by_its_key(
    two_stores: tuple[SqliteStore, SqliteStore], clock: FakeClock
) -> None:
    doomed_store, survivor_store = two_stores
    frontend = streaming_frontend(clock)
    lossy = LostResponse(drafts=True, clock=clock)
    lossy.posts = frontend.posts  # one platform, two connections to it
    replier = ScriptedReplier(hold=True)
    doomed = streaming_engine(doomed_store, clock, replier, lossy, owner="a")
    await doomed.ingest(message(1, "hello"))
    call = await start_generation(doomed, clock, replier, 0)
    call.stream(2, "Hi")
    await step(clock, INTERVAL)
    await until(lambda: len(frontend.posts) == 1)
    draft = await survivor_store.draft(KEY.id)
    assert draft is not None and draft.message_id is None  # recorded before the post, no id
    await kill_9(doomed, doomed_store)

    survivor = streaming_engine(survivor_store, clock, ScriptedReplier(), frontend, owner="b")
    await clock.advance(31.0)
    await survivor.run_due()
    await survivor.idle()
    assert len(frontend.posts) == 1  # found by its key, not posted again
    assert frontend.visible() == ["reply to: hello"]
    await check_invariants(survivor_store, [KEY.id], frontend=frontend)


async def test_a_permanent_model_failure_edits_the_draft_to_the_failure_message(
    store: SqliteStore, clock: FakeClock
) -> None:
    frontend = streaming_frontend(clock)
    engine, call = await one_message_generating(store, clock, frontend)
    call.stream(2, "Half an ans")
    await step(clock, INTERVAL)
    await drafted(store, frontend)
    call.fail(PermanentReplierError("refused"))
    await answered(engine, clock)
    assert frontend.visible() == ["sorry, try again"]
    assert len(frontend.posts) == 1
    await check_invariants(store, [KEY.id], frontend=frontend)


async def test_a_burst_entirely_deleted_deletes_its_draft(
    store: SqliteStore, clock: FakeClock
) -> None:
    frontend, replier = streaming_frontend(clock), ScriptedReplier(hold=True)
    engine, call = await one_message_generating(store, clock, frontend, replier)
    call.stream(2, "Let me")
    await step(clock, INTERVAL)
    await drafted(store, frontend)
    await engine.ingest(MessageDeleted(KEY, "m1"))
    await step(clock, INTERVAL)
    await engine.idle()
    await clock.advance(1.5)
    await engine.run_due()
    await engine.idle()
    assert frontend.visible() == []
    assert frontend.deleted == {frontend.posts[0].message_id}
    assert await store.draft(KEY.id) is None
    assert await store.replies(KEY.id) == []
    assert len(replier.calls) == 1
    await check_invariants(store, [KEY.id], frontend=frontend)


async def test_a_long_answer_ends_as_the_draft_plus_follow_up_parts(
    store: SqliteStore, clock: FakeClock
) -> None:
    frontend = streaming_frontend(clock, parts=3)
    engine, call = await one_message_generating(store, clock, frontend)
    call.stream(2, "a" * 40)
    await step(clock, INTERVAL)
    await drafted(store, frontend)
    call.finish("a" * 30 + "b" * 30 + "c" * 30)
    await answered(engine, clock)
    assert frontend.visible() == ["a" * 30, "b" * 30, "c" * 30]
    assert [p.part for p in frontend.posts] == [0, 1, 2]
    await check_invariants(store, [KEY.id], frontend=frontend)


async def test_a_rate_limited_edit_waits_out_its_retry_after(
    store: SqliteStore, clock: FakeClock
) -> None:
    frontend = streaming_frontend(clock)
    frontend.edit_failures = [RetryableDeliveryError("429", retry_after=3.0)]
    engine, call = await one_message_generating(store, clock, frontend)
    call.stream(1, "One")
    await step(clock, INTERVAL)
    await drafted(store, frontend)
    call.stream(1, " two")
    await step(clock, INTERVAL)  # this edit is rate limited for 3 s
    retry_at = clock.now() + 3.0
    await until(lambda: frontend.edit_failures == [])
    call.stream(1, " three")
    await step(clock, INTERVAL)
    # the stream sleeps until the Retry-After has passed: nothing edits before the clock gets there
    await until(lambda: retry_at in clock.waiting())
    assert frontend.edits == []
    await clock.advance(2.0)
    await until(lambda: frontend.visible() == ["One two three"])
    call.finish("One two three four.")
    await answered(engine, clock)
    assert frontend.visible() == ["One two three four."]
    await check_invariants(store, [KEY.id], frontend=frontend)


async def test_streaming_off_posts_the_answer_once_complete(
    store: SqliteStore, clock: FakeClock
) -> None:
    frontend = streaming_frontend(clock)
    engine, call = await one_message_generating(store, clock, frontend, streaming=False)
    call.stream(2, "partial")
    for _ in range(3):
        await step(clock, INTERVAL)
    call.finish("whole")
    await answered(engine, clock)
    # every raw post is recorded: a draft posted (and replaced) on the way would be in `posts`
    assert [post.text for post in frontend.posts] == ["whole"] and frontend.edits == []
    assert frontend.visible() == ["whole"]
    assert (await store.replies(KEY.id))[0].draft is None


async def test_a_channel_can_turn_streaming_off(store: SqliteStore, clock: FakeClock) -> None:
    frontend = streaming_frontend(clock)
    replier = ScriptedReplier(hold=True)
    quiet = ChannelSettings(KEY.platform, KEY.channel, {"streaming": False})
    engine = streaming_engine(store, clock, replier, frontend, channels=(quiet,))
    await engine.ingest(message(1))
    call = await start_generation(engine, clock, replier, 0)
    call.stream(2, "partial")
    for _ in range(3):
        await step(clock, INTERVAL)
    call.finish("whole")
    await engine.idle()
    assert [post.text for post in frontend.posts] == ["whole"] and frontend.edits == []
    assert frontend.visible() == ["whole"]
