"""The engine, step by step, on a fake clock with a real SQLite store."""

from __future__ import annotations

import asyncio
import logging
from typing import Any

import pytest

from bot.core.engine import MODEL_BACKOFF_CAP_SECONDS
from bot.core.errors import (
    PermanentDeliveryError,
    PermanentReplierError,
    RetryableDeliveryError,
    RetryableReplierError,
)
from bot.core.events import IncomingMessage, MessageDeleted, MessageEdited, Reply
from storage.sqlite import SqliteStore
from testkit import RecordingFrontend, ScriptedReplier, check_invariants
from testkit.clock import FakeClock
from testkit.engine import shut_down
from tests.conftest import KEY, make_engine, message
from tests.heard import Heard


async def tick(engine, clock: FakeClock, seconds: float = 0.0) -> int:  # type: ignore[no-untyped-def]
    """Advance the fake clock, start due work, wait for it (no wall-clock debounce waits)."""
    if seconds:
        await clock.advance(seconds)
    started = await engine.run_due()
    await engine.idle()
    return started


async def test_three_quick_messages_get_one_generation_and_one_reply(
    store: SqliteStore, clock: FakeClock, frontend: RecordingFrontend
) -> None:
    replier = ScriptedReplier()
    engine = make_engine(store, clock, replier, frontend)
    for n in range(3):
        assert (await engine.ingest(message(n))).status == "accepted"
        await clock.advance(0.5)
    assert await tick(engine, clock) == 0  # last message at t=1.0: quiet until t=2.5
    assert await tick(engine, clock, 1.0) == 1
    assert [c.texts for c in replier.calls] == [["text 0", "text 1", "text 2"]]
    assert frontend.texts() == ["reply to: text 0 | text 1 | text 2"]
    [row] = await store.replies(KEY.id)
    assert (row.covers_from_version, row.covers_to_version, row.state) == (0, 3, "sent")
    assert (await store.conversation_state(KEY.id)).timer is None  # type: ignore[union-attr]
    await check_invariants(store, [KEY.id])


async def test_input_during_generation_cancels_the_stream_and_one_reply_covers_all(
    store: SqliteStore, clock: FakeClock, frontend: RecordingFrontend
) -> None:
    replier = ScriptedReplier(hold=True)
    engine = make_engine(store, clock, replier, frontend)
    await engine.ingest(message(1, "what is"))
    await clock.advance(1.5)
    await engine.run_due()
    first = await replier.next_call(0)
    first.stream(7)
    await engine.ingest(message(2, "the time?"))  # before the deadline: supersede
    await engine.idle()
    assert first.cancelled
    [superseded] = await store.generations(KEY.id)
    assert (superseded.outcome, superseded.usage.output_tokens) == ("superseded", 7)
    assert frontend.posts == []
    await clock.advance(1.5)
    await engine.run_due()
    second = await replier.next_call(1)
    assert second.texts == ["what is", "the time?"]
    second.finish("noon")
    await engine.idle()
    assert frontend.texts() == ["noon"]
    await check_invariants(store, [KEY.id])


async def test_an_endless_typer_gets_a_reply_by_the_deadline(
    store: SqliteStore, clock: FakeClock, frontend: RecordingFrontend
) -> None:
    engine = make_engine(store, clock, ScriptedReplier(), frontend)
    start = clock.now()
    posted_at: list[float] = []
    for n in range(20):  # one message a second, quiet is 1.5 s: the burst never goes quiet
        await engine.ingest(message(n))
        before = len(frontend.posts)
        await tick(engine, clock)
        if len(frontend.posts) > before:
            posted_at.append(clock.now() - start)
        await clock.advance(1.0)
    await tick(engine, clock, 2.0)
    rows = await store.replies(KEY.id)
    assert [(r.covers_from_version, r.covers_to_version) for r in rows] == [
        (0, 9),
        (9, 18),
        (18, 20),
    ]
    assert posted_at == [8.0, 17.0]  # max_wait after each burst's first message
    await check_invariants(store, [KEY.id])


