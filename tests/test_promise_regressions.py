"""Regressions of the delivery issue: each test failed before its fix (G1, G4, G9)."""

from __future__ import annotations

import asyncio

from bot.core.errors import RetryableDeliveryError, StoreError
from bot.core.events import ConversationKey, Reply
from bot.core.frontend import Host
from storage.sqlite import SqliteStore
from testkit import RecordingFrontend, ScriptedReplier
from testkit.clock import FakeClock
from tests.conftest import KEY, SETTINGS, make_engine, make_serving, message


async def test_a_store_error_while_watching_cancels_the_stream(
    store: SqliteStore, clock: FakeClock, frontend: RecordingFrontend
) -> None:
    """The watch failing (a busy database) must not leave the model stream running, unbilled to
    any generation slot."""
    replier = ScriptedReplier(hold=True)
    engine = make_engine(store, clock, replier, frontend)
    await engine.ingest(message(1))
    await clock.advance(1.5)
    await engine.run_due()
    call = await replier.next_call(0)

    async def busy(conversation_id: str) -> int:
        raise StoreError("database is locked")

    store.current_version = busy  # type: ignore[method-assign]
    await engine.ingest(message(2))  # the watch looks at the version at once, and fails
    await asyncio.wait_for(engine.idle(), 5.0)
    assert call.cancelled
    assert engine.busy == 0


async def test_input_after_the_deadline_during_a_generation_does_not_spin_the_scheduler(
    store: SqliteStore, clock: FakeClock, frontend: RecordingFrontend
) -> None:
    """The newer message's timer is due at once (its deadline passed), but this process holds
    the conversation: waking for it again and again would burn a core until the generation ends."""
    replier = ScriptedReplier(hold=True)
    serving = make_serving(store, clock, replier, frontend)
    engine, scheduler = serving.engine, serving.scheduler
    await engine.ingest(message(1, "one"))
    await clock.advance(8.0)  # the deadline
    await engine.run_due()
    call = await replier.next_call(0)
    await engine.ingest(message(2, "two"))
    state = await store.conversation_state(KEY.id)
    assert state is not None and state.timer is not None and state.timer.due_at <= clock.now()
    wanted = await scheduler.tick()
    assert wanted >= clock.now() + engine.settings.poll_seconds
    call.finish()
    await engine.idle()
    after = await store.conversation_state(KEY.id)
    assert after is not None and after.timer is not None
    poll = clock.now() + engine.settings.poll_seconds
    assert await scheduler.tick() == min(after.timer.due_at, poll)  # its timer counts again


async def test_a_slow_platform_gets_a_multi_part_reply_exactly_once_in_order(
    store: SqliteStore, clock: FakeClock
) -> None:
    """Every part takes 0.8 × the TTL to post, so the reply takes far longer than one claim; two
    processes sweep the outbox meanwhile. The platform must see each part once, in order."""
    ttl = SETTINGS.lease_ttl_seconds
    platform = RecordingFrontend(parts=4, post_seconds=0.8 * ttl, clock=clock)
    a = make_engine(store, clock, ScriptedReplier(), platform, owner="a")
    b = make_engine(store, clock, ScriptedReplier(), platform, owner="b")
    await a.ingest(message(1))
    await clock.advance(1.5)
    await a.run_due()
    for _ in range(int(6 * ttl)):
        await clock.advance(1.0)
        await a.outbox.deliver_due()
        await b.outbox.deliver_due()
    await a.idle()
    await b.idle()
    assert platform.replies() == {"r1": [0, 1, 2, 3]}
    [row] = await store.replies(KEY.id)
    assert row.state == "sent"


async def test_a_reply_held_back_by_retry_after_is_not_overtaken(
    store: SqliteStore, clock: FakeClock, frontend: RecordingFrontend
) -> None:
    """G9: the next burst's reply waits for the one a 429 holds back; it never goes first."""
    engine = make_engine(store, clock, ScriptedReplier(), frontend)
    frontend.failures.append(RetryableDeliveryError("429 ratelimited", retry_after=60.0))
    await engine.ingest(message(1, "first"))
    await clock.advance(1.5)
    await engine.run_due()
    await engine.idle()
    assert frontend.posts == []
    await engine.ingest(message(2, "second"))
    await clock.advance(1.5)
    await engine.run_due()
    await engine.idle()
    await engine.outbox.deliver_due()
    await engine.idle()
    assert frontend.posts == []  # still held back: the first reply's Retry-After has not passed
    await clock.advance(60.0)
    while await engine.outbox.deliver_due():
        await engine.idle()
    assert frontend.texts() == ["reply to: first", "reply to: second"]