async def test_input_after_the_deadline_does_not_cancel_and_forms_the_next_burst(
    store: SqliteStore, clock: FakeClock, frontend: RecordingFrontend
) -> None:
    replier = ScriptedReplier(hold=True)
    engine = make_engine(store, clock, replier, frontend)
    await engine.ingest(message(1, "one"))
    await clock.advance(8.0)  # the deadline
    await engine.run_due()
    first = await replier.next_call(0)
    heard = Heard()
    engine.subscribe(heard)
    await engine.ingest(message(2, "two"))
    looked = await heard.next("looked")  # the watch saw the newer input and decided
    assert looked == {"conversation": KEY.id, "superseded": False}
    assert not first.cancelled
    first.finish("answer one")
    await engine.idle()
    # the reply for version 1 kept the timer armed by version 2 (the seed's second bug)
    state = await store.conversation_state(KEY.id)
    assert state is not None and state.timer is not None and state.timer.armed_version == 2
    await clock.advance(1.5)
    await engine.run_due()
    second = await replier.next_call(1)
    assert second.texts == ["two"]
    assert [t.text for t in second.prompt.history] == ["alice: one", "answer one"]
    second.finish("answer two")
    await engine.idle()
    assert frontend.texts() == ["answer one", "answer two"]
    await check_invariants(store, [KEY.id])


async def test_edits_and_deletes_of_pending_messages_shape_the_burst(
    store: SqliteStore, clock: FakeClock, frontend: RecordingFrontend
) -> None:
    replier = ScriptedReplier()
    engine = make_engine(store, clock, replier, frontend)
    for n, text in enumerate(["helo", "oops", "world"]):
        await engine.ingest(message(n, text))
    await engine.ingest(MessageEdited(KEY, "m0", "hello"))
    await engine.ingest(MessageDeleted(KEY, "m1"))
    await tick(engine, clock, 1.5)
    assert [c.texts for c in replier.calls] == [["hello", "world"]]
    await engine.ingest(MessageEdited(KEY, "m2", "world!"))  # answered: history only
    assert await tick(engine, clock, 10) == 0
    assert len(replier.calls) == 1
    await check_invariants(store, [KEY.id])


async def test_a_burst_deleted_entirely_is_skipped_without_a_model_call(
    store: SqliteStore, clock: FakeClock, frontend: RecordingFrontend
) -> None:
    replier = ScriptedReplier()
    engine = make_engine(store, clock, replier, frontend)
    await engine.ingest(message(1))
    await engine.ingest(MessageDeleted(KEY, "m1"))
    await tick(engine, clock, 1.5)
    assert replier.calls == [] and frontend.posts == []
    [record] = await store.generations(KEY.id)
    assert record.outcome == "skipped"
    await check_invariants(store, [KEY.id])


async def test_the_same_message_delivered_twice_is_stored_once(
    store: SqliteStore, clock: FakeClock, frontend: RecordingFrontend
) -> None:
    replier = ScriptedReplier()
    engine = make_engine(store, clock, replier, frontend)
    statuses = [(await engine.ingest(message(1, "yes"))).status for _ in range(3)]
    assert statuses == ["accepted", "duplicate", "duplicate"]
    await engine.ingest(message(2, "yes"))  # same text, new id: a second message
    await tick(engine, clock, 1.5)
    assert [c.texts for c in replier.calls] == [["yes", "yes"]]
    assert len(frontend.posts) == 1


async def test_bot_messages_never_trigger_a_reply(
    store: SqliteStore, clock: FakeClock, frontend: RecordingFrontend
) -> None:
    engine = make_engine(store, clock, ScriptedReplier(), frontend)
    bot = IncomingMessage(KEY, "b1", "bot", "other-bot", "hello", author_is_bot=True)
    assert (await engine.ingest(bot)).status == "ignored"
    assert await tick(engine, clock, 10) == 0
    assert await store.conversation_state(KEY.id) is None


async def test_a_stalled_worker_whose_lease_was_taken_over_cannot_commit(
    store: SqliteStore, clock: FakeClock, frontend: RecordingFrontend
) -> None:
    slow = ScriptedReplier(hold=True)
    stalled = make_engine(store, clock, slow, frontend, owner="stalled")
    await stalled.ingest(message(1))
    await clock.advance(1.5)
    await stalled.run_due()
    call = await slow.next_call(0)
    clock.jump(31.0)  # the process froze past its lease TTL without renewing
    rescuer = make_engine(store, clock, ScriptedReplier(), frontend, owner="rescuer")
    assert await tick(rescuer, clock) == 1
    assert frontend.texts() == ["reply to: text 1"]
    call.finish("late answer")
    await stalled.idle()
    assert frontend.texts() == ["reply to: text 1"]
    outcomes = sorted(g.outcome for g in await store.generations(KEY.id))
    assert outcomes in (["discarded", "posted"], ["lease_lost", "posted"])
    await check_invariants(store, [KEY.id])


class HangingFrontend(RecordingFrontend):
    """Posts, then never returns: the process dies before it can record the post."""

    def __init__(self, platform: RecordingFrontend) -> None:
        super().__init__(platform.platform)
        self.platform_side = platform

    async def deliver(self, reply: Reply) -> list[str]:
        await self.platform_side.deliver(reply)
        await asyncio.Event().wait()
        return []


async def test_crash_between_commit_and_post_redelivers_with_the_same_key(
    store: SqliteStore, clock: FakeClock, frontend: RecordingFrontend
) -> None:
    doomed = make_engine(store, clock, ScriptedReplier(), HangingFrontend(frontend), owner="a")
    await doomed.ingest(message(1))
    await clock.advance(1.5)
    await doomed.run_due()
    for _ in range(100):
        if frontend.attempts:
            break
        await asyncio.sleep(0.01)
    doomed_tasks = [*doomed._workers.values(), *doomed.outbox.running]
    for task in doomed_tasks:
        task.cancel()  # kill -9: no shutdown, the claim stays until it expires
    await asyncio.gather(*doomed_tasks, return_exceptions=True)
    [row] = await store.replies(KEY.id)
    assert row.state == "pending"

    survivor = make_engine(store, clock, ScriptedReplier(), frontend, owner="b")
    assert await survivor.outbox.deliver_due() == 0  # the claim has not expired yet
    await clock.advance(31.0)
    assert await survivor.outbox.deliver_due() == 1
    await survivor.idle()
    assert frontend.attempts == ["r1", "r1"]  # same idempotency key both times
    assert len(frontend.posts) == 1
    assert (await store.replies(KEY.id))[0].state == "sent"


async def test_model_errors_retry_with_backoff_then_answer(
    store: SqliteStore, clock: FakeClock, frontend: RecordingFrontend
) -> None:
    replier = ScriptedReplier()
    replier.failures = [RetryableReplierError("429"), RetryableReplierError("529")]
    engine = make_engine(store, clock, replier, frontend, backoff_jitter=0.0)
    await engine.ingest(message(1))
    await tick(engine, clock, 1.5)
    assert await tick(engine, clock, 1.9) == 0  # first backoff is 2 s
    assert await tick(engine, clock, 0.1) == 1
    assert await tick(engine, clock, 3.9) == 0  # then 4 s
    assert await tick(engine, clock, 0.1) == 1
    assert len(replier.calls) == 3 and frontend.texts() == ["reply to: text 1"]
    outcomes = [g.outcome for g in await store.generations(KEY.id)]
    assert outcomes == ["failed", "failed", "posted"]


async def test_model_retries_back_off_no_longer_than_the_cap_however_many_attempts(
    store: SqliteStore, clock: FakeClock, frontend: RecordingFrontend
) -> None:
    replier = ScriptedReplier()
    replier.failures = [RetryableReplierError("529 overloaded") for _ in range(14)]
    engine = make_engine(
        store, clock, replier, frontend, model_max_attempts=1000, backoff_jitter=0.0
    )
    await engine.ingest(message(1))
    await tick(engine, clock, 1.5)
    waits = []
    for _ in range(14):  # each failure re-arms; the last retry answers
        retry_at = await store.next_due_at(clock.now())
        assert retry_at is not None
        waits.append(retry_at - clock.now())
        assert await tick(engine, clock, retry_at - clock.now()) == 1
    cap = MODEL_BACKOFF_CAP_SECONDS
    assert waits == [2.0, 4.0, 8.0, 16.0, 32.0, 64.0, 128.0, 256.0] + [cap] * 6
    assert frontend.texts() == ["reply to: text 1"] and len(replier.calls) == 15