class TwoPartPlatform:
    """A test platform that posts each reply as two parts; no indicator, nothing to connect."""

    platform = "test"

    async def show_busy(self, key: ConversationKey, busy: bool, message_id: str) -> None:
        return None

    async def start(self, host: Host) -> None:
        return None

    async def stop(self) -> None:
        return None


class StallingPlatform(TwoPartPlatform):
    """Posts a two-part reply; the first delivery stalls between its parts until resumed (a
    process paused by the OS), as a real deliverer can anywhere."""

    def __init__(self) -> None:
        self.posts: list[tuple[str, int]] = []
        self.stalled = asyncio.Event()
        self.resume = asyncio.Event()

    async def deliver(self, reply: Reply) -> list[str]:
        for part in range(2):
            if reply.attempt > 1 and (reply.id, part) in self.posts:
                continue  # read back: the platform shows this part already
            if part == 1 and reply.attempt == 1:
                self.stalled.set()
                await self.resume.wait()
            reply.fence.check()
            self.posts.append((reply.id, part))
        return [f"{reply.id}-{part}" for part in range(2)]


async def test_a_deliverer_that_stalled_past_its_claim_stops_before_its_next_part(
    store: SqliteStore, clock: FakeClock
) -> None:
    platform = StallingPlatform()
    a = make_engine(store, clock, ScriptedReplier(), platform, owner="a")  # type: ignore[arg-type]
    b = make_engine(store, clock, ScriptedReplier(), platform, owner="b")  # type: ignore[arg-type]
    await a.ingest(message(1))
    await clock.advance(1.5)
    await a.run_due()
    await asyncio.wait_for(platform.stalled.wait(), 5.0)
    clock.jump(SETTINGS.lease_ttl_seconds + 5)  # paused: nothing renewed the claim meanwhile
    assert await b.outbox.deliver_due() == 1  # the claim ran out: b takes it over
    await b.idle()
    platform.resume.set()  # a wakes up in the middle of its delivery
    await a.idle()
    assert platform.posts == [("r1", 0), ("r1", 1)]
    [row] = await store.replies(KEY.id)
    assert row.state == "sent"


class ForgetfulPlatform(TwoPartPlatform):
    """Like Discord past its nonce window: dedupes nothing; the adapter skips only the parts the
    outbox says were posted (`reply.already_posted`). The first attempt fails after part 0."""

    def __init__(self) -> None:
        self.posts: list[tuple[str, int]] = []
        self.fail_once = True

    async def deliver(self, reply: Reply) -> list[str]:
        posted = dict(enumerate(reply.already_posted))
        for part in range(2):
            if part in posted:
                continue
            reply.fence.check()
            if part == 1 and self.fail_once:
                self.fail_once = False
                raise RetryableDeliveryError("503 while posting part 2")
            self.posts.append((reply.id, part))
            posted[part] = f"{reply.id}-{part}"
            await reply.fence.posted(part, posted[part])
        return [posted[part] for part in range(2)]


async def test_a_retry_by_another_process_posts_only_the_missing_parts(
    store: SqliteStore, clock: FakeClock
) -> None:
    platform = ForgetfulPlatform()
    a = make_engine(store, clock, ScriptedReplier(), platform, owner="a")  # type: ignore[arg-type]
    await a.ingest(message(1))
    await clock.advance(1.5)
    await a.run_due()
    await a.idle()
    assert platform.posts == [("r1", 0)]
    b = make_engine(store, clock, ScriptedReplier(), platform, owner="b")  # type: ignore[arg-type]
    await clock.advance(60.0)
    assert await b.outbox.deliver_due() == 1
    await b.idle()
    assert platform.posts == [("r1", 0), ("r1", 1)]
    [row] = await store.replies(KEY.id)
    assert (row.state, row.platform_message_ids) == ("sent", ("r1-0", "r1-1"))