async def test_a_permanent_model_error_posts_the_failure_message_once(
    store: SqliteStore, clock: FakeClock, frontend: RecordingFrontend
) -> None:
    replier = ScriptedReplier()
    replier.failures = [PermanentReplierError("400 bad request")]
    engine = make_engine(store, clock, replier, frontend)
    await engine.ingest(message(1))
    await tick(engine, clock, 1.5)
    await tick(engine, clock, 60)
    assert len(replier.calls) == 1
    assert frontend.texts() == ["sorry, try again"]
    await check_invariants(store, [KEY.id])
    # the message stays in history for the next burst
    await engine.ingest(message(2))
    await tick(engine, clock, 1.5)
    assert [t.text for t in replier.calls[1].prompt.history] == ["alice: text 1"]


async def test_after_max_attempts_the_failure_message_is_posted(
    store: SqliteStore, clock: FakeClock, frontend: RecordingFrontend
) -> None:
    replier = ScriptedReplier()
    replier.failures = [RetryableReplierError("overloaded")] * 3
    engine = make_engine(store, clock, replier, frontend, model_max_attempts=3)
    await engine.ingest(message(1))
    for _ in range(6):
        await tick(engine, clock, 5)
    assert len(replier.calls) == 3
    assert frontend.texts() == ["sorry, try again"]
    await check_invariants(store, [KEY.id])


async def test_delivery_retries_with_backoff_and_gives_up_on_permanent_errors(
    store: SqliteStore, clock: FakeClock, frontend: RecordingFrontend
) -> None:
    frontend.failures = [RetryableDeliveryError("502"), RetryableDeliveryError("429", 10.0)]
    engine = make_engine(store, clock, ScriptedReplier(), frontend, delivery_backoff_seconds=1.0)
    await engine.ingest(message(1))
    await tick(engine, clock, 1.5)
    retry_at = await store.next_outbox_at(["test"], clock.now())
    assert retry_at is not None and clock.now() + 0.5 <= retry_at <= clock.now() + 1.0  # jitter
    await clock.advance(1.0)
    await engine.outbox.deliver_due()
    await engine.idle()
    retry_at = await store.next_outbox_at(["test"], clock.now())
    assert retry_at == clock.now() + 10.0  # Retry-After honoured
    await clock.advance(10.0)
    await engine.outbox.deliver_due()
    await engine.idle()
    assert len(frontend.posts) == 1 and frontend.attempts == ["r1"] * 3

    frontend.failures = [PermanentDeliveryError("channel_not_found")]
    await engine.ingest(message(2))
    await tick(engine, clock, 1.5)
    states = [r.state for r in await store.replies(KEY.id)]
    assert states == ["sent", "failed"]


async def test_transient_delivery_failures_are_retried_until_the_horizon_then_fail(
    store: SqliteStore, clock: FakeClock, frontend: RecordingFrontend
) -> None:
    frontend.failures = [RetryableDeliveryError("503") for _ in range(1000)]
    engine = make_engine(store, clock, ScriptedReplier(), frontend, delivery_give_up_hours=0.5)
    await engine.ingest(message(1))
    await tick(engine, clock, 1.5)
    first_failure = clock.now()
    waits = []
    while (await store.replies(KEY.id))[0].state == "pending":
        retry_at = await store.next_outbox_at(["test"], clock.now())
        assert retry_at is not None
        waits.append(retry_at - clock.now())
        await clock.advance(retry_at - clock.now())
        await engine.outbox.deliver_due()
        await engine.idle()
    [row] = await store.replies(KEY.id)
    assert clock.now() - first_failure >= 1800 and max(waits) <= 30.0  # capped backoff
    assert row.state == "failed" and row.last_error == "gave up after 0.5 h of failures: 503"
    assert row.attempts == len(frontend.attempts) > 60 and frontend.posts == []


async def test_generation_slots_limit_the_leases_a_process_takes(
    store: SqliteStore, clock: FakeClock, frontend: RecordingFrontend
) -> None:
    replier = ScriptedReplier(hold=True)
    engine = make_engine(store, clock, replier, frontend, max_concurrent_generations=2)
    keys = [KEY.__class__("test", "w1", f"c{i}") for i in range(3)]
    for n, key in enumerate(keys):
        await engine.ingest(message(n, key=key))
    await clock.advance(1.5)
    assert await engine.run_due() == 2
    await replier.next_call(1)
    held = [(await store.conversation_state(k.id)).lease_owner for k in keys]  # type: ignore[union-attr]
    assert sorted(held, key=str) == [None, "w1", "w1"]
    for call in replier.calls:
        call.finish()
    await engine.idle()
    assert await engine.run_due() == 1
    (await replier.next_call(2)).finish()
    await engine.idle()
    assert len(frontend.posts) == 3


async def test_shutdown_releases_leases_so_another_process_need_not_wait(
    store: SqliteStore, clock: FakeClock, frontend: RecordingFrontend
) -> None:
    replier = ScriptedReplier(hold=True)
    engine = make_engine(store, clock, replier, frontend, owner="leaving")
    await engine.ingest(message(1))
    await clock.advance(1.5)
    await engine.run_due()
    call = await replier.next_call(0)
    await shut_down(engine)
    assert call.cancelled
    state = await store.conversation_state(KEY.id)
    assert state is not None and state.lease_owner is None and state.timer is not None
    other = make_engine(store, clock, ScriptedReplier(), frontend, owner="staying")
    assert await tick(other, clock) == 1  # immediately, not after the TTL
    assert len(frontend.posts) == 1


async def test_a_lease_held_elsewhere_backs_off_without_dropping_the_timer(
    store: SqliteStore, clock: FakeClock, frontend: RecordingFrontend
) -> None:
    engine = make_engine(store, clock, ScriptedReplier(), frontend, busy_retry_seconds=1.0)
    await engine.ingest(message(1))
    await clock.advance(1.5)
    lease = await store.acquire_lease(KEY.id, "elsewhere", clock.now(), 30.0)
    assert lease is not None
    await engine.ingest(message(2))  # re-arms on the natural schedule while "elsewhere" holds it
    await clock.advance(1.5)
    assert await tick(engine, clock) == 1  # tried, lost the race, backed off
    assert await store.next_due_at(clock.now()) == clock.now() + 1.0
    await store.release_lease(KEY.id, lease.token)
    await tick(engine, clock, 1.0)
    assert frontend.texts() == ["reply to: text 1 | text 2"]


async def test_ingest_never_waits_for_the_model(
    store: SqliteStore, clock: FakeClock, frontend: RecordingFrontend
) -> None:
    """G7: while a generation hangs, arrivals for it and for others are stored and acked."""
    replier = ScriptedReplier(hold=True)
    engine = make_engine(store, clock, replier, frontend, max_wait_seconds=1.5)
    await engine.ingest(message(1))
    await clock.advance(1.5)
    await engine.run_due()
    call = await replier.next_call(0)  # never finished by this test until the end
    other = KEY.__class__("test", "w1", "elsewhere")
    results = await asyncio.wait_for(
        asyncio.gather(engine.ingest(message(2)), engine.ingest(message(3, key=other))), 2.0
    )
    assert [r.status for r in results] == ["accepted", "accepted"]
    assert await store.current_version(other.id) == 1
    call.finish()
    await engine.idle()


class BrokenIndicatorFrontend(RecordingFrontend):
    """A front end whose indicator call fails before it is even awaited."""

    def show_busy(self, *args: object) -> Any:  # type: ignore[override]
        raise TypeError("an indicator that cannot be called")


async def test_an_indicator_that_cannot_be_called_never_fails_the_delivery(
    store: SqliteStore, clock: FakeClock, caplog: pytest.LogCaptureFixture
) -> None:
    frontend = BrokenIndicatorFrontend()
    replier = ScriptedReplier(hold=True)
    engine = make_engine(store, clock, replier, frontend)
    await engine.ingest(message(1))
    await clock.advance(1.5)
    await engine.run_due()
    await replier.next_call(0)
    await clock.advance(1.0)  # the indicator goes on (and fails) while the model writes
    await engine.indicator.idle()
    replier.calls[0].finish("answer")
    await engine.idle()
    assert [p.text for p in frontend.posts] == ["answer"]
    [reply] = await store.replies(KEY.id)
    assert reply.state == "sent"
    assert [r.getMessage() for r in caplog.records if r.levelno >= logging.ERROR] == []
    await shut_down(engine)
